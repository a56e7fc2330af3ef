// The module of tests/shim/data/globals_sm90.cubin (test_remaining_families.py):
//   nvcc -cubin -arch=sm_90 -o globals_sm90.cubin globals.cu   (CUDA 13.0)
// and of globals_sm90.fatbin:
//   nvcc -fatbin -arch=sm_90 -Xfatbin -compress=false -o globals_sm90.fatbin globals.cu
// and of globals_sm90_zstd.fatbin (its cubin zstd-compressed, as cuBLAS 13 ships its own):
//   nvcc -fatbin -arch=sm_90 --compress-mode=size -o globals_sm90_zstd.fatbin globals.cu
// and of globals_sm90_lz4.fatbin (its cubin LZ4-compressed, as CUDA 11 and 12 compress):
//   nvcc -fatbin -arch=sm_90 --compress-mode=speed -Xfatbin -compress-all \
//     -o globals_sm90_lz4.fatbin globals.cu
// and, for test_ptx_globals.py, of globals.ptx and globals_debug.ptx (with DWARF sections):
//   nvcc -ptx -arch=sm_90 -o globals.ptx globals.cu;  nvcc -ptx -G -arch=sm_90 -o globals_debug.ptx globals.cu
// and of globals_ptx80.fatbin, _lz4 and _zstd (compute_80 PTX only, as plain, LZ4 and zstd):
//   nvcc -fatbin -gencode arch=compute_80,code=compute_80 --compress-mode=none -o globals_ptx80.fatbin globals.cu
//   nvcc -fatbin -gencode arch=compute_80,code=compute_80 --compress-mode=speed -Xfatbin -compress-all \
//     -o globals_ptx80_lz4.fatbin globals.cu
//   nvcc -fatbin -gencode arch=compute_80,code=compute_80 --compress-mode=size -o globals_ptx80_zstd.fatbin globals.cu
// 64 MiB of zero-filled globals, 16 bytes with initial values, 1 KiB of constants.
__device__ char big[64 << 20];
__device__ int small_init[4] = {1, 2, 3, 4};
__constant__ float coef[256];

extern "C" __global__ void touch() { big[threadIdx.x] = coef[0] + small_init[0]; }
