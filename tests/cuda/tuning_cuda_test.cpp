// GPU tests (ctest label `cuda`) of the chooser and tuned configurations on a real device: the
// device's tuning key, the heuristic's choice among the registered CUDA kernels, tuned entries
// keyed by the device (honoured, bucketed, or skipped with a warning), and split_k meaning the
// same partitions as on the CPU (cuda.generic gives cpu.reference's bytes for every split).
// Skipped where no GPU is usable.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "a4w4/a4w4.h"

namespace {

// Device copies of a problem's operands (plain, contiguous, 16-byte aligned rows).
class GpuProblem {
 public:
  GpuProblem(int64_t m, int64_t n, int64_t k, uint64_t seed) : m_(m), n_(n), k_(k) {
    std::mt19937_64 rng(seed);
    host_ = {bytes(rng, m * k / 2, false), bytes(rng, m * k / 32, true),
             bytes(rng, n * k / 2, false), bytes(rng, n * k / 32, true)};
    for (size_t i = 0; i < host_.size(); ++i) {
      EXPECT_EQ(cudaMalloc(&device_[i], host_[i].size()), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(device_[i], host_[i].data(), host_[i].size(), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    EXPECT_EQ(cudaMalloc(&d_, static_cast<size_t>(m * n * 4)), cudaSuccess);
  }
  ~GpuProblem() {
    for (void* p : device_) cudaFree(p);
    cudaFree(d_);
  }
  GpuProblem(const GpuProblem&) = delete;
  GpuProblem& operator=(const GpuProblem&) = delete;

  a4w4_status choose(a4w4_context ctx, a4w4_gemm_choice* choice, const char* kernel = nullptr,
                     int split = 0) const {
    const auto t = tensors(a4w4_cuda(0), device_, d_);
    a4w4_gemm_options options = make_options(kernel, split);
    choice->struct_size = sizeof *choice;
    return a4w4_gemm_choose(ctx, &t[0], &t[1], &t[2], &t[3], nullptr, nullptr, &t[4], &options,
                            choice);
  }

  // D (fp32 bytes) from the GPU with the context's choice or the named kernel.
  std::vector<uint8_t> gpu(a4w4_context ctx, const char* kernel = nullptr, int split = 0) const {
    const auto t = tensors(a4w4_cuda(0), device_, d_);
    const a4w4_gemm_options options = make_options(kernel, split);
    EXPECT_EQ(
        a4w4_gemm(ctx, &t[0], &t[1], &t[2], &t[3], nullptr, nullptr, &t[4], &options, nullptr),
        A4W4_SUCCESS)
        << a4w4_last_error_message();
    std::vector<uint8_t> out(static_cast<size_t>(m_ * n_ * 4));
    EXPECT_EQ(cudaMemcpy(out.data(), d_, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

  // D from cpu.reference with the same split.
  std::vector<uint8_t> reference(a4w4_context ctx, int split) const {
    std::vector<uint8_t> out(static_cast<size_t>(m_ * n_ * 4));
    void* host[4] = {const_cast<uint8_t*>(host_[0].data()), const_cast<uint8_t*>(host_[1].data()),
                     const_cast<uint8_t*>(host_[2].data()), const_cast<uint8_t*>(host_[3].data())};
    const auto t = tensors(a4w4_cpu(), host, out.data());
    const a4w4_gemm_options options = make_options("cpu.reference", split);
    EXPECT_EQ(
        a4w4_gemm(ctx, &t[0], &t[1], &t[2], &t[3], nullptr, nullptr, &t[4], &options, nullptr),
        A4W4_SUCCESS)
        << a4w4_last_error_message();
    return out;
  }

 private:
  static std::vector<uint8_t> bytes(std::mt19937_64& rng, int64_t count, bool scales) {
    std::vector<uint8_t> out(static_cast<size_t>(count));
    for (auto& b : out) b = static_cast<uint8_t>(scales ? 118 + rng() % 18 : rng());
    return out;
  }
  static a4w4_gemm_options make_options(const char* kernel, int split) {
    a4w4_gemm_options options;
    a4w4_gemm_options_init(&options);
    options.kernel = kernel;
    options.split_k = split;
    return options;
  }
  std::vector<a4w4_tensor> tensors(a4w4_device device, void* const* ops, void* d) const {
    return {a4w4_tensor_2d(ops[0], A4W4_DTYPE_E2M1, m_, k_, k_, device),
            a4w4_tensor_2d(ops[1], A4W4_DTYPE_E8M0, m_, k_ / 32, k_ / 32, device),
            a4w4_tensor_2d(ops[2], A4W4_DTYPE_E2M1, n_, k_, k_, device),
            a4w4_tensor_2d(ops[3], A4W4_DTYPE_E8M0, n_, k_ / 32, k_ / 32, device),
            a4w4_tensor_2d(d, A4W4_DTYPE_F32, m_, n_, n_, device)};
  }

  int64_t m_, n_, k_;
  std::vector<std::vector<uint8_t>> host_;
  void* device_[4] = {};
  void* d_ = nullptr;
};

class CudaTuning : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!a4w4_backend_available(A4W4_BACKEND_CUDA)) GTEST_SKIP() << "no usable CUDA device";
    ASSERT_EQ(a4w4_context_create(&ctx_), A4W4_SUCCESS);
    ASSERT_EQ(a4w4_context_clear_tuned(ctx_), A4W4_SUCCESS);  // whatever A4W4_TUNED_CONFIG says
    char name[256];
    ASSERT_EQ(a4w4_device_tuning_key(a4w4_cuda(0), name, sizeof name, &sm_count_), A4W4_SUCCESS);
    device_ = name;
    path_ = (std::filesystem::temp_directory_path() /
             ("a4w4_cuda_tuning_" + std::to_string(::getpid()) + ".csv"))
                .string();
  }
  void TearDown() override {
    a4w4_context_destroy(ctx_);
    std::filesystem::remove(path_);
  }
  void load(const std::string& rows) {
    std::ofstream(path_) << "device,sm_count,M,N,K,kernel,split_k,us,tflops\n" << rows;
    ASSERT_EQ(a4w4_context_load_tuned(ctx_, path_.c_str()), A4W4_SUCCESS)
        << a4w4_last_error_message();
  }
  std::string row(int64_t m, int64_t n, int64_t k, const char* kernel, int split) const {
    return "\"" + device_ + "\"," + std::to_string(sm_count_) + "," + std::to_string(m) + "," +
           std::to_string(n) + "," + std::to_string(k) + "," + kernel + "," +
           std::to_string(split) + ",1,1\n";
  }

  a4w4_context ctx_ = nullptr;
  std::string device_, path_;
  int sm_count_ = 0;
};

TEST_F(CudaTuning, DeviceKeyMatchesTheDescription) {
  char text[256];
  ASSERT_EQ(a4w4_device_describe(a4w4_cuda(0), text, sizeof text), A4W4_SUCCESS);
  EXPECT_EQ(std::string(text).rfind(device_, 0), 0u) << text;
  EXPECT_NE(std::string(text).find(std::to_string(sm_count_) + " SMs"), std::string::npos) << text;
}

TEST_F(CudaTuning, HeuristicPicksGemvDecodeTensorCoresOrGeneric) {
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  a4w4_gemm_choice c{};
  const GpuProblem tiny(3, 512, 1024, 5), small(16, 512, 1024, 1), large(256, 512, 1024, 2);
  ASSERT_EQ(tiny.choose(ctx_, &c), A4W4_SUCCESS);  // M <= 4 on a plain B
  EXPECT_STREQ(c.kernel, major >= 9 ? "cuda.gemv" : "cuda.generic");
  EXPECT_EQ(c.split_k, 0);
  ASSERT_EQ(small.choose(ctx_, &c), A4W4_SUCCESS);
  EXPECT_EQ(c.source, A4W4_CHOICE_HEURISTIC);
  EXPECT_STREQ(c.kernel, major == 9 ? "cuda.skinny" : major > 9 ? "cuda.decode" : "cuda.generic");
  EXPECT_EQ(c.split_k, 0);  // cuda.skinny and cuda.decode size their own split
  ASSERT_EQ(large.choose(ctx_, &c), A4W4_SUCCESS);
  // 256 x 512 in a context without a workspace (cuda.skinny above M = 64 and the int8 family
  // need one): four 128 x 256 tiles or eight 128 x 128 ones; the narrow tiles fill more SMs.
  EXPECT_STREQ(c.kernel, major == 9 ? "cuda.bf16_128x128" : "cuda.generic");
}

TEST_F(CudaTuning, TunedEntriesOfThisDeviceAreUsedAndBucketed) {
  const GpuProblem p(12, 320, 1024, 3);
  load(row(16, 320, 1024, "cuda.generic", 3) + row(12, 320, 1024, "cuda.decode", 16) +
       row(16, 320, 1024, "cpu.reference", 0));
  a4w4_gemm_choice c{};
  // M = 12: its own entry asks cuda.decode for split 16, above its limit of 8: skipped at
  // load with a warning, and the heuristic serves M = 12 (the bucket is not consulted).
  ASSERT_EQ(p.choose(ctx_, &c), A4W4_SUCCESS);
  EXPECT_EQ(c.source, A4W4_CHOICE_HEURISTIC);
  int entries = 0, warnings = 0;
  ASSERT_EQ(a4w4_context_tuned_count(ctx_, &entries, &warnings), A4W4_SUCCESS);
  EXPECT_EQ(warnings, 2);  // split above the limit; cpu.reference for a CUDA device (duplicate)

  load(row(16, 320, 1024, "cuda.generic", 3));
  ASSERT_EQ(p.choose(ctx_, &c), A4W4_SUCCESS);  // M = 12 -> the M = 16 bucket
  EXPECT_EQ(c.source, A4W4_CHOICE_TUNED);
  EXPECT_STREQ(c.kernel, "cuda.generic");
  EXPECT_EQ(c.split_k, 3);
  EXPECT_EQ(c.tuned_m, 16);
  EXPECT_EQ(p.gpu(ctx_), p.reference(ctx_, 3));  // the entry's split means what it means on CPU
}

TEST_F(CudaTuning, SplitKMeansTheSamePartitionsAsOnTheCpu) {
  const GpuProblem p(40, 200, 2048, 4);
  for (int split : {1, 2, 3, 5, 64})
    EXPECT_EQ(p.gpu(ctx_, "cuda.generic", split), p.reference(ctx_, split)) << split;
}

}  // namespace
