//! The Lambda entry end to end on the in-memory table, with a responder
//! that records what CloudFormation would receive: the custom-resource
//! protocol's answers, ownership and failure paths, and both guards, with
//! no moto and no network.

use super::*;
use crate::continuation::Continuer;
use serde_json::Value;
use std::sync::Mutex;
use std::time::Instant;
use zae_table::provisioner::CFN_OWNER;
use zae_table::store::{Condition, Query, Returns, StoreError, TxWrite, Update};
use zae_table::{Attr, Item, keys};
use zae_test_support::faults::{Call, Faults, Injected};
use zae_test_support::memory::MemoryStore;
use zae_test_support::provisioner::{NS, SlowDiscovery, bucket, bucket_item, seeded};

/// Every table name opens the same store.
struct Fixed<S>(S);

impl<S: Store + Clone + 'static> Tables for Fixed<S> {
    type Store = S;
    fn open(&self, _table: &str) -> S {
        self.0.clone()
    }
}

/// What CloudFormation would receive: each PUT body, parsed.
#[derive(Default)]
struct Recorded(Mutex<Vec<Value>>);

impl Responder for Recorded {
    async fn put(&self, _url: &str, body: String) -> Result<(), String> {
        let parsed = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        self.0.lock().unwrap().push(parsed);
        Ok(())
    }
}

/// The follow-ups asked for: each payload, or the refusal to start one.
#[derive(Default)]
struct Followed {
    refuse: bool,
    asked: Mutex<Vec<(String, Value)>>,
}

impl Continuer for Followed {
    async fn invoke_async(&self, function: &str, payload: Value) -> Result<(), String> {
        self.asked.lock().unwrap().push((function.into(), payload));
        match self.refuse {
            true => Err("AccessDeniedException".into()),
            false => Ok(()),
        }
    }
}

type Memory = Arc<MemoryStore>;
type TestDeps<S> = Deps<Fixed<S>, Recorded, Followed>;

fn deps<S>(store: S) -> Arc<TestDeps<S>> {
    Arc::new(Deps {
        tables: Fixed(store),
        default_table: Some("rate-limits".into()),
        responder: Recorded::default(),
        continuer: Followed::default(),
    })
}

const STACK: &str = "arn:aws:cloudformation:us-east-1:123456789012:stack/tenant/1";

fn request(kind: &str, id: &str, physical: Option<&str>, stack: &str, rpm: &str) -> Value {
    let mut event = json!({
        "RequestType": kind,
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:p",
        "ResponseURL": "http://127.0.0.1:9/response",
        "StackId": stack,
        "RequestId": id,
        "LogicalResourceId": "TenantLimits",
        "ResourceType": "Custom::ZaeLimiterLimits",
        "ResourceProperties": {"ServiceToken": "x", "Namespace": "default",
            "Resources": {"gpt-4": {"Limits": {"rpm": {"Capacity": rpm}}}}}
    });
    if let Some(physical) = physical {
        event["PhysicalResourceId"] = json!(physical);
    }
    if kind == "Update" {
        event["OldResourceProperties"] = event["ResourceProperties"].clone();
    }
    event
}

/// Sends one request and returns the answer CloudFormation received.
async fn send<T: Tables>(
    deps: &Arc<Deps<T, Recorded, Followed>>,
    request: Value,
    deadline_ms: u64,
) -> Value {
    handle(deps.clone(), request, deadline_ms, "arn:fn".into())
        .await
        .expect("the CloudFormation path always answers");
    deps.responder.0.lock().unwrap().pop().expect("an answer")
}

const MINUTE: u64 = 60_000;
const PHYSICAL: &str = "rate-limits/ns1/limits-provisioner";
/// What a Create that failed after its claim answers.
const FAILED_ID: &str = "rate-limits/ns1/limits-provisioner/failed";

/// The answer has `status`, and its `Reason` says `reason`.
fn answered(answer: &Value, status: &str, reason: &str) {
    assert_eq!(answer["Status"], status, "{answer}");
    let said = answer["Reason"].as_str().unwrap_or_default();
    assert!(said.contains(reason), "{answer}");
}

fn resource_config(store: &MemoryStore) -> Option<Item> {
    store.item(&keys::pk_resource(NS, "gpt-4"), keys::SK_CONFIG)
}

#[tokio::test]
async fn a_create_answers_success_and_records_its_owner() {
    let store = seeded();
    let deps = deps(store.clone());
    let answer = send(&deps, request("Create", "r1", None, STACK, "10"), MINUTE).await;
    assert_eq!(answer["Status"], "SUCCESS", "{answer}");
    assert_eq!(answer["PhysicalResourceId"], PHYSICAL);
    assert_eq!(answer["RequestId"], "r1");
    assert_eq!(resource_config(&store).unwrap()["l_rpm_cp"], Attr::n(10));
    let state = store
        .item(&keys::pk_system(NS), keys::SK_PROVISIONER)
        .unwrap();
    assert_eq!(state[CFN_OWNER], Attr::s(format!("{STACK}|TenantLimits")));

    // CloudFormation retries a request it heard nothing back from.
    let before = store.items();
    let again = send(&deps, request("Create", "r1", None, STACK, "10"), MINUTE).await;
    assert_eq!(
        (
            again["Status"].as_str(),
            again["Data"]["unchanged"].as_u64()
        ),
        (Some("SUCCESS"), Some(1))
    );
    assert_eq!(store.items(), before, "a retried Create writes nothing");
}

#[tokio::test]
async fn another_stack_is_refused_and_its_delete_wipes_nothing() {
    let store = seeded();
    let deps = deps(store.clone());
    send(&deps, request("Create", "r1", None, STACK, "10"), MINUTE).await;
    let before = store.items();
    let intruder = "arn:aws:cloudformation:us-east-1:123456789012:stack/other/2";
    let refused = send(&deps, request("Create", "r2", None, intruder, "99"), MINUTE).await;
    assert_eq!(refused["Status"], "FAILED");
    let reason = refused["Reason"].as_str().unwrap();
    assert!(
        reason.contains("managed by another custom resource"),
        "{reason}"
    );
    assert_eq!(refused["PhysicalResourceId"], "failed-create/r2");
    let stray = send(
        &deps,
        request("Delete", "r3", Some(PHYSICAL), intruder, "99"),
        MINUTE,
    )
    .await;
    answered(&stray, "SUCCESS", "nothing deleted");
    assert_eq!(store.items(), before);

    let deleted = send(
        &deps,
        request("Delete", "r4", Some(PHYSICAL), STACK, "10"),
        MINUTE,
    )
    .await;
    assert_eq!(
        (
            deleted["Status"].as_str(),
            deleted["Data"]["deleted"].as_u64()
        ),
        (Some("SUCCESS"), Some(1))
    );
    assert_eq!(resource_config(&store), None);
}

#[tokio::test]
async fn a_deleted_stack_releases_its_namespace_to_the_next() {
    let store = seeded();
    let deps = deps(store.clone());
    send(&deps, request("Create", "r1", None, STACK, "10"), MINUTE).await;
    let gone = send(
        &deps,
        request("Delete", "r2", Some(PHYSICAL), STACK, "10"),
        MINUTE,
    )
    .await;
    assert_eq!(gone["Status"], "SUCCESS");
    let state = store
        .item(&keys::pk_system(NS), keys::SK_PROVISIONER)
        .unwrap();
    assert!(!state.contains_key(CFN_OWNER), "{state:?}");
    let next = "arn:aws:cloudformation:us-east-1:123456789012:stack/next/3";
    let taken = send(&deps, request("Create", "r3", None, next, "20"), MINUTE).await;
    assert_eq!(taken["Status"], "SUCCESS", "{taken}");
    assert_eq!(resource_config(&store).unwrap()["l_rpm_cp"], Attr::n(20));
}

/// Another stack's Create, landing in the table the instant before the
/// Delete's first write: its claim on the `#PROVISIONER` record and its
/// `gpt-4` config (capacity 99). Moto cannot interleave two requests at
/// that point, so the store seam does.
#[derive(Clone)]
struct ClaimedMeanwhile {
    store: Memory,
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl Faults for ClaimedMeanwhile {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        let write = !matches!(call, Call::Get { .. } | Call::Query(_));
        if write && !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let other = "arn:aws:cloudformation:us-east-1:123456789012:stack/other/2|TenantLimits";
            let mut record = self
                .store
                .item(&keys::pk_system(NS), keys::SK_PROVISIONER)
                .expect("the record");
            record.insert(CFN_OWNER.into(), Attr::s(other));
            self.store.insert(record);
            let mut config = resource_config(&self.store).expect("gpt-4's config");
            config.insert("l_rpm_cp".into(), Attr::n(99));
            self.store.insert(config);
        }
        None
    }
}

/// A Delete of a namespace nobody owns (a CLI-managed one, or a stack's
/// from before owners were recorded) claims it in a conditional write before
/// it deletes anything: another stack that claimed it after the Delete read
/// the record keeps its levels, and the Delete answers SUCCESS and deletes
/// nothing. Before, it checked the owner only when it read the record and
/// deleted the other stack's `gpt-4`.
#[tokio::test]
async fn a_delete_never_deletes_what_another_stack_claimed_while_it_ran() {
    let store = seeded();
    let provisioner = zae_provisioner::apply::Provisioner {
        store: &*store,
        namespace: NS,
    };
    let cli = "namespace: default\nresources: {gpt-4: {limits: {rpm: {capacity: 10}}}}\n";
    let cli = zae_provisioner::manifest::Manifest::from_yaml(cli).unwrap();
    provisioner
        .apply(&cli, false, &Caller::local("cli"))
        .await
        .unwrap();
    assert_eq!(owner_of(&store, NS), None, "nobody owns it");
    let deps = deps(Injected {
        inner: store.clone(),
        faults: ClaimedMeanwhile {
            store: store.clone(),
            done: Arc::default(),
        },
    });
    let delete = request("Delete", "r1", Some(PHYSICAL), STACK, "10");
    let answer = send(&deps, delete, MINUTE).await;
    answered(&answer, "SUCCESS", "nothing deleted");
    let other = "arn:aws:cloudformation:us-east-1:123456789012:stack/other/2|TenantLimits";
    assert_eq!(owner_of(&store, NS), Some(Attr::s(other)));
    let config = resource_config(&store).map(|c| c["l_rpm_cp"].clone());
    assert_eq!(config, Some(Attr::n(99)), "the other stack's level stays");
}

#[tokio::test]
async fn a_bad_manifest_fails_at_its_path_and_its_rollback_is_a_no_op() {
    let store = seeded();
    let deps = deps(store.clone());
    let before = store.items();
    let failed = send(&deps, request("Create", "r1", None, STACK, "lots"), MINUTE).await;
    assert_eq!(failed["Status"], "FAILED");
    let reason = failed["Reason"].as_str().unwrap();
    assert!(
        reason.contains("Resources.gpt-4.Limits.rpm.Capacity"),
        "{reason}"
    );
    assert_eq!(failed["PhysicalResourceId"], "failed-create/r1");
    let rollback = send(
        &deps,
        request("Delete", "r2", Some("failed-create/r1"), STACK, "lots"),
        MINUTE,
    )
    .await;
    assert_eq!(rollback["Status"], "SUCCESS");
    assert_eq!(store.items(), before, "nothing written, nothing wiped");
}

#[tokio::test]
async fn an_update_reaches_existing_buckets_before_success_is_answered() {
    let store = seeded();
    bucket(&store, "u1", "gpt-4");
    let deps = deps(store.clone());
    send(&deps, request("Create", "r1", None, STACK, "10"), MINUTE).await;
    let mut update = request("Update", "r2", Some(PHYSICAL), STACK, "10");
    update["ResourceProperties"]["Resources"]["gpt-4"]["Disabled"] = json!("true");
    let answer = send(&deps, update, MINUTE).await;
    assert_eq!(answer["Status"], "SUCCESS", "{answer}");
    assert_eq!(
        bucket_item(&store, "u1", "gpt-4")["disabled"],
        Attr::Bool(true)
    );
}

/// A table whose every call hangs, panics, or finds no table.
#[derive(Clone, Copy)]
enum Broken {
    Hangs,
    Panics,
    Missing,
}

impl Broken {
    async fn fail<T>(self) -> Result<T, StoreError> {
        match self {
            Broken::Hangs => std::future::pending().await,
            Broken::Panics => panic!("the store broke"),
            Broken::Missing => Err(StoreError::TableMissing {
                operation: "GetItem",
                key: "k".into(),
                message: "ResourceNotFoundException: injected".into(),
            }),
        }
    }
}

impl Store for Broken {
    async fn get(&self, _: &str, _: &str, _: bool) -> Result<Option<Item>, StoreError> {
        self.fail().await
    }
    async fn put(&self, _: &Item, _: Option<&Condition>) -> Result<Option<Item>, StoreError> {
        self.fail().await
    }
    async fn update(&self, _: &Update, _: Returns) -> Result<Option<Item>, StoreError> {
        self.fail().await
    }
    async fn delete(
        &self,
        _: &str,
        _: &str,
        _: Option<&Condition>,
    ) -> Result<Option<Item>, StoreError> {
        self.fail().await
    }
    async fn query(&self, _: &Query) -> Result<Vec<Item>, StoreError> {
        self.fail().await
    }
    async fn transact(&self, _: &[TxWrite]) -> Result<(), StoreError> {
        self.fail().await
    }
}

#[tokio::test]
async fn a_hung_table_and_a_panic_are_answered_failed_in_time() {
    // 400 ms left: the guard abandons the work 100 ms before the deadline.
    let started = Instant::now();
    let hung = send(
        &deps(Broken::Hangs),
        request("Create", "r1", None, STACK, "10"),
        400,
    )
    .await;
    answered(&hung, "FAILED", "before the Lambda timeout");
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    let panicked = send(
        &deps(Broken::Panics),
        request("Create", "r2", None, STACK, "10"),
        MINUTE,
    )
    .await;
    answered(&panicked, "FAILED", "the store broke");
}

#[tokio::test]
async fn the_direct_invoke_plans_and_applies_like_the_python_cli_expects() {
    let store = seeded();
    let deps: Arc<TestDeps<Memory>> = deps(store.clone());
    let payload = |action: &str| -> Value {
        json!({"action": action, "table_name": "t", "namespace_id": NS,
            "principal": "arn:aws:iam::1:user/someone-else",
            "manifest": {"namespace": "default", "resources": {"gpt-4": {"limits": {"rpm": {"capacity": 5}}}}}})
    };
    let plan = handle(deps.clone(), payload("plan"), MINUTE, "arn:fn".into())
        .await
        .unwrap();
    assert_eq!(
        (
            plan["status"].as_str(),
            plan["changes"].as_array().map(Vec::len)
        ),
        (Some("planned"), Some(1))
    );
    assert_eq!(resource_config(&store), None, "a plan writes nothing");
    let applied = handle(deps.clone(), payload("apply"), MINUTE, "arn:fn".into())
        .await
        .unwrap();
    assert_eq!(
        (applied["status"].as_str(), applied["created"].as_u64()),
        (Some("applied"), Some(1))
    );
    let principals: Vec<Attr> = store
        .items()
        .into_iter()
        .filter(|item| keys::pk_of(item).is_some_and(|pk| pk.contains(keys::AUDIT_PREFIX)))
        .filter_map(|item| item.get("principal").cloned())
        .collect();
    assert_eq!(
        principals,
        vec![Attr::S("arn:fn".into())],
        "the audit records the function, never the payload's claim"
    );
    assert!(
        deps.responder.0.lock().unwrap().is_empty(),
        "the invoke path answers no stack"
    );
    let bad = json!({"action": "apply", "table_name": "t",
        "manifest": {"namespace": "default", "resources": {"gpt-4": {"limits": {"rpm": {}}}}}});
    let err = handle(deps, bad, MINUTE, "arn:fn".into())
        .await
        .unwrap_err();
    assert!(
        err.message
            .contains("resources.gpt-4.limits.rpm.capacity: is required"),
        "{err}"
    );
    let diagnostic = lambda_runtime::Diagnostic::from(err);
    assert_eq!(
        diagnostic.error_type, "InvalidManifest",
        "a stable errorType"
    );
}

#[tokio::test]
async fn a_panic_and_a_hang_both_come_back_as_answers() {
    let panicked = guarded(Duration::from_secs(5), async { panic!("boom") as u8 }).await;
    assert_eq!(panicked, Err(Stopped::Panicked("boom".into())));
    let hung = guarded(Duration::from_millis(20), std::future::pending::<u8>()).await;
    assert_eq!(hung, Err(Stopped::Deadline));
    assert_eq!(guarded(Duration::from_secs(5), async { 7u8 }).await, Ok(7));
}

#[test]
fn the_reserve_leaves_room_to_answer() {
    assert_eq!(reserve(Duration::from_secs(300)), Duration::from_secs(30));
    assert_eq!(reserve(Duration::from_secs(60)), Duration::from_secs(6));
    assert_eq!(reserve(Duration::from_secs(20)), Duration::from_secs(3));
    // Lambda's default timeout: work gets half of it, not nothing.
    assert_eq!(reserve(Duration::from_secs(3)), Duration::from_millis(750));
}

/// Denies writes of resource config items.
#[derive(Clone, Copy)]
struct DeniesResourceConfig;

impl Faults for DeniesResourceConfig {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        let Call::Put(item) = call else {
            return None;
        };
        let pk = item.get("PK").and_then(Attr::as_s).unwrap_or_default();
        pk.contains("/RESOURCE#").then(|| StoreError::Fatal {
            operation: "PutItem",
            key: pk.to_owned(),
            message: "AccessDeniedException: injected".into(),
        })
    }
}

#[tokio::test]
async fn a_change_whose_config_writes_failed_is_answered_failed() {
    let store = seeded();
    let deps = deps(Injected {
        inner: store.clone(),
        faults: DeniesResourceConfig,
    });
    let answer = send(&deps, request("Create", "r1", None, STACK, "10"), MINUTE).await;
    assert_eq!(answer["Status"], "FAILED", "{answer}");
    let reason = answer["Reason"].as_str().unwrap();
    assert!(
        reason.contains("1 of the request's config writes failed"),
        "{reason}"
    );
    assert!(reason.contains("AccessDeniedException"), "{reason}");
    // Something was written (the state record names this stack): the failed
    // id, so that CloudFormation's rollback Delete undoes it and frees the namespace.
    assert_eq!(answer["PhysicalResourceId"], FAILED_ID);
    assert_eq!(resource_config(&store), None);
    let rollback = send(
        &deps,
        request("Delete", "r2", Some(FAILED_ID), STACK, "10"),
        MINUTE,
    )
    .await;
    assert_eq!(rollback["Status"], "SUCCESS", "{rollback}");
    let state = store
        .item(&keys::pk_system(NS), keys::SK_PROVISIONER)
        .unwrap();
    assert!(!state.contains_key(CFN_OWNER), "{state:?}");
    assert_eq!(state["managed_resources"], Attr::L(vec![]));
}

#[tokio::test]
async fn a_misspelt_section_fails_a_create_or_an_update_that_introduces_it() {
    let store = seeded();
    let deps = deps(store.clone());
    let mut create = request("Create", "r1", None, STACK, "10");
    create["ResourceProperties"]["Resource"] = create["ResourceProperties"]["Resources"].clone();
    let refused = send(&deps, create, MINUTE).await;
    answered(&refused, "FAILED", "unknown property 'Resource'");
    assert_eq!(resource_config(&store), None);

    send(&deps, request("Create", "r2", None, STACK, "10"), MINUTE).await;
    // An Update that drops `Resources` for a misspelt `Resource` would delete every level in it.
    let mut update = request("Update", "r3", Some(PHYSICAL), STACK, "10");
    let section = update["ResourceProperties"]["Resources"].clone();
    if let Some(props) = update["ResourceProperties"].as_object_mut() {
        props.remove("Resources");
        props.insert("Resource".into(), section);
    }
    let refused = send(&deps, update.clone(), MINUTE).await;
    assert_eq!(refused["Status"], "FAILED", "{refused}");
    assert_eq!(
        resource_config(&store).unwrap()["l_rpm_cp"],
        Attr::n(10),
        "nothing deleted"
    );

    // Once the old properties carry it, the key is not refused (a rollback must pass).
    update["OldResourceProperties"] = update["ResourceProperties"].clone();
    let accepted = send(&deps, update, MINUTE).await;
    assert_eq!(accepted["Status"], "SUCCESS", "{accepted}");
}

#[tokio::test]
async fn a_delete_whose_table_is_gone_succeeds_and_a_create_fails() {
    let deleted = send(
        &deps(Broken::Missing),
        request("Delete", "r1", Some(PHYSICAL), STACK, "10"),
        MINUTE,
    )
    .await;
    answered(&deleted, "SUCCESS", "no longer exists");
    let created = send(
        &deps(Broken::Missing),
        request("Create", "r2", None, STACK, "10"),
        MINUTE,
    )
    .await;
    assert_eq!(created["Status"], "FAILED", "{created}");
}

/// A soft `rpm` on resource gpt-4, created by a stack.
fn soft_create() -> Value {
    let mut event = request("Create", "req-soft", None, STACK, "50");
    event["ResourceProperties"]["Resources"]["gpt-4"]["Limits"]["rpm"]["Soft"] = json!("true");
    event
}

/// 200 buckets behind a discovery index that takes 10 s a page (tokio's
/// paused clock): 16 pages in two passes, five per minute-long invocation.
fn large_namespace(refuse: bool) -> (Memory, Arc<TestDeps<Injected<Memory, SlowDiscovery>>>) {
    let memory = seeded();
    for i in 0..200 {
        bucket(&memory, &format!("u{i:03}"), "gpt-4");
    }
    let store = Injected {
        inner: memory.clone(),
        faults: SlowDiscovery,
    };
    let deps = Arc::new(Deps {
        tables: Fixed(store),
        default_table: Some("rate-limits".into()),
        responder: Recorded::default(),
        continuer: Followed {
            refuse,
            ..Followed::default()
        },
    });
    (memory, deps)
}

/// The soft Create sent into [`large_namespace`]: answered SUCCESS, with its `Reason`.
async fn created_in_a_large_namespace(
    refuse: bool,
) -> (
    Memory,
    Arc<TestDeps<Injected<Memory, SlowDiscovery>>>,
    String,
) {
    let (memory, deps) = large_namespace(refuse);
    let created = send(&deps, soft_create(), in_a_minute()).await;
    assert_eq!(created["Status"], "SUCCESS", "{created}");
    let reason = created["Reason"].as_str().unwrap().to_owned();
    (memory, deps, reason)
}

fn soft_stamped(memory: &MemoryStore) -> usize {
    memory
        .items()
        .iter()
        .filter(|item| item.contains_key("b_rpm_soft"))
        .count()
}

fn in_a_minute() -> u64 {
    chrono::Utc::now().timestamp_millis() as u64 + MINUTE
}

#[tokio::test(start_paused = true)]
async fn a_fan_out_too_large_for_one_invocation_goes_on_in_follow_ups() {
    let (memory, deps, reason) = created_in_a_large_namespace(false).await;
    assert!(
        reason.contains("stopped at the deadline")
            && reason.contains("continues in follow-up invocations"),
        "{reason}"
    );
    assert!(
        soft_stamped(&memory) < 200,
        "the first invocation did not finish"
    );
    // Lambda runs each follow-up the function asked for, as it would.
    let mut ran = 0;
    loop {
        // Taken out first: the follow-up locks the list to ask for the next.
        let asked = deps.continuer.asked.lock().unwrap().pop();
        let Some((function, payload)) = asked else {
            break;
        };
        assert_eq!(function, "arn:fn", "the function invokes itself");
        assert_eq!(payload["generation"], ran + 1);
        assert_eq!(payload["namespace_id"], NS);
        handle(deps.clone(), payload, in_a_minute(), "arn:fn".into())
            .await
            .unwrap();
        ran += 1;
        assert!(ran < 10, "no progress across follow-ups");
    }
    assert_eq!(ran, 3, "16 pages: 5 in the Create, 11 in three follow-ups");
    assert_eq!(soft_stamped(&memory), 200);
    let left = zae_provisioner::apply::pending::read(&memory, NS)
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(start_paused = true)]
async fn a_follow_up_that_cannot_start_leaves_the_work_to_the_next_apply_and_says_so() {
    let (memory, _deps, reason) = created_in_a_large_namespace(true).await;
    assert!(
        reason.contains("could not be started (AccessDeniedException)")
            && reason.contains("the next apply goes on from there"),
        "{reason}"
    );
    let left = zae_provisioner::apply::pending::read(&memory, NS)
        .await
        .unwrap();
    assert!(
        left.iter().any(|p| p.cursor.is_some()),
        "the place is recorded: {left:?}"
    );
}

/// The direct invoke of a fan-out too large for one invocation, when the
/// follow-up cannot start: the committed apply is answered as applied, not
/// as a Lambda error, with the refusal in its `errors` (as the protocol
/// reports problems found after commit), and the place recorded.
#[tokio::test(start_paused = true)]
async fn a_direct_invoke_whose_follow_up_cannot_start_reports_it_in_errors() {
    let (memory, deps) = large_namespace(true);
    let payload = json!({"action": "apply", "table_name": "t", "namespace_id": NS,
        "manifest": {"namespace": "default",
            "resources": {"gpt-4": {"limits": {"rpm": {"capacity": 50, "soft": true}}}}}});
    let applied = handle(deps.clone(), payload, in_a_minute(), "arn:fn".into())
        .await
        .unwrap();
    assert_eq!(applied["status"], "applied", "{applied}");
    let errors = applied["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap().contains("could not be started")),
        "{applied}"
    );
    assert_eq!(deps.continuer.asked.lock().unwrap().len(), 1);
    let left = zae_provisioner::apply::pending::read(&memory, NS)
        .await
        .unwrap();
    assert!(left.iter().any(|p| p.cursor.is_some()), "{left:?}");
}

/// How the write after the ownership claim fails.
#[derive(Clone, Copy, Debug)]
enum Dies {
    /// Refused, as a permissions boundary refuses it.
    Denied,
    Panics,
    /// Never answers: the deadline guard abandons the work.
    Hangs,
}

/// The second write after arming fails as `dies` says, once: the first
/// (the ownership claim in the `#PROVISIONER` record) lands.
#[derive(Clone)]
struct AfterTheClaim {
    dies: Dies,
    armed: Arc<std::sync::atomic::AtomicBool>,
    writes: Arc<std::sync::atomic::AtomicUsize>,
    deny_now: Arc<std::sync::atomic::AtomicBool>,
}

impl AfterTheClaim {
    fn new(dies: Dies) -> AfterTheClaim {
        AfterTheClaim {
            dies,
            armed: Arc::new(true.into()),
            writes: Arc::default(),
            deny_now: Arc::default(),
        }
    }
}

impl Faults for AfterTheClaim {
    // Called first for every call: counts the writes.
    fn delay(&self, call: &Call<'_>) -> Option<Duration> {
        use std::sync::atomic::Ordering::SeqCst;
        let write = !matches!(call, Call::Get { .. } | Call::Query(_));
        if !write || !self.armed.load(SeqCst) || self.writes.fetch_add(1, SeqCst) != 1 {
            return None;
        }
        self.armed.store(false, SeqCst);
        match self.dies {
            Dies::Denied => {
                self.deny_now.store(true, SeqCst);
                None
            }
            Dies::Panics => panic!("injected: the write after the claim panicked"),
            Dies::Hangs => Some(Duration::from_secs(3600)),
        }
    }

    fn before(&self, _call: &Call<'_>) -> Option<StoreError> {
        use std::sync::atomic::Ordering::SeqCst;
        self.deny_now
            .swap(false, SeqCst)
            .then(|| StoreError::Fatal {
                operation: "PutItem",
                key: "k".into(),
                message: "AccessDeniedException: injected".into(),
            })
    }
}

/// The first write (the ownership claim) lands; every later one is
/// refused, as a permissions boundary that allows only that item would.
#[derive(Default, Clone)]
struct DeniedAfterTheClaim(Arc<std::sync::atomic::AtomicUsize>);

impl Faults for DeniedAfterTheClaim {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        let write = !matches!(call, Call::Get { .. } | Call::Query(_));
        let n = self
            .0
            .fetch_add(usize::from(write), std::sync::atomic::Ordering::SeqCst);
        (write && n >= 1).then(|| StoreError::Fatal {
            operation: "PutItem",
            key: "k".into(),
            message: "AccessDeniedException: injected".into(),
        })
    }
}

fn owner_of(store: &MemoryStore, namespace: &str) -> Option<Attr> {
    store
        .item(&keys::pk_system(namespace), keys::SK_PROVISIONER)
        .and_then(|state| state.get(CFN_OWNER).cloned())
}

/// Issue 28, item 5: a Create that dies after its claim (refused, panicked,
/// out of time) answers the failed id; its rollback Delete releases the
/// claim, and a new stack then creates the same namespace.
#[tokio::test(start_paused = true)]
async fn a_create_that_dies_after_its_claim_is_rolled_back_and_frees_the_namespace() {
    for dies in [Dies::Denied, Dies::Panics, Dies::Hangs] {
        let store = seeded();
        let faults = AfterTheClaim::new(dies);
        let deps = deps(Injected {
            inner: store.clone(),
            faults,
        });
        let failed = send(
            &deps,
            request("Create", "r1", None, STACK, "10"),
            in_a_minute(),
        )
        .await;
        assert_eq!(failed["Status"], "FAILED", "{dies:?}: {failed}");
        assert_eq!(failed["PhysicalResourceId"], FAILED_ID, "{dies:?}");
        let me = Attr::s(format!("{STACK}|TenantLimits"));
        assert_eq!(owner_of(&store, NS), Some(me), "{dies:?}: the claim landed");

        let rollback = request("Delete", "r2", Some(FAILED_ID), STACK, "10");
        let rolled = send(&deps, rollback, in_a_minute()).await;
        assert_eq!(rolled["Status"], "SUCCESS", "{dies:?}: {rolled}");
        assert_eq!(
            owner_of(&store, NS),
            None,
            "{dies:?}: the claim is released"
        );

        let next = "arn:aws:cloudformation:us-east-1:123456789012:stack/tenant/2";
        let again = send(
            &deps,
            request("Create", "r3", None, next, "20"),
            in_a_minute(),
        )
        .await;
        assert_eq!(again["Status"], "SUCCESS", "{dies:?}: {again}");
        assert_eq!(resource_config(&store).unwrap()["l_rpm_cp"], Attr::n(20));
    }
}

/// Levels the namespace managed before the claim (here the Python CLI's
/// `claude`, applied with no owner) survive the rollback of a Create that
/// died after its claim: the rollback deletes what the Create declared and
/// releases the claim, and nothing else. Before, it wiped every managed
/// level, as the owner's own Delete does.
#[tokio::test(start_paused = true)]
async fn the_rollback_of_a_failed_create_keeps_the_levels_managed_before_its_claim() {
    let store = seeded();
    let provisioner = zae_provisioner::apply::Provisioner {
        store: &*store,
        namespace: NS,
    };
    let cli = "namespace: default\nresources: {claude: {limits: {rpm: {capacity: 7}}}}\n";
    let cli = zae_provisioner::manifest::Manifest::from_yaml(cli).unwrap();
    provisioner
        .apply(&cli, false, &Caller::local("cli"))
        .await
        .unwrap();
    let claude = || store.item(&keys::pk_resource(NS, "claude"), keys::SK_CONFIG);
    assert!(claude().is_some());
    let denied = deps(Injected {
        inner: store.clone(),
        faults: DeniedAfterTheClaim::default(),
    });
    let create = request("Create", "r1", None, STACK, "10");
    let failed = send(&denied, create, in_a_minute()).await;
    assert_eq!(failed["PhysicalResourceId"], FAILED_ID, "{failed}");
    assert!(claude().is_some(), "the Create wrote nothing but its claim");
    let rollback = request("Delete", "r2", Some(FAILED_ID), STACK, "10");
    let rolled = send(&deps(store.clone()), rollback, in_a_minute()).await;
    assert_eq!(rolled["Status"], "SUCCESS", "{rolled}");
    assert_eq!(owner_of(&store, NS), None, "the claim is released");
    assert!(claude().is_some(), "the CLI's level stays: {rolled}");
    assert_eq!(
        resource_config(&store),
        None,
        "what the Create declared is gone"
    );
}

/// The failed id's rollback Delete undoes only this resource's own claim:
/// another stack's Delete of it, and a Delete of it once another resource
/// owns the namespace, wipe nothing.
#[tokio::test]
async fn a_failed_ids_delete_never_releases_another_resources_claim() {
    let store = seeded();
    let deps = deps(store.clone());
    let owner = "arn:aws:cloudformation:us-east-1:123456789012:stack/owner/9";
    let created = send(&deps, request("Create", "r1", None, owner, "10"), MINUTE).await;
    assert_eq!(created["Status"], "SUCCESS", "{created}");
    let before = store.items();
    let stray = send(
        &deps,
        request("Delete", "r2", Some(FAILED_ID), STACK, "10"),
        MINUTE,
    )
    .await;
    answered(&stray, "SUCCESS", "nothing deleted");
    assert_eq!(store.items(), before, "another resource's claim stays");
}

/// An Update from namespace A to B that dies after B's claim answers B's
/// failed id: its rollback Delete (of that id, with B's properties) frees B
/// and leaves A, still this resource's, as it was.
#[tokio::test]
async fn an_update_to_another_namespace_that_dies_after_its_claim_frees_it_on_rollback() {
    let store = seeded();
    let b = zae_provisioner::init::register(&*store, "tenant-b", 1_000)
        .await
        .unwrap()
        .id;
    let faults = AfterTheClaim::new(Dies::Denied);
    faults
        .armed
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let deps = deps(Injected {
        inner: store.clone(),
        faults: faults.clone(),
    });
    send(&deps, request("Create", "r1", None, STACK, "10"), MINUTE).await;
    let a_before = owner_of(&store, NS);
    let mut update = request("Update", "r2", Some(PHYSICAL), STACK, "10");
    update["ResourceProperties"]["Namespace"] = json!("tenant-b");
    faults
        .armed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let failed = send(&deps, update.clone(), MINUTE).await;
    assert_eq!(failed["Status"], "FAILED", "{failed}");
    let failed_b = format!("rate-limits/{b}/limits-provisioner/failed");
    assert_eq!(failed["PhysicalResourceId"], failed_b.as_str());
    let me = Attr::s(format!("{STACK}|TenantLimits"));
    assert_eq!(owner_of(&store, &b), Some(me), "B's claim landed");

    let mut rollback = request("Delete", "r3", Some(&failed_b), STACK, "10");
    rollback["ResourceProperties"] = update["ResourceProperties"].clone();
    let rolled = send(&deps, rollback, MINUTE).await;
    assert_eq!(rolled["Status"], "SUCCESS", "{rolled}");
    assert_eq!(owner_of(&store, &b), None, "B is free again");
    assert_eq!(owner_of(&store, NS), a_before, "A is still this resource's");
    assert_eq!(resource_config(&store).unwrap()["l_rpm_cp"], Attr::n(10));
}

/// Issue 28, item 6: `ServiceTimeout` shorter than the Lambda's time is
/// honoured: a hung table is abandoned and answered before CloudFormation
/// stops waiting (30 s here), not near the Lambda's 15-minute deadline.
#[tokio::test(start_paused = true)]
async fn a_service_timeout_shorter_than_the_lambdas_is_answered_within() {
    let mut create = request("Create", "r1", None, STACK, "10");
    create["ResourceProperties"]["ServiceTimeout"] = json!("30");
    let lambda_deadline = in_a_minute() + 14 * MINUTE;
    let started = tokio::time::Instant::now();
    let answer = send(&deps(Broken::Hangs), create, lambda_deadline).await;
    assert_eq!(answer["Status"], "FAILED", "{answer}");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "answered after {took:?}");
    assert!(
        took >= Duration::from_secs(20),
        "gave up early, after {took:?}"
    );
}

#[test]
fn service_timeout_defaults_to_cloudformations_hour_and_stays_in_its_range() {
    let timeout = |value: Value| {
        let mut create = request("Create", "r1", None, STACK, "10");
        create["ResourceProperties"]["ServiceTimeout"] = value;
        let request = serde_json::from_value::<cloudformation::Request>(create).unwrap();
        Envelope::from_request(request).unwrap().service_timeout()
    };
    assert_eq!(timeout(json!("120")), Duration::from_secs(120));
    assert_eq!(timeout(json!(90)), Duration::from_secs(90));
    assert_eq!(timeout(Value::Null), Duration::from_secs(3600));
    assert_eq!(timeout(json!("soon")), Duration::from_secs(3600));
    assert_eq!(timeout(json!("7200")), Duration::from_secs(3600));
}

/// Issue 28, item 8: a `NamespaceId` the registry does not hold, one with a
/// `/`, and one that would push the physical id past 1 KB are refused
/// before anything is written; a registered id is taken.
#[tokio::test]
async fn a_namespace_id_outside_the_registry_is_refused_before_any_write() {
    let store = seeded();
    let deps = deps(store.clone());
    let before = store.items();
    for (id, says) in [
        ("ns1-typo", "not in the table's registry"),
        ("a/b", "is refused"),
        (&*"n".repeat(1100), "is refused"),
    ] {
        let mut create = request("Create", "r1", None, STACK, "10");
        create["ResourceProperties"]["NamespaceId"] = json!(id);
        let refused = send(&deps, create, MINUTE).await;
        assert_eq!(refused["Status"], "FAILED", "{id}: {refused}");
        let reason = refused["Reason"].as_str().unwrap();
        assert!(reason.contains(says), "{id}: {reason}");
        assert_eq!(refused["PhysicalResourceId"], "failed-create/r1");
        assert_eq!(store.items(), before, "{id}: something was written");
    }
    let b = zae_provisioner::init::register(&*store, "tenant-b", 1_000)
        .await
        .unwrap()
        .id;
    let mut create = request("Create", "r2", None, STACK, "10");
    create["ResourceProperties"]["NamespaceId"] = json!(b);
    let taken = send(&deps, create, MINUTE).await;
    assert_eq!(taken["Status"], "SUCCESS", "{taken}");
    let physical = format!("rate-limits/{b}/limits-provisioner");
    assert_eq!(taken["PhysicalResourceId"], physical.as_str());
}

// ---- Issue 40, items 9 to 12 ----

/// The CLI's namespace of issue 40, item 9: `System`, `gpt-5` at 50,
/// `claude` at 70, and an adaptive declaration.
const CLI_LEVELS: &str = "namespace: default
system: {limits: {tpm: {capacity: 10000, refill_amount: 1000, adaptive: utilization}}}
resources:
  gpt-5: {estimated_capacity: {tpm: 100000}, limits: {rpm: {capacity: 50}}}
  claude: {limits: {rpm: {capacity: 70}}}
";

async fn cli_apply(store: &MemoryStore, yaml: &str) {
    let provisioner = zae_provisioner::apply::Provisioner {
        store,
        namespace: NS,
    };
    let manifest = zae_provisioner::manifest::Manifest::from_yaml(yaml).unwrap();
    provisioner
        .apply(&manifest, false, &Caller::local("cli"))
        .await
        .expect("the CLI's apply");
}

/// A stack's Create of `gpt-5` at 100 (and `gpt-6`, which nobody had),
/// with an adaptive declaration of its own.
fn overlapping_create(id: &str) -> Value {
    let mut create = request("Create", id, None, STACK, "100");
    create["ResourceProperties"]["Resources"] = json!({
        "gpt-5": {"EstimatedCapacity": {"tpm": "200000"}, "Limits": {"rpm": {"Capacity": "100"}}},
        "gpt-6": {"Limits": {"rpm": {"Capacity": "5"}}}
    });
    create["ResourceProperties"]["System"] = json!({"Limits": {"tpm": {
        "Capacity": "10000", "RefillAmount": "1000", "Adaptive": "utilization"}}});
    create
}

fn rpm_of(store: &MemoryStore, resource: &str) -> Option<Attr> {
    store
        .item(&keys::pk_resource(NS, resource), keys::SK_CONFIG)
        .map(|config| config["l_rpm_cp"].clone())
}

fn managed_of(store: &MemoryStore) -> zae_table::provisioner::ManagedSet {
    let record = store.item(&keys::pk_system(NS), keys::SK_PROVISIONER);
    zae_table::provisioner::State::decode(record.as_ref()).managed
}

fn declaration_of(store: &MemoryStore) -> Option<Item> {
    store.item(&keys::pk_adaptive(NS), keys::SK_ADAPTIVE_DECLARATION)
}

/// Issue 40, item 9: a stack's Create that overlaps the CLI's levels and
/// dies after its claim (the next write refused at the store seam) is
/// rolled back to the namespace as the CLI left it: `gpt-5` at 50 (it was
/// deleted), `claude` and `System` still managed (the managed set was
/// emptied, so a CLI apply that dropped `claude` left it at 70), and the
/// CLI's adaptive declaration (it was deleted).
#[tokio::test(start_paused = true)]
async fn the_rollback_of_an_overlapping_create_leaves_the_clis_levels_and_managed_set() {
    let store = seeded();
    cli_apply(&store, CLI_LEVELS).await;
    let managed = managed_of(&store);
    let declaration = declaration_of(&store).expect("the CLI declared");
    let denied = deps(Injected {
        inner: store.clone(),
        faults: DeniedAfterTheClaim::default(),
    });
    let failed = send(&denied, overlapping_create("r1"), in_a_minute()).await;
    assert_eq!(failed["PhysicalResourceId"], FAILED_ID, "{failed}");
    let mut rollback = overlapping_create("r2");
    rollback["RequestType"] = json!("Delete");
    rollback["PhysicalResourceId"] = json!(FAILED_ID);
    let rolled = send(&deps(store.clone()), rollback, in_a_minute()).await;
    assert_eq!(rolled["Status"], "SUCCESS", "{rolled}");
    assert_eq!(owner_of(&store, NS), None, "the claim is released");
    assert_eq!(rpm_of(&store, "gpt-5"), Some(Attr::n(50)), "{rolled}");
    assert_eq!(rpm_of(&store, "claude"), Some(Attr::n(70)));
    assert_eq!(managed_of(&store), managed, "the CLI's managed set");
    assert_eq!(declaration_of(&store), Some(declaration));

    // The CLI still manages what it managed: dropping `claude` deletes it.
    cli_apply(
        &store,
        &CLI_LEVELS.replace("  claude: {limits: {rpm: {capacity: 70}}}\n", ""),
    )
    .await;
    assert_eq!(rpm_of(&store, "claude"), None, "claude left managed");
}

/// The call writes the `#PROVISIONER` record: a put (a CLI apply's), or a
/// transaction that puts it (a stack's claim or release, with its check
/// that the namespace is not being purged).
fn writes_record(call: &Call<'_>) -> bool {
    let record = |item: &Item| item.get("SK") == Some(&Attr::s(keys::SK_PROVISIONER));
    match call {
        Call::Put(item) => record(item),
        Call::Transact(writes) => writes
            .iter()
            .any(|write| matches!(write, TxWrite::Put { item, .. } if record(item))),
        _ => false,
    }
}

/// The `#PROVISIONER` record's first `puts` writes pass, later ones are
/// refused: a Create that dies once its config is written, on the
/// record's last write.
#[derive(Clone)]
struct DeniedAfterRecordPuts {
    puts: usize,
    seen: Arc<std::sync::atomic::AtomicUsize>,
}

impl Faults for DeniedAfterRecordPuts {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        let record = writes_record(call);
        let n = self
            .seen
            .fetch_add(usize::from(record), std::sync::atomic::Ordering::SeqCst);
        (record && n >= self.puts).then(|| StoreError::Fatal {
            operation: "PutItem",
            key: "k".into(),
            message: "AccessDeniedException: injected".into(),
        })
    }
}

/// Issue 40, item 9, the overwrite: a Create that wrote its levels and
/// died on the record's last write is rolled back by deleting only the
/// levels no item held before it (`gpt-6`); the CLI's `gpt-5`, which it
/// overwrote, keeps the Create's value, and `claude`, which it deleted (its
/// manifest is the namespace's whole truth), stays deleted; both stay in
/// the CLI's managed set, so the CLI's next apply puts its own values back
/// (docs/provisioner.md).
#[tokio::test(start_paused = true)]
async fn the_rollback_of_a_create_that_wrote_deletes_only_the_levels_it_created() {
    let store = seeded();
    cli_apply(&store, CLI_LEVELS).await;
    let managed = managed_of(&store);
    let denied = deps(Injected {
        inner: store.clone(),
        faults: DeniedAfterRecordPuts {
            puts: 1,
            seen: Arc::default(),
        },
    });
    let failed = send(&denied, overlapping_create("r1"), in_a_minute()).await;
    assert_eq!(failed["PhysicalResourceId"], FAILED_ID, "{failed}");
    assert_eq!(
        rpm_of(&store, "gpt-6"),
        Some(Attr::n(5)),
        "the Create wrote"
    );
    let mut rollback = overlapping_create("r2");
    rollback["RequestType"] = json!("Delete");
    rollback["PhysicalResourceId"] = json!(FAILED_ID);
    let rolled = send(&deps(store.clone()), rollback, in_a_minute()).await;
    assert_eq!(rolled["Status"], "SUCCESS", "{rolled}");
    assert_eq!(rpm_of(&store, "gpt-6"), None, "what it created is gone");
    assert_eq!(
        rpm_of(&store, "gpt-5"),
        Some(Attr::n(100)),
        "overwritten, left"
    );
    assert_eq!(
        rpm_of(&store, "claude"),
        None,
        "deleted by the Create, left"
    );
    assert_eq!(managed_of(&store), managed, "the CLI's managed set");
    assert!(
        declaration_of(&store).is_some(),
        "the CLI's declaration stays"
    );
    cli_apply(&store, CLI_LEVELS).await;
    assert_eq!(
        rpm_of(&store, "gpt-5"),
        Some(Attr::n(50)),
        "the CLI's again"
    );
    assert_eq!(
        rpm_of(&store, "claude"),
        Some(Attr::n(70)),
        "the CLI's again"
    );
}

/// Changes the `#PROVISIONER` record's owner the instant before the
/// apply's first write to it (after the apply read it): moto cannot
/// interleave there, so the store seam does.
#[derive(Clone)]
struct OwnerMovedMeanwhile {
    store: Memory,
    owner: Option<&'static str>,
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl Faults for OwnerMovedMeanwhile {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        let record = writes_record(call);
        if record && !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let mut state = self
                .store
                .item(&keys::pk_system(NS), keys::SK_PROVISIONER)
                .expect("the record");
            match self.owner {
                Some(owner) => state.insert(CFN_OWNER.into(), Attr::s(owner)),
                None => state.remove(CFN_OWNER),
            };
            self.store.insert(state);
        }
        None
    }
}

/// Issue 40, item 10: a CLI apply writes the owner record only where the
/// owner is still the one it read. A stack's release during the apply
/// stays released (it was put back: the namespace locked to a deleted
/// stack), and a stack's claim during it stays claimed (it was dropped).
/// An apply that adds a level meets the change at its first record write,
/// before any config; one that only changes values, at its last.
#[tokio::test]
async fn a_cli_apply_never_undoes_a_release_or_drops_a_claim_made_while_it_ran() {
    let other = "arn:aws:cloudformation:us-east-1:123456789012:stack/other/2|TenantLimits";
    let mine = format!("{STACK}|TenantLimits");
    let adds = format!("{CLI_LEVELS}  gpt-7: {{limits: {{rpm: {{capacity: 1}}}}}}\n");
    let values = CLI_LEVELS.replace("capacity: 70", "capacity: 71");
    for (read, meanwhile) in [(Some(mine.as_str()), None), (None, Some(other))] {
        for (yaml, says, claude) in [
            (&adds, "nothing was written", 70),
            (&values, "they landed", 71),
        ] {
            let store = seeded();
            cli_apply(&store, CLI_LEVELS).await;
            if let Some(owner) = read {
                let mut state = store
                    .item(&keys::pk_system(NS), keys::SK_PROVISIONER)
                    .unwrap();
                state.insert(CFN_OWNER.into(), Attr::s(owner));
                store.insert(state);
            }
            let moved = Injected {
                inner: store.clone(),
                faults: OwnerMovedMeanwhile {
                    store: store.clone(),
                    owner: meanwhile,
                    done: Arc::default(),
                },
            };
            let provisioner = zae_provisioner::apply::Provisioner {
                store: &moved,
                namespace: NS,
            };
            let manifest = zae_provisioner::manifest::Manifest::from_yaml(yaml).unwrap();
            let result = provisioner
                .apply(&manifest, false, &Caller::local("cli"))
                .await;
            let err = result.expect_err("the owner moved under the apply");
            let err = err.to_string();
            assert!(
                err.contains("owner of namespace") && err.contains(says),
                "{err}"
            );
            assert_eq!(owner_of(&store, NS), meanwhile.map(Attr::s), "{read:?}");
            assert_eq!(rpm_of(&store, "claude"), Some(Attr::n(claude)), "{says}");
            assert_eq!(rpm_of(&store, "gpt-7"), None, "{says}");
        }
    }
}

/// Issue 40, item 11: a stack's Delete naming the `NamespaceId` of a
/// namespace purged since (its registry entries gone) or being purged (the
/// client's `status = purging` on its id entry, its items still there)
/// writes nothing under that id: before, it wrote a claim and a record into
/// the dead partition.
#[tokio::test]
async fn a_delete_of_a_purged_namespace_writes_nothing_there() {
    for gone in [true, false] {
        let store = seeded();
        let b = zae_provisioner::init::register(&*store, "tenant-b", 1_000)
            .await
            .unwrap()
            .id;
        let deps = deps(store.clone());
        let mut create = request("Create", "r1", None, STACK, "10");
        create["ResourceProperties"]["NamespaceId"] = json!(b);
        let created = send(&deps, create.clone(), MINUTE).await;
        assert_eq!(created["Status"], "SUCCESS", "{created}");
        match gone {
            true => purged(&store, &b),
            false => {
                let sk = keys::sk_namespace_id(&b);
                let mut entry = store.item(&keys::pk_registry(), &sk).expect("the id entry");
                entry.insert("status".into(), Attr::s("purging"));
                store.insert(entry);
            }
        }
        let before = store.items();
        let mut delete = create;
        delete["RequestType"] = json!("Delete");
        delete["RequestId"] = json!("r2");
        delete["PhysicalResourceId"] = json!(format!("rate-limits/{b}/limits-provisioner"));
        let answer = send(&deps, delete, MINUTE).await;
        answered(&answer, "SUCCESS", "no longer");
        assert_eq!(store.items(), before, "written under {b} (gone: {gone})");
    }
}

/// The purge, done: every item of namespace `b` and its registry entries.
fn purged(store: &MemoryStore, b: &str) {
    let prefix = format!("{b}/");
    for item in store.items() {
        let pk = item["PK"].as_s().unwrap_or_default().to_owned();
        let sk = item["SK"].as_s().unwrap_or_default().to_owned();
        let entry = sk == keys::sk_namespace("tenant-b") || sk == keys::sk_namespace_id(b);
        if pk.starts_with(&prefix) || entry {
            store.remove(&pk, &sk);
        }
    }
}

/// Issue 40, item 12: a Create refused for its `NamespaceId` also names its
/// manifest's problems, so the operator meets them in one deploy.
#[tokio::test]
async fn a_refusal_names_the_namespace_and_the_manifests_problems_at_once() {
    let store = seeded();
    let deps = deps(store.clone());
    let before = store.items();
    let mut create = request("Create", "r1", None, STACK, "10");
    create["ResourceProperties"]["NamespaceId"] = json!("ns1-typo");
    create["ResourceProperties"]["System"] = json!({"Disabled": "true"});
    let refused = send(&deps, create, MINUTE).await;
    answered(&refused, "FAILED", "not in the table's registry");
    answered(
        &refused,
        "FAILED",
        "'disabled' is not supported at the system level",
    );
    assert_eq!(refused["PhysicalResourceId"], "failed-create/r1");
    assert_eq!(store.items(), before);

    // Another stack's namespace and a bad manifest: both named too.
    let other = "arn:aws:cloudformation:us-east-1:123456789012:stack/other/2";
    let taken = send(&deps, request("Create", "r2", None, other, "10"), MINUTE).await;
    assert_eq!(taken["Status"], "SUCCESS", "{taken}");
    let mut create = request("Create", "r3", None, STACK, "lots");
    create["ResourceProperties"]["System"] = json!({"Disabled": "true"});
    let refused = send(&deps, create, MINUTE).await;
    answered(&refused, "FAILED", "is managed by another custom resource");
    answered(
        &refused,
        "FAILED",
        "'disabled' is not supported at the system level",
    );
    answered(&refused, "FAILED", "Resources.gpt-4.Limits.rpm.Capacity");
}

/// Writes another apply's `#PROVISIONER` record (and the config it wrote
/// with it) the instant before this apply's first write of the record,
/// after this apply read it: moto cannot interleave there, so the store
/// seam does.
#[derive(Clone)]
struct RecordWrittenMeanwhile {
    store: Memory,
    items: Vec<Item>,
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl Faults for RecordWrittenMeanwhile {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        let record = writes_record(call);
        if record && !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            for item in &self.items {
                self.store.insert(item.clone());
            }
        }
        None
    }
}

/// `CLI_LEVELS` with `gpt-7` added.
fn with_gpt7() -> String {
    format!("{CLI_LEVELS}  gpt-7: {{limits: {{rpm: {{capacity: 7}}}}}}\n")
}

/// What a CLI apply of [`with_gpt7`] writes over `CLI_LEVELS`: its record
/// and `gpt-7`'s config item, made on a store of their own.
async fn cli_record_with_gpt7() -> Vec<Item> {
    let other = seeded();
    cli_apply(&other, CLI_LEVELS).await;
    cli_apply(&other, &with_gpt7()).await;
    vec![
        other
            .item(&keys::pk_system(NS), keys::SK_PROVISIONER)
            .expect("the CLI's record"),
        other
            .item(&keys::pk_resource(NS, "gpt-7"), keys::SK_CONFIG)
            .expect("gpt-7"),
    ]
}

fn injected_record(store: &Memory, items: Vec<Item>) -> Injected<Memory, RecordWrittenMeanwhile> {
    Injected {
        inner: store.clone(),
        faults: RecordWrittenMeanwhile {
            store: store.clone(),
            items,
            done: Arc::default(),
        },
    }
}

/// Review of issue 40, item 10: a stack's claim is conditional on the
/// record as it read it, not only on its owner. A CLI apply that records
/// `gpt-7` between the stack's read and its claim made the claim overwrite
/// it: `gpt-7` dropped out of management (left enforced, nobody's) and the
/// claim's `cfn_rollback` saved the stale set. Now the claim loses, reads
/// again and claims over the set the CLI recorded: `gpt-7` is managed, so
/// the stack's manifest (the namespace's whole truth) deletes it, and a
/// rollback would put it back in the CLI's managed set.
#[tokio::test]
async fn a_stacks_claim_never_overwrites_a_managed_set_recorded_after_its_read() {
    let store = seeded();
    cli_apply(&store, CLI_LEVELS).await;
    let deps = deps(injected_record(&store, cli_record_with_gpt7().await));
    let answer = send(&deps, overlapping_create("r1"), MINUTE).await;
    assert_eq!(answer["Status"], "SUCCESS", "{answer}");
    let record = store.item(&keys::pk_system(NS), keys::SK_PROVISIONER);
    let state = zae_table::provisioner::State::decode(record.as_ref());
    let found = state.rollback.expect("the claim's rollback").managed;
    assert!(found.resources.contains(&"gpt-7".to_owned()), "{found:?}");
    assert_eq!(rpm_of(&store, "gpt-7"), None, "managed, so deleted");
}

/// The same race between two CLI applies: the one that read first writes
/// no record over the other's, whose `gpt-7` stays managed and enforced.
/// One that adds a level meets the race at its first record write, before
/// any config (nothing written); one that only changes values, at its last
/// (its writes landed, and it says so).
#[tokio::test]
async fn a_cli_apply_never_overwrites_a_managed_set_recorded_after_its_read() {
    let adds = format!("{CLI_LEVELS}  gpt-8: {{limits: {{rpm: {{capacity: 8}}}}}}\n");
    let values = CLI_LEVELS.replace("capacity: 70", "capacity: 71");
    for (yaml, says, claude) in [
        (
            &adds,
            "while this one ran (it recorded its managed levels); nothing was written",
            70,
        ),
        (&values, "after this one's writes; they landed", 71),
    ] {
        let store = seeded();
        cli_apply(&store, CLI_LEVELS).await;
        let moved = injected_record(&store, cli_record_with_gpt7().await);
        let provisioner = zae_provisioner::apply::Provisioner {
            store: &moved,
            namespace: NS,
        };
        let manifest = zae_provisioner::manifest::Manifest::from_yaml(yaml).unwrap();
        let err = provisioner
            .apply(&manifest, false, &Caller::local("cli"))
            .await
            .expect_err("the record moved under the apply")
            .to_string();
        assert!(
            err.contains("rewritten by another apply") && err.contains(says),
            "{err}"
        );
        assert_eq!(rpm_of(&store, "gpt-8"), None, "{says}");
        assert_eq!(rpm_of(&store, "claude"), Some(Attr::n(claude)), "{says}");
        assert_eq!(rpm_of(&store, "gpt-7"), Some(Attr::n(7)));
        let managed = managed_of(&store);
        assert!(
            managed.resources.contains(&"gpt-7".to_owned()),
            "{managed:?}"
        );
    }
}

/// A record whose managed set takes about 210 KB: 4,500 entity levels
/// the CLI manages (their config items need not exist for the record).
fn large_managed_record() -> Item {
    use zae_table::provisioner::{ManagedSet, State};
    let entities = (0..4_500)
        .map(|i| {
            (
                format!("tenant-entity-with-a-long-name-{i:06}"),
                vec!["gpt-4".to_owned()],
            )
        })
        .collect();
    let state = State {
        managed: ManagedSet {
            entities,
            ..ManagedSet::default()
        },
        ..State::default()
    };
    state.encode(NS, "2026-11-29T18:00:00.000000+00:00", "sha256:cli")
}

/// Review of issue 40, item 9: `cfn_rollback` copies the managed set, so
/// a record of about 210 KB passed DynamoDB's 400 KB limit on the claim's
/// first write and every stack's Create of the namespace failed (the twin
/// refuses such an item, as DynamoDB does). Past a bound the record now
/// goes without its rollback; the claim succeeds and the record fits.
#[tokio::test(start_paused = true)]
async fn a_large_managed_set_never_makes_a_stacks_claim_fail() {
    use zae_table::value::{MAX_ITEM_BYTES, item_size};
    let store = seeded();
    let record = large_managed_record();
    let size = item_size(&record);
    // Over half the limit, so that a copy of the set passes it.
    assert!((MAX_ITEM_BYTES / 2..250 * 1024).contains(&size), "{size}");
    store.insert(record);
    let deps = deps(store.clone());
    let answer = send(&deps, request("Create", "r1", None, STACK, "10"), MINUTE).await;
    assert_eq!(answer["Status"], "SUCCESS", "{answer}");
    assert_eq!(
        owner_of(&store, NS),
        Some(Attr::s(format!("{STACK}|TenantLimits")))
    );
    let record = store.item(&keys::pk_system(NS), keys::SK_PROVISIONER);
    let record = record.expect("the record");
    assert!(item_size(&record) <= MAX_ITEM_BYTES);
    let mut update = request("Update", "r2", Some(PHYSICAL), STACK, "20");
    update["OldResourceProperties"]["Resources"]["gpt-4"]["Limits"]["rpm"]["Capacity"] =
        json!("10");
    let answer = send(&deps, update, in_a_minute()).await;
    assert_eq!(answer["Status"], "SUCCESS", "{answer}");
}

/// The same namespace, a Create that dies after its claim: the claim's
/// record went without its rollback, so the rollback Delete releases the
/// namespace and deletes nothing (docs/provisioner.md), as with a record
/// an earlier build wrote.
#[tokio::test(start_paused = true)]
async fn a_failed_claim_over_a_large_managed_set_is_rolled_back_deleting_nothing() {
    let store = seeded();
    store.insert(large_managed_record());
    let denied = deps(Injected {
        inner: store.clone(),
        faults: DeniedAfterRecordPuts {
            puts: 1,
            seen: Arc::default(),
        },
    });
    let failed = send(
        &denied,
        request("Create", "r1", None, STACK, "10"),
        in_a_minute(),
    )
    .await;
    assert_eq!(failed["PhysicalResourceId"], FAILED_ID, "{failed}");
    assert_eq!(
        rpm_of(&store, "gpt-4"),
        Some(Attr::n(10)),
        "the Create wrote"
    );
    let mut rollback = request("Delete", "r2", Some(FAILED_ID), STACK, "10");
    rollback["PhysicalResourceId"] = json!(FAILED_ID);
    let rolled = send(&deps(store.clone()), rollback, in_a_minute()).await;
    assert_eq!(rolled["Status"], "SUCCESS", "{rolled}");
    assert_eq!(owner_of(&store, NS), None, "released");
    assert_eq!(
        rpm_of(&store, "gpt-4"),
        Some(Attr::n(10)),
        "nothing deleted"
    );
    assert_eq!(managed_of(&store).entities.len(), 4_500, "still managed");
}

/// Marks namespace `id` purging in the registry (the client's purge
/// begins) the instant before the first `#PROVISIONER` write, after the
/// request's registry read: moto cannot interleave there, so the store
/// seam does.
#[derive(Clone)]
struct PurgeBegins {
    store: Memory,
    id: String,
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl Faults for PurgeBegins {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        if writes_record(call) && !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let sk = keys::sk_namespace_id(&self.id);
            let mut entry = self
                .store
                .item(&keys::pk_registry(), &sk)
                .expect("the id entry");
            entry.insert("status".into(), Attr::s("purging"));
            self.store.insert(entry);
        }
        None
    }
}

/// Issue 40, item 11, the race: a purge that begins after a request read
/// the registry gets no claim written into its partition. A stack's claim
/// and a Delete's release are one transaction with a check that the id's
/// registry entry is not `purging`: the Delete answers SUCCESS and the
/// Create FAILED, both having written nothing.
#[tokio::test]
async fn a_purge_begun_after_the_registry_read_gets_no_claim_written() {
    for kind in ["Delete", "Create"] {
        let store = seeded();
        let b = zae_provisioner::init::register(&*store, "tenant-b", 1_000)
            .await
            .unwrap()
            .id;
        let mut create = request("Create", "r1", None, STACK, "10");
        create["ResourceProperties"]["NamespaceId"] = json!(b);
        let mut next = create.clone();
        if kind == "Delete" {
            let created = send(&deps(store.clone()), create, MINUTE).await;
            assert_eq!(created["Status"], "SUCCESS", "{created}");
            next["RequestType"] = json!(kind);
            next["PhysicalResourceId"] = json!(format!("rate-limits/{b}/limits-provisioner"));
        }
        next["RequestId"] = json!("r2");
        let purge = deps(Injected {
            inner: store.clone(),
            faults: PurgeBegins {
                store: store.clone(),
                id: b.clone(),
                done: Arc::default(),
            },
        });
        let mut before = store.items();
        let answer = send(&purge, next, MINUTE).await;
        let status = if kind == "Delete" {
            "SUCCESS"
        } else {
            "FAILED"
        };
        answered(&answer, status, "is being purged");
        for item in &mut before {
            if item["SK"] == Attr::s(keys::sk_namespace_id(&b)) {
                item.insert("status".into(), Attr::s("purging"));
            }
        }
        assert_eq!(store.items(), before, "{kind} wrote under {b}");
    }
}
