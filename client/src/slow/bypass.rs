//! A slow pass on a bucket bypassed by both config and stamp (§8.2 of the
//! protocol), pure: each consumed limit counted (`tc`), the stamp renewed,
//! nothing else moved (no refill, no `rf`, no balance), conditioned on the
//! item still carrying a stamp. A bypass lifted since the config read fails
//! that condition, and the pass is planned again from fresh reads, enforced.

use super::plan::{Pass, Planned, milli};
use crate::bucket::BucketView;
use crate::status::quoted_config;
use std::collections::BTreeMap;
use zae_table::Attr;
use zae_table::bucket::{BYPASS, field, limit_attr};
use zae_table::keys::{BucketKey, SK_STATE};
use zae_table::store::{ITEM_EXISTS, TxWrite, UpdateBuilder};

/// The counted write of a bypassed existing bucket.
pub fn plan_counted(key: &BucketKey, view: &BucketView, pass: Pass<'_>) -> Planned {
    let mut b = UpdateBuilder::new();
    b.set(BYPASS, Attr::n((pass.stamps.deadline)(pass.now_plan)));
    let mut after = view.limits.clone();
    // The configured limits the acquire names and the item holds; a limit
    // configured while bypassed is seeded by the first enforced pass.
    for (name, amount) in pass.consume {
        let Some(limit) = after.get_mut(name) else {
            continue;
        };
        if pass.resolved.limit(name).is_none() {
            continue;
        }
        let counted = milli(*amount);
        b.add(&limit_attr(name, field::CONSUMED), Attr::n(counted));
        limit.tc = limit.tc.saturating_add(counted);
    }
    let byp = b.name(BYPASS);
    let condition = format!("{ITEM_EXISTS} AND attribute_exists({byp})");
    Planned {
        key: key.clone(),
        write: TxWrite::Update(b.build(&key.pk(), SK_STATE, Some(condition))),
        after,
        shard_count: view.shard_count,
        rf: view.rf,
        refilled_at: BTreeMap::new(),
        admitted: true,
        view: Some(view.clone()),
        quoted: quoted_config(&pass.resolved.limits),
        bypassed: true,
        vu: view.vu,
        sched: view.sched_strings.clone(),
        schedules: view.schedules.clone(),
    }
}
