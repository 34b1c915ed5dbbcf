//! DynamoDB Streams records from the SDK, turned into the shape Lambda delivers.

use serde_json::{Map, Value, json};

/// A DynamoDB Streams record from the SDK, in the shape Lambda delivers.
pub fn lambda_record(record: &aws_sdk_dynamodbstreams::types::Record, stream_arn: &str) -> Value {
    use aws_sdk_dynamodbstreams::types::StreamViewType;
    let mut change = Map::new();
    if let Some(c) = &record.dynamodb {
        if let Some(at) = &c.approximate_creation_date_time {
            change.insert(
                "ApproximateCreationDateTime".into(),
                json!(at.as_secs_f64()),
            );
        }
        for (name, image) in [
            ("Keys", &c.keys),
            ("NewImage", &c.new_image),
            ("OldImage", &c.old_image),
        ] {
            if let Some(image) = image {
                change.insert(name.into(), image_json(image));
            }
        }
        if let Some(s) = &c.sequence_number {
            change.insert("SequenceNumber".into(), json!(s));
        }
        if let Some(n) = c.size_bytes {
            change.insert("SizeBytes".into(), json!(n));
        }
        if let Some(v) = &c.stream_view_type {
            let view = match v {
                StreamViewType::NewAndOldImages => "NEW_AND_OLD_IMAGES",
                other => other.as_str(),
            };
            change.insert("StreamViewType".into(), json!(view));
        }
    }
    json!({
        "eventID": record.event_id,
        "eventName": record.event_name.as_ref().map(|e| e.as_str()),
        "eventVersion": record.event_version,
        "eventSource": record.event_source,
        "awsRegion": record.aws_region,
        "dynamodb": Value::Object(change),
        "eventSourceARN": stream_arn,
    })
}

fn image_json(
    image: &std::collections::HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>,
) -> Value {
    Value::Object(
        image
            .iter()
            .map(|(k, v)| (k.clone(), attribute_json(v)))
            .collect(),
    )
}

fn attribute_json(value: &aws_sdk_dynamodbstreams::types::AttributeValue) -> Value {
    use aws_sdk_dynamodbstreams::types::AttributeValue as A;
    use aws_smithy_types::base64;
    match value {
        A::S(s) => json!({"S": s}),
        A::N(n) => json!({"N": n}),
        A::B(b) => json!({"B": base64::encode(b.as_ref())}),
        A::Bool(b) => json!({"BOOL": b}),
        A::Null(n) => json!({"NULL": n}),
        A::Ss(v) => json!({"SS": v}),
        A::Ns(v) => json!({"NS": v}),
        A::Bs(v) => json!({"BS": v.iter().map(|b| base64::encode(b.as_ref())).collect::<Vec<_>>()}),
        A::L(items) => json!({"L": items.iter().map(attribute_json).collect::<Vec<_>>()}),
        A::M(map) => json!({"M": image_json(map)}),
        _ => json!({}),
    }
}
