// `a4w4 kernels`: the registered GEMM kernels with their metadata (path, tile, split-K, M range,
// constraints). Given a problem (-m -n -k), also whether each can run it and why not, and what
// the chooser picks (with --tuned FILE or A4W4_TUNED_CONFIG: the tuned entry, if any).
#include <fmt/format.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "a4w4/a4w4.h"
#include "commands.h"
#include "common.h"
#include "device_memory.h"

namespace a4w4::cli {
namespace {

struct KernelsSettings {
  int64_t m = 0, n = 0, k = 0;
  a4w4_backend backend = A4W4_BACKEND_CPU;
  std::string weights = "plain";
  std::string tuned;
  int split_k = 0;
};

std::string tile(const a4w4_kernel_properties& p) {
  if (p.tile_m == 0 && p.tile_n == 0) return "-";
  return fmt::format("{}x{}x{}", p.tile_m, p.tile_n, p.tile_k);
}

std::string split(const a4w4_kernel_properties& p) {
  std::string text = p.max_split_k == 0   ? std::string("any")
                     : p.max_split_k == 1 ? std::string("none")
                                          : fmt::format("<={}", p.max_split_k);
  if (p.max_split_k != 1) text += p.split_k_parallel ? " parallel" : " serial";
  if (p.auto_split_k) text += ", auto";
  return text;
}

std::string m_range(const a4w4_kernel_properties& p) {
  return p.max_m > 0 ? fmt::format("{}..{}", p.min_m, p.max_m) : fmt::format("{}..", p.min_m);
}

void print_registry(const std::vector<KernelInfo>& kernels) {
  fmt::print("{:<22} {:<7} {:<8} {:<11} {:<17} {:<8} {}\n", "name", "backend", "path", "tile MxNxK",
             "split-k", "M", "constraints");
  for (const KernelInfo& kernel : kernels) {
    const a4w4_kernel_properties& p = kernel.properties;
    fmt::print("{:<22} {:<7} {:<8} {:<11} {:<17} {:<8} {}\n", kernel.name,
               a4w4_backend_name(kernel.backend), a4w4_kernel_path_name(p.path), tile(p), split(p),
               m_range(p), p.constraints);
  }
}

const char* source_name(a4w4_choice_source source) {
  switch (source) {
    case A4W4_CHOICE_EXPLICIT:
      return "explicit";
    case A4W4_CHOICE_TUNED:
      return "tuned";
    case A4W4_CHOICE_HEURISTIC:
      break;
  }
  return "heuristic";
}

// Applicability of every kernel of the backend to one problem, on zero operands.
void print_problem(const KernelsSettings& s, const std::vector<KernelInfo>& kernels) {
  std::unique_ptr<DeviceMemory> memory = make_device_memory(s.backend);
  Context context;
  context.set_backend(s.backend);
  if (!s.tuned.empty()) context.load_tuned(s.tuned);
  const a4w4_device device = memory->device();
  MxMatrix a{s.m, s.k, std::vector<uint8_t>(static_cast<size_t>(s.m * s.k / 2)),
             std::vector<uint8_t>(static_cast<size_t>(s.m * s.k / 32), 127)};
  MxMatrix b{s.n, s.k, std::vector<uint8_t>(static_cast<size_t>(s.n * s.k / 2)),
             std::vector<uint8_t>(static_cast<size_t>(s.n * s.k / 32), 127)};
  std::vector<uint8_t> pw, ps, d(static_cast<size_t>(s.m * s.n * 4));
  const a4w4_tensor ta = mx_values_tensor(a, memory->upload(a.values), device);
  const a4w4_tensor tas = mx_scales_tensor(a, memory->upload(a.scales), device);
  a4w4_tensor tb = mx_values_tensor(b, memory->upload(b.values), device);
  a4w4_tensor tbs = mx_scales_tensor(b, memory->upload(b.scales), device);
  if (s.weights != "plain")
    std::tie(tb, tbs) =
        prepare_weight_on(context, *memory, tb, tbs, prepared_layout_named(s.weights), pw, ps);
  const a4w4_tensor td = a4w4_tensor_2d(memory->output(d), A4W4_DTYPE_F32, s.m, s.n, s.n, device);
  a4w4_gemm_options options;
  a4w4_gemm_options_init(&options);
  options.split_k = s.split_k;

  fmt::print("\nM={} N={} K={} on {} ({} B, split_k {}):\n", s.m, s.n, s.k,
             a4w4_backend_name(s.backend), s.weights,
             s.split_k == 0 ? "auto" : std::to_string(s.split_k));
  for (const KernelInfo& kernel : kernels) {
    if (kernel.backend != s.backend) continue;
    const a4w4_status status = a4w4_kernel_applicable(context.get(), kernel.name, &ta, &tas, &tb,
                                                      &tbs, nullptr, nullptr, &td, &options);
    if (status == A4W4_SUCCESS) {
      fmt::print("  {:<22} applies\n", kernel.name);
    } else if (status == A4W4_ERROR_KERNEL_NOT_APPLICABLE) {
      fmt::print("  {:<22} no: {}\n", kernel.name, a4w4_last_error_message());
    } else {
      check(status, "a4w4_kernel_applicable");
    }
  }
  a4w4_gemm_choice choice{};
  choice.struct_size = sizeof choice;
  check(a4w4_gemm_choose(context.get(), &ta, &tas, &tb, &tbs, nullptr, nullptr, &td, &options,
                         &choice),
        "a4w4_gemm_choose");
  fmt::print("chosen: {} ({}", kernel_and_split(choice.kernel, choice.split_k),
             source_name(choice.source));
  if (choice.source == A4W4_CHOICE_TUNED)
    fmt::print(": entry at M={}, line {}", choice.tuned_m, choice.tuned_line);
  fmt::print(")\n");
  context.report_tuned_warnings();
}

}  // namespace

void add_kernels_command(CLI::App& app) {
  auto s = std::make_shared<KernelsSettings>();
  CLI::App* command = app.add_subcommand(
      "kernels",
      "List the registered GEMM kernels; with -m -n -k, which can run that problem and which "
      "one the chooser picks");
  auto* m = command->add_option("-m", s->m, "Problem: M")->check(CLI::PositiveNumber);
  auto* n = command->add_option("-n", s->n, "Problem: N")->check(CLI::PositiveNumber);
  auto* k =
      command->add_option("-k", s->k, "Problem: K, a multiple of 32")->check(CLI::PositiveNumber);
  m->needs(n, k);
  n->needs(m, k);
  k->needs(m, n);
  add_choice_option<a4w4_backend>(*command, "--backend", s->backend,
                                  {{"cpu", A4W4_BACKEND_CPU}, {"cuda", A4W4_BACKEND_CUDA}},
                                  "Problem: backend (default cpu)");
  command
      ->add_option("--weights", s->weights,
                   "Problem: B plain, prepared (version 2) or prepared-int8 (with its int8 form, "
                   "2.9x the bytes) (default plain)")
      ->check(CLI::IsMember({"plain", "prepared", "prepared-int8"}));
  command->add_option("--split-k", s->split_k, "Problem: options.split_k (0: automatic)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--tuned", s->tuned, "Problem: load this tuned configuration")
      ->check(CLI::ExistingFile);
  command->callback([s, m] {
    const std::vector<KernelInfo> kernels = registered_kernels();
    print_registry(kernels);
    if (m->count() == 0) return;
    if (s->k % 32 != 0) fail("-k: K = {} is not a multiple of 32", s->k);
    print_problem(*s, kernels);
  });
}

}  // namespace a4w4::cli
