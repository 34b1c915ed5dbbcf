//! The entity and audit API beside the real 0.17.0 client
//! (`tests/harness/entity_client.py`), on one moto table per test and on
//! DynamoDB Local: what either client creates, moves and records, the
//! other reads the same; a move by either sends the other's next acquire
//! to the new parent; bad input is refused, naming what was wrong, with
//! nothing written.

use crate::common;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use zae_client::{AdminError, AuditEvent, Entity, NewEntity, Options, RateLimiter};
use zae_table::Attr;
use zae_test_support::harness::run_json;

const PRINCIPAL: &str = "tester";

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// A table with resource `gpt` limited to 100 rpm (entities made by the tests).
fn table(name: &str) -> String {
    let rpm = json!({"name": "rpm", "capacity": 100, "refill_amount": 100, "refill_period_s": 60});
    let setup = json!([{"op": "limits", "level": "resource", "resource": "gpt", "limits": [rpm]}]);
    common::prepared(name, setup, now_ms())
}

async fn open(table: &str) -> RateLimiter {
    let options = Options {
        config_cache_ttl: Duration::ZERO,
        ..Options::default()
    };
    RateLimiter::open_with(&common::sdk().await, "default", table, options)
        .await
        .expect("open the namespace")
}

fn py(command: &str, table: &str, args: &[&str]) -> Value {
    let mut all = vec![command, "--table", table];
    all.extend_from_slice(args);
    run_json("entity_client.py", &all)
}

fn entity_json(e: &Entity) -> Value {
    json!({"id": e.id, "name": e.name, "parent_id": e.parent_id, "cascade": e.cascade,
           "metadata": e.metadata, "created_at": e.created_at,
           "parent_generation": e.parent_generation, "incarnation": e.incarnation})
}

/// A stored value as the Python client reads it back.
fn python_value(a: &Attr) -> Value {
    match a {
        Attr::S(s) => json!(s),
        Attr::N(n) => n
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| json!(n.parse::<f64>().unwrap_or_default())),
        Attr::Bool(b) => json!(b),
        Attr::M(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), python_value(v)))
                .collect(),
        ),
        Attr::L(l) => Value::Array(l.iter().map(python_value).collect()),
        Attr::Ss(_) | Attr::Null => Value::Null,
    }
}

fn audit_json(e: &AuditEvent) -> Value {
    let details: serde_json::Map<String, Value> = e
        .details
        .iter()
        .map(|(k, v)| (k.clone(), python_value(v)))
        .collect();
    json!({"event_id": e.event_id, "timestamp": e.timestamp, "action": e.action,
           "entity_id": e.entity_id, "principal": e.principal, "resource": e.resource,
           "details": details})
}

async fn get(limiter: &RateLimiter, id: &str) -> Value {
    match limiter.get_entity(id).await.expect("get_entity") {
        Some(e) => entity_json(&e),
        None => Value::Null,
    }
}

async fn create(limiter: &RateLimiter, id: &str, parent: Option<&str>, cascade: bool) {
    limiter
        .create_entity(NewEntity {
            id: id.into(),
            parent_id: parent.map(str::to_owned),
            cascade,
            metadata: BTreeMap::from([("tier".to_owned(), "gold".to_owned())]),
            principal: Some(PRINCIPAL.into()),
            ..NewEntity::default()
        })
        .await
        .expect("create_entity");
}

fn py_create(table: &str, id: &str, parent: &str) -> Value {
    let args = [
        "--entity",
        id,
        "--parent",
        parent,
        "--cascade",
        "--meta",
        "tier=gold",
        "--principal",
        PRINCIPAL,
    ];
    py("create", table, &args)
}

/// Every item of the table whose `PK` ends with `suffix`, as DynamoDB JSON.
fn items_ending(table: &str, suffix: &str) -> Vec<Value> {
    let all = run_json("limits_client.py", &["items", "--table", table])["items"].clone();
    all.as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["PK"]["S"].as_str().is_some_and(|pk| pk.ends_with(suffix)))
        .cloned()
        .collect()
}

/// An item with `id` written as `{e}` and the values that differ by
/// nature (times, random tokens, event ids) replaced by their type.
fn layout(item: &Value, id: &str) -> Value {
    let by_nature = [
        "created_at",
        "pgen",
        "pinc",
        "event_id",
        "timestamp",
        "ttl",
        "SK",
    ];
    let mut out = serde_json::Map::new();
    for (name, typed) in item.as_object().into_iter().flatten() {
        let value = if by_nature.contains(&name.as_str()) {
            json!(typed.as_object().and_then(|o| o.keys().next()).cloned())
        } else {
            serde_json::from_str(&typed.to_string().replace(id, "{e}")).unwrap_or_default()
        };
        out.insert(name.clone(), value);
    }
    Value::Object(out)
}

#[tokio::test]
async fn an_entity_created_by_either_client_reads_the_same_in_both() {
    let table = table("entity-read");
    let rust = open(&table).await;
    create(&rust, "org", None, false).await;
    create(&rust, "key-rs", Some("org"), true).await;
    let made = py_create(&table, "key-py", "org");
    assert_eq!(
        made,
        get(&rust, "key-py").await,
        "Rust reads Python's entity"
    );
    for id in ["org", "key-rs", "key-py", "nobody"] {
        assert_eq!(
            get(&rust, id).await,
            py("get", &table, &["--entity", id]),
            "{id}"
        );
    }
    // The items themselves: the same attributes, types and keys.
    let [meta_rs, meta_py] = ["key-rs", "key-py"].map(|id| {
        let items = items_ending(&table, &format!("ENTITY#{id}"));
        assert_eq!(items.len(), 1, "{id}: one META, no bucket yet");
        layout(&items[0], id)
    });
    assert_eq!(meta_rs, meta_py);
    let [audit_rs, audit_py] = ["key-rs", "key-py"].map(|id| {
        let items = items_ending(&table, &format!("AUDIT#{id}"));
        assert_eq!(items.len(), 1, "{id}: one entity_created event");
        layout(&items[0], id)
    });
    assert_eq!(audit_rs, audit_py);
}

/// `rpm` tokens (milli) of `entity`'s shard-0 bucket of `gpt`, as the
/// Python client reads it; `None` without one.
fn tokens(table: &str, entity: &str) -> Option<i64> {
    py("bucket", table, &["--entity", entity, "--resource", "gpt"])["rpm"].as_i64()
}

fn py_acquire(table: &str, entity: &str) {
    let answer = py(
        "acquire",
        table,
        &[
            "--entity",
            entity,
            "--resource",
            "gpt",
            "--consume",
            "rpm=1",
        ],
    );
    assert_eq!(answer["outcome"], "admitted", "{answer}");
}

async fn rs_acquire(limiter: &RateLimiter, entity: &str) {
    let lease = limiter
        .acquire(entity, "gpt", &[("rpm", 1)])
        .await
        .expect("admitted");
    lease.commit().await.expect("commit");
}

#[tokio::test]
async fn a_move_by_rust_sends_the_python_clients_next_acquire_to_the_new_parent() {
    let table = table("entity-move-rs");
    let rust = open(&table).await;
    for org in ["org-a", "org-b"] {
        create(&rust, org, None, false).await;
    }
    create(&rust, "key", Some("org-a"), true).await;
    py_acquire(&table, "key");
    assert_eq!(
        (tokens(&table, "org-a"), tokens(&table, "org-b")),
        (Some(99_000), None)
    );
    let stamped = rust
        .set_parent("key", Some("org-b"), Some(PRINCIPAL))
        .await
        .expect("set_parent");
    assert_eq!(stamped, 1, "key's one bucket restamped");
    py_acquire(&table, "key");
    assert_eq!(
        tokens(&table, "org-b"),
        Some(99_000),
        "the new parent is debited"
    );
    assert!(
        tokens(&table, "org-a").is_some_and(|t| t >= 99_000),
        "the old one is not"
    );
    let moved = py("get", &table, &["--entity", "key"]);
    assert_eq!(moved["parent_id"], "org-b");
    assert_eq!(moved, get(&rust, "key").await);
}

#[tokio::test]
async fn a_move_by_python_sends_a_rust_limiter_that_knew_the_old_parent_to_the_new_one() {
    let table = table("entity-move-py");
    let rust = open(&table).await;
    for org in ["org-a", "org-b"] {
        create(&rust, org, None, false).await;
    }
    create(&rust, "key", Some("org-a"), true).await;
    // This process learns that key cascades to org-a.
    rs_acquire(&rust, "key").await;
    rs_acquire(&rust, "key").await;
    let before = tokens(&table, "org-a").expect("org-a's bucket");
    let moved = py(
        "move",
        &table,
        &[
            "--entity",
            "key",
            "--parent",
            "org-b",
            "--principal",
            PRINCIPAL,
        ],
    );
    assert_eq!(moved, json!({"stamped": 1}));
    rs_acquire(&rust, "key").await;
    assert_eq!(
        tokens(&table, "org-b"),
        Some(99_000),
        "the new parent is debited"
    );
    let after = tokens(&table, "org-a").expect("org-a's bucket");
    assert!(
        after >= before,
        "the old parent is not debited ({before} then {after})"
    );
}

#[tokio::test]
async fn audit_events_of_both_clients_read_the_same_in_both_page_by_page() {
    let table = table("entity-audit");
    let rust = open(&table).await;
    for org in ["org-a", "org-b"] {
        create(&rust, org, None, false).await;
    }
    py_create(&table, "key", "org-a");
    rust.set_parent("key", Some("org-b"), Some(PRINCIPAL))
        .await
        .expect("move");
    py(
        "move",
        &table,
        &["--entity", "key", "--principal", PRINCIPAL],
    );
    rust.set_parent("key", Some("org-a"), None)
        .await
        .expect("move back");
    // Four events, most recent first, two a page.
    let mut start: Option<String> = None;
    let mut pages = 0;
    loop {
        let events = rust
            .get_audit_events("key", 2, start.as_deref())
            .await
            .expect("get_audit_events");
        let mine: Vec<Value> = events.iter().map(audit_json).collect();
        let mut args = vec!["--entity", "key", "--limit", "2"];
        if let Some(id) = &start {
            args.extend(["--start-event-id", id]);
        }
        assert_eq!(
            Value::from(mine),
            py("audit", &table, &args),
            "page {pages}"
        );
        let Some(last) = events.last() else { break };
        start = Some(last.event_id.clone());
        pages += 1;
    }
    assert_eq!(pages, 2, "four events in pages of two");
    let all = rust.get_audit_events("key", 10, None).await.expect("all");
    let actions: Vec<&str> = all.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(
        actions,
        [
            "entity_parent_changed",
            "entity_parent_changed",
            "entity_parent_changed",
            "entity_created"
        ]
    );
    let details = audit_json(&all[0])["details"].clone();
    assert_eq!(details["old_parent_id"], Value::Null);
    assert_eq!(details["parent_id"], "org-a");
    assert_eq!(details["buckets_stamped"], 0);
    assert_eq!(audit_json(&all[0])["principal"], Value::Null);
}

fn invalid(result: Result<impl std::fmt::Debug, AdminError>, what: &str, says: &str) {
    match result {
        Err(AdminError::Validation { what: w, why }) => {
            assert_eq!(w, what);
            assert!(why.contains(says), "{what}: {why}");
        }
        other => panic!("{what}: expected a refusal naming it, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_ids_a_self_parent_a_cycle_and_bad_page_keys_are_refused_naming_them() {
    let table = table("entity-bad");
    let rust = open(&table).await;
    create(&rust, "a", None, false).await;
    create(&rust, "b", Some("a"), false).await;
    let bad = NewEntity {
        id: "x#y".into(),
        ..NewEntity::default()
    };
    invalid(rust.create_entity(bad).await, "entity_id", "'#'");
    invalid(
        rust.set_parent("a", Some("a"), None).await,
        "parent_id",
        "its own parent",
    );
    invalid(
        rust.set_parent("a", Some("b"), None).await,
        "parent_id",
        "cycle",
    );
    let python = py("move", &table, &["--entity", "a", "--parent", "b"]);
    assert_eq!(
        python["error"], "ValidationError",
        "Python refuses the cycle too: {python}"
    );
    assert!(matches!(
        rust.set_parent("a", Some("nobody"), None).await,
        Err(AdminError::EntityNotFound(id)) if id == "nobody"
    ));
    assert!(matches!(
        rust.set_parent("nobody", None, None).await,
        Err(AdminError::EntityNotFound(id)) if id == "nobody"
    ));
    let again = NewEntity {
        id: "a".into(),
        ..NewEntity::default()
    };
    assert!(
        matches!(rust.create_entity(again).await, Err(AdminError::EntityExists(id)) if id == "a")
    );
    // Nothing moved: `a` has no parent, at the generation it was made with.
    assert_eq!(get(&rust, "a").await, py("get", &table, &["--entity", "a"]));
    assert_eq!(get(&rust, "a").await["parent_id"], Value::Null);
    let audits = rust.get_audit_events("a", 10, None).await.expect("events");
    assert_eq!(
        audits.len(),
        1,
        "only entity_created: no refused write was audited"
    );
    invalid(
        rust.get_audit_events("a", 10, Some("not-an-id")).await,
        "start_event_id",
        "ULID",
    );
    invalid(
        rust.get_audit_events("a#b", 10, None).await,
        "entity_id",
        "a#b",
    );
    invalid(
        rust.get_audit_events("a", 0, None).await,
        "limit",
        "1 or more",
    );
    invalid(zae_client::PageKey::from_json("[1]"), "next_key", "object");
    invalid(
        zae_client::PageKey::from_json("{\"PK\": {\"N\": \"1\"}}"),
        "next_key",
        "PK",
    );
}

#[tokio::test]
async fn a_move_on_a_stack_whose_lambdas_predate_moves_is_refused() {
    let table = table("entity-gate");
    let rust = open(&table).await;
    create(&rust, "org", None, false).await;
    create(&rust, "key", None, false).await;
    run_json(
        "limits_client.py",
        &["lambda-version", "--table", &table, "--version", "0.16.0"],
    );
    let refused = rust.set_parent("key", Some("org"), None).await;
    assert!(
        matches!(&refused, Err(AdminError::VersionMismatch { lambda, .. }) if lambda == "0.16.0"),
        "{refused:?}"
    );
    assert_eq!(
        get(&rust, "key").await["parent_id"],
        Value::Null,
        "nothing moved"
    );
    // Not compared with the Python client: its `Repository.open` (with
    // `auto_update`, the default) redeploys a stack whose Lambdas are older
    // than itself before any call, so its move never meets this record.
}

// The same on AWS's DynamoDB Local too.
zae_test_support::also_on_dynamodb_local!(
    an_entity_created_by_either_client_reads_the_same_in_both,
    a_move_by_rust_sends_the_python_clients_next_acquire_to_the_new_parent,
    a_move_by_python_sends_a_rust_limiter_that_knew_the_old_parent_to_the_new_one,
    audit_events_of_both_clients_read_the_same_in_both_page_by_page,
    bad_ids_a_self_parent_a_cycle_and_bad_page_keys_are_refused_naming_them,
    a_move_on_a_stack_whose_lambdas_predate_moves_is_refused,
);

/// On the in-memory twin, with a fault moto cannot show injected at the
/// store seam: the restamp of `kid`'s `gpt` bucket is throttled once.
mod twin {
    use crate::memory::{NS, T0, bucket, limit, n, open, set};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use zae_client::{AdminError, ManualClock, NewEntity, RateLimiter};
    use zae_table::level::Level;
    use zae_table::store::{Store, StoreError};
    use zae_table::{Attr, Item, keys};
    use zae_test_support::faults::{Call, Faults, Injected};
    use zae_test_support::memory::MemoryStore;

    struct ThrottledStamp(AtomicBool);

    impl Faults for ThrottledStamp {
        fn before(&self, call: &Call<'_>) -> Option<StoreError> {
            let Call::Update(u) = call else { return None };
            let stamp = u.pk.contains("/BUCKET#kid#gpt#") && u.names.values().any(|v| v == "pinc");
            (stamp && !self.0.swap(true, Ordering::SeqCst)).then(|| StoreError::Retryable {
                operation: "UpdateItem",
                key: u.pk.clone(),
                message: "ThrottlingException".into(),
            })
        }
    }

    async fn entity<S: Store + 'static>(limiter: &RateLimiter<S>, id: &str, parent: Option<&str>) {
        let new = NewEntity {
            id: id.into(),
            parent_id: parent.map(str::to_owned),
            cascade: true,
            ..NewEntity::default()
        };
        limiter.create_entity(new).await.expect("create");
    }

    async fn acquired<S: Store + 'static>(limiter: &RateLimiter<S>, resource: &str) {
        let lease = limiter
            .acquire("kid", resource, &[("rpm", 1)])
            .await
            .expect("admitted");
        lease.commit().await.expect("commit");
    }

    #[tokio::test]
    async fn a_move_whose_restamp_stops_part_way_says_so_and_the_same_call_again_finishes_it() {
        let clock = ManualClock::new(T0);
        let memory = Arc::new(MemoryStore::new());
        memory.register_namespace(NS);
        set(&memory, &Level::System, vec![limit("rpm", 100, false)]);
        memory.insert(Item::from([
            ("PK".to_owned(), Attr::s(keys::pk_registry())),
            ("SK".to_owned(), Attr::s(keys::SK_VERSION)),
            ("lambda_version".to_owned(), Attr::s("0.17.0")),
        ]));
        let store = Injected {
            inner: Arc::clone(&memory),
            faults: ThrottledStamp(AtomicBool::new(false)),
        };
        let limiter = open(store, &clock).await;
        for org in ["org-a", "org-b"] {
            entity(&limiter, org, None).await;
        }
        entity(&limiter, "kid", Some("org-a")).await;
        acquired(&limiter, "gpt").await;
        acquired(&limiter, "embed").await;

        // Events a second apart, so that their ids sort by time.
        clock.set(T0 + 1_000);
        let stopped = limiter.set_parent("kid", Some("org-b"), None).await;
        assert!(
            matches!(
                &stopped,
                Err(AdminError::FanoutIncomplete { stamped: 1, .. })
            ),
            "embed stamped, gpt throttled: {stopped:?}"
        );
        let events = limiter
            .get_audit_events("kid", 10, None)
            .await
            .expect("events");
        assert_eq!(
            events[0].action, "entity_parent_changed",
            "most recent first"
        );
        assert_eq!(events[0].details["buckets_stamped"], Attr::n(1));
        assert_eq!(
            bucket(&memory, "kid")["parent_id"],
            Attr::s("org-a"),
            "gpt kept the old stamp"
        );

        clock.set(T0 + 2_000);
        let finished = limiter.set_parent("kid", Some("org-b"), None).await;
        assert_eq!(finished.expect("the same call again"), 2);
        let gpt = bucket(&memory, "kid");
        assert_eq!(gpt["parent_id"], Attr::s("org-b"));
        let meta = memory
            .item(&keys::pk_entity(NS, "kid"), keys::SK_META)
            .expect("META");
        assert_eq!(
            n(&gpt, "pgen"),
            n(&meta, "pgen"),
            "stamped at the META's generation"
        );
        let events = limiter
            .get_audit_events("kid", 2, None)
            .await
            .expect("events");
        let after = limiter
            .get_audit_events("kid", 10, Some(&events[1].event_id))
            .await
            .expect("the next page");
        assert_eq!((events.len(), after.len()), (2, 1), "three events in all");
        assert_eq!(after[0].action, "entity_created");
    }
}
