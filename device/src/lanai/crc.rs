//! The CRCs of the Lanai X (§8, §13.2): the CRC-32 engine's state machine and the channel
//! CRCs the ports append and check.
//!
//! All three protocols share the CRC-32 polynomial 0x04C11DB7; they differ in bit order
//! (§8: Myrinet most significant bit first, GigE and InfiniBand least significant first).
//! The seed does not say how the two bits of `CRC32_BIT_ORDER` split that between the input
//! and the state, so the model takes bit 1 to feed each byte least significant bit first
//! and bit 2 to keep the state bit-reversed: order 00 is CRC-32/BZIP2 (check value
//! 0xFC891918 on "123456789"), 11 the reflected CRC-32 of Ethernet (0xCBF43926), and the
//! two mixed orders are the consistent halves of those.

/// The polynomial, most significant bit first.
const POLY: u32 = 0x04C1_1DB7;

/// The state-transition table of the MSB-first CRC-32 (`crc32(state, input)` of §8).
static TABLE: [u32; 256] = table();

const fn table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u32) << 24;
        let mut k = 0;
        while k < 8 {
            c = if c & 0x8000_0000 != 0 {
                (c << 1) ^ POLY
            } else {
                c << 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

/// One byte into an MSB-first state.
fn step(state: u32, byte: u8) -> u32 {
    (state << 8) ^ TABLE[((state >> 24) as u8 ^ byte) as usize]
}

/// A bit order: `CRC32_CONFIG[2:1]` or a port's `CRC32_BIT_ORDER`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Order(pub u8);

impl Order {
    pub const MYRINET: Order = Order(0);
    pub const GIGE_IB: Order = Order(3);

    fn lsb_in(self) -> bool {
        self.0 & 1 != 0
    }

    fn reflected_state(self) -> bool {
        self.0 & 2 != 0
    }
}

/// The CRC-32 engine's state (the `CRC32` register), kept MSB-first internally.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Crc32 {
    state: u32,
}

impl Crc32 {
    /// The register as software reads it in `order`.
    pub fn read(&self, order: Order) -> u32 {
        if order.reflected_state() {
            self.state.reverse_bits()
        } else {
            self.state
        }
    }

    pub fn write(&mut self, order: Order, v: u32) {
        self.state = if order.reflected_state() {
            v.reverse_bits()
        } else {
            v
        };
    }

    pub fn feed(&mut self, order: Order, bytes: &[u8]) {
        for &b in bytes {
            let b = if order.lsb_in() { b.reverse_bits() } else { b };
            self.state = step(self.state, b);
        }
    }
}

/// The channel CRC-32 of `bytes` as a port computes it: seeded with all ones, complemented
/// (§8's recipe). With `infiniband`, the LRH's VL field (the first byte's high nibble) counts
/// as all ones, the variant-field rule of IAS §7.8.1 for the one field a link may change.
pub fn crc32(order: Order, infiniband: bool, bytes: &[u8]) -> u32 {
    let mut c = Crc32::default();
    c.write(order, u32::MAX);
    match bytes.split_first() {
        Some((&first, rest)) if infiniband => {
            c.feed(order, &[first | 0xF0]);
            c.feed(order, rest);
        }
        _ => c.feed(order, bytes),
    }
    !c.read(order)
}

/// The CRC-32's four bytes as they travel: most significant first in Myrinet order, least
/// significant first (the Ethernet FCS) when the state is kept reflected.
pub fn crc32_bytes(order: Order, crc: u32) -> [u8; 4] {
    if order.reflected_state() {
        crc.to_le_bytes()
    } else {
        crc.to_be_bytes()
    }
}

/// Myrinet's CRC-8 (x^8 + x^2 + x + 1, seeded 0; the seed names no polynomial, this is the
/// one of ANSI/VITA 26), over everything before it including the CRC-32.
pub fn crc8(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |c, &b| CRC8[(c ^ b) as usize])
}

/// InfiniBand's VCRC (CRC-16, polynomial 0x100B, seeded and complemented with all ones, IBA
/// §7.8.2), over everything before it including the ICRC.
pub fn crc16(bytes: &[u8]) -> u16 {
    !bytes.iter().fold(0xFFFFu16, |c, &b| {
        (c << 8) ^ CRC16[((c >> 8) as u8 ^ b) as usize]
    })
}

static CRC8: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u8;
        let mut k = 0;
        while k < 8 {
            c = if c & 0x80 != 0 {
                (c << 1) ^ 0x07
            } else {
                c << 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

static CRC16: [u16; 256] = {
    let mut t = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u16) << 8;
        let mut k = 0;
        while k < 8 {
            c = if c & 0x8000 != 0 {
                (c << 1) ^ 0x100B
            } else {
                c << 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    /// §8: seed with 0xFFFFFFFF, feed, complement. Digest check values, both orders.
    #[test]
    fn check_values_in_both_standard_orders() {
        assert_eq!(crc32(Order::MYRINET, false, b"123456789"), 0xFC89_1918);
        assert_eq!(crc32(Order::GIGE_IB, false, b"123456789"), 0xCBF4_3926);
    }

    /// The tables give what the bitwise definitions give.
    #[test]
    fn short_crc_tables_match_the_bitwise_definitions() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 37 % 251) as u8).collect();
        let mut c8 = 0u8;
        let mut c16 = 0xFFFFu16;
        for &b in &data {
            c8 ^= b;
            c16 ^= (b as u16) << 8;
            for _ in 0..8 {
                c8 = if c8 & 0x80 != 0 {
                    (c8 << 1) ^ 0x07
                } else {
                    c8 << 1
                };
                c16 = if c16 & 0x8000 != 0 {
                    (c16 << 1) ^ 0x100B
                } else {
                    c16 << 1
                };
            }
        }
        assert_eq!(crc8(&data), c8);
        assert_eq!(crc16(&data), !c16);
    }

    /// Feeding a byte, a half-word or a word is the same stream, most significant byte first.
    #[test]
    fn widths_feed_the_same_stream() {
        for o in 0..4 {
            let o = Order(o);
            let mut a = Crc32::default();
            a.write(o, u32::MAX);
            a.feed(o, &0x3132_3334u32.to_be_bytes());
            let mut b = Crc32::default();
            b.write(o, u32::MAX);
            b.feed(o, b"12");
            b.feed(o, b"3");
            b.feed(o, b"4");
            assert_eq!(a.read(o), b.read(o));
        }
    }
}
