//! `picky`: a test-only plugin whose `accepts` reads the cluster's labels: it accepts a
//! cluster labelled `route=picky` and no other, and answers `healthy` at once from
//! `probe`. The host caches routing decisions; a test changes a cluster's labels and checks
//! that routing follows them. Not a hostile plugin.
//!
//! With the `credentials` grant and a parameter `accepts-from` (a `file:///` credential
//! reference, read by the host at each call), `accepts` answers from that file's content
//! instead: `yes` accepts, `spin` spins until the host's deadline stops it, `trap` panics,
//! anything else refuses. What the plugin is shown of the cluster stays the same when the
//! file changes, so a test can make one `accepts` call fail and the next one answer.

use vigil_plugin_sdk::credentials;
use vigil_plugin_sdk::{Cluster, PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest};

/// The plugin.
#[derive(Debug)]
pub struct Picky;

impl ProbePlugin for Picky {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "picky",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: accepts only clusters labelled route=picky",
        )
    }

    fn accepts(cluster: &Cluster) -> bool {
        if let Ok(answer) = credentials::parameter("accepts-from") {
            return match answer.expose_secret().trim_ascii() {
                b"yes" => true,
                b"spin" => spin(),
                b"trap" => panic!("accepts was told to trap"),
                _ => false,
            };
        }
        cluster
            .labels
            .iter()
            .any(|(name, value)| name == "route" && value == "picky")
    }

    fn probe(_: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        Ok(ProbeReport::healthy(0))
    }
}

/// Spins without calling the host, so that only its deadline can stop the call.
fn spin() -> bool {
    let mut spins: u64 = 0;
    loop {
        // `black_box` keeps the loop's work observable, so the compiler cannot remove it.
        spins = std::hint::black_box(spins.wrapping_add(1));
    }
}

vigil_plugin_sdk::register!(Picky);
