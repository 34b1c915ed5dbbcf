//! A demand share as `explain` and `status` show it: the share a target
//! records, in words.

use zae_adaptive::share::{EntityShare, ShareTick};
use zae_table::adaptive::allocation::Allocated;
use zae_table::adaptive::target::Target;

/// The last tick's share a target records.
pub fn shared(target: &Target) -> Option<ShareTick> {
    serde_json::from_str(target.shared.as_deref()?).ok()
}

/// Why an entity got what it got, in words.
fn why_in_words(why: &str) -> &'static str {
    match why {
        "share" => "wants more than its share: lambda x base",
        "ceiling" => "saturated: its ceiling, min(burst, base x max_scale)",
        "base wins" => "wants more, but the bases alone fill what is left",
        "use" => "not saturated: what it holds, at most its use plus 20%",
        "easing" => "not saturated: halfway down to its use plus 20% each tick",
        "blind" => "the controller is blind: back to base",
        "not opted in" => "its level no longer opts in: back to base",
        _ => "",
    }
}

/// A demand share as text: what was shared, and to whom.
pub fn render_share(share: &ShareTick, raised: &[Allocated]) -> String {
    let mut out = format!(
        "  demand share of minute {}: to share {:.0}/min; used by the others {:.0}; \
         left for those raised or asking {:.0}; lambda {:.2}{}\n",
        clock(share.minute_ms),
        share.to_share,
        share.others,
        share.left,
        share.lambda,
        if share.overflow > 0 {
            format!(
                "; {} entities past the cap of 1,000 held their allocations",
                share.overflow
            )
        } else {
            String::new()
        }
    );
    let mut rows: Vec<&EntityShare> = share.entities.iter().collect();
    rows.sort_by(|a, b| b.allocation.total_cmp(&a.allocation));
    if share.omitted > 0 {
        out.push_str(&format!(
            "  ({} more entities with smaller allocations are not on record)\n",
            share.omitted
        ));
    }
    for e in rows {
        out.push_str(&format!(
            "    {}: used {:.0}{}, base {:.0}/min, share {:.0}/min, stamp {:.2}x{}{} ({})\n",
            e.entity,
            e.used,
            if e.saturated { " saturated" } else { "" },
            e.base,
            e.allocation,
            e.factor,
            if e.stamped { ", stamped" } else { "" },
            if e.shadow {
                ", shadow: not stamped"
            } else {
                ""
            },
            why_in_words(&e.why),
        ));
    }
    let listed: Vec<&str> = share.entities.iter().map(|e| e.entity.as_str()).collect();
    for a in raised
        .iter()
        .filter(|a| !listed.contains(&a.entity.as_str()))
    {
        out.push_str(&format!(
            "    {}: held at {:.2}x ({}){}\n",
            a.entity,
            a.factor.as_f64(),
            a.why,
            if a.pending { ", stamp pending" } else { "" }
        ));
    }
    out
}

/// A minute's start as the clock on the wall shows it (UTC).
pub(super) fn clock(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%H:%M").to_string())
        .unwrap_or_default()
}
