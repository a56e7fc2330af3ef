/* Stream-ordered allocation on a stream of its own: the fastest of 200 batches of 1000
 * cuMemAllocAsync + cuMemFreeAsync pairs (4 KiB), in ns a pair (docs/performance.md).
 *
 *   cc -O2 -I<cuda>/include benchmarks/async_alloc_bench.c -o async_alloc_bench \
 *      -L<driver dir> -l:libcuda.so.1
 *   [LD_PRELOAD=libcgpu.so CGPU_MEM_LIMIT=8GiB CGPU_LEDGER_DIR=<empty dir>] ./async_alloc_bench
 */
#include <cuda.h>
#include <stdio.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(void){
  CUcontext c; CUstream s; CUdeviceptr p;
  cuInit(0); cuDevicePrimaryCtxRetain(&c,0); cuCtxSetCurrent(c); cuStreamCreate(&s,1);
  double best=1e18;
  for(int r=0;r<200;r++){ double t0=now(); for(int i=0;i<1000;i++){ cuMemAllocAsync(&p,4096,s); cuMemFreeAsync(p,s);} double d=(now()-t0)/1000; if(d<best)best=d; }
  printf("%.0f\n",best); return 0; }
