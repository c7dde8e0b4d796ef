// Choosing the kernel and split-K of a GEMM: an explicit name from the caller, else the context's
// tuned entry, else the heuristic. The heuristic is data-driven: it ranks the registered kernels
// of the backend from their metadata (speed, tile fill, waves per SM), so a new kernel family is
// chosen by registering it, not by editing the chooser.
#pragma once

#include <span>
#include <string_view>

#include "a4w4/a4w4.h"
#include "dispatch/registry.h"
#include "dispatch/tuned_config.h"

namespace a4w4 {

struct GemmChoice {
  const GemmKernel* kernel = nullptr;
  int split_k = 0;  // what the kernel receives; 0 = its own automatic split
  a4w4_choice_source source = A4W4_CHOICE_HEURISTIC;
  int64_t tuned_m = 0;
  int tuned_line = 0;
};

// The heuristic's split for kernel (problem.split_k is ignored): the kernel's own choice (0) where
// it has one; otherwise, for kernels whose partitions run concurrently, enough partitions to fill
// one wave of sm_count multiprocessors when the tiles of D alone fill less than that (tall K,
// small M x N), each partition at least four K steps long; else 0 (one partition).
int heuristic_split(const GemmKernel& kernel, const GemmProblem& problem, int sm_count);

// The heuristic's estimate of how well kernel runs problem with split (higher is better):
// speed x tile fill (useful fraction of the padded tiles) x wave efficiency (busy fraction of the
// last wave of CTAs over sm_count multiprocessors; 1 where the kernel sizes its own grid or where
// sm_count is 0, as on the CPU).
double heuristic_score(const GemmKernel& kernel, const GemmProblem& problem, int split,
                       int sm_count);

// The heuristic over `kernels`: the applicable kernel of backend with the best score (the earliest
// registered on ties), with problem.split_k when the caller gave one and heuristic_split
// otherwise. Fails with A4W4_ERROR_KERNEL_NOT_APPLICABLE when none applies.
GemmChoice heuristic_choice(const GemmProblem& problem, a4w4_backend backend,
                            std::span<const GemmKernel> kernels, int sm_count);

// The full choice: requested kernel (validated; its split from the caller, the tuned entry when
// it names the same kernel, or the heuristic), else the tuned entry for the problem's device
// (with the caller's split_k when given), else the heuristic. Entries that do not apply are
// reported once through tuned->warn and left to the heuristic.
GemmChoice choose_gemm_kernel(const GemmProblem& problem, a4w4_backend backend,
                              std::string_view requested, const TunedTable* tuned);

// The same, with the device's key and SM count given (tests; no device query).
GemmChoice choose_gemm_kernel(const GemmProblem& problem, a4w4_backend backend,
                              std::string_view requested, const TunedTable* tuned,
                              const DeviceKey& device, int sm_count,
                              std::span<const GemmKernel> kernels);

}  // namespace a4w4
