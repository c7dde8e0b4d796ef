// Device-side random fills for benchmark operands.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace a4w4::bench {

// kTypicalScales / kWideScales: E8M0 bytes from block_scales.h's ranges.
enum class FillKind { kBytes, kTypicalScales, kWideScales, kBf16, kE4m3 };

// Fills bytes of device memory with data of the given kind (asynchronously on stream).
cudaError_t fill_random(void* data, size_t bytes, uint64_t seed, FillKind kind,
                        cudaStream_t stream);

// Copies bytes (a multiple of 16) with an SM kernel: the device-memory bandwidth a kernel can
// reach (a cudaMemcpy inside a graph may run on the copy engines, which are slower).
cudaError_t copy_with_kernel(const void* src, void* dst, size_t bytes, int sm_count,
                             cudaStream_t stream);

}  // namespace a4w4::bench
