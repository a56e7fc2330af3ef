/* The arbiter's client: this process's side of the GPU time-slice tokens (see token.h).
 *
 * The compute thread connects to <ledger dir>/compute.sock (SOCK_SEQPACKET, one 64-byte message
 * per packet; cgpu/compute/protocol.py is the other side), says which GPUs it may launch on, and
 * then serves the arbiter:
 *   GRANT   open the gate, wake the launchers waiting for it; its text carries the work budget
 *           of a grant (ns, 0: none): the gate then admits about that much work at the time per
 *           launch this process has learnt from its own turns (their length over the launches in
 *           them), at least one launch, and the launch that reaches it closes the gate and says
 *           SPENT (with the work it estimates it queued), so the arbiter can end the turn when
 *           that work has run, or renew the grant (another GRANT) when nobody is owed the GPU;
 *   REVOKE  close the gate, wait until no launch is between the gate and the driver, wait for the
 *           work this process launched on that GPU (cuCtxSynchronize in each context that
 *           launched there), answer DONE;
 *   REFUSE  the host gives this container no compute limit on that GPU, and gates nobody there:
 *           the gate stays open (for a best-effort GPU, until the next connection).
 * A container without a limit on a GPU takes turns there as best effort (what the limited ones
 * leave) where the arbiter gates it: the arbiter then has a socket in its directory, and each
 * process that finds it there at its first launch lookup declares all of its GPUs.
 * It also tells the arbiter when the process stops using a GPU it holds (IDLE: no launch for
 * IDLE_NS, and then the work it launched has finished) and when it starts again (BUSY), so an
 * idle holder gives the GPU up at once, and a process that waits for its own results does not.
 * A launcher that finds the gate closed sends WANT itself (once per grant) and sleeps on a futex
 * until a GRANT.
 *
 * If the arbiter goes away, the gates close and the thread tries to reconnect every
 * RECONNECT_EVERY_NS; after RECONNECT_NS without one, token_run returns and the NVML controller
 * takes over (compute.c), so no launch waits long on a daemon that is not there: a restart idles
 * the GPU for RECONNECT_NS at most. The controller looks for a new socket every 100 ms (a socket
 * file that refused a connection is not looked at again until it is replaced). */
#include "token.h"

#include <errno.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define TOKEN_SOCKET CGPU_COMPUTE_SOCKET_NAME
#define PROTOCOL_VERSION 1
#define IDLE_NS 1000000LL          /* no launch this long while holding: IDLE */
#define POLL_MS 1                  /* the thread's tick while it holds a GPU */
#define RECONNECT_NS 150000000LL   /* without the arbiter this long: back to the NVML controller */
#define RECONNECT_EVERY_NS 10000000L /* a reconnection attempt this often until then */
#define MAX_CTX 8                  /* contexts remembered per device */
#define WANT_AGAIN_MS 200u         /* a WANT unanswered this long is sent again */
#define FEATURE_DONE_WANTS 1u      /* a GRANT's features: a DONE's b = 1 is a WANT */
#define GRANT_COUNTED 2u           /* and: count this grant's budget however many launches */
#define MAX_BUDGET_LAUNCHES 8      /* a budget of more launches than this: none (the quantum rules) */

enum {
    MSG_HELLO = 1,
    MSG_DEV = 2,
    MSG_WANT = 3,
    MSG_DONE = 4,
    MSG_IDLE = 5,
    MSG_BUSY = 6,
    MSG_SPENT = 7,
    MSG_GRANT = 10,
    MSG_REVOKE = 11,
    MSG_REFUSE = 12,
};

struct token_msg {
    uint32_t type;
    uint32_t dev;
    uint64_t a;
    uint64_t b;
    char text[40];
};
_Static_assert(sizeof(struct token_msg) == 64, "the arbiter's message is 64 bytes");

struct token_gate g_token;

/* ---- the launching threads' slots ----------------------------------------------------- */

struct token_slot token_no_slot;
__thread struct token_slot *token_my_slot __attribute__((tls_model("initial-exec")));
static struct token_slot slot_table[TOKEN_SLOTS];
static struct {
    int ok;                               /* membarrier is ours: threads may take slots */
    unsigned used;                        /* slots ever taken (a high-water mark) */
    uint64_t retired[CGPU_MAX_DEVICES];   /* launches of the threads that have ended */
    pthread_key_t key;                    /* its destructor gives an ending thread's slot back */
    int key_made;
    pthread_once_t once;
} slots = {.once = PTHREAD_ONCE_INIT};

static void slot_release(void *p)
{
    struct token_slot *s = p;
    for (unsigned d = 0; d < CGPU_MAX_DEVICES; d++) {
        uint64_t n = __atomic_exchange_n(&s->launches[d], 0, __ATOMIC_RELAXED);
        __atomic_fetch_add(&slots.retired[d], n, __ATOMIC_RELAXED);
        __atomic_store_n(&s->inflight[d], 0, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&s->owner, 0, __ATOMIC_RELEASE);
}

static void make_key(void)
{
    slots.key_made = pthread_key_create(&slots.key, slot_release) == 0;
}

void token_enable_slots(void)
{
    if (__atomic_load_n(&slots.ok, __ATOMIC_ACQUIRE))
        return;
    pthread_once(&slots.once, make_key);
    if (!slots.key_made || syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0)
        return; /* refused (an old kernel, a seccomp profile): the shared counters */
    __atomic_store_n(&slots.ok, 1, __ATOMIC_RELEASE);
}

struct token_slot *token_claim_slot(void)
{
    struct token_slot *s = &token_no_slot;
    if (__atomic_load_n(&slots.ok, __ATOMIC_ACQUIRE))
        for (unsigned i = 0; i < TOKEN_SLOTS; i++) {
            uint32_t none = 0;
            if (__atomic_compare_exchange_n(&slot_table[i].owner, &none, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
                if (pthread_setspecific(slots.key, &slot_table[i]) != 0) {
                    __atomic_store_n(&slot_table[i].owner, 0, __ATOMIC_RELEASE);
                    break;
                }
                s = &slot_table[i];
                unsigned used = __atomic_load_n(&slots.used, __ATOMIC_RELAXED);
                while (used < i + 1 &&
                       !__atomic_compare_exchange_n(&slots.used, &used, i + 1, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
                    ;
                break;
            }
        }
    token_my_slot = s;
    return s;
}

/* Launches admitted on `dev`, ever: the shared counter's, the slots', the ended threads'. */
static uint64_t launches(int dev)
{
    uint64_t n = __atomic_load_n(&g_token.launches[dev], __ATOMIC_RELAXED) +
                 __atomic_load_n(&slots.retired[dev], __ATOMIC_RELAXED);
    unsigned used = __atomic_load_n(&slots.used, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < used; i++)
        n += __atomic_load_n(&slot_table[i].launches[dev], __ATOMIC_RELAXED);
    return n;
}

/* Whether a launch on `dev` is between the gate and the driver. */
static int inflight(int dev)
{
    if (__atomic_load_n(&g_token.inflight[dev], __ATOMIC_SEQ_CST) > 0)
        return 1;
    unsigned used = __atomic_load_n(&slots.used, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < used; i++)
        if (__atomic_load_n(&slot_table[i].inflight[dev], __ATOMIC_ACQUIRE))
            return 1;
    return 0;
}

typedef int (*ctx_fn)(void *);
typedef int (*ctx_out_fn)(void **);
typedef int (*sync_fn)(void);

static struct {
    int fd;                               /* the arbiter connection, -1 when none */
    pthread_mutex_t send_lock;            /* launchers send WANT beside the thread */
    pthread_mutex_t ctx_lock;
    void *ctx[CGPU_MAX_DEVICES][MAX_CTX]; /* contexts that launched, per device */
    unsigned nctx[CGPU_MAX_DEVICES];
    int refused[CGPU_MAX_DEVICES];        /* no limit here, says the host */
    uint64_t seen[CGPU_MAX_DEVICES];      /* launches at the last look */
    long long last_launch[CGPU_MAX_DEVICES]; /* when they last changed */
    int idle[CGPU_MAX_DEVICES];           /* IDLE sent since the last GRANT or BUSY */
    int synced[CGPU_MAX_DEVICES];         /* its work had finished, and no launch since */
    int held[CGPU_MAX_DEVICES];           /* a turn: from its first GRANT to the DONE */
    long long turn_start[CGPU_MAX_DEVICES]; /* when the turn's first GRANT came */
    uint64_t turn_launches[CGPU_MAX_DEVICES]; /* launches before the turn */
    uint64_t cost[CGPU_MAX_DEVICES];      /* learnt ns per launch (0: not yet) */
    uint64_t epoch[CGPU_MAX_DEVICES];     /* the latest GRANT's, for SPENT */
    uint64_t work[CGPU_MAX_DEVICES];      /* the work the grant admits, for SPENT */
    long long granted_at[CGPU_MAX_DEVICES]; /* when the latest GRANT came */
    int done_wants;                       /* the arbiter reads a DONE's b as a WANT (GRANT says so) */
    ctx_fn push;
    ctx_out_fn pop;
    sync_fn sync;
} tk = {.fd = -1, .send_lock = PTHREAD_MUTEX_INITIALIZER, .ctx_lock = PTHREAD_MUTEX_INITIALIZER};

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void wake_all(void)
{
    __atomic_fetch_add(&g_token.seq, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &g_token.seq, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
}

static int send_msg(uint32_t type, uint32_t dev, uint64_t a, uint64_t b, const char *text)
{
    struct token_msg m = {.type = type, .dev = dev, .a = a, .b = b};
    if (text)
        memcpy(m.text, text, strnlen(text, sizeof m.text));
    pthread_mutex_lock(&tk.send_lock);
    int fd = tk.fd;
    ssize_t n = fd >= 0 ? send(fd, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT) : -1;
    pthread_mutex_unlock(&tk.send_lock);
    return n == (ssize_t)sizeof m ? 0 : -1;
}

/* ---- the launch side ---------------------------------------------------------------- */

static int wait_turn(int dev);

int token_wait(int dev)
{
    /* Counted before the WANT's look at want_sent, seen by the DONE after it clears it
     * (sequentially consistent on both sides): a launcher that blocks while its process drains
     * is either counted by that DONE or asks itself. */
    __atomic_fetch_add(&g_token.waiting[dev], 1, __ATOMIC_SEQ_CST);
    int held = wait_turn(dev);
    __atomic_fetch_sub(&g_token.waiting[dev], 1, __ATOMIC_SEQ_CST);
    return held;
}

static int wait_turn(int dev)
{
    for (;;) {
        if (__atomic_load_n(&g_token.mode, __ATOMIC_ACQUIRE) != TOKEN_ON)
            return TOKEN_LEFT;
        uint32_t seq = __atomic_load_n(&g_token.seq, __ATOMIC_ACQUIRE);
        int held = token_try(dev);
        if (held >= 0)
            return held;
        /* Ask once per turn, and again every WANT_AGAIN_MS while nothing comes: a WANT that
         * crossed a reconnection or the end of a turn is never the last word. */
        uint32_t last = __atomic_load_n(&g_token.want_sent[dev], __ATOMIC_SEQ_CST);
        uint32_t now = (uint32_t)(now_ns() / 1000000) | 1u; /* ms, never 0 */
        if ((!last || now - last >= WANT_AGAIN_MS) &&
            __atomic_compare_exchange_n(&g_token.want_sent[dev], &last, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            send_msg(MSG_WANT, (uint32_t)dev, 0, 0, NULL);
        struct timespec t = {0, 10000000}; /* a lost wake-up costs at most 10 ms */
        syscall(SYS_futex, &g_token.seq, FUTEX_WAIT_PRIVATE, seq, &t, NULL, 0);
    }
}

int token_spent(int dev, uint64_t n)
{
    if (n == __atomic_load_n(&g_token.stop_at[dev], __ATOMIC_RELAXED)) {
        __atomic_store_n(&g_token.open[dev], 0, __ATOMIC_SEQ_CST);
        /* The work still queued: what the grant admitted, less what has had time to run since
         * it came (short kernels run while the driver's queue fills; long ones barely start),
         * and at least this launch's own, which has only just reached the driver (a launch that
         * waited in the driver behind the last grant's kernel would otherwise say its kernel had
         * run: 6 ms said for a 50 ms kernel, and the next holder was granted beside it). */
        long long left = __atomic_load_n(&tk.granted_at[dev], __ATOMIC_RELAXED) +
                         (long long)__atomic_load_n(&tk.work[dev], __ATOMIC_RELAXED) - now_ns();
        long long one = (long long)__atomic_load_n(&tk.cost[dev], __ATOMIC_RELAXED);
        if (left < one)
            left = one;
        send_msg(MSG_SPENT, (uint32_t)dev, __atomic_load_n(&tk.epoch[dev], __ATOMIC_RELAXED),
                 left > 0 ? (uint64_t)left : 0, NULL);
        return 1;
    }
    __atomic_fetch_sub(&g_token.launches[dev], 1, __ATOMIC_RELAXED);
    return 0;
}

void token_note_context(int dev, void *ctx)
{
    pthread_mutex_lock(&tk.ctx_lock);
    unsigned n = tk.nctx[dev], i = 0;
    while (i < n && tk.ctx[dev][i] != ctx)
        i++;
    if (i == n) {
        if (n == MAX_CTX) /* forget the oldest: a program that cycles contexts keeps its newest */
            memmove(&tk.ctx[dev][0], &tk.ctx[dev][1], sizeof(void *) * (MAX_CTX - 1)), n--;
        tk.ctx[dev][n] = ctx;
        tk.nctx[dev] = n + 1;
    }
    __atomic_store_n(&g_token.last_ctx[dev], ctx, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&tk.ctx_lock);
}

/* ---- REVOKE: close, let the launches in flight reach the driver, wait for their work ---- */

/* Wait for the work this process has launched on `dev` (every context that launched there). */
static void sync_device(int dev)
{
    if (!tk.push || !tk.pop || !tk.sync)
        return;
    void *ctxs[MAX_CTX];
    pthread_mutex_lock(&tk.ctx_lock);
    unsigned n = tk.nctx[dev];
    memcpy(ctxs, tk.ctx[dev], sizeof(void *) * n);
    pthread_mutex_unlock(&tk.ctx_lock);
    for (unsigned i = 0; i < n; i++) {
        void *popped;
        if (tk.push(ctxs[i]) != 0) { /* destroyed since: forget it */
            pthread_mutex_lock(&tk.ctx_lock);
            for (unsigned j = 0; j < tk.nctx[dev]; j++)
                if (tk.ctx[dev][j] == ctxs[i]) {
                    memmove(&tk.ctx[dev][j], &tk.ctx[dev][j + 1], sizeof(void *) * (tk.nctx[dev] - j - 1));
                    tk.nctx[dev]--;
                    break;
                }
            if (__atomic_load_n(&g_token.last_ctx[dev], __ATOMIC_RELAXED) == ctxs[i])
                __atomic_store_n(&g_token.last_ctx[dev], NULL, __ATOMIC_RELAXED);
            pthread_mutex_unlock(&tk.ctx_lock);
            continue;
        }
        tk.sync(); /* an error (a faulted context) has nothing left running either */
        tk.pop(&popped);
    }
}

static void drain(int dev)
{
    __atomic_store_n(&g_token.open[dev], 0, __ATOMIC_SEQ_CST);
    /* Every thread of the process passes a full barrier: one that marked its slot before
     * reading the gate is seen marked below, or reads the gate closed. */
    if (__atomic_load_n(&slots.ok, __ATOMIC_ACQUIRE))
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
    while (inflight(dev)) {
        struct timespec t = {0, 20000};
        nanosleep(&t, NULL);
    }
    sync_device(dev);
}

/* ---- the connection ------------------------------------------------------------------ */

static int sock_path(char *out, size_t n)
{
    return g_shim.dir[0] && snprintf(out, n, "%s/%s", g_shim.dir, TOKEN_SOCKET) < (int)n ? 0 : -1;
}

/* The socket file that last refused a connection (a dead arbiter's): not worth another try
 * until a new arbiter replaces it. Written and read by the compute thread only. */
static dev_t refused_dev;
static ino_t refused_ino;

int token_socket_present(void)
{
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct stat st;
    if (sock_path(path, sizeof path) != 0 || stat(path, &st) != 0)
        return 0;
    return st.st_ino != refused_ino || st.st_dev != refused_dev;
}

static void note_refused(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0) {
        refused_dev = st.st_dev;
        refused_ino = st.st_ino;
    }
}

/* Whether this process has a compute limit on some GPU (else it takes turns as best effort). */
static int limited(void)
{
    for (unsigned d = 0; d < CGPU_MAX_DEVICES; d++)
        if (g_shim.ledger.compute[d])
            return 1;
    return 0;
}

/* Connect and introduce this process: its pid and the GPUs it takes turns on. */
static int connect_arbiter(void)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (sock_path(addr.sun_path, sizeof addr.sun_path) != 0 || access(addr.sun_path, F_OK) != 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        if (errno == ECONNREFUSED)
            note_refused(addr.sun_path);
        close(fd);
        return -1;
    }
    pthread_mutex_lock(&tk.send_lock);
    tk.fd = fd;
    pthread_mutex_unlock(&tk.send_lock);
    int ok = send_msg(MSG_HELLO, 0, PROTOCOL_VERSION, (uint64_t)getpid(), NULL) == 0;
    for (unsigned d = 0; ok && d < g_shim.ledger.l->ndevices && d < CGPU_MAX_DEVICES; d++)
        if (g_shim.ledger.turns[d]) {
            if (!g_shim.ledger.compute[d] && tk.refused[d]) {
                /* Best effort: a REFUSE holds for one connection (the GPU may be gated again). */
                tk.refused[d] = 0;
                __atomic_store_n(&g_token.open[d], 0, __ATOMIC_SEQ_CST);
            }
            char uuid[CGPU_UUID_LEN + 1];
            memcpy(uuid, g_shim.ledger.l->devices[d].uuid, CGPU_UUID_LEN);
            uuid[CGPU_UUID_LEN] = 0;
            /* A UUID the message cannot carry whole: not this protocol's (NVIDIA's are 40). */
            ok = strlen(uuid) <= sizeof(((struct token_msg *)0)->text) && send_msg(MSG_DEV, d, 0, 0, uuid) == 0;
            /* Launchers already waiting: ask again on this connection. */
            if (ok && (__atomic_load_n(&g_token.waiting[d], __ATOMIC_ACQUIRE) ||
                       __atomic_load_n(&g_token.want_sent[d], __ATOMIC_ACQUIRE)))
                ok = send_msg(MSG_WANT, d, 0, 0, NULL) == 0;
        }
    return ok ? 0 : -1;
}

static void disconnect(void)
{
    pthread_mutex_lock(&tk.send_lock);
    if (tk.fd >= 0)
        close(tk.fd);
    tk.fd = -1;
    pthread_mutex_unlock(&tk.send_lock);
    for (unsigned d = 0; d < CGPU_MAX_DEVICES; d++)
        if (!tk.refused[d]) {
            __atomic_store_n(&g_token.open[d], 0, __ATOMIC_SEQ_CST);
            tk.held[d] = 0;
        }
}

/* The grant's last launch: a work budget's worth at the learnt time per launch, at least one;
 * one before a turn has been measured; none (~0) without a budget, or where a process alone would
 * admit more than MAX_BUDGET_LAUNCHES (kernels short beside the quantum: its REVOKE ends the turn
 * soon enough, and the budget would only add messages), unless the GRANT says GRANT_COUNTED
 * (beside a `high` container: what is queued when it asks must be what the arbiter admitted). A
 * process of a container with several busy ones always counts it: each queues its own work ahead
 * (a driver queue each), so without it a container of sixteen had sixteen queues to drain at
 * every REVOKE (turns of 100-200 ms, not 20). Its time per launch, learnt from whole turns, is the GPU time it gets with the others
 * beside it, so the container's processes together admit about the budget. */
static void set_budget(int d, const struct token_msg *m, uint64_t launched)
{
    uint64_t budget;
    uint32_t sharers;
    memcpy(&budget, m->text, sizeof budget); /* little-endian, as the arbiter packs it */
    memcpy(&sharers, m->text + sizeof budget, sizeof sharers); /* 0 from an older arbiter */
    uint32_t features;
    memcpy(&features, m->text + sizeof budget + sizeof sharers, sizeof features); /* ditto */
    tk.done_wants = (features & FEATURE_DONE_WANTS) != 0;
    uint64_t stop = UINT64_MAX, work = 0, cost = tk.cost[d];
    int counted = (features & GRANT_COUNTED) != 0;
    if (budget && (!cost || sharers > 1 || counted || budget / cost <= MAX_BUDGET_LAUNCHES)) {
        uint64_t k = cost && budget / cost ? budget / cost : 1;
        stop = launched + k;
        work = k * cost;
    }
    __atomic_store_n(&tk.epoch[d], m->a, __ATOMIC_RELAXED);
    __atomic_store_n(&tk.work[d], work, __ATOMIC_RELAXED);
    __atomic_store_n(&tk.granted_at[d], now_ns(), __ATOMIC_RELAXED);
    __atomic_store_n(&g_token.stop_at[d], stop, __ATOMIC_RELAXED); /* before the gate opens */
}

/* Once the turn's work has run: learn the time per launch from the turn's length so far over
 * its launches. */
static void learn_cost(int d)
{
    uint64_t n = launches(d) - tk.turn_launches[d];
    long long t = now_ns() - tk.turn_start[d];
    if (!n || t <= 0)
        return;
    uint64_t sample = (uint64_t)t / n;
    /* Atomic: a launcher reads it for SPENT (token_spent). */
    __atomic_store_n(&tk.cost[d], tk.cost[d] ? (tk.cost[d] + sample) / 2 : sample, __ATOMIC_RELAXED);
}

/* After a drain: 1 if the DONE asks for the GPU again for the launchers waiting (it takes the
 * turn's WANT), else 0, and a launcher that blocks from now on asks itself. */
static uint64_t done_wants(int d)
{
    __atomic_store_n(&g_token.want_sent[d], 0, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&g_token.waiting[d], __ATOMIC_SEQ_CST))
        return 0;
    uint32_t zero = 0;
    return __atomic_compare_exchange_n(&g_token.want_sent[d], &zero, (uint32_t)(now_ns() / 1000000) | 1u, 0,
                                       __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
}

static void on_message(const struct token_msg *m)
{
    if (m->dev >= CGPU_MAX_DEVICES || !g_shim.ledger.turns[m->dev])
        return;
    int d = (int)m->dev;
    switch (m->type) {
    case MSG_GRANT:
        tk.idle[d] = tk.synced[d] = 0;
        tk.seen[d] = launches(d);
        tk.last_launch[d] = now_ns();
        if (!tk.held[d]) { /* a turn starts (not a renewal after SPENT) */
            tk.held[d] = 1;
            tk.turn_start[d] = tk.last_launch[d];
            tk.turn_launches[d] = tk.seen[d];
        } else if (!tk.cost[d]) {
            /* Renewed before any turn was measured (alone, so far): the grant admitted one
             * launch; wait for its work once to learn what a launch takes. */
            sync_device(d);
            learn_cost(d);
            uint64_t budget;
            memcpy(&budget, m->text, sizeof budget);
            if (budget && tk.cost[d] > budget) {
                /* That one launch was longer than this grant's budget: its SPENT, sent before
                 * its work was known, said nothing was queued, so the arbiter renewed on credit
                 * the launch has since used (a `fixed` 20 of 200 ms kernels ran two in its first
                 * turn, then nothing for two seconds).  Hand the grant back unused: the arbiter
                 * decides again with the turn charged, and later grants know the cost. */
                __atomic_store_n(&tk.epoch[d], m->a, __ATOMIC_RELAXED);
                __atomic_store_n(&g_token.want_sent[d], 0, __ATOMIC_RELEASE);
                send_msg(MSG_SPENT, (uint32_t)d, m->a, 0, NULL);
                break;
            }
        }
        set_budget(d, m, __atomic_load_n(&g_token.launches[d], __ATOMIC_RELAXED));
        if (m->b <= 10000) /* the container's share, for readers of the ledger */
            __atomic_store_n(&g_shim.ledger.l->compute[d].used, (uint32_t)m->b, __ATOMIC_RELAXED);
        __atomic_store_n(&g_token.want_sent[d], 0, __ATOMIC_RELEASE);
        __atomic_store_n(&g_token.open[d], 1, __ATOMIC_SEQ_CST);
        wake_all();
        break;
    case MSG_REVOKE:
        if (!tk.refused[d]) {
            /* Launchers that block while the work drains wait for the DONE to ask for them
             * (one message, not a WANT and a DONE: two arbiter wake-ups a turn were one), where
             * the arbiter's GRANT said it reads a DONE so (an older one does not). */
            uint32_t last = __atomic_load_n(&g_token.want_sent[d], __ATOMIC_ACQUIRE);
            int ask = tk.done_wants;
            if (ask && !last)
                __atomic_compare_exchange_n(&g_token.want_sent[d], &last, (uint32_t)(now_ns() / 1000000) | 1u,
                                            0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
            drain(d);
            if (tk.held[d])
                learn_cost(d);
            tk.held[d] = 0;
            send_msg(MSG_DONE, (uint32_t)d, m->a, ask ? done_wants(d) : 0, NULL);
        }
        break;
    case MSG_REFUSE:
        tk.refused[d] = 1;
        __atomic_store_n(&g_token.stop_at[d], UINT64_MAX, __ATOMIC_RELAXED);
        __atomic_store_n(&g_token.open[d], 1, __ATOMIC_SEQ_CST);
        wake_all();
        break;
    default:
        break;
    }
}

/* IDLE once a held GPU sees no launch for IDLE_NS (a launch waiting in the driver, whose queue
 * is full, is not idle), then its work has finished, then still no launch for IDLE_NS; BUSY when
 * launches start again. */
static void watch_idle(void)
{
    long long now = now_ns();
    for (unsigned d = 0; d < CGPU_MAX_DEVICES; d++) {
        if (!g_shim.ledger.turns[d] || tk.refused[d] || !__atomic_load_n(&g_token.open[d], __ATOMIC_RELAXED))
            continue;
        uint64_t n = launches((int)d);
        if (n != tk.seen[d] || inflight((int)d)) {
            tk.seen[d] = n;
            tk.last_launch[d] = now;
            tk.synced[d] = 0;
            if (tk.idle[d] && send_msg(MSG_BUSY, d, 0, 0, NULL) == 0)
                tk.idle[d] = 0;
        } else if (!tk.idle[d] && now - tk.last_launch[d] >= IDLE_NS) {
            if (!tk.synced[d]) {
                /* A process waiting for its own results is not idle: wait for them first, then
                 * give it IDLE_NS to launch again (its own wait ends at the same moment). */
                sync_device((int)d);
                tk.synced[d] = 1;
                tk.last_launch[d] = now_ns();
            } else if (send_msg(MSG_IDLE, d, 0, 0, NULL) == 0) {
                tk.idle[d] = 1;
            }
        }
    }
}

/* Serve one connection until it breaks. */
static void serve(void)
{
    for (;;) {
        struct pollfd p = {.fd = tk.fd, .events = POLLIN};
        int r = poll(&p, 1, POLL_MS);
        if (r < 0 && errno != EINTR)
            return;
        if (r > 0) {
            if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
                return;
            struct token_msg m;
            ssize_t n = recv(tk.fd, &m, sizeof m, MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                return;
            if (n == (ssize_t)sizeof m)
                on_message(&m);
        }
        watch_idle();
    }
}

int token_run(void)
{
    if (connect_arbiter() != 0) {
        disconnect();
        return 0;
    }
    tk.push = (ctx_fn)shim_driver_sym("cuCtxPushCurrent_v2");
    tk.pop = (ctx_out_fn)shim_driver_sym("cuCtxPopCurrent_v2");
    tk.sync = (sync_fn)shim_driver_sym("cuCtxSynchronize");
    __atomic_store_n(&g_token.mode, TOKEN_ON, __ATOMIC_RELEASE);
    wake_all();
    for (;;) {
        serve();
        disconnect();
        /* Gone (restarted, upgraded): the gates stay closed while it comes back. */
        long long since = now_ns();
        while (connect_arbiter() != 0) {
            disconnect();
            if (now_ns() - since > RECONNECT_NS) {
                fprintf(stderr, "%s", limited() ? "cgpu: the compute arbiter is gone; the compute limit is kept "
                                                  "from NVML's samples\n"
                                                : "cgpu: the compute arbiter is gone; launches are no longer "
                                                  "gated\n");
                return 1;
            }
            struct timespec t = {0, RECONNECT_EVERY_NS};
            nanosleep(&t, NULL);
        }
    }
}

void token_forget_process(void)
{
    if (tk.fd >= 0)
        close(tk.fd);
    memset(&g_token, 0, sizeof g_token);
    /* This thread alone goes on: the slots are free, and membarrier is the parent's (a
     * process registers its own; until token_enable_slots does, the shared counters). */
    memset(slot_table, 0, sizeof slot_table);
    memset(slots.retired, 0, sizeof slots.retired);
    slots.used = 0;
    slots.ok = 0;
    token_my_slot = NULL;
    if (slots.key_made)
        pthread_setspecific(slots.key, NULL);
    memset(&tk, 0, sizeof tk); /* the driver's functions are looked up again by token_run */
    tk.fd = -1;
    refused_dev = 0;
    refused_ino = 0;
    pthread_mutex_init(&tk.send_lock, NULL);
    pthread_mutex_init(&tk.ctx_lock, NULL);
}
