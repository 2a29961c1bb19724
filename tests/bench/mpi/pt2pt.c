/* OSU-like point-to-point baselines: ping-pong latency (osu_latency), windowed streaming
 * bandwidth (osu_bw) and pairwise message rate (osu_mbw_mr).
 *   pt2pt pingpong METRIC WINDOW SIZES     half round trip, ranks 0 and 1
 *   pt2pt stream   METRIC WINDOW SIZES     WINDOW messages 0 -> 1, a 0-byte ack back
 *   pt2pt msgrate  METRIC WINDOW SIZES     ranks r < P/2 stream to r + P/2 */
#include "nib.h"

static char *buf, *rbuf;

static void pingpong(long n, long size, long window, void *arg)
{
    (void)window, (void)arg;
    for (long i = 0; i < n; i++) {
        if (nib_rank == 0) {
            MPI_Send(buf, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(rbuf, size, MPI_CHAR, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (nib_rank == 1) {
            MPI_Recv(rbuf, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, size, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
        }
    }
}

static MPI_Request reqs[1024];

static void stream_pair(long n, long size, long window, int sender, int peer)
{
    for (long i = 0; i < n; i++) {
        if (sender) {
            for (long w = 0; w < window; w++)
                MPI_Isend(buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &reqs[w]);
            MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
            MPI_Recv(rbuf, 0, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            for (long w = 0; w < window; w++)
                MPI_Irecv(rbuf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &reqs[w]);
            MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
            MPI_Send(buf, 0, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
        }
    }
}

static void stream(long n, long size, long window, void *arg)
{
    (void)arg;
    if (nib_rank < 2)
        stream_pair(n, size, window, nib_rank == 0, 1 - nib_rank);
}

static void msgrate(long n, long size, long window, void *arg)
{
    (void)arg;
    int half = nib_size / 2;
    MPI_Barrier(MPI_COMM_WORLD);
    if (nib_rank < 2 * half)
        stream_pair(n, size, window, nib_rank < half,
                    nib_rank < half ? nib_rank + half : nib_rank - half);
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    nib_init(&argc, &argv);
    if (argc < 5 || nib_size < 2) {
        if (nib_rank == 0)
            fprintf(stderr, "usage: pt2pt pingpong|stream|msgrate METRIC WINDOW SIZES (2+ ranks)\n");
        MPI_Finalize();
        return 2;
    }
    const char *pattern = argv[1], *metric = argv[2];
    long window = atol(argv[3]), sizes[64];
    if (window < 1 || window > 1024)
        window = 64;
    int ns = nib_sizes(argv[4], sizes, 64);
    long max = 1;
    for (int i = 0; i < ns; i++)
        if (sizes[i] > max)
            max = sizes[i];
    buf = nib_alloc(max);
    rbuf = nib_alloc(max);
    for (int i = 0; i < ns; i++) {
        long s = sizes[i];
        if (strcmp(pattern, "pingpong") == 0)
            nib_measure(metric, "", s, s, 1, 2.0, pingpong, NULL, 0);
        else if (strcmp(pattern, "stream") == 0)
            nib_measure(metric, "", s, s, window, (double)window, stream, NULL, 0);
        else if (strcmp(pattern, "msgrate") == 0)
            nib_measure(metric, "", s, s, window, (double)window * (nib_size / 2), msgrate, NULL, 0);
        else {
            if (nib_rank == 0)
                fprintf(stderr, "unknown pattern %s\n", pattern);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    MPI_Finalize();
    return 0;
}
