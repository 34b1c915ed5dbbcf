//! Audit events for soft-limit transitions, in the client's own item format
//! so that `get_audit_events(entity_id)` of 0.17.0 returns them, written
//! once per transition however often its record is delivered.

use super::{Aggregator, Done, Refusal};
use crate::metrics::MetricEvent;
use crate::plan::Transition;
use sha2::{Digest, Sha256};
use std::time::Instant;
use zae_table::audit::{AuditEvent, ulid};
use zae_table::config::{AUDIT_RETENTION, audit_retention_days};
use zae_table::store::{Condition, ITEM_ABSENT, Store, StoreError};
use zae_table::{Attr, Item, keys};

/// A ULID made from the stream record instead of a clock and a random source:
/// the time part is the record's creation time, so the event sorts among the
/// client's own events; the rest is a hash of what identifies the transition,
/// so a redelivered record names the same event and writes nothing new.
pub fn event_id(transition: &Transition) -> String {
    let mut hash = Sha256::new();
    for part in [
        transition.sequence.padded(),
        &transition.bucket.pk(),
        &transition.limit,
        transition.kind.action().name(),
    ] {
        hash.update(part.as_bytes());
        hash.update([0u8]);
    }
    let digest = hash.finalize();
    let mut entropy = [0u8; 10];
    entropy.copy_from_slice(&digest[..10]);
    ulid(transition.at_ms, entropy)
}

/// The audit item of a transition, named by its [`event_id`].
pub fn audit_item(
    transition: &Transition,
    event_id: &str,
    principal: &str,
    retention_days: i64,
) -> Item {
    let bucket = &transition.bucket;
    let mut details = Item::from([
        ("resource".to_owned(), Attr::s(&bucket.resource)),
        ("limit".to_owned(), Attr::s(&transition.limit)),
        ("shard".to_owned(), Attr::n(bucket.shard)),
        ("balance".to_owned(), Attr::n(transition.balance)),
        (
            "stream_sequence".to_owned(),
            Attr::s(transition.sequence.as_stream()),
        ),
    ]);
    if let Some(capacity) = transition.capacity {
        details.insert("capacity".into(), Attr::n(capacity));
    }
    if let Some(count) = transition.shard_count {
        details.insert("shard_count".into(), Attr::n(count));
    }
    if let Some(reason) = transition.reason {
        details.insert("reason".into(), Attr::s(reason));
    }
    AuditEvent {
        namespace: &bucket.namespace,
        entity_id: &bucket.entity,
        event_id,
        at_ms: transition.at_ms,
        action: transition.kind.action(),
        principal: Some(principal),
        resource: Some(&bucket.resource),
        details,
        retention_days,
    }
    .item()
}

impl<S: Store> Aggregator<S> {
    /// The namespace's audit retention, read once per namespace and kept.
    async fn retention(
        &self,
        namespace: &str,
        deadline: Option<Instant>,
    ) -> Result<i64, StoreError> {
        let cached = self
            .retention_days
            .lock()
            .ok()
            .and_then(|c| c.get(namespace));
        if let Some(days) = cached {
            return Ok(days);
        }
        let pk = keys::pk_system(namespace);
        let attributes = [AUDIT_RETENTION.to_owned()];
        let config = self
            .retrying(deadline, || {
                self.store
                    .get_attributes(&pk, keys::SK_CONFIG, false, &attributes)
            })
            .await?;
        let days = audit_retention_days(config.as_ref());
        if let Ok(mut cache) = self.retention_days.lock() {
            cache.insert(namespace.to_owned(), days);
        }
        Ok(days)
    }

    pub(super) async fn write_audit(
        &self,
        transition: &Transition,
        principal: &str,
        now_s: i64,
        deadline: Option<Instant>,
    ) -> Result<Done, StoreError> {
        let namespace = &transition.bucket.namespace;
        let retention = self.retention(namespace, deadline).await?;
        let event_id = event_id(transition);
        let item = audit_item(transition, &event_id, principal, retention);
        // A key DynamoDB would refuse, or a write it refused as invalid:
        // the same every delivery, so skipped and counted, never redelivered.
        let refused = |reason: String| {
            Ok(Done::Refused(Refusal {
                what: "audit event",
                sequence: transition.sequence.clone(),
                key: keys::pk_of(&item).unwrap_or_default().to_owned(),
                reason,
                lost: None,
            }))
        };
        if let Err(e) = keys::check_item_keys(&item) {
            return refused(e.to_string());
        }
        let once = Condition::plain(ITEM_ABSENT);
        let written = match self
            .retrying(deadline, || self.store.put(&item, Some(&once)))
            .await
        {
            Ok(_) => true,
            Err(StoreError::ConditionFailed { .. }) => false,
            Err(StoreError::Rejected { message, .. }) => return refused(message),
            Err(e) => return Err(e),
        };
        if written {
            tracing::info!(
                action = transition.kind.action().name(),
                entity = %transition.bucket.entity,
                resource = %transition.bucket.resource,
                limit = %transition.limit,
                shard = transition.bucket.shard,
                balance = transition.balance,
                event_id = %event_id,
                "soft limit transition"
            );
        }
        let metric = MetricEvent::Transition {
            kind: transition.kind,
            at_ms: now_s.saturating_mul(1000),
            transition_ms: transition.at_ms,
            namespace_id: namespace.clone(),
            entity: transition.bucket.entity.clone(),
            resource: transition.bucket.resource.clone(),
            limit: transition.limit.clone(),
            shard: transition.bucket.shard,
            balance: transition.balance,
            event_id,
        };
        Ok(if written {
            Done::AuditWritten(metric)
        } else {
            Done::AuditExisting(metric)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::TransitionKind;
    use zae_table::{BucketKey, SequenceNumber};

    fn transition(seq: &str, kind: TransitionKind) -> Transition {
        Transition {
            kind,
            bucket: BucketKey::parse("ns/BUCKET#key-a#gpt-4#0").unwrap(),
            limit: "tpm".into(),
            sequence: SequenceNumber::parse(seq).unwrap(),
            at_ms: 1_795_970_136_158,
            balance: -100,
            capacity: Some(50_000),
            shard_count: Some(1),
            reason: None,
        }
    }

    #[test]
    fn event_ids_are_ulids_stable_per_transition() {
        let a = event_id(&transition("11", TransitionKind::Overdrawn));
        assert_eq!(a.len(), 26);
        assert_eq!(a, event_id(&transition("11", TransitionKind::Overdrawn)));
        assert_ne!(a, event_id(&transition("12", TransitionKind::Overdrawn)));
        assert_ne!(a, event_id(&transition("11", TransitionKind::Recovered)));
    }

    #[test]
    fn event_ids_sort_by_creation_time_like_the_clients_ulids() {
        let mut early = transition("99", TransitionKind::Overdrawn);
        early.at_ms -= 1;
        assert!(event_id(&early) < event_id(&transition("11", TransitionKind::Overdrawn)));
        assert_eq!(
            zae_table::audit::ulid_millis(&event_id(&early)),
            Some(early.at_ms)
        );
    }

    #[test]
    fn the_item_is_keyed_under_the_entitys_audit_partition() {
        let overdrawn = transition("11", TransitionKind::Overdrawn);
        let item = audit_item(&overdrawn, &event_id(&overdrawn), "arn:aws:lambda:x", 30);
        assert_eq!(item["PK"], Attr::s("ns/AUDIT#key-a"));
        assert!(item["SK"].as_s().unwrap().starts_with("#AUDIT#"));
        assert_eq!(item["action"], Attr::s("limit_overdrawn"));
        assert_eq!(item["timestamp"], Attr::s("2026-11-29T16:35:36Z"));
        assert_eq!(item["ttl"], Attr::n(1_795_970_136 + 30 * 86_400));
        let Attr::M(details) = &item["details"] else {
            panic!("details is a map")
        };
        assert_eq!(details["balance"], Attr::n(-100));
        assert_eq!(details["capacity"], Attr::n(50_000));
    }
}
