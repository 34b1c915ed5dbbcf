//! What a bucket records of its last adaptive stamp of each limit, beside
//! the limit and outside the client's `b_{limit}_{field}` names:
//! `ad_g_{limit}` (the stamp's generation), `ad_ra_{limit}` (the amount it
//! wrote) and `ad_pre_{limit}` (the amount before the first stamp). The
//! names are the bucket item's; what a stamp writes and when is
//! `crate::adaptive::stamp`'s.

use crate::value::{Attr, Item};

/// The record's attributes for a limit: `{prefix}{limit}`, in the order of
/// [`Record::names`].
pub const RECORD_PREFIXES: [&str; 3] = ["ad_g_", "ad_ra_", "ad_pre_"];

pub fn generation_attr(limit: &str) -> String {
    format!("{}{limit}", RECORD_PREFIXES[0])
}

pub fn stamped_attr(limit: &str) -> String {
    format!("{}{limit}", RECORD_PREFIXES[1])
}

pub fn before_attr(limit: &str) -> String {
    format!("{}{limit}", RECORD_PREFIXES[2])
}

/// The limit and the place in [`RECORD_PREFIXES`] of a record attribute.
pub fn split_record_attr(attr: &str) -> Option<(&str, usize)> {
    RECORD_PREFIXES
        .iter()
        .enumerate()
        .find_map(|(i, prefix)| Some((attr.strip_prefix(prefix)?, i)))
}

/// What a bucket records of its last stamp of one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub generation: i64,
    /// The refill amount the stamp wrote.
    pub stamped: i64,
    /// The amount before the first stamp.
    pub before: i64,
}

impl Record {
    /// The record of `limit` on `bucket`, when it has a whole one.
    pub fn of(bucket: &Item, limit: &str) -> Option<Record> {
        let int = |name: String| bucket.get(&name).and_then(Attr::as_int);
        Some(Record {
            generation: int(generation_attr(limit))?,
            stamped: int(stamped_attr(limit))?,
            before: int(before_attr(limit))?,
        })
    }

    /// The attributes a stream image carries of it, for the repair.
    pub fn names(limit: &str) -> [String; 3] {
        [
            generation_attr(limit),
            stamped_attr(limit),
            before_attr(limit),
        ]
    }
}
