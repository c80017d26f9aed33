// The fuzz targets' check of a contract the fuzzed code states: a violation aborts, which
// libFuzzer reports as a crash and saves the input for (scripts/fuzz.sh prints the line).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace tpserve {

inline void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "fuzz: violated: %s\n", what);
  std::abort();
}

}  // namespace tpserve
