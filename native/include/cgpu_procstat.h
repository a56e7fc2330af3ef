/* /proc/<pid>/stat, read once for the shim and the simulator alike. */
#ifndef CGPU_PROCSTAT_H
#define CGPU_PROCSTAT_H

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* State (field 3), kernel flags (field 9) and start time in clock ticks since boot
 * (field 22) of the process whose stat file is `path`.  Returns 1, or 0 when it cannot
 * be read. */
static inline int cgpu_proc_stat_flags(const char *path, char *state, unsigned long *flags,
                                       unsigned long long *start_time)
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

/* State and start time only. */
static inline int cgpu_proc_stat(const char *path, char *state, unsigned long long *start_time)
{
    unsigned long flags;
    return cgpu_proc_stat_flags(path, state, &flags, start_time);
}

/* PF_EXITING in field 9: the process is on its way out (set before its files close). */
#define CGPU_PF_EXITING 0x4ul

#endif
