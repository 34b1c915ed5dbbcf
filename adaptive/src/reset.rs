//! Every target of a namespace back to base, from outside the controller
//! (`zae-limits adaptive reset`, the way back to the 0.17.0 Python
//! Lambdas): each target to a factor of one under a new generation, then
//! laps ([`crate::pass`]) returning every stamped bucket to what the client
//! would have (base, or the amount before the first stamp).

use crate::law::Factor;
use crate::pass::{self, Writes};
use zae_table::adaptive::Declaration;
use zae_table::adaptive::allocation::Allocated;
use zae_table::adaptive::target::Target;
use zae_table::store::{Returns, Store, StoreError};

/// Passes a reset runs over a target before it reports buckets still owed.
const RESET_PASSES: usize = 3;

/// What a reset did to one target.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Reset {
    pub resource: String,
    pub limit: String,
    pub buckets_stamped: usize,
    /// Buckets whose stamps kept losing their race: run the reset again.
    pub stamps_lost: usize,
    /// The controller moved the target during the reset: its own pass
    /// stamps the buckets (disable it first to keep them at base).
    pub superseded: bool,
}

/// Every target of `namespace` to base: its factor to one under a new
/// generation (its estimator forgotten), then whole passes over its
/// buckets, each stamp checked against that generation.
pub async fn reset<S: Store>(store: &S, namespace: &str) -> Result<Vec<Reset>, StoreError> {
    let declaration = Declaration::read(store, namespace, true)
        .await?
        .and_then(Result::ok);
    let mut done = Vec::new();
    for read in Target::read_all(store, namespace).await? {
        // Entities raised by a demand share: the reset's generation is above
        // every one of theirs (whatever the operator's clock says), so its
        // lap reaches their buckets; their allocations go first, so that the
        // lap does not stamp them again.
        let above = Allocated::above_all(store, namespace, &read.resource, &read.limit).await?;
        // Retired meanwhile: its buckets went back to base with it.
        let Some(mut target) = to_one(store, namespace, read, above).await? else {
            continue;
        };
        Allocated::forget_all(store, namespace, &target.resource, &target.limit).await?;
        let mut report = Reset {
            resource: target.resource.clone(),
            limit: target.limit.clone(),
            buckets_stamped: 0,
            stamps_lost: 0,
            superseded: false,
        };
        for _ in 0..RESET_PASSES {
            let generation = target.generation;
            let p = pass::run(
                store,
                namespace,
                declaration.as_ref(),
                &mut target,
                Writes::Checked,
                || false,
            )
            .await?;
            report.buckets_stamped += p.stamped;
            report.stamps_lost = target.owed.len();
            report.superseded = p.superseded;
            if p.superseded {
                break;
            }
            store
                .update(&target.write(namespace, Some(generation)), Returns::Nothing)
                .await?;
            if p.finished {
                break;
            }
        }
        done.push(report);
    }
    Ok(done)
}

/// The target at factor one under a new generation (at least `above`),
/// written over the one read (read again if a tick moved it meanwhile);
/// `None` once it is gone.
async fn to_one<S: Store>(
    store: &S,
    namespace: &str,
    read: Target,
    above: i64,
) -> Result<Option<Target>, StoreError> {
    let mut target = read;
    loop {
        let generation = target.generation;
        let now = chrono::Utc::now().timestamp_millis();
        // From the namespace's counter, not the operator's clock.
        let fresh = target.fresh_above(store, namespace, above, now).await?;
        target.moved(Factor::ONE, now, "reset", 0, fresh);
        target.state = None;
        target.shared = None;
        match store
            .update(&target.write(namespace, Some(generation)), Returns::Nothing)
            .await
        {
            Ok(_) => return Ok(Some(target)),
            Err(StoreError::ConditionFailed { .. }) => {
                let (pk, sk) = Target::key(namespace, &target.resource, &target.limit);
                match store
                    .get(&pk, &sk, true)
                    .await?
                    .as_ref()
                    .and_then(Target::from_item)
                {
                    Some(now) => target = now,
                    None => return Ok(None),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests;
