// Validated, backend-neutral descriptions of each operation. The API layer builds them after every
// argument check has passed; kernels read them and never re-validate.
#pragma once

#include <cstddef>
#include <cstdint>

#include "a4w4/a4w4.h"

namespace a4w4 {

// Packed E2M1 rows and E8M0 scale rows: strides are in bytes. A prepared operand (layout
// A4W4_LAYOUT_PREPARED_V1 or _V2, numerics/weight_layout.h) ignores the strides. (A weight
// prepared as A4W4_LAYOUT_PREPARED_V2_INT8 is described here as _V2, its version-2 part; its
// int8 part is GemmProblem::b_int8.)
struct PackedOperand {
  const uint8_t* data;
  int64_t stride_bytes;  // between rows of packed E2M1 (two elements per byte)
  const uint8_t* scale;
  int64_t scale_stride;  // between rows of E8M0 scales (one byte each)
  a4w4_layout layout;
};

// A float matrix or vector (F32, BF16 or F16); stride in elements between rows (or entries).
struct FloatOperand {
  const void* data;  // nullptr when the operand is absent
  a4w4_dtype dtype;
  int64_t stride;
};

struct GemmProblem {
  int64_t m, n, k;
  PackedOperand a, b;
  FloatOperand c;     // optional
  FloatOperand bias;  // optional, [n]
  void* d;
  a4w4_dtype d_dtype;
  int64_t d_stride;
  float alpha, beta;
  int split_k;  // 0 = let the kernel choose; else 1 <= split_k <= k / 32
  a4w4_math_mode math_mode;
  a4w4_device device;
  void* stream;
  // The context's workspace on `device` (a4w4_context_set_workspace); nullptr and 0 when none.
  void* workspace;
  size_t workspace_bytes;
  // B prepared as A4W4_LAYOUT_PREPARED_V2_INT8: its int8 part (dispatch/workspace.h,
  // PreparedInt8Layout), which the int8 family reads instead of staging B; else nullptr.
  const uint8_t* b_int8;
  // a4w4_gemm_options.b_constant: B and its scales may be read before the kernel ahead on the
  // stream has finished.
  bool b_constant;
};

struct QuantizeProblem {
  int64_t rows, cols;
  FloatOperand x;
  uint8_t* q;
  int64_t q_stride_bytes;
  uint8_t* scale;
  int64_t scale_stride;
  a4w4_scale_mode mode;
  a4w4_device device;
  void* stream;
};

struct DequantizeProblem {
  int64_t rows, cols;
  PackedOperand q;
  void* y;
  a4w4_dtype y_dtype;
  int64_t y_stride;
  a4w4_device device;
  void* stream;
};

// b [n, k] plain -> a prepared layout (numerics/weight_layout.h), padding zeroed.
struct PrepareWeightProblem {
  int64_t n, k;
  PackedOperand b;
  uint8_t* prepared;
  uint8_t* prepared_scale;
  a4w4_layout layout;  // of prepared and prepared_scale: A4W4_LAYOUT_PREPARED_V1, _V2 or _V2_INT8
  a4w4_device device;
  void* stream;
};

// What every kernel launch may use from its context.
struct ExecConfig {
  int num_threads;  // CPU threads, resolved (>= 1)
};

}  // namespace a4w4
