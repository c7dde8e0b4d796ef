// Device-side random fills for benchmark operands.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace a4w4::bench {

// kTypicalScales / kWideScales / kDriftScales: E8M0 bytes from block_scales.h's ranges (drift:
// rows of row_bytes scale bytes).
enum class FillKind { kBytes, kTypicalScales, kWideScales, kDriftScales, kBf16, kE4m3 };

// Fills bytes of device memory with data of the given kind (asynchronously on stream).
cudaError_t fill_random(void* data, size_t bytes, uint64_t seed, FillKind kind, cudaStream_t stream,
                        int64_t row_bytes = 0);

// Model-like bf16 data, rows x cols: Gaussian values times a per-row sigma drawn log-uniformly
// over [2^-row_spread, 1], and in a fraction outlier_fraction of the columns (the same columns in
// every row, as an activation's outlier channels) times outlier_gain.
cudaError_t fill_model_like_bf16(void* data, int64_t rows, int64_t cols, uint64_t seed,
                                 double row_spread, double outlier_fraction, float outlier_gain,
                                 cudaStream_t stream);

// Copies bytes (a multiple of 16) with an SM kernel: the device-memory bandwidth a kernel can
// reach (a cudaMemcpy inside a graph may run on the copy engines, which are slower).
cudaError_t copy_with_kernel(const void* src, void* dst, size_t bytes, int sm_count,
                             cudaStream_t stream);

// Reads bytes (a multiple of 16) with an SM kernel, four 16-byte loads in flight per thread, and
// writes nothing (one word per CTA into sink only if the data hash to a value they do not): the
// rate a kernel that only streams its input in reaches, such as a GEMV's weights.
cudaError_t read_with_kernel(const void* src, size_t bytes, uint32_t* sink, int sm_count,
                             cudaStream_t stream);

}  // namespace a4w4::bench
