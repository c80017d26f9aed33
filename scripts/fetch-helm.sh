#!/usr/bin/env bash
# Fetches real Helm for the chart tests: the pinned helm-sdkpy wheel from PyPI (Helm v4 built as a
# C library, libhelm_sdkpy.so) through scripts/fetch-sdist.sh, which checks its sha256, and
# unpacks the library into build-deps/, which git ignores. The wheel declares Python >= 3.12, so
# pip is asked for that interpreter's; it is Go underneath and ctypes loads it from any Python. A
# no-op when already unpacked.
#   scripts/fetch-helm.sh        prints the library's path
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
version="0.1.32"
sha256="bcf5bf73cacc373bebedfb9c988969aa12a9eda86a140deba658fbf28eb789c5"
wheel="helm_sdkpy-$version-py3-none-any.whl"
dir="$root/build-deps/helm-sdkpy-$version"
lib="$dir/helm_sdkpy/_lib/linux-amd64/libhelm_sdkpy.so"

if [ -f "$dir/.unpacked" ]; then
  echo "$lib"
  exit 0
fi
wheel_path="$("$root/scripts/fetch-sdist.sh" helm-sdkpy "$version" "$sha256" "$wheel" 47MB \
  --wheel 3.12)"
rm -rf "$dir"
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' \
  "$wheel_path" "helm_sdkpy/_lib/linux-amd64/libhelm_sdkpy.so" "$dir"
touch "$dir/.unpacked"
echo "fetch-helm: unpacked $lib" >&2
echo "$lib"
