#include "shape_selection.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "common.h"

namespace a4w4::cli {

std::vector<bench::Shape> select_shapes(const std::string& file_or_preset,
                                        const std::vector<int64_t>& ms) {
  const std::vector<std::string> presets = bench::preset_names();
  try {
    if (std::find(presets.begin(), presets.end(), file_or_preset) != presets.end() &&
        !std::filesystem::exists(file_or_preset))
      return bench::preset(file_or_preset, ms);
    if (!std::filesystem::exists(file_or_preset))
      fail("--shapes {}: neither a file nor a preset ({})", file_or_preset,
           fmt::join(presets, ", "));
    return bench::with_ms(bench::load_shape_file(file_or_preset), ms);
  } catch (const Failure&) {
    throw;
  } catch (const std::exception& e) {
    fail("{}", e.what());
  }
}

}  // namespace a4w4::cli
