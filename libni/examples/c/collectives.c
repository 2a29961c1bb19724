/*
 * collectives.c — libni's collectives from C, on every rank of the partition (2 or more):
 *
 *   - vector collectives over regions: allreduce of doubles (blocking and non-blocking),
 *     barrier (blocking and non-blocking), broadcast from every root, reduce to every root,
 *     inclusive and exclusive scans, allgather; their local error codes;
 *   - the CM-5 control network: an exclusive add-scan forward (rank i gets the sum of the
 *     ranks below it) and backward, a two-word unsigned add with carry, a signed max, an
 *     abstainer taking a reduction with ni_combine_receive, a collision cleared by a combine
 *     flush, network-done, the synchronous and asynchronous globals;
 *   - and, every rank at once, one-sided transfers into memory the program malloc'd and
 *     registered with ni_register (a put into the next rank's, a get back).
 *
 * Every failure prints ni_last_error() and exits non-zero. Build and run:
 *
 *   cc -std=c99 -o collectives collectives.c $(pkg-config --cflags --libs ni)
 *   nirun -n 3 ./collectives
 */
#define _POSIX_C_SOURCE 200809L

#include <ni.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Byte offsets into the one region every rank allocates. */
#define SEND_AT 0
#define RECV_AT 16384
#define REGION_LEN 65536
#define COUNT 4
#define BIG_COUNT 1000

static uint32_t me, n;

#define FAIL(...)                                                                    \
    do {                                                                             \
        fprintf(stderr, "FAIL (rank %" PRIu32 ", %s:%d): ", me, __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                                                \
        fputc('\n', stderr);                                                         \
        exit(1);                                                                     \
    } while (0)

/* A libni call that must succeed. */
#define CHECK(call)                                                                        \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ != NI_OK)                                                                  \
            FAIL("%s returned %d (%s): %s", #call, rc_, ni_strerror(rc_), ni_last_error()); \
    } while (0)

/* A libni call that must fail with `code`. */
#define EXPECT_CODE(call, code)                                                          \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ != (code))                                                               \
            FAIL("%s returned %d (%s), expected %s; last error: %s", #call, rc_,         \
                 ni_strerror(rc_), #code, ni_last_error());                              \
    } while (0)

#define EXPECT(cond, ...)      \
    do {                       \
        if (!(cond))           \
            FAIL(__VA_ARGS__); \
    } while (0)

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void nap(void) {
    struct timespec t = {0, 100000};
    nanosleep(&t, NULL);
}

/* What rank r contributes to the double allreduce: exact in binary, so sums are exact. */
static double contribution(uint32_t r, int i) {
    return (r + 1) * 0.5 + i * 0.25;
}

/* One CM-5 combine that must succeed and give a result. */
static void combine(ni_t *ni, ni_pattern_t pattern, ni_combiner_t combiner, const uint32_t *in,
                    uint32_t *out, size_t len) {
    int overflow = -1, has = -1;
    CHECK(ni_combine(ni, pattern, combiner, in, out, len, 0, &overflow, &has));
    EXPECT(has == 1 && overflow == 0, "combine: has_result %d overflow %d", has, overflow);
}

int main(void) {
    ni_t *ni = NULL;
    ni_region_t *buf = NULL;
    uint8_t *p;
    void *vp;

    setvbuf(stdout, NULL, _IOLBF, 0);
    CHECK(ni_attach(&ni));
    CHECK(ni_rank(ni, &me));
    CHECK(ni_size(ni, &n));
    printf("rank %" PRIu32 " of %" PRIu32 "\n", me, n);
    if (n < 2)
        FAIL("needs at least 2 ranks (nirun -n 3)");
    CHECK(ni_alloc(ni, REGION_LEN, &buf));
    CHECK(ni_region_ptr(buf, &vp));
    p = vp;

    /* Allreduce of doubles: sum and max, blocking and non-blocking. */
    {
        double *send = (double *)(p + SEND_AT), *recv = (double *)(p + RECV_AT);
        ni_op_t *op = NULL;
        ni_status_t st;
        int done = 0;
        uint64_t t0;
        /* BIG_COUNT doubles: past a window slot, run in pieces as the Rust API's allreduce
         * does. */
        const int counts[] = {COUNT, BIG_COUNT};
        for (int c = 0; c < 2; c++) {
            for (int i = 0; i < counts[c]; i++) {
                send[i] = contribution(me, i);
                recv[i] = -1.0;
            }
            CHECK(ni_allreduce(ni, NI_F64, NI_SUM, buf, SEND_AT, buf, RECV_AT, counts[c]));
            for (int i = 0; i < counts[c]; i++) {
                double want = 0.0;
                for (uint32_t r = 0; r < n; r++)
                    want += contribution(r, i);
                EXPECT(recv[i] == want, "allreduce sum of %d [%d] = %.17g, expected %.17g",
                       counts[c], i, recv[i], want);
            }
        }
        printf("allreduce of doubles ok: sum[0] = %g\n", recv[0]);
        CHECK(ni_iallreduce(ni, NI_F64, NI_MAX, buf, SEND_AT, buf, RECV_AT, COUNT, &op));
        t0 = now_ns();
        while (!done) {
            CHECK(ni_test(ni, &op, &done, &st));
            if (!done && now_ns() - t0 > 20000000000u)
                FAIL("iallreduce did not finish within 20 s");
        }
        EXPECT(op == NULL && st.error == NI_OK, "iallreduce status %d", st.error);
        for (int i = 0; i < COUNT; i++)
            EXPECT(recv[i] == contribution(n - 1, i), "allreduce max [%d] = %g", i, recv[i]);
        /* In place, on 64-bit integers. */
        {
            int64_t *x = (int64_t *)(p + SEND_AT);
            x[0] = (int64_t)me - 10;
            CHECK(ni_allreduce(ni, NI_I64, NI_MIN, buf, SEND_AT, buf, SEND_AT, 1));
            EXPECT(x[0] == -10, "allreduce min in place = %" PRId64, x[0]);
        }
        printf("iallreduce (max) and in-place allreduce (min) ok\n");
    }

    /* Barriers. */
    {
        ni_op_t *op = NULL;
        ni_status_t st;
        CHECK(ni_barrier(ni));
        CHECK(ni_ibarrier(ni, &op));
        CHECK(ni_wait(ni, &op, &st));
        EXPECT(op == NULL && st.error == NI_OK, "ibarrier status %d", st.error);
        printf("barrier ok\n");
    }

    /* Broadcast from every root, blocking (int32) and non-blocking (uint64). */
    for (uint32_t root = 0; root < n; root++) {
        int32_t *x = (int32_t *)(p + SEND_AT);
        uint64_t *y = (uint64_t *)(p + RECV_AT);
        ni_op_t *op = NULL;
        for (int i = 0; i < 100; i++)
            x[i] = me == root ? (int32_t)(root * 1000 + i) : -1;
        CHECK(ni_broadcast(ni, root, NI_I32, buf, SEND_AT, 100));
        for (int i = 0; i < 100; i++)
            EXPECT(x[i] == (int32_t)(root * 1000 + i), "broadcast from %" PRIu32 ": [%d] = %d",
                   root, i, x[i]);
        for (int i = 0; i < 3; i++)
            y[i] = me == root ? ((uint64_t)root << 40) + (uint64_t)i : 0;
        CHECK(ni_ibroadcast(ni, root, NI_U64, buf, RECV_AT, 3, &op));
        CHECK(ni_wait(ni, &op, NULL));
        for (int i = 0; i < 3; i++)
            EXPECT(y[i] == ((uint64_t)root << 40) + (uint64_t)i,
                   "ibroadcast from %" PRIu32 ": [%d] = 0x%" PRIx64, root, i, y[i]);
    }
    printf("broadcast from every root ok\n");

    /* Reduce to every root; only the root passes a result buffer. */
    for (uint32_t root = 0; root < n; root++) {
        uint64_t *x = (uint64_t *)(p + SEND_AT), *r = (uint64_t *)(p + RECV_AT);
        x[0] = (uint64_t)me + 1;
        x[1] = (uint64_t)1 << me;
        r[0] = r[1] = 0;
        CHECK(ni_reduce(ni, root, NI_U64, NI_SUM, buf, SEND_AT, me == root ? buf : NULL, RECV_AT,
                        1));
        CHECK(ni_reduce(ni, root, NI_U64, NI_OR, buf, SEND_AT + 8, me == root ? buf : NULL,
                        RECV_AT + 8, 1));
        if (me == root)
            EXPECT(r[0] == (uint64_t)n * (n + 1) / 2 && r[1] == ((uint64_t)1 << n) - 1,
                   "reduce at %" PRIu32 ": sum %" PRIu64 " or 0x%" PRIx64, root, r[0], r[1]);
        else
            EXPECT(r[0] == 0 && r[1] == 0, "reduce wrote a non-root's buffer");
    }
    printf("reduce to every root ok\n");

    /* Scans: inclusive and exclusive sums of rank + 1. */
    {
        int64_t *x = (int64_t *)(p + SEND_AT), *r = (int64_t *)(p + RECV_AT);
        int64_t m = me;
        x[0] = m + 1;
        CHECK(ni_scan(ni, NI_I64, NI_SUM, 1, buf, SEND_AT, buf, RECV_AT, 1));
        EXPECT(r[0] == (m + 1) * (m + 2) / 2, "inclusive scan = %" PRId64, r[0]);
        CHECK(ni_scan(ni, NI_I64, NI_SUM, 0, buf, SEND_AT, buf, RECV_AT, 1));
        EXPECT(r[0] == m * (m + 1) / 2, "exclusive scan = %" PRId64, r[0]);
        printf("scan ok: inclusive %" PRId64 ", exclusive %" PRId64 "\n", (m + 1) * (m + 2) / 2,
               r[0]);
    }

    /* Allgather: every rank's three words, in rank order. */
    {
        uint32_t *x = (uint32_t *)(p + SEND_AT), *r = (uint32_t *)(p + RECV_AT);
        for (int k = 0; k < 3; k++)
            x[k] = me * 10 + (uint32_t)k;
        CHECK(ni_allgather(ni, NI_U32, buf, SEND_AT, buf, RECV_AT, 3));
        for (uint32_t q = 0; q < n; q++)
            for (uint32_t k = 0; k < 3; k++)
                EXPECT(r[q * 3 + k] == q * 10 + k, "allgather [%" PRIu32 "] = %" PRIu32,
                       q * 3 + k, r[q * 3 + k]);
        printf("allgather ok\n");
    }

    /* Local error paths: nothing reaches the network, so no rank needs to match them. */
    {
        ni_op_t *op = (ni_op_t *)buf;
        uint32_t w[6] = {0};
        EXPECT_CODE(ni_allreduce(ni, (ni_dtype_t)99, NI_SUM, buf, 0, buf, 0, 1), NI_EINVAL);
        EXPECT_CODE(ni_allreduce(ni, NI_F64, (ni_redop_t)42, buf, 0, buf, 0, 1), NI_EINVAL);
        EXPECT_CODE(ni_allreduce(ni, NI_F64, NI_XOR, buf, 0, buf, 0, 1), NI_EBADDESCRIPTOR);
        EXPECT_CODE(ni_broadcast(ni, 0, NI_F64, buf, REGION_LEN - 8, 2), NI_EINVAL);
        EXPECT_CODE(ni_iallreduce(ni, NI_F64, NI_SUM, NULL, 0, buf, 0, 1, &op), NI_EINVAL);
        EXPECT(op == NULL, "ni_iallreduce did not clear *op on failure");
        EXPECT_CODE(ni_reduce(ni, n + 3, NI_I32, NI_SUM, buf, 0, buf, 0, 1), NI_EOUTOFPARTITION);
        EXPECT_CODE(ni_combine(ni, NI_PATTERN_REDUCE, NI_COMBINER_ADD, w, w, 6, 0, NULL, NULL),
                    NI_EINVAL);
        EXPECT_CODE(ni_set_participation(ni, 0x100), NI_EINVAL);
        printf("collective error codes ok\n");
    }

    /* CM-5 combines. */
    {
        uint32_t in[2], out[2];
        /* The exclusive add-scan forward: rank i gets the sum of the ranks below it. */
        uint32_t below = 0;
        for (uint32_t r = 0; r < me; r++)
            below += r;
        in[0] = me;
        out[0] = 12345;
        combine(ni, NI_PATTERN_SCAN_FORWARD, NI_COMBINER_ADD, in, out, 1);
        EXPECT(out[0] == below, "add-scan forward gave %" PRIu32 ", expected %" PRIu32, out[0],
               below);
        printf("cm5 add-scan ok: %" PRIu32 " (sum of the ranks below %" PRIu32 ")\n", out[0], me);
        /* Backward: the sum of the ranks above. */
        combine(ni, NI_PATTERN_SCAN_BACKWARD, NI_COMBINER_ADD, in, out, 1);
        {
            uint32_t want = 0;
            for (uint32_t r = me + 1; r < n; r++)
                want += r;
            EXPECT(out[0] == want, "add-scan backward gave %" PRIu32 ", expected %" PRIu32,
                   out[0], want);
        }
        /* Two words, unsigned, least significant first: the carry crosses words. */
        in[0] = 0xFFFFFFFFu;
        in[1] = me;
        combine(ni, NI_PATTERN_REDUCE, NI_COMBINER_UADD, in, in, 2);
        {
            uint64_t want = (uint64_t)n * 0xFFFFFFFFu + ((uint64_t)n * (n - 1) / 2 << 32);
            EXPECT(in[0] == (uint32_t)want && in[1] == (uint32_t)(want >> 32),
                   "two-word uadd gave 0x%08" PRIx32 "%08" PRIx32 ", expected 0x%016" PRIx64,
                   in[1], in[0], want);
        }
        /* Signed max (negative numbers work). */
        in[0] = (uint32_t)((int32_t)me * 7 - 100);
        combine(ni, NI_PATTERN_REDUCE, NI_COMBINER_MAX, in, out, 1);
        EXPECT((int32_t)out[0] == (int32_t)(n - 1) * 7 - 100, "max gave %" PRId32,
               (int32_t)out[0]);
        printf("cm5 backward scan, two-word uadd and max ok\n");
    }

    /* Rank 1 abstains from combines but takes reductions with ni_combine_receive. */
    {
        uint32_t w = me + 1, out = 0;
        int overflow = -1, has = -1;
        uint32_t want = n * (n + 1) / 2 - 2; /* everyone's rank + 1 but rank 1's */
        if (me == 1)
            CHECK(ni_set_participation(ni, NI_PART_COM_REC_ABSTAIN));
        CHECK(ni_barrier(ni));
        if (me == 1) {
            EXPECT_CODE(ni_combine(ni, NI_PATTERN_REDUCE, NI_COMBINER_ADD, &w, &out, 1, 0, NULL,
                                   NULL),
                        NI_EABSTAINING);
            CHECK(ni_combine_receive(ni, &out, 1, &overflow, &has));
            EXPECT(has == 1 && out == want, "abstainer's reduction: has %d, %" PRIu32, has, out);
        } else {
            CHECK(ni_combine(ni, NI_PATTERN_REDUCE, NI_COMBINER_ADD, &w, &out, 1, 0, &overflow,
                             &has));
            EXPECT(has == 1 && out == want, "reduction with an abstainer: %" PRIu32, out);
        }
        CHECK(ni_barrier(ni));
        if (me == 1)
            CHECK(ni_set_participation(ni, 0));
        CHECK(ni_barrier(ni));
        printf("abstainer ok: the reduction without rank 1 is %" PRIu32 "\n", out);
    }

    /* A collision (rank 0 adds, the others OR) fails everywhere until a combine flush. */
    {
        uint32_t w = 1, out = 0;
        ni_combiner_t c = me == 0 ? NI_COMBINER_ADD : NI_COMBINER_OR;
        EXPECT_CODE(ni_combine(ni, NI_PATTERN_REDUCE, c, &w, &out, 1, 0, NULL, NULL),
                    NI_ECOLLISION);
        EXPECT_CODE(ni_combine(ni, NI_PATTERN_REDUCE, NI_COMBINER_ADD, &w, &out, 1, 0, NULL, NULL),
                    NI_ECOLLISION);
        CHECK(ni_combine_flush(ni));
        combine(ni, NI_PATTERN_REDUCE, NI_COMBINER_ADD, &w, &out, 1);
        EXPECT(out == n, "add after the flush gave %" PRIu32, out);
        printf("collision and combine flush ok\n");
    }

    /* Network-done, synchronous and asynchronous globals. */
    {
        int v = -1;
        uint64_t rises = 0, t0;
        CHECK(ni_network_done(ni));
        CHECK(ni_sync_global(ni, 0, &v));
        EXPECT(v == 0, "sync global of zeros gave %d", v);
        CHECK(ni_sync_global(ni, me == n - 1, &v));
        EXPECT(v == 1, "sync global with rank %" PRIu32 "'s bit gave %d", n - 1, v);
        if (me == 0)
            CHECK(ni_set_participation(ni, NI_PART_GLOBAL_REC_IE));
        CHECK(ni_barrier(ni));
        if (me == n - 1)
            CHECK(ni_set_async_global(ni, 1));
        t0 = now_ns();
        for (;;) {
            CHECK(ni_global_rec(ni, &v));
            if (v)
                break;
            if (now_ns() - t0 > 5000000000u)
                FAIL("the asynchronous global never rose");
            nap();
        }
        if (me == 0) {
            t0 = now_ns();
            for (;;) {
                CHECK(ni_global_rises(ni, &rises));
                if (rises > 0)
                    break;
                if (now_ns() - t0 > 5000000000u)
                    FAIL("no global rec event");
                nap();
            }
        }
        CHECK(ni_barrier(ni));
        if (me == n - 1)
            CHECK(ni_set_async_global(ni, 0));
        CHECK(ni_barrier(ni));
        CHECK(ni_global_rec(ni, &v));
        EXPECT(v == 0, "the asynchronous global did not fall");
        if (me == 0)
            CHECK(ni_set_participation(ni, 0));
        printf("network done and globals ok\n");
    }

    /* One-sided into malloc'd memory every rank registered: the same registration order
     * gives the same key everywhere. A put of PUT_LEN bytes into the next rank's at offset
     * 100, then a get of them back; the stack cannot be registered (on a host). */
    {
        enum { MEM_LEN = 10000, PUT_LEN = 5000 };
        uint32_t next = (me + 1) % n, prev = (me + n - 1) % n, key;
        unsigned char *mem = malloc(MEM_LEN), *src = p + SEND_AT, *back = p + RECV_AT;
        unsigned char on_stack[64];
        ni_region_t *reg = NULL, *bad = NULL;
        if (!mem)
            FAIL("out of memory");
        memset(mem, 0xEE, MEM_LEN);
        CHECK(ni_register(ni, mem, MEM_LEN, NI_REMOTE_READ | NI_REMOTE_WRITE, &reg));
        EXPECT(mem[0] == 0xEE && mem[MEM_LEN - 1] == 0xEE, "registration changed the memory");
        CHECK(ni_region_key(reg, &key));
        if (getenv("NI_SOCKET"))
            EXPECT(ni_register(ni, on_stack, sizeof on_stack, NI_REMOTE_WRITE, &bad) == NI_EINVAL,
                   "the stack was registered");
        for (int i = 0; i < PUT_LEN; i++)
            src[i] = (unsigned char)(me * 31 + i);
        CHECK(ni_barrier(ni));
        CHECK(ni_put(ni, next, buf, SEND_AT, PUT_LEN, key, 100));
        CHECK(ni_barrier(ni));
        for (int i = 0; i < PUT_LEN; i++)
            EXPECT(mem[100 + i] == (unsigned char)(prev * 31 + i), "byte %d of the put", i);
        EXPECT(mem[99] == 0xEE && mem[100 + PUT_LEN] == 0xEE, "bytes around the put changed");
        CHECK(ni_get(ni, next, buf, RECV_AT, PUT_LEN, key, 100));
        EXPECT(memcmp(back, src, PUT_LEN) == 0, "the get did not bring the put back");
        CHECK(ni_barrier(ni));
        CHECK(ni_region_free(reg));
        free(mem);
        printf("put/get into registered malloc'd memory ok\n");
    }

    /* Leave together. */
    CHECK(ni_barrier(ni));
    CHECK(ni_region_free(buf));
    CHECK(ni_detach(ni));
    printf("PASS\n");
    return 0;
}
