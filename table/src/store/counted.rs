//! A [`Store`] decorator that counts the calls it passes on, by DynamoDB
//! operation: what `zae-limits --stats` prints.

use super::{Condition, Query, QueryPage, Returns, Store, StoreError, TxWrite, Update, Updated};
use crate::value::Item;
use std::collections::BTreeMap;
use std::sync::Mutex;

pub struct Counted<S> {
    inner: S,
    counts: Mutex<BTreeMap<&'static str, u64>>,
}

impl<S> Counted<S> {
    pub fn new(inner: S) -> Self {
        Counted {
            inner,
            counts: Mutex::new(BTreeMap::new()),
        }
    }

    fn count(&self, operation: &'static str) {
        if let Ok(mut counts) = self.counts.lock() {
            *counts.entry(operation).or_default() += 1;
        }
    }

    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// The store it counts the calls of.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Forgets what was counted so far.
    pub fn reset(&self) {
        if let Ok(mut counts) = self.counts.lock() {
            counts.clear();
        }
    }
}

impl<S: Store> Store for Counted<S> {
    async fn get(&self, pk: &str, sk: &str, consistent: bool) -> Result<Option<Item>, StoreError> {
        self.count("GetItem");
        self.inner.get(pk, sk, consistent).await
    }
    async fn get_attributes(
        &self,
        pk: &str,
        sk: &str,
        consistent: bool,
        attributes: &[String],
    ) -> Result<Option<Item>, StoreError> {
        self.count("GetItem");
        self.inner
            .get_attributes(pk, sk, consistent, attributes)
            .await
    }
    async fn put(
        &self,
        item: &Item,
        condition: Option<&Condition>,
    ) -> Result<Option<Item>, StoreError> {
        self.count("PutItem");
        self.inner.put(item, condition).await
    }
    async fn update(&self, update: &Update, returns: Returns) -> Result<Option<Item>, StoreError> {
        self.count("UpdateItem");
        self.inner.update(update, returns).await
    }
    async fn update_or_old(&self, update: &Update) -> Result<Updated, StoreError> {
        self.count("UpdateItem");
        self.inner.update_or_old(update).await
    }
    async fn get_many(
        &self,
        keys: &[(String, String)],
        consistent: bool,
    ) -> Result<Vec<Item>, StoreError> {
        self.count("BatchGetItem");
        self.inner.get_many(keys, consistent).await
    }
    async fn delete(
        &self,
        pk: &str,
        sk: &str,
        condition: Option<&Condition>,
    ) -> Result<Option<Item>, StoreError> {
        self.count("DeleteItem");
        self.inner.delete(pk, sk, condition).await
    }
    async fn query(&self, query: &Query) -> Result<Vec<Item>, StoreError> {
        // Counted per call, not per page.
        self.count("Query");
        self.inner.query(query).await
    }
    async fn query_page(
        &self,
        query: &Query,
        start: Option<&Item>,
    ) -> Result<QueryPage, StoreError> {
        self.count("Query");
        self.inner.query_page(query, start).await
    }
    async fn transact(&self, writes: &[TxWrite]) -> Result<(), StoreError> {
        self.count("TransactWriteItems");
        self.inner.transact(writes).await
    }
    async fn backoff(&self, attempt: u32) {
        self.inner.backoff(attempt).await
    }
}
