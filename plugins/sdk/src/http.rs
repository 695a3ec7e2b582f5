//! HTTP(S) with per-request TLS material (the `http` host interface; needs `http = true` in
//! the plugin's `NAME.toml`).
//!
//! vigil sends each request on a fresh connection and bounds it by what is left of the
//! probe's budget. Egress goes only to the API servers of the credentials served to this
//! call, the cluster's recorded endpoint, the host of an `http(s)://` reference and the hosts
//! the plugin's `NAME.toml` allows; anything else fails with [`HttpError::Denied`].
//!
//! The generated `Debug` of [`Request`] and [`TlsOptions`] prints headers and keys: never
//! log them.

use crate::bindings::vigil::plugin::http as imported;
use crate::{ProbeError, ProbeReport, ReasonClass};

pub use imported::{HttpError, Request, Response, TlsOptions};

/// Sends one request and waits for the whole response.
pub fn send(request: &Request) -> Result<Response, HttpError> {
    imported::send(request)
}

/// Sends a `GET` to `url` with `headers`, and with `tls` for an `https` URL (`None`: the
/// system roots, no client certificate).
pub fn get(
    url: &str,
    tls: Option<TlsOptions>,
    headers: &[(&str, &str)],
) -> Result<Response, HttpError> {
    let mut request = Request::get(url);
    request.tls = tls;
    request.headers = headers
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    send(&request)
}

impl Request {
    /// A `GET` of `url`: no headers, no body, default TLS, the call's remaining budget.
    pub fn get(url: impl Into<String>) -> Self {
        Self {
            method: "GET".to_owned(),
            url: url.into(),
            headers: Vec::new(),
            body: None,
            tls: None,
            timeout_ms: None,
        }
    }

    /// Adds a header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the TLS options.
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Bounds the request tighter than what is left of the call's budget.
    pub fn with_timeout_ms(mut self, timeout_ms: u32) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
    }
}

impl Default for TlsOptions {
    /// The system roots, no client certificate, the URL's host as server name, verification
    /// on.
    fn default() -> Self {
        Self {
            ca_pem: None,
            client_certificate_pem: None,
            client_key_pem: None,
            server_name: None,
            insecure_skip_verify: false,
        }
    }
}

impl Response {
    /// The first value of header `name` (compared without regard to case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(candidate, _)| candidate.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

impl HttpError {
    /// The reason class this error stands for: `denied`, `timeout`, `refused`, `tls`, `dns`,
    /// or `bad-response` for anything else on the wire and for an oversized body.
    pub fn reason_class(&self) -> ReasonClass {
        match self {
            Self::Denied(_) => ReasonClass::Denied,
            Self::Timeout => ReasonClass::Timeout,
            Self::Refused(_) => ReasonClass::Refused,
            Self::Tls(_) => ReasonClass::Tls,
            Self::Dns(_) => ReasonClass::Dns,
            Self::Protocol(_) | Self::TooLarge => ReasonClass::BadResponse,
        }
    }

    /// One line for an operator, e.g. `connection refused: …`.
    pub fn describe(&self) -> String {
        match self {
            Self::Denied(detail) => format!("request denied by vigil's egress policy: {detail}"),
            Self::Timeout => "no answer within the probe's budget".to_owned(),
            Self::Refused(detail) => format!("connection refused: {detail}"),
            Self::Tls(detail) => format!("TLS handshake failed: {detail}"),
            Self::Dns(detail) => format!("the host name could not be resolved: {detail}"),
            Self::Protocol(detail) => format!("the exchange failed: {detail}"),
            Self::TooLarge => "the response body exceeded vigil's limit".to_owned(),
        }
    }

    /// What a probe should return when its decisive request to the cluster failed:
    /// [`ProbeError::inconclusive`] for a denied request (a grant or policy problem, not the
    /// cluster's), else [`ProbeReport::unhealthy`] with [`HttpError::reason_class`].
    pub fn probe_result(&self) -> Result<ProbeReport, ProbeError> {
        match self {
            Self::Denied(_) => Err(ProbeError::inconclusive(
                ReasonClass::Denied,
                self.describe(),
            )),
            _ => Ok(ProbeReport::unhealthy(
                self.reason_class(),
                self.describe(),
                0,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;

    #[test]
    fn errors_map_to_the_contracts_outcomes() {
        let check = |error: HttpError, class: ReasonClass, counts: bool| {
            assert_eq!(error.reason_class(), class);
            match error.probe_result() {
                Ok(report) => {
                    assert!(counts, "{error:?}");
                    assert_eq!(report.verdict, Verdict::Unhealthy);
                    assert_eq!(report.reason, Some(class));
                }
                Err(ProbeError::Inconclusive(failure)) => {
                    assert!(!counts, "{error:?}");
                    assert_eq!(failure.class, class);
                }
                Err(other) => panic!("{other:?}"),
            }
        };
        check(HttpError::Timeout, ReasonClass::Timeout, true);
        check(HttpError::Refused("x".into()), ReasonClass::Refused, true);
        check(HttpError::Tls("x".into()), ReasonClass::Tls, true);
        check(HttpError::Dns("x".into()), ReasonClass::Dns, true);
        check(
            HttpError::Protocol("x".into()),
            ReasonClass::BadResponse,
            true,
        );
        check(HttpError::TooLarge, ReasonClass::BadResponse, true);
        check(HttpError::Denied("x".into()), ReasonClass::Denied, false);
    }

    #[test]
    fn headers_are_found_without_regard_to_case() {
        let response = Response {
            status: 200,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: Vec::new(),
            latency_ms: 1,
        };
        assert_eq!(response.header("content-type"), Some("application/json"));
        assert_eq!(response.header("etag"), None);
    }
}
