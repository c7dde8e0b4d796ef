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
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
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
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
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
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
        "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
        "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
        "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
        "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
        "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
        "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
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
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
        "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
        "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
        "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
        "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
        "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
        "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
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
