//! Every API error as `application/problem+json` (RFC 9457), built in one place.
//!
//! Each kind of error has a stable `type` (a URI under `https://vigil.dev/problems/`) that
//! clients may match on; `title` is the kind in words, `detail` what happened to this
//! request, `field` the offending input when there is one. Internal errors say that
//! something failed and nothing else: the cause goes to the log, never to the client.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tracing::{error, warn};
use utoipa::ToSchema;

use vigil_domain::probe::error_chain;
use vigil_store::StoreError;

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The kinds of error, each with its stable `type` URI and HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// The body, path or query does not parse or does not validate.
    InvalidRequest,
    /// The body is larger than the API accepts.
    PayloadTooLarge,
    /// No such cluster, app or route.
    NotFound,
    /// The route exists but does not accept the method.
    MethodNotAllowed,
    /// The name is already taken.
    AlreadyExists,
    /// The target cluster is OFFLINE: deploying or moving an app there is refused
    /// (docs/rules.md#deployment-guard).
    ClusterOffline,
    /// The cluster still has apps.
    ClusterHasApps,
    /// A probe of the cluster is already running.
    ProbeInProgress,
    /// Too many probes run to start one on demand now (`Retry-After` says when to retry).
    ProbesBusy,
    /// The engine runs without a plugin directory: there is nothing to reload.
    NoPluginDirectory,
    /// A file reference outside the allowed directories.
    ReferenceNotAllowed,
    /// No bearer token, or not a valid one.
    Unauthorized,
    /// A request without a valid token addressed to a host name vigil does not answer to
    /// (without tokens: a loopback name or address, or `VIGIL_PUBLIC_URL`'s host).
    HostNotAllowed,
    /// A change without a valid token sent from a page of another origin.
    OriginNotAllowed,
    /// The server failed; the details are in its log.
    Internal,
    /// The server cannot answer now (shutting down, database unreachable or busy).
    Unavailable,
}

impl ProblemKind {
    /// The stable slug of the kind, the last segment of its `type` URI.
    pub const fn slug(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid-request",
            Self::PayloadTooLarge => "payload-too-large",
            Self::NotFound => "not-found",
            Self::MethodNotAllowed => "method-not-allowed",
            Self::AlreadyExists => "already-exists",
            Self::ClusterOffline => "cluster-offline",
            Self::ClusterHasApps => "cluster-has-apps",
            Self::ProbeInProgress => "probe-in-progress",
            Self::ProbesBusy => "probes-busy",
            Self::NoPluginDirectory => "no-plugin-directory",
            Self::ReferenceNotAllowed => "reference-not-allowed",
            Self::Unauthorized => "unauthorized",
            Self::HostNotAllowed => "host-not-allowed",
            Self::OriginNotAllowed => "origin-not-allowed",
            Self::Internal => "internal",
            Self::Unavailable => "unavailable",
        }
    }

    /// The kind in words.
    pub const fn title(self) -> &'static str {
        match self {
            Self::InvalidRequest => "The request is invalid",
            Self::PayloadTooLarge => "The request body is too large",
            Self::NotFound => "Not found",
            Self::MethodNotAllowed => "The route does not accept this method",
            Self::AlreadyExists => "The name is already taken",
            Self::ClusterOffline => "The cluster is OFFLINE",
            Self::ClusterHasApps => "The cluster still has apps",
            Self::ProbeInProgress => "A probe of this cluster is already running",
            Self::ProbesBusy => "Too many probes are running",
            Self::NoPluginDirectory => "vigil runs without a plugin directory",
            Self::ReferenceNotAllowed => "The reference is not allowed",
            Self::Unauthorized => "A valid bearer token is required",
            Self::HostNotAllowed => "vigil does not answer to this Host",
            Self::OriginNotAllowed => "Changes from another origin are refused",
            Self::Internal => "Internal error",
            Self::Unavailable => "Service unavailable",
        }
    }

    /// The HTTP status.
    pub const fn status(self) -> StatusCode {
        match self {
            Self::InvalidRequest | Self::ReferenceNotAllowed => StatusCode::BAD_REQUEST,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::AlreadyExists
            | Self::ClusterOffline
            | Self::ClusterHasApps
            | Self::ProbeInProgress
            | Self::NoPluginDirectory => StatusCode::CONFLICT,
            Self::ProbesBusy => StatusCode::TOO_MANY_REQUESTS,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::HostNotAllowed => StatusCode::MISDIRECTED_REQUEST,
            Self::OriginNotAllowed => StatusCode::FORBIDDEN,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// An error response body (RFC 9457).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Problem {
    /// The kind of error: a stable URI, `https://vigil.dev/problems/SLUG`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The kind in words.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What happened to this request.
    pub detail: String,
    /// The input at fault (`body.endpoint`, `query.status`, `path.name`…), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Seconds after which the same request may succeed: sent as `Retry-After`, not in
    /// the body.
    #[serde(skip)]
    pub retry_after: Option<u32>,
}

/// How long a client is asked to wait before retrying a request the store was too busy for
/// (`Retry-After`, in seconds). The store has already waited its busy timeout by then; a
/// short pause lets the writes ahead of the request drain.
pub const BUSY_RETRY_AFTER_SECONDS: u32 = 2;

impl Problem {
    /// A problem of `kind` with `detail`.
    pub fn new(kind: ProblemKind, detail: impl Into<String>) -> Self {
        Self {
            kind: format!("https://vigil.dev/problems/{}", kind.slug()),
            title: kind.title().to_owned(),
            status: kind.status().as_u16(),
            detail: detail.into(),
            field: None,
            retry_after: None,
        }
    }

    /// The same problem, telling the client to retry after `seconds` (`Retry-After`).
    #[must_use]
    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The same problem, naming the input at fault.
    #[must_use]
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// An invalid request naming `field`.
    pub fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ProblemKind::InvalidRequest, detail).field(field)
    }

    /// A server-side failure: logged with its cause, answered without it.
    pub fn internal(what: &str, error: &dyn std::error::Error) -> Self {
        error!(error = %error_chain(error), "{what} failed");
        Self::new(
            ProblemKind::Internal,
            format!("{what} failed; the server's log has the details"),
        )
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry_after = self.retry_after;
        let mut response = (status, Json(self)).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"vigil\""),
            );
        }
        response
    }
}

impl From<StoreError> for Problem {
    fn from(error: StoreError) -> Self {
        match &error {
            StoreError::NotFound { .. } => Self::new(ProblemKind::NotFound, error.to_string()),
            StoreError::AlreadyExists { .. } => {
                Self::new(ProblemKind::AlreadyExists, error.to_string())
            }
            StoreError::ClusterOffline { .. } => {
                Self::new(ProblemKind::ClusterOffline, error.to_string())
            }
            StoreError::HasApps { .. } => Self::new(ProblemKind::ClusterHasApps, error.to_string()),
            // Busy is not broken: the client may retry, and the cause is logged as a warning.
            _ if error.is_busy() => {
                warn!(error = %error_chain(&error), "the database is busy");
                Self::new(
                    ProblemKind::Unavailable,
                    format!("the database is busy; retry in {BUSY_RETRY_AFTER_SECONDS} seconds"),
                )
                .retry_after(BUSY_RETRY_AFTER_SECONDS)
            }
            _ => Self::internal("the database operation", &error),
        }
    }
}

impl From<JsonRejection> for Problem {
    fn from(rejection: JsonRejection) -> Self {
        match &rejection {
            JsonRejection::JsonDataError(error) => {
                // serde_path_to_error's text is "PATH: MESSAGE"; the path names the field.
                let text = error.body_text();
                let detail = text
                    .strip_prefix("Failed to deserialize the JSON body into the target type: ")
                    .unwrap_or(&text)
                    .to_owned();
                let field = detail
                    .split_once(": ")
                    .map(|(path, _)| path)
                    .filter(|path| !path.contains(' '))
                    .map(|path| format!("body.{path}"))
                    .or_else(|| unknown_field(&detail).map(|f| format!("body.{f}")))
                    .unwrap_or_else(|| "body".to_owned());
                Self::invalid(field, detail)
            }
            JsonRejection::JsonSyntaxError(_) => Self::invalid(
                "body",
                format!("the body is not valid JSON: {}", rejection.body_text()),
            ),
            JsonRejection::MissingJsonContentType(_) => Self::invalid(
                "content-type",
                "the body must be JSON, sent with `Content-Type: application/json`",
            ),
            JsonRejection::BytesRejection(_)
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE =>
            {
                Self::new(ProblemKind::PayloadTooLarge, rejection.body_text()).field("body")
            }
            _ => {
                warn!(rejection = %rejection.body_text(), "request body refused");
                Self::invalid("body", rejection.body_text())
            }
        }
    }
}

/// The field named by serde's "unknown field `x`" message.
fn unknown_field(detail: &str) -> Option<&str> {
    let rest = detail.split("unknown field `").nth(1)?;
    rest.split('`').next()
}

impl From<PathRejection> for Problem {
    fn from(rejection: PathRejection) -> Self {
        use axum::extract::path::ErrorKind;
        // Name the parameter when axum knows which one did not parse (`path.id`).
        let field = match &rejection {
            PathRejection::FailedToDeserializePathParams(failed) => match failed.kind() {
                ErrorKind::ParseErrorAtKey { key, .. }
                | ErrorKind::InvalidUtf8InPathParam { key }
                | ErrorKind::DeserializeError { key, .. } => format!("path.{key}"),
                _ => "path".to_owned(),
            },
            _ => "path".to_owned(),
        };
        Self::invalid(field, rejection.body_text())
    }
}

impl From<QueryRejection> for Problem {
    fn from(rejection: QueryRejection) -> Self {
        let text = rejection.body_text();
        let detail = text
            .strip_prefix("Failed to deserialize query string: ")
            .unwrap_or(&text)
            .to_owned();
        let field = unknown_field(&detail)
            .map(|f| format!("query.{f}"))
            .unwrap_or_else(|| "query".to_owned());
        Self::invalid(field, detail)
    }
}

/// Adds to every operation under `/api/v1` of `openapi` the `503` that a busy store (or a
/// server that cannot answer now) gives, with its `Retry-After`: any of them may meet it, so
/// it is documented once here rather than on each route.
pub fn document_unavailable(openapi: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::header::HeaderBuilder;
    use utoipa::openapi::schema::Type;
    use utoipa::openapi::{ContentBuilder, ObjectBuilder, Ref, ResponseBuilder};
    let response = ResponseBuilder::new()
        .description(
            "The database is busy, or the server cannot answer now: retry after `Retry-After` seconds",
        )
        .header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(ObjectBuilder::new().schema_type(Type::Integer))
                .description(Some("Seconds to wait before retrying"))
                .build(),
        )
        .content(
            PROBLEM_JSON,
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Problem")))
                .build(),
        )
        .build();
    for (path, item) in &mut openapi.paths.paths {
        if !path.starts_with("/api/v1/") {
            continue;
        }
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        for operation in operations.into_iter().flatten() {
            operation
                .responses
                .responses
                .entry(StatusCode::SERVICE_UNAVAILABLE.as_str().to_owned())
                .or_insert_with(|| response.clone().into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem_of(source: vigil_store::DatabaseError) -> Problem {
        StoreError::Query {
            doing: "testing",
            source,
        }
        .into()
    }

    #[test]
    fn a_store_that_timed_out_waiting_for_a_connection_is_unavailable_not_broken() {
        let problem = problem_of(vigil_store::DatabaseError::pool_timed_out());
        assert_eq!(problem.status, 503, "{problem:?}");
        assert_eq!(problem.retry_after, Some(BUSY_RETRY_AFTER_SECONDS));
        let response = problem.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response.headers()[header::RETRY_AFTER],
            BUSY_RETRY_AFTER_SECONDS.to_string()
        );
        // Anything else the database says stays an internal error, without a retry hint.
        let problem = problem_of(vigil_store::DatabaseError::row_not_found());
        assert_eq!((problem.status, problem.retry_after), (500, None));
        assert!(
            !problem
                .into_response()
                .headers()
                .contains_key(header::RETRY_AFTER)
        );
    }
}
