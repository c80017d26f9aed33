{{/* A worker pod: gpusPerNode ranks (_worker-script.tpl) in its "worker" container. In mode lws a
group's leader pod is one too, with the coordinator's container beside its ranks. */}}
{{- define "tpserve.workerContainer" -}}
- name: worker
  image: {{ include "tpserve.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command:
    - /bin/bash
    - -c
    - |
      {{- include "tpserve.workerScript" . | nindent 6 }}
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    # The address every rank binds and advertises (gRPC, Gloo, NCCL bootstrap).
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    {{- if eq .Values.mode "lws" }}
    # The group's leader pod runs its coordinator. LeaderWorkerSet puts the leader's address and
    # this pod's index in the group first in every container's environment.
    - name: TPSERVE_CLUSTER_ADDRESS
      value: {{ printf "$(LWS_LEADER_ADDRESS):%d" (int .Values.coordinator.grpcPort) | quote }}
    - name: TPSERVE_COORDINATOR
      value: {{ printf "$(LWS_LEADER_ADDRESS):%d" (int .Values.coordinator.adminPort) | quote }}
    - name: TPSERVE_POD_INDEX
      value: "$(LWS_WORKER_INDEX)"
    {{- else }}
    # Where the ranks register (ClusterService).
    - name: TPSERVE_CLUSTER_ADDRESS
      value: {{ include "tpserve.coordinatorAddress" . | quote }}
    # Where tpctl goes: the probes, and kubectl exec ... -- tpctl status.
    - name: TPSERVE_COORDINATOR
      value: {{ include "tpserve.coordinatorAdminAddress" . | quote }}
    {{- end }}
    {{- include "tpserve.clusterTokenEnv" . | nindent 4 }}
    {{- include "tpserve.tlsEnv" . | nindent 4 }}
    - name: TPSERVE_WORKER_PORT
      value: {{ .Values.workers.port | quote }}
    # Local rank L serves its Prometheus metrics on this + L (tpserve-worker --metrics-port).
    - name: TPSERVE_METRICS_PORT
      value: {{ .Values.workers.metricsPort | quote }}
    - name: TPSERVE_MODEL
      value: {{ include "tpserve.modelPath" . | quote }}
    {{- include "tpserve.extraEnv" . | nindent 4 }}
    {{- if eq .Values.device "cuda" }}
    {{- with .Values.nccl.socketIfname }}
    - name: NCCL_SOCKET_IFNAME
      value: {{ . | quote }}
    {{- end }}
    {{- with .Values.nccl.ibHca }}
    - name: NCCL_IB_HCA
      value: {{ . | quote }}
    {{- end }}
    {{- with .Values.nccl.debug }}
    - name: NCCL_DEBUG
      value: {{ . | quote }}
    {{- end }}
    {{- with .Values.nccl.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- end }}
  ports:
    {{- range $local := until (int .Values.workers.gpusPerNode) }}
    - name: {{ printf "rank%d" $local }}
      containerPort: {{ add $.Values.workers.port $local }}
    {{- end }}
    {{- range $local := until (int .Values.workers.gpusPerNode) }}
    - name: {{ printf "metrics%d" $local }}
      containerPort: {{ add $.Values.workers.metricsPort $local }}
    {{- end }}
  startupProbe:
    {{- include "tpserve.workerRegisteredProbe" . | nindent 4 }}
    {{- toYaml .Values.workers.startupProbe | nindent 4 }}
  livenessProbe:
    {{- include "tpserve.workerRegisteredProbe" . | nindent 4 }}
    {{- toYaml .Values.workers.livenessProbe | nindent 4 }}
  resources:
    {{- $resources := deepCopy .Values.workers.resources }}
    {{- if eq .Values.device "cuda" }}
    {{- $limits := get $resources "limits" | default dict }}
    {{- $_ := set $limits .Values.workers.gpuResource (int .Values.workers.gpusPerNode) }}
    {{- $_ := set $resources "limits" $limits }}
    {{- end }}
    {{- toYaml $resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.workers.securityContext | nindent 4 }}
  volumeMounts:
    {{- include "tpserve.volumeMounts" . | nindent 4 }}
    - name: shm
      mountPath: /dev/shm
{{- end }}

{{/* The pod spec of a worker pod; (dict "root" $ "leader" true) for a LeaderWorkerSet leader. */}}
{{- define "tpserve.workerPodSpec" -}}
{{- $root := .root -}}
serviceAccountName: {{ include "tpserve.serviceAccountName" $root }}
automountServiceAccountToken: false
{{- include "tpserve.podPlacement" $root }}
# A terminating rank first asks the coordinator to drain its group (ClusterService.Leave).
terminationGracePeriodSeconds: {{ include "tpserve.terminationGracePeriod" $root }}
{{- if $root.Values.workers.hostNetwork }}
hostNetwork: true
# Still resolve the coordinator's Service name.
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
{{- if eq $root.Values.model.source "download" }}
initContainers:
  {{- include "tpserve.modelDownloadContainer" $root | nindent 2 }}
{{- end }}
containers:
  {{- if .leader }}
  {{- include "tpserve.coordinatorContainer" $root | nindent 2 }}
  {{- end }}
  {{- include "tpserve.workerContainer" $root | nindent 2 }}
volumes:
  {{- include "tpserve.volumes" $root | nindent 2 }}
  - name: shm
    emptyDir:
      medium: Memory
      sizeLimit: {{ $root.Values.workers.shmSize }}
{{- with $root.Values.workers.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.workers.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.workers.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
