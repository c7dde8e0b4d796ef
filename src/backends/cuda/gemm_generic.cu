// The generic CUDA GEMM: correct for every problem the API accepts (any M, N; any even row strides
// and alignment; plain or prepared B; any split_k), on every sm_80+ GPU. Faster families take the
// shapes they are built for; this one is the path that is always there.
//
// A CTA computes a 64x64 tile of D with four warps (2x2, 32x32 each). Per 32-wide K block it
// decodes the block of A and B to 2*E2M1 int8 in shared memory, runs exact int8 MMAs (one block's
// dot product per MMA, in int32) and adds isum * 2^(sa+sb-256) in double, partition by partition
// as split_k asks: the same sums as the CPU reference.
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_utils.h"
#include "backends/cuda/generic_tile.cuh"

namespace a4w4::cuda {
namespace {

__global__ void __launch_bounds__(generic::kThreads) gemm_generic_kernel(GemmProblem p) {
  __shared__ generic::TileSmem smem;
  generic::tile<0>(p, int64_t{blockIdx.y} * generic::kTile, int64_t{blockIdx.x} * generic::kTile,
                   threadIdx.x, smem);
}

}  // namespace

std::string gemm_generic_why_not(const GemmProblem& p) {
  if (p.device.type != A4W4_DEVICE_CUDA) return "operands are not on a CUDA device";
  if (device_info(p.device.ordinal).major < 8) return "needs an sm_80 or newer GPU";
  return {};
}

void gemm_generic(const GemmProblem& p, const ExecConfig&) {
  DeviceGuard guard(p.device.ordinal);
  const int64_t grid_n = (p.n + generic::kTile - 1) / generic::kTile;
  const int64_t grid_m = (p.m + generic::kTile - 1) / generic::kTile;
  if (grid_m > 65535)
    fail(A4W4_ERROR_KERNEL_NOT_APPLICABLE,
         "gemm_generic: M = " + std::to_string(p.m) + " needs more than 65535 row tiles");
  const dim3 grid(static_cast<unsigned>(grid_n), static_cast<unsigned>(grid_m));
  gemm_generic_kernel<<<grid, generic::kThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(p);
  check_launch("gemm_generic_kernel");
}

}  // namespace a4w4::cuda
