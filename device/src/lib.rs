//! `ni-device`: the NI device model and the daemon that serves it over vfio-user.
//!
//! Layout follows the hardware: [`pci`] is the PCI function, [`lanai`] the Lanai X behind
//! BAR0, [`cm5`] the CM-5 NI register file behind BAR2, [`t3e`] the E registers and [`mlink`] the
//! MLINK block in pages of BAR0, [`dma`] the path to client memory,
//! [`irq`] interrupt delivery, [`ni`] one NI tying them together, [`server`] the vfio-user
//! sessions, [`daemon`] and [`control`] the process around them.

pub mod cm5;
pub mod control;
pub mod counters;
pub mod daemon;
pub mod dma;
pub mod fabric;
pub mod handover;
pub mod irq;
pub mod lanai;
pub mod link;
pub mod mlink;
pub mod ni;
pub mod pci;
pub mod regfile;
pub mod server;
pub mod sram;
pub mod t3e;
