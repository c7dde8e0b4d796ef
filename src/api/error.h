// Internal error handling. Inside the library a failure is thrown as a4w4::ApiError; every C entry
// point runs its body through guarded(), which turns any exception into a status code and the
// thread's last-error message. Nothing escapes across the C API.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <utility>

#include "a4w4/a4w4.h"

#if !defined(__CUDACC__)
#include <fmt/format.h>
#endif

namespace a4w4 {

class ApiError : public std::exception {
 public:
  ApiError(a4w4_status status, std::string message) : status_(status), message_(std::move(message)) {}
  a4w4_status status() const noexcept { return status_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  a4w4_status status_;
  std::string message_;
};

[[noreturn]] inline void fail(a4w4_status status, std::string message) {
  throw ApiError(status, std::move(message));
}

#if !defined(__CUDACC__)  // nvcc's front end cannot compile fmt's compile-time format checks
template <typename... Args>
[[noreturn]] void fail(a4w4_status status, fmt::format_string<Args...> format, Args&&... args) {
  throw ApiError(status, fmt::format(format, std::forward<Args>(args)...));
}
#endif

void set_last_error_message(const char* message) noexcept;
void set_last_error_message(a4w4_status status, const char* function, const char* message) noexcept;

// Runs body (returning void), mapping exceptions to status codes and recording the message.
template <typename Body>
a4w4_status guarded(const char* function, Body&& body) noexcept {
  try {
    body();
    return A4W4_SUCCESS;
  } catch (const ApiError& e) {
    set_last_error_message(e.status(), function, e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_last_error_message("out of host memory");
    return A4W4_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error_message(e.what());
    return A4W4_ERROR_INTERNAL;
  } catch (...) {
    set_last_error_message("unknown internal exception");
    return A4W4_ERROR_INTERNAL;
  }
}

}  // namespace a4w4
