// Device-side random fills for benchmark operands.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace a4w4::bench {

enum class FillKind { kBytes, kScales, kBf16, kE4m3 };

// Fills bytes of device memory with data of the given kind (asynchronously on stream).
cudaError_t fill_random(void* data, size_t bytes, uint64_t seed, FillKind kind,
                        cudaStream_t stream);

}  // namespace a4w4::bench
