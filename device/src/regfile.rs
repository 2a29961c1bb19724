//! Storage and byte-lane decoding for table-driven register files.
//!
//! A register file is a `static` table of [`RegDef`]s plus one value per row. Accesses are
//! decoded by byte lanes: an access of any width sees every register it overlaps, so a
//! 32-bit read of two 16-bit registers returns both, as on the real bus.

use ni_abi::regs::{Kind, RegDef};

pub struct RegFile {
    table: &'static [RegDef],
    values: Vec<u64>,
}

/// A register file's values across a daemon handover (`crate::handover`), keyed by name and
/// offset: a build with registers the old one lacked keeps their reset values, and one that
/// dropped a register ignores it.
pub fn serialize_values<S: serde::Serializer>(f: &RegFile, s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(
        f.table
            .iter()
            .zip(&f.values)
            .map(|(r, v)| (format!("{}@{:#x}", r.name, r.offset), v)),
    )
}

/// The register file `table` with the values [`serialize_values`] wrote.
pub fn deserialize_values<'de, D: serde::Deserializer<'de>>(
    table: &'static [RegDef],
    d: D,
) -> Result<RegFile, D::Error> {
    use serde::Deserialize;
    let saved = std::collections::HashMap::<String, u64>::deserialize(d)?;
    let mut f = RegFile::new(table);
    for (r, v) in f.table.iter().zip(f.values.iter_mut()) {
        if let Some(&x) = saved.get(&format!("{}@{:#x}", r.name, r.offset)) {
            *v = x;
        }
    }
    Ok(f)
}

/// Byte order of a register file's registers on the bus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endian {
    Big,
    Little,
}

impl RegFile {
    pub fn new(table: &'static [RegDef]) -> Self {
        let mut file = RegFile {
            table,
            values: vec![0; table.len()],
        };
        file.reset();
        file
    }

    /// Every register back to its documented reset value.
    pub fn reset(&mut self) {
        for (v, r) in self.values.iter_mut().zip(self.table) {
            *v = r.reset;
        }
    }

    pub fn table(&self) -> &'static [RegDef] {
        self.table
    }

    fn index(&self, offset: u32) -> usize {
        self.table
            .iter()
            .position(|r| r.offset == offset)
            .unwrap_or_else(|| panic!("no register at {offset:#x}"))
    }

    /// The stored value of the register at `offset` (a device-internal read, no side effect).
    pub fn get(&self, offset: u32) -> u64 {
        self.values[self.index(offset)]
    }

    /// Store a value as the device (not the bus) sets it.
    pub fn set(&mut self, offset: u32, value: u64) {
        let i = self.index(offset);
        self.values[i] = value & self.table[i].width_mask();
    }

    /// Device-side increment of a `Z*` counter: saturates at all-ones.
    pub fn bump_saturating(&mut self, offset: u32) {
        let i = self.index(offset);
        let max = self.table[i].width_mask();
        if self.values[i] < max {
            self.values[i] += 1;
        }
    }

    /// Apply a bus write to a stored register, following its kind and masks.
    /// Returns the new value.
    pub fn store_write(&mut self, reg: &RegDef, value: u64) -> u64 {
        let i = self.index(reg.offset);
        let old = self.values[i];
        let new = match reg.kind {
            Kind::DecrementOnWrite => old.saturating_sub(1),
            Kind::ResetOnRead => old,
            _ => {
                let kept = old & !reg.write_mask;
                let mut v = kept | (value & reg.write_mask);
                v &= !(value & reg.w1c_mask);
                v ^= value & reg.toggle_mask;
                v
            }
        };
        self.values[i] = new & reg.width_mask();
        self.values[i]
    }

    /// Apply a bus read to a stored register: `Z*` counters clear.
    pub fn store_read(&mut self, reg: &RegDef) -> u64 {
        let i = self.index(reg.offset);
        let v = self.values[i];
        if reg.kind == Kind::ResetOnRead {
            self.values[i] = 0;
        }
        v
    }
}

/// Compose a read of `data.len()` bytes at `offset` from the registers it overlaps.
/// `read_reg` is called once per overlapped register (it may have side effects) and returns
/// `None` for a register the access may not read; those bytes read as 0.
pub fn read_lanes(
    table: &'static [RegDef],
    endian: Endian,
    offset: u32,
    data: &mut [u8],
    mut read_reg: impl FnMut(&'static RegDef) -> Option<u64>,
) -> usize {
    data.fill(0);
    let len = data.len() as u32;
    let mut hits = 0;
    for reg in table.iter().filter(|r| r.overlaps(offset, len)) {
        hits += 1;
        let Some(value) = read_reg(reg) else { continue };
        for i in 0..reg.width as u32 {
            let addr = reg.offset + i;
            if addr >= offset && addr < offset + len {
                let shift = match endian {
                    Endian::Big => 8 * (reg.width as u32 - 1 - i),
                    Endian::Little => 8 * i,
                };
                data[(addr - offset) as usize] = (value >> shift.min(63)) as u8;
            }
        }
    }
    hits
}

/// Decompose a write of `data` at `offset` onto the registers it overlaps. A register only
/// partly covered keeps its other bytes from `current`. `write_reg` gets the register and the
/// merged value. Returns how many registers the access touched.
pub fn write_lanes(
    table: &'static [RegDef],
    endian: Endian,
    offset: u32,
    data: &[u8],
    current: impl Fn(&'static RegDef) -> u64,
    mut write_reg: impl FnMut(&'static RegDef, u64),
) -> usize {
    let len = data.len() as u32;
    let mut hits = 0;
    for reg in table.iter().filter(|r| r.overlaps(offset, len)) {
        hits += 1;
        let mut value = current(reg);
        for i in 0..reg.width as u32 {
            let addr = reg.offset + i;
            if addr >= offset && addr < offset + len {
                let shift = match endian {
                    Endian::Big => 8 * (reg.width as u32 - 1 - i),
                    Endian::Little => 8 * i,
                };
                if shift < 64 {
                    value &= !(0xFFu64 << shift);
                    value |= (data[(addr - offset) as usize] as u64) << shift;
                }
            }
        }
        write_reg(reg, value);
    }
    hits
}

#[cfg(test)]
mod tests {
    use super::*;
    use ni_abi::lanai;

    #[test]
    fn snapshot_is_index_and_count_big_endian() {
        let mut f = RegFile::new(&lanai::SPECIAL_REGS);
        f.set(lanai::P0_RPL_INDEX, 0x1234);
        f.set(lanai::P0_RECV_COUNT, 0x0056);
        let mut word = [0u8; 4];
        read_lanes(
            f.table(),
            Endian::Big,
            lanai::P0_RPL_SNAPSHOT,
            &mut word,
            |r| Some(f.get(r.offset)),
        );
        assert_eq!(u32::from_be_bytes(word), 0x1234_0056);
    }

    #[test]
    fn decrement_on_write_stops_at_zero_and_ignores_value() {
        let mut f = RegFile::new(&lanai::SPECIAL_REGS);
        let reg = ni_abi::regs::lookup(&lanai::SPECIAL_REGS, lanai::P0_SEND_COUNT).unwrap();
        f.set(lanai::P0_SEND_COUNT, 2);
        assert_eq!(f.store_write(reg, 0xFF), 1);
        assert_eq!(f.store_write(reg, 0), 0);
        assert_eq!(f.store_write(reg, 7), 0);
    }

    #[test]
    fn isr_write_one_clears_ints_and_toggles_req_ack() {
        let mut f = RegFile::new(&lanai::SPECIAL_REGS);
        let reg = ni_abi::regs::lookup(&lanai::SPECIAL_REGS, lanai::ISR).unwrap();
        let ints = (lanai::isr::DMA_ERROR_INT | lanai::isr::MEMORY_INT) as u64;
        f.set(lanai::ISR, ints);
        let v = f.store_write(reg, lanai::isr::DMA_ERROR_INT as u64);
        assert_eq!(v, lanai::isr::MEMORY_INT as u64);
        let v = f.store_write(reg, lanai::isr::REQ_ACK0 as u64);
        assert_eq!(v & lanai::isr::REQ_ACK0 as u64, lanai::isr::REQ_ACK0 as u64);
        let v = f.store_write(reg, lanai::isr::REQ_ACK0 as u64);
        assert_eq!(v & lanai::isr::REQ_ACK0 as u64, 0);
        // Status bits ignore writes.
        let v = f.store_write(reg, lanai::isr::P0_LINK_READY as u64);
        assert_eq!(v & lanai::isr::P0_LINK_READY as u64, 0);
    }

    #[test]
    fn z_counters_saturate_and_clear_on_read() {
        let mut f = RegFile::new(&lanai::SPECIAL_REGS);
        let reg = ni_abi::regs::lookup(&lanai::SPECIAL_REGS, lanai::P0_BUFFER_DROP).unwrap();
        f.set(lanai::P0_BUFFER_DROP, 0xFFFE);
        f.bump_saturating(lanai::P0_BUFFER_DROP);
        f.bump_saturating(lanai::P0_BUFFER_DROP);
        assert_eq!(f.store_read(reg), 0xFFFF);
        assert_eq!(f.store_read(reg), 0);
    }

    #[test]
    fn every_table_row_is_unique_and_in_its_window() {
        for table in [&lanai::SPECIAL_REGS[..], &ni_abi::cm5::REGS[..]] {
            for (i, a) in table.iter().enumerate() {
                assert!(matches!(a.width, 1 | 2 | 4 | 8 | 16), "{}", a.name);
                for b in &table[i + 1..] {
                    assert!(
                        a.offset != b.offset || a.name == b.name,
                        "{} and {} share {:#x}",
                        a.name,
                        b.name,
                        a.offset
                    );
                }
            }
        }
        for r in &lanai::SPECIAL_REGS {
            assert!((r.offset as u64) + r.width as u64 <= lanai::SPECIALS_SIZE);
        }
    }
}
