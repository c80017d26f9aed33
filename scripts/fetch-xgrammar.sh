#!/usr/bin/env bash
# Fetches xgrammar's pinned source distribution from PyPI (the grammar engine behind structured
# output), checks its sha256, and unpacks it into build-deps/, which git ignores; CMake builds its
# C++ core from there. It is xgrammar's code, never committed here. Writes the unpacked tree's
# config.cmake (xgrammar reads it before its options) so that only the static C++ library is
# built: no Python bindings, no tests. A no-op when already unpacked.
#   scripts/fetch-xgrammar.sh        prints the source directory
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
version="0.2.9"
sha256="87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90"
deps="$root/build-deps"
tarball="$deps/xgrammar-$version.tar.gz"
source="$deps/xgrammar-$version"

check() { echo "$sha256  $1" | sha256sum --check --status; }

if [ -f "$source/.unpacked" ]; then
  echo "$source"
  exit 0
fi
mkdir -p "$deps"
if ! { [ -f "$tarball" ] && check "$tarball"; }; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-xgrammar: downloading xgrammar==$version (sdist, 2.8 MB) from PyPI" >&2
  # --no-binary for xgrammar alone: ":all:" would build its build tools from source too.
  if ! python3 -m pip download --quiet --no-deps --no-binary xgrammar --dest "$tmp" \
      "xgrammar==$version" 2>"$tmp/pip.err"; then
    echo "fetch-xgrammar: could not download xgrammar==$version from PyPI" >&2
    sed 's/^/  pip: /' "$tmp/pip.err" | tail -5 >&2
    exit 1
  fi
  if ! check "$tmp/xgrammar-$version.tar.gz"; then
    echo "fetch-xgrammar: sha256 of the sdist is not $sha256" >&2
    exit 1
  fi
  mv "$tmp/xgrammar-$version.tar.gz" "$tarball"
fi
rm -rf "$source"
tar -xzf "$tarball" -C "$deps"
cat > "$source/config.cmake" <<'CMAKE'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
CMAKE
touch "$source/.unpacked"
echo "fetch-xgrammar: unpacked $source" >&2
echo "$source"
