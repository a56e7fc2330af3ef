// The module of tests/shim/data/globals_by_arch.fatbin (test_remaining_families.py), one
// source whose globals differ by architecture, so that the size charged says which cubin
// was read:
//   nvcc -fatbin -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
//     -gencode arch=compute_100,code=sm_100 --compress-mode=none -o globals_by_arch.fatbin \
//     globals_by_arch.cu   (CUDA 13.0)
// sm_80: 32 MiB, sm_90: 64 MiB, sm_100: 16 MiB of zero-filled globals.
#if __CUDA_ARCH__ >= 1000
__device__ char big[16 << 20];
#elif __CUDA_ARCH__ >= 900
__device__ char big[64 << 20];
#else
__device__ char big[32 << 20];
#endif

extern "C" __global__ void touch() { big[threadIdx.x] = 1; }
