// The C entry points for quantize, dequantize and GEMM: every argument is checked here, before
// anything is written, then the validated problem goes to the backend that serves its device.
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "a4w4/a4w4.h"
#include "api/context.h"
#include "api/error.h"
#include "api/tensor_checks.h"
#include "backends/cpu/fast.h"
#include "backends/cpu/reference.h"
#include "backends/cuda/cuda_backend.h"
#include "dispatch/chooser.h"
#include "dispatch/registry.h"
#include "dispatch/workspace.h"
#include "numerics/weight_layout.h"

namespace a4w4 {
namespace {

constexpr std::initializer_list<a4w4_dtype> kFloatDtypes = {A4W4_DTYPE_F32, A4W4_DTYPE_BF16,
                                                            A4W4_DTYPE_F16};

// All operands of one call must live on one device; returns it.
const char* device_kind(const a4w4_device& device) {
  return device.type == A4W4_DEVICE_CUDA ? "cuda" : "cpu";
}

a4w4_device common_device(std::span<const MatrixView* const> views) {
  const MatrixView& first = *views.front();
  for (const MatrixView* view : views) {
    if (view->device.type != first.device.type || view->device.ordinal != first.device.ordinal)
      fail(A4W4_ERROR_DEVICE_MISMATCH, "{} is on {}:{} but {} is on {}:{}", view->name,
           device_kind(view->device), view->device.ordinal, first.name, device_kind(first.device),
           first.device.ordinal);
  }
  return first.device;
}

// Every data pointer must be memory of the kind its descriptor claims (checked where a GPU exists).
void check_pointers(std::span<const MatrixView* const> views) {
  for (const MatrixView* view : views) cuda::check_pointer(view->data, view->device, view->name);
}

// A weight prepared with its int8 form (A4W4_LAYOUT_PREPARED_V2_INT8) is read as version 2 by
// every kernel; the int8 family finds the int8 part through GemmProblem::b_int8.
PackedOperand packed(const MatrixView& values, const MatrixView& scales) {
  return PackedOperand{static_cast<const uint8_t*>(values.data), values.row_stride_bytes(),
                       static_cast<const uint8_t*>(scales.data), scales.row_stride,
                       layout::tiles_layout(values.layout)};
}

// Bytes of a weight prepared in `prepared` (version 1 or 2: its tiles; _V2_INT8: and its int8
// part).
int64_t prepared_weight_buffer_bytes(a4w4_layout prepared, int64_t n, int64_t k) {
  return prepared == A4W4_LAYOUT_PREPARED_V2_INT8 ? PreparedInt8Layout(n, k).bytes
                                                  : layout::prepared_weight_bytes(n, k);
}

// Where the int8 part of a weight prepared as A4W4_LAYOUT_PREPARED_V2_INT8 starts; else nullptr.
const uint8_t* int8_part(const MatrixView& values) {
  if (values.layout != A4W4_LAYOUT_PREPARED_V2_INT8) return nullptr;
  return static_cast<const uint8_t*>(values.data) +
         PreparedInt8Layout(values.rows, values.cols).offset;
}

// "plain" or the prepared layout's name, for messages.
const char* layout_name(a4w4_layout layout) {
  switch (layout) {
    case A4W4_LAYOUT_PLAIN:
      return "plain";
    case A4W4_LAYOUT_PREPARED_V1:
      return "A4W4_LAYOUT_PREPARED_V1";
    case A4W4_LAYOUT_PREPARED_V2:
      return "A4W4_LAYOUT_PREPARED_V2";
    case A4W4_LAYOUT_PREPARED_V2_INT8:
      return "A4W4_LAYOUT_PREPARED_V2_INT8";
  }
  return "an unknown layout";
}

// Checks values [rows, K] E2M1 with scales [rows, K/32] E8M0 and returns (values, scales).
// With allow_prepared, both may instead be in one prepared layout (a GEMM weight).
std::pair<MatrixView, MatrixView> check_packed(const a4w4_tensor* values, const char* name,
                                               const a4w4_tensor* scales, const char* scale_name,
                                               bool allow_prepared = false) {
  MatrixView v = allow_prepared ? check_weight_matrix(values, name, A4W4_DTYPE_E2M1)
                                : check_matrix(values, name, {A4W4_DTYPE_E2M1});
  check_k(v, v.cols);
  MatrixView s = allow_prepared ? check_weight_matrix(scales, scale_name, A4W4_DTYPE_E8M0)
                                : check_matrix(scales, scale_name, {A4W4_DTYPE_E8M0});
  expect_shape(s, v.rows, v.cols / 32, "one scale per 32 elements of each row");
  if (v.layout != s.layout)
    fail(A4W4_ERROR_UNSUPPORTED_LAYOUT,
         "{} and {} must share one layout, got {} and {} (prepare both with "
         "a4w4_prepare_weight)",
         name, scale_name, layout_name(v.layout), layout_name(s.layout));
  if (v.layout != A4W4_LAYOUT_PLAIN) {
    v.prepared_bytes = prepared_weight_buffer_bytes(v.layout, v.rows, v.cols);
    s.prepared_bytes = layout::prepared_scale_bytes(v.rows, v.cols);
  }
  return {v, s};
}

// Checks every argument of a4w4_gemm (in the order its documentation gives) and returns the
// validated problem, the backend that serves it and the requested kernel name. Shared by
// a4w4_gemm, a4w4_gemm_choose and a4w4_kernel_applicable, so all three judge a call alike.
struct GemmCall {
  a4w4_backend backend;
  GemmProblem problem;
  std::string kernel;  // empty: choose
};

GemmCall check_gemm_call(const a4w4_context_t& context, const a4w4_tensor* a,
                         const a4w4_tensor* a_scale, const a4w4_tensor* b,
                         const a4w4_tensor* b_scale, const a4w4_tensor* c, const a4w4_tensor* bias,
                         const a4w4_tensor* d, const a4w4_gemm_options* options, void* stream) {
  a4w4_gemm_options opts;
  a4w4_gemm_options_init(&opts);
  if (options != nullptr) {
    if (options->struct_size != sizeof(a4w4_gemm_options))
      fail(A4W4_ERROR_INVALID_ARGUMENT,
           "options: struct_size is {}, expected {} (initialise it with "
           "a4w4_gemm_options_init)",
           options->struct_size, sizeof(a4w4_gemm_options));
    opts = *options;
  }

  const auto [av, asv] = check_packed(a, "a", a_scale, "a_scale");
  const int64_t m = av.rows, k = av.cols;
  const auto [bv, bsv] = check_packed(b, "b", b_scale, "b_scale", /*allow_prepared=*/true);
  const int64_t n = bv.rows;
  if (bv.cols != k)
    fail(A4W4_ERROR_SHAPE_MISMATCH, "b: expected shape [N, {}] (K of a), got [{}, {}]", k, bv.rows,
         bv.cols);
  const MatrixView dv = check_matrix(d, "d", kFloatDtypes);
  expect_shape(dv, m, n, "[M, N] from a and b");

  std::vector<const MatrixView*> operands = {&av, &asv, &bv, &bsv, &dv};
  MatrixView cv{}, biasv{};
  bool c_is_d = false;
  if (c != nullptr) {
    cv = check_matrix(c, "c", kFloatDtypes);
    expect_shape(cv, m, n, "[M, N] like d");
    c_is_d = cv.data == dv.data;
    if (c_is_d && (cv.row_stride != dv.row_stride || cv.dtype != dv.dtype))
      fail(A4W4_ERROR_INVALID_ARGUMENT,
           "c: may alias d only as the very same tensor (same dtype and strides)");
    operands.push_back(&cv);
  }
  if (bias != nullptr) {
    biasv = check_vector(bias, "bias", kFloatDtypes);
    if (biasv.rows != n)
      fail(A4W4_ERROR_SHAPE_MISMATCH, "bias: expected shape [{}] (N of b), got [{}]", n,
           biasv.rows);
    operands.push_back(&biasv);
  }

  const int64_t blocks = k / 32;
  if (opts.split_k < 0 || opts.split_k > blocks)
    fail(A4W4_ERROR_INVALID_ARGUMENT,
         "options.split_k: expected 0 (automatic) or 1..{} (the number of 32-wide K blocks), "
         "got {}",
         blocks, opts.split_k);
  if (opts.math_mode != A4W4_MATH_EXACT && opts.math_mode != A4W4_MATH_FAST_ACCUM)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "options.math_mode: {} is not an a4w4_math_mode value",
         static_cast<int>(opts.math_mode));
  if (opts.b_constant != 0 && opts.b_constant != 1)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "options.b_constant: expected 0 or 1, got {}",
         opts.b_constant);

  const a4w4_backend backend = resolve_backend(context, common_device(operands));
  check_pointers(operands);
  for (const MatrixView* view : operands) {
    if (view != &dv && !(view == &cv && c_is_d)) expect_disjoint(dv, *view);
  }
  // The context's workspace, when it lives on the operands' device: the staging kernels write it.
  const a4w4_context_t::Workspace workspace = context.workspace();
  const bool has_workspace = workspace.bytes > 0 && dv.device.type == workspace.device.type &&
                             dv.device.ordinal == workspace.device.ordinal;
  if (has_workspace) {
    const MatrixView wv{"the context's workspace",
                        workspace.ptr,
                        A4W4_DTYPE_E8M0,
                        1,
                        static_cast<int64_t>(workspace.bytes),
                        static_cast<int64_t>(workspace.bytes),
                        workspace.device,
                        A4W4_LAYOUT_PLAIN,
                        0};
    for (const MatrixView* view : operands) expect_disjoint(wv, *view);
  }

  return GemmCall{backend,
                  GemmProblem{
                      m,
                      n,
                      k,
                      packed(av, asv),
                      packed(bv, bsv),
                      FloatOperand{c ? cv.data : nullptr, cv.dtype, cv.row_stride},
                      FloatOperand{bias ? biasv.data : nullptr, biasv.dtype, biasv.row_stride},
                      dv.data,
                      dv.dtype,
                      dv.row_stride,
                      opts.alpha,
                      opts.beta,
                      opts.split_k,
                      opts.math_mode,
                      dv.device,
                      stream,
                      has_workspace ? workspace.ptr : nullptr,
                      has_workspace ? workspace.bytes : 0,
                      int8_part(bv),
                      opts.b_constant != 0,
                  },
                  opts.kernel != nullptr ? std::string(opts.kernel) : std::string()};
}

GemmChoice choose(const a4w4_context_t& context, const GemmCall& call) {
  const std::shared_ptr<const TunedTable> tuned = context.tuned_table();
  return choose_gemm_kernel(call.problem, call.backend, call.kernel, tuned.get());
}

}  // namespace
}  // namespace a4w4

extern "C" {

a4w4_status a4w4_quantize(a4w4_context ctx, const a4w4_tensor* x, const a4w4_tensor* q,
                          const a4w4_tensor* scale, a4w4_scale_mode mode, void* stream) {
  using namespace a4w4;
  return guarded(__func__, [&] {
    const a4w4_context_t& context = checked_context(ctx);
    const MatrixView xv = check_matrix(x, "x", kFloatDtypes);
    check_k(xv, xv.cols);
    const MatrixView qv = check_matrix(q, "q", {A4W4_DTYPE_E2M1});
    expect_shape(qv, xv.rows, xv.cols, "the shape of x");
    const MatrixView sv = check_matrix(scale, "scale", {A4W4_DTYPE_E8M0});
    expect_shape(sv, xv.rows, xv.cols / 32, "one scale per 32 elements of each row of x");
    if (mode != A4W4_SCALE_FLOOR && mode != A4W4_SCALE_RCEIL && mode != A4W4_SCALE_EVEN)
      fail(A4W4_ERROR_INVALID_ARGUMENT, "mode: {} is not an a4w4_scale_mode value",
           static_cast<int>(mode));
    const MatrixView* views[] = {&xv, &qv, &sv};
    const a4w4_device device = common_device(views);
    const a4w4_backend backend = resolve_backend(context, device);
    expect_disjoint(qv, xv);
    expect_disjoint(sv, xv);
    expect_disjoint(sv, qv);
    const QuantizeProblem problem{xv.rows,
                                  xv.cols,
                                  FloatOperand{xv.data, xv.dtype, xv.row_stride},
                                  static_cast<uint8_t*>(qv.data),
                                  qv.row_stride_bytes(),
                                  static_cast<uint8_t*>(sv.data),
                                  sv.row_stride,
                                  mode,
                                  device,
                                  stream};
    check_pointers(views);
    if (backend == A4W4_BACKEND_CPU) {
      cpu::quantize(problem, exec_config(context));  // SIMD, bit-identical to the reference
    } else {
      cuda::quantize(problem);
    }
  });
}

a4w4_status a4w4_dequantize(a4w4_context ctx, const a4w4_tensor* q, const a4w4_tensor* scale,
                            const a4w4_tensor* y, void* stream) {
  using namespace a4w4;
  return guarded(__func__, [&] {
    const a4w4_context_t& context = checked_context(ctx);
    const auto [qv, sv] = check_packed(q, "q", scale, "scale");
    const MatrixView yv = check_matrix(y, "y", kFloatDtypes);
    expect_shape(yv, qv.rows, qv.cols, "the shape of q");
    const MatrixView* views[] = {&qv, &sv, &yv};
    const a4w4_device device = common_device(views);
    const a4w4_backend backend = resolve_backend(context, device);
    expect_disjoint(yv, qv);
    expect_disjoint(yv, sv);
    const DequantizeProblem problem{
        qv.rows, qv.cols, packed(qv, sv), yv.data, yv.dtype, yv.row_stride, device, stream};
    check_pointers(views);
    if (backend == A4W4_BACKEND_CPU) {
      cpu::reference_dequantize(problem, exec_config(context));
    } else {
      cuda::dequantize(problem);
    }
  });
}

a4w4_status a4w4_gemm(a4w4_context ctx, const a4w4_tensor* a, const a4w4_tensor* a_scale,
                      const a4w4_tensor* b, const a4w4_tensor* b_scale, const a4w4_tensor* c,
                      const a4w4_tensor* bias, const a4w4_tensor* d,
                      const a4w4_gemm_options* options, void* stream) {
  using namespace a4w4;
  return guarded(__func__, [&] {
    const a4w4_context_t& context = checked_context(ctx);
    GemmCall call = check_gemm_call(context, a, a_scale, b, b_scale, c, bias, d, options, stream);
    const GemmChoice choice = choose(context, call);
    call.problem.split_k = choice.split_k;
    choice.kernel->run(call.problem, exec_config(context));
  });
}

a4w4_status a4w4_gemm_choose(a4w4_context ctx, const a4w4_tensor* a, const a4w4_tensor* a_scale,
                             const a4w4_tensor* b, const a4w4_tensor* b_scale, const a4w4_tensor* c,
                             const a4w4_tensor* bias, const a4w4_tensor* d,
                             const a4w4_gemm_options* options, a4w4_gemm_choice* choice) {
  using namespace a4w4;
  return guarded(__func__, [&] {
    const a4w4_context_t& context = checked_context(ctx);
    if (choice == nullptr) fail(A4W4_ERROR_INVALID_ARGUMENT, "choice: must not be NULL");
    if (choice->struct_size < sizeof(a4w4_gemm_choice))
      fail(A4W4_ERROR_INVALID_ARGUMENT,
           "choice: struct_size is {}, expected {} (sizeof(a4w4_gemm_choice))", choice->struct_size,
           sizeof(a4w4_gemm_choice));
    const GemmCall call =
        check_gemm_call(context, a, a_scale, b, b_scale, c, bias, d, options, nullptr);
    const GemmChoice chosen = choose(context, call);
    a4w4_gemm_choice out{};
    out.struct_size = sizeof(a4w4_gemm_choice);
    out.kernel = chosen.kernel->name;
    out.split_k = chosen.split_k;
    out.source = chosen.source;
    out.tuned_m = chosen.tuned_m;
    out.tuned_line = chosen.tuned_line;
    *choice = out;
  });
}

a4w4_status a4w4_kernel_applicable(a4w4_context ctx, const char* name, const a4w4_tensor* a,
                                   const a4w4_tensor* a_scale, const a4w4_tensor* b,
                                   const a4w4_tensor* b_scale, const a4w4_tensor* c,
                                   const a4w4_tensor* bias, const a4w4_tensor* d,
                                   const a4w4_gemm_options* options) {
  using namespace a4w4;
  return guarded(__func__, [&] {
    const a4w4_context_t& context = checked_context(ctx);
    if (name == nullptr || *name == '\0')
      fail(A4W4_ERROR_INVALID_ARGUMENT, "name: must be a kernel name (a4w4_kernel_info)");
    GemmCall call = check_gemm_call(context, a, a_scale, b, b_scale, c, bias, d, options, nullptr);
    call.kernel = name;
    choose(context, call);  // fails with the reason when the kernel cannot run it
  });
}

a4w4_status a4w4_prepared_weight_size(int64_t n, int64_t k, a4w4_layout layout,
                                      size_t* weight_bytes, size_t* scale_bytes) {
  using namespace a4w4;
  return guarded(__func__, [&] {
    if (weight_bytes == nullptr || scale_bytes == nullptr)
      fail(A4W4_ERROR_INVALID_ARGUMENT, "weight_bytes and scale_bytes must not be NULL");
    if (layout != A4W4_LAYOUT_PREPARED_V1 && layout != A4W4_LAYOUT_PREPARED_V2 &&
        layout != A4W4_LAYOUT_PREPARED_V2_INT8)
      fail(A4W4_ERROR_UNSUPPORTED_LAYOUT,
           "layout: expected A4W4_LAYOUT_PREPARED_V2, A4W4_LAYOUT_PREPARED_V2_INT8 or "
           "A4W4_LAYOUT_PREPARED_V1, got {}",
           static_cast<int>(layout));
    if (n < 1 || k < 1 || n > (int64_t{1} << 40) || k > (int64_t{1} << 40))
      fail(A4W4_ERROR_INVALID_ARGUMENT, "n and k must be in [1, 2^40], got n={} k={}", n, k);
    if (k % 32 != 0)
      fail(A4W4_ERROR_K_NOT_MULTIPLE_OF_32, "k = {} is not a multiple of 32", k);
    *weight_bytes = static_cast<size_t>(prepared_weight_buffer_bytes(layout, n, k));
    *scale_bytes = static_cast<size_t>(layout::prepared_scale_bytes(n, k));
  });
}

a4w4_status a4w4_prepare_weight(a4w4_context ctx, const a4w4_tensor* b,
                                const a4w4_tensor* b_scale, const a4w4_tensor* prepared,
                                const a4w4_tensor* prepared_scale, void* stream) {
  using namespace a4w4;
  return guarded(__func__, [&] {
    const a4w4_context_t& context = checked_context(ctx);
    const auto [bv, bsv] = check_packed(b, "b", b_scale, "b_scale");
    auto [pv, psv] = check_packed(prepared, "prepared", prepared_scale, "prepared_scale",
                                  /*allow_prepared=*/true);
    if (pv.layout == A4W4_LAYOUT_PLAIN)
      fail(A4W4_ERROR_UNSUPPORTED_LAYOUT,
           "prepared: expected layout A4W4_LAYOUT_PREPARED_V2, A4W4_LAYOUT_PREPARED_V2_INT8 or "
           "A4W4_LAYOUT_PREPARED_V1, got plain");
    expect_shape(pv, bv.rows, bv.cols, "the shape of b");
    const MatrixView* views[] = {&bv, &bsv, &pv, &psv};
    const a4w4_device device = common_device(views);
    const a4w4_backend backend = resolve_backend(context, device);
    for (const MatrixView* out : {&pv, &psv}) {
      expect_disjoint(*out, bv);
      expect_disjoint(*out, bsv);
    }
    expect_disjoint(pv, psv);
    check_pointers(views);
    const PrepareWeightProblem problem{bv.rows,
                                       bv.cols,
                                       packed(bv, bsv),
                                       static_cast<uint8_t*>(pv.data),
                                       static_cast<uint8_t*>(psv.data),
                                       pv.layout,
                                       device,
                                       stream};
    if (backend == A4W4_BACKEND_CPU) {
      cpu::prepare_weight(problem, exec_config(context));
    } else {
      cuda::prepare_weight(problem);
    }
  });
}

}  // extern "C"
