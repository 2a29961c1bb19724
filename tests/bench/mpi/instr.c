/* instr ITERS SIZE: an MPI ping-pong of SIZE-byte messages between ranks 0 and 1 (as
 * `pt2pt pingpong`), for tests/bench/instr.sh, which runs rank 0 under
 * `valgrind --tool=callgrind` collecting only inside nib_pingpong and takes the difference of
 * two ITERS to get the instructions one round trip costs rank 0. 200 round trips before it
 * warm everything up.
 * NIB_INSTR_PATTERN=send|recv: instead, rank 0 streams (send) or takes (recv) windows of
 * WINDOW messages as `pt2pt msgrate` does; an iteration is one window. posted: rank 0
 * receives, into receives it posted before rank 1 sends (rank 1 waits for a go-ahead).
 * allreduce: both ranks sum SIZE / 8 doubles (MPI_Allreduce, separate buffers); reduce, scan,
 * bcast: MPI_Reduce (root 0), MPI_Scan, MPI_Bcast (root 0) of them; NIB_INSTR_ROOT=1 makes
 * rank 1 the root of the reduce and the broadcast.
 * poll: an iteration is one MPI_Test of a receive whose message has not come (rank 1 sends it
 * once rank 0 is done looking): what a look that finds nothing costs. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;
static int pattern; /* 0 ping-pong, 1 rank 0 sends, 2 rank 0 receives, 3 posted first,
                       4 allreduce of size / 8 doubles, 5 empty looks, 6 reduce,
                       7 scan, 8 bcast */
static char *rbuf;

#define WINDOW 64
static MPI_Request reqs[WINDOW];

static void window(int size, char *buf, int sender)
{
    int peer = 1 - rank;
    if (pattern == 3 && sender)
        MPI_Recv(buf, 0, MPI_CHAR, peer, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int w = 0; w < WINDOW; w++) {
        if (sender)
            MPI_Isend(buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &reqs[w]);
        else
            MPI_Irecv(buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &reqs[w]);
    }
    if (pattern == 3 && !sender)
        MPI_Send(buf, 0, MPI_CHAR, peer, 4, MPI_COMM_WORLD);
    MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
    if (sender)
        MPI_Recv(buf, 0, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    else
        MPI_Send(buf, 0, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
}

__attribute__((noinline)) void nib_pingpong(long iters, int size, char *buf)
{
    if (pattern == 5) {
        MPI_Request r;
        int flag = 0;
        if (rank == 0) {
            MPI_Irecv(buf, size, MPI_CHAR, 1, 5, MPI_COMM_WORLD, &r);
            for (long i = 0; i < iters; i++) {
                MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
                if (flag) {
                    fprintf(stderr, "instr: the polled message came early\n");
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
            }
            MPI_Send(buf, 0, MPI_CHAR, 1, 4, MPI_COMM_WORLD);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(buf, 0, MPI_CHAR, 0, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, size, MPI_CHAR, 0, 5, MPI_COMM_WORLD);
        }
        return;
    }
    if (pattern == 4) {
        for (long i = 0; i < iters; i++)
            MPI_Allreduce(buf, rbuf, size / 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        return;
    }
    if (pattern >= 6) {
        const char *r = getenv("NIB_INSTR_ROOT");
        int root = r && !strcmp(r, "1") ? 1 : 0;
        for (long i = 0; i < iters; i++) {
            if (pattern == 6)
                MPI_Reduce(buf, rbuf, size / 8, MPI_DOUBLE, MPI_SUM, root, MPI_COMM_WORLD);
            else if (pattern == 7)
                MPI_Scan(buf, rbuf, size / 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            else
                MPI_Bcast(buf, size / 8, MPI_DOUBLE, root, MPI_COMM_WORLD);
        }
        return;
    }
    if (pattern) {
        for (long i = 0; i < iters; i++)
            window(size, buf, (rank == 0) == (pattern == 1));
        return;
    }
    for (long i = 0; i < iters; i++) {
        if (rank == 0) {
            MPI_Send(buf, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, size, MPI_CHAR, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(buf, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, size, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
        }
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc != 3) {
        fprintf(stderr, "usage: instr ITERS SIZE\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long iters = atol(argv[1]);
    int size = atoi(argv[2]);
    char *buf = calloc(1, size > 0 ? size : 1);
    rbuf = calloc(1, size > 0 ? size : 1);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *p = getenv("NIB_INSTR_PATTERN");
    pattern = !p || !strcmp(p, "pingpong") ? 0
            : !strcmp(p, "send")             ? 1
            : !strcmp(p, "recv")             ? 2
            : !strcmp(p, "posted")           ? 3
            : !strcmp(p, "allreduce")        ? 4
            : !strcmp(p, "poll")             ? 5
            : !strcmp(p, "reduce")           ? 6
            : !strcmp(p, "scan")             ? 7
            : !strcmp(p, "bcast")            ? 8
                                             : -1;
    if (pattern < 0) {
        fprintf(stderr,
                "NIB_INSTR_PATTERN=%s: pingpong, send, recv, posted, allreduce, reduce, scan, "
                "bcast or poll\n",
                p);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    nib_pingpong(200, size, buf);
    nib_pingpong(iters, size, buf);
    MPI_Barrier(MPI_COMM_WORLD);
    free(buf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
