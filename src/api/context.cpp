#include "api/context.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "api/error.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_runtime_probe.h"
#include "dispatch/workspace.h"

namespace a4w4 {

a4w4_context_t& checked_context(a4w4_context ctx) {
  if (ctx == nullptr)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "ctx: must not be NULL (create one with a4w4_context_create)");
  return *ctx;
}

namespace {

// Fails unless this build has the CUDA backend and CUDA device `ordinal` is present; `subject`
// starts the message (what named the device).
void expect_cuda_device(int ordinal, std::string_view subject) {
  if (!cuda::compiled())
    fail(A4W4_ERROR_BACKEND_NOT_COMPILED,
         "{}: this build of a4w4 has no CUDA backend (configure with -DA4W4_CUDA=ON)", subject);
  const int count = cuda::device_count();
  if (ordinal < 0 || ordinal >= count)
    fail(A4W4_ERROR_NO_DEVICE, "{}: CUDA device {} requested, but {} device(s) are present",
         subject, ordinal, count);
}

}  // namespace

a4w4_backend resolve_backend(const a4w4_context_t& ctx, a4w4_device device) {
  const a4w4_backend wanted = ctx.backend.load();
  const a4w4_backend served = device.type == A4W4_DEVICE_CUDA ? A4W4_BACKEND_CUDA : A4W4_BACKEND_CPU;
  if (wanted != A4W4_BACKEND_AUTO && wanted != served)
    fail(A4W4_ERROR_DEVICE_MISMATCH,
         "the context's backend is {}, but the tensors are on a {} device (set the backend to "
         "auto or {}, or move the tensors)",
         a4w4_backend_name(wanted), device.type == A4W4_DEVICE_CUDA ? "CUDA" : "CPU",
         a4w4_backend_name(served));
  if (served == A4W4_BACKEND_CUDA) expect_cuda_device(device.ordinal, "the tensors' device");
  return served;
}

ExecConfig exec_config(const a4w4_context_t& ctx) {
  const int threads = ctx.num_threads.load();
  return ExecConfig{threads > 0 ? threads : omp_get_num_procs()};
}

}  // namespace a4w4

extern "C" {

a4w4_status a4w4_context_create(a4w4_context* ctx) {
  return a4w4::guarded(__func__, [&] {
    if (ctx == nullptr) a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "ctx: must not be NULL");
    auto context = std::make_unique<a4w4_context_t>();
    // A set but unusable configuration fails here: silently running untuned would hide it.
    const char* path = std::getenv(A4W4_TUNED_CONFIG_ENV);
    if (path != nullptr && *path != '\0') {
      try {
        context->set_tuned_table(a4w4::TunedTable::load(path));
      } catch (const a4w4::ApiError& e) {
        a4w4::fail(e.status(), "{}: {}", A4W4_TUNED_CONFIG_ENV, e.what());
      }
    }
    *ctx = context.release();
  });
}

a4w4_status a4w4_context_destroy(a4w4_context ctx) {
  delete ctx;
  return A4W4_SUCCESS;
}

a4w4_status a4w4_context_set_backend(a4w4_context ctx, a4w4_backend backend) {
  return a4w4::guarded(__func__, [&] {
    auto& context = a4w4::checked_context(ctx);
    if (backend != A4W4_BACKEND_AUTO && backend != A4W4_BACKEND_CPU &&
        backend != A4W4_BACKEND_CUDA)
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "backend: {} is not an a4w4_backend value",
                 static_cast<int>(backend));
    if (!a4w4_backend_compiled(backend))
      a4w4::fail(A4W4_ERROR_BACKEND_NOT_COMPILED, "backend: {} is not compiled into this build",
                 a4w4_backend_name(backend));
    context.backend.store(backend);
  });
}

a4w4_status a4w4_context_get_backend(a4w4_context ctx, a4w4_backend* backend) {
  return a4w4::guarded(__func__, [&] {
    auto& context = a4w4::checked_context(ctx);
    if (backend == nullptr) a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "backend: must not be NULL");
    *backend = context.backend.load();
  });
}

a4w4_status a4w4_context_set_num_threads(a4w4_context ctx, int num_threads) {
  return a4w4::guarded(__func__, [&] {
    auto& context = a4w4::checked_context(ctx);
    if (num_threads < 0)
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "num_threads: expected >= 0 (0 = all), got {}",
                 num_threads);
    context.num_threads.store(num_threads);
  });
}

a4w4_status a4w4_context_get_num_threads(a4w4_context ctx, int* num_threads) {
  return a4w4::guarded(__func__, [&] {
    auto& context = a4w4::checked_context(ctx);
    if (num_threads == nullptr)
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "num_threads: must not be NULL");
    *num_threads = context.num_threads.load();
  });
}

a4w4_status a4w4_context_set_workspace(a4w4_context ctx, a4w4_device device, void* ptr,
                                       size_t bytes) {
  return a4w4::guarded(__func__, [&] {
    auto& context = a4w4::checked_context(ctx);
    if (ptr == nullptr && bytes == 0) {
      context.set_workspace({});
      return;
    }
    if (ptr == nullptr || bytes == 0)
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT,
                 "ptr and bytes: expected device memory and its size (> 0), or NULL and 0 to "
                 "remove the workspace; got {} and {}",
                 ptr == nullptr ? "NULL" : "a pointer", bytes);
    if (device.type != A4W4_DEVICE_CUDA)
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT,
                 "device: a workspace is memory of a CUDA device (type {}), got type {}",
                 static_cast<int>(A4W4_DEVICE_CUDA), static_cast<int>(device.type));
    a4w4::expect_cuda_device(device.ordinal, "device");
    a4w4::cuda::check_pointer(ptr, device, "workspace");
    if (reinterpret_cast<uintptr_t>(ptr) % 256 != 0)
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "ptr: must be 256-byte aligned (as cudaMalloc's)");
    context.set_workspace({device, ptr, bytes});
  });
}

a4w4_status a4w4_context_get_workspace(a4w4_context ctx, a4w4_device* device, void** ptr,
                                       size_t* bytes) {
  return a4w4::guarded(__func__, [&] {
    const a4w4_context_t::Workspace w = a4w4::checked_context(ctx).workspace();
    if (device != nullptr) *device = w.device;
    if (ptr != nullptr) *ptr = w.ptr;
    if (bytes != nullptr) *bytes = w.bytes;
  });
}

a4w4_status a4w4_gemm_workspace_size(int64_t m, int64_t n, int64_t k, size_t* bytes) {
  return a4w4::guarded(__func__, [&] {
    if (bytes == nullptr) a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "bytes: must not be NULL");
    constexpr int64_t kLimit = int64_t{1} << 40;  // keeps (M + N) * K far from int64's end
    if (m < 1 || n < 1 || m > kLimit || n > kLimit)
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "m and n: expected 1..2^40, got {} and {}", m, n);
    if (k < 32 || k > kLimit)
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "k: expected 32..2^40, got {}", k);
    if (k % 32 != 0)
      a4w4::fail(A4W4_ERROR_K_NOT_MULTIPLE_OF_32,
                 "k: K = {} is not a multiple of the 32-element block size", k);
    if (m + n > (int64_t{1} << 61) / (k + 128))  // (M + N) * K beyond any address space
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT,
                 "m, n, k: the workspace, about (M + N) * K bytes, would exceed 2^61 bytes");
    const a4w4::StagingWorkspace w(m, n, k);
    *bytes = static_cast<size_t>(w.bytes);
  });
}

a4w4_status a4w4_context_load_tuned(a4w4_context ctx, const char* path) {
  return a4w4::guarded(__func__, [&] {
    auto& context = a4w4::checked_context(ctx);
    if (path == nullptr || *path == '\0')
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "path: must be a non-empty file name");
    context.set_tuned_table(a4w4::TunedTable::load(path));  // replaced only once loaded
  });
}

a4w4_status a4w4_context_clear_tuned(a4w4_context ctx) {
  return a4w4::guarded(__func__, [&] { a4w4::checked_context(ctx).set_tuned_table(nullptr); });
}

a4w4_status a4w4_context_tuned_count(a4w4_context ctx, int* entries, int* warnings) {
  return a4w4::guarded(__func__, [&] {
    const auto table = a4w4::checked_context(ctx).tuned_table();
    if (entries != nullptr) *entries = table ? table->entry_count() : 0;
    if (warnings != nullptr) *warnings = table ? static_cast<int>(table->warnings().size()) : 0;
  });
}

a4w4_status a4w4_context_tuned_warning(a4w4_context ctx, int index, char* buf, size_t buf_size) {
  return a4w4::guarded(__func__, [&] {
    const auto table = a4w4::checked_context(ctx).tuned_table();
    if (buf == nullptr || buf_size == 0)
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "buf: must be non-NULL with buf_size > 0");
    const std::vector<std::string> warnings =
        table ? table->warnings() : std::vector<std::string>{};
    if (index < 0 || static_cast<size_t>(index) >= warnings.size())
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "index: expected 0 <= index < {}, got {}",
                 warnings.size(), index);
    const std::string& text = warnings[static_cast<size_t>(index)];
    const size_t n = std::min(text.size(), buf_size - 1);
    text.copy(buf, n);
    buf[n] = '\0';
  });
}

a4w4_status a4w4_device_tuning_key(a4w4_device device, char* name, size_t name_size,
                                   int* sm_count) {
  return a4w4::guarded(__func__, [&] {
    if (name == nullptr || name_size == 0 || sm_count == nullptr)
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT,
                 "name (with name_size > 0) and sm_count must not be NULL");
    if (device.type == A4W4_DEVICE_CUDA) {
      a4w4::expect_cuda_device(device.ordinal, "device");
    } else if (device.type != A4W4_DEVICE_CPU || device.ordinal != 0) {
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "device: type {} ordinal {} is not a valid device",
                 static_cast<int>(device.type), device.ordinal);
    }
    const a4w4::DeviceKey key = a4w4::device_key(device);
    const size_t n = std::min(key.name.size(), name_size - 1);
    key.name.copy(name, n);
    name[n] = '\0';
    *sm_count = key.sm_count;
  });
}

}  // extern "C"
