/* a4w4 example: quantize activations and weights to MXFP4, multiply them, and check the result
 * against a plain double-precision product of the dequantized operands.
 *
 *   D[M, N] = A[M, K] . B[N, K]^T     (A, B: E2M1 values with one E8M0 scale per 32 along K)
 *
 * Exit status 0 when the GEMM matches the dequantized product. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <a4w4/a4w4.h>

enum { M = 8, N = 16, K = 256 };

static int failed(const char* what, a4w4_status status) {
  fprintf(stderr, "%s failed: %s\n  %s\n", what, a4w4_status_string(status),
          a4w4_last_error_message());
  return 1;
}

/* A small deterministic generator (no rand(): the same numbers everywhere). */
static float next_value(uint32_t* state) {
  *state = *state * 1664525u + 1013904223u;
  return ((float)(*state >> 8) / 16777216.0f - 0.5f) * 8.0f;
}

int main(void) {
  static float x[M * K], w[N * K], x_deq[M * K], w_deq[N * K], d[M * N];
  static uint8_t a[M * K / 2], a_scale[M * K / 32], b[N * K / 2], b_scale[N * K / 32];
  const a4w4_device cpu = a4w4_cpu();
  a4w4_context ctx;
  a4w4_status st;
  uint32_t state = 12345u;
  double err2 = 0.0, ref2 = 0.0;
  int i, m, n, k;

  for (i = 0; i < M * K; ++i) x[i] = next_value(&state);
  for (i = 0; i < N * K; ++i) w[i] = next_value(&state) * 0.01f;

  st = a4w4_context_create(&ctx);
  if (st != A4W4_SUCCESS) return failed("a4w4_context_create", st);
  {
    const a4w4_tensor xt = a4w4_tensor_2d(x, A4W4_DTYPE_F32, M, K, K, cpu);
    const a4w4_tensor wt = a4w4_tensor_2d(w, A4W4_DTYPE_F32, N, K, K, cpu);
    const a4w4_tensor at = a4w4_tensor_2d(a, A4W4_DTYPE_E2M1, M, K, K, cpu);
    const a4w4_tensor ast = a4w4_tensor_2d(a_scale, A4W4_DTYPE_E8M0, M, K / 32, K / 32, cpu);
    const a4w4_tensor bt = a4w4_tensor_2d(b, A4W4_DTYPE_E2M1, N, K, K, cpu);
    const a4w4_tensor bst = a4w4_tensor_2d(b_scale, A4W4_DTYPE_E8M0, N, K / 32, K / 32, cpu);
    const a4w4_tensor xdt = a4w4_tensor_2d(x_deq, A4W4_DTYPE_F32, M, K, K, cpu);
    const a4w4_tensor wdt = a4w4_tensor_2d(w_deq, A4W4_DTYPE_F32, N, K, K, cpu);
    const a4w4_tensor dt = a4w4_tensor_2d(d, A4W4_DTYPE_F32, M, N, N, cpu);

    if ((st = a4w4_quantize(ctx, &xt, &at, &ast, A4W4_SCALE_RCEIL, NULL)) != A4W4_SUCCESS)
      return failed("a4w4_quantize(x)", st);
    if ((st = a4w4_quantize(ctx, &wt, &bt, &bst, A4W4_SCALE_RCEIL, NULL)) != A4W4_SUCCESS)
      return failed("a4w4_quantize(w)", st);
    if ((st = a4w4_dequantize(ctx, &at, &ast, &xdt, NULL)) != A4W4_SUCCESS)
      return failed("a4w4_dequantize(a)", st);
    if ((st = a4w4_dequantize(ctx, &bt, &bst, &wdt, NULL)) != A4W4_SUCCESS)
      return failed("a4w4_dequantize(b)", st);
    if ((st = a4w4_gemm(ctx, &at, &ast, &bt, &bst, NULL, NULL, &dt, NULL, NULL)) != A4W4_SUCCESS)
      return failed("a4w4_gemm", st);
  }
  a4w4_context_destroy(ctx);

  for (m = 0; m < M; ++m) {
    for (n = 0; n < N; ++n) {
      double ref = 0.0;
      for (k = 0; k < K; ++k) ref += (double)x_deq[m * K + k] * (double)w_deq[n * K + k];
      err2 += (d[m * N + n] - ref) * (d[m * N + n] - ref);
      ref2 += ref * ref;
    }
  }
  printf("a4w4 %s: D[0,0..3] = %g %g %g %g, ||D - ref|| / ||ref|| = %.3g\n", a4w4_version_string(),
         d[0], d[1], d[2], d[3], sqrt(err2 / ref2));
  return sqrt(err2 / ref2) <= 1e-6 ? 0 : 1;
}
