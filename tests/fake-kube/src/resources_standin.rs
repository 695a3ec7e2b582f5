//! Temporary development stand-in for the colleague's `resources` module (removed once it lands).
#![allow(missing_docs, dead_code)]
use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;

#[derive(Debug, Default)]
pub struct Fixtures {
    secrets: BTreeMap<(String, String), BTreeMap<String, Vec<u8>>>,
}

#[derive(Debug, thiserror::Error)]
#[error("fixture error: {0}")]
pub struct FixtureError(String);

impl Fixtures {
    pub fn empty() -> Self {
        Self::default()
    }
    pub fn load(path: &Path) -> Result<Self, FixtureError> {
        std::fs::read_to_string(path).map_err(|e| FixtureError(e.to_string()))?;
        Ok(Self::default())
    }
    pub fn from_yaml(_text: &str) -> Result<Self, FixtureError> {
        Ok(Self::default())
    }
    pub fn insert_secret(&mut self, namespace: &str, name: &str, data: BTreeMap<String, Vec<u8>>) {
        self.secrets.insert((namespace.to_owned(), name.to_owned()), data);
    }
}

pub struct ApiRequest<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub accept: Option<&'a str>,
}

pub struct ApiResponse {
    pub status: u16,
    pub content_type: String,
    pub body: Bytes,
}

pub fn respond(fixtures: &Fixtures, request: &ApiRequest<'_>) -> ApiResponse {
    let json = |status: u16, body: String| ApiResponse { status, content_type: "application/json".into(), body: Bytes::from(body) };
    match request.path {
        "/version" => json(200, r#"{"major":"1","minor":"33","gitVersion":"v1.33.0"}"#.into()),
        "/readyz" | "/livez" | "/healthz" => ApiResponse { status: 200, content_type: "text/plain".into(), body: Bytes::from_static(b"ok") },
        "/api/v1/namespaces" => json(200, r#"{"kind":"NamespaceList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"default"}},{"metadata":{"name":"kube-system"}}]}"#.into()),
        p if p.starts_with("/api/v1/namespaces/") && p.contains("/secrets/") => {
            let parts: Vec<&str> = p.split('/').collect();
            match fixtures.secrets.get(&(parts[4].to_owned(), parts[6].to_owned())) {
                Some(_) => json(200, format!(r#"{{"kind":"Secret","apiVersion":"v1","metadata":{{"name":"{}"}}}}"#, parts[6])),
                None => ApiResponse { status: 404, content_type: "application/json".into(), body: status_body(404, "NotFound", "not found") },
            }
        }
        _ => ApiResponse { status: 404, content_type: "application/json".into(), body: status_body(404, "NotFound", "the server could not find the requested resource") },
    }
}

pub fn status_body(code: u16, reason: &str, message: &str) -> Bytes {
    Bytes::from(
        serde_json::json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":message,"reason":reason,"code":code})
            .to_string(),
    )
}
