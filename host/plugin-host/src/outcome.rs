//! The outcome rules for one plugin call (docs/rules.md#whose-fault, PLUGINS.md "Outcomes"): what the plugin returned (or how it
//! failed) plus what the host saw, mapped to a [`ProbeOutcome`]. Pure: no I/O, no clock.

use vigil_decision::{ProbeOutcome, ReasonClass};

use super::contract::{ProbeError, ProbeReport, Verdict};
use super::sandbox::{CallRecord, LimitHit};

/// The longest `message` a probe report or failure may carry.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// The most `details` a probe report may carry.
pub const MAX_DETAILS: usize = 32;

/// The longest key or value of one detail, and of `server-version`.
pub const MAX_DETAIL_BYTES: usize = 256;

/// How a call ended, before the outcome rules are applied.
#[derive(Debug)]
pub(crate) enum CallEnd {
    /// The plugin returned.
    Returned(Result<ProbeReport, ProbeError>),
    /// The guest trapped (a panic, a failed allocation, an epoch deadline).
    Trapped {
        /// The epoch deadline interrupted it.
        interrupted: bool,
        /// What wasmtime said, for the operator.
        message: String,
    },
    /// The whole call overran its deadline (a tokio timeout around it fired).
    Overran,
    /// The host could not set the call up (instantiation failed: pool exhausted, …).
    HostFailure(String),
}

/// The outcome of one call.
pub(crate) fn map(
    plugin: &str,
    end: CallEnd,
    record: &CallRecord,
    limit: Option<LimitHit>,
) -> ProbeOutcome {
    let fault = |message: String| ProbeOutcome::Inconclusive {
        class: ReasonClass::PluginFault,
        message: format!("plugin {plugin}: {message}"),
    };
    // A plugin that did not return a verdict says nothing: a 401/403 the host saw
    // from the cluster then stands (the cluster is up and refuses our credentials).
    let rejected_or = |other: ProbeOutcome| match record.auth_rejected {
        Some(status) => ProbeOutcome::CredentialsRejected {
            message: format!("the API server answered {status} (seen by the host)"),
        },
        None => not_the_clusters(record, other),
    };
    let overran = |what: &str| {
        if record.cluster_timed_out {
            ProbeOutcome::Unhealthy {
                class: ReasonClass::Timeout,
                message: format!("the cluster did not answer within the budget ({what})"),
            }
        } else {
            rejected_or(fault(format!(
                "{what}, and no request to the cluster timed out"
            )))
        }
    };
    match end {
        CallEnd::Returned(Ok(report)) => map_report(plugin, report, record),
        CallEnd::Returned(Err(ProbeError::NotProbeable(failure))) => {
            match check_message(&failure.message) {
                Ok(()) => ProbeOutcome::NotProbeable {
                    class: failure.class,
                    message: failure.message,
                },
                Err(why) => fault(format!("malformed not-probeable failure: {why}")),
            }
        }
        CallEnd::Returned(Err(ProbeError::Inconclusive(failure))) => {
            match check_message(&failure.message) {
                Ok(()) => not_the_clusters(
                    record,
                    ProbeOutcome::Inconclusive {
                        class: failure.class,
                        message: failure.message,
                    },
                ),
                Err(why) => fault(format!("malformed inconclusive failure: {why}")),
            }
        }
        CallEnd::Trapped { .. } if limit.is_some() => {
            // The limiter's record is what tells a memory-limit hit from a panic: the
            // guest's allocator traps the same way in both cases.
            let hit = limit.map(|l| l.to_string()).unwrap_or_default();
            rejected_or(fault(hit))
        }
        CallEnd::Trapped {
            interrupted: true, ..
        } => overran("the plugin ran past its CPU deadline"),
        CallEnd::Trapped { message, .. } => rejected_or(fault(format!("trapped: {message}"))),
        CallEnd::Overran => overran("the call ran past its deadline"),
        CallEnd::HostFailure(message) => ProbeOutcome::Inconclusive {
            class: ReasonClass::HostFault,
            message: format!("plugin {plugin} could not be run: {message}"),
        },
    }
}

/// What a call that never reached the cluster ends as, when the host knows why: connection
/// material from the reference that cannot be used is the reference's (`not-probeable`),
/// a failure of vigil's own resources is vigil's (`inconclusive`, `host-fault`). Otherwise
/// `fallback` (the plugin's doing).
fn not_the_clusters(record: &CallRecord, fallback: ProbeOutcome) -> ProbeOutcome {
    if record.cluster_contacted {
        return fallback;
    }
    if let Some(message) = &record.reference_broken {
        return ProbeOutcome::NotProbeable {
            class: ReasonClass::ReferenceBroken,
            message: message.clone(),
        };
    }
    if let Some(message) = &record.host_fault {
        return ProbeOutcome::Inconclusive {
            class: ReasonClass::HostFault,
            message: message.clone(),
        };
    }
    fallback
}

fn map_report(plugin: &str, report: ProbeReport, record: &CallRecord) -> ProbeOutcome {
    let fault = |message: String| ProbeOutcome::Inconclusive {
        class: ReasonClass::PluginFault,
        message: format!("plugin {plugin}: {message}"),
    };
    if let Err(why) = check_report(&report) {
        return fault(format!("malformed probe report: {why}"));
    }
    match report.verdict {
        Verdict::Healthy => ProbeOutcome::Healthy,
        Verdict::Unhealthy => {
            let Some(class) = report.reason else {
                return fault("malformed probe report: unhealthy without a reason".to_owned());
            };
            if !is_cluster_failure(class) {
                return fault(format!(
                    "malformed probe report: unhealthy with reason {class}, which is not a cluster failure"
                ));
            }
            if !record.cluster_contacted {
                return not_the_clusters(
                    record,
                    fault(format!(
                        "unhealthy ({class}) without a request to the cluster in this call"
                    )),
                );
            }
            if class == ReasonClass::Timeout
                && !record.cluster_timed_out
                && record.cluster_timeout_shortened
            {
                return fault(
                    "unhealthy (timeout) after a timeout the plugin shortened itself (below 1 s and the budget)"
                        .to_owned(),
                );
            }
            ProbeOutcome::Unhealthy {
                class,
                message: report.message,
            }
        }
        Verdict::CredentialsRejected => {
            if !record.cluster_contacted {
                return not_the_clusters(
                    record,
                    fault(
                        "credentials-rejected without a request to the cluster in this call"
                            .to_owned(),
                    ),
                );
            }
            ProbeOutcome::CredentialsRejected {
                message: report.message,
            }
        }
    }
}

/// The reason classes an `unhealthy` verdict may carry: what a cluster does wrong.
fn is_cluster_failure(class: ReasonClass) -> bool {
    matches!(
        class,
        ReasonClass::Refused
            | ReasonClass::Timeout
            | ReasonClass::Tls
            | ReasonClass::Dns
            | ReasonClass::ServerError
            | ReasonClass::BadResponse
            | ReasonClass::Unauthorized
    )
}

fn check_message(message: &str) -> Result<(), String> {
    if message.len() > MAX_MESSAGE_BYTES {
        return Err(format!(
            "message of {} bytes, over the {MAX_MESSAGE_BYTES}-byte cap",
            message.len()
        ));
    }
    if message.contains(['\n', '\r']) {
        return Err("message spans several lines".to_owned());
    }
    Ok(())
}

fn check_report(report: &ProbeReport) -> Result<(), String> {
    check_message(&report.message)?;
    if report.details.len() > MAX_DETAILS {
        return Err(format!(
            "{} details, over the cap of {MAX_DETAILS}",
            report.details.len()
        ));
    }
    let long = report
        .details
        .iter()
        .flat_map(|(k, v)| [k, v])
        .chain(report.server_version.as_ref())
        .any(|text| text.len() > MAX_DETAIL_BYTES);
    if long {
        return Err(format!("a detail over {MAX_DETAIL_BYTES} bytes"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Failure;

    fn report(verdict: Verdict, reason: Option<ReasonClass>) -> ProbeReport {
        ProbeReport {
            verdict,
            reason,
            message: "m".to_owned(),
            latency_ms: 1,
            server_version: None,
            details: Vec::new(),
        }
    }

    fn record(contacted: bool, timed_out: bool, auth: Option<u16>) -> CallRecord {
        CallRecord {
            cluster_contacted: contacted,
            cluster_timed_out: timed_out,
            auth_rejected: auth,
            ..CallRecord::default()
        }
    }

    /// One case: how the call ended, what the host saw, the label expected.
    fn check(end: CallEnd, seen: &CallRecord, limit: Option<LimitHit>, expected: &str) {
        let outcome = map("p", end, seen, limit);
        assert_eq!(outcome.label(), expected, "{outcome:?}");
    }

    #[test]
    fn outcomes_follow_design_section_1() {
        use ReasonClass as W;
        use Verdict as V;
        let ok = |v, r| CallEnd::Returned(Ok(report(v, r)));
        let trap = |interrupted| CallEnd::Trapped {
            interrupted,
            message: "t".to_owned(),
        };
        let memory = Some(LimitHit::Memory {
            requested: 1 << 30,
            cap: 64 << 20,
        });
        let failure = |class| Failure {
            class,
            message: "f".to_owned(),
        };

        check(
            ok(V::Healthy, None),
            &record(true, false, None),
            None,
            "healthy",
        );
        check(
            ok(V::Unhealthy, Some(W::Refused)),
            &record(true, false, None),
            None,
            "unhealthy",
        );
        check(
            ok(V::Unhealthy, Some(W::Refused)),
            &record(false, false, None),
            None,
            "inconclusive",
        );
        check(
            ok(V::Unhealthy, None),
            &record(true, false, None),
            None,
            "inconclusive",
        );
        check(
            ok(V::Unhealthy, Some(W::PluginFault)),
            &record(true, false, None),
            None,
            "inconclusive",
        );
        check(
            ok(V::CredentialsRejected, None),
            &record(true, false, Some(401)),
            None,
            "credentials-rejected",
        );
        check(
            ok(V::CredentialsRejected, None),
            &record(false, false, None),
            None,
            "inconclusive",
        );
        // The plugin's verdict wins over a 401 the host saw.
        check(
            ok(V::Healthy, None),
            &record(true, false, Some(403)),
            None,
            "healthy",
        );
        check(
            trap(false),
            &record(true, false, Some(403)),
            None,
            "credentials-rejected",
        );
        check(
            trap(false),
            &record(true, false, None),
            None,
            "inconclusive",
        );
        check(
            trap(false),
            &record(true, false, None),
            memory,
            "inconclusive",
        );
        check(trap(true), &record(true, true, None), None, "unhealthy");
        check(trap(true), &record(true, false, None), None, "inconclusive");
        check(
            CallEnd::Overran,
            &record(true, true, None),
            None,
            "unhealthy",
        );
        check(
            CallEnd::Overran,
            &record(false, false, None),
            None,
            "inconclusive",
        );
        check(
            CallEnd::Returned(Err(ProbeError::NotProbeable(failure(W::ExecCredentials)))),
            &record(false, false, None),
            None,
            "not-probeable",
        );
        check(
            CallEnd::Returned(Err(ProbeError::Inconclusive(failure(W::Denied)))),
            &record(false, false, Some(401)),
            None,
            "inconclusive",
        );
        let mut long = report(V::Healthy, None);
        long.message = "x".repeat(MAX_MESSAGE_BYTES + 1);
        check(
            CallEnd::Returned(Ok(long)),
            &record(true, false, None),
            None,
            "inconclusive",
        );
    }

    /// What the host learned that the plugin's verdict cannot override: material from the
    /// reference that cannot be used, vigil's own faults, timeouts the host does not count.
    #[test]
    fn what_the_host_saw_decides_whose_fault_it_was() {
        use ReasonClass as W;
        use Verdict as V;
        let ok = |v, r| CallEnd::Returned(Ok(report(v, r)));
        let broken = CallRecord {
            reference_broken: Some("the client certificate and key do not fit".to_owned()),
            ..CallRecord::default()
        };
        let host = CallRecord {
            host_fault: Some("vigil cannot open a socket: too many open files".to_owned()),
            ..CallRecord::default()
        };
        let inconclusive = |class| {
            CallEnd::Returned(Err(ProbeError::Inconclusive(Failure {
                class,
                message: "f".to_owned(),
            })))
        };
        // Unusable material the host served: the reference's, whatever the plugin says.
        check(
            ok(V::Unhealthy, Some(W::Tls)),
            &broken,
            None,
            "not-probeable",
        );
        check(inconclusive(W::PluginFault), &broken, None, "not-probeable");
        check(CallEnd::Overran, &broken, None, "not-probeable");
        // vigil's own trouble: inconclusive, of class host-fault.
        for end in [ok(V::Unhealthy, Some(W::Refused)), CallEnd::Overran] {
            let outcome = map("p", end, &host, None);
            assert!(
                matches!(
                    outcome,
                    ProbeOutcome::Inconclusive {
                        class: ReasonClass::HostFault,
                        ..
                    }
                ),
                "{outcome:?}"
            );
        }
        let outcome = map(
            "p",
            CallEnd::HostFailure("pool full".to_owned()),
            &CallRecord::default(),
            None,
        );
        assert!(
            matches!(
                outcome,
                ProbeOutcome::Inconclusive {
                    class: ReasonClass::HostFault,
                    ..
                }
            ),
            "{outcome:?}"
        );
        // Once the cluster was reached, what it did stands.
        let reached = CallRecord {
            cluster_contacted: true,
            ..host
        };
        check(
            ok(V::Unhealthy, Some(W::Refused)),
            &reached,
            None,
            "unhealthy",
        );
        // A real handshake with the server that failed (its certificate does not verify
        // against the kubeconfig's CA, say) is the cluster's.
        check(
            ok(V::Unhealthy, Some(W::Tls)),
            &record(true, false, None),
            None,
            "unhealthy",
        );
        // A timeout the plugin shortened is its own; an answer too slow for the plugin's
        // latency bound (no request timed out) is the cluster's.
        let shortened = CallRecord {
            cluster_contacted: true,
            cluster_timeout_shortened: true,
            ..CallRecord::default()
        };
        check(
            ok(V::Unhealthy, Some(W::Timeout)),
            &shortened,
            None,
            "inconclusive",
        );
        check(
            ok(V::Unhealthy, Some(W::Timeout)),
            &record(true, false, None),
            None,
            "unhealthy",
        );
        check(
            ok(V::Unhealthy, Some(W::Timeout)),
            &record(true, true, None),
            None,
            "unhealthy",
        );
        // Nothing known: the plugin's fault, as before.
        check(
            ok(V::Unhealthy, Some(W::Tls)),
            &CallRecord::default(),
            None,
            "inconclusive",
        );
    }

    #[test]
    fn a_memory_hit_is_named() {
        let memory = Some(LimitHit::Memory {
            requested: 1 << 30,
            cap: 64 << 20,
        });
        let trap = CallEnd::Trapped {
            interrupted: false,
            message: "unreachable".to_owned(),
        };
        let outcome = map("alloc", trap, &CallRecord::default(), memory);
        let ProbeOutcome::Inconclusive {
            class: ReasonClass::PluginFault,
            message,
        } = outcome
        else {
            panic!("{outcome:?}");
        };
        assert!(message.contains("memory limit of 64 MiB"), "{message}");
    }
}
