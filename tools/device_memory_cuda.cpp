// GPU memory for the tool's operands (built when the CUDA backend is): device copies made with
// cudaMalloc/cudaMemcpy, one non-blocking stream, freed when the object goes.
#include <cuda_runtime_api.h>

#include <vector>

#include "common.h"
#include "device_memory.h"

namespace a4w4::cli {
namespace {

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail("{}: {} ({})", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(int ordinal) : ordinal_(ordinal) {
    check_cuda(cudaSetDevice(ordinal_), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaMemory() override {
    for (void* p : allocations_) cudaFree(p);
    cudaStreamDestroy(stream_);
  }
  a4w4_device device() const override { return a4w4_cuda(ordinal_); }
  void* upload(std::span<const uint8_t> host) override {
    void* p = allocate(host.size());
    check_cuda(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    return p;
  }
  // Outputs start as a copy of the host buffer, so C aliasing D and untouched gaps behave as on
  // the CPU.
  void* output(std::span<uint8_t> host) override { return upload(host); }
  void download(const void* device_data, std::span<uint8_t> host) override {
    check_cuda(cudaMemcpy(host.data(), device_data, host.size(), cudaMemcpyDeviceToHost),
               "cudaMemcpy");
  }
  void* stream() const override { return stream_; }
  void synchronize() override { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  void* allocate(size_t bytes) {
    void* p = nullptr;
    check_cuda(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    allocations_.push_back(p);
    return p;
  }

  int ordinal_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> allocations_;
};

}  // namespace

std::unique_ptr<DeviceMemory> make_cuda_memory(int ordinal) {
  return std::make_unique<CudaMemory>(ordinal);
}

}  // namespace a4w4::cli
