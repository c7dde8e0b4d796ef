// Blocking: threads take tiles of D (up to kNcPanels panels of kPanelCols columns, all rows, or a
// share of the rows when there are too few column tiles), pack that tile's B once for all of K
// (so B is decoded once per tile, not once per row block), then sweep the rows in blocks of
// kMcGroups groups and K in chunks of kKcBlocks blocks. In the innermost two loops one B panel
// chunk (kKcBlocks x 1.25 KiB) stays in L1 while the row groups stream past it from L2.
#include "backends/cpu/gemm_driver.h"

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <new>
#include <vector>

#include "backends/cpu/epilogue.h"
#include "numerics/mx.h"

namespace a4w4::cpu {
namespace {

constexpr int64_t kKcBlocks = 16;
constexpr int64_t kMcGroups = 16;
constexpr int64_t kNcPanels = 4;
constexpr int64_t kTileDoubles = kGroupRows * kPanelCols;

// Grow-only 64-byte aligned scratch memory, cached per calling thread so that repeated calls do
// not pay for fresh pages. Only ever touched outside parallel regions (allocation may throw).
class Scratch {
 public:
  std::byte* get(size_t bytes) {
    if (bytes > capacity_) {
      release();
      data_ = static_cast<std::byte*>(::operator new (bytes, std::align_val_t{64}));
      capacity_ = bytes;
    }
    return data_;
  }
  ~Scratch() { release(); }

 private:
  void release() {
    if (data_ != nullptr) ::operator delete (data_, std::align_val_t{64});
    data_ = nullptr;
    capacity_ = 0;
  }
  std::byte* data_ = nullptr;
  size_t capacity_ = 0;
};

constexpr size_t round_up(size_t bytes) {
  return (bytes + 63) / 64 * 64;
}

// Carves aligned arrays out of one scratch buffer. A first pass over a null base only measures, so
// the size allocated and the arrays carved can never disagree.
class Carver {
 public:
  explicit Carver(std::byte* base) : base_(base) {}
  template <typename T>
  T* take(int64_t count) {
    T* out = base_ != nullptr ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += round_up(static_cast<size_t>(count) * sizeof(T));
    return out;
  }
  size_t used() const { return used_; }

 private:
  std::byte* base_;
  size_t used_ = 0;
};

struct Sizes {
  int64_t blocks, groups, panels_total, splits;
  int64_t tile_panels, row_chunks, groups_per_chunk, col_tiles;
};

struct ThreadBuffers {
  uint8_t* b_values;
  double* b_scale;
  uint8_t* b_scale_bytes;
  double* acc;    // [kMcGroups][kNcPanels][kTileDoubles]: the current partition's sums
  double* total;  // same shape: the sum over split-K partitions (splits > 1 only)
};

// Every scratch array of one call: packed A (shared by all threads), each thread's B tile and
// accumulators.
struct Workspace {
  int8_t* a_values = nullptr;
  int32_t* a_corr = nullptr;
  double* a_scale = nullptr;
  uint8_t* a_scale_bytes = nullptr;
  std::vector<ThreadBuffers> threads;

  void carve(Carver& c, const Sizes& s) {
    const int64_t a_blocks = s.groups * s.blocks, b_blocks = s.tile_panels * s.blocks;
    a_values = c.take<int8_t>(a_blocks * kGroupBlockBytes);
    a_corr = c.take<int32_t>(a_blocks * kGroupRows);
    a_scale = c.take<double>(a_blocks * kGroupRows);
    a_scale_bytes = c.take<uint8_t>(a_blocks * kGroupRows);
    for (ThreadBuffers& buf : threads) {
      buf.b_values = c.take<uint8_t>(b_blocks * kPanelBlockBytes);
      buf.b_scale = c.take<double>(b_blocks * kPanelCols);
      buf.b_scale_bytes = c.take<uint8_t>(b_blocks * kPanelCols);
      buf.acc = c.take<double>(kMcGroups * kNcPanels * kTileDoubles);
      buf.total = c.take<double>(kMcGroups * kNcPanels * kTileDoubles);
    }
  }
  PackedAView a() const { return {a_values, a_corr, a_scale, a_scale_bytes}; }
};

void run_tile(const GemmProblem& p, const Sizes& s, const PackedAView& a, MicroKernel micro,
              PackFourColumns pack_four, int64_t tile, ThreadBuffers& buf,
              std::vector<uint8_t>& row_scratch) {
  const int64_t col_tile = tile % s.col_tiles, row_chunk = tile / s.col_tiles;
  const int64_t first_panel = col_tile * s.tile_panels;
  const int64_t panels = std::min(s.tile_panels, s.panels_total - first_panel);
  const int64_t group_begin = row_chunk * s.groups_per_chunk;
  const int64_t group_end = std::min(s.groups, group_begin + s.groups_per_chunk);
  if (group_begin >= group_end) return;

  for (int64_t pi = 0; pi < panels; ++pi)
    pack_b_panel(p.b, p.n, s.blocks, (first_panel + pi) * kPanelCols,
                 buf.b_values + pi * s.blocks * kPanelBlockBytes,
                 buf.b_scale + pi * s.blocks * kPanelCols,
                 buf.b_scale_bytes + pi * s.blocks * kPanelCols, row_scratch, pack_four);

  for (int64_t g0 = group_begin; g0 < group_end; g0 += kMcGroups) {
    const int64_t groups = std::min(kMcGroups, group_end - g0);
    for (int64_t part = 0; part < s.splits; ++part) {
      // Split-K partition `part` covers blocks [part*B/splits, (part+1)*B/splits).
      const int64_t b_begin = part * s.blocks / s.splits, b_end = (part + 1) * s.blocks / s.splits;
      for (int64_t kc = b_begin; kc < b_end; kc += kKcBlocks) {
        const int64_t kn = std::min(kKcBlocks, b_end - kc);
        for (int64_t pi = 0; pi < panels; ++pi) {
          for (int64_t g = 0; g < groups; ++g) {
            const int64_t ab = (g0 + g) * s.blocks + kc;  // block index into packed A
            const int64_t bb = pi * s.blocks + kc;        // block index into the packed tile
            micro(MicroTile{a.values + ab * kGroupBlockBytes, a.corr + ab * kGroupRows,
                            a.scale + ab * kGroupRows, a.scale_bytes + ab * kGroupRows,
                            buf.b_values + bb * kPanelBlockBytes, buf.b_scale + bb * kPanelCols,
                            buf.b_scale_bytes + bb * kPanelCols, kn,
                            buf.acc + (g * kNcPanels + pi) * kTileDoubles, kc == b_begin});
          }
        }
      }
      if (s.splits > 1) {
        const int64_t count = groups * kNcPanels * kTileDoubles;
        if (part == 0) std::fill_n(buf.total, count, 0.0);
        for (int64_t i = 0; i < count; ++i) buf.total[i] += buf.acc[i];
      }
    }
    const double* sums = s.splits > 1 ? buf.total : buf.acc;
    for (int64_t g = 0; g < groups; ++g) {
      for (int i = 0; i < kGroupRows; ++i) {
        const int64_t m = (g0 + g) * kGroupRows + i;
        if (m >= p.m) break;
        for (int64_t pi = 0; pi < panels; ++pi) {
          const double* row = sums + (g * kNcPanels + pi) * kTileDoubles + i * kPanelCols;
          const int64_t n0 = (first_panel + pi) * kPanelCols;
          const int64_t cols = std::min<int64_t>(kPanelCols, p.n - n0);
          store_output_row(p, m, n0, cols, row);
        }
      }
    }
  }
}

}  // namespace

void run_blocked_gemm(const GemmProblem& p, const ExecConfig& exec, MicroKernel micro,
                      PackFourColumns pack_four) {
  const int threads = std::max(1, exec.num_threads);
  Sizes s{};
  s.blocks = p.k / numerics::kBlockSize;
  s.groups = (p.m + kGroupRows - 1) / kGroupRows;
  s.panels_total = (p.n + kPanelCols - 1) / kPanelCols;
  s.splits = std::max(p.split_k, 1);
  s.tile_panels = std::min(kNcPanels, s.panels_total);
  s.col_tiles = (s.panels_total + s.tile_panels - 1) / s.tile_panels;
  // Too few column tiles to keep every thread busy: also split the rows (each row chunk then
  // packs its own copy of the B tile, cheap next to the arithmetic when rows are many).
  s.row_chunks = 1;
  while (s.col_tiles * s.row_chunks < 2 * threads && s.groups / (2 * s.row_chunks) >= 4)
    s.row_chunks *= 2;
  s.groups_per_chunk = (s.groups + s.row_chunks - 1) / s.row_chunks;
  const int64_t tiles = s.col_tiles * s.row_chunks;

  Workspace ws;
  ws.threads.resize(static_cast<size_t>(threads));
  Carver measure(nullptr);
  ws.carve(measure, s);
  thread_local Scratch scratch;
  Carver carve(scratch.get(measure.used()));
  ws.carve(carve, s);
  std::vector<std::vector<uint8_t>> row_scratch(
      static_cast<size_t>(threads), std::vector<uint8_t>(static_cast<size_t>(p.k / 2 + s.blocks)));
  const PackedAView a = ws.a();

#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(static)
    for (int64_t g = 0; g < s.groups; ++g)
      pack_a_group(p.a, p.m, s.blocks, g, ws.a_values + g * s.blocks * kGroupBlockBytes,
                   ws.a_corr + g * s.blocks * kGroupRows, ws.a_scale + g * s.blocks * kGroupRows,
                   ws.a_scale_bytes + g * s.blocks * kGroupRows);
    const auto t = static_cast<size_t>(omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
    for (int64_t tile = 0; tile < tiles; ++tile)
      run_tile(p, s, a, micro, pack_four, tile, ws.threads[t], row_scratch[t]);
  }
}

}  // namespace a4w4::cpu
