//! The native Rust prober of the test kit: vigil's probe (list namespaces
//! with `limit=1`) made directly with hyper and rustls, over a fresh TLS
//! connection per probe so that a rotated certificate is always seen.
//!
//! It drives the engine in the end-to-end tests, and is the native baseline of
//! the plugin benchmarks: a Wasm plugin probe is compared with this one.

#![forbid(unsafe_code)]

pub mod fake_kube;
pub mod proc_stats;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Uri;
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use vigil_decision::{ProbeOutcome, ReasonClass};
use vigil_domain::probe::{ProbeTarget, Prober};
use vigil_domain::reference::{ConnectionMaterial, Material};
use vigil_domain::tls::{self, TlsClients, Trust};

/// The request every probe makes.
pub const PROBE_PATH: &str = "/api/v1/namespaces?limit=1";

/// Probes Kubernetes API servers natively, from the host-resolved kubeconfig, with the
/// same TLS client configurations as vigil's plugin runtime ([`vigil_domain::tls`]).
#[derive(Debug, Clone, Default)]
pub struct NativeProber {
    tls: TlsClients,
}

impl Prober for NativeProber {
    async fn probe(&self, target: &ProbeTarget) -> ProbeOutcome {
        let Some(material) = target.connection.as_deref() else {
            return ProbeOutcome::NotProbeable {
                class: ReasonClass::NoPlugin,
                message: "the native prober only probes kubeconfig file references".to_owned(),
            };
        };
        match tokio::time::timeout(target.timeout, self.probe_material(material)).await {
            Ok(outcome) => outcome,
            Err(_) => unhealthy(
                ReasonClass::Timeout,
                format!("no answer within {}s", target.timeout.as_secs()),
            ),
        }
    }
}

fn unhealthy(class: ReasonClass, message: String) -> ProbeOutcome {
    ProbeOutcome::Unhealthy { class, message }
}

fn broken(message: String) -> ProbeOutcome {
    ProbeOutcome::NotProbeable {
        class: ReasonClass::ReferenceBroken,
        message,
    }
}

impl NativeProber {
    /// One probe of the cluster the material names, without a time bound.
    pub async fn probe_material(&self, material: &ConnectionMaterial) -> ProbeOutcome {
        let uri: Uri = match material.server.parse() {
            Ok(uri) => uri,
            Err(_) => return broken(format!("server {:?} is not a URL", material.server)),
        };
        let Some(host) = uri.host().map(|h| h.trim_matches(['[', ']']).to_owned()) else {
            return broken(format!("server {:?} has no host", material.server));
        };
        let port = uri.port_u16().unwrap_or(443);
        let config = match self.client_config(material) {
            Ok(config) => config,
            Err(message) => return broken(message),
        };
        let token = match read_material(material.token.as_ref()) {
            Ok(token) => token.map(|t| String::from_utf8_lossy(&t).trim().to_owned()),
            Err(message) => return broken(message),
        };
        let server_name = match tls::server_name(&host, material.tls_server_name.as_deref()) {
            Ok(name) => name,
            Err(error) => return broken(error.to_string()),
        };

        let tcp = match TcpStream::connect((host.as_str(), port)).await {
            Ok(tcp) => tcp,
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
                return unhealthy(
                    ReasonClass::Refused,
                    format!("connection refused by {host}:{port}"),
                );
            }
            Err(error) if error.to_string().contains("lookup") => {
                return unhealthy(ReasonClass::Dns, format!("cannot resolve {host}: {error}"));
            }
            Err(error) => {
                return unhealthy(
                    ReasonClass::Refused,
                    format!("cannot connect to {host}:{port}: {error}"),
                );
            }
        };
        // Without it, a fresh TLS connection plus one GET waits ~40 ms on
        // Nagle and delayed ACKs.
        let _ = tcp.set_nodelay(true);
        let tls = match TlsConnector::from(Arc::new(config))
            .connect(server_name, tcp)
            .await
        {
            Ok(tls) => tls,
            Err(error) => {
                return unhealthy(ReasonClass::Tls, format!("TLS handshake failed: {error}"));
            }
        };
        let (mut sender, connection) =
            match hyper::client::conn::http1::handshake(TokioIo::new(tls)).await {
                Ok(parts) => parts,
                Err(error) => {
                    return unhealthy(
                        ReasonClass::BadResponse,
                        format!("HTTP handshake failed: {error}"),
                    );
                }
            };
        let driver = tokio::spawn(connection);

        let mut request = hyper::Request::get(PROBE_PATH)
            .header(hyper::header::HOST, format!("{host}:{port}"))
            .header(hyper::header::ACCEPT, "application/json");
        if let Some(token) = token {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let Ok(request) = request.body(Empty::<Bytes>::new()) else {
            driver.abort();
            return broken("the token cannot be sent in an HTTP header".to_owned());
        };
        let outcome = match sender.send_request(request).await {
            Ok(response) => {
                let status = response.status();
                // Read the body so the server sees a complete exchange.
                let _ = response.into_body().collect().await;
                classify(status.as_u16())
            }
            Err(error) => unhealthy(ReasonClass::BadResponse, format!("request failed: {error}")),
        };
        driver.abort();
        outcome
    }

    fn client_config(&self, material: &ConnectionMaterial) -> Result<ClientConfig, String> {
        let ca = read_material(material.ca.as_ref())?;
        let trust = match (&ca, material.insecure_skip_tls_verify) {
            (_, true) => Trust::SkipVerify,
            (Some(ca), false) => Trust::Ca(ca),
            (None, false) => Trust::System,
        };
        let certificate = read_material(material.client_certificate.as_ref())?;
        let key = read_material(material.client_key.as_ref())?;
        self.tls
            .client_config_parts(trust, certificate.as_deref(), key.as_deref())
            .map_err(|e| e.to_string())
    }
}

/// The outcome of an HTTP status, as docs/rules.md#outcomes maps it.
pub fn classify(status: u16) -> ProbeOutcome {
    match status {
        200..=299 => ProbeOutcome::Healthy,
        401 | 403 => ProbeOutcome::CredentialsRejected {
            message: format!("the API server answered {status}"),
        },
        500..=599 => unhealthy(
            ReasonClass::ServerError,
            format!("the API server answered {status}"),
        ),
        _ => unhealthy(
            ReasonClass::BadResponse,
            format!("the API server answered {status}"),
        ),
    }
}

fn read_material(material: Option<&Material>) -> Result<Option<Vec<u8>>, String> {
    match material {
        None => Ok(None),
        Some(Material::Inline(bytes)) => Ok(Some(bytes.expose_secret().to_vec())),
        // A token file is re-read at every probe: projected tokens rotate.
        Some(Material::File(path)) => std::fs::read(path)
            .map(Some)
            .map_err(|e| format!("cannot read {}: {}", path.display(), e.kind())),
    }
}

/// How long the end-to-end tests let a probe take.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(1);
