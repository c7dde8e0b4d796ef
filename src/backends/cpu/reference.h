// The CPU reference backend: the oracle every other backend is tested against. Exact per the
// contract (in-block sums in integers, block partials accumulated in double), threaded over tiles.
#pragma once

#include "dispatch/problem.h"

namespace a4w4::cpu {

void reference_gemm(const GemmProblem& problem, const ExecConfig& exec);
void reference_quantize(const QuantizeProblem& problem, const ExecConfig& exec);
void reference_dequantize(const DequantizeProblem& problem, const ExecConfig& exec);

}  // namespace a4w4::cpu
