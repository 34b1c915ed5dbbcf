//! The direct-invoke protocol of the Python CLI (`zae-limiter limits plan |
//! apply | diff`): `{action, table_name, namespace_id, manifest, full}` in,
//! the plan or apply report out. An error becomes the Lambda error payload,
//! whose `errorMessage` the CLI prints.

use crate::apply::gate::GateError;
use crate::apply::state::namespace_id;
use crate::apply::{ApplyError, Caller, Provisioner, Report};
use crate::manifest::problem::{Invalid, Spelling};
use crate::manifest::{Manifest, type_name};
use yaml_serde::Value as Tree;
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
        payload: &Tree,
        default_table: Option<&str>,
    ) -> Result<InvokeRequest, InvokeError> {
        let Tree::Mapping(map) = payload else {
            return Err(InvokeError::NotAnObject(type_name(payload)));
        };
        let text = |key: &str| match map.get(key) {
            Some(Tree::String(s)) if !s.is_empty() => Some(s.clone()),
            _ => None,
        };
        let action = text("action").unwrap_or_else(|| "plan".into());
        Ok(InvokeRequest {
            plan_only: action == "plan",
            table: text("table_name")
                .or(default_table.map(str::to_owned))
                .ok_or(InvokeError::NoTable)?,
            namespace_id: text("namespace_id"),
            manifest: map.get("manifest").cloned().unwrap_or(Tree::Null),
            full: matches!(map.get("full"), Some(Tree::Bool(true))),
        })
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
        let payload: Tree = yaml_serde::from_str(
            r#"{"action": "apply", "table_name": "t", "namespace_id": "", "manifest": {"namespace": "a"}, "full": "true"}"#,
        )
        .unwrap();
        let request = InvokeRequest::parse(&payload, None).unwrap();
        assert!(!request.plan_only);
        assert_eq!(request.namespace_id, None);
        assert!(!request.full, "only a JSON true turns on a full apply");
        let plan = InvokeRequest::parse(&yaml_serde::from_str("{}").unwrap(), Some("env")).unwrap();
        assert!(plan.plan_only);
        assert_eq!(plan.table, "env");
        assert!(matches!(
            InvokeRequest::parse(&Tree::Sequence(vec![]), Some("t")),
            Err(InvokeError::NotAnObject("list"))
        ));
        assert!(matches!(
            InvokeRequest::parse(&yaml_serde::from_str("{}").unwrap(), None),
            Err(InvokeError::NoTable)
        ));
    }
}
