// The API contract: every bad input gets its own status code, leaves its outputs untouched and a
// message naming the argument; status strings, versions, dtype/DLPack mapping, probes, contexts
// (also shared by several threads).
#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "a4w4/a4w4.h"
#include "a4w4/a4w4.hpp"
#include "test_support.h"

namespace a4w4_test {
namespace {

// True when `name` occurs in `message` as a whole identifier (not inside a longer one).
bool mentions(const std::string& message, const std::string& name) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = message.find(name); at != std::string::npos; at = message.find(name, at + 1)) {
    const bool left = at == 0 || !ident(message[at - 1]);
    const bool right = at + name.size() >= message.size() || !ident(message[at + name.size()]);
    if (left && right) return true;
  }
  return false;
}

// Leaves a known message on this thread, so a later check sees the message of its own call.
void set_sentinel_message() {
  const char* name = nullptr;
  a4w4_backend backend;
  ASSERT_NE(a4w4_kernel_info(-424242, &name, &backend), A4W4_SUCCESS);
  ASSERT_TRUE(std::string(a4w4_last_error_message()).find("424242") != std::string::npos);
}

// The status a call on CUDA tensors must get on this machine (SUCCESS: a GPU is usable).
a4w4_status cuda_tensor_status() {
  if (!a4w4_backend_compiled(A4W4_BACKEND_CUDA)) return A4W4_ERROR_BACKEND_NOT_COMPILED;
  if (!a4w4_backend_available(A4W4_BACKEND_CUDA)) return A4W4_ERROR_NO_DEVICE;
  return A4W4_SUCCESS;
}

a4w4_tensor raw_2d(void* data, a4w4_dtype dtype, int64_t rows, int64_t cols, int64_t stride) {
  return a4w4_tensor_2d(data, dtype, rows, cols, stride, a4w4_cpu());
}

// A valid GEMM problem (M=4, N=5, K=64) whose buffers are larger than its views (rows of 128
// elements, spare rows), so a mutated descriptor never points outside its buffer. Outputs are
// poisoned.
struct GemmProblem {
  static constexpr int64_t M = 4, N = 5, K = 64;
  HostTensor a = HostTensor::matrix(A4W4_DTYPE_E2M1, M + 2, 128);
  HostTensor as = HostTensor::matrix(A4W4_DTYPE_E8M0, M + 2, 64);
  HostTensor b = HostTensor::matrix(A4W4_DTYPE_E2M1, N + 2, 128);
  HostTensor bs = HostTensor::matrix(A4W4_DTYPE_E8M0, N + 2, 64);
  HostTensor c = HostTensor::matrix(A4W4_DTYPE_F32, M + 2, 16);
  HostTensor bias = HostTensor::matrix(A4W4_DTYPE_F32, 1, 64);
  HostTensor d = HostTensor::matrix(A4W4_DTYPE_F32, M + 2, 16);
  a4w4_tensor ad, asd, bd, bsd, cd, biasd, dd;
  const a4w4_tensor *a_arg = &ad, *as_arg = &asd, *b_arg = &bd, *bs_arg = &bsd, *c_arg = &cd,
                    *bias_arg = &biasd, *d_arg = &dd;
  a4w4_gemm_options options;
  const a4w4_gemm_options* options_arg = &options;
  a4w4_context ctx = nullptr;

  explicit GemmProblem(a4w4_context context) : ctx(context) {
    std::mt19937_64 rng(0xA11);
    a.fill_random_bytes(rng);
    b.fill_random_bytes(rng);
    for (HostTensor* s : {&as, &bs}) {
      for (int64_t r = 0; r < s->rows(); ++r)
        for (int64_t i = 0; i < s->cols(); ++i) s->set_byte(r, i, 120 + rng() % 15);
    }
    c.fill_bytes(0);  // +0.0 everywhere
    bias.fill_bytes(0);
    ad = raw_2d(a.data(), A4W4_DTYPE_E2M1, M, K, 128);
    asd = raw_2d(as.data(), A4W4_DTYPE_E8M0, M, K / 32, 8);
    bd = raw_2d(b.data(), A4W4_DTYPE_E2M1, N, K, 128);
    bsd = raw_2d(bs.data(), A4W4_DTYPE_E8M0, N, K / 32, 8);
    cd = raw_2d(c.data(), A4W4_DTYPE_F32, M, N, 16);
    biasd = a4w4_tensor_1d(bias.data(), A4W4_DTYPE_F32, N, a4w4_cpu());
    dd = raw_2d(d.data(), A4W4_DTYPE_F32, M, N, 16);
    a4w4_gemm_options_init(&options);
  }

  a4w4_status run() {
    return a4w4_gemm(ctx, a_arg, as_arg, b_arg, bs_arg, c_arg, bias_arg, d_arg, options_arg,
                     nullptr);
  }

  void all_on(a4w4_device device) {
    for (a4w4_tensor* t : {&ad, &asd, &bd, &bsd, &cd, &biasd, &dd}) t->device = device;
  }
};

struct BadGemm {
  const char* what;
  a4w4_status status;
  const char* argument;  // must be named by the message
  std::function<void(GemmProblem&)> mutate;
};

class Api : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(a4w4_context_create(&ctx_), A4W4_SUCCESS); }
  void TearDown() override { a4w4_context_destroy(ctx_); }

  // Runs each bad case on a fresh problem: expects its status, untouched outputs and inputs, and
  // a new message naming the argument.
  void expect_rejected(const std::vector<BadGemm>& cases) {
    for (const BadGemm& bad : cases) {
      SCOPED_TRACE(bad.what);
      GemmProblem p(ctx_);
      bad.mutate(p);
      const HostTensor* buffers[] = {&p.a, &p.as, &p.b, &p.bs, &p.c, &p.bias, &p.d};
      std::vector<std::vector<uint8_t>> before;
      for (const HostTensor* t : buffers) before.push_back(t->bytes());
      set_sentinel_message();
      const a4w4_status got = p.run();
      EXPECT_EQ(got, bad.status) << a4w4_status_string(got) << ": " << a4w4_last_error_message();
      for (size_t i = 0; i < before.size(); ++i)
        EXPECT_TRUE(bytes_unchanged(before[i], *buffers[i])) << "buffer " << i;
      const std::string message = a4w4_last_error_message();
      EXPECT_EQ(message.find("424242"), std::string::npos) << "no new message: " << message;
      EXPECT_TRUE(mentions(message, bad.argument))
          << "the message does not name '" << bad.argument << "': " << message;
    }
  }

  a4w4_context ctx_ = nullptr;
};

TEST_F(Api, TheBaselineProblemIsValid) {
  GemmProblem p(ctx_);
  ASSERT_EQ(p.run(), A4W4_SUCCESS) << a4w4_last_error_message();
  // And it computes something: D holds finite values now (C and bias are zero).
  for (int64_t i = 0; i < GemmProblem::M; ++i)
    for (int64_t j = 0; j < GemmProblem::N; ++j) EXPECT_TRUE(std::isfinite(p.d.get(i, j)));
}

TEST_F(Api, GemmRejectsNullArguments) {
  expect_rejected({
      {"NULL ctx", A4W4_ERROR_INVALID_ARGUMENT, "ctx", [](GemmProblem& p) { p.ctx = nullptr; }},
      {"NULL a", A4W4_ERROR_INVALID_ARGUMENT, "a", [](GemmProblem& p) { p.a_arg = nullptr; }},
      {"NULL a_scale", A4W4_ERROR_INVALID_ARGUMENT, "a_scale",
       [](GemmProblem& p) { p.as_arg = nullptr; }},
      {"NULL b", A4W4_ERROR_INVALID_ARGUMENT, "b", [](GemmProblem& p) { p.b_arg = nullptr; }},
      {"NULL b_scale", A4W4_ERROR_INVALID_ARGUMENT, "b_scale",
       [](GemmProblem& p) { p.bs_arg = nullptr; }},
      {"NULL d", A4W4_ERROR_INVALID_ARGUMENT, "d", [](GemmProblem& p) { p.d_arg = nullptr; }},
      {"NULL a.data", A4W4_ERROR_INVALID_ARGUMENT, "a",
       [](GemmProblem& p) { p.ad.data = nullptr; }},
      {"NULL b_scale.data", A4W4_ERROR_INVALID_ARGUMENT, "b_scale",
       [](GemmProblem& p) { p.bsd.data = nullptr; }},
      {"NULL d.data", A4W4_ERROR_INVALID_ARGUMENT, "d",
       [](GemmProblem& p) { p.dd.data = nullptr; }},
      {"NULL c.data", A4W4_ERROR_INVALID_ARGUMENT, "c",
       [](GemmProblem& p) { p.cd.data = nullptr; }},
      {"NULL bias.data", A4W4_ERROR_INVALID_ARGUMENT, "bias",
       [](GemmProblem& p) { p.biasd.data = nullptr; }},
  });
}

TEST_F(Api, GemmRejectsBadRanksAndDtypes) {
  std::vector<BadGemm> cases;
  for (int32_t rank : {0, 1, 3, 8, 9, -1, 1000}) {
    cases.push_back({"rank of a", A4W4_ERROR_INVALID_ARGUMENT, "a",
                     [rank](GemmProblem& p) { p.ad.rank = rank; }});
    cases.push_back({"rank of d", A4W4_ERROR_INVALID_ARGUMENT, "d",
                     [rank](GemmProblem& p) { p.dd.rank = rank; }});
  }
  cases.push_back({"rank 2 bias", A4W4_ERROR_INVALID_ARGUMENT, "bias", [](GemmProblem& p) {
                     p.biasd = raw_2d(p.bias.data(), A4W4_DTYPE_F32, 1, 5, 5);
                   }});
  // Out-of-range values (99, -1) are UB in C++, so they are tested from C (c_api_test.c); 0 and 7
  // lie within the range of a4w4_dtype's enumerators and are valid C++.
  for (int dtype : {0, 7}) {
    cases.push_back({"invalid dtype enum of a", A4W4_ERROR_INVALID_ARGUMENT, "a",
                     [dtype](GemmProblem& p) { p.ad.dtype = static_cast<a4w4_dtype>(dtype); }});
    cases.push_back({"invalid dtype enum of bias", A4W4_ERROR_INVALID_ARGUMENT, "bias",
                     [dtype](GemmProblem& p) { p.biasd.dtype = static_cast<a4w4_dtype>(dtype); }});
  }
  const std::pair<const char*, a4w4_dtype> wrong[] = {
      {"a", A4W4_DTYPE_BF16},       {"a", A4W4_DTYPE_U8},   {"a_scale", A4W4_DTYPE_U8},
      {"a_scale", A4W4_DTYPE_E2M1}, {"b", A4W4_DTYPE_E8M0}, {"b_scale", A4W4_DTYPE_F16},
      {"d", A4W4_DTYPE_E2M1},       {"d", A4W4_DTYPE_U8},   {"c", A4W4_DTYPE_E8M0},
      {"bias", A4W4_DTYPE_E2M1},    {"bias", A4W4_DTYPE_U8}};
  for (const auto& [name, dtype] : wrong) {
    cases.push_back({"valid but wrong dtype", A4W4_ERROR_UNSUPPORTED_DTYPE, name,
                     [name = std::string(name), dtype = dtype](GemmProblem& p) {
                       a4w4_tensor* t = name == "a"         ? &p.ad
                                        : name == "a_scale" ? &p.asd
                                        : name == "b"       ? &p.bd
                                        : name == "b_scale" ? &p.bsd
                                        : name == "d"       ? &p.dd
                                        : name == "c"       ? &p.cd
                                                            : &p.biasd;
                       t->dtype = dtype;
                     }});
  }
  expect_rejected(cases);
}

TEST_F(Api, GemmRejectsBadShapes) {
  expect_rejected({
      {"K = 48", A4W4_ERROR_K_NOT_MULTIPLE_OF_32, "a",
       [](GemmProblem& p) {
         p.ad.shape[1] = 48;
         p.asd.shape[1] = 1;
       }},
      {"K = 48 in b", A4W4_ERROR_K_NOT_MULTIPLE_OF_32, "b",
       [](GemmProblem& p) { p.bd.shape[1] = 48; }},
      {"B's K differs", A4W4_ERROR_SHAPE_MISMATCH, "b",
       [](GemmProblem& p) {
         p.bd.shape[1] = 96;
         p.bsd.shape[1] = 3;
       }},
      {"a_scale [M, 3]", A4W4_ERROR_SHAPE_MISMATCH, "a_scale",
       [](GemmProblem& p) { p.asd.shape[1] = 3; }},
      {"a_scale [M+1, 2]", A4W4_ERROR_SHAPE_MISMATCH, "a_scale",
       [](GemmProblem& p) { p.asd.shape[0] = 5; }},
      {"b_scale [N, 1]", A4W4_ERROR_SHAPE_MISMATCH, "b_scale",
       [](GemmProblem& p) { p.bsd.shape[1] = 1; }},
      {"b_scale [N-1, 2]", A4W4_ERROR_SHAPE_MISMATCH, "b_scale",
       [](GemmProblem& p) { p.bsd.shape[0] = 4; }},
      {"d [M, N+1]", A4W4_ERROR_SHAPE_MISMATCH, "d", [](GemmProblem& p) { p.dd.shape[1] = 6; }},
      {"d [M-1, N]", A4W4_ERROR_SHAPE_MISMATCH, "d", [](GemmProblem& p) { p.dd.shape[0] = 3; }},
      {"bias [N+1]", A4W4_ERROR_SHAPE_MISMATCH, "bias",
       [](GemmProblem& p) { p.biasd.shape[0] = 6; }},
      {"bias [N-1]", A4W4_ERROR_SHAPE_MISMATCH, "bias",
       [](GemmProblem& p) { p.biasd.shape[0] = 4; }},
      {"c [M, N+1]", A4W4_ERROR_SHAPE_MISMATCH, "c", [](GemmProblem& p) { p.cd.shape[1] = 6; }},
      {"c [M+1, N]", A4W4_ERROR_SHAPE_MISMATCH, "c", [](GemmProblem& p) { p.cd.shape[0] = 5; }},
      {"zero dimension", A4W4_ERROR_INVALID_ARGUMENT, "a",
       [](GemmProblem& p) {
         p.ad.shape[0] = 0;
         p.asd.shape[0] = 0;
         p.dd.shape[0] = 0;
         p.cd.shape[0] = 0;
       }},
  });
}

TEST_F(Api, GemmRejectsBadLayoutsAndStrides) {
  expect_rejected({
      {"a inner stride 2", A4W4_ERROR_UNSUPPORTED_LAYOUT, "a",
       [](GemmProblem& p) { p.ad.strides[1] = 2; }},
      {"d inner stride 2", A4W4_ERROR_UNSUPPORTED_LAYOUT, "d",
       [](GemmProblem& p) { p.dd.strides[1] = 2; }},
      {"a_scale inner stride 0", A4W4_ERROR_UNSUPPORTED_LAYOUT, "a_scale",
       [](GemmProblem& p) { p.asd.strides[1] = 0; }},
      // A prepared layout is accepted only for B and its scales (both), plain everywhere else.
      {"a prepared", A4W4_ERROR_UNSUPPORTED_LAYOUT, "a",
       [](GemmProblem& p) { p.ad.layout = A4W4_LAYOUT_PREPARED_V1; }},
      {"a_scale prepared", A4W4_ERROR_UNSUPPORTED_LAYOUT, "a_scale",
       [](GemmProblem& p) { p.asd.layout = A4W4_LAYOUT_PREPARED_V1; }},
      {"b prepared, b_scale plain", A4W4_ERROR_UNSUPPORTED_LAYOUT, "b",
       [](GemmProblem& p) { p.bd.layout = A4W4_LAYOUT_PREPARED_V1; }},
      {"b plain, b_scale prepared", A4W4_ERROR_UNSUPPORTED_LAYOUT, "b_scale",
       [](GemmProblem& p) { p.bsd.layout = A4W4_LAYOUT_PREPARED_V1; }},
      {"d prepared", A4W4_ERROR_UNSUPPORTED_LAYOUT, "d",
       [](GemmProblem& p) { p.dd.layout = A4W4_LAYOUT_PREPARED_V1; }},
      {"c prepared", A4W4_ERROR_UNSUPPORTED_LAYOUT, "c",
       [](GemmProblem& p) { p.cd.layout = A4W4_LAYOUT_PREPARED_V1; }},
      {"bias prepared", A4W4_ERROR_UNSUPPORTED_LAYOUT, "bias",
       [](GemmProblem& p) { p.biasd.layout = A4W4_LAYOUT_PREPARED_V1; }},
      // Layout values that are not a4w4_layout values (INVALID_ARGUMENT) are outside the C++
      // range of the enum, so c_api_test.c tests them.
      {"a row stride < K", A4W4_ERROR_INVALID_ARGUMENT, "a",
       [](GemmProblem& p) { p.ad.strides[0] = 62; }},
      {"a odd row stride", A4W4_ERROR_INVALID_ARGUMENT, "a",
       [](GemmProblem& p) { p.ad.strides[0] = 65; }},
      {"a negative row stride", A4W4_ERROR_INVALID_ARGUMENT, "a",
       [](GemmProblem& p) { p.ad.strides[0] = -128; }},
      {"b row stride 0", A4W4_ERROR_INVALID_ARGUMENT, "b",
       [](GemmProblem& p) { p.bd.strides[0] = 0; }},
      {"a_scale row stride 1", A4W4_ERROR_INVALID_ARGUMENT, "a_scale",
       [](GemmProblem& p) { p.asd.strides[0] = 1; }},
      {"d row stride < N", A4W4_ERROR_INVALID_ARGUMENT, "d",
       [](GemmProblem& p) { p.dd.strides[0] = 4; }},
      {"d negative row stride", A4W4_ERROR_INVALID_ARGUMENT, "d",
       [](GemmProblem& p) { p.dd.strides[0] = -16; }},
      {"c row stride < N", A4W4_ERROR_INVALID_ARGUMENT, "c",
       [](GemmProblem& p) { p.cd.strides[0] = 3; }},
      {"bias stride 0", A4W4_ERROR_INVALID_ARGUMENT, "bias",
       [](GemmProblem& p) { p.biasd.strides[0] = 0; }},
      {"bias stride -1", A4W4_ERROR_INVALID_ARGUMENT, "bias",
       [](GemmProblem& p) { p.biasd.strides[0] = -1; }},
      {"huge row stride", A4W4_ERROR_INVALID_ARGUMENT, "d",
       [](GemmProblem& p) { p.dd.strides[0] = int64_t{1} << 62; }},
  });
}

TEST_F(Api, GemmRejectsBadDevices) {
  std::vector<BadGemm> cases = {
      {"a on CUDA, the rest on the CPU", A4W4_ERROR_DEVICE_MISMATCH, "a",
       [](GemmProblem& p) { p.ad.device = a4w4_cuda(0); }},
      {"d on CUDA, the rest on the CPU", A4W4_ERROR_DEVICE_MISMATCH, "d",
       [](GemmProblem& p) { p.dd.device = a4w4_cuda(0); }},
      {"bias on CUDA, the rest on the CPU", A4W4_ERROR_DEVICE_MISMATCH, "bias",
       [](GemmProblem& p) { p.biasd.device = a4w4_cuda(0); }},
      {"invalid device type", A4W4_ERROR_INVALID_ARGUMENT, "b",
       [](GemmProblem& p) { p.bd.device.type = static_cast<a4w4_device_type>(3); }},
      {"CPU ordinal 1", A4W4_ERROR_INVALID_ARGUMENT, "c",
       [](GemmProblem& p) { p.cd.device.ordinal = 1; }},
      {"negative CUDA ordinal", A4W4_ERROR_INVALID_ARGUMENT, "a",
       [](GemmProblem& p) { p.all_on(a4w4_cuda(-1)); }},
  };
  const a4w4_status cuda = cuda_tensor_status();
  if (cuda != A4W4_SUCCESS) {
    // Host pointers claiming to be CUDA memory: rejected before anything is read.
    cases.push_back({"every tensor on CUDA device 0", cuda, "CUDA",
                     [](GemmProblem& p) { p.all_on(a4w4_cuda(0)); }});
  }
  if (a4w4_backend_compiled(A4W4_BACKEND_CUDA)) {
    cases.push_back({"every tensor on CUDA device 99", A4W4_ERROR_NO_DEVICE, "99",
                     [](GemmProblem& p) { p.all_on(a4w4_cuda(99)); }});
  }
  expect_rejected(cases);
}

TEST_F(Api, ContextBackendMustServeTheTensors) {
  a4w4_context forced = nullptr;
  ASSERT_EQ(a4w4_context_create(&forced), A4W4_SUCCESS);
  const a4w4_status set = a4w4_context_set_backend(forced, A4W4_BACKEND_CUDA);
  if (!a4w4_backend_compiled(A4W4_BACKEND_CUDA)) {
    EXPECT_EQ(set, A4W4_ERROR_BACKEND_NOT_COMPILED);
    EXPECT_TRUE(mentions(a4w4_last_error_message(), "backend")) << a4w4_last_error_message();
  } else {
    ASSERT_EQ(set, A4W4_SUCCESS);
    GemmProblem p(forced);
    const auto d_before = p.d.bytes();
    EXPECT_EQ(p.run(), A4W4_ERROR_DEVICE_MISMATCH) << a4w4_last_error_message();
    EXPECT_TRUE(bytes_unchanged(d_before, p.d));
    EXPECT_NE(std::string(a4w4_last_error_message()), "");
  }
  // Backend CPU with CUDA tensors.
  ASSERT_EQ(a4w4_context_set_backend(forced, A4W4_BACKEND_CPU), A4W4_SUCCESS);
  {
    GemmProblem p(forced);
    p.all_on(a4w4_cuda(0));
    const auto d_before = p.d.bytes();
    EXPECT_EQ(p.run(), A4W4_ERROR_DEVICE_MISMATCH) << a4w4_last_error_message();
    EXPECT_TRUE(bytes_unchanged(d_before, p.d));
  }
  a4w4_context_destroy(forced);
}

TEST_F(Api, GemmRejectsBadOptions) {
  expect_rejected({
      {"unknown kernel", A4W4_ERROR_KERNEL_NOT_FOUND, "nope",
       [](GemmProblem& p) { p.options.kernel = "nope"; }},
      {"split_k -1", A4W4_ERROR_INVALID_ARGUMENT, "split_k",
       [](GemmProblem& p) { p.options.split_k = -1; }},
      {"split_k > K/32", A4W4_ERROR_INVALID_ARGUMENT, "split_k",
       [](GemmProblem& p) { p.options.split_k = 3; }},
      // (A math_mode outside {0, 1} is outside the C++ range of the enum: see c_api_test.c.)
      {"b_constant 2", A4W4_ERROR_INVALID_ARGUMENT, "b_constant",
       [](GemmProblem& p) { p.options.b_constant = 2; }},
      {"b_constant -1", A4W4_ERROR_INVALID_ARGUMENT, "b_constant",
       [](GemmProblem& p) { p.options.b_constant = -1; }},
      {"struct_size 0", A4W4_ERROR_INVALID_ARGUMENT, "struct_size",
       [](GemmProblem& p) { p.options.struct_size = 0; }},
      {"struct_size too small", A4W4_ERROR_INVALID_ARGUMENT, "struct_size",
       [](GemmProblem& p) { p.options.struct_size = sizeof(a4w4_gemm_options) - 4; }},
      {"struct_size too large", A4W4_ERROR_INVALID_ARGUMENT, "struct_size",
       [](GemmProblem& p) { p.options.struct_size = sizeof(a4w4_gemm_options) + 8; }},
  });
  // The valid choices: NULL and "" choose automatically; the reference kernel by name.
  for (const char* kernel : {static_cast<const char*>(nullptr), "", "cpu.reference"}) {
    GemmProblem p(ctx_);
    p.options.kernel = kernel;
    p.options.split_k = 2;
    EXPECT_EQ(p.run(), A4W4_SUCCESS) << (kernel ? kernel : "NULL") << a4w4_last_error_message();
  }
  GemmProblem p(ctx_);
  p.options_arg = nullptr;
  EXPECT_EQ(p.run(), A4W4_SUCCESS) << a4w4_last_error_message();
  // A constant B changes nothing on the CPU: the same bytes.
  {
    GemmProblem plain(ctx_), constant(ctx_);
    constant.options.b_constant = 1;
    ASSERT_EQ(plain.run(), A4W4_SUCCESS) << a4w4_last_error_message();
    ASSERT_EQ(constant.run(), A4W4_SUCCESS) << a4w4_last_error_message();
    EXPECT_EQ(constant.d.bytes(), plain.d.bytes());
  }
}

TEST_F(Api, GemmRejectsOverlappingOutputs) {
  expect_rejected({
      {"d overlaps a", A4W4_ERROR_INVALID_ARGUMENT, "a",
       [](GemmProblem& p) { p.dd.data = p.a.data() + 64; }},
      {"d overlaps a_scale", A4W4_ERROR_INVALID_ARGUMENT, "a_scale",
       [](GemmProblem& p) { p.dd.data = p.as.data(); }},
      {"d overlaps b", A4W4_ERROR_INVALID_ARGUMENT, "b",
       [](GemmProblem& p) { p.dd.data = p.b.data() + 100; }},
      {"d overlaps b_scale", A4W4_ERROR_INVALID_ARGUMENT, "b_scale",
       [](GemmProblem& p) { p.dd.data = p.bs.data() + 8; }},
      {"d overlaps bias", A4W4_ERROR_INVALID_ARGUMENT, "bias",
       [](GemmProblem& p) { p.dd.data = p.bias.data() + 4; }},
      {"bias inside d", A4W4_ERROR_INVALID_ARGUMENT, "bias",
       [](GemmProblem& p) { p.biasd.data = p.d.data() + 16 * 4; }},
      {"c overlaps d by one element", A4W4_ERROR_INVALID_ARGUMENT, "c",
       [](GemmProblem& p) { p.cd.data = p.d.data() + 4; }},
      {"c overlaps d by one row", A4W4_ERROR_INVALID_ARGUMENT, "c",
       [](GemmProblem& p) { p.cd.data = p.d.data() + 16 * 4; }},
      {"c is d's data with another stride", A4W4_ERROR_INVALID_ARGUMENT, "c",
       [](GemmProblem& p) {
         p.cd.data = p.d.data();
         p.cd.strides[0] = 8;
       }},
      {"c is d's data with another dtype", A4W4_ERROR_INVALID_ARGUMENT, "c",
       [](GemmProblem& p) {
         p.cd = raw_2d(p.d.data(), A4W4_DTYPE_BF16, GemmProblem::M, GemmProblem::N, 32);
         p.dd = raw_2d(p.d.data(), A4W4_DTYPE_F32, GemmProblem::M, GemmProblem::N, 16);
       }},
  });
  // C the very tensor D is the in-place update and is accepted.
  GemmProblem p(ctx_);
  p.cd = p.dd;
  EXPECT_EQ(p.run(), A4W4_SUCCESS) << a4w4_last_error_message();
}

// ---- Quantize / dequantize errors ----------------------------------------------------------

struct QuantizeProblem {
  HostTensor x = HostTensor::matrix(A4W4_DTYPE_F32, 4, 128);
  // q and s are larger than their views so that overlapping views stay inside them.
  HostTensor q = HostTensor::matrix(A4W4_DTYPE_E2M1, 16, 256);
  HostTensor s = HostTensor::matrix(A4W4_DTYPE_E8M0, 16, 128);
  HostTensor y = HostTensor::matrix(A4W4_DTYPE_F32, 4, 128);
  a4w4_tensor xd = raw_2d(x.data(), A4W4_DTYPE_F32, 3, 64, 128);
  a4w4_tensor qd = raw_2d(q.data(), A4W4_DTYPE_E2M1, 3, 64, 128);
  a4w4_tensor sd = raw_2d(s.data(), A4W4_DTYPE_E8M0, 3, 2, 8);
  a4w4_tensor yd = raw_2d(y.data(), A4W4_DTYPE_F32, 3, 64, 128);
  a4w4_scale_mode mode = A4W4_SCALE_RCEIL;
  a4w4_context ctx;
  const a4w4_tensor *x_arg = &xd, *q_arg = &qd, *s_arg = &sd, *y_arg = &yd;

  explicit QuantizeProblem(a4w4_context context) : ctx(context) {
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t i = 0; i < 128; ++i) x.set(r, i, (i % 13) - 6.0);
    std::mt19937_64 rng(0xA12);
    q.fill_random_bytes(rng);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t i = 0; i < 2; ++i) s.bytes()[static_cast<size_t>(r * 8 + i)] = 120 + rng() % 15;
  }
  void all_on(a4w4_device device) {
    for (a4w4_tensor* t : {&xd, &qd, &sd, &yd}) t->device = device;
  }
};

struct BadQuantize {
  const char* what;
  bool dequantize;  // else quantize
  a4w4_status status;
  const char* argument;
  std::function<void(QuantizeProblem&)> mutate;
};

TEST_F(Api, QuantizeAndDequantizeRejectBadInputs) {
  std::vector<BadQuantize> cases = {
      {"NULL ctx", false, A4W4_ERROR_INVALID_ARGUMENT, "ctx",
       [](QuantizeProblem& p) { p.ctx = nullptr; }},
      {"NULL x", false, A4W4_ERROR_INVALID_ARGUMENT, "x",
       [](QuantizeProblem& p) { p.x_arg = nullptr; }},
      {"NULL q", false, A4W4_ERROR_INVALID_ARGUMENT, "q",
       [](QuantizeProblem& p) { p.q_arg = nullptr; }},
      {"NULL scale", false, A4W4_ERROR_INVALID_ARGUMENT, "scale",
       [](QuantizeProblem& p) { p.s_arg = nullptr; }},
      {"NULL x.data", false, A4W4_ERROR_INVALID_ARGUMENT, "x",
       [](QuantizeProblem& p) { p.xd.data = nullptr; }},
      {"mode 3", false, A4W4_ERROR_INVALID_ARGUMENT, "mode",
       [](QuantizeProblem& p) { p.mode = static_cast<a4w4_scale_mode>(3); }},
      {"x rank 9", false, A4W4_ERROR_INVALID_ARGUMENT, "x",
       [](QuantizeProblem& p) { p.xd.rank = 9; }},
      {"x dtype 0", false, A4W4_ERROR_INVALID_ARGUMENT, "x",
       [](QuantizeProblem& p) { p.xd.dtype = static_cast<a4w4_dtype>(0); }},
      {"x dtype e2m1", false, A4W4_ERROR_UNSUPPORTED_DTYPE, "x",
       [](QuantizeProblem& p) { p.xd.dtype = A4W4_DTYPE_E2M1; }},
      {"q dtype u8", false, A4W4_ERROR_UNSUPPORTED_DTYPE, "q",
       [](QuantizeProblem& p) { p.qd.dtype = A4W4_DTYPE_U8; }},
      {"scale dtype u8", false, A4W4_ERROR_UNSUPPORTED_DTYPE, "scale",
       [](QuantizeProblem& p) { p.sd.dtype = A4W4_DTYPE_U8; }},
      {"x K = 48", false, A4W4_ERROR_K_NOT_MULTIPLE_OF_32, "x",
       [](QuantizeProblem& p) {
         p.xd.shape[1] = 48;
         p.qd.shape[1] = 48;
         p.sd.shape[1] = 1;
       }},
      {"q shape", false, A4W4_ERROR_SHAPE_MISMATCH, "q",
       [](QuantizeProblem& p) { p.qd.shape[1] = 96; }},
      {"scale shape", false, A4W4_ERROR_SHAPE_MISMATCH, "scale",
       [](QuantizeProblem& p) { p.sd.shape[0] = 2; }},
      {"x inner stride", false, A4W4_ERROR_UNSUPPORTED_LAYOUT, "x",
       [](QuantizeProblem& p) { p.xd.strides[1] = 3; }},
      {"q odd row stride", false, A4W4_ERROR_INVALID_ARGUMENT, "q",
       [](QuantizeProblem& p) { p.qd.strides[0] = 127; }},
      {"q overlaps x", false, A4W4_ERROR_INVALID_ARGUMENT, "q",
       [](QuantizeProblem& p) { p.qd.data = p.x.data() + 100; }},
      {"scale overlaps q", false, A4W4_ERROR_INVALID_ARGUMENT, "scale",
       [](QuantizeProblem& p) { p.sd.data = p.q.data() + 10; }},
      {"x on CUDA", false, A4W4_ERROR_DEVICE_MISMATCH, "x",
       [](QuantizeProblem& p) { p.xd.device = a4w4_cuda(0); }},
      // dequantize
      {"NULL y", true, A4W4_ERROR_INVALID_ARGUMENT, "y",
       [](QuantizeProblem& p) { p.y_arg = nullptr; }},
      {"NULL q", true, A4W4_ERROR_INVALID_ARGUMENT, "q",
       [](QuantizeProblem& p) { p.q_arg = nullptr; }},
      {"y dtype u8", true, A4W4_ERROR_UNSUPPORTED_DTYPE, "y",
       [](QuantizeProblem& p) { p.yd.dtype = A4W4_DTYPE_U8; }},
      {"y dtype e2m1", true, A4W4_ERROR_UNSUPPORTED_DTYPE, "y",
       [](QuantizeProblem& p) { p.yd.dtype = A4W4_DTYPE_E2M1; }},
      {"q dtype f32", true, A4W4_ERROR_UNSUPPORTED_DTYPE, "q",
       [](QuantizeProblem& p) { p.qd.dtype = A4W4_DTYPE_F32; }},
      {"q K = 48", true, A4W4_ERROR_K_NOT_MULTIPLE_OF_32, "q",
       [](QuantizeProblem& p) {
         p.qd.shape[1] = 48;
         p.sd.shape[1] = 1;
         p.yd.shape[1] = 48;
       }},
      {"y shape", true, A4W4_ERROR_SHAPE_MISMATCH, "y",
       [](QuantizeProblem& p) { p.yd.shape[0] = 4; }},
      {"scale shape", true, A4W4_ERROR_SHAPE_MISMATCH, "scale",
       [](QuantizeProblem& p) { p.sd.shape[1] = 3; }},
      {"y overlaps q", true, A4W4_ERROR_INVALID_ARGUMENT, "q",
       [](QuantizeProblem& p) { p.yd.data = p.q.data() + 32; }},
      {"y overlaps scale", true, A4W4_ERROR_INVALID_ARGUMENT, "scale",
       [](QuantizeProblem& p) { p.yd.data = p.s.data(); }},
      {"y prepared", true, A4W4_ERROR_UNSUPPORTED_LAYOUT, "y",
       [](QuantizeProblem& p) { p.yd.layout = A4W4_LAYOUT_PREPARED_V1; }},
      {"q prepared", true, A4W4_ERROR_UNSUPPORTED_LAYOUT, "q",
       [](QuantizeProblem& p) {
         p.qd.layout = A4W4_LAYOUT_PREPARED_V1;
         p.sd.layout = A4W4_LAYOUT_PREPARED_V1;
       }},
      {"x prepared", false, A4W4_ERROR_UNSUPPORTED_LAYOUT, "x",
       [](QuantizeProblem& p) { p.xd.layout = A4W4_LAYOUT_PREPARED_V1; }},
      {"q prepared (quantize)", false, A4W4_ERROR_UNSUPPORTED_LAYOUT, "q",
       [](QuantizeProblem& p) { p.qd.layout = A4W4_LAYOUT_PREPARED_V1; }},
  };
  const a4w4_status cuda = cuda_tensor_status();
  if (cuda != A4W4_SUCCESS) {
    cases.push_back(
        {"all on CUDA", false, cuda, "CUDA", [](QuantizeProblem& p) { p.all_on(a4w4_cuda(0)); }});
    cases.push_back(
        {"all on CUDA", true, cuda, "CUDA", [](QuantizeProblem& p) { p.all_on(a4w4_cuda(0)); }});
  }
  for (const BadQuantize& bad : cases) {
    SCOPED_TRACE(std::string(bad.dequantize ? "dequantize: " : "quantize: ") + bad.what);
    QuantizeProblem p(ctx_);
    bad.mutate(p);
    const HostTensor* buffers[] = {&p.x, &p.q, &p.s, &p.y};
    std::vector<std::vector<uint8_t>> before;
    for (const HostTensor* t : buffers) before.push_back(t->bytes());
    set_sentinel_message();
    const a4w4_status got = bad.dequantize
                                ? a4w4_dequantize(p.ctx, p.q_arg, p.s_arg, p.y_arg, nullptr)
                                : a4w4_quantize(p.ctx, p.x_arg, p.q_arg, p.s_arg, p.mode, nullptr);
    EXPECT_EQ(got, bad.status) << a4w4_status_string(got) << ": " << a4w4_last_error_message();
    for (size_t i = 0; i < before.size(); ++i)
      EXPECT_TRUE(bytes_unchanged(before[i], *buffers[i])) << "buffer " << i;
    const std::string message = a4w4_last_error_message();
    EXPECT_EQ(message.find("424242"), std::string::npos) << "no new message: " << message;
    EXPECT_TRUE(mentions(message, bad.argument))
        << "the message does not name '" << bad.argument << "': " << message;
  }
  // The unmutated problems are valid.
  QuantizeProblem p(ctx_);
  EXPECT_EQ(a4w4_quantize(ctx_, &p.xd, &p.qd, &p.sd, p.mode, nullptr), A4W4_SUCCESS)
      << a4w4_last_error_message();
  EXPECT_EQ(a4w4_dequantize(ctx_, &p.qd, &p.sd, &p.yd, nullptr), A4W4_SUCCESS)
      << a4w4_last_error_message();
}

// ---- Prepared weights ----------------------------------------------------------------------

TEST_F(Api, PreparedWeightSizeAndPrepareRejectBadInputs) {
  size_t w = 77, s = 77;
  EXPECT_EQ(a4w4_prepared_weight_size(16, 128, A4W4_LAYOUT_PREPARED_V1, &w, &s), A4W4_SUCCESS);
  EXPECT_EQ(w, 1024u);
  EXPECT_EQ(s, 64u);
  EXPECT_EQ(a4w4_prepared_weight_size(17, 160, A4W4_LAYOUT_PREPARED_V1, &w, &s), A4W4_SUCCESS);
  EXPECT_EQ(w, 4u * 1024u);
  EXPECT_EQ(s, 4u * 64u);
  w = s = 77;
  EXPECT_EQ(a4w4_prepared_weight_size(17, 160, A4W4_LAYOUT_PREPARED_V2, &w, &s), A4W4_SUCCESS);
  EXPECT_EQ(w, 4u * 1024u);
  EXPECT_EQ(s, 4u * 64u);
  // With B's int8 form: version 2's tiles, then (256-byte aligned) int8 rows of K rounded up to
  // 128, and per-tile factors and summaries for rows rounded up to 384; the scales are version 2's.
  w = s = 77;
  EXPECT_EQ(a4w4_prepared_weight_size(17, 160, A4W4_LAYOUT_PREPARED_V2_INT8, &w, &s), A4W4_SUCCESS);
  EXPECT_GE(w, 4u * 1024u + 17u * 256u + 2u * 384u * 4u);
  EXPECT_EQ(s, 4u * 64u);
  w = s = 77;
  EXPECT_EQ(a4w4_prepared_weight_size(16, 128, static_cast<a4w4_layout>(4), &w, &s),
            A4W4_ERROR_UNSUPPORTED_LAYOUT);
  EXPECT_EQ(a4w4_prepared_weight_size(16, 128, A4W4_LAYOUT_PLAIN, &w, &s),
            A4W4_ERROR_UNSUPPORTED_LAYOUT);
  EXPECT_EQ(a4w4_prepared_weight_size(16, 48, A4W4_LAYOUT_PREPARED_V1, &w, &s),
            A4W4_ERROR_K_NOT_MULTIPLE_OF_32);
  EXPECT_EQ(a4w4_prepared_weight_size(0, 128, A4W4_LAYOUT_PREPARED_V1, &w, &s),
            A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_prepared_weight_size(16, -32, A4W4_LAYOUT_PREPARED_V1, &w, &s),
            A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_prepared_weight_size(16, 128, A4W4_LAYOUT_PREPARED_V1, nullptr, &s),
            A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(w, 77u) << "a failed call wrote its output";
  EXPECT_EQ(s, 77u) << "a failed call wrote its output";

  // prepare_weight: b [20, 64] plain -> prepared buffers (2 row groups x 1 K tile).
  struct Prep {
    HostTensor b = HostTensor::matrix(A4W4_DTYPE_E2M1, 20, 64);
    HostTensor bs = HostTensor::matrix(A4W4_DTYPE_E8M0, 20, 2, 0, 127);
    HostTensor pw = HostTensor::matrix(A4W4_DTYPE_U8, 1, 8192);  // int8 form: 6912
    HostTensor ps = HostTensor::matrix(A4W4_DTYPE_U8, 1, 256);
    a4w4_tensor bd = b.desc(), bsd = bs.desc();
    a4w4_tensor pwd = raw_2d(pw.data(), A4W4_DTYPE_E2M1, 20, 64, 64);
    a4w4_tensor psd = raw_2d(ps.data(), A4W4_DTYPE_E8M0, 20, 2, 2);
    Prep() { pwd.layout = psd.layout = A4W4_LAYOUT_PREPARED_V1; }
  };
  struct Case {
    const char* what;
    a4w4_status status;
    const char* argument;
    std::function<void(Prep&)> mutate;
  };
  const Case cases[] = {
      {"prepared is plain", A4W4_ERROR_UNSUPPORTED_LAYOUT, "prepared",
       [](Prep& p) { p.pwd.layout = p.psd.layout = A4W4_LAYOUT_PLAIN; }},
      {"prepared_scale plain", A4W4_ERROR_UNSUPPORTED_LAYOUT, "prepared_scale",
       [](Prep& p) { p.psd.layout = A4W4_LAYOUT_PLAIN; }},
      {"b prepared", A4W4_ERROR_UNSUPPORTED_LAYOUT, "b",
       [](Prep& p) { p.bd.layout = A4W4_LAYOUT_PREPARED_V1; }},
      {"prepared shape", A4W4_ERROR_SHAPE_MISMATCH, "prepared",
       [](Prep& p) {
         p.pwd.shape[0] = 21;
         p.psd.shape[0] = 21;
       }},
      {"prepared_scale shape", A4W4_ERROR_SHAPE_MISMATCH, "prepared_scale",
       [](Prep& p) { p.psd.shape[1] = 3; }},
      {"prepared dtype", A4W4_ERROR_UNSUPPORTED_DTYPE, "prepared",
       [](Prep& p) { p.pwd.dtype = A4W4_DTYPE_U8; }},
      {"prepared overlaps b", A4W4_ERROR_INVALID_ARGUMENT, "b",
       [](Prep& p) { p.pwd.data = p.b.data(); }},
      {"prepared_scale overlaps prepared", A4W4_ERROR_INVALID_ARGUMENT, "prepared_scale",
       [](Prep& p) { p.psd.data = p.pw.data() + 1024; }},
      {"NULL ctx", A4W4_ERROR_INVALID_ARGUMENT, "ctx", [](Prep&) {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Prep p;
    c.mutate(p);
    const auto pw_before = p.pw.bytes(), ps_before = p.ps.bytes(), b_before = p.b.bytes();
    set_sentinel_message();
    const a4w4_context ctx = std::string(c.what) == "NULL ctx" ? nullptr : ctx_;
    const a4w4_status got = a4w4_prepare_weight(ctx, &p.bd, &p.bsd, &p.pwd, &p.psd, nullptr);
    EXPECT_EQ(got, c.status) << a4w4_last_error_message();
    EXPECT_TRUE(bytes_unchanged(pw_before, p.pw));
    EXPECT_TRUE(bytes_unchanged(ps_before, p.ps));
    EXPECT_TRUE(bytes_unchanged(b_before, p.b));
    EXPECT_TRUE(mentions(a4w4_last_error_message(), c.argument)) << a4w4_last_error_message();
  }
  Prep p;
  EXPECT_EQ(a4w4_prepare_weight(ctx_, &p.bd, &p.bsd, &p.pwd, &p.psd, nullptr), A4W4_SUCCESS)
      << a4w4_last_error_message();
  // A GEMM whose output overlaps the prepared weight's extent (2 row groups x 1024 bytes).
  GemmProblem g(ctx_);
  HostTensor a = HostTensor::matrix(A4W4_DTYPE_E2M1, 4, 64, 0, 0x22);
  HostTensor as = HostTensor::matrix(A4W4_DTYPE_E8M0, 4, 2, 0, 127);
  g.ad = a.desc();
  g.asd = as.desc();
  g.bd = p.pwd;
  g.bsd = p.psd;
  g.cd = raw_2d(g.c.data(), A4W4_DTYPE_F32, 4, 20, 20);
  g.c_arg = nullptr;
  g.bias_arg = nullptr;
  g.dd = raw_2d(p.pw.data() + 2000, A4W4_DTYPE_F32, 4, 20, 20);
  const auto pw_before = p.pw.bytes();
  EXPECT_EQ(g.run(), A4W4_ERROR_INVALID_ARGUMENT) << a4w4_last_error_message();
  EXPECT_TRUE(bytes_unchanged(pw_before, p.pw));
  g.dd = raw_2d(g.d.data(), A4W4_DTYPE_F32, 4, 20, 20);
  HostTensor d = HostTensor::matrix(A4W4_DTYPE_F32, 4, 20);
  g.dd = d.desc();
  EXPECT_EQ(g.run(), A4W4_SUCCESS) << a4w4_last_error_message();
}

// ---- Status, messages, version, dtypes ----------------------------------------------------

TEST(ApiBasics, StatusStringsAreDistinctAndNamed) {
  const char* names[] = {"A4W4_SUCCESS",
                         "A4W4_ERROR_INVALID_ARGUMENT",
                         "A4W4_ERROR_SHAPE_MISMATCH",
                         "A4W4_ERROR_UNSUPPORTED_DTYPE",
                         "A4W4_ERROR_UNSUPPORTED_LAYOUT",
                         "A4W4_ERROR_K_NOT_MULTIPLE_OF_32",
                         "A4W4_ERROR_BACKEND_NOT_COMPILED",
                         "A4W4_ERROR_NO_DEVICE",
                         "A4W4_ERROR_DEVICE_MISMATCH",
                         "A4W4_ERROR_KERNEL_NOT_FOUND",
                         "A4W4_ERROR_KERNEL_NOT_APPLICABLE",
                         "A4W4_ERROR_CONFIG",
                         "A4W4_ERROR_DEVICE",
                         "A4W4_ERROR_OUT_OF_MEMORY",
                         "A4W4_ERROR_INTERNAL"};
  static_assert(A4W4_ERROR_INTERNAL == 14);
  std::set<std::string> seen;
  for (int code = 0; code <= 14; ++code) {
    const char* s = a4w4_status_string(static_cast<a4w4_status>(code));
    ASSERT_NE(s, nullptr) << code;
    EXPECT_TRUE(mentions(s, names[code])) << code << ": " << s;
    EXPECT_TRUE(seen.insert(s).second) << "duplicate: " << s;
  }
  for (int code : {15}) {  // -1 and 1000: UB in C++, tested from C (c_api_test.c)
    const char* s = a4w4_status_string(static_cast<a4w4_status>(code));
    ASSERT_NE(s, nullptr) << code;
    EXPECT_EQ(seen.count(s), 0u) << code << " reads like a known code: " << s;
    EXPECT_GT(std::strlen(s), 0u);
  }
}

TEST(ApiBasics, LastErrorMessageIsPerThreadAndKeptBySuccess) {
  std::string fresh;
  std::thread([&] { fresh = a4w4_last_error_message(); }).join();
  EXPECT_EQ(fresh, "") << "a thread that never failed must see an empty message";

  set_sentinel_message();
  const std::string mine = a4w4_last_error_message();
  std::string other;
  std::thread([&] {
    a4w4_context ctx = nullptr;
    EXPECT_EQ(a4w4_context_create(nullptr), A4W4_ERROR_INVALID_ARGUMENT);
    other = a4w4_last_error_message();
    (void)ctx;
  }).join();
  EXPECT_NE(other, "");
  EXPECT_NE(other, mine);
  EXPECT_EQ(std::string(a4w4_last_error_message()), mine) << "another thread's failure leaked";
  // A successful call leaves it unchanged.
  a4w4_context ctx = nullptr;
  ASSERT_EQ(a4w4_context_create(&ctx), A4W4_SUCCESS);
  ASSERT_EQ(a4w4_context_set_num_threads(ctx, 2), A4W4_SUCCESS);
  EXPECT_EQ(std::string(a4w4_last_error_message()), mine);
  a4w4_context_destroy(ctx);
}

TEST(ApiBasics, VersionMatchesTheHeader) {
  EXPECT_EQ(a4w4_version(), A4W4_VERSION);
  EXPECT_EQ(A4W4_VERSION,
            A4W4_VERSION_MAJOR * 10000 + A4W4_VERSION_MINOR * 100 + A4W4_VERSION_PATCH);
  const std::string expected = std::to_string(A4W4_VERSION_MAJOR) + "." +
                               std::to_string(A4W4_VERSION_MINOR) + "." +
                               std::to_string(A4W4_VERSION_PATCH);
  ASSERT_NE(a4w4_version_string(), nullptr);
  EXPECT_EQ(std::string(a4w4_version_string()), expected);
}

TEST(ApiBasics, DtypesAndDlpackCodes) {
  struct Row {
    a4w4_dtype dtype;
    int bits;
    const char* name;
    uint8_t code, dl_bits;
  };
  const Row rows[] = {{A4W4_DTYPE_E2M1, 4, "e2m1", 17, 4},  {A4W4_DTYPE_E8M0, 8, "e8m0", 14, 8},
                      {A4W4_DTYPE_BF16, 16, "bf16", 4, 16}, {A4W4_DTYPE_F16, 16, "f16", 2, 16},
                      {A4W4_DTYPE_F32, 32, "f32", 2, 32},   {A4W4_DTYPE_U8, 8, "u8", 1, 8}};
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    EXPECT_EQ(a4w4_dtype_bits(r.dtype), r.bits);
    EXPECT_STREQ(a4w4_dtype_name(r.dtype), r.name);
    uint8_t code = 0, bits = 0;
    ASSERT_EQ(a4w4_dtype_to_dlpack(r.dtype, &code, &bits), A4W4_SUCCESS);
    EXPECT_EQ(code, r.code);
    EXPECT_EQ(bits, r.dl_bits);
    a4w4_dtype back = static_cast<a4w4_dtype>(0);
    ASSERT_EQ(a4w4_dtype_from_dlpack(code, bits, &back), A4W4_SUCCESS);
    EXPECT_EQ(back, r.dtype);
  }
  for (int bad : {0, 7}) {  // 99 and -3: see c_api_test.c
    const auto dtype = static_cast<a4w4_dtype>(bad);
    EXPECT_EQ(a4w4_dtype_bits(dtype), 0);
    EXPECT_STREQ(a4w4_dtype_name(dtype), "invalid");
    uint8_t code = 77, bits = 77;
    EXPECT_EQ(a4w4_dtype_to_dlpack(dtype, &code, &bits), A4W4_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(code, 77);
    EXPECT_EQ(bits, 77);
  }
  a4w4_dtype out = A4W4_DTYPE_U8;
  EXPECT_EQ(a4w4_dtype_from_dlpack(2, 64, &out), A4W4_ERROR_UNSUPPORTED_DTYPE);  // float64
  EXPECT_EQ(a4w4_dtype_from_dlpack(17, 8, &out), A4W4_ERROR_UNSUPPORTED_DTYPE);
  EXPECT_EQ(a4w4_dtype_from_dlpack(0, 32, &out), A4W4_ERROR_UNSUPPORTED_DTYPE);  // int32
  EXPECT_EQ(out, A4W4_DTYPE_U8) << "a failed call wrote its output";
  uint8_t code = 0;
  EXPECT_EQ(a4w4_dtype_to_dlpack(A4W4_DTYPE_F32, &code, nullptr), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_dtype_to_dlpack(A4W4_DTYPE_F32, nullptr, &code), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_dtype_from_dlpack(2, 32, nullptr), A4W4_ERROR_INVALID_ARGUMENT);
}

TEST(ApiBasics, EnumNames) {
  EXPECT_STREQ(a4w4_scale_mode_name(A4W4_SCALE_FLOOR), "floor");
  EXPECT_STREQ(a4w4_scale_mode_name(A4W4_SCALE_RCEIL), "rceil");
  EXPECT_STREQ(a4w4_scale_mode_name(A4W4_SCALE_EVEN), "even");
  EXPECT_STREQ(a4w4_scale_mode_name(static_cast<a4w4_scale_mode>(3)), "invalid");
  EXPECT_STREQ(a4w4_backend_name(A4W4_BACKEND_AUTO), "auto");
  EXPECT_STREQ(a4w4_backend_name(A4W4_BACKEND_CPU), "cpu");
  EXPECT_STREQ(a4w4_backend_name(A4W4_BACKEND_CUDA), "cuda");
  EXPECT_STREQ(a4w4_backend_name(static_cast<a4w4_backend>(3)), "invalid");
}

TEST(ApiBasics, GemmOptionsDefaults) {
  a4w4_gemm_options o;
  std::memset(&o, 0xCD, sizeof o);
  a4w4_gemm_options_init(&o);
  EXPECT_EQ(o.struct_size, sizeof(a4w4_gemm_options));
  EXPECT_EQ(o.alpha, 1.0f);
  EXPECT_EQ(o.beta, 0.0f);
  EXPECT_EQ(o.split_k, 0);
  EXPECT_EQ(o.kernel, nullptr);
  EXPECT_EQ(o.math_mode, A4W4_MATH_EXACT);
  EXPECT_EQ(o.b_constant, 0);
  a4w4_gemm_options_init(nullptr);  // no crash
}

TEST(ApiBasics, WorkspaceSizeAndContextWorkspace) {
  size_t bytes = 0;
  // (M + N) * K rounded up to 128, then the factors (one float per 128-K tile and row, A's rows
  // rounded up to 128, B's to 384), summaries (one word per 8 tiles and row), block summaries (one
  // word per 128 rows) and chunk flags (one word per 128 rows and 8 tiles), each part
  // 256-aligned; for A also the high blocks' factors (one float per tile and row) and masks (a
  // byte per 128 rows and tile); for B its blocks' shifts (one word per tile and row).
  ASSERT_EQ(a4w4_gemm_workspace_size(256, 512, 1024, &bytes), A4W4_SUCCESS);
  EXPECT_EQ(bytes, 768u * 1024 + (256 + 768) * 8 * 4 + 768 * 4 + 2 * 256 + 2 * 256 + 256 * 8 * 4 +
                       256 + 768 * 8 * 4);
  ASSERT_EQ(a4w4_gemm_workspace_size(1, 1, 32, &bytes), A4W4_SUCCESS);
  EXPECT_EQ(bytes, (256u + 512 + 256 + 256 + 256) + 512 + 256 + (256 + 384 * 4 + 256 + 256 + 256) +
                       384 * 4);
  EXPECT_EQ(a4w4_gemm_workspace_size(4, 4, 48, &bytes), A4W4_ERROR_K_NOT_MULTIPLE_OF_32);
  EXPECT_EQ(a4w4_gemm_workspace_size(0, 4, 64, &bytes), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_gemm_workspace_size(4, 4, 64, nullptr), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_gemm_workspace_size(int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 40, &bytes),
            A4W4_ERROR_INVALID_ARGUMENT);

  a4w4_context ctx = nullptr;
  ASSERT_EQ(a4w4_context_create(&ctx), A4W4_SUCCESS);
  void* ptr = reinterpret_cast<void*>(0x1);
  a4w4_device device{};
  ASSERT_EQ(a4w4_context_get_workspace(ctx, &device, &ptr, &bytes), A4W4_SUCCESS);
  EXPECT_EQ(ptr, nullptr);
  EXPECT_EQ(bytes, 0u);
  std::vector<uint8_t> host(4096);
  // Host memory on the CPU device, a pointer without a size and the reverse: refused.
  EXPECT_EQ(a4w4_context_set_workspace(ctx, a4w4_cpu(), host.data(), host.size()),
            A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(a4w4_last_error_message()).find("CUDA device"), std::string::npos);
  EXPECT_EQ(a4w4_context_set_workspace(ctx, a4w4_cuda(0), host.data(), 0),
            A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_context_set_workspace(ctx, a4w4_cuda(0), nullptr, 64),
            A4W4_ERROR_INVALID_ARGUMENT);
  // Host memory named as CUDA memory: the build or the machine says why not.
  const a4w4_status status = a4w4_context_set_workspace(ctx, a4w4_cuda(0), host.data(), 4096);
  if (cuda_tensor_status() == A4W4_SUCCESS) {
    EXPECT_EQ(status, A4W4_ERROR_DEVICE_MISMATCH);
  } else {
    EXPECT_EQ(status, cuda_tensor_status());
  }
  EXPECT_EQ(a4w4_context_set_workspace(ctx, a4w4_cuda(0), nullptr, 0), A4W4_SUCCESS);
  EXPECT_EQ(a4w4_context_set_workspace(nullptr, a4w4_cuda(0), nullptr, 0),
            A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_context_get_workspace(nullptr, nullptr, nullptr, nullptr),
            A4W4_ERROR_INVALID_ARGUMENT);
  a4w4_context_destroy(ctx);
}

// ---- Probes, contexts, registry ------------------------------------------------------------

TEST(ApiBasics, BackendProbes) {
  EXPECT_EQ(a4w4_backend_compiled(A4W4_BACKEND_CPU), 1);
  EXPECT_EQ(a4w4_backend_available(A4W4_BACKEND_CPU), 1);
  EXPECT_EQ(a4w4_backend_compiled(static_cast<a4w4_backend>(3)), 0);
  EXPECT_EQ(a4w4_backend_available(static_cast<a4w4_backend>(3)), 0);
  const int cuda_compiled = a4w4_backend_compiled(A4W4_BACKEND_CUDA);
  const int cuda_available = a4w4_backend_available(A4W4_BACKEND_CUDA);
  EXPECT_TRUE(cuda_compiled == 0 || cuda_compiled == 1);
  EXPECT_LE(cuda_available, cuda_compiled) << "available but not compiled";

  int count = -1;
  ASSERT_EQ(a4w4_device_count(A4W4_BACKEND_CPU, &count), A4W4_SUCCESS);
  EXPECT_EQ(count, 1);
  count = -1;
  const a4w4_status cuda_count = a4w4_device_count(A4W4_BACKEND_CUDA, &count);
  if (!cuda_compiled) {
    EXPECT_EQ(cuda_count, A4W4_ERROR_BACKEND_NOT_COMPILED);
    EXPECT_EQ(count, 0);
  } else if (!cuda_available) {
    EXPECT_EQ(cuda_count, A4W4_ERROR_NO_DEVICE);
    EXPECT_EQ(count, 0);
  } else {
    EXPECT_EQ(cuda_count, A4W4_SUCCESS);
    EXPECT_GE(count, 1);
  }
  EXPECT_EQ(a4w4_device_count(A4W4_BACKEND_CPU, nullptr), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_device_count(A4W4_BACKEND_AUTO, &count), A4W4_ERROR_INVALID_ARGUMENT);
  std::printf("CUDA backend: compiled %d, available %d\n", cuda_compiled, cuda_available);
}

TEST(ApiBasics, DeviceDescribe) {
  char buf[256];
  ASSERT_EQ(a4w4_device_describe(a4w4_cpu(), buf, sizeof buf), A4W4_SUCCESS);
  EXPECT_GT(std::strlen(buf), 0u);
  char small[4] = {'x', 'x', 'x', 'x'};
  ASSERT_EQ(a4w4_device_describe(a4w4_cpu(), small, sizeof small), A4W4_SUCCESS);
  EXPECT_EQ(std::strlen(small), 3u) << "truncated and NUL-terminated";
  char one = 'x';
  ASSERT_EQ(a4w4_device_describe(a4w4_cpu(), &one, 1), A4W4_SUCCESS);
  EXPECT_EQ(one, '\0');
  EXPECT_EQ(a4w4_device_describe(a4w4_cpu(), nullptr, 10), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_device_describe(a4w4_cpu(), buf, 0), A4W4_ERROR_INVALID_ARGUMENT);
  a4w4_device cpu1 = a4w4_cpu();
  cpu1.ordinal = 1;
  EXPECT_EQ(a4w4_device_describe(cpu1, buf, sizeof buf), A4W4_ERROR_INVALID_ARGUMENT);
  const a4w4_status cuda = cuda_tensor_status();
  if (cuda != A4W4_SUCCESS) {
    EXPECT_EQ(a4w4_device_describe(a4w4_cuda(0), buf, sizeof buf), cuda);
  }
}

TEST(ApiBasics, ContextLifecycleAndSettings) {
  EXPECT_EQ(a4w4_context_create(nullptr), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_context_destroy(nullptr), A4W4_SUCCESS);
  a4w4_context ctx = nullptr;
  ASSERT_EQ(a4w4_context_create(&ctx), A4W4_SUCCESS);
  ASSERT_NE(ctx, nullptr);
  a4w4_backend backend = A4W4_BACKEND_CUDA;
  ASSERT_EQ(a4w4_context_get_backend(ctx, &backend), A4W4_SUCCESS);
  EXPECT_EQ(backend, A4W4_BACKEND_AUTO);
  ASSERT_EQ(a4w4_context_set_backend(ctx, A4W4_BACKEND_CPU), A4W4_SUCCESS);
  ASSERT_EQ(a4w4_context_get_backend(ctx, &backend), A4W4_SUCCESS);
  EXPECT_EQ(backend, A4W4_BACKEND_CPU);
  EXPECT_EQ(a4w4_context_set_backend(ctx, static_cast<a4w4_backend>(3)),
            A4W4_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(a4w4_context_get_backend(ctx, &backend), A4W4_SUCCESS);
  EXPECT_EQ(backend, A4W4_BACKEND_CPU) << "a failed set changed the backend";
  EXPECT_EQ(
      a4w4_context_set_backend(ctx, A4W4_BACKEND_CUDA),
      a4w4_backend_compiled(A4W4_BACKEND_CUDA) ? A4W4_SUCCESS : A4W4_ERROR_BACKEND_NOT_COMPILED);
  ASSERT_EQ(a4w4_context_set_backend(ctx, A4W4_BACKEND_AUTO), A4W4_SUCCESS);
  EXPECT_EQ(a4w4_context_get_backend(ctx, nullptr), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_context_get_backend(nullptr, &backend), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_context_set_backend(nullptr, A4W4_BACKEND_CPU), A4W4_ERROR_INVALID_ARGUMENT);

  int threads = -1;
  ASSERT_EQ(a4w4_context_get_num_threads(ctx, &threads), A4W4_SUCCESS);
  EXPECT_EQ(threads, 0);
  ASSERT_EQ(a4w4_context_set_num_threads(ctx, 3), A4W4_SUCCESS);
  ASSERT_EQ(a4w4_context_get_num_threads(ctx, &threads), A4W4_SUCCESS);
  EXPECT_EQ(threads, 3);
  EXPECT_EQ(a4w4_context_set_num_threads(ctx, -1), A4W4_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(a4w4_context_get_num_threads(ctx, &threads), A4W4_SUCCESS);
  EXPECT_EQ(threads, 3);
  EXPECT_EQ(a4w4_context_get_num_threads(ctx, nullptr), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_context_set_num_threads(nullptr, 1), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_context_destroy(ctx), A4W4_SUCCESS);
}

TEST(ApiBasics, KernelRegistry) {
  const int count = a4w4_kernel_count();
  ASSERT_GE(count, 1);
  bool reference = false;
  std::set<std::string> names;
  for (int i = 0; i < count; ++i) {
    const char* name = nullptr;
    a4w4_backend backend = A4W4_BACKEND_AUTO;
    ASSERT_EQ(a4w4_kernel_info(i, &name, &backend), A4W4_SUCCESS);
    ASSERT_NE(name, nullptr);
    EXPECT_TRUE(names.insert(name).second) << "duplicate kernel name " << name;
    if (std::string(name) == "cpu.reference") {
      reference = true;
      EXPECT_EQ(backend, A4W4_BACKEND_CPU);
    }
  }
  EXPECT_TRUE(reference) << "cpu.reference is not registered";
  const char* name = nullptr;
  EXPECT_EQ(a4w4_kernel_info(-1, &name, nullptr), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_kernel_info(count, &name, nullptr), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(name, nullptr);
}

// Several std::threads share one context and run GEMMs at once (while another thread keeps
// changing the context's thread count); every result is checked against the reference.
TEST(ApiConcurrency, ThreadsShareOneContext) {
  a4w4_context ctx = nullptr;
  ASSERT_EQ(a4w4_context_create(&ctx), A4W4_SUCCESS);
  constexpr int kWorkers = 4, kRounds = 3;
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::thread tuner([&] {
    int n = 0;
    while (!done.load()) {
      if (a4w4_context_set_num_threads(ctx, 1 + (n++ % 3)) != A4W4_SUCCESS) ++failures;
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> workers;
  std::vector<std::string> reports(kWorkers);
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      for (int round = 0; round < kRounds; ++round) {
        std::mt19937_64 rng(0xC0C0 + static_cast<uint64_t>(w * 100 + round));
        const int64_t m = 20 + w, n = 40 + 7 * round, k = 128;
        const MxOperand a = random_mx(rng, m, k, {});
        const MxOperand b = random_mx(rng, n, k, {});
        HostTensor d = HostTensor::matrix(w % 2 ? A4W4_DTYPE_BF16 : A4W4_DTYPE_F32, m, n);
        HostTensor bias = HostTensor::vector(A4W4_DTYPE_F32, n);
        fill_random_floats(rng, bias, -2, 2);
        const a4w4_tensor ad = a.values.desc(), asd = a.scales.desc(), bd = b.values.desc(),
                          bsd = b.scales.desc(), dd = d.desc(), biasd = bias.desc();
        a4w4_gemm_options options;
        a4w4_gemm_options_init(&options);
        options.split_k = round;
        if (a4w4_gemm(ctx, &ad, &asd, &bd, &bsd, nullptr, &biasd, &dd, &options, nullptr) !=
            A4W4_SUCCESS) {
          reports[w] += std::string("gemm failed: ") + a4w4_last_error_message() + "\n";
          ++failures;
          continue;
        }
        const ::testing::AssertionResult ok =
            check_gemm(reference_gemm(a, b, 1.0f, 0.0f, nullptr, &bias), d, 0x1p-53);
        if (!ok) {
          reports[w] += ok.message();
          ++failures;
        }
      }
    });
  }
  for (auto& t : workers) t.join();
  done = true;
  tuner.join();
  EXPECT_EQ(failures.load(), 0);
  for (const auto& r : reports) EXPECT_EQ(r, "");
  a4w4_context_destroy(ctx);
}

// ---- The header-only C++ wrapper (a4w4.hpp) -----------------------------------------------

TEST(CppWrapper, ContextGemmAndErrors) {
  a4w4::Context ctx;
  ASSERT_NE(ctx.get(), nullptr);
  ctx.set_num_threads(2);
  std::mt19937_64 rng(0xCAFE);
  HostTensor x = HostTensor::matrix(A4W4_DTYPE_F32, 6, 64);
  HostTensor w = HostTensor::matrix(A4W4_DTYPE_F32, 7, 64);
  fill_random_floats(rng, x, -3, 3);
  fill_random_floats(rng, w, -3, 3);
  MxOperand a{HostTensor::matrix(A4W4_DTYPE_E2M1, 6, 64),
              HostTensor::matrix(A4W4_DTYPE_E8M0, 6, 2)};
  MxOperand b{HostTensor::matrix(A4W4_DTYPE_E2M1, 7, 64),
              HostTensor::matrix(A4W4_DTYPE_E8M0, 7, 2)};
  ctx.quantize(x.desc(), a.values.desc(), a.scales.desc());  // RCEIL by default
  ctx.quantize(w.desc(), b.values.desc(), b.scales.desc(), A4W4_SCALE_FLOOR);
  for (int64_t r = 0; r < 6; ++r) {  // the default mode is RCEIL
    double values[32];
    for (int i = 0; i < 32; ++i) values[i] = x.get(r, i);
    EXPECT_EQ(a.scales.byte(r, 0), reference_quantize_block(values, A4W4_SCALE_RCEIL).scale);
  }
  HostTensor d = HostTensor::matrix(A4W4_DTYPE_F32, 6, 7);
  HostTensor bias = HostTensor::vector(A4W4_DTYPE_F32, 7);
  fill_random_floats(rng, bias, -1, 1);
  a4w4::GemmOptions options;
  options.alpha = 0.5f;
  options.split_k = 2;
  options.kernel = "cpu.reference";
  const a4w4_tensor biasd = bias.desc();
  ctx.gemm(a.values.desc(), a.scales.desc(), b.values.desc(), b.scales.desc(), d.desc(), nullptr,
           &biasd, options);
  EXPECT_TRUE(check_gemm(reference_gemm(a, b, 0.5f, 0.0f, nullptr, &bias), d, 0x1p-53));

  // try_ calls return the status with its message; the throwing ones throw a4w4::Error.
  options.kernel = "nope";
  const a4w4::Status status = ctx.try_gemm(a.values.desc(), a.scales.desc(), b.values.desc(),
                                           b.scales.desc(), d.desc(), nullptr, nullptr, options);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), A4W4_ERROR_KERNEL_NOT_FOUND);
  EXPECT_TRUE(mentions(status.message(), "nope")) << status.message();
  EXPECT_TRUE(mentions(status.to_string(), "A4W4_ERROR_KERNEL_NOT_FOUND")) << status.to_string();
  try {
    ctx.gemm(a.values.desc(), a.scales.desc(), b.values.desc(), b.scales.desc(), d.desc(), nullptr,
             nullptr, options);
    ADD_FAILURE() << "no exception";
  } catch (const a4w4::Error& e) {
    EXPECT_EQ(e.code(), A4W4_ERROR_KERNEL_NOT_FOUND);
    EXPECT_TRUE(mentions(e.what(), "nope")) << e.what();
  }
  EXPECT_THROW(ctx.set_num_threads(-1), a4w4::Error);
  EXPECT_TRUE(a4w4::Status().ok());

  // Moving a context transfers it.
  a4w4::Context moved(std::move(ctx));
  EXPECT_EQ(ctx.get(), nullptr);
  EXPECT_NE(moved.get(), nullptr);
  HostTensor y = HostTensor::matrix(A4W4_DTYPE_BF16, 6, 64);
  EXPECT_TRUE(moved.try_dequantize(a.values.desc(), a.scales.desc(), y.desc()).ok());
}

}  // namespace
}  // namespace a4w4_test
