//! The Lambda entry: dispatch between the CloudFormation and direct-invoke
//! protocols, the deadline guard, and the panic guard. Tables are opened
//! through the [`Tables`] seam, so the whole entry runs on the in-memory
//! store in unit tests.

use crate::cloudformation::{self, Envelope, Outcome, Responder};
use crate::continuation::{self, Continuation, Continuer};
use crate::invoke::{self, InvokeError, InvokeRequest};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use yaml_serde::Value as Tree;
use zae_provisioner::apply::Report;
use zae_provisioner::apply::{Caller, Ownership, Provisioner};
use zae_table::sdk::DynamoStore;
use zae_table::store::Store;

/// Opens a table by name: DynamoDB in the Lambda, memory in tests.
pub trait Tables: Send + Sync + 'static {
    type Store: Store + 'static;
    fn open(&self, table: &str) -> Self::Store;
}

impl Tables for aws_sdk_dynamodb::Client {
    type Store = DynamoStore;
    fn open(&self, table: &str) -> DynamoStore {
        DynamoStore::new(self.clone(), table)
    }
}

/// A failed invocation, as the caller sees it: a stable `errorType` and the
/// message (documented in `docs/provisioner.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub error_type: &'static str,
    pub message: String,
}

impl Failure {
    fn new(error_type: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            error_type,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<Failure> for lambda_runtime::Diagnostic {
    fn from(failure: Failure) -> Self {
        lambda_runtime::Diagnostic {
            error_type: failure.error_type.to_owned(),
            error_message: failure.message,
        }
    }
}

/// The time to answer a request too malformed to be worked on.
const ANSWER_BUDGET: Duration = Duration::from_secs(3);

/// What every invocation shares.
pub struct Deps<T, R, C> {
    pub tables: T,
    pub default_table: Option<String>,
    pub responder: R,
    /// Starts the follow-up of a fan-out stopped at the deadline.
    pub continuer: C,
}

/// Time kept back from the Lambda deadline: the apply stops starting work
/// at twice this before the deadline, and is abandoned at once this, which
/// leaves room to answer CloudFormation. A tenth of the time, 3 to 30 s, but
/// never more than a quarter, so a short timeout still leaves time to work.
pub fn reserve(remaining: Duration) -> Duration {
    (remaining / 10)
        .clamp(Duration::from_secs(3), Duration::from_secs(30))
        .min(remaining / 4)
}

fn caller(principal: String, remaining: Duration) -> Caller {
    let reserve = reserve(remaining);
    Caller {
        principal,
        ownership: Ownership::Keep,
        stop_at: tokio::time::Instant::now().checked_add(remaining.saturating_sub(reserve * 2)),
        lease_ms: remaining.as_millis() as i64 + 60_000,
    }
}

fn panic_text(err: tokio::task::JoinError) -> String {
    match err.try_into_panic() {
        Ok(panic) => panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into()),
        Err(err) => err.to_string(),
    }
}

/// Why guarded work did not finish.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    Deadline,
    Panicked(String),
}

/// Runs `work` as its own task, abandoned at `limit` and with a panic
/// caught, so that the caller can still answer.
pub async fn guarded<T: Send + 'static>(
    limit: Duration,
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, Stopped> {
    let mut task = tokio::spawn(work);
    match tokio::time::timeout(limit, &mut task).await {
        Err(_) => {
            task.abort();
            Err(Stopped::Deadline)
        }
        Ok(Err(join)) => Err(Stopped::Panicked(panic_text(join))),
        Ok(Ok(value)) => Ok(value),
    }
}

/// Handles one invocation. The CloudFormation path always answers the
/// stack and returns `Ok`; the invoke path returns the report or an error.
pub async fn handle<T: Tables, R: Responder + 'static, C: Continuer>(
    deps: Arc<Deps<T, R, C>>,
    payload: Value,
    deadline_ms: u64,
    function_arn: String,
) -> Result<Value, Failure> {
    if let Some(parsed) = Continuation::parse(&payload) {
        let continuation = parsed.map_err(|e| Failure::new("InvalidRequest", e))?;
        return handle_continue(&deps, continuation, deadline_ms, function_arn).await;
    }
    let is_cfn = payload.get("RequestType").is_some();
    if !is_cfn {
        return handle_invoke(&deps, &payload, deadline_ms, function_arn).await;
    }
    // The envelope from JSON; its properties into the manifest walker's tree.
    let parsed = serde_json::from_value::<cloudformation::Request>(payload.clone())
        .map_err(|e| e.to_string())
        .and_then(|r| Envelope::from_request(r).ok_or_else(|| "unknown RequestType".to_owned()));
    let envelope = match parsed {
        Ok(envelope) => envelope,
        Err(err) => return answer_malformed(&deps.responder, &payload, err).await,
    };
    let deadline_ms = answer_deadline_ms(deadline_ms, envelope.service_timeout());
    let remaining = zae_runtime::deadline::remaining(deadline_ms);
    let mut outcome = run_cfn(deps.clone(), envelope.clone(), remaining).await;
    if let Some(first) = outcome.follow_up.take() {
        // The answer below gets `reserve(remaining)`: that much stays set aside.
        let next = follow_up(
            &deps,
            &function_arn,
            &first,
            deadline_ms,
            reserve(remaining),
        )
        .await;
        let next = next.unwrap_or_else(|failed| failed);
        outcome.reason = format!("{}: {next}", outcome.reason);
    }
    tracing::info!(
        request = envelope.kind,
        success = outcome.success,
        reason = %outcome.reason,
        physical_id = %outcome.physical_id,
        "answering CloudFormation"
    );
    cloudformation::answer(&deps.responder, &envelope, &outcome, reserve(remaining))
        .await
        .map_err(|e| Failure::new("ResponseFailed", e))?;
    Ok(json!({ "Status": if outcome.success { "SUCCESS" } else { "FAILED" } }))
}

/// The instant (epoch milliseconds) a CloudFormation request must be
/// answered by: the Lambda's deadline, or CloudFormation's own when it comes
/// first (`ServiceTimeout` after the request arrived: past it, the stack has
/// failed the resource, and work still writing would only race its rollback).
fn answer_deadline_ms(lambda_deadline_ms: u64, service_timeout: Duration) -> u64 {
    let left = zae_runtime::deadline::remaining(lambda_deadline_ms).min(service_timeout);
    let now = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
    now.saturating_add(u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
}

/// Asks for a follow-up with the time left once `keep` (what the answer
/// needs) is set aside; says what happens next, or why nothing does.
async fn follow_up<T, R, C: Continuer>(
    deps: &Deps<T, R, C>,
    function_arn: &str,
    next: &Continuation,
    deadline_ms: u64,
    keep: Duration,
) -> Result<String, String> {
    let budget = zae_runtime::deadline::remaining(deadline_ms).saturating_sub(keep);
    continuation::request(&deps.continuer, function_arn, next, budget).await
}

/// What returning a direct invoke's answer needs.
const RETURN_BUDGET: Duration = Duration::from_secs(1);

/// A follow-up: the namespace's pending fan-outs, from their recorded
/// place, and another follow-up if they stop again.
async fn handle_continue<T: Tables, R, C: Continuer>(
    deps: &Deps<T, R, C>,
    continuation: Continuation,
    deadline_ms: u64,
    function_arn: String,
) -> Result<Value, Failure> {
    let remaining = zae_runtime::deadline::remaining(deadline_ms);
    let caller = caller(function_arn.clone(), remaining);
    let store = deps.tables.open(&continuation.table);
    let namespace = continuation.namespace_id.clone();
    let work = async move {
        let provisioner = Provisioner {
            store: &store,
            namespace: &namespace,
        };
        provisioner
            .continue_pending(&caller)
            .await
            .map_err(InvokeError::Apply)
    };
    let next = continuation.next();
    answer_invoke(deps, &function_arn, deadline_ms, work, |_| next).await
}

/// The direct invoke of the Python CLI: the report, or an error message.
async fn handle_invoke<T: Tables, R, C: Continuer>(
    deps: &Deps<T, R, C>,
    payload: &Value,
    deadline_ms: u64,
    function_arn: String,
) -> Result<Value, Failure> {
    let remaining = zae_runtime::deadline::remaining(deadline_ms);
    let request = InvokeRequest::parse(payload, deps.default_table.as_deref())
        .map_err(|e| Failure::new(e.error_type(), e.to_string()))?;
    // The payload is the invoker's word; the function's own identity did the writes.
    let caller = caller(function_arn.clone(), remaining);
    let store = deps.tables.open(&request.table);
    let table = request.table.clone();
    let work = async move { invoke::handle(&store, &request, &caller).await };
    answer_invoke(deps, &function_arn, deadline_ms, work, |report| {
        Continuation::first(&table, report.namespace.clone())
    })
    .await
}

/// Runs an invoked apply under the deadline and panic guards; its report is
/// the answer, after asking for the follow-up `next` names when fan-outs
/// stopped.
async fn answer_invoke<T, R, C: Continuer>(
    deps: &Deps<T, R, C>,
    function_arn: &str,
    deadline_ms: u64,
    work: impl std::future::Future<Output = Result<Report, InvokeError>> + Send + 'static,
    next: impl FnOnce(&Report) -> Continuation,
) -> Result<Value, Failure> {
    let remaining = zae_runtime::deadline::remaining(deadline_ms);
    let limit = remaining.saturating_sub(reserve(remaining));
    let mut report = match guarded(limit, work).await {
        Ok(Ok(report)) => report,
        Ok(Err(err)) => return Err(Failure::new(err.error_type(), err.to_string())),
        Err(Stopped::Deadline) => {
            return Err(Failure::new(
                "OutOfTime",
                format!(
                    "stopped {} s before the Lambda timeout; pending fan-outs are retried by the next apply",
                    reserve(remaining).as_secs()
                ),
            ));
        }
        Err(Stopped::Panicked(text)) => {
            return Err(Failure::new(
                "Panicked",
                format!("provisioner panicked: {text}"),
            ));
        }
    };
    if report.stopped > 0 {
        let started = follow_up(
            deps,
            function_arn,
            &next(&report),
            deadline_ms,
            RETURN_BUDGET,
        )
        .await;
        // After commit, as the invoke protocol reports problems: a Lambda
        // error here would make the Python CLI call a committed apply failed.
        if let Err(sentence) = started {
            report.errors.get_or_insert_with(Vec::new).push(sentence);
        }
    }
    serde_json::to_value(&report).map_err(|e| Failure::new("ProvisionerError", e.to_string()))
}

/// Answers even a request we cannot read, if it says where to.
async fn answer_malformed<R: Responder>(
    responder: &R,
    payload: &Value,
    err: String,
) -> Result<Value, Failure> {
    let text = |k: &str| {
        payload
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let url = payload
        .get("ResponseURL")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(url) = url {
        let envelope = Envelope {
            kind: "Unknown",
            resource_type: text("ResourceType"),
            request_id: text("RequestId"),
            response_url: url,
            stack_id: text("StackId"),
            logical_resource_id: text("LogicalResourceId"),
            physical_resource_id: Some(text("PhysicalResourceId")).filter(|s| !s.is_empty()),
            properties: Tree::Null,
            old_properties: Tree::Null,
        };
        let outcome = Outcome::failed(
            &envelope,
            format!("malformed custom-resource request: {err}"),
        );
        cloudformation::answer(responder, &envelope, &outcome, ANSWER_BUDGET)
            .await
            .map_err(|e| Failure::new("ResponseFailed", e))?;
    }
    Err(Failure::new(
        "InvalidRequest",
        format!("malformed custom-resource request: {err}"),
    ))
}

async fn run_cfn<T: Tables, R: Responder + 'static, C: Continuer>(
    deps: Arc<Deps<T, R, C>>,
    envelope: Envelope,
    remaining: Duration,
) -> Outcome {
    let table = match cloudformation::table_name(&envelope, deps.default_table.as_deref()) {
        Ok(table) => table,
        Err(err) => return Outcome::failed(&envelope, err.to_string()),
    };
    let caller = caller(envelope.stack_id.clone(), remaining);
    let store = deps.tables.open(&table);
    let task_envelope = envelope.clone();
    let limit = remaining.saturating_sub(reserve(remaining));
    let rollback = cloudformation::RollbackId::default();
    let written = rollback.clone();
    let work = async move {
        cloudformation::handle(&store, &task_envelope, &table, &caller, &written).await
    };
    let reason = match guarded(limit, work).await {
        Ok(Ok(outcome)) => return outcome,
        Err(Stopped::Deadline) => "stopped before the Lambda timeout or the resource's \
            ServiceTimeout, whichever comes first; config written so far stays, and the \
            fan-outs still owed are pending for the next apply"
            .to_owned(),
        Err(Stopped::Panicked(text)) => format!("provisioner panicked: {text}"),
        Ok(Err(err)) => err.to_string(),
    };
    let mut outcome = Outcome::failed(&envelope, reason);
    // Past its first write, the answer names what the rollback must undo.
    if let Some(id) = rollback.get() {
        outcome.physical_id = id.to_owned();
    }
    outcome
}

#[cfg(test)]
mod tests;
