#include "npy.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <system_error>

// The data are exchanged as they lie in memory; a big-endian port would have to swap them.
static_assert(std::endian::native == std::endian::little, "npy.cpp assumes a little-endian host");

namespace a4w4::npy {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kVersionOffset = 6;  // major, minor bytes follow the magic
constexpr size_t kLengthOffset = 8;   // then the header length: u16 (1.0) or u32 (2.0, 3.0)
constexpr size_t kHeaderAlignment = 64;

[[noreturn]] void fail(const std::string& message) {
  throw Error(message);
}

uint32_t read_le(std::span<const uint8_t> bytes, size_t offset, size_t width) {
  uint32_t value = 0;
  for (size_t i = 0; i < width; ++i) value |= static_cast<uint32_t>(bytes[offset + i]) << (8 * i);
  return value;
}

// "'x'" for a printable character, "byte 0x.." otherwise.
std::string describe_char(char c) {
  const auto byte = static_cast<unsigned char>(c);
  if (byte >= 0x20 && byte < 0x7F) return std::string("'") + c + "'";
  constexpr char kHex[] = "0123456789abcdef";
  return std::string("byte 0x") + kHex[byte >> 4] + kHex[byte & 0xF];
}

// The header dictionary, a Python literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// Keys may come in any order, with any whitespace and an optional trailing comma; each of the
// three keys must appear exactly once and no other key is accepted.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  void parse(Header& header) {
    std::optional<std::string> descr_value;
    std::optional<bool> fortran_order;
    std::optional<std::vector<int64_t>> shape;

    skip_space();
    expect('{');
    skip_space();
    while (!at('}')) {
      const std::string key = parse_string("a key");
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        if (descr_value) fail_here("duplicate key 'descr'");
        descr_value = parse_string("the descr value");
      } else if (key == "fortran_order") {
        if (fortran_order) fail_here("duplicate key 'fortran_order'");
        fortran_order = parse_bool();
      } else if (key == "shape") {
        if (shape) fail_here("duplicate key 'shape'");
        shape = parse_shape();
      } else {
        fail_here("unexpected key '" + key + "' (expected descr, fortran_order and shape)");
      }
      skip_space();
      if (at(',')) {
        ++pos_;
        skip_space();
      } else if (!at('}')) {
        fail_here("expected ',' or '}' after the value of '" + key + "'");
      }
    }
    ++pos_;  // the closing brace
    skip_space();
    if (pos_ != text_.size()) fail_here("unexpected " + describe_char(text_[pos_]) + " after '}'");

    if (!descr_value) fail("header: missing key 'descr'");
    if (!fortran_order) fail("header: missing key 'fortran_order'");
    if (!shape) fail("header: missing key 'shape'");
    if (*fortran_order)
      fail("header: fortran_order True is not supported (save the array in C order)");
    header.dtype = dtype_from_descr(*descr_value);
    header.shape = std::move(*shape);
  }

 private:
  static Dtype dtype_from_descr(const std::string& descr_text) {
    if (descr_text == "<f4") return Dtype::kF32;
    if (descr_text == "<f2") return Dtype::kF16;
    // One-byte types have no byte order; NumPy writes '|', other writers '<', '>' or '='.
    if (descr_text.size() == 3 &&
        std::string_view("|<>=").find(descr_text[0]) != std::string::npos) {
      if (descr_text.substr(1) == "u1") return Dtype::kU8;
      if (descr_text.substr(1) == "i1") return Dtype::kI8;
    }
    if (descr_text.size() >= 2 && descr_text[0] == '>')
      fail("header: big-endian descr '" + descr_text +
           "' is not supported (expected '<f4', '<f2', "
           "'|u1' or '|i1')");
    fail("header: unsupported descr '" + descr_text + "' (expected '<f4', '<f2', '|u1' or '|i1')");
  }

  bool at(char c) const { return pos_ < text_.size() && text_[pos_] == c; }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  [[noreturn]] void fail_here(const std::string& what) const {
    fail("header: " + what + " at offset " + std::to_string(pos_) + " of the header dictionary");
  }

  void expect(char c) {
    if (pos_ >= text_.size()) fail_here(std::string("expected '") + c + "' but the header ended");
    if (text_[pos_] != c)
      fail_here(std::string("expected '") + c + "', found " + describe_char(text_[pos_]));
    ++pos_;
  }

  // A Python string literal in single or double quotes, without escapes.
  std::string parse_string(const char* what) {
    if (!at('\'') && !at('"')) {
      if (pos_ >= text_.size())
        fail_here(std::string("expected ") + what + " but the header ended");
      fail_here(std::string("expected ") + what + " (a quoted string), found " +
                describe_char(text_[pos_]));
    }
    const char quote = text_[pos_++];
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') fail_here("escape sequences in strings are not supported");
      if (text_[pos_] == '\n') fail_here("unterminated string");
      ++pos_;
    }
    if (pos_ >= text_.size()) fail_here("unterminated string");
    std::string value(text_.substr(start, pos_ - start));
    ++pos_;  // the closing quote
    return value;
  }

  bool parse_bool() {
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const std::string_view w(word);
      if (text_.substr(pos_, w.size()) == w) {
        const size_t end = pos_ + w.size();
        if (end < text_.size() &&
            (std::isalnum(static_cast<unsigned char>(text_[end])) || text_[end] == '_'))
          break;
        pos_ = end;
        return value;
      }
    }
    fail_here("fortran_order must be True or False");
  }

  // A non-negative decimal integer that fits int64_t, without leading zeros (as Python wants).
  int64_t parse_dimension() {
    if (at('-')) fail_here("negative dimension in shape");
    if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      if (pos_ >= text_.size()) fail_here("expected a dimension but the header ended");
      fail_here("expected a dimension (a non-negative integer), found " +
                describe_char(text_[pos_]));
    }
    const size_t start = pos_;
    int64_t value = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      const int digit = text_[pos_] - '0';
      if (value > (std::numeric_limits<int64_t>::max() - digit) / 10)
        fail_here("dimension too large");
      value = value * 10 + digit;
      ++pos_;
    }
    if (text_[start] == '0' && pos_ - start > 1) fail_here("dimension with a leading zero");
    return value;
  }

  // A Python tuple of dimensions: (), (n,), (n, m) or (n, m,).
  std::vector<int64_t> parse_shape() {
    std::vector<int64_t> dims;
    if (!at('(')) fail_here("shape must be a tuple such as (2, 3)");
    ++pos_;
    skip_space();
    bool trailing_comma = false;
    while (!at(')')) {
      if (static_cast<int>(dims.size()) == kMaxRank)
        fail_here("shape has more than " + std::to_string(kMaxRank) + " dimensions");
      dims.push_back(parse_dimension());
      skip_space();
      trailing_comma = at(',');
      if (trailing_comma) {
        ++pos_;
        skip_space();
      } else if (!at(')')) {
        if (pos_ >= text_.size()) fail_here("unterminated shape tuple");
        fail_here("expected ',' or ')' in shape, found " + describe_char(text_[pos_]));
      }
    }
    ++pos_;  // the closing parenthesis
    // In Python (5) is the integer 5, not a tuple.
    if (dims.size() == 1 && !trailing_comma)
      fail_here("shape (n) is not a tuple; a one-dimensional shape is written (n,)");
    return dims;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// Element count times itemsize, or an Error if it does not fit in size_t and int64_t.
size_t checked_data_bytes(const std::vector<int64_t>& shape, Dtype dtype) {
  constexpr uint64_t kLimit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t count = 1;
  bool empty = false;
  bool overflow = false;
  for (const int64_t dim : shape) {
    if (dim == 0) empty = true;
    if (overflow || empty) continue;
    if (count > kLimit / static_cast<uint64_t>(dim))
      overflow = true;
    else
      count *= static_cast<uint64_t>(dim);
  }
  if (empty) return 0;
  const uint64_t size = itemsize(dtype);
  bool too_large = overflow || count > kLimit / size;
  if constexpr (sizeof(size_t) < sizeof(uint64_t))
    too_large = too_large || count * size > std::numeric_limits<size_t>::max();
  if (too_large)
    fail("header: shape " + shape_string(shape) + " is too large (its size in bytes overflows)");
  return static_cast<size_t>(count * size);
}

// The data section must be exactly as long as the shape says.
void check_data_length(const Header& header, size_t available) {
  if (available == header.data_bytes) return;
  const std::string needs = "shape " + shape_string(header.shape) + " of " +
                            std::string(descr(header.dtype)) + " needs " +
                            std::to_string(header.data_bytes) + " bytes, ";
  if (available < header.data_bytes)
    fail("truncated data: " + needs + "only " + std::to_string(available) + " follow the header");
  fail("trailing data: " + needs + "but " + std::to_string(available) + " follow the header");
}

}  // namespace

size_t itemsize(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32:
      return 4;
    case Dtype::kF16:
      return 2;
    case Dtype::kU8:
    case Dtype::kI8:
      return 1;
  }
  return 1;
}

std::string_view descr(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32:
      return "<f4";
    case Dtype::kF16:
      return "<f2";
    case Dtype::kU8:
      return "|u1";
    case Dtype::kI8:
      return "|i1";
  }
  return "?";
}

int64_t Array::element_count() const {
  // A zero dimension first, so that the product of the others cannot overflow.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t count = 1;
  for (const int64_t dim : shape) count *= dim;
  return count;
}

std::string shape_string(std::span<const int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

Header parse_header(std::span<const uint8_t> bytes) {
  if (bytes.size() < kMagic.size() || std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0)
    fail("not an NPY file (bad magic: expected \\x93NUMPY)");
  if (bytes.size() < kLengthOffset) fail("truncated header: the file ends inside the preamble");
  const int major = bytes[kVersionOffset], minor = bytes[kVersionOffset + 1];
  if (major < 1 || major > 3 || minor != 0)
    fail("unsupported NPY version " + std::to_string(major) + "." + std::to_string(minor) +
         " (expected 1.0, 2.0 or 3.0)");
  const size_t length_width = major == 1 ? 2 : 4;
  const size_t dict_offset = kLengthOffset + length_width;
  if (bytes.size() < dict_offset) fail("truncated header: the file ends inside the preamble");
  const size_t dict_length = read_le(bytes, kLengthOffset, length_width);
  if (bytes.size() - dict_offset < dict_length)
    fail("truncated header: it declares " + std::to_string(dict_length) + " bytes but only " +
         std::to_string(bytes.size() - dict_offset) + " follow");

  Header header;
  const std::string_view dict(reinterpret_cast<const char*>(bytes.data()) + dict_offset,
                              dict_length);
  HeaderParser(dict).parse(header);
  header.data_offset = dict_offset + dict_length;
  header.data_bytes = checked_data_bytes(header.shape, header.dtype);
  return header;
}

Array parse(std::span<const uint8_t> bytes) {
  Header header = parse_header(bytes);
  check_data_length(header, bytes.size() - header.data_offset);
  Array array;
  array.dtype = header.dtype;
  array.shape = std::move(header.shape);
  const auto data = bytes.subspan(header.data_offset);
  array.data.assign(data.begin(), data.end());
  return array;
}

Array read_file(const std::filesystem::path& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status))
    fail("cannot open: " + (error ? error.message() : std::string("no such file")));
  if (!std::filesystem::is_regular_file(status)) fail("cannot read: not a regular file");
  const auto size = std::filesystem::file_size(path, error);
  if (error) fail("cannot read: " + error.message());

  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open for reading");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (static_cast<size_t>(in.gcount()) != bytes.size())
    fail("read error (file changed or I/O error)");

  // Parse in place: the data stay in the buffer read, moved down over the header.
  Header header = parse_header(bytes);
  check_data_length(header, bytes.size() - header.data_offset);
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header.data_offset));
  Array array;
  array.dtype = header.dtype;
  array.shape = std::move(header.shape);
  array.data = std::move(bytes);
  return array;
}

std::vector<uint8_t> encode(const Array& array) {
  if (array.rank() > kMaxRank)
    fail("cannot write rank " + std::to_string(array.rank()) + " (at most " +
         std::to_string(kMaxRank) + ")");
  for (const int64_t dim : array.shape)
    if (dim < 0) fail("cannot write negative shape " + shape_string(array.shape));
  if (checked_data_bytes(array.shape, array.dtype) != array.data.size())
    fail("cannot write: shape " + shape_string(array.shape) + " of " +
         std::string(descr(array.dtype)) + " does not match " + std::to_string(array.data.size()) +
         " data bytes");

  std::string dict =
      "{'descr': '" + std::string(descr(array.dtype)) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < array.shape.size(); ++i) {
    if (i > 0) dict += ", ";
    dict += std::to_string(array.shape[i]);
  }
  if (array.shape.size() == 1) dict += ",";
  dict += "), }";

  // Pad with spaces and end with a newline so the data start on a 64-byte boundary; use a 2.0
  // header only if the 1.0 header's 16-bit length cannot hold the dictionary.
  const auto padded_total = [&](size_t preamble) {
    return (preamble + dict.size() + 1 + kHeaderAlignment - 1) / kHeaderAlignment *
           kHeaderAlignment;
  };
  const bool v1 = padded_total(kLengthOffset + 2) - (kLengthOffset + 2) <= 0xFFFF;
  const size_t length_width = v1 ? 2 : 4;
  const size_t preamble = kLengthOffset + length_width;
  const size_t total = padded_total(preamble);
  dict.append(total - preamble - dict.size() - 1, ' ');
  dict += '\n';

  std::vector<uint8_t> out(total + array.data.size());
  std::memcpy(out.data(), kMagic.data(), kMagic.size());
  out[kVersionOffset] = v1 ? 1 : 2;
  out[kVersionOffset + 1] = 0;
  for (size_t i = 0; i < length_width; ++i)
    out[kLengthOffset + i] = static_cast<uint8_t>(dict.size() >> (8 * i));
  std::memcpy(out.data() + preamble, dict.data(), dict.size());
  if (!array.data.empty()) std::memcpy(out.data() + total, array.data.data(), array.data.size());
  return out;
}

}  // namespace a4w4::npy
