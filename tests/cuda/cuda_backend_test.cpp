// GPU tests (ctest label `cuda`): every CUDA kernel against the CPU reference on fresh random
// data — all E2M1 codes, wide scale ranges with the E8M0 extremes, NaN scales, ragged M and N,
// strided operands, every epilogue and output dtype — plus streams, graph capture, prepared
// weights and the device-specific error codes. Skipped where no GPU is usable.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "a4w4/a4w4.h"

namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// Owns device memory of `bytes`.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&ptr_, bytes_ == 0 ? 1 : bytes_) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  template <typename T>
  void upload(const std::vector<T>& host) const {
    ASSERT_EQ(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  template <typename T>
  std::vector<T> download(size_t count) const {
    std::vector<T> host(count);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, count * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

// The work enqueue() puts on `stream`, captured into a graph and instantiated (ok() says whether
// every step succeeded; enqueue may fail its own assertions, which the caller checks with
// HasFatalFailure()).
class CapturedGraph {
 public:
  CapturedGraph(cudaStream_t stream, const std::function<void()>& enqueue) {
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) != cudaSuccess) return;
    enqueue();
    if (cudaStreamEndCapture(stream, &graph_) != cudaSuccess) return;
    ok_ = cudaGraphInstantiate(&exec_, graph_, 0) == cudaSuccess;
  }
  ~CapturedGraph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  bool ok() const { return ok_; }
  cudaError_t launch(cudaStream_t stream) const { return cudaGraphLaunch(exec_, stream); }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  bool ok_ = false;
};

size_t dtype_size(a4w4_dtype dtype) {
  return dtype == A4W4_DTYPE_F32 ? 4 : 2;
}

class CudaBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!a4w4_backend_available(A4W4_BACKEND_CUDA)) GTEST_SKIP() << "no usable CUDA device";
    ASSERT_EQ(a4w4_context_create(&ctx_), A4W4_SUCCESS);
  }
  void TearDown() override { a4w4_context_destroy(ctx_); }
  // Int8FamilyMatchesTheReference's cases for one kernel of the int8 family.
  void run_int8_family(const char* kernel);
  // SkinnyMatchesTheReference's cases, run with the context's current workspace (or none: then
  // M <= 64 only, the larger token tiles needing one).
  void run_skinny_cases(bool workspace);
  // PreparedWeightMatchesTheCpuLayout for one layout version.
  void expect_prepared_weight_matches_the_cpu(a4w4_layout layout);
  // Gives the context a workspace that lets every kernel run an M x N x K problem, filled with
  // garbage: nothing may read what a staging kernel did not write. Kept until the test ends.
  void set_garbage_workspace(int64_t m, int64_t n, int64_t k) {
    size_t bytes = 0;
    ASSERT_EQ(a4w4_gemm_workspace_size(m, n, k, &bytes), A4W4_SUCCESS);
    workspace_ = std::make_unique<DeviceBuffer>(bytes);
    ASSERT_NE(workspace_->get(), nullptr);
    ASSERT_EQ(cudaMemset(workspace_->get(), 0xC3, bytes), cudaSuccess);
    ASSERT_EQ(a4w4_context_set_workspace(ctx_, a4w4_cuda(0), workspace_->get(), bytes),
              A4W4_SUCCESS);
  }
  a4w4_context ctx_ = nullptr;
  std::unique_ptr<DeviceBuffer> workspace_;
  std::mt19937_64 rng_{20261129};
};

// A packed operand [rows, k] with a row stride (in elements) and its scales.
struct Packed {
  int64_t rows, k, stride, scale_stride;
  std::vector<uint8_t> data, scales;
};

// How block scales are drawn: narrow (uniform in 117..137: most 128-wide K tiles of a row spread
// more than 3 binades, so the decode kernel's exact per-block path runs), wide (0..254, the E8M0
// extremes), or tile-local like real data (per row a base in 100..150, each block base + 0..3, and
// 2% of blocks 5 higher: mostly the folded fast path, mixed with the exact one).
// Mixed: tile-local, except rows 256..383 (one 128-row tile), which are wide: a kernel with tiles
// of 128 rows sees foldable and exact tiles in one launch.
enum ScaleKind {
  kNarrowScales = 0,
  kWideScales = 1,
  kTileLocalScales = 2,
  kMixedScales = 3,
  // For the int8 family (cuda.int8_*), whose fold window is 4 binades per row and
  // 128-K tile and which sends tiles with a NaN scale to the exact generic code:
  // kFoldScales: per-row base 100..150 plus 0..3 per block, no NaN (every tile
  // folds); kFoldMixedScales: the same, but the rows of tile row 2 (r / 128 == 2)
  // take any scale and a few NaN (their tiles take the exact path, the others
  // fold); kExtremeFoldScales: folding rows whose bases sit at the E8M0 extremes
  // (0..3 or 248..251, alternating by 128-row tile), so fp32's range check fails.
  kFoldScales = 4,
  kFoldMixedScales = 5,
  kExtremeFoldScales = 6,
  // kFoldDriftScales: every K tile folds, but the rows of odd 128-row tiles and every 37th row
  // elsewhere move their base by 4 binades from one K tile to the next, so their chunks of 8 K
  // tiles do not fold to one base (those 128 x 128 tiles of D promote per K tile, the others once
  // per chunk). kFoldPeakScales: every row folds each chunk of 1024 K to one base with most
  // blocks 3 above it, and the codes are +-6 (even rows all +6): the int32 sums of a chunk
  // come near their bound, 1024 * 96 * 96 < 2^24.
  kFoldDriftScales = 7,
  kFoldPeakScales = 8,
  // kFoldOutlierScales (A; B gets kFoldScales): kFoldScales with outlier channels — blocks
  // j % 11 == 3 of every row 6..9 binades above the row's base (high blocks, folded apart) — and,
  // in the rows of 128-row tile 2, blocks j % 7 == 1 5 above too (the tile's high group then
  // spreads over up to 5 binades in some K tiles, which do not fold).
  kFoldOutlierScales = 9,
  // kTileConstantScales: one scale per row and 128-K tile (a row base in 100..150 plus 0..7 by
  // tile) and codes of magnitude at most 1.5: every product of a K tile is a multiple of the same
  // power of two and a tile's sum spans fewer than 13 binades of it, so fast accumulation's fp8
  // tensor-core sums lose nothing (it must then meet the exact contract's bound).
  kTileConstantScales = 10
};

// Random codes (all 16) and scales of `kind`, with a few NaN scales.
Packed random_packed(std::mt19937_64& rng, int64_t rows, int64_t k, int64_t pad, int kind,
                     double nan_fraction) {
  Packed p{rows, k, k + pad, k / 32 + (pad ? 4 : 0), {}, {}};  // padded rows stay 4-aligned
  p.data.resize(static_cast<size_t>(rows * p.stride / 2));
  p.scales.resize(static_cast<size_t>(rows * p.scale_stride));
  for (auto& byte : p.data) byte = static_cast<uint8_t>(rng());
  if (kind == kTileConstantScales)
    for (auto& byte : p.data) byte &= 0xBB;  // codes 0..3 and 8..11: |v| <= 1.5
  if (kind == kFoldPeakScales)
    for (size_t i = 0; i < p.data.size(); ++i) {
      const bool even_row = static_cast<int64_t>(i) / (p.stride / 2) % 2 == 0;
      p.data[i] = even_row
                      ? 0x77
                      : static_cast<uint8_t>((rng() % 2 ? 0x07 : 0x0F) | (rng() % 2 ? 0x70 : 0xF0));
    }
  std::uniform_int_distribution<int> narrow(117, 137), any(0, 254), base(100, 150), near(0, 3),
      eight(0, 7);
  std::uniform_real_distribution<double> unit(0, 1);
  if (kind >= kFoldScales) nan_fraction = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const int row_base =
        kind == kExtremeFoldScales ? (r / 128 % 2 == 0 ? 0 : 248) + near(rng) : base(rng);
    int tile_offset = 0;
    for (int64_t j = 0; j < p.scale_stride; ++j) {
      uint8_t& s = p.scales[static_cast<size_t>(r * p.scale_stride + j)];
      if (j % 4 == 0) tile_offset = eight(rng);
      if (kind == kTileConstantScales) {
        s = static_cast<uint8_t>(row_base + tile_offset);
      } else if (kind == kFoldScales || kind == kExtremeFoldScales ||
                 (kind == kFoldMixedScales && r / 128 != 2)) {
        s = static_cast<uint8_t>(row_base + near(rng));
      } else if (kind == kFoldDriftScales) {
        const bool drifts = r / 128 % 2 == 1 || r % 37 == 5;
        s = static_cast<uint8_t>(row_base + (drifts ? 4 * (j / 4 % 3) : 0) + near(rng));
      } else if (kind == kFoldOutlierScales) {
        const int lift = j % 11 == 3 ? 6 : r / 128 == 2 && j % 7 == 1 ? 5 : 0;
        s = static_cast<uint8_t>(row_base + lift + near(rng));
      } else if (kind == kFoldPeakScales) {
        s = static_cast<uint8_t>(row_base + (j % 32 == 5 ? 0 : 3));
      } else if (kind == kFoldMixedScales) {
        s = static_cast<uint8_t>(unit(rng) < 0.01 ? 0xFF : any(rng));
      } else if (kind == kWideScales || (kind == kMixedScales && r / 128 == 2)) {
        s = static_cast<uint8_t>(any(rng));
      } else if (kind == kTileLocalScales || kind == kMixedScales) {
        s = static_cast<uint8_t>(row_base + near(rng) + (unit(rng) < 0.02 ? 5 : 0));
      } else {
        s = static_cast<uint8_t>(narrow(rng));
      }
      if (unit(rng) < nan_fraction) s = 0xFF;
    }
  }
  return p;
}

a4w4_tensor tensor(void* data, a4w4_dtype dtype, int64_t rows, int64_t cols, int64_t stride,
                   a4w4_device device) {
  return a4w4_tensor_2d(data, dtype, rows, cols, stride, device);
}

// Bitwise equality that treats every NaN as equal to every NaN.
template <typename T>
int64_t count_mismatches(const std::vector<T>& x, const std::vector<T>& y, a4w4_dtype dtype) {
  int64_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::memcmp(&x[i], &y[i], sizeof(T)) == 0) continue;
    if (dtype == A4W4_DTYPE_F32) {
      float a, b;
      std::memcpy(&a, &x[i], 4), std::memcpy(&b, &y[i], 4);
      if (std::isnan(a) && std::isnan(b)) continue;
    } else {
      uint16_t a, b;
      std::memcpy(&a, &x[i], 2), std::memcpy(&b, &y[i], 2);
      const uint16_t exp_mask = dtype == A4W4_DTYPE_BF16 ? 0x7F80 : 0x7C00;
      const uint16_t man_mask = dtype == A4W4_DTYPE_BF16 ? 0x007F : 0x03FF;
      auto is_nan = [&](uint16_t v) { return (v & exp_mask) == exp_mask && (v & man_mask); };
      if (is_nan(a) && is_nan(b)) continue;
    }
    ++bad;
  }
  return bad;
}

struct GemmCase {
  int64_t m, n, k;
  a4w4_dtype out;
  bool with_c, with_bias;
  int scales;  // ScaleKind
  bool prepared;
  int split_k;
  const char* kernel;  // nullptr: dispatch
  int64_t pad;         // extra elements per row of every operand (strided operands)
  int64_t a_pad = 0;   // more extra elements per row of A alone (2: A rows off 16-byte alignment)
  a4w4_layout prepared_layout = A4W4_LAYOUT_PREPARED_V2;  // with `prepared`
  a4w4_math_mode math_mode = A4W4_MATH_EXACT;
  // What the comparison allows beyond the contract's bound, as a multiple of |alpha| * D_abs:
  // kFastAccumBound for fast accumulation, 0 where it must be as exact as the contract.
  double fast_bound = 0.0;
  bool b_constant = false;  // a4w4_gemm_options.b_constant on the GPU call
};

// A4W4_MATH_FAST_ACCUM's documented bound (docs/semantics.md): |D - D_exact| <= 2^-5 * |alpha| *
// D_abs beyond the exact mode's.
constexpr double kFastAccumBound = 0x1p-5;
// The largest (|D - reference| - the exact bound) / (|alpha| * D_abs) seen in fast-accumulation
// cases (reported).
double fast_worst_ratio = 0.0;

std::string describe(const GemmCase& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
         " out=" + a4w4_dtype_name(c.out) + " C=" + std::to_string(c.with_c) +
         " bias=" + std::to_string(c.with_bias) + " scales=" + std::to_string(c.scales) +
         " prepared=" + (c.prepared ? std::to_string(c.prepared_layout) : std::string("0")) +
         " split=" + std::to_string(c.split_k) + " kernel=" + (c.kernel ? c.kernel : "auto") +
         " pad=" + std::to_string(c.pad) + " a_pad=" + std::to_string(c.a_pad) +
         " math=" + std::to_string(c.math_mode) + " b_constant=" + std::to_string(c.b_constant);
}

// A packed operand copied to GPU 0, with its values' and its scales' tensors.
struct DeviceOperand {
  DeviceBuffer data, scales;
  a4w4_tensor values, scale;
  explicit DeviceOperand(const Packed& p) : data(p.data.size()), scales(p.scales.size()) {
    data.upload(p.data), scales.upload(p.scales);
    values = tensor(data.get(), A4W4_DTYPE_E2M1, p.rows, p.k, p.stride, a4w4_cuda(0));
    scale = tensor(scales.get(), A4W4_DTYPE_E8M0, p.rows, p.k / 32, p.scale_stride, a4w4_cuda(0));
  }
};

// A long cuda.gemv (1 x 28672 x 8192: one wave, launched early, letting the next grid start at
// once) whose D starts as NaN: a call enqueued after it that reads D reads NaN unless it waits for
// the grid before it (the early-launch tests).
struct LongGemvIntoNan {
  static constexpr int64_t kN = 28672, kK = 8192;
  DeviceOperand a, b;
  DeviceBuffer d;
  a4w4_tensor td;
  a4w4_gemm_options options;
  explicit LongGemvIntoNan(std::mt19937_64& rng)
      : a(random_packed(rng, 1, kK, 0, kTileLocalScales, 0)),
        b(random_packed(rng, kN, kK, 0, kTileLocalScales, 0)),
        d(kN * 4),
        td(tensor(d.get(), A4W4_DTYPE_F32, 1, kN, kN, a4w4_cuda(0))) {
    a4w4_gemm_options_init(&options);
    options.kernel = "cuda.gemv";
  }
  // D filled with NaN, then the GEMM, on stream (a failure is fatal to the calling test).
  void enqueue(a4w4_context ctx, cudaStream_t stream) const {
    CUDA_OK(cudaMemsetAsync(d.get(), 0xFF, kN * 4, stream));
    ASSERT_EQ(a4w4_gemm(ctx, &a.values, &a.scale, &b.values, &b.scale, nullptr, nullptr, &td,
                        &options, stream),
              A4W4_SUCCESS)
        << a4w4_last_error_message();
  }
};

// Runs one case on the GPU and on the CPU reference (same split_k) and compares bitwise
// (cuda.generic with an explicit split_k) or element by element within the contract's accumulation
// bound, with matching NaN positions (see the comparison below).
void run_case(a4w4_context ctx, std::mt19937_64& rng, const GemmCase& c) {
  SCOPED_TRACE(describe(c));
  const a4w4_device cpu = a4w4_cpu(), gpu = a4w4_cuda(0);
  const Packed a = random_packed(rng, c.m, c.k, c.pad + c.a_pad, c.scales, 0.002);
  // Outlier channels are an activation's (A's); B's scales fold plainly.
  const Packed b = random_packed(rng, c.n, c.k, c.pad,
                                 c.scales == kFoldOutlierScales ? kFoldScales : c.scales, 0.002);
  const int64_t d_stride = c.n + c.pad;
  std::uniform_real_distribution<float> value(-4, 4);
  std::vector<float> c_host(static_cast<size_t>(c.m * d_stride)), bias(static_cast<size_t>(c.n));
  for (auto& v : c_host) v = value(rng);
  for (auto& v : bias) v = value(rng);

  a4w4_gemm_options options;
  a4w4_gemm_options_init(&options);
  // alpha 1 with neither C nor bias (at even M) leaves D = the accumulator rounded once, which
  // kernels may store straight from fp32; otherwise the full epilogue.
  options.alpha = !c.with_c && !c.with_bias && c.m % 2 == 0 ? 1.0f : 0.75f;
  options.beta = c.with_c ? -1.5f : 0.0f;
  options.split_k = c.split_k;
  options.math_mode = c.math_mode;  // the CPU reference computes exactly in either mode

  // CPU reference (named, so a faster CPU kernel never stands in for the oracle).
  options.kernel = "cpu.reference";
  const size_t d_bytes = static_cast<size_t>(c.m * d_stride) * dtype_size(c.out);
  std::vector<uint8_t> d_cpu(d_bytes, 0xCD);
  a4w4_tensor ta = tensor((void*)a.data.data(), A4W4_DTYPE_E2M1, c.m, c.k, a.stride, cpu);
  a4w4_tensor tas =
      tensor((void*)a.scales.data(), A4W4_DTYPE_E8M0, c.m, c.k / 32, a.scale_stride, cpu);
  a4w4_tensor tb = tensor((void*)b.data.data(), A4W4_DTYPE_E2M1, c.n, c.k, b.stride, cpu);
  a4w4_tensor tbs =
      tensor((void*)b.scales.data(), A4W4_DTYPE_E8M0, c.n, c.k / 32, b.scale_stride, cpu);
  a4w4_tensor tc = tensor(c_host.data(), A4W4_DTYPE_F32, c.m, c.n, d_stride, cpu);
  a4w4_tensor tbias = a4w4_tensor_1d(bias.data(), A4W4_DTYPE_F32, c.n, cpu);
  a4w4_tensor td = tensor(d_cpu.data(), c.out, c.m, c.n, d_stride, cpu);
  ASSERT_EQ(a4w4_gemm(ctx, &ta, &tas, &tb, &tbs, c.with_c ? &tc : nullptr,
                      c.with_bias ? &tbias : nullptr, &td, &options, nullptr),
            A4W4_SUCCESS)
      << a4w4_last_error_message();

  // The magnitudes the result is made of, for the error bound: the same product on |A| and |B|
  // (sign bits cleared), D_abs[m, n] = sum of |block partials|, in fp32 (inf where it overflows).
  std::vector<float> d_abs(static_cast<size_t>(c.m * c.n));
  {
    Packed a_abs = a, b_abs = b;
    for (auto& byte : a_abs.data) byte &= 0x77;
    for (auto& byte : b_abs.data) byte &= 0x77;
    a4w4_gemm_options abs_options = options;
    abs_options.alpha = 1.0f, abs_options.beta = 0.0f;
    a4w4_tensor xa = tensor(a_abs.data.data(), A4W4_DTYPE_E2M1, c.m, c.k, a.stride, cpu);
    a4w4_tensor xb = tensor(b_abs.data.data(), A4W4_DTYPE_E2M1, c.n, c.k, b.stride, cpu);
    a4w4_tensor xd = tensor(d_abs.data(), A4W4_DTYPE_F32, c.m, c.n, c.n, cpu);
    ASSERT_EQ(a4w4_gemm(ctx, &xa, &tas, &xb, &tbs, nullptr, nullptr, &xd, &abs_options, nullptr),
              A4W4_SUCCESS)
        << a4w4_last_error_message();
  }

  // GPU.
  DeviceBuffer ga(a.data.size()), gas(a.scales.size()), gb(b.data.size()), gbs(b.scales.size());
  DeviceBuffer gc(c_host.size() * 4), gbias(bias.size() * 4), gd(d_bytes);
  ga.upload(a.data), gas.upload(a.scales), gb.upload(b.data), gbs.upload(b.scales);
  gc.upload(c_host), gbias.upload(bias);
  ASSERT_EQ(cudaMemset(gd.get(), 0xCD, d_bytes), cudaSuccess);
  ta = tensor(ga.get(), A4W4_DTYPE_E2M1, c.m, c.k, a.stride, gpu);
  tas = tensor(gas.get(), A4W4_DTYPE_E8M0, c.m, c.k / 32, a.scale_stride, gpu);
  tb = tensor(gb.get(), A4W4_DTYPE_E2M1, c.n, c.k, b.stride, gpu);
  tbs = tensor(gbs.get(), A4W4_DTYPE_E8M0, c.n, c.k / 32, b.scale_stride, gpu);
  tc = tensor(gc.get(), A4W4_DTYPE_F32, c.m, c.n, d_stride, gpu);
  tbias = a4w4_tensor_1d(gbias.get(), A4W4_DTYPE_F32, c.n, gpu);
  td = tensor(gd.get(), c.out, c.m, c.n, d_stride, gpu);

  size_t wbytes = 0, sbytes = 0;
  ASSERT_EQ(a4w4_prepared_weight_size(c.n, c.k, c.prepared_layout, &wbytes, &sbytes), A4W4_SUCCESS);
  DeviceBuffer gpw(wbytes), gps(sbytes);
  if (c.prepared) {
    a4w4_tensor pw = tensor(gpw.get(), A4W4_DTYPE_E2M1, c.n, c.k, 0, gpu);
    a4w4_tensor ps = tensor(gps.get(), A4W4_DTYPE_E8M0, c.n, c.k / 32, 0, gpu);
    pw.layout = ps.layout = c.prepared_layout;
    ASSERT_EQ(a4w4_prepare_weight(ctx, &tb, &tbs, &pw, &ps, nullptr), A4W4_SUCCESS)
        << a4w4_last_error_message();
    tb = pw, tbs = ps;
    // A constant B's promise: the work that wrote it is synchronised with before the call.
    if (c.b_constant) {
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  }
  options.kernel = c.kernel;
  options.b_constant = c.b_constant ? 1 : 0;
  // The kernel that runs (the dispatcher's choice when the case names none) decides the check.
  a4w4_gemm_choice choice{};
  choice.struct_size = sizeof choice;
  ASSERT_EQ(a4w4_gemm_choose(ctx, &ta, &tas, &tb, &tbs, c.with_c ? &tc : nullptr,
                             c.with_bias ? &tbias : nullptr, &td, &options, &choice),
            A4W4_SUCCESS)
      << a4w4_last_error_message();
  SCOPED_TRACE(std::string("ran ") + choice.kernel);
  ASSERT_EQ(a4w4_gemm(ctx, &ta, &tas, &tb, &tbs, c.with_c ? &tc : nullptr,
                      c.with_bias ? &tbias : nullptr, &td, &options, nullptr),
            A4W4_SUCCESS)
      << a4w4_last_error_message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint8_t> d_gpu = gd.download<uint8_t>(d_bytes);

  // Compare element by element (padding columns must be untouched too). cuda.generic adds the
  // same double partials in the same order as the reference: with an explicit split_k its output
  // must match bit for bit. The other kernels accumulate block partials in fp32 where the scales
  // allow and in double elsewhere, in their own order (the contract: fp32 or better, order
  // unspecified), so each element is held to that contract's bound: NaN exactly where the
  // reference has NaN, and |D - reference| <= (K / 32 + 3) * 2^-24 * (|alpha| * D_abs + |beta * C|
  // + |bias|) plus two units in the last place of the output dtype. The bound scales with the
  // magnitudes summed, not with the result: with wide scales a sum can cancel to far below its
  // terms, and then any two summation orders legitimately differ by more than the result (where
  // those magnitudes overflow fp32, no finite bound exists and only NaN placement is checked).
  const bool generic = std::string(choice.kernel) == "cuda.generic";
  const bool bitwise = c.split_k != 0 && generic;
  const double unit_out =
      c.out == A4W4_DTYPE_F32 ? 0x1p-24 : (c.out == A4W4_DTYPE_BF16 ? 0x1p-8 : 0x1p-11);
  const double smallest_out = c.out == A4W4_DTYPE_F16 ? 0x1p-24 : 0x1p-126;
  const size_t elem = dtype_size(c.out);
  int64_t failures = 0, pad_written = 0;
  std::string first_failures;  // the first few, for the message
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < d_stride; ++j) {
      const size_t off = static_cast<size_t>(i * d_stride + j) * elem;
      if (j >= c.n) {
        pad_written += d_gpu[off] != 0xCD;
        continue;
      }
      auto widen = [&](const std::vector<uint8_t>& v) {
        if (c.out == A4W4_DTYPE_F32) {
          float f;
          std::memcpy(&f, &v[off], 4);
          return static_cast<double>(f);
        }
        uint16_t h;
        std::memcpy(&h, &v[off], 2);
        if (c.out == A4W4_DTYPE_BF16) {
          uint32_t bits = static_cast<uint32_t>(h) << 16;
          float f;
          std::memcpy(&f, &bits, 4);
          return static_cast<double>(f);
        }
        const int e = (h >> 10) & 0x1F, man = h & 0x3FF;
        double mag = e == 0    ? std::ldexp(man, -24)
                     : e == 31 ? (man ? NAN : INFINITY)
                               : std::ldexp(1024 + man, e - 25);
        return (h & 0x8000) ? -mag : mag;
      };
      const double ref = widen(d_cpu), got = widen(d_gpu);
      const double magnitude =
          std::abs(static_cast<double>(options.alpha)) * d_abs[static_cast<size_t>(i * c.n + j)] +
          (c.with_c ? std::abs(options.beta * c_host[static_cast<size_t>(i * d_stride + j)])
                    : 0.0) +
          (c.with_bias ? std::abs(bias[static_cast<size_t>(j)]) : 0.0);
      const double abs_product =
          std::abs(static_cast<double>(options.alpha)) * d_abs[static_cast<size_t>(i * c.n + j)];
      const double exact_bound = static_cast<double>(c.k / 32 + 3) * 0x1p-24 * magnitude +
                                 2 * unit_out * std::max(std::abs(ref), std::abs(got)) +
                                 smallest_out;
      const double bound = exact_bound + c.fast_bound * abs_product;
      // Fast accumulation's error beyond the exact contract's bound, relative to |alpha| D_abs.
      if (c.math_mode == A4W4_MATH_FAST_ACCUM && abs_product > 0 && std::isfinite(abs_product) &&
          std::isfinite(got - ref))
        fast_worst_ratio =
            std::max(fast_worst_ratio, (std::abs(got - ref) - exact_bound) / abs_product);
      bool ok;
      if (bitwise) {
        ok = std::memcmp(&d_cpu[off], &d_gpu[off], elem) == 0 ||
             (std::isnan(ref) && std::isnan(got));
      } else if (std::isnan(ref) || std::isnan(got)) {
        ok = std::isnan(ref) && std::isnan(got);
      } else {
        ok = ref == got || !std::isfinite(bound) || std::abs(got - ref) <= bound;
      }
      if (!ok && failures++ < 8)
        first_failures += " D[" + std::to_string(i) + "][" + std::to_string(j) + "]: GPU " +
                          std::to_string(got) + ", reference " + std::to_string(ref) + ", bound " +
                          std::to_string(bound) + ";";
    }
  }
  EXPECT_EQ(pad_written, 0) << "the GPU wrote outside D's columns";
  EXPECT_EQ(failures, 0) << (bitwise ? "bitwise" : "bounded")
                         << " comparison failed:" << first_failures;
}

TEST_F(CudaBackend, GemmMatchesReferenceAcrossShapesAndEpilogues) {
  const a4w4_dtype outs[] = {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16};
  const int64_t ms[] = {1, 2, 7, 16, 33, 64, 65, 130};
  const int64_t ns[] = {1, 17, 64, 97, 256};
  const int64_t ks[] = {32, 96, 512, 1056};
  int index = 0;
  for (int64_t m : ms)
    for (int64_t n : ns)
      for (int64_t k : ks) {
        const int v = index++;
        GemmCase c{m,           n,          k,
                   outs[v % 3], v % 2 == 0, v % 3 != 1,
                   (v / 2) % 3, v % 5 == 0, (v % 7 == 0) ? 0 : 1 + v % 3,
                   nullptr,     0};
        if (c.split_k > k / 32) c.split_k = static_cast<int>(k / 32);
        run_case(ctx_, rng_, c);
        if (HasFatalFailure()) return;
      }
}

TEST_F(CudaBackend, EveryKernelOnStridedAndPreparedOperands) {
  for (const char* kernel : {"cuda.decode", "cuda.generic"}) {
    for (bool prepared : {false, true}) {
      for (int split : {1, 2, 3, 8}) {
        // pad 32 keeps 16-byte alignment (decode applies); pad 2 breaks it (generic only).
        run_case(
            ctx_, rng_,
            GemmCase{5, 131, 2048, A4W4_DTYPE_BF16, true, true, true, prepared, split, kernel, 32});
        run_case(ctx_, rng_,
                 GemmCase{48, 200, 1024, A4W4_DTYPE_F32, false, true, true, prepared, split, kernel,
                          32});
        if (!prepared)
          run_case(ctx_, rng_,
                   GemmCase{9, 70, 512, A4W4_DTYPE_F16, true, false, false, false, split,
                            "cuda.generic", 2});
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_F(CudaBackend, GemvMatchesTheReference) {
  // cuda.gemv: M = 1..4; K from one block to past 32 chunks of 32 blocks (warps then loop over
  // chunks); ragged N; narrow and tile-local scales (fp32 partials) and wide ones with NaN (the
  // exact double recomputation of a column group); every epilogue and output dtype; strided
  // operands and activation rows off 16-byte alignment.
  const a4w4_dtype outs[] = {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16};
  int v = 0;
  for (int64_t m : {1, 2, 3, 4})
    for (int64_t k : {32, 96, 1024, 4160, 33792})
      for (int scales : {kNarrowScales, kWideScales, kTileLocalScales}) {
        const int64_t n = k > 8192 ? 21 : (v % 2 == 0 ? 1007 : 200);
        GemmCase c{m,      n,     k, outs[v % 3], v % 2 == 0,          v % 3 != 1,
                   scales, false, 0, "cuda.gemv", v % 4 == 0 ? 32 : 0, v % 5 == 0 ? 2 : 0};
        run_case(ctx_, rng_, c);
        if (HasFatalFailure()) return;
        ++v;
      }
  // M = 1 in the kernels that load the next step ahead (N = 20000: three steps per warp or more;
  // K of one, two and eight chunks: one, two and eight warps of one CTA, the last chunk partial)
  // and in those that do not (N = 1007; one, three and eight chunks: one warp, a CTA of 4 warps,
  // one of 8 warps), on a plain and a prepared B, with a constant B (its first step requested
  // before the wait) and without.
  struct M1Case {
    int64_t n, k;
    a4w4_dtype out;
    bool with_bias;
  };
  const M1Case m1_cases[] = {
      {20000, 1024, A4W4_DTYPE_BF16, true}, {20000, 2048, A4W4_DTYPE_BF16, true},
      {20000, 7200, A4W4_DTYPE_BF16, true}, {1007, 1024, A4W4_DTYPE_F32, false},
      {1007, 2880, A4W4_DTYPE_F32, false},  {1007, 7200, A4W4_DTYPE_F32, false}};
  for (bool b_constant : {false, true})
    for (bool prepared : {false, true})
      for (const M1Case& m1 : m1_cases) {
        GemmCase c{1,        m1.n, m1.k,        m1.out, true, m1.with_bias, kTileLocalScales,
                   prepared, 0,    "cuda.gemv", 0};
        c.b_constant = b_constant;
        run_case(ctx_, rng_, c);
        if (HasFatalFailure()) return;
      }
  // A prepared B (four 4-byte loads per block from the layout's lane runs): every M, K with a
  // partial last 128-K tile (96, 4160), ragged N (an 8-row group past N, a 16-row tile half used),
  // wide and narrow scales.
  v = 0;
  for (int64_t m : {1, 2, 3, 4})
    for (int64_t k : {96, 1024, 4160})
      for (int scales : {kTileLocalScales, kWideScales}) {
        run_case(ctx_, rng_,
                 GemmCase{m, v % 2 == 0 ? 1003 : 72, k, outs[v % 3], v % 2 == 1, v % 3 != 2, scales,
                          true, 0, "cuda.gemv", v % 4 == 0 ? 32 : 0});
        if (HasFatalFailure()) return;
        ++v;
      }
  // Column tiles with more sums than the CTA has threads (one or three warps: K of 3 and 90
  // blocks).
  for (int64_t m : {1, 3, 4})
    for (int64_t k : {96, 2880})
      run_case(ctx_, rng_,
               GemmCase{m, 6000, k, A4W4_DTYPE_F32, false, true, kTileLocalScales, false, 0,
                        "cuda.gemv", 0});
}

TEST_F(CudaBackend, GemvTakesSplitKOnChunkBoundaries) {
  // Explicit split_k on cuda.gemv: every partition starts on a 32-block chunk. One CTA of 8 warps
  // (K = 8192: 2, 4, 8 partitions; 3072: 3), a partial last chunk in the last partition (4128: 4
  // partitions of 32, 32, 32, 33 blocks), and a cluster of 4-warp CTAs (16384: 4), on a plain and
  // a prepared B, with wide scales and NaN (the exact recomputation) too.
  struct Split {
    int64_t m, k;
    int split;
  };
  const Split splits[] = {{1, 8192, 2}, {1, 8192, 8},  {2, 8192, 4}, {1, 3072, 3},
                          {4, 4128, 4}, {1, 16384, 4}, {3, 16384, 2}};
  int v = 0;
  for (bool prepared : {false, true})
    for (const Split& sp : splits) {
      run_case(ctx_, rng_,
               GemmCase{sp.m, v % 2 == 0 ? 1003 : 72, sp.k, A4W4_DTYPE_F32, v % 2 == 1, true,
                        v % 3 == 0 ? kWideScales : kTileLocalScales, prepared, sp.split,
                        "cuda.gemv", 0});
      if (HasFatalFailure()) return;
      ++v;
    }
  // A partition starting inside a chunk (8192 / 3: block 85), and K past 32 chunks: refused.
  for (const Split& sp : {Split{1, 8192, 3}, Split{1, 33792, 2}}) {
    const a4w4_device gpu = a4w4_cuda(0);
    DeviceBuffer a(sp.k / 2), as(sp.k / 32), b(8 * sp.k / 2), bs(8 * sp.k / 32), d(8 * 4);
    a4w4_tensor ta = tensor(a.get(), A4W4_DTYPE_E2M1, 1, sp.k, sp.k, gpu);
    a4w4_tensor tas = tensor(as.get(), A4W4_DTYPE_E8M0, 1, sp.k / 32, sp.k / 32, gpu);
    a4w4_tensor tb = tensor(b.get(), A4W4_DTYPE_E2M1, 8, sp.k, sp.k, gpu);
    a4w4_tensor tbs = tensor(bs.get(), A4W4_DTYPE_E8M0, 8, sp.k / 32, sp.k / 32, gpu);
    a4w4_tensor td = tensor(d.get(), A4W4_DTYPE_F32, 1, 8, 8, gpu);
    a4w4_gemm_options options;
    a4w4_gemm_options_init(&options);
    options.kernel = "cuda.gemv";
    options.split_k = sp.split;
    EXPECT_EQ(a4w4_gemm(ctx_, &ta, &tas, &tb, &tbs, nullptr, nullptr, &td, &options, nullptr),
              A4W4_ERROR_KERNEL_NOT_APPLICABLE)
        << sp.k << " / " << sp.split;
    EXPECT_NE(std::string(a4w4_last_error_message()).find("split_k"), std::string::npos)
        << a4w4_last_error_message();
  }
}

TEST_F(CudaBackend, SkinnyMatchesTheReference) {
  // cuda.skinny converts each K tile's activations in every CTA without a workspace, and once for
  // the call into the context's workspace (records that the CTAs copy) with one: both ways.
  {
    SCOPED_TRACE("no workspace: activations converted per CTA");
    run_skinny_cases(false);
    if (HasFatalFailure()) return;
  }
  // The size that lets every kernel run for the largest case.
  set_garbage_workspace(256, 1000, 16384);
  if (HasFatalFailure()) return;
  {
    SCOPED_TRACE("workspace: activations staged once per call");
    run_skinny_cases(true);
    if (HasFatalFailure()) return;
  }
  // A workspace too small for the records (M = 64, K = 4160: 33 K tiles of 8768 bytes): converted
  // per CTA again, the 4 KiB never overrun (compute-sanitizer memcheck runs this test).
  DeviceBuffer small(4096);
  ASSERT_EQ(a4w4_context_set_workspace(ctx_, a4w4_cuda(0), small.get(), 4096), A4W4_SUCCESS);
  SCOPED_TRACE("a workspace too small for the records");
  for (bool prepared : {false, true})
    run_case(ctx_, rng_,
             GemmCase{64, 200, 4160, A4W4_DTYPE_F32, false, true, kTileLocalScales, prepared, 0,
                      "cuda.skinny", 0});
}

TEST_F(CudaBackend, FastAccumulationStaysWithinItsBound) {
  // A4W4_MATH_FAST_ACCUM: cuda.skinny with 128-row token tiles (M = 65..256: the one-warpgroup
  // kernel, either layout; the two-token-tile kernel on a prepared B from M = 129) runs FP8 e4m3
  // wgmmas that accumulate in the tensor cores; every other kernel computes exactly. Each element
  // is held to the exact contract's bound plus kFastAccumBound * |alpha| * D_abs, and where the
  // tensor cores lose nothing (kTileConstantScales) to the exact bound alone. Data outside the e4m3
  // window takes the exact path: narrow scales (weight rows spread over more than 11 binades: their
  // warps for every K tile), wide ones with NaN, folding rows at the E8M0 extremes (activation
  // bases outside 13..205, weight bases below 1), a wide 128-row band of B (mixed), activation rows
  // drifting by 4 binades a K tile or with outlier channels (chunks of 8 K tiles in or out of the
  // window). Every output dtype and epilogue, ragged N, partial K tiles, split K (partitions
  // starting inside a chunk), strided operands.
  set_garbage_workspace(700, 8448, 8192);
  if (HasFatalFailure()) return;
  fast_worst_ratio = 0.0;
  const a4w4_dtype outs[] = {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16};
  const auto fast_case = [&](GemmCase c) {
    c.math_mode = A4W4_MATH_FAST_ACCUM;
    c.fast_bound = c.scales == kTileConstantScales ? 0.0 : kFastAccumBound;
    run_case(ctx_, rng_, c);
  };
  int v = 0;
  for (int64_t m : {65, 128, 129, 200, 256})
    for (int64_t k : {160, 1024, 4160})
      for (int scales :
           {kTileLocalScales, kTileConstantScales, kFoldScales, kNarrowScales, kWideScales,
            kExtremeFoldScales, kMixedScales, kFoldDriftScales, kFoldOutlierScales}) {
        if ((m + k / 32 + scales) % 2 != 0 && scales != kTileLocalScales &&
            scales != kTileConstantScales)
          continue;  // quicker
        const int64_t n = v % 3 == 0 ? 1000 : (v % 3 == 1 ? 72 : 200);
        // Mostly prepared (both kernels from M = 129), every fourth case plain.
        fast_case(GemmCase{m, n, k, outs[v % 3], v % 2 == 0, v % 3 != 1, scales, v % 4 != 3, 0,
                           "cuda.skinny", v % 4 == 0 ? 32 : 0, v % 5 == 0 ? 2 : 0});
        if (HasFatalFailure()) return;
        ++v;
      }
  // Long K (each weight row's window over 64 K tiles) and more column tiles (N = 8448: one K
  // partition, D stored 8 columns at a time), chosen by the dispatcher; the one-warpgroup kernel
  // at M = 100 (long K) and over two token tiles of a plain B.
  for (int scales : {kTileLocalScales, kTileConstantScales}) {
    fast_case(GemmCase{256, 1000, 8192, A4W4_DTYPE_F32, false, false, scales, true, 0, nullptr, 0});
    fast_case(
        GemmCase{192, 8448, 1024, A4W4_DTYPE_BF16, false, false, scales, true, 0, nullptr, 0});
    fast_case(GemmCase{100, 1000, 8192, A4W4_DTYPE_F32, false, true, scales, true, 0, nullptr, 0});
    fast_case(GemmCase{256, 8448, 1024, A4W4_DTYPE_F16, false, false, scales, false, 0,
                       "cuda.skinny", 0});
    if (HasFatalFailure()) return;
  }
  // Groups of 256 rows (the grid's z) in the two-token-tile kernel, the last one full, with one
  // token tile or with a ragged one; named and chosen by the dispatcher.
  for (int64_t m : {300, 400, 512}) {
    fast_case(GemmCase{m, 200, 1024, outs[m % 3], m == 300, true, kTileLocalScales, true, 0,
                       "cuda.skinny", 0});
    fast_case(GemmCase{m, 1000, 4160, A4W4_DTYPE_BF16, false, false, kTileConstantScales, true, 0,
                       nullptr, 0});
    if (HasFatalFailure()) return;
  }
  // Every other kernel computes exactly in fast mode: the contract's bound alone.
  for (int64_t m : {1, 20, 64, 700}) {
    GemmCase c{m, 1000,    1024, A4W4_DTYPE_F32, false, true, kTileLocalScales, m != 64,
               0, nullptr, 0};
    c.math_mode = A4W4_MATH_FAST_ACCUM;
    run_case(ctx_, rng_, c);
    if (HasFatalFailure()) return;
  }
  // Above 256 rows cuda.skinny takes fast accumulation on a prepared B only.
  {
    const int64_t m = 300, n = 64, k = 256;
    const a4w4_device gpu = a4w4_cuda(0);
    DeviceBuffer a(m * k / 2), as(m * k / 32), b(n * k / 2), bs(n * k / 32), d(m * n * 4);
    a4w4_tensor ta = tensor(a.get(), A4W4_DTYPE_E2M1, m, k, k, gpu);
    a4w4_tensor tas = tensor(as.get(), A4W4_DTYPE_E8M0, m, k / 32, k / 32, gpu);
    a4w4_tensor tb = tensor(b.get(), A4W4_DTYPE_E2M1, n, k, k, gpu);
    a4w4_tensor tbs = tensor(bs.get(), A4W4_DTYPE_E8M0, n, k / 32, k / 32, gpu);
    a4w4_tensor td = tensor(d.get(), A4W4_DTYPE_F32, m, n, n, gpu);
    a4w4_gemm_options options;
    a4w4_gemm_options_init(&options);
    options.kernel = "cuda.skinny";
    for (a4w4_math_mode mode : {A4W4_MATH_EXACT, A4W4_MATH_FAST_ACCUM}) {
      options.math_mode = mode;  // a plain B: refused in either mode
      EXPECT_EQ(a4w4_gemm(ctx_, &ta, &tas, &tb, &tbs, nullptr, nullptr, &td, &options, nullptr),
                A4W4_ERROR_KERNEL_NOT_APPLICABLE);
      EXPECT_NE(std::string(a4w4_last_error_message()).find("only with fast accumulation"),
                std::string::npos)
          << a4w4_last_error_message();
    }
  }
  std::printf(
      "fast accumulation: largest (|D - reference| - exact bound) / (|alpha| * D_abs) = %.3g "
      "(bound %.3g)\n",
      fast_worst_ratio, kFastAccumBound);
}

void CudaBackend::run_skinny_cases(bool workspace) {
  // cuda.skinny: every activation-row count it pads to (8, 16, 32, 64, 128) with M below, at and
  // past each, and M over two token tiles of 128 (the last one ragged or full; with a prepared B
  // both in one CTA sharing one weight conversion); plain and prepared B; K
  // from one block to many K tiles, partial last tiles (K % 128 != 0) and splits of the K tiles
  // over a cluster; ragged N (a column tile past N, warps without rows); narrow scales (the exact
  // per-block path), wide ones with NaN (exact, NaN kept), tile-local ones (the folded path mixed
  // with exact tiles) and folding scales at the E8M0 extremes (fp32's range check fails: exact);
  // scales with which every K tile folds (the fast path throughout) and which drift by 4 binades
  // from one K tile to the next in some rows; every epilogue and output dtype; strided operands and
  // activation rows off 16-byte alignment.
  const a4w4_dtype outs[] = {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16};
  int v = 0;
  for (int64_t m : {1, 5, 8, 9, 16, 17, 32, 33, 57, 64, 65, 128, 129, 255, 256})
    for (int64_t k : {32, 160, 1024, 4160})
      for (int scales : {kTileLocalScales, kNarrowScales, kWideScales, kExtremeFoldScales,
                         kFoldScales, kFoldDriftScales}) {
        if ((m + k / 32 + scales) % 2 != 0 && scales != kTileLocalScales && scales != kFoldScales)
          continue;  // quicker
        if (m > 64 && !workspace) continue;
        const bool prepared = v % 2 == 1;
        const int64_t n = v % 3 == 0 ? 1000 : (v % 3 == 1 ? 72 : 200);
        GemmCase c{m,      n,        k, outs[v % 3],   v % 2 == 0,          v % 3 != 1,
                   scales, prepared, 0, "cuda.skinny", v % 4 == 0 ? 32 : 0, v % 5 == 0 ? 2 : 0};
        run_case(ctx_, rng_, c);
        if (HasFatalFailure()) return;
        ++v;
      }
  // Long K over split-K clusters on few column tiles (N = 64: one tile), both layouts.
  for (bool prepared : {false, true})
    for (int64_t m : {16, 64, 200}) {
      if (m > 64 && !workspace) continue;
      for (int scales : {kTileLocalScales, kFoldScales})
        run_case(ctx_, rng_,
                 GemmCase{m, 64, 16384, A4W4_DTYPE_F32, false, true, scales, prepared, 0,
                          "cuda.skinny", 0});
    }
  // A prepared B whose K range ends in three whole tiles and a partial one (K = 928: 8 K tiles,
  // two partitions of 4), which the main loop (four tiles a round, whole tiles only) leaves to
  // the steps after it.
  for (int64_t m : {8, 16, 32, 64})
    for (int scales : {kTileLocalScales, kFoldScales})
      run_case(
          ctx_, rng_,
          GemmCase{m, 200, 928, A4W4_DTYPE_F32, m == 16, true, scales, true, 0, "cuda.skinny", 0});
  // The deep kernels (4 K tiles of weights ahead, launch_gemm: at most two CTAs per SM, partitions
  // of 16 K tiles or more; most cases above split K into shorter ones): K = 16448 (128 whole tiles
  // and a partial one) in eight partitions of 17 on 4 column tiles (N = 200, the last ragged), at
  // every token tile up to 64 rows, both layouts. Then grids of more than two CTAs per SM (N =
  // 9000: 141 column tiles in two partitions, 282 CTAs on 132 SMs), which take the kernels with 2
  // K tiles ahead at any partition length.
  for (int64_t m : {8, 16, 32, 64})
    run_case(ctx_, rng_,
             GemmCase{m, 200, 16448, A4W4_DTYPE_F32, m == 16, true,
                      m == 64 ? kFoldDriftScales : kTileLocalScales, m == 8 || m == 64, 0,
                      "cuda.skinny", 0});
  for (int64_t m : {8, 16, 32, 64})
    run_case(ctx_, rng_,
             GemmCase{m, 9000, 1280, A4W4_DTYPE_BF16, m == 32, true,
                      m % 16 == 0 ? kTileLocalScales : kFoldScales, m % 16 != 0 || m == 32, 0,
                      "cuda.skinny", 0});
  // Eight activation rows at long K over many column tiles (N = 8192, K = 12288: eight partitions
  // where the grid makes 1.5 waves, choose_splits), both layouts.
  for (bool prepared : {false, true})
    run_case(ctx_, rng_,
             GemmCase{8, 8192, 12288, A4W4_DTYPE_BF16, false, true, kFoldScales, prepared, 0,
                      "cuda.skinny", 0});
  // More column tiles than two CTAs per SM hold (N = 17000: 266 tiles): the staged 64-row kernel
  // on a plain B then runs its three-CTA instantiation; at M = 256 on a prepared B, more column
  // tiles than the GPU holds at once (split by waves) of two token tiles per CTA.
  if (workspace)
    for (int64_t m : {40, 64, 256})
      for (int64_t k : {160, 1024})
        for (int scales : {kFoldScales, kWideScales}) {
          if (m == 256 && k > 160) continue;  // quicker
          run_case(ctx_, rng_,
                   GemmCase{m, 17000, k, A4W4_DTYPE_BF16, true, false, scales, m == 256, 0,
                            "cuda.skinny", 0});
        }
  // One K partition over many column tiles (N = 8448: 132 tiles) with nothing to add to the
  // product: D is stored 8 columns at a time from each CTA's sums, and with its rows off 16 bytes
  // (pad 2, a prepared B: a plain one needs rows of whole blocks) two at a time; 128-row token
  // tiles on a plain B (M = 100) and two of them sharing a conversion on a prepared B (M = 200);
  // every output dtype.
  if (workspace)
    for (int64_t m : {100, 200})
      for (a4w4_dtype out : outs)
        for (int64_t pad : {0, 2}) {
          if (pad == 2 && (out != A4W4_DTYPE_BF16 || m != 200)) continue;
          run_case(ctx_, rng_,
                   GemmCase{m, 8448, 256, out, false, false, kTileLocalScales, m == 200, 0,
                            "cuda.skinny", pad});
          if (HasFatalFailure()) return;
        }
}

TEST_F(CudaBackend, DecodeShapesOfRealModels) {
  // Llama-3-70B-like projections at decode sizes (smaller N and K keep the CPU reference quick).
  for (int64_t m : {1, 4, 16, 32, 64})
    run_case(ctx_, rng_,
             GemmCase{m, 1024, 8192, A4W4_DTYPE_BF16, false, false, kTileLocalScales, true, 0,
                      nullptr, 0});
}

TEST_F(CudaBackend, DecodeFoldedAndExactPathsAcrossSplits) {
  // Tile-local scales take the folded path, mixed with exact tiles; splits of 33 blocks put
  // partition ends inside K tiles; every activation-tile count (M up to 8, 16, 32, 64).
  for (int64_t m : {1, 8, 13, 32, 57})
    for (int split : {0, 1, 2, 3, 5})
      for (bool prepared : {false, true}) {
        const int64_t k = prepared ? 1056 : 1024;  // a plain B needs K % 128 == 0
        run_case(ctx_, rng_,
                 GemmCase{m, 80, k, A4W4_DTYPE_F32, m % 2 == 1, true, kTileLocalScales, prepared,
                          split, "cuda.decode", 0});
        if (HasFatalFailure()) return;
      }
  // Folding rows at the E8M0 extremes: A's bases 0..3 and B's rows 128..255 at 248..251, where
  // fp32 holds the products but the promotion's constant (fold::TileSumScale) does not, so those
  // tiles take the exact path; B's rows 0..127 (bases 0..3) fail fp32's range check.
  for (bool prepared : {false, true})
    run_case(ctx_, rng_,
             GemmCase{8, 300, 1024, A4W4_DTYPE_F32, false, true, kExtremeFoldScales, prepared, 0,
                      "cuda.decode", 0});
}

TEST_F(CudaBackend, Bf16FamilyMatchesTheReference) {
  // Both tile widths. Tile-local scales take the folded bf16 path; wide ones (0..254) the exact
  // generic tiles; ragged M and N, several K steps, every output dtype.
  const a4w4_dtype outs[] = {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16};
  int v = 0;
  for (const char* kernel : {"cuda.bf16_128x256", "cuda.bf16_128x128"}) {
    for (int64_t m : {65, 128, 257})
      for (int64_t n : {128, 200, 456})
        for (int64_t k : {64, 320, 1024})
          for (int scales : {kTileLocalScales, kNarrowScales, kWideScales}) {
            if ((m + n + k + scales) % 2 != 0) continue;  // half of the grid keeps it quick
            run_case(ctx_, rng_,
                     GemmCase{m, n, k, outs[v % 3], v % 2 == 0, v % 3 != 1, scales, false, 0,
                              kernel, 0});
            ++v;
            if (HasFatalFailure()) return;
          }
    // Persistent loops: more tiles than SMs (144 tiles of 128 x 128 for 1000 x 2300 and 162 of
    // 128 x 256 for 2304 x 2056), foldable and exact tiles mixed in one CTA's sequence, long K
    // (many turns of the stage rings), padded rows (TMA row stride beyond the row; scale rows not
    // 16-byte aligned), M past a consumer warpgroup's rows (130).
    const GemmCase large[] = {
        {1000, 2300, 1024, A4W4_DTYPE_BF16, true, true, kMixedScales, false, 0, kernel, 0},
        {2304, 2056, 256, A4W4_DTYPE_F32, false, true, kMixedScales, false, 0, kernel, 0},
        {300, 520, 4096, A4W4_DTYPE_F16, true, false, kTileLocalScales, false, 0, kernel, 0},
        {200, 136, 512, A4W4_DTYPE_F32, true, true, kTileLocalScales, false, 0, kernel, 32},
        {130, 456, 320, A4W4_DTYPE_BF16, true, true, kMixedScales, false, 0, kernel, 0},
    };
    for (const GemmCase& c : large) {
      run_case(ctx_, rng_, c);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(CudaBackend, Int8FamilyMatchesTheReference) {
  // cuda.int8_128x128, which stages A and B in the context's workspace (sized here for the largest
  // case). kFoldScales take the folded int8 path (every tile folds); kNarrowScales and kWideScales
  // (spreads over 4 binades, and a few NaN scales) the exact generic tiles; ragged M and N, K not a
  // multiple of 128 (32 and 96: one partial K tile; 320: a partial last one; scale rows of 1 or 3
  // bytes, read bytewise), every output dtype. Every kernel of the family: cuda.int8_128x128
  // stages A and B; cuda.int8_128x192 the same on 192-wide tiles, which straddle B's 128-row
  // blocks (a tile whose blocks fold and do not fold stores only the columns of those that do, the
  // bf16 launch the others: kFoldMixedScales' B rows 256..383, kExtremeFoldScales' alternating
  // blocks); cuda.int8_bconv_128x128 stages A and converts B's codes in the GEMM (a plain B only).
  // Both leave their unfolded tiles to the bf16 family: K % 64 == 0 only (they skip the others).
  for (const char* kernel : {"cuda.int8_128x128", "cuda.int8_128x192", "cuda.int8_bconv_128x128"}) {
    SCOPED_TRACE(kernel);
    run_int8_family(kernel);
    if (HasFatalFailure()) return;
  }
}

void CudaBackend::run_int8_family(const char* kernel) {
  const bool converts_b = std::string(kernel) == "cuda.int8_bconv_128x128";
  const bool needs_bf16 = converts_b || std::string(kernel) == "cuda.int8_128x192";
  const auto applies = [&](const GemmCase& c) {
    return (!converts_b || !c.prepared) && (!needs_bf16 || c.k % 64 == 0);
  };
  set_garbage_workspace(2304, 2300, 4096);
  if (HasFatalFailure()) return;
  const a4w4_dtype outs[] = {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16};
  int v = 0;
  // The smallest cases first, so a failure names the simplest one.
  for (int64_t k : {128, 32, 96, 256, 320, 1024})
    for (int64_t m : {65, 128, 257})
      for (int64_t n : {128, 200, 456})
        for (int scales : {kFoldScales, kNarrowScales, kWideScales}) {
          if (scales != kFoldScales && (m + n + k + scales) % 2 != 0) continue;  // keeps it quick
          GemmCase c{m, n, k, outs[v % 3], v % 2 == 0, v % 3 != 1, scales, false, 0, kernel, 0};
          ++v;
          if (!applies(c)) continue;
          run_case(ctx_, rng_, c);
          if (HasFatalFailure()) return;
          // Every fifth case again on a weight prepared with its int8 form (B's staging read from
          // the weight: ragged N, partial K tiles, unfolded tiles on the bf16 or generic path).
          if (v % 5 == 0 && !converts_b) {
            c.prepared = true, c.prepared_layout = A4W4_LAYOUT_PREPARED_V2_INT8;
            run_case(ctx_, rng_, c);
            if (HasFatalFailure()) return;
          }
        }
  // Persistent loops: more tiles than SMs (144 tiles for 1000 x 2300, 306 for 2304 x 2056), folded
  // and exact tiles mixed in one CTA's sequence (kFoldMixedScales, with NaN in the exact ones),
  // long K (many turns of the rings), padded rows (TMA row stride beyond the row; 20-byte scale
  // rows), M past a consumer warpgroup's rows (130), and bases at the E8M0 extremes (each row
  // folds, but 2^(base - 127) or the products leave fp32's normal range: exact path).
  const GemmCase large[] = {
      // N below the tile (TMA boxes past the end of B), K = 32 beside it.
      {70, 17, 128, A4W4_DTYPE_F32, false, false, kFoldScales, false, 0, kernel, 0},
      // 16-bit D without C or bias: whole tiles in 16-byte stores (the quad's lanes exchange
      // their pairs); D's rows 16-byte aligned, or not (N = 130 + 32 padding: the general loop).
      {257, 456, 256, A4W4_DTYPE_F16, false, false, kFoldScales, false, 0, kernel, 0},
      {257, 456, 256, A4W4_DTYPE_BF16, false, false, kFoldScales, true, 0, kernel, 0},
      {257, 130, 256, A4W4_DTYPE_BF16, false, false, kFoldScales, false, 0, kernel, 32},
      {65, 72, 32, A4W4_DTYPE_F32, true, true, kFoldScales, false, 0, kernel, 0},
      {1000, 2300, 1024, A4W4_DTYPE_BF16, true, true, kFoldMixedScales, false, 0, kernel, 0},
      {2304, 2056, 256, A4W4_DTYPE_F32, false, true, kFoldScales, false, 0, kernel, 0},
      {2304, 2056, 256, A4W4_DTYPE_F32, false, true, kFoldMixedScales, false, 0, kernel, 0},
      {300, 520, 4096, A4W4_DTYPE_F16, true, false, kFoldScales, false, 0, kernel, 0},
      {200, 136, 512, A4W4_DTYPE_F32, true, true, kFoldScales, false, 0, kernel, 32},
      {130, 456, 320, A4W4_DTYPE_BF16, true, true, kFoldMixedScales, false, 0, kernel, 0},
      {256, 256, 512, A4W4_DTYPE_F32, false, false, kExtremeFoldScales, false, 0, kernel, 0},
      {384, 640, 1056, A4W4_DTYPE_F32, true, true, kFoldMixedScales, false, 0, kernel, 32},
      // Promotion per chunk of 8 K tiles and per K tile in one launch (and one CTA's sequence),
      // partial last chunks (K = 1056: 9 tiles; 2336: 19 tiles, the last partial), sums near
      // their bound.
      {520, 700, 2336, A4W4_DTYPE_F32, false, true, kFoldDriftScales, false, 0, kernel, 0},
      {1000, 2300, 1056, A4W4_DTYPE_BF16, true, false, kFoldDriftScales, false, 0, kernel, 0},
      {300, 260, 4096, A4W4_DTYPE_F32, false, false, kFoldPeakScales, false, 0, kernel, 0},
      {257, 130, 2336, A4W4_DTYPE_F32, true, true, kFoldPeakScales, false, 0, kernel, 0},
      // A with outlier channels: their blocks folded apart (a second MMA chain and factor per K
      // tile), mixed with K tiles that do not fold (rows 256..383).
      {520, 700, 2336, A4W4_DTYPE_F32, false, true, kFoldOutlierScales, false, 0, kernel, 0},
      {257, 300, 4096, A4W4_DTYPE_F16, false, false, kFoldOutlierScales, false, 0, kernel, 32},
      {130, 200, 96, A4W4_DTYPE_F32, true, false, kFoldOutlierScales, false, 0, kernel, 0},
      // A prepared B (staged from its 16 x 128 tiles): N not a multiple of 16 or of the tile, K
      // with a partial last 128-K tile (its padding blocks' zero scales must not count), folded
      // and unfolded tiles mixed (the unfolded ones on the bf16 launch at K % 64 == 0, on the
      // generic tiles at K = 96), persistent loops.
      {70, 17, 128, A4W4_DTYPE_F32, false, false, kFoldScales, true, 0, kernel, 0},
      {257, 200, 96, A4W4_DTYPE_F32, true, false, kFoldMixedScales, true, 0, kernel, 0},
      {130, 456, 320, A4W4_DTYPE_BF16, true, true, kFoldMixedScales, true, 0, kernel, 0},
      {1000, 2300, 1024, A4W4_DTYPE_F16, false, true, kFoldMixedScales, true, 0, kernel, 0},
      {300, 520, 4096, A4W4_DTYPE_F32, true, false, kFoldScales, true, 0, kernel, 0},
      {520, 700, 2336, A4W4_DTYPE_F16, true, true, kFoldDriftScales, true, 0, kernel, 0},
      {300, 260, 4096, A4W4_DTYPE_F32, false, false, kFoldPeakScales, true, 0, kernel, 0},
      {1000, 456, 1056, A4W4_DTYPE_BF16, true, false, kFoldOutlierScales, true, 0, kernel, 0},
      // The same paths at K % 64 == 0, which every kernel of the family takes: promotion per K
      // tile and per chunk mixed with a partial last chunk (K = 2304: 18 tiles), high blocks, a
      // partial last K tile (1088), 192-wide tiles over two of B's 128-row blocks (N = 700, 456).
      {520, 700, 2304, A4W4_DTYPE_F32, false, true, kFoldDriftScales, false, 0, kernel, 0},
      {520, 700, 2304, A4W4_DTYPE_BF16, true, false, kFoldOutlierScales, true, 0, kernel, 0},
      {1000, 456, 1088, A4W4_DTYPE_F16, true, true, kFoldDriftScales, true, 0, kernel, 0},
      {257, 456, 1088, A4W4_DTYPE_F32, false, false, kFoldOutlierScales, false, 0, kernel, 32},
  };
  for (const GemmCase& c : large) {
    if (!applies(c)) continue;
    run_case(ctx_, rng_, c);
    if (HasFatalFailure()) return;
    // The prepared cases again with B's int8 form in the weight (the GEMM stages A only).
    if (c.prepared && !converts_b) {
      GemmCase int8_weight = c;
      int8_weight.prepared_layout = A4W4_LAYOUT_PREPARED_V2_INT8;
      run_case(ctx_, rng_, int8_weight);
      if (HasFatalFailure()) return;
    }
  }
}

// A [m, k] and B [n, k] of zero codes with scale 127 and an fp32 D [m, n] of 0x7F bytes on device
// 0, for the tests of what the staging kernels refuse (D must stay untouched).
struct ZeroOperands {
  int64_t m, n, k;
  DeviceBuffer a, as, b, bs, d;
  a4w4_tensor ta, tas, tb, tbs, td;
  ZeroOperands(int64_t rows, int64_t cols, int64_t depth)
      : m(rows),
        n(cols),
        k(depth),
        a(m * k / 2),
        as(m * k / 32),
        b(n * k / 2),
        bs(n * k / 32),
        d(m * n * 4) {
    const a4w4_device gpu = a4w4_cuda(0);
    EXPECT_EQ(cudaMemset(a.get(), 0, m * k / 2), cudaSuccess);
    EXPECT_EQ(cudaMemset(b.get(), 0, n * k / 2), cudaSuccess);
    EXPECT_EQ(cudaMemset(as.get(), 127, m * k / 32), cudaSuccess);
    EXPECT_EQ(cudaMemset(bs.get(), 127, n * k / 32), cudaSuccess);
    EXPECT_EQ(cudaMemset(d.get(), 0x7F, m * n * 4), cudaSuccess);
    ta = tensor(a.get(), A4W4_DTYPE_E2M1, m, k, k, gpu);
    tas = tensor(as.get(), A4W4_DTYPE_E8M0, m, k / 32, k / 32, gpu);
    tb = tensor(b.get(), A4W4_DTYPE_E2M1, n, k, k, gpu);
    tbs = tensor(bs.get(), A4W4_DTYPE_E8M0, n, k / 32, k / 32, gpu);
    td = tensor(d.get(), A4W4_DTYPE_F32, m, n, n, gpu);
  }
  a4w4_status gemm(a4w4_context ctx, const a4w4_gemm_options& options) {
    return a4w4_gemm(ctx, &ta, &tas, &tb, &tbs, nullptr, nullptr, &td, &options, nullptr);
  }
  bool untouched() const {
    std::vector<uint32_t> host(m * n);
    EXPECT_EQ(cudaMemcpy(host.data(), d.get(), m * n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (uint32_t x : host)
      if (x != 0x7F7F7F7Fu) return false;
    return true;
  }
};

TEST_F(CudaBackend, Int8WideAndBconvNeedKMultipleOf64) {
  // cuda.int8_bconv_128x128 leaves its tiles that do not fold to the bf16 family, so it takes only
  // the problems that family takes (K % 64 == 0): others are refused by name, D untouched.
  ZeroOperands z(256, 256, 96);
  size_t bytes = 0;
  ASSERT_EQ(a4w4_gemm_workspace_size(z.m, z.n, z.k, &bytes), A4W4_SUCCESS);
  DeviceBuffer workspace(bytes);
  ASSERT_EQ(a4w4_context_set_workspace(ctx_, a4w4_cuda(0), workspace.get(), bytes), A4W4_SUCCESS);
  a4w4_gemm_options options;
  a4w4_gemm_options_init(&options);
  options.kernel = "cuda.int8_bconv_128x128";
  EXPECT_EQ(z.gemm(ctx_, options), A4W4_ERROR_KERNEL_NOT_APPLICABLE);
  EXPECT_NE(std::string(a4w4_last_error_message()).find("multiple of 64"), std::string::npos)
      << a4w4_last_error_message();
  EXPECT_TRUE(z.untouched());
  // So does cuda.int8_128x192 (no room for the generic exact tiles beside its stages).
  options.kernel = "cuda.int8_128x192";
  EXPECT_EQ(z.gemm(ctx_, options), A4W4_ERROR_KERNEL_NOT_APPLICABLE);
  EXPECT_NE(std::string(a4w4_last_error_message()).find("multiple of 64"), std::string::npos)
      << a4w4_last_error_message();
  EXPECT_TRUE(z.untouched());
  // cuda.int8_128x128 takes the same problem.
  options.kernel = "cuda.int8_128x128";
  EXPECT_EQ(z.gemm(ctx_, options), A4W4_SUCCESS) << a4w4_last_error_message();
}

TEST_F(CudaBackend, StagingKernelsNeedTheContextsWorkspace) {
  // cuda.int8_128x128 stages A and B in the context's workspace: without one (or with one too
  // small, or on the call's operands) it is refused by name and never chosen; D stays untouched.
  // cuda.skinny above M = 64 is refused without one too.
  const a4w4_device gpu = a4w4_cuda(0);
  ZeroOperands z(256, 256, 256);
  const int64_t m = z.m, n = z.n, k = z.k;
  DeviceBuffer& d = z.d;
  a4w4_gemm_options options;
  a4w4_gemm_options_init(&options);
  options.kernel = "cuda.int8_128x128";
  EXPECT_EQ(z.gemm(ctx_, options), A4W4_ERROR_KERNEL_NOT_APPLICABLE);
  EXPECT_NE(std::string(a4w4_last_error_message()).find("workspace"), std::string::npos)
      << a4w4_last_error_message();
  // So is cuda.skinny above M = 64 (its 128-row token tiles stage their activations).
  options.kernel = "cuda.skinny";
  EXPECT_EQ(z.gemm(ctx_, options), A4W4_ERROR_KERNEL_NOT_APPLICABLE);
  EXPECT_NE(std::string(a4w4_last_error_message()).find("workspace"), std::string::npos)
      << a4w4_last_error_message();
  options.kernel = "cuda.int8_128x128";
  size_t bytes = 0;
  ASSERT_EQ(a4w4_gemm_workspace_size(m, n, k, &bytes), A4W4_SUCCESS);
  EXPECT_GE(bytes, static_cast<size_t>((m + n) * k));
  DeviceBuffer workspace(bytes);
  ASSERT_EQ(a4w4_context_set_workspace(ctx_, gpu, workspace.get(), bytes - 256), A4W4_SUCCESS);
  EXPECT_EQ(z.gemm(ctx_, options), A4W4_ERROR_KERNEL_NOT_APPLICABLE);
  EXPECT_NE(std::string(a4w4_last_error_message()).find(std::to_string(bytes)), std::string::npos)
      << a4w4_last_error_message();
  // The chooser takes another kernel meanwhile (never this one without its workspace).
  options.kernel = nullptr;
  EXPECT_EQ(z.gemm(ctx_, options), A4W4_SUCCESS);
  ASSERT_EQ(cudaMemset(d.get(), 0x7F, m * n * 4), cudaSuccess);
  options.kernel = "cuda.int8_128x128";
  // A workspace that overlaps an operand (here D itself).
  ASSERT_EQ(a4w4_context_set_workspace(ctx_, gpu, d.get(), m * n * 4), A4W4_SUCCESS);
  EXPECT_EQ(z.gemm(ctx_, options), A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(a4w4_last_error_message()).find("workspace"), std::string::npos)
      << a4w4_last_error_message();
  EXPECT_TRUE(z.untouched());
  // Bad workspaces are refused where they are set.
  std::vector<uint8_t> host(1024);
  EXPECT_EQ(a4w4_context_set_workspace(ctx_, gpu, host.data(), 1024), A4W4_ERROR_DEVICE_MISMATCH);
  EXPECT_EQ(a4w4_context_set_workspace(ctx_, gpu, static_cast<uint8_t*>(workspace.get()) + 16, 256),
            A4W4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a4w4_context_set_workspace(ctx_, a4w4_cuda(1000), workspace.get(), bytes),
            A4W4_ERROR_NO_DEVICE);
  // The right one: the kernel runs, and D is the product of zeros.
  ASSERT_EQ(a4w4_context_set_workspace(ctx_, gpu, workspace.get(), bytes), A4W4_SUCCESS);
  EXPECT_EQ(z.gemm(ctx_, options), A4W4_SUCCESS);
  std::vector<float> out(m * n, 1.0f);
  ASSERT_EQ(cudaMemcpy(out.data(), d.get(), m * n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (float x : out) ASSERT_EQ(x, 0.0f);
  a4w4_device device{};
  void* ptr = nullptr;
  size_t got = 0;
  ASSERT_EQ(a4w4_context_get_workspace(ctx_, &device, &ptr, &got), A4W4_SUCCESS);
  EXPECT_EQ(ptr, workspace.get());
  EXPECT_EQ(got, bytes);
  EXPECT_EQ(a4w4_context_set_workspace(ctx_, gpu, nullptr, 0), A4W4_SUCCESS);
  ASSERT_EQ(a4w4_context_get_workspace(ctx_, &device, &ptr, &got), A4W4_SUCCESS);
  EXPECT_EQ(ptr, nullptr);
  EXPECT_EQ(got, 0u);
}

TEST_F(CudaBackend, Bf16FamilyTakesAPreparedB) {
  // B in A4W4_LAYOUT_PREPARED_V2 (prepared on the GPU by run_case), both tile widths: N not a
  // multiple of 16 or of the tile (zero rows of the last 16-row group, then TMA's zero fill), K not
  // a multiple of 128 (the last K tile's padding blocks are neither scanned nor converted; K = 64
  // is one step of one K tile), foldable and exact tiles mixed, every output dtype, NaN scales
  // (run_case puts a few in), a padded A beside a prepared B, persistent loops (135 tiles of 128 x
  // 256 for 1920 x 2056, 144 of 128 x 128 for 1000 x 2300) and long K (many turns of the 2-deep
  // ring of K steps).
  for (const char* kernel : {"cuda.bf16_128x256", "cuda.bf16_128x128"}) {
    const GemmCase cases[] = {
        // Smallest first (one K tile, one or two row groups), so a failure names the simplest case.
        {65, 16, 128, A4W4_DTYPE_F32, false, false, kNarrowScales, true, 0, kernel, 0},
        {70, 17, 128, A4W4_DTYPE_F32, false, false, kNarrowScales, true, 0, kernel, 0},
        {65, 200, 320, A4W4_DTYPE_F32, true, true, kTileLocalScales, true, 0, kernel, 0},
        {128, 456, 64, A4W4_DTYPE_BF16, false, true, kTileLocalScales, true, 0, kernel, 0},
        {257, 136, 2880, A4W4_DTYPE_F16, true, false, kTileLocalScales, true, 0, kernel, 0},
        {130, 456, 320, A4W4_DTYPE_BF16, true, true, kMixedScales, true, 0, kernel, 0},
        {200, 72, 1024, A4W4_DTYPE_F32, false, false, kWideScales, true, 0, kernel, 0},
        {300, 520, 4096, A4W4_DTYPE_F16, true, true, kNarrowScales, true, 0, kernel, 32},
        {1000, 2300, 512, A4W4_DTYPE_BF16, true, true, kMixedScales, true, 0, kernel, 0},
        {1920, 2056, 320, A4W4_DTYPE_F32, false, true, kMixedScales, true, 0, kernel, 0},
        {384, 1000, 192, A4W4_DTYPE_F16, false, true, kMixedScales, true, 0, kernel, 0},
    };
    for (const GemmCase& c : cases) {
      run_case(ctx_, rng_, c);
      if (HasFatalFailure()) return;
    }
  }
}

// The bytes a4w4_prepared_weight_size gives for B and for its scales.
std::pair<size_t, size_t> prepared_sizes(int64_t n, int64_t k, a4w4_layout layout) {
  size_t weight_bytes = 0, scale_bytes = 0;
  EXPECT_EQ(a4w4_prepared_weight_size(n, k, layout, &weight_bytes, &scale_bytes), A4W4_SUCCESS);
  return {weight_bytes, scale_bytes};
}

// An M x N x K problem on GPU 0 with B in a prepared layout, its data and scales starting `offset`
// bytes into their buffers; every value zero and every scale 127, F32 D.
struct PreparedGemm {
  PreparedGemm(int64_t m, int64_t n, int64_t k, a4w4_layout layout, size_t offset = 0)
      : sizes(prepared_sizes(n, k, layout)),
        a(m * k / 2),
        as(m * k / 32),
        pw(sizes.first + offset),
        ps(sizes.second + offset),
        d(m * n * 4) {
    const a4w4_device gpu = a4w4_cuda(0);
    EXPECT_EQ(cudaMemset(a.get(), 0, m * k / 2), cudaSuccess);
    EXPECT_EQ(cudaMemset(as.get(), 127, m * k / 32), cudaSuccess);
    EXPECT_EQ(cudaMemset(pw.get(), 0, sizes.first + offset), cudaSuccess);
    EXPECT_EQ(cudaMemset(ps.get(), 127, sizes.second + offset), cudaSuccess);
    ta = tensor(a.get(), A4W4_DTYPE_E2M1, m, k, k, gpu);
    tas = tensor(as.get(), A4W4_DTYPE_E8M0, m, k / 32, k / 32, gpu);
    tb = tensor(static_cast<uint8_t*>(pw.get()) + offset, A4W4_DTYPE_E2M1, n, k, 0, gpu);
    tbs = tensor(static_cast<uint8_t*>(ps.get()) + offset, A4W4_DTYPE_E8M0, n, k / 32, 0, gpu);
    tb.layout = tbs.layout = layout;
    td = tensor(d.get(), A4W4_DTYPE_F32, m, n, n, gpu);
  }
  a4w4_status run(a4w4_context ctx, const char* kernel) const {
    a4w4_gemm_options options;
    a4w4_gemm_options_init(&options);
    options.kernel = kernel;
    return a4w4_gemm(ctx, &ta, &tas, &tb, &tbs, nullptr, nullptr, &td, &options, nullptr);
  }
  std::pair<size_t, size_t> sizes;
  DeviceBuffer a, as, pw, ps, d;
  a4w4_tensor ta{}, tas{}, tb{}, tbs{}, td{};
};

TEST_F(CudaBackend, DispatcherSendsAPreparedBAtLargeMToTheBf16Family) {
  // Before the bf16 family took prepared weights, M >= 65 with a prepared B fell back to
  // cuda.generic (about 10x slower).
  const PreparedGemm g(256, 512, 1024, A4W4_LAYOUT_PREPARED_V2);
  a4w4_gemm_options options;
  a4w4_gemm_options_init(&options);
  a4w4_gemm_choice choice{};
  choice.struct_size = sizeof choice;
  ASSERT_EQ(a4w4_gemm_choose(ctx_, &g.ta, &g.tas, &g.tb, &g.tbs, nullptr, nullptr, &g.td, &options,
                             &choice),
            A4W4_SUCCESS)
      << a4w4_last_error_message();
  EXPECT_EQ(std::string(choice.kernel).rfind("cuda.bf16_", 0), 0u) << choice.kernel;
}

TEST_F(CudaBackend, Bf16FamilyRefusesAMisalignedPreparedB) {
  // A prepared B 4 bytes past a 16-byte boundary cannot be a TMA base: refused with the reason, and
  // the dispatcher runs another kernel.
  const PreparedGemm g(100, 64, 256, A4W4_LAYOUT_PREPARED_V2, 4);
  EXPECT_EQ(g.run(ctx_, "cuda.bf16_128x128"), A4W4_ERROR_KERNEL_NOT_APPLICABLE);
  EXPECT_NE(std::string(a4w4_last_error_message()).find("16 bytes"), std::string::npos)
      << a4w4_last_error_message();
  EXPECT_EQ(g.run(ctx_, nullptr), A4W4_SUCCESS) << a4w4_last_error_message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(CudaBackend, Bf16FamilyRefusesRowsTmaCannotLoad) {
  // Rows of 65 bytes (130 elements): TMA needs 16-byte strides, so the bf16 family refuses and the
  // dispatcher runs another kernel.
  const a4w4_device gpu = a4w4_cuda(0);
  DeviceBuffer a(200 * 65), as(200 * 4), b(128 * 65), bs(128 * 4), d(200 * 128 * 4);
  a4w4_tensor ta = tensor(a.get(), A4W4_DTYPE_E2M1, 200, 128, 130, gpu);
  a4w4_tensor tas = tensor(as.get(), A4W4_DTYPE_E8M0, 200, 4, 4, gpu);
  a4w4_tensor tb = tensor(b.get(), A4W4_DTYPE_E2M1, 128, 128, 130, gpu);
  a4w4_tensor tbs = tensor(bs.get(), A4W4_DTYPE_E8M0, 128, 4, 4, gpu);
  a4w4_tensor td = tensor(d.get(), A4W4_DTYPE_F32, 200, 128, 128, gpu);
  a4w4_gemm_options options;
  a4w4_gemm_options_init(&options);
  options.kernel = "cuda.bf16_128x128";
  EXPECT_EQ(a4w4_gemm(ctx_, &ta, &tas, &tb, &tbs, nullptr, nullptr, &td, &options, nullptr),
            A4W4_ERROR_KERNEL_NOT_APPLICABLE);
  EXPECT_NE(std::string(a4w4_last_error_message()).find("16 bytes"), std::string::npos)
      << a4w4_last_error_message();
}

TEST_F(CudaBackend, ExplicitKernelNamesAreHonouredOrRefused) {
  const a4w4_device gpu = a4w4_cuda(0);
  DeviceBuffer a(100 * 64), as(100 * 4), b(64 * 64), bs(64 * 4), d(100 * 64 * 4);
  a4w4_tensor ta = tensor(a.get(), A4W4_DTYPE_E2M1, 100, 128, 128, gpu);
  a4w4_tensor tas = tensor(as.get(), A4W4_DTYPE_E8M0, 100, 4, 4, gpu);
  a4w4_tensor tb = tensor(b.get(), A4W4_DTYPE_E2M1, 64, 128, 128, gpu);
  a4w4_tensor tbs = tensor(bs.get(), A4W4_DTYPE_E8M0, 64, 4, 4, gpu);
  a4w4_tensor td = tensor(d.get(), A4W4_DTYPE_F32, 100, 64, 64, gpu);
  a4w4_gemm_options options;
  a4w4_gemm_options_init(&options);
  options.kernel = "cuda.decode";  // M = 100 is above its limit
  EXPECT_EQ(a4w4_gemm(ctx_, &ta, &tas, &tb, &tbs, nullptr, nullptr, &td, &options, nullptr),
            A4W4_ERROR_KERNEL_NOT_APPLICABLE);
  EXPECT_NE(std::string(a4w4_last_error_message()).find("decode"), std::string::npos);
  options.kernel = "cpu.reference";
  EXPECT_EQ(a4w4_gemm(ctx_, &ta, &tas, &tb, &tbs, nullptr, nullptr, &td, &options, nullptr),
            A4W4_ERROR_KERNEL_NOT_APPLICABLE);
  options.kernel = "cuda.nope";
  EXPECT_EQ(a4w4_gemm(ctx_, &ta, &tas, &tb, &tbs, nullptr, nullptr, &td, &options, nullptr),
            A4W4_ERROR_KERNEL_NOT_FOUND);
}

TEST_F(CudaBackend, PointerKindsAndDevicesAreChecked) {
  const a4w4_device gpu = a4w4_cuda(0);
  std::vector<uint8_t> host(64 * 64);
  DeviceBuffer dev(64 * 64 * 4), scales(64 * 4), out(64 * 64 * 4);
  // Host memory described as CUDA memory.
  a4w4_tensor ta = tensor(host.data(), A4W4_DTYPE_E2M1, 64, 128, 128, gpu);
  a4w4_tensor tas = tensor(scales.get(), A4W4_DTYPE_E8M0, 64, 4, 4, gpu);
  a4w4_tensor tb = tensor(dev.get(), A4W4_DTYPE_E2M1, 64, 128, 128, gpu);
  a4w4_tensor td = tensor(out.get(), A4W4_DTYPE_F32, 64, 64, 64, gpu);
  EXPECT_EQ(a4w4_gemm(ctx_, &ta, &tas, &tb, &tas, nullptr, nullptr, &td, nullptr, nullptr),
            A4W4_ERROR_DEVICE_MISMATCH);
  EXPECT_NE(std::string(a4w4_last_error_message()).find("a:"), std::string::npos)
      << a4w4_last_error_message();
  // Device memory described as CPU memory.
  const a4w4_device cpu = a4w4_cpu();
  std::vector<float> x(64 * 128);
  a4w4_tensor tx = tensor(x.data(), A4W4_DTYPE_F32, 64, 128, 128, cpu);
  a4w4_tensor tq = tensor(dev.get(), A4W4_DTYPE_E2M1, 64, 128, 128, cpu);
  std::vector<uint8_t> hs(64 * 4);
  a4w4_tensor ts = tensor(hs.data(), A4W4_DTYPE_E8M0, 64, 4, 4, cpu);
  EXPECT_EQ(a4w4_quantize(ctx_, &tx, &tq, &ts, A4W4_SCALE_RCEIL, nullptr),
            A4W4_ERROR_DEVICE_MISMATCH);
  // An ordinal past the last device.
  int count = 0;
  ASSERT_EQ(a4w4_device_count(A4W4_BACKEND_CUDA, &count), A4W4_SUCCESS);
  ta = tensor(dev.get(), A4W4_DTYPE_E2M1, 64, 128, 128, a4w4_cuda(count));
  tas.device = tb.device = td.device = a4w4_cuda(count);
  EXPECT_EQ(a4w4_gemm(ctx_, &ta, &tas, &tb, &tas, nullptr, nullptr, &td, nullptr, nullptr),
            A4W4_ERROR_NO_DEVICE);
}

// Random inputs with every class the quantizer distinguishes: wide exponents, subnormals, zero
// and negative-zero blocks, NaN and Inf blocks.
std::vector<float> adversarial_floats(std::mt19937_64& rng, size_t count) {
  std::vector<float> x(count);
  std::uniform_int_distribution<int> exponent(-140, 127), kind(0, 99);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (size_t block = 0; block < count / 32; ++block) {
    const int k = kind(rng);
    const int base = exponent(rng);
    for (size_t i = 0; i < 32; ++i) {
      float v =
          std::ldexp(mant(rng), std::max(-149, std::min(127, base - static_cast<int>(rng() % 12))));
      if (rng() & 1) v = -v;
      if (k == 0) v = (i % 2) ? -0.0f : 0.0f;
      if (k == 1 && i == 7) v = NAN;
      if (k == 2 && i == 3) v = -INFINITY;
      if (k == 3) v = std::ldexp(static_cast<float>(rng() % 1000), -149);  // subnormals
      if (k == 4) v = 6.0f * std::ldexp(1.0f, base / 4) * static_cast<float>(i % 8) / 4.0f;  // ties
      if (k == 5) {  // one ulp either side of a tie: the fp32 path's round-to-odd matters here
        const float tie = 6.0f * std::ldexp(1.0f, base / 4) * static_cast<float>(i % 8 + 1) / 8.0f;
        v = std::nextafter(tie, (i / 8) % 2 ? INFINITY : 0.0f);
      }
      x[block * 32 + i] = v;
    }
  }
  return x;
}

uint16_t to_bf16_truncating(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

uint16_t to_f16(float f) {  // round to nearest even, enough for making test inputs
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7E00;
  if (a >= 65520.0f) return sign | 0x7C00;
  if (a < std::ldexp(1.0f, -14))
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int man = static_cast<int>(std::nearbyint(m * 2048.0f)) - 1024;
  if (man == 1024) man = 0, ++e;
  return static_cast<uint16_t>(sign | ((e + 14) << 10) | man);
}

TEST_F(CudaBackend, QuantizeIsBitIdenticalToTheReference) {
  const a4w4_device cpu = a4w4_cpu(), gpu = a4w4_cuda(0);
  for (a4w4_dtype dtype : {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16}) {
    for (a4w4_scale_mode mode : {A4W4_SCALE_FLOOR, A4W4_SCALE_RCEIL, A4W4_SCALE_EVEN}) {
      // cols 160: 5 blocks a row, so a warp's 32 blocks cross rows and the last warp is partial;
      // pad 3: rows off 16-byte alignment (scalar loads and stores).
      for (const auto& [cols, pad] : {std::pair<int64_t, int64_t>{1024, 0}, {160, 0}, {1024, 3}}) {
        SCOPED_TRACE(std::string(a4w4_dtype_name(dtype)) + " " + a4w4_scale_mode_name(mode) +
                     " cols " + std::to_string(cols) + " pad " + std::to_string(pad));
        const int64_t rows = 37, stride = cols + pad;
        const std::vector<float> values = adversarial_floats(rng_, rows * stride);
        std::vector<uint8_t> x(values.size() * dtype_size(dtype));
        for (size_t i = 0; i < values.size(); ++i) {
          if (dtype == A4W4_DTYPE_F32) {
            std::memcpy(&x[4 * i], &values[i], 4);
          } else {
            const uint16_t h =
                dtype == A4W4_DTYPE_BF16 ? to_bf16_truncating(values[i]) : to_f16(values[i]);
            std::memcpy(&x[2 * i], &h, 2);
          }
        }
        std::vector<uint8_t> q_cpu(rows * cols / 2), s_cpu(rows * cols / 32);
        a4w4_tensor tx = tensor(x.data(), dtype, rows, cols, stride, cpu);
        a4w4_tensor tq = tensor(q_cpu.data(), A4W4_DTYPE_E2M1, rows, cols, cols, cpu);
        a4w4_tensor ts = tensor(s_cpu.data(), A4W4_DTYPE_E8M0, rows, cols / 32, cols / 32, cpu);
        ASSERT_EQ(a4w4_quantize(ctx_, &tx, &tq, &ts, mode, nullptr), A4W4_SUCCESS);

        DeviceBuffer gx(x.size()), gq(q_cpu.size()), gs(s_cpu.size());
        gx.upload(x);
        tx = tensor(gx.get(), dtype, rows, cols, stride, gpu);
        tq = tensor(gq.get(), A4W4_DTYPE_E2M1, rows, cols, cols, gpu);
        ts = tensor(gs.get(), A4W4_DTYPE_E8M0, rows, cols / 32, cols / 32, gpu);
        ASSERT_EQ(a4w4_quantize(ctx_, &tx, &tq, &ts, mode, nullptr), A4W4_SUCCESS)
            << a4w4_last_error_message();
        EXPECT_EQ(gq.download<uint8_t>(q_cpu.size()), q_cpu);
        EXPECT_EQ(gs.download<uint8_t>(s_cpu.size()), s_cpu);

        // Dequantize both ways, every output dtype.
        for (a4w4_dtype out : {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16}) {
          std::vector<uint8_t> y_cpu(rows * cols * dtype_size(out));
          a4w4_tensor hq = tensor(q_cpu.data(), A4W4_DTYPE_E2M1, rows, cols, cols, cpu);
          a4w4_tensor hs = tensor(s_cpu.data(), A4W4_DTYPE_E8M0, rows, cols / 32, cols / 32, cpu);
          a4w4_tensor hy = tensor(y_cpu.data(), out, rows, cols, cols, cpu);
          ASSERT_EQ(a4w4_dequantize(ctx_, &hq, &hs, &hy, nullptr), A4W4_SUCCESS);
          DeviceBuffer gy(y_cpu.size());
          a4w4_tensor dy = tensor(gy.get(), out, rows, cols, cols, gpu);
          ASSERT_EQ(a4w4_dequantize(ctx_, &tq, &ts, &dy, nullptr), A4W4_SUCCESS)
              << a4w4_last_error_message();
          EXPECT_EQ(gy.download<uint8_t>(y_cpu.size()), y_cpu) << a4w4_dtype_name(out);
        }
      }
    }
  }
}

TEST_F(CudaBackend, PreparedWeightMatchesTheCpuLayout) {
  for (a4w4_layout layout : {A4W4_LAYOUT_PREPARED_V1, A4W4_LAYOUT_PREPARED_V2}) {
    SCOPED_TRACE("layout " + std::to_string(layout));
    expect_prepared_weight_matches_the_cpu(layout);
    if (HasFailure()) return;
  }
}

void CudaBackend::expect_prepared_weight_matches_the_cpu(a4w4_layout layout) {
  const a4w4_device cpu = a4w4_cpu(), gpu = a4w4_cuda(0);
  const int64_t n = 77, k = 416;  // neither a multiple of the 16 x 128 tile
  const Packed b = random_packed(rng_, n, k, 0, true, 0.01);
  size_t wbytes = 0, sbytes = 0;
  ASSERT_EQ(a4w4_prepared_weight_size(n, k, layout, &wbytes, &sbytes), A4W4_SUCCESS);
  std::vector<uint8_t> pw(wbytes, 0x5A), ps(sbytes, 0x5A);
  a4w4_tensor tb = tensor((void*)b.data.data(), A4W4_DTYPE_E2M1, n, k, k, cpu);
  a4w4_tensor tbs = tensor((void*)b.scales.data(), A4W4_DTYPE_E8M0, n, k / 32, k / 32, cpu);
  a4w4_tensor tpw = tensor(pw.data(), A4W4_DTYPE_E2M1, n, k, 0, cpu);
  a4w4_tensor tps = tensor(ps.data(), A4W4_DTYPE_E8M0, n, k / 32, 0, cpu);
  tpw.layout = tps.layout = layout;
  ASSERT_EQ(a4w4_prepare_weight(ctx_, &tb, &tbs, &tpw, &tps, nullptr), A4W4_SUCCESS);

  DeviceBuffer gb(b.data.size()), gbs(b.scales.size()), gpw(wbytes), gps(sbytes);
  gb.upload(b.data), gbs.upload(b.scales);
  ASSERT_EQ(cudaMemset(gpw.get(), 0xA5, wbytes), cudaSuccess);
  tb = tensor(gb.get(), A4W4_DTYPE_E2M1, n, k, k, gpu);
  tbs = tensor(gbs.get(), A4W4_DTYPE_E8M0, n, k / 32, k / 32, gpu);
  tpw = tensor(gpw.get(), A4W4_DTYPE_E2M1, n, k, 0, gpu);
  tps = tensor(gps.get(), A4W4_DTYPE_E8M0, n, k / 32, 0, gpu);
  tpw.layout = tps.layout = layout;
  ASSERT_EQ(a4w4_prepare_weight(ctx_, &tb, &tbs, &tpw, &tps, nullptr), A4W4_SUCCESS)
      << a4w4_last_error_message();
  EXPECT_EQ(gpw.download<uint8_t>(wbytes), pw);
  EXPECT_EQ(gps.download<uint8_t>(sbytes), ps);

  // A plain tensor passed where a prepared one is expected (or mixed) is refused.
  tbs.layout = layout;
  a4w4_tensor td = tensor(gpw.get(), A4W4_DTYPE_F32, 1, n, n, gpu);
  EXPECT_EQ(a4w4_gemm(ctx_, &tb, &tbs, &tb, &tbs, nullptr, nullptr, &td, nullptr, nullptr),
            A4W4_ERROR_UNSUPPORTED_LAYOUT);
}

TEST_F(CudaBackend, AnInt8PreparedWeightHoldsVersion2AndItsInt8Form) {
  // A4W4_LAYOUT_PREPARED_V2_INT8 made on the GPU (the staging pass) and on the CPU (its host
  // port, checked against the documentation by Gemm.Int8WeightFormHoldsTheDocumentedValues): the
  // same bytes, alignment gaps included, over garbage-filled buffers; the first bytes and the
  // scales are version 2's; preparing twice gives the same bytes; the CPU backend reads a host copy
  // as version 2 (the same D, bit for bit, as the plain B on cpu.reference). Ragged N and K, tiles
  // that fold, chunks that do not, tiles that do not fold (kFoldMixedScales and kFoldDriftScales).
  const a4w4_device cpu = a4w4_cpu(), gpu = a4w4_cuda(0);
  for (int scales : {kFoldMixedScales, kFoldDriftScales}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{77, 416}, {300, 2336}}) {
      SCOPED_TRACE("scales " + std::to_string(scales) + " n " + std::to_string(n) + " k " +
                   std::to_string(k));
      const int64_t m = 3;
      const Packed b = random_packed(rng_, n, k, 0, scales, 0.0);
      size_t v2_bytes = 0, wbytes = 0, sbytes = 0, v2_sbytes = 0;
      ASSERT_EQ(a4w4_prepared_weight_size(n, k, A4W4_LAYOUT_PREPARED_V2, &v2_bytes, &v2_sbytes),
                A4W4_SUCCESS);
      ASSERT_EQ(a4w4_prepared_weight_size(n, k, A4W4_LAYOUT_PREPARED_V2_INT8, &wbytes, &sbytes),
                A4W4_SUCCESS);
      EXPECT_EQ(sbytes, v2_sbytes);
      EXPECT_GT(wbytes, v2_bytes + static_cast<size_t>(n * k));  // an int8 per element, and more

      // On the CPU: version 2, then the int8 form.
      const a4w4_tensor hb = tensor((void*)b.data.data(), A4W4_DTYPE_E2M1, n, k, k, cpu);
      const a4w4_tensor hbs =
          tensor((void*)b.scales.data(), A4W4_DTYPE_E8M0, n, k / 32, k / 32, cpu);
      std::vector<uint8_t> v2(v2_bytes), v2s(v2_sbytes), host(wbytes, 0x5A), host_scales(sbytes);
      a4w4_tensor hpw = tensor(v2.data(), A4W4_DTYPE_E2M1, n, k, 0, cpu);
      a4w4_tensor hps = tensor(v2s.data(), A4W4_DTYPE_E8M0, n, k / 32, 0, cpu);
      hpw.layout = hps.layout = A4W4_LAYOUT_PREPARED_V2;
      ASSERT_EQ(a4w4_prepare_weight(ctx_, &hb, &hbs, &hpw, &hps, nullptr), A4W4_SUCCESS);
      hpw = tensor(host.data(), A4W4_DTYPE_E2M1, n, k, 0, cpu);
      hps = tensor(host_scales.data(), A4W4_DTYPE_E8M0, n, k / 32, 0, cpu);
      hpw.layout = hps.layout = A4W4_LAYOUT_PREPARED_V2_INT8;
      ASSERT_EQ(a4w4_prepare_weight(ctx_, &hb, &hbs, &hpw, &hps, nullptr), A4W4_SUCCESS)
          << a4w4_last_error_message();
      EXPECT_TRUE(std::equal(v2.begin(), v2.end(), host.begin())) << "the version-2 part differs";
      EXPECT_EQ(host_scales, v2s);

      // On the GPU, twice, over different garbage: the CPU's bytes each time.
      DeviceBuffer gb(b.data.size()), gbs(b.scales.size()), gpw(wbytes), gps(sbytes);
      gb.upload(b.data), gbs.upload(b.scales);
      const a4w4_tensor tb = tensor(gb.get(), A4W4_DTYPE_E2M1, n, k, k, gpu);
      const a4w4_tensor tbs = tensor(gbs.get(), A4W4_DTYPE_E8M0, n, k / 32, k / 32, gpu);
      a4w4_tensor tpw = tensor(gpw.get(), A4W4_DTYPE_E2M1, n, k, 0, gpu);
      a4w4_tensor tps = tensor(gps.get(), A4W4_DTYPE_E8M0, n, k / 32, 0, gpu);
      tpw.layout = tps.layout = A4W4_LAYOUT_PREPARED_V2_INT8;
      for (int fill : {0xA5, 0x3C}) {
        ASSERT_EQ(cudaMemset(gpw.get(), fill, wbytes), cudaSuccess);
        ASSERT_EQ(a4w4_prepare_weight(ctx_, &tb, &tbs, &tpw, &tps, nullptr), A4W4_SUCCESS)
            << a4w4_last_error_message();
        const std::vector<uint8_t> got = gpw.download<uint8_t>(wbytes);
        size_t first_difference = wbytes;
        for (size_t i = 0; i < wbytes && first_difference == wbytes; ++i)
          if (got[i] != host[i]) first_difference = i;
        EXPECT_EQ(first_difference, wbytes)
            << "GPU and CPU bytes differ first at " << first_difference;
        EXPECT_EQ(gps.download<uint8_t>(sbytes), v2s);
      }

      // A mixed pair (int8-form data, version-2 scales) is refused, by name.
      a4w4_tensor mixed_scales = tps;
      mixed_scales.layout = A4W4_LAYOUT_PREPARED_V2;
      const Packed a = random_packed(rng_, m, k, 0, kFoldScales, 0.0);
      DeviceBuffer ga(a.data.size()), gas(a.scales.size()), gd(m * n * 4);
      ga.upload(a.data), gas.upload(a.scales);
      const a4w4_tensor ta = tensor(ga.get(), A4W4_DTYPE_E2M1, m, k, k, gpu);
      const a4w4_tensor tas = tensor(gas.get(), A4W4_DTYPE_E8M0, m, k / 32, k / 32, gpu);
      const a4w4_tensor td = tensor(gd.get(), A4W4_DTYPE_F32, m, n, n, gpu);
      EXPECT_EQ(
          a4w4_gemm(ctx_, &ta, &tas, &tpw, &mixed_scales, nullptr, nullptr, &td, nullptr, nullptr),
          A4W4_ERROR_UNSUPPORTED_LAYOUT);
      EXPECT_NE(std::string(a4w4_last_error_message()).find("A4W4_LAYOUT_PREPARED_V2_INT8"),
                std::string::npos)
          << a4w4_last_error_message();

      // The CPU backend reads the host copy as version 2: the same D as the plain B.
      a4w4_gemm_options options;
      a4w4_gemm_options_init(&options);
      options.kernel = "cpu.reference";
      const a4w4_tensor ha = tensor((void*)a.data.data(), A4W4_DTYPE_E2M1, m, k, k, cpu);
      const a4w4_tensor has =
          tensor((void*)a.scales.data(), A4W4_DTYPE_E8M0, m, k / 32, k / 32, cpu);
      std::vector<float> d_plain(m * n), d_prepared(m * n);
      a4w4_tensor hd = tensor(d_plain.data(), A4W4_DTYPE_F32, m, n, n, cpu);
      ASSERT_EQ(a4w4_gemm(ctx_, &ha, &has, &hb, &hbs, nullptr, nullptr, &hd, &options, nullptr),
                A4W4_SUCCESS);
      hd = tensor(d_prepared.data(), A4W4_DTYPE_F32, m, n, n, cpu);
      ASSERT_EQ(a4w4_gemm(ctx_, &ha, &has, &hpw, &hps, nullptr, nullptr, &hd, &options, nullptr),
                A4W4_SUCCESS)
          << a4w4_last_error_message();
      EXPECT_EQ(count_mismatches(d_plain, d_prepared, A4W4_DTYPE_F32), 0);
    }
  }
}

TEST_F(CudaBackend, EveryKernelReadsAnInt8PreparedWeight) {
  // The kernels that do not read the int8 part read the version-2 part of an
  // A4W4_LAYOUT_PREPARED_V2_INT8 weight; the int8 family reads the int8 part (with a workspace
  // holding garbage: nothing of B may come from it). Against the reference.
  set_garbage_workspace(300, 456, 1024);
  if (HasFatalFailure()) return;
  const std::pair<const char*, int64_t> kernels[] = {{"cuda.gemv", 1},
                                                     {"cuda.gemv", 3},
                                                     {"cuda.skinny", 8},
                                                     {"cuda.skinny", 64},
                                                     {"cuda.skinny", 200},
                                                     {"cuda.decode", 8},
                                                     {"cuda.bf16_128x128", 100},
                                                     {"cuda.bf16_128x256", 130},
                                                     {"cuda.generic", 40},
                                                     {"cuda.int8_128x128", 100},
                                                     {"cuda.int8_128x128", 300},
                                                     {"cuda.int8_128x192", 300},
                                                     {nullptr, 2},
                                                     {nullptr, 48},
                                                     {nullptr, 256}};
  for (const auto& [kernel, m] : kernels) {
    for (int scales : {kTileLocalScales, kFoldMixedScales}) {
      GemmCase c{m, 456, 1024, A4W4_DTYPE_BF16, m % 2 == 0, true, scales, true, 0, kernel, 0};
      c.prepared_layout = A4W4_LAYOUT_PREPARED_V2_INT8;
      run_case(ctx_, rng_, c);
      if (HasFatalFailure()) return;
    }
  }
  // The int8 kernels give the same bits on either form of the weight (the same staged bytes).
  const int64_t m = 300, n = 456, k = 1024;
  const DeviceOperand a(random_packed(rng_, m, k, 0, kFoldMixedScales, 0.0));
  const DeviceOperand b(random_packed(rng_, n, k, 0, kFoldMixedScales, 0.0));
  for (const char* kernel : {"cuda.int8_128x128", "cuda.int8_128x192"}) {
    std::vector<float> d[2];
    int i = 0;
    for (a4w4_layout layout : {A4W4_LAYOUT_PREPARED_V2, A4W4_LAYOUT_PREPARED_V2_INT8}) {
      size_t wbytes = 0, sbytes = 0;
      ASSERT_EQ(a4w4_prepared_weight_size(n, k, layout, &wbytes, &sbytes), A4W4_SUCCESS);
      DeviceBuffer pw(wbytes), ps(sbytes), gd(m * n * 4);
      a4w4_tensor tpw = tensor(pw.get(), A4W4_DTYPE_E2M1, n, k, 0, a4w4_cuda(0));
      a4w4_tensor tps = tensor(ps.get(), A4W4_DTYPE_E8M0, n, k / 32, 0, a4w4_cuda(0));
      tpw.layout = tps.layout = layout;
      ASSERT_EQ(a4w4_prepare_weight(ctx_, &b.values, &b.scale, &tpw, &tps, nullptr), A4W4_SUCCESS);
      const a4w4_tensor td = tensor(gd.get(), A4W4_DTYPE_F32, m, n, n, a4w4_cuda(0));
      a4w4_gemm_options options;
      a4w4_gemm_options_init(&options);
      options.kernel = kernel;
      ASSERT_EQ(a4w4_gemm(ctx_, &a.values, &a.scale, &tpw, &tps, nullptr, nullptr, &td, &options,
                          nullptr),
                A4W4_SUCCESS)
          << a4w4_last_error_message();
      d[i++] = gd.download<float>(m * n);
    }
    EXPECT_EQ(count_mismatches(d[0], d[1], A4W4_DTYPE_F32), 0) << kernel;
  }
}

TEST_F(CudaBackend, AVersion1PreparedBRunsOnTheGenericKernel) {
  // The fast kernels read version 2 only: a version-1 B is refused by name with the reason, and
  // the dispatcher runs cuda.generic on it (checked against the reference by run_case).
  for (int64_t m : {int64_t{1}, int64_t{16}, int64_t{100}}) {
    GemmCase c{m, 70, 416, A4W4_DTYPE_F32, true, true, kTileLocalScales, true, 0, nullptr, 0};
    c.prepared_layout = A4W4_LAYOUT_PREPARED_V1;
    run_case(ctx_, rng_, c);
    if (HasFatalFailure()) return;
  }
  // Each fast kernel at an M it takes.
  const std::pair<const char*, int64_t> kernels[] = {
      {"cuda.gemv", 1},           {"cuda.skinny", 8},         {"cuda.decode", 8},
      {"cuda.bf16_128x128", 100}, {"cuda.int8_128x128", 100}, {"cuda.int8_128x192", 100}};
  for (const auto& [kernel, m] : kernels) {
    const PreparedGemm g(m, 64, 256, A4W4_LAYOUT_PREPARED_V1);
    EXPECT_EQ(g.run(ctx_, kernel), A4W4_ERROR_KERNEL_NOT_APPLICABLE) << kernel;
    EXPECT_NE(std::string(a4w4_last_error_message()).find("version 1"), std::string::npos)
        << kernel << ": " << a4w4_last_error_message();
  }
}

TEST_F(CudaBackend, StreamsAndGraphCapture) {
  const a4w4_device gpu = a4w4_cuda(0);
  const int64_t m = 8, n = 512, k = 2048;
  const Packed a = random_packed(rng_, m, k, 0, false, 0);
  const Packed b = random_packed(rng_, n, k, 0, false, 0);
  DeviceBuffer ga(a.data.size()), gas(a.scales.size()), gb(b.data.size()), gbs(b.scales.size());
  DeviceBuffer d1(m * n * 4), d2(m * n * 4);
  ga.upload(a.data), gas.upload(a.scales), gb.upload(b.data), gbs.upload(b.scales);
  const a4w4_tensor ta = tensor(ga.get(), A4W4_DTYPE_E2M1, m, k, k, gpu);
  const a4w4_tensor tas = tensor(gas.get(), A4W4_DTYPE_E8M0, m, k / 32, k / 32, gpu);
  const a4w4_tensor tb = tensor(gb.get(), A4W4_DTYPE_E2M1, n, k, k, gpu);
  const a4w4_tensor tbs = tensor(gbs.get(), A4W4_DTYPE_E8M0, n, k / 32, k / 32, gpu);
  const a4w4_tensor td1 = tensor(d1.get(), A4W4_DTYPE_F32, m, n, n, gpu);
  const a4w4_tensor td2 = tensor(d2.get(), A4W4_DTYPE_F32, m, n, n, gpu);

  // Each kernel, launched directly on a non-default stream and then captured into a graph and
  // replayed, gives the same bits both ways.
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const char* kernel : {"cuda.decode", "cuda.generic", "cuda.skinny"}) {
    a4w4_gemm_options options;
    a4w4_gemm_options_init(&options);
    options.kernel = kernel;
    ASSERT_EQ(a4w4_gemm(ctx_, &ta, &tas, &tb, &tbs, nullptr, nullptr, &td1, &options, stream),
              A4W4_SUCCESS)
        << a4w4_last_error_message();
    CUDA_OK(cudaMemsetAsync(d2.get(), 0, m * n * 4, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    a4w4_status status = A4W4_SUCCESS;
    const CapturedGraph graph(stream, [&] {
      status = a4w4_gemm(ctx_, &ta, &tas, &tb, &tbs, nullptr, nullptr, &td2, &options, stream);
    });
    ASSERT_EQ(status, A4W4_SUCCESS) << kernel << ": " << a4w4_last_error_message();
    ASSERT_TRUE(graph.ok()) << kernel;
    for (int replay = 0; replay < 3; ++replay) CUDA_OK(graph.launch(stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_EQ(d2.download<float>(m * n), d1.download<float>(m * n)) << kernel;
  }
  cudaStreamDestroy(stream);
}

// The second call of EarlyLaunchedGemvWaitsForTheCallBefore: M = 1, n2 x k2, reading D1's first
// n2 columns as C.
void early_launched_gemv_waits(a4w4_context ctx, std::mt19937_64& rng, int64_t n2, int64_t k2,
                               bool b_constant) {
  SCOPED_TRACE("second call 1x" + std::to_string(n2) + "x" + std::to_string(k2) +
               " b_constant=" + std::to_string(b_constant));
  const a4w4_device gpu = a4w4_cuda(0);
  const LongGemvIntoNan first(rng);
  const DeviceOperand a2(random_packed(rng, 1, k2, 0, kTileLocalScales, 0));
  const DeviceOperand b2(random_packed(rng, n2, k2, 0, kTileLocalScales, 0));
  DeviceBuffer d2(n2 * 4);
  // D1's first columns.
  const a4w4_tensor tc2 = tensor(first.d.get(), A4W4_DTYPE_F32, 1, n2, LongGemvIntoNan::kN, gpu);
  const a4w4_tensor td2 = tensor(d2.get(), A4W4_DTYPE_F32, 1, n2, n2, gpu);
  a4w4_gemm_options second;
  a4w4_gemm_options_init(&second);
  second.kernel = "cuda.gemv";
  second.beta = 1.0f;
  second.b_constant = b_constant ? 1 : 0;
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto calls = [&](bool synchronize) {
    first.enqueue(ctx, stream);
    if (::testing::Test::HasFatalFailure()) return;
    if (synchronize) {
      CUDA_OK(cudaStreamSynchronize(stream));
    }
    ASSERT_EQ(a4w4_gemm(ctx, &a2.values, &a2.scale, &b2.values, &b2.scale, &tc2, nullptr, &td2,
                        &second, stream),
              A4W4_SUCCESS)
        << a4w4_last_error_message();
  };
  calls(true);
  CUDA_OK(cudaStreamSynchronize(stream));
  const std::vector<float> expected = d2.download<float>(n2);
  for (float v : expected) ASSERT_FALSE(std::isnan(v));
  for (int round = 0; round < 5; ++round) {
    CUDA_OK(cudaMemset(d2.get(), 0, n2 * 4));
    calls(false);
    CUDA_OK(cudaStreamSynchronize(stream));
    ASSERT_EQ(d2.download<float>(n2), expected) << "back to back, round " << round;
  }
  {
    const CapturedGraph graph(stream, [&] { calls(false); });
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_TRUE(graph.ok());
    for (int replay = 0; replay < 5; ++replay) {
      CUDA_OK(cudaMemset(d2.get(), 0, n2 * 4));
      CUDA_OK(graph.launch(stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      EXPECT_EQ(d2.download<float>(n2), expected) << "graph, replay " << replay;
    }
  }
  cudaStreamDestroy(stream);
}

TEST_F(CudaBackend, EarlyLaunchedGemvWaitsForTheCallBefore) {
  // A long cuda.gemv (one wave, launched early, letting the next grid start at once) writes D1; a
  // second one reads D1's first columns as C: its CTAs start while the long one runs, so its
  // epilogue reads D1 before it is written unless it waits for the grid before it (D1 starts as
  // NaN). Back to back and in a graph, against the same calls with a synchronization. The second
  // call is short (64 columns) or long (1 x 8192 x 8192, its weights loaded a step ahead), with a
  // constant B too: the weights' first loads may then precede the wait, its A and C reads may not.
  for (bool b_constant : {false, true}) {
    early_launched_gemv_waits(ctx_, rng_, 64, 256, b_constant);
    if (HasFatalFailure()) return;
    early_launched_gemv_waits(ctx_, rng_, 8192, 8192, b_constant);
    if (HasFatalFailure()) return;
  }
}

TEST_F(CudaBackend, EarlyLaunchedQuantizeWaitsForTheCallBefore) {
  // A long cuda.gemv (launched early, letting the next grid start at once) writes D (NaN before);
  // the quantizer, launched early too, quantizes D. Its CTAs start while the GEMM runs, so they
  // read D before it is written unless they wait for the grid before them.
  const a4w4_device gpu = a4w4_cuda(0);
  const int64_t n = LongGemvIntoNan::kN;
  const LongGemvIntoNan gemm(rng_);
  DeviceBuffer q(n / 2), s(n / 32);
  const a4w4_tensor tq = tensor(q.get(), A4W4_DTYPE_E2M1, 1, n, n, gpu);
  const a4w4_tensor ts = tensor(s.get(), A4W4_DTYPE_E8M0, 1, n / 32, n / 32, gpu);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto calls = [&](bool synchronize) {
    gemm.enqueue(ctx_, stream);
    if (HasFatalFailure()) return;
    if (synchronize) {
      CUDA_OK(cudaStreamSynchronize(stream));
    }
    ASSERT_EQ(a4w4_quantize(ctx_, &gemm.td, &tq, &ts, A4W4_SCALE_RCEIL, stream), A4W4_SUCCESS)
        << a4w4_last_error_message();
  };
  calls(true);
  CUDA_OK(cudaStreamSynchronize(stream));
  const std::vector<uint8_t> codes = q.download<uint8_t>(n / 2),
                             scales = s.download<uint8_t>(n / 32);
  for (uint8_t scale : scales) ASSERT_NE(scale, 0xFF);  // no NaN block
  for (int round = 0; round < 5; ++round) {
    CUDA_OK(cudaMemset(q.get(), 0, n / 2));
    CUDA_OK(cudaMemset(s.get(), 0, n / 32));
    calls(false);
    CUDA_OK(cudaStreamSynchronize(stream));
    ASSERT_EQ(q.download<uint8_t>(n / 2), codes) << "round " << round;
    ASSERT_EQ(s.download<uint8_t>(n / 32), scales) << "round " << round;
  }
  cudaStreamDestroy(stream);
}

// Two calls on `stream` writing d1 and d2 (count1, count2 elements of T): calls(true) runs them
// with the stream synchronized in between, then five rounds of calls(false) back to back must
// give the same bytes (D zeroed before each round).
template <typename T, typename Calls>
void expect_back_to_back_as_synchronized(cudaStream_t stream, const DeviceBuffer& d1,
                                         int64_t count1, const DeviceBuffer& d2, int64_t count2,
                                         const Calls& calls) {
  calls(true);
  if (::testing::Test::HasFatalFailure()) return;
  CUDA_OK(cudaStreamSynchronize(stream));
  const std::vector<T> expected1 = d1.download<T>(count1);
  const std::vector<T> expected2 = d2.download<T>(count2);
  for (int round = 0; round < 5; ++round) {
    CUDA_OK(cudaMemset(d1.get(), 0, count1 * sizeof(T)));
    CUDA_OK(cudaMemset(d2.get(), 0, count2 * sizeof(T)));
    calls(false);
    if (::testing::Test::HasFatalFailure()) return;
    CUDA_OK(cudaStreamSynchronize(stream));
    ASSERT_EQ(d1.download<T>(count1), expected1) << "first call, round " << round;
    ASSERT_EQ(d2.download<T>(count2), expected2) << "second call, round " << round;
  }
}

TEST_F(CudaBackend, EarlyLaunchedStagingWaitsForTheCallBefore) {
  // cuda.skinny with a workspace: two calls with different activations stage their records into
  // the same workspace. The second call's staging kernel is launched early (the first call's GEMM
  // lets the next grid start while its CTAs run, here in two waves); unless it waits for that GEMM,
  // it overwrites records the GEMM still copies. Back to back against the same calls synchronized.
  const a4w4_device gpu = a4w4_cuda(0);
  const int64_t m = 64, n = 28672, k = 8192;
  const DeviceOperand a1(random_packed(rng_, m, k, 0, kTileLocalScales, 0));
  const DeviceOperand a2(random_packed(rng_, m, k, 0, kTileLocalScales, 0));
  const DeviceOperand b(random_packed(rng_, n, k, 0, kTileLocalScales, 0));
  DeviceBuffer d1(m * n * 4), d2(m * n * 4);
  size_t bytes = 0;
  ASSERT_EQ(a4w4_gemm_workspace_size(m, n, k, &bytes), A4W4_SUCCESS);
  DeviceBuffer workspace(bytes);
  ASSERT_EQ(a4w4_context_set_workspace(ctx_, gpu, workspace.get(), bytes), A4W4_SUCCESS);
  const a4w4_tensor td1 = tensor(d1.get(), A4W4_DTYPE_F32, m, n, n, gpu);
  const a4w4_tensor td2 = tensor(d2.get(), A4W4_DTYPE_F32, m, n, n, gpu);
  a4w4_gemm_options options;
  a4w4_gemm_options_init(&options);
  options.kernel = "cuda.skinny";
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto calls = [&](bool synchronize) {
    ASSERT_EQ(a4w4_gemm(ctx_, &a1.values, &a1.scale, &b.values, &b.scale, nullptr, nullptr, &td1,
                        &options, stream),
              A4W4_SUCCESS)
        << a4w4_last_error_message();
    if (synchronize) {
      CUDA_OK(cudaStreamSynchronize(stream));
    }
    ASSERT_EQ(a4w4_gemm(ctx_, &a2.values, &a2.scale, &b.values, &b.scale, nullptr, nullptr, &td2,
                        &options, stream),
              A4W4_SUCCESS)
        << a4w4_last_error_message();
  };
  expect_back_to_back_as_synchronized<float>(stream, d1, m * n, d2, m * n, calls);
  cudaStreamDestroy(stream);
}

TEST_F(CudaBackend, Int8CallThenEarlyLaunchedSkinnyBackToBack) {
  // The int8 family's high-block variant and its bf16 launch over unfolded tiles are launched
  // early (each a programmatic dependent of the launch before it) and, with typical data, return
  // at once after waiting for the launch before them. The next call here is cuda.skinny, whose
  // staging kernel is launched early too and waits only for the grid before it (the bf16 launch),
  // then overwrites the workspace the int8 GEMM (two waves of tiles) read its staged operands
  // from. Back to back against the same calls synchronized, for both tile widths. (On an H100 this
  // also passed with those two waits taken out: the early grids become resident only as the
  // GEMM's CTAs leave their SMs, so the window the waits close is short; the programming model
  // requires them all the same.)
  const a4w4_device gpu = a4w4_cuda(0);
  const int64_t m = 1024, n = 4096, k = 4096, m2 = 64, n2 = 8192;
  const DeviceOperand a1(random_packed(rng_, m, k, 0, kFoldScales, 0));
  const DeviceOperand a2(random_packed(rng_, m2, k, 0, kFoldScales, 0));
  const DeviceOperand b1(random_packed(rng_, n, k, 0, kFoldScales, 0));
  const DeviceOperand b2(random_packed(rng_, n2, k, 0, kFoldScales, 0));
  DeviceBuffer d1(m * n * 2), d2(m2 * n2 * 2);
  size_t bytes = 0, bytes2 = 0;
  ASSERT_EQ(a4w4_gemm_workspace_size(m, n, k, &bytes), A4W4_SUCCESS);
  ASSERT_EQ(a4w4_gemm_workspace_size(m2, n2, k, &bytes2), A4W4_SUCCESS);
  DeviceBuffer workspace(std::max(bytes, bytes2));
  ASSERT_EQ(a4w4_context_set_workspace(ctx_, gpu, workspace.get(), std::max(bytes, bytes2)),
            A4W4_SUCCESS);
  const a4w4_tensor td1 = tensor(d1.get(), A4W4_DTYPE_BF16, m, n, n, gpu);
  const a4w4_tensor td2 = tensor(d2.get(), A4W4_DTYPE_BF16, m2, n2, n2, gpu);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  a4w4_gemm_options skinny;
  a4w4_gemm_options_init(&skinny);
  skinny.kernel = "cuda.skinny";
  for (const char* kernel : {"cuda.int8_128x128", "cuda.int8_128x192"}) {
    SCOPED_TRACE(kernel);
    a4w4_gemm_options options;
    a4w4_gemm_options_init(&options);
    options.kernel = kernel;
    const auto calls = [&](bool synchronize) {
      ASSERT_EQ(a4w4_gemm(ctx_, &a1.values, &a1.scale, &b1.values, &b1.scale, nullptr, nullptr,
                          &td1, &options, stream),
                A4W4_SUCCESS)
          << a4w4_last_error_message();
      if (synchronize) {
        CUDA_OK(cudaStreamSynchronize(stream));
      }
      ASSERT_EQ(a4w4_gemm(ctx_, &a2.values, &a2.scale, &b2.values, &b2.scale, nullptr, nullptr,
                          &td2, &skinny, stream),
                A4W4_SUCCESS)
          << a4w4_last_error_message();
    };
    expect_back_to_back_as_synchronized<uint16_t>(stream, d1, m * n, d2, m2 * n2, calls);
    if (HasFatalFailure()) break;
  }
  cudaStreamDestroy(stream);
}

TEST_F(CudaBackend, DependentCallsBackToBackAndInAGraph) {
  // cuda.gemv and cuda.skinny in a chain D_i+1 = A.B^T + D_i (beta = 1, C = the previous call's
  // D), run back to back and as a captured graph, equal the same chain with the stream
  // synchronized after each call (each call reads what the previous one wrote). cuda.gemv is
  // launched early (programmatic dependent launch) and lets the next call start while it runs, so
  // its chain fails if a call touches C or D before the previous one is done.
  const a4w4_device gpu = a4w4_cuda(0);
  const int64_t n = 1000, k = 4096;
  constexpr int kChain = 12;
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const auto& [kernel, m] :
       {std::pair<const char*, int64_t>{"cuda.gemv", 1}, {"cuda.gemv", 2}, {"cuda.skinny", 8}}) {
    SCOPED_TRACE(kernel);
    const Packed a = random_packed(rng_, m, k, 0, kTileLocalScales, 0);
    const Packed b = random_packed(rng_, n, k, 0, kTileLocalScales, 0);
    DeviceBuffer ga(a.data.size()), gas(a.scales.size()), gb(b.data.size()), gbs(b.scales.size());
    ga.upload(a.data), gas.upload(a.scales), gb.upload(b.data), gbs.upload(b.scales);
    const a4w4_tensor ta = tensor(ga.get(), A4W4_DTYPE_E2M1, m, k, k, gpu);
    const a4w4_tensor tas = tensor(gas.get(), A4W4_DTYPE_E8M0, m, k / 32, k / 32, gpu);
    const a4w4_tensor tb = tensor(gb.get(), A4W4_DTYPE_E2M1, n, k, k, gpu);
    const a4w4_tensor tbs = tensor(gbs.get(), A4W4_DTYPE_E8M0, n, k / 32, k / 32, gpu);
    a4w4_gemm_options options;
    a4w4_gemm_options_init(&options);
    options.kernel = kernel;
    options.beta = 1.0f;
    const size_t bytes = static_cast<size_t>(m * n) * 4;
    std::vector<std::unique_ptr<DeviceBuffer>> d;
    for (int i = 0; i <= kChain; ++i) d.push_back(std::make_unique<DeviceBuffer>(bytes));
    // Call i reads D_i as C and writes D_i+1; D_0 = 0.
    const auto chain = [&](bool synchronize) {
      CUDA_OK(cudaMemsetAsync(d[0]->get(), 0, bytes, stream));
      for (int i = 0; i < kChain; ++i) {
        const a4w4_tensor tc = tensor(d[i]->get(), A4W4_DTYPE_F32, m, n, n, gpu);
        const a4w4_tensor td = tensor(d[i + 1]->get(), A4W4_DTYPE_F32, m, n, n, gpu);
        ASSERT_EQ(a4w4_gemm(ctx_, &ta, &tas, &tb, &tbs, &tc, nullptr, &td, &options, stream),
                  A4W4_SUCCESS)
            << a4w4_last_error_message();
        if (synchronize) {
          CUDA_OK(cudaStreamSynchronize(stream));
        }
      }
    };
    chain(true);
    CUDA_OK(cudaStreamSynchronize(stream));
    const std::vector<float> expected = d[kChain]->download<float>(static_cast<size_t>(m * n));
    CUDA_OK(cudaMemset(d[kChain]->get(), 0, bytes));
    chain(false);
    CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_EQ(d[kChain]->download<float>(static_cast<size_t>(m * n)), expected) << "back to back";
    CUDA_OK(cudaMemset(d[kChain]->get(), 0, bytes));
    const CapturedGraph graph(stream, [&] { chain(false); });
    if (HasFatalFailure()) return;
    ASSERT_TRUE(graph.ok());
    for (int replay = 0; replay < 3; ++replay) CUDA_OK(graph.launch(stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_EQ(d[kChain]->download<float>(static_cast<size_t>(m * n)), expected) << "graph";
  }
  cudaStreamDestroy(stream);
}

}  // namespace
