//! The notifications file (`VIGIL_NOTIFY_CONFIG`): which sinks to send to, what each is
//! sent, and its secrets — read from files the configuration names, never written in it.
//!
//! ```toml
//! [[webhook]]
//! name = "ops"
//! url = "https://hooks.example.com/vigil"
//! secret_file = "/run/secrets/vigil-webhook"   # whsec_… secrets, several for rotation
//! events = ["status-changed", "apps-degraded"] # default: every notified kind
//! labels = { env = "prod" }                    # only clusters carrying all of these
//!
//! [[alertmanager]]
//! name = "alerts"
//! urls = ["http://alertmanager.monitoring:9093"]
//! ```
//!
//! A file that cannot be used is refused as a whole with an error naming the file, the
//! line and the field; on a reload the configuration in force is kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;
use vigil_store::outbox::NOTIFIED_KINDS;

/// The largest notifications file or secret file read, in bytes.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Why a notifications file is refused. Never holds a secret: a secret file is named by
/// its path only.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read notifications file {path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The file is not valid: where and why.
    #[error("notifications file {path}:{line}:{column}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The line (from 1).
        line: usize,
        /// The column (from 1).
        column: usize,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A secret file named by a sink cannot be used.
    #[error("notifications file {path}: sink `{sink}`: secret_file {secret_file}: {reason}")]
    Secret {
        /// The notifications file.
        path: PathBuf,
        /// The sink.
        sink: String,
        /// The secret file (its path only).
        secret_file: PathBuf,
        /// Why, without its contents.
        reason: String,
    },
}

/// The sinks, as configured.
#[derive(Debug, Clone, Default)]
pub struct NotifyConfig {
    /// Where the configuration was read from.
    pub path: Option<PathBuf>,
    /// The sinks, webhooks first, each name once.
    pub sinks: Vec<Sink>,
    /// Failed attempts in a row after which a sink counts as failing.
    pub failing_after: u32,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
    /// Failed attempts at one notification after which it is passed over (a dead
    /// letter), so that the ones after it still go out.
    pub dead_letter_after: u32,
    /// The webhook secret files read (vigil keeps them out of reach of the commands it
    /// runs).
    pub secret_files: Vec<PathBuf>,
}

/// One sink: where notifications go and which.
#[derive(Debug, Clone)]
pub struct Sink {
    /// Its unique name (logs, metrics, `/readyz`).
    pub name: String,
    /// What is sent to it.
    pub filter: Filter,
    /// How long one attempt may take.
    pub timeout: Duration,
    /// PEM CA certificates to trust instead of the system's, read from `ca_file`.
    pub ca_pem: Option<Vec<u8>>,
    /// The kind of sink.
    pub kind: SinkKind,
}

/// The kinds of sink.
#[derive(Clone)]
pub enum SinkKind {
    /// A generic webhook, signed per the Standard Webhooks scheme.
    Webhook {
        /// Where to `POST`.
        url: String,
        /// The signing keys (decoded `whsec_` secrets): one signature each.
        keys: Vec<Vec<u8>>,
    },
    /// Alertmanagers, each sent the same alerts (`POST /api/v2/alerts`).
    Alertmanager {
        /// Their base URLs.
        urls: Vec<String>,
        /// How often the alert of a cluster still OFFLINE is posted again.
        repeat_interval: Duration,
    },
}

impl std::fmt::Debug for SinkKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // The keys are secret: their number is all a log may show.
            Self::Webhook { url, keys } => f
                .debug_struct("Webhook")
                .field("url", &url_origin(url))
                .field("keys", &keys.len())
                .finish(),
            Self::Alertmanager {
                urls,
                repeat_interval,
            } => f
                .debug_struct("Alertmanager")
                .field(
                    "urls",
                    &urls.iter().map(|u| url_origin(u)).collect::<Vec<_>>(),
                )
                .field("repeat_interval", repeat_interval)
                .finish(),
        }
    }
}

/// Which notifications a sink is sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// The event kinds; empty: every notified kind.
    pub events: Vec<String>,
    /// Labels a cluster must all carry; events of no cluster (the brake, plugins) pass
    /// only when this is empty.
    pub labels: BTreeMap<String, String>,
    /// Whether a cluster's first known status (UNKNOWN→ONLINE) is notified.
    pub unknown_to_online: bool,
}

impl Filter {
    /// Whether a notification of `kind` about a cluster with `labels` (none for an event
    /// of the fleet) and `detail` passes.
    pub fn passes(
        &self,
        kind: &str,
        labels: Option<&BTreeMap<String, String>>,
        detail: &serde_json::Value,
    ) -> bool {
        if !self.events.is_empty() && !self.events.iter().any(|k| k == kind) {
            return false;
        }
        if kind == "status-changed"
            && !self.unknown_to_online
            && detail.get("from").and_then(|v| v.as_str()) == Some("UNKNOWN")
            && detail.get("to").and_then(|v| v.as_str()) == Some("ONLINE")
        {
            return false;
        }
        match labels {
            Some(labels) => self
                .labels
                .iter()
                .all(|(key, value)| labels.get(key) == Some(value)),
            None => self.labels.is_empty(),
        }
    }
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    delivery: Delivery,
    #[serde(default)]
    webhook: Vec<WebhookEntry>,
    #[serde(default)]
    alertmanager: Vec<AlertmanagerEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Delivery {
    #[serde(default = "default_failing_after")]
    failing_after: u32,
    #[serde(default = "default_max_backoff", with = "humantime_serde_text")]
    max_backoff: Duration,
    #[serde(default = "default_dead_letter_after")]
    dead_letter_after: u32,
}

impl Default for Delivery {
    fn default() -> Self {
        Self {
            failing_after: default_failing_after(),
            max_backoff: default_max_backoff(),
            dead_letter_after: default_dead_letter_after(),
        }
    }
}

fn default_failing_after() -> u32 {
    5
}

/// About an hour of attempts with the default `max_backoff` (1 s doubling to 5 min): a
/// receiver down for a restart or a deployment gets everything; one that refuses a
/// notification for longer lets the ones after it through.
fn default_dead_letter_after() -> u32 {
    20
}

fn default_max_backoff() -> Duration {
    Duration::from_secs(300)
}

fn default_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_repeat() -> Duration {
    Duration::from_secs(60)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookEntry {
    name: String,
    url: String,
    secret_file: PathBuf,
    #[serde(default)]
    events: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    notify_unknown_to_online: bool,
    #[serde(default = "default_timeout", with = "humantime_serde_text")]
    timeout: Duration,
    #[serde(default)]
    ca_file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AlertmanagerEntry {
    name: String,
    urls: Vec<String>,
    #[serde(default = "default_repeat", with = "humantime_serde_text")]
    repeat_interval: Duration,
    #[serde(default)]
    events: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    notify_unknown_to_online: bool,
    #[serde(default = "default_timeout", with = "humantime_serde_text")]
    timeout: Duration,
    #[serde(default)]
    ca_file: Option<PathBuf>,
}

/// What every sink may set.
struct Common {
    events: Vec<String>,
    labels: BTreeMap<String, String>,
    notify_unknown_to_online: bool,
    timeout: Duration,
    ca_file: Option<PathBuf>,
}

/// The fields every kind of sink has, taken out of its entry.
macro_rules! common_of {
    ($entry:expr) => {
        Common {
            events: $entry.events,
            labels: $entry.labels,
            notify_unknown_to_online: $entry.notify_unknown_to_online,
            timeout: $entry.timeout,
            ca_file: $entry.ca_file,
        }
    };
}

/// Durations written as text ("10s", "1m 30s").
mod humantime_serde_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        humantime::parse_duration(&text).map_err(|e| {
            serde::de::Error::custom(format!("`{text}` is not a duration like \"10s\": {e}"))
        })
    }
}

impl NotifyConfig {
    /// Reads and checks the notifications file at `path`, and the secret and CA files it
    /// names.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = read_capped(path).map_err(|reason| ConfigError::Read {
            path: path.to_owned(),
            reason,
        })?;
        Self::parse(path, &text)
    }

    /// Checks `text`, the contents of the notifications file `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let invalid_at = |offset: usize, message: String| {
            let (line, column) = line_and_column(text, offset);
            ConfigError::Invalid {
                path: path.to_owned(),
                line,
                column,
                message,
            }
        };
        let file: File = toml::from_str(text).map_err(|e| {
            let offset = e.span().map_or(0, |span| span.start);
            invalid_at(offset, e.message().to_owned())
        })?;
        // Where a table of the file starts, to name the line of a sink whose value is
        // refused after parsing.
        let at_sink = |kind: &str, index: usize, field: &str, message: String| {
            let offset = nth_table(text, kind, index).unwrap_or(0);
            invalid_at(offset, format!("{kind}[{index}].{field}: {message}"))
        };
        if file.delivery.failing_after == 0 {
            let offset = text.find("failing_after").unwrap_or(0);
            return Err(invalid_at(
                offset,
                "delivery.failing_after: must be at least 1".to_owned(),
            ));
        }
        if file.delivery.dead_letter_after == 0 {
            let offset = text.find("dead_letter_after").unwrap_or(0);
            return Err(invalid_at(
                offset,
                "delivery.dead_letter_after: must be at least 1".to_owned(),
            ));
        }
        let mut sinks = Vec::new();
        let mut secret_files = Vec::new();
        for (index, entry) in file.webhook.into_iter().enumerate() {
            let (name, url, secret_file) = (entry.name, entry.url, entry.secret_file);
            secret_files.push(secret_file.clone());
            let common = common_of!(entry);
            check_url(&url).map_err(|m| at_sink("webhook", index, "url", m))?;
            let filter =
                filter(&common).map_err(|(field, m)| at_sink("webhook", index, field, m))?;
            let keys = read_secrets(&secret_file).map_err(|reason| ConfigError::Secret {
                path: path.to_owned(),
                sink: name.clone(),
                secret_file: secret_file.clone(),
                reason,
            })?;
            let ca_pem = read_ca(&common).map_err(|m| at_sink("webhook", index, "ca_file", m))?;
            sinks.push(Sink {
                name,
                filter,
                timeout: common.timeout,
                ca_pem,
                kind: SinkKind::Webhook { url, keys },
            });
        }
        for (index, entry) in file.alertmanager.into_iter().enumerate() {
            let (name, urls, repeat_interval) = (entry.name, entry.urls, entry.repeat_interval);
            let common = common_of!(entry);
            if urls.is_empty() {
                return Err(at_sink(
                    "alertmanager",
                    index,
                    "urls",
                    "name at least one Alertmanager".to_owned(),
                ));
            }
            for url in &urls {
                check_url(url).map_err(|m| at_sink("alertmanager", index, "urls", m))?;
            }
            if repeat_interval < Duration::from_secs(1) {
                return Err(at_sink(
                    "alertmanager",
                    index,
                    "repeat_interval",
                    "must be at least 1s".to_owned(),
                ));
            }
            let filter =
                filter(&common).map_err(|(field, m)| at_sink("alertmanager", index, field, m))?;
            let ca_pem =
                read_ca(&common).map_err(|m| at_sink("alertmanager", index, "ca_file", m))?;
            sinks.push(Sink {
                name,
                filter,
                timeout: common.timeout,
                ca_pem,
                kind: SinkKind::Alertmanager {
                    urls,
                    repeat_interval,
                },
            });
        }
        let mut names = std::collections::BTreeSet::new();
        for sink in &sinks {
            let valid = !sink.name.is_empty()
                && sink.name.len() <= 64
                && sink
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            if !valid {
                let offset = text.find(&format!("\"{}\"", sink.name)).unwrap_or(0);
                return Err(invalid_at(
                    offset,
                    format!(
                        "name: `{}` is not a sink name (1–64 letters, digits, `-`, `_`, `.`)",
                        sink.name
                    ),
                ));
            }
            if !names.insert(sink.name.clone()) {
                let offset = text.rfind(&format!("\"{}\"", sink.name)).unwrap_or(0);
                return Err(invalid_at(
                    offset,
                    format!("name: `{}` names two sinks", sink.name),
                ));
            }
        }
        Ok(Self {
            path: Some(path.to_owned()),
            sinks,
            failing_after: file.delivery.failing_after,
            max_backoff: file.delivery.max_backoff,
            dead_letter_after: file.delivery.dead_letter_after,
            secret_files,
        })
    }
}

fn filter(common: &Common) -> Result<Filter, (&'static str, String)> {
    for kind in &common.events {
        if !NOTIFIED_KINDS.contains(&kind.as_str()) {
            return Err((
                "events",
                format!(
                    "`{kind}` is not a notified event kind (one of: {})",
                    NOTIFIED_KINDS.join(", ")
                ),
            ));
        }
    }
    if common.timeout.is_zero() {
        return Err(("timeout", "must be more than 0s".to_owned()));
    }
    Ok(Filter {
        events: common.events.clone(),
        labels: common.labels.clone(),
        unknown_to_online: common.notify_unknown_to_online,
    })
}

/// Checks a sink's URL. The URL is never repeated in the error: some receivers put a
/// secret in its path.
fn check_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| "not an http:// or https:// URL".to_owned())?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() {
        return Err("the URL has no host".to_owned());
    }
    if authority.contains('@') {
        return Err("the URL carries credentials (put secrets in secret_file)".to_owned());
    }
    if url.parse::<hyper::Uri>().is_err() {
        return Err("not a valid URL".to_owned());
    }
    Ok(())
}

/// A URL as logs may show it: its scheme and host, never its path (some receivers put a
/// secret there).
pub fn url_origin(url: &str) -> String {
    match url.parse::<hyper::Uri>() {
        Ok(uri) => format!(
            "{}://{}",
            uri.scheme_str().unwrap_or("?"),
            uri.authority().map_or("?", |a| a.as_str())
        ),
        Err(_) => "(invalid URL)".to_owned(),
    }
}

fn read_ca(common: &Common) -> Result<Option<Vec<u8>>, String> {
    let Some(path) = &common.ca_file else {
        return Ok(None);
    };
    let text = read_capped(path).map_err(|reason| format!("{}: {reason}", path.display()))?;
    if !text.contains("-----BEGIN CERTIFICATE-----") {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(Some(text.into_bytes()))
}

/// The signing keys of a secret file: whitespace-separated `whsec_<base64>` secrets.
fn read_secrets(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    use std::os::unix::fs::PermissionsExt as _;
    // Whoever reads it can sign notifications as vigil; whoever writes it, choose the key.
    let mode = std::fs::metadata(path)
        .map_err(|e| e.to_string())?
        .permissions()
        .mode();
    if mode & 0o006 != 0 {
        return Err(format!(
            "other users can read or write it (mode {:04o}): allow only its owner and group \
             (chmod o-rw; on a Kubernetes Secret volume, defaultMode 0440)",
            mode & 0o7777
        ));
    }
    let text = read_capped(path)?;
    let mut keys = Vec::new();
    for (index, secret) in text.split_whitespace().enumerate() {
        let encoded = secret.strip_prefix("whsec_").ok_or_else(|| {
            format!(
                "secret {} does not start with `whsec_`",
                index.saturating_add(1)
            )
        })?;
        let key = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| {
                format!(
                    "secret {} is not `whsec_` followed by base64",
                    index.saturating_add(1)
                )
            })?;
        if key.len() < 16 {
            return Err(format!(
                "secret {} is shorter than 16 bytes",
                index.saturating_add(1)
            ));
        }
        keys.push(key);
    }
    if keys.is_empty() {
        return Err("holds no secret".to_owned());
    }
    Ok(keys)
}

fn read_capped(path: &Path) -> Result<String, String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    Ok(text)
}

/// The 1-based line and column of byte `offset` of `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |n| before.len() - n - 1)
        + 1;
    (line, column)
}

/// The offset of the `index`th `[[kind]]` table header of `text`.
fn nth_table(text: &str, kind: &str, index: usize) -> Option<usize> {
    let header = format!("[[{kind}]]");
    text.match_indices(&header).nth(index).map(|(at, _)| at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret_file(dir: &Path, text: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join("secret");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        path
    }

    fn parse(text: &str) -> Result<NotifyConfig, ConfigError> {
        NotifyConfig::parse(Path::new("/etc/vigil/notify.toml"), text)
    }

    #[test]
    fn a_file_with_both_sinks_is_read_with_its_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let secret = secret_file(
            dir.path(),
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\nwhsec_c2Vjb25kLXNlY3JldC0xMjM0NTY3OA==\n",
        );
        let config = parse(&format!(
            "[[webhook]]\nname = \"ops\"\nurl = \"http://127.0.0.1:9/hook\"\n\
             secret_file = \"{}\"\nlabels = {{ env = \"prod\" }}\n\n\
             [[alertmanager]]\nname = \"am\"\nurls = [\"http://127.0.0.1:9093\"]\n\
             repeat_interval = \"2s\"\n",
            secret.display()
        ))
        .unwrap();
        assert_eq!(config.failing_after, 5);
        assert_eq!(config.dead_letter_after, 20);
        assert_eq!(config.sinks.len(), 2);
        let SinkKind::Webhook { keys, .. } = &config.sinks[0].kind else {
            panic!("{config:?}")
        };
        assert_eq!(keys.len(), 2);
        assert_eq!(config.sinks[0].timeout, Duration::from_secs(10));
        let rendered = format!("{config:?}");
        assert!(!rendered.contains("MfKQ"), "{rendered}");
        assert!(
            !rendered.contains("/hook"),
            "a URL's path may be secret: {rendered}"
        );
        let SinkKind::Alertmanager {
            repeat_interval, ..
        } = &config.sinks[1].kind
        else {
            panic!("{config:?}")
        };
        assert_eq!(*repeat_interval, Duration::from_secs(2));
    }

    #[test]
    fn a_bad_file_is_refused_naming_the_line_and_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let secret = secret_file(dir.path(), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let head = format!(
            "[[webhook]]\nname = \"ops\"\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"{}\"\n",
            secret.display()
        );
        let cases = [
            (format!("{head}timout = \"5s\"\n"), 5, "timout"),
            (format!("{head}timeout = \"soon\"\n"), 5, "not a duration"),
            (
                format!("{head}events = [\"status-chnaged\"]\n"),
                1,
                "webhook[0].events: `status-chnaged`",
            ),
            (
                format!("\n\n{}", head.replace("http://127.0.0.1:9/", "ftp://x")),
                3,
                "webhook[0].url",
            ),
            (
                format!("{head}\n[[webhook]]\n{}", &head[12..]),
                7,
                "names two sinks",
            ),
            (
                "[[alertmanager]]\nname = \"am\"\nurls = []\n".to_owned(),
                1,
                "urls",
            ),
        ];
        for (text, line, needle) in cases {
            let error = parse(&text).unwrap_err().to_string();
            assert!(
                error.starts_with(&format!(
                    "notifications file /etc/vigil/notify.toml:{line}:"
                )),
                "{error}\n{text}"
            );
            assert!(error.contains(needle), "{error} lacks {needle}");
        }
    }

    #[test]
    fn a_bad_secret_is_named_by_its_file_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        for (text, needle) in [
            ("hunter2-not-a-secret", "does not start with `whsec_`"),
            ("whsec_!!!hunter2!!!", "not `whsec_` followed by base64"),
            ("whsec_aHVudGVyMg==", "shorter than 16 bytes"),
            ("  \n", "holds no secret"),
        ] {
            let secret = secret_file(dir.path(), text);
            let error = parse(&format!(
                "[[webhook]]\nname = \"ops\"\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"{}\"\n",
                secret.display()
            ))
            .unwrap_err()
            .to_string();
            assert!(error.contains(needle), "{error}");
            assert!(error.contains("sink `ops`"), "{error}");
            assert!(!error.contains("hunter2"), "{error}");
        }
    }

    #[test]
    fn a_secret_file_other_users_can_read_or_write_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let secret = secret_file(dir.path(), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let text = format!(
            "[[webhook]]\nname = \"ops\"\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"{}\"\n",
            secret.display()
        );
        for mode in [0o644, 0o602] {
            std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(mode)).unwrap();
            let error = parse(&text).unwrap_err().to_string();
            assert!(
                error.contains(&format!("mode {mode:04o}")) && error.contains("chmod o-rw"),
                "{error}"
            );
            assert!(!error.contains("MfKQ"), "{error}");
        }
        for mode in [0o600, 0o640, 0o440] {
            std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(parse(&text).is_ok(), "mode {mode:o}");
        }
    }

    #[test]
    fn filters_pass_kinds_and_labels_and_leave_out_a_first_status() {
        let filter = Filter {
            events: vec!["status-changed".into()],
            labels: BTreeMap::from([("env".into(), "prod".into())]),
            unknown_to_online: false,
        };
        let prod = BTreeMap::from([("env".to_owned(), "prod".to_owned())]);
        let dev = BTreeMap::from([("env".to_owned(), "dev".to_owned())]);
        let down = serde_json::json!({"from": "ONLINE", "to": "OFFLINE"});
        let first = serde_json::json!({"from": "UNKNOWN", "to": "ONLINE"});
        assert!(filter.passes("status-changed", Some(&prod), &down));
        assert!(!filter.passes("status-changed", Some(&dev), &down));
        assert!(!filter.passes("apps-degraded", Some(&prod), &down));
        assert!(!filter.passes("status-changed", Some(&prod), &first));
        assert!(!filter.passes("status-changed", None, &down));
        let all = Filter {
            unknown_to_online: true,
            ..Filter::default()
        };
        assert!(all.passes("status-changed", Some(&prod), &first));
        assert!(all.passes("brake-engaged", None, &serde_json::json!({})));
    }
}
