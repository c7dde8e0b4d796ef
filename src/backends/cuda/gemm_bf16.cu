// The bf16 tensor-core family for large M: a persistent, warp-specialised sm_90a kernel.
//
// A CTA loops over 128 x kTileN tiles of D with three warpgroups (kTileN = 256 or 128: two
// registered kernels, cuda.bf16_128x256 and cuda.bf16_128x128, which the dispatcher chooses
// between):
// - the converter warpgroup: its thread 0 keeps a 2-deep ring of raw stages (the packed E2M1
//   bytes of a 128-K tile of the tile's B rows, 64-byte swizzled) filled by TMA; all 128 threads
//   turn each raw stage into two K steps of bf16 with the block scales folded into the exponents
//   (PRMT tables, one per scale byte, built per tile in shared memory), written 128-byte swizzled
//   into the B part of a ring of bf16 stages for wgmma. Conversion is the bottleneck (24K values
//   per step for a 128x256 tile against 2M MACs, about 70 integer instructions per 32-value
//   block), so it overlaps the MMAs. The scales (a word of 4 blocks per row and K tile) are read
//   with plain loads ahead of use: TMA boxes need 16-byte rows, which short K would not give. A
//   prepared B (A4W4_LAYOUT_PREPARED_V2) comes in the same raw stages through a 4D tensor map over
//   its tiles, its scales from the tiles' words.
// - two consumer warpgroups (64 rows of the tile each) convert their own A rows of each step (one
//   block per thread, from a raw ring of their own that their thread 0 fills by TMA) into the A
//   part of the bf16 stage, then issue wgmma m64nNk16 on it, keep one step of MMAs in flight, and
//   release stages through mbarriers; they run the epilogue while the converters already work on
//   their next tile. With one converter warp per SM sub-partition, conversion was issue-latency
//   bound (the consumers mostly waited for it); converting A in the consumers spreads a third of
//   it over 8 more warps, overlapped with their MMAs in flight, and only their own MMAs read those
//   rows (a warpgroup barrier orders them). setmaxnreg moves registers from the converters (88)
//   to the consumers' accumulators (208).
//
// Exactness: E2M1 values have two significant bits, so v * 2^e is exact in bf16 for any exponent in
// its normal range, and the product of two such values is exact in fp32 when its exponent stays in
// fp32's normal range; wgmma sums products in fp32 (as the contract allows: exact in-block
// products, fp32 accumulation). Scales are folded relative to a per-tile centre c (e = s - c), and
// the accumulator is scaled by 2^(cA + cB - 254) in double in the epilogue; a pre-pass over the
// tile's scales checks that every |e| <= kMaxHalfSpread keeps products and sums inside fp32
// (|e_a + e_b| <= 80: products >= 2^-82, sums of 2^20 products < 2^107). A tile whose scales spread
// wider runs the generic kernel's exact tile code instead (generic_tile.cuh). NaN scales (0xFF)
// become bf16 NaN values, which propagate through the sums as the contract asks. Rows past M or N
// are never stored (B's are zero-filled by TMA and fold with e = 0; A's take the last row's scales,
// and a warpgroup wholly past M loads the last rows).
#include <cuda.h>

#include <algorithm>
#include <string>

#include "api/error.h"
#include "backends/cuda/cluster_launch.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_utils.h"
#include "backends/cuda/device_common.cuh"
#include "backends/cuda/generic_tile.cuh"
#include "backends/cuda/int8_fold.cuh"
#include "backends/cuda/persistent_tiles.cuh"
#include "backends/cuda/pipeline.cuh"
#include "backends/cuda/sm90_family.cuh"
#include "backends/cuda/tensor_map.h"
#include "backends/cuda/wgmma.cuh"
#include "numerics/weight_layout.h"

namespace a4w4::cuda {
namespace {

constexpr int kTileM = 128, kStepK = 64;
constexpr int kRawStages = 4;  // TMA lands about two steps after issue (each A ring; B's in K tiles)
// bf16 stages: the MMAs in flight hold two (wait depth 1), the converters write the next ones; as
// many as fit beside the raw ring (Layout::kStages).
constexpr int kMaxStages = 4;
constexpr int kWarpgroup = 128;
constexpr int kThreads = 3 * kWarpgroup;  // converters, then two consumer warpgroups
constexpr int kMaxHalfSpread = 40;
// Registers per thread: the launch gives 168 (65536 / 384, rounded down to 8); the converters hand
// theirs to the consumers' accumulators. setmaxnreg only moves registers the CTA holds, so
// 2 * consumer + converter <= 3 * 168.
constexpr int kConverterRegisters = 88, kConsumerRegisters = 208;
static_assert(2 * kConsumerRegisters + kConverterRegisters <= 3 * 168);
constexpr int kGroupM = 8;  // tiles walk 8 tile rows per column, so B tiles are reused from L2
// Named barriers: 0 is __syncthreads; the converters sync on 1; the generic fallback tiles of
// consumer warpgroups 0 and 1 on 2 and 3; their A conversions on 4 and 5.
constexpr uint32_t kConverterBarrier = 1, kConsumerBarrier = 4;

// The first tile of the CTA's persistent loop from `tile` on that this launch computes: all of
// them, unless it runs the tiles that the int8 family's launch of the same call left (`skip` then
// names the int8 family's verdicts; a tile is skipped when each of its 128-column parts folded
// there).
template <int kTileN>
__device__ __forceinline__ int own_tile(const GemmProblem& p, int tile,
                                        const fold::StagedVerdicts& skip) {
  if (skip.a_blocks == nullptr) return tile;
  for (; tile < persistent::tile_count<kTileM, kTileN>(p); tile += gridDim.x) {
    int64_t m0, n0;
    persistent::tile_origin<kTileM, kTileN, kGroupM>(p, tile, m0, n0);
    bool folded = true;
    for (int64_t n = n0; n < n0 + kTileN && n < p.n; n += 128) folded = folded && skip.folds(m0, n);
    if (!folded) return tile;
  }
  return tile;
}

// What the converters found in a tile's scales, handed to the consumers.
struct TileInfo {
  int centre_a, centre_b;
  int foldable;
};

// Here info_empty means: the consumers read the info and converted the tile's A rows (its A tables
// are free).
struct Control : persistent::Barriers<kRawStages, kMaxStages> {
  TileInfo info[2];
  uint32_t reduce[4][4];  // the converter warps' scale ranges
};

template <int kTileN>
struct Layout {
  static constexpr int kRows = kTileM + kTileN;    // A rows, then B rows, in every stage
  static constexpr int kStageBytes = kRows * 128;  // 64 bf16 per row, swizzled
  // B's raw stages: one 128-K tile each (kTileN rows of 64 bytes, 64-byte swizzled), two deep:
  // the bytes and the lookahead of kRawStages 64-K steps (the A rings' depth).
  static constexpr int kRawTileBytes = kTileN * 64;
  static constexpr int kRawTiles = kRawStages / 2;
  static constexpr int kRawABytes = 64 * 32;             // a consumer warpgroup's A rows
  static constexpr int kStages = kTileN == 256 ? 3 : 4;  // 48 or 32 KB each
  static constexpr int kRawOffset = kStages * kStageBytes;
  static constexpr int kRawAOffset = kRawOffset + kRawTiles * kRawTileBytes;
  static constexpr int kGenericOffset = kRawAOffset + 2 * kRawStages * kRawABytes;
  static constexpr int kTablesOffset =
      kGenericOffset + static_cast<int>((2 * sizeof(generic::TileSmem) + 15) / 16 * 16);
  // A's tables for info slots 0 and 1 (the consumers may still convert a tile's last A rows while
  // the converters build the next tile's), then B's.
  static constexpr int kControlOffset = kTablesOffset + 3 * 256 * 16;
  static constexpr size_t kBytes = kControlOffset + sizeof(Control);
  // Converter thread c takes B's rows c + 128 j (convert_tiles); consumer thread t takes block t
  // of its warpgroup's 64 A rows of a step.
  static constexpr int kRowsPerThread = kTileN / kWarpgroup;  // B's rows per converter thread
  static constexpr int kAcc = kTileN / 2;  // fp32 accumulators per thread
  static_assert(kStageBytes % wgmma::kSwizzleAtomBytes == 0 && kTileN % kWarpgroup == 0);
  static_assert(kStages <= kMaxStages);
};

// bf16 bit patterns of the E2M1 magnitudes 0.5, 1, ..., 6 at block exponent e (relative to the
// tile's centre): exponent field 127 + e + {-1, 0, 0, 1, 1, 2, 2}, mantissa top bit for 1.5, 3, 6.
// As PRMT tables: the low bytes of the 8 entries (entry 0 is +0) in lo0, lo1 and the high bytes in
// hi0, hi1 (x, y, z, w). The converters keep one per scale byte in shared memory, built per tile.
__device__ __forceinline__ uint4 bf16_table(int e, bool nan) {
  if (nan) return make_uint4(0xC0C0C0C0u, 0xC0C0C0C0u, 0x7F7F7F7Fu, 0x7F7F7F7Fu);  // all NaN
  // Per byte m of the two words: 127 + e + de[m] (de for m = 0..7: 0 (unused), -1, 0, 0, 1, 1, 2,
  // 2); |e| <= 64 keeps every byte in 62..193, so no byte carries into the next.
  constexpr uint32_t kDe0 = 0x7F7F7E7Fu, kDe1 = 0x81818080u;      // 127 + de, bytes m = 0..3, 4..7
  constexpr uint32_t kMant0 = 0x40000000u, kMant1 = 0x40004000u;  // bit 6 of the low byte
  const uint32_t shift = static_cast<uint32_t>(e) * 0x01010101u;
  const uint32_t x0 = kDe0 + shift, x1 = kDe1 + shift;
  return make_uint4((((x0 << 7) & 0x80808080u) | kMant0) & 0xFFFFFF00u,  // code 0 is +0
                    ((x1 << 7) & 0x80808080u) | kMant1, ((x0 >> 1) & 0x7F7F7F7Fu) & 0xFFFFFF00u,
                    (x1 >> 1) & 0x7F7F7F7Fu);
}

// Four E2M1 magnitudes (the low 16 bits of `index`, PRMT reads no more) with their signs (bit 7 of
// byte i: element i) -> four bf16 (two words: elements 0, 1 and 2, 3). The tables' high bytes
// have bit 7 clear, so the sign is ORed in.
__device__ __forceinline__ uint2 to_bf16x4(uint32_t index, uint32_t signs, const uint4& t) {
  const uint32_t lo = permute(t.x, t.y, index);
  const uint32_t hi = permute(t.z, t.w, index) | (signs & 0x80808080u);
  return make_uint2(permute(lo, hi, 0x5140u), permute(lo, hi, 0x7362u));
}

// Eight E2M1 codes (element i in nibble i) -> eight bf16 (16 bytes). Element i's sign is bit
// 4 i + 3: bit 7 of byte i / 2 of codes << 4 (even i) or of codes (odd i), so one PRMT per four
// elements gathers the signs.
__device__ __forceinline__ uint4 to_bf16x8(uint32_t codes, const uint4& t) {
  const uint32_t index = codes & 0x77777777u, shifted = codes << 4;
  const uint2 first = to_bf16x4(index, permute(shifted, codes, 0x5140u), t);
  const uint2 second = to_bf16x4(index >> 16, permute(shifted, codes, 0x7362u), t);
  return make_uint4(first.x, first.y, second.x, second.y);
}

// Writes one 32-element block (16 packed bytes, its table) as 32 bf16 (64 bytes) into row `row`,
// bytes [64 half, 64 half + 64) of a swizzled stage.
__device__ __forceinline__ void store_block(uint4 codes, uint4 table, uint8_t* stage, int row,
                                            int half) {
  const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
  for (int q = 0; q < 4; ++q)
    *reinterpret_cast<uint4*>(stage + wgmma::swizzled_offset(row, 64 * half + 16 * q)) =
        to_bf16x8(words[q], table);
}

// The per-byte minimum of the scale bytes and the per-byte maximum of (byte + 1) mod 256 (so NaN,
// 0xFF, drops out as 0), accumulated into lo4 and hi4.
__device__ __forceinline__ void fold_scales(uint32_t word, uint32_t& lo4, uint32_t& hi4) {
  lo4 = __vminu4(lo4, word);
  hi4 = __vmaxu4(hi4, __vadd4(word, 0x01010101u));
}

// Scans the scales of rows [row0, row0 + count) (clipped to `rows`), all blocks, by the 128
// converter threads; 16 bytes at a time when the scale rows allow it.
__device__ void scan_scales(const PackedOperand& op, int64_t row0, int64_t rows, int count,
                            int blocks, uint32_t& lo4, uint32_t& hi4) {
  const int valid = static_cast<int>(rows - row0 < count ? rows - row0 : count);
  const int c = threadIdx.x;
  const uint8_t* base = op.scale + row0 * op.scale_stride;
  if (reinterpret_cast<uintptr_t>(op.scale) % 16 == 0 && op.scale_stride % 16 == 0 &&
      blocks % 16 == 0) {
    const int per_row = blocks / 16;
#pragma unroll 8  // independent loads in flight: the scan is latency-bound
    for (int i = c; i < valid * per_row; i += kWarpgroup) {
      const uint4 w = __ldg(reinterpret_cast<const uint4*>(base + (i / per_row) * op.scale_stride) +
                            i % per_row);
      fold_scales(w.x, lo4, hi4), fold_scales(w.y, lo4, hi4);
      fold_scales(w.z, lo4, hi4), fold_scales(w.w, lo4, hi4);
    }
  } else {
    for (int i = c; i < valid * blocks; i += kWarpgroup)
      fold_scales(0xFFFFFF00u | __ldg(base + (i / blocks) * op.scale_stride + i % blocks), lo4,
                  hi4);
  }
}

// Scans a prepared B's scales of the tile's 16-row groups from n0 / 16 (count_groups of them,
// clipped to those holding rows below `rows`), all K tiles, by the 128 converter threads. A group's
// scales over all K tiles are contiguous (64 k_tiles bytes), so the tile's are one run of 16-byte
// words. Padding (rows past `rows`, blocks past K in the last K tile) is read as 0xFF, which drops
// out of the minimum and of the maximum like a NaN.
__device__ void scan_prepared_scales(const PackedOperand& op, int64_t n0, int64_t rows,
                                     int count_groups, int64_t k, uint32_t& lo4, uint32_t& hi4) {
  const int k_tiles = static_cast<int>(layout::k_tiles(k));
  const int64_t row_groups = (rows - n0 + 15) / 16;
  const int groups = row_groups < count_groups ? static_cast<int>(row_groups) : count_groups;
  const int last_rows = static_cast<int>(rows - n0 - 16 * (groups - 1));  // 1..16
  const bool ragged_k = k % layout::kTileK != 0;  // then blocks 2, 3 of the last K tile are padding
  const uint4* base = reinterpret_cast<const uint4*>(op.scale + (n0 / 16) * k_tiles * 64);
  const int last_group = (groups - 1) * k_tiles * 4;  // the first 16 bytes of the last group
#pragma unroll 4
  for (int i = threadIdx.x; i < groups * k_tiles * 4; i += kWarpgroup) {
    const uint4 w = __ldg(base + i);
    // Word h of the i-th 16 bytes: row 2 q + h / 2 + 8 (h % 2) of its group, blocks j = 0..3 of
    // K tile (i / 4) % k_tiles.
    const int q = i % 4;
    const bool last_k = ragged_k && (i / 4) % k_tiles == k_tiles - 1;
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      uint32_t word = words[h] | (last_k ? 0xFFFF0000u : 0u);
      if (i >= last_group && 2 * q + h / 2 + 8 * (h % 2) >= last_rows) word = 0xFFFFFFFFu;
      fold_scales(word, lo4, hi4);
    }
  }
}

__device__ __forceinline__ uint32_t min_byte(uint32_t x) {
  return min(min(x & 0xFFu, (x >> 8) & 0xFFu), min((x >> 16) & 0xFFu, x >> 24));
}
__device__ __forceinline__ uint32_t max_byte(uint32_t x) {
  return max(max(x & 0xFFu, (x >> 8) & 0xFFu), max((x >> 16) & 0xFFu, x >> 24));
}

// The converter warpgroup (threads 0..127): B's rows, plain or (kTiled) prepared version 2, whose
// raw stages the 4D tensor map lands in the plain ones' order. A raw stage is one 128-K tile of
// the tile's kTileN rows, 64 bytes each, which TMA swizzles by 64 bytes (16-byte chunk q of row r
// at chunk q ^ ((r / 2) % 4)): converter thread c reads rows c + 128 j whole (four 16-byte loads
// each; a quarter-warp's eight rows fall in eight bank groups), releases the stage at once,
// converts blocks 0, 1 into the first K step's bf16 stage and blocks 2, 3 into the second.
template <int kTileN, bool kTiled>
__device__ void convert_tiles(const GemmProblem& p, const CUtensorMap* map_b, uint8_t* smem,
                              Control& ctl, const fold::StagedVerdicts& skip) {
  using L = Layout<kTileN>;
  constexpr int kRing = L::kRawTiles;
  constexpr int kLoadBytes = L::kRawTileBytes;
  const int c = threadIdx.x, warp = c / 32;
  const int steps = static_cast<int>(p.k / kStepK), blocks = static_cast<int>(p.k / 32);
  const int k_tiles = static_cast<int>(layout::k_tiles(p.k));
  uint32_t raw_use = 0, stage_use = 0;  // uses of the rings so far: slot and phase
  int local = 0;
  for (int tile = own_tile<kTileN>(p, blockIdx.x, skip);
       tile < persistent::tile_count<kTileM, kTileN>(p);
       tile = own_tile<kTileN>(p, tile + gridDim.x, skip), ++local) {
    int64_t m0, n0;
    persistent::tile_origin<kTileM, kTileN, kGroupM>(p, tile, m0, n0);
    // Raw stage `load` (a 128-K tile) into the slot of ring use `use`, once every converter has
    // read the slot's previous contents.
    auto issue = [&](uint32_t use, int load) {
      const uint32_t slot = use % kRing;
      pipeline::wait(&ctl.raw_empty[slot], ((use / kRing) & 1) ^ 1);
      pipeline::arrive_expect_tx(&ctl.raw_full[slot], kLoadBytes);
      if constexpr (kTiled) {
        pipeline::tma_load_4d(smem + L::kRawOffset + slot * kLoadBytes, map_b, &ctl.raw_full[slot],
                              0, 0, load, static_cast<int>(n0 / 16));
      } else {
        pipeline::tma_load_2d(smem + L::kRawOffset + slot * kLoadBytes, map_b, &ctl.raw_full[slot],
                              64 * load, static_cast<int>(n0));
      }
    };
    // The first loads fly during the pre-pass (and are dropped if the tile is not foldable).
    const int ahead = min(kRing, k_tiles);
    if (c == 0)
      for (int s = 0; s < ahead; ++s) issue(raw_use + s, s);

    // Pre-pass: can this tile fold its scales into bf16 exactly?
    uint32_t lo4[2] = {0xFFFFFFFFu, 0xFFFFFFFFu}, hi4[2] = {0, 0};
    scan_scales(p.a, m0, p.m, kTileM, blocks, lo4[0], hi4[0]);
    if constexpr (kTiled) {
      scan_prepared_scales(p.b, n0, p.n, kTileN / 16, p.k, lo4[1], hi4[1]);
    } else {
      scan_scales(p.b, n0, p.n, kTileN, blocks, lo4[1], hi4[1]);
    }
#pragma unroll
    for (int o = 0; o < 2; ++o) {
      const uint32_t lo = __reduce_min_sync(0xFFFFFFFFu, min_byte(lo4[o]));
      const uint32_t hi = __reduce_max_sync(0xFFFFFFFFu, max_byte(hi4[o]));
      if (c % 32 == 0) ctl.reduce[warp][2 * o] = lo, ctl.reduce[warp][2 * o + 1] = hi;
    }
    pipeline::named_sync(kConverterBarrier, kWarpgroup);
    int centre[2];
    bool foldable = true;
#pragma unroll
    for (int o = 0; o < 2; ++o) {
      uint32_t lo = 0xFFu, hi = 0u;  // hi is the largest scale + 1 (0: no finite scale)
      for (int w = 0; w < 4; ++w)
        lo = min(lo, ctl.reduce[w][2 * o]), hi = max(hi, ctl.reduce[w][2 * o + 1]);
      const bool any = hi > 0;
      centre[o] = any ? static_cast<int>(lo + hi - 1) / 2 : 127;
      foldable = foldable && (!any || static_cast<int>(hi - 1 - lo) <= 2 * kMaxHalfSpread);
    }
    // The tile's bf16 tables, one per scale byte (past the spread: never used): A's into the
    // info slot's buffer once the consumers have converted the A rows of the tile that used it
    // last; B's were last read by these threads before the pre-pass's barrier.
    const int slot = local % 2;
    pipeline::wait(&ctl.info_empty[slot], ((local / 2) & 1) ^ 1);
    uint4* tables = reinterpret_cast<uint4*>(smem + L::kTablesOffset);
    const uint4* b_tables = tables + 2 * 256;
    if (foldable) {
      for (int i = c; i < 2 * 256; i += kWarpgroup) {
        const int e = (i % 256) - (i < 256 ? centre[0] : centre[1]);
        tables[i < 256 ? 256 * slot + i : i + 256] =
            bf16_table(max(-64, min(64, e)), i % 256 == 0xFF);
      }
    }
    // Every converter has read ctl.reduce before the next tile's pre-pass writes it; the info
    // goes out with every thread's arrival, each releasing its own table writes (the consumers
    // read A's tables after it; racecheck flags a single arrival behind the barrier).
    pipeline::named_sync(kConverterBarrier, kWarpgroup);
    if (c == 0) ctl.info[slot] = {centre[0], centre[1], foldable ? 1 : 0};
    pipeline::arrive(&ctl.info_full[slot]);
    if (!foldable) {  // the consumers run the exact generic tiles; the raw stages are dropped
      for (int s = 0; s < ahead; ++s, ++raw_use) {
        pipeline::wait(&ctl.raw_full[raw_use % kRing], (raw_use / kRing) & 1);
        pipeline::arrive(&ctl.raw_empty[raw_use % kRing]);
      }
      continue;
    }

    // Thread c's rows n0 + c + 128 j: their scale words (blocks 0..3 of a K tile in bytes 0..3;
    // nullptr past N, whose zero-filled rows convert with e = 0).
    const uint8_t* scale_rows[L::kRowsPerThread];
#pragma unroll
    for (int j = 0; j < L::kRowsPerThread; ++j) {
      const int64_t row = n0 + c + kWarpgroup * j;
      const int64_t offset =
          kTiled ? layout::prepared_scale_offset(row, 0, k_tiles) : row * p.b.scale_stride;
      scale_rows[j] = row < p.n ? p.b.scale + offset : nullptr;
    }
    const bool scale_words = fold::scale_words(p.b);
    auto tile_scales = [&](int t, uint32_t(&out)[L::kRowsPerThread]) {
#pragma unroll
      for (int j = 0; j < L::kRowsPerThread; ++j) {
        if (scale_rows[j] == nullptr) {
          out[j] = static_cast<uint32_t>(centre[1]) * 0x01010101u;
        } else if constexpr (kTiled) {
          out[j] = __ldg(reinterpret_cast<const uint32_t*>(scale_rows[j] +
                                                           layout::kTileScaleBytes * int64_t{t}));
        } else {
          out[j] = fold::scale_word(scale_rows[j], t, blocks, scale_words);
        }
      }
    };
    // K step 2 t + h: blocks 2 h, 2 h + 1 of each row into the next bf16 stage.
    auto convert_step = [&](const uint4(&codes)[L::kRowsPerThread][4],
                            const uint32_t(&scales)[L::kRowsPerThread], int h) {
      const uint32_t stage_slot = stage_use % L::kStages;
      pipeline::wait(&ctl.empty[stage_slot], ((stage_use / L::kStages) & 1) ^ 1);
      uint8_t* stage = smem + stage_slot * L::kStageBytes;
#pragma unroll
      for (int j = 0; j < L::kRowsPerThread; ++j)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          store_block(codes[j][2 * h + half], b_tables[(scales[j] >> (16 * h + 8 * half)) & 0xFFu],
                      stage, kTileM + c + kWarpgroup * j, half);
      wgmma::fence_shared_for_async();  // st.shared before the wgmmas' async-proxy reads
      pipeline::arrive(&ctl.full[stage_slot]);
      ++stage_use;
    };
    uint32_t scales_next[L::kRowsPerThread];
    tile_scales(0, scales_next);
    for (int t = 0; t < k_tiles; ++t, ++raw_use) {
      const uint32_t raw_slot = raw_use % kRing;
      pipeline::wait(&ctl.raw_full[raw_slot], (raw_use / kRing) & 1);
      const uint8_t* raw = smem + L::kRawOffset + raw_slot * kLoadBytes;
      uint4 codes[L::kRowsPerThread][4];
      uint32_t scales[L::kRowsPerThread];
#pragma unroll
      for (int j = 0; j < L::kRowsPerThread; ++j) {
        const int r = c + kWarpgroup * j;
#pragma unroll
        for (int q = 0; q < 4; ++q)
          codes[j][q] = *reinterpret_cast<const uint4*>(raw + r * 64 + 16 * (q ^ ((r / 2) % 4)));
        scales[j] = scales_next[j];
      }
      pipeline::arrive(&ctl.raw_empty[raw_slot]);
      if (t + 1 < k_tiles) tile_scales(t + 1, scales_next);
      convert_step(codes, scales, 0);
      // Refill this slot (every converter has most likely read it by now) with K tile t + kRing.
      if (c == 0 && t + kRing < k_tiles) issue(raw_use + kRing, t + kRing);
      if (2 * t + 1 < steps) convert_step(codes, scales, 1);
    }
  }
}

// A consumer warpgroup (wg = 0, 1: rows m0 + 64 wg of the tile).
template <int kTileN>
__device__ void consume_tiles(const GemmProblem& p, const CUtensorMap* map_a, uint8_t* smem,
                              Control& ctl, int wg, const fold::StagedVerdicts& skip) {
  using L = Layout<kTileN>;
  const int thread = threadIdx.x % kWarpgroup;
  const int steps = static_cast<int>(p.k / kStepK);
  auto* generic_tiles = reinterpret_cast<generic::TileSmem*>(smem + L::kGenericOffset);
  uint8_t* raw_a = smem + L::kRawAOffset + wg * kRawStages * L::kRawABytes;
  uint64_t* raw_a_full = ctl.raw_a_full[wg];
  const uint4* tables = reinterpret_cast<const uint4*>(smem + L::kTablesOffset);
  // Steps of foldable tiles so far: the uses of the bf16 ring and of the A ring (4 slots).
  uint32_t use = 0;
  int local = 0;
  float acc[L::kAcc];
  for (int tile = own_tile<kTileN>(p, blockIdx.x, skip);
       tile < persistent::tile_count<kTileM, kTileN>(p);
       tile = own_tile<kTileN>(p, tile + gridDim.x, skip), ++local) {
    int64_t m0, n0;
    persistent::tile_origin<kTileM, kTileN, kGroupM>(p, tile, m0, n0);
    const int64_t rows0 = m0 + 64 * wg;
    const int slot = local % 2;
    pipeline::wait(&ctl.info_full[slot], (local / 2) & 1);
    const TileInfo info = ctl.info[slot];
    if (!info.foldable) {
      pipeline::arrive(&ctl.info_empty[slot]);
      persistent::exact_rows<kTileN>(p, rows0, n0, thread, generic_tiles, wg);
      continue;
    }

    // Raw A rows (32 bytes a step), issued once the tile is known to be foldable; they land while
    // the converters convert B's first step.
    const persistent::RawARing<kRawStages, L::kRawABytes, 32> ring_a(raw_a, raw_a_full, map_a,
                                                                     rows0, p.m);
    if (thread == 0) ring_a.prime(use, steps);
    const uint4* a_tables = tables + 256 * slot;
    // This thread's block: half thread % 2 of A row rows0 + thread / 2. Its scale bytes are loaded
    // two steps ahead (L2 latency). Rows past M (never stored; each output row depends on its own
    // A row only) take the last row's scales.
    const int64_t row = rows0 + thread / 2 < p.m ? rows0 + thread / 2 : p.m - 1;
    const uint8_t* scale_block = p.a.scale + row * p.a.scale_stride + thread % 2;
    auto load_scale = [&](int step) {
      return static_cast<uint32_t>(__ldg(scale_block + 2 * step));
    };
    uint32_t scale_next = load_scale(0), scale_after = steps > 1 ? load_scale(1) : 0;

#pragma unroll
    for (int i = 0; i < L::kAcc; ++i) acc[i] = 0.0f;
    wgmma::fence_operands(acc);
    uint32_t previous = 0;
    for (int step = 0; step < steps; ++step, ++use) {
      // The warpgroup's A rows of the step into the stage (this warpgroup's MMAs of step
      // - kStages, the last to read them, are done), while the previous step's MMAs run.
      const uint32_t a_slot = use % kRawStages, stage = use % L::kStages;
      pipeline::wait(&raw_a_full[a_slot], (use / kRawStages) & 1);
      const uint4 codes = reinterpret_cast<const uint4*>(raw_a + a_slot * L::kRawABytes)[thread];
      const uint32_t scale = scale_next;
      scale_next = scale_after;
      if (step + 2 < steps) scale_after = load_scale(step + 2);
      uint8_t* stage_bytes = smem + stage * L::kStageBytes;
      store_block(codes, a_tables[scale], stage_bytes, 64 * wg + thread / 2, thread % 2);
      wgmma::fence_shared_for_async();  // st.shared before the wgmmas' async-proxy reads
      pipeline::named_sync(kConsumerBarrier + wg, kWarpgroup);  // A written, raw slot read
      if (thread == 0 && step + kRawStages < steps)
        ring_a.load(use + kRawStages, step + kRawStages);

      pipeline::wait(&ctl.full[stage], (use / L::kStages) & 1);  // B converted
      // One descriptor per stage: the others add byte offsets / 16 to its address field (shared
      // addresses stay below 2^18, so the 14-bit field never carries).
      const uint64_t stage_desc = wgmma::descriptor(wgmma::shared_address(stage_bytes));
      const uint64_t a_desc = stage_desc + wg * 64 * 128 / 16,
                     b_desc = stage_desc + kTileM * 128 / 16;
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint64_t a = a_desc + 32 * kk / 16, b = b_desc + 32 * kk / 16;
        if constexpr (kTileN == 256) {
          wgmma::mma_bf16_m64n256k16(acc, a, b, true);
        } else {
          wgmma::mma_bf16_m64n128k16(acc, a, b, true);
        }
      }
      wgmma::commit();
      wgmma::wait<1>();  // the previous step's MMAs are done: its stage goes back
      if (step > 0) pipeline::arrive(&ctl.empty[previous]);
      previous = stage;
    }
    wgmma::wait<0>();
    wgmma::fence_operands(acc);
    pipeline::arrive(&ctl.empty[previous]);

    // D = acc * 2^(cA + cB - 254), then alpha, beta C, bias and one rounding.
    const TileInfo centres = ctl.info[slot];  // reloaded: fewer registers live in the loop
    const double factor = ldexp(1.0, centres.centre_a + centres.centre_b - 254);
    const int warp = thread / 32, lane = thread % 32, g = lane / 4, q = lane % 4;
#pragma unroll
    for (int j = 0; j < kTileN / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t m = rows0 + 16 * warp + g + (i >= 2 ? 8 : 0);
        const int64_t n = n0 + 8 * j + 2 * q + (i & 1);
        if (m < p.m && n < p.n) store_output(p, m, n, static_cast<double>(acc[4 * j + i]) * factor);
      }
    pipeline::arrive(&ctl.info_empty[slot]);  // the info is read and A's tables of the slot free
  }
}

template <int kTileN>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_bf16_kernel(const __grid_constant__ GemmProblem p,
                     const __grid_constant__ CUtensorMap map_a,
                     const __grid_constant__ CUtensorMap map_b,
                     const __grid_constant__ fold::StagedVerdicts skip) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using L = Layout<kTileN>;
  // After the int8 family's launch: nothing to do when every tile folded (the common case; the
  // verdicts are the staging pass's, complete before the int8 launches). Launched early there,
  // it waits for them before it exits or touches D.
  if (skip.a_blocks != nullptr &&
      nothing_to_do_after_previous_grid(threadIdx.x < 32 && skip.any_unfolded(p.m, p.n)))
    return;
  extern __shared__ __align__(1024) uint8_t smem[];  // no static shared memory: stages stay
                                                     // 1024-aligned
  Control& ctl = *reinterpret_cast<Control*>(smem + L::kControlOffset);
  if (threadIdx.x == 0) {
    ctl.init(L::kStages, kWarpgroup);
    pipeline::prefetch_map(&map_a);
    pipeline::prefetch_map(&map_b);
  }
  __syncthreads();
  if (threadIdx.x < kWarpgroup) {
    pipeline::shrink_registers<kConverterRegisters>();
    if (p.b.layout == A4W4_LAYOUT_PLAIN) {
      convert_tiles<kTileN, false>(p, &map_b, smem, ctl, skip);
    } else {
      convert_tiles<kTileN, true>(p, &map_b, smem, ctl, skip);
    }
  } else {
    pipeline::grow_registers<kConsumerRegisters>();
    consume_tiles<kTileN>(p, &map_a, smem, ctl, threadIdx.x / kWarpgroup - 1, skip);
  }
#else
  (void)p, (void)map_a, (void)map_b, (void)skip;
  __trap();
#endif
}

// The packed E2M1 bytes of `rows` plain rows, loaded in boxes of one K step (32 bytes) by
// `box_rows` rows; rows past the end read as zeros.
CUtensorMap packed_map(const PackedOperand& op, int64_t rows, int64_t k, int box_rows) {
  return tma::packed_map(op, rows, k, 32, box_rows, "cuda.bf16");
}

template <int kTileN>
void launch(const GemmProblem& p, const fold::StagedVerdicts& skip = {nullptr, nullptr},
            LaunchOrder order = LaunchOrder::kAfterPrevious) {
  using L = Layout<kTileN>;
  static_assert(L::kBytes <= 227 * 1024);
  check_cuda(
      cudaFuncSetAttribute(gemm_bf16_kernel<kTileN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(L::kBytes)),
      "cudaFuncSetAttribute(gemm_bf16_kernel)");
  const CUtensorMap map_a = packed_map(p.a, p.m, p.k, kTileM / 2);  // per consumer warpgroup
  // B in 128-K tiles, 64-byte swizzled (convert_tiles).
  const CUtensorMap map_b =
      p.b.layout == A4W4_LAYOUT_PLAIN
          ? tma::packed_map(p.b, p.n, p.k, 64, kTileN, "cuda.bf16", CU_TENSOR_MAP_SWIZZLE_64B)
          : tma::prepared_map(p.b, p.n, p.k, 64, kTileN, "cuda.bf16", CU_TENSOR_MAP_SWIZZLE_64B);
  const int64_t grid = std::min<int64_t>(persistent::tiles<kTileM, kTileN>(p.m, p.n),
                                         device_info(p.device.ordinal).sm_count);
  launch_kernel(gemm_bf16_kernel<kTileN>, dim3(static_cast<unsigned>(grid)), kThreads, L::kBytes,
                p.stream, "gemm_bf16_kernel launch", order, false, p, map_a, map_b, skip);
}

}  // namespace

std::string gemm_bf16_why_not(const GemmProblem& p) {
  if (p.k % kStepK != 0) return "K must be a multiple of 64";
  // A prepared B's scales are scanned in 16-byte words.
  return tma::sm90_operands_why_not(p, 16);
}

// One registered kernel per tile width; the dispatcher (registry metadata, or a tuned entry)
// chooses between them per problem.
void gemm_bf16_128x256(const GemmProblem& p, const ExecConfig&) {
  DeviceGuard guard(p.device.ordinal);
  launch<256>(p);
}

void gemm_bf16_128x128(const GemmProblem& p, const ExecConfig&) {
  DeviceGuard guard(p.device.ordinal);
  launch<128>(p);
}

// The tiles of D that the int8 family's launch of the same call left (gemm_int8.cu): 128 x 128
// tiles, the int8 family's, so that each tile is computed once.
void gemm_bf16_unfolded_tiles(const GemmProblem& p, const fold::StagedVerdicts& skip) {
  launch<128>(p, skip, LaunchOrder::kEarly);
}

}  // namespace a4w4::cuda
