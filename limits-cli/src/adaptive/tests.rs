//! `reset` and `utilization` on the in-memory table: a system `tpm` of
//! 1,000/min with a burst of 10,000, opted in; `r` sized for 100,000/min.

use super::*;
use zae_table::Attr;
use zae_table::adaptive::Factor;
use zae_table::adaptive::stamp;
use zae_table::adaptive::target::Target;
use zae_table::adaptive::usage;
use zae_table::store::{Returns, Store};
use zae_test_support::adaptive::{bucket, five_times, table};

/// A bucket at 5x with the record the controller's stamp leaves.
fn stamped(entity: &str, generation: i64) -> zae_table::Item {
    let mut b = bucket("ns", entity, 10_000_000, 5_000_000);
    b.insert(stamp::generation_attr("tpm"), Attr::n(generation));
    b.insert(stamp::stamped_attr("tpm"), Attr::n(5_000_000));
    b.insert(stamp::before_attr("tpm"), Attr::n(1_000_000));
    b
}

#[tokio::test]
async fn a_reset_returns_every_stamped_bucket_to_base_with_vu_and_the_target_to_one() {
    let store = table("ns", 0);
    five_times(&store, "ns", 4).await;
    for entity in ["a", "b"] {
        store.insert(stamped(entity, 4));
    }
    // Stamped at 5x, then the system's capacity moved under it (the
    // client leaves existing buckets as they are): back to what it had.
    let mut moved = stamped("c", 4);
    moved.insert("b_tpm_cp".into(), Attr::n(20_000_000));
    store.insert(moved);
    let done = reset(&store, "ns").await.unwrap();
    assert_eq!(done[0].buckets_stamped, 3, "{done:?}");
    assert!(!done[0].superseded && done[0].stamps_lost == 0);
    for entity in ["a", "b", "c"] {
        let b = store
            .item(&format!("ns/BUCKET#{entity}#r#0"), "#STATE")
            .unwrap();
        assert_eq!(b["b_tpm_ra"], Attr::n(1_000_000), "{entity}");
        assert_eq!(b["vu"], Attr::n(0), "{entity}");
    }
    let c = store.item("ns/BUCKET#c#r#0", "#STATE").unwrap();
    assert!(
        !c.contains_key(&stamp::generation_attr("tpm")),
        "the record goes"
    );
    let (pk, sk) = Target::key("ns", "r", "tpm");
    let target = Target::from_item(&store.item(&pk, &sk).unwrap()).unwrap();
    assert_eq!(target.factor, Factor::ONE);
    assert!(target.generation > 4 && target.stamped == target.generation);
    assert_eq!(target.history.last().unwrap().reason, "reset");
}

/// Under `share: demand` a raised entity carries a generation above the
/// target's and an allocation: the reset reaches it and forgets it.
#[tokio::test]
async fn a_reset_returns_a_raised_entity_to_base_and_forgets_its_allocation() {
    use zae_table::adaptive::allocation::Allocated;
    let store = table("ns", 0);
    five_times(&store, "ns", 4).await;
    zae_test_support::adaptive::share_by_demand(&store, "ns").await;
    let mut raised = stamped("heavy", 9);
    raised.insert("b_tpm_ra".into(), Attr::n(7_000_000));
    raised.insert(stamp::stamped_attr("tpm"), Attr::n(7_000_000));
    store.insert(raised);
    let allocated = zae_test_support::adaptive::raised("heavy", 7, 9);
    store
        .update(&allocated.write("ns"), Returns::Nothing)
        .await
        .unwrap();
    reset(&store, "ns").await.unwrap();
    let b = store.item("ns/BUCKET#heavy#r#0", "#STATE").unwrap();
    assert_eq!(b["b_tpm_ra"], Attr::n(1_000_000));
    assert!(
        Allocated::read(&store, "ns", "r", "tpm")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn the_status_shows_the_last_complete_minute_the_current_apart_and_the_stamped_amounts() {
    let store = table("ns", 3);
    five_times(&store, "ns", 0).await;
    store.insert(stamped("e1", 0));
    let now = 1_796_032_805_000;
    let minute = usage::minute_of(now) - 60_000;
    for (m, tokens) in [(minute, 20_000_000), (minute + 60_000, 90_000_000)] {
        let used = [("tpm".to_owned(), tokens)].into();
        store
            .update(&usage::add("ns", "r", m, &used), Returns::Nothing)
            .await
            .unwrap();
    }
    let status = status(&store, "ns", None, now).await.unwrap();
    let t = &status.targets[0];
    assert_eq!(t.minutes, vec![(minute, 20_000.0)]);
    let current = t.current.as_ref().unwrap();
    assert_eq!((current.tokens, current.partial), (90_000.0, true));
    assert_eq!(
        t.utilization,
        Some(0.2),
        "the minute in progress is no utilization"
    );
    assert_eq!((t.factor, t.target_utilization), (5.0, 1.0));
    assert_eq!((t.levels[0].base, t.levels[0].effective), (1_000, 5_000));
    let stamped = t.stamped.as_ref().unwrap();
    // e0 and e2 at base, e1 at 5x.
    assert_eq!(
        (stamped.buckets, stamped.min, stamped.median, stamped.max),
        (3, 1_000.0, 1_000.0, 5_000.0)
    );
    let text = render_status(&status, now);
    for expected in [
        "utilization 20% (last complete minute)",
        "in progress: 90000, partial",
        "base 1000 x 5.00 = 5000",
        "stamped on 3 bucket(s): min 1000, median 1000, max 5000",
    ] {
        assert!(text.contains(expected), "{expected:?} in\n{text}");
    }
}

/// Every other transaction refused once with `TransactionConflict`, as
/// DynamoDB refuses one that meets another writer's in flight on the target
/// item (a repair, the controller's share, a second operator): injected at
/// the store seam, since moto serializes every request. The reset tries
/// again after the store's backoff, and every bucket is back at base. An
/// earlier pass gave up its page at the first conflict, and the reset failed.
#[tokio::test]
async fn a_reset_that_meets_transaction_conflicts_tries_again_and_finishes() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use zae_table::store::StoreError;
    use zae_test_support::faults::{Call, Faults, Injected};
    #[derive(Default)]
    struct EveryOther(AtomicUsize);
    impl Faults for EveryOther {
        fn before(&self, call: &Call<'_>) -> Option<StoreError> {
            let Call::Transact(writes) = call else {
                return None;
            };
            (self.0.fetch_add(1, Ordering::Relaxed).is_multiple_of(2)).then(|| {
                StoreError::Retryable {
                    operation: "TransactWriteItems",
                    key: writes[0].key_text(),
                    message: "TransactionCanceledException: [TransactionConflict]".into(),
                }
            })
        }
    }
    let store = Injected {
        inner: table("ns", 0),
        faults: EveryOther::default(),
    };
    five_times(&store.inner, "ns", 4).await;
    let entities: Vec<String> = (0..40).map(|i| format!("e{i:02}")).collect();
    for entity in &entities {
        store.inner.insert(stamped(entity, 4));
    }
    let done = reset(&store, "ns").await.unwrap();
    assert_eq!(done[0].buckets_stamped, 40, "{done:?}");
    assert_eq!(done[0].stamps_lost, 0, "{done:?}");
    for entity in &entities {
        let b = store
            .inner
            .item(&format!("ns/BUCKET#{entity}#r#0"), "#STATE");
        assert_eq!(b.unwrap()["b_tpm_ra"], Attr::n(1_000_000), "{entity}");
    }
}
