// Helpers shared by the a4w4 subcommands: the tool's error type, checked library calls, loading
// operands from .npy files with messages that name the option and file, and writing outputs so
// that a failed run never leaves a file behind.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "a4w4/a4w4.h"
#include "npy.h"

namespace a4w4::cli {

// A failure reported as "a4w4: error: <message>" on one line, with a non-zero exit status.
class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Failure(fmt::format(format, std::forward<Args>(args)...));
}

// Throws "<what>: <status string> (<last error message>)" unless status is A4W4_SUCCESS.
void check(a4w4_status status, std::string_view what);

// Owns an a4w4_context.
class Context {
 public:
  Context();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  a4w4_context get() const { return context_; }
  // 0 keeps the library's default (one thread per hardware thread).
  void set_num_threads(int threads);
  void set_backend(a4w4_backend backend);
  // Loads a tuned configuration (--tuned FILE); its warnings go to stderr.
  void load_tuned(const std::string& path);
  // Drops the tuned configuration (also one loaded from A4W4_TUNED_CONFIG): heuristic only.
  void clear_tuned();
  // Prints the tuned-configuration warnings not printed yet ("a4w4: warning: ...") to stderr.
  void report_tuned_warnings();

 private:
  a4w4_context context_ = nullptr;
  int warnings_reported_ = 0;
};

// The tuned-configuration warnings of context (a4w4_context_tuned_warning), in order.
std::vector<std::string> tuned_warnings(a4w4_context context);

// A progress bar on stderr when it is a terminal; one line per step otherwise (logs stay
// readable). Call with done = 0..total-1 before each step and done = total at the end.
void show_progress(size_t done, size_t total, const std::string& label);

// The registered GEMM kernels, in registry order.
struct KernelInfo {
  const char* name = nullptr;
  a4w4_backend backend = A4W4_BACKEND_AUTO;
  a4w4_kernel_properties properties{};
};
std::vector<KernelInfo> registered_kernels();

// "cuda.decode/4", "cuda.generic" (split 0: automatic) for tables and messages.
std::string kernel_and_split(const char* kernel, int split_k);

// An input file named on the command line: "--a A.npy" in messages.
struct InputArray {
  std::string label;  // "--a A.npy"
  npy::Array array;
};

// Reads path given as option; every problem becomes a Failure naming both.
InputArray load_input(std::string_view option, const std::string& path);

// The number of rows and columns of a rank-2 input of one of the allowed dtypes, or a Failure.
struct MatrixShape {
  int64_t rows = 0;
  int64_t cols = 0;
};
MatrixShape expect_matrix(const InputArray& input, std::span<const npy::Dtype> allowed);
void expect_dtype(const InputArray& input, std::span<const npy::Dtype> allowed);

// The library dtype of a float NPY array ('<f4' -> F32, '<f2' -> F16).
a4w4_dtype float_dtype(npy::Dtype dtype);

// An MX operand [rows, K] in host memory: packed E2M1 values, two per byte (rows x K/2 bytes),
// and E8M0 scales (rows x K/32 bytes), both row-major and contiguous.
struct MxMatrix {
  int64_t rows = 0;
  int64_t k = 0;
  std::vector<uint8_t> values;
  std::vector<uint8_t> scales;
};

// Descriptors of an MxMatrix's values [rows, K] E2M1 and scales [rows, K/32] E8M0 whose bytes
// are at data (its own host buffers, or a device copy of them).
a4w4_tensor mx_values_tensor(const MxMatrix& op, void* data, a4w4_device device);
a4w4_tensor mx_scales_tensor(const MxMatrix& op, void* data, a4w4_device device);

class DeviceMemory;

// The prepared layout a `--weights` value names: "prepared" (version 2) or "prepared-int8"
// (version 2 with B's int8 form).
a4w4_layout prepared_layout_named(std::string_view weights);

// b and b_scale (on memory's device) prepared in `layout` (a4w4_prepare_weight) into buffers
// backed by weight and scales, which it sizes and the caller keeps alive; returns their
// descriptors once memory's stream has finished.
std::pair<a4w4_tensor, a4w4_tensor> prepare_weight_on(
    const Context& context, DeviceMemory& memory, const a4w4_tensor& b, const a4w4_tensor& b_scale,
    a4w4_layout layout, std::vector<uint8_t>& weight, std::vector<uint8_t>& scales);

// Quantizes x (a CPU tensor [rows, K]) with the library into a new MxMatrix.
MxMatrix quantize_matrix(const Context& context, const a4w4_tensor& x, a4w4_scale_mode mode);

// Loads an operand from its value and scale files, checking that their shapes agree:
// values '|u1' [rows, K/2] with K % 32 == 0, scales '|u1' [rows, K/32].
MxMatrix load_mx_matrix(std::string_view values_option, const std::string& values_path,
                        std::string_view scales_option, const std::string& scales_path);

// Outputs of one run. add() writes each array to a temporary file next to its destination;
// commit() renames them all into place. Whatever was not committed is removed on destruction,
// so a run that fails part-way leaves no output file behind.
class OutputFiles {
 public:
  OutputFiles() = default;
  ~OutputFiles();
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;

  void add(std::string_view option, const std::string& path, const npy::Array& array);
  void commit();

 private:
  struct Pending {
    std::string label;
    std::string temporary;
    std::string destination;
  };
  std::vector<Pending> pending_;
};

// Fails if two options name the same output file (they would overwrite each other).
void expect_distinct_outputs(std::span<const std::pair<std::string_view, std::string>> outputs);

// A rank-2 NPY array of dtype with data copied from bytes.
npy::Array make_array(npy::Dtype dtype, int64_t rows, int64_t cols, std::vector<uint8_t> bytes);

}  // namespace a4w4::cli
