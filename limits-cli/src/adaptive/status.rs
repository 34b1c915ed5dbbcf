//! `zae-limits adaptive utilization`: per resource and limit, the use of the
//! recent complete minutes and of the minute in progress (apart, marked
//! partial), the estimated capacity and target, the utilization of the last
//! complete minute, the factor and why, the configured effective rate of
//! each opted-in level, and the refill amounts the buckets actually carry.

use zae_adaptive::estimator::Estimator;
use zae_adaptive::share::ShareTick;
use zae_table::adaptive::Declaration;
use zae_table::adaptive::factor::stamped_refill;
use zae_table::adaptive::target::Target;
use zae_table::adaptive::tick::Tick;
use zae_table::adaptive::usage::{MINUTE_MS, Minute, minute_of};
use zae_table::bucket::{field, limit_attr};
use zae_table::keys::{self, Index};
use zae_table::resolve::Resolver;
use zae_table::store::{Query, Store, StoreError, all_pages};
use zae_table::{Attr, Item};

/// Complete minutes shown: the usage items expire an hour after their minute.
const SHOWN_MINUTES: i64 = 15;

/// What the controller last did for a namespace.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Status {
    pub namespace: String,
    /// The controller's last tick of the table (epoch ms; 0: never).
    pub ticked_at: i64,
    pub targets: Vec<Utilization>,
}

/// One (resource, limit)'s state.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Utilization {
    pub resource: String,
    pub limit: String,
    /// Tokens per minute the resource is sized for, and the share of it the
    /// law aims use at.
    pub estimated_capacity: i64,
    pub target_utilization: f64,
    /// Tokens used in each recent complete minute, oldest first
    /// (`(minute start ms, tokens)`).
    pub minutes: Vec<(i64, f64)>,
    /// The minute in progress: partial, not a utilization.
    pub current: Option<Partial>,
    /// The last complete minute's use over the estimated capacity.
    pub utilization: Option<f64>,
    pub factor: f64,
    /// When the factor was set (epoch ms; 0: never), and why.
    pub factor_set_at: i64,
    pub reason: String,
    /// Every level that opted it in is in shadow: reported, never stamped.
    pub shadow: bool,
    /// Per opted-in level: its base rate, the effective rate it is stamped
    /// with, tokens per period.
    pub levels: Vec<LevelRate>,
    /// The refill amounts the resource's buckets carry for the limit.
    pub stamped: Option<Stamped>,
    /// Under `share: demand`: the last tick's share.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<ShareTick>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Partial {
    pub minute: i64,
    pub tokens: f64,
    pub partial: bool,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LevelRate {
    pub level: String,
    pub base: i64,
    pub effective: i64,
    pub period_seconds: i64,
    pub shadow: bool,
}

/// Refill amounts read from the buckets (tokens per period, every shard).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Stamped {
    pub buckets: usize,
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

/// The namespace's adaptive state at `now_ms`, optionally for one resource.
pub async fn status<S: Store>(
    store: &S,
    namespace: &str,
    resource: Option<&str>,
    now_ms: i64,
) -> Result<Status, StoreError> {
    let declaration = Declaration::read(store, namespace, true)
        .await?
        .and_then(Result::ok)
        .unwrap_or_default();
    let tick = Tick::read(store, true).await?;
    let targets = Target::read_all(store, namespace).await?;
    let minutes = recent_minutes(store, namespace, now_ms, SHOWN_MINUTES).await?;
    let resolver = Resolver::new(store, namespace);
    let mut out = Vec::new();
    for (r, limit, _) in declaration.targets() {
        if resource.is_some_and(|wanted| wanted != r) {
            continue;
        }
        let target = targets
            .iter()
            .find(|t| t.resource == r && t.limit == limit)
            .cloned()
            .unwrap_or_else(|| Target::base(&r, &limit));
        let at = (namespace, now_ms);
        out.push(one(store, &declaration, &resolver, &minutes, &target, at).await?);
    }
    Ok(Status {
        namespace: namespace.to_owned(),
        ticked_at: tick.ticked_at_ms,
        targets: out,
    })
}

async fn one<S: Store>(
    store: &S,
    declaration: &Declaration,
    resolver: &Resolver<'_, S>,
    minutes: &[Minute],
    target: &Target,
    (namespace, now_ms): (&str, i64),
) -> Result<Utilization, StoreError> {
    let (r, limit) = (target.resource.as_str(), target.limit.as_str());
    let capacity = declaration.capacity(r, limit).unwrap_or(0);
    let in_progress = minute_of(now_ms);
    let (used, current) = minute_tokens(minutes, r, limit, in_progress);
    let last_complete = in_progress - MINUTE_MS;
    let utilization = (capacity > 0).then(|| {
        let tokens = used
            .iter()
            .find(|(m, _)| *m == last_complete)
            .map_or(0.0, |(_, t)| *t);
        tokens / capacity as f64
    });
    let levels = level_rates(declaration, resolver, target).await?;
    let estimator: Estimator = target
        .state
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    Ok(Utilization {
        resource: r.to_owned(),
        limit: limit.to_owned(),
        estimated_capacity: capacity,
        target_utilization: declaration.target_utilization(r, limit),
        minutes: used,
        current,
        utilization,
        factor: target.factor.as_f64(),
        factor_set_at: target.set_at_ms,
        reason: if declaration.shares_by_demand(r) {
            "share: demand".to_owned()
        } else {
            estimator.reason.name().to_owned()
        },
        share: declaration
            .shares_by_demand(r)
            .then(|| super::share::shared(target))
            .flatten(),
        shadow: declaration.shadow_only(r, limit),
        levels,
        stamped: stamped(store, namespace, target).await?,
    })
}

/// The tokens `limit` used on `r` in each complete minute shown, and in the
/// one in progress so far.
fn minute_tokens(
    minutes: &[Minute],
    r: &str,
    limit: &str,
    in_progress: i64,
) -> (Vec<(i64, f64)>, Option<Partial>) {
    let tokens = |m: &Minute| m.used.get(limit).map(|u| *u as f64 / 1000.0);
    let used = minutes
        .iter()
        .filter(|m| m.resource == r && m.minute_ms < in_progress)
        .filter_map(|m| Some((m.minute_ms, tokens(m)?)))
        .collect();
    let current = minutes
        .iter()
        .find(|m| m.resource == r && m.minute_ms == in_progress)
        .and_then(|m| {
            Some(Partial {
                minute: m.minute_ms,
                tokens: tokens(m)?,
                partial: true,
            })
        });
    (used, current)
}

/// Each opted-in level's base and effective rate under the target's factor
/// (base for a level in shadow).
async fn level_rates<S: Store>(
    declaration: &Declaration,
    resolver: &Resolver<'_, S>,
    target: &Target,
) -> Result<Vec<LevelRate>, StoreError> {
    let (r, limit) = (target.resource.as_str(), target.limit.as_str());
    let mut levels = Vec::new();
    for opt_in in declaration
        .levels
        .iter()
        .filter(|l| l.limit == limit && l.applies_to(r))
    {
        let Some(config) = resolver.level(&opt_in.level).await? else {
            continue;
        };
        let Some(base) = config.limits.iter().find(|l| l.name == limit) else {
            continue;
        };
        let factor = if opt_in.shadow {
            zae_table::adaptive::Factor::ONE
        } else {
            target.factor
        };
        levels.push(LevelRate {
            level: opt_in.level.describe(),
            base: base.refill_amount,
            effective: stamped_refill(base.refill_amount, base.capacity, factor, opt_in.max_scale),
            period_seconds: base.refill_period,
            shadow: opt_in.shadow,
        });
    }
    Ok(levels)
}

/// The usage items of the `count` minutes before the one in progress, and
/// of that one.
pub async fn recent_minutes<S: Store>(
    store: &S,
    namespace: &str,
    now_ms: i64,
    count: i64,
) -> Result<Vec<Minute>, StoreError> {
    let last = minute_of(now_ms);
    let mut minutes = Vec::new();
    for m in (0..=count).rev() {
        let query = Query {
            index: &Index::TABLE,
            pk: keys::pk_adaptive(namespace),
            sk_prefix: keys::sk_adaptive_usage(last - m * MINUTE_MS, ""),
            consistent: false,
        };
        minutes.extend(
            store
                .query(&query)
                .await?
                .iter()
                .filter_map(Minute::from_item),
        );
    }
    Ok(minutes)
}

/// The refill amount of the limit on every bucket of the resource, in tokens
/// per period: what the clients actually run on.
async fn stamped<S: Store>(
    store: &S,
    namespace: &str,
    target: &Target,
) -> Result<Option<Stamped>, StoreError> {
    let query = Query {
        index: &Index::GSI2,
        pk: keys::pk_resource(namespace, &target.resource),
        sk_prefix: keys::BUCKET_PREFIX.to_owned(),
        consistent: false,
    };
    let buckets = all_pages(store, &query).await?;
    Ok(stamped_of(&buckets, &target.limit))
}

/// Min, median and max of the amounts read off `buckets`.
pub fn stamped_of(buckets: &[Item], limit: &str) -> Option<Stamped> {
    let mut amounts: Vec<f64> = buckets
        .iter()
        .filter_map(|b| b.get(&limit_attr(limit, field::REFILL_AMOUNT)))
        .filter_map(Attr::as_int)
        .map(|ra| ra as f64 / 1000.0)
        .collect();
    if amounts.is_empty() {
        return None;
    }
    amounts.sort_by(f64::total_cmp);
    let n = amounts.len();
    let median = if n % 2 == 1 {
        amounts[n / 2]
    } else {
        (amounts[n / 2 - 1] + amounts[n / 2]) / 2.0
    };
    Some(Stamped {
        buckets: n,
        min: amounts[0],
        median,
        max: amounts[n - 1],
    })
}

/// The status as text.
pub fn render_status(status: &Status, now_ms: i64) -> String {
    let age = |at: i64| {
        if at == 0 {
            "never".to_owned()
        } else {
            format!("{} s ago", (now_ms - at).max(0) / 1000)
        }
    };
    let mut out = format!(
        "namespace {}: controller last ticked {}",
        status.namespace,
        age(status.ticked_at)
    );
    if status.targets.is_empty() {
        out.push_str("\n  nothing adaptive declared");
    }
    for t in &status.targets {
        out.push_str(&render_target(t, &age));
    }
    out
}

fn render_target(t: &Utilization, age: &impl Fn(i64) -> String) -> String {
    let rates: Vec<String> = t
        .minutes
        .iter()
        .map(|(_, tokens)| format!("{tokens:.0}"))
        .collect();
    let current = t
        .current
        .as_ref()
        .map(|c| format!(" (in progress: {:.0}, partial)", c.tokens))
        .unwrap_or_default();
    let shadow = if t.shadow {
        " [shadow: not stamped]"
    } else {
        ""
    };
    let mut out = format!(
        "\n  {} {}: estimated capacity {}/min, target {:.0}%; complete minutes [{}]{current}; \
         utilization {}; factor {:.2} ({}, set {}){shadow}",
        t.resource,
        t.limit,
        t.estimated_capacity,
        t.target_utilization * 100.0,
        rates.join(", "),
        t.utilization
            .map(|u| format!("{:.0}% (last complete minute)", u * 100.0))
            .unwrap_or_else(|| "unknown".into()),
        t.factor,
        t.reason,
        age(t.factor_set_at),
    );
    for l in &t.levels {
        let shadow = if l.shadow {
            " (shadow: stays at base)"
        } else {
            ""
        };
        out.push_str(&format!(
            "\n    {}: base {} x {:.2} = {} per {} s{shadow}",
            l.level,
            l.base,
            l.effective as f64 / l.base.max(1) as f64,
            l.effective,
            l.period_seconds
        ));
    }
    if let Some(s) = &t.stamped {
        out.push_str(&format!(
            "\n    stamped on {} bucket(s): min {}, median {}, max {} per period",
            s.buckets, s.min, s.median, s.max
        ));
    }
    if let Some(share) = &t.share {
        out.push('\n');
        out.push_str(super::share::render_share(share, &[]).trim_end());
    }
    out
}
