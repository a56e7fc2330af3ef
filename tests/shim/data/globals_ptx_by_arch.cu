// The module of tests/shim/data/globals_ptx_by_arch.fatbin (test_ptx_globals.py): one source
// whose globals differ by architecture, built as PTX for compute_75, compute_80 and compute_100
// and as a cubin for sm_86, so that the size charged says which entry was read:
//   nvcc -fatbin -gencode arch=compute_75,code=compute_75 -gencode arch=compute_80,code=compute_80 \
//     -gencode arch=compute_86,code=sm_86 -gencode arch=compute_100,code=compute_100 \
//     --compress-mode=none -o globals_ptx_by_arch.fatbin globals_ptx_by_arch.cu   (CUDA 13.0)
// On an sm_90 device the driver has no sm_9x cubin: it compiles the newest PTX no newer than
// the device, compute_80's, with 48 MiB (compute_75: 24 MiB, sm_86: 40 MiB, compute_100: 16 MiB).
#if __CUDA_ARCH__ >= 1000
__device__ char big[16 << 20];
#elif __CUDA_ARCH__ >= 860
__device__ char big[40 << 20];
#elif __CUDA_ARCH__ >= 800
__device__ char big[48 << 20];
#else
__device__ char big[24 << 20];
#endif

extern "C" __global__ void touch() { big[threadIdx.x] = 1; }
