#!/usr/bin/env bash
# Starts a local tpserve cluster (coordinator + 3 CPU workers, tensor parallelism 3) on the
# bundled SmolLM2 model, answers a sample prompt through it, and keeps serving until Ctrl-C.
#   scripts/run.sh [--once] ["your prompt"] [further tpserve flags]
# The first run installs what is missing, fetches the model and builds tpserve, all with their
# output in build/run.log; the cluster's own logs go to tpserve.log (tpserve's --log-file, or -v).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
once=()
if [ "${1:-}" = "--once" ]; then
  once=(--once)
  shift
fi
prompt="${1:-What is the capital of France?}"
shift || true

mkdir -p build
log=build/run.log
: >"$log"
# Runs "$@" with its output in the log; on failure shows the log's end.
quietly() {
  if ! "$@" >>"$log" 2>&1; then
    echo >&2
    echo "run: '$*' failed; the end of $log:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
}

targets=(tpserve tpserve-coordinator tpserve-worker)
missing=0
for t in "${targets[@]}"; do [ -x "build/bin/$t" ] || missing=1; done
first="run: first run: installing what is missing, fetching the model, building tpserve (a few minutes; log in $log)"
if [ "$missing" = 1 ]; then
  if [ -t 1 ]; then printf '%s' "$first"; else echo "$first"; fi
fi
quietly scripts/setup.sh
quietly scripts/fetch-model.sh
if [ "$missing" = 1 ]; then
  quietly cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
  if [ -t 1 ]; then
    # The build's progress (Make's [ 35%], Ninja's [12/340]) at the end of the line, rewritten as
    # the build goes.
    set +e
    cmake --build build -j "$(nproc)" --target "${targets[@]}" 2>&1 | tee -a "$log" |
      sed -unE 's/^\[ *([0-9]+%|[0-9]+\/[0-9]+)\].*/\1/p' |
      while read -r step; do printf '\r%s [%s]' "$first" "$step"; done
    status="${PIPESTATUS[0]}"
    set -e
    echo
    if [ "$status" != 0 ]; then
      echo "run: the build failed; the end of $log:" >&2
      tail -20 "$log" >&2
      exit 1
    fi
  else
    quietly cmake --build build -j "$(nproc)" --target "${targets[@]}"
  fi
fi
exec build/bin/tpserve --model models/SmolLM2-135M-Instruct.Q4_1.gguf --tp 3 --device cpu \
  --prompt "$prompt" "${once[@]}" "$@"
