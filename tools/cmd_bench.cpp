// `a4w4 bench`: a shape list (a preset or a file) on a backend, as a table. On CUDA it runs
// cuBLAS bf16 and cuBLASLt fp8 (per-tensor) on the same shapes in the same process (bench/
// gpu_bench.cpp); on the CPU it times a4w4 alone (the OpenBLAS comparison is the Google Benchmark
// program bench/cpu_bench).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "a4w4/a4w4.h"
#include "bench_data.h"
#include "commands.h"
#include "common.h"
#include "shape_selection.h"
#include "shapes.h"
#if A4W4_CLI_CUDA
#include "gpu_bench.h"
#endif

namespace a4w4::cli {
namespace {

struct BenchSettings {
  std::string preset;
  std::string shapes_file;
  std::vector<int64_t> ms;
  a4w4_backend backend = A4W4_BACKEND_CUDA;
  int samples = 30;
  int warmup_ms = 200;
  bool baselines = true;
  bool workspace = true;
  bool plain = true;
  bool prepared = true;
  std::string prepared_layout = "v2";  // v2 or v2-int8
  std::string data = "typical";  // a key of bench::bench_data_names()
  bool wide_scales = false;      // --wide-scales: --data wide
  bool quantize = false;
  GemmOptions call;  // kernel, split-K, math mode, B constant
  int threads = 0;
  std::string out_dtype = "bf16";
  std::string tuned;
  bool compare_heuristic = false;
};

std::vector<bench::Shape> selected_shapes(const BenchSettings& s) {
  if (!s.shapes_file.empty()) return select_shapes(s.shapes_file, s.ms);
  return select_shapes(s.preset.empty() ? "targets" : s.preset, s.ms);
}

// The kernel a context runs for these operands: "name[/split] (source)".
std::string chosen(const Context& context, const a4w4_tensor* operands[5],
                   const a4w4_gemm_options& options) {
  a4w4_gemm_choice choice{};
  choice.struct_size = sizeof choice;
  check(a4w4_gemm_choose(context.get(), operands[0], operands[1], operands[2], operands[3], nullptr,
                         nullptr, operands[4], &options, &choice),
        "a4w4_gemm_choose");
  const char* source = choice.source == A4W4_CHOICE_TUNED      ? "tuned"
                       : choice.source == A4W4_CHOICE_EXPLICIT ? "explicit"
                                                               : "heuristic";
  return fmt::format("{} ({})", kernel_and_split(choice.kernel, choice.split_k), source);
}

// CPU: median wall time of a4w4_gemm over `samples` calls after a warm-up, on random operands.
// With compare_heuristic, also the heuristic's own choice (a context without tuning), timed in
// the same run when it differs.
void run_cpu_bench(const BenchSettings& s, const std::vector<bench::Shape>& shapes) {
  Context context;
  context.set_num_threads(s.threads);
  if (!s.tuned.empty()) context.load_tuned(s.tuned);
  Context plain;
  plain.set_num_threads(s.threads);
  plain.clear_tuned();
  std::mt19937_64 rng(1);
  fmt::print(
      "| M×N×K | label | kernel | a4w4 cpu µs | TFLOP/s | GB/s |{}\n|---|---|---|---|---|---|{}\n",
      s.compare_heuristic ? " heuristic's kernel | µs | heuristic / chosen |" : "",
      s.compare_heuristic ? "---|---|---|" : "");
  for (size_t i = 0; i < shapes.size(); ++i) {
    const bench::Shape& shape = shapes[i];
    show_progress(i, shapes.size(), fmt::format("{}x{}x{}", shape.m, shape.n, shape.k));
    std::vector<uint8_t> a(shape.m * shape.k / 2), as(shape.m * shape.k / 32);
    std::vector<uint8_t> b(shape.n * shape.k / 2), bs(shape.n * shape.k / 32);
    std::vector<float> d(shape.m * shape.n);
    for (auto& v : a) v = static_cast<uint8_t>(rng());
    for (auto& v : b) v = static_cast<uint8_t>(rng());
    for (auto& v : as) v = static_cast<uint8_t>(120 + rng() % 16);
    for (auto& v : bs) v = static_cast<uint8_t>(120 + rng() % 16);
    const a4w4_device cpu = a4w4_cpu();
    const a4w4_tensor ta =
        a4w4_tensor_2d(a.data(), A4W4_DTYPE_E2M1, shape.m, shape.k, shape.k, cpu);
    const a4w4_tensor tas =
        a4w4_tensor_2d(as.data(), A4W4_DTYPE_E8M0, shape.m, shape.k / 32, shape.k / 32, cpu);
    const a4w4_tensor tb =
        a4w4_tensor_2d(b.data(), A4W4_DTYPE_E2M1, shape.n, shape.k, shape.k, cpu);
    const a4w4_tensor tbs =
        a4w4_tensor_2d(bs.data(), A4W4_DTYPE_E8M0, shape.n, shape.k / 32, shape.k / 32, cpu);
    const a4w4_tensor td = a4w4_tensor_2d(d.data(), A4W4_DTYPE_F32, shape.m, shape.n, shape.n, cpu);
    const a4w4_tensor* operands[5] = {&ta, &tas, &tb, &tbs, &td};
    const a4w4_gemm_options options = s.call.to_c();  // CPU kernels are exact in either mode
    auto median_us = [&](const Context& ctx) {
      auto call = [&] {
        check(a4w4_gemm(ctx.get(), &ta, &tas, &tb, &tbs, nullptr, nullptr, &td, &options, nullptr),
              "a4w4_gemm");
      };
      call();
      std::vector<double> us;
      for (int r = 0; r < s.samples; ++r) {
        const auto start = std::chrono::steady_clock::now();
        call();
        us.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                .count());
      }
      std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
      return us[us.size() / 2];
    };
    const std::string kernel = chosen(context, operands, options);
    const double median = median_us(context);
    const double bytes =
        (shape.m + shape.n) * (shape.k / 2.0 + shape.k / 32.0) + 4.0 * shape.m * shape.n;
    std::string comparison;
    if (s.compare_heuristic) {
      const std::string heuristic = chosen(plain, operands, options);
      const bool same =
          heuristic.substr(0, heuristic.find(' ')) == kernel.substr(0, kernel.find(' '));
      const double heuristic_us = same ? median : median_us(plain);
      comparison =
          fmt::format(" {} | {:.1f} | {:.3f} |", heuristic, heuristic_us, heuristic_us / median);
    }
    fmt::print("| {}×{}×{} | {} | {} | {:.1f} | {:.3f} | {:.1f} |{}\n", shape.m, shape.n, shape.k,
               shape.label, kernel, median, 2.0 * shape.m * shape.n * shape.k / median / 1e6,
               bytes / median / 1e3, comparison);
  }
  show_progress(shapes.size(), shapes.size(), "done");
  context.report_tuned_warnings();
}

void run_bench(const BenchSettings& s) {
  const std::vector<bench::Shape> shapes = selected_shapes(s);
  if (s.backend == A4W4_BACKEND_CPU) {
    if (s.data != "typical" || s.wide_scales)
      fail(
          "--data and --wide-scales choose the GPU benchmark's operands; the CPU benchmark "
          "times random codes with block scales 120..135");
    return run_cpu_bench(s, shapes);
  }
  int devices = 0;
  const a4w4_status status = a4w4_device_count(A4W4_BACKEND_CUDA, &devices);
  if (status != A4W4_SUCCESS)
    fail("--backend cuda: {} ({})", a4w4_status_string(status), a4w4_last_error_message());
#if A4W4_CLI_CUDA
  bench::GpuBenchOptions options;
  options.samples = s.samples;
  options.warmup_ms = s.warmup_ms;
  options.baselines = s.baselines;
  options.plain_weights = s.plain;
  options.prepared_weights = s.prepared;
  options.prepared_layout =
      s.prepared_layout == "v2-int8" ? A4W4_LAYOUT_PREPARED_V2_INT8 : A4W4_LAYOUT_PREPARED_V2;
  options.data = bench::bench_data_names().at(s.wide_scales ? "wide" : s.data);
  options.call = s.call;
  options.out_dtype = s.out_dtype;
  options.tuned = s.tuned;
  options.compare_heuristic = s.compare_heuristic;
  options.workspace = s.workspace;
  try {
    fmt::print(stderr, "measuring the device-to-device copy bandwidth...\n");
    const bench::GpuDeviceFacts facts = bench::measure_device(options);
    const auto rows = bench::run_gpu_gemm_bench(shapes, options, facts, show_progress);
    fmt::print(
        "device: {} (L2 {:.0f} MiB), copy bandwidth {:.0f} GB/s (bytes read + written); "
        "D in {}; data: {}; math: {}{}; median of {} graph replays per figure\n\n",
        facts.name, facts.l2_bytes / (1 << 20), facts.copy_gbps, s.out_dtype,
        bench::describe(options.data), s.call.math_mode == A4W4_MATH_FAST_ACCUM ? "fast" : "exact",
        s.call.b_constant ? "; B constant (read before the call ahead has finished)" : "",
        s.samples);
    fmt::print("{}", bench::format_gemm_table(rows, facts));
    if (s.quantize) {
      std::vector<bench::QuantizeBenchRow> q = {
          bench::run_gpu_quantize_bench(8192, 8192, options, facts)};
      fmt::print("\n{}", bench::format_quantize_table(q, facts));
    }
  } catch (const Failure&) {
    throw;
  } catch (const std::exception& e) {
    fail("bench: {}", e.what());
  }
#else
  fail("--backend cuda: liba4w4 sees {} CUDA device(s), but this tool was built without CUDA",
       devices);
#endif
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto settings = std::make_shared<BenchSettings>();
  CLI::App* command = app.add_subcommand(
      "bench", "Time a4w4 on a list of GEMM shapes, side by side with cuBLAS on a GPU");
  std::vector<std::string> presets = bench::preset_names();
  command->add_option("--preset", settings->preset, "Built-in shape list (default: targets)")
      ->check(CLI::IsMember(presets));
  command
      ->add_option("--shapes", settings->shapes_file,
                   "Shape file: one 'M N K [label]' or 'MxNxK [label]' per line")
      ->check(CLI::ExistingFile);
  add_ms_option(*command, settings->ms);
  add_choice_option<a4w4_backend>(*command, "--backend", settings->backend,
                                  {{"cuda", A4W4_BACKEND_CUDA}, {"cpu", A4W4_BACKEND_CPU}},
                                  "Backend to time (default cuda)");
  command->add_option("--samples", settings->samples, "Timed repetitions; the median is reported")
      ->check(CLI::Range(3, 10000));
  command
      ->add_option("--warmup-ms", settings->warmup_ms,
                   "How long each configuration (a4w4 and baselines alike) runs before it is "
                   "timed (default 200: a power-capped GPU is timed at its sustained clocks)")
      ->check(CLI::Range(0, 60000));
  command->add_flag("!--no-baselines", settings->baselines, "Skip the cuBLAS baselines");
  command->add_flag("!--no-workspace", settings->workspace,
                    "Give a4w4 no device workspace (the staging kernels then do not run)");
  command->add_flag("!--no-plain", settings->plain, "Skip timing a4w4 on a plain (unprepared) B");
  command->add_flag("!--no-prepared", settings->prepared,
                    "Skip timing a4w4 on a prepared B (rates then come from the plain B)");
  command
      ->add_option("--prepared-layout", settings->prepared_layout,
                   "The prepared B's layout: v2 (4-bit tiles), or v2-int8 (with B's int8 form: the "
                   "int8 kernels skip B's staging; about 2.9x v2's bytes)")
      ->check(CLI::IsMember({"v2", "v2-int8"}));
  command->add_flag("--quantize", settings->quantize, "Also time quantizing 8192x8192 bf16");
  auto* data = command
                   ->add_option("--data", settings->data,
                                "Operands a4w4 is timed on: typical (random codes, scales "
                                "125..127), wide (scales 120..135: nothing folds), drift (each "
                                "128-K tile folds, no chunk of 8 does), gaussian (Gaussian bf16 "
                                "quantized by a4w4), outliers (the same, A with outlier channels)")
                   ->check(CLI::IsMember(bench::bench_data_names()));
  command
      ->add_flag("--wide-scales", settings->wide_scales,
                 "Block scales spread over 120..135 (defeats scale folding): --data wide")
      ->excludes(data);
  add_call_options(*command, settings->call);
  command->add_option("--out-dtype", settings->out_dtype, "D's dtype")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  command->add_option("--tuned", settings->tuned, "Load this tuned configuration")
      ->check(CLI::ExistingFile);
  command->add_flag("--compare-heuristic", settings->compare_heuristic,
                    "Also time what the heuristic alone chooses (tuned vs heuristic)");
  add_threads_option(*command, settings->threads);
  command->callback([settings] { run_bench(*settings); });
}

}  // namespace a4w4::cli
