// Marks functions that both the host compiler and nvcc compile (numerics shared by backends).
#pragma once

#if defined(__CUDACC__)
#define A4W4_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define A4W4_HOST_DEVICE inline
#endif
