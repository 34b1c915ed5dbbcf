//! Generated sequences through both clients (see `differential.rs`):
//! limits hard or soft at the resource or the entity level, a cascading
//! child, acquires of any size, lease adjustments, releases, in-lease
//! consumes and failing bodies, limit changes between steps, with time
//! moving by 0 to 40 s. Three sequences in the test command;
//! `ZAE_FUZZ_CASES` sets more.

use crate::common;

use proptest::prelude::*;
use serde_json::{Value, json};
use zae_test_support::fuzz_cases;
use zae_test_support::harness::{TempDir, unique_table};

const T0: i64 = 1_796_186_400_000;

fn limit(name: &str, capacity: i64, soft: bool) -> Value {
    json!({"name": name, "capacity": capacity, "refill_amount": capacity, "refill_period_s": 60, "soft": soft})
}

fn limits() -> impl Strategy<Value = Value> {
    (1i64..6, 50i64..500, any::<bool>())
        .prop_map(|(rpm, tpm, soft)| json!([limit("rpm", rpm, false), limit("tpm", tpm, soft)]))
}

fn amounts() -> impl Strategy<Value = Value> {
    (0i64..3, 0i64..300).prop_map(|(rpm, tpm)| json!({"rpm": rpm, "tpm": tpm}))
}

fn lease_op() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0i64..200).prop_map(|t| json!({"adjust": {"tpm": t}})),
        (0i64..100).prop_map(|t| json!({"release": {"tpm": t}})),
        amounts().prop_map(|a| json!({"consume": a})),
    ]
}

fn step() -> impl Strategy<Value = (i64, Value)> {
    let acquire = (
        prop::sample::select(vec!["u1", "u2", "kid"]),
        amounts(),
        prop::collection::vec(lease_op(), 0..3),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(entity, consume, lease, fail)| {
            json!({"acquire": {"entity": entity, "resource": "gpt", "consume": consume, "lease": lease, "fail": fail}})
        });
    let change =
        (prop::sample::select(vec!["resource", "entity"]), limits()).prop_map(|(level, limits)| {
            let mut op =
                json!({"op": "limits", "level": level, "resource": "gpt", "limits": limits});
            if level == "entity" {
                op["entity"] = json!("u2");
            }
            json!({"admin": op})
        });
    let kind = prop_oneof![9 => acquire, 1 => change];
    (0i64..40_000, kind)
}

fn spec() -> impl Strategy<Value = Value> {
    (limits(), limits(), any::<bool>(), prop::collection::vec(step(), 4..10)).prop_map(
        |(resource, parent, cascade, steps)| {
            let mut at = T0 + 10_000;
            let steps: Vec<Value> = steps
                .into_iter()
                .map(|(dt, mut s)| {
                    at += dt;
                    s["at_ms"] = json!(at);
                    s
                })
                .collect();
            json!({"stamp_ttl_ms": 60000, "setup_at_ms": T0, "setup": [
                {"op": "limits", "level": "resource", "resource": "gpt", "limits": resource},
                {"op": "entity", "entity": "org", "parent": null, "cascade": false},
                {"op": "entity", "entity": "kid", "parent": "org", "cascade": cascade},
                {"op": "limits", "level": "entity", "entity": "org", "resource": "gpt", "limits": parent}],
              "steps": steps})
        },
    )
}

/// The test tiers replay the saved seeds and three cases of one fixed seed,
/// the same on every run, so that a red run is a change's doing and not the
/// draw's; the long run (`scripts/fuzz.sh`, which sets `ZAE_FUZZ_CASES`)
/// draws new ones. Random draws here failed runs on client differences no
/// change of theirs made (two known, docs/testing.md).
fn rng_seed() -> proptest::test_runner::RngSeed {
    use proptest::test_runner::RngSeed;
    match std::env::var_os("ZAE_FUZZ_CASES") {
        Some(_) => RngSeed::Random,
        None => RngSeed::Fixed(40),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: fuzz_cases(3), max_shrink_iters: 20, rng_seed: rng_seed(), ..ProptestConfig::default() })]

    #[test]
    fn generated_sequences_leave_the_same_buckets_and_answers_as_the_python_client(spec in spec()) {
        let dir = TempDir::new("client-diff");
        let path = dir.file("spec.json");
        std::fs::write(&path, spec.to_string()).expect("write the spec");
        let path = path.to_string_lossy().into_owned();
        let python = common::run_python(&unique_table("py-gen"), &path);
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let rust = runtime.block_on(common::run_rust(&unique_table("rs-gen"), &path, &spec));
        let difference = common::first_difference(&python, &rust);
        prop_assert!(difference.is_none(), "{}\nspec: {}", difference.unwrap_or_default(), spec);
    }
}

// The same generated sequences on AWS's DynamoDB Local too (full tier).
zae_test_support::also_on_dynamodb_local!(
    generated_sequences_leave_the_same_buckets_and_answers_as_the_python_client
);
