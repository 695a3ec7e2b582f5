//! Requests to a Kubernetes API server, authenticated as a kubeconfig selection says, and
//! the health check that vigil's first-party kubeconfig plugins make ([`probe_kubeconfig`]).

use std::fmt;

use crate::credentials::{self, CredentialsError};
use crate::http::{self, HttpError, Request, Response, TlsOptions};
use crate::kubeconfig::{Material, Selection, select};
use crate::{ProbeError, ProbeReport, ReasonClass, SecretBytes};

/// The health check: list namespaces, at most one (a cheap request every API server answers).
pub const HEALTH_PATH: &str = "/api/v1/namespaces?limit=1";

/// The longest piece of an API server's error message quoted in a report or kept in a
/// [`ListError`], in characters.
const MAX_QUOTED_CHARS: usize = 200;

/// Probes the API server of a kubeconfig as vigil's first-party plugins do: selects
/// `context` (else the kubeconfig's `current-context`) exactly as vigil's host does, reads
/// the files the context names with `read_file` (normally [`credentials::read_file`]), and
/// sends one `GET {server}/api/v1/namespaces?limit=1` with the context's TLS material and
/// bearer token; the answer becomes the probe's result by [`health_outcome`].
///
/// `source` names the kubeconfig at the start of every message about it, e.g.
/// `kubeconfig /etc/kube/config` (`kubeconfig /etc/kube/config: context "x" not found in
/// the kubeconfig`). A context, user or file that cannot be used makes the cluster not
/// probeable (`reference-broken`, or `exec-credentials` for credential plugins).
pub fn probe_kubeconfig(
    kubeconfig: &SecretBytes,
    context: Option<&str>,
    source: &str,
    read_file: impl FnMut(&str) -> Result<SecretBytes, CredentialsError>,
) -> Result<ProbeReport, ProbeError> {
    let selection = select(kubeconfig.expose_secret(), context)
        .map_err(|error| ProbeError::not_probeable(error.class(), format!("{source}: {error}")))?;
    probe_selection(&selection, source, read_file)
}

/// The health check of [`probe_kubeconfig`] on a context already selected — by
/// [`select`], or by vigil ([`credentials::context`]): reads the files the selection names
/// with `read_file`, sends one `GET {server}/api/v1/namespaces?limit=1` with its TLS
/// material and bearer token, and makes the answer the probe's result by
/// [`health_outcome`]. `source` starts every message about the kubeconfig, as for
/// [`probe_kubeconfig`].
pub fn probe_selection(
    selection: &Selection,
    source: &str,
    read_file: impl FnMut(&str) -> Result<SecretBytes, CredentialsError>,
) -> Result<ProbeReport, ProbeError> {
    // No debug line of its own: vigil logs where each request goes (at debug), and even the
    // question whether a level is recorded is a host call, which costs a probe more than
    // the line is worth (BENCHMARKS.md, "Plugin runtime overhead").
    let server =
        ApiServer::connect_with(selection, read_file).map_err(|error| prefixed(error, source))?;
    health_outcome(server.get(HEALTH_PATH, None))
}

/// The health check of [`probe_selection`] on the context vigil resolved for this probe
/// ([`credentials::context`]), and, when its user gets its credentials from an `exec`
/// command, with the credential vigil ran it for ([`credentials::exec_credential`]): a
/// 401 to that credential is retried once with a fresh one (vigil runs the command again).
/// `source` starts every message about the kubeconfig.
pub fn probe_resolved_context(
    source: &str,
    read_file: impl FnMut(&str) -> Result<SecretBytes, CredentialsError>,
) -> Result<ProbeReport, ProbeError> {
    let selection = credentials::context().map_err(|error| error.probe_error(source))?;
    probe_with_exec(&selection, source, read_file, credentials::exec_credential)
}

/// [`probe_resolved_context`] on `selection`, with `exec` asked for the user's `exec`
/// credential when the selection carries none of its own (normally
/// [`credentials::exec_credential`]; `not-found` means the user has none).
pub fn probe_with_exec(
    selection: &Selection,
    source: &str,
    mut read_file: impl FnMut(&str) -> Result<SecretBytes, CredentialsError>,
    mut exec: impl FnMut() -> Result<credentials::ExecCredential, CredentialsError>,
) -> Result<ProbeReport, ProbeError> {
    let own = selection.token.is_some() || selection.client_certificate.is_some();
    if own || selection.user.is_none() {
        return probe_selection(selection, source, read_file);
    }
    let credential = match exec() {
        Ok(credential) => credential,
        Err(CredentialsError::NotFound(_)) => {
            return probe_selection(selection, source, read_file);
        }
        Err(error) => return Err(error.probe_error(source)),
    };
    let report = probe_selection(
        &selection.with_exec_credential(&credential),
        source,
        &mut read_file,
    )?;
    let refused = report
        .details
        .iter()
        .any(|(key, value)| key == "status" && value == "401");
    if !refused {
        return Ok(report);
    }
    // vigil forgot the refused credential: the command runs again, once.
    let fresh = exec().map_err(|error| error.probe_error(source))?;
    probe_selection(&selection.with_exec_credential(&fresh), source, read_file)
}

/// A failure's message with `source: ` in front.
fn prefixed(error: ProbeError, source: &str) -> ProbeError {
    match error {
        ProbeError::NotProbeable(mut failure) => {
            failure.message = format!("{source}: {}", failure.message);
            ProbeError::NotProbeable(failure)
        }
        ProbeError::Inconclusive(mut failure) => {
            failure.message = format!("{source}: {}", failure.message);
            ProbeError::Inconclusive(failure)
        }
    }
}

/// The result of the health check ([`HEALTH_PATH`]) from its answer:
///
/// | what happened | outcome |
/// |---|---|
/// | 200 | healthy, with the request's latency |
/// | 401, 403 | credentials-rejected (`unauthorized`) |
/// | 5xx | unhealthy `server-error` |
/// | any other status | unhealthy `bad-response` |
/// | timeout, refused, TLS, DNS | unhealthy with that class |
/// | anything else on the wire, oversized body | unhealthy `bad-response` |
/// | request denied by vigil | inconclusive `denied` |
///
/// A Kubernetes `Status` body's message is quoted (one line, cut short), and the status is
/// a detail of the report.
pub fn health_outcome(result: Result<Response, HttpError>) -> Result<ProbeReport, ProbeError> {
    let response = match result {
        Ok(response) => response,
        Err(error) => return error.probe_result(),
    };
    let status = response.status;
    let latency = response.latency_ms;
    let report = match status {
        200 => ProbeReport::healthy(latency),
        401 | 403 => ProbeReport::credentials_rejected(
            format!(
                "the API server refused the credentials ({status}){}",
                server_says(&response)
            ),
            latency,
        ),
        500..=599 => ProbeReport::unhealthy(
            ReasonClass::ServerError,
            format!("the API server answered {status}{}", server_says(&response)),
            latency,
        ),
        _ => ProbeReport::unhealthy(
            ReasonClass::BadResponse,
            format!(
                "listing namespaces answered {status}, not 200{}",
                server_says(&response)
            ),
            latency,
        ),
    };
    Ok(report.with_detail("status", status.to_string()))
}

/// `: MESSAGE` from a Kubernetes `Status` body, when the response carries one: it says why
/// (`Unauthorized`, `etcdserver: request timed out`, …). Empty otherwise.
fn server_says(response: &Response) -> String {
    serde_json::from_slice::<serde_json::Value>(&response.body)
        .ok()
        .as_ref()
        .and_then(|status| status.get("message"))
        .and_then(serde_json::Value::as_str)
        .map(|message| {
            let one_line: String = message
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .take(MAX_QUOTED_CHARS)
                .collect();
            format!(": {one_line}")
        })
        .unwrap_or_default()
}

/// The page size [`ApiServer::list`] asks for when given none: what `kubectl` uses for its
/// own paged lists.
pub const DEFAULT_PAGE_SIZE: u32 = 500;

/// Why a list could not be read completely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListError {
    /// A page got no answer (timeout, refused, TLS, denied by vigil, …).
    Http(HttpError),
    /// A page was answered with a status other than 200 (e.g. 403 when the credentials may
    /// not list the kind). `message` is the server's, shortened.
    Status {
        /// The HTTP status.
        status: u16,
        /// What the server said (the `message` of its `Status` body, if any).
        message: String,
    },
    /// A page's body is not a list of the expected items.
    Malformed(String),
}

impl ListError {
    /// The reason class: the HTTP error's own, `unauthorized` for 401 and 403,
    /// `server-error` for 5xx, `bad-response` otherwise.
    pub fn reason_class(&self) -> ReasonClass {
        match self {
            Self::Http(error) => error.reason_class(),
            Self::Status {
                status: 401 | 403, ..
            } => ReasonClass::Unauthorized,
            Self::Status {
                status: 500..=599, ..
            } => ReasonClass::ServerError,
            Self::Status { .. } | Self::Malformed(_) => ReasonClass::BadResponse,
        }
    }

    /// One line for an operator.
    pub fn describe(&self) -> String {
        match self {
            Self::Http(error) => error.describe(),
            Self::Status { status, message } if message.is_empty() => {
                format!("the API server answered {status}")
            }
            Self::Status { status, message } => {
                format!("the API server answered {status}: {message}")
            }
            Self::Malformed(why) => format!("the API server's list is malformed: {why}"),
        }
    }
}

/// One page of a list: its items and the token of the next page.
#[derive(serde::Deserialize)]
struct Page<T> {
    #[serde(default = "Option::default")]
    items: Option<Vec<T>>,
    #[serde(default)]
    metadata: PageMetadata,
}

#[derive(Default, serde::Deserialize)]
struct PageMetadata {
    #[serde(rename = "continue", default)]
    next: Option<String>,
}

/// A Kubernetes `Status` body, for its message.
#[derive(serde::Deserialize)]
struct StatusBody {
    #[serde(default)]
    message: String,
}

/// A Kubernetes API server, ready to be sent requests: its URL, the TLS options (CA, client
/// certificate and key, server name, verification) and the headers (bearer token) of a
/// [`Selection`], with every file it names read already.
///
/// ```no_run
/// use vigil_plugin_sdk::apiserver::ApiServer;
/// use vigil_plugin_sdk::kubeconfig::select;
/// use vigil_plugin_sdk::{credentials, ProbeError};
///
/// # fn probe() -> Result<(), ProbeError> {
/// let kubeconfig = credentials::kubeconfig().map_err(|e| e.probe_error("the kubeconfig"))?;
/// let selection = select(kubeconfig.expose_secret(), None)
///     .map_err(|e| ProbeError::not_probeable(e.class(), e.to_string()))?;
/// let server = ApiServer::connect(&selection)?;
/// let response = server.get("/version", None);
/// # Ok(()) }
/// ```
///
/// `Debug` shows the URL and which credentials are set, never their values.
#[derive(Clone)]
pub struct ApiServer {
    base_url: String,
    tls: Option<TlsOptions>,
    headers: Vec<(String, String)>,
}

impl ApiServer {
    /// Reads what `selection` needs through [`credentials::read_file`] and prepares the
    /// requests.
    ///
    /// A file that is missing or unusable, an empty token file, or material that is not PEM
    /// makes the cluster not probeable (`reference-broken`); a read the host denies makes the
    /// probe inconclusive (`denied`).
    pub fn connect(selection: &Selection) -> Result<Self, ProbeError> {
        Self::connect_with(selection, credentials::read_file)
    }

    /// [`ApiServer::connect`] with another way to read files: `read_file` gets each path as
    /// written in the kubeconfig. For tests, and for plugins that find files elsewhere.
    pub fn connect_with(
        selection: &Selection,
        mut read_file: impl FnMut(&str) -> Result<SecretBytes, CredentialsError>,
    ) -> Result<Self, ProbeError> {
        let mut load =
            |material: &Option<Material>, what: &str| -> Result<Option<SecretBytes>, ProbeError> {
                match material {
                    None => Ok(None),
                    Some(Material::Inline(bytes)) => Ok(Some(bytes.clone())),
                    Some(Material::File(path)) => read_file(path)
                        .map(Some)
                        .map_err(|error| error.probe_error(&format!("the {what} file {path}"))),
                }
            };
        let ca = load(&selection.ca, "certificate-authority")?;
        let client_certificate = load(&selection.client_certificate, "client-certificate")?;
        let client_key = load(&selection.client_key, "client-key")?;
        let token = load(&selection.token, "token")?;

        for (bytes, what) in [
            (&ca, "certificate authority"),
            (&client_certificate, "client certificate"),
            (&client_key, "client key"),
        ] {
            if let Some(bytes) = bytes
                && !looks_like_pem(bytes.expose_secret())
            {
                return Err(broken(format!(
                    "the {what} of user {:?} / cluster {:?} is not PEM",
                    selection.user.as_deref().unwrap_or_default(),
                    selection.cluster
                )));
            }
        }

        let mut headers = vec![("Accept".to_owned(), "application/json".to_owned())];
        if let Some(token) = token {
            headers.push((
                "Authorization".to_owned(),
                format!("Bearer {}", bearer_token(&token, selection)?),
            ));
        }
        let https = selection
            .server
            .get(..8)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"));
        let tls = https.then(|| TlsOptions {
            ca_pem: ca.map(SecretBytes::into_exposed),
            client_certificate_pem: client_certificate.map(SecretBytes::into_exposed),
            client_key_pem: client_key.map(SecretBytes::into_exposed),
            server_name: selection.tls_server_name.clone(),
            insecure_skip_verify: selection.insecure_skip_tls_verify,
        });
        Ok(Self {
            base_url: selection.server.trim_end_matches('/').to_owned(),
            tls,
            headers,
        })
    }

    /// The server's URL, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The absolute URL of `path_and_query` (which starts with `/`) on this server. A
    /// server URL with a path (a proxy's `https://proxy/k8s/clusters/c-1`) keeps it.
    pub fn url(&self, path_and_query: &str) -> String {
        format!("{}{path_and_query}", self.base_url)
    }

    /// A request for `path_and_query`, with this server's TLS options and headers.
    pub fn request(&self, method: &str, path_and_query: &str) -> Request {
        Request {
            method: method.to_owned(),
            url: self.url(path_and_query),
            headers: self.headers.clone(),
            body: None,
            tls: self.tls.clone(),
            timeout_ms: None,
        }
    }

    /// `GET`s `path_and_query`, bounded by `timeout_ms` if given (and always by what is left
    /// of the probe's budget).
    pub fn get(
        &self,
        path_and_query: &str,
        timeout_ms: Option<u32>,
    ) -> Result<Response, HttpError> {
        let mut request = self.request("GET", path_and_query);
        request.timeout_ms = timeout_ms;
        http::send(&request)
    }

    /// Lists a collection (`/api/v1/pods`, `/apis/apps/v1/deployments`, …) page by page,
    /// `limit` items at a time (`limit` and `continue`, as `kubectl` pages), and returns the
    /// items of every page read as `T`. Each page is parsed as soon as it arrives, so only
    /// the typed items stay in memory: give `T` just the fields you need.
    ///
    /// `path` may carry a query already (e.g. a `labelSelector`). The first page that fails
    /// ends the list with its error.
    pub fn list<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        limit: u32,
    ) -> Result<Vec<T>, ListError> {
        self.list_with(path, limit, http::send)
    }

    /// [`ApiServer::list`] with another way to send requests. For tests.
    pub fn list_with<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        limit: u32,
        mut send: impl FnMut(&Request) -> Result<Response, HttpError>,
    ) -> Result<Vec<T>, ListError> {
        let limit = if limit == 0 { DEFAULT_PAGE_SIZE } else { limit };
        let separator = if path.contains('?') { '&' } else { '?' };
        let mut items = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let mut query = format!("{path}{separator}limit={limit}");
            if let Some(token) = &next {
                query.push_str("&continue=");
                query.push_str(&percent_encode(token));
            }
            let response = send(&self.request("GET", &query)).map_err(ListError::Http)?;
            if response.status != 200 {
                let message = serde_json::from_slice::<StatusBody>(&response.body)
                    .map(|body| body.message.chars().take(MAX_QUOTED_CHARS).collect())
                    .unwrap_or_default();
                return Err(ListError::Status {
                    status: response.status,
                    message,
                });
            }
            let page: Page<T> = serde_json::from_slice(&response.body)
                .map_err(|error| ListError::Malformed(error.to_string()))?;
            items.extend(page.items.unwrap_or_default());
            match page.metadata.next.filter(|token| !token.is_empty()) {
                Some(token) if next.as_ref() == Some(&token) => {
                    return Err(ListError::Malformed(
                        "the server sent the same continue token twice".to_owned(),
                    ));
                }
                Some(token) => next = Some(token),
                None => return Ok(items),
            }
        }
    }
}

/// Percent-encodes a query value (continue tokens are base64, with `+`, `/` and `=`).
fn percent_encode(value: &str) -> String {
    let mut encoded = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

impl fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tls = self.tls.as_ref().map(|tls| {
            format!(
                "ca: {}, client certificate: {}, server name: {:?}, insecure: {}",
                tls.ca_pem.is_some(),
                tls.client_certificate_pem.is_some(),
                tls.server_name,
                tls.insecure_skip_verify
            )
        });
        let header_names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("ApiServer")
            .field("base_url", &self.base_url)
            .field("tls", &tls)
            .field("headers", &header_names)
            .finish()
    }
}

fn broken(message: String) -> ProbeError {
    ProbeError::not_probeable(ReasonClass::ReferenceBroken, message)
}

/// Whether bytes look like PEM: a `-----BEGIN ` line. A cheap check that turns a wrong file
/// into `reference-broken` here instead of a TLS failure that would blame the cluster.
fn looks_like_pem(bytes: &[u8]) -> bool {
    bytes.windows(11).any(|window| window == b"-----BEGIN ")
}

/// The token as sent: a token file's content without surrounding white space (client-go
/// trims it too); refused when empty or when it could break the header.
fn bearer_token(token: &SecretBytes, selection: &Selection) -> Result<String, ProbeError> {
    // Formatted only for an error.
    let owner = || {
        format!(
            "user {:?} of context {:?}",
            selection.user.as_deref().unwrap_or_default(),
            selection.context
        )
    };
    let text = std::str::from_utf8(token.expose_secret())
        .map_err(|_| broken(format!("the bearer token of {} is not text", owner())))?
        .trim();
    if text.is_empty() {
        return Err(broken(format!("the bearer token of {} is empty", owner())));
    }
    if text.chars().any(char::is_control) {
        return Err(broken(format!(
            "the bearer token of {} contains control characters",
            owner()
        )));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;

    const PEM: &[u8] = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn kubeconfig(server: &str, cluster: &str, user: &str) -> Vec<u8> {
        format!(
            "clusters: [{{name: c, cluster: {{server: '{server}', {cluster}}}}}]\nusers: [{{name: u, user: {{{user}}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
        )
        .into_bytes()
    }

    fn files(path: &str) -> Result<SecretBytes, CredentialsError> {
        match path {
            "ca.crt" | "client.crt" | "client.key" => Ok(SecretBytes::new(PEM.to_vec())),
            "token" => Ok(SecretBytes::new(b" vigil-fake-file-token \n".to_vec())),
            "empty-token" => Ok(SecretBytes::new(b"\n".to_vec())),
            "not-pem" => Ok(SecretBytes::new(b"garbage".to_vec())),
            "denied" => Err(CredentialsError::Denied("no".into())),
            _ => Err(CredentialsError::NotFound(path.into())),
        }
    }

    fn connect(server: &str, cluster: &str, user: &str) -> Result<ApiServer, ProbeError> {
        let selection = select(&kubeconfig(server, cluster, user), None).expect("selects");
        ApiServer::connect_with(&selection, files)
    }

    fn class(result: Result<ApiServer, ProbeError>) -> (bool, ReasonClass) {
        match result.expect_err("fails") {
            ProbeError::NotProbeable(f) => (true, f.class),
            ProbeError::Inconclusive(f) => (false, f.class),
        }
    }

    #[test]
    fn files_are_read_and_tls_and_headers_built() {
        let server = connect(
            "https://127.0.0.1:6443/",
            "certificate-authority: ca.crt, tls-server-name: kubernetes",
            "client-certificate: client.crt, client-key: client.key, tokenFile: token",
        )
        .expect("connects");
        let request = server.request("GET", "/api/v1/namespaces?limit=1");
        assert_eq!(
            request.url,
            "https://127.0.0.1:6443/api/v1/namespaces?limit=1"
        );
        let tls = request.tls.expect("tls");
        assert_eq!(tls.ca_pem.as_deref(), Some(PEM));
        assert_eq!(tls.client_key_pem.as_deref(), Some(PEM));
        assert_eq!(tls.server_name.as_deref(), Some("kubernetes"));
        assert!(!tls.insecure_skip_verify);
        assert!(request.headers.contains(&(
            "Authorization".into(),
            "Bearer vigil-fake-file-token".into()
        )));
        let shown = format!("{server:?}");
        assert!(
            !shown.contains("vigil-fake") && !shown.contains("BEGIN"),
            "{shown}"
        );
    }

    #[test]
    fn lists_are_followed_page_by_page() {
        let server = connect("http://127.0.0.1:8080", "", "token: vigil-fake-t").expect("connects");
        let mut urls = Vec::new();
        let pages = [
            r#"{"items":[{"n":1},{"n":2}],"metadata":{"continue":"a+b/c="}}"#,
            r#"{"items":[{"n":3}],"metadata":{"continue":""}}"#,
        ];
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct Item {
            n: u32,
        }
        let items: Vec<Item> = server
            .list_with("/api/v1/pods?labelSelector=a%3Db", 2, |request| {
                urls.push(request.url.clone());
                Ok(Response {
                    status: 200,
                    headers: Vec::new(),
                    body: pages[urls.len() - 1].as_bytes().to_vec(),
                    latency_ms: 1,
                })
            })
            .expect("lists");
        assert_eq!(items, vec![Item { n: 1 }, Item { n: 2 }, Item { n: 3 }]);
        assert_eq!(
            urls,
            vec![
                "http://127.0.0.1:8080/api/v1/pods?labelSelector=a%3Db&limit=2",
                "http://127.0.0.1:8080/api/v1/pods?labelSelector=a%3Db&limit=2&continue=a%2Bb%2Fc%3D",
            ]
        );
    }

    #[test]
    fn list_failures_keep_the_status_and_the_servers_words() {
        let server = connect("http://127.0.0.1:8080", "", "token: vigil-fake-t").expect("connects");
        let forbidden = server
            .list_with::<serde_json::Value>("/api/v1/pods", 0, |request| {
                assert!(
                    request.url.ends_with("/api/v1/pods?limit=500"),
                    "{}",
                    request.url
                );
                Ok(Response {
                    status: 403,
                    headers: Vec::new(),
                    body: br#"{"kind":"Status","message":"pods is forbidden"}"#.to_vec(),
                    latency_ms: 1,
                })
            })
            .expect_err("403");
        assert_eq!(
            forbidden,
            ListError::Status {
                status: 403,
                message: "pods is forbidden".to_owned()
            }
        );
        assert_eq!(forbidden.reason_class(), ReasonClass::Unauthorized);
        let timeout = server
            .list_with::<serde_json::Value>("/api/v1/pods", 1, |_| Err(HttpError::Timeout))
            .expect_err("timeout");
        assert_eq!(timeout.reason_class(), ReasonClass::Timeout);
        let looping = server
            .list_with::<serde_json::Value>("/api/v1/pods", 1, |_| {
                Ok(Response {
                    status: 200,
                    headers: Vec::new(),
                    body: br#"{"items":[],"metadata":{"continue":"same"}}"#.to_vec(),
                    latency_ms: 1,
                })
            })
            .expect_err("loops");
        assert!(matches!(looping, ListError::Malformed(_)), "{looping:?}");
    }

    #[test]
    fn plain_http_servers_get_no_tls_options() {
        let server = connect("http://127.0.0.1:8080", "", "token: vigil-fake-t").expect("connects");
        assert_eq!(server.request("GET", "/").tls, None);
    }

    #[test]
    fn unusable_material_is_reported_with_the_right_outcome() {
        let https = "https://127.0.0.1:6443";
        assert_eq!(
            class(connect(https, "certificate-authority: gone", "")),
            (true, ReasonClass::ReferenceBroken)
        );
        assert_eq!(
            class(connect(https, "certificate-authority: denied", "")),
            (false, ReasonClass::Denied)
        );
        assert_eq!(
            class(connect(https, "certificate-authority: not-pem", "")),
            (true, ReasonClass::ReferenceBroken)
        );
        assert_eq!(
            class(connect(https, "", "tokenFile: empty-token")),
            (true, ReasonClass::ReferenceBroken)
        );
    }

    fn response(status: u16, body: &str) -> Result<Response, HttpError> {
        Ok(Response {
            status,
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
            latency_ms: 12,
        })
    }

    /// Checks a result's outcome: `Ok((verdict, reason))` or `Err(is_inconclusive, class)`.
    fn check_health(
        result: Result<Response, HttpError>,
        expected: Result<(Verdict, Option<ReasonClass>), (bool, ReasonClass)>,
    ) -> String {
        match (health_outcome(result), expected) {
            (Ok(report), Ok((verdict, reason))) => {
                assert_eq!((report.verdict, report.reason), (verdict, reason));
                report.message
            }
            (Err(ProbeError::Inconclusive(failure)), Err((true, class)))
            | (Err(ProbeError::NotProbeable(failure)), Err((false, class))) => {
                assert_eq!(failure.class, class);
                failure.message
            }
            (got, expected) => panic!("got {got:?}, expected {expected:?}"),
        }
    }

    #[test]
    fn statuses_and_errors_map_to_the_designs_outcomes() {
        use ReasonClass as R;
        use Verdict as V;
        check_health(response(200, "{}"), Ok((V::Healthy, None)));
        check_health(
            response(401, ""),
            Ok((V::CredentialsRejected, Some(R::Unauthorized))),
        );
        check_health(
            response(403, ""),
            Ok((V::CredentialsRejected, Some(R::Unauthorized))),
        );
        check_health(response(500, ""), Ok((V::Unhealthy, Some(R::ServerError))));
        check_health(response(503, ""), Ok((V::Unhealthy, Some(R::ServerError))));
        check_health(response(404, ""), Ok((V::Unhealthy, Some(R::BadResponse))));
        check_health(response(204, ""), Ok((V::Unhealthy, Some(R::BadResponse))));
        check_health(
            Err(HttpError::Timeout),
            Ok((V::Unhealthy, Some(R::Timeout))),
        );
        check_health(
            Err(HttpError::Refused("x".into())),
            Ok((V::Unhealthy, Some(R::Refused))),
        );
        check_health(
            Err(HttpError::Tls("x".into())),
            Ok((V::Unhealthy, Some(R::Tls))),
        );
        check_health(
            Err(HttpError::Dns("x".into())),
            Ok((V::Unhealthy, Some(R::Dns))),
        );
        check_health(
            Err(HttpError::Protocol("x".into())),
            Ok((V::Unhealthy, Some(R::BadResponse))),
        );
        check_health(Err(HttpError::Denied("x".into())), Err((true, R::Denied)));
    }

    #[test]
    fn a_kubernetes_status_message_is_quoted_on_one_line() {
        let message = check_health(
            response(
                403,
                r#"{"kind":"Status","message":"namespaces is forbidden:\nUser \"x\""}"#,
            ),
            Ok((
                Verdict::CredentialsRejected,
                Some(ReasonClass::Unauthorized),
            )),
        );
        assert_eq!(
            message,
            "the API server refused the credentials (403): namespaces is forbidden: User \"x\""
        );
        let long = format!(r#"{{"message":"{}"}}"#, "m".repeat(1000));
        let message = check_health(
            response(500, &long),
            Ok((Verdict::Unhealthy, Some(ReasonClass::ServerError))),
        );
        assert!(message.len() < 300, "{message}");
    }

    #[test]
    fn kubeconfig_problems_name_the_source_before_the_health_check() {
        let not_probeable = |result: Result<ProbeReport, ProbeError>| match result {
            Err(ProbeError::NotProbeable(failure)) => failure,
            other => panic!("expected not-probeable, got {other:?}"),
        };
        let bytes = SecretBytes::new(kubeconfig(
            "https://127.0.0.1:6443",
            "certificate-authority: gone",
            "",
        ));
        let failure = not_probeable(probe_kubeconfig(&bytes, None, "the source", files));
        assert_eq!(failure.class, ReasonClass::ReferenceBroken);
        assert!(
            failure
                .message
                .starts_with("the source: the certificate-authority file gone"),
            "{}",
            failure.message
        );
        let failure = not_probeable(probe_kubeconfig(&bytes, Some("other"), "the source", files));
        assert!(
            failure.message.starts_with("the source: context"),
            "{}",
            failure.message
        );
    }
}
