// The decode GEMM family (small M, memory-bound): streams the FP4 weight B once through a per-warp
// ring of shared-memory slots (cp.async, several K tiles in flight) and multiplies each K tile of
// 128 with int8 tensor-core MMAs whose int32 sums are exact. sm_90 (thread-block clusters).
//
// Roles are swapped relative to D = A.B^T: the weight tile is the MMA's A operand (16 weight rows)
// and the activations are its B operand (8 rows per MMA, up to 64), so M = 1 wastes no weight
// bandwidth. Each warp owns one or two groups of 16 weight rows (two for M <= 16: the per-tile
// overheads and activation reads are shared); a CTA has 4 warps and one K partition.
//
// Weights cost about one instruction per element to turn into MMA operands: a byte permute (PRMT)
// looks four E2M1 codes up at once in a table of doubled magnitudes {0,1,2,3,4,6,8,12}, and its
// sign mode returns 0 for the negative codes. So one PRMT gives the positive part w+ of four
// weights and a second, on the codes with their sign bits flipped, the negative part w- (as
// unsigned magnitudes), and w = w+ - w- is multiplied as two MMAs: w+ . a + w- . (-a). The
// activations (and their negations) are converted once per CTA into shared memory.
//
// Block scales are folded into the int8 operands so that one chain of MMAs sums a whole K tile:
// inside a tile, each row's blocks are shifted by d = scale - (the row's smallest scale in the
// tile) when every d <= 3 (|2 * E2M1| * 2^3 = 96 fits int8 and stays below the PRMT sign bit). The
// tile sum (|sum| <= 128 * 96 * 96 < 2^24, exact in int32 and in fp32) is then scaled once by
// 2^(base_a + base_b - 256) and added to an fp32 accumulator. Tiles whose scales spread wider,
// contain NaN, or would leave fp32's normal range take an exact per-block path in double (rare,
// decided per warp, tile and 8 activation rows).
//
// Split-K: the CTAs of one cluster take contiguous K partitions (split_k's block partitions); rank
// 0 adds their sums in order through distributed shared memory and writes D (alpha, beta*C, bias,
// one rounding).
//
// Fragment order: lane (g, t) holds elements [8t, 8t + 8) of a block of weight rows g and g + 8
// (one 4-byte word each, low nibble first): elements 8t..8t+3 go to k slots 4t..4t+3 of the
// m16n8k32 MMA and 8t+4..8t+7 to 16+4t..16+4t+3. The activations use the same order, so each
// block's dot product is unchanged. A B (plain, or prepared version 2: the same rows from its
// tiles) lands in a slot in plain order, one 16-byte block per copy, and each lane reads its
// fragments back as 4-byte words (the blocks of a row pair rotated so that the reads meet no bank
// conflicts).
#include <cooperative_groups.h>

#include "backends/cuda/cluster_launch.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_utils.h"
#include "backends/cuda/device_common.cuh"
#include "backends/cuda/int8_fold.cuh"
#include "backends/cuda/sm90_family.cuh"
#include "numerics/weight_layout.h"

namespace a4w4::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
// Row groups of 16 weight rows per warp: two where the activations are few (the K-tile overheads
// and the activation reads are shared by both groups), one where registers are needed for them.
// (Four groups for M <= 8 cut the instructions by 21% but needed 205 registers — two CTAs per SM
// instead of four — and ran 1 x 8192 x 8192 in 47 us instead of 33: bench/RESULTS.md.)
template <int kNTiles>
constexpr int kGroups = kNTiles <= 2 ? 2 : 1;
template <int kNTiles>
constexpr int kRowsPerCta = kWarps * 16 * kGroups<kNTiles>;
constexpr int kMaxSplits = 8;  // portable cluster size

// Weights stream through a per-warp ring of shared-memory slots filled by cp.async, kStages - 1
// K tiles ahead of the one being multiplied: the loads need no registers and never wait on use.
// A slot holds one K tile of each row group in plain order (block_offset, below).
constexpr int kStages = 4;  // a power of two: slot = tile & (kStages - 1)
// A slot: each group's 1024 bytes of codes, then each group's 16 rows x 4 blocks of scales.
template <int kGroupCount>
constexpr int kSlotBytes = (1024 + 64) * kGroupCount;

// The folding helpers (kMaxShift, fold_row, TileSumScale, tile_sum_scale_safe) are shared with
// the skinny and int8 wgmma families: int8_fold.cuh; the magnitude tables with every int8
// conversion: device_common.cuh.
using fold::fold_row, fold::FoldedRow, fold::kMaxShift, fold::tile_sum_scale_safe,
    fold::TileSumScale, fold::weight_block, fold::WeightBlock;

// Activation staging, per number of 8-row activation tiles: a chunk of K tiles is converted once
// per CTA (fewer tiles per chunk for large M keeps two CTAs per SM). Each warp converts whole
// (K tile, activation tile) pairs: 8 rows x 4 blocks, one block per lane.
template <int kNTiles>
struct ChunkShape {
  static constexpr int kRows = 8 * kNTiles;
  static constexpr int kTiles = kNTiles >= 4 ? 2 : 4;
  static constexpr int kBlocks = kTiles * 4;
  // Per block 64 bytes: for each lane t, 8 int8 values 2 * E2M1 * 2^d then their negations. The
  // row stride is 64 mod 128, so a warp's 16-byte reads of 8 rows hit distinct banks.
  static constexpr int kRowBytes = kBlocks * 64 + 64;
  static constexpr int kPairs = kTiles * kNTiles;
  static_assert(kPairs % kWarps == 0, "every warp converts the same number of pairs");
};
template <int kNTiles>
constexpr int kPairsPerWarp = ChunkShape<kNTiles>::kPairs / kWarps;

// D (4 x int32) += A (16x32 uint8, row) * B (32x8 int8, col), exact.
__device__ __forceinline__ void mma_u8s8(int32_t (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

// The activation blocks this thread converts in one chunk, held in registers between their loads
// and their conversion into shared memory, so the loads of chunk i + 1 are in flight while chunk i
// is used. Warp w takes pairs w, w + 4, ...; lane (r, j) takes row r and block j of the pair.
template <int kNTiles>
struct ActivationBlocks {
  uint4 codes[kPairsPerWarp<kNTiles>];
  uint32_t scale[kPairsPerWarp<kNTiles>];  // 0x100: absent (row >= M, outside the partition)
};

template <int kNTiles>
__device__ __forceinline__ void load_activations(const GemmProblem& p, int64_t chunk_block0,
                                                 int64_t block_begin, int64_t block_end,
                                                 bool vector_loads,
                                                 ActivationBlocks<kNTiles>& out) {
  using Shape = ChunkShape<kNTiles>;
  const int warp = threadIdx.x / 32, r = (threadIdx.x % 32) / 4, j = threadIdx.x % 4;
#pragma unroll
  for (int i = 0; i < kPairsPerWarp<kNTiles>; ++i) {
    const int pair = warp + kWarps * i, tile = pair % Shape::kTiles, nt = pair / Shape::kTiles;
    const int row = nt * 8 + r;
    const int64_t block = chunk_block0 + tile * 4 + j;
    uint4 v = {0, 0, 0, 0};
    uint32_t scale = 0x100u;
    if (row < p.m && block >= block_begin && block < block_end) {
      v = load_packed_block(p.a.data + row * p.a.stride_bytes + block * 16, vector_loads);
      scale = __ldg(p.a.scale + row * p.a.scale_stride + block);
    }
    out.codes[i] = v;
    out.scale[i] = scale;
  }
}

// Where one chunk's converted activations live in shared memory.
template <int kNTiles>
struct Stage {
  using Shape = ChunkShape<kNTiles>;
  uint8_t* values;    // [row][Shape::kRowBytes]
  uint8_t* exponent;  // [row][block]: the exponent e of the stored values (value * 2^(e - 128))
  float* factor;      // [tile][row]: 2^(e - 127) of a folded (row, tile)
  uint32_t* summary;  // [tile][n tile]: min e | max e << 8 | all rows folded << 16
  static constexpr int kBytes =
      (Shape::kRows * (Shape::kRowBytes + Shape::kBlocks + 4 * Shape::kTiles) +
       4 * Shape::kTiles * kNTiles + 15) /
      16 * 16;
  __device__ explicit Stage(uint8_t* base)
      : values(base),
        exponent(base + Shape::kRows * Shape::kRowBytes),
        factor(reinterpret_cast<float*>(base + Shape::kRows * (Shape::kRowBytes + Shape::kBlocks))),
        summary(reinterpret_cast<uint32_t*>(
            base + Shape::kRows * (Shape::kRowBytes + Shape::kBlocks + 4 * Shape::kTiles))) {}
};

// Four E2M1 codes (low 16 bits) -> four int8 2 * value * 2^shift and their negations.
__device__ __forceinline__ void signed_values(uint32_t codes, uint32_t pos_lo, uint32_t pos_hi,
                                              uint32_t neg_lo, uint32_t neg_hi, uint32_t& value,
                                              uint32_t& negated) {
  const uint32_t index = codes & 0x7777u;
  const uint32_t positive = permute(pos_lo, pos_hi, index);
  const uint32_t negative = permute(neg_lo, neg_hi, index);
  const uint32_t select = 0x3210u | ((codes >> 1) & 0x4444u);  // bytes 4..7 where the sign is set
  value = permute(positive, negative, select);
  negated = permute(negative, positive, select);
}

// Converts this thread's blocks into the stage: each (row, K tile) is folded when its present
// blocks' scales lie within kMaxShift of the smallest and none is NaN; lane 0 of each pair writes
// the pair's summary (exponent range of existing rows, whether all were folded).
template <int kNTiles>
__device__ __forceinline__ void store_activations(const GemmProblem& p,
                                                  const ActivationBlocks<kNTiles>& in,
                                                  const Stage<kNTiles>& stage) {
  using Shape = ChunkShape<kNTiles>;
  const int warp = threadIdx.x / 32, r = (threadIdx.x % 32) / 4, j = threadIdx.x % 4;
#pragma unroll
  for (int i = 0; i < kPairsPerWarp<kNTiles>; ++i) {
    const int pair = warp + kWarps * i, tile = pair % Shape::kTiles, nt = pair / Shape::kTiles;
    const int row = nt * 8 + r, block = tile * 4 + j;
    const uint32_t scale = in.scale[i];
    const bool present = scale <= 0xFFu;
    // The row's range over the tile's four blocks (lanes j = 0..3).
    uint32_t lo = present ? scale : 0xFFu, hi = present ? scale : 0u;
#pragma unroll
    for (int step = 1; step < 4; step *= 2) {
      lo = min(lo, __shfl_xor_sync(0xFFFFFFFFu, lo, step));
      hi = max(hi, __shfl_xor_sync(0xFFFFFFFFu, hi, step));
    }
    const bool any = lo <= hi;
    const bool folded = !any || (hi - lo <= kMaxShift && hi < 0xFFu);
    const uint32_t base = any ? lo : 127u;
    const uint32_t shift = folded && present ? scale - base : 0u;
    const uint32_t exponent = folded ? base : (present ? scale : 127u);

    const uint32_t pos_lo = kMagnitudesLo << shift, pos_hi = kMagnitudesHi << shift;
    // Byte-wise negation without the emulated __vsub4: ~b + 1 carries only out of a zero byte,
    // and the only zero byte is entry 0 of the low table (+0), which stays 0.
    const uint32_t neg_lo = (~pos_lo + 0x01010100u) & 0xFFFFFF00u, neg_hi = ~pos_hi + 0x01010101u;
    uint4* dst = reinterpret_cast<uint4*>(stage.values + row * Shape::kRowBytes + block * 64);
    const uint32_t words[4] = {in.codes[i].x, in.codes[i].y, in.codes[i].z, in.codes[i].w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint4 out;
      signed_values(words[q], pos_lo, pos_hi, neg_lo, neg_hi, out.x, out.z);
      signed_values(words[q] >> 16, pos_lo, pos_hi, neg_lo, neg_hi, out.y, out.w);
      dst[q] = out;
    }
    stage.exponent[row * Shape::kBlocks + block] = static_cast<uint8_t>(exponent);
    if (j == 0) stage.factor[tile * Shape::kRows + row] = __uint_as_float(folded ? base << 23 : 0u);

    const bool exists = row < p.m && any;
    const uint32_t e_lo = __reduce_min_sync(0xFFFFFFFFu, exists ? base : 0xFFu);
    const uint32_t e_hi = __reduce_max_sync(0xFFFFFFFFu, exists ? base : 0u);
    const bool all_folded = __all_sync(0xFFFFFFFFu, folded);
    if (threadIdx.x % 32 == 0)
      stage.summary[tile * kNTiles + nt] = e_lo | e_hi << 8 | (all_folded ? 1u : 0u) << 16;
  }
}

// Where block b (16 bytes) of row r (0..15) of row group `group` lies in a slot: the group's 16
// rows of 64 bytes in plain order, the blocks of row pair r / 2 rotated by (r / 2) % 4 so that a
// lane's 4-byte reads of its fragments (`fragment`) meet no bank conflicts.
__device__ __forceinline__ int block_offset(int group, int r, int b) {
  return group * 1024 + r * 64 + 16 * (b ^ ((r >> 1) & 3));
}

// Lane (g, t)'s fragment of row r (g or g + 8) of a slot's row group: word j is elements
// [8t, 8t + 8) of block j (the order the MMAs and the activations use).
__device__ __forceinline__ uint4 fragment(const uint8_t* slot, int group, int r, int t) {
  uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    w[j] = *reinterpret_cast<const uint32_t*>(slot + block_offset(group, r, j) + 4 * t);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Where this lane's share of each weight K tile comes from, fixed for the whole partition. Row
// group h of the warp is rows row0 + 16h ..; its codes go to slot bytes [1024h, 1024h + 1024), its
// scales after all groups' codes. kTiled: a prepared (version 2) B, whose rows' 64 bytes of a tile
// are copied like a plain B's and whose tile scales are already in the slot's order.
template <bool kTiled, int kGroupCount>
struct WeightSource {
  const uint8_t* codes[kGroupCount][2];  // rows g, g + 8 at block t of the partition's first tile
  // Scale copies per lane: tiled, 16 bytes of one group's 64 (lanes 0 .. 4 * groups - 1); plain,
  // the 4 bytes of one row (kGroupCount * 16 rows over the warp's 32 lanes).
  static constexpr int kScaleCopies = kTiled || kGroupCount <= 2 ? 1 : kGroupCount / 2;
  const uint8_t* scales[kScaleCopies] = {};  // the scale bytes this lane copies (if any)
  bool present[kGroupCount][2];              // rows g and g + 8 of each group exist
  bool scale_present[kScaleCopies] = {};
  int scale_offset[kScaleCopies];  // where in the slot each scale copy goes (-1: none)

  __device__ WeightSource(const GemmProblem& p, int64_t row0, int64_t tile_begin, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int group = 0; group < kGroupCount; ++group) {
      const int64_t group_row0 = row0 + 16 * group;
      if constexpr (kTiled) {
        // A group past N reads nothing (its slot is zero-filled from a valid address); the rows
        // past N inside the last group are the layout's zero padding.
        const bool exists = group_row0 < p.n;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          codes[group][h] = p.b.data + 16 * t +
                            (exists ? layout::row_run_offset(group_row0 + g + 8 * h, tile_begin,
                                                             layout::k_tiles(p.k))
                                    : 0);
          present[group][h] = exists;
        }
      } else {
        // Lane (g, t) copies block t of rows g and g + 8 (K % 128 == 0: every block exists).
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t row = group_row0 + g + 8 * h;
          present[group][h] = row < p.n;
          codes[group][h] = p.b.data + (present[group][h] ? row : 0) * p.b.stride_bytes +
                            (tile_begin * 4 + t) * 16;
        }
      }
    }
#pragma unroll
    for (int c = 0; c < kScaleCopies; ++c) scale_offset[c] = -1;
    if constexpr (kTiled) {
      if (lane < 4 * kGroupCount) {  // 16 bytes of group lane / 4's 64 scale bytes
        const int group = lane / 4;
        scale_present[0] = row0 + 16 * group < p.n;
        const int64_t first =
            scale_present[0] ? (row0 / 16 + group) * layout::k_tiles(p.k) + tile_begin : 0;
        scales[0] = p.b.scale + first * 64 + 16 * (lane % 4);
        scale_offset[0] = kGroupCount * 1024 + 64 * group + 16 * (lane % 4);
      }
    } else {
#pragma unroll
      for (int c = 0; c < kScaleCopies; ++c) {
        const int row = lane + 32 * c;  // the four block scales of row row0 + row
        if (row >= 16 * kGroupCount) continue;
        const int group = row / 16, r = row % 16;
        scale_present[c] = row0 + row < p.n;
        scales[c] =
            p.b.scale + (scale_present[c] ? row0 + row : 0) * p.b.scale_stride + tile_begin * 4;
        scale_offset[c] = kGroupCount * 1024 + 64 * group + (r % 8) * 8 + (r / 8) * 4;
      }
    }
  }

  // Issues the copies of the partition's K tile `tile` into `slot`.
  __device__ __forceinline__ void copy(int tile, int lane, uint8_t* slot) const {
#pragma unroll
    for (int group = 0; group < kGroupCount; ++group) {
      // Lane (g, t) copies block t of rows g and g + 8 whole.
      const int g = lane / 4, t = lane % 4;
      const size_t offset = !kTiled             ? size_t(tile) * 64
                            : present[group][0] ? size_t(tile) * layout::kTileBytes
                                                : 0;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        copy_async<16>(slot + block_offset(group, g + 8 * h, t), codes[group][h] + offset,
                       present[group][h]);
    }
#pragma unroll
    for (int c = 0; c < kScaleCopies; ++c) {
      if (scale_offset[c] < 0) continue;
      if constexpr (kTiled) {
        copy_async<16>(slot + scale_offset[c],
                       scales[c] + (scale_present[c] ? size_t(tile) * 64 : 0), scale_present[c]);
      } else {
        copy_async<4>(slot + scale_offset[c], scales[c] + (scale_present[c] ? size_t(tile) * 4 : 0),
                      scale_present[c]);
      }
    }
  }
};

// Selector that replaces the bytes of blocks outside [first, last) by block `first`'s, so they
// do not count in a row's scale range.
__device__ __forceinline__ uint32_t valid_block_selector(int first, int last) {
  uint32_t selector = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j)
    selector |= static_cast<uint32_t>(j >= first && j < last ? j : first) << (4 * j);
  return selector;
}

// The exact path for one 8-row activation tile: block by block with unshifted weights, the exact
// partial isum * 2^(ea + sb - 256) added in double (NaN when a scale is 0xFF). Cold, so kept out of
// line; `sums` is in local memory. act_row: this lane's 16 bytes of the tile's first block;
// exponents: the tile's first block for activation row 2t (row 2t + 1 follows kBlocks later).
template <int kBlocks>
__device__ __noinline__ void exact_blocks(double* sums, uint4 row_g, uint4 row_h, uint2 scales,
                                          const uint8_t* act_row, const uint8_t* exponents,
                                          int first_j, int last_j) {
  const uint32_t words[2][4] = {{row_g.x, row_g.y, row_g.z, row_g.w},
                                {row_h.x, row_h.y, row_h.z, row_h.w}};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (j < first_j || j >= last_j) continue;
    const WeightBlock w = weight_block(words[0][j], words[1][j], 0, 0);
    const uint4 v = *reinterpret_cast<const uint4*>(act_row + j * 64);
    int32_t sum[4] = {0, 0, 0, 0};
    mma_u8s8(sum, w.positive, v.x, v.y);
    mma_u8s8(sum, w.negative, v.z, v.w);
    const uint32_t ea0 = exponents[j], ea1 = exponents[kBlocks + j];
    const uint32_t sb0 = permute(scales.x, 0, 0x4440u | j), sb1 = permute(scales.y, 0, 0x4440u | j);
    sums[0] = fma(static_cast<double>(sum[0]), block_scale(ea0, sb0), sums[0]);
    sums[1] = fma(static_cast<double>(sum[1]), block_scale(ea1, sb0), sums[1]);
    sums[2] = fma(static_cast<double>(sum[2]), block_scale(ea0, sb1), sums[2]);
    sums[3] = fma(static_cast<double>(sum[3]), block_scale(ea1, sb1), sums[3]);
  }
}

// Multiplies one K tile of this warp's 16 weight rows (codes w0, w1 and scales as read from the
// slot) with every activation tile, blocks [first_j, last_j) of it (kWhole: all four, the lean
// path of every tile but a partition's ends).
template <int kNTiles, bool kWhole>
__device__ __forceinline__ void multiply_tile(const Stage<kNTiles>& act, int tile_in_chunk,
                                              uint4 w0, uint4 w1, uint2 scales, int first_j,
                                              int last_j, const bool (&row_exists)[2],
                                              int n_tiles_used, float (&fast)[kNTiles][4],
                                              double* exact) {
  using Shape = ChunkShape<kNTiles>;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  if constexpr (kWhole) first_j = 0, last_j = 4;
  const uint32_t words[2][4] = {{w0.x, w0.y, w0.z, w0.w}, {w1.x, w1.y, w1.z, w1.w}};
  const uint32_t selector = kWhole ? 0x3210u : valid_block_selector(first_j, last_j);

  // Weight folding: each row's block shifts relative to its smallest scale in the tile, and
  // this lane's part of the fp32 range check (rows that do not exist count as folded).
  const FoldedRow rows[2] = {fold_row(kWhole ? scales.x : permute(scales.x, 0, selector)),
                             fold_row(kWhole ? scales.y : permute(scales.y, 0, selector))};
  const bool lane_folded = (rows[0].ok || !row_exists[0]) && (rows[1].ok || !row_exists[1]);
  const uint32_t b_lo =
      min(row_exists[0] ? rows[0].base : 0xFFu, row_exists[1] ? rows[1].base : 0xFFu);
  const uint32_t b_hi = max(row_exists[0] ? rows[0].base : 0u, row_exists[1] ? rows[1].base : 0u);
  // Tile sums times 2^(base - 129) per weight row (the extra 1/4 undoes the doubling of both
  // operands), in one integer add and one float add.
  const TileSumScale scale[2] = {TileSumScale(rows[0].base), TileSumScale(rows[1].base)};
  WeightBlock folded[4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    folded[j] = weight_block(words[0][j], words[1][j], permute(rows[0].shifts, 0, 0x4440u | j),
                             permute(rows[1].shifts, 0, 0x4440u | j));

#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    if (nt >= n_tiles_used) break;  // uniform
    const uint32_t summary = act.summary[tile_in_chunk * kNTiles + nt];
    const uint32_t a_lo = summary & 0xFFu, a_hi = (summary >> 8) & 0xFFu;
    const bool fast_path =
        __all_sync(0xFFFFFFFFu, lane_folded && tile_sum_scale_safe(a_lo, a_hi, b_lo, b_hi)) &&
        ((summary >> 16) & 1u);
    // The activation row of column n of the MMA is nt * 8 + n; lane (g, t) supplies column g.
    const uint8_t* act_row =
        act.values + (nt * 8 + g) * Shape::kRowBytes + tile_in_chunk * 4 * 64 + 16 * t;
    if (fast_path) {
      // Two independent MMA chains (even and odd blocks) halve the dependent latency.
      int32_t sum[2][4] = {};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (!kWhole && (j < first_j || j >= last_j)) continue;  // uniform
        const uint4 v = *reinterpret_cast<const uint4*>(act_row + j * 64);
        mma_u8s8(sum[j & 1], folded[j].positive, v.x, v.y);
        mma_u8s8(sum[j & 1], folded[j].negative, v.z, v.w);
      }
      // Accumulator i: weight row g (+8 for i >= 2), activation row nt * 8 + 2t + (i & 1).
      const float2 fa = *reinterpret_cast<const float2*>(act.factor + tile_in_chunk * Shape::kRows +
                                                         nt * 8 + 2 * t);
      fast[nt][0] = fmaf(scale[0](sum[0][0] + sum[1][0]), fa.x, fast[nt][0]);
      fast[nt][1] = fmaf(scale[0](sum[0][1] + sum[1][1]), fa.y, fast[nt][1]);
      fast[nt][2] = fmaf(scale[1](sum[0][2] + sum[1][2]), fa.x, fast[nt][2]);
      fast[nt][3] = fmaf(scale[1](sum[0][3] + sum[1][3]), fa.y, fast[nt][3]);
    } else {
      exact_blocks<Shape::kBlocks>(
          exact + nt * 4, w0, w1, scales, act_row,
          act.exponent + (nt * 8 + 2 * t) * Shape::kBlocks + tile_in_chunk * 4, first_j, last_j);
    }
  }
}

// A whole K tile of every row group of the warp on the folded path, decided once for the warp:
// every existing weight row folds, every activation tile in use folded, and fp32 accumulation is
// safe for the widest combination of bases. Returns false (nothing done) otherwise; the caller then
// takes the per-group path, which decides per activation tile and runs the exact blocks.
template <int kNTiles, int kGroupCount>
__device__ __forceinline__ bool multiply_tile_folded(const Stage<kNTiles>& act, int tile_in_chunk,
                                                     const uint4 (&w0)[kGroupCount],
                                                     const uint4 (&w1)[kGroupCount],
                                                     const uint2 (&scales)[kGroupCount],
                                                     const bool (&row_exists)[kGroupCount][2],
                                                     int n_tiles_used,
                                                     float (&fast)[kGroupCount][kNTiles][4]) {
  using Shape = ChunkShape<kNTiles>;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  FoldedRow rows[kGroupCount][2];
  bool lane_folded = true;
  uint32_t b_lo = 0xFFu, b_hi = 0u;
#pragma unroll
  for (int group = 0; group < kGroupCount; ++group) {
    rows[group][0] = fold_row(scales[group].x), rows[group][1] = fold_row(scales[group].y);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!row_exists[group][h]) continue;
      lane_folded = lane_folded && rows[group][h].ok;
      b_lo = min(b_lo, rows[group][h].base), b_hi = max(b_hi, rows[group][h].base);
    }
  }
  bool acts_folded = true;
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    if (nt >= n_tiles_used) break;  // uniform
    const uint32_t summary = act.summary[tile_in_chunk * kNTiles + nt];
    acts_folded = acts_folded && ((summary >> 16) & 1u) &&
                  tile_sum_scale_safe(summary & 0xFFu, (summary >> 8) & 0xFFu, b_lo, b_hi);
  }
  // A warp without existing rows (b_lo > b_hi) has nothing to check.
  if (!__all_sync(0xFFFFFFFFu, b_lo > b_hi || (lane_folded && acts_folded))) return false;

  // Block by block: each block's weight operands (both groups) meet every activation tile, so
  // only one block's operands are live at a time.
  int32_t sum[kGroupCount][kNTiles][2][4] = {};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    WeightBlock block[kGroupCount];
#pragma unroll
    for (int group = 0; group < kGroupCount; ++group) {
      block[group] = weight_block(word_of(w0[group], j), word_of(w1[group], j),
                                  permute(rows[group][0].shifts, 0, 0x4440u | j),
                                  permute(rows[group][1].shifts, 0, 0x4440u | j));
    }
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      if (nt >= n_tiles_used) break;  // uniform
      // Lane (g, t) supplies MMA column g: activation row nt * 8 + g.
      const uint4 v = *reinterpret_cast<const uint4*>(act.values + (nt * 8 + g) * Shape::kRowBytes +
                                                      (tile_in_chunk * 4 + j) * 64 + 16 * t);
      // Two independent MMA chains (even and odd blocks) halve the dependent latency.
#pragma unroll
      for (int group = 0; group < kGroupCount; ++group) {
        mma_u8s8(sum[group][nt][j & 1], block[group].positive, v.x, v.y);
        mma_u8s8(sum[group][nt][j & 1], block[group].negative, v.z, v.w);
      }
    }
  }
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    if (nt >= n_tiles_used) break;  // uniform
    const float2 fa = *reinterpret_cast<const float2*>(act.factor + tile_in_chunk * Shape::kRows +
                                                       nt * 8 + 2 * t);
#pragma unroll
    for (int group = 0; group < kGroupCount; ++group) {
      // Tile sums times 2^(base - 129) per weight row (the extra 1/4 undoes the doubling of both
      // operands).
      const TileSumScale scale[2] = {TileSumScale(rows[group][0].base),
                                     TileSumScale(rows[group][1].base)};
      // Accumulator i: weight row g (+8 for i >= 2), activation row nt * 8 + 2t + (i & 1).
#pragma unroll
      for (int i = 0; i < 4; ++i)
        fast[group][nt][i] = fmaf(scale[i >> 1](sum[group][nt][0][i] + sum[group][nt][1][i]),
                                  i & 1 ? fa.y : fa.x, fast[group][nt][i]);
    }
  }
  return true;
}

// CTAs per SM as a register bound: four (128 registers) for one activation tile, three (168) for
// more — where the kernels come out unbounded, except the prepared-B kernel for two tiles, which
// took 176 registers (two CTAs per SM) without the bound. (Forcing five CTAs per SM for M <= 8
// spills and measured slower.)
template <int kNTiles>
constexpr int kDecodeCtasPerSm = kNTiles == 1 ? 4 : 3;
template <int kNTiles, bool kTiled>
__global__ void __launch_bounds__(kThreads, kDecodeCtasPerSm<kNTiles>)
    gemm_decode_kernel(GemmProblem p, int splits) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  using Shape = ChunkShape<kNTiles>;
  extern __shared__ __align__(16) uint8_t smem[];
  // Two stages of converted activations (chunk i in one while chunk i + 1 is written to the
  // other), then each warp's ring of weight slots.
  // (Built per use from smem, never kept in an indexed array: that would live in local memory
  // and turn every shared-memory access into a generic one.)
  auto stage = [&](int chunk) {
    return Stage<kNTiles>(smem + (chunk & 1) * Stage<kNTiles>::kBytes);
  };
  constexpr int kGroupCount = kGroups<kNTiles>;
  constexpr int kSlot = kSlotBytes<kGroupCount>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint8_t* ring = smem + 2 * Stage<kNTiles>::kBytes + warp * kStages * kSlot;

  // This warp's weight rows: kGroupCount groups of 16 from row0.
  const int64_t row0 = int64_t{blockIdx.x} * kRowsPerCta<kNTiles> + warp * 16 * kGroupCount;
  const bool warp_has_rows = row0 < p.n;
  bool row_exists[kGroupCount][2];
#pragma unroll
  for (int group = 0; group < kGroupCount; ++group)
    row_exists[group][0] = row0 + 16 * group + g < p.n,
    row_exists[group][1] = row0 + 16 * group + g + 8 < p.n;
  const int64_t rows_here = (p.n - row0 + 15) / 16;  // groups with rows (uniform)
  const int groups_here = rows_here < kGroupCount ? static_cast<int>(rows_here) : kGroupCount;
  const int64_t blocks = p.k / 32;
  const int split = blockIdx.y;
  const int64_t block_begin = split * blocks / splits, block_end = (split + 1) * blocks / splits;
  const int64_t tile_begin = block_begin / 4, tile_end = (block_end + 3) / 4;
  const bool vector_a =
      reinterpret_cast<uintptr_t>(p.a.data) % 16 == 0 && p.a.stride_bytes % 16 == 0;
  // Counted from the partition's first tile in 32 bits: blocks [begin, end) of tile 0.. are the
  // partition's.
  const int tiles = static_cast<int>(tile_end - tile_begin);
  const int begin = static_cast<int>(block_begin - tile_begin * 4);
  const int end = static_cast<int>(block_end - tile_begin * 4);
  const int n_tiles_used = static_cast<int>((p.m + 7) / 8);  // activation tiles with rows
  const WeightSource<kTiled, kGroupCount> source(p, row0, tile_begin, lane);

  // Prologue: the first kStages - 1 weight tiles in flight, the first activation chunk staged
  // and the second one loading.
  auto issue = [&](int tile) {
    if (warp_has_rows && tile < tiles)
      source.copy(tile, lane, ring + (tile & (kStages - 1)) * kSlot);
    commit_copies();  // an empty group past the end keeps the group count uniform
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  ActivationBlocks<kNTiles> next_act;
  load_activations<kNTiles>(p, tile_begin * 4, block_begin, block_end, vector_a, next_act);
  store_activations<kNTiles>(p, next_act, stage(0));
  if (Shape::kTiles < tiles)
    load_activations<kNTiles>(p, (tile_begin + Shape::kTiles) * 4, block_begin, block_end, vector_a,
                              next_act);
  __syncthreads();

  // Tile sums go to fp32 accumulators where the scales allow it, else block partials go to
  // doubles (rare: kept in local memory, out of the fast path's way).
  float fast[kGroupCount][kNTiles][4] = {};
  double exact[kGroupCount * kNTiles * 4];
#pragma unroll
  for (int i = 0; i < kGroupCount * kNTiles * 4; ++i) exact[i] = 0.0;

#pragma unroll 1
  for (int tile = 0; tile < tiles; ++tile) {
    const int chunk = tile / Shape::kTiles, tile_in_chunk = tile % Shape::kTiles;
    if (tile_in_chunk == 0 && tile != 0) {
      // Entering `chunk`: its activations go to stage chunk % 2 (read last by chunk - 2, which
      // every warp finished before the previous barrier), then the next chunk loads.
      store_activations<kNTiles>(p, next_act, stage(chunk));
      __syncthreads();
      if ((chunk + 1) * Shape::kTiles < tiles)
        load_activations<kNTiles>(p, (tile_begin + (chunk + 1) * Shape::kTiles) * 4, block_begin,
                                  block_end, vector_a, next_act);
    }
    issue(tile + kStages - 1);
    if (!warp_has_rows) continue;
    wait_copies<kStages - 1>();
    __syncwarp();

    const Stage<kNTiles> act = stage(chunk);
    const uint8_t* slot = ring + (tile & (kStages - 1)) * kSlot;
    uint4 w0[kGroupCount], w1[kGroupCount];
    uint2 scales[kGroupCount];
#pragma unroll
    for (int group = 0; group < kGroupCount; ++group) {
      w0[group] = fragment(slot, group, g, t);
      w1[group] = fragment(slot, group, g + 8, t);
      scales[group] =
          *reinterpret_cast<const uint2*>(slot + kGroupCount * 1024 + 64 * group + g * 8);
    }
    __syncwarp();  // every lane has its words: the slot may be refilled

    // The blocks of this tile inside the partition: all four except at its ends.
    const int first_j = tile == 0 ? begin : 0;
    const int last_j = min(end - 4 * tile, 4);
    const bool whole = first_j == 0 && last_j == 4;
    // Two row groups (few activation tiles): one decision and one straight block for both. Groups
    // past N multiply zero-filled slots; their sums are never stored. (With one group the
    // per-group path below is the same work, with its activation tiles in the outer loop.)
    if constexpr (kGroupCount > 1) {
      if (whole && multiply_tile_folded<kNTiles, kGroupCount>(act, tile_in_chunk, w0, w1, scales,
                                                              row_exists, n_tiles_used, fast))
        continue;
    }
#pragma unroll
    for (int group = 0; group < kGroupCount; ++group) {
      if (group >= groups_here) break;  // uniform
      double* group_exact = exact + group * kNTiles * 4;
      if (whole) {
        multiply_tile<kNTiles, true>(act, tile_in_chunk, w0[group], w1[group], scales[group], 0, 4,
                                     row_exists[group], n_tiles_used, fast[group], group_exact);
      } else {
        multiply_tile<kNTiles, false>(act, tile_in_chunk, w0[group], w1[group], scales[group],
                                      first_j, last_j, row_exists[group], n_tiles_used, fast[group],
                                      group_exact);
      }
    }
  }
  wait_copies<0>();

  constexpr int kSums = kGroupCount * kNTiles * 4;  // per thread
  double acc[kSums];
#pragma unroll
  for (int group = 0; group < kGroupCount; ++group)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int index = (group * kNTiles + nt) * 4 + i;
        acc[index] = exact[index] + static_cast<double>(fast[group][nt][i]);
      }

  if (splits > 1) {
    // Partitions 1.. leave their sums in their own shared memory; rank 0 adds them in order.
    cg::cluster_group cluster = cg::this_cluster();
    __syncthreads();  // shared memory is reused for the sums
    double* sums = reinterpret_cast<double*>(smem);
    if (split != 0) {
#pragma unroll
      for (int i = 0; i < kSums; ++i) sums[i * kThreads + threadIdx.x] = acc[i];
    }
    cluster.sync();
    if (split == 0) {
      for (int r = 1; r < splits; ++r) {
        const double* remote = cluster.map_shared_rank(sums, r);
#pragma unroll
        for (int i = 0; i < kSums; ++i) acc[i] += remote[i * kThreads + threadIdx.x];
      }
    }
    cluster_arrive_relaxed_and_wait();  // shared memory stays alive until rank 0 has read it
    if (split != 0) return;
  }
  if (!warp_has_rows) return;
#pragma unroll
  for (int group = 0; group < kGroupCount; ++group)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t n = row0 + 16 * group + g + (i >= 2 ? 8 : 0);
        const int64_t m = nt * 8 + 2 * t + (i & 1);
        if (m < p.m && n < p.n) store_output(p, m, n, acc[(group * kNTiles + nt) * 4 + i]);
      }
#else
  (void)p;
  (void)splits;
  __trap();
#endif
}

template <int kNTiles>
constexpr size_t shared_bytes() {
  const size_t staging =
      2 * size_t{Stage<kNTiles>::kBytes} + size_t{kWarps} * kStages * kSlotBytes<kGroups<kNTiles>>;
  const size_t sums = size_t{kGroups<kNTiles>} * kNTiles * 4 * kThreads * sizeof(double);
  return staging > sums ? staging : sums;
}

template <int kNTiles, bool kTiled>
void launch(const GemmProblem& p, int splits, int64_t ctas) {
  check_cuda(cudaFuncSetAttribute(gemm_decode_kernel<kNTiles, kTiled>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(shared_bytes<kNTiles>())),
             "cudaFuncSetAttribute(gemm_decode_kernel)");
  launch_with_y_cluster(gemm_decode_kernel<kNTiles, kTiled>,
                        dim3(static_cast<unsigned>(ctas), static_cast<unsigned>(splits)), kThreads,
                        shared_bytes<kNTiles>(), p.stream, "gemm_decode_kernel launch",
                        LaunchOrder::kAfterPrevious, p, splits);
}

// CTAs of this kind resident on one SM (registers and shared memory), asked once.
template <int kNTiles, bool kTiled>
int ctas_per_sm() {
  static const int count = [] {
    // The opt-in to more than 48 KiB of shared memory first, or the answer is zero.
    cudaFuncSetAttribute(gemm_decode_kernel<kNTiles, kTiled>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(shared_bytes<kNTiles>()));
    return resident_ctas_per_sm(gemm_decode_kernel<kNTiles, kTiled>, kThreads,
                                shared_bytes<kNTiles>());
  }();
  return count;
}

// Splits of K when the caller leaves the choice: the largest power of two whose CTAs fit every SM's
// resident slots in one wave (a second, partial wave would cost as much as the first), each
// partition at least two activation chunks long. Powers of two keep partitions on K-tile
// boundaries and clusters packing the GPU evenly; the tuner found 6-way splits slower than 4
// (bench/RESULTS.md, issue 6). Cluster placement can hold fewer clusters than this counts (62 of
// the 64 clusters of 8 at 1 x 8192 x 8192 on the H200), but requiring every cluster resident
// (cudaOccupancyMaxActiveClusters) chose split 4 there, which measured 34.8 us against 32.7 us.
template <int kNTiles, bool kTiled>
int auto_splits(const GemmProblem& p, int64_t ctas) {
  const int64_t resident =
      int64_t{ctas_per_sm<kNTiles, kTiled>()} * device_info(p.device.ordinal).sm_count;
  int splits = 1;
  while (splits < kMaxSplits && ctas * 2 * splits <= resident &&
         (p.k / 32) / (2 * splits) >= 2 * ChunkShape<kNTiles>::kBlocks)
    splits *= 2;
  return splits;
}

template <int kNTiles, bool kTiled>
void launch_for(const GemmProblem& p, int64_t ctas) {
  const int splits = p.split_k != 0 ? p.split_k : auto_splits<kNTiles, kTiled>(p, ctas);
  launch<kNTiles, kTiled>(p, splits, ctas);
}

template <int kNTiles>
void launch_with(const GemmProblem& p) {
  const int64_t ctas = (p.n + kRowsPerCta<kNTiles> - 1) / kRowsPerCta<kNTiles>;
  if (p.b.layout == A4W4_LAYOUT_PLAIN) return launch_for<kNTiles, false>(p, ctas);
  launch_for<kNTiles, true>(p, ctas);
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
  }
  return prepared_b_why_not(p.b, 16, 16);
}

void gemm_decode(const GemmProblem& p, const ExecConfig&) {
  DeviceGuard guard(p.device.ordinal);
  if (p.m <= 8) return launch_with<1>(p);
  if (p.m <= 16) return launch_with<2>(p);
  if (p.m <= 32) return launch_with<4>(p);
  return launch_with<8>(p);
}

}  // namespace a4w4::cuda
