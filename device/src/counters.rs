//! Per-NI error and event counters, readable through the control socket.

macro_rules! counters {
    ($(#[$sm:meta])* $ty:ident { $($(#[$m:meta])* $name:ident),* $(,)? }) => {
        $(#[$sm])*
        #[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
        #[serde(default)]
        pub struct $ty { $($(#[$m])* pub $name: u64,)* }
        impl $ty {
            /// Name/value pairs in declaration order.
            pub fn list(&self) -> Vec<(String, u64)> {
                vec![$((stringify!($name).to_string(), self.$name),)*]
            }
        }
    };
}

counters! {
    /// The device model's counters of one NI: attachment, register and DMA errors, interrupts.
    Counters {
    /// Clients that attached to this NI.
    attaches,
    /// Sessions ended because the client broke the vfio-user protocol (a header that cannot
    /// be trusted: a size beyond its command's limit, a reply where a command belongs).
    malformed_sessions,
    /// vfio-user messages refused for a body that does not decode (the session goes on).
    malformed_messages,
    /// Clients turned away because the NI could not reserve what their detach will need.
    attach_refused,
    /// Function-level, vfio-user and NI resets.
    resets,
    /// Region accesses refused: unknown region, past its end, bad width.
    bad_accesses,
    /// BAR accesses while Memory Space Enable was clear (all-ones / dropped).
    decode_disabled,
    /// Accesses inside a register window that hit no register.
    unmapped_register,
    /// Trapped writes to a part of the partition window this client does not own (the
    /// device page, a peer's zone): refused, as its mappings refuse them.
    window_write_refused,
    dma_maps,
    dma_unmaps,
    /// DMA_MAP / DMA_UNMAP requests refused.
    dma_map_errors,
    /// DMA_UNMAP requests that covered nothing mapped (success, as kernel VFIO answers).
    dma_unmap_empty,
    /// Device accesses to client memory outside its mappings.
    dma_faults,
    /// DRD chains abandoned because they never end.
    dma_chain_aborts,
    /// SET_IRQS requests refused.
    irq_errors,
    /// CM-5 Bus Errors (reported as bad_memory_access).
    bus_errors,
    /// CM-5 messages discarded at send_first: a locked interface, a full send FIFO, a bad
    /// relative address, a Bus Error (§2.3, §2.5.1).
    cm5_discarded_sends,
    /// CM-5 Data Network messages this NI's registers sent whole, and received whole.
    cm5_dr_sends,
    cm5_dr_recvs,
    /// CM-5 Data Network messages the fabric dropped: a physical address outside the
    /// sender's partition, or no link to it (ports down, no route).
    cm5_dr_dropped,
    /// CM-5 combines (and network-dones) this NI's registers sent whole; combine results
    /// dropped because the COM receive FIFO was full.
    cm5_combines,
    cm5_com_overruns,
    /// CM-5 broadcasts (BC, SBC) this NI sent to its partition and received; members a
    /// broadcast or broadcast interrupt could not reach (their port down); broadcast
    /// interrupts sent (§4.1, §5.5).
    cm5_bc_sends,
    cm5_bc_recvs,
    cm5_bc_unreached,
    cm5_bc_interrupts,
    /// Lanai packet interface (§9, §10): packets this NI's ports sent and received whole;
    /// packets dropped at a receiving port (no buffer, shorter than 5 bytes, §9.4 — also in
    /// the seed's Z* registers, which PCI cannot read); packets the crossbar could not route
    /// (a route byte naming no rank of the partition, no carrier or port disabled there);
    /// packets held by flow control longer than the crossbar's timeout and dropped;
    /// packets retired unsent because an SPD pointed outside SRAM; SEND writes to a full
    /// FIFO; packets discarded by SEND_FLUSH; receive buffers refused (outside SRAM, a third
    /// one issued).
    lanai_packets_sent,
    lanai_packets_received,
    lanai_rx_dropped,
    lanai_route_dropped,
    lanai_blocked_dropped,
    lanai_send_faults,
    lanai_send_overflows,
    lanai_send_flushed,
    lanai_bad_buffers,
    /// COPY engine (§8): copies done, their bytes, and copies refused (outside SRAM).
    lanai_copies,
    lanai_copy_bytes,
    lanai_copy_faults,
    /// T3E E-register commands (HMM-148-0 Table 1): issued; refused at issue (bad opcode,
    /// STT, misaligned block, a register still EMPTY, too many in flight); STOREs into a
    /// register whose command is in flight (ignored); LOADs of an EMPTY register (the old
    /// value: a trapped read cannot stall).
    t3e_issued,
    t3e_refused,
    t3e_store_busy,
    t3e_load_empty,
    /// MLINK (§11.2): launches refused (bad launch registers, or the link BUSY); operations
    /// aborted; ABORTs with nothing in flight.
    mlink_refused,
    mlink_aborts,
    mlink_abort_idle,
    /// Fast-path doorbell writes (the poller was asleep).
    doorbells,
    msix_sent,
    intx_sent,
    /// MSI-X messages held back (bus mastering off, vector masked, no eventfd).
    msix_held,
}
}

counters! {
    /// The fabric's counters of one NI: traffic it sent and received, and why requests failed.
    FabricCounters {
    /// Requests taken from the submission ring.
    requests,
    sends,
    send_bytes,
    recvs,
    recv_bytes,
    puts,
    put_bytes,
    gets,
    get_bytes,
    /// MLINK ROP (active messages) sent, and those delivered here.
    rops,
    rops_delivered,
    noops,
    /// T3E SENDs issued; arrivals stored here; arrivals rejected here (Tail = Limit).
    mq_sends,
    mq_stored,
    mq_rejected,
    /// Threshold hits: Sig set, IR_STATUS latched.
    mq_threshold,
    /// SENDs of this NI that found their queue's arrival lock held (exported queues,
    /// fastpath.md "Message queues in the window") and waited; those that waited past the
    /// daemon's lock timeout; locks of this NI's queues freed because their holder was gone.
    mq_lock_waits,
    mq_lock_timeouts,
    mq_lock_breaks,
    /// CM-5 combines (scans, reductions, network-done) this NI joined; network-dones done.
    combines,
    network_done,
    /// Vector collectives joined, and the bytes of this NI's contribution.
    collectives,
    collective_bytes,
    sync_globals,
    /// Control-network rounds that failed for a member driving the CM-5 registers
    /// (timeout, collision, a member gone): its registers show completion, with no result.
    coll_failed_registers,
    /// The direct path (partition window), as the client reports it in its window line:
    /// messages and bytes whose payload it sent there (also counted in `sends` and
    /// `send_bytes`, as its receptions are in `recvs` and `recv_bytes`), collectives it did
    /// there, ring words from peers it refused as malformed (and large collectives whose
    /// records named places no honest member names).
    window_sends,
    window_bytes,
    window_collectives,
    window_ring_errors,
    /// Active messages this NI's client sent through the window (also counted in `rops`;
    /// the target's client counts those it took in its `rops_delivered`).
    window_ams,
    /// MLINK WRITEs and READs this NI's client did itself in peers' exported regions (also
    /// counted in `puts`, `gets` and their bytes).
    window_puts,
    window_gets,
    /// T3E SENDs this NI's client stored into peers' exported queues itself (also counted in
    /// `mq_sends`; the targets count them in `mq_stored` or `mq_rejected`).
    window_mq_sends,
    /// Allreduces too large for the window's slots that this NI's client did through the
    /// members' exported scratch (also counted in `collectives` and `collective_bytes`).
    window_large_allreduces,
    /// Of those, the ones whose data the other members read in this client's send buffer
    /// (an `alloc` region apart from its receive buffer) instead of a copy in its scratch.
    window_large_allreduces_in_place,
    /// Broadcasts too large for the window's slots whose vector this NI's client read from
    /// the root's exported memory, or (at the root) let the others read (also counted in
    /// `collectives` and `collective_bytes`).
    window_large_bcasts,
    /// Reduces too large for the window's slots done through the members' exported memory
    /// (also counted in `collectives` and `collective_bytes`).
    window_large_reduces,
    /// Allgathers too large for the window's slots whose members copied each other's vectors
    /// from their exported memory (also counted in `collectives` and `collective_bytes`).
    window_large_allgathers,
    /// Scans too large for the window's slots whose members reduced the earlier members'
    /// vectors from their exported memory (also counted in `collectives` and
    /// `collective_bytes`).
    window_large_scans,
    /// Of the large allreduces and scans, those in which this NI's client wrote its part of
    /// the result straight into every member's receive buffer (all exported), so that nobody
    /// copied a result out (also counted in `window_large_allreduces` or `_scans`).
    window_large_pushed,
    /// Rendezvous messages (larger than the ring's eager ones) this NI's client received by
    /// copying their payload itself out of the sender's exported region, and their bytes
    /// (also counted in `recvs` and `recv_bytes`).
    window_reads,
    window_read_bytes,
    /// Mappings of peers' exported regions this NI's client was handed, and refused.
    exports,
    exports_refused,
    /// WAKE requests this NI sent for window peers that were blocked.
    wakes,
    completions,
    /// Completions held back because the client's ring was full (none is dropped).
    cq_full_waits,
    cq_interrupts,
    err_peer_down,
    err_out_of_partition,
    err_not_registered,
    err_bad_key,
    err_out_of_bounds,
    err_queue_full,
    err_bad_length,
    err_truncated,
    err_permission,
    err_bad_opcode,
    err_bad_descriptor,
    err_no_handler_ring,
    err_cancelled,
    err_collision,
    err_abstaining,
    err_abstain_changed,
    err_timeout,
    /// Requests refused because this NI's port or the peer's was down, or no route was left.
    err_link_down,
    /// Requests for an NI on another host that do not cross hosts (links.md).
    err_other_host,
    /// Port 0, the NI's link onto the fabric (Lanai X port): data-network packets (messages,
    /// put/get data, active messages, T3E SENDs; collectives travel the control network) and
    /// their payload bytes, out and in.
    p0_packets_sent,
    p0_bytes_sent,
    p0_packets_rcvd,
    p0_bytes_rcvd,
    /// Operations refused because this port was down, whichever end asked.
    p0_link_refused,
    /// Times the link went down (InfiniBand's IB_LDC, "link downed", counted in every mode).
    p0_link_downed,
    /// Lanai BUFFER_DROP: packets dropped for want of a receive buffer. Always 0: the fabric
    /// holds a message until it can be delivered instead.
    p0_buffer_drop,
    /// Hops through the SSD-T90 torus travelled by the packets this NI sent.
    route_hops,
    /// T3E E-register commands carried out by the network: SENDs (also in `mq_sends`),
    /// commands that ended FULL_F, special-routing SPUTs and SGETs done.
    t3e_sends,
    t3e_failed,
    t3e_sputs,
    t3e_sgets,
    /// SSD-T90 R_ERR0 bits latched at this NI's router (dateline violations, misroutes).
    router_errors,
    /// MLINK operations launched from here, and how they ended: ACK, NACK, or refused by
    /// the network (no such target, no client there, a port down, no route).
    mlink_ops,
    mlink_acks,
    mlink_nacks,
    mlink_unreachable,
    /// Where they arrived: headers and data that failed their checksum; at the target: ROPs queued in the
    /// register queue, ROPs refused for a full queue, remote boots (RESETs that released
    /// this node).
    mlink_header_errors,
    mlink_data_errors,
    mlink_rops_queued,
    mlink_queue_full,
    mlink_boots,
    /// The client published more requests than the ring holds.
    sq_overruns,
    /// Completions that could not be written (no ring set up, ring unmapped).
    cq_lost,
    }
}
