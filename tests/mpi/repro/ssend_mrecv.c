/* Open MPI 4.1.4 mtl ofi: an MPI_Issend received with MPI_Mprobe + MPI_Mrecv never completes
 * (the receiver's MTL sends no synchronous-send acknowledgement from its Mrecv callback;
 * upstream fix open-mpi/ompi#11327, 5.0.x #11369). Not specific to ni: libfabric's tcp and
 * sockets providers behave the same. MPI_Recv instead of Mprobe/Mrecv completes it.
 *
 *   mpicc -o ssend_mrecv ssend_mrecv.c
 *   mpirun -n 2 --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tcp ./ssend_mrecv
 *   (or over ni, as tests/mpi/run.sh runs it)
 * Exit status 0: every Issend completed; 1: one did not within 3 s. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, bad = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int mode = 0; mode < 2; mode++) {
        char b[8] = {0};
        if (rank == 0) {
            MPI_Request q;
            int done = 0;
            MPI_Issend(b, 8, MPI_BYTE, 1, 7, MPI_COMM_WORLD, &q);
            double t = MPI_Wtime();
            while (!done && MPI_Wtime() - t < 3)
                MPI_Test(&q, &done, MPI_STATUS_IGNORE);
            printf("Issend received by %s: %s\n", mode ? "MPI_Mprobe + MPI_Mrecv" : "MPI_Recv",
                   done ? "completed" : "NOT completed after 3 s");
            bad |= !done;
            /* (an incomplete request is left behind: the job is ending anyway) */
        } else if (rank == 1) {
            MPI_Status st;
            if (mode) {
                MPI_Message m;
                MPI_Mprobe(0, 7, MPI_COMM_WORLD, &m, &st);
                MPI_Mrecv(b, 8, MPI_BYTE, &m, &st);
            } else {
                MPI_Recv(b, 8, MPI_BYTE, 0, 7, MPI_COMM_WORLD, &st);
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return bad;
}
