#!/usr/bin/env bash
# Output tokens/s of constrained requests with jump-forward decoding (the default) against
# --no-jump-forward, rounds alternated on one machine: every request is constrained to
# bench/schemas/long_keys.json (six long fixed keys around short values: most of each answer is
# text the schema forces), greedy, through tpserve-bench's local cluster of the bundled model.
# Jump-forward tokens count as output, as they do in the server's usage.
#   bench/compare_jump_forward.sh [concurrency] [rounds] [requests per round]
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
concurrency="${1:-1}"
rounds="${2:-3}"
requests="${3:-16}"
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
json="$(mktemp)"
log="$(mktemp)"
trap 'rm -f "$json" "$log"' EXIT

declare -A rates
for round in $(seq 1 "$rounds"); do
  for mode in on off; do
    extra=()
    [[ $mode == off ]] && extra=(--server-arg=--no-jump-forward)
    "$root/build/bin/tpserve-bench" --model "$model" --tp 1 --concurrency "$concurrency" \
      --num-requests "$requests" --warmup "$concurrency" --input-len 32 --output-len 400 \
      --constrained-every 1 --constraint-json-schema "$root/bench/schemas/long_keys.json" \
      --json "$json" "${extra[@]}" >/dev/null 2>"$log" || { cat "$log" >&2; exit 1; }
    rate="$(python3 -c 'import json, sys; print("%.1f" % json.load(open(sys.argv[1]))["output_tokens_per_s"])' "$json")"
    echo "round $round jump-forward $mode: $rate output tok/s" >&2
    rates[$mode]+="$rate "
  done
done
python3 - ${rates[on]} -- ${rates[off]} <<'PY'
import statistics, sys
args = sys.argv[1:]
on, off = args[:args.index("--")], args[args.index("--") + 1:]
on, off = [float(x) for x in on], [float(x) for x in off]
print("output tok/s  jump-forward: %s (median %.1f)  --no-jump-forward: %s (median %.1f)  "
      "ratio %.2f" % (" ".join("%.1f" % x for x in on), statistics.median(on),
                      " ".join("%.1f" % x for x in off), statistics.median(off),
                      statistics.median(on) / statistics.median(off)))
PY
