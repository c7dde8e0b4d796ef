// The block scales benchmark and tuning operands are drawn from, shared by `a4w4 bench` (device
// fill, fill.cu) and `a4w4 tune` (host data, tools/cmd_tune.cpp) so that a tuned choice is timed on
// the data it was chosen on.
#pragma once

namespace a4w4::bench {

// E8M0 bytes first .. first + count - 1, drawn uniformly.
struct ScaleRange {
  int first, count;
};

// The spread of block scales quantized from Gaussian-like data (the |max| of 32 samples varies by
// about one binade): the decode kernel folds these.
inline constexpr ScaleRange kTypicalScales{125, 3};
// A spread that defeats scale folding: every K tile takes the exact per-block path.
inline constexpr ScaleRange kWideScales{120, 16};
// Drifting: each 128-wide K tile of a row draws from 3 values, the tiles' bases 125, 129, 133,
// 125, ... in turn — every tile folds on its own, but no chunk of 8 tiles folds to one base.
inline constexpr ScaleRange kDriftScales{125, 3};
inline constexpr int kDriftStep = 4;

}  // namespace a4w4::bench
