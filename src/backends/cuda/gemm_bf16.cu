// The bf16 tensor-core family for large M (first version: correct on the H200, about 120 TFLOP/s;
// no TMA, warp specialisation or persistent scheduling yet).
//
// A CTA computes a 128x128 tile of D with two warpgroups (64 rows each, wgmma m64n128k16). Per
// K step of 64 (two scale blocks) every thread converts one 32-element block of A and one of B
// from E2M1 to bf16 with the block's scale folded into the exponent, into a 128-byte swizzled
// shared-memory stage, while the wgmmas of the previous step run on the other stage.
//
// Exactness: E2M1 values have two significant bits, so v * 2^e is exact in bf16 for any exponent in
// its normal range, and the product of two such values is exact in fp32 when its exponent stays in
// fp32's normal range; wgmma sums products in fp32 (as the contract allows: exact in-block
// products, fp32 accumulation). Scales are folded relative to a per-CTA centre c (e = s - c), and
// the accumulator is scaled by 2^(cA + cB - 254) in double in the epilogue; a pre-pass over the
// tile's scales checks that every |e| <= kMaxHalfSpread keeps products and sums inside fp32
// (|e_a + e_b| <= 80: products >= 2^-82, sums of 2^20 products < 2^107). A tile whose scales spread
// wider runs the generic kernel's exact tile code instead (generic_tile.cuh). NaN scales (0xFF)
// become bf16 NaN values, which propagate through the sums as the contract asks.
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_utils.h"
#include "backends/cuda/device_common.cuh"
#include "backends/cuda/generic_tile.cuh"
#include "backends/cuda/wgmma.cuh"

namespace a4w4::cuda {
namespace {

constexpr int kTileM = 128, kTileN = 128, kStepK = 64;
constexpr int kThreads = 256;  // two warpgroups
constexpr int kStageBytes = (kTileM + kTileN) * 128;  // A then B, 128 bytes (64 bf16) per row
[[maybe_unused]] constexpr int kMaxHalfSpread = 40;
constexpr size_t kSharedBytes = 2 * kStageBytes;  // also holds two generic::TileSmem

// bf16 bit patterns of the E2M1 magnitudes 0.5, 1, ..., 6 at block exponent e (relative to the
// CTA's centre): exponent field 127 + e + {-1, 0, 0, 1, 1, 2, 2}, mantissa top bit for 1.5, 3, 6.
// Returned as PRMT tables: the low and high bytes of the 8 entries (entry 0 is +0).
struct Bf16Table {
  uint32_t lo[2], hi[2];
};
[[maybe_unused]] __device__ __forceinline__ Bf16Table bf16_table(int e, bool nan) {
  // Per byte m of the two words: 127 + e + de[m] (de for m = 0..7: 0 (unused), -1, 0, 0, 1, 1, 2, 2).
  constexpr uint32_t kDe0 = 0x7F7F7E7Fu, kDe1 = 0x81818080u;  // 127 + de, bytes m = 0..3, 4..7
  constexpr uint32_t kMant0 = 0x40000000u, kMant1 = 0x40004000u;  // bit 6 of the low byte
  Bf16Table t;
  const uint32_t shift = static_cast<uint32_t>(e) * 0x01010101u;  // |e| small: no byte overflow
  const uint32_t x[2] = {kDe0 + shift, kDe1 + shift};
  const uint32_t mant[2] = {kMant0, kMant1};
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    t.hi[w] = (x[w] >> 1) & 0x7F7F7F7Fu;
    t.lo[w] = ((x[w] << 7) & 0x80808080u) | mant[w];
  }
  t.lo[0] &= 0xFFFFFF00u, t.hi[0] &= 0xFFFFFF00u;  // code 0 is +0
  if (nan) t.lo[0] = t.lo[1] = 0xC0C0C0C0u, t.hi[0] = t.hi[1] = 0x7F7F7F7Fu;  // every value NaN
  return t;
}

[[maybe_unused]] __device__ __forceinline__ uint32_t permute(uint32_t lo, uint32_t hi, uint32_t selector) {
  uint32_t out;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(out) : "r"(lo), "r"(hi), "r"(selector));
  return out;
}

// Four E2M1 codes (low 16 bits) -> four bf16 (two words: elements 0, 1 and 2, 3).
[[maybe_unused]] __device__ __forceinline__ uint2 to_bf16x4(uint32_t codes, const Bf16Table& t) {
  const uint32_t index = codes & 0x7777u;
  const uint32_t lo = permute(t.lo[0], t.lo[1], index);
  const uint32_t hi_pos = permute(t.hi[0], t.hi[1], index);
  const uint32_t hi = permute(hi_pos, hi_pos | 0x80808080u, 0x3210u | ((codes >> 1) & 0x4444u));
  return make_uint2(permute(lo, hi, 0x5140u), permute(lo, hi, 0x7362u));
}

// One 32-element block of one row: its 16 packed bytes and scale byte, as loaded.
struct BlockLoad {
  uint4 codes;
  uint32_t scale;
};

[[maybe_unused]] __device__ __forceinline__ BlockLoad load_block(const PackedOperand& op, int64_t row, int64_t rows,
                                                int64_t block) {
  if (row >= rows) return {make_uint4(0, 0, 0, 0), 127u};
  return {__ldg(reinterpret_cast<const uint4*>(op.data + row * op.stride_bytes + block * 16)),
          __ldg(op.scale + row * op.scale_stride + block)};
}

// Writes one block as 32 bf16 (64 bytes) into row `row`, bytes [64 half, 64 half + 64) of a
// swizzled stage.
[[maybe_unused]] __device__ __forceinline__ void store_block(const BlockLoad& b, int centre, uint8_t* stage, int row,
                                            int half) {
  const bool nan = b.scale == 0xFFu;
  const Bf16Table t = bf16_table(nan ? 0 : static_cast<int>(b.scale) - centre, nan);
  const uint32_t words[4] = {b.codes.x, b.codes.y, b.codes.z, b.codes.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {  // 8 elements = 16 bytes of bf16 per word
    const uint2 first = to_bf16x4(words[q], t), second = to_bf16x4(words[q] >> 16, t);
    *reinterpret_cast<uint4*>(stage + wgmma::swizzled_offset(row, 64 * half + 16 * q)) =
        make_uint4(first.x, first.y, second.x, second.y);
  }
}

// min and max scale byte (NaN excluded) of rows [row0, row0 + count) over all blocks, by the
// CTA; the result is in every thread.
[[maybe_unused]] __device__ void scale_range(const PackedOperand& op, int64_t row0, int64_t rows, int64_t blocks,
                            uint32_t& lo, uint32_t& hi, uint32_t* shared) {
  lo = 0xFFu, hi = 0u;
  for (int64_t i = threadIdx.x; i < int64_t{kTileM} * blocks; i += kThreads) {
    const int64_t row = row0 + i / blocks;
    if (row >= rows) continue;
    const uint32_t s = op.scale[row * op.scale_stride + i % blocks];
    if (s != 0xFFu) lo = min(lo, s), hi = max(hi, s);
  }
  lo = __reduce_min_sync(0xFFFFFFFFu, lo);
  hi = __reduce_max_sync(0xFFFFFFFFu, hi);
  if (threadIdx.x == 0) shared[0] = 0xFFu, shared[1] = 0u;
  __syncthreads();
  if (threadIdx.x % 32 == 0) atomicMin(&shared[0], lo), atomicMax(&shared[1], hi);
  __syncthreads();
  lo = shared[0], hi = shared[1];
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) gemm_bf16_kernel(GemmProblem p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(1024) uint8_t smem[];
  uint32_t* reduce = reinterpret_cast<uint32_t*>(smem + kSharedBytes);  // no static shared memory:
                                                                        // stages stay 1024-aligned
  const int64_t m0 = int64_t{blockIdx.y} * kTileM, n0 = int64_t{blockIdx.x} * kTileN;
  const int64_t blocks = p.k / 32, steps = p.k / kStepK;
  const int warpgroup = threadIdx.x / 128;

  // Pre-pass: can this tile fold its scales into bf16 exactly?
  uint32_t a_lo, a_hi, b_lo, b_hi;
  scale_range(p.a, m0, p.m, blocks, a_lo, a_hi, reduce);
  scale_range(p.b, n0, p.n, blocks, b_lo, b_hi, reduce);
  const bool any_a = a_lo <= a_hi, any_b = b_lo <= b_hi;
  const int centre_a = any_a ? static_cast<int>(a_lo + a_hi) / 2 : 127;
  const int centre_b = any_b ? static_cast<int>(b_lo + b_hi) / 2 : 127;
  const bool foldable = (!any_a || a_hi - a_lo <= 2 * kMaxHalfSpread) &&
                        (!any_b || b_hi - b_lo <= 2 * kMaxHalfSpread);
  if (!foldable) {
    // The exact generic tile code, each warpgroup two of the four 64x64 quarters.
    auto* tiles = reinterpret_cast<generic::TileSmem*>(smem);
    for (int quarter = 0; quarter < 2; ++quarter) {
      const int64_t qm = m0 + 64 * warpgroup, qn = n0 + 64 * quarter;
      if (warpgroup == 0) {
        generic::tile<1>(p, qm, qn, threadIdx.x % 128, tiles[0]);
      } else {
        generic::tile<2>(p, qm, qn, threadIdx.x % 128, tiles[1]);
      }
    }
    return;
  }

  // Thread t converts block (t % 2) of A row t / 2 and of B row t / 2, per K step.
  const int row = threadIdx.x / 2, half = threadIdx.x % 2;
  auto load = [&](int64_t step, BlockLoad& a, BlockLoad& b) {
    a = load_block(p.a, m0 + row, p.m, 2 * step + half);
    b = load_block(p.b, n0 + row, p.n, 2 * step + half);
  };
  auto convert = [&](const BlockLoad& a, const BlockLoad& b, uint8_t* stage) {
    store_block(a, centre_a, stage, row, half);
    store_block(b, centre_b, stage + kTileM * 128, row, half);
  };

  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;

  BlockLoad a, b;
  load(0, a, b);
  convert(a, b, smem);
  wgmma::fence_shared_for_async();
  __syncthreads();
  for (int64_t step = 0; step < steps; ++step) {
    uint8_t* stage = smem + (step & 1) * kStageBytes;
    if (step + 1 < steps) load(step + 1, a, b);
    wgmma::fence();
    const uint32_t a_base = wgmma::shared_address(stage) + warpgroup * 64 * 128;
    const uint32_t b_base = wgmma::shared_address(stage) + kTileM * 128;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma::mma_bf16_m64n128k16(acc, wgmma::descriptor(a_base + 32 * kk),
                                 wgmma::descriptor(b_base + 32 * kk), step > 0 || kk > 0);
    wgmma::commit();
    if (step + 1 < steps) convert(a, b, smem + ((step + 1) & 1) * kStageBytes);
    wgmma::wait<0>();
    wgmma::fence_shared_for_async();
    __syncthreads();
  }

  // D = acc * 2^(cA + cB - 254), then alpha, beta C, bias and one rounding.
  const double factor = ldexp(1.0, centre_a + centre_b - 254);
  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t m = m0 + 64 * warpgroup + 16 * warp + g + (i >= 2 ? 8 : 0);
      const int64_t n = n0 + 8 * j + 2 * q + (i & 1);
      if (m < p.m && n < p.n) store_output(p, m, n, static_cast<double>(acc[4 * j + i]) * factor);
    }
#else
  (void)p;
  __trap();
#endif
}

}  // namespace

std::string gemm_bf16_why_not(const GemmProblem& p) {
  if (p.device.type != A4W4_DEVICE_CUDA) return "operands are not on a CUDA device";
  if (device_info(p.device.ordinal).major != 9) return "needs an sm_90 GPU (wgmma)";
  if (p.k % kStepK != 0) return "K must be a multiple of 64";
  if (p.a.layout != A4W4_LAYOUT_PLAIN || p.b.layout != A4W4_LAYOUT_PLAIN)
    return "plain A and B only (the prepared layout is the decode family's)";
  if (p.split_k > 1) return "no split-K";
  const auto aligned = [](const PackedOperand& op) {
    return reinterpret_cast<uintptr_t>(op.data) % 16 == 0 && op.stride_bytes % 16 == 0;
  };
  if (!aligned(p.a) || !aligned(p.b)) return "A and B rows must start on 16 bytes";
  return {};
}

void gemm_bf16(const GemmProblem& p, const ExecConfig&) {
  DeviceGuard guard(p.device.ordinal);
  static_assert(kSharedBytes >= 2 * sizeof(generic::TileSmem));
  constexpr size_t kBytes = kSharedBytes + 16;  // the stages, then the pre-pass's reduction
  check_cuda(cudaFuncSetAttribute(gemm_bf16_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kBytes)),
             "cudaFuncSetAttribute(gemm_bf16_kernel)");
  const dim3 grid(static_cast<unsigned>((p.n + kTileN - 1) / kTileN),
                  static_cast<unsigned>((p.m + kTileM - 1) / kTileM));
  gemm_bf16_kernel<<<grid, kThreads, kBytes, static_cast<cudaStream_t>(p.stream)>>>(p);
  check_launch("gemm_bf16_kernel");
}

}  // namespace a4w4::cuda
