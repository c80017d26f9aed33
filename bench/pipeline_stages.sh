#!/usr/bin/env bash
# Pipeline stages against tensor parallelism on this host, with one step in flight and with one
# per stage: a model at 8 streams (128 prompt, 64 output tokens), every configuration once per
# round, rounds one after the other (compare within a round: the machine is noisy).
#   bench/pipeline_stages.sh [rounds] [model] [configurations]
# A configuration is tpW (W tensor-parallel ranks) or ppP:S (P stages of one rank, S steps in
# flight). The default model is the bundled one, whose 9 heads split by 1, 3 or 9: "tp1 pp2:1
# pp2:2 tp3 pp3:1 pp3:3". Prints one line per configuration and round: output tokens/s, ITL p50
# and p99.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${1:-2}"
model="${2:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
configs="${3:-tp1 pp2:1 pp2:2 tp3 pp3:1 pp3:3}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

run() {  # configuration
  local args=(--model "$model" --kv-cache-blocks 2048 --concurrency 8 --num-requests 32
              --warmup 2 --input-len 128 --output-len 64)
  case "$1" in
    tp*) args+=(--tp "${1#tp}") ;;
    pp*:*)
      local stages="${1#pp}"
      stages="${stages%%:*}"
      args+=(--tp "$stages" "--server-arg=--pipeline-parallel-size=$stages"
             "--server-arg=--steps-in-flight=${1#*:}") ;;
    *) echo "unknown configuration $1" >&2; exit 2 ;;
  esac
  "$root/build/bin/tpserve-bench" "${args[@]}" >"$out/run.txt" 2>/dev/null
  printf '%-8s %s  ITL p50/p99 %s ms\n' "$1" \
    "$(grep -o 'output token throughput.*' "$out/run.txt")" \
    "$(awk '/^inter-token/ {print $2 "/" $3}' "$out/run.txt")"
}

for r in $(seq 1 "$rounds"); do
  echo "round $r of $rounds" >&2
  for config in $configs; do run "$config"; done
done
