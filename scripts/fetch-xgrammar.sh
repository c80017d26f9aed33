#!/usr/bin/env bash
# Fetches xgrammar's pinned source distribution from PyPI (the grammar engine behind structured
# output) through scripts/fetch-sdist.sh and unpacks it into build-deps/, which git ignores; CMake
# builds its C++ core from there. It is xgrammar's code, never committed here. Writes the unpacked
# tree's config.cmake (xgrammar reads it before its options) so that only the static C++ library
# is built: no Python bindings, no tests. One edit to its source: the jump-forward search
# (GrammarMatcher::FindJumpForwardString) stops after TPSERVE_JUMP_FORWARD_MAX_BYTES bytes, which
# CMake defines, where upstream searches without a bound (a constraint that forces an endless
# continuation, such as a schema that requires itself, would grow it until memory runs out). The
# script fails when the line it edits is not there exactly once. A no-op when already unpacked.
#   scripts/fetch-xgrammar.sh        prints the source directory
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
version="0.2.9"
source="$root/build-deps/xgrammar-$version"

# The marker names the edit, so that a tree unpacked before it is unpacked again.
marker="$source/.unpacked-jump-forward-bound"
if [ -f "$marker" ]; then
  echo "$source"
  exit 0
fi
tarball="$("$root/scripts/fetch-sdist.sh" xgrammar "$version" \
  87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90 "xgrammar-$version.tar.gz" 2.8MB)"
rm -rf "$source"
tar -xzf "$tarball" -C "$root/build-deps"
cat > "$source/config.cmake" <<'CMAKE'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
CMAKE
matcher="$source/cpp/grammar_matcher.cc"
loop='  while (can_find_next_char) {'
if [ "$(grep -cxF "$loop" "$matcher")" != 1 ]; then
  echo "fetch-xgrammar: $matcher does not hold the jump-forward loop to bound" >&2
  exit 1
fi
sed -i "s/^  while (can_find_next_char) {\$/  while (can_find_next_char \&\& num_accepted_chars < TPSERVE_JUMP_FORWARD_MAX_BYTES) {/" \
  "$matcher"
grep -q 'num_accepted_chars < TPSERVE_JUMP_FORWARD_MAX_BYTES' "$matcher"
touch "$marker"
echo "fetch-xgrammar: unpacked $source" >&2
echo "$source"
