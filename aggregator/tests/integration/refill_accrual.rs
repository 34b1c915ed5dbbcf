//! What a slow drip limit's accrual loses to the shared `rf`: on the same
//! traffic, the 0.17.0 client alone (fast paths, and slow paths that refill
//! every limit in whole millitokens and move `rf` to now) against the same
//! client with our refill pass (the production decision and write, every
//! batch). A bucket's limits share one `rf`; every write that moves it
//! credits each limit `floor(elapsed x rate)` and the fraction is gone, so a
//! limit slower than one millitoken per write interval loses most of its
//! accrual. The test prints, per scenario, the share of the slow limit's
//! accrual forfeited each way, and holds the lower bound: with our refills,
//! the slow limit is credited at least what the client alone credits it.
//!
//! The table is the in-memory twin (every condition evaluated); time is
//! simulated, requests evenly spaced with a fixed jitter.

use std::collections::BTreeMap;
use zae_aggregator::plan::refill::Pass;
use zae_table::bucket::BucketState;
use zae_table::store::{Returns, Store, UpdateBuilder};
use zae_table::{Attr, Item};
use zae_test_support::memory::MemoryStore;

const PK: &str = "ns/BUCKET#e#r#0";
const SK: &str = "#STATE";
const T0: i64 = 1_780_000_000_000;
const DAY_MS: i64 = 86_400_000;
const HOUR_MS: i64 = 3_600_000;

#[derive(Debug, Clone, Copy)]
struct Scenario {
    /// Milliseconds between two requests on this shard.
    every_ms: i64,
    /// The aggregator's batch interval (its refills), milliseconds.
    batch_ms: i64,
    /// The slow limit, tokens a day for the whole bucket.
    slow_per_day: i64,
    shards: i64,
}

fn n(item: &Item, attr: &str) -> i64 {
    item.get(attr).and_then(Attr::as_int).unwrap_or(0)
}

/// Shard 0 of a bucket: `rpm` (60 a minute per shard, consumed one token a
/// request) and `slow` (never consumed, starting empty, capacity never
/// reached), `shards` shards.
fn seed(s: Scenario) -> Item {
    let mut item = Item::new();
    item.insert("PK".into(), Attr::s(PK));
    item.insert("SK".into(), Attr::s(SK));
    for (k, v) in [
        ("rf", T0),
        ("vu", T0 + 30 * DAY_MS),
        ("shard_count", s.shards),
        ("b_rpm_cp", 60_000 * s.shards),
        ("b_rpm_ra", 60_000 * s.shards),
        ("b_rpm_rp", 60_000),
        ("b_rpm_tk", 60_000),
        ("b_rpm_tc", 0),
        ("b_slow_cp", 1_000_000_000_000),
        ("b_slow_ra", s.slow_per_day * 1000),
        ("b_slow_rp", DAY_MS),
        ("b_slow_tk", 0),
        ("b_slow_tc", 0),
    ] {
        item.insert(k.into(), Attr::n(v));
    }
    item
}

#[derive(Default, Debug)]
struct Tally {
    admitted: i64,
    slow_paths: i64,
    refills: i64,
}

struct Run {
    table: MemoryStore,
    s: Scenario,
    tally: Tally,
}

impl Run {
    fn item(&self) -> Item {
        self.table.item(PK, SK).expect("the bucket")
    }

    /// The fast path: one conditional ADD, no refill.
    async fn fast(&mut self, now: i64) -> bool {
        let mut b = UpdateBuilder::new();
        b.add("b_rpm_tk", Attr::n(-1000));
        b.add("b_rpm_tc", Attr::n(1000));
        let (tk, vu) = (b.name("b_rpm_tk"), b.name("vu"));
        let (need, at) = (b.value(Attr::n(1000)), b.value(Attr::n(now)));
        let update = b.build(PK, SK, Some(format!("{tk} >= {need} AND {vu} > {at}")));
        self.table.update(&update, Returns::Nothing).await.is_ok()
    }

    /// The slow path as 0.17.0 writes it for a composite bucket: every limit
    /// refilled in whole millitokens from `rf` to now, `rf` set to now, under
    /// the `rf` lock; nothing written when the request is refused.
    async fn slow(&mut self, now: i64) -> bool {
        let item = self.item();
        let (rf, count) = (n(&item, "rf"), n(&item, "shard_count"));
        let mut b = UpdateBuilder::new();
        let mut rpm_after = 0;
        for limit in ["rpm", "slow"] {
            let attr = |f: &str| format!("b_{limit}_{f}");
            let (cp, ra, rp) = (
                n(&item, &attr("cp")),
                n(&item, &attr("ra")),
                n(&item, &attr("rp")),
            );
            let tk = n(&item, &attr("tk"));
            let add = i128::from(now - rf) * i128::from(ra / count) / i128::from(rp);
            let refilled = (i128::from(tk) + add).min(i128::from(cp / count)) as i64;
            if limit == "rpm" {
                rpm_after = refilled;
            }
            let debit = if limit == "rpm" { 1000 } else { 0 };
            b.add(&attr("tk"), Attr::n(refilled - tk - debit));
            b.add(&attr("tc"), Attr::n(debit));
        }
        if rpm_after < 1000 {
            return false;
        }
        b.set("rf", Attr::n(now));
        b.set("vu", Attr::n(now + 30 * DAY_MS));
        let rf_name = b.name("rf");
        let read = b.value(Attr::n(rf));
        let update = b.build(PK, SK, Some(format!("{rf_name} = {read}")));
        self.tally.slow_paths += 1;
        self.table.update(&update, Returns::Nothing).await.is_ok()
    }

    async fn request(&mut self, now: i64) {
        if self.fast(now).await || self.slow(now).await {
            self.tally.admitted += 1;
        }
    }

    /// Our refill pass on the bucket as the batch's last record shows it.
    async fn refill(&mut self, now: i64, consumed: i64) {
        let item = self.item();
        let state = BucketState::from_item(&item).expect("a bucket");
        let consumed = BTreeMap::from([("rpm".to_owned(), consumed)]);
        let pass = Pass {
            pk: PK,
            state: &state,
            consumed: &consumed,
            now,
        };
        if let Some(write) = pass.decide().expect("decidable")
            && self
                .table
                .update(&write.update(), Returns::Nothing)
                .await
                .is_ok()
        {
            self.tally.refills += 1;
        }
    }
}

/// The slow limit's accrual over an hour: (forfeited share in per mille, tally).
async fn run(s: Scenario, ours: bool) -> (i64, Tally) {
    let table = MemoryStore::new();
    table.insert(seed(s));
    let mut run = Run {
        table,
        s,
        tally: Tally::default(),
    };
    let (mut t, mut next_batch, mut batch_start_tc) = (T0, T0 + s.batch_ms, 0);
    let mut jitter: u64 = 0x2545_f491_4f6c_dd1d;
    let end = T0 + HOUR_MS;
    while t < end {
        jitter ^= jitter << 13;
        jitter ^= jitter >> 7;
        jitter ^= jitter << 17;
        let step = run.s.every_ms / 2 + (jitter % run.s.every_ms as u64) as i64;
        t += step.max(1);
        while ours && next_batch <= t {
            let tc = n(&run.item(), "b_rpm_tc");
            run.refill(next_batch + 100, tc - batch_start_tc).await;
            batch_start_tc = tc;
            next_batch += s.batch_ms;
        }
        run.request(t).await;
    }
    let item = run.item();
    let rate = s.slow_per_day * 1000 / s.shards;
    let possible = i128::from(end - T0) * i128::from(rate) / i128::from(DAY_MS);
    let pending = i128::from(end - n(&item, "rf")) * i128::from(rate) / i128::from(DAY_MS);
    let credited = i128::from(n(&item, "b_slow_tk"));
    let forfeited = (possible - credited - pending).max(0);
    let per_mille = if possible > 0 {
        (forfeited * 1000 / possible) as i64
    } else {
        0
    };
    (per_mille, run.tally)
}

#[tokio::test]
async fn with_our_refills_a_slow_drip_forfeits_no_more_than_with_the_client_alone() {
    let mut rows = Vec::new();
    let mut worse = Vec::new();
    for (every_ms, batch_ms) in [(1_000, 1_000), (1_000, 5_000), (250, 1_000), (2_500, 5_000)] {
        for (slow_per_day, shards) in [(10, 1), (100, 1), (1_000, 1), (1_000, 32)] {
            let s = Scenario {
                every_ms,
                batch_ms,
                slow_per_day,
                shards,
            };
            let (alone, a) = run(s, false).await;
            let (with_ours, o) = run(s, true).await;
            rows.push(format!(
                "| {every_ms} ms | {batch_ms} ms | {slow_per_day}/day | {shards} | {}.{}% ({} slow paths) | {}.{}% ({} slow paths, {} refills) |",
                alone / 10, alone % 10, a.slow_paths,
                with_ours / 10, with_ours % 10, o.slow_paths, o.refills
            ));
            if with_ours > alone {
                worse.push(format!("{s:?}: {with_ours}‰ with ours, {alone}‰ alone"));
            }
        }
    }
    println!(
        "| request every | batch every | slow limit | shards | forfeited, client alone | forfeited, with our refills |"
    );
    println!("|---|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
    assert!(worse.is_empty(), "our refills forfeit more: {worse:#?}");
}
