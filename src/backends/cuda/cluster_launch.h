// Host side of the kernel launches with attributes: grids whose y dimension is one thread-block
// cluster (the CTAs that share a K range's partial sums through distributed shared memory:
// cuda.decode's split-K partitions, cuda.gemv's K chunks, cuda.skinny's K partitions; sm_90), and
// programmatic dependent launch (LaunchOrder::kEarly).
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

// Launches kernel on `grid` CTAs of `threads` threads on `stream`, in clusters of (1, grid.y, 1)
// (the whole y dimension is one cluster) when y_cluster; `what` names it in errors.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, unsigned threads, size_t shared_bytes,
                   void* stream, const char* what, LaunchOrder order, bool y_cluster,
                   Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(threads, 1, 1);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (y_cluster) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = 1;
    attributes[count].val.clusterDim.y = grid.y;
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  if (order == LaunchOrder::kEarly) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  config.attrs = attributes;
  config.numAttrs = count;
  check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), what);
}

template <typename... Params, typename... Args>
void launch_with_y_cluster(void (*kernel)(Params...), dim3 grid, unsigned threads,
                           size_t shared_bytes, void* stream, const char* what, LaunchOrder order,
                           Args&&... args) {
  launch_kernel(kernel, grid, threads, shared_bytes, stream, what, order, true,
                std::forward<Args>(args)...);
}

}  // namespace a4w4::cuda
