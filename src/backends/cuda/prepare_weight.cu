// Rearranges a plain weight into a prepared layout (numerics/weight_layout.h): one thread per
// 4-byte word of the prepared buffer, which is written whole (padding as zeros), so the result
// does not depend on what the buffer held before.
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_utils.h"
#include "numerics/weight_layout.h"

namespace a4w4::cuda {
namespace {

constexpr int kThreads = 256;

// Word w of tile (group, k_tile). Version 1: lane = w / 8, half = (w / 4) % 2, block j = w % 4;
// it holds bytes [4 * piece, 4 * piece + 4) of block j of row r = lane / 4 + 8 * half, piece =
// lane % 4. Version 2: row r = w / 16 of the tile, bytes [4 * (w % 16), + 4) of its 64 (block j
// = (w % 16) / 4, bytes [4 * (w % 4), + 4) of it).
__global__ void __launch_bounds__(kThreads) prepare_weight_kernel(PrepareWeightProblem p) {
  const bool rows_in_turn = layout::tiles_layout(p.layout) == A4W4_LAYOUT_PREPARED_V2;
  const int64_t k_tiles = layout::k_tiles(p.k);
  const int64_t words = layout::prepared_weight_bytes(p.n, p.k) / 4;
  const int64_t scale_words = layout::prepared_scale_bytes(p.n, p.k) / 4;
  const int64_t blocks = p.k / 32;
  for (int64_t w = blockIdx.x * int64_t{kThreads} + threadIdx.x; w < words + scale_words;
       w += int64_t{gridDim.x} * kThreads) {
    if (w < words) {
      const int64_t tile = w / (layout::kTileBytes / 4), in_tile = w % (layout::kTileBytes / 4);
      const int64_t lane = in_tile / 8, half = (in_tile / 4) % 2;
      const int64_t r = rows_in_turn ? in_tile / 16 : lane / 4 + 8 * half;
      const int64_t j = rows_in_turn ? (in_tile % 16) / 4 : in_tile % 4;
      const int64_t piece = rows_in_turn ? in_tile % 4 : lane % 4;
      const int64_t n = (tile / k_tiles) * layout::kTileRows + r;
      const int64_t block = (tile % k_tiles) * layout::kTileBlocks + j;
      uint32_t word = 0;
      if (n < p.n && block < blocks) {
        const uint8_t* src = p.b.data + n * p.b.stride_bytes + block * 16 + piece * 4;
        for (int i = 0; i < 4; ++i) word |= static_cast<uint32_t>(src[i]) << (8 * i);
      }
      reinterpret_cast<uint32_t*>(p.prepared)[w] = word;
    } else {
      // Scale word: tile, then r8 = 0..7 and half: 4 block scales of one row.
      const int64_t sw = w - words;
      const int64_t tile = sw / (layout::kTileScaleBytes / 4), in_tile = sw % (layout::kTileScaleBytes / 4);
      const int64_t n = (tile / k_tiles) * layout::kTileRows + in_tile / 2 + 8 * (in_tile % 2);
      uint32_t word = 0;
      for (int j = 0; j < 4; ++j) {
        const int64_t block = (tile % k_tiles) * layout::kTileBlocks + j;
        if (n < p.n && block < blocks)
          word |= static_cast<uint32_t>(p.b.scale[n * p.b.scale_stride + block]) << (8 * j);
      }
      reinterpret_cast<uint32_t*>(p.prepared_scale)[sw] = word;
    }
  }
}

}  // namespace

void prepare_weight(const PrepareWeightProblem& p) {
  DeviceGuard guard(p.device.ordinal);
  if (reinterpret_cast<uintptr_t>(p.prepared) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.prepared_scale) % 16 != 0)
    fail(A4W4_ERROR_UNSUPPORTED_LAYOUT,
         "prepared, prepared_scale: buffers must be 16-byte aligned (cudaMalloc memory is)");
  const int64_t words =
      (layout::prepared_weight_bytes(p.n, p.k) + layout::prepared_scale_bytes(p.n, p.k)) / 4;
  const int64_t cap = int64_t{device_info(p.device.ordinal).sm_count} * 16;
  const int grid = static_cast<int>(std::min((words + kThreads - 1) / kThreads, cap));
  prepare_weight_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(p);
  check_launch("prepare_weight_kernel");
  if (p.layout == A4W4_LAYOUT_PREPARED_V2_INT8) prepare_int8_part(p);
}

}  // namespace a4w4::cuda
