// `a4w4 dequantize`: packed E2M1 values Q [R, K/2] with E8M0 scales S [R, K/32] -> X [R, K] '<f4'.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "a4w4/a4w4.h"
#include "commands.h"
#include "common.h"

namespace a4w4::cli {
namespace {

struct DequantizeOptions {
  std::string fp4;
  std::string scale;
  std::string out;
  int threads = 0;
};

void run_dequantize(const DequantizeOptions& options) {
  MxMatrix q = load_mx_matrix("--fp4", options.fp4, "--scale", options.scale);
  Context context;
  context.set_num_threads(options.threads);
  std::vector<uint8_t> y(static_cast<size_t>(q.rows * q.k) * sizeof(float));
  const a4w4_tensor q_tensor = mx_values_tensor(q, q.values.data(), a4w4_cpu());
  const a4w4_tensor s_tensor = mx_scales_tensor(q, q.scales.data(), a4w4_cpu());
  const a4w4_tensor y_tensor =
      a4w4_tensor_2d(y.data(), A4W4_DTYPE_F32, q.rows, q.k, q.k, a4w4_cpu());
  check(a4w4_dequantize(context.get(), &q_tensor, &s_tensor, &y_tensor, nullptr),
        "dequantize failed");

  OutputFiles files;
  files.add("--out", options.out, make_array(npy::Dtype::kF32, q.rows, q.k, std::move(y)));
  files.commit();
  fmt::print("dequantized {} + {} -> {} [{}, {}] <f4\n", options.fp4, options.scale, options.out,
             q.rows, q.k);
}

}  // namespace

void add_dequantize_command(CLI::App& app) {
  auto options = std::make_shared<DequantizeOptions>();
  CLI::App* command = app.add_subcommand(
      "dequantize", "Dequantize MXFP4 Q [R, K/2] with scales S [R, K/32] to X [R, K] (<f4)");
  command->add_option("--fp4", options->fp4, "Q.npy: |u1 [R, K/2], packed E2M1")->required();
  command->add_option("--scale", options->scale, "S.npy: |u1 [R, K/32], E8M0")->required();
  command->add_option("--out", options->out, "X.npy to write: <f4 [R, K]")->required();
  add_threads_option(*command, options->threads);
  command->callback([options] { run_dequantize(*options); });
}

}  // namespace a4w4::cli
