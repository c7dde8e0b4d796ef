// The kernel registry: every GEMM kernel compiled into this build, by name, with what it is (path,
// tile, split-K support, M range, constraints) and the test of whether it can run a problem.
// The chooser (dispatch/chooser.h) picks from it; an explicit kernel name is looked up here and
// refused with its own status code when unknown or not applicable.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "a4w4/a4w4.h"
#include "dispatch/problem.h"

namespace a4w4 {

struct GemmKernel {
  const char* name;
  a4w4_backend backend;
  a4w4_kernel_path path;
  // D tile per CTA / work item and its K step; 0 = no fixed tile.
  int tile_m, tile_n, tile_k;
  int max_split_k;        // 0 = any split_k up to K/32, 1 = none
  bool split_k_parallel;  // partitions run concurrently: split-K adds parallelism
  bool auto_split_k;      // the kernel picks its own split for split_k = 0
  int64_t min_m, max_m;   // max_m 0 = unbounded
  // Relative speed of the main loop with full tiles, for the heuristic's ranking only (the tuner
  // measures the truth). Comparable within one backend.
  double speed;
  const char* constraints;  // what why_not checks beyond the fields above, for people
  // Empty when the kernel can run the problem; otherwise why not (one phrase). The metadata
  // checks (M range, split_k) come first, in kernel_why_not.
  std::string (*why_not)(const GemmProblem& problem);
  void (*run)(const GemmProblem& problem, const ExecConfig& exec);
  // `speed` on a prepared B, for kernels whose main loop runs at another speed on one (0: the
  // same as `speed`, which is then the speed on a plain B).
  double prepared_b_speed = 0.0;
  // `speed` on a weight prepared with its int8 form (A4W4_LAYOUT_PREPARED_V2_INT8), for the
  // kernels that read that part (0: prepared_b_speed).
  double int8_b_speed = 0.0;
};

std::span<const GemmKernel> gemm_kernels();

// The registered kernel called name, or nullptr.
const GemmKernel* find_gemm_kernel(std::string_view name);

// Empty when kernel can run problem (with problem.split_k as given) on backend; else why not.
std::string kernel_why_not(const GemmKernel& kernel, const GemmProblem& problem,
                           a4w4_backend backend);

}  // namespace a4w4
