// Random operand data for the benchmarks, generated on the device (gigabytes of it would take the
// host far longer): a counter-based hash per element, so each set differs and nothing is zero.
#include <cuda_runtime_api.h>

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

__global__ void fill_kernel(uint8_t* data, size_t bytes, uint64_t seed, FillKind kind) {
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

__global__ void copy_kernel(const uint4* src, uint4* dst, size_t count) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

}  // namespace

cudaError_t copy_with_kernel(const void* src, void* dst, size_t bytes, int sm_count,
                             cudaStream_t stream) {
  copy_kernel<<<sm_count * 8, 256, 0, stream>>>(static_cast<const uint4*>(src),
                                                static_cast<uint4*>(dst), bytes / 16);
  return cudaGetLastError();
}

cudaError_t fill_random(void* data, size_t bytes, uint64_t seed, FillKind kind,
                        cudaStream_t stream) {
  fill_kernel<<<1024, 256, 0, stream>>>(static_cast<uint8_t*>(data), bytes, seed, kind);
  return cudaGetLastError();
}

}  // namespace a4w4::bench
