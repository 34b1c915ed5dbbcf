//! `zae-limits adaptive`: operating a namespace's adaptive limits from
//! outside the controller. `reset` returns every stamped bucket to base
//! and every target to a factor of one; the way back to the 0.17.0 Python
//! Lambdas starts with it.

use zae_table::adaptive::pass::{self, Pass};
use zae_table::adaptive::target::Target;
use zae_table::adaptive::{Declaration, Factor};
use zae_table::keys;
use zae_table::store::{Returns, Store, StoreError};

/// What a reset did to one target.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Reset {
    pub resource: String,
    pub limit: String,
    pub buckets_stamped: usize,
    pub stamps_lost: usize,
}

/// Every target of `namespace` to base: its factor to one (a new generation,
/// its estimator forgotten), then a whole pass over its buckets.
pub async fn reset<S: Store>(store: &S, namespace: &str) -> Result<Vec<Reset>, StoreError> {
    let declaration = Declaration::read(store, namespace, true)
        .await?
        .and_then(Result::ok);
    let mut done = Vec::new();
    for mut target in Target::read_all(store, namespace).await? {
        let read = target.generation;
        target.previous = target.factor;
        target.factor = Factor::ONE;
        target.generation += 1;
        target.set_at_ms = chrono::Utc::now().timestamp_millis();
        target.cursor = None;
        target.state = None;
        store
            .update(&target.write(namespace, Some(read)), Returns::Nothing)
            .await?;
        let Pass { stamped, lost, .. } =
            pass::run(store, namespace, declaration.as_ref(), &target, || false).await?;
        if lost == 0 {
            target.stamped = target.generation;
            let generation = target.generation;
            store
                .update(&target.write(namespace, Some(generation)), Returns::Nothing)
                .await?;
        }
        done.push(Reset {
            resource: target.resource,
            limit: target.limit,
            buckets_stamped: stamped,
            stamps_lost: lost,
        });
    }
    Ok(done)
}

/// One (resource, limit)'s state, as `zae-limits adaptive utilization` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Utilization {
    pub resource: String,
    pub limit: String,
    /// Tokens per minute the resource is sized for.
    pub estimated_capacity: i64,
    /// Tokens used per minute, oldest first, over the recent minutes held
    /// (`(minute start ms, tokens)`).
    pub minutes: Vec<(i64, f64)>,
    /// The latest minute's use over the estimated capacity.
    pub utilization: Option<f64>,
    pub factor: f64,
    /// When the factor was set (epoch ms; 0: never).
    pub factor_set_at: i64,
    /// Per opted-in level: its base rate, the factor it gets (capped by its
    /// `max_scale` and burst) and the effective rate, tokens per period.
    pub levels: Vec<LevelRate>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LevelRate {
    pub level: String,
    pub base: i64,
    pub effective: i64,
    pub period_seconds: i64,
}

/// What the controller last did for a namespace.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Status {
    pub namespace: String,
    /// The controller's last tick (epoch ms; 0: never).
    pub ticked_at: i64,
    pub targets: Vec<Utilization>,
}

/// Minutes shown: the usage items expire an hour after their minute.
const SHOWN_MINUTES: i64 = 15;

/// The namespace's adaptive state at `now_ms`, optionally for one resource.
pub async fn status<S: Store>(
    store: &S,
    namespace: &str,
    resource: Option<&str>,
    now_ms: i64,
) -> Result<Status, StoreError> {
    use zae_table::adaptive::law::stamped_refill;
    use zae_table::adaptive::target::Tick;
    use zae_table::adaptive::usage::{MINUTE_MS, Minute, minute_of};
    use zae_table::resolve::Resolver;
    let pk = keys::pk_adaptive(namespace);
    let declaration = Declaration::read(store, namespace, true)
        .await?
        .and_then(Result::ok)
        .unwrap_or_default();
    let tick = Tick::read(store, namespace, true).await?;
    let targets = Target::read_all(store, namespace).await?;
    let mut minutes: Vec<Minute> = Vec::new();
    let last = minute_of(now_ms);
    for m in 0..SHOWN_MINUTES {
        let minute = last - (SHOWN_MINUTES - 1 - m) * MINUTE_MS;
        let query = zae_table::store::Query {
            index: &zae_table::keys::Index::TABLE,
            pk: pk.clone(),
            sk_prefix: keys::sk_adaptive_usage(minute, ""),
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
        let capacity = declaration.capacity(&r, &limit).unwrap_or(0);
        let used: Vec<(i64, f64)> = minutes
            .iter()
            .filter(|m| m.resource == r)
            .filter_map(|m| Some((m.minute_ms, *m.used.get(&limit)? as f64 / 1000.0)))
            .collect();
        let utilization = used
            .last()
            .filter(|_| capacity > 0)
            .map(|(_, tokens)| tokens / capacity as f64);
        let mut levels = Vec::new();
        for opt_in in declaration
            .levels
            .iter()
            .filter(|l| l.limit == limit && l.applies_to(&r))
        {
            let Some(config) = resolver.level(&opt_in.level).await? else {
                continue;
            };
            let Some(base) = config.limits.iter().find(|l| l.name == limit) else {
                continue;
            };
            let effective = stamped_refill(
                base.refill_amount,
                base.capacity,
                target.factor,
                opt_in.max_scale,
            );
            levels.push(LevelRate {
                level: opt_in.level.describe(),
                base: base.refill_amount,
                effective,
                period_seconds: base.refill_period,
            });
        }
        out.push(Utilization {
            resource: r,
            limit,
            estimated_capacity: capacity,
            minutes: used,
            utilization,
            factor: target.factor.as_f64(),
            factor_set_at: target.set_at_ms,
            levels,
        });
    }
    Ok(Status {
        namespace: namespace.to_owned(),
        ticked_at: tick.ticked_at_ms,
        targets: out,
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
        let rates: Vec<String> = t
            .minutes
            .iter()
            .map(|(_, tokens)| format!("{tokens:.0}"))
            .collect();
        out.push_str(&format!(
            "\n  {} {}: estimated capacity {}/min; recent minutes [{}]; utilization {}; factor {:.2} (set {})",
            t.resource,
            t.limit,
            t.estimated_capacity,
            rates.join(", "),
            t.utilization
                .map(|u| format!("{:.0}%", u * 100.0))
                .unwrap_or_else(|| "unknown".into()),
            t.factor,
            age(t.factor_set_at),
        ));
        for l in &t.levels {
            out.push_str(&format!(
                "\n    {}: base {} x {:.2} = {} per {} s",
                l.level,
                l.base,
                l.effective as f64 / l.base.max(1) as f64,
                l.effective,
                l.period_seconds
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use zae_table::Attr;

    #[tokio::test]
    async fn a_reset_returns_every_stamped_bucket_to_base_with_vu_and_the_target_to_one() {
        // A system tpm of 1,000/min, burst 10,000, opted in; `r` sized for 100,000/min.
        let store = zae_test_support::adaptive::table("ns", 0);
        zae_test_support::adaptive::five_times(&store, "ns", 4).await;
        for entity in ["a", "b"] {
            store.insert(zae_test_support::adaptive::bucket(
                "ns", entity, 10_000_000, 5_000_000,
            ));
        }
        let done = reset(&store, "ns").await.unwrap();
        assert_eq!(done[0].buckets_stamped, 2);
        for entity in ["a", "b"] {
            let bucket = store
                .item(&format!("ns/BUCKET#{entity}#r#0"), "#STATE")
                .unwrap();
            assert_eq!(bucket["b_tpm_ra"], Attr::n(1_000_000));
            assert_eq!(bucket["vu"], Attr::n(0));
        }
        let (pk, sk) = Target::key("ns", "r", "tpm");
        let target = Target::from_item(&store.item(&pk, &sk).unwrap()).unwrap();
        assert_eq!(
            (target.factor, target.stamped, target.generation),
            (Factor::ONE, 5, 5)
        );
    }

    #[tokio::test]
    async fn the_status_shows_use_utilization_factor_and_each_levels_effective_rate() {
        // A system tpm of 1,000/min, burst 10,000, opted in; `r` sized for 100,000/min.
        let store = zae_test_support::adaptive::table("ns", 0);
        zae_test_support::adaptive::five_times(&store, "ns", 0).await;
        let now = 1_796_032_805_000;
        let minute = zae_table::adaptive::usage::minute_of(now) - 60_000;
        let used = [("tpm".to_owned(), 20_000_000)].into();
        store
            .update(
                &zae_table::adaptive::usage::add("ns", "r", minute, &used),
                Returns::Nothing,
            )
            .await
            .unwrap();
        let status = status(&store, "ns", None, now).await.unwrap();
        let t = &status.targets[0];
        assert_eq!(t.minutes, vec![(minute, 20_000.0)]);
        assert_eq!(t.utilization, Some(0.2));
        assert_eq!(t.factor, 5.0);
        assert_eq!(t.levels[0].base, 1_000);
        assert_eq!(t.levels[0].effective, 5_000);
        let text = render_status(&status, now);
        assert!(
            text.contains("utilization 20%") && text.contains("base 1000 x 5.00 = 5000"),
            "{text}"
        );
    }
}
