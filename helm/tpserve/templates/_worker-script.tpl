{{/* The entrypoint of a worker pod: starts its gpusPerNode ranks, rank = ordinal × gpusPerNode +
local rank, the ordinal the pod's index in its LeaderWorkerSet group (TPSERVE_POD_INDEX, mode
lws) or read from the pod's name (POD_NAME=<statefulset>-<ordinal>; not HOSTNAME, which is the
node's name under hostNetwork). When any rank exits the others are
stopped and the pod exits with that rank's status, so Kubernetes restarts the pod and its ranks
register again; SIGTERM stops every rank and exits 0. Needs bash >= 5.1 (wait -n -p). */}}
{{- define "tpserve.workerScript" -}}
set -euo pipefail
ranks_per_pod={{ .Values.workers.gpusPerNode }}
ordinal="${TPSERVE_POD_INDEX:-${POD_NAME##*-}}"
if [[ ! $ordinal =~ ^[0-9]+$ ]]; then
  echo "tpserve-worker-pod: no pod index (TPSERVE_POD_INDEX=${TPSERVE_POD_INDEX:-}, POD_NAME=$POD_NAME)" >&2
  exit 1
fi
first=$((ordinal * ranks_per_pod))
declare -A rank_of=()
stopping=0
trap 'stopping=1; kill -TERM "${!rank_of[@]}" 2>/dev/null || true' TERM INT
for ((local_rank = 0; local_rank < ranks_per_pod && !stopping; local_rank++)); do
  tpserve-worker --coordinator "$TPSERVE_CLUSTER_ADDRESS" --rank "$((first + local_rank))" \
    --local-rank "$local_rank" --model "$TPSERVE_MODEL" \
    --host "$POD_IP" --port "$((TPSERVE_WORKER_PORT + local_rank))" \
    --metrics-port "$((TPSERVE_METRICS_PORT + local_rank))" \
    --threads {{ .Values.workers.threads }} \
    {{- if eq .Values.device "cuda" }}
    --gpu-memory-utilization {{ .Values.workers.gpuMemoryUtilization }} \
    {{- end }}
    --register-timeout {{ .Values.workers.registerTimeoutSeconds }} &
  rank_of[$!]=$((first + local_rank))
done
echo "tpserve-worker-pod: $POD_NAME started ranks $first..$((first + ranks_per_pod - 1)) on $POD_IP"
status=0
wait -n -p exited "${!rank_of[@]}" || status=$?
if ((stopping)); then
  echo "tpserve-worker-pod: stopping ranks $first..$((first + ranks_per_pod - 1))"
  wait || true
  exit 0
fi
echo "tpserve-worker-pod: rank ${rank_of[$exited]} exited with status $status; stopping the others" >&2
unset "rank_of[$exited]"
kill -TERM "${!rank_of[@]}" 2>/dev/null || true
wait || true
exit "$status"
{{- end }}

{{/* The worker pod's startup and liveness probe: the coordinator lists every rank of this pod
at its address. A restarted coordinator hears from the ranks within seconds (they notice the
closed connection and register again); a rank it still does not list after the probe's patience
fails it, and the pod restarts. */}}
{{- define "tpserve.workerRegisteredProbe" -}}
exec:
  command:
    - /bin/bash
    - -c
    - |
      status="$(tpctl --timeout 5 --json status)" || exit 1
      for ((local_rank = 0; local_rank < {{ .Values.workers.gpusPerNode }}; local_rank++)); do
        address="$POD_IP:$((TPSERVE_WORKER_PORT + local_rank))"
        if ! grep -qF "\"$address\"" <<<"$status"; then
          echo "the coordinator at $TPSERVE_COORDINATOR does not list $address"
          exit 1
        fi
      done
{{- end }}
