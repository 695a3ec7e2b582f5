//! The HTTP server under the API: accepts connections up to a cap (and a cap per peer
//! address), closes a connection whose request head does not arrive within the
//! header-read timeout or whose answer its client does not read within the write timeout,
//! keeps a few connections in reserve for the health paths, and stops gracefully. axum's
//! own `serve` has none of these bounds, so a client holding thousands of silent
//! connections, or asking for answers it never reads, could exhaust vigil's file
//! descriptors — and a flood that fills the cap would make Kubernetes restart vigil if
//! `/healthz` could not be answered.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tracing::{debug, warn};

/// The default of `VIGIL_API_MAX_CONNECTIONS`.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 4096;

/// The default of `VIGIL_API_MAX_EVENT_STREAMS`.
pub const DEFAULT_MAX_EVENT_STREAMS: u32 = 256;

/// The default of `VIGIL_API_HEADER_READ_TIMEOUT`, in seconds.
pub const DEFAULT_HEADER_READ_TIMEOUT_SECS: u32 = 10;

/// The default of `VIGIL_API_WRITE_TIMEOUT`, in seconds.
pub const DEFAULT_WRITE_TIMEOUT_SECS: u32 = 30;

/// The default of `VIGIL_API_MAX_CONNECTIONS_PER_PEER`.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: u32 = 1024;

/// Connections kept beyond the cap for the health paths (`/healthz`, `/readyz`): when the
/// cap (or a peer's) is reached, a new connection may still ask for them — one request,
/// then it is closed; any other path is answered 503.
pub const HEALTH_RESERVE: u32 = 16;

/// Reserved connections one peer address may hold at once: a flood from one address
/// cannot take the reserve from the kubelet.
const HEALTH_RESERVE_PER_PEER: u32 = 2;

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
    /// How long an answer may wait for its client to read it (`VIGIL_API_WRITE_TIMEOUT`):
    /// a connection whose writes make no progress for that long is closed. An event
    /// stream whose client stops reading too.
    pub write_timeout: Duration,
    /// Open connections from one peer address at most (`VIGIL_API_MAX_CONNECTIONS_PER_PEER`;
    /// 0: no cap). Behind a proxy or an Ingress every client is that one peer.
    pub max_connections_per_peer: u32,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_event_streams: DEFAULT_MAX_EVENT_STREAMS,
            header_read_timeout: Duration::from_secs(u64::from(DEFAULT_HEADER_READ_TIMEOUT_SECS)),
            write_timeout: Duration::from_secs(u64::from(DEFAULT_WRITE_TIMEOUT_SECS)),
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
        }
    }
}

/// Connections open per peer address.
#[derive(Default)]
struct Peers(Mutex<HashMap<IpAddr, u32>>);

impl Peers {
    /// Counts one more connection of `peer` if it has fewer than `cap` (0: no cap).
    fn enter(self: &Arc<Self>, peer: IpAddr, cap: u32) -> Option<PeerSlot> {
        let mut open = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = open.entry(peer).or_insert(0);
        if cap != 0 && *count >= cap {
            return None;
        }
        *count += 1;
        Some(PeerSlot {
            peers: Arc::clone(self),
            peer,
        })
    }
}

/// One connection of a peer, counted until dropped.
struct PeerSlot {
    peers: Arc<Peers>,
    peer: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self
            .peers
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.peer) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.peer);
            }
        }
    }
}

/// A connection whose writes fail once they have made no progress for `timeout`: an
/// answer its client does not read is dropped rather than held.
struct WriteDeadline {
    stream: TcpStream,
    timeout: Duration,
    /// Armed while a write waits.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl WriteDeadline {
    fn new(stream: TcpStream, timeout: Duration) -> Self {
        Self {
            stream,
            timeout,
            stalled: None,
        }
    }

    /// After a write that would wait: arms the deadline (once per stall) and fails when it
    /// has passed.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        let timeout = self.timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client read nothing of the answer within the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for WriteDeadline {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.stream).poll_write(cx, buf) {
            Poll::Pending => self.pending(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.stream).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.pending(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match Pin::new(&mut self.stream).poll_flush(cx) {
            Poll::Pending => self.pending(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Whether `path` is one of the health paths the reserve serves.
fn is_health_path(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz")
}

/// The reserve's answer to anything but the health paths: 503, and the connection closes.
async fn health_only(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    if is_health_path(request.uri().path()) {
        return next.run(request).await;
    }
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        [
            (axum::http::header::RETRY_AFTER, "1"),
            (axum::http::header::CONNECTION, "close"),
        ],
        "vigil's REST API is at its connection cap (VIGIL_API_MAX_CONNECTIONS, or this peer's: VIGIL_API_MAX_CONNECTIONS_PER_PEER); only /healthz and /readyz are answered\n",
    )
        .into_response()
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
    let reserve_capacity = usize::try_from(HEALTH_RESERVE).unwrap_or(usize::MAX);
    let reserve = Arc::new(Semaphore::new(reserve_capacity));
    let peers = Arc::new(Peers::default());
    let reserve_peers = Arc::new(Peers::default());
    let health_app = app.clone().layer(axum::middleware::from_fn(health_only));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    // The reserve's connections serve one request each.
    let mut reserve_builder = builder.clone();
    reserve_builder.keep_alive(false);
    let builder = Arc::new(builder);
    let reserve_builder = Arc::new(reserve_builder);
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
        // A slot under the cap and the peer's, else one of the reserve for the health
        // paths, else the connection is closed.
        let admitted = peers
            .enter(peer.ip(), limits.max_connections_per_peer)
            .and_then(|peer_slot| {
                let slot = Arc::clone(&slots).try_acquire_owned().ok()?;
                Some((slot, peer_slot, false))
            })
            .or_else(|| {
                let peer_slot = reserve_peers.enter(peer.ip(), HEALTH_RESERVE_PER_PEER)?;
                let slot = Arc::clone(&reserve).try_acquire_owned().ok()?;
                Some((slot, peer_slot, true))
            });
        let Some((slot, peer_slot, reserved)) = admitted else {
            if !at_cap {
                warn!(
                    max = limits.max_connections,
                    per_peer = limits.max_connections_per_peer,
                    "the REST API is at its connection cap (VIGIL_API_MAX_CONNECTIONS, or a \
                     peer's: VIGIL_API_MAX_CONNECTIONS_PER_PEER) and its reserve for the \
                     health paths is taken: new connections are closed until some end"
                );
                at_cap = true;
            }
            drop(stream);
            continue;
        };
        if !reserved {
            at_cap = false;
        }
        let _ = stream.set_nodelay(true);
        let (service, builder) = if reserved {
            (
                TowerToHyperService::new(health_app.clone()),
                Arc::clone(&reserve_builder),
            )
        } else {
            (TowerToHyperService::new(app.clone()), Arc::clone(&builder))
        };
        let stream = WriteDeadline::new(stream, limits.write_timeout);
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let _peer_slot = peer_slot;
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
    let _ = reserve.acquire_many(HEALTH_RESERVE).await;
}
