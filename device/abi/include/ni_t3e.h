/*
 * ni_t3e.h — the T3E E-register window in BAR0 and the SSD-T90 router registers
 * reached by special routing. GENERATED from device/abi/src/t3e.rs by
 * `NI_BLESS=1 cargo test -p ni-abi`: do not edit. Behaviour: device/abi/t3e.md.
 *
 * Every register of the window is 64 bits, little-endian, at NI_T3E_PAGE + offset.
 */
#ifndef NI_T3E_H
#define NI_T3E_H

#define NI_T3E_PAGE 0xA00000ull
#define NI_T3E_PAGE_SIZE 0x4000ull
#define NI_T3E_E_REGS 0x0ull
#define NI_T3E_E_COUNT 0x200ull
#define NI_T3E_ERS 0x1000ull
#define NI_T3E_CMD_INDEX 0x1100ull
#define NI_T3E_CMD_BASE 0x1108ull
#define NI_T3E_CMD_CENTRIFUGE 0x1110ull
#define NI_T3E_CMD_MO 0x1118ull
#define NI_T3E_CMD_ISSUE 0x1120ull
#define NI_T3E_CMD_ERROR 0x1128ull
#define NI_T3E_PUT_COUNT 0x1130ull
#define NI_T3E_OUTSTANDING 0x1138ull
#define NI_T3E_SEGMENT 0x2000ull
#define NI_T3E_SEGMENTS 0x40ull
#define NI_T3E_SEGMENT_STRIDE 0x10ull
#define NI_T3E_CENTRIFUGE_DEFAULT 0xFFF0000000000000ull
#define NI_T3E_ISSUE_EREG_SHIFT 0x10ull
#define NI_T3E_ERS_EMPTY 0x0ull
#define NI_T3E_ERS_FULL_F 0x1ull
#define NI_T3E_ERS_FULL 0x2ull
#define NI_T3E_ERS_FULL_SR 0x3ull
#define NI_T3E_OP_SEND 0x1ull
#define NI_T3E_OP_GET 0x2ull
#define NI_T3E_OP_PUT 0x3ull
#define NI_T3E_OP_PUT4 0x4ull
#define NI_T3E_OP_PUT8 0x5ull
#define NI_T3E_OP_PUTV4 0x6ull
#define NI_T3E_OP_PUTV8 0x7ull
#define NI_T3E_OP_GETV4 0x8ull
#define NI_T3E_OP_GETV8 0x9ull
#define NI_T3E_OP_GET_INC 0xAull
#define NI_T3E_OP_GET_ADD 0xBull
#define NI_T3E_OP_SWAP 0xCull
#define NI_T3E_OP_CSWAP 0xDull
#define NI_T3E_OP_GET_SET 0xEull
#define NI_T3E_OP_GET_CLEAR 0xFull
#define NI_T3E_OP_SPUT 0x10ull
#define NI_T3E_OP_SGET 0x11ull
#define NI_T3E_FLAG_ORDERED 0x100ull
#define NI_T3E_FLAG_STT 0x200ull
#define NI_T3E_SEG_REMOTE_READ 0x100000000000000ull
#define NI_T3E_SEG_REMOTE_WRITE 0x200000000000000ull
#define NI_T3E_SEG_MESSAGE_QUEUE 0x400000000000000ull
#define NI_T3E_GVA_SEGMENT_SHIFT 0x20ull
#define NI_T3E_ERR_NONE 0x0ull
#define NI_T3E_ERR_BAD_OPCODE 0x1ull
#define NI_T3E_ERR_MISALIGNED 0x2ull
#define NI_T3E_ERR_BUSY 0x3ull
#define NI_T3E_ERR_STT 0x4ull
#define NI_T3E_ERR_NO_SUCH_PE 0x5ull
#define NI_T3E_ERR_PEER_DOWN 0x6ull
#define NI_T3E_ERR_NO_ROUTE 0x7ull
#define NI_T3E_ERR_BAD_ADDRESS 0x8ull
#define NI_T3E_ERR_BAD_SEGMENT 0x9ull
#define NI_T3E_ERR_OUT_OF_BOUNDS 0xAull
#define NI_T3E_ERR_BAD_MQCW 0xBull
#define NI_T3E_ERR_BAD_DELTA 0xCull
#define NI_T3E_ERR_BAD_ROUTER_REGISTER 0xDull
#define NI_T3E_ERR_RETURN_PATH 0xEull
#define NI_T3E_ERR_LINK_MAPPED_OUT 0xFull
#define NI_T3E_ERR_QUEUE_LOCKED 0x10ull
#define NI_T3E_R_SW 0x0ull
#define NI_T3E_R_ORIENT 0x8ull
#define NI_T3E_R_LUT_OVERRIDE 0x10ull
#define NI_T3E_R_SGET_RTRN 0x18ull
#define NI_T3E_R_ERR0 0x20ull
#define NI_T3E_R_ERR1 0x28ull
#define NI_T3E_R_PHYS 0x30ull
#define NI_T3E_R_NET_LUT 0x1000ull
#define NI_T3E_LUT_ENTRIES 0x220ull
#define NI_T3E_OVERRIDE_MODE_SHIFT 0x28ull
#define NI_T3E_ERR_DATELINE 0x0ull
#define NI_T3E_ERR_HEAD_PARITY 0x10ull
#define NI_T3E_ERR_MISROUTE 0x38ull

/* Special-routing deltas: six signed bytes, pDX pDY pDZ sDX sDY sDZ from bit 0. */
#define NI_T3E_DELTAS(px, py, pz, sx, sy, sz) \
  ((unsigned long long)(unsigned char)(px) | (unsigned long long)(unsigned char)(py) << 8 | \
   (unsigned long long)(unsigned char)(pz) << 16 | (unsigned long long)(unsigned char)(sx) << 24 | \
   (unsigned long long)(unsigned char)(sy) << 32 | (unsigned long long)(unsigned char)(sz) << 40)
/* CMD_ISSUE value. */
#define NI_T3E_ISSUE(op, ereg, flags) \
  ((unsigned long long)(op) | (unsigned long long)(flags) | (unsigned long long)(ereg) << 16)
/* GVA: segment <37:32>, offset <30:0>. */
#define NI_T3E_GVA(seg, off) ((unsigned long long)(seg) << 32 | ((unsigned long long)(off) & 0x7FFFFFFFull))
/* ERS code of E register e, from the ERS words. */
#define NI_T3E_ERS_WORD(e) (NI_T3E_ERS + 8ull * ((e) / 32))
#define NI_T3E_ERS_SHIFT(e) (2u * ((e) % 32))

#endif /* NI_T3E_H */
