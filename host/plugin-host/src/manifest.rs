//! A plugin's `NAME.toml`: its grants, extra egress hosts, priority, memory cap and
//! default parameters. Every grant is denied unless the file says otherwise.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use vigil_domain::reference::Reference;

/// The memory cap of a plugin whose `NAME.toml` does not set `memory-mib`.
pub const DEFAULT_MEMORY_MIB: u32 = 64;

/// The largest `memory-mib` a plugin may ask for: the engine's pool slots are sized for
/// the largest cap of the loaded plugins, and every concurrent call may use its plugin's
/// whole cap, so one file must not be able to claim gigabytes per call.
pub const MAX_MEMORY_MIB: u32 = 1024;

/// The largest `NAME.toml` read; a bigger one is refused without being parsed.
pub const MAX_MANIFEST_BYTES: u64 = 64 * 1024;

/// What a plugin is granted and how it is run, from its `NAME.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Manifest {
    /// Whether the plugin may write to vigil's log.
    #[serde(default)]
    pub log: bool,
    /// Whether the plugin may read the credentials of the cluster it probes.
    #[serde(default)]
    pub credentials: bool,
    /// Whether the plugin may have vigil run a kubeconfig user's `exec` command and read
    /// the credential it gives (`credentials.exec-credential`; with `credentials`). The
    /// command still runs only if the operator allows its real path and its arguments
    /// (`VIGIL_EXEC_ALLOW_FILE`).
    #[serde(default)]
    pub exec_credentials: bool,
    /// Whether the plugin may send HTTP requests.
    #[serde(default)]
    pub http: bool,
    /// The namespaces whose Secrets `secret://` references and credential parameters may
    /// read (with `credentials`); none unless listed.
    #[serde(default)]
    pub secret_namespaces: Vec<String>,
    /// Extra egress hosts (`host` or `host:port`), beyond the cluster's own. A request
    /// to one of them never counts as talking to the cluster.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Routing priority: the highest-priority plugin that accepts a cluster probes it.
    #[serde(default)]
    pub priority: i32,
    /// The cap on the instance's memories and tables, summed, in MiB.
    #[serde(default = "default_memory_mib")]
    pub memory_mib: u32,
    /// Default plugin parameters, under the cluster's own (`operator.*` ones are the
    /// operator's alone: a cluster cannot set them).
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    /// Where credential parameters may be sent: for a credential file (or every file under
    /// a directory), a Secret (`secret://NAMESPACE/NAME`) or every Secret of a namespace
    /// (`secret://NAMESPACE`), the hosts (`host` or `host:port`) its value may go to. A
    /// credential not bound here is sent nowhere.
    #[serde(default)]
    pub credential_hosts: BTreeMap<String, Vec<String>>,
}

/// Where a credential parameter's value was read from, for its binding.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CredentialSource<'a> {
    /// A `file:///` parameter's file (lexically normalised).
    File(&'a Path),
    /// A `secret://` parameter's Secret.
    Secret { namespace: &'a str, name: &'a str },
}

fn default_memory_mib() -> u32 {
    DEFAULT_MEMORY_MIB
}

impl Default for Manifest {
    fn default() -> Self {
        Self {
            log: false,
            credentials: false,
            exec_credentials: false,
            http: false,
            secret_namespaces: Vec::new(),
            allowed_hosts: Vec::new(),
            priority: 0,
            memory_mib: DEFAULT_MEMORY_MIB,
            parameters: BTreeMap::new(),
            credential_hosts: BTreeMap::new(),
        }
    }
}

impl Manifest {
    /// The capabilities granted, by name, in the contract's order.
    pub fn grants(&self) -> Vec<String> {
        [
            ("log", self.log),
            ("credentials", self.credentials),
            (
                "exec-credentials",
                self.exec_credentials && self.credentials,
            ),
            ("http", self.http),
        ]
        .into_iter()
        .filter(|(_, granted)| *granted)
        .map(|(name, _)| name.to_owned())
        .collect()
    }

    /// The hosts `credential-hosts` binds a credential read from `source` to (every
    /// entry that covers it), as written (`host` or `host:port`).
    pub(crate) fn credential_hosts_for(&self, source: CredentialSource<'_>) -> Vec<&str> {
        self.credential_hosts
            .iter()
            .filter(|(key, _)| match (source, credential_key(key)) {
                (CredentialSource::File(path), Some(CredentialKey::Path(root))) => {
                    path.starts_with(root)
                }
                (
                    CredentialSource::Secret { namespace, name },
                    Some(CredentialKey::Secret {
                        namespace: ns,
                        name: key_name,
                    }),
                ) => ns == namespace && key_name.is_none_or(|n| n == name),
                _ => false,
            })
            .flat_map(|(_, hosts)| hosts.iter().map(String::as_str))
            .collect()
    }

    /// The memory cap in bytes.
    pub fn memory_bytes(&self) -> u64 {
        u64::from(self.memory_mib) * 1024 * 1024
    }

    /// Reads `path`; a missing file is the default manifest (deny everything).
    pub(crate) fn read(path: &Path) -> Result<Self, String> {
        let metadata = match std::fs::metadata(path) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self::default());
            }
            Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
        };
        if metadata.len() > MAX_MANIFEST_BYTES {
            return Err(format!(
                "{} is larger than {MAX_MANIFEST_BYTES} bytes",
                path.display()
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        Self::parse(&text).map_err(|error| format!("{}: {error}", path.display()))
    }

    /// Parses the text of a `NAME.toml`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let manifest: Self = toml::from_str(text).map_err(|error| toml_problem(&error, text))?;
        if manifest.memory_mib == 0 || manifest.memory_mib > MAX_MEMORY_MIB {
            return Err(format!(
                "memory-mib must be between 1 and {MAX_MEMORY_MIB}, not {}",
                manifest.memory_mib
            ));
        }
        if manifest.exec_credentials && !manifest.credentials {
            return Err(
                "exec-credentials needs credentials = true (the command is the kubeconfig's)"
                    .to_owned(),
            );
        }
        for namespace in &manifest.secret_namespaces {
            // A namespace is one a `secret://` reference can name: the reference grammar
            // is the one rule for it.
            let nameable = matches!(
                Reference::parse(&format!("secret://{namespace}/name")),
                Ok(Reference::Secret { namespace: ref parsed, .. }) if parsed == namespace
            );
            if !nameable {
                return Err(format!(
                    "secret-namespaces: {namespace:?} is not a Kubernetes namespace name"
                ));
            }
        }
        for (key, hosts) in &manifest.credential_hosts {
            if credential_key(key).is_none() {
                return Err(format!(
                    "credential-hosts: {key:?} is neither an absolute path (without ..) nor secret://NAMESPACE[/NAME]"
                ));
            }
            for host in hosts {
                let bare = host.trim();
                if bare.is_empty()
                    || bare.contains(['/', '@', '?', '#'])
                    || bare.contains(char::is_whitespace)
                {
                    return Err(format!(
                        "credential-hosts: {host:?} (for {key:?}) is not a host or host:port"
                    ));
                }
            }
        }
        Ok(manifest)
    }
}

/// A `credential-hosts` key, read.
enum CredentialKey<'a> {
    Path(PathBuf),
    Secret {
        namespace: &'a str,
        name: Option<&'a str>,
    },
}

fn credential_key(key: &str) -> Option<CredentialKey<'_>> {
    if let Some(rest) = key.strip_prefix("secret://") {
        let rest = rest.trim_end_matches('/');
        let (namespace, name) = match rest.split_once('/') {
            Some((namespace, name)) => (namespace, Some(name)),
            None => (rest, None),
        };
        // The reference grammar is the one rule for what a Secret reference may name.
        let probe = format!("secret://{namespace}/{}", name.unwrap_or("name"));
        let nameable = matches!(
            Reference::parse(&probe),
            Ok(Reference::Secret { namespace: ref ns, name: ref n, .. })
                if ns == namespace && name.is_none_or(|name| n == name)
        );
        return nameable.then_some(CredentialKey::Secret { namespace, name });
    }
    let path = Path::new(key);
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return None;
    }
    Some(CredentialKey::Path(path.components().collect()))
}

/// A TOML error as `line L, column C: WHAT`, without the rendering's quote of the line nor
/// any value the message quotes: a `NAME.toml` may hold a parameter's value, and the
/// message goes to the log and the API.
fn toml_problem(error: &toml::de::Error, text: &str) -> String {
    let what = vigil_kubeconfig_rules::text::sanitize_parser_problem(
        error.message(),
        text,
        "not a valid plugin manifest",
    );
    let Some(at) = error.span().map(|span| span.start.min(text.len())) else {
        return what;
    };
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("line {line}, column {column}: {what}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_manifest_is_located_without_quoting_its_values() {
        for (text, at) in [
            (
                "log = true\n[parameters]\ntoken = s3cr3t-t0ken-value\n",
                "line 3, column 9: ",
            ),
            ("log = \"s3cr3t-t0ken-value\"\n", "line 1, column 7: "),
            (
                "[parameters]\ntoken = \"s3cr3t-t0ken-value\n",
                "line 2, column 28: ",
            ),
        ] {
            let error = Manifest::parse(text).expect_err(text);
            assert!(error.starts_with(at), "{text:?}: {error}");
            assert!(!error.contains("s3cr3t"), "{text:?}: {error}");
            assert!(!error.contains('\n'), "one line: {error}");
        }
    }

    #[test]
    fn credential_hosts_bind_files_directories_secrets_and_namespaces() {
        let manifest = Manifest::parse(
            "[credential-hosts]\n\
             \"/etc/vigil/credentials/billing-token\" = [\"10.0.0.7:8443\"]\n\
             \"/etc/vigil/credentials/team-a/\" = [\"a.example\"]\n\
             \"secret://monitoring/billing\" = [\"10.0.0.7:8443\", \"billing.internal\"]\n\
             \"secret://team-b\" = [\"b.example\"]\n",
        )
        .expect("valid");
        let file = |path: &str| {
            manifest
                .credential_hosts_for(CredentialSource::File(Path::new(path)))
                .join(",")
        };
        assert_eq!(
            file("/etc/vigil/credentials/billing-token"),
            "10.0.0.7:8443"
        );
        assert_eq!(file("/etc/vigil/credentials/billing-token2"), "");
        assert_eq!(file("/etc/vigil/credentials/team-a/token"), "a.example");
        assert_eq!(file("/etc/vigil/credentials/team-ab/token"), "");
        let secret = |namespace: &str, name: &str| {
            manifest
                .credential_hosts_for(CredentialSource::Secret { namespace, name })
                .join(",")
        };
        assert_eq!(
            secret("monitoring", "billing"),
            "10.0.0.7:8443,billing.internal"
        );
        assert_eq!(secret("monitoring", "other"), "");
        assert_eq!(secret("team-b", "any"), "b.example");
        assert_eq!(
            Manifest::default()
                .credential_hosts_for(CredentialSource::Secret {
                    namespace: "team-b",
                    name: "any"
                })
                .len(),
            0,
            "bound nowhere by default"
        );
        for bad in [
            "\"relative/token\" = [\"x\"]",
            "\"/etc/../token\" = [\"x\"]",
            "\"secret://Bad\" = [\"x\"]",
            "\"/etc/token\" = [\"http://x/\"]",
            "\"/etc/token\" = [\"\"]",
        ] {
            let error = Manifest::parse(&format!("[credential-hosts]\n{bad}\n")).expect_err(bad);
            assert!(error.starts_with("credential-hosts: "), "{error}");
        }
    }

    #[test]
    fn secret_namespaces_are_denied_by_default_and_must_be_namespace_names() {
        assert!(
            Manifest::parse("")
                .expect("empty")
                .secret_namespaces
                .is_empty()
        );
        let granted =
            Manifest::parse("secret-namespaces = [\"vigil\", \"team-a\"]\n").expect("valid");
        assert_eq!(granted.secret_namespaces, ["vigil", "team-a"]);
        for bad in ["\"\"", "\"Vigil\"", "\"a/b\"", "\"vigil \"", "\"*\""] {
            let error = Manifest::parse(&format!("secret-namespaces = [{bad}]\n")).expect_err(bad);
            assert!(error.contains("secret-namespaces"), "{error}");
        }
    }
}
