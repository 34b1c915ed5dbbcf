use super::*;
use crate::cli::args::Cli;
use clap::Parser;
use zae_table::store::StoreError;
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
    let memory = crate::apply::tests::seeded();
    crate::apply::tests::bucket(&memory, "u1", "gpt-4");
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
    assert!(crate::registry::initialised(&memory).await.unwrap());
    let reserved = Manifest {
        namespace: "_".into(),
        ..manifest
    };
    let err = on_store(&apply, &memory, &reserved).await.unwrap_err();
    assert_eq!(err.kind, Kind::InvalidInput, "{err:?}");
}
