// The fast CPU kernels (issue 7), as the registry and the API see them. Each GEMM kernel adds only
// exact block partials (or exact sums of them) to a double accumulator: bit-identical to
// cpu.reference wherever the reference's own double sum is exact, within its error bound
// elsewhere (docs/cpu-backend.md). Each applies only where the CPU has its instruction set
// (cpu_features.h), which `why_not` reports.
#pragma once

#include <string>

#include "dispatch/problem.h"

namespace a4w4::cpu {

// M <= 4, plain B, AVX-512 VNNI + VBMI: streams packed B once (gemv.cpp).
std::string gemv_avx512_vnni_why_not(const GemmProblem& problem);
void gemv_avx512_vnni(const GemmProblem& problem, const ExecConfig& exec);

// Blocked GEMM on packed int8 panels (gemm_driver.cpp), any shape and layout.
std::string gemm_avx512_vnni_why_not(const GemmProblem& problem);
void gemm_avx512_vnni(const GemmProblem& problem, const ExecConfig& exec);
std::string gemm_avx2_why_not(const GemmProblem& problem);
void gemm_avx2(const GemmProblem& problem, const ExecConfig& exec);
void gemm_scalar(const GemmProblem& problem, const ExecConfig& exec);

// The quantizer behind a4w4_quantize on the CPU: the best SIMD variant for this CPU, bit-identical
// to reference_quantize. A4W4_CPU_QUANTIZE=reference in the environment (read on every call)
// selects the reference instead.
void quantize(const QuantizeProblem& problem, const ExecConfig& exec);
void quantize_avx512(const QuantizeProblem& problem, const ExecConfig& exec);
void quantize_avx2(const QuantizeProblem& problem, const ExecConfig& exec);

}  // namespace a4w4::cpu
