#include "device_memory.h"

#include <cstring>

#include "common.h"

namespace a4w4::cli {
namespace {

class HostMemory final : public DeviceMemory {
 public:
  a4w4_device device() const override { return a4w4_cpu(); }
  // The library only reads inputs, so handing it the host buffer itself is safe.
  void* upload(std::span<const uint8_t> host) override { return const_cast<uint8_t*>(host.data()); }
  void* output(std::span<uint8_t> host) override { return host.data(); }
  void download(const void* device_data, std::span<uint8_t> host) override {
    if (device_data != host.data()) std::memcpy(host.data(), device_data, host.size());
  }
};

}  // namespace

std::unique_ptr<DeviceMemory> make_device_memory(a4w4_backend backend) {
  if (backend == A4W4_BACKEND_CPU) return std::make_unique<HostMemory>();
  if (backend != A4W4_BACKEND_CUDA)
    fail("--backend: expected cpu or cuda, got {}", a4w4_backend_name(backend));
  // Report what the library's probe says, so that a build without CUDA and a machine without a
  // GPU are told apart.
  int devices = 0;
  const a4w4_status status = a4w4_device_count(A4W4_BACKEND_CUDA, &devices);
  if (status != A4W4_SUCCESS)
    fail("--backend cuda: the cuda backend is not available: {} ({})", a4w4_status_string(status),
         a4w4_last_error_message());
#if A4W4_CLI_CUDA
  return make_cuda_memory(0);
#else
  fail("--backend cuda: liba4w4 sees {} CUDA device(s), but this tool was built without CUDA",
       devices);
#endif
}

}  // namespace a4w4::cli
