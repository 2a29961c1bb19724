//! Partitions: which NIs may address each other, and their partition-relative numbering.
//!
//! As on the CM-5 (§1.1.3, §3.3), a partition numbers its members 0..size-1 in the order
//! the administrator listed them, and an NI can only name ranks of its own partition: there
//! is no way to spell an NI outside it.

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Partition {
    pub name: String,
    /// Physical NI numbers; index = rank.
    pub nodes: Vec<u32>,
    /// Stable number, published in the control page's `PARTITION`: given at creation and
    /// never reused while the daemon runs, so a client can tell a recreated partition of the
    /// same name from the one it joined.
    pub id: u32,
    /// MLINK remote boot allowed (`ni-ctl partition remote-boot`); off at creation.
    pub remote_boot: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PartitionError {
    #[error("partition {0:?} already exists")]
    Exists(String),
    #[error("no partition {0:?}")]
    NoSuch(String),
    #[error("NI {node} is already in partition {partition:?}: delete that partition first (an NI is in at most one)")]
    NodeTaken { node: u32, partition: String },
    #[error("no NI {0}")]
    NoNode(u32),
    #[error("a partition needs at least one NI")]
    Empty,
    #[error("NI {0} listed twice")]
    Duplicate(u32),
    #[error("partition name {0:?}: use 1 to 64 letters, digits, '-', '_' or '.'")]
    BadName(String),
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Partitions {
    nodes: u32,
    list: BTreeMap<String, Partition>,
    /// node -> (partition name, rank)
    of: Vec<Option<(String, u32)>>,
    next_id: u32,
}

impl Partitions {
    /// No partitions at all.
    pub fn empty(nodes: u32) -> Self {
        Partitions {
            nodes,
            list: BTreeMap::new(),
            of: vec![None; nodes as usize],
            next_id: 0,
        }
    }

    /// The default: one partition, "default", of every NI in order.
    pub fn all(nodes: u32) -> Self {
        let mut p = Self::empty(nodes);
        p.create("default", (0..nodes).collect())
            .expect("the default partition is valid");
        p
    }

    /// How many NIs there are.
    pub fn node_count(&self) -> u32 {
        self.nodes
    }

    pub fn create(&mut self, name: &str, nodes: Vec<u32>) -> Result<(), PartitionError> {
        let name_ok = (1..=64).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !name_ok {
            return Err(PartitionError::BadName(name.into()));
        }
        if self.list.contains_key(name) {
            return Err(PartitionError::Exists(name.into()));
        }
        if nodes.is_empty() {
            return Err(PartitionError::Empty);
        }
        // A malformed list first, then what stands in its way.
        for (i, &n) in nodes.iter().enumerate() {
            if n >= self.nodes {
                return Err(PartitionError::NoNode(n));
            }
            if nodes[..i].contains(&n) {
                return Err(PartitionError::Duplicate(n));
            }
        }
        for &n in &nodes {
            if let Some((p, _)) = &self.of[n as usize] {
                return Err(PartitionError::NodeTaken {
                    node: n,
                    partition: p.clone(),
                });
            }
        }
        for (rank, &n) in nodes.iter().enumerate() {
            self.of[n as usize] = Some((name.to_string(), rank as u32));
        }
        self.list.insert(
            name.to_string(),
            Partition {
                name: name.to_string(),
                nodes,
                id: self.next_id,
                remote_boot: false,
            },
        );
        self.next_id += 1;
        Ok(())
    }

    pub fn delete(&mut self, name: &str) -> Result<Partition, PartitionError> {
        let p = self
            .list
            .remove(name)
            .ok_or_else(|| PartitionError::NoSuch(name.into()))?;
        for &n in &p.nodes {
            self.of[n as usize] = None;
        }
        Ok(p)
    }

    pub fn list(&self) -> impl Iterator<Item = &Partition> {
        self.list.values()
    }

    pub fn get(&self, name: &str) -> Option<&Partition> {
        self.list.get(name)
    }

    /// Allow or forbid MLINK remote boot in partition `name`.
    pub fn set_remote_boot(&mut self, name: &str, on: bool) -> Result<(), PartitionError> {
        let p = self
            .list
            .get_mut(name)
            .ok_or_else(|| PartitionError::NoSuch(name.to_string()))?;
        p.remote_boot = on;
        Ok(())
    }

    /// The partition and rank of a physical NI.
    pub fn of(&self, node: u32) -> Option<(&Partition, u32)> {
        let (name, rank) = self.of.get(node as usize)?.as_ref()?;
        Some((&self.list[name], *rank))
    }

    /// Rank and size of a physical NI (0, 0 when it is in no partition).
    pub fn rank_size(&self, node: u32) -> (u32, u32) {
        self.of(node)
            .map(|(p, r)| (r, p.nodes.len() as u32))
            .unwrap_or((0, 0))
    }

    /// The physical NI that `rank` names for `from`, if it is in `from`'s partition.
    pub fn resolve(&self, from: u32, rank: u32) -> Option<u32> {
        let (p, _) = self.of(from)?;
        p.nodes.get(rank as usize).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_relative_and_partitions_isolated() {
        let mut p = Partitions::empty(8);
        p.create("a", vec![5, 1, 2]).unwrap();
        p.create("b", vec![0, 3]).unwrap();
        assert_eq!(p.rank_size(1), (1, 3));
        assert_eq!(p.resolve(5, 2), Some(2));
        assert_eq!(p.resolve(5, 3), None, "rank past the partition");
        assert_eq!(p.resolve(0, 1), Some(3));
        assert_eq!(p.resolve(7, 0), None, "NI in no partition reaches nothing");
        assert_eq!(
            p.create("c", vec![3]),
            Err(PartitionError::NodeTaken {
                node: 3,
                partition: "b".into()
            })
        );
        assert_eq!(p.create("c", vec![8]), Err(PartitionError::NoNode(8)));
        assert_eq!(p.create("c", vec![4, 4]), Err(PartitionError::Duplicate(4)));
        let b_id = p.of(0).unwrap().0.id;
        p.delete("b").unwrap();
        assert_eq!(p.of(0), None);
        assert_eq!(p.delete("b"), Err(PartitionError::NoSuch("b".into())));
        p.create("c", vec![3, 0, 4]).unwrap();
        assert_eq!(p.rank_size(4), (2, 3));
        // A new partition gets a new id, even where an old one stood.
        p.create("b", vec![6]).unwrap();
        assert!(p.of(6).unwrap().0.id > b_id);
        for bad in ["", "a b", "x/y", &"n".repeat(65)] {
            assert_eq!(
                p.create(bad, vec![7]),
                Err(PartitionError::BadName(bad.into()))
            );
        }
    }
}
