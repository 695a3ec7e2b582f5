//! The REST API's client side: what `vigil status` and `vigil probe --apply` use to talk
//! to a running vigil.
//!
//! One request per fresh connection (hyper's HTTP/1 client), plain HTTP for `http://`
//! servers and rustls with the system trust store ([`vigil_domain::tls`]) for `https://`. The
//! bearer token is sent in the `Authorization` header and nowhere else: no error, no
//! `Debug` output and no printed answer carries it (an answer that quotes it has it
//! replaced by `***`).

use std::collections::BTreeSet;
use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::config::SecretSetting;
use vigil_api::percent_encode;
use vigil_domain::tls::{TlsClients, Trust};

/// How long connecting to the server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a read (a page of clusters) may take.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a probe asked of the server may take: the longest probe timeout a policy
/// allows (3600 s), its grace, and some slack.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3_630);

/// The largest answer read, in bytes (a page of 1000 clusters is far smaller).
pub const MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

/// The page size asked for when listing clusters (the API's largest).
const PAGE_SIZE: u32 = 1000;

/// Why a call to the server failed. The messages name the server's URL, never the token.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server URL cannot be used.
    #[error("invalid server URL {url}: {reason}")]
    InvalidUrl {
        /// The URL, without any user information.
        url: String,
        /// Why.
        reason: String,
    },
    /// No connection, no TLS session or no complete answer.
    #[error("cannot reach vigil at {url}: {reason}")]
    Unreachable {
        /// The server's URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The server answered with a problem (`application/problem+json`).
    #[error("vigil at {url} answered {problem}")]
    Problem {
        /// The server's URL.
        url: String,
        /// The problem.
        problem: Box<RemoteProblem>,
    },
    /// The server answered something that is not vigil's API.
    #[error("unexpected answer from {url}: {reason}")]
    Unexpected {
        /// The server's URL.
        url: String,
        /// What was wrong with it.
        reason: String,
    },
}

/// A problem the server reported (RFC 9457), as the API's `Problem` serializes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RemoteProblem {
    /// The stable `type` URI of the kind of error.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The kind in words.
    #[serde(default)]
    pub title: String,
    /// The HTTP status.
    #[serde(default)]
    pub status: u16,
    /// What happened to this request.
    #[serde(default)]
    pub detail: String,
    /// The input at fault, when known.
    #[serde(default)]
    pub field: Option<String>,
}

impl fmt::Display for RemoteProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status, self.title)?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        if let Some(field) = &self.field {
            write!(f, " (field: {field})")?;
        }
        Ok(())
    }
}

/// Where the server is.
#[derive(Clone)]
struct Server {
    tls: bool,
    host: String,
    port: u16,
    authority: String,
    /// The URL's path without its trailing `/` (a vigil behind a path prefix).
    base_path: String,
    /// The URL as errors show it.
    url: String,
}

/// A client of one running vigil. Cheap to clone.
#[derive(Clone)]
pub struct ApiClient {
    server: Server,
    token: Option<SecretSetting>,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The setting that names the server, for messages (`VIGIL_SERVER`).
    setting: &'static str,
}

impl fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiClient")
            .field("server", &self.server.url)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish_non_exhaustive()
    }
}

impl ApiClient {
    /// A client of the vigil at `url` (`http://HOST:PORT` or `https://HOST:PORT`, with an
    /// optional path prefix), sending `token` as a bearer token when given.
    pub fn new(url: &str, token: Option<&str>) -> Result<Self, ClientError> {
        let server = parse_server(url)?;
        let tls = if server.tls {
            let config = TlsClients::new()
                .client_config(Trust::System, None)
                .map_err(|error| ClientError::InvalidUrl {
                    url: server.url.clone(),
                    reason: error.to_string(),
                })?;
            Some(Arc::new(config))
        } else {
            None
        };
        let token = token
            .filter(|t| !t.is_empty())
            .map(|t| SecretSetting(t.to_owned()));
        Ok(Self {
            server,
            token,
            tls,
            setting: "VIGIL_SERVER",
        })
    }

    /// The same client, with messages pointing at `setting` as where the server's address
    /// comes from (instead of `VIGIL_SERVER`).
    pub fn named_by(mut self, setting: &'static str) -> Self {
        self.setting = setting;
        self
    }

    /// The server's URL, as messages show it.
    pub fn url(&self) -> &str {
        &self.server.url
    }

    /// Every cluster, by name: `GET /api/v1/clusters`, following `next` to the last page.
    /// Each cluster is the API's JSON object, unchanged.
    pub async fn clusters(&self) -> Result<Vec<serde_json::Value>, ClientError> {
        let mut clusters = Vec::new();
        let mut seen = BTreeSet::new();
        let mut after: Option<String> = None;
        loop {
            let mut target = format!("/api/v1/clusters?limit={PAGE_SIZE}");
            if let Some(after) = &after {
                let _ = write!(target, "&after={}", percent_encode(after));
            }
            let page = self.call(Method::GET, &target, READ_TIMEOUT).await?;
            let items = match page.get("items") {
                Some(serde_json::Value::Array(items)) => items.clone(),
                _ => return Err(self.unexpected("a cluster page without `items`")),
            };
            clusters.extend(items);
            match page.get("next") {
                None | Some(serde_json::Value::Null) => return Ok(clusters),
                Some(serde_json::Value::String(next)) => {
                    // A server that hands the same cursor twice would loop forever.
                    if !seen.insert(next.clone()) {
                        return Err(self.unexpected("the cluster list repeats a page"));
                    }
                    after = Some(next.clone());
                }
                Some(_) => return Err(self.unexpected("a cluster page with a bad `next`")),
            }
        }
    }

    /// Probes `cluster` now through the server, which applies the outcome under the
    /// worker's rules: `POST /api/v1/clusters/{name}/probe`. The answer is the API's
    /// `ProbeResult` JSON object.
    pub async fn probe(&self, cluster: &str) -> Result<serde_json::Value, ClientError> {
        let target = format!("/api/v1/clusters/{}/probe", percent_encode(cluster));
        self.call(Method::POST, &target, PROBE_TIMEOUT).await
    }

    /// Every plugin with its state, generation and last failure: `GET /api/v1/plugins`.
    pub async fn plugins(&self) -> Result<Vec<serde_json::Value>, ClientError> {
        match self
            .call(Method::GET, "/api/v1/plugins", READ_TIMEOUT)
            .await?
        {
            serde_json::Value::Array(plugins) => Ok(plugins),
            _ => Err(self.unexpected("a plugin list that is not a list")),
        }
    }

    /// Reloads the server's plugin directory now: `POST /api/v1/plugins/reload`. The
    /// answer is the API's `ReloadView` JSON object.
    pub async fn reload_plugins(&self) -> Result<serde_json::Value, ClientError> {
        self.call(Method::POST, "/api/v1/plugins/reload", PROBE_TIMEOUT)
            .await
    }

    fn unexpected(&self, reason: &str) -> ClientError {
        ClientError::Unexpected {
            url: self.server.url.clone(),
            reason: reason.to_owned(),
        }
    }

    fn unreachable(&self, reason: impl Into<String>) -> ClientError {
        ClientError::Unreachable {
            url: self.server.url.clone(),
            reason: self.scrub(&reason.into()),
        }
    }

    /// `text` with the token, should it appear, replaced by `***`.
    fn scrub(&self, text: &str) -> String {
        match &self.token {
            Some(token) => text.replace(token.0.as_str(), "***"),
            None => text.to_owned(),
        }
    }

    /// `GET target` over a fresh connection, connecting included within `timeout`: the
    /// status and the body, whatever the status. For vigil's probes `/healthz` and
    /// `/readyz`, whose `503` is an answer rather than a failed call.
    pub async fn get(
        &self,
        target: &str,
        timeout: Duration,
    ) -> Result<(hyper::StatusCode, Bytes), ClientError> {
        let request = self.request(Method::GET, target)?;
        match tokio::time::timeout(timeout, self.exchange(request)).await {
            Ok(answer) => answer.map(|(status, _, body)| (status, body)),
            Err(_) => Err(self.unreachable(format!(
                "no answer within {}",
                humantime::format_duration(timeout)
            ))),
        }
    }

    /// A request of `method` for `target` (a path under the server's URL), with vigil's
    /// headers and the token.
    fn request(&self, method: Method, target: &str) -> Result<Request<Empty<Bytes>>, ClientError> {
        let uri = format!("{}{target}", self.server.base_path);
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, &self.server.authority)
            .header(header::ACCEPT, "application/json")
            .header(
                header::USER_AGENT,
                concat!("vigil/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(token) = &self.token {
            let mut value =
                HeaderValue::from_str(&format!("Bearer {}", token.0)).map_err(|_| {
                    ClientError::InvalidUrl {
                        url: self.server.url.clone(),
                        reason: "VIGIL_API_TOKEN holds characters an HTTP header cannot carry"
                            .to_owned(),
                    }
                })?;
            value.set_sensitive(true);
            request = request.header(header::AUTHORIZATION, value);
        }
        request
            .body(Empty::<Bytes>::new())
            .map_err(|e| self.unexpected(&format!("invalid request: {e}")))
    }

    /// One request over a fresh connection; a 2xx JSON answer, or the error it means.
    async fn call(
        &self,
        method: Method,
        target: &str,
        timeout: Duration,
    ) -> Result<serde_json::Value, ClientError> {
        let request = self.request(method, target)?;
        let (status, content_type, body) =
            match tokio::time::timeout(timeout, self.exchange(request)).await {
                Ok(answer) => answer?,
                Err(_) => {
                    return Err(
                        self.unreachable(format!("no answer within {} s", timeout.as_secs()))
                    );
                }
            };

        let is_problem = content_type.starts_with("application/problem+json");
        if status.is_success() && !is_problem {
            return serde_json::from_slice(&body).map_err(|error| {
                self.unexpected(&format!(
                    "HTTP {status} with a body that is not JSON: {error}"
                ))
            });
        }
        if is_problem && let Ok(mut problem) = serde_json::from_slice::<RemoteProblem>(&body) {
            problem.title = self.scrub(&problem.title);
            problem.detail = self.scrub(&problem.detail);
            problem.field = problem.field.map(|f| self.scrub(&f));
            if problem.status == 0 {
                problem.status = status.as_u16();
            }
            return Err(ClientError::Problem {
                url: self.server.url.clone(),
                problem: Box::new(problem),
            });
        }
        let snippet: String = String::from_utf8_lossy(&body).chars().take(200).collect();
        Err(self.unexpected(&format!(
            "HTTP {status}{}",
            if snippet.trim().is_empty() {
                String::new()
            } else {
                format!(": {}", self.scrub(snippet.trim()))
            }
        )))
    }

    /// Connects, sends `request` and reads the whole answer.
    async fn exchange(
        &self,
        request: Request<Empty<Bytes>>,
    ) -> Result<(hyper::StatusCode, String, Bytes), ClientError> {
        let server = &self.server;
        let tcp = match tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect((server.host.as_str(), server.port)),
        )
        .await
        {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(self.unreachable(format!(
                    "connection refused (is `vigil serve` running there? see {})",
                    self.setting
                )));
            }
            Ok(Err(error)) => return Err(self.unreachable(error.to_string())),
            Err(_) => {
                return Err(self.unreachable(format!(
                    "no connection within {} s",
                    CONNECT_TIMEOUT.as_secs()
                )));
            }
        };
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            Some(config) => {
                let name = vigil_domain::tls::server_name(&server.host, None)
                    .map_err(|e| self.unreachable(e.to_string()))?;
                let stream = TlsConnector::from(Arc::clone(config))
                    .connect(name, tcp)
                    .await
                    .map_err(|e| self.unreachable(format!("TLS handshake failed: {e}")))?;
                self.send_over(TokioIo::new(stream), request).await
            }
            None => self.send_over(TokioIo::new(tcp), request).await,
        }
    }

    async fn send_over<I>(
        &self,
        io: I,
        request: Request<Empty<Bytes>>,
    ) -> Result<(hyper::StatusCode, String, Bytes), ClientError>
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| self.unreachable(format!("HTTP handshake failed: {e}")))?;
        let driver = tokio::spawn(connection);
        let result = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| self.unreachable(format!("the request failed: {e}")))?;
            let (parts, body) = response.into_parts();
            let content_type = parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_ascii_lowercase();
            let body = Limited::new(body, MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| self.unreachable(format!("reading the answer failed: {e}")))?
                .to_bytes();
            Ok((parts.status, content_type, body))
        }
        .await;
        driver.abort();
        result
    }
}

/// Checks and splits the server URL. User information is refused (the token goes in
/// `VIGIL_API_TOKEN`), so that no password can reach a message.
fn parse_server(url: &str) -> Result<Server, ClientError> {
    let invalid = |shown: &str, reason: &str| ClientError::InvalidUrl {
        url: shown.to_owned(),
        reason: reason.to_owned(),
    };
    let trimmed = url.trim();
    if let Some(authority) = trimmed
        .split_once("://")
        .map(|(_, rest)| rest.split('/').next().unwrap_or(""))
        && authority.contains('@')
    {
        return Err(invalid(
            "(a URL with user information)",
            "user information is not accepted in the URL; put the token in VIGIL_API_TOKEN",
        ));
    }
    let uri: Uri = trimmed
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| invalid(trimmed, &e.to_string()))?;
    let tls = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => {
            return Err(invalid(
                trimmed,
                "expected http://HOST:PORT or https://HOST:PORT",
            ));
        }
    };
    let Some(authority) = uri.authority() else {
        return Err(invalid(trimmed, "no host"));
    };
    if uri.query().is_some() {
        return Err(invalid(trimmed, "a query is not accepted"));
    }
    let host = authority.host();
    if host.is_empty() {
        return Err(invalid(trimmed, "no host"));
    }
    // `[::1]` connects as `::1`.
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let base_path = uri.path().trim_end_matches('/').to_owned();
    Ok(Server {
        tls,
        host,
        port,
        authority: authority.as_str().to_owned(),
        base_path,
        url: trimmed.trim_end_matches('/').to_owned(),
    })
}

/// The fields of a cluster that `vigil status` shows in its table.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ClusterSummary {
    /// Its name.
    pub name: String,
    /// `ONLINE`, `OFFLINE` or `UNKNOWN`.
    #[serde(default)]
    pub status: String,
    /// Its conditions' types.
    #[serde(default)]
    pub conditions: Vec<ConditionSummary>,
    /// The last outcome's label.
    #[serde(default)]
    pub last_outcome: Option<String>,
    /// The last non-healthy outcome's reason class.
    #[serde(default)]
    pub reason_class: Option<String>,
    /// When it was last probed (RFC 3339).
    #[serde(default)]
    pub last_probe: Option<String>,
    /// The plugin chosen for it; absent when routed by priority.
    #[serde(default)]
    pub plugin: Option<String>,
}

/// A condition, as `vigil status` shows it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ConditionSummary {
    /// Its type.
    #[serde(rename = "type", default)]
    pub kind: String,
}

/// The table `vigil status` prints for `clusters` (API cluster objects), with probe
/// times relative to `now`.
pub fn status_table(clusters: &[serde_json::Value], now: SystemTime) -> String {
    let mut out = String::new();
    if clusters.is_empty() {
        out.push_str("No cluster.\n");
        return out;
    }
    let rows: Vec<[String; 6]> = clusters
        .iter()
        .map(|value| {
            let cluster: ClusterSummary = serde_json::from_value(value.clone()).unwrap_or_default();
            let conditions = if cluster.conditions.is_empty() {
                "-".to_owned()
            } else {
                let kinds: Vec<&str> = cluster.conditions.iter().map(|c| c.kind.as_str()).collect();
                kinds.join(",")
            };
            let outcome = match (&cluster.last_outcome, &cluster.reason_class) {
                (None, _) => "-".to_owned(),
                (Some(outcome), None) => outcome.clone(),
                (Some(outcome), Some(class)) => format!("{outcome} ({class})"),
            };
            let last_probe = cluster
                .last_probe
                .as_deref()
                .map_or_else(|| "never".to_owned(), |at| ago(at, now));
            [
                cluster.name,
                cluster.status,
                conditions,
                outcome,
                last_probe,
                cluster.plugin.unwrap_or_else(|| "auto".to_owned()),
            ]
        })
        .collect();
    let header = [
        "NAME",
        "STATUS",
        "CONDITIONS",
        "LAST OUTCOME",
        "LAST PROBE",
        "PLUGIN",
    ]
    .map(str::to_owned);
    crate::output::write_table(&mut out, &header, &rows);
    out
}

/// `at` (RFC 3339) relative to `now`: `12s ago`, `3m ago`, `5h ago`, `2d ago`; the text
/// itself when it does not parse.
pub fn ago(at: &str, now: SystemTime) -> String {
    let Ok(then) = humantime::parse_rfc3339_weak(at) else {
        return at.to_owned();
    };
    let Ok(elapsed) = now.duration_since(then) else {
        // The server's clock is ahead of this one.
        return "just now".to_owned();
    };
    let seconds = elapsed.as_secs();
    match seconds {
        0..60 => format!("{seconds}s ago"),
        60..3_600 => format!("{}m ago", seconds / 60),
        3_600..86_400 => format!("{}h ago", seconds / 3_600),
        _ => format!("{}d ago", seconds / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls() {
        let check = |url: &str| parse_server(url).map(|s| (s.tls, s.host, s.port, s.base_path));
        assert_eq!(
            check("http://127.0.0.1:8080").unwrap(),
            (false, "127.0.0.1".to_owned(), 8080, String::new())
        );
        assert_eq!(
            check("https://vigil.example/prefix/").unwrap(),
            (true, "vigil.example".to_owned(), 443, "/prefix".to_owned())
        );
        assert_eq!(
            check("http://[::1]:9000").unwrap(),
            (false, "::1".to_owned(), 9000, String::new())
        );
        assert!(check("127.0.0.1:8080").is_err());
        assert!(check("ftp://127.0.0.1").is_err());
        let error = check("http://admin:hunter2-password@127.0.0.1:8080")
            .unwrap_err()
            .to_string();
        assert!(!error.contains("hunter2"), "{error}");
    }

    #[test]
    fn probe_times_are_relative() {
        let now = humantime::parse_rfc3339("2025-01-02T00:00:00Z").unwrap();
        let check = |at: &str| ago(at, now);
        assert_eq!(check("2025-01-01T23:59:48.000Z"), "12s ago");
        assert_eq!(check("2025-01-01T23:57:00Z"), "3m ago");
        assert_eq!(check("2025-01-01T19:00:00Z"), "5h ago");
        assert_eq!(check("2024-12-30T00:00:00Z"), "3d ago");
        assert_eq!(check("2025-01-02T00:00:05Z"), "just now");
        assert_eq!(check("yesterday"), "yesterday");
    }

    #[test]
    fn the_table_shows_outcome_and_class() {
        let now = humantime::parse_rfc3339("2025-01-02T00:00:00Z").unwrap();
        let clusters = vec![
            serde_json::json!({"name": "a", "status": "ONLINE", "conditions": [],
                "last_outcome": "healthy", "reason_class": null,
                "last_probe": "2025-01-01T23:59:58Z", "plugin": null}),
            serde_json::json!({"name": "b", "status": "OFFLINE",
                "conditions": [{"type": "probe-stale"}],
                "last_outcome": "unhealthy", "reason_class": "refused",
                "last_probe": null, "plugin": "kubeconfig-file"}),
        ];
        let table = status_table(&clusters, now);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines,
            [
                "NAME  STATUS   CONDITIONS   LAST OUTCOME         LAST PROBE  PLUGIN",
                "a     ONLINE   -            healthy              2s ago      auto",
                "b     OFFLINE  probe-stale  unhealthy (refused)  never       kubeconfig-file",
            ]
        );
    }
}
