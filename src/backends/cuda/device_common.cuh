// Device-side building blocks shared by the CUDA kernel families: E2M1 -> int8 conversion, the
// exact int8 tensor-core MMA, block scales as doubles, and the GEMM epilogue (alpha, beta * C,
// bias, one rounding to the output dtype).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "dispatch/problem.h"
#include "numerics/float_formats.h"

namespace a4w4::cuda {

// Byte permute (PRMT) with its sign mode, which __byte_perm leaves out: a selector nibble with bit
// 3 set yields 0x00 or 0xFF by the sign of the selected byte. Only the low 16 bits of `selector`
// count.
__device__ __forceinline__ uint32_t permute(uint32_t lo, uint32_t hi, uint32_t selector) {
  uint32_t out;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(out) : "r"(lo), "r"(hi), "r"(selector));
  return out;
}

// The 16 bytes (one 32-element block of packed E2M1) at src: one 16-byte load when `aligned` (src
// on 16 bytes), else byte by byte, little-endian words as the 16-byte load gives them.
__device__ __forceinline__ uint4 load_packed_block(const uint8_t* src, bool aligned) {
  if (aligned) return __ldg(reinterpret_cast<const uint4*>(src));
  uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (int b = 0; b < 16; ++b) w[b / 4] |= static_cast<uint32_t>(src[b]) << (8 * (b % 4));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Copies kBytes (4, 8 or 16; both addresses aligned to it) from global to shared memory
// asynchronously (cp.async, sm_80: 16 bytes bypassing L1); present = false zero-fills instead.
// commit_copies closes a group of them; wait_copies<n> waits until at most n groups are pending.
template <int kBytes>
__device__ __forceinline__ void copy_async(void* dst, const void* src, bool present) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t shared = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  const uint32_t src_bytes = present ? kBytes : 0;
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(src),
                 "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(shared), "l"(src),
                 "n"(kBytes), "r"(src_bytes));
  }
#else
  (void)dst, (void)src, (void)present;
  __trap();
#endif
}
__device__ __forceinline__ void commit_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n");
#endif
}
template <int kPending>
__device__ __forceinline__ void wait_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

// Programmatic dependent launch (LaunchOrder::kEarly, cluster_launch.h). allow_next_grid: the
// next kernel on the stream may start once every CTA of this grid has run it.
// wait_for_previous_grid: blocks until the previous grid has finished and its memory operations
// are visible; nothing the previous work may write (or read: D) is touched before it. Both are
// no-ops in a normal launch, and before sm_90 (which has no such launch).
__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// For an early-launched kernel that often has nothing to do: whether no thread of the CTA has
// work (`mine`), decided from what was complete before the previous grid started; it waits for
// that grid either way, so that its own end still implies the previous grid's.
__device__ __forceinline__ bool nothing_to_do_after_previous_grid(bool mine) {
  const bool none = !__syncthreads_or(mine ? 1 : 0);
  wait_for_previous_grid();
  return none;
}

// The last barrier of a cluster whose CTAs read each other's shared memory: no CTA exits (and
// frees its shared memory) before every CTA has arrived, and each arrives after its distributed
// shared memory reads, which are complete once their values are used. Relaxed, because nothing
// written before it needs to be visible to the others: a release arrive (cluster.sync()) first
// waits for the CTA's outstanding global stores.
__device__ __forceinline__ void cluster_arrive_relaxed_and_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::
                   : "memory");
#endif
}

// Component j (0..3) of v (a compile-time j once inlined).
__device__ __forceinline__ uint32_t word_of(const uint4& v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

// The byte-permute table of the E2M1 -> int8 conversions: byte i is 2 * |E2M1 code i|, codes 0..7.
inline constexpr uint32_t kMagnitudesLo = 0x03020100u, kMagnitudesHi = 0x0C080604u;

// Four E2M1 codes (nibble i of the low 16 bits is element i; higher bits are ignored) -> their
// doubled magnitudes as four bytes, 0 for the negative codes (the permute's sign mode): the
// positive part w+. On the codes with their sign bits flipped (codes ^ 0x8888) it gives the
// negative part w- (unsigned).
__device__ __forceinline__ uint32_t e2m1x4_positive_part(uint32_t codes) {
  return permute(kMagnitudesLo, kMagnitudesHi, codes);
}

// Signed bytes w+ - w- from the two parts: per byte one part is zero, and (0x80 - w-) ^ 0x80 is
// -w- without a borrow crossing into the next byte.
__device__ __forceinline__ uint32_t signed_s8x4(uint32_t positive, uint32_t negative) {
  return ((0x80808080u - negative) ^ 0x80808080u) | positive;
}

// Four E2M1 codes (nibble i of the low 16 bits is element i; higher bits are ignored) -> four int8
// holding 2 * value (0x8, -0, gives 0), or 2 * value * 2^d with the magnitude table shifted by d
// (lo, hi: kMagnitudesLo << d, kMagnitudesHi << d; d <= 3 keeps every byte below the sign bit).
__device__ __forceinline__ uint32_t e2m1x4_to_s8x4(uint32_t codes, uint32_t lo = kMagnitudesLo,
                                                   uint32_t hi = kMagnitudesHi) {
  return signed_s8x4(permute(lo, hi, codes), permute(lo, hi, codes ^ 0x8888u));
}

// E2M1 codes -> FP8 e4m3 bytes of their values times a power of two, from a table (lo, hi) of the
// e4m3 bytes of the magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6} scaled alike (fold::e4m3_table): each
// magnitude looked up by one permute per four codes, and the four codes' sign bits (bit 3 of each
// nibble) gathered onto bit 7 of their bytes by one more permute, from the codes' bytes and the
// same bytes shifted left by 4 (code 2j's sign is bit 7 of the shifted byte j, code 2j + 1's of
// byte j itself), merged by one LOP3. Eight codes (nibble i is element i): elements 0..3 in .x,
// 4..7 in .y, nine instructions (the FP8 paths' converters are bound by them: a sign-selecting
// second table permute took sixteen).
__device__ __forceinline__ uint2 e2m1x8_to_e4m3x8(uint32_t codes, uint32_t lo, uint32_t hi) {
  const uint32_t magnitudes = codes & 0x77777777u, shifted = codes << 4;
  const uint32_t low = __byte_perm(lo, hi, magnitudes),
                 high = __byte_perm(lo, hi, magnitudes >> 16);
  const uint32_t signs_low = __byte_perm(codes, shifted, 0x1504u);
  const uint32_t signs_high = __byte_perm(codes, shifted, 0x3726u);
  return make_uint2(low | (signs_low & 0x80808080u), high | (signs_high & 0x80808080u));
}
// Four codes (the low 16 bits; higher bits are ignored).
__device__ __forceinline__ uint32_t e2m1x4_to_e4m3x4(uint32_t codes, uint32_t lo, uint32_t hi) {
  return e2m1x8_to_e4m3x8(codes & 0xFFFFu, lo, hi).x;
}

// D (4 x fp32) = A (16x32 e4m3, row) * B (32x8 e4m3, col) from a zero accumulator: one 32-wide
// block per call. The products of two E2M1 values are multiples of 1/4 no larger than 36, so the
// block sum (|sum| <= 1152) needs 13 significant bits: exact in the tensor core's fp8 path, which
// keeps products within 2^13 of the largest (docs/cuda-backend.md has the measurement).
__device__ __forceinline__ void mma_e4m3_16x8x32(float (&d)[4], const uint32_t (&a)[4],
                                                 const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.0f));
#else
  d[0] = d[1] = d[2] = d[3] = 0.0f;
  __trap();
#endif
}

// Four E2M1 codes (the low 16 bits) -> four fp16 holding 2 * value, as two half2 words (elements
// 0, 1 and 2, 3). Byte-permute tables give 2 * value + 12 in [0, 24]; placed under the exponent
// of 1024 that is the fp16 1024 + u, and one exact subtraction of 1036 leaves 2 * value.
__device__ __forceinline__ uint2 e2m1x4_to_f16x4(uint32_t codes) {
  const uint32_t index = codes & 0x7777u;
  const uint32_t positive =
      __byte_perm(0x0F0E0D0Cu, 0x18141210u, index);  // 12 + {0 1 2 3 4 6 8 12}
  const uint32_t negative = __byte_perm(0x090A0B0Cu, 0x00040608u, index);  // 12 - the same
  const uint32_t biased = __byte_perm(positive, negative, 0x3210u | ((codes >> 1) & 0x4444u));
  const __half2 bias = __halves2half2(__ushort_as_half(0x640Cu), __ushort_as_half(0x640Cu));
  const uint32_t lo = __byte_perm(biased, 0x64646464u, 0x5140u);
  const uint32_t hi = __byte_perm(biased, 0x64646464u, 0x5342u);
  const __half2 x = __hsub2(*reinterpret_cast<const __half2*>(&lo), bias);
  const __half2 y = __hsub2(*reinterpret_cast<const __half2*>(&hi), bias);
  return make_uint2(*reinterpret_cast<const uint32_t*>(&x), *reinterpret_cast<const uint32_t*>(&y));
}

// D (4 x fp32) += A (16x16 fp16, row) * B (16x8 fp16, col). With the doubled E2M1 values every
// product and partial sum of a block is an integer below 2^13, so the sum is exact.
__device__ __forceinline__ void mma_f16_16x8x16(float (&d)[4], const uint32_t (&a)[4],
                                                const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();
#endif
}

// D (4 x int32) = A (16x32 int8, row) * B (32x8 int8, col), exact: one 32-wide block per call.
__device__ __forceinline__ void mma_s8_16x8x32(int32_t (&d)[4], const uint32_t (&a)[4],
                                               const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0), "r"(0), "r"(0),
        "r"(0));
#else
  d[0] = d[1] = d[2] = d[3] = 0;
  __trap();
#endif
}

// 2^(sa + sb - 256) as a double: the product of two E8M0 scales with the 1/4 of the doubled
// E2M1 values folded in; NaN when either scale is 0xFF. Built from the exponent bits (always a
// normal double), so the block partial isum * scale below is exact.
__device__ __forceinline__ double block_scale(uint32_t sa, uint32_t sb) {
  const uint32_t high = (sa == 0xFFu || sb == 0xFFu) ? 0x7FF80000u : ((sa + sb + 767u) << 20);
  return __hiloint2double(static_cast<int>(high), 0);
}

// acc + isum * scale, exact product; the int32 -> double conversion goes through the
// 2^52 + 2^31 bias trick (one double add) rather than the slower conversion unit.
__device__ __forceinline__ double accumulate_block(double acc, int32_t isum, double scale) {
  const double biased = __hiloint2double(0x43300000, static_cast<int>(isum ^ 0x80000000u));
  return fma(biased - 4503601774854144.0, scale, acc);  // 2^52 + 2^31
}

__device__ __forceinline__ float load_float(a4w4_dtype dtype, const void* base, int64_t index) {
  switch (dtype) {
    case A4W4_DTYPE_BF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
    case A4W4_DTYPE_F16:
      return __half2float(static_cast<const __half*>(base)[index]);
    default:
      return static_cast<const float*>(base)[index];
  }
}

// Rounding once, to nearest even: fp32 directly; bf16 and fp16 through a float rounded to odd,
// which has enough extra bits (24 vs 8 or 11) for the second rounding to be exact. NaN is written
// as the canonical quiet NaN of the dtype, as on the CPU (numerics/float_formats.h).
// rounded_f32_bits / rounded_half_bits: the bits of an fp32 or a 16-bit (bf16, fp16) element so
// rounded.
__device__ __forceinline__ uint32_t rounded_f32_bits(double value) {
  return isnan(value) ? numerics::kCanonicalNanF32 : __float_as_uint(__double2float_rn(value));
}
// Without branches (a NaN goes through the conversions and is replaced at the end), so that the
// conversions of several elements overlap: with a branch per element the vector epilogue of
// cuda.skinny's 256-row kernel waited on each element's conversions in turn (a third of a
// 4-K-tile call's time on the H200).
__device__ __forceinline__ uint32_t rounded_half_bits(a4w4_dtype dtype, double value) {
  const float truncated = __double2float_rz(value);
  const uint32_t inexact = static_cast<double>(truncated) != value ? 1u : 0u;
  const float odd = __uint_as_float(__float_as_uint(truncated) | inexact);
  const bool bf16 = dtype == A4W4_DTYPE_BF16;
  const uint32_t bits = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(odd))
                             : __half_as_ushort(__float2half_rn(odd));
  const uint32_t nan = bf16 ? numerics::kCanonicalNanBf16 : numerics::kCanonicalNanFp16;
  return isnan(value) ? nan : bits;
}
__device__ __forceinline__ void store_rounded(a4w4_dtype dtype, void* base, int64_t index,
                                              double value) {
  if (dtype == A4W4_DTYPE_F32) {
    static_cast<uint32_t*>(base)[index] = rounded_f32_bits(value);
    return;
  }
  static_cast<uint16_t*>(base)[index] = static_cast<uint16_t>(rounded_half_bits(dtype, value));
}

// D[m, n] = alpha * acc + beta * C[m, n] + bias[n], rounded once.
__device__ __forceinline__ void store_output(const GemmProblem& p, int64_t m, int64_t n,
                                             double acc) {
  double out = static_cast<double>(p.alpha) * acc;
  if (p.c.data != nullptr)
    out += static_cast<double>(p.beta) * load_float(p.c.dtype, p.c.data, m * p.c.stride + n);
  if (p.bias.data != nullptr) out += load_float(p.bias.dtype, p.bias.data, n * p.bias.stride);
  store_rounded(p.d_dtype, p.d, m * p.d_stride + n, out);
}

// D[m, n] and D[m, n + 1] from x and y as store_output does; with `plain_aligned` (plain_epilogue
// and pairs_aligned, n even) as one 2-element store of x and y rounded once. n + 1 past N is not
// written.
__device__ __forceinline__ void store_output_pair(const GemmProblem& p, int64_t m, int64_t n,
                                                  double x, double y, bool plain_aligned) {
  if (!plain_aligned || n + 1 >= p.n) {
    store_output(p, m, n, x);
    if (n + 1 < p.n) store_output(p, m, n + 1, y);
    return;
  }
  const int64_t index = m * p.d_stride + n;
  if (p.d_dtype == A4W4_DTYPE_F32) {
    *reinterpret_cast<uint2*>(static_cast<float*>(p.d) + index) =
        make_uint2(rounded_f32_bits(x), rounded_f32_bits(y));
  } else {
    *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p.d) + index) =
        rounded_half_bits(p.d_dtype, x) | rounded_half_bits(p.d_dtype, y) << 16;
  }
}

// Whether D's rows allow 16-byte stores of 8 (bf16, fp16) or 4 (fp32) adjacent outputs at columns
// that are multiples of 8.
__device__ __forceinline__ bool vectors_aligned(const GemmProblem& p) {
  const int per_16_bytes = p.d_dtype == A4W4_DTYPE_F32 ? 4 : 8;
  return reinterpret_cast<uintptr_t>(p.d) % 16 == 0 && p.d_stride % per_16_bytes == 0;
}

// D[m, n..n + 7] = sums[0..7] rounded once (plain_epilogue, vectors_aligned, n a multiple of 8,
// n + 8 <= N); sums 16-byte aligned.
__device__ __forceinline__ void store_output_vector(const GemmProblem& p, int64_t m, int64_t n,
                                                    const double* sums) {
  double x[8];
#pragma unroll
  for (int i = 0; i < 8; i += 2) {
    const double2 pair = *reinterpret_cast<const double2*>(sums + i);
    x[i] = pair.x, x[i + 1] = pair.y;
  }
  const int64_t index = m * p.d_stride + n;
  if (p.d_dtype == A4W4_DTYPE_F32) {
    uint32_t bits[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) bits[i] = rounded_f32_bits(x[i]);
    uint4* out = reinterpret_cast<uint4*>(static_cast<float*>(p.d) + index);
    out[0] = make_uint4(bits[0], bits[1], bits[2], bits[3]);
    out[1] = make_uint4(bits[4], bits[5], bits[6], bits[7]);
    return;
  }
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    words[i] = rounded_half_bits(p.d_dtype, x[2 * i]) | rounded_half_bits(p.d_dtype, x[2 * i + 1])
                                                            << 16;
  *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.d) + index) =
      make_uint4(words[0], words[1], words[2], words[3]);
}

// Whether D = acc rounded once, with nothing else to add (alpha 1, no C, no bias): the epilogue
// then rounds fp32 accumulators straight to D's dtype (store_pair).
__device__ __forceinline__ bool plain_epilogue(const GemmProblem& p) {
  return p.alpha == 1.0f && p.c.data == nullptr && p.bias.data == nullptr;
}

// Whether D's rows allow storing two outputs (n even) with one 2-element vector store.
__device__ __forceinline__ bool pairs_aligned(const GemmProblem& p) {
  const int bytes = p.d_dtype == A4W4_DTYPE_F32 ? 4 : 2;
  return reinterpret_cast<uintptr_t>(p.d) % (2 * bytes) == 0 && p.d_stride % 2 == 0;
}

// x and y rounded once to a 16-bit kDtype (NaN canonical), x in the low half.
template <a4w4_dtype kDtype>
__device__ __forceinline__ uint32_t packed_pair(float x, float y) {
  static_assert(kDtype == A4W4_DTYPE_BF16 || kDtype == A4W4_DTYPE_F16);
  if constexpr (kDtype == A4W4_DTYPE_BF16) {
    const uint32_t lo =
        isnan(x) ? numerics::kCanonicalNanBf16 : __bfloat16_as_ushort(__float2bfloat16_rn(x));
    const uint32_t hi =
        isnan(y) ? numerics::kCanonicalNanBf16 : __bfloat16_as_ushort(__float2bfloat16_rn(y));
    return lo | hi << 16;
  } else {
    const uint32_t lo =
        isnan(x) ? numerics::kCanonicalNanFp16 : __half_as_ushort(__float2half_rn(x));
    const uint32_t hi =
        isnan(y) ? numerics::kCanonicalNanFp16 : __half_as_ushort(__float2half_rn(y));
    return lo | hi << 16;
  }
}
// x and y as one 2-element store of kDtype at `index` of d, each rounded once from fp32 (NaN
// canonical): store_pair's aligned case, for epilogues that choose D's dtype once per tile.
template <a4w4_dtype kDtype>
__device__ __forceinline__ void store_pair_as(void* d, int64_t index, float x, float y) {
  if constexpr (kDtype == A4W4_DTYPE_F32) {
    *reinterpret_cast<uint2*>(static_cast<float*>(d) + index) =
        make_uint2(isnan(x) ? numerics::kCanonicalNanF32 : __float_as_uint(x),
                   isnan(y) ? numerics::kCanonicalNanF32 : __float_as_uint(y));
  } else {
    *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(d) + index) = packed_pair<kDtype>(x, y);
  }
}

// D[m, n] and D[m, n + 1] = x and y rounded once (plain_epilogue: an fp32 value converted to D's
// dtype is rounded once, as store_rounded does from a double), in one store when `aligned`
// (pairs_aligned, n even); n + 1 past N is not written.
__device__ __forceinline__ void store_pair(const GemmProblem& p, int64_t m, int64_t n, float x,
                                           float y, bool aligned) {
  const int64_t index = m * p.d_stride + n;
  if (!aligned || n + 1 >= p.n) {
    store_rounded(p.d_dtype, p.d, index, x);
    if (n + 1 < p.n) store_rounded(p.d_dtype, p.d, index + 1, y);
    return;
  }
  if (p.d_dtype == A4W4_DTYPE_F32) {
    store_pair_as<A4W4_DTYPE_F32>(p.d, index, x, y);
  } else if (p.d_dtype == A4W4_DTYPE_BF16) {
    store_pair_as<A4W4_DTYPE_BF16>(p.d, index, x, y);
  } else {
    store_pair_as<A4W4_DTYPE_F16>(p.d, index, x, y);
  }
}

}  // namespace a4w4::cuda
