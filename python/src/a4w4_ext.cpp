// a4w4._core: the nanobind module behind `import a4w4`. A thin layer over the C API (a4w4.h):
// arrays arrive through DLPack (nb::ndarray, zero-copy, any framework, CPU or CUDA), are
// described as a4w4_tensor descriptors and handed to the C entry points. Outputs are allocated by
// the Python layer in the caller's framework and passed in. No numerics happen here.
//
// Failures raise the Python exception that a4w4._errors.error_from_status builds from the status
// code and the C API's message (a4w4.Error and its subclasses).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "a4w4/a4w4.h"

#if A4W4_PY_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace nb = nanobind;

namespace {

// Inputs may be read-only arrays; outputs must be writable.
using InArray = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<>;
// What empty() returns: a nanobind array object speaking the DLPack protocol.
using NewArray = nb::ndarray<nb::array_api>;

constexpr int kDLCPU = 1;
constexpr int kDLCUDA = 2;
constexpr int kDLCUDAHost = 3;

// Raises the a4w4.Error subclass for `status` with `message`. Needs the GIL.
[[noreturn]] void raise_status(a4w4_status status, const std::string& message) {
  nb::object make = nb::module_::import_("a4w4._errors").attr("error_from_status");
  nb::object exc = make(static_cast<int>(status), message);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw nb::python_error();
}

// The outcome of a C call made without the GIL: its status and, on failure, the message the
// library left on this thread (read at once, before anything else can replace it).
struct Outcome {
  a4w4_status status = A4W4_SUCCESS;
  std::string message;
};

Outcome capture(a4w4_status status) {
  Outcome out;
  out.status = status;
  if (status != A4W4_SUCCESS) out.message = a4w4_last_error_message();
  return out;
}

void check(const Outcome& outcome) {
  if (outcome.status != A4W4_SUCCESS) raise_status(outcome.status, outcome.message);
}

void check(a4w4_status status) {
  check(capture(status));
}

std::string dtype_text(const nb::dlpack::dtype& dt) {
  return "(code " + std::to_string(dt.code) + ", bits " + std::to_string(dt.bits) + ", lanes " +
         std::to_string(dt.lanes) + ")";
}

bool is_dl(const nb::dlpack::dtype& dt, uint8_t code, uint8_t bits) {
  return dt.code == code && dt.bits == bits && dt.lanes == 1;
}

a4w4_device device_of(const InArray& arr, const char* name) {
  const int type = arr.device_type();
  if (type == kDLCPU || type == kDLCUDAHost) return a4w4_cpu();
  if (type == kDLCUDA) return a4w4_cuda(arr.device_id());
  raise_status(A4W4_ERROR_DEVICE_MISMATCH,
               std::string(name) + ": DLPack device type " + std::to_string(type) +
                   " is not supported (a4w4 takes CPU memory and CUDA device memory)");
}

// Describes `arr` for the C API. `as` is the a4w4 dtype the argument is read as:
//   0      the array's own DLPack dtype (a4w4_dtype_from_dlpack)
//   E2M1   packed FP4: uint8 [.., C] holds [.., 2C] elements (strides doubled), or a DLPack
//          float4_e2m1fn array whose shape and strides already count 4-bit elements
//   E8M0   scales: uint8 or DLPack float8_e8m0fnu
//   BF16   bf16: DLPack bfloat16 or raw uint16 (a view of ml_dtypes.bfloat16 data)
a4w4_tensor describe(const InArray& arr, const char* name, int as) {
  const size_t rank = arr.ndim();
  if (rank > A4W4_MAX_RANK)
    raise_status(A4W4_ERROR_INVALID_ARGUMENT, std::string(name) + ": rank " + std::to_string(rank) +
                                                  " is above " + std::to_string(A4W4_MAX_RANK));
  a4w4_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = const_cast<void*>(arr.data());
  t.rank = static_cast<int32_t>(rank);
  t.device = device_of(arr, name);
  t.layout = A4W4_LAYOUT_PLAIN;
  for (size_t i = 0; i < rank; ++i) {
    t.shape[i] = static_cast<int64_t>(arr.shape(i));
    t.strides[i] = arr.stride(i);
  }
  const nb::dlpack::dtype dt = arr.dtype();
  const auto refuse = [&](const char* expected) {
    raise_status(A4W4_ERROR_UNSUPPORTED_DTYPE, std::string(name) + ": expected " + expected +
                                                   ", got DLPack dtype " + dtype_text(dt));
  };
  if (as == A4W4_DTYPE_E2M1) {
    t.dtype = A4W4_DTYPE_E2M1;
    if (is_dl(dt, 1, 8)) {  // uint8: two elements per byte
      // Byte strides become 4-bit element strides, except a contiguous last dimension, whose
      // elements stay one apart (any other last stride is left for the C API to refuse).
      if (rank >= 1) t.shape[rank - 1] *= 2;
      for (size_t i = 0; i < rank; ++i)
        if (i + 1 < rank || t.strides[i] != 1) t.strides[i] *= 2;
    } else if (!is_dl(dt, 17, 4)) {
      refuse("packed E2M1 as uint8 (two elements per byte) or DLPack float4_e2m1fn");
    }
  } else if (as == A4W4_DTYPE_E8M0) {
    t.dtype = A4W4_DTYPE_E8M0;
    if (!is_dl(dt, 1, 8) && !is_dl(dt, 14, 8))
      refuse("E8M0 scales as uint8 or DLPack float8_e8m0fnu");
  } else if (as == A4W4_DTYPE_BF16 && is_dl(dt, 1, 16)) {
    t.dtype = A4W4_DTYPE_BF16;
  } else {
    if (dt.lanes != 1) refuse("a single-lane dtype");
    a4w4_dtype mapped{};
    if (a4w4_dtype_from_dlpack(dt.code, dt.bits, &mapped) != A4W4_SUCCESS)
      refuse("a dtype a4w4 knows (float32, float16, bfloat16, uint8)");
    t.dtype = mapped;  // (a DLPack float4_e2m1fn array counts 4-bit elements already)
    if (as != 0 && mapped != static_cast<a4w4_dtype>(as))
      raise_status(A4W4_ERROR_UNSUPPORTED_DTYPE, std::string(name) + ": expected " +
                                                     a4w4_dtype_name(static_cast<a4w4_dtype>(as)) +
                                                     ", got " + a4w4_dtype_name(mapped));
  }
  return t;
}

// A prepared weight's buffer: a flat byte array holding at least `needed` bytes, described with
// the logical shape [rows, cols] in the prepared layout.
a4w4_tensor describe_prepared(const InArray& arr, const char* name, a4w4_dtype dtype, int64_t rows,
                              int64_t cols, size_t needed, a4w4_layout layout) {
  const nb::dlpack::dtype dt = arr.dtype();
  if (!is_dl(dt, 1, 8))
    raise_status(
        A4W4_ERROR_UNSUPPORTED_DTYPE,
        std::string(name) + ": a prepared buffer is uint8, got DLPack dtype " + dtype_text(dt));
  if (arr.nbytes() < needed)
    raise_status(A4W4_ERROR_SHAPE_MISMATCH, std::string(name) + ": a prepared buffer of " +
                                                std::to_string(needed) + " bytes is needed, got " +
                                                std::to_string(arr.nbytes()));
  bool contiguous = true;
  int64_t expected = 1;
  for (size_t i = arr.ndim(); i-- > 0;) {
    if (arr.shape(i) != 1 && arr.stride(i) != expected) contiguous = false;
    expected *= static_cast<int64_t>(arr.shape(i));
  }
  if (!contiguous)
    raise_status(A4W4_ERROR_UNSUPPORTED_LAYOUT,
                 std::string(name) + ": a prepared buffer must be contiguous");
  a4w4_tensor t =
      a4w4_tensor_2d(const_cast<void*>(arr.data()), dtype, rows, cols, cols, device_of(arr, name));
  t.layout = layout;
  return t;
}

void* stream_ptr(uintptr_t stream) {
  return reinterpret_cast<void*>(stream);
}

a4w4_backend backend_from_name(const std::string& name) {
  if (name == "auto") return A4W4_BACKEND_AUTO;
  if (name == "cpu") return A4W4_BACKEND_CPU;
  if (name == "cuda") return A4W4_BACKEND_CUDA;
  raise_status(A4W4_ERROR_INVALID_ARGUMENT,
               "backend: expected 'auto', 'cpu' or 'cuda', got '" + name + "'");
}

// Owns an a4w4_context.
class Context {
 public:
  Context() { check(a4w4_context_create(&ctx_)); }
  ~Context() { a4w4_context_destroy(ctx_); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  a4w4_context get() const {
    if (ctx_ == nullptr)
      raise_status(A4W4_ERROR_INVALID_ARGUMENT, "ctx: this a4w4.Context has been closed");
    return ctx_;
  }
  void close() {
    a4w4_context_destroy(ctx_);
    ctx_ = nullptr;
  }
  bool closed() const { return ctx_ == nullptr; }

  std::string backend() const {
    a4w4_backend b{};
    check(a4w4_context_get_backend(get(), &b));
    return a4w4_backend_name(b);
  }
  void set_backend(const std::string& name) {
    check(a4w4_context_set_backend(get(), backend_from_name(name)));
  }
  int num_threads() const {
    int n = 0;
    check(a4w4_context_get_num_threads(get(), &n));
    return n;
  }
  void set_num_threads(int n) { check(a4w4_context_set_num_threads(get(), n)); }
  // A contiguous 1-D array of CUDA device memory (its bytes); the Python wrapper keeps it alive.
  void set_workspace(const OutArray& buffer) {
    if (buffer.ndim() != 1 || (buffer.shape(0) > 1 && buffer.stride(0) != 1))
      raise_status(A4W4_ERROR_INVALID_ARGUMENT,
                   "workspace: expected a contiguous 1-D array (e.g. torch.empty(bytes, "
                   "dtype=torch.uint8, device='cuda'))");
    const a4w4_device device = device_of(InArray(buffer), "workspace");
    check(a4w4_context_set_workspace(get(), device, buffer.data(), buffer.nbytes()));
  }
  void clear_workspace() {
    check(a4w4_context_set_workspace(get(), a4w4_device{A4W4_DEVICE_CUDA, 0}, nullptr, 0));
  }
  void load_tuned(const std::string& path) {
    a4w4_status status;
    {  // reading and checking the file can take a while; the error is raised with the GIL held
      nb::gil_scoped_release release;
      status = a4w4_context_load_tuned(get(), path.c_str());
    }
    check(status);
  }
  void clear_tuned() { check(a4w4_context_clear_tuned(get())); }
  int tuned_entries() const {
    int entries = 0;
    check(a4w4_context_tuned_count(get(), &entries, nullptr));
    return entries;
  }
  std::vector<std::string> tuned_warnings() const {
    int count = 0;
    check(a4w4_context_tuned_count(get(), nullptr, &count));
    std::vector<std::string> out;
    for (int i = 0; i < count; ++i) {
      char buf[1024] = {};
      check(a4w4_context_tuned_warning(get(), i, buf, sizeof buf));
      out.emplace_back(buf);
    }
    return out;
  }

 private:
  a4w4_context ctx_ = nullptr;
};

void quantize(const Context& ctx, const InArray& x, int x_as, const OutArray& q,
              const OutArray& scale, int mode, uintptr_t stream) {
  const a4w4_tensor tx = describe(x, "x", x_as);
  const a4w4_tensor tq = describe(InArray(q), "q", A4W4_DTYPE_E2M1);
  const a4w4_tensor ts = describe(InArray(scale), "scale", A4W4_DTYPE_E8M0);
  const a4w4_context c = ctx.get();
  Outcome out;
  {
    nb::gil_scoped_release release;
    out = capture(
        a4w4_quantize(c, &tx, &tq, &ts, static_cast<a4w4_scale_mode>(mode), stream_ptr(stream)));
  }
  check(out);
}

void dequantize(const Context& ctx, const InArray& q, const InArray& scale, const OutArray& y,
                int y_as, uintptr_t stream) {
  const a4w4_tensor tq = describe(q, "fp4", A4W4_DTYPE_E2M1);
  const a4w4_tensor ts = describe(scale, "scales", A4W4_DTYPE_E8M0);
  const a4w4_tensor ty = describe(InArray(y), "out", y_as);
  const a4w4_context c = ctx.get();
  Outcome out;
  {
    nb::gil_scoped_release release;
    out = capture(a4w4_dequantize(c, &tq, &ts, &ty, stream_ptr(stream)));
  }
  check(out);
}

std::pair<size_t, size_t> prepared_weight_size(int64_t n, int64_t k, int layout) {
  size_t w = 0;
  size_t s = 0;
  check(a4w4_prepared_weight_size(n, k, static_cast<a4w4_layout>(layout), &w, &s));
  return {w, s};
}

// b / b_scale are plain [N, K/2] / [N, K/32] arrays when prepared_n == 0, else the flat buffers
// of a weight prepared with prepare_weight for the logical shape [prepared_n, prepared_k].
void gemm(const Context& ctx, const InArray& a, const InArray& a_scale, const InArray& b,
          const InArray& b_scale, std::optional<InArray> c, int c_as, std::optional<InArray> bias,
          int bias_as, const OutArray& d, int d_as, float alpha, float beta, int split_k,
          std::optional<std::string> kernel, int math_mode, bool b_constant, int64_t prepared_n,
          int64_t prepared_k, int prepared_layout, uintptr_t stream) {
  const a4w4_tensor ta = describe(a, "a", A4W4_DTYPE_E2M1);
  const a4w4_tensor tas = describe(a_scale, "a_scale", A4W4_DTYPE_E8M0);
  a4w4_tensor tb;
  a4w4_tensor tbs;
  if (prepared_n > 0) {
    const auto layout = static_cast<a4w4_layout>(prepared_layout);
    const auto [wbytes, sbytes] = prepared_weight_size(prepared_n, prepared_k, prepared_layout);
    tb = describe_prepared(b, "b", A4W4_DTYPE_E2M1, prepared_n, prepared_k, wbytes, layout);
    tbs = describe_prepared(b_scale, "b_scale", A4W4_DTYPE_E8M0, prepared_n, prepared_k / 32,
                            sbytes, layout);
  } else {
    tb = describe(b, "b", A4W4_DTYPE_E2M1);
    tbs = describe(b_scale, "b_scale", A4W4_DTYPE_E8M0);
  }
  a4w4_tensor tc{};
  a4w4_tensor tbias{};
  if (c) tc = describe(*c, "c", c_as);
  if (bias) tbias = describe(*bias, "bias", bias_as);
  const a4w4_tensor td = describe(InArray(d), "out", d_as);
  a4w4_gemm_options options;
  a4w4_gemm_options_init(&options);
  options.alpha = alpha;
  options.beta = beta;
  options.split_k = split_k;
  options.kernel = kernel ? kernel->c_str() : nullptr;
  options.math_mode = static_cast<a4w4_math_mode>(math_mode);
  options.b_constant = b_constant ? 1 : 0;
  const a4w4_context cx = ctx.get();
  Outcome out;
  {
    nb::gil_scoped_release release;
    out = capture(a4w4_gemm(cx, &ta, &tas, &tb, &tbs, c ? &tc : nullptr, bias ? &tbias : nullptr,
                            &td, &options, stream_ptr(stream)));
  }
  check(out);
}

void prepare_weight(const Context& ctx, const InArray& b, const InArray& b_scale,
                    const OutArray& prepared, const OutArray& prepared_scale, int layout,
                    uintptr_t stream) {
  const a4w4_tensor tb = describe(b, "b", A4W4_DTYPE_E2M1);
  const a4w4_tensor tbs = describe(b_scale, "b_scale", A4W4_DTYPE_E8M0);
  if (tb.rank != 2)
    raise_status(A4W4_ERROR_INVALID_ARGUMENT,
                 "b: expected a 2-D packed weight [N, K/2], got rank " + std::to_string(tb.rank));
  const int64_t n = tb.shape[0];
  const int64_t k = tb.shape[1];
  const auto [wbytes, sbytes] = prepared_weight_size(n, k, layout);
  const auto l = static_cast<a4w4_layout>(layout);
  const a4w4_tensor tp =
      describe_prepared(InArray(prepared), "prepared", A4W4_DTYPE_E2M1, n, k, wbytes, l);
  const a4w4_tensor tps = describe_prepared(InArray(prepared_scale), "prepared_scale",
                                            A4W4_DTYPE_E8M0, n, k / 32, sbytes, l);
  const a4w4_context c = ctx.get();
  Outcome out;
  {
    nb::gil_scoped_release release;
    out = capture(a4w4_prepare_weight(c, &tb, &tbs, &tp, &tps, stream_ptr(stream)));
  }
  check(out);
}

// An owning, DLPack-capable array (for frameworks whose arrays cannot be written into, e.g.
// JAX): host memory (64-byte aligned) or CUDA device memory.
NewArray empty(const std::vector<size_t>& shape, uint8_t code, uint8_t bits, int device_type,
               int device_id) {
  size_t count = 1;
  for (size_t s : shape) count *= s;
  const size_t bytes = (count * bits + 7) / 8;
  const size_t alloc = ((bytes + 63) / 64) * 64 + 64;
  nb::dlpack::dtype dt;
  dt.code = code;
  dt.bits = bits;
  dt.lanes = 1;
  if (device_type == kDLCPU) {
    void* p = std::aligned_alloc(64, alloc);
    if (p == nullptr)
      raise_status(A4W4_ERROR_OUT_OF_MEMORY,
                   "empty: could not allocate " + std::to_string(bytes) + " bytes of host memory");
    nb::capsule owner(p, [](void* ptr) noexcept { std::free(ptr); });
    return NewArray(p, shape.size(), shape.data(), owner, nullptr, dt, kDLCPU, 0);
  }
  if (device_type == kDLCUDA) {
#if A4W4_PY_WITH_CUDA
    int previous = 0;
    void* p = nullptr;
    cudaGetDevice(&previous);
    cudaError_t err = cudaSetDevice(device_id);
    if (err == cudaSuccess) err = cudaMalloc(&p, alloc);
    cudaSetDevice(previous);
    if (err != cudaSuccess)
      raise_status(err == cudaErrorMemoryAllocation ? A4W4_ERROR_OUT_OF_MEMORY : A4W4_ERROR_DEVICE,
                   std::string("empty: cudaMalloc failed: ") + cudaGetErrorName(err));
    nb::capsule owner(p, [](void* ptr) noexcept { cudaFree(ptr); });
    return NewArray(p, shape.size(), shape.data(), owner, nullptr, dt, kDLCUDA, device_id);
#else
    (void)device_id;
    raise_status(A4W4_ERROR_BACKEND_NOT_COMPILED,
                 "empty: this build of a4w4 has no CUDA backend (configure with -DA4W4_CUDA=ON)");
#endif
  }
  raise_status(A4W4_ERROR_DEVICE_MISMATCH,
               "empty: DLPack device type " + std::to_string(device_type) + " is not supported");
}

// Waits for `stream` (a cudaStream_t, 0 = the legacy default stream). A no-op without CUDA.
void synchronize(uintptr_t stream) {
#if A4W4_PY_WITH_CUDA
  cudaError_t err;
  {
    nb::gil_scoped_release release;
    err = cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream));
  }
  if (err != cudaSuccess)
    raise_status(A4W4_ERROR_DEVICE, std::string("synchronize: ") + cudaGetErrorName(err) + ": " +
                                        cudaGetErrorString(err));
#else
  (void)stream;
#endif
}

// What DLPack says about an array: (shape, (code, bits, lanes), device type, device id).
std::tuple<std::vector<int64_t>, std::tuple<int, int, int>, int, int> dlpack_info(
    const InArray& arr) {
  std::vector<int64_t> shape(arr.shape_ptr(), arr.shape_ptr() + arr.ndim());
  const nb::dlpack::dtype dt = arr.dtype();
  return {shape, {dt.code, dt.bits, dt.lanes}, arr.device_type(), arr.device_id()};
}

// Each registered kernel as (name, backend, path, tile_m, tile_n, tile_k, max_split_k,
// split_k_parallel, auto_split_k, min_m, max_m, constraints), from a4w4_kernel_describe.
using KernelTuple = std::tuple<std::string, std::string, std::string, int, int, int, int, bool,
                               bool, int64_t, int64_t, std::string>;
std::vector<KernelTuple> kernels() {
  std::vector<KernelTuple> out;
  const int count = a4w4_kernel_count();
  for (int i = 0; i < count; ++i) {
    a4w4_kernel_properties k{};
    k.struct_size = sizeof k;
    check(a4w4_kernel_describe(i, &k));
    out.emplace_back(k.name, a4w4_backend_name(k.backend), a4w4_kernel_path_name(k.path), k.tile_m,
                     k.tile_n, k.tile_k, k.max_split_k, k.split_k_parallel != 0,
                     k.auto_split_k != 0, k.min_m, k.max_m,
                     k.constraints != nullptr ? k.constraints : "");
  }
  return out;
}

// The (name, multiprocessor count) a tuned configuration keys this device by.
std::pair<std::string, int> device_tuning_key(int device_type, int ordinal) {
  a4w4_device dev;
  dev.type = static_cast<a4w4_device_type>(device_type);
  dev.ordinal = ordinal;
  char buf[256] = {};
  int count = 0;
  check(a4w4_device_tuning_key(dev, buf, sizeof buf, &count));
  return {buf, count};
}

std::string device_describe(int device_type, int ordinal) {
  a4w4_device dev;
  dev.type = static_cast<a4w4_device_type>(device_type);
  dev.ordinal = ordinal;
  char buf[256] = {};
  check(a4w4_device_describe(dev, buf, sizeof buf));
  return buf;
}

int device_count(const std::string& backend) {
  int count = 0;
  const a4w4_status st = a4w4_device_count(backend_from_name(backend), &count);
  if (st == A4W4_ERROR_NO_DEVICE || st == A4W4_ERROR_BACKEND_NOT_COMPILED) return 0;
  check(st);
  return count;
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "a4w4's C API, bound with nanobind (use the `a4w4` package, not this module)";

  nb::class_<Context>(m, "Context")
      .def(nb::init<>())
      .def("close", &Context::close)
      .def_prop_ro("closed", &Context::closed)
      .def_prop_rw("backend", &Context::backend, &Context::set_backend)
      .def_prop_rw("num_threads", &Context::num_threads, &Context::set_num_threads)
      .def("set_workspace", &Context::set_workspace, nb::arg("buffer"))
      .def("clear_workspace", &Context::clear_workspace)
      .def("load_tuned", &Context::load_tuned, nb::arg("path"))
      .def("clear_tuned", &Context::clear_tuned)
      .def_prop_ro("tuned_entries", &Context::tuned_entries)
      .def_prop_ro("tuned_warnings", &Context::tuned_warnings);

  m.def("quantize", &quantize, nb::arg("ctx"), nb::arg("x"), nb::arg("x_as"), nb::arg("q"),
        nb::arg("scale"), nb::arg("mode"), nb::arg("stream"));
  m.def("dequantize", &dequantize, nb::arg("ctx"), nb::arg("q"), nb::arg("scale"), nb::arg("y"),
        nb::arg("y_as"), nb::arg("stream"));
  m.def("gemm", &gemm, nb::arg("ctx"), nb::arg("a"), nb::arg("a_scale"), nb::arg("b"),
        nb::arg("b_scale"), nb::arg("c").none(), nb::arg("c_as"), nb::arg("bias").none(),
        nb::arg("bias_as"), nb::arg("d"), nb::arg("d_as"), nb::arg("alpha"), nb::arg("beta"),
        nb::arg("split_k"), nb::arg("kernel").none(), nb::arg("math_mode"), nb::arg("b_constant"),
        nb::arg("prepared_n"), nb::arg("prepared_k"), nb::arg("prepared_layout"),
        nb::arg("stream"));
  m.def("prepare_weight", &prepare_weight, nb::arg("ctx"), nb::arg("b"), nb::arg("b_scale"),
        nb::arg("prepared"), nb::arg("prepared_scale"), nb::arg("layout"), nb::arg("stream"));
  m.def("prepared_weight_size", &prepared_weight_size, nb::arg("n"), nb::arg("k"),
        nb::arg("layout"));
  m.def(
      "gemm_workspace_size",
      [](int64_t rows_a, int64_t rows_b, int64_t k) {
        size_t bytes = 0;
        check(a4w4_gemm_workspace_size(rows_a, rows_b, k, &bytes));
        return bytes;
      },
      nb::arg("m"), nb::arg("n"), nb::arg("k"));
  m.def("empty", &empty, nb::arg("shape"), nb::arg("code"), nb::arg("bits"), nb::arg("device_type"),
        nb::arg("device_id"));
  m.def("synchronize", &synchronize, nb::arg("stream"));
  m.def("dlpack_info", &dlpack_info, nb::arg("array"));
  m.def("kernels", &kernels);
  m.def(
      "backend_compiled",
      [](const std::string& name) { return a4w4_backend_compiled(backend_from_name(name)) != 0; },
      nb::arg("name"));
  m.def(
      "backend_available",
      [](const std::string& name) { return a4w4_backend_available(backend_from_name(name)) != 0; },
      nb::arg("name"));
  m.def("device_count", &device_count, nb::arg("backend"));
  m.def("device_describe", &device_describe, nb::arg("device_type"), nb::arg("ordinal"));
  m.def("device_tuning_key", &device_tuning_key, nb::arg("device_type"), nb::arg("ordinal"));
  m.def(
      "status_string",
      [](int status) { return std::string(a4w4_status_string(static_cast<a4w4_status>(status))); },
      nb::arg("status"));
  m.def(
      "dtype_to_dlpack",
      [](int dtype) {
        uint8_t code = 0;
        uint8_t bits = 0;
        check(a4w4_dtype_to_dlpack(static_cast<a4w4_dtype>(dtype), &code, &bits));
        return std::make_pair(static_cast<int>(code), static_cast<int>(bits));
      },
      nb::arg("dtype"));
  m.def(
      "dtype_from_dlpack",
      [](int code, int bits) {
        a4w4_dtype dtype{};
        check(
            a4w4_dtype_from_dlpack(static_cast<uint8_t>(code), static_cast<uint8_t>(bits), &dtype));
        return static_cast<int>(dtype);
      },
      nb::arg("code"), nb::arg("bits"));
  m.def("library_version", [] { return std::string(a4w4_version_string()); });
  m.attr("cuda_compiled") = static_cast<bool>(A4W4_PY_WITH_CUDA);
}
