/* MPICH 5.0.2 (ch4:ofi with its shm module): MPI_Probe(MPI_ANY_SOURCE) and the
 * MPI_Recv(MPI_ANY_SOURCE) right after it can take different messages. A rank's message to
 * itself travels through MPICH's shared memory even with MPIR_CVAR_NOLOCAL=1 (a rank is local
 * to itself), its peer's through the netmod. Probe(ANY_SOURCE) looks at shared memory, then
 * at the netmod (src/mpid/ch4/src/ch4_probe.h); the receive matches shared memory's message
 * first. When the peer's message is there before the self message reaches shared memory, the
 * probe reports the peer's (source, count) and the receive takes the self message. MPICH's
 * own MPI_Dist_graph_create sizes its receive from such a probe (mpi4py's testDistgraphcomm
 * then sees one edge too many). ni's netmod delivers fast enough to hit it every time;
 * libfabric's tcp provider is slow enough to hide it; Open MPI (one matching queue) never
 * does it.
 *
 *   mpicc -o probe_any_self probe_any_self.c        (MPICH's mpicc)
 *   FI_PROVIDER=ni MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER_PATH=... \
 *       NI_RUN_DIR=... mpiexec -n 2 ./probe_any_self
 * Prints a MISMATCH line for every probe whose receive took another message; exit status 1
 * if there was one. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, bad = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int it = 0; it < 5; it++) {
        int self[2] = {rank, it}, peer[4] = {rank, it, rank, it};
        MPI_Request q[2];
        MPI_Isend(self, 2, MPI_INT, rank, 7, MPI_COMM_WORLD, &q[0]);
        MPI_Isend(peer, 4, MPI_INT, (rank + 1) % size, 7, MPI_COMM_WORLD, &q[1]);
        for (int i = 0; i < 2; i++) {
            MPI_Status ps, rs;
            int pc, rc, buf[8];
            MPI_Probe(MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &ps);
            MPI_Get_count(&ps, MPI_INT, &pc);
            MPI_Recv(buf, 8, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &rs);
            MPI_Get_count(&rs, MPI_INT, &rc);
            if (ps.MPI_SOURCE != rs.MPI_SOURCE || pc != rc) {
                printf("MISMATCH rank %d round %d: probe source %d count %d, receive source %d "
                       "count %d\n", rank, it, ps.MPI_SOURCE, pc, rs.MPI_SOURCE, rc);
                bad = 1;
            }
        }
        MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return bad;
}
