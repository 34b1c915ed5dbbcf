use super::*;
use crate::cli::args::Cli;
use clap::Parser;
use zae_table::provisioner::{CFN_OWNER, CFN_ROLLBACK};
use zae_table::store::StoreError;
use zae_table::{Attr, keys};
use zae_test_support::faults::{Call, Faults, Injected};
use zae_test_support::memory::MemoryStore;

/// Bucket writes refused, as DynamoDB refuses an item it cannot take.
struct BucketsRefused;

impl Faults for BucketsRefused {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        let Call::Update(update) = call else {
            return None;
        };
        update
            .pk
            .contains("/BUCKET#")
            .then(|| StoreError::Rejected {
                operation: "UpdateItem",
                key: update.pk.clone(),
                message: "injected".into(),
            })
    }
}

/// An entity level: its apply syncs the parameters of the entity's bucket.
const MANIFEST: &str = "namespace: default
entities: {u1: {resources: {gpt-4: {limits: {rpm: {capacity: 3}}}}}}
";

fn command(args: &[&str]) -> Command {
    let mut argv = vec!["zae-limits"];
    argv.extend_from_slice(args);
    Cli::parse_from(argv).command
}

#[tokio::test]
async fn an_apply_whose_fan_out_fails_ends_with_errors_and_exit_code_1() {
    let memory = zae_test_support::provisioner::seeded();
    zae_test_support::provisioner::bucket(&memory, "u1", "gpt-4");
    let manifest = Manifest::from_yaml(MANIFEST).unwrap();
    let plan = command(&["plan", "-f", "m.yaml", "-t", "t"]);
    assert_eq!(
        on_store(&plan, &memory, &manifest).await.unwrap(),
        Ended::Changes
    );
    let store = Injected {
        inner: memory,
        faults: BucketsRefused,
    };
    let apply = command(&["apply", "-f", "m.yaml", "-t", "t"]);
    assert_eq!(
        on_store(&apply, &store, &manifest).await.unwrap(),
        Ended::WithErrors
    );
    assert_eq!(error::Kind::ApplyErrors.code(), 1);
}

#[tokio::test]
async fn create_namespace_initialises_an_empty_table_and_refuses_a_reserved_name() {
    let memory = MemoryStore::new();
    let manifest = Manifest::from_yaml(MANIFEST).unwrap();
    let apply = command(&["apply", "-f", "m.yaml", "-t", "t", "--create-namespace"]);
    assert_eq!(
        on_store(&apply, &memory, &manifest).await.unwrap(),
        Ended::Clean
    );
    assert!(zae_provisioner::init::initialised(&memory).await.unwrap());
    let reserved = Manifest {
        namespace: "_".into(),
        ..manifest
    };
    let err = on_store(&apply, &memory, &reserved).await.unwrap_err();
    assert_eq!(err.kind, Kind::InvalidInput, "{err:?}");
}

fn owner_of(store: &MemoryStore) -> Option<Attr> {
    let ns = zae_test_support::provisioner::NS;
    store
        .item(&keys::pk_system(ns), keys::SK_PROVISIONER)
        .and_then(|state| state.get(CFN_OWNER).cloned())
}

/// Puts `owner` in the namespace's `#PROVISIONER` record.
fn owned_by(store: &MemoryStore, owner: &str) {
    let ns = zae_test_support::provisioner::NS;
    let mut record = store
        .item(&keys::pk_system(ns), keys::SK_PROVISIONER)
        .unwrap_or_else(|| {
            zae_test_support::provisioner::item(&keys::pk_system(ns), keys::SK_PROVISIONER, &[])
        });
    record.insert(CFN_OWNER.into(), Attr::s(owner));
    store.insert(record);
}

/// Issue 28, item 5: an owner that no longer exists is released once
/// confirmed; declined, nothing changes; and a claim made between the read
/// and the write stays (the write names the owner it showed).
#[tokio::test]
async fn release_owner_removes_only_the_owner_it_showed_once_confirmed() {
    let ns = zae_test_support::provisioner::NS;
    let memory = zae_test_support::provisioner::seeded();
    let dead = "arn:aws:cloudformation:us-east-1:1:stack/tenant-a/1|Limits";
    owned_by(&memory, dead);
    let declined = release::release(&*memory, ns, |_| Ok(false)).await;
    assert_eq!(declined.unwrap_err().kind, Kind::Refused);
    assert_eq!(owner_of(&memory), Some(Attr::s(dead)));

    let live = "arn:aws:cloudformation:us-east-1:1:stack/tenant-b/2|Limits";
    let raced = release::release(&*memory, ns, |shown| {
        assert_eq!(shown, dead);
        owned_by(&memory, live);
        Ok(true)
    })
    .await;
    assert_eq!(raced.unwrap_err().kind, Kind::Refused);
    assert_eq!(
        owner_of(&memory),
        Some(Attr::s(live)),
        "the new claim stays"
    );

    owned_by(&memory, dead);
    // What the dead owner's rollback could have undone goes with it.
    let mut record = memory
        .item(&keys::pk_system(ns), keys::SK_PROVISIONER)
        .unwrap();
    record.insert(CFN_ROLLBACK.into(), Attr::M(Default::default()));
    memory.insert(record);
    let released = release::release(&*memory, ns, |_| Ok(true)).await;
    assert_eq!(released.unwrap(), Ended::Clean);
    assert_eq!(owner_of(&memory), None);
    let record = memory.item(&keys::pk_system(ns), keys::SK_PROVISIONER);
    assert!(!record.unwrap().contains_key(CFN_ROLLBACK));
    let again = release::release(&*memory, ns, |_| panic!("nothing to confirm")).await;
    assert_eq!(again.unwrap(), Ended::Clean);
}
