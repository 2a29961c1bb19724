/* OSU-like one-sided baselines (osu_put_latency / osu_get_latency / osu_put_bw /
 * osu_get_bw, passive target: lock once, MPI_Win_flush per operation or per window).
 *   rma put|get|put-stream|get-stream METRIC WINDOW SIZES */
#include "nib.h"

static char *buf, *wbuf;
static MPI_Win win;
static int is_put;

static void one(long n, long size, long window, void *arg)
{
    (void)window, (void)arg;
    if (nib_rank != 0)
        return;
    for (long i = 0; i < n; i++) {
        if (is_put)
            MPI_Put(buf, size, MPI_CHAR, 1, 0, size, MPI_CHAR, win);
        else
            MPI_Get(buf, size, MPI_CHAR, 1, 0, size, MPI_CHAR, win);
        MPI_Win_flush(1, win);
    }
}

static void windowed(long n, long size, long window, void *arg)
{
    (void)arg;
    if (nib_rank != 0)
        return;
    for (long i = 0; i < n; i++) {
        for (long w = 0; w < window; w++) {
            if (is_put)
                MPI_Put(buf, size, MPI_CHAR, 1, 0, size, MPI_CHAR, win);
            else
                MPI_Get(buf, size, MPI_CHAR, 1, 0, size, MPI_CHAR, win);
        }
        MPI_Win_flush(1, win);
    }
}

int main(int argc, char **argv)
{
    nib_init(&argc, &argv);
    if (argc < 5 || nib_size < 2) {
        if (nib_rank == 0)
            fprintf(stderr, "usage: rma put|get|put-stream|get-stream METRIC WINDOW SIZES\n");
        MPI_Finalize();
        return 2;
    }
    const char *pattern = argv[1], *metric = argv[2];
    long window = atol(argv[3]), sizes[64];
    if (window < 1)
        window = 64;
    int ns = nib_sizes(argv[4], sizes, 64);
    long max = 1;
    for (int i = 0; i < ns; i++)
        if (sizes[i] > max)
            max = sizes[i];
    is_put = strncmp(pattern, "put", 3) == 0;
    int stream = strstr(pattern, "stream") != NULL;
    buf = nib_alloc(max);
    wbuf = nib_alloc(max);
    MPI_Win_create(wbuf, max, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    if (nib_rank == 0)
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
    for (int i = 0; i < ns; i++) {
        long s = sizes[i];
        if (stream)
            nib_measure(metric, "", s, s, window, (double)window, windowed, NULL, 0);
        else
            nib_measure(metric, "", s, s, 1, 1.0, one, NULL, 0);
    }
    if (nib_rank == 0)
        MPI_Win_unlock(1, win);
    MPI_Win_free(&win);
    MPI_Finalize();
    return 0;
}
