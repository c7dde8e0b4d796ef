// Host-side TMA tensor maps for the sm_90a kernel families (gemm_bf16.cu, gemm_int8.cu):
// cuTensorMapEncodeTiled from the driver the runtime uses (the library does not link libcuda) and
// unswizzled maps over packed operands, whose boxes past the end read as zeros.
#pragma once

#include <cuda.h>

#include <string>

#include "api/error.h"
#include "backends/cuda/cuda_utils.h"
#include "dispatch/problem.h"
#include "numerics/weight_layout.h"

namespace a4w4::cuda::tma {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                cudaEnableDefault, &found),
               "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (found != cudaDriverEntryPointSuccess || f == nullptr)
      fail(A4W4_ERROR_DEVICE, "the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// A tensor map of `rank` dimensions over `data` (unswizzled unless asked); boxes past the end read
// as zeros.
// `family` names the kernel family in the error message.
inline CUtensorMap tensor_map(CUtensorMapDataType type, cuuint32_t rank, const uint8_t* data,
                              const cuuint64_t* dims, const cuuint64_t* strides,
                              const cuuint32_t* box, const char* family,
                              CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE) {
  CUtensorMap map;
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};  // rank <= 4
  const CUresult r =
      encode_tiled()(&map, type, rank, const_cast<uint8_t*>(data), dims, strides, box,
                     element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    fail(A4W4_ERROR_DEVICE,
         "cuTensorMapEncodeTiled failed (" + std::to_string(r) + ") for a " + family + " operand");
  return map;
}

// The packed E2M1 bytes of `rows` plain rows as a 2D uint8 tensor, loaded in boxes of
// `box_bytes` bytes of K (2 values each) by `box_rows` rows; rows and bytes past the end read as
// zeros.
inline CUtensorMap packed_map(const PackedOperand& op, int64_t rows, int64_t k, int box_bytes,
                              int box_rows, const char* family,
                              CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k / 2), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(op.stride_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_bytes), static_cast<cuuint32_t>(box_rows)};
  return tensor_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, op.data, dims, strides, box, family, swizzle);
}

// A prepared B of version 2 (numerics/weight_layout.h) as a 4D tensor of bytes: a row's 64 bytes
// of a tile, the tile's 16 rows, K tiles, 16-row groups. A box of `box_bytes` (<= 64) of
// `box_rows` / 16 groups lands in shared memory as box_rows rows of box_bytes, exactly as
// plain_map's box of the same rows: the kernels read both alike. Coordinates: {(k % 128) / 2, 0,
// k / 128, n / 16}. Groups past the end (rows past N rounded up to 16) read as zeros.
inline CUtensorMap prepared_map(const PackedOperand& op, int64_t rows, int64_t k, int box_bytes,
                                int box_rows, const char* family,
                                CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE) {
  const int64_t k_tiles = layout::k_tiles(k);
  const cuuint64_t dims[4] = {layout::kRowRunBytes, layout::kTileRows,
                              static_cast<cuuint64_t>(k_tiles),
                              static_cast<cuuint64_t>(layout::row_groups(rows))};
  const cuuint64_t strides[3] = {layout::kRowRunBytes, layout::kTileBytes,
                                 static_cast<cuuint64_t>(k_tiles * layout::kTileBytes)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(box_bytes), layout::kTileRows, 1,
                             static_cast<cuuint32_t>(box_rows / layout::kTileRows)};
  return tensor_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, op.data, dims, strides, box, family, swizzle);
}

// Whether TMA can load a plain packed operand's rows: 16-byte aligned base and row stride, the
// stride at least a row (K / 2 bytes) and below 2^40.
inline bool rows_loadable(const PackedOperand& op, int64_t k) {
  return reinterpret_cast<uintptr_t>(op.data) % 16 == 0 && op.stride_bytes % 16 == 0 &&
         op.stride_bytes >= k / 2 && op.stride_bytes < (int64_t{1} << 40);
}

// Whether M, N and K fit TMA's int32 coordinates and the 128 x 128 tiles of a persistent loop an
// int tile index.
inline bool sizes_fit(const GemmProblem& p) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  return p.m < kLimit && p.n < kLimit && p.k < kLimit &&
         (p.m + 127) / 128 * ((p.n + 127) / 128) < kLimit;
}

// What the sm_90a families that load A and a plain or prepared B as TMA boxes (gemm_bf16.cu,
// gemm_int8.cu) need beyond their own K rule, as the first failing phrase, or empty: an sm_90
// device, a plain A, B plain or A4W4_LAYOUT_PREPARED_V2, no split-K, rows TMA can load, a prepared
// B on 16 bytes and its scales on `prepared_scale_alignment`, sizes TMA coordinates and a tile
// index hold.
inline std::string sm90_operands_why_not(const GemmProblem& p, int prepared_scale_alignment) {
  if (p.device.type != A4W4_DEVICE_CUDA) return "operands are not on a CUDA device";
  if (device_info(p.device.ordinal).major != 9) return "needs an sm_90 GPU (wgmma)";
  if (p.a.layout != A4W4_LAYOUT_PLAIN)
    return "a plain A only (the prepared layout is for the weight B)";
  if (p.split_k > 1) return "no split-K";
  if (!rows_loadable(p.a, p.k) || (p.b.layout == A4W4_LAYOUT_PLAIN && !rows_loadable(p.b, p.k)))
    return "A and B rows must start on 16 bytes, one after the other (TMA)";
  if (std::string why = prepared_b_why_not(p.b, 16, prepared_scale_alignment); !why.empty())
    return why;
  if (!sizes_fit(p)) return "M, N and K must be below 2^31 and the 128x128 tiles fewer than 2^31";
  return {};
}

}  // namespace a4w4::cuda::tma
