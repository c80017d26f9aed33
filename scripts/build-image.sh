#!/usr/bin/env bash
# Builds tpserve's container image with the running Docker engine (scripts/docker-engine.sh).
#   scripts/build-image.sh [--source] [--device cpu|cuda] [--tag IMAGE] [--bin-dir DIR]
# Default: from this host's binaries (DIR, default build/bin, as scripts/test.sh builds them;
# Debian 12 hosts only, as the image is), the Dockerfile's runtime-host stage: seconds.
# --source: the full build inside the image from the repository (setup.sh, CMake Release), as a
# release would build it.
# The base image debian:12 is made with debootstrap from Debian's package registry when the engine
# has none (no registry image is pulled). Prints the image's name, size and build time.
# --device cuda needs NVIDIA's package repository (--source) or a host built with CUDA.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
source=0
device=cpu
tag=""
bin_dir="$root/build/bin"
while [ $# -gt 0 ]; do
  case "$1" in
    --source) source=1 ;;
    --device) device="$2"; shift ;;
    --tag) tag="$2"; shift ;;
    --bin-dir) bin_dir="$(cd "$2" && pwd)"; shift ;;
    *) echo "build-image: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
[ "$device" = cpu ] || [ "$device" = cuda ] || { echo "build-image: --device cpu|cuda" >&2; exit 2; }
# The Helm chart's appVersion names the image it deploys.
version="$(sed -n 's/^appVersion: "\(.*\)"$/\1/p' helm/tpserve/Chart.yaml)"
tag="${tag:-tpserve:$version-$device}"
# Debian's docker.io client speaks BuildKit with DOCKER_BUILDKIT=1; a newer client may lack buildx.
docker=docker
[ -x /usr/bin/docker ] && docker=/usr/bin/docker
export DOCKER_BUILDKIT=1

if ! timeout 10 "$docker" info >/dev/null 2>&1; then
  echo "build-image: no Docker engine answers (scripts/docker-engine.sh start)" >&2
  exit 1
fi

started=$SECONDS
if ! "$docker" image inspect debian:12 >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { echo "build-image: debootstrap is missing" >&2; exit 1; }
  echo "build-image: making the debian:12 base with debootstrap"
  rootfs="$(mktemp -d)"
  trap 'rm -rf "$rootfs"' EXIT
  debootstrap --variant=minbase bookworm "$rootfs" >"$rootfs.log" 2>&1 ||
    { tail -5 "$rootfs.log" >&2; rm -f "$rootfs.log"; exit 1; }
  rm -f "$rootfs.log"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | "$docker" import - debian:12 >/dev/null
  echo "build-image: debian:12 made in $((SECONDS - started)) s"
fi

binaries=(tpserve tpserve-coordinator tpserve-worker tpctl)
if [ "$source" = 1 ]; then
  echo "build-image: building $tag from source inside the image (long: the whole project)"
  # The host's CA bundle, for a TLS-inspecting proxy between the build and PyPI.
  secret=()
  [ -f /etc/ssl/certs/ca-certificates.crt ] &&
    secret=(--secret id=ca_bundle,src=/etc/ssl/certs/ca-certificates.crt)
  "$docker" build -q -f deploy/Dockerfile --build-arg DEVICE="$device" "${secret[@]}" \
    -t "$tag" . >/dev/null
else
  . /etc/os-release
  if [ "${ID:-}" != debian ] || [ "${VERSION_ID:-}" != 12 ]; then
    echo "build-image: host binaries fit a Debian 12 image only; this is ${PRETTY_NAME:-unknown}:" \
         "use --source" >&2
    exit 1
  fi
  for b in "${binaries[@]}"; do
    [ -x "$bin_dir/$b" ] || { echo "build-image: $bin_dir/$b is missing (scripts/test.sh builds it)" >&2; exit 1; }
  done
  context="$root/build/image"
  rm -rf "$context"
  mkdir -p "$context/bin" "$context/lib"
  for b in "${binaries[@]}"; do
    strip --strip-debug -o "$context/bin/$b" "$bin_dir/$b"
  done
  # Every library the binaries load but glibc's own, which the base image has in the same version.
  ldd "${binaries[@]/#/$bin_dir/}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so[^/]*$' |
    while read -r lib; do cp -L "$lib" "$context/lib/"; done
  cp scripts/fetch-model.sh "$context/"
  "$docker" build -q -f deploy/Dockerfile --target runtime-host --build-arg DEVICE="$device" \
    -t "$tag" "$context" >/dev/null
fi
size="$("$docker" image inspect -f '{{.Size}}' "$tag")"
echo "build-image: built $tag ($((size / 1000000)) MB) in $((SECONDS - started)) s"
