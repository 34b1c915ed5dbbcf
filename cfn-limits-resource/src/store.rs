//! The seam between the provisioner's logic and DynamoDB: items as plain
//! data, and the [`Store`] trait whose one production implementation is
//! [`crate::dynamo::DynamoStore`].

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
pub use zae_table::store_error::StoreError;

/// A DynamoDB attribute value, in the types config items use.
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
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Attr::N(n) => zae_table::milli::parse_int(n).ok(),
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

/// A number as (sign, digits without leading/trailing zeros, exponent), so
/// that textual spellings of one decimal compare equal.
fn decimal(text: &str) -> Option<(bool, String, i64)> {
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
    let exponent = exponent + int.len() as i64;
    let leading = digits.len() - digits.trim_start_matches('0').len();
    let digits = digits.trim_matches('0');
    if digits.is_empty() {
        return Some((false, String::new(), 0));
    }
    Some((negative, digits.to_owned(), exponent - leading as i64))
}

pub fn same_item(a: &Item, b: &Item) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(name, value)| b.get(name).is_some_and(|other| value.same(other)))
}

/// What an update or delete returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returns {
    Nothing,
    AllOld,
    AllNew,
}

/// One UpdateItem, with its expression already rendered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Update {
    pub pk: String,
    pub sk: String,
    pub expression: String,
    pub condition: Option<String>,
    pub names: BTreeMap<String, String>,
    pub values: BTreeMap<String, Attr>,
}

/// A condition on a put or delete.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Condition {
    pub expression: String,
    pub names: BTreeMap<String, String>,
    pub values: BTreeMap<String, Attr>,
}

impl Condition {
    pub fn plain(expression: &str) -> Condition {
        Condition {
            expression: expression.to_owned(),
            ..Condition::default()
        }
    }
}

/// A key-condition query of one partition, optionally on an index, with a
/// sort-key prefix; every page is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub index: Option<&'static str>,
    pub pk_attr: &'static str,
    pub pk: String,
    pub sk_attr: &'static str,
    pub sk_prefix: String,
    pub consistent: bool,
}

/// One write inside a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxWrite {
    Put {
        item: Item,
        condition: Option<Condition>,
    },
    Update(Update),
    Delete {
        pk: String,
        sk: String,
        condition: Option<Condition>,
    },
}

/// The table operations the provisioner needs, one item at a time.
pub trait Store: Send + Sync {
    fn get(
        &self,
        pk: &str,
        sk: &str,
        consistent: bool,
    ) -> impl Future<Output = Result<Option<Item>, StoreError>> + Send;

    /// A PutItem; returns the replaced item when there was one.
    fn put(
        &self,
        item: &Item,
        condition: Option<&Condition>,
    ) -> impl Future<Output = Result<Option<Item>, StoreError>> + Send;

    fn update(
        &self,
        update: &Update,
        returns: Returns,
    ) -> impl Future<Output = Result<Option<Item>, StoreError>> + Send;

    /// A DeleteItem; returns the deleted item when there was one.
    fn delete(
        &self,
        pk: &str,
        sk: &str,
        condition: Option<&Condition>,
    ) -> impl Future<Output = Result<Option<Item>, StoreError>> + Send;

    fn query(&self, query: &Query) -> impl Future<Output = Result<Vec<Item>, StoreError>> + Send;

    /// All or nothing. A condition failing on the first write is
    /// [`StoreError::ConditionFailed`], which callers use as "already there".
    fn transact(&self, writes: &[TxWrite]) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A [`Store`] that counts the calls it passes on, by DynamoDB operation.
pub struct Counted<S> {
    inner: S,
    counts: std::sync::Mutex<BTreeMap<&'static str, u64>>,
}

impl<S> Counted<S> {
    pub fn new(inner: S) -> Self {
        Counted {
            inner,
            counts: std::sync::Mutex::new(BTreeMap::new()),
        }
    }
    fn count(&self, operation: &'static str) {
        *self.counts.lock().expect("not poisoned").entry(operation).or_default() += 1;
    }
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        self.counts.lock().expect("not poisoned").clone()
    }
}

impl<S: Store> Store for Counted<S> {
    async fn get(&self, pk: &str, sk: &str, consistent: bool) -> Result<Option<Item>, StoreError> {
        self.count("GetItem");
        self.inner.get(pk, sk, consistent).await
    }
    async fn put(&self, item: &Item, condition: Option<&Condition>) -> Result<Option<Item>, StoreError> {
        self.count("PutItem");
        self.inner.put(item, condition).await
    }
    async fn update(&self, update: &Update, returns: Returns) -> Result<Option<Item>, StoreError> {
        self.count("UpdateItem");
        self.inner.update(update, returns).await
    }
    async fn delete(&self, pk: &str, sk: &str, condition: Option<&Condition>) -> Result<Option<Item>, StoreError> {
        self.count("DeleteItem");
        self.inner.delete(pk, sk, condition).await
    }
    async fn query(&self, query: &Query) -> Result<Vec<Item>, StoreError> {
        // Counted per call, not per page.
        self.count("Query");
        self.inner.query(query).await
    }
    async fn transact(&self, writes: &[TxWrite]) -> Result<(), StoreError> {
        self.count("TransactWriteItems");
        self.inner.transact(writes).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_as_decimals() {
        for (a, b) in [("1000", "1000.0"), ("1e3", "1000"), ("0.50", ".5"), ("0", "-0.0")] {
            assert!(Attr::n(a).same(&Attr::n(b)), "{a} = {b}");
        }
        for (a, b) in [("1000", "100"), ("1", "-1"), ("10", "1e2")] {
            assert!(!Attr::n(a).same(&Attr::n(b)), "{a} != {b}");
        }
        assert!(!Attr::n("1").same(&Attr::s("1")));
    }
}
