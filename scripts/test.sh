#!/usr/bin/env bash
# The test command: installs what is missing, fetches the model, builds, and runs every test.
# Also builds the GGUF parser tests with AddressSanitizer and runs them on corrupt files, and runs
# every fuzz target for 30 s under ASan + UBSan (scripts/fuzz.sh; docs/FUZZING.md; the full form
# is scripts/fuzz.sh 600). The container tests get a Docker engine from scripts/docker-engine.sh,
# which this starts when none runs and stops at the end.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
jobs="$(nproc)"

scripts/setup.sh
scripts/fetch-model.sh
scripts/fetch-llama-cpp-models.sh >/dev/null
scripts/fetch-xgrammar.sh >/dev/null
scripts/fetch-helm.sh >/dev/null

# Line tables only (-g1): backtraces and profiles keep file and line, and the build takes about
# a third less time than with full debug information.
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
cmake --build build -j "$jobs"
scripts/docker-engine.sh start
trap 'scripts/docker-engine.sh stop' EXIT
ctest --test-dir build --output-on-failure -j "$jobs" "$@"
scripts/docker-engine.sh stop

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTPSERVE_ASAN=ON
cmake --build build-asan -j "$jobs" --target gguf_rejects_bad_files_test
ctest --test-dir build-asan --output-on-failure -R '^gguf_rejects_bad_files$'

scripts/fuzz.sh 30
