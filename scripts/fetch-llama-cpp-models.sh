#!/usr/bin/env bash
# Fetches the pinned llama-cpp-python source distribution from PyPI (scripts/fetch-sdist.sh
# checks its sha256) and unpacks its copy of llama.cpp's models/ folder (the vocabulary-only GGUF
# files with their tokenizer test cases, ggml-vocab-*.gguf{,.inp,.out}, and the real chat
# templates, templates/*.jinja) into build-deps/, which git ignores. The tests read them from
# there; they are llama.cpp's, never committed here. A no-op when they are already unpacked.
#   scripts/fetch-llama-cpp-models.sh        prints the models/ directory
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
version="0.3.36"
models="$root/build-deps/llama_cpp_python-$version/vendor/llama.cpp/models"

if [ -f "$models/.unpacked" ]; then
  echo "$models"
  exit 0
fi
tarball="$("$root/scripts/fetch-sdist.sh" llama-cpp-python "$version" \
  832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e \
  "llama_cpp_python-$version.tar.gz" 77MB)"
tar -xzf "$tarball" -C "$root/build-deps" --wildcards \
  "llama_cpp_python-$version/vendor/llama.cpp/models/ggml-vocab-*" \
  "llama_cpp_python-$version/vendor/llama.cpp/models/templates/*"
touch "$models/.unpacked"
echo "fetch-llama-cpp-models: unpacked $models" >&2
echo "$models"
