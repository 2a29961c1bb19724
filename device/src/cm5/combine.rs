//! The CM-5 control network's combine operation (NI Programmer's Handbook §4.2): what every
//! member of a partition receives when all have sent the same combine.
//!
//! Values are one wide integer of 1-5 32-bit words. Adds take the words least significant
//! first and carry across them; MAX takes them most significant first and compares signed;
//! OR and XOR are bitwise. Scans are **exclusive**: member i gets the combination over the
//! members before it (forward: lower ranks; backward: higher ranks) within its segment, and
//! the first of a segment gets the identity. A member with `scan_start` set begins a segment
//! (upward for forward scans, downward for backward ones); the flag is latched when a member
//! sends its first word, so an abstainer, which sends nothing, begins none. Reductions ignore segments and
//! give every member the combination of all. Abstainers contribute the identity and get no
//! scan result; they get a reduction's result only with `reduce_rec_abstain` clear.

pub use ni_abi::cm5::{combine_legal as legal, Combiner, Pattern, MAX_COMBINE_WORDS as MAX_WORDS};

/// One member's part in a combine, in rank order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Member {
    /// Words as the member wrote them (adds: least significant first; MAX: most first).
    pub words: [u32; MAX_WORDS],
    /// `ni_scan_start`, latched when the member sent.
    pub scan_start: bool,
    /// COM `rec_abstain`.
    pub abstain: bool,
    /// COM `reduce_rec_abstain`.
    pub reduce_rec_abstain: bool,
}

/// What one member receives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    pub result: Option<[u32; MAX_WORDS]>,
    /// `com_scan_overflow`: an add whose exact result does not fit the words.
    pub overflow: bool,
}

/// A wide integer, least significant word first, with one spare word so sums of up to 2^32
/// operands are exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Wide {
    w: [u32; MAX_WORDS + 1],
    len: usize,
}

impl Wide {
    fn from_words(c: Combiner, words: &[u32; MAX_WORDS], len: usize) -> Wide {
        let mut w = [0u32; MAX_WORDS + 1];
        for (i, x) in w.iter_mut().enumerate().take(len) {
            // MAX words arrive most significant first.
            *x = if c == Combiner::Max {
                words[len - 1 - i]
            } else {
                words[i]
            };
        }
        // Sign-extend into the spare word for the signed combiners.
        if matches!(c, Combiner::Add | Combiner::Max) && w[len - 1] & 0x8000_0000 != 0 {
            w[len] = u32::MAX;
        }
        Wide { w, len }
    }

    fn identity(c: Combiner, len: usize) -> Wide {
        let mut w = [0u32; MAX_WORDS + 1];
        if c == Combiner::Max {
            // The most negative value of the width.
            w[len - 1] = 0x8000_0000;
            w[len] = u32::MAX;
        }
        Wide { w, len }
    }

    fn to_words(self, c: Combiner) -> [u32; MAX_WORDS] {
        let mut out = [0u32; MAX_WORDS];
        for (i, o) in out.iter_mut().enumerate().take(self.len) {
            *o = if c == Combiner::Max {
                self.w[self.len - 1 - i]
            } else {
                self.w[i]
            };
        }
        out
    }

    fn add(self, o: Wide) -> Wide {
        let mut w = [0u32; MAX_WORDS + 1];
        let mut carry = 0u64;
        for (i, out) in w.iter_mut().enumerate().take(self.len + 1) {
            let s = self.w[i] as u64 + o.w[i] as u64 + carry;
            *out = s as u32;
            carry = s >> 32;
        }
        Wide { w, len: self.len }
    }

    fn signed_gt(self, o: Wide) -> bool {
        let (a, b) = (self.w[self.len] as i32, o.w[self.len] as i32);
        if a != b {
            return a > b;
        }
        (0..self.len)
            .rev()
            .find(|&i| self.w[i] != o.w[i])
            .is_some_and(|i| self.w[i] > o.w[i])
    }

    /// Whether the exact value fits in `len` words (signed or unsigned).
    fn fits(self, signed: bool) -> bool {
        if signed {
            let ext = if self.w[self.len - 1] & 0x8000_0000 != 0 {
                u32::MAX
            } else {
                0
            };
            self.w[self.len] == ext
        } else {
            self.w[self.len] == 0
        }
    }

    fn op(self, c: Combiner, o: Wide) -> Wide {
        match c {
            Combiner::Or => {
                let mut r = self;
                r.w.iter_mut().zip(o.w).for_each(|(a, b)| *a |= b);
                r
            }
            Combiner::Xor => {
                let mut r = self;
                r.w.iter_mut().zip(o.w).for_each(|(a, b)| *a ^= b);
                r
            }
            Combiner::Add | Combiner::Uadd => self.add(o),
            Combiner::Max => {
                if o.signed_gt(self) {
                    o
                } else {
                    self
                }
            }
            Combiner::RouterDone => self,
        }
    }
}

fn finish(c: Combiner, v: Wide) -> Outcome {
    let overflow = match c {
        Combiner::Add => !v.fits(true),
        Combiner::Uadd => !v.fits(false),
        _ => false,
    };
    Outcome {
        result: Some(v.to_words(c)),
        overflow,
    }
}

/// Compute every member's outcome. `members` is in rank order; `len` words each.
pub fn combine(
    pattern: Pattern,
    combiner: Combiner,
    len: usize,
    members: &[Member],
) -> Vec<Outcome> {
    let id = Wide::identity(combiner, len);
    let value = |m: &Member| {
        if m.abstain {
            id
        } else {
            Wide::from_words(combiner, &m.words, len)
        }
    };
    let n = members.len();
    let mut out = vec![Outcome::default(); n];
    match pattern {
        Pattern::RouterDone => {}
        Pattern::Reduce => {
            let total = members.iter().fold(id, |acc, m| acc.op(combiner, value(m)));
            for (o, m) in out.iter_mut().zip(members) {
                if !m.abstain || !m.reduce_rec_abstain {
                    *o = finish(combiner, total);
                }
            }
        }
        Pattern::ScanForward => {
            let mut acc = id;
            for i in 0..n {
                if members[i].scan_start {
                    acc = id;
                }
                if !members[i].abstain {
                    out[i] = finish(combiner, acc);
                }
                acc = acc.op(combiner, value(&members[i]));
            }
        }
        Pattern::ScanBackward => {
            let mut acc = id;
            for i in (0..n).rev() {
                // A flagged member is the top of a segment that runs downward from it: it
                // sees nothing above it.
                if members[i].scan_start {
                    acc = id;
                }
                if !members[i].abstain {
                    out[i] = finish(combiner, acc);
                }
                acc = acc.op(combiner, value(&members[i]));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference arithmetic in i128/u128 for up to 3 words (96 bits).
    fn to_int(c: Combiner, w: &[u32; MAX_WORDS], len: usize) -> i128 {
        let mut v: u128 = 0;
        for i in 0..len {
            let word = if c == Combiner::Max {
                w[len - 1 - i]
            } else {
                w[i]
            };
            v |= (word as u128) << (32 * i);
        }
        let bits = 32 * len as u32;
        if matches!(c, Combiner::Add | Combiner::Max) && v >> (bits - 1) & 1 == 1 {
            (v as i128) - (1i128 << bits)
        } else {
            v as i128
        }
    }

    fn rng(seed: &mut u64) -> u32 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed as u32
    }

    #[test]
    fn every_pattern_combiner_and_width_against_a_reference() {
        let mut seed = 0x1234_5678_9abc_def1u64;
        for p in 1..=8usize {
            for len in 1..=3usize {
                for c in [
                    Combiner::Or,
                    Combiner::Add,
                    Combiner::Xor,
                    Combiner::Uadd,
                    Combiner::Max,
                ] {
                    for pattern in [Pattern::ScanForward, Pattern::ScanBackward, Pattern::Reduce] {
                        for trial in 0..20 {
                            let members: Vec<Member> = (0..p)
                                .map(|_| {
                                    let mut m = Member::default();
                                    for w in m.words.iter_mut().take(len) {
                                        // Small values half the time, so adds also stay in range.
                                        *w = if trial % 2 == 0 {
                                            rng(&mut seed)
                                        } else {
                                            rng(&mut seed) % 7
                                        };
                                    }
                                    m.scan_start = rng(&mut seed).is_multiple_of(4);
                                    m.abstain = rng(&mut seed).is_multiple_of(5);
                                    m.reduce_rec_abstain = rng(&mut seed).is_multiple_of(2);
                                    m
                                })
                                .collect();
                            let out = combine(pattern, c, len, &members);
                            let bits = 32 * len as u32;
                            let vals: Vec<i128> = members
                                .iter()
                                .map(|m| {
                                    if m.abstain {
                                        i128::MIN
                                    } else {
                                        to_int(c, &m.words, len)
                                    }
                                })
                                .collect();
                            let fold = |range: &mut dyn Iterator<Item = usize>| -> i128 {
                                let mut acc: Option<i128> = None;
                                for j in range {
                                    if vals[j] == i128::MIN {
                                        continue;
                                    }
                                    let v = vals[j];
                                    acc = Some(match (acc, c) {
                                        (None, _) => v,
                                        (Some(a), Combiner::Or) => a | v,
                                        (Some(a), Combiner::Xor) => a ^ v,
                                        (Some(a), Combiner::Add | Combiner::Uadd) => a + v,
                                        (Some(a), Combiner::Max) => a.max(v),
                                        _ => unreachable!(),
                                    });
                                }
                                acc.unwrap_or(if c == Combiner::Max {
                                    -(1i128 << (bits - 1))
                                } else {
                                    0
                                })
                            };
                            for i in 0..p {
                                let expect: Option<i128> = match pattern {
                                    Pattern::Reduce => (!members[i].abstain
                                        || !members[i].reduce_rec_abstain)
                                        .then(|| fold(&mut (0..p))),
                                    Pattern::ScanForward => (!members[i].abstain).then(|| {
                                        let start = (0..=i)
                                            .rev()
                                            .find(|&j| members[j].scan_start)
                                            .unwrap_or(0);
                                        fold(&mut (start..i))
                                    }),
                                    Pattern::ScanBackward => (!members[i].abstain).then(|| {
                                        let end = (i..p)
                                            .find(|&j| members[j].scan_start)
                                            .unwrap_or(p - 1);
                                        fold(&mut (i + 1..=end))
                                    }),
                                    Pattern::RouterDone => None,
                                };
                                match (expect, out[i].result) {
                                    (None, None) => {}
                                    (Some(e), Some(got)) => {
                                        let modulus = 1i128 << bits;
                                        let got_v = to_int(c, &got, len);
                                        assert_eq!(
                                            got_v.rem_euclid(modulus),
                                            e.rem_euclid(modulus),
                                            "p={p} len={len} {c:?} {pattern:?} member {i}"
                                        );
                                        let fits = match c {
                                            Combiner::Add => {
                                                e >= -(1i128 << (bits - 1))
                                                    && e < (1i128 << (bits - 1))
                                            }
                                            Combiner::Uadd => e < modulus,
                                            _ => true,
                                        };
                                        assert_eq!(
                                            out[i].overflow, !fits,
                                            "overflow p={p} len={len} {c:?} {pattern:?} member {i}"
                                        );
                                    }
                                    (e, g) => panic!(
                                        "member {i}: expected {e:?}, got {g:?} ({c:?} {pattern:?})"
                                    ),
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn five_word_adds_carry_across_every_word() {
        let len = 5;
        let a = Member {
            words: [u32::MAX, u32::MAX, u32::MAX, u32::MAX, 0x7FFF_FFFF],
            ..Default::default()
        };
        let b = Member {
            words: [1, 0, 0, 0, 0],
            ..Default::default()
        };
        let out = combine(Pattern::Reduce, Combiner::Uadd, len, &[a, b]);
        assert_eq!(out[0].result.unwrap(), [0, 0, 0, 0, 0x8000_0000]);
        assert!(!out[0].overflow, "fits unsigned");
        let out = combine(Pattern::Reduce, Combiner::Add, len, &[a, b]);
        assert!(out[0].overflow, "signed overflow past 2^159 - 1");
        // MAX compares the most significant word first, signed.
        let x = Member {
            words: [0xFFFF_FFFF, 9, 9, 9, 9],
            ..Default::default()
        }; // negative
        let y = Member {
            words: [0, 0, 0, 0, 1],
            ..Default::default()
        };
        let out = combine(Pattern::Reduce, Combiner::Max, len, &[x, y]);
        assert_eq!(out[1].result.unwrap(), y.words);
    }

    #[test]
    fn forward_add_scan_is_exclusive_and_first_gets_identity() {
        let members: Vec<Member> = (1..=4)
            .map(|v| Member {
                words: [v, 0, 0, 0, 0],
                ..Default::default()
            })
            .collect();
        let out = combine(Pattern::ScanForward, Combiner::Add, 1, &members);
        let got: Vec<u32> = out.iter().map(|o| o.result.unwrap()[0]).collect();
        assert_eq!(got, vec![0, 1, 3, 6]);
        let out = combine(Pattern::ScanBackward, Combiner::Max, 1, &members);
        let got: Vec<u32> = out.iter().map(|o| o.result.unwrap()[0]).collect();
        assert_eq!(got, vec![4, 4, 4, 0x8000_0000]);
    }

    #[test]
    fn legal_pairs() {
        assert!(legal(Pattern::RouterDone, Combiner::RouterDone, 1));
        assert!(!legal(Pattern::RouterDone, Combiner::RouterDone, 2));
        assert!(!legal(Pattern::Reduce, Combiner::RouterDone, 1));
        assert!(!legal(Pattern::RouterDone, Combiner::Add, 1));
        assert!(legal(Pattern::ScanForward, Combiner::Max, 5));
        assert!(!legal(Pattern::ScanForward, Combiner::Max, 6));
        assert!(!legal(Pattern::ScanForward, Combiner::Max, 0));
    }
}
