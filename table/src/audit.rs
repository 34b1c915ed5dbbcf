//! What every audit event shares, whichever Lambda writes it: the client's
//! ULID event ids and its timestamp format.

use chrono::DateTime;

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// The client's default when the namespace's system config sets no retention.
pub const DEFAULT_RETENTION_DAYS: i64 = 90;

/// A ULID: 48 bits of milliseconds, then 80 bits of `entropy`, in Crockford
/// base 32, so events sort by time like the client's own.
pub fn ulid(at_ms: i64, entropy: [u8; 10]) -> String {
    let mut low = [0u8; 16];
    low[6..].copy_from_slice(&entropy);
    let millis = u128::from(u64::try_from(at_ms).unwrap_or(0) & 0xFFFF_FFFF_FFFF);
    let value = (millis << 80) | u128::from_be_bytes(low);
    (0..26)
        .map(|i| CROCKFORD[((value >> (125 - 5 * i)) & 31) as usize] as char)
        .collect()
}

/// Reads the time part of a ULID back, in milliseconds.
pub fn ulid_millis(id: &str) -> Option<i64> {
    id.get(..10)?.bytes().try_fold(0i64, |acc, b| {
        let digit = CROCKFORD.iter().position(|c| *c == b)?;
        Some(acc * 32 + digit as i64)
    })
}

/// `YYYY-MM-DDTHH:MM:SSZ`, the client's timestamp format.
pub fn timestamp(at_ms: i64) -> String {
    DateTime::from_timestamp_millis(at_ms)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The audit item's `ttl`: epoch seconds when it expires.
pub fn expiry(at_ms: i64, retention_days: i64) -> i64 {
    at_ms.div_euclid(1000) + retention_days.saturating_mul(86_400)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulids_carry_their_time_and_sort_by_it() {
        let a = ulid(1_795_970_136_158, [0xff; 10]);
        let b = ulid(1_795_970_136_159, [0; 10]);
        assert_eq!(a.len(), 26);
        assert!(a.bytes().all(|c| CROCKFORD.contains(&c)));
        assert!(a < b);
        assert_eq!(ulid_millis(&a), Some(1_795_970_136_158));
        assert_eq!(timestamp(1_795_970_136_158), "2026-11-29T16:35:36Z");
    }
}
