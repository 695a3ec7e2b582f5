//! `vigil healthcheck` against real `vigil serve` processes: 0 when `/healthz` (or
//! `/readyz`, with `--ready`) answers 200, 1 with one line on standard error otherwise — a
//! closed port, a server that never answers within `--timeout`, a vigil whose first probe
//! of a cluster still hangs — and `vigil_ready` in `/metrics` saying the same as `/readyz`.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::process::{self, Vigil, http_get, vigil};
use vigil_test_support as plugins;
use vigil_test_support::engine::write_kubeconfig;
use vigil_test_support::wait;

/// Exit code and standard error of `vigil healthcheck ARGS` with `env`.
fn healthcheck(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let output = vigil(dir)
        .arg("healthcheck")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Starts `vigil serve` in `dir` with `env` and waits for its first discovery; returns it
/// and where its API listens.
fn serve(dir: &Path, env: &[(&str, &std::ffi::OsStr)]) -> (Vigil, SocketAddr) {
    let vigil = process::serve(dir)
        .envs(env.iter().copied())
        .until_discovered()
        .start_blocking();
    let api = vigil.api();
    (vigil, api)
}

/// The value of the `vigil_ready` sample in `/metrics`.
fn vigil_ready(api: SocketAddr) -> String {
    let metrics = http_get(api, "/metrics");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("vigil_ready "))
        .unwrap_or_else(|| panic!("no vigil_ready in /metrics:\n{metrics}"))
        .to_owned()
}

#[test]
fn a_running_vigil_passes_and_a_closed_or_silent_port_fails_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let none = dir.path().join("none.yaml");
    let (_vigil, api) = serve(dir.path(), &[("KUBECONFIG_PATH", none.as_os_str())]);
    let url = format!("http://{api}");

    assert_eq!(
        healthcheck(dir.path(), &["--url", &url], &[]),
        (Some(0), String::new())
    );
    // VIGIL_LISTEN as `vigil serve` reads it; every address is asked on loopback.
    let everywhere = format!("0.0.0.0:{}", api.port());
    assert_eq!(
        healthcheck(dir.path(), &[], &[("VIGIL_LISTEN", &everywhere)]),
        (Some(0), String::new())
    );
    // With no cluster to wait for, it is ready soon, and `vigil_ready` says so.
    wait::until(
        "vigil healthcheck --ready passes",
        Duration::from_secs(30),
        || format!("never ready: {}", http_get(api, "/readyz")),
        || (healthcheck(dir.path(), &["--ready", "--url", &url], &[]).0 == Some(0)).then_some(()),
    );
    assert_eq!(vigil_ready(api), "1");

    // A closed port: refused at once.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (code, stderr) = healthcheck(dir.path(), &["--url", &format!("http://{closed}")], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: cannot reach vigil at http://{closed}: connection refused"
        )),
        "{stderr}"
    );

    // A port that accepts and never answers: given up after --timeout, not after minutes.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = silent.local_addr().unwrap();
    let started = Instant::now();
    let (code, stderr) = healthcheck(
        dir.path(),
        &["--timeout", "300ms"],
        &[("VIGIL_LISTEN", &address.to_string())],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        stderr,
        format!("error: cannot reach vigil at http://{address}: no answer within 300ms\n")
    );
    drop(silent);

    // Arguments it cannot use: exit 2.
    assert_eq!(healthcheck(dir.path(), &["--timeout", "0"], &[]).0, Some(2));
    assert_eq!(
        healthcheck(dir.path(), &["--url", "ftp://x"], &[]).0,
        Some(2)
    );
}

#[test]
fn a_vigil_still_probing_at_start_up_is_alive_but_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    // A cluster whose API server accepts connections and never answers: its first probe
    // hangs for the whole timeout, so the clusters overdue at start-up are not probed yet.
    let hanging = TcpListener::bind("127.0.0.1:0").unwrap();
    let kubeconfigs = dir.path().join("kubeconfigs");
    std::fs::create_dir(&kubeconfigs).unwrap();
    write_kubeconfig(
        &kubeconfigs.join("hanging.yaml"),
        "hanging",
        hanging.local_addr().unwrap().port(),
    );
    let plugin_dir = plugins::plugin_dir_with_only(dir.path(), "kubeconfig-file");
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugins-e2e-cache");
    let (_vigil, api) = serve(
        dir.path(),
        &[
            ("KUBECONFIG_DIR", kubeconfigs.as_os_str()),
            ("VIGIL_PLUGIN_DIR", plugin_dir.as_os_str()),
            ("VIGIL_CACHE_DIR", cache.as_os_str()),
            ("CLUSTER_HEALTH_TIMEOUT", "60".as_ref()),
        ],
    );
    let url = format!("http://{api}");
    assert_eq!(
        healthcheck(dir.path(), &["--url", &url], &[]),
        (Some(0), String::new())
    );
    let (code, stderr) = healthcheck(dir.path(), &["--ready", "--url", &url], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "error: {url}/readyz answered HTTP 503: clusters overdue at start-up are still \
             being probed\n"
        )
    );
    assert_eq!(vigil_ready(api), "0");
    drop(hanging);
}
