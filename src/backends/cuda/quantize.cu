// Quantizer and dequantizer kernels. The quantizer gives each thread one 32-element block: it
// reads the block's 64 or 128 bytes (16-byte loads when aligned), finds the scale from the block's
// |max| and writes 16 packed bytes and the scale byte, so a warp covers 32 consecutive blocks. (A
// grid-stride variant sized to the resident CTAs, loading the next block ahead, measured slower:
// 58.8 us instead of 50.8 us at 8192 x 8192 bf16 on the H200; so did two blocks per thread, 58.4
// us. CTAs of 128 threads ran 50.2 us against 51.0 for 256 and 53.5 for 512.) The element and scale
// rules are numerics/mx.h's, shared with the CPU, so the result is bit-identical to the reference.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "backends/cuda/cluster_launch.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_utils.h"
#include "backends/cuda/device_common.cuh"
#include "numerics/mx.h"

namespace a4w4::cuda {
namespace {

constexpr int kThreads = 128;        // quantizer CTAs: see above; also the dequantizer's
constexpr int kValuesPerThread = 8;  // dequantizer

// Widens the 16-bit float in the low half of `half_bits` exactly to fp32.
template <typename T>
__device__ __forceinline__ float widen(uint32_t half_bits) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float(half_bits << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(half_bits)));
  }
}

// The 32 values of one block as raw words: 16 words of two 16-bit floats, or 32 fp32 words.
template <typename T>
struct BlockValues {
  static constexpr int kWords = sizeof(T) == 4 ? 32 : 16;
  uint32_t words[kWords];
  __device__ float value(int i) const {
    if constexpr (sizeof(T) == 4) {
      return __uint_as_float(words[i]);
    } else {
      return widen<T>(i % 2 ? words[i / 2] >> 16 : words[i / 2] & 0xFFFFu);
    }
  }
};

template <typename T>
__device__ __forceinline__ void load_block(const void* base, int64_t index, bool vector_ok,
                                           BlockValues<T>& out) {
  const T* p = static_cast<const T*>(base) + index;
  if (vector_ok) {  // 16-byte loads through the read-only path (L1 keeps the other half-sectors)
#pragma unroll
    for (int i = 0; i < BlockValues<T>::kWords / 4; ++i) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
      out.words[4 * i] = v.x, out.words[4 * i + 1] = v.y;
      out.words[4 * i + 2] = v.z, out.words[4 * i + 3] = v.w;
    }
    return;
  }
  const auto* raw =
      reinterpret_cast<const std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>*>(p);
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    if constexpr (sizeof(T) == 4) {
      out.words[i] = raw[i];
    } else if (i % 2 == 0) {
      out.words[i / 2] = raw[i];
    } else {
      out.words[i / 2] |= static_cast<uint32_t>(raw[i]) << 16;
    }
  }
}

// |max| of the block as fp32 bits, compared as integers so a NaN wins over Inf over finite values.
template <typename T>
__device__ __forceinline__ uint32_t block_amax_bits(const BlockValues<T>& v) {
  if constexpr (sizeof(T) == 4) {
    uint32_t amax = 0;
#pragma unroll
    for (int i = 0; i < 32; ++i) amax = max(amax, v.words[i] & 0x7FFFFFFFu);
    return amax;
  } else {
    uint32_t amax2 = 0;  // two 16-bit maxima side by side
#pragma unroll
    for (int i = 0; i < 16; ++i) amax2 = __vmaxu2(amax2, v.words[i] & 0x7FFF7FFFu);
    const uint32_t amax16 = max(amax2 & 0xFFFFu, amax2 >> 16);
    // The bits of the widened value (widening keeps the order, NaN stays NaN).
    return __float_as_uint(widen<T>(amax16)) & 0x7FFFFFFFu;
  }
}

// The E2M1 magnitude code of y = |v| / 2^e (the rules of numerics/mx.h), from the bits of
// t = y * 2^-126: below 1, y lands in fp32's subnormals with bit 22 worth 0.5, and from 1 up bit 22
// is the first mantissa bit, so one round-to-nearest-even at bit 22 is the E2M1 rounding (ties to
// the even code) and t's bits >> 22 are the code (saturated at 7). y * 2^-126 must be exact or
// rounded to odd for that single rounding to be right: the 16-bit inputs have at most 11
// significant bits, so it is exact for every y that can round up to 0.5; fp32 inputs round to odd.
template <bool kRoundToOdd>
__device__ __forceinline__ uint32_t magnitude_code(float y) {
  constexpr float kSubnormalUnit = 1.1754943508222875e-38f;  // 2^-126
  uint32_t bits;
  if constexpr (kRoundToOdd) {
    const float down = __fmul_rz(y, kSubnormalUnit);
    bits = __float_as_uint(down) | (down != __fmul_ru(y, kSubnormalUnit) ? 1u : 0u);
  } else {
    bits = __float_as_uint(__fmul_rn(y, kSubnormalUnit));
  }
  const uint32_t rounded = bits + 0x1FFFFFu + ((bits >> 22) & 1u);
  return min(rounded >> 22, 7u);
}

// One thread per 32-element block: loads its 64 or 128 bytes, finds the scale, writes 16 packed
// bytes and the scale byte. A warp covers 32 consecutive blocks of a row (or rows).
template <typename T>
__global__ void __launch_bounds__(kThreads) quantize_kernel(QuantizeProblem p, bool vector_ok) {
  // Launched early on sm_90 (see quantize()): the next kernel may start as this grid's last CTAs
  // do, and nothing is read or written before the kernel ahead of this one is done.
  allow_next_grid();
  wait_for_previous_grid();
  const int64_t blocks_per_row = p.cols / 32;
  const int64_t block = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  if (block >= p.rows * blocks_per_row) return;
  const int64_t row = block / blocks_per_row, col = (block % blocks_per_row) * 32;
  BlockValues<T> v;
  load_block<T>(p.x.data, row * p.x.stride + col, vector_ok, v);

  const uint8_t scale = numerics::block_scale_byte(block_amax_bits(v), p.mode);
  uint32_t packed[4] = {0, 0, 0, 0};
  if (scale != numerics::kScaleNaN) {
    const float inverse = numerics::inverse_scale(scale);
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const float x = v.value(i);
      const uint32_t code =
          magnitude_code<sizeof(T) == 4>(fabsf(x) * inverse) | ((__float_as_uint(x) >> 28) & 0x8u);
      packed[i / 8] |= code << (4 * (i % 8));
    }
  }
  uint8_t* q = p.q + row * p.q_stride_bytes + col / 2;
  if (vector_ok) {
    *reinterpret_cast<uint4*>(q) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) q[i] = static_cast<uint8_t>(packed[i / 4] >> (8 * (i % 4)));
  }
  p.scale[row * p.scale_stride + col / 32] = scale;
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
      store_rounded(p.y_dtype, p.y, row * p.y_stride + col + i,
                    (code & 0x8u) ? -magnitude : magnitude);
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
  const bool vector_ok =
      aligned(p.x.data, p.x.stride * elem, 16) && aligned(p.q, p.q_stride_bytes, 16);
  const int64_t blocks = p.rows * (p.cols / 32);
  if ((blocks + kThreads - 1) / kThreads > 0x7FFFFFFF)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "x: too many elements for one quantize launch");
  const dim3 grid(static_cast<unsigned>((blocks + kThreads - 1) / kThreads));
  // On sm_90 its start overlaps the end of the kernel ahead of it (programmatic dependent launch).
  const LaunchOrder order =
      device_info(p.device.ordinal).major >= 9 ? LaunchOrder::kEarly : LaunchOrder::kAfterPrevious;
  const auto kernel = p.x.dtype == A4W4_DTYPE_BF16  ? quantize_kernel<__nv_bfloat16>
                      : p.x.dtype == A4W4_DTYPE_F16 ? quantize_kernel<__half>
                                                    : quantize_kernel<float>;
  launch_kernel(kernel, grid, kThreads, 0, p.stream, "quantize_kernel launch", order, false, p,
                vector_ok);
}

void dequantize(const DequantizeProblem& p) {
  DeviceGuard guard(p.device.ordinal);
  const int grid = grid_for(p.rows * (p.cols / kValuesPerThread), p.device.ordinal);
  dequantize_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(p);
  check_launch("dequantize_kernel");
}

}  // namespace a4w4::cuda
