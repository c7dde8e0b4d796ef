// Status strings, the per-thread last-error message, version and dtype/enum name helpers.
#include <cstring>
#include <string>

#include "a4w4/a4w4.h"
#include "api/error.h"

namespace a4w4 {
namespace {
thread_local std::string last_error_message;
}

void set_last_error_message(const char* message) noexcept {
  try {
    last_error_message = message;
  } catch (...) {
    // Out of memory while recording the message: keep the code, drop the text.
    last_error_message.clear();
  }
}

void set_last_error_message(a4w4_status, const char* function, const char* message) noexcept {
  try {
    last_error_message = std::string(function) + ": " + message;
  } catch (...) {
    set_last_error_message(message);
  }
}

}  // namespace a4w4

extern "C" {

int a4w4_version(void) { return A4W4_VERSION; }

const char* a4w4_version_string(void) {
#define A4W4_STR2(x) #x
#define A4W4_STR(x) A4W4_STR2(x)
  return A4W4_STR(A4W4_VERSION_MAJOR) "." A4W4_STR(A4W4_VERSION_MINOR) "." A4W4_STR(
      A4W4_VERSION_PATCH);
#undef A4W4_STR
#undef A4W4_STR2
}

const char* a4w4_status_string(a4w4_status status) {
  switch (status) {
    case A4W4_SUCCESS:
      return "A4W4_SUCCESS: success";
    case A4W4_ERROR_INVALID_ARGUMENT:
      return "A4W4_ERROR_INVALID_ARGUMENT: invalid argument";
    case A4W4_ERROR_SHAPE_MISMATCH:
      return "A4W4_ERROR_SHAPE_MISMATCH: operand shapes do not agree";
    case A4W4_ERROR_UNSUPPORTED_DTYPE:
      return "A4W4_ERROR_UNSUPPORTED_DTYPE: dtype not supported for this operand";
    case A4W4_ERROR_UNSUPPORTED_LAYOUT:
      return "A4W4_ERROR_UNSUPPORTED_LAYOUT: memory layout not supported";
    case A4W4_ERROR_K_NOT_MULTIPLE_OF_32:
      return "A4W4_ERROR_K_NOT_MULTIPLE_OF_32: K is not a multiple of the 32-element block";
    case A4W4_ERROR_BACKEND_NOT_COMPILED:
      return "A4W4_ERROR_BACKEND_NOT_COMPILED: backend not compiled into this build";
    case A4W4_ERROR_NO_DEVICE:
      return "A4W4_ERROR_NO_DEVICE: no usable device";
    case A4W4_ERROR_DEVICE_MISMATCH:
      return "A4W4_ERROR_DEVICE_MISMATCH: tensors are not on the device the call runs on";
    case A4W4_ERROR_KERNEL_NOT_FOUND:
      return "A4W4_ERROR_KERNEL_NOT_FOUND: no kernel of that name";
    case A4W4_ERROR_KERNEL_NOT_APPLICABLE:
      return "A4W4_ERROR_KERNEL_NOT_APPLICABLE: kernel cannot run this problem";
    case A4W4_ERROR_CONFIG:
      return "A4W4_ERROR_CONFIG: configuration error";
    case A4W4_ERROR_DEVICE:
      return "A4W4_ERROR_DEVICE: device runtime error";
    case A4W4_ERROR_OUT_OF_MEMORY:
      return "A4W4_ERROR_OUT_OF_MEMORY: out of memory";
    case A4W4_ERROR_INTERNAL:
      return "A4W4_ERROR_INTERNAL: internal error in a4w4";
  }
  return "unknown a4w4_status code";
}

const char* a4w4_last_error_message(void) { return a4w4::last_error_message.c_str(); }

int a4w4_dtype_bits(a4w4_dtype dtype) {
  switch (dtype) {
    case A4W4_DTYPE_E2M1:
      return 4;
    case A4W4_DTYPE_E8M0:
    case A4W4_DTYPE_U8:
      return 8;
    case A4W4_DTYPE_BF16:
    case A4W4_DTYPE_F16:
      return 16;
    case A4W4_DTYPE_F32:
      return 32;
  }
  return 0;
}

const char* a4w4_dtype_name(a4w4_dtype dtype) {
  switch (dtype) {
    case A4W4_DTYPE_E2M1:
      return "e2m1";
    case A4W4_DTYPE_E8M0:
      return "e8m0";
    case A4W4_DTYPE_BF16:
      return "bf16";
    case A4W4_DTYPE_F16:
      return "f16";
    case A4W4_DTYPE_F32:
      return "f32";
    case A4W4_DTYPE_U8:
      return "u8";
  }
  return "invalid";
}

namespace {
struct DlpackCode {
  a4w4_dtype dtype;
  uint8_t code;
  uint8_t bits;
};
constexpr DlpackCode kDlpackCodes[] = {
    {A4W4_DTYPE_E2M1, 17, 4}, {A4W4_DTYPE_E8M0, 14, 8}, {A4W4_DTYPE_BF16, 4, 16},
    {A4W4_DTYPE_F16, 2, 16},  {A4W4_DTYPE_F32, 2, 32},  {A4W4_DTYPE_U8, 1, 8},
};
}  // namespace

a4w4_status a4w4_dtype_to_dlpack(a4w4_dtype dtype, uint8_t* code, uint8_t* bits) {
  return a4w4::guarded(__func__, [&] {
    if (code == nullptr || bits == nullptr)
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "code and bits must not be NULL");
    for (const auto& entry : kDlpackCodes) {
      if (entry.dtype == dtype) {
        *code = entry.code;
        *bits = entry.bits;
        return;
      }
    }
    a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "dtype: {} is not an a4w4_dtype value",
               static_cast<int>(dtype));
  });
}

a4w4_status a4w4_dtype_from_dlpack(uint8_t code, uint8_t bits, a4w4_dtype* dtype) {
  return a4w4::guarded(__func__, [&] {
    if (dtype == nullptr) a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "dtype must not be NULL");
    for (const auto& entry : kDlpackCodes) {
      if (entry.code == code && entry.bits == bits) {
        *dtype = entry.dtype;
        return;
      }
    }
    a4w4::fail(A4W4_ERROR_UNSUPPORTED_DTYPE,
               "DLPack dtype (code {}, bits {}) has no a4w4 equivalent", code, bits);
  });
}

const char* a4w4_scale_mode_name(a4w4_scale_mode mode) {
  switch (mode) {
    case A4W4_SCALE_FLOOR:
      return "floor";
    case A4W4_SCALE_RCEIL:
      return "rceil";
    case A4W4_SCALE_EVEN:
      return "even";
  }
  return "invalid";
}

const char* a4w4_backend_name(a4w4_backend backend) {
  switch (backend) {
    case A4W4_BACKEND_AUTO:
      return "auto";
    case A4W4_BACKEND_CPU:
      return "cpu";
    case A4W4_BACKEND_CUDA:
      return "cuda";
  }
  return "invalid";
}

void a4w4_gemm_options_init(a4w4_gemm_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(a4w4_gemm_options);
  options->alpha = 1.0f;
  options->beta = 0.0f;
  options->split_k = 0;
  options->kernel = nullptr;
  options->math_mode = A4W4_MATH_EXACT;
  options->b_constant = 0;
}

}  // extern "C"
