// Quantizer and dequantizer kernels. Four threads share one 32-element block: each reads 8
// consecutive values (16 or 32 bytes, vectorised when aligned), the four reduce the block's
// |max| with two shuffles, and each writes its 4 packed bytes; a warp thus reads 8 whole blocks,
// one contiguous span. The element and scale rules are numerics/mx.h's, shared with the CPU, so
// the result is bit-identical to the reference.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_utils.h"
#include "backends/cuda/device_common.cuh"
#include "numerics/mx.h"

namespace a4w4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kValuesPerThread = 8;
constexpr int kThreadsPerBlock32 = 32 / kValuesPerThread;

// Loads 8 consecutive values starting at `index` as floats (exact widening).
template <typename T>
__device__ __forceinline__ void load8(const void* base, int64_t index, bool vector_ok,
                                      float (&v)[8]) {
  const T* p = static_cast<const T*>(base) + index;
  if constexpr (sizeof(T) == 4) {
    if (vector_ok) {
      const float4 x0 = reinterpret_cast<const float4*>(p)[0];
      const float4 x1 = reinterpret_cast<const float4*>(p)[1];
      v[0] = x0.x, v[1] = x0.y, v[2] = x0.z, v[3] = x0.w;
      v[4] = x1.x, v[5] = x1.y, v[6] = x1.z, v[7] = x1.w;
      return;
    }
  } else {
    if (vector_ok) {
      const uint4 raw = *reinterpret_cast<const uint4*>(p);
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t lo = words[i] & 0xFFFFu, hi = words[i] >> 16;
        if constexpr (std::is_same_v<T, __nv_bfloat16>) {
          v[2 * i] = __uint_as_float(lo << 16);
          v[2 * i + 1] = __uint_as_float(hi << 16);
        } else {
          v[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(lo)));
          v[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(hi)));
        }
      }
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if constexpr (sizeof(T) == 4) {
      v[i] = p[i];
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      v[i] = __bfloat162float(p[i]);
    } else {
      v[i] = __half2float(p[i]);
    }
  }
}

// Each thread takes kPiecesPerThread pieces kThreads apart and issues all their loads before
// using any, so enough bytes are in flight to keep HBM busy.
constexpr int kPiecesPerThread = 4;

template <typename T>
__global__ void __launch_bounds__(kThreads) quantize_kernel(QuantizeProblem p, bool vector_ok) {
  const int64_t pieces_per_row = p.cols / kValuesPerThread;
  const int64_t total = p.rows * pieces_per_row;
  const int64_t first = int64_t{blockIdx.x} * kThreads * kPiecesPerThread + threadIdx.x;
  const int lane_in_block = threadIdx.x % kThreadsPerBlock32;
  float v[kPiecesPerThread][8];
#pragma unroll
  for (int u = 0; u < kPiecesPerThread; ++u) {
    const int64_t piece = first + u * kThreads;
    if (piece < total) {
      load8<T>(p.x.data, (piece / pieces_per_row) * p.x.stride + (piece % pieces_per_row) * 8,
               vector_ok, v[u]);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[u][i] = 0.0f;
    }
  }
#pragma unroll
  for (int u = 0; u < kPiecesPerThread; ++u) {
    // total is a multiple of 4, so the four threads of a block are in or out together; all
    // lanes take part in the shuffles.
    const int64_t piece = first + u * kThreads;
    uint32_t amax_bits = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) amax_bits = max(amax_bits, __float_as_uint(v[u][i]) & 0x7FFFFFFFu);
    amax_bits = max(amax_bits, __shfl_xor_sync(0xFFFFFFFFu, amax_bits, 1));
    amax_bits = max(amax_bits, __shfl_xor_sync(0xFFFFFFFFu, amax_bits, 2));
    if (piece >= total) continue;
    const int64_t row = piece / pieces_per_row, col = (piece % pieces_per_row) * kValuesPerThread;
    const uint8_t scale = numerics::block_scale_byte(amax_bits, p.mode);
    uint32_t packed = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      packed |= static_cast<uint32_t>(numerics::encode_element(v[u][i], scale)) << (4 * i);
    uint8_t* q = p.q + row * p.q_stride_bytes + col / 2;
    if (vector_ok) {
      *reinterpret_cast<uint32_t*>(q) = packed;
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) q[i] = static_cast<uint8_t>(packed >> (8 * i));
    }
    if (lane_in_block == 0) p.scale[row * p.scale_stride + col / 32] = scale;
  }
}

__global__ void __launch_bounds__(kThreads) dequantize_kernel(DequantizeProblem p) {
  const int64_t pieces_per_row = p.cols / kValuesPerThread;
  const int64_t total = p.rows * pieces_per_row;
  for (int64_t piece = blockIdx.x * int64_t{kThreads} + threadIdx.x; piece < total;
       piece += int64_t{gridDim.x} * kThreads) {
    const int64_t row = piece / pieces_per_row, col = (piece % pieces_per_row) * kValuesPerThread;
    const uint8_t* q = p.q.data + row * p.q.stride_bytes + col / 2;
    const uint8_t scale = p.q.scale[row * p.q.scale_stride + col / 32];
    // 2^(scale - 127) as a double (normal for every byte), NaN for 0xFF.
    const double factor = block_scale(scale, 127u + 2u);  // 2^(scale + 129 - 256)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t code = (q[i / 2] >> (4 * (i % 2))) & 0xFu;
      const auto doubled_magnitude = static_cast<int>(e2m1x4_to_s8x4(code & 0x7u) & 0xFFu);
      const double magnitude = doubled_magnitude * 0.5 * factor;
      store_rounded(p.y_dtype, p.y, row * p.y_stride + col + i, (code & 0x8u) ? -magnitude : magnitude);
    }
  }
}

int grid_for(int64_t threads_needed, int ordinal) {
  const int64_t blocks = (threads_needed + kThreads - 1) / kThreads;
  const int64_t cap = int64_t{device_info(ordinal).sm_count} * 16;  // enough to fill, then stride
  return static_cast<int>(blocks < cap ? (blocks > 0 ? blocks : 1) : cap);
}

bool aligned(const void* p, int64_t stride_bytes, int alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0 && stride_bytes % alignment == 0;
}

}  // namespace

void quantize(const QuantizeProblem& p) {
  DeviceGuard guard(p.device.ordinal);
  const int elem = p.x.dtype == A4W4_DTYPE_F32 ? 4 : 2;
  const bool vector_ok = aligned(p.x.data, p.x.stride * elem, 16) && aligned(p.q, p.q_stride_bytes, 4);
  const int64_t pieces = p.rows * (p.cols / kValuesPerThread);
  const int64_t per_block = int64_t{kThreads} * kPiecesPerThread;
  if ((pieces + per_block - 1) / per_block > 0x7FFFFFFF)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "x: too many elements for one quantize launch");
  const int grid = static_cast<int>((pieces + per_block - 1) / per_block);
  auto stream = static_cast<cudaStream_t>(p.stream);
  switch (p.x.dtype) {
    case A4W4_DTYPE_BF16:
      quantize_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(p, vector_ok);
      break;
    case A4W4_DTYPE_F16:
      quantize_kernel<__half><<<grid, kThreads, 0, stream>>>(p, vector_ok);
      break;
    default:
      quantize_kernel<float><<<grid, kThreads, 0, stream>>>(p, vector_ok);
      break;
  }
  check_launch("quantize_kernel");
}

void dequantize(const DequantizeProblem& p) {
  DeviceGuard guard(p.device.ordinal);
  const int grid = grid_for(p.rows * (p.cols / kValuesPerThread), p.device.ordinal);
  dequantize_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(p);
  check_launch("dequantize_kernel");
}

}  // namespace a4w4::cuda
