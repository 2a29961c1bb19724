/* A model of the ni provider's staged rendezvous (tests/bench/README.md, "The provider's
 * staging copies", stop 43): two processes pinned to cpus 0 and 1 ping-pong N-byte messages,
 * each moved three times as the provider moved them before stop 43 — the sender copies its
 * buffer into its staging ("gather"), the receiver copies that into staging of its own
 * ("read"), then into its buffer ("scatter") — and the time of each copy is printed.
 *
 *   gcc -O2 -mavx2 -mclflushopt -o staging-model tests/bench/staging-model.c
 *   ./staging-model N MODE NREG
 *
 * MODE bits: 1 = receives staged apart from sends (else one region holds both, as the pool
 * gave them); 2 = the sender's copy with non-temporal stores; 4 = the reader flushes the lines
 * it read (clflushopt, counted in "read"). NREG: sends staged round NREG places of N bytes (a
 * ring of NREG * N bytes; 1 = the same place every time).
 * E.g. `./staging-model 65536 0 1` (the provider before) against `./staging-model 65536 1 32`
 * (a 2 MiB ring, receives apart). */
#define _GNU_SOURCE
#include <immintrin.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 3000

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static void copy_nt(char *d, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i += 64) {
        __m256i a = _mm256_loadu_si256((const void *)(s + i));
        __m256i b = _mm256_loadu_si256((const void *)(s + i + 32));
        _mm256_stream_si256((void *)(d + i), a);
        _mm256_stream_si256((void *)(d + i + 32), b);
    }
    _mm_sfence();
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s N MODE NREG\n", argv[0]);
        return 2;
    }
    size_t n = strtoul(argv[1], NULL, 0);
    int mode = atoi(argv[2]), nreg = atoi(argv[3]);
    if (n == 0 || n % 64 || nreg < 1) {
        fprintf(stderr, "N: a multiple of 64; NREG >= 1\n");
        return 2;
    }
    /* Each rank's staging: NREG send places, then one receive place (MODE & 1). */
    size_t size = n * (nreg + 1);
    int fd[2];
    for (int i = 0; i < 2; i++) {
        fd[i] = memfd_create("staging", 0);
        if (fd[i] < 0 || ftruncate(fd[i], size) != 0) {
            perror("memfd");
            return 1;
        }
    }
    int cf = memfd_create("turn", 0);
    if (cf < 0 || ftruncate(cf, 4096) != 0) {
        perror("memfd");
        return 1;
    }
    _Atomic long *turn = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, cf, 0);
    int me = fork() == 0 ? 1 : 0;
    pin(me);
    char *mine = mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd[me], 0);
    char *peer = mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd[1 - me], 0);
    char *buf = aligned_alloc(4096, n), *rbuf = aligned_alloc(4096, n);
    if (turn == MAP_FAILED || mine == MAP_FAILED || peer == MAP_FAILED || !buf || !rbuf) {
        perror("memory");
        return 1;
    }
    memset(buf, me + 1, n);
    memset(rbuf, 0, n);
    memset(mine, 0, size);
    double gather = 0, read = 0, scatter = 0;
    long got = 0;
    for (long r = 0; r < ROUNDS; r++) {
        /* Message 2r goes 0 -> 1, message 2r + 1 goes 1 -> 0. */
        for (int sender = 0; sender < 2; sender++) {
            long t = 2 * r + sender;
            size_t place = (size_t)(r % nreg) * n;
            char *send_at = mine + place;
            char *recv_at = (mode & 1) ? mine + (size_t)nreg * n : mine + place;
            if (me == sender) {
                while (atomic_load(turn) != 2 * t)
                    ;
                double t0 = now();
                if (mode & 2)
                    copy_nt(send_at, buf, n);
                else
                    memcpy(send_at, buf, n);
                gather += now() - t0;
                atomic_store(turn, 2 * t + 1);
            } else {
                while (atomic_load(turn) != 2 * t + 1)
                    ;
                const char *from = peer + place;
                double t0 = now();
                memcpy(recv_at, from, n);
                if (mode & 4) {
                    for (size_t i = 0; i < n; i += 64)
                        _mm_clflushopt((void *)(from + i));
                    _mm_sfence();
                }
                read += now() - t0;
                t0 = now();
                memcpy(rbuf, recv_at, n);
                scatter += now() - t0;
                got++;
                atomic_store(turn, 2 * t + 2);
            }
        }
    }
    printf("rank %d, %zu B, mode %d, %d places: gather %.0f ns, read %.0f, scatter %.0f\n", me, n,
           mode, nreg, gather / ROUNDS * 1e9, read / got * 1e9, scatter / got * 1e9);
    fflush(stdout);
    if (me == 1)
        _exit(0);
    wait(NULL);
    return 0;
}
