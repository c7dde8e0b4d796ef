#include "backends/cuda/cuda_runtime_probe.h"

#include "api/error.h"

#if A4W4_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace a4w4::cuda {

#if A4W4_WITH_CUDA

bool compiled() { return true; }

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // reset the runtime error state after a failed probe
    return 0;
  }
  return count;
}

std::string describe_device(int ordinal) {
  const int count = device_count();
  if (ordinal < 0 || ordinal >= count)
    fail(A4W4_ERROR_NO_DEVICE, "device: CUDA ordinal {} requested, {} device(s) present", ordinal,
         count);
  cudaDeviceProp prop{};
  const cudaError_t err = cudaGetDeviceProperties(&prop, ordinal);
  if (err != cudaSuccess)
    fail(A4W4_ERROR_DEVICE, "cudaGetDeviceProperties({}): {}: {}", ordinal, cudaGetErrorName(err),
         cudaGetErrorString(err));
  return fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB)", prop.name, prop.major, prop.minor,
                     prop.multiProcessorCount,
                     static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
}

#else

bool compiled() { return false; }
int device_count() { return 0; }
std::string describe_device(int) {
  fail(A4W4_ERROR_BACKEND_NOT_COMPILED, "device: this build of a4w4 has no CUDA backend");
}

#endif

}  // namespace a4w4::cuda
