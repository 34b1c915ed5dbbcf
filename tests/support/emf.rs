//! The Embedded Metric Format specification's structural rules, as a
//! validator for the documents the aggregator prints.

use serde_json::Value;

/// Checks a document against the EMF specification's structural rules: the
/// `_aws` metadata with a millisecond `Timestamp` and 1 to 100 directives; a
/// `Namespace` of 1 to 255 characters; dimension sets of at most 30 keys, each
/// naming a top-level string member; 1 to 100 metrics, each naming a top-level
/// number (or array of at most 100 numbers), with a valid unit and resolution.
pub fn validate_emf(doc: &Value) -> Result<(), String> {
    const UNITS: [&str; 27] = [
        "Seconds",
        "Microseconds",
        "Milliseconds",
        "Bytes",
        "Kilobytes",
        "Megabytes",
        "Gigabytes",
        "Terabytes",
        "Bits",
        "Kilobits",
        "Megabits",
        "Gigabits",
        "Terabits",
        "Percent",
        "Count",
        "Bytes/Second",
        "Kilobytes/Second",
        "Megabytes/Second",
        "Gigabytes/Second",
        "Terabytes/Second",
        "Bits/Second",
        "Kilobits/Second",
        "Megabits/Second",
        "Gigabits/Second",
        "Terabits/Second",
        "Count/Second",
        "None",
    ];
    let root = doc.as_object().ok_or("the document is not a JSON object")?;
    let aws = root
        .get("_aws")
        .and_then(Value::as_object)
        .ok_or("no `_aws` object")?;
    match aws.get("Timestamp") {
        Some(Value::Number(n)) if n.as_i64().is_some_and(|t| t >= 0) => {}
        _ => return Err("`_aws.Timestamp` is not a non-negative integer of milliseconds".into()),
    }
    let directives = aws
        .get("CloudWatchMetrics")
        .and_then(Value::as_array)
        .ok_or("no `_aws.CloudWatchMetrics` array")?;
    if directives.is_empty() || directives.len() > 100 {
        return Err(format!(
            "{} metric directives (1 to 100 allowed)",
            directives.len()
        ));
    }
    for directive in directives {
        let namespace = directive
            .get("Namespace")
            .and_then(Value::as_str)
            .ok_or("a directive has no Namespace string")?;
        if namespace.is_empty() || namespace.len() > 255 {
            return Err(format!(
                "Namespace `{namespace}` is not 1 to 255 characters"
            ));
        }
        let sets = directive
            .get("Dimensions")
            .and_then(Value::as_array)
            .ok_or("a directive has no Dimensions array")?;
        for set in sets {
            let keys = set.as_array().ok_or("a dimension set is not an array")?;
            if keys.len() > 30 {
                return Err(format!(
                    "a dimension set has {} keys (30 allowed)",
                    keys.len()
                ));
            }
            for key in keys {
                let key = key.as_str().ok_or("a dimension key is not a string")?;
                match root.get(key) {
                    Some(Value::String(v)) if !v.is_empty() && v.len() <= 1024 => {}
                    _ => {
                        return Err(format!(
                            "dimension `{key}` is not a top-level string member of 1 to 1024 characters"
                        ));
                    }
                }
            }
        }
        let metrics = directive
            .get("Metrics")
            .and_then(Value::as_array)
            .ok_or("a directive has no Metrics array")?;
        if metrics.is_empty() || metrics.len() > 100 {
            return Err(format!(
                "{} metrics in a directive (1 to 100 allowed)",
                metrics.len()
            ));
        }
        for metric in metrics {
            let name = metric
                .get("Name")
                .and_then(Value::as_str)
                .ok_or("a metric has no Name string")?;
            if name.is_empty() || name.len() > 255 {
                return Err(format!("metric name `{name}` is not 1 to 255 characters"));
            }
            if let Some(unit) = metric.get("Unit")
                && !unit.as_str().is_some_and(|u| UNITS.contains(&u))
            {
                return Err(format!(
                    "metric `{name}` has unit {unit}, not a CloudWatch unit"
                ));
            }
            if let Some(resolution) = metric.get("StorageResolution")
                && !matches!(resolution.as_i64(), Some(1 | 60))
            {
                return Err(format!(
                    "metric `{name}` has StorageResolution {resolution}, not 1 or 60"
                ));
            }
            match root.get(name) {
                Some(Value::Number(_)) => {}
                Some(Value::Array(values))
                    if values.len() <= 100 && values.iter().all(Value::is_number) => {}
                _ => return Err(format!("metric `{name}` has no top-level number member")),
            }
        }
    }
    Ok(())
}
