// The a4w4 executable end to end: each test works in its own temporary directory, runs the tool
// through the shell and checks its exit status, its output files and its one-line errors.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "npy.h"

namespace a4w4::npy {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

struct Outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

Array f32_array(std::vector<int64_t> shape, const std::vector<float>& values) {
  Array array{Dtype::kF32, std::move(shape), Bytes(values.size() * 4)};
  std::memcpy(array.data.data(), values.data(), array.data.size());
  return array;
}

std::vector<float> f32_values(const Array& array) {
  EXPECT_EQ(array.dtype, Dtype::kF32);
  std::vector<float> values(array.data.size() / 4);
  std::memcpy(values.data(), array.data.data(), values.size() * 4);
  return values;
}

Array u8_array(std::vector<int64_t> shape, Bytes bytes) {
  return Array{Dtype::kU8, std::move(shape), std::move(bytes)};
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    directory_ =
        fs::temp_directory_path() / (std::string("a4w4_cli_test_") + info->test_suite_name() + "_" +
                                     info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(directory_);
    fs::create_directories(directory_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(directory_, ignored);
  }

  std::string path(const std::string& name) const { return (directory_ / name).string(); }

  // Runs `a4w4 <args>` with file names in args relative to the test directory.
  Outcome run(const std::string& args) {
    const std::string out = path(".stdout"), err = path(".stderr");
    const std::string command = "cd '" + directory_.string() + "' && '" A4W4_CLI_PATH "' " + args +
                                " >'" + out + "' 2>'" + err + "'";
    const int status = std::system(command.c_str());
    Outcome result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = slurp(out);
    result.err = slurp(err);
    fs::remove(out);
    fs::remove(err);
    return result;
  }

  static std::string slurp(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  void write(const std::string& name, const Array& array) {
    const Bytes bytes = encode(array);
    std::ofstream(path(name), std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }

  void write_raw(const std::string& name, const std::string& content) {
    std::ofstream(path(name), std::ios::binary) << content;
  }

  Array read(const std::string& name) { return read_file(path(name)); }

  std::set<std::string> files() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(directory_))
      names.insert(entry.path().filename().string());
    return names;
  }

  // A failing run: non-zero exit, exactly one line on stderr of the tool's error form that
  // mentions `mention`, and the directory exactly as it was (no output, no temporary file).
  void expect_failure(const std::string& args, const std::string& mention) {
    const std::set<std::string> before = files();
    const Outcome result = run(args);
    EXPECT_NE(result.exit_code, 0) << args;
    EXPECT_EQ(result.err.rfind("a4w4: error: ", 0), 0u) << result.err;
    ASSERT_FALSE(result.err.empty());
    EXPECT_EQ(result.err.back(), '\n') << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_NE(result.err.find(mention), std::string::npos)
        << "expected '" << mention << "' in: " << result.err;
    EXPECT_EQ(files(), before) << "the failed run changed the directory: " << args;
  }

  // E2M1 codes: 0x2 is 1.0, 0xA is -1.0; E8M0 byte 127 is 2^0. The operands of a small GEMM
  // whose result is easy to check by hand:
  //   A [2, 64]: row m is all 1.0, scales 2^m for both blocks.
  //   B [3, 64]: row n is 1.0 in block 0 and -1.0 in block 1; scales 2^n (block 0), 2^0 (block 1).
  // Then D[m, n] = 2^m * (32 * 2^n - 32).
  void write_small_gemm() {
    write("A.npy", u8_array({2, 32}, Bytes(64, kOnes)));
    write("AS.npy", u8_array({2, 2}, {127, 127, 128, 128}));
    Bytes b(3 * 32);
    for (int n = 0; n < 3; ++n)
      for (int j = 0; j < 32; ++j) b[n * 32 + j] = j < 16 ? kOnes : kMinusOnes;
    write("B.npy", u8_array({3, 32}, b));
    write("BS.npy", u8_array({3, 2}, {127, 127, 128, 127, 129, 127}));
  }

  static constexpr uint8_t kOnes = 0x22, kMinusOnes = 0xAA;
  fs::path directory_;
};

float small_gemm_value(int m, int n) {
  return std::ldexp(1.0f, m) * (32.0f * std::ldexp(1.0f, n) - 32.0f);
}

const char* kSmallGemm = "gemm --a A.npy --a-scale AS.npy --b B.npy --b-scale BS.npy";

TEST_F(CliTest, InfoListsVersionBackendsDevicesAndKernels) {
  const Outcome result = run("info");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (const char* text : {"a4w4 0.", "backends:", "cpu", "cuda", "devices:", "cpu:0",
                           "gemm kernels:", "cpu.reference"})
    EXPECT_NE(result.out.find(text), std::string::npos) << text << " missing from:\n" << result.out;
}

TEST_F(CliTest, VersionAndKernels) {
  Outcome result = run("--version");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.out.rfind("a4w4 0.", 0), 0u) << result.out;
  result = run("kernels");
  EXPECT_EQ(result.exit_code, 0);
  for (const char* text : {"name", "backend", "path", "tile MxNxK", "split-k", "constraints",
                           "cpu.reference ", "cpu.gemv_avx512vnni ", "1..4 "})
    EXPECT_NE(result.out.find(text), std::string::npos) << text << " missing from:\n" << result.out;
}

TEST_F(CliTest, KernelsSaysWhichApplyAndWhichIsChosen) {
  const Outcome result = run("kernels -m 5 -n 64 -k 256");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("M=5 N=64 K=256 on cpu"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("cpu.reference          applies"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("cpu.gemv_avx512vnni    no: "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("chosen: "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("(heuristic)"), std::string::npos) << result.out;
  expect_failure("kernels -m 5 -n 64 -k 100", "-k");
}

std::string cpu_tuning_key() {
  return "cpu," + std::to_string(std::thread::hardware_concurrency());
}

const char* kTunedHeader = "device,sm_count,M,N,K,kernel,split_k,us,tflops\n";

TEST_F(CliTest, TuneOnTheCpuEndToEnd) {
  write_raw("shapes.txt", "# two shapes\n1 64 256 tiny\n8x96x512 small\n");
  Outcome result =
      run("tune --shapes shapes.txt --out tuned.csv --samples 2 --batch-ms 0.2 "
          "--threads 2");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find("[1/2] 1x64x256 tiny"), std::string::npos) << result.err;
  EXPECT_NE(result.out.find("wrote 2 entries"), std::string::npos) << result.out;
  std::istringstream csv(slurp(path("tuned.csv")));
  std::vector<std::string> lines;
  for (std::string line; std::getline(csv, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u) << slurp(path("tuned.csv"));
  EXPECT_EQ(lines[0].rfind("# a4w4 tune: cpu backend", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind(std::string(kTunedHeader, std::strlen(kTunedHeader) - 1) + ",", 0), 0u)
      << lines[1];
  EXPECT_EQ(lines[2].rfind(cpu_tuning_key() + ",1,64,256,cpu.", 0), 0u) << lines[2];
  EXPECT_EQ(lines[3].rfind(cpu_tuning_key() + ",8,96,512,cpu.", 0), 0u) << lines[3];
  EXPECT_EQ(files(), (std::set<std::string>{"shapes.txt", "tuned.csv"}));

  result = run("config check tuned.csv");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("tuned.csv: 2 entries, valid"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("this machine: 2 entries"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("0 warning(s)"), std::string::npos) << result.out;

  result = run("kernels -m 1 -n 64 -k 256 --tuned tuned.csv");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("(tuned: entry at M=1, line 3)"), std::string::npos) << result.out;
  result = run("kernels -m 3 -n 96 -k 512 --tuned tuned.csv");  // the bucket above M = 3
  EXPECT_NE(result.out.find("(tuned: entry at M=8, line 4)"), std::string::npos) << result.out;

  result =
      run("bench --backend cpu --shapes shapes.txt --samples 3 --tuned tuned.csv "
          "--compare-heuristic");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("heuristic"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("tuned"), std::string::npos) << result.out;

  // With a 100% margin nothing can beat the heuristic: every entry is the heuristic's own choice
  // (kernel and split in columns 6-7 equal heuristic_kernel and heuristic_split_k, columns 11-12);
  // column 14 says it was tuned without a workspace, column 15 with a plain B (the CPU's default).
  result = run(
      "tune --shapes shapes.txt --out kept.csv --samples 2 --batch-ms 0.2 --threads 2 "
      "--margin 100");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::istringstream kept(slurp(path("kept.csv")));
  int entries = 0;
  for (std::string line; std::getline(kept, line);) {
    if (line.empty() || line[0] == '#' || line.rfind("device,", 0) == 0) continue;
    std::vector<std::string> fields;
    std::istringstream row(line);
    for (std::string field; std::getline(row, field, ',');) fields.push_back(field);
    ASSERT_EQ(fields.size(), 15u) << line;
    EXPECT_EQ(fields[5], fields[10]) << line;
    EXPECT_EQ(fields[6], fields[11]) << line;
    EXPECT_EQ(fields[13], "0") << line;
    EXPECT_EQ(fields[14], "plain") << line;
    ++entries;
  }
  EXPECT_EQ(entries, 2);

  // Tuned on a weight with its int8 form: the entries say so, serve such a weight (a4w4 kernels
  // --weights prepared-int8) and are not taken for a plain B.
  result =
      run("tune --shapes shapes.txt --out int8.csv --samples 2 --batch-ms 0.2 --threads 2 "
          "--weights prepared-int8");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string int8_csv = slurp(path("int8.csv"));
  EXPECT_NE(int8_csv.find("prepared-int8 B"), std::string::npos) << int8_csv;
  EXPECT_NE(int8_csv.find(",1,64,256,cpu."), std::string::npos) << int8_csv;
  EXPECT_NE(int8_csv.find(",0,prepared-int8\n"), std::string::npos) << int8_csv;
  result = run("kernels -m 1 -n 64 -k 256 --weights prepared-int8 --tuned int8.csv");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("(tuned: entry at M=1, line 3)"), std::string::npos) << result.out;
  result = run("kernels -m 1 -n 64 -k 256 --tuned int8.csv");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out.find("(tuned:"), std::string::npos) << result.out;
  expect_failure("tune --shapes shapes.txt --out t.csv --weights int8", "--weights");

  expect_failure("tune --shapes shapes.txt --out t.csv --margin 101", "--margin");
  expect_failure("tune --shapes shapes.txt --out t.csv --workspace", "--workspace");
  // The GPU benchmark's data choices are refused on the CPU, not ignored.
  expect_failure("bench --backend cpu --shapes shapes.txt --data outliers", "--data");
  expect_failure("bench --backend cpu --shapes shapes.txt --data nonsense", "--data");

  expect_failure("tune --shapes no-such-thing --out t.csv", "neither a file nor a preset");
}

// -m replaces the M of every shape, of a file's and of the targets preset's alike; shapes that
// then coincide are timed once. The call options (--kernel, --split-k, --math) reach the calls.
TEST_F(CliTest, BenchReplacesTheShapesM) {
  write_raw("shapes.txt", "1 64 256 tiny\n1x64x256 again\n8 96 512 small\n");
  Outcome result =
      run("bench --backend cpu --shapes shapes.txt -m 2,3 --samples 3 --kernel cpu.gemm_scalar "
          "--split-k 2 --math fast");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto rows_of = [](const std::string& table) {
    std::vector<std::string> rows;
    std::istringstream lines(table);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("| ", 0) == 0 && line.find("cpu.") != std::string::npos)
        rows.push_back(line.substr(2, line.find(' ', 2) - 2));
    return rows;
  };
  EXPECT_EQ(rows_of(result.out),
            (std::vector<std::string>{"2×64×256", "2×96×512", "3×64×256", "3×96×512"}))
      << result.out;
  EXPECT_NE(result.out.find("cpu.gemm_scalar/2 (explicit)"), std::string::npos) << result.out;

  result = run("bench --backend cpu --preset targets -m 2 --samples 3");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(rows_of(result.out),
            (std::vector<std::string>{"2×8192×8192", "2×28672×8192", "2×8192×28672"}))
      << result.out;
}

TEST_F(CliTest, ConfigCheckReportsMalformedStaleAndForeignEntries) {
  write_raw("bad.csv",
            std::string(kTunedHeader) + cpu_tuning_key() + ",1,64,256,cpu.reference,0,1\n");
  expect_failure("config check bad.csv", "bad.csv:2: 8 fields, but the header has 9 columns");
  write_raw("stale.csv", std::string(kTunedHeader) + cpu_tuning_key() +
                             ",1,64,256,cpu.gone,0,1,1\n"
                             "NVIDIA H200,132,1,8192,8192,cuda.decode,0,9.5,14\n");
  const Outcome result = run("config check stale.csv");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("warning: stale.csv:2: kernel 'cpu.gone' is not registered"),
            std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("NVIDIA H200 (132 SMs): 1 entries"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("this machine: 1 entries"), std::string::npos) << result.out;
  expect_failure("config check --strict stale.csv", "1 warning(s)");

  // Another device's entry is not loaded, but a kernel name this build does not have makes the
  // file stale wherever it is meant to be used: reported (once) too.
  write_raw("foreign.csv", std::string(kTunedHeader) +
                               "Some Other GPU,99,1,64,256,cpu.gone_elsewhere,0,1,1\n" +
                               cpu_tuning_key() + ",1,64,256,cpu.gone,0,1,1\n");
  const Outcome foreign = run("config check foreign.csv");
  ASSERT_EQ(foreign.exit_code, 0) << foreign.err;
  EXPECT_NE(foreign.out.find("foreign.csv:2: kernel 'cpu.gone_elsewhere' (an entry for Some Other "
                             "GPU, 99 SMs) is not registered in this build"),
            std::string::npos)
      << foreign.out;
  EXPECT_NE(foreign.out.find("2 warning(s)"), std::string::npos) << foreign.out;
}

TEST_F(CliTest, QuantizeDequantizeRoundTripIsExactOnTheGrid) {
  // Row 0, block 0: the E2M1 grid itself (amax 6 -> scale 2^0); block 1: the grid times 4.
  // Row 1: zeros in block 0 (scale byte 0); block 1: negatives of the grid times 1/8.
  const float grid[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  std::vector<float> x(2 * 64);
  for (int i = 0; i < 32; ++i) {
    x[i] = grid[i % 16];
    x[32 + i] = 4 * grid[i % 16];
    x[64 + i] = 0;
    x[96 + i] = -grid[i % 8] / 8;
  }
  write("X.npy", f32_array({2, 64}, x));
  Outcome result = run("quantize --input X.npy --out-fp4 Q.npy --out-scale S.npy");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Array q = read("Q.npy"), s = read("S.npy");
  EXPECT_EQ(q.dtype, Dtype::kU8);
  EXPECT_EQ(q.shape, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(s.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(s.data, (Bytes{127, 129, 0, 124}));
  EXPECT_EQ(q.data[0], 0x10);  // codes 0 (element 0, low nibble) and 1 (element 1, high nibble)
  EXPECT_EQ(q.data[3], 0x76);  // 4.0 and 6.0
  EXPECT_EQ(q.data[7], 0xFE);  // -4.0 and -6.0

  result = run("dequantize --fp4 Q.npy --scale S.npy --out Y.npy");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::vector<float> y = f32_values(read("Y.npy"));
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], x[i]) << "element " << i;
}

TEST_F(CliTest, QuantizeRoundsAndTheModeChoosesTheScale) {
  // amax 1.75: FLOOR picks 2^-2 (1.75 -> 7, saturated to 6), RCEIL and EVEN pick 2^-1.
  // 0.3 with scale 2^-1 is 0.6 -> rounds to code 1 (0.5), dequantizing to 0.25.
  std::vector<float> x(32, 0.0f);
  x[0] = 1.75f;
  x[1] = 0.3f;
  write("X.npy", f32_array({1, 32}, x));
  const std::pair<const char*, int> modes[] = {{"floor", 125}, {"rceil", 126}, {"even", 126}};
  for (const auto& [mode, scale] : modes) {
    const Outcome result =
        run(std::string("quantize --input X.npy --out-fp4 Q.npy --out-scale S.npy --mode ") + mode);
    ASSERT_EQ(result.exit_code, 0) << result.err;
    EXPECT_EQ(read("S.npy").data, Bytes{static_cast<uint8_t>(scale)}) << mode;
  }
  ASSERT_EQ(run("dequantize --fp4 Q.npy --scale S.npy --out Y.npy").exit_code, 0);
  const std::vector<float> y = f32_values(read("Y.npy"));
  EXPECT_EQ(y[0], 2.0f);  // 1.75 * 2 = 3.5 ties to code 4.0 -> 2.0
  EXPECT_EQ(y[1], 0.25f);
}

TEST_F(CliTest, QuantizeAcceptsFloat16Input) {
  Array x{Dtype::kF16, {1, 32}, Bytes(64, 0)};
  const uint16_t six = 0x4600, one = 0x3C00;  // 6.0 and 1.0 in binary16
  std::memcpy(x.data.data(), &six, 2);
  std::memcpy(x.data.data() + 2, &one, 2);
  write("X.npy", x);
  ASSERT_EQ(run("quantize --input X.npy --out-fp4 Q.npy --out-scale S.npy").exit_code, 0);
  EXPECT_EQ(read("S.npy").data, Bytes{127});
  EXPECT_EQ(read("Q.npy").data[0], 0x27);  // 6.0 (code 7) low, 1.0 (code 2) high
}

TEST_F(CliTest, GemmOnFilesMatchesHandComputedValues) {
  write_small_gemm();
  const Outcome result = run(std::string(kSmallGemm) + " --out D.npy");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Array d = read("D.npy");
  EXPECT_EQ(d.dtype, Dtype::kF32);
  EXPECT_EQ(d.shape, (std::vector<int64_t>{2, 3}));
  const std::vector<float> values = f32_values(d);
  for (int m = 0; m < 2; ++m)
    for (int n = 0; n < 3; ++n) EXPECT_EQ(values[m * 3 + n], small_gemm_value(m, n)) << m << n;
}

TEST_F(CliTest, GemmWithAlphaBetaCAndBias) {
  write_small_gemm();
  write("C.npy", f32_array({2, 3}, {1, 2, 3, 4, 5, 6}));
  write("BIAS.npy", f32_array({3}, {0.5f, -1, 10}));
  const Outcome result =
      run(std::string(kSmallGemm) +
          " --c C.npy --bias BIAS.npy --alpha 2 --beta 0.5 --out D.npy --split-k 2"
          " --threads 1 --kernel cpu.reference");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::vector<float> values = f32_values(read("D.npy"));
  const float c[6] = {1, 2, 3, 4, 5, 6}, bias[3] = {0.5f, -1, 10};
  for (int m = 0; m < 2; ++m)
    for (int n = 0; n < 3; ++n)
      EXPECT_EQ(values[m * 3 + n], 2 * small_gemm_value(m, n) + 0.5f * c[m * 3 + n] + bias[n]);
}

TEST_F(CliTest, GemmMathModes) {
  // --math fast asks for fast accumulation (A4W4_MATH_FAST_ACCUM); the CPU kernels compute
  // exactly in either mode, so the hand-computed values hold; an unknown mode is refused by name.
  write_small_gemm();
  for (const char* mode : {"exact", "fast", "FAST"}) {
    const Outcome result = run(std::string(kSmallGemm) + " --out D.npy --math " + mode);
    ASSERT_EQ(result.exit_code, 0) << mode << ": " << result.err;
    const std::vector<float> values = f32_values(read("D.npy"));
    for (int m = 0; m < 2; ++m)
      for (int n = 0; n < 3; ++n) EXPECT_EQ(values[m * 3 + n], small_gemm_value(m, n)) << mode;
  }
  expect_failure(std::string(kSmallGemm) + " --out D.npy --math quick", "--math");
  const Outcome checked = run("gemm -m 4 -n 8 -k 64 --check --math fast");
  ASSERT_EQ(checked.exit_code, 0) << checked.err;
  EXPECT_NE(checked.out.find("ok"), std::string::npos) << checked.out;
}

TEST_F(CliTest, GemmOutputDtypes) {
  // D[0, 2] = 96; a bias of 161 makes 257, which bf16 (8 significant bits) rounds to 256 (a tie,
  // to even) while fp16 and fp32 hold it exactly.
  write_small_gemm();
  write("BIAS.npy", f32_array({3}, {0, 0, 161}));
  const std::string gemm = std::string(kSmallGemm) + " --bias BIAS.npy --out D.npy --out-dtype ";

  ASSERT_EQ(run(gemm + "fp32").exit_code, 0);
  EXPECT_EQ(f32_values(read("D.npy"))[2], 257.0f);

  ASSERT_EQ(run(gemm + "bf16").exit_code, 0);
  const Array bf16 = read("D.npy");
  EXPECT_EQ(bf16.dtype, Dtype::kF32);  // NPY has no bf16: widened exactly to <f4
  EXPECT_EQ(f32_values(bf16)[2], 256.0f);
  EXPECT_EQ(f32_values(bf16)[1], small_gemm_value(0, 1));

  ASSERT_EQ(run(gemm + "fp16").exit_code, 0);
  const Array fp16 = read("D.npy");
  EXPECT_EQ(fp16.dtype, Dtype::kF16);
  EXPECT_EQ(fp16.shape, (std::vector<int64_t>{2, 3}));
  uint16_t bits;
  std::memcpy(&bits, fp16.data.data() + 2 * 2, 2);
  EXPECT_EQ(bits, 0x5C04);  // 257 = 2^8 * (1 + 4/1024)
  std::memcpy(&bits, fp16.data.data(), 2);
  EXPECT_EQ(bits, 0x0000);  // D[0, 0] = 0
}

TEST_F(CliTest, BenchmarkModeChecksAgainstFloat64) {
  for (const char* options : {"", " --out-dtype bf16", " --split-k 2 --threads 1"}) {
    const Outcome result = run(std::string("gemm -m 40 -n 72 -k 96 --check --repeat 2") + options);
    ASSERT_EQ(result.exit_code, 0) << options << ": " << result.err;
    EXPECT_NE(result.out.find("TFLOP/s"), std::string::npos) << result.out;
    EXPECT_NE(result.out.find("||D - ref|| / ||ref||"), std::string::npos) << result.out;
    EXPECT_NE(result.out.find(": ok"), std::string::npos) << result.out;
  }
  const Outcome unchecked = run("gemm -m 8 -n 8 -k 32 --repeat 1");
  ASSERT_EQ(unchecked.exit_code, 0) << unchecked.err;
  EXPECT_EQ(unchecked.out.find("ref||"), std::string::npos) << unchecked.out;
}

TEST_F(CliTest, PlainGemmRunsTheDefaultProblemChecked) {
  const Outcome result = run("gemm --repeat 1");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("M=256 N=1024 K=2048"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find(": ok"), std::string::npos) << result.out;
}

TEST_F(CliTest, BadInputFilesFailCleanly) {
  write_small_gemm();
  write_raw("text.npy", "hello, world\n");
  write("floats.npy", f32_array({2, 32}, std::vector<float>(64)));
  write("rank1.npy", u8_array({64}, Bytes(64)));
  Bytes truncated = encode(u8_array({2, 32}, Bytes(64, 0x22)));
  truncated.resize(truncated.size() - 3);
  write_raw("truncated.npy", std::string(truncated.begin(), truncated.end()));
  std::string fortran(reinterpret_cast<const char*>(encode(u8_array({2, 32}, Bytes(64))).data()),
                      64 + 64);
  fortran.replace(fortran.find("False"), 5, "True ");
  write_raw("fortran.npy", fortran);

  const std::string rest = " --a-scale AS.npy --b B.npy --b-scale BS.npy --out D.npy";
  expect_failure("gemm --a missing.npy" + rest, "--a missing.npy: cannot open");
  expect_failure("gemm --a text.npy" + rest, "--a text.npy: not an NPY file");
  expect_failure("gemm --a floats.npy" + rest, "--a floats.npy: dtype '<f4'");
  expect_failure("gemm --a rank1.npy" + rest, "--a rank1.npy: expected a 2-D array");
  expect_failure("gemm --a truncated.npy" + rest, "--a truncated.npy: truncated data");
  expect_failure("gemm --a fortran.npy" + rest, "--a fortran.npy: header: fortran_order True");
  expect_failure("gemm --a . " + rest, "--a .: cannot read: not a regular file");
}

TEST_F(CliTest, InconsistentOperandsFailCleanly) {
  write_small_gemm();
  write("A48.npy", u8_array({2, 24}, Bytes(48)));
  write("AS3.npy", u8_array({2, 3}, Bytes(6, 127)));
  write("B128.npy", u8_array({3, 64}, Bytes(192)));
  write("BS128.npy", u8_array({3, 4}, Bytes(12, 127)));
  write("BIAS4.npy", f32_array({4}, {0, 0, 0, 0}));
  write("C33.npy", f32_array({3, 3}, std::vector<float>(9)));

  expect_failure("gemm --a A48.npy --a-scale AS.npy --b B.npy --b-scale BS.npy --out D.npy",
                 "--a A48.npy: a row of 24 bytes holds K = 48");
  expect_failure("gemm --a A.npy --a-scale AS3.npy --b B.npy --b-scale BS.npy --out D.npy",
                 "--a-scale AS3.npy: shape [2, 3] does not match --a A.npy");
  expect_failure("gemm --a A.npy --a-scale AS.npy --b B128.npy --b-scale BS128.npy --out D.npy",
                 "--b B128.npy: K = 128 does not match K = 64");
  expect_failure(std::string(kSmallGemm) + " --bias BIAS4.npy --out D.npy",
                 "--bias BIAS4.npy: shape [4] does not match [N] = [3]");
  expect_failure(std::string(kSmallGemm) + " --c C33.npy --out D.npy",
                 "--c C33.npy: shape [3, 3] does not match [M, N] = [2, 3]");
  expect_failure(std::string(kSmallGemm) + " --out D.npy --beta 1", "--beta has no effect");
  expect_failure(std::string(kSmallGemm), "--out is required");
  expect_failure(std::string(kSmallGemm) + " --out D.npy -m 4", "cannot be combined with -m");
}

TEST_F(CliTest, LibraryFailuresAreReportedWithTheirStatus) {
  write_small_gemm();
  expect_failure(std::string(kSmallGemm) + " --out D.npy --kernel no.such.kernel",
                 "A4W4_ERROR_KERNEL_NOT_FOUND");
  expect_failure(std::string(kSmallGemm) + " --out D.npy --split-k 3",
                 "A4W4_ERROR_INVALID_ARGUMENT");
  expect_failure(std::string(kSmallGemm) + " --out D.npy --backend cuda",
                 "the cuda backend is not available");
  expect_failure("gemm -m 8 -n 8 -k 32 --backend cuda",
                 "the cuda backend is not available");
}

TEST_F(CliTest, OutputsAreAllOrNothing) {
  write_small_gemm();
  // A missing directory: nothing is written anywhere.
  expect_failure(std::string(kSmallGemm) + " --out no/such/dir/D.npy", "--out no/such/dir/D.npy");
  // A directory in the way of the output.
  fs::create_directory(path("taken"));
  expect_failure(std::string(kSmallGemm) + " --out taken", "--out taken: cannot write");
  // A file already at the destination survives a failed run untouched.
  write_raw("D.npy", "old contents");
  expect_failure(std::string(kSmallGemm) + " --out D.npy --kernel nope", "KERNEL_NOT_FOUND");
  EXPECT_EQ(slurp(path("D.npy")), "old contents");
  // Both quantize outputs to one file would clobber each other.
  write("X.npy", f32_array({1, 32}, std::vector<float>(32, 1.0f)));
  expect_failure("quantize --input X.npy --out-fp4 Q.npy --out-scale ./Q.npy",
                 "the same file as --out-fp4");
  expect_failure("quantize --input A.npy --out-fp4 Q.npy --out-scale S.npy",
                 "--input A.npy: dtype '|u1'");
  write("X48.npy", f32_array({1, 48}, std::vector<float>(48)));
  expect_failure("quantize --input X48.npy --out-fp4 Q.npy --out-scale S.npy", "K = 48 columns");
  expect_failure("dequantize --fp4 A.npy --scale BS.npy --out Y.npy",
                 "--scale BS.npy: shape [3, 2] does not match --fp4 A.npy");
}

TEST_F(CliTest, UsageErrorsAreOneLine) {
  expect_failure("", "A subcommand is required");
  expect_failure("gemm --frobnicate", "--frobnicate");
  expect_failure("quantize --input X.npy", "--out-fp4");
  expect_failure("quantize --input X.npy --out-fp4 Q.npy --out-scale S.npy --mode nearest",
                 "--mode");
  expect_failure("gemm -k 48", "-k: K = 48 is not a multiple of 32");
}

}  // namespace
}  // namespace a4w4::npy
