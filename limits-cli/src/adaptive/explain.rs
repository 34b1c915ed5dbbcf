//! `zae-limits adaptive explain`: why a (resource, limit)'s factor is what it
//! is: the minutes the estimator kept, the response it fitted, its reading
//! of use at base, the noise band and the surge line, the reason for the
//! last decision, the history of moves, and the last hour drawn minute by
//! minute: utilization against the target, and the factor.

use super::share::{clock, render_share, shared};
use super::status::recent_minutes;
use zae_adaptive::estimator::{Estimator, Law, Reading};
use zae_adaptive::share::ShareTick;
use zae_table::adaptive::allocation::Allocated;
use zae_table::adaptive::target::{Move, Target};
use zae_table::adaptive::usage::{MINUTE_MS, minute_of};
use zae_table::adaptive::{Declaration, Factor};
use zae_table::store::{Store, StoreError};

/// Minutes drawn: the usage items expire an hour after their minute.
const CHART_MINUTES: i64 = 60;
/// Rows of each chart.
const UTILIZATION_ROWS: usize = 8;
const FACTOR_ROWS: usize = 6;

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Explanation {
    pub resource: String,
    pub limit: String,
    pub estimated_capacity: i64,
    pub target_utilization: f64,
    pub max_factor: f64,
    pub factor: f64,
    pub factor_set_at: i64,
    pub shadow: bool,
    /// What the estimator holds: the minutes kept, the fitted response
    /// `(a, b)` of `u(f) = a + b f`, use at base, the band, the surge line
    /// and the reason of its last decision.
    pub reading: Reading,
    /// The last moves, oldest first.
    pub history: Vec<Move>,
    /// The last hour, oldest first.
    pub chart: Vec<ChartMinute>,
    /// Under `share: demand`: the last tick's share, and every entity held
    /// above base.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<ShareTick>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub raised: Vec<Allocated>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ChartMinute {
    pub minute: i64,
    /// Use over the estimated capacity; `None` where nothing was sensed.
    pub utilization: Option<f64>,
    /// The factor in force at the minute's start.
    pub factor: f64,
}

/// The explanation of one target at `now_ms`; `None` when the declaration
/// does not scale it.
pub async fn explain<S: Store>(
    store: &S,
    namespace: &str,
    (resource, limit): (&str, &str),
    now_ms: i64,
) -> Result<Option<Explanation>, StoreError> {
    let declaration = Declaration::read(store, namespace, true)
        .await?
        .and_then(Result::ok)
        .unwrap_or_default();
    let Some((_, _, max)) = declaration
        .targets()
        .into_iter()
        .find(|(r, l, _)| r == resource && l == limit)
    else {
        return Ok(None);
    };
    let (pk, sk) = Target::key(namespace, resource, limit);
    let target = store
        .get(&pk, &sk, true)
        .await?
        .as_ref()
        .and_then(Target::from_item)
        .unwrap_or_else(|| Target::base(resource, limit));
    let estimator: Estimator = target
        .state
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let law = Law {
        target: declaration.target_utilization(resource, limit),
        max_factor: max.as_f64(),
    };
    let capacity = declaration.capacity(resource, limit).unwrap_or(0);
    let minutes = recent_minutes(store, namespace, now_ms, CHART_MINUTES).await?;
    let last = minute_of(now_ms) - MINUTE_MS;
    let chart = (0..CHART_MINUTES)
        .rev()
        .map(|k| {
            let minute = last - k * MINUTE_MS;
            let used = minutes
                .iter()
                .find(|m| m.resource == resource && m.minute_ms == minute)
                .and_then(|m| m.used.get(limit));
            ChartMinute {
                minute,
                utilization: used
                    .filter(|_| capacity > 0)
                    .map(|u| *u as f64 / 1000.0 / capacity as f64),
                factor: factor_at(&target, minute).as_f64(),
            }
        })
        .collect();
    let (share, raised) = if declaration.shares_by_demand(resource) {
        let raised = Allocated::read(store, namespace, resource, limit).await?;
        (shared(&target), raised)
    } else {
        (None, Vec::new())
    };
    Ok(Some(Explanation {
        share,
        raised,
        resource: resource.to_owned(),
        limit: limit.to_owned(),
        estimated_capacity: capacity,
        target_utilization: law.target,
        max_factor: law.max_factor,
        factor: target.factor.as_f64(),
        factor_set_at: target.set_at_ms,
        shadow: declaration.shadow_only(resource, limit),
        reading: estimator.reading(law),
        history: target.history.clone(),
        chart,
    }))
}

/// The factor in force at `at_ms`, from the target's moves.
fn factor_at(target: &Target, at_ms: i64) -> Factor {
    match target.history.iter().rev().find(|m| m.at_ms <= at_ms) {
        Some(m) => m.to,
        None => target.history.first().map_or(target.factor, |m| m.from),
    }
}

/// The explanation as text, with the last hour drawn.
pub fn render_explanation(e: &Explanation, now_ms: i64) -> String {
    let mut out = format!(
        "{} {}: factor {:.2} (most {:.2}){}, set {}; target {:.0}% of {}/min\n",
        e.resource,
        e.limit,
        e.factor,
        e.max_factor,
        if e.shadow {
            " [shadow: not stamped]"
        } else {
            ""
        },
        ago(e.factor_set_at, now_ms),
        e.target_utilization * 100.0,
        e.estimated_capacity
    );
    let r = &e.reading;
    if let Some(share) = &e.share {
        out.push_str(&render_share(share, &e.raised));
        out.push_str(&chart(e));
        return out;
    }
    out.push_str(&format!("  last decision: {}\n", r.reason.name()));
    out.push_str(&match (r.response, r.at_base) {
        (Some((a, b)), Some(u1)) => format!(
            "  response: u(f) = {a:.3} + {b:.3} f ({:.0}% of use at base follows the limit); \
             use at base {:.1}%, so the law's factor is {:.2}\n",
            if a + b > 0.0 {
                100.0 * b / (a + b)
            } else {
                0.0
            },
            100.0 * u1,
            r.wanted
        ),
        (None, Some(u1)) => format!(
            "  response: not yet measured (one factor seen since demand last changed); \
             use at base read as {:.1}%, so the law's factor is {:.2}\n",
            100.0 * u1,
            r.wanted
        ),
        _ => "  no minute observed yet\n".to_owned(),
    });
    out.push_str(&format!(
        "  noise {:.1}% a minute; a move needs {:.1}%; one minute above {:.0}% is a surge \
         (its last third above {:.0}%)\n",
        100.0 * r.noise,
        100.0 * r.band,
        100.0 * r.surge_above,
        100.0 * r.tail_surge_above
    ));
    let kept: Vec<String> = r
        .points
        .iter()
        .map(|(f, u)| format!("{:.0}% at {f:.2}", 100.0 * u))
        .collect();
    out.push_str(&format!("  minutes kept: [{}]\n", kept.join(", ")));
    out.push_str(&format!("  moves (last {}):\n", e.history.len()));
    for m in e.history.iter().rev().take(10) {
        out.push_str(&format!(
            "    {} {:.2} -> {:.2} ({}){}\n",
            ago(m.at_ms, now_ms),
            m.from.as_f64(),
            m.to.as_f64(),
            m.reason,
            if m.minute_ms > 0 {
                format!(", minute {}", clock(m.minute_ms))
            } else {
                String::new()
            }
        ));
    }
    out.push_str(&chart(e));
    out
}

fn ago(at: i64, now_ms: i64) -> String {
    if at == 0 {
        "never".to_owned()
    } else {
        format!("{} s ago", (now_ms - at).max(0) / 1000)
    }
}

/// Two charts over the last hour, one column a minute: utilization (bars)
/// against the target (a line), and the factor in force.
fn chart(e: &Explanation) -> String {
    let top_u = e
        .chart
        .iter()
        .filter_map(|m| m.utilization)
        .fold(e.target_utilization.max(1.0), f64::max);
    let top_f = e.chart.iter().map(|m| m.factor).fold(2.0, f64::max);
    let mut out = String::from("\n  utilization (bars) against the target (-), last hour:\n");
    for row in (0..UTILIZATION_ROWS).rev() {
        let (low, high) = band(row, UTILIZATION_ROWS, 0.0, top_u);
        let label = if row + 1 == UTILIZATION_ROWS {
            format!("{:>5.0}%", 100.0 * high)
        } else if row == 0 {
            format!("{:>5.0}%", 100.0 * low)
        } else {
            " ".repeat(6)
        };
        let cells: String = e
            .chart
            .iter()
            .map(|m| match m.utilization {
                Some(u) if u > low => '#',
                _ if (low..high).contains(&e.target_utilization) => '-',
                None if row == 0 => '.',
                _ => ' ',
            })
            .collect();
        out.push_str(&format!("  {label} |{cells}\n"));
    }
    out.push_str("\n  factor in force:\n");
    for row in (0..FACTOR_ROWS).rev() {
        let (low, high) = band(row, FACTOR_ROWS, 1.0, top_f);
        let label = if row + 1 == FACTOR_ROWS {
            format!("{high:>6.1}")
        } else if row == 0 {
            format!("{low:>6.1}")
        } else {
            " ".repeat(6)
        };
        let cells: String = e
            .chart
            .iter()
            .map(|m| if m.factor > low || row == 0 { '#' } else { ' ' })
            .collect();
        out.push_str(&format!("  {label} |{cells}\n"));
    }
    if let (Some(first), Some(last)) = (e.chart.first(), e.chart.last()) {
        let width = e.chart.len().saturating_sub(5);
        out.push_str(&format!(
            "  {:>6}  {:<width$}{}\n",
            "",
            clock(first.minute),
            clock(last.minute)
        ));
    }
    out
}

/// The value range a chart row stands for.
fn band(row: usize, rows: usize, from: f64, to: f64) -> (f64, f64) {
    let step = (to - from) / rows as f64;
    (from + step * row as f64, from + step * (row + 1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_draws_the_target_and_the_factor_per_minute() {
        let mut target = Target::base("r", "tpm");
        target.moved(Factor::from_ppm(5_000_000), 120_000, "raise", 60_000, 1);
        let chart: Vec<ChartMinute> = (0..4)
            .map(|k| ChartMinute {
                minute: k * MINUTE_MS,
                utilization: (k != 1).then_some(0.2 * (k + 1) as f64),
                factor: factor_at(&target, k * MINUTE_MS).as_f64(),
            })
            .collect();
        assert_eq!(
            chart.iter().map(|m| m.factor).collect::<Vec<_>>(),
            vec![1.0, 1.0, 5.0, 5.0]
        );
        let e = Explanation {
            share: None,
            raised: Vec::new(),
            resource: "r".into(),
            limit: "tpm".into(),
            estimated_capacity: 100_000,
            target_utilization: 0.8,
            max_factor: 10.0,
            factor: 5.0,
            factor_set_at: 120_000,
            shadow: false,
            reading: Estimator::default().reading(Law::full(10.0)),
            history: target.history.clone(),
            chart,
        };
        let text = render_explanation(&e, 180_000);
        assert!(text.contains("1.00 -> 5.00 (raise)"), "{text}");
        assert!(text.contains("last decision: start"), "{text}");
        let rows: Vec<&str> = text.lines().filter(|l| l.contains('|')).collect();
        assert_eq!(rows.len(), UTILIZATION_ROWS + FACTOR_ROWS, "{text}");
        // Minute 3 (80%) reaches the target's row; the missing minute 1 is a dot.
        assert!(rows.iter().any(|r| r.ends_with("|---#")), "{text}");
        assert!(rows[UTILIZATION_ROWS - 1].ends_with("|#.##"), "{text}");
        // The factor chart: 1 before the raise, 5 after.
        assert!(rows[UTILIZATION_ROWS].ends_with("|  ##"), "{text}");
        assert!(rows.last().unwrap().ends_with("|####"), "{text}");
        assert!(rows[UTILIZATION_ROWS - 1].contains("0%"), "{text}");
    }
}
