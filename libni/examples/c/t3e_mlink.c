/*
 * t3e_mlink.c — a T3E / SSD-T90 / METRO driver in the seeds' own terms, inside a guest: BAR0
 * mapped through VFIO, one anonymous buffer mapped for the NI's DMA, and nothing else (no
 * libni, no daemon protocol). Two ranks of a partition run it; each uses three register
 * blocks of its NI:
 *
 *   - The E-register window (HMM-148-0 "Messaging Components", ni_t3e.h): rank 1 defines a
 *     message queue (§"Defining a Message Queue": MQCW Tail 1, Limit 3 = room for two
 *     messages, Threshold 0 = never) in segment 1 of its DMA buffer. Rank 0 STOREs 8 words
 *     into E registers 8..15 and issues SEND (§"Sending a Message", Table 1: global index,
 *     centrifuge mask, base address) three times: the first two are accepted (ERS FULL), the
 *     third finds Tail = Limit and is rejected (§"Receiving and Storing a Message", ERS
 *     FULL_SR, Table 2). Rank 1 reads the two messages, drains the queue and rewrites its
 *     MQCW (§"Reading a Message" step 6); rank 0 then issues the SAME command again without
 *     reloading the E registers (Table 2: FULL_SR, "software may want to resend the
 *     message"), now accepted into slot 1.
 *   - The router registers by special routing (SSD-T90 "Special Routing", Figs. 15-16):
 *     rank 0 SGETs R_PHYS of its own router (all deltas 0), SPUTs the peer router's
 *     R_SGET_RTRN (the NOTE after Fig. 16 step 2: the reply comes back by those deltas) and
 *     SGETs the peer router's R_PHYS (physical PE number ZZYYXX, SSD Fig. 11).
 *   - The MLINK block (METRO Ch. 11, §11.2-§11.3, Fig. 11.1, ni_mlink.h): both ranks expose
 *     a 64 KiB window of SRAM, WRITE a 4 KiB pattern into the peer's window, READ it back,
 *     compare every byte and the data checksums of Fig. 11.1, and send a NOOP ("connection
 *     status information which is useful during testing").
 *
 * Synchronisation uses these registers only: a rank polls the peer with MLINK NOOPs until
 * the reply's first status byte shows EXPOSED (the peer exposes its window as the last step
 * of its set-up, so by then its queue and segment are defined too); afterwards the ranks
 * tell each other about steps with MLINK WRITEs of flag words into each other's exposed
 * window. Every wait has a time limit and says what it waits for.
 *
 * Register widths: the E-register page takes 8-byte accesses (4-byte reads too, but writes
 * must be 8 bytes), the MLINK block 4-byte ones only. Both are reached through the mmapped
 * BAR0, where a volatile uint64_t / uint32_t access is one access of that width; pread and
 * pwrite on the VFIO device would do, but the guest kernel's vfio-pci splits 8-byte ones.
 *
 * Register offsets and fields come from ni_t3e.h, ni_mlink.h and ni_lanai.h (the identity
 * registers: rank and partition size), generated from the device's own definitions. Build
 * (static: guests have no libc) and run in the guests of rank 0 and rank 1:
 *
 *   cc -std=c99 -O2 -Wall -Werror -static -I device/abi/include -o t3e_mlink \
 *       libni/examples/c/t3e_mlink.c
 *   t3e_mlink [--deltas PX,PY,PZ,SX,SY,SZ] [--return PX,PY,PZ,SX,SY,SZ]
 *             [--phys-self HEX] [--phys-peer HEX] [--timeout SECONDS]
 *
 *   --deltas     special-routing deltas from rank 0's node to rank 1's (default 0,1,0,0,0,0:
 *                the default torus for two NIs is 1x2x1 with NI 1 at Y = 1)
 *   --return     the deltas rank 1's router sends SGET replies back by (default: each of
 *                --deltas negated)
 *   --phys-self, --phys-peer  the R_PHYS values rank 0 expects (default 000000, 000100)
 *   --timeout    how long to wait for the peer at each step (default 300 s: guests under TCG
 *                boot at very different speeds)
 *   NI_PCI=0000:01:00.0 names the NI (default: the first function with the NI's IDs).
 *
 * Prints "t3e_mlink rank R: OK (...)" and exits 0, or "t3e_mlink rank R: FAIL ..." saying
 * what differed and exits 1.
 */
#define _GNU_SOURCE

#include "ni_lanai.h"
#include "ni_mlink.h"
#include "ni_t3e.h"
#include "ni_vfio.h"

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/pci_regs.h>
#include <linux/vfio.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define NS 1000000000ull
/* A command or an MLINK operation of this NI is carried out by the daemon's fabric poller
 * shortly after it is issued: a minute is generous even under TCG. */
#define CMD_TIMEOUT_NS (60ull * NS)
/* How often a long wait says it is still waiting. */
#define REPORT_NS (10ull * NS)

/* ---- the message queue (HMM-148-0) -------------------------------------------------------- */

/* The DMA buffer: 64 KiB, all of it segment 1. The MQCW sits at offset 0, slot s at 64 s. */
#define SEG 1u
#define SEG_BYTES 0x10000u
#define SLOT 64u
/* Fig. 1: Sig <63>, Tail <62:42>, Limit <41:21>, Threshold <20:0>, slot offsets from the
 * MQCW. Tail starts at 1 ("Normally software initially sets the tail value to 1", slot 0 is
 * the MQCW); Limit 3 leaves slots 1 and 2; Threshold 0 is never reached, since Tail only
 * grows from 1 (and no MQ interrupt is wanted here). */
#define MQCW_SIG ((uint64_t)1 << 63)
#define MQCW_FIELD ((uint64_t)0x1FFFFF)
#define MQCW_MAKE(tail, limit, thr)                                                         \
    (((uint64_t)(tail)&MQCW_FIELD) << 42 | ((uint64_t)(limit)&MQCW_FIELD) << 21 |          \
     ((uint64_t)(thr)&MQCW_FIELD))
#define MQCW_TAIL(w) (((w) >> 42) & MQCW_FIELD)
#define MQCW_LIMIT(w) (((w) >> 21) & MQCW_FIELD)
#define MQCW_THRESHOLD(w) ((w)&MQCW_FIELD)
#define MQ_TAIL 1u
#define MQ_LIMIT 3u
#define MQ_THRESHOLD 0u
#define MESSAGES 3u

/* E registers: the SEND block (8 aligned, "8 contiguous E registers that align on a 64-byte
 * boundary"), SPUT's source and SGET's destination. */
#define E_MSG 8u
#define E_SPUT 0u
#define E_SGET 1u

/* ---- SRAM (MLINK memory) ------------------------------------------------------------------ */

/* SRAM below 64 KiB belongs to the daemon's fast path and the top 1 KiB to the Lanai config
 * Read Mask: everything here lives from 1 MiB up. [WINDOW, WINDOW + WINDOW_SIZE) is exposed
 * to the peer: flag words at its start, the peer's 4 KiB WRITE at DATA_OFF. The rest is this
 * rank's own: the pattern it writes (SRC), where its READ lands (DST), the flag words it
 * sends (STAGE). */
#define WINDOW 0x100000u
#define WINDOW_SIZE 0x10000u
#define DATA_OFF 0x1000u
#define XFER 4096u
#define SRC (WINDOW + WINDOW_SIZE)
#define DST (SRC + 0x2000u)
#define STAGE (SRC + 0x4000u)

/* Flag words, one 8-byte word each at WINDOW + 8 * kind: the value names the step and the
 * sender, so that nothing stale or misdirected can pass for it. */
enum flag { F_REJECTED = 1, F_QUEUE_RESET = 2, F_DONE = 3 };
#define FLAG_VALUE(kind, from) (0x544D4C4B00000000ull | (uint64_t)(kind) << 8 | (from))

static volatile uint8_t *bar; /* BAR0 */
static volatile uint64_t *mq; /* the DMA buffer */
static uint64_t mq_iova;
static uint32_t rank, size, peer;
static uint64_t peer_timeout_ns = 300ull * NS;

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * NS + (uint64_t)t.tv_nsec;
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "t3e_mlink rank %" PRIu32 ": FAIL ", rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static void die(const char *what)
{
    int e = errno;
    fail("%s%s%s", what, e ? ": " : "", e ? strerror(e) : "");
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    printf("t3e_mlink rank %" PRIu32 ": ", rank);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

/* ---- waiting ------------------------------------------------------------------------------ */

struct waiter {
    const char *what;
    uint64_t start, next_report, limit;
};

static void wait_start(struct waiter *w, const char *what, uint64_t limit_ns)
{
    w->what = what;
    w->start = now_ns();
    w->next_report = w->start + REPORT_NS;
    w->limit = limit_ns;
}

/* One more round of a poll loop: fail when the time is up, say so every REPORT_NS, sleep.
 * `describe` says what the loop saw (called only then: it may cost trapped reads). */
static void wait_more(struct waiter *w, unsigned sleep_us, const char *(*describe)(void))
{
    uint64_t t = now_ns();
    if (t - w->start > w->limit)
        fail("timed out after %llu s waiting for %s (%s)",
             (unsigned long long)(w->limit / NS), w->what, describe());
    if (t >= w->next_report) {
        say("still waiting for %s after %llu s (%s)", w->what,
            (unsigned long long)((t - w->start) / NS), describe());
        w->next_report += REPORT_NS;
    }
    usleep(sleep_us);
}

/* ---- register access ---------------------------------------------------------------------- */

/* E-register page: 64-bit little-endian registers, written with 8-byte stores only. */
static uint64_t e_rd(uint64_t off)
{
    return le64toh(*(volatile uint64_t *)(bar + NI_T3E_PAGE + off));
}
static void e_wr(uint64_t off, uint64_t v)
{
    *(volatile uint64_t *)(bar + NI_T3E_PAGE + off) = htole64(v);
}

/* MLINK block: 32-bit registers only (§11.2: "read or write 32-bit values at memory-mapped
 * MLINK addresses"). Link 0 is the only link used. */
static uint32_t ml_rd(uint32_t off)
{
    return le32toh(*(volatile uint32_t *)(bar + NI_MLINK_PAGE + off));
}
static void ml_wr(uint32_t off, uint32_t v)
{
    *(volatile uint32_t *)(bar + NI_MLINK_PAGE + off) = htole32(v);
}
#define LINK0(reg) (NI_MLINK_LINK + 0u * NI_MLINK_LINK_STRIDE + (reg))

/* The identity page (the fast path's trapped page): little-endian 32-bit. */
static uint32_t id_rd(uint32_t off)
{
    return le32toh(*(volatile uint32_t *)(bar + NI_LANAI_ID_PAGE + off));
}

/* SRAM is mmapped (no trap); 8-byte words, since under TCG every access is a callback. */
static uint64_t sram_rd64(uint32_t addr) { return *(volatile uint64_t *)(bar + addr); }
static void sram_wr64(uint32_t addr, uint64_t v) { *(volatile uint64_t *)(bar + addr) = v; }
static void sram_put(uint32_t addr, const uint8_t *src, uint32_t len)
{
    for (uint32_t i = 0; i < len; i += 8) {
        uint64_t w;
        memcpy(&w, src + i, 8);
        sram_wr64(addr + i, w);
    }
}
static void sram_get(uint8_t *dst, uint32_t addr, uint32_t len)
{
    for (uint32_t i = 0; i < len; i += 8) {
        uint64_t w = sram_rd64(addr + i);
        memcpy(dst + i, &w, 8);
    }
}
static void sram_fill(uint32_t addr, uint64_t v, uint32_t len)
{
    for (uint32_t i = 0; i < len; i += 8)
        sram_wr64(addr + i, v);
}

/* ---- names for reports -------------------------------------------------------------------- */

static const char *ers_name(unsigned c)
{
    static const char *n[4] = {
        [NI_T3E_ERS_EMPTY] = "EMPTY",
        [NI_T3E_ERS_FULL_F] = "FULL_F",
        [NI_T3E_ERS_FULL] = "FULL",
        [NI_T3E_ERS_FULL_SR] = "FULL_SR",
    };
    return n[c & 3];
}

static const char *t3e_error_name(unsigned c)
{
    static const char *n[16] = {
        [NI_T3E_ERR_NONE] = "None",
        [NI_T3E_ERR_BAD_OPCODE] = "BadOpcode",
        [NI_T3E_ERR_MISALIGNED] = "Misaligned",
        [NI_T3E_ERR_BUSY] = "Busy",
        [NI_T3E_ERR_STT] = "Stt",
        [NI_T3E_ERR_NO_SUCH_PE] = "NoSuchPe",
        [NI_T3E_ERR_PEER_DOWN] = "PeerDown",
        [NI_T3E_ERR_NO_ROUTE] = "NoRoute",
        [NI_T3E_ERR_BAD_ADDRESS] = "BadAddress",
        [NI_T3E_ERR_BAD_SEGMENT] = "BadSegment",
        [NI_T3E_ERR_OUT_OF_BOUNDS] = "OutOfBounds",
        [NI_T3E_ERR_BAD_MQCW] = "BadMqcw",
        [NI_T3E_ERR_BAD_DELTA] = "BadDelta",
        [NI_T3E_ERR_BAD_ROUTER_REGISTER] = "BadRouterRegister",
        [NI_T3E_ERR_RETURN_PATH] = "ReturnPath",
        [NI_T3E_ERR_LINK_MAPPED_OUT] = "LinkMappedOut",
    };
    return c < 16 && n[c] ? n[c] : "unknown";
}

/* CMD_ERROR: code <15:0>, E register <24:16>, opcode <39:32>, count <63:48>. */
static const char *cmd_error_text(uint64_t v)
{
    static char s[160];
    snprintf(s, sizeof s, "CMD_ERROR 0x%016" PRIx64 ": %s on E%u, opcode 0x%02x, count %u", v,
             t3e_error_name((unsigned)(v & 0xFFFF)), (unsigned)((v >> 16) & 0x1FF),
             (unsigned)((v >> 32) & 0xFF), (unsigned)(v >> 48));
    return s;
}

static const char *ml_state_name(uint32_t s)
{
    static const char *n[6] = {
        [NI_MLINK_ST_IDLE] = "IDLE",
        [NI_MLINK_ST_BUSY] = "BUSY",
        [NI_MLINK_ST_ACK] = "ACK",
        [NI_MLINK_ST_NACK] = "NACK",
        [NI_MLINK_ST_ABORTED] = "ABORTED",
        [NI_MLINK_ST_REFUSED] = "REFUSED",
    };
    return s < 6 && n[s] ? n[s] : "unknown";
}

static const char *ml_reason_name(uint32_t r)
{
    static const char *n[11] = {
        [NI_MLINK_R_NONE] = "none",
        [NI_MLINK_R_HEADER_CHECKSUM] = "header checksum",
        [NI_MLINK_R_DATA_CHECKSUM] = "data checksum",
        [NI_MLINK_R_ADDRESS] = "address",
        [NI_MLINK_R_LENGTH] = "length",
        [NI_MLINK_R_QUEUE_FULL] = "queue full",
        [NI_MLINK_R_NOT_PERMITTED] = "not permitted",
        [NI_MLINK_R_UNREACHABLE] = "unreachable",
        [NI_MLINK_R_TIMEOUT] = "timeout",
        [NI_MLINK_R_BAD_COMMAND] = "bad command",
        [NI_MLINK_R_NOTHING_TO_ABORT] = "nothing to abort",
    };
    return r < 11 && n[r] ? n[r] : "unknown";
}

#define ML_STATE(st) ((st)&NI_MLINK_ST_STATE_MASK)
#define ML_REASON(st) (((st) >> NI_MLINK_ST_REASON_SHIFT) & 0xFu)
#define ML_BYTE0(st) (((st) >> NI_MLINK_ST_BYTES_SHIFT) & 0xFFu)
#define ML_BYTE1(st) (((st) >> (NI_MLINK_ST_BYTES_SHIFT + 8)) & 0xFFu)

/* STATUS = state | reason << 8 | status byte0 << 16 | byte1 << 24. */
static const char *ml_status_text(uint32_t st)
{
    static char s[160];
    snprintf(s, sizeof s, "STATUS 0x%08" PRIx32 ": %s, reason %s, status bytes 0x%02x 0x%02x", st,
             ml_state_name(ML_STATE(st)), ml_reason_name(ML_REASON(st)), ML_BYTE0(st),
             ML_BYTE1(st));
    return s;
}

/* ---- opening the NI ----------------------------------------------------------------------- */

/* Bind the NI to vfio-pci, open it through the container/group API, enable it, map BAR0. */
static void open_bar0(void)
{
    char addr[256];
    int dev =
        ni_vfio_open(addr, sizeof addr, NI_LANAI_PCI_VENDOR_ID, NI_LANAI_PCI_DEVICE_ID, die);

    /* The mapping gives single 8-byte accesses to the E-register page (pwrite through the
     * guest's vfio-pci may split them into two 4-byte ones, which the page refuses). */
    ni_vfio_enable(dev, die);
    bar = ni_vfio_map_bar0(dev, NI_LANAI_BAR_SIZE, NI_MLINK_PAGE + NI_MLINK_PAGE_SIZE,
                           "BAR0 is smaller than the NI's: no E-register page or MLINK block",
                           die);
    printf("t3e_mlink: NI %s, BAR0 mapped\n", addr);
}

/* Memory the NI can DMA into: an anonymous buffer mapped into the NI's IOMMU domain with
 * VFIO_IOMMU_MAP_DMA (pinned there), at IOVA = its address in this process, as libni does.
 * The segment table names it by that IOVA. */
static void map_dma(void)
{
    void *p = mmap(NULL, SEG_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die("mmap of the message-queue buffer");
    memset(p, 0, SEG_BYTES);
    struct vfio_iommu_type1_dma_map map = {
        .argsz = sizeof map,
        .flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
        .vaddr = (uint64_t)(uintptr_t)p,
        .iova = (uint64_t)(uintptr_t)p,
        .size = SEG_BYTES,
    };
    if (ni_vfio_container < 0) {
        errno = 0;
        die("no VFIO container");
    }
    if (ioctl(ni_vfio_container, VFIO_IOMMU_MAP_DMA, &map))
        die("VFIO_IOMMU_MAP_DMA of the message-queue buffer");
    mq = p;
    mq_iova = map.iova;
}

/* ---- E-register commands ------------------------------------------------------------------ */

/* ERS codes (Table 2) of E registers e..e+n-1, reading each ERS word once. */
static void ers_block(unsigned e, unsigned n, unsigned *codes)
{
    uint64_t word = 0;
    unsigned at = ~0u;
    for (unsigned i = 0; i < n; i++) {
        unsigned r = e + i;
        if (r / 32 != at) {
            at = r / 32;
            word = e_rd(NI_T3E_ERS_WORD(r));
        }
        codes[i] = (unsigned)(word >> NI_T3E_ERS_SHIFT(r)) & 3u;
    }
}

static unsigned cur_e, cur_n;
static const char *describe_cmd(void)
{
    static char s[400];
    unsigned codes[8];
    ers_block(cur_e, cur_n, codes);
    int k = snprintf(s, sizeof s, "ERS of E%u..E%u:", cur_e, cur_e + cur_n - 1);
    for (unsigned i = 0; i < cur_n && k < (int)sizeof s; i++)
        k += snprintf(s + k, sizeof s - (size_t)k, " %s", ers_name(codes[i]));
    if (k < (int)sizeof s)
        snprintf(s + k, sizeof s - (size_t)k, "; OUTSTANDING %" PRIu64 ", %s",
                 e_rd(NI_T3E_OUTSTANDING), cmd_error_text(e_rd(NI_T3E_CMD_ERROR)));
    return s;
}

/* Issue `op` on E registers e..e+n-1 (CMD_INDEX/BASE/CENTRIFUGE as the caller left them) and
 * wait for the answer. At issue the block (SEND) or the destination (SGET) or the source
 * (SPUT) goes EMPTY; the ERS codes change again only when the response comes back (HMM-148-0
 * "ERS Codes"), so the command has finished once none of the block is EMPTY. A refusal at
 * issue changes no ERS code, and a failure sets FULL_F: both are told apart from success by
 * CMD_ERROR's count <63:48>, which each of them increments. Returns the block's common ERS
 * code (FULL, or FULL_SR for a rejected SEND). */
static unsigned t3e_issue(const char *what, uint64_t op, unsigned e, unsigned n)
{
    uint64_t err0 = e_rd(NI_T3E_CMD_ERROR);
    e_wr(NI_T3E_CMD_ISSUE, NI_T3E_ISSUE(op, e, 0));
    cur_e = e;
    cur_n = n;
    struct waiter w;
    wait_start(&w, what, CMD_TIMEOUT_NS);
    unsigned codes[8];
    for (;;) {
        ers_block(e, n, codes);
        unsigned empty = 0;
        for (unsigned i = 0; i < n; i++)
            empty += codes[i] == NI_T3E_ERS_EMPTY;
        if (!empty)
            break;
        wait_more(&w, 200, describe_cmd);
    }
    uint64_t err1 = e_rd(NI_T3E_CMD_ERROR);
    if (err1 >> 48 != err0 >> 48)
        fail("%s: %s: %s (ERS of E%u: %s)", what,
             codes[0] == NI_T3E_ERS_FULL_F ? "failed in the network" : "refused at issue",
             cmd_error_text(err1), e, ers_name(codes[0]));
    for (unsigned i = 1; i < n; i++)
        if (codes[i] != codes[0])
            fail("%s: the block's ERS codes differ: E%u %s, E%u %s", what, e, ers_name(codes[0]),
                 e + i, ers_name(codes[i]));
    return codes[0];
}

/* ---- MLINK operations --------------------------------------------------------------------- */

static const char *describe_link(void)
{
    static char s[240];
    snprintf(s, sizeof s, "%s, COMPLETED %" PRIu32, ml_status_text(ml_rd(LINK0(NI_MLINK_STATUS))),
             ml_rd(LINK0(NI_MLINK_COMPLETED)));
    return s;
}

/* Launch one operation on link 0 and wait for it to finish; returns STATUS. A launch while
 * the link is BUSY would be ignored, so first wait for the previous one (every operation
 * here is waited for, so this is only a guard). COMPLETED counts every finished operation
 * (ACK, NACK, ABORTED, REFUSED), so its change marks this one's end. */
static uint32_t mlink_run(const char *what, uint32_t cmd, uint32_t target, uint32_t remote,
                          uint32_t local, uint32_t len)
{
    struct waiter w;
    wait_start(&w, "link 0 to be free", CMD_TIMEOUT_NS);
    while (ML_STATE(ml_rd(LINK0(NI_MLINK_STATUS))) == NI_MLINK_ST_BUSY)
        wait_more(&w, 200, describe_link);
    ml_wr(LINK0(NI_MLINK_TARGET), target);
    ml_wr(LINK0(NI_MLINK_REMOTE), remote);
    ml_wr(LINK0(NI_MLINK_LOCAL), local);
    ml_wr(LINK0(NI_MLINK_LEN), len);
    uint32_t before = ml_rd(LINK0(NI_MLINK_COMPLETED));
    ml_wr(LINK0(NI_MLINK_COMMAND), cmd);
    wait_start(&w, what, CMD_TIMEOUT_NS);
    while (ml_rd(LINK0(NI_MLINK_COMPLETED)) == before)
        wait_more(&w, 200, describe_link);
    return ml_rd(LINK0(NI_MLINK_STATUS));
}

static void expect_ack(const char *what, uint32_t st)
{
    if (ML_STATE(st) != NI_MLINK_ST_ACK)
        fail("%s: %s", what, ml_status_text(st));
}

/* Fig. 11.1: the header checksum covers the opcode-and-length token and the three address
 * bytes: opcode, len little-endian in two bytes, remote address in three. */
static uint16_t header_checksum(uint32_t op, uint32_t len, uint32_t remote)
{
    const unsigned char h[6] = {(unsigned char)op,           (unsigned char)len,
                                (unsigned char)(len >> 8),   (unsigned char)remote,
                                (unsigned char)(remote >> 8), (unsigned char)(remote >> 16)};
    return ni_mlink_checksum(h, sizeof h);
}

/* CHECKSUMS = header checksum | data checksum << 16 (the data written, or the READ reply's). */
static void expect_checksums(const char *what, uint32_t op, uint32_t len, uint32_t remote,
                             uint16_t data)
{
    uint32_t got = ml_rd(LINK0(NI_MLINK_CHECKSUMS));
    uint32_t want = header_checksum(op, len, remote) | (uint32_t)data << 16;
    if (got != want)
        fail("%s: CHECKSUMS 0x%08" PRIx32 " (header 0x%04x, data 0x%04x), expected 0x%08" PRIx32
             " (header 0x%04x, data 0x%04x = ni_mlink_checksum of the %u bytes)",
             what, got, got & 0xFFFFu, got >> 16, want, want & 0xFFFFu, want >> 16, XFER);
}

static void send_flag(enum flag kind)
{
    char what[80];
    snprintf(what, sizeof what, "MLINK WRITE of flag %u to rank %" PRIu32, kind, peer);
    sram_wr64(STAGE + 8u * kind, FLAG_VALUE(kind, rank));
    __sync_synchronize();
    uint32_t st =
        mlink_run(what, NI_MLINK_CMD_WRITE, peer, WINDOW + 8u * kind, STAGE + 8u * kind, 1);
    expect_ack(what, st);
}

static unsigned cur_flag;
static const char *describe_flag(void)
{
    static char s[120];
    snprintf(s, sizeof s, "flag word %u at SRAM 0x%x is 0x%016" PRIx64, cur_flag,
             WINDOW + 8u * cur_flag, sram_rd64(WINDOW + 8u * cur_flag));
    return s;
}

/* Wait for the peer's MLINK WRITE of flag `kind` into this rank's window. */
static void wait_flag(enum flag kind, const char *what)
{
    uint64_t want = FLAG_VALUE(kind, peer);
    struct waiter w;
    cur_flag = kind;
    wait_start(&w, what, peer_timeout_ns);
    for (;;) {
        uint64_t v = sram_rd64(WINDOW + 8u * kind);
        if (v == want)
            return;
        if (v != 0)
            fail("waiting for %s: flag word %u is 0x%016" PRIx64 ", expected 0 or 0x%016" PRIx64,
                 what, kind, v, want);
        wait_more(&w, 1000, describe_flag);
    }
}

/* ---- set-up ------------------------------------------------------------------------------- */

/* Segment 1 = the DMA buffer with every access (Table 1's GVA: segment <37:32>, offset
 * <30:0>); the MQCW at its offset 0 (§"Defining a Message Queue"). The segment table is a
 * plain read-write register file: read back to check the 8-byte writes took. */
static void define_queue(void)
{
    const uint64_t base = NI_T3E_SEGMENT + NI_T3E_SEGMENT_STRIDE * SEG;
    const uint64_t lenacc = (uint64_t)SEG_BYTES | NI_T3E_SEG_REMOTE_READ |
                            NI_T3E_SEG_REMOTE_WRITE | NI_T3E_SEG_MESSAGE_QUEUE;
    mq[0] = MQCW_MAKE(MQ_TAIL, MQ_LIMIT, MQ_THRESHOLD);
    __sync_synchronize(); /* the MQCW is in memory before the segment can be used */
    e_wr(base, mq_iova);
    e_wr(base + 8, lenacc);
    uint64_t b = e_rd(base), l = e_rd(base + 8);
    if (b != mq_iova || l != lenacc)
        fail("segment %u reads back base 0x%" PRIx64 " len|access 0x%016" PRIx64
             ", written 0x%" PRIx64 " and 0x%016" PRIx64,
             SEG, b, l, mq_iova, lenacc);
    say("segment %u: IOVA 0x%" PRIx64 ", %u bytes, remote read/write, message queue; MQCW "
        "0x%016" PRIx64 " (Tail %u, Limit %u, Threshold %u)",
        SEG, mq_iova, SEG_BYTES, mq[0], MQ_TAIL, MQ_LIMIT, MQ_THRESHOLD);
}

/* The MLINK window: flags and the peer's data area cleared first, then EXPOSE_BASE/SIZE.
 * Exposing is the last step of the set-up: a peer that sees EXPOSED in a NOOP reply may
 * use everything (queue, segment, window). */
static void expose_window(void)
{
    sram_fill(WINDOW, 0, WINDOW_SIZE);
    sram_fill(STAGE, 0, 64);
    __sync_synchronize();
    ml_wr(NI_MLINK_EXPOSE_BASE, WINDOW);
    ml_wr(NI_MLINK_EXPOSE_SIZE, WINDOW_SIZE);
    uint32_t b = ml_rd(NI_MLINK_EXPOSE_BASE), s = ml_rd(NI_MLINK_EXPOSE_SIZE);
    if (b != WINDOW || s != WINDOW_SIZE)
        fail("EXPOSE_BASE/SIZE read back 0x%" PRIx32 "/0x%" PRIx32 ", written 0x%x/0x%x", b, s,
             WINDOW, WINDOW_SIZE);
    say("MLINK window exposed: SRAM 0x%x, %u bytes", WINDOW, WINDOW_SIZE);
}

static uint32_t last_noop;
static const char *describe_noop(void)
{
    return ml_status_text(last_noop);
}

/* §11.3: "NOOP ... does return connection status information". Poll the peer until its
 * reply's first status byte shows EXPOSED. Before the peer's guest has opened its NI the
 * launch is refused as UNREACHABLE (no client); after, the reply shows PRESENT without
 * EXPOSED until its set-up is complete. Anything else is an error. */
static void wait_for_peer(void)
{
    struct waiter w;
    char what[80];
    unsigned tries = 0;
    snprintf(what, sizeof what, "rank %" PRIu32 " to expose its MLINK window", peer);
    wait_start(&w, what, peer_timeout_ns);
    for (;;) {
        uint32_t st = mlink_run("MLINK NOOP", NI_MLINK_CMD_NOOP, peer, 0, 0, 0);
        last_noop = st;
        tries++;
        if (ML_STATE(st) == NI_MLINK_ST_ACK && (ML_BYTE0(st) & NI_MLINK_S0_EXPOSED))
            break;
        int waiting = (ML_STATE(st) == NI_MLINK_ST_REFUSED &&
                       ML_REASON(st) == NI_MLINK_R_UNREACHABLE) ||
                      (ML_STATE(st) == NI_MLINK_ST_NACK && ML_REASON(st) == NI_MLINK_R_TIMEOUT) ||
                      ML_STATE(st) == NI_MLINK_ST_ACK;
        if (!waiting)
            fail("NOOP to rank %" PRIu32 ": %s", peer, ml_status_text(st));
        wait_more(&w, 100000, describe_noop);
    }
    say("rank %" PRIu32 " is up (NOOP %u: %s)", peer, tries, ml_status_text(last_noop));
}

/* ---- MLINK WRITE, READ, NOOP ---------------------------------------------------------------- */

/* The 4 KiB pattern rank r writes: depends on the rank, so data in the wrong window shows. */
static uint8_t pattern(uint32_t r, uint32_t i)
{
    uint32_t x = (r + 1u) * 0x9E3779B1u ^ i * 0x85EBCA77u;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 13;
    return (uint8_t)x;
}

static void compare(const char *what, const uint8_t *got, uint32_t from_rank)
{
    uint32_t bad = 0, first = 0;
    for (uint32_t i = 0; i < XFER; i++)
        if (got[i] != pattern(from_rank, i) && bad++ == 0)
            first = i;
    if (bad)
        fail("%s: %" PRIu32 " of %u bytes differ; the first, byte %" PRIu32 ", is 0x%02x, "
             "expected 0x%02x",
             what, bad, XFER, first, got[first], pattern(from_rank, first));
}

static void mlink_exchange(void)
{
    static uint8_t mine[XFER], got[XFER];
    const uint32_t remote = WINDOW + DATA_OFF, len = XFER / 8;
    for (uint32_t i = 0; i < XFER; i++)
        mine[i] = pattern(rank, i);
    uint16_t data = ni_mlink_checksum(mine, XFER);
    sram_put(SRC, mine, XFER);
    __sync_synchronize();

    /* WRITE: SRAM at SRC -> the peer's window (§11.3, Fig. 11.1 WRITE len addr data). */
    uint32_t st = mlink_run("MLINK WRITE", NI_MLINK_CMD_WRITE, peer, remote, SRC, len);
    expect_ack("MLINK WRITE of 4096 bytes", st);
    expect_checksums("MLINK WRITE", NI_MLINK_CMD_WRITE, len, remote, data);
    say("MLINK WRITE of %u bytes to rank %" PRIu32 " SRAM 0x%x: %s, CHECKSUMS 0x%08" PRIx32, XFER,
        peer, remote, ml_status_text(st), ml_rd(LINK0(NI_MLINK_CHECKSUMS)));

    /* READ it back into SRAM at DST, cleared to something the pattern is not. */
    sram_fill(DST, 0xEEEEEEEEEEEEEEEEull, XFER);
    __sync_synchronize();
    st = mlink_run("MLINK READ", NI_MLINK_CMD_READ, peer, remote, DST, len);
    expect_ack("MLINK READ of 4096 bytes", st);
    expect_checksums("MLINK READ", NI_MLINK_CMD_READ, len, remote, data);
    sram_get(got, DST, XFER);
    compare("MLINK READ back from the peer's window", got, rank);
    if (ni_mlink_checksum(got, XFER) != data)
        fail("MLINK READ: the data's checksum is 0x%04x, expected 0x%04x",
             ni_mlink_checksum(got, XFER), data);
    say("MLINK READ of %u bytes from rank %" PRIu32 " SRAM 0x%x into SRAM 0x%x: %s, CHECKSUMS "
        "0x%08" PRIx32 ", every byte as written",
        XFER, peer, remote, DST, ml_status_text(st), ml_rd(LINK0(NI_MLINK_CHECKSUMS)));

    /* NOOP: the peer's state in the reply's status bytes (byte0 bits, byte1 its reason). */
    st = mlink_run("MLINK NOOP", NI_MLINK_CMD_NOOP, peer, 0, 0, 0);
    expect_ack("MLINK NOOP", st);
    say("MLINK NOOP to rank %" PRIu32 ": status byte0 0x%02x (%s%s%s%s%s), byte1 0x%02x; "
        "CHECKSUMS 0x%08" PRIx32,
        peer, ML_BYTE0(st), ML_BYTE0(st) & NI_MLINK_S0_PRESENT ? "PRESENT " : "",
        ML_BYTE0(st) & NI_MLINK_S0_HELD ? "HELD " : "",
        ML_BYTE0(st) & NI_MLINK_S0_QUEUE_FULL ? "QUEUE_FULL " : "",
        ML_BYTE0(st) & NI_MLINK_S0_BOOT_ENABLED ? "BOOT_ENABLED " : "",
        ML_BYTE0(st) & NI_MLINK_S0_EXPOSED ? "EXPOSED" : "", ML_BYTE1(st),
        ml_rd(LINK0(NI_MLINK_CHECKSUMS)));
    const uint32_t want0 = NI_MLINK_S0_PRESENT | NI_MLINK_S0_EXPOSED;
    const uint32_t never0 = NI_MLINK_S0_HELD | NI_MLINK_S0_QUEUE_FULL;
    if ((ML_BYTE0(st) & want0) != want0 || (ML_BYTE0(st) & never0) || ML_BYTE1(st) != 0)
        fail("MLINK NOOP: status byte0 0x%02x, byte1 0x%02x: expected PRESENT and EXPOSED, "
             "not HELD or QUEUE_FULL, and reason 0",
             ML_BYTE0(st), ML_BYTE1(st));
}

/* ---- the message queue: rank 0 sends --------------------------------------------------------- */

/* Word i of message m: readable high half ("T3", message, word), hashed low half. */
static uint64_t msg_word(unsigned m, unsigned i)
{
    uint32_t x = (m * 8u + i + 1u) * 0x9E3779B1u;
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    return (uint64_t)(0x54330000u | m << 8 | i) << 32 | x;
}

static void send_messages(unsigned *sends, unsigned *rejected, unsigned *resent)
{
    /* Table 1: the global index holds the destination PE in the bits the centrifuge mask
     * selects (CENTRIFUGE_DEFAULT: <63:52>) and the index offset in the others (0 here);
     * GVA = base + offset = the MQCW's GVA in the destination: segment 1, offset 0. */
    e_wr(NI_T3E_CMD_CENTRIFUGE, NI_T3E_CENTRIFUGE_DEFAULT);
    e_wr(NI_T3E_CMD_INDEX, (uint64_t)peer << 52);
    e_wr(NI_T3E_CMD_BASE, NI_T3E_GVA(SEG, 0));
    for (unsigned m = 0; m < MESSAGES; m++) {
        char what[80];
        /* §"Sending a Message": STORE the 8 words into E_MSG..E_MSG+7, then SEND. */
        for (unsigned i = 0; i < 8; i++)
            e_wr(NI_T3E_E_REGS + 8ull * (E_MSG + i), msg_word(m, i));
        snprintf(what, sizeof what, "SEND of message %u to rank %" PRIu32, m, peer);
        unsigned code = t3e_issue(what, NI_T3E_OP_SEND, E_MSG, 8);
        (*sends)++;
        unsigned want = m < MQ_LIMIT - MQ_TAIL ? NI_T3E_ERS_FULL : NI_T3E_ERS_FULL_SR;
        if (code != want)
            fail("%s: ERS %s, expected %s (%s)", what, ers_name(code), ers_name(want),
                 want == NI_T3E_ERS_FULL ? "room in the queue" : "Tail = Limit: rejected");
        say("%s: ERS %s%s", what, ers_name(code),
            code == NI_T3E_ERS_FULL_SR ? " (queue full: message not accepted)" : " (accepted)");
        if (code == NI_T3E_ERS_FULL_SR)
            (*rejected)++;
    }
    /* A rejected SEND leaves its data in the E registers (Table 2, FULL_SR): check. */
    for (unsigned i = 0; i < 8; i++) {
        uint64_t v = e_rd(NI_T3E_E_REGS + 8ull * (E_MSG + i));
        if (v != msg_word(MESSAGES - 1, i))
            fail("after the rejected SEND, E%u holds 0x%016" PRIx64 ", expected 0x%016" PRIx64,
                 E_MSG + i, v, msg_word(MESSAGES - 1, i));
    }
    /* Rank 1 resets its queue only once it knows the third SEND was rejected: earlier, the
     * third could find room and the rejection would not happen. */
    send_flag(F_REJECTED);
    wait_flag(F_QUEUE_RESET, "rank 1 to drain and reset its queue");
    /* Send again: the same CMD_ISSUE, E registers and arguments untouched. */
    char what[80];
    snprintf(what, sizeof what, "SEND of message %u again (no reload)", MESSAGES - 1);
    unsigned code = t3e_issue(what, NI_T3E_OP_SEND, E_MSG, 8);
    (*resent)++;
    if (code != NI_T3E_ERS_FULL)
        fail("%s: ERS %s, expected FULL (the queue was reset)", what, ers_name(code));
    say("%s: ERS %s (accepted)", what, ers_name(code));
}

/* ---- the message queue: rank 1 receives ------------------------------------------------------ */

static uint64_t mqcw_read(void)
{
    uint64_t w = mq[0];
    __sync_synchronize(); /* the device stores a message before it moves Tail */
    return w;
}

static const char *describe_mq(void)
{
    static char s[120];
    uint64_t w = mq[0];
    snprintf(s, sizeof s, "MQCW 0x%016" PRIx64 ": Sig %u, Tail %" PRIu64 ", Limit %" PRIu64
             ", Threshold %" PRIu64,
             w, (unsigned)(w >> 63), MQCW_TAIL(w), MQCW_LIMIT(w), MQCW_THRESHOLD(w));
    return s;
}

/* The MQCW as only the device changes it: Limit and Threshold kept, Sig never set
 * (Threshold 0 is never reached), Tail within [1, Limit]. */
static void check_mqcw(uint64_t w)
{
    if (MQCW_LIMIT(w) != MQ_LIMIT || MQCW_THRESHOLD(w) != MQ_THRESHOLD || (w & MQCW_SIG) ||
        MQCW_TAIL(w) < MQ_TAIL || MQCW_TAIL(w) > MQ_LIMIT)
        fail("the MQCW is 0x%016" PRIx64 " (Sig %u, Tail %" PRIu64 ", Limit %" PRIu64
             ", Threshold %" PRIu64 "): expected Sig 0, Tail in [%u, %u], Limit %u, "
             "Threshold %u",
             w, (unsigned)(w >> 63), MQCW_TAIL(w), MQCW_LIMIT(w), MQCW_THRESHOLD(w), MQ_TAIL,
             MQ_LIMIT, MQ_LIMIT, MQ_THRESHOLD);
}

static void wait_tail(uint64_t tail, const char *what)
{
    struct waiter w;
    wait_start(&w, what, peer_timeout_ns);
    for (;;) {
        uint64_t v = mqcw_read();
        check_mqcw(v);
        if (MQCW_TAIL(v) == tail)
            return;
        if (MQCW_TAIL(v) > tail)
            fail("waiting for %s: Tail is %" PRIu64 ", beyond %" PRIu64, what, MQCW_TAIL(v), tail);
        wait_more(&w, 1000, describe_mq);
    }
}

/* Slot `slot` holds message m, bit for bit (or is empty when m < 0). */
static void check_slot(unsigned slot, int m)
{
    for (unsigned i = 0; i < 8; i++) {
        uint64_t got = mq[slot * SLOT / 8 + i];
        uint64_t want = m < 0 ? 0 : msg_word((unsigned)m, i);
        if (got != want) {
            if (m < 0)
                fail("slot %u word %u is 0x%016" PRIx64 ": expected the slot empty (0)", slot, i,
                     got);
            fail("slot %u word %u is 0x%016" PRIx64 ", expected 0x%016" PRIx64
                 " (message %d word %u)",
                 slot, i, got, want, m, i);
        }
    }
}

static void receive_messages(unsigned *received, unsigned *resets)
{
    /* Two messages fill the queue: Tail 1 -> 3 = Limit. */
    wait_tail(MQ_LIMIT, "messages 0 and 1 from rank 0 (Tail 3)");
    check_slot(1, 0);
    check_slot(2, 1);
    *received += 2;
    say("messages 0 and 1 in slots 1 and 2, bit for bit (%s)", describe_mq());
    wait_flag(F_REJECTED, "rank 0's third SEND to be rejected");
    /* Rejected: nothing stored past the Limit, the MQCW unchanged. */
    check_mqcw(mqcw_read());
    if (MQCW_TAIL(mq[0]) != MQ_LIMIT)
        fail("after the rejection, %s (expected Tail %u)", describe_mq(), MQ_LIMIT);
    check_slot(MQ_LIMIT, -1);
    /* Drain (the head pointer is software's: the two messages are read) and reset the queue
     * by rewriting the MQCW (§"Reading a Message" step 6 swaps it atomically; rank 0 is
     * waiting for our flag, so nothing can arrive meanwhile and a plain store does). */
    for (unsigned i = 0; i < 2 * SLOT / 8; i++)
        mq[SLOT / 8 + i] = 0;
    __sync_synchronize();
    mq[0] = MQCW_MAKE(MQ_TAIL, MQ_LIMIT, MQ_THRESHOLD);
    __sync_synchronize();
    (*resets)++;
    say("queue drained and reset: %s", describe_mq());
    send_flag(F_QUEUE_RESET);
    wait_tail(MQ_TAIL + 1, "message 2 sent again by rank 0 (Tail 2)");
    check_slot(1, MESSAGES - 1);
    check_slot(2, -1);
    (*received)++;
    say("message 2, sent again without reloading, in slot 1 bit for bit (%s)", describe_mq());
}

/* ---- special routing (SSD-T90) ------------------------------------------------------------- */

static uint64_t deltas_of(const int d[6])
{
    return NI_T3E_DELTAS(d[0], d[1], d[2], d[3], d[4], d[5]);
}

static const char *deltas_text(const int d[6])
{
    static char s[2][64];
    static int k;
    k ^= 1;
    snprintf(s[k], sizeof s[k], "(%+d,%+d,%+d,%+d,%+d,%+d)", d[0], d[1], d[2], d[3], d[4], d[5]);
    return s[k];
}

/* Figure 15: STORE the value into an E register, then SPUT it to the router register at
 * CMD_BASE of the router the deltas in CMD_INDEX reach. */
static void sput(const char *what, const int d[6], uint64_t reg, uint64_t value)
{
    e_wr(NI_T3E_E_REGS + 8ull * E_SPUT, value);
    e_wr(NI_T3E_CMD_INDEX, deltas_of(d));
    e_wr(NI_T3E_CMD_BASE, reg);
    unsigned code = t3e_issue(what, NI_T3E_OP_SPUT, E_SPUT, 1);
    if (code != NI_T3E_ERS_FULL)
        fail("%s: ERS %s, expected FULL", what, ers_name(code));
    say("%s: SPUT deltas %s register 0x%03" PRIx64 " = 0x%016" PRIx64 ": ERS %s", what,
        deltas_text(d), reg, value, ers_name(code));
}

/* Figure 16: SGET into an E register (reply by the target router's R_SGET_RTRN), then LOAD. */
static uint64_t sget(const char *what, const int d[6], uint64_t reg)
{
    e_wr(NI_T3E_CMD_INDEX, deltas_of(d));
    e_wr(NI_T3E_CMD_BASE, reg);
    unsigned code = t3e_issue(what, NI_T3E_OP_SGET, E_SGET, 1);
    if (code != NI_T3E_ERS_FULL)
        fail("%s: ERS %s, expected FULL", what, ers_name(code));
    return e_rd(NI_T3E_E_REGS + 8ull * E_SGET);
}

static int peer_d[6] = {0, 1, 0, 0, 0, 0}, return_d[6];
static int return_given;
static uint64_t phys_self = 0x000000, phys_peer = 0x000100;

static void special_routing(unsigned *sgets)
{
    static const int here[6] = {0, 0, 0, 0, 0, 0};
    /* The routers belong to the network and keep their registers across NI resets: make
     * sure this router's own reply path is empty (deltas 0: the reply stays here). */
    sput("own router's R_SGET_RTRN", here, NI_T3E_R_SGET_RTRN, 0);
    uint64_t v = sget("SGET of own router's R_PHYS", here, NI_T3E_R_PHYS);
    (*sgets)++;
    say("R_PHYS of own router (deltas %s): %06" PRIx64, deltas_text(here), v);
    if (v != phys_self)
        fail("own router's R_PHYS is %06" PRIx64 ", expected %06" PRIx64, v, phys_self);

    /* The NOTE after Fig. 16 step 2: the peer router answers by its R_SGET_RTRN, which
     * software writes first. */
    sput("rank 1's router's R_SGET_RTRN", peer_d, NI_T3E_R_SGET_RTRN, deltas_of(return_d));
    v = sget("SGET of rank 1's router's R_PHYS", peer_d, NI_T3E_R_PHYS);
    (*sgets)++;
    say("R_PHYS of rank 1's router (deltas %s, return %s): %06" PRIx64, deltas_text(peer_d),
        deltas_text(return_d), v);
    if (v != phys_peer)
        fail("rank 1's router's R_PHYS is %06" PRIx64 ", expected %06" PRIx64, v, phys_peer);
}

/* ---- main ----------------------------------------------------------------------------------- */

static const char *describe_id(void)
{
    static char s[80];
    snprintf(s, sizeof s, "ID page: rank %" PRIu32 ", size %" PRIu32, id_rd(NI_LANAI_ID_RANK),
             id_rd(NI_LANAI_ID_SIZE));
    return s;
}

static void parse_deltas(const char *s, int d[6], const char *opt)
{
    char *end;
    for (int i = 0; i < 6; i++) {
        long v = strtol(s, &end, 0);
        if (end == s || v < -127 || v > 127 || (i < 5 && *end != ',') || (i == 5 && *end))
            fail("%s: expected six deltas in [-127, 127] separated by commas, got '%s'", opt, s);
        d[i] = (int)v;
        s = end + 1;
    }
}

static void usage(void)
{
    fail("usage: t3e_mlink [--deltas PX,PY,PZ,SX,SY,SZ] [--return PX,PY,PZ,SX,SY,SZ] "
         "[--phys-self HEX] [--phys-peer HEX] [--timeout SECONDS]");
}

static void parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--deltas"))
            parse_deltas(v, peer_d, a);
        else if (!strcmp(a, "--return"))
            parse_deltas(v, return_d, a), return_given = 1;
        else if (!strcmp(a, "--phys-self"))
            phys_self = strtoull(v, NULL, 16);
        else if (!strcmp(a, "--phys-peer"))
            phys_peer = strtoull(v, NULL, 16);
        else if (!strcmp(a, "--timeout"))
            peer_timeout_ns = strtoull(v, NULL, 0) * NS;
        else
            usage();
    }
    /* Without a return path given: every delta negated (the same dimensions in the same
     * order, back), which on a torus without map-outs ends where the request began. */
    if (!return_given)
        for (int i = 0; i < 6; i++)
            return_d[i] = -peer_d[i];
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    parse_args(argc, argv);
    open_bar0();

    /* The identity registers: rank and partition size, set when the NI joined a partition. */
    struct waiter w;
    wait_start(&w, "the NI to be given a partition (ID page size 0)", peer_timeout_ns);
    while (!(size = id_rd(NI_LANAI_ID_SIZE)))
        wait_more(&w, 1000, describe_id);
    rank = id_rd(NI_LANAI_ID_RANK);
    printf("t3e_mlink: rank %" PRIu32 " of %" PRIu32 "\n", rank, size);
    if (size < 2)
        fail("a partition of %" PRIu32 ": the test needs ranks 0 and 1", size);
    if (rank >= 2) {
        say("OK (not rank 0 or 1: nothing to do)");
        return 0;
    }
    peer = 1 - rank;

    map_dma();
    define_queue();
    expose_window();
    wait_for_peer();

    mlink_exchange();

    unsigned sends = 0, rejected = 0, resent = 0, sgets = 0, received = 0, resets = 0;
    if (rank == 0) {
        send_messages(&sends, &rejected, &resent);
        special_routing(&sgets);
    } else {
        receive_messages(&received, &resets);
    }

    /* The end: each rank tells the other it has finished with it, and leaves only once the
     * peer has said the same (closing the NI resets it: a peer still using this rank's
     * window or queue would find them gone). */
    send_flag(F_DONE);
    wait_flag(F_DONE, "the peer to finish");
    /* The peer's WRITE went before its DONE: its pattern is in this rank's window. */
    static uint8_t got[XFER];
    sram_get(got, WINDOW + DATA_OFF, XFER);
    compare("the peer's MLINK WRITE into this rank's window", got, peer);
    /* No message beyond those expected reached this rank's queue. */
    uint64_t q = mqcw_read();
    check_mqcw(q);
    uint64_t want_tail = rank == 0 ? MQ_TAIL : MQ_TAIL + 1;
    if (MQCW_TAIL(q) != want_tail)
        fail("at the end, %s: expected Tail %" PRIu64, describe_mq(), want_tail);
    /* Every E-register command answered. */
    uint64_t outstanding = e_rd(NI_T3E_OUTSTANDING), puts = e_rd(NI_T3E_PUT_COUNT);
    if (outstanding || puts)
        fail("at the end, OUTSTANDING %" PRIu64 " and PUT_COUNT %" PRIu64 ": expected 0 and 0",
             outstanding, puts);

    if (rank == 0)
        say("OK (sends %u, rejected %u, resent %u, sget %u, mlink write+read %u bytes)", sends,
            rejected, resent, sgets, XFER);
    else
        say("OK (received %u, queue resets %u, mlink write+read %u bytes)", received, resets,
            XFER);
    return 0;
}
