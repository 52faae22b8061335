// RF_HOST_DEVICE: marks functions that CUDA device code calls too (__host__ __device__ under
// nvcc, nothing under a host compiler), so one header serves g++ and the kernels alike.
#pragma once

#ifndef RF_HOST_DEVICE
#if defined(__CUDACC__)
#define RF_HOST_DEVICE __host__ __device__
#else
#define RF_HOST_DEVICE
#endif
#endif
