//! `zae-load`: a fixed number of acquires against a table, some at a time,
//! each admitted lease committed at once; one JSON line says how many were
//! admitted, rejected or failed, how long they took and what CPU the
//! process spent. `bin/zae-load.rs` only calls [`main`].

use crate::{Error, LimitConfig, Options, RateLimiter};
use clap::Parser;
use serde::Serialize;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use zae_runtime::aws::Timeouts;
use zae_runtime::cli::Table;

const EXIT_CODES: &str = "\
Exit codes:
  0   the run ended; the JSON line counts admitted, rejected and failed acquires
  1   the limiter could not be opened (no such table, namespace not registered, credentials)
  64  bad command line";

/// Exit code of a bad command line (sysexits' EX_USAGE), as `zae-limits`.
const USAGE: u8 = 64;

#[derive(Parser, Debug)]
#[command(
    name = "zae-load",
    version = zae_runtime::version::long(),
    about = "Acquire from a zae-limiter table at a given concurrency and report admitted, rejected, latency and CPU as one JSON line",
    after_help = EXIT_CODES
)]
pub struct Args {
    #[command(flatten)]
    pub table: Table,
    /// The namespace's name, as registered in the table.
    #[arg(long, short = 'N', value_name = "NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// The entity every request acquires for (the prefix with --entities).
    #[arg(long, value_name = "ENTITY")]
    pub entity: String,
    #[arg(long, value_name = "RESOURCE")]
    pub resource: String,
    /// Whole tokens per request, per limit: `tpm=10,rpm=1`.
    #[arg(long, value_name = "LIMIT=N,...", value_parser = parse_consume)]
    pub consume: Consume,
    /// How many acquires in all.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: u64,
    /// How many acquires in flight at once.
    #[arg(long, value_name = "C", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub concurrency: u64,
    /// Spread the requests round-robin over ENTITY-0 .. ENTITY-{K-1}.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    pub entities: Option<u64>,
    /// The caller's own limits for every acquire (`acquire(limits=...)`),
    /// in place of the stored ones: `rpm=100:100:60,tpm=1000:1000:60:soft`.
    #[arg(long, value_name = "LIMIT=CAPACITY:REFILL:PERIOD_S[:soft],...", value_parser = parse_limits)]
    pub limits: Option<CallerLimits>,
    /// Another resource every acquire takes the same --consume from, in the
    /// same acquire (`acquire(also=...)`); repeatable. Not with --limits,
    /// which 0.17.0 refuses beside `also=`.
    #[arg(long, value_name = "RESOURCE", conflicts_with = "limits")]
    pub also: Vec<String>,
}

/// The caller's limits, as `--limits` gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerLimits(pub Vec<LimitConfig>);

/// `rpm=100:100:60,tpm=1000:1000:60:soft`: plain drips, hard unless
/// `:soft`. The values themselves are judged by the limiter, as with
/// `--consume`.
pub fn parse_limits(text: &str) -> Result<CallerLimits, String> {
    text.split(',')
        .map(parse_limit)
        .collect::<Result<Vec<_>, String>>()
        .map(CallerLimits)
}

fn parse_limit(part: &str) -> Result<LimitConfig, String> {
    let shape = || format!("'{part}' is not LIMIT=CAPACITY:REFILL:PERIOD_S[:soft]");
    let (name, params) = part.split_once('=').ok_or_else(shape)?;
    let fields: Vec<&str> = params.split(':').map(str::trim).collect();
    let soft = match fields.as_slice() {
        [_, _, _] => false,
        [_, _, _, "soft"] => true,
        [_, _, _, other] => return Err(format!("'{part}': '{other}' is not 'soft'")),
        _ => return Err(shape()),
    };
    let number = |what: &str, text: &str| {
        text.parse::<i64>()
            .map_err(|e| format!("'{part}': the {what} is not a whole number ({e})"))
    };
    let mut limit = LimitConfig::drip(
        name.trim(),
        number("capacity", fields[0])?,
        number("refill amount", fields[1])?,
        number("refill period", fields[2])?,
    );
    limit.soft = soft;
    Ok(limit)
}

/// Whole tokens per limit, as `--consume` gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consume(pub Vec<(String, i64)>);

/// `tpm=10,rpm=1`; the limit names and amounts themselves are judged by
/// the limiter (its validation names what it refuses).
pub fn parse_consume(text: &str) -> Result<Consume, String> {
    let parts = text.split(',').map(|part| {
        let (name, amount) = part
            .split_once('=')
            .ok_or_else(|| format!("'{part}' is not LIMIT=N"))?;
        let amount = amount
            .trim()
            .parse::<i64>()
            .map_err(|e| format!("'{part}': the amount is not a whole number ({e})"))?;
        Ok((name.trim().to_owned(), amount))
    });
    parts.collect::<Result<Vec<_>, String>>().map(Consume)
}

/// The JSON line, in the order its fields are printed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    pub admitted: u64,
    pub rejected: u64,
    pub errors: u64,
    /// Milliseconds per request (acquire and commit), nearest rank.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub wall_s: f64,
    /// User and system CPU of this process, since it started; `null` where
    /// `/proc/self/stat` cannot be read.
    pub cpu_s: Option<f64>,
}

pub async fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { USAGE } else { 0 });
        }
    };
    init_logs();
    match run(&args).await {
        Ok(report) => {
            println!("{}", serde_json::to_string(&report).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("zae-load: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Warnings and errors as JSON on stderr (`RUST_LOG` to change), so that
/// stdout holds only the report.
fn init_logs() {
    let level = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
    let subscriber = zae_runtime::telemetry::subscriber(&level, std::io::stderr);
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// Opens the limiter and runs the requests; an error only when the limiter
/// cannot be opened (each request's own error is counted).
pub async fn run(args: &Args) -> Result<Report, Error> {
    let sdk = args.table.sdk_config(Timeouts::default()).await;
    let limiter = RateLimiter::open_with(
        &sdk,
        &args.namespace,
        args.table.table_name(),
        Options::default(),
    )
    .await?;
    let started = Instant::now();
    let tally = drive(limiter, args).await;
    let wall_s = started.elapsed().as_secs_f64();
    if let Some(first) = &tally.first_error {
        eprintln!(
            "zae-load: {} requests failed; the first: {first}",
            tally.errors
        );
    }
    Ok(tally.report(wall_s, process_cpu_s()))
}

/// What the workers saw.
#[derive(Default)]
struct Tally {
    admitted: u64,
    rejected: u64,
    errors: u64,
    latencies_ms: Vec<f64>,
    first_error: Option<String>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.admitted += other.admitted;
        self.rejected += other.rejected;
        self.errors += other.errors;
        self.latencies_ms.extend(other.latencies_ms);
        self.first_error = self.first_error.take().or(other.first_error);
    }

    fn record(&mut self, outcome: Result<bool, String>, ms: f64) {
        self.latencies_ms.push(ms);
        match outcome {
            Ok(true) => self.admitted += 1,
            Ok(false) => self.rejected += 1,
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }

    fn report(mut self, wall_s: f64, cpu_s: Option<f64>) -> Report {
        self.latencies_ms.sort_by(f64::total_cmp);
        Report {
            admitted: self.admitted,
            rejected: self.rejected,
            errors: self.errors,
            p50_ms: round(percentile(&self.latencies_ms, 50), 3),
            p99_ms: round(percentile(&self.latencies_ms, 99), 3),
            wall_s: round(wall_s, 3),
            cpu_s: cpu_s.map(|s| round(s, 2)),
        }
    }
}

/// `concurrency` tasks taking request numbers from one counter until all
/// are taken: tasks, not one polled stream, so that both cores work.
async fn drive(limiter: RateLimiter, args: &Args) -> Tally {
    let next = Arc::new(AtomicU64::new(0));
    let args = Arc::new(Plan::from(args));
    let workers: Vec<_> = (0..args.concurrency)
        .map(|_| {
            tokio::spawn(worker(
                limiter.clone(),
                Arc::clone(&args),
                Arc::clone(&next),
            ))
        })
        .collect();
    let mut tally = Tally::default();
    for joined in futures::future::join_all(workers).await {
        match joined {
            Ok(part) => tally.merge(part),
            Err(e) => tally.record(Err(format!("a worker died: {e}")), 0.0),
        }
    }
    tally
}

/// What every request of the run shares.
struct Plan {
    entity: String,
    resource: String,
    consume: Vec<(String, i64)>,
    requests: u64,
    concurrency: u64,
    entities: Option<u64>,
    limits: Option<Vec<LimitConfig>>,
    also: Vec<String>,
}

impl From<&Args> for Plan {
    fn from(args: &Args) -> Self {
        Plan {
            entity: args.entity.clone(),
            resource: args.resource.clone(),
            consume: args.consume.0.clone(),
            requests: args.requests,
            concurrency: args.concurrency,
            entities: args.entities,
            limits: args.limits.as_ref().map(|l| l.0.clone()),
            also: args.also.clone(),
        }
    }
}

impl Plan {
    /// Request `i`'s entity: round-robin over the K entities when asked.
    fn entity(&self, i: u64) -> String {
        match self.entities {
            Some(k) => format!("{}-{}", self.entity, i % k),
            None => self.entity.clone(),
        }
    }
}

async fn worker(limiter: RateLimiter, plan: Arc<Plan>, next: Arc<AtomicU64>) -> Tally {
    let consume: Vec<(&str, i64)> = plan.consume.iter().map(|(n, a)| (n.as_str(), *a)).collect();
    let mut tally = Tally::default();
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= plan.requests {
            return tally;
        }
        let started = Instant::now();
        let outcome = one(&limiter, &plan, &plan.entity(i), &consume).await;
        tally.record(
            outcome.map_err(|e| e.to_string()),
            started.elapsed().as_secs_f64() * 1000.0,
        );
    }
}

/// One acquire (with the caller's limits, or with the other resources,
/// as the plan says), its lease committed at once: admitted (true),
/// rejected (false) or failed.
async fn one(
    limiter: &RateLimiter,
    plan: &Plan,
    entity: &str,
    consume: &[(&str, i64)],
) -> Result<bool, Error> {
    let resource = plan.resource.as_str();
    let acquired = if !plan.also.is_empty() {
        let parts: Vec<(&str, &[(&str, i64)])> = std::iter::once(resource)
            .chain(plan.also.iter().map(String::as_str))
            .map(|r| (r, consume))
            .collect();
        limiter.acquire_many(entity, &parts, None).await
    } else if let Some(limits) = &plan.limits {
        limiter
            .acquire_with_limits(entity, resource, consume, limits)
            .await
    } else {
        limiter.acquire(entity, resource, consume).await
    };
    match acquired {
        Ok(lease) => lease.commit().await.map(|()| true),
        Err(Error::RateLimitExceeded(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Nearest rank of a sorted sample; 0 for none.
fn percentile(sorted: &[f64], p: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

fn round(value: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (value * scale).round() / scale
}

/// utime + stime of `/proc/self/stat` (every thread of the process), in
/// clock ticks of USER_HZ, which Linux fixes at 100 for user space.
fn process_cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    cpu_from_stat(&stat)
}

fn cpu_from_stat(stat: &str) -> Option<f64> {
    const USER_HZ: f64 = 100.0;
    // The command name (field 2) may hold spaces: count from its ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15; `after` starts at field 3.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consume_parses_limit_amount_pairs_and_names_what_is_wrong() {
        assert_eq!(
            parse_consume("tpm=10,rpm=1"),
            Ok(Consume(vec![("tpm".into(), 10), ("rpm".into(), 1)]))
        );
        assert!(
            parse_consume("tpm")
                .unwrap_err()
                .contains("'tpm' is not LIMIT=N")
        );
        assert!(parse_consume("tpm=x").unwrap_err().contains("'tpm=x'"));
    }

    #[test]
    fn limits_parse_drips_hard_unless_soft() {
        let mut tpm = LimitConfig::drip("tpm", 1000, 500, 60);
        tpm.soft = true;
        assert_eq!(
            parse_limits("rpm=100:100:60, tpm=1000:500:60:soft"),
            Ok(CallerLimits(vec![
                LimitConfig::drip("rpm", 100, 100, 60),
                tpm
            ]))
        );
    }

    #[test]
    fn limits_name_the_part_and_the_field_that_is_wrong() {
        for (text, named) in [
            ("rpm", "'rpm' is not LIMIT=CAPACITY:REFILL:PERIOD_S[:soft]"),
            ("rpm=1:1", "'rpm=1:1' is not LIMIT="),
            ("rpm=1:1:1:1:1", "'rpm=1:1:1:1:1' is not LIMIT="),
            (
                "rpm=x:1:60",
                "'rpm=x:1:60': the capacity is not a whole number",
            ),
            ("rpm=1:y:60", "the refill amount is not a whole number"),
            ("rpm=1:1:z", "the refill period is not a whole number"),
            ("rpm=1:1:60:hard", "'rpm=1:1:60:hard': 'hard' is not 'soft'"),
            ("rpm=1:1:60,", "'' is not LIMIT="),
        ] {
            let error = parse_limits(text).unwrap_err();
            assert!(error.contains(named), "{text}: {error}");
        }
    }

    #[test]
    fn limits_and_also_are_refused_together_naming_both() {
        let base = ["zae-load", "-t", "t", "--entity", "e", "--resource", "r"];
        let rest = ["--consume", "rpm=1", "--requests", "1"];
        let both = ["--limits", "rpm=1:1:60", "--also", "other"];
        let line = base.iter().chain(&rest).chain(&both);
        let error = Args::try_parse_from(line).unwrap_err();
        let text = error.to_string();
        assert!(error.use_stderr(), "{text}");
        assert!(
            text.contains("--also") && text.contains("--limits"),
            "{text}"
        );
        let many = base
            .iter()
            .chain(&rest)
            .chain(&["--also", "a", "--also", "b"]);
        let args = Args::try_parse_from(many).expect("--also twice");
        assert_eq!(args.also, ["a", "b"]);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let sample: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&sample, 50), 50.0);
        assert_eq!(percentile(&sample, 99), 99.0);
        assert_eq!(percentile(&[7.0], 99), 7.0);
        assert_eq!(percentile(&[], 50), 0.0);
    }

    #[test]
    fn cpu_is_utime_plus_stime_past_a_command_name_with_spaces() {
        let stat = "4242 (zae load) S 1 2 3 4 5 6 7 8 9 10 250 130 0 0 20 0 1 0";
        assert_eq!(cpu_from_stat(stat), Some(3.8));
    }

    #[test]
    fn requests_go_round_robin_over_the_entities() {
        let mut plan = Plan {
            entity: "e".into(),
            resource: "r".into(),
            consume: vec![],
            requests: 4,
            concurrency: 1,
            entities: Some(3),
            limits: None,
            also: vec![],
        };
        let names: Vec<String> = (0..4).map(|i| plan.entity(i)).collect();
        assert_eq!(names, ["e-0", "e-1", "e-2", "e-0"]);
        plan.entities = None;
        assert_eq!(plan.entity(3), "e");
    }
}
