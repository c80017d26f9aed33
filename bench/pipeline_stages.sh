#!/usr/bin/env bash
# Pipeline stages against tensor parallelism on this host, with one step in flight and with one
# per stage: the bundled model at 8 streams (128 prompt, 64 output tokens), every configuration
# once per round, rounds one after the other (compare within a round: the machine is noisy).
#   bench/pipeline_stages.sh [rounds] [concurrency] [requests]
# Prints one line per configuration and round: output tokens/s, ITL p50 and p99.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${1:-2}"
concurrency="${2:-8}"
requests="${3:-32}"
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

run() {  # label ranks stages steps_in_flight
  local args=(--model "$model" --tp "$2" --kv-cache-blocks 2048 --concurrency "$concurrency"
              --num-requests "$requests" --warmup 2 --input-len 128 --output-len 64)
  if (( $3 > 1 )); then
    args+=("--server-arg=--pipeline-parallel-size=$3" "--server-arg=--steps-in-flight=$4")
  fi
  "$root/build/bin/tpserve-bench" "${args[@]}" >"$out/run.txt" 2>/dev/null
  printf '%-22s %s  ITL p50/p99 %s ms\n' "$1" \
    "$(grep -o 'output token throughput.*' "$out/run.txt")" \
    "$(awk '/^inter-token/ {print $2 "/" $3}' "$out/run.txt")"
}

for r in $(seq 1 "$rounds"); do
  echo "round $r of $rounds" >&2
  run "TP 1" 1 1 1
  run "PP 2 x TP 1, 1 step" 2 2 1
  run "PP 2 x TP 1, 2 steps" 2 2 2
  run "TP 3" 3 1 1
  run "PP 3 x TP 1, 1 step" 3 3 1
  run "PP 3 x TP 1, 3 steps" 3 3 3
done
