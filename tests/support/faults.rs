//! Faults moto cannot show, injected at the store seam: a [`Store`] that
//! passes every call to the one it wraps, unless its [`Faults`] fail the
//! call before it applies (a throttle, a denial, a cancelled transaction) or
//! after (an answer lost once the write was applied), or make it slow.

use zae_table::Item;
use zae_table::store::{
    Condition, Query, QueryPage, Returns, Store, StoreError, TxWrite, Update, Updated,
};

/// One call, as the faults see it.
pub enum Call<'a> {
    Get { pk: &'a str, sk: &'a str },
    Put(&'a Item),
    Update(&'a Update),
    Delete { pk: &'a str, sk: &'a str },
    GetMany(&'a [(String, String)]),
    Query(&'a Query),
    Transact(&'a [TxWrite]),
}

/// Which calls fail, and how.
pub trait Faults: Send + Sync {
    /// A failure instead of the call.
    fn before(&self, _call: &Call<'_>) -> Option<StoreError> {
        None
    }
    /// A failure answered after the call was applied.
    fn after(&self, _call: &Call<'_>) -> Option<StoreError> {
        None
    }
    /// How long the call takes, on tokio's clock: a test that pauses the
    /// clock gets a slow table without waiting for it.
    fn delay(&self, _call: &Call<'_>) -> Option<std::time::Duration> {
        None
    }
}

#[derive(Debug, Default, Clone)]
pub struct Injected<S, F> {
    pub inner: S,
    pub faults: F,
}

impl<S: Store, F: Faults> Injected<S, F> {
    async fn around<T>(
        &self,
        call: Call<'_>,
        work: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        if let Some(pause) = self.faults.delay(&call) {
            tokio::time::sleep(pause).await;
        }
        if let Some(err) = self.faults.before(&call) {
            return Err(err);
        }
        let done = work.await?;
        match self.faults.after(&call) {
            Some(err) => Err(err),
            None => Ok(done),
        }
    }
}

impl<S: Store, F: Faults> Store for Injected<S, F> {
    async fn get(&self, pk: &str, sk: &str, consistent: bool) -> Result<Option<Item>, StoreError> {
        self.around(Call::Get { pk, sk }, self.inner.get(pk, sk, consistent))
            .await
    }
    async fn put(
        &self,
        item: &Item,
        condition: Option<&Condition>,
    ) -> Result<Option<Item>, StoreError> {
        self.around(Call::Put(item), self.inner.put(item, condition))
            .await
    }
    async fn update(&self, update: &Update, returns: Returns) -> Result<Option<Item>, StoreError> {
        self.around(Call::Update(update), self.inner.update(update, returns))
            .await
    }
    async fn update_or_old(&self, update: &Update) -> Result<Updated, StoreError> {
        self.around(Call::Update(update), self.inner.update_or_old(update))
            .await
    }
    async fn get_many(
        &self,
        keys: &[(String, String)],
        consistent: bool,
    ) -> Result<Vec<Item>, StoreError> {
        self.around(Call::GetMany(keys), self.inner.get_many(keys, consistent))
            .await
    }
    async fn delete(
        &self,
        pk: &str,
        sk: &str,
        condition: Option<&Condition>,
    ) -> Result<Option<Item>, StoreError> {
        self.around(
            Call::Delete { pk, sk },
            self.inner.delete(pk, sk, condition),
        )
        .await
    }
    async fn query(&self, query: &Query) -> Result<Vec<Item>, StoreError> {
        self.around(Call::Query(query), self.inner.query(query))
            .await
    }
    async fn query_page(
        &self,
        query: &Query,
        start: Option<&Item>,
    ) -> Result<QueryPage, StoreError> {
        self.around(Call::Query(query), self.inner.query_page(query, start))
            .await
    }
    async fn transact(&self, writes: &[TxWrite]) -> Result<(), StoreError> {
        self.around(Call::Transact(writes), self.inner.transact(writes))
            .await
    }
    async fn backoff(&self, attempt: u32) {
        self.inner.backoff(attempt).await
    }
}
