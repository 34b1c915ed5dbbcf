//! A stream for the in-memory table: [`Recording`] wraps a store and keeps,
//! for every write that changed an item, the stream record DynamoDB would
//! emit (in the Lambda event's shape), each on the shard its partition key
//! hashes to. Tests deliver the shards they choose to the aggregator,
//! holding others back as a lagging shard.
//!
//! As DynamoDB (and DynamoDB Local 2.6 and 3.3, checked by hand): `INSERT`
//! with the new image, `MODIFY` with both, `REMOVE` with the old one only;
//! a transaction's puts, updates and deletes each make their record, its
//! condition checks none; a write that leaves the item as it was (an update
//! to the same values, the same put again, a delete of nothing) makes none.
//! Sequence numbers are the service's shape: 28 digits, no leading zeros
//! (DynamoDB Local pads 21 digits with zeros instead).

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

/// The `n`th sequence number, shaped as the service's (e.g.
/// `4421584500000000017450439091`): no leading zeros, increasing with `n`.
pub fn sequence_number(n: u64) -> String {
    (4_421_584_500_000_000_000_000_000_000_u128 + u128::from(n)).to_string()
}

/// One INSERT or MODIFY record, as the Lambda event carries it.
pub fn record(sequence: u64, at_s: i64, new: &Item, old: Option<&Item>) -> String {
    change(sequence, at_s, Some(new), old).expect("a record with a new image")
}

/// The record DynamoDB emits for a change from `old` to `new`; `None` when
/// nothing changed (no item before or after, or the same item).
pub fn change(sequence: u64, at_s: i64, new: Option<&Item>, old: Option<&Item>) -> Option<String> {
    let (event, keys_of) = match (old, new) {
        (None, Some(new)) => ("INSERT", new),
        (Some(old), Some(new)) if old != new => ("MODIFY", new),
        (Some(old), None) => ("REMOVE", old),
        _ => return None,
    };
    let mut dynamodb = json!({
        "ApproximateCreationDateTime": at_s,
        "Keys": {"PK": attr(&keys_of["PK"]), "SK": attr(&keys_of["SK"])},
        "SequenceNumber": sequence_number(sequence),
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    });
    if let Some(new) = new {
        dynamodb["NewImage"] = image(new);
    }
    if let Some(old) = old {
        dynamodb["OldImage"] = image(old);
    }
    Some(
        json!({"eventName": event, "eventSource": "aws:dynamodb", "dynamodb": dynamodb})
            .to_string(),
    )
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

    /// Records the change from `old` to the item as it is now, if any.
    async fn note(&self, pk: &str, sk: &str, old: Option<Item>) -> Result<(), StoreError> {
        let new = self.inner.get(pk, sk, true).await?;
        let mut log = self.lock();
        let at_s = self.at_s.load(Ordering::SeqCst);
        if let Some(text) = change(log.0 + 1, at_s, new.as_ref(), old.as_ref()) {
            log.0 += 1;
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
        let old = self.inner.delete(pk, sk, condition).await?;
        self.note(pk, sk, old.clone()).await?;
        Ok(old)
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
            let (pk, sk) = match w {
                TxWrite::Put { item, .. } => key(item),
                TxWrite::Update(u) => (u.pk.clone(), u.sk.clone()),
                TxWrite::Delete { pk, sk, .. } => (pk.clone(), sk.clone()),
                TxWrite::Check { .. } => continue,
            };
            let old = self.inner.get(&pk, &sk, true).await?;
            olds.push((pk, sk, old));
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

#[cfg(test)]
mod tests {
    //! Each behaviour as DynamoDB Local 2.6.1 and 3.3.1 showed it by hand
    //! (PutItem, UpdateItem, DeleteItem, TransactWriteItems on a table with
    //! NEW_AND_OLD_IMAGES, then GetRecords from TRIM_HORIZON).
    use super::*;
    use crate::block;
    use crate::memory::MemoryStore;
    use zae_table::store::UpdateBuilder;

    fn item(pk: &str, v: i64) -> Item {
        Item::from([
            ("PK".into(), Attr::s(pk)),
            ("SK".into(), Attr::s("1")),
            ("v".into(), Attr::n(v)),
        ])
    }

    fn set_v(pk: &str, v: i64) -> Update {
        let mut update = UpdateBuilder::new();
        update.set("v", Attr::n(v));
        update.build(pk, "1", None)
    }

    fn events(store: &Recording<MemoryStore>) -> Vec<(String, Value)> {
        store
            .drain(0)
            .iter()
            .map(|text| {
                let record: Value = serde_json::from_str(text).unwrap();
                (record["eventName"].as_str().unwrap().to_owned(), record)
            })
            .collect()
    }

    fn names(events: &[(String, Value)]) -> Vec<&str> {
        events.iter().map(|(name, _)| name.as_str()).collect()
    }

    #[test]
    fn a_delete_is_recorded_as_a_remove_with_the_old_image_only() {
        let store = Recording::new(MemoryStore::new(), 1, 0);
        block(store.put(&item("c", 2), None)).unwrap();
        block(store.delete("c", "1", None)).unwrap();
        block(store.delete("absent", "1", None)).unwrap();
        let events = events(&store);
        assert_eq!(
            names(&events),
            ["INSERT", "REMOVE"],
            "a delete of nothing records nothing"
        );
        let remove = &events[1].1["dynamodb"];
        assert_eq!(remove["OldImage"]["v"], json!({"N": "2"}));
        assert_eq!(remove["Keys"]["PK"], json!({"S": "c"}));
        assert!(remove.get("NewImage").is_none(), "{remove}");
    }

    #[test]
    fn a_transactions_puts_updates_and_deletes_are_recorded_and_its_checks_are_not() {
        let store = Recording::new(MemoryStore::new(), 1, 0);
        block(store.put(&item("b", 1), None)).unwrap();
        block(store.put(&item("d", 1), None)).unwrap();
        block(store.put(&item("e", 1), None)).unwrap();
        events(&store);
        block(store.transact(&[
            TxWrite::Put {
                item: item("c", 2),
                condition: None,
            },
            TxWrite::Update(set_v("b", 3)),
            TxWrite::Delete {
                pk: "d".into(),
                sk: "1".into(),
                condition: None,
            },
            TxWrite::Check {
                pk: "e".into(),
                sk: "1".into(),
                condition: Condition::plain("attribute_exists(PK)"),
            },
        ]))
        .unwrap();
        assert_eq!(names(&events(&store)), ["INSERT", "MODIFY", "REMOVE"]);
    }

    #[test]
    fn a_write_that_changes_nothing_records_nothing() {
        let store = Recording::new(MemoryStore::new(), 1, 0);
        block(store.put(&item("b", 1), None)).unwrap();
        block(store.update(&set_v("b", 1), Returns::Nothing)).unwrap();
        block(store.put(&item("b", 1), None)).unwrap();
        block(store.update(&set_v("b", 3), Returns::Nothing)).unwrap();
        assert_eq!(
            names(&events(&store)),
            ["INSERT", "MODIFY"],
            "the same value set again, or the same item put again, is no change"
        );
    }

    #[test]
    fn sequence_numbers_have_the_services_shape_and_increase() {
        let store = Recording::new(MemoryStore::new(), 1, 0);
        for v in 0..12 {
            block(store.put(&item("b", v), None)).unwrap();
        }
        let numbers: Vec<String> = events(&store)
            .iter()
            .map(|(_, r)| r["dynamodb"]["SequenceNumber"].as_str().unwrap().to_owned())
            .collect();
        for n in &numbers {
            assert!(!n.starts_with('0') && (21..=40).contains(&n.len()), "{n}");
        }
        let parsed: Vec<zae_table::SequenceNumber> = numbers
            .iter()
            .map(|n| zae_table::SequenceNumber::parse(n).unwrap())
            .collect();
        assert!(parsed.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    }
}
