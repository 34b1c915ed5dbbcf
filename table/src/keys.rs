//! Key formats of the 0.17.0 table.

use crate::window::Window;
use thiserror::Error;

pub const SK_STATE: &str = "#STATE";
pub const SK_USAGE: &str = "#USAGE#";
pub const SK_AUDIT: &str = "#AUDIT#";
pub const SK_CONFIG: &str = "#CONFIG";
pub const BUCKET_PREFIX: &str = "BUCKET#";
pub const ENTITY_PREFIX: &str = "ENTITY#";
pub const RESOURCE_PREFIX: &str = "RESOURCE#";
pub const AUDIT_PREFIX: &str = "AUDIT#";
pub const SYSTEM_PREFIX: &str = "SYSTEM#";

/// Where a bucket item lives: `PK = "{ns}/BUCKET#{entity}#{resource}#{shard}"`, `SK = "#STATE"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketKey {
    pub namespace: String,
    pub entity: String,
    pub resource: String,
    pub shard: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    #[error("partition key `{0}` has no namespace (pre-migration item)")]
    NoNamespace(String),
    #[error("partition key `{0}` is not a bucket key")]
    NotBucket(String),
    #[error("partition key `{0}` has no valid shard number")]
    BadShard(String),
    #[error("partition key `{0}` has an empty entity or resource")]
    EmptyPart(String),
}

impl BucketKey {
    /// Parses a bucket partition key. The shard is after the last `#`, the entity
    /// before the first; the resource is what lies between.
    pub fn parse(pk: &str) -> Result<BucketKey, KeyError> {
        let (namespace, rest) = pk
            .split_once('/')
            .ok_or_else(|| KeyError::NoNamespace(pk.into()))?;
        let body = rest
            .strip_prefix(BUCKET_PREFIX)
            .ok_or_else(|| KeyError::NotBucket(pk.into()))?;
        let (entity_resource, shard) = body
            .rsplit_once('#')
            .ok_or_else(|| KeyError::NotBucket(pk.into()))?;
        if shard.is_empty() || !shard.bytes().all(|b| b.is_ascii_digit()) {
            return Err(KeyError::BadShard(pk.into()));
        }
        let shard: u32 = shard.parse().map_err(|_| KeyError::BadShard(pk.into()))?;
        let (entity, resource) = entity_resource
            .split_once('#')
            .ok_or_else(|| KeyError::NotBucket(pk.into()))?;
        if namespace.is_empty() || entity.is_empty() || resource.is_empty() {
            return Err(KeyError::EmptyPart(pk.into()));
        }
        Ok(BucketKey {
            namespace: namespace.into(),
            entity: entity.into(),
            resource: resource.into(),
            shard,
        })
    }

    pub fn pk(&self) -> String {
        format!(
            "{}/{BUCKET_PREFIX}{}#{}#{}",
            self.namespace, self.entity, self.resource, self.shard
        )
    }
}

pub fn pk_entity(namespace: &str, entity: &str) -> String {
    format!("{namespace}/{ENTITY_PREFIX}{entity}")
}

pub fn pk_system(namespace: &str) -> String {
    format!("{namespace}/{SYSTEM_PREFIX}")
}

pub fn pk_audit(namespace: &str, entity: &str) -> String {
    format!("{namespace}/{AUDIT_PREFIX}{entity}")
}

pub fn sk_audit(event_id: &str) -> String {
    format!("{SK_AUDIT}{event_id}")
}

pub fn gsi2_pk_resource(namespace: &str, resource: &str) -> String {
    format!("{namespace}/{RESOURCE_PREFIX}{resource}")
}

pub fn gsi2_sk_usage(window_key: &str, entity: &str) -> String {
    format!("USAGE#{window_key}#{entity}")
}

/// Sort key of a usage snapshot.
///
/// The hourly key is the reference's own. Daily and monthly keys carry their
/// window name, because the reference's keys for hour 00, the day and the first
/// of the month are the same string and so shared one item.
pub fn sk_usage(resource: &str, window: Window, window_key: &str) -> String {
    match window {
        Window::Hourly => format!("{SK_USAGE}{resource}#{window_key}"),
        Window::Daily | Window::Monthly => {
            format!("{SK_USAGE}{resource}#{window_key}#{}", window.name())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bucket_keys() {
        let key = BucketKey::parse("UaIlVrPDZbM/BUCKET#key-a#gpt-4#0").unwrap();
        assert_eq!(
            key,
            BucketKey {
                namespace: "UaIlVrPDZbM".into(),
                entity: "key-a".into(),
                resource: "gpt-4".into(),
                shard: 0
            }
        );
        assert_eq!(key.pk(), "UaIlVrPDZbM/BUCKET#key-a#gpt-4#0");
    }

    #[test]
    fn resource_may_contain_hashes_between_entity_and_shard() {
        let key = BucketKey::parse("ns/BUCKET#e#a#b#12").unwrap();
        assert_eq!(
            (key.entity.as_str(), key.resource.as_str(), key.shard),
            ("e", "a#b", 12)
        );
    }

    #[test]
    fn rejects_other_key_shapes_with_the_reason() {
        assert!(matches!(
            BucketKey::parse("BUCKET#e#r#0"),
            Err(KeyError::NoNamespace(_))
        ));
        assert!(matches!(
            BucketKey::parse("ns/ENTITY#e"),
            Err(KeyError::NotBucket(_))
        ));
        assert!(matches!(
            BucketKey::parse("ns/BUCKET#e#r#x"),
            Err(KeyError::BadShard(_))
        ));
        assert!(matches!(
            BucketKey::parse("ns/BUCKET#e#r#99999999999"),
            Err(KeyError::BadShard(_))
        ));
        assert!(matches!(
            BucketKey::parse("ns/BUCKET#e#0"),
            Err(KeyError::NotBucket(_))
        ));
        assert!(matches!(
            BucketKey::parse("ns/BUCKET##r#0"),
            Err(KeyError::EmptyPart(_))
        ));
    }

    #[test]
    fn snapshot_keys_no_longer_collide_across_windows() {
        let at = "2026-03-01T00:00:00Z";
        let keys: Vec<String> = Window::ALL
            .iter()
            .map(|w| sk_usage("gpt-4", *w, at))
            .collect();
        assert_eq!(keys[0], "#USAGE#gpt-4#2026-03-01T00:00:00Z");
        assert_eq!(keys[1], "#USAGE#gpt-4#2026-03-01T00:00:00Z#daily");
        assert_eq!(keys[2], "#USAGE#gpt-4#2026-03-01T00:00:00Z#monthly");
        // The reader narrows entity queries with this prefix: every key must keep it.
        assert!(keys.iter().all(|k| k.starts_with("#USAGE#gpt-4#")));
    }
}
