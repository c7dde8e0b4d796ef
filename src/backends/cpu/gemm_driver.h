// The blocked, threaded MXFP4 GEMM shared by the fast CPU kernels; each ISA supplies only the
// micro-kernel for one kGroupRows x kPanelCols tile (gemm_vnni.cpp, gemm_int8_avx2.cpp,
// gemm_scalar.cpp).
//
// Exactness: the micro-kernels compute every 32-wide block dot product exactly in int32, turn it
// into the exact double isum * 2^(sa - 128) * 2^(sb - 128) and add it to a double accumulator,
// block after block in increasing K order, restarting at +0.0 for each split-K partition; the
// partition sums are added in order. That is the reference's computation step for step, so the
// result is bit-identical to cpu.reference for every input (NaN, Inf, extreme scales included).
#pragma once

#include <cstdint>

#include "backends/cpu/pack.h"
#include "dispatch/problem.h"

namespace a4w4::cpu {

// One micro-kernel call: acc[i][j] (row-major kGroupRows x kPanelCols doubles) += the block
// partials of `blocks` consecutive blocks, starting from +0.0 when `zero`.
struct MicroTile {
  const int8_t* a;               // packed A group at the first block
  const int32_t* a_corr;         // [blocks][kGroupRows]
  const double* a_scale;         // [blocks][kGroupRows]
  const uint8_t* a_scale_bytes;  // [blocks][kGroupRows]
  const uint8_t* b;              // packed B panel at the first block
  const double* b_scale;         // [blocks][kPanelCols]
  const uint8_t* b_scale_bytes;  // [blocks][kPanelCols]
  int64_t blocks;
  double* acc;
  bool zero;
};

using MicroKernel = void (*)(const MicroTile& tile);

// `pack_four`: the ISA's fast B packer (pack.h), or null for the portable one.
void run_blocked_gemm(const GemmProblem& problem, const ExecConfig& exec, MicroKernel micro,
                      PackFourColumns pack_four = nullptr);

// The micro-kernels, one per ISA family.
void micro_kernel_scalar(const MicroTile& tile);
void micro_kernel_avx2(const MicroTile& tile);
void micro_kernel_avx512_vnni(const MicroTile& tile);
void pack_four_columns_avx512(const uint8_t* const rows[4], int64_t blocks, uint8_t* values);

}  // namespace a4w4::cpu
