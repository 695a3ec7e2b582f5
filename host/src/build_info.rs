//! What is built into this binary: the first-party plugins, and what `vigil --version`
//! says of the build (version, commit, date, contract, embedded plugins and their digests).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::json;
use vigil_plugin_host::{EmbeddedPlugin, SUPPORTED_CONTRACT, component_digest};

// `EMBEDDED`: written by the build script (`host/build.rs`).
include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

/// vigil's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit the binary was built from (`unknown` outside a git checkout).
pub const GIT_COMMIT: &str = env!("VIGIL_GIT_COMMIT");

/// The build time, in seconds since the epoch (`SOURCE_DATE_EPOCH` when it was set).
const BUILD_EPOCH: &str = env!("VIGIL_BUILD_EPOCH");

/// The first-party plugins built into the binary.
pub fn embedded_plugins() -> Vec<EmbeddedPlugin> {
    EMBEDDED
        .iter()
        .map(|(name, component, grants)| EmbeddedPlugin {
            name: Cow::Borrowed(name),
            component: Cow::Borrowed(component),
            grants: Cow::Borrowed(grants),
        })
        .collect()
}

/// The build date, RFC 3339 in UTC.
pub fn build_date() -> String {
    let seconds = BUILD_EPOCH.parse::<u64>().unwrap_or_default();
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(seconds)).to_string()
}

/// `vigil --version -o json`.
pub fn version_json() -> serde_json::Value {
    json!({
        "version": VERSION,
        "commit": GIT_COMMIT,
        "build_date": build_date(),
        "contracts": [SUPPORTED_CONTRACT],
        "embedded_plugins": EMBEDDED
            .iter()
            .map(|(name, component, _)| json!({
                "name": name,
                "sha256": component_digest(component),
                "bytes": component.len(),
            }))
            .collect::<Vec<_>>(),
    })
}

/// `vigil --version`, for people.
pub fn version_text() -> String {
    let mut text = format!(
        "vigil {VERSION}\ncommit:     {GIT_COMMIT}\nbuilt:      {}\ncontracts:  {SUPPORTED_CONTRACT}\n",
        build_date()
    );
    if EMBEDDED.is_empty() {
        text.push_str("embedded plugins: none\n");
    } else {
        text.push_str("embedded plugins:\n");
        for (name, component, _) in EMBEDDED {
            let _ = writeln!(text, "  {name:<16} sha256:{}", component_digest(component));
        }
    }
    text
}
