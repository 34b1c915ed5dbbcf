use super::*;
use proptest::prelude::*;
use serde_json::{Value, json};

fn fixture_records() -> Vec<String> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/lambda_event_sample.json"
    ))
    .expect("fixture");
    let event: Value = serde_json::from_str(&text).unwrap();
    event["Records"]
        .as_array()
        .unwrap()
        .iter()
        .map(Value::to_string)
        .collect()
}

fn sum(plan: &BatchPlan, entity: &str, window: Window) -> Totals {
    plan.snapshots
        .iter()
        .filter(|u| u.key.entity == entity && u.key.window == window)
        .map(|u| u.totals_after(&BTreeMap::new()).unwrap())
        .fold(Totals::default(), |mut acc, t| {
            acc.events += t.events;
            for (k, v) in t.counters {
                *acc.counters.entry(k).or_default() += v;
            }
            for (k, v) in t.overdrawn {
                *acc.overdrawn.entry(k).or_default() += v;
            }
            acc
        })
}

#[test]
fn the_recorded_client_batch_counts_every_request_including_the_creating_insert() {
    let records = fixture_records();
    let plan = plan_batch(&records, &[Window::Hourly, Window::Daily]);
    assert!(plan.skipped.is_empty(), "{:?}", plan.skipped);
    assert_eq!(plan.bucket_records, 74, "72 MODIFY + 2 INSERT of #STATE");
    assert_eq!(plan.ignored, 26, "audit, config, meta and system items");
    // The stream itself says what key-a consumed: its last tc, since it started at zero.
    let last_tc = |pk: &str, limit: &str| {
        records
            .iter()
            .filter_map(|r| serde_json::from_str::<Value>(r).ok())
            .filter(|r| {
                r["dynamodb"]["Keys"]["PK"]["S"]
                    .as_str()
                    .is_some_and(|p| p.ends_with(pk))
            })
            .filter_map(|r| {
                r["dynamodb"]["NewImage"][format!("b_{limit}_tc")]["N"]
                    .as_str()
                    .map(|n| n.parse::<i128>().unwrap())
            })
            .next_back()
            .unwrap()
    };
    for entity in ["key-a", "proj-1"] {
        let pk = format!("BUCKET#{entity}#gpt-4#0");
        for window in [Window::Hourly, Window::Daily] {
            let totals = sum(&plan, entity, window);
            assert_eq!(
                totals.counters["rpm"],
                last_tc(&pk, "rpm") / 1000,
                "{entity} rpm"
            );
            assert_eq!(
                totals.counters["tpm"],
                last_tc(&pk, "tpm") / 1000,
                "{entity} tpm"
            );
            assert!(
                !totals.counters.contains_key("wcu"),
                "wcu is infrastructure, never usage"
            );
        }
    }
    // One update per (entity, resource, window) item, whatever the record count.
    assert_eq!(plan.snapshots.len(), 4);
}

#[test]
fn attribution_follows_the_record_time_not_the_buckets_refill_time() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/sample_modify_record.pretty.json"
    ))
    .unwrap();
    let mut record: Value = serde_json::from_str(&text).unwrap();
    // rf says 2026-11-29T16:35:31Z; move the write itself into the next hour.
    record["dynamodb"]["ApproximateCreationDateTime"] = json!(1_795_975_200.5);
    let plan = plan_batch(&[record.to_string()], &[Window::Hourly]);
    assert_eq!(plan.snapshots[0].key.window_key, "2026-11-29T18:00:00Z");
}

#[test]
fn a_soft_debit_into_debt_counts_as_overdrawn_and_is_one_transition() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/sample_modify_record.pretty.json"
    ))
    .unwrap();
    let plan = plan_batch(&[text], &[Window::Hourly]);
    let totals = plan.snapshots[0].totals_after(&BTreeMap::new()).unwrap();
    assert_eq!(
        totals.counters,
        BTreeMap::from([("rpm".into(), 1), ("tpm".into(), 100)])
    );
    assert_eq!(totals.overdrawn, BTreeMap::from([("tpm".into(), 1)]));
    assert_eq!(totals.events, 2);
    assert_eq!(plan.transitions.len(), 1);
    let t = &plan.transitions[0];
    assert_eq!(
        (t.kind, t.limit.as_str(), t.balance, t.capacity),
        (TransitionKind::Overdrawn, "tpm", -100, Some(50_000))
    );
}

fn bucket_record(
    seq: u64,
    event: &str,
    old: Option<(i64, i64)>,
    new: (i64, i64),
    soft: bool,
) -> String {
    let image = |(tc, tk): (i64, i64)| {
        let mut m = json!({
            "PK": {"S": "ns/BUCKET#e#r#3"}, "SK": {"S": "#STATE"},
            "b_tpm_tc": {"N": tc.to_string()}, "b_tpm_tk": {"N": tk.to_string()}, "b_tpm_cp": {"N": "5000"}
        });
        if soft {
            m["b_tpm_soft"] = json!({"N": "1"});
        }
        m
    };
    let mut change = json!({
        "ApproximateCreationDateTime": 1_795_970_136.0,
        "Keys": {"PK": {"S": "ns/BUCKET#e#r#3"}, "SK": {"S": "#STATE"}},
        "SequenceNumber": seq.to_string(),
        "NewImage": image(new),
    });
    if let Some(o) = old {
        change["OldImage"] = image(o);
    }
    json!({"eventName": event, "eventID": seq.to_string(), "dynamodb": change}).to_string()
}

#[test]
fn whole_tokens_are_not_lost_to_per_record_truncation() {
    let records: Vec<String> = (0..5)
        .map(|i| {
            bucket_record(
                10 + i,
                "MODIFY",
                Some((i as i64 * 400, 0)),
                ((i as i64 + 1) * 400, 0),
                false,
            )
        })
        .collect();
    let plan = plan_batch(&records, &[Window::Daily]);
    // 2000 milli in five steps of 400: two whole tokens (the reference counts zero).
    assert_eq!(
        plan.snapshots[0]
            .totals_after(&BTreeMap::new())
            .unwrap()
            .counters["tpm"],
        2
    );
}

#[test]
fn recoveries_and_hard_limits() {
    let out_of_debt = bucket_record(1, "MODIFY", Some((10, -5)), (10, 7), true);
    let hard_into_debt = bucket_record(2, "MODIFY", Some((10, 5)), (20, -5), false);
    let stays_in_debt = bucket_record(3, "MODIFY", Some((10, -5)), (20, -15), true);
    let plan = plan_batch(
        &[out_of_debt, hard_into_debt, stays_in_debt],
        &[Window::Hourly],
    );
    assert_eq!(plan.transitions.len(), 1);
    assert_eq!(plan.transitions[0].kind, TransitionKind::Recovered);
    assert_eq!(plan.transitions[0].bucket.shard, 3);
}

/// A record whose old image has a soft `tpm` in debt and whose new image is `new`.
fn leaving_debt_record(new: serde_json::Value) -> String {
    json!({"eventName": "MODIFY", "dynamodb": {
        "ApproximateCreationDateTime": 1_795_970_136.0,
        "Keys": {"PK": {"S": "ns/BUCKET#e#r#0"}, "SK": {"S": "#STATE"}},
        "SequenceNumber": "7",
        "OldImage": {"PK": {"S": "ns/BUCKET#e#r#0"}, "b_tpm_tc": {"N": "9000"},
            "b_tpm_tk": {"N": "-2000"}, "b_tpm_soft": {"N": "1"}, "b_rpm_tk": {"N": "1000"}},
        "NewImage": new}})
    .to_string()
}

#[test]
fn an_overdraw_closes_when_its_limit_turns_hard_or_leaves_the_bucket() {
    let hard = leaving_debt_record(json!({"PK": {"S": "ns/BUCKET#e#r#0"},
        "b_tpm_tc": {"N": "9000"}, "b_tpm_tk": {"N": "-2000"}, "b_rpm_tk": {"N": "1000"}}));
    let removed =
        leaving_debt_record(json!({"PK": {"S": "ns/BUCKET#e#r#0"}, "b_rpm_tk": {"N": "1000"}}));
    for (record, reason) in [(hard, "no_longer_soft"), (removed, "limit_removed")] {
        let plan = plan_batch(&[record], &[Window::Hourly]);
        assert_eq!(plan.transitions.len(), 1, "{reason}");
        let t = &plan.transitions[0];
        assert_eq!(
            (t.kind, t.limit.as_str(), t.balance, t.reason),
            (TransitionKind::Recovered, "tpm", -2, Some(reason))
        );
    }
}

#[test]
fn watermarks_exclude_what_an_item_already_holds() {
    let records: Vec<String> = (0..4)
        .map(|i| {
            bucket_record(
                100 + i,
                "MODIFY",
                Some((i as i64 * 1000, 0)),
                ((i as i64 + 1) * 1000, 0),
                false,
            )
        })
        .collect();
    let plan = plan_batch(&records, &[Window::Hourly]);
    let update = &plan.snapshots[0];
    assert_eq!(update.earliest().as_stream(), "100");
    let mark = |s: &str| BTreeMap::from([(3, Some(SequenceNumber::parse(s).unwrap()))]);
    assert_eq!(
        update.totals_after(&mark("101")).unwrap().counters["tpm"],
        2
    );
    assert!(update.totals_after(&mark("103")).is_none());
}

#[test]
fn malformed_records_are_skipped_with_their_key_and_do_not_stop_the_batch() {
    let good = bucket_record(5, "INSERT", None, (3000, 0), false);
    let bad_number = good.replace("\"3000\"", "\"3e3\"");
    let bad_key = good.replace("ns/BUCKET#e#r#3", "ns/BUCKET#e#r#x");
    let modify_without_old = bucket_record(6, "MODIFY", None, (3000, 0), false);
    let plan = plan_batch(
        &[
            bad_number,
            "[1,2]".to_owned(),
            bad_key,
            modify_without_old,
            good,
        ],
        &[Window::Hourly],
    );
    assert_eq!(plan.skipped.len(), 4);
    assert!(
        plan.skipped[0].reason.to_string().contains("b_tpm_tc"),
        "{}",
        plan.skipped[0].reason
    );
    assert_eq!(
        plan.skipped[0].partition_key.as_deref(),
        Some("ns/BUCKET#e#r#3")
    );
    assert_eq!(plan.snapshots.len(), 1);
    assert_eq!(
        plan.snapshots[0]
            .totals_after(&BTreeMap::new())
            .unwrap()
            .counters["tpm"],
        3
    );
}

fn arb_number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        "-?[0-9]{1,40}",
        "[0-9.eE+-]{0,12}",
        ".{0,8}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(zae_test_support::fuzz_cases(2000)))]

    #[test]
    fn the_record_parser_never_panics_on_arbitrary_text(text in ".{0,300}") {
        let _ = plan_batch(&[text], &Window::ALL);
    }

    #[test]
    fn the_planner_never_panics_on_arbitrary_numbers_and_keys(
        old_tc in arb_number(), new_tc in arb_number(), tk in arb_number(), seq in arb_number(),
        pk in prop_oneof![Just("ns/BUCKET#e#r#0".to_owned()), ".{0,30}"],
        at in prop_oneof![any::<f64>().prop_map(|f| json!(f)), Just(json!("x")), Just(json!(null))],
        event in prop_oneof![Just("INSERT"), Just("MODIFY"), Just("REMOVE"), Just("?")],
    ) {
        let record = json!({
            "eventName": event,
            "dynamodb": {
                "ApproximateCreationDateTime": at,
                "SequenceNumber": seq,
                "Keys": {"PK": {"S": pk}, "SK": {"S": "#STATE"}},
                "NewImage": {"b_tpm_tc": {"N": new_tc}, "b_tpm_tk": {"N": tk}, "b_tpm_soft": {"BOOL": true}},
                "OldImage": {"b_tpm_tc": {"N": old_tc}, "b_tpm_tk": {"N": "0"}},
            }
        });
        let plan = plan_batch(&[record.to_string()], &Window::ALL);
        prop_assert_eq!(plan.skipped.len() + plan.ignored + plan.bucket_records, 1);
    }

    /// Hostile archive keys: any partition key built from namespace, prefix
    /// and entity pieces, good or bad by construction, with an `#AUDIT#` sort
    /// key and removed. Only the table's own audit partitions become archive
    /// lines, every other one is an archive skip, and an archived object's key
    /// stays within S3's 1,024 bytes.
    #[test]
    fn the_archive_takes_only_the_tables_own_audit_partitions(
        (ns, ns_ok) in prop_oneof![
            "[A-Za-z0-9_-]{1,20}".prop_map(|s| (s, true)),
            "[A-Za-z0-9_-]{129,140}".prop_map(|s| (s, false)),
            Just((String::new(), false)),
            "[a-z]{1,5}[ #@.][a-z]{1,5}".prop_map(|s| (s, false)),
        ],
        (prefix, prefix_ok) in prop_oneof![
            Just(("AUDIT#", true)), Just(("BUCKET#", false)), Just(("AUDIT", false)),
        ],
        (entity, entity_ok) in prop_oneof![
            "[a-zA-Z0-9][a-zA-Z0-9_.:@-]{0,40}".prop_map(|s| (s, true)),
            Just(("$SYSTEM".to_owned(), true)),
            "[a-z]{1,8}(/[a-z0-9:.]{1,8})?".prop_map(|r| (format!("$RESOURCE:{r}"), true)),
            "[a-z]{1,5}#[a-z]{0,5}".prop_map(|s| (s, false)),
            "[a-z]{1,5}/BUCKET#[a-z]{1,5}(#0)?".prop_map(|s| (s, false)),
            "[a-z]{1,5}/[a-z]{1,5}".prop_map(|s| (s, false)),
            "[a-z]{257,260}".prop_map(|s| (s, false)),
            Just((String::new(), false)),
            Just(("$OTHER".to_owned(), false)),
        ],
        seq in "[1-9][0-9]{0,39}",
    ) {
        let pk = format!("{ns}/{prefix}{entity}");
        let record = json!({"eventName": "REMOVE", "dynamodb": {
            "ApproximateCreationDateTime": 1_795_970_136.0, "SequenceNumber": seq,
            "Keys": {"PK": {"S": pk}, "SK": {"S": "#AUDIT#01J"}},
            "OldImage": {"event_id": {"S": "01J"}, "timestamp": {"S": "2026-11-29T10:00:00Z"}}}});
        let plan = plan_batch(&[record.to_string()], &Window::ALL);
        let own = ns_ok && prefix_ok && entity_ok;
        prop_assert_eq!(plan.removed_audit.len(), usize::from(own), "{}", pk);
        prop_assert_eq!(plan.archive_skipped.len(), usize::from(!own), "{}", pk);
        prop_assert!(plan.skipped.is_empty());
        for (sequence, archived) in &plan.removed_audit {
            let key = zae_table::archive::object_key(
                &archived.namespace, archived.day, sequence.as_stream(), "0123456789abcdef");
            prop_assert!(key.len() <= 1024, "{}", key);
        }
    }
}
