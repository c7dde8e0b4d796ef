// `a4w4 kernels`: the registered GEMM kernels, one per line (name, backend), for scripts.
#include <fmt/format.h>

#include "a4w4/a4w4.h"
#include "commands.h"
#include "common.h"

namespace a4w4::cli {
namespace {

void run_kernels() {
  for (const KernelInfo& kernel : registered_kernels())
    fmt::print("{} {}\n", kernel.name, a4w4_backend_name(kernel.backend));
}

}  // namespace

void add_kernels_command(CLI::App& app) {
  app.add_subcommand("kernels", "List the registered GEMM kernels (name and backend)")
      ->callback(run_kernels);
}

}  // namespace a4w4::cli
