// The int8 tensor-core family for large M, exact mode: a persistent, warp-specialised sm_90a kernel
// (cuda.int8_128x128). Tested on the H200 (Int8FamilyMatchesTheReference, memcheck clean);
// docs/cuda-backend.md has the exactness argument and the measured rate.
//
// int8 wgmma sums exactly in int32 (docs/cuda-backend.md, "What Hopper's wgmma accumulation
// keeps"), so a whole K tile of 128 (4 blocks of 32) is one chain of MMAs once the block scales are
// folded into the operands (int8_fold.cuh): each row's blocks of a K tile are shifted by
// d = scale - base (base: the row's smallest scale in the tile), d in [0, 3], so every operand is
// an integer |2 * E2M1 * 2^d| <= 96 and the tile sum |sum| <= 128 * 96 * 96 < 2^21 is exact. The
// consumers promote each tile's int32 sums once to fp32: acc += sum * 2^(baseA - 127) *
// 2^(baseB - 129) (per accumulator row and column), where the product of the factors and the term
// are exact powers-of-two scalings in fp32's normal range, so the fp32 add is the only rounding.
//
// A CTA loops over 128 x 128 tiles of D with three warpgroups, like the bf16 family
// (gemm_bf16.cu), with a K step of 128 (one fold tile; 128 int8 = one 128-byte swizzled row):
// - the converter warpgroup: its thread 0 keeps a 4-deep ring of raw stages (128 B rows x 64
//   packed bytes) filled by TMA; first it scans the tile's scales (pre-pass: every (row, K tile) of
//   A and B folds, no NaN, fp32's range holds), then all 128 threads turn each raw stage into int8
//   with the shifts folded in (PRMT tables of the shifted magnitudes and their negations), written
//   128-byte swizzled into the B part of a ring of int8 stages, with each B row's factor
//   2^(base - 129) beside the stage.
// - two consumer warpgroups (64 rows each) convert their own A rows of each step (two blocks per
//   thread, from a raw ring of their own), issue 4 wgmma m64n128k32 s8.s8 -> s32 into an int32
//   accumulator set (the step's chain starts from zero), convert the next step's A rows while it
//   runs, then promote the step's sums into the fp32 accumulators and release its stage. While one
//   warpgroup promotes, the other's MMAs keep the tensor cores busy. (Two int32 sets, to overlap a
//   warpgroup's promotion with its own next MMAs, need 3 x 64 accumulator registers: ptxas
//   allocates the whole kernel within 65536 / 384 = 168 per thread and spilled 2 KB.) The epilogue
//   runs while the converters already work on the next tile.
// A tile whose pre-pass fails (spread > 3 inside a row's K tile, NaN, exponents outside fp32's
// safe range) runs the generic kernel's exact tile code (generic_tile.cuh) instead: exact in-block
// sums, double accumulation, NaN propagated. Rows past M or N are never stored (B's are
// zero-filled by TMA and fold with base 129, factor 1; A's take the last row's scales). K need not
// be a multiple of 128: TMA zero-fills the last tile's missing bytes and the missing blocks' scales
// read as the tile's first block's.
#include <cuda.h>

#include <algorithm>
#include <string>

#include "api/error.h"
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

namespace a4w4::cuda {
namespace {

constexpr int kTileM = 128, kTileN = 128;
constexpr int kStepK = 128;  // one fold tile: 4 blocks, 128 int8 per stage row
constexpr int kRawStages = 4, kStages = 4;
constexpr int kWarpgroup = 128;
constexpr int kThreads = 3 * kWarpgroup;  // converters, then two consumer warpgroups
// Registers: the launch gives 168 per thread (ptxas allocates within that); as in the bf16 family
// the converters hand theirs to the consumers (one int32 and one fp32 accumulator set, 2 x 64).
constexpr int kConverterRegisters = 88, kConsumerRegisters = 208;
static_assert(2 * kConsumerRegisters + kConverterRegisters <= 3 * 168);
constexpr int kGroupM = 8;  // tiles walk 8 tile rows per column, so B tiles are reused from L2
// Named barriers: 0 is __syncthreads; the converters sync on 1; the generic fallback tiles of
// consumer warpgroups 0 and 1 on 2 and 3; their A conversions on 4 and 5.
constexpr uint32_t kConverterBarrier = 1, kConsumerBarrier = 4;

struct Control : persistent::Barriers<kRawStages, kStages> {
  int foldable[2];
  uint32_t reduce[4][5];  // per converter warp: any row not folding, A's and B's base range
};

struct Layout {
  static constexpr int kStageBytes = (kTileM + kTileN) * 128;  // A rows, then B rows; swizzled
  static constexpr int kRawBytes = kTileN * 64;                // B's raw stage: 128 E2M1 per row
  static constexpr int kRawABytes = 64 * 64;                   // a consumer warpgroup's A rows
  static constexpr int kRawOffset = kStages * kStageBytes;
  static constexpr int kRawAOffset = kRawOffset + kRawStages * kRawBytes;
  // Per stage, the fp32 factors of the step: 2^(base - 127) of the 128 A rows, then
  // 2^(base - 129) of the 128 B rows.
  static constexpr int kFactorOffset = kRawAOffset + 2 * kRawStages * kRawABytes;
  static constexpr int kFactorFloats = kTileM + kTileN;
  static constexpr int kGenericOffset = kFactorOffset + kStages * kFactorFloats * 4;
  static constexpr int kControlOffset =
      kGenericOffset + static_cast<int>((2 * sizeof(generic::TileSmem) + 15) / 16 * 16);
  static constexpr size_t kBytes = kControlOffset + sizeof(Control);
  static constexpr int kAcc = kTileN / 2;  // accumulators per thread and set
  static_assert(kStageBytes % wgmma::kSwizzleAtomBytes == 0);
};

// Writes one 32-element block (16 packed bytes) folded with shift d as 32 int8 into row `row`,
// bytes [32 block, 32 block + 32) of a swizzled stage.
__device__ __forceinline__ void store_block(uint4 codes, uint32_t shift, uint8_t* stage, int row,
                                            int block) {
  const fold::BlockTables t = fold::block_tables(shift);
  const uint2 x = fold::to_s8x8(codes.x, t), y = fold::to_s8x8(codes.y, t);
  const uint2 z = fold::to_s8x8(codes.z, t), w = fold::to_s8x8(codes.w, t);
  *reinterpret_cast<uint4*>(stage + wgmma::swizzled_offset(row, 32 * block)) =
      make_uint4(x.x, x.y, y.x, y.y);
  *reinterpret_cast<uint4*>(stage + wgmma::swizzled_offset(row, 32 * block + 16)) =
      make_uint4(z.x, z.y, w.x, w.y);
}

// Folds one (row, K tile) of the pre-pass: bad |= it does not fold; lo, hi: the range of bases.
__device__ __forceinline__ void scan_word(uint32_t word, uint32_t& bad, uint32_t& lo,
                                          uint32_t& hi) {
  const fold::FoldedRow f = fold::fold_row(word);
  bad |= f.ok ? 0u : 1u;
  lo = min(lo, f.base);
  hi = max(hi, f.base);
}

// Pre-pass over rows [row0, row0 + count) (clipped to `rows`), all K tiles, by the 128 converter
// threads; 16 bytes (4 K tiles) at a time when the scale rows allow it.
__device__ void scan_scales(const PackedOperand& op, int64_t row0, int64_t rows, int count,
                            int k_tiles, int blocks, bool words, uint32_t& bad, uint32_t& lo,
                            uint32_t& hi) {
  const int valid = static_cast<int>(rows - row0 < count ? rows - row0 : count);
  const uint8_t* base = op.scale + row0 * op.scale_stride;
  if (reinterpret_cast<uintptr_t>(op.scale) % 16 == 0 && op.scale_stride % 16 == 0 &&
      blocks % 16 == 0) {
    const int per_row = blocks / 16;
#pragma unroll 8  // independent loads in flight: the scan is latency-bound
    for (int i = threadIdx.x; i < valid * per_row; i += kWarpgroup) {
      const uint4 w = __ldg(reinterpret_cast<const uint4*>(base + (i / per_row) * op.scale_stride) +
                            i % per_row);
      scan_word(w.x, bad, lo, hi), scan_word(w.y, bad, lo, hi);
      scan_word(w.z, bad, lo, hi), scan_word(w.w, bad, lo, hi);
    }
  } else {
#pragma unroll 4
    for (int i = threadIdx.x; i < valid * k_tiles; i += kWarpgroup)
      scan_word(
          fold::scale_word(base + (i / k_tiles) * op.scale_stride, i % k_tiles, blocks, words), bad,
          lo, hi);
  }
}

// The converter warpgroup (threads 0..127): the pre-pass, then B's rows of every step.
__device__ void convert_tiles(const GemmProblem& p, const CUtensorMap* map_b, uint8_t* smem,
                              Control& ctl) {
  using L = Layout;
  const int c = threadIdx.x, warp = c / 32;
  const int steps = static_cast<int>((p.k + kStepK - 1) / kStepK);
  const int blocks = static_cast<int>(p.k / 32);
  const bool words_a = fold::scale_words(p.a), words_b = fold::scale_words(p.b);
  float* factors = reinterpret_cast<float*>(smem + L::kFactorOffset);
  uint32_t raw_use = 0, stage_use = 0;  // uses of the rings so far: slot and phase
  int local = 0;
  for (int tile = blockIdx.x; tile < persistent::tile_count<kTileM, kTileN>(p);
       tile += gridDim.x, ++local) {
    int64_t m0, n0;
    persistent::tile_origin<kTileM, kTileN, kGroupM>(p, tile, m0, n0);
    // Raw stage `step` into the slot of ring use `use`, once every converter has read the slot's
    // previous contents.
    auto issue = [&](uint32_t use, int step) {
      const uint32_t slot = use % kRawStages;
      pipeline::wait(&ctl.raw_empty[slot], ((use / kRawStages) & 1) ^ 1);
      pipeline::arrive_expect_tx(&ctl.raw_full[slot], L::kRawBytes);
      pipeline::tma_load_2d(smem + L::kRawOffset + slot * L::kRawBytes, map_b, &ctl.raw_full[slot],
                            64 * step, static_cast<int>(n0));
    };
    // The first loads fly during the pre-pass (and are dropped if the tile does not fold).
    const int ahead = min(kRawStages, steps);
    if (c == 0)
      for (int s = 0; s < ahead; ++s) issue(raw_use + s, s);

    // Pre-pass: does every (row, K tile) of the tile fold, and do the factors stay in range?
    uint32_t bad = 0, lo[2] = {0xFFu, 0xFFu}, hi[2] = {0u, 0u};
    scan_scales(p.a, m0, p.m, kTileM, steps, blocks, words_a, bad, lo[0], hi[0]);
    scan_scales(p.b, n0, p.n, kTileN, steps, blocks, words_b, bad, lo[1], hi[1]);
    {
      const uint32_t any_bad = __reduce_or_sync(0xFFFFFFFFu, bad);
      const uint32_t values[4] = {
          __reduce_min_sync(0xFFFFFFFFu, lo[0]), __reduce_max_sync(0xFFFFFFFFu, hi[0]),
          __reduce_min_sync(0xFFFFFFFFu, lo[1]), __reduce_max_sync(0xFFFFFFFFu, hi[1])};
      if (c % 32 == 0) {
        ctl.reduce[warp][0] = any_bad;
        for (int i = 0; i < 4; ++i) ctl.reduce[warp][1 + i] = values[i];
      }
    }
    pipeline::named_sync(kConverterBarrier, kWarpgroup);
    uint32_t any_bad = 0, a_lo = 0xFFu, a_hi = 0u, b_lo = 0xFFu, b_hi = 0u;
    for (int w = 0; w < 4; ++w) {
      any_bad |= ctl.reduce[w][0];
      a_lo = min(a_lo, ctl.reduce[w][1]), a_hi = max(a_hi, ctl.reduce[w][2]);
      b_lo = min(b_lo, ctl.reduce[w][3]), b_hi = max(b_hi, ctl.reduce[w][4]);
    }
    const bool foldable = any_bad == 0 && fold::fp32_accumulation_safe(a_lo, a_hi, b_lo, b_hi);
    // ctl.reduce is read by every converter before the next tile's pre-pass writes it.
    pipeline::named_sync(kConverterBarrier, kWarpgroup);
    const int slot = local % 2;
    if (c == 0) {
      pipeline::wait(&ctl.info_empty[slot], ((local / 2) & 1) ^ 1);
      ctl.foldable[slot] = foldable ? 1 : 0;
      pipeline::arrive(&ctl.info_full[slot]);
    }
    if (!foldable) {  // the consumers run the exact generic tiles; the raw stages are dropped
      for (int s = 0; s < ahead; ++s, ++raw_use) {
        pipeline::wait(&ctl.raw_full[raw_use % kRawStages], (raw_use / kRawStages) & 1);
        pipeline::arrive(&ctl.raw_empty[raw_use % kRawStages]);
      }
      continue;
    }

    // Raw block b = c + 128 j is block c % 4 of B row n0 + b / 4 (stage row kTileM + b / 4). The
    // scale rows of this thread's 4 rows (nullptr past N: zero-filled rows fold with base 129).
    const int block = c % 4;
    const uint8_t* scale_rows[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t row = n0 + c / 4 + 32 * j;
      scale_rows[j] = row < p.n ? p.b.scale + row * p.b.scale_stride : nullptr;
    }
    auto load_scales = [&](int step, uint32_t(&out)[4]) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        out[j] = scale_rows[j] != nullptr ? fold::scale_word(scale_rows[j], step, blocks, words_b)
                                          : 129u * 0x01010101u;
      }
    };
    uint32_t scales_next[4];
    load_scales(0, scales_next);
    for (int step = 0; step < steps; ++step, ++raw_use, ++stage_use) {
      const uint32_t raw_slot = raw_use % kRawStages;
      pipeline::wait(&ctl.raw_full[raw_slot], (raw_use / kRawStages) & 1);
      const uint4* raw =
          reinterpret_cast<const uint4*>(smem + L::kRawOffset + raw_slot * L::kRawBytes);
      uint4 codes[4];
      uint32_t scales[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        codes[j] = raw[c + kWarpgroup * j];
        scales[j] = scales_next[j];
      }
      pipeline::arrive(&ctl.raw_empty[raw_slot]);
      if (step + 1 < steps) load_scales(step + 1, scales_next);
      // Refill the slot of the previous step (read by the other warps by now, most likely).
      if (c == 0 && step > 0 && step - 1 + kRawStages < steps)
        issue(raw_use - 1 + kRawStages, step - 1 + kRawStages);

      const uint32_t stage_slot = stage_use % kStages;
      pipeline::wait(&ctl.empty[stage_slot], ((stage_use / kStages) & 1) ^ 1);
      uint8_t* stage = smem + stage_slot * L::kStageBytes;
      float* stage_factors = factors + stage_slot * L::kFactorFloats;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const fold::FoldedRow f = fold::fold_row(scales[j]);
        const int row = c / 4 + 32 * j;
        store_block(codes[j], (f.shifts >> (8 * block)) & 0xFFu, stage, kTileM + row, block);
        if (block == 0) stage_factors[kTileM + row] = __uint_as_float((f.base - 2) << 23);
      }
      wgmma::fence_shared_for_async();  // st.shared before the wgmmas' async-proxy reads
      pipeline::arrive(&ctl.full[stage_slot]);
    }
  }
}

// acc += sum * 2^(ea - 127) * 2^(eb - 129) for this thread's accumulators of one step (the
// factors beside its stage): the factor product and the term are exact (the pre-pass keeps them in
// fp32's normal range), the add rounds once. The int32 -> fp32 conversion (exact: |sum| < 2^21)
// is __int2float_rn, one I2FP.F32.S32 on sm_90 (not the quarter-rate I2F that
// fold::tile_sum_to_float avoids with two instructions): 4 instructions per accumulator -> 3.
__device__ __forceinline__ void promote(float (&acc)[Layout::kAcc],
                                        const int32_t (&sum)[Layout::kAcc],
                                        const float* stage_factors, int a_row) {
  const float fa0 = stage_factors[a_row], fa1 = stage_factors[a_row + 8];
  const int q = threadIdx.x % 4;
#pragma unroll
  for (int j = 0; j < kTileN / 8; ++j) {
    const float2 fb = *reinterpret_cast<const float2*>(stage_factors + kTileM + 8 * j + 2 * q);
    acc[4 * j + 0] = fmaf(__int2float_rn(sum[4 * j + 0]), fa0 * fb.x, acc[4 * j + 0]);
    acc[4 * j + 1] = fmaf(__int2float_rn(sum[4 * j + 1]), fa0 * fb.y, acc[4 * j + 1]);
    acc[4 * j + 2] = fmaf(__int2float_rn(sum[4 * j + 2]), fa1 * fb.x, acc[4 * j + 2]);
    acc[4 * j + 3] = fmaf(__int2float_rn(sum[4 * j + 3]), fa1 * fb.y, acc[4 * j + 3]);
  }
}

// The 4 MMAs of one step (the chain starts from zero: sum = the step's exact tile sums).
__device__ __forceinline__ void issue_step(int32_t (&sum)[Layout::kAcc], uint64_t a_desc,
                                           uint64_t b_desc) {
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wgmma::mma_s8_m64n128k32(sum, a_desc + 32 * kk / 16, b_desc + 32 * kk / 16, kk > 0);
  wgmma::commit();
}

// A consumer warpgroup (wg = 0, 1: rows m0 + 64 wg of the tile).
__device__ void consume_tiles(const GemmProblem& p, const CUtensorMap* map_a, uint8_t* smem,
                              Control& ctl, int wg) {
  using L = Layout;
  const int thread = threadIdx.x % kWarpgroup;
  const int steps = static_cast<int>((p.k + kStepK - 1) / kStepK);
  const int blocks = static_cast<int>(p.k / 32);
  const bool words_a = fold::scale_words(p.a);
  auto* generic_tiles = reinterpret_cast<generic::TileSmem*>(smem + L::kGenericOffset);
  uint8_t* raw_a = smem + L::kRawAOffset + wg * kRawStages * L::kRawABytes;
  uint64_t* raw_a_full = ctl.raw_a_full[wg];
  float* factors = reinterpret_cast<float*>(smem + L::kFactorOffset);
  const int warp = thread / 32, lane = thread % 32, g = lane / 4, q = lane % 4;
  const int acc_row = 64 * wg + 16 * warp + g;  // this thread's first accumulator row in the tile
  uint32_t use = 0;  // steps of foldable tiles so far: the uses of the int8 ring and the A ring
  int local = 0;
  float acc[L::kAcc];
  int32_t sums[L::kAcc];
  for (int tile = blockIdx.x; tile < persistent::tile_count<kTileM, kTileN>(p);
       tile += gridDim.x, ++local) {
    int64_t m0, n0;
    persistent::tile_origin<kTileM, kTileN, kGroupM>(p, tile, m0, n0);
    const int64_t rows0 = m0 + 64 * wg;
    const int slot = local % 2;
    pipeline::wait(&ctl.info_full[slot], (local / 2) & 1);
    const bool foldable = ctl.foldable[slot] != 0;
    pipeline::arrive(&ctl.info_empty[slot]);
    if (!foldable) {
      persistent::exact_rows<kTileN>(p, rows0, n0, thread, generic_tiles, wg);
      continue;
    }

    // Raw A rows, 64 bytes a step.
    const persistent::RawARing<kRawStages, L::kRawABytes, 64> ring_a(raw_a, raw_a_full, map_a,
                                                                     rows0, p.m);
    if (thread == 0) ring_a.prime(use, steps);
    // This thread's blocks: block thread % 4 of the warpgroup's A rows thread / 4 and 32 +
    // thread / 4 (raw blocks thread and thread + 128). Rows past M take the last row's scales.
    const int block = thread % 4;
    const uint8_t* a_rows[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t r = rows0 + thread / 4 + 32 * j;
      a_rows[j] = p.a.scale + (r < p.m ? r : p.m - 1) * p.a.scale_stride;
    }
    // The warpgroup's A rows of step `step` (ring use `a_use`) into their stage, with their rows'
    // factors beside it; then the warpgroup barrier (A written, raw slot read) and the refill.
    auto convert_a = [&](uint32_t a_use, int step) {
      const uint32_t a_slot = a_use % kRawStages, stage = a_use % kStages;
      pipeline::wait(&raw_a_full[a_slot], (a_use / kRawStages) & 1);
      const uint4* raw = reinterpret_cast<const uint4*>(raw_a + a_slot * L::kRawABytes);
      uint8_t* stage_bytes = smem + stage * L::kStageBytes;
      float* stage_factors = factors + stage * L::kFactorFloats;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const fold::FoldedRow f =
            fold::fold_row(fold::scale_word(a_rows[j], step, blocks, words_a));
        const int row = 64 * wg + thread / 4 + 32 * j;
        store_block(raw[thread + kWarpgroup * j], (f.shifts >> (8 * block)) & 0xFFu, stage_bytes,
                    row, block);
        if (block == 0) stage_factors[row] = __uint_as_float(f.base << 23);
      }
      wgmma::fence_shared_for_async();  // st.shared before the wgmmas' async-proxy reads
      pipeline::named_sync(kConsumerBarrier + wg, kWarpgroup);
      if (thread == 0 && step + kRawStages < steps)
        ring_a.load(a_use + kRawStages, step + kRawStages);
    };

#pragma unroll
    for (int i = 0; i < L::kAcc; ++i) acc[i] = 0.0f;
    convert_a(use, 0);
    for (int step = 0; step < steps; ++step, ++use) {
      const uint32_t stage = use % kStages;
      pipeline::wait(&ctl.full[stage], (use / kStages) & 1);  // B converted
      // One descriptor per stage: the others add byte offsets / 16 to its address field (shared
      // addresses stay below 2^18, so the 14-bit field never carries).
      const uint64_t stage_desc =
          wgmma::descriptor(wgmma::shared_address(smem + stage * L::kStageBytes));
      issue_step(sums, stage_desc + wg * 64 * 128 / 16, stage_desc + kTileM * 128 / 16);
      // The next step's A rows while this step's MMAs run (their stage's last MMAs, step + 1 -
      // kStages, are done), then this step's promotion.
      if (step + 1 < steps) convert_a(use + 1, step + 1);
      wgmma::wait<0>();
      wgmma::fence_operands(sums);
      promote(acc, sums, factors + stage * L::kFactorFloats, acc_row);
      pipeline::arrive(&ctl.empty[stage]);  // its MMAs and factors are done
    }

    // D = acc, then alpha, beta C, bias and one rounding.
#pragma unroll
    for (int j = 0; j < kTileN / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t m = rows0 + 16 * warp + g + (i >= 2 ? 8 : 0);
        const int64_t n = n0 + 8 * j + 2 * q + (i & 1);
        if (m < p.m && n < p.n) store_output(p, m, n, static_cast<double>(acc[4 * j + i]));
      }
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    gemm_int8_kernel(const __grid_constant__ GemmProblem p,
                     const __grid_constant__ CUtensorMap map_a,
                     const __grid_constant__ CUtensorMap map_b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using L = Layout;
  extern __shared__ __align__(1024) uint8_t smem[];  // no static shared memory: stages stay
                                                     // 1024-aligned
  Control& ctl = *reinterpret_cast<Control*>(smem + L::kControlOffset);
  if (threadIdx.x == 0) {
    ctl.init(kStages, kWarpgroup);
    pipeline::prefetch_map(&map_a);
    pipeline::prefetch_map(&map_b);
  }
  __syncthreads();
  if (threadIdx.x < kWarpgroup) {
    pipeline::shrink_registers<kConverterRegisters>();
    convert_tiles(p, &map_b, smem, ctl);
  } else {
    pipeline::grow_registers<kConsumerRegisters>();
    consume_tiles(p, &map_a, smem, ctl, threadIdx.x / kWarpgroup - 1);
  }
#else
  (void)p, (void)map_a, (void)map_b;
  __trap();
#endif
}

}  // namespace

std::string gemm_int8_why_not(const GemmProblem& p) {
  if (p.device.type != A4W4_DEVICE_CUDA) return "operands are not on a CUDA device";
  if (device_info(p.device.ordinal).major != 9) return "needs an sm_90 GPU (wgmma)";
  if (p.k % 32 != 0) return "K must be a multiple of 32";
  if (p.a.layout != A4W4_LAYOUT_PLAIN || p.b.layout != A4W4_LAYOUT_PLAIN)
    return "plain A and B only (no prepared B yet)";
  if (p.split_k > 1) return "no split-K";
  if (!tma::rows_loadable(p.a, p.k) || !tma::rows_loadable(p.b, p.k))
    return "A and B rows must start on 16 bytes, one after the other (TMA)";
  if (!tma::sizes_fit(p))
    return "M, N and K must be below 2^31 and the 128x128 tiles fewer than 2^31";
  return {};
}

void gemm_int8_128x128(const GemmProblem& p, const ExecConfig&) {
  DeviceGuard guard(p.device.ordinal);
  using L = Layout;
  static_assert(L::kBytes <= 227 * 1024);
  check_cuda(cudaFuncSetAttribute(gemm_int8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(L::kBytes)),
             "cudaFuncSetAttribute(gemm_int8_kernel)");
  // Boxes of one K step (64 packed bytes): 64 A rows per consumer warpgroup, the tile's B rows.
  const CUtensorMap map_a = tma::packed_map(p.a, p.m, p.k, 64, 64, "cuda.int8");
  const CUtensorMap map_b = tma::packed_map(p.b, p.n, p.k, 64, kTileN, "cuda.int8");
  const int64_t grid = std::min<int64_t>(persistent::tiles<kTileM, kTileN>(p.m, p.n),
                                         device_info(p.device.ordinal).sm_count);
  gemm_int8_kernel<<<static_cast<unsigned>(grid), kThreads, L::kBytes,
                     static_cast<cudaStream_t>(p.stream)>>>(p, map_a, map_b);
  check_launch("gemm_int8_kernel");
}

}  // namespace a4w4::cuda
