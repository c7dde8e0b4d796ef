// Host-side helpers of the CUDA backend: error mapping, the current-device guard, cached device
// properties.
#pragma once

#include "backends/cuda/cuda_runtime_probe.h"

#include <cuda_runtime_api.h>

#include "api/error.h"

namespace a4w4::cuda {

// Turns a CUDA runtime error into an a4w4 failure (A4W4_ERROR_OUT_OF_MEMORY for allocation
// failures, A4W4_ERROR_DEVICE otherwise) naming the call that failed.
void check_cuda(cudaError_t err, const char* what);

// Checks that the last kernel launch was accepted.
inline void check_launch(const char* kernel) {
  check_cuda(cudaGetLastError(), kernel);
}

// Makes `ordinal` the current device for the scope, restoring the caller's afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

struct DeviceInfo {
  int sm_count;
  int major, minor;
  size_t max_shared_per_block;  // opt-in limit
  DeviceIdentity identity;      // what tuned configurations key the device by
};

// Properties of a device, read once per process.
const DeviceInfo& device_info(int ordinal);

}  // namespace a4w4::cuda
