// GEMM shape lists for benchmarks and tuning: built-in presets (model projections at decode and
// prefill sizes) and shape files.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace a4w4::bench {

struct Shape {
  int64_t m, n, k;
  std::string label;  // e.g. "llama3-70b.o_proj"
};

// Names accepted by preset().
std::vector<std::string> preset_names();

// A preset's shapes. `ms` replaces the preset's own M values when non-empty. Throws
// std::invalid_argument for an unknown name.
std::vector<Shape> preset(std::string_view name, const std::vector<int64_t>& ms = {});

// Each of shapes at each M of ms, in that order (ms's first M for every shape, then the next),
// shapes that coincide (same M, N, K) listed once; shapes as they are when ms is empty.
std::vector<Shape> with_ms(const std::vector<Shape>& shapes, const std::vector<int64_t>& ms);

// Reads a shape file: one shape per line as "M N K [label]" or "MxNxK [label]"; blank lines and
// '#' comments are skipped. Throws std::runtime_error naming file:line for anything else.
std::vector<Shape> load_shape_file(const std::string& path);

}  // namespace a4w4::bench
