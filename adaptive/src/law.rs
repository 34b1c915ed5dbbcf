//! The law of an adaptive limit, in integers: a factor in parts per million,
//! the most a level can scale, and the refill amount a bucket is stamped with.
//!
//! `factor = clamp(1 / utilization, 1, max_factor)`; a level's `max_factor`
//! is its burst over its base rate (`cp / ra`), lowered by `max_scale`. The
//! stamped refill is `min(base_ra x factor, cp)` and never below the base,
//! so an effective limit stays between the base and the burst.

pub use zae_table::adaptive::factor::Factor;
use zae_table::adaptive::factor::PPM;

/// The most a level's bucket can scale: its burst over its base rate, in
/// parts per million, lowered by `max_scale`. One when the level has no room
/// (`capacity <= refill_amount`) or no rate.
pub fn max_factor(capacity: i64, refill_amount: i64, max_scale: Option<Factor>) -> Factor {
    if refill_amount <= 0 || capacity <= refill_amount {
        return Factor::ONE;
    }
    let ratio = i128::from(capacity) * i128::from(PPM) / i128::from(refill_amount);
    let ratio = Factor::from_ppm(i64::try_from(ratio).unwrap_or(i64::MAX));
    max_scale.map_or(ratio, |cap| ratio.min(cap))
}

/// The factor the law asks for at a utilization, in `[1, max_factor]`;
/// `max_factor` when nothing was used.
pub fn factor_for(utilization: f64, max_factor: Factor) -> Factor {
    if !utilization.is_finite() || utilization <= 0.0 {
        return max_factor;
    }
    Factor::from_f64(1.0 / utilization).min(max_factor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zae_table::adaptive::factor::stamped_refill;

    /// The issue's table: base 1,000/min, burst 10,000.
    #[test]
    fn the_law_gives_the_table_of_the_issue() {
        let (cp, ra) = (10_000_000, 1_000_000);
        let max = max_factor(cp, ra, None);
        assert_eq!(max, Factor::from_ppm(10 * PPM));
        for (utilization, expected_per_min) in
            [(0.2, 5_000), (0.5, 2_000), (1.0, 1_000), (1.5, 1_000)]
        {
            let f = factor_for(utilization, max);
            assert_eq!(stamped_refill(ra, cp, f, None), expected_per_min * 1000);
        }
        assert_eq!(factor_for(0.0, max), max);
        assert_eq!(stamped_refill(ra, cp, factor_for(0.0, max), None), cp);
    }

    #[test]
    fn max_scale_caps_below_the_burst_and_never_raises_it() {
        let three = Factor::from_ppm(3 * PPM);
        assert_eq!(max_factor(10_000, 1_000, Some(three)), three);
        assert_eq!(
            max_factor(2_000, 1_000, Some(three)),
            Factor::from_ppm(2 * PPM)
        );
        assert_eq!(
            stamped_refill(1_000, 10_000, Factor::from_ppm(8 * PPM), Some(three)),
            3_000
        );
    }

    #[test]
    fn no_room_or_no_rate_means_base() {
        assert_eq!(max_factor(1_000, 1_000, None), Factor::ONE);
        assert_eq!(max_factor(500, 1_000, None), Factor::ONE);
        assert_eq!(max_factor(500, 0, None), Factor::ONE);
        // A bucket whose burst is below its rate keeps its rate.
        assert_eq!(
            stamped_refill(1_000, 500, Factor::from_ppm(4 * PPM), None),
            1_000
        );
    }

    #[test]
    fn extreme_values_saturate_instead_of_overflowing() {
        let huge = Factor::from_f64(f64::MAX);
        assert_eq!(stamped_refill(i64::MAX, i64::MAX, huge, None), i64::MAX);
        assert_eq!(Factor::from_f64(f64::NAN), Factor::ONE);
        assert_eq!(Factor::from_ppm(-5), Factor::ONE);
        assert_eq!(max_factor(i64::MAX, 1, None).ppm(), i64::MAX);
    }
}
