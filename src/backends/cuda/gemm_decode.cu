// The decode GEMM family (small M, memory-bound): streams the FP4 weight B once through a per-warp
// ring of shared-memory slots (cp.async, several K tiles in flight), multiplies each tile with
// fp16 tensor-core MMAs and adds the block partials in registers. sm_90 (thread-block clusters).
//
// Roles are swapped relative to D = A.B^T: the weight tile is the MMA's A operand (16 weight rows)
// and the activations are its B operand (8 rows per MMA, up to 64), so M = 1 wastes no weight
// bandwidth. Each warp owns 16 weight rows; a CTA has 4 warps (64 rows) and one K partition.
// Activations of the current 512-wide K chunk are decoded once per CTA into shared memory.
// Exactness: each block is two fp16 MMAs from a zero accumulator on doubled E2M1 values, whose
// products and sums are small integers, so exact. Block partials 2^(sa+sb-256) * sum go to fp32
// where every scale of the chunk keeps them inside fp32's normal range (typical data), and in
// double otherwise (scales near the E8M0 extremes, NaN scales): fp32 or better, as the contract asks.
// Split-K: the CTAs of one cluster take contiguous K partitions; rank 0 adds their sums in order
// through distributed shared memory and writes D (alpha, beta*C, bias, one rounding).
//
// Fragment order: inside a block, lane (g, t) holds elements [8t, 8t+8) of a weight row (4 bytes)
// and feeds them to the k slots {2t, 2t+1, 2t+8, 2t+9} of two k16 MMAs; the activations use the
// same order, so each block's dot product is unchanged. The prepared layout stores exactly these words and is
// copied with 16-byte copies; a plain B is scattered into the same order with 4-byte copies.
#include <cooperative_groups.h>

#include <type_traits>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_utils.h"
#include "backends/cuda/device_common.cuh"
#include "numerics/weight_layout.h"

namespace a4w4::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerCta = kWarps * 16;
constexpr int kChunkTiles = 4;                    // K tiles of 128 per chunk
constexpr int kChunkBlocks = kChunkTiles * 4;     // 16 blocks = 512 elements
constexpr int kActRowBytes = kChunkBlocks * 64 + 64;  // fp16 row + padding (conflict-free reads)
constexpr int kMaxSplits = 8;                     // portable cluster size

// Weights stream through a per-warp ring of shared-memory slots filled by cp.async, kStages - 1
// K tiles ahead of the one being multiplied: the loads need no registers and never wait on use.
// A slot holds one K tile in the prepared layout's order (both layouts are copied into it), with
// the two 16-byte halves of each lane swapped on odd row groups so the reads are conflict-free.
constexpr int kStages = 8;  // a power of two: slot = tile & (kStages - 1)
constexpr int kSlotBytes = 1024 + 64;  // weights, then the 16 rows x 4 blocks of scales

[[maybe_unused]] __device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Copies `bytes` (4 or 16) from global to shared memory asynchronously; src_bytes = 0 zero-fills.
template <int kBytes>
__device__ __forceinline__ void copy_async(void* dst, const void* src, bool present) {
  const uint32_t src_bytes = present ? kBytes : 0;
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)),
                 "l"(src), "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(dst)),
                 "l"(src), "r"(src_bytes));
  }
}
[[maybe_unused]] __device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n"); }
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Offset of lane L's half h (row g + 8h) inside a slot.
[[maybe_unused]] __device__ __forceinline__ int half_offset(int lane, int h) { return lane * 32 + 16 * (h ^ ((lane >> 2) & 1)); }

// Issues the copies of K tile `k_tile` of this warp's 16 rows into `slot`.
template <bool kPrepared>
__device__ __forceinline__ void copy_weight_tile(const GemmProblem& p, int64_t row0, int64_t k_tile,
                                                 int64_t k_tiles, int64_t blocks, int lane,
                                                 uint8_t* slot) {
  const int g = lane / 4, t = lane % 4;
  if constexpr (kPrepared) {
    const uint8_t* tile = p.b.data + ((row0 / 16) * k_tiles + k_tile) * 1024 + lane * 32;
    copy_async<16>(slot + half_offset(lane, 0), tile, true);
    copy_async<16>(slot + half_offset(lane, 1), tile + 16, true);
    if (lane < 4)
      copy_async<16>(slot + 1024 + 16 * lane,
                     p.b.scale + ((row0 / 16) * k_tiles + k_tile) * 64 + 16 * lane, true);
  } else {
    // Lane (g, t) copies block t of rows g and g + 8; piece q of it belongs to lane (g, q).
    const int64_t block = k_tile * 4 + t;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = row0 + g + 8 * h;
      const bool present = row < p.n && block < blocks;
      const uint8_t* src = present ? p.b.data + row * p.b.stride_bytes + block * 16 : p.b.data;
#pragma unroll
      for (int q = 0; q < 4; ++q)
        copy_async<4>(slot + half_offset(g * 4 + q, h) + 4 * t, src + 4 * q, present);
    }
    if (lane < 16) {  // row lane's four block scales (K % 128 == 0, so all four exist)
      const int64_t row = row0 + lane;
      const bool present = row < p.n;
      const uint8_t* src = present ? p.b.scale + row * p.b.scale_stride + k_tile * 4 : p.b.scale;
      copy_async<4>(slot + 1024 + (lane % 8) * 8 + (lane / 8) * 4, src, present);
    }
  }
}

// Running min and max of the scale bytes of `word` whose bit is set in `valid_bytes`.
[[maybe_unused]] __device__ __forceinline__ void scale_range(uint32_t word, uint32_t valid_bytes,
                                                            uint32_t& lo, uint32_t& hi) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t s = __byte_perm(word, 0, 0x4440 | j);
    const bool valid = (valid_bytes >> j) & 1u;
    lo = min(lo, valid ? s : 0xFFu);
    hi = max(hi, valid ? s : 0u);
  }
}

[[maybe_unused]] __device__ __forceinline__ void warp_range(uint32_t& lo, uint32_t& hi) {
  lo = __reduce_min_sync(0xFFFFFFFFu, lo);
  hi = __reduce_max_sync(0xFFFFFFFFu, hi);
}

// Whether the block partials sum * 2^(sa+sb-256) of a tile (sum = 4 * dot, an integer, |sum| <=
// 4608) can be accumulated in fp32 without leaving its normal range: every scale finite, the
// factors 2^(sa-127) and 2^(sb-129) normal, the smallest nonzero partial at least 2^-126 and the
// largest total (2^20 blocks) below 2^127.
[[maybe_unused]] __device__ __forceinline__ bool fp32_accumulation_safe(uint32_t a_lo, uint32_t a_hi, uint32_t b_lo,
                                                       uint32_t b_hi) {
  return a_lo >= 1 && b_lo >= 3 && a_hi <= 254 && b_hi <= 254 && a_lo + b_lo >= 130 &&
         a_hi + b_hi <= 350;
}

// The activations of one chunk (rows [0, 8 * kNTiles), blocks [block0, block0 + 16)) held in
// registers between their loads and their decode into shared memory, so the loads of chunk i + 1
// are in flight while chunk i is multiplied. Thread t owns blocks u = t + 128 i (row u / 16,
// block u % 16): 16 packed bytes and the scale byte of each.
template <int kNTiles>
struct ActivationChunk {
  uint4 blocks[kNTiles];
  uint32_t scales[kNTiles];  // 0x100 marks a block that does not exist (row >= M or past K)
};

template <int kNTiles>
__device__ __forceinline__ void load_activations(const GemmProblem& p, int64_t block0,
                                                 int64_t blocks, bool vector_loads,
                                                 ActivationChunk<kNTiles>& out) {
#pragma unroll
  for (int i = 0; i < kNTiles; ++i) {
    const int u = threadIdx.x + kThreads * i, row = u / kChunkBlocks;
    const int64_t block = block0 + u % kChunkBlocks;
    uint4 v = {0, 0, 0, 0};
    uint32_t scale = 0x100u;
    if (row < p.m && block < blocks) {
      const uint8_t* src = p.a.data + row * p.a.stride_bytes + block * 16;
      if (vector_loads) {
        v = __ldg(reinterpret_cast<const uint4*>(src));
      } else {
        uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
        for (int b = 0; b < 16; ++b) w[b / 4] |= static_cast<uint32_t>(src[b]) << (8 * (b % 4));
        v = make_uint4(w[0], w[1], w[2], w[3]);
      }
      scale = __ldg(p.a.scale + row * p.a.scale_stride + block);
    }
    out.blocks[i] = v;
    out.scales[i] = scale;
  }
}

// Where one stage's decoded activations live in shared memory.
template <int kNTiles>
struct Stage {
  static constexpr int kRows = 8 * kNTiles;
  uint8_t* values;   // [row][kActRowBytes]: the chunk's 16 blocks as fp16 2*E2M1, order kept
  uint8_t* scale;    // [row][16] E8M0 bytes
  float* factor;     // [block][row] 2^(scale - 127)
  uint32_t* range;   // [warp][2]: min and max scale byte over the chunk's existing blocks
  static constexpr int kBytes = kRows * (kActRowBytes + kChunkBlocks + 4 * kChunkBlocks) + 32;
  __device__ explicit Stage(uint8_t* base)
      : values(base),
        scale(base + kRows * kActRowBytes),
        factor(reinterpret_cast<float*>(base + kRows * (kActRowBytes + kChunkBlocks))),
        range(reinterpret_cast<uint32_t*>(base + kRows * (kActRowBytes + 5 * kChunkBlocks))) {}
};

template <int kNTiles>
__device__ __forceinline__ void store_activations(const ActivationChunk<kNTiles>& chunk,
                                                  const Stage<kNTiles>& stage) {
  uint32_t lo = 0xFFu, hi = 0;
#pragma unroll
  for (int i = 0; i < kNTiles; ++i) {
    const int u = threadIdx.x + kThreads * i, row = u / kChunkBlocks, block = u % kChunkBlocks;
    const uint4 v = chunk.blocks[i];
    uint4* dst = reinterpret_cast<uint4*>(stage.values + row * kActRowBytes + block * 64);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint2 lo = e2m1x4_to_f16x4(words[q]), hi = e2m1x4_to_f16x4(words[q] >> 16);
      dst[q] = make_uint4(lo.x, lo.y, hi.x, hi.y);
    }
    const uint32_t s = chunk.scales[i] & 0xFFu;
    stage.scale[row * kChunkBlocks + block] = static_cast<uint8_t>(s);
    stage.factor[block * Stage<kNTiles>::kRows + row] = __uint_as_float(s << 23);
    if (chunk.scales[i] <= 0xFFu) lo = min(lo, s), hi = max(hi, s);
  }
  warp_range(lo, hi);
  if (threadIdx.x % 32 == 0) {
    stage.range[2 * (threadIdx.x / 32)] = lo;
    stage.range[2 * (threadIdx.x / 32) + 1] = hi;
  }
}

template <int kNTiles, bool kPrepared>
__global__ void __launch_bounds__(kThreads) gemm_decode_kernel(GemmProblem p, int splits) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  constexpr int kRows = 8 * kNTiles;
  extern __shared__ __align__(16) uint8_t smem[];
  // Two stages of decoded activations (chunk i in one while chunk i + 1 is written to the other),
  // then each warp's ring of weight slots.
  const Stage<kNTiles> stages[2] = {Stage<kNTiles>(smem), Stage<kNTiles>(smem + Stage<kNTiles>::kBytes)};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint8_t* ring = smem + 2 * Stage<kNTiles>::kBytes + warp * kStages * kSlotBytes;

  const int64_t row0 = int64_t{blockIdx.x} * kRowsPerCta + warp * 16;  // this warp's weight rows
  const bool warp_has_rows = row0 < p.n;
  const int64_t blocks = p.k / 32, k_tiles = layout::k_tiles(p.k);
  const int split = blockIdx.y;
  const int64_t block_begin = split * blocks / splits, block_end = (split + 1) * blocks / splits;
  const int64_t tile_begin = block_begin / 4, tile_end = (block_end + 3) / 4;
  const bool vector_a = reinterpret_cast<uintptr_t>(p.a.data) % 16 == 0 && p.a.stride_bytes % 16 == 0;
  const uint32_t row_mask[2] = {row0 + g < p.n ? 0xFu : 0u, row0 + g + 8 < p.n ? 0xFu : 0u};

  // Tiles are counted from the partition's first (32-bit counters: the loop runs per K tile).
  const int tiles = static_cast<int>(tile_end - tile_begin);
  const int first_block = static_cast<int>(block_begin - tile_begin * 4);  // blocks to skip
  const int last_block = static_cast<int>(block_end - tile_begin * 4);
  const int blocks_here = static_cast<int>(blocks - tile_begin * 4);  // blocks that exist

  // Prologue: the first kStages - 1 weight tiles in flight, the first activation chunk staged
  // and the second one loading.
  auto issue = [&](int tile) {
    if (warp_has_rows && tile < tiles)
      copy_weight_tile<kPrepared>(p, row0, tile_begin + tile, k_tiles, blocks, lane,
                                  ring + (tile & (kStages - 1)) * kSlotBytes);
    commit_copies();  // an empty group past the end keeps the group count uniform
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  ActivationChunk<kNTiles> next_act;
  load_activations<kNTiles>(p, tile_begin * 4, blocks, vector_a, next_act);
  store_activations<kNTiles>(next_act, stages[0]);
  if (kChunkTiles < tiles)
    load_activations<kNTiles>(p, (tile_begin + kChunkTiles) * 4, blocks, vector_a, next_act);
  __syncthreads();

  // Block partials go to fp32 accumulators where the tile's scales allow it, else to doubles
  // (rare: kept in local memory, out of the fast path's way).
  float fast[kNTiles][4] = {};
  double exact[kNTiles * 4];
#pragma unroll
  for (int i = 0; i < kNTiles * 4; ++i) exact[i] = 0.0;
  uint32_t a_lo = 0, a_hi = 0;  // the current activation chunk's scale range

#pragma unroll 1
  for (int tile = 0; tile < tiles; ++tile) {
    const int chunk = tile / kChunkTiles;
    if ((tile & (kChunkTiles - 1)) == 0) {
      if (tile != 0) {
        // Entering `chunk`: its activations go to stage chunk % 2 (read last by chunk - 2, which
        // every warp finished before the previous barrier), then the next chunk loads.
        store_activations<kNTiles>(next_act, stages[chunk & 1]);
        __syncthreads();
        if ((chunk + 1) * kChunkTiles < tiles)
          load_activations<kNTiles>(p, (tile_begin + (chunk + 1) * kChunkTiles) * 4, blocks,
                                    vector_a, next_act);
      }
      const Stage<kNTiles>& act = stages[chunk & 1];
      a_lo = 0xFFu, a_hi = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) a_lo = min(a_lo, act.range[2 * w]), a_hi = max(a_hi, act.range[2 * w + 1]);
    }
    issue(tile + kStages - 1);
    if (!warp_has_rows) continue;
    wait_copies<kStages - 1>();
    __syncwarp();

    const Stage<kNTiles>& act = stages[chunk & 1];
    const uint8_t* slot = ring + (tile & (kStages - 1)) * kSlotBytes;
    const uint4 w0 = *reinterpret_cast<const uint4*>(slot + half_offset(lane, 0));
    const uint4 w1 = *reinterpret_cast<const uint4*>(slot + half_offset(lane, 1));
    const uint2 scales = *reinterpret_cast<const uint2*>(slot + 1024 + g * 8);
    const uint32_t words[2][4] = {{w0.x, w0.y, w0.z, w0.w}, {w1.x, w1.y, w1.z, w1.w}};

    // fp32 or double for this tile: one warp-wide look at the scales it multiplies.
    const int exist = blocks_here - tile * 4;
    const uint32_t valid = exist >= 4 ? 0xFu : (1u << exist) - 1u;
    uint32_t b_lo = 0xFFu, b_hi = 0;
    scale_range(scales.x, valid & row_mask[0], b_lo, b_hi);
    scale_range(scales.y, valid & row_mask[1], b_lo, b_hi);
    warp_range(b_lo, b_hi);
    const bool use_fp32 = fp32_accumulation_safe(a_lo, a_hi, b_lo, b_hi);

#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int block = tile * 4 + j;  // relative to the first tile
      if (block < first_block || block >= last_block) continue;  // warp-uniform
      // Weight rows g and g + 8, elements [8t, 8t + 8) of block j as fp16 2*E2M1: the first four
      // feed the block's first k16 MMA, the last four its second (activations likewise).
      const uint2 r0a = e2m1x4_to_f16x4(words[0][j]), r0b = e2m1x4_to_f16x4(words[0][j] >> 16);
      const uint2 r1a = e2m1x4_to_f16x4(words[1][j]), r1b = e2m1x4_to_f16x4(words[1][j] >> 16);
      const uint32_t a_first[4] = {r0a.x, r1a.x, r0a.y, r1a.y};
      const uint32_t a_second[4] = {r0b.x, r1b.x, r0b.y, r1b.y};
      const uint32_t sb0 = __byte_perm(scales.x, 0, 0x4440 | j);
      const uint32_t sb1 = __byte_perm(scales.y, 0, 0x4440 | j);
      const int local_block = (tile & (kChunkTiles - 1)) * 4 + j;
      // The MMAs give sum = 4 * (block dot product), exactly.
      auto block_sum = [&](int nt, float (&sum)[4]) {
        const uint4 v = *reinterpret_cast<const uint4*>(
            act.values + (nt * 8 + g) * kActRowBytes + local_block * 64 + 16 * t);
        const uint32_t b_first[2] = {v.x, v.y}, b_second[2] = {v.z, v.w};
        sum[0] = sum[1] = sum[2] = sum[3] = 0.0f;
        mma_f16_16x8x16(sum, a_first, b_first);
        mma_f16_16x8x16(sum, a_second, b_second);
      };
      if (use_fp32) {
        // fb carries the 1/4: sum * fa * fb = dot * 2^(sa + sb - 254).
        const float fb0 = __uint_as_float((sb0 - 2) << 23), fb1 = __uint_as_float((sb1 - 2) << 23);
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
          float sum[4];
          block_sum(nt, sum);
          // Accumulator i: weight row g (+8 for i >= 2), activation row 2t + (i & 1).
          const float2 fa =
              *reinterpret_cast<const float2*>(act.factor + local_block * kRows + nt * 8 + 2 * t);
          fast[nt][0] = fmaf(sum[0], fa.x * fb0, fast[nt][0]);
          fast[nt][1] = fmaf(sum[1], fa.y * fb0, fast[nt][1]);
          fast[nt][2] = fmaf(sum[2], fa.x * fb1, fast[nt][2]);
          fast[nt][3] = fmaf(sum[3], fa.y * fb1, fast[nt][3]);
        }
      } else {
#pragma unroll 1
        for (int nt = 0; nt < kNTiles; ++nt) {
          float sum[4];
          block_sum(nt, sum);
          const uint32_t sa0 = act.scale[(nt * 8 + 2 * t) * kChunkBlocks + local_block];
          const uint32_t sa1 = act.scale[(nt * 8 + 2 * t + 1) * kChunkBlocks + local_block];
          double* e = exact + nt * 4;  // block_scale: 2^(sa + sb - 256), NaN for 0xFF
          e[0] = fma(static_cast<double>(sum[0]), block_scale(sa0, sb0), e[0]);
          e[1] = fma(static_cast<double>(sum[1]), block_scale(sa1, sb0), e[1]);
          e[2] = fma(static_cast<double>(sum[2]), block_scale(sa0, sb1), e[2]);
          e[3] = fma(static_cast<double>(sum[3]), block_scale(sa1, sb1), e[3]);
        }
      }
    }
    __syncwarp();  // every lane is done with the slot before it is refilled
  }
  wait_copies<0>();

  double acc[kNTiles][4];
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = exact[nt * 4 + i] + static_cast<double>(fast[nt][i]);

  if (splits > 1) {
    // Partitions 1.. leave their sums in their own shared memory; rank 0 adds them in order.
    cg::cluster_group cluster = cg::this_cluster();
    __syncthreads();  // shared memory is reused for the sums
    double* sums = reinterpret_cast<double*>(smem);
    if (split != 0) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) sums[(nt * 4 + i) * kThreads + threadIdx.x] = acc[nt][i];
    }
    cluster.sync();
    if (split == 0) {
      for (int r = 1; r < splits; ++r) {
        const double* remote = cluster.map_shared_rank(sums, r);
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[nt][i] += remote[(nt * 4 + i) * kThreads + threadIdx.x];
      }
    }
    cluster.sync();  // keep every rank's shared memory alive until rank 0 has read it
    if (split != 0) return;
  }
  if (!warp_has_rows) return;
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t n = row0 + g + (i >= 2 ? 8 : 0);
      const int64_t m = nt * 8 + 2 * t + (i & 1);
      if (m < p.m && n < p.n) store_output(p, m, n, acc[nt][i]);
    }
#else
  (void)p;
  (void)splits;
  __trap();
#endif
}

template <int kNTiles>
size_t shared_bytes() {
  const size_t staging = 2 * size_t{Stage<kNTiles>::kBytes} + size_t{kWarps} * kStages * kSlotBytes;
  const size_t sums = size_t{kNTiles} * 4 * kThreads * sizeof(double);
  return staging > sums ? staging : sums;
}

template <int kNTiles, bool kPrepared>
void launch(const GemmProblem& p, int splits, int64_t ctas) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(ctas), static_cast<unsigned>(splits), 1);
  config.blockDim = dim3(kThreads, 1, 1);
  config.dynamicSmemBytes = shared_bytes<kNTiles>();
  check_cuda(cudaFuncSetAttribute(gemm_decode_kernel<kNTiles, kPrepared>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(config.dynamicSmemBytes)),
             "cudaFuncSetAttribute(gemm_decode_kernel)");
  config.stream = static_cast<cudaStream_t>(p.stream);
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = 1;
  attribute.val.clusterDim.y = static_cast<unsigned>(splits);
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  check_cuda(cudaLaunchKernelEx(&config, gemm_decode_kernel<kNTiles, kPrepared>, p, splits),
             "gemm_decode_kernel launch");
}

template <bool kPrepared>
void launch_for_m(const GemmProblem& p, int splits, int64_t ctas) {
  if (p.m <= 8) return launch<1, kPrepared>(p, splits, ctas);
  if (p.m <= 16) return launch<2, kPrepared>(p, splits, ctas);
  if (p.m <= 32) return launch<4, kPrepared>(p, splits, ctas);
  return launch<8, kPrepared>(p, splits, ctas);
}

}  // namespace

constexpr int64_t kDecodeMaxM = 64;

std::string gemm_decode_why_not(const GemmProblem& p) {
  if (p.device.type != A4W4_DEVICE_CUDA) return "operands are not on a CUDA device";
  if (device_info(p.device.ordinal).major < 9) return "needs an sm_90 GPU (thread-block clusters)";
  if (p.m > kDecodeMaxM)
    return "M = " + std::to_string(p.m) + " is above the decode limit of " +
           std::to_string(kDecodeMaxM);
  if (p.split_k > kMaxSplits)
    return "split_k = " + std::to_string(p.split_k) + " is above the decode limit of " +
           std::to_string(kMaxSplits);
  const auto address = reinterpret_cast<uintptr_t>(p.b.data);
  const auto scale_address = reinterpret_cast<uintptr_t>(p.b.scale);
  if (p.b.layout == A4W4_LAYOUT_PLAIN) {
    if (address % 16 != 0 || p.b.stride_bytes % 16 != 0)
      return "a plain B must start on 16 bytes with a row stride that is a multiple of 32 elements";
    if (p.k % 128 != 0 || scale_address % 4 != 0 || p.b.scale_stride % 4 != 0)
      return "a plain B needs K % 128 == 0 and 4-byte aligned scale rows (prepare the weight to "
             "lift this)";
  } else if (address % 16 != 0 || scale_address % 16 != 0) {
    return "a prepared B and its scales must start on 16 bytes";
  }
  return {};
}

void gemm_decode(const GemmProblem& p, const ExecConfig&) {
  DeviceGuard guard(p.device.ordinal);
  const int64_t ctas = (p.n + kRowsPerCta - 1) / kRowsPerCta;
  const int64_t blocks = p.k / 32;
  int splits = p.split_k;
  if (splits == 0) {
    // Enough CTAs for about four per SM, each partition at least one chunk long.
    const int64_t want = 4 * int64_t{device_info(p.device.ordinal).sm_count};
    splits = 1;
    while (splits < kMaxSplits && ctas * splits < want && blocks / (2 * splits) >= kChunkBlocks)
      splits *= 2;
  }
  if (p.b.layout == A4W4_LAYOUT_PLAIN) {
    launch_for_m<false>(p, splits, ctas);
  } else {
    launch_for_m<true>(p, splits, ctas);
  }
}

}  // namespace a4w4::cuda
