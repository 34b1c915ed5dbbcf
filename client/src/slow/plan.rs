//! The slow path (§3 of the protocol): read config, the owner's META and
//! the bucket; refill; write once, conditionally. A new bucket is a `Put`
//! with a check on its owner's META; an existing one an update locked on
//! `rf`; two buckets (a cascade) one transaction. A lost lock falls back to
//! a write of the consumption alone.

use crate::bucket::{BucketView, LimitView};
use crate::config::Resolved;
use crate::status::{Consume, Quotes, quoted_config};
use std::collections::BTreeMap;
use zae_table::bucket::{
    BYPASS, CASCADE, PARENT_GENERATION, PARENT_ID, PARENT_INCARNATION, REFILLED_AT, SHARD_COUNT,
    TTL, VALID_UNTIL, field, limit_attr,
};
use zae_table::config::LimitConfig;
use zae_table::entity::Meta;
use zae_table::keys::{BucketKey, SK_STATE};
use zae_table::milli::MILLI;
use zae_table::names::WCU_LIMIT;
use zae_table::store::{ITEM_ABSENT, ITEM_EXISTS, TxWrite, Update, UpdateBuilder};
use zae_table::{Attr, Item};

/// The reserved write-budget limit: 1000 WCU a second, never divided.
pub const WCU_CAPACITY: i64 = 1_000_000;
pub const WCU_PERIOD_MS: i64 = 1000;
/// One write's cost against it.
pub const WCU_COST: i64 = 1000;

/// How the pass writes soft stamps and TTLs.
#[derive(Clone, Copy)]
pub struct Stamps<'a> {
    /// A stamp's deadline when written at `now`.
    pub deadline: &'a (dyn Fn(i64) -> i64 + Send + Sync),
    /// `bucket_ttl_multiplier`; `<= 0` writes no TTL.
    pub ttl_multiplier: i64,
}

/// One bucket planned: its write and what the lease learns from it.
#[derive(Debug, Clone)]
pub struct Planned {
    pub key: BucketKey,
    pub write: TxWrite,
    /// The limits after the write, as this pass computes them.
    pub after: BTreeMap<String, LimitView>,
    pub shard_count: i64,
    pub rf: i64,
    /// Where this pass's refill of each limit reached (drift kept), for
    /// the lease's in-memory state.
    pub refilled_at: BTreeMap<String, i64>,
    /// Every limit passed (hard ones on their balance, soft ones always).
    pub admitted: bool,
    /// The bucket as read (`None`: created by this write).
    pub view: Option<BucketView>,
    /// The configured limits this pass judged by, as statuses quote them.
    pub quoted: Quotes,
}

/// Seconds a limit takes to refill from empty, as the Python client
/// computes it (floats, the same operations in the same order).
fn recovery_seconds(limit: &LimitConfig) -> f64 {
    let cp = (limit.capacity * MILLI) as f64;
    let ra = (limit.refill_amount * MILLI) as f64;
    let rp = (limit.refill_period * MILLI) as f64;
    (cp / ra) * (rp / 1000.0)
}

/// `ttl` for a bucket whose limits come from the resource or system level.
pub fn ttl_at(resolved: &Resolved, now_ms: i64, multiplier: i64) -> Option<i64> {
    if resolved.is_entity_level() || multiplier <= 0 || resolved.limits.is_empty() {
        return None;
    }
    let longest = resolved
        .limits
        .iter()
        .map(recovery_seconds)
        .fold(0.0_f64, f64::max);
    let seconds = (longest * multiplier as f64) as i64;
    Some(now_ms.div_euclid(1000).saturating_add(seconds))
}

fn milli(tokens: i64) -> i64 {
    tokens.saturating_mul(MILLI)
}

/// A configured limit as a new bucket (or a seed) starts it on a shard.
fn fresh(limit: &LimitConfig, shards: i64, consumed: i64) -> LimitView {
    let cp = milli(limit.capacity);
    LimitView {
        tk: cp.div_euclid(shards.max(1)).saturating_sub(consumed),
        cp,
        ra: milli(limit.refill_amount),
        rp: milli(limit.refill_period),
        tc: consumed,
        soft: None,
        soft_present: false,
    }
}

fn limit_attrs(item: &mut Item, name: &str, l: &LimitView) {
    for (f, v) in l.fields() {
        item.insert(limit_attr(name, f), Attr::n(v));
    }
}

fn wcu_full() -> LimitView {
    LimitView {
        tk: WCU_CAPACITY,
        cp: WCU_CAPACITY,
        ra: WCU_CAPACITY,
        rp: WCU_PERIOD_MS,
        ..LimitView::default()
    }
}

/// The owner's resolved cascade policy for this resource.
pub fn cascades(resolved: &Resolved, meta: Option<&Meta>) -> bool {
    resolved
        .cascade
        .or(meta.and_then(|m| m.cascade))
        .unwrap_or(false)
}

/// Plans a new bucket on `key`'s shard (§3.3).
#[allow(clippy::too_many_arguments)]
pub fn plan_create(
    key: &BucketKey,
    shards: i64,
    resolved: &Resolved,
    meta: Option<&Meta>,
    consume: &Consume,
    now: i64,
    stamps: Stamps<'_>,
) -> Planned {
    let mut item = key.new_item();
    item.insert(REFILLED_AT.to_owned(), Attr::n(now));
    item.insert(SHARD_COUNT.to_owned(), Attr::n(shards));
    item.insert(CASCADE.to_owned(), Attr::Bool(cascades(resolved, meta)));
    if let Some(ttl) = ttl_at(resolved, now, stamps.ttl_multiplier) {
        item.insert(TTL.to_owned(), Attr::n(ttl));
    }
    if let Some(meta) = meta {
        if let Some(parent) = &meta.parent_id {
            item.insert(PARENT_ID.to_owned(), Attr::s(parent));
        }
        if let Some(pgen) = meta.pgen {
            item.insert(PARENT_GENERATION.to_owned(), Attr::n(pgen));
        }
        if let Some(pinc) = &meta.pinc {
            item.insert(PARENT_INCARNATION.to_owned(), Attr::s(pinc));
        }
    }
    limit_attrs(&mut item, WCU_LIMIT, &wcu_full());
    let mut after = BTreeMap::new();
    let mut admitted = true;
    for limit in &resolved.limits {
        let consumed = milli(consume.get(&limit.name).copied().unwrap_or_default());
        let mut view = fresh(limit, shards, consumed);
        if limit.soft {
            let deadline = (stamps.deadline)(now);
            item.insert(limit_attr(&limit.name, field::SOFT), Attr::n(deadline));
            view.soft = Some(deadline);
            view.soft_present = true;
        } else if view.tk < 0 {
            admitted = false;
        }
        limit_attrs(&mut item, &limit.name, &view);
        after.insert(limit.name.clone(), view);
    }
    let condition = zae_table::store::Condition::plain(ITEM_ABSENT);
    Planned {
        key: key.clone(),
        write: TxWrite::Put {
            item,
            condition: Some(condition),
        },
        after,
        shard_count: shards,
        rf: now,
        refilled_at: BTreeMap::new(),
        admitted,
        view: None,
        quoted: quoted_config(&resolved.limits),
    }
}

/// Plans the rf-locked write to an existing bucket (§3.4).
#[allow(clippy::too_many_arguments)]
pub fn plan_update(
    key: &BucketKey,
    view: &BucketView,
    resolved: &Resolved,
    meta: Option<&Meta>,
    consume: &Consume,
    now_plan: i64,
    now_commit: i64,
    stamps: Stamps<'_>,
) -> Planned {
    let shards = view.shard_count;
    let mut b = UpdateBuilder::new();
    let mut conditions = Vec::new();
    let rf = b.name(REFILLED_AT);
    let expected = b.value(Attr::n(view.rf));
    conditions.push(format!("{rf} = {expected}"));
    b.set(REFILLED_AT, Attr::n(now_commit.max(view.rf)));
    match ttl_at(resolved, now_commit, stamps.ttl_multiplier) {
        Some(ttl) => {
            b.set(TTL, Attr::n(ttl));
        }
        None => {
            b.remove(TTL);
        }
    }
    if let Some(meta) = meta {
        owner_stamp(&mut b, &mut conditions, resolved, meta);
    }
    let bypassed = view.bypassed(now_plan);
    let mut after = BTreeMap::new();
    let mut refilled_at = BTreeMap::new();
    let mut admitted = true;
    let now_value = b.value(Attr::n(now_plan));
    for (name, limit) in &view.limits {
        let consumed = milli(consume.get(name).copied().unwrap_or_default());
        let projected = limit.project(view.rf, now_plan, shards);
        let refill = projected.saturating_sub(limit.tk);
        let soft = resolved.is_soft(name);
        if !soft && !bypassed && projected < consumed {
            admitted = false;
        }
        let tk = b.name(&limit_attr(name, field::TOKENS));
        b.add(
            &limit_attr(name, field::TOKENS),
            Attr::n(refill.saturating_sub(consumed)),
        );
        b.add(&limit_attr(name, field::CONSUMED), Attr::n(consumed));
        if consumed > refill && !soft {
            let floor = b.value(Attr::n(consumed.saturating_sub(refill)));
            let stamp = b.name(&limit_attr(name, field::SOFT));
            conditions.push(format!("({stamp} > {now_value} OR {tk} >= {floor})"));
        }
        if refill > 0 {
            let read = b.value(Attr::n(limit.tk));
            conditions.push(format!("{tk} <= {read}"));
        }
        let mut next = *limit;
        refilled_at.insert(name.clone(), limit.refill_to(view.rf, now_plan, shards).1);
        next.tk = projected.saturating_sub(consumed);
        next.tc = limit.tc.saturating_add(consumed);
        after.insert(name.clone(), next);
    }
    if let Some(wcu) = &view.wcu {
        let refill = wcu.project(view.rf, now_plan, 1).saturating_sub(wcu.tk);
        b.add(&limit_attr(WCU_LIMIT, field::TOKENS), Attr::n(refill));
        b.add(&limit_attr(WCU_LIMIT, field::CONSUMED), Attr::n(0));
    }
    restamp_soft(
        &mut b,
        &mut conditions,
        view,
        resolved,
        now_plan,
        stamps,
        true,
        &mut after,
    );
    drop_bypass(&mut b, &mut conditions, view);
    for limit in &resolved.limits {
        if view.limits.contains_key(&limit.name) {
            continue;
        }
        let consumed = milli(consume.get(&limit.name).copied().unwrap_or_default());
        let mut seeded = fresh(limit, shards, consumed);
        if limit.soft {
            let deadline = (stamps.deadline)(now_plan);
            b.set(&limit_attr(&limit.name, field::SOFT), Attr::n(deadline));
            (seeded.soft, seeded.soft_present) = (Some(deadline), true);
        } else if seeded.tk < 0 {
            admitted = false;
        }
        seed(&mut b, &mut conditions, &limit.name, &seeded);
        after.insert(limit.name.clone(), seeded);
    }
    let vu = b.name(VALID_UNTIL);
    match view.vu {
        Some(read) => {
            let read = b.value(Attr::n(read));
            conditions.push(format!("{vu} = {read}"));
        }
        None => conditions.push(format!("attribute_not_exists({vu})")),
    }
    b.remove(VALID_UNTIL);
    let update = b.build(&key.pk(), SK_STATE, Some(conditions.join(" AND ")));
    Planned {
        key: key.clone(),
        write: TxWrite::Update(update),
        after,
        shard_count: shards,
        rf: now_commit.max(view.rf),
        refilled_at,
        admitted,
        view: Some(view.clone()),
        quoted: quoted_config(&resolved.limits),
    }
}

/// The owner's `cascade`, `parent_id`, `pgen` and `pinc`, pinned on not
/// lowering the generation of the same incarnation.
fn owner_stamp(
    b: &mut UpdateBuilder,
    conditions: &mut Vec<String>,
    resolved: &Resolved,
    meta: &Meta,
) {
    b.set(CASCADE, Attr::Bool(cascades(resolved, Some(meta))));
    match &meta.parent_id {
        Some(parent) => b.set(PARENT_ID, Attr::s(parent)),
        None => b.remove(PARENT_ID),
    };
    let Some(pgen) = meta.pgen else { return };
    b.set(PARENT_GENERATION, Attr::n(pgen));
    let opg = b.name(PARENT_GENERATION);
    let pgen_value = b.value(Attr::n(pgen));
    match &meta.pinc {
        Some(pinc) => {
            b.set(PARENT_INCARNATION, Attr::s(pinc));
            let opi = b.name(PARENT_INCARNATION);
            let pinc_value = b.value(Attr::s(pinc));
            conditions.push(format!(
                "(attribute_not_exists({opi}) OR ({opi} = {pinc_value} AND (attribute_not_exists({opg}) OR {opg} <= {pgen_value})))"
            ));
        }
        None => conditions.push(format!(
            "(attribute_not_exists({opg}) OR {opg} <= {pgen_value})"
        )),
    }
}

/// Soft stamps follow the config read on this pass: a soft limit's stamp
/// is renewed (`renew_live`: even one still live, as the rf-locked write
/// does; otherwise only one missing or past), a hard limit with a stamp
/// loses it; each pinned on the stamp as read. Whether anything changed.
#[allow(clippy::too_many_arguments)]
fn restamp_soft(
    b: &mut UpdateBuilder,
    conditions: &mut Vec<String>,
    view: &BucketView,
    resolved: &Resolved,
    now: i64,
    stamps: Stamps<'_>,
    renew_live: bool,
    after: &mut BTreeMap<String, LimitView>,
) -> bool {
    let mut changed = false;
    for (name, limit) in &view.limits {
        let soft = resolved.is_soft(name);
        let change = if soft && (renew_live || !limit.soft_live(now)) {
            Some((stamps.deadline)(now))
        } else if !soft && limit.soft_present {
            None
        } else {
            continue;
        };
        changed = true;
        let attr = limit_attr(name, field::SOFT);
        let alias = b.name(&attr);
        match change {
            Some(deadline) => b.set(&attr, Attr::n(deadline)),
            None => b.remove(&attr),
        };
        match limit.soft {
            Some(read) => {
                let read = b.value(Attr::n(read));
                conditions.push(format!("{alias} = {read}"));
            }
            None if !limit.soft_present => {
                conditions.push(format!("attribute_not_exists({alias})"))
            }
            None => {}
        }
        if let Some(next) = after.get_mut(name) {
            next.soft = change;
            next.soft_present = change.is_some();
        }
    }
    changed
}

/// After a slow-path rejection, which writes nothing: the stamps that
/// disagree with the config just read, corrected alone (a missing or past
/// soft stamp set, a stamp of a limit no longer soft removed), so an
/// expired stamp does not keep every later request on the slow path.
pub fn stamp_fix(
    key: &BucketKey,
    view: &BucketView,
    resolved: &Resolved,
    now: i64,
    stamps: Stamps<'_>,
) -> Option<Update> {
    let mut b = UpdateBuilder::new();
    let mut conditions = vec![ITEM_EXISTS.to_owned()];
    let mut after = BTreeMap::new();
    let soft = restamp_soft(
        &mut b,
        &mut conditions,
        view,
        resolved,
        now,
        stamps,
        false,
        &mut after,
    );
    let bypass = drop_bypass(&mut b, &mut conditions, view);
    (soft || bypass).then(|| b.build(&key.pk(), SK_STATE, Some(conditions.join(" AND "))))
}

/// A `bypass` stamp goes with the pass that reads config without bypass
/// (this client refuses config bypass before it plans), pinned on the
/// stamp as read. Whether there was one.
fn drop_bypass(b: &mut UpdateBuilder, conditions: &mut Vec<String>, view: &BucketView) -> bool {
    if !view.bypass_present {
        return false;
    }
    let alias = b.name(BYPASS);
    b.remove(BYPASS);
    if let Some(read) = view.bypass {
        let read = b.value(Attr::n(read));
        conditions.push(format!("{alias} = {read}"));
    }
    true
}

/// A configured limit missing from an existing item, written whole.
fn seed(b: &mut UpdateBuilder, conditions: &mut Vec<String>, name: &str, l: &LimitView) {
    for (f, v) in l.fields() {
        b.set(&limit_attr(name, f), Attr::n(v));
    }
    b.set(&limit_attr(name, field::SCHED), Attr::s("-"));
    b.set(&limit_attr(name, field::RSCHED), Attr::s("-"));
    let cp = b.name(&limit_attr(name, field::CAPACITY));
    let tk = b.name(&limit_attr(name, field::TOKENS));
    conditions.push(format!(
        "(attribute_not_exists({cp}) OR attribute_not_exists({tk}))"
    ));
}

/// The consumption alone, after a lost lock (§3.5): no refill, no stamps;
/// each hard limit must still hold the amount, or a live soft stamp waive
/// it. A limit the config just read says is soft needs only to be there.
pub fn consumption_only(
    key: &BucketKey,
    taken: &Consume,
    soft: &dyn Fn(&str) -> bool,
    now: i64,
) -> Update {
    let mut b = UpdateBuilder::new();
    let mut conditions = Vec::new();
    let now_value = b.value(Attr::n(now));
    for (name, amount) in taken {
        let wanted = milli(*amount);
        let tk = b.name(&limit_attr(name, field::TOKENS));
        let cp = b.name(&limit_attr(name, field::CAPACITY));
        b.add(&limit_attr(name, field::TOKENS), Attr::n(-wanted));
        b.add(&limit_attr(name, field::CONSUMED), Attr::n(wanted));
        let present = format!("attribute_exists({cp}) AND attribute_exists({tk})");
        if soft(name) {
            conditions.push(present);
            continue;
        }
        let stamp = b.name(&limit_attr(name, field::SOFT));
        let floor = b.value(Attr::n(wanted));
        conditions.push(format!(
            "({tk} >= {floor} OR ({stamp} > {now_value} AND {present}))"
        ));
    }
    let condition = (!conditions.is_empty()).then(|| conditions.join(" AND "));
    b.build(&key.pk(), SK_STATE, condition)
}
