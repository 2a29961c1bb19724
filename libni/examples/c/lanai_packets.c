/*
 * lanai_packets.c — a Lanai X "firmware" in the spec's own terms, inside a guest: BAR0 mapped
 * through VFIO and nothing else (no libni, no daemon protocol). The loop is Myricom's Lanai X
 * rev 1.1 App. C message-passing example, for the one port that has a cable (port 0):
 *
 *   - §15, App. C initialize_dispatch: select blocks written through DISPATCH_ISR_ON/_OFF and
 *     DISPATCH_STATE_ON/_OFF then DISPATCH_CONFIG; the main loop writes DISPATCH_STATE and
 *     calls dispatch_table[DISPATCH_INDEX/4], with App. C's handlers no_backup_buffer0,
 *     packet_received0, packet_sent0 and free_to_send0, and software state bits for fairness
 *     and for events a handler cannot act on yet.
 *   - §13, App. C initialize_channels: SEND_CONFIG/RECV_CONFIG (CRC-8 and CRC-32) and MODE
 *     through PORT_ADDR/PORT_DATA; wait for ISR.P0_LINK_READY (§14).
 *   - §9: the regular receive channel (RPL_CONFIG, buffers issued through P0_RB on
 *     P0_NO_BACKUP, RPDs read from the RPL at the end of the buffer, consumed by writing
 *     P0_RECV_COUNT, DESC_LAST moves to the next buffer); §9.6: every packet is checked
 *     (ZEROES >= 5 for Myrinet's CRC-32 + CRC-8, no INVALID/LINK/MARKED_BAD, length, and
 *     every byte).
 *   - §10: packets as two SPDs written to P0_SEND, a one-byte ROUTE segment then the payload
 *     with DESC_LAST (§10.2 NOTE: 8-byte-aligned pointers, lengths multiples of 8, >= 16);
 *     P0_SEND_FREE_LIMIT so that SEND_READY means room for both; P0_SEND_COUNT reclaimed on
 *     P0_PACKET_SENT.
 *   - The network: one crossbar per partition, crossbar port r = rank r; the route byte is
 *     NI_LANAI_ROUTE_BYTE | destination. The crossbar drops a packet whose destination port
 *     is not enabled (RPL_CONFIG.PORT_ENABLE clear: that guest's program has not started),
 *     and nothing in the spec or BAR0 tells one NI that another is up. So a rank sends no
 *     data before it knows: each rank, once its channel is enabled and holds buffers, sends
 *     HELLO packets to its predecessor every 50 ms (IT0 and ISR.TIME_INT0 through dispatch,
 *     as App. C's initialize_PLLs uses IT0) until its first data packet arrives; a rank
 *     starts sending data on its successor's first HELLO. HELLOs sent into a port not yet
 *     enabled are lost by design; the program reports how many it sent and received.
 *
 * Rank r sends PACKETS packets to rank (r+1) % size and receives PACKETS from rank
 * (r-1) % size. Payloads are 16..1024 bytes (multiples of 8), {u32 sender, u32 sequence}
 * big-endian then a pattern of (sender, sequence, byte index); the receiver checks sender,
 * order and every byte.
 *
 * Register offsets and fields come from ni_lanai.h, generated from the device's own
 * definitions. Build (static: guests have no libc) and run in each guest of a partition:
 *
 *   cc -std=c99 -O2 -Wall -Werror -static -I device/abi/include -o lanai_packets \
 *       libni/examples/c/lanai_packets.c
 *   lanai_packets [PACKETS]              (default 200; NI_PCI=0000:01:00.0 names the NI,
 *                                         default: the first function with the NI's IDs)
 *
 * Prints "lanai-packets: hellos rank R: S sent, G received" (the start-up packets, which an
 * accounting of the NI's counters needs), then "lanai-packets: ok ..." and exits 0; or
 * "lanai-packets: FAIL ..." and exits 1.
 */
#define _GNU_SOURCE

#include "ni_lanai.h"
#include "ni_vfio.h"

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
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

#define TIMEOUT_NS (120ull * 1000000000ull)
/* A rank that has sent and received everything keeps its channels serviced this long before
 * it leaves (closing the NI resets it): a packet beyond those expected is then caught as a
 * failure instead of going unread, and a peer still finishing finds this port enabled. */
#define LINGER_NS (2ull * 1000000000ull)

/* App. C's receive channel: 64 KiB buffers of 64 B blocks (so 1024 RPDs, an 8 KiB RPL per
 * buffer), 8 KiB maximum packet (>= 1024 + 5 here), 32 KiB stop size (§9.3: the worst-case
 * utilisation of 64 B blocks). Codes as in §9.7: sizes 512 << code, blocks 8 << code. */
#define BUFFER_CODE 7u
#define BLOCK_CODE 3u
#define MAX_PACKET_CODE 4u
#define STOP_CODE 6u
#define RECV_BUFFER_SIZE (512u << BUFFER_CODE)
#define BLOCK_SIZE (8u << BLOCK_CODE)
#define RPDS_PER_BUFFER (RECV_BUFFER_SIZE / BLOCK_SIZE)
#define RPL_SIZE (RPDS_PER_BUFFER * NI_LANAI_RPD_SIZE)
#define RECV_BUFFERS 4u

/* Myrinet's trailer, CRC-32 then CRC-8: the receiver XORs both with what it computed, so a
 * good packet ends in 5 zero bytes (§9.6). */
#define MYRINET_CRC_BYTES 5u
#define MIN_PAYLOAD 16u
#define MAX_PAYLOAD 1024u
/* Payload buffers in flight: each stays untouched until P0_PACKET_SENT says the sender has
 * read it. The send FIFO holds 4 two-SPD packets, so 8 never hold the sender back. */
#define SEND_SLOTS 8u
/* Packets posted and not yet reclaimed, data or HELLO, remembered in order (they retire in
 * FIFO order) so that reclaiming knows whether a data slot came free. */
#define IN_FLIGHT 16u

/* The sequence word of a HELLO (data sequences stay below it). */
#define HELLO_MARK 0xFFFFFFFFu
#define HELLO_LENGTH MIN_PAYLOAD
/* 50 ms in RTC ticks of 0.5 µs (§6, IT0): often enough not to delay the start, rarely
 * enough not to load a guest that is still booting. */
#define HELLO_PERIOD 100000u

/* SRAM (Lanai addresses = BAR0 offsets): [0, 0x10000) belongs to the daemon's fast path and
 * the top 1 KiB to the config Read Mask, so everything here lives from 1 MiB up. */
#define ROUTE_SUCC_ADDR 0x100000u
#define ROUTE_PRED_ADDR 0x100008u
#define HELLO_ADDR 0x100010u
#define SEND_BASE 0x101000u
#define RECV_BASE 0x110000u
#define RECV_STRIDE (RECV_BUFFER_SIZE + RPL_SIZE)

/* MYRI_SEND bit 2 (§13): BEAT every 10 µs, as App. C asks for. */
#define M_AUTO_BEAT 0x4u

/* Software state bits (DISPATCH_STATE). App. C gives one bit per pair of ports for fairness;
 * with one port the pair is receive and send. The others keep a block from firing while its
 * handler could do nothing, or select the start-up phase. */
#define S_RECEIVED 0x1u   /* receive ran last: sending goes first next time */
#define S_NO_SEND 0x2u    /* no data to send now: successor not known up, all posted, slots full */
#define S_NO_BUFFER 0x4u  /* every receive buffer issued and not yet emptied */
#define S_HELLO 0x8u      /* no data from the predecessor yet: keep greeting it */

enum kind { DATA, HELLO };

static volatile uint8_t *bar; /* BAR0: SRAM at 0, specials at NI_LANAI_SPECIALS */
static uint32_t rank, size, succ, pred, packets;
static uint32_t state;
static int succ_up;
/* Data packets posted to P0_SEND and reclaimed from P0_SEND_COUNT; data received. */
static uint32_t posted, reclaimed, received;
/* Every packet (data and HELLO) posted and reclaimed, and the kinds in between. */
static uint32_t fifo_posted, fifo_reclaimed;
static enum kind in_flight[IN_FLIGHT];
static uint32_t hellos_sent, hellos_received;
static uint32_t rb_free = RECV_BUFFERS, rb_next, rb_curr, rpl_index;
static uint64_t last_progress, t_first, t_done;
static unsigned idle;

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "lanai-packets: FAIL rank %" PRIu32 ": ", rank);
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

/* Specials are big-endian (§5) and each is accessed at its own width and byte address
 * (§6): 1-byte registers at their byte, 2-byte at their half-word. Every access traps. */
static volatile void *special(uint32_t off)
{
    return bar + NI_LANAI_SPECIALS + off;
}
static uint32_t rd32(uint32_t off) { return be32toh(*(volatile uint32_t *)special(off)); }
static uint16_t rd16(uint32_t off) { return be16toh(*(volatile uint16_t *)special(off)); }
static uint8_t rd8(uint32_t off) { return *(volatile uint8_t *)special(off); }
static void wr32(uint32_t off, uint32_t v) { *(volatile uint32_t *)special(off) = htobe32(v); }
static void wr16(uint32_t off, uint16_t v) { *(volatile uint16_t *)special(off) = htobe16(v); }
static void wr8(uint32_t off, uint8_t v) { *(volatile uint8_t *)special(off) = v; }

/* SRAM is mmapped (no trap) and big-endian from the Lanai's side: RPDs are read as such. */
static uint32_t sram_rd32(uint32_t addr) { return be32toh(*(volatile uint32_t *)(bar + addr)); }

/* Bulk copies in 8-byte words: each SRAM access under TCG is an I/O callback, so fewer,
 * wider ones. Lengths are multiples of 8 and addresses 8-aligned. */
static void sram_put(uint32_t addr, const uint8_t *src, uint32_t len)
{
    for (uint32_t i = 0; i < len; i += 8) {
        uint64_t w;
        memcpy(&w, src + i, 8);
        *(volatile uint64_t *)(bar + addr + i) = w;
    }
}

static void sram_get(uint8_t *dst, uint32_t addr, uint32_t len)
{
    for (uint32_t i = 0; i < len; i += 8) {
        uint64_t w = *(volatile uint64_t *)(bar + addr + i);
        memcpy(dst + i, &w, 8);
    }
}

/* §13: a port register is reached through PORT_ADDR/PORT_DATA. MIN_DELAY (6-12 CPU cycles)
 * between the two is far shorter than one trapped access, so no explicit wait. */
static void port_write(uint16_t reg, uint16_t v)
{
    wr16(NI_LANAI_PORT_ADDR, reg);
    wr16(NI_LANAI_PORT_DATA, v);
}

static uint16_t port_read(uint16_t reg)
{
    wr16(NI_LANAI_PORT_ADDR, NI_LANAI_PORT_PORT_READ | reg);
    return rd16(NI_LANAI_PORT_DATA);
}

/* What the channels look like, for a failure report. */
static const char *status(void)
{
    static char s[400];
    snprintf(s, sizeof s,
             "posted %" PRIu32 ", sent %" PRIu32 ", received %" PRIu32 " of %" PRIu32
             "; HELLOs sent %" PRIu32 ", received %" PRIu32 " (successor %s); ISR 0x%08" PRIx32
             ", RECV_COUNT %u, RPL_INDEX %u, SEND_FREE_COUNT %u, SEND_COUNT %u; software RPL "
             "index %" PRIu32 " in buffer %" PRIu32 ", %" PRIu32 " buffers free, state 0x%" PRIx32,
             posted, reclaimed, received, packets, hellos_sent, hellos_received,
             succ_up ? "up" : "not heard from", rd32(NI_LANAI_ISR),
             rd16(NI_LANAI_P0_RECV_COUNT), rd16(NI_LANAI_P0_RPL_INDEX),
             rd8(NI_LANAI_P0_SEND_FREE_COUNT), rd8(NI_LANAI_P0_SEND_COUNT), rpl_index, rb_curr,
             rb_free, state);
    return s;
}

/* Bind the NI to vfio-pci, open it through the container/group API, enable it, map BAR0. */
static void open_bar0(void)
{
    char addr[256];
    int dev =
        ni_vfio_open(addr, sizeof addr, NI_LANAI_PCI_VENDOR_ID, NI_LANAI_PCI_DEVICE_ID, die);

    /* Bus Master, as a host driver sets it before it starts Lanai firmware
     * (DMA_CONFIG.DMA_ENABLE mirrors it, §12). SRAM, unlike BAR2's registers, cannot be used
     * through pread/pwrite at any useful speed: packets and RPDs live there. */
    ni_vfio_enable(dev, die);
    bar = ni_vfio_map_bar0(dev, NI_LANAI_BAR_SIZE, NI_LANAI_BAR_SIZE,
                           "BAR0 is smaller than the Lanai window: not an NI", die);
    printf("lanai-packets: NI %s, BAR0 mapped\n", addr);
}

/* The ID page is ours, not the Lanai's: little-endian like the fast path it mirrors. */
static uint32_t id_read(uint32_t off)
{
    return le32toh(*(volatile uint32_t *)(bar + NI_LANAI_ID_PAGE + off));
}

/* Payload of packet `seq` from `sender`: lengths vary over every multiple of 8 in
 * [MIN_PAYLOAD, MAX_PAYLOAD], bytes depend on all three of sender, sequence and index so a
 * misplaced, stale or misdelivered packet cannot pass. */
static uint32_t payload_length(uint32_t seq)
{
    return MIN_PAYLOAD + 8u * ((seq * 53u + 7u) % ((MAX_PAYLOAD - MIN_PAYLOAD) / 8u + 1u));
}

static uint8_t pattern(uint32_t sender, uint32_t seq, uint32_t i)
{
    uint32_t x = sender * 0x9E3779B1u ^ seq * 0x85EBCA77u ^ i * 0xC2B2AE3Du;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 13;
    return (uint8_t)x;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint32_t recv_buffer(uint32_t i)
{
    return RECV_BASE + i * RECV_STRIDE;
}

static void progress(void)
{
    last_progress = now_ns();
    idle = 0;
}

/* §15: one select block; App. C writes all four staging registers every time. */
static void dispatch_block(uint32_t blk, uint32_t isr_on, uint32_t isr_off, uint32_t state_on,
                           uint32_t state_off)
{
    wr32(NI_LANAI_DISPATCH_ISR_ON, isr_on);
    wr32(NI_LANAI_DISPATCH_ISR_OFF, isr_off);
    wr32(NI_LANAI_DISPATCH_STATE_ON, state_on);
    wr32(NI_LANAI_DISPATCH_STATE_OFF, state_off);
    wr32(NI_LANAI_DISPATCH_CONFIG, blk & NI_LANAI_DISPATCH_SELECT_MASK);
}

typedef void (*handler)(void);

/* App. C no_backup_buffer0: the channel has at most one buffer; give it the next one. Its
 * RPL is pre-invalidated (§9.6, §10.3) so that an RPD the receiver never wrote cannot pass:
 * pointer 0, length word DESC_INVALID, big-endian. */
static void no_backup_buffer0(void)
{
    static const uint8_t invalid_rpd[8] = {0, 0, 0, 0, 0x80, 0, 0, 0};
    uint32_t b = recv_buffer(rb_next);
    for (uint32_t k = 0; k < RPDS_PER_BUFFER; k++)
        sram_put(b + RECV_BUFFER_SIZE + k * 8, invalid_rpd, 8);
    __sync_synchronize();
    wr32(NI_LANAI_P0_RB, b);
    rb_next = (rb_next + 1) % RECV_BUFFERS;
    if (--rb_free == 0)
        state |= S_NO_BUFFER;
    progress();
}

/* The exchange is timed from when this rank has heard from both neighbours. */
static void mark_start(void)
{
    if (!t_first && succ_up && received > 0)
        t_first = now_ns();
}

/* Data is sent only while the successor is known up, packets remain, and a slot is free. */
static void update_send_state(void)
{
    if (!succ_up || posted == packets || posted - reclaimed == SEND_SLOTS)
        state |= S_NO_SEND;
    else
        state &= ~S_NO_SEND;
}

/* Post one packet as App. C does: the route segment, then the payload with DESC_LAST.
 * Callers run only on SEND_READY, i.e. room for both SPDs. */
static void post(uint32_t route_addr, uint32_t addr, uint32_t len, enum kind k)
{
    if (fifo_posted - fifo_reclaimed == IN_FLIGHT)
        fail("%u packets posted and not reclaimed (%s)", IN_FLIGHT, status());
    __sync_synchronize(); /* the payload is in SRAM before the sender can be told of it */
    wr32(NI_LANAI_P0_SEND, route_addr);
    wr32(NI_LANAI_P0_SEND, NI_LANAI_SPD_DESC_ROUTE | 1u);
    wr32(NI_LANAI_P0_SEND, addr);
    wr32(NI_LANAI_P0_SEND, NI_LANAI_SPD_DESC_LAST | len);
    in_flight[fifo_posted++ % IN_FLIGHT] = k;
}

/* A HELLO from the successor: its channel is enabled and holds buffers, so data may go. */
static void hello_received(const uint8_t *p, uint32_t len, uint32_t sender)
{
    if (sender != succ || len != HELLO_LENGTH + MYRINET_CRC_BYTES)
        fail("a HELLO from rank %" PRIu32 ", length %" PRIu32 ": expected rank %" PRIu32
             ", length %u",
             sender, len, succ, HELLO_LENGTH + MYRINET_CRC_BYTES);
    for (uint32_t i = 8; i < HELLO_LENGTH; i++)
        if (p[i] != pattern(sender, HELLO_MARK, i))
            fail("HELLO %" PRIu32 ": byte %" PRIu32 " is 0x%02x, expected 0x%02x",
                 hellos_received, i, p[i], pattern(sender, HELLO_MARK, i));
    hellos_received++;
    succ_up = 1;
    update_send_state();
    mark_start();
}

/* A data packet from the predecessor: in order, of the length its sequence gives, and every
 * byte as sent. */
static void data_received(const uint8_t *p, uint32_t len, uint32_t sender, uint32_t ptr)
{
    uint32_t seq = received, got_seq = get_be32(p + 4);
    if (received == packets)
        fail("a packet beyond the %" PRIu32 " rank %" PRIu32 " sends: from rank %" PRIu32
             " sequence %" PRIu32 ", length %" PRIu32,
             packets, pred, sender, got_seq, len);
    if (sender != pred || got_seq != seq)
        fail("packet %" PRIu32 ": from rank %" PRIu32 " sequence %" PRIu32 ", expected rank %"
             PRIu32 " sequence %" PRIu32 " (length %" PRIu32 ")",
             seq, sender, got_seq, pred, seq, len);
    uint32_t plen = payload_length(seq);
    if (len != plen + MYRINET_CRC_BYTES)
        fail("packet %" PRIu32 ": length %" PRIu32 ", expected %" PRIu32 " payload + 5 CRC "
             "bytes",
             seq, len, plen);
    for (uint32_t i = 8; i < plen; i++)
        if (p[i] != pattern(pred, seq, i))
            fail("packet %" PRIu32 " (%" PRIu32 " bytes at 0x%08" PRIx32 "): byte %" PRIu32
                 " is 0x%02x, expected 0x%02x",
                 seq, plen, ptr, i, p[i], pattern(pred, seq, i));
    if (received++ == 0)
        state &= ~S_HELLO; /* the predecessor has heard us */
    mark_start();
    progress();
}

/* App. C packet_received0: the next RPD of the current buffer's RPL, every check, then
 * P0_RECV_COUNT decremented; DESC_LAST hands the buffer back. */
static void packet_received0(void)
{
    uint32_t buf = recv_buffer(rb_curr);
    uint32_t at = buf + RECV_BUFFER_SIZE + rpl_index * 8;
    uint32_t ptr = sram_rd32(at), word = sram_rd32(at + 4);
    uint32_t len = word & NI_LANAI_RPD_DESC_LENGTH_MASK;
    uint32_t zeroes = (word >> NI_LANAI_RPD_DESC_ZEROES_SHIFT) & 7u;
    uint32_t n = received + hellos_received;
    uint8_t p[MAX_PAYLOAD + 8];

    if (word & (NI_LANAI_RPD_DESC_INVALID | NI_LANAI_RPD_DESC_LINK | NI_LANAI_RPD_DESC_MARKED_BAD))
        fail("packet %" PRIu32 " in: RPD %" PRIu32 " of buffer %" PRIu32 " has INVALID, LINK "
             "or MARKED_BAD (length word 0x%08" PRIx32 ", pointer 0x%08" PRIx32 ")",
             n, rpl_index, rb_curr, word, ptr);
    if (zeroes < MYRINET_CRC_BYTES)
        fail("packet %" PRIu32 " in: ZEROES %" PRIu32 " < 5, a CRC check failed (length word "
             "0x%08" PRIx32 ")",
             n, zeroes, word);
    if (ptr < buf || ptr >= buf + RECV_BUFFER_SIZE || (ptr - buf) % BLOCK_SIZE != 0 ||
        len > buf + RECV_BUFFER_SIZE - ptr)
        fail("packet %" PRIu32 " in: DESC_POINTER 0x%08" PRIx32 " (length %" PRIu32 ") is not "
             "a block of the current buffer [0x%08" PRIx32 ", 0x%08" PRIx32 ")",
             n, ptr, len, buf, buf + RECV_BUFFER_SIZE);
    if (len < MIN_PAYLOAD + MYRINET_CRC_BYTES || len > MAX_PAYLOAD + MYRINET_CRC_BYTES)
        fail("packet %" PRIu32 " in: length %" PRIu32 " outside [%u, %u]", n, len,
             MIN_PAYLOAD + MYRINET_CRC_BYTES, MAX_PAYLOAD + MYRINET_CRC_BYTES);
    sram_get(p, ptr, (len + 7u) & ~7u);
    for (uint32_t i = len - MYRINET_CRC_BYTES; i < len; i++)
        if (p[i] != 0)
            fail("packet %" PRIu32 " in: CRC byte %" PRIu32 " is 0x%02x though ZEROES is %"
                 PRIu32,
                 n, i - (len - MYRINET_CRC_BYTES), p[i], zeroes);
    uint32_t sender = get_be32(p);
    if (get_be32(p + 4) == HELLO_MARK)
        hello_received(p, len, sender);
    else
        data_received(p, len, sender, ptr);

    if (word & NI_LANAI_RPD_DESC_LAST) {
        rb_curr = (rb_curr + 1) % RECV_BUFFERS;
        rb_free++;
        rpl_index = 0;
        state &= ~S_NO_BUFFER;
    } else if (++rpl_index == RPDS_PER_BUFFER) {
        fail("the RPL of buffer %" PRIu32 " is full and no RPD had DESC_LAST", rb_curr);
    }
    wr16(NI_LANAI_P0_RECV_COUNT, 0);
    state |= S_RECEIVED;
}

/* App. C packet_sent0: one packet has left; a data packet's slot may be filled again. */
static void packet_sent0(void)
{
    if (fifo_reclaimed == fifo_posted)
        fail("P0_PACKET_SENT with every posted packet already reclaimed (%s)", status());
    wr8(NI_LANAI_P0_SEND_COUNT, 0);
    if (in_flight[fifo_reclaimed++ % IN_FLIGHT] == HELLO) {
        hellos_sent++;
        return;
    }
    reclaimed++;
    update_send_state();
    progress();
}

/* App. C free_to_send0, for the next data packet. */
static void free_to_send0(void)
{
    uint32_t seq = posted, len = payload_length(seq);
    uint32_t slot = SEND_BASE + (seq % SEND_SLOTS) * MAX_PAYLOAD;
    uint8_t p[MAX_PAYLOAD];

    put_be32(p, rank);
    put_be32(p + 4, seq);
    for (uint32_t i = 8; i < len; i++)
        p[i] = pattern(rank, seq, i);
    sram_put(slot, p, len);
    post(ROUTE_SUCC_ADDR, slot, len, DATA);
    posted++;
    update_send_state();
    state &= ~S_RECEIVED;
    progress();
}

/* IT0 ran out while greeting the predecessor: one more HELLO, and the timer again. Not
 * progress: a predecessor that never starts must still time out. */
static void send_hello0(void)
{
    post(ROUTE_PRED_ADDR, HELLO_ADDR, HELLO_LENGTH, HELLO);
    wr32(NI_LANAI_IT0, HELLO_PERIOD); /* also clears TIME_INT0 */
}

static void finish(void);

/* The catch-all block: nothing pending. The run ends here, so that nothing received is left
 * unconsumed and nothing posted unreclaimed. After a while of idling, sleep a little so that
 * a waiting rank does not keep QEMU and the daemon busy with trapped reads the other guest
 * needs. */
static void dispatch_null(void)
{
    if (t_done && now_ns() - t_done >= LINGER_NS && fifo_reclaimed == fifo_posted)
        finish();
    if (++idle > 64)
        usleep(100);
}

static uint32_t dispatch_index;

static void dispatch_error(void)
{
    fail("DISPATCH_INDEX %" PRIu32 " names no configured block (%s)", dispatch_index, status());
}

enum { B_NO_BACKUP, B_RECEIVED_FAIR, B_SENT, B_HELLO, B_SEND, B_RECEIVED, B_NULL };
static handler dispatch_table[NI_LANAI_DISPATCH_NONE / 4 + 1];

/* App. C initialize_dispatch, for port 0: buffers first (an X port drops what it has no
 * room for), then received packets and sending taking turns through S_RECEIVED (App. C's
 * "event0 & event1 & !state" pattern), reclaiming sent packets between them (it frees send
 * slots), a HELLO when IT0 runs out during start-up, and a last all-zero block that always
 * matches. */
static void initialize_dispatch(void)
{
    wr32(NI_LANAI_AISR_ON, 0);
    wr32(NI_LANAI_AISR_OFF, 0);
    dispatch_block(B_NO_BACKUP, NI_LANAI_ISR_P0_NO_BACKUP, 0, 0, S_NO_BUFFER);
    dispatch_block(B_RECEIVED_FAIR, NI_LANAI_ISR_P0_PACKET_RCVD | NI_LANAI_ISR_P0_SEND_READY, 0,
                   0, S_RECEIVED | S_NO_SEND);
    dispatch_block(B_SENT, NI_LANAI_ISR_P0_PACKET_SENT, 0, 0, 0);
    dispatch_block(B_HELLO, NI_LANAI_ISR_TIME_INT0 | NI_LANAI_ISR_P0_SEND_READY, 0, S_HELLO, 0);
    dispatch_block(B_SEND, NI_LANAI_ISR_P0_SEND_READY, 0, 0, S_NO_SEND);
    dispatch_block(B_RECEIVED, NI_LANAI_ISR_P0_PACKET_RCVD, 0, 0, 0);
    dispatch_block(B_NULL, 0, 0, 0, 0);
    for (size_t i = 0; i < sizeof dispatch_table / sizeof dispatch_table[0]; i++)
        dispatch_table[i] = dispatch_error;
    dispatch_table[B_NO_BACKUP] = no_backup_buffer0;
    dispatch_table[B_RECEIVED_FAIR] = packet_received0;
    dispatch_table[B_SENT] = packet_sent0;
    dispatch_table[B_HELLO] = send_hello0;
    dispatch_table[B_SEND] = free_to_send0;
    dispatch_table[B_RECEIVED] = packet_received0;
    dispatch_table[B_NULL] = dispatch_null;
}

/* App. C initialize_channels, port 0 only. No buffer is issued here: the P0_NO_BACKUP
 * handler does that from the first dispatch on. */
static void initialize_channels(void)
{
    wr32(NI_LANAI_P0_RPL_CONFIG,
         NI_LANAI_RPL_PORT_ENABLE | NI_LANAI_RPL_ENABLE_BUFFER_DROP |
             STOP_CODE << NI_LANAI_RPL_STOP_SIZE_SHIFT |
             MAX_PACKET_CODE << NI_LANAI_RPL_MAX_PACKET_SHIFT |
             BLOCK_CODE << NI_LANAI_RPL_BLOCK_SIZE_SHIFT |
             BUFFER_CODE << NI_LANAI_RPL_BUFFER_SIZE_SHIFT);
    /* Ready at >= LIMIT + 2 = 4 free words: both SPDs of one packet. */
    wr8(NI_LANAI_P0_SEND_FREE_LIMIT, 2);
    port_write(NI_LANAI_PORT_SEND_CONFIG, NI_LANAI_ENABLE_CRC8 | NI_LANAI_ENABLE_CRC32);
    port_write(NI_LANAI_PORT_RECV_CONFIG, NI_LANAI_ENABLE_CRC8 | NI_LANAI_ENABLE_CRC32);
    port_write(NI_LANAI_PORT_MYRI_SEND, M_AUTO_BEAT);
    port_write(NI_LANAI_PORT_MODE, NI_LANAI_PORT_MODE_M);
    /* The route byte and the packet format below are Myrinet's: a port left in another mode
     * by its administrator would carry something else. */
    uint16_t mode = port_read(NI_LANAI_PORT_MODE);
    if (mode != NI_LANAI_PORT_MODE_M)
        fail("port 0 is in MODE 0x%x, not Myrinet (0x%x)", mode, NI_LANAI_PORT_MODE_M);
    uint64_t t = now_ns();
    while (!(rd32(NI_LANAI_ISR) & NI_LANAI_ISR_P0_LINK_READY)) {
        if (now_ns() - t > TIMEOUT_NS)
            fail("port 0's link never came up (ISR 0x%08" PRIx32 ", STATE 0x%x)",
                 rd32(NI_LANAI_ISR), port_read(NI_LANAI_PORT_STATE));
        usleep(1000);
    }
    sram_put(ROUTE_SUCC_ADDR, (const uint8_t[8]){(uint8_t)(NI_LANAI_ROUTE_BYTE | succ)}, 8);
    sram_put(ROUTE_PRED_ADDR, (const uint8_t[8]){(uint8_t)(NI_LANAI_ROUTE_BYTE | pred)}, 8);
    uint8_t hello[HELLO_LENGTH];
    put_be32(hello, rank);
    put_be32(hello + 4, HELLO_MARK);
    for (uint32_t i = 8; i < HELLO_LENGTH; i++)
        hello[i] = pattern(rank, HELLO_MARK, i);
    sram_put(HELLO_ADDR, hello, HELLO_LENGTH);
}

/* App. C's main loop body: DISPATCH_STATE = state; dispatch_table[DISPATCH_INDEX/4](). */
static void dispatch(void)
{
    wr32(NI_LANAI_DISPATCH_STATE, state);
    dispatch_index = rd32(NI_LANAI_DISPATCH_INDEX) & 0x1FFu;
    if (dispatch_index % 4 != 0 || dispatch_index > NI_LANAI_DISPATCH_NONE)
        fail("DISPATCH_INDEX 0x%" PRIx32 " is not 4 x a block (%s)", dispatch_index, status());
    dispatch_table[dispatch_index / 4]();

    uint64_t now = now_ns();
    if (!t_done && reclaimed == packets && received == packets)
        t_done = now;
    if (now - (t_done ? t_done : last_progress) > TIMEOUT_NS)
        fail("no progress for %llu s (%s)", TIMEOUT_NS / 1000000000ull, status());
}

int main(int argc, char **argv)
{
    unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 0) : 200;
    if (n >= HELLO_MARK)
        fail("PACKETS must be below %u", HELLO_MARK);
    packets = (uint32_t)n;
    setvbuf(stdout, NULL, _IOLBF, 0);
    open_bar0();

    uint64_t t = now_ns();
    while (!(size = id_read(NI_LANAI_ID_SIZE)))
        if (now_ns() - t > TIMEOUT_NS)
            fail("the NI was never given a partition (ID page size 0)");
        else
            usleep(1000);
    rank = id_read(NI_LANAI_ID_RANK);
    if (rank >= size || size > NI_LANAI_PORT_MASK + 1u)
        fail("rank %" PRIu32 " of %" PRIu32 ": not a crossbar port", rank, size);
    succ = (rank + 1) % size;
    pred = (rank + size - 1) % size;
    printf("lanai-packets: rank %" PRIu32 " of %" PRIu32 "\n", rank, size);

    initialize_dispatch();
    initialize_channels();

    /* Buffers before any greeting: a HELLO tells the predecessor that data sent to this
     * rank will find room. Sending waits for the successor's HELLO. */
    state = S_NO_SEND;
    progress();
    while (rb_free > RECV_BUFFERS - 2)
        dispatch();
    if (packets > 0) {
        state |= S_HELLO;
        wr32(NI_LANAI_IT0, 0); /* the first HELLO at once */
    }
    for (;;)
        dispatch();
}

/* After the linger: every packet sent, reclaimed, received and checked. */
static void finish(void)
{
    printf("lanai-packets: hellos rank %" PRIu32 ": %" PRIu32 " sent, %" PRIu32 " received\n",
           rank, hellos_sent, hellos_received);
    /* From hearing both neighbours to the last packet sent and received: each rank sends and
     * receives one packet per period. */
    printf("lanai-packets: ok rank %" PRIu32 ": %" PRIu32 " sent, %" PRIu32
           " received, checked; %.1f µs per packet\n",
           rank, reclaimed, received,
           t_first ? (double)(t_done - t_first) / 1e3 / packets : 0.0);
    exit(0);
}
