//! The NI as a PCI function: identity, BARs, capabilities and MSI-X vectors (design.md §3.1).

/// A vendor/device pair no Linux driver claims (vendor 0x1234 is QEMU's experimental space;
/// its only claimed device, 0x1111, is the Bochs display). "NI" in ASCII.
pub const VENDOR_ID: u16 = 0x1234;
pub const DEVICE_ID: u16 = 0x4E49;
pub const SUBSYSTEM_VENDOR_ID: u16 = 0x1234;
pub const SUBSYSTEM_ID: u16 = 0x0001;
pub const REVISION: u8 = 0x01;
/// Network controller (0x02), other (0x80).
pub const CLASS_CODE: u32 = 0x02_80_00;

/// VFIO PCI region indices (`VFIO_PCI_*_REGION_INDEX`).
pub const BAR0_REGION: u32 = 0;
pub const BAR2_REGION: u32 = 2;
pub const BAR3_REGION: u32 = 3;
pub const BAR4_REGION: u32 = 4;
pub const ROM_REGION: u32 = 6;
pub const CONFIG_REGION: u32 = 7;
pub const NUM_REGIONS: u32 = 9;

/// BAR3 (32-bit, beside a 32-bit BAR2): the member's own zone of a shared partition window
/// (`crate::window::Kind::Shared`), read-write, from offset 0; the rest of the BAR is a hole.
pub const BAR3_SIZE: u64 = 2 << 20;
/// BAR4: the MSI-X table and pending-bit array below 16 MiB, the partition window
/// (`crate::window`) above — read-only to a member, whose own zone is writable in BAR3.
pub const BAR4_SIZE: u64 = 128 << 20;
pub const MSIX_TABLE_OFFSET: u64 = 0;
pub const MSIX_PBA_OFFSET: u64 = 0x800;
pub const MSIX_ENTRY_SIZE: u64 = 16;

/// PCI Express configuration space size.
pub const CONFIG_SIZE: u64 = 0x1000;

/// Capability positions: after the Lanai's own register at 0x40 (§11.1).
pub const CAP_PM: u8 = 0x48;
pub const CAP_MSIX: u8 = 0x50;
pub const CAP_EXP: u8 = 0x60;

/// MSI-X vectors: one per CM-5 interrupt colour, one for the Lanai host interrupt
/// (`REQ_ACK[0] && PCI_INT_ENABLE`), the rest for event queues.
pub mod vector {
    pub const RED: u16 = 0;
    pub const ORANGE: u16 = 1;
    pub const YELLOW: u16 = 2;
    pub const GREEN: u16 = 3;
    pub const LANAI: u16 = 4;
    pub const EVENT_QUEUE_BASE: u16 = 5;
    /// The fast path's completion ring (when armed through `CQ_ARM`).
    pub const CQ: u16 = EVENT_QUEUE_BASE;
    /// T3E message-queue threshold interrupt (IR_STATUS.MSG_ADDR_VALID).
    pub const MQ: u16 = EVENT_QUEUE_BASE + 1;
    /// SSD-T90 router error interrupt: an R_ERR0 bit enabled in R_ERR1 is set at this node's router.
    pub const ROUTER: u16 = EVENT_QUEUE_BASE + 2;
    /// An MLINK operation completed on a link whose CONFIG asks for the interrupt.
    pub const MLINK: u16 = EVENT_QUEUE_BASE + 3;
    pub const COUNT: u16 = 16;
}

/// VFIO IRQ indices (`VFIO_PCI_*_IRQ_INDEX`).
pub const INTX_IRQ_INDEX: u32 = 0;
pub const MSI_IRQ_INDEX: u32 = 1;
pub const MSIX_IRQ_INDEX: u32 = 2;
pub const ERR_IRQ_INDEX: u32 = 3;
pub const REQ_IRQ_INDEX: u32 = 4;
pub const NUM_IRQS: u32 = 5;
