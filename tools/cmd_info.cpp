// `a4w4 info`: the library version, its backends, devices and registered kernels.
#include <fmt/format.h>

#include "a4w4/a4w4.h"
#include "commands.h"
#include "common.h"

namespace a4w4::cli {
namespace {

const char* yes_no(int value) {
  return value ? "yes" : "no";
}

std::string describe(a4w4_device device) {
  char text[256];
  const a4w4_status status = a4w4_device_describe(device, text, sizeof text);
  if (status != A4W4_SUCCESS)
    return fmt::format("(cannot describe: {}: {})", a4w4_status_string(status),
                       a4w4_last_error_message());
  return text;
}

void print_devices(a4w4_backend backend) {
  int count = 0;
  const a4w4_status status = a4w4_device_count(backend, &count);
  if (status != A4W4_SUCCESS) {
    // Not an error for `info`: the probe's answer is the information.
    fmt::print("  {:<8} none: {}\n", a4w4_backend_name(backend), a4w4_last_error_message());
    return;
  }
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    const a4w4_device device = backend == A4W4_BACKEND_CUDA ? a4w4_cuda(ordinal) : a4w4_cpu();
    fmt::print("  {:<8} {}\n", fmt::format("{}:{}", a4w4_backend_name(backend), ordinal),
               describe(device));
  }
}

void run_info() {
  fmt::print("a4w4 {} (library {}, built against header {}.{}.{})\n", a4w4_version_string(),
             a4w4_version_string(), A4W4_VERSION_MAJOR, A4W4_VERSION_MINOR, A4W4_VERSION_PATCH);
  if (a4w4_version() != A4W4_VERSION)
    fmt::print("warning: the library loaded ({}) is not the one this tool was built with ({})\n",
               a4w4_version(), A4W4_VERSION);

  constexpr a4w4_backend kBackends[] = {A4W4_BACKEND_CPU, A4W4_BACKEND_CUDA};
  fmt::print("backends:\n");
  for (const a4w4_backend backend : kBackends)
    fmt::print("  {:<8} compiled: {:<3}  available: {}\n", a4w4_backend_name(backend),
               yes_no(a4w4_backend_compiled(backend)), yes_no(a4w4_backend_available(backend)));

  fmt::print("devices:\n");
  for (const a4w4_backend backend : kBackends) print_devices(backend);

  const std::vector<KernelInfo> kernels = registered_kernels();
  fmt::print("gemm kernels: {}\n", kernels.size());
  for (const KernelInfo& kernel : kernels)
    fmt::print("  {:<24} {}\n", kernel.name, a4w4_backend_name(kernel.backend));
}

}  // namespace

void add_info_command(CLI::App& app) {
  app.add_subcommand("info", "Show the library version, backends, devices and GEMM kernels")
      ->callback(run_info);
}

}  // namespace a4w4::cli
