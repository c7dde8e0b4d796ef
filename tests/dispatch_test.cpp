// The kernel chooser and tuned configurations, white-box: the CSV parser's acceptance and its
// file:line errors, the table's treatment of stale, duplicate and foreign-device entries, the
// lookup order (exact M, next larger M, heuristic), precedence of explicit options, and the
// heuristic's data-driven ranking and split-K on synthetic kernel lists.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "api/error.h"
#include "backends/cpu/cpu_features.h"
#include "dispatch/chooser.h"
#include "dispatch/registry.h"
#include "dispatch/tuned_config.h"
#include "dispatch/tuned_csv.h"

namespace {

using a4w4::DeviceKey;
using a4w4::GemmChoice;
using a4w4::GemmKernel;
using a4w4::GemmProblem;
using a4w4::TunedTable;
namespace tuned = a4w4::tuned;

const std::string kHeader = "device,sm_count,M,N,K,kernel,split_k,us,tflops\n";

GemmProblem problem(int64_t m, int64_t n, int64_t k, int split_k = 0,
                    a4w4_device device = a4w4_cpu()) {
  GemmProblem p{};
  p.m = m;
  p.n = n;
  p.k = k;
  p.a.layout = p.b.layout = A4W4_LAYOUT_PLAIN;
  p.d_dtype = A4W4_DTYPE_F32;
  p.alpha = 1;
  p.split_k = split_k;
  p.device = device;
  return p;
}

std::string config_error(const std::string& text) {
  try {
    tuned::parse_csv(text, "t.csv");
  } catch (const tuned::ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

// ---- The CSV format ---------------------------------------------------------------------------

TEST(TunedCsv, AcceptsCommentsExtraColumnsQuotesCrlfAndBom) {
  const std::string text =
      "\xEF\xBB\xBF# tuned on a test machine\r\n"
      "device,sm_count,M,N,K,kernel,split_k,us,tflops,label,note\r\n"
      "\r\n"
      "\"NVIDIA H200, \"\"x\"\"\",132,16,8192,8192,cuda.decode,0,12.5,1.5e1,qkv,-\r\n"
      " cpu , 8 ,1,64,256,cpu.reference,3,0,0,,\n"
      "# the end";
  const std::vector<tuned::Row> rows = tuned::parse_csv(text, "t.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].device, "NVIDIA H200, \"x\"");
  EXPECT_EQ(rows[0].line, 4);
  EXPECT_EQ(rows[0].sm_count, 132);
  EXPECT_EQ(rows[0].m, 16);
  EXPECT_EQ(rows[0].kernel, "cuda.decode");
  EXPECT_EQ(rows[0].us, 12.5);
  EXPECT_EQ(rows[0].tflops, 15.0);
  EXPECT_EQ(rows[1].device, "cpu");
  EXPECT_EQ(rows[1].split_k, 3);
  // What format_row writes reads back as the same row.
  for (const tuned::Row& row : rows) {
    const std::vector<tuned::Row> again =
        tuned::parse_csv(kHeader + tuned::format_row(row) + "\n", "again");
    ASSERT_EQ(again.size(), 1u);
    tuned::Row expected = row;
    expected.line = 2;
    EXPECT_EQ(again[0], expected);
  }
  EXPECT_TRUE(tuned::parse_csv(kHeader, "empty.csv").empty());
}

TEST(TunedCsv, MalformedFilesNameFileAndLine) {
  const std::string row = "cpu,8,1,64,256,cpu.reference,0,1,1\n";
  const struct {
    std::string text, message;
  } cases[] = {
      {"", "t.csv: no header line"},
      {"# only a comment\n", "t.csv: no header line"},
      {"device,sm,M,N,K,kernel,split_k,us,tflops\n", "t.csv:1: the header must start with"},
      {"M,N,K\n", "t.csv:1: the header must start with"},
      {kHeader + "cpu,8,1,64,256,cpu.reference,0,1\n", "t.csv:2: 8 fields, but the header has 9"},
      {kHeader + "\n" + row + "cpu,8,1,64,256,cpu.reference,0,1,1,x\n", "t.csv:4: 10 fields"},
      {kHeader + "cpu,x8,1,64,256,cpu.reference,0,1,1\n", "t.csv:2: sm_count: 'x8' is not an"},
      {kHeader + "cpu,0,1,64,256,cpu.reference,0,1,1\n", "t.csv:2: sm_count: 0 is outside"},
      {kHeader + "cpu,8,-1,64,256,cpu.reference,0,1,1\n", "t.csv:2: M: -1 is outside"},
      {kHeader + "cpu,8,1,64,16,cpu.reference,0,1,1\n", "t.csv:2: K: 16 is outside"},
      {kHeader + "cpu,8,1,64,250,cpu.reference,0,1,1\n", "t.csv:2: K: 250 is not a multiple"},
      {kHeader + "cpu,8,1,64,256,cpu.reference,9,1,1\n", "t.csv:2: split_k: 9 is outside [0, 8]"},
      {kHeader + "cpu,8,1,64,256,cpu ref,0,1,1\n", "t.csv:2: kernel: 'cpu ref' is not a kernel"},
      {kHeader + "cpu,8,1,64,256,,0,1,1\n", "t.csv:2: kernel: '' is not a kernel"},
      {kHeader + "cpu,8,1,64,256,cpu.reference,0,-1,1\n", "t.csv:2: us: '-1' must be finite"},
      {kHeader + "cpu,8,1,64,256,cpu.reference,0,nan,1\n", "t.csv:2: us: 'nan' must be finite"},
      {kHeader + "cpu,8,1,64,256,cpu.reference,0,1,1e999\n", "t.csv:2: tflops: '1e999'"},
      {kHeader + ",8,1,64,256,cpu.reference,0,1,1\n", "t.csv:2: device: '' is not a device"},
      {kHeader + "\"cpu,8,1,64,256,cpu.reference,0,1,1\n", "t.csv:2: a quoted field is not"},
      {kHeader + "\"cpu\"x,8,1,64,256,cpu.reference,0,1,1\n", "t.csv:2: unexpected text after"},
      {kHeader + "c\"pu,8,1,64,256,cpu.reference,0,1,1\n", "t.csv:2: a quote inside"},
      {kHeader + "cpu" + std::string(1, '\0') + ",8,1,64,256,cpu.reference,0,1,1\n",
       "t.csv:2: a NUL"},
  };
  for (const auto& c : cases) {
    const std::string message = config_error(c.text);
    EXPECT_EQ(message.rfind(c.message, 0), 0u) << "text:\n" << c.text << "\ngot: " << message;
  }
}

// ---- The table: stale, duplicate and foreign entries; lookup order -----------------------------

const std::vector<DeviceKey> kDevices = {{"cpu", 8}, {"Test GPU", 132}};

std::string table_error(const std::string& text) {
  try {
    TunedTable table(text, "t.csv", kDevices);
  } catch (const a4w4::ApiError& e) {
    EXPECT_EQ(e.status(), A4W4_ERROR_CONFIG);
    return e.what();
  }
  return "(accepted)";
}

TEST(TunedTable, MalformedFilesFailWithTheConfigCode) {
  EXPECT_EQ(
      table_error(kHeader + "cpu,8,1,64,256,cpu.reference,0,1\n").rfind("t.csv:2: 8 fields", 0),
      0u);
}

TEST(TunedTable, StaleForeignAndDuplicateEntries) {
  const TunedTable table(kHeader +
                             "cpu,8,4,64,256,cpu.no_such_kernel,0,1,1\n"    // 2: unknown
                             "Test GPU,132,4,64,256,cpu.reference,0,1,1\n"  // 3: wrong backend
                             "cpu,8,8,64,256,cpu.gemv_avx512vnni,0,1,1\n"   // 4: M above 4
                             "cpu,16,4,64,256,cpu.no_such_kernel,0,1,1\n"   // 5: foreign
                             "Other GPU,132,4,64,256,cuda.decode,0,1,1\n"   // 6: foreign
                             "cpu,8,16,64,256,cpu.reference,2,9,1\n"        // 7
                             "cpu,8,16,64,256,cpu.gemm_scalar,0,5,1\n"      // 8: faster dup
                             "cpu,8,16,64,256,cpu.gemm_avx2,0,7,1\n",       // 9: slower dup
                         "t.csv", kDevices);
  EXPECT_EQ(table.entry_count(), 4);
  EXPECT_EQ(table.foreign_count(), 2);
  const std::vector<std::string> warnings = table.warnings();
  ASSERT_EQ(warnings.size(), 5u);
  EXPECT_EQ(warnings[0].rfind("t.csv:2: kernel 'cpu.no_such_kernel' is not registered", 0), 0u)
      << warnings[0];
  EXPECT_EQ(warnings[1].rfind("t.csv:3: kernel 'cpu.reference' is a cpu kernel", 0), 0u)
      << warnings[1];
  EXPECT_EQ(warnings[2].rfind("t.csv:4: kernel 'cpu.gemv_avx512vnni' does not take M = 8", 0), 0u)
      << warnings[2];
  EXPECT_EQ(warnings[3].rfind("t.csv:8: duplicate entry", 0), 0u) << warnings[3];
  EXPECT_NE(warnings[3].find("line 8 is used"), std::string::npos) << warnings[3];
  EXPECT_NE(warnings[4].find("line 8 is used"), std::string::npos) << warnings[4];

  const a4w4::TunedEntry* kept = table.lookup({"cpu", 8}, 16, 64, 256);
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept->line, 8);
  EXPECT_STREQ(kept->kernel->name, "cpu.gemm_scalar");
  const a4w4::TunedEntry* stale = table.lookup({"cpu", 8}, 4, 64, 256);
  ASSERT_NE(stale, nullptr);
  EXPECT_EQ(stale->kernel, nullptr);
  EXPECT_EQ(table.lookup({"cpu", 16}, 4, 64, 256), nullptr);  // foreign: not loaded
}

// The split_k of the entry a lookup finds on the test device for M x N x K (-1: none), in a context
// with or without a workspace, for B in the layout `weights`.
int split_at(const TunedTable& table, int64_t m, int64_t n, int64_t k, bool workspace = false,
             tuned::Weights weights = tuned::Weights::kPlain) {
  const a4w4::TunedEntry* entry = table.lookup({"cpu", 8}, m, n, k, workspace, weights);
  return entry == nullptr ? -1 : entry->split_k;
}

TEST(TunedTable, LookupTakesExactMThenTheNextLargerBucket) {
  const TunedTable table(kHeader +
                             "cpu,8,1,64,256,cpu.reference,1,1,1\n"
                             "cpu,8,16,64,256,cpu.reference,2,1,1\n"
                             "cpu,8,64,64,256,cpu.reference,4,1,1\n"
                             "cpu,8,2,64,512,cpu.reference,8,1,1\n",
                         "t.csv", kDevices);
  EXPECT_EQ(split_at(table, 1, 64, 256), 1);
  EXPECT_EQ(split_at(table, 2, 64, 256), 2);
  EXPECT_EQ(split_at(table, 16, 64, 256), 2);
  EXPECT_EQ(split_at(table, 17, 64, 256), 4);
  EXPECT_EQ(split_at(table, 64, 64, 256), 4);
  EXPECT_EQ(split_at(table, 65, 64, 256), -1);  // beyond the last bucket: the heuristic
  EXPECT_EQ(split_at(table, 1, 64, 512), 8);
  EXPECT_EQ(table.lookup({"cpu", 8}, 1, 65, 256), nullptr);  // another N
  EXPECT_EQ(table.lookup({"Test GPU", 132}, 1, 64, 256), nullptr);
}

// Rows with a label and a `workspace` column (1: tuned with a device workspace).
const std::string kWorkspaceHeader = std::string(tuned::kHeader) + ",label,workspace\n";

TEST(TunedTable, EntriesTunedWithAWorkspaceComeFirstInContextsThatHaveOne) {
  // At N = 64 an entry with a workspace and one without; at N = 128 only one without, which serves
  // both kinds of context; a context without a workspace never takes an entry tuned with one.
  const TunedTable table(kWorkspaceHeader +
                             "cpu,8,16,64,256,cpu.reference,1,1,1,-,0\n"
                             "cpu,8,16,64,256,cpu.reference,2,1,1,-,1\n"
                             "cpu,8,16,128,256,cpu.reference,4,1,1,-,0\n"
                             "cpu,8,16,256,256,cpu.reference,8,1,1,-,1\n",
                         "t.csv", kDevices);
  EXPECT_EQ(split_at(table, 16, 64, 256, false), 1);
  EXPECT_EQ(split_at(table, 16, 64, 256, true), 2);
  EXPECT_EQ(split_at(table, 16, 128, 256, false), 4);
  EXPECT_EQ(split_at(table, 16, 128, 256, true), 4);
  EXPECT_EQ(split_at(table, 16, 256, 256, false), -1);
  EXPECT_EQ(split_at(table, 16, 256, 256, true), 8);
  EXPECT_TRUE(table.warnings().empty());  // the same shape with and without is no duplicate
  EXPECT_NE(config_error(kWorkspaceHeader + "cpu,8,16,64,256,cpu.reference,1,1,1,-,2\n")
                .find("workspace"),
            std::string::npos);
}

TEST(TunedTable, TheNearestMWinsAcrossEntriesWithAndWithoutAWorkspace) {
  // As in tuned/h200-*.csv: entries without a workspace from M = 1, with one from M = 8. A context
  // with a workspace takes M = 1..4 from the nearer entries tuned without (an M = 8 entry tuned
  // with one is further away), M = 5..8 from the one tuned with one (a tie at 8 goes to it).
  const TunedTable table(kWorkspaceHeader +
                             "cpu,8,1,64,256,cpu.reference,1,1,1,-,0\n"
                             "cpu,8,4,64,256,cpu.reference,4,1,1,-,0\n"
                             "cpu,8,8,64,256,cpu.reference,8,1,1,-,0\n"
                             "cpu,8,8,64,256,cpu.reference,3,1,1,-,1\n"
                             "cpu,8,64,64,256,cpu.reference,2,1,1,-,1\n",
                         "t.csv", kDevices);
  EXPECT_EQ(split_at(table, 1, 64, 256, true), 1);
  EXPECT_EQ(split_at(table, 3, 64, 256, true), 4);
  EXPECT_EQ(split_at(table, 5, 64, 256, true), 3);
  EXPECT_EQ(split_at(table, 8, 64, 256, true), 3);
  EXPECT_EQ(split_at(table, 8, 64, 256, false), 8);
  EXPECT_EQ(split_at(table, 9, 64, 256, true), 2);
  EXPECT_EQ(split_at(table, 9, 64, 256, false), -1);
  EXPECT_EQ(split_at(table, 65, 64, 256, true), -1);
}

// Rows with a `workspace` and a `weights` column (the layout of B they were tuned with).
const std::string kWeightsHeader = std::string(tuned::kHeader) + ",label,workspace,weights\n";
constexpr tuned::Weights kPlain = tuned::Weights::kPlain, kPrepared = tuned::Weights::kPrepared,
                         kPreparedInt8 = tuned::Weights::kPreparedInt8;

TEST(TunedTable, EntriesTunedWithBsLayoutComeFirstAtTheNearestM) {
  // M = 1: one entry per layout; M = 4: plain and any; M = 8: prepared only (as in
  // tuned/h200-*.csv, M = 8..64 tuned on a prepared B), with a workspace and without; M = 16: any
  // only. The nearest M decides first; at that M, B's layout, then any, then the other layout.
  const TunedTable table(kWeightsHeader +
                             "cpu,8,1,64,256,cpu.reference,1,1,1,-,0,plain\n"
                             "cpu,8,1,64,256,cpu.reference,2,1,1,-,0,prepared\n"
                             "cpu,8,4,64,256,cpu.reference,3,1,1,-,0,plain\n"
                             "cpu,8,4,64,256,cpu.reference,4,1,1,-,0,\n"
                             "cpu,8,8,64,256,cpu.reference,5,1,1,-,0,prepared\n"
                             "cpu,8,8,64,256,cpu.reference,6,1,1,-,1,prepared\n"
                             "cpu,8,16,64,256,cpu.reference,7,1,1,-,0,\n",
                         "t.csv", kDevices);
  EXPECT_TRUE(table.warnings().empty());  // one shape and M in several kinds: no duplicates
  EXPECT_EQ(split_at(table, 1, 64, 256, false, kPlain), 1);
  EXPECT_EQ(split_at(table, 1, 64, 256, false, kPrepared), 2);
  EXPECT_EQ(split_at(table, 3, 64, 256, false, kPlain), 3);
  EXPECT_EQ(split_at(table, 3, 64, 256, false, kPrepared), 4);  // any before the other layout
  EXPECT_EQ(split_at(table, 8, 64, 256, false, kPlain),
            5);  // only the other layout's at the nearest M
  EXPECT_EQ(split_at(table, 8, 64, 256, true, kPlain), 6);
  EXPECT_EQ(split_at(table, 5, 64, 256, true, kPrepared), 6);
  EXPECT_EQ(split_at(table, 9, 64, 256, false, kPrepared), 7);
  EXPECT_EQ(split_at(table, 17, 64, 256, false, kPrepared), -1);
  // A file without the column: every row serves both layouts, as before.
  const TunedTable old(kHeader + "cpu,8,1,64,256,cpu.reference,1,1,1\n", "t.csv", kDevices);
  EXPECT_EQ(split_at(old, 1, 64, 256, false, kPrepared), 1);
  EXPECT_EQ(split_at(old, 1, 64, 256, false, kPlain), 1);
  // The same layout twice at one M is a duplicate; an unknown layout name is an error.
  const TunedTable twice(kWeightsHeader +
                             "cpu,8,1,64,256,cpu.reference,1,1,1,-,0,plain\n"
                             "cpu,8,1,64,256,cpu.reference,2,2,1,-,0,plain\n",
                         "t.csv", kDevices);
  ASSERT_EQ(twice.warnings().size(), 1u);
  EXPECT_NE(twice.warnings()[0].find("duplicate entry"), std::string::npos);
  const std::string error =
      config_error(kWeightsHeader + "cpu,8,1,64,256,cpu.reference,1,1,1,-,0,packed\n");
  EXPECT_NE(error.find("weights: 'packed' is not 'plain', 'prepared', 'prepared-int8' or empty"),
            std::string::npos)
      << error;
}

TEST(TunedTable, AnInt8FormWeightTakesOnlyItsOwnEntriesOrAnyLayouts) {
  // M = 1: plain, prepared and int8-form entries; M = 4: prepared only; M = 8: any; M = 16: an
  // int8-form entry only, which plain and prepared B do not take (it was timed without staging B).
  const TunedTable table(kWeightsHeader +
                             "cpu,8,1,64,256,cpu.reference,1,1,1,-,0,plain\n"
                             "cpu,8,1,64,256,cpu.reference,2,1,1,-,0,prepared\n"
                             "cpu,8,1,64,256,cpu.reference,3,1,1,-,0,prepared-int8\n"
                             "cpu,8,4,64,256,cpu.reference,4,1,1,-,0,prepared\n"
                             "cpu,8,8,64,256,cpu.reference,5,1,1,-,0,\n"
                             "cpu,8,16,64,256,cpu.reference,6,1,1,-,1,prepared-int8\n",
                         "t.csv", kDevices);
  EXPECT_TRUE(table.warnings().empty());
  EXPECT_EQ(split_at(table, 1, 64, 256, false, kPreparedInt8), 3);
  EXPECT_EQ(split_at(table, 1, 64, 256, false, kPrepared), 2);
  EXPECT_EQ(split_at(table, 2, 64, 256, false, kPreparedInt8), 5);  // not the prepared M = 4
  EXPECT_EQ(split_at(table, 2, 64, 256, false, kPlain), 4);         // the other layout's
  EXPECT_EQ(split_at(table, 9, 64, 256, true, kPreparedInt8), 6);
  EXPECT_EQ(split_at(table, 9, 64, 256, false, kPreparedInt8), -1);  // tuned with a workspace
  EXPECT_EQ(split_at(table, 9, 64, 256, true, kPrepared), -1);
  EXPECT_EQ(split_at(table, 9, 64, 256, true, kPlain), -1);
  EXPECT_EQ(tuned::weights_name(kPreparedInt8), "prepared-int8");
}

// ---- The chooser with the real CPU kernels and a tuned table ----------------------------------

GemmChoice choose(const GemmProblem& p, const TunedTable* table, std::string_view kernel = "") {
  return a4w4::choose_gemm_kernel(p, A4W4_BACKEND_CPU, kernel, table, {"cpu", 8}, 0,
                                  a4w4::gemm_kernels());
}

TEST(Chooser, TakesTheEntryTunedWithBsLayout) {
  const TunedTable table(kWeightsHeader +
                             "cpu,8,1,64,256,cpu.reference,1,1,1,-,0,plain\n"
                             "cpu,8,1,64,256,cpu.reference,2,1,1,-,0,prepared\n",
                         "t.csv", kDevices);
  GemmProblem prepared = problem(1, 64, 256);
  prepared.b.layout = A4W4_LAYOUT_PREPARED_V2;
  EXPECT_EQ(choose(problem(1, 64, 256), &table).split_k, 1);
  const GemmChoice c = choose(prepared, &table);
  EXPECT_EQ(c.source, A4W4_CHOICE_TUNED);
  EXPECT_EQ(c.split_k, 2);
  // A B with its int8 form (the problem carries b_int8): only its own entries; none here.
  const uint8_t int8_part = 0;
  GemmProblem int8_form = prepared;
  int8_form.b_int8 = &int8_part;
  EXPECT_EQ(choose(int8_form, &table).source, A4W4_CHOICE_HEURISTIC);
  const TunedTable with_int8(kWeightsHeader +
                                 "cpu,8,1,64,256,cpu.reference,2,1,1,-,0,prepared\n"
                                 "cpu,8,1,64,256,cpu.reference,3,1,1,-,0,prepared-int8\n",
                             "t.csv", kDevices);
  const GemmChoice i8 = choose(int8_form, &with_int8);
  EXPECT_EQ(i8.source, A4W4_CHOICE_TUNED);
  EXPECT_EQ(i8.split_k, 3);
  EXPECT_EQ(choose(prepared, &with_int8).split_k, 2);
}

TEST(Chooser, TunedEntriesAndExplicitOptions) {
  const TunedTable table(kHeader +
                             "cpu,8,8,64,256,cpu.reference,3,1,1\n"
                             "cpu,8,32,64,256,cpu.gemm_scalar,0,1,1\n",
                         "t.csv", kDevices);
  const GemmChoice heuristic = choose(problem(8, 64, 256), nullptr);
  EXPECT_EQ(heuristic.source, A4W4_CHOICE_HEURISTIC);
  EXPECT_EQ(heuristic.split_k, 0);  // the CPU kernels never split on their own

  GemmChoice c = choose(problem(8, 64, 256), &table);
  EXPECT_EQ(c.source, A4W4_CHOICE_TUNED);
  EXPECT_STREQ(c.kernel->name, "cpu.reference");
  EXPECT_EQ(c.split_k, 3);
  EXPECT_EQ(c.tuned_m, 8);
  EXPECT_EQ(c.tuned_line, 2);
  c = choose(problem(5, 64, 256), &table);  // the bucket above
  EXPECT_EQ(c.tuned_m, 8);
  EXPECT_EQ(c.split_k, 3);
  c = choose(problem(9, 64, 256), &table);
  EXPECT_STREQ(c.kernel->name, "cpu.gemm_scalar");
  c = choose(problem(33, 64, 256), &table);  // beyond the buckets
  EXPECT_EQ(c.source, A4W4_CHOICE_HEURISTIC);
  EXPECT_STREQ(c.kernel->name, heuristic.kernel->name);

  // The caller's split_k wins over the entry's; the entry's kernel stays.
  c = choose(problem(8, 64, 256, 2), &table);
  EXPECT_EQ(c.source, A4W4_CHOICE_TUNED);
  EXPECT_STREQ(c.kernel->name, "cpu.reference");
  EXPECT_EQ(c.split_k, 2);
  // The caller's kernel wins; it takes the entry's split only when the entry names it.
  c = choose(problem(8, 64, 256), &table, "cpu.gemm_scalar");
  EXPECT_EQ(c.source, A4W4_CHOICE_EXPLICIT);
  EXPECT_STREQ(c.kernel->name, "cpu.gemm_scalar");
  EXPECT_EQ(c.split_k, 0);
  c = choose(problem(8, 64, 256), &table, "cpu.reference");
  EXPECT_EQ(c.split_k, 3);
  c = choose(problem(8, 64, 256, 5), &table, "cpu.reference");
  EXPECT_EQ(c.split_k, 5);

  // Unknown and inapplicable names are refused with their own codes, tuned table or not.
  for (const TunedTable* t : {static_cast<const TunedTable*>(nullptr), &table}) {
    try {
      choose(problem(8, 64, 256), t, "cpu.nope");
      ADD_FAILURE() << "accepted";
    } catch (const a4w4::ApiError& e) {
      EXPECT_EQ(e.status(), A4W4_ERROR_KERNEL_NOT_FOUND);
      EXPECT_NE(std::string(e.what()).find("'cpu.nope'"), std::string::npos) << e.what();
    }
    try {
      choose(problem(5, 64, 256), t, "cpu.gemv_avx512vnni");
      ADD_FAILURE() << "accepted";
    } catch (const a4w4::ApiError& e) {
      EXPECT_EQ(e.status(), A4W4_ERROR_KERNEL_NOT_APPLICABLE);
      EXPECT_NE(std::string(e.what()).find("M = 5"), std::string::npos) << e.what();
    }
  }
}

TEST(Chooser, AnEntryThatDoesNotApplyIsWarnedOnceAndTheHeuristicServes) {
  if (!a4w4::cpu::isa_supported(a4w4::cpu::Isa::kAvx512Vnni))
    GTEST_SKIP() << "needs a CPU where cpu.gemv_avx512vnni exists";
  const TunedTable table(kHeader + "cpu,8,4,64,256,cpu.gemv_avx512vnni,0,1,1\n", "t.csv", kDevices);
  EXPECT_TRUE(table.warnings().empty());
  GemmProblem prepared = problem(4, 64, 256);
  prepared.b.layout = A4W4_LAYOUT_PREPARED_V1;  // the GEMV path takes plain or version-2 B only
  for (int i = 0; i < 3; ++i) {
    const GemmChoice c = choose(prepared, &table);
    EXPECT_EQ(c.source, A4W4_CHOICE_HEURISTIC);
    EXPECT_STRNE(c.kernel->name, "cpu.gemv_avx512vnni");
  }
  const std::vector<std::string> warnings = table.warnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].rfind("t.csv:2: kernel 'cpu.gemv_avx512vnni'", 0), 0u) << warnings[0];
  EXPECT_NE(warnings[0].find("prepared"), std::string::npos) << warnings[0];
  EXPECT_EQ(choose(problem(4, 64, 256), &table).source, A4W4_CHOICE_TUNED);  // plain B: fine
}

// ---- The heuristic on synthetic kernels -------------------------------------------------------

std::string applies(const GemmProblem&) {
  return {};
}
void no_run(const GemmProblem&, const a4w4::ExecConfig&) {}

// A decode-like, a wgmma-like and a generic family, as metadata only.
constexpr GemmKernel kFamilies[] = {
    {"t.decode", A4W4_BACKEND_CUDA, A4W4_KERNEL_PATH_DECODE, 8, 64, 128, 8, true, true, 1, 64, 4.0,
     "", applies, no_run},
    {"t.fp8", A4W4_BACKEND_CUDA, A4W4_KERNEL_PATH_FP8, 128, 128, 128, 16, true, false, 1, 0, 8.0,
     "", applies, no_run},
    {"t.generic", A4W4_BACKEND_CUDA, A4W4_KERNEL_PATH_GENERIC, 64, 64, 32, 0, false, false, 1, 0,
     1.0, "", applies, no_run},
};

GemmChoice pick(int64_t m, int64_t n, int64_t k, int split = 0,
                std::span<const GemmKernel> kernels = kFamilies) {
  return a4w4::heuristic_choice(problem(m, n, k, split, a4w4_cuda(0)), A4W4_BACKEND_CUDA, kernels,
                                132);
}

TEST(Heuristic, RanksFamiliesByMetadata) {
  // Small M: the decode family (its tile wastes least); it sizes its own split.
  for (int64_t m : {1, 8, 16, 64}) {
    const GemmChoice c = pick(m, 8192, 8192);
    EXPECT_STREQ(c.kernel->name, "t.decode") << m;
    EXPECT_EQ(c.split_k, 0) << m;
  }
  // Large M: the fastest full-tile family.
  EXPECT_STREQ(pick(4096, 8192, 8192).kernel->name, "t.fp8");
  EXPECT_EQ(pick(4096, 8192, 8192).split_k, 0);  // 2048 tiles fill the SMs
  // Without it, the generic fallback; a backend with no kernel is refused.
  EXPECT_STREQ(pick(4096, 8192, 8192, 0, std::span(kFamilies).subspan(2)).kernel->name,
               "t.generic");
  try {
    a4w4::heuristic_choice(problem(1, 64, 256), A4W4_BACKEND_CPU, kFamilies, 0);
    ADD_FAILURE() << "accepted";
  } catch (const a4w4::ApiError& e) {
    EXPECT_EQ(e.status(), A4W4_ERROR_KERNEL_NOT_APPLICABLE);
  }
}

TEST(Heuristic, RanksByTheSpeedOnBsLayout) {
  // A kernel faster on a prepared B (t.prepared_fast: 2.8 plain, 4.0 prepared) against one about
  // as fast on both (t.even: 7.3 / 7.9, with tiles of 16 rows): at M = 8 the first wins on a
  // prepared B only (4.0 * 8/8 against 7.9 * 8/16), the second on a plain one.
  constexpr GemmKernel kLayouts[] = {
      {"t.even", A4W4_BACKEND_CUDA, A4W4_KERNEL_PATH_DECODE, 16, 64, 128, 1, true, true, 1, 64, 7.3,
       "", applies, no_run, 7.9},
      {"t.prepared_fast", A4W4_BACKEND_CUDA, A4W4_KERNEL_PATH_DECODE, 8, 64, 128, 8, true, true, 1,
       64, 2.8, "", applies, no_run, 4.0},
  };
  GemmProblem p = problem(8, 8192, 8192, 0, a4w4_cuda(0));
  EXPECT_STREQ(a4w4::heuristic_choice(p, A4W4_BACKEND_CUDA, kLayouts, 132).kernel->name, "t.even");
  p.b.layout = A4W4_LAYOUT_PREPARED_V2;
  EXPECT_STREQ(a4w4::heuristic_choice(p, A4W4_BACKEND_CUDA, kLayouts, 132).kernel->name,
               "t.prepared_fast");
  // Without a prepared speed, a kernel's speed is the same on both.
  EXPECT_DOUBLE_EQ(
      a4w4::heuristic_score(kFamilies[0], p, 0, 132),
      a4w4::heuristic_score(kFamilies[0], problem(8, 8192, 8192, 0, a4w4_cuda(0)), 0, 132));
}

TEST(Heuristic, SendsAnInt8FormWeightToTheInt8KernelsWhereTheyFillTheGpu) {
  // The registry's metadata (int8_b_speed): on a weight with its int8 form the int8 kernels rank
  // above cuda.skinny where they measured faster (H100, bench/RESULTS.md session 29: 160 x 8192^2,
  // 128 x 28672 x 8192, 256 x 8192^2) and below it at 128 x 8192^2 (half the GPU's tiles); on a
  // version-2 weight cuda.skinny keeps 256 x 8192^2.
  const GemmKernel* skinny = a4w4::find_gemm_kernel("cuda.skinny");
  const GemmKernel* int8 = a4w4::find_gemm_kernel("cuda.int8_128x128");
  if (skinny == nullptr || int8 == nullptr) GTEST_SKIP() << "built without CUDA";
  const uint8_t int8_part = 0;
  const auto scores = [&](int64_t m, int64_t n, bool int8_form) {
    GemmProblem p = problem(m, n, 8192, 0, a4w4_cuda(0));
    p.b.layout = A4W4_LAYOUT_PREPARED_V2;
    p.b_int8 = int8_form ? &int8_part : nullptr;
    return std::make_pair(a4w4::heuristic_score(*int8, p, 0, 132),
                          a4w4::heuristic_score(*skinny, p, 0, 132));
  };
  for (auto [m, n] : {std::pair<int64_t, int64_t>{160, 8192},
                      {192, 8192},
                      {256, 8192},
                      {128, 28672},
                      {160, 28672}}) {
    const auto [i8, sk] = scores(m, n, true);
    EXPECT_GT(i8, sk) << m << "x" << n;
  }
  const auto [i8_128, sk_128] = scores(128, 8192, true);
  EXPECT_LT(i8_128, sk_128);
  const auto [i8_v2, sk_v2] = scores(256, 8192, false);
  EXPECT_LT(i8_v2, sk_v2);
}

TEST(Heuristic, SplitsTallKSmallMnToFillAWave) {
  const GemmKernel& fp8 = kFamilies[1];
  // 1 x 2 tiles on 132 SMs, 256 K blocks: split up to the kernel's limit of 16.
  EXPECT_EQ(a4w4::heuristic_split(fp8, problem(128, 256, 8192), 132), 16);
  // 8 x 8 = 64 tiles: two partitions make 128 CTAs, one wave.
  EXPECT_EQ(a4w4::heuristic_split(fp8, problem(1024, 1024, 8192), 132), 2);
  // Short K: each partition keeps at least four K steps (16 blocks).
  EXPECT_EQ(a4w4::heuristic_split(fp8, problem(128, 256, 1024), 132), 2);
  EXPECT_EQ(a4w4::heuristic_split(fp8, problem(128, 256, 512), 132), 0);
  // Enough tiles: no split. Serial-split kernels and self-splitting kernels: never.
  EXPECT_EQ(a4w4::heuristic_split(fp8, problem(2048, 2048, 8192), 132), 0);
  EXPECT_EQ(a4w4::heuristic_split(kFamilies[2], problem(64, 64, 65536), 132), 0);
  EXPECT_EQ(a4w4::heuristic_split(kFamilies[0], problem(1, 64, 65536), 132), 0);
  EXPECT_EQ(a4w4::heuristic_split(fp8, problem(128, 256, 8192), 0), 0);  // no SM count
  // The chosen split is part of the choice; the caller's own split wins.
  EXPECT_EQ(pick(128, 256, 8192).split_k, 16);
  EXPECT_STREQ(pick(128, 256, 8192).kernel->name, "t.fp8");
  EXPECT_EQ(pick(128, 256, 8192, 3).split_k, 3);
  // A split above a kernel's limit rules it out rather than being clamped.
  EXPECT_STREQ(pick(128, 256, 8192, 32).kernel->name, "t.generic");
}

TEST(Heuristic, CpuKeepsTheRegistryPreferenceOrder) {
  std::vector<std::string> cpu_names;
  for (const GemmKernel& kernel : a4w4::gemm_kernels())
    if (kernel.backend == A4W4_BACKEND_CPU) cpu_names.push_back(kernel.name);
  // With every CPU kernel applicable (M <= 4, plain B), the ranking follows registry order.
  double previous = 1e300;
  for (const GemmKernel& kernel : a4w4::gemm_kernels()) {
    if (kernel.backend != A4W4_BACKEND_CPU) continue;
    const double score = a4w4::heuristic_score(kernel, problem(1, 64, 256), 0, 0);
    EXPECT_LT(score, previous) << kernel.name;
    previous = score;
  }
  EXPECT_EQ(cpu_names.back(), "cpu.reference");
}

}  // namespace
