//! Fan-outs too large for one invocation: when an apply stops at the
//! deadline with its place recorded, the function invokes itself
//! asynchronously, and the follow-up claims the pending fan-outs and goes on
//! from there, chain after chain, until nothing is left or the chain's
//! length runs out (then the next apply goes on).

use serde_json::{Value, json};
use std::future::Future;
use std::time::Duration;

/// The direct-invoke action of a follow-up. The Python CLI never sends it.
pub const ACTION: &str = "continue";
/// Follow-ups in one chain. Each one made progress (it ran until its
/// deadline), so a longer chain would mean a namespace past what this
/// bound expects; the next apply takes it from there.
pub const MAX_GENERATIONS: u64 = 50;
/// The most an asynchronous invoke may take before the stack is answered.
const INVOKE_BUDGET: Duration = Duration::from_secs(5);

/// The environment variable naming the alias follow-ups invoke (the
/// stack's `follow-up`, with its own retries and failure queue).
pub const ALIAS_VARIABLE: &str = "FOLLOW_UP_ALIAS";

/// Where a follow-up goes: this function's `alias` when there is one
/// (CloudFormation's own requests reach the bare function, which keeps no
/// failure queue for them), else the function as invoked. Any qualifier of
/// the invoked ARN (a follow-up's own) is dropped first.
pub fn target(function_arn: &str, alias: Option<&str>) -> String {
    // arn:partition:lambda:region:account:function:name[:qualifier]
    let parts: Vec<&str> = function_arn.splitn(8, ':').collect();
    let bare = if parts.len() == 8 {
        parts[..7].join(":")
    } else {
        function_arn.to_owned()
    };
    match alias.filter(|a| !a.is_empty()) {
        Some(alias) if bare.contains(":function:") => format!("{bare}:{alias}"),
        _ => bare,
    }
}

/// Starts an invocation of a function and does not wait for it.
pub trait Continuer: Send + Sync + 'static {
    fn invoke_async(
        &self,
        function: &str,
        payload: Value,
    ) -> impl Future<Output = Result<(), String>> + Send;
}

impl Continuer for aws_sdk_lambda::Client {
    async fn invoke_async(&self, function: &str, payload: Value) -> Result<(), String> {
        use aws_sdk_lambda::primitives::Blob;
        use aws_sdk_lambda::types::InvocationType;
        self.invoke()
            .function_name(function)
            .invocation_type(InvocationType::Event)
            .payload(Blob::new(payload.to_string()))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| format!("Invoke {function}: {}", zae_table::sdk::error_text(&e)))
    }
}

/// A follow-up's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    pub table: String,
    pub namespace_id: String,
    /// 1 for the first follow-up of an apply.
    pub generation: u64,
}

impl Continuation {
    /// The first follow-up of an apply on `table`'s namespace `namespace_id`.
    pub fn first(table: &str, namespace_id: String) -> Continuation {
        Continuation {
            table: table.to_owned(),
            namespace_id,
            generation: 1,
        }
    }

    pub fn payload(&self) -> Value {
        json!({
            "action": ACTION,
            "table_name": self.table,
            "namespace_id": self.namespace_id,
            "generation": self.generation,
        })
    }

    /// `None` when the payload is not a follow-up; an error names what a
    /// follow-up payload lacks.
    pub fn parse(payload: &Value) -> Option<Result<Continuation, String>> {
        let map = payload.as_object()?;
        if map.get("action").and_then(Value::as_str) != Some(ACTION) {
            return None;
        }
        let text = |key: &str| {
            map.get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| format!("a `{ACTION}` payload needs `{key}`"))
        };
        Some((|| {
            Ok(Continuation {
                table: text("table_name")?,
                namespace_id: text("namespace_id")?,
                generation: map.get("generation").and_then(Value::as_u64).unwrap_or(1),
            })
        })())
    }

    pub fn next(&self) -> Continuation {
        Continuation {
            generation: self.generation.saturating_add(1),
            ..self.clone()
        }
    }
}

/// Asks for a follow-up within `budget` (at most five seconds). `Ok` says
/// what happens next; `Err`, that no follow-up started (the chain at its
/// limit, an invoke refused or timed out), for the stack's `Reason`, the
/// direct invoke's `errors` and the logs. A failure is also counted
/// (`FollowUpsFailed`, per table), so that an alarm sees a stalled fan-out.
pub async fn request<C: Continuer>(
    continuer: &C,
    function: &str,
    next: &Continuation,
    budget: Duration,
) -> Result<String, String> {
    let failed = |sentence: String| {
        tracing::error!(namespace = %next.namespace_id, table = %next.table, "{sentence}");
        crate::metrics::follow_up_failed(&next.table);
        Err(sentence)
    };
    if next.generation > MAX_GENERATIONS {
        return failed(format!(
            "after {MAX_GENERATIONS} follow-up invocations the chain stops; the next apply \
             goes on from there"
        ));
    }
    let alias = std::env::var(ALIAS_VARIABLE).ok();
    let function = target(function, alias.as_deref());
    let invoke = continuer.invoke_async(&function, next.payload());
    match tokio::time::timeout(budget.min(INVOKE_BUDGET), invoke).await {
        Ok(Ok(())) => {
            tracing::info!(namespace = %next.namespace_id, generation = next.generation, "follow-up invocation started");
            Ok("the rest continues in follow-up invocations of this function".into())
        }
        Ok(Err(err)) => failed(format!(
            "a follow-up invocation could not be started ({err}); the next apply goes on from there"
        )),
        Err(_) => failed(
            "starting a follow-up invocation timed out; the next apply goes on from there".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follow_up_targets_the_alias_of_the_bare_function() {
        let bare = "arn:aws:lambda:us-east-1:123456789012:function:stack-limits-provisioner";
        let alias = Some("follow-up");
        assert_eq!(target(bare, alias), format!("{bare}:follow-up"));
        assert_eq!(
            target(&format!("{bare}:follow-up"), alias),
            format!("{bare}:follow-up")
        );
        assert_eq!(target(&format!("{bare}:$LATEST"), None), bare);
        assert_eq!(target(bare, None), bare, "a migrated stack has no alias");
        assert_eq!(target("arn:fn", alias), "arn:fn", "not an ARN: as it is");
    }
}
