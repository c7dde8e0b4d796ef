// The subcommands of the a4w4 tool; each adds itself to the application and runs from its
// callback, reporting failures by throwing cli::Failure.
#pragma once

#include <a4w4/a4w4.h>

#include <a4w4/a4w4.hpp>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace a4w4::cli {

// --threads N, shared by the commands that compute.
inline CLI::Option* add_threads_option(CLI::App& command, int& threads) {
  return command
      .add_option("--threads", threads, "CPU threads for the library (0: one per hardware thread)")
      ->check(CLI::NonNegativeNumber);
}

// -m M[,M...]: each shape of a list at each of these M instead of its own (bench, tune;
// bench::with_ms applies it).
inline CLI::Option* add_ms_option(CLI::App& command, std::vector<int64_t>& ms) {
  return command
      .add_option("-m", ms,
                  "Each shape at each of these M instead of its own (a list; shapes that then "
                  "coincide appear once)")
      ->check(CLI::PositiveNumber)
      ->delimiter(',');
}

// An option taking one of a few names (any case) that stores the value paired with the name.
template <typename T>
CLI::Option* add_choice_option(CLI::App& command, const std::string& name, T& target,
                               std::vector<std::pair<std::string, T>> choices,
                               const std::string& description) {
  std::vector<std::string> names;
  for (const auto& choice : choices) names.push_back(choice.first);
  auto store = [&target, choices](const std::string& given) {
    for (const auto& [choice_name, value] : choices)
      if (CLI::detail::to_lower(given) == choice_name) target = value;
  };
  return command.add_option_function<std::string>(name, store, description)
      ->check(CLI::IsMember(names, CLI::ignore_case));
}

// The options of every a4w4_gemm call a command makes: --kernel NAME, --split-k N, --math
// exact|fast and --b-constant (GemmOptions' kernel, split_k, math_mode, b_constant).
inline void add_call_options(CLI::App& command, GemmOptions& call) {
  command.add_option("--kernel", call.kernel, "Run this registered kernel (see a4w4 kernels)");
  command.add_option("--split-k", call.split_k, "Split K into N partitions (0: automatic)")
      ->check(CLI::NonNegativeNumber);
  add_choice_option<a4w4_math_mode>(
      command, "--math", call.math_mode,
      {{"exact", A4W4_MATH_EXACT}, {"fast", A4W4_MATH_FAST_ACCUM}},
      "Math mode: exact (the contract, default) or fast (tensor-core accumulation inside a K tile "
      "where a kernel has it: A4W4_MATH_FAST_ACCUM)");
  command.add_flag(
      "--b-constant", call.b_constant,
      "Promise that B is not written while the calls run and was synchronised with since it was "
      "written (weights, as in inference): a kernel launched early may read it before the kernel "
      "ahead of it has finished (a4w4_gemm_options.b_constant)");
}

void add_info_command(CLI::App& app);
void add_kernels_command(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_dequantize_command(CLI::App& app);
void add_gemm_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_tune_command(CLI::App& app);
void add_config_command(CLI::App& app);

}  // namespace a4w4::cli
