//! Audit events for soft-limit transitions, in the client's own item format so
//! that `get_audit_events(entity_id)` of 0.17.0 returns them.

use crate::plan::Transition;
use crate::store::{AuditPut, Val};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use zae_table::keys;

pub use zae_table::audit::{DEFAULT_RETENTION_DAYS, timestamp};

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
        transition.kind.action(),
    ] {
        hash.update(part.as_bytes());
        hash.update([0u8]);
    }
    let digest = hash.finalize();
    let mut entropy = [0u8; 10];
    entropy.copy_from_slice(&digest[..10]);
    zae_table::audit::ulid(transition.at_ms, entropy)
}

pub fn audit_put(transition: &Transition, principal: &str, retention_days: i64) -> AuditPut {
    let bucket = &transition.bucket;
    let id = event_id(transition);
    let pk = keys::pk_audit(&bucket.namespace, &bucket.entity);
    let sk = keys::sk_audit(&id);
    let mut details = BTreeMap::from([
        ("resource".to_owned(), Val::s(&bucket.resource)),
        ("limit".to_owned(), Val::s(&transition.limit)),
        ("shard".to_owned(), Val::n(bucket.shard)),
        ("balance".to_owned(), Val::n(transition.balance)),
        (
            "stream_sequence".to_owned(),
            Val::s(transition.sequence.as_stream()),
        ),
    ]);
    if let Some(capacity) = transition.capacity {
        details.insert("capacity".into(), Val::n(capacity));
    }
    if let Some(count) = transition.shard_count {
        details.insert("shard_count".into(), Val::n(count));
    }
    let ttl = zae_table::audit::expiry(transition.at_ms, retention_days);
    let item = BTreeMap::from([
        ("PK".to_owned(), Val::s(&pk)),
        ("SK".to_owned(), Val::s(&sk)),
        ("entity_id".to_owned(), Val::s(&bucket.entity)),
        ("event_id".to_owned(), Val::s(&id)),
        ("timestamp".to_owned(), Val::s(timestamp(transition.at_ms))),
        ("action".to_owned(), Val::s(transition.kind.action())),
        ("principal".to_owned(), Val::s(principal)),
        ("resource".to_owned(), Val::s(&bucket.resource)),
        ("details".to_owned(), Val::M(details)),
        ("ttl".to_owned(), Val::n(ttl)),
        ("GSI4PK".to_owned(), Val::s(&bucket.namespace)),
        ("GSI4SK".to_owned(), Val::s(&pk)),
    ]);
    AuditPut { pk, sk, item }
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
        assert_eq!(zae_table::audit::ulid_millis(&event_id(&early)), Some(early.at_ms));
    }

    #[test]
    fn the_item_is_keyed_under_the_entitys_audit_partition() {
        let put = audit_put(
            &transition("11", TransitionKind::Overdrawn),
            "arn:aws:lambda:x",
            30,
        );
        assert_eq!(put.pk, "ns/AUDIT#key-a");
        assert!(put.sk.starts_with("#AUDIT#"));
        assert_eq!(put.item["action"], Val::s("limit_overdrawn"));
        assert_eq!(put.item["timestamp"], Val::s("2026-11-29T16:35:36Z"));
        assert_eq!(put.item["ttl"], Val::n(1_795_970_136 + 30 * 86_400));
        let Val::M(details) = &put.item["details"] else {
            panic!("details is a map")
        };
        assert_eq!(details["balance"], Val::n(-100));
        assert_eq!(details["capacity"], Val::n(50_000));
    }
}
