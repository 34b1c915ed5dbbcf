//! The aggregator's integration tests, in one binary: each test binary links
//! the whole SDK, so one binary instead of nine saves their links on every
//! rebuild (docs/testing.md has the figures). Each module was a test file
//! of its own and keeps its name.
//!
//! - Models and oracles, no network: `adaptive_stream`, `controller_model`,
//!   `refill_accrual`, `refill_model`, `schedule_oracle` (against the
//!   client's own Python code), `shard_model`.
//! - The built binaries: `cli`; on moto with the real 0.17.0 client,
//!   `moto`, `moto_adaptive`, `smoke` (the operators' smoke test,
//!   `scripts/smoke.sh`, on a stand-in stack) and `client_side_by_side`
//!   (Python and Rust clients on one bucket, then the aggregator; with a
//!   quota, a schedule and a window in `client_side_by_side_limits`), and
//!   `usage_read` (the snapshots it wrote, read by both clients). The tests bound by the wall
//!   clock (real traffic over real seconds, measured against moto's pace)
//!   are in their `realtime` modules: the default test tier leaves them out
//!   and the full tier runs them one at a time (`.config/nextest.toml`).

mod adaptive_stream;
mod cli;
mod client_side_by_side;
mod client_side_by_side_limits;
mod common;
mod controller_model;
mod hostile;
mod moto;
mod moto_adaptive;
mod refill_accrual;
mod refill_model;
mod schedule_oracle;
mod shard_model;
mod smoke;
mod usage_read;
