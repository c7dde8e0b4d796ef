#include "gpu_bench.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

#include "a4w4/a4w4.h"
#include "fill.h"

namespace a4w4::bench {
namespace {

// The datasheet ceilings behind the floor of shared/docs/targets.md.
constexpr double kHbmBytesPerSecond = 4.8e12;
constexpr double kFp4PeakFlops = 1979e12;
constexpr size_t kCublasWorkspace = 32u << 20;

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(err)));
}
void cublas_check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("{}: cuBLAS status {}", what, static_cast<int>(status)));
}
void a4w4_check(a4w4_status status, const char* what) {
  if (status != A4W4_SUCCESS)
    throw std::runtime_error(
        fmt::format("{}: {}: {}", what, a4w4_status_string(status), a4w4_last_error_message()));
}

struct DeviceAllocation {
  void* ptr = nullptr;
  explicit DeviceAllocation(size_t bytes) { cuda_check(cudaMalloc(&ptr, bytes), "cudaMalloc"); }
  ~DeviceAllocation() { cudaFree(ptr); }
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;
};

class Stream {
 public:
  Stream() { cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"); }
  ~Stream() { cudaStreamDestroy(stream_); }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Median microseconds per call of enqueue(stream, i): calls are captured back to back into a graph
// (i = 0, 1, ... selects the rotating operand set) and the graph is replayed `samples` times.
double time_calls(const std::function<void(cudaStream_t, int)>& enqueue, cudaStream_t stream,
                  const GpuBenchOptions& options) {
  cudaEvent_t start, stop;
  cuda_check(cudaEventCreate(&start), "event");
  cuda_check(cudaEventCreate(&stop), "event");
  // Warm-up, and a first estimate of one call.
  for (int i = 0; i < 3; ++i) enqueue(stream, i);
  cuda_check(cudaEventRecord(start, stream), "record");
  for (int i = 0; i < 8; ++i) enqueue(stream, i);
  cuda_check(cudaEventRecord(stop, stream), "record");
  cuda_check(cudaEventSynchronize(stop), "sync");
  float ms = 0;
  cuda_check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  const double estimate_us = std::max(1.0, 1000.0 * ms / 8);
  const int calls = std::clamp(static_cast<int>(options.graph_us / estimate_us), 4, 500);

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < calls; ++i) enqueue(stream, i);
  cuda_check(cudaStreamEndCapture(stream, &graph), "end capture");
  cuda_check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  // Warm-up: the graph replayed for warmup_ms, so every configuration is timed at the clocks it
  // sustains under load.
  const auto warm_until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options.warmup_ms);
  do {
    cuda_check(cudaGraphLaunch(exec, stream), "graph warm-up");
    cuda_check(cudaStreamSynchronize(stream), "graph warm-up");
  } while (std::chrono::steady_clock::now() < warm_until);
  std::vector<double> per_call;
  for (int s = 0; s < options.samples; ++s) {
    cuda_check(cudaEventRecord(start, stream), "record");
    cuda_check(cudaGraphLaunch(exec, stream), "graph launch");
    cuda_check(cudaEventRecord(stop, stream), "record");
    cuda_check(cudaEventSynchronize(stop), "sync");
    cuda_check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    per_call.push_back(1000.0 * ms / calls);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(per_call.begin(), per_call.begin() + per_call.size() / 2, per_call.end());
  return per_call[per_call.size() / 2];
}

}  // namespace

double time_enqueued(const std::function<void(void* stream, int i)>& enqueue, void* stream,
                     int samples, double graph_us, int warmup_ms) {
  GpuBenchOptions options;
  options.samples = samples;
  options.graph_us = graph_us;
  options.warmup_ms = warmup_ms;
  return time_calls([&](cudaStream_t st, int i) { enqueue(st, i); },
                    static_cast<cudaStream_t>(stream), options);
}

int rotation_sets(double bytes, double l2_bytes) {
  return std::clamp(static_cast<int>(std::ceil(3.0 * l2_bytes / std::max(bytes, 1.0))), 2, 64);
}

namespace {

// A rotation of `sets` device buffers of `bytes` each (the baselines' operands and outputs).
using Buffers = std::vector<std::unique_ptr<DeviceAllocation>>;
Buffers device_buffers(size_t bytes, int sets) {
  Buffers buffers;
  for (int i = 0; i < sets; ++i) buffers.push_back(std::make_unique<DeviceAllocation>(bytes));
  return buffers;
}
// The same filled with random `kind` data, buffer i from seed + i.
Buffers random_buffers(size_t bytes, int sets, uint64_t seed, FillKind kind, cudaStream_t stream) {
  Buffers buffers = device_buffers(bytes, sets);
  for (int i = 0; i < sets; ++i)
    cuda_check(fill_random(buffers[i]->ptr, bytes, seed + i, kind, stream), "fill");
  return buffers;
}

a4w4_dtype out_dtype(const std::string& name) {
  if (name == "fp32" || name == "f32") return A4W4_DTYPE_F32;
  if (name == "fp16" || name == "f16") return A4W4_DTYPE_F16;
  return A4W4_DTYPE_BF16;
}

// One rotating set of a4w4 operands: A, B plain and prepared, their scales, and D.
struct Fp4Set {
  std::unique_ptr<DeviceAllocation> a, as, b, bs, pb, pbs, d;
};

// What a4w4_gemm runs for set o: "name[/split] (source)".
std::string chosen_kernel(a4w4_context ctx, const Fp4Set& o, const Shape& s, a4w4_device gpu,
                          a4w4_dtype dtype, bool prepared, a4w4_layout prepared_layout,
                          const a4w4_gemm_options& gemm) {
  const a4w4_tensor a = a4w4_tensor_2d(o.a->ptr, A4W4_DTYPE_E2M1, s.m, s.k, s.k, gpu);
  const a4w4_tensor as = a4w4_tensor_2d(o.as->ptr, A4W4_DTYPE_E8M0, s.m, s.k / 32, s.k / 32, gpu);
  a4w4_tensor b = a4w4_tensor_2d(prepared ? o.pb->ptr : o.b->ptr, A4W4_DTYPE_E2M1, s.n, s.k,
                                 prepared ? 0 : s.k, gpu);
  a4w4_tensor bs = a4w4_tensor_2d(prepared ? o.pbs->ptr : o.bs->ptr, A4W4_DTYPE_E8M0, s.n, s.k / 32,
                                  prepared ? 0 : s.k / 32, gpu);
  if (prepared) b.layout = bs.layout = prepared_layout;
  const a4w4_tensor d = a4w4_tensor_2d(o.d->ptr, dtype, s.m, s.n, s.n, gpu);
  a4w4_gemm_choice choice{};
  choice.struct_size = sizeof choice;
  a4w4_check(a4w4_gemm_choose(ctx, &a, &as, &b, &bs, nullptr, nullptr, &d, &gemm, &choice),
             "a4w4_gemm_choose");
  const char* source = choice.source == A4W4_CHOICE_TUNED      ? "tuned"
                       : choice.source == A4W4_CHOICE_EXPLICIT ? "explicit"
                                                               : "heuristic";
  return fmt::format("{}{} ({})", choice.kernel,
                     choice.split_k > 0 ? fmt::format("/{}", choice.split_k) : std::string(),
                     source);
}

// Median microseconds per call of a4w4_gemm on shape s; *kernel_used (if given) says what ran.
// With time_it false only *kernel_used is filled (0 is returned).
double time_a4w4(const Shape& s, const GpuBenchOptions& options, const GpuDeviceFacts& facts,
                 a4w4_context ctx, cudaStream_t stream, bool prepared, std::string* kernel_used,
                 bool time_it = true) {
  const a4w4_device gpu = a4w4_cuda(options.device);
  const a4w4_dtype dtype = out_dtype(options.out_dtype);
  const size_t out_size = dtype == A4W4_DTYPE_F32 ? 4 : 2;
  size_t pw = 0, ps = 0;
  a4w4_check(a4w4_prepared_weight_size(s.n, s.k, options.prepared_layout, &pw, &ps), "size");
  const double set_bytes = (s.m + s.n) * (s.k / 2.0 + s.k / 32.0) + s.m * s.n * out_size;
  const int sets = rotation_sets(set_bytes, facts.l2_bytes);
  std::vector<Fp4Set> operands(sets);
  const FillKind scale_kind = options.data == BenchData::kWide    ? FillKind::kWideScales
                              : options.data == BenchData::kDrift ? FillKind::kDriftScales
                                                                  : FillKind::kTypicalScales;
  // Quantized data: bf16 operands generated here and quantized by a4w4.
  std::unique_ptr<DeviceAllocation> source;
  const bool quantized =
      options.data == BenchData::kGaussian || options.data == BenchData::kOutliers;
  if (quantized) source = std::make_unique<DeviceAllocation>(std::max(s.m, s.n) * s.k * 2);
  const auto quantize_into = [&](void* codes, void* scales, int64_t rows, uint64_t seed,
                                 bool activations) {
    const bool outliers = activations && options.data == BenchData::kOutliers;
    cuda_check(fill_model_like_bf16(source->ptr, rows, s.k, seed, 2.0, outliers ? 0.005 : 0.0,
                                    32.0f, stream),
               "fill");
    const a4w4_tensor x = a4w4_tensor_2d(source->ptr, A4W4_DTYPE_BF16, rows, s.k, s.k, gpu);
    const a4w4_tensor q = a4w4_tensor_2d(codes, A4W4_DTYPE_E2M1, rows, s.k, s.k, gpu);
    const a4w4_tensor qs = a4w4_tensor_2d(scales, A4W4_DTYPE_E8M0, rows, s.k / 32, s.k / 32, gpu);
    a4w4_check(a4w4_quantize(ctx, &x, &q, &qs, A4W4_SCALE_RCEIL, stream), "a4w4_quantize");
  };
  for (int i = 0; i < sets; ++i) {
    Fp4Set& o = operands[i];
    o.a = std::make_unique<DeviceAllocation>(s.m * s.k / 2);
    o.as = std::make_unique<DeviceAllocation>(s.m * s.k / 32);
    o.b = std::make_unique<DeviceAllocation>(s.n * s.k / 2);
    o.bs = std::make_unique<DeviceAllocation>(s.n * s.k / 32);
    o.d = std::make_unique<DeviceAllocation>(s.m * s.n * out_size);
    if (quantized) {
      quantize_into(o.a->ptr, o.as->ptr, s.m, 4 * i + 1, true);
      quantize_into(o.b->ptr, o.bs->ptr, s.n, 4 * i + 3, false);
    } else {
      cuda_check(fill_random(o.a->ptr, s.m * s.k / 2, 4 * i + 1, FillKind::kBytes, stream), "fill");
      cuda_check(fill_random(o.as->ptr, s.m * s.k / 32, 4 * i + 2, scale_kind, stream, s.k / 32),
                 "fill");
      cuda_check(fill_random(o.b->ptr, s.n * s.k / 2, 4 * i + 3, FillKind::kBytes, stream), "fill");
      cuda_check(fill_random(o.bs->ptr, s.n * s.k / 32, 4 * i + 4, scale_kind, stream, s.k / 32),
                 "fill");
    }
    if (prepared) {
      o.pb = std::make_unique<DeviceAllocation>(pw);
      o.pbs = std::make_unique<DeviceAllocation>(ps);
      a4w4_tensor b = a4w4_tensor_2d(o.b->ptr, A4W4_DTYPE_E2M1, s.n, s.k, s.k, gpu);
      a4w4_tensor bs = a4w4_tensor_2d(o.bs->ptr, A4W4_DTYPE_E8M0, s.n, s.k / 32, s.k / 32, gpu);
      a4w4_tensor pb = a4w4_tensor_2d(o.pb->ptr, A4W4_DTYPE_E2M1, s.n, s.k, 0, gpu);
      a4w4_tensor pbs = a4w4_tensor_2d(o.pbs->ptr, A4W4_DTYPE_E8M0, s.n, s.k / 32, 0, gpu);
      pb.layout = pbs.layout = options.prepared_layout;
      a4w4_check(a4w4_prepare_weight(ctx, &b, &bs, &pb, &pbs, stream), "a4w4_prepare_weight");
      o.b.reset();  // only the prepared copy is used
      o.bs.reset();
    }
  }
  cuda_check(cudaStreamSynchronize(stream), "fill");
  const a4w4_gemm_options gemm = options.call.to_c();
  auto enqueue = [&](cudaStream_t st, int i) {
    const Fp4Set& o = operands[i % sets];
    const a4w4_tensor a = a4w4_tensor_2d(o.a->ptr, A4W4_DTYPE_E2M1, s.m, s.k, s.k, gpu);
    const a4w4_tensor as = a4w4_tensor_2d(o.as->ptr, A4W4_DTYPE_E8M0, s.m, s.k / 32, s.k / 32, gpu);
    a4w4_tensor b, bs;
    if (prepared) {
      b = a4w4_tensor_2d(o.pb->ptr, A4W4_DTYPE_E2M1, s.n, s.k, 0, gpu);
      bs = a4w4_tensor_2d(o.pbs->ptr, A4W4_DTYPE_E8M0, s.n, s.k / 32, 0, gpu);
      b.layout = bs.layout = options.prepared_layout;
    } else {
      b = a4w4_tensor_2d(o.b->ptr, A4W4_DTYPE_E2M1, s.n, s.k, s.k, gpu);
      bs = a4w4_tensor_2d(o.bs->ptr, A4W4_DTYPE_E8M0, s.n, s.k / 32, s.k / 32, gpu);
    }
    const a4w4_tensor d = a4w4_tensor_2d(o.d->ptr, dtype, s.m, s.n, s.n, gpu);
    a4w4_check(a4w4_gemm(ctx, &a, &as, &b, &bs, nullptr, nullptr, &d, &gemm, st), "a4w4_gemm");
  };
  if (kernel_used != nullptr)
    *kernel_used =
        chosen_kernel(ctx, operands[0], s, gpu, dtype, prepared, options.prepared_layout, gemm);
  return time_it ? time_calls(enqueue, stream, options) : 0.0;
}

double time_cublas_bf16(const Shape& s, const GpuDeviceFacts& facts, const GpuBenchOptions& options,
                        cudaStream_t stream) {
  cublasHandle_t handle;
  cublas_check(cublasCreate(&handle), "cublasCreate");
  DeviceAllocation workspace(kCublasWorkspace);
  cublas_check(cublasSetStream(handle, stream), "cublasSetStream");
  cublas_check(cublasSetWorkspace(handle, workspace.ptr, kCublasWorkspace), "cublasSetWorkspace");
  const double set_bytes = 2.0 * (s.m * s.k + s.n * s.k + s.m * s.n);
  const int sets = rotation_sets(set_bytes, facts.l2_bytes);
  const Buffers a = random_buffers(2 * s.m * s.k, sets, 100, FillKind::kBf16, stream);
  const Buffers b = random_buffers(2 * s.n * s.k, sets, 200, FillKind::kBf16, stream);
  const Buffers d = device_buffers(2 * s.m * s.n, sets);
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major D[M,N] = A[M,K] B[N,K]^T is column-major D^T[N,M] = B^T... : op(B) = T, op(A) = N.
  auto enqueue = [&](cudaStream_t, int i) {
    cublas_check(
        cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(s.n), static_cast<int>(s.m),
                     static_cast<int>(s.k), &alpha, b[i % sets]->ptr, CUDA_R_16BF,
                     static_cast<int>(s.k), a[i % sets]->ptr, CUDA_R_16BF, static_cast<int>(s.k),
                     &beta, d[i % sets]->ptr, CUDA_R_16BF, static_cast<int>(s.n),
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  };
  const double us = time_calls(enqueue, stream, options);
  cublasDestroy(handle);
  return us;
}

// cuBLASLt's fp8 kernels need every dimension a multiple of 16: M is padded up (as frameworks
// do for decode); the padding is part of the baseline's cost.
double time_cublaslt_fp8(const Shape& shape, const GpuDeviceFacts& facts,
                         const GpuBenchOptions& options, cudaStream_t stream) {
  Shape s = shape;
  s.m = (s.m + 15) / 16 * 16;
  cublasLtHandle_t handle;
  cublas_check(cublasLtCreate(&handle), "cublasLtCreate");
  // Each scale in its own 256-byte slot: cuBLASLt refuses (NOT_SUPPORTED) scale pointers that are
  // not 16-byte aligned.
  DeviceAllocation workspace(kCublasWorkspace), scales(512);
  const float one = 1.0f;
  const float* a_scale = static_cast<const float*>(scales.ptr);
  const float* b_scale = a_scale + 64;
  cuda_check(cudaMemcpy(scales.ptr, &one, sizeof(one), cudaMemcpyHostToDevice), "scales");
  cuda_check(cudaMemcpy(const_cast<float*>(b_scale), &one, sizeof(one), cudaMemcpyHostToDevice),
             "scales");

  cublasLtMatmulDesc_t desc;
  cublas_check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale,
                                 sizeof(b_scale));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale,
                                 sizeof(a_scale));
  // Operand "A" of cuBLASLt is our B^T (K x N, transposed), "B" is our A^T (K x M).
  cublasLtMatrixLayout_t la, lb, lc;
  cublas_check(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, s.k, s.n, s.k), "layout");
  cublas_check(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, s.k, s.m, s.k), "layout");
  cublas_check(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, s.n, s.m, s.n), "layout");
  cublasLtMatmulPreference_t preference;
  cublasLtMatmulPreferenceCreate(&preference);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &kCublasWorkspace, sizeof(kCublasWorkspace));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  cublas_check(cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, lc, preference, 1,
                                              &heuristic, &found),
               "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) throw std::runtime_error("cuBLASLt found no fp8 algorithm");

  const double set_bytes = 1.0 * (s.m * s.k + s.n * s.k) + 2.0 * s.m * s.n;
  const int sets = rotation_sets(set_bytes, facts.l2_bytes);
  const Buffers a = random_buffers(s.m * s.k, sets, 300, FillKind::kE4m3, stream);
  const Buffers b = random_buffers(s.n * s.k, sets, 400, FillKind::kE4m3, stream);
  const Buffers d = device_buffers(2 * s.m * s.n, sets);
  const float alpha = 1.0f, beta = 0.0f;
  auto enqueue = [&](cudaStream_t st, int i) {
    cublas_check(cublasLtMatmul(handle, desc, &alpha, b[i % sets]->ptr, la, a[i % sets]->ptr, lb,
                                &beta, d[i % sets]->ptr, lc, d[i % sets]->ptr, lc, &heuristic.algo,
                                workspace.ptr, kCublasWorkspace, st),
                 "cublasLtMatmul");
  };
  const double us = time_calls(enqueue, stream, options);
  cublasLtMatmulPreferenceDestroy(preference);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(handle);
  return us;
}

}  // namespace

std::string describe(BenchData data) {
  switch (data) {
    case BenchData::kWide:
      return "random codes, block scales wide (120..135)";
    case BenchData::kDrift:
      return "random codes, block scales drifting (each 128-K tile within 3 binades, tiles 4 "
             "binades apart in turn)";
    case BenchData::kGaussian:
      return "Gaussian bf16 rows (sigmas over 2 binades) quantized by a4w4 (RCEIL)";
    case BenchData::kOutliers:
      return "Gaussian bf16 rows (sigmas over 2 binades) quantized by a4w4 (RCEIL), A with 0.5% "
             "outlier channels x32";
    case BenchData::kTypical:
      break;
  }
  return "random codes, block scales typical (125..127)";
}

// An SM copy kernel moving `bytes` in all (half read, half written), rotating over buffers at
// least three times the L2 size.
double time_copy_of(double bytes, const GpuBenchOptions& options, const GpuDeviceFacts& facts,
                    cudaStream_t stream) {
  const size_t half = (static_cast<size_t>(bytes / 2) + 15) / 16 * 16;
  const int sets = rotation_sets(2.0 * half, facts.l2_bytes);
  const Buffers src = random_buffers(half, sets, 900, FillKind::kBytes, stream);
  const Buffers dst = device_buffers(half, sets);
  return time_calls(
      [&](cudaStream_t st, int i) {
        cuda_check(
            copy_with_kernel(src[i % sets]->ptr, dst[i % sets]->ptr, half, facts.sm_count, st),
            "copy");
      },
      stream, options);
}

// An SM kernel reading `bytes` and writing nothing, rotating over buffers at least three times the
// L2 size.
double time_read_of(double bytes, const GpuBenchOptions& options, const GpuDeviceFacts& facts,
                    cudaStream_t stream) {
  const size_t size = (static_cast<size_t>(bytes) + 15) / 16 * 16;
  const int sets = rotation_sets(static_cast<double>(size), facts.l2_bytes);
  const Buffers src = random_buffers(size, sets, 950, FillKind::kBytes, stream);
  DeviceAllocation sink(sizeof(uint32_t) * 8 * static_cast<size_t>(facts.sm_count));
  return time_calls(
      [&](cudaStream_t st, int i) {
        cuda_check(read_with_kernel(src[i % sets]->ptr, size, static_cast<uint32_t*>(sink.ptr),
                                    facts.sm_count, st),
                   "read");
      },
      stream, options);
}

GpuDeviceFacts measure_device(const GpuBenchOptions& options) {
  cuda_check(cudaSetDevice(options.device), "cudaSetDevice");
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, options.device), "cudaGetDeviceProperties");
  GpuDeviceFacts facts;
  facts.name = prop.name;
  facts.l2_bytes = prop.l2CacheSize;
  facts.sm_count = prop.multiProcessorCount;
  // Copy bandwidth: a 2 GiB device-to-device copy by an SM kernel, bytes read + written.
  const size_t bytes = size_t{1} << 31;
  DeviceAllocation src(bytes), dst(bytes);
  Stream stream;
  cuda_check(fill_random(src.ptr, bytes, 7, FillKind::kBytes, stream.get()), "fill");
  GpuBenchOptions copy_options = options;
  copy_options.graph_us = 20000;
  const double us = time_calls(
      [&](cudaStream_t st, int) {
        cuda_check(copy_with_kernel(src.ptr, dst.ptr, bytes, facts.sm_count, st), "copy");
      },
      stream.get(), copy_options);
  facts.copy_gbps = 2.0 * bytes / (us * 1e-6) / 1e9;
  return facts;
}

std::vector<GpuBenchRow> run_gpu_gemm_bench(
    const std::vector<Shape>& shapes, const GpuBenchOptions& options, const GpuDeviceFacts& facts,
    const std::function<void(size_t, size_t, const std::string&)>& progress) {
  cuda_check(cudaSetDevice(options.device), "cudaSetDevice");
  a4w4_context ctx;
  a4w4_check(a4w4_context_create(&ctx), "a4w4_context_create");
  std::unique_ptr<a4w4_context_t, decltype(&a4w4_context_destroy)> owner(ctx, a4w4_context_destroy);
  if (!options.tuned.empty())
    a4w4_check(a4w4_context_load_tuned(ctx, options.tuned.c_str()), "a4w4_context_load_tuned");
  // The heuristic alone: a context whose tuned configuration (also one from the environment) is
  // cleared.
  a4w4_context plain;
  a4w4_check(a4w4_context_create(&plain), "a4w4_context_create");
  std::unique_ptr<a4w4_context_t, decltype(&a4w4_context_destroy)> plain_owner(
      plain, a4w4_context_destroy);
  a4w4_check(a4w4_context_clear_tuned(plain), "a4w4_context_clear_tuned");
  std::unique_ptr<DeviceAllocation> workspace;
  if (options.workspace) {
    size_t bytes = 0;
    for (const Shape& s : shapes) {
      size_t shape_bytes = 0;
      a4w4_check(a4w4_gemm_workspace_size(s.m, s.n, s.k, &shape_bytes), "a4w4_gemm_workspace_size");
      bytes = std::max(bytes, shape_bytes);
    }
    workspace = std::make_unique<DeviceAllocation>(bytes);
    for (a4w4_context c : {ctx, plain})
      a4w4_check(a4w4_context_set_workspace(c, a4w4_cuda(options.device), workspace->ptr, bytes),
                 "a4w4_context_set_workspace");
  }
  Stream stream;
  std::vector<GpuBenchRow> rows;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    if (progress) progress(i, shapes.size(), fmt::format("{}x{}x{} {}", s.m, s.n, s.k, s.label));
    GpuBenchRow row;
    row.shape = s;
    const double out_bytes = out_dtype(options.out_dtype) == A4W4_DTYPE_F32 ? 4 : 2;
    row.bytes = (s.m + s.n) * (s.k / 2.0) + (s.m + s.n) * (s.k / 32.0) + s.m * s.n * out_bytes;
    row.flops = 2.0 * s.m * s.n * s.k;
    row.floor_us = 1e6 * std::max(row.bytes / kHbmBytesPerSecond, row.flops / kFp4PeakFlops);
    const bool prepared = options.prepared_weights;
    if (prepared) row.a4w4_us = time_a4w4(s, options, facts, ctx, stream.get(), true, &row.kernel);
    if (options.plain_weights || !prepared) {
      std::string plain_kernel;
      row.a4w4_plain_us = time_a4w4(s, options, facts, ctx, stream.get(), false, &plain_kernel);
      // Where the layouts get different kernels, the column names both (the prepared B's first).
      if (!prepared) {
        row.kernel = plain_kernel;
      } else if (plain_kernel != row.kernel) {
        row.kernel += "; plain B: " + plain_kernel;
      }
    }
    if (options.compare_heuristic) {
      // The same kernel and split as the chosen one is the same configuration: its one timing
      // serves both (timing it twice would only measure noise).
      time_a4w4(s, options, facts, plain, stream.get(), prepared, &row.heuristic_kernel, false);
      const auto configuration = [](const std::string& k) { return k.substr(0, k.find(" (")); };
      row.heuristic_us = configuration(row.heuristic_kernel) == configuration(row.kernel)
                             ? (prepared ? row.a4w4_us : row.a4w4_plain_us)
                             : time_a4w4(s, options, facts, plain, stream.get(), prepared, nullptr);
    }
    if (options.baselines) {
      // A baseline that cannot run a shape is reported as missing, not fatal.
      try {
        row.cublas_bf16_us = time_cublas_bf16(s, facts, options, stream.get());
      } catch (const std::exception& e) {
        row.notes += fmt::format(" cuBLAS bf16 failed: {}.", e.what());
      }
      try {
        row.cublaslt_fp8_us = time_cublaslt_fp8(s, facts, options, stream.get());
      } catch (const std::exception& e) {
        row.notes += fmt::format(" cuBLASLt fp8 failed: {}.", e.what());
      }
      cudaGetLastError();
      row.copy_us = time_copy_of(row.bytes, options, facts, stream.get());
      row.read_us = time_read_of(row.bytes, options, facts, stream.get());
    }
    rows.push_back(row);
  }
  if (progress) progress(shapes.size(), shapes.size(), "done");
  return rows;
}

QuantizeBenchRow run_gpu_quantize_bench(int64_t rows, int64_t cols, const GpuBenchOptions& options,
                                        const GpuDeviceFacts& facts) {
  cuda_check(cudaSetDevice(options.device), "cudaSetDevice");
  a4w4_context ctx;
  a4w4_check(a4w4_context_create(&ctx), "a4w4_context_create");
  std::unique_ptr<a4w4_context_t, decltype(&a4w4_context_destroy)> owner(ctx, a4w4_context_destroy);
  Stream stream;
  const a4w4_device gpu = a4w4_cuda(options.device);
  const double bytes = rows * cols * (2.0 + 0.5 + 1.0 / 32);
  const int sets = rotation_sets(bytes, facts.l2_bytes);
  const Buffers x = random_buffers(2 * rows * cols, sets, 500, FillKind::kBf16, stream.get());
  const Buffers q = device_buffers(rows * cols / 2, sets);
  const Buffers s = device_buffers(rows * cols / 32, sets);
  auto enqueue = [&](cudaStream_t st, int i) {
    const a4w4_tensor tx = a4w4_tensor_2d(x[i % sets]->ptr, A4W4_DTYPE_BF16, rows, cols, cols, gpu);
    const a4w4_tensor tq = a4w4_tensor_2d(q[i % sets]->ptr, A4W4_DTYPE_E2M1, rows, cols, cols, gpu);
    const a4w4_tensor ts =
        a4w4_tensor_2d(s[i % sets]->ptr, A4W4_DTYPE_E8M0, rows, cols / 32, cols / 32, gpu);
    a4w4_check(a4w4_quantize(ctx, &tx, &tq, &ts, A4W4_SCALE_RCEIL, st), "a4w4_quantize");
  };
  return QuantizeBenchRow{rows, cols, time_calls(enqueue, stream.get(), options), bytes};
}

std::string format_gemm_table(const std::vector<GpuBenchRow>& rows, const GpuDeviceFacts& facts) {
  std::string out = fmt::format(
      "| M×N×K | label | kernel | a4w4 µs (prepared B) | a4w4 µs (plain B) | TFLOP/s | GB/s | % of "
      "copy BW ({:.0f} GB/s) | copy of the same bytes µs | read of the same bytes µs | floor µs | "
      "cuBLAS bf16 µs | cuBLASLt fp8 µs (M padded to 16) | × bf16 | × fp8 |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      facts.copy_gbps);
  for (const GpuBenchRow& r : rows) {
    const double best = r.best_us();
    const double gbps = r.bytes / (best * 1e-6) / 1e9;
    auto opt = [](double us) { return us > 0 ? fmt::format("{:.1f}", us) : std::string("—"); };
    auto ratio = [&](double base) {
      return base > 0 ? fmt::format("{:.2f}×", base / best) : std::string("—");
    };
    out += fmt::format(
        "| {}×{}×{} | {}{} | {} | {} | {} | {:.1f} | {:.0f} | {:.0f}% | {} | {} | {:.1f} | {} | {} "
        "| {} | {} |\n",
        r.shape.m, r.shape.n, r.shape.k, r.shape.label, r.notes, r.kernel, opt(r.a4w4_us),
        opt(r.a4w4_plain_us), r.flops / (best * 1e-6) / 1e12, gbps, 100.0 * gbps / facts.copy_gbps,
        opt(r.copy_us), opt(r.read_us), r.floor_us, opt(r.cublas_bf16_us), opt(r.cublaslt_fp8_us),
        ratio(r.cublas_bf16_us), ratio(r.cublaslt_fp8_us));
  }
  if (std::any_of(rows.begin(), rows.end(),
                  [](const GpuBenchRow& r) { return r.heuristic_us > 0; })) {
    out +=
        "\n| M×N×K | label | kernel | µs | heuristic's kernel | µs | heuristic / "
        "chosen |\n"
        "|---|---|---|---|---|---|---|\n";
    for (const GpuBenchRow& r : rows)
      out += fmt::format("| {}×{}×{} | {} | {} | {:.1f} | {} | {:.1f} | {:.3f} |\n", r.shape.m,
                         r.shape.n, r.shape.k, r.shape.label, r.kernel,
                         r.a4w4_us > 0 ? r.a4w4_us : r.a4w4_plain_us, r.heuristic_kernel,
                         r.heuristic_us,
                         r.heuristic_us / (r.a4w4_us > 0 ? r.a4w4_us : r.a4w4_plain_us));
  }
  return out;
}

std::string format_quantize_table(const std::vector<QuantizeBenchRow>& rows,
                                  const GpuDeviceFacts& facts) {
  std::string out = fmt::format(
      "| quantize bf16 R×K (RCEIL) | µs | GB/s (read + written) | % of copy BW ({:.0f} GB/s) |\n"
      "|---|---|---|---|\n",
      facts.copy_gbps);
  for (const QuantizeBenchRow& r : rows) {
    const double gbps = r.bytes / (r.us * 1e-6) / 1e9;
    out += fmt::format("| {}×{} | {:.1f} | {:.0f} | {:.0f}% |\n", r.rows, r.cols, r.us, gbps,
                       100.0 * gbps / facts.copy_gbps);
  }
  return out;
}

}  // namespace a4w4::bench
