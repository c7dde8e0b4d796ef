// Entry points of the CUDA backend, called by the API layer after validation. In a build without
// CUDA they are defined by not_compiled.cpp and fail with A4W4_ERROR_BACKEND_NOT_COMPILED.
// Every entry point runs asynchronously on problem.stream: no synchronisation, no allocation.
#pragma once

#include <string>

#include "dispatch/problem.h"

namespace a4w4::cuda {

// Fails with A4W4_ERROR_DEVICE_MISMATCH unless ptr is memory that `device` can read as its
// descriptor claims (device or managed memory of that GPU for CUDA tensors; not device memory
// for CPU tensors).
void check_pointer(const void* ptr, a4w4_device device, const char* name);

void quantize(const QuantizeProblem& problem);
void dequantize(const DequantizeProblem& problem);
void prepare_weight(const PrepareWeightProblem& problem);

// GEMM kernel families (registered in dispatch/registry.cpp).
// The bf16 wgmma family for large M (gemm_bf16.cu), sm_90a: 128 x 256 and 128 x 128 tiles.
std::string gemm_bf16_why_not(const GemmProblem& problem);
void gemm_bf16_128x256(const GemmProblem& problem, const ExecConfig& exec);
void gemm_bf16_128x128(const GemmProblem& problem, const ExecConfig& exec);
// The int8 wgmma family, exact mode (gemm_int8.cu), sm_90a: 128 x 128 tiles on A and B staged as
// folded int8 in the context's workspace (problem.workspace); tiles that do not fold run on the
// bf16 family in the same call. Chosen by the heuristic whenever the workspace is there.
std::string gemm_int8_why_not(const GemmProblem& problem);
void gemm_int8_128x128(const GemmProblem& problem, const ExecConfig& exec);
// The same on 128 x 192 tiles (the bf16 family applicable for the tiles that do not fold).
std::string gemm_int8_128x192_why_not(const GemmProblem& problem);
void gemm_int8_128x192(const GemmProblem& problem, const ExecConfig& exec);
// The same family staging A only: B's codes are converted inside the GEMM (plain B, and the bf16
// family applicable for the tiles that do not fold).
std::string gemm_int8_bconv_why_not(const GemmProblem& problem);
void gemm_int8_bconv_128x128(const GemmProblem& problem, const ExecConfig& exec);
// Writes the int8 part of a weight prepared as A4W4_LAYOUT_PREPARED_V2_INT8 (problem.prepared
// holds its version-2 tiles): B staged as the family stages it in a call.
void prepare_int8_part(const PrepareWeightProblem& problem);
std::string gemm_generic_why_not(const GemmProblem& problem);
void gemm_generic(const GemmProblem& problem, const ExecConfig& exec);
// The skinny family for M <= 64 (gemm_skinny.cu), sm_90a: int8 wgmma with the weights in registers.
std::string gemm_skinny_why_not(const GemmProblem& problem);
void gemm_skinny(const GemmProblem& problem, const ExecConfig& exec);
std::string gemm_decode_why_not(const GemmProblem& problem);
void gemm_decode(const GemmProblem& problem, const ExecConfig& exec);
// The GEMV family for M <= 4 on a plain B (gemm_gemv.cu), sm_90: dp4a block sums.
std::string gemm_gemv_why_not(const GemmProblem& problem);
void gemm_gemv(const GemmProblem& problem, const ExecConfig& exec);

}  // namespace a4w4::cuda
