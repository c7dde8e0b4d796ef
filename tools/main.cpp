// a4w4: quantize, dequantize and multiply MXFP4 matrices stored as .npy files, benchmark and check
// the GEMM, and report what this build of liba4w4 offers.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <new>

#include "a4w4/a4w4.h"
#include "commands.h"
#include "common.h"

int main(int argc, char** argv) {
  CLI::App app{"a4w4: MXFP4 x MXFP4 GEMM (OCP MX) -- quantize, dequantize, multiply, benchmark",
               "a4w4"};
  app.set_version_flag("--version",
                       fmt::format("a4w4 {} (liba4w4 {}, header {}.{}.{})", a4w4_version_string(),
                                   a4w4_version_string(), A4W4_VERSION_MAJOR, A4W4_VERSION_MINOR,
                                   A4W4_VERSION_PATCH));
  app.require_subcommand(1, 1);
  a4w4::cli::add_info_command(app);
  a4w4::cli::add_kernels_command(app);
  a4w4::cli::add_quantize_command(app);
  a4w4::cli::add_dequantize_command(app);
  a4w4::cli::add_gemm_command(app);
  a4w4::cli::add_bench_command(app);
  a4w4::cli::add_tune_command(app);
  a4w4::cli::add_config_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Usage errors get the same one-line form as every other failure.
    fmt::print(stderr, "a4w4: error: {} (see a4w4 --help)\n", e.what());
    return 2;
  } catch (const a4w4::cli::Failure& e) {
    fmt::print(stderr, "a4w4: error: {}\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "a4w4: error: out of host memory\n");
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "a4w4: error: internal error: {}\n", e.what());
    return 1;
  }
  return 0;
}
