//! `utilization` on the in-memory table (the reset's tests are
//! `zae_adaptive::reset`'s): a system `tpm` of 1,000/min with a burst of
//! 10,000, opted in; `r` sized for 100,000/min.

use super::*;
use zae_table::adaptive::usage;
use zae_table::store::{Returns, Store};
use zae_test_support::adaptive::{five_times, stamped, table};

#[tokio::test]
async fn the_status_shows_the_last_complete_minute_the_current_apart_and_the_stamped_amounts() {
    let store = table("ns", 3);
    five_times(&store, "ns", 0).await;
    // A bucket at 5x with the record the controller's stamp leaves.
    store.insert(stamped("ns", "e1", 10_000_000, 5_000_000, 0));
    let now = 1_796_032_805_000;
    let minute = usage::minute_of(now) - 60_000;
    for (m, tokens) in [(minute, 20_000_000), (minute + 60_000, 90_000_000)] {
        let used = [("tpm".to_owned(), tokens)].into();
        store
            .update(&usage::add("ns", "r", m, &used), Returns::Nothing)
            .await
            .unwrap();
    }
    let status = status(&store, "ns", None, now).await.unwrap();
    let t = &status.targets[0];
    assert_eq!(t.minutes, vec![(minute, 20_000.0)]);
    let current = t.current.as_ref().unwrap();
    assert_eq!((current.tokens, current.partial), (90_000.0, true));
    assert_eq!(
        t.utilization,
        Some(0.2),
        "the minute in progress is no utilization"
    );
    assert_eq!((t.factor, t.target_utilization), (5.0, 1.0));
    assert_eq!((t.levels[0].base, t.levels[0].effective), (1_000, 5_000));
    let stamped = t.stamped.as_ref().unwrap();
    // e0 and e2 at base, e1 at 5x.
    assert_eq!(
        (stamped.buckets, stamped.min, stamped.median, stamped.max),
        (3, 1_000.0, 1_000.0, 5_000.0)
    );
    let text = render_status(&status, now);
    for expected in [
        "utilization 20% (last complete minute)",
        "in progress: 90000, partial",
        "base 1000 x 5.00 = 5000",
        "stamped on 3 bucket(s): min 1000, median 1000, max 5000",
    ] {
        assert!(text.contains(expected), "{expected:?} in\n{text}");
    }
}
