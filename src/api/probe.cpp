// Backend and device probes: what is compiled in, what is usable now.
#include <fstream>
#include <string>
#include <thread>

#include "a4w4/a4w4.h"
#include "api/error.h"
#include "backends/cuda/cuda_runtime_probe.h"

namespace {

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "CPU";
}

}  // namespace

extern "C" {

int a4w4_backend_compiled(a4w4_backend backend) {
  switch (backend) {
    case A4W4_BACKEND_AUTO:
    case A4W4_BACKEND_CPU:
      return 1;
    case A4W4_BACKEND_CUDA:
      return a4w4::cuda::compiled() ? 1 : 0;
  }
  return 0;
}

int a4w4_backend_available(a4w4_backend backend) {
  switch (backend) {
    case A4W4_BACKEND_AUTO:
    case A4W4_BACKEND_CPU:
      return 1;
    case A4W4_BACKEND_CUDA:
      return a4w4::cuda::device_count() > 0 ? 1 : 0;
  }
  return 0;
}

a4w4_status a4w4_device_count(a4w4_backend backend, int* count) {
  return a4w4::guarded(__func__, [&] {
    if (count == nullptr) a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "count: must not be NULL");
    *count = 0;
    switch (backend) {
      case A4W4_BACKEND_CPU:
        *count = 1;
        return;
      case A4W4_BACKEND_CUDA:
        if (!a4w4::cuda::compiled())
          a4w4::fail(A4W4_ERROR_BACKEND_NOT_COMPILED,
                     "backend: cuda is not compiled into this build");
        *count = a4w4::cuda::device_count();
        if (*count == 0)
          a4w4::fail(A4W4_ERROR_NO_DEVICE, "backend: cuda is compiled in but no GPU is usable");
        return;
      case A4W4_BACKEND_AUTO:
        break;
    }
    a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "backend: expected cpu or cuda, got {}",
               a4w4_backend_name(backend));
  });
}

a4w4_status a4w4_device_describe(a4w4_device device, char* buf, size_t buf_size) {
  return a4w4::guarded(__func__, [&] {
    if (buf == nullptr || buf_size == 0)
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "buf: must be non-NULL with buf_size > 0");
    std::string text;
    if (device.type == A4W4_DEVICE_CPU && device.ordinal == 0) {
      text = fmt::format("{} ({} hardware threads)", cpu_model_name(),
                         std::thread::hardware_concurrency());
    } else if (device.type == A4W4_DEVICE_CUDA) {
      text = a4w4::cuda::describe_device(device.ordinal);
    } else {
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "device: type {} ordinal {} is not a valid device",
                 static_cast<int>(device.type), device.ordinal);
    }
    const size_t n = std::min(text.size(), buf_size - 1);
    text.copy(buf, n);
    buf[n] = '\0';
  });
}

}  // extern "C"
