/* MPI one-sided communication over the libfabric provider "ni" (MPI 4.1 chapter 12). Under
 * MPICH's ch4:ofi, MPI_Put and MPI_Get become fi_write/fi_read on the window's registered
 * memory (MLINK WRITE/READ at the target's NI); accumulates go as active messages. Under Open
 * MPI (pml cm + mtl ofi) the osc component chooses its own path.
 *
 * Every rank exposes a window of WIN bytes and each rank r writes into / reads from rank
 * (r + 1) % size, at offsets and sizes that cross page boundaries, so one target sees exactly
 * one writer. Contents are compared byte for byte with pattern(seed, i).
 *
 *   mpirun|mpiexec -n 2|3|4 ... ./rma   prints `PASS <check>` per check, exits 1 on any FAIL
 *   ./rma --only create,allocate,lock,pscw,accumulate,dynamic */
#include "mpitest.h"

#define WIN (3 << 20)

static const size_t SIZES[] = {1, 8, 4095, 4096, 4097, 65536, 1 << 20, 2 << 20};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])

/* Put SIZES[k] bytes at offset 13 + k into the next rank's window under fences; that rank
 * checks them; then get them back from it and compare. `base` is this rank's window memory. */
static void put_get_fence(MPI_Win w, unsigned char *base, const char *how)
{
    int next = (t_rank + 1) % t_size, prev = (t_rank + t_size - 1) % t_size;
    unsigned char *src = xmalloc(WIN), *back = xmalloc(WIN);
    for (size_t k = 0; k < NSIZES; k++) {
        size_t n = SIZES[k], off = 13 + k;
        begin("MPI_Put/MPI_Get %zu B under MPI_Win_fence [%s]", n, how);
        where("filling");
        memset(base, 0xEE, WIN);
        fill(src, n, 500 + (uint32_t)(t_rank * 16 + k));
        MPI_OK(MPI_Win_fence(0, w));
        where("MPI_Put of %zu B", n);
        MPI_OK(MPI_Put(src, (int)n, MPI_BYTE, next, (MPI_Aint)off, (int)n, MPI_BYTE, w));
        MPI_OK(MPI_Win_fence(0, w));
        check_bytes(base + off, n, 500 + (uint32_t)(prev * 16 + k), "bytes the previous rank put");
        CHECK(base[off - 1] == 0xEE && base[off + n] == 0xEE,
              "bytes around the put changed: 0x%02x 0x%02x", base[off - 1], base[off + n]);
        memset(back, 0, n);
        where("MPI_Get of %zu B", n);
        MPI_OK(MPI_Get(back, (int)n, MPI_BYTE, next, (MPI_Aint)off, (int)n, MPI_BYTE, w));
        MPI_OK(MPI_Win_fence(0, w));
        check_bytes(back, n, 500 + (uint32_t)(t_rank * 16 + k), "bytes got back from the next rank");
        end();
    }
    free(src);
    free(back);
}

/* MPI_Win_create over memory the program allocated itself (malloc). */
static void t_create(void)
{
    unsigned char *base = xmalloc(WIN);
    MPI_Win w;
    MPI_OK(MPI_Win_create(base, WIN, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &w));
    put_get_fence(w, base, "MPI_Win_create on malloc'd memory");
    MPI_OK(MPI_Win_free(&w));
    free(base);
}

/* MPI_Win_allocate: the library's own memory. */
static void t_allocate(void)
{
    unsigned char *base = NULL;
    MPI_Win w;
    MPI_OK(MPI_Win_allocate(WIN, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &w));
    put_get_fence(w, base, "MPI_Win_allocate");
    MPI_OK(MPI_Win_free(&w));
}

/* Passive target: each rank locks the next one's window, puts, flushes, gets it back, unlocks;
 * a barrier later the target finds the bytes. A displacement unit of 8 addresses in words. */
static void t_lock(void)
{
    begin("MPI_Win_lock/put/flush/get/unlock, disp_unit 8");
    int next = (t_rank + 1) % t_size, prev = (t_rank + t_size - 1) % t_size;
    uint64_t *base = NULL;
    MPI_Win w;
    MPI_OK(MPI_Win_allocate(WIN, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &w));
    memset(base, 0, WIN);
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    size_t words = 20000;
    uint64_t *src = xmalloc(words * 8), *back = xmalloc(words * 8);
    for (size_t i = 0; i < words; i++)
        src[i] = ((uint64_t)t_rank << 40) | (i * 2654435761u);
    where("lock/put/flush");
    MPI_OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, w));
    MPI_OK(MPI_Put(src, (int)words, MPI_UINT64_T, next, 1000, (int)words, MPI_UINT64_T, w));
    MPI_OK(MPI_Win_flush(next, w));
    where("get/unlock");
    MPI_OK(MPI_Get(back, (int)words, MPI_UINT64_T, next, 1000, (int)words, MPI_UINT64_T, w));
    MPI_OK(MPI_Win_unlock(next, w));
    for (size_t i = 0; i < words; i++)
        if (back[i] != src[i]) {
            fail("word %zu got back 0x%llx, put 0x%llx", i, (unsigned long long)back[i],
                 (unsigned long long)src[i]);
            break;
        }
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    where("checking the window");
    MPI_OK(MPI_Win_lock(MPI_LOCK_SHARED, t_rank, 0, w));
    for (size_t i = 0; i < words; i++)
        if (base[1000 + i] != (((uint64_t)prev << 40) | (i * 2654435761u))) {
            fail("window word %zu is 0x%llx", 1000 + i, (unsigned long long)base[1000 + i]);
            break;
        }
    CHECK(base[999] == 0 && base[1000 + words] == 0, "words around the put changed");
    MPI_OK(MPI_Win_unlock(t_rank, w));
    MPI_OK(MPI_Win_free(&w));
    free(src);
    free(back);
    end();
}

/* Generalized active target: even ranks expose (post/wait), odd ranks access (start/complete)
 * the even rank before them. */
static void t_pscw(void)
{
    begin("MPI_Win_post/start/complete/wait");
    unsigned char *base = NULL;
    MPI_Win w;
    MPI_OK(MPI_Win_allocate(1 << 16, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &w));
    memset(base, 0, 1 << 16);
    MPI_Group world, g;
    MPI_OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    int peer = t_rank % 2 == 0 ? t_rank + 1 : t_rank - 1;
    if (peer < t_size) {
        MPI_OK(MPI_Group_incl(world, 1, &peer, &g));
        if (t_rank % 2 == 0) {
            MPI_OK(MPI_Win_post(g, 0, w));
            where("MPI_Win_wait");
            MPI_OK(MPI_Win_wait(w));
            check_bytes(base + 100, 30000, 900 + (uint32_t)peer, "bytes put in the epoch");
        } else {
            unsigned char *src = xmalloc(30000);
            fill(src, 30000, 900 + (uint32_t)t_rank);
            MPI_OK(MPI_Win_start(g, 0, w));
            MPI_OK(MPI_Put(src, 30000, MPI_BYTE, peer, 100, 30000, MPI_BYTE, w));
            where("MPI_Win_complete");
            MPI_OK(MPI_Win_complete(w));
            free(src);
        }
        MPI_OK(MPI_Group_free(&g));
    }
    MPI_OK(MPI_Group_free(&world));
    MPI_OK(MPI_Win_free(&w));
    end();
}

/* MPI_Accumulate (SUM of int64, from every rank into rank 0), MPI_Get_accumulate and
 * MPI_Fetch_and_op (a shared counter), MPI_Compare_and_swap. */
static void t_accumulate(void)
{
    begin("MPI_Accumulate, MPI_Get_accumulate, MPI_Fetch_and_op, MPI_Compare_and_swap");
    enum { N = 1000 };
    int64_t *base = NULL;
    MPI_Win w;
    MPI_OK(MPI_Win_allocate((N + 2) * 8, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &w));
    memset(base, 0, (N + 2) * 8);
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    int64_t v[N], old[1];
    for (int i = 0; i < N; i++)
        v[i] = (int64_t)(t_rank + 1) * (i - 300);
    MPI_OK(MPI_Win_fence(0, w));
    MPI_OK(MPI_Accumulate(v, N, MPI_INT64_T, 0, 0, N, MPI_INT64_T, MPI_SUM, w));
    MPI_OK(MPI_Win_fence(0, w));
    if (t_rank == 0) {
        int64_t tri = (int64_t)t_size * (t_size + 1) / 2;
        for (int i = 0; i < N; i++)
            if (base[i] != tri * (i - 300)) {
                fail("element %d is %lld, expected %lld", i, (long long)base[i],
                     (long long)(tri * (i - 300)));
                break;
            }
    }
    MPI_OK(MPI_Win_fence(0, w));
    /* every rank adds 1 to the counter at N, 5 times; the values fetched are all distinct */
    int64_t one = 1, got[5];
    MPI_OK(MPI_Win_lock_all(0, w));
    for (int k = 0; k < 5; k++) {
        MPI_OK(MPI_Fetch_and_op(&one, &got[k], MPI_INT64_T, 0, N, MPI_SUM, w));
        MPI_OK(MPI_Win_flush(0, w));
    }
    int64_t mx = (int64_t)(t_rank + 1) * 7;
    MPI_OK(MPI_Get_accumulate(&mx, 1, MPI_INT64_T, old, 1, MPI_INT64_T, 0, N + 1, 1, MPI_INT64_T,
                              MPI_MAX, w));
    MPI_OK(MPI_Win_unlock_all(w));
    for (int k = 1; k < 5; k++)
        CHECK(got[k] > got[k - 1], "fetch_and_op returned %lld after %lld", (long long)got[k],
              (long long)got[k - 1]);
    int64_t all[5 * 64];
    CHECK(t_size <= 64, "too many ranks for this check");
    MPI_OK(MPI_Allgather(got, 5, MPI_INT64_T, all, 5, MPI_INT64_T, MPI_COMM_WORLD));
    int seen[5 * 64] = {0};
    for (int i = 0; i < 5 * t_size; i++) {
        if (all[i] < 0 || all[i] >= 5 * t_size || seen[all[i]]++)
            fail("fetched counter values are not 0..%d once each (%lld)", 5 * t_size - 1,
                 (long long)all[i]);
    }
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    if (t_rank == 0) {
        MPI_OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, w));
        CHECK(base[N] == 5 * t_size, "counter %lld, expected %d", (long long)base[N], 5 * t_size);
        CHECK(base[N + 1] == (int64_t)t_size * 7, "MPI_MAX gave %lld, expected %d",
              (long long)base[N + 1], t_size * 7);
        MPI_OK(MPI_Win_unlock(0, w));
    }
    /* compare-and-swap: every rank reads the word at N + 1, then (after a barrier, so all
     * read the same value) tries to swap it from that value: exactly one wins */
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    int64_t cur = 0, mine = 1000 + t_rank, res = -1;
    MPI_OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, w));
    MPI_OK(MPI_Get(&cur, 1, MPI_INT64_T, 0, N + 1, 1, MPI_INT64_T, w));
    MPI_OK(MPI_Win_unlock(0, w));
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, w));
    MPI_OK(MPI_Compare_and_swap(&mine, &cur, &res, MPI_INT64_T, 0, N + 1, w));
    MPI_OK(MPI_Win_unlock(0, w));
    int won = res == cur, winners = 0;
    MPI_OK(MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(winners == 1, "%d ranks won the compare-and-swap", winners);
    MPI_OK(MPI_Win_free(&w));
    end();
}

/* MPI_Win_create_dynamic + MPI_Win_attach: memory attached after the window exists, addressed
 * by its absolute address (exchanged with MPI_Get_address). */
static void t_dynamic(void)
{
    begin("MPI_Win_create_dynamic, MPI_Win_attach, put at an absolute address");
    int next = (t_rank + 1) % t_size, prev = (t_rank + t_size - 1) % t_size;
    MPI_Win w;
    MPI_OK(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &w));
    size_t n = 200000;
    unsigned char *mem = xmalloc(n), *src = xmalloc(n);
    memset(mem, 0, n);
    MPI_OK(MPI_Win_attach(w, mem, (MPI_Aint)n));
    MPI_Aint mine, theirs = 0;
    MPI_OK(MPI_Get_address(mem, &mine));
    MPI_OK(MPI_Sendrecv(&mine, 1, MPI_AINT, prev, 5, &theirs, 1, MPI_AINT, next, 5,
                        MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    fill(src, n, 1300 + (uint32_t)t_rank);
    MPI_OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, w));
    MPI_OK(MPI_Put(src, (int)n, MPI_BYTE, next, theirs, (int)n, MPI_BYTE, w));
    MPI_OK(MPI_Win_unlock(next, w));
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    check_bytes(mem, n, 1300 + (uint32_t)prev, "bytes put into attached memory");
    MPI_OK(MPI_Win_detach(w, mem));
    MPI_OK(MPI_Win_free(&w));
    free(mem);
    free(src);
    end();
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    if (t_rank == 0)
        printf("rma: %d ranks\n", t_size);
    if (want("create"))
        t_create();
    if (want("allocate"))
        t_allocate();
    if (want("lock"))
        t_lock();
    if (want("pscw"))
        t_pscw();
    if (want("accumulate"))
        t_accumulate();
    if (want("dynamic"))
        t_dynamic();
    return finish("rma");
}
