// <immintrin.h> for the SIMD kernels. GCC 12 reports its own _mm*_undefined_*() idiom inside the
// intrinsic headers as maybe-uninitialized once inlined at -O3 (GCC PR 105593, fixed in GCC 13);
// the warning is silenced for those header lines only.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
