//! Egress: where one call's HTTP requests may go, and the client that sends them.
//!
//! Two doors lead out of a plugin, and both go through [`Egress`]: the contract's `http`
//! interface (per-request TLS material, for kubeconfigs' mutual TLS and bearer tokens) and
//! the standard `wasi:http` outgoing handler (for authors using ordinary `wasi:http`
//! crates), whose every request reaches [`Egress`] through wasmtime-wasi-http's
//! [`WasiHttpHooks::send_request`]. Each request is checked against the same grant and the
//! same destinations, bounded by what is left of the call's budget, sent over a fresh
//! connection by the same client, and recorded the same way: a request to the cluster
//! counts as having talked to it, a cluster request that times out or answers 401/403 is
//! remembered for the outcome mapping.
//!
//! Two operator rules bound where a caller who registers clusters can make vigil go.
//! Every address a cluster request is about to connect to, after name resolution, must be
//! inside `VIGIL_REGISTRATION_ALLOW` ([`AddressRule`]). And a credential served in the
//! call — a credential parameter, or the kubeconfig's token, client key or a file of its
//! context — goes only to the hosts it is bound to: a parameter's to those its plugin's
//! `credential-hosts` names, a kubeconfig's to its own server. A request carrying one
//! (in a header, the URL, the body, or as the TLS client identity) is refused before any
//! connection unless the host it dials, its `Host` header and its TLS server name are all
//! bound. Neither refusal is the cluster's fault: the call records it as reference
//! material that cannot be used, so the cluster is `not-probeable`, never failed.
//!
//! What a call can make the host hold is bounded: [`MAX_WASI_HTTP_IN_FLIGHT`] `wasi:http`
//! requests at once, [`MAX_BUFFERED_BYTES_PER_CALL`] bytes of bodies held at once over both
//! doors, [`MAX_DENIED_RECORDED`] denied destinations in the record. Refusals (denied
//! requests, requests past a bound, refused credentials calls) are counted and logged once
//! per call, as one summary line when the call ends.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Uri};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use sha2::{Digest, Sha256};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsConnector;
use tracing::{debug, warn};
use wasmtime_wasi_http::{RequestOptions, WasiBody, WasiHttpHooks};

use super::contract::{HttpError, HttpRequest, HttpResponse, TlsOptions};
use super::manifest::{CredentialSource, Manifest};
use super::sandbox::{CallCluster, CallRecord, CallState, MAX_CREDENTIAL_FILE_BYTES};
use vigil_domain::address_rule::{self, AddressRule};
use vigil_domain::reference::{ConnectionMaterial, Material, Reference};
use vigil_domain::tls::{self, TlsClients, TlsError, Trust};

/// The largest response body handed to a plugin; a bigger one is `too-large`.
pub const MAX_RESPONSE_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The largest request body a plugin may send through `wasi:http` (a probe sends little;
/// the bound keeps a guest from making the host buffer without end).
pub const MAX_REQUEST_BODY_BYTES: usize = 1024 * 1024;

/// The shortest bound a plugin may put on a cluster request (`timeout-ms`, or `wasi:http`'s
/// connect and first-byte timeouts) for a timeout under it to count as the cluster's. A
/// plugin that waits less than this, and less than what is left of the probe's budget, has
/// shortened the wait itself: the timeout is its own, never the cluster's.
pub const MIN_CLUSTER_REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// The most `wasi:http` requests one call may have in flight (sent and not yet answered
/// in full); one more fails at once with `internal-error` instead of opening another
/// connection. The contract's `http` sends one request at a time by its nature.
pub const MAX_WASI_HTTP_IN_FLIGHT: usize = 8;

/// The most body bytes the host holds at once for one call, requests and responses of
/// both doors together (a `wasi:http` response counts until the plugin has read or
/// dropped it). A body that would pass it fails as too large; room for one request and
/// response of the largest sizes is always there.
pub const MAX_BUFFERED_BYTES_PER_CALL: usize = 8 * 1024 * 1024;

/// The most distinct denied destinations a call's record keeps (the count goes on).
pub const MAX_DENIED_RECORDED: usize = 16;

/// The longest detail a refusal summary quotes (a host name, a parameter name).
const MAX_REFUSAL_DETAIL_BYTES: usize = 256;

/// A host and port a request may go to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Destination {
    host: String,
    /// `None` allows any port (an `allowed-hosts` entry without one).
    port: Option<u16>,
}

impl Destination {
    /// Reads `host` or `host:port` (an IPv6 address in brackets or not).
    fn parse(entry: &str) -> Self {
        let entry = entry.trim();
        let (host, port) = match entry.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(':') => match port.parse() {
                Ok(port) => (host, Some(port)),
                Err(_) => (entry, None),
            },
            _ => (entry, None),
        };
        Self {
            host: host.trim_matches(['[', ']']).to_ascii_lowercase(),
            port,
        }
    }

    fn matches(&self, host: &str, port: u16) -> bool {
        self.host.eq_ignore_ascii_case(host) && self.port.is_none_or(|p| p == port)
    }
}

/// Credentials shorter than this are recognised in a request only as a whole header value
/// or a whole word of one, so that a short value does not match every text it happens to
/// occur in.
const MIN_MATCHED_CREDENTIAL: usize = 8;

/// A credential served in this call, and the hosts it may be sent to.
#[derive(Clone)]
struct HeldCredential {
    /// What it is, for messages: `parameter header.Authorization`, `a credential of the
    /// kubeconfig`.
    what: String,
    /// The value, without surrounding white space (a token file's final newline).
    value: Arc<[u8]>,
    /// Where it may go; empty: nowhere.
    bound: Vec<Destination>,
}

impl std::fmt::Debug for HeldCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldCredential")
            .field("what", &self.what)
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

impl HeldCredential {
    /// Whether one of `texts` (header values, the request target, the body) carries the
    /// value.
    fn carried_by(&self, texts: &[&[u8]]) -> bool {
        let value = &*self.value;
        texts.iter().any(|text| {
            if value.len() >= MIN_MATCHED_CREDENTIAL {
                text.windows(value.len()).any(|w| w == value)
            } else {
                *text == value
                    || text
                        .split(u8::is_ascii_whitespace)
                        .any(|word| word == value)
            }
        })
    }

    /// Whether the value may be sent to `host:port`.
    fn allows(&self, host: &str, port: u16) -> bool {
        self.bound.iter().any(|d| d.matches(host, port))
    }

    /// Whether a request bound to it may show its server the name `name` (its `Host`
    /// header, its TLS server name).
    fn allows_name(&self, name: &str) -> bool {
        self.bound.iter().any(|d| d.host.eq_ignore_ascii_case(name))
    }
}

/// What a request shows of itself, for the credential bindings.
struct Shown<'a> {
    host: &'a str,
    port: u16,
    headers: &'a HeaderMap,
    target: &'a str,
    body: &'a [u8],
    /// The TLS server name, for `https`.
    server_name: Option<&'a str>,
    /// The TLS client certificate and key, for the contract's `http`.
    identity: [Option<&'a [u8]>; 2],
}

/// Why a request carrying a credential may not go where it goes; `None` when it carries
/// none, or every one it carries is bound to the host it dials, its `Host` header and its
/// TLS server name.
fn binding_refusal(held: &[HeldCredential], shown: &Shown<'_>) -> Option<String> {
    if held.is_empty() {
        return None;
    }
    let mut texts: Vec<&[u8]> = shown.headers.values().map(HeaderValue::as_bytes).collect();
    texts.push(shown.target.as_bytes());
    texts.push(shown.body);
    texts.extend(shown.identity.iter().flatten().copied());
    let host_header = shown
        .headers
        .get(hyper::header::HOST)
        .and_then(|value| value.to_str().ok())
        .map(|value| {
            let named = Destination::parse(value);
            named.host
        });
    for credential in held.iter().filter(|h| h.carried_by(&texts)) {
        let refused = if !credential.allows(shown.host, shown.port) {
            Some(format!("{}:{}", shown.host, shown.port))
        } else if let Some(name) = host_header
            .as_deref()
            .filter(|n| !credential.allows_name(n))
        {
            Some(format!("Host {name}"))
        } else {
            shown
                .server_name
                .filter(|n| !credential.allows_name(n))
                .map(|name| format!("TLS server name {name}"))
        };
        if let Some(refused) = refused {
            return Some(format!(
                "{} is not bound to {refused}: vigil sends a credential parameter only to the hosts \
                 credential-hosts in the plugin's NAME.toml binds it to, and a kubeconfig's credentials \
                 only to its server",
                credential.what
            ));
        }
    }
    None
}

/// Where a kubeconfig's credentials may go: its server, and the name its certificate is
/// checked against.
fn material_binding(material: &ConnectionMaterial) -> Vec<Destination> {
    let mut bound = Vec::new();
    if let Some((host, port)) = material
        .server
        .parse::<Uri>()
        .ok()
        .as_ref()
        .and_then(host_port)
    {
        bound.push(Destination {
            host,
            port: Some(port),
        });
    }
    if let Some(name) = &material.tls_server_name {
        bound.push(Destination {
            host: name.to_ascii_lowercase(),
            port: None,
        });
    }
    bound
}

/// Where one call's requests may go. Cluster destinations (the recorded endpoint, the
/// host of an `http(s)://` reference, the servers of credentials served in this call)
/// count as talking to the cluster; the plugin's `allowed-hosts` never do.
#[derive(Debug, Clone, Default)]
pub(crate) struct EgressPolicy {
    cluster: Vec<Destination>,
    extra: Vec<Destination>,
}

/// Whether a destination is the cluster's or an extra.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Cluster,
    Extra,
}

impl EgressPolicy {
    pub(crate) fn new(allowed_hosts: &[String], cluster: Option<&CallCluster>) -> Self {
        let mut policy = Self::default();
        for entry in allowed_hosts {
            policy.extra.push(Destination::parse(entry));
        }
        if let Some(cluster) = cluster {
            policy.add_cluster_url(&cluster.endpoint);
            if let Reference::Http { url } = &cluster.reference {
                policy.add_cluster_url(url);
            }
        }
        policy
    }

    /// Allows the host and port of `url` as the cluster's.
    pub(crate) fn add_cluster_url(&mut self, url: &str) {
        if let Some((host, port)) = url.parse::<Uri>().ok().as_ref().and_then(host_port) {
            let destination = Destination {
                host,
                port: Some(port),
            };
            if !self.cluster.contains(&destination) {
                self.cluster.push(destination);
            }
        }
    }

    fn route(&self, host: &str, port: u16) -> Option<Route> {
        if self.cluster.iter().any(|d| d.matches(host, port)) {
            Some(Route::Cluster)
        } else if self.extra.iter().any(|d| d.matches(host, port)) {
            Some(Route::Extra)
        } else {
            None
        }
    }
}

/// The host (lowercase, without IPv6 brackets) and effective port of a URL.
fn host_port(uri: &Uri) -> Option<(String, u16)> {
    let host = uri.host()?.trim_matches(['[', ']']).to_ascii_lowercase();
    let port = uri.port_u16().or(match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    })?;
    Some((host, port))
}

/// The TLS settings of the kubeconfig's selected cluster entry (CA, server name, skip
/// verify), which `wasi:http` requests to that cluster's API server use: a `wasi:http`
/// request cannot carry TLS material, and the kubeconfig is where its operator said how
/// to trust the server. The user's credentials (client certificate, token) are never
/// added: a plugin that needs them reads them and uses the contract's `http`.
#[derive(Debug, Clone)]
struct ClusterTls {
    host: String,
    port: u16,
    ca: Option<Material>,
    server_name: Option<String>,
    insecure_skip_verify: bool,
}

impl ClusterTls {
    /// The TLS settings of `material`'s server; `None` when its URL has no host.
    fn of(material: &ConnectionMaterial) -> Option<Arc<Self>> {
        let uri = material.server.parse::<Uri>().ok()?;
        let (host, port) = host_port(&uri)?;
        Some(Arc::new(Self {
            host,
            port,
            ca: material.ca.clone(),
            server_name: material.tls_server_name.clone(),
            insecure_skip_verify: material.insecure_skip_tls_verify,
        }))
    }
}

/// What one request taught the host about the cluster, merged into the call's
/// [`CallRecord`]. `wasi:http` futures run in tasks of their own, apart from the store, so
/// theirs is shared behind a mutex and merged when the record is read.
#[derive(Debug, Default, Clone)]
struct Learned {
    contacted: bool,
    timed_out: bool,
    /// Timed out under a bound the plugin shortened.
    shortened: bool,
    auth_rejected: Option<u16>,
    reference_broken: Option<String>,
    host_fault: Option<String>,
}

impl Learned {
    /// Adds what one request learned; `cluster` says whether it went to the cluster (only
    /// those count as contact, timeouts, rejections).
    fn merge_into(self, record: &mut CallRecord, cluster: bool) {
        if cluster {
            record.cluster_contacted |= self.contacted;
            record.cluster_timed_out |= self.timed_out;
            record.cluster_timeout_shortened |= self.shortened;
            record.auth_rejected = record.auth_rejected.or(self.auth_rejected);
        }
        record.reference_broken = record.reference_broken.take().or(self.reference_broken);
        record.host_fault = record.host_fault.take().or(self.host_fault);
    }
}

impl Learned {
    /// Folds a later request's lessons into these, as [`Learned::merge_into`] would.
    fn absorb(&mut self, later: Self) {
        self.contacted |= later.contacted;
        self.timed_out |= later.timed_out;
        self.shortened |= later.shortened;
        self.auth_rejected = self.auth_rejected.or(later.auth_rejected);
        self.reference_broken = self.reference_broken.take().or(later.reference_broken);
        self.host_fault = self.host_fault.take().or(later.host_fault);
    }
}

/// What the `wasi:http` requests of a call learned, folded as they end: the cluster's
/// requests and the others apart, so that a call making many requests holds two records,
/// not one per request.
#[derive(Debug, Default)]
struct LateLearned {
    cluster: Learned,
    other: Learned,
}

impl LateLearned {
    fn push(&mut self, learned: Learned, cluster: bool) {
        if cluster {
            self.cluster.absorb(learned);
        } else {
            self.other.absorb(learned);
        }
    }
}

type LateRecord = Mutex<LateLearned>;

/// The body bytes the host holds for one call, against [`MAX_BUFFERED_BYTES_PER_CALL`].
#[derive(Debug)]
struct Buffered {
    used: AtomicUsize,
    cap: usize,
}

impl Buffered {
    fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            used: AtomicUsize::new(0),
            cap,
        })
    }

    /// An empty hold on the call's buffer.
    fn hold(self: &Arc<Self>) -> Held {
        Held {
            pool: Arc::clone(self),
            bytes: 0,
        }
    }
}

/// Bytes held for one request's bodies, given back when dropped.
#[derive(Debug)]
struct Held {
    pool: Arc<Buffered>,
    bytes: usize,
}

impl Held {
    /// Takes `more` bytes from the call's buffer; `false`, taking nothing, when they do
    /// not fit.
    fn grow(&mut self, more: usize) -> bool {
        let taken = self
            .pool
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(more)
                    .filter(|total| *total <= self.pool.cap)
            });
        if taken.is_ok() {
            self.bytes += more;
        }
        taken.is_ok()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.pool.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// A response body that keeps its bytes' hold on the call's buffer until the plugin has
/// read it (or dropped the response).
struct HeldBody {
    body: Full<Bytes>,
    _held: Held,
}

impl hyper::body::Body for HeldBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Why a body could not be read whole.
#[derive(Debug)]
enum Unread {
    /// Past the body's own limit or the call's buffer.
    TooLarge,
    /// The stream failed.
    Failed(String),
}

/// Reads a whole body, within `max` bytes and what the call's buffer has left.
async fn collect_within<B>(body: B, max: usize, held: &mut Held) -> Result<Bytes, Unread>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let mut body = std::pin::pin!(body);
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| Unread::Failed(error.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > max || !held.grow(data.len()) {
                return Err(Unread::TooLarge);
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(bytes))
}

/// What a call was refused — denied requests, requests past a bound, refused credentials
/// calls — counted by kind, so that the log gets one summary line per call however many
/// times a plugin tries. The kinds are a fixed set of texts, so the tally stays small.
#[derive(Debug, Default)]
pub(crate) struct Refusals(Mutex<BTreeMap<&'static str, (u64, String)>>);

impl Refusals {
    /// Counts one refusal of kind `what`; the first `detail` of each kind is kept.
    fn note(&self, what: &'static str, detail: &str) {
        let mut tally = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = tally.entry(what).or_insert_with(|| {
            let mut end = detail.len().min(MAX_REFUSAL_DETAIL_BYTES);
            while !detail.is_char_boundary(end) {
                end -= 1;
            }
            (0, detail[..end].to_owned())
        });
        entry.0 = entry.0.saturating_add(1);
    }

    /// The summary line: each kind with its count and first detail; `None` without
    /// refusals.
    fn summary(&self) -> Option<String> {
        let tally = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if tally.is_empty() {
            return None;
        }
        let parts: Vec<String> = tally
            .iter()
            .map(|(what, (count, first))| {
                if first.is_empty() {
                    format!("{count} × {what}")
                } else {
                    format!("{count} × {what} (first: {first})")
                }
            })
            .collect();
        Some(parts.join("; "))
    }
}

/// How far one request got towards its server. The exchange moves it forward; when a
/// timeout drops the exchange, the stage it reached says whose the timeout was.
#[derive(Debug, Default)]
struct Progress(AtomicU8);

impl Progress {
    const RESOLVING: u8 = 1;
    const CONNECTING: u8 = 2;
    /// `connect()` reached the server (established, refused, reset), or the resolver
    /// answered that the name does not exist.
    const CONTACTED: u8 = 3;

    fn advance(&self, stage: u8) {
        self.0.fetch_max(stage, Ordering::AcqRel);
    }

    /// A connection attempt that failed locally: back to before it, unless an earlier
    /// attempt reached the server.
    fn retreat(&self) {
        let _ = self.0.compare_exchange(
            Self::CONNECTING,
            Self::RESOLVING,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    fn stage(&self) -> u8 {
        self.0.load(Ordering::Acquire)
    }

    /// What a timeout at this stage means. `shortened`: the plugin bounded the request
    /// below [`MIN_CLUSTER_REQUEST_TIMEOUT`] and below the budget.
    fn timed_out(&self, shortened: bool) -> Learned {
        match self.stage() {
            Self::RESOLVING => Learned {
                host_fault: Some(
                    "the resolver did not answer within the probe's budget".to_owned(),
                ),
                ..Learned::default()
            },
            Self::CONNECTING | Self::CONTACTED if !shortened => Learned {
                contacted: true,
                timed_out: true,
                ..Learned::default()
            },
            Self::CONTACTED => Learned {
                contacted: true,
                shortened: true,
                ..Learned::default()
            },
            _ => Learned {
                shortened,
                ..Learned::default()
            },
        }
    }

    /// What an exchange that ended (answered or failed) learned.
    fn ended(&self) -> Learned {
        Learned {
            contacted: self.stage() == Self::CONTACTED,
            ..Learned::default()
        }
    }
}

/// Whether the plugin shortened a request's wait: its own bound is below both the floor
/// and what the budget left.
fn shortened(guest: Option<Duration>, budget: Duration) -> bool {
    guest.is_some_and(|g| g < budget && g < MIN_CLUSTER_REQUEST_TIMEOUT)
}

/// One call's egress: the plugin's grant, the destinations it may reach, what it has sent,
/// and the client that sends. The `wasi:http` hooks of the call's store.
pub(crate) struct Egress {
    plugin: Arc<str>,
    granted: bool,
    pub(crate) policy: EgressPolicy,
    record: CallRecord,
    late: Arc<LateRecord>,
    /// The call's `wasi:http` requests in flight, at most [`MAX_WASI_HTTP_IN_FLIGHT`].
    in_flight: Arc<Semaphore>,
    /// The body bytes held for the call.
    buffered: Arc<Buffered>,
    /// What the call was refused, logged as one line when the call ends.
    refusals: Arc<Refusals>,
    clients: TlsClients,
    deadline: Instant,
    cluster_tls: Option<Arc<ClusterTls>>,
    /// The cluster's resolved material, and any served during the call (a Secret's), to
    /// tell material the reference holds from material the plugin made up when a TLS
    /// set-up fails…
    served_material: Vec<ConnectionMaterial>,
    /// …and the sha256 of each file served through `credentials.read-file`.
    served_files: Vec<[u8; 32]>,
    /// Where a cluster request may connect (`VIGIL_REGISTRATION_ALLOW`).
    rule: Arc<AddressRule>,
    /// The credentials served in this call, each with the hosts it may go to.
    credentials: Vec<HeldCredential>,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("plugin", &self.plugin)
            .field("granted", &self.granted)
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

/// Which door a request came through, for the log.
#[derive(Debug, Clone, Copy)]
enum Door {
    Contract,
    WasiHttp,
}

impl Door {
    fn name(self) -> &'static str {
        match self {
            Self::Contract => "http.send",
            Self::WasiHttp => "wasi:http",
        }
    }

    /// The refusal of a request without the `http` grant.
    fn not_granted(self) -> &'static str {
        match self {
            Self::Contract => "http.send denied: http is not granted",
            Self::WasiHttp => "wasi:http denied: http is not granted",
        }
    }

    /// The refusal of a request to a host outside the grant.
    fn outside_grant(self) -> &'static str {
        match self {
            Self::Contract => "http.send denied: host outside the plugin's egress grant",
            Self::WasiHttp => "wasi:http denied: host outside the plugin's egress grant",
        }
    }
}

impl Drop for Egress {
    /// The call's refusals, as one line when the call ends.
    fn drop(&mut self) {
        if let Some(summary) = self.refusals.summary() {
            warn!(plugin = %self.plugin, "refused during the call: {summary}");
        }
    }
}

/// Why a request was not let out.
#[derive(Debug)]
enum Refused {
    NotGranted,
    Scheme,
    NoHost,
    Denied { host: String, port: u16 },
}

/// A request the policy let out.
#[derive(Debug)]
struct Admitted {
    route: Route,
    host: String,
    port: u16,
    https: bool,
    /// What is left of the budget for this request.
    bound: Duration,
}

impl Egress {
    pub(crate) fn new(
        plugin: Arc<str>,
        granted: bool,
        policy: EgressPolicy,
        cluster: Option<&CallCluster>,
        clients: TlsClients,
        deadline: Instant,
        rule: Arc<AddressRule>,
    ) -> Self {
        let material = cluster.and_then(|c| c.material.as_deref());
        let cluster_tls = material.and_then(ClusterTls::of);
        let mut egress = Self {
            plugin,
            granted,
            policy,
            record: CallRecord::default(),
            late: Arc::default(),
            in_flight: Arc::new(Semaphore::new(MAX_WASI_HTTP_IN_FLIGHT)),
            buffered: Buffered::new(MAX_BUFFERED_BYTES_PER_CALL),
            refusals: Arc::default(),
            clients,
            deadline,
            cluster_tls,
            served_material: material.cloned().into_iter().collect(),
            served_files: Vec::new(),
            rule,
            credentials: Vec::new(),
        };
        if let Some(material) = material {
            egress.hold_material(material);
        }
        egress
    }

    /// A file's bytes served to the plugin (`credentials.read-file`): a file of the
    /// kubeconfig's context, whose credentials go to its server only.
    pub(crate) fn note_served(&mut self, bytes: &[u8]) {
        self.served_files.push(Sha256::digest(bytes).into());
        let bound = self
            .served_material
            .first()
            .map(material_binding)
            .unwrap_or_default();
        self.hold("a credential of the kubeconfig".to_owned(), bytes, bound);
    }

    /// A credential an `exec` command gave for `material`'s user: it goes to that
    /// context's server only.
    pub(crate) fn hold_exec_credential(&mut self, material: &ConnectionMaterial, bytes: &[u8]) {
        self.hold(
            "the exec credential".to_owned(),
            bytes,
            material_binding(material),
        );
    }

    /// A credential parameter's value served to the plugin (`credentials.parameter`),
    /// bound to the hosts the plugin's `credential-hosts` names for its source.
    pub(crate) fn hold_parameter(
        &mut self,
        parameter: &str,
        source: CredentialSource<'_>,
        bytes: &[u8],
        manifest: &Manifest,
    ) {
        let bound = manifest
            .credential_hosts_for(source)
            .into_iter()
            .map(Destination::parse)
            .collect();
        self.hold(format!("parameter {parameter}"), bytes, bound);
    }

    /// The token and client key of a kubeconfig context given inline, bound to its server.
    fn hold_material(&mut self, material: &ConnectionMaterial) {
        let bound = material_binding(material);
        for held in [&material.token, &material.client_key]
            .into_iter()
            .flatten()
        {
            if let Material::Inline(bytes) = held {
                self.hold(
                    "a credential of the kubeconfig".to_owned(),
                    bytes.expose_secret(),
                    bound.clone(),
                );
            }
        }
    }

    fn hold(&mut self, what: String, bytes: &[u8], bound: Vec<Destination>) {
        let value = bytes.trim_ascii();
        if value.is_empty() {
            return;
        }
        self.credentials.push(HeldCredential {
            what,
            value: Arc::from(value),
            bound,
        });
    }

    /// Whether `bytes` are connection material the host served in this call.
    fn is_served(&self, bytes: &[u8]) -> bool {
        let inline = |material: &ConnectionMaterial| {
            [
                &material.ca,
                &material.client_certificate,
                &material.client_key,
            ]
            .into_iter()
            .flatten()
            .any(|m| matches!(m, Material::Inline(held) if held.expose_secret() == bytes))
        };
        if self.served_material.iter().any(inline) {
            return true;
        }
        let digest: [u8; 32] = Sha256::digest(bytes).into();
        self.served_files.contains(&digest)
    }

    /// Material served during the call (a kubeconfig read from a Secret): its selected
    /// server becomes a cluster destination, and `wasi:http` requests to it are verified
    /// with its TLS settings, unless the call's cluster already had material of its own.
    pub(crate) fn serve_material(&mut self, material: &ConnectionMaterial) {
        self.policy.add_cluster_url(&material.server);
        if self.cluster_tls.is_none() {
            self.cluster_tls = ClusterTls::of(material);
        }
        self.hold_material(material);
        self.served_material.push(material.clone());
    }

    /// Refuses a request that carries a credential where it is not bound (see
    /// [`binding_refusal`]): recorded as reference material that cannot be used, and
    /// logged naming the plugin and the credential, never its value.
    fn check_bindings(&mut self, shown: &Shown<'_>) -> Result<(), String> {
        let Some(refusal) = binding_refusal(&self.credentials, shown) else {
            return Ok(());
        };
        self.refused(
            "http.send refused: a credential to a host it is not bound to",
            &refusal,
        );
        self.note_denied(format!("{}:{}", shown.host, shown.port));
        self.record
            .reference_broken
            .get_or_insert_with(|| refusal.clone());
        Err(refusal)
    }

    /// What the host saw of this call's requests, those still settling included.
    pub(crate) fn record(&self) -> CallRecord {
        let mut record = self.record.clone();
        let late = self.late.lock().unwrap_or_else(PoisonError::into_inner);
        late.cluster.clone().merge_into(&mut record, true);
        late.other.clone().merge_into(&mut record, false);
        record
    }

    /// Counts a refusal for the call's summary (`what` names the call and why, `detail`
    /// the host, path or parameter), and logs it alone at debug level. Never a URL,
    /// which may carry credentials.
    pub(crate) fn refused(&self, what: &'static str, detail: &str) {
        debug!(plugin = %self.plugin, detail, "{what}");
        self.refusals.note(what, detail);
    }

    /// Counts a denied request in the record, which keeps at most [`MAX_DENIED_RECORDED`]
    /// distinct destinations.
    fn note_denied(&mut self, destination: String) {
        self.record.denied_count = self.record.denied_count.saturating_add(1);
        if self.record.denied.len() < MAX_DENIED_RECORDED
            && !self.record.denied.contains(&destination)
        {
            self.record.denied.push(destination);
        }
    }

    /// Checks a request against the grant and the destinations, and records it: a
    /// denial (logged, naming the plugin and the host, never the URL, which may carry
    /// credentials) or a request to the cluster.
    fn admit(&mut self, uri: &Uri, door: Door) -> Result<Admitted, Refused> {
        if !self.granted {
            self.refused(door.not_granted(), "");
            return Err(Refused::NotGranted);
        }
        let https = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(Refused::Scheme),
        };
        let (host, port) = host_port(uri).ok_or(Refused::NoHost)?;
        let Some(route) = self.policy.route(&host, port) else {
            let destination = format!("{host}:{port}");
            self.refused(door.outside_grant(), &destination);
            self.note_denied(destination);
            return Err(Refused::Denied { host, port });
        };
        // Where a plugin's requests go, for the operator: the destination only, never the
        // URL's path or query, which may carry credentials.
        debug!(plugin = %self.plugin, host = %host, port, cluster = (route == Route::Cluster), "{} request let out", door.name());
        Ok(Admitted {
            route,
            host,
            port,
            https,
            bound: self.deadline.saturating_duration_since(Instant::now()),
        })
    }

    /// How a `wasi:http` request to `host:port` trusts the server: the kubeconfig's
    /// cluster TLS for its API server, the system roots for anything else.
    fn wasi_trust(&self, admitted: &Admitted) -> Option<Arc<ClusterTls>> {
        self.cluster_tls
            .as_ref()
            .filter(|tls| {
                admitted.route == Route::Cluster
                    && tls.host == admitted.host
                    && tls.port == admitted.port
            })
            .cloned()
    }
}

/// `http`: the host side of the contract's interface, whatever the plugin's contract version.
impl CallState {
    /// `http.send`: one request through the call's egress, and its whole response.
    pub(crate) async fn http_send(
        &mut self,
        request: HttpRequest,
    ) -> Result<HttpResponse, HttpError> {
        use HttpError as E;
        let uri: Uri = request
            .url
            .parse()
            .map_err(|_| E::Protocol("the URL does not parse".to_owned()))?;
        let egress = &mut self.egress;
        let admitted = egress
            .admit(&uri, Door::Contract)
            .map_err(|refused| match refused {
                Refused::NotGranted => E::Denied("http is not granted to this plugin".to_owned()),
                Refused::Scheme => E::Protocol("only http and https URLs are supported".to_owned()),
                Refused::NoHost => E::Protocol("the URL has no host".to_owned()),
                Refused::Denied { host, port } => {
                    E::Denied(format!("egress to {host}:{port} is not allowed"))
                }
            })?;
        let budget = admitted.bound;
        let guest = request
            .timeout_ms
            .map(|ms| Duration::from_millis(u64::from(ms)));
        let bound = guest.map_or(budget, |g| budget.min(g));
        let cluster = admitted.route == Route::Cluster;
        if bound.is_zero() {
            // Nothing was sent: whoever used the budget up, the cluster was not asked.
            Progress::default()
                .timed_out(shortened(guest, budget))
                .merge_into(&mut egress.record, cluster);
            return Err(E::Timeout);
        }
        let tls = if admitted.https {
            let options = request.tls.as_ref();
            let trust = match options {
                Some(t) if t.insecure_skip_verify => Trust::SkipVerify,
                Some(TlsOptions {
                    ca_pem: Some(ca), ..
                }) => Trust::Ca(ca),
                _ => Trust::System,
            };
            let certificate = options.and_then(|t| t.client_certificate_pem.as_deref());
            let key = options.and_then(|t| t.client_key_pem.as_deref());
            let ca = match trust {
                Trust::Ca(ca) => Some(ca),
                _ => None,
            };
            let config = match egress.clients.client_config_parts(trust, certificate, key) {
                Ok(config) => config,
                Err(error) => {
                    let pieces: Vec<&[u8]> = [ca, certificate, key].into_iter().flatten().collect();
                    if !pieces.is_empty() && pieces.iter().all(|piece| egress.is_served(piece)) {
                        egress.record.reference_broken.get_or_insert_with(|| {
                            format!(
                                "the connection material of the reference cannot be used: {error}"
                            )
                        });
                    }
                    return Err(E::Tls(error.to_string()));
                }
            };
            let name = options.and_then(|t| t.server_name.as_deref());
            let name = tls::server_name(&admitted.host, name).map_err(|e| E::Tls(e.to_string()))?;
            Some((config, name))
        } else {
            None
        };
        let method = Method::from_bytes(request.method.as_bytes())
            .map_err(|_| E::Protocol("invalid request method".to_owned()))?;
        let mut headers = HeaderMap::new();
        for (name, value) in &request.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| E::Protocol("invalid header name".to_owned()))?;
            // Never quote a header value: it may be a token.
            let value = HeaderValue::from_str(value)
                .map_err(|_| E::Protocol(format!("invalid value of header {name}")))?;
            headers.append(name, value);
        }
        let target = origin_form(&uri);
        let body = Bytes::from(request.body.unwrap_or_default());
        let options = request.tls.as_ref();
        let shown = Shown {
            host: &admitted.host,
            port: admitted.port,
            headers: &headers,
            target: &target,
            body: &body,
            server_name: tls.as_ref().map(|_| {
                options
                    .and_then(|t| t.server_name.as_deref())
                    .unwrap_or(&admitted.host)
            }),
            identity: [
                options.and_then(|t| t.client_certificate_pem.as_deref()),
                options.and_then(|t| t.client_key_pem.as_deref()),
            ],
        };
        egress.check_bindings(&shown).map_err(E::Denied)?;
        let admitted_host = admitted.host.clone();
        let outgoing = Outgoing {
            method,
            target,
            authority: authority(&uri, &admitted),
            headers,
            body,
            rule: cluster.then(|| Arc::clone(&egress.rule)),
            host: admitted.host,
            port: admitted.port,
            tls,
        };
        let started = Instant::now();
        let progress = Progress::default();
        let mut held = egress.buffered.hold();
        if !held.grow(outgoing.body.len()) {
            egress.refused(
                "http.send refused: the call's bodies would pass the host's buffer",
                &outgoing.host,
            );
            return Err(E::TooLarge);
        }
        let result = tokio::time::timeout(bound, exchange(outgoing, &progress, &mut held)).await;
        let (learned, result) = match result {
            Err(_) => (
                progress.timed_out(shortened(guest, budget)),
                Err(E::Timeout),
            ),
            Ok(Err(error)) => {
                let mut learned = progress.ended();
                error.teach(&mut learned);
                let error = match error {
                    WireError::Outside(message) => E::Denied(message),
                    WireError::Refused(message) | WireError::Local(message) => E::Refused(message),
                    WireError::TimedOut => E::Timeout,
                    WireError::Dns(message) => E::Dns(message),
                    WireError::Tls(message) => E::Tls(message),
                    WireError::Protocol(message) => E::Protocol(message),
                    WireError::TooLarge => {
                        egress.refused(
                            "http.send refused: a response body past the host's limit",
                            &admitted_host,
                        );
                        E::TooLarge
                    }
                };
                (learned, Err(error))
            }
            Ok(Ok(incoming)) => {
                let mut learned = progress.ended();
                learned.auth_rejected =
                    matches!(incoming.status, 401 | 403).then_some(incoming.status);
                (learned, Ok(incoming))
            }
        };
        learned.merge_into(&mut egress.record, cluster);
        let incoming = result?;
        Ok(HttpResponse {
            status: incoming.status,
            headers: incoming
                .headers
                .iter()
                .map(|(name, value)| {
                    (
                        name.as_str().to_owned(),
                        String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: incoming.body.to_vec(),
            latency_ms: u32::try_from(started.elapsed().as_millis()).unwrap_or(u32::MAX),
        })
    }
}

/// What [`WasiHttpHooks::send_request`]'s future yields: the response, and a future
/// that reports errors met while streaming it (none here: the body is already read).
type SendResult = Result<
    (
        hyper::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ),
    wasmtime_wasi_http::Error,
>;

impl WasiHttpHooks for Egress {
    /// Every `wasi:http` request of the call: checked now (a denial reaches the guest as
    /// `HTTP-request-denied`), then sent by the same client as the contract's `http`,
    /// within what is left of the budget (the guest's own timeouts may shorten it, never
    /// extend it), and answered with the whole body, as the contract's `http` answers.
    fn send_request(
        &mut self,
        request: hyper::Request<WasiBody>,
        options: Option<RequestOptions>,
        _request_done: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        use wasmtime_wasi_http::Error as E;
        let admitted = match self.admit(request.uri(), Door::WasiHttp) {
            Ok(admitted) => admitted,
            Err(Refused::NotGranted | Refused::Denied { .. }) => {
                return Box::new(std::future::ready(SendResult::Err(E::HttpRequestDenied)));
            }
            Err(Refused::Scheme | Refused::NoHost) => {
                return Box::new(std::future::ready(SendResult::Err(
                    E::HttpRequestUriInvalid,
                )));
            }
        };
        let Ok(in_flight) = Arc::clone(&self.in_flight).try_acquire_owned() else {
            self.refused(
                "wasi:http refused: more requests in flight than the host allows",
                &format!("{}:{}", admitted.host, admitted.port),
            );
            return Box::new(std::future::ready(SendResult::Err(E::InternalError(Some(
                format!(
                    "more than {MAX_WASI_HTTP_IN_FLIGHT} wasi:http requests in flight in one call"
                ),
            )))));
        };
        let budget = admitted.bound;
        // The guest's connect and first-byte timeouts together bound the exchange.
        let guest = options.and_then(|options| {
            [options.connect_timeout, options.first_byte_timeout]
                .into_iter()
                .flatten()
                .reduce(Duration::saturating_add)
        });
        let bound = guest.map_or(budget, |g| budget.min(g));
        let send = WasiSend {
            cluster_tls: self.wasi_trust(&admitted),
            rule: (admitted.route == Route::Cluster).then(|| Arc::clone(&self.rule)),
            admitted,
            bound,
            shortened: shortened(guest, budget),
            clients: self.clients.clone(),
            late: Arc::clone(&self.late),
            credentials: self.credentials.clone(),
            held: self.buffered.hold(),
            refusals: Arc::clone(&self.refusals),
            _in_flight: in_flight,
        };
        Box::new(send.run(request))
    }
}

/// One admitted `wasi:http` request, sent apart from the store (wasmtime spawns the
/// future), so it carries all it needs.
struct WasiSend {
    admitted: Admitted,
    bound: Duration,
    /// The guest shortened the bound (see [`shortened`]).
    shortened: bool,
    cluster_tls: Option<Arc<ClusterTls>>,
    clients: TlsClients,
    late: Arc<LateRecord>,
    /// Where a cluster request may connect; `None` for an `allowed-hosts` extra.
    rule: Option<Arc<AddressRule>>,
    /// The credentials served so far in the call, with their bindings.
    credentials: Vec<HeldCredential>,
    /// The request's hold on the call's buffer; the response body keeps it.
    held: Held,
    refusals: Arc<Refusals>,
    /// The request's place among the call's requests in flight, given back when it ends.
    _in_flight: OwnedSemaphorePermit,
}

impl WasiSend {
    async fn run(self, request: hyper::Request<WasiBody>) -> SendResult {
        use wasmtime_wasi_http::Error as E;
        let Self {
            admitted,
            bound,
            shortened,
            cluster_tls,
            clients,
            late,
            rule,
            credentials,
            mut held,
            refusals,
            _in_flight,
        } = self;
        let cluster = admitted.route == Route::Cluster;
        let progress = Progress::default();
        let incoming = if bound.is_zero() {
            None
        } else {
            let exchange = WasiExchange {
                admitted,
                cluster_tls,
                clients,
                rule,
                credentials,
            };
            tokio::time::timeout(
                bound,
                exchange.send(request, &progress, &mut held, &refusals),
            )
            .await
            .ok()
        };
        let (learned, incoming) = match incoming {
            // A zero bound sent nothing: `timed_out` of a request that never started.
            None => (progress.timed_out(shortened), Err(E::ConnectionReadTimeout)),
            Some(Err((error, taught))) => {
                let mut learned = progress.ended();
                taught(&mut learned);
                (learned, Err(error))
            }
            Some(Ok(incoming)) => {
                let mut learned = progress.ended();
                learned.auth_rejected =
                    matches!(incoming.status, 401 | 403).then_some(incoming.status);
                (learned, Ok(incoming))
            }
        };
        late.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(learned, cluster);
        let incoming = incoming?;
        let body: WasiBody = HeldBody {
            body: Full::new(incoming.body),
            _held: held,
        }
        .map_err(|never| -> E { match never {} })
        .boxed_unsync();
        let mut response = hyper::Response::new(body);
        *response.status_mut() =
            hyper::StatusCode::from_u16(incoming.status).map_err(|_| E::HttpProtocolError)?;
        *response.headers_mut() = incoming.headers;
        let done: Box<dyn Future<Output = Result<(), E>> + Send> =
            Box::new(std::future::ready(Ok(())));
        Ok((response, done))
    }
}

/// What a `wasi:http` request needs on the wire.
struct WasiExchange {
    admitted: Admitted,
    cluster_tls: Option<Arc<ClusterTls>>,
    clients: TlsClients,
    /// Where a cluster request may connect; `None` for an `allowed-hosts` extra.
    rule: Option<Arc<AddressRule>>,
    /// The credentials served so far in the call, with their bindings.
    credentials: Vec<HeldCredential>,
}

impl WasiExchange {
    async fn send(
        self,
        request: hyper::Request<WasiBody>,
        progress: &Progress,
        held: &mut Held,
        refusals: &Refusals,
    ) -> Result<Incoming, (wasmtime_wasi_http::Error, Teach)> {
        use wasmtime_wasi_http::Error as E;
        let Self {
            admitted,
            cluster_tls,
            clients,
            rule,
            credentials,
        } = self;
        let destination = format!("{}:{}", admitted.host, admitted.port);
        let tls = if admitted.https {
            // The trust of a `wasi:http` request is the host's choice: the kubeconfig's
            // cluster TLS (served from the reference) or the system roots (vigil's own).
            let unusable = |error: TlsError| -> (E, Teach) {
                let served = cluster_tls.is_some();
                let message = error.to_string();
                (
                    E::TlsCertificateError,
                    Box::new(move |learned: &mut Learned| {
                        if served {
                            learned.reference_broken = Some(format!(
                                "the connection material of the reference cannot be used: {message}"
                            ));
                        } else {
                            learned.host_fault =
                                Some(format!("the system trust roots cannot be used: {message}"));
                        }
                    }),
                )
            };
            let config = wasi_tls_config(&clients, cluster_tls.as_deref())
                .await
                .map_err(unusable)?;
            let name = cluster_tls.as_ref().and_then(|t| t.server_name.as_deref());
            let name = tls::server_name(&admitted.host, name).map_err(unusable)?;
            Some((config, name))
        } else {
            None
        };
        let (parts, body) = request.into_parts();
        let body = collect_within(body, MAX_REQUEST_BODY_BYTES, held)
            .await
            .map_err(|unread| {
                if matches!(unread, Unread::TooLarge) {
                    refusals.note(
                        "wasi:http refused: a request body past the host's limit or buffer",
                        &destination,
                    );
                }
                (E::HttpRequestBodySize(None), nothing_taught())
            })?;
        let target = origin_form(&parts.uri);
        let shown = Shown {
            host: &admitted.host,
            port: admitted.port,
            headers: &parts.headers,
            target: &target,
            body: &body,
            server_name: tls.as_ref().map(|_| {
                cluster_tls
                    .as_ref()
                    .and_then(|t| t.server_name.as_deref())
                    .unwrap_or(&admitted.host)
            }),
            identity: [None, None],
        };
        if let Some(refusal) = binding_refusal(&credentials, &shown) {
            refusals.note(
                "wasi:http refused: a credential to a host it is not bound to",
                &refusal,
            );
            return Err((
                E::HttpRequestDenied,
                Box::new(move |learned: &mut Learned| {
                    learned.reference_broken = Some(refusal);
                }),
            ));
        }
        let outgoing = Outgoing {
            method: parts.method,
            target,
            authority: authority(&parts.uri, &admitted),
            headers: parts.headers,
            body,
            rule,
            host: admitted.host,
            port: admitted.port,
            tls,
        };
        exchange(outgoing, progress, held).await.map_err(|error| {
            if matches!(error, WireError::TooLarge) {
                refusals.note(
                    "wasi:http refused: a response body past the host's limit or buffer",
                    &destination,
                );
            }
            let mut taught = Learned::default();
            error.teach(&mut taught);
            let code = match error {
                WireError::Outside(_) => E::HttpRequestDenied,
                WireError::Refused(_) | WireError::Local(_) => E::ConnectionRefused,
                WireError::TimedOut => E::ConnectionReadTimeout,
                WireError::Dns(message) => E::DnsError {
                    rcode: Some(message),
                    info_code: None,
                },
                WireError::Tls(_) => E::TlsCertificateError,
                WireError::Protocol(_) => E::HttpProtocolError,
                WireError::TooLarge => {
                    E::HttpResponseBodySize(u64::try_from(MAX_RESPONSE_BODY_BYTES).ok())
                }
            };
            let teach: Teach = Box::new(move |learned: &mut Learned| {
                learned.host_fault = learned.host_fault.take().or(taught.host_fault);
                learned.reference_broken =
                    learned.reference_broken.take().or(taught.reference_broken);
                learned.timed_out |= taught.timed_out;
            });
            (code, teach)
        })
    }
}

/// What a failed `wasi:http` exchange adds to what its [`Progress`] tells.
type Teach = Box<dyn FnOnce(&mut Learned) + Send>;

fn nothing_taught() -> Teach {
    Box::new(|_| {})
}

/// The client configuration of a `wasi:http` request: the kubeconfig's cluster TLS for its
/// API server, else the system roots; never a client certificate.
async fn wasi_tls_config(
    clients: &TlsClients,
    cluster: Option<&ClusterTls>,
) -> Result<ClientConfig, TlsError> {
    let Some(cluster) = cluster else {
        return clients.client_config(Trust::System, None);
    };
    if cluster.insecure_skip_verify {
        return clients.client_config(Trust::SkipVerify, None);
    }
    match &cluster.ca {
        None => clients.client_config(Trust::System, None),
        Some(Material::Inline(pem)) => clients.client_config(Trust::Ca(pem.expose_secret()), None),
        Some(Material::File(path)) => {
            let pem = read_ca(path).await.map_err(|()| TlsError::CaNotPem)?;
            clients.client_config(Trust::Ca(&pem), None)
        }
    }
}

/// Reads a CA file named by the kubeconfig, bounded in size.
async fn read_ca(path: &Path) -> Result<Vec<u8>, ()> {
    let metadata = tokio::fs::metadata(path).await.map_err(|_| ())?;
    if metadata.len() > MAX_CREDENTIAL_FILE_BYTES {
        return Err(());
    }
    tokio::fs::read(path).await.map_err(|_| ())
}

/// The request target in origin form (`/path?query`), as HTTP/1.1 sends it to a server.
fn origin_form(uri: &Uri) -> String {
    uri.path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned())
}

/// The `Host` header of a request without one: the port only when the URL names it.
fn authority(uri: &Uri, admitted: &Admitted) -> String {
    if uri.port_u16().is_some() {
        format!("{}:{}", admitted.host, admitted.port)
    } else {
        admitted.host.clone()
    }
}

/// One request, ready for the wire.
struct Outgoing {
    method: Method,
    host: String,
    port: u16,
    /// The request target, in origin form.
    target: String,
    /// The `Host` header sent when `headers` has none.
    authority: String,
    headers: HeaderMap,
    body: Bytes,
    /// The rule every address dialled must satisfy: `Some` for a cluster request.
    rule: Option<Arc<AddressRule>>,
    /// The client configuration and the name to verify, for `https`.
    tls: Option<(ClientConfig, ServerName<'static>)>,
}

/// A whole response.
struct Incoming {
    status: u16,
    headers: HeaderMap,
    body: Bytes,
}

/// Why a request got no answer.
#[derive(Debug)]
enum WireError {
    /// The server refused, reset or could not be reached (the cluster's doing).
    Refused(String),
    /// The kernel gave up connecting (no answer to the SYN).
    TimedOut,
    /// The name does not exist.
    Dns(String),
    /// The TLS handshake with the server failed (its certificate did not verify among
    /// others: the server at the cluster's address answered, and vigil cannot tell a
    /// rotated CA from another server there).
    Tls(String),
    Protocol(String),
    TooLarge,
    /// vigil's own resources failed before the server was reached: file descriptors,
    /// local ports, no local route, a resolver that did not answer.
    Local(String),
    /// Every address of the cluster's host is outside `VIGIL_REGISTRATION_ALLOW`: nothing
    /// was dialled. The reference points where the operator does not let vigil go.
    Outside(String),
}

impl WireError {
    /// What the failure says beyond how far the exchange got.
    fn teach(&self, learned: &mut Learned) {
        match self {
            Self::Local(message) => learned.host_fault = Some(message.clone()),
            Self::Outside(message) => learned.reference_broken = Some(message.clone()),
            Self::TimedOut => learned.timed_out = true,
            _ => {}
        }
    }
}

/// Resolves `host` and connects to its addresses in turn, moving `progress` along: the
/// cluster counts as contacted once a `connect()` to one of its addresses reached the
/// other side (established, refused, reset, timed out) or the resolver said the name does
/// not exist. Failures of vigil's own resources are [`WireError::Local`]. With a `rule`
/// (a cluster request), only the addresses it allows are dialled; when it allows none of
/// them, nothing is ([`WireError::Outside`]).
async fn dial(
    host: &str,
    port: u16,
    progress: &Progress,
    rule: Option<&AddressRule>,
) -> Result<TcpStream, WireError> {
    progress.advance(Progress::RESOLVING);
    let mut addresses: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => match tokio::net::lookup_host((host, port)).await {
            Ok(found) => found.collect(),
            Err(error) => return Err(lookup_failure(host, &error, progress)),
        },
    };
    if let Some(rule) = rule {
        let found = addresses.len();
        let refused: Vec<String> = addresses
            .iter()
            .filter(|a| !rule.allows_address(host, a.ip()))
            .map(|a| a.ip().to_string())
            .collect();
        addresses.retain(|a| rule.allows_address(host, a.ip()));
        if addresses.is_empty() && found > 0 {
            let message = if host.parse::<IpAddr>().is_ok() {
                format!(
                    "{host} is outside {}: vigil does not connect there",
                    address_rule::SETTING
                )
            } else {
                format!(
                    "{host} resolves to {}, outside {}: vigil does not connect there",
                    refused.join(", "),
                    address_rule::SETTING
                )
            };
            warn!(host, port, "connection refused: {message}");
            return Err(WireError::Outside(message));
        }
    }
    let mut remote = None;
    let mut local = None;
    for address in addresses {
        let socket = if address.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        };
        let socket = socket
            .map_err(|error| WireError::Local(format!("vigil cannot open a socket: {error}")))?;
        progress.advance(Progress::CONNECTING);
        match socket.connect(address).await {
            Ok(tcp) => {
                progress.advance(Progress::CONTACTED);
                return Ok(tcp);
            }
            Err(error) => match error.kind() {
                ErrorKind::ConnectionRefused => {
                    progress.advance(Progress::CONTACTED);
                    remote = Some(WireError::Refused(format!(
                        "connection refused by {host}:{port}"
                    )));
                }
                ErrorKind::TimedOut => {
                    progress.advance(Progress::CONTACTED);
                    remote = Some(WireError::TimedOut);
                }
                ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::HostUnreachable => {
                    progress.advance(Progress::CONTACTED);
                    remote = Some(WireError::Refused(format!(
                        "cannot connect to {host}:{port}: {error}"
                    )));
                }
                // No local route, no local port, no memory, a local firewall: whatever
                // the kernel refused before the packet left is vigil's own trouble.
                _ => {
                    progress.retreat();
                    local = Some(WireError::Local(format!(
                        "vigil cannot connect to {host}:{port} from here: {error}"
                    )));
                }
            },
        }
    }
    Err(remote.or(local).unwrap_or_else(|| {
        progress.advance(Progress::CONTACTED);
        WireError::Dns(format!("{host} has no address"))
    }))
}

/// A failed name lookup: a name that does not exist is the cluster's (`dns`); a resolver
/// that cannot answer is vigil's.
fn lookup_failure(host: &str, error: &std::io::Error, progress: &Progress) -> WireError {
    // The system resolver's messages (getaddrinfo's EAI_NONAME and EAI_NODATA): the only
    // way std reports which failure it was.
    let text = error.to_string();
    if text.contains("Name or service not known")
        || text.contains("No address associated with hostname")
    {
        progress.advance(Progress::CONTACTED);
        WireError::Dns(format!("cannot resolve {host}: no such name"))
    } else {
        WireError::Local(format!("the resolver could not answer for {host}: {error}"))
    }
}

/// One request over a fresh connection (a reused one would hide certificate rotation).
async fn exchange(
    outgoing: Outgoing,
    progress: &Progress,
    held: &mut Held,
) -> Result<Incoming, WireError> {
    let Outgoing {
        method,
        host,
        port,
        target,
        authority,
        mut headers,
        body,
        rule,
        tls,
    } = outgoing;
    let tcp = dial(&host, port, progress, rule.as_deref()).await?;
    // Without it a fresh connection plus one request waits ~40 ms on Nagle and
    // delayed ACKs.
    let _ = tcp.set_nodelay(true);

    if !headers.contains_key(hyper::header::HOST) {
        let value = HeaderValue::from_str(&authority)
            .map_err(|_| WireError::Protocol("invalid host".to_owned()))?;
        headers.insert(hyper::header::HOST, value);
    }
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(target)
        .body(Full::new(body))
        .map_err(|e| WireError::Protocol(format!("invalid request: {e}")))?;
    *request.headers_mut() = headers;

    match tls {
        Some((config, name)) => {
            let stream = TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
                .map_err(|e| WireError::Tls(format!("TLS handshake failed: {e}")))?;
            send_over(TokioIo::new(stream), request, held).await
        }
        None => send_over(TokioIo::new(tcp), request, held).await,
    }
}

async fn send_over<I>(
    io: I,
    request: hyper::Request<Full<Bytes>>,
    held: &mut Held,
) -> Result<Incoming, WireError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| WireError::Protocol(format!("HTTP handshake failed: {e}")))?;
    // The connection task is aborted when this function returns, so that nothing of
    // the request outlives the host call that made it.
    let _driver = AbortOnDrop(tokio::spawn(connection));
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| WireError::Protocol(format!("request failed: {e}")))?;
    let (parts, body) = response.into_parts();
    let body = collect_within(body, MAX_RESPONSE_BODY_BYTES, held)
        .await
        .map_err(|unread| match unread {
            Unread::TooLarge => WireError::TooLarge,
            Unread::Failed(error) => {
                WireError::Protocol(format!("reading the body failed: {error}"))
            }
        })?;
    Ok(Incoming {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    })
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt as _;

    use super::*;
    use vigil_domain::reference::SecretBytes;

    fn held(what: &str, value: &str, bound: &[&str]) -> HeldCredential {
        HeldCredential {
            what: what.to_owned(),
            value: Arc::from(value.as_bytes()),
            bound: bound.iter().map(|d| Destination::parse(d)).collect(),
        }
    }

    /// Whether a request to `host:port` with `headers` and `body` is refused.
    fn refused(
        held: &[HeldCredential],
        host: &str,
        port: u16,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Option<String> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).expect("name"),
                HeaderValue::from_str(value).expect("value"),
            );
        }
        binding_refusal(
            held,
            &Shown {
                host,
                port,
                headers: &map,
                target: "/healthz",
                body: body.as_bytes(),
                server_name: None,
                identity: [None, None],
            },
        )
    }

    #[test]
    fn a_credential_goes_only_to_the_hosts_it_is_bound_to() {
        let token = [held(
            "parameter header.Authorization",
            "Bearer s3cr3t-t0ken",
            &["10.0.0.7:8443", "billing.internal"],
        )];
        let auth = [("authorization", "Bearer s3cr3t-t0ken")];
        assert_eq!(refused(&token, "10.0.0.7", 8443, &auth, ""), None);
        assert_eq!(
            refused(&token, "billing.internal", 443, &auth, ""),
            None,
            "any port"
        );
        let other = refused(&token, "10.0.0.8", 8443, &auth, "").expect("refused");
        assert!(
            other.starts_with("parameter header.Authorization is not bound to 10.0.0.8:8443"),
            "{other}"
        );
        assert!(!other.contains("s3cr3t"), "{other}");
        assert!(
            refused(&token, "10.0.0.7", 9443, &auth, "").is_some(),
            "another port"
        );
        // In the body or under another header, it is the same credential.
        assert!(refused(&token, "10.0.0.8", 80, &[], "key=Bearer s3cr3t-t0ken").is_some());
        assert!(
            refused(
                &token,
                "10.0.0.8",
                80,
                &[("x-key", "Bearer s3cr3t-t0ken")],
                ""
            )
            .is_some()
        );
        // A Host header or a TLS server name the binding does not cover.
        let host = refused(
            &token,
            "10.0.0.7",
            8443,
            &[auth[0], ("host", "evil.example")],
            "",
        )
        .expect("refused");
        assert!(host.contains("Host evil.example"), "{host}");
        assert_eq!(
            refused(
                &token,
                "10.0.0.7",
                8443,
                &[auth[0], ("host", "billing.internal:8443")],
                ""
            ),
            None
        );
        let mut map = HeaderMap::new();
        map.append(
            hyper::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer s3cr3t-t0ken"),
        );
        let sni = binding_refusal(
            &token,
            &Shown {
                host: "10.0.0.7",
                port: 8443,
                headers: &map,
                target: "/",
                body: b"",
                server_name: Some("evil.example"),
                identity: [None, None],
            },
        )
        .expect("refused");
        assert!(sni.contains("TLS server name evil.example"), "{sni}");
        // A request without it goes anywhere the egress policy allows.
        assert_eq!(
            refused(
                &token,
                "10.0.0.8",
                80,
                &[("authorization", "Bearer other")],
                ""
            ),
            None
        );
        // Bound nowhere: sent nowhere.
        let nowhere = [held("parameter header.X-Key", "k-1234567890", &[])];
        assert!(refused(&nowhere, "10.0.0.7", 8443, &[("x-key", "k-1234567890")], "").is_some());
        // A short value only as a whole header value or word of one.
        let short = [held("parameter pin", "1234", &[])];
        assert!(refused(&short, "h", 1, &[("x-pin", "1234")], "").is_some());
        assert!(refused(&short, "h", 1, &[("x-pin", "PIN 1234")], "").is_some());
        assert_eq!(
            refused(&short, "h", 1, &[("x-id", "a12345")], "order 41234"),
            None
        );
    }

    #[test]
    fn a_kubeconfigs_credentials_are_bound_to_its_server() {
        let material = ConnectionMaterial {
            kubeconfig: "/etc/kube/config".into(),
            context: "prod".to_owned(),
            cluster: "prod".to_owned(),
            user: Some("admin".to_owned()),
            server: "https://10.0.0.1:6443".to_owned(),
            tls_server_name: Some("api.prod.internal".to_owned()),
            insecure_skip_tls_verify: false,
            ca: None,
            client_certificate: None,
            client_key: Some(Material::Inline(SecretBytes::new(
                b"-----BEGIN KEY-----k3y".to_vec(),
            ))),
            token: Some(Material::Inline(SecretBytes::new(
                b"kube-t0ken-abcdef\n".to_vec(),
            ))),
            served_kubeconfig: SecretBytes::new(Vec::new()),
            exec: None,
            file_roots: vec!["/etc/kube".into()],
        };
        let bound = material_binding(&material);
        let token = [HeldCredential {
            what: "a credential of the kubeconfig".to_owned(),
            value: Arc::from(&b"kube-t0ken-abcdef"[..]),
            bound: bound.clone(),
        }];
        let auth = [("authorization", "Bearer kube-t0ken-abcdef")];
        assert_eq!(refused(&token, "10.0.0.1", 6443, &auth, ""), None);
        assert_eq!(
            refused(
                &token,
                "10.0.0.1",
                6443,
                &[auth[0], ("host", "api.prod.internal")],
                ""
            ),
            None
        );
        // The cluster's recorded endpoint, when it is not the kubeconfig's server.
        let endpoint = refused(&token, "10.0.0.2", 6443, &auth, "").expect("refused");
        assert!(
            endpoint.starts_with("a credential of the kubeconfig is not bound to 10.0.0.2:6443"),
            "{endpoint}"
        );
        // The client key as the TLS identity.
        let key = [HeldCredential {
            what: "a credential of the kubeconfig".to_owned(),
            value: Arc::from(&b"-----BEGIN KEY-----k3y"[..]),
            bound,
        }];
        let headers = HeaderMap::new();
        let shown = |host| Shown {
            host,
            port: 6443,
            headers: &headers,
            target: "/",
            body: b"",
            server_name: Some(host),
            identity: [None, Some(&b"-----BEGIN KEY-----k3y"[..])],
        };
        assert!(binding_refusal(&key, &shown("10.0.0.2")).is_some());
        assert_eq!(binding_refusal(&key, &shown("10.0.0.1")), None);
    }

    fn egress(allowed_hosts: &[&str]) -> Egress {
        let allowed: Vec<String> = allowed_hosts.iter().map(|h| (*h).to_owned()).collect();
        Egress::new(
            Arc::from("flood"),
            true,
            EgressPolicy::new(&allowed, None),
            None,
            TlsClients::new(),
            Instant::now() + Duration::from_secs(30),
            Arc::new(AddressRule::default()),
        )
    }

    fn wasi_get(url: &str) -> hyper::Request<WasiBody> {
        hyper::Request::get(url)
            .body(
                http_body_util::Empty::<Bytes>::new()
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            )
            .expect("request")
    }

    /// Thousands of denied requests: the record keeps a bounded list and the count, and
    /// the refusals make one summary entry.
    #[test]
    fn denials_are_counted_and_the_record_of_them_is_bounded() {
        let mut egress = egress(&[]);
        for i in 0..10_000u32 {
            let port = 1000 + i % 40;
            let uri: Uri = format!("http://127.0.0.77:{port}/").parse().expect("uri");
            assert!(matches!(
                egress.admit(&uri, Door::WasiHttp),
                Err(Refused::Denied { .. })
            ));
        }
        let record = egress.record();
        assert_eq!(record.denied_count, 10_000);
        assert_eq!(record.denied.len(), MAX_DENIED_RECORDED);
        let summary = egress.refusals.summary().expect("a summary");
        assert_eq!(
            summary,
            "10000 × wasi:http denied: host outside the plugin's egress grant (first: 127.0.0.77:1000)"
        );
    }

    /// Past the in-flight bound a `wasi:http` request fails at once, without a connection;
    /// a request that ends gives its place back.
    #[tokio::test]
    async fn wasi_http_requests_in_flight_are_bounded_per_call() {
        // Nothing listens on port 9 of loopback; the futures below are never polled, so
        // nothing is dialled at all.
        let mut egress = egress(&["127.0.0.1:9"]);
        let mut pending = Vec::new();
        let mut refused = 0;
        for _ in 0..20 {
            let future = egress.send_request(
                wasi_get("http://127.0.0.1:9/"),
                None,
                Box::new(async { Ok(()) }),
            );
            let mut future = Box::into_pin(future);
            match (&mut future).now_or_never() {
                Some(Err(wasmtime_wasi_http::Error::InternalError(Some(message)))) => {
                    assert!(message.contains("in flight"), "{message}");
                    refused += 1;
                }
                Some(other) => panic!("expected a refusal, got {:?}", other.err()),
                None => pending.push(future),
            }
        }
        assert_eq!(
            (pending.len(), refused),
            (MAX_WASI_HTTP_IN_FLIGHT, 20 - MAX_WASI_HTTP_IN_FLIGHT)
        );
        drop(pending.pop());
        let future = egress.send_request(
            wasi_get("http://127.0.0.1:9/"),
            None,
            Box::new(async { Ok(()) }),
        );
        assert!(
            Box::into_pin(future).now_or_never().is_none(),
            "the freed place was not given back"
        );
        let summary = egress.refusals.summary().expect("a summary");
        assert!(
            summary.starts_with("12 × wasi:http refused: more requests in flight"),
            "{summary}"
        );
    }

    /// The call's buffer: holds add up to the cap, and a dropped hold gives its bytes back.
    #[test]
    fn held_bytes_add_up_to_the_cap_and_come_back_when_dropped() {
        let pool = Buffered::new(100);
        let mut first = pool.hold();
        let mut second = pool.hold();
        assert!(first.grow(60));
        assert!(!second.grow(41), "past the cap");
        assert!(second.grow(40));
        assert!(!first.grow(1));
        drop(first);
        assert!(second.grow(60));
        drop(second);
        assert_eq!(pool.used.load(Ordering::Acquire), 0);
    }

    /// A body past what the call's buffer has left is too large, even under its own limit.
    #[tokio::test]
    async fn a_body_past_the_calls_buffer_is_too_large() {
        let pool = Buffered::new(1000);
        let mut other = pool.hold();
        assert!(other.grow(900));
        let mut held = pool.hold();
        let body = Full::new(Bytes::from(vec![0u8; 200]));
        assert!(matches!(
            collect_within(body, 10_000, &mut held).await,
            Err(Unread::TooLarge)
        ));
        drop(other);
        let body = Full::new(Bytes::from(vec![0u8; 200]));
        let bytes = collect_within(body, 10_000, &mut held)
            .await
            .expect("fits now");
        assert_eq!((bytes.len(), held.bytes), (200, 200));
    }
}
