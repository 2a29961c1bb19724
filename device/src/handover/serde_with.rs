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

/// An `Instant` as the system's `CLOCK_MONOTONIC` at that instant, which the exec does not
/// reset: time keeps running through the pause (a timer due during it is due after it).
pub mod instant {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::{Duration, Instant};

    pub fn serialize<S: Serializer>(t: &Instant, s: S) -> Result<S::Ok, S::Error> {
        let ago = t.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        s.serialize_u64(crate::handover::monotonic_ns().saturating_sub(ago))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Instant, D::Error> {
        let at = u64::deserialize(d)?;
        let ago = Duration::from_nanos(crate::handover::monotonic_ns().saturating_sub(at));
        let now = Instant::now();
        Ok(now.checked_sub(ago).unwrap_or(now))
    }
}

/// A map whose keys are not strings (JSON's only keys), as a sequence of pairs.
pub mod pairs {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    pub fn serialize<S: Serializer, K: Serialize, V: Serialize>(
        m: &BTreeMap<K, V>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(m.iter())
    }

    pub fn deserialize<
        'de,
        D: Deserializer<'de>,
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
    >(
        d: D,
    ) -> Result<BTreeMap<K, V>, D::Error> {
        Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
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
