#include "backends/cuda/cuda_runtime_probe.h"

#include "api/error.h"

#if A4W4_WITH_CUDA
#include <array>
#include <mutex>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_utils.h"
#endif

namespace a4w4::cuda {

#if A4W4_WITH_CUDA

bool compiled() {
  return true;
}

int device_count() {
  // Asked once: the answer does not change while the process runs, and the first call into the
  // runtime is slow.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // reset the runtime's error state after the failed probe
      return 0;
    }
    return n;
  }();
  return count;
}

void check_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  fail(err == cudaErrorMemoryAllocation ? A4W4_ERROR_OUT_OF_MEMORY : A4W4_ERROR_DEVICE,
       "{}: {} ({})", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

DeviceGuard::DeviceGuard(int ordinal) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != ordinal) check_cuda(cudaSetDevice(ordinal), "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_ && previous_ >= 0)
    cudaSetDevice(previous_);
}

const DeviceInfo& device_info(int ordinal) {
  constexpr int kMaxDevices = 64;
  static std::array<DeviceInfo, kMaxDevices> infos{};
  static std::array<std::once_flag, kMaxDevices> once;
  if (ordinal < 0 || ordinal >= std::min(device_count(), kMaxDevices))
    fail(A4W4_ERROR_NO_DEVICE, "CUDA device {} requested, {} present", ordinal, device_count());
  std::call_once(once[ordinal], [&] {
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
    infos[ordinal] =
        DeviceInfo{prop.multiProcessorCount, prop.major, prop.minor, prop.sharedMemPerBlockOptin,
                   DeviceIdentity{prop.name, prop.multiProcessorCount}};
  });
  return infos[ordinal];
}

void check_pointer(const void* ptr, a4w4_device device, const char* name) {
  // Only worth asking when a GPU exists: without one no pointer can be device memory.
  if (device_count() == 0) return;
  cudaPointerAttributes attributes{};
  const cudaError_t err = cudaPointerGetAttributes(&attributes, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    attributes.type = cudaMemoryTypeUnregistered;
  }
  const bool device_memory = attributes.type == cudaMemoryTypeDevice;
  const bool managed = attributes.type == cudaMemoryTypeManaged;
  if (device.type == A4W4_DEVICE_CPU) {
    if (device_memory)
      fail(A4W4_ERROR_DEVICE_MISMATCH,
           "{}: the descriptor says CPU, but the data is device memory of CUDA device {}", name,
           attributes.device);
    return;
  }
  if (!device_memory && !managed)
    fail(A4W4_ERROR_DEVICE_MISMATCH,
         "{}: the descriptor says cuda:{}, but the data is not device memory (host pointer?)", name,
         device.ordinal);
  if (device_memory && attributes.device != device.ordinal)
    fail(A4W4_ERROR_DEVICE_MISMATCH,
         "{}: the descriptor says cuda:{}, but the data lives on cuda:{}", name, device.ordinal,
         attributes.device);
}

std::string describe_device(int ordinal) {
  const int count = device_count();
  if (ordinal < 0 || ordinal >= count)
    fail(A4W4_ERROR_NO_DEVICE, "device: CUDA ordinal {} requested, {} device(s) present", ordinal,
         count);
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
  return fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB)", prop.name, prop.major, prop.minor,
                     prop.multiProcessorCount,
                     static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
}

const DeviceIdentity& device_identity(int ordinal) {
  return device_info(ordinal).identity;
}

#else

bool compiled() {
  return false;
}
int device_count() {
  return 0;
}
std::string describe_device(int) {
  fail(A4W4_ERROR_BACKEND_NOT_COMPILED, "device: this build of a4w4 has no CUDA backend");
}
const DeviceIdentity& device_identity(int) {
  fail(A4W4_ERROR_BACKEND_NOT_COMPILED, "device: this build of a4w4 has no CUDA backend");
}

#endif

}  // namespace a4w4::cuda
