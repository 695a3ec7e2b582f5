//! `vigil audit -f` (the binary) on the manifest fixtures of `tests/corpus/manifests`:
//! Helm-style multi-document files, `kind: List`, a directory, standard input, invalid
//! budgets and unreadable documents, each with its exit code and exact findings.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/corpus/manifests")
        .join(name)
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn vigil(args: &[&str], stdin: Option<&[u8]>) -> Run {
    let mut child = Command::new(crate::process::binary())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vigil runs");
    {
        let mut input = child.stdin.take().expect("stdin");
        if let Some(bytes) = stdin {
            input.write_all(bytes).expect("write stdin");
        }
    }
    let output = child.wait_with_output().expect("vigil ends");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn audit(files: &[&str], json: bool) -> Run {
    let mut args = vec!["audit".to_owned()];
    for file in files {
        args.push("-f".to_owned());
        args.push(if *file == "-" {
            "-".to_owned()
        } else {
            corpus(file).display().to_string()
        });
    }
    if json {
        args.extend(["-o".to_owned(), "json".to_owned()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    vigil(&args, None)
}

/// The findings of a JSON run as `(severity, code, first object)`.
fn findings(run: &Run) -> Vec<(String, String, String)> {
    let value: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON output");
    value["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            let object = &f["objects"][0];
            (
                f["severity"].as_str().expect("severity").to_owned(),
                f["code"].as_str().expect("code").to_owned(),
                format!(
                    "{}/{}/{}",
                    object["kind"].as_str().unwrap_or_default(),
                    object["namespace"].as_str().unwrap_or("-"),
                    object["name"].as_str().unwrap_or_default()
                ),
            )
        })
        .collect()
}

fn row(severity: &str, code: &str, object: &str) -> (String, String, String) {
    (severity.to_owned(), code.to_owned(), object.to_owned())
}

#[test]
fn a_clean_helm_render_exits_zero_with_no_finding() {
    let run = audit(&["helm-clean.yaml"], false);
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(
        run.stdout, "0 findings (0 blocking, 0 warning, 0 info) in 4 objects from 1 inputs\n",
        "{run}"
    );
    assert_eq!(run.stderr, "", "{run}");
    let json = audit(&["helm-clean.yaml"], true);
    assert_eq!(json.code, Some(0), "{json}");
    assert_eq!(findings(&json), vec![]);
}

#[test]
fn a_directory_is_read_file_by_file() {
    let run = audit(&["app"], true);
    assert_eq!(run.code, Some(0), "{run}");
    let value: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(value["inputs_read"], 2);
    assert_eq!(value["objects_read"], 2);
    assert_eq!(findings(&run), vec![]);
}

#[test]
fn blocking_budgets_exit_one_with_their_causes() {
    let run = audit(&["helm-blocking.yaml"], true);
    assert_eq!(run.code, Some(1), "{run}");
    assert_eq!(
        findings(&run),
        vec![
            row(
                "blocking",
                "pdb-zero-disruptions",
                "PodDisruptionBudget/data/db"
            ),
            row(
                "blocking",
                "pdb-zero-disruptions",
                "PodDisruptionBudget/shop/web"
            ),
            row(
                "warning",
                "pdb-integer-min-available",
                "PodDisruptionBudget/shop/web"
            ),
            row(
                "info",
                "pdb-unhealthy-policy",
                "PodDisruptionBudget/shop/web"
            ),
        ],
        "{run}"
    );
    let table = audit(&["helm-blocking.yaml"], false);
    assert_eq!(table.code, Some(1), "{table}");
    assert!(table.stdout.starts_with("SEVERITY  CODE "), "{table}");
    assert!(
        table
            .stdout
            .contains("budget db allows 0 disruptions: maxUnavailable is 0"),
        "{table}"
    );
    assert!(
        table
            .stdout
            .contains("budget web allows 0 disruptions: minAvailable 1 on a single replica"),
        "{table}"
    );
    assert!(
        table.stdout.contains("fix: run 2 replicas or more"),
        "{table}"
    );
    assert!(
        table
            .stdout
            .ends_with("4 findings (2 blocking, 1 warning, 1 info) in 4 objects from 1 inputs\n"),
        "{table}"
    );
}

#[test]
fn standard_input_is_read_like_a_file() {
    let text = std::fs::read(corpus("helm-blocking.yaml")).expect("read");
    let from_stdin = vigil(&["audit", "-f", "-", "-o", "json"], Some(&text));
    assert_eq!(from_stdin.code, Some(1), "{from_stdin}");
    let from_file = audit(&["helm-blocking.yaml"], true);
    assert_eq!(findings(&from_stdin), findings(&from_file));
    let clean = std::fs::read(corpus("helm-clean.yaml")).expect("read");
    let run = vigil(&["audit", "-f", "-"], Some(&clean));
    assert_eq!(run.code, Some(0), "{run}");
}

#[test]
fn invalid_budgets_are_named_with_the_api_servers_reasons() {
    let run = audit(&["invalid-budgets.yaml"], true);
    assert_eq!(run.code, Some(1), "{run}");
    let value: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON");
    let messages: Vec<&str> = value["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            assert_eq!(f["code"], "pdb-invalid");
            assert_eq!(f["severity"], "blocking");
            f["message"].as_str().expect("message")
        })
        .collect();
    assert_eq!(
        messages,
        vec![
            "budget both would be refused by the API server: spec.minAvailable: minAvailable and maxUnavailable cannot be both set",
            "budget negative would be refused by the API server: spec.maxUnavailable: -1: must be greater than or equal to 0",
            "budget not-a-percent would be refused by the API server: spec.maxUnavailable: \"10\": must be an integer or a percentage (e.g. '5%')",
            "budget too-much would be refused by the API server: spec.minAvailable: \"110%\": must not be greater than 100%",
        ]
    );
}

#[test]
fn min_domains_without_do_not_schedule_blocks() {
    let run = audit(&["min-domains.yaml"], true);
    assert_eq!(run.code, Some(1), "{run}");
    assert_eq!(
        findings(&run),
        vec![row(
            "blocking",
            "spread-min-domains-without-do-not-schedule",
            "Deployment/default/api"
        )]
    );
}

#[test]
fn unreadable_documents_are_named_skipped_and_exit_two() {
    let run = audit(&["broken.yaml"], false);
    assert_eq!(run.code, Some(2), "{run}");
    let file = corpus("broken.yaml").display().to_string();
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{run}");
    assert!(
        lines[0].starts_with(&format!(
            "error: {file}, document 2 (line 7): not valid YAML at line "
        )),
        "{run}"
    );
    assert_eq!(
        lines[1],
        format!("error: {file}, document 3 (line 13): not a Kubernetes object (not a mapping)")
    );
    // The readable document is still audited.
    assert!(run.stdout.contains("pdb-orphan"), "{run}");
    assert!(
        run.stdout.contains("; 2 unreadable (see standard error)"),
        "{run}"
    );
    // The broken Secret's value is never printed.
    assert!(!run.stdout.contains("vigil-fake-secret-value"), "{run}");
    assert!(!run.stderr.contains("vigil-fake-secret-value"), "{run}");
    // Blocking findings elsewhere do not hide the unreadable input.
    let both = audit(&["broken.yaml", "helm-blocking.yaml"], true);
    assert_eq!(both.code, Some(2), "{both}");
}

#[test]
fn usage_errors_exit_two() {
    let missing = audit(&["no-such-file.yaml"], false);
    assert_eq!(missing.code, Some(2), "{missing}");
    assert!(
        missing.stderr.contains("no-such-file.yaml: cannot be read"),
        "{missing}"
    );
    let no_file = vigil(&["audit"], None);
    assert_eq!(no_file.code, Some(2), "{no_file}");
    let help = vigil(&["audit", "--help"], None);
    assert_eq!(help.code, Some(0), "{help}");
    assert!(
        help.stdout
            .contains("Exit codes: 0 no finding at or above --fail-on (by default no blocking"),
        "{help}"
    );
}

#[test]
fn a_value_of_the_wrong_type_is_named_by_its_path_line_and_what_was_found() {
    // YAML 1.1, as Kubernetes' own reader, makes an unquoted `y` a boolean: not a label value.
    let manifest = b"apiVersion: v1\nkind: List\nitems:\n- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: web}\n  spec: {replicas: 2, selector: {matchLabels: {app: web}}, template: {metadata: {labels: {app: web}}}}\n- apiVersion: policy/v1\n  kind: PodDisruptionBudget\n  metadata:\n    name: web\n  spec:\n    minAvailable: 1\n    selector:\n      matchLabels:\n        app: web\n        enabled: y\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api}\nspec:\n  replicas: vigil-fake-secret-value\n";
    let run = vigil(&["audit", "-f", "-"], Some(manifest));
    assert_eq!(run.code, Some(2), "{run}");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{run}");
    assert_eq!(
        lines[0],
        "error: -, document 1 (line 1), item 2: PodDisruptionBudget does not have the expected \
         shape: `spec.selector.matchLabels.enabled` (line 17): a value of the wrong type, \
         expected a string, found the boolean true (YAML reads an unquoted y, yes, on or true \
         as a boolean: quote the value if a string is meant)",
        "{run}"
    );
    assert_eq!(
        lines[1],
        "error: -, document 2 (line 18): Deployment does not have the expected shape: \
         `spec.replicas` (line 23): a value of the wrong type, expected i64, found a string",
        "{run}"
    );
    assert!(!run.stderr.contains("vigil-fake-secret-value"), "{run}");
}

/// A Deployment `web` of `replicas` in `shop`, spread by host name, and its budget with
/// `spec` (one line of YAML flow mapping entries).
fn deployment_and_budget(replicas: u32, spec: &str) -> Vec<u8> {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: shop}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      topologySpreadConstraints:\n        - {{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, matchLabelKeys: [pod-template-hash], nodeTaintsPolicy: Honor, labelSelector: {{matchLabels: {{app: web}}}}}}\n---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: web, namespace: shop}}\nspec: {{{spec}, unhealthyPodEvictionPolicy: AlwaysAllow, selector: {{matchLabels: {{app: web}}}}}}\n"
    )
    .into_bytes()
}

#[test]
fn each_budget_finding_carries_the_numbers_and_replicas_behind_it() {
    let manifest = deployment_and_budget(3, "minAvailable: 3");
    let run = vigil(&["audit", "-f", "-", "-o", "json"], Some(&manifest));
    assert_eq!(run.code, Some(1), "{run}");
    let value: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON");
    let findings = value["findings"].as_array().expect("findings");
    let codes: Vec<&str> = findings.iter().filter_map(|f| f["code"].as_str()).collect();
    assert_eq!(
        codes,
        ["pdb-zero-disruptions", "pdb-integer-min-available"],
        "{run}"
    );
    let expected = serde_json::json!({
        "expected_pods": 3,
        "desired_healthy": 3,
        "current_healthy": 3,
        "disruptions_allowed": 0,
        "from": "computed",
        "expected_from": "selected-pods",
        "workloads": [
            {"kind": "Deployment", "namespace": "shop", "name": "web", "replicas": 3}
        ],
    });
    for finding in findings {
        assert_eq!(finding["numbers"], expected, "{run}");
    }
    assert_eq!(value["blocking"], 1, "{run}");
    assert_eq!(value["warning"], 1, "{run}");
    assert_eq!(value["fail_on"], "blocking", "{run}");

    // maxUnavailable counts the Deployment's replicas; a finding on the workload alone
    // (none here but the budget's) would carry `null`.
    let manifest = deployment_and_budget(3, "maxUnavailable: \"40%\"");
    let run = vigil(&["audit", "-f", "-", "-o", "json"], Some(&manifest));
    assert_eq!(run.code, Some(0), "{run}");
    let value: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON");
    let rounding = &value["findings"][0];
    assert_eq!(rounding["code"], "pdb-percent-rounding", "{run}");
    assert_eq!(rounding["numbers"]["expected_from"], "replicas", "{run}");
    assert_eq!(rounding["numbers"]["expected_pods"], 3, "{run}");
    assert_eq!(rounding["numbers"]["desired_healthy"], 1, "{run}");
    assert_eq!(rounding["numbers"]["disruptions_allowed"], 2, "{run}");

    // The table says the same on one line under the finding.
    let manifest = deployment_and_budget(3, "minAvailable: 3");
    let table = vigil(&["audit", "-f", "-"], Some(&manifest));
    assert_eq!(table.code, Some(1), "{table}");
    assert!(
        table.stdout.contains(
            "budget: expected 3 (pods selected; replicas of Deployment shop/web: 3), \
             desired healthy 3, healthy 3, allowed 0\n"
        ),
        "{table}"
    );
}

#[test]
fn fail_on_warning_fails_on_a_warning_that_blocking_lets_pass() {
    // Three replicas and no spread: a warning (spread-no-hostname) and nothing blocking.
    let manifest = b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: api}}\n  template:\n    metadata: {labels: {app: api}}\n---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: api}\nspec: {maxUnavailable: 1, unhealthyPodEvictionPolicy: AlwaysAllow, selector: {matchLabels: {app: api}}}\n";
    let default = vigil(&["audit", "-f", "-", "-o", "json"], Some(manifest));
    assert_eq!(default.code, Some(0), "{default}");
    assert_eq!(
        findings(&default),
        vec![row(
            "warning",
            "spread-no-hostname",
            "Deployment/default/api"
        )]
    );
    let blocking = vigil(
        &["audit", "-f", "-", "--fail-on", "blocking"],
        Some(manifest),
    );
    assert_eq!(blocking.code, Some(0), "{blocking}");
    let warning = vigil(
        &["audit", "-f", "-", "--fail-on", "warning"],
        Some(manifest),
    );
    assert_eq!(warning.code, Some(1), "{warning}");
    let json = vigil(
        &["audit", "-f", "-", "--fail-on", "warning", "-o", "json"],
        Some(manifest),
    );
    assert_eq!(json.code, Some(1), "{json}");
    let value: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON");
    assert_eq!(value["fail_on"], "warning", "{json}");

    // Info alone never fails; unreadable input still exits 2 under either severity.
    let clean = audit(&["helm-clean.yaml"], false);
    assert_eq!(clean.code, Some(0), "{clean}");
    let broken = vigil(
        &[
            "audit",
            "-f",
            &corpus("broken.yaml").display().to_string(),
            "--fail-on",
            "warning",
        ],
        None,
    );
    assert_eq!(broken.code, Some(2), "{broken}");
    let bad = vigil(&["audit", "-f", "-", "--fail-on", "info"], Some(manifest));
    assert_eq!(bad.code, Some(2), "{bad}");
    let help = vigil(&["audit", "--help"], None);
    assert!(help.stdout.contains("--fail-on <SEVERITY>"), "{help}");
}
