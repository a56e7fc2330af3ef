/* The helper macros that the shim's and the simulator's C files share, defined here once
 * (tests/core/test_layers.py fails when one of them is #defined anywhere else).
 * Not for cffi: cgpu_api.h never includes it. */
#ifndef CGPU_MACROS_H
#define CGPU_MACROS_H

/* A symbol other objects see (the libraries build with -fvisibility=hidden): the public C API
 * of cgpu_api.h, and the shim's interposed CUDA, NVML and dlsym entry points. */
#define EXPORT __attribute__((visibility("default")))

/* Sanitizer runtimes call dlsym before they are set up: those paths stay uninstrumented. */
#define NO_SANITIZE __attribute__((no_sanitize("address", "thread", "undefined")))

/* Branch hints. */
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

#endif
