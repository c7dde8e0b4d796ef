// Host side of the kernel families whose grid's y dimension is one thread-block cluster (the
// CTAs that share a K range's partial sums through distributed shared memory): cuda.decode's
// split-K partitions, cuda.gemv's K chunks. sm_90.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backends/cuda/cuda_utils.h"

namespace a4w4::cuda {

// How a kernel may start relative to the work before it on the stream.
enum class LaunchOrder {
  kAfterPrevious,  // the usual stream order
  // Programmatic dependent launch: the kernel may start while the previous kernel is finishing;
  // it runs wait_for_previous_grid() before it reads or writes anything that work could touch
  // (device_common.cuh).
  kEarly,
};

// Launches kernel on `grid` CTAs of `threads` threads, clusters of (1, grid.y, 1) (the whole y
// dimension is one cluster), on `stream`; `what` names it in errors.
template <typename... Params, typename... Args>
void launch_with_y_cluster(void (*kernel)(Params...), dim3 grid, unsigned threads,
                           size_t shared_bytes, void* stream, const char* what, LaunchOrder order,
                           Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(threads, 1, 1);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeClusterDimension;
  attributes[0].val.clusterDim.x = 1;
  attributes[0].val.clusterDim.y = grid.y;
  attributes[0].val.clusterDim.z = 1;
  attributes[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attributes;
  config.numAttrs = order == LaunchOrder::kEarly ? 2 : 1;
  check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), what);
}

}  // namespace a4w4::cuda
