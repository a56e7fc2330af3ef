/* Prints what a CUDA program sees of its slices: "refused <rc>" when cuInit fails,
 * else one "slice <ordinal> <bytes>" line per device (cuDeviceTotalMem_v2).
 * The driver is found with dlopen/dlsym, as cudart and frameworks find it. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

int main(void)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        fprintf(stderr, "limit_probe: %s\n", dlerror());
        return 2;
    }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(cuda, "cuInit");
    int (*count)(int *) = (int (*)(int *))dlsym(cuda, "cuDeviceGetCount");
    int (*get)(int *, int) = (int (*)(int *, int))dlsym(cuda, "cuDeviceGet");
    int (*total)(size_t *, int) = (int (*)(size_t *, int))dlsym(cuda, "cuDeviceTotalMem_v2");
    if (!init || !count || !get || !total)
        return 2;
    int rc = init(0);
    if (rc != 0) {
        printf("refused %d\n", rc);
        return 3;
    }
    int n = 0;
    if (count(&n) != 0)
        return 2;
    for (int i = 0; i < n; i++) {
        int dev;
        size_t bytes = 0;
        if (get(&dev, i) != 0 || total(&bytes, dev) != 0)
            return 2;
        printf("slice %d %zu\n", i, bytes);
    }
    return 0;
}
