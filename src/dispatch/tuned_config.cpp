#include "dispatch/tuned_config.h"

#include <algorithm>
#include <fstream>
#include <span>
#include <sstream>
#include <thread>

#include "api/error.h"
#include "backends/cuda/cuda_runtime_probe.h"
#include "dispatch/tuned_csv.h"

namespace a4w4 {

DeviceKey device_key(a4w4_device device) {
  if (device.type == A4W4_DEVICE_CUDA) {
    const cuda::DeviceIdentity& identity = cuda::device_identity(device.ordinal);
    return {identity.name, identity.sm_count};
  }
  return {"cpu", static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
}

std::vector<DeviceKey> local_device_keys() {
  std::vector<DeviceKey> keys = {device_key(a4w4_cpu())};
  for (int ordinal = 0; ordinal < cuda::device_count(); ++ordinal)
    keys.push_back(device_key(a4w4_cuda(ordinal)));
  return keys;
}

namespace {

// Why an entry can never serve its device, judged from the registry alone (empty if it can).
std::string static_problem(const tuned::Row& row, const GemmKernel* kernel) {
  if (kernel == nullptr)
    return fmt::format("kernel '{}' is not registered in this build (a4w4 kernels lists them)",
                       row.kernel);
  const a4w4_backend backend = row.device == "cpu" ? A4W4_BACKEND_CPU : A4W4_BACKEND_CUDA;
  if (kernel->backend != backend)
    return fmt::format("kernel '{}' is a {} kernel, but device '{}' is served by the {} backend",
                       row.kernel, a4w4_backend_name(kernel->backend), row.device,
                       a4w4_backend_name(backend));
  if (row.m < kernel->min_m || (kernel->max_m > 0 && row.m > kernel->max_m))
    return fmt::format("kernel '{}' does not take M = {} (it takes {}..{})", row.kernel, row.m,
                       kernel->min_m,
                       kernel->max_m > 0 ? std::to_string(kernel->max_m) : std::string("any"));
  if (kernel->max_split_k > 0 && row.split_k > kernel->max_split_k)
    return fmt::format("kernel '{}' takes split_k up to {}, not {}", row.kernel,
                       kernel->max_split_k, row.split_k);
  return {};
}

}  // namespace

TunedTable::TunedTable(std::string_view text, std::string label, std::span<const DeviceKey> devices)
    : label_(std::move(label)) {
  std::vector<tuned::Row> rows;
  try {
    rows = tuned::parse_csv(text, label_);
  } catch (const tuned::ConfigError& e) {
    fail(A4W4_ERROR_CONFIG, "{}", e.what());
  }
  for (const tuned::Row& row : rows) {
    const DeviceKey key{row.device, row.sm_count};
    if (std::find(devices.begin(), devices.end(), key) == devices.end()) {
      ++foreign_;  // another machine's entry: not ours to judge
      continue;
    }
    TunedEntry entry;
    entry.line = row.line;
    entry.m = row.m;
    entry.split_k = row.split_k;
    entry.us = row.us;
    const GemmKernel* kernel = find_gemm_kernel(row.kernel);
    entry.skipped = static_problem(row, kernel);
    if (entry.skipped.empty()) entry.kernel = kernel;

    auto& by_m =
        table_[ShapeKey{key, row.n, row.k, row.workspace, static_cast<uint8_t>(row.weights)}];
    const auto [it, inserted] = by_m.try_emplace(row.m);
    if (!inserted) {
      // Two winners for one shape (e.g. merged files): keep the faster usable one.
      TunedEntry& kept = it->second;
      const bool replace = entry.skipped.empty() && (!kept.skipped.empty() || entry.us < kept.us);
      warnings_.push_back(fmt::format(
          "{}:{}: duplicate entry for {} ({} SMs) M={} N={} K={} (also line {}); line {} is used",
          label_, row.line, row.device, row.sm_count, row.m, row.n, row.k, kept.line,
          replace ? row.line : kept.line));
      if (replace) kept = std::move(entry);
      continue;
    }
    if (!entry.skipped.empty())
      warnings_.push_back(
          fmt::format("{}:{}: {}; entry skipped (the heuristic serves M={} N={} "
                      "K={})",
                      label_, row.line, entry.skipped, row.m, row.n, row.k));
    it->second = std::move(entry);
    ++entries_;
  }
}

std::shared_ptr<const TunedTable> TunedTable::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(A4W4_ERROR_CONFIG, "{}: cannot open the tuned configuration", path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(A4W4_ERROR_CONFIG, "{}: read error", path);
  const std::vector<DeviceKey> devices = local_device_keys();
  return std::make_shared<const TunedTable>(text.str(), path, devices);
}

const TunedEntry* TunedTable::lookup(const DeviceKey& device, int64_t m, int64_t n, int64_t k,
                                     bool workspace, tuned::Weights weights) const {
  // The nearest bucket at or above M among the entries this context may use (taking a preferred
  // kind first at any M let an M = 8 entry tuned with a workspace serve M = 1 past a nearer M = 1
  // entry tuned without); at that M, the kinds in order of preference: B's layout, any layout,
  // the other layout, each with a workspace before without.
  using tuned::Weights;
  // An int8-form weight has no other layout (plain and prepared entries were timed with B
  // converted in the call).
  const Weights kinds[] = {weights, Weights::kAny,
                           weights == Weights::kPlain ? Weights::kPrepared : Weights::kPlain};
  const size_t kind_count = weights == Weights::kPreparedInt8 ? 2 : 3;
  const TunedEntry* best = nullptr;
  int64_t best_m = 0;
  for (const Weights kind : std::span(kinds, kind_count))
    for (const bool tuned_with_workspace : {true, false}) {
      if (tuned_with_workspace && !workspace) continue;
      const auto shape =
          table_.find(ShapeKey{device, n, k, tuned_with_workspace, static_cast<uint8_t>(kind)});
      if (shape == table_.end()) continue;
      const auto bucket = shape->second.lower_bound(m);  // exact M, else the nearest larger one
      if (bucket != shape->second.end() && (best == nullptr || bucket->first < best_m))
        best = &bucket->second, best_m = bucket->first;
    }
  return best;
}

void TunedTable::warn(const TunedEntry& entry, const std::string& what) const {
  if (entry.warned->exchange(true)) return;
  const std::lock_guard lock(mutex_);
  warnings_.push_back(fmt::format("{}:{}: {}", label_, entry.line, what));
}

std::vector<std::string> TunedTable::warnings() const {
  const std::lock_guard lock(mutex_);
  return warnings_;
}

}  // namespace a4w4
