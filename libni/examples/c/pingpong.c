/*
 * pingpong.c — libni's C interface end to end, between rank 0 and rank 1:
 *
 *   - ping-pong of 0, 1, 63, 64, 65, 4096 and 1 MiB messages, blocking and non-blocking,
 *     every payload checked in both directions; truncated receives (blocking and
 *     non-blocking), which report the message's full length and tag;
 *   - a window of receives and a send finished by one ni_wait_all: statuses in array order,
 *     a truncated one among them, a NULL entry skipped;
 *   - one put and one get, verified on both sides; error codes of bad one-sided requests;
 *   - an active-message round trip: rank 1's handler replies from within the handler;
 *   - message-queue sends (one accepted, one rejected: the queue is full), the receiver's
 *     take, MQCW and IR_STATUS checks.
 *
 * Every failure prints ni_last_error() and exits non-zero. Build and run:
 *
 *   cc -std=c99 -o pingpong pingpong.c $(pkg-config --cflags --libs ni)
 *   nirun -n 2 ./pingpong [ITERATIONS]
 */
#define _POSIX_C_SOURCE 200809L

#include <ni.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIB ((size_t)1 << 20)
/* Layout of the big region: [0, 1 MiB) send area, [1 MiB, 2 MiB) receive area, then a
 * scratch area for put/get. */
#define SEND_AT 0
#define RECV_AT MIB
#define SCRATCH_AT (2 * MIB)
#define BIG_LEN (2 * MIB + 8192)
#define WIN_LEN 4096
#define PUT_LEN 200
#define PUT_AT 128
#define GET_LEN 300
#define GET_AT 1024

enum {
    TAG_PING = 1,
    TAG_PONG = 2,
    TAG_TRUNC = 3,
    TAG_PUT_DONE = 4,
    TAG_MQ_DONE = 5,
    TAG_BYE = 6,
    TAG_WINDOW = 7,
    TAG_WINDOW_TRUNC = 8,
    TAG_NEVER = 99
};
enum { AM_REQUEST = 1, AM_REPLY = 2 };

static uint32_t me;

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

#define EXPECT(cond, ...)          \
    do {                           \
        if (!(cond))               \
            FAIL(__VA_ARGS__);     \
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

static uint8_t pat(uint32_t seed, size_t i) {
    return (uint8_t)(i * 31u + seed * 7u + 1u);
}

static void fill(uint8_t *p, size_t n, uint32_t seed, uint8_t x) {
    for (size_t i = 0; i < n; i++)
        p[i] = pat(seed, i) ^ x;
}

static void verify(const uint8_t *p, size_t n, uint32_t seed, uint8_t x, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (uint8_t)(pat(seed, i) ^ x))
            FAIL("%s: byte %zu of %zu is 0x%02x, expected 0x%02x", what, i, n, p[i],
                 (uint8_t)(pat(seed, i) ^ x));
}

/* What an active-message handler saw. */
struct am_box {
    int arrived;
    uint32_t src;
    size_t len;
    char data[128];
    /* Non-NULL: reply to handler `reply_to` of the sender, from within the handler. */
    ni_t *ni;
    uint64_t reply_to;
    int reply_rc;
};

/* Runs inside libni's progress, with the ni_t unlocked: it records what arrived and may
 * call libni on the same ni_t (here: answer with an active message). */
static void on_am(void *ctx, uint32_t src, const void *data, size_t len) {
    struct am_box *b = ctx;
    b->src = src;
    b->len = len;
    memcpy(b->data, data, len < sizeof b->data ? len : sizeof b->data);
    b->data[sizeof b->data - 1] = 0;
    if (b->ni != NULL) {
        char reply[sizeof b->data + 16];
        snprintf(reply, sizeof reply, "am reply to: %s", b->data);
        b->reply_rc = ni_am_send(b->ni, src, b->reply_to, reply, strlen(reply) + 1);
    }
    b->arrived++;
}

static void await_am(ni_t *ni, struct am_box *b) {
    uint64_t t0 = now_ns();
    while (!b->arrived) {
        CHECK(ni_progress(ni, NULL));
        if (now_ns() - t0 > 20000000000u)
            FAIL("no active message within 20 s");
        nap();
    }
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 4;
    static const size_t sizes[] = {0, 1, 63, 64, 65, 4096, MIB};
    ni_t *ni = NULL;
    ni_region_t *big = NULL, *win = NULL;
    ni_mq_t *mq = NULL;
    uint32_t size, node, peer;
    uint8_t *bp, *wp;
    uint32_t big_key, win_key, src;
    uint64_t tag, len;
    struct am_box box;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (iters < 1)
        iters = 1;

    CHECK(ni_attach(&ni));
    CHECK(ni_rank(ni, &me));
    CHECK(ni_size(ni, &size));
    CHECK(ni_node(ni, &node));
    printf("rank %" PRIu32 " of %" PRIu32 " (node %" PRIu32 ")\n", me, size, node);
    if (size < 2)
        FAIL("needs 2 ranks (nirun -n 2)");
    if (me > 1) {
        CHECK(ni_detach(ni));
        printf("PASS (idle)\n");
        return 0;
    }
    peer = 1 - me;

    /* Same allocations in the same order on both ranks: same keys (big 1, win 2, mq 3). */
    CHECK(ni_alloc(ni, BIG_LEN, &big));
    CHECK(ni_alloc(ni, WIN_LEN, &win));
    CHECK(ni_mq_create(ni, 2, 2, &mq)); /* holds one message; the one that lands hits Threshold */
    {
        /* Checked fresh here, before this rank's first progress call: the peer sends into it
         * after the active-message round trip, and this rank's handler answers that from
         * inside any wait (e.g. the receive below), so later it may already hold a message. */
        uint64_t w;
        CHECK(ni_mq_mqcw(mq, &w));
        EXPECT(w == NI_MQCW_MAKE(0, 1, 2, 2) && NI_MQCW_TAIL(w) == 1 && NI_MQCW_LIMIT(w) == 2 &&
                   NI_MQCW_THRESHOLD(w) == 2 && !(w & NI_MQCW_SIG),
               "fresh MQCW 0x%016" PRIx64, w);
    }
    {
        size_t l;
        void *p;
        CHECK(ni_region_len(big, &l));
        EXPECT(l >= BIG_LEN, "region of %zu bytes for %zu asked", l, (size_t)BIG_LEN);
        CHECK(ni_region_ptr(big, &p));
        bp = p;
        CHECK(ni_region_ptr(win, &p));
        wp = p;
        CHECK(ni_region_key(big, &big_key));
        CHECK(ni_region_key(win, &win_key));
        printf("regions: big key %" PRIu32 ", window key %" PRIu32 "\n", big_key, win_key);
    }
    fill(wp, WIN_LEN, 1000 + me, 0);
    memset(&box, 0, sizeof box);
    if (me == 1) {
        box.ni = ni;
        box.reply_to = AM_REPLY;
        box.reply_rc = -1;
    }
    CHECK(ni_am_register(ni, me == 0 ? AM_REPLY : AM_REQUEST, on_am, &box));

    /* Local error paths. */
    {
        ni_region_t *r = (ni_region_t *)&box;
        EXPECT_CODE(ni_alloc(ni, 0, &r), NI_EINVAL);
        EXPECT(r == NULL, "ni_alloc did not clear *out on failure");
        EXPECT(strstr(ni_last_error(), "ni_alloc") != NULL, "last error: %s", ni_last_error());
        EXPECT_CODE(ni_send(ni, peer, NULL, 0, 0, TAG_PING), NI_EINVAL);
        EXPECT_CODE(ni_send(ni, peer, win, WIN_LEN - 1, 2, TAG_PING), NI_EINVAL);
        EXPECT_CODE(ni_recv(ni, -5, win, 0, 1, 0, 0, NULL, NULL, NULL), NI_EINVAL);
        EXPECT_CODE(ni_rank(ni, NULL), NI_EINVAL);
        EXPECT_CODE(ni_am_send(ni, peer, AM_REQUEST, NULL, 1), NI_EINVAL);
        EXPECT(strcmp(ni_strerror(NI_EPEERDOWN), ni_strerror(NI_OK)) != 0, "strerror");
        printf("local error paths ok\n");
    }

    /* Wait until the peer has attached. */
    {
        uint64_t t0 = now_ns();
        int rc;
        while ((rc = ni_ping(ni, peer)) != NI_OK) {
            if (rc != NI_EPEERDOWN || now_ns() - t0 > 20000000000u)
                FAIL("ping %" PRIu32 ": %d (%s): %s", peer, rc, ni_strerror(rc), ni_last_error());
            nap();
        }
        printf("peer %" PRIu32 " is up\n", peer);
    }

    /* Ping-pong: rank 0 sends pat(seed), rank 1 checks and answers with its complement. */
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        for (int it = 0; it < iters; it++) {
            uint32_t seed = (uint32_t)(n + (size_t)it);
            int nonblocking = it % 2;
            memset(bp + RECV_AT, 0xEE, n + 1);
            if (me == 0) {
                fill(bp + SEND_AT, n, seed, 0);
                if (!nonblocking) {
                    CHECK(ni_send(ni, peer, big, SEND_AT, n, TAG_PING));
                    CHECK(ni_recv(ni, peer, big, RECV_AT, MIB, TAG_PONG, UINT64_MAX, &src, &tag,
                                  &len));
                } else {
                    ni_op_t *r = NULL, *w = NULL;
                    ni_status_t st;
                    CHECK(ni_irecv(ni, NI_ANY_SOURCE, big, RECV_AT, MIB, TAG_PONG, UINT64_MAX, &r));
                    CHECK(ni_isend(ni, peer, big, SEND_AT, n, TAG_PING, &w));
                    CHECK(ni_wait(ni, &w, &st));
                    EXPECT(w == NULL && st.error == NI_OK && st.rank == peer,
                           "send status: error %d rank %" PRIu32, st.error, st.rank);
                    CHECK(ni_wait(ni, &r, &st));
                    EXPECT(r == NULL, "ni_wait did not clear the op");
                    src = st.rank;
                    tag = st.tag;
                    len = st.len;
                }
                EXPECT(src == peer && tag == TAG_PONG && len == n,
                       "pong from %" PRIu32 " tag %" PRIu64 " len %" PRIu64 ", expected %zu", src,
                       tag, len, n);
                verify(bp + RECV_AT, n, seed, 0xFF, "pong payload");
                EXPECT(bp[RECV_AT + n] == 0xEE, "pong of %zu bytes wrote past its length", n);
            } else {
                if (!nonblocking) {
                    CHECK(ni_recv(ni, NI_ANY_SOURCE, big, RECV_AT, MIB, TAG_PING, UINT64_MAX, &src,
                                  &tag, &len));
                } else {
                    ni_op_t *r = NULL;
                    ni_status_t st;
                    int done = 0;
                    uint64_t t0 = now_ns();
                    CHECK(ni_irecv(ni, peer, big, RECV_AT, MIB, 0, 0, &r));
                    while (!done) {
                        CHECK(ni_test(ni, &r, &done, &st));
                        if (!done && now_ns() - t0 > 20000000000u)
                            FAIL("ping of %zu bytes never arrived", n);
                    }
                    EXPECT(r == NULL, "ni_test did not clear the op");
                    src = st.rank;
                    tag = st.tag;
                    len = st.len;
                }
                EXPECT(src == peer && tag == TAG_PING && len == n,
                       "ping from %" PRIu32 " tag %" PRIu64 " len %" PRIu64 ", expected %zu", src,
                       tag, len, n);
                verify(bp + RECV_AT, n, seed, 0, "ping payload");
                EXPECT(bp[RECV_AT + n] == 0xEE, "ping of %zu bytes wrote past its length", n);
                fill(bp + SEND_AT, n, seed, 0xFF);
                if (!nonblocking) {
                    CHECK(ni_send(ni, peer, big, SEND_AT, n, TAG_PONG));
                } else {
                    ni_op_t *w = NULL;
                    CHECK(ni_isend(ni, peer, big, SEND_AT, n, TAG_PONG, &w));
                    CHECK(ni_wait_timeout(ni, &w, 20000000000u, NULL));
                }
            }
        }
        printf("pingpong %zu bytes ok (%d round trips)\n", n, iters);
    }

    /* A receive buffer too small: the error reports the full length and the tag. */
    if (me == 0) {
        fill(bp + SEND_AT, 100, 77, 0);
        CHECK(ni_send(ni, peer, big, SEND_AT, 100, TAG_TRUNC));
        CHECK(ni_send(ni, peer, big, SEND_AT, 50, TAG_TRUNC));
        printf("sent 100 and 50 bytes into 10-byte buffers\n");
    } else {
        ni_op_t *r = NULL;
        ni_status_t st;
        EXPECT_CODE(ni_recv(ni, peer, big, RECV_AT, 10, TAG_TRUNC, UINT64_MAX, &src, &tag, &len),
                    NI_ETRUNCATED);
        EXPECT(src == peer && tag == TAG_TRUNC && len == 100,
               "truncated message from %" PRIu32 " tag %" PRIu64 " len %" PRIu64, src, tag, len);
        verify(bp + RECV_AT, 10, 77, 0, "truncated payload");
        printf("truncated receive reported: %s\n", ni_last_error());
        CHECK(ni_irecv(ni, NI_ANY_SOURCE, big, RECV_AT, 10, TAG_TRUNC, UINT64_MAX, &r));
        EXPECT_CODE(ni_wait(ni, &r, &st), NI_ETRUNCATED);
        EXPECT(r == NULL && st.error == NI_ETRUNCATED && st.rank == peer && st.tag == TAG_TRUNC &&
                   st.len == 50,
               "non-blocking truncated receive: error %d rank %" PRIu32 " tag %" PRIu64
               " len %" PRIu64,
               st.error, st.rank, st.tag, st.len);
        printf("non-blocking truncated receive reported length %" PRIu64 "\n", st.len);
    }

    /* A window of operations finished by one ni_wait_all: rank 1 posts six receives and a
     * send, one entry NULL, one receive too small for its message. */
    {
        static const size_t lens[4] = {8, 16, 24, 32};
        if (me == 0) {
            for (int k = 0; k < 4; k++) {
                fill(bp + SEND_AT, lens[k], 500 + k, 0);
                CHECK(ni_send(ni, peer, big, SEND_AT, lens[k], TAG_WINDOW));
                if (k == 1)
                    CHECK(ni_send(ni, peer, big, SEND_AT, 100, TAG_WINDOW_TRUNC));
            }
            CHECK(ni_recv(ni, peer, big, RECV_AT, 64, TAG_WINDOW, UINT64_MAX, &src, &tag, &len));
            EXPECT(len == 4, "the window's send came with %" PRIu64 " bytes", len);
            EXPECT_CODE(ni_wait_all(ni, NULL, 1, NULL), NI_EINVAL);
            CHECK(ni_wait_all(ni, NULL, 0, NULL));
            printf("wait_all window sent\n");
        } else {
            ni_op_t *ops[7] = {NULL};
            ni_status_t st[7];
            size_t at[7] = {0, 64, 0, 128, 192, 256, 0};
            memset(bp + RECV_AT, 0, 512);
            CHECK(ni_irecv(ni, peer, big, RECV_AT + at[0], 64, TAG_WINDOW, UINT64_MAX, &ops[0]));
            CHECK(ni_irecv(ni, peer, big, RECV_AT + at[1], 64, TAG_WINDOW, UINT64_MAX, &ops[1]));
            CHECK(ni_irecv(ni, peer, big, RECV_AT + at[3], 10, TAG_WINDOW_TRUNC, UINT64_MAX,
                           &ops[3]));
            CHECK(ni_irecv(ni, peer, big, RECV_AT + at[4], 64, TAG_WINDOW, UINT64_MAX, &ops[4]));
            CHECK(ni_irecv(ni, peer, big, RECV_AT + at[5], 64, TAG_WINDOW, UINT64_MAX, &ops[5]));
            CHECK(ni_isend(ni, peer, big, SEND_AT, 4, TAG_WINDOW, &ops[6]));
            ops[2] = ops[6];
            EXPECT_CODE(ni_wait_all(ni, ops, 7, NULL), NI_EINVAL);
            EXPECT(ops[0] != NULL && ops[6] != NULL, "a refused ni_wait_all freed ops");
            ops[2] = NULL;
            memset(st, 0xff, sizeof st);
            EXPECT_CODE(ni_wait_all(ni, ops, 7, st), NI_ETRUNCATED);
            for (int i = 0; i < 7; i++)
                EXPECT(ops[i] == NULL, "ni_wait_all left op %d", i);
            EXPECT(st[2].error == NI_OK && st[2].rank == 0 && st[2].len == 0 && st[2].tag == 0,
                   "the NULL entry's status was not zeroed");
            EXPECT(st[3].error == NI_ETRUNCATED && st[3].rank == peer && st[3].len == 100 &&
                       st[3].tag == TAG_WINDOW_TRUNC,
                   "truncated entry: error %d len %" PRIu64, st[3].error, st[3].len);
            for (int i = 0, k = 0; i < 6; i++) {
                if (i == 2 || i == 3)
                    continue;
                EXPECT(st[i].error == NI_OK && st[i].rank == peer && st[i].len == lens[k] &&
                           st[i].tag == TAG_WINDOW,
                       "entry %d: error %d len %" PRIu64 " (expected %zu)", i, st[i].error,
                       st[i].len, lens[k]);
                verify(bp + RECV_AT + at[i], lens[k], 500 + k, 0, "wait_all payload");
                k++;
            }
            EXPECT(st[6].error == NI_OK && st[6].rank == peer && st[6].len == 4,
                   "the send's status: error %d len %" PRIu64, st[6].error, st[6].len);
            printf("wait_all ok: 7 entries in order, the truncated one reported (length %" PRIu64
                   "), the NULL one skipped\n",
                   st[3].len);
        }
    }

    /* One put, one get. */
    if (me == 0) {
        ni_op_t *r = NULL;
        fill(bp + SCRATCH_AT, PUT_LEN, 4242, 0);
        CHECK(ni_put(ni, peer, big, SCRATCH_AT, PUT_LEN, win_key, PUT_AT));
        printf("put %d bytes at offset %d of rank %" PRIu32 "'s window\n", PUT_LEN, PUT_AT, peer);
        memset(bp + SCRATCH_AT + 4096, 0, GET_LEN);
        CHECK(ni_get(ni, peer, big, SCRATCH_AT + 4096, GET_LEN, win_key, GET_AT));
        {
            /* The window of rank 1 holds pat(1001, i) from offset 0. */
            const uint8_t *g = bp + SCRATCH_AT + 4096;
            for (size_t i = 0; i < GET_LEN; i++)
                EXPECT(g[i] == pat(1000 + peer, GET_AT + i), "get: byte %zu is 0x%02x", i, g[i]);
        }
        printf("get verified (%d bytes)\n", GET_LEN);
        EXPECT_CODE(ni_put(ni, peer, big, SCRATCH_AT, 8, 999, 0), NI_EBADKEY);
        EXPECT_CODE(ni_get(ni, peer, big, SCRATCH_AT, 8, win_key, WIN_LEN), NI_EOUTOFBOUNDS);
        EXPECT_CODE(ni_ping(ni, size + 5), NI_EOUTOFPARTITION);
        EXPECT_CODE(ni_reset_remote(ni, peer), NI_EPERM);
        CHECK(ni_irecv(ni, peer, big, SCRATCH_AT, 16, TAG_NEVER, UINT64_MAX, &r));
        EXPECT_CODE(ni_wait_timeout(ni, &r, 1000000u, NULL), NI_ETIMEDOUT);
        EXPECT(r == NULL, "ni_wait_timeout did not clear the op");
        CHECK(ni_irecv(ni, peer, big, SCRATCH_AT, 16, TAG_NEVER, UINT64_MAX, &r));
        CHECK(ni_forget(ni, &r));
        EXPECT(r == NULL, "ni_forget did not clear the op");
        EXPECT_CODE(ni_forget(ni, &r), NI_EINVAL);
        printf("remote error codes ok\n");
        CHECK(ni_send(ni, peer, big, SEND_AT, 0, TAG_PUT_DONE));
    } else {
        CHECK(ni_recv(ni, peer, big, RECV_AT, 0, TAG_PUT_DONE, UINT64_MAX, NULL, NULL, NULL));
        for (size_t i = 0; i < WIN_LEN; i++) {
            uint8_t want = (i >= PUT_AT && i < PUT_AT + PUT_LEN) ? pat(4242, i - PUT_AT)
                                                                 : pat(1000 + me, i);
            EXPECT(wp[i] == want, "window byte %zu is 0x%02x, expected 0x%02x", i, wp[i], want);
        }
        printf("put verified (%d bytes at offset %d, the rest untouched)\n", PUT_LEN, PUT_AT);
    }

    /* Active-message round trip. */
    if (me == 0) {
        static const char req[] = "am request 42";
        char want[64];
        CHECK(ni_am_send(ni, peer, AM_REQUEST, req, sizeof req));
        await_am(ni, &box);
        snprintf(want, sizeof want, "am reply to: %s", req);
        EXPECT(box.arrived == 1 && box.src == peer && box.len == strlen(want) + 1 &&
                   strcmp(box.data, want) == 0,
               "am reply: %d arrivals, src %" PRIu32 ", %zu bytes \"%.*s\"", box.arrived, box.src,
               box.len, (int)box.len, box.data);
        printf("active message round trip ok: \"%s\"\n", box.data);
    } else {
        await_am(ni, &box);
        EXPECT(box.arrived == 1 && box.src == peer && strcmp(box.data, "am request 42") == 0,
               "am request: src %" PRIu32 ", \"%.*s\"", box.src, (int)box.len, box.data);
        EXPECT(box.reply_rc == NI_OK, "the handler's reply returned %d (%s)", box.reply_rc,
               ni_strerror(box.reply_rc));
        printf("active message handled: \"%s\" from rank %" PRIu32 " (replied from the handler)\n",
               box.data, box.src);
    }

    /* Message queue: limit 2 holds one message (checked fresh right after its creation). */
    if (me == 0) {
        ni_mq_addr_t to;
        unsigned char msg[NI_MQ_MESSAGE];
        int accepted = -1;
        uint64_t tail = 0;
        CHECK(ni_mq_addr(mq, &to)); /* the peer's queue has the same key */
        memset(msg, 0, sizeof msg);
        snprintf((char *)msg, sizeof msg, "mq message from rank %" PRIu32, me);
        CHECK(ni_mq_send(ni, peer, to, msg, &accepted, &tail));
        EXPECT(accepted == 1 && tail == 2, "first mq send: accepted %d tail %" PRIu64, accepted,
               tail);
        printf("mq send accepted (tail %" PRIu64 ")\n", tail);
        msg[0] = 'X';
        CHECK(ni_mq_send(ni, peer, to, msg, &accepted, NULL));
        EXPECT(accepted == 0, "second mq send into a full queue: accepted %d", accepted);
        printf("mq send rejected (queue full)\n");
        CHECK(ni_send(ni, peer, big, SEND_AT, 0, TAG_MQ_DONE));
    } else {
        unsigned char got[4 * NI_MQ_MESSAGE];
        char want[NI_MQ_MESSAGE];
        size_t count = 99;
        uint64_t w, old, ir, addr, iova;
        CHECK(ni_recv(ni, peer, big, RECV_AT, 0, TAG_MQ_DONE, UINT64_MAX, NULL, NULL, NULL));
        CHECK(ni_mq_take(mq, got, 4, &count));
        memset(want, 0, sizeof want);
        snprintf(want, sizeof want, "mq message from rank %" PRIu32, peer);
        EXPECT(count == 1 && memcmp(got, want, NI_MQ_MESSAGE) == 0, "mq take: %zu messages, \"%s\"",
               count, (char *)got);
        CHECK(ni_mq_take(mq, got, 4, &count));
        EXPECT(count == 0, "mq take again: %zu messages", count);
        CHECK(ni_mq_mqcw(mq, &w));
        EXPECT(NI_MQCW_TAIL(w) == 2 && (w & NI_MQCW_SIG), "MQCW after the send 0x%016" PRIx64, w);
        CHECK(ni_ir_status(ni, &ir, &addr));
        CHECK(ni_mq_iova(mq, &iova));
        EXPECT((ir & NI_IR_MSG_ADDR_VALID) && addr == iova,
               "IR_STATUS 0x%" PRIx64 " MSG_ADDR 0x%" PRIx64 " (queue at 0x%" PRIx64 ")", ir, addr,
               iova);
        CHECK(ni_ir_write(ni, 0, NI_IR_MSG_ADDR_VALID | NI_IR_MSG_MULTIPLE));
        CHECK(ni_ir_status(ni, &ir, NULL));
        EXPECT(!(ir & NI_IR_MSG_ADDR_VALID), "IR_STATUS 0x%" PRIx64 " after clearing", ir);
        CHECK(ni_mq_swap(mq, NI_MQCW_MAKE(0, 1, 2, 2), &old));
        CHECK(ni_mq_set_head(mq, 1));
        EXPECT(NI_MQCW_TAIL(old) == 2, "swapped-out MQCW 0x%016" PRIx64, old);
        printf("mq receive ok: \"%s\"; threshold status and reset ok\n", want);
    }

    /* Leave together: neither exits while the other still needs it. */
    if (me == 0) {
        CHECK(ni_send(ni, peer, big, SEND_AT, 0, TAG_BYE));
        CHECK(ni_recv(ni, peer, big, RECV_AT, 0, TAG_BYE, UINT64_MAX, NULL, NULL, NULL));
    } else {
        CHECK(ni_recv(ni, peer, big, RECV_AT, 0, TAG_BYE, UINT64_MAX, NULL, NULL, NULL));
        CHECK(ni_send(ni, peer, big, SEND_AT, 0, TAG_BYE));
    }

    CHECK(ni_mq_free(mq));
    CHECK(ni_region_free(win));
    CHECK(ni_region_free(big));
    CHECK(ni_detach(ni));
    printf("PASS\n");
    return 0;
}
