//! A stream for the in-memory table: [`Recording`] wraps a store and keeps,
//! for every write that applied, the stream record DynamoDB would emit
//! (`INSERT` or `MODIFY` with both images, in the Lambda event's shape),
//! each on the shard its partition key hashes to. Tests deliver the shards
//! they choose to the aggregator, holding others back as a lagging shard.

use serde_json::{Value, json};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use zae_table::store::{Condition, Query, QueryPage, Returns, Store, StoreError, TxWrite, Update};
use zae_table::{Attr, Item};

/// An attribute value in DynamoDB's JSON.
pub fn attr(value: &Attr) -> Value {
    match value {
        Attr::S(s) => json!({"S": s}),
        Attr::N(n) => json!({"N": n}),
        Attr::Bool(b) => json!({"BOOL": b}),
        Attr::Null => json!({"NULL": true}),
        Attr::Ss(set) => json!({"SS": set}),
        Attr::L(list) => json!({"L": list.iter().map(attr).collect::<Vec<_>>()}),
        Attr::M(map) => json!({"M": image(map)}),
    }
}

/// An item image in DynamoDB's JSON.
pub fn image(item: &Item) -> Value {
    Value::Object(item.iter().map(|(k, v)| (k.clone(), attr(v))).collect())
}

/// One stream record, as the Lambda event carries it.
pub fn record(sequence: u64, at_s: i64, new: &Item, old: Option<&Item>) -> String {
    let keys = json!({"PK": attr(&new["PK"]), "SK": attr(&new["SK"])});
    let mut dynamodb = json!({
        "ApproximateCreationDateTime": at_s,
        "Keys": keys,
        "SequenceNumber": format!("{sequence:021}"),
        "NewImage": image(new),
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    });
    let event = match old {
        Some(old) => {
            dynamodb["OldImage"] = image(old);
            "MODIFY"
        }
        None => "INSERT",
    };
    json!({"eventName": event, "eventSource": "aws:dynamodb", "dynamodb": dynamodb}).to_string()
}

/// The shard a partition key lands on, out of `shards`.
pub fn shard_of(pk: &str, shards: usize) -> usize {
    // FNV-1a: stable across runs and platforms.
    let hash = pk.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (hash % shards.max(1) as u64) as usize
}

/// A store that records its writes as stream records, per shard.
pub struct Recording<S> {
    pub inner: S,
    pub shards: usize,
    /// Seconds stamped on the records.
    at_s: AtomicI64,
    log: Mutex<(u64, Vec<Vec<String>>)>,
}

impl<S: Store> Recording<S> {
    pub fn new(inner: S, shards: usize, at_s: i64) -> Self {
        Recording {
            inner,
            shards,
            at_s: AtomicI64::new(at_s),
            log: Mutex::new((0, vec![Vec::new(); shards.max(1)])),
        }
    }

    /// The time (epoch seconds) stamped on the records written from now on.
    pub fn at(&self, at_s: i64) {
        self.at_s.store(at_s, Ordering::SeqCst);
    }

    /// Takes the records of `shard` written so far, oldest first.
    pub fn drain(&self, shard: usize) -> Vec<String> {
        std::mem::take(&mut self.lock().1[shard])
    }

    /// Takes the records of every shard but `held`, each shard's in order.
    pub fn drain_all_but(&self, held: &[usize]) -> Vec<Vec<String>> {
        (0..self.shards.max(1))
            .filter(|s| !held.contains(s))
            .map(|s| self.drain(s))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, Vec<Vec<String>>)> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn note(&self, pk: &str, sk: &str, old: Option<Item>) -> Result<(), StoreError> {
        if let Some(new) = self.inner.get(pk, sk, true).await? {
            let mut log = self.lock();
            log.0 += 1;
            let text = record(log.0, self.at_s.load(Ordering::SeqCst), &new, old.as_ref());
            log.1[shard_of(pk, self.shards)].push(text);
        }
        Ok(())
    }
}

fn key(item: &Item) -> (String, String) {
    let text = |k: &str| {
        item.get(k)
            .and_then(Attr::as_s)
            .unwrap_or_default()
            .to_owned()
    };
    (text("PK"), text("SK"))
}

impl<S: Store> Store for Recording<S> {
    async fn get(&self, pk: &str, sk: &str, consistent: bool) -> Result<Option<Item>, StoreError> {
        self.inner.get(pk, sk, consistent).await
    }
    async fn put(
        &self,
        item: &Item,
        condition: Option<&Condition>,
    ) -> Result<Option<Item>, StoreError> {
        let (pk, sk) = key(item);
        let old = self.inner.put(item, condition).await?;
        self.note(&pk, &sk, old.clone()).await?;
        Ok(old)
    }
    async fn update(&self, update: &Update, returns: Returns) -> Result<Option<Item>, StoreError> {
        let old = self.inner.get(&update.pk, &update.sk, true).await?;
        let out = self.inner.update(update, returns).await?;
        self.note(&update.pk, &update.sk, old).await?;
        Ok(out)
    }
    async fn delete(
        &self,
        pk: &str,
        sk: &str,
        condition: Option<&Condition>,
    ) -> Result<Option<Item>, StoreError> {
        self.inner.delete(pk, sk, condition).await
    }
    async fn query(&self, query: &Query) -> Result<Vec<Item>, StoreError> {
        self.inner.query(query).await
    }
    async fn query_page(
        &self,
        query: &Query,
        start: Option<&Item>,
    ) -> Result<QueryPage, StoreError> {
        self.inner.query_page(query, start).await
    }
    async fn transact(&self, writes: &[TxWrite]) -> Result<(), StoreError> {
        let mut olds = Vec::new();
        for w in writes {
            if let TxWrite::Update(u) = w {
                olds.push((
                    u.pk.clone(),
                    u.sk.clone(),
                    self.inner.get(&u.pk, &u.sk, true).await?,
                ));
            }
        }
        self.inner.transact(writes).await?;
        for (pk, sk, old) in olds {
            self.note(&pk, &sk, old).await?;
        }
        Ok(())
    }
    async fn backoff(&self, attempt: u32) {
        self.inner.backoff(attempt).await
    }
}
