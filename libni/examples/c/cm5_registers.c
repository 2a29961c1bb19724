/*
 * cm5_registers.c — a CM-5 NI driver in the handbook's own terms, inside a guest: BAR2
 * mapped through VFIO and nothing else (no libni, no daemon protocol). Follows the NI
 * Programmer's Handbook v2.2:
 *
 *   - §6.3: the OS (here the daemon) has programmed ni_physical_self, ni_partition_base
 *     and ni_partition_size; this program's rank is the relative address self - base.
 *   - §2.7.2, §4.2.10, §4.3.1: unlock LDR and COM, stop abstaining from combines and
 *     sync global; a sync global is the barrier before and after the work.
 *   - §2.3, §3.2, §8.1.3: a Data Network ping-pong between relative addresses 0 and 1 on
 *     the LDR interface: write the whole message, check send_ok, retry if refused; receive
 *     by rec_ok, rec_length, tag and recv.
 *   - §4.2.7, §4.2.8, §4.2.9: combines (ADD reduce, forward ADD scan, MAX reduce) and a
 *     network-done over the whole partition.
 *   - The cost of one trapped register access (a read of ni_time, a write of
 *     ni_scan_start): each goes guest -> QEMU -> vfio-user -> ni-device and back.
 *
 * Register offsets and fields come from ni_cm5.h, generated from the device's own
 * definitions. Build (static: guests have no libc) and run in each guest of a partition:
 *
 *   cc -std=c99 -O2 -static -I device/abi/include -o cm5_registers \
 *       libni/examples/c/cm5_registers.c
 *   cm5_registers [ROUND_TRIPS]          (NI_PCI=0000:01:00.0 names the NI; default: the
 *                                         first function with the NI's PCI IDs)
 *
 * Prints "cm5-registers: ok ..." and exits 0, or says what failed and exits 1.
 */
#define _GNU_SOURCE

#include "ni_cm5.h"
#include "ni_vfio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <linux/vfio.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_NS (120ull * 1000000000ull)

static volatile uint32_t *bar; /* BAR2 mapped, or NULL: pread/pwrite on the device */
static int dev_fd = -1;
static uint64_t bar_offset;
static uint32_t rank, size;

static void die(const char *what)
{
    fprintf(stderr, "cm5-registers: rank %u: %s%s%s\n", rank, what, errno ? ": " : "",
            errno ? strerror(errno) : "");
    exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* One 32-bit register access; `sup` selects the supervisor window (§1.3). */
static uint32_t rd(int sup, uint32_t off)
{
    uint64_t at = off + (sup ? NI_CM5_SUPERVISOR : 0);
    if (bar)
        return bar[at / 4];
    uint32_t v;
    if (pread(dev_fd, &v, 4, (off_t)(bar_offset + at)) != 4)
        die("reading BAR2");
    return v;
}

static void wr(int sup, uint32_t off, uint32_t v)
{
    uint64_t at = off + (sup ? NI_CM5_SUPERVISOR : 0);
    if (bar) {
        bar[at / 4] = v;
        return;
    }
    if (pwrite(dev_fd, &v, 4, (off_t)(bar_offset + at)) != 4)
        die("writing BAR2");
}

/* Bind the NI to vfio-pci, open it through the container/group API, map BAR2. */
static void open_bar2(void)
{
    char addr[256];
    dev_fd = ni_vfio_open(addr, sizeof addr, NI_CM5_PCI_VENDOR_ID, NI_CM5_PCI_DEVICE_ID, die);
    struct vfio_region_info info = {.argsz = sizeof info, .index = VFIO_PCI_BAR2_REGION_INDEX};
    if (ioctl(dev_fd, VFIO_DEVICE_GET_REGION_INFO, &info))
        die("VFIO_DEVICE_GET_REGION_INFO (BAR2)");
    if (info.size < NI_CM5_BAR_SIZE) {
        errno = 0;
        die("BAR2 is smaller than the CM-5 register file: not an NI");
    }
    bar_offset = info.offset;
    if (info.flags & VFIO_REGION_INFO_FLAG_MMAP) {
        void *m = mmap(NULL, NI_CM5_BAR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, dev_fd,
                       (off_t)info.offset);
        if (m != MAP_FAILED)
            bar = m;
    }
    printf("cm5-registers: NI %s, BAR2 %s\n", addr, bar ? "mapped" : "through pread/pwrite");
}

static void wait_for(const char *what, int sup, uint32_t off, uint32_t mask, uint32_t want)
{
    uint64_t t = now_ns();
    while ((rd(sup, off) & mask) != want)
        if (now_ns() - t > TIMEOUT_NS) {
            errno = 0;
            fprintf(stderr, "cm5-registers: rank %u: timed out waiting for %s\n", rank, what);
            exit(1);
        }
}

/* No Bus Error so far (§6.6): a driver's own check that it used the NI as the book says. */
static void no_bus_error(const char *after)
{
    uint32_t c = rd(1, NI_CM5_INTERRUPT_CAUSE);
    if (c & NI_CM5_CAUSE_BAD_MEMORY_ACCESS) {
        fprintf(stderr, "cm5-registers: rank %u: Bus Error after %s (ni_bad_address 0x%x)\n",
                rank, after, rd(1, NI_CM5_BAD_ADDRESS));
        exit(1);
    }
}

/* §4.3.1: a sync global as a barrier. */
static void barrier(void)
{
    wr(0, NI_CM5_SYNC_GLOBAL_SEND, 0);
    wait_for("sync global", 0, NI_CM5_SYNC_GLOBAL, 2, 2);
}

/* §8.1.3: the whole message, then send_ok; refused messages are sent again. */
static void ldr_send(uint32_t dest, uint32_t tag, const uint32_t *w, uint32_t len)
{
    uint32_t sf = NI_CM5_SEND_FIRST(NI_CM5_FIFO_LEFT_DR, (tag << 4) | len);
    uint64_t t = now_ns();
    for (;;) {
        wr(0, sf, dest);
        for (uint32_t i = 0; i < len; i++)
            wr(0, NI_CM5_LDR_SEND, w[i]);
        if (rd(0, NI_CM5_LDR_STATUS) & NI_CM5_STATUS_SEND_OK)
            return;
        if (now_ns() - t > TIMEOUT_NS) {
            errno = 0;
            die("the network never took the message");
        }
    }
}

/* rec_ok, then rec_length[14:11] and tag[18:15] of the head message, then its words. */
static uint32_t ldr_receive(uint32_t *w, uint32_t max, uint32_t *tag)
{
    uint32_t st;
    uint64_t t = now_ns();
    while (!((st = rd(0, NI_CM5_LDR_STATUS)) & NI_CM5_STATUS_REC_OK))
        if (now_ns() - t > TIMEOUT_NS) {
            errno = 0;
            die("no message arrived");
        }
    uint32_t len = (st >> 11) & 0xF;
    *tag = (st >> 15) & 0xF;
    if (len > max) {
        errno = 0;
        die("a message longer than sent");
    }
    for (uint32_t i = 0; i < len; i++)
        w[i] = rd(0, NI_CM5_LDR_RECV);
    return len;
}

/* A combine of one word (§4.2.12): send_first carries pattern, combiner and length. */
static uint32_t combine(uint32_t pattern, uint32_t combiner, uint32_t v)
{
    wr(0, NI_CM5_SEND_FIRST(NI_CM5_FIFO_COMBINE, (pattern << 7) | (combiner << 4) | 1), v);
    if (!(rd(0, NI_CM5_COM_STATUS) & NI_CM5_STATUS_SEND_OK)) {
        errno = 0;
        die("the combine was refused");
    }
    wait_for("a combine result", 0, NI_CM5_COM_STATUS, NI_CM5_STATUS_REC_OK,
             NI_CM5_STATUS_REC_OK);
    return rd(0, NI_CM5_COM_RECV);
}

static void expect(const char *what, uint32_t got, uint32_t want)
{
    if (got != want) {
        fprintf(stderr, "cm5-registers: rank %u: %s: got %u, want %u\n", rank, what, got, want);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    uint32_t trips = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 0) : 1000;
    setvbuf(stdout, NULL, _IOLBF, 0);
    open_bar2();

    /* §6.3: the partition registers, set by the OS when the NI was attached. */
    uint64_t t = now_ns();
    while (!(size = rd(1, NI_CM5_PARTITION_SIZE)))
        if (now_ns() - t > TIMEOUT_NS) {
            errno = 0;
            die("the partition registers were never set");
        }
    rank = rd(1, NI_CM5_PHYSICAL_SELF) - rd(1, NI_CM5_PARTITION_BASE);
    if (size < 2) {
        errno = 0;
        die("the ping-pong needs a partition of at least 2");
    }
    wr(1, NI_CM5_INTERRUPT_CLEAR, NI_CM5_CAUSE_ALL & ~NI_CM5_CAUSE_BC_OR_COM_COLLISION);
    /* Sync global first: the first control-network event makes this NI a member the
     * partition waits for, and by then it must already take part in sync global. */
    wr(0, NI_CM5_SYNC_GLOBAL_ABSTAIN, 0);
    wr(1, NI_CM5_LDR_PRIVATE, 0);
    wr(1, NI_CM5_COM_PRIVATE, 0);
    wr(0, NI_CM5_COM_CONTROL, 0);
    barrier();
    no_bus_error("setting up");
    printf("cm5-registers: rank %u of %u (physical %u)\n", rank, size,
           rd(1, NI_CM5_PHYSICAL_SELF));

    /* The cost of a trapped access. */
    enum { ACCESSES = 2000 };
    uint64_t t0 = now_ns();
    uint32_t x = 0;
    for (int i = 0; i < ACCESSES; i++)
        x ^= rd(0, NI_CM5_TIME);
    uint64_t t1 = now_ns();
    for (int i = 0; i < ACCESSES; i++)
        wr(0, NI_CM5_SCAN_START, 0);
    uint64_t t2 = now_ns();
    (void)x;
    barrier();

    /* Data Network ping-pong between relative addresses 0 and 1. */
    uint64_t t3 = now_ns();
    if (rank < 2) {
        uint32_t peer = 1 - rank;
        for (uint32_t s = 0; s < trips; s++) {
            uint32_t m[4] = {s, ~s, s * 2654435761u, rank}, got[5], tag;
            if (rank == 0)
                ldr_send(peer, 1, m, 4);
            uint32_t len = ldr_receive(got, 5, &tag);
            expect("message length", len, 4);
            expect("tag", tag, rank == 0 ? 2 : 1);
            expect("word 0 (sequence)", got[0], s);
            expect("word 1", got[1], ~s);
            expect("word 2", got[2], s * 2654435761u);
            expect("word 3 (sender)", got[3], peer);
            if (rank == 1) {
                m[3] = rank;
                ldr_send(peer, 2, m, 4);
            }
        }
    }
    uint64_t t4 = now_ns();
    no_bus_error("the ping-pong");
    barrier();

    /* Combines over the whole partition. */
    expect("ADD reduce", combine(NI_CM5_PATTERN_REDUCE, NI_CM5_COMBINER_ADD, rank + 1),
           size * (size + 1) / 2);
    expect("forward ADD scan", combine(NI_CM5_PATTERN_SCAN_FORWARD, NI_CM5_COMBINER_ADD, rank + 1),
           rank * (rank + 1) / 2);
    expect("MAX reduce", combine(NI_CM5_PATTERN_REDUCE, NI_CM5_COMBINER_MAX, rank), size - 1);
    /* §4.2.9: network-done completes once every member sent it and nothing is in flight. */
    wr(0, NI_CM5_SEND_FIRST(NI_CM5_FIFO_COMBINE,
                            (NI_CM5_PATTERN_ROUTER_DONE << 7) | (NI_CM5_COMBINER_ROUTER_DONE << 4) | 1),
       0);
    wait_for("network-done", 0, NI_CM5_DR_STATUS, 1u << 6, 1u << 6);
    no_bus_error("the combines");
    barrier();

    printf("cm5-registers: ok rank %u: %u round trips, %.1f us per round trip; "
           "trapped access: read %.2f us, write %.2f us; combines ok\n",
           rank, rank < 2 ? trips : 0, rank < 2 && trips ? (t4 - t3) / 1e3 / trips : 0.0,
           (t1 - t0) / 1e3 / ACCESSES, (t2 - t1) / 1e3 / ACCESSES);
    return 0;
}
