//! Bearer tokens: who may change things, and who may read.
//!
//! Tokens come from `VIGIL_API_TOKEN` (named `default`) and/or `VIGIL_API_TOKENS_FILE`
//! (one `NAME:TOKEN` per line). Only their SHA-256 digests are kept in memory, and a
//! presented token is compared digest to digest, so neither the comparison's timing nor a
//! memory dump reveals a token. The caller's identity — the token's *name*, never the
//! token — is recorded with every mutation.

use std::collections::HashMap;
use std::path::Path;

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
    /// Token digest → token name.
    tokens: HashMap<[u8; 32], String>,
    /// Whether reads need a token too.
    read_auth: bool,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("tokens", &self.tokens.values().collect::<Vec<_>>())
            .field("read_auth", &self.read_auth)
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
        let mut access = Self {
            tokens: HashMap::new(),
            read_auth,
        };
        if let Some(token) = token {
            access.tokens.insert(digest(token), "default".to_owned());
        }
        if let Some(file) = file {
            let text = std::fs::read_to_string(file).map_err(|source| TokensError::Read {
                file: file.display().to_string(),
                source,
            })?;
            for (index, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                match line.split_once(':') {
                    Some((name, token))
                        if !name.trim().is_empty() && token.trim().len() >= MIN_TOKEN_LEN =>
                    {
                        access
                            .tokens
                            .insert(digest(token.trim()), name.trim().to_owned());
                    }
                    _ => {
                        return Err(TokensError::Line {
                            file: file.display().to_string(),
                            line: index + 1,
                        });
                    }
                }
            }
        }
        Ok(access)
    }

    /// Whether any token is configured.
    pub fn has_tokens(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The name of the token in an `Authorization: Bearer …` value, if it is one of ours.
    fn identify(&self, authorization: Option<&str>) -> Option<&str> {
        let token = authorization?.strip_prefix("Bearer ")?.trim();
        self.tokens.get(&digest(token)).map(String::as_str)
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The middleware: identifies the caller, and refuses a request that needs a token
/// (every mutation when tokens are configured; every request with read auth) and has
/// none, or a wrong one.
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
    let caller = access.identify(authorization).map(str::to_owned);
    let mutation = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    let needs_token = access.has_tokens() && (mutation || access.read_auth);
    if (needs_token && caller.is_none()) || (presented && caller.is_none() && access.has_tokens()) {
        return Problem::new(
            ProblemKind::Unauthorized,
            if presented {
                "the bearer token is not valid"
            } else {
                "this request needs `Authorization: Bearer TOKEN`"
            },
        )
        .into_response();
    }
    request.extensions_mut().insert(Caller(caller));
    next.run(request).await
}
