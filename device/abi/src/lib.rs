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

/// The checked-in C header `include/<name>` is what `generated` says (the tests of each
/// module's `c_header`); `NI_BLESS=1 cargo test -p ni-abi` rewrites it.
#[cfg(test)]
fn check_c_header(name: &str, generated: &str) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/include");
    let path = format!("{dir}/{name}");
    if std::env::var_os("NI_BLESS").is_some() {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(&path, generated).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == generated,
        "{path} is stale: regenerate it with `NI_BLESS=1 cargo test -p ni-abi`"
    );
}
