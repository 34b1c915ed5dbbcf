//! Attribute values as both Lambdas read and write them: one owned type for
//! every item, condition and update, whatever the store behind it.

use std::collections::{BTreeMap, BTreeSet};

/// A DynamoDB attribute value, in the types the 0.17.0 table uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attr {
    S(String),
    /// Kept as text, as DynamoDB sends it; compare with [`Attr::same`].
    N(String),
    Bool(bool),
    L(Vec<Attr>),
    M(BTreeMap<String, Attr>),
    Ss(BTreeSet<String>),
    Null,
}

/// An item, or a map of attributes: name to value, in name order.
pub type Item = BTreeMap<String, Attr>;

impl Attr {
    pub fn s(text: impl Into<String>) -> Attr {
        Attr::S(text.into())
    }
    pub fn n(number: impl ToString) -> Attr {
        Attr::N(number.to_string())
    }
    pub fn as_s(&self) -> Option<&str> {
        match self {
            Attr::S(s) => Some(s),
            _ => None,
        }
    }
    /// An `N` holding an integer the table model can use.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Attr::N(n) => crate::milli::parse_int(n).ok(),
            _ => None,
        }
    }
    /// Equality with numbers compared as decimals, so `1000.0` and `1000`
    /// (as a Python writer may store them) are the same value.
    pub fn same(&self, other: &Attr) -> bool {
        match (self, other) {
            (Attr::N(a), Attr::N(b)) => a == b || decimal(a).is_some_and(|x| Some(x) == decimal(b)),
            (Attr::L(a), Attr::L(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same(y))
            }
            (Attr::M(a), Attr::M(b)) => same_item(a, b),
            _ => self == other,
        }
    }
}

/// Two items hold the same attributes with [`Attr::same`] values.
pub fn same_item(a: &Item, b: &Item) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(name, value)| b.get(name).is_some_and(|other| value.same(other)))
}

/// DynamoDB's limit on one item: 400 KB, names and values counted.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// An item's size as DynamoDB counts it against [`MAX_ITEM_BYTES`]: each
/// attribute's name (UTF-8 bytes) and value.
pub fn item_size(item: &Item) -> usize {
    item.iter()
        .map(|(name, value)| name.len().saturating_add(value.size()))
        .fold(0, usize::saturating_add)
}

impl Attr {
    /// A value's size as DynamoDB counts it: strings by their UTF-8 bytes,
    /// numbers by about one byte per two significant digits plus one (at
    /// most 21), booleans and nulls one byte, lists and maps 3 bytes plus one
    /// per element beside what the elements (and a map's names) take.
    pub fn size(&self) -> usize {
        let sum = |sizes: &mut dyn Iterator<Item = usize>| sizes.fold(0, usize::saturating_add);
        match self {
            Attr::S(text) => text.len(),
            Attr::N(text) => {
                let digits = decimal(text).map_or(text.len(), |(_, d, _)| d.len());
                (digits.div_ceil(2) + 1).min(21)
            }
            Attr::Bool(_) | Attr::Null => 1,
            Attr::L(list) => 3 + sum(&mut list.iter().map(|v| v.size() + 1)),
            Attr::M(map) => 3 + sum(&mut map.iter().map(|(k, v)| k.len() + v.size() + 1)),
            Attr::Ss(set) => sum(&mut set.iter().map(String::len)),
        }
    }
}

/// A number as (sign, digits without leading/trailing zeros, exponent), so
/// that textual spellings of one decimal compare equal.
pub fn decimal(text: &str) -> Option<(bool, String, i64)> {
    let text = text.trim();
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => (&text[..at], text[at + 1..].parse::<i64>().ok()?),
        None => (text, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if !(int.bytes().chain(frac.bytes())).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = format!("{int}{frac}");
    let exponent = exponent.checked_add(int.len() as i64)?;
    let leading = digits.len() - digits.trim_start_matches('0').len();
    let digits = digits.trim_matches('0');
    if digits.is_empty() {
        return Some((false, String::new(), 0));
    }
    Some((negative, digits.to_owned(), exponent - leading as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_as_decimals() {
        for (a, b) in [
            ("1000", "1000.0"),
            ("1e3", "1000"),
            ("0.50", ".5"),
            ("0", "-0.0"),
        ] {
            assert!(Attr::n(a).same(&Attr::n(b)), "{a} = {b}");
        }
        for (a, b) in [("1000", "100"), ("1", "-1"), ("10", "1e2")] {
            assert!(!Attr::n(a).same(&Attr::n(b)), "{a} != {b}");
        }
        assert!(!Attr::n("1").same(&Attr::s("1")));
    }

    #[test]
    fn sizes_count_names_and_values_as_dynamodb_does() {
        let item = Item::from([
            ("PK".to_owned(), Attr::s("ns/é")),
            ("n".to_owned(), Attr::n("12345")),
            ("l".to_owned(), Attr::L(vec![Attr::Bool(true), Attr::Null])),
            (
                "m".to_owned(),
                Attr::M(Item::from([("k".into(), Attr::s("vv"))])),
            ),
        ]);
        // 2+5, 1+4, 1+(3+2+2), 1+(3+1+2+1)
        assert_eq!(item_size(&item), 7 + 5 + 8 + 8);
        assert_eq!(Attr::n("1e125").size(), 2);
        assert!(item_size(&item) < MAX_ITEM_BYTES);
    }
}
