#include "gemm_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "float_bits.h"
#include "mx_reference.h"

namespace a4w4::cli {
namespace {

// Normal values whose magnitude changes from block to block (2^-4 .. 2^4), so that the scales
// of a row differ and the GEMM has to apply them per block.
std::vector<uint16_t> random_bf16(std::mt19937_64& rng, int64_t rows, int64_t cols) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-4, 4);
  std::vector<uint16_t> bits(static_cast<size_t>(rows * cols));
  for (size_t block = 0; block < bits.size() / 32; ++block) {
    const float magnitude = std::ldexp(1.0f, exponent(rng));
    for (size_t i = 0; i < 32; ++i) bits[block * 32 + i] = float_to_bf16(normal(rng) * magnitude);
  }
  return bits;
}

MxMatrix random_operand(const Context& context, std::mt19937_64& rng, int64_t rows, int64_t k) {
  std::vector<uint16_t> x = random_bf16(rng, rows, k);
  const a4w4_tensor tensor = a4w4_tensor_2d(x.data(), A4W4_DTYPE_BF16, rows, k, k, a4w4_cpu());
  return quantize_matrix(context, tensor, A4W4_SCALE_RCEIL);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

std::string automatic_or(int value) {
  return value == 0 ? "auto" : std::to_string(value);
}

}  // namespace

void run_gemm_benchmark(const BenchOptions& options, const GemmSettings& settings) {
  if (options.k % 32 != 0) fail("-k: K = {} is not a multiple of 32", options.k);
  std::unique_ptr<DeviceMemory> memory = make_device_memory(settings.backend);

  fmt::print(
      "gemm M={} N={} K={}: backend {}, kernel {}, split-k {}, threads {}, {} output, seed {}\n",
      options.m, options.n, options.k, a4w4_backend_name(settings.backend),
      settings.call.kernel.empty() ? "auto" : settings.call.kernel,
      automatic_or(settings.call.split_k), automatic_or(settings.threads),
      out_dtype_name(settings.out), options.seed);

  Context quantize_context;
  quantize_context.set_num_threads(settings.threads);
  std::mt19937_64 rng(options.seed);
  const MxMatrix a = random_operand(quantize_context, rng, options.m, options.k);
  const MxMatrix b = random_operand(quantize_context, rng, options.n, options.k);

  GemmRun gemm(settings, *memory, a, b, nullptr, nullptr);
  gemm.run();  // warm-up: first-touch of pages, thread pool start-up, kernel selection
  gemm.synchronize();
  std::vector<double> seconds;
  for (int run = 0; run < options.repeat; ++run) {
    const auto start = std::chrono::steady_clock::now();
    gemm.run();
    gemm.synchronize();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double time = median(seconds);
  const double flops = 2.0 * static_cast<double>(options.m) * static_cast<double>(options.n) *
                       static_cast<double>(options.k);
  fmt::print("time: median {:.3f} ms over {} runs (min {:.3f} ms, max {:.3f} ms), 1 warm-up\n",
             time * 1e3, seconds.size(), *std::min_element(seconds.begin(), seconds.end()) * 1e3,
             *std::max_element(seconds.begin(), seconds.end()) * 1e3);
  fmt::print("rate: {:.4f} TFLOP/s (2*M*N*K = {:.4g} flop)\n", flops / time * 1e-12, flops);
  if (!options.check) return;

  const std::vector<double> result = result_values(settings.out, gemm.result());
  const Comparison comparison = compare(result, reference_gemm(a, b));
  const double limit = check_tolerance(settings.out, settings.call.math_mode);
  const bool passed = comparison.relative_error <= limit && comparison.nan_mismatches == 0 &&
                      comparison.infinite == 0;
  fmt::print("check: ||D - ref|| / ||ref|| = {:.3e} (tolerance {:.0e} for {}; float64 reference)",
             comparison.relative_error, limit, out_dtype_name(settings.out));
  if (comparison.nan_mismatches != 0 || comparison.infinite != 0)
    fmt::print(", {} NaN and {} infinity mismatches", comparison.nan_mismatches,
               comparison.infinite);
  fmt::print(": {}\n", passed ? "ok" : "FAILED");
  if (!passed)
    fail(
        "gemm --check: the result differs from the float64 reference (relative error {:.3e}, "
        "tolerance {:.0e}, {} NaN and {} infinity mismatches)",
        comparison.relative_error, limit, comparison.nan_mismatches, comparison.infinite);
}

}  // namespace a4w4::cli
