// A small, strict reader and writer for NumPy's .npy format (versions 1.0, 2.0 and 3.0).
//
// Only what the a4w4 tool exchanges is supported: little-endian float32 ('<f4'), float16 ('<f2'),
// and bytes ('|u1', '|i1'; the byte-order mark of a one-byte type is ignored), C order, rank 0..8.
// Everything else -- a bad magic, an unknown header key, a Fortran-ordered array, a negative or
// overflowing shape, a data section that is shorter or longer than the shape says -- is rejected
// with an npy::Error whose message says what was wrong. The parser never reads past the buffer it
// is given and allocates no more than the size of its input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace a4w4::npy {

enum class Dtype { kF32, kF16, kU8, kI8 };

inline constexpr int kMaxRank = 8;

// Bytes per element.
size_t itemsize(Dtype dtype);
// The descr this library writes: "<f4", "<f2", "|u1", "|i1".
std::string_view descr(Dtype dtype);

// Every failure of this library: malformed input, an unsupported array, an I/O error.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A C-ordered, little-endian array held in memory.
struct Array {
  Dtype dtype = Dtype::kU8;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // exactly element_count() * itemsize(dtype) bytes

  int64_t element_count() const;
  int rank() const { return static_cast<int>(shape.size()); }
};

// What an NPY header says; the data follow at data_offset and span data_bytes.
struct Header {
  Dtype dtype = Dtype::kU8;
  std::vector<int64_t> shape;
  size_t data_offset = 0;
  size_t data_bytes = 0;
};

// Parses the header at the start of bytes (which may hold more than the header).
Header parse_header(std::span<const uint8_t> bytes);

// Parses a complete .npy image: the data must fill the rest of bytes exactly.
Array parse(std::span<const uint8_t> bytes);

// Reads and parses a .npy file. Messages do not repeat the path; callers add it.
Array read_file(const std::filesystem::path& path);

// The complete .npy image of array: a version 1.0 header (2.0 if it would not fit) padded to a
// multiple of 64 bytes, then the data. Throws Error if data does not match shape and dtype.
std::vector<uint8_t> encode(const Array& array);

// "[2, 3]" -- for messages.
std::string shape_string(std::span<const int64_t> shape);

}  // namespace a4w4::npy
