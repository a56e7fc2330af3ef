/* A preloaded library that wraps getpid() the usual way, with dlsym(RTLD_NEXT).
 * If the shim's dlsym changed what RTLD_NEXT means, this would call itself. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/types.h>
#include <unistd.h>

static int calls;

pid_t getpid(void)
{
    pid_t (*next)(void) = (pid_t(*)(void))dlsym(RTLD_NEXT, "getpid");
    if (++calls > 100 || !next)
        _exit(97); /* recursion: RTLD_NEXT resolved to ourselves */
    pid_t p = next();
    calls--;
    return p;
}
