#!/usr/bin/env bash
# Two builds of tpserve side by side on this machine, rounds alternated A B A B, so that a change
# is judged by a ratio measured in one run (the machine is shared and noisy):
#   - tpserve-bench-step: one engine step through a local cluster at T=1 and T=3;
#   - tpserve-bench: the bundled model at 1, 8 and 32 streams (128 prompt, 64 output tokens).
#   bench/compare_builds.sh OLD_BIN_DIR NEW_BIN_DIR [rounds]
# Each BIN_DIR holds tpserve-bench, tpserve-bench-step, tpserve-coordinator and tpserve-worker
# (copy build/bin of the old commit aside before rebuilding).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
old="$1"
new="$2"
rounds="${3:-2}"
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

run_step() {  # bin label round
  "$1/tpserve-bench-step" --benchmark_format=json \
    >"$out/step-$2-$3.json" 2>/dev/null
}
run_serving() {  # bin label round concurrency requests
  "$1/tpserve-bench" --model "$model" --tp 1 --kv-cache-blocks 2048 --concurrency "$4" \
    --num-requests "$5" --warmup 2 --input-len 128 --output-len 64 \
    --json "$out/serve-$2-$3-c$4.json" >/dev/null 2>&1
}

for r in $(seq 1 "$rounds"); do
  for side in old new; do
    bin="$old"
    [ "$side" = new ] && bin="$new"
    echo "round $r/$rounds: $side" >&2
    run_step "$bin" "$side" "$r"
    run_serving "$bin" "$side" "$r" 1 16
    run_serving "$bin" "$side" "$r" 8 32
    run_serving "$bin" "$side" "$r" 32 64
  done
done

python3 - "$out" "$rounds" <<'PY'
import json, os, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def step_us(side, r):  # the benchmark's per-step counter, by T
    doc = json.load(open(os.path.join(out, f"step-{side}-{r}.json")))
    return {"T=" + b["name"].split("/")[1]: b["step_us"] for b in doc["benchmarks"]
            if b.get("run_type", "iteration") == "iteration"}

def serving(side, r, c):
    return json.load(open(os.path.join(out, f"serve-{side}-{r}-c{c}.json")))

print("| round | measure | old | new | new / old |")
print("| ---: | --- | ---: | ---: | ---: |")
for r in range(1, rounds + 1):
    old, new = step_us("old", r), step_us("new", r)
    for name in sorted(old):
        print(f"| {r} | {name} step | {old[name]:.0f} us | {new[name]:.0f} us | "
              f"{new[name] / old[name]:.2f} |")
    for c in (1, 8, 32):
        o, n = serving("old", r, c), serving("new", r, c)
        key = "output_tokens_per_s"
        print(f"| {r} | tpserve-bench C={c} output tok/s | {o[key]:.1f} | {n[key]:.1f} | "
              f"{n[key] / o[key]:.2f} |")
PY
