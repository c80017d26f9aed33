#!/usr/bin/env bash
# Fetches the pinned llama-cpp-python source distribution from PyPI, checks its sha256, and
# unpacks its copy of llama.cpp's models/ folder (the vocabulary-only GGUF files with their
# tokenizer test cases, ggml-vocab-*.gguf{,.inp,.out}, and the real chat templates,
# templates/*.jinja) into build-deps/, which git ignores. The tests read them from there; they
# are llama.cpp's, never committed here. A no-op when they are already unpacked.
#   scripts/fetch-llama-cpp-models.sh        prints the models/ directory
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
version="0.3.36"
sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
deps="$root/build-deps"
tarball="$deps/llama_cpp_python-$version.tar.gz"
models="$deps/llama_cpp_python-$version/vendor/llama.cpp/models"

check() { echo "$sha256  $1" | sha256sum --check --status; }

if [ -f "$models/.unpacked" ]; then
  echo "$models"
  exit 0
fi
mkdir -p "$deps"
if ! { [ -f "$tarball" ] && check "$tarball"; }; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-llama-cpp-models: downloading llama-cpp-python==$version (sdist, 77 MB) from PyPI" >&2
  if ! python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$tmp" \
      "llama-cpp-python==$version" 2>"$tmp/pip.err"; then
    echo "fetch-llama-cpp-models: could not download llama-cpp-python==$version from PyPI" >&2
    sed 's/^/  pip: /' "$tmp/pip.err" | tail -5 >&2
    exit 1
  fi
  if ! check "$tmp/llama_cpp_python-$version.tar.gz"; then
    echo "fetch-llama-cpp-models: sha256 of the sdist is not $sha256" >&2
    exit 1
  fi
  mv "$tmp/llama_cpp_python-$version.tar.gz" "$tarball"
fi
tar -xzf "$tarball" -C "$deps" --wildcards \
  "llama_cpp_python-$version/vendor/llama.cpp/models/ggml-vocab-*" \
  "llama_cpp_python-$version/vendor/llama.cpp/models/templates/*"
touch "$models/.unpacked"
echo "fetch-llama-cpp-models: unpacked $models" >&2
echo "$models"
