//! DynamoDB Streams records from the SDK, turned into the shape Lambda delivers.

use crate::poll::source::Page;
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
    let mut lambda = json!({
        "eventID": record.event_id,
        "eventName": record.event_name.as_ref().map(|e| e.as_str()),
        "eventVersion": record.event_version,
        "eventSource": record.event_source,
        "awsRegion": record.aws_region,
        "dynamodb": Value::Object(change),
        "eventSourceARN": stream_arn,
    });
    // A TTL deletion is told by its identity (the archive's `removed_by_ttl`),
    // so it is kept as the raw-body path keeps it, with Lambda's names.
    if let (Some(who), Some(fields)) = (&record.user_identity, lambda.as_object_mut()) {
        fields.insert(
            "userIdentity".into(),
            json!({"type": who.r#type, "principalId": who.principal_id}),
        );
    }
    lambda
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

/// A GetRecords body read without the SDK, each record in the shape Lambda
/// delivers. An attribute value with no type (`{}`, as DynamoDB Local 3.x
/// writes an empty map) is read as the empty map it stands for; a body that
/// is not a page is an error whose text is bounded.
pub fn page_from_body(body: &[u8], stream_arn: &str) -> Result<Page, String> {
    let refused = |why: &str| {
        let start = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        zae_table::sdk::bounded(&format!("{why}; the body begins {start:?}"))
    };
    let mut page: Value =
        serde_json::from_slice(body).map_err(|e| refused(&format!("not JSON ({e})")))?;
    let next = match page.get("NextShardIterator") {
        None | Some(Value::Null) => None,
        Some(Value::String(next)) => Some(next.clone()),
        Some(_) => return Err(refused("NextShardIterator is not a string")),
    };
    let records = match page.get_mut("Records").map(Value::take) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(records)) => records,
        Some(_) => return Err(refused("Records is not a list")),
    };
    Ok(Page {
        records: records
            .into_iter()
            .map(|record| lambda_shape(record, stream_arn))
            .collect(),
        next,
    })
}

/// A raw Streams record as Lambda delivers it: typed images, the stream's
/// ARN, and `userIdentity` with Lambda's lower-case member names.
fn lambda_shape(mut record: Value, stream_arn: &str) -> Value {
    let Some(fields) = record.as_object_mut() else {
        return record;
    };
    if let Some(Value::Object(change)) = fields.get_mut("dynamodb") {
        for image in ["Keys", "NewImage", "OldImage"] {
            if let Some(Value::Object(attributes)) = change.get_mut(image) {
                attributes.values_mut().for_each(typed);
            }
        }
    }
    if let Some(Value::Object(who)) = fields.get_mut("userIdentity") {
        for (from, to) in [("Type", "type"), ("PrincipalId", "principalId")] {
            if let Some(v) = who.remove(from) {
                who.insert(to.into(), v);
            }
        }
    }
    fields.insert("eventSourceARN".into(), json!(stream_arn));
    record
}

/// Gives an untyped `{}` its type (an empty map), inside maps and lists too.
fn typed(value: &mut Value) {
    let Value::Object(members) = value else {
        return;
    };
    if members.is_empty() {
        members.insert("M".into(), json!({}));
        return;
    }
    if let Some(Value::Object(map)) = members.get_mut("M") {
        map.values_mut().for_each(typed);
    } else if let Some(Value::Array(list)) = members.get_mut("L") {
        list.iter_mut().for_each(typed);
    }
}
