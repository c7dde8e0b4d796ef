// The GEMV family (M <= 4, plain or prepared B): streams the FP4 weight B once, each lane owning
// whole 32-wide blocks, and sums every block exactly with integer dot products (dp4a) — no tensor
// cores, no shared-memory staging of B. sm_90 (thread-block clusters reduce the K chunks).
//
// Why not the decode kernel's int8 MMAs at M <= 4: an MMA's fragments scatter every lane over
// several rows and blocks, so every 8 weights need their own scale bookkeeping; here a lane reads
// one block of one weight row as a single 16-byte load (a warp reads 512 contiguous bytes of a
// row), its dot product is a few dp4a, and the block scale is applied once to the block's sum.
//
// Weights: a byte permute (PRMT) looks four E2M1 codes up in a table of doubled magnitudes
// {0,1,2,3,4,6,8,12}; its sign mode gives 0 for the negative codes, so one PRMT yields the positive
// part w+ of four weights and one on the codes with flipped sign bits the negative part w-. For
// M = 1 both parts are dotted with the activations (two dp4a); for M >= 2 they are first merged
// into signed bytes (two integer ops), so each activation row costs one dp4a per four weights.
//
// Exactness: a block's sum of doubled products (|sum| <= 32 * 144) is an exact int32; it becomes
// a float exactly (magic-number conversion) and is scaled by 2^(sa + sb - 256), built from the
// exponent bits, then added to an fp32 accumulator (the contract's "fp32 or better"). A lane
// tracks the smallest and largest weight scale it saw; a column group whose scales (with the
// activation scales of the chunk) could leave fp32's normal range or hold a NaN is recomputed by
// the same warp with double accumulators and exact block scales (rare; never a wrong answer).
//
// Work split: K is cut into chunks of 32 blocks (one per lane). Each warp owns one chunk (or,
// beyond 32 chunks, several), converts its activations once, and streams the chunk's blocks of
// every column of its CTA's column tile, 8 columns per step (8 loads in flight per lane; at M = 1
// the next step's 8 are loaded while one is summed). The warps of a CTA (up to 4, or 8 at M = 1)
// and the CTAs of a thread-block cluster (up to 8) cover the chunks of one column tile; the sums
// are added in a fixed order (warps, then cluster ranks through distributed shared memory), so
// results do not depend on timing. The column tile (8 to 128 columns) is sized by a wave model over
// the clusters that can be resident at once (choose_shape).
#include <cooperative_groups.h>

#include <atomic>

#include "backends/cuda/cluster_launch.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_utils.h"
#include "backends/cuda/device_common.cuh"
#include "backends/cuda/int8_fold.cuh"
#include "backends/cuda/sm90_family.cuh"
#include "numerics/weight_layout.h"

namespace a4w4::cuda {
namespace {

// Warps per CTA: 4, or 8 where that makes one CTA cover K (5 to 8 chunks) at M = 1: the chunks
// are then reduced in shared memory instead of over a cluster of two CTAs (H200, plain B: 1 x 8192
// x 8192 11.9 -> 11.2 us, 1 x 10240 x 8192 14.0 -> 13.2, 1 x 28672 x 8192 32.9 -> 32.1; but
// clusters of 8-warp CTAs at K = 28672 and 8 warps at M = 2 were slower).
constexpr int kMaxWarps = 8;
constexpr int kMaxTileColumns = 128;  // columns per column tile (CTA), in groups of kCols
constexpr int kChunkBlocks = 32;      // one block per lane
constexpr int kMaxClusterCtas = 8;    // portable cluster size
// With split_k, K chunks up to one per warp of the largest grid of 4-warp CTAs (no warp loops).
constexpr int64_t kMaxSplitChunks = 4 * kMaxClusterCtas;
constexpr int64_t kGemvMaxM = 4;

// K's chunks of kChunkBlocks blocks (the last one partial).
__host__ __device__ constexpr int64_t k_chunks(int64_t k) {
  return (k / 32 + kChunkBlocks - 1) / kChunkBlocks;
}

// How a launch cuts the problem (uniform over the grid).
struct GemvShape {
  int warps;    // per CTA, <= kWarps
  int cluster;  // CTAs per column tile, <= kMaxClusterCtas
  int groups;   // column groups per column tile
  int waves;    // of the clusters resident at once, 2 for two or more (the launch order)
  int partitions;  // split_k's (1: none); each starts on a chunk (gemm_gemv_why_not)
};

// Whether every block partial 2^(sa + sb - 256) * sum can be accumulated in fp32 for activation
// scales in [a_lo, a_hi] and weight scales in [b_lo, b_hi]: no NaN (0xFF), the factor normal
// (sa + sb >= 130) and 2^24 blocks of the largest sum (< 2^13) below 2^127 (sa + sb <= 346).
__device__ __forceinline__ bool fp32_partials_safe(uint32_t a_lo, uint32_t a_hi, uint32_t b_lo,
                                                   uint32_t b_hi) {
  return a_hi <= 254 && b_hi <= 254 && a_lo + b_lo >= 130 && a_hi + b_hi <= 346;
}

// One lane's block of every activation row of a chunk: 32 doubled values as int8, and its scale.
template <int kM>
struct ActivationBlock {
  uint32_t values[kM][8];     // word 2j: elements 8j..8j+3, word 2j+1: 8j+4..8j+7
  uint32_t scale[kM];         // E8M0 byte; 127 for rows past M and blocks past K (values are 0)
  int32_t exponent_bits[kM];  // (scale - 129) << 23: added to sb << 23 gives 2^(sa + sb - 256)
  uint32_t scale_min, scale_max;
};

template <int kM>
__device__ __forceinline__ void load_activations(const GemmProblem& p, int64_t block, bool active,
                                                 ActivationBlock<kM>& act) {
  act.scale_min = 255, act.scale_max = 0;
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    uint4 raw = make_uint4(0, 0, 0, 0);
    uint32_t scale = 127;
    if (active && m < p.m) {
      const uint8_t* row = p.a.data + m * p.a.stride_bytes + block * 16;
      raw = load_packed_block(row, reinterpret_cast<uintptr_t>(row) % 16 == 0);
      scale = p.a.scale[m * p.a.scale_stride + block];
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      act.values[m][2 * j] = e2m1x4_to_s8x4(word_of(raw, j));
      act.values[m][2 * j + 1] = e2m1x4_to_s8x4(word_of(raw, j) >> 16);
    }
    act.scale[m] = scale;
    act.exponent_bits[m] = (static_cast<int32_t>(scale) - 129) * (1 << 23);
    act.scale_min = min(act.scale_min, scale), act.scale_max = max(act.scale_max, scale);
  }
}

// Exact int32 sums of one weight block (16 bytes) with every activation row's block.
template <int kM>
__device__ __forceinline__ void block_sums(const uint4& weights, const ActivationBlock<kM>& act,
                                           int32_t (&sums)[kM]) {
  if constexpr (kM == 1) {
    int32_t positive = 0, negative = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t codes = word_of(weights, j), flipped = codes ^ 0x88888888u;
      positive = __dp4a(static_cast<int>(e2m1x4_positive_part(codes)),
                        static_cast<int>(act.values[0][2 * j]), positive);
      positive = __dp4a(static_cast<int>(e2m1x4_positive_part(codes >> 16)),
                        static_cast<int>(act.values[0][2 * j + 1]), positive);
      negative = __dp4a(static_cast<int>(e2m1x4_positive_part(flipped)),
                        static_cast<int>(act.values[0][2 * j]), negative);
      negative = __dp4a(static_cast<int>(e2m1x4_positive_part(flipped >> 16)),
                        static_cast<int>(act.values[0][2 * j + 1]), negative);
    }
    sums[0] = positive - negative;
  } else {
#pragma unroll
    for (int m = 0; m < kM; ++m) sums[m] = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t codes = word_of(weights, j), flipped = codes ^ 0x88888888u;
      const int lo =
          static_cast<int>(signed_s8x4(e2m1x4_positive_part(codes), e2m1x4_positive_part(flipped)));
      const int hi = static_cast<int>(
          signed_s8x4(e2m1x4_positive_part(codes >> 16), e2m1x4_positive_part(flipped >> 16)));
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        sums[m] = __dp4a(lo, static_cast<int>(act.values[m][2 * j]), sums[m]);
        sums[m] = __dp4a(hi, static_cast<int>(act.values[m][2 * j + 1]), sums[m]);
      }
    }
  }
}

// Sums `values` (V = 8 * kM entries per lane) over the warp's 32 lanes: halves are exchanged
// while more than one entry is left (a transpose-reduction), then plain butterflies. Lane L ends
// with the total of entry L / (32 / V) in values[0].
template <int V, typename T>
__device__ __forceinline__ void warp_sum_entries(T (&values)[V], int lane) {
  int count = V;
#pragma unroll
  for (int offset = 16; offset >= 1; offset /= 2) {
    if (count > 1) {
      const int half = count / 2;
      const bool upper = (lane & offset) != 0;
#pragma unroll
      for (int i = 0; i < V / 2; ++i) {
        if (i < half) {
          const T send = upper ? values[i] : values[i + half];
          const T keep = upper ? values[i + half] : values[i];
          values[i] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, offset);
        }
      }
      count = half;
    } else {
      values[0] += __shfl_xor_sync(0xFFFFFFFFu, values[0], offset);
    }
  }
}

// One step of a warp: the block at `block` of `kCols` columns from `column0` (`columns` of them
// exist; none when the lane's block is past K), loaded at once.
template <int kCols>
struct GroupLoad {
  uint4 weights[kCols];
  uint32_t scales[kCols];
};

// A plain B's block scale, asking L2 for the 256 bytes around it: the warps of the other K chunks
// read the rest of the row's scales at about the same time (H200: 1-4% faster at M = 1..4).
__device__ __forceinline__ uint32_t load_scale_run(const uint8_t* p) {
  uint32_t scale;
  asm volatile("ld.global.nc.L2::256B.u8 %0, [%1];" : "=r"(scale) : "l"(p));
  return scale;
}

// A plain B's rows, or (kTiled) a prepared version-2 B's tiles: a group's 8 columns (column0 is a
// multiple of 8) lie in one half of one 16-row tile group, their blocks 64 bytes and their scales
// 8 bytes apart (numerics/weight_layout.h). A compile-time choice: deciding it at run time cost
// the plain-B kernels 2-4% (H200, 1 x 8192 x 8192 10.9 -> 11.4 us).
template <int kCols, bool kTiled>
__device__ __forceinline__ void load_group(const GemmProblem& p, int64_t column0, int columns,
                                           int64_t block, GroupLoad<kCols>& load) {
  const uint8_t* weight_row;
  const uint8_t* scale_row;
  int64_t weight_step, scale_step;
  if constexpr (!kTiled) {
    weight_row = p.b.data + column0 * p.b.stride_bytes + block * 16;
    scale_row = p.b.scale + column0 * p.b.scale_stride + block;
    weight_step = p.b.stride_bytes, scale_step = p.b.scale_stride;
  } else {
    const int64_t k_tiles = layout::k_tiles(p.k);
    weight_row = p.b.data + layout::row_run_offset(column0, block / layout::kTileBlocks, k_tiles) +
                 (block % layout::kTileBlocks) * 16;
    scale_row = p.b.scale + layout::prepared_scale_offset(column0, block, k_tiles);
    weight_step = layout::kRowRunBytes, scale_step = layout::kScaleRowStep;
  }
  // Running pointers: one 64-bit add per column instead of a multiply.
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    load.weights[c] = make_uint4(0, 0, 0, 0);
    load.scales[c] = 127;
    if (c < columns) {
      load.weights[c] = __ldcs(reinterpret_cast<const uint4*>(weight_row));
      load.scales[c] = load_scale_run(scale_row);
    }
    weight_row += weight_step, scale_row += scale_step;
  }
}

// Adds a loaded step to the lane's sums: fast mode adds fp32 partials and records the weight
// scales it saw, exact mode adds double partials with exact block scales.
template <int kM, int kCols, bool kExact>
__device__ __forceinline__ void sum_group(const GroupLoad<kCols>& load,
                                          const ActivationBlock<kM>& act, float (&fast)[kCols * kM],
                                          double (&exact)[kCols * kM], uint32_t& scale_min,
                                          uint32_t& scale_max) {
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    int32_t sums[kM];
    block_sums<kM>(load.weights[c], act, sums);
    if constexpr (kExact) {
#pragma unroll
      for (int m = 0; m < kM; ++m)
        exact[c * kM + m] =
            accumulate_block(exact[c * kM + m], sums[m], block_scale(act.scale[m], load.scales[c]));
    } else {
      scale_min = min(scale_min, load.scales[c]), scale_max = max(scale_max, load.scales[c]);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        const float sum = fold::small_int_to_float(sums[m]);  // exact: |sum| <= 4608
        const float factor =
            __int_as_float(static_cast<int32_t>(load.scales[c]) * (1 << 23) + act.exponent_bits[m]);
        fast[c * kM + m] = fmaf(sum, factor, fast[c * kM + m]);
      }
    }
  }
}

// CTAs of 4 warps per SM as a bound: the register budgets the kernels reached when unbounded (96
// at M = 1, 128 at M = 1 loading ahead and at M = 2, 168 at M = 4); half as many CTAs of 8 warps.
template <int kM, bool kPrefetch, int kWarps>
inline constexpr int kGemvCtasPerSm = (kM == 4 ? 3 : (kM == 1 && !kPrefetch ? 5 : 4)) * 4 / kWarps;

// kEarlyB (a constant B, p.b_constant; M = 1): the first step's weights are requested before the
// wait for the kernel ahead (its own instantiation: in the 96-register M = 1 kernel the step held
// across that wait spilled, and the spill slowed the calls without it, 1 x 5120 x 2880 5.8 -> 7.5
// us on an H100).
template <int kM, int kCols, bool kPrefetch, bool kTiled, int kWarps, bool kEarlyB = false>
__global__ void __launch_bounds__(kWarps * 32, kGemvCtasPerSm<kM, kPrefetch, kWarps>)
    gemm_gemv_kernel(GemmProblem p, GemvShape shape) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  static_assert(!kEarlyB || kM == 1);
  constexpr int kEntries = kCols * kM;  // per lane and column group
  static_assert(kEntries <= 32, "one entry per lane at most after the warp reduction");
  constexpr int kTileEntries = kMaxTileColumns * kM;
  // Each warp's sums for the column tile, then (rank 0) the CTA's.
  __shared__ double partial[kWarps][kTileEntries];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rank = blockIdx.y;  // in the cluster: which chunks
  const int64_t tile_column0 = int64_t{blockIdx.x} * shape.groups * kCols;
  const int64_t blocks = p.k / 32;
  const int64_t chunks = k_chunks(p.k);
  const int64_t warps_per_tile = int64_t{shape.warps} * shape.cluster;
  const int64_t first_chunk = int64_t{rank} * shape.warps + warp;
  // This warp's chunks: first_chunk, + warps_per_tile, ...; its steps: every group x chunk.
  const int my_chunks =
      first_chunk < chunks
          ? static_cast<int>((chunks - first_chunk + warps_per_tile - 1) / warps_per_tile)
          : 0;
  const int steps = shape.groups * my_chunks;
  // A step's group and chunk: no division where the warp has one chunk (the usual case; the
  // division by my_chunks took some 30 instructions a step).
  auto step_group = [&](int step) { return my_chunks == 1 ? step : step / my_chunks; };
  auto step_block = [&](int step) {
    const int chunk = my_chunks == 1 ? 0 : step % my_chunks;
    return (first_chunk + int64_t{chunk} * warps_per_tile) * kChunkBlocks + lane;
  };
  auto step_columns = [&](int step, int64_t block) {
    const int64_t column0 = tile_column0 + int64_t{step_group(step)} * kCols;
    return block < blocks ? static_cast<int>(min(int64_t{kCols}, p.n - column0)) : 0;
  };
  auto load_step = [&](int step, GroupLoad<kCols>& load) {
    const int64_t block = step_block(step);
    load_group<kCols, kTiled>(p, tile_column0 + int64_t{step_group(step)} * kCols,
                              step_columns(step, block), block, load);
  };

  // Launched early (programmatic dependent launch, see launch()): the next kernel may start while
  // this one runs, and this one touches nothing the kernel before it may write before that kernel
  // is done — except a constant B (kEarlyB), whose first step it requests before it waits (H100,
  // back to back: 1 x 8192 x 8192 14.0 -> 12.5 us, 1 x 5120 x 2880 5.8 -> 4.6; at M = 2 and 4 the
  // step held across the activations' conversion spilled: 2 x 28672 x 8192 47.7 -> 54.5). With
  // kPrefetch, the step loaded ahead; the first is requested before the activations, so that the
  // two latencies overlap (without it, the weights in flight during the activations' conversion
  // cost registers the M >= 2 kernels cannot spare: 223 instead of 167 at M = 4).
  allow_next_grid();
  GroupLoad<kCols> current, next;
  const bool first_early = kEarlyB && steps > 0;
  if (first_early) load_step(0, kPrefetch ? next : current);
  wait_for_previous_grid();
  if (!kEarlyB && kPrefetch && steps > 0) load_step(0, next);
  ActivationBlock<kM> act;
  auto load_chunk_activations = [&](int step) {
    const int64_t block = step_block(step);
    load_activations<kM>(p, block, block < blocks, act);
  };
  if (my_chunks == 1) load_chunk_activations(0);

  float fast[kEntries];
  double exact[kEntries];
  uint32_t scale_min = 255, scale_max = 0;
  bool in_range = true;
  auto reset = [&] {
#pragma unroll
    for (int i = 0; i < kEntries; ++i) fast[i] = 0.0f, exact[i] = 0.0;
    in_range = true;
  };
  reset();
  // Sums of one column group: fast ones, or recomputed exactly when a scale pair left fp32's
  // range; reduced over the warp and kept in shared memory.
  auto finish_group = [&](int group) {
    if (__any_sync(0xFFFFFFFFu, !in_range)) {
      uint32_t unused_min = 0, unused_max = 0;
#pragma unroll 1
      for (int step = group * my_chunks; step < (group + 1) * my_chunks; ++step) {
        if (my_chunks > 1) load_chunk_activations(step);
        GroupLoad<kCols> load;
        load_step(step, load);
        sum_group<kM, kCols, true>(load, act, fast, exact, unused_min, unused_max);
      }
      warp_sum_entries<kEntries>(exact, lane);
    } else {
      warp_sum_entries<kEntries>(fast, lane);
      exact[0] = static_cast<double>(fast[0]);
    }
    constexpr int kLanesPerEntry = 32 / kEntries;
    if (lane % kLanesPerEntry == 0)
      partial[warp][group * kEntries + lane / kLanesPerEntry] = exact[0];
    reset();
  };

#pragma unroll 1
  for (int step = 0; step < steps; ++step) {
    if constexpr (kPrefetch) {
      current = next;
      if (step + 1 < steps) load_step(step + 1, next);
    } else if (!(first_early && step == 0)) {
      load_step(step, current);
    }
    if (my_chunks > 1) load_chunk_activations(step);
    sum_group<kM, kCols, false>(current, act, fast, exact, scale_min, scale_max);
    in_range = in_range && fp32_partials_safe(act.scale_min, act.scale_max, scale_min, scale_max);
    scale_min = 255, scale_max = 0;
    if (my_chunks == 1 || step % my_chunks == my_chunks - 1) finish_group(step_group(step));
  }
  // A warp without chunks (more warps than chunks) contributes zeros.
  if (my_chunks == 0)
    for (int i = lane; i < shape.groups * kEntries; i += 32) partial[warp][i] = 0.0;
  __syncthreads();

  // The sums on rank 0: without split_k the CTA's (warps in order), then the cluster's (ranks in
  // order); with it, each partition's chunks in order, then the partitions in order (every
  // partition starts on a chunk, and a warp holds one chunk, first_chunk: rank r's warp w).
  const int tile_entries = shape.groups * kEntries;
  const auto chunk_sums = [&](auto partial_of) {
    for (int i = threadIdx.x; i < tile_entries; i += blockDim.x) {
      double total = 0.0;
      int64_t chunk = 0;
      for (int part = 0; part < shape.partitions; ++part) {
        const int64_t end = part + 1 == shape.partitions
                                ? chunks
                                : (part + 1) * blocks / shape.partitions / kChunkBlocks;
        double sum = 0.0;
        for (; chunk < end; ++chunk)
          sum += partial_of(
              static_cast<int>(chunk / shape.warps))[(chunk % shape.warps) * kTileEntries + i];
        total += sum;
      }
      partial[0][i] = total;  // entry i is this thread's alone
    }
  };
  if (shape.partitions == 1) {
    for (int i = threadIdx.x; i < tile_entries; i += blockDim.x) {
      double sum = partial[0][i];
      for (int w = 1; w < shape.warps; ++w) sum += partial[w][i];
      partial[0][i] = sum;
    }
  }
  if (shape.cluster > 1) {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    if (rank == 0) {
      if (shape.partitions > 1) {
        chunk_sums([&](int r) { return cluster.map_shared_rank(&partial[0][0], r); });
      } else {
        for (int r = 1; r < shape.cluster; ++r) {
          const double* remote = cluster.map_shared_rank(&partial[0][0], r);
          for (int i = threadIdx.x; i < tile_entries; i += blockDim.x) partial[0][i] += remote[i];
        }
      }
    }
    cluster_arrive_relaxed_and_wait();  // shared memory stays alive until rank 0 has read it
    if (rank != 0) return;
  } else if (shape.partitions > 1) {
    chunk_sums([&](int) { return &partial[0][0]; });
  } else {
    __syncthreads();
  }
  for (int i = threadIdx.x; i < tile_entries; i += blockDim.x) {
    const int group = i / kEntries, entry = i % kEntries;
    const int64_t n = tile_column0 + int64_t{group} * kCols + entry / kM;
    const int64_t m = entry % kM;
    if (m < p.m && n < p.n) store_output(p, m, n, partial[0][i]);
  }
#else
  (void)p;
  (void)shape;
  __trap();
#endif
}

// How many clusters of `cluster` CTAs of `warps` warps can be resident at once (asked once each).
template <int kM, int kCols, bool kPrefetch, bool kTiled, int kWarps>
int resident_clusters_cached(int cluster, int warps, int ordinal) {
  static std::atomic<int> known[kMaxClusterCtas + 1][kMaxWarps + 1];  // 0: not asked yet
  int count = known[cluster][warps].load(std::memory_order_relaxed);
  if (count > 0) return count;
  const auto kernel = gemm_gemv_kernel<kM, kCols, kPrefetch, kTiled, kWarps>;
  count = resident_clusters(kernel, cluster, static_cast<unsigned>(warps * 32), 0,
                            device_info(ordinal).sm_count);
  known[cluster][warps].store(count, std::memory_order_relaxed);
  return count;
}

// Warps and cluster CTAs cover the chunks (one each up to 32 chunks). The column tile's width
// (groups of kCols columns, up to kMaxTileColumns) minimises waves x (width + a CTA's fixed cost)
// over the clusters that can be resident at once (bench/RESULTS.md has the measurements); on a
// tie the wider tile.
template <int kM, int kCols, bool kPrefetch, bool kTiled, int kWarps>
GemvShape choose_shape(const GemmProblem& p) {
  const int64_t chunks = k_chunks(p.k);
  GemvShape shape{};
  shape.warps = static_cast<int>(chunks < kWarps ? chunks : kWarps);
  const int64_t ctas_needed = (chunks + shape.warps - 1) / shape.warps;
  shape.cluster = static_cast<int>(ctas_needed < kMaxClusterCtas ? ctas_needed : kMaxClusterCtas);
  const int64_t resident = resident_clusters_cached<kM, kCols, kPrefetch, kTiled, kWarps>(
      shape.cluster, shape.warps, p.device.ordinal);
  constexpr int kMaxGroups = kMaxTileColumns / kCols;
  int64_t best_cost = -1, best_waves = 0;
  for (int groups = 1; groups <= kMaxGroups; ++groups) {
    const int64_t tiles = (p.n + int64_t{groups} * kCols - 1) / (int64_t{groups} * kCols);
    const int64_t waves = (tiles + resident - 1) / resident;
    // Each CTA also pays a start-up and a reduction, worth about 1.5 groups of streaming (H200:
    // without it, 4 x 28672 x 8192 took 19 waves of 8-column tiles, 97 us instead of 62).
    const int64_t cost = waves * (2 * groups + 3);
    if (best_cost < 0 || cost < best_cost || (cost == best_cost && waves < best_waves)) {
      best_cost = cost, best_waves = waves;
      shape.groups = groups;
    }
    if (tiles == 1) break;  // wider tiles only add empty columns
  }
  shape.waves = static_cast<int>(best_waves < 2 ? best_waves : 2);  // 2: two or more
  return shape;
}

template <int kM, int kCols, bool kPrefetch, bool kTiled, int kWarps = 4>
void launch(const GemmProblem& p) {
  GemvShape shape = choose_shape<kM, kCols, kPrefetch, kTiled, kWarps>(p);
  shape.partitions = p.split_k > 1 ? p.split_k : 1;
  const int64_t tile_columns = int64_t{shape.groups} * kCols;
  // Launched early (its start overlapping the end of the kernel before it) where the grid is one
  // wave of clusters of at most 2 CTAs (K <= 8192). H200, back-to-back calls in a graph: 1 x 8192
  // x 8192 12.6 -> 11.8 us, 4 x 8192 x 8192 22.4 -> 21.6, 1 x 2880 x 2880 4.6 -> 4.3; but 1 x 8192
  // x 28672 (clusters of 7) 35.7 -> 40.6, so not there. Prefetching the first weights into L2
  // before the wait measured slower (1 x 8192 x 8192 12.4); with a constant B the first step's
  // loads into registers before the wait are faster (the kernel's comment).
  const LaunchOrder order =
      shape.waves == 1 && shape.cluster <= 2 ? LaunchOrder::kEarly : LaunchOrder::kAfterPrevious;
  auto kernel = gemm_gemv_kernel<kM, kCols, kPrefetch, kTiled, kWarps>;
  if constexpr (kM == 1) {
    // Only an early launch starts before the kernel ahead has finished.
    if (p.b_constant && order == LaunchOrder::kEarly)
      kernel = gemm_gemv_kernel<kM, kCols, kPrefetch, kTiled, kWarps, true>;
  }
  launch_with_y_cluster(kernel,
                        dim3(static_cast<unsigned>((p.n + tile_columns - 1) / tile_columns),
                             static_cast<unsigned>(shape.cluster)),
                        static_cast<unsigned>(shape.warps * 32), 0, p.stream,
                        "gemm_gemv_kernel launch", order, p, shape);
}

// At M = 1, where registers are to spare, the next step's weights are loaded ahead when a warp
// has three steps or more (H200: 1 x 28672 x 8192 in 37.1 us instead of 40.1; with fewer, its 128
// registers mostly cost occupancy: 1 x 5120 x 2880 took 6.0 us instead of 5.0, 1 x 5760 x 2880
// with 2 steps 6.2 instead of 5.4). Loading ahead was slower at M = 2 and at 4 x 28672 x 8192,
// and 16 columns per step instead of 8 slower at M = 1 and 2 (bench/RESULTS.md).
template <bool kTiled>
void launch_for_m(const GemmProblem& p) {
  if (p.m == 1) {
    // 5 to 8 chunks: one CTA of 8 warps instead of a cluster of two. With 4 or fewer the CTAs
    // are the same, and the 4-warp kernels' register budgets keep more of them resident (1 x
    // 5760 x 2880 ran 5.4 us on them, 6.5 on the 8-warp ones).
    const int64_t chunks = k_chunks(p.k);
    const bool one_cta = chunks > 4 && chunks <= kMaxWarps;
    if (choose_shape<1, 8, false, kTiled, 4>(p).groups >= 3)
      return one_cta ? launch<1, 8, true, kTiled, 8>(p) : launch<1, 8, true, kTiled>(p);
    if (one_cta) return launch<1, 8, false, kTiled, 8>(p);
    return launch<1, 8, false, kTiled>(p);
  }
  if (p.m == 2) return launch<2, 8, false, kTiled>(p);
  launch<4, 8, false, kTiled>(p);
}

}  // namespace

std::string gemm_gemv_why_not(const GemmProblem& p) {
  if (p.device.type != A4W4_DEVICE_CUDA) return "operands are not on a CUDA device";
  if (device_info(p.device.ordinal).major < 9) return "needs an sm_90 GPU (thread-block clusters)";
  if (p.m > kGemvMaxM)
    return "M = " + std::to_string(p.m) + " is above the GEMV limit of " +
           std::to_string(kGemvMaxM);
  if (p.split_k > 1) {
    // Each split-K partition is summed on its own: a warp's chunk (kChunkBlocks blocks, one warp
    // each up to kMaxSplitChunks chunks) may not straddle two.
    if (k_chunks(p.k) > kMaxSplitChunks)
      return "split_k needs K <= " + std::to_string(kMaxSplitChunks * kChunkBlocks * 32) +
             " (one K chunk per warp)";
    const int64_t blocks = p.k / 32;
    for (int64_t part = 1; part < p.split_k; ++part)
      if (part * blocks / p.split_k % kChunkBlocks != 0)
        return "split_k = " + std::to_string(p.split_k) + " starts partition " +
               std::to_string(part) + " inside a " + std::to_string(kChunkBlocks * 32) +
               "-wide K chunk (its partitions must start on multiples of " +
               std::to_string(kChunkBlocks) + " blocks)";
  }
  if (p.b.layout == A4W4_LAYOUT_PLAIN &&
      (reinterpret_cast<uintptr_t>(p.b.data) % 16 != 0 || p.b.stride_bytes % 16 != 0))
    return "a plain B must start on 16 bytes with a row stride that is a multiple of 32 elements";
  return prepared_b_why_not(p.b, 16, 1);
}

void gemm_gemv(const GemmProblem& p, const ExecConfig&) {
  DeviceGuard guard(p.device.ordinal);
  if (p.b.layout == A4W4_LAYOUT_PLAIN) return launch_for_m<false>(p);
  launch_for_m<true>(p);
}

}  // namespace a4w4::cuda
