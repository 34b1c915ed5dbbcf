//! Every key of the 0.17.0 table: partition and sort keys, the index key
//! schemas, and their builders. Nothing else in the workspace spells one.

use crate::level::Level;
use crate::window::Window;
use thiserror::Error;

pub const SK_STATE: &str = "#STATE";
pub const SK_USAGE: &str = "#USAGE#";
pub const SK_AUDIT: &str = "#AUDIT#";
pub const SK_CONFIG: &str = "#CONFIG";
pub const SK_META: &str = "#META";
pub const SK_VERSION: &str = "#VERSION";
pub const SK_RESOURCES: &str = "#RESOURCES";
pub const SK_ENTITY_CONFIG_RESOURCES: &str = "#ENTITY_CONFIG_RESOURCES";
pub const SK_PROVISIONER: &str = "#PROVISIONER";
pub const SK_PENDING_PREFIX: &str = "#PROVISIONER#PENDING#";
pub const BUCKET_PREFIX: &str = "BUCKET#";
pub const ENTITY_PREFIX: &str = "ENTITY#";
pub const RESOURCE_PREFIX: &str = "RESOURCE#";
pub const AUDIT_PREFIX: &str = "AUDIT#";
/// GSI1: a parent's children (`{ns}/PARENT#{parent}`, `CHILD#{child}`).
pub const PARENT_PREFIX: &str = "PARENT#";
pub const CHILD_PREFIX: &str = "CHILD#";
/// GSI2 sort-key prefix of usage snapshots.
pub const GSI2_USAGE_PREFIX: &str = "USAGE#";
pub const SYSTEM_PREFIX: &str = "SYSTEM#";
pub const ENTITY_CONFIG_PREFIX: &str = "ENTITY_CONFIG#";
/// The adaptive-limit partitions (`{ns}/ADAPTIVE#...`): a prefix the 0.17.0
/// client never builds a key with, and items without index keys, so none of
/// its reads or queries can meet them.
pub const ADAPTIVE_PREFIX: &str = "ADAPTIVE#";
pub const CANARY_PREFIX: &str = "ADAPTIVE#CANARY#";
pub const SK_ADAPTIVE_DECLARATION: &str = "#DECLARATION";
pub const SK_ADAPTIVE_SENSED: &str = "#SENSED";
pub const SK_ADAPTIVE_TICK: &str = "#TICK";
pub const SK_ADAPTIVE_USAGE: &str = "#USAGE#";
pub const SK_ADAPTIVE_TARGET: &str = "#TARGET#";
pub const SK_ADAPTIVE_DEMAND: &str = "#DEMAND#";
pub const SK_ADAPTIVE_ALLOCATION: &str = "#ALLOCATION#";
/// The namespace's generation counter (`crate::adaptive::generation`).
pub const SK_ADAPTIVE_GENERATION: &str = "#GENERATION";
/// The namespace of table-wide records: the namespace registry and `#VERSION`.
pub const RESERVED_NAMESPACE: &str = "_";

/// A key schema: the table's own, or one of its global secondary indexes.
#[derive(Debug, PartialEq, Eq)]
pub struct Index {
    /// `None` for the table itself.
    pub name: Option<&'static str>,
    pub pk: &'static str,
    pub sk: &'static str,
    /// The index holds the keys only (table and index keys), not whole items.
    pub keys_only: bool,
}

impl Index {
    pub const TABLE: Index = Index {
        name: None,
        pk: "PK",
        sk: "SK",
        keys_only: false,
    };
    /// Buckets and snapshots by resource: `{ns}/RESOURCE#{resource}`; whole items.
    pub const GSI2: Index = Index {
        name: Some("GSI2"),
        pk: "GSI2PK",
        sk: "GSI2SK",
        keys_only: false,
    };
    /// Buckets by entity and entity configs by resource; keys only.
    pub const GSI3: Index = Index {
        name: Some("GSI3"),
        pk: "GSI3PK",
        sk: "GSI3SK",
        keys_only: true,
    };
    /// Everything of a namespace (`GSI4PK = {ns}`); keys only.
    pub const GSI4: Index = Index {
        name: Some("GSI4"),
        pk: "GSI4PK",
        sk: "GSI4SK",
        keys_only: true,
    };

    /// The key attributes a query of this index goes on from after `item`
    /// (DynamoDB's `ExclusiveStartKey`): the table's keys and the index's.
    pub fn start_key(&self, item: &crate::value::Item) -> crate::value::Item {
        let names = [Index::TABLE.pk, Index::TABLE.sk, self.pk, self.sk];
        item.iter()
            .filter(|(name, _)| names.contains(&name.as_str()))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect()
    }
}

/// An item's partition key, when it has one.
pub fn pk_of(item: &crate::value::Item) -> Option<&str> {
    item.get(Index::TABLE.pk).and_then(crate::value::Attr::as_s)
}

/// An item's sort key, when it has one.
pub fn sk_of(item: &crate::value::Item) -> Option<&str> {
    item.get(Index::TABLE.sk).and_then(crate::value::Attr::as_s)
}

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
    /// The start of the key only: the whole may be 2 KB.
    #[error(
        "bucket key `{0}...` has a namespace, entity id or resource longer than the client writes"
    )]
    BeyondClientCaps(String),
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

    /// Refuses a bucket no 0.17.0 client writes: a namespace over
    /// [`MAX_NAMESPACE_BYTES`](crate::names::MAX_NAMESPACE_BYTES), an entity
    /// id over 256 bytes or a resource over 64 (the client's caps; its
    /// names are ASCII). A principal with the acquire policy can put such
    /// an item by hand; within the caps, every key derived from a bucket
    /// (audit events, snapshots, demand listings, clones) is far within
    /// DynamoDB's limits, whatever the bytes.
    pub fn check_client_caps(&self) -> Result<(), KeyError> {
        use crate::names::{MAX_ENTITY_BYTES, MAX_NAMESPACE_BYTES, MAX_RESOURCE_BYTES};
        if self.namespace.len() <= MAX_NAMESPACE_BYTES
            && self.entity.len() <= MAX_ENTITY_BYTES
            && self.resource.len() <= MAX_RESOURCE_BYTES
        {
            return Ok(());
        }
        Err(KeyError::BeyondClientCaps(
            crate::shown::clip(&self.pk(), 64).to_owned(),
        ))
    }

    pub fn pk(&self) -> String {
        format!(
            "{}/{BUCKET_PREFIX}{}#{}#{}",
            self.namespace, self.entity, self.resource, self.shard
        )
    }

    /// The same bucket's shard `shard`.
    pub fn shard(&self, shard: u32) -> BucketKey {
        BucketKey {
            shard,
            ..self.clone()
        }
    }

    /// What a new bucket item starts with, as the client creates it: its
    /// table keys, its owner and resource, and every index key.
    pub fn new_item(&self) -> crate::value::Item {
        use crate::value::Attr;
        let mut item = crate::value::Item::from([
            (Index::TABLE.pk.to_owned(), Attr::s(self.pk())),
            (Index::TABLE.sk.to_owned(), Attr::s(SK_STATE)),
            (crate::snapshot::ENTITY_ID.to_owned(), Attr::s(&self.entity)),
            (
                crate::snapshot::RESOURCE.to_owned(),
                Attr::s(&self.resource),
            ),
        ]);
        for (name, value) in self.index_keys() {
            item.insert(name.to_owned(), Attr::s(value));
        }
        item
    }

    /// Every index key a bucket item carries, partition and sort (GSI2:
    /// the resource's buckets, GSI3: the entity's, GSI4: the namespace's),
    /// as the client writes them when it creates the item.
    pub fn index_keys(&self) -> [(&'static str, String); 6] {
        let [(s2, v2), (s3, v3), (s4, v4)] = self.index_sort_keys();
        [
            (Index::GSI2.pk, pk_resource(&self.namespace, &self.resource)),
            (s2, v2),
            (Index::GSI3.pk, pk_entity(&self.namespace, &self.entity)),
            (s3, v3),
            (Index::GSI4.pk, self.namespace.clone()),
            (s4, v4),
        ]
    }

    /// The index sort keys a bucket item carries (GSI2, GSI3, GSI4).
    pub fn index_sort_keys(&self) -> [(&'static str, String); 3] {
        let (e, r, t) = (&self.entity, &self.resource, self.shard);
        [
            (Index::GSI2.sk, format!("{BUCKET_PREFIX}{e}#{t}")),
            (Index::GSI3.sk, format!("{BUCKET_PREFIX}{r}#{t}")),
            (Index::GSI4.sk, format!("{BUCKET_PREFIX}{e}#{r}#{t}")),
        ]
    }
}

pub fn pk_entity(namespace: &str, entity: &str) -> String {
    format!("{namespace}/{ENTITY_PREFIX}{entity}")
}

/// GSI1 partition of a parent's children.
pub fn gsi1_pk_parent(namespace: &str, parent: &str) -> String {
    format!("{namespace}/{PARENT_PREFIX}{parent}")
}

/// GSI1 sort key of a child under its parent.
pub fn gsi1_sk_child(entity: &str) -> String {
    format!("{CHILD_PREFIX}{entity}")
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

/// A resource's config item, and the GSI2 partition of its buckets and snapshots.
pub fn pk_resource(namespace: &str, resource: &str) -> String {
    format!("{namespace}/{RESOURCE_PREFIX}{resource}")
}

/// GSI3 partition of the entity configs of one resource.
pub fn gsi3_pk_entity_config(namespace: &str, resource: &str) -> String {
    format!("{namespace}/{ENTITY_CONFIG_PREFIX}{resource}")
}

/// `(PK, SK)` of a level's config item.
pub fn config_key(namespace: &str, level: &Level) -> (String, String) {
    match level {
        Level::System => (pk_system(namespace), SK_CONFIG.to_owned()),
        Level::Resource(resource) => (pk_resource(namespace, resource), SK_CONFIG.to_owned()),
        Level::Entity { entity, resource } => (
            pk_entity(namespace, entity),
            format!("{SK_CONFIG}#{resource}"),
        ),
    }
}

/// The table-wide registry partition: namespaces and the version record.
pub fn pk_registry() -> String {
    pk_system(RESERVED_NAMESPACE)
}

/// The registry entry of a namespace name.
pub fn sk_namespace(name: &str) -> String {
    format!("#NAMESPACE#{name}")
}

/// The registry's reverse entry: a namespace id to its name.
pub fn sk_namespace_id(id: &str) -> String {
    format!("#NSID#{id}")
}

/// A pending fan-out: `#PROVISIONER#PENDING#{kind}#{level kind}#{target}`.
pub fn sk_pending(kind: &str, level: &Level) -> String {
    format!(
        "{SK_PENDING_PREFIX}{kind}#{}#{}",
        level.kind(),
        level.target().unwrap_or_default()
    )
}

pub fn gsi2_sk_usage(window_key: &str, entity: &str) -> String {
    format!("{GSI2_USAGE_PREFIX}{window_key}#{entity}")
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

/// The partition of a namespace's adaptive records: its declaration, the
/// per-minute usage, the targets, the sensed canaries and the controller's tick.
pub fn pk_adaptive(namespace: &str) -> String {
    format!("{namespace}/{ADAPTIVE_PREFIX}")
}

/// A canary of the tick at `at_ms`: in the table-wide namespace, a
/// partition of its own each tick (`SK = #STATE`, so the aggregator's
/// filter passes its records).
pub fn pk_canary(at_ms: i64, index: u32) -> String {
    format!("{RESERVED_NAMESPACE}/{CANARY_PREFIX}{at_ms}#{index}")
}

/// The tick instant and index of a canary's partition key.
pub fn parse_canary(pk: &str) -> Option<(i64, u32)> {
    let rest = pk
        .strip_prefix(RESERVED_NAMESPACE)?
        .strip_prefix('/')?
        .strip_prefix(CANARY_PREFIX)?;
    let (at, index) = rest.split_once('#')?;
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(at) || !digits(index) {
        return None;
    }
    Some((at.parse().ok()?, index.parse().ok()?))
}

/// A canary written per namespace by an earlier controller
/// (`{ns}/ADAPTIVE#CANARY#{k}`): read past, never sensed.
pub fn is_legacy_canary(pk: &str) -> bool {
    pk.split_once('/')
        .and_then(|(_, rest)| rest.strip_prefix(CANARY_PREFIX))
        .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
}

/// The sensed set of the canaries of the tick at `at_ms`.
pub fn sk_adaptive_sensed(at_ms: i64) -> String {
    format!("{SK_ADAPTIVE_SENSED}#{at_ms:013}")
}

/// One minute of a resource's usage: `#USAGE#{minute start ms, 13 digits}#{resource}`,
/// so one prefix query finds a minute's resources.
pub fn sk_adaptive_usage(minute_ms: i64, resource: &str) -> String {
    format!("{SK_ADAPTIVE_USAGE}{minute_ms:013}#{resource}")
}

/// One entity's demand on a `share: demand` resource in one minute:
/// `#DEMAND#{minute start ms, 13 digits}#{resource}#{entity}`; the minute's
/// header (its count and overflow) has the empty entity, so one prefix query
/// with the entity left empty finds the header and every entity. No name
/// can hold `#`.
pub fn sk_adaptive_demand(minute_ms: i64, resource: &str, entity: &str) -> String {
    format!("{SK_ADAPTIVE_DEMAND}{minute_ms:013}#{resource}#{entity}")
}

/// One entity's allocation of a (resource, limit) under `share: demand`
/// (`#ALLOCATION#{resource}#{limit}#{entity}`; empty entity: every one).
pub fn sk_adaptive_allocation(resource: &str, limit: &str, entity: &str) -> String {
    format!("{SK_ADAPTIVE_ALLOCATION}{resource}#{limit}#{entity}")
}

/// A (resource, limit)'s target factor and the controller's state for it.
/// Neither name can hold `#`.
pub fn sk_adaptive_target(resource: &str, limit: &str) -> String {
    format!("{SK_ADAPTIVE_TARGET}{resource}#{limit}")
}

/// DynamoDB's ceiling on a partition key value (the table's or an
/// index's), in UTF-8 bytes.
pub const MAX_PARTITION_KEY_BYTES: usize = 2048;
/// DynamoDB's ceiling on a sort key value (the table's or an index's).
pub const MAX_SORT_KEY_BYTES: usize = 1024;

/// Every key attribute of the 0.17.0 table's definition (the client's
/// `create_table`: the table's keys, GSI1 to GSI4, and LSI1 to LSI5 whose
/// partition key is `PK`), each with the most bytes DynamoDB takes in it.
/// All are declared strings.
pub const KEY_ATTRIBUTES: [(&str, usize); 15] = [
    ("PK", MAX_PARTITION_KEY_BYTES),
    ("SK", MAX_SORT_KEY_BYTES),
    ("GSI1PK", MAX_PARTITION_KEY_BYTES),
    ("GSI1SK", MAX_SORT_KEY_BYTES),
    ("GSI2PK", MAX_PARTITION_KEY_BYTES),
    ("GSI2SK", MAX_SORT_KEY_BYTES),
    ("GSI3PK", MAX_PARTITION_KEY_BYTES),
    ("GSI3SK", MAX_SORT_KEY_BYTES),
    ("GSI4PK", MAX_PARTITION_KEY_BYTES),
    ("GSI4SK", MAX_SORT_KEY_BYTES),
    ("LSI1SK", MAX_SORT_KEY_BYTES),
    ("LSI2SK", MAX_SORT_KEY_BYTES),
    ("LSI3SK", MAX_SORT_KEY_BYTES),
    ("LSI4SK", MAX_SORT_KEY_BYTES),
    ("LSI5SK", MAX_SORT_KEY_BYTES),
];

/// A key value DynamoDB refuses (a `ValidationException`, every time).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyLimitError {
    #[error("key attribute {name} is {bytes} bytes, over DynamoDB's {max}")]
    TooLong {
        name: &'static str,
        bytes: usize,
        max: usize,
    },
    #[error("key attribute {name} is an empty string")]
    Empty { name: &'static str },
    #[error("key attribute {name} is not a string")]
    NotString { name: &'static str },
    #[error("key attribute {name} is missing")]
    Missing { name: &'static str },
}

/// Whether `value` may stand in the key attribute `name` (one of
/// [`KEY_ATTRIBUTES`]; any other name takes any value).
pub fn check_key_value(name: &str, value: &crate::value::Attr) -> Result<(), KeyLimitError> {
    let Some(&(name, max)) = KEY_ATTRIBUTES.iter().find(|(n, _)| *n == name) else {
        return Ok(());
    };
    let text = value.as_s().ok_or(KeyLimitError::NotString { name })?;
    if text.is_empty() {
        return Err(KeyLimitError::Empty { name });
    }
    if text.len() > max {
        let bytes = text.len();
        return Err(KeyLimitError::TooLong { name, bytes, max });
    }
    Ok(())
}

/// Whether DynamoDB takes `item`'s keys: its table keys present, and
/// every key attribute it carries (table and index) a non-empty string
/// within its limit.
pub fn check_item_keys(item: &crate::value::Item) -> Result<(), KeyLimitError> {
    for name in [Index::TABLE.pk, Index::TABLE.sk] {
        if !item.contains_key(name) {
            return Err(KeyLimitError::Missing { name });
        }
    }
    item.iter()
        .try_for_each(|(name, value)| check_key_value(name, value))
}

/// Whether DynamoDB takes `(pk, sk)` as an item's table key.
pub fn check_table_key(pk: &str, sk: &str) -> Result<(), KeyLimitError> {
    check_key_value(Index::TABLE.pk, &crate::value::Attr::s(pk))?;
    check_key_value(Index::TABLE.sk, &crate::value::Attr::s(sk))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canary_keys_round_trip_and_nothing_else_is_one() {
        let pk = pk_canary(1_796_032_805_000, 3);
        assert_eq!(pk, "_/ADAPTIVE#CANARY#1796032805000#3");
        assert_eq!(parse_canary(&pk), Some((1_796_032_805_000, 3)));
        for other in [
            "_/ADAPTIVE#",
            "_/ADAPTIVE#CANARY#",
            "_/ADAPTIVE#CANARY#5",
            "_/ADAPTIVE#CANARY#5#",
            "_/ADAPTIVE#CANARY#x#1",
            "_/ADAPTIVE#CANARY#5#+1",
            "ns1/ADAPTIVE#CANARY#5#1",
            "ns1/BUCKET#e#r#0",
            "ADAPTIVE#CANARY#1#1",
        ] {
            assert_eq!(parse_canary(other), None, "{other}");
        }
        assert!(is_legacy_canary("ns1/ADAPTIVE#CANARY#3"));
        assert!(!is_legacy_canary(&pk) && !is_legacy_canary("ns1/ADAPTIVE#CANARY#"));
    }

    #[test]
    fn the_clients_caps_are_bytes_and_refuse_one_past() {
        let bucket = |ns: &str, e: &str, r: &str| BucketKey {
            namespace: ns.into(),
            entity: e.into(),
            resource: r.into(),
            shard: 0,
        };
        let (n, e, r) = ("n".repeat(128), "e".repeat(256), "r".repeat(64));
        assert_eq!(bucket(&n, &e, &r).check_client_caps(), Ok(()));
        for (ns, entity, resource) in [
            ("n".repeat(129), e.clone(), r.clone()),
            (n.clone(), "e".repeat(257), r.clone()),
            (n.clone(), "é".repeat(129), r.clone()),
            (n.clone(), e.clone(), "r".repeat(65)),
            (n.clone(), e.clone(), "€".repeat(22)),
        ] {
            let refused = bucket(&ns, &entity, &resource).check_client_caps();
            let Err(KeyError::BeyondClientCaps(start)) = &refused else {
                panic!("{refused:?}");
            };
            assert!(start.len() <= 64, "the error holds the key's start only");
        }
        assert_eq!(crate::shown::clip("aé", 2), "a", "cut on a character");
    }

    /// Within the client's caps, whatever the bytes, every key the server
    /// side derives from a bucket fits DynamoDB's limits: the bucket's
    /// clones, audit events, snapshots, and adaptive usage, demand and
    /// allocations.
    #[test]
    fn every_key_derived_from_a_bucket_within_the_caps_fits_dynamodbs_limits() {
        use crate::value::{Attr, Item};
        let key = BucketKey {
            namespace: "n".repeat(128),
            entity: "e".repeat(256),
            resource: "r".repeat(64),
            shard: u32::MAX,
        };
        check_item_keys(&key.new_item()).unwrap();
        let audit = crate::audit::AuditEvent {
            namespace: &key.namespace,
            entity_id: &key.entity,
            event_id: "01ARZ3NDEKTSV4RRFFQ69G5FAV",
            at_ms: 0,
            action: crate::audit::Action::LimitOverdrawn,
            principal: None,
            resource: Some(&key.resource),
            details: Item::new(),
            retention_days: 30,
        };
        check_item_keys(&audit.item()).unwrap();
        let window_key = "2026-11-29T16:00:00Z";
        let (ns, e, r) = (&key.namespace, &key.entity, &key.resource);
        let snapshot = Item::from([
            ("PK".to_owned(), Attr::s(pk_entity(ns, e))),
            (
                "SK".to_owned(),
                Attr::s(sk_usage(r, Window::Monthly, window_key)),
            ),
            ("GSI2PK".to_owned(), Attr::s(pk_resource(ns, r))),
            ("GSI2SK".to_owned(), Attr::s(gsi2_sk_usage(window_key, e))),
            ("GSI4PK".to_owned(), Attr::s(ns)),
            ("GSI4SK".to_owned(), Attr::s(pk_entity(ns, e))),
        ]);
        check_item_keys(&snapshot).unwrap();
        let limit = "l".repeat(64);
        for sk in [
            sk_adaptive_usage(i64::MAX, r),
            sk_adaptive_demand(i64::MAX, r, e),
            sk_adaptive_allocation(r, &limit, e),
            sk_adaptive_target(r, &limit),
        ] {
            check_table_key(&pk_adaptive(ns), &sk).unwrap();
        }
    }

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
