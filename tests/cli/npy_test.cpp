// The NPY reader/writer: round trips, the header variants other writers produce, and one test per
// class of malformed input, each rejected with a message that says what is wrong.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "npy.h"

namespace a4w4::npy {
namespace {

using Bytes = std::vector<uint8_t>;

// A .npy image with the given dictionary text (used verbatim: no padding, no newline added).
Bytes image(const std::string& dict, const Bytes& data = {}, int version = 1) {
  Bytes out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(version), 0};
  const size_t width = version == 1 ? 2 : 4;
  for (size_t i = 0; i < width; ++i) out.push_back(static_cast<uint8_t>(dict.size() >> (8 * i)));
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string dict(const std::string& descr_text, const std::string& shape) {
  return "{'descr': '" + descr_text + "', 'fortran_order': False, 'shape': " + shape + ", }\n";
}

// The message of the Error that parsing bytes throws; fails the test if it parses.
std::string rejection(const Bytes& bytes) {
  try {
    parse(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "parsed, but should have been rejected";
  return {};
}

#define EXPECT_REJECTED(bytes, fragment)                                            \
  do {                                                                              \
    const std::string message = rejection(bytes);                                   \
    EXPECT_NE(message.find(fragment), std::string::npos) << "message: " << message; \
  } while (0)

Bytes iota_bytes(size_t n) {
  Bytes data(n);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(i * 37 + 11);
  return data;
}

TEST(NpyRoundTrip, EveryDtypeAndRank) {
  for (const Dtype dtype : {Dtype::kF32, Dtype::kF16, Dtype::kU8, Dtype::kI8}) {
    for (int rank = 0; rank <= kMaxRank; ++rank) {
      Array array;
      array.dtype = dtype;
      for (int d = 0; d < rank; ++d) array.shape.push_back(d % 3 + 1);
      array.data = iota_bytes(static_cast<size_t>(array.element_count()) * itemsize(dtype));
      const Bytes encoded = encode(array);
      const Array decoded = parse(encoded);
      EXPECT_EQ(decoded.dtype, dtype);
      EXPECT_EQ(decoded.shape, array.shape) << "rank " << rank;
      EXPECT_EQ(decoded.data, array.data);
    }
  }
}

TEST(NpyRoundTrip, EmptyArrays) {
  const Array array{Dtype::kF32, {0, 7}, {}};
  const Array decoded = parse(encode(array));
  EXPECT_EQ(decoded.shape, array.shape);
  EXPECT_TRUE(decoded.data.empty());
  EXPECT_EQ(decoded.element_count(), 0);
}

TEST(NpyWriter, HeaderIsVersion1PaddedTo64BytesEndingInNewline) {
  const Bytes encoded = encode(Array{Dtype::kF32, {2, 3}, Bytes(24)});
  ASSERT_GT(encoded.size(), 10u);
  EXPECT_EQ(encoded[6], 1);
  EXPECT_EQ(encoded[7], 0);
  const size_t header_end = 10 + (encoded[8] | (encoded[9] << 8));
  EXPECT_EQ(header_end % 64, 0u);
  EXPECT_EQ(encoded[header_end - 1], '\n');
  EXPECT_EQ(encoded.size(), header_end + 24);
  const std::string header(encoded.begin() + 10, encoded.begin() + static_cast<long>(header_end));
  EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0), 0u)
      << header;
}

TEST(NpyWriter, OneDimensionalShapeIsATuple) {
  const Bytes encoded = encode(Array{Dtype::kU8, {5}, Bytes(5)});
  const std::string text(encoded.begin(), encoded.end());
  EXPECT_NE(text.find("'shape': (5,)"), std::string::npos);
}

TEST(NpyWriter, RejectsDataThatDoesNotMatchTheShape) {
  EXPECT_THROW(encode(Array{Dtype::kF32, {2, 3}, Bytes(23)}), Error);
  EXPECT_THROW(encode(Array{Dtype::kU8, {-1}, Bytes()}), Error);
}

TEST(NpyHeader, Versions1To3) {
  for (const int version : {1, 2, 3}) {
    const Array array = parse(image(dict("<f2", "(2,)"), Bytes(4), version));
    EXPECT_EQ(array.dtype, Dtype::kF16) << "version " << version;
    EXPECT_EQ(array.shape, std::vector<int64_t>{2});
  }
}

TEST(NpyHeader, ToleratesWhitespaceKeyOrderQuotesAndTrailingCommas) {
  const std::string variants[] = {
      "{'descr':'<f4','fortran_order':False,'shape':(2,3)}",
      "{ 'shape' : ( 2 , 3 ) , 'descr' : '<f4' , 'fortran_order' : False }",
      "{\"fortran_order\": False, \"shape\": (2, 3,), \"descr\": \"<f4\",}   \n",
      "\t{'descr':\t'<f4',\n 'fortran_order': False,\r\n 'shape': (2, 3), }\n",
  };
  for (const std::string& text : variants) {
    const Array array = parse(image(text, Bytes(24)));
    EXPECT_EQ(array.dtype, Dtype::kF32) << text;
    EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 3})) << text;
  }
}

TEST(NpyHeader, OneByteTypesIgnoreTheByteOrderMark) {
  for (const char* descr_text : {"|u1", "<u1", ">u1", "=u1"})
    EXPECT_EQ(parse(image(dict(descr_text, "(1,)"), Bytes(1))).dtype, Dtype::kU8) << descr_text;
  EXPECT_EQ(parse(image(dict("|i1", "(1,)"), Bytes(1))).dtype, Dtype::kI8);
}

TEST(NpyHeader, ScalarShape) {
  const Array array = parse(image(dict("<f4", "()"), Bytes(4)));
  EXPECT_EQ(array.rank(), 0);
  EXPECT_EQ(array.data.size(), 4u);
}

TEST(NpyMalformed, EmptyAndBadMagic) {
  EXPECT_REJECTED(Bytes{}, "bad magic");
  EXPECT_REJECTED(Bytes({'P', 'K', 3, 4}), "bad magic");
  Bytes wrong = image(dict("<f4", "(1,)"), Bytes(4));
  wrong[1] = 'n';
  EXPECT_REJECTED(wrong, "bad magic");
}

TEST(NpyMalformed, UnsupportedVersion) {
  EXPECT_REJECTED(image(dict("<f4", "(1,)"), Bytes(4), 4), "unsupported NPY version 4.0");
  Bytes minor = image(dict("<f4", "(1,)"), Bytes(4));
  minor[7] = 1;
  EXPECT_REJECTED(minor, "unsupported NPY version 1.1");
}

TEST(NpyMalformed, TruncatedHeader) {
  const Bytes full = image(dict("<f4", "(1,)"), Bytes(4));
  EXPECT_REJECTED(Bytes(full.begin(), full.begin() + 7), "truncated header");
  EXPECT_REJECTED(Bytes(full.begin(), full.begin() + 9), "truncated header");
  EXPECT_REJECTED(Bytes(full.begin(), full.begin() + 30), "truncated header");
  EXPECT_REJECTED(image("{'descr': '<f4', 'fortran_order': False, 'shape': (1,"), "header");
}

TEST(NpyMalformed, TruncatedData) {
  EXPECT_REJECTED(image(dict("<f4", "(2, 3)"), Bytes(23)), "truncated data");
  EXPECT_REJECTED(image(dict("<f4", "(2, 3)")), "truncated data");
}

TEST(NpyMalformed, TrailingData) {
  EXPECT_REJECTED(image(dict("<f4", "(2, 3)"), Bytes(25)), "trailing data");
  EXPECT_REJECTED(image(dict("|u1", "(0,)"), Bytes(1)), "trailing data");
}

TEST(NpyMalformed, BadDescr) {
  EXPECT_REJECTED(image(dict("<f8", "(1,)"), Bytes(8)), "unsupported descr '<f8'");
  EXPECT_REJECTED(image(dict(">f4", "(1,)"), Bytes(4)), "big-endian");
  EXPECT_REJECTED(image(dict("|f4", "(1,)"), Bytes(4)), "unsupported descr");
  EXPECT_REJECTED(image("{'descr': 5, 'fortran_order': False, 'shape': (1,)}", Bytes(1)),
                  "descr value");
}

TEST(NpyMalformed, FortranOrder) {
  EXPECT_REJECTED(image("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", Bytes(16)),
                  "fortran_order True");
  EXPECT_REJECTED(image("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }", Bytes(4)),
                  "True or False");
  EXPECT_REJECTED(image("{'descr': '<f4', 'fortran_order': Falsey, 'shape': (1,), }", Bytes(4)),
                  "True or False");
}

TEST(NpyMalformed, BadShape) {
  EXPECT_REJECTED(image(dict("|u1", "(3)"), Bytes(3)), "not a tuple");
  EXPECT_REJECTED(image(dict("|u1", "[3]"), Bytes(3)), "must be a tuple");
  EXPECT_REJECTED(image(dict("|u1", "(a,)"), Bytes(3)), "expected a dimension");
  EXPECT_REJECTED(image(dict("|u1", "(-1,)")), "negative dimension");
  EXPECT_REJECTED(image(dict("|u1", "(3.0,)"), Bytes(3)), "expected ',' or ')'");
  EXPECT_REJECTED(image(dict("|u1", "(03,)"), Bytes(3)), "leading zero");
  EXPECT_REJECTED(image(dict("|u1", "(1, , 2)"), Bytes(2)), "expected a dimension");
  EXPECT_REJECTED(image(dict("|u1", "(1, 1, 1, 1, 1, 1, 1, 1, 1)"), Bytes(1)),
                  "more than 8 dimensions");
}

TEST(NpyMalformed, HugeShapeOverflows) {
  EXPECT_REJECTED(image(dict("<f4", "(4611686018427387904, 4)")), "too large");
  EXPECT_REJECTED(image(dict("<f4", "(2305843009213693952,)")), "too large");  // 2^61 * 4 bytes
  EXPECT_REJECTED(image(dict("|u1", "(4294967296, 4294967296)")), "too large");
  EXPECT_REJECTED(image(dict("|u1", "(99999999999999999999,)")), "dimension too large");
  // A zero dimension makes the array empty whatever the others say.
  EXPECT_EQ(parse(image(dict("<f4", "(0, 4611686018427387904)"))).element_count(), 0);
}

TEST(NpyMalformed, KeysMissingDuplicatedOrUnknown) {
  EXPECT_REJECTED(image("{'descr': '<f4', 'shape': (1,)}", Bytes(4)),
                  "missing key 'fortran_order'");
  EXPECT_REJECTED(image("{'fortran_order': False, 'shape': (1,)}", Bytes(4)),
                  "missing key 'descr'");
  EXPECT_REJECTED(image("{'descr': '<f4', 'fortran_order': False}", Bytes(4)),
                  "missing key 'shape'");
  EXPECT_REJECTED(
      image("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", Bytes(4)),
      "duplicate key 'descr'");
  EXPECT_REJECTED(
      image("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}", Bytes(4)),
      "unexpected key 'extra'");
}

TEST(NpyMalformed, BadDictionarySyntax) {
  EXPECT_REJECTED(image("descr: <f4", Bytes(4)), "expected '{'");
  EXPECT_REJECTED(image("{'descr' '<f4', 'fortran_order': False, 'shape': (1,)}", Bytes(4)),
                  "expected ':'");
  EXPECT_REJECTED(image("{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}", Bytes(4)),
                  "expected ',' or '}'");
  EXPECT_REJECTED(image("{'descr: '<f4', 'fortran_order': False, 'shape': (1,)}", Bytes(4)),
                  "expected ':'");
  EXPECT_REJECTED(image("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", Bytes(4)),
                  "after '}'");
  EXPECT_REJECTED(image("{'des\\cr': '<f4'}", Bytes(4)), "escape");
  EXPECT_REJECTED(image("{'descr", Bytes(4)), "unterminated string");
  EXPECT_REJECTED(image("{", Bytes(4)), "header ended");
}

class NpyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ =
        std::filesystem::temp_directory_path() /
        ("a4w4_npy_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::filesystem::path write(const std::string& name, const Bytes& bytes) {
    const std::filesystem::path path = directory_ / name;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  std::filesystem::path directory_;
};

TEST_F(NpyFileTest, ReadsWhatWasWritten) {
  const Array array{Dtype::kF32, {3, 2}, iota_bytes(24)};
  const Array read = read_file(write("x.npy", encode(array)));
  EXPECT_EQ(read.shape, array.shape);
  EXPECT_EQ(read.data, array.data);
}

TEST_F(NpyFileTest, ReportsMissingFilesDirectoriesAndTruncation) {
  try {
    read_file(directory_ / "missing.npy");
    ADD_FAILURE() << "read a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
  try {
    read_file(directory_);
    ADD_FAILURE() << "read a directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  Bytes truncated = encode(Array{Dtype::kU8, {100}, Bytes(100)});
  truncated.resize(truncated.size() - 1);
  try {
    read_file(write("t.npy", truncated));
    ADD_FAILURE() << "read a truncated file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated data"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace a4w4::npy
