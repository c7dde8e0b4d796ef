// `a4w4 quantize`: X [R, K] ('<f4' or '<f2') -> packed E2M1 values Q [R, K/2] and E8M0 scales
// S [R, K/32], both '|u1'.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "a4w4/a4w4.h"
#include "commands.h"
#include "common.h"

namespace a4w4::cli {
namespace {

struct QuantizeOptions {
  std::string input;
  std::string out_fp4;
  std::string out_scale;
  a4w4_scale_mode mode = A4W4_SCALE_RCEIL;
  int threads = 0;
};

void run_quantize(const QuantizeOptions& options) {
  const std::pair<std::string_view, std::string> outputs[] = {{"--out-fp4", options.out_fp4},
                                                              {"--out-scale", options.out_scale}};
  expect_distinct_outputs(outputs);

  InputArray x = load_input("--input", options.input);
  constexpr npy::Dtype kFloats[] = {npy::Dtype::kF32, npy::Dtype::kF16};
  const MatrixShape shape = expect_matrix(x, kFloats);
  if (shape.cols < 32 || shape.cols % 32 != 0)
    fail("{}: shape {} has K = {} columns; K must be a positive multiple of 32", x.label,
         npy::shape_string(x.array.shape), shape.cols);

  Context context;
  context.set_num_threads(options.threads);
  const a4w4_tensor x_tensor = a4w4_tensor_2d(x.array.data.data(), float_dtype(x.array.dtype),
                                              shape.rows, shape.cols, shape.cols, a4w4_cpu());
  MxMatrix q = quantize_matrix(context, x_tensor, options.mode);

  OutputFiles files;
  files.add("--out-fp4", options.out_fp4,
            make_array(npy::Dtype::kU8, q.rows, q.k / 2, std::move(q.values)));
  files.add("--out-scale", options.out_scale,
            make_array(npy::Dtype::kU8, q.rows, q.k / 32, std::move(q.scales)));
  files.commit();
  fmt::print("quantized {} [{}, {}] ({}) -> {} [{}, {}] e2m1 x2, {} [{}, {}] e8m0\n", options.input,
             shape.rows, shape.cols, a4w4_scale_mode_name(options.mode), options.out_fp4, q.rows,
             q.k / 2, options.out_scale, q.rows, q.k / 32);
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto options = std::make_shared<QuantizeOptions>();
  CLI::App* command = app.add_subcommand(
      "quantize",
      "Quantize X [R, K] (<f4 or <f2, K % 32 == 0) to MXFP4: Q [R, K/2] and S [R, K/32]");
  command->add_option("--input", options->input, "X.npy: <f4 or <f2, shape [R, K]")->required();
  command
      ->add_option("--out-fp4", options->out_fp4,
                   "Q.npy to write: |u1 [R, K/2], element 2i in "
                   "the low nibble")
      ->required();
  command->add_option("--out-scale", options->out_scale, "S.npy to write: |u1 [R, K/32], E8M0")
      ->required();
  add_choice_option<a4w4_scale_mode>(
      *command, "--mode", options->mode,
      {{"floor", A4W4_SCALE_FLOOR}, {"rceil", A4W4_SCALE_RCEIL}, {"even", A4W4_SCALE_EVEN}},
      "How the block scale is chosen (default rceil)");
  add_threads_option(*command, options->threads);
  command->callback([options] { run_quantize(*options); });
}

}  // namespace a4w4::cli
