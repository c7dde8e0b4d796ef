#include "gemm_runner.h"

#include <algorithm>
#include <cstring>

#include "float_bits.h"

namespace a4w4::cli {

a4w4_dtype library_dtype(OutDtype dtype) {
  switch (dtype) {
    case OutDtype::kBF16:
      return A4W4_DTYPE_BF16;
    case OutDtype::kF16:
      return A4W4_DTYPE_F16;
    case OutDtype::kF32:
      break;
  }
  return A4W4_DTYPE_F32;
}

const char* out_dtype_name(OutDtype dtype) {
  switch (dtype) {
    case OutDtype::kBF16:
      return "bf16";
    case OutDtype::kF16:
      return "fp16";
    case OutDtype::kF32:
      break;
  }
  return "fp32";
}

// fp32 rounding (2^-24) leaves ~1e-7; bf16 (2^-9) under 4e-3; fp16 (2^-12 relative) under 1e-3.
double check_tolerance(OutDtype dtype, a4w4_math_mode mode) {
  const double fast = mode == A4W4_MATH_FAST_ACCUM ? 1e-2 : 0.0;
  switch (dtype) {
    case OutDtype::kBF16:
      return std::max(fast, 4e-3);
    case OutDtype::kF16:
      return std::max(fast, 1e-3);
    case OutDtype::kF32:
      break;
  }
  return std::max(fast, 1e-5);
}

GemmRun::GemmRun(const GemmSettings& settings, DeviceMemory& memory, const MxMatrix& a,
                 const MxMatrix& b, const FloatMatrix* c, const FloatMatrix* bias)
    : memory_(memory), call_(settings.call), options_(call_.to_c()) {
  context_.set_backend(settings.backend);
  context_.set_num_threads(settings.threads);
  if (!settings.tuned.empty()) context_.load_tuned(settings.tuned);

  const a4w4_device device = memory.device();
  const auto mx_operand = [&](const MxMatrix& op, a4w4_tensor& values, a4w4_tensor& scales) {
    values = mx_values_tensor(op, memory.upload(op.values), device);
    scales = mx_scales_tensor(op, memory.upload(op.scales), device);
  };
  mx_operand(a, a_, a_scale_);
  mx_operand(b, b_, b_scale_);
  if (c != nullptr) {
    c_ = a4w4_tensor_2d(memory.upload(c->bytes), c->dtype, c->rows, c->cols, c->cols, device);
    has_c_ = true;
  }
  if (bias != nullptr) {
    bias_ = a4w4_tensor_1d(memory.upload(bias->bytes), bias->dtype, bias->cols, device);
    has_bias_ = true;
  }
  const a4w4_dtype d_dtype = library_dtype(settings.out);
  d_host_.resize(static_cast<size_t>(a.rows * b.rows * (a4w4_dtype_bits(d_dtype) / 8)));
  d_ = a4w4_tensor_2d(memory.output(d_host_), d_dtype, a.rows, b.rows, b.rows, device);
}

void GemmRun::run() {
  check(a4w4_gemm(context_.get(), &a_, &a_scale_, &b_, &b_scale_, has_c_ ? &c_ : nullptr,
                  has_bias_ ? &bias_ : nullptr, &d_, &options_, memory_.stream()),
        "gemm failed");
}

std::vector<uint8_t> GemmRun::result() {
  memory_.synchronize();
  memory_.download(d_.data, d_host_);
  return d_host_;
}

npy::Array result_array(OutDtype dtype, int64_t rows, int64_t cols, std::vector<uint8_t> raw) {
  switch (dtype) {
    case OutDtype::kF32:
      return make_array(npy::Dtype::kF32, rows, cols, std::move(raw));
    case OutDtype::kF16:
      return make_array(npy::Dtype::kF16, rows, cols, std::move(raw));
    case OutDtype::kBF16:
      break;
  }
  // NPY has no bf16: write each value as the float it is exactly (its bits shifted up by 16).
  std::vector<uint8_t> widened(raw.size() * 2);
  for (size_t i = 0; i < raw.size() / 2; ++i) {
    uint16_t bits;
    std::memcpy(&bits, raw.data() + 2 * i, 2);
    const float value = bf16_to_float(bits);
    std::memcpy(widened.data() + 4 * i, &value, 4);
  }
  return make_array(npy::Dtype::kF32, rows, cols, std::move(widened));
}

std::vector<double> result_values(OutDtype dtype, std::span<const uint8_t> raw) {
  std::vector<double> values;
  if (dtype == OutDtype::kF32) {
    values.resize(raw.size() / 4);
    for (size_t i = 0; i < values.size(); ++i) {
      float value;
      std::memcpy(&value, raw.data() + 4 * i, 4);
      values[i] = value;
    }
    return values;
  }
  values.resize(raw.size() / 2);
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, raw.data() + 2 * i, 2);
    values[i] = dtype == OutDtype::kBF16 ? bf16_to_float(bits) : half_to_float(bits);
  }
  return values;
}

}  // namespace a4w4::cli
