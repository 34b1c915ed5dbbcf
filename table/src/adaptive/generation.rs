//! Where generations come from: one counter per namespace
//! (`{ns}/ADAPTIVE#`, `#GENERATION`), moved on atomically by every writer
//! that needs a new one (a target's move, a restamp, a reset, a block of
//! allocations). A stamp is refused over a newer generation, so the order
//! of generations is the order of decisions; a counter gives that order
//! whatever the writers' clocks say, where a generation read off a clock
//! put a decision made later on a slow clock below one made earlier on a
//! fast clock (a target made again after a retire then found every bucket
//! "newer" than itself and left it at base).
//!
//! The counter is never below a generation its writer has read: a taker
//! passes the least it needs (`floor`, one above the target or the
//! allocations it read), and a counter behind that (one made after records
//! of an earlier build, whose generations came from clocks) is moved up to
//! it with a compare-and-set. It starts from its first taker's clock, so
//! that it also starts above the stamps such an earlier build left on
//! buckets whose targets are gone. It is never deleted while the namespace
//! lives: a target made again continues from it.

use crate::keys;
use crate::store::{Returns, Store, StoreError, UpdateBuilder};
use crate::value::Attr;

/// The last generation taken.
pub const LAST: &str = "last";
/// Compare-and-set rounds before a contended counter is reported.
const ROUNDS: usize = 8;

/// `count` new generations for `namespace`, each at least `floor` and
/// above every one taken before: returns the first (the others follow it
/// one by one). `now_ms` only seeds a counter that does not exist yet.
pub async fn take<S: Store>(
    store: &S,
    namespace: &str,
    count: i64,
    floor: i64,
    now_ms: i64,
) -> Result<i64, StoreError> {
    let (pk, sk) = key(namespace);
    let count = count.max(1);
    for _ in 0..ROUNDS {
        let mut step = UpdateBuilder::new();
        step.step_from(LAST, Attr::n(now_ms.max(0)), Attr::n(count));
        let stepped = store
            .update(&step.build(&pk, &sk, None), Returns::AllNew)
            .await?;
        let last = stepped
            .as_ref()
            .and_then(|item| item.get(LAST))
            .and_then(Attr::as_int)
            .ok_or_else(|| unreadable(&pk, &sk, "no whole number after the update"))?;
        let first = last
            .checked_sub(count - 1)
            .ok_or_else(|| unreadable(&pk, &sk, "below the smallest generation"))?;
        if first >= floor {
            return Ok(first);
        }
        // Behind what its taker read: moved up to `floor`, unless another
        // taker moved it meanwhile (then stepped again).
        let raised = floor
            .checked_add(count - 1)
            .ok_or_else(|| unreadable(&pk, &sk, "past the largest generation"))?;
        let mut up = UpdateBuilder::new();
        up.set(LAST, Attr::n(raised));
        let (name, read) = (up.name(LAST), up.value(Attr::n(last)));
        let cas = up.build(&pk, &sk, Some(format!("{name} = {read}")));
        match store.update(&cas, Returns::Nothing).await {
            Ok(_) => return Ok(floor),
            Err(StoreError::ConditionFailed { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Retryable {
        operation: "UpdateItem",
        key: crate::store::key_text(&pk, &sk),
        message: format!("generation counter still moving after {ROUNDS} rounds"),
    })
}

pub fn key(namespace: &str) -> (String, String) {
    (
        keys::pk_adaptive(namespace),
        keys::SK_ADAPTIVE_GENERATION.to_owned(),
    )
}

fn unreadable(pk: &str, sk: &str, why: &str) -> StoreError {
    StoreError::Rejected {
        operation: "UpdateItem",
        key: crate::store::key_text(pk, sk),
        message: format!("generation counter `{LAST}`: {why}"),
    }
}
