//! The refill pass against a model of the 0.17.0 client on one bucket: a
//! randomized interleaving of client fast-path writes (one conditional ADD
//! that never refills), client slow-path writes (read, refill drift-free,
//! `rf`-locked write), aggregator refills computed from lagging stream
//! images, admin syncs (`cp`/`ra` with `vu = 0`), `ra`-only changes (an
//! adaptive factor), syncs that change only the item's schedule, and shard
//! doublings. The table is the in-memory twin,
//! which evaluates every update and condition expression; the refill's
//! decision and write are the production code's.
//!
//! Properties:
//! - no double refill: the accrual intervals `(rf read, rf written]` of all
//!   landed refills, client and aggregator alike, form one chain;
//! - an aggregator refill credits at most the current rate over its
//!   interval and never lifts a balance above the current ceiling;
//! - a refill never lands across a change of the parameters or schedules
//!   it was decided from;
//! - a hard limit admits over any interval `(t1, t2]` at most its ceiling
//!   plus its rate over `(rf at t1, t2]`, both per shard share, plus the
//!   documented surplus a doubling leaves until the next slow pass.

use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use zae_aggregator::plan::refill::Pass;
use zae_table::bucket::BucketState;
use zae_table::store::{Returns, Store, Update, UpdateBuilder};
use zae_table::stream::Image;
use zae_table::{Attr, Item};
use zae_test_support::fuzz_cases;
use zae_test_support::memory::MemoryStore;

const PK: &str = "ns/BUCKET#e#r#0";
const SK: &str = "#STATE";
const START: i64 = 1_780_000_000_000;
const PERIOD: i64 = 1_000;

#[derive(Debug, Clone)]
enum Op {
    Fast(i64),
    Slow(i64),
    /// The aggregator, from the image `lag` versions back, counting the
    /// consumption of the `batch` versions before it.
    Refill {
        lag: usize,
        batch: usize,
    },
    AdminSync {
        cp: i64,
        ra: i64,
    },
    RateOnly(i64),
    /// A sync that changes only the item's parameter schedule (at most 1x,
    /// so the stored parameters stay the bound).
    ScheduleOnly(Option<&'static str>),
    Double,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1i64..=3).prop_map(Op::Fast),
        2 => (1i64..=3).prop_map(Op::Slow),
        4 => (0usize..4, 1usize..5).prop_map(|(lag, batch)| Op::Refill { lag, batch }),
        1 => (prop::sample::select(vec![4i64, 10, 20]), prop::sample::select(vec![500i64, 1000, 3000]))
            .prop_map(|(cp, ra)| Op::AdminSync { cp, ra }),
        1 => prop::sample::select(vec![250i64, 1000, 4000]).prop_map(Op::RateOnly),
        1 => prop::sample::select(vec![None, Some("1h0-23s500"), Some("1h0-11s800")]).prop_map(Op::ScheduleOnly),
        1 => Just(Op::Double),
    ]
}

fn n(item: &Item, attr: &str) -> Option<i64> {
    item.get(attr).and_then(Attr::as_int)
}

/// The bucket's share of its parameters: (ceiling, rate per PERIOD).
fn share(item: &Item) -> (i64, i64) {
    let count = n(item, "shard_count").unwrap_or(1);
    (
        n(item, "b_rps_cp").unwrap() / count,
        n(item, "b_rps_ra").unwrap() / count,
    )
}

#[derive(Default)]
struct Run {
    now: i64,
    /// Each landed write's item, with when it landed.
    versions: Vec<(i64, Item)>,
    /// (rf read, rf written) of every landed refill, in order.
    refills: Vec<(i64, i64)>,
    admitted: Vec<(i64, i64)>,
    /// (when, surplus over the new share) of each doubling.
    surpluses: Vec<(i64, i64)>,
    /// Slow-path refills, each of which may credit one millitoken of rounding.
    slow_refills: i64,
}

impl Run {
    fn current(&self) -> &Item {
        &self.versions.last().unwrap().1
    }

    async fn write(&mut self, table: &MemoryStore, update: Update) -> bool {
        match table.update(&update, Returns::AllNew).await {
            Ok(Some(item)) => {
                self.versions.push((self.now, item));
                true
            }
            Ok(None) => unreachable!("AllNew returns the item"),
            Err(zae_table::store::StoreError::ConditionFailed { .. }) => false,
            Err(e) => panic!("the table refused a write: {e}"),
        }
    }

    async fn fast(&mut self, table: &MemoryStore, amount: i64) {
        let mut b = UpdateBuilder::new();
        b.add("b_rps_tk", Attr::n(-amount * 1000));
        b.add("b_rps_tc", Attr::n(amount * 1000));
        let (tk, vu) = (b.name("b_rps_tk"), b.name("vu"));
        let (need, now) = (b.value(Attr::n(amount * 1000)), b.value(Attr::n(self.now)));
        let update = b.build(PK, SK, Some(format!(
            "attribute_exists(PK) AND {tk} >= {need} AND (attribute_not_exists({vu}) OR {vu} > {now})"
        )));
        if self.write(table, update).await {
            self.admitted.push((self.now, amount));
        }
    }

    /// The client's slow path: refill drift-free from `rf`, debit, and write
    /// under the `rf` lock, reopening `vu`.
    async fn slow(&mut self, table: &MemoryStore, amount: i64) {
        let item = self.current().clone();
        let (ceiling, rate) = share(&item);
        let (tk, rf) = (n(&item, "b_rps_tk").unwrap(), n(&item, "rf").unwrap());
        let add = if rate > 0 {
            (self.now - rf).max(0) * rate / PERIOD
        } else {
            0
        };
        let (refilled, new_rf) = if add == 0 {
            (tk.min(ceiling), rf)
        } else {
            ((tk + add).min(ceiling), rf + add * PERIOD / rate)
        };
        if refilled < amount * 1000 {
            return;
        }
        let mut b = UpdateBuilder::new();
        b.set("rf", Attr::n(new_rf));
        b.add("b_rps_tk", Attr::n(refilled - amount * 1000 - tk));
        b.add("b_rps_tc", Attr::n(amount * 1000));
        if n(&item, "vu").is_some() {
            b.set("vu", Attr::n(self.now + 86_400_000));
        }
        let rf_name = b.name("rf");
        let read = b.value(Attr::n(rf));
        let update = b.build(PK, SK, Some(format!("{rf_name} = {read}")));
        if self.write(table, update).await {
            self.admitted.push((self.now, amount));
            self.refills.push((rf, new_rf));
            self.slow_refills += 1;
        }
    }

    async fn refill(&mut self, table: &MemoryStore, lag: usize, batch: usize) {
        let last = self.versions.len() - 1;
        let at = last.saturating_sub(lag);
        let image_item = self.versions[at].1.clone();
        let before = &self.versions[at.saturating_sub(batch)].1;
        let consumed = n(&image_item, "b_rps_tc").unwrap() - n(before, "b_rps_tc").unwrap();
        let wire = wire(&image_item);
        let image: Image<'_> = serde_json::from_str(&wire).unwrap();
        let state = BucketState::read(&image).unwrap();
        let consumed = BTreeMap::from([("rps".to_owned(), consumed)]);
        let pass = Pass {
            pk: PK,
            state: &state,
            consumed: &consumed,
            now: self.now,
        };
        let Some(write) = pass.decide().unwrap() else {
            return;
        };
        let read_rf = write.refilled_at_read;
        let delta = write.limits[0].delta;
        let prior = self.current().clone();
        if self.write(table, write.update()).await {
            self.refills.push((read_rf, write.refilled_at));
            let after = self.current().clone();
            let (ceiling, rate) = share(&after);
            assert_eq!(
                share(&prior),
                (ceiling, rate),
                "a refill never lands across a parameter change"
            );
            assert_eq!(
                prior.get("sched"),
                image_item.get("sched"),
                "a refill never lands across a schedule change"
            );
            if delta > 0 {
                assert!(
                    delta <= rate * (self.now - read_rf) / PERIOD,
                    "credited {delta} over {} ms at {rate}",
                    self.now - read_rf
                );
                assert!(
                    n(&after, "b_rps_tk").unwrap() <= ceiling,
                    "lifted above the ceiling {ceiling}: {after:?}"
                );
            }
        }
    }

    async fn params(&mut self, table: &MemoryStore, cp: Option<i64>, ra: i64, close: bool) {
        let mut b = UpdateBuilder::new();
        if let Some(cp) = cp {
            b.set("b_rps_cp", Attr::n(cp * 1000));
        }
        b.set("b_rps_ra", Attr::n(ra));
        if close {
            b.set("vu", Attr::n(0));
        }
        let update = b.build(PK, SK, Some("attribute_exists(PK)".into()));
        self.write(table, update).await;
    }

    async fn schedule(&mut self, table: &MemoryStore, sched: Option<&str>) {
        let mut b = UpdateBuilder::new();
        match sched {
            Some(s) => b.set("sched", Attr::s(s)),
            None => b.remove("sched"),
        };
        let update = b.build(PK, SK, Some("attribute_exists(PK)".into()));
        self.write(table, update).await;
    }

    async fn double(&mut self, table: &MemoryStore) {
        let item = self.current().clone();
        let count = n(&item, "shard_count").unwrap_or(1);
        if count >= 4 {
            return;
        }
        let mut b = UpdateBuilder::new();
        b.set("shard_count", Attr::n(count * 2));
        let sc = b.name("shard_count");
        let read = b.value(Attr::n(count));
        let update = b.build(
            PK,
            SK,
            Some(format!("attribute_not_exists({sc}) OR {sc} = {read}")),
        );
        if self.write(table, update).await {
            let (ceiling, _) = share(self.current());
            let surplus = (n(&item, "b_rps_tk").unwrap() - ceiling).max(0);
            self.surpluses.push((self.now, surplus));
        }
    }
}

/// An item as a stream image carries it.
fn wire(item: &Item) -> String {
    let map: serde_json::Map<String, Value> = item
        .iter()
        .map(|(k, v)| {
            let v = match v {
                Attr::S(s) => json!({"S": s}),
                Attr::N(n) => json!({"N": n}),
                other => panic!("unexpected {other:?}"),
            };
            (k.clone(), v)
        })
        .collect();
    Value::Object(map).to_string()
}

fn seed() -> Item {
    let mut item = Item::new();
    item.insert("PK".into(), Attr::s(PK));
    item.insert("SK".into(), Attr::s(SK));
    item.insert("rf".into(), Attr::n(START));
    for (f, v) in [
        ("tc", 0),
        ("tk", 10_000),
        ("cp", 10_000),
        ("ra", 1_000),
        ("rp", PERIOD),
    ] {
        item.insert(format!("b_rps_{f}"), Attr::n(v));
    }
    item
}

fn check(run: &Run) {
    // No double refill: every landed refill started where the last ended.
    let mut rf = START;
    for (read, written) in &run.refills {
        assert_eq!(
            *read, rf,
            "a refill from an rf already refilled from: {:?}",
            run.refills
        );
        assert!(*written >= *read);
        rf = *written;
    }
    let (cmax, rmax) = run
        .versions
        .iter()
        .map(|(_, i)| share(i))
        .fold((0, 0), |(c, r), (c2, r2)| (c.max(c2), r.max(r2)));
    for (i, (t1, item)) in run.versions.iter().enumerate() {
        let rf1 = n(item, "rf").unwrap();
        for (t2, _) in &run.versions[i..] {
            let admitted: i64 = run
                .admitted
                .iter()
                .filter(|(t, _)| t > t1 && t <= t2)
                .map(|(_, a)| a * 1000)
                .sum();
            let surplus: i64 = run
                .surpluses
                .iter()
                .filter(|(t, _)| *t >= rf1 && t <= t2)
                .map(|(_, s)| s)
                .sum();
            let bound = cmax + rmax * (t2 - rf1) / PERIOD + surplus + run.slow_refills;
            assert!(
                admitted <= bound,
                "admitted {admitted} in ({t1}, {t2}], bound {bound}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz_cases(256)))]
    #[test]
    fn refills_never_double_never_outrun_the_rate_and_never_admit_past_the_bound(
        steps in prop::collection::vec((0i64..2_500, op()), 1..80)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let table = MemoryStore::new();
            table.insert(seed());
            let mut run = Run { now: START, versions: vec![(START, seed())], ..Default::default() };
            for (dt, op) in steps {
                run.now += dt;
                match op {
                    Op::Fast(a) => run.fast(&table, a).await,
                    Op::Slow(a) => run.slow(&table, a).await,
                    Op::Refill { lag, batch } => run.refill(&table, lag, batch).await,
                    Op::AdminSync { cp, ra } => run.params(&table, Some(cp), ra, true).await,
                    Op::RateOnly(ra) => {
                        let lower = ra < n(run.current(), "b_rps_ra").unwrap();
                        run.params(&table, None, ra, lower).await
                    }
                    Op::ScheduleOnly(sched) => run.schedule(&table, sched).await,
                    Op::Double => run.double(&table).await,
                }
            }
            check(&run);
        });
    }
}
