//! Failures, and the `meta/v1` `Status` bodies that carry them.

use bytes::Bytes;
use serde::Serialize;

use super::discovery::ResourceType;
use super::objects::to_json;
use super::{ApiResponse, JSON, TEXT};

/// A `meta/v1` `Status` body reporting a failure, field for field as a real API server writes
/// one (`kind`, `apiVersion`, `metadata: {}`, `status: Failure`, `message`, `reason`, `code`),
/// e.g. `status_body(401, "Unauthorized", "Unauthorized")`.
#[must_use]
pub fn status_body(code: u16, reason: &str, message: &str) -> Bytes {
    to_json(&StatusBody::failure(code, reason, message, None))
}

/// A `Status`, in the API server's field order.
#[derive(Serialize)]
struct StatusBody<'a> {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    metadata: Empty,
    status: &'static str,
    message: &'a str,
    reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<&'a Details>,
    code: u16,
}

impl<'a> StatusBody<'a> {
    fn failure(code: u16, reason: &'a str, message: &'a str, details: Option<&'a Details>) -> Self {
        Self {
            kind: "Status",
            api_version: "v1",
            metadata: Empty {},
            status: "Failure",
            message,
            reason,
            details,
            code,
        }
    }
}

#[derive(Serialize)]
struct Empty {}

/// `Status.details`: which object the failure is about. Empty for "no such resource".
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Details {
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    group: &'static str,
    #[serde(skip_serializing_if = "str::is_empty")]
    kind: &'static str,
}

/// Why a request cannot be answered with what it asked for.
#[derive(Clone, Debug)]
pub(crate) enum Failure {
    /// An API failure, answered with a `Status`.
    Status {
        code: u16,
        reason: &'static str,
        message: String,
        details: Option<Details>,
    },
    /// A path outside the API; the real server's mux answers these in plain text.
    PageNotFound,
}

impl Failure {
    fn status(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self::Status {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// `pods "x" not found`.
    pub(crate) fn not_found(resource: &ResourceType, name: &str) -> Self {
        Self::Status {
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{name}\" not found", resource.qualified_plural()),
            details: Some(Details {
                name: name.to_owned(),
                group: resource.group,
                kind: resource.plural,
            }),
        }
    }

    /// A path inside the API naming no served resource.
    pub(crate) fn resource_not_found() -> Self {
        Self::Status {
            code: 404,
            reason: "NotFound",
            message: "the server could not find the requested resource".to_owned(),
            details: Some(Details::default()),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::status(400, "BadRequest", message)
    }

    /// A continue token from another resource version: the real server's answer once the
    /// revision it names has been compacted away.
    pub(crate) fn continue_expired() -> Self {
        Self::status(
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. You can \
             start a new list without the continue parameter, or use the continue token in this \
             response to retrieve the remainder of the results. Continuing with the provided token \
             results in an inconsistent list - objects that were created, modified, or deleted \
             between the time the first chunk was returned and now may show up in the list.",
        )
    }

    /// Anything but `GET`: the fixtures are read-only.
    pub(crate) fn method_not_allowed() -> Self {
        Self::status(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    /// `?watch=true`: the fixtures never change, and streaming is not implemented.
    pub(crate) fn watch_not_supported() -> Self {
        Self::status(
            405,
            "MethodNotAllowed",
            "watch is not supported by the fake API server",
        )
    }

    pub(crate) fn not_acceptable() -> Self {
        Self::status(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json, \
             application/json;as=Table;v=v1;g=meta.k8s.io",
        )
    }

    pub(crate) fn into_response(self) -> ApiResponse {
        match self {
            Self::Status {
                code,
                reason,
                message,
                details,
            } => ApiResponse {
                status: code,
                content_type: JSON.to_owned(),
                body: to_json(&StatusBody::failure(
                    code,
                    reason,
                    &message,
                    details.as_ref(),
                )),
            },
            Self::PageNotFound => ApiResponse {
                status: 404,
                content_type: TEXT.to_owned(),
                body: Bytes::from_static(b"404 page not found\n"),
            },
        }
    }
}
