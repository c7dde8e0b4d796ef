// The a4w4_context object: settings shared by the calls made through it. Reads and writes of its
// settings are atomic, and the tuned configuration is an immutable table swapped under a mutex, so
// one context may serve several threads at once.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "a4w4/a4w4.h"
#include "dispatch/problem.h"
#include "dispatch/tuned_config.h"

struct a4w4_context_t {
  std::atomic<a4w4_backend> backend{A4W4_BACKEND_AUTO};
  std::atomic<int> num_threads{0};  // 0 = one per hardware thread

  // The caller's device workspace (a4w4_context_set_workspace); bytes 0 when none.
  struct Workspace {
    a4w4_device device{A4W4_DEVICE_CUDA, 0};
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  Workspace workspace() const {
    const std::lock_guard lock(workspace_mutex);
    return workspace_;
  }
  void set_workspace(const Workspace& w) {
    const std::lock_guard lock(workspace_mutex);
    workspace_ = w;
  }

  // The tuned configuration (null: none). Calls take a reference to the current table, so a
  // concurrent load or clear never changes a table in use.
  std::shared_ptr<const a4w4::TunedTable> tuned_table() const {
    const std::lock_guard lock(tuned_mutex);
    return tuned;
  }
  void set_tuned_table(std::shared_ptr<const a4w4::TunedTable> table) {
    const std::lock_guard lock(tuned_mutex);
    tuned = std::move(table);
  }

 private:
  mutable std::mutex workspace_mutex;
  Workspace workspace_;
  mutable std::mutex tuned_mutex;
  std::shared_ptr<const a4w4::TunedTable> tuned;
};

namespace a4w4 {

// Fails with A4W4_ERROR_INVALID_ARGUMENT when ctx is NULL.
a4w4_context_t& checked_context(a4w4_context ctx);

// The backend that runs a call whose operands all live on `device`: honours the context's choice,
// fails when that backend is not compiled in, has no device, or does not serve `device`.
a4w4_backend resolve_backend(const a4w4_context_t& ctx, a4w4_device device);

ExecConfig exec_config(const a4w4_context_t& ctx);

}  // namespace a4w4
