// Hopper warpgroup MMA (wgmma) building blocks for the sm_90a kernel families: shared-memory matrix
// descriptors for K-major operands in the 128-byte swizzled layout (the layout TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B), the swizzled address of an element, and the wgmma instructions with
// both operands in shared memory. A warpgroup is 4 warps (128 threads) issuing together.
//
// Layout: an operand tile is R rows (M or N) of 128 bytes along K (64 bf16 or 128 8-bit values);
// 8 rows form a 1024-byte swizzle atom in which the 16-byte chunk c of row r sits at chunk
// c ^ (r % 8). Atoms follow each other every 1024 bytes (the descriptor's stride byte offset); the
// tile base is 1024-byte aligned. One wgmma consumes 32 bytes of K (k16 bf16, k32 8-bit): its
// descriptor starts 32 * step bytes into the rows.
//
// Accumulators (m64nN): thread t of the warpgroup holds, for each 8-column block j, d[4j + 0, 1] =
// D[16 w + g][8 j + 2 q + {0, 1}] and d[4j + 2, 3] = D[16 w + g + 8][8 j + 2 q + {0, 1}], with
// w = t / 32, g = (t % 32) / 4, q = t % 4.
#pragma once

#include <cstdint>

namespace a4w4::cuda::wgmma {

inline constexpr int kSwizzleRowBytes = 128;
inline constexpr int kSwizzleAtomBytes = 1024;

// Byte offset of byte `byte` (0..127) of row `row` in a 128-byte swizzled tile.
__host__ __device__ constexpr uint32_t swizzled_offset(uint32_t row, uint32_t byte) {
  return (row / 8) * kSwizzleAtomBytes + (row % 8) * kSwizzleRowBytes +
         (((byte / 16) ^ (row % 8)) * 16) + byte % 16;
}

// The 64-bit shared-memory matrix descriptor of a K-major, 128-byte swizzled operand starting at
// shared address `address` (bytes; 1024-aligned tile base plus the K step's offset).
__device__ __forceinline__ uint64_t descriptor(uint32_t address) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((address & 0x3FFFF) >> 4);      // start address, bits 0-13
  d |= static_cast<uint64_t>(1) << 16;                       // leading byte offset: unused
  d |= static_cast<uint64_t>(kSwizzleAtomBytes >> 4) << 32;  // stride byte offset
  d |= static_cast<uint64_t>(1) << 62;                       // 128-byte swizzle
  return d;
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Orders the warpgroup's register and shared-memory writes before the wgmmas that read them.
__device__ __forceinline__ void fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
// Makes generic-proxy shared-memory stores (st.shared) visible to the async proxy wgmma reads with.
__device__ __forceinline__ void fence_shared_for_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int kPending>
__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Keeps the compiler from moving accumulator reads or writes across wgmma fences and waits (the
// registers change asynchronously while wgmmas are in flight).
template <int kCount>
__device__ __forceinline__ void fence_operands(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// 32 accumulator operands d[O..O + 31] of a wgmma, with constraint C ("+f" or "+r"), and 64.
// clang-format off
#define A4W4_WGMMA_ACC32(C, O) \
  C(d[(O) + 0]), C(d[(O) + 1]), C(d[(O) + 2]), C(d[(O) + 3]), C(d[(O) + 4]), C(d[(O) + 5]), C(d[(O) + 6]), C(d[(O) + 7]), \
  C(d[(O) + 8]), C(d[(O) + 9]), C(d[(O) + 10]), C(d[(O) + 11]), C(d[(O) + 12]), C(d[(O) + 13]), C(d[(O) + 14]), C(d[(O) + 15]), \
  C(d[(O) + 16]), C(d[(O) + 17]), C(d[(O) + 18]), C(d[(O) + 19]), C(d[(O) + 20]), C(d[(O) + 21]), C(d[(O) + 22]), C(d[(O) + 23]), \
  C(d[(O) + 24]), C(d[(O) + 25]), C(d[(O) + 26]), C(d[(O) + 27]), C(d[(O) + 28]), C(d[(O) + 29]), C(d[(O) + 30]), C(d[(O) + 31])
#define A4W4_WGMMA_ACC64(C, O) A4W4_WGMMA_ACC32(C, O), A4W4_WGMMA_ACC32(C, (O) + 32)
// clang-format on

// D (64x8, fp32) (+)= A (64x16 bf16) * B (8x16 bf16)^T; accumulate = false starts from zero.
__device__ __forceinline__ void mma_bf16_m64n8k16(float (&d)[4], uint64_t a, uint64_t b,
                                                  bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, "
      "0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// D (64x128, fp32) (+)= A (64x16 bf16) * B (128x16 bf16)^T: the bf16 family's MMA. Thread t holds
// d[4j + i] for the 16 column blocks j as in the m64n8 case above.
__device__ __forceinline__ void mma_bf16_m64n128k16(float (&d)[64], uint64_t a, uint64_t b,
                                                    bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : A4W4_WGMMA_ACC64("+f", 0)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// D (64x256, fp32) (+)= A (64x16 bf16) * B (256x16 bf16)^T: the bf16 family's wide-tile MMA. Thread
// t holds d[4j + i] for the 32 column blocks j as in the m64n8 case above.
__device__ __forceinline__ void mma_bf16_m64n256k16(float (&d)[128], uint64_t a, uint64_t b,
                                                    bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : A4W4_WGMMA_ACC64("+f", 0),
        A4W4_WGMMA_ACC64("+f", 64)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// D (64x8, fp32) (+)= A (64x32 e4m3) * B (8x32 e4m3)^T.
__device__ __forceinline__ void mma_e4m3_m64n8k32(float (&d)[4], uint64_t a, uint64_t b,
                                                  bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// D (64x128, fp32) (+)= A (64x32 e4m3) * B (128x32 e4m3)^T, both from shared memory (K-major):
// the fast-accumulation MMA of cuda.skinny, whose sums keep about 14 significant bits
// (docs/cuda-backend.md). Thread t holds d[4j + i] for the 16 column blocks j as in the m64n8 case.
__device__ __forceinline__ void mma_e4m3_m64n128k32(float (&d)[64], uint64_t a, uint64_t b,
                                                    bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, %64, %65, p, 1, 1;\n}\n"
      : A4W4_WGMMA_ACC64("+f", 0)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// D (64x64, fp32) (+)= A (64x32 e4m3) * B (64x32 e4m3)^T, both from shared memory: the narrower
// form of the above (bench/skinny_consumer_rate.cu compares four consumer warpgroups on it).
__device__ __forceinline__ void mma_e4m3_m64n64k32(float (&d)[32], uint64_t a, uint64_t b,
                                                   bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}\n"
      : A4W4_WGMMA_ACC32("+f", 0)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// D (64x8, int32) (+)= A (64x32 s8) * B (8x32 s8)^T, exact.
__device__ __forceinline__ void mma_s8_m64n8k32(int32_t (&d)[4], uint64_t a, uint64_t b,
                                                bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8 {%0, %1, %2, %3}, %4, %5, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// D (64x128, int32) (+)= A (64x32 s8) * B (128x32 s8)^T, exact: the int8 family's MMA. Thread t
// holds d[4j + i] for the 16 column blocks j as in the m64n8 case above (the s8 layout is the
// fp32 one: bench/wgmma_probe.cu checks it for n8 and n128).
__device__ __forceinline__ void mma_s8_m64n128k32(int32_t (&d)[64], uint64_t a, uint64_t b,
                                                  bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p;\n}\n"
      : A4W4_WGMMA_ACC64("+r", 0)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// D (64x192, int32) (+)= A (64x32 s8) * B (192x32 s8)^T, exact: cuda.int8_128x192's MMA (24
// column blocks j, as above).
__device__ __forceinline__ void mma_s8_m64n192k32(int32_t (&d)[96], uint64_t a, uint64_t b,
                                                  bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, "
      "%10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, "
      "%28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "
      "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, "
      "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p;\n}\n"
      : A4W4_WGMMA_ACC64("+r", 0), A4W4_WGMMA_ACC32("+r", 64)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// The skinny family's MMAs (gemm_skinny.cu): D (64xN, int32) (+)= A (64x32 8-bit, from registers)
// * B (Nx32 s8, shared memory)^T, exact. Warp w's registers a[0..3] hold rows 16 w + g (a[0],
// a[2]) and 16 w + g + 8 (a[1], a[3]), K slots 4 q..4 q + 3 (a[0], a[1]) and 16 + 4 q..16 + 4 q + 3
// (a[2], a[3]) — the m16n8k32 mma.sync fragment; d as above.

// N = 8, A unsigned.
__device__ __forceinline__ void mma_u8s8_m64n8k32_rs(int32_t (&d)[4], const uint32_t (&a)[4],
                                                  uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.s8 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// N = 16, A unsigned.
__device__ __forceinline__ void mma_u8s8_m64n16k32_rs(int32_t (&d)[8], const uint32_t (&a)[4],
                                                  uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.s32.u8.s8 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// N = 32, A unsigned.
__device__ __forceinline__ void mma_u8s8_m64n32k32_rs(int32_t (&d)[16], const uint32_t (&a)[4],
                                                  uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.s32.u8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// N = 64, A unsigned (u8) or signed (s8).
template <bool kSignedA>
__device__ __forceinline__ void mma_m64n64k32_rs(int32_t (&d)[32], const uint32_t (&a)[4],
                                                 uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define A4W4_MMA_M64N64K32_RS(ATYPE)                                                                 \
  asm volatile(                                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                  \
      "wgmma.mma_async.sync.aligned.m64n64k32.s32." ATYPE ".s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p;\n}\n" \
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), \
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), \
        "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), \
        "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)))
  if constexpr (kSignedA) {
    A4W4_MMA_M64N64K32_RS("s8");
  } else {
    A4W4_MMA_M64N64K32_RS("u8");
  }
#undef A4W4_MMA_M64N64K32_RS
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// N = 128, A signed (the token tiles of M > 64). Operand lists laid out as in the wrappers above.
// clang-format off
__device__ __forceinline__ void mma_s8_m64n128k32_rs(int32_t (&d)[64], const uint32_t (&a)[4],
                                                  uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p;\n}\n"
      : A4W4_WGMMA_ACC64("+r", 0)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// N = 128, both operands e4m3, fp32 sums (fast accumulation's one-warpgroup kernel).
__device__ __forceinline__ void mma_e4m3_m64n128k32_rs(float (&d)[64], const uint32_t (&a)[4],
                                                       uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : A4W4_WGMMA_ACC64("+f", 0)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}
// N = 64, e4m3 (bench/skinny_consumer_rate.cu: activations as the register operand).
__device__ __forceinline__ void mma_e4m3_m64n64k32_rs(float (&d)[32], const uint32_t (&a)[4],
                                                      uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
      : A4W4_WGMMA_ACC32("+f", 0)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}
// clang-format on

// Keeps the compiler from moving int32 accumulator reads or writes across wgmma fences and waits.
template <int kCount>
__device__ __forceinline__ void fence_operands(int32_t (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// The same for the registers of an A operand read by wgmmas in flight.
template <int kCount>
__device__ __forceinline__ void fence_operands(uint32_t (&a)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

}  // namespace a4w4::cuda::wgmma
