// What the CUDA runtime says about this machine. Safe in every build: without the CUDA backend
// compiled in, compiled() is false and there are no devices.
#pragma once

#include <string>

namespace a4w4::cuda {

bool compiled();
// Devices the runtime can use now; 0 when there is no driver or no GPU (never fails).
int device_count();
// "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)"; fails with A4W4_ERROR_NO_DEVICE for a bad ordinal.
std::string describe_device(int ordinal);

// What tuned configurations key a device by: its name and SM count, read once per process. Fails
// with A4W4_ERROR_NO_DEVICE for a bad ordinal (A4W4_ERROR_BACKEND_NOT_COMPILED without CUDA).
struct DeviceIdentity {
  std::string name;
  int sm_count = 0;
};
const DeviceIdentity& device_identity(int ordinal);

}  // namespace a4w4::cuda
