//! The seam between the aggregator's logic and DynamoDB: the writes the
//! logic asks for, as plain data, and the [`Table`] trait that carries them out.

use std::collections::BTreeMap;
use std::future::Future;

/// A value in a write, in the three types the aggregator writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Val {
    S(String),
    N(String),
    M(BTreeMap<String, Val>),
}

impl Val {
    pub fn s(text: impl Into<String>) -> Val {
        Val::S(text.into())
    }
    pub fn n(number: impl ToString) -> Val {
        Val::N(number.to_string())
    }
}

/// One UpdateItem on a snapshot item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotWrite {
    pub pk: String,
    pub sk: String,
    pub update: String,
    pub condition: String,
    pub names: BTreeMap<String, String>,
    pub values: BTreeMap<String, Val>,
}

/// One conditional PutItem of an audit event (`attribute_not_exists(PK)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPut {
    pub pk: String,
    pub sk: String,
    pub item: BTreeMap<String, Val>,
}

pub use zae_table::store_error::StoreError;

/// The table operations the aggregator needs.
pub trait Table: Send + Sync {
    fn update_snapshot(
        &self,
        write: &SnapshotWrite,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Strongly consistent read of string attributes of one item; absent
    /// attributes (or an absent item) are left out of the result.
    fn read_strings(
        &self,
        pk: &str,
        sk: &str,
        attributes: &[String],
    ) -> impl Future<Output = Result<BTreeMap<String, String>, StoreError>> + Send;

    /// `Ok(true)` if the event was written, `Ok(false)` if it already existed.
    fn put_audit_event(
        &self,
        put: &AuditPut,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// `audit_retention_days` of the namespace's system config, if set.
    fn audit_retention_days(
        &self,
        namespace: &str,
    ) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;
}
