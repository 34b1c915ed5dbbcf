use super::*;

#[test]
fn parents_are_read_before_their_children() {
    let shard = |id: &str, parent: Option<&str>| ShardInfo {
        id: id.into(),
        parent: parent.map(Into::into),
    };
    let order = parent_first(vec![
        shard("c", Some("b")),
        shard("b", Some("a")),
        shard("a", None),
        shard("x", Some("gone")),
    ]);
    let ids: Vec<&str> = order.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids.len(), 4);
    let pos = |id: &str| ids.iter().position(|i| *i == id).unwrap();
    assert!(pos("a") < pos("b") && pos("b") < pos("c"));
}

#[test]
fn checkpoints_round_trip_and_a_missing_file_is_a_fresh_start() {
    let dir = std::env::temp_dir().join(format!("zae-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.json");
    assert_eq!(Checkpoint::load(&path).unwrap(), Checkpoint::default());
    let ckpt = Checkpoint {
        stream_arn: Some("arn".into()),
        shards: BTreeMap::from([("s".into(), "42".into())]),
    };
    ckpt.save(&path).unwrap();
    assert_eq!(Checkpoint::load(&path).unwrap(), ckpt);
    std::fs::write(&path, "not json").unwrap();
    let err = Checkpoint::load(&path).unwrap_err().to_string();
    assert!(err.contains("c.json"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sdk_records_take_the_lambda_shape_with_millisecond_times() {
    use aws_sdk_dynamodbstreams::types::{
        AttributeValue, OperationType, Record, StreamRecord as SdkRecord,
    };
    use aws_smithy_types::DateTime;
    let change = SdkRecord::builder()
        .approximate_creation_date_time(DateTime::from_millis(1_795_970_136_158))
        .keys("PK", AttributeValue::S("ns/BUCKET#e#r#0".into()))
        .keys("SK", AttributeValue::S("#STATE".into()))
        .new_image("b_tpm_tc", AttributeValue::N("5".into()))
        .new_image("cascade", AttributeValue::Bool(true))
        .sequence_number("77")
        .size_bytes(10)
        .build();
    let record = Record::builder()
        .event_id("e")
        .event_name(OperationType::Insert)
        .dynamodb(change)
        .build();
    let json = lambda_record(&record, "arn:stream").to_string();
    let parsed = zae_table::StreamRecord::parse(&json).unwrap();
    assert_eq!(parsed.created_ms, Some(1_795_970_136_158));
    assert_eq!(parsed.event_name, zae_table::EventName::Insert);
    assert_eq!(
        parsed.new_image().unwrap().int("b_tpm_tc").unwrap(),
        Some(5)
    );
    assert!(json.contains("\"eventSourceARN\":\"arn:stream\""));
}
