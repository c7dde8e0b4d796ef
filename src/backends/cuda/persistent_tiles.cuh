// The persistent tile loop shared by the sm_90a warp-specialised families (gemm_bf16.cu,
// gemm_int8.cu): one CTA per SM walks the tiles of D in groups of kGroupM tile rows, column by
// column, so consecutive CTAs share B tiles in L2; tiles whose scales cannot be folded run the
// generic kernel's exact tile code, a 64 x 64 quarter at a time per consumer warpgroup. Also the
// pieces of their pipelines that are the same in both: the mbarriers and each consumer
// warpgroup's raw A ring.
#pragma once

#include <cstdint>

#include "backends/cuda/generic_tile.cuh"
#include "backends/cuda/pipeline.cuh"
#include "dispatch/problem.h"

namespace a4w4::cuda::persistent {

// The mbarriers of a family's CTA, first in its shared-memory control block: a ring of raw B stages
// (TMA -> the converter warpgroup), each consumer warpgroup's raw A ring (TMA -> itself), the
// converted stages (converters -> consumers -> converters) and two slots of tile verdicts (the
// converters' pre-pass -> consumers).
template <int kRawStages, int kMaxStages>
struct Barriers {
  uint64_t raw_full[kRawStages];                 // TMA landed (expect-tx)
  uint64_t raw_empty[kRawStages];                // every converter has read the raw stage
  uint64_t raw_a_full[2][kRawStages];            // each consumer warpgroup's A ring: TMA landed
  uint64_t full[kMaxStages], empty[kMaxStages];  // converters -> consumers -> converters
  uint64_t info_full[2], info_empty[2];          // the tile's verdict: converters -> consumers

  // By one thread before the CTA's first barrier, for `stages` converted stages in use and
  // warpgroups of `warpgroup` threads (one converter warpgroup, two consumer ones).
  __device__ __forceinline__ void init(int stages, int warpgroup) {
    for (int i = 0; i < kRawStages; ++i) {
      pipeline::init(&raw_full[i], 1);
      pipeline::init(&raw_empty[i], warpgroup);
      pipeline::init(&raw_a_full[0][i], 1);
      pipeline::init(&raw_a_full[1][i], 1);
    }
    for (int i = 0; i < stages; ++i) {
      pipeline::init(&full[i], warpgroup);       // every converter thread
      pipeline::init(&empty[i], 2 * warpgroup);  // every consumer thread
    }
    for (int i = 0; i < 2; ++i) {
      pipeline::init(&info_full[i], warpgroup);  // every converter thread (its tables written)
      pipeline::init(&info_empty[i], 2 * warpgroup);
    }
    pipeline::fence_init();
  }
};

// Tiles of kTileM x kTileN covering an m x n D.
template <int kTileM, int kTileN>
__host__ __device__ __forceinline__ int64_t tiles(int64_t m, int64_t n) {
  return (m + kTileM - 1) / kTileM * ((n + kTileN - 1) / kTileN);
}

template <int kTileM, int kTileN>
__device__ __forceinline__ int tile_count(const GemmProblem& p) {
  return static_cast<int>(tiles<kTileM, kTileN>(p.m, p.n));
}

// The origin (m0, n0) of tile t of the loop.
template <int kTileM, int kTileN, int kGroupM>
__device__ __forceinline__ void tile_origin(const GemmProblem& p, int t, int64_t& m0, int64_t& n0) {
  const int tiles_m = static_cast<int>((p.m + kTileM - 1) / kTileM);
  const int tiles_n = static_cast<int>((p.n + kTileN - 1) / kTileN);
  const int per_group = kGroupM * tiles_n;
  const int first_m = t / per_group * kGroupM, in_group = t % per_group;
  const int group_m = min(kGroupM, tiles_m - first_m);
  m0 = int64_t{first_m + in_group % group_m} * kTileM;
  n0 = int64_t{in_group / group_m} * kTileN;
}

// The exact generic code for consumer warpgroup wg's 64 rows from rows0 of a tile that does not
// fold, over its kTileN columns from n0, 64 x 64 at a time (named barrier 2 + wg). Rows past M:
// nothing to do.
template <int kTileN>
__device__ __forceinline__ void exact_rows(const GemmProblem& p, int64_t rows0, int64_t n0,
                                           int thread, generic::TileSmem* tiles, int wg) {
  if (rows0 >= p.m) return;
  for (int64_t q0 = n0; q0 < n0 + kTileN && q0 < p.n; q0 += generic::kTile) {
    if (wg == 0) {
      generic::tile<2>(p, rows0, q0, thread, tiles[0]);
    } else {
      generic::tile<3>(p, rows0, q0, thread, tiles[1]);
    }
  }
}

// A consumer warpgroup's ring of kRawStages raw A stages, filled by TMA (one thread issues):
// kStepBytes bytes of each of its 64 rows from `row` per K step. A warpgroup whose rows all lie
// past M (never stored) loads the last rows instead.
template <int kRawStages, int kSlotBytes, int kStepBytes>
struct RawARing {
  uint8_t* slots;
  uint64_t* full;  // per slot: TMA landed (expect-tx)
  const CUtensorMap* map;
  int row;

  __device__ __forceinline__ RawARing(uint8_t* slots, uint64_t* full, const CUtensorMap* map,
                                      int64_t rows0, int64_t m)
      : slots(slots), full(full), map(map), row(static_cast<int>(rows0 < m ? rows0 : m - 1)) {}

  // K step `step` into ring use `use` (every thread of the warpgroup has read the slot's previous
  // contents: the caller passed the warpgroup barrier after them).
  __device__ __forceinline__ void load(uint32_t use, int step) const {
    const uint32_t slot = use % kRawStages;
    pipeline::arrive_expect_tx(&full[slot], kSlotBytes);
    pipeline::tma_load_2d(slots + slot * kSlotBytes, map, &full[slot], kStepBytes * step, row);
  }
  // A tile's first steps (at most kRawStages of its `steps`), from ring use `use`.
  __device__ __forceinline__ void prime(uint32_t use, int steps) const {
    for (int s = 0; s < min(kRawStages, steps); ++s) load(use + s, s);
  }
};

}  // namespace a4w4::cuda::persistent
