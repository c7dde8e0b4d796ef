// The CPU reference backend: the oracle every other backend is tested against. Exact per the
// contract (in-block sums in integers, block partials accumulated in double), threaded over tiles.
#pragma once

#include "dispatch/problem.h"

namespace a4w4::cpu {

void reference_gemm(const GemmProblem& problem, const ExecConfig& exec);
void reference_quantize(const QuantizeProblem& problem, const ExecConfig& exec);
void reference_dequantize(const DequantizeProblem& problem, const ExecConfig& exec);
void prepare_weight(const PrepareWeightProblem& problem, const ExecConfig& exec);
// The int8 part of a weight prepared as A4W4_LAYOUT_PREPARED_V2_INT8 (prepare_int8.cpp), after its
// version-2 tiles: the bytes the CUDA staging pass writes.
void prepare_int8_part(const PrepareWeightProblem& problem, const ExecConfig& exec);

// Row `row` of a packed operand (plain or prepared) as E2M1 codes: codes[k] for k < cols, and its
// scale bytes scales[b] for b < cols / 32.
void unpack_row(const PackedOperand& op, int64_t row, int64_t cols, uint8_t* codes,
                uint8_t* scales);

}  // namespace a4w4::cpu
