#include "dispatch/tuned_csv.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

namespace a4w4::tuned {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 40;  // the API's limit on sizes

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A field for messages: shown quoted and shortened, so that odd bytes cannot flood the message.
std::string shown(std::string_view field) {
  std::string out;
  for (char c : field.substr(0, 40)) {
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u >= 0x7F) ? fmt::format("\\x{:02x}", u) : std::string(1, c);
  }
  return "'" + out + (field.size() > 40 ? "...'" : "'");
}

class LineParser {
 public:
  LineParser(std::string_view label, int line) : label_(label), line_(line) {}

  [[noreturn]] void fail(std::string_view what) const {
    throw ConfigError(fmt::format("{}:{}: {}", label_, line_, what));
  }

  // Splits a line into fields: unquoted fields are trimmed; "..." fields keep their text.
  std::vector<std::string> split(std::string_view text) const {
    std::vector<std::string> fields;
    size_t at = 0;
    while (true) {
      while (at < text.size() && (text[at] == ' ' || text[at] == '\t')) ++at;
      std::string field;
      if (at < text.size() && text[at] == '"') {
        ++at;
        while (true) {
          if (at >= text.size()) fail("a quoted field is not closed on its line");
          if (text[at] == '"') {
            if (at + 1 < text.size() && text[at + 1] == '"') {
              field += '"';
              at += 2;
              continue;
            }
            ++at;
            break;
          }
          field += text[at++];
        }
        while (at < text.size() && (text[at] == ' ' || text[at] == '\t')) ++at;
        if (at < text.size() && text[at] != ',')
          fail(fmt::format("unexpected text after the quoted field {}", shown(field)));
      } else {
        const size_t comma = text.find(',', at);
        const std::string_view raw =
            text.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at);
        if (raw.find('"') != std::string_view::npos)
          fail(fmt::format("a quote inside the unquoted field {}", shown(raw)));
        field = std::string(trim(raw));
        at += raw.size();
      }
      fields.push_back(std::move(field));
      if (at >= text.size()) break;
      ++at;  // the comma
    }
    return fields;
  }

  int64_t integer(const std::string& field, std::string_view column, int64_t min,
                  int64_t max) const {
    int64_t value = 0;
    const char* end = field.data() + field.size();
    const auto [ptr, error] = std::from_chars(field.data(), end, value);
    if (field.empty() || error != std::errc() || ptr != end)
      fail(fmt::format("{}: {} is not an integer", column, shown(field)));
    if (value < min || value > max)
      fail(fmt::format("{}: {} is outside [{}, {}]", column, value, min, max));
    return value;
  }

  double number(const std::string& field, std::string_view column) const {
    double value = 0;
    const char* end = field.data() + field.size();
    const auto [ptr, error] = std::from_chars(field.data(), end, value);
    if (field.empty() || error != std::errc() || ptr != end)
      fail(fmt::format("{}: {} is not a number", column, shown(field)));
    if (!std::isfinite(value) || value < 0)
      fail(fmt::format("{}: {} must be finite and >= 0", column, shown(field)));
    return value;
  }

 private:
  std::string_view label_;
  int line_;
};

bool valid_kernel_name(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool valid_device_name(std::string_view name) {
  if (name.empty() || name.size() > 256 || trim(name) != name) return false;
  for (char c : name)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) return false;
  return true;
}

}  // namespace

std::vector<Row> parse_csv(std::string_view text, std::string_view label) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // a UTF-8 byte order mark
  std::vector<Row> rows;
  size_t header_columns = 0, workspace_column = 0, weights_column = 0;  // 0: no such column
  int line_number = 0;
  size_t at = 0;
  while (at < text.size()) {
    const size_t newline = text.find('\n', at);
    std::string_view line =
        text.substr(at, newline == std::string_view::npos ? std::string_view::npos : newline - at);
    at = newline == std::string_view::npos ? text.size() : newline + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (trim(line).empty() || trim(line).front() == '#') continue;
    const LineParser parser(label, line_number);
    if (line.find('\0') != std::string_view::npos) parser.fail("a NUL byte in the line");
    const std::vector<std::string> fields = parser.split(line);
    if (header_columns == 0) {
      static const std::vector<std::string> expected = [] {
        return LineParser("", 0).split(kHeader);
      }();
      bool ok = fields.size() >= expected.size();
      for (size_t i = 0; ok && i < expected.size(); ++i) ok = fields[i] == expected[i];
      if (!ok) parser.fail(fmt::format("the header must start with '{}'", kHeader));
      header_columns = fields.size();
      for (size_t i = expected.size(); i < fields.size(); ++i)
        if (fields[i] == "workspace")
          workspace_column = i;
        else if (fields[i] == "weights")
          weights_column = i;
      continue;
    }
    if (fields.size() != header_columns)
      parser.fail(
          fmt::format("{} fields, but the header has {} columns", fields.size(), header_columns));
    Row row;
    row.line = line_number;
    row.device = fields[0];
    if (!valid_device_name(row.device))
      parser.fail(
          fmt::format("device: {} is not a device name (non-empty, no control "
                      "characters, no surrounding spaces)",
                      shown(fields[0])));
    row.sm_count = static_cast<int>(parser.integer(fields[1], "sm_count", 1, 1 << 20));
    row.m = parser.integer(fields[2], "M", 1, kMaxDim);
    row.n = parser.integer(fields[3], "N", 1, kMaxDim);
    row.k = parser.integer(fields[4], "K", 32, kMaxDim);
    if (row.k % 32 != 0) parser.fail(fmt::format("K: {} is not a multiple of 32", row.k));
    row.kernel = fields[5];
    if (!valid_kernel_name(row.kernel))
      parser.fail(fmt::format("kernel: {} is not a kernel name (letters, digits, '.', '_', '-')",
                              shown(fields[5])));
    row.split_k = static_cast<int>(
        parser.integer(fields[6], "split_k", 0, std::min<int64_t>(row.k / 32, 1 << 30)));
    row.us = parser.number(fields[7], "us");
    row.tflops = parser.number(fields[8], "tflops");
    if (workspace_column > 0)
      row.workspace = parser.integer(fields[workspace_column], "workspace", 0, 1) == 1;
    if (weights_column > 0) {
      const std::string& weights = fields[weights_column];
      bool named = weights.empty();  // empty: any layout
      for (const Weights w : {Weights::kPlain, Weights::kPrepared, Weights::kPreparedInt8})
        if (weights == weights_name(w)) row.weights = w, named = true;
      if (!named)
        parser.fail(fmt::format("weights: {} is not 'plain', 'prepared', 'prepared-int8' or empty",
                                shown(weights)));
    }
    rows.push_back(std::move(row));
  }
  if (header_columns == 0)
    throw ConfigError(fmt::format("{}: no header line (expected '{}')", label, kHeader));
  return rows;
}

std::string_view weights_name(Weights w) {
  switch (w) {
    case Weights::kPlain:
      return "plain";
    case Weights::kPrepared:
      return "prepared";
    case Weights::kPreparedInt8:
      return "prepared-int8";
    case Weights::kAny:
      break;
  }
  return "";
}

std::string format_row(const Row& row) {
  std::string device = row.device;
  const bool quote = device.find_first_of(",\"#") != std::string::npos;
  if (quote) {
    std::string escaped = "\"";
    for (char c : device) escaped += c == '"' ? std::string("\"\"") : std::string(1, c);
    device = escaped + "\"";
  }
  return fmt::format("{},{},{},{},{},{},{},{},{}", device, row.sm_count, row.m, row.n, row.k,
                     row.kernel, row.split_k, row.us, row.tflops);
}

}  // namespace a4w4::tuned
