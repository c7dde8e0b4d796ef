// `a4w4 config check FILE`: validates a tuned configuration the way a context loads it, and says
// what it holds: entries per device (which of them are this machine's), and every warning.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "a4w4/a4w4.h"
#include "commands.h"
#include "common.h"
#include "tuned_csv.h"

namespace a4w4::cli {
namespace {

struct ConfigCheck {
  std::string file;
  bool strict = false;
};

void run_config_check(const ConfigCheck& settings) {
  Context context;
  // The load is the check: the same parser, registry and device matching as in use.
  check(a4w4_context_load_tuned(context.get(), settings.file.c_str()), "config check");
  std::ifstream in(settings.file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  const std::vector<tuned::Row> rows = tuned::parse_csv(text.str(), settings.file);

  std::map<std::pair<std::string, int>, int> per_device;
  for (const tuned::Row& row : rows) ++per_device[{row.device, row.sm_count}];
  int local = 0;
  check(a4w4_context_tuned_count(context.get(), &local, nullptr), "config check");
  std::vector<std::string> warnings = tuned_warnings(context.get());
  // Entries of other devices are not loaded (nor judged) by a context; their kernel names still
  // must exist, or the file is stale wherever it is meant to be used. (A build without a backend
  // cannot judge that backend's names.)
  for (const tuned::Row& row : rows) {
    const bool cuda_name = row.kernel.rfind("cuda.", 0) == 0;
    if (cuda_name && !a4w4_backend_compiled(A4W4_BACKEND_CUDA)) continue;
    const std::string where = fmt::format("{}:{}:", settings.file, row.line);
    const bool reported = std::any_of(warnings.begin(), warnings.end(), [&](const std::string& w) {
      return w.rfind(where, 0) == 0;  // a local entry: the load said it already
    });
    int index = 0;
    if (!reported && a4w4_kernel_find(row.kernel.c_str(), &index) == A4W4_ERROR_KERNEL_NOT_FOUND)
      warnings.push_back(fmt::format("{}:{}: kernel '{}' (an entry for {}, {} SMs) is not "
                                     "registered in this build",
                                     settings.file, row.line, row.kernel, row.device,
                                     row.sm_count));
  }

  fmt::print("{}: {} entries, valid\n", settings.file, rows.size());
  for (const auto& [device, count] : per_device)
    fmt::print("  {} ({} SMs): {} entries\n", device.first, device.second, count);
  fmt::print("  for the devices of this machine: {} entries\n", local);
  for (const std::string& warning : warnings) fmt::print("warning: {}\n", warning);
  fmt::print("{} warning(s)\n", warnings.size());
  if (settings.strict && !warnings.empty())
    fail("config check --strict: {}: {} warning(s)", settings.file, warnings.size());
}

}  // namespace

void add_config_command(CLI::App& app) {
  CLI::App* config = app.add_subcommand("config", "Tuned configurations");
  config->require_subcommand(1, 1);
  auto settings = std::make_shared<ConfigCheck>();
  CLI::App* check_command = config->add_subcommand(
      "check", "Validate a tuned configuration (exit 1 with file:line when malformed)");
  check_command->add_option("file", settings->file, "The CSV file")->required();
  check_command->add_flag("--strict", settings->strict,
                          "Also fail when entries are skipped (warnings)");
  check_command->callback([settings] { run_config_check(*settings); });
}

}  // namespace a4w4::cli
