//! Event-driven code dispatch (§15): 64 select blocks of product terms over ISR[29:0] and
//! the 32 software STATE bits, and the priority encoder behind `DISPATCH_INDEX`.
//!
//! The seed leaves the blocks' reset state open; the model resets them to all zeros, and an
//! all-zero block always matches (§15), so an unconfigured NI dispatches to index 0 and a
//! program that configures blocks 0..k-1 gets a catch-all at block k, as App. C's table of
//! handlers with `dispatch_null` behind the configured ones expects.

use ni_abi::lanai::dispatch as cfg;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Block {
    pub isr_on: u32,
    pub isr_off: u32,
    pub state_on: u32,
    pub state_off: u32,
    pub invert: bool,
    pub or: bool,
    pub and: bool,
}

impl Block {
    fn matches(&self, isr: u32, state: u32) -> bool {
        isr & self.isr_on == self.isr_on
            && isr & self.isr_off == 0
            && state & self.state_on == self.state_on
            && state & self.state_off == 0
    }
}

/// The ISR bits dispatch sees: 31:30 are reserved.
const ISR_INPUTS: u32 = 0x3FFF_FFFF;

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Dispatch {
    #[serde(with = "crate::handover::serde_with::array")]
    blocks: [Block; cfg::BLOCKS],
    /// DISPATCH_ISR_ON, _ISR_OFF, _STATE_ON, _STATE_OFF as last written.
    staging: [u32; 4],
    /// DISPATCH_STATE as last written.
    state: u32,
}

impl Default for Dispatch {
    fn default() -> Self {
        Dispatch {
            blocks: [Block::default(); cfg::BLOCKS],
            staging: [0; 4],
            state: 0,
        }
    }
}

impl Dispatch {
    /// A write of staging register `i` (0 ISR_ON, 1 ISR_OFF, 2 STATE_ON, 3 STATE_OFF).
    pub fn stage(&mut self, i: usize, v: u32) {
        self.staging[i & 3] = v;
    }

    /// DISPATCH_CONFIG: block SELECT takes the staged terms and the flags written.
    pub fn configure(&mut self, v: u32) {
        let [isr_on, isr_off, state_on, state_off] = self.staging;
        self.blocks[(v & cfg::SELECT_MASK) as usize] = Block {
            isr_on,
            isr_off,
            state_on,
            state_off,
            invert: v & cfg::INVERT != 0,
            or: v & cfg::OR != 0,
            and: v & cfg::AND != 0,
        };
    }

    pub fn set_state(&mut self, v: u32) {
        self.state = v;
    }

    pub fn block(&self, i: usize) -> Block {
        self.blocks[i]
    }

    /// DISPATCH_INDEX for this ISR: 4 x the lowest block whose OUT is 1, else 256. A block's
    /// partial output is its match, inverted if INVERT, then OR-ed (OR) or AND-ed (AND
    /// without OR) with the previous block's partial output; a block whose partial output
    /// the next one consumes (`OFF_i = OR_{i+1} | AND_{i+1}`) has no OUT of its own. Block
    /// 0 combines with nothing and block 63's output is never consumed.
    pub fn index(&self, isr: u32) -> u32 {
        let isr = isr & ISR_INPUTS;
        let mut prev = false;
        for i in 0..cfg::BLOCKS {
            let b = &self.blocks[i];
            let mut p = b.matches(isr, self.state) ^ b.invert;
            if i > 0 {
                if b.or {
                    p |= prev;
                } else if b.and {
                    p &= prev;
                }
            }
            let consumed = self.blocks.get(i + 1).is_some_and(|n| n.or || n.and);
            if p && !consumed {
                return 4 * i as u32;
            }
            prev = p;
        }
        cfg::NONE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(d: &mut Dispatch, i: u32, terms: [u32; 4], flags: u32) {
        for (k, t) in terms.into_iter().enumerate() {
            d.stage(k, t);
        }
        d.configure(i | flags);
    }

    #[test]
    fn all_zero_blocks_match_and_none_gives_256() {
        let mut d = Dispatch::default();
        assert_eq!(d.index(0), 0, "an all-zero block always matches (§15)");
        for i in 0..64 {
            block(&mut d, i, [1 << 31 >> 1, 0, 0, 0], 0); // ISR bit 30: reserved, never 1
        }
        assert_eq!(d.index(u32::MAX), 256);
    }

    /// App. C's fair pair: `event0 & event1 & !state -> 0`, `event1 -> 1`, `event0 -> 2`.
    #[test]
    fn app_c_fair_dispatch() {
        let (e0, e1) = (1 << 5, 1 << 13);
        let mut d = Dispatch::default();
        block(&mut d, 0, [e0 | e1, 0, 0, 1], 0);
        block(&mut d, 1, [e1, 0, 0, 0], 0);
        block(&mut d, 2, [e0, 0, 0, 0], 0);
        block(&mut d, 3, [1 << 30, 0, 0, 0], 0);
        d.set_state(0);
        assert_eq!(d.index(e0 | e1), 0);
        d.set_state(1);
        assert_eq!(d.index(e0 | e1), 4);
        assert_eq!(d.index(e0), 8);
        assert_eq!(
            d.index(0),
            16,
            "block 4, never configured, is the catch-all"
        );
    }

    /// OR and AND consume the previous block's partial output, which then has no OUT.
    #[test]
    fn or_and_invert_chain() {
        let (a, b) = (1, 2);
        let mut d = Dispatch::default();
        block(&mut d, 0, [a, 0, 0, 0], 0);
        block(&mut d, 1, [b, 0, 0, 0], cfg::OR);
        for i in 2..64 {
            block(&mut d, i, [1 << 30, 0, 0, 0], 0);
        }
        assert_eq!(d.index(a), 4, "block 0 feeds block 1: a | b fires at 1");
        assert_eq!(d.index(b), 4);
        assert_eq!(d.index(0), 256);
        block(&mut d, 1, [b, 0, 0, 0], cfg::AND);
        assert_eq!(d.index(a), 256);
        assert_eq!(d.index(a | b), 4);
        block(&mut d, 1, [b, 0, 0, 0], cfg::AND | cfg::INVERT);
        assert_eq!(d.index(a), 4, "a & !b");
        assert_eq!(d.index(a | b), 256);
    }
}
