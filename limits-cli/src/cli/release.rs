//! `zae-limits release-owner`: the way out when the custom resource that
//! owns a namespace is gone without releasing it (its stack deleted with the
//! Delete failing, or a version whose failed Create kept its claim). Nothing
//! else releases another resource's claim: the operator names the namespace,
//! sees the owner, and confirms.

use super::args::Namespace;
use super::error::{CliError, Kind};
use super::{Ended, open, resolve_namespace};
use std::io::{BufRead, IsTerminal, Write};
use zae_table::Attr;
use zae_table::keys;
use zae_table::provisioner::{CFN_OWNER, CFN_ROLLBACK, State};
use zae_table::store::{Returns, Store, StoreError, UpdateBuilder};

pub async fn release_owner(at: &Namespace, yes: bool) -> Result<Ended, CliError> {
    let store = open(&at.table).await;
    let table = at.table.table_name();
    let id = resolve_namespace(&store, &at.namespace, at.namespace_id.as_ref(), table).await?;
    release(&store, &id, |owner| if yes { Ok(true) } else { ask(owner) }).await
}

/// Releases `namespace` from its owner once `confirm` agrees, with one
/// write conditional on that very owner: a claim made meanwhile stays.
pub async fn release<S: Store>(
    store: &S,
    namespace: &str,
    confirm: impl FnOnce(&str) -> Result<bool, CliError>,
) -> Result<Ended, CliError> {
    let pk = keys::pk_system(namespace);
    let record = store
        .get(&pk, keys::SK_PROVISIONER, true)
        .await
        .map_err(|e| CliError::aws("reading the #PROVISIONER record", &e))?;
    let Some(owner) = State::decode(record.as_ref()).owner else {
        println!("Namespace {namespace} has no owning custom resource: nothing to release.");
        return Ok(Ended::Clean);
    };
    let (stack, logical) = owner.rsplit_once('|').unwrap_or((owner.as_str(), "?"));
    eprintln!(
        "Namespace {namespace} is owned by the custom resource {logical} of stack\n  {stack}\n\
         Releasing it lets another stack's resource claim the namespace (and delete the levels \
         its manifest omits); the levels stay as they are. This tool does not check that the \
         stack is gone: release only the owner of a stack that no longer exists."
    );
    if !confirm(&owner)? {
        return Err(CliError::new(
            Kind::Refused,
            "not confirmed: nothing released",
        ));
    }
    let mut update = UpdateBuilder::new();
    update.remove(CFN_OWNER);
    // What the owner's rollback could undo goes with the owner.
    update.remove(CFN_ROLLBACK);
    let (o, was) = (update.name(CFN_OWNER), update.value(Attr::s(&owner)));
    let condition = format!("{o} = {was}");
    match store
        .update(
            &update.build(&pk, keys::SK_PROVISIONER, Some(condition)),
            Returns::Nothing,
        )
        .await
    {
        Ok(_) => {
            println!("Namespace {namespace} released from {owner}.");
            Ok(Ended::Clean)
        }
        Err(StoreError::ConditionFailed { .. }) => Err(CliError::new(
            Kind::Refused,
            format!(
                "the owner of namespace {namespace} changed since it was read; nothing released \
                 (run again to see who owns it now)"
            ),
        )),
        Err(e) => Err(CliError::aws("releasing the owner", &e)),
    }
}

/// Asks on the terminal; without one, refuses rather than guess.
fn ask(owner: &str) -> Result<bool, CliError> {
    if !std::io::stdin().is_terminal() {
        return Err(CliError::new(
            Kind::Usage,
            format!("no terminal to confirm releasing {owner} on: pass --yes to release it"),
        ));
    }
    eprint!("Release it? Type 'yes' to confirm: ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| CliError::new(Kind::Usage, format!("reading the answer: {e}")))?;
    Ok(answer.trim() == "yes")
}
