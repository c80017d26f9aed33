#!/usr/bin/env bash
# Decode tokens/s of a Q4_K_M-shaped model against its Q4_0 twin (the same random weights before
# quantization), tpserve-generate alone, rounds alternated: what keeping K-quants in their blocks
# costs against the plain 4-bit format. The shape is Llama-like (hidden 2048, ffn 5632, 16 heads
# over 4 KV heads, 16 layers, a 16,384-token vocabulary: ~0.75 B parameters, the output matrix
# ~4% of them as in a 7B model, so that the Q6_K share of the file is a real Q4_K_M's), written by
# tpserve-mkmodel into build/bench-models/ on first use. Decoding reads every weight once per
# token, so the file sizes, printed too, bound the ratio.
#   bench/compare_quant_types.sh [threads] [max_tokens] [rounds]
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
threads="${1:-$(nproc)}"
max_tokens="${2:-64}"
rounds="${3:-3}"
dir="$root/build/bench-models"
mkdir -p "$dir"
shape=(--layers 16 --hidden 2048 --ffn 5632 --heads 16 --kv-heads 4 --vocab 16384 --context 2048
       --seed 3)
for dtype in q4_k_m q4_0; do
  if [ ! -f "$dir/$dtype.gguf" ] || [ "$(cat "$dir/$dtype.shape" 2>/dev/null)" != "${shape[*]}" ]; then
    echo "compare_quant_types: writing $dir/$dtype.gguf" >&2
    "$root/build/bin/tpserve-mkmodel" --output "$dir/$dtype.gguf" --dtype "$dtype" "${shape[@]}"
    echo "${shape[*]}" > "$dir/$dtype.shape"
  fi
  echo "$dtype: $(stat -c %s "$dir/$dtype.gguf") bytes"
done

declare -A rates
for round in $(seq 1 "$rounds"); do
  for dtype in q4_k_m q4_0; do
    line="$("$root/build/bin/tpserve-generate" --threads "$threads" --model "$dir/$dtype.gguf" \
      --prompt "The quick brown fox jumps over the lazy dog." --max-tokens "$max_tokens" \
      --temperature 0 --ignore-eos 2>&1 >/dev/null | grep '^decode:')"
    rate="$(echo "$line" | sed -E 's/.*\(([0-9.]+) tokens\/s\).*/\1/')"
    echo "round $round $dtype: $line"
    rates[$dtype]+="$rate "
  done
done
python3 - ${rates[q4_k_m]} -- ${rates[q4_0]} <<'PY'
import statistics, sys
args = sys.argv[1:]
k, q = args[:args.index("--")], args[args.index("--") + 1:]
k, q = [float(x) for x in k], [float(x) for x in q]
# Each round runs the two models back to back: the median of the rounds' own ratios follows the
# machine's load less than the ratio of the two medians.
print("decode tok/s  Q4_K_M: %s (median %.2f)  Q4_0: %s (median %.2f)  ratio %.2f,"
      " median of the rounds' ratios %.2f"
      % (" ".join("%.2f" % x for x in k), statistics.median(k),
         " ".join("%.2f" % x for x in q), statistics.median(q),
         statistics.median(k) / statistics.median(q),
         statistics.median(a / b for a, b in zip(k, q))))
PY
