// Host-side helpers of the CUDA backend: error mapping, the current-device guard, cached device
// properties.
#pragma once

#include "backends/cuda/cuda_runtime_probe.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "api/error.h"
#include "dispatch/problem.h"

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

// Why a fast kernel cannot read B's prepared layout: empty for a plain B (each kernel checks its
// own plain-B needs) and for version 2 at the alignments given; version 1 (fragment order) is read
// by cuda.generic only.
inline std::string prepared_b_why_not(const PackedOperand& b, int data_align, int scale_align) {
  if (b.layout == A4W4_LAYOUT_PLAIN) return {};
  if (b.layout != A4W4_LAYOUT_PREPARED_V2)
    return "a prepared B of version 1 runs on cuda.generic only (prepare it as "
           "A4W4_LAYOUT_PREPARED_V2)";
  if (reinterpret_cast<uintptr_t>(b.data) % data_align != 0 ||
      reinterpret_cast<uintptr_t>(b.scale) % scale_align != 0)
    return "a prepared B must start on " + std::to_string(data_align) +
           " bytes and its scales on " + std::to_string(scale_align);
  return {};
}

}  // namespace a4w4::cuda
