//! Maps keyed by ids this process hands out itself (operation ids, handler ids): numbers no
//! peer chooses, so they need spreading over the table, not keyed (SipHash) hashing — which
//! was about a tenth of an 8-byte round trip's instructions (`tests/bench/instr.sh`).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing of one integer: the product's high bits (which hashbrown's control
/// bytes take) mix every bit of the id, its low bits (the bucket) keep sequential ids apart.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;
pub type IdSet = HashSet<u64, BuildHasherDefault<IdHasher>>;

/// Finished operations by id, until their owner takes them. Ids are handed out in sequence
/// and most are taken soon after they finish, so a small table indexed by the id's low bits
/// holds them with one compare each way; the map takes those whose place is occupied (an
/// operation nobody has waited for yet). A hash map insert and remove were about a tenth of
/// an 8-byte round trip's instructions.
pub struct Finished<V> {
    slots: [Option<(u64, V)>; 64],
    /// Bit i: `slots[i]` holds something.
    used: u64,
    spill: IdMap<V>,
}

impl<V> Default for Finished<V> {
    fn default() -> Self {
        Finished {
            slots: std::array::from_fn(|_| None),
            used: 0,
            spill: IdMap::default(),
        }
    }
}

impl<V> Finished<V> {
    pub fn insert(&mut self, id: u64, v: V) {
        let i = (id % 64) as usize;
        if self.used & (1 << i) == 0 {
            self.slots[i] = Some((id, v));
            self.used |= 1 << i;
        } else {
            self.spill.insert(id, v);
        }
    }

    pub fn remove(&mut self, id: u64) -> Option<V> {
        let i = (id % 64) as usize;
        if self.used & (1 << i) != 0 && self.slots[i].as_ref().is_some_and(|(k, _)| *k == id) {
            self.used &= !(1 << i);
            return self.slots[i].take().map(|(_, v)| v);
        }
        if self.spill.is_empty() {
            None
        } else {
            self.spill.remove(&id)
        }
    }

    pub fn len(&self) -> usize {
        self.used.count_ones() as usize + self.spill.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Take everything, in no particular order.
    pub fn drain(&mut self, mut f: impl FnMut(u64, V)) {
        while self.used != 0 {
            let i = self.used.trailing_zeros() as usize;
            self.used &= !(1 << i);
            if let Some((k, v)) = self.slots[i].take() {
                f(k, v);
            }
        }
        // Rarely anything spilled: an empty map's drain still walks and clears its table.
        if !self.spill.is_empty() {
            for (k, v) in self.spill.drain() {
                f(k, v);
            }
        }
    }
}

/// Values keyed by ids a program chooses, most of them small (active-message handlers are
/// numbered from 0 in most programs, as GASNet's 0-255): ids below [`IdTable::LOW`] index a
/// table, the rest a map. A 64-byte active message's dispatch looked its handler up twice
/// in a hash map (taken out, put back); an index is a compare and a load.
pub struct IdTable<V> {
    low: Vec<Option<V>>,
    high: IdMap<V>,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable {
            low: Vec::new(),
            high: IdMap::default(),
        }
    }
}

impl<V> IdTable<V> {
    pub const LOW: u64 = 256;

    #[inline]
    pub fn get_mut(&mut self, id: u64) -> Option<&mut V> {
        if id < Self::LOW {
            self.low.get_mut(id as usize).and_then(Option::as_mut)
        } else {
            self.high.get_mut(&id)
        }
    }

    /// Returns the value `id` had.
    pub fn insert(&mut self, id: u64, v: V) -> Option<V> {
        if id < Self::LOW {
            let i = id as usize;
            if self.low.len() <= i {
                self.low.resize_with(i + 1, || None);
            }
            self.low[i].replace(v)
        } else {
            self.high.insert(id, v)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_ids_spread_over_buckets_and_control_bytes() {
        let h = |v: u64| {
            let mut s = IdHasher::default();
            s.write_u64(v);
            s.finish()
        };
        let low: HashSet<u64> = (0..1024).map(|v| h(v) & 1023).collect();
        assert_eq!(
            low.len(),
            1024,
            "1024 sequential ids in 1024 buckets without collision"
        );
        let top: HashSet<u64> = (0..1024).map(|v| h(v) >> 57).collect();
        assert!(
            top.len() > 100,
            "control bytes: only {} distinct",
            top.len()
        );
        let mut m: IdMap<u64> = IdMap::default();
        for v in 0..10_000 {
            m.insert(v * 3, v);
        }
        assert!((0..10_000).all(|v| m[&(v * 3)] == v));
    }

    #[test]
    fn finished_operations_are_found_whatever_slot_they_share() {
        let mut f: Finished<u64> = Finished::default();
        // 0 and 64 share a slot; 128 too; 5 alone.
        for id in [0, 64, 5, 128] {
            f.insert(id, id * 10);
        }
        assert_eq!(f.len(), 4);
        assert_eq!(f.remove(64), Some(640));
        assert_eq!(f.remove(64), None);
        assert_eq!(f.remove(0), Some(0));
        // The slot is free again; the spilled one is still found.
        f.insert(192, 1920);
        assert_eq!(f.remove(1), None);
        let mut all = vec![];
        f.drain(|k, v| all.push((k, v)));
        all.sort();
        assert_eq!(all, vec![(5, 50), (128, 1280), (192, 1920)]);
        assert!(f.is_empty());
        for id in 0..1000 {
            f.insert(id, id);
        }
        assert!((0..1000).rev().all(|id| f.remove(id) == Some(id)));
        assert!(f.is_empty());
    }

    #[test]
    fn id_table_finds_small_and_large_ids_alike() {
        let mut t: IdTable<u64> = IdTable::default();
        for id in [0, 7, 255, 256, u64::MAX, 3] {
            assert_eq!(t.insert(id, id.wrapping_add(1)), None);
        }
        assert_eq!(t.insert(7, 70), Some(8), "replacing returns the old value");
        for (id, v) in [
            (0, 1),
            (7, 70),
            (255, 256),
            (256, 257),
            (u64::MAX, 0),
            (3, 4),
        ] {
            assert_eq!(t.get_mut(id).copied(), Some(v), "id {id}");
        }
        for id in [1, 2, 8, 254, 257, 1 << 40] {
            assert_eq!(t.get_mut(id), None, "id {id} was never inserted");
        }
        *t.get_mut(256).unwrap() = 9;
        assert_eq!(t.get_mut(256).copied(), Some(9));
    }
}
