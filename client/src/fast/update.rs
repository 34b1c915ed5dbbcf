//! The fast path's write and what its refusal says (pure): one conditional
//! UpdateItem that debits every consumed limit and one unit of the shard's
//! write budget, never reading first. Hard limits are tested in the
//! condition; a live soft stamp (or bypass stamp) waives the test, and the
//! debit still lands.

use crate::bucket::{BucketView, WCU_COST};
use crate::error::Feature;
use crate::status::Consume;
use zae_table::Attr;
use zae_table::bucket::{BYPASS, DISABLED, TTL, VALID_UNTIL, field, limit_attr};
use zae_table::keys::{BucketKey, SK_STATE};
use zae_table::milli::MILLI;
use zae_table::names::WCU_LIMIT;
use zae_table::store::{ITEM_EXISTS, Update, UpdateBuilder};

/// The fast-path write for `consume` on `key`'s shard at `now`.
pub fn update(key: &BucketKey, consume: &Consume, now: i64) -> Update {
    let mut b = UpdateBuilder::new();
    let now_v = b.value(Attr::n(now));
    let byp = b.name(BYPASS);
    let mut terms = vec![ITEM_EXISTS.to_owned()];
    for (name, amount) in consume {
        let wanted = amount.saturating_mul(MILLI);
        b.add(&limit_attr(name, field::CONSUMED), Attr::n(wanted));
        b.add(&limit_attr(name, field::TOKENS), Attr::n(-wanted));
        let tk = b.name(&limit_attr(name, field::TOKENS));
        let soft = b.name(&limit_attr(name, field::SOFT));
        let cp = b.name(&limit_attr(name, field::CAPACITY));
        let h = b.value(Attr::n(wanted));
        terms.push(format!(
            "({byp} > {now_v} OR ({soft} > {now_v} AND attribute_exists({cp}) AND attribute_exists({tk})) OR {tk} >= {h})"
        ));
        terms.push(format!(
            "(attribute_not_exists({soft}) OR {soft} > {now_v})"
        ));
    }
    terms.push(format!("(attribute_not_exists({byp}) OR {byp} > {now_v})"));
    terms.extend(spend_write_budget(&mut b, now));
    let vu = b.name(VALID_UNTIL);
    terms.push(format!(
        "({byp} > {now_v} OR attribute_not_exists({vu}) OR {vu} > {now_v})"
    ));
    b.build(&key.pk(), SK_STATE, Some(terms.join(" AND ")))
}

/// One unit of the shard's write budget spent, and what every fast write
/// (the ordinary one and the bypass shape) requires of the item: the budget
/// not spent, the TTL not passed, not disabled.
pub(super) fn spend_write_budget(b: &mut UpdateBuilder, now: i64) -> [String; 3] {
    b.add(&limit_attr(WCU_LIMIT, field::TOKENS), Attr::n(-WCU_COST));
    b.add(&limit_attr(WCU_LIMIT, field::CONSUMED), Attr::n(WCU_COST));
    let wcu = b.name(&limit_attr(WCU_LIMIT, field::TOKENS));
    let thresh = b.value(Attr::n(WCU_COST));
    let ttl = b.name(TTL);
    let now_s = b.value(Attr::n(now.div_euclid(1000)));
    let disabled = b.name(DISABLED);
    [
        format!("{wcu} >= {thresh}"),
        format!("(attribute_not_exists({ttl}) OR {ttl} > {now_s})"),
        format!("attribute_not_exists({disabled})"),
    ]
}

/// Why a fast-path write failed, read from the item as it stood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Disabled,
    Unsupported(Feature),
    /// A stamp or the TTL passed, or `vu = 0`: the slow path renews or trims.
    Boundary,
    /// The write budget is spent; whether a refill brings one unit back.
    WcuShort {
        refilled: bool,
        limits_short: bool,
    },
    /// A consumed limit is short, or missing from the item.
    Exhausted,
}

pub fn classify(view: &BucketView, consume: &Consume, now: i64) -> Refusal {
    if view.disabled {
        return Refusal::Disabled;
    }
    if let Some(feature) = view.unsupported {
        return Refusal::Unsupported(feature);
    }
    let expired_soft = consume.keys().any(|n| {
        view.limits
            .get(n)
            .is_some_and(|l| l.soft_present && !l.soft_live(now))
    });
    let expired_bypass = view.bypass_present && !view.bypassed(now);
    let ttl_passed = view.ttl.is_some_and(|t| t <= now.div_euclid(1000));
    // `vu = 0` (a credit over the ceiling, an operator's change) is not a
    // boundary: a refill check decides, and only a bucket that would
    // admit goes to the slow path to be trimmed. A `vu` passed is: the
    // image's balance was materialised under parameters no longer in force.
    if expired_soft || expired_bypass || ttl_passed || view.past_boundary(now) {
        return Refusal::Boundary;
    }
    let wcu_left = view.wcu.map(|w| w.tk).unwrap_or_default();
    if view.wcu.is_some() && wcu_left < WCU_COST {
        let refilled = view
            .wcu
            .is_some_and(|w| w.project(view.rf, now, 1) >= WCU_COST);
        return Refusal::WcuShort {
            refilled,
            limits_short: !fits_now(view, consume, now, false),
        };
    }
    Refusal::Exhausted
}

/// Every consumed limit on the item holds its amount (after the refill to
/// `now` when `refill`), or a live soft or bypass stamp waives it; a limit
/// missing from the item does not fit.
pub fn fits_now(view: &BucketView, consume: &Consume, now: i64, refill: bool) -> bool {
    if view.bypassed(now) {
        return true;
    }
    consume.iter().all(|(name, amount)| {
        let Some(limit) = view.limits.get(name) else {
            return false;
        };
        let balance = if refill {
            view.balance(name, limit, now)
        } else {
            limit.tk
        };
        limit.soft_live(now) || balance >= amount.saturating_mul(MILLI)
    })
}

/// The refill check: whether the slow path could admit on this image (or
/// would seed a missing limit).
pub fn refill_would_help(view: &BucketView, consume: &Consume, now: i64) -> bool {
    consume.keys().any(|n| !view.limits.contains_key(n)) || fits_now(view, consume, now, true)
}
