//! Audit plugins (the contract's `audit` world): loading them beside the probe plugins, and
//! running one audit of a cluster in the same sandbox as a probe — a fresh store, the
//! plugin's memory cap, an epoch deadline, timeouts on every host call, the same egress
//! policy — mapped to an [`AuditOutcome`].
//!
//! A plugin's fault (trap, memory limit, deadline, malformed result) is an
//! [`AuditOutcome::Fault`], never a host crash. Only a complete report clears findings: an
//! audit that could not read a kind is an [`AuditOutcome::Failed`], after which the caller
//! keeps the cluster's previous findings.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use tracing::{Instrument, debug, info_span, warn};
use vigil_decision::ReasonClass;
use wasmtime::Trap;
use wasmtime::component::{Component, Linker};

use super::contract::{self, AuditPre, Version};
use super::engine::SharedEngine;
use super::outcome::MAX_MESSAGE_BYTES;
use super::sandbox::CallState;
use super::{
    CALL_GRACE, Compiled, INFO_DEADLINE, LoadedPlugin, PluginRuntime, Refusal, WorldPre,
    call_cluster, info_answer, new_store, wire_cluster,
};
use vigil_domain::probe::ProbeTarget;
use vigil_domain::tls::TlsClients;

/// The most findings one audit may report; more is a malformed result.
pub const MAX_FINDINGS: usize = 10_000;

/// The most objects one finding may name.
pub const MAX_FINDING_OBJECTS: usize = 64;

/// The most kinds a report may list as read.
pub const MAX_KINDS_READ: usize = 64;

/// The longest finding code, kind, object kind, namespace or name.
pub const MAX_NAME_BYTES: usize = 253;

/// The kind every audit must have read: an audit that could not read pods knows nothing
/// about drains.
pub const REQUIRED_KIND: &str = "pods";

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingSeverity {
    /// It blocks node drains now (sets the `drain-blocked` condition).
    Blocking,
    /// It will likely cause trouble.
    Warning,
    /// Worth knowing.
    Info,
}

/// A Kubernetes object named by a finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FindingObject {
    /// Its kind, e.g. `PodDisruptionBudget`.
    pub kind: String,
    /// Its namespace, for namespaced kinds.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// One thing an audit found, checked by the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// A stable code, e.g. `pdb-zero-disruptions`.
    pub code: String,
    /// How much it matters.
    pub severity: FindingSeverity,
    /// The objects involved.
    pub objects: Vec<FindingObject>,
    /// One line saying what is wrong.
    pub message: String,
    /// One line saying how to fix it.
    pub fix: String,
}

/// The result of one audit of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditOutcome {
    /// The plugin read everything it needed: these findings replace the cluster's previous
    /// ones (none means all is well).
    Report {
        /// The audit plugin that ran.
        plugin: String,
        /// Its generation.
        generation: u64,
        /// What it found.
        findings: Vec<Finding>,
        /// The kinds it read, e.g. `pods`.
        kinds_read: Vec<String>,
    },
    /// The audit could not read something (a kind answered 403, timed out, …) or the
    /// reference is unusable: keep the previous findings.
    Failed {
        /// The audit plugin that ran.
        plugin: String,
        /// The kind it could not read, if that is the cause.
        kind: Option<String>,
        /// Why, as a class.
        class: ReasonClass,
        /// One line for operators.
        message: String,
    },
    /// No loaded audit plugin accepts the cluster.
    NoPlugin {
        /// Why.
        message: String,
    },
    /// The plugin failed (trap, memory limit, deadline, malformed result): keep the previous
    /// findings.
    Fault {
        /// The audit plugin that ran.
        plugin: String,
        /// What happened.
        message: String,
    },
}

impl AuditOutcome {
    /// Whether this outcome replaces the cluster's findings (only a complete report does).
    pub fn is_report(&self) -> bool {
        matches!(self, Self::Report { .. })
    }

    /// Whether a report holds a blocking finding.
    pub fn has_blocking(&self) -> bool {
        match self {
            Self::Report { findings, .. } => findings
                .iter()
                .any(|f| f.severity == FindingSeverity::Blocking),
            _ => false,
        }
    }
}

/// Links an audit component and asks its `info()` under [`INFO_DEADLINE`].
pub(crate) async fn load(
    engine: &SharedEngine,
    linker: &Linker<CallState>,
    tls: &TlsClients,
    component: &Component,
    version: Version,
    compiled: Compiled,
) -> Result<LoadedPlugin, Refusal> {
    let instance_pre = linker
        .instantiate_pre(component)
        .map_err(|e| Refusal::Link(format!("{e:#}")))?;
    let pre = AuditPre::new(version, instance_pre).map_err(|e| Refusal::Link(format!("{e:#}")))?;
    let mut store = new_store(engine, tls, compiled.parts(), None, INFO_DEADLINE);
    let call = async {
        let instance = pre.instantiate(&mut store).await?;
        instance.info(&mut store).await
    };
    let answer = tokio::time::timeout(INFO_DEADLINE + CALL_GRACE, call).await;
    let info = info_answer(answer, store.data())?;
    compiled.into_loaded(WorldPre::Audit(pre), info)
}

impl PluginRuntime {
    /// Audits `target` once with the highest-priority audit plugin that accepts it, within
    /// `budget` (every host call the plugin makes is bounded by what is left of it).
    pub(super) async fn run_audit(&self, target: &ProbeTarget, budget: Duration) -> AuditOutcome {
        let span = info_span!("plugin_audit", cluster = %target.name);
        async {
            let audits: Vec<Arc<LoadedPlugin>> = self
                .catalog()
                .routing()
                .iter()
                .filter(|p| p.is_audit())
                .cloned()
                .collect();
            if audits.is_empty() {
                return AuditOutcome::NoPlugin {
                    message: "no audit plugin is loaded".to_owned(),
                };
            }
            let shown = super::accepts_fingerprint(target);
            for plugin in &audits {
                // A failed `accepts` is not an answer: the plugin is skipped this time
                // and asked again at the next audit.
                if self
                    .routed_accepts(plugin, target, shown)
                    .await
                    .unwrap_or(false)
                {
                    let outcome = self.call_audit(plugin, target, budget).await;
                    self.judge_probation(plugin, matches!(outcome, AuditOutcome::Fault { .. }));
                    return outcome;
                }
            }
            AuditOutcome::NoPlugin {
                message: format!(
                    "no loaded audit plugin accepts {} references",
                    super::scheme_of(&target.reference)
                ),
            }
        }
        .instrument(span)
        .await
    }

    async fn call_audit(
        &self,
        plugin: &LoadedPlugin,
        target: &ProbeTarget,
        budget: Duration,
    ) -> AuditOutcome {
        let cluster = wire_cluster(plugin, target);
        let mut store = self.new_store(plugin, Some(call_cluster(plugin, target)), budget);
        let call = async {
            let WorldPre::Audit(pre) = &plugin.pre else {
                return Err(wasmtime::Error::msg(format!(
                    "{} is a probe plugin",
                    plugin.name
                )));
            };
            let instance = pre.instantiate(&mut store).await?;
            instance.audit(&mut store, cluster).await
        };
        let result = tokio::time::timeout(budget + CALL_GRACE, call).await;
        let state = store.data();
        state.emit_guest_output();
        let name = plugin.name.to_string();
        let fault = |message: String| AuditOutcome::Fault {
            plugin: name.clone(),
            message: format!("plugin {name}: {message}"),
        };
        let outcome = match result {
            Ok(Ok(Ok(report))) => match check_report(report) {
                Ok((findings, kinds_read)) => {
                    if kinds_read.iter().any(|k| k == REQUIRED_KIND) {
                        AuditOutcome::Report {
                            plugin: name.clone(),
                            generation: plugin.summary.generation,
                            findings,
                            kinds_read,
                        }
                    } else {
                        AuditOutcome::Failed {
                            plugin: name.clone(),
                            kind: Some(REQUIRED_KIND.to_owned()),
                            class: ReasonClass::BadResponse,
                            message: format!(
                                "the audit did not read {REQUIRED_KIND}, so it cannot tell what blocks drains"
                            ),
                        }
                    }
                }
                Err(why) => fault(format!("malformed audit report: {why}")),
            },
            Ok(Ok(Err(error))) => match check_error(&error) {
                Ok(()) => AuditOutcome::Failed {
                    plugin: name.clone(),
                    kind: error.kind,
                    class: error.failure.class,
                    message: error.failure.message,
                },
                Err(why) => fault(format!("malformed audit error: {why}")),
            },
            Ok(Err(error)) => match state.limiter.hit {
                Some(hit) => fault(hit.to_string()),
                None if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) => {
                    fault("the plugin ran past its CPU deadline".to_owned())
                }
                None => fault(format!("trapped: {error:#}")),
            },
            Err(_) => fault(format!(
                "the audit ran past its deadline ({} ms)",
                budget.as_millis()
            )),
        };
        plugin.probes.fetch_add(1, Ordering::Relaxed);
        match &outcome {
            AuditOutcome::Fault { message, .. } => {
                plugin.faults.fetch_add(1, Ordering::Relaxed);
                warn!(plugin = %plugin.name, cluster = %target.name, "{message}");
            }
            AuditOutcome::Failed { message, kind, .. } => {
                warn!(plugin = %plugin.name, cluster = %target.name, kind = ?kind, "audit failed: {message}");
            }
            AuditOutcome::Report { findings, .. } => {
                debug!(plugin = %plugin.name, cluster = %target.name, findings = findings.len(), "audit done");
            }
            AuditOutcome::NoPlugin { .. } => {}
        }
        outcome
    }
}

/// A report within the host's bounds, as host types.
fn check_report(report: contract::AuditReport) -> Result<(Vec<Finding>, Vec<String>), String> {
    if report.findings.len() > MAX_FINDINGS {
        return Err(format!(
            "{} findings (at most {MAX_FINDINGS})",
            report.findings.len()
        ));
    }
    if report.kinds_read.len() > MAX_KINDS_READ {
        return Err(format!(
            "{} kinds read (at most {MAX_KINDS_READ})",
            report.kinds_read.len()
        ));
    }
    for kind in &report.kinds_read {
        check_name("kind read", kind)?;
    }
    let mut findings = Vec::with_capacity(report.findings.len());
    for finding in report.findings {
        check_code(&finding.code)?;
        check_line("message", &finding.message)?;
        check_line("fix", &finding.fix)?;
        if finding.objects.len() > MAX_FINDING_OBJECTS {
            return Err(format!(
                "finding {} names {} objects (at most {MAX_FINDING_OBJECTS})",
                finding.code,
                finding.objects.len()
            ));
        }
        let mut objects = Vec::with_capacity(finding.objects.len());
        for object in finding.objects {
            check_name("object kind", &object.kind)?;
            check_name("object name", &object.name)?;
            if let Some(namespace) = &object.namespace {
                check_name("object namespace", namespace)?;
            }
            objects.push(FindingObject {
                kind: object.kind,
                namespace: object.namespace,
                name: object.name,
            });
        }
        findings.push(Finding {
            code: finding.code,
            severity: match finding.severity {
                contract::Severity::Blocking => FindingSeverity::Blocking,
                contract::Severity::Warning => FindingSeverity::Warning,
                contract::Severity::Info => FindingSeverity::Info,
            },
            objects,
            message: finding.message,
            fix: finding.fix,
        });
    }
    Ok((findings, report.kinds_read))
}

fn check_error(error: &contract::AuditError) -> Result<(), String> {
    if let Some(kind) = &error.kind {
        check_name("kind", kind)?;
    }
    check_line("message", &error.failure.message)
}

/// A code: lowercase letters, digits and `-`, as the contract's examples.
fn check_code(code: &str) -> Result<(), String> {
    if code.is_empty()
        || code.len() > MAX_NAME_BYTES
        || !code
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err("a finding code is not lowercase letters, digits and '-'".to_owned());
    }
    Ok(())
}

fn check_name(what: &str, value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > MAX_NAME_BYTES || value.chars().any(char::is_control) {
        return Err(format!("an empty, overlong or control-character {what}"));
    }
    Ok(())
}

fn check_line(what: &str, value: &str) -> Result<(), String> {
    if value.len() > MAX_MESSAGE_BYTES || value.chars().any(char::is_control) {
        return Err(format!(
            "a {what} longer than {MAX_MESSAGE_BYTES} bytes or with control characters"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(code: &str, message: &str) -> contract::Finding {
        contract::Finding {
            code: code.to_owned(),
            severity: contract::Severity::Blocking,
            objects: vec![contract::ObjectRef {
                kind: "PodDisruptionBudget".to_owned(),
                namespace: Some("prod".to_owned()),
                name: "api".to_owned(),
            }],
            message: message.to_owned(),
            fix: "fix it".to_owned(),
        }
    }

    #[test]
    fn reports_are_checked() {
        let ok = contract::AuditReport {
            findings: vec![finding("pdb-zero-disruptions", "budget api allows 0")],
            kinds_read: vec!["pods".to_owned()],
        };
        let (findings, kinds) = check_report(ok).expect("valid");
        assert_eq!(findings[0].severity, FindingSeverity::Blocking);
        assert_eq!(kinds, vec!["pods".to_owned()]);
        for bad in [
            finding("PDB Zero", "x"),
            finding("", "x"),
            finding("a", "two\nlines"),
            finding("a", &"x".repeat(MAX_MESSAGE_BYTES + 1)),
        ] {
            let report = contract::AuditReport {
                findings: vec![bad],
                kinds_read: vec!["pods".to_owned()],
            };
            assert!(check_report(report).is_err());
        }
        let too_many = contract::AuditReport {
            findings: vec![finding("a", "x"); MAX_FINDINGS + 1],
            kinds_read: Vec::new(),
        };
        assert!(check_report(too_many).is_err());
    }
}
