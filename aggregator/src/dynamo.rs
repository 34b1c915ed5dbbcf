//! [`Table`] over the AWS SDK's DynamoDB client.

use crate::store::{AuditPut, SnapshotWrite, StoreError, Table, Val};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::{BTreeMap, HashMap};
use zae_table::keys;
use zae_table::sdk::classify;

pub fn attribute(value: &Val) -> AttributeValue {
    match value {
        Val::S(s) => AttributeValue::S(s.clone()),
        Val::N(n) => AttributeValue::N(n.clone()),
        Val::M(m) => AttributeValue::M(m.iter().map(|(k, v)| (k.clone(), attribute(v))).collect()),
    }
}

fn item_key(pk: &str, sk: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("PK".to_owned(), AttributeValue::S(pk.into())),
        ("SK".to_owned(), AttributeValue::S(sk.into())),
    ])
}

#[derive(Clone)]
pub struct DynamoTable {
    client: Client,
    table_name: String,
}

impl DynamoTable {
    pub fn new(client: Client, table_name: impl Into<String>) -> Self {
        DynamoTable {
            client,
            table_name: table_name.into(),
        }
    }
}

impl Table for DynamoTable {
    async fn update_snapshot(&self, write: &SnapshotWrite) -> Result<(), StoreError> {
        self.client
            .update_item()
            .table_name(&self.table_name)
            .set_key(Some(item_key(&write.pk, &write.sk)))
            .update_expression(&write.update)
            .condition_expression(&write.condition)
            .set_expression_attribute_names(Some(write.names.clone().into_iter().collect()))
            .set_expression_attribute_values(Some(
                write
                    .values
                    .iter()
                    .map(|(k, v)| (k.clone(), attribute(v)))
                    .collect(),
            ))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("UpdateItem", format!("{} {}", write.pk, write.sk), e))
    }

    async fn read_strings(
        &self,
        pk: &str,
        sk: &str,
        attributes: &[String],
    ) -> Result<BTreeMap<String, String>, StoreError> {
        let names: HashMap<String, String> = attributes
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("#a{i}"), a.clone()))
            .collect();
        let projection = (0..attributes.len())
            .map(|i| format!("#a{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let out = self
            .client
            .get_item()
            .table_name(&self.table_name)
            .set_key(Some(item_key(pk, sk)))
            .consistent_read(true)
            .projection_expression(projection)
            .set_expression_attribute_names(Some(names))
            .send()
            .await
            .map_err(|e| classify("GetItem", format!("{pk} {sk}"), e))?;
        Ok(out
            .item
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(name, value)| match value {
                AttributeValue::S(s) => Some((name, s)),
                _ => None,
            })
            .collect())
    }

    async fn put_audit_event(&self, put: &AuditPut) -> Result<bool, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table_name)
            .set_item(Some(
                put.item
                    .iter()
                    .map(|(k, v)| (k.clone(), attribute(v)))
                    .collect(),
            ))
            .condition_expression("attribute_not_exists(PK)")
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) => match classify("PutItem", format!("{} {}", put.pk, put.sk), e) {
                StoreError::ConditionFailed { .. } => Ok(false),
                other => Err(other),
            },
        }
    }

    async fn audit_retention_days(&self, namespace: &str) -> Result<Option<i64>, StoreError> {
        let pk = keys::pk_system(namespace);
        let out = self
            .client
            .get_item()
            .table_name(&self.table_name)
            .set_key(Some(item_key(&pk, keys::SK_CONFIG)))
            .projection_expression("audit_retention_days")
            .send()
            .await
            .map_err(|e| classify("GetItem", format!("{pk} {}", keys::SK_CONFIG), e))?;
        Ok(out
            .item
            .and_then(|item| match item.get("audit_retention_days") {
                Some(AttributeValue::N(n)) => zae_table::milli::parse_int(n).ok(),
                _ => None,
            })
            .filter(|days| *days > 0))
    }
}
