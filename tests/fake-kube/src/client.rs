//! A minimal HTTPS client for tests and benchmarks that need exact control over
//! connections (a fresh connection per request, or one kept alive) and a plain
//! classification of failures: refused, reset, TLS, timeout, HTTP.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::{http1, http2};
use hyper::header::{AUTHORIZATION, HOST, HeaderValue};
use hyper::{Request, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::server::ClusterHandle;
use crate::tls::{TlsError, client_config};

/// How a probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The connection was refused (nothing listens).
    #[error("connection refused")]
    Refused,
    /// The connection was reset or closed before an answer.
    #[error("connection reset or closed before an answer")]
    Reset(#[source] io::Error),
    /// Another connect error.
    #[error("connect failed")]
    Connect(#[source] io::Error),
    /// The TLS handshake failed (unknown CA, bad certificate…).
    #[error("TLS handshake failed")]
    Tls(#[source] io::Error),
    /// No answer within the client's timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The HTTP exchange failed (connection closed mid-request, protocol error).
    #[error("HTTP exchange failed")]
    Http(#[source] hyper::Error),
    /// The request could not be built.
    #[error("invalid request")]
    Request(#[source] hyper::http::Error),
}

/// An answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeResponse {
    /// The status code.
    pub status: u16,
    /// The `Content-Type`, if any.
    pub content_type: Option<String>,
    /// The body.
    pub body: Bytes,
    /// `HTTP/1.1` or `HTTP/2.0`.
    pub http_version: &'static str,
}

impl ProbeResponse {
    /// The body parsed as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// A client bound to one server address and TLS configuration.
#[derive(Clone, Debug)]
pub struct ProbeClient {
    address: SocketAddr,
    server_name: ServerName<'static>,
    tls: Arc<ClientConfig>,
    token: Option<String>,
    timeout: Duration,
}

impl ProbeClient {
    /// A client for `address`, verifying the server's certificate for its IP address.
    pub fn new(address: SocketAddr, tls: ClientConfig) -> Self {
        Self {
            address,
            server_name: ServerName::IpAddress(address.ip().into()),
            tls: Arc::new(tls),
            token: None,
            timeout: Duration::from_secs(5),
        }
    }

    /// A client for `cluster` trusting its current CA, speaking HTTP/1.1, with no credential.
    pub fn anonymous(cluster: &ClusterHandle) -> Result<Self, TlsError> {
        Ok(Self::new(
            cluster.address(),
            client_config(&cluster.ca_pem(), None, &[b"http/1.1"])?,
        ))
    }

    /// A client for `cluster` with its admin token, speaking HTTP/1.1.
    pub fn admin_token(cluster: &ClusterHandle) -> Result<Self, TlsError> {
        Ok(Self::anonymous(cluster)?.with_token(cluster.admin_token()))
    }

    /// Sends this bearer token.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Verifies the server certificate for this name instead of the IP address.
    pub fn with_server_name(mut self, name: ServerName<'static>) -> Self {
        self.server_name = name;
        self
    }

    /// Gives up after this long (connect, handshake and answer together; default 5 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// One GET on a fresh connection, closed afterwards.
    pub async fn get(&self, path_and_query: &str) -> Result<ProbeResponse, ProbeError> {
        let timeout = self.timeout;
        tokio::time::timeout(timeout, async {
            let mut connection = self.connect_now().await?;
            connection.get_now(path_and_query).await
        })
        .await
        .map_err(|_| ProbeError::Timeout(timeout))?
    }

    /// Opens a connection to send several requests on (keep-alive or HTTP/2).
    pub async fn connect(&self) -> Result<ProbeConnection, ProbeError> {
        let timeout = self.timeout;
        tokio::time::timeout(timeout, self.connect_now())
            .await
            .map_err(|_| ProbeError::Timeout(timeout))?
    }

    async fn connect_now(&self) -> Result<ProbeConnection, ProbeError> {
        let tcp = TcpStream::connect(self.address)
            .await
            .map_err(|error| match error.kind() {
                io::ErrorKind::ConnectionRefused => ProbeError::Refused,
                _ => ProbeError::Connect(error),
            })?;
        tcp.set_nodelay(true).map_err(ProbeError::Connect)?;
        let tls = TlsConnector::from(self.tls.clone())
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(classify_io)?;
        let http2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        let io = TokioIo::new(tls);
        let sender = if http2 {
            let (sender, connection) = http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(ProbeError::Http)?;
            tokio::spawn(connection);
            Sender::Http2(sender)
        } else {
            let (sender, connection) = http1::handshake(io).await.map_err(ProbeError::Http)?;
            tokio::spawn(connection);
            Sender::Http1(sender)
        };
        Ok(ProbeConnection {
            sender,
            address: self.address,
            token: self.token.clone(),
            timeout: self.timeout,
        })
    }
}

fn classify_io(error: io::Error) -> ProbeError {
    match error.kind() {
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::UnexpectedEof => ProbeError::Reset(error),
        _ => ProbeError::Tls(error),
    }
}

/// A connection closed or reset under a request is a reset, whatever layer noticed it.
fn classify_http(error: hyper::Error) -> ProbeError {
    if error.is_incomplete_message() || error.is_closed() {
        return ProbeError::Reset(io::Error::new(io::ErrorKind::ConnectionReset, error));
    }
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        if let Some(io_error) = cause.downcast_ref::<io::Error>()
            && matches!(
                io_error.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::UnexpectedEof
            )
        {
            return ProbeError::Reset(io::Error::new(io_error.kind(), error));
        }
        source = cause.source();
    }
    ProbeError::Http(error)
}

#[derive(Debug)]
enum Sender {
    Http1(http1::SendRequest<Empty<Bytes>>),
    Http2(http2::SendRequest<Empty<Bytes>>),
}

/// An open connection.
#[derive(Debug)]
pub struct ProbeConnection {
    sender: Sender,
    address: SocketAddr,
    token: Option<String>,
    timeout: Duration,
}

impl ProbeConnection {
    /// Whether ALPN chose HTTP/2.
    pub fn is_http2(&self) -> bool {
        matches!(self.sender, Sender::Http2(_))
    }

    /// One GET on this connection.
    pub async fn get(&mut self, path_and_query: &str) -> Result<ProbeResponse, ProbeError> {
        let timeout = self.timeout;
        tokio::time::timeout(timeout, self.get_now(path_and_query))
            .await
            .map_err(|_| ProbeError::Timeout(timeout))?
    }

    async fn get_now(&mut self, path_and_query: &str) -> Result<ProbeResponse, ProbeError> {
        let http2 = self.is_http2();
        // HTTP/2 needs the scheme and authority; HTTP/1.1 sends the origin form and Host.
        let uri: Uri = if http2 {
            format!("https://{}{path_and_query}", self.address)
                .parse()
                .map_err(|e| ProbeError::Request(hyper::http::Error::from(e)))?
        } else {
            path_and_query
                .parse()
                .map_err(|e| ProbeError::Request(hyper::http::Error::from(e)))?
        };
        let mut builder = Request::get(uri);
        if !http2 {
            builder = builder.header(HOST, self.address.to_string());
        }
        if let Some(token) = &self.token {
            let value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|e| ProbeError::Request(hyper::http::Error::from(e)))?;
            builder = builder.header(AUTHORIZATION, value);
        }
        let request = builder
            .body(Empty::<Bytes>::new())
            .map_err(ProbeError::Request)?;
        let response = match &mut self.sender {
            Sender::Http1(sender) => {
                sender.ready().await.map_err(classify_http)?;
                sender.send_request(request).await
            }
            Sender::Http2(sender) => {
                sender.ready().await.map_err(classify_http)?;
                sender.send_request(request).await
            }
        }
        .map_err(classify_http)?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(classify_http)?
            .to_bytes();
        Ok(ProbeResponse {
            status,
            content_type,
            body,
            http_version: if http2 { "HTTP/2.0" } else { "HTTP/1.1" },
        })
    }
}
