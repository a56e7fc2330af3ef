/* A process of the container in the chaos test (test_chaos.py): it churns random
 * allocations through the driver, and so through the shim, until it is told to stop.
 *
 *   chaos_worker SEED MAX_HELD FORK_ONE_IN [MAX_MIB]
 *
 * Each step allocates a random multiple of 2 MiB (2..MAX_MIB MiB, 192 by default, so the shim's charge and
 * the simulator's are the same) while it holds fewer than MAX_HELD, or frees a random
 * one of its allocations.  One step in FORK_ONE_IN (on average) forks a child that
 * allocates and exits: after freeing, without freeing (exit), or without its destructors (_exit).
 *
 * stdin: "hold\n" stops the churn and prints "held BYTES" (what it holds now); then EOF
 * frees everything and prints "freed COUNT BAD OK REFUSED FORKS", and the process exits 0.
 * Every CUDA_ERROR_OUT_OF_MEMORY writes "chaos-worker: refused PID ..." to stderr, after the
 * line the shim writes when it is the one that refused.  Any other failure prints
 * "error ..." and exits 3.
 */
#define _GNU_SOURCE
#include <cuda.h>

#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1ULL << 20)
#define MAX_HELD 64
#define REFUSED "chaos-worker: refused"

static uint64_t rng_state;
static uint64_t max_pages = 96; /* 2 MiB pages */

static uint64_t next_random(void)
{
    uint64_t x = rng_state; /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static size_t random_size(void)
{
    return (size_t)(1 + next_random() % max_pages) * 2 * MiB;
}

static void fail(const char *what, CUresult rc)
{
    printf("error %s %d\n", what, (int)rc);
    exit(3);
}

static void open_device(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUresult rc = cuInit(0);
    if (rc == CUDA_SUCCESS)
        rc = cuDeviceGet(&dev, 0);
    if (rc == CUDA_SUCCESS)
        rc = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (rc == CUDA_SUCCESS)
        rc = cuCtxSetCurrent(ctx);
    if (rc != CUDA_SUCCESS)
        fail("init", rc);
}

/* A forked child: its own slot, one allocation, and one of three ways out. */
static void child(void)
{
    CUdeviceptr p;
    open_device();
    CUresult rc = cuMemAlloc(&p, random_size());
    if (rc == CUDA_ERROR_OUT_OF_MEMORY)
        fprintf(stderr, REFUSED " %d child\n", (int)getpid());
    else if (rc != CUDA_SUCCESS)
        fail("child-alloc", rc);
    switch (next_random() % 3) {
    case 0:
        if (rc == CUDA_SUCCESS && (rc = cuMemFree(p)) != CUDA_SUCCESS)
            fail("child-free", rc);
        exit(0);
    case 1:
        exit(0);
    default:
        _exit(0);
    }
}

static int stdin_ready(void)
{
    struct pollfd pfd = {.fd = 0, .events = POLLIN};
    return poll(&pfd, 1, 0) > 0;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: chaos_worker SEED MAX_HELD FORK_ONE_IN [MAX_MIB]\n");
        return 2;
    }
    rng_state = strtoull(argv[1], NULL, 0) | 1;
    int max_held = atoi(argv[2]);
    uint64_t fork_one_in = strtoull(argv[3], NULL, 0);
    if (argc == 5 && strtoull(argv[4], NULL, 0) >= 2)
        max_pages = strtoull(argv[4], NULL, 0) / 2;
    if (max_held < 1 || max_held > MAX_HELD)
        max_held = MAX_HELD;
    setvbuf(stdout, NULL, _IOLBF, 0);
    open_device();

    CUdeviceptr held[MAX_HELD];
    size_t sizes[MAX_HELD];
    int n = 0;
    unsigned long ok = 0, refused = 0, forks = 0;
    for (unsigned long step = 0;; step++) {
        if (step % 16 == 0 && stdin_ready())
            break;
        if (fork_one_in && next_random() % fork_one_in == 0) {
            fflush(stdout);
            pid_t pid = fork();
            if (pid == 0)
                child();
            if (pid > 0) {
                waitpid(pid, NULL, 0);
                forks++;
            }
            continue;
        }
        if (n < max_held && (n == 0 || next_random() % 2 == 0)) {
            size_t size = random_size();
            CUresult rc = cuMemAlloc(&held[n], size);
            if (rc == CUDA_SUCCESS) {
                sizes[n++] = size;
                ok++;
            } else if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
                fprintf(stderr, REFUSED " %d %lu\n", (int)getpid(), step); /* after the shim's line, if it refused */
                refused++;
            } else {
                fail("alloc", rc);
            }
        } else {
            int k = (int)(next_random() % (uint64_t)n);
            CUresult rc = cuMemFree(held[k]);
            if (rc != CUDA_SUCCESS)
                fail("free", rc);
            held[k] = held[--n];
            sizes[k] = sizes[n];
        }
    }

    char line[64];
    if (fgets(line, sizeof line, stdin) && strncmp(line, "hold", 4) == 0) {
        unsigned long long bytes = 0;
        for (int k = 0; k < n; k++)
            bytes += sizes[k];
        printf("held %llu\n", bytes);
        while (fgets(line, sizeof line, stdin))
            ;
    }
    int bad = 0;
    for (int k = 0; k < n; k++)
        bad += cuMemFree(held[k]) != CUDA_SUCCESS;
    printf("freed %d %d %lu %lu %lu\n", n, bad, ok, refused, forks);
    return 0;
}
