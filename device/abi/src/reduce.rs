//! Element-wise reductions of vector collectives: one definition for the fabric and for
//! libni's window path, so both give the same bits (reductions go in rank order).

use crate::fastpath::{dtype, redop};

/// Fill `acc` with the identity of `o` over `d`.
pub fn identity(d: u32, o: u32, acc: &mut [u8]) {
    macro_rules! fill {
        ($t:ty, $v:expr) => {
            for c in acc.chunks_exact_mut(std::mem::size_of::<$t>()) {
                c.copy_from_slice(&<$t>::to_le_bytes($v));
            }
        };
    }
    macro_rules! ident {
        ($t:ty, $zero:expr, $one:expr, $min:expr, $max:expr, $ones:expr) => {
            match o {
                redop::PROD => fill!($t, $one),
                redop::MIN => fill!($t, $max),
                redop::MAX => fill!($t, $min),
                redop::AND => fill!($t, $ones),
                _ => fill!($t, $zero),
            }
        };
    }
    match d {
        dtype::I32 => ident!(i32, 0, 1, i32::MIN, i32::MAX, -1),
        dtype::U32 => ident!(u32, 0, 1, 0, u32::MAX, u32::MAX),
        dtype::I64 => ident!(i64, 0, 1, i64::MIN, i64::MAX, -1),
        dtype::U64 => ident!(u64, 0, 1, 0, u64::MAX, u64::MAX),
        dtype::F32 => ident!(f32, 0.0, 1.0, f32::NEG_INFINITY, f32::INFINITY, 0.0),
        _ => ident!(f64, 0.0, 1.0, f64::NEG_INFINITY, f64::INFINITY, 0.0),
    }
}

/// `acc = acc op x`, element-wise (little-endian elements, the client's own layout).
pub fn apply(d: u32, o: u32, acc: &mut [u8], x: &[u8]) {
    macro_rules! int {
        ($t:ty) => {{
            let n = std::mem::size_of::<$t>();
            for (a, b) in acc.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
                let va = <$t>::from_le_bytes(a.try_into().unwrap());
                let vb = <$t>::from_le_bytes(b.try_into().unwrap());
                let r = match o {
                    redop::SUM => va.wrapping_add(vb),
                    redop::PROD => va.wrapping_mul(vb),
                    redop::MIN => va.min(vb),
                    redop::MAX => va.max(vb),
                    redop::AND => va & vb,
                    redop::OR => va | vb,
                    _ => va ^ vb,
                };
                a.copy_from_slice(&r.to_le_bytes());
            }
        }};
    }
    macro_rules! float {
        ($t:ty) => {{
            let n = std::mem::size_of::<$t>();
            for (a, b) in acc.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
                let va = <$t>::from_le_bytes(a.try_into().unwrap());
                let vb = <$t>::from_le_bytes(b.try_into().unwrap());
                let r = match o {
                    redop::SUM => va + vb,
                    redop::PROD => va * vb,
                    // Deterministic for NaN: the accumulator is kept unless vb compares less.
                    redop::MIN => {
                        if vb < va {
                            vb
                        } else {
                            va
                        }
                    }
                    _ => {
                        if vb > va {
                            vb
                        } else {
                            va
                        }
                    }
                };
                a.copy_from_slice(&r.to_le_bytes());
            }
        }};
    }
    match d {
        dtype::I32 => int!(i32),
        dtype::U32 => int!(u32),
        dtype::I64 => int!(i64),
        dtype::U64 => int!(u64),
        dtype::F32 => float!(f32),
        _ => float!(f64),
    }
}
