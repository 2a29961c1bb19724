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
}
