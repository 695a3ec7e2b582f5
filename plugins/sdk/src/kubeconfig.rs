//! Kubeconfigs: typed structs, parsing, and the selection of what a probe connects with.
//!
//! Most plugins need only [`select`]: give it the kubeconfig's bytes (from
//! [`crate::credentials::kubeconfig`]) and the reference's context, and it returns a
//! [`Selection`] — server, TLS settings, credentials inline or as files — or a [`SelectError`]
//! that says why the cluster is not probeable. [`crate::apiserver::ApiServer`] then reads the
//! files and builds the requests.
//!
//! # Agreement with the host
//!
//! vigil's host reads the same kubeconfigs (`host/domain/src/reference.rs`: which server, which
//! files it serves to the plugin, which credential kind), and the two readings must agree, or
//! the host would refuse the files a plugin asks for. Where both sides make the same
//! decision, they run the same code, from the crate `vigil-kubeconfig-rules`: the text
//! decoding (UTF-8 with or without a byte-order mark, UTF-16 with one, no NUL characters) and
//! the 4 MiB cap, the sanitising of YAML errors, the base64 of `*-data` fields (as kubectl
//! decodes it: padded, line breaks ignored), the resolution of relative paths and the check
//! of `server` URLs. The rest reproduces the host's reader, which is the `kube` crate's
//! `Kubeconfig` over `serde-saphyr` (a crate that does not build for WebAssembly), rule by
//! rule, and the differential test `host/plugin-host/tests/it/differential.rs` checks that both readings
//! agree on every kubeconfig of the corpus:
//!
//! - the same YAML library and the same struct shapes (including the catch-all maps that make
//!   serde buffer each struct, which changes how scalars are read), several YAML documents
//!   merged as kube merges them (first definition wins);
//! - the same checks that the text is a kubeconfig at all;
//! - the same selection: the reference's context, else a non-empty `current-context`; the
//!   first context, cluster and user of each name; a missing `user` means anonymous;
//!   `exec` and `auth-provider` users are [`ReasonClass::ExecCredentials`] before anything
//!   else is looked at; `*-data` fields win over files; a token wins over a token file; empty
//!   strings count as absent.
//!
//! A kubeconfig written as JSON (what the host serves: [`crate::credentials::kubeconfig`]
//! returns a JSON rendering of the selected context) is read by `serde_json` into the same
//! structs, which is much faster in WebAssembly than the YAML parser; text that is not such
//! JSON goes to the YAML parser.
//!
//! One difference is by design: [`select`] does no I/O, so it cannot tell that a file the
//! kubeconfig names is missing; the host can, and says `reference-broken` before the plugin
//! runs. A plugin learns it when [`crate::credentials::read_file`] answers `not-found`.
//!
//! [`ReasonClass::ExecCredentials`]: crate::ReasonClass::ExecCredentials

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde::{Deserialize, Deserializer};
use vigil_kubeconfig_rules::text::yaml_parse_problem;

use crate::SecretString;

mod select;

pub use select::{
    CredentialKind, Material, SelectError, Selection, resolve_path, select, select_in,
};

/// The largest kubeconfig read, in bytes (the host's limit too).
pub use vigil_kubeconfig_rules::text::MAX_KUBECONFIG_BYTES;

/// A kubeconfig, as `kubectl config view` shows one.
///
/// The field set and the serde attributes are those of the `kube` crate's `Kubeconfig`,
/// which the host uses: both must accept and refuse the same files.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Kubeconfig {
    /// Preferences for command-line tools (unused by vigil).
    pub preferences: Option<Preferences>,
    /// The clusters, by name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub clusters: Vec<NamedCluster>,
    /// The users (credentials), by name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub users: Vec<NamedUser>,
    /// The contexts (a cluster and a user), by name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub contexts: Vec<NamedContext>,
    /// The context used when a reference names none.
    #[serde(rename = "current-context")]
    pub current_context: Option<String>,
    /// Extensions (unused by vigil).
    pub extensions: Option<Vec<NamedExtension>>,
    /// `Config` in a kubeconfig.
    pub kind: Option<String>,
    /// `v1` in a kubeconfig.
    #[serde(rename = "apiVersion")]
    pub api_version: Option<String>,
    /// Every other top-level field.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// Preferences for command-line tools.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Preferences {
    /// Whether to use colours.
    pub colors: Option<bool>,
    /// Extensions.
    pub extensions: Option<Vec<NamedExtension>>,
    /// Every other field.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// A named extension.
#[derive(Debug, Clone, Deserialize)]
pub struct NamedExtension {
    /// Its name.
    pub name: String,
    /// Its content, of any shape.
    pub extension: serde_json::Value,
}

/// A cluster entry: a name and how to reach the cluster.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct NamedCluster {
    /// The name contexts refer to.
    pub name: String,
    /// How to reach the cluster; an entry without it has no server.
    pub cluster: Option<Cluster>,
    /// Every other field.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// How to reach a cluster's API server. `Debug` shows the server and settings but not the
/// inline certificate data.
#[derive(Clone, Default, Deserialize)]
pub struct Cluster {
    /// The API server's URL, e.g. `https://10.0.0.1:6443`.
    pub server: Option<String>,
    /// Accept any server certificate.
    #[serde(rename = "insecure-skip-tls-verify")]
    pub insecure_skip_tls_verify: Option<bool>,
    /// A CA certificate file (PEM); relative to the kubeconfig's directory.
    #[serde(rename = "certificate-authority")]
    pub certificate_authority: Option<String>,
    /// CA certificates (base64 of PEM); win over `certificate-authority`.
    #[serde(rename = "certificate-authority-data")]
    pub certificate_authority_data: Option<String>,
    /// A proxy URL (not supported by vigil: requests go direct).
    #[serde(rename = "proxy-url")]
    pub proxy_url: Option<String>,
    /// Whether to ask the server not to compress responses.
    #[serde(rename = "disable-compression")]
    pub disable_compression: Option<bool>,
    /// The name to check the server's certificate against, when it differs from the URL's.
    #[serde(rename = "tls-server-name")]
    pub tls_server_name: Option<String>,
    /// Extensions.
    pub extensions: Option<Vec<NamedExtension>>,
    /// Every other field.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("server", &self.server)
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("certificate_authority", &self.certificate_authority)
            .field(
                "certificate_authority_data",
                &self.certificate_authority_data.as_ref().map(|_| "<set>"),
            )
            .field("tls_server_name", &self.tls_server_name)
            .finish_non_exhaustive()
    }
}

/// A user entry: a name and credentials.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct NamedUser {
    /// The name contexts refer to.
    pub name: String,
    /// The credentials; an entry without them means anonymous.
    pub user: Option<AuthInfo>,
    /// Every other field.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// A user's credentials. `Debug` never shows a secret value (only which fields are set).
#[derive(Clone, Default, Deserialize)]
pub struct AuthInfo {
    /// Basic-authentication user name (removed from Kubernetes; refused by vigil).
    pub username: Option<String>,
    /// Basic-authentication password.
    #[serde(default)]
    pub password: Option<SecretString>,
    /// A bearer token; wins over `tokenFile`.
    #[serde(default)]
    pub token: Option<SecretString>,
    /// A file holding a bearer token; relative to the kubeconfig's directory.
    #[serde(rename = "tokenFile")]
    pub token_file: Option<String>,
    /// A client certificate file (PEM).
    #[serde(rename = "client-certificate")]
    pub client_certificate: Option<String>,
    /// A client certificate (base64 of PEM); wins over `client-certificate`.
    #[serde(rename = "client-certificate-data")]
    pub client_certificate_data: Option<String>,
    /// A client key file (PEM).
    #[serde(rename = "client-key")]
    pub client_key: Option<String>,
    /// A client key (base64 of PEM); wins over `client-key`.
    #[serde(rename = "client-key-data", default)]
    pub client_key_data: Option<SecretString>,
    /// A user to impersonate.
    #[serde(rename = "as")]
    pub impersonate: Option<String>,
    /// A UID to impersonate.
    #[serde(rename = "as-uid")]
    pub impersonate_uid: Option<String>,
    /// Groups to impersonate.
    #[serde(rename = "as-groups")]
    pub impersonate_groups: Option<Vec<String>>,
    /// Extra fields of the impersonated user.
    #[serde(rename = "as-user-extra")]
    pub impersonate_user_extra: Option<HashMap<String, Vec<String>>>,
    /// Extensions.
    pub extensions: Option<Vec<NamedExtension>>,
    /// A legacy authentication provider (e.g. `gcp`, `oidc`): not supported by vigil.
    #[serde(rename = "auth-provider")]
    pub auth_provider: Option<AuthProviderConfig>,
    /// A credential plugin command: not supported by vigil.
    pub exec: Option<ExecConfig>,
    /// Every other field.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

impl fmt::Debug for AuthInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Which fields are set, never their values: a kubeconfig's users are its secrets,
        // and the non-secret fields (paths, names) are not worth the risk of a mistake here.
        let set = [
            ("username", self.username.is_some()),
            ("password", self.password.is_some()),
            ("token", self.token.is_some()),
            ("tokenFile", self.token_file.is_some()),
            ("client-certificate", self.client_certificate.is_some()),
            (
                "client-certificate-data",
                self.client_certificate_data.is_some(),
            ),
            ("client-key", self.client_key.is_some()),
            ("client-key-data", self.client_key_data.is_some()),
            ("as", self.impersonate.is_some()),
            ("auth-provider", self.auth_provider.is_some()),
            ("exec", self.exec.is_some()),
        ];
        let fields: Vec<&str> = set
            .iter()
            .filter(|(_, present)| *present)
            .map(|(name, _)| *name)
            .collect();
        f.debug_struct("AuthInfo")
            .field("fields_set", &fields)
            .finish_non_exhaustive()
    }
}

/// A legacy authentication provider's settings.
#[derive(Clone, Default, Deserialize)]
pub struct AuthProviderConfig {
    /// The provider's name, e.g. `gcp`, `oidc`.
    pub name: String,
    /// Its settings (they hold tokens).
    #[serde(default)]
    pub config: HashMap<String, String>,
    /// Every other field.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

impl fmt::Debug for AuthProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthProviderConfig")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A credential plugin's settings.
#[derive(Clone, Default, Deserialize)]
pub struct ExecConfig {
    /// The `ExecCredential` version the plugin speaks.
    #[serde(rename = "apiVersion")]
    pub api_version: Option<String>,
    /// The command to run.
    pub command: Option<String>,
    /// Its arguments (they may hold secrets).
    pub args: Option<Vec<String>>,
    /// Extra environment variables, as `{name, value}` maps (they may hold secrets).
    pub env: Option<Vec<HashMap<String, String>>>,
    /// Shown when the command is missing.
    #[serde(rename = "installHint")]
    pub install_hint: Option<String>,
    /// Whether the plugin may prompt.
    #[serde(rename = "interactiveMode")]
    pub interactive_mode: Option<ExecInteractiveMode>,
    /// Whether the plugin receives the cluster's details.
    #[serde(default, rename = "provideClusterInfo")]
    pub provide_cluster_info: bool,
    /// Every other field.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

impl ExecConfig {
    /// The command's file name (`/opt/bin/kubelogin` → `kubelogin`): safe to show, unlike
    /// its arguments and environment.
    pub fn command_name(&self) -> Option<&str> {
        self.command
            .as_deref()
            .map(std::path::Path::new)
            .and_then(std::path::Path::file_name)
            .and_then(|name| name.to_str())
    }
}

impl fmt::Debug for ExecConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecConfig")
            .field("command", &self.command_name())
            .finish_non_exhaustive()
    }
}

/// Whether a credential plugin may prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ExecInteractiveMode {
    /// Never.
    Never,
    /// When a terminal is available.
    IfAvailable,
    /// Always.
    Always,
}

/// A context entry: a name, and the cluster and user it joins.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct NamedContext {
    /// The context's name (the cluster's name in vigil, for discovered clusters).
    pub name: String,
    /// The cluster and user; an entry without it cannot be used.
    pub context: Option<Context>,
    /// Every other field.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// A context: a cluster and a user.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Context {
    /// The cluster's name.
    pub cluster: String,
    /// The user's name; absent or empty means anonymous.
    pub user: Option<String>,
    /// The default namespace (unused by vigil).
    pub namespace: Option<String>,
    /// Extensions.
    pub extensions: Option<Vec<NamedExtension>>,
    /// Every other field.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// Reads `null` as the default value, as kube does for the three lists.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    T: Default + Deserialize<'de>,
    D: Deserializer<'de>,
{
    Ok(Option::deserialize(deserializer)?.unwrap_or_default())
}

/// A line and column in a kubeconfig, both counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextPosition {
    /// The line, from 1.
    pub line: u64,
    /// The column, from 1.
    pub column: u64,
}

impl fmt::Display for TextPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// Why bytes are not a usable kubeconfig. Messages never quote the file's text.
///
/// The texts are the host's, so an operator sees the same words from either side.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KubeconfigError {
    /// Larger than [`MAX_KUBECONFIG_BYTES`].
    #[error("larger than the {MAX_KUBECONFIG_BYTES}-byte limit for a kubeconfig")]
    TooLarge,
    /// Not UTF-8 or UTF-16 text.
    #[error("not text (binary content, or not UTF-8/UTF-16)")]
    NotText,
    /// No YAML content (empty, blank or only comments).
    #[error("the file is empty")]
    Empty,
    /// Not valid YAML, or YAML without a kubeconfig's shape.
    #[error("invalid kubeconfig YAML{}: {problem}", .position.map(|p| format!(" at {p}")).unwrap_or_default())]
    Yaml {
        /// Where the parser stopped, when it knows.
        position: Option<TextPosition>,
        /// The kind of problem, sanitised so that it never quotes the file's text.
        problem: String,
    },
    /// YAML, but not a kubeconfig (e.g. a Deployment manifest).
    #[error("not a kubeconfig: {0}")]
    NotKubeconfig(&'static str),
}

impl Kubeconfig {
    /// Parses a kubeconfig's bytes as vigil's host does (see the module documentation).
    pub fn parse(bytes: &[u8]) -> Result<Self, KubeconfigError> {
        if bytes.len() > MAX_KUBECONFIG_BYTES {
            return Err(KubeconfigError::TooLarge);
        }
        let text = vigil_kubeconfig_rules::text::decode(bytes.to_vec())
            .map_err(|_| KubeconfigError::NotText)?;
        parse_text(&text)
    }

    /// Merges the next YAML document into this one as kube does: the first definition of a
    /// name or a field wins; documents that disagree on `kind` or `apiVersion` are refused.
    fn merge(mut self, next: Self) -> Result<Self, KubeconfigError> {
        let disagree =
            |a: &Option<String>, b: &Option<String>| a.is_some() && b.is_some() && a != b;
        if disagree(&self.kind, &next.kind) || disagree(&self.api_version, &next.api_version) {
            return Err(KubeconfigError::NotKubeconfig(
                "its YAML documents disagree on kind or apiVersion",
            ));
        }
        self.kind = self.kind.or(next.kind);
        self.api_version = self.api_version.or(next.api_version);
        self.preferences = self.preferences.or(next.preferences);
        append_new_named(&mut self.clusters, next.clusters, |entry| &entry.name);
        append_new_named(&mut self.users, next.users, |entry| &entry.name);
        append_new_named(&mut self.contexts, next.contexts, |entry| &entry.name);
        self.current_context = self.current_context.or(next.current_context);
        self.extensions = self.extensions.or(next.extensions);
        for (key, value) in next.other {
            self.other.entry(key).or_insert(value);
        }
        Ok(self)
    }
}

/// Appends the entries of `next` whose names `base` does not have yet.
///
/// An ordered set, not a hash set: a hash set seeds itself from `wasi:random`, and that one
/// call would make the host build the call's whole WASI context for a plugin that otherwise
/// never touches WASI (BENCHMARKS.md, plugin runtime overhead).
fn append_new_named<T>(base: &mut Vec<T>, next: Vec<T>, name: impl Fn(&T) -> &String) {
    if base.is_empty() {
        // The first document read, or a kubeconfig of one document: nothing to skip.
        *base = next;
        return;
    }
    let existing: BTreeSet<String> = base.iter().map(|entry| name(entry).clone()).collect();
    base.extend(
        next.into_iter()
            .filter(|entry| !existing.contains(name(entry))),
    );
}

/// A kubeconfig written as JSON, read by a JSON parser: `None` when `text` is not one
/// JSON object of a kubeconfig's shape, and the YAML parser decides.
///
/// JSON is YAML, so this is the same reading, only faster: what vigil serves through
/// `credentials.kubeconfig` is a JSON rendering of the kube crate's reading of the file,
/// and a WebAssembly guest parses it in microseconds where the same kubeconfig as YAML
/// takes it hundreds. Anything the JSON parser refuses (YAML, JSON that does not fit the
/// structs, duplicate fields) falls back to the YAML parser and its error messages. One
/// difference is left: a key repeated inside a catch-all map (`other`) keeps its last value
/// here, where the YAML parser refuses the document; vigil never serves such a document (it
/// renders what the kube crate accepted), so only JSON a plugin finds elsewhere can show it.
fn parse_json(text: &str) -> Option<Kubeconfig> {
    if !text.trim_start().starts_with('{') {
        return None;
    }
    serde_json::from_str(text).ok()
}

/// Parses kubeconfig text and checks that it is a kubeconfig at all.
fn parse_text(text: &str) -> Result<Kubeconfig, KubeconfigError> {
    if text.trim().is_empty() {
        return Err(KubeconfigError::Empty);
    }
    let documents: Vec<Kubeconfig> = match parse_json(text) {
        Some(config) => vec![config],
        None => serde_saphyr::from_multiple(text).map_err(|error| {
            // The host reads a kubeconfig's errors the same way: one message either side.
            let (position, problem) = yaml_parse_problem(&error, text);
            let position = position.map(|(line, column)| TextPosition { line, column });
            KubeconfigError::Yaml { position, problem }
        })?,
    };
    let config = documents
        .into_iter()
        .try_fold(Kubeconfig::default(), Kubeconfig::merge)?;
    if config.kind.as_deref().is_some_and(|kind| kind != "Config") {
        return Err(KubeconfigError::NotKubeconfig("its kind is not Config"));
    }
    let has_kubeconfig_content = config.kind.is_some()
        || config.api_version.is_some()
        || config.current_context.is_some()
        || !config.clusters.is_empty()
        || !config.contexts.is_empty()
        || !config.users.is_empty();
    if !has_kubeconfig_content {
        // Only comments parse to nothing at all; other YAML lands in the catch-all `other`.
        return Err(if config.other.is_empty() && config.preferences.is_none() {
            KubeconfigError::Empty
        } else {
            KubeconfigError::NotKubeconfig("it has no kind, clusters, contexts or users")
        });
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_decoded_as_kube_decodes_it() {
        let minimal = "kind: Config\n";
        let with_bom = [&[0xEF, 0xBB, 0xBF][..], minimal.as_bytes()].concat();
        assert!(Kubeconfig::parse(&with_bom).is_ok());
        let utf16le: Vec<u8> = [0xFF, 0xFE]
            .into_iter()
            .chain(minimal.encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        assert_eq!(
            Kubeconfig::parse(&utf16le).unwrap().kind.as_deref(),
            Some("Config")
        );
        assert_eq!(
            Kubeconfig::parse(b"kind: Config\0\n").unwrap_err(),
            KubeconfigError::NotText
        );
        assert_eq!(
            Kubeconfig::parse(&vec![b'#'; MAX_KUBECONFIG_BYTES + 1]).unwrap_err(),
            KubeconfigError::TooLarge
        );
    }

    #[test]
    fn documents_merge_with_the_first_definition_winning() {
        let text = "clusters: [{name: a, cluster: {server: 'https://one'}}]\n---\nclusters: [{name: a, cluster: {server: 'https://two'}}, {name: b}]\ncurrent-context: x\n";
        let config = Kubeconfig::parse(text.as_bytes()).unwrap();
        let servers: Vec<_> = config
            .clusters
            .iter()
            .map(|c| {
                (
                    c.name.as_str(),
                    c.cluster.as_ref().and_then(|c| c.server.as_deref()),
                )
            })
            .collect();
        assert_eq!(servers, [("a", Some("https://one")), ("b", None)]);
        assert_eq!(config.current_context.as_deref(), Some("x"));
        assert_eq!(
            Kubeconfig::parse(b"kind: Config\n---\nkind: Other\n").unwrap_err(),
            KubeconfigError::NotKubeconfig("its YAML documents disagree on kind or apiVersion")
        );
    }

    #[test]
    fn things_that_are_not_kubeconfigs_are_told_apart() {
        let check = |text: &str, expected: KubeconfigError| {
            assert_eq!(
                Kubeconfig::parse(text.as_bytes()).unwrap_err(),
                expected,
                "{text:?}"
            );
        };
        check("", KubeconfigError::Empty);
        check("  \n# only a comment\n", KubeconfigError::Empty);
        check(
            "apiVersion: apps/v1\nkind: Deployment\n",
            KubeconfigError::NotKubeconfig("its kind is not Config"),
        );
        check(
            "spec: {replicas: 1}\n",
            KubeconfigError::NotKubeconfig("it has no kind, clusters, contexts or users"),
        );
    }

    #[test]
    fn debug_output_shows_no_credential_values() {
        let text = "users:\n- name: u\n  user:\n    token: vigil-fake-debug-token-1\n    exec: {command: /bin/helper, args: [vigil-fake-debug-arg-2]}\n    auth-provider: {name: oidc, config: {id-token: vigil-fake-debug-token-3}}\n";
        let shown = format!("{:?}", Kubeconfig::parse(text.as_bytes()).unwrap());
        assert!(!shown.contains("vigil-fake"), "{shown}");
        assert!(shown.contains("token"), "{shown}");
    }

    #[test]
    fn json_is_read_by_the_json_parser_and_anything_else_by_the_yaml_one() {
        let json = r#"{"kind":"Config","contexts":[{"name":"c","context":{"cluster":"k"}}],"current-context":"c"}"#;
        assert!(parse_json(json).is_some());
        let config = Kubeconfig::parse(json.as_bytes()).unwrap();
        assert_eq!(config.current_context.as_deref(), Some("c"));
        assert_eq!(config.contexts[0].context.as_ref().unwrap().cluster, "k");
        // A YAML flow mapping is not JSON: the YAML parser reads it, to the same result.
        let flow =
            "{kind: Config, contexts: [{name: c, context: {cluster: k}}], current-context: c}";
        assert!(parse_json(flow).is_none());
        let config = Kubeconfig::parse(flow.as_bytes()).unwrap();
        assert_eq!(config.contexts[0].context.as_ref().unwrap().cluster, "k");
        // JSON the structs do not take (a duplicate field, a wrong type) is the YAML
        // parser's to refuse, with its words.
        for refused in [
            r#"{"kind":"Config","kind":"Config"}"#,
            r#"{"kind":"Config","contexts":"none"}"#,
        ] {
            assert!(parse_json(refused).is_none(), "{refused}");
            assert!(
                matches!(
                    Kubeconfig::parse(refused.as_bytes()),
                    Err(KubeconfigError::Yaml { .. })
                ),
                "{refused}"
            );
        }
    }
}
