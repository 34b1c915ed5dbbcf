//! Parse + aggregate throughput on one core, I/O stubbed: the recorded client
//! batch (`tests/fixtures/lambda_event_sample.json`) planned in batches of 100,
//! repeated. Run: `cargo run --release -p zae-aggregator --example bench_plan`.

use std::time::Instant;
use zae_aggregator::plan::plan_batch;
use zae_table::Window;

fn main() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/lambda_event_sample.json"))
        .expect("fixture");
    let event: serde_json::Value = serde_json::from_str(&text).expect("fixture JSON");
    let batch: Vec<String> = event["Records"].as_array().expect("Records").iter().map(|r| r.to_string()).collect();
    let bucket_records = plan_batch(&batch, &[Window::Hourly]).bucket_records;
    let rounds = 2_000;
    let mut snapshots = 0;
    let start = Instant::now();
    for _ in 0..rounds {
        snapshots += plan_batch(&batch, &[Window::Hourly, Window::Daily]).snapshots.len();
    }
    let secs = start.elapsed().as_secs_f64();
    let records = (rounds * batch.len()) as f64;
    println!(
        "{{\"records\": {records}, \"bucket_records_per_batch\": {bucket_records}, \"seconds\": {secs:.3}, \
         \"records_per_second\": {:.0}, \"snapshot_updates\": {snapshots}}}",
        records / secs
    );
}
