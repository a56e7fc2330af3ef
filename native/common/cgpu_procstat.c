/* /proc/<pid>/stat: the one parser, for the shim and the simulator (cgpu_procstat.h). */
#include "cgpu_procstat.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int cgpu_proc_stat_flags(const char *path, char *state, unsigned long *flags, unsigned long long *start_time)
{
    char buf[1024];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (!p || p[1] != ' ' || !p[2])
        return 0;
    *state = p[2];
    p++; /* the space before field 3 */
    *flags = 0;
    for (int field = 3; field < 22 && p; field++) {
        p = strchr(p + 1, ' ');
        if (p && field == 8)
            *flags = strtoul(p + 1, NULL, 10); /* p is now before field 9 */
    }
    *start_time = p ? strtoull(p + 1, NULL, 10) : 0;
    return 1;
}

int cgpu_proc_stat(const char *path, char *state, unsigned long long *start_time)
{
    unsigned long flags;
    return cgpu_proc_stat_flags(path, state, &flags, start_time);
}

int cgpu_pid_stat(int pid, char *state, unsigned long *flags, unsigned long long *start_time)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/stat", pid, pid);
    return cgpu_proc_stat_flags(path, state, flags, start_time);
}

int cgpu_self_stat(char *state, unsigned long long *start_time)
{
    int main_thread = syscall(SYS_gettid) == getpid();
    return cgpu_proc_stat(main_thread ? "/proc/thread-self/stat" : "/proc/self/stat", state, start_time);
}
