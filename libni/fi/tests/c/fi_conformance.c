/*
 * fi_conformance: conformance tests of the libfabric provider "ni", written against the
 * libfabric API only (as an application sees the provider).
 *
 * Usage: fi_conformance RANK PEER_RANK DIR CASE
 *
 * Each case runs as a pair of processes, one per NI (NI_SOCKET names it; FI_PROVIDER_PATH the
 * directory holding libni-fi.so). RANK is this process's rank (its NI's index), PEER_RANK the
 * other process's. The two exchange their endpoint names through files in DIR (written to a
 * temporary name, then renamed into place) and synchronize with file barriers the same way.
 * In the one-way cases the lower rank receives and the higher one sends.
 *
 * Prints "PASS <case>", or "FAIL <case>: <why>" and exits 1. Every wait is bounded.
 *
 * Cases and the man page sections they check:
 *   getinfo         fi_getinfo(3) "fi_info": the attributes the provider returns
 *   tagged          fi_tagged(3) "fi_tsend"/"fi_trecv"/"fi_tsendv"/"fi_trecvv",
 *                   fi_cq(3) "fi_cq_tagged_entry": sizes 0 .. 1 MiB + 3, expected and
 *                   unexpected, payload, tag, len, flags, buf
 *   order           fi_endpoint(3) "msg_order" FI_ORDER_SAS, fi_tagged(3): 1000 same-tag
 *                   messages (eager and rendezvous) match receives in sending order
 *   backlog         fi_msg(3)/fi_tagged(3): 100 rendezvous sends accepted before the receiver
 *                   posts anything; received in reverse order, one dropped by FI_DISCARD
 *   ignore_mask     fi_tagged(3) "fi_trecv" (ignore, src_addr), fi_getinfo(3) FI_DIRECTED_RECV
 *   any_source      fi_tagged(3)/fi_msg(3) FI_ADDR_UNSPEC, fi_cq(3) "fi_cq_readfrom"
 *   cq_data         fi_tagged(3)/fi_msg(3) "fi_tsenddata"/"fi_senddata"/FI_REMOTE_CQ_DATA,
 *                   fi_cq(3) "FI_REMOTE_CQ_DATA"
 *   inject          fi_tagged(3) "fi_tinject", fi_msg(3) "fi_injectdata",
 *                   fi_endpoint(3) "inject_size"
 *   truncate        fi_cq(3) "fi_cq_readerr" (FI_ETRUNC, len, olen), fi_msg(3) "Completion"
 *   peek_claim      fi_tagged(3) "FI_PEEK", "FI_CLAIM", "FI_DISCARD"
 *   cancel          fi_endpoint(3) "fi_cancel", fi_cq(3) FI_ECANCELED
 *   selective       fi_endpoint(3) "fi_ep_bind" FI_SELECTIVE_COMPLETION, fi_msg(3)/fi_tagged(3)
 *                   FI_COMPLETION
 *   counters        fi_cntr(3) "fi_cntr_open", "fi_cntr_read"/"fi_cntr_readerr", "fi_cntr_wait"
 *                   (threshold, -FI_ETIMEDOUT, -FI_EAVAIL), "fi_cntr_add"/"fi_cntr_set"/
 *                   "fi_cntr_adderr"/"fi_cntr_seterr", fi_endpoint(3) "fi_ep_bind" of counters:
 *                   every operation counts (inject and FI_SELECTIVE_COMPLETION included), a
 *                   truncated receive counts as an error
 *   rma             fi_rma(3) "fi_read"/"fi_write"/"fi_inject_write"/"fi_writemsg" on memory the
 *                   target registered with fi_mr(3) "fi_mr_reg" (FI_MR_PROV_KEY, offsets from the
 *                   region's start): staged and registered local buffers, contents kept by
 *                   registration, a read-only key, bounds and unknown keys refused with an error
 *                   completion, FI_READ/FI_WRITE counters, a stack buffer refused
 *   close_flush     fi_endpoint(3) "fi_close": the higher rank injects 300 messages and closes
 *                   everything at once, without meeting the peer; the lower rank receives all
 *                   (an inject is the sender's to forget: closing may not drop it)
 *   msg_multi_recv  fi_msg(3) "FI_MULTI_RECV", fi_endpoint(3) "FI_OPT_MIN_MULTI_RECV"
 *   av_table        fi_av(3) FI_AV_TABLE, "fi_av_insert", "fi_av_lookup", "fi_av_straddr",
 *                   "fi_av_remove"
 *   errors          fi_endpoint(3) "fi_enable" (FI_ENOAV/FI_ENOCQ), fi_domain(3) one endpoint,
 *                   fi_cq(3) "fi_cq_read" (-FI_EAGAIN), fi_cm(3) "fi_connect",
 *                   fi_getinfo(3) (-FI_ENODATA), fi_mr(3) "fi_mr_reg"
 *   threads         fi_domain(3) FI_THREAD_SAFE: four threads a side share the endpoint and its
 *                   CQs, each sending (or receiving) 600 messages of its own tag, eager and
 *                   rendezvous, and reading completions that may be another thread's
 *   hostile_victim  the lower rank receives a checked stream from the higher one while a third
 *                   NI (driven by the test harness) sends it lying headers; afterwards it waits
 *                   for DIR/attack_done and receives one more message
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <pthread.h>
#include <stdatomic.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

/* The provider's contract (issue 14). */
#define NAME_LEN 16
#define EAGER_MAX 4080
#define MAX_MSG (1ULL << 30)

/* How long any single wait may take. */
#define DEADLINE_S 10.0
/* How long the peer may take to start and open its endpoint. */
#define STARTUP_S 30.0
/* How long a queue is watched to show that nothing (more) appears on it. */
#define QUIET_S 0.2

static const char *case_name = "?";
static const char *dir;
static int rank, peer;
/* 0: the lower rank of the pair (the receiver in one-way cases), 1: the higher. */
static int side;

static struct {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *txcq, *rxcq;
    /* Opened and bound (FI_SEND, FI_RECV) by `setup` for cases that ask. */
    struct fid_cntr *txcntr, *rxcntr;
    /* Bound for FI_READ | FI_WRITE when the case asks for RMA. */
    struct fid_cntr *rmacntr;
    struct fid_ep *ep;
    uint8_t my_name[NAME_LEN], peer_name[NAME_LEN];
    fi_addr_t peer_addr;
} g;

/* ---- reporting ---------------------------------------------------------------------- */

static void fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static void fail(const char *fmt, ...)
{
    va_list ap;
    printf("FAIL %s: (rank %d) ", case_name, rank);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    exit(1);
}

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (!(cond))                                                                          \
            fail(__VA_ARGS__);                                                                \
    } while (0)

/* A call that must return 0. */
#define OK(call)                                                                              \
    do {                                                                                      \
        long r_ = (long)(call);                                                               \
        if (r_ != 0)                                                                          \
            fail("line %d: %s = %ld (%s)", __LINE__, #call, r_, fi_strerror((int)-r_));      \
    } while (0)

/* A call that must return `want` (a negative error number, or 0). */
#define EXPECT(call, want)                                                                    \
    do {                                                                                      \
        long r_ = (long)(call);                                                               \
        if (r_ != (long)(want))                                                               \
            fail("line %d: %s = %ld (%s), expected %ld (%s)", __LINE__, #call, r_,            \
                 fi_strerror((int)-r_), (long)(want), fi_strerror((int)-(want)));            \
    } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pause_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* ---- payloads ------------------------------------------------------------------------ */

static uint8_t pattern_byte(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return (uint8_t)*x;
}

/* Deterministic bytes for `seed`; sender and receiver make the same ones. */
static void fill(void *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL | 1;
    for (size_t i = 0; i < len; i++)
        ((uint8_t *)buf)[i] = pattern_byte(&x);
}

/* Fail unless `buf` holds bytes [from, from + len) of the pattern for `seed`. */
static void check_fill_at(const void *buf, size_t from, size_t len, uint64_t seed,
                          const char *what)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL | 1;
    for (size_t i = 0; i < from; i++)
        pattern_byte(&x);
    for (size_t i = 0; i < len; i++) {
        uint8_t want = pattern_byte(&x);
        uint8_t got = ((const uint8_t *)buf)[i];
        CHECK(got == want, "%s: byte %zu is 0x%02x, sent 0x%02x", what, from + i, got, want);
    }
}

static void check_fill(const void *buf, size_t len, uint64_t seed, const char *what)
{
    check_fill_at(buf, 0, len, seed, what);
}

/* Fail unless `len` bytes at `buf` all equal `b` (what the provider must not have written). */
static void check_untouched(const void *buf, size_t len, uint8_t b, const char *what)
{
    for (size_t i = 0; i < len; i++)
        CHECK(((const uint8_t *)buf)[i] == b, "%s: byte %zu past the data was overwritten",
              what, i);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    CHECK(p, "out of memory (%zu bytes)", n);
    return p;
}

/* ---- out-of-band exchange through files in DIR ---------------------------------------- */

static void path_of(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
}

/* Write DIR/name atomically: a temporary file renamed into place. */
static void put_file(const char *name, const void *data, size_t len)
{
    char tmp[4096], final[4096];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%d", dir, name, rank);
    path_of(final, sizeof final, name);
    FILE *f = fopen(tmp, "wb");
    CHECK(f, "cannot create %s: %s", tmp, strerror(errno));
    CHECK(fwrite(data, 1, len, f) == len && fclose(f) == 0, "cannot write %s", tmp);
    CHECK(rename(tmp, final) == 0, "cannot rename %s: %s", tmp, strerror(errno));
}

/* Wait up to `limit` seconds for DIR/name and read `len` bytes of it into `out` (if any). */
static void get_file(const char *name, void *out, size_t len, double limit)
{
    char p[4096];
    path_of(p, sizeof p, name);
    double t = now();
    for (;;) {
        FILE *f = fopen(p, "rb");
        if (f) {
            size_t got = len ? fread(out, 1, len, f) : 0;
            fclose(f);
            CHECK(got == len, "%s holds %zu bytes, expected %zu", p, got, len);
            return;
        }
        CHECK(now() - t < limit, "%s did not appear within %.0f s", p, limit);
        pause_ms(2);
    }
}

/* Both processes of the pair reach this point before either goes on. */
static void barrier(void)
{
    static int n;
    char mine[64], theirs[64];
    snprintf(mine, sizeof mine, "barrier%d.%d", rank, n);
    snprintf(theirs, sizeof theirs, "barrier%d.%d", peer, n);
    n++;
    put_file(mine, "", 0);
    get_file(theirs, NULL, 0, STARTUP_S);
}

/* ---- completion queues ---------------------------------------------------------------- */

static const char *ctx_name(void *c)
{
    static char b[32];
    snprintf(b, sizeof b, "%p", c);
    return b;
}

/*
 * The next entry of `cq`, success or error, within the deadline: returns 0 and fills `e`
 * (and `*src` when `src` is not NULL) for a success, 1 and fills `err` for an error.
 * fi_cq(3): fi_cq_read returns -FI_EAVAIL when the next entry is an error.
 */
static int cq_next(struct fid_cq *cq, struct fi_cq_tagged_entry *e, fi_addr_t *src,
                   struct fi_cq_err_entry *err)
{
    double t = now();
    for (;;) {
        ssize_t r = src ? fi_cq_readfrom(cq, e, 1, src) : fi_cq_read(cq, e, 1);
        if (r == 1)
            return 0;
        if (r == -FI_EAVAIL) {
            memset(err, 0, sizeof *err);
            ssize_t k = fi_cq_readerr(cq, err, 0);
            CHECK(k == 1, "fi_cq_read said -FI_EAVAIL but fi_cq_readerr returned %zd", k);
            return 1;
        }
        CHECK(r == -FI_EAGAIN, "fi_cq_read returned %zd (%s)", r, fi_strerror((int)-r));
        CHECK(now() - t < DEADLINE_S, "no completion within %.0f s", DEADLINE_S);
    }
}

/* The next entry, which must be a success. */
static void cq_ok(struct fid_cq *cq, struct fi_cq_tagged_entry *e, fi_addr_t *src)
{
    struct fi_cq_err_entry err;
    if (cq_next(cq, e, src, &err))
        fail("unexpected error entry: err %d (%s), context %s, len %zu, olen %zu, tag 0x%" PRIx64,
             err.err, fi_strerror(err.err), ctx_name(err.op_context), err.len, err.olen,
             err.tag);
}

/* The next entry, which must be an error. */
static void cq_err(struct fid_cq *cq, struct fi_cq_err_entry *err)
{
    struct fi_cq_tagged_entry e;
    if (!cq_next(cq, &e, NULL, err))
        fail("expected an error entry, got a success: context %s, len %zu, tag 0x%" PRIx64,
             ctx_name(e.op_context), e.len, e.tag);
}

/* Watch `cq` for QUIET_S: nothing may appear on it (fi_cq_read keeps returning -FI_EAGAIN). */
static void cq_quiet(struct fid_cq *cq, const char *what)
{
    double t = now();
    while (now() - t < QUIET_S) {
        struct fi_cq_tagged_entry e;
        ssize_t r = fi_cq_read(cq, &e, 1);
        if (r == 1)
            fail("%s: unexpected completion: context %s, flags 0x%" PRIx64 ", len %zu", what,
                 ctx_name(e.op_context), e.flags, e.len);
        if (r == -FI_EAVAIL) {
            struct fi_cq_err_entry err;
            memset(&err, 0, sizeof err);
            fi_cq_readerr(cq, &err, 0);
            fail("%s: unexpected error entry: err %d (%s), context %s", what, err.err,
                 fi_strerror(err.err), ctx_name(err.op_context));
        }
        CHECK(r == -FI_EAGAIN, "%s: fi_cq_read returned %zd, expected -FI_EAGAIN", what, r);
    }
}

/*
 * `n` successes on `cq`, in any order, one for each of the contexts `ctx[0..n)`: entry i of
 * `out` is the completion of `ctx[i]`.
 */
static void cq_collect(struct fid_cq *cq, int n, void *const *ctx,
                       struct fi_cq_tagged_entry *out)
{
    int seen[64] = {0};
    CHECK(n <= 64, "cq_collect: too many contexts");
    for (int k = 0; k < n; k++) {
        struct fi_cq_tagged_entry e;
        cq_ok(cq, &e, NULL);
        int i = 0;
        while (i < n && ctx[i] != e.op_context)
            i++;
        CHECK(i < n, "completion with an unknown context %s", ctx_name(e.op_context));
        CHECK(!seen[i], "context %s completed twice", ctx_name(e.op_context));
        seen[i] = 1;
        out[i] = e;
    }
}

/* Retry a send while it returns -FI_EAGAIN (no free slot: the provider progresses inside). */
#define RETRY(call)                                                                           \
    do {                                                                                      \
        double t_ = now();                                                                    \
        long r_;                                                                              \
        while ((r_ = (long)(call)) == -FI_EAGAIN)                                             \
            CHECK(now() - t_ < DEADLINE_S, "line %d: %s: -FI_EAGAIN for %.0f s", __LINE__,    \
                  #call, DEADLINE_S);                                                         \
        if (r_ != 0)                                                                          \
            fail("line %d: %s = %ld (%s)", __LINE__, #call, r_, fi_strerror((int)-r_));      \
    } while (0)

/* ---- setup and teardown ---------------------------------------------------------------- */

/* Whether the case asks for FI_RMA (set from CASES before `setup`). */
static int want_rma;

static struct fi_info *hints(int av_type)
{
    struct fi_info *h = fi_allocinfo();
    CHECK(h, "fi_allocinfo failed");
    h->caps = FI_TAGGED | FI_MSG | FI_SEND | FI_RECV | FI_DIRECTED_RECV | FI_MULTI_RECV |
              FI_SOURCE;
    if (want_rma) {
        h->caps |= FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
        h->domain_attr->mr_mode = FI_MR_PROV_KEY;
    }
    h->mode = FI_CONTEXT;
    h->ep_attr->type = FI_EP_RDM;
    h->domain_attr->av_type = av_type;
    h->fabric_attr->prov_name = strdup("ni");
    return h;
}

static struct fi_info *getinfo(struct fi_info *h)
{
    struct fi_info *info = NULL;
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
    CHECK(info && !strcmp(info->fabric_attr->prov_name, "ni"), "fi_getinfo gave no ni info");
    return info;
}

static void open_cq(struct fid_cq **cq)
{
    struct fi_cq_attr a = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE};
    OK(fi_cq_open(g.domain, &a, cq, NULL));
}

/*
 * Open everything on this process's NI (an AV of `av_type`, a transmit and a receive CQ bound
 * with `bind_flags` added), exchange names with the peer, insert it, and meet it at a
 * barrier: from here on both endpoints are enabled and know each other.
 */
static void setup(int av_type, uint64_t bind_flags, int cntrs)
{
    struct fi_info *h = hints(av_type);
    g.info = getinfo(h);
    fi_freeinfo(h);
    /* Default operation flags 0: FI_SELECTIVE_COMPLETION then reports only FI_COMPLETION. */
    g.info->tx_attr->op_flags = 0;
    g.info->rx_attr->op_flags = 0;
    OK(fi_fabric(g.info->fabric_attr, &g.fabric, NULL));
    OK(fi_domain(g.fabric, g.info, &g.domain, NULL));
    struct fi_av_attr aa = {.type = av_type};
    OK(fi_av_open(g.domain, &aa, &g.av, NULL));
    open_cq(&g.txcq);
    open_cq(&g.rxcq);
    OK(fi_endpoint(g.domain, g.info, &g.ep, NULL));
    OK(fi_ep_bind(g.ep, &g.av->fid, 0));
    OK(fi_ep_bind(g.ep, &g.txcq->fid, FI_TRANSMIT | bind_flags));
    OK(fi_ep_bind(g.ep, &g.rxcq->fid, FI_RECV | bind_flags));
    g.txcntr = g.rxcntr = NULL;
    if (cntrs) {
        struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
        OK(fi_cntr_open(g.domain, &ca, &g.txcntr, NULL));
        OK(fi_cntr_open(g.domain, &ca, &g.rxcntr, NULL));
        OK(fi_ep_bind(g.ep, &g.txcntr->fid, FI_SEND));
        OK(fi_ep_bind(g.ep, &g.rxcntr->fid, FI_RECV));
    }
    g.rmacntr = NULL;
    if (want_rma) {
        struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
        OK(fi_cntr_open(g.domain, &ca, &g.rmacntr, NULL));
        OK(fi_ep_bind(g.ep, &g.rmacntr->fid, FI_READ | FI_WRITE));
    }
    OK(fi_enable(g.ep));

    size_t len = sizeof g.my_name;
    OK(fi_getname(&g.ep->fid, g.my_name, &len));
    CHECK(len == NAME_LEN, "fi_getname gave %zu bytes, expected %d", len, NAME_LEN);
    char mine[32], theirs[32];
    snprintf(mine, sizeof mine, "name%d", rank);
    snprintf(theirs, sizeof theirs, "name%d", peer);
    put_file(mine, g.my_name, NAME_LEN);
    get_file(theirs, g.peer_name, NAME_LEN, STARTUP_S);
    int n = fi_av_insert(g.av, g.peer_name, 1, &g.peer_addr, 0, NULL);
    CHECK(n == 1, "fi_av_insert of the peer's name returned %d", n);
    /* Contract: FI_AV_MAP addresses are ranks, FI_AV_TABLE addresses insertion indices. */
    fi_addr_t want = av_type == FI_AV_MAP ? (fi_addr_t)peer : 0;
    CHECK(g.peer_addr == want, "the peer's fi_addr is %" PRIu64 ", expected %" PRIu64,
          g.peer_addr, want);
    barrier();
}

/* Meet the peer (so neither leaves while the other still needs it), then close everything. */
static void teardown(void)
{
    barrier();
    OK(fi_close(&g.ep->fid));
    if (g.txcntr) {
        OK(fi_close(&g.txcntr->fid));
        OK(fi_close(&g.rxcntr->fid));
    }
    if (g.rmacntr)
        OK(fi_close(&g.rmacntr->fid));
    OK(fi_close(&g.txcq->fid));
    OK(fi_close(&g.rxcq->fid));
    OK(fi_close(&g.av->fid));
    OK(fi_close(&g.domain->fid));
    OK(fi_close(&g.fabric->fid));
    fi_freeinfo(g.info);
}

/* A receive completion must say exactly this. */
static void check_recv(const struct fi_cq_tagged_entry *e, void *ctx, uint64_t flags,
                       size_t len, uint64_t tag, const void *buf)
{
    CHECK(e->op_context == ctx, "completion context %s, expected %s", ctx_name(e->op_context),
          ctx_name(ctx));
    CHECK(e->flags == flags, "receive flags 0x%" PRIx64 ", expected 0x%" PRIx64, e->flags,
          flags);
    CHECK(e->len == len, "receive len %zu, expected %zu", e->len, len);
    if (flags & FI_TAGGED)
        CHECK(e->tag == tag, "receive tag 0x%" PRIx64 ", expected 0x%" PRIx64, e->tag, tag);
    CHECK(e->buf == buf, "receive buf %p, expected %p (the receive buffer)", e->buf, buf);
}

static void check_send(const struct fi_cq_tagged_entry *e, uint64_t flags, size_t len)
{
    CHECK(e->flags == flags, "send flags 0x%" PRIx64 ", expected 0x%" PRIx64, e->flags, flags);
    CHECK(e->len == len, "send completion len %zu, expected %zu", e->len, len);
}

static void tsendmsg(const void *buf, size_t len, uint64_t tag, uint64_t data, void *ctx,
                     uint64_t flags)
{
    struct iovec iov = {(void *)buf, len};
    struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = 1, .addr = g.peer_addr,
                              .tag = tag, .context = ctx, .data = data};
    RETRY(fi_tsendmsg(g.ep, &m, flags));
}

static void trecvmsg(void *buf, size_t len, fi_addr_t src, uint64_t tag, void *ctx,
                     uint64_t flags)
{
    struct iovec iov = {buf, len};
    struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = buf ? 1 : 0, .addr = src,
                              .tag = tag, .context = ctx};
    OK(fi_trecvmsg(g.ep, &m, flags));
}

/* ---- getinfo --------------------------------------------------------------------------- */

/* fi_getinfo(3): the one fi_info of the contract, shaped by the hints. */
static void case_getinfo(void)
{
    struct fi_info *h = hints(FI_AV_TABLE);
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    struct fi_info *i = getinfo(h);
    fi_freeinfo(h);
    CHECK(!i->next, "more than one fi_info");
    CHECK(!strcmp(i->fabric_attr->name, "ni"), "fabric name %s", i->fabric_attr->name);
    char dom[32];
    snprintf(dom, sizeof dom, "ni%d", rank);
    CHECK(!strcmp(i->domain_attr->name, dom), "domain name %s, expected %s (NI_SOCKET's stem)",
          i->domain_attr->name, dom);
    CHECK(i->ep_attr->type == FI_EP_RDM, "endpoint type %d", i->ep_attr->type);
    uint64_t caps = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV | FI_MULTI_RECV |
                    FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM;
    CHECK(i->caps == caps, "caps 0x%" PRIx64 ", expected 0x%" PRIx64, i->caps, caps);
    CHECK(i->mode == 0, "mode 0x%" PRIx64, i->mode);
    CHECK(i->addr_format == FI_FORMAT_UNSPEC, "addr_format %u", i->addr_format);
    CHECK(i->tx_attr->inject_size == EAGER_MAX, "inject_size %zu", i->tx_attr->inject_size);
    CHECK(i->tx_attr->size == 256, "tx size %zu", i->tx_attr->size);
    CHECK(i->tx_attr->iov_limit == 16, "iov_limit %zu", i->tx_attr->iov_limit);
    CHECK(i->tx_attr->msg_order == FI_ORDER_SAS, "msg_order 0x%" PRIx64, i->tx_attr->msg_order);
    CHECK(i->ep_attr->max_msg_size == MAX_MSG, "max_msg_size %zu", i->ep_attr->max_msg_size);
    CHECK(i->ep_attr->mem_tag_format == UINT64_MAX, "mem_tag_format 0x%" PRIx64,
          i->ep_attr->mem_tag_format);
    CHECK(i->domain_attr->cq_data_size == 8, "cq_data_size %zu", i->domain_attr->cq_data_size);
    CHECK(i->domain_attr->threading == FI_THREAD_DOMAIN, "threading %d (hinted DOMAIN)",
          i->domain_attr->threading);
    CHECK(i->domain_attr->data_progress == FI_PROGRESS_MANUAL &&
              i->domain_attr->control_progress == FI_PROGRESS_MANUAL,
          "progress %d/%d", i->domain_attr->control_progress, i->domain_attr->data_progress);
    CHECK(i->domain_attr->av_type == FI_AV_TABLE, "av_type %d (hinted TABLE)",
          i->domain_attr->av_type);
    CHECK(i->domain_attr->mr_mode == 0, "mr_mode 0x%x", i->domain_attr->mr_mode);
    fi_freeinfo(i);

    /* No threading hint: FI_THREAD_SAFE. */
    h = hints(FI_AV_MAP);
    i = getinfo(h);
    CHECK(i->domain_attr->threading == FI_THREAD_SAFE, "unhinted threading %d",
          i->domain_attr->threading);
    CHECK(i->domain_attr->av_type == FI_AV_MAP, "av_type %d (hinted MAP)",
          i->domain_attr->av_type);
    fi_freeinfo(i);
    fi_freeinfo(h);
}

/* ---- tagged ---------------------------------------------------------------------------- */

#define NSIZES 6
static const size_t SIZES[NSIZES] = {0, 1, EAGER_MAX, EAGER_MAX + 1, 65536, (1 << 20) + 3};
/* Spare bytes after every receive buffer, which must stay untouched. */
#define SPARE 64

/*
 * fi_tagged(3) "fi_tsend"/"fi_trecv" and fi_cq(3) "fi_cq_tagged_entry": every size, eager
 * and rendezvous, arrives byte for byte; the receive completion has the context,
 * FI_RECV|FI_TAGGED, the message's len and tag and the buffer; the send completion
 * FI_SEND|FI_TAGGED and len. Round 0 posts the receives before the sends (expected
 * messages), round 1 after them (unexpected messages), with fi_tsendv/fi_trecvv split into
 * two pieces each.
 */
static void case_tagged(void)
{
    struct fi_context ctx[NSIZES];
    void *ctxs[NSIZES];
    struct fi_cq_tagged_entry e[NSIZES];
    for (int i = 0; i < NSIZES; i++)
        ctxs[i] = &ctx[i];
    for (int round = 0; round < 2; round++) {
        uint64_t base = 0x7A00000000000000ULL | (uint64_t)round << 32;
        if (side == 0) {
            uint8_t *a[NSIZES], *b[NSIZES];
            size_t h[NSIZES];
            for (int i = 0; i < NSIZES; i++) {
                /* Round 0: one buffer. Round 1: the first half, then the rest elsewhere. */
                h[i] = round ? SIZES[i] / 2 : 0;
                a[i] = xmalloc(h[i] + SPARE);
                b[i] = xmalloc(SIZES[i] - h[i] + SPARE);
                memset(a[i], 0xEE, h[i] + SPARE);
                memset(b[i], 0xEE, SIZES[i] - h[i] + SPARE);
            }
            if (round == 1)
                barrier();
            for (int i = 0; i < NSIZES; i++) {
                if (round == 0) {
                    OK(fi_trecv(g.ep, b[i], SIZES[i] + SPARE, NULL, g.peer_addr, base + i, 0,
                                &ctx[i]));
                } else {
                    struct iovec iov[2] = {{a[i], h[i]}, {b[i], SIZES[i] - h[i] + SPARE}};
                    OK(fi_trecvv(g.ep, iov, NULL, 2, g.peer_addr, base + i, 0, &ctx[i]));
                }
            }
            if (round == 0)
                barrier();
            cq_collect(g.rxcq, NSIZES, ctxs, e);
            for (int i = 0; i < NSIZES; i++) {
                char what[64];
                snprintf(what, sizeof what, "round %d, %zu bytes", round, SIZES[i]);
                /* buf: the first byte of the receive buffer (its first non-empty piece). */
                check_recv(&e[i], &ctx[i], FI_RECV | FI_TAGGED, SIZES[i], base + i,
                           h[i] ? (void *)a[i] : (void *)b[i]);
                check_fill(a[i], h[i], base + i, what);
                check_fill_at(b[i], h[i], SIZES[i] - h[i], base + i, what);
                check_untouched(b[i] + SIZES[i] - h[i], SPARE, 0xEE, what);
                free(a[i]);
                free(b[i]);
            }
        } else {
            uint8_t *s[NSIZES];
            for (int i = 0; i < NSIZES; i++) {
                s[i] = xmalloc(SIZES[i]);
                fill(s[i], SIZES[i], base + i);
            }
            if (round == 0)
                barrier();
            for (int i = 0; i < NSIZES; i++) {
                if (round == 0) {
                    RETRY(fi_tsend(g.ep, s[i], SIZES[i], NULL, g.peer_addr, base + i,
                                   &ctx[i]));
                } else {
                    size_t h = SIZES[i] / 3;
                    struct iovec iov[2] = {{s[i], h}, {s[i] + h, SIZES[i] - h}};
                    RETRY(fi_tsendv(g.ep, iov, NULL, 2, g.peer_addr, base + i, &ctx[i]));
                }
            }
            if (round == 1)
                barrier();
            cq_collect(g.txcq, NSIZES, ctxs, e);
            for (int i = 0; i < NSIZES; i++) {
                check_send(&e[i], FI_SEND | FI_TAGGED, SIZES[i]);
                free(s[i]);
            }
        }
    }
}

/* ---- order (and the stream of hostile_victim) -------------------------------------------- */

/* The length of message k of a stream: small, the largest eager, the smallest rendezvous, and
 * now and then a larger rendezvous. */
static size_t stream_len(int k)
{
    if (k % 100 == 7)
        return 65536 + k;
    if (k % 10 == 3)
        return EAGER_MAX + 1;
    if (k % 10 == 5)
        return EAGER_MAX;
    return 4 + k % 64;
}

#define STREAM_MAX (65536 + 1000)
/* Receives kept posted by the receiving side of a stream. */
#define WINDOW 32

/* Take the `n` send completions of tagged sends posted with contexts ctx[0..n) from buffers
 * buf[0..n) of len(k) bytes: each context exactly once, each with its length. A buffer is the
 * provider's until its completion (fi_msg(3)); it is scribbled on, then freed, so a provider
 * that still read it would send garbage. Frees buf and ctx too. */
static void reap_sends(struct fi_context *ctx, uint8_t **buf, int n, size_t (*len)(int))
{
    char *seen = calloc(n, 1);
    CHECK(seen, "out of memory");
    for (int done = 0; done < n; done++) {
        struct fi_cq_tagged_entry e;
        cq_ok(g.txcq, &e, NULL);
        long k = (struct fi_context *)e.op_context - ctx;
        CHECK(k >= 0 && k < n && !seen[k], "send completion with a bad context %s",
              ctx_name(e.op_context));
        seen[k] = 1;
        check_send(&e, FI_SEND | FI_TAGGED, len(k));
        memset(buf[k], 0xAB, len(k));
        free(buf[k]);
    }
    free(seen);
    free(buf);
    free(ctx);
}

/* Send `n` messages of tag `tag`; message k is stream_len(k) bytes: k, then pattern k. Each
 * send has its own buffer, overwritten once its completion came (fi_msg(3): only fi_inject
 * returns the buffer at once; a send may read it until it completes). */
static void stream_send(int n, uint64_t tag)
{
    struct fi_context *ctx = xmalloc(n * sizeof *ctx);
    uint8_t **buf = xmalloc(n * sizeof *buf);
    for (int k = 0; k < n; k++) {
        size_t len = stream_len(k);
        buf[k] = xmalloc(len);
        fill(buf[k], len, 1000 + k);
        uint32_t seq = k;
        memcpy(buf[k], &seq, sizeof seq);
        RETRY(fi_tsend(g.ep, buf[k], len, NULL, g.peer_addr, tag, &ctx[k]));
    }
    reap_sends(ctx, buf, n, stream_len);
}

/* Receive the `n` messages of stream_send, keeping WINDOW receives posted: the k-th posted
 * receive must get message k (fi_endpoint(3) FI_ORDER_SAS, fi_tagged(3) matching order). */
static void stream_recv(int n, uint64_t tag)
{
    struct fi_context ctx[WINDOW];
    uint8_t *buf[WINDOW];
    int posted_as[WINDOW];
    for (int w = 0; w < WINDOW; w++)
        buf[w] = xmalloc(STREAM_MAX);
    int next = 0, done = 0;
    char *finished = calloc(n, 1);
    CHECK(finished, "out of memory");
    while (done < n) {
        /* Keep receives k .. oldest unfinished + WINDOW posted, in order. */
        while (next < n && next < done + WINDOW) {
            int w = next % WINDOW;
            posted_as[w] = next;
            OK(fi_trecv(g.ep, buf[w], STREAM_MAX, NULL, g.peer_addr, tag, 0, &ctx[w]));
            next++;
        }
        struct fi_cq_tagged_entry e;
        cq_ok(g.rxcq, &e, NULL);
        long w = (struct fi_context *)e.op_context - ctx;
        CHECK(w >= 0 && w < WINDOW, "receive completion with a bad context %s",
              ctx_name(e.op_context));
        int k = posted_as[w];
        uint32_t seq;
        CHECK(e.len >= sizeof seq, "receive %d: %zu bytes", k, e.len);
        memcpy(&seq, buf[w], sizeof seq);
        CHECK(seq == (uint32_t)k, "receive %d (posted %d-th) got message %u: out of order", k,
              k, seq);
        char what[64];
        snprintf(what, sizeof what, "message %d", k);
        check_recv(&e, &ctx[w], FI_RECV | FI_TAGGED, stream_len(k), tag, buf[w]);
        check_fill_at(buf[w] + sizeof seq, sizeof seq, e.len - sizeof seq, 1000 + k, what);
        finished[k] = 1;
        while (done < n && finished[done])
            done++;
    }
    free(finished);
    for (int w = 0; w < WINDOW; w++)
        free(buf[w]);
}

/* fi_endpoint(3) "msg_order" FI_ORDER_SAS: 1000 messages of one tag, eager and rendezvous
 * mixed, match the receives in the order they were sent. */
static void case_order(void)
{
    if (side == 0)
        stream_recv(1000, 0x5E0);
    else
        stream_send(1000, 0x5E0);
}

/* ---- backlog ---------------------------------------------------------------------------- */

static void peek_until(uint64_t tag, void *ctx, uint64_t flags, struct fi_cq_tagged_entry *e);
static void check_peek(const struct fi_cq_tagged_entry *e, size_t len, uint64_t tag,
                       uint64_t flags);

#define NBACKLOG 100
/* Message k of the backlog: rendezvous sizes from the smallest to about 300 KiB. */
static size_t backlog_len(int k)
{
    return EAGER_MAX + 1 + (size_t)k * 3001;
}

/* fi_msg(3)/fi_tagged(3): a send is a request that completes later; accepting it must not
 * wait for the receiver, whatever the provider has to hold for it. The higher rank has
 * NBACKLOG rendezvous sends accepted (RETRY gives each DEADLINE_S of -FI_EAGAIN, and nothing
 * receives meanwhile) before a barrier; only then does the lower rank post: in reverse order
 * (matching by tag), dropping message 50 with FI_PEEK|FI_DISCARD (fi_tagged(3)). Every message
 * but 50 arrives intact; every send completes, 50's too. */
static void case_backlog(void)
{
    if (side == 1) {
        struct fi_context *ctx = xmalloc(NBACKLOG * sizeof *ctx);
        uint8_t **buf = xmalloc(NBACKLOG * sizeof *buf);
        for (int k = 0; k < NBACKLOG; k++) {
            buf[k] = xmalloc(backlog_len(k));
            fill(buf[k], backlog_len(k), 7000 + k);
            RETRY(fi_tsend(g.ep, buf[k], backlog_len(k), NULL, g.peer_addr, 0xBAC000 + k,
                           &ctx[k]));
        }
        barrier();
        reap_sends(ctx, buf, NBACKLOG, backlog_len);
        return;
    }
    barrier();
    uint8_t *buf = xmalloc(backlog_len(NBACKLOG - 1));
    for (int k = NBACKLOG - 1; k >= 0; k--) {
        struct fi_context c;
        struct fi_cq_tagged_entry e;
        if (k == 50) {
            peek_until(0xBAC000 + k, &c, FI_DISCARD, &e);
            check_peek(&e, backlog_len(k), 0xBAC000 + k, FI_RECV | FI_TAGGED);
            continue;
        }
        OK(fi_trecv(g.ep, buf, backlog_len(k), NULL, g.peer_addr, 0xBAC000 + k, 0, &c));
        cq_ok(g.rxcq, &e, NULL);
        check_recv(&e, &c, FI_RECV | FI_TAGGED, backlog_len(k), 0xBAC000 + k, buf);
        char what[32];
        snprintf(what, sizeof what, "backlog message %d", k);
        check_fill(buf, backlog_len(k), 7000 + k, what);
    }
    free(buf);
}

/* ---- ignore_mask ------------------------------------------------------------------------ */

/*
 * fi_tagged(3) "fi_trecv": a receive matches when (tag & ~ignore) are equal and, with
 * FI_DIRECTED_RECV, the source is its src_addr. Receive R0 (from this process's own address,
 * any tag) must take nothing; R1 (tag A with its low 6 bits ignored, any source) must take A
 * although B was sent first; B waits, unexpected, for R2 (tag B, from the peer).
 */
static void case_ignore_mask(void)
{
    const uint64_t A = 0xA0A0000000001234ULL, B = 0xB0B0000000001234ULL;
    if (side == 1) {
        barrier();
        char b[8] = "message", a[8] = "MESSAGE";
        struct fi_context c[2];
        void *ctxs[2] = {&c[0], &c[1]};
        struct fi_cq_tagged_entry e[2];
        RETRY(fi_tsend(g.ep, b, sizeof b, NULL, g.peer_addr, B, &c[0]));
        RETRY(fi_tsend(g.ep, a, sizeof a, NULL, g.peer_addr, A, &c[1]));
        cq_collect(g.txcq, 2, ctxs, e);
        return;
    }
    fi_addr_t self;
    CHECK(fi_av_insert(g.av, g.my_name, 1, &self, 0, NULL) == 1, "inserting my own name");
    char r0[8], r1[8], r2[8];
    struct fi_context c0, c1, c2;
    OK(fi_trecv(g.ep, r0, sizeof r0, NULL, self, 0, ~0ULL, &c0));
    OK(fi_trecv(g.ep, r1, sizeof r1, NULL, FI_ADDR_UNSPEC, A ^ 0x3F, 0x3F, &c1));
    barrier();
    struct fi_cq_tagged_entry e;
    cq_ok(g.rxcq, &e, NULL);
    check_recv(&e, &c1, FI_RECV | FI_TAGGED, 8, A, r1);
    CHECK(!memcmp(r1, "MESSAGE", 8), "R1 holds \"%.8s\", expected A's \"MESSAGE\"", r1);
    /* B matches neither R0 (wrong source) nor R1 (tag bits outside the mask differ). */
    cq_quiet(g.rxcq, "after A");
    OK(fi_trecv(g.ep, r2, sizeof r2, NULL, g.peer_addr, B, 0, &c2));
    cq_ok(g.rxcq, &e, NULL);
    check_recv(&e, &c2, FI_RECV | FI_TAGGED, 8, B, r2);
    CHECK(!memcmp(r2, "message", 8), "R2 holds \"%.8s\", expected B's \"message\"", r2);
    /* R0 is still posted, untouched. */
    OK(fi_cancel(&g.ep->fid, &c0));
    struct fi_cq_err_entry err;
    cq_err(g.rxcq, &err);
    CHECK(err.err == FI_ECANCELED && err.op_context == &c0, "R0: err %d, context %s", err.err,
          ctx_name(err.op_context));
}

/* ---- any_source ------------------------------------------------------------------------- */

/* fi_tagged(3)/fi_msg(3) FI_ADDR_UNSPEC receives take the peer's messages, and
 * fi_cq(3) "fi_cq_readfrom" reports the peer's fi_addr as their source. */
static void case_any_source(void)
{
    struct fi_context c[2];
    if (side == 1) {
        uint8_t t[64], m[32];
        fill(t, sizeof t, 1);
        fill(m, sizeof m, 2);
        barrier();
        void *ctxs[2] = {&c[0], &c[1]};
        struct fi_cq_tagged_entry e[2];
        RETRY(fi_tsend(g.ep, t, sizeof t, NULL, g.peer_addr, 0x5C, &c[0]));
        RETRY(fi_send(g.ep, m, sizeof m, NULL, g.peer_addr, &c[1]));
        cq_collect(g.txcq, 2, ctxs, e);
        check_send(&e[0], FI_SEND | FI_TAGGED, 64);
        check_send(&e[1], FI_SEND | FI_MSG, 32);
        return;
    }
    uint8_t t[64], m[32];
    OK(fi_trecv(g.ep, t, sizeof t, NULL, FI_ADDR_UNSPEC, 0x5C, 0, &c[0]));
    OK(fi_recv(g.ep, m, sizeof m, NULL, FI_ADDR_UNSPEC, &c[1]));
    barrier();
    for (int k = 0; k < 2; k++) {
        struct fi_cq_tagged_entry e;
        fi_addr_t src = FI_ADDR_NOTAVAIL;
        cq_ok(g.rxcq, &e, &src);
        CHECK(src == g.peer_addr, "fi_cq_readfrom source %" PRIu64 ", expected %" PRIu64, src,
              g.peer_addr);
        if (e.op_context == &c[0]) {
            check_recv(&e, &c[0], FI_RECV | FI_TAGGED, 64, 0x5C, t);
            check_fill(t, 64, 1, "tagged");
        } else {
            check_recv(&e, &c[1], FI_RECV | FI_MSG, 32, 0, m);
            check_fill(m, 32, 2, "untagged");
        }
    }
}

/* ---- cq_data ---------------------------------------------------------------------------- */

#define DATA(i) (UINT64_C(0xDA7A000000000000) | (uint64_t)(i) << 8 | 0x5A)

/*
 * fi_tagged(3)/fi_msg(3) remote CQ data: fi_tsenddata, fi_tsendmsg with FI_REMOTE_CQ_DATA
 * (eager and rendezvous), fi_senddata and fi_tinjectdata deliver FI_REMOTE_CQ_DATA and the
 * data (fi_cq(3)); fi_tsend and fi_tsendmsg without the flag (data field set) do not.
 */
static void case_cq_data(void)
{
    enum { N = 7, BIG = 100000 };
    /* Message i: tag 0xD0 + i, length, whether it carries data. Message 5 is untagged. */
    static const size_t len[N] = {64, 64, BIG, 64, 64, 64, 16};
    static const int has_data[N] = {1, 1, 1, 0, 0, 1, 1};
    struct fi_context c[N];
    void *ctxs[N];
    struct fi_cq_tagged_entry e[N];
    for (int i = 0; i < N; i++)
        ctxs[i] = &c[i];
    if (side == 1) {
        uint8_t *s[N];
        for (int i = 0; i < N; i++) {
            s[i] = xmalloc(len[i]);
            fill(s[i], len[i], 0xD0 + i);
        }
        barrier();
        RETRY(fi_tsenddata(g.ep, s[0], len[0], NULL, DATA(0), g.peer_addr, 0xD0, &c[0]));
        tsendmsg(s[1], len[1], 0xD1, DATA(1), &c[1], FI_REMOTE_CQ_DATA | FI_COMPLETION);
        tsendmsg(s[2], len[2], 0xD2, DATA(2), &c[2], FI_REMOTE_CQ_DATA | FI_COMPLETION);
        RETRY(fi_tsend(g.ep, s[3], len[3], NULL, g.peer_addr, 0xD3, &c[3]));
        tsendmsg(s[4], len[4], 0xD4, DATA(4), &c[4], FI_COMPLETION);
        RETRY(fi_senddata(g.ep, s[5], len[5], NULL, DATA(5), g.peer_addr, &c[5]));
        RETRY(fi_tinjectdata(g.ep, s[6], len[6], DATA(6), g.peer_addr, 0xD6));
        cq_collect(g.txcq, N - 1, ctxs, e);
        for (int i = 0; i < N - 1; i++)
            check_send(&e[i], FI_SEND | (i == 5 ? FI_MSG : FI_TAGGED), len[i]);
        for (int i = 0; i < N; i++)
            free(s[i]);
        return;
    }
    uint8_t *r[N];
    for (int i = 0; i < N; i++) {
        r[i] = xmalloc(len[i]);
        if (i == 5)
            OK(fi_recv(g.ep, r[i], len[i], NULL, g.peer_addr, &c[i]));
        else
            OK(fi_trecv(g.ep, r[i], len[i], NULL, g.peer_addr, 0xD0 + i, 0, &c[i]));
    }
    barrier();
    cq_collect(g.rxcq, N, ctxs, e);
    for (int i = 0; i < N; i++) {
        char what[32];
        snprintf(what, sizeof what, "message %d", i);
        uint64_t flags = FI_RECV | (i == 5 ? FI_MSG : FI_TAGGED);
        check_recv(&e[i], &c[i], flags | (has_data[i] ? FI_REMOTE_CQ_DATA : 0), len[i],
                   0xD0 + i, r[i]);
        if (has_data[i])
            CHECK(e[i].data == DATA(i), "%s: data 0x%" PRIx64 ", expected 0x%" PRIx64, what,
                  e[i].data, DATA(i));
        check_fill(r[i], len[i], 0xD0 + i, what);
        free(r[i]);
    }
}

/* ---- inject ----------------------------------------------------------------------------- */

/*
 * fi_tagged(3) "fi_tinject", fi_msg(3) "fi_injectdata", fi_endpoint(3) "inject_size": 8 and
 * 4080 (inject_size) bytes are delivered intact although the buffer is overwritten as soon
 * as the call returns; no send completion ever appears; 4081 bytes fail with -FI_EMSGSIZE.
 */
static void case_inject(void)
{
    static const size_t len[3] = {8, EAGER_MAX, 8};
    CHECK(g.info->tx_attr->inject_size == EAGER_MAX, "inject_size %zu",
          g.info->tx_attr->inject_size);
    if (side == 1) {
        uint8_t *buf = xmalloc(EAGER_MAX + 1);
        barrier();
        for (int i = 0; i < 3; i++) {
            fill(buf, len[i], 0x1E + i);
            if (i < 2)
                RETRY(fi_tinject(g.ep, buf, len[i], g.peer_addr, 0x1E + i));
            else
                RETRY(fi_injectdata(g.ep, buf, len[i], DATA(2), g.peer_addr));
            memset(buf, 0xFF, len[i]);
        }
        EXPECT(fi_tinject(g.ep, buf, EAGER_MAX + 1, g.peer_addr, 0x1F), -FI_EMSGSIZE);
        free(buf);
        /* The receiver has everything: still no completion, success or error. */
        barrier();
        cq_quiet(g.txcq, "injects");
        struct fi_cq_err_entry err;
        EXPECT(fi_cq_readerr(g.txcq, &err, 0), -FI_EAGAIN);
        return;
    }
    uint8_t *r[3];
    struct fi_context c[3];
    void *ctxs[3] = {&c[0], &c[1], &c[2]};
    struct fi_cq_tagged_entry e[3];
    for (int i = 0; i < 3; i++) {
        r[i] = xmalloc(len[i]);
        if (i < 2)
            OK(fi_trecv(g.ep, r[i], len[i], NULL, g.peer_addr, 0x1E + i, 0, &c[i]));
        else
            OK(fi_recv(g.ep, r[i], len[i], NULL, g.peer_addr, &c[i]));
    }
    barrier();
    cq_collect(g.rxcq, 3, ctxs, e);
    check_recv(&e[0], &c[0], FI_RECV | FI_TAGGED, 8, 0x1E, r[0]);
    check_recv(&e[1], &c[1], FI_RECV | FI_TAGGED, EAGER_MAX, 0x1F, r[1]);
    check_recv(&e[2], &c[2], FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA, 8, 0, r[2]);
    CHECK(e[2].data == DATA(2), "injectdata: data 0x%" PRIx64, e[2].data);
    for (int i = 0; i < 3; i++) {
        check_fill(r[i], len[i], 0x1E + i, "injected message");
        free(r[i]);
    }
    barrier();
}

/* ---- truncate --------------------------------------------------------------------------- */

/*
 * fi_cq(3) "fi_cq_readerr", fi_msg(3)/fi_tagged(3) truncation: a 100-byte message into a
 * 10-byte buffer and a 1 MiB message (rendezvous) into 1000 bytes complete with FI_ETRUNC,
 * len = the bytes placed, olen = the bytes lost, the tag; the bytes placed are the message's
 * first ones and nothing past the buffer is written. A following message is received whole,
 * and every send completes successfully.
 */
static void case_truncate(void)
{
    enum { N = 3 };
    static const size_t msg[N] = {100, 1 << 20, 20};
    static const size_t room[N] = {10, 1000, 64};
    struct fi_context c[N];
    void *ctxs[N] = {&c[0], &c[1], &c[2]};
    if (side == 1) {
        uint8_t *s[N];
        struct fi_cq_tagged_entry e[N];
        barrier();
        for (int i = 0; i < N; i++) {
            s[i] = xmalloc(msg[i]);
            fill(s[i], msg[i], 0x70 + i);
            RETRY(fi_tsend(g.ep, s[i], msg[i], NULL, g.peer_addr, 0x70 + i, &c[i]));
        }
        cq_collect(g.txcq, N, ctxs, e);
        for (int i = 0; i < N; i++) {
            check_send(&e[i], FI_SEND | FI_TAGGED, msg[i]);
            free(s[i]);
        }
        return;
    }
    uint8_t *r[N];
    for (int i = 0; i < N; i++) {
        r[i] = xmalloc(room[i] + SPARE);
        memset(r[i], 0xEE, room[i] + SPARE);
        OK(fi_trecv(g.ep, r[i], room[i], NULL, g.peer_addr, 0x70 + i, 0, &c[i]));
    }
    barrier();
    int seen[N] = {0};
    for (int k = 0; k < N; k++) {
        struct fi_cq_tagged_entry e;
        struct fi_cq_err_entry err;
        int is_err = cq_next(g.rxcq, &e, NULL, &err);
        void *ctx = is_err ? err.op_context : e.op_context;
        int i = 0;
        while (i < N && ctxs[i] != ctx)
            i++;
        CHECK(i < N && !seen[i], "completion with a bad context %s", ctx_name(ctx));
        seen[i] = 1;
        char what[64];
        snprintf(what, sizeof what, "%zu bytes into %zu", msg[i], room[i]);
        if (i < 2) {
            CHECK(is_err, "%s: a success entry (len %zu), expected FI_ETRUNC", what, e.len);
            CHECK(err.err == FI_ETRUNC, "%s: err %d (%s)", what, err.err, fi_strerror(err.err));
            CHECK(err.len == room[i] && err.olen == msg[i] - room[i],
                  "%s: len %zu olen %zu, expected %zu and %zu", what, err.len, err.olen,
                  room[i], msg[i] - room[i]);
            CHECK(err.tag == (uint64_t)0x70 + i, "%s: tag 0x%" PRIx64, what, err.tag);
            CHECK(err.flags & FI_RECV, "%s: flags 0x%" PRIx64 " lack FI_RECV", what, err.flags);
        } else {
            CHECK(!is_err, "%s: error %d (%s)", what, err.err, fi_strerror(err.err));
            check_recv(&e, &c[i], FI_RECV | FI_TAGGED, msg[i], 0x70 + i, r[i]);
        }
        size_t placed = msg[i] < room[i] ? msg[i] : room[i];
        check_fill(r[i], placed, 0x70 + i, what);
        check_untouched(r[i] + placed, room[i] + SPARE - placed, 0xEE, what);
        free(r[i]);
    }
}

/* ---- peek_claim ------------------------------------------------------------------------- */

/* FI_PEEK (with `flags`) for `tag` until a message has arrived: the success entry. */
static void peek_until(uint64_t tag, void *ctx, uint64_t flags, struct fi_cq_tagged_entry *e)
{
    double t = now();
    for (;;) {
        trecvmsg(NULL, 0, g.peer_addr, tag, ctx, FI_PEEK | flags);
        struct fi_cq_err_entry err;
        if (!cq_next(g.rxcq, e, NULL, &err)) {
            CHECK(e->op_context == ctx, "peek: completion context %s, expected %s",
                  ctx_name(e->op_context), ctx_name(ctx));
            return;
        }
        CHECK(err.err == FI_ENOMSG && err.op_context == ctx,
              "peek for tag 0x%" PRIx64 ": err %d (%s), context %s", tag, err.err,
              fi_strerror(err.err), ctx_name(err.op_context));
        CHECK(now() - t < DEADLINE_S, "peek: tag 0x%" PRIx64 " did not arrive within %.0f s",
              tag, DEADLINE_S);
    }
}

/* A peek's entry: the message's full length, tag and flags, no buffer. */
static void check_peek(const struct fi_cq_tagged_entry *e, size_t len, uint64_t tag,
                       uint64_t flags)
{
    CHECK(e->flags == flags, "peek flags 0x%" PRIx64 ", expected 0x%" PRIx64, e->flags, flags);
    CHECK(e->len == len, "peek len %zu, expected %zu", e->len, len);
    CHECK(e->tag == tag, "peek tag 0x%" PRIx64 ", expected 0x%" PRIx64, e->tag, tag);
    CHECK(e->buf == NULL, "peek buf %p, expected NULL", e->buf);
}

/*
 * fi_tagged(3) "FI_PEEK", "FI_CLAIM", "FI_DISCARD":
 *  1. FI_PEEK before anything arrived: an FI_ENOMSG error entry with the context.
 *  2. FI_PEEK after M1 arrived: its len, tag, FI_REMOTE_CQ_DATA and data; M1 stays and a
 *     receive gets it.
 *  3. FI_PEEK|FI_CLAIM of M2: a plain receive for its tag no longer gets it; FI_CLAIM with
 *     the same context does.
 *  4. The same for M3, a rendezvous message.
 *  5. FI_PEEK|FI_CLAIM of M4 (rendezvous), then FI_CLAIM|FI_DISCARD: M4 is dropped (a
 *     success entry of len 0), M5 of the same tag is what the next receive gets.
 *  6. FI_PEEK|FI_DISCARD drops M6; M7 of the same tag is what the next receive gets.
 * The sender's seven sends all complete successfully.
 */
static void case_peek_claim(void)
{
    enum { N = 7 };
    static const size_t len[N] = {100, 200, (1 << 20) + 5, 100000, 50, 60, 70};
    static const uint64_t tag[N] = {0xE1, 0xE2, 0xE3, 0xE4, 0xE4, 0xE6, 0xE6};
    const uint64_t TR = FI_RECV | FI_TAGGED;
    if (side == 1) {
        uint8_t *s[N];
        struct fi_context c[N];
        void *ctxs[N];
        struct fi_cq_tagged_entry e[N];
        barrier();
        for (int i = 0; i < N; i++) {
            s[i] = xmalloc(len[i]);
            fill(s[i], len[i], 0xE0 + i);
            ctxs[i] = &c[i];
            if (i == 0)
                RETRY(fi_tsenddata(g.ep, s[i], len[i], NULL, DATA(1), g.peer_addr, tag[i],
                                   &c[i]));
            else
                RETRY(fi_tsend(g.ep, s[i], len[i], NULL, g.peer_addr, tag[i], &c[i]));
        }
        cq_collect(g.txcq, N, ctxs, e);
        for (int i = 0; i < N; i++) {
            check_send(&e[i], FI_SEND | FI_TAGGED, len[i]);
            free(s[i]);
        }
        return;
    }
    struct fi_context p0, p1, r1, c2, r2x, c3, c4, r5, c6, r7;
    struct fi_cq_tagged_entry e, two[2];
    struct fi_cq_err_entry err;
    uint8_t *buf = xmalloc(len[2]);

    /* 1. */
    trecvmsg(NULL, 0, g.peer_addr, tag[0], &p0, FI_PEEK);
    cq_err(g.rxcq, &err);
    CHECK(err.err == FI_ENOMSG && err.op_context == &p0,
          "FI_PEEK before arrival: err %d (%s), context %s", err.err, fi_strerror(err.err),
          ctx_name(err.op_context));
    barrier();

    /* 2. */
    peek_until(tag[0], &p1, 0, &e);
    check_peek(&e, len[0], tag[0], TR | FI_REMOTE_CQ_DATA);
    CHECK(e.data == DATA(1), "peek data 0x%" PRIx64, e.data);
    OK(fi_trecv(g.ep, buf, len[0], NULL, g.peer_addr, tag[0], 0, &r1));
    cq_ok(g.rxcq, &e, NULL);
    check_recv(&e, &r1, TR | FI_REMOTE_CQ_DATA, len[0], tag[0], buf);
    check_fill(buf, len[0], 0xE0, "M1 after FI_PEEK");

    /* 3. */
    peek_until(tag[1], &c2, FI_CLAIM, &e);
    check_peek(&e, len[1], tag[1], TR);
    uint8_t other[256];
    OK(fi_trecv(g.ep, other, sizeof other, NULL, g.peer_addr, tag[1], 0, &r2x));
    cq_quiet(g.rxcq, "a plain receive for a claimed message");
    trecvmsg(buf, len[1], g.peer_addr, 0, &c2, FI_CLAIM);
    cq_ok(g.rxcq, &e, NULL);
    check_recv(&e, &c2, TR, len[1], tag[1], buf);
    check_fill(buf, len[1], 0xE1, "M2 by FI_CLAIM");
    OK(fi_cancel(&g.ep->fid, &r2x));
    cq_err(g.rxcq, &err);
    CHECK(err.err == FI_ECANCELED && err.op_context == &r2x, "cancel: err %d", err.err);

    /* 4. */
    peek_until(tag[2], &c3, FI_CLAIM, &e);
    check_peek(&e, len[2], tag[2], TR);
    memset(buf, 0, len[2]);
    trecvmsg(buf, len[2], g.peer_addr, 0, &c3, FI_CLAIM);
    cq_ok(g.rxcq, &e, NULL);
    check_recv(&e, &c3, TR, len[2], tag[2], buf);
    check_fill(buf, len[2], 0xE2, "M3 (rendezvous) by FI_CLAIM");

    /* 5. */
    peek_until(tag[3], &c4, FI_CLAIM, &e);
    check_peek(&e, len[3], tag[3], TR);
    trecvmsg(NULL, 0, g.peer_addr, 0, &c4, FI_CLAIM | FI_DISCARD);
    memset(buf, 0, len[4]);
    OK(fi_trecv(g.ep, buf, len[3], NULL, g.peer_addr, tag[4], 0, &r5));
    void *ctx5[2] = {&c4, &r5};
    cq_collect(g.rxcq, 2, ctx5, two);
    CHECK(two[0].len == 0, "FI_CLAIM|FI_DISCARD: len %zu, expected 0", two[0].len);
    check_recv(&two[1], &r5, TR, len[4], tag[4], buf);
    check_fill(buf, len[4], 0xE4, "M5 after M4 was discarded");

    /* 6. */
    peek_until(tag[5], &c6, FI_DISCARD, &e);
    check_peek(&e, len[5], tag[5], TR);
    OK(fi_trecv(g.ep, buf, len[3], NULL, g.peer_addr, tag[6], 0, &r7));
    cq_ok(g.rxcq, &e, NULL);
    check_recv(&e, &r7, TR, len[6], tag[6], buf);
    check_fill(buf, len[6], 0xE6, "M7 after M6 was discarded");
    cq_quiet(g.rxcq, "after M7");
    free(buf);
}

/* ---- cancel ----------------------------------------------------------------------------- */

/*
 * fi_endpoint(3) "fi_cancel": cancelling a posted tagged or untagged receive returns 0 and
 * completes it with an FI_ECANCELED error entry carrying its context (fi_cq(3)); cancelling
 * it again, or an unknown context, returns -FI_ENOENT. A message sent afterwards goes to a
 * new receive, never to the cancelled one.
 */
static void case_cancel(void)
{
    if (side == 1) {
        uint8_t s[32];
        struct fi_context c;
        struct fi_cq_tagged_entry e;
        fill(s, sizeof s, 0xCA);
        barrier();
        RETRY(fi_tsend(g.ep, s, sizeof s, NULL, g.peer_addr, 0xCA, &c));
        cq_ok(g.txcq, &e, NULL);
        check_send(&e, FI_SEND | FI_TAGGED, sizeof s);
        return;
    }
    uint8_t r1[32], r2[32], r3[32];
    struct fi_context c1, c2, c3, unknown;
    struct fi_cq_err_entry err;
    struct fi_cq_tagged_entry e;
    OK(fi_trecv(g.ep, r1, sizeof r1, NULL, g.peer_addr, 0xCA, 0, &c1));
    OK(fi_recv(g.ep, r2, sizeof r2, NULL, g.peer_addr, &c2));
    OK(fi_cancel(&g.ep->fid, &c1));
    cq_err(g.rxcq, &err);
    CHECK(err.err == FI_ECANCELED && err.op_context == &c1,
          "tagged receive: err %d (%s), context %s", err.err, fi_strerror(err.err),
          ctx_name(err.op_context));
    CHECK(err.flags & FI_RECV, "cancelled entry flags 0x%" PRIx64 " lack FI_RECV", err.flags);
    OK(fi_cancel(&g.ep->fid, &c2));
    cq_err(g.rxcq, &err);
    CHECK(err.err == FI_ECANCELED && err.op_context == &c2,
          "untagged receive: err %d (%s), context %s", err.err, fi_strerror(err.err),
          ctx_name(err.op_context));
    EXPECT(fi_cancel(&g.ep->fid, &c1), -FI_ENOENT);
    EXPECT(fi_cancel(&g.ep->fid, &unknown), -FI_ENOENT);
    cq_quiet(g.rxcq, "after the cancels");
    OK(fi_trecv(g.ep, r3, sizeof r3, NULL, g.peer_addr, 0xCA, 0, &c3));
    barrier();
    cq_ok(g.rxcq, &e, NULL);
    check_recv(&e, &c3, FI_RECV | FI_TAGGED, sizeof r3, 0xCA, r3);
    check_fill(r3, sizeof r3, 0xCA, "after cancel");
    cq_quiet(g.rxcq, "after the message");
}

/* ---- selective -------------------------------------------------------------------------- */

/*
 * fi_endpoint(3) "fi_ep_bind" FI_SELECTIVE_COMPLETION with default op_flags 0: only sends
 * and receives given FI_COMPLETION (fi_tsendmsg/fi_trecvmsg flags) report success; fi_tsend
 * and fi_trecv (default flags) and *msg calls without the flag report nothing, eager or
 * rendezvous, though their data moves. An error (truncation) is reported even without
 * FI_COMPLETION.
 */
static void case_selective(void)
{
    enum { N = 6, BIG = 100000 };
    static const size_t len[N] = {64, 64, 64, BIG, BIG, 100};
    struct fi_context c[N];
    if (side == 1) {
        uint8_t *s[N];
        for (int i = 0; i < N; i++) {
            s[i] = xmalloc(len[i]);
            fill(s[i], len[i], 0x50 + i);
        }
        barrier();
        tsendmsg(s[0], len[0], 0x50, 0, &c[0], 0);
        tsendmsg(s[1], len[1], 0x51, 0, &c[1], FI_COMPLETION);
        RETRY(fi_tsend(g.ep, s[2], len[2], NULL, g.peer_addr, 0x52, &c[2]));
        tsendmsg(s[3], len[3], 0x53, 0, &c[3], 0);
        tsendmsg(s[4], len[4], 0x54, 0, &c[4], FI_COMPLETION);
        RETRY(fi_tsend(g.ep, s[5], len[5], NULL, g.peer_addr, 0x55, &c[5]));
        void *ctxs[2] = {&c[1], &c[4]};
        struct fi_cq_tagged_entry e[2];
        cq_collect(g.txcq, 2, ctxs, e);
        check_send(&e[0], FI_SEND | FI_TAGGED, len[1]);
        check_send(&e[1], FI_SEND | FI_TAGGED, len[4]);
        /* The receiver has every message: the other sends are done, and silent. */
        barrier();
        cq_quiet(g.txcq, "sends without FI_COMPLETION");
        for (int i = 0; i < N; i++)
            free(s[i]);
        return;
    }
    uint8_t *r[N];
    for (int i = 0; i < N; i++) {
        r[i] = xmalloc(len[i]);
        memset(r[i], 0, len[i]);
    }
    trecvmsg(r[0], len[0], g.peer_addr, 0x50, &c[0], FI_COMPLETION);
    trecvmsg(r[1], len[1], g.peer_addr, 0x51, &c[1], 0);
    OK(fi_trecv(g.ep, r[2], len[2], NULL, g.peer_addr, 0x52, 0, &c[2]));
    trecvmsg(r[3], len[3], g.peer_addr, 0x53, &c[3], FI_COMPLETION);
    trecvmsg(r[4], len[4], g.peer_addr, 0x54, &c[4], 0);
    trecvmsg(r[5], 10, g.peer_addr, 0x55, &c[5], 0);
    barrier();
    int seen_ok = 0, seen_err = 0;
    for (int k = 0; k < 3; k++) {
        struct fi_cq_tagged_entry e;
        struct fi_cq_err_entry err;
        if (cq_next(g.rxcq, &e, NULL, &err)) {
            CHECK(!seen_err && err.op_context == &c[5] && err.err == FI_ETRUNC,
                  "error entry: context %s, err %d (%s)", ctx_name(err.op_context), err.err,
                  fi_strerror(err.err));
            seen_err = 1;
        } else if (e.op_context == &c[0] && !(seen_ok & 1)) {
            check_recv(&e, &c[0], FI_RECV | FI_TAGGED, len[0], 0x50, r[0]);
            seen_ok |= 1;
        } else if (e.op_context == &c[3] && !(seen_ok & 2)) {
            check_recv(&e, &c[3], FI_RECV | FI_TAGGED, len[3], 0x53, r[3]);
            seen_ok |= 2;
        } else {
            fail("completion of context %s: only FI_COMPLETION receives report success",
                 ctx_name(e.op_context));
        }
    }
    /* The silent receives' data arrives all the same (reading the CQ progresses it). */
    uint8_t *want = xmalloc(BIG);
    for (int i = 0; i < N; i++) {
        size_t n = i == 5 ? 10 : len[i];
        fill(want, n, 0x50 + i);
        double t = now();
        while (memcmp(r[i], want, n)) {
            cq_quiet(g.rxcq, "receives without FI_COMPLETION");
            CHECK(now() - t < DEADLINE_S, "message %d never arrived in its buffer", i);
        }
    }
    free(want);
    barrier();
    for (int i = 0; i < N; i++)
        free(r[i]);
}

/* ---- counters --------------------------------------------------------------------------- */

/*
 * fi_cntr(3), with FI_SELECTIVE_COMPLETION on both CQs: the sender's four operations, an
 * inject, a send without FI_COMPLETION (eager and rendezvous) and one with it, all count on
 * the send counter although only the last reports to the CQ. The receiver's three receives
 * that fit count on the receive counter, the fourth (truncated) as its error, in whatever
 * order they complete (the rendezvous one last). A wait with nothing moving times out with
 * the values unchanged; a wait for a success that never comes ends (-FI_EAVAIL) when a fifth,
 * truncated, message is counted as an error. add/set/adderr/seterr change the values read
 * back.
 */
static void case_counters(void)
{
    enum { N = 4, BIG = 100000 };
    static const size_t len[N] = {8, 64, BIG, 300};
    struct fi_context c[N + 1];
    const int ms = (int)(DEADLINE_S * 1000);
    EXPECT(fi_cntr_read(g.txcntr), 0);
    EXPECT(fi_cntr_readerr(g.rxcntr), 0);
    if (side == 1) {
        uint8_t *s[N];
        for (int i = 0; i < N; i++) {
            s[i] = xmalloc(len[i]);
            fill(s[i], len[i], 0xC0 + i);
        }
        barrier();
        RETRY(fi_tinject(g.ep, s[0], len[0], g.peer_addr, 0xC0));
        tsendmsg(s[1], len[1], 0xC1, 0, &c[1], 0);
        tsendmsg(s[2], len[2], 0xC2, 0, &c[2], 0);
        tsendmsg(s[3], len[3], 0xC3, 0, &c[3], FI_COMPLETION);
        EXPECT(fi_cntr_wait(g.txcntr, N, ms), 0);
        EXPECT(fi_cntr_read(g.txcntr), N);
        EXPECT(fi_cntr_readerr(g.txcntr), 0);
        struct fi_cq_tagged_entry e;
        cq_ok(g.txcq, &e, NULL);
        CHECK(e.op_context == &c[3], "the send CQ reported context %s, expected c[3]",
              ctx_name(e.op_context));
        cq_quiet(g.txcq, "sends without FI_COMPLETION");
        /* The receive counter saw nothing on this side. */
        EXPECT(fi_cntr_read(g.rxcntr), 0);
        EXPECT(fi_cntr_wait(g.txcntr, N + 1, 100), -FI_ETIMEDOUT);
        EXPECT(fi_cntr_read(g.txcntr), N);
        OK(fi_cntr_set(g.txcntr, 100));
        OK(fi_cntr_add(g.txcntr, 5));
        EXPECT(fi_cntr_read(g.txcntr), 105);
        OK(fi_cntr_adderr(g.txcntr, 2));
        EXPECT(fi_cntr_readerr(g.txcntr), 2);
        OK(fi_cntr_seterr(g.txcntr, 0));
        EXPECT(fi_cntr_readerr(g.txcntr), 0);
        /* One more, truncated at the receiver: it counts here as a send like any other. */
        barrier();
        tsendmsg(s[3], len[3], 0xC4, 0, &c[4], 0);
        EXPECT(fi_cntr_wait(g.txcntr, 106, ms), 0);
        barrier();
        for (int i = 0; i < N; i++)
            free(s[i]);
        return;
    }
    uint8_t *r[N], tiny[10];
    for (int i = 0; i < N; i++)
        r[i] = xmalloc(len[i]);
    OK(fi_trecv(g.ep, r[0], len[0], NULL, g.peer_addr, 0xC0, 0, &c[0]));
    trecvmsg(r[1], len[1], g.peer_addr, 0xC1, &c[1], 0);
    trecvmsg(r[2], len[2], g.peer_addr, 0xC2, &c[2], 0);
    trecvmsg(r[3], 10, g.peer_addr, 0xC3, &c[3], 0);
    barrier();
    /* The three that fit count as successes, the truncated one as an error — in the order
     * they complete, which is not the sending order (the rendezvous one finishes last). */
    double t = now();
    while (fi_cntr_read(g.rxcntr) < N - 1 || fi_cntr_readerr(g.rxcntr) < 1)
        CHECK(now() - t < DEADLINE_S, "receive counter %" PRIu64 ", errors %" PRIu64,
              fi_cntr_read(g.rxcntr), fi_cntr_readerr(g.rxcntr));
    EXPECT(fi_cntr_read(g.rxcntr), N - 1);
    EXPECT(fi_cntr_readerr(g.rxcntr), 1);
    for (int i = 0; i < N - 1; i++)
        check_fill(r[i], len[i], 0xC0 + i, "a counted receive");
    /* The truncated receive is an error entry too (always reported). */
    struct fi_cq_err_entry err;
    cq_err(g.rxcq, &err);
    CHECK(err.op_context == &c[3] && err.err == FI_ETRUNC, "error entry: context %s, err %d",
          ctx_name(err.op_context), err.err);
    /* No change while waiting: a timeout, the values as they were. */
    EXPECT(fi_cntr_wait(g.rxcntr, N, 100), -FI_ETIMEDOUT);
    EXPECT(fi_cntr_readerr(g.rxcntr), 1);
    /* A wait for a success that never comes ends when an error is counted: the next message
     * is truncated too, and nothing moves before the wait (progress is the application's). */
    trecvmsg(tiny, sizeof tiny, g.peer_addr, 0xC4, &c[4], 0);
    barrier();
    EXPECT(fi_cntr_wait(g.rxcntr, N, ms), -FI_EAVAIL);
    EXPECT(fi_cntr_read(g.rxcntr), N - 1);
    EXPECT(fi_cntr_readerr(g.rxcntr), 2);
    cq_err(g.rxcq, &err);
    CHECK(err.op_context == &c[4] && err.err == FI_ETRUNC, "error entry: context %s, err %d",
          ctx_name(err.op_context), err.err);
    cq_quiet(g.rxcq, "receives without FI_COMPLETION");
    barrier();
    for (int i = 0; i < N; i++)
        free(r[i]);
}

/* ---- rma ----------------------------------------------------------------------------- */

/*
 * fi_rma(3) over memory the target registered (fi_mr(3)): the target (lower rank) registers
 * a malloc'd buffer of N bytes for remote read and write and 4096 bytes for remote read
 * only, and publishes their keys (FI_MR_PROV_KEY); its pattern must survive registration.
 * The initiator reads the whole buffer into unregistered memory (staged), reads a piece into
 * a buffer it registered (FI_READ | FI_WRITE, used in place through its desc), writes an
 * 8-byte inject, 64 KiB from its registered buffer and 1000 bytes from unregistered memory
 * (fi_writemsg), then three writes that must fail with an error completion: into the
 * read-only region (FI_EACCES), past the end (FI_EFAULT) and with a key nobody gave
 * (FI_EACCES). Successes report FI_RMA | FI_READ or FI_WRITE with their contexts; the
 * FI_READ | FI_WRITE counter counts 5 and 3 errors. The target then finds exactly the
 * written bytes changed, the read-only region untouched; a stack buffer cannot be
 * registered on a host.
 */
static void case_rma(void)
{
    enum { N = 100000, RO = 4096, L = 70000 };
    struct {
        uint64_t rw, ro;
    } keys;
    if (side == 0) {
        uint8_t *t = xmalloc(N), *ro = xmalloc(RO);
        fill(t, N, 0xA0);
        fill(ro, RO, 0xA1);
        struct fid_mr *mr, *mr_ro, *bad;
        OK(fi_mr_reg(g.domain, t, N, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
        OK(fi_mr_reg(g.domain, ro, RO, FI_REMOTE_READ, 0, 0, 0, &mr_ro, NULL));
        check_fill(t, N, 0xA0, "the registered buffer right after fi_mr_reg");
        uint8_t on_stack[64];
        EXPECT(fi_mr_reg(g.domain, on_stack, sizeof on_stack, FI_REMOTE_WRITE, 0, 0, 0, &bad,
                         NULL),
               -FI_EINVAL);
        keys.rw = fi_mr_key(mr);
        keys.ro = fi_mr_key(mr_ro);
        CHECK(keys.rw != keys.ro, "two registrations with one key %" PRIu64, keys.rw);
        put_file("rma_keys", &keys, sizeof keys);
        barrier();
        /* ... the initiator reads and writes ... */
        barrier();
        uint8_t *want = xmalloc(N);
        fill(want, N, 0xA0);
        uint8_t *w = xmalloc(65536);
        fill(w, 8, 0xB1);
        memcpy(want + 3, w, 8);
        fill(w, 65536, 0xB2);
        memcpy(want + 20000, w, 65536);
        fill(w, 1000, 0xB3);
        memcpy(want + 99000, w, 1000);
        for (size_t i = 0; i < N; i++)
            CHECK(t[i] == want[i], "target byte %zu is 0x%02x, expected 0x%02x", i, t[i],
                  want[i]);
        check_fill(ro, RO, 0xA1, "the read-only region");
        OK(fi_close(&mr->fid));
        OK(fi_close(&mr_ro->fid));
        /* Closing lets the NI go; the memory stays the application's, as it was. */
        for (size_t i = 0; i < N; i++)
            CHECK(t[i] == want[i], "target byte %zu changed when its registration closed", i);
        free(want);
        free(w);
        free(t);
        free(ro);
        barrier();
        return;
    }
    barrier();
    get_file("rma_keys", &keys, sizeof keys, STARTUP_S);
    struct fi_context c[8];
    struct fi_cq_tagged_entry e[5];
    /* reads: staged, then in place */
    uint8_t *all = xmalloc(N), *l = xmalloc(L);
    memset(all, 0, N);
    struct fid_mr *lmr;
    OK(fi_mr_reg(g.domain, l, L, FI_READ | FI_WRITE, 0, 0, 0, &lmr, NULL));
    RETRY(fi_read(g.ep, all, N, NULL, g.peer_addr, 0, keys.rw, &c[0]));
    RETRY(fi_read(g.ep, l + 7, 50000, fi_mr_desc(lmr), g.peer_addr, 1000, keys.rw, &c[1]));
    void *rctx[2] = {&c[0], &c[1]};
    cq_collect(g.txcq, 2, rctx, e);
    for (int i = 0; i < 2; i++)
        CHECK(e[i].flags == (FI_RMA | FI_READ), "read %d: flags 0x%" PRIx64, i, e[i].flags);
    check_fill(all, N, 0xA0, "fi_read of the whole region (staged)");
    check_fill_at(l + 7, 1000, 50000, 0xA0, "fi_read into a registered buffer");
    /* writes: inject, registered, staged by writemsg */
    uint8_t small[8];
    fill(small, 8, 0xB1);
    RETRY(fi_inject_write(g.ep, small, 8, g.peer_addr, 3, keys.rw));
    memset(small, 0xEE, 8); /* an inject's buffer is ours again at once */
    fill(l, 65536, 0xB2);
    RETRY(fi_write(g.ep, l, 65536, fi_mr_desc(lmr), g.peer_addr, 20000, keys.rw, &c[2]));
    uint8_t *u = xmalloc(1000);
    fill(u, 1000, 0xB3);
    struct iovec iov = {.iov_base = u, .iov_len = 1000};
    struct fi_rma_iov riov = {.addr = 99000, .len = 1000, .key = keys.rw};
    struct fi_msg_rma m = {.msg_iov = &iov, .desc = NULL, .iov_count = 1, .addr = g.peer_addr,
                           .rma_iov = &riov, .rma_iov_count = 1, .context = &c[3]};
    RETRY(fi_writemsg(g.ep, &m, FI_COMPLETION | FI_DELIVERY_COMPLETE));
    void *wctx[2] = {&c[2], &c[3]};
    cq_collect(g.txcq, 2, wctx, e);
    for (int i = 0; i < 2; i++)
        CHECK(e[i].flags == (FI_RMA | FI_WRITE), "write %d: flags 0x%" PRIx64, i, e[i].flags);
    /* refused by the target's NI: read-only key, out of bounds, a key nobody gave */
    RETRY(fi_write(g.ep, u, 8, NULL, g.peer_addr, 0, keys.ro, &c[4]));
    RETRY(fi_write(g.ep, u, 100, NULL, g.peer_addr, N - 10, keys.rw, &c[5]));
    RETRY(fi_write(g.ep, u, 8, NULL, g.peer_addr, 0, keys.rw + keys.ro + 1000, &c[6]));
    int want_err[3] = {FI_EACCES, FI_EFAULT, FI_EACCES};
    for (int k = 0; k < 3; k++) {
        struct fi_cq_err_entry err;
        cq_err(g.txcq, &err);
        int i = (int)((struct fi_context *)err.op_context - &c[4]);
        CHECK(i >= 0 && i < 3, "error entry with context %s", ctx_name(err.op_context));
        CHECK(err.err == want_err[i], "refused write %d: err %d (%s), expected %d (%s)", i,
              err.err, fi_strerror(err.err), want_err[i], fi_strerror(want_err[i]));
        CHECK(err.flags == (FI_RMA | FI_WRITE), "refused write %d: flags 0x%" PRIx64, i,
              err.flags);
    }
    cq_quiet(g.txcq, "after the RMA");
    EXPECT(fi_cntr_read(g.rmacntr), 5);
    EXPECT(fi_cntr_readerr(g.rmacntr), 3);
    barrier();
    barrier();
    OK(fi_close(&lmr->fid));
    free(u);
    free(all);
    free(l);
}

/* ---- close_flush ------------------------------------------------------------------------ */

/*
 * fi_endpoint(3) "fi_close", fi_tagged(3) "fi_tinject": the receiver posts N receives and
 * meets the sender; the sender injects N messages and at once closes its endpoint, CQs, AV,
 * domain and fabric and exits, without waiting for anything. Every message must arrive, in
 * order with its payload: once fi_tinject returned, the message is the provider's to deliver
 * (on the fabric path it may still be queued for the NI when the application closes).
 */
static void case_close_flush(void)
{
    enum { N = 300, LEN = 64 };
    if (side == 1) {
        uint8_t b[LEN];
        barrier();
        for (int i = 0; i < N; i++) {
            fill(b, LEN, 0xF000 + i);
            RETRY(fi_tinject(g.ep, b, LEN, g.peer_addr, 0xF1));
        }
        OK(fi_close(&g.ep->fid));
        OK(fi_close(&g.txcq->fid));
        OK(fi_close(&g.rxcq->fid));
        OK(fi_close(&g.av->fid));
        OK(fi_close(&g.domain->fid));
        OK(fi_close(&g.fabric->fid));
        fi_freeinfo(g.info);
        return;
    }
    static uint8_t r[N][LEN];
    struct fi_context c[N];
    for (int i = 0; i < N; i++)
        OK(fi_trecv(g.ep, r[i], LEN, NULL, g.peer_addr, 0xF1, 0, &c[i]));
    barrier();
    for (int i = 0; i < N; i++) {
        struct fi_cq_tagged_entry e;
        cq_ok(g.rxcq, &e, NULL);
        /* receives posted with one tag match in posting order, messages in sending order */
        check_recv(&e, &c[i], FI_RECV | FI_TAGGED, LEN, 0xF1, r[i]);
        check_fill(r[i], LEN, 0xF000 + i, "a message the sender injected before closing");
    }
    OK(fi_close(&g.ep->fid));
    OK(fi_close(&g.txcq->fid));
    OK(fi_close(&g.rxcq->fid));
    OK(fi_close(&g.av->fid));
    OK(fi_close(&g.domain->fid));
    OK(fi_close(&g.fabric->fid));
    fi_freeinfo(g.info);
}

/* ---- msg_multi_recv --------------------------------------------------------------------- */

/*
 * fi_msg(3) "FI_MULTI_RECV", fi_endpoint(3) "FI_OPT_MIN_MULTI_RECV": one 1000-byte buffer
 * takes untagged messages of 100, 300, 250 and 200 bytes one after the other; each
 * completion has the buffer's context, buf at its piece, its len; once less than the
 * minimum (set to 200, default 64) is left the last completion carries FI_MULTI_RECV and the
 * buffer is released, so the fifth message goes to the next posted receive.
 */
static void case_msg_multi_recv(void)
{
    enum { N = 5 };
    static const size_t len[N] = {100, 300, 250, 200, 50};
    if (side == 1) {
        uint8_t *s[N];
        struct fi_context c[N];
        void *ctxs[N];
        struct fi_cq_tagged_entry e[N];
        barrier();
        for (int i = 0; i < N; i++) {
            s[i] = xmalloc(len[i]);
            fill(s[i], len[i], 0x3A + i);
            ctxs[i] = &c[i];
            RETRY(fi_send(g.ep, s[i], len[i], NULL, g.peer_addr, &c[i]));
        }
        cq_collect(g.txcq, N, ctxs, e);
        for (int i = 0; i < N; i++) {
            check_send(&e[i], FI_SEND | FI_MSG, len[i]);
            free(s[i]);
        }
        return;
    }
    size_t min = 0, optlen = sizeof min;
    OK(fi_getopt(&g.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, &optlen));
    CHECK(min == 64 && optlen == sizeof min, "default FI_OPT_MIN_MULTI_RECV %zu", min);
    min = 200;
    OK(fi_setopt(&g.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min));
    min = 0;
    OK(fi_getopt(&g.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, &optlen));
    CHECK(min == 200, "FI_OPT_MIN_MULTI_RECV reads back %zu, set 200", min);

    static uint8_t mbuf[1000], next[64];
    struct fi_context m, c5;
    struct iovec iov = {mbuf, sizeof mbuf};
    struct fi_msg msg = {.msg_iov = &iov, .iov_count = 1, .addr = g.peer_addr, .context = &m};
    OK(fi_recvmsg(g.ep, &msg, FI_MULTI_RECV));
    OK(fi_recv(g.ep, next, sizeof next, NULL, g.peer_addr, &c5));
    barrier();
    size_t at = 0;
    for (int i = 0; i < N; i++) {
        struct fi_cq_tagged_entry e;
        char what[32];
        snprintf(what, sizeof what, "message %d", i);
        cq_ok(g.rxcq, &e, NULL);
        if (i < 4) {
            check_recv(&e, &m, FI_RECV | FI_MSG | (i == 3 ? FI_MULTI_RECV : 0), len[i], 0,
                       mbuf + at);
            check_fill(mbuf + at, len[i], 0x3A + i, what);
            at += len[i];
        } else {
            check_recv(&e, &c5, FI_RECV | FI_MSG, len[i], 0, next);
            check_fill(next, len[i], 0x3A + i, what);
        }
    }
}

/* ---- av_table --------------------------------------------------------------------------- */

/*
 * fi_av(3) FI_AV_TABLE: addresses are insertion indices (the peer 0, this process 1);
 * fi_av_lookup returns the inserted name (and -FI_ETOOSMALL with the needed size for a short
 * buffer); fi_av_straddr reads "ni://partitionP/rankR/nodeN"; fi_av_insert of a garbage name
 * and of a name of another partition counts only the valid ones and gives those two
 * FI_ADDR_NOTAVAIL; fi_av_remove frees an index (lookup then -FI_ENOENT). A message sent to
 * the table address arrives, and fi_cq_readfrom gives the sender's table address.
 */
static void case_av_table(void)
{
    fi_addr_t self;
    CHECK(fi_av_insert(g.av, g.my_name, 1, &self, 0, NULL) == 1, "inserting my own name");
    CHECK(self == 1, "my own name got index %" PRIu64 ", expected 1", self);

    uint8_t name[NAME_LEN];
    size_t len = sizeof name;
    OK(fi_av_lookup(g.av, g.peer_addr, name, &len));
    CHECK(len == NAME_LEN && !memcmp(name, g.peer_name, NAME_LEN), "lookup(0): not the peer");
    len = sizeof name;
    OK(fi_av_lookup(g.av, self, name, &len));
    CHECK(len == NAME_LEN && !memcmp(name, g.my_name, NAME_LEN), "lookup(1): not mine");
    len = 8;
    EXPECT(fi_av_lookup(g.av, self, name, &len), -FI_ETOOSMALL);
    CHECK(len == NAME_LEN, "a short lookup reports %zu bytes needed", len);

    uint32_t w[4];
    memcpy(w, g.peer_name, sizeof w);
    CHECK(w[0] == 0x4946494E, "the name's magic is 0x%08x, expected \"NIFI\"", w[0]);
    CHECK(w[2] == (uint32_t)peer, "the peer's name says rank %u", w[2]);
    char want[128], got[128];
    snprintf(want, sizeof want, "ni://partition%u/rank%u/node%u", w[1], w[2], w[3]);
    len = sizeof got;
    fi_av_straddr(g.av, g.peer_name, got, &len);
    CHECK(!strcmp(got, want), "fi_av_straddr gave \"%s\", expected \"%s\"", got, want);
    CHECK(len == strlen(want) + 1, "fi_av_straddr length %zu, expected %zu", len,
          strlen(want) + 1);

    /* Garbage, another partition's name, and the peer's name again. */
    uint8_t three[3][NAME_LEN];
    memset(three[0], 0x5A, NAME_LEN);
    w[1] += 1;
    memcpy(three[1], w, sizeof w);
    memcpy(three[2], g.peer_name, NAME_LEN);
    fi_addr_t out[3];
    int n = fi_av_insert(g.av, three, 3, out, 0, NULL);
    CHECK(n == 1, "fi_av_insert of [garbage, other partition, peer] returned %d, expected 1",
          n);
    CHECK(out[0] == FI_ADDR_NOTAVAIL && out[1] == FI_ADDR_NOTAVAIL,
          "invalid names got %" PRIu64 " and %" PRIu64 ", expected FI_ADDR_NOTAVAIL", out[0],
          out[1]);
    CHECK(out[2] == 2, "the valid name got %" PRIu64 ", expected index 2", out[2]);
    OK(fi_av_remove(g.av, &out[2], 1, 0));
    len = sizeof name;
    EXPECT(fi_av_lookup(g.av, out[2], name, &len), -FI_ENOENT);

    struct fi_context c;
    uint8_t buf[48];
    struct fi_cq_tagged_entry e;
    if (side == 1) {
        fill(buf, sizeof buf, 0xAB);
        barrier();
        RETRY(fi_tsend(g.ep, buf, sizeof buf, NULL, g.peer_addr, 0xAB, &c));
        cq_ok(g.txcq, &e, NULL);
        check_send(&e, FI_SEND | FI_TAGGED, sizeof buf);
        return;
    }
    OK(fi_trecv(g.ep, buf, sizeof buf, NULL, g.peer_addr, 0xAB, 0, &c));
    barrier();
    fi_addr_t src = FI_ADDR_NOTAVAIL;
    cq_ok(g.rxcq, &e, &src);
    check_recv(&e, &c, FI_RECV | FI_TAGGED, sizeof buf, 0xAB, buf);
    check_fill(buf, sizeof buf, 0xAB, "message to a table address");
    CHECK(src == g.peer_addr, "fi_cq_readfrom source %" PRIu64 ", expected %" PRIu64, src,
          g.peer_addr);
}

/* ---- errors ----------------------------------------------------------------------------- */

/*
 * What the provider refuses, with the error number the contract names and no crash:
 * fi_getinfo(3) caps FI_RMA without FI_MR_PROV_KEY, FI_EP_MSG and FI_PROGRESS_AUTO →
 * -FI_ENODATA; fi_cq(3) a wait
 * object FI_WAIT_FD → -FI_ENOSYS; fi_endpoint(3) "fi_enable" without an AV → -FI_ENOAV,
 * without both CQs → -FI_ENOCQ; a second fi_endpoint on the domain → -FI_EBUSY (free again
 * once the first is closed); fi_cq_read / fi_cq_readerr of an empty CQ → -FI_EAGAIN;
 * fi_cm(3) fi_connect / fi_getpeer → an error; a send to an address outside the AV → an
 * error; fi_mr_reg for remote access of shared memory (what a host's NI cannot be given) →
 * -FI_EINVAL, for messages only → a key; an unknown fi_setopt →
 * -FI_ENOPROTOOPT. Runs in each process on its own NI.
 */
static void case_errors(void)
{
    struct fi_info *h = hints(FI_AV_MAP), *info = NULL;
    h->caps |= FI_RMA;
    EXPECT(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info), -FI_ENODATA);
    h->caps &= ~FI_RMA;
    h->ep_attr->type = FI_EP_MSG;
    EXPECT(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info), -FI_ENODATA);
    h->ep_attr->type = FI_EP_RDM;
    h->domain_attr->data_progress = FI_PROGRESS_AUTO;
    EXPECT(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info), -FI_ENODATA);
    h->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
    g.info = getinfo(h);
    fi_freeinfo(h);

    OK(fi_fabric(g.info->fabric_attr, &g.fabric, NULL));
    OK(fi_domain(g.fabric, g.info, &g.domain, NULL));
    struct fi_cq_attr fd = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD};
    struct fid_cq *cq;
    EXPECT(fi_cq_open(g.domain, &fd, &cq, NULL), -FI_ENOSYS);
    open_cq(&g.txcq);
    open_cq(&g.rxcq);
    struct fi_av_attr aa = {.type = FI_AV_MAP};
    OK(fi_av_open(g.domain, &aa, &g.av, NULL));

    struct fid_ep *second;
    OK(fi_endpoint(g.domain, g.info, &g.ep, NULL));
    EXPECT(fi_endpoint(g.domain, g.info, &second, NULL), -FI_EBUSY);
    OK(fi_close(&g.ep->fid));
    OK(fi_endpoint(g.domain, g.info, &g.ep, NULL));
    EXPECT(fi_enable(g.ep), -FI_ENOAV);
    OK(fi_ep_bind(g.ep, &g.av->fid, 0));
    EXPECT(fi_enable(g.ep), -FI_ENOCQ);
    OK(fi_ep_bind(g.ep, &g.txcq->fid, FI_TRANSMIT));
    EXPECT(fi_enable(g.ep), -FI_ENOCQ);
    OK(fi_ep_bind(g.ep, &g.rxcq->fid, FI_RECV));
    OK(fi_enable(g.ep));

    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    EXPECT(fi_cq_read(g.rxcq, &e, 1), -FI_EAGAIN);
    EXPECT(fi_cq_readerr(g.rxcq, &err, 0), -FI_EAGAIN);

    uint8_t name[NAME_LEN];
    size_t len = sizeof name;
    OK(fi_getname(&g.ep->fid, name, &len));
    long r = fi_connect(g.ep, name, NULL, 0);
    CHECK(r < 0, "fi_connect on an RDM endpoint returned %ld, expected an error", r);
    len = sizeof name;
    r = fi_getpeer(g.ep, name, &len);
    CHECK(r < 0, "fi_getpeer on an RDM endpoint returned %ld, expected an error", r);
    uint8_t b[8] = {0};
    struct fi_context c;
    r = fi_tsend(g.ep, b, sizeof b, NULL, 1000, 1, &c);
    CHECK(r < 0, "fi_tsend to fi_addr 1000 (not in the AV) returned %ld", r);

    struct fid_mr *mr;
    uint8_t *region =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(region != MAP_FAILED, "mmap: %s", strerror(errno));
    EXPECT(fi_mr_reg(g.domain, region, 4096, FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL), -FI_EINVAL);
    OK(fi_mr_reg(g.domain, region, 4096, FI_SEND | FI_RECV, 0, 0, 0, &mr, NULL));
    OK(fi_close(&mr->fid));
    munmap(region, 4096);
    size_t v = 1;
    EXPECT(fi_setopt(&g.ep->fid, FI_OPT_ENDPOINT, 99, &v, sizeof v), -FI_ENOPROTOOPT);
    EXPECT(fi_cq_read(g.txcq, &e, 1), -FI_EAGAIN);

    OK(fi_close(&g.ep->fid));
    OK(fi_close(&g.txcq->fid));
    OK(fi_close(&g.rxcq->fid));
    OK(fi_close(&g.av->fid));
    OK(fi_close(&g.domain->fid));
    OK(fi_close(&g.fabric->fid));
    fi_freeinfo(g.info);
}

/* ---- hostile_victim --------------------------------------------------------------------- */

/* ---- threads ---------------------------------------------------------------------------- */

#define NTHREADS 4
#define PER_THREAD 600

/* Message k of thread t: mostly eager (1-300 bytes), every seventh a rendezvous. */
static size_t thread_len(int t, int k)
{
    if (k % 7 == 6)
        return EAGER_MAX + 1 + (size_t)((k * 131 + t * 17) % 20000);
    return 1 + (size_t)((k * 37 + t * 11) % 300);
}

/* One operation of a thread's: whoever reads its completion from the shared CQ fills `e`,
 * then sets `done` (release); its thread waits for `done` (acquire). */
struct thread_op {
    struct fi_context ctx; /* first: the completion's op_context is the op */
    struct fi_cq_tagged_entry e;
    atomic_int done;
};

/* Read completions from `cq` (any thread's) until `op`'s came. */
static void thread_wait(struct fid_cq *cq, struct thread_op *op)
{
    double t = now();
    while (!atomic_load_explicit(&op->done, memory_order_acquire)) {
        struct fi_cq_tagged_entry e;
        ssize_t r = fi_cq_read(cq, &e, 1);
        if (r == 1) {
            struct thread_op *o = e.op_context;
            CHECK(o, "a completion without a context");
            o->e = e;
            atomic_store_explicit(&o->done, 1, memory_order_release);
            continue;
        }
        CHECK(r == -FI_EAGAIN, "fi_cq_read returned %zd (%s)", r, fi_strerror((int)-r));
        CHECK(now() - t < DEADLINE_S, "no completion within %.0f s", DEADLINE_S);
    }
}

static void *thread_main(void *arg)
{
    int t = (int)(intptr_t)arg;
    const uint64_t tag = 0x7E0000 + (uint64_t)t;
    uint8_t *buf = xmalloc(EAGER_MAX + 1 + 20000);
    for (int k = 0; k < PER_THREAD; k++) {
        size_t len = thread_len(t, k);
        uint64_t seed = 50000 + (uint64_t)t * 1000 + (uint64_t)k;
        struct thread_op op;
        memset(&op, 0, sizeof op);
        atomic_init(&op.done, 0);
        if (side == 1) {
            fill(buf, len, seed);
            RETRY(fi_tsend(g.ep, buf, len, NULL, g.peer_addr, tag, &op));
            thread_wait(g.txcq, &op);
            check_send(&op.e, FI_SEND | FI_TAGGED, len);
        } else {
            memset(buf, 0, len);
            RETRY(fi_trecv(g.ep, buf, len, NULL, g.peer_addr, tag, 0, &op));
            thread_wait(g.rxcq, &op);
            check_recv(&op.e, &op, FI_RECV | FI_TAGGED, len, tag, buf);
            char what[48];
            snprintf(what, sizeof what, "thread %d message %d", t, k);
            check_fill(buf, len, seed, what);
        }
    }
    free(buf);
    return NULL;
}

/*
 * fi_domain(3) "threading" FI_THREAD_SAFE (the provider's default): threads may call any
 * function on the same objects at once. Four threads a side share the endpoint and its CQs;
 * thread t of the higher rank sends 600 messages of tag t (eager and rendezvous), one at a
 * time, and thread t of the lower rank receives them. Each reads completions from the shared
 * CQ, which may be another thread's (it hands them over by context). Every message arrives
 * intact and in its thread's order (FI_ORDER_SAS per tag), every send completes.
 */
static void case_threads(void)
{
    pthread_t th[NTHREADS];
    for (int t = 0; t < NTHREADS; t++)
        CHECK(pthread_create(&th[t], NULL, thread_main, (void *)(intptr_t)t) == 0,
              "pthread_create failed");
    for (int t = 0; t < NTHREADS; t++)
        CHECK(pthread_join(th[t], NULL) == 0, "pthread_join failed");
}

/*
 * The lower rank receives a checked stream from the higher one while the harness's attacker
 * (a third NI) sends it headers that lie. Every honest message must arrive intact and in
 * order; then, once DIR/attack_done exists (all lies delivered to this NI), one more honest
 * message must still arrive. The harness reads the warnings about the dropped lies.
 */
static void case_hostile_victim(void)
{
    enum { N = 300 };
    const uint64_t tag = 0x40E57, last = 0x1A57;
    uint8_t buf[100];
    struct fi_context c;
    struct fi_cq_tagged_entry e;
    if (side == 1) {
        stream_send(N, tag);
        barrier();
        fill(buf, sizeof buf, last);
        RETRY(fi_tsend(g.ep, buf, sizeof buf, NULL, g.peer_addr, last, &c));
        cq_ok(g.txcq, &e, NULL);
        check_send(&e, FI_SEND | FI_TAGGED, sizeof buf);
        return;
    }
    stream_recv(N, tag);
    /* Reading the CQ moves the attacker's sends along too; none of them may complete here. */
    char p[4096];
    path_of(p, sizeof p, "attack_done");
    double t = now();
    while (access(p, F_OK) != 0) {
        cq_quiet(g.rxcq, "waiting for the attack to end");
        CHECK(now() - t < STARTUP_S, "%s did not appear within %.0f s", p, STARTUP_S);
    }
    cq_quiet(g.rxcq, "after the attack");
    OK(fi_trecv(g.ep, buf, sizeof buf, NULL, g.peer_addr, last, 0, &c));
    barrier();
    cq_ok(g.rxcq, &e, NULL);
    check_recv(&e, &c, FI_RECV | FI_TAGGED, sizeof buf, last, buf);
    check_fill(buf, sizeof buf, last, "the message after the attack");
}

/* ---- main ------------------------------------------------------------------------------- */

static const struct {
    const char *name;
    void (*run)(void);
    /* 0: no endpoint set up for the case (it opens its own objects). */
    int av_type;
    uint64_t bind_flags;
    /* 1: a send and a receive counter bound too. */
    int cntrs;
    /* 1: FI_RMA asked for (FI_MR_PROV_KEY), a FI_READ | FI_WRITE counter bound. */
    int rma;
} CASES[] = {
    {"getinfo", case_getinfo, 0, 0, 0, 0},
    {"tagged", case_tagged, FI_AV_MAP, 0, 0, 0},
    {"order", case_order, FI_AV_MAP, 0, 0, 0},
    {"backlog", case_backlog, FI_AV_MAP, 0, 0, 0},
    {"ignore_mask", case_ignore_mask, FI_AV_MAP, 0, 0, 0},
    {"any_source", case_any_source, FI_AV_MAP, 0, 0, 0},
    {"cq_data", case_cq_data, FI_AV_MAP, 0, 0, 0},
    {"inject", case_inject, FI_AV_MAP, 0, 0, 0},
    {"truncate", case_truncate, FI_AV_MAP, 0, 0, 0},
    {"peek_claim", case_peek_claim, FI_AV_MAP, 0, 0, 0},
    {"cancel", case_cancel, FI_AV_MAP, 0, 0, 0},
    {"selective", case_selective, FI_AV_MAP, FI_SELECTIVE_COMPLETION, 0, 0},
    {"counters", case_counters, FI_AV_MAP, FI_SELECTIVE_COMPLETION, 1, 0},
    {"rma", case_rma, FI_AV_MAP, 0, 0, 1},
    {"close_flush", case_close_flush, FI_AV_MAP, 0, 0, 0},
    {"msg_multi_recv", case_msg_multi_recv, FI_AV_MAP, 0, 0, 0},
    {"av_table", case_av_table, FI_AV_TABLE, 0, 0, 0},
    {"errors", case_errors, 0, 0, 0, 0},
    {"threads", case_threads, FI_AV_MAP, 0, 0, 0},
    {"hostile_victim", case_hostile_victim, FI_AV_MAP, 0, 0, 0},
};

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 5) {
        fprintf(stderr, "usage: %s RANK PEER_RANK DIR CASE\n", argv[0]);
        return 2;
    }
    rank = atoi(argv[1]);
    peer = atoi(argv[2]);
    dir = argv[3];
    case_name = argv[4];
    side = rank > peer;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        if (strcmp(CASES[i].name, case_name))
            continue;
        want_rma = CASES[i].rma;
        if (CASES[i].av_type) {
            setup(CASES[i].av_type, CASES[i].bind_flags, CASES[i].cntrs);
            CASES[i].run();
            if (CASES[i].run != case_close_flush) /* it closes everything itself */
                teardown();
        } else {
            CASES[i].run();
        }
        printf("PASS %s\n", case_name);
        return 0;
    }
    fail("unknown case (see the list at the top of fi_conformance.c)");
}
