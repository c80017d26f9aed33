#!/usr/bin/env bash
# Prefill and decode tokens/s of tpserve-generate and of llama.cpp (llama-cpp-python) on the same
# prompt, greedy, the same number of threads, EOS ignored so both decode the same token count.
#   bench/compare_generate.sh [threads] [max_tokens]
# Needs: build/bin/tpserve-generate, the model (scripts/fetch-model.sh) and
#        pip install -r scripts/requirements-golden.txt
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
threads="${1:-$(nproc)}"
max_tokens="${2:-128}"
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
prompt="$(python3 -c 'import json,sys; print("".join(json.load(open(sys.argv[1]))[i] for i in (1, 3, 5, 7, 9)))' \
  "$root/tests/golden/logit_prompts.json")"

echo "== tpserve-generate (--threads $threads)"
tp="$("$root/build/bin/tpserve-generate" --threads "$threads" \
  --model "$model" --prompt "$prompt" --max-tokens "$max_tokens" --temperature 0 --ignore-eos 2>&1 >/dev/null \
  | grep -E '^(prefill|decode):')"
echo "$tp"
echo "== llama.cpp (n_threads=$threads)"
lc="$(python3 "$root/bench/llamacpp_speed.py" --model "$model" --prompt "$prompt" \
  --max-tokens "$max_tokens" --threads "$threads")"
echo "$lc"
rate() { echo "$1" | grep "^$2:" | sed -E 's/.*\(([0-9.]+) tokens\/s\).*/\1/'; }
python3 - "$(rate "$tp" prefill)" "$(rate "$lc" prefill)" "$(rate "$tp" decode)" "$(rate "$lc" decode)" <<'PY'
import sys
tp_pre, lc_pre, tp_dec, lc_dec = map(float, sys.argv[1:])
print(f"== ratio tpserve / llama.cpp: prefill {tp_pre / lc_pre:.2f}x, decode {tp_dec / lc_dec:.2f}x")
PY
