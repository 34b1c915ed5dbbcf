//! Making a table usable: the version record stamped for these Lambdas and
//! namespaces registered, as the client's own `Repository.open` would do
//! (layouts in `zae_table::registry`). The stack does it through
//! `Custom::ZaeLimiterTable`, `zae-limits apply --create-namespace` for one
//! namespace; nothing else registers a namespace (a typo must not make one).

use crate::apply::gate::PROTOCOL_VERSION;
use crate::apply::state::namespace_id;
use serde::Serialize;
use zae_table::keys;
use zae_table::registry;
use zae_table::store::{Returns, Store, StoreError};

/// The version these Lambdas stamp (`0.17.0+rust.<build>`): the protocol
/// level they implement, with a local label naming the build. Its release
/// (0.17.0) passes the 0.17.0 client's feature gates and asks it for no
/// Lambda update; being other than exactly `0.17.0`, it also makes
/// `zae-limiter upgrade` leave the stack alone (docs/deploy.md).
pub use zae_table::registry::LAMBDA_VERSION_STAMP;
/// Registration attempts with a fresh id when an id is taken.
const ATTEMPTS: usize = 3;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("namespace name {0:?} is refused: {1}")]
    BadName(String, &'static str),
    #[error("registering namespace '{name}': {source}")]
    Store {
        name: String,
        #[source]
        source: StoreError,
    },
    #[error("stamping the version record: {0}")]
    Stamp(#[source] StoreError),
    #[error("registering namespace '{0}': every new id was taken ({ATTEMPTS} attempts)")]
    IdsTaken(String),
    /// Another stack's resource owns the stamp (or a stack stamped it before
    /// owners existed): only it may stamp or restore the record.
    #[error(
        "the table's version record is stamped by {0}; only that resource may stamp or restore it \
         (an earlier deployment's unowned stamp is adopted by that stack's next Update)"
    )]
    OwnedElsewhere(String),
}

/// Who stamps the version record, and how.
pub enum Stamper<'a> {
    /// `zae-limits init` and `--create-namespace`: no owner.
    Cli(&'a str),
    /// A stack's `Custom::ZaeLimiterTable`: `owner` is `<StackId>|<LogicalResourceId>`;
    /// `adopt` on its Update (an unowned stamp of a stack's becomes its own).
    Stack {
        by: &'a str,
        owner: &'a str,
        adopt: bool,
    },
}

/// A namespace and its id, and whether this call registered it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Registered {
    pub name: String,
    pub id: String,
    pub created: bool,
}

/// Checks every name, registers each namespace that is not registered yet,
/// then stamps the version record (creating it when missing): a name
/// refused, an id taken or a failed call leaves the record as it was.
pub async fn initialise(
    store: &impl Store,
    namespaces: &[String],
    stamper: &Stamper<'_>,
    now_ms: i64,
) -> Result<Vec<Registered>, RegistryError> {
    for name in namespaces {
        check_name(name)?;
    }
    check_stamp(store, stamper).await?;
    let mut registered = Vec::new();
    for name in namespaces {
        registered.push(register(store, name, now_ms).await?);
    }
    stamp(store, stamper, now_ms).await?;
    Ok(registered)
}

async fn stamp(
    store: &impl Store,
    stamper: &Stamper<'_>,
    now_ms: i64,
) -> Result<(), RegistryError> {
    let update = match stamper {
        Stamper::Cli(by) => registry::stamp_version(LAMBDA_VERSION_STAMP, by, now_ms),
        Stamper::Stack { by, owner, adopt } => {
            registry::stamp_version_owned(LAMBDA_VERSION_STAMP, by, owner, *adopt, now_ms)
        }
    };
    match store.update(&update, Returns::Nothing).await {
        Ok(_) => Ok(()),
        Err(StoreError::ConditionFailed { .. }) => Err(RegistryError::OwnedElsewhere(
            stamp_holder(store).await.map_err(RegistryError::Stamp)?,
        )),
        Err(e) => Err(RegistryError::Stamp(e)),
    }
}

/// Before the first registration: a stack's resource may stamp the record
/// (the condition of `stamp_version_owned`, read ahead), so a stamp another
/// resource owns refuses the request before it registers anything. The stamp
/// itself stays conditional, for a stack that stamps in between.
async fn check_stamp(store: &impl Store, stamper: &Stamper<'_>) -> Result<(), RegistryError> {
    let Stamper::Stack { owner, adopt, .. } = stamper else {
        return Ok(());
    };
    let record = store
        .get(&keys::pk_registry(), keys::SK_VERSION, true)
        .await
        .map_err(RegistryError::Stamp)?
        .unwrap_or_default();
    let text = |k: &str| record.get(k).and_then(zae_table::Attr::as_s);
    let held_by = text(registry::STAMP_OWNER);
    let stack_stamped = text(registry::LAMBDA_VERSION).is_some_and(registry::is_our_stamp)
        && text(registry::UPDATED_BY)
            .is_some_and(|by| by.starts_with(registry::STACK_STAMP_PREFIX));
    let free = match held_by {
        Some(holder) => holder == *owner,
        None => *adopt || !stack_stamped,
    };
    if free {
        return Ok(());
    }
    Err(RegistryError::OwnedElsewhere(
        stamp_holder(store).await.map_err(RegistryError::Stamp)?,
    ))
}

/// Who holds the version record's stamp, in words.
async fn stamp_holder(store: &impl Store) -> Result<String, StoreError> {
    let record = store
        .get(&keys::pk_registry(), keys::SK_VERSION, true)
        .await?
        .unwrap_or_default();
    let text = |k: &str| {
        record
            .get(k)
            .and_then(zae_table::Attr::as_s)
            .map(str::to_owned)
    };
    Ok(match text(registry::STAMP_OWNER) {
        Some(owner) => format!("the resource {owner}"),
        None => format!(
            "an earlier deployment ({}) that recorded no owner",
            text(registry::UPDATED_BY).unwrap_or_else(|| "unknown".into())
        ),
    })
}

/// Whether the table has a version record at all (a client or a stack
/// initialised it).
pub async fn initialised(store: &impl Store) -> Result<bool, StoreError> {
    let record = store
        .get(&keys::pk_registry(), keys::SK_VERSION, true)
        .await?;
    Ok(record.is_some())
}

/// Registers `name` unless it is registered; idempotent, and safe against a
/// client registering the same name at the same moment.
pub async fn register(
    store: &impl Store,
    name: &str,
    now_ms: i64,
) -> Result<Registered, RegistryError> {
    check_name(name)?;
    let store_err = |source| RegistryError::Store {
        name: name.to_owned(),
        source,
    };
    let existing = |id: String| Registered {
        name: name.to_owned(),
        id,
        created: false,
    };
    if let Some(id) = namespace_id(store, name).await.map_err(store_err)? {
        return Ok(existing(id));
    }
    for _ in 0..ATTEMPTS {
        let id = registry::new_namespace_id();
        match store
            .transact(&registry::register_namespace(name, &id, now_ms))
            .await
        {
            Ok(()) => {
                return Ok(Registered {
                    name: name.to_owned(),
                    id,
                    created: true,
                });
            }
            // The name's entry is the first write: registered meanwhile.
            Err(StoreError::ConditionFailed { .. }) => {
                if let Some(id) = namespace_id(store, name).await.map_err(store_err)? {
                    return Ok(existing(id));
                }
            }
            // The id's entry: that id is taken; try another.
            Err(StoreError::Cancelled { .. }) => {}
            Err(e) => return Err(store_err(e)),
        }
    }
    Err(RegistryError::IdsTaken(name.to_owned()))
}

/// Puts `lambda_version` back to the protocol level the Python Lambdas
/// stamp, if it still carries a stamp of this project's, any build's (and,
/// with `owner`, is still that resource's); `false` when someone else
/// stamped it since, another resource owns it, or there is no record.
pub async fn unstamp(
    store: &impl Store,
    by: &str,
    owner: Option<&str>,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let update = registry::restore_version(PROTOCOL_VERSION, by, owner, now_ms);
    match store.update(&update, Returns::Nothing).await {
        Ok(_) => Ok(true),
        Err(StoreError::ConditionFailed { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The client refuses only these.
fn check_name(name: &str) -> Result<(), RegistryError> {
    let refuse = |why| Err(RegistryError::BadName(name.to_owned(), why));
    if name.is_empty() {
        return refuse("it is empty");
    }
    if name == keys::RESERVED_NAMESPACE {
        return refuse("it is reserved for the table's own records");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use zae_table::Attr;
    use zae_table::registry::LAMBDA_VERSION;
    use zae_table::store::UpdateBuilder;
    use zae_test_support::memory::MemoryStore;

    #[tokio::test]
    async fn a_fresh_table_is_stamped_and_registered_once() {
        let store = MemoryStore::new();
        assert!(!initialised(&store).await.unwrap());
        let names = vec!["default".to_owned(), "tenant-a".to_owned()];
        let first = initialise(&store, &names, &Stamper::Cli("test"), 1_000)
            .await
            .unwrap();
        assert!(first.iter().all(|r| r.created), "{first:?}");
        assert!(initialised(&store).await.unwrap());
        let again = initialise(&store, &names, &Stamper::Cli("test"), 2_000)
            .await
            .unwrap();
        assert!(again.iter().all(|r| !r.created), "{again:?}");
        assert_eq!(
            first.iter().map(|r| &r.id).collect::<Vec<_>>(),
            again.iter().map(|r| &r.id).collect::<Vec<_>>()
        );
        let record = store
            .get(&keys::pk_registry(), keys::SK_VERSION, true)
            .await
            .unwrap()
            .unwrap();
        let text = |k: &str| record[k].as_s().unwrap().to_owned();
        assert_eq!(text(LAMBDA_VERSION), LAMBDA_VERSION_STAMP);
        assert_eq!(text("schema_version"), registry::SCHEMA_VERSION);
        assert_eq!(text(registry::CLIENT_MIN_VERSION), "0.0.0");
        for r in &first {
            let reverse = store
                .get(&keys::pk_registry(), &keys::sk_namespace_id(&r.id), true)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                reverse[registry::NAMESPACE_NAME].as_s(),
                Some(r.name.as_str())
            );
            assert_eq!(r.id.len(), 11);
            assert!(!r.id.starts_with('-'));
        }
    }

    #[tokio::test]
    async fn a_stamp_keeps_the_client_minimum_and_unstamping_restores_only_its_own() {
        let store = MemoryStore::new();
        initialise(&store, &[], &Stamper::Cli("test"), 1_000)
            .await
            .unwrap();
        // A gate raised the minimum, then a Python deploy stamped its Lambdas.
        let mut raise = UpdateBuilder::new();
        raise.set(registry::CLIENT_MIN_VERSION, Attr::s("0.17.0"));
        let raise = raise.build(&keys::pk_registry(), keys::SK_VERSION, None);
        store.update(&raise, Returns::Nothing).await.unwrap();
        let python = registry::stamp_version(PROTOCOL_VERSION, "cli:0.17.0", 1_500);
        store.update(&python, Returns::Nothing).await.unwrap();
        assert!(
            !unstamp(&store, "test", None, 2_000).await.unwrap(),
            "not ours now"
        );
        initialise(&store, &[], &Stamper::Cli("test"), 3_000)
            .await
            .unwrap();
        let read = || async {
            store
                .get(&keys::pk_registry(), keys::SK_VERSION, true)
                .await
                .unwrap()
                .unwrap()
        };
        let record = read().await;
        assert_eq!(record[LAMBDA_VERSION].as_s(), Some(LAMBDA_VERSION_STAMP));
        assert_eq!(record[registry::CLIENT_MIN_VERSION].as_s(), Some("0.17.0"));
        assert!(unstamp(&store, "test", None, 4_000).await.unwrap());
        assert_eq!(read().await[LAMBDA_VERSION].as_s(), Some(PROTOCOL_VERSION));
    }

    #[tokio::test]
    async fn reserved_and_empty_names_are_refused_and_nothing_is_written() {
        let store = MemoryStore::new();
        for name in ["", "_"] {
            let err = register(&store, name, 1).await.unwrap_err();
            assert!(matches!(err, RegistryError::BadName(..)), "{err}");
        }
        assert!(store.items().is_empty());
    }

    fn stack<'a>(owner: &'a str, adopt: bool) -> Stamper<'a> {
        Stamper::Stack {
            by: "cfn:0.17.0+rust",
            owner,
            adopt,
        }
    }

    /// A name refused fails before anything is written: no stamp, no namespace.
    #[tokio::test]
    async fn a_refused_name_among_several_writes_nothing() {
        let store = MemoryStore::new();
        let names = vec!["default".to_owned(), "_".to_owned()];
        let err = initialise(&store, &names, &stack("A|TableInit", false), 1)
            .await
            .unwrap_err();
        assert!(matches!(err, RegistryError::BadName(..)), "{err}");
        assert!(store.items().is_empty(), "{:?}", store.items());
    }

    /// The stamp records its owner; another stack's resource can neither
    /// stamp it (its error names the owner) nor restore it; the owner's
    /// Delete restores it and drops the owner.
    #[tokio::test]
    async fn only_the_owner_of_the_stamp_may_stamp_or_restore_it() {
        let store = MemoryStore::new();
        initialise(&store, &[], &stack("A|TableInit", false), 1)
            .await
            .unwrap();
        let err = initialise(&store, &[], &stack("B|Hijack", false), 2)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("A|TableInit"), "{err}");
        let err = initialise(&store, &[], &stack("B|Hijack", true), 2)
            .await
            .unwrap_err();
        assert!(matches!(err, RegistryError::OwnedElsewhere(_)), "{err}");
        assert!(!unstamp(&store, "cfn", Some("B|Hijack"), 3).await.unwrap());
        let read = || store.item(&keys::pk_registry(), keys::SK_VERSION).unwrap();
        assert_eq!(read()[LAMBDA_VERSION].as_s(), Some(LAMBDA_VERSION_STAMP));
        assert!(
            unstamp(&store, "cfn", Some("A|TableInit"), 4)
                .await
                .unwrap()
        );
        assert_eq!(read()[LAMBDA_VERSION].as_s(), Some(PROTOCOL_VERSION));
        assert!(!read().contains_key(registry::STAMP_OWNER));
    }

    /// A stamp a stack made before owners existed, by this build or an
    /// earlier one (`0.17.0+rust`): a new stack's Create is refused, naming
    /// the earlier deployment, before it registers its namespaces; the Update of the stack whose resource it is
    /// adopts it, stamping this build.
    #[tokio::test]
    async fn an_unowned_stack_stamp_is_adopted_by_an_update_and_refused_to_a_create() {
        for earlier in [registry::FIRST_STAMP, LAMBDA_VERSION_STAMP] {
            let store = MemoryStore::new();
            let by = format!("cfn:{earlier}");
            let legacy = registry::stamp_version(earlier, &by, 1);
            store.update(&legacy, Returns::Nothing).await.unwrap();
            let names = ["tenant-b".to_owned()];
            let err = initialise(&store, &names, &stack("B|Other", false), 2)
                .await
                .unwrap_err();
            assert!(
                err.to_string().contains("recorded no owner"),
                "{earlier}: {err}"
            );
            // Refused before it registered anything.
            assert_eq!(namespace_id(&store, "tenant-b").await.unwrap(), None);
            // The condition itself, without the read ahead: refused too.
            let update =
                registry::stamp_version_owned(LAMBDA_VERSION_STAMP, "cfn", "B|Other", false, 2);
            let raced = store.update(&update, Returns::Nothing).await;
            assert!(
                matches!(raced, Err(StoreError::ConditionFailed { .. })),
                "{earlier}: {raced:?}"
            );
            initialise(&store, &[], &stack("A|TableInit", true), 3)
                .await
                .unwrap();
            let record = store.item(&keys::pk_registry(), keys::SK_VERSION).unwrap();
            assert_eq!(record[registry::STAMP_OWNER].as_s(), Some("A|TableInit"));
            assert_eq!(record[LAMBDA_VERSION].as_s(), Some(LAMBDA_VERSION_STAMP));
        }
    }

    /// The stamp a build before 0.8.0 left, its owner and the rest kept.
    async fn stamp_earlier(store: &MemoryStore) {
        let mut set = UpdateBuilder::new();
        set.set(LAMBDA_VERSION, Attr::s(registry::FIRST_STAMP));
        let set = set.build(&keys::pk_registry(), keys::SK_VERSION, None);
        store.update(&set, Returns::Nothing).await.unwrap();
    }

    /// A stack whose code moved to this build while its record still reads
    /// an earlier build's stamp: its resource re-stamps it (a Create's
    /// condition as much as an Update's), and its Delete restores the Python
    /// Lambdas' 0.17.0 from either stamp; another stack's resource still can
    /// do neither.
    #[tokio::test]
    async fn an_earlier_builds_stamp_is_the_owners_to_restamp_and_restore() {
        let read =
            |store: &MemoryStore| store.item(&keys::pk_registry(), keys::SK_VERSION).unwrap();
        let store = MemoryStore::new();
        initialise(&store, &[], &stack("A|TableInit", false), 1)
            .await
            .unwrap();
        stamp_earlier(&store).await;
        let err = initialise(&store, &[], &stack("B|Hijack", false), 2)
            .await
            .unwrap_err();
        assert!(matches!(err, RegistryError::OwnedElsewhere(_)), "{err}");
        assert!(!unstamp(&store, "cfn", Some("B|Hijack"), 2).await.unwrap());
        for adopt in [false, true] {
            initialise(&store, &[], &stack("A|TableInit", adopt), 3)
                .await
                .unwrap();
            assert_eq!(
                read(&store)[LAMBDA_VERSION].as_s(),
                Some(LAMBDA_VERSION_STAMP)
            );
            stamp_earlier(&store).await;
        }
        assert!(
            unstamp(&store, "cfn", Some("A|TableInit"), 4)
                .await
                .unwrap()
        );
        assert_eq!(read(&store)[LAMBDA_VERSION].as_s(), Some(PROTOCOL_VERSION));
        // Without an owner (`zae-limits`' stamps): restored from an earlier build's too.
        let store = MemoryStore::new();
        initialise(&store, &[], &Stamper::Cli("test"), 1)
            .await
            .unwrap();
        stamp_earlier(&store).await;
        assert!(unstamp(&store, "test", None, 2).await.unwrap());
        assert_eq!(read(&store)[LAMBDA_VERSION].as_s(), Some(PROTOCOL_VERSION));
    }
}
