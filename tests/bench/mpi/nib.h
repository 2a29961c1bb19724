/* The measuring scheme of ni-bench (tests/src/bench/driver.rs) for the MPI baselines:
 * warm up with 1, 2, 4, ... iterations until a round takes NIB_WARM_MS, size a batch to take
 * NIB_TARGET_MS, run NIB_BATCHES batches (fewer past NIB_CAP_MS per point, never fewer than
 * 3), time each at rank 0 (collectives: the slowest rank), print one `NIB {json}` line per
 * point with the seconds per operation of every batch. Ranks pin themselves from NIB_PIN
 * (split: rank r on cpu r mod ncpu; same: cpu 0; dev-alone: the last cpu), as the Rust
 * workers do. */
#ifndef NIB_H
#define NIB_H
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int nib_rank, nib_size;

static double nib_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double nib_env_ms(const char *k, double d)
{
    const char *v = getenv(k);
    return (v && *v) ? atof(v) / 1e3 : d / 1e3;
}

static void nib_init(int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &nib_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nib_size);
    const char *pin = getenv("NIB_PIN");
    if (pin && *pin) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        if (ncpu < 1)
            ncpu = 1;
        int cpu = strcmp(pin, "same") == 0        ? 0
                  : strcmp(pin, "dev-alone") == 0 ? (int)ncpu - 1
                                                  : (int)(nib_rank % ncpu);
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0)
            perror("sched_setaffinity");
    }
}

/* Parse "a,b,c" into sizes; returns the count. */
static int nib_sizes(const char *s, long *out, int max)
{
    char *copy = strdup(s), *save = NULL;
    int n = 0;
    for (char *t = strtok_r(copy, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save))
        out[n++] = atol(t);
    free(copy);
    return n;
}

typedef void (*nib_body)(long n, long size, long window, void *arg);

/* One round of n iterations: elapsed seconds at rank 0 (or the slowest rank if max_all). */
static double nib_round(nib_body f, long n, long size, long window, void *arg, int max_all)
{
    MPI_Bcast(&n, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    if (max_all)
        MPI_Barrier(MPI_COMM_WORLD);
    double t = nib_now();
    f(n, size, window, arg);
    double el = nib_now() - t, mx = el;
    if (max_all)
        MPI_Reduce(&el, &mx, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    return nib_rank == 0 ? mx : 0.0;
}

/* Measure one point; every rank calls it. */
static void nib_measure(const char *metric, const char *dtype, long size, long bytes,
                        long window, double ops, nib_body f, void *arg, int max_all)
{
    double warm = nib_env_ms("NIB_WARM_MS", 10), target = nib_env_ms("NIB_TARGET_MS", 20);
    double cap = nib_env_ms("NIB_CAP_MS", 4000);
    const char *bv = getenv("NIB_BATCHES");
    long batches = bv && *bv ? atol(bv) : 11;
    if (batches < 1)
        batches = 1;
    long n = 1, go = 1;
    double el = 0;
    while (go) {
        el = nib_round(f, n, size, window, arg, max_all);
        if (nib_rank == 0) {
            if (el >= warm || n >= (1L << 24)) {
                go = 0;
            } else {
                long want = (long)(n * warm / (el > 1e-9 ? el : 1e-9)) + 1;
                if (want < n + 1) want = n + 1;
                if (want > n * 8) want = n * 8;
                n = want;
            }
        }
        MPI_Bcast(&go, 1, MPI_LONG, 0, MPI_COMM_WORLD);
        MPI_Bcast(&n, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    }
    long iters = 1, nb = batches;
    if (nib_rank == 0) {
        double per = el / n;
        double it = target / per + 0.5;
        iters = it < 1 ? 1 : it > (double)(1L << 26) ? (1L << 26) : (long)it;
        double bs = per * iters;
        if (bs * nb > cap) {
            nb = (long)(cap / bs);
            long lo = batches < 3 ? batches : 3;
            if (nb < lo) nb = lo;
            if (nb > batches) nb = batches;
        }
    }
    MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    MPI_Bcast(&nb, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    double *v = calloc(nb, sizeof *v);
    for (long b = 0; b < nb; b++)
        v[b] = nib_round(f, iters, size, window, arg, max_all) / (iters * ops);
    if (nib_rank == 0) {
        printf("NIB {\"metric\":\"%s\",\"dtype\":\"%s\",\"size\":%ld,\"bytes\":%ld,\"ranks\":%d,"
               "\"iters\":%ld,\"batches\":[",
               metric, dtype, size, bytes, nib_size, iters);
        for (long b = 0; b < nb; b++)
            printf("%s%.9e", b ? "," : "", v[b]);
        printf("]}\n");
        fflush(stdout);
    }
    free(v);
}

static void *nib_alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1) != 0) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(p, 1, n);
    return p;
}
#endif
