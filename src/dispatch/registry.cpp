#include "dispatch/registry.h"

#include <array>

#include "api/error.h"
#include "backends/cpu/fast.h"
#include "backends/cpu/reference.h"
#include "backends/cuda/cuda_backend.h"

namespace a4w4 {
namespace {

std::string always_applicable(const GemmProblem&) {
  return {};
}

// The CPU kernels have no fixed tile and take any split_k (partitions are summed in order, so
// split-K sets the order of the sums, not the parallelism). `speed` keeps them in the order of
// preference: the GEMV path, then the blocked kernels by ISA, then cpu.reference (the oracle,
// still selectable by name; docs/cpu-backend.md says how they compare with it).
// The CUDA entries restate limits that the kernels' own why_not checks too (src/backends/cuda):
// cuda.decode's M <= 64 (kDecodeMaxM) and split_k <= 8 (one thread-block cluster). A new kernel
// family is one entry here; the heuristic ranks it from these fields, without naming it.
constexpr std::array kGemmKernels = {
    GemmKernel{"cpu.gemv_avx512vnni", A4W4_BACKEND_CPU, A4W4_KERNEL_PATH_CPU, 0, 0, 0, 0, false,
               false, 1, 4, 16.0, "AVX-512 VNNI + VBMI CPU; plain B (streamed once)",
               cpu::gemv_avx512_vnni_why_not, cpu::gemv_avx512_vnni},
    GemmKernel{"cpu.gemm_avx512vnni", A4W4_BACKEND_CPU, A4W4_KERNEL_PATH_CPU, 0, 0, 0, 0, false,
               false, 1, 0, 8.0, "AVX-512 VNNI CPU", cpu::gemm_avx512_vnni_why_not,
               cpu::gemm_avx512_vnni},
    GemmKernel{"cpu.gemm_avx2", A4W4_BACKEND_CPU, A4W4_KERNEL_PATH_CPU, 0, 0, 0, 0, false, false, 1,
               0, 4.0, "AVX2 + FMA CPU", cpu::gemm_avx2_why_not, cpu::gemm_avx2},
    GemmKernel{"cpu.gemm_scalar", A4W4_BACKEND_CPU, A4W4_KERNEL_PATH_CPU, 0, 0, 0, 0, false, false,
               1, 0, 2.0, "none", always_applicable, cpu::gemm_scalar},
    GemmKernel{"cpu.reference", A4W4_BACKEND_CPU, A4W4_KERNEL_PATH_CPU, 0, 0, 0, 0, false, false, 1,
               0, 1.0, "none (the exact reference, the oracle of the tests and the tuner)",
               always_applicable, cpu::reference_gemm},
#if A4W4_WITH_CUDA
    // M <= 4: sizes its own grid (cluster over K chunks, column tiles to fill the
    // SMs), so no tile_n; tile_m 4 makes its fill M / 4 against cuda.decode's M / 8. The speeds on
    // a plain and a prepared (version 2) B (here and below) follow the H200's ratios
    // (bench/RESULTS.md): gemv 6% faster on a plain B at M = 1, 1-2% slower at M = 2..4 (1.2-1.4x
    // faster on a plain B than on a version-1 one), decode 1.4x faster on a prepared one at
    // M <= 8, skinny 1.1x.
    GemmKernel{"cuda.gemv", A4W4_BACKEND_CUDA, A4W4_KERNEL_PATH_DECODE, 4, 0, 1024, 0, false, false,
               1, 4, 16.0,
               "sm_90; plain B with 16-byte aligned rows, or a prepared B of version 2 (16-byte "
               "aligned); split_k only with K <= 32768 and partitions starting on multiples of 32 "
               "blocks",
               cuda::gemm_gemv_why_not, cuda::gemm_gemv, 15.5},
    // M padded to 8, 16, 32, 64 or 128 activation rows (M > 128 in token tiles of 128, each
    // converting the weights again; on a prepared B both share one conversion); 64-column tiles;
    // its own split of K over a cluster (auto_split_k). tile_m 16 halves its fill at M <= 8, where
    // it still ranks above cuda.decode on either layout: with the activations staged in a workspace
    // it runs M = 5..8 1.2-1.4x faster than cuda.decode on a prepared B (without a workspace about
    // 10% slower). From M = 65 (with a workspace only) it competes with the int8 family (min_m 65):
    // on the H200 1.4-2.0x faster than cuda.int8_128x128 at M = 96..128, 0.9-1.2x at 192..256 (1.5x
    // on a prepared B since its two token tiles share a conversion: 256 x 8192 x 8192 in 64 us),
    // slower from 384 (bench/RESULTS.md). Speed 26 (28.6 on a prepared B) ranks it first up to M =
    // 256 (the int8 family scores at most 26 there). It stays below cuda.gemv at M <= 4
    // and above cuda.decode at 5..64 as before. With A4W4_MATH_FAST_ACCUM its 128-row token tiles
    // (M = 65..256) run FP8 (H200: 256 x 8192 x 8192 prepared 50 against 63 us exact, 128 x 8192 x
    // 8192 36 against 41; M <= 64 computes exactly): the same ranking holds. max_m 512: above 256
    // only with fast accumulation on a prepared B (why_not), where the two-token-tile kernel runs
    // groups of 256 rows: 384 x 8192 x 8192 in 86 us, 512 x 8192 x 8192 in 98, against 131-132 on
    // the int8 family (which wins from 1024 rows on the larger shapes).
    GemmKernel{"cuda.skinny", A4W4_BACKEND_CUDA, A4W4_KERNEL_PATH_DECODE, 16, 64, 128, 1, true,
               true, 1, 512, 26.0,
               "sm_90a; plain B with 16-byte aligned rows or a prepared B of version 2 (16-byte "
               "aligned, scales 8-byte aligned); any K % 32 == 0; M above 256 only with fast "
               "accumulation on a prepared B; fast accumulation runs FP8 wgmma at M = 65..512",
               cuda::gemm_skinny_why_not, cuda::gemm_skinny, 28.6},
    GemmKernel{"cuda.decode", A4W4_BACKEND_CUDA, A4W4_KERNEL_PATH_DECODE, 8, 64, 128, 8, true, true,
               1, 64, 2.8,
               "sm_90; prepared B of version 2 (16-byte aligned), or plain B with 16-byte "
               "aligned rows, K % 128 == 0 and 4-byte aligned scale rows",
               cuda::gemm_decode_why_not, cuda::gemm_decode, 4.0},
    // Wide tiles convert fewer A rows per MMA (faster when the tiles fill the GPU); narrow ones
    // leave fewer SMs idle on small problems. The heuristic weighs speed by tile fill and waves.
    GemmKernel{"cuda.bf16_128x256", A4W4_BACKEND_CUDA, A4W4_KERNEL_PATH_BF16, 128, 256, 64, 1,
               false, false, 65, 0, 16.0,
               "sm_90a; plain A with 16-byte aligned rows (TMA); B plain the same way, or prepared "
               "(version 2) with 16-byte aligned data and scales; K % 64 == 0; M, N, K < 2^31",
               cuda::gemm_bf16_why_not, cuda::gemm_bf16_128x256},
    GemmKernel{"cuda.bf16_128x128", A4W4_BACKEND_CUDA, A4W4_KERNEL_PATH_BF16, 128, 128, 64, 1,
               false, false, 65, 0, 14.0,
               "sm_90a; plain A with 16-byte aligned rows (TMA); B plain the same way, or prepared "
               "(version 2) with 16-byte aligned data and scales; K % 64 == 0; M, N, K < 2^31",
               cuda::gemm_bf16_why_not, cuda::gemm_bf16_128x128},
    // The int8 wgmma family (exact: folded int8 tile sums, fp32 promotion per 1024-K chunk or per
    // 128-K tile) stages A and B as folded int8 in the context's workspace, so it applies only
    // where one is set; the 128 x 128 tiles whose scales do not fold (a row's 128-K tile spreading
    // over more than 4 binades outside its high blocks, NaN, E8M0 extremes) go to a bf16-family
    // launch in the same call (exact, at that family's 128 x 128 rate). H200 (bench/RESULTS.md):
    // where scales fold, 1.4-3.5x the bf16 family from M = 128 (1.3-1.7x cuBLAS bf16 at M >= 4096);
    // with activation outlier channels 1.3-1.5x; where no tile folds, 0.75-0.95x. So the heuristic
    // takes it wherever it applies (speed 26 against the bf16 kernels' 16 and 14). On a weight
    // with its int8 form (A4W4_LAYOUT_PREPARED_V2_INT8) it stages A only: H100, session 29, exact,
    // N = K = 8192: M = 192 50.9 us against cuda.skinny's 68.2, 256 46.5 against 69.7 (fast
    // accumulation: 51.9), 1024 133 against 169 on version 2; 160 58.2 against cuda.skinny's
    // 67.9 on the same weight, 160 x 28672 x 8192 200 against 260, 128 x 28672 x 8192 106 against
    // 129, 128 x 8192 x 28672 110 against 113, but 128 x 8192 x 8192 43.0 against 40.2 (its 64
    // tiles half-fill the GPU). Speed 58 there (62.4 for the 192-wide tiles, the same ratio as on
    // a plain B) ranks it first from about 136 rows at N = 8192 and from 128 at N = 28672.
    GemmKernel{"cuda.int8_128x128", A4W4_BACKEND_CUDA, A4W4_KERNEL_PATH_FP8, 128, 128, 128, 1,
               false, false, 65, 0, 26.0,
               "sm_90a; plain A with 16-byte aligned rows; B plain the same way, or prepared "
               "(version 2, or with its int8 form: B not staged; data 16-byte, scales 4-byte "
               "aligned); a context workspace of a4w4_gemm_workspace_size bytes; K % 32 == 0; "
               "M, N, K < 2^31",
               cuda::gemm_int8_why_not, cuda::gemm_int8_128x128, 0.0, 58.0},
    // The same on 128 x 192 tiles: 13% fewer shared-memory and L2 bytes per MAC (m64n192k32
    // MMAs, 40 KB stages); its tiles that do not fold always go to the bf16 family (K % 64 == 0).
    // H100 (bench/RESULTS.md, session 22): 8192^3 in 1041 us against 1158-1186 on 128 x 128 tiles,
    // 4096 x 8192 x 28672 1790 against 1870-2104, 1024 x 8192^2 206 against 187 (3 waves of its
    // tiles against 4 fuller ones). Speed 28.5 against 26: the heuristic takes it where its tiles
    // fill the waves about as well (large M), cuda.int8_128x128 elsewhere.
    GemmKernel{"cuda.int8_128x192", A4W4_BACKEND_CUDA, A4W4_KERNEL_PATH_FP8, 128, 192, 128, 1,
               false, false, 65, 0, 28.5,
               "sm_90a; plain A with 16-byte aligned rows; B plain the same way, or prepared "
               "(version 2, or with its int8 form: B not staged; data 16-byte, scales 4-byte "
               "aligned); a context workspace of a4w4_gemm_workspace_size bytes; K % 64 == 0; "
               "M, N, K < 2^31",
               cuda::gemm_int8_128x192_why_not, cuda::gemm_int8_128x192, 0.0, 62.4},
    // The same exact int8 path staging only A (and B's scales): two more warpgroups convert B's
    // codes into each stage, so no pass writes B as int8 before the GEMM. The converters bound its
    // main loop (H200: 1.2-1.8x slower than cuda.int8_128x128 from M = 384, 4-12% faster at
    // 256 x 8192 x 8192, where B's staging dominates), so the heuristic ranks it below; the tuner
    // chooses it where it wins.
    GemmKernel{"cuda.int8_bconv_128x128", A4W4_BACKEND_CUDA, A4W4_KERNEL_PATH_FP8, 128, 128, 128, 1,
               false, false, 65, 0, 16.0,
               "sm_90a; plain A and B with 16-byte aligned rows; a context workspace of "
               "a4w4_gemm_workspace_size bytes; K % 64 == 0; M, N, K < 2^31",
               cuda::gemm_int8_bconv_why_not, cuda::gemm_int8_bconv_128x128},
    GemmKernel{"cuda.generic", A4W4_BACKEND_CUDA, A4W4_KERNEL_PATH_GENERIC, 64, 64, 32, 0, false,
               false, 1, 0, 1.0, "sm_80 or newer; M up to 65535 * 64", cuda::gemm_generic_why_not,
               cuda::gemm_generic},
#endif
};

}  // namespace

std::span<const GemmKernel> gemm_kernels() {
  return kGemmKernels;
}

const GemmKernel* find_gemm_kernel(std::string_view name) {
  for (const GemmKernel& kernel : kGemmKernels)
    if (kernel.name == name) return &kernel;
  return nullptr;
}

std::string kernel_why_not(const GemmKernel& kernel, const GemmProblem& problem,
                           a4w4_backend backend) {
  if (kernel.backend != backend)
    return fmt::format("it is a {} kernel, but the operands are on the {} backend",
                       a4w4_backend_name(kernel.backend), a4w4_backend_name(backend));
  if (problem.m < kernel.min_m)
    return fmt::format("M = {} is below its minimum of {}", problem.m, kernel.min_m);
  if (kernel.max_m > 0 && problem.m > kernel.max_m)
    return fmt::format("M = {} is above its maximum of {}", problem.m, kernel.max_m);
  if (kernel.max_split_k > 0 && problem.split_k > kernel.max_split_k)
    return fmt::format("split_k = {} is above its maximum of {}", problem.split_k,
                       kernel.max_split_k);
  return kernel.why_not(problem);
}

}  // namespace a4w4

extern "C" {

int a4w4_kernel_count(void) {
  return static_cast<int>(a4w4::gemm_kernels().size());
}

namespace {
const a4w4::GemmKernel& kernel_at(int index) {
  const auto kernels = a4w4::gemm_kernels();
  if (index < 0 || static_cast<size_t>(index) >= kernels.size())
    a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "index: expected 0 <= index < {}, got {}",
               kernels.size(), index);
  return kernels[static_cast<size_t>(index)];
}
}  // namespace

a4w4_status a4w4_kernel_info(int index, const char** name, a4w4_backend* backend) {
  return a4w4::guarded(__func__, [&] {
    const a4w4::GemmKernel& kernel = kernel_at(index);
    if (name != nullptr) *name = kernel.name;
    if (backend != nullptr) *backend = kernel.backend;
  });
}

const char* a4w4_kernel_path_name(a4w4_kernel_path path) {
  switch (path) {
    case A4W4_KERNEL_PATH_CPU:
      return "cpu";
    case A4W4_KERNEL_PATH_DECODE:
      return "decode";
    case A4W4_KERNEL_PATH_BF16:
      return "bf16";
    case A4W4_KERNEL_PATH_FP8:
      return "fp8";
    case A4W4_KERNEL_PATH_GENERIC:
      return "generic";
  }
  return "invalid";
}

a4w4_status a4w4_kernel_describe(int index, a4w4_kernel_properties* properties) {
  return a4w4::guarded(__func__, [&] {
    if (properties == nullptr)
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "properties: must not be NULL");
    if (properties->struct_size < sizeof(a4w4_kernel_properties))
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT,
                 "properties: struct_size is {}, expected {} (sizeof(a4w4_kernel_properties))",
                 properties->struct_size, sizeof(a4w4_kernel_properties));
    const a4w4::GemmKernel& kernel = kernel_at(index);
    a4w4_kernel_properties out{};
    out.struct_size = sizeof(a4w4_kernel_properties);
    out.name = kernel.name;
    out.backend = kernel.backend;
    out.path = kernel.path;
    out.tile_m = kernel.tile_m;
    out.tile_n = kernel.tile_n;
    out.tile_k = kernel.tile_k;
    out.max_split_k = kernel.max_split_k;
    out.split_k_parallel = kernel.split_k_parallel ? 1 : 0;
    out.auto_split_k = kernel.auto_split_k ? 1 : 0;
    out.min_m = kernel.min_m;
    out.max_m = kernel.max_m;
    out.constraints = kernel.constraints;
    *properties = out;
  });
}

a4w4_status a4w4_kernel_find(const char* name, int* index) {
  return a4w4::guarded(__func__, [&] {
    if (name == nullptr || index == nullptr)
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "name and index must not be NULL");
    const a4w4::GemmKernel* kernel = a4w4::find_gemm_kernel(name);
    if (kernel == nullptr)
      a4w4::fail(A4W4_ERROR_KERNEL_NOT_FOUND, "name: no kernel named '{}' is registered", name);
    *index = static_cast<int>(kernel - a4w4::gemm_kernels().data());
  });
}

}  // extern "C"
