//! The HTTP server under the API: accepts connections up to a cap, closes a connection
//! whose request head does not arrive within the header-read timeout, and stops
//! gracefully. axum's own `serve` has neither bound, so a client holding thousands of
//! silent connections could exhaust vigil's file descriptors.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tracing::{debug, warn};

/// The default of `VIGIL_API_MAX_CONNECTIONS`.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 4096;

/// The default of `VIGIL_API_MAX_EVENT_STREAMS`.
pub const DEFAULT_MAX_EVENT_STREAMS: u32 = 256;

/// The default of `VIGIL_API_HEADER_READ_TIMEOUT`, in seconds.
pub const DEFAULT_HEADER_READ_TIMEOUT_SECS: u32 = 10;

/// The fewest connections a lowered default cap keeps, so that an operator can still
/// reach `/healthz` and the API on a host with few file descriptors.
pub const MIN_CONNECTIONS: u32 = 16;

/// How long the accept loop waits after a failed `accept` (out of file descriptors, say)
/// before trying again: without a pause it would spin on the same error.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The bounds of the HTTP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Open connections at most (`VIGIL_API_MAX_CONNECTIONS`); a connection beyond it is
    /// closed as soon as it is accepted.
    pub max_connections: u32,
    /// Event streams open at once at most (`VIGIL_API_MAX_EVENT_STREAMS`); one more is
    /// answered 503 with `Retry-After`. Each stream is also a connection.
    pub max_event_streams: u32,
    /// How long a connection may take to send a request head, its first or the next one
    /// on a kept-alive connection (`VIGIL_API_HEADER_READ_TIMEOUT`).
    pub header_read_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_event_streams: DEFAULT_MAX_EVENT_STREAMS,
            header_read_timeout: Duration::from_secs(u64::from(DEFAULT_HEADER_READ_TIMEOUT_SECS)),
        }
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` resolves; then stops
/// accepting, asks every open connection to finish its request in flight and close, and
/// returns once all have closed. (Event streams never finish by themselves: the caller
/// bounds the wait.)
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()>,
) {
    let capacity = usize::try_from(limits.max_connections.max(1)).unwrap_or(usize::MAX);
    let slots = Arc::new(Semaphore::new(capacity));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let builder = Arc::new(builder);
    // Whether the cap turned a connection away since the last one was accepted: one
    // warning per episode, not one per connection.
    let mut at_cap = false;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                warn!(%error, "the REST API could not accept a connection");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            if !at_cap {
                warn!(
                    max = limits.max_connections,
                    "the REST API is at its connection cap (VIGIL_API_MAX_CONNECTIONS): \
                     new connections are closed until some end"
                );
                at_cap = true;
            }
            drop(stream);
            continue;
        };
        at_cap = false;
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let builder = Arc::clone(&builder);
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            let stopping = async {
                let _ = stop.wait_for(|stop| *stop).await;
            };
            tokio::pin!(stopping);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = &mut stopping => {
                    connection.as_mut().graceful_shutdown();
                    connection.as_mut().await
                }
            };
            if let Err(error) = result {
                // A client that went away or never sent a head (header-read timeout).
                debug!(%peer, %error, "API connection ended");
            }
            drop(slot);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds one slot: all of them back means all have closed.
    let _ = slots
        .acquire_many(u32::try_from(capacity).unwrap_or(u32::MAX))
        .await;
}
