//! Per-NI error and event counters, readable through the control socket.

macro_rules! counters {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {
        #[derive(Clone, Debug, Default)]
        pub struct Counters { $($(#[$m])* pub $name: u64,)* }
        impl Counters {
            /// Name/value pairs in declaration order.
            pub fn list(&self) -> Vec<(String, u64)> {
                vec![$((stringify!($name).to_string(), self.$name),)*]
            }
        }
    };
}

counters! {
    /// Clients that attached to this NI.
    attaches,
    /// Sessions ended because the client sent what the protocol layer could not parse.
    malformed_sessions,
    /// Function-level, vfio-user and NI resets.
    resets,
    /// Region accesses refused: unknown region, past its end, bad width.
    bad_accesses,
    /// BAR accesses while Memory Space Enable was clear (all-ones / dropped).
    decode_disabled,
    /// Accesses inside a register window that hit no register.
    unmapped_register,
    dma_maps,
    dma_unmaps,
    /// DMA_MAP / DMA_UNMAP requests refused.
    dma_map_errors,
    /// Device accesses to client memory outside its mappings.
    dma_faults,
    /// DRD chains abandoned because they never end.
    dma_chain_aborts,
    /// SET_IRQS requests refused.
    irq_errors,
    /// CM-5 Bus Errors (reported as bad_memory_access).
    bus_errors,
    /// CM-5 messages discarded by a locked interface.
    cm5_discarded_sends,
    msix_sent,
    intx_sent,
    /// MSI-X messages held back (bus mastering off, vector masked, no eventfd).
    msix_held,
}
