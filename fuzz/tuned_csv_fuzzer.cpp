// libFuzzer target for the tuned-configuration CSV reader: any input must either parse or be
// rejected with tuned::ConfigError naming file:line -- never crash, hang, leak or read out of
// bounds. What parses must survive a round trip through format_row (and the optional `workspace`
// and `weights` columns) unchanged.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tuned_csv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tuned = a4w4::tuned;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<tuned::Row> rows;
  try {
    rows = tuned::parse_csv(text, "fuzz.csv");
  } catch (const tuned::ConfigError& e) {
    if (std::string_view(e.what()).substr(0, 8) != "fuzz.csv") __builtin_trap();
    return 0;  // rejected with a message: the expected outcome for most inputs
  }
  // The optional columns are written as cmd_tune writes them, after the required ones.
  std::string image = std::string(tuned::kHeader) + ",workspace,weights\n";
  for (const tuned::Row& row : rows)
    image += tuned::format_row(row) + (row.workspace ? ",1," : ",0,") +
             std::string(tuned::weights_name(row.weights)) + "\n";
  const std::vector<tuned::Row> again = tuned::parse_csv(image, "again.csv");
  if (again.size() != rows.size()) __builtin_trap();
  for (size_t i = 0; i < rows.size(); ++i) {
    tuned::Row expected = rows[i];
    expected.line = static_cast<int>(i) + 2;
    if (!(again[i] == expected)) __builtin_trap();
  }
  return 0;
}
