//! One `POST` of a JSON body: a fresh connection (TLS for `https://`, trusting the system's
//! store or the sink's `ca_file`), the whole exchange under the sink's timeout, and an
//! error that says what happened without echoing what the receiver answered.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::{Request, Uri, header};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// The most of an answer read (and thrown away): receivers answer with little.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Why a notification was not accepted.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SendError {
    /// No answer: no connection, a failed handshake, a timeout.
    #[error("{0}")]
    Unreachable(String),
    /// The receiver answered with a status other than 2xx.
    #[error("the receiver answered {0}")]
    Refused(u16),
}

impl SendError {
    /// Whether sending the same again cannot succeed: a 4xx answer, except 408 (Request
    /// Timeout) and 429 (Too Many Requests), which say "later".
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Refused(code) if (400..500).contains(code) && *code != 408 && *code != 429)
    }
}

/// `POST`s `body` to `url` with `headers`, within `timeout`; `tls` is used for
/// `https://` URLs.
pub async fn post_json(
    url: &str,
    headers: &[(&str, String)],
    body: Bytes,
    timeout: Duration,
    tls: &Arc<ClientConfig>,
) -> Result<u16, SendError> {
    match tokio::time::timeout(timeout, post(url, headers, body, tls)).await {
        Ok(result) => result,
        Err(_) => Err(SendError::Unreachable(format!(
            "no answer within {}",
            humantime::format_duration(timeout)
        ))),
    }
}

async fn post(
    url: &str,
    headers: &[(&str, String)],
    body: Bytes,
    tls: &Arc<ClientConfig>,
) -> Result<u16, SendError> {
    let unreachable = |what: String| SendError::Unreachable(what);
    let uri: Uri = url
        .parse()
        .map_err(|_| unreachable("not a valid URL".to_owned()))?;
    let secure = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(unreachable("not an http(s) URL".to_owned())),
    };
    let host = uri
        .host()
        .ok_or_else(|| unreachable("the URL has no host".to_owned()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_else(|| host.clone());
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();

    let mut request = Request::post(path)
        .header(header::HOST, authority)
        .header(header::CONTENT_TYPE, "application/json")
        .header(
            header::USER_AGENT,
            concat!("vigil/", env!("CARGO_PKG_VERSION")),
        );
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let request = request
        .body(Full::new(body))
        .map_err(|e| unreachable(format!("cannot build the request: {e}")))?;

    let tcp = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| unreachable(format!("cannot connect to {host}:{port}: {e}")))?;
    let _ = tcp.set_nodelay(true);
    if secure {
        let name =
            vigil_domain::tls::server_name(&host, None).map_err(|e| unreachable(e.to_string()))?;
        let stream = TlsConnector::from(Arc::clone(tls))
            .connect(name, tcp)
            .await
            .map_err(|e| unreachable(format!("TLS handshake with {host}:{port} failed: {e}")))?;
        exchange(TokioIo::new(stream), request).await
    } else {
        exchange(TokioIo::new(tcp), request).await
    }
}

async fn exchange<I>(io: I, request: Request<Full<Bytes>>) -> Result<u16, SendError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| SendError::Unreachable(format!("HTTP handshake failed: {e}")))?;
    let driver = tokio::spawn(connection);
    let result = async {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| SendError::Unreachable(format!("the request failed: {e}")))?;
        let status = response.status().as_u16();
        // Read the answer (capped) so the receiver sees a clean end of the exchange.
        let _ = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await;
        if (200..300).contains(&status) {
            Ok(status)
        } else {
            Err(SendError::Refused(status))
        }
    }
    .await;
    driver.abort();
    result
}
