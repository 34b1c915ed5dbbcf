//! Millitoken arithmetic. Balances and amounts on bucket items are tokens x 1000;
//! usage snapshots count whole tokens.

use thiserror::Error;

/// Millitokens per token.
pub const MILLI: i64 = 1000;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NumberError {
    #[error("`{0}` is not an integer")]
    NotInteger(String),
    #[error("`{0}` does not fit in 64 bits")]
    OutOfRange(String),
}

/// Parses a DynamoDB `N` value that the table model stores as an integer.
///
/// DynamoDB renders numbers canonically, so an integer never carries a fraction
/// or an exponent; anything else is corrupt input, not something to round.
pub fn parse_int(text: &str) -> Result<i64, NumberError> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NumberError::NotInteger(abbreviate(text)));
    }
    text.parse::<i64>()
        .map_err(|_| NumberError::OutOfRange(abbreviate(text)))
}

/// Floor of `milli / 1000`: whole tokens, rounding toward minus infinity as the
/// reference does (-1500 milli is -2 tokens).
pub fn whole_tokens(milli: i64) -> i64 {
    milli.div_euclid(MILLI)
}

/// Whole tokens consumed between two readings of a cumulative counter.
///
/// Taking the difference of the floors, rather than the floor of the
/// difference, makes the per-record amounts telescope: summed over a bucket's
/// records they equal the whole tokens of the counter itself, so no fraction
/// is lost however the consumption was split.
pub fn whole_token_delta(old_milli: i64, new_milli: i64) -> i64 {
    whole_tokens(new_milli) - whole_tokens(old_milli)
}

fn abbreviate(text: &str) -> String {
    const MAX: usize = 48;
    if text.len() <= MAX {
        text.to_owned()
    } else {
        format!("{}…", crate::shown::clip(text, MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_int_accepts_canonical_integers() {
        assert_eq!(parse_int("0"), Ok(0));
        assert_eq!(parse_int("-100000"), Ok(-100_000));
        assert_eq!(parse_int("9223372036854775807"), Ok(i64::MAX));
    }

    #[test]
    fn parse_int_rejects_fractions_exponents_and_garbage() {
        for bad in ["", "-", "1.5", "1e3", " 1", "0x10", "abc", "+1"] {
            assert!(
                matches!(parse_int(bad), Err(NumberError::NotInteger(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn parse_int_rejects_huge_numbers() {
        let huge = "9".repeat(38);
        assert!(matches!(parse_int(&huge), Err(NumberError::OutOfRange(_))));
    }

    #[test]
    fn whole_tokens_floors_toward_minus_infinity() {
        assert_eq!(whole_tokens(1999), 1);
        assert_eq!(whole_tokens(-1500), -2);
        assert_eq!(whole_tokens(-1000), -1);
    }

    #[test]
    fn whole_token_deltas_telescope_without_loss() {
        // Three records of 400 milli each: 1200 milli is one whole token.
        let readings = [0, 400, 800, 1200];
        let sum: i64 = readings
            .windows(2)
            .map(|w| whole_token_delta(w[0], w[1]))
            .sum();
        assert_eq!(sum, 1);
        // The reference's floor of each delta would have counted 0.
        assert_eq!(
            readings
                .windows(2)
                .map(|w| whole_tokens(w[1] - w[0]))
                .sum::<i64>(),
            0
        );
    }
}
