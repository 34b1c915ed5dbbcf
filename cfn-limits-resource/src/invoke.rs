//! The direct-invoke protocol of the Python CLI (`zae-limiter limits plan |
//! apply | diff`): `{action, table_name, namespace_id, manifest, full}` in,
//! the plan or apply report out. An error becomes the Lambda error payload,
//! whose `errorMessage` the CLI prints.

use serde_json::Value;
use yaml_serde::Value as Tree;
use zae_provisioner::apply::gate::GateError;
use zae_provisioner::apply::state::namespace_id;
use zae_provisioner::apply::{ApplyError, Caller, Provisioner, Report};
use zae_provisioner::manifest::Manifest;
use zae_provisioner::manifest::problem::{Invalid, Path, Problem, Spelling};
use zae_table::store::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("{0}")]
    Invalid(#[from] Invalid),
    #[error("{0}")]
    Apply(#[from] ApplyError),
    #[error("the request names no table (table_name) and TABLE_NAME is not set")]
    NoTable,
    #[error(
        "namespace '{0}' is not registered in this table; `zae-limiter limits apply` registers it"
    )]
    UnknownNamespace(String),
    #[error("looking up namespace '{name}': {source}")]
    Lookup {
        name: String,
        #[source]
        source: StoreError,
    },
    #[error("the request must be a JSON object, got {0}")]
    NotAnObject(&'static str),
}

impl InvokeError {
    /// The Lambda error's `errorType`: stable, documented names.
    pub fn error_type(&self) -> &'static str {
        match self {
            InvokeError::Invalid(_) => "InvalidManifest",
            InvokeError::Apply(ApplyError::Gate(GateError::Behind { .. })) => "VersionMismatch",
            InvokeError::Apply(ApplyError::OutOfTime { .. }) => "OutOfTime",
            InvokeError::Apply(_) | InvokeError::Lookup { .. } => "TableError",
            InvokeError::NoTable | InvokeError::NotAnObject(_) => "InvalidRequest",
            InvokeError::UnknownNamespace(_) => "UnknownNamespace",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct InvokeRequest {
    pub plan_only: bool,
    pub table: String,
    pub namespace_id: Option<String>,
    pub manifest: Tree,
    pub full: bool,
}

impl InvokeRequest {
    /// Reads the payload the way the 0.17.0 provisioner does: any action
    /// other than `plan` applies, and only a JSON `true` turns on `full`.
    pub fn parse(
        payload: &Value,
        default_table: Option<&str>,
    ) -> Result<InvokeRequest, InvokeError> {
        let Some(map) = payload.as_object() else {
            return Err(InvokeError::NotAnObject(json_type(payload)));
        };
        let text = |key: &str| match map.get(key) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            _ => None,
        };
        let action = text("action").unwrap_or_else(|| "plan".into());
        // The manifest walker reads the YAML crate's tree; JSON is its subset.
        let manifest = match map.get("manifest") {
            None | Some(Value::Null) => Tree::Null,
            Some(value) => {
                serde::Deserialize::deserialize(value).map_err(|e: serde_json::Error| {
                    InvokeError::Invalid(Invalid {
                        problems: vec![Problem::new(&Path::root(), format!("manifest: {e}"))],
                        spelling: Spelling::Yaml,
                    })
                })?
            }
        };
        Ok(InvokeRequest {
            plan_only: action == "plan",
            table: text("table_name")
                .or(default_table.map(str::to_owned))
                .ok_or(InvokeError::NoTable)?,
            namespace_id: text("namespace_id"),
            manifest,
            full: matches!(map.get("full"), Some(Value::Bool(true))),
        })
    }
}

/// What a JSON value is, in the words the Python CLI's users know.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "list",
        Value::Object(_) => "a mapping",
    }
}

pub async fn handle(
    store: &impl Store,
    request: &InvokeRequest,
    caller: &Caller,
) -> Result<Report, InvokeError> {
    let manifest = match &request.manifest {
        Tree::Null => Manifest::parse(&Tree::Mapping(Default::default()), Spelling::Yaml)?,
        tree => Manifest::parse(tree, Spelling::Yaml)?,
    };
    // An empty id would write under `/SYSTEM#`; resolve the manifest's name instead.
    let namespace = match &request.namespace_id {
        Some(id) => id.clone(),
        None => namespace_id(store, &manifest.namespace)
            .await
            .map_err(|source| InvokeError::Lookup {
                name: manifest.namespace.clone(),
                source,
            })?
            .ok_or_else(|| InvokeError::UnknownNamespace(manifest.namespace.clone()))?,
    };
    let provisioner = Provisioner {
        store,
        namespace: &namespace,
    };
    if request.plan_only {
        Ok(provisioner.plan(&manifest, request.full).await?.report())
    } else {
        Ok(provisioner.apply(&manifest, request.full, caller).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_reads_like_the_references() {
        let payload: Value = serde_json::from_str(
            r#"{"action": "apply", "table_name": "t", "namespace_id": "", "manifest": {"namespace": "a"}, "full": "true"}"#,
        )
        .unwrap();
        let request = InvokeRequest::parse(&payload, None).unwrap();
        assert!(!request.plan_only);
        assert_eq!(request.namespace_id, None);
        assert!(!request.full, "only a JSON true turns on a full apply");
        let plan = InvokeRequest::parse(&serde_json::json!({}), Some("env")).unwrap();
        assert!(plan.plan_only);
        assert_eq!(plan.table, "env");
        assert!(matches!(
            InvokeRequest::parse(&serde_json::json!([]), Some("t")),
            Err(InvokeError::NotAnObject("list"))
        ));
        assert!(matches!(
            InvokeRequest::parse(&serde_json::json!({}), None),
            Err(InvokeError::NoTable)
        ));
    }
}
