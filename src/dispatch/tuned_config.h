// A loaded tuned configuration (the CSV of dispatch/tuned_csv.h) checked against this build's
// kernel registry and this machine's devices, with the lookup the chooser uses: the entry of the
// problem's device for (N, K) at exactly M, else at the nearest larger M. Immutable once loaded
// except for its warning list, so a context shares it between threads through a shared_ptr.
#pragma once

#include <atomic>
#include <compare>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "a4w4/a4w4.h"
#include "dispatch/registry.h"
#include "dispatch/tuned_csv.h"

namespace a4w4 {

// How tuned configurations name a device (a4w4_device_tuning_key).
struct DeviceKey {
  std::string name;
  int sm_count = 0;
  auto operator<=>(const DeviceKey&) const = default;
};

// The key of `device`: CUDA: the runtime's name and SM count; CPU: "cpu" and the number of
// hardware threads. Fails like the device probes for a device that is not there.
DeviceKey device_key(a4w4_device device);
// The keys of every device of this machine: the CPU, then each CUDA device.
std::vector<DeviceKey> local_device_keys();

struct TunedEntry {
  int line = 0;
  int64_t m = 0;
  const GemmKernel* kernel = nullptr;  // null when skipped: see `skipped`
  int split_k = 0;
  double us = 0;
  std::string skipped;  // why the entry cannot be used at all (warned at load)
  // Set once the entry has been reported as not applying to a problem (warned once).
  std::unique_ptr<std::atomic<bool>> warned = std::make_unique<std::atomic<bool>>(false);
};

class TunedTable {
 public:
  // Parses and checks text; devices are the keys of this machine's devices (entries of others
  // are ignored). Throws ApiError(A4W4_ERROR_CONFIG) for a malformed file.
  TunedTable(std::string_view text, std::string label, std::span<const DeviceKey> devices);
  // Reads path (A4W4_ERROR_CONFIG when it cannot be read) and parses it for this machine.
  static std::shared_ptr<const TunedTable> load(const std::string& path);

  // The entry for (device, N, K) at M, else at the nearest larger M; nullptr when none. With
  // `workspace` (the context has one), entries tuned with and without one both count; without,
  // only entries tuned without. Of several at that M: the one tuned with B's layout (`weights`),
  // then one tuned for any layout, then (plain and prepared B) the other of those two layouts';
  // within each, the one tuned with a workspace. A B with its int8 form takes only entries tuned
  // with that form or for any layout: the others were timed with B staged in the call.
  const TunedEntry* lookup(const DeviceKey& device, int64_t m, int64_t n, int64_t k,
                           bool workspace = false,
                           tuned::Weights weights = tuned::Weights::kPlain) const;

  const std::string& label() const { return label_; }
  int entry_count() const { return entries_; }    // entries for this machine's devices
  int foreign_count() const { return foreign_; }  // entries of other devices, ignored

  // Records a warning about entry (once per entry when `once`).
  void warn(const TunedEntry& entry, const std::string& what) const;
  std::vector<std::string> warnings() const;

 private:
  // device, N, K, workspace, weights (tuned::Weights)
  using ShapeKey = std::tuple<DeviceKey, int64_t, int64_t, bool, uint8_t>;
  std::map<ShapeKey, std::map<int64_t, TunedEntry>> table_;  // ... -> M -> entry
  std::string label_;
  int entries_ = 0, foreign_ = 0;
  mutable std::mutex mutex_;
  mutable std::vector<std::string> warnings_;
};

}  // namespace a4w4
