/*
 * ni.h — the C interface of libni: drive an emulated NI (served by ni-device) from user space.
 *
 * Link with libni.so (-lni) or libni.a (plus -lpthread -ldl -lm -lrt -lutil -lgcc_s); with
 * pkg-config: `pkg-config --cflags --libs ni` (or `--static` for libni.a).
 *
 * Model
 *   A process attaches to one NI (ni_attach: the socket named by NI_SOCKET, which `nirun`
 *   sets) and gets its rank and the partition's size. Memory the NI may touch is allocated
 *   with ni_alloc: a region registered under a key that peers name it by. Keys are handed out
 *   in allocation order from 1 (regions and message queues alike), so processes of one
 *   program that allocate the same things in the same order know each other's keys.
 *   Transfers move bytes between regions: two-sided send/receive matched by tag,
 *   one-sided put/get into/out of a peer's region, T3E message-queue sends of 64-byte
 *   messages, and active messages that run a registered handler at the target.
 *   Collectives run in the network: vector collectives over regions (barrier, broadcast,
 *   reduce, allreduce, scan, allgather) and the CM-5 control network (combine, network-done,
 *   synchronous and asynchronous globals, participation flags).
 *
 * Conventions
 *   - Every function returns int: NI_OK (0) on success, or a negative NI_E* code.
 *     ni_strerror(code) describes a code; ni_last_error() gives the full message of the
 *     calling thread's last failure (which operation, which rank, why).
 *   - Every pointer argument is checked: NULL gives NI_EINVAL and nothing is done. The only
 *     exceptions are out-parameters documented as "may be NULL" (then not written), `ctx` of
 *     ni_am_register (passed through untouched) and `data` of ni_am_send when len is 0.
 *   - Handle-returning functions set *out to NULL first, so it is NULL on any failure.
 *   - Ranks are uint32_t and partition-relative; lengths and region offsets size_t; remote
 *     offsets, tags and masks uint64_t; timeouts uint64_t nanoseconds.
 *   - Blocking calls spin briefly, then yield, then sleep on the NI's interrupt.
 *   - An ni_t and its regions may be used from several threads at once. An ni_mq_t's
 *     ni_mq_take/ni_mq_set_head must not run concurrently on the same queue.
 *   - No libni function lets a Rust panic escape: an internal bug shows up as NI_EINTERNAL.
 *
 * Errors
 *   -1 .. -99 are the NI's completion statuses (code = -status, described as the device
 *   describes them); -100 and below are library errors. A region range (offset, len)
 *   outside the region is NI_EINVAL.
 */
#ifndef NI_H
#define NI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Error codes ------------------------------------------------------------------------ */

#define NI_OK 0
/* -1 .. -99: completion statuses reported by the NI (code = -status). */
#define NI_EPEERDOWN (-1)        /* the target NI has no client, or it went mid-operation */
#define NI_EOUTOFPARTITION (-2)  /* the rank is not in this NI's partition */
#define NI_ENOTREGISTERED (-3)   /* the local buffer is not memory mapped for the NI */
#define NI_EBADKEY (-4)          /* remote key not registered, or lacks the access asked for */
#define NI_EOUTOFBOUNDS (-5)     /* remote offset and length outside the registered region */
#define NI_EQUEUEFULL (-6)       /* message queue full (Tail = Limit); see ni_mq_send */
#define NI_EBADLENGTH (-7)       /* a zero, too large or overflowing length */
#define NI_ETRUNCATED (-8)       /* a receive buffer too small: it holds the first bytes */
#define NI_EPERM (-9)            /* reserved for the administrator (ni_reset_remote) */
#define NI_EBADOPCODE (-10)      /* the NI does not know the request */
#define NI_EBADDESCRIPTOR (-11)  /* a malformed request (e.g. an unaligned or bad MQCW) */
#define NI_ENOHANDLERRING (-12)  /* the target has no active-message ring */
#define NI_ECANCELLED (-13)      /* cancelled: this NI was reset or its partition changed */
#define NI_ECOLLISION (-14)      /* members started different collective operations */
#define NI_EABSTAINING (-15)     /* this NI abstains from the operation (or may not abstain) */
#define NI_EABSTAINCHANGED (-16) /* abstain flags changed while a combine was pending */
#define NI_ECOLLTIMEOUT (-17)    /* a collective round timed out: a member never joined */
#define NI_ELINKDOWN (-18)       /* this NI's port or the peer's is down, or no route is left */
#define NI_EOTHERHOST (-19)      /* the target NI is on another host; this operation does not cross hosts */
/* -100 and below: library errors. */
#define NI_EWOULDBLOCK (-100) /* the submission ring is full (libni normally waits for room) */
#define NI_ERESET (-101)      /* the NI was reset under this process: detach, attach again */
#define NI_ETIMEDOUT (-102)   /* ni_wait_timeout: the time ran out */
#define NI_EINVAL (-103)      /* a NULL pointer, a range outside a region, a bad argument */
#define NI_EDEVICE (-104)     /* talking to the NI failed (e.g. its socket went away) */
#define NI_ENOSOCKET (-105)   /* ni_attach: no NI to attach to (NI_SOCKET is not set) */
#define NI_EATTACH (-106)     /* the socket is not a usable NI */
#define NI_ENOMEM (-107)      /* allocating or mapping registered memory failed */
#define NI_EINTERNAL (-108)   /* a bug inside libni (a caught panic); see ni_last_error() */
#define NI_EDAEMON (-109)     /* the daemon died (within 1 s of it): restart it, attach again */
#define NI_EUNPLUGGED (-110)  /* the NI was hot-unplugged (guests): attach again once it is back */

/* ---- Constants ---------------------------------------------------------------------------- */

/* `source` of ni_recv/ni_irecv: accept a message from any rank. */
#define NI_ANY_SOURCE (-1)
/* The size of one message-queue message (and of a queue slot). */
#define NI_MQ_MESSAGE 64
/* The largest active-message payload. */
#define NI_AM_MAX_PAYLOAD 4032
/* The largest message-queue Limit. */
#define NI_MQ_MAX_LIMIT 0x1FFFFF

/* Message-queue control word (MQCW): Sig bit 63, Tail 62:42, Limit 41:21, Threshold 20:0;
 * Tail, Limit and Threshold are slot numbers from the MQCW (slot 0), messages from slot 1.
 * A send stores at slot Tail and increments it, unless Tail >= Limit (rejected); the one
 * that makes Tail equal Threshold sets Sig and raises the message-queue interrupt. */
#define NI_MQCW_SIG 0x8000000000000000ULL
#define NI_MQCW_TAIL_SHIFT 42
#define NI_MQCW_LIMIT_SHIFT 21
#define NI_MQCW_FIELD 0x1FFFFFULL
#define NI_MQCW_TAIL(w) (((uint64_t)(w) >> NI_MQCW_TAIL_SHIFT) & NI_MQCW_FIELD)
#define NI_MQCW_LIMIT(w) (((uint64_t)(w) >> NI_MQCW_LIMIT_SHIFT) & NI_MQCW_FIELD)
#define NI_MQCW_THRESHOLD(w) ((uint64_t)(w) & NI_MQCW_FIELD)
#define NI_MQCW_MAKE(sig, tail, limit, threshold)                                               \
    (((sig) ? NI_MQCW_SIG : 0) | (((uint64_t)(tail) & NI_MQCW_FIELD) << NI_MQCW_TAIL_SHIFT) | \
     (((uint64_t)(limit) & NI_MQCW_FIELD) << NI_MQCW_LIMIT_SHIFT) |                          \
     ((uint64_t)(threshold) & NI_MQCW_FIELD))

/* IR_STATUS bits (ni_ir_status/ni_ir_write). */
#define NI_IR_ENABLE 0x1ULL
#define NI_IR_MSG_ADDR_VALID 0x100000000ULL
#define NI_IR_MSG_MULTIPLE 0x200000000ULL

/* Control-network participation flags (ni_set_participation), the CM-5's abstain flags.
 * libni clears them all when it attaches (the NI comes out of reset with NI_PART_RESET). */
#define NI_PART_COM_REC_ABSTAIN 0x1u     /* abstain from combines: contribute nothing (the
                                          * identity), get no scan result, may not combine */
#define NI_PART_REDUCE_REC_ABSTAIN 0x2u  /* an abstainer also gets no reduction result (clear:
                                          * it takes them with ni_combine_receive) */
#define NI_PART_BC_REC_ABSTAIN 0x4u      /* receive no control-network broadcasts */
#define NI_PART_SYNC_GLOBAL_ABSTAIN 0x8u /* abstain from ni_sync_global (its bit counts 0) */
#define NI_PART_GLOBAL_REC_IE 0x10u      /* count rises of the asynchronous global OR
                                          * (ni_global_rises) */
#define NI_PART_RESET 0xFu               /* the flags after an NI reset */
#define NI_PART_ALL 0x1Fu                /* every flag */

/* The largest CM-5 combine, in 32-bit words. */
#define NI_COMBINE_MAX_WORDS 5

/* ---- Types ------------------------------------------------------------------------------- */

/* An attached NI. */
typedef struct ni ni_t;
/* Registered memory. */
typedef struct ni_region ni_region_t;
/* A pending non-blocking operation (from ni_isend, ni_irecv, ni_ibarrier, ni_ibroadcast,
 * ni_iallreduce). */
typedef struct ni_op ni_op_t;
/* A T3E message queue in this process's memory. */
typedef struct ni_mq ni_mq_t;

/* How an operation ended (ni_test/ni_wait/ni_wait_all/ni_wait_timeout). On failure only
 * `error` and `rank` are meaningful (the other fields are 0), except NI_ETRUNCATED: then
 * `len` is the message's full length (more than the buffer took) and `tag` its tag. */
typedef struct ni_status {
    int32_t error; /* NI_OK or the NI_E* code the operation failed with */
    uint32_t rank; /* the peer: destination of a send, source of a received message */
    uint64_t len;  /* bytes moved; a receive: the message's length */
    uint64_t tag;  /* a receive: the message's tag */
    uint64_t aux;  /* reserved (0 for sends and receives) */
} ni_status_t;

/* Where a message queue is: the key of its region and the MQCW's offset in it. */
typedef struct ni_mq_addr {
    uint32_t key;
    uint64_t offset;
} ni_mq_addr_t;

/* An active-message handler: `src` is the sender's rank, `data`/`len` the payload (valid only
 * during the call). It runs inside whichever libni call makes progress on the ni_t
 * (ni_progress, ni_wait, ni_test, most blocking calls, or ni_am_register itself for messages
 * that arrived before it), on that call's thread, with the ni_t unlocked: it may call libni
 * functions on the same ni_t, e.g. ni_am_send a reply. Handlers run one at a time, in
 * arrival order, and do not nest: messages that arrive while a handler runs (even during its
 * own libni calls) are handled after it returns, so a handler must not wait for another
 * active message. It must return normally (no longjmp, no C++ exception). */
typedef void (*ni_am_handler_t)(void *ctx, uint32_t src, const void *data, size_t len);

/* ---- Attach ------------------------------------------------------------------------------ */

/* Attach to this process's NI: the vfio-user socket named by the environment variable
 * NI_SOCKET (as `nirun` sets it); without NI_SOCKET, wherever the Rust Ni::attach looks.
 * On success *out is the new handle.
 * Errors: NI_EINVAL (out NULL), NI_ENOSOCKET (no NI found), NI_EDEVICE (cannot connect),
 * NI_EATTACH (not an NI, no partition, version mismatch), NI_ENOMEM. */
int ni_attach(ni_t **out);

/* As ni_attach, with the socket path given. Errors: as ni_attach but NI_ENOSOCKET. */
int ni_attach_path(const char *path, ni_t **out);

/* Detach and free `ni`. Pending operations are abandoned (free their ni_op_t with
 * ni_op_free). Regions and queues of `ni` stay valid to read and must still be freed with
 * ni_region_free/ni_mq_free. Errors: NI_EINVAL. */
int ni_detach(ni_t *ni);

/* This process's rank in its partition. Errors: NI_EINVAL. */
int ni_rank(const ni_t *ni, uint32_t *rank);

/* The number of ranks (NIs) in the partition. Errors: NI_EINVAL. */
int ni_size(const ni_t *ni, uint32_t *size);

/* The NI's physical number in the daemon. Errors: NI_EINVAL. */
int ni_node(const ni_t *ni, uint32_t *node);

/* ---- Regions ----------------------------------------------------------------------------- */

/* Allocate at least `len` bytes (rounded up to whole pages, zeroed) the NI may read and
 * write, registered for remote read, write and message-queue access under the next key.
 * Errors: NI_EINVAL (len 0, NULL), NI_ENOMEM, NI_EDEVICE, NI_ERESET, and any completion
 * status of the registration. */
int ni_alloc(ni_t *ni, size_t len, ni_region_t **out);

/* Flags of ni_register: what peers may do to the region. */
#define NI_REMOTE_READ 1u  /* ni_get from it */
#define NI_REMOTE_WRITE 2u /* ni_put into it */

/* Register `len` bytes of this process's own memory at `ptr` (not from ni_alloc) under the
 * next key, for what `flags` allows peers; it also serves as the local side of this process's
 * own transfers. In a guest the IOMMU maps the pages where they are. On a host the daemon can
 * only map memory given as a file, so the whole pages around the range move onto shared
 * memory at the same addresses (contents and pointers kept; a store another thread makes
 * into those pages meanwhile can be lost; a child after fork() shares them); only private
 * anonymous memory (the heap, an anonymous mmap) can be registered there: a file mapping,
 * shared memory or the calling thread's stack is NI_EINVAL. The memory must stay mapped
 * until ni_region_free. Errors: NI_EINVAL (len 0, NULL, unknown flags, memory that cannot
 * be registered), NI_ENOMEM, NI_EDEVICE (the daemon refused the mapping), and as ni_alloc. */
int ni_register(ni_t *ni, void *ptr, size_t len, uint32_t flags, ni_region_t **out);

/* Deregister and free a region. No pending operation may still use it. Errors: NI_EINVAL. */
int ni_region_free(ni_region_t *region);

/* The region's memory. The NI writes into it on receives, gets and peers' puts: read what an
 * operation delivered only after it completed. Errors: NI_EINVAL. */
int ni_region_ptr(const ni_region_t *region, void **ptr);

/* The region's length in bytes (whole pages, at least what was asked for).
 * Errors: NI_EINVAL. */
int ni_region_len(const ni_region_t *region, size_t *len);

/* The key peers name the region by (for ni_put/ni_get). Errors: NI_EINVAL. */
int ni_region_key(const ni_region_t *region, uint32_t *key);

/* ---- Send and receive -------------------------------------------------------------------- */

/* Send bytes [offset, offset+len) of `region` to rank `dest` with `tag`, and wait until a
 * matching receive has taken them (the NI copies straight into the receiver's buffer).
 * len may be 0. Errors: NI_EINVAL (NULL, range outside the region), NI_EPEERDOWN,
 * NI_EOUTOFPARTITION, NI_ENOTREGISTERED, NI_EBADLENGTH, NI_ERESET, NI_EDEVICE. */
int ni_send(ni_t *ni, uint32_t dest, const ni_region_t *region, size_t offset, size_t len,
            uint64_t tag);

/* Start the send of ni_send; finish it with ni_test/ni_wait/ni_wait_timeout. The region
 * must stay allocated, and the bytes unchanged, until then. On success *op is the pending
 * operation. Errors: as ni_send for what is detected at once. */
int ni_isend(ni_t *ni, uint32_t dest, const ni_region_t *region, size_t offset, size_t len,
             uint64_t tag, ni_op_t **op);

/* Receive into bytes [offset, offset+len) of `region` a message from rank `source` (or
 * NI_ANY_SOURCE) whose tag equals `tag` on the bits set in `mask` (mask 0 accepts any tag,
 * UINT64_MAX exactly `tag`); waits for it. Messages from one sender with one tag arrive in
 * order. On success *source_out, *tag_out and *len_out (each may be NULL) are the sender,
 * the message's tag and its length.
 * Errors: NI_EINVAL (NULL, range outside the region, source neither a rank nor -1),
 * NI_ETRUNCATED (the message was longer than len: the buffer holds its first len bytes;
 * *source_out, *tag_out and *len_out are the sender, the tag and the message's full
 * length), NI_EPEERDOWN (the named source went away), NI_EOUTOFPARTITION, NI_ERESET. On
 * other errors *tag_out and *len_out are 0. */
int ni_recv(ni_t *ni, int64_t source, const ni_region_t *region, size_t offset, size_t len,
            uint64_t tag, uint64_t mask, uint32_t *source_out, uint64_t *tag_out,
            uint64_t *len_out);

/* Start the receive of ni_recv; finish it with ni_test/ni_wait/ni_wait_timeout, whose
 * status has the sender (rank), tag and length. Errors: as ni_recv, detected at once. */
int ni_irecv(ni_t *ni, int64_t source, const ni_region_t *region, size_t offset, size_t len,
             uint64_t tag, uint64_t mask, ni_op_t **op);

/* ---- Finishing operations ---------------------------------------------------------------- */

/* Has *op finished? Makes progress (running active-message handlers) and never blocks.
 * Not yet: *done = 0, returns NI_OK, *op unchanged. Finished: *done = 1, *op is freed and
 * set to NULL, *status (may be NULL) says how it ended, and the return value is NI_OK or the
 * operation's error (e.g. NI_ETRUNCATED, NI_EPEERDOWN).
 * Errors with *done = 0 (the op is still pending and still yours): NI_EINVAL (NULL ni, op,
 * *op or done), NI_ERESET. */
int ni_test(ni_t *ni, ni_op_t **op, int *done, ni_status_t *status);

/* Wait until *op finishes. Frees *op and sets it to NULL, then fills *status (may be NULL).
 * Returns NI_OK or the operation's error (e.g. NI_ETRUNCATED, NI_EPEERDOWN, NI_ERESET).
 * Errors: NI_EINVAL (ni, op or *op NULL: nothing is freed). */
int ni_wait(ni_t *ni, ni_op_t **op, ni_status_t *status);

/* Wait until every op of ops[0..n] finishes (MPI_Waitall): frees each and sets it to NULL
 * (NULL entries are skipped, their status zeroed), fills statuses[i] (statuses may be NULL)
 * for each, and returns NI_OK or the error of the first op, in array order, that failed.
 * Ops that finished already finish together, under one lock: cheaper than n ni_wait calls.
 * Errors: NI_EINVAL (ni NULL, ops NULL with n > 0, or one op in ops twice: nothing is
 * freed). */
int ni_wait_all(ni_t *ni, ni_op_t **ops, size_t n, ni_status_t *statuses);

/* As ni_wait, for at most timeout_ns nanoseconds: NI_ETIMEDOUT if the time ran out. *op is
 * freed and set to NULL in every case but NI_EINVAL (as ni_wait). A timed-out operation is
 * abandoned: its completion will be discarded, but the NI still carries it out (a receive
 * may still fill its buffer). ni_wait_timeout(ni, &op, 0, NULL) therefore abandons an op. */
int ni_wait_timeout(ni_t *ni, ni_op_t **op, uint64_t timeout_ns, ni_status_t *status);

/* Give up on *op without waiting: its completion, now or later, is discarded (the NI still
 * carries the operation out: a receive may still fill its buffer). Frees *op and sets it to
 * NULL. Errors: NI_EINVAL (ni, op or *op NULL: nothing is freed). */
int ni_forget(ni_t *ni, ni_op_t **op);

/* Free an op handle without finishing it. Meant for ops left pending at ni_detach; on a live
 * ni_t use ni_forget so its completion is discarded. Errors: NI_EINVAL. */
int ni_op_free(ni_op_t *op);

/* Take every completion the NI has written and run active-message handlers. *count (may be
 * NULL) is how many completions were taken. Errors: NI_EINVAL, NI_ERESET. */
int ni_progress(ni_t *ni, size_t *count);

/* ---- One-sided, ping ---------------------------------------------------------------------- */

/* MLINK WRITE: bytes [offset, offset+len) of `region` into rank `dest`'s region `key` at
 * `remote_offset`; returns once they are there. Errors: NI_EINVAL, NI_EPEERDOWN,
 * NI_EOUTOFPARTITION, NI_EBADKEY, NI_EOUTOFBOUNDS, NI_EBADLENGTH, NI_ENOTREGISTERED,
 * NI_ERESET. */
int ni_put(ni_t *ni, uint32_t dest, const ni_region_t *region, size_t offset, size_t len,
           uint32_t key, uint64_t remote_offset);

/* MLINK READ: rank `dest`'s region `key` at `remote_offset` into bytes [offset, offset+len)
 * of `region`; returns once they are here. Errors: as ni_put. */
int ni_get(ni_t *ni, uint32_t dest, ni_region_t *region, size_t offset, size_t len,
           uint32_t key, uint64_t remote_offset);

/* MLINK NOOP: NI_OK if rank `dest`'s NI is up (has a client), NI_EPEERDOWN if not.
 * Errors: NI_EINVAL, NI_EPEERDOWN, NI_EOUTOFPARTITION, NI_ERESET. */
int ni_ping(ni_t *ni, uint32_t dest);

/* MLINK RESET of a remote NI: reserved for the administrator (ni-ctl); always NI_EPERM. */
int ni_reset_remote(ni_t *ni, uint32_t dest);

/* ---- Active messages ---------------------------------------------------------------------- */

/* Run f(ctx, src, data, len) for every active message sent to handler index `handler`
 * (replacing an earlier registration). Messages that arrived before are delivered now, from
 * within this call. `ctx` may be NULL; libni only passes it to f. See ni_am_handler_t for
 * what f may not do. Errors: NI_EINVAL (ni or f NULL). */
int ni_am_register(ni_t *ni, uint64_t handler, ni_am_handler_t f, void *ctx);

/* MLINK ROP: run handler `handler` at rank `dest` on `len` bytes at `data` (at most
 * NI_AM_MAX_PAYLOAD; data may be NULL when len is 0). Returns once the message is in the
 * target's active-message ring; the handler runs when the target makes progress.
 * Errors: NI_EINVAL (too long, NULL), NI_EPEERDOWN, NI_EOUTOFPARTITION, NI_ENOHANDLERRING,
 * NI_ERESET. */
int ni_am_send(ni_t *ni, uint32_t dest, uint64_t handler, const void *data, size_t len);

/* ---- Message queues (T3E) ----------------------------------------------------------------- */

/* A message queue of `limit` slots (1..NI_MQ_MAX_LIMIT) in a fresh region (which takes the
 * next key): MQCW Tail 1, Limit `limit`, Threshold `threshold`, so it holds limit-1
 * messages. Errors: NI_EINVAL (bad limit, NULL), and as ni_alloc. */
int ni_mq_create(ni_t *ni, uint64_t limit, uint64_t threshold, ni_mq_t **out);

/* Free a queue and deregister its region. Errors: NI_EINVAL. */
int ni_mq_free(ni_mq_t *mq);

/* Where peers send to: pass it (e.g. by message, or known by symmetry) to ni_mq_send.
 * Errors: NI_EINVAL. */
int ni_mq_addr(const ni_mq_t *mq, ni_mq_addr_t *addr);

/* The MQCW's address as the NI names it: what ni_ir_status's msg_addr reports after this
 * queue hit its threshold. Errors: NI_EINVAL. */
int ni_mq_iova(const ni_mq_t *mq, uint64_t *iova);

/* The queue's current control word (decode with NI_MQCW_TAIL etc.). Errors: NI_EINVAL. */
int ni_mq_mqcw(const ni_mq_t *mq, uint64_t *word);

/* The software reset: atomically store `new_word` as the MQCW; *old (may be NULL) is the
 * word it replaced, whose Tail says how far to drain. Follow with ni_mq_set_head when the new
 * word restarts the queue. Errors: NI_EINVAL. */
int ni_mq_swap(ni_mq_t *mq, uint64_t new_word, uint64_t *old);

/* Copy up to `max` stored, not yet taken messages (NI_MQ_MESSAGE bytes each, oldest first)
 * into `out` (max * NI_MQ_MESSAGE bytes; may be NULL only if max is 0) and advance the
 * software head pointer past them; *count is how many were copied (0 if none is waiting).
 * Errors: NI_EINVAL (mq or count NULL, out NULL with max > 0). */
int ni_mq_take(ni_mq_t *mq, void *out, size_t max, size_t *count);

/* Set the software head pointer: the slot ni_mq_take reads next (1 after ni_mq_create).
 * Errors: NI_EINVAL. */
int ni_mq_set_head(ni_mq_t *mq, uint64_t slot);

/* T3E SEND: store the NI_MQ_MESSAGE bytes at `msg` into rank `dest`'s queue at `addr`.
 * Returns NI_OK both when the message was stored (*accepted = 1, *tail (may be NULL) = the
 * queue's Tail after the store) and when the queue was full (*accepted = 0: rejected,
 * ERS FULL_SR; nothing stored; retry later).
 * Errors: NI_EINVAL (NULL ni, msg or accepted), NI_EPEERDOWN, NI_EOUTOFPARTITION,
 * NI_EBADKEY (no queue region under that key), NI_EOUTOFBOUNDS, NI_EBADDESCRIPTOR (bad
 * MQCW), NI_ERESET. */
int ni_mq_send(ni_t *ni, uint32_t dest, ni_mq_addr_t addr, const void *msg, int *accepted,
               uint64_t *tail);

/* T3E IR_STATUS (NI_IR_MSG_ADDR_VALID: a queue hit its threshold, MSG_ADDR holds its MQCW
 * address; NI_IR_MSG_MULTIPLE: more than one did) and MSG_ADDR. Each out-parameter may be
 * NULL. Errors: NI_EINVAL, NI_EDEVICE. */
int ni_ir_status(ni_t *ni, uint64_t *status, uint64_t *msg_addr);

/* Write IR_STATUS: enable (non-zero) or disable the threshold interrupt, and clear the bits
 * of NI_IR_MSG_ADDR_VALID | NI_IR_MSG_MULTIPLE set in `clear`. Errors: NI_EINVAL,
 * NI_EDEVICE. */
int ni_ir_write(ni_t *ni, int enable, uint64_t clear);

/* Wait up to timeout_ns for the message-queue threshold interrupt (enabled with
 * ni_ir_write); *fired (may be NULL) is 1 if it came, 0 if the time ran out.
 * Errors: NI_EINVAL. */
int ni_wait_mq_interrupt(ni_t *ni, uint64_t timeout_ns, int *fired);

/* ---- Collectives ------------------------------------------------------------------------- */

/* Every member of the partition makes the same collective calls in the same order, with the
 * same kind, dtype, op, count and root; members that disagree all fail with NI_ECOLLISION.
 * A collective completes on a member once every member has joined; one that never joins
 * makes the others fail with NI_ECOLLTIMEOUT. Combining runs in rank order, so every member
 * gets the same bits (also for floats).
 *
 * Buffers are regions: `offset` is a byte offset into the region, `count` a number of
 * elements of `dtype`; send and receive ranges may be the same place. The non-blocking
 * variants return a pending op (finish it with ni_test/ni_wait; the regions must stay
 * allocated and the send data unchanged until then); of its ni_status_t only `error` is
 * meaningful. Where the partition has a window, a blocking collective of a vector larger
 * than a window slot runs member to member (in pieces, or through the members' exported
 * memory, as libni's Rust API runs it); a non-blocking one of that size is one operation
 * of the device's, which moves it while the program computes: pieces would move only when
 * the program called into the NI, and a member that computed longer than the partition's
 * collective timeout between start and wait would make the others fail.
 *
 * Errors common to them: NI_EINVAL (NULL, a range outside a region, an unknown dtype or
 * op), NI_EBADDESCRIPTOR (a bitwise op on floats), NI_EBADLENGTH (too much data),
 * NI_EOUTOFPARTITION (root not a rank), NI_EPEERDOWN (a member has no process),
 * NI_ECOLLISION, NI_ECOLLTIMEOUT, NI_ECANCELLED, NI_ERESET. */

/* Element types. */
typedef enum ni_dtype {
    NI_I32 = 0, /* int32_t */
    NI_U32 = 1, /* uint32_t */
    NI_I64 = 2, /* int64_t */
    NI_U64 = 3, /* uint64_t */
    NI_F32 = 4, /* float */
    NI_F64 = 5  /* double */
} ni_dtype_t;

/* Reduction operators: floats take NI_SUM, NI_PROD, NI_MIN, NI_MAX; the bitwise ones are for
 * the integer types. */
typedef enum ni_redop {
    NI_SUM = 0,
    NI_PROD = 1,
    NI_MIN = 2,
    NI_MAX = 3,
    NI_AND = 4,
    NI_OR = 5,
    NI_XOR = 6
} ni_redop_t;

/* Barrier over the partition, done in the network. */
int ni_barrier(ni_t *ni);

/* Start a barrier; *op is the pending operation. */
int ni_ibarrier(ni_t *ni, ni_op_t **op);

/* Every member's `count` elements at byte `offset` of `region` get rank `root`'s. */
int ni_broadcast(ni_t *ni, uint32_t root, ni_dtype_t dtype, ni_region_t *region, size_t offset,
                 size_t count);

/* Start the broadcast of ni_broadcast; *op is the pending operation. */
int ni_ibroadcast(ni_t *ni, uint32_t root, ni_dtype_t dtype, ni_region_t *region, size_t offset,
                  size_t count, ni_op_t **op);

/* Reduce `count` elements of every member's `send` into rank `root`'s `recv`. `recv` is used
 * only at the root and may be NULL elsewhere. */
int ni_reduce(ni_t *ni, uint32_t root, ni_dtype_t dtype, ni_redop_t redop, const ni_region_t *send,
              size_t send_offset, ni_region_t *recv, size_t recv_offset, size_t count);

/* Every member's `recv` gets the reduction of all members' `send` (`count` elements). */
int ni_allreduce(ni_t *ni, ni_dtype_t dtype, ni_redop_t redop, const ni_region_t *send,
                 size_t send_offset, ni_region_t *recv, size_t recv_offset, size_t count);

/* Start the allreduce of ni_allreduce; *op is the pending operation. */
int ni_iallreduce(ni_t *ni, ni_dtype_t dtype, ni_redop_t redop, const ni_region_t *send,
                  size_t send_offset, ni_region_t *recv, size_t recv_offset, size_t count,
                  ni_op_t **op);

/* Prefix reduction: inclusive (non-zero: rank i gets ranks 0..i) or exclusive (0: ranks
 * 0..i-1; rank 0 gets the identity). */
int ni_scan(ni_t *ni, ni_dtype_t dtype, ni_redop_t redop, int inclusive, const ni_region_t *send,
            size_t send_offset, ni_region_t *recv, size_t recv_offset, size_t count);

/* Every member's `recv` gets all members' `count` elements, in rank order: it holds
 * size * count elements. */
int ni_allgather(ni_t *ni, ni_dtype_t dtype, const ni_region_t *send, size_t send_offset,
                 ni_region_t *recv, size_t recv_offset, size_t count);

/* ---- CM-5 control network ----------------------------------------------------------------- */

/* Combine patterns. A scan gives member i the combination of the members before it in its
 * direction (exclusive: ranks below i forward, above i backward; the first gets the
 * identity); scan_start makes a member begin a new segment. */
typedef enum ni_pattern {
    NI_PATTERN_SCAN_BACKWARD = 1,
    NI_PATTERN_SCAN_FORWARD = 2,
    NI_PATTERN_REDUCE = 3
} ni_pattern_t;

/* Combiners (there is no AND, MIN or unsigned max on the CM-5). The words of a combine form
 * one number: least significant word first for the adds, most significant first for MAX. */
typedef enum ni_combiner {
    NI_COMBINER_OR = 0,
    NI_COMBINER_ADD = 1, /* signed add */
    NI_COMBINER_XOR = 2,
    NI_COMBINER_UADD = 3, /* unsigned add */
    NI_COMBINER_MAX = 4   /* signed max */
} ni_combiner_t;

/* Combine `len` (1..NI_COMBINE_MAX_WORDS) 32-bit words at `in` with every member's. When
 * this member gets a result (*has_result = 1; an abstainer's scan gets none), it goes to
 * `out` (len words; may be `in`); otherwise `out` is not written. *overflow is 1 when an
 * add's exact result does not fit the words (com_scan_overflow). out, overflow and
 * has_result may be NULL. Errors: NI_EINVAL (NULL ni or in, bad len, pattern or combiner),
 * NI_EBADDESCRIPTOR (a pattern, combiner and length the control network does not do),
 * NI_EABSTAINING (this member abstains: NI_PART_COM_REC_ABSTAIN), NI_ECOLLISION (members
 * started different combines: all fail until every member calls ni_combine_flush),
 * NI_EPEERDOWN (a member has no process), NI_ECANCELLED, NI_ECOLLTIMEOUT, NI_ERESET. */
int ni_combine(ni_t *ni, ni_pattern_t pattern, ni_combiner_t combiner, const uint32_t *in,
               uint32_t *out, size_t len, int scan_start, int *overflow, int *has_result);

/* An abstainer (NI_PART_COM_REC_ABSTAIN set, NI_PART_REDUCE_REC_ABSTAIN clear) takes the
 * next reduction result of `len` words without contributing; out, overflow and has_result
 * as for ni_combine. Errors: as ni_combine. */
int ni_combine_receive(ni_t *ni, uint32_t *out, size_t len, int *overflow, int *has_result);

/* Network-done: returns on every member once all non-abstainers have called it and every
 * message sent in the partition has been received. Errors: as ni_combine. */
int ni_network_done(ni_t *ni);

/* Synchronous global: a barrier; *result (may be NULL) is the OR of every member's `bit`
 * (non-zero is 1). Errors: NI_EINVAL, NI_EABSTAINING (NI_PART_SYNC_GLOBAL_ABSTAIN is set),
 * NI_ECOLLTIMEOUT, NI_ERESET. */
int ni_sync_global(ni_t *ni, int bit, int *result);

/* Asynchronous global: set this member's bit (non-zero is 1); ni_global_rec follows the OR
 * of all members' bits. Errors: NI_EINVAL, NI_ERESET. */
int ni_set_async_global(ni_t *ni, int bit);

/* The asynchronous global OR, as the NI last published it: *value is 0 or 1.
 * Errors: NI_EINVAL. */
int ni_global_rec(ni_t *ni, int *value);

/* How often the asynchronous global OR rose from 0 to 1 while NI_PART_GLOBAL_REC_IE was set
 * (the CM-5's global rec interrupt), as seen by progress. Errors: NI_EINVAL, NI_ERESET. */
int ni_global_rises(ni_t *ni, uint64_t *count);

/* Set the participation (abstain) flags: NI_PART_* ORed together (0: take part in
 * everything). Errors: NI_EINVAL (flags outside NI_PART_ALL), NI_EABSTAINCHANGED (the
 * combine abstain flags may not change while this member has a combine pending; nothing
 * changed), NI_ERESET. */
int ni_set_participation(ni_t *ni, uint32_t flags);

/* Combine flush: every member calls it; clears a combine collision (pending combines fail
 * with NI_ECANCELLED). Errors: NI_EINVAL, NI_EABSTAINING (NI_PART_COM_REC_ABSTAIN is set),
 * NI_ECOLLTIMEOUT, NI_ERESET. */
int ni_combine_flush(ni_t *ni);

/* ---- Error messages ----------------------------------------------------------------------- */

/* A static description of an NI_* code (never NULL; "unknown libni error code" otherwise). */
const char *ni_strerror(int code);

/* The full message of the calling thread's last failed libni call, e.g.
 * "ni_send: send to/from rank 1: peer down: ...". Valid until this thread's next failing
 * libni call; "no error" before any failure. Successful calls leave it unchanged. */
const char *ni_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* NI_H */
