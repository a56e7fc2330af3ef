/* The simulator's memory contents: one command per run (argv[1]), driven by
 * tests/sim/test_sim_bytes.py.  Every copy family moves real bytes, sets
 * write their patterns, VMM mappings of one handle share bytes, pinned host
 * memory and pointer attributes answer as the driver's do, and device memory
 * costs only the pages touched.  This file holds the command table only; the
 * commands live by topic in sim_bytes_copies.c, sim_bytes_streams.c,
 * sim_bytes_vmm.c and sim_bytes_host.c, their shared helpers in
 * sim_bytes_common.c (see sim_bytes.h).  An unknown command exits 2. */
#include "sim_bytes.h"

#include <string.h>

static const struct command {
    const char *name;
    int (*run)(void);
    int (*run_args)(int argc, char **argv); /* the commands that read argv[2...] */
} commands[] = {
    {"copies", cmd_copies, NULL},
    {"pitched", cmd_pitched, NULL},
    {"memset", cmd_memset, NULL},
    {"vmm", cmd_vmm, NULL},
    {"lazy", NULL, cmd_lazy},
    {"order", cmd_order, NULL},
    {"host", cmd_host, NULL},
    {"errors", cmd_errors, NULL},
    {"ipc", cmd_ipc, NULL},
    {"threads", cmd_threads, NULL},
    {"vmmshare", cmd_vmmshare, NULL},
};

int main(int argc, char **argv)
{
    bytes_init();
    if (argc < 2)
        return 2;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        const struct command *k = &commands[i];
        if (!strcmp(argv[1], k->name))
            return k->run ? k->run() : k->run_args(argc, argv);
    }
    return 2;
}
