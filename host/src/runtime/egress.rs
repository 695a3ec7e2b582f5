//! The `http` host interface: one fresh hyper + rustls connection per request, with the
//! request's own TLS material, bounded by what is left of the call's budget, and only
//! to the hosts the egress policy allows.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Uri;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tracing::warn;

use super::bindings::vigil::plugin::http;
use super::sandbox::{CallCluster, CallState};
use crate::reference::Reference;

/// The largest response body handed to a plugin; a bigger one is `too-large`.
pub const MAX_RESPONSE_BODY_BYTES: usize = 4 * 1024 * 1024;

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

/// The TLS machinery shared by every call: the crypto provider and the system roots
/// (loaded once, on first use).
#[derive(Debug, Clone)]
pub(crate) struct HttpClient {
    provider: Arc<CryptoProvider>,
    system_roots: Arc<OnceLock<Arc<RootCertStore>>>,
}

impl Default for HttpClient {
    fn default() -> Self {
        Self {
            provider: Arc::new(rustls::crypto::ring::default_provider()),
            system_roots: Arc::new(OnceLock::new()),
        }
    }
}

impl HttpClient {
    fn system_roots(&self) -> Arc<RootCertStore> {
        Arc::clone(self.system_roots.get_or_init(|| {
            let mut roots = RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for certificate in found.certs {
                let _ = roots.add(certificate);
            }
            Arc::new(roots)
        }))
    }

    fn tls_config(&self, tls: Option<&http::TlsOptions>) -> Result<ClientConfig, String> {
        let builder = ClientConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS set-up failed: {e}"))?;
        let skip = tls.is_some_and(|t| t.insecure_skip_verify);
        let builder = if skip {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(SkipVerify(
                    self.provider.signature_verification_algorithms,
                )))
        } else if let Some(ca) = tls.and_then(|t| t.ca_pem.as_ref()) {
            let mut roots = RootCertStore::empty();
            for certificate in CertificateDer::pem_slice_iter(ca) {
                let certificate = certificate.map_err(|_| "the CA is not PEM".to_owned())?;
                roots
                    .add(certificate)
                    .map_err(|_| "the CA certificate is invalid".to_owned())?;
            }
            builder.with_root_certificates(roots)
        } else {
            builder.with_root_certificates(self.system_roots())
        };
        let certificate = tls.and_then(|t| t.client_certificate_pem.as_ref());
        let key = tls.and_then(|t| t.client_key_pem.as_ref());
        match (certificate, key) {
            (Some(certificate), Some(key)) => {
                let chain = CertificateDer::pem_slice_iter(certificate)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| "the client certificate is not PEM".to_owned())?;
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|_| "the client key is not PEM".to_owned())?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|_| "the client certificate and key do not fit".to_owned())
            }
            (None, None) => Ok(builder.with_no_client_auth()),
            _ => Err("a client certificate needs its key, and a key its certificate".to_owned()),
        }
    }
}

impl http::Host for CallState {
    async fn send(&mut self, request: http::Request) -> Result<http::Response, http::HttpError> {
        use http::HttpError as E;
        if !self.manifest.http {
            warn!(plugin = %self.plugin, "http.send denied: http is not granted");
            return Err(E::Denied("http is not granted to this plugin".to_owned()));
        }
        let uri: Uri = request
            .url
            .parse()
            .map_err(|_| E::Protocol("the URL does not parse".to_owned()))?;
        let scheme = uri.scheme_str().unwrap_or_default().to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(E::Protocol(
                "only http and https URLs are supported".to_owned(),
            ));
        }
        let Some((host, port)) = host_port(&uri) else {
            return Err(E::Protocol("the URL has no host".to_owned()));
        };
        let Some(route) = self.egress.route(&host, port) else {
            // Never log the URL itself: it may carry credentials.
            warn!(plugin = %self.plugin, host = %host, port, "http.send denied: host outside the plugin's egress grant");
            self.record.denied.push(format!("{host}:{port}"));
            return Err(E::Denied(format!("egress to {host}:{port} is not allowed")));
        };
        let mut bound = self.remaining();
        if let Some(ms) = request.timeout_ms {
            bound = bound.min(Duration::from_millis(u64::from(ms)));
        }
        if route == Route::Cluster {
            self.record.cluster_contacted = true;
        }
        let timed_out = || E::Timeout;
        if bound.is_zero() {
            if route == Route::Cluster {
                self.record.cluster_timed_out = true;
            }
            return Err(timed_out());
        }
        let config = if scheme == "https" {
            Some(self.http.tls_config(request.tls.as_ref()).map_err(E::Tls)?)
        } else {
            None
        };
        let started = Instant::now();
        let exchange = exchange(uri, host, port, config, request);
        let Ok(result) = tokio::time::timeout(bound, exchange).await else {
            if route == Route::Cluster {
                self.record.cluster_timed_out = true;
            }
            return Err(timed_out());
        };
        let mut response = result?;
        response.latency_ms = u32::try_from(started.elapsed().as_millis()).unwrap_or(u32::MAX);
        if route == Route::Cluster && matches!(response.status, 401 | 403) {
            self.record.auth_rejected = Some(response.status);
        }
        Ok(response)
    }
}

/// One request over a fresh connection.
async fn exchange(
    uri: Uri,
    host: String,
    port: u16,
    tls: Option<ClientConfig>,
    request: http::Request,
) -> Result<http::Response, http::HttpError> {
    use http::HttpError as E;
    let server_name = request
        .tls
        .as_ref()
        .and_then(|t| t.server_name.clone())
        .unwrap_or_else(|| host.clone());
    let tcp = match TcpStream::connect((host.as_str(), port)).await {
        Ok(tcp) => tcp,
        Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(E::Refused(format!("connection refused by {host}:{port}")));
        }
        Err(error) if error.to_string().contains("lookup") => {
            return Err(E::Dns(format!("cannot resolve {host}")));
        }
        Err(error) => {
            return Err(E::Refused(format!(
                "cannot connect to {host}:{port}: {error}"
            )));
        }
    };
    // Without it a fresh connection plus one request waits ~40 ms on Nagle and
    // delayed ACKs.
    let _ = tcp.set_nodelay(true);

    let authority = if uri.port_u16().is_some() {
        format!("{host}:{port}")
    } else {
        host.clone()
    };
    let path = uri
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
    let mut builder = hyper::Request::builder()
        .method(request.method.as_str())
        .uri(path);
    let mut has_host = false;
    for (name, value) in &request.headers {
        has_host |= name.eq_ignore_ascii_case("host");
        builder = builder.header(name.as_str(), value.as_str());
    }
    if !has_host {
        builder = builder.header(hyper::header::HOST, authority);
    }
    let body = Full::new(Bytes::from(request.body.unwrap_or_default()));
    let outgoing = builder
        .body(body)
        .map_err(|e| E::Protocol(format!("invalid request: {e}")))?;

    match tls {
        Some(config) => {
            let name = ServerName::try_from(server_name)
                .map_err(|_| E::Tls("invalid TLS server name".to_owned()))?;
            let stream = TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
                .map_err(|e| E::Tls(format!("TLS handshake failed: {e}")))?;
            send_over(TokioIo::new(stream), outgoing).await
        }
        None => send_over(TokioIo::new(tcp), outgoing).await,
    }
}

async fn send_over<I>(
    io: I,
    request: hyper::Request<Full<Bytes>>,
) -> Result<http::Response, http::HttpError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    use http::HttpError as E;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| E::Protocol(format!("HTTP handshake failed: {e}")))?;
    // The connection task is aborted when this function returns, so that nothing of
    // the request outlives the host call that made it.
    let driver = AbortOnDrop(tokio::spawn(connection));
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| E::Protocol(format!("request failed: {e}")))?;
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = Limited::new(response.into_body(), MAX_RESPONSE_BODY_BYTES)
        .collect()
        .await
        .map_err(|error| {
            if error.is::<http_body_util::LengthLimitError>() {
                E::TooLarge
            } else {
                E::Protocol(format!("reading the body failed: {error}"))
            }
        })?
        .to_bytes();
    drop(driver);
    Ok(http::Response {
        status,
        headers,
        body: body.to_vec(),
        latency_ms: 0,
    })
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `insecure-skip-verify`: accepts any server certificate, still checks the handshake
/// signatures.
#[derive(Debug)]
struct SkipVerify(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for SkipVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
