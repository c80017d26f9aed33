#!/usr/bin/env bash
# LoRA adapters in the mix against the base model alone, on this host: the bundled model at tp 1
# with 4 random rank-16 adapters on every projection (bench/make_lora_adapters.py), 8 streams,
# 128 prompt and 64 output tokens, N = 32; every configuration once per round, rounds one after
# the other (compare within a round: the machine is noisy).
#   bench/lora_mix.sh [rounds] [model] [tp]
# Configurations: base (no adapters loaded), base+loaded (adapters loaded, every request on the
# base model), 4 adapters (requests take lora1..lora4 in turn), base+4 (base, lora1..lora4 in
# turn). Prints one line per configuration and round: output tokens/s, ITL p50 and p99.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${1:-2}"
model="${2:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
tp="${3:-1}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "writing 4 adapters" >&2
modules=()
for spec in $(python3 "$root/bench/make_lora_adapters.py" "$model" "$out/adapters"); do
  modules+=("--server-arg=--lora-modules=$spec")
done

run() {  # label, then tpserve-bench arguments
  local label="$1"
  shift
  "$root/build/bin/tpserve-bench" --model "$model" --tp "$tp" --kv-cache-blocks 2048 \
    --concurrency 8 --num-requests 32 --warmup 2 --input-len 128 --output-len 64 "$@" \
    >"$out/run.txt" 2>/dev/null
  printf '%-12s %s  ITL p50/p99 %s ms\n' "$label" \
    "$(grep -o 'output token throughput.*' "$out/run.txt")" \
    "$(awk '/^inter-token/ {print $2 "/" $3}' "$out/run.txt")"
}

for r in $(seq 1 "$rounds"); do
  echo "round $r of $rounds" >&2
  run base
  run base+loaded "${modules[@]}"
  run "4 adapters" "${modules[@]}" --models lora1,lora2,lora3,lora4
  run base+4 "${modules[@]}" --models base,lora1,lora2,lora3,lora4
done
