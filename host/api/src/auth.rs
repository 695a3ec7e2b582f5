//! Bearer tokens: who may change things, and who may read.
//!
//! Tokens come from `VIGIL_API_TOKEN` (named `default`) and/or `VIGIL_API_TOKENS_FILE`
//! (one `NAME:TOKEN` per line). Only their SHA-256 digests are kept in memory, and a
//! presented token is compared digest to digest, so neither the comparison's timing nor a
//! memory dump reveals a token. The caller's identity — the token's *name*, never the
//! token — is recorded with every mutation.
//!
//! The same middleware keeps browsers from being used against vigil. A web page cannot
//! set `Authorization`, but it can make a browser send requests: to a name it controls
//! that it later points at 127.0.0.1 (DNS rebinding), or cross-site form posts. So a
//! request without a valid token is judged by its headers too:
//!
//! - *Host*: whether or not tokens are configured, vigil answers only requests addressed
//!   to an IP address (a rebinding page sends its own name, never an address; Prometheus
//!   and the kubelet use the pod's address), a loopback name (`localhost`,
//!   `*.localhost`), `VIGIL_PUBLIC_URL`'s host or a name of `VIGIL_API_ALLOWED_HOSTS`;
//!   others get `421` (`host-not-allowed`). `GET`/`HEAD` of `/healthz` and `/readyz` are
//!   not judged (anonymously they tell only whether vigil is ready, and why not), and a
//!   request without any `Host` (no browser sends one) is treated as local.
//! - *Origin*: a change (any method but `GET`, `HEAD`, `OPTIONS`) whose `Origin` is
//!   present and is not vigil's own — `http://` and the request's `Host`, or
//!   `VIGIL_PUBLIC_URL`'s origin — gets `403` (`origin-not-allowed`). Clients that send
//!   no `Origin` (curl, the `vigil` CLI) and same-origin pages are unaffected.
//!
//! With read auth on, every read needs a token but the status page's own files (`/` and
//! its script and style sheet), which hold no data.
//!
//! A request carrying a valid token is exempt from both: a token is proof enough.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::problem::{Problem, ProblemKind};

/// Who made a request, as recorded in the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller(pub Option<String>);

impl Caller {
    /// The identity to record: the token's name, or `anonymous`.
    pub fn actor(&self) -> &str {
        self.0.as_deref().unwrap_or("anonymous")
    }
}

/// The configured tokens and what they protect.
#[derive(Clone, Default)]
pub struct Access {
    /// Token digest → token name, shared by every clone: a reload of the tokens file
    /// (SIGHUP) changes them for every request from then on.
    tokens: Arc<RwLock<HashMap<[u8; 32], String>>>,
    /// Whether reads need a token too.
    read_auth: bool,
    /// Where clients reach vigil when it is behind a proxy (`VIGIL_PUBLIC_URL`).
    public_url: Option<PublicUrl>,
    /// More host names requests without a token may name (`VIGIL_API_ALLOWED_HOSTS`), in
    /// lower case.
    allowed_hosts: Arc<[String]>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("tokens", &self.read_tokens().values().collect::<Vec<_>>())
            .field("read_auth", &self.read_auth)
            .field("public_url", &self.public_url)
            .field("allowed_hosts", &self.allowed_hosts)
            .finish()
    }
}

/// Why the tokens file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    /// The file cannot be read.
    #[error("cannot read the tokens file {file}: {source}")]
    Read {
        /// The file.
        file: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no token (empty, or only blank lines and comments): starting would
    /// leave the API without the protection the setting asks for.
    #[error(
        "the tokens file {file} holds no token (only blank lines and comments); \
         vigil does not start without the tokens it was told to use"
    )]
    Empty {
        /// The file.
        file: String,
    },
    /// A line is not `NAME:TOKEN` (the line's content is not repeated: it may be a token).
    #[error(
        "line {line} of the tokens file {file} is not NAME:TOKEN with a non-empty name and a token of at least 16 characters"
    )]
    Line {
        /// The file.
        file: String,
        /// The 1-based line number.
        line: usize,
    },
}

/// The shortest token accepted: shorter ones are guessable.
pub const MIN_TOKEN_LEN: usize = 16;

impl Access {
    /// Access with `token` (named `default`) and the tokens of `file`.
    pub fn new(
        token: Option<&str>,
        file: Option<&Path>,
        read_auth: bool,
    ) -> Result<Self, TokensError> {
        Ok(Self {
            tokens: Arc::new(RwLock::new(read_tokens(token, file)?)),
            read_auth,
            public_url: None,
            allowed_hosts: Arc::default(),
        })
    }

    /// Reads the tokens again (`token` and the tokens of `file`), for every clone of this
    /// access: a file that cannot be used is refused, and the tokens in force are kept.
    /// Answers how many tokens are in force.
    pub fn reload(&self, token: Option<&str>, file: &Path) -> Result<usize, TokensError> {
        let tokens = read_tokens(token, Some(file))?;
        let count = tokens.len();
        *self.tokens.write().unwrap_or_else(PoisonError::into_inner) = tokens;
        Ok(count)
    }

    fn read_tokens(&self) -> std::sync::RwLockReadGuard<'_, HashMap<[u8; 32], String>> {
        self.tokens.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The same access, with vigil's public URL (its origin and host are vigil's own).
    #[must_use]
    pub fn with_public_url(mut self, public_url: Option<PublicUrl>) -> Self {
        self.public_url = public_url;
        self
    }

    /// The same access, with more host names requests without a token may name.
    #[must_use]
    pub fn with_allowed_hosts(mut self, hosts: &[String]) -> Self {
        self.allowed_hosts = hosts
            .iter()
            .map(|host| host.trim().trim_end_matches('.').to_ascii_lowercase())
            .filter(|host| !host.is_empty())
            .collect();
        self
    }

    /// Whether a request identified as `caller` sees the details of `/readyz` (sinks,
    /// replica, claims): with a valid token, or when vigil has no token at all (it then
    /// listens on loopback only and every read is open).
    pub fn sees_details(&self, caller: Option<&Caller>) -> bool {
        caller.is_some_and(|caller| caller.0.is_some()) || !self.has_tokens()
    }

    /// Whether any token is configured.
    pub fn has_tokens(&self) -> bool {
        !self.read_tokens().is_empty()
    }

    /// The name of the token in an `Authorization: Bearer …` value, if it is one of ours.
    fn identify(&self, authorization: Option<&str>) -> Option<String> {
        let token = authorization?.strip_prefix("Bearer ")?.trim();
        self.read_tokens().get(&digest(token)).cloned()
    }
}

/// `token` (named `default`) and the tokens of `file`.
fn read_tokens(
    token: Option<&str>,
    file: Option<&Path>,
) -> Result<HashMap<[u8; 32], String>, TokensError> {
    let mut tokens = HashMap::new();
    if let Some(token) = token {
        tokens.insert(digest(token), "default".to_owned());
    }
    if let Some(file) = file {
        let text = std::fs::read_to_string(file).map_err(|source| TokensError::Read {
            file: file.display().to_string(),
            source,
        })?;
        let mut found = false;
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match line.split_once(':') {
                Some((name, token))
                    if !name.trim().is_empty() && token.trim().len() >= MIN_TOKEN_LEN =>
                {
                    tokens.insert(digest(token.trim()), name.trim().to_owned());
                    found = true;
                }
                _ => {
                    return Err(TokensError::Line {
                        file: file.display().to_string(),
                        line: index + 1,
                    });
                }
            }
        }
        if !found {
            return Err(TokensError::Empty {
                file: file.display().to_string(),
            });
        }
    }
    Ok(tokens)
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The middleware: identifies the caller, refuses a request without a valid token whose
/// `Host` or `Origin` is not vigil's (see the module's documentation), and refuses a
/// request that needs a token (every mutation when tokens are configured; every request
/// with read auth) and has none, or a wrong one.
pub async fn authenticate(
    State(access): State<Access>,
    mut request: Request,
    next: Next,
) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let presented = authorization.is_some();
    let caller = access.identify(authorization);
    if presented && caller.is_none() && access.has_tokens() {
        return Problem::new(ProblemKind::Unauthorized, "the bearer token is not valid")
            .into_response();
    }
    let mutation = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if caller.is_none()
        && let Err(problem) = access.guard(&request, mutation)
    {
        return problem.into_response();
    }
    // The status page holds no data (its script reads the API with the token), so it is
    // served without one even when reads need one.
    let page = super::page::is_page(request.method(), request.uri().path());
    let needs_token = access.has_tokens() && (mutation || (access.read_auth && !page));
    if needs_token && caller.is_none() {
        return Problem::new(
            ProblemKind::Unauthorized,
            "this request needs `Authorization: Bearer TOKEN`",
        )
        .into_response();
    }
    request.extensions_mut().insert(Caller(caller));
    next.run(request).await
}

impl Access {
    /// The Host and Origin rules, for a request without a valid token.
    fn guard(&self, request: &Request, mutation: bool) -> Result<(), Problem> {
        let host = match request.headers().get(header::HOST) {
            Some(value) => Some(
                value
                    .to_str()
                    .ok()
                    .and_then(Authority::parse)
                    .ok_or_else(|| self.host_refused())?,
            ),
            // HTTP/2 carries the authority in the URI.
            None => request
                .uri()
                .authority()
                .map(|a| Authority::parse(a.as_str()).ok_or_else(|| self.host_refused()))
                .transpose()?,
        };
        let probe_path = matches!(*request.method(), Method::GET | Method::HEAD)
            && matches!(request.uri().path(), "/healthz" | "/readyz");
        // Whether or not tokens exist: a page of another site that rebinds its own name to
        // vigil's address sends that name, never an address.
        if !probe_path
            && let Some(host) = &host
            && !self.host_allowed(host)
        {
            return Err(self.host_refused());
        }
        if mutation && let Some(origin) = request.headers().get(header::ORIGIN) {
            let origin = origin.to_str().ok().and_then(Origin::parse);
            let own = origin.as_ref().is_some_and(|origin| {
                host.as_ref().is_some_and(|host| {
                    origin.scheme == "http"
                        && origin.host == host.host
                        && origin.port == host.port.unwrap_or(80)
                }) || self
                    .public_url
                    .as_ref()
                    .is_some_and(|url| url.origin == *origin)
            });
            if !own {
                return Err(Problem::new(
                    ProblemKind::OriginNotAllowed,
                    "a change sent from a page of another origin needs `Authorization: Bearer \
                     TOKEN`: without a valid token, a request whose Origin header is present \
                     must come from vigil's own origin (http:// and the Host it is sent to, \
                     or VIGIL_PUBLIC_URL)",
                )
                .field("header.origin"));
            }
        }
        Ok(())
    }

    /// Whether a request without a token may name `host`: an IP address (what clients
    /// that scrape or probe by address send: Prometheus, the kubelet), a loopback name,
    /// `VIGIL_PUBLIC_URL`'s host, or one of `VIGIL_API_ALLOWED_HOSTS`.
    fn host_allowed(&self, host: &Authority) -> bool {
        host.is_ip_literal()
            || host.is_loopback()
            || self
                .public_url
                .as_ref()
                .is_some_and(|url| url.host == host.host)
            || self.allowed_hosts.contains(&host.host)
    }

    fn host_refused(&self) -> Problem {
        Problem::new(
            ProblemKind::HostNotAllowed,
            "a request without a token must name in its Host header an IP address, a \
             loopback name (localhost, *.localhost), VIGIL_PUBLIC_URL's host or one of \
             VIGIL_API_ALLOWED_HOSTS (a page of another site reaching vigil through its own \
             name is refused); send `Authorization: Bearer TOKEN`, or add the name to \
             VIGIL_API_ALLOWED_HOSTS",
        )
        .field("header.host")
    }
}

/// A `Host` value: the host in lower case (an IPv6 address in brackets), and the port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    /// `HOST[:PORT]`, `[IPV6][:PORT]`; `None` if it is neither.
    fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (address, after) = rest.split_once(']')?;
            let address: Ipv6Addr = address.parse().ok()?;
            (format!("[{address}]"), after)
        } else {
            let host = text.split_once(':').map_or(text, |(host, _)| host);
            let port = &text[host.len()..];
            let valid = !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
            if !valid {
                return None;
            }
            let host = host.to_ascii_lowercase();
            let host = host
                .strip_suffix('.')
                .map_or_else(|| host.clone(), str::to_owned);
            (host, port)
        };
        let port = match port {
            "" => None,
            port => {
                let digits = port.strip_prefix(':')?;
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                Some(digits.parse().ok()?)
            }
        };
        Some(Self { host, port })
    }

    /// An IPv4 address, or an IPv6 address in brackets.
    fn is_ip_literal(&self) -> bool {
        self.host.parse::<Ipv4Addr>().is_ok()
            || self
                .host
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .is_some_and(|v6| v6.parse::<Ipv6Addr>().is_ok())
    }

    /// `localhost`, `*.localhost`, an address of 127.0.0.0/8 (also in its IPv4-mapped
    /// IPv6 form), or `[::1]`.
    fn is_loopback(&self) -> bool {
        let host = self.host.as_str();
        if host == "localhost" || host.ends_with(".localhost") {
            return true;
        }
        if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            return v6.parse::<Ipv6Addr>().is_ok_and(|a| {
                a.is_loopback() || a.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            });
        }
        host.parse::<Ipv4Addr>().is_ok_and(|a| a.is_loopback())
    }
}

/// An origin: scheme, host and port (the scheme's default when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    /// `http(s)://HOST[:PORT]`; `None` for anything else (`null`, other schemes).
    fn parse(text: &str) -> Option<Self> {
        let (scheme, authority) = text.trim().split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        let default = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return None,
        };
        let authority = Authority::parse(authority)?;
        Some(Self {
            scheme,
            host: authority.host,
            port: authority.port.unwrap_or(default),
        })
    }
}

/// `VIGIL_PUBLIC_URL`: where clients reach vigil when it is behind a proxy. Its origin is
/// vigil's own for the Origin rule, and its host is answered by the Host rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl {
    origin: Origin,
    host: String,
}

impl PublicUrl {
    /// An absolute `http://` or `https://` URL with a host, no user information, no query
    /// and no fragment (a path is allowed and plays no part); the error says why not.
    pub fn parse(text: &str) -> Result<Self, &'static str> {
        const SHAPE: &str = "expected an absolute URL http://HOST[:PORT][/PATH] or https://…";
        let (scheme, rest) = text.split_once("://").ok_or(SHAPE)?;
        if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
            return Err("the scheme must be http or https");
        }
        if text.contains(['?', '#']) || text.chars().any(char::is_whitespace) {
            return Err("a query, a fragment or spaces have no place in it");
        }
        let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
        if authority.contains('@') {
            return Err("user information has no place in it");
        }
        if authority.is_empty() {
            return Err(SHAPE);
        }
        let origin = Origin::parse(&format!("{scheme}://{authority}")).ok_or(SHAPE)?;
        Ok(Self {
            host: origin.host.clone(),
            origin,
        })
    }
}

/// Declares in the OpenAPI document the answers these rules add to every operation they
/// guard: `421` for a Host that is not vigil's (every route but the probes `/healthz` and
/// `/readyz`), and `403` for a cross-origin mutation.
pub(super) fn declare_guard_responses(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let problem = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/problem+json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("Problem")))
                    .build(),
            )
            .build()
    };
    for (path, item) in &mut doc.paths.paths {
        if matches!(path.as_str(), "/healthz" | "/readyz") {
            continue;
        }
        let reads = [&mut item.get, &mut item.head, &mut item.options];
        let mutations = [
            &mut item.post,
            &mut item.put,
            &mut item.patch,
            &mut item.delete,
        ];
        for (operation, mutation) in reads
            .into_iter()
            .map(|o| (o, false))
            .chain(mutations.into_iter().map(|o| (o, true)))
        {
            let Some(operation) = operation.as_mut() else {
                continue;
            };
            let responses = &mut operation.responses.responses;
            responses.entry("421".to_owned()).or_insert_with(|| {
                problem(
                    "Without a valid token, the Host header must name vigil itself \
                     (`host-not-allowed`)",
                )
                .into()
            });
            if mutation {
                responses.entry("403".to_owned()).or_insert_with(|| {
                    problem(
                        "Without a valid token, a browser's cross-origin mutation is refused \
                         (`origin-not-allowed`)",
                    )
                    .into()
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for host in [
            "localhost",
            "LOCALHOST:8080",
            "localhost.",
            "vigil.localhost:1",
            "127.0.0.1",
            "127.0.0.1:8080",
            "127.255.0.9:80",
            "[::1]",
            "[::1]:8080",
            "[::ffff:127.0.0.1]:8080",
        ] {
            let parsed = Authority::parse(host).unwrap_or_else(|| panic!("{host}"));
            assert!(parsed.is_loopback(), "{host}");
        }
        for host in [
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.evil.example:80",
            "10.0.0.1:8080",
            "[::2]",
            "[::ffff:10.0.0.1]",
            "128.0.0.1",
        ] {
            let parsed = Authority::parse(host).unwrap_or_else(|| panic!("{host}"));
            assert!(!parsed.is_loopback(), "{host}");
        }
        for bad in [
            "", ":80", "a:b", "a:", "a b", "[::1", "[nope]:1", "a:1:2", "a@b",
        ] {
            assert!(Authority::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn public_urls() {
        let url = PublicUrl::parse("https://Vigil.Example.com/ui").unwrap();
        assert_eq!(url.host, "vigil.example.com");
        assert_eq!(
            url.origin,
            Origin::parse("https://vigil.example.com:443").unwrap()
        );
        assert!(PublicUrl::parse("http://[::1]:9000").is_ok());
        for bad in [
            "vigil.example.com",
            "ftp://vigil.example.com",
            "https://",
            "https://user:pw@vigil.example.com",
            "https://vigil.example.com/?a=1",
            "https://vigil.example.com:99999",
            "https://vigil example.com",
        ] {
            assert!(PublicUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
