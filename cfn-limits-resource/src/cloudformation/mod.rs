//! The CloudFormation custom-resource protocol of `Custom::ZaeLimiterLimits`.
//!
//! Every request is answered, by a PUT to its `ResponseURL`: a bad manifest,
//! a store failure, a panic and a near timeout all become FAILED with a
//! reason. Ownership is explicit: a Create that failed before it could write
//! answers with a marker physical id whose rollback Delete does nothing; one
//! that failed once it may have written (its claim included) answers with
//! the namespace's failed id, whose rollback Delete undoes what this very
//! resource owns there; and a Delete only wipes a namespace this very
//! resource manages.

mod responder;
pub mod table;

pub use responder::{HttpResponder, Responder, answer};

use crate::continuation::Continuation;
use aws_lambda_events::event::cloudformation::CloudFormationCustomResourceRequest;
use serde_json::{Value, json};
use std::sync::{Arc, OnceLock};
use yaml_serde::Value as Tree;
use zae_provisioner::apply::state::namespace_id as registered_id;
use zae_provisioner::apply::{ApplyError, Caller, Ownership, Provisioner, Report};
use zae_provisioner::manifest::Manifest;
use zae_provisioner::manifest::problem::{Invalid, Path, Problem, Spelling};
use zae_provisioner::manifest::stack::{coerce_bool, parse_properties};
use zae_table::keys;
use zae_table::names::MAX_NAMESPACE_BYTES;
use zae_table::provisioner::Rollback;
use zae_table::store::{Store, StoreError};

/// Marks a reason cut to fit the body.
const TRUNCATED: &str = " … (truncated)";
/// CloudFormation refuses larger response bodies.
pub const MAX_RESPONSE_BYTES: usize = 4096;
/// A failed Create's physical id starts with this; its rollback Delete is a no-op.
pub const FAILED_CREATE_PREFIX: &str = "failed-create/";
/// What the 0.17.0 provisioner answers a failed Create with.
const REFERENCE_FAILED_ID: &str = "failed";
/// CloudFormation's longest `ServiceTimeout`, and its default.
const MAX_SERVICE_TIMEOUT_S: u64 = 3600;
/// Ends the physical id of a request that failed once it may have written.
pub const FAILED_SUFFIX: &str = "/failed";

pub type Request = CloudFormationCustomResourceRequest<Tree, Tree>;

#[derive(Debug, thiserror::Error)]
pub enum CfnError {
    #[error("{0}")]
    Invalid(#[from] Invalid),
    #[error("{0}")]
    Apply(#[from] ApplyError),
    #[error(
        "namespace '{name}' is not registered in table '{table}': add it to the `Namespaces` \
         parameter of the stack that deployed the table, or run `zae-limits apply \
         --create-namespace` once"
    )]
    UnknownNamespace { name: String, table: String },
    #[error(
        "NamespaceId '{id}' is not in the table's registry: give the id of a registered \
         namespace (the table stack's `Data.NamespaceIds`), or its name as `Namespace`"
    )]
    UnknownNamespaceId { id: String },
    #[error(
        "NamespaceId '{id}' ({bytes} bytes) is refused: a namespace id is 1 to \
         {MAX_NAMESPACE_BYTES} bytes of A-Z a-z 0-9 _ -"
    )]
    BadNamespaceId { id: String, bytes: usize },
    #[error("{0}")]
    Registry(#[from] zae_provisioner::init::RegistryError),
    #[error("restoring the version record: {0}")]
    Unstamp(#[source] StoreError),
    #[error("looking up namespace '{name}': {source}")]
    Lookup {
        name: String,
        #[source]
        source: StoreError,
    },
    #[error(
        "namespace {namespace} is managed by another custom resource ({owner}); delete that \
         resource or point this one at another namespace"
    )]
    Owned { namespace: String, owner: String },
    #[error("no TableName property and no TABLE_NAME in the environment")]
    NoTable,
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Refused(Vec<CfnError>),
    #[error("{failed} of the request's config writes failed: {}", errors.join("; "))]
    ConfigWrites { failed: usize, errors: Vec<String> },
}

/// The common fields of the three request types.
#[derive(Debug, Clone)]
pub struct Envelope {
    pub kind: &'static str,
    /// `Custom::ZaeLimiterLimits`, or the stack's own `Custom::ZaeLimiterTable`.
    pub resource_type: String,
    pub request_id: String,
    pub response_url: String,
    pub stack_id: String,
    pub logical_resource_id: String,
    pub physical_resource_id: Option<String>,
    pub properties: Tree,
    /// An Update's `OldResourceProperties`; null otherwise.
    pub old_properties: Tree,
}

/// An [`Envelope`] from request `$r` of type `$kind`: the three request
/// types are distinct structs that name their shared fields alike.
macro_rules! envelope {
    ($kind:literal, $r:ident, $physical:expr, $old:expr) => {
        Envelope {
            kind: $kind,
            resource_type: $r.resource_type,
            request_id: $r.request_id,
            response_url: $r.response_url,
            stack_id: $r.stack_id,
            logical_resource_id: $r.logical_resource_id,
            physical_resource_id: $physical,
            properties: $r.resource_properties,
            old_properties: $old,
        }
    };
}

impl Envelope {
    /// `None` for a request type this build does not know.
    pub fn from_request(request: Request) -> Option<Envelope> {
        Some(match request {
            CloudFormationCustomResourceRequest::Create(r) => {
                envelope!("Create", r, None, Tree::Null)
            }
            CloudFormationCustomResourceRequest::Update(r) => envelope!(
                "Update",
                r,
                Some(r.physical_resource_id),
                r.old_resource_properties
            ),
            CloudFormationCustomResourceRequest::Delete(r) => {
                envelope!("Delete", r, Some(r.physical_resource_id), Tree::Null)
            }
            _ => return None,
        })
    }

    /// `<StackId>|<LogicalResourceId>`: which resource owns a namespace.
    pub fn owner(&self) -> String {
        format!("{}|{}", self.stack_id, self.logical_resource_id)
    }

    /// `ServiceTimeout`: how long CloudFormation waits for this request's
    /// answer before it fails the resource (1 to 3,600 s; CloudFormation's
    /// 3,600 when absent or unreadable).
    pub fn service_timeout(&self) -> std::time::Duration {
        let seconds = self
            .text("ServiceTimeout")
            .and_then(|text| text.parse::<u64>().ok())
            .map_or(MAX_SERVICE_TIMEOUT_S, |s| s.clamp(1, MAX_SERVICE_TIMEOUT_S));
        std::time::Duration::from_secs(seconds)
    }

    fn property(&self, name: &str) -> Option<&Tree> {
        match &self.properties {
            Tree::Mapping(map) => map.get(name).filter(|v| !matches!(v, Tree::Null)),
            _ => None,
        }
    }

    fn text(&self, name: &str) -> Option<String> {
        match self.property(name)? {
            Tree::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
            Tree::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

/// How a request was answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub success: bool,
    pub reason: String,
    pub physical_id: String,
    pub data: Value,
    /// Fan-outs stopped at the deadline: the follow-up invocation that
    /// should go on with them.
    pub follow_up: Option<Continuation>,
}

/// The physical id a FAILED answer must carry once the request may have
/// written, its ownership claim included: [`handle`] fills it before the
/// first write, and whoever answers a failure (an error, the deadline, a
/// caught panic) reads it, so that CloudFormation's rollback Delete undoes
/// the write. Shared because the work runs as its own task, which a
/// deadline abandons and a panic ends.
#[derive(Debug, Clone, Default)]
pub struct RollbackId(Arc<OnceLock<String>>);

impl RollbackId {
    pub fn get(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }

    fn set(&self, id: String) {
        // One request writes one namespace: a second value never differs.
        let _ = self.0.set(id);
    }
}

/// A namespace's two physical ids: the one a resource that applied it
/// answers, and the one a request that failed after it may have written
/// answers. A Delete of the first wipes unless another resource owns the
/// namespace (a resource from before owners were recorded owns nothing);
/// a Delete of the second only when this very resource owns it.
struct Ids {
    real: String,
    failed: String,
}

impl Ids {
    fn new(table: &str, namespace: &str) -> Ids {
        let real = physical_id(table, namespace);
        Ids {
            failed: format!("{real}{FAILED_SUFFIX}"),
            real,
        }
    }

    /// The id of a request that succeeded: a resource that carries the
    /// failed id keeps it, else its rollback Delete (of that id, sent after
    /// the change of id) would wipe what this request has just applied.
    fn succeeded(&self, envelope: &Envelope) -> String {
        match envelope.physical_resource_id.as_deref() {
            Some(id) if id == self.failed => self.failed.clone(),
            _ => self.real.clone(),
        }
    }

    /// The id of a request that failed after it may have written: the
    /// resource's own when it already manages this namespace (its rollback
    /// Update puts its properties back), else the failed id, whose rollback
    /// Delete undoes the claim (a Create, or an Update to another namespace).
    fn failed(&self, envelope: &Envelope) -> String {
        match envelope.physical_resource_id.as_deref() {
            Some(id) if id == self.real || id == self.failed => id.to_owned(),
            _ => self.failed.clone(),
        }
    }
}

impl Outcome {
    pub fn failed(envelope: &Envelope, reason: impl Into<String>) -> Outcome {
        let physical_id = match &envelope.physical_resource_id {
            Some(id) if !id.is_empty() => id.clone(),
            _ => format!("{FAILED_CREATE_PREFIX}{}", envelope.request_id),
        };
        Outcome {
            success: false,
            reason: reason.into(),
            physical_id,
            data: json!({}),
            follow_up: None,
        }
    }

    /// The PUT body, cut to CloudFormation's limit: change lists go first,
    /// then the error list, then the reason.
    pub fn body(&self, envelope: &Envelope) -> String {
        let mut data = self.data.clone();
        let mut reason = self.reason.clone();
        loop {
            let body = json!({
                "Status": if self.success { "SUCCESS" } else { "FAILED" },
                "Reason": reason,
                "PhysicalResourceId": self.physical_id,
                "StackId": envelope.stack_id,
                "RequestId": envelope.request_id,
                "LogicalResourceId": envelope.logical_resource_id,
                "NoEcho": false,
                "Data": data,
            })
            .to_string();
            if body.len() <= MAX_RESPONSE_BYTES {
                return body;
            }
            if !shrink_list(&mut data, "changes") && !shrink_list(&mut data, "errors") {
                // Only the request's own fields are left: nothing more to cut.
                if reason.is_empty() && data == json!({}) {
                    return body;
                }
                if reason == TRUNCATED {
                    reason.clear();
                    data = json!({});
                    continue;
                }
                let excess = body.len() - MAX_RESPONSE_BYTES + 32;
                let keep = reason.len().saturating_sub(excess);
                let mut cut = keep;
                while !reason.is_char_boundary(cut) {
                    cut -= 1;
                }
                reason.truncate(cut);
                reason.push_str(TRUNCATED);
                if keep == 0 {
                    data = json!({});
                }
            }
        }
    }
}

/// Halves a list in `Data`, recording how many entries were dropped.
fn shrink_list(data: &mut Value, field: &str) -> bool {
    let Some(list) = data.get_mut(field).and_then(Value::as_array_mut) else {
        return false;
    };
    if list.is_empty() {
        return false;
    }
    let keep = list.len() / 2;
    let dropped = list.len() - keep;
    list.truncate(keep);
    let key = format!("{field}_omitted");
    let before = data.get(&key).and_then(Value::as_u64).unwrap_or(0);
    data[key] = json!(before + dropped as u64);
    true
}

/// Resolves the namespace id: `NamespaceId`, else the registry entry of
/// `Namespace` (default `default`). `NamespaceId` is taken only when the
/// registry holds it (`#NSID#<id>`): a typo would otherwise write config,
/// and claim it, where no client ever reads. A Delete of an id the registry
/// no longer holds (or is purging) finds nothing to remove, and writes
/// nothing into the dead partition.
pub async fn namespace_id(
    store: &impl Store,
    envelope: &Envelope,
) -> Result<Option<String>, CfnError> {
    if let Some(id) = envelope.text("NamespaceId") {
        if envelope.kind == "Delete" {
            return live_namespace_id(store, id).await;
        }
        return registered_namespace_id(store, id).await;
    }
    let name = envelope
        .text("Namespace")
        .unwrap_or_else(|| "default".into());
    registered_id(store, &name)
        .await
        .map_err(|source| CfnError::Lookup { name, source })
}

/// `NamespaceId` when it has the client's shape and the registry holds it.
async fn registered_namespace_id(
    store: &impl Store,
    id: String,
) -> Result<Option<String>, CfnError> {
    check_namespace_id(&id)?;
    match id_entry(store, &id).await? {
        Some(_) => Ok(Some(id)),
        None => Err(CfnError::UnknownNamespaceId { id }),
    }
}

/// A Delete's `NamespaceId`, while the registry holds it and the client is
/// not purging it; `None` otherwise (no id of another shape was ever ours).
async fn live_namespace_id(store: &impl Store, id: String) -> Result<Option<String>, CfnError> {
    if check_namespace_id(&id).is_err() {
        return Ok(None);
    }
    let entry = id_entry(store, &id).await?;
    Ok(entry
        .filter(|entry| !zae_table::registry::purging(entry))
        .map(|_| id))
}

/// The registry's entry for a namespace id (`#NSID#<id>`).
async fn id_entry(store: &impl Store, id: &str) -> Result<Option<zae_table::Item>, CfnError> {
    store
        .get(&keys::pk_registry(), &keys::sk_namespace_id(id), true)
        .await
        .map_err(|source| CfnError::Lookup {
            name: id.to_owned(),
            source,
        })
}

/// An id not of the client's shape would build keys (and a physical id) of
/// another shape, so it is refused before any read.
fn check_namespace_id(id: &str) -> Result<(), CfnError> {
    if zae_table::names::is_namespace_id(id) {
        return Ok(());
    }
    Err(CfnError::BadNamespaceId {
        id: shown(id),
        bytes: id.len(),
    })
}

/// An id as a message shows it: its first 40 characters.
fn shown(id: &str) -> String {
    let shown: String = id.chars().take(40).collect();
    let cut = if shown.len() < id.len() { "…" } else { "" };
    format!("{shown}{cut}")
}

pub fn physical_id(table: &str, namespace: &str) -> String {
    format!("{table}/{namespace}/limits-provisioner")
}

pub fn table_name(envelope: &Envelope, default: Option<&str>) -> Result<String, CfnError> {
    envelope
        .text("TableName")
        .or(default.map(str::to_owned))
        .ok_or(CfnError::NoTable)
}

/// Handles one request against `store` (already bound to the request's
/// table). Never answers; [`answer`] does. Before its first write it puts
/// in `rollback` the id a failure must answer with.
pub async fn handle(
    store: &impl Store,
    envelope: &Envelope,
    table: &str,
    caller: &Caller,
    rollback: &RollbackId,
) -> Result<Outcome, CfnError> {
    if envelope.resource_type == table::RESOURCE_TYPE {
        let now_ms = chrono::Utc::now().timestamp_millis();
        return table::handle(store, envelope, table, now_ms).await;
    }
    let delete = envelope.kind == "Delete";
    let namespace = match target(store, envelope, table).await {
        Ok(Target::Namespace(namespace)) => namespace,
        Ok(Target::Done(outcome)) => return Ok(outcome),
        Err(err) if delete => return Err(err),
        // No namespace to check against: the declaration is checked under
        // a stand-in name, for its own problems.
        Err(err) => return Err(refused(err, envelope, "default")),
    };
    let ids = Ids::new(table, &namespace);
    let provisioner = Provisioner {
        store,
        namespace: &namespace,
    };
    // Another apply rewrote the record between this request's read and its
    // first write, which therefore wrote nothing: read again and go on.
    let mut attempt = 1;
    loop {
        match read_and_apply(&provisioner, envelope, (&ids, table), caller, rollback).await {
            Err(CfnError::Apply(ApplyError::RecordMoved { .. })) if attempt < RECORD_ATTEMPTS => {
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

/// How often a request reads the record again when another apply rewrote
/// it before this request's first write.
const RECORD_ATTEMPTS: usize = 3;

/// One attempt of a limits request: the record read once, the ownership
/// check, the plan and the apply.
async fn read_and_apply(
    provisioner: &Provisioner<'_, impl Store>,
    envelope: &Envelope,
    (ids, table): (&Ids, &str),
    caller: &Caller,
    rollback: &RollbackId,
) -> Result<Outcome, CfnError> {
    let delete = envelope.kind == "Delete";
    let namespace = provisioner.namespace;
    // Read once: the ownership check and the plan share it.
    let state = provisioner.read_state().await?;
    let me = envelope.owner();
    let (manifest, full) = if delete {
        if let Some(why) = refuse_delete(envelope, ids, namespace, state.owner.as_deref()) {
            return Ok(skipped(envelope, &why));
        }
        (Manifest::empty(namespace), false)
    } else {
        claimed_manifest(envelope, namespace, state.owner.as_deref())?
    };
    let caller = Caller {
        // Only the owner (or nobody) gets this far with a Delete.
        ownership: if delete {
            Ownership::Release(me)
        } else {
            Ownership::Claim(me)
        },
        ..caller.clone()
    };
    let mut plan = provisioner.plan_from(state, &manifest, full).await?;
    if delete && envelope.physical_resource_id.as_deref() == Some(ids.failed.as_str()) {
        only_what_it_created(&mut plan);
    }
    if !delete {
        rollback.set(ids.failed(envelope));
    }
    let report = match provisioner.apply_plan(&manifest, plan, &caller).await {
        // Claimed by another resource after the read: its claim stands.
        Err(ApplyError::Owned { namespace }) if delete => {
            let why = format!(
                "namespace {namespace} was claimed by another custom resource while this \
                 Delete ran; nothing deleted"
            );
            return Ok(skipped(envelope, &why));
        }
        // A purge begun since the registry read: the partition is going.
        Err(ApplyError::Purging { namespace }) if delete => {
            let why = format!(
                "namespace {namespace} is being purged; its #PROVISIONER record was not written"
            );
            return Ok(skipped(envelope, &why));
        }
        report => report?,
    };
    succeeded(envelope, ids, table, report)
}

/// The rollback of a request that failed after its claim undoes what that
/// request wrote and nothing more: it deletes the levels (and the adaptive
/// declaration) no item held before the claim, and puts back the managed
/// set and hash the claim found. Levels it overwrote keep the values it
/// wrote, managed again by whoever managed them before (docs/provisioner.md
/// says why). A claim recorded without what it found (an earlier build's)
/// deletes nothing.
fn only_what_it_created(plan: &mut zae_provisioner::apply::Plan) {
    let found = plan.state.rollback.clone().unwrap_or_else(|| Rollback {
        managed: plan.state.managed.clone(),
        applied_hash: plan.state.applied_hash.clone(),
        ..Rollback::default()
    });
    let created: std::collections::BTreeSet<zae_table::Level> =
        found.created.levels().into_iter().collect();
    plan.changes
        .retain(|change| created.contains(&change.level));
    if !found.adaptive_created {
        plan.adaptive = None;
    }
    plan.restore = Some(found);
}

/// Where a request goes: its namespace, or the answer when there is none
/// to go to.
enum Target {
    Namespace(String),
    Done(Outcome),
}

/// The request's namespace; a Delete with nothing left to remove (a
/// marker id, a table or namespace gone) is answered at once.
async fn target(store: &impl Store, envelope: &Envelope, table: &str) -> Result<Target, CfnError> {
    let delete = envelope.kind == "Delete";
    let marker = envelope
        .physical_resource_id
        .as_deref()
        .is_some_and(|id| id == REFERENCE_FAILED_ID || id.starts_with(FAILED_CREATE_PREFIX));
    if delete && marker {
        let why = "the Create this Delete rolls back wrote nothing";
        return Ok(Target::Done(skipped(envelope, why)));
    }
    let name = || {
        envelope
            .text("Namespace")
            .unwrap_or_else(|| "default".into())
    };
    match namespace_id(store, envelope).await {
        Ok(Some(namespace)) => Ok(Target::Namespace(namespace)),
        // The table went first (its stack was deleted): nothing is left to remove.
        Err(CfnError::Lookup {
            source: StoreError::TableMissing { .. },
            ..
        }) if delete => {
            let why = format!("table '{table}' no longer exists");
            Ok(Target::Done(skipped(envelope, &why)))
        }
        Err(err) => Err(err),
        Ok(None) if delete => {
            let why = match envelope.text("NamespaceId") {
                Some(id) => format!(
                    "namespace id '{}' is no longer in the table's registry; nothing written",
                    shown(&id)
                ),
                None => format!("namespace '{}' no longer exists", name()),
            };
            Ok(Target::Done(skipped(envelope, &why)))
        }
        Ok(None) => Err(CfnError::UnknownNamespace {
            name: name(),
            table: table.to_owned(),
        }),
    }
}

/// The answer to an apply that ran: FAILED when the change the stack asked
/// for did not happen, never SUCCESS. Fan-out problems alone are answered
/// SUCCESS, with the pending work recorded.
fn succeeded(
    envelope: &Envelope,
    ids: &Ids,
    table: &str,
    report: Report,
) -> Result<Outcome, CfnError> {
    if report.config_errors > 0 {
        let errors = report.errors.clone().unwrap_or_default();
        return Err(CfnError::ConfigWrites {
            failed: report.config_errors,
            errors: errors.into_iter().take(report.config_errors).collect(),
        });
    }
    Ok(Outcome {
        success: true,
        reason: reason_for(&report),
        physical_id: ids.succeeded(envelope),
        data: serde_json::to_value(&report).unwrap_or_else(|_| json!({})),
        follow_up: (report.stopped > 0)
            .then(|| Continuation::first(table, report.namespace.clone())),
    })
}

/// Why a Delete must wipe nothing: the resource does not manage this
/// namespace, another resource now does, or (the failed id) the request it
/// rolls back left this resource no claim to undo.
fn refuse_delete(
    envelope: &Envelope,
    ids: &Ids,
    namespace: &str,
    owner: Option<&str>,
) -> Option<String> {
    let me = envelope.owner();
    let id = envelope.physical_resource_id.as_deref();
    if id == Some(ids.failed.as_str()) && owner != Some(me.as_str()) {
        return Some(format!(
            "the request this Delete rolls back holds no claim on namespace {namespace}; \
             nothing deleted"
        ));
    }
    if id != Some(ids.real.as_str()) && id != Some(ids.failed.as_str()) {
        return Some(format!(
            "this resource does not manage {}; nothing deleted",
            ids.real
        ));
    }
    owner
        .filter(|owner| *owner != me)
        .map(|owner| format!("namespace {namespace} is now managed by {owner}; nothing deleted"))
}

/// The custom resource's top-level properties: the manifest's sections and
/// where it goes.
const PROPERTIES: [&str; 9] = [
    "ServiceToken",
    "ServiceTimeout",
    "TableName",
    "Namespace",
    "NamespaceId",
    "FullApply",
    "System",
    "Resources",
    "Entities",
];

/// Top-level properties this resource does not know, that the request
/// introduces (an Update's old properties already carried the others, so a
/// stack can always roll back).
fn unknown_properties(envelope: &Envelope, allowed: &[&str]) -> Vec<Problem> {
    let keys = |tree: &Tree| -> Vec<String> {
        match tree {
            Tree::Mapping(map) => map
                .keys()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        }
    };
    let old = keys(&envelope.old_properties);
    keys(&envelope.properties)
        .into_iter()
        .filter(|key| !allowed.contains(&key.as_str()) && !old.contains(key))
        .map(|key| {
            let near = zae_provisioner::suggest::closest(&key, allowed.iter().copied())
                .map(|near| format!(" (did you mean '{near}'?)"))
                .unwrap_or_default();
            Problem::new(
                &Path::root(),
                format!(
                    "unknown property '{key}'{near}; allowed: {} (a misspelt section would \
                     otherwise be read as empty, and its levels deleted)",
                    allowed.join(", ")
                ),
            )
        })
        .collect()
}

/// The manifest the request's properties declare, validated.
fn declared_manifest(envelope: &Envelope, namespace: &str) -> Result<Manifest, CfnError> {
    let unknown = unknown_properties(envelope, &PROPERTIES);
    if !unknown.is_empty() {
        return Err(CfnError::Invalid(Invalid {
            problems: unknown,
            spelling: Spelling::CloudFormation,
        }));
    }
    Ok(parse_properties(&envelope.properties, namespace)?)
}

/// The manifest and `FullApply` a Create or Update declares, or every
/// problem found in them.
fn declared(envelope: &Envelope, namespace: &str) -> Result<(Manifest, bool), Vec<CfnError>> {
    match (declared_manifest(envelope, namespace), full_apply(envelope)) {
        (Ok(manifest), Ok(full)) => Ok((manifest, full)),
        (manifest, full) => Err(manifest.err().into_iter().chain(full.err()).collect()),
    }
}

/// What a Create or Update applies; refused, with every problem found,
/// when another resource owns the namespace or the declaration is bad.
fn claimed_manifest(
    envelope: &Envelope,
    namespace: &str,
    owner: Option<&str>,
) -> Result<(Manifest, bool), CfnError> {
    match owner.filter(|owner| *owner != envelope.owner()) {
        Some(owner) => {
            let owned = CfnError::Owned {
                namespace: namespace.to_owned(),
                owner: owner.to_owned(),
            };
            Err(refused(owned, envelope, namespace))
        }
        None => declared(envelope, namespace).map_err(CfnError::all),
    }
}

/// A Create's or Update's refusal before its first write, with every
/// problem of its declaration beside it: an operator fixing one should not
/// meet the next on the next deploy.
fn refused(first: CfnError, envelope: &Envelope, namespace: &str) -> CfnError {
    let mut all = vec![first];
    if let Err(problems) = declared(envelope, namespace) {
        all.extend(problems);
    }
    CfnError::all(all)
}

impl CfnError {
    /// One refusal as itself, several as one.
    fn all(mut refusals: Vec<CfnError>) -> CfnError {
        match (refusals.len(), refusals.pop()) {
            (1, Some(only)) => only,
            (_, last) => {
                refusals.extend(last);
                CfnError::Refused(refusals)
            }
        }
    }
}

/// `FullApply`, for a Create or an Update.
fn full_apply(envelope: &Envelope) -> Result<bool, CfnError> {
    match (envelope.kind, envelope.property("FullApply")) {
        ("Delete", _) | (_, None) => Ok(false),
        (_, Some(value)) => {
            coerce_bool(value, &Path::root().field("full_apply")).map_err(|problem| {
                CfnError::Invalid(Invalid {
                    problems: vec![problem],
                    spelling: Spelling::CloudFormation,
                })
            })
        }
    }
}

fn reason_for(report: &Report) -> String {
    let errors = report.errors.as_ref().map_or(0, Vec::len);
    let mut reason = format!(
        "{} created, {} updated, {} deleted, {} unchanged; {} fan-out(s) pending; {} error(s)",
        report.created.unwrap_or(0),
        report.updated.unwrap_or(0),
        report.deleted.unwrap_or(0),
        report.unchanged,
        report.pending,
        errors
    );
    if report.stopped > 0 {
        reason.push_str(&format!(
            "; {} fan-out(s) stopped at the deadline with their place recorded",
            report.stopped
        ));
    }
    reason
}

fn skipped(envelope: &Envelope, why: &str) -> Outcome {
    Outcome {
        success: true,
        reason: why.to_owned(),
        physical_id: envelope
            .physical_resource_id
            .clone()
            .unwrap_or_else(|| format!("{FAILED_CREATE_PREFIX}{}", envelope.request_id)),
        data: json!({}),
        follow_up: None,
    }
}

#[cfg(test)]
mod tests;
