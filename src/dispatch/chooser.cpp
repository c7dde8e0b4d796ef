#include "dispatch/chooser.h"

#include <algorithm>

#include "api/error.h"
#include "backends/cuda/cuda_runtime_probe.h"

namespace a4w4 {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Tiles of D the kernel launches (1 when it has no fixed tile).
int64_t tile_count(const GemmKernel& kernel, const GemmProblem& p) {
  const int64_t rows = kernel.tile_m > 0 ? ceil_div(p.m, kernel.tile_m) : 1;
  const int64_t cols = kernel.tile_n > 0 ? ceil_div(p.n, kernel.tile_n) : 1;
  return rows * cols;
}

GemmProblem with_split(const GemmProblem& problem, int split) {
  GemmProblem copy = problem;
  copy.split_k = split;
  return copy;
}

}  // namespace

int heuristic_split(const GemmKernel& kernel, const GemmProblem& problem, int sm_count) {
  if (kernel.auto_split_k || !kernel.split_k_parallel || kernel.max_split_k == 1 || sm_count <= 0)
    return 0;
  const int64_t tiles = tile_count(kernel, problem);
  const int64_t blocks = problem.k / 32;
  const int64_t min_blocks = 4 * std::max<int64_t>(1, kernel.tile_k / 32);
  const int64_t limit = kernel.max_split_k > 0 ? kernel.max_split_k : blocks;
  int64_t split = 1;
  while (split * 2 <= limit && tiles * split * 2 <= sm_count && blocks / (split * 2) >= min_blocks)
    split *= 2;
  return split > 1 ? static_cast<int>(split) : 0;
}

double heuristic_score(const GemmKernel& kernel, const GemmProblem& problem, int split,
                       int sm_count) {
  const auto padded = [](int64_t size, int tile) {
    return tile > 0 ? static_cast<double>(ceil_div(size, tile) * tile) : static_cast<double>(size);
  };
  const double fill = static_cast<double>(problem.m) * static_cast<double>(problem.n) /
                      (padded(problem.m, kernel.tile_m) * padded(problem.n, kernel.tile_n));
  double waves = 1.0;
  if (sm_count > 0 && !kernel.auto_split_k && kernel.tile_m > 0 && kernel.tile_n > 0) {
    // Partitions are CTAs of their own only where they run concurrently.
    const int64_t ctas =
        tile_count(kernel, problem) * (kernel.split_k_parallel ? std::max(split, 1) : 1);
    waves = static_cast<double>(ctas) / static_cast<double>(ceil_div(ctas, sm_count) * sm_count);
  }
  double speed = kernel.speed;
  if (problem.b.layout != A4W4_LAYOUT_PLAIN && kernel.prepared_b_speed > 0)
    speed = kernel.prepared_b_speed;
  if (problem.b_int8 != nullptr && kernel.int8_b_speed > 0) speed = kernel.int8_b_speed;
  return speed * fill * waves;
}

GemmChoice heuristic_choice(const GemmProblem& problem, a4w4_backend backend,
                            std::span<const GemmKernel> kernels, int sm_count) {
  GemmChoice best;
  double best_score = -1.0;
  for (const GemmKernel& kernel : kernels) {
    if (kernel.backend != backend) continue;
    const int split =
        problem.split_k > 0 ? problem.split_k : heuristic_split(kernel, problem, sm_count);
    if (!kernel_why_not(kernel, with_split(problem, split), backend).empty()) continue;
    const double score = heuristic_score(kernel, problem, split, sm_count);
    if (score > best_score) {
      best_score = score;
      best = GemmChoice{&kernel, split, A4W4_CHOICE_HEURISTIC, 0, 0};
    }
  }
  if (best.kernel == nullptr)
    fail(A4W4_ERROR_KERNEL_NOT_APPLICABLE, "no {} kernel in this build can run M={} N={} K={}",
         a4w4_backend_name(backend), problem.m, problem.n, problem.k);
  return best;
}

GemmChoice choose_gemm_kernel(const GemmProblem& problem, a4w4_backend backend,
                              std::string_view requested, const TunedTable* tuned,
                              const DeviceKey& device, int sm_count,
                              std::span<const GemmKernel> kernels) {
  // B's layout as the tuned table keys it (a B with its int8 form reaches the kernels as its
  // version-2 part plus b_int8).
  const tuned::Weights weights = problem.b_int8 != nullptr ? tuned::Weights::kPreparedInt8
                                 : problem.b.layout != A4W4_LAYOUT_PLAIN ? tuned::Weights::kPrepared
                                                                         : tuned::Weights::kPlain;
  const TunedEntry* entry = tuned != nullptr
                                ? tuned->lookup(device, problem.m, problem.n, problem.k,
                                                problem.workspace != nullptr, weights)
                                : nullptr;
  const bool caller_split = problem.split_k > 0;

  if (!requested.empty()) {
    const GemmKernel* kernel = nullptr;
    for (const GemmKernel& candidate : kernels)
      if (candidate.name == requested) kernel = &candidate;
    if (kernel == nullptr)
      fail(A4W4_ERROR_KERNEL_NOT_FOUND,
           "kernel: no kernel named '{}' is registered (a4w4 kernels lists them)", requested);
    GemmChoice choice{kernel, problem.split_k, A4W4_CHOICE_EXPLICIT, 0, 0};
    if (!caller_split) {
      const bool same =
          entry != nullptr && entry->kernel == kernel &&
          kernel_why_not(*kernel, with_split(problem, entry->split_k), backend).empty();
      choice.split_k = same ? entry->split_k : heuristic_split(*kernel, problem, sm_count);
    }
    const std::string reason =
        kernel_why_not(*kernel, with_split(problem, choice.split_k), backend);
    if (!reason.empty())
      fail(A4W4_ERROR_KERNEL_NOT_APPLICABLE,
           "kernel: '{}' cannot run M={} N={} K={} split_k={}: {}", kernel->name, problem.m,
           problem.n, problem.k, choice.split_k, reason);
    return choice;
  }

  if (entry != nullptr && entry->kernel != nullptr) {
    const int split = caller_split ? problem.split_k : entry->split_k;
    const std::string reason = kernel_why_not(*entry->kernel, with_split(problem, split), backend);
    if (reason.empty())
      return GemmChoice{entry->kernel, split, A4W4_CHOICE_TUNED, entry->m, entry->line};
    // With the caller's own split the entry was not measured as given: no warning.
    if (!caller_split)
      tuned->warn(*entry,
                  fmt::format("kernel '{}' (split_k {}) cannot run M={} N={} K={}: {}; "
                              "the heuristic serves it",
                              entry->kernel->name, split, problem.m, problem.n, problem.k, reason));
  }
  return heuristic_choice(problem, backend, kernels, sm_count);
}

GemmChoice choose_gemm_kernel(const GemmProblem& problem, a4w4_backend backend,
                              std::string_view requested, const TunedTable* tuned) {
  const bool cuda = backend == A4W4_BACKEND_CUDA;
  const int sm_count = cuda ? cuda::device_identity(problem.device.ordinal).sm_count : 0;
  const DeviceKey device = tuned != nullptr ? device_key(problem.device) : DeviceKey{};
  return choose_gemm_kernel(problem, backend, requested, tuned, device, sm_count, gemm_kernels());
}

}  // namespace a4w4
