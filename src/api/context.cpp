#include "api/context.h"

#include <omp.h>

#include "api/error.h"
#include "backends/cuda/cuda_runtime_probe.h"

namespace a4w4 {

a4w4_context_t& checked_context(a4w4_context ctx) {
  if (ctx == nullptr)
    fail(A4W4_ERROR_INVALID_ARGUMENT, "ctx: must not be NULL (create one with a4w4_context_create)");
  return *ctx;
}

a4w4_backend resolve_backend(const a4w4_context_t& ctx, a4w4_device device) {
  const a4w4_backend wanted = ctx.backend.load();
  const a4w4_backend served = device.type == A4W4_DEVICE_CUDA ? A4W4_BACKEND_CUDA : A4W4_BACKEND_CPU;
  if (wanted != A4W4_BACKEND_AUTO && wanted != served)
    fail(A4W4_ERROR_DEVICE_MISMATCH,
         "the context's backend is {}, but the tensors are on a {} device (set the backend to "
         "auto or {}, or move the tensors)",
         a4w4_backend_name(wanted), device.type == A4W4_DEVICE_CUDA ? "CUDA" : "CPU",
         a4w4_backend_name(served));
  if (served == A4W4_BACKEND_CUDA) {
    if (!cuda::compiled())
      fail(A4W4_ERROR_BACKEND_NOT_COMPILED,
           "the tensors are on a CUDA device, but this build of a4w4 has no CUDA backend "
           "(configure with -DA4W4_CUDA=ON)");
    const int count = cuda::device_count();
    if (device.ordinal >= count)
      fail(A4W4_ERROR_NO_DEVICE, "CUDA device {} requested, but {} device(s) are present",
           device.ordinal, count);
  }
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
    *ctx = new a4w4_context_t();
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

}  // extern "C"
