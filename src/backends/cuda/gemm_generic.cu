// The generic CUDA GEMM: correct for every problem the API accepts (any M, N; any even row strides
// and alignment; plain or prepared B; any split_k), on every sm_80+ GPU. Faster families take the
// shapes they are built for; this one is the path that is always there.
//
// A CTA computes a 64x64 tile of D with four warps (2x2, 32x32 each). Per 32-wide K block it
// decodes the block of A and B to 2*E2M1 int8 in shared memory, runs exact int8 MMAs (one block's
// dot product per MMA, in int32) and adds isum * 2^(sa+sb-256) in double, partition by partition
// as split_k asks: the same sums as the CPU reference.
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_utils.h"
#include "backends/cuda/device_common.cuh"
#include "numerics/weight_layout.h"

namespace a4w4::cuda {
namespace {

constexpr int kTile = 64;
constexpr int kThreads = 128;
constexpr int kRowBytes = 48;  // 32 int8 + 16 padding: fragment loads hit 32 distinct banks

__device__ __forceinline__ uint8_t packed_byte(const PackedOperand& op, int64_t row, int64_t byte,
                                               int64_t k_tiles) {
  if (op.layout == A4W4_LAYOUT_PLAIN) return op.data[row * op.stride_bytes + byte];
  return op.data[layout::prepared_weight_offset(row, 2 * byte, k_tiles)];
}

__device__ __forceinline__ uint8_t scale_byte(const PackedOperand& op, int64_t row, int64_t block,
                                              int64_t k_tiles) {
  if (op.layout == A4W4_LAYOUT_PLAIN) return op.scale[row * op.scale_stride + block];
  return op.scale[layout::prepared_scale_offset(row, block, k_tiles)];
}

// Decodes half a row of one block (8 bytes, 16 elements) of rows [row0, row0 + 64) into shared
// memory; rows past `rows` become zeros.
__device__ __forceinline__ void stage_block(const PackedOperand& op, int64_t row0, int64_t rows,
                                            int64_t block, int64_t k_tiles, int8_t* tile) {
  const int r = threadIdx.x / 2, half = threadIdx.x % 2;
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

__global__ void __launch_bounds__(kThreads) gemm_generic_kernel(GemmProblem p) {
  __shared__ __align__(16) int8_t a_tile[kTile * kRowBytes];
  __shared__ __align__(16) int8_t b_tile[kTile * kRowBytes];
  __shared__ uint8_t a_scale[kTile], b_scale[kTile];

  const int64_t m0 = int64_t{blockIdx.y} * kTile, n0 = int64_t{blockIdx.x} * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
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
    stage_block(p.a, m0, p.m, block, a_tiles, a_tile);
    stage_block(p.b, n0, p.n, block, b_tiles, b_tile);
    if (threadIdx.x < kTile) {
      const int64_t row = m0 + threadIdx.x;
      a_scale[threadIdx.x] = row < p.m ? scale_byte(p.a, row, block, a_tiles) : 0;
    } else {
      const int64_t row = n0 + threadIdx.x - kTile;
      b_scale[threadIdx.x - kTile] = row < p.n ? scale_byte(p.b, row, block, b_tiles) : 0;
    }
    __syncthreads();
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      const int row = warp_m + mi * 16 + g;
      const uint32_t a[4] = {
          *reinterpret_cast<const uint32_t*>(a_tile + row * kRowBytes + 4 * t),
          *reinterpret_cast<const uint32_t*>(a_tile + (row + 8) * kRowBytes + 4 * t),
          *reinterpret_cast<const uint32_t*>(a_tile + row * kRowBytes + 16 + 4 * t),
          *reinterpret_cast<const uint32_t*>(a_tile + (row + 8) * kRowBytes + 16 + 4 * t)};
      const uint32_t sa0 = a_scale[row], sa1 = a_scale[row + 8];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int col = warp_n + ni * 8 + g;
        const uint32_t b[2] = {
            *reinterpret_cast<const uint32_t*>(b_tile + col * kRowBytes + 4 * t),
            *reinterpret_cast<const uint32_t*>(b_tile + col * kRowBytes + 16 + 4 * t)};
        int32_t isum[4];
        mma_s8_16x8x32(isum, a, b);
        // Accumulator i: row g (+8 for i >= 2), column 2t + (i & 1).
        const uint32_t sb0 = b_scale[warp_n + ni * 8 + 2 * t];
        const uint32_t sb1 = b_scale[warp_n + ni * 8 + 2 * t + 1];
        double(&acc)[4] = partial[mi][ni];
        acc[0] = accumulate_block(acc[0], isum[0], block_scale(sa0, sb0));
        acc[1] = accumulate_block(acc[1], isum[1], block_scale(sa0, sb1));
        acc[2] = accumulate_block(acc[2], isum[2], block_scale(sa1, sb0));
        acc[3] = accumulate_block(acc[3], isum[3], block_scale(sa1, sb1));
      }
    }
    __syncthreads();
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

}  // namespace

std::string gemm_generic_why_not(const GemmProblem& p) {
  if (p.device.type != A4W4_DEVICE_CUDA) return "operands are not on a CUDA device";
  if (device_info(p.device.ordinal).major < 8) return "needs an sm_80 or newer GPU";
  return {};
}

void gemm_generic(const GemmProblem& p, const ExecConfig&) {
  DeviceGuard guard(p.device.ordinal);
  const int64_t grid_n = (p.n + kTile - 1) / kTile, grid_m = (p.m + kTile - 1) / kTile;
  if (grid_m > 65535)
    fail(A4W4_ERROR_KERNEL_NOT_APPLICABLE,
         "gemm_generic: M = " + std::to_string(p.m) + " needs more than 65535 row tiles");
  const dim3 grid(static_cast<unsigned>(grid_n), static_cast<unsigned>(grid_m));
  gemm_generic_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(p);
  check_launch("gemm_generic_kernel");
}

}  // namespace a4w4::cuda
