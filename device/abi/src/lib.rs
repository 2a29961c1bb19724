//! The NI's binary contracts, shared by the device model (`ni-device`), the user-space
//! driver (`libni`) and the administrator's tool (`ni-ctl`).
//!
//! Nothing outside this crate spells a register offset, a bit position or a descriptor
//! layout: they all come from here, named as the seed documents name them.

pub mod cm5;
pub mod control;
pub mod fastpath;
pub mod lanai;
pub mod mlink;
pub mod pci;
pub mod reduce;
pub mod regs;
pub mod t3e;
pub mod vfio_user;
pub mod window;
