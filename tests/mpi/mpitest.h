/* The small harness the MPI tests of tests/mpi share (p2p.c, coll.c).
 *
 * A test program is a sequence of checks. Each check runs on every rank between begin() and
 * end(). begin() names it and arms a watchdog: SIGALRM after MPITEST_CHECK_SECS (default
 * 120 s) prints `FAIL <check> (rank r): watchdog: no progress ..., in <where()>` and exits, so
 * a blocking MPI call that never returns cannot hang the run, and the line says where it hung.
 * fail() records a mismatch with a message on the failing rank. end() sends every rank's
 * verdict to rank 0 over a private communicator (point to point, polled under a deadline
 * longer than the watchdog's, so a rank hanging in the check speaks first), rank 0 prints
 * `PASS <check>` or `FAIL <check>` and releases the others: end() is a barrier, so no message
 * of one check can meet a receive of the next. Waits that can hang inside a check are polled
 * with MPI_Test/MPI_Testall/MPI_Iprobe under an MPI_Wtime deadline (wait_all: half of
 * MPITEST_CHECK_SECS) and abort the job with a FAIL line when it passes. An MPI error on
 * MPI_COMM_WORLD (or a communicator made from it that did not choose MPI_ERRORS_RETURN) is a
 * FAIL line naming the check, then the job ends. finish() returns the exit status: 1 if any
 * check failed on this rank (rank 0: on any rank), else 0. `--only ID,..` / `--skip ID,..`
 * choose groups of checks (want()).
 *
 * Payload bytes come from pattern(): a function of (seed, index) so that every message of a
 * test has distinct contents and a byte in the wrong place is caught. */
#ifndef MPITEST_H
#define MPITEST_H
#define _GNU_SOURCE
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int t_rank, t_size;
static MPI_Comm t_ctl;              /* verdicts travel here, apart from the comms under test */
static const char *volatile t_name; /* the running check, for the watchdog */
static char t_name_buf[200];
static int t_ok;           /* this rank's verdict for the running check */
static int t_failed_local; /* any check failed on this rank */
static int t_failed_any;   /* rank 0: any check failed on any rank */
static int t_checks, t_passed;
static unsigned t_check_secs = 120;
static char t_where[120]; /* where in the running check (set by where()), for the watchdog */
static double t_wait_secs = 60.0;

static void t_watchdog(int sig)
{
    (void)sig;
    char msg[480];
    int n = snprintf(msg, sizeof msg, "FAIL %s (rank %d): watchdog: no progress for %u s%s%s\n",
                     t_name ? t_name : "?", t_rank, t_check_secs, t_where[0] ? ", in " : "", t_where);
    if (n > 0)
        (void)!write(1, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    _exit(3);
}

static void t_args(int argc, char **argv);

/* MPI_COMM_WORLD's error handler (and so of every comm made from it that does not set its
 * own): an MPI error is a FAIL line naming the running check, then the job ends. */
static void t_mpi_error(MPI_Comm *comm, int *code, ...)
{
    (void)comm;
    char es[MPI_MAX_ERROR_STRING] = "";
    int len = 0, cls = -1;
    MPI_Error_string(*code, es, &len);
    MPI_Error_class(*code, &cls);
    printf("FAIL %s (rank %d): an MPI call failed: error class %d (%s)\n",
           t_name ? t_name : "(between checks)", t_rank, cls, es);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 6);
}

static void t_init(int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t_size);
    MPI_Errhandler eh;
    MPI_Comm_create_errhandler(t_mpi_error, &eh);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh);
    MPI_Errhandler_free(&eh);
    MPI_Comm_dup(MPI_COMM_WORLD, &t_ctl);
    const char *s = getenv("MPITEST_CHECK_SECS");
    if (s && atoi(s) > 0)
        t_check_secs = (unsigned)atoi(s);
    t_wait_secs = t_check_secs / 2.0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGALRM, t_watchdog);
    t_args(*argc, *argv);
}

/* Which groups of checks run: argv `--only a,b` or `--skip a,b` (group ids as main() names
 * them), for narrowing down a failure; the default is all. */
static const char *t_only, *t_skip;

static void t_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            t_only = argv[++i];
        else if (strcmp(argv[i], "--skip") == 0 && i + 1 < argc)
            t_skip = argv[++i];
        else {
            if (t_rank == 0)
                fprintf(stderr, "usage: %s [--only ID,ID...] [--skip ID,ID...]\n", argv[0]);
            MPI_Finalize();
            exit(2);
        }
    }
}

static int in_list(const char *list, const char *id)
{
    size_t n = strlen(id);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, id, n) == 0)
            return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* Whether the group `id` runs (the same answer on every rank: same argv). */
static int want(const char *id)
{
    if (t_only && !in_list(t_only, id))
        return 0;
    return !in_list(t_skip, id);
}

static void begin(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_name_buf, sizeof t_name_buf, fmt, ap);
    va_end(ap);
    t_name = t_name_buf;
    t_where[0] = 0;
    t_ok = 1;
    alarm(t_check_secs);
}

/* Say where in the check we are (the watchdog prints it if this is where it hangs). */
static inline void where(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_where, sizeof t_where, fmt, ap);
    va_end(ap);
}

static void fail(const char *fmt, ...)
{
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    /* One line per failing rank, then the verdict from rank 0 in end(). Only the first few
     * mismatches of a check are printed. */
    if (t_ok > -20)
        printf("FAIL %s (rank %d): %s\n", t_name_buf, t_rank, buf);
    t_ok = t_ok > 0 ? 0 : t_ok - 1;
}

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond))                                                                           \
            fail(__VA_ARGS__);                                                                 \
    } while (0)

/* MPI return codes: a failed call is a failed check (the comms under test may have
 * MPI_ERRORS_RETURN; WORLD aborts on error by default). */
#define MPI_OK(call)                                                                           \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != MPI_SUCCESS) {                                                              \
            char es_[MPI_MAX_ERROR_STRING];                                                    \
            int el_ = 0;                                                                       \
            MPI_Error_string(rc_, es_, &el_);                                                  \
            fail("%s returned %d (%s)", #call, rc_, es_);                                      \
        }                                                                                      \
    } while (0)

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        MPI_Abort(MPI_COMM_WORLD, 5);
    }
    return p;
}

static void t_timeout(const char *what, double secs)
{
    printf("FAIL %s (rank %d): timeout: %s not complete after %.1f s\n", t_name_buf, t_rank,
           what, secs);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 4);
}

/* Wait for n requests, polling MPI_Testall, at most `secs` (<= 0: the default). */
static void wait_all_for(int n, MPI_Request *r, MPI_Status *st, double secs, const char *what)
{
    if (secs <= 0)
        secs = t_wait_secs;
    double deadline = MPI_Wtime() + secs;
    int done = 0;
    for (;;) {
        int rc = MPI_Testall(n, r, &done, st);
        if (rc != MPI_SUCCESS) {
            fail("MPI_Testall (%s) returned %d", what, rc);
            return;
        }
        if (done)
            return;
        if (MPI_Wtime() > deadline)
            t_timeout(what, secs);
    }
}

static void wait_all(int n, MPI_Request *r, MPI_Status *st, const char *what)
{
    wait_all_for(n, r, st, 0, what);
}

static void wait_one(MPI_Request *r, MPI_Status *st, const char *what)
{
    wait_all_for(1, r, st ? st : MPI_STATUSES_IGNORE, 0, what);
}

/* Every rank's verdict to rank 0 (on t_ctl, polled), which prints the line. */
static void end(void)
{
    int ok = t_ok > 0;
    if (!ok)
        t_failed_local = 1;
    /* Waiting here for a rank that hangs in the check: wait longer than the watchdog gives the
     * check, so that the hanging rank's watchdog speaks first and names where it hangs. */
    alarm(0);
    double secs = t_check_secs + 10.0;
    if (t_rank == 0) {
        int all = ok, bad_rank = -1, n = t_size - 1;
        int *v = calloc((size_t)t_size, sizeof *v);
        MPI_Request *q = xmalloc(sizeof *q * (size_t)t_size);
        for (int r = 1; r < t_size; r++)
            MPI_Irecv(&v[r], 1, MPI_INT, r, 0, t_ctl, &q[r - 1]);
        wait_all_for(n, q, MPI_STATUSES_IGNORE, secs, "the verdicts of the other ranks");
        for (int r = 1; r < t_size; r++) {
            if (!v[r] && bad_rank < 0)
                bad_rank = r;
            all = all && v[r];
        }
        t_checks++;
        if (all) {
            t_passed++;
            printf("PASS %s\n", t_name_buf);
        } else {
            t_failed_any = 1;
            printf("FAIL %s (first failing rank: %d)\n", t_name_buf, ok ? bad_rank : 0);
        }
        /* release the others: no message of the next check can meet a receive of this one */
        for (int r = 1; r < t_size; r++)
            MPI_Isend(&all, 1, MPI_INT, r, 1, t_ctl, &q[r - 1]);
        wait_all_for(n, q, MPI_STATUSES_IGNORE, secs, "releasing the other ranks");
        free(q);
        free(v);
    } else {
        MPI_Request q[2];
        int all = 0;
        MPI_Isend(&ok, 1, MPI_INT, 0, 0, t_ctl, &q[0]);
        MPI_Irecv(&all, 1, MPI_INT, 0, 1, t_ctl, &q[1]);
        wait_all_for(2, q, MPI_STATUSES_IGNORE, secs, "the verdict exchange with rank 0");
    }
    t_name = NULL;
}

static int finish(const char *prog)
{
    begin("%s: finalize", prog);
    MPI_Comm_free(&t_ctl);
    MPI_Finalize();
    alarm(0);
    if (t_rank == 0)
        printf("%s: %d of %d checks passed on %d ranks%s\n", prog, t_passed, t_checks, t_size,
               t_failed_any ? " -- FAILURES" : "");
    return (t_failed_local || t_failed_any) ? 1 : 0;
}

static inline unsigned char pattern(uint32_t seed, size_t i)
{
    uint32_t x = seed * 2654435761u + (uint32_t)i * 40503u + (uint32_t)(i >> 12) * 977u;
    x ^= x >> 13;
    return (unsigned char)(x ^ (x >> 7));
}

static void fill(void *buf, size_t n, uint32_t seed)
{
    unsigned char *b = buf;
    for (size_t i = 0; i < n; i++)
        b[i] = pattern(seed, i);
}

/* Compare n bytes against pattern(seed); on a mismatch fail() with the first bad offset. */
static int check_bytes(const void *buf, size_t n, uint32_t seed, const char *what)
{
    const unsigned char *b = buf;
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(seed, i)) {
            size_t bad = 0;
            for (size_t j = i; j < n; j++)
                bad += b[j] != pattern(seed, j);
            fail("%s: byte %zu of %zu is 0x%02x, expected 0x%02x (%zu bytes differ)", what, i, n,
                 b[i], pattern(seed, i), bad);
            return 0;
        }
    return 1;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

#endif
