/* How far a ring's payloads travel, and what a 1 KiB ping-pong between two cores pays for it
 * (issue 15: ni's 1 KiB half round trip is slower than Open MPI's with a third fewer
 * instructions). Two processes pinned to cpus 0 and 1 bounce 1 KiB messages through shared
 * memory; no libni, no Open MPI: only where the bytes go.
 *
 *   gcc -O2 -o /tmp/ring-footprint tests/bench/model/ring-footprint.c
 *   /tmp/ring-footprint MODE ITERS [RING_KIB]
 *
 * MODE 0: ni's window version 10: a header ring of 32-byte slots and, beside it, a payload
 *         area as large, the message at slot i keeping its payload from byte 32·(i mod N): a
 *         1 KiB message takes 32 slots, so each one lands on lines 1 KiB further on;
 *         RING_KIB (default 256, the ring of a 2-member partition) is each part's size.
 * MODE 1: a fast box as Open MPI's vader keeps one: header and payload together, in one of
 *         three places of a 4 KiB box reused over and over.
 * MODE 2: header and payload together, advancing through a ring of RING_KIB.
 * MODE 3: headers advancing one 32-byte slot a message, every payload at the start of the
 *         area (what a layout that reuses the area whenever the ring is empty would do).
 * MODE 4: headers as in mode 0 (1 KiB further on each message), payloads as in mode 3.
 *
 * Each process also prints where its half round trips go, in TSC ticks: "found" from the
 * sender's stamp (taken just before its SEQ store, carried in the header) to the receiver's
 * look that saw the message plus EXIT ticks; "copy" the copy out; "turn" from the copy to
 * the reply's stamp (TURN ticks and the reply's payload copy included). Knobs, to make the
 * model look like a library: LOOK=n pauses a look (default 1), EXIT=ticks of busy work
 * between the look that saw a message and its copy, TURN=ticks between the copy and the
 * reply (libni spends about 90 and 130 there: tests/bench/README.md, stop 40); MEMFD=1 puts
 * the rings in a memfd each process maps itself, and each process's buffer in a memfd of its
 * own, as libni's window and `Ni::alloc` regions are.
 * Prints the mean half round trip past the first tenth. Compare modes within one minute:
 * the machine's figures between two cores jump between clusters (tests/bench/README.md).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#define MSG 1024
#define MAX_RING (256 * 1024)
#define DIR_BYTES (2 * MAX_RING + 4096)

struct hdr {
    volatile uint32_t seq;
    uint32_t len;
    uint64_t tag;
};

static uint32_t ring = 256 * 1024;
static char *base;
static int look_pauses = 1;
static uint64_t exit_ticks, turn_ticks;
/* Sums and counts of the three legs (found, copy, turn); the stamp of the last copy's end. */
static uint64_t sum[3], count[3], copied;

static void busy(uint64_t ticks) {
    uint64_t t = __rdtsc();
    while (__rdtsc() - t < ticks)
        ;
}

static void leg(int k, uint64_t ticks) {
    /* A descheduled process's leg is not a cache line's travel. */
    if (ticks < 100000) {
        sum[k] += ticks;
        count[k]++;
    }
}

static void report(const char *who) {
    fprintf(stderr, "%s: found %.0f copy %.0f turn %.0f ticks\n", who,
            (double)sum[0] / (count[0] ? count[0] : 1), (double)sum[1] / (count[1] ? count[1] : 1),
            (double)sum[2] / (count[2] ? count[2] : 1));
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* A 4 KiB buffer in a memfd of its own (what `Ni::alloc` gives libni), NULL on failure. */
static char *own_buffer(void) {
    int fd = memfd_create("buffer", 0);
    if (fd < 0 || ftruncate(fd, 4096) != 0)
        return NULL;
    char *b = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return b == MAP_FAILED ? NULL : b;
}

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

/* Where message i of direction d has its header and its payload. */
static void place(int d, uint32_t i, int mode, struct hdr **h, char **payload) {
    char *r = base + (size_t)d * DIR_BYTES;
    if (mode == 4) {
        uint32_t slot = (i * (MSG / 32)) % (ring / 32);
        *h = (struct hdr *)(r + slot * 32);
        *payload = r + MAX_RING;
    } else if (mode == 3) {
        *h = (struct hdr *)(r + (i % (ring / 32)) * 32);
        *payload = r + MAX_RING;
    } else if (mode == 0) {
        uint32_t slot = (i * (MSG / 32)) % (ring / 32);
        *h = (struct hdr *)(r + slot * 32);
        *payload = r + MAX_RING + slot * 32;
    } else {
        uint32_t off = mode == 1 ? (i % 3) * (MSG + 64) : (i * (MSG + 64)) % (ring - MSG - 64);
        *h = (struct hdr *)(r + off);
        *payload = (char *)*h + 64;
    }
}

static void send_msg(int d, uint32_t i, int mode, const char *buf) {
    struct hdr *h;
    char *p;
    place(d, i, mode, &h, &p);
    memcpy(p, buf, MSG);
    h->len = MSG;
    busy(turn_ticks);
    uint64_t now = __rdtsc();
    if (copied)
        leg(2, now - copied);
    h->tag = now;
    __atomic_store_n(&h->seq, i + 1, __ATOMIC_RELEASE);
}

static void recv_msg(int d, uint32_t i, int mode, char *buf) {
    struct hdr *h;
    char *p;
    place(d, i, mode, &h, &p);
    while (__atomic_load_n(&h->seq, __ATOMIC_ACQUIRE) != i + 1)
        for (int k = 0; k < look_pauses; k++)
            __builtin_ia32_pause();
    busy(exit_ticks);
    uint64_t t = __rdtsc();
    if (t > h->tag)
        leg(0, t - h->tag);
    memcpy(buf, p, h->len);
    copied = __rdtsc();
    leg(1, copied - t);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODE(0-4) ITERS [RING_KIB]\n", argv[0]);
        return 2;
    }
    int mode = atoi(argv[1]);
    if (getenv("LOOK"))
        look_pauses = atoi(getenv("LOOK"));
    if (getenv("EXIT"))
        exit_ticks = strtoull(getenv("EXIT"), NULL, 10);
    if (getenv("TURN"))
        turn_ticks = strtoull(getenv("TURN"), NULL, 10);
    uint32_t n = (uint32_t)atoi(argv[2]);
    if (argc > 3)
        ring = (uint32_t)atoi(argv[3]) * 1024;
    if (mode < 0 || mode > 4 || n < 10 || ring < 4096 || ring > MAX_RING) {
        fprintf(stderr, "MODE 0-4, ITERS >= 10, RING_KIB 4-256\n");
        return 2;
    }
    int memfd = getenv("MEMFD") ? memfd_create("rings", 0) : -1;
    if (memfd >= 0 && ftruncate(memfd, 2 * DIR_BYTES) != 0)
        return 1;
    base = memfd >= 0 ? mmap(0, 2 * DIR_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0)
                      : mmap(0, 2 * DIR_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                             -1, 0);
    if (base == MAP_FAILED)
        return 1;
    memset(base, 0, 2 * DIR_BYTES);
    char *buf = memfd >= 0 ? own_buffer() : aligned_alloc(4096, 4096);
    if (!buf)
        return 1;
    memset(buf, 7, 4096);
    pid_t child = fork();
    if (child == 0) {
        if (memfd >= 0) {
            /* The rings mapped anew, the buffer a memfd of this process's own. */
            base = mmap(0, 2 * DIR_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
            if (base == MAP_FAILED || !(buf = own_buffer()))
                _exit(1);
            memset(buf, 7, 4096);
        }
        pin(1);
        for (uint32_t i = 0; i < n; i++) {
            recv_msg(0, i, mode, buf);
            send_msg(1, i, mode, buf);
        }
        report("cpu 1");
        _exit(0);
    }
    pin(0);
    double t0 = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i == n / 10)
            t0 = now();
        send_msg(0, i, mode, buf);
        recv_msg(1, i, mode, buf);
    }
    double t = now() - t0;
    printf("mode %d ring %u KiB: half round trip %.3f us\n", mode, ring / 1024,
           t / (n - n / 10) / 2 * 1e6);
    report("cpu 0");
    waitpid(child, NULL, 0);
    return 0;
}
