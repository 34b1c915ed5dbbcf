//! The provisioner's one metric, as an Embedded Metric Format document on
//! stdout (in Lambda, CloudWatch Logs turns it into a metric): a follow-up
//! that never started, per table, for the alarm on stalled fan-outs.

use serde_json::{Value, json};

pub const DEFAULT_NAMESPACE: &str = "ZaeLimiter";
pub const FOLLOW_UPS_FAILED: &str = "FollowUpsFailed";

/// The EMF document of one failed follow-up on `table`.
pub fn follow_up_failed_document(namespace: &str, table: &str, at_ms: i64) -> Value {
    json!({
        "_aws": {
            "Timestamp": at_ms,
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [["Table"]],
                "Metrics": [{"Name": FOLLOW_UPS_FAILED, "Unit": "Count"}],
            }],
        },
        "Table": table,
        FOLLOW_UPS_FAILED: 1,
    })
}

/// Prints it, under the stack's `METRICS_NAMESPACE`.
pub fn follow_up_failed(table: &str) {
    let namespace =
        std::env::var("METRICS_NAMESPACE").unwrap_or_else(|_| DEFAULT_NAMESPACE.to_owned());
    let at_ms = chrono::Utc::now().timestamp_millis();
    println!("{}", follow_up_failed_document(&namespace, table, at_ms));
}

#[cfg(test)]
mod tests {
    use super::*;
    use zae_test_support::emf::validate_emf;

    #[test]
    fn a_failed_follow_up_is_a_valid_emf_count_per_table() {
        let doc = follow_up_failed_document("Custom/Ns", "rate_limits", 5);
        validate_emf(&doc).unwrap();
        assert_eq!(doc[FOLLOW_UPS_FAILED], 1);
        assert_eq!(doc["Table"], "rate_limits");
    }
}
