// The kernel registry and tuned configurations through the public API: kernel metadata,
// applicability with reasons, a4w4_gemm_choose, loading tuned files (also from the environment)
// with their error code and warnings, results that follow the choice, split-K with one meaning
// for every kernel, and contexts shared by threads while their configuration changes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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

namespace fs = std::filesystem;

std::string cpu_key() {
  char name[64];
  int sm = 0;
  EXPECT_EQ(a4w4_device_tuning_key(a4w4_cpu(), name, sizeof name, &sm), A4W4_SUCCESS);
  return std::string(name) + "," + std::to_string(sm);
}

class Tuning : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(a4w4_context_create(&ctx_), A4W4_SUCCESS);
    dir_ = fs::temp_directory_path() /
           ("a4w4_tuning_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    std::mt19937_64 rng(7);
    a_ = random_mx(rng, M, K, {});
    b_ = random_mx(rng, N, K, {});
  }
  void TearDown() override {
    a4w4_context_destroy(ctx_);
    fs::remove_all(dir_);
  }

  std::string file(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  a4w4_status choose(a4w4_gemm_choice* choice, const char* kernel = nullptr, int split = 0) {
    a4w4_gemm_options options;
    a4w4_gemm_options_init(&options);
    options.kernel = kernel;
    options.split_k = split;
    choice->struct_size = sizeof *choice;
    const a4w4_tensor a = a_.values.desc(), as = a_.scales.desc(), b = b_.values.desc(),
                      bs = b_.scales.desc(), d = d_.desc();
    return a4w4_gemm_choose(ctx_, &a, &as, &b, &bs, nullptr, nullptr, &d, &options, choice);
  }

  a4w4_status applicable(const char* kernel, int split = 0) {
    a4w4_gemm_options options;
    a4w4_gemm_options_init(&options);
    options.split_k = split;
    const a4w4_tensor a = a_.values.desc(), as = a_.scales.desc(), b = b_.values.desc(),
                      bs = b_.scales.desc(), d = d_.desc();
    return a4w4_kernel_applicable(ctx_, kernel, &a, &as, &b, &bs, nullptr, nullptr, &d, &options);
  }

  // D as a byte image after a GEMM with the given options (and the context's configuration).
  std::vector<uint8_t> gemm(const char* kernel = nullptr, int split = 0) {
    a4w4_gemm_options options;
    a4w4_gemm_options_init(&options);
    options.kernel = kernel;
    options.split_k = split;
    const a4w4_tensor a = a_.values.desc(), as = a_.scales.desc(), b = b_.values.desc(),
                      bs = b_.scales.desc(), d = d_.desc();
    EXPECT_EQ(a4w4_gemm(ctx_, &a, &as, &b, &bs, nullptr, nullptr, &d, &options, nullptr),
              A4W4_SUCCESS)
        << a4w4_last_error_message();
    return d_.bytes();
  }

  std::vector<std::string> warnings() {
    int count = 0;
    EXPECT_EQ(a4w4_context_tuned_count(ctx_, nullptr, &count), A4W4_SUCCESS);
    std::vector<std::string> out;
    for (int i = 0; i < count; ++i) {
      char text[512];
      EXPECT_EQ(a4w4_context_tuned_warning(ctx_, i, text, sizeof text), A4W4_SUCCESS);
      out.emplace_back(text);
    }
    return out;
  }

  static constexpr int64_t M = 6, N = 40, K = 320;
  const std::string header_ = "device,sm_count,M,N,K,kernel,split_k,us,tflops\n";
  a4w4_context ctx_ = nullptr;
  fs::path dir_;
  MxOperand a_, b_;
  HostTensor d_ = HostTensor::matrix(A4W4_DTYPE_F32, M, N);
};

TEST_F(Tuning, KernelMetadata) {
  std::set<std::string> names;
  for (int i = 0; i < a4w4_kernel_count(); ++i) {
    a4w4_kernel_properties p{};
    p.struct_size = sizeof p;
    ASSERT_EQ(a4w4_kernel_describe(i, &p), A4W4_SUCCESS);
    const char* name = nullptr;
    a4w4_backend backend{};
    ASSERT_EQ(a4w4_kernel_info(i, &name, &backend), A4W4_SUCCESS);
    EXPECT_STREQ(p.name, name);
    EXPECT_EQ(p.backend, backend);
    EXPECT_STRNE(a4w4_kernel_path_name(p.path), "invalid");
    EXPECT_EQ(p.backend == A4W4_BACKEND_CPU, p.path == A4W4_KERNEL_PATH_CPU) << name;
    EXPECT_GE(p.min_m, 1);
    EXPECT_TRUE(p.max_m == 0 || p.max_m >= p.min_m);
    EXPECT_GE(p.max_split_k, 0);
    ASSERT_NE(p.constraints, nullptr);
    int index = -1;
    ASSERT_EQ(a4w4_kernel_find(name, &index), A4W4_SUCCESS);
    EXPECT_EQ(index, i);
    names.insert(name);
  }
  EXPECT_TRUE(names.count("cpu.reference"));
  int index = 7;
  EXPECT_EQ(a4w4_kernel_find("cpu.nope", &index), A4W4_ERROR_KERNEL_NOT_FOUND);
  EXPECT_EQ(index, 7);
  a4w4_kernel_properties small{};
  small.struct_size = 8;
  EXPECT_EQ(a4w4_kernel_describe(0, &small), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(small.name, nullptr);
  a4w4_kernel_properties p{};
  p.struct_size = sizeof p;
  EXPECT_EQ(a4w4_kernel_describe(a4w4_kernel_count(), &p), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_kernel_describe(0, nullptr), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(a4w4_kernel_path_name(A4W4_KERNEL_PATH_FP8), "fp8");
  EXPECT_STREQ(a4w4_kernel_path_name(A4W4_KERNEL_PATH_GENERIC), "generic");
}

TEST_F(Tuning, ApplicabilityAndItsReasons) {
  EXPECT_EQ(applicable("cpu.reference"), A4W4_SUCCESS);
  EXPECT_EQ(applicable("cpu.gemm_scalar", 3), A4W4_SUCCESS);
  EXPECT_EQ(applicable("cpu.nope"), A4W4_ERROR_KERNEL_NOT_FOUND);
  EXPECT_NE(std::string(a4w4_last_error_message()).find("'cpu.nope'"), std::string::npos);
  EXPECT_EQ(applicable("cpu.gemv_avx512vnni"), A4W4_ERROR_KERNEL_NOT_APPLICABLE);  // M = 6 > 4
  EXPECT_NE(std::string(a4w4_last_error_message()).find("M = 6"), std::string::npos)
      << a4w4_last_error_message();
  if (a4w4_backend_compiled(A4W4_BACKEND_CUDA)) {
    EXPECT_EQ(applicable("cuda.generic"), A4W4_ERROR_KERNEL_NOT_APPLICABLE);
    EXPECT_NE(std::string(a4w4_last_error_message()).find("cuda kernel"), std::string::npos);
  }
  EXPECT_EQ(applicable("cpu.reference", K / 32 + 1), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(applicable(nullptr), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(applicable(""), A4W4_ERROR_INVALID_ARGUMENT);
}

TEST_F(Tuning, ExplicitNamesAreHonouredOrRefused) {
  a4w4_gemm_choice c{};
  ASSERT_EQ(choose(&c), A4W4_SUCCESS);
  EXPECT_EQ(c.source, A4W4_CHOICE_HEURISTIC);
  EXPECT_EQ(c.split_k, 0);
  ASSERT_EQ(choose(&c, "cpu.reference", 4), A4W4_SUCCESS);
  EXPECT_EQ(c.source, A4W4_CHOICE_EXPLICIT);
  EXPECT_STREQ(c.kernel, "cpu.reference");
  EXPECT_EQ(c.split_k, 4);
  a4w4_gemm_choice untouched{};
  EXPECT_EQ(choose(&untouched, "cpu.nope"), A4W4_ERROR_KERNEL_NOT_FOUND);
  EXPECT_EQ(untouched.kernel, nullptr);
  EXPECT_EQ(choose(&untouched, "cpu.gemv_avx512vnni"), A4W4_ERROR_KERNEL_NOT_APPLICABLE);
  EXPECT_EQ(untouched.kernel, nullptr);
  a4w4_gemm_choice small{};
  EXPECT_EQ(choose(&small), A4W4_SUCCESS);  // choose() sets struct_size itself
  small.struct_size = 4;
  const a4w4_tensor a = a_.values.desc(), as = a_.scales.desc(), b = b_.values.desc(),
                    bs = b_.scales.desc(), d = d_.desc();
  EXPECT_EQ(a4w4_gemm_choose(ctx_, &a, &as, &b, &bs, nullptr, nullptr, &d, nullptr, &small),
            A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_gemm_choose(ctx_, &a, &as, &b, &bs, nullptr, nullptr, &d, nullptr, nullptr),
            A4W4_ERROR_INVALID_ARGUMENT);
}

// split_k = n means the same n partitions everywhere: every kernel gives the bytes cpu.reference
// gives with that split, and a tuned entry's split is passed on as it is.
TEST_F(Tuning, SplitKHasOneMeaningAcrossKernels) {
  for (int split : {1, 2, 3, 7, 10}) {
    const std::vector<uint8_t> reference = gemm("cpu.reference", split);
    for (int i = 0; i < a4w4_kernel_count(); ++i) {
      const char* name = nullptr;
      a4w4_backend backend{};
      ASSERT_EQ(a4w4_kernel_info(i, &name, &backend), A4W4_SUCCESS);
      if (backend != A4W4_BACKEND_CPU || applicable(name, split) != A4W4_SUCCESS) continue;
      EXPECT_EQ(gemm(name, split), reference) << name << " split " << split;
    }
    const std::string path = file("split.csv", header_ + cpu_key() + ",6,40,320,cpu.gemm_scalar," +
                                                   std::to_string(split) + ",1,1\n");
    ASSERT_EQ(a4w4_context_load_tuned(ctx_, path.c_str()), A4W4_SUCCESS);
    a4w4_gemm_choice c{};
    ASSERT_EQ(choose(&c), A4W4_SUCCESS);
    EXPECT_EQ(c.source, A4W4_CHOICE_TUNED);
    EXPECT_EQ(c.split_k, split);
    EXPECT_EQ(gemm(), reference) << "tuned split " << split;
  }
}

TEST_F(Tuning, LoadLookupAndClear) {
  const std::string path =
      file("t.csv", "# test\n" + header_ + cpu_key() + ",8,40,320,cpu.reference,3,1,1\n" +
                        "cpu,99999,6,40,320,cpu.gemm_scalar,0,1,1\n");
  ASSERT_EQ(a4w4_context_load_tuned(ctx_, path.c_str()), A4W4_SUCCESS);
  int entries = -1, count = -1;
  ASSERT_EQ(a4w4_context_tuned_count(ctx_, &entries, &count), A4W4_SUCCESS);
  EXPECT_EQ(entries, 1);  // the other "cpu" has another thread count: a foreign device
  EXPECT_EQ(count, 0);
  a4w4_gemm_choice c{};
  ASSERT_EQ(choose(&c), A4W4_SUCCESS);  // M = 6: the bucket at M = 8
  EXPECT_EQ(c.source, A4W4_CHOICE_TUNED);
  EXPECT_STREQ(c.kernel, "cpu.reference");
  EXPECT_EQ(c.split_k, 3);
  EXPECT_EQ(c.tuned_m, 8);
  EXPECT_EQ(c.tuned_line, 3);
  ASSERT_EQ(choose(&c, "cpu.gemm_scalar"), A4W4_SUCCESS);  // the caller's name wins
  EXPECT_EQ(c.source, A4W4_CHOICE_EXPLICIT);
  EXPECT_STREQ(c.kernel, "cpu.gemm_scalar");

  // A malformed file fails with the config code and file:line, and changes nothing.
  const std::string bad = file("bad.csv", header_ + cpu_key() + ",8,40,320,cpu.reference,3,1\n");
  EXPECT_EQ(a4w4_context_load_tuned(ctx_, bad.c_str()), A4W4_ERROR_CONFIG);
  EXPECT_NE(std::string(a4w4_last_error_message()).find(bad + ":2: 8 fields"), std::string::npos)
      << a4w4_last_error_message();
  EXPECT_EQ(a4w4_context_load_tuned(ctx_, (dir_ / "missing.csv").c_str()), A4W4_ERROR_CONFIG);
  EXPECT_NE(std::string(a4w4_last_error_message()).find("missing.csv"), std::string::npos);
  ASSERT_EQ(choose(&c), A4W4_SUCCESS);
  EXPECT_EQ(c.source, A4W4_CHOICE_TUNED);

  ASSERT_EQ(a4w4_context_clear_tuned(ctx_), A4W4_SUCCESS);
  ASSERT_EQ(choose(&c), A4W4_SUCCESS);
  EXPECT_EQ(c.source, A4W4_CHOICE_HEURISTIC);
  EXPECT_EQ(a4w4_context_load_tuned(ctx_, nullptr), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_context_load_tuned(nullptr, path.c_str()), A4W4_ERROR_INVALID_ARGUMENT);
  char text[8];
  EXPECT_EQ(a4w4_context_tuned_warning(ctx_, 0, text, sizeof text), A4W4_ERROR_INVALID_ARGUMENT);
}

TEST_F(Tuning, EntriesTunedWithBsLayoutServeThatLayout) {
  // The same shape tuned on a plain and on a prepared B (column `weights`): a4w4_gemm_choose and
  // a4w4_gemm take the entry of the layout B comes in.
  const std::string path =
      file("w.csv", header_.substr(0, header_.size() - 1) + ",label,workspace,weights\n" +
                        cpu_key() + ",8,40,320,cpu.reference,2,1,1,-,0,plain\n" + cpu_key() +
                        ",8,40,320,cpu.reference,5,1,1,-,0,prepared\n");
  ASSERT_EQ(a4w4_context_load_tuned(ctx_, path.c_str()), A4W4_SUCCESS);
  a4w4_gemm_choice c{};
  ASSERT_EQ(choose(&c), A4W4_SUCCESS);
  EXPECT_EQ(c.source, A4W4_CHOICE_TUNED);
  EXPECT_EQ(c.split_k, 2);

  size_t weight_bytes = 0, scale_bytes = 0;
  ASSERT_EQ(a4w4_prepared_weight_size(N, K, A4W4_LAYOUT_PREPARED_V2, &weight_bytes, &scale_bytes),
            A4W4_SUCCESS);
  std::vector<uint8_t> weights(weight_bytes), scales(scale_bytes);
  a4w4_tensor pw = a4w4_tensor_2d(weights.data(), A4W4_DTYPE_E2M1, N, K, K, a4w4_cpu());
  a4w4_tensor ps = a4w4_tensor_2d(scales.data(), A4W4_DTYPE_E8M0, N, K / 32, K / 32, a4w4_cpu());
  pw.layout = ps.layout = A4W4_LAYOUT_PREPARED_V2;
  const a4w4_tensor b = b_.values.desc(), bs = b_.scales.desc();
  ASSERT_EQ(a4w4_prepare_weight(ctx_, &b, &bs, &pw, &ps, nullptr), A4W4_SUCCESS)
      << a4w4_last_error_message();
  a4w4_gemm_options options;
  a4w4_gemm_options_init(&options);
  c.struct_size = sizeof c;
  const a4w4_tensor a = a_.values.desc(), as = a_.scales.desc(), d = d_.desc();
  ASSERT_EQ(a4w4_gemm_choose(ctx_, &a, &as, &pw, &ps, nullptr, nullptr, &d, &options, &c),
            A4W4_SUCCESS)
      << a4w4_last_error_message();
  EXPECT_EQ(c.source, A4W4_CHOICE_TUNED);
  EXPECT_STREQ(c.kernel, "cpu.reference");
  EXPECT_EQ(c.split_k, 5);
  EXPECT_EQ(c.tuned_line, 3);
  // And the GEMM itself runs it: the result equals the plain B's (the same values).
  const std::vector<uint8_t> plain = gemm();
  ASSERT_EQ(a4w4_gemm(ctx_, &a, &as, &pw, &ps, nullptr, nullptr, &d, &options, nullptr),
            A4W4_SUCCESS)
      << a4w4_last_error_message();
  EXPECT_EQ(d_.bytes(), plain);
}

TEST_F(Tuning, StaleEntriesAreSkippedWithAWarningAndTheHeuristicServes) {
  const std::vector<uint8_t> heuristic = gemm();
  const std::string path =
      file("stale.csv", header_ + cpu_key() + ",6,40,320,cpu.renamed_kernel,0,1,1\n" + cpu_key() +
                            ",6,40,320,cpu.reference,1,2,1\n");
  ASSERT_EQ(a4w4_context_load_tuned(ctx_, path.c_str()), A4W4_SUCCESS);
  const std::vector<std::string> w = warnings();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find(path + ":2: kernel 'cpu.renamed_kernel' is not registered"),
            std::string::npos)
      << w[0];
  EXPECT_NE(w[1].find("duplicate"), std::string::npos) << w[1];
  a4w4_gemm_choice c{};
  ASSERT_EQ(choose(&c), A4W4_SUCCESS);
  EXPECT_EQ(c.source, A4W4_CHOICE_TUNED);  // the duplicate that names a real kernel is kept
  EXPECT_STREQ(c.kernel, "cpu.reference");

  const std::string only_stale =
      file("only_stale.csv", header_ + cpu_key() + ",6,40,320,cpu.renamed_kernel,0,1,1\n");
  ASSERT_EQ(a4w4_context_load_tuned(ctx_, only_stale.c_str()), A4W4_SUCCESS);
  ASSERT_EQ(choose(&c), A4W4_SUCCESS);
  EXPECT_EQ(c.source, A4W4_CHOICE_HEURISTIC);
  EXPECT_EQ(gemm(), heuristic);
  EXPECT_EQ(warnings().size(), 1u);
}

TEST_F(Tuning, EnvironmentVariableIsReadAtContextCreation) {
  const std::string good = file("env.csv", header_ + cpu_key() + ",6,40,320,cpu.reference,2,1,1\n");
  const std::string bad = file("env_bad.csv", header_ + "cpu,8,6,40,320\n");
  ASSERT_EQ(setenv(A4W4_TUNED_CONFIG_ENV, good.c_str(), 1), 0);
  a4w4_context ctx = nullptr;
  ASSERT_EQ(a4w4_context_create(&ctx), A4W4_SUCCESS);
  int entries = 0;
  EXPECT_EQ(a4w4_context_tuned_count(ctx, &entries, nullptr), A4W4_SUCCESS);
  EXPECT_EQ(entries, 1);
  a4w4_context_destroy(ctx);

  ASSERT_EQ(setenv(A4W4_TUNED_CONFIG_ENV, bad.c_str(), 1), 0);
  ctx = nullptr;
  EXPECT_EQ(a4w4_context_create(&ctx), A4W4_ERROR_CONFIG);
  EXPECT_EQ(ctx, nullptr);
  const std::string message = a4w4_last_error_message();
  EXPECT_NE(message.find(A4W4_TUNED_CONFIG_ENV), std::string::npos) << message;
  EXPECT_NE(message.find(bad + ":2:"), std::string::npos) << message;

  ASSERT_EQ(setenv(A4W4_TUNED_CONFIG_ENV, "", 1), 0);  // empty: none
  ASSERT_EQ(a4w4_context_create(&ctx), A4W4_SUCCESS);
  a4w4_context_destroy(ctx);
  ASSERT_EQ(unsetenv(A4W4_TUNED_CONFIG_ENV), 0);
}

TEST_F(Tuning, DeviceTuningKeys) {
  char name[64];
  int sm = 0;
  ASSERT_EQ(a4w4_device_tuning_key(a4w4_cpu(), name, sizeof name, &sm), A4W4_SUCCESS);
  EXPECT_STREQ(name, "cpu");
  EXPECT_EQ(sm, static_cast<int>(std::thread::hardware_concurrency()));
  char tiny[2];
  ASSERT_EQ(a4w4_device_tuning_key(a4w4_cpu(), tiny, sizeof tiny, &sm), A4W4_SUCCESS);
  EXPECT_STREQ(tiny, "c");
  const a4w4_status cuda = a4w4_device_tuning_key(a4w4_cuda(0), name, sizeof name, &sm);
  if (!a4w4_backend_compiled(A4W4_BACKEND_CUDA))
    EXPECT_EQ(cuda, A4W4_ERROR_BACKEND_NOT_COMPILED);
  else if (!a4w4_backend_available(A4W4_BACKEND_CUDA))
    EXPECT_EQ(cuda, A4W4_ERROR_NO_DEVICE);
  else
    EXPECT_EQ(cuda, A4W4_SUCCESS);
  EXPECT_EQ(a4w4_device_tuning_key(a4w4_cpu(), nullptr, 4, &sm), A4W4_ERROR_INVALID_ARGUMENT);
}

// GEMMs from several threads while another keeps loading and clearing the configuration: every
// result is one of the two a GEMM may give (tuned split 3, or the heuristic).
TEST_F(Tuning, ThreadsShareAContextWhileItsConfigurationChanges) {
  const std::string path = file("mt.csv", header_ + cpu_key() + ",6,40,320,cpu.reference,3,1,1\n");
  const std::vector<uint8_t> tuned = gemm("cpu.reference", 3), heuristic = gemm();
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::thread loader([&] {
    while (!done) {
      if (a4w4_context_load_tuned(ctx_, path.c_str()) != A4W4_SUCCESS) ++failures;
      if (a4w4_context_clear_tuned(ctx_) != A4W4_SUCCESS) ++failures;
    }
  });
  std::vector<std::thread> workers;
  for (int w = 0; w < 3; ++w)
    workers.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        HostTensor d = HostTensor::matrix(A4W4_DTYPE_F32, M, N);
        const a4w4_tensor a = a_.values.desc(), as = a_.scales.desc(), b = b_.values.desc(),
                          bs = b_.scales.desc(), dd = d.desc();
        if (a4w4_gemm(ctx_, &a, &as, &b, &bs, nullptr, nullptr, &dd, nullptr, nullptr) !=
                A4W4_SUCCESS ||
            (d.bytes() != tuned && d.bytes() != heuristic))
          ++failures;
      }
    });
  for (auto& t : workers) t.join();
  done = true;
  loader.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(Tuning, CppWrapper) {
  a4w4::Context ctx;
  const std::string path = file("cpp.csv", header_ + cpu_key() + ",6,40,320,cpu.nope,0,1,1\n");
  ctx.load_tuned(path);
  const std::vector<std::string> w = ctx.tuned_warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("cpu.nope"), std::string::npos);
  EXPECT_THROW(ctx.load_tuned((dir_ / "missing.csv").string()), a4w4::Error);
  const a4w4::Status status = ctx.try_load_tuned((dir_ / "missing.csv").string());
  EXPECT_EQ(status.code(), A4W4_ERROR_CONFIG);
  ctx.clear_tuned();
  EXPECT_TRUE(ctx.tuned_warnings().empty());
  const std::vector<a4w4::KernelProperties> kernels = a4w4::kernels();
  EXPECT_EQ(static_cast<int>(kernels.size()), a4w4_kernel_count());
  const a4w4_gemm_choice c =
      ctx.choose(a_.values.desc(), a_.scales.desc(), b_.values.desc(), b_.scales.desc(), d_.desc());
  EXPECT_EQ(c.source, A4W4_CHOICE_HEURISTIC);
  a4w4::GemmOptions options;
  options.kernel = "cpu.gemv_avx512vnni";
  const a4w4::Status why =
      ctx.try_applicable("cpu.gemv_avx512vnni", a_.values.desc(), a_.scales.desc(),
                         b_.values.desc(), b_.scales.desc(), d_.desc());
  EXPECT_EQ(why.code(), A4W4_ERROR_KERNEL_NOT_APPLICABLE);
  EXPECT_TRUE(ctx.try_applicable("cpu.reference", a_.values.desc(), a_.scales.desc(),
                                 b_.values.desc(), b_.scales.desc(), d_.desc())
                  .ok());
}

}  // namespace
}  // namespace a4w4_test
