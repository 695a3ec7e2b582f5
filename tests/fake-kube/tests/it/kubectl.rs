//! The real `kubectl` against the fake API server, over real TLS, with a kubeconfig the fake
//! server wrote: discovery (aggregated or legacy), the `Table` form and plain objects must
//! be what kubectl understands. kubectl must be installed (it is at /usr/bin/kubectl on the
//! CI image); without it these tests fail rather than skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use vigil_fake_kube::{
    AddressPlan, Fixtures, Fleet, KubeconfigOptions, KubeconfigShape, ShapePlan, WrittenKubeconfig,
};

fn fixtures() -> Fixtures {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/basic");
    Fixtures::load(&path).unwrap_or_else(|error| panic!("fixtures/basic: {error:?}"))
}

/// The kubectl binary: `$KUBECTL` if set, else the first `kubectl` on `PATH`.
fn kubectl_binary() -> PathBuf {
    if let Some(explicit) = std::env::var_os("KUBECTL") {
        return PathBuf::from(explicit);
    }
    let found = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|folder| folder.join("kubectl"))
        .find(|candidate| candidate.is_file());
    found.unwrap_or_else(|| {
        panic!("kubectl is not installed (looked on PATH; set KUBECTL to point at it)")
    })
}

/// Runs kubectl with `kubeconfig`, a private cache folder (so that no earlier discovery cache
/// hides what this server answers) and a short request timeout.
fn kubectl(kubeconfig: &WrittenKubeconfig, cache: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(kubectl_binary());
    command
        .arg("--kubeconfig")
        .arg(&kubeconfig.path)
        .arg("--context")
        .arg(&kubeconfig.context)
        .arg("--cache-dir")
        .arg(cache)
        .arg("--request-timeout=20s")
        .args(args)
        .env_remove("KUBECONFIG")
        .env("HOME", cache);
    command
        .output()
        .unwrap_or_else(|error| panic!("cannot run kubectl: {error}"))
}

/// Runs kubectl and returns its standard output, failing the test on a non-zero exit.
#[track_caller]
fn run(kubeconfig: &WrittenKubeconfig, cache: &Path, args: &[&str]) -> String {
    let output = kubectl(kubeconfig, cache, args);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "kubectl {}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        args.join(" "),
        output.status
    );
    stdout
}

/// The rows of kubectl's table output, split on runs of spaces (no cell here has two spaces
/// in a row), without the header.
fn rows(output: &str) -> Vec<Vec<String>> {
    output
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            line.split("  ")
                .map(str::trim)
                .filter(|cell| !cell.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

fn header(output: &str) -> Vec<String> {
    rows(output).into_iter().next().unwrap_or_default()
}

/// Starts one fake cluster serving `fixtures/basic` and writes its kubeconfig in `shape`.
async fn start(shape: KubeconfigShape, dir: &Path) -> (Fleet, WrittenKubeconfig) {
    let fleet = Fleet::builder()
        .clusters(1)
        .addresses(AddressPlan::Auto)
        .fixtures(fixtures())
        .start()
        .await
        .unwrap_or_else(|error| panic!("starting the fake cluster: {error:?}"));
    let options = KubeconfigOptions {
        shapes: ShapePlan::Only(shape),
        single_file: false,
    };
    let mut written = fleet
        .write_kubeconfigs(dir, &options)
        .unwrap_or_else(|error| panic!("kubeconfig: {error:?}"));
    let kubeconfig = written.pop().expect("one kubeconfig");
    (fleet, kubeconfig)
}

/// kubectl blocks; the fake server needs the runtime's threads meanwhile.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::time::timeout(Duration::from_secs(120), tokio::task::spawn_blocking(work))
        .await
        .expect("kubectl finished within two minutes")
        .expect("the kubectl task did not panic")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_the_fake_cluster() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let (fleet, kubeconfig) = start(KubeconfigShape::Embedded, dir.path()).await;
    let cache = dir.path().join("kube-cache");

    blocking(move || {
        // get namespaces: NAME STATUS AGE, in name order.
        let output = run(&kubeconfig, &cache, &["get", "namespaces"]);
        assert_eq!(header(&output), ["NAME", "STATUS", "AGE"], "{output}");
        let namespaces: Vec<Vec<String>> = rows(&output).into_iter().skip(1).collect();
        let names: Vec<&str> = namespaces.iter().map(|row| row[0].as_str()).collect();
        assert_eq!(
            names,
            ["data", "default", "kube-system", "legacy", "shop"],
            "{output}"
        );
        assert!(namespaces.iter().all(|row| row[1] == "Active"), "{output}");
        assert_eq!(
            namespaces[3][2], "192d",
            "ages come from the fixed reference time: {output}"
        );

        // get pdb -A: the short name resolves through discovery, ALLOWED DISRUPTIONS is the
        // fixture's status.
        let output = run(&kubeconfig, &cache, &["get", "pdb", "-A"]);
        assert_eq!(
            header(&output),
            [
                "NAMESPACE",
                "NAME",
                "MIN AVAILABLE",
                "MAX UNAVAILABLE",
                "ALLOWED DISRUPTIONS",
                "AGE"
            ],
            "{output}"
        );
        let budgets: Vec<Vec<String>> = rows(&output).into_iter().skip(1).collect();
        let allowed: Vec<(&str, &str, &str, &str, &str)> = budgets
            .iter()
            .map(|row| {
                (
                    row[0].as_str(),
                    row[1].as_str(),
                    row[2].as_str(),
                    row[3].as_str(),
                    row[4].as_str(),
                )
            })
            .collect();
        assert_eq!(
            allowed,
            [
                ("data", "db", "N/A", "1", "0"),
                ("kube-system", "coredns", "N/A", "1", "1"),
                ("legacy", "cache", "50%", "N/A", "1"),
                ("shop", "web", "2", "N/A", "1"),
            ],
            "{output}"
        );

        // get secret -o yaml: the plain object, data base64 as stored.
        let output = run(
            &kubeconfig,
            &cache,
            &[
                "get",
                "secret",
                "db-credentials",
                "-n",
                "data",
                "-o",
                "yaml",
            ],
        );
        assert!(output.contains("kind: Secret"), "{output}");
        assert!(
            output.contains("name: db-credentials") && output.contains("namespace: data"),
            "{output}"
        );
        assert!(
            output.contains("username: YXBw"),
            "base64 of `app`: {output}"
        );
        assert!(
            output.contains("password: czNjcjN0LWZvci10ZXN0cw=="),
            "{output}"
        );
        assert!(output.contains("type: Opaque"), "{output}");

        // get deploy,rs,sts -A: three tables, each with its kind's columns.
        let output = run(&kubeconfig, &cache, &["get", "deploy,rs,sts", "-A"]);
        let sections: Vec<&str> = output
            .split("\n\n")
            .filter(|section| !section.trim().is_empty())
            .collect();
        assert_eq!(sections.len(), 3, "{output}");
        assert_eq!(
            header(sections[0]),
            [
                "NAMESPACE",
                "NAME",
                "READY",
                "UP-TO-DATE",
                "AVAILABLE",
                "AGE"
            ],
            "{output}"
        );
        let deployments: Vec<Vec<String>> = rows(sections[0]).into_iter().skip(1).collect();
        assert_eq!(
            deployments[0][..5],
            ["kube-system", "deployment.apps/coredns", "2/2", "2", "2"],
            "{output}"
        );
        assert_eq!(
            deployments[1][..5],
            ["shop", "deployment.apps/web", "3/3", "3", "3"],
            "{output}"
        );
        assert_eq!(
            header(sections[1]),
            ["NAMESPACE", "NAME", "DESIRED", "CURRENT", "READY", "AGE"],
            "{output}"
        );
        let replica_sets: Vec<Vec<String>> = rows(sections[1]).into_iter().skip(1).collect();
        let names: Vec<&str> = replica_sets.iter().map(|row| row[1].as_str()).collect();
        assert_eq!(
            names,
            [
                "replicaset.apps/coredns-668d6bf9bc",
                "replicaset.apps/web-7c9d8f6b5d"
            ],
            "{output}"
        );
        assert_eq!(
            header(sections[2]),
            ["NAMESPACE", "NAME", "READY", "AGE"],
            "{output}"
        );
        let stateful_sets = rows(sections[2]);
        assert_eq!(
            stateful_sets[1][..3],
            ["data", "statefulset.apps/db", "2/3"],
            "{output}"
        );

        // get pods: READY, STATUS and RESTARTS as the real printers give them.
        let output = run(&kubeconfig, &cache, &["get", "pods", "-n", "data"]);
        assert_eq!(
            header(&output),
            ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
            "{output}"
        );
        let pods = rows(&output);
        assert_eq!(
            pods[3][..4],
            ["db-2", "0/1", "CrashLoopBackOff", "5 (20m ago)"],
            "{output}"
        );

        // Set-based selectors and paging (kubectl pages with --chunk-size).
        let output = run(
            &kubeconfig,
            &cache,
            &[
                "get",
                "pods",
                "-A",
                "-l",
                "tier in (frontend,backend),app!=web",
                "--chunk-size=2",
                "-o",
                "name",
            ],
        );
        let names: Vec<&str> = output.lines().collect();
        assert_eq!(
            names,
            [
                "pod/db-0",
                "pod/db-1",
                "pod/db-2",
                "pod/cache-h7x2k",
                "pod/cache-q9w4m"
            ],
            "{output}"
        );

        // A missing object: kubectl prints the server's NotFound message.
        let missing = kubectl(&kubeconfig, &cache, &["get", "pod", "nope", "-n", "shop"]);
        assert!(!missing.status.success());
        let stderr = String::from_utf8_lossy(&missing.stderr);
        assert!(stderr.contains("pods \"nope\" not found"), "{stderr}");

        // The scale subresource, through kubectl's --subresource.
        let output = run(
            &kubeconfig,
            &cache,
            &[
                "get",
                "deployment",
                "web",
                "-n",
                "shop",
                "--subresource=scale",
                "-o",
                "jsonpath={.spec.replicas} {.status.selector}",
            ],
        );
        assert_eq!(output, "3 app=web", "{output}");

        // Nodes, wide.
        let output = run(&kubeconfig, &cache, &["get", "nodes", "-o", "wide"]);
        assert_eq!(
            header(&output)[..5],
            ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
            "{output}"
        );
        let nodes = rows(&output);
        assert_eq!(
            nodes[3][..3],
            ["worker-2", "Ready,SchedulingDisabled", "worker"],
            "{output}"
        );
        assert_eq!(nodes[3][5], "172.18.0.4", "{output}");
    })
    .await;
    fleet.shutdown().await;
}

/// The same reads with a bearer-token kubeconfig, and kubectl's discovery listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_discovers_the_served_resources() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let (fleet, kubeconfig) = start(KubeconfigShape::Token, dir.path()).await;
    let cache = dir.path().join("kube-cache");

    blocking(move || {
        let output = run(&kubeconfig, &cache, &["api-resources", "--no-headers"]);
        let resources: Vec<Vec<String>> = rows(&output);
        let short: Vec<(&str, &str)> = resources
            .iter()
            .filter(|row| row.len() == 5)
            .map(|row| (row[0].as_str(), row[1].as_str()))
            .collect();
        for expected in [
            ("namespaces", "ns"),
            ("nodes", "no"),
            ("pods", "po"),
            ("replicationcontrollers", "rc"),
            ("deployments", "deploy"),
            ("replicasets", "rs"),
            ("statefulsets", "sts"),
            ("poddisruptionbudgets", "pdb"),
        ] {
            assert!(short.contains(&expected), "{expected:?} in {output}");
        }
        let output = run(&kubeconfig, &cache, &["version", "-o", "json"]);
        assert!(output.contains("\"gitVersion\": \"v1.33.0\""), "{output}");
        let output = run(
            &kubeconfig,
            &cache,
            &["get", "all", "-n", "legacy", "-o", "name"],
        );
        let names: Vec<&str> = output.lines().collect();
        assert_eq!(
            names,
            [
                "pod/cache-h7x2k",
                "pod/cache-q9w4m",
                "replicationcontroller/cache"
            ],
            "{output}"
        );
    })
    .await;
    fleet.shutdown().await;
}
