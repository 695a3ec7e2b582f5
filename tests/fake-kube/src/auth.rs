//! Authentication and authorisation, as a Kubernetes API server with anonymous access
//! disabled does them: client certificates signed by the cluster's CA (CN is the user, O the
//! groups) are tried first, then static bearer tokens; nothing valid is a 401. An
//! authenticated user may read the public non-resource paths (`/version`, `/readyz`,
//! discovery…); anything else needs a privileged group or user, otherwise it is a 403 whose
//! message is worded as the real authoriser words it.
//!
//! Everything here is pure: the server hands in the verified peer identity and the headers.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// The group that Kubernetes' bootstrap policy binds to `cluster-admin`.
pub const MASTERS_GROUP: &str = "system:masters";
/// The group every authenticated user belongs to.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The user name of the default administrator credentials (as kubeadm names it).
pub const ADMIN_USER: &str = "kubernetes-admin";
/// The user name of the default credentials that authenticate but have no permission.
pub const READER_WITHOUT_RBAC: &str = "reader-without-rbac";

/// An authenticated user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// The user name (a client certificate's CN).
    pub name: String,
    /// The groups (a client certificate's O entries).
    pub groups: Vec<String>,
}

impl User {
    /// A user with a name and groups.
    pub fn new(name: impl Into<String>, groups: &[&str]) -> Self {
        Self {
            name: name.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    /// The default administrator: `kubernetes-admin` in `system:masters`.
    pub fn admin() -> Self {
        Self::new(ADMIN_USER, &[MASTERS_GROUP])
    }

    /// The default user without permissions: `reader-without-rbac`, no group.
    pub fn reader_without_rbac() -> Self {
        Self::new(READER_WITHOUT_RBAC, &[])
    }
}

/// Which credentials a request carried, as recorded in the request log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum AuthUsed {
    /// No client certificate and no bearer token.
    Anonymous,
    /// A client certificate signed by the cluster's CA.
    ClientCertificate {
        /// The certificate's CN.
        user: String,
    },
    /// A known bearer token.
    Token {
        /// The token's user.
        user: String,
    },
    /// A client certificate that the cluster's CA did not sign (and no valid token).
    RejectedClientCertificate,
    /// An unknown bearer token (and no valid client certificate).
    RejectedToken,
}

/// The client certificate of a connection, verified once after the handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerCertificate {
    /// The client sent no certificate.
    None,
    /// The certificate chains to the cluster's CA; this is its user.
    Valid(User),
    /// The certificate does not chain to the cluster's CA, or cannot be read.
    Invalid,
}

/// The outcome of authentication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authentication {
    /// What the request carried, for the log.
    pub used: AuthUsed,
    /// The user, when authentication succeeded.
    pub user: Option<User>,
}

/// The static bearer tokens a cluster accepts.
#[derive(Clone, Debug, Default)]
pub struct TokenTable {
    tokens: HashMap<String, User>,
}

impl TokenTable {
    /// Adds (or replaces) a token.
    pub fn insert(&mut self, token: impl Into<String>, user: User) {
        self.tokens.insert(token.into(), user);
    }

    /// Removes a token; returns whether it was known.
    pub fn remove(&mut self, token: &str) -> bool {
        self.tokens.remove(token).is_some()
    }

    /// The user of a token.
    pub fn get(&self, token: &str) -> Option<&User> {
        self.tokens.get(token)
    }
}

/// Authenticates a request from its connection's client certificate and its
/// `Authorization` header. A valid certificate wins; then a valid token; anything else is
/// unauthenticated.
pub fn authenticate(
    peer: &PeerCertificate,
    authorization: Option<&[u8]>,
    tokens: &TokenTable,
) -> Authentication {
    if let PeerCertificate::Valid(user) = peer {
        return Authentication {
            used: AuthUsed::ClientCertificate {
                user: user.name.clone(),
            },
            user: Some(user.clone()),
        };
    }
    if let Some(token) = authorization.and_then(bearer_token) {
        return match tokens.get(token) {
            Some(user) => Authentication {
                used: AuthUsed::Token {
                    user: user.name.clone(),
                },
                user: Some(user.clone()),
            },
            None => Authentication {
                used: AuthUsed::RejectedToken,
                user: None,
            },
        };
    }
    let used = match peer {
        PeerCertificate::Invalid => AuthUsed::RejectedClientCertificate,
        _ => AuthUsed::Anonymous,
    };
    Authentication { used, user: None }
}

/// Extracts the token of an `Authorization: Bearer …` header (the scheme is
/// case-insensitive, as in Kubernetes); an empty token is no token.
fn bearer_token(header: &[u8]) -> Option<&str> {
    let header = std::str::from_utf8(header).ok()?.trim();
    let (scheme, token) = header.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Who may do what beyond the public paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessPolicy {
    /// Members of these groups may do anything.
    pub privileged_groups: Vec<String>,
    /// These users may do anything.
    pub privileged_users: Vec<String>,
    /// Resources (plural, e.g. `pods`) no one may read, privileged or not: an RBAC role
    /// that leaves them out, for tests of a client that must read them.
    pub forbidden_resources: Vec<String>,
}

impl Default for AccessPolicy {
    fn default() -> Self {
        Self {
            privileged_groups: vec![MASTERS_GROUP.to_owned()],
            privileged_users: Vec::new(),
            forbidden_resources: Vec::new(),
        }
    }
}

/// What a request asks to do, derived from its method, path and query as the API server's
/// request-info resolver does (roughly: good enough for messages and decisions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestAttributes {
    /// A request for a resource.
    Resource {
        /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
        verb: String,
        /// The API group (`""` for the core group).
        group: String,
        /// The resource, e.g. `pods`.
        resource: String,
        /// The subresource, e.g. `scale`.
        subresource: Option<String>,
        /// The namespace, if the request is namespaced.
        namespace: Option<String>,
        /// The object's name, if the request names one.
        name: Option<String>,
    },
    /// A request for a path that is not a resource (`/version`, discovery…).
    NonResource {
        /// The lowercase method (`get`, `post`…).
        verb: String,
        /// The path.
        path: String,
    },
}

impl RequestAttributes {
    /// Derives the attributes of a request.
    pub fn from_request(method: &str, path: &str, query: Option<&str>) -> Self {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (group, rest) = match segments.as_slice() {
            ["api", _version, rest @ ..] if !rest.is_empty() => ("", rest),
            ["apis", group, _version, rest @ ..] if !rest.is_empty() => (*group, rest),
            _ => {
                return Self::NonResource {
                    verb: method.to_ascii_lowercase(),
                    path: path.to_owned(),
                };
            }
        };
        let (namespace, rest) = match rest {
            ["namespaces", namespace, rest @ ..] if !rest.is_empty() => {
                (Some((*namespace).to_owned()), rest)
            }
            _ => (None, rest),
        };
        let resource = rest[0].to_owned();
        let name = rest.get(1).map(|s| (*s).to_owned());
        let subresource = rest.get(2).map(|s| (*s).to_owned());
        let watch =
            query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
        let verb = match (method, name.is_some()) {
            ("GET" | "HEAD", true) => "get",
            ("GET" | "HEAD", false) if watch => "watch",
            ("GET" | "HEAD", false) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            (other, _) => {
                return Self::NonResource {
                    verb: other.to_ascii_lowercase(),
                    path: path.to_owned(),
                };
            }
        };
        Self::Resource {
            verb: verb.to_owned(),
            group: group.to_owned(),
            resource,
            subresource,
            namespace,
            name,
        }
    }

    /// Whether every authenticated user may make this request (Kubernetes'
    /// `system:discovery`, `system:public-info-viewer` and `system:basic-user` roles).
    fn is_public(&self) -> bool {
        match self {
            Self::NonResource { verb, path } => {
                let path = path.trim_end_matches('/');
                verb == "get"
                    && (matches!(
                        path,
                        "" | "/api" | "/apis" | "/version" | "/healthz" | "/livez" | "/readyz"
                    ) || path.starts_with("/api/")
                        || path.starts_with("/apis/")
                        || path.starts_with("/healthz/")
                        || path.starts_with("/livez/")
                        || path.starts_with("/readyz/")
                        || path.starts_with("/openapi/"))
            }
            Self::Resource {
                verb,
                group,
                resource,
                ..
            } => {
                verb == "create"
                    && group == "authorization.k8s.io"
                    && matches!(
                        resource.as_str(),
                        "selfsubjectaccessreviews" | "selfsubjectrulesreviews"
                    )
            }
        }
    }

    /// The message of a 403, worded as the API server words it.
    pub fn forbidden_message(&self, user: &str) -> String {
        match self {
            Self::NonResource { verb, path } => {
                format!("forbidden: User {user:?} cannot {verb} path {path:?}")
            }
            Self::Resource {
                verb,
                group,
                resource,
                subresource,
                namespace,
                name,
            } => {
                let qualified = if group.is_empty() {
                    resource.clone()
                } else {
                    format!("{resource}.{group}")
                };
                let full_resource = match subresource {
                    Some(sub) => format!("{resource}/{sub}"),
                    None => resource.clone(),
                };
                let subject = match name {
                    Some(name) => format!("{qualified} {name:?}"),
                    None => qualified,
                };
                let scope = match namespace {
                    Some(ns) => format!("in the namespace {ns:?}"),
                    None => "at the cluster scope".to_owned(),
                };
                format!(
                    "{subject} is forbidden: User {user:?} cannot {verb} resource {full_resource:?} in API group {group:?} {scope}"
                )
            }
        }
    }
}

/// Decides whether `user` may make a request; `Err` carries the 403 message.
pub fn authorize(
    policy: &AccessPolicy,
    user: &User,
    attributes: &RequestAttributes,
) -> Result<(), String> {
    let privileged = policy.privileged_users.contains(&user.name)
        || user
            .groups
            .iter()
            .any(|group| policy.privileged_groups.contains(group));
    let forbidden = matches!(
        attributes,
        RequestAttributes::Resource { resource, .. } if policy.forbidden_resources.contains(resource)
    );
    if (privileged && !forbidden) || attributes.is_public() {
        Ok(())
    } else {
        Err(attributes.forbidden_message(&user.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> TokenTable {
        let mut table = TokenTable::default();
        table.insert("admin-token", User::admin());
        table.insert("reader-token", User::reader_without_rbac());
        table
    }

    #[test]
    fn authenticates_like_a_union_authenticator() {
        let cert_user = User::new("alice", &["devs"]);
        let cases: [(PeerCertificate, Option<&str>, AuthUsed); 8] = [
            (PeerCertificate::None, None, AuthUsed::Anonymous),
            (
                PeerCertificate::None,
                Some("Bearer admin-token"),
                AuthUsed::Token {
                    user: ADMIN_USER.into(),
                },
            ),
            (
                PeerCertificate::None,
                Some("bearer  reader-token "),
                AuthUsed::Token {
                    user: READER_WITHOUT_RBAC.into(),
                },
            ),
            (
                PeerCertificate::None,
                Some("Bearer wrong"),
                AuthUsed::RejectedToken,
            ),
            (
                PeerCertificate::None,
                Some("Basic YWRtaW4="),
                AuthUsed::Anonymous,
            ),
            (
                PeerCertificate::Valid(cert_user),
                Some("Bearer wrong"),
                AuthUsed::ClientCertificate {
                    user: "alice".into(),
                },
            ),
            (
                PeerCertificate::Invalid,
                None,
                AuthUsed::RejectedClientCertificate,
            ),
            (
                PeerCertificate::Invalid,
                Some("Bearer admin-token"),
                AuthUsed::Token {
                    user: ADMIN_USER.into(),
                },
            ),
        ];
        for (peer, header, used) in cases {
            let auth = authenticate(&peer, header.map(str::as_bytes), &tokens());
            assert_eq!(auth.used, used, "{peer:?} {header:?}");
            let authenticated = matches!(
                used,
                AuthUsed::ClientCertificate { .. } | AuthUsed::Token { .. }
            );
            assert_eq!(auth.user.is_some(), authenticated, "{peer:?} {header:?}");
        }
    }

    #[test]
    fn derives_request_attributes() {
        let check = |method: &str, path: &str, query: Option<&str>, expected: &str| {
            let message =
                RequestAttributes::from_request(method, path, query).forbidden_message("bob");
            assert_eq!(message, expected, "{method} {path}");
        };
        check(
            "GET",
            "/api/v1/namespaces",
            Some("limit=1"),
            r#"namespaces is forbidden: User "bob" cannot list resource "namespaces" in API group "" at the cluster scope"#,
        );
        check(
            "GET",
            "/api/v1/namespaces/default",
            None,
            r#"namespaces "default" is forbidden: User "bob" cannot get resource "namespaces" in API group "" at the cluster scope"#,
        );
        check(
            "GET",
            "/api/v1/namespaces/default/pods",
            Some("watch=true"),
            r#"pods is forbidden: User "bob" cannot watch resource "pods" in API group "" in the namespace "default""#,
        );
        check(
            "GET",
            "/apis/apps/v1/namespaces/web/deployments/front/scale",
            None,
            r#"deployments.apps "front" is forbidden: User "bob" cannot get resource "deployments/scale" in API group "apps" in the namespace "web""#,
        );
        check(
            "DELETE",
            "/api/v1/namespaces/default/pods",
            None,
            r#"pods is forbidden: User "bob" cannot deletecollection resource "pods" in API group "" in the namespace "default""#,
        );
        check(
            "GET",
            "/metrics",
            None,
            r#"forbidden: User "bob" cannot get path "/metrics""#,
        );
    }

    #[test]
    fn authorises_public_paths_for_everyone_and_the_rest_for_masters() {
        let policy = AccessPolicy::default();
        let reader = User::reader_without_rbac();
        let admin = User::admin();
        let cases = [
            ("GET", "/version", true),
            ("GET", "/readyz", true),
            ("GET", "/api", true),
            ("GET", "/api/v1", true),
            ("GET", "/apis/apps/v1", true),
            ("GET", "/api/v1/namespaces", false),
            ("GET", "/metrics", false),
            (
                "POST",
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                true,
            ),
        ];
        for (method, path, reader_allowed) in cases {
            let attributes = RequestAttributes::from_request(method, path, None);
            assert_eq!(
                authorize(&policy, &reader, &attributes).is_ok(),
                reader_allowed,
                "{method} {path}"
            );
            assert!(
                authorize(&policy, &admin, &attributes).is_ok(),
                "{method} {path}"
            );
        }
    }

    #[test]
    fn forbidden_resources_are_refused_even_to_masters() {
        let policy = AccessPolicy {
            forbidden_resources: vec!["pods".to_owned()],
            ..AccessPolicy::default()
        };
        let admin = User::admin();
        let pods = RequestAttributes::from_request("GET", "/api/v1/pods", Some("limit=500"));
        let message = authorize(&policy, &admin, &pods).expect_err("pods are forbidden");
        assert!(
            message.starts_with("pods is forbidden: User \"kubernetes-admin\""),
            "{message}"
        );
        let nodes = RequestAttributes::from_request("GET", "/api/v1/nodes", None);
        assert!(authorize(&policy, &admin, &nodes).is_ok());
        let version = RequestAttributes::from_request("GET", "/version", None);
        assert!(authorize(&policy, &admin, &version).is_ok());
    }
}
