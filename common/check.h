// Invariant checks. A failed check is a bug in tpserve, never a client's mistake: it prints
// file:line and the condition, then aborts. Client input must be validated with absl::Status.
#pragma once

#include <cstdio>
#include <cstdlib>

#define TP_CHECK(cond)                                                                   \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

#define TP_CHECK_MSG(cond, msg)                                                          \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", __FILE__, __LINE__, #cond,   \
                   (msg));                                                               \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)
