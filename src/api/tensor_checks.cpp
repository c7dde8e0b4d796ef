#include "api/tensor_checks.h"

#include <fmt/format.h>

#include <string>

#include "api/error.h"

namespace a4w4 {
namespace {

std::string dtype_list(std::initializer_list<a4w4_dtype> dtypes) {
  std::string out;
  for (a4w4_dtype dtype : dtypes) {
    if (!out.empty()) out += dtypes.size() == 2 ? " or " : ", ";
    out += a4w4_dtype_name(dtype);
  }
  return out;
}

// Checks shared by every descriptor: pointer, rank bound, enums, layout, dtype, data pointer.
void check_descriptor(const a4w4_tensor* t, const char* name,
                      std::initializer_list<a4w4_dtype> dtypes, bool allow_prepared = false) {
  if (t == nullptr) fail(A4W4_ERROR_INVALID_ARGUMENT, "{}: descriptor must not be NULL", name);
  if (t->rank < 0 || t->rank > A4W4_MAX_RANK)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "{}: rank must be in [0, {}], got {}", name, A4W4_MAX_RANK,
         t->rank);
  if (a4w4_dtype_bits(t->dtype) == 0)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "{}: dtype {} is not an a4w4_dtype value", name,
         static_cast<int>(t->dtype));
  bool accepted = false;
  for (a4w4_dtype dtype : dtypes) accepted |= dtype == t->dtype;
  if (!accepted)
    fail(A4W4_ERROR_UNSUPPORTED_DTYPE, "{}: expected dtype {}, got {}", name, dtype_list(dtypes),
         a4w4_dtype_name(t->dtype));
  if (t->device.type != A4W4_DEVICE_CPU && t->device.type != A4W4_DEVICE_CUDA)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "{}: device type {} is not an a4w4_device_type value",
         name, static_cast<int>(t->device.type));
  if (t->device.ordinal < 0 || (t->device.type == A4W4_DEVICE_CPU && t->device.ordinal != 0))
    fail(A4W4_ERROR_INVALID_ARGUMENT, "{}: device ordinal {} is not valid for a {} tensor", name,
         t->device.ordinal, t->device.type == A4W4_DEVICE_CPU ? "CPU" : "CUDA");
  if (t->layout != A4W4_LAYOUT_PLAIN && t->layout != A4W4_LAYOUT_PREPARED_V1 &&
      t->layout != A4W4_LAYOUT_PREPARED_V2 && t->layout != A4W4_LAYOUT_PREPARED_V2_INT8)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "{}: layout {} is not an a4w4_layout value", name,
         static_cast<int>(t->layout));
  if (t->layout != A4W4_LAYOUT_PLAIN && !allow_prepared)
    fail(A4W4_ERROR_UNSUPPORTED_LAYOUT,
         "{}: a prepared layout is accepted only for the GEMM weight B and its scales (expected "
         "plain)",
         name);
  for (int32_t i = 0; i < t->rank; ++i) {
    if (t->shape[i] < 1)
      fail(A4W4_ERROR_INVALID_ARGUMENT, "{}: every dimension must be >= 1, got shape {}", name,
           describe_shape(*t));
  }
  if (t->data == nullptr) fail(A4W4_ERROR_INVALID_ARGUMENT, "{}: data must not be NULL", name);
}

}  // namespace

std::string describe_shape(const a4w4_tensor& t) {
  std::string out = "[";
  for (int32_t i = 0; i < t.rank && i < A4W4_MAX_RANK; ++i)
    out += fmt::format("{}{}", i ? ", " : "", t.shape[i]);
  return out + "]";
}

MatrixView check_matrix(const a4w4_tensor* t, const char* name,
                        std::initializer_list<a4w4_dtype> dtypes) {
  check_descriptor(t, name, dtypes);
  if (t->rank != 2)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "{}: expected rank 2, got rank {} (shape {})", name, t->rank,
         describe_shape(*t));
  const int64_t rows = t->shape[0], cols = t->shape[1];
  // A size-1 dimension's stride is never used, so any value is accepted there (as DLPack allows).
  if (cols > 1 && t->strides[1] != 1)
    fail(A4W4_ERROR_UNSUPPORTED_LAYOUT,
         "{}: the last dimension must be contiguous (stride 1), got strides [{}, {}]", name,
         t->strides[0], t->strides[1]);
  const int64_t row_stride = rows > 1 ? t->strides[0] : cols;
  if (row_stride < cols)
    fail(A4W4_ERROR_INVALID_ARGUMENT,
         "{}: row stride must be >= the row length {} (rows may not overlap), got {}", name, cols,
         row_stride);
  if (row_stride > (int64_t{1} << 56) / rows)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "{}: {} rows of stride {} exceed the addressable size",
         name, rows, row_stride);
  if (t->dtype == A4W4_DTYPE_E2M1 && (cols % 2 != 0 || row_stride % 2 != 0))
    fail(A4W4_ERROR_INVALID_ARGUMENT,
         "{}: packed E2M1 rows must start on a byte: row length and row stride must be even, got "
         "{} and {}",
         name, cols, row_stride);
  return MatrixView{name, t->data, t->dtype, rows, cols, row_stride, t->device, t->layout, 0};
}

MatrixView check_weight_matrix(const a4w4_tensor* t, const char* name, a4w4_dtype dtype) {
  check_descriptor(t, name, {dtype}, /*allow_prepared=*/true);
  if (t->layout == A4W4_LAYOUT_PLAIN) return check_matrix(t, name, {dtype});
  if (t->rank != 2)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "{}: expected rank 2, got rank {} (shape {})", name, t->rank,
         describe_shape(*t));
  return MatrixView{name,        t->data,   t->dtype, t->shape[0], t->shape[1],
                    t->shape[1], t->device, t->layout, 0};
}

MatrixView check_vector(const a4w4_tensor* t, const char* name,
                        std::initializer_list<a4w4_dtype> dtypes) {
  check_descriptor(t, name, dtypes);
  if (t->rank != 1)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "{}: expected rank 1, got rank {} (shape {})", name, t->rank,
         describe_shape(*t));
  const int64_t n = t->shape[0];
  const int64_t stride = n > 1 ? t->strides[0] : 1;
  if (stride < 1)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "{}: stride must be >= 1, got {}", name, stride);
  if (stride > (int64_t{1} << 56) / n)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "{}: {} entries of stride {} exceed the addressable size",
         name, n, stride);
  // Viewed as n rows of one element each, so overlap checks see the real extent.
  return MatrixView{name, t->data, t->dtype, n, 1, stride, t->device, t->layout, 0};
}

void expect_shape(const MatrixView& view, int64_t rows, int64_t cols, const char* what) {
  if (view.rows != rows || view.cols != cols)
    fail(A4W4_ERROR_SHAPE_MISMATCH, "{}: expected shape [{}, {}] ({}), got [{}, {}]", view.name,
         rows, cols, what, view.rows, view.cols);
}

void check_k(const MatrixView& view, int64_t k) {
  if (k % 32 != 0)
    fail(A4W4_ERROR_K_NOT_MULTIPLE_OF_32,
         "{}: K = {} is not a multiple of the 32-element block size", view.name, k);
}

int64_t MatrixView::row_stride_bytes() const { return row_stride * a4w4_dtype_bits(dtype) / 8; }

uintptr_t MatrixView::begin() const { return reinterpret_cast<uintptr_t>(data); }

uintptr_t MatrixView::end() const {
  if (layout != A4W4_LAYOUT_PLAIN) return begin() + static_cast<uintptr_t>(prepared_bytes);
  const int64_t bits = a4w4_dtype_bits(dtype);
  return begin() + static_cast<uintptr_t>(((rows - 1) * row_stride + cols) * bits / 8);
}

bool overlaps(const MatrixView& x, const MatrixView& y) {
  if (x.device.type != y.device.type || x.device.ordinal != y.device.ordinal) return false;
  return x.begin() < y.end() && y.begin() < x.end();
}

void expect_disjoint(const MatrixView& output, const MatrixView& input) {
  if (overlaps(output, input))
    fail(A4W4_ERROR_INVALID_ARGUMENT, "{}: output memory overlaps input {}", output.name,
         input.name);
}

}  // namespace a4w4
