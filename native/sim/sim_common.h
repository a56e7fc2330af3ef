/* Shared by the simulated libcuda.so.1 and libnvidia-ml.so.1: the
 * configuration read from CGPU_SIM_* and the optional cross-process state file
 * (CGPU_SIM_STATE).  Compiled into both libraries, with hidden visibility. */
#ifndef CGPU_SIM_COMMON_H
#define CGPU_SIM_COMMON_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

#include "cgpu_names.h"

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
    unsigned long long slice_ns;                     /* CGPU_SIM_SLICE_NS: context timeslice */
    unsigned long long switch_ns;                    /* CGPU_SIM_SWITCH_NS: context switch */
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
#define SIM_STATE_VERSION 3u
#define SIM_STATE_DEVICES 32
#define SIM_STATE_SLOTS 1024

/* ---- The timeline ------------------------------------------------------
 * A device runs one context at a time, as a GPU without MPS does: within a
 * process its kernels run in launch order; processes with queued work take
 * turns in timeslices (CGPU_SIM_SLICE_NS), a kernel preempted at the end of
 * its slice resumes in the process's next one, and each change of process
 * costs CGPU_SIM_SWITCH_NS of idle device time.  A process's work on a device
 * is two counters, ns queued and ns run (struct sim_work): a kernel is done
 * when `done` reaches the `queued` value its launch left (its mark).  The
 * schedule is computed lazily: whoever needs it (a launch, a query, a wait,
 * NVML) advances it to now under the device's robust mutex.  Time is
 * CLOCK_MONOTONIC in ns.  Busy time is kept in 10 ms buckets: a ring of
 * SIM_TL_BUCKETS words, each (bucket number << 24 | busy ns in that bucket),
 * updated with CAS; a word whose tag is not the bucket asked for counts as 0.
 * The intervals a process actually ran are added to the device's and the
 * process's buckets as the schedule advances past them. */
#define SIM_TL_BUCKET_NS 10000000ULL                 /* 10 ms */
#define SIM_TL_BUCKETS 2048                          /* 20.48 s ring */
#define SIM_TL_HISTORY 1000                          /* buckets readable back: 10 s */
#define SIM_TL_AHEAD_NS 10000000000ULL               /* queued work at most 10 s ahead */
#define SIM_TL_MAX_KERNEL_NS SIM_TL_AHEAD_NS         /* longest kernel */
#define SIM_TL_NS_BITS 24
#define SIM_SLOT_TL 4                                /* devices with a per-process timeline */
#define SIM_RUNQ 64                                  /* processes with queued work on a device */
#define SIM_SEGS 64                                  /* run intervals a process's work keeps */

struct sim_tl {
    _Atomic unsigned long long b[SIM_TL_BUCKETS];
};

/* One run interval: from t0, `len` ns of the work from w0 on. */
struct sim_seg {
    unsigned long long t0, w0, len;
};

/* A process's work on one device (written under the device's mutex). */
struct sim_work {
    unsigned long long queued;                       /* kernel ns queued, ever */
    _Atomic unsigned long long done;                 /* of them, ns run */
    unsigned long long nseg;                         /* run intervals recorded, ever */
    struct sim_seg seg[SIM_SEGS];                    /* the last SIM_SEGS of them */
};

/* A device's schedule.  Run-queue entries are work ids: slot * SIM_SLOT_TL + index
 * of the slot's timeline (0 on a private timeline). */
struct sim_tl_dev {
    pthread_mutex_t mu;                              /* pshared, robust */
    unsigned long long at;                           /* advanced up to this time (0: never) */
    unsigned long long run_from;                     /* the current context runs from here */
    unsigned long long slice_end;                    /* its timeslice ends here */
    int cur;                                         /* work id running + 1; 0: none */
    int last;                                        /* work id that ran last + 1 */
    int nrq;
    int rq[SIM_RUNQ];                                /* round-robin order, rq[0] runs */
    _Atomic unsigned long long busy_ns;              /* all kernel time ever run */
    unsigned long long switches;                     /* context switches, ever */
    struct sim_tl tl;
};

struct sim_state_slot {
    _Atomic int pid;                                 /* 0: free */
    unsigned int pad;
    _Atomic unsigned long long start_time;           /* /proc/<pid>/stat field 22 */
    _Atomic unsigned long long used[SIM_STATE_DEVICES];
    _Atomic unsigned int contexts[SIM_STATE_DEVICES];
    _Atomic unsigned long long busy[SIM_STATE_DEVICES]; /* kernel ns run, per device */
    _Atomic int tl_dev[SIM_SLOT_TL];                 /* state device + 1 of tl[i]; 0: unused */
    struct sim_tl tl[SIM_SLOT_TL];
    struct sim_work work[SIM_SLOT_TL];               /* its work on that device */
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
/* A device's schedule (sim_timeline.c).  `f`: the state file, or NULL for a
 * private timeline whose only work is `priv` (id 0). */
struct sim_sched {
    struct sim_state_file *f;
    struct sim_tl_dev *d;
    struct sim_work *priv;
    int sdev;                                        /* state device, or -1 */
    unsigned long long slice, sw;                    /* timeslice and switch cost, ns */
    int (*alive)(int pid, unsigned long long start_time); /* sim_pid_alive, or NULL */
};
/* Initialise a device's schedule lock (sim_state.c). */
int sim_tl_dev_init(struct sim_tl_dev *d);
void sim_sched_lock(const struct sim_sched *s);
void sim_sched_unlock(const struct sim_sched *s);
/* Run the queued work up to `now` (locked). */
void sim_sched_advance(const struct sim_sched *s, unsigned long long now);
/* Queue `ns` of work `id` (locked): its mark, or 0 when the run queue is full. */
unsigned long long sim_sched_queue(const struct sim_sched *s, int id, struct sim_work *w,
                                   unsigned long long ns);
/* Work queued on the device and not yet run (locked). */
unsigned long long sim_sched_pending(const struct sim_sched *s);
/* When `w` reached `mark` (locked, mark <= done): from its run intervals, or
 * the oldest one kept where they no longer reach back. */
unsigned long long sim_work_time(const struct sim_work *w, unsigned long long mark);
/* The per-process timeline of `slot` for state device `sdev`, assigning one
 * if `create`; NULL if none (all SIM_SLOT_TL taken, or not created). */
struct sim_tl *sim_slot_tl(struct sim_state_slot *slot, int sdev, int create);

#endif
