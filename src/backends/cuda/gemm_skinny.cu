// The skinny GEMM family (cuda.skinny): small M on int8 warpgroup MMAs, sm_90a, exact mode (with
// fast accumulation, 128-row token tiles run FP8 e4m3 MMAs: gemm_skinny_shared_kernel and
// gemm_skinny_kernel's kFast).
// Memory-bound like cuda.decode, but the MMAs are wgmma with the weights in registers (RS form),
// so a warpgroup issues one or two instructions per 32-wide K slice where cuda.decode's warps
// issued one mma.sync per 8 activation rows and per sign part.
//
// Roles are swapped relative to D = A.B^T: a warpgroup's 64 weight rows are the wgmma's A operand
// (registers), the M activation rows (padded to kTokens = 8, 16, 32, 64 or 128) its B operand
// (shared memory, 128-byte swizzled, K-major). A CTA is one warpgroup, one 64-row column tile of D
// and one token tile (M > 128 runs ceil(M / 128) token tiles of 128 rows, the grid's z, each
// converting the weights again: one conversion serves 128 rows); the K tiles of 128 are cut into
// split-K partitions run by the CTAs of a thread-block cluster.
//
// Block scales are folded as in cuda.decode and cuda.int8_128x128 (int8_fold.cuh): inside a K
// tile, each weight row's and each activation row's blocks are shifted by d = scale - (the row's
// smallest scale in the tile) when every d <= 3. The weights enter the MMAs as unsigned magnitudes
// (w+ and w-, one PRMT each per four codes: its sign mode zeroes the other sign; the PRMTs'
// selectors are made on the FMA pipe, fold::split_row_fma), the activations
// as signed int8, and each 32-wide K slice is two u8 x s8 wgmmas into two int32 sets (w+ . a,
// w- . a) whose difference is the tile's exact sum (at 64 activation rows, where registers do not
// hold two sets, one s8 x s8 wgmma on w+ - w-; also at 128). The sum is promoted once per tile:
// acc += sum * 2^(base_b - 129) * 2^(base_a - 127) in fp32, exact products when
// fp32_accumulation_safe holds. A warp whose rows do not fold in a tile, or a tile whose
// activations do not, or a range that fp32 cannot hold, takes the exact path for that tile:
// per-block int32 sums from mma.sync with unshifted weights, times 2^(ea + sb - 256), added in
// double (NaN scales give NaN), into a local-memory accumulator that is added at the end.
//
// Inside a K tile the element order is free (both operands are permuted alike; every sum is over
// the whole tile). B is read one whole 16-byte block per lane: lane (g, t) of warp w holds block t
// of rows 16 w + g and 16 w + g + 8, and its 4-byte word q of a row is wgmma q's fragment (low 16
// bits: K slots 4 t..4 t + 3, high: 16 + 4 t..); so one shifted table per row serves the lane.
// A prepared (version 2) B gives the same bytes from its tiles (numerics/weight_layout.h: a warp's
// two loads are one whole 1 KB tile). The activations are written into the same K slots: element
// 8 q + i of block b goes to byte 32 q + 4 b + i (i < 4) or 32 q + 16 + 4 b + i - 4.
//
// Per K tile a CTA: converts its weights' fragments (loaded 2 or, in a deep kernel, 4 tiles ahead
// into registers), issues the tile's wgmmas on the activations of a ring slot, and promotes. The
// activations of a K tile (an ActivationRecord: values, factors, fold summaries) are the same for
// every CTA: with a workspace, stage_activations_kernel converts each tile once for the call and
// thread 0 copies the records into a four-slot ring (bulk copies on mbarriers); without one, every
// CTA converts the next tile's activations into the other slot of a two-slot ring while the MMAs
// run (all 128 threads: ActivationShare) — at M = 16..64 and N = 8192..28672 that repeated work
// took a third of the time. The partitions' sums meet in shared memory as doubles and are added in
// rank order through distributed shared memory, each rank finishing a slice of the tile (alpha,
// beta * C, bias, one rounding).
#include <cooperative_groups.h>

#include <atomic>
#include <string>
#include <type_traits>

#include "backends/cuda/cluster_launch.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_utils.h"
#include "backends/cuda/device_common.cuh"
#include "backends/cuda/int8_fold.cuh"
#include "backends/cuda/pipeline.cuh"
#include "backends/cuda/sm90_family.cuh"
#include "backends/cuda/wgmma.cuh"
#include "numerics/weight_layout.h"

namespace a4w4::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 128;           // one warpgroup
constexpr int kRows = 64;               // weight rows (columns of D) per CTA
constexpr int kMaxSplits = 8;           // portable cluster size
constexpr int kMaxTokens = 128;         // activation rows per CTA
constexpr int kMaxUnstagedTokens = 64;  // the largest token tile that may convert per CTA

// The CTA's token tile: only M > kMaxTokens has more than one (a constant 0 below keeps the
// smaller kernels' registers as they were: the 64-row one spilled with blockIdx.z in its loop).
template <int kTokens>
__device__ __forceinline__ int64_t token_tile() {
  return kTokens == kMaxTokens ? int64_t{blockIdx.z} : 0;
}

// How kCount threads (the GEMM's 128, or the staging kernel's kStagingThreads) share a K tile's
// activations (kTokens rows x 128): a unit of work is one (row, block) pair, its 4 words of 8
// codes (16 contiguous bytes), and kSplit threads share it (kY words each), so that every warp
// takes part; kItems units per thread, unit threadIdx.x + kCount * i. A unit's thread has the
// row's 4 block scales (folds the row itself) and writes word q's values where the weights'
// fragments put them (slot_byte): 32 bytes apart.
template <int kTokens, int kCount = kThreads>
struct ActivationShare {
  static constexpr int kSplit = kCount / (kTokens * 4) > 1 ? kCount / (kTokens * 4) : 1;
  static constexpr int kY = 4 / kSplit;  // words per thread and unit
  static constexpr int kItems = kTokens * 4 * kSplit / kCount;
  static constexpr int kSummaries = kItems * kCount / 32;  // one per warp and item
  static_assert(kItems >= 1);
};

// One K tile's activations as the MMAs and the promotion read them (a ring slot's contents): the
// kTokens rows of 128 int8 (128-byte swizzled), each row's factor 2^(base - 127) (0 when the row
// does not fold; in factor_slot's order), each (row, block)'s exponent e of the stored values
// (value * 2^(e - 128)), and per converting warp and item the range of weight bases its rows allow
// on the fp32 path: at least need[], at most allow[] (need = 0x7FFF when a row does not fold).
// Written by the CTA itself, or once per call by stage_activations_kernel into the workspace and
// copied in whole.
template <int kTokens>
struct ActivationRecord {
  static constexpr int kSummaries = ActivationShare<kTokens>::kSummaries;
  static constexpr int kFactorOffset = kTokens * 128;
  static constexpr int kExponentOffset = kFactorOffset + kTokens * 4;
  static constexpr int kNeedOffset = kExponentOffset + kTokens * 4;
  static constexpr int kAllowOffset = kNeedOffset + kSummaries * 4;
  static constexpr int kBytes = (kAllowOffset + kSummaries * 4 + 15) / 16 * 16;  // bulk copies
  // In shared memory each record starts on 1024 bytes (the swizzle's 8-row atoms).
  static constexpr int kSlotStride = (kBytes + 1023) / 1024 * 1024;
};

// Where the record of K tile `tile` of token tile `token_tile` lies in the workspace (the staging
// kernel writes it there, the GEMM copies it): each token tile's `tiles` records in turn.
template <int kTokens>
__host__ __device__ constexpr size_t record_offset(int64_t token_tile, int64_t tiles,
                                                   int64_t tile) {
  return static_cast<size_t>(token_tile * tiles + tile) * ActivationRecord<kTokens>::kBytes;
}

// Where activation row `token`'s factor sits in a record: the promotion's lane t needs rows
// 8 j + 2 t and 8 j + 2 t + 1 for every j, so rows 16 i + 2 t + {0, 1} and 16 i + 8 + 2 t + {0, 1}
// are adjacent (one 16-byte load per pair of j).
template <int kTokens>
__host__ __device__ constexpr int factor_slot(int token) {
  if constexpr (kTokens < 16) return token;
  return token / 16 * 16 + token % 8 / 2 * 4 + token % 16 / 8 * 2 + token % 2;
}

// The range of weight bases that every activation row of a record allows on the fp32 path: the
// most demanding of its first kCount (need, allow) summaries (a staged record has them all reduced
// into the first).
struct BaseRange {
  int need, allow;
};
template <int kTokens, int kCount>
__device__ __forceinline__ BaseRange allowed_bases(const uint8_t* record) {
  using R = ActivationRecord<kTokens>;
  const int* need = reinterpret_cast<const int*>(record + R::kNeedOffset);
  const int* allow = reinterpret_cast<const int*>(record + R::kAllowOffset);
  BaseRange range{need[0], allow[0]};
#pragma unroll
  for (int i = 1; i < kCount; ++i)
    range.need = max(range.need, need[i]), range.allow = min(range.allow, allow[i]);
  return range;
}

// The row stride of the CTA's sums as doubles after the main loop ([token][row]): even, so that a
// pair of rows is one 16-byte load.
constexpr int kPartialStride = kRows + 2;

// kSlots activation records (a ring) or, after the main loop, the CTA's sums as doubles
// ([token][row], kPartialStride) in the same bytes; then the staged ring's mbarriers.
template <int kTokens, int kSlots>
struct Smem {
  using Record = ActivationRecord<kTokens>;
  static constexpr int kRingBytes = kSlots * Record::kSlotStride;
  static constexpr int kPartialBytes = kTokens * kPartialStride * 8;
  static constexpr int kBarrierOffset =
      ((kRingBytes > kPartialBytes ? kRingBytes : kPartialBytes) + 15) / 16 * 16;
  static constexpr int kBytes = kBarrierOffset + kSlots * 8;
};

// Whether the weights enter the MMAs signed (w+ - w-, one accumulator set) rather than as w+ and
// w- (two sets): where registers do not hold two sets.
template <int kTokens>
constexpr bool kSignedWeights = kTokens >= 64;

// D (64 x kTokens, int32) (+)= A (64x32 u8 or, kSignedWeights, s8; registers) * B (kTokens x 32
// s8, shared memory)^T.
template <int kTokens>
__device__ __forceinline__ void mma_rs(int32_t (&d)[kTokens / 2], const uint32_t (&a)[4],
                                       uint64_t b, bool accumulate) {
  if constexpr (kTokens == 8) wgmma::mma_u8s8_m64n8k32_rs(d, a, b, accumulate);
  if constexpr (kTokens == 16) wgmma::mma_u8s8_m64n16k32_rs(d, a, b, accumulate);
  if constexpr (kTokens == 32) wgmma::mma_u8s8_m64n32k32_rs(d, a, b, accumulate);
  if constexpr (kTokens == 64) wgmma::mma_m64n64k32_rs<true>(d, a, b, accumulate);
  if constexpr (kTokens == 128) wgmma::mma_s8_m64n128k32_rs(d, a, b, accumulate);
}

// Byte of element 8 q + 4 half + i (i < 4) of block b inside a 128-wide K tile's row.
__device__ __forceinline__ int slot_byte(int block, int q, int half) {
  return 32 * q + 16 * half + 4 * block;
}

// Four bytes at src (any alignment) as a little-endian word.
__device__ __forceinline__ uint32_t load_word_bytes(const uint8_t* src) {
  return static_cast<uint32_t>(src[0]) | static_cast<uint32_t>(src[1]) << 8 |
         static_cast<uint32_t>(src[2]) << 16 | static_cast<uint32_t>(src[3]) << 24;
}

// 16 bytes of a plain weight row, asking L2 to fetch the 256 bytes around them: a K tile takes only
// 64 bytes of each of its 64 rows, and the row's next tiles follow, so DRAM sees whole 256-byte
// runs instead of 64-byte pieces of many rows.
__device__ __forceinline__ uint4 load_row_run(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// This lane's raw share of one weight K tile: 16 bytes of codes for rows g and g + 8 and their
// 4 block scales (block j in byte j).
struct WeightRaw {
  uint4 g, h;
  uint32_t scales_g, scales_h;
};

// Where this lane's weights come from, fixed for the CTA: a plain B's rows, or kTiled, a prepared
// (version 2) B's tiles, where rows g and g + 8 of the warp's 16 are 512 bytes apart in each tile
// and their scale words adjacent.
template <bool kTiled>
struct WeightSource {
  const uint8_t* codes[2];   // rows g, g + 8 at their block t of K tile 0
  const uint8_t* scales[2];  // plain: the rows' scale rows; tiled: the group's tile 0 scales
  int blocks;
  bool words;  // plain: 4-byte scale loads

  __device__ WeightSource(const GemmProblem& p, int64_t row0) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    blocks = static_cast<int>(p.k / 32);
    const int tiles = static_cast<int>(layout::k_tiles(p.k));
    const int64_t warp_row0 = row0 + 16 * (threadIdx.x / 32 % 4);  // warp of its warpgroup
    if constexpr (kTiled) {
      // A group past N reads the last group (its sums are never stored).
      const int64_t last_group = (p.n - 1) / 16;
      const int64_t group = warp_row0 / 16 < last_group ? warp_row0 / 16 : last_group;
      codes[0] = p.b.data + layout::row_run_offset(16 * group + g, 0, tiles) + 16 * t;
      codes[1] = codes[0] + 8 * layout::kRowRunBytes;
      scales[0] = p.b.scale + layout::prepared_scale_offset(16 * group + g, 0, tiles);
      scales[1] = scales[0] + 4;
      words = true;
    } else {
      // Rows past N read row N - 1.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = warp_row0 + g + 8 * h < p.n ? warp_row0 + g + 8 * h : p.n - 1;
        codes[h] = p.b.data + row * p.b.stride_bytes + 16 * t;
        scales[h] = p.b.scale + row * p.b.scale_stride;
      }
      words = fold::scale_words(p.b);
    }
  }

  __device__ __forceinline__ WeightRaw load(int tile) const {
    WeightRaw w;
    if constexpr (kTiled) {
      const size_t offset = size_t(tile) * layout::kTileBytes;
      w.g = __ldg(reinterpret_cast<const uint4*>(codes[0] + offset));
      w.h = __ldg(reinterpret_cast<const uint4*>(codes[1] + offset));
      const uint2 s = __ldg(reinterpret_cast<const uint2*>(scales[0] + size_t(tile) * 64));
      w.scales_g = s.x, w.scales_h = s.y;  // the padding blocks of a last partial tile read 0
    } else {
      const int t = threadIdx.x % 4;
      const bool present = 4 * tile + t < blocks;
      const size_t offset = size_t(tile) * 64;
      w.g = present ? load_row_run(codes[0] + offset) : make_uint4(0, 0, 0, 0);
      w.h = present ? load_row_run(codes[1] + offset) : make_uint4(0, 0, 0, 0);
      w.scales_g = fold::scale_word(scales[0], tile, blocks, words);
      w.scales_h = fold::scale_word(scales[1], tile, blocks, words);
    }
    return w;
  }

  // What load() returns for a prepared B, copied asynchronously (copy_async; the caller commits
  // and waits) into this thread's place in a raw stage: codes of rows g and g + 8, their scales.
  __device__ __forceinline__ void copy(int tile, uint4* codes_g, uint4* codes_h,
                                       uint2* scales_gh) const {
    static_assert(kTiled);
    const size_t offset = size_t(tile) * layout::kTileBytes;
    copy_async<16>(codes_g, codes[0] + offset, true);
    copy_async<16>(codes_h, codes[1] + offset, true);
    copy_async<8>(scales_gh, scales[0] + size_t(tile) * 64, true);
  }

  // A prepared B's pointers moved on by `tiles` K tiles: the main loop's cursor, which load(0)
  // reads, so that the next loads' addresses are one add each rather than rebuilt from the kernel
  // parameters every tile (ptxas does that to save registers).
  __device__ __forceinline__ void advance(int tiles) {
    static_assert(kTiled);
    codes[0] += size_t(tiles) * layout::kTileBytes, codes[1] += size_t(tiles) * layout::kTileBytes;
    scales[0] += size_t(tiles) * 64;
  }

  // Whether K tile `tile` of a prepared B is its last, partial one (K not a multiple of 128),
  // whose padding blocks read scale 0.
  __device__ __forceinline__ bool partial(int tile) const {
    return kTiled && 4 * tile + 4 > blocks;
  }

  // w with the padding blocks of a prepared B's last partial tile (scale 0) as
  // fold_rules::padded_block (a plain B's scale_word does this at the load).
  __device__ __forceinline__ WeightRaw valid_scales(WeightRaw w, int tile) const {
    if (partial(tile)) {
      w.scales_g = fold_rules::padded_scale_word(w.scales_g, blocks - 4 * tile);
      w.scales_h = fold_rules::padded_scale_word(w.scales_h, blocks - 4 * tile);
    }
    return w;
  }
};

// This thread's share of one K tile's activations, held in registers between its loads and its
// conversion (so the loads of tile i + 1 are in flight while tile i is multiplied).
template <int kTokens, int kCount = kThreads>
struct ActivationRaw {
  using Share = ActivationShare<kTokens, kCount>;
  uint32_t words[Share::kItems][Share::kY];
  uint32_t scales[Share::kItems];  // the row's 4 block scales (block j in byte j)
};

// Item i of this thread: its activation row, block and first word, with what does not change from
// tile to tile worked out once: where its words and scales come from and where its values go.
template <int kTokens, int kCount = kThreads>
struct ActivationItem {
  using Share = ActivationShare<kTokens, kCount>;
  int row, block, q0;
  bool present;           // row < M
  const uint8_t* src;     // its first word in K tile 0
  const uint8_t* scales;  // the row's scales
  // Where its values go in a slot: the row's first byte plus the byte within a 16-byte chunk, and
  // the chunk bits of word q0's half 0 (slot_byte) xor the row's swizzle.
  uint32_t base, chunk_key;

  // token0: the first activation row of the CTA's token tile.
  __device__ void init(const GemmProblem& p, int i, int64_t token0) {
    const int unit = static_cast<int>(threadIdx.x) + kCount * i;
    row = unit / (4 * Share::kSplit);
    block = (unit / Share::kSplit) % 4;
    q0 = (unit % Share::kSplit) * Share::kY;
    present = token0 + row < p.m;
    const int64_t r = token0 + (present ? row : 0);
    src = p.a.data + r * p.a.stride_bytes + 16 * block + 4 * q0;
    scales = p.a.scale + r * p.a.scale_stride;
    const uint32_t first = slot_byte(block, q0, 0);
    base = (row / 8) * wgmma::kSwizzleAtomBytes + (row % 8) * wgmma::kSwizzleRowBytes + first % 16;
    chunk_key = (first & ~15u) ^ ((row % 8) * 16);
  }

  // Where word q0 + y's values go (half 0: from its low 16 bits, 1: its high 16 bits). The words'
  // chunk bits do not overlap q0's (q0 + y < 4), so the swizzle (a xor) applies to each part.
  __device__ __forceinline__ uint32_t offset(int y, int half) const {
    const uint32_t step = 32 * y + 16 * half;  // chunk bits from word q0
    return base + (chunk_key ^ step);
  }
};

template <int kTokens, int kCount = kThreads>
__device__ __forceinline__ void load_activations(
    const ActivationItem<kTokens, kCount> (&items)[ActivationShare<kTokens, kCount>::kItems],
    int tile, int blocks, bool aligned, bool scale_words, ActivationRaw<kTokens, kCount>& raw) {
  using Share = ActivationShare<kTokens, kCount>;
#pragma unroll
  for (int i = 0; i < Share::kItems; ++i) {
    const ActivationItem<kTokens, kCount>& item = items[i];
#pragma unroll
    for (int y = 0; y < Share::kY; ++y) raw.words[i][y] = 0;
    raw.scales[i] = 0x7F7F7F7Fu;  // rows past M: zeros with scale 127 (fold, factor 1)
    if (!item.present) continue;
    raw.scales[i] = fold::scale_word(item.scales, tile, blocks, scale_words);
    if (4 * tile + item.block >= blocks) continue;
    const uint8_t* src = item.src + 64 * tile;  // words q0.. of the block: contiguous
    if constexpr (Share::kY == 4) {
      if (aligned) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(src));
        raw.words[i][0] = v.x, raw.words[i][1] = v.y, raw.words[i][2] = v.z, raw.words[i][3] = v.w;
        continue;
      }
    } else if constexpr (Share::kY == 2) {
      if (aligned) {
        const uint2 v = __ldg(reinterpret_cast<const uint2*>(src));
        raw.words[i][0] = v.x, raw.words[i][1] = v.y;
        continue;
      }
    }
#pragma unroll
    for (int y = 0; y < Share::kY; ++y)
      raw.words[i][y] = aligned ? __ldg(reinterpret_cast<const uint32_t*>(src + 4 * y))
                                : load_word_bytes(src + 4 * y);
  }
}

// Fast accumulation's activation rows are folded per chunk of kFastChunkTiles K tiles (aligned
// to K): one base per row and chunk, so a consumer loads the rows' factors once per chunk rather
// than once per K tile (those loads had been an eighth of the kernel's time). A row takes the
// fp8 path in a chunk when its block scales there fit the e4m3 window (fold::FastRange) and its
// base keeps the fp32 accumulation of tile sums times 2^(base - 127) normal and finite: products
// of the stored values are at least 2^-12 and a tile's sum below 2^24.2, over at most 2^24 tiles
// (13 <= base <= 205).
inline constexpr int kFastChunkTiles = 8;
inline constexpr uint32_t kFastMinTokenBase = 13, kFastMaxTokenBase = 205;

// Item i's row folded over the chunk of K tile `tile` (rows past M: scale 127 throughout).
template <int kTokens, int kCount>
__device__ __forceinline__ fold::FastRow chunk_fast_row(const ActivationItem<kTokens, kCount>& item,
                                                        int tile, int blocks, bool words) {
  const int tiles = (blocks + 3) / 4;
  const int first = tile / kFastChunkTiles * kFastChunkTiles;
  fold::FastRange range;
  // Unrolled: the chunk's loads in flight together (a loop of dependent rounds cost the staging
  // kernel several L2 latencies).
#pragma unroll
  for (int i = 0; i < kFastChunkTiles; ++i)
    if (first + i < tiles)
      range.add(item.present ? fold::scale_word(item.scales, first + i, blocks, words)
                             : 0x7F7F7F7Fu);
  return range.row();
}

// Folds and writes one K tile's activations as a record (see ActivationRecord). kFast: as fast
// accumulation's FP8 e4m3 values 2 * v * 2^d relative to each row's chunk base (chunk_rows,
// fold::e4m3_table); a row outside the window is stored unshifted (its exponents the block
// scales, factor 0) and need[] = 0x7FFF sends the tile's (warp, token tile)s to the exact path;
// else need[] = 0.
template <int kTokens, bool kFast = false, int kCount = kThreads>
__device__ __forceinline__ void store_activations(
    const ActivationItem<kTokens, kCount> (&items)[ActivationShare<kTokens, kCount>::kItems],
    const ActivationRaw<kTokens, kCount>& raw, uint8_t* record,
    const fold::FastRow* chunk_rows = nullptr) {
  using R = ActivationRecord<kTokens>;
  using Share = ActivationShare<kTokens, kCount>;
  static_assert(Share::kSummaries == R::kSummaries);
  uint8_t* values = record;
  float* factor = reinterpret_cast<float*>(record + R::kFactorOffset);
  uint32_t* exponents = reinterpret_cast<uint32_t*>(record + R::kExponentOffset);
  int* need = reinterpret_cast<int*>(record + R::kNeedOffset);
  int* allow = reinterpret_cast<int*>(record + R::kAllowOffset);
#pragma unroll
  for (int i = 0; i < Share::kItems; ++i) {
    const ActivationItem<kTokens, kCount>& item = items[i];
    const uint32_t scales = raw.scales[i];
    if constexpr (kFast) {
      const fold::FastRow f = chunk_rows[i];
      const bool ok = f.ok && f.base >= kFastMinTokenBase && f.base <= kFastMaxTokenBase;
      const int d =
          ok ? static_cast<int>((scales >> (8 * item.block)) & 0xFFu) - static_cast<int>(f.base)
             : 0;
      const fold::E4m3Table table = fold::e4m3_table(d);
#pragma unroll
      for (int y = 0; y < Share::kY; ++y) {
        const uint2 bytes = e2m1x8_to_e4m3x8(raw.words[i][y], table.lo, table.hi);
        *reinterpret_cast<uint32_t*>(values + item.offset(y, 0)) = bytes.x;
        *reinterpret_cast<uint32_t*>(values + item.offset(y, 1)) = bytes.y;
      }
      if (item.block == 0 && item.q0 == 0) {
        exponents[item.row] = ok ? f.base * 0x01010101u : scales;
        factor[factor_slot<kTokens>(item.row)] = __uint_as_float(ok ? f.base << 23 : 0u);
      }
      const bool all_ok = __all_sync(0xFFFFFFFFu, ok);
      if (threadIdx.x % 32 == 0) {
        const int entry = (threadIdx.x + kCount * i) / 32;
        need[entry] = all_ok ? 0 : 0x7FFF;
        allow[entry] = 0x7FFF;
      }
      continue;
    }
    // The row folds when its 4 blocks lie within kMaxShift of the smallest and none is NaN.
    const fold::FoldedRow f = fold::fold_row(scales);
    // One table: every word of the unit is in the same block.
    const uint32_t shift = f.ok ? (f.shifts >> (8 * item.block)) & 0xFFu : 0u;
    const uint32_t lo = kMagnitudesLo << shift, hi = kMagnitudesHi << shift;
    uint32_t out[2][Share::kY];
#pragma unroll
    for (int y = 0; y < Share::kY; ++y) {
      out[0][y] = e2m1x4_to_s8x4(raw.words[i][y], lo, hi);
      out[1][y] = e2m1x4_to_s8x4(raw.words[i][y] >> 16, lo, hi);
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int y = 0; y < Share::kY; ++y)
        *reinterpret_cast<uint32_t*>(values + item.offset(y, half)) = out[half][y];
    }
    if (item.block == 0 && item.q0 == 0) {
      // The exponent e of each block's stored values (value * 2^(e - 128)) and the row's factor.
      exponents[item.row] = f.ok ? f.base * 0x01010101u : scales;
      factor[factor_slot<kTokens>(item.row)] = __uint_as_float(f.ok ? f.base << 23 : 0u);
    }

    const uint32_t e_lo = __reduce_min_sync(0xFFFFFFFFu, item.present ? f.base : 0xFFu);
    const uint32_t e_hi = __reduce_max_sync(0xFFFFFFFFu, item.present ? f.base : 0u);
    const bool all_folded = __all_sync(0xFFFFFFFFu, f.ok);
    if (threadIdx.x % 32 == 0) {
      // fold::fp32_accumulation_safe(e_lo, e_hi, b, b) as bounds on the weight base b (no
      // constraint beyond b >= 3 from rows that do not exist: e_lo = 255, e_hi = 0), and b at
      // most fold::kMaxScaledTileSumBase for the promotion's TileSumScale.
      const int entry = (threadIdx.x + kCount * i) / 32;
      need[entry] = all_folded && e_lo >= 1 ? max(3, 130 - static_cast<int>(e_lo)) : 0x7FFF;
      allow[entry] =
          min(330 - static_cast<int>(e_hi), static_cast<int>(fold::kMaxScaledTileSumBase));
    }
  }
}

// The weight fragments of one K tile folded by each row's shifts: word q's w+ and w- of rows g and
// g + 8 (fold::weight_block, wgmma q's registers); the MMAs sum w+ . a and w- . a into two
// accumulator sets whose difference is the tile sum. Also whether this lane's rows fold, and their
// bases (for the fp32 range check).
struct WeightTile {
  fold::WeightBlock words[4];
  fold::FoldedRow row_g, row_h;
};

// kSigned (kSignedWeights: 64 and 128 activation rows, where registers do not hold two
// accumulator sets): the positive registers hold the signed values w+ - w- instead, one MMA per K
// slice.
template <bool kSigned>
__device__ __forceinline__ WeightTile convert_weights(const WeightRaw& w, uint32_t all_ones) {
  const fold::FoldedRow fg = fold::fold_row(w.scales_g), fh = fold::fold_row(w.scales_h);
  WeightTile tile;
  tile.row_g = fg, tile.row_h = fh;
  const uint32_t words_g[4] = {w.g.x, w.g.y, w.g.z, w.g.w};
  const uint32_t words_h[4] = {w.h.x, w.h.y, w.h.z, w.h.w};
  // Every word of the lane is in its block t: one shift per row.
  const int t = threadIdx.x % 4;
  const uint32_t shift_g = fg.shifts >> (8 * t), shift_h = fh.shifts >> (8 * t);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    fold::WeightBlock& b = tile.words[q];
    b = fold::weight_block<true>(words_g[q], words_h[q], shift_g, shift_h, all_ones);
    if constexpr (kSigned)
#pragma unroll
      for (int r = 0; r < 4; ++r) b.positive[r] = signed_s8x4(b.positive[r], b.negative[r]);
  }
  return tile;
}

// Fast accumulation (kFast): the e4m3 table of block `block` of a row's K tile (its scale word)
// relative to the row's base for the CTA's K tiles, d clamped to the window (a row outside it
// has its warp on the exact path, so its values only need to be finite).
__device__ __forceinline__ fold::E4m3Table fast_block_table(uint32_t scales, int block,
                                                            uint32_t base) {
  const int d = static_cast<int>((scales >> (8 * block)) & 0xFFu) - static_cast<int>(base);
  return fold::e4m3_table(min(max(d, fold::kFastMinShift), fold::kFastMaxShift));
}

// kFast: this lane's two rows' fast-path bases over K tiles [begin, end) (fold::fast_row of their
// smallest and largest block scales; padding blocks of a last partial tile take its first
// block's scale), the quad's four lanes taking every fourth tile.
template <bool kTiled>
__device__ __forceinline__ void fast_row_bases(const WeightSource<kTiled>& source, int begin,
                                               int end, fold::FastRow& g_row,
                                               fold::FastRow& h_row) {
  const int t = threadIdx.x % 4;
  fold::FastRange g, h;
  // kBatch loads in flight at a time (one at a time, the scan took several microseconds before
  // the first tile could be converted; 16 instead of 8, one round at K = 8192: H100, fast
  // 129..512 x 8192 x 8192 about 1 us faster of 48..100).
  constexpr int kBatch = 16;
  for (int first = begin + t; first < end; first += 4 * kBatch) {
    uint2 s[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int tile = first + 4 * i < end ? first + 4 * i : first;
      if constexpr (kTiled)
        s[i] = __ldg(reinterpret_cast<const uint2*>(source.scales[0] + size_t(tile) * 64));
      else
        s[i] = make_uint2(fold::scale_word(source.scales[0], tile, source.blocks, source.words),
                          fold::scale_word(source.scales[1], tile, source.blocks, source.words));
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int tile = first + 4 * i < end ? first + 4 * i : first;
      const WeightRaw w = source.valid_scales(WeightRaw{{}, {}, s[i].x, s[i].y}, tile);
      g.add(w.scales_g), h.add(w.scales_h);
    }
  }
#pragma unroll
  for (int mask = 1; mask < 4; mask *= 2) g.add_lane(mask), h.add_lane(mask);
  g_row = g.row(), h_row = h.row();
}

// kFast: convert_weights as signed e4m3 fragments (in the positive registers) relative to the
// rows' bases for the CTA's K tiles.
__device__ __forceinline__ WeightTile convert_weights_fast(const WeightRaw& w, uint32_t base_g,
                                                           uint32_t base_h) {
  const int t = threadIdx.x % 4;
  const fold::E4m3Table tg = fast_block_table(w.scales_g, t, base_g),
                        th = fast_block_table(w.scales_h, t, base_h);
  const uint32_t words_g[4] = {w.g.x, w.g.y, w.g.z, w.g.w};
  const uint32_t words_h[4] = {w.h.x, w.h.y, w.h.z, w.h.w};
  WeightTile tile{};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t(&a)[4] = tile.words[q].positive;
    const uint2 g = e2m1x8_to_e4m3x8(words_g[q], tg.lo, tg.hi);
    const uint2 h = e2m1x8_to_e4m3x8(words_h[q], th.lo, th.hi);
    a[0] = g.x, a[1] = h.x, a[2] = g.y, a[3] = h.y;
  }
  return tile;
}

// The exact path for this warp's 16 rows and one K tile: block by block, int32 sums of the
// unshifted weights with the stored activations (mma.sync; lanes not holding the block give
// zeros), times 2^(ea + sb - 256) added in double. exact[4 j + i] is the accumulator of
// fast[4 j + i]. Cold: kept out of line. kRecordInWorkspace: values and exponents are in global
// memory (a separate copy, so the shared-memory one keeps its code and registers). kFast: the
// record holds FP8 e4m3 values (fast accumulation's records); the weights become e4m3 too and each
// mma.sync sums 8 products, all multiples of the block's 2^d (|sum| <= 1152 * 2^d), exactly in the
// fp8 path's 14 bits; the four add up exactly in fp32 (<= 4608 * 2^d).
template <int kTokens, bool kRecordInWorkspace = false, bool kFast = false>
__device__ __noinline__ void exact_tile(uint4 codes_g, uint4 codes_h, uint32_t scales_g,
                                        uint32_t scales_h, const uint8_t* values,
                                        const uint8_t* exponents, int valid_blocks, double* exact) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint32_t words_g[4] = {codes_g.x, codes_g.y, codes_g.z, codes_g.w};
  const uint32_t words_h[4] = {codes_h.x, codes_h.y, codes_h.z, codes_h.w};
  for (int b = 0; b < valid_blocks; ++b) {
    for (int nt = 0; nt < kTokens / 8; ++nt) {
      using Sum = std::conditional_t<kFast, float, int32_t>;
      Sum sum[4] = {0, 0, 0, 0};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        // Word q of lane t's block t, zero unless t == b.
        const bool mine = t == b;
        const uint32_t wg = mine ? words_g[q] : 0u, wh = mine ? words_h[q] : 0u;
        const auto convert = [](uint32_t codes) {
          if constexpr (kFast)
            return e2m1x4_to_e4m3x4(codes, fold::kE4m3DoubledLo, fold::kE4m3DoubledHi);
          return e2m1x4_to_s8x4(codes);
        };
        const uint32_t a[4] = {convert(wg), convert(wh), convert(wg >> 16), convert(wh >> 16)};
        // Activation row 8 nt + g supplies column g: K slots 4 t.. and 16 + 4 t.. of wgmma q.
        const int row = 8 * nt + g;
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(
            values + wgmma::swizzled_offset(row, 32 * q + 4 * t));
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(
            values + wgmma::swizzled_offset(row, 32 * q + 16 + 4 * t));
        const uint32_t bf[2] = {b0, b1};
        Sum part[4];
        if constexpr (kFast)
          mma_e4m3_16x8x32(part, a, bf);
        else
          mma_s8_16x8x32(part, a, bf);
#pragma unroll
        for (int i = 0; i < 4; ++i) sum[i] += part[i];
      }
      // sum[i]: weight row g (+8 for i >= 2), activation row 8 nt + 2 t + (i & 1).
      const uint32_t sg = (scales_g >> (8 * b)) & 0xFFu, sh = (scales_h >> (8 * b)) & 0xFFu;
      const uint32_t ea0 = exponents[(8 * nt + 2 * t) * 4 + b],
                     ea1 = exponents[(8 * nt + 2 * t + 1) * 4 + b];
      exact[4 * nt + 0] = fma(static_cast<double>(sum[0]), block_scale(ea0, sg), exact[4 * nt + 0]);
      exact[4 * nt + 1] = fma(static_cast<double>(sum[1]), block_scale(ea1, sg), exact[4 * nt + 1]);
      exact[4 * nt + 2] = fma(static_cast<double>(sum[2]), block_scale(ea0, sh), exact[4 * nt + 2]);
      exact[4 * nt + 3] = fma(static_cast<double>(sum[3]), block_scale(ea1, sh), exact[4 * nt + 3]);
    }
  }
}

// The fast path's promotion of one K tile: fast += (pos - neg) * 2^(base - 129) (per weight row,
// TileSumScale) * 2^(base_a - 127) (per activation row, the record's factors; the extra 1/4 undoes
// the doubling of both operands). kSigned: neg is not read (one accumulator set).
// The record's factors of this thread's accumulator columns: factors[j] for activation rows
// 8 j + 2 t and 8 j + 2 t + 1 (factor_slot's order: one 16-byte load per pair of j).
template <int kTokens>
__device__ __forceinline__ void load_token_factors(const float* factor,
                                                   float2 (&factors)[kTokens / 8]) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int j = 0; j < kTokens / 8; j += 2) {
    if constexpr (kTokens < 16) {
      factors[j] = *reinterpret_cast<const float2*>(factor + 2 * t);
    } else {
      const float4 four = *reinterpret_cast<const float4*>(factor + 8 * j + 4 * t);
      factors[j] = make_float2(four.x, four.y), factors[j + 1] = make_float2(four.z, four.w);
    }
  }
}

template <int kTokens, bool kSigned>
__device__ __forceinline__ void promote_tile(float (&fast)[kTokens / 2],
                                             const int32_t (&pos)[kTokens / 2],
                                             const int32_t (&neg)[kTokens / 2], uint32_t base_g,
                                             uint32_t base_h, const float* factor) {
  const fold::TileSumScale scale_g(base_g), scale_h(base_h);
  float2 factors[kTokens / 8];
  load_token_factors<kTokens>(factor, factors);
  const auto tile_sum = [&](const fold::TileSumScale& scale, int i) {
    if constexpr (kSigned) return scale.single(pos[i]);
    return scale(pos[i], neg[i]);
  };
#pragma unroll
  for (int j = 0; j < kTokens / 8; ++j) {
    const float2 fa = factors[j];
    fast[4 * j + 0] = fmaf(tile_sum(scale_g, 4 * j + 0), fa.x, fast[4 * j + 0]);
    fast[4 * j + 1] = fmaf(tile_sum(scale_g, 4 * j + 1), fa.y, fast[4 * j + 1]);
    fast[4 * j + 2] = fmaf(tile_sum(scale_h, 4 * j + 2), fa.x, fast[4 * j + 2]);
    fast[4 * j + 3] = fmaf(tile_sum(scale_h, 4 * j + 3), fa.y, fast[4 * j + 3]);
  }
}

// Fast accumulation's promotion of one K tile: fast += sums * 2^(base_a - 127) (per activation
// row, the record's factors), one FFMA per accumulator; the weight rows' factors 2^(base_b - 129)
// (and the 1/4 of the doubled operands) multiply the sums once, when they are written.
// (factors: load_token_factors of the chunk's first record, kept in registers.)
template <int kTokens>
__device__ __forceinline__ void promote_fast(float (&fast)[kTokens / 2],
                                             const float (&sums)[kTokens / 2],
                                             const float2 (&factors)[kTokens / 8]) {
#pragma unroll
  for (int j = 0; j < kTokens / 8; ++j) {
    const float2 fa = factors[j];
    fast[4 * j + 0] = fmaf(sums[4 * j + 0], fa.x, fast[4 * j + 0]);
    fast[4 * j + 1] = fmaf(sums[4 * j + 1], fa.y, fast[4 * j + 1]);
    fast[4 * j + 2] = fmaf(sums[4 * j + 2], fa.x, fast[4 * j + 2]);
    fast[4 * j + 3] = fmaf(sums[4 * j + 3], fa.y, fast[4 * j + 3]);
  }
}

// The CTA's sums of this thread as doubles into partial[token][row] (kPartialStride): its
// fp32 accumulators and, where it took the exact path, their exact parts. Two copies of the loop,
// so that exact[] (local memory) is read only by a thread that took the exact path (one loop with
// a select read all of it in every thread: 10% of the stalls at 128 activation rows).
// factor_g, factor_h: what the fp32 sums of rows g and g + 8 are still to be multiplied by (fast
// accumulation applies the weight rows' factors here; 1 otherwise).
template <int kTokens>
__device__ __forceinline__ void write_partials(double* partial, int token_offset,
                                               const float (&fast)[kTokens / 2],
                                               const double (&exact)[kTokens / 2], bool any_exact,
                                               double factor_g = 1.0, double factor_h = 1.0) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4, g = lane / 4, t = lane % 4;
  const auto write = [&](auto with_exact) {
#pragma unroll
    for (int j = 0; j < kTokens / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int token = token_offset + 8 * j + 2 * t + (i & 1),
                  row = 16 * warp + g + 8 * (i >> 1);
        double value = static_cast<double>(fast[4 * j + i]) * (i >> 1 ? factor_h : factor_g);
        if constexpr (decltype(with_exact)::value) value += exact[4 * j + i];
        partial[token * kPartialStride + row] = value;
      }
  };
  if (any_exact)
    write(std::true_type{});
  else
    write(std::false_type{});
}

// Rank r of the cluster finishes its slice of the tile's kTokens x kRows sums (partial[token][row]
// in each rank's shared memory), adding the ranks' sums in rank order, and stores D (alpha,
// beta * C, bias, one rounding), two adjacent columns of D at a time; kThreadCount threads take
// part. Ends with the cluster barrier that keeps every rank's shared memory alive until the others
// have read it.
template <int kTokens, int kThreadCount>
__device__ __forceinline__ void finish_tile(const GemmProblem& p, double* partial, int64_t token0,
                                            int64_t row0) {
  constexpr int kPairs = kTokens * kRows / 2, kRowPairs = kRows / 2;
  const int rank = static_cast<int>(blockIdx.y), splits = static_cast<int>(gridDim.y);
  const int per_rank = (kPairs + splits - 1) / splits;
  const int first = rank * per_rank, last = first + per_rank < kPairs ? first + per_rank : kPairs;
  if (splits == 1 && plain_epilogue(p) && row0 + kRows <= p.n && vectors_aligned(p)) {
    // One rank and nothing to add: 8 adjacent columns of D at a time, each rounded once from its
    // double, in one 16-byte store (or two for fp32). H200, 256 x 8192 x 8192: 66.9 -> 64.1 us
    // on a prepared B, 79.1 -> 74.7 on a plain one.
    __syncthreads();
    constexpr int kVectorsPerToken = kRows / 8;
    for (int v = static_cast<int>(threadIdx.x); v < kTokens * kVectorsPerToken; v += kThreadCount) {
      const int token = v / kVectorsPerToken, column = 8 * (v % kVectorsPerToken);
      if (token0 + token >= p.m) continue;
      const double* sums = partial + token * kPartialStride + column;
      store_output_vector(p, token0 + token, row0 + column, sums);
    }
    return;
  }
  const bool plain_aligned = plain_epilogue(p) && pairs_aligned(p);
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  // kUnroll pairs per thread at a time, rank by rank: the distributed shared memory reads of the
  // pairs are in flight together instead of one add's latency each, and each sum still adds the
  // ranks in order.
  constexpr int kUnroll = 2;
  for (int e0 = first + static_cast<int>(threadIdx.x); e0 < last; e0 += kThreadCount * kUnroll) {
    int index[kUnroll];
    double2 sums[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int e = e0 + u * kThreadCount < last ? e0 + u * kThreadCount : first;
      index[u] = (e / kRowPairs) * kPartialStride + 2 * (e % kRowPairs);
      sums[u] = make_double2(0.0, 0.0);
    }
    for (int r = 0; r < splits; ++r) {
      const double* rank_partial = cluster.map_shared_rank(partial, r);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const double2 v = *reinterpret_cast<const double2*>(rank_partial + index[u]);
        sums[u].x += v.x, sums[u].y += v.y;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int e = e0 + u * kThreadCount;
      const int64_t token = token0 + e / kRowPairs, n = row0 + 2 * (e % kRowPairs);
      if (e < last && token < p.m && n < p.n)
        store_output_pair(p, token, n, sums[u].x, sums[u].y, plain_aligned);
    }
  }
  cluster_arrive_relaxed_and_wait();  // shared memory stays alive until the others have read it
}

// The exact path's contribution of K tile `tile` (this lane's weights `raw`, its record) added to
// exact[], which starts at zero the first time (any_exact).
template <int kTokens, bool kRecordInWorkspace, bool kFast = false>
__device__ __forceinline__ void add_exact_tile(int tile, int blocks, const WeightRaw& raw,
                                               const uint8_t* activation_record,
                                               double (&exact)[kTokens / 2], bool& any_exact) {
  if (!any_exact) {
    for (int i = 0; i < kTokens / 2; ++i) exact[i] = 0.0;
    any_exact = true;
  }
  const int valid = blocks - 4 * tile < 4 ? blocks - 4 * tile : 4;
  exact_tile<kTokens, kRecordInWorkspace, kFast>(
      raw.g, raw.h, raw.scales_g, raw.scales_h, activation_record,
      activation_record + ActivationRecord<kTokens>::kExponentOffset, valid, exact);
}

// kStaged: the K tiles' activation records were written once for the call by
// stage_activations_kernel (records: tile i at i * ActivationRecord::kBytes); thread 0 copies them
// into a ring of kStagedSlots with bulk copies, kStagedSlots - 1 tiles ahead. Otherwise the CTA
// converts each tile's activations itself into a two-slot ring while the previous tile's MMAs run.
constexpr int kStagedSlots = 4;
template <bool kStaged>
constexpr int kSlotsOf = kStaged ? kStagedSlots : 2;

// Deep kernels (up to 64 activation rows): the weights of 4 K tiles ahead in registers instead of
// 2, at two CTAs per SM (up to 255 registers) — for grids that leave at most about two CTAs per
// SM anyway (N = 8192 at two partitions: 256 CTAs), where the weight stream of 8 warps per SM
// with 2 tiles each in flight reads well below the copy bandwidth (bench/skinny_load_pattern.cu:
// 57-66% of a contiguous read at 8192 x 28672, two partitions). H100, prepared B, us, 2 / 4 tiles
// ahead: 32 x 8192 x 28672 70.2 / 65.3, 16 x 8192 x 8192 22.4 / 21.2, 32 x 8192 x 8192 24.6 /
// 23.5, 64 x 8192 x 8192 28.1 / 27.5; with 896 CTAs (16 x 28672 x 8192, two per SM then) 56.5 /
// 63.4, so only where the grid has at most two CTAs per SM (launch_gemm).
// Partitions of 8 K tiles gained nothing (H100: 64 x 2880 x 4096, 180 CTAs, 12.6 -> 12.9 us);
// every gain above had 32 or more.
constexpr int kMinDeepTiles = 16;
template <bool kDeep>
constexpr int kLeadOf = kDeep ? 4 : 2;  // weight K tiles loaded ahead into registers
// CTAs per SM as a register bound: 4 up to 16 activation rows, 3 from 32 (168 registers);
// 128 activation rows and the deep kernels: two CTAs of up to 255 registers (at 128 rows 64 int32
// sums, 64 fp32 accumulators).
template <int kTokens, bool kDeep>
constexpr int kSkinnyCtasPerSm = kDeep || kTokens == 128 ? 2 : (kTokens >= 32 ? 3 : 4);

// kFast (fast accumulation; 128 staged activation rows only): FP8 e4m3 as in the two-token-tile
// kernel — the weight rows folded once for the CTA's K tiles (fast_row_bases), the records per
// chunk of K tiles, one e4m3 wgmma per K slice and one FFMA per accumulator and tile.
template <int kTokens, bool kTiled, bool kStaged, bool kFast = false, bool kDeep = false>
__global__ void __launch_bounds__(kThreads, (kSkinnyCtasPerSm<kTokens, kDeep>))
    gemm_skinny_kernel(const GemmProblem p, int tiles_per_split, const uint8_t* records,
                       uint32_t all_ones) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kSlots = kSlotsOf<kStaged>;
  using S = Smem<kTokens, kSlots>;
  using R = ActivationRecord<kTokens>;
  constexpr int kAcc = kTokens / 2;
  constexpr bool kSigned = kSignedWeights<kTokens>;
  extern __shared__ __align__(1024) uint8_t smem[];
  // The next call's activation staging (launched early) may start while this kernel runs; it
  // waits for this grid before it touches memory. H200, back to back: 8 x 5120 x 2880 10.8 ->
  // 9.9 us, 8 x 8192 x 8192 23.8 -> 23.2, 16 x 28672 x 8192 68.7 -> 67.7; but with 128-row token
  // tiles (two CTAs of 255 registers per SM) 128 x 8192 x 8192 44.9 -> 48.9, so not there.
  if constexpr (kTokens <= kMaxUnstagedTokens) allow_next_grid();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4;
  const int64_t row0 = int64_t{blockIdx.x} * kRows;
  const int tiles = static_cast<int>(layout::k_tiles(p.k));
  const int tile_begin = static_cast<int>(blockIdx.y) * tiles_per_split;
  const int tile_end = tile_begin + tiles_per_split < tiles ? tile_begin + tiles_per_split : tiles;
  const int blocks = static_cast<int>(p.k / 32);
  const bool a_aligned =
      reinterpret_cast<uintptr_t>(p.a.data) % 16 == 0 && p.a.stride_bytes % 16 == 0;
  const bool a_words = fold::scale_words(p.a);
  const int64_t token0 = token_tile<kTokens>() * kTokens;  // the token tile's first activation row
  // Whether this lane's rows exist (the others are read from valid rows and never stored).
  const bool g_exists = row0 + 16 * warp + g < p.n, h_exists = row0 + 16 * warp + g + 8 < p.n;
  const bool all_rows_exist = row0 + kRows <= p.n;  // CTA-uniform
  const auto record = [&](int slot) { return smem + slot * R::kSlotStride; };

  static_assert(!kFast || (kTokens == kMaxTokens && kStaged && kSigned));
  static_assert(!kDeep || (kTokens <= kMaxUnstagedTokens && !kFast));
  const WeightSource<kTiled> source(p, row0);
  // kLead buffers of weights loaded ahead: tile i is converted from buffer i % kLead, which then
  // loads tile i + kLead; the loop is unrolled by four tiles so the buffers stay in registers.
  // A prepared B's next loads (tile + kLead) from a cursor.
  constexpr int kLead = kLeadOf<kDeep>;
  static_assert(4 % kLead == 0);  // the unrolled steps' buffers, ahead[step % kLead]
  WeightSource<kTiled> cursor = source;
  if constexpr (kTiled) cursor.advance(tile_begin + kLead);
  WeightRaw ahead[kLead] = {};
#pragma unroll
  for (int i = 0; i < kLead; ++i)
    if (tile_begin + i < tile_end) ahead[i] = source.load(tile_begin + i);
  // kFast: this lane's rows' bases for the CTA's K tiles, and whether the warp's existing rows all
  // fit the window (else its tiles take the exact path).
  fold::FastRow fast_g{}, fast_h{};
  bool warp_fits = false;
  if constexpr (kFast) {
    fast_row_bases(source, tile_begin, tile_end, fast_g, fast_h);
    warp_fits = __all_sync(0xFFFFFFFFu, (!g_exists || fast_g.ok) && (!h_exists || fast_h.ok));
  }

  ActivationItem<kTokens> items[kStaged ? 1 : ActivationShare<kTokens>::kItems];
  ActivationRaw<kTokens> act;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S::kBarrierOffset);
  // Thread 0 copies tile's record into its slot, (tile - tile_begin) % kSlots (staged).
  const auto copy_record = [&](int tile, int slot) {
    pipeline::arrive_expect_tx(&full[slot], R::kBytes);
    pipeline::bulk_load(record(slot),
                        records + record_offset<kTokens>(token_tile<kTokens>(), tiles, tile),
                        R::kBytes, &full[slot]);
  };
  if constexpr (kStaged) {
    if (threadIdx.x == 0) {
      for (int i = 0; i < kSlots; ++i) pipeline::init(&full[i], 1);
      pipeline::fence_init();
    }
    __syncthreads();
    if (threadIdx.x == 0)
      for (int tile = tile_begin; tile < tile_end && tile < tile_begin + kSlots; ++tile)
        copy_record(tile, tile - tile_begin);
  } else {
#pragma unroll
    for (int i = 0; i < ActivationShare<kTokens>::kItems; ++i) items[i].init(p, i, token0);
    if (tile_begin < tile_end) {
      load_activations<kTokens>(items, tile_begin, blocks, a_aligned, a_words, act);
      store_activations<kTokens>(items, act, record(0));
      if (tile_begin + 1 < tile_end)
        load_activations<kTokens>(items, tile_begin + 1, blocks, a_aligned, a_words, act);
    }
    wgmma::fence_shared_for_async();
  }

  float fast[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) fast[i] = 0.0f;
  double exact[kAcc];  // local memory, touched only by the exact path
  bool any_exact = false;
  // w+ . a and w- . a of the tile (kFast: the tensor cores' fp32 sum of the tile).
  std::conditional_t<kFast, float, int32_t> sums_pos[kAcc];
  int32_t sums_neg[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) sums_pos[i] = 0, sums_neg[i] = 0;
  float2 token_factors[kFast ? kTokens / 8 : 1];  // kFast: the current chunk's

  // The staged 64-row kernel: a warp that meets a tile off the fast path finishes the loop first
  // and then redoes those tiles exactly from the records in the workspace. The exact path's call
  // inside the loop made ptxas keep values in local memory across every iteration (104-160 bytes
  // spilled at three CTAs per SM, none without the call). H200, typical data: 64 x 28672 x 8192
  // 98.9 -> 91.2 us prepared, 107.8 -> 99.7 plain; with wide scales (most tiles exact) 5-7%
  // slower. Elsewhere deferring spilled more.
  constexpr bool kDeferExact = kStaged && kTokens == kMaxUnstagedTokens;
  bool deferred_exact = false;  // warp-uniform

  // Fast path for the warp: its existing rows fold (their bases and whether they fold), every
  // activation row folds, and fp32 holds the products for the bases present (the record's range).
  // Where every row of the CTA exists (a uniform branch), one test of both rows: their shifts
  // or-ed, their smaller base against need, the larger against allow (at most
  // kMaxScaledTileSumBase, so it also covers fold_row's base <= 251) — a third of the
  // instructions of the per-row test.
  const auto warp_fast = [&](const BaseRange& bases, const fold::FoldedRow& row_g,
                             const fold::FoldedRow& row_h) {
    if (all_rows_exist) {
      const int lo = static_cast<int>(min(row_g.base, row_h.base)),
                hi = static_cast<int>(max(row_g.base, row_h.base));
      return __all_sync(0xFFFFFFFFu, ((row_g.shifts | row_h.shifts) & 0xFCFCFCFCu) == 0 &&
                                         lo >= bases.need && hi <= bases.allow);
    }
    const auto in_range = [&](uint32_t base) {
      return static_cast<int>(base) >= bases.need && static_cast<int>(base) <= bases.allow;
    };
    const bool lane_ok = (!g_exists || (row_g.ok && in_range(row_g.base))) &&
                         (!h_exists || (row_h.ok && in_range(row_h.base)));
    return __all_sync(0xFFFFFFFFu, lane_ok);
  };
  // The exact path for K tile `tile` with its record (in_workspace: the record in global memory).

  const uint64_t slot0_descriptor = wgmma::descriptor(wgmma::shared_address(smem));
  // slot: (tile - tile_begin) % kSlots; phase: the ring's round parity, ((tile - tile_begin) /
  // kSlots) & 1 (staged only). Both are constants in the main loop's unrolled steps.
  // may_be_ragged (std::bool_constant): whether the tile may be a prepared B's last partial one,
  // whose padding blocks' scales valid_scales sets (the main loop's tiles never are).
  const auto step = [&](auto may_be_ragged, int tile, WeightRaw& buffer, int slot, uint32_t phase) {
    const uint8_t* activation_record = record(slot);
    const auto convert = [&](const WeightRaw& raw) {
      return kFast ? convert_weights_fast(raw, fast_g.base, fast_h.base)
                   : convert_weights<kSigned>(raw, all_ones);
    };
    WeightTile w = decltype(may_be_ragged)::value ? convert(source.valid_scales(buffer, tile))
                                                  : convert(buffer);
    if constexpr (kTiled) {
      if (tile + kLead < tile_end) buffer = cursor.load(0);
      cursor.advance(1);
    } else {
      if (tile + kLead < tile_end) buffer = source.load(tile + kLead);
    }
    if constexpr (kStaged) pipeline::wait(&full[slot], phase);
    // Staged: every warp is done with the previous tile's slot, which thread 0 refills. Else: the
    // slot's activations are stored and every warp is done with the other slot.
    __syncthreads();
    if constexpr (kStaged) {
      if (threadIdx.x == 0 && tile > tile_begin && tile - 1 + kSlots < tile_end) {
        wgmma::fence_shared_for_async();  // the exact path's generic reads of it come first
        copy_record(tile - 1 + kSlots, (slot + kSlots - 1) % kSlots);
      }
    }

    wgmma::fence_operands(sums_pos);
    if constexpr (!kSigned) wgmma::fence_operands(sums_neg);
    wgmma::fence();
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      // The descriptor's start address counts 16-byte units (shared memory < 2^18 bytes: no carry).
      const uint64_t activations =
          slot0_descriptor + static_cast<uint32_t>(slot) * (R::kSlotStride / 16) + 2 * q;
      if constexpr (kFast)
        wgmma::mma_e4m3_m64n128k32_rs(sums_pos, w.words[q].positive, activations, q > 0);
      else
        mma_rs<kTokens>(sums_pos, w.words[q].positive, activations, q > 0);
      if constexpr (!kSigned) mma_rs<kTokens>(sums_neg, w.words[q].negative, activations, q > 0);
    }
    wgmma::commit();

    if constexpr (!kStaged) {
      // The next tile's activations into the other slot while the MMAs run.
      if (tile + 1 < tile_end) {
        store_activations<kTokens>(items, act, record(slot ^ 1));
        if (tile + 2 < tile_end)
          load_activations<kTokens>(items, tile + 2, blocks, a_aligned, a_words, act);
      }
      wgmma::fence_shared_for_async();
    }

    const float* factor = reinterpret_cast<const float*>(activation_record + R::kFactorOffset);
    bool fast_path;
    if constexpr (kFast) {
      // The warp's rows fit their window, the record's rows theirs; the factors are the chunk's.
      fast_path = warp_fits && allowed_bases<kTokens, 1>(activation_record).need == 0;
      if (tile == tile_begin || tile % kFastChunkTiles == 0)
        load_token_factors<kTokens>(factor, token_factors);
    } else {
      constexpr int kRanges = kStaged ? 1 : R::kSummaries;  // a staged record's are reduced
      fast_path = warp_fast(allowed_bases<kTokens, kRanges>(activation_record), w.row_g, w.row_h);
    }

    wgmma::wait<0>();
    wgmma::fence_operands(sums_pos);
    if constexpr (!kSigned) wgmma::fence_operands(sums_neg);
      // The fragments stay untouched until the MMAs that read them are done.
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      wgmma::fence_operands(w.words[q].positive);
      if constexpr (!kSigned) wgmma::fence_operands(w.words[q].negative);
    }
    // Or-ed rather than set in the slow branch: set there, ptxas keeps the flag in local memory
    // across the unrolled loop's four steps.
    if constexpr (kDeferExact) deferred_exact |= !fast_path;  // the tile is redone after the loop
    if (fast_path) {
      if constexpr (kFast)
        promote_fast<kTokens>(fast, sums_pos, token_factors);
      else
        promote_tile<kTokens, kSigned>(fast, sums_pos, sums_neg, w.row_g.base, w.row_h.base,
                                       factor);
    } else if constexpr (!kDeferExact) {
      // The tile's weights again (the registers hold tile + kLead now; this path is rare).
      add_exact_tile<kTokens, false, kFast>(tile, blocks,
                                            source.valid_scales(source.load(tile), tile),
                                            activation_record, exact, any_exact);
    }
  };
  // Unrolled by four tiles so that each step's slot (its record's address and descriptor) and
  // phase are constants; the weight buffers alternate. The staged ring has four slots, so its
  // phase flips once per iteration; the two-slot ring has no phase.
  // A prepared B's last partial K tile is left to the steps after it, which check for it.
  static_assert(kSlots == 4 || (kSlots == 2 && !kStaged));
  constexpr std::false_type whole;
  constexpr std::true_type checked;
  const int whole_end = source.partial(tile_end - 1) ? tile_end - 1 : tile_end;
  int tile = tile_begin;
  uint32_t phase = 0;
  for (; tile + 3 < whole_end; tile += 4, phase ^= 1u) {
    step(whole, tile, ahead[0], 0, phase);
    step(whole, tile + 1, ahead[1], 1 % kSlots, phase);
    step(whole, tile + 2, ahead[2 % kLead], 2 % kSlots, phase);
    step(whole, tile + 3, ahead[3 % kLead], 3 % kSlots, phase);
  }
  // At most four tiles left (three whole ones and a partial one): the next round's slots.
  if (tile < tile_end) step(checked, tile, ahead[0], 0, phase);
  if (tile + 1 < tile_end) step(checked, tile + 1, ahead[1], 1 % kSlots, phase);
  if (tile + 2 < tile_end) step(checked, tile + 2, ahead[2 % kLead], 2 % kSlots, phase);
  if (tile + 3 < tile_end) step(checked, tile + 3, ahead[3 % kLead], 3 % kSlots, phase);
  if constexpr (kDeferExact) {
    if (deferred_exact) {
      // The same decision as in the loop, from the same weights and records.
      for (int t2 = tile_begin; t2 < tile_end; ++t2) {
        const uint8_t* activation_record =
            records + record_offset<kTokens>(token_tile<kTokens>(), tiles, t2);
        const WeightRaw raw = source.valid_scales(source.load(t2), t2);
        const fold::FoldedRow fg = fold::fold_row(raw.scales_g), fh = fold::fold_row(raw.scales_h);
        if (!warp_fast(allowed_bases<kTokens, 1>(activation_record), fg, fh))
          add_exact_tile<kTokens, true>(t2, blocks, raw, activation_record, exact, any_exact);
      }
    }
  }

  // The CTA's sums as doubles: partial[token][row], over the ring (every warp is done with it).
  __syncthreads();
  double* partial = reinterpret_cast<double*>(smem);
  // kFast: the weight rows' factors 2^(base - 129), applied to their fp32 sums here.
  double factor_g = 1.0, factor_h = 1.0;
  if constexpr (kFast)
    factor_g = block_scale(fast_g.base, 127), factor_h = block_scale(fast_h.base, 127);
  write_partials<kTokens>(partial, 0, fast, exact, any_exact, factor_g, factor_h);
  finish_tile<kTokens, kThreads>(p, partial, token0, row0);
#else
  (void)p;
  (void)tiles_per_split;
  (void)records;
  (void)all_ones;
  __trap();
#endif
}

// M = 129..256 on a prepared B: two token tiles share one weight conversion. The one-warpgroup
// kernel converts its weights again for each 128-row token tile, and each CTA's chain (convert,
// MMAs, wait, promote) runs with two warps per scheduler (255 registers): at 256 x 8192 x 8192 it
// issued 516 instructions per warp and K tile at 0.45 per cycle, the tensor cores busy a quarter
// of the time.
// Here a CTA of three warpgroups converts once for 256 activation rows. The converter warpgroup
// (the lanes and loads of the one-warpgroup kernel) writes each K tile's 64 weight rows folded as
// signed int8 — the wgmmas' A operand in shared memory, in the K slots of the register fragments,
// 128-byte swizzled — each row's base, and per warp its rows' range of bases, into a ring of
// stages; its thread 0 bulk-copies the two token tiles' activation records of the tile into the
// same stage. Two consumer warpgroups (token tiles 0 and 1) each issue the tile's four m64n128k32
// wgmmas from shared memory and promote as above. Numerics, exact path and the partitions'
// reduction are the one-warpgroup kernel's.
// kFast (A4W4_MATH_FAST_ACCUM): both operands in FP8 e4m3 (fold::e4m3_table). Each weight row is
// folded once for the CTA's K tiles, relative to its largest scale there (the converters scan the
// rows' scales first), so its factor is constant and applied when the sums are written; the
// activation records fold each row per chunk of kFastChunkTiles K tiles (store_activations<
// kTokens, true>), so the consumers load their factors once per chunk. The tile's
// e4m3 wgmmas accumulate in the tensor cores (about 14 significant bits), and the promotion is
// one FFMA per accumulator with the activation rows' factors, against the int8 path's three
// instructions. A warp whose rows do not fit the window over the CTA's K tiles, or a tile whose
// record has a row that does not, takes the exact path (exact_tile on the e4m3 record).
constexpr int kSharedStages = 4;
constexpr int kConsumers = 2;
constexpr int kSharedThreads = kThreads * (1 + kConsumers);
constexpr int kSharedTokens = kConsumers * kMaxTokens;  // activation rows per CTA
// With fast accumulation, M up to 512 on a prepared B: groups of kSharedTokens rows (the grid's
// z), each converting the weights again. H200, against cuda.int8_128x128 (exact in either mode):
// 384 x 8192 x 8192 86 against 131 us, 512 x 8192 x 8192 98 against 132; at 1024 rows 195 against
// 201, but 671 against 615 at 1024 x 28672 x 8192 and 643 against 564 at 1024 x 8192 x 28672.
// Exact mode stops at one group (the int8 path's promotion costs more than the family's).
constexpr int kMaxSharedFastTokens = 2 * kSharedTokens;
// setmaxnreg: the converters give registers to the consumers (64 int32 sums, 64 fp32
// accumulators); the launch's 168 per thread (65536 / 384) is the pool.
constexpr int kConverterRegisters = 72, kConsumerRegisters = 216;
static_assert(kThreads * kConverterRegisters + kConsumers * kThreads * kConsumerRegisters <=
              kSharedThreads * 168);
// A warp's summary of a K tile (bits 0-7 its rows' smallest base, 8-15 the largest) when one of
// its rows does not fold: a largest base above every allowed one.
constexpr uint32_t kWarpNotFolded = 0xFFFFu;

struct SharedSmem {
  using Record = ActivationRecord<kMaxTokens>;
  static constexpr int kWeightBytes = kRows * 128;  // one K tile of the 64 rows, int8
  static constexpr int kStageBytes = kWeightBytes + kConsumers * Record::kSlotStride;
  static constexpr int kRingBytes = kSharedStages * kStageBytes;
  static constexpr int kPartialBytes = kSharedTokens * kPartialStride * 8;
  static constexpr int kBasesOffset =
      ((kRingBytes > kPartialBytes ? kRingBytes : kPartialBytes) + 15) / 16 * 16;
  static constexpr int kWarpBasesOffset = kBasesOffset + kSharedStages * kRows * 4;
  // The converters' raw stages (cp.async): per thread its codes of rows g, g + 8 and their scale
  // words, each part thread-major (16-byte reads without bank conflicts).
  static constexpr int kRawOffset = kWarpBasesOffset + kSharedStages * 4 * 4;
  static constexpr int kRawCodesG = 0, kRawCodesH = kThreads * 16, kRawScales = kThreads * 32;
  static constexpr int kRawStageBytes = kThreads * 40;
  static constexpr int kBarrierOffset = kRawOffset + kSharedStages * kRawStageBytes;
  static constexpr int kBytes = kBarrierOffset + 2 * kSharedStages * 8;
  static_assert(kStageBytes % 1024 == 0 && Record::kSlotStride % 1024 == 0);
};

// Writes this converter lane's K tile (rows g and g + 8 of its warp's 16, block t) into the
// stage's weight rows: word q's low and high 16 bits go to K slots 32 q + 4 t and 32 q + 16 + 4 t
// (slot_byte), where the activations of the same elements are. convert(h, codes): eight codes of
// row g (h = 0) or g + 8 (h = 1) as the MMA's bytes, the low four codes' in .x.
template <typename Convert>
__device__ __forceinline__ void store_weight_rows(const WeightRaw& w, uint8_t* weights,
                                                  const Convert& convert) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4, g = lane / 4, t = lane % 4;
  const uint32_t words[2][4] = {{w.g.x, w.g.y, w.g.z, w.g.w}, {w.h.x, w.h.y, w.h.z, w.h.w}};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = 16 * warp + g + 8 * h;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint2 bytes = convert(h, words[h][q]);
      *reinterpret_cast<uint32_t*>(weights + wgmma::swizzled_offset(row, slot_byte(t, q, 0))) =
          bytes.x;
      *reinterpret_cast<uint32_t*>(weights + wgmma::swizzled_offset(row, slot_byte(t, q, 1))) =
          bytes.y;
    }
  }
}

// The int8 path: folded into signed int8 by each row's shifts.
__device__ __forceinline__ void store_folded_rows(const WeightRaw& w, uint8_t* weights,
                                                  const fold::FoldedRow& fg,
                                                  const fold::FoldedRow& fh) {
  const int t = threadIdx.x % 4;
  const fold::FoldedRow* rows[2] = {&fg, &fh};
  uint32_t lo[2], hi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t shift = rows[h]->ok ? (rows[h]->shifts >> (8 * t)) & 0xFFu : 0u;
    lo[h] = kMagnitudesLo << shift, hi[h] = kMagnitudesHi << shift;
  }
  store_weight_rows(w, weights, [&](int h, uint32_t codes) {
    return make_uint2(e2m1x4_to_s8x4(codes, lo[h], hi[h]),
                      e2m1x4_to_s8x4(codes >> 16, lo[h], hi[h]));
  });
}

// kFast: as FP8 e4m3, each row relative to its base for the CTA's K tiles (a row outside the
// window is clamped to it: its warp takes the exact path).
__device__ __forceinline__ void store_fast_rows(const WeightRaw& w, uint8_t* weights,
                                                uint32_t base_g, uint32_t base_h) {
  const int t = threadIdx.x % 4;
  const uint32_t scales[2] = {w.scales_g, w.scales_h}, bases[2] = {base_g, base_h};
  fold::E4m3Table tables[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tables[h] = fast_block_table(scales[h], t, bases[h]);
  }
  store_weight_rows(w, weights, [&](int h, uint32_t codes) {
    return e2m1x8_to_e4m3x8(codes, tables[h].lo, tables[h].hi);
  });
}

template <bool kFast>
__global__ void __launch_bounds__(kSharedThreads, 1)
    gemm_skinny_shared_kernel(const GemmProblem p, int tiles_per_split, const uint8_t* records) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = SharedSmem;
  using R = ActivationRecord<kMaxTokens>;
  constexpr int kAcc = kMaxTokens / 2;
  extern __shared__ __align__(1024) uint8_t smem[];
  const int role = static_cast<int>(threadIdx.x) / kThreads;  // 0: converter, 1 + c: consumer c
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4, g = lane / 4, t = lane % 4;
  const int64_t row0 = int64_t{blockIdx.x} * kRows;
  const int tiles = static_cast<int>(layout::k_tiles(p.k));
  const int tile_begin = static_cast<int>(blockIdx.y) * tiles_per_split;
  const int tile_end = tile_begin + tiles_per_split < tiles ? tile_begin + tiles_per_split : tiles;
  // The grid's z: groups of kSharedTokens activation rows (more than one with fast accumulation
  // only); the last group may hold one token tile.
  const int64_t token0 = int64_t{blockIdx.z} * kSharedTokens;
  const int token_tile0 = static_cast<int>(blockIdx.z) * kConsumers;
  const int present = p.m - token0 > kMaxTokens ? kConsumers : 1;  // token tiles in the group

  uint32_t* row_bases = reinterpret_cast<uint32_t*>(smem + S::kBasesOffset);
  uint32_t* warp_bases = reinterpret_cast<uint32_t*>(smem + S::kWarpBasesOffset);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S::kBarrierOffset);
  uint64_t* empty = full + kSharedStages;
  const auto stage = [&](int s) { return smem + s * S::kStageBytes; };
  const auto record = [&](int s, int c) { return stage(s) + S::kWeightBytes + c * R::kSlotStride; };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kSharedStages; ++s) {
      pipeline::init(&full[s], kThreads + 1);  // the converters, and thread 0's expected bytes
      pipeline::init(&empty[s], kConsumers * kThreads);  // each consumer thread
    }
    pipeline::fence_init();
  }
  __syncthreads();

  // The ring is used round by round, kSharedStages tiles a round: stage s holds tile first + s,
  // and the loops are unrolled over the stages so that stage addresses are constants.
  const auto rounds = [&](auto&& per_tile) {
    for (int first = tile_begin; first < tile_end; first += kSharedStages) {
      const uint32_t round = static_cast<uint32_t>((first - tile_begin) / kSharedStages);
#pragma unroll
      for (int s = 0; s < kSharedStages; ++s)
        if (first + s < tile_end) per_tile(first + s, s, round & 1);
    }
  };

  if (role == 0) {
    pipeline::shrink_registers<kConverterRegisters>();
    const WeightSource<true> source(p, row0);
    const bool g_exists = row0 + 16 * warp + g < p.n, h_exists = row0 + 16 * warp + g + 8 < p.n;
    // The weights come kSharedStages tiles ahead through raw stages of this thread's own: tile
    // first + s in raw stage s, refilled once the tile is converted.
    uint8_t* const raw = smem + S::kRawOffset;
    const auto codes_g = [&](int s) {
      return reinterpret_cast<uint4*>(raw + s * S::kRawStageBytes + S::kRawCodesG) + threadIdx.x;
    };
    const auto codes_h = [&](int s) {
      return reinterpret_cast<uint4*>(raw + s * S::kRawStageBytes + S::kRawCodesH) + threadIdx.x;
    };
    const auto scales_gh = [&](int s) {
      return reinterpret_cast<uint2*>(raw + s * S::kRawStageBytes + S::kRawScales) + threadIdx.x;
    };
    const auto copy_tile = [&](int tile, int s) {
      if (tile < tile_end) source.copy(tile, codes_g(s), codes_h(s), scales_gh(s));
      commit_copies();  // an empty group past the end keeps the group count uniform
    };
    for (int s = 0; s < kSharedStages; ++s) copy_tile(tile_begin + s, s);
    // kFast: each row's base over the CTA's K tiles, for every tile; per warp whether all its
    // existing rows fit the window (warp_bases[warp]: 1 or 0).
    fold::FastRow fast_g{}, fast_h{};
    if constexpr (kFast) {
      fast_row_bases(source, tile_begin, tile_end, fast_g, fast_h);
      if (t == 0) {
        row_bases[16 * warp + g] = fast_g.base;
        row_bases[16 * warp + g + 8] = fast_h.base;
      }
      const bool fits =
          __all_sync(0xFFFFFFFFu, (!g_exists || fast_g.ok) && (!h_exists || fast_h.ok));
      if (lane == 0) warp_bases[warp] = fits ? 1u : 0u;
    }
    rounds([&](int tile, int s, uint32_t parity) {
      wait_copies<kSharedStages - 1>();
      const uint2 scales = *scales_gh(s);
      const WeightRaw w =
          source.valid_scales(WeightRaw{*codes_g(s), *codes_h(s), scales.x, scales.y}, tile);
      // The int8 path folds each tile: the rows' bases and the warp's summary for the consumers'
      // fast-path check (its existing rows' smallest and largest base, or kWarpNotFolded where one
      // of them does not fold).
      fold::FoldedRow fg{}, fh{};
      uint32_t summary = 0;
      if constexpr (!kFast) {
        fg = fold::fold_row(w.scales_g), fh = fold::fold_row(w.scales_h);
        const uint32_t lo = __reduce_min_sync(
            0xFFFFFFFFu, min(g_exists ? fg.base : 0xFFu, h_exists ? fh.base : 0xFFu));
        const uint32_t hi =
            __reduce_max_sync(0xFFFFFFFFu, max(g_exists ? fg.base : 0u, h_exists ? fh.base : 0u));
        const bool folds = __all_sync(0xFFFFFFFFu, (!g_exists || fg.ok) && (!h_exists || fh.ok));
        summary = folds ? hi << 8 | lo : kWarpNotFolded;
      }
      pipeline::wait(&empty[s], parity ^ 1);
      if (threadIdx.x == 0) {
        wgmma::fence_shared_for_async();  // the consumers' generic reads of the stage come first
        pipeline::arrive_expect_tx(&full[s], present * R::kBytes);
        for (int c = 0; c < present; ++c)
          pipeline::bulk_load(record(s, c),
                              records + record_offset<kMaxTokens>(token_tile0 + c, tiles, tile),
                              R::kBytes, &full[s]);
      }
      if constexpr (kFast) {
        store_fast_rows(w, stage(s), fast_g.base, fast_h.base);
      } else {
        store_folded_rows(w, stage(s), fg, fh);
        if (t == 0) {
          row_bases[s * kRows + 16 * warp + g] = fg.base;
          row_bases[s * kRows + 16 * warp + g + 8] = fh.base;
        }
        if (lane == 0) warp_bases[s * 4 + warp] = summary;
      }
      wgmma::fence_shared_for_async();
      pipeline::arrive(&full[s]);
      copy_tile(tile + kSharedStages, s);  // w's registers hold the tile: the raw stage is free
    });
    wait_copies<0>();
    __syncthreads();  // the consumers are done with the ring: it holds the partial sums next
  } else {
    pipeline::grow_registers<kConsumerRegisters>();
    const int c = role - 1;
    float fast[kAcc];
    double exact[kAcc];  // local memory, touched only by the exact path
    bool any_exact = false;
    // A consumer whose token tile is past M (the last group's second) only releases the stages.
    // As a branch it also keeps ptxas from placing accumulators in local memory (148 bytes
    // spilled around the loop without it).
    if (c < present) {
#pragma unroll
      for (int i = 0; i < kAcc; ++i) fast[i] = 0.0f;
      // The tile's sums: exact int32 (int8 path) or the tensor cores' fp32 (kFast).
      std::conditional_t<kFast, float, int32_t> sums[kAcc];
#pragma unroll
      for (int i = 0; i < kAcc; ++i) sums[i] = 0;
      float2 token_factors[kFast ? kMaxTokens / 8 : 1];  // kFast: the current chunk's
      // Descriptors differ only in their start address (16-byte units, shared memory < 2^18
      // bytes: no carry), so 32-bit offsets of stage 0's.
      const uint64_t weights0 = wgmma::descriptor(wgmma::shared_address(stage(0)));
      const uint32_t activations0 =
          static_cast<uint32_t>(wgmma::descriptor(wgmma::shared_address(record(0, c))));
      const auto with_start = [&](uint32_t start) {
        return (weights0 & 0xFFFFFFFF00000000ull) | start;
      };
      rounds([&](int tile, int s, uint32_t parity) {
        pipeline::wait(&full[s], parity);
        wgmma::fence_operands(sums);
        wgmma::fence();
        constexpr uint32_t kStageUnits = S::kStageBytes / 16;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const uint64_t a = with_start(static_cast<uint32_t>(weights0) + s * kStageUnits + 2 * q);
          const uint64_t b = with_start(activations0 + s * kStageUnits + 2 * q);
          if constexpr (kFast)
            wgmma::mma_e4m3_m64n128k32(sums, a, b, q > 0);
          else
            wgmma::mma_s8_m64n128k32(sums, a, b, q > 0);
        }
        wgmma::commit();
        const uint8_t* activation_record = record(s, c);
        const float* factors = reinterpret_cast<const float*>(activation_record + R::kFactorOffset);
        bool fast_path;
        uint32_t base_g = 0, base_h = 0;
        if constexpr (kFast) {
          // The warp's rows fit their window over the CTA's K tiles, the record's rows theirs;
          // the rows' factors are the chunk's (loaded at its first tile of this partition).
          fast_path =
              warp_bases[warp] != 0 && allowed_bases<kMaxTokens, 1>(activation_record).need == 0;
          if (tile == tile_begin || tile % kFastChunkTiles == 0)
            load_token_factors<kMaxTokens>(factors, token_factors);
        } else {
          const BaseRange bases = allowed_bases<kMaxTokens, 1>(activation_record);
          const uint32_t summary = warp_bases[s * 4 + warp];
          fast_path = static_cast<int>(summary & 0xFFu) >= bases.need &&
                      static_cast<int>(summary >> 8) <= bases.allow;
          base_g = row_bases[s * kRows + 16 * warp + g];
          base_h = row_bases[s * kRows + 16 * warp + g + 8];
        }
        wgmma::wait<0>();
        wgmma::fence_operands(sums);
        if (fast_path) {
          if constexpr (kFast)
            promote_fast<kMaxTokens>(fast, sums, token_factors);
          else
            promote_tile<kMaxTokens, true>(fast, sums, sums, base_g, base_h, factors);
        } else {
          // The tile's weights again from global memory (this path is rare).
          const WeightSource<true> source(p, row0);
          add_exact_tile<kMaxTokens, false, kFast>(tile, static_cast<int>(p.k / 32),
                                                   source.valid_scales(source.load(tile), tile),
                                                   activation_record, exact, any_exact);
        }
        // Every thread: the exact path's reads of the record are each thread's own.
        pipeline::arrive(&empty[s]);
      });
    } else {
      rounds([&](int, int s, uint32_t parity) {
        pipeline::wait(&full[s], parity);
        pipeline::arrive(&empty[s]);
      });
    }
    // The CTA's sums as doubles: partial[token][row], over the ring once both consumers are done
    // with it (the converters' last stage has been consumed, every bulk copy has landed). Written
    // here, so that no accumulator is live where the converters' branch joins (their registers
    // are fewer).
    __syncthreads();  // the converters' is at the end of their loop
    // kFast: the weight rows' factors 2^(base - 129) (the base of the CTA's K tiles; a warp on the
    // exact path has no fp32 sums). A partition without K tiles has no sums, and its bases were
    // never handed over through a stage: not read.
    double factor_g = 1.0, factor_h = 1.0;
    if (kFast && tile_begin < tile_end) {
      // 2^(base - 129) = block_scale(base, 127) (bases are at most 249: never the NaN byte).
      factor_g = block_scale(row_bases[16 * warp + g], 127);
      factor_h = block_scale(row_bases[16 * warp + g + 8], 127);
    }
    if (c < present)  // the other's rows are past M: never stored
      write_partials<kMaxTokens>(reinterpret_cast<double*>(smem), c * kMaxTokens, fast, exact,
                                 any_exact, factor_g, factor_h);
  }
  finish_tile<kSharedTokens, kSharedThreads>(p, reinterpret_cast<double*>(smem), token0, row0);
#else
  (void)p;
  (void)tiles_per_split;
  (void)records;
  __trap();
#endif
}

// The staging kernel's threads: one per (row, block) unit from 32 rows up (the GEMM's 128 threads
// take two or four units each at 64 and 128 rows: H200, 128 threads per CTA staged a 256 x 8192
// record set in 7.7 us for fast accumulation, each warp a chain of 2,000 instructions).
template <int kTokens>
constexpr int kStagingThreads = kTokens * 4 > kThreads ? kTokens * 4 : kThreads;

// One CTA per (K tile, token tile): the tile's activation record, as the GEMM's CTAs would convert
// it, written to records once for the call (token tile z's records after the previous tile's).
// (Launching the GEMM as a programmatic dependent of this grid, its weights' first loads
// overlapping it, measured 1-1.5 us faster at M = 16 but 9 us slower at M = 64 x 8192 x 8192 on the
// H200: not done.)
template <int kTokens, bool kFast = false>
__global__ void __launch_bounds__(kStagingThreads<kTokens>)
    stage_activations_kernel(const GemmProblem p, uint8_t* records) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using R = ActivationRecord<kTokens>;
  constexpr int kCount = kStagingThreads<kTokens>;
  using Share = ActivationShare<kTokens, kCount>;
  __shared__ __align__(16) uint8_t record[R::kBytes];
  wait_for_previous_grid();  // launched early
  const int tile = static_cast<int>(blockIdx.x);
  const int64_t token0 = int64_t{blockIdx.y} * kTokens;
  ActivationItem<kTokens, kCount> items[Share::kItems];
#pragma unroll
  for (int i = 0; i < Share::kItems; ++i) items[i].init(p, i, token0);
  ActivationRaw<kTokens, kCount> act;
  const bool aligned =
      reinterpret_cast<uintptr_t>(p.a.data) % 16 == 0 && p.a.stride_bytes % 16 == 0;
  const int blocks = static_cast<int>(p.k / 32);
  load_activations<kTokens, kCount>(items, tile, blocks, aligned, fold::scale_words(p.a), act);
  fold::FastRow chunk_rows[kFast ? Share::kItems : 1];
  if constexpr (kFast)
#pragma unroll
    for (int i = 0; i < Share::kItems; ++i)
      chunk_rows[i] = chunk_fast_row(items[i], tile, blocks, fold::scale_words(p.a));
  store_activations<kTokens, kFast, kCount>(items, act, record, chunk_rows);
  __syncthreads();
  if (threadIdx.x == 0) {
    // The GEMM reads the range of weight bases every row allows from need[0] and allow[0].
    const BaseRange bases = allowed_bases<kTokens, R::kSummaries>(record);
    *reinterpret_cast<int*>(record + R::kNeedOffset) = bases.need;
    *reinterpret_cast<int*>(record + R::kAllowOffset) = bases.allow;
  }
  __syncthreads();
  uint4* out =
      reinterpret_cast<uint4*>(records + record_offset<kTokens>(blockIdx.y, gridDim.x, tile));
  for (int i = static_cast<int>(threadIdx.x); i < R::kBytes / 16; i += kCount)
    out[i] = reinterpret_cast<const uint4*>(record)[i];
#else
  (void)p;
  (void)records;
  __trap();
#endif
}

// Token tiles of kTokens activation rows (the grid's z).
template <int kTokens>
int64_t token_tiles(const GemmProblem& p) {
  return (p.m + kTokens - 1) / kTokens;
}

// Column tiles of kRows weight rows (the grid's x).
int64_t column_tiles(const GemmProblem& p) {
  return (p.n + kRows - 1) / kRows;
}

// Workspace bytes of the staged activations: one record per K tile and token tile.
template <int kTokens>
int64_t staged_bytes(const GemmProblem& p) {
  return token_tiles<kTokens>(p) * layout::k_tiles(p.k) * ActivationRecord<kTokens>::kBytes;
}

// The kernel, its dynamic shared memory allowed (once per instantiation and process) before any
// launch or occupancy query.
template <int kTokens, bool kTiled, bool kStaged, bool kFast = false, bool kDeep = false>
auto skinny_kernel() {
  constexpr int kBytes = Smem<kTokens, kSlotsOf<kStaged>>::kBytes;
  static_assert(kBytes <= 227 * 1024);
  const auto kernel = gemm_skinny_kernel<kTokens, kTiled, kStaged, kFast, kDeep>;
  static const cudaError_t attribute =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  check_cuda(attribute, "cudaFuncSetAttribute(gemm_skinny_kernel)");
  return kernel;
}

// CTAs of `kernel` resident at once in clusters of `splits`, asked once per kernel and split
// (`known`: clusters, 0 where not asked yet).
template <typename Kernel>
int64_t cached_resident_ctas(std::atomic<int> (&known)[kMaxSplits + 1], Kernel kernel, int threads,
                             int bytes, int splits, int ordinal) {
  int clusters = known[splits].load(std::memory_order_relaxed);
  if (clusters == 0) {
    clusters = resident_clusters(kernel, splits, threads, bytes, device_info(ordinal).sm_count);
    known[splits].store(clusters, std::memory_order_relaxed);
  }
  return int64_t{clusters} * splits;
}

// CTAs of the kernel resident at once in clusters of `splits` (the GPCs decide where clusters
// fit: on the H200 at four CTAs per SM, 528 CTAs alone but 496 in clusters of 4 or 8).
template <int kTokens, bool kTiled, bool kStaged, bool kFast = false, bool kDeep = false>
int64_t resident_ctas(int splits, int ordinal) {
  static std::atomic<int> known[kMaxSplits + 1];  // clusters; 0: not asked yet
  return cached_resident_ctas(known, skinny_kernel<kTokens, kTiled, kStaged, kFast, kDeep>(),
                              kThreads, Smem<kTokens, kSlotsOf<kStaged>>::kBytes, splits, ordinal);
}

// The 128-row token tiles' split rule (below), for `ctas` CTAs before splitting; resident(s): the
// CTAs resident at once in clusters of s, allowed(s): whether K takes s partitions.
template <typename Resident, typename Allowed>
int splits_for_waves(int64_t ctas, const Resident& resident, const Allowed& allowed) {
  const int64_t slots = resident(1);
  int splits = 1;
  if (ctas <= slots) {
    while (allowed(splits * 2) && ctas * splits * 2 <= resident(splits * 2)) splits *= 2;
    return splits;
  }
  if (2 * (ctas % slots) >= slots || ctas % slots == 0) return 1;
  const auto waves_per_work = [&](int s) {
    return static_cast<double>((ctas * s + slots - 1) / slots) / s;
  };
  for (int next = 2; allowed(next); next *= 2)
    if (waves_per_work(next) < 0.95 * waves_per_work(splits)) splits = next;
  return splits;
}

// K partitions per column tile (a cluster's CTAs): a power of two up to 8 (clusters of 3, 5, 6 or
// 7 CTAs measured slower than both neighbouring powers of two), each partition keeping at least
// 4 K tiles (5 at 64 activation rows).
// - Up to 64 activation rows (one token tile, 3 to 5 CTAs per SM): at least two where K allows.
//   CTAs that finish at different times let the scheduler level the SMs' work, where a grid of one
//   CTA per column tile leaves some SMs a CTA more than others until the end. Then doubling while
//   the grid has fewer than two CTAs per SM and the doubled grid still fits the GPU at once in
//   clusters (a second wave of a few clusters costs more than the doubling gains). H200, prepared
//   B, us, 1 / 2 / 4 splits: 16 x 28672 x 8192 (448 column tiles) 69.0 / 61.4 / 67.6; 32 x 28672 x
//   8192 92.7 / 78.9 / 86.1; 16 x 8192 x 8192 (128 column tiles, 496 CTAs fit in clusters of 4)
//   38.0 / 25.1 / 28.8. At 8 activation rows and long K (12 K tiles or more per partition), four
//   partitions become eight where that grid makes 1.5 waves or more of resident clusters: shorter
//   CTAs level the SMs (4 / 8 splits: 8 x 8192 x 28672 66.3 / 60.1 us, 8 x 8192 x 14336 36.1 /
//   34.1; but 8 x 5120 x 13824, 640 CTAs on 620 slots, 24.4 / 25.8).
// - 128-row token tiles (two CTAs of up to 255 registers per SM, M / 128 of them converting the
//   same weights): while the tiles fit the resident CTAs at once, splits while the split tiles
//   still do; where they do not and their last wave is less than half full (its CTAs then run
//   nearly alone), the split with the fewest waves per unit of work, each doubling gaining more
//   than 5% (the partitions' reduction and pipeline starts). H200: 256 x 10240 x 8192 (320 tiles
//   on 264 slots) 152 -> 124 us at 2 splits; with a fuller last wave splitting lost (128 x 28672 x
//   8192, 448 on 264: 152 -> 164). Starting at two splits, as above, lost 6-10% at 128 x 28672 x
//   8192 and 256 x 8192 x 8192.
template <int kTokens, bool kTiled, bool kStaged, bool kFast = false>
int choose_splits(const GemmProblem& p) {
  const int64_t ctas = column_tiles(p) * token_tiles<kTokens>(p);
  const int64_t tiles = layout::k_tiles(p.k);
  const auto resident = [&](int splits) {
    return resident_ctas<kTokens, kTiled, kStaged, kFast>(splits, p.device.ordinal);
  };
  // At 64 activation rows a partition's start and reduction cost more: at least 5 K tiles each
  // (H200: 64 x 2880 x 4096 took 15.4 us in 8 partitions of 4 tiles, 14.1 in 4 of 8; shapes that
  // split into partitions of 5 or more tiles ran the same).
  constexpr int kMinTiles = kTokens == kMaxUnstagedTokens ? 5 : 4;
  const auto allowed = [&](int splits) {
    return splits <= kMaxSplits && tiles / splits >= kMinTiles;
  };
  if constexpr (kTokens < kMaxTokens) {
    const int64_t sms = device_info(p.device.ordinal).sm_count;
    int splits = allowed(2) ? 2 : 1;
    while (allowed(splits * 2) && ctas * splits < 2 * sms &&
           ctas * splits * 2 <= resident(splits * 2))
      splits *= 2;
    if (kTokens == 8 && splits == 4 && allowed(8) && tiles / 8 >= 12 &&
        2 * ctas * 8 >= 3 * resident(8))
      splits = 8;
    return splits;
  }
  return splits_for_waves(ctas, resident, allowed);
}

// The split as choose_splits gives it; up to 64 activation rows, the deep kernel where the grid
// has at most two CTAs per SM, its resident CTAs hold the whole grid at that split and the
// partitions are long (kDeep, kMinDeepTiles).
template <int kTokens, bool kTiled, bool kStaged, bool kFast = false>
void launch_gemm(const GemmProblem& p, const uint8_t* records) {
  constexpr int kBytes = Smem<kTokens, kSlotsOf<kStaged>>::kBytes;
  const int splits = choose_splits<kTokens, kTiled, kStaged, kFast>(p);
  const int tiles = static_cast<int>(layout::k_tiles(p.k));
  const int per_split = (tiles + splits - 1) / splits;
  const dim3 grid(static_cast<unsigned>(column_tiles(p)), static_cast<unsigned>(splits),
                  static_cast<unsigned>(token_tiles<kTokens>(p)));
  const auto run = [&](auto kernel) {
    launch_with_y_cluster(kernel, grid, kThreads, kBytes, p.stream, "gemm_skinny_kernel launch",
                          LaunchOrder::kAfterPrevious, p, per_split, records, ~0u);
  };
  if constexpr (kTokens <= kMaxUnstagedTokens) {
    const int64_t ctas = int64_t{grid.x} * grid.y * grid.z;
    if (per_split >= kMinDeepTiles && ctas <= 2 * int64_t{device_info(p.device.ordinal).sm_count} &&
        ctas <= resident_ctas<kTokens, kTiled, kStaged, false, true>(splits, p.device.ordinal))
      return run(skinny_kernel<kTokens, kTiled, kStaged, false, true>());
  }
  run(skinny_kernel<kTokens, kTiled, kStaged, kFast>());
}

// gemm_skinny_shared_kernel, its dynamic shared memory allowed (once per variant and process).
template <bool kFast>
auto skinny_shared_kernel() {
  static_assert(SharedSmem::kBytes <= 227 * 1024);
  const auto kernel = gemm_skinny_shared_kernel<kFast>;
  static const cudaError_t attribute =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SharedSmem::kBytes);
  check_cuda(attribute, "cudaFuncSetAttribute(gemm_skinny_shared_kernel)");
  return kernel;
}

// Two token tiles per CTA (M = 129..256, a prepared B), split as the one-warpgroup kernel's
// 128-row tiles are.
template <bool kFast>
void launch_shared(const GemmProblem& p, const uint8_t* records) {
  const auto kernel = skinny_shared_kernel<kFast>();
  const int64_t tiles = layout::k_tiles(p.k);
  static std::atomic<int> known[kMaxSplits + 1];  // clusters; 0: not asked yet
  const auto resident = [&](int splits) {
    return cached_resident_ctas(known, kernel, kSharedThreads, SharedSmem::kBytes, splits,
                                p.device.ordinal);
  };
  const auto allowed = [&](int splits) { return splits <= kMaxSplits && tiles / splits >= 4; };
  const int64_t groups = (p.m + kSharedTokens - 1) / kSharedTokens;
  const int splits = splits_for_waves(column_tiles(p) * groups, resident, allowed);
  const int per_split = static_cast<int>((tiles + splits - 1) / splits);
  const dim3 grid(static_cast<unsigned>(column_tiles(p)), static_cast<unsigned>(splits),
                  static_cast<unsigned>(groups));
  launch_with_y_cluster(kernel, grid, kSharedThreads, SharedSmem::kBytes, p.stream,
                        "gemm_skinny_shared_kernel launch", LaunchOrder::kAfterPrevious, p,
                        per_split, records);
}

// Whether the context's workspace holds the problem's activation records.
template <int kTokens>
bool records_fit(const GemmProblem& p) {
  return p.workspace != nullptr &&
         static_cast<int64_t>(p.workspace_bytes) >= staged_bytes<kTokens>(p);
}

// With a workspace that holds the records, the activations are converted once for the call
// (stage_activations_kernel) instead of once per CTA: at M = 16..64 and N = 8192..28672 that work
// was a third of the GEMM's time. 128-row token tiles always stage (gemm_skinny_why_not): converted
// per CTA, their 128 rows took as long as the weights and the kernel spilled (H200: 128 x 8192 x
// 8192 in 134 us against 48 staged).
template <int kTokens, bool kTiled>
void launch(const GemmProblem& p) {
  if constexpr (kTokens <= kMaxUnstagedTokens) {
    if (!records_fit<kTokens>(p)) return launch_gemm<kTokens, kTiled, false>(p, nullptr);
  }
  auto* records = static_cast<uint8_t*>(p.workspace);
  const dim3 grid(static_cast<unsigned>(layout::k_tiles(p.k)),
                  static_cast<unsigned>(token_tiles<kTokens>(p)));
  // Two token tiles on a prepared B share a CTA. With 128-row token tiles (M > 64) fast
  // accumulation runs FP8 (its own records); below, the int8 path, exact in either math mode.
  bool shared = false, fast = false;
  auto* stage = stage_activations_kernel<kTokens>;
  if constexpr (kTokens == kMaxTokens) {
    fast = p.math_mode == A4W4_MATH_FAST_ACCUM;
    shared = kTiled && p.m > kMaxTokens && p.m <= (fast ? kMaxSharedFastTokens : kSharedTokens);
    if (fast) stage = stage_activations_kernel<kTokens, true>;
  }
  // Launched early: its start overlaps the end of the kernel before it (the previous call's GEMM
  // lets it: allow_next_grid), and it waits for that kernel before it reads A or overwrites the
  // records the kernel may still read.
  launch_kernel(stage, grid, kStagingThreads<kTokens>, 0, p.stream,
                "stage_activations_kernel launch", LaunchOrder::kEarly, false, p, records);
  if (shared) return fast ? launch_shared<true>(p, records) : launch_shared<false>(p, records);
  if constexpr (kTokens == kMaxTokens) {
    if (fast) return launch_gemm<kTokens, kTiled, true, true>(p, records);
  }
  launch_gemm<kTokens, kTiled, true>(p, records);
}

template <bool kTiled>
void launch_for_m(const GemmProblem& p) {
  if (p.m <= 8) return launch<8, kTiled>(p);
  if (p.m <= 16) return launch<16, kTiled>(p);
  if (p.m <= 32) return launch<32, kTiled>(p);
  if (p.m <= kMaxUnstagedTokens) return launch<kMaxUnstagedTokens, kTiled>(p);
  launch<kMaxTokens, kTiled>(p);
}

}  // namespace

std::string gemm_skinny_why_not(const GemmProblem& p) {
  if (p.device.type != A4W4_DEVICE_CUDA) return "operands are not on a CUDA device";
  if (device_info(p.device.ordinal).major != 9) return "needs an sm_90 GPU (wgmma)";
  if (p.m > kMaxSharedFastTokens)
    return "M = " + std::to_string(p.m) + " is above its limit of " +
           std::to_string(kMaxSharedFastTokens);
  if (p.m > kSharedTokens &&
      (p.math_mode != A4W4_MATH_FAST_ACCUM || p.b.layout == A4W4_LAYOUT_PLAIN))
    return "M above " + std::to_string(kSharedTokens) +
           " only with fast accumulation on a prepared B (up to " +
           std::to_string(kMaxSharedFastTokens) + ")";
  if (p.split_k > 1) return "it takes no split_k (it splits K by whole 128-wide tiles itself)";
  if (p.m > kMaxUnstagedTokens && !records_fit<kMaxTokens>(p))
    return "M above " + std::to_string(kMaxUnstagedTokens) +
           " needs a context workspace of at least " + std::to_string(staged_bytes<kMaxTokens>(p)) +
           " bytes (its activations are converted once per call there)";
  if (p.b.layout == A4W4_LAYOUT_PLAIN &&
      (reinterpret_cast<uintptr_t>(p.b.data) % 16 != 0 || p.b.stride_bytes % 16 != 0))
    return "a plain B must start on 16 bytes with a row stride that is a multiple of 32 elements";
  if (std::string why = prepared_b_why_not(p.b, 16, 8); !why.empty()) return why;
  if (p.n > int64_t{65535} * kRows * 1024) return "N is too large for the grid";
  return {};
}

void gemm_skinny(const GemmProblem& p, const ExecConfig&) {
  DeviceGuard guard(p.device.ordinal);
  if (p.b.layout == A4W4_LAYOUT_PLAIN) return launch_for_m<false>(p);
  launch_for_m<true>(p);
}

}  // namespace a4w4::cuda
