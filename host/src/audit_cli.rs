//! `vigil audit -f FILE_OR_DIR…`: the drain rules of `vigil-drain-rules` on manifest files,
//! offline. Reads the inputs, audits what they declare, and prints the findings as a table
//! or JSON, each budget's with the numbers behind it; the exit code gates a deployment, on
//! blocking findings or (`--fail-on warning`) on warnings too.
//!
//! Inputs are only ever named (file, document, line), never quoted: a manifest may hold a
//! Secret.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::json;
use vigil_drain_rules::{
    BudgetNumbers, ExpectedPods, Finding, Manifests, NumbersFrom, Severity, Source, audit,
};

use crate::cli::{AuditArgs, FailOn, OutputFormat};

/// Exit code: no finding at or above the `--fail-on` severity.
pub const EXIT_CLEAN: u8 = 0;
/// Exit code: at least one finding at or above the `--fail-on` severity (blocking, unless
/// `--fail-on warning`).
pub const EXIT_BLOCKING: u8 = 1;
/// Exit code: invalid arguments or an input that cannot be read.
pub const EXIT_UNREADABLE: u8 = 2;

/// The largest input read, per file (or standard input).
pub const MAX_INPUT_BYTES: u64 = 64 * 1024 * 1024;

/// What `vigil audit` found in its inputs.
#[derive(Debug, Default)]
pub struct AuditResult {
    /// The findings, sorted by severity.
    pub findings: Vec<Finding>,
    /// Inputs and documents that could not be read, one line each.
    pub problems: Vec<String>,
    /// How many files (or standard input) were read.
    pub inputs_read: usize,
    /// How many Kubernetes objects they held.
    pub objects_read: usize,
}

impl AuditResult {
    /// The exit code: unreadable input first (the audit is incomplete), then findings at
    /// or above `fail_on`.
    pub fn exit_code(&self, fail_on: FailOn) -> u8 {
        let least = least_failing(fail_on);
        if !self.problems.is_empty() {
            EXIT_UNREADABLE
        } else if self.findings.iter().any(|f| f.severity <= least) {
            EXIT_BLOCKING
        } else {
            EXIT_CLEAN
        }
    }
}

/// Reads `paths` (`-` is `stdin`) and audits what they declare.
pub fn audit_inputs(paths: &[PathBuf], stdin: &mut dyn Read) -> AuditResult {
    let mut result = AuditResult::default();
    let mut manifests = Manifests::new();
    let mut stdin_read = false;
    for path in paths {
        if path.as_os_str() == "-" {
            if stdin_read {
                continue;
            }
            stdin_read = true;
            match read_limited(stdin) {
                Ok(text) => {
                    manifests.add("-", &text);
                    result.inputs_read += 1;
                }
                Err(why) => result.problems.push(format!("-: {why}")),
            }
            continue;
        }
        let files = match files_of(path) {
            Ok(files) => files,
            Err(why) => {
                result.problems.push(format!("{}: {why}", path.display()));
                continue;
            }
        };
        for file in files {
            let origin = file.display().to_string();
            let text = std::fs::File::open(&file)
                .map_err(|e| format!("cannot be read: {e}"))
                .and_then(|mut f| read_limited(&mut f));
            match text {
                Ok(text) => {
                    manifests.add(&origin, &text);
                    result.inputs_read += 1;
                }
                Err(why) => result.problems.push(format!("{origin}: {why}")),
            }
        }
    }
    result
        .problems
        .extend(manifests.problems.iter().map(ToString::to_string));
    result.objects_read = manifests.objects_read;
    result.findings = audit(&manifests.objects, Source::Manifests);
    result
}

/// The files a path names: itself, or a directory's manifest files in name order.
fn files_of(path: &Path) -> Result<Vec<PathBuf>, String> {
    let metadata = std::fs::metadata(path).map_err(|e| format!("cannot be read: {e}"))?;
    if !metadata.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path).map_err(|e| format!("cannot be listed: {e}"))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|file| {
            file.is_file()
                && file
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Reads at most [`MAX_INPUT_BYTES`] of text.
fn read_limited(reader: &mut dyn Read) -> Result<String, String> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot be read: {e}"))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(format!("is larger than {MAX_INPUT_BYTES} bytes"));
    }
    String::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_owned())
}

/// Runs `vigil audit`: the findings go to `stdout`, the unreadable inputs to `stderr`;
/// returns the exit code.
pub fn run(args: &AuditArgs, stdin: &mut dyn Read, stdout: &mut String, stderr: &mut String) -> u8 {
    let result = audit_inputs(&args.files, stdin);
    for problem in &result.problems {
        stderr.push_str(&format!("error: {problem}\n"));
    }
    match args.output {
        OutputFormat::Table => stdout.push_str(&table(&result)),
        OutputFormat::Json => {
            let count = |severity| {
                result
                    .findings
                    .iter()
                    .filter(|f| f.severity == severity)
                    .count()
            };
            let value = json!({
                "findings": result.findings,
                "problems": result.problems,
                "inputs_read": result.inputs_read,
                "objects_read": result.objects_read,
                "blocking": count(Severity::Blocking),
                "warning": count(Severity::Warning),
                "info": count(Severity::Info),
                "fail_on": least_failing(args.fail_on).as_str(),
            });
            stdout.push_str(&format!("{value:#}\n"));
        }
    }
    result.exit_code(args.fail_on)
}

/// The least severity that fails the audit (severities order from blocking to info).
fn least_failing(fail_on: FailOn) -> Severity {
    match fail_on {
        FailOn::Blocking => Severity::Blocking,
        FailOn::Warning => Severity::Warning,
    }
}

/// A budget's numbers in one line: `expected 3 (replicas of Deployment shop/web: 3),
/// desired healthy 3, healthy 3, allowed 0`.
pub fn numbers_line(numbers: &BudgetNumbers) -> String {
    let workloads: Vec<String> = numbers
        .workloads
        .iter()
        .map(|w| format!("{} {}/{}: {}", w.kind, w.namespace, w.name, w.replicas))
        .collect();
    let counted = match (numbers.expected_from, workloads.is_empty()) {
        (ExpectedPods::Replicas, false) => format!(" (replicas of {})", workloads.join(", ")),
        (ExpectedPods::Replicas, true) => " (replicas)".to_owned(),
        (ExpectedPods::SelectedPods, false) => {
            format!(" (pods selected; replicas of {})", workloads.join(", "))
        }
        (ExpectedPods::SelectedPods, true) => " (pods selected)".to_owned(),
        (ExpectedPods::Nothing, _) => " (neither minAvailable nor maxUnavailable)".to_owned(),
    };
    let from = match numbers.from {
        NumbersFrom::Status => ", from its status",
        NumbersFrom::Computed => "",
    };
    format!(
        "expected {}{counted}, desired healthy {}, healthy {}, allowed {}{from}",
        numbers.expected_pods,
        numbers.desired_healthy,
        numbers.current_healthy,
        numbers.disruptions_allowed
    )
}

/// The findings as a table: one row each, the fix indented under it, then a summary.
pub fn table(result: &AuditResult) -> String {
    let mut out = String::new();
    if !result.findings.is_empty() {
        let code_width = result
            .findings
            .iter()
            .map(|f| f.code.len())
            .max()
            .unwrap_or(4)
            .max(4);
        out.push_str(&format!(
            "{:<8}  {:<code_width$}  MESSAGE\n",
            "SEVERITY", "CODE"
        ));
        for finding in &result.findings {
            let objects: Vec<String> = finding.objects.iter().map(ToString::to_string).collect();
            out.push_str(&format!(
                "{:<8}  {:<code_width$}  {}\n",
                finding.severity.as_str(),
                finding.code,
                finding.message
            ));
            out.push_str(&format!(
                "{:<8}  {:<code_width$}  objects: {}\n",
                "",
                "",
                objects.join(", ")
            ));
            if let Some(numbers) = &finding.numbers {
                out.push_str(&format!(
                    "{:<8}  {:<code_width$}  budget: {}\n",
                    "",
                    "",
                    numbers_line(numbers)
                ));
            }
            out.push_str(&format!(
                "{:<8}  {:<code_width$}  fix: {}\n",
                "", "", finding.fix
            ));
        }
    }
    let count = |severity| {
        result
            .findings
            .iter()
            .filter(|f| f.severity == severity)
            .count()
    };
    out.push_str(&format!(
        "{} findings ({} blocking, {} warning, {} info) in {} objects from {} inputs{}\n",
        result.findings.len(),
        count(Severity::Blocking),
        count(Severity::Warning),
        count(Severity::Info),
        result.objects_read,
        result.inputs_read,
        if result.problems.is_empty() {
            String::new()
        } else {
            format!(
                "; {} unreadable (see standard error)",
                result.problems.len()
            )
        }
    ));
    out
}
