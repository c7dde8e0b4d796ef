// sm_90 asynchronous pipeline building blocks: shared-memory mbarriers (arrive, expect-tx, parity
// waits), 1D bulk copies and 2D and 3D TMA loads into shared memory that complete on an mbarrier,
// and named barriers for a subset of the CTA's warps.
//
// Phases: a barrier starts in phase 0; wait(parity) returns once the phase with that parity has
// completed. A ring slot used for the i-th time (i = use / slots) is full after phase i, so a
// consumer waits for parity i & 1 on `full` and a producer for parity (i & 1) ^ 1 on `empty` (the
// first round returns at once: the "previous" phase counts as complete).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace a4w4::cuda::pipeline {

__device__ __forceinline__ uint32_t smem(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The asm needs sm_90; other passes see the declarations only (the kernels guard their bodies).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define A4W4_SM90_ASM(...) asm volatile(__VA_ARGS__)
#else
#define A4W4_SM90_ASM(...) __trap()
#endif

__device__ __forceinline__ void init(uint64_t* bar, uint32_t count) {
  A4W4_SM90_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem(bar)), "r"(count)
                : "memory");
}
// Makes the initialised barriers visible to the other threads and to the TMA unit.
__device__ __forceinline__ void fence_init() {
  A4W4_SM90_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void arrive(uint64_t* bar) {
  A4W4_SM90_ASM("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem(bar)) : "memory");
}
// Arrives and announces `bytes` of TMA transactions that must land before the phase completes.
__device__ __forceinline__ void arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  A4W4_SM90_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem(bar)),
                "r"(bytes)
                : "memory");
}
__device__ __forceinline__ void wait(uint64_t* bar, uint32_t parity) {
  A4W4_SM90_ASM(
      "{\n.reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(smem(bar)),
      "r"(parity)
      : "memory");
}

// Loads the box at (x = inner coordinate in elements, y = row) of a 2D tensor map into `dst`,
// completing `bytes` on `bar` (which the caller armed with arrive_expect_tx).
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar,
                                            int32_t x, int32_t y) {
  A4W4_SM90_ASM(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, "
      "%4}], [%2];\n" ::"r"(smem(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem(bar)), "r"(x), "r"(y)
      : "memory");
}
// The same for a 4D tensor map: the box at (x, y, z, w).
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, uint64_t* bar,
                                            int32_t x, int32_t y, int32_t z, int32_t w) {
  A4W4_SM90_ASM(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, "
      "%4, %5, %6}], [%2];\n" ::"r"(smem(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem(bar)), "r"(x), "r"(y), "r"(z), "r"(w)
      : "memory");
}
// Copies `bytes` (a multiple of 16, from and to 16-byte aligned addresses) of global memory into
// `dst`, completing them on `bar` (armed by the caller).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
  A4W4_SM90_ASM(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(smem(dst)),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem(bar))
      : "memory");
}
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
  A4W4_SM90_ASM("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Synchronises the `count` threads (a multiple of 32) that use named barrier `id` (1..15; 0 is
// __syncthreads).
__device__ __forceinline__ void named_sync(uint32_t id, uint32_t count) {
  A4W4_SM90_ASM("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Hands registers between warpgroups (all threads of a warpgroup execute it together).
template <int kRegs>
__device__ __forceinline__ void grow_registers() {
  A4W4_SM90_ASM("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void shrink_registers() {
  A4W4_SM90_ASM("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

#undef A4W4_SM90_ASM

}  // namespace a4w4::cuda::pipeline
