//! `wasi-http`: a test-only plugin that talks through the standard `wasi:http` outgoing
//! handler instead of the contract's `http` interface, as a plugin built on an ordinary
//! `wasi:http` crate does. The host must hold it to the same egress policy.
//!
//! Its cluster parameter `mode` chooses what it does:
//!
//! - `policy` (the default): `GET`s `foreign-url` (default `http://127.0.0.77:9/`, outside
//!   every grant), which the host must deny (`HTTP-request-denied`) without opening a
//!   connection; then `GET`s `/version` on the cluster's recorded endpoint over TLS, with
//!   `Authorization: Bearer` and the value of `credentials.parameter("token")` when the
//!   cluster has a `token` parameter, which must answer 200 (the host verifies the server
//!   with the kubeconfig's CA); then, when the parameter `extra-url` is set, `GET`s it,
//!   which must answer 200 (a host of the plugin's `allowed-hosts`). It returns `healthy`
//!   when all of that held, else `inconclusive` (`plugin-fault`) saying what each request
//!   got; the details `foreign`, `own` and `extra` say it too.
//! - `probe`: only the cluster request above, reported as a probe: 2xx `healthy`, 401/403
//!   `credentials-rejected`, a timeout `unhealthy` (`timeout`), any other error or status
//!   `unhealthy` with its class.
//! - `connect-zero`: the `probe` mode with a `connect-timeout` of 0 in the request's
//!   options, so the request cannot even start; it then blames the cluster for the
//!   timeout. The host must not believe it: the timeout was the plugin's own.
//! - `extra-only`: `GET`s `extra-url`, then claims the cluster failed (`unhealthy`,
//!   `server-error`). A request to an extra host is not one to the cluster, so the host
//!   must not believe it.
//! - `flood`: a plugin that tries to make the host hold without bound. It sends `count`
//!   (default 64) requests to `foreign-url`, each denied; asks `credentials.parameter`
//!   for the parameter `outside` `count` times (a file outside the credential
//!   directories: each refused); then, when `flood-url` is set, starts
//!   `count` requests to it at once before waiting for any, and keeps every response it
//!   gets without reading its body. It answers `not-probeable` (`no-plugin`, so that the
//!   test reads the message) with what it got, as `key=value` words: `denied`,
//!   `credentials-refused`, `answered`, `in-flight-refused` (the host's bound on requests
//!   in flight), `too-large` (the host's bound on the bytes it holds for the call),
//!   `other` and `first-other`. The host must bound the requests in flight and the bytes
//!   held, and log the refusals once, as a summary.

use std::fmt::Write as _;

use vigil_plugin_sdk::credentials::{self, CredentialsError};
use vigil_plugin_sdk::{
    Cluster, PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass,
};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, FutureIncomingResponse, IncomingResponse, Method, OutgoingRequest,
    RequestOptions, Scheme,
};
use wasip2::io::streams::StreamError;

/// Where the foreign request goes unless the cluster's `foreign-url` parameter says.
const DEFAULT_FOREIGN_URL: &str = "http://127.0.0.77:9/";

/// The most response body bytes read.
const MAX_BODY: usize = 64 * 1024;

/// The plugin.
#[derive(Debug)]
pub struct WasiHttp;

impl ProbePlugin for WasiHttp {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "wasi-http",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: sends its requests through wasi:http",
        )
    }

    fn accepts(_: &Cluster) -> bool {
        true
    }

    fn probe(request: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        let cluster = &request.cluster;
        match parameter(cluster, "mode").unwrap_or("policy") {
            "probe" => probe(cluster, Options::Default),
            "connect-zero" => probe(cluster, Options::ConnectTimeoutZero),
            "extra-only" => {
                let url = parameter(cluster, "extra-url").unwrap_or(DEFAULT_FOREIGN_URL);
                let extra = get(url, None);
                Ok(ProbeReport::unhealthy(
                    ReasonClass::ServerError,
                    format!(
                        "claims the cluster failed after asking an extra host ({})",
                        describe(&extra)
                    ),
                    0,
                ))
            }
            "flood" => Err(flood(cluster)),
            _ => policy(cluster),
        }
    }
}

vigil_plugin_sdk::register!(WasiHttp);

/// The `policy` mode.
fn policy(cluster: &Cluster) -> Result<ProbeReport, ProbeError> {
    let foreign_url = parameter(cluster, "foreign-url").unwrap_or(DEFAULT_FOREIGN_URL);
    let foreign = get(foreign_url, None);
    let own = cluster_get(cluster, Options::Default)?;
    let extra = parameter(cluster, "extra-url").map(|url| get(url, None));

    let foreign_denied = matches!(foreign, Err(ErrorCode::HttpRequestDenied));
    let own_ok = matches!(own, Ok((200, _)));
    let extra_ok = extra.as_ref().is_none_or(|e| matches!(e, Ok((200, _))));
    let mut summary = format!(
        "foreign {foreign_url}: {}; own {}: {}",
        describe(&foreign),
        cluster.endpoint,
        describe(&own)
    );
    if let Some(extra) = &extra {
        let _ = write!(summary, "; extra: {}", describe(extra));
    }
    if !(foreign_denied && own_ok && extra_ok) {
        return Err(ProbeError::inconclusive(
            ReasonClass::PluginFault,
            format!("the egress policy did NOT hold as expected ({summary})"),
        ));
    }
    let mut report = ProbeReport::healthy(0)
        .with_message(format!("egress policy held ({summary})"))
        .with_detail("foreign", describe(&foreign))
        .with_detail("own", describe(&own));
    if let Some(extra) = &extra {
        report = report.with_detail("extra", describe(extra));
    }
    Ok(report)
}

/// The `flood` mode.
fn flood(cluster: &Cluster) -> ProbeError {
    let count: usize = parameter(cluster, "count")
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    let foreign_url = parameter(cluster, "foreign-url").unwrap_or(DEFAULT_FOREIGN_URL);
    let denied = (0..count)
        .filter(|_| matches!(get(foreign_url, None), Err(ErrorCode::HttpRequestDenied)))
        .count();
    // A credential reference is kept out of `cluster.parameters`: ask for it blind.
    let credentials_refused = (0..count)
        .filter(|_| {
            matches!(
                credentials::parameter("outside"),
                Err(CredentialsError::Denied(_))
            )
        })
        .count();
    let (mut answered, mut in_flight, mut too_large, mut other) = (0, 0, 0, 0);
    let mut first_other = String::new();
    // Kept unread until the end, so that the host holds their bodies meanwhile.
    let mut kept = Vec::new();
    if let Some(url) = parameter(cluster, "flood-url") {
        let started: Vec<_> = (0..count).map(|_| start(url, None)).collect();
        for future in started {
            match future.and_then(|future| wait(&future)) {
                Ok(response) => {
                    answered += 1;
                    kept.push(response);
                }
                Err(ErrorCode::InternalError(Some(message))) if message.contains("in flight") => {
                    in_flight += 1;
                }
                Err(ErrorCode::HttpResponseBodySize(_)) => too_large += 1,
                Err(error) => {
                    other += 1;
                    if first_other.is_empty() {
                        first_other = format!("{error:?}");
                    }
                }
            }
        }
    }
    drop(kept);
    ProbeError::not_probeable(
        ReasonClass::NoPlugin,
        format!(
            "denied={denied} credentials-refused={credentials_refused} answered={answered} \
             in-flight-refused={in_flight} too-large={too_large} other={other} \
             first-other={first_other}"
        ),
    )
}

/// The `probe` and `connect-zero` modes.
fn probe(cluster: &Cluster, options: Options) -> Result<ProbeReport, ProbeError> {
    let report = match cluster_get(cluster, options)? {
        Ok((status @ 200..=299, body)) => ProbeReport::healthy(0)
            .with_message(format!("the API server answered {status}"))
            .with_detail("body-bytes", body.len().to_string()),
        Ok((status @ (401 | 403), _)) => {
            ProbeReport::credentials_rejected(format!("the API server answered {status}"), 0)
        }
        Ok((status, _)) => ProbeReport::unhealthy(
            if status >= 500 {
                ReasonClass::ServerError
            } else {
                ReasonClass::BadResponse
            },
            format!("the API server answered {status}"),
            0,
        ),
        Err(error) => ProbeReport::unhealthy(class_of(&error), format!("{error:?}"), 0),
    };
    Ok(report)
}

/// `GET /version` on the cluster's endpoint, with the `token` parameter as a bearer token
/// when there is one.
fn cluster_get(
    cluster: &Cluster,
    options: Options,
) -> Result<Result<(u16, Vec<u8>), ErrorCode>, ProbeError> {
    let token = match credentials::parameter("token") {
        Ok(token) => Some(token),
        Err(CredentialsError::NotFound(_)) => None,
        Err(error) => return Err(error.probe_error("the token parameter")),
    };
    let bearer = token.map(|token| {
        let mut value = b"Bearer ".to_vec();
        value.extend_from_slice(token.expose_secret().trim_ascii());
        value
    });
    let url = format!("{}/version", cluster.endpoint.trim_end_matches('/'));
    Ok(get_with(&url, bearer.as_deref(), options))
}

/// The request options a `GET` passes to the outgoing handler.
#[derive(Clone, Copy, Debug)]
enum Options {
    /// None: the host's bounds apply.
    Default,
    /// A connect timeout of zero nanoseconds.
    ConnectTimeoutZero,
}

fn parameter<'a>(cluster: &'a Cluster, name: &str) -> Option<&'a str> {
    cluster
        .parameters
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

/// One `GET` through `wasi:http`: the status and up to [`MAX_BODY`] bytes of the body.
fn get(url: &str, authorization: Option<&[u8]>) -> Result<(u16, Vec<u8>), ErrorCode> {
    get_with(url, authorization, Options::Default)
}

/// [`get`] with request options.
fn get_with(
    url: &str,
    authorization: Option<&[u8]>,
    options: Options,
) -> Result<(u16, Vec<u8>), ErrorCode> {
    let future = start_with(url, authorization, options)?;
    let response = wait(&future)?;
    let internal = |what: &str| ErrorCode::InternalError(Some(what.to_owned()));
    let status = response.status();
    let body = response.consume().map_err(|()| internal("body"))?;
    let stream = body.stream().map_err(|()| internal("body stream"))?;
    let mut bytes = Vec::new();
    while bytes.len() < MAX_BODY {
        match stream.blocking_read(16 * 1024) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(_)) => return Err(internal("body read")),
        }
    }
    Ok((status, bytes))
}

/// Waits for a started request's response (its head; the body is not read).
fn wait(future: &FutureIncomingResponse) -> Result<IncomingResponse, ErrorCode> {
    let internal = |what: &str| ErrorCode::InternalError(Some(what.to_owned()));
    future.subscribe().block();
    future
        .get()
        .ok_or_else(|| internal("not ready after block"))?
        .map_err(|()| internal("taken twice"))?
}

/// Starts one `GET` through `wasi:http` without waiting for it.
fn start(url: &str, authorization: Option<&[u8]>) -> Result<FutureIncomingResponse, ErrorCode> {
    start_with(url, authorization, Options::Default)
}

/// [`start`] with request options.
fn start_with(
    url: &str,
    authorization: Option<&[u8]>,
    options: Options,
) -> Result<FutureIncomingResponse, ErrorCode> {
    let invalid = || ErrorCode::HttpRequestUriInvalid;
    let (scheme, rest) = url.split_once("://").ok_or_else(invalid)?;
    let scheme = match scheme {
        "https" => Scheme::Https,
        "http" => Scheme::Http,
        _ => return Err(invalid()),
    };
    let (authority, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    };
    let mut entries = Vec::new();
    if let Some(value) = authorization {
        entries.push(("authorization".to_owned(), value.to_vec()));
    }
    let headers = Fields::from_list(&entries)
        .map_err(|_| ErrorCode::InternalError(Some("invalid header".to_owned())))?;
    let request = OutgoingRequest::new(headers);
    let internal = |what: &str| ErrorCode::InternalError(Some(what.to_owned()));
    request
        .set_method(&Method::Get)
        .map_err(|()| internal("method"))?;
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| internal("scheme"))?;
    request
        .set_authority(Some(authority))
        .map_err(|()| invalid())?;
    request
        .set_path_with_query(Some(path))
        .map_err(|()| invalid())?;

    let options = match options {
        Options::Default => None,
        Options::ConnectTimeoutZero => {
            let options = RequestOptions::new();
            options
                .set_connect_timeout(Some(0))
                .map_err(|()| internal("connect timeout"))?;
            Some(options)
        }
    };
    outgoing_handler::handle(request, options)
}

/// The reason class of a `wasi:http` error, as a probe reports it.
fn class_of(error: &ErrorCode) -> ReasonClass {
    match error {
        ErrorCode::ConnectionTimeout
        | ErrorCode::ConnectionReadTimeout
        | ErrorCode::ConnectionWriteTimeout
        | ErrorCode::HttpResponseTimeout => ReasonClass::Timeout,
        ErrorCode::ConnectionRefused => ReasonClass::Refused,
        ErrorCode::TlsProtocolError
        | ErrorCode::TlsCertificateError
        | ErrorCode::TlsAlertReceived(_) => ReasonClass::Tls,
        ErrorCode::DnsError(_) | ErrorCode::DnsTimeout => ReasonClass::Dns,
        ErrorCode::HttpRequestDenied => ReasonClass::Denied,
        _ => ReasonClass::BadResponse,
    }
}

/// What a request got, in a word or two.
fn describe(result: &Result<(u16, Vec<u8>), ErrorCode>) -> String {
    match result {
        Ok((status, _)) => format!("status {status}"),
        Err(ErrorCode::HttpRequestDenied) => "denied".to_owned(),
        Err(error) => format!("{error:?}"),
    }
}
