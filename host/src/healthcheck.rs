//! `vigil healthcheck`: asks the local vigil's `/healthz` (or `/readyz`) and says whether it
//! answered 200, for container images that have neither a shell nor curl (a `HEALTHCHECK`
//! in a scratch image, a Kubernetes `exec` probe).
//!
//! The address is `vigil serve`'s own `VIGIL_LISTEN`, an unspecified address (`0.0.0.0`,
//! `[::]`) taken as the loopback address of its family, or `--url`. The probes need no
//! token and are answered whatever `Host` they name, so no setting but the address matters.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use crate::cli::HealthcheckArgs;
use crate::client::{ApiClient, ClientError};

/// The longest `--timeout` accepted.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// Why the check failed: one line for standard error.
#[derive(Debug, thiserror::Error)]
pub enum HealthcheckError {
    /// The URL cannot be used.
    #[error("{0}")]
    Url(ClientError),
    /// No answer (refused, timed out, not HTTP).
    #[error("{0}")]
    Unreachable(ClientError),
    /// vigil answered, but not 200.
    #[error("{url}{path} answered HTTP {status}{}", joined(.reasons))]
    Answered {
        /// The server's URL.
        url: String,
        /// `/healthz` or `/readyz`.
        path: &'static str,
        /// The status.
        status: u16,
        /// What `/readyz` said is missing.
        reasons: Vec<String>,
    },
}

fn joined(reasons: &[String]) -> String {
    if reasons.is_empty() {
        String::new()
    } else {
        format!(": {}", reasons.join("; "))
    }
}

impl HealthcheckError {
    /// Whether the arguments are at fault (exit code 2) rather than vigil's health.
    pub fn is_setting(&self) -> bool {
        matches!(self, Self::Url(_))
    }
}

/// The URL to ask: `--url`, else `http://` and `VIGIL_LISTEN` made reachable.
pub fn server_url(args: &HealthcheckArgs) -> String {
    match args.url.as_deref().filter(|url| !url.is_empty()) {
        Some(url) => url.to_owned(),
        None => format!("http://{}", reachable(args.listen)),
    }
}

/// Where a server listening on `listen` is reached from this host: an unspecified address
/// (listening on every interface) through the loopback address of its family.
pub fn reachable(listen: SocketAddr) -> SocketAddr {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, listen.port())
}

/// `--timeout`: seconds (`2`, `0.5`) or a duration with its unit (`500ms`, `3s`), more
/// than zero and at most an hour.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let timeout = match text.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds > 0.0 => {
            Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())?
        }
        Ok(_) => return Err("expected a number of seconds above 0".to_owned()),
        Err(_) => humantime::parse_duration(text)
            .map_err(|e| format!("expected seconds (2, 0.5) or a duration (500ms): {e}"))?,
    };
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err("expected a timeout above 0 and at most 1 h".to_owned());
    }
    Ok(timeout)
}

/// Asks `/healthz` (or `/readyz` with `--ready`) once, within the timeout, connecting
/// included; `Ok` when vigil answered 200.
pub async fn check(args: &HealthcheckArgs) -> Result<(), HealthcheckError> {
    let path = if args.ready { "/readyz" } else { "/healthz" };
    let client = ApiClient::new(&server_url(args), None)
        .map_err(HealthcheckError::Url)?
        .named_by("VIGIL_LISTEN or --url");
    let (status, body) = client
        .get(path, args.timeout)
        .await
        .map_err(HealthcheckError::Unreachable)?;
    if status == hyper::StatusCode::OK {
        return Ok(());
    }
    // `/readyz` says why it is not ready; anything else is named by its status alone.
    let reasons = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|answer| {
            answer["reasons"].as_array().map(|reasons| {
                reasons
                    .iter()
                    .filter_map(|r| r.as_str().map(str::to_owned))
                    .collect()
            })
        })
        .unwrap_or_default();
    Err(HealthcheckError::Answered {
        url: client.url().to_owned(),
        path,
        status: status.as_u16(),
        reasons,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_listen_address_is_reached_through_loopback() {
        for (listen, reached) in [
            ("0.0.0.0:8080", "127.0.0.1:8080"),
            ("[::]:9000", "[::1]:9000"),
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("10.1.2.3:80", "10.1.2.3:80"),
            ("[::1]:8080", "[::1]:8080"),
        ] {
            let listen: SocketAddr = listen.parse().unwrap();
            assert_eq!(reachable(listen).to_string(), reached, "{listen}");
        }
    }

    #[test]
    fn timeouts_are_seconds_or_durations() {
        for (text, expected) in [
            ("2", Some(Duration::from_secs(2))),
            ("0.5", Some(Duration::from_millis(500))),
            ("500ms", Some(Duration::from_millis(500))),
            ("3s", Some(Duration::from_secs(3))),
            ("0", None),
            ("-1", None),
            ("2h", None),
            ("soon", None),
            ("NaN", None),
        ] {
            assert_eq!(parse_timeout(text).ok(), expected, "{text}");
        }
    }
}
