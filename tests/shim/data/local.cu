// The module of tests/shim/data/local_sm90.cubin (test_remaining_families.py), a kernel whose
// threads each need 8000 bytes of stack (ptxas -v: "8000 bytes stack frame"), more than the
// context's default of 1 KiB, so that its first launch grows the stack of every resident thread:
//   nvcc -cubin -arch=sm_90 -o local_sm90.cubin local.cu   (CUDA 13.0)
// With a null `out` the kernels touch no memory, so the tests can launch them on a real GPU
// without an allocation of their own (tests/gpu/test_stack_growth_real.py).
extern "C" __global__ void big_stack(float *out, int n)
{
    float a[2000];
    for (int i = 0; i < 2000; i++)
        a[(i * 7 + n) % 2000] = (float)(i * n);
    if (out)
        out[threadIdx.x] = a[(n * 13) % 2000];
}

extern "C" __global__ void no_stack(float *out)
{
    if (out)
        out[threadIdx.x] = 1;
}
