/* A process whose main thread exits (pthread_exit) while a worker keeps its connection to the
 * arbiter and saturates: GRANT opens its turn, REVOKE is answered with DONE after DRAIN_MS (its
 * work draining), then it wants again. Prints "G <t>" at each turn's grant and "D <t>" when it
 * answers DONE, t in CLOCK_MONOTONIC seconds (Python's time.monotonic()).
 * usage: mainexit DIR UUID DRAIN_MS */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct msg { uint32_t type, dev; uint64_t a, b; char text[40]; };
static const char *dir, *uuid;
static long drain_ms;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

static void say(int fd, uint32_t type, uint64_t a, uint64_t b, const char *text)
{
    struct msg m = {type, 0, a, b, {0}};
    if (text) strncpy(m.text, text, sizeof m.text);
    if (send(fd, &m, sizeof m, MSG_NOSIGNAL) != sizeof m) exit(3);
}

static void *worker(void *unused)
{
    (void)unused;
    /* thread-self: once the main thread has exited, /proc/self/fd is empty */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "/proc/thread-self/fd/%d/compute.sock", dfd);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (dfd < 0 || fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        perror("mainexit: connect");
        exit(2);
    }
    say(fd, 1, 1, (uint64_t)getpid(), NULL);
    say(fd, 2, 0, 0, uuid);
    say(fd, 3, 0, 0, NULL);
    int held = 0;
    for (;;) {
        struct msg m;
        if (recv(fd, &m, sizeof m, 0) != sizeof m) exit(0); /* the arbiter went: done */
        if (m.type == 10 && !held) {
            held = 1;
            printf("G %.6f\n", now());
            fflush(stdout);
        } else if (m.type == 11) {
            struct timespec t = {drain_ms / 1000, (drain_ms % 1000) * 1000000L};
            nanosleep(&t, NULL);
            held = 0;
            printf("D %.6f\n", now());
            fflush(stdout);
            say(fd, 4, m.a, 0, NULL);
            say(fd, 3, 0, 0, NULL);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 4) return 1;
    dir = argv[1], uuid = argv[2], drain_ms = atol(argv[3]);
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
    pthread_exit(NULL); /* the main thread ends; the process lives on in its worker */
}
