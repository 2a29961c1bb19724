//! How the state types that serde cannot derive on its own cross a handover.

/// Arrays longer than serde's 32, as sequences.
pub mod array {
    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer, T: Serialize, const N: usize>(
        a: &[T; N],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(a.iter())
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>, const N: usize>(
        d: D,
    ) -> Result<[T; N], D::Error> {
        let v: Vec<T> = Vec::deserialize(d)?;
        let len = v.len();
        v.try_into()
            .map_err(|_| D::Error::invalid_length(len, &"the array's length"))
    }
}

/// An `Instant` as the nanoseconds since it: the old process's clock means nothing to the
/// new one, but the time elapsed carries over (the monotonic clock does not stop at exec).
pub mod instant {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::{Duration, Instant};

    pub fn serialize<S: Serializer>(t: &Instant, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(t.elapsed().as_nanos().min(u64::MAX as u128) as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Instant, D::Error> {
        let ago = Duration::from_nanos(u64::deserialize(d)?);
        let now = Instant::now();
        Ok(now.checked_sub(ago).unwrap_or(now))
    }
}

/// A boxed array longer than serde's 32, as a sequence.
pub mod boxed_array {
    use serde::{Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer, T: Serialize, const N: usize>(
        a: &[T; N],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        super::array::serialize(a, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: serde::Deserialize<'de>, const N: usize>(
        d: D,
    ) -> Result<Box<[T; N]>, D::Error> {
        super::array::deserialize(d).map(Box::new)
    }
}
