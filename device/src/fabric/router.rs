//! The SSD-T90 routers' memory-mapped registers ("R Option", "Special Routing", Tables 6-8),
//! as special routing reaches them.
//!
//! One router per physical node, spares included. The routing state a PE programs through
//! SPUT (R_ORIENT, R_NET_LUT, R_LUT_OVERRIDE) is the torus model's own (`topology.rs`), so
//! what a PE writes and what `ni-ctl` shows and changes are one state; the rest (R_SW,
//! R_SGET_RTRN, R_ERR0/R_ERR1) lives here. Routers belong to the network: an NI's reset
//! does not touch its router.

use ni_abi::pci::vector;
use ni_abi::t3e::{delta, router as r, Error};

use super::topology::{Axis, PhysPe, TopologyError};
use super::State;
use crate::server::lock;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RouterRegs {
    pub r_sw: u64,
    pub r_sget_rtrn: u64,
    pub r_err0: u64,
    pub r_err1: u64,
}

/// Where a routing failure of a packet from `source` is logged: the router and its R_ERR0
/// bit (Table 8). A tag naming no node is caught where it enters the network.
pub fn fault_site(source: PhysPe, e: &TopologyError) -> Option<(PhysPe, u32)> {
    match e {
        TopologyError::DatelineViolation { node, port, .. } => {
            Some((*node, r::ERR_DATELINE + port.index()))
        }
        TopologyError::Misdelivered { reached, .. } => Some((*reached, r::ERR_MISROUTE)),
        TopologyError::Misroute { .. } => Some((source, r::ERR_MISROUTE)),
        _ => None,
    }
}

fn bad(_: TopologyError) -> Error {
    Error::BadRouterRegister
}

impl State {
    fn router_index(&self, node: PhysPe) -> usize {
        self.torus.dims().index(node)
    }

    /// The NI on physical node `node`, if one is there.
    fn ni_at(&self, node: PhysPe) -> Option<usize> {
        self.torus
            .logical(node)
            .map(|l| l as usize)
            .filter(|&l| l < self.nodes.len())
    }

    /// Latch R_ERR0 bit `bit` at `node`'s router; interrupt the PE there if R_ERR1 enables
    /// a newly set bit. Bits latch whether enabled or not (Table 8, "R_ERR1").
    pub(super) fn router_error(&mut self, node: PhysPe, bit: u32) {
        let i = self.router_index(node);
        let regs = &mut self.routers[i];
        let new = (1u64 << bit) & !regs.r_err0;
        regs.r_err0 |= 1 << bit;
        let enabled = new & regs.r_err1 != 0;
        tracing::debug!(%node, bit, "router error latched");
        if let Some(ni) = self.ni_at(node) {
            self.nodes[ni].counters.router_errors += 1;
            if enabled {
                lock(&self.slots[ni].ni).deliver(vector::ROUTER);
            }
        }
    }

    /// A router register read (SGET at `node`).
    pub(super) fn router_read(&self, node: PhysPe, addr: u64) -> Result<u64, Error> {
        let regs = &self.routers[self.router_index(node)];
        Ok(match addr {
            r::R_SW => regs.r_sw,
            r::R_ORIENT => self.torus.r_orient(node).map_err(bad)? as u64,
            r::R_LUT_OVERRIDE => self.torus.lut_override(node).map_err(bad)?,
            r::R_SGET_RTRN => regs.r_sget_rtrn,
            r::R_ERR0 => regs.r_err0,
            r::R_ERR1 => regs.r_err1,
            r::R_PHYS => node.number() as u64,
            a if lut_index(a).is_some() => {
                let i = lut_index(a).expect("checked");
                self.torus.lut_entry(node, i).map_err(bad)?
            }
            _ => return Err(Error::BadRouterRegister),
        })
    }

    /// A router register write (SPUT at `node`).
    pub(super) fn router_write(&mut self, node: PhysPe, addr: u64, v: u64) -> Result<(), Error> {
        let i = self.router_index(node);
        let routing = match addr {
            r::R_SW => {
                self.routers[i].r_sw = v;
                false
            }
            r::R_ORIENT => {
                if v > 0b111 {
                    return Err(Error::BadRouterRegister);
                }
                self.torus.set_r_orient(node, v as u8).map_err(bad)?;
                true
            }
            r::R_LUT_OVERRIDE => {
                let defined = r::TAG_MASK | r::OVERRIDE_MODE_MASK << r::OVERRIDE_MODE_SHIFT;
                if v & !defined != 0 {
                    return Err(Error::BadRouterRegister);
                }
                self.torus.set_lut_override(node, v).map_err(bad)?;
                true
            }
            r::R_SGET_RTRN => {
                if v & delta::MBZ != 0 {
                    return Err(Error::BadRouterRegister);
                }
                self.routers[i].r_sget_rtrn = v;
                false
            }
            r::R_ERR0 => {
                if v & !r::ERR_DEFINED != 0 {
                    return Err(Error::BadRouterRegister);
                }
                self.routers[i].r_err0 &= !v;
                false
            }
            r::R_ERR1 => {
                if v & !r::ERR_DEFINED != 0 {
                    return Err(Error::BadRouterRegister);
                }
                let regs = &mut self.routers[i];
                let newly = v & !regs.r_err1 & regs.r_err0;
                regs.r_err1 = v;
                if newly != 0 {
                    if let Some(ni) = self.ni_at(node) {
                        lock(&self.slots[ni].ni).deliver(vector::ROUTER);
                    }
                }
                false
            }
            a => {
                let Some(e) = lut_index(a) else {
                    return Err(Error::BadRouterRegister);
                };
                if v & !r::TAG_MASK != 0 {
                    return Err(Error::BadRouterRegister);
                }
                self.torus.write_lut(node, e, v).map_err(bad)?;
                true
            }
        };
        if routing {
            // Routes follow the new tags from the next packet on.
            self.routes.clear();
            self.publish_reach();
        }
        Ok(())
    }

    /// Special routing from the node of NI `a` by `deltas`: the router it reaches.
    pub(super) fn special_route(&self, from: PhysPe, deltas: u64) -> Result<PhysPe, Error> {
        if deltas & delta::MBZ != 0 {
            return Err(Error::BadDelta);
        }
        self.torus
            .special_route(from, delta::split(deltas))
            .map_err(|e| match e {
                TopologyError::BadDelta { .. } | TopologyError::NoLink { .. } => Error::BadDelta,
                _ => Error::LinkMappedOut,
            })
    }

    /// `ni-ctl dateline`: make link `position` of every `axis` ring a dateline, or clear
    /// the dimension's datelines (`None`).
    pub fn set_dateline(&mut self, axis: &str, position: Option<u32>) -> Result<(), String> {
        let a = match axis {
            "X" | "x" => Axis::X,
            "Y" | "y" => Axis::Y,
            "Z" | "z" => Axis::Z,
            _ => return Err(format!("unknown dimension {axis:?}: use X, Y or Z")),
        };
        match position {
            Some(p) => self.torus.set_dateline(a, p).map_err(|e| e.to_string())?,
            None => self.torus.clear_datelines(a),
        }
        self.routes.clear();
        self.publish_reach();
        Ok(())
    }

    /// The control socket's view of one router.
    pub fn router_info(&self, node: PhysPe) -> ni_abi::control::RouterInfo {
        let regs = self.routers[self.router_index(node)];
        let written: std::collections::BTreeSet<u32> = self
            .torus
            .written_lut()
            .into_iter()
            .filter(|(n, _, _)| *n == node)
            .map(|(_, i, _)| i)
            .collect();
        let entries = self
            .torus
            .logical_pes()
            .max(written.last().map_or(0, |&l| l + 1));
        ni_abi::control::RouterInfo {
            physical: node.to_string(),
            ni: self.ni_at(node).map(|n| n as u32),
            r_sw: regs.r_sw,
            r_orient: self.torus.r_orient(node).unwrap_or(0) as u64,
            r_lut_override: self.torus.lut_override(node).unwrap_or(0),
            r_sget_rtrn: regs.r_sget_rtrn,
            r_err0: regs.r_err0,
            r_err1: regs.r_err1,
            lut: (0..entries)
                .map(|i| ni_abi::control::RouterLutEntry {
                    index: i,
                    tag: self.torus.lut_entry(node, i).unwrap_or(0),
                    written: written.contains(&i),
                })
                .collect(),
        }
    }
}

fn lut_index(addr: u64) -> Option<u32> {
    let end = r::R_NET_LUT + 8 * r::LUT_ENTRIES as u64;
    (addr >= r::R_NET_LUT && addr < end && addr.is_multiple_of(8))
        .then(|| ((addr - r::R_NET_LUT) / 8) as u32)
}
