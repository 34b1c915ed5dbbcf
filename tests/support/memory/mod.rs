//! The in-memory twin of `zae_table::sdk::DynamoStore`, for unit tests: one
//! table whose writes evaluate the expressions the Lambdas send, with
//! DynamoDB's rules on them (every name and value used, no overlapping
//! paths, no key updates, conditions on the item as it was, all-or-nothing
//! transactions with at most one write per item). Indexes are the table's
//! items that carry the index's key attributes, projected whole or to their
//! keys as the 0.17.0 table's are. Two rules of DynamoDB that the adaptive
//! paths rely on are modelled too: an item over 400 KB is refused
//! (`ValidationException`), as is a transaction of more than 100 actions,
//! and so is what DynamoDB Local 2.6 refuses of keys and names (a table or
//! index key empty, not a string, or over 2,048 / 1,024 bytes; an attribute
//! name empty or over 64 KB; an empty set; a number over 38 digits or
//! past DynamoDB's range; a query's sort key prefix over 1,024 bytes),
//! a transaction's Update with an empty expression (refused by DynamoDB
//! Local 3.3.1, though a lone UpdateItem may have none),
//! and a transaction is in flight for a moment
//! (one yield to the executor) during which any other transaction or write
//! touching one of its items is refused with `TransactionConflict`, as the
//! SDK adapter reports it (retryable). It does not model reserved words or
//! capacity.

mod expression;

use expression::{Compiled, compile};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};
use zae_table::keys::{Index, pk_of, sk_of};
use zae_table::store::{
    Condition, Query, QueryPage, Returns, Store, StoreError, TxWrite, Update, Updated,
    item_key_text, key_text,
};
use zae_table::value::{MAX_ITEM_BYTES, item_size};
use zae_table::{Attr, Item};

type Key = (String, String);

/// DynamoDB's ceiling on the actions of one `TransactWriteItems`.
pub const MAX_TRANSACTION_ACTIONS: usize = 100;

/// Items per query page: small, so that every test that queries pages.
/// (DynamoDB's pages end at 1 MB.)
pub const PAGE_ITEMS: usize = 25;

#[derive(Debug, Default)]
pub struct MemoryStore {
    items: Mutex<BTreeMap<Key, Item>>,
    /// Items per query page; `PAGE_ITEMS` when 0.
    page_items: usize,
    /// The items of transactions in flight.
    in_flight: Mutex<BTreeSet<Key>>,
}

/// A transaction's items, in flight until it is dropped (finished, or its
/// caller gave up on it).
struct InFlight<'a> {
    store: &'a MemoryStore,
    keys: Vec<Key>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.store.in_flight();
        for key in &self.keys {
            in_flight.remove(key);
        }
    }
}

/// Pending once, then ready: lets every other future of the executor run.
struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// What the SDK adapter makes of DynamoDB's conflict with a transaction in
/// flight.
fn conflict(operation: &'static str, key: String) -> StoreError {
    StoreError::Retryable {
        operation,
        key,
        message: "TransactionConflict: another transaction is in flight on the item".into(),
    }
}

/// An item DynamoDB would refuse for its size.
fn oversized(operation: &'static str, key: String, item: &Item) -> Result<(), StoreError> {
    let size = item_size(item);
    if size <= MAX_ITEM_BYTES {
        return Ok(());
    }
    Err(invalid(
        operation,
        key,
        format!("Item size has exceeded the maximum allowed size ({size} bytes)"),
    ))
}

/// DynamoDB's ceiling on an attribute name, in UTF-8 bytes.
pub const MAX_NAME_BYTES: usize = 65_535;

/// A table key DynamoDB refuses before it looks at anything else (a get,
/// delete or condition check names it, or a write creates it).
fn bad_key(operation: &'static str, pk: &str, sk: &str) -> Result<(), StoreError> {
    zae_table::keys::check_table_key(pk, sk)
        .map_err(|e| invalid(operation, key_text(pk, sk), e.to_string()))
}

/// An item DynamoDB would refuse whole, as DynamoDB Local 2.6 does: a key
/// attribute (the table's or an index's) empty, not a string or over its
/// limit; an attribute name empty or over 64 KB; an empty set; over 400 KB.
fn refused(operation: &'static str, key: String, item: &Item) -> Result<(), StoreError> {
    let fail = |message: String| Err(invalid(operation, key.clone(), message));
    if let Err(e) = zae_table::keys::check_item_keys(item) {
        return fail(e.to_string());
    }
    if let Some(name) = item
        .keys()
        .find(|n| n.is_empty() || n.len() > MAX_NAME_BYTES)
    {
        return fail(format!("attribute name of {} bytes", name.len()));
    }
    if item.values().any(has_empty_set) {
        return fail("an string set may not be empty".into());
    }
    if let Some(message) = item.values().find_map(bad_numbers) {
        return fail(message.into());
    }
    oversized(operation, key, item)
}

fn has_empty_set(value: &Attr) -> bool {
    match value {
        Attr::Ss(set) => set.is_empty(),
        Attr::L(list) => list.iter().any(has_empty_set),
        Attr::M(map) => map.values().any(has_empty_set),
        _ => false,
    }
}

/// Why DynamoDB cannot store a number in `value`, if it cannot.
fn bad_numbers(value: &Attr) -> Option<&'static str> {
    match value {
        Attr::N(n) => bad_number(n),
        Attr::L(list) => list.iter().find_map(bad_numbers),
        Attr::M(map) => map.values().find_map(bad_numbers),
        _ => None,
    }
}

/// DynamoDB's numbers: at most 38 significant digits, a magnitude from
/// 1E-130 to below 1E126, or zero.
fn bad_number(text: &str) -> Option<&'static str> {
    const NOT_A_NUMBER: &str = "A value provided cannot be converted into a number";
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => match e.parse::<i64>() {
            Ok(e) => (m, e),
            Err(_) => return Some(NOT_A_NUMBER),
        },
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: Vec<u8> = whole.bytes().chain(fraction.bytes()).collect();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Some(NOT_A_NUMBER);
    }
    let first = digits.iter().position(|b| *b != b'0')?;
    let last = digits.iter().rposition(|b| *b != b'0').unwrap_or(first);
    if last - first + 1 > 38 {
        return Some("DynamoDB only supports precision up to 38 digits");
    }
    // The power of ten of the first significant digit.
    let lead = exponent.saturating_add(whole.len() as i64 - 1 - first as i64);
    match lead {
        126.. => Some(
            "Number overflow. Attempting to store a number with magnitude larger than supported range",
        ),
        ..-130 => Some(
            "Number underflow. Attempting to store a number with magnitude smaller than supported range",
        ),
        _ => None,
    }
}

/// Where an item sorts in an index: its sort key, then its table key.
fn index_order<'a>(item: &'a Item, index: &Index) -> (&'a str, &'a str, &'a str) {
    let text = |name: &str| item.get(name).and_then(Attr::as_s).unwrap_or_default();
    (text(index.sk), text("PK"), text("SK"))
}

fn invalid(operation: &'static str, key: String, message: String) -> StoreError {
    StoreError::Rejected {
        operation,
        key,
        message: format!("ValidationException: {message}"),
    }
}

fn item_key(item: &Item) -> Option<Key> {
    Some((pk_of(item)?.to_owned(), sk_of(item)?.to_owned()))
}

fn compiled_condition(
    operation: &'static str,
    key: &Key,
    condition: Option<&Condition>,
) -> Result<Compiled, StoreError> {
    let (text, names, values) = match condition {
        Some(c) => (Some(c.expression.as_str()), &c.names, &c.values),
        None => (None, &BTreeMap::new(), &BTreeMap::new()),
    };
    compile(None, text, names, values).map_err(|m| invalid(operation, key_text(&key.0, &key.1), m))
}

fn compiled_update(operation: &'static str, update: &Update) -> Result<Compiled, StoreError> {
    compile(
        Some(&update.expression),
        update.condition.as_deref(),
        &update.names,
        &update.values,
    )
    .map_err(|m| invalid(operation, key_text(&update.pk, &update.sk), m))
}

/// One write of a put, update or delete, checked and ready to apply.
enum Planned {
    Put(Key, Item, Compiled),
    Update(Key, Compiled),
    Delete(Key, Compiled),
    Check(Key, Compiled),
}

impl Planned {
    fn from_tx(write: &TxWrite) -> Result<Planned, StoreError> {
        const OP: &str = "TransactWriteItems";
        Ok(match write {
            TxWrite::Put { item, condition } => {
                refused(OP, item_key_text(item), item)?;
                let key = item_key(item)
                    .ok_or_else(|| invalid(OP, item_key_text(item), "missing key".into()))?;
                let compiled = compiled_condition(OP, &key, condition.as_ref())?;
                Planned::Put(key, item.clone(), compiled)
            }
            TxWrite::Update(update) => {
                bad_key(OP, &update.pk, &update.sk)?;
                Planned::Update(
                    (update.pk.clone(), update.sk.clone()),
                    compiled_update(OP, update)?,
                )
            }
            TxWrite::Delete { pk, sk, condition } => {
                bad_key(OP, pk, sk)?;
                let key = (pk.clone(), sk.clone());
                let compiled = compiled_condition(OP, &key, condition.as_ref())?;
                Planned::Delete(key, compiled)
            }
            TxWrite::Check { pk, sk, condition } => {
                bad_key(OP, pk, sk)?;
                let key = (pk.clone(), sk.clone());
                let compiled = compiled_condition(OP, &key, Some(condition))?;
                Planned::Check(key, compiled)
            }
        })
    }

    fn key(&self) -> &Key {
        match self {
            Planned::Put(key, ..)
            | Planned::Update(key, _)
            | Planned::Delete(key, _)
            | Planned::Check(key, _) => key,
        }
    }

    fn compiled(&self) -> &Compiled {
        match self {
            Planned::Put(_, _, c)
            | Planned::Update(_, c)
            | Planned::Delete(_, c)
            | Planned::Check(_, c) => c,
        }
    }

    /// The item's state after the write; `None` deletes it.
    fn result(&self, before: Option<&Item>) -> Result<Option<Item>, String> {
        Ok(match self {
            Planned::Put(_, item, _) => Some(item.clone()),
            Planned::Delete(..) => None,
            Planned::Check(..) => before.cloned(),
            Planned::Update(key, compiled) => {
                let start = before.cloned().unwrap_or_else(|| {
                    Item::from([
                        ("PK".to_owned(), Attr::s(&key.0)),
                        ("SK".to_owned(), Attr::s(&key.1)),
                    ])
                });
                Some(compiled.apply(&start)?)
            }
        })
    }
}

/// What an index holds of an item.
fn project(item: &Item, index: &Index) -> Item {
    if !index.keys_only {
        return item.clone();
    }
    index.start_key(item)
}

impl MemoryStore {
    /// A table whose query pages hold `page_items` items (large tables).
    pub fn with_page_items(page_items: usize) -> Self {
        MemoryStore {
            page_items,
            ..MemoryStore::default()
        }
    }

    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Key, Item>> {
        // A test that panicked mid-write poisons nothing worth keeping apart.
        self.items
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn in_flight(&self) -> MutexGuard<'_, BTreeSet<Key>> {
        self.in_flight
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Refused while a transaction in flight holds the item.
    fn free(&self, operation: &'static str, key: &Key) -> Result<(), StoreError> {
        match self.in_flight().contains(key) {
            true => Err(conflict(operation, key_text(&key.0, &key.1))),
            false => Ok(()),
        }
    }

    /// Marks `keys` in flight, or refuses the transaction when one of them
    /// already is.
    fn take_off(&self, first: &str, keys: &BTreeSet<&Key>) -> Result<InFlight<'_>, StoreError> {
        let mut in_flight = self.in_flight();
        if keys.iter().any(|key| in_flight.contains(*key)) {
            return Err(conflict("TransactWriteItems", first.to_owned()));
        }
        in_flight.extend(keys.iter().map(|key| (*key).clone()));
        Ok(InFlight {
            store: self,
            keys: keys.iter().map(|key| (*key).clone()).collect(),
        })
    }

    /// Every item, in key order.
    pub fn items(&self) -> Vec<Item> {
        self.lock().values().cloned().collect()
    }

    /// One item, read directly.
    pub fn item(&self, pk: &str, sk: &str) -> Option<Item> {
        self.lock().get(&(pk.to_owned(), sk.to_owned())).cloned()
    }

    /// Writes an item as it is, with no condition: test set-up.
    /// A namespace registered as the client registers one (its name is its id).
    pub fn register_namespace(&self, namespace: &str) {
        for write in zae_table::registry::register_namespace(namespace, namespace, 0) {
            if let zae_table::store::TxWrite::Put { item, .. } = write {
                self.insert(item);
            }
        }
    }

    /// Deletes an item, with no condition: test set-up.
    pub fn remove(&self, pk: &str, sk: &str) {
        self.lock().remove(&(pk.to_owned(), sk.to_owned()));
    }

    pub fn insert(&self, item: Item) {
        if let Some(key) = item_key(&item) {
            self.lock().insert(key, item);
        }
    }

    /// Runs one checked write under the lock.
    fn write(
        &self,
        operation: &'static str,
        planned: &Planned,
    ) -> Result<Option<Item>, StoreError> {
        let key = planned.key();
        match self.write_or_old(operation, planned)? {
            Ok((before, _)) => Ok(before),
            Err(_) => Err(StoreError::ConditionFailed {
                operation,
                key: key_text(&key.0, &key.1),
            }),
        }
    }

    /// One checked write under the lock: the item before and after it, or
    /// the item that failed the condition, read under the same lock.
    #[allow(clippy::type_complexity)]
    fn write_or_old(
        &self,
        operation: &'static str,
        planned: &Planned,
    ) -> Result<Result<(Option<Item>, Option<Item>), Option<Item>>, StoreError> {
        let key = planned.key();
        self.free(operation, key)?;
        let mut items = self.lock();
        let before = items.get(key).cloned();
        let text = key_text(&key.0, &key.1);
        let empty = Item::new();
        let holds = planned
            .compiled()
            .condition_holds(before.as_ref().unwrap_or(&empty))
            .map_err(|m| invalid(operation, text.clone(), m))?;
        if !holds {
            return Ok(Err(before));
        }
        let after = planned
            .result(before.as_ref())
            .map_err(|m| invalid(operation, text.clone(), m))?;
        match &after {
            Some(after) => {
                refused(operation, text, after)?;
                items.insert(key.clone(), after.clone())
            }
            None => items.remove(key),
        };
        Ok(Ok((before, after)))
    }
}

impl Store for MemoryStore {
    async fn get(&self, pk: &str, sk: &str, _consistent: bool) -> Result<Option<Item>, StoreError> {
        bad_key("GetItem", pk, sk)?;
        Ok(self.item(pk, sk))
    }

    async fn put(
        &self,
        item: &Item,
        condition: Option<&Condition>,
    ) -> Result<Option<Item>, StoreError> {
        refused("PutItem", item_key_text(item), item)?;
        let key = item_key(item)
            .ok_or_else(|| invalid("PutItem", item_key_text(item), "missing key".into()))?;
        let compiled = compiled_condition("PutItem", &key, condition)?;
        self.write("PutItem", &Planned::Put(key, item.clone(), compiled))
    }

    async fn update(&self, update: &Update, returns: Returns) -> Result<Option<Item>, StoreError> {
        bad_key("UpdateItem", &update.pk, &update.sk)?;
        let key = (update.pk.clone(), update.sk.clone());
        let planned = Planned::Update(key.clone(), compiled_update("UpdateItem", update)?);
        let before = self.write("UpdateItem", &planned)?;
        Ok(match returns {
            Returns::Nothing => None,
            Returns::AllNew => self.lock().get(&key).cloned(),
            Returns::AllOld => before,
        })
    }

    async fn update_or_old(&self, update: &Update) -> Result<Updated, StoreError> {
        bad_key("UpdateItem", &update.pk, &update.sk)?;
        let key = (update.pk.clone(), update.sk.clone());
        let planned = Planned::Update(key, compiled_update("UpdateItem", update)?);
        Ok(match self.write_or_old("UpdateItem", &planned)? {
            Ok((_, after)) => Updated::Applied(after),
            Err(before) => Updated::Refused(before),
        })
    }

    async fn delete(
        &self,
        pk: &str,
        sk: &str,
        condition: Option<&Condition>,
    ) -> Result<Option<Item>, StoreError> {
        bad_key("DeleteItem", pk, sk)?;
        let key = (pk.to_owned(), sk.to_owned());
        let compiled = compiled_condition("DeleteItem", &key, condition)?;
        self.write("DeleteItem", &Planned::Delete(key, compiled))
    }

    async fn query(&self, query: &Query) -> Result<Vec<Item>, StoreError> {
        zae_table::store::all_pages(self, query).await
    }

    async fn query_page(
        &self,
        query: &Query,
        start: Option<&Item>,
    ) -> Result<QueryPage, StoreError> {
        let index = query.index;
        let page = if self.page_items == 0 {
            PAGE_ITEMS
        } else {
            self.page_items
        };
        if query.sk_prefix.len() > zae_table::keys::MAX_SORT_KEY_BYTES {
            let message =
                "Aggregated size of all range keys has exceeded the size limit of 1024 bytes";
            return Err(invalid("Query", query.pk.clone(), message.into()));
        }
        let after = start.map(|key| index_order(key, index));
        let items = self.lock();
        let mut found: Vec<((&str, &str, &str), &Item)> = items
            .values()
            .filter(|item| item.get(index.pk).and_then(Attr::as_s) == Some(query.pk.as_str()))
            .filter(|item| {
                item.get(index.sk)
                    .and_then(Attr::as_s)
                    .is_some_and(|sk| sk.starts_with(&query.sk_prefix))
            })
            .map(|item| (index_order(item, index), item))
            .filter(|(order, _)| after.as_ref().is_none_or(|a| order > a))
            .collect();
        // The first page's worth in order, without sorting the rest.
        let more = found.len() > page;
        if more {
            found.select_nth_unstable_by(page, |a, b| a.0.cmp(&b.0));
            found.truncate(page);
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        let found: Vec<Item> = found
            .into_iter()
            .map(|(_, item)| project(item, index))
            .collect();
        let next = more.then(|| index.start_key(&found[found.len() - 1]));
        Ok(QueryPage { items: found, next })
    }

    async fn transact(&self, writes: &[TxWrite]) -> Result<(), StoreError> {
        const OP: &str = "TransactWriteItems";
        let Some(first) = writes.first().map(TxWrite::key_text) else {
            return Ok(());
        };
        if writes.len() > MAX_TRANSACTION_ACTIONS {
            let message = format!(
                "Member must have length less than or equal to {MAX_TRANSACTION_ACTIONS} (transactItems: {})",
                writes.len()
            );
            return Err(invalid(OP, first, message));
        }
        // DynamoDB refuses a transaction's Update with nothing to do
        // (checked on DynamoDB Local 3.3.1), though a lone UpdateItem may.
        if let Some(TxWrite::Update(u)) = writes
            .iter()
            .find(|w| matches!(w, TxWrite::Update(u) if u.expression.trim().is_empty()))
        {
            let message = "Invalid UpdateExpression: The expression can not be empty;";
            return Err(invalid(OP, u.pk.clone(), message.into()));
        }
        let planned = writes
            .iter()
            .map(Planned::from_tx)
            .collect::<Result<Vec<_>, _>>()?;
        let keys: BTreeSet<&Key> = planned.iter().map(Planned::key).collect();
        if keys.len() != planned.len() {
            let message = "Transaction request cannot include multiple operations on one item";
            return Err(invalid(OP, first, message.into()));
        }
        let _flight = self.take_off(&first, &keys)?;
        YieldOnce(false).await;
        self.commit(&first, &planned)
    }

    /// One yield: whatever holds the items in flight finishes first.
    async fn backoff(&self, _attempt: u32) {
        YieldOnce(false).await;
    }
}

impl MemoryStore {
    /// A transaction's writes, all or none, checked against the table as it is.
    fn commit(&self, first: &str, planned: &[Planned]) -> Result<(), StoreError> {
        const OP: &str = "TransactWriteItems";
        let first = first.to_owned();
        let mut items = self.lock();
        let empty = Item::new();
        let mut results = Vec::with_capacity(planned.len());
        for (i, write) in planned.iter().enumerate() {
            let before = items.get(write.key());
            let holds = write
                .compiled()
                .condition_holds(before.unwrap_or(&empty))
                .map_err(|m| invalid(OP, first.clone(), m))?;
            if !holds {
                return Err(if i == 0 {
                    StoreError::ConditionFailed {
                        operation: OP,
                        key: first,
                    }
                } else {
                    StoreError::Cancelled {
                        operation: OP,
                        key: first,
                        message: format!(
                            "TransactionCanceledException: condition of write {i} failed"
                        ),
                    }
                });
            }
            let after = write
                .result(before)
                .map_err(|m| invalid(OP, first.clone(), m))?;
            if let Some(after) = &after {
                refused(OP, first.clone(), after)?;
            }
            results.push(after);
        }
        for (write, result) in planned.iter().zip(results) {
            match result {
                Some(after) => items.insert(write.key().clone(), after),
                None => items.remove(write.key()),
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block;

    fn item(pk: &str, sk: &str, extra: &[(&str, Attr)]) -> Item {
        let mut item = Item::from([("PK".into(), Attr::s(pk)), ("SK".into(), Attr::s(sk))]);
        item.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        item
    }

    #[test]
    fn conditional_writes_fail_without_changing_anything() {
        let store = MemoryStore::new();
        let once = Condition::plain("attribute_not_exists(PK)");
        assert_eq!(
            block(store.put(&item("a", "1", &[]), Some(&once))).unwrap(),
            None
        );
        let again = block(store.put(&item("a", "1", &[("x", Attr::n(1))]), Some(&once)));
        assert!(matches!(again, Err(StoreError::ConditionFailed { .. })));
        assert_eq!(store.item("a", "1"), Some(item("a", "1", &[])));
    }

    #[test]
    fn a_transaction_is_all_or_nothing() {
        let store = MemoryStore::new();
        store.insert(item("a", "2", &[]));
        let writes = [
            TxWrite::Put {
                item: item("a", "1", &[]),
                condition: None,
            },
            TxWrite::Put {
                item: item("a", "2", &[]),
                condition: Some(Condition::plain("attribute_not_exists(PK)")),
            },
        ];
        assert!(matches!(
            block(store.transact(&writes)),
            Err(StoreError::Cancelled { .. })
        ));
        assert_eq!(store.item("a", "1"), None);
        let first_fails = [writes[1].clone(), writes[0].clone()];
        assert!(matches!(
            block(store.transact(&first_fails)),
            Err(StoreError::ConditionFailed { .. })
        ));
    }

    #[test]
    fn a_transaction_in_flight_refuses_every_other_write_to_its_items() {
        let store = MemoryStore::new();
        let first = [TxWrite::Put {
            item: item("a", "1", &[]),
            condition: None,
        }];
        let second = [
            TxWrite::Put {
                item: item("b", "1", &[]),
                condition: None,
            },
            TxWrite::Check {
                pk: "a".into(),
                sk: "1".into(),
                condition: Condition::plain("attribute_exists(PK)"),
            },
        ];
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        let mut flying = std::pin::pin!(store.transact(&first));
        assert!(flying.as_mut().poll(&mut context).is_pending());
        let refused = block(store.transact(&second));
        assert!(
            matches!(&refused, Err(e) if e.is_retryable()),
            "{refused:?}"
        );
        let put = block(store.put(&item("a", "1", &[]), None));
        assert!(matches!(&put, Err(e) if e.is_retryable()), "{put:?}");
        assert_eq!(store.item("b", "1"), None, "nothing of the refused one");
        assert!(matches!(
            flying.as_mut().poll(&mut context),
            std::task::Poll::Ready(Ok(()))
        ));
        block(store.transact(&second)).unwrap();
        assert!(store.item("b", "1").is_some());
    }

    #[test]
    fn a_transaction_of_more_than_100_actions_is_refused_whole() {
        let store = MemoryStore::new();
        let writes: Vec<TxWrite> = (0..=MAX_TRANSACTION_ACTIONS)
            .map(|i| TxWrite::Put {
                item: item("a", &i.to_string(), &[]),
                condition: None,
            })
            .collect();
        let refused = block(store.transact(&writes));
        assert!(
            matches!(&refused, Err(StoreError::Rejected { message, .. }) if message.contains("100")),
            "{refused:?}"
        );
        assert!(store.items().is_empty());
        block(store.transact(&writes[..MAX_TRANSACTION_ACTIONS])).unwrap();
        assert_eq!(store.items().len(), MAX_TRANSACTION_ACTIONS);
    }

    #[test]
    fn an_item_over_400_kb_is_refused_alone_or_in_a_transaction() {
        let store = MemoryStore::new();
        let big = item("a", "1", &[("x", Attr::s("y".repeat(MAX_ITEM_BYTES)))]);
        let refused = block(store.put(&big, None));
        assert!(
            matches!(&refused, Err(StoreError::Rejected { message, .. }) if message.contains("size")),
            "{refused:?}"
        );
        let writes = [
            TxWrite::Put {
                item: item("b", "1", &[]),
                condition: None,
            },
            TxWrite::Put {
                item: big,
                condition: None,
            },
        ];
        assert!(matches!(
            block(store.transact(&writes)),
            Err(StoreError::Rejected { .. })
        ));
        assert!(store.items().is_empty());
    }

    fn rejected<T: std::fmt::Debug>(result: Result<T, StoreError>, what: &str) {
        assert!(
            matches!(&result, Err(StoreError::Rejected { message, .. }) if message.starts_with("ValidationException")),
            "{what}: {result:?}"
        );
    }

    /// Exactly at and one byte past each limit, in ASCII and in multi-byte
    /// characters, as DynamoDB Local 2.6 answers the same puts.
    #[test]
    fn table_keys_over_2048_and_1024_bytes_or_empty_are_refused() {
        let store = MemoryStore::new();
        for (pk, sk) in [
            ("p".repeat(2048), "s".to_owned()),
            ("é".repeat(1024), "s".to_owned()),
            ("a".to_owned(), "s".repeat(1024)),
            ("a".to_owned(), "é".repeat(512)),
        ] {
            block(store.put(&item(&pk, &sk, &[]), None)).unwrap();
        }
        for (pk, sk) in [
            ("p".repeat(2049), "s".to_owned()),
            ("é".repeat(1025), "s".to_owned()),
            ("€".repeat(683), "s".to_owned()),
            ("a".to_owned(), "s".repeat(1025)),
            ("a".to_owned(), "é".repeat(513)),
            (String::new(), "s".to_owned()),
            ("a".to_owned(), String::new()),
        ] {
            let what = format!("{} / {} bytes", pk.len(), sk.len());
            rejected(block(store.put(&item(&pk, &sk, &[]), None)), &what);
            rejected(block(store.get(&pk, &sk, true)), &what);
            rejected(block(store.delete(&pk, &sk, None)), &what);
            let update = Update {
                pk: pk.clone(),
                sk: sk.clone(),
                expression: "SET #x = :x".into(),
                names: [("#x".into(), "x".into())].into(),
                values: [(":x".into(), Attr::n(1))].into(),
                ..Update::default()
            };
            rejected(block(store.update(&update, Returns::Nothing)), &what);
            let check = [
                TxWrite::Put {
                    item: item("ok", "1", &[]),
                    condition: None,
                },
                TxWrite::Check {
                    pk,
                    sk,
                    condition: Condition::plain("attribute_not_exists(PK)"),
                },
            ];
            rejected(block(store.transact(&check)), &what);
        }
        assert_eq!(store.items().len(), 4, "nothing of the refused writes");
    }

    /// Every index key of the 0.17.0 table (GSI1 to GSI4, LSI1 to LSI5), put
    /// whole or set by an update: a non-empty string within its limit.
    #[test]
    fn index_keys_empty_mistyped_or_too_long_are_refused() {
        let store = MemoryStore::new();
        for (name, max) in zae_table::keys::KEY_ATTRIBUTES.into_iter().skip(2) {
            for (value, ok) in [
                (Attr::s("k".repeat(max)), true),
                (Attr::s("k".repeat(max + 1)), false),
                (Attr::s(""), false),
                (Attr::n(1), false),
                (Attr::Bool(true), false),
            ] {
                let what = format!("{name} = {value:?}");
                let put = block(store.put(&item("a", name, &[(name, value.clone())]), None));
                assert_eq!(put.is_ok(), ok, "{what}: {put:?}");
                if !ok {
                    rejected(put, &what);
                }
                let update = Update {
                    pk: "a".into(),
                    sk: "u".into(),
                    expression: "SET #k = :k".into(),
                    names: [("#k".into(), name.into())].into(),
                    values: [(":k".into(), value)].into(),
                    ..Update::default()
                };
                let updated = block(store.update(&update, Returns::Nothing));
                assert_eq!(updated.is_ok(), ok, "update {what}: {updated:?}");
            }
        }
        let long = item(
            "b",
            "1",
            &[
                ("GSI4PK", Attr::s("n")),
                ("GSI4SK", Attr::s("s".repeat(1025))),
            ],
        );
        let writes = [
            TxWrite::Put {
                item: item("b", "2", &[]),
                condition: None,
            },
            TxWrite::Put {
                item: long,
                condition: None,
            },
        ];
        rejected(
            block(store.transact(&writes)),
            "a transaction's long GSI4SK",
        );
        assert_eq!(store.item("b", "2"), None, "nothing of the transaction");
    }

    #[test]
    fn empty_or_huge_attribute_names_and_empty_sets_are_refused() {
        let store = MemoryStore::new();
        block(store.put(
            &item("a", "1", &[(&"n".repeat(MAX_NAME_BYTES), Attr::n(1))]),
            None,
        ))
        .unwrap();
        block(store.put(&item("a", "2", &[("x", Attr::s(""))]), None)).unwrap();
        let empty_set = Attr::Ss(Default::default());
        let nested = Attr::M([("y".to_owned(), empty_set.clone())].into());
        for (name, value) in [
            (String::new(), Attr::n(1)),
            ("n".repeat(MAX_NAME_BYTES + 1), Attr::n(1)),
            ("x".into(), empty_set),
            ("x".into(), nested),
        ] {
            let put = block(store.put(&item("b", "1", &[(&name, value)]), None));
            rejected(put, &format!("a name of {} bytes", name.len()));
        }
        assert_eq!(store.item("b", "1"), None);
    }

    #[test]
    fn a_query_whose_sort_key_prefix_passes_1024_bytes_is_refused() {
        let store = MemoryStore::new();
        let query = |prefix: String| Query {
            index: &Index::TABLE,
            pk: "p".repeat(2049),
            sk_prefix: prefix,
            consistent: false,
        };
        block(store.query(&query("s".repeat(1024)))).unwrap();
        rejected(
            block(store.query(&query("s".repeat(1025)))),
            "a 1025-byte prefix",
        );
    }

    /// As DynamoDB Local 2.6 answers: at most 38 significant digits,
    /// magnitudes from 1E-130 to below 1E126, and text that is a number.
    #[test]
    fn numbers_dynamodb_cannot_store_are_refused() {
        let store = MemoryStore::new();
        let number = |n: &str| item("n", "1", &[("x", Attr::N(n.to_owned()))]);
        for ok in [
            "1".repeat(38),
            format!("{}000", "1".repeat(38)),
            format!("0.000{}", "1".repeat(38)),
            "9.9E125".into(),
            "-1E+125".into(),
            "1E-130".into(),
            "0".into(),
            "-0".into(),
            "00012".into(),
            "0.5".into(),
        ] {
            block(store.put(&number(&ok), None)).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        let nested = |n: &str| {
            let list = Attr::L(vec![Attr::N(n.to_owned())]);
            item("n", "2", &[("m", Attr::M([("l".to_owned(), list)].into()))])
        };
        for bad in [
            "1".repeat(39),
            "1E126".into(),
            "-1E126".into(),
            "1E-131".into(),
            "abc".into(),
            "".into(),
            "1e".into(),
            "--1".into(),
        ] {
            rejected(block(store.put(&number(&bad), None)), &bad);
            rejected(block(store.put(&nested(&bad), None)), &bad);
        }
    }

    /// DynamoDB holds `a <> :v` when `a` is absent (nothing equals the
    /// value); every other comparison with an absent operand fails.
    #[test]
    fn an_absent_attribute_is_unequal_to_any_value() {
        let store = MemoryStore::new();
        store.insert(item("c", "1", &[]));
        let update = |op: &str| Update {
            pk: "c".into(),
            sk: "1".into(),
            expression: "SET #y = :n".into(),
            condition: Some(format!("#x {op} :n")),
            names: [("#x".into(), "x".into()), ("#y".into(), "y".into())].into(),
            values: [(":n".into(), Attr::n(5))].into(),
        };
        block(store.update(&update("<>"), Returns::Nothing)).unwrap();
        for op in ["=", "<", "<=", ">", ">="] {
            let failed = block(store.update(&update(op), Returns::Nothing));
            assert!(
                matches!(failed, Err(StoreError::ConditionFailed { .. })),
                "{op}: {failed:?}"
            );
        }
    }

    #[test]
    fn index_queries_see_items_with_the_index_keys_in_sort_key_order() {
        let store = MemoryStore::new();
        for (pk, gsk) in [("ns/BUCKET#b#r#0", "b"), ("ns/BUCKET#a#r#0", "a")] {
            store.insert(item(
                pk,
                "#STATE",
                &[("GSI4PK", Attr::s("ns")), ("GSI4SK", Attr::s(gsk))],
            ));
        }
        store.insert(item("ns/SYSTEM#", "#CONFIG", &[]));
        let query = Query {
            index: &Index::GSI4,
            pk: "ns".into(),
            sk_prefix: String::new(),
            consistent: false,
        };
        let found = block(store.query(&query)).unwrap();
        let pks: Vec<&str> = found.iter().filter_map(|i| i["PK"].as_s()).collect();
        assert_eq!(pks, ["ns/BUCKET#a#r#0", "ns/BUCKET#b#r#0"]);
        assert!(
            found.iter().all(|i| i.len() == 4),
            "GSI4 projects keys only"
        );
    }
}
