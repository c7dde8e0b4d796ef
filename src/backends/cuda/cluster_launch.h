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

// The launch attribute of clusters of (1, y, 1) CTAs.
inline cudaLaunchAttribute y_cluster_dimension(unsigned y) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = 1;
  attribute.val.clusterDim.y = y;
  attribute.val.clusterDim.z = 1;
  return attribute;
}

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
  if (y_cluster) attributes[count++] = y_cluster_dimension(grid.y);
  if (order == LaunchOrder::kEarly) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  config.attrs = attributes;
  config.numAttrs = count;
  check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), what);
}

// CTAs of `threads` threads and `shared_bytes` of dynamic shared memory that one SM holds at once
// (1 when the query fails).
template <typename... Params>
int resident_ctas_per_sm(void (*kernel)(Params...), unsigned threads, size_t shared_bytes) {
  int blocks = 1;
  const cudaError_t status =
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, shared_bytes);
  if (status != cudaSuccess) (void)cudaGetLastError();  // not sticky
  return status == cudaSuccess && blocks > 0 ? blocks : 1;
}

// Clusters of (1, cluster, 1) such CTAs resident at once on the current device: the GPCs decide
// where clusters fit, so this is at most, not always, the CTA slots over the cluster size. When
// the query fails, those slots over the cluster size (at least 1), from `sm_count` SMs. A kernel
// with more than 48 KiB of dynamic shared memory must have its attribute set first.
template <typename... Params>
int resident_clusters(void (*kernel)(Params...), int cluster, unsigned threads, size_t shared_bytes,
                      int sm_count) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1, static_cast<unsigned>(cluster), 1);
  config.blockDim = dim3(threads, 1, 1);
  config.dynamicSmemBytes = shared_bytes;
  cudaLaunchAttribute attribute = y_cluster_dimension(static_cast<unsigned>(cluster));
  config.attrs = &attribute;
  config.numAttrs = 1;
  int count = 0;
  if (cudaOccupancyMaxActiveClusters(&count, kernel, &config) == cudaSuccess && count > 0)
    return count;
  (void)cudaGetLastError();  // not sticky
  count = resident_ctas_per_sm(kernel, threads, shared_bytes) * sm_count / cluster;
  return count > 0 ? count : 1;
}

template <typename... Params, typename... Args>
void launch_with_y_cluster(void (*kernel)(Params...), dim3 grid, unsigned threads,
                           size_t shared_bytes, void* stream, const char* what, LaunchOrder order,
                           Args&&... args) {
  launch_kernel(kernel, grid, threads, shared_bytes, stream, what, order, true,
                std::forward<Args>(args)...);
}

}  // namespace a4w4::cuda
