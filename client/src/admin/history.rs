//! Usage snapshots and audit events read back, with the 0.17.0 client's
//! filters and paging: `get_usage_snapshots` (by entity on the table, by
//! resource on GSI2; most recent first; `limit` items read per page, then
//! filtered) and `get_audit_events` (an entity's events, most recent first,
//! after `start_event_id`), and `get_usage_summary` (every page, summed).

use super::{AdminError, AuditEvent, UsageSnapshot, check_entity};
use crate::limiter::RateLimiter;
use std::collections::BTreeMap;
use zae_table::audit::{self, Recorded};
use zae_table::keys::{self, Index};
use zae_table::names::{self, NameKind};
use zae_table::snapshot::Usage;
use zae_table::store::{Paging, Query, Store};
use zae_table::{Attr, Item};

/// The client's default page size.
pub const DEFAULT_LIMIT: u32 = 100;

/// Where a page of snapshots goes on from: DynamoDB's `LastEvaluatedKey`,
/// the same keys the Python client hands back as `next_key`. Its text
/// ([`PageKey::to_json`]) is that dict in boto3's shape, so a page begun
/// in one client can be read on in the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageKey(Item);

impl PageKey {
    /// `{"PK": {"S": "..."}, ...}`.
    pub fn to_json(&self) -> String {
        let map: serde_json::Map<String, serde_json::Value> = self
            .0
            .iter()
            .map(|(k, v)| {
                let text = v.as_s().unwrap_or_default();
                (k.clone(), serde_json::json!({ "S": text }))
            })
            .collect();
        serde_json::Value::Object(map).to_string()
    }

    /// Reads [`PageKey::to_json`]'s text (or a Python `next_key` as JSON).
    /// Whether it continues a given query is checked when it is used.
    pub fn from_json(text: &str) -> Result<PageKey, AdminError> {
        let bad = |why: &str| AdminError::invalid("next_key", why.to_owned());
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| bad(&format!("not JSON: {e}")))?;
        let object = value.as_object().ok_or_else(|| bad("not a JSON object"))?;
        let mut item = Item::new();
        for (name, typed) in object {
            let text = typed
                .get("S")
                .and_then(serde_json::Value::as_str)
                .filter(|_| typed.as_object().is_some_and(|o| o.len() == 1))
                .ok_or_else(|| bad(&format!("{name} is not a string key ({{\"S\": ...}})")))?;
            item.insert(name.clone(), Attr::s(text));
        }
        Ok(PageKey(item))
    }
}

/// What `get_usage_snapshots` reads: an entity's snapshots (optionally of
/// one resource), or with no entity a resource's across entities. The
/// filters apply to each page after it is read, as in the client.
#[derive(Debug, Clone)]
pub struct UsageQuery {
    pub entity_id: Option<String>,
    pub resource: Option<String>,
    /// `hourly`, `daily`, `monthly`.
    pub window_type: Option<String>,
    /// Snapshots whose window starts at or after this
    /// (`YYYY-MM-DDTHH:MM:SSZ`, UTC, as the client formats a datetime).
    pub start_time: Option<String>,
    /// Snapshots whose window starts at or before this.
    pub end_time: Option<String>,
    /// Items read per page (1 or more), before the filters.
    pub limit: u32,
    pub next_key: Option<PageKey>,
}

impl Default for UsageQuery {
    fn default() -> Self {
        UsageQuery {
            entity_id: None,
            resource: None,
            window_type: None,
            start_time: None,
            end_time: None,
            limit: DEFAULT_LIMIT,
            next_key: None,
        }
    }
}

impl<S: Store + 'static> RateLimiter<S> {
    /// One page of usage snapshots, most recent first, and where the next
    /// page starts (`None` after the last).
    pub async fn get_usage_snapshots(
        &self,
        q: &UsageQuery,
    ) -> Result<(Vec<UsageSnapshot>, Option<PageKey>), AdminError> {
        let query = usage_query(&self.shared.namespace, q)?;
        let start = q
            .next_key
            .as_ref()
            .map(|key| continues(&query, key))
            .transpose()?;
        let paging = Paging {
            descending: true,
            limit: Some(check_limit(q.limit)?),
        };
        let page = self
            .shared
            .store
            .query_page_by(&query, start, paging)
            .await
            .map_err(AdminError::store)?;
        let kept = page
            .items
            .iter()
            .filter_map(Usage::read)
            .filter(|u| wanted(q, u))
            .collect();
        Ok((kept, page.next.map(PageKey)))
    }

    /// Up to `limit` audit events of `entity_id` (an entity, `$SYSTEM` or
    /// `$RESOURCE:<resource>`), most recent first, after `start_event_id`.
    pub async fn get_audit_events(
        &self,
        entity_id: &str,
        limit: u32,
        start_event_id: Option<&str>,
    ) -> Result<Vec<AuditEvent>, AdminError> {
        if !audit::is_audit_entity(entity_id) {
            return Err(AdminError::invalid(
                "entity_id",
                format!(
                    "{}: not an entity id, $SYSTEM or $RESOURCE:<resource>",
                    zae_table::shown::shown(entity_id, 300)
                ),
            ));
        }
        let namespace = &self.shared.namespace;
        let query = Query {
            index: &Index::TABLE,
            pk: keys::pk_audit(namespace, entity_id),
            sk_prefix: keys::SK_AUDIT.to_owned(),
            consistent: false,
        };
        // An empty id starts at the top, as the client's falsy check does.
        let start = match start_event_id.filter(|id| !id.is_empty()) {
            Some(id) => Some(audit_start(&query.pk, id)?),
            None => None,
        };
        let paging = Paging {
            descending: true,
            limit: Some(check_limit(limit)?),
        };
        let page = self
            .shared
            .store
            .query_page_by(&query, start.as_ref(), paging)
            .await
            .map_err(AdminError::store)?;
        Ok(page.items.iter().filter_map(Recorded::read).collect())
    }
}

/// DynamoDB refuses a `Limit` of 0.
fn check_limit(limit: u32) -> Result<u32, AdminError> {
    if limit == 0 {
        return Err(AdminError::invalid("limit", "0: must be 1 or more"));
    }
    Ok(limit)
}

/// The key an audit page goes on from: an event id is a ULID.
fn audit_start(pk: &str, event_id: &str) -> Result<Item, AdminError> {
    if audit::ulid_millis(event_id).is_none() {
        return Err(AdminError::invalid(
            "start_event_id",
            format!(
                "{}: not an event id (a 26-character ULID)",
                zae_table::shown::shown(event_id, 64)
            ),
        ));
    }
    Ok(Item::from([
        ("PK".to_owned(), Attr::s(pk)),
        ("SK".to_owned(), Attr::s(keys::sk_audit(event_id))),
    ]))
}

/// The table query (by entity) or the GSI2 query (by resource).
fn usage_query(namespace: &str, q: &UsageQuery) -> Result<Query, AdminError> {
    if let Some(resource) = &q.resource {
        names::check(NameKind::Resource, resource)
            .map_err(|why| AdminError::invalid("resource", why))?;
    }
    match (&q.entity_id, &q.resource) {
        (Some(entity), resource) => {
            check_entity("entity_id", entity)?;
            let sk_prefix = match resource {
                Some(r) => format!("{}{r}#", keys::SK_USAGE),
                None => keys::SK_USAGE.to_owned(),
            };
            Ok(Query {
                index: &Index::TABLE,
                pk: keys::pk_entity(namespace, entity),
                sk_prefix,
                consistent: false,
            })
        }
        (None, Some(resource)) => Ok(Query {
            index: &Index::GSI2,
            pk: keys::pk_resource(namespace, resource),
            sk_prefix: keys::GSI2_USAGE_PREFIX.to_owned(),
            consistent: false,
        }),
        (None, None) => Err(AdminError::invalid(
            "query",
            "either entity_id or resource must be provided",
        )),
    }
}

/// A page key continues `query` only with exactly the keys of its index,
/// in its partition, under its sort-key prefix: DynamoDB would refuse
/// another, or read on from a place this query never reached.
fn continues<'k>(query: &Query, key: &'k PageKey) -> Result<&'k Item, AdminError> {
    let index = query.index;
    let mut wanted = vec![Index::TABLE.pk, Index::TABLE.sk, index.pk, index.sk];
    wanted.sort_unstable();
    wanted.dedup();
    let names: Vec<&str> = key.0.keys().map(String::as_str).collect();
    let text = |name: &str| key.0.get(name).and_then(Attr::as_s).unwrap_or_default();
    let why = if names != wanted {
        Some(format!("has keys {names:?}, this query's are {wanted:?}"))
    } else if text(index.pk) != query.pk {
        Some(format!(
            "is in partition {}, not this query's",
            text(index.pk)
        ))
    } else if !text(index.sk).starts_with(&query.sk_prefix) {
        Some(format!("{} is not a usage snapshot's", index.sk))
    } else {
        None
    };
    match why {
        Some(why) => Err(AdminError::invalid("next_key", why)),
        None => Ok(&key.0),
    }
}

/// The client's filters, on the window type and its start.
fn wanted(q: &UsageQuery, usage: &Usage) -> bool {
    let start = usage.window_start.as_str();
    q.window_type
        .as_ref()
        .is_none_or(|w| *w == usage.window_type)
        && q.start_time.as_deref().is_none_or(|t| start >= t)
        && q.end_time.as_deref().is_none_or(|t| start <= t)
}

/// Snapshots the summary reads at most, and its page size (the client's).
const SUMMARY_MAX: usize = 10_000;
const SUMMARY_PAGE: u32 = 1_000;

/// What `get_usage_summary` answers, as the client's `UsageSummary`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UsageSummary {
    pub snapshot_count: usize,
    /// Consumption per limit over the snapshots read (i128: no sum of
    /// stored counters can overflow it, as none can a Python int).
    pub total: BTreeMap<String, i128>,
    /// `total` over the number of snapshots that count the limit.
    pub average: BTreeMap<String, f64>,
    pub min_window_start: Option<String>,
    pub max_window_start: Option<String>,
}

impl<S: Store + 'static> RateLimiter<S> {
    /// Every snapshot `q` selects (its `limit` and `next_key` ignored), read
    /// in pages of 1,000 up to 10,000 snapshots, summed per limit.
    pub async fn get_usage_summary(&self, q: &UsageQuery) -> Result<UsageSummary, AdminError> {
        let mut page = UsageQuery {
            limit: SUMMARY_PAGE,
            next_key: None,
            ..q.clone()
        };
        let mut all = Vec::new();
        loop {
            let (snapshots, next) = self.get_usage_snapshots(&page).await?;
            all.extend(snapshots);
            match next {
                Some(next) if all.len() < SUMMARY_MAX => page.next_key = Some(next),
                _ => return Ok(summarise(&all)),
            }
        }
    }
}

fn summarise(all: &[UsageSnapshot]) -> UsageSummary {
    let mut summary = UsageSummary {
        snapshot_count: all.len(),
        ..UsageSummary::default()
    };
    let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
    for snapshot in all {
        let start = &snapshot.window_start;
        if summary.min_window_start.as_ref().is_none_or(|m| start < m) {
            summary.min_window_start = Some(start.clone());
        }
        if summary.max_window_start.as_ref().is_none_or(|m| start > m) {
            summary.max_window_start = Some(start.clone());
        }
        for (limit, value) in &snapshot.counters {
            *summary.total.entry(limit.clone()).or_default() += i128::from(*value);
            *counts.entry(limit).or_default() += 1;
        }
    }
    for (limit, total) in &summary.total {
        let count = counts.get(limit.as_str()).copied().unwrap_or(1).max(1);
        summary
            .average
            .insert(limit.clone(), *total as f64 / f64::from(count));
    }
    summary
}
