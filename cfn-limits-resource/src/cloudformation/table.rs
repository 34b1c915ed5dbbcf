//! `Custom::ZaeLimiterTable`: the stack's own resource that makes its table
//! usable the moment it is deployed. Create and Update stamp the version
//! record for these Lambdas and register the `Namespaces` property's
//! namespaces (`default` unless given), as the client's `Repository.open`
//! would. Everything is checked before the first write, and the stamp is
//! the last one: a failed Create leaves the version record as it was. The
//! stamp records its owner (this resource: stack id and logical id); a
//! second stack's resource on a stamped table fails naming it. Delete puts
//! the version stamp back to the Python Lambdas' 0.17.0 only when this
//! resource owns it, and keeps the namespaces: they are the tenants' data,
//! and the table outlives the stack.

use super::{CfnError, Envelope, Outcome, skipped, unknown_properties};
use serde_json::json;
use yaml_serde::Value as Tree;
use zae_provisioner::init::{self, LAMBDA_VERSION_STAMP};
use zae_provisioner::manifest::problem::{Invalid, Path, Problem, Spelling};
use zae_table::store::{Store, StoreError};

pub const RESOURCE_TYPE: &str = "Custom::ZaeLimiterTable";
/// `Version` is the template's release: read by nobody, it changes with each
/// release so that an upgrade sends this resource an Update, which stamps
/// the new build.
const PROPERTIES: [&str; 5] = [
    "ServiceToken",
    "ServiceTimeout",
    "TableName",
    "Namespaces",
    "Version",
];

pub fn physical_id(table: &str) -> String {
    format!("{table}/table")
}

/// Who the version record says stamped it.
fn stamped_by() -> String {
    format!(
        "{}{LAMBDA_VERSION_STAMP}",
        zae_table::registry::STACK_STAMP_PREFIX
    )
}

pub async fn handle(
    store: &impl Store,
    envelope: &Envelope,
    table: &str,
    now_ms: i64,
) -> Result<Outcome, CfnError> {
    let id = physical_id(table);
    if envelope.kind == "Delete" {
        if envelope.physical_resource_id.as_deref() != Some(id.as_str()) {
            return Ok(skipped(envelope, "this resource never initialised a table"));
        }
        let owner = envelope.owner();
        let why = match init::unstamp(store, &stamped_by(), Some(&owner), now_ms).await {
            Ok(true) => "version record back to the Python Lambdas' 0.17.0; namespaces kept",
            Ok(false) => {
                "version record not this resource's (another owns it, or it was stamped since): left as it is"
            }
            Err(StoreError::TableMissing { .. }) => "the table no longer exists",
            Err(e) => return Err(CfnError::Unstamp(e)),
        };
        return Ok(skipped(envelope, why));
    }
    let problems = unknown_properties(envelope, &PROPERTIES);
    if !problems.is_empty() {
        return Err(invalid(problems));
    }
    let names = namespaces(envelope.property("Namespaces")).map_err(|p| invalid(vec![p]))?;
    let (by, owner) = (stamped_by(), envelope.owner());
    // Only this stack's own Update adopts a stamp made before owners existed.
    let adopt =
        envelope.kind == "Update" && envelope.physical_resource_id.as_deref() == Some(id.as_str());
    let stamper = init::Stamper::Stack {
        by: &by,
        owner: &owner,
        adopt,
    };
    let registered = init::initialise(store, &names, &stamper, now_ms).await?;
    let created: Vec<&str> = registered
        .iter()
        .filter(|r| r.created)
        .map(|r| r.name.as_str())
        .collect();
    let ids: serde_json::Map<String, serde_json::Value> = registered
        .iter()
        .map(|r| (r.name.clone(), json!(r.id)))
        .collect();
    Ok(Outcome {
        success: true,
        reason: format!(
            "version record stamped {LAMBDA_VERSION_STAMP}; {} namespace(s) registered{}",
            created.len(),
            if created.is_empty() {
                String::new()
            } else {
                format!(" ({})", created.join(", "))
            }
        ),
        physical_id: id,
        data: json!({ "NamespaceIds": ids }),
        follow_up: None,
    })
}

fn invalid(problems: Vec<Problem>) -> CfnError {
    CfnError::Invalid(Invalid {
        problems,
        spelling: Spelling::CloudFormation,
    })
}

/// `Namespaces`: a list, or a comma-separated string (a
/// `CommaDelimitedList` parameter arrives as a list); `default` when absent.
fn namespaces(property: Option<&Tree>) -> Result<Vec<String>, Problem> {
    let path = Path::root().field("namespaces");
    let items: Vec<String> = match property {
        None => return Ok(vec!["default".to_owned()]),
        Some(Tree::String(text)) => text.split(',').map(|s| s.trim().to_owned()).collect(),
        Some(Tree::Sequence(list)) => list
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Tree::String(s) => Ok(s.trim().to_owned()),
                _ => Err(Problem::new(&path.index(i), "must be a namespace name")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(Problem::new(
                &path,
                "must be a list of namespace names, or one comma-separated string",
            ));
        }
    };
    let names: Vec<String> = items.into_iter().filter(|s| !s.is_empty()).collect();
    if names.is_empty() {
        return Err(Problem::new(&path, "names no namespace"));
    }
    Ok(names)
}
