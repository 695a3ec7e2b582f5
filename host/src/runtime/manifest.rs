//! A plugin's `NAME.toml`: its grants, extra egress hosts, priority, memory cap and
//! default parameters. Every grant is denied unless the file says otherwise.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::reference::Reference;

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
    /// Default plugin parameters, under the cluster's own.
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
}

fn default_memory_mib() -> u32 {
    DEFAULT_MEMORY_MIB
}

impl Default for Manifest {
    fn default() -> Self {
        Self {
            log: false,
            credentials: false,
            http: false,
            secret_namespaces: Vec::new(),
            allowed_hosts: Vec::new(),
            priority: 0,
            memory_mib: DEFAULT_MEMORY_MIB,
            parameters: BTreeMap::new(),
        }
    }
}

impl Manifest {
    /// The capabilities granted, by name, in the contract's order.
    pub fn grants(&self) -> Vec<String> {
        [
            ("log", self.log),
            ("credentials", self.credentials),
            ("http", self.http),
        ]
        .into_iter()
        .filter(|(_, granted)| *granted)
        .map(|(name, _)| name.to_owned())
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
        Ok(manifest)
    }
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
