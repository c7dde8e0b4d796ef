// The tuned-configuration file format: CSV whose header starts
//   device,sm_count,M,N,K,kernel,split_k,us,tflops
// (more columns may follow; they are ignored). Blank lines and lines starting with '#' are
// skipped; a field may be double-quoted ("" inside stands for one quote). This layer knows only
// the text: it depends on nothing else in a4w4, so the fuzzer builds it on its own. Whether a
// kernel exists or applies is decided later (dispatch/tuned_config.h).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace a4w4::tuned {

// The columns every file starts with, in order.
inline constexpr std::string_view kHeader = "device,sm_count,M,N,K,kernel,split_k,us,tflops";

// Which layout of B a row was tuned with (optional column `weights`: "plain", "prepared"
// (version 2), "prepared-int8" (version 2 with its int8 form), or empty; absent: any).
enum class Weights : uint8_t { kAny, kPlain, kPrepared, kPreparedInt8 };

struct Row {
  int line = 0;  // 1-based line in the file
  std::string device;
  int sm_count = 0;
  int64_t m = 0, n = 0, k = 0;
  std::string kernel;
  int split_k = 0;  // 0: the kernel's automatic split
  double us = 0, tflops = 0;
  // Tuned with a device workspace (optional column `workspace`, 0 or 1; absent: 0): the chooser
  // prefers such entries in contexts that have a workspace (a4w4_context_set_workspace).
  bool workspace = false;
  // Tuned with this layout of B: the chooser prefers such entries for problems with that layout.
  Weights weights = Weights::kAny;

  bool operator==(const Row&) const = default;
};

// "file:line: what is wrong" (or "file: ..." for the whole file).
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses a whole file; label names it in messages. Throws ConfigError on the first problem:
// a missing or wrong header, a row with the wrong number of fields, a field that is not what its
// column holds (positive integers for sm_count, M, N; K a positive multiple of 32; 0 <= split_k <=
// K/32; finite non-negative us and tflops; a kernel name of letters, digits, '.', '_', '-'; 0 or 1
// in a `workspace` column, "plain", "prepared", "prepared-int8" or nothing in a `weights` column,
// when the header names them after the required columns).
std::vector<Row> parse_csv(std::string_view text, std::string_view label);

// One line (no newline) that parse_csv reads back as row (line number, workspace and weights
// aside: the writer adds those columns with its other extra columns).
std::string format_row(const Row& row);

// The `weights` column's text for w ("" for kAny).
std::string_view weights_name(Weights w);

}  // namespace a4w4::tuned
