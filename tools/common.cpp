#include "common.h"

#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>

#include "device_memory.h"

namespace a4w4::cli {
namespace fs = std::filesystem;

void check(a4w4_status status, std::string_view what) {
  if (status == A4W4_SUCCESS) return;
  fail("{}: {} ({})", what, a4w4_status_string(status), a4w4_last_error_message());
}

Context::Context() {
  check(a4w4_context_create(&context_), "cannot create an a4w4 context");
}

Context::~Context() {
  a4w4_context_destroy(context_);
}

void Context::set_num_threads(int threads) {
  check(a4w4_context_set_num_threads(context_, threads), "--threads");
}

void Context::set_backend(a4w4_backend backend) {
  check(a4w4_context_set_backend(context_, backend),
        fmt::format("--backend {}", a4w4_backend_name(backend)));
}

void Context::load_tuned(const std::string& path) {
  check(a4w4_context_load_tuned(context_, path.c_str()), "--tuned " + path);
  report_tuned_warnings();
}

void Context::clear_tuned() {
  check(a4w4_context_clear_tuned(context_), "cannot clear the tuned configuration");
  warnings_reported_ = 0;
}

void Context::report_tuned_warnings() {
  const std::vector<std::string> warnings = tuned_warnings(context_);
  for (size_t i = static_cast<size_t>(warnings_reported_); i < warnings.size(); ++i)
    fmt::print(stderr, "a4w4: warning: {}\n", warnings[i]);
  warnings_reported_ = static_cast<int>(warnings.size());
}

std::vector<std::string> tuned_warnings(a4w4_context context) {
  int count = 0;
  check(a4w4_context_tuned_count(context, nullptr, &count), "cannot read the tuned warnings");
  std::vector<std::string> warnings;
  for (int i = 0; i < count; ++i) {
    char text[1024];
    check(a4w4_context_tuned_warning(context, i, text, sizeof text),
          "cannot read the tuned warnings");
    warnings.emplace_back(text);
  }
  return warnings;
}

void show_progress(size_t done, size_t total, const std::string& label) {
  const bool tty = isatty(fileno(stderr));
  if (!tty) {
    if (done < total) fmt::print(stderr, "[{}/{}] {}\n", done + 1, total, label);
    return;
  }
  constexpr int kWidth = 30;
  const int filled = total ? static_cast<int>(kWidth * done / total) : kWidth;
  fmt::print(stderr, "\r[{}{}] {}/{} {:<40}", std::string(filled, '#'),
             std::string(kWidth - filled, '.'), done, total, label.substr(0, 40));
  if (done == total) fmt::print(stderr, "\n");
  std::fflush(stderr);
}

std::vector<KernelInfo> registered_kernels() {
  std::vector<KernelInfo> kernels(static_cast<size_t>(a4w4_kernel_count()));
  for (size_t index = 0; index < kernels.size(); ++index) {
    KernelInfo& kernel = kernels[index];
    check(a4w4_kernel_info(static_cast<int>(index), &kernel.name, &kernel.backend),
          "cannot list the kernels");
    kernel.properties.struct_size = sizeof(a4w4_kernel_properties);
    check(a4w4_kernel_describe(static_cast<int>(index), &kernel.properties),
          "cannot describe the kernels");
  }
  return kernels;
}

std::string kernel_and_split(const char* kernel, int split_k) {
  return split_k > 0 ? fmt::format("{}/{}", kernel, split_k) : std::string(kernel);
}

InputArray load_input(std::string_view option, const std::string& path) {
  InputArray input{fmt::format("{} {}", option, path), {}};
  try {
    input.array = npy::read_file(path);
  } catch (const npy::Error& e) {
    fail("{}: {}", input.label, e.what());
  }
  return input;
}

namespace {

std::string dtype_list(std::span<const npy::Dtype> dtypes) {
  std::string text;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (i > 0) text += i + 1 == dtypes.size() ? " or " : ", ";
    text += fmt::format("'{}'", npy::descr(dtypes[i]));
  }
  return text;
}

}  // namespace

void expect_dtype(const InputArray& input, std::span<const npy::Dtype> allowed) {
  if (std::find(allowed.begin(), allowed.end(), input.array.dtype) == allowed.end())
    fail("{}: dtype '{}' is not accepted here (expected {})", input.label,
         npy::descr(input.array.dtype), dtype_list(allowed));
}

MatrixShape expect_matrix(const InputArray& input, std::span<const npy::Dtype> allowed) {
  expect_dtype(input, allowed);
  if (input.array.rank() != 2)
    fail("{}: expected a 2-D array, got shape {}", input.label,
         npy::shape_string(input.array.shape));
  return {input.array.shape[0], input.array.shape[1]};
}

a4w4_dtype float_dtype(npy::Dtype dtype) {
  return dtype == npy::Dtype::kF16 ? A4W4_DTYPE_F16 : A4W4_DTYPE_F32;
}

MxMatrix load_mx_matrix(std::string_view values_option, const std::string& values_path,
                        std::string_view scales_option, const std::string& scales_path) {
  constexpr npy::Dtype kBytes[] = {npy::Dtype::kU8};
  InputArray values = load_input(values_option, values_path);
  const MatrixShape shape = expect_matrix(values, kBytes);
  if (shape.rows < 1)
    fail("{}: has no rows (shape {})", values.label, npy::shape_string(values.array.shape));
  const int64_t k = 2 * shape.cols;
  if (k < 32 || k % 32 != 0)
    fail("{}: a row of {} bytes holds K = {} E2M1 values; K must be a positive multiple of 32",
         values.label, shape.cols, k);

  InputArray scales = load_input(scales_option, scales_path);
  const MatrixShape scale_shape = expect_matrix(scales, kBytes);
  if (scale_shape.rows != shape.rows || scale_shape.cols != k / 32)
    fail("{}: shape {} does not match {} of shape {}: expected [{}, {}] (one scale per 32 values)",
         scales.label, npy::shape_string(scales.array.shape), values.label,
         npy::shape_string(values.array.shape), shape.rows, k / 32);
  return MxMatrix{shape.rows, k, std::move(values.array.data), std::move(scales.array.data)};
}

a4w4_tensor mx_values_tensor(const MxMatrix& op, void* data, a4w4_device device) {
  return a4w4_tensor_2d(data, A4W4_DTYPE_E2M1, op.rows, op.k, op.k, device);
}

a4w4_tensor mx_scales_tensor(const MxMatrix& op, void* data, a4w4_device device) {
  return a4w4_tensor_2d(data, A4W4_DTYPE_E8M0, op.rows, op.k / 32, op.k / 32, device);
}

a4w4_layout prepared_layout_named(std::string_view weights) {
  return weights == "prepared-int8" ? A4W4_LAYOUT_PREPARED_V2_INT8 : A4W4_LAYOUT_PREPARED_V2;
}

std::pair<a4w4_tensor, a4w4_tensor> prepare_weight_on(
    const Context& context, DeviceMemory& memory, const a4w4_tensor& b, const a4w4_tensor& b_scale,
    a4w4_layout layout, std::vector<uint8_t>& weight, std::vector<uint8_t>& scales) {
  const int64_t n = b.shape[0], k = b.shape[1];
  size_t weight_bytes = 0, scale_bytes = 0;
  check(a4w4_prepared_weight_size(n, k, layout, &weight_bytes, &scale_bytes),
        "a4w4_prepared_weight_size");
  weight.resize(weight_bytes);
  scales.resize(scale_bytes);
  const a4w4_device device = memory.device();
  a4w4_tensor pb = a4w4_tensor_2d(memory.output(weight), A4W4_DTYPE_E2M1, n, k, k, device);
  a4w4_tensor pbs =
      a4w4_tensor_2d(memory.output(scales), A4W4_DTYPE_E8M0, n, k / 32, k / 32, device);
  pb.layout = pbs.layout = layout;
  check(a4w4_prepare_weight(context.get(), &b, &b_scale, &pb, &pbs, memory.stream()),
        "a4w4_prepare_weight");
  memory.synchronize();
  return {pb, pbs};
}

MxMatrix quantize_matrix(const Context& context, const a4w4_tensor& x, a4w4_scale_mode mode) {
  MxMatrix q{x.shape[0], x.shape[1], {}, {}};
  q.values.resize(static_cast<size_t>(q.rows * q.k / 2));
  q.scales.resize(static_cast<size_t>(q.rows * q.k / 32));
  const a4w4_tensor values = mx_values_tensor(q, q.values.data(), a4w4_cpu());
  const a4w4_tensor scales = mx_scales_tensor(q, q.scales.data(), a4w4_cpu());
  check(a4w4_quantize(context.get(), &x, &values, &scales, mode, nullptr), "quantize failed");
  return q;
}

npy::Array make_array(npy::Dtype dtype, int64_t rows, int64_t cols, std::vector<uint8_t> bytes) {
  return npy::Array{dtype, {rows, cols}, std::move(bytes)};
}

void expect_distinct_outputs(std::span<const std::pair<std::string_view, std::string>> outputs) {
  std::vector<fs::path> resolved;
  for (const auto& [option, path] : outputs) {
    std::error_code error;
    fs::path full = fs::weakly_canonical(fs::absolute(path, error), error);
    if (error) full = fs::path(path).lexically_normal();
    for (size_t i = 0; i < resolved.size(); ++i) {
      if (resolved[i] == full)
        fail("{} {}: the same file as {}; give each output its own file", option, path,
             outputs[i].first);
    }
    resolved.push_back(std::move(full));
  }
}

namespace {

// Creates a new, empty file next to destination with a unique hidden name and opens it.
std::FILE* create_temporary(const fs::path& destination, std::string& temporary) {
  const fs::path directory = destination.parent_path();
  std::random_device entropy;
  for (int attempt = 0; attempt < 16; ++attempt) {
    const fs::path candidate =
        directory / fmt::format(".{}.a4w4-tmp-{:08x}", destination.filename().string(), entropy());
    // "x": fail rather than reuse a file that already exists.
    std::FILE* file = std::fopen(candidate.c_str(), "wbx");
    if (file != nullptr) {
      temporary = candidate.string();
      return file;
    }
    if (errno != EEXIST) break;
  }
  return nullptr;
}

}  // namespace

void OutputFiles::add(std::string_view option, const std::string& path, const npy::Array& array) {
  Pending output{fmt::format("{} {}", option, path), {}, path};
  const std::vector<uint8_t> image = npy::encode(array);
  std::FILE* file = create_temporary(path, output.temporary);
  if (file == nullptr)
    fail("{}: cannot create a file in its directory: {}", output.label, std::strerror(errno));
  pending_.push_back(output);  // removed by the destructor from here on
  errno = 0;
  const size_t written = std::fwrite(image.data(), 1, image.size(), file);
  const int write_errno = errno;
  if (std::fclose(file) != 0 || written != image.size())
    fail("{}: write failed: {}", output.label, std::strerror(write_errno ? write_errno : errno));
}

void OutputFiles::commit() {
  for (size_t i = 0; i < pending_.size(); ++i) {
    std::error_code error;
    fs::rename(pending_[i].temporary, pending_[i].destination, error);
    if (error) {
      const std::string reason = error.message();
      // Take back the outputs already in place so that the run leaves all of them or none.
      for (size_t j = 0; j < i; ++j) fs::remove(pending_[j].destination, error);
      fail("{}: cannot write: {}", pending_[i].label, reason);
    }
  }
  pending_.clear();
}

OutputFiles::~OutputFiles() {
  for (const Pending& output : pending_) {
    std::error_code ignored;
    fs::remove(output.temporary, ignored);
  }
}

}  // namespace a4w4::cli
