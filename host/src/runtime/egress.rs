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

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Uri};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tracing::{debug, warn};
use wasmtime_wasi_http::{RequestOptions, WasiBody, WasiHttpHooks};

use super::bindings::vigil::plugin::http;
use super::sandbox::{CallCluster, CallRecord, CallState, MAX_CREDENTIAL_FILE_BYTES};
use crate::reference::{ConnectionMaterial, Material, Reference};
use crate::tls::{self, TlsClients, TlsError, Trust};

/// The largest response body handed to a plugin; a bigger one is `too-large`.
pub const MAX_RESPONSE_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The largest request body a plugin may send through `wasi:http` (a probe sends little;
/// the bound keeps a guest from making the host buffer without end).
pub const MAX_REQUEST_BODY_BYTES: usize = 1024 * 1024;

/// A host and port a request may go to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Destination {
    host: String,
    /// `None` allows any port (an `allowed-hosts` entry without one).
    port: Option<u16>,
}

impl Destination {
    fn matches(&self, host: &str, port: u16) -> bool {
        self.host.eq_ignore_ascii_case(host) && self.port.is_none_or(|p| p == port)
    }
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
            let entry = entry.trim();
            let (host, port) = match entry.rsplit_once(':') {
                Some((host, port)) if !host.ends_with(':') => match port.parse() {
                    Ok(port) => (host, Some(port)),
                    Err(_) => (entry, None),
                },
                _ => (entry, None),
            };
            policy.extra.push(Destination {
                host: host.trim_matches(['[', ']']).to_ascii_lowercase(),
                port,
            });
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

/// What `wasi:http` futures learn after the host call that started them returned: they
/// run in tasks of their own, apart from the store.
#[derive(Debug, Default)]
struct LateRecord {
    cluster_timed_out: AtomicBool,
    /// 0 when no cluster request was answered 401 or 403.
    auth_rejected: AtomicU16,
}

/// One call's egress: the plugin's grant, the destinations it may reach, what it has sent,
/// and the client that sends. The `wasi:http` hooks of the call's store.
pub(crate) struct Egress {
    plugin: Arc<str>,
    granted: bool,
    pub(crate) policy: EgressPolicy,
    record: CallRecord,
    late: Arc<LateRecord>,
    clients: TlsClients,
    deadline: Instant,
    cluster_tls: Option<Arc<ClusterTls>>,
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
    ) -> Self {
        let cluster_tls = cluster
            .and_then(|c| c.material.as_deref())
            .and_then(ClusterTls::of);
        Self {
            plugin,
            granted,
            policy,
            record: CallRecord::default(),
            late: Arc::default(),
            clients,
            deadline,
            cluster_tls,
        }
    }

    /// Material served during the call (a kubeconfig read from a Secret): its selected
    /// server becomes a cluster destination, and `wasi:http` requests to it are verified
    /// with its TLS settings, unless the call's cluster already had material of its own.
    pub(crate) fn serve_material(&mut self, material: &ConnectionMaterial) {
        self.policy.add_cluster_url(&material.server);
        if self.cluster_tls.is_none() {
            self.cluster_tls = ClusterTls::of(material);
        }
    }

    /// What the host saw of this call's requests, those still settling included.
    pub(crate) fn record(&self) -> CallRecord {
        let mut record = self.record.clone();
        record.cluster_timed_out |= self.late.cluster_timed_out.load(Ordering::Acquire);
        if record.auth_rejected.is_none() {
            let status = self.late.auth_rejected.load(Ordering::Acquire);
            record.auth_rejected = (status != 0).then_some(status);
        }
        record
    }

    /// Checks a request against the grant and the destinations, and records it: a
    /// denial (logged, naming the plugin and the host, never the URL, which may carry
    /// credentials) or a request to the cluster.
    fn admit(&mut self, uri: &Uri, door: Door) -> Result<Admitted, Refused> {
        if !self.granted {
            warn!(plugin = %self.plugin, "{} denied: http is not granted", door.name());
            return Err(Refused::NotGranted);
        }
        let https = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(Refused::Scheme),
        };
        let (host, port) = host_port(uri).ok_or(Refused::NoHost)?;
        let Some(route) = self.policy.route(&host, port) else {
            warn!(plugin = %self.plugin, host = %host, port, "{} denied: host outside the plugin's egress grant", door.name());
            self.record.denied.push(format!("{host}:{port}"));
            return Err(Refused::Denied { host, port });
        };
        if route == Route::Cluster {
            self.record.cluster_contacted = true;
        }
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

impl http::Host for CallState {
    async fn send(&mut self, request: http::Request) -> Result<http::Response, http::HttpError> {
        use http::HttpError as E;
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
        let mut bound = admitted.bound;
        if let Some(ms) = request.timeout_ms {
            bound = bound.min(Duration::from_millis(u64::from(ms)));
        }
        let cluster = admitted.route == Route::Cluster;
        if bound.is_zero() {
            egress.record.cluster_timed_out |= cluster;
            return Err(E::Timeout);
        }
        let tls = if admitted.https {
            let options = request.tls.as_ref();
            let trust = match options {
                Some(t) if t.insecure_skip_verify => Trust::SkipVerify,
                Some(http::TlsOptions {
                    ca_pem: Some(ca), ..
                }) => Trust::Ca(ca),
                _ => Trust::System,
            };
            let config = egress
                .clients
                .client_config_parts(
                    trust,
                    options.and_then(|t| t.client_certificate_pem.as_deref()),
                    options.and_then(|t| t.client_key_pem.as_deref()),
                )
                .map_err(|e| E::Tls(e.to_string()))?;
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
        let outgoing = Outgoing {
            method,
            target: origin_form(&uri),
            authority: authority(&uri, &admitted),
            headers,
            body: Bytes::from(request.body.unwrap_or_default()),
            host: admitted.host,
            port: admitted.port,
            tls,
        };
        let started = Instant::now();
        let Ok(result) = tokio::time::timeout(bound, exchange(outgoing)).await else {
            egress.record.cluster_timed_out |= cluster;
            return Err(E::Timeout);
        };
        let incoming = result.map_err(|error| match error {
            WireError::Refused(message) => E::Refused(message),
            WireError::Dns(message) => E::Dns(message),
            WireError::Tls(message) => E::Tls(message),
            WireError::Protocol(message) => E::Protocol(message),
            WireError::TooLarge => E::TooLarge,
        })?;
        if cluster && matches!(incoming.status, 401 | 403) {
            egress.record.auth_rejected = Some(incoming.status);
        }
        Ok(http::Response {
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
        let mut bound = admitted.bound;
        if let Some(options) = options {
            // The guest's connect and first-byte timeouts together bound the exchange.
            let guest = [options.connect_timeout, options.first_byte_timeout]
                .into_iter()
                .flatten()
                .reduce(Duration::saturating_add);
            if let Some(guest) = guest {
                bound = bound.min(guest);
            }
        }
        let send = WasiSend {
            cluster_tls: self.wasi_trust(&admitted),
            admitted,
            bound,
            clients: self.clients.clone(),
            late: Arc::clone(&self.late),
        };
        Box::new(send.run(request))
    }
}

/// One admitted `wasi:http` request, sent apart from the store (wasmtime spawns the
/// future), so it carries all it needs.
struct WasiSend {
    admitted: Admitted,
    bound: Duration,
    cluster_tls: Option<Arc<ClusterTls>>,
    clients: TlsClients,
    late: Arc<LateRecord>,
}

impl WasiSend {
    async fn run(self, request: hyper::Request<WasiBody>) -> SendResult {
        use wasmtime_wasi_http::Error as E;
        let cluster = self.admitted.route == Route::Cluster;
        let late = Arc::clone(&self.late);
        let bound = self.bound;
        let incoming = if bound.is_zero() {
            None
        } else {
            tokio::time::timeout(bound, self.exchange(request))
                .await
                .ok()
        };
        let Some(incoming) = incoming else {
            if cluster {
                late.cluster_timed_out.store(true, Ordering::Release);
            }
            return Err(E::ConnectionReadTimeout);
        };
        let incoming = incoming?;
        if cluster && matches!(incoming.status, 401 | 403) {
            late.auth_rejected.store(incoming.status, Ordering::Release);
        }
        let body: WasiBody = Full::new(incoming.body)
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

    async fn exchange(
        self,
        request: hyper::Request<WasiBody>,
    ) -> Result<Incoming, wasmtime_wasi_http::Error> {
        use wasmtime_wasi_http::Error as E;
        let Self {
            admitted,
            cluster_tls,
            clients,
            ..
        } = self;
        let tls = if admitted.https {
            let config = wasi_tls_config(&clients, cluster_tls.as_deref())
                .await
                .map_err(|_| E::TlsCertificateError)?;
            let name = cluster_tls.as_ref().and_then(|t| t.server_name.as_deref());
            let name =
                tls::server_name(&admitted.host, name).map_err(|_| E::TlsCertificateError)?;
            Some((config, name))
        } else {
            None
        };
        let (parts, body) = request.into_parts();
        let body = Limited::new(body, MAX_REQUEST_BODY_BYTES)
            .collect()
            .await
            .map_err(|_| E::HttpRequestBodySize(None))?
            .to_bytes();
        let outgoing = Outgoing {
            method: parts.method,
            target: origin_form(&parts.uri),
            authority: authority(&parts.uri, &admitted),
            headers: parts.headers,
            body,
            host: admitted.host,
            port: admitted.port,
            tls,
        };
        exchange(outgoing).await.map_err(|error| match error {
            WireError::Refused(_) => E::ConnectionRefused,
            WireError::Dns(message) => E::DnsError {
                rcode: Some(message),
                info_code: None,
            },
            WireError::Tls(_) => E::TlsCertificateError,
            WireError::Protocol(_) => E::HttpProtocolError,
            WireError::TooLarge => {
                E::HttpResponseBodySize(u64::try_from(MAX_RESPONSE_BODY_BYTES).ok())
            }
        })
    }
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
    Refused(String),
    Dns(String),
    Tls(String),
    Protocol(String),
    TooLarge,
}

/// One request over a fresh connection (a reused one would hide certificate rotation).
async fn exchange(outgoing: Outgoing) -> Result<Incoming, WireError> {
    let Outgoing {
        method,
        host,
        port,
        target,
        authority,
        mut headers,
        body,
        tls,
    } = outgoing;
    let tcp = match TcpStream::connect((host.as_str(), port)).await {
        Ok(tcp) => tcp,
        Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(WireError::Refused(format!(
                "connection refused by {host}:{port}"
            )));
        }
        Err(error) if error.to_string().contains("lookup") => {
            return Err(WireError::Dns(format!("cannot resolve {host}")));
        }
        Err(error) => {
            return Err(WireError::Refused(format!(
                "cannot connect to {host}:{port}: {error}"
            )));
        }
    };
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
            send_over(TokioIo::new(stream), request).await
        }
        None => send_over(TokioIo::new(tcp), request).await,
    }
}

async fn send_over<I>(io: I, request: hyper::Request<Full<Bytes>>) -> Result<Incoming, WireError>
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
    let body = Limited::new(body, MAX_RESPONSE_BODY_BYTES)
        .collect()
        .await
        .map_err(|error| {
            if error.is::<http_body_util::LengthLimitError>() {
                WireError::TooLarge
            } else {
                WireError::Protocol(format!("reading the body failed: {error}"))
            }
        })?
        .to_bytes();
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
