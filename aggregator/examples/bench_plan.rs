//! Parse + aggregate throughput on one core, I/O stubbed. Input: the
//! 100-record batch recorded from the real client
//! (`tests/fixtures/lambda_event_sample.json`), as recorded and as the event
//! source mapping's filter passes it (bucket records only). Each is planned
//! in repeated batches; the best of several runs is reported, since a shared
//! 2-core machine adds noise only upwards.
//! Run: `taskset -c 0 cargo run --release -p zae-aggregator --example bench_plan`.

use std::time::Instant;
use zae_aggregator::plan::plan_batch;
use zae_aggregator::poll::filter::Filter;
use zae_table::Window;

const ROUNDS: usize = 2_000;
const RUNS: usize = 5;

fn records_per_second(batch: &[String]) -> f64 {
    (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            let mut updates = 0;
            for _ in 0..ROUNDS {
                updates += plan_batch(batch, &[Window::Hourly, Window::Daily])
                    .snapshots
                    .len();
            }
            assert!(updates > 0);
            (ROUNDS * batch.len()) as f64 / start.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

fn main() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/lambda_event_sample.json"
    ))
    .expect("fixture");
    let event: serde_json::Value = serde_json::from_str(&text).expect("fixture JSON");
    let records = event["Records"].as_array().expect("Records");
    let recorded: Vec<String> = records.iter().map(|r| r.to_string()).collect();
    let filter = Filter::event_source_mapping(false);
    let filtered: Vec<String> = records
        .iter()
        .filter(|r| filter.matches(r))
        .map(|r| r.to_string())
        .collect();
    for (name, batch) in [
        ("recorded batch (all records)", &recorded),
        ("after the filter (bucket records)", &filtered),
    ] {
        println!(
            "{{\"input\": \"{name}\", \"records_per_batch\": {}, \"batches\": {ROUNDS}, \"best_of\": {RUNS}, \"records_per_second\": {:.0}}}",
            batch.len(),
            records_per_second(batch)
        );
    }
}
