//! The apply pipeline on the in-memory twin of the table, which evaluates
//! the expressions, conditions and transactions the provisioner sends: fast
//! tests of each phase's effect, no moto.

use super::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use zae_table::store::{Counted, Returns, Update};
use zae_table::{Attr, Item, keys};
use zae_test_support::faults::{Call, Faults, Injected};
use zae_test_support::memory::MemoryStore;
use zae_test_support::provisioner::{NS, SlowDiscovery, bucket, bucket_item, item, seeded};

fn manifest(yaml: &str) -> Manifest {
    Manifest::from_yaml(yaml).expect("a valid manifest")
}

const TENANT: &str = "namespace: default
system: {limits: {rpm: {capacity: 1000}}}
resources: {gpt-4: {limits: {rpm: {capacity: 10}, tpm: {capacity: 500, soft: true}}}}
entities: {u1: {resources: {gpt-4: {limits: {rpm: {capacity: 3}}}}}}
";

async fn apply(store: &impl Store, yaml: &str) -> Report {
    let provisioner = Provisioner {
        store,
        namespace: NS,
    };
    provisioner
        .apply(&manifest(yaml), false, &Caller::local("test"))
        .await
        .expect("the apply succeeds")
}

fn audit_events(store: &MemoryStore) -> Vec<Item> {
    store
        .items()
        .into_iter()
        .filter(|i| {
            i["SK"]
                .as_s()
                .is_some_and(|sk| sk.starts_with(keys::SK_AUDIT))
        })
        .collect()
}

#[tokio::test]
async fn a_first_apply_writes_config_registries_audit_events_and_state() {
    let store = seeded();
    let report = apply(&store, TENANT).await;
    assert_eq!(
        (report.created, report.updated, report.deleted),
        (Some(3), Some(0), Some(0))
    );
    assert_eq!(report.errors, Some(vec![]));
    let system = store.item(&keys::pk_system(NS), keys::SK_CONFIG).unwrap();
    assert_eq!(system["l_rpm_cp"], Attr::n(1000));
    let entity = store
        .item(&keys::pk_entity(NS, "u1"), "#CONFIG#gpt-4")
        .unwrap();
    assert_eq!(entity["GSI3PK"], Attr::s("ns1/ENTITY_CONFIG#gpt-4"));
    let resources = store
        .item(&keys::pk_system(NS), keys::SK_RESOURCES)
        .unwrap();
    assert_eq!(
        resources["resources"],
        Attr::Ss(["gpt-4".to_owned()].into())
    );
    let counts = store
        .item(&keys::pk_system(NS), keys::SK_ENTITY_CONFIG_RESOURCES)
        .unwrap();
    assert_eq!(counts["gpt-4"], Attr::n(1));
    assert_eq!(audit_events(&store).len(), 3);
    let state = store
        .item(&keys::pk_system(NS), keys::SK_PROVISIONER)
        .unwrap();
    assert_eq!(state["managed_resources"], Attr::L(vec![Attr::s("gpt-4")]));
    assert_eq!(report.pending, 0);
}

#[tokio::test]
async fn an_unchanged_reapply_makes_reads_only() {
    let store = seeded();
    apply(&store, TENANT).await;
    let counted = Counted::new(store.clone());
    let report = apply(&counted, TENANT).await;
    assert_eq!(report.unchanged, 3);
    assert!(report.changes.is_empty());
    let calls = counted.counts();
    for write in ["PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"] {
        assert!(!calls.contains_key(write), "{write} in {calls:?}");
    }
}

#[tokio::test]
async fn changes_reach_buckets_that_already_exist() {
    let store = seeded();
    bucket(&store, "u1", "gpt-4");
    bucket(&store, "u2", "gpt-4");
    apply(&store, TENANT).await;
    let u1 = bucket_item(&store, "u1", "gpt-4");
    assert_eq!(u1["b_rpm_cp"], Attr::n(3000), "the entity level's sync");
    assert!(!u1.contains_key("ttl"), "entity-configured buckets persist");
    let u2 = bucket_item(&store, "u2", "gpt-4");
    assert!(
        matches!(u2.get("b_tpm_soft"), Some(Attr::N(_))),
        "the resource's soft restamp: {u2:?}"
    );
    apply(
        &store,
        &TENANT.replace("gpt-4: {limits", "gpt-4: {disabled: true, limits"),
    )
    .await;
    assert_eq!(
        bucket_item(&store, "u2", "gpt-4")["disabled"],
        Attr::Bool(true)
    );
}

#[tokio::test]
async fn removing_a_level_deletes_and_uncounts_it_with_an_audit_event() {
    let store = seeded();
    apply(&store, TENANT).await;
    let report = apply(&store, "namespace: default\n").await;
    assert_eq!(report.deleted, Some(3));
    assert_eq!(
        store.item(&keys::pk_entity(NS, "u1"), "#CONFIG#gpt-4"),
        None
    );
    let counts = store
        .item(&keys::pk_system(NS), keys::SK_ENTITY_CONFIG_RESOURCES)
        .unwrap();
    assert!(!counts.contains_key("gpt-4"), "{counts:?}");
    let deleted = audit_events(&store)
        .into_iter()
        .filter(|e| e["action"] == Attr::s("limits_deleted"))
        .count();
    assert_eq!(deleted, 3);
}

#[tokio::test]
async fn an_apply_out_of_time_leaves_its_fan_outs_pending_for_the_next() {
    let store = seeded();
    bucket(&store, "u2", "gpt-4");
    apply(
        &store,
        "namespace: default\nresources: {gpt-4: {limits: {rpm: {capacity: 9}}}}\n",
    )
    .await;
    let next = manifest(
        "namespace: default\nresources: {gpt-4: {disabled: true, limits: {rpm: {capacity: 9}}}}\n\
         entities: {u1: {resources: {gpt-4: {limits: {rpm: {capacity: 3}}}}}}\n",
    );
    let provisioner = Provisioner {
        store: &store,
        namespace: NS,
    };
    let out_of_time = Caller {
        stop_at: Some(Instant::now()),
        ..Caller::local("test")
    };
    let stopped = provisioner.apply(&next, false, &out_of_time).await;
    assert!(
        matches!(stopped, Err(ApplyError::OutOfTime { done: 1, total: 2 })),
        "{stopped:?}"
    );
    let owed = pending::read(&store, NS).await.unwrap();
    assert!(!owed.is_empty(), "the owed fan-outs were not recorded");
    assert!(!bucket_item(&store, "u2", "gpt-4").contains_key("disabled"));

    let report = provisioner
        .apply(&next, false, &Caller::local("test"))
        .await
        .unwrap();
    assert_eq!((report.errors, report.pending), (Some(vec![]), 0));
    assert!(pending::read(&store, NS).await.unwrap().is_empty());
    assert_eq!(
        bucket_item(&store, "u2", "gpt-4")["disabled"],
        Attr::Bool(true)
    );
}

#[tokio::test]
async fn the_report_counts_pending_items_another_apply_still_holds() {
    let store = seeded();
    apply(&store, TENANT).await;
    // A live share of another apply: not claimable, so still pending after ours.
    let theirs = Holder {
        store: &*store,
        namespace: NS.into(),
        token: "other".into(),
        lease_ms: now_ms() + 600_000,
        full: false,
    };
    let fan_out = FanOut {
        kind: Kind::Soft,
        level: Level::Resource("other".into()),
    };
    theirs.write_ahead(&fan_out).await.unwrap();
    let report = apply(&store, TENANT).await;
    assert_eq!(report.pending, 1);
    assert_eq!(pending::read(&store, NS).await.unwrap().len(), 1);
}

#[tokio::test]
async fn the_version_gate_refuses_before_any_write() {
    let store = seeded();
    let version = Update {
        pk: keys::pk_registry(),
        sk: keys::SK_VERSION.into(),
        expression: "SET lambda_version = :old".into(),
        values: [(":old".to_owned(), Attr::s("0.16.0"))].into(),
        ..Update::default()
    };
    store.update(&version, Returns::Nothing).await.unwrap();
    let before = store.items();
    let provisioner = Provisioner {
        store: &store,
        namespace: NS,
    };
    let refused = provisioner
        .apply(&manifest(TENANT), false, &Caller::local("test"))
        .await;
    assert!(
        matches!(refused, Err(ApplyError::Gate(GateError::Behind { .. }))),
        "{refused:?}"
    );
    assert_eq!(store.items(), before, "nothing written");
}

/// Cancels the first transactions, as a concurrent one would. DynamoDB answers
/// TransactionCanceledException [TransactionConflict]; moto shows no
/// transaction conflicts, so it is injected here.
struct CancelFirst(AtomicUsize);

impl Faults for CancelFirst {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        let Call::Transact(_) = call else {
            return None;
        };
        let left = self.0.load(Ordering::SeqCst);
        (left > 0).then(|| {
            self.0.store(left - 1, Ordering::SeqCst);
            StoreError::Retryable {
                operation: "TransactWriteItems",
                key: "injected".into(),
                message: "TransactionCanceledException [TransactionConflict]".into(),
            }
        })
    }
}

#[tokio::test]
async fn a_registry_transaction_cancelled_by_a_concurrent_one_is_retried() {
    let store = Injected {
        inner: seeded(),
        faults: CancelFirst(AtomicUsize::new(2)),
    };
    let report = apply(&store, TENANT).await;
    assert_eq!(report.errors, Some(vec![]));
    assert_eq!(report.created, Some(3));
    let counts = store
        .inner
        .item(&keys::pk_system(NS), keys::SK_ENTITY_CONFIG_RESOURCES)
        .unwrap();
    assert_eq!(counts["gpt-4"], Attr::n(1));
}

/// A stored limit whose schedule the client cannot decode.
fn undecodable() -> [(&'static str, Attr); 4] {
    [
        ("l_rpm_cp", Attr::n(3)),
        ("l_rpm_ra", Attr::n(3)),
        ("l_rpm_rp", Attr::n(60)),
        ("l_rpm_sched", Attr::s("zz!!garbage")),
    ]
}

/// The fan-outs of namespace `NS` on `store`, with no deadline.
fn fan_outs(store: &MemoryStore) -> FanOuts<'_, MemoryStore> {
    FanOuts {
        store,
        namespace: NS,
        known: None,
        stop_at: None,
        resume: None,
    }
}

#[tokio::test]
async fn a_stored_schedule_the_client_cannot_decode_never_reaches_a_bucket() {
    let store = seeded();
    bucket(&store, "u1", "gpt-4");
    let level = Level::Entity {
        entity: "u1".into(),
        resource: "gpt-4".into(),
    };
    let (pk, sk) = config_key(NS, &level);
    store.insert(item(&pk, &sk, &undecodable()));
    let before = bucket_item(&store, "u1", "gpt-4");
    let err = fan_outs(&store)
        .run(Kind::Sync, &level, &Directive::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("'rpm'"), "{err}");
    assert_eq!(
        bucket_item(&store, "u1", "gpt-4"),
        before,
        "the bucket is left alone"
    );
}

/// As the reference reports it (its #563): with no bucket live, an
/// undecodable stored schedule is still an error of the sync, which stays
/// pending, for the level itself and for a deleted level's fallback.
#[tokio::test]
async fn an_undecodable_stored_schedule_is_reported_with_no_bucket_live() {
    let store = seeded();
    let fan_outs = fan_outs(&store);
    let entity = |e: &str| Level::Entity {
        entity: e.into(),
        resource: "gpt-4".into(),
    };
    let (pk, sk) = config_key(NS, &entity("u1"));
    store.insert(item(&pk, &sk, &undecodable()));
    let err = fan_outs
        .run(Kind::Sync, &entity("u1"), &Directive::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("'rpm'"), "{err}");
    // u2 has no level of its own: it falls back to the resource's, stored undecodable.
    let (pk, sk) = config_key(NS, &Level::Resource("gpt-4".into()));
    store.insert(item(&pk, &sk, &undecodable()));
    let err = fan_outs
        .run(Kind::Sync, &entity("u2"), &Directive::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("resource"), "{err}");
}

#[tokio::test]
async fn of_two_stacks_claiming_one_namespace_at_once_one_writes_nothing() {
    let store = seeded();
    let provisioner = Provisioner {
        store: &*store,
        namespace: NS,
    };
    let claim = |stack: &str| Caller {
        ownership: Ownership::Claim(format!("{stack}|TenantLimits")),
        ..Caller::local(stack)
    };
    // Both read the record while nobody owns the namespace...
    let theirs = provisioner.plan(&manifest(TENANT), false).await.unwrap();
    let ours = provisioner
        .plan(
            &manifest("namespace: default\nresources: {claude: {limits: {rpm: {capacity: 1}}}}\n"),
            false,
        )
        .await
        .unwrap();
    // ...then the other stack's apply lands first.
    provisioner
        .apply_plan(&manifest(TENANT), theirs, &claim("stack/a"))
        .await
        .unwrap();
    let before = store.items();
    let lost = provisioner
        .apply_plan(
            &manifest("namespace: default\nresources: {claude: {limits: {rpm: {capacity: 1}}}}\n"),
            ours,
            &claim("stack/b"),
        )
        .await;
    assert!(matches!(lost, Err(ApplyError::Owned { .. })), "{lost:?}");
    assert_eq!(store.items(), before, "the loser wrote nothing");
}

/// A Delete that read the namespace as its own, while another stack
/// claimed it meanwhile: the release is refused by its condition, and the
/// other stack's claim stays.
#[tokio::test]
async fn a_release_never_drops_a_claim_another_resource_made_since_it_read() {
    let store = seeded();
    let provisioner = Provisioner {
        store: &*store,
        namespace: NS,
    };
    let caller = |stack: &str, ownership: Ownership| Caller {
        ownership,
        ..Caller::local(stack)
    };
    let ours = Ownership::Claim("stack/a|TenantLimits".into());
    provisioner
        .apply(&manifest(TENANT), false, &caller("stack/a", ours))
        .await
        .unwrap();
    // Stack a's Delete reads the record while it owns the namespace...
    let empty = Manifest::empty(NS);
    let release = provisioner.plan(&empty, false).await.unwrap();
    // ...then the claim passes to stack b (an operator's release, b's Create).
    let theirs = Ownership::Claim("stack/b|TenantLimits".into());
    let mut record = store
        .item(&keys::pk_system(NS), keys::SK_PROVISIONER)
        .unwrap();
    record.insert("cfn_owner".into(), Attr::s("stack/b|TenantLimits"));
    store.insert(record);
    provisioner
        .apply(&manifest(TENANT), false, &caller("stack/b", theirs))
        .await
        .unwrap();
    let gone = Ownership::Release("stack/a|TenantLimits".into());
    let refused = provisioner
        .apply_plan(&empty, release, &caller("stack/a", gone))
        .await;
    assert!(
        matches!(refused, Err(ApplyError::Owned { .. })),
        "{refused:?}"
    );
    let state = store
        .item(&keys::pk_system(NS), keys::SK_PROVISIONER)
        .unwrap();
    assert_eq!(state["cfn_owner"], Attr::s("stack/b|TenantLimits"));
    let b_level = store.item(&keys::pk_resource(NS, "gpt-4"), keys::SK_CONFIG);
    assert!(b_level.is_some(), "stack b's levels stay: nothing deleted");
}

#[tokio::test]
async fn an_apply_that_dies_midway_leaves_what_it_wrote_managed() {
    let store = seeded();
    apply(
        &store,
        "namespace: default\nresources: {gpt-4: {limits: {rpm: {capacity: 9}}}}\n",
    )
    .await;
    let grown = manifest(
        "namespace: default\nresources: {gpt-4: {limits: {rpm: {capacity: 9}}}, \
         claude: {limits: {rpm: {capacity: 5}}}, zeta: {limits: {rpm: {capacity: 5}}}}\n",
    );
    let provisioner = Provisioner {
        store: &*store,
        namespace: NS,
    };
    let dies = Caller {
        stop_at: Some(Instant::now()),
        ..Caller::local("test")
    };
    let stopped = provisioner.apply(&grown, false, &dies).await;
    assert!(
        matches!(stopped, Err(ApplyError::OutOfTime { done: 1, .. })),
        "{stopped:?}"
    );
    let claude = store.item(&keys::pk_resource(NS, "claude"), keys::SK_CONFIG);
    assert!(
        claude.is_some(),
        "the first new level was written before the stop"
    );
    // The record already names it, so going back to the first manifest removes it.
    apply(
        &store,
        "namespace: default\nresources: {gpt-4: {limits: {rpm: {capacity: 9}}}}\n",
    )
    .await;
    assert_eq!(
        store.item(&keys::pk_resource(NS, "claude"), keys::SK_CONFIG),
        None
    );
    let state = store
        .item(&keys::pk_system(NS), keys::SK_PROVISIONER)
        .unwrap();
    assert_eq!(state["managed_resources"], Attr::L(vec![Attr::s("gpt-4")]));
}

#[tokio::test(start_paused = true)]
async fn a_fan_out_stopped_at_the_deadline_goes_on_from_its_place_until_done() {
    let memory = hard_system_over_buckets(200).await;
    let store = slow(&memory);
    let provisioner = Provisioner {
        store: &store,
        namespace: NS,
    };
    let soft = manifest("namespace: default\nsystem: {limits: {rpm: {capacity: 9, soft: true}}}\n");
    // Sixteen pages (two passes of 200 / 25); a page read past the deadline
    // waits for the next apply, so each apply finishes three.
    let caller = || Caller {
        stop_at: Some(Instant::now() + std::time::Duration::from_secs(35)),
        ..Caller::local("test")
    };
    let stamped = || {
        memory
            .items()
            .iter()
            .filter(|item| item.contains_key("b_rpm_soft"))
            .count()
    };
    let first = provisioner.apply(&soft, false, &caller()).await.unwrap();
    assert_eq!((first.stopped, first.pending), (1, 1));
    assert_eq!(stamped(), 75, "three pages of 25 before the deadline");
    let recorded = pending::read(&memory, NS).await.unwrap();
    assert_eq!(
        recorded[0].cursor.as_ref().map(|c| c.pass),
        Some(1),
        "{recorded:?}"
    );
    // The same manifest again, as CloudFormation's next update or an
    // operator would: each apply goes on from the recorded place.
    let mut applies = 1;
    loop {
        let report = provisioner.apply(&soft, false, &caller()).await.unwrap();
        applies += 1;
        if report.pending == 0 {
            break;
        }
        assert!(applies < 10, "no progress across applies");
    }
    // Pass 2 starts in the third apply, which did not see pass 1's first
    // pages: it visits them again (writes are idempotent), hence six.
    assert_eq!(applies, 6);
    assert_eq!(stamped(), 200);
    assert!(pending::read(&memory, NS).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_sweep_past_its_bound_gives_way_to_discovery_per_level() {
    let store = seeded();
    for i in 0..60 {
        bucket(&store, &format!("u{i:02}"), "gpt-4");
    }
    let all = fanout::sweep(&*store, NS, 100).await.unwrap();
    assert_eq!(all.map(|keys| keys.len()), Some(60), "read page by page");
    assert_eq!(
        fanout::sweep(&*store, NS, 30).await.unwrap(),
        None,
        "more buckets than a sweep may hold"
    );
}

/// A hard system `rpm` over `count` buckets, one entity each.
async fn hard_system_over_buckets(count: usize) -> Arc<MemoryStore> {
    let memory = seeded();
    apply(
        &memory,
        "namespace: default\nsystem: {limits: {rpm: {capacity: 9}}}\n",
    )
    .await;
    for i in 0..count {
        bucket(&memory, &format!("u{i:03}"), "gpt-4");
    }
    memory
}

/// A provisioner on `memory` whose discovery pages take 10 s each.
fn slow(memory: &Arc<MemoryStore>) -> Injected<Arc<MemoryStore>, SlowDiscovery> {
    Injected {
        inner: memory.clone(),
        faults: SlowDiscovery,
    }
}

fn with_deadline(seconds: u64) -> Caller {
    Caller {
        stop_at: Some(Instant::now() + std::time::Duration::from_secs(seconds)),
        ..Caller::local("test")
    }
}

#[tokio::test(start_paused = true)]
async fn a_place_recorded_under_another_config_is_not_gone_on_from() {
    let memory = hard_system_over_buckets(200).await;
    let store = slow(&memory);
    let provisioner = Provisioner {
        store: &store,
        namespace: NS,
    };
    let soft = manifest("namespace: default\nsystem: {limits: {rpm: {capacity: 9, soft: true}}}\n");
    // Time for pass 1 and two pages of pass 2: a place in pass 2, which a
    // run going on from it trusts for everything before it.
    let first = provisioner
        .apply(&soft, false, &with_deadline(105))
        .await
        .unwrap();
    assert_eq!(first.stopped, 1);
    let recorded = pending::read(&memory, NS).await.unwrap();
    assert_eq!(recorded[0].cursor.as_ref().map(|c| c.pass), Some(2));
    // Another writer changes the level meanwhile (the client's own setter).
    let (pk, sk) = config_key(NS, &Level::System);
    let mut config = memory.item(&pk, &sk).unwrap();
    config.insert("config_version".into(), Attr::n(99));
    memory.insert(config);
    // A follow-up must not skip the buckets before the old place.
    let counted = Counted::new(slow(&memory));
    let follow = Provisioner {
        store: &counted,
        namespace: NS,
    };
    let report = follow
        .continue_pending(&Caller::local("test"))
        .await
        .unwrap();
    assert_eq!(report.pending, 0);
    let updates = counted.counts()["UpdateItem"];
    assert!(
        updates >= 200,
        "{updates} updates: it went on from the old place"
    );
}

#[tokio::test(start_paused = true)]
async fn a_follow_up_strips_the_limits_the_stopped_apply_removed() {
    let memory = seeded();
    for i in 0..200 {
        bucket(&memory, "u1", &format!("r{i:03}"));
    }
    let both = "namespace: default\nentities: {u1: {resources: {_default_: {limits: \
                {rpm: {capacity: 9}, burst: {capacity: 50}}}}}}\n";
    apply(&memory, both).await;
    let with_burst = |memory: &MemoryStore| {
        memory
            .items()
            .iter()
            .filter(|item| item.contains_key("b_burst_cp"))
            .count()
    };
    assert_eq!(with_burst(&memory), 200, "the sync stamped every bucket");
    let store = slow(&memory);
    let provisioner = Provisioner {
        store: &store,
        namespace: NS,
    };
    let rpm_only = manifest(
        "namespace: default\nentities: {u1: {resources: {_default_: {limits: {rpm: {capacity: 9}}}}}}\n",
    );
    let stopped = provisioner
        .apply(&rpm_only, false, &with_deadline(35))
        .await
        .unwrap();
    assert_eq!(stopped.stopped, 1);
    assert!(with_burst(&memory) > 0, "the apply stopped before the end");
    provisioner
        .continue_pending(&Caller::local("test"))
        .await
        .unwrap();
    assert_eq!(
        with_burst(&memory),
        0,
        "the follow-up knew `burst` was removed"
    );
}

const ADAPTIVE: &str = "namespace: default
system: {limits: {tpm: {capacity: 10000, refill_amount: 1000, adaptive: utilization}}}
resources: {gpt-4: {estimated_capacity: {tpm: 100000}, limits: {rpm: {capacity: 10}}}}
";

#[tokio::test]
async fn the_adaptive_declaration_is_written_once_and_deleted_with_the_last_opt_in() {
    let store = seeded();
    let report = apply(&store, ADAPTIVE).await;
    let line = report
        .changes
        .iter()
        .find(|c| c.level == "adaptive")
        .expect("an adaptive line");
    assert_eq!(line.action, "create");
    let target = line.target.clone().unwrap();
    assert!(
        target.contains("gpt-4 tpm ~100000/min") && target.contains("system tpm adaptive"),
        "{target}"
    );
    let item = store
        .item(&keys::pk_adaptive(NS), keys::SK_ADAPTIVE_DECLARATION)
        .expect("declared");
    let declaration = zae_table::adaptive::Declaration::from_item(&item).unwrap();
    assert_eq!(declaration, manifest(ADAPTIVE).declaration());
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("scales on only gpt-4")),
        "{:?}",
        report.notes
    );

    let again = apply(&store, ADAPTIVE).await;
    assert!(
        again.changes.iter().all(|c| c.level != "adaptive"),
        "{:?}",
        again.changes
    );

    let gone = apply(&store, TENANT).await;
    let line = gone.changes.iter().find(|c| c.level == "adaptive").unwrap();
    assert_eq!(line.action, "delete");
    assert!(
        store
            .item(&keys::pk_adaptive(NS), keys::SK_ADAPTIVE_DECLARATION)
            .is_none()
    );
}
