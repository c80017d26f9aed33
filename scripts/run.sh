#!/usr/bin/env bash
# Starts tpserve on the bundled SmolLM2 model and answers a prompt. Builds what is missing first.
#   scripts/run.sh ["your prompt"]
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
prompt="${1:-What is the capital of France?}"

scripts/setup.sh >/dev/null
scripts/fetch-model.sh >/dev/null
if [ ! -x build/bin/tpserve-generate ]; then
  echo "run: building tpserve (first run only)"
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j "$(nproc)" --target tpserve-generate
fi
exec build/bin/tpserve-generate --model models/SmolLM2-135M-Instruct.Q4_1.gguf --chat \
  --prompt "$prompt" --max-tokens 64 --temperature 0
