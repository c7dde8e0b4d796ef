// CPU benchmark (Google Benchmark): in one process and on the same data, the fast CPU kernels
// (default dispatch), cpu.reference, and OpenBLAS sgemm/sgemv on the dequantized fp32 matrices
// (a baseline only), plus the floors the memory-bound figures are measured against.
//
//   GEMM 2048x2048x2048 and 512x8192x8192 (D fp32): fast, reference, OpenBLAS sgemm
//   GEMV 1x8192x8192: fast, reference, OpenBLAS sgemv, and a streaming read of a buffer as large
//     as the bytes the GEMV must read (FP4 B + its scales): the bandwidth floor
//   quantize 4096x4096 fp32 (RCEIL): fast on 1 thread (GB/s of input per core) and on all
//     threads, reference
//
// Operands: normally distributed fp32 values quantized by a4w4_quantize (RCEIL), so the scales are
// those of real data; the kernels' speed does not depend on the values. Threads: the context's
// default (one per hardware thread) and openblas_set_num_threads with the same count.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "a4w4/a4w4.h"

extern "C" char* openblas_get_config(void);
extern "C" char* openblas_get_corename(void);
extern "C" void openblas_set_num_threads(int num_threads);

namespace {

void check(a4w4_status status, const char* what) {
  if (status != A4W4_SUCCESS) {
    std::fprintf(stderr, "%s failed: %s\n", what, a4w4_last_error_message());
    std::exit(1);
  }
}

std::map<int, a4w4_context>& contexts() {
  static std::map<int, a4w4_context> by_threads;
  return by_threads;
}

a4w4_context context(int threads) {
  auto [it, inserted] = contexts().try_emplace(threads, nullptr);
  if (inserted) {
    check(a4w4_context_create(&it->second), "a4w4_context_create");
    check(a4w4_context_set_num_threads(it->second, threads), "a4w4_context_set_num_threads");
  }
  return it->second;
}

int hardware_threads() {
  return omp_get_num_procs();
}

std::vector<float> random_floats(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(static_cast<size_t>(count));
  for (float& v : out) v = normal(rng);
  return out;
}

// An MX operand [rows, k] quantized from normal fp32 values, and its dequantized fp32 copy.
struct MxMatrix {
  int64_t rows = 0, k = 0;
  std::vector<uint8_t> values, scales;
  std::vector<float> dequantized;
  a4w4_tensor values_desc() const {
    return a4w4_tensor_2d(const_cast<uint8_t*>(values.data()), A4W4_DTYPE_E2M1, rows, k, k,
                          a4w4_cpu());
  }
  a4w4_tensor scales_desc() const {
    return a4w4_tensor_2d(const_cast<uint8_t*>(scales.data()), A4W4_DTYPE_E8M0, rows, k / 32,
                          k / 32, a4w4_cpu());
  }
};

const MxMatrix& mx_matrix(int64_t rows, int64_t k, uint64_t seed) {
  static std::map<std::tuple<int64_t, int64_t, uint64_t>, std::unique_ptr<MxMatrix>> cache;
  auto& slot = cache[{rows, k, seed}];
  if (!slot) {
    slot = std::make_unique<MxMatrix>();
    MxMatrix& m = *slot;
    m.rows = rows;
    m.k = k;
    std::vector<float> x = random_floats(rows * k, seed);
    m.values.resize(static_cast<size_t>(rows * k / 2));
    m.scales.resize(static_cast<size_t>(rows * k / 32));
    m.dequantized.resize(static_cast<size_t>(rows * k));
    const a4w4_tensor xd = a4w4_tensor_2d(x.data(), A4W4_DTYPE_F32, rows, k, k, a4w4_cpu());
    const a4w4_tensor qd = m.values_desc(), sd = m.scales_desc();
    const a4w4_tensor yd =
        a4w4_tensor_2d(m.dequantized.data(), A4W4_DTYPE_F32, rows, k, k, a4w4_cpu());
    check(a4w4_quantize(context(0), &xd, &qd, &sd, A4W4_SCALE_RCEIL, nullptr), "a4w4_quantize");
    check(a4w4_dequantize(context(0), &qd, &sd, &yd, nullptr), "a4w4_dequantize");
  }
  return *slot;
}

void set_gemm_counters(benchmark::State& state, int64_t m, int64_t n, int64_t k) {
  state.counters["TOP/s"] =
      benchmark::Counter(2.0 * m * n * k * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  // The bytes a GEMV must read: FP4 B, its scales, A and its scales.
  const double bytes = (n + m) * (k / 2.0 + k / 32.0);
  state.counters["operand_GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = hardware_threads();
}

// a4w4_gemm: `kernel` nullptr = dispatch (the fast path), or a kernel name; B plain or prepared
// (a4w4_prepare_weight before the timing) in `layout`.
void BM_a4w4_gemm(benchmark::State& state, const char* kernel,
                  a4w4_layout layout = A4W4_LAYOUT_PLAIN) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const MxMatrix& a = mx_matrix(m, k, 1);
  const MxMatrix& b = mx_matrix(n, k, 2);
  std::vector<float> d(static_cast<size_t>(m * n));
  const a4w4_tensor ad = a.values_desc(), asd = a.scales_desc();
  a4w4_tensor bd = b.values_desc(), bsd = b.scales_desc();
  std::vector<uint8_t> prepared, prepared_scales;
  if (layout != A4W4_LAYOUT_PLAIN) {
    size_t weight_bytes = 0, scale_bytes = 0;
    check(a4w4_prepared_weight_size(n, k, layout, &weight_bytes, &scale_bytes), "size");
    prepared.resize(weight_bytes), prepared_scales.resize(scale_bytes);
    a4w4_tensor pd = a4w4_tensor_2d(prepared.data(), A4W4_DTYPE_E2M1, n, k, 0, a4w4_cpu());
    a4w4_tensor psd =
        a4w4_tensor_2d(prepared_scales.data(), A4W4_DTYPE_E8M0, n, k / 32, 0, a4w4_cpu());
    pd.layout = psd.layout = layout;
    check(a4w4_prepare_weight(context(0), &bd, &bsd, &pd, &psd, nullptr), "a4w4_prepare_weight");
    bd = pd, bsd = psd;
  }
  const a4w4_tensor dd = a4w4_tensor_2d(d.data(), A4W4_DTYPE_F32, m, n, n, a4w4_cpu());
  a4w4_gemm_options options;
  a4w4_gemm_options_init(&options);
  options.kernel = kernel;
  for (auto _ : state) {
    check(a4w4_gemm(context(0), &ad, &asd, &bd, &bsd, nullptr, nullptr, &dd, &options, nullptr),
          "a4w4_gemm");
    benchmark::DoNotOptimize(d.data());
    benchmark::ClobberMemory();
  }
  set_gemm_counters(state, m, n, k);
}

// OpenBLAS on the dequantized fp32 operands: D = A . B^T (sgemv for M = 1).
void BM_openblas_sgemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const MxMatrix& a = mx_matrix(m, k, 1);
  const MxMatrix& b = mx_matrix(n, k, 2);
  std::vector<float> d(static_cast<size_t>(m * n));
  openblas_set_num_threads(hardware_threads());
  for (auto _ : state) {
    if (m == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n), static_cast<int>(k), 1.0f,
                  b.dequantized.data(), static_cast<int>(k), a.dequantized.data(), 1, 0.0f,
                  d.data(), 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                  static_cast<int>(k), 1.0f, a.dequantized.data(), static_cast<int>(k),
                  b.dequantized.data(), static_cast<int>(k), 0.0f, d.data(), static_cast<int>(n));
    }
    benchmark::DoNotOptimize(d.data());
    benchmark::ClobberMemory();
  }
  set_gemm_counters(state, m, n, k);
}

// The bandwidth floor: every thread streams its share of a buffer of `bytes`, summing 64-bit
// words with AVX-512 loads (plain C++ where the CPU lacks AVX-512).
__attribute__((target("avx512f"))) uint64_t sum_avx512(const uint64_t* p, int64_t words) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= words; i += 32) {
    s0 = _mm512_add_epi64(s0, _mm512_load_si512(p + i));
    s1 = _mm512_add_epi64(s1, _mm512_load_si512(p + i + 8));
    s2 = _mm512_add_epi64(s2, _mm512_load_si512(p + i + 16));
    s3 = _mm512_add_epi64(s3, _mm512_load_si512(p + i + 24));
  }
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
  uint64_t sum = 0;
  for (uint64_t lane : lanes) sum += lane;
  for (; i < words; ++i) sum += p[i];
  return sum;
}

uint64_t sum_portable(const uint64_t* p, int64_t words) {
  uint64_t sum = 0;
  for (int64_t i = 0; i < words; ++i) sum += p[i];
  return sum;
}

void BM_stream_read(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  const int64_t words = bytes / 8 / 64 * 64;
  auto* buffer = static_cast<uint64_t*>(std::aligned_alloc(64, static_cast<size_t>(words * 8)));
  for (int64_t i = 0; i < words; ++i) buffer[i] = static_cast<uint64_t>(i);
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const int threads = hardware_threads();
  for (auto _ : state) {
    uint64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t begin = words * t / nt / 8 * 8, end = words * (t + 1) / nt / 8 * 8;
      total += avx512 ? sum_avx512(buffer + begin, end - begin)
                      : sum_portable(buffer + begin, end - begin);
    }
    benchmark::DoNotOptimize(total);
  }
  std::free(buffer);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(words * 8) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}

// a4w4_quantize of rows x cols fp32 (RCEIL). threads 0 = one per hardware thread.
void BM_a4w4_quantize(benchmark::State& state, bool reference) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  static const std::vector<float> x = random_floats(4096 * 4096, 3);
  if (rows * cols > static_cast<int64_t>(x.size())) std::abort();
  std::vector<uint8_t> q(static_cast<size_t>(rows * cols / 2)),
      s(static_cast<size_t>(rows * cols / 32));
  const a4w4_tensor xd =
      a4w4_tensor_2d(const_cast<float*>(x.data()), A4W4_DTYPE_F32, rows, cols, cols, a4w4_cpu());
  const a4w4_tensor qd = a4w4_tensor_2d(q.data(), A4W4_DTYPE_E2M1, rows, cols, cols, a4w4_cpu());
  const a4w4_tensor sd =
      a4w4_tensor_2d(s.data(), A4W4_DTYPE_E8M0, rows, cols / 32, cols / 32, a4w4_cpu());
  // The public API reaches the reference quantizer through its environment switch.
  if (reference) setenv("A4W4_CPU_QUANTIZE", "reference", 1);
  for (auto _ : state) {
    check(a4w4_quantize(context(threads), &xd, &qd, &sd, A4W4_SCALE_RCEIL, nullptr),
          "a4w4_quantize");
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  if (reference) unsetenv("A4W4_CPU_QUANTIZE");
  const double input_bytes = static_cast<double>(rows * cols) * 4.0;
  state.counters["input_GB/s"] =
      benchmark::Counter(input_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  const int used = threads > 0 ? threads : hardware_threads();
  state.counters["input_GB/s/core"] =
      benchmark::Counter(input_bytes * 1e-9 / used, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = used;
}

// The shapes and settings of the prepared-B runs, the same for both layout versions.
void prepared_b_shapes(benchmark::internal::Benchmark* b) {
  b->Args({1, 8192, 8192})
      ->Args({4, 4096, 4096})
      ->Args({64, 4096, 4096})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime()
      ->MinTime(1.0);
}

}  // namespace

// GEMM
BENCHMARK_CAPTURE(BM_a4w4_gemm, fast, nullptr)
    ->Args({2048, 2048, 2048})
    ->Args({512, 8192, 8192})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK(BM_openblas_sgemm)
    ->Args({2048, 2048, 2048})
    ->Args({512, 8192, 8192})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_a4w4_gemm, reference, "cpu.reference")
    ->Args({2048, 2048, 2048})
    ->Args({512, 8192, 8192})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);
// GEMV
BENCHMARK_CAPTURE(BM_a4w4_gemm, fast, nullptr)
    ->Args({1, 8192, 8192})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK(BM_stream_read)
    ->Arg(8192LL * (8192 / 2 + 8192 / 32))
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK(BM_openblas_sgemm)
    ->Args({1, 8192, 8192})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_a4w4_gemm, reference, "cpu.reference")
    ->Args({1, 8192, 8192})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(1.0);
// A prepared B (a4w4_prepare_weight, both layout versions) against the plain one.
BENCHMARK_CAPTURE(BM_a4w4_gemm, fast, nullptr)
    ->Args({4, 4096, 4096})
    ->Args({64, 4096, 4096})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(1.0);
BENCHMARK_CAPTURE(BM_a4w4_gemm, prepared_v2, nullptr, A4W4_LAYOUT_PREPARED_V2)
    ->Apply(prepared_b_shapes);
BENCHMARK_CAPTURE(BM_a4w4_gemm, prepared_v1, nullptr, A4W4_LAYOUT_PREPARED_V1)
    ->Apply(prepared_b_shapes);
// Quantize 4096 x 4096 fp32: 1 thread (per core), all threads, and the reference.
BENCHMARK_CAPTURE(BM_a4w4_quantize, fast, false)
    ->Args({4096, 4096, 1})
    ->Args({4096, 4096, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);
BENCHMARK_CAPTURE(BM_a4w4_quantize, reference, true)
    ->Args({4096, 4096, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  char model[256] = "";
  a4w4_device_describe(a4w4_cpu(), model, sizeof(model));
  benchmark::AddCustomContext("a4w4_cpu", model);
  benchmark::AddCustomContext("openblas_config", openblas_get_config());
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext("OPENBLAS_CORETYPE", coretype ? coretype : "(unset)");
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (auto& [threads, ctx] : contexts()) a4w4_context_destroy(ctx);
  return 0;
}
