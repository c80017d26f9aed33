// <immintrin.h> for the kernels' x86 vector paths (compiled per function with target attributes).
// GCC 12's avx512fintrin.h leaves the "undefined" vectors of _mm512_set1_* and the reductions
// self-initialised, which -W(maybe-)uninitialized reports at every inlined use (GCC PR 105593):
// silenced here, in every file that includes this one.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
