// `a4w4 tune`: measures every applicable kernel and split-K on each shape of a list and writes the
// fastest correct one per shape as a tuned configuration (docs/kernels-and-tuning.md). Each
// candidate's result is checked against the float64 reference first (all of D for small shapes,
// sampled rows and columns otherwise, always including the last ones); a candidate that computes a
// wrong result is reported and never chosen.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "a4w4/a4w4.h"
#include "block_scales.h"
#include "commands.h"
#include "common.h"
#include "device_memory.h"
#include "gemm_runner.h"
#include "mx_reference.h"
#include "shape_selection.h"
#include "tuned_csv.h"
#if A4W4_CLI_CUDA
#include "gpu_bench.h"
#endif

namespace a4w4::cli {
namespace {

struct TuneSettings {
  std::string shapes;
  std::vector<int64_t> ms;
  std::string out;
  a4w4_backend backend = A4W4_BACKEND_CPU;
  int samples = 5;
  std::vector<int> splits = {2, 4, 8, 16};
  std::string weights;  // "plain", "prepared" or "prepared-int8"; default: prepared on CUDA,
                        // plain on the CPU
  OutDtype out_dtype = OutDtype::kBF16;
  double batch_ms = 2.0;   // each timing sample runs calls for at least this long
  // CUDA: each candidate runs this long before it is timed, at the clocks it sustains (the H200
  // caps its power: a candidate timed right after a heavy one would run slower; bench/RESULTS.md).
  int warmup_ms = 100;
  double rotate_mib = -1;  // operand sets cycled through; -1: 0 on the CPU, 256 on CUDA (> L2)
  int threads = 0;
  uint64_t seed = 1;
  bool wide_scales = false;  // scales 120..135 instead of the typical 125..127 (as a4w4 bench)
  // Give the contexts a device workspace sized for the largest shape, so that the staging kernels
  // (cuda.int8_128x128) compete; the entries are marked as tuned with one (column `workspace`).
  bool workspace = false;
  // The heuristic's choice stays unless another is at least this much faster (percent): closer
  // timings are noise, and a tuned entry should never be a coin flip against the heuristic.
  double margin_percent = 2.0;
};

// A candidate whose one-sample probe is this many times slower than the best so far is not timed
// further (the generic kernel at M = 8192 takes 100+ ms per call).
constexpr double kPruneFactor = 1.5;

struct Candidate {
  std::string kernel;
  int split_k = 0;
  double us = 0;  // 0: not measured (not applicable or wrong)
};

// Random E2M1 codes (every code) with the block scales a4w4 bench uses (bench/block_scales.h):
// typical, which the decode kernel folds, or wide (its exact per-block path). Tuning on the data
// the choice will serve matters: the best split differs between the two.
MxMatrix random_mx(std::mt19937_64& rng, int64_t rows, int64_t k, bool wide_scales) {
  MxMatrix op{rows, k, std::vector<uint8_t>(static_cast<size_t>(rows * k / 2)),
              std::vector<uint8_t>(static_cast<size_t>(rows * k / 32))};
  for (auto& v : op.values) v = static_cast<uint8_t>(rng());
  const bench::ScaleRange range = wide_scales ? bench::kWideScales : bench::kTypicalScales;
  for (auto& s : op.scales)
    s = static_cast<uint8_t>(range.first + static_cast<int>(rng() % range.count));
  return op;
}

// The entries of D that are checked: all of them for small shapes; otherwise the first, middle
// and last rows and columns plus random ones (edge tiles are where kernels go wrong).
std::vector<int64_t> sample(int64_t size, size_t extra, std::mt19937_64& rng, bool all) {
  std::vector<int64_t> picks;
  if (all) {
    for (int64_t i = 0; i < size; ++i) picks.push_back(i);
    return picks;
  }
  picks = {0, size / 2, size - 1};
  for (size_t i = 0; i < extra; ++i) picks.push_back(static_cast<int64_t>(rng() % size));
  std::sort(picks.begin(), picks.end());
  picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
  return picks;
}

// One set of operands on the device, as a4w4_gemm takes them.
struct OperandSet {
  std::vector<uint8_t> prepared, prepared_scale, d;  // host buffers behind device copies
  a4w4_tensor a{}, as{}, b{}, bs{}, d_tensor{};
};

class ShapeRun {
 public:
  ShapeRun(const TuneSettings& settings, DeviceMemory& memory, Context& context,
           const bench::Shape& shape, uint64_t seed)
      : settings_(settings), memory_(memory), context_(context), shape_(shape) {
    std::mt19937_64 rng(seed);
    a_ = random_mx(rng, shape.m, shape.k, settings.wide_scales);
    b_ = random_mx(rng, shape.n, shape.k, settings.wide_scales);
    const a4w4_dtype d_dtype = library_dtype(settings.out_dtype);
    const double d_bytes = static_cast<double>(shape.m * shape.n * (a4w4_dtype_bits(d_dtype) / 8));
    const double set_bytes = static_cast<double>(a_.values.size() + a_.scales.size() +
                                                 b_.values.size() + b_.scales.size()) +
                             d_bytes;
    const double rotate = settings.rotate_mib * 1024 * 1024;
    const int sets = std::clamp(static_cast<int>(std::ceil(rotate / set_bytes)), 1, 16);
    sets_.resize(static_cast<size_t>(sets));
    for (OperandSet& set : sets_) make_set(set, d_dtype);

    const bool all = shape.m * shape.n <= (int64_t{1} << 14);
    rows_ = sample(shape.m, 5, rng, all);
    cols_ = sample(shape.n, 256, rng, all);
    for (int64_t r : rows_)
      for (int64_t c : cols_) reference_.push_back(reference_entry(a_, r, b_, c));
  }

  // Empty when kernel (with split) cannot run this shape; otherwise "" and runs nothing.
  std::string why_not(const std::string& kernel, int split) {
    const a4w4_gemm_options options = options_for(kernel, split);
    const OperandSet& s = sets_[0];
    const a4w4_status status =
        a4w4_kernel_applicable(context_.get(), kernel.c_str(), &s.a, &s.as, &s.b, &s.bs, nullptr,
                               nullptr, &s.d_tensor, &options);
    if (status == A4W4_SUCCESS) return {};
    if (status == A4W4_ERROR_KERNEL_NOT_APPLICABLE || status == A4W4_ERROR_KERNEL_NOT_FOUND)
      return a4w4_last_error_message();
    check(status, fmt::format("a4w4_kernel_applicable({})", kernel));
    return {};
  }

  // ||D - ref|| / ||ref|| over the checked entries (NaN mismatches make it infinite).
  double error_of(const std::string& kernel, int split) {
    run(kernel, split, 0);
    memory_.synchronize();
    OperandSet& s = sets_[0];
    memory_.download(s.d_tensor.data, s.d);
    const std::vector<double> values = result_values(settings_.out_dtype, s.d);
    std::vector<double> got;
    for (int64_t r : rows_)
      for (int64_t c : cols_) got.push_back(values[static_cast<size_t>(r * shape_.n + c)]);
    const Comparison comparison = compare(got, reference_);
    if (comparison.nan_mismatches != 0 || comparison.infinite != 0) return INFINITY;
    return comparison.relative_error;
  }

  // Median microseconds per call over samples of batches of back-to-back calls: on a GPU, replays
  // of a captured graph timed with events (device time); on the CPU, wall time.
  double time(const std::string& kernel, int split) {
    return time(kernel, split, settings_.samples, settings_.batch_ms);
  }
  double time(const std::string& kernel, int split, int samples, double batch_ms) {
#if A4W4_CLI_CUDA
    if (settings_.backend == A4W4_BACKEND_CUDA)
      return bench::time_enqueued(
          [&](void*, int i) { run(kernel, split, static_cast<size_t>(i) % sets_.size()); },
          memory_.stream(), std::max(samples, 1), batch_ms * 1000, settings_.warmup_ms);
#endif
    using clock = std::chrono::steady_clock;
    auto batch_seconds = [&](int calls) {
      const auto start = clock::now();
      for (int i = 0; i < calls; ++i) run(kernel, split, static_cast<size_t>(i) % sets_.size());
      memory_.synchronize();
      return std::chrono::duration<double>(clock::now() - start).count();
    };
    batch_seconds(1);  // warm-up (first touch, caches, lazy loading)
    const double one = std::max(batch_seconds(1), 1e-7);
    const int calls = std::clamp(static_cast<int>(batch_ms * 1e-3 / one), 1, 10000);
    std::vector<double> us;
    for (int i = 0; i < std::max(samples, 1); ++i) us.push_back(batch_seconds(calls) / calls * 1e6);
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  }

  // What the heuristic alone would run (a context without a tuned configuration).
  Candidate heuristic(Context& plain) {
    const OperandSet& s = sets_[0];
    a4w4_gemm_choice choice{};
    choice.struct_size = sizeof choice;
    check(a4w4_gemm_choose(plain.get(), &s.a, &s.as, &s.b, &s.bs, nullptr, nullptr, &s.d_tensor,
                           nullptr, &choice),
          "a4w4_gemm_choose");
    return Candidate{choice.kernel, choice.split_k, 0};
  }

 private:
  a4w4_gemm_options options_for(const std::string& kernel, int split) const {
    a4w4_gemm_options options;
    a4w4_gemm_options_init(&options);
    options.kernel = kernel.c_str();
    options.split_k = split;
    return options;
  }

  void run(const std::string& kernel, int split, size_t set_index) {
    const a4w4_gemm_options options = options_for(kernel, split);
    const OperandSet& s = sets_[set_index];
    check(a4w4_gemm(context_.get(), &s.a, &s.as, &s.b, &s.bs, nullptr, nullptr, &s.d_tensor,
                    &options, memory_.stream()),
          fmt::format("{} on {}x{}x{}", kernel_and_split(kernel.c_str(), split), shape_.m, shape_.n,
                      shape_.k));
  }

  void make_set(OperandSet& set, a4w4_dtype d_dtype) {
    const a4w4_device device = memory_.device();
    set.a = mx_values_tensor(a_, memory_.upload(a_.values), device);
    set.as = mx_scales_tensor(a_, memory_.upload(a_.scales), device);
    set.b = mx_values_tensor(b_, memory_.upload(b_.values), device);
    set.bs = mx_scales_tensor(b_, memory_.upload(b_.scales), device);
    if (settings_.weights != "plain")
      std::tie(set.b, set.bs) = prepare_weight_on(context_, memory_, set.b, set.bs,
                                                  prepared_layout_named(settings_.weights),
                                                  set.prepared, set.prepared_scale);
    set.d.assign(static_cast<size_t>(shape_.m * shape_.n * (a4w4_dtype_bits(d_dtype) / 8)), 0);
    set.d_tensor =
        a4w4_tensor_2d(memory_.output(set.d), d_dtype, shape_.m, shape_.n, shape_.n, device);
  }

  const TuneSettings& settings_;
  DeviceMemory& memory_;
  Context& context_;
  bench::Shape shape_;
  MxMatrix a_, b_;
  std::vector<OperandSet> sets_;
  std::vector<int64_t> rows_, cols_;
  std::vector<double> reference_;
};

// The (kernel, split) pairs to try on the backend: split 0 (automatic) for every kernel, and the
// listed splits for kernels whose partitions run concurrently (elsewhere split-K only reorders
// the sums and cannot be faster).
std::vector<Candidate> candidates(const TuneSettings& settings, int64_t k) {
  std::vector<Candidate> list;
  for (const KernelInfo& kernel : registered_kernels()) {
    if (kernel.backend != settings.backend) continue;
    list.push_back({kernel.name, 0, 0});
    if (!kernel.properties.split_k_parallel) continue;
    for (int split : settings.splits) {
      const int max_split = kernel.properties.max_split_k;
      if (split > 1 && split <= k / 32 && (max_split == 0 || split <= max_split))
        list.push_back({kernel.name, split, 0});
    }
  }
  return list;
}

void write_file(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".a4w4-tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) {
      std::filesystem::remove(temporary);
      fail("--out {}: cannot write", path);
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::filesystem::remove(temporary);
    fail("--out {}: cannot write: {}", path, error.message());
  }
}

void run_tune(TuneSettings settings) {
  if (settings.weights.empty())
    settings.weights = settings.backend == A4W4_BACKEND_CUDA ? "prepared" : "plain";
  if (settings.rotate_mib < 0)
    settings.rotate_mib = settings.backend == A4W4_BACKEND_CUDA ? 256 : 0;
  const std::vector<bench::Shape> shapes = select_shapes(settings.shapes, settings.ms);
  if (shapes.empty()) fail("--shapes {}: no shapes", settings.shapes);
  std::unique_ptr<DeviceMemory> memory = make_device_memory(settings.backend);
  Context context;  // explicit kernel names only: a tuned configuration plays no part
  context.set_backend(settings.backend);
  context.set_num_threads(settings.threads);
  context.clear_tuned();
  Context heuristic_context;
  heuristic_context.set_backend(settings.backend);
  heuristic_context.set_num_threads(settings.threads);
  heuristic_context.clear_tuned();

  std::vector<uint8_t> workspace_size_of;  // stands for the device buffer's size
  if (settings.workspace) {
    if (settings.backend != A4W4_BACKEND_CUDA) fail("--workspace: needs --backend cuda");
    size_t bytes = 0;
    for (const bench::Shape& shape : shapes) {
      size_t shape_bytes = 0;
      check(a4w4_gemm_workspace_size(shape.m, shape.n, shape.k, &shape_bytes),
            "a4w4_gemm_workspace_size");
      bytes = std::max(bytes, shape_bytes);
    }
    workspace_size_of.resize(bytes);
    void* workspace = memory->output(workspace_size_of);
    for (const Context* c : {&context, &heuristic_context})
      check(a4w4_context_set_workspace(c->get(), memory->device(), workspace, bytes),
            "a4w4_context_set_workspace");
  }

  char device_name[256];
  int sm_count = 0;
  check(a4w4_device_tuning_key(memory->device(), device_name, sizeof device_name, &sm_count),
        "a4w4_device_tuning_key");

  std::string csv = fmt::format(
      "# a4w4 tune: {} backend, {} B, D in {}, median of {} samples; device '{}' ({} SMs)\n"
      "{},label,heuristic_kernel,heuristic_split_k,heuristic_us,workspace,weights\n",
      a4w4_backend_name(settings.backend), settings.weights, out_dtype_name(settings.out_dtype),
      settings.samples, device_name, sm_count, tuned::kHeader);
  int wrong = 0, rows = 0;
  std::set<std::tuple<int64_t, int64_t, int64_t>> tuned_shapes;  // one entry per shape
  for (size_t i = 0; i < shapes.size(); ++i) {
    const bench::Shape& shape = shapes[i];
    show_progress(i, shapes.size(),
                  fmt::format("{}x{}x{} {}", shape.m, shape.n, shape.k, shape.label));
    // Presets list some shapes twice under two names (gate_proj, up_proj): tune each once.
    if (!tuned_shapes.emplace(shape.m, shape.n, shape.k).second) continue;
    ShapeRun run(settings, *memory, context, shape, settings.seed + i);
    std::vector<Candidate> list = candidates(settings, shape.k);
    const Candidate heuristic = run.heuristic(heuristic_context);
    const auto same = [&](const Candidate& c) {
      return c.kernel == heuristic.kernel && c.split_k == heuristic.split_k;
    };
    if (std::none_of(list.begin(), list.end(), same)) list.push_back(heuristic);
    // The heuristic's choice first: the yardstick for pruning and for the margin.
    std::stable_partition(list.begin(), list.end(), same);
    const double tolerance = check_tolerance(settings.out_dtype);
    double best_us = 0;
    for (Candidate& candidate : list) {
      if (!run.why_not(candidate.kernel, candidate.split_k).empty()) continue;
      const double error = run.error_of(candidate.kernel, candidate.split_k);
      if (!(error <= tolerance)) {
        ++wrong;
        fmt::print(stderr,
                   "\na4w4: warning: {} gives a WRONG result on {}x{}x{} (relative error "
                   "{:.3e} > {:.0e}); never chosen\n",
                   kernel_and_split(candidate.kernel.c_str(), candidate.split_k), shape.m, shape.n,
                   shape.k, error, tolerance);
        continue;
      }
      if (best_us > 0) {
        const double probe = run.time(candidate.kernel, candidate.split_k, 1, settings.batch_ms);
        if (probe > kPruneFactor * best_us) {
          candidate.us = probe;  // clearly slower: one sample is enough to rank it
          continue;
        }
      }
      candidate.us = run.time(candidate.kernel, candidate.split_k);
      if (best_us == 0 || candidate.us < best_us) best_us = candidate.us;
    }
    const Candidate* best = nullptr;
    for (const Candidate& candidate : list)
      if (candidate.us > 0 && (best == nullptr || candidate.us < best->us)) best = &candidate;
    const auto heuristic_timed = std::find_if(list.begin(), list.end(), same);
    if (best != nullptr && heuristic_timed->us > 0 &&
        best->us > heuristic_timed->us * (1 - settings.margin_percent / 100))
      best = &*heuristic_timed;  // within the margin: noise, keep the heuristic's choice
    if (best == nullptr) {
      fmt::print(stderr, "\na4w4: warning: no kernel ran {}x{}x{} correctly; no entry written\n",
                 shape.m, shape.n, shape.k);
      continue;
    }
    const tuned::Row row{0,
                         device_name,
                         sm_count,
                         shape.m,
                         shape.n,
                         shape.k,
                         best->kernel,
                         best->split_k,
                         std::round(best->us * 100) / 100,
                         std::round(2.0 * shape.m * shape.n * shape.k / best->us / 1e2) / 1e4};
    csv += fmt::format("{},{},{},{},{},{},{}\n", tuned::format_row(row),
                       shape.label.empty() ? "-" : shape.label, heuristic.kernel, heuristic.split_k,
                       std::round(heuristic_timed->us * 100) / 100, settings.workspace ? 1 : 0,
                       settings.weights);
    ++rows;
  }
  show_progress(shapes.size(), shapes.size(), "done");
  write_file(settings.out, csv);
  fmt::print("wrote {} entries for '{}' ({} SMs) to {}\n", rows, device_name, sm_count,
             settings.out);
  if (wrong > 0)
    fail("{} kernel run(s) gave wrong results (listed above); they were not chosen", wrong);
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto settings = std::make_shared<TuneSettings>();
  CLI::App* command = app.add_subcommand(
      "tune",
      "Measure every applicable kernel and split-K per shape; write the winners as a "
      "tuned configuration (CSV)");
  command->add_option("--shapes", settings->shapes, "A shape file or a preset name")->required();
  command->add_option("--out", settings->out, "The tuned configuration to write")->required();
  add_ms_option(*command, settings->ms);
  add_choice_option<a4w4_backend>(*command, "--backend", settings->backend,
                                  {{"cpu", A4W4_BACKEND_CPU}, {"cuda", A4W4_BACKEND_CUDA}},
                                  "Backend to tune (default cpu)");
  command
      ->add_option("--splits", settings->splits,
                   "split_k values tried besides automatic (default 2,4,8,16)")
      ->check(CLI::Range(2, 1 << 20))
      ->delimiter(',');
  command
      ->add_option("--weights", settings->weights,
                   "B as given to a4w4_gemm: plain, prepared (version 2) or prepared-int8 "
                   "(version 2 with its int8 form) (default: prepared on cuda)")
      ->check(CLI::IsMember({"plain", "prepared", "prepared-int8"}));
  add_choice_option<OutDtype>(
      *command, "--out-dtype", settings->out_dtype,
      {{"fp32", OutDtype::kF32}, {"bf16", OutDtype::kBF16}, {"fp16", OutDtype::kF16}},
      "D's dtype (default bf16)");
  command->add_option("--samples", settings->samples, "Timing samples; the median counts (5)")
      ->check(CLI::Range(1, 1000));
  command->add_option("--batch-ms", settings->batch_ms, "Minimum length of one sample (2 ms)")
      ->check(CLI::Range(0.0, 10000.0));
  command
      ->add_option("--warmup-ms", settings->warmup_ms,
                   "CUDA: how long each candidate runs before it is timed (100 ms; a "
                   "power-capped GPU would otherwise favour whichever runs first)")
      ->check(CLI::Range(0, 60000));
  command
      ->add_option("--rotate-mib", settings->rotate_mib,
                   "Cycle through operand copies this large, to defeat caches (cuda: 256)")
      ->check(CLI::Range(0.0, 65536.0));
  command->add_option("--seed", settings->seed, "Random seed of the operands (1)");
  command
      ->add_option("--margin", settings->margin_percent,
                   "Keep the heuristic's choice unless another is at least this many percent "
                   "faster (2)")
      ->check(CLI::Range(0.0, 100.0));
  command->add_flag("--workspace", settings->workspace,
                    "Give the contexts a device workspace (CUDA): the staging kernels compete and "
                    "the entries are marked as tuned with one");
  command->add_flag("--wide-scales", settings->wide_scales,
                    "Block scales spread over 120..135 (defeats scale folding) instead of the "
                    "typical 125..127, as a4w4 bench");
  add_threads_option(*command, settings->threads);
  command->callback([settings] { run_tune(*settings); });
}

}  // namespace a4w4::cli
