//! [`Store`] over the AWS SDK's DynamoDB client. Every call's error names the
//! operation and the key it was about.

use super::{classify, item_from_sdk, item_to_sdk, to_sdk};
use crate::store::{
    Condition, Paging, Query, QueryPage, Returns, Store, StoreError, TxWrite, Update, Updated,
    item_key_text, key_text,
};
use crate::value::{Attr, Item};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, KeysAndAttributes, Put, ReturnValue,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update as TxUpdate,
};
use std::collections::{BTreeMap, HashMap};

type Names = Option<HashMap<String, String>>;
type Values = Option<HashMap<String, AttributeValue>>;

fn key(pk: &str, sk: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("PK".to_owned(), AttributeValue::S(pk.to_owned())),
        ("SK".to_owned(), AttributeValue::S(sk.to_owned())),
    ])
}

fn non_empty(map: Option<HashMap<String, AttributeValue>>) -> Option<Item> {
    map.filter(|m| !m.is_empty()).map(|m| item_from_sdk(&m))
}

/// DynamoDB refuses empty name and value maps: absent instead.
fn names(names: &BTreeMap<String, String>) -> Names {
    (!names.is_empty()).then(|| names.clone().into_iter().collect())
}

fn values(values: &BTreeMap<String, Attr>) -> Values {
    (!values.is_empty()).then(|| values.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect())
}

/// A write's condition with the names and values its expressions use, as
/// the SDK's builders take them.
struct Parts {
    expression: Option<String>,
    names: Names,
    values: Values,
}

impl Parts {
    fn of(condition: Option<&Condition>) -> Parts {
        Parts {
            expression: condition.map(|c| c.expression.clone()),
            names: condition.and_then(|c| names(&c.names)),
            values: condition.and_then(|c| values(&c.values)),
        }
    }

    /// An update's condition; its names and values serve its update
    /// expression too.
    fn of_update(update: &Update) -> Parts {
        Parts {
            expression: update.condition.clone(),
            names: names(&update.names),
            values: values(&update.values),
        }
    }
}

/// Sets [`Parts`] on any of the SDK's write builders (a transaction's Put,
/// Update, Delete and ConditionCheck, and PutItem, UpdateItem, DeleteItem):
/// they share the setters' names but no trait, hence a macro.
macro_rules! with_parts {
    ($builder:expr, $parts:expr) => {{
        let parts: Parts = $parts;
        $builder
            .set_condition_expression(parts.expression)
            .set_expression_attribute_names(parts.names)
            .set_expression_attribute_values(parts.values)
    }};
}

/// BatchGetItem's limit on keys per request.
const BATCH_GET_KEYS: usize = 100;
/// Waits before the tries of unprocessed keys, as the 0.17.0 client waits.
const UNPROCESSED_WAITS_MS: [u64; 3] = [50, 100, 200];

#[derive(Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
}

impl DynamoStore {
    /// One BatchGetItem of at most 100 keys; unprocessed keys are asked
    /// again three times, then the read fails as retryable.
    async fn batch_get(
        &self,
        keys: &[(String, String)],
        consistent: bool,
    ) -> Result<Vec<Item>, StoreError> {
        let what = || {
            keys.first()
                .map(|(pk, sk)| format!("{} and {} more", key_text(pk, sk), keys.len() - 1))
                .unwrap_or_default()
        };
        let mut pending: Vec<HashMap<String, AttributeValue>> =
            keys.iter().map(|(pk, sk)| key(pk, sk)).collect();
        let mut items = Vec::new();
        for attempt in 0..=UNPROCESSED_WAITS_MS.len() {
            let request = KeysAndAttributes::builder()
                .set_keys(Some(pending.clone()))
                .consistent_read(consistent)
                .build()
                .map_err(|e| StoreError::Fatal {
                    operation: "BatchGetItem",
                    key: what(),
                    message: e.to_string(),
                })?;
            let out = self
                .client
                .batch_get_item()
                .request_items(&self.table, request)
                .send()
                .await
                .map_err(|e| classify("BatchGetItem", what(), e))?;
            if let Some(found) = out.responses.and_then(|mut r| r.remove(&self.table)) {
                items.extend(found.iter().map(item_from_sdk));
            }
            pending = out
                .unprocessed_keys
                .and_then(|mut u| u.remove(&self.table))
                .map(|k| k.keys)
                .unwrap_or_default();
            if pending.is_empty() {
                return Ok(items);
            }
            if let Some(wait) = UNPROCESSED_WAITS_MS.get(attempt) {
                tokio::time::sleep(std::time::Duration::from_millis(*wait)).await;
            }
        }
        Err(StoreError::Retryable {
            operation: "BatchGetItem",
            key: what(),
            message: format!("{} keys still unprocessed after 4 tries", pending.len()),
        })
    }

    /// An UpdateItem of `update`, its return values still to choose.
    fn update_request(
        &self,
        update: &Update,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        let request = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(&update.pk, &update.sk)))
            .update_expression(&update.expression);
        with_parts!(request, Parts::of_update(update))
    }

    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoStore {
            client,
            table: table.into(),
        }
    }

    /// A GetItem, of `attributes` only when there are any.
    async fn get_item(
        &self,
        pk: &str,
        sk: &str,
        consistent: bool,
        attributes: &[String],
    ) -> Result<Option<Item>, StoreError> {
        let mut request = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(pk, sk)))
            .consistent_read(consistent);
        if !attributes.is_empty() {
            // Every name behind an alias: watermarks hold `#`, and `ttl` is reserved.
            let aliases: HashMap<String, String> = attributes
                .iter()
                .enumerate()
                .map(|(i, a)| (format!("#a{i}"), a.clone()))
                .collect();
            let projection = (0..attributes.len())
                .map(|i| format!("#a{i}"))
                .collect::<Vec<_>>()
                .join(", ");
            request = request
                .projection_expression(projection)
                .set_expression_attribute_names(Some(aliases));
        }
        let out = request
            .send()
            .await
            .map_err(|e| classify("GetItem", key_text(pk, sk), e))?;
        Ok(out.item.map(|item| item_from_sdk(&item)))
    }

    fn transact_item(&self, write: &TxWrite) -> Result<TransactWriteItem, StoreError> {
        let invalid = |err: aws_sdk_dynamodb::error::BuildError| StoreError::Fatal {
            operation: "TransactWriteItems",
            key: write.key_text(),
            message: err.to_string(),
        };
        let built = match write {
            TxWrite::Put { item, condition } => {
                let put = Put::builder()
                    .table_name(&self.table)
                    .set_item(Some(item_to_sdk(item)));
                let put = with_parts!(put, Parts::of(condition.as_ref()))
                    .build()
                    .map_err(invalid)?;
                TransactWriteItem::builder().put(put)
            }
            TxWrite::Update(update) => {
                let built = TxUpdate::builder()
                    .table_name(&self.table)
                    .set_key(Some(key(&update.pk, &update.sk)))
                    .update_expression(&update.expression);
                let built = with_parts!(built, Parts::of_update(update))
                    .build()
                    .map_err(invalid)?;
                TransactWriteItem::builder().update(built)
            }
            TxWrite::Delete { pk, sk, condition } => {
                let delete = Delete::builder()
                    .table_name(&self.table)
                    .set_key(Some(key(pk, sk)));
                let delete = with_parts!(delete, Parts::of(condition.as_ref()))
                    .build()
                    .map_err(invalid)?;
                TransactWriteItem::builder().delete(delete)
            }
            TxWrite::Check { pk, sk, condition } => {
                let check = ConditionCheck::builder()
                    .table_name(&self.table)
                    .set_key(Some(key(pk, sk)));
                let check = with_parts!(check, Parts::of(Some(condition)))
                    .build()
                    .map_err(invalid)?;
                TransactWriteItem::builder().condition_check(check)
            }
        };
        Ok(built.build())
    }
}

/// The first backoff's ceiling; each further try doubles it, up to
/// `BACKOFF_MAX_MS`. Full jitter: writers that met on one item do not meet
/// again at the same instant.
const BACKOFF_BASE_MS: u64 = 20;
const BACKOFF_MAX_MS: u64 = 640;

impl Store for DynamoStore {
    async fn backoff(&self, attempt: u32) {
        let ceiling = BACKOFF_BASE_MS
            .saturating_mul(1 << attempt.saturating_sub(1).min(10))
            .min(BACKOFF_MAX_MS);
        let wait = fastrand::u64(0..=ceiling);
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
    }

    async fn get(&self, pk: &str, sk: &str, consistent: bool) -> Result<Option<Item>, StoreError> {
        self.get_item(pk, sk, consistent, &[]).await
    }

    async fn get_attributes(
        &self,
        pk: &str,
        sk: &str,
        consistent: bool,
        attributes: &[String],
    ) -> Result<Option<Item>, StoreError> {
        self.get_item(pk, sk, consistent, attributes).await
    }

    async fn put(
        &self,
        item: &Item,
        condition: Option<&Condition>,
    ) -> Result<Option<Item>, StoreError> {
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item_to_sdk(item)));
        let out = with_parts!(request, Parts::of(condition))
            .return_values(ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| classify("PutItem", item_key_text(item), e))?;
        Ok(non_empty(out.attributes))
    }

    async fn update(&self, update: &Update, returns: Returns) -> Result<Option<Item>, StoreError> {
        let returns = match returns {
            Returns::Nothing => ReturnValue::None,
            Returns::AllNew => ReturnValue::AllNew,
            Returns::AllOld => ReturnValue::AllOld,
        };
        let out = self
            .update_request(update)
            .return_values(returns)
            .send()
            .await
            .map_err(|e| classify("UpdateItem", key_text(&update.pk, &update.sk), e))?;
        Ok(non_empty(out.attributes))
    }

    async fn update_or_old(&self, update: &Update) -> Result<Updated, StoreError> {
        let out = self
            .update_request(update)
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match out {
            Ok(out) => Ok(Updated::Applied(non_empty(out.attributes))),
            Err(err) => {
                if let Some(UpdateItemError::ConditionalCheckFailedException(failed)) =
                    err.as_service_error()
                {
                    return Ok(Updated::Refused(non_empty(failed.item.clone())));
                }
                Err(classify(
                    "UpdateItem",
                    key_text(&update.pk, &update.sk),
                    err,
                ))
            }
        }
    }

    async fn get_many(
        &self,
        keys: &[(String, String)],
        consistent: bool,
    ) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH_GET_KEYS) {
            items.extend(self.batch_get(chunk, consistent).await?);
        }
        Ok(items)
    }

    async fn delete(
        &self,
        pk: &str,
        sk: &str,
        condition: Option<&Condition>,
    ) -> Result<Option<Item>, StoreError> {
        let request = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key(pk, sk)));
        let out = with_parts!(request, Parts::of(condition))
            .return_values(ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| classify("DeleteItem", key_text(pk, sk), e))?;
        Ok(non_empty(out.attributes))
    }

    async fn query(&self, query: &Query) -> Result<Vec<Item>, StoreError> {
        crate::store::all_pages(self, query).await
    }

    async fn query_page(
        &self,
        query: &Query,
        start: Option<&Item>,
    ) -> Result<QueryPage, StoreError> {
        self.query_page_by(query, start, Paging::default()).await
    }

    async fn query_page_by(
        &self,
        query: &Query,
        start: Option<&Item>,
        paging: Paging,
    ) -> Result<QueryPage, StoreError> {
        let index = query.index;
        let mut request = self
            .client
            .query()
            .table_name(&self.table)
            .set_index_name(index.name.map(str::to_owned))
            .expression_attribute_names("#pk", index.pk)
            .expression_attribute_values(":pk", AttributeValue::S(query.pk.clone()));
        // DynamoDB refuses `begins_with` with an empty prefix: the whole
        // partition is the partition key alone.
        request = if query.sk_prefix.is_empty() {
            request.key_condition_expression("#pk = :pk")
        } else {
            request
                .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                .expression_attribute_names("#sk", index.sk)
                .expression_attribute_values(":prefix", AttributeValue::S(query.sk_prefix.clone()))
        };
        let out = request
            .consistent_read(query.consistent && index.name.is_none())
            .scan_index_forward(!paging.descending)
            .set_limit(paging.limit.map(|n| i32::try_from(n).unwrap_or(i32::MAX)))
            .set_exclusive_start_key(start.map(item_to_sdk))
            .send()
            .await
            .map_err(|e| {
                let what = format!(
                    "{} {}={} begins_with({})",
                    index.name.unwrap_or("table"),
                    index.pk,
                    query.pk,
                    query.sk_prefix
                );
                classify("Query", what, e)
            })?;
        Ok(QueryPage {
            items: out
                .items
                .unwrap_or_default()
                .iter()
                .map(item_from_sdk)
                .collect(),
            next: out
                .last_evaluated_key
                .filter(|key| !key.is_empty())
                .map(|key| item_from_sdk(&key)),
        })
    }

    async fn transact(&self, writes: &[TxWrite]) -> Result<(), StoreError> {
        let Some(first) = writes.first().map(TxWrite::key_text) else {
            return Ok(());
        };
        let items = writes
            .iter()
            .map(|write| self.transact_item(write))
            .collect::<Result<Vec<_>, _>>()?;
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        let Err(err) = result else {
            return Ok(());
        };
        if let Some(TransactWriteItemsError::TransactionCanceledException(cancel)) =
            err.as_service_error()
        {
            let reasons = cancel.cancellation_reasons();
            let any = |code: &str| reasons.iter().any(|r| r.code() == Some(code));
            let message = super::error_text(&err);
            let operation = "TransactWriteItems";
            // DynamoDB Local cancels a transaction holding a key over its
            // limit, reason ValidationError, where moto answers a
            // ValidationException: the same refusal, every time.
            if any("ValidationError") {
                return Err(StoreError::Rejected {
                    operation,
                    key: first,
                    message,
                });
            }
            if reasons.first().and_then(|r| r.code()) == Some("ConditionalCheckFailed") {
                return Err(StoreError::ConditionFailed {
                    operation,
                    key: first,
                });
            }
            if any("ConditionalCheckFailed") {
                return Err(StoreError::Cancelled {
                    operation,
                    key: first,
                    message,
                });
            }
            // Another transaction on the same items (concurrent registry
            // updates): worth another try, unlike a condition that failed.
            if any("TransactionConflict") {
                // Named whatever DynamoDB's message says: `is_conflict` reads it.
                return Err(StoreError::Retryable {
                    operation,
                    key: first,
                    message: format!("TransactionConflict: {message}"),
                });
            }
        }
        Err(classify("TransactWriteItems", first, err))
    }
}
