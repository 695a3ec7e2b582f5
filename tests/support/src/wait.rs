//! Waiting on a condition with a deadline: the one place where the tests' code sleeps.
//!
//! A test never sleeps to let something happen; it polls what would show that it
//! happened (a row, a log line, a request counted by a fake server) until a deadline,
//! and fails naming what it waited for. An absence ("nothing more was sent") is shown the
//! same way, by waiting for a positive witness that enough time passed (N more probes or
//! re-posts counted), never by sleeping.

use std::time::{Duration, Instant};

/// How often a condition is polled.
pub const POLL: Duration = Duration::from_millis(20);

/// Polls `check` until it returns `Some`, from a thread that may block (a `#[test]`).
/// Panics past `timeout`, naming `what` and adding `context()` (a log's tail, say).
pub fn until<T>(
    what: &str,
    timeout: Duration,
    mut context: impl FnMut() -> String,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "gave up after {timeout:?} waiting until {what}\n{}",
            context()
        );
        std::thread::sleep(POLL);
    }
}

/// [`until`] for a condition that is only true or false.
pub fn until_true(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    until(what, timeout, String::new, || check().then_some(()));
}

/// Polls `check` until it returns `Some`, from async code (the runtime keeps serving
/// what the test started on it, a fake cluster, say, between polls). Panics past
/// `timeout`, naming `what` and adding `context()`.
pub async fn until_async<T>(
    what: &str,
    timeout: Duration,
    mut context: impl FnMut() -> String,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "gave up after {timeout:?} waiting until {what}\n{}",
            context()
        );
        tokio::time::sleep(POLL).await;
    }
}

/// [`until_async`] for a condition that is only true or false.
pub async fn until_async_true(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    until_async(what, timeout, String::new, async || {
        check().await.then_some(())
    })
    .await;
}

/// [`until_async`], polling every `every` instead of every [`POLL`]: for a check that
/// costs (a query over a thousand rows) beside processes whose timing a test measures.
pub async fn until_async_every<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut context: impl FnMut() -> String,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "gave up after {timeout:?} waiting until {what}\n{}",
            context()
        );
        tokio::time::sleep(every).await;
    }
}
