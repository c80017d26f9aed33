#!/usr/bin/env bash
# Builds tpserve with CUDA (Release, build-gpu/) on this machine and packs what
# scripts/gpu-check.sh needs on a GPU machine into gpu-pkg/:
#   gpu-pkg/payload.tar.xz  bin/ (the binaries and the GPU test executables, stripped) and lib/
#                           (every shared library they load that the target may lack)
#   gpu-pkg/MANIFEST        what is inside, what the target must provide, how it was built
# The GPU machine has no package registry and receives at most 64 MiB with the working tree, so:
#  - the payload is compressed; gpu-check.sh unpacks it there;
#  - CUDA libraries bigger than GPU_PKG_MAX_LIB_MIB (cuBLASLt is 540 MB, NCCL 220 MB) are not
#    copied: gpu-check.sh finds them in the target's CUDA toolkit or PyTorch's nvidia-* wheels;
#  - the SmolLM2 model (98 MB) does not fit either; gpu-check.sh uses models/ when it is there
#    and otherwise makes a random-weight model of the same shape.
# Usage: scripts/package-gpu-build.sh
#   JOBS=N             build parallelism (default: every core)
#   GPU_PKG_ARCHS      CUDA architectures (default 90: H100/H200; "80;90" adds the A100)
#   GPU_PKG_MAX_MIB    the payload's bound (default 40): a larger payload fails the script
#   BUILD_DIR, BUILD_TYPE  default build-gpu and Release; another CUDA build tree can be packed
#                      instead (e.g. BUILD_DIR=build BUILD_TYPE=RelWithDebInfo; binaries are stripped)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
build_dir="${BUILD_DIR:-build-gpu}"
build_type="${BUILD_TYPE:-Release}"
pkg="gpu-pkg"
jobs="${JOBS:-$(nproc)}"
# The device lent here is an H200: one architecture builds in half the time of the project's two.
archs="${GPU_PKG_ARCHS:-90}"
max_lib_mib="${GPU_PKG_MAX_LIB_MIB:-16}"
# The payload's bound: the device tool carries 64 MiB with the working tree, and a smaller
# package leaves the lent minutes to the check rather than the transfer.
max_payload_mib="${GPU_PKG_MAX_MIB:-40}"
if [[ ! $max_payload_mib =~ ^[0-9]+$ ]]; then
  echo "package-gpu-build: GPU_PKG_MAX_MIB must be a whole number of MiB" >&2
  exit 2
fi

binaries=(tpserve tpserve-coordinator tpserve-worker tpserve-mkmodel tpserve-generate
          tpserve-bench-cuda)
# The GPU test executables: every add_executable in tests/gpu/CMakeLists.txt.
mapfile -t gpu_tests < <(sed -n 's/^add_executable(\([A-Za-z0-9_-]*\)[ )].*/\1/p' \
                           tests/gpu/CMakeLists.txt)
if [[ ${#gpu_tests[@]} -eq 0 ]]; then
  echo "package-gpu-build: found no add_executable in tests/gpu/CMakeLists.txt" >&2
  exit 1
fi

echo "package-gpu-build: configuring $build_dir ($build_type, TPSERVE_CUDA=ON, sm_$archs)"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="$build_type" -DTPSERVE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$archs" >/dev/null
echo "package-gpu-build: building ${binaries[*]} ${gpu_tests[*]} with $jobs jobs"
cmake --build "$build_dir" -j "$jobs" --target "${binaries[@]}" "${gpu_tests[@]}"

cuda_root="$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=\(.*\)\/bin\/nvcc$/\1/p' \
               "$build_dir/CMakeCache.txt")"
cuda_root="$(readlink -f "${cuda_root:-/usr/local/cuda}")"

staging="$build_dir/gpu-pkg-staging"
rm -rf "$staging" "$pkg"
mkdir -p "$staging/bin" "$staging/lib" "$pkg"

for name in "${binaries[@]}" "${gpu_tests[@]}"; do
  src="$build_dir/bin/$name"
  [[ -x $src ]] || { echo "package-gpu-build: $src was not built" >&2; exit 1; }
  cp "$src" "$staging/bin/$name"
  strip --strip-unneeded "$staging/bin/$name"
done

# Shared libraries, by ldd. The C runtime (glibc's libraries, libstdc++, libgcc_s) is the
# target's own: one built here for Debian 12 needs nothing newer than what a current distribution
# has, and mixing two glibcs in one process does not work. libcuda.so belongs to the driver.
is_system_lib() {
  case "$1" in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libmvec.so.* | libdl.so.* | \
      libpthread.so.* | librt.so.* | libresolv.so.* | libutil.so.* | libstdc++.so.* | \
      libgcc_s.so.* | libcuda.so.*) return 0 ;;
  esac
  return 1
}

declare -A copied=() from_target=()
for file in "$staging"/bin/*; do
  while read -r line; do
    if [[ $line == *"=> not found"* ]]; then
      echo "package-gpu-build: $(basename "$file") needs a library ldd cannot find: $line" >&2
      exit 1
    fi
    [[ $line == *" => /"* ]] || continue
    name="${line%% =>*}"
    path="${line#*=> }"
    path="${path%% (*}"
    is_system_lib "$name" && continue
    [[ -n ${copied[$name]:-} || -n ${from_target[$name]:-} ]] && continue
    real="$(readlink -f "$path")"
    size_mib=$(( $(stat -c %s "$real") >> 20 ))
    if [[ $real == "$cuda_root"/* && $size_mib -gt $max_lib_mib ]]; then
      from_target[$name]="$size_mib"
    else
      cp "$real" "$staging/lib/$name"
      copied[$name]="$path"
    fi
  done < <(ldd "$file")
done

# cuBLASLt and NCCL are opened at first use (common/shared_library.h), so ldd does not list them:
# their sonames come from the headers the build compiled against, as the loaders build them.
nccl_include="$(sed -n 's/^NCCL_INCLUDE_DIR:[A-Z]*=//p' "$build_dir/CMakeCache.txt")"
cublas_major="$(sed -n 's/^#define CUBLAS_VER_MAJOR \([0-9]*\).*/\1/p' "$cuda_root/include/cublas_api.h")"
nccl_major="$(sed -n 's/^#define NCCL_MAJOR \([0-9]*\).*/\1/p' "$nccl_include/nccl.h")"
for name in "libcublasLt.so.$cublas_major" "libnccl.so.$nccl_major"; do
  real="$(ldconfig -p | sed -n "s|^[[:space:]]*$name (.*) => ||p" | head -1)"
  [[ -z $real ]] && real="$(ls "$cuda_root"/lib*/"$name" 2>/dev/null | head -1)"
  [[ -n $real ]] || { echo "package-gpu-build: $name is not on this machine" >&2; exit 1; }
  from_target[$name]=$(( $(stat -L -c %s "$real") >> 20 ))
done

echo "package-gpu-build: compressing $(du -sm "$staging" | cut -f1) MiB (xz)"
# -9: a 64 MiB dictionary, so that the many binaries' shared code compresses once.
tar -C "$staging" -cf - bin lib | xz -T"$jobs" -9 >"$pkg/payload.tar.xz"
payload_bytes=$(stat -c %s "$pkg/payload.tar.xz")
payload_mib=$(( (payload_bytes + (1 << 20) - 1) >> 20 ))  # rounded up, as the bound is
if (( payload_bytes > max_payload_mib << 20 )); then
  echo "package-gpu-build: the payload is ${payload_mib} MiB, over its ${max_payload_mib} MiB bound" \
       "(GPU_PKG_MAX_MIB); the device tool carries at most 64 MiB with the working tree" >&2
  rm -rf "$pkg"  # so that gpu-check.sh cannot take it for a package
  exit 1
fi

{
  echo "# gpu-pkg: made by scripts/package-gpu-build.sh, run by scripts/gpu-check.sh"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  built_archs="$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build_dir/CMakeCache.txt" | head -1)"
  echo "build: $build_dir, $build_type, CUDA architectures ${built_archs:-80;90 (the project default)}"
  echo "cuda: $("$cuda_root/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') from $cuda_root"
  echo "payload: payload.tar.xz, ${payload_mib} MiB"
  for name in "${binaries[@]}"; do echo "binary: bin/$name"; done
  for name in "${gpu_tests[@]}"; do echo "gpu-test: bin/$name"; done
  for name in $(printf '%s\n' "${!copied[@]}" | sort); do
    echo "lib: lib/$name (from ${copied[$name]})"
  done
  for name in $(printf '%s\n' "${!from_target[@]}" | sort); do
    echo "target-lib: $name (${from_target[$name]} MiB here; gpu-check.sh finds the target's copy)"
  done
  echo "model: models/SmolLM2-135M-Instruct.Q4_1.gguf is not packed (98 MB, over the 64 MiB the"
  echo "  device tool carries). gpu-check.sh uses it if models/ is on the target, and otherwise"
  echo "  decodes a random-weight model of SmolLM2-135M's shape made with tpserve-mkmodel."
} >"$pkg/MANIFEST"

echo "package-gpu-build: wrote $pkg/ (payload ${payload_mib} MiB; ${#copied[@]} libraries packed, ${#from_target[@]} left to the target: ${!from_target[*]})"
echo "package-gpu-build: on the GPU machine: carry gpu-pkg and run scripts/gpu-check.sh"
