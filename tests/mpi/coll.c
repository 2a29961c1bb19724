/* MPI communicators and collectives over the libfabric provider "ni" (Open MPI: pml cm + mtl
 * ofi; the collectives are Open MPI's coll components over that point-to-point path).
 *
 * Communicators: MPI_COMM_WORLD, a dup of it, MPI_Comm_split by parity of the world rank (key =
 * world rank) and the same split with the key reversed (so comm rank 0 is the highest world
 * rank of the colour). Their sizes, ranks, groups and comparisons are checked, messages on one
 * must not be received on another, and every collective below runs on each of them, its result
 * compared element by element with the value computed locally from what every member
 * contributed (contributions are functions of the comm rank; doubles are multiples of 1/8, so
 * every sum is exact whatever order the reduction takes).
 *
 *   mpirun -n 2|3|4 ... ./coll       prints `PASS <check>` per check, exits 1 on any FAIL
 *   ./coll --only world,split / --skip reversed   comms: world dup split reversed; the group
 *                                    `comms` is the communicator checks */
#include "mpitest.h"

#define BIG 100000

typedef struct {
    MPI_Comm c;
    const char *name;
    int rank, size;
} comm_t;

static int f_int(int q, int i) { return (q + 1) * ((i % 1013) + 1) - 3 * q; }
static int g_int(int q, int i) { return ((i * 31 + q * 977) % 10007) - 5000; }
static double f_dbl(int q, int i) { return f_int(q, i) * 0.25; }
static double g_dbl(int q, int i) { return g_int(q, i) * 1.5 + 0.125; }

static double realtime(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Comm rank 0 enters 200 ms late; the others' MPI_Barrier must have taken >= 150 ms (their own
 * clock), and where a rank shares rank 0's host (one CLOCK_REALTIME), it may not leave before
 * rank 0 entered. Ranks in different QEMU guests have clocks apart by tens of ms: there only the
 * duration is checked. Then 50 barriers in a row. */
static void t_barrier(comm_t *k)
{
    begin("Barrier [%s]", k->name);
    MPI_OK(MPI_Barrier(k->c));
    if (k->rank == 0)
        sleep_ms(200);
    double in = realtime(), t0 = MPI_Wtime();
    MPI_OK(MPI_Barrier(k->c));
    double out = realtime(), took = MPI_Wtime() - t0;
    /* rank 0 tells everyone when it entered, and on which host, point to point */
    double in0 = in;
    char host[MPI_MAX_PROCESSOR_NAME] = {0}, host0[MPI_MAX_PROCESSOR_NAME] = {0};
    int len = 0;
    MPI_OK(MPI_Get_processor_name(host, &len));
    if (k->rank == 0) {
        for (int r = 1; r < k->size; r++) {
            MPI_OK(MPI_Send(&in, 1, MPI_DOUBLE, r, 7, k->c));
            MPI_OK(MPI_Send(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, r, 8, k->c));
        }
    } else {
        MPI_Request q[2];
        MPI_OK(MPI_Irecv(&in0, 1, MPI_DOUBLE, 0, 7, k->c, &q[0]));
        MPI_OK(MPI_Irecv(host0, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, 8, k->c, &q[1]));
        wait_one(&q[0], NULL, "rank 0's barrier entry time");
        wait_one(&q[1], NULL, "rank 0's host name");
        if (strncmp(host, host0, MPI_MAX_PROCESSOR_NAME) == 0)
            CHECK(out >= in0, "left the barrier %.3f ms before comm rank 0 entered it",
                  (in0 - out) * 1e3);
        CHECK(took >= 0.150, "MPI_Barrier took %.1f ms though comm rank 0 entered 200 ms late",
              took * 1e3);
    }
    for (int i = 0; i < 50; i++)
        MPI_OK(MPI_Barrier(k->c));
    end();
}

static void t_bcast(comm_t *k, size_t n, int root)
{
    begin("Bcast %zu B root %d [%s]", n, root, k->name);
    unsigned char *b = xmalloc(n + 64);
    uint32_t seed = (uint32_t)n * 3 + (uint32_t)root;
    if (k->rank == root)
        fill(b, n, seed);
    else
        memset(b, 0x5A, n);
    memset(b + n, 0xA5, 64);
    MPI_OK(MPI_Bcast(b, (int)n, MPI_BYTE, root, k->c));
    check_bytes(b, n, seed, "broadcast buffer");
    for (int i = 0; i < 64; i++)
        if (b[n + i] != 0xA5) {
            fail("byte %d past the buffer overwritten", i);
            break;
        }
    free(b);
    end();
}

/* One int broadcast: the root's value. */
static void t_bcast_int(comm_t *k)
{
    begin("Bcast 1 int from every root [%s]", k->name);
    for (int root = 0; root < k->size; root++) {
        int v = k->rank == root ? 1000 + root * 7 : -1;
        MPI_OK(MPI_Bcast(&v, 1, MPI_INT, root, k->c));
        CHECK(v == 1000 + root * 7, "root %d: got %d", root, v);
    }
    end();
}

/* Reduce (root = last) and Allreduce, SUM and MAX, int and double, n elements. */
static void t_reduce(comm_t *k, int n)
{
    begin("Reduce + Allreduce SUM/MAX int/double, %d element%s [%s]", n, n == 1 ? "" : "s", k->name);
    int *si = xmalloc(sizeof(int) * n), *ri = xmalloc(sizeof(int) * n), *mi = xmalloc(sizeof(int) * n);
    double *sd = xmalloc(sizeof(double) * n), *rd = xmalloc(sizeof(double) * n),
           *md = xmalloc(sizeof(double) * n);
    int *ei_sum = xmalloc(sizeof(int) * n), *ei_max = xmalloc(sizeof(int) * n);
    double *ed_sum = xmalloc(sizeof(double) * n), *ed_max = xmalloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) {
        si[i] = f_int(k->rank, i);
        mi[i] = g_int(k->rank, i);
        sd[i] = f_dbl(k->rank, i);
        md[i] = g_dbl(k->rank, i);
        ei_sum[i] = 0;
        ed_sum[i] = 0;
        ei_max[i] = g_int(0, i);
        ed_max[i] = g_dbl(0, i);
        for (int q = 0; q < k->size; q++) {
            ei_sum[i] += f_int(q, i);
            ed_sum[i] += f_dbl(q, i);
            if (g_int(q, i) > ei_max[i])
                ei_max[i] = g_int(q, i);
            if (g_dbl(q, i) > ed_max[i])
                ed_max[i] = g_dbl(q, i);
        }
    }
    int root = k->size - 1;
    for (int all = 0; all < 2; all++) {
        const char *what = all ? "Allreduce" : "Reduce";
        int mine = all || k->rank == root;
        /* int SUM */
        memset(ri, 0x77, sizeof(int) * n);
        MPI_OK(all ? MPI_Allreduce(si, ri, n, MPI_INT, MPI_SUM, k->c)
                   : MPI_Reduce(si, ri, n, MPI_INT, MPI_SUM, root, k->c));
        for (int i = 0, bad = 0; mine && i < n && bad < 3; i++)
            if (ri[i] != ei_sum[i]) {
                fail("%s SUM int [%d] = %d, expected %d", what, i, ri[i], ei_sum[i]);
                bad++;
            }
        /* int MAX */
        memset(ri, 0x77, sizeof(int) * n);
        MPI_OK(all ? MPI_Allreduce(mi, ri, n, MPI_INT, MPI_MAX, k->c)
                   : MPI_Reduce(mi, ri, n, MPI_INT, MPI_MAX, root, k->c));
        for (int i = 0, bad = 0; mine && i < n && bad < 3; i++)
            if (ri[i] != ei_max[i]) {
                fail("%s MAX int [%d] = %d, expected %d", what, i, ri[i], ei_max[i]);
                bad++;
            }
        /* double SUM */
        memset(rd, 0x77, sizeof(double) * n);
        MPI_OK(all ? MPI_Allreduce(sd, rd, n, MPI_DOUBLE, MPI_SUM, k->c)
                   : MPI_Reduce(sd, rd, n, MPI_DOUBLE, MPI_SUM, root, k->c));
        for (int i = 0, bad = 0; mine && i < n && bad < 3; i++)
            if (rd[i] != ed_sum[i]) {
                fail("%s SUM double [%d] = %.17g, expected %.17g", what, i, rd[i], ed_sum[i]);
                bad++;
            }
        /* double MAX */
        memset(rd, 0x77, sizeof(double) * n);
        MPI_OK(all ? MPI_Allreduce(md, rd, n, MPI_DOUBLE, MPI_MAX, k->c)
                   : MPI_Reduce(md, rd, n, MPI_DOUBLE, MPI_MAX, root, k->c));
        for (int i = 0, bad = 0; mine && i < n && bad < 3; i++)
            if (rd[i] != ed_max[i]) {
                fail("%s MAX double [%d] = %.17g, expected %.17g", what, i, rd[i], ed_max[i]);
                bad++;
            }
    }
    /* MPI_IN_PLACE Allreduce SUM int */
    memcpy(ri, si, sizeof(int) * n);
    MPI_OK(MPI_Allreduce(MPI_IN_PLACE, ri, n, MPI_INT, MPI_SUM, k->c));
    for (int i = 0, bad = 0; i < n && bad < 3; i++)
        if (ri[i] != ei_sum[i]) {
            fail("Allreduce MPI_IN_PLACE SUM int [%d] = %d, expected %d", i, ri[i], ei_sum[i]);
            bad++;
        }
    free(si), free(ri), free(mi), free(sd), free(rd), free(md);
    free(ei_sum), free(ei_max), free(ed_sum), free(ed_max);
    end();
}

static int ag_val(int q, int i) { return q * 1000003 + i * 7 + 1; }

static void t_allgather(comm_t *k, int n)
{
    begin("Allgather %d int%s per rank [%s]", n, n == 1 ? "" : "s", k->name);
    int *s = xmalloc(sizeof(int) * n), *r = xmalloc(sizeof(int) * n * k->size);
    for (int i = 0; i < n; i++)
        s[i] = ag_val(k->rank, i);
    memset(r, 0x66, sizeof(int) * n * k->size);
    MPI_OK(MPI_Allgather(s, n, MPI_INT, r, n, MPI_INT, k->c));
    for (int q = 0, bad = 0; q < k->size; q++)
        for (int i = 0; i < n && bad < 3; i++)
            if (r[q * n + i] != ag_val(q, i)) {
                fail("block %d [%d] = %d, expected %d", q, i, r[q * n + i], ag_val(q, i));
                bad++;
            }
    free(s);
    free(r);
    end();
}

static int a2a_val(int src, int dst, int i) { return src * 1000000 + dst * 10000 + i; }

static void t_alltoall(comm_t *k, int n)
{
    begin("Alltoall %d int%s per pair [%s]", n, n == 1 ? "" : "s", k->name);
    int p = k->size;
    int *s = xmalloc(sizeof(int) * n * p), *r = xmalloc(sizeof(int) * n * p);
    for (int d = 0; d < p; d++)
        for (int i = 0; i < n; i++)
            s[d * n + i] = a2a_val(k->rank, d, i);
    memset(r, 0x66, sizeof(int) * n * p);
    MPI_OK(MPI_Alltoall(s, n, MPI_INT, r, n, MPI_INT, k->c));
    for (int q = 0, bad = 0; q < p; q++)
        for (int i = 0; i < n && bad < 3; i++)
            if (r[q * n + i] != a2a_val(q, k->rank, i)) {
                fail("from rank %d [%d] = %d, expected %d", q, i, r[q * n + i], a2a_val(q, k->rank, i));
                bad++;
            }
    free(s);
    free(r);
    end();
}

/* Gather to root, then Scatter from root of different values. */
static void t_gather_scatter(comm_t *k, int n, int root)
{
    begin("Gather + Scatter %d int%s root %d [%s]", n, n == 1 ? "" : "s", root, k->name);
    int p = k->size;
    int *s = xmalloc(sizeof(int) * n), *all = xmalloc(sizeof(int) * n * p);
    for (int i = 0; i < n; i++)
        s[i] = ag_val(k->rank, i) ^ root;
    memset(all, 0x66, sizeof(int) * n * p);
    MPI_OK(MPI_Gather(s, n, MPI_INT, all, n, MPI_INT, root, k->c));
    if (k->rank == root)
        for (int q = 0, bad = 0; q < p; q++)
            for (int i = 0; i < n && bad < 3; i++)
                if (all[q * n + i] != (ag_val(q, i) ^ root)) {
                    fail("Gather: block %d [%d] = %d, expected %d", q, i, all[q * n + i], ag_val(q, i) ^ root);
                    bad++;
                }
    if (k->rank == root)
        for (int q = 0; q < p; q++)
            for (int i = 0; i < n; i++)
                all[q * n + i] = a2a_val(root, q, i % 10000);
    memset(s, 0x66, sizeof(int) * n);
    MPI_OK(MPI_Scatter(all, n, MPI_INT, s, n, MPI_INT, root, k->c));
    for (int i = 0, bad = 0; i < n && bad < 3; i++)
        if (s[i] != a2a_val(root, k->rank, i % 10000)) {
            fail("Scatter: [%d] = %d, expected %d", i, s[i], a2a_val(root, k->rank, i % 10000));
            bad++;
        }
    free(s);
    free(all);
    end();
}

/* Inclusive prefix: SUM of ints, MAX of doubles. */
static void t_scan(comm_t *k, int n)
{
    begin("Scan SUM int + MAX double, %d element%s [%s]", n, n == 1 ? "" : "s", k->name);
    int *si = xmalloc(sizeof(int) * n), *ri = xmalloc(sizeof(int) * n);
    double *sd = xmalloc(sizeof(double) * n), *rd = xmalloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) {
        si[i] = f_int(k->rank, i);
        sd[i] = g_dbl(k->rank, i);
    }
    MPI_OK(MPI_Scan(si, ri, n, MPI_INT, MPI_SUM, k->c));
    MPI_OK(MPI_Scan(sd, rd, n, MPI_DOUBLE, MPI_MAX, k->c));
    for (int i = 0, bad = 0; i < n && bad < 3; i++) {
        int e = 0;
        double m = g_dbl(0, i);
        for (int q = 0; q <= k->rank; q++) {
            e += f_int(q, i);
            if (g_dbl(q, i) > m)
                m = g_dbl(q, i);
        }
        if (ri[i] != e || rd[i] != m) {
            fail("[%d]: SUM %d (expected %d), MAX %.17g (expected %.17g)", i, ri[i], e, rd[i], m);
            bad++;
        }
    }
    free(si), free(ri), free(sd), free(rd);
    end();
}

static void run_collectives(comm_t *k)
{
    static const size_t bsizes[] = {1, 4080, 4081, 65536, 1 << 20, 4 << 20};
    t_barrier(k);
    t_bcast_int(k);
    for (size_t i = 0; i < sizeof bsizes / sizeof bsizes[0]; i++) {
        /* every rank runs the same checks, whatever the size of its own split comm */
        t_bcast(k, bsizes[i], 0);
        t_bcast(k, bsizes[i], k->size - 1);
    }
    t_reduce(k, 1);
    t_reduce(k, BIG);
    t_allgather(k, 1);
    t_allgather(k, 5000);
    t_alltoall(k, 1);
    t_alltoall(k, 3000);
    t_gather_scatter(k, 1, 0);
    t_gather_scatter(k, 5000, k->size - 1);
    t_scan(k, 1);
    t_scan(k, BIG);
}

/* The communicators themselves: sizes, ranks, group translation, comparisons, and that the
 * same (source, tag) on WORLD, the dup and the split are three different message streams. */
static void t_comms(comm_t *world, comm_t *dup, comm_t *split, comm_t *rev)
{
    int color = t_rank % 2;
    int members = (t_size + 1 - color) / 2; /* world ranks with my parity */
    begin("Comm_dup and Comm_split even/odd: sizes, ranks, groups, compare");
    CHECK(dup->size == t_size && dup->rank == t_rank, "dup: rank %d of %d", dup->rank, dup->size);
    int cmp = -1;
    MPI_Comm_compare(MPI_COMM_WORLD, dup->c, &cmp);
    CHECK(cmp == MPI_CONGRUENT, "Comm_compare(WORLD, dup) = %d, expected MPI_CONGRUENT", cmp);
    CHECK(split->size == members && split->rank == t_rank / 2, "split: rank %d of %d, expected %d of %d",
          split->rank, split->size, t_rank / 2, members);
    CHECK(rev->size == members && rev->rank == members - 1 - t_rank / 2,
          "split with reversed key: rank %d of %d, expected %d", rev->rank, rev->size,
          members - 1 - t_rank / 2);
    MPI_Comm_compare(split->c, rev->c, &cmp);
    CHECK(members == 1 ? cmp == MPI_CONGRUENT : cmp == MPI_SIMILAR,
          "Comm_compare(split, reversed split) = %d", cmp);
    MPI_Group gw, gs;
    MPI_Comm_group(MPI_COMM_WORLD, &gw);
    MPI_Comm_group(split->c, &gs);
    for (int r = 0; r < split->size; r++) {
        int w = -1;
        MPI_Group_translate_ranks(gs, 1, &r, gw, &w);
        CHECK(w == 2 * r + color, "split rank %d is world rank %d, expected %d", r, w, 2 * r + color);
    }
    MPI_Group_free(&gw);
    MPI_Group_free(&gs);
    end();

    begin("same source and tag on WORLD, dup and split: separate streams");
    comm_t *ks[3] = {world, dup, split};
    MPI_Request q[6];
    int got[3] = {-1, -1, -1}, sent[3];
    /* receives posted in the reverse order of the sends */
    for (int c = 2; c >= 0; c--) {
        int from = (ks[c]->rank + ks[c]->size - 1) % ks[c]->size;
        MPI_OK(MPI_Irecv(&got[c], 1, MPI_INT, from, 5, ks[c]->c, &q[c]));
    }
    for (int c = 0; c < 3; c++) {
        int to = (ks[c]->rank + 1) % ks[c]->size;
        sent[c] = 100 * c + ks[c]->rank;
        MPI_OK(MPI_Isend(&sent[c], 1, MPI_INT, to, 5, ks[c]->c, &q[3 + c]));
    }
    wait_all(6, q, MPI_STATUSES_IGNORE, "the messages on three communicators");
    for (int c = 0; c < 3; c++) {
        int from = (ks[c]->rank + ks[c]->size - 1) % ks[c]->size;
        CHECK(got[c] == 100 * c + from, "on %s got %d, expected %d", ks[c]->name, got[c], 100 * c + from);
    }
    end();
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    comm_t world = {MPI_COMM_WORLD, "WORLD", 0, 0}, dup = {MPI_COMM_NULL, "dup of WORLD", 0, 0},
           split = {MPI_COMM_NULL, "split even/odd", 0, 0},
           rev = {MPI_COMM_NULL, "split even/odd, reversed key", 0, 0};
    MPI_Comm_dup(MPI_COMM_WORLD, &dup.c);
    MPI_Comm_split(MPI_COMM_WORLD, t_rank % 2, t_rank, &split.c);
    MPI_Comm_split(MPI_COMM_WORLD, t_rank % 2, -t_rank, &rev.c);
    comm_t *ks[4] = {&world, &dup, &split, &rev};
    static const char *ids[4] = {"world", "dup", "split", "reversed"};
    for (int i = 0; i < 4; i++) {
        MPI_Comm_rank(ks[i]->c, &ks[i]->rank);
        MPI_Comm_size(ks[i]->c, &ks[i]->size);
    }
    if (t_rank == 0)
        printf("coll: %d ranks\n", t_size);
    if (want("comms"))
        t_comms(&world, &dup, &split, &rev);
    for (int i = 0; i < 4; i++)
        if (want(ids[i]))
            run_collectives(ks[i]);
    MPI_Comm_free(&dup.c);
    MPI_Comm_free(&split.c);
    MPI_Comm_free(&rev.c);
    return finish("coll");
}
