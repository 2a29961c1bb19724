//! A CM-5 driver's small steps over BAR2 (NI Programmer's Handbook), shared by the tests that
//! drive the register file: `cm5.rs` and `cm5_hostile.rs`.

use vfio_user::Client;

use super::{cm5_read, cm5_write, enable, poll_until};
use ni_abi::cm5::{self, cause, iface, status};

pub const LDR_SEND: u32 = cm5::LDR_BASE + iface::SEND;
pub const LDR_RECV: u32 = cm5::LDR_BASE + iface::RECV;
pub const LDR_STATUS: u32 = cm5::LDR_BASE + iface::STATUS;
pub const LDR_PRIVATE: u32 = cm5::LDR_BASE + iface::PRIVATE;
pub const COM_SEND: u32 = cm5::COM_BASE + iface::SEND;
pub const COM_RECV: u32 = cm5::COM_BASE + iface::RECV;
pub const COM_STATUS: u32 = cm5::COM_BASE + iface::STATUS;
pub const COM_CONTROL: u32 = cm5::COM_BASE + iface::CONTROL;

/// `send_first` address of the LDR short form (App. A.3): aux = md[8] tag[7:4] length[3:0].
pub fn ldr_send_first(physical: bool, tag: u32, len: u32) -> u32 {
    (cm5::fifo::LEFT_DR << cm5::SF_FIFO_OFFSET)
        + ((((physical as u32) << 8) | (tag << 4) | len) << cm5::AUXILIARY_START_P)
}

/// COM `send_first` (App. A.3): aux = pattern[8:7] combiner[6:4] length[3:0].
pub fn com_send_first(pattern: u32, combiner: u32, len: u32) -> u32 {
    (cm5::fifo::COMBINE << cm5::SF_FIFO_OFFSET)
        + (((pattern << 7) | (combiner << 4) | len) << cm5::AUXILIARY_START_P)
}

/// Memory decode on; wait until the daemon (as the OS, §6.3) programmed the partition
/// registers; then unlock LDR, RDR and DR (NI Reset leaves every interface locked, §6.10).
pub fn ready(c: &mut Client, size: u32) {
    enable(c);
    poll_until("partition registers never set", || {
        cm5_read(c, true, cm5::NI_PARTITION_SIZE) == size
    });
    for i in [cm5::LDR_BASE, cm5::RDR_BASE, cm5::DR_BASE] {
        cm5_write(c, true, i + iface::PRIVATE, 0);
    }
}

/// §8.1.3: write the whole message, check send_ok once.
pub fn send(c: &mut Client, dest: u32, tag: u32, words: &[u32]) -> bool {
    cm5_write(
        c,
        false,
        ldr_send_first(false, tag, words.len() as u32),
        dest,
    );
    for &w in words {
        cm5_write(c, false, LDR_SEND, w);
    }
    cm5_read(c, false, LDR_STATUS) & status::SEND_OK != 0
}

/// §8.1.3's loop: the whole message again until send_ok says it was taken.
pub fn send_until_taken(c: &mut Client, dest: u32, tag: u32, words: &[u32]) {
    poll_until(
        &format!("a tag-{tag} message to {dest} never taken"),
        || send(c, dest, tag, words),
    );
}

/// Take part in combines and sync global (§2.7.2, §4.2.10, §4.3.1). Sync global first: a
/// member's first control-network event makes it one the partition waits for, and by then
/// its flags must already say it takes part.
pub fn join_control(c: &mut Client) {
    cm5_write(c, false, cm5::NI_SYNC_GLOBAL_ABSTAIN, 0);
    cm5_write(c, true, cm5::COM_BASE + iface::PRIVATE, 0);
    cm5_write(c, false, COM_CONTROL, 0);
}

/// A combine (§4.2.12): send_first with the first word, the rest, then send_ok.
pub fn combine_send(c: &mut Client, pattern: u32, combiner: u32, words: &[u32]) -> bool {
    cm5_write(
        c,
        false,
        com_send_first(pattern, combiner, words.len() as u32),
        words[0],
    );
    for &w in &words[1..] {
        cm5_write(c, false, COM_SEND, w);
    }
    cm5_read(c, false, COM_STATUS) & status::SEND_OK != 0
}

/// Wait for a combine result and read all of it.
pub fn combine_result(c: &mut Client) -> Vec<u32> {
    poll_until("no combine result", || {
        cm5_read(c, false, COM_STATUS) & status::REC_OK != 0
    });
    let len = (cm5_read(c, false, COM_STATUS) >> 11) & 0xF;
    (0..len).map(|_| cm5_read(c, false, COM_RECV)).collect()
}

/// The Bus Error cause (§6.6).
pub fn bus_errors(c: &mut Client) -> u32 {
    cm5_read(c, true, cm5::NI_INTERRUPT_CAUSE) & cause::BAD_MEMORY_ACCESS
}

/// Clear every cause but the collision: writing its clear bit empties the broadcast send
/// FIFOs (B.3.5), which a driver does only to recover from one.
pub fn clear_causes(c: &mut Client) {
    cm5_write(
        c,
        true,
        cm5::NI_INTERRUPT_CLEAR,
        cause::ALL & !cause::BC_OR_COM_COLLISION,
    );
}

/// Wait for rec_ok on LDR, then read the message: (tag, words).
pub fn receive(c: &mut Client) -> (u32, Vec<u32>) {
    let mut st = 0;
    poll_until("a message in the LDR receive FIFO", || {
        st = cm5_read(c, false, LDR_STATUS);
        st & status::REC_OK != 0
    });
    let len = (st >> 11) & 0xF;
    let tag = (st >> 15) & 0xF;
    let words = (0..len).map(|_| cm5_read(c, false, LDR_RECV)).collect();
    (tag, words)
}

/// §2.7.1, §5.4: the Green MSI-X vector on a fresh eventfd, raised when a message becomes the
/// head of the LDR receive FIFO (`level_green`, `rec_ok_ie`).
pub fn green_on_arrival(c: &mut Client) -> std::fs::File {
    let ev = super::msix_vector(c, ni_abi::pci::vector::GREEN);
    cm5_write(c, true, cm5::NI_INTERRUPT_LEVEL, cm5::level::GREEN);
    cm5_write(c, true, LDR_PRIVATE, cm5::private::REC_OK_IE);
    ev
}
