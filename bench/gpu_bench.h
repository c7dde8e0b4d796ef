// The GPU benchmark behind `a4w4 bench --backend cuda`: a4w4 and the cuBLAS baselines (bf16 GEMM,
// cuBLASLt fp8 e4m3 with per-tensor scales) on the same shapes in one process. Each figure is the
// median over samples of CUDA-event timings of a captured graph of back-to-back calls, after
// warm-up, rotating through operand sets larger than the L2 cache. cuBLAS is a baseline only.
#pragma once

#include <a4w4/a4w4.h>

#include <a4w4/a4w4.hpp>

#include <functional>
#include <string>
#include <vector>

#include "bench_data.h"
#include "shapes.h"

namespace a4w4::bench {

// A line saying what BenchData is.
std::string describe(BenchData data);

struct GpuBenchOptions {
  int device = 0;
  int samples = 30;              // timed graph launches per figure; the median is reported
  double graph_us = 2000.0;      // aim for graphs of about this many microseconds
  bool baselines = true;         // also time cuBLAS bf16 and cuBLASLt fp8
  bool prepared_weights = true;  // time a4w4 on a prepared B
  bool plain_weights = true;     // time a4w4 on a plain (not prepared) B
  // The prepared B's layout: A4W4_LAYOUT_PREPARED_V2, or _V2_INT8 (with B's int8 form).
  a4w4_layout prepared_layout = A4W4_LAYOUT_PREPARED_V2;
  BenchData data = BenchData::kTypical;
  // Every a4w4 call's options: kernel ("": dispatch), split-K, math mode, B constant. No C is
  // passed, so beta stays 0.
  GemmOptions call;
  std::string out_dtype = "bf16";
  std::string tuned;               // a tuned configuration to load ("": none, or A4W4_TUNED_CONFIG)
  bool compare_heuristic = false;  // also time the heuristic's choice (a context without tuning)
  // Give the contexts a workspace (a4w4_context_set_workspace) sized for the largest shape, as an
  // application would: the staging kernels (cuda.int8_128x128) run only with one.
  bool workspace = true;
  // How long each configuration (a4w4 and each baseline alike) runs before it is timed. The H200
  // caps its power in software under load and lowers its clocks for a while after a heavy kernel:
  // with a few calls of warm-up, a4w4 at 1024x8192x8192 timed right after the previous shape's
  // cuBLAS baselines ran 15-25% slower than timed first, and cuBLAS itself 170-190 us. After
  // 200 ms of its own load every configuration runs at the clocks it sustains.
  int warmup_ms = 200;
};

struct GpuBenchRow {
  Shape shape;
  double a4w4_us = 0, a4w4_plain_us = 0, cublas_bf16_us = 0, cublaslt_fp8_us = 0;
  // The faster of the layouts timed: what the rates and speed-ups are computed from.
  double best_us() const {
    return a4w4_us > 0 && (a4w4_plain_us <= 0 || a4w4_us <= a4w4_plain_us) ? a4w4_us
                                                                           : a4w4_plain_us;
  }
  double bytes = 0, flops = 0;
  double floor_us = 0;  // max(bytes / 4.8 TB/s, flops / 1979 TFLOP/s): shared/docs/targets.md
  // With baselines: an SM copy kernel moving the same bytes (half read, half written), timed the
  // same way: what a kernel that only streams memory reaches at this size (ramp and tail
  // included), beside the large copy the bandwidth percentages are taken against.
  double copy_us = 0;
  // With baselines: an SM kernel that only reads the same bytes (four loads in flight per thread),
  // timed the same way: the floor of a kernel that streams its weights in once.
  double read_us = 0;
  std::string kernel;   // what ran (prepared B, else plain): "name[/split] (source)"
  std::string heuristic_kernel;  // with compare_heuristic: the heuristic's choice and its time
  double heuristic_us = 0;
  std::string notes;  // baselines that could not run
};

struct GpuDeviceFacts {
  std::string name;
  double copy_gbps = 0;  // measured device-to-device copy, bytes read + written per second / 1e9
  double l2_bytes = 0;
  int sm_count = 0;  // for the copy kernel's grid
};

GpuDeviceFacts measure_device(const GpuBenchOptions& options);

// How many operand sets of `bytes` each make a rotation at least three times an L2 of `l2_bytes`
// (2 to 64).
int rotation_sets(double bytes, double l2_bytes);

// Median microseconds per call of enqueue(stream, i) on `stream` (a cudaStream_t; i = 0, 1, ...
// may select a rotating operand set): warm-up (the graph replayed for warmup_ms, at least once),
// then replays of a captured graph of back-to-back calls timed with events, so launch overhead is
// not counted. Used by `a4w4 tune`.
double time_enqueued(const std::function<void(void* stream, int i)>& enqueue, void* stream,
                     int samples, double graph_us = 2000.0, int warmup_ms = 0);

// Runs every shape; progress(i, total, label) is called before each one.
std::vector<GpuBenchRow> run_gpu_gemm_bench(
    const std::vector<Shape>& shapes, const GpuBenchOptions& options, const GpuDeviceFacts& facts,
    const std::function<void(size_t, size_t, const std::string&)>& progress);

struct QuantizeBenchRow {
  int64_t rows, cols;
  double us, bytes;
};
// a4w4_quantize of a random bf16 [rows, cols] matrix, RCEIL.
QuantizeBenchRow run_gpu_quantize_bench(int64_t rows, int64_t cols, const GpuBenchOptions& options,
                                        const GpuDeviceFacts& facts);

// Markdown tables (what bench/RESULTS.md records).
std::string format_gemm_table(const std::vector<GpuBenchRow>& rows, const GpuDeviceFacts& facts);
std::string format_quantize_table(const std::vector<QuantizeBenchRow>& rows,
                                  const GpuDeviceFacts& facts);

}  // namespace a4w4::bench
