//! A slow pass's plan of one bucket (pure): what was read, refilled and
//! debited, as one write. A new bucket is a `Put` with a check on its
//! owner's META (§3.3); an existing one an update locked on `rf` (§3.4).

use crate::bucket::{self, BucketView, LimitView, SchedStrings, WCU_CAPACITY, WCU_PERIOD_MS};
use crate::config::Resolved;
use crate::status::{Consume, Quotes, quoted_config};
use std::collections::BTreeMap;
use std::sync::Arc;
use zae_table::bucket::{
    BYPASS, CASCADE, PARENT_GENERATION, PARENT_ID, PARENT_INCARNATION, REFILLED_AT, SCHED_NONE,
    SHARD_COUNT, TTL, VALID_UNTIL, field, limit_attr,
    sched::{self, Named},
};
use zae_table::config::LimitConfig;
use zae_table::entity::Meta;
use zae_table::keys::{BucketKey, SK_STATE};
use zae_table::milli::MILLI;
use zae_table::names::WCU_LIMIT;
use zae_table::schedule::LimitSchedule;
use zae_table::store::{ITEM_ABSENT, ITEM_EXISTS, TxWrite, Update, UpdateBuilder};
use zae_table::{Attr, Item};

/// How the pass writes soft stamps and TTLs.
#[derive(Clone, Copy)]
pub struct Stamps<'a> {
    /// A stamp's deadline when written at `now`.
    pub deadline: &'a (dyn Fn(i64) -> i64 + Send + Sync),
    /// `bucket_ttl_multiplier`; `<= 0` writes no TTL.
    pub ttl_multiplier: i64,
}

/// What a pass plans one bucket with: the config and META it read, the
/// acquire's consumption, and its two clocks.
#[derive(Clone, Copy)]
pub struct Pass<'a> {
    pub resolved: &'a Resolved,
    pub meta: Option<&'a Meta>,
    pub consume: &'a Consume,
    /// When the pass read: refills, stamps and bypass are judged here.
    pub now_plan: i64,
    /// When it writes: `rf` and the TTL (a create's `rf` too).
    pub now_commit: i64,
    pub stamps: Stamps<'a>,
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
    /// Admitted under bypass (config and stamp): counted, not debited.
    pub bypassed: bool,
    /// `vu` and the schedule strings once the write lands, and the
    /// schedules judged by: what a lease credit pins and bounds by.
    pub vu: Option<i64>,
    pub sched: SchedStrings,
    pub schedules: BTreeMap<String, Arc<LimitSchedule>>,
}

/// Seconds a limit takes to refill from empty, as the Python client
/// computes it (floats, the same operations in the same order): the
/// slowest of its base parameters and every window of its schedule (an
/// absolute entry can slow the refill), since a TTL cannot know which
/// window it will land in.
fn recovery_seconds(limit: &LimitConfig) -> f64 {
    // A quota recovers whole at its reset: its window, or its cron's cycle.
    if let Some(rsa) = limit.reset_after_seconds {
        return rsa as f64;
    }
    if let Some(resets) = limit
        .rsched
        .as_deref()
        .and_then(|r| zae_table::schedule::decode_resets(r).ok())
    {
        return resets.iter().map(|p| p.cycle_seconds()).min().unwrap_or(0) as f64;
    }
    let base = (
        limit.capacity * MILLI,
        limit.refill_amount * MILLI,
        limit.refill_period * MILLI,
    );
    let fill = |(cp, ra, rp): (i64, i64, i64)| (cp as f64 / ra as f64) * (rp as f64 / 1000.0);
    let entries = limit
        .sched
        .as_deref()
        .and_then(|s| zae_table::schedule::decode_params(s).ok())
        .unwrap_or_default();
    entries
        .iter()
        .map(|e| fill(e.params(base.0, base.1, base.2)))
        .fold(fill(base), f64::max)
}

/// The item's write budget as the Python client's slow pass carries it
/// through its lease (whole units, each at least 1), whose limits its TTL
/// is computed from.
fn carried(wcu: &LimitView) -> LimitConfig {
    LimitConfig::drip(
        WCU_LIMIT,
        (wcu.cp / MILLI).max(1),
        (wcu.ra / MILLI).max(1),
        (wcu.rp / MILLI).max(1),
    )
}

/// `ttl` for a bucket whose limits come from the resource or system level:
/// the slowest recovery among the configured limits and, on an existing
/// item, its write budget (`wcu`), times the multiplier.
pub fn ttl_at(
    resolved: &Resolved,
    wcu: Option<&LimitView>,
    now_ms: i64,
    multiplier: i64,
) -> Option<i64> {
    if resolved.is_entity_level() || multiplier <= 0 || resolved.limits.is_empty() {
        return None;
    }
    let longest = resolved
        .limits
        .iter()
        .map(recovery_seconds)
        .chain(wcu.map(|w| recovery_seconds(&carried(w))))
        .fold(0.0_f64, f64::max);
    let seconds = (longest * multiplier as f64) as i64;
    Some(now_ms.div_euclid(1000).saturating_add(seconds))
}

pub(super) fn milli(tokens: i64) -> i64 {
    tokens.saturating_mul(MILLI)
}

/// A configured limit as a new bucket (or a seed) starts it on a shard:
/// the share of the capacity its schedule puts in force at `now`.
fn fresh(limit: &LimitConfig, pass: Pass<'_>, shards: i64, consumed: i64) -> LimitView {
    let cp = milli(limit.capacity);
    let base = (cp, milli(limit.refill_amount), milli(limit.refill_period));
    let (start, _, _) = match crate::config::schedule_of(limit, pass.resolved.sched_tz.as_deref()) {
        Ok(Some(schedule)) => schedule.params_at(base, pass.now_plan),
        _ => base,
    };
    LimitView {
        tk: start.div_euclid(shards.max(1)).saturating_sub(consumed),
        cp,
        ra: milli(limit.refill_amount),
        rp: milli(limit.refill_period),
        tc: consumed,
        soft: None,
        soft_present: false,
        // A quota is granted at the item's count; a duration window opens
        // with the limit (its start applied at once).
        gc: crate::config::is_quota(limit).then_some(shards),
        rsa: limit.reset_after_seconds,
        ws: limit.reset_after_seconds.map(|_| pass.now_plan),
        wa: limit.reset_after_seconds.map(|_| pass.now_plan),
    }
}

/// A limit's quota fields as a write sets them (those it has).
fn quota_fields(l: &LimitView) -> Vec<(&'static str, i64)> {
    [
        (field::GRANT_COUNT, l.gc),
        (field::RESET_AFTER, l.rsa),
        (field::WINDOW_START, l.ws),
        (field::WINDOW_APPLIED, l.wa),
    ]
    .into_iter()
    .filter_map(|(f, v)| Some((f, v?)))
    .collect()
}

fn limit_attrs(item: &mut Item, name: &str, l: &LimitView) {
    for (f, v) in l.fields().into_iter().chain(quota_fields(l)) {
        item.insert(limit_attr(name, f), Attr::n(v));
    }
}

/// The end of every duration window in `limits`, for `vu`.
fn window_ends<'a>(limits: impl IntoIterator<Item = &'a LimitView>) -> Option<i64> {
    limits.into_iter().filter_map(BucketView::window_end).min()
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

/// Plans a new bucket on `key`'s shard (§3.3), as of `pass.now_commit`.
pub fn plan_create(key: &BucketKey, shards: i64, pass: Pass<'_>) -> Planned {
    let Pass {
        resolved,
        meta,
        consume,
        stamps,
        now_commit: now,
        ..
    } = pass;
    let mut item = key.new_item();
    item.insert(REFILLED_AT.to_owned(), Attr::n(now));
    item.insert(SHARD_COUNT.to_owned(), Attr::n(shards));
    item.insert(CASCADE.to_owned(), Attr::Bool(cascades(resolved, meta)));
    if let Some(ttl) = ttl_at(resolved, None, now, stamps.ttl_multiplier) {
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
    // Created under bypass: funded as any create, stamped, nothing debited.
    let bypassed = resolved.bypassed();
    if bypassed {
        let deadline = (stamps.deadline)(pass.now_plan);
        item.insert(BYPASS.to_owned(), Attr::n(deadline));
    }
    let mut after = BTreeMap::new();
    let mut admitted = true;
    for limit in &resolved.limits {
        let consumed = milli(consume.get(&limit.name).copied().unwrap_or_default());
        let mut view = fresh(limit, pass, shards, if bypassed { 0 } else { consumed });
        view.tc = consumed;
        // A `limits=` soft limit is trusted for this write, stamped on nothing.
        if limit.soft && !resolved.from_override {
            let deadline = (stamps.deadline)(now);
            item.insert(limit_attr(&limit.name, field::SOFT), Attr::n(deadline));
            view.soft = Some(deadline);
            view.soft_present = true;
        } else if !limit.soft && view.tk < 0 {
            admitted = false;
        }
        limit_attrs(&mut item, &limit.name, &view);
        after.insert(limit.name.clone(), view);
    }
    stamp_schedules(
        &mut item,
        resolved,
        pass.now_plan,
        window_ends(after.values()),
    );
    let image = BucketView::read(&item);
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
        bypassed,
        vu: image.vu,
        sched: image.sched_strings,
        schedules: resolved.schedules(),
    }
}

/// The zone a pass writes schedules in: the level's, else UTC.
fn zone(resolved: &Resolved) -> &str {
    resolved.sched_tz.as_deref().unwrap_or("UTC")
}

/// The earliest boundary after `now` over the configured schedules: the
/// `vu` a materialising write stamps.
fn boundary(resolved: &Resolved, now: i64) -> Option<i64> {
    resolved
        .schedules()
        .values()
        .filter_map(|s| s.boundary(now))
        .min()
}

/// A new item's schedules (defaults, overrides, zone) and its `vu`.
fn stamp_schedules(item: &mut Item, resolved: &Resolved, now: i64, windows: Option<i64>) {
    let named: Vec<Named<'_>> = resolved.limits.iter().map(named).collect();
    sched::stamp_new_item(item, &named, zone(resolved));
    if let Some(vu) = boundary(resolved, now).into_iter().chain(windows).min() {
        item.insert(VALID_UNTIL.to_owned(), Attr::n(vu));
    }
}

fn named(limit: &LimitConfig) -> Named<'_> {
    Named {
        name: &limit.name,
        sched: limit.sched.as_deref().filter(|s| !s.is_empty()),
        rsched: limit.rsched.as_deref().filter(|s| !s.is_empty()),
    }
}

/// An update being planned: its expression and conditions, and what the
/// pass computes of the limits after it.
struct Draft {
    b: UpdateBuilder,
    conditions: Vec<String>,
    after: BTreeMap<String, LimitView>,
    refilled_at: BTreeMap<String, i64>,
    /// Every limit passed so far.
    admitted: bool,
    /// The schedule strings once the write lands (seeds spell theirs).
    sched: SchedStrings,
}

impl Draft {
    fn new(conditions: Vec<String>) -> Draft {
        Draft {
            b: UpdateBuilder::new(),
            conditions,
            after: BTreeMap::new(),
            refilled_at: BTreeMap::new(),
            admitted: true,
            sched: SchedStrings::default(),
        }
    }
}

/// Plans the rf-locked write to an existing bucket (§3.4).
pub fn plan_update(key: &BucketKey, view: &BucketView, pass: Pass<'_>) -> Planned {
    let mut d = Draft::new(Vec::new());
    d.sched = view.sched_strings.clone();
    d.lock(view, pass);
    d.debit(view, pass);
    if !pass.resolved.from_override {
        d.restamp_soft(view, pass.resolved, pass.now_plan, pass.stamps, true);
    }
    let wanted = pass.resolved.bypassed();
    d.restamp_bypass(
        view,
        wanted.then(|| (pass.stamps.deadline)(pass.now_plan)),
        pass.now_plan,
    );
    d.seed_missing(view, pass);
    bucket::pin_valid_until(&mut d.b, &mut d.conditions, view.vu);
    let vu = boundary(pass.resolved, pass.now_plan)
        .into_iter()
        .chain(window_ends(d.after.values()))
        .min();
    match vu {
        Some(vu) => d.b.set(VALID_UNTIL, Attr::n(vu)),
        None => d.b.remove(VALID_UNTIL),
    };
    let update =
        d.b.build(&key.pk(), SK_STATE, Some(d.conditions.join(" AND ")));
    Planned {
        key: key.clone(),
        write: TxWrite::Update(update),
        after: d.after,
        shard_count: view.shard_count,
        rf: pass.now_commit.max(view.rf),
        refilled_at: d.refilled_at,
        admitted: d.admitted,
        view: Some(view.clone()),
        quoted: quoted_config(&pass.resolved.limits),
        bypassed: false,
        vu,
        sched: d.sched,
        schedules: view.schedules.clone(),
    }
}

impl Draft {
    /// The lock on `rf` as read, the new `rf` and TTL, and the owner's stamp.
    fn lock(&mut self, view: &BucketView, pass: Pass<'_>) {
        let b = &mut self.b;
        let rf = b.name(REFILLED_AT);
        let expected = b.value(Attr::n(view.rf));
        self.conditions.push(format!("{rf} = {expected}"));
        b.set(REFILLED_AT, Attr::n(pass.now_commit.max(view.rf)));
        let wcu = view.wcu.as_ref();
        match ttl_at(
            pass.resolved,
            wcu,
            pass.now_commit,
            pass.stamps.ttl_multiplier,
        ) {
            Some(ttl) => {
                b.set(TTL, Attr::n(ttl));
            }
            None => {
                b.remove(TTL);
            }
        }
        if let Some(meta) = pass.meta {
            self.owner_stamp(pass.resolved, meta);
        }
    }

    /// Each limit on the item refilled to `now_plan` and debited; a hard
    /// limit that falls short is held by a floor, a refill by the balance
    /// read. The write budget is refilled, never spent.
    fn debit(&mut self, view: &BucketView, pass: Pass<'_>) {
        // An enforced pass enforces, whatever stamp the item carries: the
        // stamp follows the config it read (`restamp_bypass`).
        let (shards, now_plan) = (view.shard_count, pass.now_plan);
        let b = &mut self.b;
        let now_value = b.value(Attr::n(now_plan));
        for (name, limit) in &view.limits {
            let consumed = milli(pass.consume.get(name).copied().unwrap_or_default());
            let (effective, restored) = view.materialise(name, limit, now_plan);
            let projected = effective.project(view.rf, now_plan, shards);
            let refill = projected.saturating_sub(limit.tk);
            let soft = pass.resolved.is_soft(name);
            // Under `limits=`, an item limit the override does not name is
            // carried (refilled), never gated.
            let gated = !pass.resolved.from_override || pass.resolved.limit(name).is_some();
            if gated && !soft && projected < consumed {
                self.admitted = false;
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
                self.conditions
                    .push(format!("({stamp} > {now_value} OR {tk} >= {floor})"));
            }
            if refill > 0 {
                let read = b.value(Attr::n(limit.tk));
                self.conditions.push(format!("{tk} <= {read}"));
            }
            let mut next = *limit;
            self.refilled_at.insert(
                name.clone(),
                effective.refill_to(view.rf, now_plan, shards).1,
            );
            next.tk = projected.saturating_sub(consumed);
            next.tc = limit.tc.saturating_add(consumed);
            let quota = pass
                .resolved
                .limit(name)
                .is_some_and(crate::config::is_quota);
            if restored && quota {
                // A reset or a window's roll re-grants at the item's count.
                next.gc = Some(shards);
            }
            if effective.rsa.is_some() {
                (next.ws, next.wa, next.rsa) = (effective.ws, effective.wa, effective.rsa);
            }
            for (f, v) in quota_fields(&next) {
                if f != field::GRANT_COUNT || (restored && quota) {
                    b.set(&limit_attr(name, f), Attr::n(v));
                }
            }
            self.after.insert(name.clone(), next);
        }
        if let Some(wcu) = &view.wcu {
            let refill = wcu.project(view.rf, now_plan, 1).saturating_sub(wcu.tk);
            b.add(&limit_attr(WCU_LIMIT, field::TOKENS), Attr::n(refill));
            b.add(&limit_attr(WCU_LIMIT, field::CONSUMED), Attr::n(0));
        }
    }

    /// Configured limits missing from the item, seeded whole (debited).
    fn seed_missing(&mut self, view: &BucketView, pass: Pass<'_>) {
        for limit in &pass.resolved.limits {
            if view.limits.contains_key(&limit.name) {
                continue;
            }
            let consumed = milli(pass.consume.get(&limit.name).copied().unwrap_or_default());
            let mut seeded = fresh(limit, pass, view.shard_count, consumed);
            if limit.soft && !pass.resolved.from_override {
                let deadline = (pass.stamps.deadline)(pass.now_plan);
                self.b
                    .set(&limit_attr(&limit.name, field::SOFT), Attr::n(deadline));
                (seeded.soft, seeded.soft_present) = (Some(deadline), true);
            } else if !limit.soft && seeded.tk < 0 {
                self.admitted = false;
            }
            self.seed(named(limit), zone(pass.resolved), &seeded);
            self.after.insert(limit.name.clone(), seeded);
        }
    }

    /// The owner's `cascade`, `parent_id`, `pgen` and `pinc`, pinned on not
    /// lowering the generation of the same incarnation.
    fn owner_stamp(&mut self, resolved: &Resolved, meta: &Meta) {
        let (b, conditions) = (&mut self.b, &mut self.conditions);
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
    fn restamp_soft(
        &mut self,
        view: &BucketView,
        resolved: &Resolved,
        now: i64,
        stamps: Stamps<'_>,
        renew_live: bool,
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
            let alias = self.b.name(&attr);
            match change {
                Some(deadline) => self.b.set(&attr, Attr::n(deadline)),
                None => self.b.remove(&attr),
            };
            match limit.soft {
                Some(read) => {
                    let read = self.b.value(Attr::n(read));
                    self.conditions.push(format!("{alias} = {read}"));
                }
                None if !limit.soft_present => self
                    .conditions
                    .push(format!("attribute_not_exists({alias})")),
                None => {}
            }
            if let Some(next) = self.after.get_mut(name) {
                next.soft = change;
                next.soft_present = change.is_some();
            }
        }
        changed
    }

    /// The `bypass` stamp follows the config this pass read (`wanted`: the
    /// deadline when it says bypass): set when missing, renewed once past,
    /// removed when config no longer backs it; pinned on the stamp as read.
    /// Whether it changed.
    fn restamp_bypass(&mut self, view: &BucketView, wanted: Option<i64>, now: i64) -> bool {
        let change = match (wanted, view.bypass_present) {
            (None, false) => return false,
            (Some(_), true) if view.bypassed(now) => return false,
            (change, _) => change,
        };
        let alias = self.b.name(BYPASS);
        match change {
            Some(deadline) => self.b.set(BYPASS, Attr::n(deadline)),
            None => self.b.remove(BYPASS),
        };
        match view.bypass {
            Some(read) => {
                let read = self.b.value(Attr::n(read));
                self.conditions.push(format!("{alias} = {read}"));
            }
            None if !view.bypass_present => self
                .conditions
                .push(format!("attribute_not_exists({alias})")),
            None => {}
        }
        true
    }

    /// A configured limit missing from an existing item, written whole.
    fn seed(&mut self, limit: Named<'_>, tz: &str, l: &LimitView) {
        let (b, name) = (&mut self.b, limit.name);
        for (f, v) in l.fields().into_iter().chain(quota_fields(l)) {
            b.set(&limit_attr(name, f), Attr::n(v));
        }
        for (attr, value) in sched::seed_attrs(limit, tz) {
            b.set(&attr, value);
        }
        let own = [limit.sched, limit.rsched].map(|s| Some(s.unwrap_or(SCHED_NONE).to_owned()));
        self.sched.limits.insert(name.to_owned(), own);
        if limit.sched.is_some() || limit.rsched.is_some() {
            self.sched.item[2] = Some(tz.to_owned());
        }
        let cp = b.name(&limit_attr(name, field::CAPACITY));
        let tk = b.name(&limit_attr(name, field::TOKENS));
        self.conditions.push(format!(
            "(attribute_not_exists({cp}) OR attribute_not_exists({tk}))"
        ));
    }
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
    let mut d = Draft::new(vec![ITEM_EXISTS.to_owned()]);
    let soft = !resolved.from_override && d.restamp_soft(view, resolved, now, stamps, false);
    let wanted = resolved.bypassed().then(|| (stamps.deadline)(now));
    let bypass = d.restamp_bypass(view, wanted, now);
    (soft || bypass).then(|| {
        d.b.build(&key.pk(), SK_STATE, Some(d.conditions.join(" AND ")))
    })
}
