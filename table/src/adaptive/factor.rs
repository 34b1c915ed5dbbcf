//! The unit an adaptive item stores and a stamp writes: a factor in parts
//! per million ([`Factor`], [`PPM`]), and the refill amount a bucket is
//! stamped with under one ([`stamped_refill`]): `min(base_ra x factor, cp)`
//! and never below the base, so an effective limit stays between the base
//! and the burst. How a factor is chosen is `zae_adaptive::law`'s.

/// A factor in parts per million: `ONE` is the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Factor(i64);

/// A factor as reports show it: a number, 1 at base.
impl serde::Serialize for Factor {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.as_f64())
    }
}

/// Parts per million of one.
pub const PPM: i64 = 1_000_000;

impl Factor {
    pub const ONE: Factor = Factor(PPM);

    /// A factor from parts per million; anything below one is one.
    pub fn from_ppm(ppm: i64) -> Factor {
        Factor(ppm.max(PPM))
    }

    /// The nearest factor to a real number; not finite or below one is one.
    pub fn from_f64(value: f64) -> Factor {
        if !value.is_finite() || value <= 1.0 {
            return Factor::ONE;
        }
        // Capped far above any ratio of two i64 millitoken amounts that matters.
        Factor((value * PPM as f64).round().min(1.0e15) as i64)
    }

    pub fn ppm(self) -> i64 {
        self.0
    }

    pub fn as_f64(self) -> f64 {
        self.0 as f64 / PPM as f64
    }

    /// Whether `self` differs from `other` by at least `band` (0.05 = 5%),
    /// measured on the larger of the two.
    pub fn differs(self, other: Factor, band: f64) -> bool {
        let (low, high) = (self.0.min(other.0) as f64, self.0.max(other.0) as f64);
        high - low >= band * high
    }
}

/// The refill amount a bucket is stamped with: the base times the factor
/// (capped by `max_scale`), never above the burst and never below the base.
pub fn stamped_refill(
    base_refill: i64,
    capacity: i64,
    factor: Factor,
    max_scale: Option<Factor>,
) -> i64 {
    let factor = max_scale.map_or(factor, |cap| factor.min(cap));
    let scaled = i128::from(base_refill) * i128::from(factor.ppm()) / i128::from(PPM);
    let ceiling = i128::from(capacity.max(base_refill));
    let stamped = scaled.min(ceiling).max(i128::from(base_refill));
    i64::try_from(stamped).unwrap_or(base_refill)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_band_is_relative_to_the_larger_factor() {
        let f = Factor::from_ppm(2 * PPM);
        assert!(!f.differs(Factor::from_ppm(2_090_000), 0.05));
        assert!(f.differs(Factor::from_ppm(2_110_000), 0.05));
        assert!(f.differs(Factor::from_ppm(1_890_000), 0.05));
    }
}
