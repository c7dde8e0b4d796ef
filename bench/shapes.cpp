#include "shapes.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace a4w4::bench {
namespace {

struct Projection {
  const char* name;
  int64_t n, k;
};

// Llama-3-70B: hidden 8192, intermediate 28672, 64 query heads and 8 KV heads of 128.
constexpr Projection kLlama3_70b[] = {
    {"qkv_proj", 10240, 8192}, {"o_proj", 8192, 8192}, {"gate_proj", 28672, 8192},
    {"up_proj", 28672, 8192},  {"down_proj", 8192, 28672}};
// gpt-oss (20b and 120b share these): hidden 2880, 64 query and 8 KV heads of 64, experts 2880.
constexpr Projection kGptOss[] = {{"qkv_proj", 5120, 2880},
                                  {"o_proj", 2880, 4096},
                                  {"expert_gate_up", 5760, 2880},
                                  {"expert_down", 2880, 2880}};
const std::vector<int64_t> kDecodeMs = {1, 16, 32, 64};
const std::vector<int64_t> kTuneMs = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};

template <size_t N>
std::vector<Shape> expand(const char* model, const Projection (&projections)[N],
                          const std::vector<int64_t>& ms) {
  std::vector<Shape> shapes;
  for (int64_t m : ms)
    for (const Projection& p : projections)
      shapes.push_back({m, p.n, p.k, std::string(model) + "." + p.name});
  return shapes;
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"targets", "llama3-70b", "gpt-oss", "llama3-70b-all-m", "gpt-oss-all-m"};
}

std::vector<Shape> preset(std::string_view name, const std::vector<int64_t>& ms) {
  if (name == "targets") {
    // The decode targets of the CUDA backend (bench/RESULTS.md).
    return with_ms({{1, 8192, 8192, "target"},
                    {1, 28672, 8192, "target"},
                    {16, 28672, 8192, "target"},
                    {32, 8192, 28672, "target"},
                    {64, 8192, 8192, "target"}},
                   ms);
  }
  if (name == "llama3-70b") return expand("llama3-70b", kLlama3_70b, ms.empty() ? kDecodeMs : ms);
  if (name == "gpt-oss") return expand("gpt-oss", kGptOss, ms.empty() ? kDecodeMs : ms);
  if (name == "llama3-70b-all-m") return expand("llama3-70b", kLlama3_70b, ms.empty() ? kTuneMs : ms);
  if (name == "gpt-oss-all-m") return expand("gpt-oss", kGptOss, ms.empty() ? kTuneMs : ms);
  throw std::invalid_argument("unknown shape preset '" + std::string(name) + "'");
}

std::vector<Shape> with_ms(const std::vector<Shape>& shapes, const std::vector<int64_t>& ms) {
  if (ms.empty()) return shapes;
  std::vector<Shape> out;
  for (int64_t m : ms)
    for (Shape shape : shapes) {
      shape.m = m;
      const auto same = [&](const Shape& s) {
        return s.m == shape.m && s.n == shape.n && s.k == shape.k;
      };
      if (std::none_of(out.begin(), out.end(), same)) out.push_back(std::move(shape));
    }
  return out;
}

std::vector<Shape> load_shape_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open the shape file");
  std::vector<Shape> shapes;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::vector<std::string> tokens;
    for (std::string word; words >> word;) tokens.push_back(word);
    if (tokens.empty()) continue;
    // "MxNxK label" -> "M N K label"
    if (tokens[0].find_first_of("xX") != std::string::npos) {
      std::string dims = tokens[0];
      for (char& c : dims)
        if (c == 'x' || c == 'X') c = ' ';
      std::istringstream split(dims);
      std::vector<std::string> expanded;
      for (std::string d; split >> d;) expanded.push_back(d);
      expanded.insert(expanded.end(), tokens.begin() + 1, tokens.end());
      tokens = expanded;
    }
    Shape shape{0, 0, 0, {}};
    bool ok = tokens.size() >= 3 && tokens.size() <= 4;
    try {
      if (ok) shape = {std::stoll(tokens[0]), std::stoll(tokens[1]), std::stoll(tokens[2]), {}};
    } catch (const std::exception&) {
      ok = false;
    }
    if (!ok || shape.m < 1 || shape.n < 1 || shape.k < 32 || shape.k % 32 != 0)
      throw std::runtime_error(path + ":" + std::to_string(number) +
                               ": expected 'M N K [label]' with positive M, N and K a multiple "
                               "of 32");
    if (tokens.size() == 4) shape.label = tokens[3];
    shapes.push_back(shape);
  }
  return shapes;
}

}  // namespace a4w4::bench
