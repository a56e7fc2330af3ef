/* Shared by the simulated libcuda.so.1 and libnvidia-ml.so.1: the
 * configuration read from CGPU_SIM_* and the optional cross-process state file
 * (CGPU_SIM_STATE).  Compiled into both libraries, with hidden visibility. */
#ifndef CGPU_SIM_COMMON_H
#define CGPU_SIM_COMMON_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

#define SIM_API __attribute__((visibility("default")))

#define SIM_MAX_DEVICES 16
#define SIM_UUID_LEN 96
#define SIM_NAME_LEN 96
#define SIM_PATH_LEN 4096
#define SIM_RELEASE_LEN 32

struct sim_config {
    int ndev;
    unsigned long long memory[SIM_MAX_DEVICES];
    unsigned long long other_used[SIM_MAX_DEVICES];
    char uuid[SIM_MAX_DEVICES][SIM_UUID_LEN];        /* "GPU-xxxxxxxx-...", lower case */
    unsigned char uuid_bytes[SIM_MAX_DEVICES][16];
    char name[SIM_NAME_LEN];
    unsigned long long ctx_overhead;
    unsigned long long granularity;                  /* power of two */
    int driver_version;                              /* CGPU_SIM_DRIVER_VERSION, e.g. 13000 */
    char driver_release[SIM_RELEASE_LEN];            /* CGPU_SIM_DRIVER_RELEASE, e.g. "580.65.06" */
    char faults[SIM_PATH_LEN];                       /* "" when unset */
    char state[SIM_PATH_LEN];                        /* "" when unset */
    unsigned long long kernel_ns;                    /* CGPU_SIM_KERNEL_NS */
    unsigned int queue_depth;                        /* CGPU_SIM_QUEUE_DEPTH */
    unsigned long long timeslice_ns;                 /* CGPU_SIM_TIMESLICE_NS */
    unsigned long long util_period_ns;               /* CGPU_SIM_UTIL_PERIOD_NS */
    int util_exact;                                  /* CGPU_SIM_UTIL_ATTRIBUTION=exact */
};

/* PCI location of simulated device i (domain 0, device 0, function 0). */
#define SIM_PCI_BUS(i) (0x18u + 8u * (unsigned)(i))
#define SIM_PCI_DEVICE_ID 0x233010DEu
#define SIM_PCI_SUBSYS_ID 0x16C110DEu

/* Read the CGPU_SIM_* environment.  On a malformed value prints one line to
 * stderr naming the variable and returns -1. */
int sim_config_load(struct sim_config *cfg);

/* Parse "123", "4KiB", "2M", "16GiB", ...  (powers of 1024).  0 on success. */
int sim_parse_size(const char *s, unsigned long long *out);

/* Parse "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (case-insensitive). */
int sim_parse_uuid(const char *s, unsigned char bytes[16]);

/* Parse a PCI bus id "[domain:]bus:device[.function]" (hex).  0 on success. */
int sim_parse_busid(const char *s, unsigned *domain, unsigned *bus, unsigned *device);

/* ---- The state file ----------------------------------------------------
 * A fixed-layout file, mmap'd MAP_SHARED by every process using the
 * simulator with the same CGPU_SIM_STATE.  Devices are keyed by UUID.  Each
 * process owns one slot (claimed under the robust mutex) and updates its own
 * counters with atomics; readers sum the slots of live processes. */
#define SIM_STATE_MAGIC 0x4d495347u /* "GSIM" */
#define SIM_STATE_VERSION 2u
#define SIM_STATE_DEVICES 32
#define SIM_STATE_SLOTS 1024

/* ---- The timeline ------------------------------------------------------
 * Kernels run one at a time per device.  Time is CLOCK_MONOTONIC in ns.  Busy
 * time is kept in 10 ms buckets: a ring of SIM_TL_BUCKETS words, each
 * (bucket number << 24 | busy ns in that bucket), updated with CAS; a word
 * whose tag is not the bucket asked for counts as 0.  A kernel's busy time is
 * added to the buckets when it is launched (its interval is known then), so
 * only buckets that have ended are read back. */
#define SIM_TL_BUCKET_NS 10000000ULL                 /* 10 ms */
#define SIM_TL_BUCKETS 2048                          /* 20.48 s ring */
#define SIM_TL_HISTORY 1000                          /* buckets readable back: 10 s */
#define SIM_TL_AHEAD_NS 10000000000ULL               /* queued work at most 10 s ahead */
#define SIM_TL_MAX_KERNEL_NS SIM_TL_AHEAD_NS         /* longest kernel */
#define SIM_TL_NS_BITS 24
#define SIM_SLOT_TL 4                                /* devices with a per-process timeline */

struct sim_tl {
    _Atomic unsigned long long b[SIM_TL_BUCKETS];
};

struct sim_tl_dev {
    _Atomic unsigned long long busy_until;           /* end of the last queued kernel */
    _Atomic unsigned long long busy_ns;              /* all kernel time ever queued */
    struct sim_tl tl;
};

struct sim_state_slot {
    _Atomic int pid;                                 /* 0: free */
    unsigned int pad;
    _Atomic unsigned long long start_time;           /* /proc/<pid>/stat field 22 */
    _Atomic unsigned long long used[SIM_STATE_DEVICES];
    _Atomic unsigned int contexts[SIM_STATE_DEVICES];
    _Atomic unsigned long long busy[SIM_STATE_DEVICES]; /* kernel ns queued, per device */
    _Atomic int tl_dev[SIM_SLOT_TL];                 /* state device + 1 of tl[i]; 0: unused */
    struct sim_tl tl[SIM_SLOT_TL];
};

struct sim_state_file {
    unsigned int magic;
    unsigned int version;
    unsigned int header_size;                        /* offsetof(slots) */
    unsigned int slot_size;
    unsigned int ndevices_max;
    unsigned int nslots;
    _Atomic unsigned int ndevices;                   /* registered UUIDs */
    _Atomic unsigned int high_water;                 /* slots[0, high_water) ever used */
    pthread_mutex_t lock;                            /* pshared, robust */
    char uuid[SIM_STATE_DEVICES][SIM_UUID_LEN];
    struct sim_tl_dev dev[SIM_STATE_DEVICES];
    struct sim_state_slot slots[SIM_STATE_SLOTS];
};

struct sim_state {
    struct sim_state_file *f;
    int self_pid;                                    /* owner of a claimed slot, else 0 */
};

struct sim_proc_usage {
    int pid;
    unsigned long long used;
};

/* Map (creating if needed) the state file.  NULL on error (one line on stderr). */
struct sim_state *sim_state_open(const char *path);
void sim_state_lock(struct sim_state *st);
void sim_state_unlock(struct sim_state *st);
/* Index of `uuid` in the file, registering it if new; -1 if the table is full. */
int sim_state_device(struct sim_state *st, const char *uuid);
/* Claim a slot for the calling process; -1 if all are taken by live processes. */
int sim_state_claim(struct sim_state *st);
/* Bytes used on state device `sdev` by all live processes. */
unsigned long long sim_state_used(struct sim_state *st, int sdev);
/* Live processes with memory or a context on `sdev`; returns how many there
 * are (fills at most `max`). */
int sim_state_procs(struct sim_state *st, int sdev, struct sim_proc_usage *out, int max);
int sim_pid_alive(int pid, unsigned long long start_time);
unsigned long long sim_proc_start_time(int pid);

/* ---- Timeline (sim_timeline.c) ---- */
unsigned long long sim_now_ns(void);
/* This process's pid as the kernel's /proc shows it (readlink /proc/self): the
 * host's pid when /proc is the host's, as NVML reports it; getpid() otherwise. */
int sim_host_pid(void);
/* Sleep until monotonic time `t` (ns). */
void sim_sleep_until(unsigned long long t);
/* Add the busy interval [s, e) to `tl`. */
void sim_tl_add(struct sim_tl *tl, unsigned long long s, unsigned long long e);
/* Busy ns in buckets [b0, b1) (bucket numbers, t / SIM_TL_BUCKET_NS). */
unsigned long long sim_tl_busy(const struct sim_tl *tl, unsigned long long b0, unsigned long long b1);
/* Queue a kernel of `dur` ns that may start at `earliest` on `d`: 0 and
 * *start set, or the monotonic time to wait for before trying again (the
 * device's queue reaches SIM_TL_AHEAD_NS past `now`). */
unsigned long long sim_tl_reserve(struct sim_tl_dev *d, unsigned long long now,
                                  unsigned long long earliest, unsigned long long dur,
                                  unsigned long long *start);
/* The per-process timeline of `slot` for state device `sdev`, assigning one
 * if `create`; NULL if none (all SIM_SLOT_TL taken, or not created). */
struct sim_tl *sim_slot_tl(struct sim_state_slot *slot, int sdev, int create);

#endif
