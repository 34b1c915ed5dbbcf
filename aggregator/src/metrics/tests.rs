use super::*;
use serde_json::json;
use zae_test_support::emf::validate_emf;

/// An overdraw of key-a's soft tpm on gpt-4: the sample event of the metric tests.
pub(crate) fn overdrawn() -> MetricEvent {
    MetricEvent::Transition {
        kind: TransitionKind::Overdrawn,
        at_ms: 1_795_970_136_158,
        transition_ms: 1_795_970_136_158,
        namespace_id: "ns".into(),
        entity: "key-a".into(),
        resource: "gpt-4".into(),
        limit: "tpm".into(),
        shard: 0,
        balance: -100,
        event_id: "01M8M5NKBKD9ANKQQKMR6BEWM6".into(),
    }
}

#[test]
fn overdraw_documents_follow_the_emf_specification() {
    let doc = emf_document("ZaeLimiter", "rate-limits", &overdrawn());
    validate_emf(&doc).unwrap();
    assert_eq!(doc["SoftLimitOverdrawn"], json!(1.0));
    assert_eq!(doc["_aws"]["Timestamp"], json!(1_795_970_136_158i64));
    assert_eq!(
        doc["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        json!("ZaeLimiter")
    );
    assert_eq!(
        (doc["Resource"].as_str(), doc["Limit"].as_str()),
        (Some("gpt-4"), Some("tpm"))
    );
}

#[test]
fn the_entity_is_a_property_never_a_dimension() {
    let doc = emf_document("ZaeLimiter", "t", &overdrawn());
    assert_eq!(doc["EntityId"], json!("key-a"));
    let sets = doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
        .as_array()
        .unwrap();
    assert!(
        sets.iter()
            .flat_map(|s| s.as_array().unwrap())
            .all(|k| k != "EntityId")
    );
}

#[test]
fn skipped_record_documents_follow_the_emf_specification() {
    let doc = emf_document(
        "Custom/Ns",
        "t",
        &MetricEvent::Count {
            at_ms: 5,
            name: RECORDS_SKIPPED,
            count: 3,
        },
    );
    validate_emf(&doc).unwrap();
    assert_eq!(doc["RecordsSkipped"], json!(3.0));
}

#[test]
fn the_validator_rejects_what_cloudwatch_would_drop() {
    let good = emf_document("ZaeLimiter", "t", &overdrawn());
    let broken = |edit: &dyn Fn(&mut Value)| {
        let mut doc = good.clone();
        edit(&mut doc);
        validate_emf(&doc)
    };
    assert!(broken(&|d| d["_aws"]["Timestamp"] = json!("now")).is_err());
    assert!(
        broken(&|d| d
            .as_object_mut()
            .unwrap()
            .remove::<str>("Resource")
            .map(|_| ())
            .unwrap_or(()))
        .is_err()
    );
    assert!(broken(&|d| d["SoftLimitOverdrawn"] = json!("1")).is_err());
    assert!(
        broken(&|d| d["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"] = json!("Tokens"))
            .is_err()
    );
    assert!(broken(&|d| d["_aws"]["CloudWatchMetrics"][0]["Namespace"] = json!("")).is_err());
    assert!(broken(&|d| d["_aws"]["CloudWatchMetrics"] = json!([])).is_err());
}
