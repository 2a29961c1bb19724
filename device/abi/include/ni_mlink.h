/*
 * ni_mlink.h — the METRO MLINK register block in BAR0 (MIT METRO Ch. 11).
 * GENERATED from device/abi/src/mlink.rs by `NI_BLESS=1 cargo test -p ni-abi`: do not
 * edit. Behaviour: device/abi/mlink.md. Registers are 32 bits, little-endian.
 */
#ifndef NI_MLINK_H
#define NI_MLINK_H

#define NI_MLINK_PAGE 0xA10000u
#define NI_MLINK_PAGE_SIZE 0x1000u
#define NI_MLINK_LINKS 0x2u
#define NI_MLINK_LINK 0x0u
#define NI_MLINK_LINK_STRIDE 0x40u
#define NI_MLINK_CONFIG 0x0u
#define NI_MLINK_TARGET 0x4u
#define NI_MLINK_REMOTE 0x8u
#define NI_MLINK_LOCAL 0xCu
#define NI_MLINK_LEN 0x10u
#define NI_MLINK_HANDLER 0x14u
#define NI_MLINK_COMMAND 0x18u
#define NI_MLINK_STATUS 0x1Cu
#define NI_MLINK_CHECKSUMS 0x20u
#define NI_MLINK_COMPLETED 0x24u
#define NI_MLINK_EXPOSE_BASE 0x200u
#define NI_MLINK_EXPOSE_SIZE 0x204u
#define NI_MLINK_BOOT 0x208u
#define NI_MLINK_QUEUE_COUNT 0x210u
#define NI_MLINK_QUEUE_HANDLER 0x214u
#define NI_MLINK_QUEUE_SOURCE 0x218u
#define NI_MLINK_QUEUE_LEN 0x21Cu
#define NI_MLINK_QUEUE_POP 0x220u
#define NI_MLINK_QUEUE_DROPS 0x224u
#define NI_MLINK_QUEUE_DATA 0x400u
#define NI_MLINK_CONFIG_INTERRUPT 0x1u
#define NI_MLINK_CONFIG_RX_PAUSE 0x2u
#define NI_MLINK_CMD_READ 0x1u
#define NI_MLINK_CMD_WRITE 0x2u
#define NI_MLINK_CMD_RESET 0x3u
#define NI_MLINK_CMD_NOOP 0x4u
#define NI_MLINK_CMD_ROP 0x5u
#define NI_MLINK_CMD_ABORT 0x100u
#define NI_MLINK_ST_IDLE 0x0u
#define NI_MLINK_ST_BUSY 0x1u
#define NI_MLINK_ST_ACK 0x2u
#define NI_MLINK_ST_NACK 0x3u
#define NI_MLINK_ST_ABORTED 0x4u
#define NI_MLINK_ST_REFUSED 0x5u
#define NI_MLINK_ST_STATE_MASK 0xFu
#define NI_MLINK_ST_REASON_SHIFT 0x8u
#define NI_MLINK_ST_BYTES_SHIFT 0x10u
#define NI_MLINK_R_NONE 0x0u
#define NI_MLINK_R_HEADER_CHECKSUM 0x1u
#define NI_MLINK_R_DATA_CHECKSUM 0x2u
#define NI_MLINK_R_ADDRESS 0x3u
#define NI_MLINK_R_LENGTH 0x4u
#define NI_MLINK_R_QUEUE_FULL 0x5u
#define NI_MLINK_R_NOT_PERMITTED 0x6u
#define NI_MLINK_R_UNREACHABLE 0x7u
#define NI_MLINK_R_TIMEOUT 0x8u
#define NI_MLINK_R_BAD_COMMAND 0x9u
#define NI_MLINK_R_NOTHING_TO_ABORT 0xAu
#define NI_MLINK_S0_PRESENT 0x1u
#define NI_MLINK_S0_HELD 0x2u
#define NI_MLINK_S0_QUEUE_FULL 0x4u
#define NI_MLINK_S0_BOOT_ENABLED 0x8u
#define NI_MLINK_S0_EXPOSED 0x10u
#define NI_MLINK_BOOT_HOLD 0x1u
#define NI_MLINK_BOOT_RELEASED 0x2u
#define NI_MLINK_BOOT_RELEASER_SHIFT 0x10u
#define NI_MLINK_MAX_LEN 0x1000u
#define NI_MLINK_QUEUE_ENTRIES 0x10u
#define NI_MLINK_QUEUE_DATA_MAX 0x80u

/* Fletcher-16, the checksum of CHECKSUMS. */
static inline unsigned short ni_mlink_checksum(const unsigned char *p, unsigned long n)
{
    unsigned long a = 0, b = 0;
    while (n) {
        unsigned long k = n < 4096 ? n : 4096;
        n -= k;
        while (k--) { a += *p++; b += a; }
        a %= 255; b %= 255;
    }
    return (unsigned short)(b << 8 | a);
}

#endif /* NI_MLINK_H */
