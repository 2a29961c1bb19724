//! The MSI-X table and pending-bit array in BAR4.
//!
//! QEMU emulates the table itself and hands the device one eventfd per vector, but a client
//! that talks vfio-user directly (libni in host mode, the tests) programs this table, so its
//! per-vector mask bits are honoured and the PBA shows what was held back.

use ni_abi::pci::{vector, MSIX_ENTRY_SIZE, MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET};

// The table starts BAR4.
const _: () = assert!(MSIX_TABLE_OFFSET == 0);

const N: usize = vector::COUNT as usize;
const VECTOR_CONTROL: usize = 12;

#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct MsixTable {
    #[serde(with = "crate::handover::serde_with::array")]
    table: [u8; N * MSIX_ENTRY_SIZE as usize],
    pending: u64,
}

impl Default for MsixTable {
    fn default() -> Self {
        Self::new()
    }
}

impl MsixTable {
    pub fn new() -> Self {
        let mut t = MsixTable {
            table: [0; N * MSIX_ENTRY_SIZE as usize],
            pending: 0,
        };
        // Every vector starts masked (PCI spec).
        for v in 0..N {
            t.table[v * 16 + VECTOR_CONTROL] = 1;
        }
        t
    }

    pub fn masked(&self, v: u16) -> bool {
        self.table[v as usize * 16 + VECTOR_CONTROL] & 1 != 0
    }

    pub fn set_pending(&mut self, v: u16) {
        self.pending |= 1 << v;
    }

    pub fn take_pending(&mut self, v: u16) -> bool {
        let was = self.pending & (1 << v) != 0;
        self.pending &= !(1 << v);
        was
    }

    pub fn pending(&self) -> u64 {
        self.pending
    }

    /// `None` when the access is outside the table and PBA or of an unsupported width.
    pub fn read(&self, offset: u64, data: &mut [u8]) -> Option<()> {
        let len = data.len() as u64;
        if !matches!(len, 4 | 8) || !offset.is_multiple_of(len) {
            return None;
        }
        let table_end = MSIX_TABLE_OFFSET + self.table.len() as u64;
        if offset + len <= table_end {
            let o = offset as usize;
            data.copy_from_slice(&self.table[o..o + len as usize]);
            Some(())
        } else if offset >= MSIX_PBA_OFFSET && offset + len <= MSIX_PBA_OFFSET + 8 {
            let o = (offset - MSIX_PBA_OFFSET) as usize;
            data.copy_from_slice(&self.pending.to_le_bytes()[o..o + len as usize]);
            Some(())
        } else {
            None
        }
    }

    /// Returns the vectors whose mask bit went from 1 to 0 (pending ones must now fire).
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Option<Vec<u16>> {
        let len = data.len() as u64;
        if !matches!(len, 4 | 8) || !offset.is_multiple_of(len) {
            return None;
        }
        let table_end = MSIX_TABLE_OFFSET + self.table.len() as u64;
        if offset + len <= table_end {
            let before: Vec<bool> = (0..N as u16).map(|v| self.masked(v)).collect();
            let o = offset as usize;
            self.table[o..o + len as usize].copy_from_slice(data);
            // Only bit 0 of vector control is defined.
            for v in 0..N {
                self.table[v * 16 + VECTOR_CONTROL] &= 1;
                self.table[v * 16 + VECTOR_CONTROL + 1..v * 16 + 16].fill(0);
            }
            Some(
                (0..N as u16)
                    .filter(|&v| before[v as usize] && !self.masked(v))
                    .collect(),
            )
        } else if offset >= MSIX_PBA_OFFSET && offset + len <= MSIX_PBA_OFFSET + 8 {
            // The PBA is read-only.
            Some(vec![])
        } else {
            None
        }
    }
}
