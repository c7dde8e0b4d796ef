// The shapes a `bench` or `tune` run covers: a shape file or a preset name, with optional M values
// replacing the listed ones.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shapes.h"

namespace a4w4::cli {

// file_or_preset names an existing file (read as a shape file) or a preset (bench/shapes.h);
// anything else is a Failure listing the presets. ms, when given, replaces every shape's M.
std::vector<bench::Shape> select_shapes(const std::string& file_or_preset,
                                        const std::vector<int64_t>& ms);

}  // namespace a4w4::cli
