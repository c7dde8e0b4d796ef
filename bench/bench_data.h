// Which operands the GPU benchmark times a4w4 on (bench/gpu_bench.h), and their names on the
// command line; no CUDA, so the CLI can check the names in every build.
#pragma once

#include <map>
#include <string>

namespace a4w4::bench {

// kTypical: random codes, block scales 125..127 (every 128-K tile and every chunk of 8 folds);
// kWide: scales 120..135 (nothing folds); kDrift: each K tile's scales within 3 binades but the
// tiles' bases 4 binades apart in turn (tiles fold, chunks do not); kGaussian: bf16 data quantized
// by a4w4_quantize (RCEIL) — A and B Gaussian rows with sigmas over 2 binades; kOutliers: the same,
// A with 0.5% outlier channels 32x larger (as LLM activations have).
enum class BenchData { kTypical, kWide, kDrift, kGaussian, kOutliers };

// `a4w4 bench --data` names.
inline const std::map<std::string, BenchData>& bench_data_names() {
  static const std::map<std::string, BenchData> names = {{"typical", BenchData::kTypical},
                                                         {"wide", BenchData::kWide},
                                                         {"drift", BenchData::kDrift},
                                                         {"gaussian", BenchData::kGaussian},
                                                         {"outliers", BenchData::kOutliers}};
  return names;
}

}  // namespace a4w4::bench
