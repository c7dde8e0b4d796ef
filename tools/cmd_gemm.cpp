// `a4w4 gemm`: D = alpha * A B^T + beta * C + bias on MXFP4 operands read from .npy files, or,
// given sizes (or nothing at all), a benchmark on random data (gemm_bench.cpp).
#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "a4w4/a4w4.h"
#include "commands.h"
#include "common.h"
#include "gemm_bench.h"
#include "gemm_runner.h"

namespace a4w4::cli {
namespace {

struct GemmFiles {
  std::string a, a_scale, b, b_scale, out, bias, c;
};

constexpr npy::Dtype kFloats[] = {npy::Dtype::kF32, npy::Dtype::kF16};

FloatMatrix load_c(const std::string& path, int64_t m, int64_t n) {
  InputArray input = load_input("--c", path);
  const MatrixShape shape = expect_matrix(input, kFloats);
  if (shape.rows != m || shape.cols != n)
    fail("{}: shape {} does not match [M, N] = [{}, {}] of --a and --b", input.label,
         npy::shape_string(input.array.shape), m, n);
  return {float_dtype(input.array.dtype), m, n, std::move(input.array.data)};
}

FloatMatrix load_bias(const std::string& path, int64_t n) {
  InputArray input = load_input("--bias", path);
  expect_dtype(input, kFloats);
  if (input.array.rank() != 1 || input.array.shape[0] != n)
    fail("{}: shape {} does not match [N] = [{}] (the rows of --b)", input.label,
         npy::shape_string(input.array.shape), n);
  return {float_dtype(input.array.dtype), 1, n, std::move(input.array.data)};
}

const char* npy_form(OutDtype dtype) {
  switch (dtype) {
    case OutDtype::kBF16:
      return "<f4 holding bf16 values";
    case OutDtype::kF16:
      return "<f2";
    case OutDtype::kF32:
      break;
  }
  return "<f4";
}

void run_gemm_files(const GemmFiles& files, const GemmSettings& settings) {
  std::unique_ptr<DeviceMemory> memory = make_device_memory(settings.backend);
  const MxMatrix a = load_mx_matrix("--a", files.a, "--a-scale", files.a_scale);
  const MxMatrix b = load_mx_matrix("--b", files.b, "--b-scale", files.b_scale);
  if (b.k != a.k)
    fail("--b {}: K = {} does not match K = {} of --a {}", files.b, b.k, a.k, files.a);
  std::optional<FloatMatrix> c, bias;
  if (!files.c.empty()) c = load_c(files.c, a.rows, b.rows);
  if (!files.bias.empty()) bias = load_bias(files.bias, b.rows);

  GemmRun gemm(settings, *memory, a, b, c ? &*c : nullptr, bias ? &*bias : nullptr);
  gemm.run();
  OutputFiles outputs;
  outputs.add("--out", files.out, result_array(settings.out, a.rows, b.rows, gemm.result()));
  outputs.commit();
  fmt::print("gemm M={} N={} K={} -> {} [{}, {}] ({} output as {})\n", a.rows, b.rows, a.k,
             files.out, a.rows, b.rows, out_dtype_name(settings.out), npy_form(settings.out));
}

// The first of options that was given on the command line, or null.
const CLI::Option* first_given(std::initializer_list<const CLI::Option*> options) {
  for (const CLI::Option* option : options)
    if (option->count() > 0) return option;
  return nullptr;
}

}  // namespace

void add_gemm_command(CLI::App& app) {
  struct State {
    GemmFiles files;
    BenchOptions bench;
    GemmSettings settings;
  };
  auto state = std::make_shared<State>();
  CLI::App* command = app.add_subcommand(
      "gemm",
      "D = alpha * A B^T + beta * C + bias on MXFP4 .npy files (--a ... --out), or a benchmark "
      "on random data (-m -n -k). With no arguments: -m 256 -n 1024 -k 2048 --check");

  // Operands from files.
  auto* a = command->add_option("--a", state->files.a, "A.npy: |u1 [M, K/2], packed E2M1");
  auto* a_scale = command->add_option("--a-scale", state->files.a_scale, "AS.npy: |u1 [M, K/32]");
  auto* b = command->add_option("--b", state->files.b, "B.npy: |u1 [N, K/2], packed E2M1");
  auto* b_scale = command->add_option("--b-scale", state->files.b_scale, "BS.npy: |u1 [N, K/32]");
  auto* out = command->add_option("--out", state->files.out,
                                  "D.npy to write: <f4 [M, N] (<f2 for --out-dtype fp16)");
  auto* bias = command->add_option("--bias", state->files.bias, "BIAS.npy: <f4 or <f2 [N]");
  auto* c = command->add_option("--c", state->files.c, "C.npy: <f4 or <f2 [M, N]");
  auto* alpha =
      command->add_option("--alpha", state->settings.call.alpha, "Scale of A B^T (default 1)");
  auto* beta = command->add_option("--beta", state->settings.call.beta, "Scale of C (default 0)");

  // Benchmark on random data.
  auto* m = command->add_option("-m", state->bench.m, "Benchmark: rows of A and D (default 256)")
                ->check(CLI::PositiveNumber);
  auto* n = command->add_option("-n", state->bench.n, "Benchmark: rows of B, columns of D (1024)")
                ->check(CLI::PositiveNumber);
  auto* k = command->add_option("-k", state->bench.k, "Benchmark: K, a multiple of 32 (2048)")
                ->check(CLI::PositiveNumber);
  auto* check_flag = command->add_flag(
      "--check,!--no-check", state->bench.check,
      "Benchmark: compare with a float64 reference (default: on only when no size is given)");
  auto* repeat = command->add_option("--repeat", state->bench.repeat, "Benchmark: timed runs (5)")
                     ->check(CLI::PositiveNumber);
  auto* seed = command->add_option("--seed", state->bench.seed, "Benchmark: random seed (1)");

  // Both modes.
  add_choice_option<OutDtype>(
      *command, "--out-dtype", state->settings.out,
      {{"fp32", OutDtype::kF32}, {"bf16", OutDtype::kBF16}, {"fp16", OutDtype::kF16}},
      "D's dtype (default fp32)");
  add_choice_option<a4w4_backend>(*command, "--backend", state->settings.backend,
                                  {{"cpu", A4W4_BACKEND_CPU}, {"cuda", A4W4_BACKEND_CUDA}},
                                  "Where the GEMM runs (default cpu)");
  add_call_options(*command, state->settings.call);
  command->add_option("--tuned", state->settings.tuned, "Load this tuned configuration")
      ->check(CLI::ExistingFile);
  add_threads_option(*command, state->settings.threads);

  command->callback([=] {
    const CLI::Option* file_option =
        first_given({a, a_scale, b, b_scale, out, bias, c, alpha, beta});
    const CLI::Option* bench_option = first_given({m, n, k, check_flag, repeat, seed});
    if (file_option != nullptr) {
      if (bench_option != nullptr)
        fail("gemm: {} (operands from files) cannot be combined with {} (random benchmark)",
             file_option->get_name(), bench_option->get_name());
      for (const CLI::Option* required : {a, a_scale, b, b_scale, out})
        if (required->count() == 0)
          fail("gemm: {} is required when the operands come from files", required->get_name());
      if (beta->count() > 0 && c->count() == 0) fail("gemm: --beta has no effect without --c");
      run_gemm_files(state->files, state->settings);
      return;
    }
    // The plain `a4w4 gemm` is the default problem with its result checked.
    if (check_flag->count() == 0) state->bench.check = first_given({m, n, k}) == nullptr;
    run_gemm_benchmark(state->bench, state->settings);
  });
}

}  // namespace a4w4::cli
