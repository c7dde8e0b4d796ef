// Where the GEMM operands live while the library works on them.
//
// On the CPU that is the host buffers themselves; on a GPU, device copies (device_memory_cuda.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "a4w4/a4w4.h"

namespace a4w4::cli {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // The device the tensor descriptors name.
  virtual a4w4_device device() const = 0;
  // A device copy of host, valid while this object and host live (the CPU uses host in place).
  virtual void* upload(std::span<const uint8_t> host) = 0;
  // Device memory for an output that download() later copies into host.
  virtual void* output(std::span<uint8_t> host) = 0;
  virtual void download(const void* device_data, std::span<uint8_t> host) = 0;
  // The stream passed to the library (NULL: the default stream, ignored on the CPU).
  virtual void* stream() const { return nullptr; }
  // Waits until the work queued on stream() has finished (for timing).
  virtual void synchronize() {}
};

// Memory for backend cpu, or for cuda (device 0) where the library has a usable GPU; otherwise a
// Failure saying why not (not compiled in, no device).
std::unique_ptr<DeviceMemory> make_device_memory(a4w4_backend backend);

// GPU memory on device `ordinal` (device_memory_cuda.cpp, in builds with CUDA).
std::unique_ptr<DeviceMemory> make_cuda_memory(int ordinal);

}  // namespace a4w4::cli
