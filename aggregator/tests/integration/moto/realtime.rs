//! The refill pass's end-to-end tests bound by the wall clock: the real
//! client's steady traffic over real seconds, the built binary under the
//! Lambda stand-in fed every second, bounds measured against single-threaded
//! moto's pace. The full test tier runs them one at a time; their
//! counterparts without the wait are in the default tier
//! (`moto::a_refill_is_what_the_real_clients_next_fast_path_spends`, and
//! `write::refill::tests` on the in-memory twin).

use super::*;

/// A steady workload of the real client (three entities, 5 one-token
/// acquires a second each, under a 20/s limit with a burst of 15), the
/// stream fed to the built binary under the Lambda stand-in every second,
/// against the same workload with no aggregator. The refill pass keeps the
/// stored balances ahead of the fast path, so the client falls back to its
/// slow path (a refused conditional write, then reads) far less often. The
/// long comparison, the reference aggregator included, is
/// `scripts/bench_slow_paths.sh`.
#[test]
fn refills_spare_the_real_client_most_of_its_slow_paths() {
    let run = |mode: &str| {
        run_json(
            "slow_paths.py",
            &[
                "run",
                "--mode",
                mode,
                "--seconds",
                "10",
                // Below moto's pace: one single-threaded moto serves an
                // acquire in about 27 ms here, so the default 3 x 15/s
                // saturates it, the stream lags by seconds, and a 40-token
                // burst drains between two batches whoever refills it.
                "--rate",
                "5",
                "--burst",
                "15",
                "--aggregator",
                env!("CARGO_BIN_EXE_aggregator"),
            ],
        )
    };
    let none = run("none");
    let ours = run("ours");
    for r in [&none, &ours] {
        assert_eq!(
            r["admitted"].as_u64().unwrap() + r["rejected"].as_u64().unwrap(),
            r["requests"].as_u64().unwrap()
        );
    }
    assert_eq!(none["fed"]["refills"], 0);
    assert!(ours["fed"]["refills"].as_u64() > Some(0), "{ours}");
    assert_eq!(ours["fed"]["errors"], 0, "{ours}");
    let slow = |r: &Value| r["slow_paths"].as_u64().unwrap();
    assert!(
        slow(&ours) * 4 <= slow(&none) * 3,
        "ours {} vs none {}:\n{ours}\n{none}",
        slow(&ours),
        slow(&none)
    );
}

/// The aggregator's clock 10 s ahead of its client's, then 10 s behind
/// (`ZAE_CLOCK_SKEW_MS`), under one entity asking a little more than its
/// limit refills: the real client is admitted what it is without skew (all
/// of it, here), because a refill never stamps `rf` past the newest image's
/// own time. Without that bound, an `rf` in the client's future made its
/// slow paths credit nothing until its clock caught up: about 100 of 250
/// requests admitted at +10 s (123 at +1 s, 92 at +100 s). Behind, our
/// refills credit nothing and the client refills itself.
#[test]
fn a_refill_never_stamps_rf_past_the_tables_clock() {
    for skew in ["10000", "-10000"] {
        let run = run_json(
            "slow_paths.py",
            &[
                "run",
                "--mode",
                "ours",
                "--seconds",
                "10",
                "--entities",
                "1",
                "--rate",
                "25",
                "--burst",
                "15",
                "--skew-ms",
                skew,
                "--aggregator",
                env!("CARGO_BIN_EXE_aggregator"),
            ],
        );
        let (admitted, requests) = (
            run["admitted"].as_u64().unwrap(),
            run["requests"].as_u64().unwrap(),
        );
        assert!(admitted * 100 >= requests * 95, "skew {skew} ms: {run}");
        assert_eq!(run["fed"]["errors"], 0, "{run}");
    }
}
