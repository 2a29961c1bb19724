/* instr ITERS SIZE: an MPI ping-pong of SIZE-byte messages between ranks 0 and 1 (as
 * `pt2pt pingpong`), for tests/bench/instr.sh, which runs rank 0 under
 * `valgrind --tool=callgrind` collecting only inside nib_pingpong and takes the difference of
 * two ITERS to get the instructions one round trip costs rank 0. 200 round trips before it
 * warm everything up. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int rank;

__attribute__((noinline)) void nib_pingpong(long iters, int size, char *buf)
{
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
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    nib_pingpong(200, size, buf);
    nib_pingpong(iters, size, buf);
    MPI_Barrier(MPI_COMM_WORLD);
    free(buf);
    MPI_Finalize();
    return 0;
}
