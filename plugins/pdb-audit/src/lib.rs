//! `pdb-audit`: vigil's audit plugin for node drains. It reads a cluster's
//! PodDisruptionBudgets, pods, nodes and workloads (Deployments, ReplicaSets, StatefulSets,
//! ReplicationControllers) and reports what would block or slow a drain, with Kubernetes'
//! own arithmetic (crate `vigil-drain-rules`, which `vigil audit` runs on manifest files).
//!
//! The cluster is reached as `kubeconfig-file` reaches it: the kubeconfig of a file
//! reference or of a `secret://` reference through `credentials.kubeconfig()`, the context
//! selected exactly as vigil's host does, the files it names through `credentials.read-file`,
//! then `GET`s through `http.send` with the context's TLS material and token. Each
//! collection is listed cluster-wide, page by page (`limit`, `continue`).
//!
//! | what happened | result |
//! |---|---|
//! | every kind was listed | the findings (none when all is well) and the kinds read |
//! | a kind could not be listed (403, timeout, 5xx, …) | `audit-error` naming the kind |
//! | reference, kubeconfig, context, user or file unusable | `audit-error`, `reference-broken` |
//!
//! Parameters (the cluster's own over `pdb-audit.toml`'s): `page-size`, the `limit` of each
//! list request (default 500).
//!
//! Grants (`pdb-audit.toml`): `log`, `credentials`, `http`; and `memory-mib`, to raise for
//! clusters with tens of thousands of pods.

// The export glue comes from `register_audit!`; this crate itself needs no `unsafe`.
#![forbid(unsafe_code)]

use serde::de::DeserializeOwned;
use vigil_drain_rules::model::{
    ClusterObjects, Node, Pod, PodDisruptionBudget, Workload, WorkloadKind, WorkloadObject,
};
use vigil_drain_rules::{Severity, Source};
use vigil_plugin_sdk::apiserver::{ApiServer, DEFAULT_PAGE_SIZE};
use vigil_plugin_sdk::credentials::CredentialsError;
use vigil_plugin_sdk::kubeconfig::{SelectError, select};
use vigil_plugin_sdk::reference::Reference;
use vigil_plugin_sdk::{
    AuditError, AuditPlugin, AuditReport, Cluster, Finding, ObjectRef, PluginInfo, ProbeError,
    ReasonClass, credentials,
};

/// The plugin.
#[derive(Debug)]
pub struct PdbAudit;

/// The collections read, in order: the kind's name in reports, and its cluster-wide path.
const KINDS: [(&str, &str); 7] = [
    (
        "poddisruptionbudgets",
        "/apis/policy/v1/poddisruptionbudgets",
    ),
    ("pods", "/api/v1/pods"),
    ("nodes", "/api/v1/nodes"),
    ("deployments", "/apis/apps/v1/deployments"),
    ("replicasets", "/apis/apps/v1/replicasets"),
    ("statefulsets", "/apis/apps/v1/statefulsets"),
    ("replicationcontrollers", "/api/v1/replicationcontrollers"),
];

impl AuditPlugin for PdbAudit {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "pdb-audit",
            env!("CARGO_PKG_VERSION"),
            ["file", "secret"],
            "Reports what blocks node drains: PodDisruptionBudgets, eviction rules, topology spread",
        )
    }

    fn audit(cluster: Cluster) -> Result<AuditReport, AuditError> {
        let server = connect(&cluster)?;
        let page_size = cluster
            .parameters
            .iter()
            .find(|(name, _)| name == "page-size")
            .and_then(|(_, value)| value.parse().ok())
            .unwrap_or(DEFAULT_PAGE_SIZE);
        let [
            budgets,
            pods,
            nodes,
            deployments,
            replica_sets,
            stateful_sets,
            controllers,
        ] = KINDS;
        let mut objects = ClusterObjects {
            budgets: list::<PodDisruptionBudget>(&server, budgets, page_size)?,
            pods: list::<Pod>(&server, pods, page_size)?,
            nodes: list::<Node>(&server, nodes, page_size)?,
            workloads: Vec::new(),
        };
        for (kind, collection) in [
            (WorkloadKind::Deployment, deployments),
            (WorkloadKind::ReplicaSet, replica_sets),
            (WorkloadKind::StatefulSet, stateful_sets),
            (WorkloadKind::ReplicationController, controllers),
        ] {
            let listed = list::<WorkloadObject>(&server, collection, page_size)?;
            objects.workloads.extend(
                listed
                    .into_iter()
                    .map(|object| Workload::from_object(kind, object)),
            );
        }
        let findings = vigil_drain_rules::audit(&objects, Source::Live)
            .into_iter()
            .map(to_wire)
            .collect::<Vec<_>>();
        vigil_plugin_sdk::debug!(
            "audited {} budgets, {} pods, {} workloads: {} findings",
            objects.budgets.len(),
            objects.pods.len(),
            objects.workloads.len(),
            findings.len()
        );
        Ok(AuditReport::new(findings, KINDS.map(|(kind, _)| kind)))
    }
}

vigil_plugin_sdk::register_audit!(PdbAudit);

/// The API server of the cluster's kubeconfig, from a file or `secret://` reference.
fn connect(cluster: &Cluster) -> Result<ApiServer, AuditError> {
    let reference = Reference::parse(&cluster.reference).map_err(|error| {
        AuditError::failure(
            ReasonClass::ReferenceBroken,
            format!("invalid reference: {error}"),
        )
    })?;
    let (origin, context) = match &reference {
        Reference::File { path, context } => (format!("kubeconfig {path}"), context.clone()),
        Reference::Secret {
            namespace,
            name,
            key,
            context,
        } => (
            format!("kubeconfig in Secret {namespace}/{name} (key {key})"),
            context.clone(),
        ),
        Reference::Http { .. } => {
            return Err(AuditError::failure(
                ReasonClass::NoPlugin,
                "pdb-audit audits clusters of kubeconfig references, not health URLs",
            ));
        }
    };
    let kubeconfig = credentials::kubeconfig()
        .map_err(|error| failure(error.probe_error(&format!("the {origin}")), &origin))?;
    let selection = match select(kubeconfig.expose_secret(), context.as_deref()) {
        Ok(selection) => selection,
        // A user whose credential comes from an `exec` command: the context as vigil
        // resolved it, with the credential vigil ran the command for (a 401 to it makes
        // vigil run the command again for the next audit).
        Err(SelectError::ExecPlugin { .. }) => {
            let exec_failure = |error: CredentialsError| {
                failure(error.probe_error(&format!("the {origin}")), &origin)
            };
            let selection = credentials::context().map_err(exec_failure)?;
            let credential = credentials::exec_credential().map_err(exec_failure)?;
            selection.with_exec_credential(&credential)
        }
        Err(error) => {
            return Err(AuditError::failure(
                error.class(),
                format!("{origin}: {error}"),
            ));
        }
    };
    ApiServer::connect(&selection).map_err(|error| failure(error, &origin))
}

/// A probe error from the SDK's kubeconfig helpers, as an audit error.
fn failure(error: ProbeError, origin: &str) -> AuditError {
    let failure = match error {
        ProbeError::NotProbeable(failure) | ProbeError::Inconclusive(failure) => failure,
    };
    let message = if failure.message.starts_with(origin) {
        failure.message
    } else {
        format!("{origin}: {}", failure.message)
    };
    AuditError::failure(failure.class, message)
}

/// Every item of one collection, or an error naming the kind.
fn list<T: DeserializeOwned>(
    server: &ApiServer,
    (kind, path): (&str, &str),
    page_size: u32,
) -> Result<Vec<T>, AuditError> {
    server.list(path, page_size).map_err(|error| {
        AuditError::unreadable(
            kind,
            error.reason_class(),
            format!("cannot list {kind}: {}", error.describe()),
        )
    })
}

/// A finding as the contract carries it.
fn to_wire(finding: vigil_drain_rules::Finding) -> Finding {
    let severity = match finding.severity {
        Severity::Blocking => vigil_plugin_sdk::Severity::Blocking,
        Severity::Warning => vigil_plugin_sdk::Severity::Warning,
        Severity::Info => vigil_plugin_sdk::Severity::Info,
    };
    let objects = finding
        .objects
        .into_iter()
        .map(|object| ObjectRef {
            kind: object.kind,
            namespace: object.namespace,
            name: object.name,
        })
        .collect();
    Finding::new(
        finding.code,
        severity,
        objects,
        finding.message,
        finding.fix,
    )
}
