/*
 * a4w4: MXFP4 x MXFP4 GEMM (OCP MX: E2M1 elements, one E8M0 scale per 32 elements along K).
 *
 * The public C API. It compiles as C99 and C++; no exception ever crosses it.
 *
 * Conventions
 * - Every entry point returns an a4w4_status. A4W4_SUCCESS is 0; every failure has its own code
 *   (a4w4_status_string) and leaves a message on the calling thread saying which argument was wrong
 *   and what was expected (a4w4_last_error_message).
 * - A call that fails writes nothing to its outputs.
 * - Tensors are passed by non-owning descriptors (a4w4_tensor). Shapes and strides count elements of
 *   the tensor's dtype; for packed E2M1 that is 4-bit elements, so a row of K elements is K/2 bytes
 *   and row strides must be even.
 * - Numerics follow docs/semantics.md (the OCP MX contract): quantization modes, rounding, NaN rules
 *   and the GEMM formula.
 */
#ifndef A4W4_A4W4_H_
#define A4W4_A4W4_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define A4W4_API __declspec(dllimport)
#elif defined(__GNUC__)
#define A4W4_API __attribute__((visibility("default")))
#else
#define A4W4_API
#endif

/* Public enums have int as their underlying type in C++ too, so any int a C caller passes is a
   valid value to check (and reject), never undefined behaviour. */
#ifdef __cplusplus
#define A4W4_ENUM(name) enum name : int
#else
#define A4W4_ENUM(name) enum name
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/* Version                                                                                     */
/* ------------------------------------------------------------------------------------------ */

#define A4W4_VERSION_MAJOR 0
#define A4W4_VERSION_MINOR 1
#define A4W4_VERSION_PATCH 0
/* Encoded as major * 10000 + minor * 100 + patch. */
#define A4W4_VERSION (A4W4_VERSION_MAJOR * 10000 + A4W4_VERSION_MINOR * 100 + A4W4_VERSION_PATCH)

/* The version of the library actually loaded (compare with A4W4_VERSION of the header). */
A4W4_API int a4w4_version(void);
/* "major.minor.patch", a static string. */
A4W4_API const char* a4w4_version_string(void);

/* ------------------------------------------------------------------------------------------ */
/* Status codes and error messages                                                             */
/* ------------------------------------------------------------------------------------------ */

typedef A4W4_ENUM(a4w4_status) {
  A4W4_SUCCESS = 0,
  /* A null pointer, an out-of-range enum, a bad rank, a negative or overlapping stride, an
     options struct of the wrong size, outputs that overlap inputs. */
  A4W4_ERROR_INVALID_ARGUMENT = 1,
  /* Operand shapes disagree (e.g. B's K differs from A's, scales are not [rows, K/32]). */
  A4W4_ERROR_SHAPE_MISMATCH = 2,
  /* The dtype of an operand is not one this operand accepts. */
  A4W4_ERROR_UNSUPPORTED_DTYPE = 3,
  /* A valid layout the backend does not take (non-unit inner stride, unknown weight layout). */
  A4W4_ERROR_UNSUPPORTED_LAYOUT = 4,
  /* K (the reduction length) is not a multiple of the 32-element block size. */
  A4W4_ERROR_K_NOT_MULTIPLE_OF_32 = 5,
  /* The backend asked for (or the tensors' device) was not compiled into this build. */
  A4W4_ERROR_BACKEND_NOT_COMPILED = 6,
  /* The backend is compiled in but no usable device is present (or the ordinal is out of range). */
  A4W4_ERROR_NO_DEVICE = 7,
  /* Tensors of one call live on different devices, or on a device the context's backend does not
     serve, or a pointer is not of the memory kind its descriptor claims. */
  A4W4_ERROR_DEVICE_MISMATCH = 8,
  /* The kernel name given is not registered. */
  A4W4_ERROR_KERNEL_NOT_FOUND = 9,
  /* The kernel exists but cannot run this problem (backend, shape, alignment, math mode). */
  A4W4_ERROR_KERNEL_NOT_APPLICABLE = 10,
  /* A configuration (tuned-kernel file, environment variable) could not be read or parsed. */
  A4W4_ERROR_CONFIG = 11,
  /* The device runtime (CUDA) reported an error; the message carries its name and text. */
  A4W4_ERROR_DEVICE = 12,
  /* Host or device memory could not be allocated. */
  A4W4_ERROR_OUT_OF_MEMORY = 13,
  /* A bug in a4w4: an internal invariant failed. Please report it with the message. */
  A4W4_ERROR_INTERNAL = 14
} a4w4_status;

/* A static, human-readable name for a status code ("A4W4_ERROR_SHAPE_MISMATCH: ...").
   Unknown codes give a string saying so; never NULL. */
A4W4_API const char* a4w4_status_string(a4w4_status status);

/* The detail of the last failure on the calling thread (which argument, expected vs got).
   Successful calls leave it unchanged. Valid until the next failing call on this thread; never
   NULL ("" when nothing has failed yet). */
A4W4_API const char* a4w4_last_error_message(void);

/* ------------------------------------------------------------------------------------------ */
/* Data types, devices, tensor descriptors                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Element types. Value 0 is deliberately invalid so a zero-initialised descriptor is rejected.
   DLPack (v1.1) equivalents, as (code, bits, lanes):                                          */
typedef A4W4_ENUM(a4w4_dtype) {
  A4W4_DTYPE_E2M1 = 1, /* packed FP4 E2M1, two per byte, element 2i in the low nibble:
                          DLPack (kDLFloat4_e2m1fn = 17, 4, 1) */
  A4W4_DTYPE_E8M0 = 2, /* UE8M0 power-of-two scale, 0xFF = NaN: (kDLFloat8_e8m0fnu = 14, 8, 1) */
  A4W4_DTYPE_BF16 = 3, /* (kDLBfloat = 4, 16, 1) */
  A4W4_DTYPE_F16 = 4,  /* IEEE binary16: (kDLFloat = 2, 16, 1) */
  A4W4_DTYPE_F32 = 5,  /* IEEE binary32: (kDLFloat = 2, 32, 1) */
  A4W4_DTYPE_U8 = 6    /* raw bytes: (kDLUInt = 1, 8, 1) */
} a4w4_dtype;

/* Size of one element in bits (4 for E2M1); 0 for an invalid dtype. */
A4W4_API int a4w4_dtype_bits(a4w4_dtype dtype);
/* "e2m1", "e8m0", "bf16", "f16", "f32", "u8"; "invalid" otherwise. */
A4W4_API const char* a4w4_dtype_name(a4w4_dtype dtype);
/* Map to and from DLPack's (code, bits) pair (lanes are always 1). */
A4W4_API a4w4_status a4w4_dtype_to_dlpack(a4w4_dtype dtype, uint8_t* code, uint8_t* bits);
A4W4_API a4w4_status a4w4_dtype_from_dlpack(uint8_t code, uint8_t bits, a4w4_dtype* dtype);

/* Device types use DLPack's numbering. */
typedef A4W4_ENUM(a4w4_device_type) {
  A4W4_DEVICE_CPU = 1, /* kDLCPU */
  A4W4_DEVICE_CUDA = 2 /* kDLCUDA: device memory of one GPU, ordinal = CUDA device index */
} a4w4_device_type;

typedef struct a4w4_device {
  a4w4_device_type type;
  int32_t ordinal; /* 0 for the CPU */
} a4w4_device;

/* Memory layouts of a tensor's data. Plain is strided row-major as the shape/strides describe.
   Other values name layouts produced by a4w4 itself (e.g. pre-shuffled weights), versioned so a
   plain tensor is never taken for a prepared one, nor the reverse. */
/* clang-format misreads the A4W4_ENUM macro: */
/* clang-format off */
typedef A4W4_ENUM(a4w4_layout) {
  A4W4_LAYOUT_PLAIN = 0,
  /* A GEMM weight (B, [N, K] E2M1) or its scales ([N, K/32] E8M0) as rearranged by
     a4w4_prepare_weight, version 1: tiles of 16 rows x 128 K laid out in the order the CUDA decode
     kernels load them (docs/weight-layout.md). Shape stays the logical [N, K] / [N, K/32]; strides
     are ignored; the buffer sizes come from a4w4_prepared_weight_size. */
  A4W4_LAYOUT_PREPARED_V1 = 1,
  /* Version 2: the same tiles and scales, each tile holding its 16 rows' 64 bytes row after row.
     The layout every CUDA kernel reads fastest; prefer it for new code. Version 1 stays readable
     by every backend (the CUDA fast kernels read version 2 only: a version-1 B runs on
     cuda.generic). */
  A4W4_LAYOUT_PREPARED_V2 = 2,
  /* Version 2 with B's int8 form kept, for prefill-sized batches: the weight buffer holds version
     2's tiles, then B folded into int8 as the int8 tensor-core kernels (cuda.int8_128x128,
     cuda.int8_128x192) stage it in every call, with its per-tile factors and fold summaries
     (docs/weight-layout.md). Those kernels then skip B's staging; every other kernel, and the
     CPU backend, reads the version-2 part. The weight buffer is about 2.9x version 2's (an int8
     per element beside the 4-bit codes: 0.77x bf16's bytes); the scales are version 2's. Made by
     either backend, to the same bytes. */
  A4W4_LAYOUT_PREPARED_V2_INT8 = 3
} a4w4_layout;
/* clang-format on */

#define A4W4_MAX_RANK 8

/* A non-owning view of a tensor. shape[i] and strides[i] are read for i < rank only; rank above
   A4W4_MAX_RANK is rejected. Strides count elements (not bytes). Use a4w4_tensor_2d() or
   a4w4_tensor_1d() to fill one for the common cases. */
typedef struct a4w4_tensor {
  void* data;
  a4w4_dtype dtype;
  int32_t rank;
  int64_t shape[A4W4_MAX_RANK];
  int64_t strides[A4W4_MAX_RANK];
  a4w4_device device;
  a4w4_layout layout;
} a4w4_tensor;

/* A row-major 2-D view [rows, cols] whose rows start row_stride elements apart. */
static inline a4w4_tensor a4w4_tensor_2d(void* data, a4w4_dtype dtype, int64_t rows, int64_t cols,
                                         int64_t row_stride, a4w4_device device) {
  a4w4_tensor t;
  int i;
  for (i = 0; i < A4W4_MAX_RANK; ++i) t.shape[i] = t.strides[i] = 0;
  t.data = data;
  t.dtype = dtype;
  t.rank = 2;
  t.shape[0] = rows;
  t.shape[1] = cols;
  t.strides[0] = row_stride;
  t.strides[1] = 1;
  t.device = device;
  t.layout = A4W4_LAYOUT_PLAIN;
  return t;
}

/* A contiguous 1-D view [n]. */
static inline a4w4_tensor a4w4_tensor_1d(void* data, a4w4_dtype dtype, int64_t n,
                                         a4w4_device device) {
  a4w4_tensor t = a4w4_tensor_2d(data, dtype, n, 1, 1, device);
  t.rank = 1;
  t.shape[1] = 0;
  t.strides[0] = 1;
  t.strides[1] = 0;
  return t;
}

static inline a4w4_device a4w4_cpu(void) {
  a4w4_device d;
  d.type = A4W4_DEVICE_CPU;
  d.ordinal = 0;
  return d;
}

static inline a4w4_device a4w4_cuda(int32_t ordinal) {
  a4w4_device d;
  d.type = A4W4_DEVICE_CUDA;
  d.ordinal = ordinal;
  return d;
}

/* ------------------------------------------------------------------------------------------ */
/* Backends and probes                                                                         */
/* ------------------------------------------------------------------------------------------ */

typedef A4W4_ENUM(a4w4_backend) {
  A4W4_BACKEND_AUTO = 0, /* follow the tensors' device */
  A4W4_BACKEND_CPU = 1,
  A4W4_BACKEND_CUDA = 2
} a4w4_backend;

/* "auto", "cpu", "cuda"; "invalid" otherwise. */
A4W4_API const char* a4w4_backend_name(a4w4_backend backend);
/* 1 if the backend was compiled into this build, else 0 (also for invalid values). */
A4W4_API int a4w4_backend_compiled(a4w4_backend backend);
/* 1 if the backend is compiled in and usable now: always for the CPU; for CUDA, when it is compiled
   in and at least one device is present and the driver answers. Never fails, never aborts. */
A4W4_API int a4w4_backend_available(a4w4_backend backend);
/* Number of devices of a backend (1 for the CPU). Fails with A4W4_ERROR_BACKEND_NOT_COMPILED or
   A4W4_ERROR_NO_DEVICE (count set to 0) where there are none. */
A4W4_API a4w4_status a4w4_device_count(a4w4_backend backend, int* count);
/* A one-line description of a device ("NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)", or the CPU's
   model and thread count), truncated to fit buf (always NUL-terminated when buf_size > 0). */
A4W4_API a4w4_status a4w4_device_describe(a4w4_device device, char* buf, size_t buf_size);

/* ------------------------------------------------------------------------------------------ */
/* Context                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* A context owns what calls share: the backend choice, the CPU thread count, the kernel registry
   view, tuned configurations and device workspace. All functions taking a context may be called
   from several threads at once on the same context. Destroy it when no call is using it. */
typedef struct a4w4_context_t* a4w4_context;

A4W4_API a4w4_status a4w4_context_create(a4w4_context* ctx);
/* Destroying NULL is a no-op that succeeds. */
A4W4_API a4w4_status a4w4_context_destroy(a4w4_context ctx);

/* AUTO (the default) runs each call on the backend of its tensors' device. CPU or CUDA insists on
   that backend: tensors on another device then fail with A4W4_ERROR_DEVICE_MISMATCH. Setting a
   backend that is not compiled in fails with A4W4_ERROR_BACKEND_NOT_COMPILED. */
A4W4_API a4w4_status a4w4_context_set_backend(a4w4_context ctx, a4w4_backend backend);
A4W4_API a4w4_status a4w4_context_get_backend(a4w4_context ctx, a4w4_backend* backend);
/* Threads used by the CPU backend; 0 (the default) means one per hardware thread. */
A4W4_API a4w4_status a4w4_context_set_num_threads(a4w4_context ctx, int num_threads);
A4W4_API a4w4_status a4w4_context_get_num_threads(a4w4_context ctx, int* num_threads);
/* Device scratch memory for the CUDA kernels that stage operands before their main loop (the int8
   family, cuda.int8_128x128, converts A and B into it once per call; cuda.skinny converts A's K
   tiles into it once per call instead of once per thread block: without it, it runs slower at
   M <= 64 and does not run above 64).
   a4w4 never allocates inside a call: a call whose device has no workspace of at least
   a4w4_gemm_workspace_size() bytes here never runs the kernels that need one (naming one fails with
   A4W4_ERROR_KERNEL_NOT_APPLICABLE). The memory
   stays the caller's: it must outlive every call that may use it and overlap none of a call's
   operands (a call fails with A4W4_ERROR_INVALID_ARGUMENT if it does), and the calls through one
   context that may use it must be ordered (one stream, or events between them), as with cuBLAS.
   device: a CUDA device; ptr: 256-byte aligned memory of that device (cudaMalloc's), bytes > 0.
   ptr NULL with bytes 0 removes the workspace. One workspace per context. */
A4W4_API a4w4_status a4w4_context_set_workspace(a4w4_context ctx, a4w4_device device, void* ptr,
                                                size_t bytes);
/* The workspace set (ptr NULL and bytes 0 when none); any output pointer may be NULL. */
A4W4_API a4w4_status a4w4_context_get_workspace(a4w4_context ctx, a4w4_device* device, void** ptr,
                                                size_t* bytes);

/* ------------------------------------------------------------------------------------------ */
/* Quantization                                                                                */
/* ------------------------------------------------------------------------------------------ */

/* How the per-block scale exponent is chosen from the block's absolute maximum amax = m * 2^E,
   m in [1, 2). See docs/semantics.md. */
typedef A4W4_ENUM(a4w4_scale_mode) {
  A4W4_SCALE_FLOOR = 0, /* e = E - 2 (OCP v1.0 recommendation); may saturate */
  A4W4_SCALE_RCEIL = 1, /* smallest e with amax <= 6 * 2^e; never saturates */
  A4W4_SCALE_EVEN = 2   /* e = E - 2 + (m >= 1.75) */
} a4w4_scale_mode;

/* "floor", "rceil", "even"; "invalid" otherwise. */
A4W4_API const char* a4w4_scale_mode_name(a4w4_scale_mode mode);

/* x [R, K] (F32, F16 or BF16; K % 32 == 0) -> q [R, K] E2M1 and scale [R, K/32] E8M0.
   stream: a cudaStream_t for CUDA tensors (NULL = the default stream); ignored on the CPU. */
A4W4_API a4w4_status a4w4_quantize(a4w4_context ctx, const a4w4_tensor* x, const a4w4_tensor* q,
                                   const a4w4_tensor* scale, a4w4_scale_mode mode, void* stream);

/* q [R, K] E2M1 with scale [R, K/32] E8M0 -> y [R, K] (F32, or BF16/F16 rounded to nearest even).
   A NaN scale (0xFF) makes its whole block NaN. */
A4W4_API a4w4_status a4w4_dequantize(a4w4_context ctx, const a4w4_tensor* q,
                                     const a4w4_tensor* scale, const a4w4_tensor* y, void* stream);

/* ------------------------------------------------------------------------------------------ */
/* GEMM                                                                                        */
/* ------------------------------------------------------------------------------------------ */

typedef A4W4_ENUM(a4w4_math_mode) {
  /* The contract: in-block sums exact, block partials accumulated in fp32 or better. */
  A4W4_MATH_EXACT = 0,
  /* Opt-in: tensor cores may accumulate inside a K tile of at most 128 with less than fp32
     precision (like cuBLASLt FAST_ACCUM): |D - D_exact| <= 2^-5 * |alpha| * sum |a * b| beyond
     the exact mode's error (docs/semantics.md). Kernels without such a path compute exactly. */
  A4W4_MATH_FAST_ACCUM = 1
} a4w4_math_mode;

/* Optional GEMM settings. Fill with a4w4_gemm_options_init(); struct_size guards against a
   caller built with another version of this header. */
typedef struct a4w4_gemm_options {
  uint32_t struct_size; /* sizeof(a4w4_gemm_options), set by a4w4_gemm_options_init */
  float alpha;          /* default 1 */
  float beta;           /* default 0; used only when C is given */
  /* 0: choose automatically. n >= 1: split the K/32 blocks into n contiguous partitions of
     (almost) equal size, accumulate each on its own and add the partials. Same meaning on every
     backend. n greater than K/32 is an invalid argument. */
  int32_t split_k;
  /* NULL or "": choose. Otherwise the name of a registered kernel (a4w4_kernel_*); an unknown
     name fails with A4W4_ERROR_KERNEL_NOT_FOUND, one that cannot run this problem with
     A4W4_ERROR_KERNEL_NOT_APPLICABLE. Never a silent fallback. */
  const char* kernel;
  a4w4_math_mode math_mode; /* default A4W4_MATH_EXACT */
  /* 1: the caller promises that b and b_scale are not written while the call may run, and that
     the work that last wrote them is ordered before the call by more than stream order alone: the
     host synchronised with it, or the stream waited on an event recorded after it (weights
     written at load time, as in inference). A CUDA kernel that starts before the kernel ahead of
     it on the stream has finished (programmatic dependent launch, docs/cuda-backend.md) may then
     read them before that kernel is done: cuda.gemv's first weight loads at M = 1 overlap its
     end. a, c, bias and d are still touched only after it. 0 (the default): nothing is read
     before the work ahead is done. Ignored on the CPU. */
  int32_t b_constant;
} a4w4_gemm_options;

A4W4_API void a4w4_gemm_options_init(a4w4_gemm_options* options);

/* The workspace bytes (a4w4_context_set_workspace) with which every kernel can run an M x N x K
   GEMM: (M + N) * (K rounded up to 128) plus about 4 / 128 of that for factors. M, N >= 1,
   K >= 32 with K % 32 == 0. */
A4W4_API a4w4_status a4w4_gemm_workspace_size(int64_t m, int64_t n, int64_t k, size_t* bytes);

/* D = alpha * (A . B^T) + beta * C + bias, per docs/semantics.md.
     a       [M, K] E2M1          a_scale [M, K/32] E8M0
     b       [N, K] E2M1          b_scale [N, K/32] E8M0   (both plain, or both prepared by
                                                          a4w4_prepare_weight)
     c       [M, N] F32/BF16/F16, optional (NULL); may be the same tensor as d (same data and
             strides), must not otherwise overlap it
     bias    [N] F32/BF16/F16, optional (NULL); its dtype is read as declared
     d       [M, N] F32/BF16/F16, rounded once to nearest even
   Any M >= 1, N >= 1; K >= 32 with K % 32 == 0. Row strides are honoured for every operand; the
   last dimension must be contiguous (stride 1). options may be NULL for the defaults.
   stream: a cudaStream_t for CUDA tensors (NULL = the default stream); ignored on the CPU. */
A4W4_API a4w4_status a4w4_gemm(a4w4_context ctx, const a4w4_tensor* a, const a4w4_tensor* a_scale,
                               const a4w4_tensor* b, const a4w4_tensor* b_scale,
                               const a4w4_tensor* c, const a4w4_tensor* bias,
                               const a4w4_tensor* d, const a4w4_gemm_options* options,
                               void* stream);

/* ------------------------------------------------------------------------------------------ */
/* Prepared weights                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* Bytes needed for a prepared [n, k] weight and for its prepared scales in `layout`. */
A4W4_API a4w4_status a4w4_prepared_weight_size(int64_t n, int64_t k, a4w4_layout layout,
                                               size_t* weight_bytes, size_t* scale_bytes);

/* Rearranges a plain weight b [N, K] E2M1 and its scales b_scale [N, K/32] E8M0 into prepared
   (shape [N, K]) and prepared_scale (shape [N, K/32]), both in the prepared layout their
   descriptors name (A4W4_LAYOUT_PREPARED_V2, _V2_INT8 or _V1), whose buffers hold at least
   a4w4_prepared_weight_size bytes. Prepare once at load time; a4w4_gemm then takes
   (prepared, prepared_scale) as B. Padding (and for A4W4_LAYOUT_PREPARED_V2_INT8 the gaps
   between its parts) is written too: the bytes depend on b and b_scale only, on either backend. */
A4W4_API a4w4_status a4w4_prepare_weight(a4w4_context ctx, const a4w4_tensor* b,
                                         const a4w4_tensor* b_scale, const a4w4_tensor* prepared,
                                         const a4w4_tensor* prepared_scale, void* stream);

/* ------------------------------------------------------------------------------------------ */
/* Kernel registry                                                                             */
/* ------------------------------------------------------------------------------------------ */

/* Every GEMM kernel compiled into this build has a name ("cpu.reference", "cuda.decode", ...),
   a backend, a path and the constraints it checks before it runs (docs/kernels-and-tuning.md).

   Number of registered kernels, and the name and backend of the i-th (0 <= index < count).
   Names are static strings. */
A4W4_API int a4w4_kernel_count(void);
A4W4_API a4w4_status a4w4_kernel_info(int index, const char** name, a4w4_backend* backend);

/* The kind of code a kernel runs. */
typedef A4W4_ENUM(a4w4_kernel_path) {
  A4W4_KERNEL_PATH_CPU = 1,     /* a CPU kernel */
  A4W4_KERNEL_PATH_DECODE = 2,  /* small M, memory-bound: streams the weight once */
  A4W4_KERNEL_PATH_BF16 = 3,    /* tensor cores on operands widened to bf16 */
  A4W4_KERNEL_PATH_FP8 = 4,     /* tensor cores on operands converted to fp8 */
  A4W4_KERNEL_PATH_GENERIC = 5  /* runs everything the API accepts: the fallback */
} a4w4_kernel_path;

/* "cpu", "decode", "bf16", "fp8", "generic"; "invalid" otherwise. */
A4W4_API const char* a4w4_kernel_path_name(a4w4_kernel_path path);

/* What a kernel is and what it takes. Set struct_size = sizeof(a4w4_kernel_properties) before the
   call; a later version of the library writes only the fields a caller's struct_size covers. */
typedef struct a4w4_kernel_properties {
  uint32_t struct_size;
  const char* name; /* static string */
  a4w4_backend backend;
  a4w4_kernel_path path;
  /* The tile of D (tile_m x tile_n) one CTA or work item computes, and its K step; 0 where the
     kernel has no fixed tile (the CPU kernels block adaptively). */
  int32_t tile_m, tile_n, tile_k;
  /* Largest options.split_k the kernel accepts: 0 = any (up to K/32), 1 = no split. */
  int32_t max_split_k;
  /* 1 when split-K partitions run concurrently (split-K adds parallelism); 0 when the kernel
     adds the partitions one after another (split-K only sets the order of the sums). */
  int32_t split_k_parallel;
  /* 1 when the kernel chooses its own split for split_k = 0 (automatic). */
  int32_t auto_split_k;
  /* M range the kernel takes (max_m = 0: unbounded). */
  int64_t min_m, max_m;
  /* Everything else it checks (alignment, layout, device), as one static line of text. */
  const char* constraints;
} a4w4_kernel_properties;

/* Fills *properties for the index-th kernel (0 <= index < a4w4_kernel_count()). */
A4W4_API a4w4_status a4w4_kernel_describe(int index, a4w4_kernel_properties* properties);
/* The index of the kernel called name; A4W4_ERROR_KERNEL_NOT_FOUND when none is. */
A4W4_API a4w4_status a4w4_kernel_find(const char* name, int* index);

/* Whether kernel `name` can run this GEMM: the same operands and options as a4w4_gemm, which is
   neither run nor written (options->kernel is ignored; options->split_k counts). Returns
   A4W4_SUCCESS when it can; A4W4_ERROR_KERNEL_NOT_FOUND or A4W4_ERROR_KERNEL_NOT_APPLICABLE with
   the reason in a4w4_last_error_message() when not; any other code when a4w4_gemm itself would
   reject the arguments. */
A4W4_API a4w4_status a4w4_kernel_applicable(a4w4_context ctx, const char* name,
                                            const a4w4_tensor* a, const a4w4_tensor* a_scale,
                                            const a4w4_tensor* b, const a4w4_tensor* b_scale,
                                            const a4w4_tensor* c, const a4w4_tensor* bias,
                                            const a4w4_tensor* d,
                                            const a4w4_gemm_options* options);

/* Why a kernel was chosen. */
typedef A4W4_ENUM(a4w4_choice_source) {
  A4W4_CHOICE_EXPLICIT = 1,  /* options.kernel named it */
  A4W4_CHOICE_TUNED = 2,     /* an entry of the context's tuned configuration */
  A4W4_CHOICE_HEURISTIC = 3  /* the built-in chooser (no tuned entry, or one that was skipped) */
} a4w4_choice_source;

/* The kernel and split a4w4_gemm would run. Set struct_size = sizeof(a4w4_gemm_choice). */
typedef struct a4w4_gemm_choice {
  uint32_t struct_size;
  const char* kernel; /* static string */
  /* The split_k the kernel receives: options.split_k when the caller gave one; else from the
     tuned entry or the heuristic; 0 = the kernel's own automatic choice (one partition for kernels
     without one, a4w4_kernel_properties.auto_split_k). */
  int32_t split_k;
  a4w4_choice_source source;
  /* For A4W4_CHOICE_TUNED: the M of the entry used (M itself, or the next larger M bucket) and
     its line in the file. 0 otherwise. */
  int64_t tuned_m;
  int32_t tuned_line;
} a4w4_gemm_choice;

/* What a4w4_gemm would run for these arguments, without running it (nothing is written but
   *choice). Fails exactly as a4w4_gemm would before launching. */
A4W4_API a4w4_status a4w4_gemm_choose(a4w4_context ctx, const a4w4_tensor* a,
                                      const a4w4_tensor* a_scale, const a4w4_tensor* b,
                                      const a4w4_tensor* b_scale, const a4w4_tensor* c,
                                      const a4w4_tensor* bias, const a4w4_tensor* d,
                                      const a4w4_gemm_options* options, a4w4_gemm_choice* choice);

/* ------------------------------------------------------------------------------------------ */
/* Tuned configurations                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* A tuned configuration is a CSV file (written by `a4w4 tune`) whose header starts
     device,sm_count,M,N,K,kernel,split_k,us,tflops
   (more columns may follow and are ignored): the best kernel and split measured for each shape on
   one device. For a GEMM on a device, a4w4 takes the entry of that device with the same N and K
   and the exact M, else the entry with the nearest larger M; without one, or when the entry's
   kernel does not exist in this build or cannot run the problem (skipped with a warning), the
   heuristic chooses. An explicit options.kernel or options.split_k wins over the entry.
   Entries of other devices are ignored. docs/kernels-and-tuning.md has the details. */

/* Environment variable naming a tuned configuration that a4w4_context_create loads. When it is
   set and the file cannot be read or is malformed, a4w4_context_create fails with
   A4W4_ERROR_CONFIG and the message says why (file:line). */
#define A4W4_TUNED_CONFIG_ENV "A4W4_TUNED_CONFIG"

/* Loads the file at path into the context, replacing its tuned configuration. A file that cannot
   be read or is malformed fails with A4W4_ERROR_CONFIG ("file:line: what is wrong") and leaves
   the context's configuration as it was. Entries that name an unknown kernel, or one that cannot
   serve their device or shape, are skipped with a warning (a4w4_context_tuned_warning). */
A4W4_API a4w4_status a4w4_context_load_tuned(a4w4_context ctx, const char* path);
/* Drops the context's tuned configuration: the heuristic chooses from then on. */
A4W4_API a4w4_status a4w4_context_clear_tuned(a4w4_context ctx);
/* Entries of the loaded configuration that serve a device of this machine, and the warnings
   recorded so far (at load time, and for entries found not to apply when a GEMM looked them up).
   Either pointer may be NULL. */
A4W4_API a4w4_status a4w4_context_tuned_count(a4w4_context ctx, int* entries, int* warnings);
/* The index-th warning ("tuned.csv:12: kernel 'cuda.old' is not registered; entry skipped"),
   truncated to fit buf (always NUL-terminated). */
A4W4_API a4w4_status a4w4_context_tuned_warning(a4w4_context ctx, int index, char* buf,
                                                size_t buf_size);

/* The key a tuned configuration uses for a device: its name and multiprocessor count. CUDA: the
   device name and SM count the runtime reports ("NVIDIA H200", 132). CPU: "cpu" and the number of
   hardware threads. name is truncated to fit name_size (always NUL-terminated). */
A4W4_API a4w4_status a4w4_device_tuning_key(a4w4_device device, char* name, size_t name_size,
                                            int* sm_count);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* A4W4_A4W4_H_ */
