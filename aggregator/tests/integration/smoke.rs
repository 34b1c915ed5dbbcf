//! The operators' smoke test, `scripts/smoke.sh`, run as an operator runs it
//! after a deploy, on moto. moto's Lambda needs Docker, so the stack is a
//! stand-in (`tests/harness/smoke_stack.py`): template.yaml's parameters, an
//! output of each of its outputs' names, and a table from its schema,
//! initialised by `zae-limits init` as the stack's `TableInit` would. The
//! built `aggregator` runs beside it as the stack would run it: `poll` as
//! the stream mapping, `control --once` every second as the schedule (every
//! minute on AWS).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use zae_test_support::harness::*;

const AGGREGATOR: &str = env!("CARGO_BIN_EXE_aggregator");

/// `zae-limits`, built beside the aggregator by the workspace's test build.
fn zae_limits() -> PathBuf {
    let path = std::path::Path::new(AGGREGATOR).with_file_name("zae-limits");
    assert!(
        path.exists(),
        "{} is missing: build the workspace's tests (./scripts/test.sh)",
        path.display()
    );
    path
}

/// A process of the stand-in stack, stopped when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The schedule's stand-in: `aggregator control --once` every second on
/// another thread, until dropped.
struct Schedule {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Schedule {
    fn start(table: &str) -> Schedule {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, table) = (Arc::clone(&stop), table.to_owned());
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                let mut cmd = Command::new(AGGREGATOR);
                cmd.args(["control", "--table", &table, "--once"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                aws_env(&mut cmd, moto());
                let _ = cmd.status();
                // The schedule's period, not a wait for a condition.
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        Schedule {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Schedule {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// `scripts/smoke.sh ARGS`, with `env` set on top of moto's AWS
/// environment (or instead of it, with `clear`).
fn smoke(args: &[&str], env: &[(&str, &str)], clear: bool) -> Ran {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("scripts/smoke.sh")).args(args);
    if clear {
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    } else {
        aws_env(&mut cmd, moto());
    }
    cmd.envs(env.iter().copied());
    let started = Instant::now();
    let out = cmd.output().expect("run scripts/smoke.sh");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ran {
        code: out.status.code(),
        stdout: text(&out.stdout),
        stderr: text(&out.stderr),
        took: started.elapsed(),
    }
}

/// A stand-in stack with its table initialised: its name (the table's too).
fn stand_in(name: &str) -> String {
    let stack = unique_table(name);
    run_json(
        "smoke_stack.py",
        &["create", "--stack", &stack, "--table", &stack],
    );
    let mut init = Command::new(zae_limits());
    init.args(["init", "-t", &stack]);
    aws_env(&mut init, moto());
    let out = init.output().expect("run zae-limits init");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stack
}

/// On a working stack the smoke test sees the snapshot, the overdraw event
/// and a tick, cleans up and exits 0. With the aggregator stopped (no
/// poller, no schedule) it exits 1 naming all three.
#[test]
fn smoke_passes_on_a_working_stack_and_names_what_is_missing_when_the_aggregator_stops() {
    let stack = stand_in("smoke");
    let dir = TempDir::new(&stack);
    let limits = zae_limits();
    let limits = limits.to_str().expect("a UTF-8 path");
    let args = [
        "-n",
        &stack,
        "--region",
        "us-east-1",
        "--endpoint-url",
        moto(),
        "--zae-limits",
        limits,
    ];
    let mut poll = Command::new(AGGREGATOR);
    poll.args(["poll", "--table", &stack, "--checkpoint"])
        .arg(dir.file("checkpoint.json"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    aws_env(&mut poll, moto());
    let poller = Running(poll.spawn().expect("start the poller"));
    let schedule = Schedule::start(&stack);

    // One run with `timeout`: its exit code and the lines its output must hold.
    let run = |what: &str, timeout: &str, code: i32, lines: &[&str]| {
        let ran = smoke(&[&args[..], &["--timeout", timeout]].concat(), &[], false);
        let out = &ran.stdout;
        eprintln!("{what} run, {:?}:\n{out}{}", ran.took, ran.stderr);
        assert_eq!(ran.code, Some(code), "{out}{}", ran.stderr);
        for line in lines {
            assert!(out.contains(line), "no {line:?} in:\n{out}");
        }
    };
    let passing = [
        "usage snapshot (hourly",
        ": 3 requests, 180 tpm, 2 of them past the soft limit",
        "overdraw event: limit_overdrawn on tpm",
        "balance -20 of capacity 100",
        "controller tick: at ",
        "its limits, buckets and usage snapshots are deleted",
        "audit events (the client cannot delete them",
        "PASSED in ",
    ];
    run("passing", "30", 0, &passing);

    drop(schedule);
    drop(poller);
    let failing = [
        "usage snapshot: MISSING (no snapshot",
        "overdraw event: MISSING",
        "controller tick: MISSING (no tick since the start",
        "FAILED: missing the usage snapshot, the limit_overdrawn event, a controller tick",
        "its limits, buckets and usage snapshots are deleted",
        "an aggregator that catches up later still writes",
    ];
    run("failing", "3", 1, &failing);
}

/// A stack that does not exist, one that is not ours, no credentials, no
/// region: exit 2 and one line saying which.
#[test]
fn smoke_refuses_a_missing_stack_a_foreign_stack_and_missing_credentials() {
    let foreign = unique_table("smoke-foreign");
    run_json("smoke_stack.py", &["foreign", "--stack", &foreign]);
    let at = ["--endpoint-url", moto()];
    let refused = |args: &[&str], env: &[(&str, &str)], clear: bool, says: &str| {
        let ran = smoke(args, env, clear);
        assert_eq!(ran.code, Some(2), "{args:?}: {}{}", ran.stdout, ran.stderr);
        assert!(
            ran.stderr.contains(says),
            "{args:?}: no {says:?} in {}",
            ran.stderr
        );
    };
    refused(
        &[&["-n", "no-such-stack"][..], &at].concat(),
        &[],
        false,
        "stack 'no-such-stack' does not exist in us-east-1",
    );
    refused(
        &[&["-n", &foreign][..], &at].concat(),
        &[],
        false,
        "is not one of this repository's template.yaml: it has no output TableName",
    );
    // No keys, no profile, no instance role (the metadata service is off).
    let bare = [
        ("HOME", "/nonexistent"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AWS_REGION", "us-east-1"),
    ];
    refused(
        &[&["-n", &foreign][..], &at].concat(),
        &bare,
        true,
        "no AWS credentials found",
    );
    refused(
        &[&["-n", &foreign][..], &at].concat(),
        &bare[..2],
        true,
        "no AWS region: pass --region",
    );
}
