// The generic GEMM's tile, callable from other kernels: 128 threads compute a 64x64 tile of D
// exactly (int8 MMAs per 32-wide block, exact block partials added in double in the reference's
// partition order). gemm_generic runs it over the whole of D; faster families call it for the tiles
// their fast path cannot take exactly (scales at the E8M0 extremes).
#pragma once

#include "backends/cuda/device_common.cuh"
#include "dispatch/problem.h"
#include "numerics/weight_layout.h"

namespace a4w4::cuda::generic {

inline constexpr int kTile = 64;
inline constexpr int kThreads = 128;
inline constexpr int kRowBytes = 48;  // 32 int8 + 16 padding: fragment loads hit 32 distinct banks

struct TileSmem {
  __align__(16) int8_t a_tile[kTile * kRowBytes];
  __align__(16) int8_t b_tile[kTile * kRowBytes];
  uint8_t a_scale[kTile], b_scale[kTile];
};

// Synchronises the 128 threads that share barrier `kBarrier` (0 with a 128-thread CTA is
// __syncthreads).
template <int kBarrier>
__device__ __forceinline__ void sync_threads() {
  asm volatile("bar.sync %0, 128;\n" ::"n"(kBarrier) : "memory");
}

__device__ __forceinline__ uint8_t packed_byte(const PackedOperand& op, int64_t row, int64_t byte,
                                               int64_t k_tiles) {
  if (op.layout == A4W4_LAYOUT_PLAIN) return op.data[row * op.stride_bytes + byte];
  return op.data[layout::prepared_weight_offset(op.layout, row, 2 * byte, k_tiles)];
}

__device__ __forceinline__ uint8_t scale_byte(const PackedOperand& op, int64_t row, int64_t block,
                                              int64_t k_tiles) {
  if (op.layout == A4W4_LAYOUT_PLAIN) return op.scale[row * op.scale_stride + block];
  return op.scale[layout::prepared_scale_offset(row, block, k_tiles)];
}

// Decodes half a row of one block (8 bytes, 16 elements) of rows [row0, row0 + 64) into shared
// memory; rows past `rows` become zeros.
__device__ __forceinline__ void stage_block(const PackedOperand& op, int64_t row0, int64_t rows,
                                            int64_t block, int64_t k_tiles, int thread,
                                            int8_t* tile) {
  const int r = thread / 2, half = thread % 2;
  uint32_t words[2] = {0, 0};
  if (row0 + r < rows) {
    for (int i = 0; i < 8; ++i)
      words[i / 4] |= static_cast<uint32_t>(packed_byte(op, row0 + r, block * 16 + half * 8 + i,
                                                        k_tiles))
                      << (8 * (i % 4));
  }
  const uint4 decoded = {e2m1x4_to_s8x4(words[0] & 0xFFFFu), e2m1x4_to_s8x4(words[0] >> 16),
                         e2m1x4_to_s8x4(words[1] & 0xFFFFu), e2m1x4_to_s8x4(words[1] >> 16)};
  *reinterpret_cast<uint4*>(tile + r * kRowBytes + half * 16) = decoded;
}

// D[m0 .. m0 + 64, n0 .. n0 + 64) (clipped to M, N) by the 128 threads thread = 0..127 that share
// barrier kBarrier.
template <int kBarrier>
__device__ void tile(const GemmProblem& p, int64_t m0, int64_t n0, int thread, TileSmem& s) {
  const int warp = thread / 32, lane = thread % 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_m = (warp / 2) * 32, warp_n = (warp % 2) * 32;
  const int64_t blocks = p.k / 32;
  const int64_t a_tiles = layout::k_tiles(p.k), b_tiles = a_tiles;
  const int64_t splits = p.split_k > 0 ? p.split_k : 1;

  double total[2][4][4] = {}, partial[2][4][4] = {};
  // A partition ends: fold its sum into the total, as the reference does.
  auto fold_partition = [&] {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          total[mi][ni][i] += partial[mi][ni][i];
          partial[mi][ni][i] = 0.0;
        }
  };
  int64_t split = 0, boundary = blocks / splits;
  for (int64_t block = 0; block < blocks; ++block) {
    if (block == boundary) {
      fold_partition();
      ++split;
      boundary = (split + 1) * blocks / splits;
    }
    stage_block(p.a, m0, p.m, block, a_tiles, thread, s.a_tile);
    stage_block(p.b, n0, p.n, block, b_tiles, thread, s.b_tile);
    if (thread < kTile) {
      const int64_t row = m0 + thread;
      s.a_scale[thread] = row < p.m ? scale_byte(p.a, row, block, a_tiles) : 0;
    } else {
      const int64_t row = n0 + thread - kTile;
      s.b_scale[thread - kTile] = row < p.n ? scale_byte(p.b, row, block, b_tiles) : 0;
    }
    sync_threads<kBarrier>();
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      const int row = warp_m + mi * 16 + g;
      const uint32_t a[4] = {
          *reinterpret_cast<const uint32_t*>(s.a_tile + row * kRowBytes + 4 * t),
          *reinterpret_cast<const uint32_t*>(s.a_tile + (row + 8) * kRowBytes + 4 * t),
          *reinterpret_cast<const uint32_t*>(s.a_tile + row * kRowBytes + 16 + 4 * t),
          *reinterpret_cast<const uint32_t*>(s.a_tile + (row + 8) * kRowBytes + 16 + 4 * t)};
      const uint32_t sa0 = s.a_scale[row], sa1 = s.a_scale[row + 8];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int col = warp_n + ni * 8 + g;
        const uint32_t b[2] = {
            *reinterpret_cast<const uint32_t*>(s.b_tile + col * kRowBytes + 4 * t),
            *reinterpret_cast<const uint32_t*>(s.b_tile + col * kRowBytes + 16 + 4 * t)};
        int32_t isum[4];
        mma_s8_16x8x32(isum, a, b);
        // Accumulator i: row g (+8 for i >= 2), column 2t + (i & 1).
        const uint32_t sb0 = s.b_scale[warp_n + ni * 8 + 2 * t];
        const uint32_t sb1 = s.b_scale[warp_n + ni * 8 + 2 * t + 1];
        double(&acc)[4] = partial[mi][ni];
        acc[0] = accumulate_block(acc[0], isum[0], block_scale(sa0, sb0));
        acc[1] = accumulate_block(acc[1], isum[1], block_scale(sa0, sb1));
        acc[2] = accumulate_block(acc[2], isum[2], block_scale(sa1, sb0));
        acc[3] = accumulate_block(acc[3], isum[3], block_scale(sa1, sb1));
      }
    }
    sync_threads<kBarrier>();
  }
  fold_partition();
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t m = m0 + warp_m + mi * 16 + g + (i >= 2 ? 8 : 0);
        const int64_t n = n0 + warp_n + ni * 8 + 2 * t + (i & 1);
        if (m < p.m && n < p.n) store_output(p, m, n, total[mi][ni][i]);
      }
}

}  // namespace a4w4::cuda::generic
