// Included, before their own definitions, by the kernel families that run only on sm_90
// (gemm_decode.cu: thread-block clusters; gemm_bf16.cu, gemm_int8.cu: wgmma and TMA). CI also
// builds the CUDA code for sm_80, where these kernels compile to stubs that trap, which leaves the
// families' helpers unreferenced in that device pass: silence "declared but never referenced" (177)
// there, and only there.
#pragma once

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#pragma nv_diag_suppress 177
#endif
