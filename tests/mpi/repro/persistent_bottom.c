/* Open MPI 4.1.4 pml cm: a persistent send (MPI_Send_init + MPI_Start) from MPI_BOTTOM with a
 * struct datatype of absolute addresses hands the MTL the buffer MPI_BOTTOM (NULL) without the
 * datatype's lower bound. Over ni, fi_tsend refuses it ("ni: fi_tsend: a null buffer of 4
 * bytes" with FI_LOG_LEVEL=warn), MPI_Start drops the error and the request never completes;
 * libfabric's tcp and sockets providers read address 0 and the process dies (SIGSEGV). pml
 * ob1 is fine, and so are MPI_Send/MPI_Isend from MPI_BOTTOM under cm (tests/mpi/p2p.c). This
 * is what mpi4py's testAlltoallwBottom hits (coll/basic's MPI_Alltoallw uses persistent
 * requests).
 *
 *   mpicc -o persistent_bottom persistent_bottom.c
 *   mpirun -n 2 --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include ni ... ./persistent_bottom
 * Exit status 0: the exchange completed with the right value; 1: it did not within 3 s. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int x = 10 + rank, y = -1, one = 1, peer = 1 - rank;
    MPI_Aint ax, ay;
    MPI_Get_address(&x, &ax);
    MPI_Get_address(&y, &ay);
    MPI_Datatype it = MPI_INT, tx, ty;
    MPI_Type_create_struct(1, &one, &ax, &it, &tx);
    MPI_Type_create_struct(1, &one, &ay, &it, &ty);
    MPI_Type_commit(&tx);
    MPI_Type_commit(&ty);
    MPI_Request q[2];
    int done = 0;
    if (rank < 2) {
        MPI_Recv_init(MPI_BOTTOM, 1, ty, peer, 3, MPI_COMM_WORLD, &q[0]);
        MPI_Send_init(MPI_BOTTOM, 1, tx, peer, 3, MPI_COMM_WORLD, &q[1]);
        MPI_Startall(2, q);
        double t = MPI_Wtime();
        while (!done && MPI_Wtime() - t < 3)
            MPI_Testall(2, q, &done, MPI_STATUSES_IGNORE);
        printf("rank %d: persistent exchange from MPI_BOTTOM %s (received %d, expected %d)\n", rank,
               done ? "completed" : "NOT completed after 3 s", y, 10 + peer);
    }
    MPI_Finalize();
    return !(done && y == 10 + peer);
}
