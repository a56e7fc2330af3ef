/* What the sim_bytes probe's files share: the CHECK/OK/RC macros that end
 * the run on a failed check, the helpers every command uses (the driver
 * looked up by name for the entry points cuda.h hides, the primary context,
 * deterministic byte patterns and kernel time queued on a stream), and the
 * commands themselves, one per argv[1], which sim_bytes.c dispatches.  The
 * commands live in sim_bytes_copies.c, sim_bytes_streams.c, sim_bytes_vmm.c
 * and sim_bytes_host.c; the helpers in sim_bytes_common.c. */
#ifndef SIM_BYTES_H
#define SIM_BYTES_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "probe_check.h"

/* ---- helpers (sim_bytes_common.c) ---- */

/* Finds the driver this program is linked against; fails the run if absent. */
void bytes_init(void);
/* The driver's entry point `name`, looked up at run time. */
void *sym(const char *name);
/* cuInit, then device 0's primary context, made current. */
CUcontext setup(void);
/* A deterministic pattern, different per seed. */
void fill(unsigned char *p, size_t n, unsigned seed);
/* Queue `ms` milliseconds of kernel time on `s`. */
void busy(CUstream s, unsigned long long ms);

/* ---- commands: print "ok" (or their measurements) and return 0 ---- */

int cmd_copies(void);                   /* sim_bytes_copies.c */
int cmd_pitched(void);
int cmd_memset(void);                   /* sim_bytes_streams.c */
int cmd_order(void);
int cmd_threads(void);
int cmd_vmm(void);                      /* sim_bytes_vmm.c */
int cmd_vmmshare(void);
int cmd_ipc(void);
int cmd_host(void);                     /* sim_bytes_host.c */
int cmd_errors(void);
int cmd_lazy(int argc, char **argv);

#endif
