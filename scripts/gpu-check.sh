#!/usr/bin/env bash
# The GPU check, run ON the GPU machine from the repository root, with gpu-pkg/ carried there
# (made here by scripts/package-gpu-build.sh). One command, no package registry:
#   1. nvidia-smi;
#   2. every GPU test executable in the package, each printed as PASS, SKIP or FAIL (the
#      pipeline-stage tests need 2 GPUs: the report says whether they ran);
#   3. tpserve-bench-cuda (decode-shaped bf16 and FP8 GEMMs, bf16 and FP8-KV decode attention,
#      vs peak HBM bandwidth);
#   4. T=1 decode tokens/s on SmolLM2-135M and on a Llama-3-8B-shaped random-weight model, through
#      tpserve-generate --device cuda (decode through the CUDA graph of batch 1), the latter also
#      with FP8 weights and KV cache (--quantization fp8 --kv-cache-dtype fp8).
# Each part has a time share (the plan, cheapest and most telling first). A part may also use
# what earlier parts left unspent, never what later parts' shares need; a part whose share no
# longer fits the budget (GPU_CHECK_BUDGET_S, default 420 s after unpacking) is reported SKIP
# with the reason, and a part that outlives its time FAIL. `--dry-run` prints the plan and
# its total and runs nothing.
# The report (everything printed) goes to GPU_CHECK_REPORT, by default $OUT/gpu-check.txt where
# the device tool's OUT is set; each part's log to GPU_CHECK_LOGS (default /tmp/gpu-check), packed
# as $OUT/gpu-check-logs.tar.gz where OUT is set.
# Exits 1 if any test or part failed or timed out, 0 otherwise (skips are not failures).
#
# GPU_CHECK_ONLY: an extended regex; only the parts whose names match it run (reruns of what
# failed, e.g. GPU_CHECK_ONLY='cuda_gemm_test|cuda_families_test').
# GPU_CHECK_LLAMA_LAYERS (default 8 of Llama-3-8B's 32): decode time grows about linearly with
# the layer count, and so does writing the random weights.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
pkg="$root/gpu-pkg"
logs="${GPU_CHECK_LOGS:-/tmp/gpu-check}"
budget_s="${GPU_CHECK_BUDGET_S:-420}"
llama_layers="${GPU_CHECK_LLAMA_LAYERS:-8}"
only="${GPU_CHECK_ONLY:-}"
report="${GPU_CHECK_REPORT:-${OUT:+$OUT/gpu-check.txt}}"
dry_run=false
case "${1:-}" in
  --dry-run) dry_run=true ;;
  "") ;;
  *) echo "usage: scripts/gpu-check.sh [--dry-run]" >&2; exit 2 ;;
esac
failed=()

say() { echo "gpu-check: $*"; }

# The GPU tests: the package's, or (for --dry-run on the build machine) tests/gpu's.
if [[ -f $pkg/MANIFEST ]]; then
  mapfile -t gpu_tests < <(sed -n 's/^gpu-test: //p' "$pkg/MANIFEST")
elif $dry_run; then
  mapfile -t gpu_tests < <(sed -n 's/^add_executable(\([A-Za-z0-9_-]*\)[ )].*/bin\/\1/p' \
                             tests/gpu/CMakeLists.txt)
else
  say "no gpu-pkg/MANIFEST: run scripts/package-gpu-build.sh on the build machine and carry gpu-pkg"
  exit 2
fi

# Seconds each part is planned to take at most: the tests that build and run whole models or
# clusters get more than the single-kernel ones.
test_share() {
  case "$(basename "$1")" in
    cuda_forward_pass_test | cuda_cluster_test) echo 40 ;;
    cuda_paged_attention_test | cuda_families_test | cuda_model_sampling_test) echo 30 ;;
    *) echo 10 ;;
  esac
}
plan_names=() plan_shares=()
plan() { plan_names+=("$1"); plan_shares+=("$2"); }
for test in "${gpu_tests[@]}"; do plan "$(basename "$test")" "$(test_share "$test")"; done
plan tpserve-bench-cuda 40
plan mkmodel-smollm2 10
plan decode-smollm2 20
plan mkmodel-llama3-8b 25
plan decode-llama3-8b 30
plan decode-llama3-8b-fp8 25

planned=0
for share in "${plan_shares[@]}"; do planned=$(( planned + share )); done
if $dry_run; then
  for k in "${!plan_names[@]}"; do printf '%-40s %4d s\n' "${plan_names[$k]}" "${plan_shares[$k]}"; done
  printf '%-40s %4d s (budget %d s)\n' total "$planned" "$budget_s"
  (( planned <= budget_s )) || { say "the plan is over the budget"; exit 1; }
  exit 0
fi

mkdir -p "$logs"
if [[ -n $report ]]; then
  mkdir -p "$(dirname "$report")"
  exec > >(tee "$report") 2>&1
fi
if [[ ! -d $pkg/bin ]]; then
  say "unpacking gpu-pkg/payload.tar.xz"
  if command -v xz >/dev/null; then
    tar -C "$pkg" -xJf "$pkg/payload.tar.xz"
  else  # no xz on the target: Python's lzma reads it
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$pkg/payload.tar.xz" "$pkg"
  fi
fi
start_s=$SECONDS

# Libraries too large to carry (MANIFEST "target-lib:"): the target's CUDA toolkit, or the
# nvidia-* wheels that PyTorch installs.
search_dirs=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib
             /usr/lib/x86_64-linux-gnu)
if command -v python3 >/dev/null; then
  while read -r site; do
    for d in "$site"/nvidia/*/lib; do [[ -d $d ]] && search_dirs+=("$d"); done
  done < <(python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null || true)
fi
extra_dirs=""
while read -r name; do
  found=""
  for d in "${search_dirs[@]}"; do
    if [[ -e $d/$name ]]; then found="$d"; break; fi
  done
  if [[ -z $found ]]; then
    say "WARNING: $name (needed, not packed) is not on this machine; binaries that load it will fail"
    continue
  fi
  say "$name from $found"
  [[ ":$extra_dirs:" == *":$found:"* ]] || extra_dirs="${extra_dirs:+$extra_dirs:}$found"
done < <(sed -n 's/^target-lib: \([^ ]*\).*/\1/p' "$pkg/MANIFEST")
export LD_LIBRARY_PATH="$pkg/lib${extra_dirs:+:$extra_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$pkg/bin:$PATH"

# The plan's shares from part NAME on (NAME's own included).
shares_from() {
  local k sum=0 counting=false
  for k in "${!plan_names[@]}"; do
    [[ ${plan_names[$k]} == "$1" ]] && counting=true
    $counting && sum=$(( sum + plan_shares[k] ))
  done
  echo "$sum"
}
share_of() {
  local k
  for k in "${!plan_names[@]}"; do
    [[ ${plan_names[$k]} == "$1" ]] && { echo "${plan_shares[$k]}"; return; }
  done
  echo 0
}

# run_part NAME CMD...: runs CMD under timeout with its output in $logs/NAME.log, allowed its
# share plus what earlier parts left unspent. Sets part_status (ok, fail, timeout or skip) and
# part_rc; reports timeouts and skips itself.
run_part() {
  local name=$1 share left limit
  shift
  share=$(share_of "$name")
  left=$(( budget_s - (SECONDS - start_s) ))
  limit=$(( left - $(shares_from "$name") + share ))
  part_rc=0
  if [[ -n $only && ! $name =~ $only ]]; then
    part_status=skip
    return 0
  fi
  if (( limit < share )); then
    part_status=skip
    say "SKIP $name (its ${share} s share no longer fits: ${left} s of the ${budget_s} s budget left)"
    return 0
  fi
  timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1 || part_rc=$?
  if (( part_rc == 124 || part_rc == 137 )); then
    part_status=timeout
    say "FAIL $name (timed out after $limit s; log $logs/$name.log)"
    tail -n 20 "$logs/$name.log" | sed 's/^/  | /'
    failed+=("$name")
  elif (( part_rc != 0 )); then
    part_status=fail
  else
    part_status=ok
  fi
}

# The number in gtest's closing summary line "[  TAG  ] N test(s)...", or 0.
gtest_count() {
  local n
  n=$(sed -n "s/^\[  *$1  *\] \([0-9][0-9]*\) tests\{0,1\}[.,].*/\1/p" "$2" | tail -n 1)
  echo "${n:-0}"
}

echo "== nvidia-smi"
timeout 30 nvidia-smi || say "nvidia-smi failed (exit $?)"
grep -E '^(built|commit|build|cuda):' "$pkg/MANIFEST" | sed 's/^/gpu-check: package /' || true
say "plan: ${#plan_names[@]} parts, ${planned} s of shares, budget ${budget_s} s"

gpus=$(timeout 30 nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l || true)
if (( ${gpus:-0} >= 2 )); then
  say "$gpus GPUs: the pipeline-stage tests (NCCL send/recv between stages) run"
else
  say "${gpus:-0} GPU(s): the pipeline-stage tests (NCCL send/recv between two stages, each on a" \
      "GPU of its own) need 2 and are reported as skipped"
fi

echo "== GPU tests"
for test in "${gpu_tests[@]}"; do
  name="$(basename "$test")"
  part_start=$SECONDS
  run_part "$name" "$pkg/$test"
  [[ $part_status == skip || $part_status == timeout ]] && continue
  log="$logs/$name.log"
  passed=$(gtest_count PASSED "$log")
  skipped=$(gtest_count SKIPPED "$log")
  failures=$(gtest_count FAILED "$log")
  took="$(( SECONDS - part_start )) s"
  if [[ $part_status == fail ]]; then
    say "FAIL $name (exit $part_rc, $took; $passed passed, $skipped skipped, $failures failed)"
    { grep -E '^\[  FAILED  \] [A-Za-z]|Failure$' "$log" || true; } | head -n 20 | sed 's/^/  | /'
    tail -n 5 "$log" | sed 's/^/  | /'
    failed+=("$name")
  else
    # The first skip's reason: on a GPU machine only the no-device tests should skip.
    reason=$({ grep -m1 -A1 ': Skipped$' "$log" || true; } | tail -n 1)
    if (( passed == 0 && skipped > 0 )); then
      say "SKIP $name ($skipped skipped, $took: ${reason:-no reason printed})"
    elif (( skipped > 0 )); then
      say "PASS $name ($passed passed, $skipped skipped, $took, first: ${reason:-no reason printed})"
    else
      say "PASS $name ($passed passed, $took)"
    fi
  fi
done

echo "== tpserve-bench-cuda"
run_part tpserve-bench-cuda tpserve-bench-cuda --benchmark_min_time=0.3
cat "$logs/tpserve-bench-cuda.log" 2>/dev/null || true
if [[ $part_status == fail ]]; then
  say "FAIL tpserve-bench-cuda (exit $part_rc)"
  failed+=(tpserve-bench-cuda)
fi

echo "== T=1 decode"
# decode NAME MODEL [FLAGS...]: 128 tokens after a short prompt, greedy, EOS ignored; prints the
# decode line.
decode() {
  local name=$1 model=$2
  shift 2
  run_part "$name" tpserve-generate --device cuda --model "$model" \
    --prompt "The history of the" --max-tokens 128 --ignore-eos "$@"
  case $part_status in
    ok) say "$name: $(grep -E '^decode:' "$logs/$name.log" || echo 'no decode line in its output')" ;;
    fail)
      say "FAIL $name (exit $part_rc)"
      tail -n 10 "$logs/$name.log" | sed 's/^/  | /'
      failed+=("$name")
      ;;
  esac
}
# mkmodel NAME PATH ARGS...: writes a random-weight model; true when it did.
mkmodel() {
  local name=$1 path=$2
  shift 2
  run_part "$name" tpserve-mkmodel --output "$path" --dtype bf16 "$@"
  if [[ $part_status == fail ]]; then
    say "FAIL $name (exit $part_rc)"
    tail -n 5 "$logs/$name.log" | sed 's/^/  | /'
    failed+=("$name")
  fi
  [[ $part_status == ok ]]
}
# Read whole before matching: `grep -q` closing the pipe early would fail it under pipefail, and
# a binary that does not load must say so rather than look like an old one.
generate_help="$(tpserve-generate --help 2>&1)" || {
  say "FAIL tpserve-generate --help: $(head -n 3 <<<"$generate_help")"
  failed+=(tpserve-generate)
  generate_help=""
}
if [[ $generate_help != *--device* ]]; then
  [[ -z $generate_help ]] || say "this package's tpserve-generate has no --device flag: no decode numbers"
else
  smollm2="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  if [[ -f $smollm2 ]]; then
    decode decode-smollm2 "$smollm2"
  else
    say "models/ not carried: decoding a random-weight model of SmolLM2-135M's shape instead"
    shape=/tmp/gpu-check-smollm2-shape.gguf
    if mkmodel mkmodel-smollm2 "$shape" --layers 30 --hidden 576 --heads 9 --kv-heads 3 \
         --ffn 1536 --vocab 49152 --context 8192; then
      decode decode-smollm2 "$shape"
    fi
    rm -f "$shape"
  fi

  llama=/tmp/gpu-check-llama3-8b-shape.gguf
  say "Llama-3-8B shape with $llama_layers of its 32 layers (GPU_CHECK_LLAMA_LAYERS)"
  if mkmodel mkmodel-llama3-8b "$llama" --layers "$llama_layers" --hidden 4096 --heads 32 \
       --kv-heads 8 --ffn 14336 --vocab 128256 --context 8192; then
    decode decode-llama3-8b "$llama"
    if [[ $generate_help == *--quantization* ]]; then
      decode decode-llama3-8b-fp8 "$llama" --quantization fp8 --kv-cache-dtype fp8
    else
      say "this package's tpserve-generate has no --quantization flag: no FP8 decode number"
    fi
  fi
  rm -f "$llama"
fi

echo "== summary"
say "$(( SECONDS - start_s )) s after unpacking; logs in $logs"
if [[ -n ${OUT:-} ]]; then
  tar -C "$logs" -czf "$OUT/gpu-check-logs.tar.gz" . && say "logs packed as \$OUT/gpu-check-logs.tar.gz"
fi
if (( ${#failed[@]} > 0 )); then
  say "FAILED: ${failed[*]}"
  exit 1
fi
say "no failures"
