#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang under ASan and UBSan in build-fuzz/ and runs
# each for SECONDS (default 60) from a copy of its seed corpus fuzz/corpus/<target>/, so that
# the inputs a run discovers never land in the tree. One line per target; exits non-zero when
# any target reports a crash, a leak, a UBSan error or a timeout, leaving the input that did it
# in build-fuzz/artifacts/ (replay: build-fuzz/bin/<target>_fuzz ARTIFACT).
#   scripts/fuzz.sh [SECONDS] [TARGET...]     TARGET: openai_request gguf tokenizer step hf_folder
#                                             constraint chat_tools
# FUZZ_JOBS sets the build's parallelism and how many targets run at once (default: the number
# of cores).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
seconds="${1:-60}"
# libFuzzer reads -max_total_time=0 as "no limit".
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz: SECONDS must be a positive integer, not '$seconds'" >&2
  exit 2
fi
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(openai_request gguf tokenizer step hf_folder constraint chat_tools)
build="$root/build-fuzz"
jobs="${FUZZ_JOBS:-$(nproc)}"

# Longest input per target: a request body, a tiny model file, a text, a few steps.
declare -A max_len=([openai_request]=4096 [gguf]=65536 [tokenizer]=1024 [step]=8192
                    [hf_folder]=65536 [constraint]=512 [chat_tools]=4096)
# Seconds one input may take: a constraint is compiled over the whole vocabulary, as the server
# does (the server bounds that by --grammar-compile-timeout).
declare -A timeout=([constraint]=30)
for t in "${targets[@]}"; do
  [ -n "${max_len[$t]:-}" ] || { echo "fuzz: unknown target '$t'" >&2; exit 2; }
done

scripts/fetch-model.sh >/dev/null  # the tokenizer and request targets load its vocabulary
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache
                                          -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
start=$SECONDS
mkdir -p "$build"
cmake -S . -B "$build" -DTPSERVE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" >"$build/configure.log" \
  || { cat "$build/configure.log" >&2; exit 1; }
cmake --build "$build" -j "$jobs" --target "${targets[@]/%/_fuzz}" >"$build/build.log" 2>&1 \
  || { tail -50 "$build/build.log" >&2; echo "fuzz: build failed ($build/build.log)" >&2; exit 1; }
echo "fuzz: built ${#targets[@]} targets in $((SECONDS - start)) s"

work="$(mktemp -d)"
# Fuzzers still running (the script was stopped) go before their corpora do.
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT
mkdir -p "$build/artifacts"
# The committed text seeds, then the binary ones (GGUF images, step streams) that
# fuzz/make_corpus.py writes from code here, with the main build's tpserve-mkmodel.
cp -r fuzz/corpus/. "$work/"
mkmodel="$root/build/bin/tpserve-mkmodel"
[ -x "$mkmodel" ] || { echo "fuzz: $mkmodel is missing: cmake --build build --target tpserve-mkmodel" >&2; exit 1; }
python3 fuzz/make_corpus.py "$root/build" "$work" >"$build/make_corpus.log" 2>&1 \
  || { cat "$build/make_corpus.log" >&2; echo "fuzz: fuzz/make_corpus.py failed" >&2; exit 1; }
# One target per core at a time: each is single-threaded, so running them side by side gives each
# the executions it would get alone, in a fraction of the wall time.
run_target() {
  local t="$1" status=0
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=0" UBSAN_OPTIONS="print_stacktrace=1" \
    "$build/bin/${t}_fuzz" "$work/$t" -max_total_time="$seconds" -max_len="${max_len[$t]}" \
    -timeout="${timeout[$t]:-10}" -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" >"$build/$t.log" 2>&1 || status=$?
  echo "$status" >"$work/$t.status"
}
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_target "$t" &
  running=$((running + 1))
done
wait
failed=0
for t in "${targets[@]}"; do
  log="$build/$t.log"
  status="$(cat "$work/$t.status" 2>/dev/null || echo "none")"
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")"
  cov="$(grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*' "$log" | tail -1 || true)"
  if [ "$status" = 0 ]; then
    echo "fuzz: $t ok: ${seconds} s, ${runs:-?} runs (${rate:-?}/s), $cov, 0 crashes"
  else
    failed=1
    echo "fuzz: $t FAILED (exit $status) after ${runs:-?} runs; log $log" >&2
    grep -E 'ERROR|SUMMARY|runtime error|violated|Test unit written' "$log" | head -20 >&2 || true
  fi
done
echo "fuzz: done in $((SECONDS - start)) s"
exit "$failed"
