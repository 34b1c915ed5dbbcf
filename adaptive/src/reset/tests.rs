//! The reset on the in-memory table: a system `tpm` of 1,000/min with a
//! burst of 10,000, opted in; `r` sized for 100,000/min; its target at 5x.

use super::*;
use zae_table::Attr;
use zae_table::adaptive::stamp;
use zae_test_support::adaptive::{five_times, raised, share_by_demand, table};

/// A bucket at 5x with the record the controller's stamp leaves.
fn stamped(entity: &str, generation: i64) -> zae_table::Item {
    zae_test_support::adaptive::stamped("ns", entity, 10_000_000, 5_000_000, generation)
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
    let store = table("ns", 0);
    five_times(&store, "ns", 4).await;
    share_by_demand(&store, "ns").await;
    let mut heavy = stamped("heavy", 9);
    heavy.insert("b_tpm_ra".into(), Attr::n(7_000_000));
    heavy.insert(stamp::stamped_attr("tpm"), Attr::n(7_000_000));
    store.insert(heavy);
    let allocated = raised("heavy", 7, 9);
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

/// Every other transaction refused once with `TransactionConflict`, as
/// DynamoDB refuses one that meets another writer's in flight on the target
/// item (a repair, the controller's share, a second operator): injected at
/// the store seam, since moto serializes every request. The reset tries
/// again after the store's backoff, and every bucket is back at base. An
/// earlier pass gave up its page at the first conflict, and the reset failed.
#[tokio::test]
async fn a_reset_that_meets_transaction_conflicts_tries_again_and_finishes() {
    use std::sync::atomic::{AtomicUsize, Ordering};
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
