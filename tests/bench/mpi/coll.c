/* OSU-like collective baselines: osu_barrier, osu_bcast, osu_allreduce (i64 and f64 sums),
 * osu_reduce (to rank 0), osu_scan (inclusive), osu_allgather. Each batch is timed by the
 * slowest rank.
 *   coll barrier   METRIC - 0
 *   coll bcast     METRIC - ELEMENTS,...   (8-byte elements, as the ni side)
 *   coll allreduce|reduce|scan METRIC i64|f64 ELEMENTS,...   (sums)
 *   coll allgather METRIC - ELEMENTS,...   (8-byte elements per rank) */
#include "nib.h"

static void *sbuf, *rbuf;
static MPI_Datatype dt;

static void barrier(long n, long size, long window, void *arg)
{
    (void)size, (void)window, (void)arg;
    for (long i = 0; i < n; i++)
        MPI_Barrier(MPI_COMM_WORLD);
}

static void bcast(long n, long size, long window, void *arg)
{
    (void)window, (void)arg;
    for (long i = 0; i < n; i++)
        MPI_Bcast(sbuf, size * 8, MPI_CHAR, 0, MPI_COMM_WORLD);
}

static void allreduce(long n, long count, long window, void *arg)
{
    (void)window, (void)arg;
    for (long i = 0; i < n; i++)
        MPI_Allreduce(sbuf, rbuf, count, dt, MPI_SUM, MPI_COMM_WORLD);
}

static void reduce(long n, long count, long window, void *arg)
{
    (void)window, (void)arg;
    for (long i = 0; i < n; i++)
        MPI_Reduce(sbuf, rbuf, count, dt, MPI_SUM, 0, MPI_COMM_WORLD);
}

static void scan(long n, long count, long window, void *arg)
{
    (void)window, (void)arg;
    for (long i = 0; i < n; i++)
        MPI_Scan(sbuf, rbuf, count, dt, MPI_SUM, MPI_COMM_WORLD);
}

static void allgather(long n, long count, long window, void *arg)
{
    (void)window, (void)arg;
    for (long i = 0; i < n; i++)
        MPI_Allgather(sbuf, count, MPI_INT64_T, rbuf, count, MPI_INT64_T, MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    nib_init(&argc, &argv);
    if (argc < 5) {
        if (nib_rank == 0)
            fprintf(stderr,
                    "usage: coll barrier|bcast|allreduce|reduce|scan|allgather METRIC DTYPE "
                    "SIZES\n");
        MPI_Finalize();
        return 2;
    }
    const char *pattern = argv[1], *metric = argv[2], *dtype = argv[3];
    long sizes[64];
    int ns = nib_sizes(argv[4], sizes, 64);
    dt = strcmp(dtype, "f64") == 0 ? MPI_DOUBLE : MPI_INT64_T;
    long max = 8;
    for (int i = 0; i < ns; i++)
        if (sizes[i] * 8 > max)
            max = sizes[i] * 8;
    sbuf = nib_alloc(max);
    /* An allgather's receive buffer holds every rank's vector. */
    rbuf = nib_alloc(strcmp(pattern, "allgather") == 0 ? max * nib_size : max);
    if (dt == MPI_DOUBLE)
        for (long i = 0; i < max / 8; i++)
            ((double *)sbuf)[i] = 1.0 + i;
    else
        for (long i = 0; i < max / 8; i++)
            ((long long *)sbuf)[i] = 1 + i;
    for (int i = 0; i < ns; i++) {
        long s = sizes[i];
        if (strcmp(pattern, "barrier") == 0)
            nib_measure(metric, "", 0, 0, 1, 1.0, barrier, NULL, 1);
        else if (strcmp(pattern, "bcast") == 0)
            nib_measure(metric, "", s, s * 8, 1, 1.0, bcast, NULL, 1);
        else if (strcmp(pattern, "allreduce") == 0)
            nib_measure(metric, dtype, s, s * 8, 1, 1.0, allreduce, NULL, 1);
        else if (strcmp(pattern, "reduce") == 0)
            nib_measure(metric, dtype, s, s * 8, 1, 1.0, reduce, NULL, 1);
        else if (strcmp(pattern, "scan") == 0)
            nib_measure(metric, dtype, s, s * 8, 1, 1.0, scan, NULL, 1);
        else if (strcmp(pattern, "allgather") == 0)
            nib_measure(metric, "", s, s * 8, 1, 1.0, allgather, NULL, 1);
        else
            MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Finalize();
    return 0;
}
