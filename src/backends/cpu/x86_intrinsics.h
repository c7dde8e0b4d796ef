// <immintrin.h> for the SIMD kernels. GCC 12 reports its own _mm*_undefined_*() idiom inside the
// intrinsic headers as (maybe-)uninitialized once inlined at -O3 (GCC PR 105593, fixed in GCC 13);
// the warnings are silenced for those header lines only.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
