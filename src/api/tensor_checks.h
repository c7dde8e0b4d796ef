// Checks of a4w4_tensor descriptors. Each turns a descriptor into a typed view or fails with the
// specific status code and a message naming the argument, what was expected and what was given.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "a4w4/a4w4.h"

namespace a4w4 {

// A validated rank-2 (or rank-1 viewed as one row) operand. Strides count elements.
struct MatrixView {
  const char* name;
  void* data;
  a4w4_dtype dtype;
  int64_t rows, cols, row_stride;
  a4w4_device device;
  a4w4_layout layout;
  int64_t prepared_bytes;  // buffer size of a prepared tensor; 0 for plain ones

  // Bytes spanned, for overlap checks: [begin, end).
  uintptr_t begin() const;
  uintptr_t end() const;
  // row_stride in bytes (E2M1 strides are even, so this is exact).
  int64_t row_stride_bytes() const;
};

// Validates a descriptor that must be a plain, rank-2 matrix of one of `dtypes`, with a contiguous
// last dimension and non-overlapping rows.
MatrixView check_matrix(const a4w4_tensor* tensor, const char* name,
                        std::initializer_list<a4w4_dtype> dtypes);

// Like check_matrix, but also accepts a prepared layout (strides ignored). The caller checks
// the shape; prepared_bytes is filled once the logical [rows, cols] are known.
MatrixView check_weight_matrix(const a4w4_tensor* tensor, const char* name, a4w4_dtype dtype);

// Validates a rank-1 descriptor (e.g. bias [N]); returned as one row of `cols` elements whose
// element stride is row_stride (>= 1).
MatrixView check_vector(const a4w4_tensor* tensor, const char* name,
                        std::initializer_list<a4w4_dtype> dtypes);

// Fails with A4W4_ERROR_SHAPE_MISMATCH unless view is [rows, cols].
void expect_shape(const MatrixView& view, int64_t rows, int64_t cols, const char* what);

// Fails with A4W4_ERROR_K_NOT_MULTIPLE_OF_32 / A4W4_ERROR_INVALID_ARGUMENT for bad K.
void check_k(const MatrixView& view, int64_t k);

bool overlaps(const MatrixView& x, const MatrixView& y);

// Fails with A4W4_ERROR_INVALID_ARGUMENT when output overlaps input.
void expect_disjoint(const MatrixView& output, const MatrixView& input);

std::string describe_shape(const a4w4_tensor& tensor);

}  // namespace a4w4
