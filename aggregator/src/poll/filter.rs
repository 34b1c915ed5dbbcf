//! The event source mapping's filter criteria, shared by the template and the
//! local poller, and a matcher for the subset of Lambda's pattern syntax they use.

use serde_json::Value;

/// The `FilterCriteria` of the aggregator's event source mapping: INSERT and
/// MODIFY of bucket items (`SK = #STATE`). INSERT is included because the write
/// that creates a bucket carries that bucket's first debit.
pub const FILTER_CRITERIA: &str = include_str!("../../filter-criteria.json");

/// The filter added when the audit archive is on: removals of audit items
/// (`SK` beginning `#AUDIT#`, which unlike the partition key is not namespaced).
pub const ARCHIVE_FILTER_CRITERIA: &str = include_str!("../../archive-filter-criteria.json");

#[derive(Debug, thiserror::Error)]
#[error("filter criteria: {0}")]
pub struct FilterError(String);

#[derive(Debug, Clone)]
pub struct Filter {
    patterns: Vec<Value>,
}

impl Filter {
    /// Parses `{"Filters": [{"Pattern": "<json>"}, ...]}`.
    pub fn parse(criteria: &str) -> Result<Filter, FilterError> {
        let doc: Value = serde_json::from_str(criteria).map_err(|e| FilterError(e.to_string()))?;
        let filters = doc
            .get("Filters")
            .and_then(Value::as_array)
            .ok_or_else(|| FilterError("no Filters array".into()))?;
        let patterns = filters
            .iter()
            .map(|f| {
                let text = f
                    .get("Pattern")
                    .and_then(Value::as_str)
                    .ok_or_else(|| FilterError("a filter has no Pattern".into()))?;
                serde_json::from_str(text).map_err(|e| FilterError(format!("pattern {text}: {e}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Filter { patterns })
    }

    /// The stack's filter: bucket changes, and audit removals when archiving.
    pub fn event_source_mapping(archiving: bool) -> Filter {
        let mut filter = Filter::parse(FILTER_CRITERIA).expect("the shipped filter criteria parse");
        if archiving {
            let audit =
                Filter::parse(ARCHIVE_FILTER_CRITERIA).expect("the shipped archive filter parses");
            filter.patterns.extend(audit.patterns);
        }
        filter
    }

    /// A record passes when any pattern matches it.
    pub fn matches(&self, record: &Value) -> bool {
        self.patterns
            .iter()
            .any(|p| matches_pattern(p, Some(record)))
    }
}

fn matches_pattern(pattern: &Value, value: Option<&Value>) -> bool {
    match pattern {
        Value::Object(fields) => fields
            .iter()
            .all(|(key, sub)| matches_pattern(sub, value.and_then(|v| v.get(key)))),
        Value::Array(options) => options.iter().any(|option| matches_option(option, value)),
        _ => false,
    }
}

fn matches_option(option: &Value, value: Option<&Value>) -> bool {
    match option {
        Value::Object(rule) => match (rule.get("prefix"), rule.get("exists")) {
            (Some(Value::String(prefix)), _) => value
                .and_then(Value::as_str)
                .is_some_and(|s| s.starts_with(prefix)),
            (_, Some(Value::Bool(exists))) => value.is_some() == *exists,
            _ => false,
        },
        literal => value == Some(literal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(event: &str, sk: &str) -> Value {
        json!({"eventName": event, "dynamodb": {"Keys": {"PK": {"S": "ns/BUCKET#e#r#0"}, "SK": {"S": sk}}}})
    }

    #[test]
    fn passes_bucket_inserts_and_modifies_only() {
        let f = Filter::event_source_mapping(false);
        assert!(f.matches(&record("INSERT", "#STATE")));
        assert!(f.matches(&record("MODIFY", "#STATE")));
        assert!(!f.matches(&record("REMOVE", "#STATE")));
        assert!(!f.matches(&record("MODIFY", "#USAGE#r#2026-01-01T00:00:00Z")));
        assert!(!f.matches(&record("INSERT", "#AUDIT#01ABC")));
        assert!(!f.matches(&json!({"eventName": "MODIFY"})));
        let archiving = Filter::event_source_mapping(true);
        assert!(
            archiving.matches(&record("REMOVE", "#AUDIT#01ABC")),
            "audit removals, when archiving"
        );
        assert!(archiving.matches(&record("MODIFY", "#STATE")));
        assert!(!archiving.matches(&record("REMOVE", "#STATE")));
        assert!(!archiving.matches(&record("INSERT", "#AUDIT#01ABC")));
    }

    #[test]
    fn prefix_and_exists_rules() {
        let f = Filter::parse(
            r#"{"Filters":[{"Pattern":"{\"dynamodb\":{\"OldImage\":{\"PK\":{\"S\":[{\"prefix\":\"ns/\"}]}},\"NewImage\":[{\"exists\":false}]}}"}]}"#,
        )
        .unwrap();
        assert!(f.matches(&json!({"dynamodb": {"OldImage": {"PK": {"S": "ns/AUDIT#e"}}}})));
        assert!(!f.matches(&json!({"dynamodb": {"OldImage": {"PK": {"S": "xx/AUDIT#e"}}}})));
        assert!(
            !f.matches(&json!({"dynamodb": {"OldImage": {"PK": {"S": "ns/A"}}, "NewImage": {}}}))
        );
    }

    #[test]
    fn malformed_criteria_are_errors() {
        assert!(Filter::parse("{}").is_err());
        assert!(Filter::parse(r#"{"Filters":[{"Pattern":"{"}]}"#).is_err());
    }
}
