//! The demo (`scripts/dev demo`) as a newcomer runs it: the fake fleet, vigil with the
//! first-party plugin, one cluster refused and brought back. The test reads the demo's
//! output and waits, with a deadline, for the OFFLINE transition and its cascade, then the
//! recovery, each seen in the event stream too, and a clean stop.
//!
//! It runs the binaries already built (`vigil` of this test, `fake-kube` beside it, built
//! by `cargo test --workspace`) and the first-party plugins built for the tests.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::process;

use process::Running;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

#[test]
fn the_demo_shows_an_outage_its_cascade_and_the_recovery() {
    let root = repository();
    let vigil = process::binary().to_path_buf();
    let fake_kube = vigil.with_file_name("fake-kube");
    assert!(
        fake_kube.is_file(),
        "{} is missing: cargo build -p vigil-fake-kube --bin fake-kube",
        fake_kube.display()
    );
    let plugins = vigil_test_support::first_party_dir();
    let cache = tempfile::tempdir().unwrap();

    let mut demo = Command::new("bash")
        .args(["-c", "exec scripts/dev demo 2>&1"])
        .current_dir(&root)
        .env("DEMO_NO_BUILD", "1")
        .env("VIGIL_BIN", &vigil)
        .env("FAKE_KUBE_BIN", &fake_kube)
        .env("VIGIL_PLUGIN_DIR", &plugins)
        .env("VIGIL_CACHE_DIR", cache.path())
        .env("DEMO_TIMEOUT", "120")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map(Running)
        .unwrap();
    let (lines, received) = mpsc::channel();
    let stdout = demo.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });

    let deadline = Instant::now() + Duration::from_secs(300);
    let mut output: Vec<String> = Vec::new();
    let mut wait_for = |wanted: &str| {
        while !output.iter().any(|line| line.contains(wanted)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match received.recv_timeout(left) {
                Ok(line) => output.push(line),
                Err(_) => {
                    process::signal(demo.id(), "TERM");
                    panic!(
                        "the demo never printed {wanted:?} (deadline or end of output):\n{}",
                        output.join("\n")
                    );
                }
            }
        }
        output.clone()
    };
    wait_for("demo: cluster-00002 is OFFLINE; app shop is DEGRADED");
    wait_for("demo: cluster-00002 recovered: ONLINE, app shop DEPLOYED again");
    let output = wait_for("demo: done");
    let status = process::wait_exit(&mut demo, Duration::from_secs(30));
    assert!(status.success(), "{status}\n{}", output.join("\n"));

    // The event stream shows the outage, the cascade and the recovery, in order.
    let position = |wanted: &str| {
        output
            .iter()
            .position(|line| line.starts_with("[events]") && line.contains(wanted))
            .unwrap_or_else(|| panic!("no event {wanted:?} in:\n{}", output.join("\n")))
    };
    let offline =
        position(r#"status-changed cluster=cluster-00002 {"from":"ONLINE","to":"OFFLINE","#);
    let degraded = position("apps-degraded cluster=cluster-00002");
    let online =
        position(r#"status-changed cluster=cluster-00002 {"from":"OFFLINE","to":"ONLINE","#);
    let restored = position("apps-restored cluster=cluster-00002");
    assert!(
        offline < degraded && degraded < online && online < restored,
        "{}",
        output.join("\n")
    );
    // And so does vigil's log.
    assert!(
        output
            .iter()
            .any(|l| l.starts_with("[log]") && l.contains("outage confirmed: apps degraded")),
        "{}",
        output.join("\n")
    );
    // Every cluster was ONLINE before the fault, and is again after.
    let last_table = output
        .iter()
        .rposition(|l| l.starts_with("CLUSTER"))
        .unwrap();
    let rows: Vec<&String> = output[last_table + 1..]
        .iter()
        .filter(|l| l.starts_with("cluster-"))
        .collect();
    assert_eq!(rows.len(), 5, "{}", output.join("\n"));
    assert!(rows.iter().all(|r| r.contains(" ONLINE ")), "{rows:?}");
}
