// What cuda.skinny's weight stream alone can read on this GPU, apart from the kernel: the same grid
// (column tiles of 64 weight rows x K partitions, 4 warps per CTA, CTAs per SM set by shared
// memory), each warp streaming its 16-row group of a prepared (version 2) B in 1 KB K tiles plus
// their 64 scale bytes, with the kernel's loads (two 16-byte codes and one 8-byte scale load per
// lane and tile) issued `ahead` tiles before their use into registers. Beside the stream, per tile:
// a CTA barrier (the kernel's ring slot handover) or none, and `work` dependent integer
// instructions per lane (four chains of IMAD + SHF on the loaded words, a stand-in for the
// conversion, fold and promotion a tile costs), so that the rows say how much of a tile's
// instructions and latency the stream absorbs at a given occupancy. Order: group-major (each
// group's tiles consecutive, today's layout) or CTA-adjacent (a CTA's 4 groups' tiles side by
// side, 4 KB per CTA and tile), rotated (group-major, each CTA starting at its own tile) or
// tile-major (K tile t of all groups side by side, then t + 1: the GPU's simultaneous loads one
// contiguous region). Floors in the same program: a contiguous read and a copy of the
// same bytes (fill.h's read_with_kernel / copy_with_kernel). Times: gpu_bench.h's time_enqueued
// (median of replays of a graph of back-to-back launches, after 100 ms of warm-up), rotating
// through operand sets larger than 3 L2s. (Session 36's figures in bench/RESULTS.md were taken by
// 726c1ef's version, which timed each launch between two events instead.)
// Usage: a4w4_skinny_load_pattern [N K SPLITS] (default 28672 8192 2, cuda.skinny's choice at
// 16 x 28672 x 8192); exit 77 without an sm_90 GPU. Results: bench/RESULTS.md (session 36).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "fill.h"
#include "gpu_bench.h"

namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kTileBytes = 1024, kTileScaleBytes = 64;  // one 16-row group, 128 K
constexpr int kSamples = 15, kWarmupMs = 100;

enum class Order { kGroupMajor, kCtaAdjacent, kRotated, kTileMajor };

struct Operands {
  const uint8_t* codes;
  const uint8_t* scales;
};

template <int kAhead, bool kBarrier, int kWork, Order kOrder>
__global__ void __launch_bounds__(kThreads)
    stream_kernel(Operands b, int k_tiles, int splits, uint32_t* sink) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int tiles = k_tiles / splits, first = static_cast<int>(blockIdx.y) * tiles;
  const int64_t group = int64_t{blockIdx.x} * kWarps + warp;
  // kRotated: group-major, each CTA starting its partition's tiles at its own offset (5 tiles per
  // column tile, wrapping), so that the CTAs' simultaneous loads do not all lie a multiple of the
  // group stride apart.
  const int rotation = kOrder == Order::kRotated ? static_cast<int>(blockIdx.x * 5u % tiles) : 0;
  const auto tile_index = [&](int tile) {
    if constexpr (kOrder == Order::kCtaAdjacent)
      return (int64_t{blockIdx.x} * k_tiles + tile) * kWarps + warp;
    if constexpr (kOrder == Order::kTileMajor)  // K tile t of every group, then t + 1
      return int64_t{tile} * gridDim.x * kWarps + group;
    const int rotated = tile - first + rotation;
    return group * k_tiles + first + (rotated < tiles ? rotated : rotated - tiles);
  };
  struct Raw {
    uint4 g, h;
    uint2 scales;
  };
  const auto load = [&](int tile) {
    const int64_t index = tile_index(first + tile);
    const uint8_t* codes = b.codes + index * kTileBytes + 16 * lane;
    Raw r;
    r.g = __ldg(reinterpret_cast<const uint4*>(codes));
    r.h = __ldg(reinterpret_cast<const uint4*>(codes + kTileBytes / 2));
    r.scales =
        __ldg(reinterpret_cast<const uint2*>(b.scales + index * kTileScaleBytes + 8 * (lane / 4)));
    return r;
  };
  Raw ring[kAhead];
#pragma unroll
  for (int a = 0; a < kAhead; ++a) ring[a] = load(a < tiles ? a : 0);
  uint32_t sum = 0;
  for (int base = 0; base < tiles; base += kAhead) {
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
      const int tile = base + a;
      if (tile >= tiles) break;
      const Raw r = ring[a];
      if (tile + kAhead < tiles) ring[a] = load(tile + kAhead);
      uint32_t chain[4] = {r.g.x ^ r.scales.x, r.g.y ^ r.h.x, r.g.z ^ r.h.y ^ r.scales.y,
                           r.g.w ^ r.h.z ^ r.h.w};
#pragma unroll
      for (int i = 0; i < kWork / 8; ++i) {
#pragma unroll
        for (int c = 0; c < 4; ++c) chain[c] = chain[c] * 0x01010101u + (chain[c] >> 3);
      }
      sum += chain[0] ^ chain[1] ^ chain[2] ^ chain[3];
      if constexpr (kBarrier) __syncthreads();
    }
  }
  if (sum == 0x9e3779b9u) sink[threadIdx.x] = sum;  // keeps the loads; never true for the fill
}

struct Setup {
  int n, k, splits, sm_count, sets;
  size_t code_bytes, scale_bytes;
  std::vector<Operands> operands;
  uint32_t* sink;
  cudaStream_t stream;
  [[nodiscard]] double bytes() const { return static_cast<double>(code_bytes + scale_bytes); }
};

// Microseconds per launch(stream, set), rotating through the operand sets (time_enqueued).
template <typename Launch>
float median_us(const Setup& s, Launch launch) {
  return static_cast<float>(a4w4::bench::time_enqueued(
      [&](void* stream, int i) { launch(static_cast<cudaStream_t>(stream), i % s.sets); }, s.stream,
      kSamples, 2000.0, kWarmupMs));
}

void print_row(const char* name, int per_sm, float us, double bytes, float read_us) {
  std::printf("| %-34s | %7s | %6.1f | %5.0f | %4.0f%% |\n", name,
              per_sm ? std::to_string(per_sm).c_str() : "-", us, bytes / us / 1e3,
              100.0 * read_us / us);
}

template <int kAhead, bool kBarrier, int kWork, Order kOrder>
void run(const Setup& s, const char* name, int per_sm, float read_us) {
  const auto kernel = stream_kernel<kAhead, kBarrier, kWork, kOrder>;
  // Shared memory (unused) limits the CTAs per SM, as the kernel's registers do.
  int smem_per_sm = 0;
  cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0);
  const int smem = smem_per_sm / per_sm - 2048;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const dim3 grid(static_cast<unsigned>(s.n / 64), static_cast<unsigned>(s.splits));
  const float us = median_us(s, [&](cudaStream_t stream, int set) {
    kernel<<<grid, kThreads, smem, stream>>>(s.operands[set], s.k / 128, s.splits, s.sink);
  });
  print_row(name, per_sm, us, s.bytes(), read_us);
}

// The floors, then every stream variant.
void run_all(const Setup& s, const cudaDeviceProp& prop, void* copy_target) {
  std::printf(
      "%s, %d SMs; %d x %d weights (%.1f MB with scales), %d K partitions, %d operand sets\n\n",
      prop.name, s.sm_count, s.n, s.k, s.bytes() / 1e6, s.splits, s.sets);
  std::printf("| stream | CTAs/SM | us | GB/s | of read |\n|---|---|---|---|---|\n");
  // The floors: the codes and scales read contiguously (fill.h; 8 CTAs of 256 threads per SM) and
  // the codes copied (half read, half written; the bytes of the % of copy bandwidth figures).
  const float read_us = median_us(s, [&](cudaStream_t stream, int set) {
    a4w4::bench::read_with_kernel(s.operands[set].codes, s.code_bytes + s.scale_bytes, s.sink,
                                  s.sm_count, stream);
  });
  print_row("read, contiguous", 0, read_us, s.bytes(), read_us);
  const float copy_us = median_us(s, [&](cudaStream_t stream, int set) {
    a4w4::bench::copy_with_kernel(s.operands[set].codes, copy_target, s.code_bytes, s.sm_count,
                                  stream);
  });
  std::printf("| %-34s | %7s | %6.1f | %5.0f | (copy) |\n", "copy of the codes", "-", copy_us,
              2.0 * double(s.code_bytes) / copy_us / 1e3);

  using O = Order;
  run<2, false, 0, O::kGroupMajor>(s, "2 ahead", 4, read_us);
  run<2, true, 0, O::kGroupMajor>(s, "2 ahead, barrier", 4, read_us);
  run<1, true, 0, O::kGroupMajor>(s, "1 ahead, barrier", 4, read_us);
  run<4, true, 0, O::kGroupMajor>(s, "4 ahead, barrier", 4, read_us);
  run<2, true, 0, O::kCtaAdjacent>(s, "2 ahead, barrier, CTA-adjacent", 4, read_us);
  run<2, true, 0, O::kRotated>(s, "2 ahead, barrier, rotated", 4, read_us);
  run<2, true, 0, O::kTileMajor>(s, "2 ahead, barrier, tile-major", 4, read_us);
  run<4, true, 0, O::kTileMajor>(s, "4 ahead, barrier, tile-major", 4, read_us);
  run<2, true, 128, O::kGroupMajor>(s, "2 ahead, barrier, work 128", 4, read_us);
  run<2, true, 128, O::kRotated>(s, "2 ahead, barrier, work 128, rotated", 4, read_us);
  run<2, true, 128, O::kTileMajor>(s, "2 ahead, barrier, work 128, tile-major", 4, read_us);
  run<2, true, 192, O::kGroupMajor>(s, "2 ahead, barrier, work 192", 4, read_us);
  run<2, true, 192, O::kTileMajor>(s, "2 ahead, barrier, work 192, tile-major", 4, read_us);
  run<2, true, 256, O::kGroupMajor>(s, "2 ahead, barrier, work 256", 4, read_us);
  run<2, true, 256, O::kTileMajor>(s, "2 ahead, barrier, work 256, tile-major", 4, read_us);
  run<4, true, 256, O::kGroupMajor>(s, "4 ahead, barrier, work 256", 4, read_us);
  run<4, true, 256, O::kTileMajor>(s, "4 ahead, barrier, work 256, tile-major", 4, read_us);
  // The occupancy of the kernels as built: 3 CTAs per SM (32 and 64 rows), 2 (deep).
  run<2, true, 192, O::kGroupMajor>(s, "2 ahead, barrier, work 192", 3, read_us);
  run<4, true, 192, O::kGroupMajor>(s, "4 ahead, barrier, work 192", 2, read_us);
  run<4, true, 192, O::kGroupMajor>(s, "4 ahead, barrier, work 192", 3, read_us);
  run<2, true, 0, O::kGroupMajor>(s, "2 ahead, barrier", 8, read_us);
  run<2, true, 192, O::kGroupMajor>(s, "2 ahead, barrier, work 192", 8, read_us);
  run<2, true, 192, O::kTileMajor>(s, "2 ahead, barrier, work 192, tile-major", 8, read_us);
}

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major < 9) {
    std::printf("needs an sm_90 GPU\n");
    return 77;
  }
  Setup s{};
  s.n = argc > 1 ? std::atoi(argv[1]) : 28672;
  s.k = argc > 2 ? std::atoi(argv[2]) : 8192;
  s.splits = argc > 3 ? std::atoi(argv[3]) : 2;
  if (s.n <= 0 || s.n % 64 || s.k <= 0 || s.k % 128 || s.splits <= 0 || (s.k / 128) % s.splits) {
    std::printf("usage: %s [N K SPLITS]: N a multiple of 64, K of 128, K / 128 of SPLITS\n",
                argv[0]);
    return 2;
  }
  s.sm_count = prop.multiProcessorCount;
  s.code_bytes = size_t(s.n) * s.k / 2;
  s.scale_bytes = size_t(s.n) * s.k / 32;
  s.sets = a4w4::bench::rotation_sets(s.bytes(), prop.l2CacheSize);
  // One allocation per set: the codes, then their scales (one contiguous read covers both).
  std::vector<void*> buffers;
  for (int i = 0; i < s.sets; ++i) {
    void* data = nullptr;
    if (cudaMalloc(&data, s.code_bytes + s.scale_bytes) != cudaSuccess) {
      std::printf("out of device memory\n");
      return 1;
    }
    auto* codes = static_cast<uint8_t*>(data);
    a4w4::bench::fill_random(codes, s.code_bytes, 1 + i, a4w4::bench::FillKind::kBytes, nullptr);
    a4w4::bench::fill_random(codes + s.code_bytes, s.scale_bytes, 100 + i,
                             a4w4::bench::FillKind::kTypicalScales, nullptr);
    s.operands.push_back({codes, codes + s.code_bytes});
    buffers.push_back(data);
  }
  void* copy_target = nullptr;
  cudaMalloc(&s.sink, 4096);
  cudaMalloc(&copy_target, s.code_bytes);
  cudaStreamCreate(&s.stream);
  int status = 0;
  try {
    run_all(s, prop, copy_target);
  } catch (const std::exception& e) {  // a CUDA error in a timed launch (time_enqueued)
    std::printf("%s\n", e.what());
    status = 1;
  }
  cudaStreamDestroy(s.stream);
  for (void* p : buffers) cudaFree(p);
  cudaFree(copy_target);
  cudaFree(s.sink);
  return status == 0 && cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
