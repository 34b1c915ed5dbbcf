//! The adaptive end-to-end tests bound by the wall clock: real traffic of
//! the unchanged client over real seconds and minutes, a poller and the
//! controller's own loop running beside it, and bounds measured against
//! single-threaded moto's pace. The full test tier runs them one at a time;
//! their counterparts on the in-memory twin are in the default tier
//! (docs/testing.md).

use super::*;

/// The real client's bucket raised to 5x (`Raised`), drained, then
/// admits at least 4x its base over 30 s of real time; its refill amount is
/// at most the burst and at least the base. The default tier's counterpart
/// is `the_controller_scales_the_real_clients_bucket_and_returns_it_to_base`,
/// which reads the raised amount back through the client without the wait.
#[test]
fn a_raised_bucket_admits_its_factor_over_real_time() {
    let raised = Raised::new("adaptive-admit");
    let factor = raised.factor();
    assert!((factor - 5.0).abs() <= 0.5, "{:?}", raised.evaluated);
    let admit = run_json(
        "adaptive.py",
        &["admit", "--table", &raised.table, "--seconds", "30"],
    );
    let admitted = admit["admitted_tokens"].as_i64().unwrap();
    assert!(admitted >= 4 * 100 * 30, "base is 3,000 in 30 s: {admit}");
    let ra = admit["ra"].as_i64().unwrap();
    assert!((100_000..=1_000_000).contains(&ra), "{admit}");
}

/// `aggregator poll` running on, as a warm Lambda container does: one
/// process, its caches kept from batch to batch. Stopped when dropped.
struct Running(std::process::Child);

impl Running {
    fn poller(table: &str, checkpoint: &Path) -> Running {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_aggregator"));
        cmd.args(["poll", "--table", table, "--checkpoint"])
            .arg(checkpoint)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        aws_env(&mut cmd, moto());
        Running(cmd.spawn().expect("start the poller"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits, checking every 200 ms, until `done` holds, at most `limit`.
fn wait_for(what: &str, limit: std::time::Duration, mut done: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + limit;
    while !done() {
        assert!(
            std::time::Instant::now() < until,
            "{what}: not within {limit:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A controller tick at `now_ms` with a running poller beside it: the first
/// call writes the canaries, the second (once they are all sensed) evaluates.
/// A fast poller can sense them before the first call reads how far the
/// shards have come: then the first call evaluated, and its report is the
/// one (a second call would find no new minute and report an empty share).
fn tick_beside(
    table: &str,
    runtime: &tokio::runtime::Runtime,
    store: &zae_table::sdk::DynamoStore,
    now_ms: i64,
) -> Value {
    use zae_table::adaptive::tick::Tick;
    let first = control(table, now_ms);
    if first["sensed_through"] == serde_json::json!(now_ms) {
        return first;
    }
    if let Some(count) = first["canaries_written"].as_u64().filter(|n| *n > 0) {
        wait_for(
            "the tick's canaries sensed",
            std::time::Duration::from_secs(30),
            || {
                let sensed = runtime.block_on(Tick::sensed(store)).unwrap();
                sensed
                    .iter()
                    .any(|(at, seen)| *at == now_ms && *seen as u64 >= count)
            },
        );
    }
    control(table, now_ms)
}

/// The cut survives a warm aggregator: `gpt-4`'s four governed buckets are
/// raised to 10x on an idle resource, with one poller running throughout
/// (its repair's caches warm with the 10x target); 150% of the estimated
/// capacity from an entity the adaptive level does not govern cuts the
/// factor to 1 and the buckets to base; then, while the poller reads the
/// stamps' records and the clients' next requests on every bucket, the four
/// stay at base.
#[test]
fn a_warm_poller_never_undoes_the_controllers_cut() {
    use zae_table::adaptive::usage::{MINUTE_MS, Minute, minute_of};
    use zae_table::keys;
    use zae_table::store::Store;
    let (table, ns) = client_table("adaptive-warm");
    let (runtime, store) = store(&table);
    apply(&runtime, &store, &ns, ADAPTIVE);
    let governed = ["w0", "w1", "w2", "w3"];
    for e in governed {
        run_json("adaptive.py", &["touch", "--table", &table, "--entity", e]);
    }
    let dir = TempDir::new(&table);
    let _poller = Running::poller(&table, &dir.file("checkpoint.json"));
    let ra = |e: &str| {
        run_json("adaptive.py", &["params", "--table", &table, "--entity", e])["ra"].clone()
    };
    let now = || chrono::Utc::now().timestamp_millis();
    // Idle minutes just gone: raised to the maximum.
    let r0 = minute_of(now());
    let mut factor = 0.0;
    for k in (1..=6).rev() {
        factor = first_target(&tick_beside(
            &table,
            &runtime,
            &store,
            r0 - k * MINUTE_MS + 5_000,
        ))["factor"]
            .as_f64()
            .unwrap();
    }
    assert!(factor >= 9.0, "{factor}");
    for e in governed {
        assert_eq!(ra(e), 1_000_000, "{e} at 10x");
    }
    // The surge, sensed by the running poller.
    let surge = run_json(
        "adaptive.py",
        &["surge", "--table", &table, "--tokens", "45000"],
    );
    assert_eq!(surge["one_minute"], true, "{surge}");
    let m = surge["minute_ms"].as_i64().unwrap();
    let pk = keys::pk_adaptive(&ns);
    wait_for(
        "the surge sensed",
        std::time::Duration::from_secs(60),
        || {
            let item = runtime
                .block_on(store.get(&pk, &keys::sk_adaptive_usage(m, "gpt-4"), true))
                .unwrap();
            item.and_then(|i| Minute::from_item(&i))
                .is_some_and(|u| u.used.get("rps") >= Some(&45_000_000))
        },
    );
    let cut = tick_beside(&table, &runtime, &store, (m + MINUTE_MS + 5_000).max(now()));
    assert_eq!(first_target(&cut)["factor"], 1.0, "{cut}");
    // The poller reads the stamps, then every bucket's next request.
    for e in governed {
        run_json("adaptive.py", &["touch", "--table", &table, "--entity", e]);
    }
    wait_for(
        "the requests read",
        std::time::Duration::from_secs(60),
        || {
            let sensed = runtime.block_on(store.query(&zae_table::store::Query {
                index: &keys::Index::TABLE,
                pk: keys::pk_adaptive(&ns),
                sk_prefix: keys::sk_adaptive_usage(minute_of(now()), ""),
                consistent: true,
            }));
            sensed.is_ok_and(|items| !items.is_empty())
        },
    );
    for round in 0..3 {
        for e in governed {
            assert_eq!(ra(e), 100_000, "{e} at base, round {round}");
            run_json("adaptive.py", &["touch", "--table", &table, "--entity", e]);
        }
    }
}

/// A client's table with `manifest` applied, its targets made as if two
/// minutes ago (their minutes start now), started late in a minute so that
/// the next one is whole, with one poller and the controller's own loop
/// (`aggregator control`: a tick two seconds into each minute, waiting for
/// its canaries) running until dropped; the controller's reports go to `log`.
struct Live {
    table: String,
    ns: String,
    runtime: tokio::runtime::Runtime,
    store: zae_table::sdk::DynamoStore,
    log: std::path::PathBuf,
    _poller: Running,
    _controller: Running,
    dir: TempDir,
}

fn live(name: &str, manifest: &str) -> Live {
    use zae_table::adaptive::usage::MINUTE_MS;
    let (table, ns) = client_table(name);
    let (runtime, store) = store(&table);
    apply(&runtime, &store, &ns, manifest);
    let now = || chrono::Utc::now().timestamp_millis();
    control(&table, now() - 2 * MINUTE_MS);
    // Wall-clock alignment, not synchronisation: the traffic starts at :45.
    let into = now() % MINUTE_MS;
    if into < 45_000 {
        std::thread::sleep(std::time::Duration::from_millis((45_000 - into) as u64));
    }
    let dir = TempDir::new(&table);
    let poller = Running::poller(&table, &dir.file("checkpoint.json"));
    let log = dir.file("control.log");
    let mut controller = Command::new(env!("CARGO_BIN_EXE_aggregator"));
    controller
        .args(["control", "--table", &table])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("the controller's log"));
    aws_env(&mut controller, moto());
    let controller = Running(controller.spawn().expect("start the controller"));
    Live {
        table,
        ns,
        runtime,
        store,
        log,
        _poller: poller,
        _controller: controller,
        dir,
    }
}

const SHARED: &str = "namespace: default
resources:
  gpt-4:
    estimated_capacity: {rps: 6000}
    share: demand
    limits:
      rps: {capacity: 200, refill_amount: 10, refill_period: 1, adaptive: utilization}
  gpt-4-base:
    estimated_capacity: {rps: 6000}
    limits:
      rps: {capacity: 200, refill_amount: 10, refill_period: 1, adaptive: utilization}
";

/// The demand share's short run, in the test command (the long one, with
/// the fall-back and the per-minute table, is below): the unchanged client,
/// 20 s of traffic on `gpt-4` (`share: demand`, 6,000 rps tokens a minute):
/// a heavy entity takes all it gets, ten light ones use half their base.
/// The poller senses it (the heavy one saturated, the light ones not listed);
/// one controller tick (clock injected: the minute of the traffic is
/// complete once its canaries are through) gives the heavy entity what the
/// others left, and stamps its bucket and no other; the client reads the
/// raised rate back. About 40 s.
#[test]
fn the_demand_share_gives_the_entity_that_wants_it_what_the_others_leave() {
    use zae_table::adaptive::usage::{MINUTE_MS, minute_of};
    let (table, ns) = client_table("adaptive-share-short");
    let (runtime, store) = store(&table);
    apply(&runtime, &store, &ns, SHARED);
    let now = || chrono::Utc::now().timestamp_millis();
    control(&table, now() - 2 * MINUTE_MS);
    // Wall-clock alignment, not synchronisation: all 20 s in one minute.
    let into = now() % MINUTE_MS;
    if into > 35_000 {
        std::thread::sleep(std::time::Duration::from_millis(
            (MINUTE_MS - into + 200) as u64,
        ));
    }
    let minute = minute_of(now());
    let dir = TempDir::new(&table);
    let _poller = Running::poller(&table, &dir.file("checkpoint.json"));
    let report = run_json(
        "adaptive.py",
        &[
            "share",
            "--table",
            &table,
            "--resources",
            "gpt-4",
            "--steady",
            "20",
            "--surge",
            "0",
            "--tokens",
            "100",
        ],
    );
    let light: f64 = admitted(&report, "gpt-4", "light").values().sum();
    let tick = tick_beside(&table, &runtime, &store, minute + MINUTE_MS + 5_000);
    let share = tick["namespaces"][0]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["resource"] == "gpt-4")
        .map(|t| t["share"].clone())
        .unwrap_or_default();
    let context = format!("{share}\n{report}");
    assert_eq!(share["minute_ms"], serde_json::json!(minute), "{context}");
    let heavy = &share["entities"][0];
    assert_eq!(
        (
            share["entities"].as_array().map(Vec::len),
            heavy["entity"].as_str()
        ),
        (Some(1), Some("heavy")),
        "only the heavy entity listed: {context}"
    );
    assert_eq!(heavy["saturated"], serde_json::json!(true), "{context}");
    // What the others left: the light ones' use, and the heavy one's in
    // batches where it was not short (its burst at the start).
    let left = share["left"].as_f64().unwrap();
    let expected = 6_000.0 - light;
    assert!(
        (left - expected).abs() <= 0.15 * expected,
        "left {left} for the heavy one, the light ones used {light}: {context}"
    );
    assert_eq!(heavy["allocation"].as_f64(), Some(left), "{context}");
    let params = run_json(
        "adaptive.py",
        &["params", "--table", &table, "--entity", "heavy"],
    );
    let stamped = params["ra"].as_f64().unwrap();
    assert!(
        (stamped - 10_000.0 * left / 600.0).abs() <= 10.0,
        "the client reads {stamped} for {left} a minute: {context}"
    );
    for i in 0..10 {
        use zae_table::store::Store;
        let pk = format!("{ns}/BUCKET#light{i}#gpt-4#0");
        let bucket = runtime.block_on(store.get(&pk, "#STATE", true)).unwrap();
        let ra = bucket.as_ref().map(|b| b["b_rps_ra"].clone());
        assert_eq!(ra, Some(zae_table::Attr::n(10_000)), "light{i} untouched");
    }
}

/// Tokens admitted per minute of the clock, from the harness's report.
fn admitted(report: &Value, resource: &str, who: &str) -> BTreeMap<i64, f64> {
    report["per_minute"][resource][who]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|pair| Some((pair[0].as_i64()?, pair[1].as_f64()?)))
        .collect()
}

/// The demand share end to end, in real time, with the unchanged client,
/// one poller and the controller's own loop: on `gpt-4` (`share: demand`)
/// and on `gpt-4-base` (`share: base`), each sized for 6,000 rps tokens a
/// minute, one heavy entity takes all it gets (base 600 a minute, 100 tokens
/// a request from two requesters, as the greedy users below: each request's
/// own gap costs about a tenth at 50 tokens a second; a burst of 200, at
/// most 20x) and ten light ones use half
/// their base (3,000 a minute together),
/// then, after three whole minutes, take all they get too.
/// - Under `share: demand` the heavy entity is admitted what the light ones
///   leave (6,000 less their use), within 15%, in the second whole minute;
///   under `share: base` it is admitted the one factor times its base.
/// - Once the light ones surge, the tick that evaluates the surge's first
///   minute puts the heavy entity back at base (everyone saturated: the
///   bases fill the capacity), and forgets its allocation.
///
/// The per-minute table is printed. About five minutes: it runs beside the
/// greedy test above (alphabetical order puts both last), on the same moto.
#[test]
#[ignore = "a five-minute real-time run: scripts/long.sh runs it"]
fn spare_capacity_goes_to_the_entity_that_wants_it_and_back_when_the_others_surge() {
    use zae_table::adaptive::allocation::Allocated;
    use zae_table::adaptive::target::Target;
    use zae_table::adaptive::usage::{MINUTE_MS, minute_of};
    use zae_table::store::Store;
    let live = live("adaptive-share", SHARED);
    let Live {
        table,
        ns,
        runtime,
        store,
        log,
        ..
    } = &live;
    let now = || chrono::Utc::now().timestamp_millis();
    // M0 is the first whole minute; the light ones surge at M3.
    let m0 = minute_of(now()) + MINUTE_MS;
    let surge_at = m0 + 3 * MINUTE_MS;
    let steady = ((surge_at - now()) as f64 / 1000.0).to_string();
    let report = run_json(
        "adaptive.py",
        &[
            "share",
            "--table",
            table,
            "--resources",
            "gpt-4,gpt-4-base",
            "--steady",
            &steady,
            "--surge",
            "40",
            "--tokens",
            "100",
        ],
    );
    let read_target = |resource: &str| {
        let (pk, sk) = Target::key(ns, resource, "rps");
        Target::from_item(
            &runtime
                .block_on(store.get(&pk, &sk, true))
                .unwrap()
                .unwrap(),
        )
        .unwrap()
    };
    let heavy = admitted(&report, "gpt-4", "heavy");
    let light = admitted(&report, "gpt-4", "light");
    let heavy_base = admitted(&report, "gpt-4-base", "heavy");
    let base_target = read_target("gpt-4-base");
    let shared = read_target("gpt-4");
    let mut table_text =
        String::from("minute  | demand: heavy  light  left for heavy | base: heavy  factor\n");
    for m in (m0..=surge_at).step_by(MINUTE_MS as usize) {
        let get = |t: &BTreeMap<i64, f64>| t.get(&m).copied().unwrap_or(0.0);
        table_text.push_str(&format!(
            "M{}      | {:>13.0} {:>6.0} {:>15.0} | {:>11.0} {:>7.2}\n",
            (m - m0) / MINUTE_MS,
            get(&heavy),
            get(&light),
            6_000.0 - get(&light),
            get(&heavy_base),
            base_target.in_force(m, m + MINUTE_MS).0,
        ));
    }
    let ticks = shares(log);
    let context = format!(
        "{table_text}\nshares by tick:\n{}\nlast: {:?}\n{report}",
        ticks.join("\n"),
        shared.shared
    );
    eprintln!("{context}");
    // The second whole minute: every tick behind it saw a whole minute.
    let m2 = m0 + 2 * MINUTE_MS;
    let left = 6_000.0 - light[&m2];
    let got = heavy.get(&m2).copied().unwrap_or(0.0);
    assert!(
        (got - left).abs() <= 0.15 * left,
        "heavy admitted {got}, the light ones left {left}:\n{context}"
    );
    // Over M1 and M2 (one request more or less is a tenth of a minute's).
    let m1 = m0 + MINUTE_MS;
    let (factor, _) = base_target.in_force(m1, m2 + MINUTE_MS);
    let got_base: f64 = [m1, m2].iter().filter_map(|m| heavy_base.get(m)).sum();
    assert!(
        (got_base - 2.0 * factor * 600.0).abs() <= 0.15 * 2.0 * factor * 600.0,
        "under share: base, {got_base} in two minutes for a factor of {factor}:\n{context}"
    );
    assert!(
        got > got_base,
        "the demand share gives more in one minute than base in two: {context}"
    );
    let heavy_ra = || {
        let pk = format!("{ns}/BUCKET#heavy#gpt-4#0");
        runtime
            .block_on(store.get(&pk, "#STATE", true))
            .unwrap()
            .unwrap()["b_rps_ra"]
            .clone()
    };
    // Only the tick that evaluates the surge's first minute (at M4) puts it
    // at base: the next one sees it idle, and an idle entity eases down
    // halfway. So base by the end of M5's tick is base within two ticks.
    let back = || {
        let forgotten = runtime
            .block_on(Allocated::read(store, ns, "gpt-4", "rps"))
            .unwrap()
            .is_empty();
        forgotten && heavy_ra() == zae_table::Attr::n(10_000)
    };
    while !back() && now() < surge_at + 2 * MINUTE_MS + 30_000 {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(
        back(),
        "the heavy entity back at base within two ticks: {:?}\nshares by tick:\n{}",
        heavy_ra(),
        shares(log).join("\n")
    );
}

/// Each controller tick's share of `gpt-4`, from its reports.
fn shares(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            let targets = v["control"]["namespaces"][0]["targets"].as_array()?.clone();
            let t = targets.iter().find(|t| t["resource"] == "gpt-4")?;
            Some(format!("{}", t["share"]))
        })
        .collect()
}

/// Six users who take all they are admitted (two requesters each, 100
/// tokens a request), 20% of `gpt-4`'s estimated capacity at base (18,000
/// rps tokens a minute; each user 10 a second, burst 100), everything real
/// and in real time: the unchanged client's
/// traffic, one poller and the controller's own loop (`aggregator
/// control`: a tick two seconds into each minute, waiting for its
/// canaries). The first minute at base is evaluated, the factor goes to
/// `t / 0.2 = 5`, and every minute wholly after the raise uses 80-105% of
/// the capacity: the spare capacity is used, never overrun (the first
/// version's law settled at `1 / sqrt(0.2)`, 45%). Not 100%: the users'
/// own gaps (moto's round trips, a rejected requester's wait of up to a
/// second) leave some refill unclaimed; measured 88-91% with 100-token
/// requests, 81-84% with 50. About four minutes.
#[test]
fn users_who_take_all_they_get_settle_at_the_target_over_their_use_at_base() {
    use zae_table::adaptive::target::Target;
    use zae_table::adaptive::usage::{MINUTE_MS, minute_of};
    use zae_table::store::Store;
    const GREEDY: &str = "namespace: default
resources:
  gpt-4:
    estimated_capacity: {rps: 18000}
    limits:
      rps: {capacity: 100, refill_amount: 10, refill_period: 1, adaptive: utilization}
";
    let live = live("adaptive-greedy", GREEDY);
    let Live {
        table,
        ns,
        runtime,
        store,
        dir,
        ..
    } = &live;
    let now = || chrono::Utc::now().timestamp_millis();
    let started = now();
    let traffic = run_json(
        "adaptive.py",
        &[
            "greedy",
            "--table",
            table,
            "--entities",
            "6",
            "--seconds",
            "200",
            "--tokens",
            "100",
        ],
    );
    // Every shard read past the traffic before the minutes are read.
    poll(table, &dir.file("checkpoint.json"), moto(), &[], &[]);
    let (pk, sk) = Target::key(ns, "gpt-4", "rps");
    let target = Target::from_item(
        &runtime
            .block_on(store.get(&pk, &sk, true))
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    let raise = target
        .history
        .iter()
        .find(|m| m.to.as_f64() > 1.0)
        .unwrap_or_else(|| panic!("no raise: {target:?}\n{traffic}"));
    let minutes: Vec<(i64, f64)> = usage_minutes(runtime, store, ns)
        .into_iter()
        .filter(|m| m.minute_ms >= minute_of(started))
        .map(|m| {
            (
                m.minute_ms,
                m.used.get("rps").copied().unwrap_or(0) as f64 / 18_000_000.0,
            )
        })
        .collect();
    let context = format!("raise {raise:?}\nminutes {minutes:?}\n{traffic}");
    eprintln!("{context}");
    let at_base = raise.minute_ms;
    let base = minutes
        .iter()
        .find(|(m, _)| *m == at_base)
        .expect(&context)
        .1;
    assert!((base - 0.2).abs() <= 0.02, "20% at base: {context}");
    assert!((raise.to.as_f64() - 5.0).abs() <= 0.5, "t / 0.2: {context}");
    let raised: Vec<f64> = minutes
        .iter()
        .filter(|(m, _)| {
            *m >= minute_of(raise.at_ms) + MINUTE_MS && *m + MINUTE_MS <= started + 200_000
        })
        .map(|(_, u)| *u)
        .collect();
    assert!(
        !raised.is_empty(),
        "a whole minute after the raise: {context}"
    );
    for u in raised {
        assert!((0.8..=1.05).contains(&u), "use at the target: {context}");
    }
}

/// Issue 40, item 16, in real time on moto with the real client and the
/// built poller: `gpt-4` raised to 5 (20% of its 30,000 tokens a minute,
/// written as sensed over the minutes just gone), then an entity the
/// adaptive level does not govern takes 18,000 tokens from 41 s into a
/// minute: 80% of the capacity over the whole minute with the governed 20%
/// (no surge by the minute's use), 180% of it over the minute's last third.
/// The tick after that minute cuts the factor to 1 and the governed bucket
/// to base. Before the sensor recorded the minute's tail it cut to
/// `1 / 0.8`, 1.25, and the cut to base waited for the next minute (the
/// issue's run ended its surge at 1.57). Waits for 41 s into a minute: 0 to
/// 60 s, about 45 s in all on average.
#[test]
fn a_surge_in_a_minutes_last_third_is_cut_to_base_at_the_tick_after_it() {
    use zae_table::adaptive::usage::{self, MINUTE_MS, minute_of};
    use zae_table::store::{Returns, Store};
    let (table, ns) = client_table("adaptive-tail");
    let (runtime, store) = store(&table);
    apply(&runtime, &store, &ns, ADAPTIVE);
    run_json("adaptive.py", &["touch", "--table", &table]);
    let dir = TempDir::new(&table);
    let checkpoint = dir.file("checkpoint.json");
    let now = || chrono::Utc::now().timestamp_millis();
    let governed = |minute: i64| {
        let used = BTreeMap::from([("rps".to_owned(), 6_000_000)]);
        let update = usage::add(&ns, "gpt-4", minute, &used);
        runtime
            .block_on(store.update(&update, Returns::Nothing))
            .unwrap();
    };
    // Raised over the minutes just gone: a tick 5 s into each.
    let r0 = minute_of(now());
    let mut factor = 1.0;
    for k in (1..=6).rev() {
        let tick_at = r0 - k * MINUTE_MS + 5_000;
        governed(minute_of(tick_at) - MINUTE_MS);
        factor = sensed_tick(&table, &checkpoint, tick_at)["factor"]
            .as_f64()
            .unwrap();
    }
    assert!((factor - 5.0).abs() <= 0.25, "raised: {factor}");
    // The surge's minute: this one if 41 s into it is still ahead. The
    // governed 20% in every minute the cut's tick reads.
    let at = now();
    let surge_minute = match at - minute_of(at) <= 41_000 {
        true => minute_of(at),
        false => minute_of(at) + MINUTE_MS,
    };
    for minute in (r0 - MINUTE_MS..=surge_minute).step_by(MINUTE_MS as usize) {
        governed(minute);
    }
    let wait = surge_minute + 41_000 - now();
    std::thread::sleep(std::time::Duration::from_millis(wait.max(0) as u64));
    let surge = run_json(
        "adaptive.py",
        &["surge", "--table", &table, "--tokens", "18000"],
    );
    assert_eq!(surge["minute_ms"], surge_minute, "{surge}");
    assert_eq!(surge["one_minute"], true, "{surge}");
    let cut = sensed_tick(&table, &checkpoint, surge_minute + MINUTE_MS + 5_000);
    let minutes = cut["minutes"].as_array().unwrap();
    let read = minutes.iter().find(|m| m[0] == surge_minute);
    let u = read.and_then(|m| m[1].as_f64()).unwrap_or(0.0);
    assert!(
        (0.75..1.0).contains(&u),
        "no surge by the minute's use: {cut}"
    );
    assert_eq!(cut["factor"].as_f64(), Some(1.0), "{cut}");
    let ra = run_json("adaptive.py", &["params", "--table", &table])["ra"].clone();
    assert_eq!(ra, 100_000, "the governed bucket at base");
}
