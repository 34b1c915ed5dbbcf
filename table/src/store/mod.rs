//! The seam between the Lambdas' logic and DynamoDB: requests as plain data,
//! the [`Store`] trait that carries them out, and the failure kinds callers
//! act on. Its production implementation is `sdk::DynamoStore` (feature
//! `sdk`); its in-memory twin, for unit tests, is
//! `zae_test_support::memory::MemoryStore`.

mod counted;
mod expression;

pub use counted::Counted;
pub use expression::UpdateBuilder;

use crate::keys::{self, Index};
use crate::shown;
use crate::value::{Attr, Item};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

/// A failed table call, with the operation and key it was about, in the
/// three kinds callers act on differently.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("{operation} on {}: condition check failed", shown_key(.key))]
    ConditionFailed {
        operation: &'static str,
        key: String,
    },
    /// Throttling, a 5xx, a timeout or a dropped connection: worth another try.
    #[error("{operation} on {}: {} (retryable)", shown_key(.key), shown_message(.message))]
    Retryable {
        operation: &'static str,
        key: String,
        message: String,
    },
    /// DynamoDB refused the request itself (a ValidationException: an
    /// expression it cannot take, an item over its size limit): the same
    /// request fails the same way every time.
    #[error("{operation} on {}: {} (rejected)", shown_key(.key), shown_message(.message))]
    Rejected {
        operation: &'static str,
        key: String,
        message: String,
    },
    /// A transaction cancelled because the condition of a write other than
    /// the first failed: something it checked has moved.
    #[error("{operation} on {}: cancelled, {}", shown_key(.key), shown_message(.message))]
    Cancelled {
        operation: &'static str,
        key: String,
        message: String,
    },
    /// The table (or the index) does not exist (`ResourceNotFoundException`).
    #[error("{operation} on {}: the table does not exist ({})", shown_key(.key), shown_message(.message))]
    TableMissing {
        operation: &'static str,
        key: String,
        message: String,
    },
    #[error("{operation} on {}: {}", shown_key(.key), shown_message(.message))]
    Fatal {
        operation: &'static str,
        key: String,
        message: String,
    },
}

impl StoreError {
    /// [`StoreError::Retryable`] or [`StoreError::Fatal`], as classified.
    pub fn transient_or_fatal(
        retryable: bool,
        operation: &'static str,
        key: String,
        message: String,
    ) -> StoreError {
        if retryable {
            StoreError::Retryable {
                operation,
                key,
                message,
            }
        } else {
            StoreError::Fatal {
                operation,
                key,
                message,
            }
        }
    }

    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Retryable { .. })
    }

    /// Another transaction held the item (`TransactionConflictException`,
    /// or a cancellation for `TransactionConflict`): a retryable failure
    /// the client treats as contention, not as the table being unavailable.
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Retryable { message, .. } if message.contains("TransactionConflict"))
    }

    /// DynamoDB refused the caller's credentials the action
    /// (`AccessDeniedException`).
    pub fn is_access_denied(&self) -> bool {
        matches!(self, StoreError::Fatal { message, .. } if message.contains("AccessDenied"))
    }
}

/// What an update returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returns {
    Nothing,
    AllNew,
    /// The item before the write (`ALL_OLD`).
    AllOld,
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

impl Update {
    /// The value a `SET attr = value` of this update assigns (not one inside
    /// a function such as `if_not_exists`).
    pub fn assigned(&self, attr: &str) -> Option<&Attr> {
        let alias = self.names.iter().find(|(_, name)| *name == attr)?.0;
        let at = self.expression.find(&format!("{alias} = :"))? + alias.len() + 3;
        let placeholder: String = self.expression[at..]
            .chars()
            .take_while(|c| *c == ':' || c.is_ascii_alphanumeric())
            .collect();
        self.values.get(&placeholder)
    }
}

/// What an update that asks for the item on a failed condition answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Updated {
    /// The write landed: the item after it (`ALL_NEW`).
    Applied(Option<Item>),
    /// The condition failed: the item as it stood (`ALL_OLD` on a condition
    /// failure), `None` when there was no item.
    Refused(Option<Item>),
}

/// A condition on a put or delete.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Condition {
    pub expression: String,
    pub names: BTreeMap<String, String>,
    pub values: BTreeMap<String, Attr>,
}

/// The item exists: its partition key is there.
pub const ITEM_EXISTS: &str = "attribute_exists(PK)";
/// The item does not exist yet.
pub const ITEM_ABSENT: &str = "attribute_not_exists(PK)";

impl Condition {
    pub fn plain(expression: &str) -> Condition {
        Condition {
            expression: expression.to_owned(),
            ..Condition::default()
        }
    }
}

/// A key-condition query of one partition of the table or an index, with a
/// sort-key prefix; every page is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub index: &'static Index,
    pub pk: String,
    /// Empty: the whole partition.
    pub sk_prefix: String,
    pub consistent: bool,
}

/// Every page of a query, one after another: what `query` is for a store
/// that pages.
pub async fn all_pages<S: Store + ?Sized>(
    store: &S,
    query: &Query,
) -> Result<Vec<Item>, StoreError> {
    let mut items = Vec::new();
    let mut start: Option<Item> = None;
    loop {
        let page = store.query_page(query, start.as_ref()).await?;
        items.extend(page.items);
        match page.next {
            Some(next) => start = Some(next),
            None => return Ok(items),
        }
    }
}

/// Which way a page of a query reads, and how many items at most
/// (DynamoDB's `ScanIndexForward` and `Limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Paging {
    /// Highest sort key first.
    pub descending: bool,
    /// `None`: up to DynamoDB's 1 MB.
    pub limit: Option<u32>,
}

/// [`Store::query_page_by`] over a store that cannot order or limit: every
/// item of the query, sorted by the index's sort key (then the table's
/// keys), read on from `start` as DynamoDB's `ExclusiveStartKey` is. A
/// full page names its last item to go on from, as DynamoDB does.
pub async fn emulated_page<S: Store + ?Sized>(
    store: &S,
    query: &Query,
    start: Option<&Item>,
    paging: Paging,
) -> Result<QueryPage, StoreError> {
    let index = query.index;
    let order = |item: &Item| {
        [index.sk, Index::TABLE.pk, Index::TABLE.sk].map(|name| {
            item.get(name)
                .and_then(Attr::as_s)
                .unwrap_or_default()
                .to_owned()
        })
    };
    let mut items = store.query(query).await?;
    items.sort_by_key(order);
    if paging.descending {
        items.reverse();
    }
    if let Some(start) = start.map(order) {
        items.retain(|item| (order(item) < start) == paging.descending && order(item) != start);
    }
    let limit = paging.limit.map_or(usize::MAX, |n| n as usize);
    let full = items.len() >= limit && limit > 0;
    items.truncate(limit);
    let next = full
        .then(|| items.last().map(|last| index.start_key(last)))
        .flatten();
    Ok(QueryPage { items, next })
}

/// One page of a query: its items, and the key to go on from (DynamoDB's
/// `LastEvaluatedKey`: the table's and the index's key attributes of the
/// last item read), `None` on the last page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueryPage {
    pub items: Vec<Item>,
    pub next: Option<Item>,
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
    /// A ConditionCheck: writes nothing, cancels the transaction unless
    /// the condition holds on the item.
    Check {
        pk: String,
        sk: String,
        condition: Condition,
    },
}

impl TxWrite {
    /// `PK SK` of the item the write touches, for errors.
    pub fn key_text(&self) -> String {
        match self {
            TxWrite::Put { item, .. } => item_key_text(item),
            TxWrite::Update(update) => key_text(&update.pk, &update.sk),
            TxWrite::Delete { pk, sk, .. } | TxWrite::Check { pk, sk, .. } => key_text(pk, sk),
        }
    }
}

/// How errors name an item: each key cut to [`shown::KEY_SHOWN_BYTES`] (a
/// client can make a partition key of 2 KB).
pub fn key_text(pk: &str, sk: &str) -> String {
    let shown = |key| shown::shown(key, shown::KEY_SHOWN_BYTES);
    format!("{} {}", shown(pk), shown(sk))
}

/// An error's key and message as its text shows them: bounded whoever
/// built the error (a key may be 2 KB, a message may quote a response).
fn shown_key(key: &str) -> std::borrow::Cow<'_, str> {
    shown::shown(key, 2 * shown::KEY_SHOWN_BYTES)
}

fn shown_message(message: &str) -> std::borrow::Cow<'_, str> {
    shown::shown(message, shown::MESSAGE_SHOWN_BYTES)
}

pub fn item_key_text(item: &Item) -> String {
    key_text(
        keys::pk_of(item).unwrap_or_default(),
        keys::sk_of(item).unwrap_or_default(),
    )
}

/// The table operations the Lambdas need, one item at a time.
pub trait Store: Send + Sync {
    fn get(
        &self,
        pk: &str,
        sk: &str,
        consistent: bool,
    ) -> impl Future<Output = Result<Option<Item>, StoreError>> + Send;

    /// Only `attributes` of an item (a projection); the default reads the
    /// whole item and keeps them.
    fn get_attributes(
        &self,
        pk: &str,
        sk: &str,
        consistent: bool,
        attributes: &[String],
    ) -> impl Future<Output = Result<Option<Item>, StoreError>> + Send {
        async move {
            let item = self.get(pk, sk, consistent).await?;
            Ok(item.map(|mut item| {
                item.retain(|name, _| attributes.contains(name));
                item
            }))
        }
    }

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

    /// An UpdateItem returning the item after it, or the item that failed
    /// its condition (`ReturnValuesOnConditionCheckFailure: ALL_OLD`). The
    /// default reads the item again after a failed condition, which is not
    /// atomic; the SDK store and the in-memory twin answer from the write.
    fn update_or_old(
        &self,
        update: &Update,
    ) -> impl Future<Output = Result<Updated, StoreError>> + Send {
        async move {
            match self.update(update, Returns::AllNew).await {
                Ok(item) => Ok(Updated::Applied(item)),
                Err(StoreError::ConditionFailed { .. }) => Ok(Updated::Refused(
                    self.get(&update.pk, &update.sk, true).await?,
                )),
                Err(e) => Err(e),
            }
        }
    }

    /// Several items by key (a BatchGetItem); the items found, in no
    /// particular order. The default reads them one by one.
    fn get_many(
        &self,
        keys: &[(String, String)],
        consistent: bool,
    ) -> impl Future<Output = Result<Vec<Item>, StoreError>> + Send {
        async move {
            let mut items = Vec::with_capacity(keys.len());
            for (pk, sk) in keys {
                if let Some(item) = self.get(pk, sk, consistent).await? {
                    items.push(item);
                }
            }
            Ok(items)
        }
    }

    /// A DeleteItem; returns the deleted item when there was one.
    fn delete(
        &self,
        pk: &str,
        sk: &str,
        condition: Option<&Condition>,
    ) -> impl Future<Output = Result<Option<Item>, StoreError>> + Send;

    fn query(&self, query: &Query) -> impl Future<Output = Result<Vec<Item>, StoreError>> + Send;

    /// One page of a query, from `start` (the previous page's `next`). A
    /// store that cannot page answers everything as one page.
    fn query_page(
        &self,
        query: &Query,
        start: Option<&Item>,
    ) -> impl Future<Output = Result<QueryPage, StoreError>> + Send {
        async move {
            if start.is_some() {
                return Ok(QueryPage::default());
            }
            Ok(QueryPage {
                items: self.query(query).await?,
                next: None,
            })
        }
    }

    /// One page of a query in the order and size `paging` asks, from
    /// `start`. The default reads the whole query and pages it in memory
    /// ([`emulated_page`]); the SDK store asks DynamoDB.
    fn query_page_by(
        &self,
        query: &Query,
        start: Option<&Item>,
        paging: Paging,
    ) -> impl Future<Output = Result<QueryPage, StoreError>> + Send {
        emulated_page(self, query, start, paging)
    }

    /// All or nothing. A condition failing on the first write is
    /// [`StoreError::ConditionFailed`], which callers use as "already there";
    /// on any other, [`StoreError::Cancelled`].
    fn transact(&self, writes: &[TxWrite]) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Waits before try `attempt` (from 1) of a call refused as retryable:
    /// a transaction conflict or throttling, which another try at once
    /// would meet again. The default waits for nothing.
    fn backoff(&self, attempt: u32) -> impl Future<Output = ()> + Send {
        let _ = attempt;
        async {}
    }
}

/// A shared store is a store: the Lambda's task and a test can hold one table.
impl<S: Store> Store for Arc<S> {
    async fn get(&self, pk: &str, sk: &str, consistent: bool) -> Result<Option<Item>, StoreError> {
        (**self).get(pk, sk, consistent).await
    }
    async fn get_attributes(
        &self,
        pk: &str,
        sk: &str,
        consistent: bool,
        attributes: &[String],
    ) -> Result<Option<Item>, StoreError> {
        (**self)
            .get_attributes(pk, sk, consistent, attributes)
            .await
    }
    async fn put(
        &self,
        item: &Item,
        condition: Option<&Condition>,
    ) -> Result<Option<Item>, StoreError> {
        (**self).put(item, condition).await
    }
    async fn update(&self, update: &Update, returns: Returns) -> Result<Option<Item>, StoreError> {
        (**self).update(update, returns).await
    }
    async fn update_or_old(&self, update: &Update) -> Result<Updated, StoreError> {
        (**self).update_or_old(update).await
    }
    async fn get_many(
        &self,
        keys: &[(String, String)],
        consistent: bool,
    ) -> Result<Vec<Item>, StoreError> {
        (**self).get_many(keys, consistent).await
    }
    async fn delete(
        &self,
        pk: &str,
        sk: &str,
        condition: Option<&Condition>,
    ) -> Result<Option<Item>, StoreError> {
        (**self).delete(pk, sk, condition).await
    }
    async fn query(&self, query: &Query) -> Result<Vec<Item>, StoreError> {
        (**self).query(query).await
    }
    async fn query_page(
        &self,
        query: &Query,
        start: Option<&Item>,
    ) -> Result<QueryPage, StoreError> {
        (**self).query_page(query, start).await
    }
    async fn transact(&self, writes: &[TxWrite]) -> Result<(), StoreError> {
        (**self).transact(writes).await
    }
    async fn backoff(&self, attempt: u32) {
        (**self).backoff(attempt).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client may make a key of 2 KB and DynamoDB's message may quote it:
    /// what an error prints is bounded whatever the key and message.
    #[test]
    fn a_store_errors_text_is_bounded_whatever_its_key_and_message() {
        let key = format!("ns/BUCKET#{}#r#0", "e".repeat(2_000));
        let message = format!("refused {}", "m".repeat(200_000));
        let errors = [
            StoreError::ConditionFailed {
                operation: "PutItem",
                key: key.clone(),
            },
            StoreError::Rejected {
                operation: "GetItem",
                key: key.clone(),
                message: message.clone(),
            },
            StoreError::Retryable {
                operation: "GetItem",
                key: key.clone(),
                message: message.clone(),
            },
            StoreError::Fatal {
                operation: "GetItem",
                key: key.clone(),
                message,
            },
        ];
        for error in errors {
            let text = error.to_string();
            assert!(text.len() < 1_000, "{} bytes: {text:.200}", text.len());
            assert!(text.starts_with("PutItem on ns/BUCKET#e") || text.contains(" on ns/BUCKET#e"));
            assert!(text.contains("more bytes)"), "says it was cut: {text}");
        }
        let short = StoreError::ConditionFailed {
            operation: "PutItem",
            key: "ns/BUCKET#e#r#0 #STATE".into(),
        };
        assert_eq!(
            short.to_string(),
            "PutItem on ns/BUCKET#e#r#0 #STATE: condition check failed"
        );
    }

    #[test]
    fn key_text_is_bounded_and_cut_on_a_character() {
        let pk = format!("ns/BUCKET#{}#r#0", "é".repeat(1_000));
        let text = key_text(&pk, &"s".repeat(1_024));
        assert!(text.len() < 400, "{} bytes", text.len());
        assert!(text.starts_with("ns/BUCKET#é"), "{text:.40}");
        assert_eq!(key_text("a", "b"), "a b");
    }
}
