//! [`Store`] over the AWS SDK's DynamoDB client. Every call's error names the
//! operation and the key it was about.

use crate::store::{Attr, Condition, Item, Query, Returns, Store, StoreError, TxWrite, Update};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, Delete, Put, ReturnValue, TransactWriteItem, Update as TxUpdate,
};
use std::collections::HashMap;
use zae_table::sdk::classify;

pub fn to_sdk(value: &Attr) -> AttributeValue {
    match value {
        Attr::S(s) => AttributeValue::S(s.clone()),
        Attr::N(n) => AttributeValue::N(n.clone()),
        Attr::Bool(b) => AttributeValue::Bool(*b),
        Attr::L(items) => AttributeValue::L(items.iter().map(to_sdk).collect()),
        Attr::M(map) => AttributeValue::M(map.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect()),
        Attr::Ss(set) => AttributeValue::Ss(set.iter().cloned().collect()),
        Attr::Null => AttributeValue::Null(true),
    }
}

/// Types config items never hold (binary, number sets) come back as `Null`,
/// which makes the item compare as different and so get rewritten.
pub fn from_sdk(value: &AttributeValue) -> Attr {
    match value {
        AttributeValue::S(s) => Attr::S(s.clone()),
        AttributeValue::N(n) => Attr::N(n.clone()),
        AttributeValue::Bool(b) => Attr::Bool(*b),
        AttributeValue::L(items) => Attr::L(items.iter().map(from_sdk).collect()),
        AttributeValue::M(map) => {
            Attr::M(map.iter().map(|(k, v)| (k.clone(), from_sdk(v))).collect())
        }
        AttributeValue::Ss(set) => Attr::Ss(set.iter().cloned().collect()),
        _ => Attr::Null,
    }
}

fn item_from(map: HashMap<String, AttributeValue>) -> Item {
    map.iter().map(|(k, v)| (k.clone(), from_sdk(v))).collect()
}

fn non_empty(map: Option<HashMap<String, AttributeValue>>) -> Option<Item> {
    map.filter(|m| !m.is_empty()).map(item_from)
}

fn key(pk: &str, sk: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("PK".to_owned(), AttributeValue::S(pk.to_owned())),
        ("SK".to_owned(), AttributeValue::S(sk.to_owned())),
    ])
}

fn key_text(pk: &str, sk: &str) -> String {
    format!("{pk} {sk}")
}

type Names = Option<HashMap<String, String>>;
type Values = Option<HashMap<String, AttributeValue>>;

fn expression_parts(condition: Option<&Condition>) -> (Option<String>, Names, Values) {
    match condition {
        None => (None, None, None),
        Some(c) => (
            Some(c.expression.clone()),
            (!c.names.is_empty()).then(|| c.names.clone().into_iter().collect()),
            (!c.values.is_empty())
                .then(|| c.values.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect()),
        ),
    }
}

#[derive(Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
}

impl DynamoStore {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoStore {
            client,
            table: table.into(),
        }
    }
}

impl Store for DynamoStore {
    async fn get(&self, pk: &str, sk: &str, consistent: bool) -> Result<Option<Item>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(pk, sk)))
            .consistent_read(consistent)
            .send()
            .await
            .map_err(|e| classify("GetItem", key_text(pk, sk), e))?;
        Ok(out.item.map(item_from))
    }

    async fn put(&self, item: &Item, condition: Option<&Condition>) -> Result<Option<Item>, StoreError> {
        let pk = item.get("PK").and_then(Attr::as_s).unwrap_or_default();
        let sk = item.get("SK").and_then(Attr::as_s).unwrap_or_default();
        let (expression, names, values) = expression_parts(condition);
        let out = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect()))
            .set_condition_expression(expression)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .return_values(ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| classify("PutItem", key_text(pk, sk), e))?;
        Ok(non_empty(out.attributes))
    }

    async fn update(&self, update: &Update, returns: Returns) -> Result<Option<Item>, StoreError> {
        let returns = match returns {
            Returns::Nothing => ReturnValue::None,
            Returns::AllOld => ReturnValue::AllOld,
            Returns::AllNew => ReturnValue::AllNew,
        };
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(&update.pk, &update.sk)))
            .update_expression(&update.expression)
            .set_condition_expression(update.condition.clone())
            .set_expression_attribute_names(
                (!update.names.is_empty()).then(|| update.names.clone().into_iter().collect()),
            )
            .set_expression_attribute_values((!update.values.is_empty()).then(|| {
                update
                    .values
                    .iter()
                    .map(|(k, v)| (k.clone(), to_sdk(v)))
                    .collect()
            }))
            .return_values(returns)
            .send()
            .await
            .map_err(|e| classify("UpdateItem", key_text(&update.pk, &update.sk), e))?;
        Ok(non_empty(out.attributes))
    }

    async fn delete(
        &self,
        pk: &str,
        sk: &str,
        condition: Option<&Condition>,
    ) -> Result<Option<Item>, StoreError> {
        let (expression, names, values) = expression_parts(condition);
        let out = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key(pk, sk)))
            .set_condition_expression(expression)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .return_values(ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| classify("DeleteItem", key_text(pk, sk), e))?;
        Ok(non_empty(out.attributes))
    }

    async fn query(&self, query: &Query) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        let what = format!(
            "{} {}={} begins_with({})",
            query.index.unwrap_or("table"),
            query.pk_attr,
            query.pk,
            query.sk_prefix
        );
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .set_index_name(query.index.map(str::to_owned))
                .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                .expression_attribute_names("#pk", query.pk_attr)
                .expression_attribute_names("#sk", query.sk_attr)
                .expression_attribute_values(":pk", AttributeValue::S(query.pk.clone()))
                .expression_attribute_values(":prefix", AttributeValue::S(query.sk_prefix.clone()))
                .consistent_read(query.consistent && query.index.is_none())
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| classify("Query", what.clone(), e))?;
            items.extend(out.items.unwrap_or_default().into_iter().map(item_from));
            match out.last_evaluated_key {
                Some(next) if !next.is_empty() => start = Some(next),
                _ => return Ok(items),
            }
        }
    }

    async fn transact(&self, writes: &[TxWrite]) -> Result<(), StoreError> {
        let first = match writes.first() {
            Some(TxWrite::Put { item, .. }) => key_text(
                item.get("PK").and_then(Attr::as_s).unwrap_or_default(),
                item.get("SK").and_then(Attr::as_s).unwrap_or_default(),
            ),
            Some(TxWrite::Update(update)) => key_text(&update.pk, &update.sk),
            Some(TxWrite::Delete { pk, sk, .. }) => key_text(pk, sk),
            None => return Ok(()),
        };
        let invalid = |err: aws_sdk_dynamodb::error::BuildError| StoreError::Fatal {
            operation: "TransactWriteItems",
            key: first.clone(),
            message: err.to_string(),
        };
        let mut items = Vec::with_capacity(writes.len());
        for write in writes {
            let item = match write {
                TxWrite::Put { item, condition } => {
                    let (expression, names, values) = expression_parts(condition.as_ref());
                    let put = Put::builder()
                        .table_name(&self.table)
                        .set_item(Some(item.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect()))
                        .set_condition_expression(expression)
                        .set_expression_attribute_names(names)
                        .set_expression_attribute_values(values)
                        .build();
                    TransactWriteItem::builder().put(put.map_err(invalid)?).build()
                }
                TxWrite::Update(update) => {
                    let built = TxUpdate::builder()
                        .table_name(&self.table)
                        .set_key(Some(key(&update.pk, &update.sk)))
                        .update_expression(&update.expression)
                        .set_condition_expression(update.condition.clone())
                        .set_expression_attribute_names(
                            (!update.names.is_empty())
                                .then(|| update.names.clone().into_iter().collect()),
                        )
                        .set_expression_attribute_values((!update.values.is_empty()).then(|| {
                            update.values.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect()
                        }))
                        .build();
                    TransactWriteItem::builder().update(built.map_err(invalid)?).build()
                }
                TxWrite::Delete { pk, sk, condition } => {
                    let (expression, names, values) = expression_parts(condition.as_ref());
                    let delete = Delete::builder()
                        .table_name(&self.table)
                        .set_key(Some(key(pk, sk)))
                        .set_condition_expression(expression)
                        .set_expression_attribute_names(names)
                        .set_expression_attribute_values(values)
                        .build();
                    TransactWriteItem::builder().delete(delete.map_err(invalid)?).build()
                }
            };
            items.push(item);
        }
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(err) => {
                if let Some(TransactWriteItemsError::TransactionCanceledException(cancel)) =
                    err.as_service_error()
                {
                    let first_failed = cancel
                        .cancellation_reasons()
                        .first()
                        .and_then(|reason| reason.code())
                        == Some("ConditionalCheckFailed");
                    if first_failed {
                        return Err(StoreError::ConditionFailed {
                            operation: "TransactWriteItems",
                            key: first,
                        });
                    }
                }
                Err(classify("TransactWriteItems", first, err))
            }
        }
    }
}
