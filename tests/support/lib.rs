//! Test-only code every crate's tests share (a dev-dependency only; nothing
//! shipped links it): the in-memory twin of the table ([`memory`]), faults
//! injected around it ([`faults`]) and the stream DynamoDB would emit for its
//! writes ([`stream`]); the end-to-end harness ([`harness`]: the test venv's
//! Python, one moto or DynamoDB Local per test run, unique table names, the
//! built binaries); the provisioner's seeded table ([`provisioner`]) and its
//! end-to-end tests' helpers ([`limits`]); a namespace with one adaptive
//! target ([`adaptive`]); and the EMF validator ([`emf`]).

pub mod adaptive;
pub mod emf;
pub mod faults;
pub mod harness;
pub mod limits;
pub mod memory;
pub mod provisioner;
pub mod stream;

/// Cases per property test: `default` in the test command, `ZAE_FUZZ_CASES`
/// in the long run (`scripts/fuzz.sh`).
pub fn fuzz_cases(default: u32) -> u32 {
    std::env::var("ZAE_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// Runs a store future to its end on this thread: the twin waits for
/// nothing but a transaction's one yield, so its unit tests need no runtime.
#[cfg(test)]
pub(crate) fn block<F: std::future::Future>(future: F) -> F::Output {
    let waker = std::task::Waker::noop();
    let mut context = std::task::Context::from_waker(waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
    }
}
