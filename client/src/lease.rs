//! What an admitted acquire holds (§6 of the protocol): the buckets it
//! debited, in-memory `consume`, `adjust` and `release`, and at the end one
//! write per bucket with the net change (`commit`), or a refund of the
//! initial debit (`rollback`).

use crate::bucket::{self, BucketView, LimitView};
use crate::error::{Error, RateLimitExceeded};
use crate::shared::Shared;
use crate::status::{self, Consume};
use std::collections::BTreeMap;
use std::sync::Arc;
use zae_table::Attr;
use zae_table::bucket::{SHARD_COUNT, VALID_UNTIL, field, limit_attr};
use zae_table::config::MAX_TOKENS;
use zae_table::keys::{BucketKey, SK_STATE};
use zae_table::milli::MILLI;
use zae_table::store::{ITEM_EXISTS, Returns, Store, StoreError, Update, UpdateBuilder};

/// One attempt's end: admitted with the buckets debited, or refused.
pub(crate) type Outcome = Result<Vec<Entry>, Error>;

/// One bucket the lease debited.
#[derive(Debug, Clone)]
pub struct Entry {
    pub key: BucketKey,
    /// Millitokens debited by the initial commit, per limit.
    pub debited: BTreeMap<String, i64>,
    /// The limits the acquire named (the lease's declared limits), as the
    /// lease sees them after its own writes.
    pub limits: BTreeMap<String, LimitView>,
    pub soft: Vec<String>,
    pub rf: i64,
    /// Where each limit's in-memory refill has reached (`rf` until the
    /// lease refills it).
    pub refilled_at: BTreeMap<String, i64>,
    pub shard_count: i64,
    /// `vu` as known at the commit (pinned by credits).
    pub vu: Option<i64>,
    /// Admitted under a bypass stamp: later writes count, never debit.
    pub bypassed: bool,
    /// The bucket carries a feature this client refuses (a sharded quota,
    /// a top-up, an unreadable schedule): credits that fail their pins are
    /// dropped, never forced.
    pub foreign: bool,
    /// Millitokens consumed since the initial commit (negative: released).
    pub pending: BTreeMap<String, i64>,
    /// The configured limits a slow pass judged by, as statuses quote them
    /// (empty on the fast path: the bucket's are quoted).
    pub(crate) quoted: crate::status::Quotes,
    /// The limits' schedules, for a credit's ceiling, and the strings as
    /// stored, which that ceiling pins.
    pub(crate) schedules: BTreeMap<String, Arc<zae_table::schedule::LimitSchedule>>,
    pub(crate) sched: crate::bucket::SchedStrings,
}

/// `limit` with the parameters its schedule puts in force at `now`.
fn scheduled(
    schedules: &BTreeMap<String, Arc<zae_table::schedule::LimitSchedule>>,
    name: &str,
    limit: &LimitView,
    now: i64,
) -> LimitView {
    limit.under(schedules.get(name).map(|s| &**s), now)
}

impl Entry {
    /// A limit's ceiling on this shard, by the parameters in force when the
    /// lease read it (a passed boundary fails the credit's `vu` pin).
    fn ceiling(&self, name: &str, limit: &LimitView) -> i64 {
        scheduled(&self.schedules, name, limit, self.rf).ceiling(self.shard_count)
    }
}

/// The buckets an acquire debited. Commit it to write the adjustments; an
/// error in the caller's work should roll it back. Dropped without either,
/// it commits in the background (as a Python lease leaving its block
/// normally does), when a Tokio runtime is there to run the write.
pub struct Lease<S: Store + 'static> {
    shared: Option<Arc<Shared<S>>>,
    entries: Vec<Entry>,
    degraded: bool,
    /// The resources of an `acquire_many`, primary first; empty for one.
    resources: Vec<String>,
}

impl<S: Store + 'static> std::fmt::Debug for Lease<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("entries", &self.entries)
            .field("degraded", &self.degraded)
            .finish()
    }
}

impl<S: Store + 'static> Lease<S> {
    pub(crate) fn new(shared: Arc<Shared<S>>, entries: Vec<Entry>) -> Self {
        Lease {
            shared: Some(shared),
            entries,
            degraded: false,
            resources: Vec::new(),
        }
    }

    /// Admitted without the table (`OnUnavailable::Allow`): writes nothing.
    pub(crate) fn degraded() -> Self {
        Lease {
            shared: None,
            entries: Vec::new(),
            degraded: true,
            resources: Vec::new(),
        }
    }

    /// Admitted while the table could not be reached; nothing was counted.
    pub fn is_degraded(&self) -> bool {
        self.degraded
    }

    /// The acquiring entity was admitted under a bypass stamp: counted,
    /// not limited. Its own state, as the Python lease reports it: a
    /// cascade parent resolves its own mode, and a bypassed parent leaves
    /// the entity limited.
    pub fn is_bypassed(&self) -> bool {
        self.bypassed_in(self.primary().as_deref())
    }

    /// The buckets debited: the entity's, then its parent's in a cascade.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Soft limits this lease holds below zero, on any of its buckets (the
    /// parent's too, in a cascade), by name.
    pub fn overdrawn(&self) -> Vec<String> {
        self.overdrawn_in(self.primary().as_deref())
    }

    fn overdrawn_in(&self, resource: Option<&str>) -> Vec<String> {
        let mut names: Vec<String> = self
            .entries
            .iter()
            .filter(|e| in_scope(e, resource))
            .flat_map(|e| {
                e.soft
                    .iter()
                    .filter(|n| e.limits.get(*n).is_some_and(|l| l.tk < 0))
            })
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Adds (or with a negative amount, gives back) tokens, in memory; never
    /// refused. Each limit is refilled to now first, as the Python lease
    /// does. Names the acquire did not declare, and amounts beyond the
    /// client's ceiling (10^15 tokens either way), are ignored with a warning.
    pub fn adjust(&mut self, amounts: &[(&str, i64)]) {
        let primary = self.primary();
        self.adjust_in(primary.as_deref(), amounts);
    }

    fn adjust_in(&mut self, resource: Option<&str>, amounts: &[(&str, i64)]) {
        let now = self.shared.as_ref().map(|s| s.now()).unwrap_or_default();
        for entry in self.entries.iter_mut().filter(|e| in_scope(e, resource)) {
            for (name, amount) in amounts {
                if *amount == 0 {
                    continue;
                }
                if !(-MAX_TOKENS..=MAX_TOKENS).contains(amount) {
                    tracing::warn!(limit = name, amount, "adjust: beyond 10^15 tokens; ignored");
                    continue;
                }
                let Some(limit) = entry.limits.get_mut(*name) else {
                    tracing::warn!(
                        limit = name,
                        "adjust: a limit the bucket does not have; ignored"
                    );
                    continue;
                };
                let rf = entry.refilled_at.get(*name).copied().unwrap_or(entry.rf);
                let effective = scheduled(&entry.schedules, name, limit, now);
                let (tokens, reached) = effective.refill_to(rf, now, entry.shard_count);
                let delta = amount * MILLI;
                let pending = entry.pending.entry((*name).to_owned()).or_default();
                let Some(total) = pending.checked_add(delta) else {
                    tracing::warn!(
                        limit = name,
                        "adjust: the lease's total would overflow; ignored"
                    );
                    continue;
                };
                *pending = total;
                limit.tk = tokens.saturating_sub(delta);
                entry.refilled_at.insert((*name).to_owned(), reached);
            }
        }
    }

    /// Gives tokens back: `adjust` with the amounts negated.
    pub fn release(&mut self, amounts: &[(&str, i64)]) {
        let primary = self.primary();
        self.release_in(primary.as_deref(), amounts);
    }

    fn release_in(&mut self, resource: Option<&str>, amounts: &[(&str, i64)]) {
        let negated: Vec<(&str, i64)> = amounts
            .iter()
            .map(|(n, a)| (*n, a.saturating_neg()))
            .collect();
        self.adjust_in(resource, &negated);
    }

    /// Takes more tokens, all or none, judged in memory against the
    /// balances refilled to now; a shortfall is a rejection and changes
    /// nothing.
    pub fn consume(&mut self, amounts: &[(&str, i64)]) -> Result<(), Error> {
        let primary = self.primary();
        self.consume_in(primary.as_deref(), amounts)
    }

    fn consume_in(&mut self, resource: Option<&str>, amounts: &[(&str, i64)]) -> Result<(), Error> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        let now = shared.now();
        if let Some((name, amount)) = amounts.iter().find(|(_, a)| *a > MAX_TOKENS) {
            return Err(Error::Validation(format!(
                "consume {name}={amount}: at most {MAX_TOKENS} tokens"
            )));
        }
        // Amounts of 0 or less take nothing, as in the Python lease; their
        // limits are neither judged nor listed.
        let skipped: Vec<&str> = amounts
            .iter()
            .filter(|(_, a)| *a <= 0)
            .map(|(n, _)| *n)
            .collect();
        let amounts: Vec<(&str, i64)> = amounts.iter().copied().filter(|(_, a)| *a > 0).collect();
        let asked: Consume = amounts.iter().map(|(n, a)| ((*n).to_owned(), *a)).collect();
        let mut statuses = Vec::new();
        for entry in self.entries.iter().filter(|e| in_scope(e, resource)) {
            statuses.extend(entry_statuses(entry, &asked, now));
        }
        statuses.retain(|s| !skipped.contains(&s.limit.as_str()));
        // Listed, never judged: a limit this call does not take from (one
        // the lease's own adjust put in debt) refuses nothing, as in Python.
        for status in statuses
            .iter_mut()
            .filter(|s| !asked.contains_key(&s.limit))
        {
            (status.exceeded, status.retry_after_ms) = (false, 0);
        }
        if statuses.iter().any(|s| s.exceeded) {
            return Err(Error::RateLimitExceeded(RateLimitExceeded {
                statuses,
                contended: false,
            }));
        }
        self.adjust_in(resource, &amounts);
        Ok(())
    }

    /// Names the resources of an `acquire_many` lease, primary first.
    pub(crate) fn with_resources(mut self, resources: Vec<String>) -> Self {
        self.resources = resources;
        self
    }

    /// The resources this lease covers, the primary one first (empty when
    /// degraded, which covers nothing).
    pub fn resources(&self) -> Vec<String> {
        if !self.resources.is_empty() {
            return self.resources.clone();
        }
        self.primary().into_iter().collect()
    }

    /// One resource of a multi-resource lease: `adjust`, `consume` and
    /// `release` on the lease act on the primary resource alone (as the
    /// Python lease's do), and on another through its handle. Two resources
    /// may declare limits of one name; each handle sees its own. Every
    /// resource is written at the lease's commit or rollback.
    pub fn resource(&mut self, name: &str) -> Result<LeaseResource<'_, S>, Error> {
        let known = self.resources();
        if !self.degraded && !known.iter().any(|r| r == name) {
            return Err(Error::Validation(format!(
                "Invalid resource: not a resource of this lease (resources: {known:?})"
            )));
        }
        Ok(LeaseResource {
            lease: self,
            name: name.to_owned(),
        })
    }

    /// The resource `adjust`, `consume` and `release` act on.
    fn primary(&self) -> Option<String> {
        match self.resources.first() {
            Some(r) => Some(r.clone()),
            None => self.entries.first().map(|e| e.key.resource.clone()),
        }
    }

    /// The acquiring entity's own state on `resource` (its first entry).
    fn bypassed_in(&self, resource: Option<&str>) -> bool {
        let Some(entity) = self.entries.first().map(|e| &e.key.entity) else {
            return false;
        };
        self.entries
            .iter()
            .find(|e| &e.key.entity == entity && in_scope(e, resource))
            .is_some_and(|e| e.bypassed)
    }

    /// Writes each bucket's net change since the acquire: one write per
    /// bucket that changed.
    pub async fn commit(mut self) -> Result<(), Error> {
        let (Some(shared), entries) = (self.shared.take(), std::mem::take(&mut self.entries))
        else {
            return Ok(());
        };
        commit_entries(&shared, &entries).await
    }

    /// Refunds what the acquire debited (in-memory changes are dropped).
    /// Failures are logged, not returned: the caller's own error matters.
    pub async fn rollback(mut self) {
        let (Some(shared), entries) = (self.shared.take(), std::mem::take(&mut self.entries))
        else {
            return;
        };
        rollback_entries(&shared, &entries).await;
    }
}

/// An entry's statuses at `now` for `asked`, each limit judged on its own
/// in-memory refill.
pub(crate) fn entry_statuses(
    entry: &Entry,
    asked: &Consume,
    now: i64,
) -> Vec<crate::error::LimitStatus> {
    let limits = entry.limits.iter().map(|(n, l)| {
        let rf = entry.refilled_at.get(n).copied().unwrap_or(entry.rf);
        let (tk, _) = scheduled(&entry.schedules, n, l, now).refill_to(rf, now, entry.shard_count);
        (n.clone(), crate::bucket::LimitView { tk, ..*l })
    });
    let view = crate::bucket::BucketView {
        rf: now,
        shard_count: entry.shard_count,
        limits: limits.collect(),
        bypass: entry.bypassed.then_some(i64::MAX),
        schedules: entry.schedules.clone(),
        ..Default::default()
    };
    let soft = |n: &str| entry.soft.iter().any(|s| s == n);
    let who = (entry.key.entity.as_str(), entry.key.resource.as_str());
    status::statuses(who, &view, asked, (&soft, &entry.quoted), now)
}

/// Whether an entry is one of `resource`'s (every entry for `None`).
fn in_scope(entry: &Entry, resource: Option<&str>) -> bool {
    resource.is_none_or(|r| entry.key.resource == r)
}

/// One resource of a lease (`Lease::resource`): its own limits alone.
pub struct LeaseResource<'l, S: Store + 'static> {
    lease: &'l mut Lease<S>,
    name: String,
}

impl<S: Store + 'static> LeaseResource<'_, S> {
    /// The resource this handle acts on.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `Lease::adjust` on this resource's buckets.
    pub fn adjust(&mut self, amounts: &[(&str, i64)]) {
        self.lease.adjust_in(Some(&self.name), amounts);
    }

    /// `Lease::release` on this resource's buckets.
    pub fn release(&mut self, amounts: &[(&str, i64)]) {
        self.lease.release_in(Some(&self.name), amounts);
    }

    /// `Lease::consume` on this resource's buckets.
    pub fn consume(&mut self, amounts: &[(&str, i64)]) -> Result<(), Error> {
        self.lease.consume_in(Some(&self.name), amounts)
    }

    /// `Lease::overdrawn` on this resource's buckets.
    pub fn overdrawn(&self) -> Vec<String> {
        self.lease.overdrawn_in(Some(&self.name))
    }

    /// `Lease::is_bypassed` on this resource.
    pub fn is_bypassed(&self) -> bool {
        self.lease.bypassed_in(Some(&self.name))
    }
}

impl<S: Store + 'static> Drop for Lease<S> {
    fn drop(&mut self) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        let entries = std::mem::take(&mut self.entries);
        // Unwinding from a panic is the caller's work failing: roll back,
        // as the Python lease does on an exception.
        let failed = std::thread::panicking();
        if !failed && entries.iter().all(|e| e.pending.values().all(|d| *d == 0)) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if failed {
                        rollback_entries(&shared, &entries).await;
                    } else if let Err(e) = commit_entries(&shared, &entries).await {
                        tracing::warn!(error = %e, "a dropped lease's adjustments were not written");
                    }
                });
            }
            Err(_) => {
                tracing::warn!("a lease dropped outside a Tokio runtime: its adjustments are lost")
            }
        }
    }
}

/// A lease on its way from the acquire's task to its caller: rolled back
/// when it is dropped unclaimed (the caller stopped waiting).
pub(crate) struct Unclaimed<S: Store + 'static>(Option<Lease<S>>);

impl<S: Store + 'static> Unclaimed<S> {
    pub(crate) fn new(lease: Lease<S>) -> Self {
        Unclaimed(Some(lease))
    }

    pub(crate) fn claim(mut self) -> Lease<S> {
        // Only here and in `drop` is it taken: `Some` until then.
        self.0.take().expect("a lease is claimed once")
    }
}

impl<S: Store + 'static> Drop for Unclaimed<S> {
    fn drop(&mut self) {
        let Some(lease) = self.0.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(lease.rollback());
            }
            Err(_) => tracing::warn!(
                "an acquire nobody waited for ended outside a Tokio runtime: its debit stays"
            ),
        }
    }
}

async fn rollback_entries<S: Store>(shared: &Shared<S>, entries: &[Entry]) {
    for entry in entries {
        // Tokens come back: the shard's cached image no longer holds.
        shared.rejections.forget_key(&entry.key);
        let refund = negated(&entry.debited);
        if let Err(e) = write_net(&shared.store, entry, &refund, Part::of(entry)).await {
            tracing::warn!(bucket = %entry.key.pk(), error = %e, "rollback: the refund failed");
        }
    }
}

async fn commit_entries<S: Store>(shared: &Shared<S>, entries: &[Entry]) -> Result<(), Error> {
    // A release may give tokens back: the shards' cached images no longer hold.
    for entry in entries
        .iter()
        .filter(|e| e.pending.values().any(|d| *d != 0))
    {
        shared.rejections.forget_key(&entry.key);
    }
    let writes = entries
        .iter()
        .map(|e| write_net(&shared.store, e, &e.pending, Part::of(e)));
    for result in futures::future::join_all(writes).await {
        result.map_err(Error::store)?;
    }
    Ok(())
}

/// Which attributes a net change moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// Balance and count: an ordinary lease write.
    Both,
    /// The count only: a bucket admitted under a bypass stamp.
    Count,
    /// The balance only: the refund of a debit a bypass stamp waived.
    Tokens,
}

impl Part {
    /// What an entry's own writes move.
    pub(crate) fn of(entry: &Entry) -> Part {
        if entry.bypassed {
            Part::Count
        } else {
            Part::Both
        }
    }
}

/// One bucket's net change (millitokens per limit; positive debits). A
/// credit of tokens is bounded by the shard's ceiling and pinned on what
/// that ceiling came from; if the pins fail, it lands anyway with `vu = 0`,
/// which sends the next acquire through the slow path to trim the balance.
/// On a bucket carrying a feature this client does not build a credit
/// whose pins fail is dropped instead; the same change's debits are then
/// written alone. A quota's credit carries its period's terms in both
/// writes, so one across a reset is dropped too.
pub(crate) async fn write_net<S: Store>(
    store: &S,
    entry: &Entry,
    net: &BTreeMap<String, i64>,
    part: Part,
) -> Result<(), StoreError> {
    let net: Vec<(&String, i64)> = net
        .iter()
        .map(|(n, d)| (n, *d))
        .filter(|(_, d)| *d != 0)
        .collect();
    if net.is_empty() {
        return Ok(());
    }
    let credits_tokens = part != Part::Count && net.iter().any(|(_, d)| *d < 0);
    let pinned = net_update(entry, &net, part, true);
    match store.update(&pinned, Returns::Nothing).await {
        Err(StoreError::ConditionFailed { .. }) if credits_tokens => {
            if entry.foreign {
                tracing::warn!(bucket = %entry.key.pk(), "a credit to a bucket with a feature this client does not build was dropped");
            } else {
                let plain = net_update(entry, &net, part, false);
                match store.update(&plain, Returns::Nothing).await {
                    // The bucket is gone, or a quota's credit crossed its
                    // reset: the credit is dropped, never the debits.
                    Err(StoreError::ConditionFailed { .. }) => {}
                    other => return other.map(|_| ()),
                }
            }
            debits_alone(store, entry, net, part).await
        }
        other => other.map(|_| ()),
    }
}

/// The debits of a change whose credit was dropped: used all the same, so
/// written alone, as the Python lease writes the rest of an adjustment.
async fn debits_alone<S: Store>(
    store: &S,
    entry: &Entry,
    net: Vec<(&String, i64)>,
    part: Part,
) -> Result<(), StoreError> {
    let debits: Vec<(&String, i64)> = net.into_iter().filter(|(_, d)| *d > 0).collect();
    if debits.is_empty() {
        return Ok(());
    }
    let alone = net_update(entry, &debits, part, false);
    match store.update(&alone, Returns::Nothing).await {
        // The bucket is gone: nothing to write to.
        Err(StoreError::ConditionFailed { .. }) => Ok(()),
        other => other.map(|_| ()),
    }
}

fn net_update(entry: &Entry, net: &[(&String, i64)], part: Part, pinned: bool) -> Update {
    let mut b = UpdateBuilder::new();
    let mut conditions = vec![ITEM_EXISTS.to_owned()];
    let tokens = part != Part::Count;
    let credit = tokens && net.iter().any(|(_, d)| *d < 0);
    for (name, delta) in net {
        if tokens {
            b.add(
                &limit_attr(name, field::TOKENS),
                Attr::n(delta.saturating_neg()),
            );
        }
        if part != Part::Tokens {
            b.add(&limit_attr(name, field::CONSUMED), Attr::n(*delta));
        }
        let Some(limit) = entry.limits.get(*name) else {
            continue;
        };
        if tokens && *delta < 0 {
            period_terms(entry, name, limit, &mut b, &mut conditions);
        }
        if !(pinned && tokens && *delta < 0) {
            continue;
        }
        let tk = b.name(&limit_attr(name, field::TOKENS));
        let most = entry.ceiling(name, limit).saturating_add(*delta);
        let most = b.value(Attr::n(most));
        let cp = b.name(&limit_attr(name, field::CAPACITY));
        let cp_read = b.value(Attr::n(limit.cp));
        conditions.push(format!("{tk} <= {most} AND {cp} = {cp_read}"));
        pin_number(
            &mut b,
            &mut conditions,
            &limit_attr(name, field::GRANT_COUNT),
            limit.gc,
        );
        entry.sched.pin(&mut b, &mut conditions, Some(name));
    }
    if pinned && credit {
        let sc = b.name(SHARD_COUNT);
        let count = b.value(Attr::n(entry.shard_count));
        conditions.push(format!("(attribute_not_exists({sc}) OR {sc} = {count})"));
        bucket::pin_valid_until(&mut b, &mut conditions, entry.vu);
        entry.sched.pin(&mut b, &mut conditions, None);
    } else if credit {
        b.set(VALID_UNTIL, Attr::n(0));
    }
    b.build(&entry.key.pk(), SK_STATE, Some(conditions.join(" AND ")))
}

/// A number still as read (`None`: absent).
fn pin_number(b: &mut UpdateBuilder, conditions: &mut Vec<String>, attr: &str, read: Option<i64>) {
    bucket::pin_as_read(b, conditions, attr, read.map(Attr::n));
}

/// A quota credit lands only in the period of the debit it returns, in the
/// pinned write and the trim alike: a duration window as read, or no reset
/// edge passed since the lease's `rf` (the cron that edge came from, and
/// the operator-reset count, unchanged). Across a reset it is dropped.
fn period_terms(
    entry: &Entry,
    name: &str,
    limit: &LimitView,
    b: &mut UpdateBuilder,
    conditions: &mut Vec<String>,
) {
    if limit.ra != 0 {
        return;
    }
    if limit.rsa.is_some() {
        pin_number(
            b,
            conditions,
            &limit_attr(name, field::WINDOW_START),
            limit.ws,
        );
        pin_number(
            b,
            conditions,
            &limit_attr(name, field::WINDOW_APPLIED),
            limit.wa,
        );
        return;
    }
    let Some(schedule) = entry.schedules.get(name).filter(|s| !s.resets.is_empty()) else {
        return;
    };
    if let Some(edge) =
        zae_table::schedule::next_reset_edge(&schedule.resets, schedule.tz, entry.rf)
    {
        let rf = b.name(zae_table::bucket::REFILLED_AT);
        conditions.push(format!("{rf} < {}", b.value(Attr::n(edge))));
    }
    let strings = &entry.sched;
    let own = strings.limits.get(name).and_then(|l| l[1].clone());
    for (attr, read) in [
        (
            zae_table::bucket::RSCHED.to_owned(),
            strings.item[1].clone(),
        ),
        (
            zae_table::bucket::SCHED_TZ.to_owned(),
            strings.item[2].clone(),
        ),
        (limit_attr(name, field::RSCHED), own),
    ] {
        bucket::pin_as_read(b, conditions, &attr, read.map(Attr::s));
    }
    pin_number(b, conditions, &limit_attr(name, field::RESET_NUMBER), None);
}

fn debited(consume: &Consume, has: impl Fn(&str) -> bool) -> BTreeMap<String, i64> {
    consume
        .iter()
        .filter(|(n, _)| has(n))
        .map(|(n, a)| (n.clone(), a * MILLI))
        .collect()
}

/// The limits an acquire named, of those a bucket has.
fn declared(
    limits: &BTreeMap<String, LimitView>,
    consume: &Consume,
) -> BTreeMap<String, LimitView> {
    limits
        .iter()
        .filter(|(n, _)| consume.contains_key(*n))
        .map(|(n, l)| (n.clone(), *l))
        .collect()
}

/// A lease entry on `limits` as the acquire left them; the caller sets
/// where their refill stands.
pub(crate) fn entry(
    key: &BucketKey,
    limits: &BTreeMap<String, LimitView>,
    consume: &Consume,
    now: i64,
) -> Entry {
    Entry {
        key: key.clone(),
        debited: debited(consume, |n| limits.contains_key(n)),
        limits: declared(limits, consume),
        soft: limits
            .iter()
            .filter(|(_, l)| l.soft_live(now))
            .map(|(n, _)| n.clone())
            .collect(),
        rf: now,
        refilled_at: BTreeMap::new(),
        shard_count: 1,
        vu: None,
        bypassed: false,
        foreign: false,
        pending: BTreeMap::new(),
        quoted: BTreeMap::new(),
        schedules: BTreeMap::new(),
        sched: Default::default(),
    }
}

pub(crate) fn entry_from_view(
    key: &BucketKey,
    view: &BucketView,
    consume: &Consume,
    now: i64,
) -> Entry {
    Entry {
        rf: view.rf,
        shard_count: view.shard_count,
        vu: view.vu,
        foreign: view.unsupported.is_some(),
        // A bypass-shaped write counted only: so do its refund and writes.
        bypassed: view.counted_only,
        schedules: view.schedules.clone(),
        sched: view.sched_strings.clone(),
        ..entry(key, &view.limits, consume, now)
    }
}

pub(crate) fn negated(amounts: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    amounts
        .iter()
        .map(|(n, d)| (n.clone(), d.saturating_neg()))
        .collect()
}
