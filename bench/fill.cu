// Random operand data for the benchmarks, generated on the device (gigabytes of it would take the
// host far longer): a counter-based hash per element, so each set differs and nothing is zero.
#include <cuda_runtime_api.h>

#include <cuda_bf16.h>

#include <cstdint>

#include "fill.h"

#include "block_scales.h"

namespace a4w4::bench {
namespace {

__device__ __forceinline__ uint32_t hash(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>(x ^ (x >> 31));
}

__global__ void fill_kernel(uint8_t* data, size_t bytes, uint64_t seed, FillKind kind,
                            int64_t row_bytes) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < bytes;
       i += size_t{gridDim.x} * blockDim.x) {
    const uint32_t h = hash(seed * 0x100000001B3ull + i);
    uint8_t v = static_cast<uint8_t>(h);
    switch (kind) {
      case FillKind::kTypicalScales:
      case FillKind::kWideScales: {
        const ScaleRange range = kind == FillKind::kWideScales ? kWideScales : kTypicalScales;
        v = static_cast<uint8_t>(range.first + (h & 0xFFFF) % range.count);
        break;
      }
      case FillKind::kDriftScales: {
        const int64_t tile = static_cast<int64_t>(i % row_bytes) / 4;
        v = static_cast<uint8_t>(kDriftScales.first + kDriftStep * (tile % 3) +
                                 (h & 0xFFFF) % kDriftScales.count);
        break;
      }
      case FillKind::kBf16:  // bf16 pairs: random sign and mantissa, exponent 2^-2..2^1
        v = (i & 1) ? static_cast<uint8_t>((h & 0x80) | (0x3E + (h >> 8) % 2)) : v;
        break;
      case FillKind::kE4m3:  // e4m3 without the NaN patterns 0x7F / 0xFF
        if ((v & 0x7F) == 0x7F) v &= 0xF7;
        break;
      case FillKind::kBytes:
        break;
    }
    data[i] = v;
  }
}

// A standard normal value from two hashes (Box-Muller).
__device__ __forceinline__ float normal(uint32_t h1, uint32_t h2) {
  const float u1 = (static_cast<float>(h1 >> 8) + 1.0f) * (1.0f / 16777217.0f);  // (0, 1]
  const float u2 = static_cast<float>(h2 >> 8) * (1.0f / 16777216.0f);
  return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

__global__ void model_like_kernel(__nv_bfloat16* data, int64_t rows, int64_t cols, uint64_t seed,
                                  float row_spread, uint32_t outlier_per_million,
                                  float outlier_gain) {
  const int64_t count = rows * cols;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < count;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    const float sigma = exp2f(-row_spread * (hash(seed * 31 + r) >> 8) * (1.0f / 16777216.0f));
    const bool outlier = hash(seed * 37 + c) % 1000000u < outlier_per_million;
    const float x =
        normal(hash(seed * 0x100000001B3ull + 2 * e), hash(seed * 0x100000001B3ull + 2 * e + 1));
    data[e] = __float2bfloat16_rn(x * sigma * (outlier ? outlier_gain : 1.0f));
  }
}

__global__ void copy_kernel(const uint4* src, uint4* dst, size_t count) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

__global__ void read_kernel(const uint4* src, size_t count, uint32_t* sink) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  uint32_t hash = 0;
  for (; i + 3 * stride < count; i += 4 * stride) {
    const uint4 v0 = __ldcs(src + i), v1 = __ldcs(src + i + stride),
                v2 = __ldcs(src + i + 2 * stride), v3 = __ldcs(src + i + 3 * stride);
    hash ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w;
    hash ^= v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
  }
  for (; i < count; i += stride) {
    const uint4 v = __ldcs(src + i);
    hash ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (hash == 0x9E3779B9u) sink[blockIdx.x] = hash;  // keeps the loads; almost never taken
}

}  // namespace

cudaError_t read_with_kernel(const void* src, size_t bytes, uint32_t* sink, int sm_count,
                             cudaStream_t stream) {
  read_kernel<<<sm_count * 8, 256, 0, stream>>>(static_cast<const uint4*>(src), bytes / 16, sink);
  return cudaGetLastError();
}

cudaError_t copy_with_kernel(const void* src, void* dst, size_t bytes, int sm_count,
                             cudaStream_t stream) {
  copy_kernel<<<sm_count * 8, 256, 0, stream>>>(static_cast<const uint4*>(src),
                                                static_cast<uint4*>(dst), bytes / 16);
  return cudaGetLastError();
}

cudaError_t fill_random(void* data, size_t bytes, uint64_t seed, FillKind kind, cudaStream_t stream,
                        int64_t row_bytes) {
  if (kind == FillKind::kDriftScales && row_bytes <= 0) return cudaErrorInvalidValue;
  fill_kernel<<<1024, 256, 0, stream>>>(static_cast<uint8_t*>(data), bytes, seed, kind, row_bytes);
  return cudaGetLastError();
}

cudaError_t fill_model_like_bf16(void* data, int64_t rows, int64_t cols, uint64_t seed,
                                 double row_spread, double outlier_fraction, float outlier_gain,
                                 cudaStream_t stream) {
  model_like_kernel<<<1024, 256, 0, stream>>>(
      static_cast<__nv_bfloat16*>(data), rows, cols, seed, static_cast<float>(row_spread),
      static_cast<uint32_t>(outlier_fraction * 1e6), outlier_gain);
  return cudaGetLastError();
}

}  // namespace a4w4::bench
