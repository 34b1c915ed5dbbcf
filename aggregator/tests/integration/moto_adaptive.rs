//! End-to-end tests of adaptive limits on a real moto server, driven by the
//! real zae-limiter 0.17.0 client and read back through it, with the built
//! `aggregator` binary as the poller, the controller and, under the Lambda
//! stand-in, the function. One moto serves the whole run (see `moto.rs`).

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use zae_test_support::harness::*;

use crate::common::poll;

/// The table through the same store the Lambdas use, on moto.
fn store(table: &str) -> (tokio::runtime::Runtime, zae_table::sdk::DynamoStore) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    (runtime, dynamo_store(table))
}

/// The usage minutes sensed on `namespace`, read back consistently.
fn usage_minutes(
    runtime: &tokio::runtime::Runtime,
    store: &zae_table::sdk::DynamoStore,
    namespace: &str,
) -> Vec<zae_table::adaptive::usage::Minute> {
    use zae_table::keys::{self, Index};
    use zae_table::store::{Query, Store};
    let query = Query {
        index: &Index::TABLE,
        pk: keys::pk_adaptive(namespace),
        sk_prefix: keys::SK_ADAPTIVE_USAGE.to_owned(),
        consistent: true,
    };
    let items = runtime.block_on(store.query(&query)).unwrap();
    items
        .iter()
        .filter_map(zae_table::adaptive::usage::Minute::from_item)
        .collect()
}

/// Declares `gpt-4`'s estimated capacities on the client's table, runs the
/// poller over its whole stream, and sums the tokens sensed per limit.
fn sensed_on_gpt4(
    table: &str,
    namespace: &str,
    capacity: &[(&str, i64)],
) -> (BTreeMap<String, i64>, Poll) {
    use zae_table::adaptive::Declaration;
    use zae_table::store::Store;
    let (runtime, store) = store(table);
    let declaration = Declaration {
        capacity: BTreeMap::from([(
            "gpt-4".to_owned(),
            capacity
                .iter()
                .map(|(l, c)| ((*l).to_owned(), *c))
                .collect(),
        )]),
        ..Declaration::default()
    };
    runtime
        .block_on(store.put(&declaration.to_item(namespace), None))
        .unwrap();
    let dir = TempDir::new(table);
    let polled = poll(table, &dir.file("checkpoint.json"), endpoint(), &[], &[]);
    let mut sensed = BTreeMap::new();
    for minute in usage_minutes(&runtime, &store, namespace) {
        for (limit, used) in minute.used {
            *sensed.entry(limit).or_insert(0) += used;
        }
    }
    (sensed, polled)
}

/// The real client's requests on a three-level tree (org <- team <- key,
/// team and key cascading, as the client allows): each request debits its
/// entity's bucket and, where that bucket cascades, its parent's. Sensed by
/// the poller into the per-minute usage of a resource that declares an
/// estimated capacity, every request counts once: 532 tokens asked, 532
/// sensed, where summing the buckets would give 1,062.
#[test]
fn the_sensor_counts_each_request_of_a_three_level_cascade_once() {
    let table = unique_table("sensor");
    let driven = run_json("adaptive.py", &["cascade", "--table", &table]);
    let namespace = driven["namespace_id"].as_str().unwrap();
    let (sensed, polled) = sensed_on_gpt4(&table, namespace, &[("tpm", 100_000)]);
    assert_eq!(driven["tokens"], 532, "{driven}");
    assert_eq!(sensed["tpm"], 532_000, "{sensed:?}\n{}", polled.summary);
}

/// One controller tick at `now_ms` as the Lambda's runs (it writes its
/// canaries and waits for them), split in two calls with the poller between:
/// the report of the first namespace's first target, or of the call that
/// retired it.
fn sensed_tick(table: &str, checkpoint: &Path, now_ms: i64) -> Value {
    let first = control(table, now_ms);
    poll(table, checkpoint, endpoint(), &[], &[]);
    let second = control(table, now_ms);
    match first_target(&second) {
        Value::Null => first_target(&first),
        target => target,
    }
}

/// A table tick's first namespace's first target.
fn first_target(tick: &Value) -> Value {
    tick["namespaces"][0]["targets"][0].clone()
}

/// A table as the client makes it, with namespace `default` registered: its
/// name and the namespace's id.
fn client_table(name: &str) -> (String, String) {
    let table = unique_table(name);
    let setup = run_json("adaptive.py", &["setup", "--table", &table]);
    (table, setup["namespace_id"].as_str().unwrap().to_owned())
}

/// `aggregator control --once --now MS` on `table`: the tick's report.
fn control(table: &str, now_ms: i64) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_aggregator"));
    cmd.args([
        "control",
        "--table",
        table,
        "--once",
        "--now",
        &now_ms.to_string(),
    ]);
    aws_env(&mut cmd, endpoint());
    control_report_of(cmd.output().expect("run the aggregator"))
}

fn control_report_of(out: std::process::Output) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "aggregator control failed:\n{stderr}");
    stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v.get("control").cloned())
        .expect("the controller prints its report")
}

/// Applies a manifest through the provisioner, as `zae-limits apply` does.
fn apply(
    runtime: &tokio::runtime::Runtime,
    store: &zae_table::sdk::DynamoStore,
    ns: &str,
    yaml: &str,
) {
    use zae_provisioner::apply::{Caller, Provisioner};
    use zae_provisioner::manifest::Manifest;
    let manifest = Manifest::from_yaml(yaml).unwrap();
    let provisioner = Provisioner {
        store,
        namespace: ns,
    };
    let report = runtime
        .block_on(provisioner.apply(&manifest, false, &Caller::local("test")))
        .unwrap();
    assert_eq!(report.errors, Some(vec![]), "{report:?}");
}

const ADAPTIVE: &str = "namespace: default
resources:
  gpt-4:
    estimated_capacity: {rps: 30000}
    limits:
      rps: {capacity: 1000, refill_amount: 100, refill_period: 1, adaptive: utilization}
";

const NOT_ADAPTIVE: &str = "namespace: default
resources:
  gpt-4:
    estimated_capacity: {rps: 30000}
    limits:
      rps: {capacity: 1000, refill_amount: 100, refill_period: 1}
";

/// `gpt-4` of `ADAPTIVE` on a client's table, raised by the controller
/// against moto with the real, unchanged 0.17.0 client: `gpt-4` is sized for
/// 30,000 tokens a minute, its `rps` limit is 100 tokens a second with a
/// burst of 1,000 (at most 10x). The controller's clock is injected
/// (`--now`), one minute per tick, and the sensor's minutes at a steady 20%
/// are written for the test (the sensor itself is proven by the cascade
/// test); the canaries go through moto's stream and the poller, between two
/// calls of the same tick (what the Lambda's wait does).
struct Raised {
    table: String,
    ns: String,
    runtime: tokio::runtime::Runtime,
    store: zae_table::sdk::DynamoStore,
    checkpoint: std::path::PathBuf,
    /// A day ahead of moto's clock: the client's own traffic lands in other minutes.
    t0: i64,
    /// The next tick's minute, counted from `t0`.
    next: i64,
    /// The client's view of the config items before any adaptive item.
    plain: Value,
    /// The factor of each tick that evaluated a minute.
    evaluated: Vec<f64>,
    _dir: TempDir,
}

impl Raised {
    /// Ticks until three have evaluated a minute at 20% (at most ten).
    fn new(name: &str) -> Raised {
        Raised::with(name, NOT_ADAPTIVE, ADAPTIVE, &[])
    }

    /// `new` of other manifests (`gpt-4` sized for 30,000 rps tokens a
    /// minute), with `ready` run by the client between the two applies.
    fn with(name: &str, plain: &str, adaptive: &str, ready: &[&[&str]]) -> Raised {
        use zae_table::adaptive::usage::MINUTE_MS;
        let (table, ns) = client_table(name);
        let (runtime, store) = store(&table);
        // The same config items either way: only the adaptive items differ.
        apply(&runtime, &store, &ns, plain);
        run_json("adaptive.py", &["touch", "--table", &table]);
        for args in ready {
            run_json(
                "adaptive.py",
                &[*args, &["--table", table.as_str()]].concat(),
            );
        }
        let plain = run_json("adaptive.py", &["view", "--table", &table]);
        apply(&runtime, &store, &ns, adaptive);
        let dir = TempDir::new(&table);
        let t0 = (chrono::Utc::now().timestamp_millis() / MINUTE_MS + 24 * 60) * MINUTE_MS;
        let mut raised = Raised {
            checkpoint: dir.file("checkpoint.json"),
            table,
            ns,
            runtime,
            store,
            t0,
            next: 0,
            plain,
            evaluated: Vec::new(),
            _dir: dir,
        };
        while raised.evaluated.len() < 3 && raised.next < 10 {
            let t = raised.tick(6_000);
            if !t["minutes"].as_array().unwrap().is_empty() {
                raised.evaluated.push(t["factor"].as_f64().unwrap());
            }
        }
        raised
    }

    /// The next minute used `tokens`; the tick after it.
    fn tick(&mut self, tokens: i64) -> Value {
        use zae_table::adaptive::usage::{self, MINUTE_MS};
        use zae_table::store::{Returns, Store};
        let used = BTreeMap::from([("rps".to_owned(), tokens * 1000)]);
        let minute = self.t0 + (self.next - 1) * MINUTE_MS;
        self.runtime
            .block_on(self.store.update(
                &usage::add(&self.ns, "gpt-4", minute, &used),
                Returns::Nothing,
            ))
            .unwrap();
        let now_ms = self.t0 + self.next * MINUTE_MS + 5_000;
        self.next += 1;
        sensed_tick(&self.table, &self.checkpoint, now_ms)
    }

    fn factor(&self) -> f64 {
        *self.evaluated.last().unwrap()
    }

    /// The refill amount the client reads on `e`'s `gpt-4` bucket.
    fn ra(&self) -> i64 {
        self.params("e")["ra"].as_i64().unwrap()
    }

    /// `entity`'s `rps` parameters as the client reads them.
    fn params(&self, entity: &str) -> Value {
        run_json(
            "adaptive.py",
            &["params", "--table", &self.table, "--entity", entity],
        )
    }
}

/// The controller against moto with the real, unchanged 0.17.0 client
/// (see `Raised`):
/// - the factor comes within 10% of 5 within three ticks that evaluate, and
///   the client reads its bucket's refill amount at that factor times base;
/// - with every adaptive item in the table, the client's config reads and
///   list APIs (`get_resource_defaults`, `get_system_defaults`, `get_limits`,
///   `list_resources_with_defaults`, `list_resources_with_entity_configs`,
///   `list_entities_with_custom_limits`, `get_resource_capacity`) return what
///   they return without them, and its `acquire` goes on working;
/// - removing `adaptive` from the manifest returns the bucket to base in the
///   apply itself; made adaptive again and raised, `zae-limits adaptive
///   reset` returns it to base.
///
/// What the raised bucket admits over real time is
/// `realtime::a_raised_bucket_admits_its_factor_over_real_time`.
#[test]
fn the_controller_scales_the_real_clients_bucket_and_returns_it_to_base() {
    let mut raised = Raised::new("adaptive");
    let factor = raised.factor();
    assert!((factor - 5.0).abs() <= 0.5, "{:?}", raised.evaluated);
    let ra = raised.ra();
    assert!(
        (ra as f64 - 100_000.0 * factor).abs() <= 1_000.0,
        "{ra} at {factor}x of 100 a second"
    );
    // Declaration, targets, tick, canaries, sensed marks and usage minutes
    // are all there now; the client's config reads and list APIs see none.
    let adaptive = run_json("adaptive.py", &["view", "--table", &raised.table]);
    assert_eq!(adaptive, raised.plain);
    assert_eq!(
        raised.plain["capacity_entities"],
        serde_json::json!(["e"]),
        "{}",
        raised.plain
    );

    // The apply itself returns the bucket to base and retires the target.
    apply(&raised.runtime, &raised.store, &raised.ns, NOT_ADAPTIVE);
    assert_eq!(raised.ra(), 100_000);
    let t = raised.tick(6_000);
    assert!(t.is_null(), "nothing left to control: {t}");

    apply(&raised.runtime, &raised.store, &raised.ns, ADAPTIVE);
    let mut again = 1.0;
    for _ in 1..8 {
        again = raised.tick(6_000)["factor"].as_f64().unwrap();
        if again > 2.0 {
            break;
        }
    }
    assert!(again > 2.0, "raised again: {again}");
    let reset = raised
        .runtime
        .block_on(zae_adaptive::reset::reset(&raised.store, &raised.ns))
        .unwrap();
    assert_eq!(reset[0].stamps_lost, 0, "{reset:?}");
    assert_eq!(raised.ra(), 100_000);
}

const PER_MINUTE: &str = "namespace: default
resources:
  gpt-4:
    estimated_capacity: {rps: 30000}
    limits:
      rps: {capacity: 6000, refill_amount: 600, refill_period: 60, adaptive: utilization}
";

/// A caller's own limits are never scaled, against moto with the real,
/// unchanged client (`Raised` of a level of 600 tokens a minute, burst
/// 6,000): beside `e`, governed by the level, `second` passes
/// `acquire(limits=[Limit("rps", 6000, 10, 1)])` (the level's burst and
/// rate, per second) and `half` the level's burst and period at half its
/// amount. The controller raises `e` 5x; `second` and `half` keep what their
/// callers gave them through its laps, and through the aggregator's repair
/// when their next requests reach the stream. An earlier version wrote
/// `second` 600,000 millitokens under its 1 s period: 60 times its rate at
/// base, 300 times at 5x.
#[test]
fn a_callers_own_limits_on_an_adaptive_resource_are_never_scaled() {
    let own = |entity: &'static str, amount: &'static str, period: &'static str| {
        let args = ["own", "--entity", entity, "--capacity", "6000"];
        [&args[..], &["--amount", amount, "--period", period]].concat()
    };
    let (second, half) = (own("second", "10", "1"), own("half", "300", "60"));
    let plain = PER_MINUTE.replace(", adaptive: utilization", "");
    let ready = [second.as_slice(), half.as_slice()];
    let raised = Raised::with("adaptive-own", &plain, PER_MINUTE, &ready);
    assert!(
        (raised.factor() - 5.0).abs() <= 0.5,
        "{:?}",
        raised.evaluated
    );
    let governed = raised.params("e");
    assert_eq!(governed["rp"], 60_000, "{governed}");
    let ra = governed["ra"].as_f64().unwrap();
    assert!(
        (ra - 600_000.0 * raised.factor()).abs() <= 6_000.0,
        "{governed}"
    );
    let kept = |entity: &str, ra: i64, rp: i64| {
        let read = raised.params(entity);
        assert_eq!(
            (read["ra"].as_i64(), read["rp"].as_i64()),
            (Some(ra), Some(rp)),
            "{entity}: {read}"
        );
    };
    kept("second", 10_000, 1_000);
    kept("half", 300_000, 60_000);
    // Their next requests reach the aggregator's repair: still theirs.
    for args in ready {
        run_json(
            "adaptive.py",
            &[args, &["--table", raised.table.as_str()]].concat(),
        );
    }
    let polled = poll(&raised.table, &raised.checkpoint, endpoint(), &[], &[]);
    assert!(
        polled.summary["records_passed_filter"].as_u64() >= Some(2),
        "{}",
        polled.summary
    );
    kept("second", 10_000, 1_000);
    kept("half", 300_000, 60_000);
}

/// Scenarios 2 and 3 against moto with the real client and the real poller,
/// the controller's clock set near moto's (`gpt-4` as above: at most 10x):
/// - an idle resource whose canaries come through scales up, to within 10%
///   of its maximum in three ticks that evaluate;
/// - the built function, invoked with the schedule's event (the system
///   clock, and a wait for its own canaries while the poller runs beside
///   it), evaluates in that one invocation the minute that just ended;
/// - 150% of the estimated capacity, taken by an entity with limits of its
///   own (not governed by the adaptive level), is sensed, and the tick after
///   its minute brings the factor to 1 and the governed bucket to base;
/// - a stalled stream (the poller stopped) goes blind two ticks after the
///   last canary that came through, never loosening meanwhile: factor 1,
///   bucket at base; once the stream is read again the controller sees.
#[test]
fn the_controller_raises_an_idle_resource_and_cuts_on_a_surge_and_when_blind() {
    use zae_table::adaptive::usage::{MINUTE_MS, Minute, minute_of};
    use zae_table::keys;
    use zae_table::store::Store;
    let (table, ns) = client_table("adaptive-cut");
    let (runtime, store) = store(&table);
    apply(&runtime, &store, &ns, ADAPTIVE);
    run_json("adaptive.py", &["touch", "--table", &table]);
    let dir = TempDir::new(&table);
    let checkpoint = dir.file("checkpoint.json");
    let ra = || run_json("adaptive.py", &["params", "--table", &table])["ra"].clone();
    let factor = |t: &Value| t["factor"].as_f64().unwrap();
    let now = || chrono::Utc::now().timestamp_millis();

    // Idle: ticks over the six minutes just gone, with nothing used in them
    // but e's one request (the first two prime the new target).
    let r0 = minute_of(now());
    let evaluated: Vec<f64> = (1..=6)
        .rev()
        .map(|k| sensed_tick(&table, &checkpoint, r0 - k * MINUTE_MS + 5_000))
        .filter(|t| !t["minutes"].as_array().unwrap().is_empty())
        .map(|t| factor(&t))
        .collect();
    assert_eq!(evaluated.len(), 3, "{evaluated:?}");
    assert!(evaluated[2] >= 9.0, "{evaluated:?}");
    let raised = ra().as_i64().unwrap();
    assert!((900_000..=1_000_000).contains(&raised), "{raised}");

    // The Lambda's way: the built function under a local Lambda endpoint,
    // invoked by the schedule's event; it waits for its canaries while the
    // poller (the stream's side) runs beside it.
    let lambda = Lambda::start(
        "aggregator",
        env!("CARGO_BIN_EXE_aggregator"),
        &[("TABLE_NAME", &table)],
        &dir.file("lambda.log"),
    );
    let scheduled = serde_json::json!({
        "version": "0", "id": "tick", "source": "aws.events",
        "detail-type": "Scheduled Event", "detail": {},
        "time": "2026-12-01T00:00:00Z", "region": "us-east-1", "resources": []
    });
    let started = now();
    let invoked = std::thread::spawn(move || lambda.invoke("aggregator", &scheduled));
    while !invoked.is_finished() {
        poll(&table, &checkpoint, endpoint(), &[], &[]);
    }
    let waited = invoked.join().unwrap()["ticks"].clone();
    let ended = now();
    assert!(
        waited["sensed_through"].as_i64().unwrap() >= started,
        "{waited}"
    );
    let minutes = &first_target(&waited)["minutes"];
    assert!(
        minutes
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m[0] == r0 - MINUTE_MS),
        "the minute before the call is evaluated in the call: {waited}"
    );

    // The surge, from an entity the adaptive level does not govern.
    let surge = run_json(
        "adaptive.py",
        &["surge", "--table", &table, "--tokens", "45000"],
    );
    assert_eq!(surge["one_minute"], true, "{surge}");
    let m = surge["minute_ms"].as_i64().unwrap();
    poll(&table, &checkpoint, endpoint(), &[], &[]);
    let pk = keys::pk_adaptive(&ns);
    let item = runtime
        .block_on(store.get(&pk, &keys::sk_adaptive_usage(m, "gpt-4"), true))
        .unwrap()
        .expect("the surge's minute is sensed");
    let sensed = Minute::from_item(&item).unwrap().used["rps"];
    assert!(sensed >= 45_000_000, "{sensed} millitokens");
    // The first tick after its minute (and a canary spacing after the last).
    let mut at = (m + MINUTE_MS + 5_000).max(ended + 31_000);
    let cut = sensed_tick(&table, &checkpoint, at);
    let surged = cut["minutes"].as_array().unwrap();
    assert!(
        surged
            .iter()
            .any(|u| u[0] == m && u[1].as_f64().unwrap() >= 1.5),
        "{cut}"
    );
    assert_eq!(factor(&cut), 1.0, "{cut}");
    assert_eq!(ra(), 100_000);

    // Idle again, raised again; then the poller stops.
    let mut up = 1.0;
    for _ in 0..8 {
        at += MINUTE_MS;
        up = factor(&sensed_tick(&table, &checkpoint, at));
        if up > 2.0 {
            break;
        }
    }
    assert!(up > 2.0, "raised again: {up}");
    let stalled: Vec<Value> = (1..=3)
        .map(|k| control(&table, at + k * MINUTE_MS))
        .collect();
    let blind: Vec<bool> = stalled.iter().map(|t| t["blind"] == true).collect();
    assert_eq!(blind, [false, false, true], "{stalled:?}");
    let factors: Vec<f64> = stalled.iter().map(|t| factor(&first_target(t))).collect();
    assert_eq!(factors, [up, up, 1.0], "{stalled:?}");
    assert_eq!(ra(), 100_000);
    poll(&table, &checkpoint, endpoint(), &[], &[]);
    let seen = control(&table, at + 3 * MINUTE_MS + 1_000);
    assert_eq!(seen["blind"], false, "{seen}");
}

/// `--name` (the stack, whose table has its name), `--endpoint-url` and
/// `--region` in place of the AWS environment's.
#[test]
fn the_table_and_the_endpoint_come_from_the_flags() {
    let (table, _) = client_table("flags");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_aggregator"));
    cmd.args(["control", "-n", &table, "--endpoint-url", endpoint()])
        .args(["--region", "us-east-1", "--once", "--now", "60000"]);
    aws_env(&mut cmd, "http://127.0.0.1:1");
    cmd.env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION");
    let report = control_report_of(cmd.output().expect("run the aggregator"));
    assert_eq!(report["namespaces"], serde_json::json!([]), "{report}");
}

/// The real client's cascade debits a parent only for the limits the parent
/// has: `dev` (rpm and tpm) cascades to `lead` (rpm only), and every tpm
/// token of dev's requests is sensed once, on dev's bucket.
#[test]
fn a_childs_limit_its_parent_does_not_track_is_sensed_once() {
    let table = unique_table("sensor-limits");
    let driven = run_json("adaptive.py", &["cascade-limits", "--table", &table]);
    let namespace = driven["namespace_id"].as_str().unwrap();
    let (sensed, _) = sensed_on_gpt4(&table, namespace, &[("tpm", 100_000), ("rpm", 1_000)]);
    assert_eq!(driven["tpm"], 390, "{driven}");
    assert_eq!(sensed["tpm"], 390_000, "{sensed:?}");
    // rpm: the three requests, each on dev's bucket and copied on lead's.
    assert_eq!(sensed["rpm"], 3_000, "{sensed:?}");
}

/// `rps` on `gpt-4` at `level` (system, resource, or entity `e`'s): a burst
/// of `capacity` tokens and `rate` a second, adaptive; `gpt-4` sized for
/// 30,000 tokens a minute.
fn manifest_at(level: &str, capacity: i64, rate: i64) -> String {
    let limit = format!(
        "{{rps: {{capacity: {capacity}, refill_amount: {rate}, refill_period: 1, adaptive: utilization}}}}"
    );
    let sized = "gpt-4: {estimated_capacity: {rps: 30000}";
    match level {
        "system" => {
            format!("namespace: default\nsystem: {{limits: {limit}}}\nresources: {{{sized}}}}}\n")
        }
        "resource" => format!("namespace: default\nresources: {{{sized}, limits: {limit}}}}}\n"),
        _ => format!(
            "namespace: default\nresources: {{{sized}}}}}\n\
             entities: {{e: {{resources: {{gpt-4: {{limits: {limit}}}}}}}}}\n"
        ),
    }
}

/// A bucket stamped at 5x whose level's capacity then moves, at `level`:
/// - through our apply: at the system or resource level the bucket keeps
///   its capacity (the client's rule), so the apply's restamp puts back the
///   amount it had before its first stamp; at the entity level the apply's
///   sync writes the new parameters and the factor is stamped on them;
/// - through the Python client's `set_system_defaults`,
///   `set_resource_defaults` or `set_limits`: the same, done by the
///   aggregator's repair on the bucket's next request.
fn a_stamp_follows_its_capacity_at(level: &str) {
    use zae_table::adaptive::usage::{self, MINUTE_MS};
    use zae_table::store::{Returns, Store};
    let (table, ns) = client_table(&format!("adaptive-moved-{level}"));
    let (runtime, store) = store(&table);
    apply(&runtime, &store, &ns, &manifest_at(level, 1_000, 100));
    run_json("adaptive.py", &["touch", "--table", &table]);
    let dir = TempDir::new(&table);
    let checkpoint = dir.file("checkpoint.json");
    let ra = || {
        run_json("adaptive.py", &["params", "--table", &table])["ra"]
            .as_i64()
            .unwrap()
    };
    // A day ahead of moto's clock: the client's own traffic lands in other minutes.
    let t0 = (chrono::Utc::now().timestamp_millis() / MINUTE_MS + 24 * 60) * MINUTE_MS;
    for m in 0..6 {
        let used = BTreeMap::from([("rps".to_owned(), 6_000_000)]);
        let minute = t0 + (m - 1) * MINUTE_MS;
        runtime
            .block_on(store.update(&usage::add(&ns, "gpt-4", minute, &used), Returns::Nothing))
            .unwrap();
        sensed_tick(&table, &checkpoint, t0 + m * MINUTE_MS + 5_000);
    }
    assert_eq!(ra(), 500_000, "{level}: 5x of 100 a second");
    // Our apply moves the capacity.
    apply(&runtime, &store, &ns, &manifest_at(level, 2_000, 200));
    let expected = if level == "entity" {
        1_000_000
    } else {
        100_000
    };
    assert_eq!(ra(), expected, "{level}: after our apply");
    apply(&runtime, &store, &ns, &manifest_at(level, 1_000, 100));
    assert_eq!(ra(), 500_000, "{level}: back, and stamped again");
    // The Python client moves it; the bucket's next request is repaired.
    let args = ["set", "--table", &table, "--level", level, "--entity", "e"];
    run_json(
        "adaptive.py",
        &[&args[..], &["--capacity", "3000", "--rate", "300"]].concat(),
    );
    run_json("adaptive.py", &["touch", "--table", &table]);
    poll(&table, &checkpoint, endpoint(), &[], &[]);
    let expected = if level == "entity" {
        1_500_000
    } else {
        100_000
    };
    assert_eq!(ra(), expected, "{level}: after the client's own change");
}

#[test]
fn a_stamp_follows_a_system_capacity_moved_by_apply_or_the_client() {
    a_stamp_follows_its_capacity_at("system");
}

#[test]
fn a_stamp_follows_a_resource_capacity_moved_by_apply_or_the_client() {
    a_stamp_follows_its_capacity_at("resource");
}

#[test]
fn a_stamp_follows_an_entity_capacity_moved_by_apply_or_the_client() {
    a_stamp_follows_its_capacity_at("entity");
}

mod realtime;

// The controller's scenarios need only DynamoDB and Streams (the scheduled
// tick's Lambda is the local Runtime API shim): on DynamoDB Local too.
zae_test_support::also_on_dynamodb_local!(
    the_sensor_counts_each_request_of_a_three_level_cascade_once,
    the_controller_scales_the_real_clients_bucket_and_returns_it_to_base,
    a_callers_own_limits_on_an_adaptive_resource_are_never_scaled,
    the_controller_raises_an_idle_resource_and_cuts_on_a_surge_and_when_blind,
    the_table_and_the_endpoint_come_from_the_flags,
    a_childs_limit_its_parent_does_not_track_is_sensed_once,
    a_stamp_follows_a_resource_capacity_moved_by_apply_or_the_client,
);
