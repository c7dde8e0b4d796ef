// What the consumer side of cuda.skinny's two-token-tile kernel (gemm_skinny.cu,
// gemm_skinny_shared_kernel with fast accumulation) can do per K tile on this GPU, apart from the
// kernel: e4m3 wgmma with both operands in shared memory, the weights (64 rows x 128 K: the A
// operand) shared by every consumer warpgroup, each consumer its own activation rows (N rows x
// 128 K: the B operand), a ring of 4 stages that is never refilled (no producer, no barriers).
// Modes, per consumer warpgroup and K tile:
//   stream   4 wgmmas into one set of sums, wait<1>: the tensor pipe's rate for this layout.
//   chain    the kernel's chain: 4 wgmmas, wait<0>, one FFMA per sum into fp32 accumulators.
//   overlap  two sets of sums: tile i + 1's wgmmas issued before tile i's FFMAs (unrolled rounds
//            of 4 tiles, drained at each round's end: no group in flight across the back edge).
// Traffic beside the MMAs (the idle producer warpgroup), as the kernel's converters and bulk
// copies make it: none; 40 KB of st.shared.v4 per 640 cycles (paced by clock64); a 32 KB bulk
// copy from an L2-resident global buffer plus 8 KB of st.shared.v4 per 640 cycles (the rounds
// that came are counted: the bulk copy's wait and the stores' issue can hold them back).
// "registers": the activations as the register operand instead (registers_kernel).
// One CTA per SM, 4096 K tiles each; printed: us per 64 tiles (a 256 x 8192 x 8192 call's CTA
// has 64) and TFLOP/s. Usage: a4w4_skinny_consumer_rate (exit 77 without an sm_90 GPU).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>

#include "backends/cuda/pipeline.cuh"
#include "backends/cuda/wgmma.cuh"

namespace {

namespace wg = a4w4::cuda::wgmma;
namespace pl = a4w4::cuda::pipeline;

enum Mode { kStream, kChain, kOverlap };
enum Traffic { kNone, kStores, kBulk };

constexpr int kStages = 4;
[[maybe_unused]] constexpr int kRoundTiles = 4;  // kOverlap's unrolled round
[[maybe_unused]] constexpr int kPeriod = 640;  // cycles per traffic round (the chain's ~tile time)
constexpr int kNoiseBytes = 40 * 1024;

template <int kConsumers, int kN>
constexpr int kStageBytes = 64 * 128 + kConsumers* kN * 128;

// One K tile's 4 wgmmas (32 K each) into s, committed as one group; `fresh`: the first one starts
// the sums from zero (the kernel's form), else every one accumulates (stream: one chain, so that
// no group overwrites sums another one still writes).
template <int kN>
__device__ __forceinline__ void issue(float (&s)[kN / 2], uint64_t a, uint64_t b,
                                      bool fresh = true) {
  wg::fence();
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if constexpr (kN == 128)
      wg::mma_e4m3_m64n128k32(s, a + 2 * q, b + 2 * q, q > 0 || !fresh);
    else
      wg::mma_e4m3_m64n64k32(s, a + 2 * q, b + 2 * q, q > 0 || !fresh);
  }
  wg::commit();
}

template <int kN>
__device__ __forceinline__ void promote(float (&acc)[kN / 2], float (&s)[kN / 2],
                                        const float (&factors)[kN / 8]) {
  wg::fence_operands(s);
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc[i] = fmaf(s[i], factors[i / 4], acc[i]);
}

// The idle warpgroup's shared-memory traffic until the first consumer is done.
template <Traffic kTraffic>
__device__ void make_traffic(uint8_t* noise, const uint8_t* global_src, int tiles,
                             const volatile int* done, unsigned long long* rounds) {
  uint64_t* bar = reinterpret_cast<uint64_t*>(noise + kNoiseBytes);
  volatile int* stop = reinterpret_cast<volatile int*>(bar + 1);
  if (threadIdx.x == 0) {
    pl::init(bar, 1);
    pl::fence_init();
  }
  pl::named_sync(1, 128);
  const long long start = clock64();
  uint4 v = make_uint4(threadIdx.x, 1, 2, 3);
  for (int it = 0; it < 2 * tiles; ++it) {
    // Every thread stops at the same round (the bulk copy's barrier needs thread 0's arrivals).
    if (threadIdx.x == 0) *stop = *done;
    pl::named_sync(1, 128);
    const bool quit = *stop != 0;
    pl::named_sync(1, 128);
    if (quit) break;
    if (threadIdx.x == 0) atomicAdd(rounds, 1ull);
    if constexpr (kTraffic == kBulk) {
      if (threadIdx.x == 0) {
        pl::arrive_expect_tx(bar, 32 * 1024);
        pl::bulk_load(noise, global_src, 32 * 1024, bar);
      }
    }
    constexpr int kStoreBytes = kTraffic == kBulk ? 8 * 1024 : kNoiseBytes;
    uint4* stores = reinterpret_cast<uint4*>(noise + kNoiseBytes - kStoreBytes);
#pragma unroll 4
    for (int r = 0; r < kStoreBytes / 2048; ++r) stores[r * 128 + threadIdx.x] = v;
    if constexpr (kTraffic == kBulk) pl::wait(bar, it & 1);
    while (clock64() < start + static_cast<long long>(kPeriod) * (it + 1)) {
    }
    ++v.x;
  }
}

// The CTA's common start: small e4m3 values in the operands' `operand_bytes` (the data do not
// change the rate); then the idle warpgroup (threads 0..127) gives registers back and makes the
// traffic beside the consumers. Returns whether this thread is a consumer.
template <Traffic kTraffic>
__device__ __forceinline__ bool start_roles(uint8_t* smem, int operand_bytes, int tiles,
                                            const uint8_t* global_src, const int* done,
                                            unsigned long long* rounds) {
  for (int i = threadIdx.x; i < operand_bytes / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(smem)[i] = (i * 2654435761u) & 0x3C3C3C3Cu;
  wg::fence_shared_for_async();
  __syncthreads();
  if (threadIdx.x >= 128) return true;
  pl::shrink_registers<24>();
  if constexpr (kTraffic != kNone)
    make_traffic<kTraffic>(smem + operand_bytes, global_src, tiles, done, rounds);
  return false;
}

// A consumer's end: its accumulators kept alive (a store no run takes), and the first consumer
// done stops the traffic.
template <int kAcc>
__device__ __forceinline__ void finish_consumer(const float (&acc)[kAcc], float* out, int* done) {
  float x = 0.0f;
#pragma unroll
  for (int i = 0; i < kAcc; ++i) x += acc[i];
  if (x == 1234.5f) out[0] = x;
  if (threadIdx.x == 128) *done = 1;
}

template <Mode kMode, int kConsumers, int kN, Traffic kTraffic>
__global__ void __launch_bounds__((1 + kConsumers) * 128, 1)
    rate_kernel(float* out, int tiles, const uint4* /*records*/, const uint8_t* global_src,
                int* done, unsigned long long* rounds) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) uint8_t smem[];
  constexpr int kStage = kStageBytes<kConsumers, kN>;
  const int role = static_cast<int>(threadIdx.x) / 128;
  if (!start_roles<kTraffic>(smem, kStages * kStage, tiles, global_src, done, rounds)) return;
  // 2 x n128: 64 sums, 64 accumulators (x2 sums for kOverlap); 4 x n64: half of each.
  pl::grow_registers<kConsumers == 2 ? 232 : 112>();
  const int c = role - 1;
  float acc[kN / 2], s0[kN / 2], s1[kN / 2], factors[kN / 8];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc[i] = s0[i] = s1[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < kN / 8; ++i) factors[i] = 1.0f / static_cast<float>(i + 1 + threadIdx.x % 7);
  const auto a_desc = [&](int tile) {
    return wg::descriptor(wg::shared_address(smem + (tile % kStages) * kStage));
  };
  const auto b_desc = [&](int tile) {
    return wg::descriptor(
        wg::shared_address(smem + (tile % kStages) * kStage + 64 * 128 + c * kN * 128));
  };
  if constexpr (kMode == kStream) {
    for (int tile = 0; tile < tiles; ++tile) {
      issue<kN>(s0, a_desc(tile), b_desc(tile), false);
      wg::wait<1>();
    }
    wg::wait<0>();
    wg::fence_operands(s0);
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) acc[i] = s0[i];
  } else if constexpr (kMode == kChain) {
    for (int tile = 0; tile < tiles; ++tile) {
      issue<kN>(s0, a_desc(tile), b_desc(tile));
      wg::wait<0>();
      promote<kN>(acc, s0, factors);
    }
  } else {
    for (int first = 0; first < tiles; first += kRoundTiles) {
      issue<kN>(s0, a_desc(first), b_desc(first));
#pragma unroll
      for (int i = 0; i < kRoundTiles; i += 2) {
        issue<kN>(s1, a_desc(first + i + 1), b_desc(first + i + 1));
        wg::wait<1>();
        promote<kN>(acc, s0, factors);
        if (i + 2 < kRoundTiles) {
          issue<kN>(s0, a_desc(first + i + 2), b_desc(first + i + 2));
          wg::wait<1>();
        } else {
          wg::wait<0>();
        }
        promote<kN>(acc, s1, factors);
      }
    }
  }
  finish_consumer(acc, out, done);
#else
  (void)out, (void)tiles, (void)global_src, (void)done, (void)rounds;
#endif
}

// A design in view: the activations as the wgmma's register operand. Four consumer warpgroups,
// each 64 activation rows (the M side) by the 64 weight rows (N, in shared memory as above), their
// fragments loaded from global memory (L2) straight into registers a tile ahead: no bulk copies
// into shared memory and no wgmma reads of the activations from it (about 64 of the kernel's
// ~100 KB of shared-memory traffic per K tile).
constexpr int kRecordTiles = 64;  // K tiles in the global buffer (2 MB: L2-resident), reused
constexpr int kRecordWords = kRecordTiles * 4 * 4 * 128;  // [tile][warpgroup][k32 step][thread]

template <Traffic kTraffic>
__global__ void __launch_bounds__(5 * 128, 1)
    registers_kernel(float* out, int tiles, const uint4* records, const uint8_t* global_src,
                     int* done, unsigned long long* rounds) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) uint8_t smem[];
  constexpr int kWeightBytes = 64 * 128;
  const int role = static_cast<int>(threadIdx.x) / 128,
            thread = static_cast<int>(threadIdx.x) % 128;
  if (!start_roles<kTraffic>(smem, kStages * kWeightBytes, tiles, global_src, done, rounds)) return;
  pl::grow_registers<112>();  // 640 threads: 96 each at launch; 24 + 4 x 112 fit
  const int c = role - 1;
  float acc[32], s[32], factors[8];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = s[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) factors[i] = 1.0f / static_cast<float>(i + 1 + threadIdx.x % 7);
  // This thread's 16 bytes of each k32 step of a tile: 4 x 16-byte loads, each warp's contiguous.
  const auto load = [&](int tile, uint32_t(&a)[16]) {
    const uint4* tile_records = records + ((tile % kRecordTiles) * 4 + c) * 4 * 128 + thread;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint4 v = __ldg(tile_records + q * 128);
      a[4 * q] = v.x, a[4 * q + 1] = v.y, a[4 * q + 2] = v.z, a[4 * q + 3] = v.w;
    }
  };
  const auto step = [&](int tile, const uint32_t(&a)[16]) {
    const uint64_t b = wg::descriptor(wg::shared_address(smem + (tile % kStages) * kWeightBytes));
    wg::fence();
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint32_t fragment[4] = {a[4 * q], a[4 * q + 1], a[4 * q + 2], a[4 * q + 3]};
      wg::mma_e4m3_m64n64k32_rs(s, fragment, b + 2 * q, q > 0);
    }
    wg::commit();
    wg::wait<0>();
    promote<64>(acc, s, factors);
  };
  uint32_t a0[16], a1[16];
  load(0, a0);
  for (int tile = 0; tile < tiles; tile += 2) {  // tiles is even
    load(tile + 1, a1);
    step(tile, a0);
    if (tile + 2 < tiles) load(tile + 2, a0);
    step(tile + 1, a1);
  }
  finish_consumer(acc, out, done);
#else
  (void)out, (void)tiles, (void)records, (void)global_src, (void)done, (void)rounds;
#endif
}

const char* mode_name(Mode m) {
  return m == kStream ? "stream" : m == kChain ? "chain" : "overlap";
}
const char* traffic_name(Traffic t) {
  return t == kNone ? "none" : t == kStores ? "40 KB st.shared" : "32 KB bulk + 8 KB st.shared";
}

using Kernel = void (*)(float*, int, const uint4*, const uint8_t*, int*, unsigned long long*);

// Best of 7 timed runs of `kernel` (one CTA per SM) after one warm-up, and a table row.
bool measure(Kernel kernel, int threads, int bytes, int sms, int tiles, const char* mode,
             const char* consumers, Traffic traffic, const uint4* records) {
  float* out = nullptr;
  uint8_t* src = nullptr;
  int* done = nullptr;
  unsigned long long* rounds = nullptr;
  bool ok = cudaMalloc(&out, 4) == cudaSuccess && cudaMalloc(&src, 32 * 1024) == cudaSuccess &&
            cudaMalloc(&done, 4) == cudaSuccess && cudaMalloc(&rounds, 8) == cudaSuccess &&
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) ==
                cudaSuccess;
  cudaEvent_t begin, end;
  ok = ok && cudaEventCreate(&begin) == cudaSuccess && cudaEventCreate(&end) == cudaSuccess;
  float best = 1e30f;
  unsigned long long best_rounds = 0;
  for (int r = 0; ok && r < 8; ++r) {  // the first run warms up
    cudaMemset(done, 0, 4);
    cudaMemset(rounds, 0, 8);
    cudaEventRecord(begin);
    kernel<<<sms, threads, bytes>>>(out, r == 0 ? 64 : tiles, records, src, done, rounds);
    cudaEventRecord(end);
    ok = cudaEventSynchronize(end) == cudaSuccess && cudaGetLastError() == cudaSuccess;
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, begin, end);
    unsigned long long n = 0;
    cudaMemcpy(&n, rounds, 8, cudaMemcpyDeviceToHost);
    if (r > 0 && ms < best) best = ms, best_rounds = n;
  }
  if (ok) {
    // The same work in every form: 64 weight rows x 256 activation rows x 128 K per tile.
    const double flops = 2.0 * sms * tiles * 64.0 * 256 * 128;
    // The traffic's rounds as they came (the bulk copies' waits and the stores' issue limit them).
    const double kb_per_tile = static_cast<double>(best_rounds) / sms / tiles * kNoiseBytes / 1024;
    std::printf("| %-9s | %-9s | %-27s | %4.1f | %6.2f | %5.0f |\n", mode, consumers,
                traffic_name(traffic), kb_per_tile, best * 1e3 / tiles * 64, flops / best / 1e9);
  } else {
    std::printf("%s, %s: %s\n", mode, consumers, cudaGetErrorString(cudaGetLastError()));
  }
  cudaFree(out);
  cudaFree(src);
  cudaFree(done);
  cudaFree(rounds);
  return ok;
}

template <Mode kMode, int kConsumers, int kN, Traffic kTraffic = kNone>
bool run(int sms, int tiles) {
  char consumers[16];
  std::snprintf(consumers, sizeof consumers, "%d x n%d", kConsumers, kN);
  return measure(rate_kernel<kMode, kConsumers, kN, kTraffic>, (1 + kConsumers) * 128,
                 kStages * kStageBytes<kConsumers, kN> + kNoiseBytes + 1024, sms, tiles,
                 mode_name(kMode), consumers, kTraffic, nullptr);
}

template <Traffic kTraffic = kNone>
bool run_registers(int sms, int tiles, const uint4* records) {
  return measure(registers_kernel<kTraffic>, 5 * 128, kStages * 64 * 128 + kNoiseBytes + 1024, sms,
                 tiles, "registers", "4 x m64n64", kTraffic, records);
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9) {
    std::printf("needs an sm_90 GPU\n");
    return 77;
  }
  std::printf("%s, %d SMs; best of 7 runs, 4096 K tiles per CTA\n\n", prop.name,
              prop.multiProcessorCount);
  std::printf(
      "| mode | consumers | traffic beside (per round) | KB per K tile | us / 64 tiles | TFLOP/s "
      "|\n|---|---|---|---|---|---|\n");
  const int sms = prop.multiProcessorCount, tiles = 4096;
  bool ok = true;
  ok &= run<kStream, 2, 128>(sms, tiles);
  ok &= run<kChain, 2, 128>(sms, tiles);
  ok &= run<kOverlap, 2, 128>(sms, tiles);
  ok &= run<kChain, 4, 64>(sms, tiles);
  ok &= run<kStream, 2, 128, kStores>(sms, tiles);
  ok &= run<kChain, 2, 128, kStores>(sms, tiles);
  ok &= run<kStream, 2, 128, kBulk>(sms, tiles);
  ok &= run<kChain, 2, 128, kBulk>(sms, tiles);
  uint4* records = nullptr;
  ok = ok && cudaMalloc(&records, kRecordWords * sizeof(uint4)) == cudaSuccess &&
       cudaMemset(records, 0x38, kRecordWords * sizeof(uint4)) == cudaSuccess;
  ok = ok && run_registers(sms, tiles, records);
  ok = ok && run_registers<kStores>(sms, tiles, records);
  cudaFree(records);
  return ok ? 0 : 1;
}
