// What Hopper's warpgroup MMAs do, measured on the GPU at hand (sm_90a), for the kernel families
// that build on src/backends/cuda/wgmma.cuh:
//  1. Layout check: D = A B^T through the 128-byte swizzled shared-memory descriptors and the
//     accumulator fragment order, for bf16 (m64n8k16), e4m3 and s8 (m64n8k32), on small integers
//     whose products and sums every path represents exactly. Any mismatch fails the program. Also
//     s8 m64n128k32 (the int8 family's MMA, gemm_int8.cu) on the operands it sees: folded values
//     2 * E2M1 * 2^d, d in [0, 3] (|v| <= 96), 4 wgmmas of a 128-K tile summed exactly in int32.
//  2. Accumulation: how many bits of a sum the fp8 and bf16 wgmma keep. A big product 2^E sits in
//     the accumulator (from a first wgmma, or inside the same one) and small products 2^(E - s) are
//     added; the largest s for which the small part survives exactly is the bits kept below the
//     leading one. fp32 keeps 23.
// Usage: a4w4_wgmma_probe  (exit 0: layouts right; 77: no sm_90 GPU; 1: a layout check failed)
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backends/cuda/wgmma.cuh"

namespace {

namespace wg = a4w4::cuda::wgmma;

enum class Kind { kBf16, kE4m3, kS8 };

constexpr int kRowsA = 64, kRowsB = 8;  // m64 n8
constexpr int kSteps = 4;               // K = 4 wgmmas = 128 bytes per row

// A and B as 128-byte rows (bf16: 64 values, 8-bit: 128) written into swizzled shared memory by
// the warpgroup, then kSteps wgmmas; D (64 x 8) back to global in row-major order. With
// `split_at` >= 0 the chain restarts accumulating at that step (the probe's two-instruction form).
template <Kind kKind>
__global__ void __launch_bounds__(128) wgmma_kernel(const uint8_t* a, const uint8_t* b, float* d) {
  __shared__ __align__(1024) uint8_t sa[kRowsA * 128];
  __shared__ __align__(1024) uint8_t sb[1024];
  const int t = threadIdx.x;
  for (int i = t; i < kRowsA * 128; i += 128) sa[wg::swizzled_offset(i / 128, i % 128)] = a[i];
  for (int i = t; i < kRowsB * 128; i += 128) sb[wg::swizzled_offset(i / 128, i % 128)] = b[i];
  wg::fence_shared_for_async();
  __syncthreads();
  wg::fence();
  float acc[4] = {0, 0, 0, 0};
  int32_t iacc[4] = {0, 0, 0, 0};
  for (int step = 0; step < kSteps; ++step) {
    const uint64_t da = wg::descriptor(wg::shared_address(sa) + 32 * step);
    const uint64_t db = wg::descriptor(wg::shared_address(sb) + 32 * step);
    if constexpr (kKind == Kind::kBf16) wg::mma_bf16_m64n8k16(acc, da, db, step > 0);
    if constexpr (kKind == Kind::kE4m3) wg::mma_e4m3_m64n8k32(acc, da, db, step > 0);
    if constexpr (kKind == Kind::kS8) wg::mma_s8_m64n8k32(iacc, da, db, step > 0);
  }
  wg::commit();
  wg::wait<0>();
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = 16 * w + g + (i >= 2 ? 8 : 0), col = 2 * q + (i & 1);
    d[row * kRowsB + col] = kKind == Kind::kS8 ? static_cast<float>(iacc[i]) : acc[i];
  }
}

// The int8 family's MMA: A (64 x 128 s8) times B (128 x 128 s8)^T, a chain of 4 m64n128k32
// wgmmas over one 128-byte swizzled row, int32 D (64 x 128) back in row-major order.
__global__ void __launch_bounds__(128)
    wgmma_s8_n128_kernel(const int8_t* a, const int8_t* b, int32_t* d) {
  __shared__ __align__(1024) uint8_t sa[64 * 128];
  __shared__ __align__(1024) uint8_t sb[128 * 128];
  const int t = threadIdx.x;
  for (int i = t; i < 64 * 128; i += 128)
    sa[wg::swizzled_offset(i / 128, i % 128)] = static_cast<uint8_t>(a[i]);
  for (int i = t; i < 128 * 128; i += 128)
    sb[wg::swizzled_offset(i / 128, i % 128)] = static_cast<uint8_t>(b[i]);
  wg::fence_shared_for_async();
  __syncthreads();
  int32_t acc[64];
  wg::fence();
  for (int step = 0; step < kSteps; ++step)
    wg::mma_s8_m64n128k32(acc, wg::descriptor(wg::shared_address(sa) + 32 * step),
                          wg::descriptor(wg::shared_address(sb) + 32 * step), step > 0);
  wg::commit();
  wg::wait<0>();
  wg::fence_operands(acc);
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
  for (int j = 0; j < 16; ++j)
    for (int i = 0; i < 4; ++i)
      d[(16 * w + g + (i >= 2 ? 8 : 0)) * 128 + 8 * j + 2 * q + (i & 1)] = acc[4 * j + i];
}

// Random folded operands (2 * E2M1 * 2^d: {0, 1, 2, 3, 4, 6, 8, 12} * 2^d, either sign; seed 0:
// all +-96, the largest sums) through wgmma_s8_n128_kernel, compared exactly.
bool check_s8_n128(uint32_t seed) {
  std::vector<int8_t> a(64 * 128), b(128 * 128);
  uint32_t x = seed;
  auto next = [&] {
    if (seed == 0) return static_cast<int8_t>(96);
    x = x * 1664525u + 1013904223u;
    static const int kMagnitudes[8] = {0, 1, 2, 3, 4, 6, 8, 12};
    const int v = kMagnitudes[(x >> 16) % 8] << ((x >> 20) % 4);
    return static_cast<int8_t>((x >> 24) % 2 ? -v : v);
  };
  for (auto& v : a) v = next();
  for (auto& v : b) v = next();
  int8_t *ga = nullptr, *gb = nullptr;
  int32_t* gd = nullptr;
  std::vector<int32_t> d(64 * 128);
  bool ok = cudaMalloc(&ga, a.size()) == cudaSuccess && cudaMalloc(&gb, b.size()) == cudaSuccess &&
            cudaMalloc(&gd, d.size() * 4) == cudaSuccess &&
            cudaMemcpy(ga, a.data(), a.size(), cudaMemcpyHostToDevice) == cudaSuccess &&
            cudaMemcpy(gb, b.data(), b.size(), cudaMemcpyHostToDevice) == cudaSuccess;
  if (ok) {
    wgmma_s8_n128_kernel<<<1, 128>>>(ga, gb, gd);
    ok = cudaDeviceSynchronize() == cudaSuccess &&
         cudaMemcpy(d.data(), gd, d.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
  }
  if (!ok) std::printf("CUDA error: %s\n", cudaGetErrorString(cudaGetLastError()));
  cudaFree(ga), cudaFree(gb), cudaFree(gd);
  if (!ok) return false;
  int bad = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 128; ++n) {
      int64_t ref = 0;
      for (int k = 0; k < 128; ++k) ref += int64_t{a[m * 128 + k]} * b[n * 128 + k];
      bad += d[m * 128 + n] != ref;
    }
  std::printf("layout %-14s %s (%d of %d entries wrong; seed %u)\n", "s8 m64n128k32",
              bad ? "FAIL" : "ok", bad, 64 * 128, seed);
  return bad == 0;
}

uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);  // exact for the values used here
}

// e4m3 of small integers and powers of two (exact): sign, 4 exponent bits (bias 7), 3 mantissa.
uint8_t e4m3_bits(double v) {
  if (v == 0) return 0;
  const uint8_t sign = v < 0 ? 0x80 : 0;
  int e;
  const double m = std::frexp(std::fabs(v), &e);  // v = m 2^e, m in [0.5, 1)
  int biased = e - 1 + 7;
  if (biased <= 0) return sign | static_cast<uint8_t>(std::ldexp(std::fabs(v), 9));  // subnormal
  return sign | static_cast<uint8_t>(biased << 3) | static_cast<uint8_t>((m * 2 - 1) * 8);
}

struct Operands {
  std::vector<uint8_t> a = std::vector<uint8_t>(kRowsA * 128),
                       b = std::vector<uint8_t>(kRowsB * 128);
  std::vector<double> av = std::vector<double>(kRowsA * 128),
                      bv = std::vector<double>(kRowsB * 128);
  int per_row = 0;  // values per 128-byte row
};

void set(Operands& o, Kind kind, bool is_a, int row, int k, double v) {
  std::vector<uint8_t>& bytes = is_a ? o.a : o.b;
  (is_a ? o.av : o.bv)[row * o.per_row + k] = v;
  if (kind == Kind::kBf16) {
    const uint16_t h = bf16_bits(static_cast<float>(v));
    std::memcpy(&bytes[row * 128 + 2 * k], &h, 2);
  } else {
    bytes[row * 128 + k] =
        kind == Kind::kE4m3 ? e4m3_bits(v) : static_cast<uint8_t>(static_cast<int8_t>(v));
  }
}

template <Kind kKind>
bool run(const Operands& o, std::vector<float>& d) {
  uint8_t *ga = nullptr, *gb = nullptr;
  float* gd = nullptr;
  bool ok = cudaMalloc(&ga, o.a.size()) == cudaSuccess &&
            cudaMalloc(&gb, o.b.size()) == cudaSuccess &&
            cudaMalloc(&gd, kRowsA * kRowsB * sizeof(float)) == cudaSuccess;
  ok = ok && cudaMemcpy(ga, o.a.data(), o.a.size(), cudaMemcpyHostToDevice) == cudaSuccess &&
       cudaMemcpy(gb, o.b.data(), o.b.size(), cudaMemcpyHostToDevice) == cudaSuccess;
  if (ok) {
    wgmma_kernel<kKind><<<1, 128>>>(ga, gb, gd);
    d.resize(kRowsA * kRowsB);
    ok = cudaDeviceSynchronize() == cudaSuccess &&
         cudaMemcpy(d.data(), gd, d.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess;
  }
  if (!ok) std::printf("CUDA error: %s\n", cudaGetErrorString(cudaGetLastError()));
  cudaFree(ga), cudaFree(gb), cudaFree(gd);
  return ok;
}

const char* name(Kind kind) {
  return kind == Kind::kBf16 ? "bf16 m64n8k16"
                             : (kind == Kind::kE4m3 ? "e4m3 m64n8k32" : "s8 m64n8k32");
}

// Random small integers, D compared exactly with the double reference.
template <Kind kKind>
bool check_layout(uint32_t seed) {
  Operands o;
  o.per_row = kKind == Kind::kBf16 ? 64 : 128;
  uint32_t x = seed;
  auto next = [&] {
    x = x * 1664525u + 1013904223u;
    return static_cast<int>((x >> 16) % 9) - 4;
  };
  for (int r = 0; r < kRowsA; ++r)
    for (int k = 0; k < o.per_row; ++k) set(o, kKind, true, r, k, next());
  for (int r = 0; r < kRowsB; ++r)
    for (int k = 0; k < o.per_row; ++k) set(o, kKind, false, r, k, next());
  std::vector<float> d;
  if (!run<kKind>(o, d)) return false;
  int bad = 0;
  for (int m = 0; m < kRowsA; ++m)
    for (int n = 0; n < kRowsB; ++n) {
      double ref = 0;
      for (int k = 0; k < o.per_row; ++k) ref += o.av[m * o.per_row + k] * o.bv[n * o.per_row + k];
      bad += d[m * kRowsB + n] != ref;
    }
  std::printf("layout %-14s %s (%d of %d entries wrong)\n", name(kKind), bad ? "FAIL" : "ok", bad,
              kRowsA * kRowsB);
  return bad == 0;
}

// Row 0 of A and B: one product 2^(2p) at k = 0 and `count` products 2^(2p - s), either right
// after it (the same wgmma) or at the last k of the chain (a later wgmma adding to the
// accumulator); the largest s for which D[0][0] - 2^(2p) is exact.
template <Kind kKind>
void probe_bits(int p, int count, bool same_instruction) {
  const int per_row = kKind == Kind::kBf16 ? 64 : 128;
  int kept = -1;
  for (int s = 1; s <= 30; ++s) {
    Operands o;
    o.per_row = per_row;
    set(o, kKind, true, 0, 0, std::ldexp(1.0, p));
    set(o, kKind, false, 0, 0, std::ldexp(1.0, p));
    // small = 2^(2p - s) as 2^a * 2^b, both representable: split the exponent.
    const int e = 2 * p - s, ea = e / 2, eb = e - ea;
    for (int i = 0; i < count; ++i) {
      const int k = same_instruction ? 1 + i : per_row - 1 - i;
      set(o, kKind, true, 0, k, std::ldexp(1.0, ea));
      set(o, kKind, false, 0, k, std::ldexp(1.0, eb));
    }
    std::vector<float> d;
    if (!run<kKind>(o, d)) return;
    const double want = std::ldexp(1.0, 2 * p) + count * std::ldexp(1.0, e);
    if (static_cast<double>(d[0]) == want) kept = s;
  }
  std::printf("accumulation %-14s big 2^%d, %d small products %s: exact down to 2^-%d below it\n",
              name(kKind), 2 * p, count,
              same_instruction ? "in the same wgmma" : "in a later wgmma of the chain", kept);
}

}  // namespace

int main() {
  int devices = 0;
  cudaDeviceProp prop{};
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0 ||
      cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9) {
    std::printf("no sm_90 GPU: skipped\n");
    return 77;
  }
  std::printf("device: %s\n", prop.name);
  bool ok = true;
  for (uint32_t seed : {1u, 2u, 3u}) {
    ok = check_layout<Kind::kBf16>(seed) && ok;
    ok = check_layout<Kind::kE4m3>(seed) && ok;
    ok = check_layout<Kind::kS8>(seed) && ok;
  }
  for (uint32_t seed : {0u, 1u, 2u}) ok = check_s8_n128(seed) && ok;
  if (ok) {
    for (bool same : {true, false}) {
      probe_bits<Kind::kE4m3>(6, 1, same);
      probe_bits<Kind::kE4m3>(6, 4, same);
      probe_bits<Kind::kBf16>(8, 1, same);
      probe_bits<Kind::kBf16>(8, 4, same);
    }
  }
  return ok ? 0 : 1;
}
