// a4w4 C++ wrapper: header-only, over the C API in a4w4.h. It adds RAII for the context and two
// ways of reporting failures: exceptions (a4w4::Error, from the throwing calls) or a4w4::Status
// values (from the try_ calls). It adds no numerics of its own.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "a4w4/a4w4.h"

namespace a4w4 {

// A status code with the message the library left for it.
class Status {
 public:
  Status() = default;
  Status(a4w4_status code, std::string message) : code_(code), message_(std::move(message)) {}
  // Captures the calling thread's last-error message when code is a failure.
  static Status from(a4w4_status code) {
    return code == A4W4_SUCCESS ? Status() : Status(code, a4w4_last_error_message());
  }
  bool ok() const { return code_ == A4W4_SUCCESS; }
  explicit operator bool() const { return ok(); }
  a4w4_status code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const {
    return ok() ? "ok" : std::string(a4w4_status_string(code_)) + ": " + message_;
  }

 private:
  a4w4_status code_ = A4W4_SUCCESS;
  std::string message_;
};

class Error : public std::runtime_error {
 public:
  explicit Error(const Status& status) : std::runtime_error(status.to_string()), status_(status) {}
  a4w4_status code() const { return status_.code(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// Throws a4w4::Error for a failed call.
inline void check(a4w4_status code) {
  if (code != A4W4_SUCCESS) throw Error(Status::from(code));
}

// Optional GEMM settings with their defaults (alpha 1, beta 0, split_k automatic, exact math).
struct GemmOptions {
  float alpha = 1.0f;
  float beta = 0.0f;
  int split_k = 0;
  std::string kernel;  // empty: let a4w4 choose
  a4w4_math_mode math_mode = A4W4_MATH_EXACT;
  bool b_constant = false;  // a4w4_gemm_options.b_constant

  a4w4_gemm_options to_c() const {
    a4w4_gemm_options options;
    a4w4_gemm_options_init(&options);
    options.alpha = alpha;
    options.beta = beta;
    options.split_k = split_k;
    options.kernel = kernel.empty() ? nullptr : kernel.c_str();
    options.math_mode = math_mode;
    options.b_constant = b_constant ? 1 : 0;
    return options;
  }
};

// The registered GEMM kernels and their metadata, in registry order.
using KernelProperties = a4w4_kernel_properties;
inline std::vector<KernelProperties> kernels() {
  std::vector<KernelProperties> out(static_cast<size_t>(a4w4_kernel_count()));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].struct_size = sizeof(KernelProperties);
    check(a4w4_kernel_describe(static_cast<int>(i), &out[i]));
  }
  return out;
}

// Owns an a4w4_context. Movable, not copyable; safe to share across threads by reference.
class Context {
 public:
  Context() { check(a4w4_context_create(&ctx_)); }
  ~Context() { a4w4_context_destroy(ctx_); }
  Context(Context&& other) noexcept : ctx_(std::exchange(other.ctx_, nullptr)) {}
  Context& operator=(Context&& other) noexcept {
    if (this != &other) {
      a4w4_context_destroy(ctx_);
      ctx_ = std::exchange(other.ctx_, nullptr);
    }
    return *this;
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  a4w4_context get() const { return ctx_; }

  void set_backend(a4w4_backend backend) { check(a4w4_context_set_backend(ctx_, backend)); }
  void set_num_threads(int threads) { check(a4w4_context_set_num_threads(ctx_, threads)); }
  // Device scratch memory for the staging kernels (a4w4_context_set_workspace); the memory stays
  // the caller's. clear_workspace() removes it.
  void set_workspace(a4w4_device device, void* ptr, size_t bytes) {
    check(a4w4_context_set_workspace(ctx_, device, ptr, bytes));
  }
  void clear_workspace() {
    check(a4w4_context_set_workspace(ctx_, a4w4_device{A4W4_DEVICE_CUDA, 0}, nullptr, 0));
  }
  // The workspace bytes every kernel can run an M x N x K GEMM with (a4w4_gemm_workspace_size).
  static size_t gemm_workspace_size(int64_t m, int64_t n, int64_t k) {
    size_t bytes = 0;
    check(a4w4_gemm_workspace_size(m, n, k, &bytes));
    return bytes;
  }

  // Tuned configurations (docs/kernels-and-tuning.md).
  Status try_load_tuned(const std::string& path) {
    return Status::from(a4w4_context_load_tuned(ctx_, path.c_str()));
  }
  void load_tuned(const std::string& path) { throw_if_failed(try_load_tuned(path)); }
  void clear_tuned() { check(a4w4_context_clear_tuned(ctx_)); }
  std::vector<std::string> tuned_warnings() const {
    int count = 0;
    check(a4w4_context_tuned_count(ctx_, nullptr, &count));
    std::vector<std::string> warnings;
    for (int i = 0; i < count; ++i) {
      char text[1024];
      check(a4w4_context_tuned_warning(ctx_, i, text, sizeof text));
      warnings.emplace_back(text);
    }
    return warnings;
  }

  // Whether kernel `name` can run this GEMM (the reason in the Status when not).
  Status try_applicable(const std::string& name, const a4w4_tensor& a, const a4w4_tensor& a_scale,
                        const a4w4_tensor& b, const a4w4_tensor& b_scale, const a4w4_tensor& d,
                        const a4w4_tensor* c = nullptr, const a4w4_tensor* bias = nullptr,
                        const GemmOptions& options = {}) const {
    const a4w4_gemm_options c_options = options.to_c();
    return Status::from(a4w4_kernel_applicable(ctx_, name.c_str(), &a, &a_scale, &b, &b_scale, c,
                                               bias, &d, &c_options));
  }
  // The kernel and split a gemm() with these arguments would run.
  a4w4_gemm_choice choose(const a4w4_tensor& a, const a4w4_tensor& a_scale, const a4w4_tensor& b,
                          const a4w4_tensor& b_scale, const a4w4_tensor& d,
                          const a4w4_tensor* c = nullptr, const a4w4_tensor* bias = nullptr,
                          const GemmOptions& options = {}) const {
    const a4w4_gemm_options c_options = options.to_c();
    a4w4_gemm_choice choice{};
    choice.struct_size = sizeof choice;
    check(a4w4_gemm_choose(ctx_, &a, &a_scale, &b, &b_scale, c, bias, &d, &c_options, &choice));
    return choice;
  }

  Status try_quantize(const a4w4_tensor& x, const a4w4_tensor& q, const a4w4_tensor& scale,
                      a4w4_scale_mode mode = A4W4_SCALE_RCEIL, void* stream = nullptr) const {
    return Status::from(a4w4_quantize(ctx_, &x, &q, &scale, mode, stream));
  }
  void quantize(const a4w4_tensor& x, const a4w4_tensor& q, const a4w4_tensor& scale,
                a4w4_scale_mode mode = A4W4_SCALE_RCEIL, void* stream = nullptr) const {
    throw_if_failed(try_quantize(x, q, scale, mode, stream));
  }

  Status try_dequantize(const a4w4_tensor& q, const a4w4_tensor& scale, const a4w4_tensor& y,
                        void* stream = nullptr) const {
    return Status::from(a4w4_dequantize(ctx_, &q, &scale, &y, stream));
  }
  void dequantize(const a4w4_tensor& q, const a4w4_tensor& scale, const a4w4_tensor& y,
                  void* stream = nullptr) const {
    throw_if_failed(try_dequantize(q, scale, y, stream));
  }

  // D = alpha * A.B^T + beta * C + bias; c and bias may be nullptr.
  Status try_gemm(const a4w4_tensor& a, const a4w4_tensor& a_scale, const a4w4_tensor& b,
                  const a4w4_tensor& b_scale, const a4w4_tensor& d,
                  const a4w4_tensor* c = nullptr, const a4w4_tensor* bias = nullptr,
                  const GemmOptions& options = {}, void* stream = nullptr) const {
    const a4w4_gemm_options c_options = options.to_c();
    return Status::from(
        a4w4_gemm(ctx_, &a, &a_scale, &b, &b_scale, c, bias, &d, &c_options, stream));
  }
  void gemm(const a4w4_tensor& a, const a4w4_tensor& a_scale, const a4w4_tensor& b,
            const a4w4_tensor& b_scale, const a4w4_tensor& d, const a4w4_tensor* c = nullptr,
            const a4w4_tensor* bias = nullptr, const GemmOptions& options = {},
            void* stream = nullptr) const {
    throw_if_failed(try_gemm(a, a_scale, b, b_scale, d, c, bias, options, stream));
  }

 private:
  static void throw_if_failed(const Status& status) {
    if (!status.ok()) throw Error(status);
  }

  a4w4_context ctx_ = nullptr;
};

}  // namespace a4w4
