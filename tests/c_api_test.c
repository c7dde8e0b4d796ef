/* The public header compiled as C99 (-Wall -Wextra -Wpedantic -Werror): a context, a quantize and
 * a GEMM with hand-computed results. Returns non-zero on the first failed check. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "a4w4/a4w4.h"

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              a4w4_last_error_message());                                                      \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

enum { M = 2, N = 1, K = 64 };

int main(void) {
  static const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float x[M][K], w[N][K], d[M][N], bias[N];
  uint8_t a[M][K / 2], a_scale[M][K / 32], b[N][K / 2], b_scale[N][K / 32];
  uint16_t d16[M][N];
  a4w4_context ctx = NULL;
  a4w4_device cpu = a4w4_cpu();
  a4w4_gemm_options options;
  a4w4_tensor xt, at, ast, wt, bt, bst, dt, biast, d16t;
  int k;

  CHECK(a4w4_version() == A4W4_VERSION);
  CHECK(a4w4_context_create(&ctx) == A4W4_SUCCESS);
  CHECK(a4w4_context_set_num_threads(ctx, 2) == A4W4_SUCCESS);

  /* Row 0: the grid repeated (amax 6 -> scale 2^0); row 1: -grid / 4 (amax 1.5 -> 2^-2).
     B: all 1.0 (amax 1 -> scale 2^-2, code 6 = 4.0). */
  for (k = 0; k < K; ++k) {
    x[0][k] = grid[k % 8];
    x[1][k] = -grid[k % 8] * 0.25f;
    w[0][k] = 1.0f;
  }
  memset(a, 0xA5, sizeof a);
  memset(a_scale, 0xA5, sizeof a_scale);
  xt = a4w4_tensor_2d(x, A4W4_DTYPE_F32, M, K, K, cpu);
  at = a4w4_tensor_2d(a, A4W4_DTYPE_E2M1, M, K, K, cpu);
  ast = a4w4_tensor_2d(a_scale, A4W4_DTYPE_E8M0, M, K / 32, K / 32, cpu);
  wt = a4w4_tensor_2d(w, A4W4_DTYPE_F32, N, K, K, cpu);
  bt = a4w4_tensor_2d(b, A4W4_DTYPE_E2M1, N, K, K, cpu);
  bst = a4w4_tensor_2d(b_scale, A4W4_DTYPE_E8M0, N, K / 32, K / 32, cpu);
  CHECK(a4w4_quantize(ctx, &xt, &at, &ast, A4W4_SCALE_RCEIL, NULL) == A4W4_SUCCESS);
  CHECK(a4w4_quantize(ctx, &wt, &bt, &bst, A4W4_SCALE_RCEIL, NULL) == A4W4_SUCCESS);
  CHECK(a_scale[0][0] == 127 && a_scale[0][1] == 127);
  CHECK(a_scale[1][0] == 125 && a_scale[1][1] == 125);
  CHECK(b_scale[0][0] == 125 && b_scale[0][1] == 125);
  CHECK(a[0][0] == 0x10 && a[0][1] == 0x32 && a[0][3] == 0x76); /* codes k % 8, low nibble first */
  CHECK(a[1][0] == 0x98 && a[1][3] == 0xFE);                    /* negative; -0 is 0x8 */
  CHECK(b[0][0] == 0x66);

  /* D = 0.5 * A.B^T + bias: sum of the grid is 18, 8 times per row: 144 and -36. */
  bias[0] = 1.0f;
  d[0][0] = d[1][0] = -99.0f;
  dt = a4w4_tensor_2d(d, A4W4_DTYPE_F32, M, N, N, cpu);
  biast = a4w4_tensor_1d(bias, A4W4_DTYPE_F32, N, cpu);
  a4w4_gemm_options_init(&options);
  options.alpha = 0.5f;
  CHECK(a4w4_gemm(ctx, &at, &ast, &bt, &bst, NULL, &biast, &dt, &options, NULL) == A4W4_SUCCESS);
  CHECK(d[0][0] == 73.0f);
  CHECK(d[1][0] == -17.0f);

  /* The same into bf16, with C = the f32 D above as an input and beta 2.5:
     72 + 2.5 * 73 + 1 = 255.5, a tie between 255 and 256 (bf16 spacing 1 in [128, 256)) -> the
     even significand, 256; -18 + 2.5 * -17 + 1 = -59.5 (exact). */
  d16t = a4w4_tensor_2d(d16, A4W4_DTYPE_BF16, M, N, N, cpu);
  options.beta = 2.5f;
  CHECK(a4w4_gemm(ctx, &at, &ast, &bt, &bst, &dt, &biast, &d16t, &options, NULL) == A4W4_SUCCESS);
  CHECK(d16[0][0] == 0x4380); /* 256 */
  CHECK(d16[1][0] == 0xC26E); /* -59.5 = -1.859375 * 2^5 */

  /* Out-of-range enum values. In C an enum object may hold any value of its compatible integer
     type, so these are legal calls, and the API promises A4W4_ERROR_INVALID_ARGUMENT ("an
     out-of-range enum") or "invalid" names for them; nothing may be written. (C++ tests cannot
     make these values without undefined behaviour, so they live here.)
     LIBRARY BUG exposed here under -fsanitize=undefined: the library, compiled as C++, reads these
     parameters as C++ enums whose value range excludes them, which is undefined behaviour
     ("runtime error: load of value 7, which is not a valid value for type 'a4w4_scale_mode'" at
     src/api/operations.cpp, and likewise in status.cpp, context.cpp, tensor_checks.cpp). */
  CHECK(a4w4_status_string((a4w4_status)1000) != NULL);
  CHECK(a4w4_status_string((a4w4_status)-1) != NULL);
  CHECK(strcmp(a4w4_status_string((a4w4_status)1000), a4w4_status_string(A4W4_SUCCESS)) != 0);
  CHECK(a4w4_dtype_bits((a4w4_dtype)99) == 0);
  CHECK(strcmp(a4w4_dtype_name((a4w4_dtype)99), "invalid") == 0);
  CHECK(strcmp(a4w4_scale_mode_name((a4w4_scale_mode)-1), "invalid") == 0);
  CHECK(strcmp(a4w4_backend_name((a4w4_backend)42), "invalid") == 0);
  CHECK(a4w4_backend_compiled((a4w4_backend)42) == 0);
  CHECK(a4w4_backend_available((a4w4_backend)42) == 0);
  CHECK(a4w4_context_set_backend(ctx, (a4w4_backend)42) == A4W4_ERROR_INVALID_ARGUMENT);
  {
    uint8_t code = 7, bits = 7;
    CHECK(a4w4_dtype_to_dlpack((a4w4_dtype)99, &code, &bits) == A4W4_ERROR_INVALID_ARGUMENT);
    CHECK(code == 7 && bits == 7);
  }
  CHECK(a4w4_quantize(ctx, &xt, &at, &ast, (a4w4_scale_mode)7, NULL) ==
        A4W4_ERROR_INVALID_ARGUMENT);
  CHECK(a4w4_quantize(ctx, &xt, &at, &ast, (a4w4_scale_mode)-1, NULL) ==
        A4W4_ERROR_INVALID_ARGUMENT);
  {
    a4w4_tensor bad = xt;
    bad.dtype = (a4w4_dtype)99;
    CHECK(a4w4_quantize(ctx, &bad, &at, &ast, A4W4_SCALE_RCEIL, NULL) ==
          A4W4_ERROR_INVALID_ARGUMENT);
    CHECK(strlen(a4w4_last_error_message()) > 0);
    bad = xt;
    bad.layout = (a4w4_layout)7;
    CHECK(a4w4_quantize(ctx, &bad, &at, &ast, A4W4_SCALE_RCEIL, NULL) ==
          A4W4_ERROR_INVALID_ARGUMENT);
    bad = xt;
    bad.device.type = (a4w4_device_type)5;
    CHECK(a4w4_quantize(ctx, &bad, &at, &ast, A4W4_SCALE_RCEIL, NULL) ==
          A4W4_ERROR_INVALID_ARGUMENT);
    bad = dt;
    bad.layout = (a4w4_layout)4;
    CHECK(a4w4_gemm(ctx, &at, &ast, &bt, &bst, NULL, NULL, &bad, NULL, NULL) ==
          A4W4_ERROR_INVALID_ARGUMENT);
  }
  options.math_mode = (a4w4_math_mode)7;
  CHECK(a4w4_gemm(ctx, &at, &ast, &bt, &bst, NULL, NULL, &dt, &options, NULL) ==
        A4W4_ERROR_INVALID_ARGUMENT);
  CHECK(a_scale[0][0] == 127 && a[0][0] == 0x10);
  CHECK(d[0][0] == 73.0f && d[1][0] == -17.0f);

  /* The kernel registry and the chooser. */
  {
    a4w4_kernel_properties props;
    a4w4_gemm_choice choice;
    int index = -1, entries = -1, warnings = -1;
    char key[64];
    int sm_count = 0;
    memset(&props, 0, sizeof props);
    props.struct_size = sizeof props;
    CHECK(a4w4_kernel_find("cpu.reference", &index) == A4W4_SUCCESS);
    CHECK(a4w4_kernel_describe(index, &props) == A4W4_SUCCESS);
    CHECK(strcmp(props.name, "cpu.reference") == 0);
    CHECK(props.backend == A4W4_BACKEND_CPU && props.path == A4W4_KERNEL_PATH_CPU);
    CHECK(strcmp(a4w4_kernel_path_name(props.path), "cpu") == 0);
    CHECK(strcmp(a4w4_kernel_path_name((a4w4_kernel_path)99), "invalid") == 0);
    CHECK(a4w4_kernel_find("cpu.nope", &index) == A4W4_ERROR_KERNEL_NOT_FOUND);
    a4w4_gemm_options_init(&options);
    CHECK(a4w4_kernel_applicable(ctx, "cpu.reference", &at, &ast, &bt, &bst, NULL, NULL, &dt,
                                 &options) == A4W4_SUCCESS);
    CHECK(a4w4_kernel_applicable(ctx, "cpu.nope", &at, &ast, &bt, &bst, NULL, NULL, &dt,
                                 &options) == A4W4_ERROR_KERNEL_NOT_FOUND);
    memset(&choice, 0, sizeof choice);
    choice.struct_size = sizeof choice;
    options.kernel = "cpu.reference";
    options.split_k = 2;
    CHECK(a4w4_gemm_choose(ctx, &at, &ast, &bt, &bst, NULL, NULL, &dt, &options, &choice) ==
          A4W4_SUCCESS);
    CHECK(strcmp(choice.kernel, "cpu.reference") == 0 && choice.split_k == 2 &&
          choice.source == A4W4_CHOICE_EXPLICIT);
    CHECK(a4w4_context_load_tuned(ctx, "/nonexistent/tuned.csv") == A4W4_ERROR_CONFIG);
    CHECK(strstr(a4w4_last_error_message(), "/nonexistent/tuned.csv") != NULL);
    CHECK(a4w4_context_tuned_count(ctx, &entries, &warnings) == A4W4_SUCCESS);
    CHECK(entries == 0 && warnings == 0);
    CHECK(a4w4_context_clear_tuned(ctx) == A4W4_SUCCESS);
    CHECK(a4w4_device_tuning_key(cpu, key, sizeof key, &sm_count) == A4W4_SUCCESS);
    CHECK(strcmp(key, "cpu") == 0 && sm_count >= 1);
  }

  CHECK(a4w4_context_destroy(ctx) == A4W4_SUCCESS);
  printf("c_api_test: ok (a4w4 %s)\n", a4w4_version_string());
  return 0;
}
