/* /proc/<pid>/stat, read once for the shim and the simulator alike (cgpu_procstat.c). */
#ifndef CGPU_PROCSTAT_H
#define CGPU_PROCSTAT_H

/* State (field 3), kernel flags (field 9) and start time in clock ticks since boot
 * (field 22) of the process whose stat file is `path`.  Returns 1, or 0 when it cannot
 * be read. */
int cgpu_proc_stat_flags(const char *path, char *state, unsigned long *flags, unsigned long long *start_time);

/* State and start time only. */
int cgpu_proc_stat(const char *path, char *state, unsigned long long *start_time);

/* Process `pid`'s fields, read from its main thread's file, /proc/<pid>/task/<pid>/stat:
 * state, flags and start time are the same as in /proc/<pid>/stat, but the kernel does
 * not sum the whole thread group's accounting for it, which stalls for milliseconds while
 * many processes start at once (3 ms median, 64 processes on 2 cores; 7 us this way). */
int cgpu_pid_stat(int pid, char *state, unsigned long *flags, unsigned long long *start_time);

/* This process's fields.  /proc/thread-self is the calling thread as /proc's pid namespace
 * numbers it (getpid() may number it in another): the main thread's file when called from
 * the main thread, else the whole process's. */
int cgpu_self_stat(char *state, unsigned long long *start_time);

/* PF_EXITING in field 9: the process is on its way out (set before its files close). */
#define CGPU_PF_EXITING 0x4ul

#endif
