//! The `meta.k8s.io/v1` `Table` form: per kind, the columns and cells the real server's
//! printers produce (`pkg/printers/internalversion`), which is what `kubectl get` shows.
//!
//! As on the real server, the wide columns (priority 1) are always sent and kubectl hides
//! them unless asked for `-o wide`. Ages are measured from [`super::REFERENCE_TIME`].

use std::sync::LazyLock;

use bytes::Bytes;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Container, Namespace, Node, Pod, ReplicationController, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

use super::discovery::{Kind, ResourceType};
use super::objects::{Page, Stored, list_metadata, to_json};
use super::request::IncludeObject;
use super::selector::LabelSelector;

/// A `TableColumnDefinition`; every field is always written, as the real server does.
#[derive(Serialize)]
struct Column {
    name: &'static str,
    #[serde(rename = "type")]
    type_: &'static str,
    format: &'static str,
    description: &'static str,
    priority: u8,
}

const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const CREATED_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const CONTAINERS_DOC: &str = "Names of each container in the template.";
const IMAGES_DOC: &str = "Images referenced by each container in the template.";

const fn column(name: &'static str, type_: &'static str, description: &'static str) -> Column {
    Column {
        name,
        type_,
        format: "",
        description,
        priority: 0,
    }
}

const fn wide(name: &'static str, type_: &'static str, description: &'static str) -> Column {
    Column {
        name,
        type_,
        format: "",
        description,
        priority: 1,
    }
}

const NAME: Column = Column {
    name: "Name",
    type_: "string",
    format: "name",
    description: NAME_DOC,
    priority: 0,
};
const AGE: Column = column("Age", "string", CREATED_DOC);

fn columns(kind: Kind) -> Vec<Column> {
    match kind {
        Kind::Namespace => vec![
            NAME,
            column("Status", "string", "The status of the namespace"),
            AGE,
        ],
        Kind::Node => vec![
            NAME,
            column("Status", "string", "The status of the node"),
            column("Roles", "string", "The roles of the node"),
            AGE,
            column("Version", "string", "Kubelet Version reported by the node."),
            wide(
                "Internal-IP",
                "string",
                "List of addresses reachable to the node.",
            ),
            wide(
                "External-IP",
                "string",
                "List of addresses reachable to the node.",
            ),
            wide(
                "OS-Image",
                "string",
                "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
            ),
            wide(
                "Kernel-Version",
                "string",
                "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
            ),
            wide(
                "Container-Runtime",
                "string",
                "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
            ),
        ],
        Kind::Pod => vec![
            NAME,
            column(
                "Ready",
                "string",
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            column(
                "Status",
                "string",
                "The aggregate status of the containers in this pod.",
            ),
            column(
                "Restarts",
                "string",
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            ),
            AGE,
            wide(
                "IP",
                "string",
                "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
            ),
            wide(
                "Node",
                "string",
                "NodeName indicates in which node this pod is scheduled.",
            ),
            wide(
                "Nominated Node",
                "string",
                "nominatedNodeName is set only when this pod preempts other pods on the node.",
            ),
            wide(
                "Readiness Gates",
                "string",
                "If specified, all readiness gates will be evaluated for pod readiness.",
            ),
        ],
        Kind::Secret => vec![
            NAME,
            column(
                "Type",
                "string",
                "Used to facilitate programmatic handling of secret data.",
            ),
            column("Data", "string", "Data contains the secret data."),
            AGE,
        ],
        Kind::ReplicationController => vec![
            NAME,
            column(
                "Desired",
                "integer",
                "Replicas is the number of desired replicas.",
            ),
            column(
                "Current",
                "integer",
                "Replicas is the most recently observed number of replicas.",
            ),
            column(
                "Ready",
                "integer",
                "The number of ready replicas for this replication controller.",
            ),
            AGE,
            wide("Containers", "string", CONTAINERS_DOC),
            wide("Images", "string", IMAGES_DOC),
            wide(
                "Selector",
                "string",
                "Selector is a label query over pods that should match the Replicas count.",
            ),
        ],
        Kind::Deployment => vec![
            NAME,
            column("Ready", "string", "Number of the pod with ready state"),
            column(
                "Up-to-date",
                "string",
                "Total number of non-terminating pods targeted by this deployment that have the desired template spec.",
            ),
            column(
                "Available",
                "string",
                "Total number of available non-terminating pods (ready for at least minReadySeconds) targeted by this deployment.",
            ),
            AGE,
            wide("Containers", "string", CONTAINERS_DOC),
            wide("Images", "string", IMAGES_DOC),
            wide(
                "Selector",
                "string",
                "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
            ),
        ],
        Kind::ReplicaSet => vec![
            NAME,
            column(
                "Desired",
                "integer",
                "Replicas is the number of desired pods.",
            ),
            column(
                "Current",
                "integer",
                "Replicas is the most recently observed number of non-terminating pods.",
            ),
            column(
                "Ready",
                "integer",
                "The number of non-terminating pods targeted by this ReplicaSet with a Ready Condition.",
            ),
            AGE,
            wide("Containers", "string", CONTAINERS_DOC),
            wide("Images", "string", IMAGES_DOC),
            wide(
                "Selector",
                "string",
                "Selector is a label query over pods that should match the replica count.",
            ),
        ],
        Kind::StatefulSet => vec![
            NAME,
            column("Ready", "string", "Number of the pod with ready state"),
            AGE,
            wide("Containers", "string", CONTAINERS_DOC),
            wide("Images", "string", IMAGES_DOC),
        ],
        Kind::PodDisruptionBudget => vec![
            NAME,
            column(
                "Min Available",
                "string",
                "The minimum number of pods that must be available.",
            ),
            column(
                "Max Unavailable",
                "string",
                "The maximum number of pods that may be unavailable.",
            ),
            column(
                "Allowed Disruptions",
                "integer",
                "Calculated number of pods that may be disrupted at this time.",
            ),
            AGE,
        ],
    }
}

/// The serialised column definitions of every kind, in [`Kind`] order.
fn column_definitions(kind: Kind) -> &'static [u8] {
    static DEFINITIONS: LazyLock<Vec<Bytes>> = LazyLock::new(|| {
        Kind::ALL
            .iter()
            .map(|&kind| to_json(&columns(kind)))
            .collect()
    });
    DEFINITIONS
        .get(kind.index())
        .map_or(b"[]", |bytes| &bytes[..])
}

/// Joins pre-serialised parts into a `Table`.
fn assemble<'a>(
    columns: &[u8],
    metadata: &[u8],
    rows: impl Iterator<Item = Row<'a>>,
    include: IncludeObject,
) -> Bytes {
    let mut body = Vec::with_capacity(4096);
    body.extend_from_slice(b"{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":");
    body.extend_from_slice(metadata);
    body.extend_from_slice(b",\"columnDefinitions\":");
    body.extend_from_slice(columns);
    body.extend_from_slice(b",\"rows\":[");
    for (index, row) in rows.enumerate() {
        if index > 0 {
            body.push(b',');
        }
        body.extend_from_slice(b"{\"cells\":");
        body.extend_from_slice(row.cells);
        if let Some(conditions) = row.conditions {
            body.extend_from_slice(b",\"conditions\":");
            body.extend_from_slice(conditions);
        }
        body.extend_from_slice(b",\"object\":");
        body.extend_from_slice(match include {
            IncludeObject::None => b"null",
            IncludeObject::Metadata => row.metadata,
            IncludeObject::Object => row.object,
        });
        body.push(b'}');
    }
    body.extend_from_slice(b"]}");
    Bytes::from(body)
}

/// The parts of one row.
struct Row<'a> {
    cells: &'a [u8],
    conditions: Option<&'a [u8]>,
    metadata: &'a [u8],
    object: &'a [u8],
}

impl<'a> Row<'a> {
    fn of(stored: &'a Stored) -> Self {
        Self {
            cells: &stored.cells,
            conditions: stored.row_conditions.as_deref(),
            metadata: &stored.row_metadata,
            object: &stored.json,
        }
    }
}

/// A page of a list as a `Table`.
pub(crate) fn list(resource: &ResourceType, page: &Page<'_>, include: IncludeObject) -> Bytes {
    let metadata = list_metadata(page);
    assemble(
        column_definitions(resource.kind),
        &metadata,
        page.items.iter().map(|stored| Row::of(stored)),
        include,
    )
}

/// One object as a one-row `Table`.
pub(crate) fn single(resource: &ResourceType, stored: &Stored, include: IncludeObject) -> Bytes {
    let metadata = to_json(&json!({ "resourceVersion": stored.resource_version }));
    assemble(
        column_definitions(resource.kind),
        &metadata,
        std::iter::once(Row::of(stored)),
        include,
    )
}

/// The scale subresource as a `Table`: the real server's default columns for kinds without a
/// printer, name and creation time.
pub(crate) fn scale(stored: &Stored, include: IncludeObject) -> Bytes {
    let columns = to_json(&[
        NAME,
        Column {
            name: "Created At",
            type_: "date",
            format: "",
            description: CREATED_DOC,
            priority: 0,
        },
    ]);
    let cells = to_json(&json!([stored.name, stored.creation_timestamp]));
    let scale = stored.scale.clone().unwrap_or_default();
    let metadata = serde_json::from_slice::<Value>(&scale)
        .ok()
        .and_then(|mut value| value.get_mut("metadata").map(Value::take))
        .unwrap_or_else(|| json!({}));
    let partial = to_json(
        &json!({ "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata }),
    );
    let row = Row {
        cells: &cells,
        conditions: None,
        metadata: &partial,
        object: &scale,
    };
    let list_metadata = to_json(&json!({ "resourceVersion": stored.resource_version }));
    assemble(&columns, &list_metadata, std::iter::once(row), include)
}

/// apimachinery's `duration.HumanDuration`: `45s`, `3m20s`, `2h5m`, `5d3h`, `40d`, `2y30d`.
pub(crate) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let rest = seconds % 60;
        return if rest == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{rest}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let rest = minutes % 60;
        return if rest == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{rest}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let rest = hours % 24;
        return if rest == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{rest}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// `translateTimestampSince`: the age of `time` at `now`, `<unknown>` without one.
fn since(time: Option<&Time>, now: Timestamp) -> String {
    match time {
        Some(Time(time)) => human_duration(now.duration_since(*time).as_secs()),
        None => "<unknown>".to_owned(),
    }
}

fn age(metadata: &ObjectMeta, now: Timestamp) -> Value {
    Value::from(since(metadata.creation_timestamp.as_ref(), now))
}

fn name(metadata: &ObjectMeta) -> Value {
    Value::from(metadata.name.clone().unwrap_or_default())
}

/// `layoutContainerCells`: container names and images, comma-separated.
fn container_cells(containers: &[Container]) -> [Value; 2] {
    let names: Vec<&str> = containers
        .iter()
        .map(|container| container.name.as_str())
        .collect();
    let images: Vec<&str> = containers
        .iter()
        .map(|container| container.image.as_deref().unwrap_or_default())
        .collect();
    [Value::from(names.join(",")), Value::from(images.join(","))]
}

/// `metav1.FormatLabelSelector`: `<none>` when empty, `<error>` when invalid.
fn format_label_selector(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> String {
    match LabelSelector::from_api(selector) {
        Ok(selector) if selector.is_empty() => "<none>".to_owned(),
        Ok(selector) => selector.to_string(),
        Err(_) => "<error>".to_owned(),
    }
}

fn int_or_string(value: Option<&IntOrString>) -> String {
    match value {
        Some(IntOrString::Int(number)) => number.to_string(),
        Some(IntOrString::String(text)) => text.clone(),
        None => "N/A".to_owned(),
    }
}

pub(crate) fn namespace(namespace: &Namespace, now: Timestamp) -> Vec<Value> {
    let phase = namespace
        .status
        .as_ref()
        .and_then(|status| status.phase.clone())
        .unwrap_or_default();
    vec![
        name(&namespace.metadata),
        Value::from(phase),
        age(&namespace.metadata, now),
    ]
}

pub(crate) fn node(node: &Node, now: Timestamp) -> Vec<Value> {
    let status = node.status.clone().unwrap_or_default();
    let mut states = Vec::new();
    if let Some(ready) = status
        .conditions
        .iter()
        .flatten()
        .find(|condition| condition.type_ == "Ready")
    {
        states.push(if ready.status == "True" {
            "Ready"
        } else {
            "NotReady"
        });
    } else {
        states.push("Unknown");
    }
    if node
        .spec
        .as_ref()
        .and_then(|spec| spec.unschedulable)
        .unwrap_or(false)
    {
        states.push("SchedulingDisabled");
    }
    let mut roles: Vec<&str> = node
        .metadata
        .labels
        .iter()
        .flatten()
        .filter_map(
            |(key, value)| match key.strip_prefix("node-role.kubernetes.io/") {
                Some(role) if !role.is_empty() => Some(role),
                _ if key == "kubernetes.io/role" && !value.is_empty() => Some(value.as_str()),
                _ => None,
            },
        )
        .collect();
    roles.sort_unstable();
    roles.dedup();
    let roles = if roles.is_empty() {
        "<none>".to_owned()
    } else {
        roles.join(",")
    };
    let info = status.node_info.clone();
    let or_unknown = |text: Option<String>| {
        text.filter(|text| !text.is_empty())
            .unwrap_or_else(|| "<unknown>".to_owned())
    };
    let address = |wanted: &str| {
        status
            .addresses
            .iter()
            .flatten()
            .find(|address| address.type_ == wanted)
            .map_or_else(|| "<none>".to_owned(), |address| address.address.clone())
    };
    vec![
        name(&node.metadata),
        Value::from(states.join(",")),
        Value::from(roles),
        age(&node.metadata, now),
        Value::from(
            info.as_ref()
                .map(|info| info.kubelet_version.clone())
                .unwrap_or_default(),
        ),
        Value::from(address("InternalIP")),
        Value::from(address("ExternalIP")),
        Value::from(or_unknown(info.as_ref().map(|info| info.os_image.clone()))),
        Value::from(or_unknown(
            info.as_ref().map(|info| info.kernel_version.clone()),
        )),
        Value::from(or_unknown(
            info.as_ref()
                .map(|info| info.container_runtime_version.clone()),
        )),
    ]
}

/// `printPod`: READY counts ready containers (and started sidecars), STATUS is the most
/// telling reason among the pod's and its containers' states.
pub(crate) fn pod(pod: &Pod, now: Timestamp) -> Vec<Value> {
    let spec = pod.spec.clone().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let init_containers = spec.init_containers.clone().unwrap_or_default();
    let restartable = |name: &str| {
        init_containers.iter().any(|container| {
            container.name == name && container.restart_policy.as_deref() == Some("Always")
        })
    };
    let total = spec.containers.len()
        + init_containers
            .iter()
            .filter(|container| container.restart_policy.as_deref() == Some("Always"))
            .count();
    let conditions = status.conditions.clone().unwrap_or_default();
    let condition_true = |type_: &str| {
        conditions
            .iter()
            .any(|condition| condition.type_ == type_ && condition.status == "True")
    };

    let phase = status.phase.clone().unwrap_or_default();
    let mut reason = status
        .reason
        .clone()
        .filter(|reason| !reason.is_empty())
        .unwrap_or_else(|| phase.clone());
    if conditions.iter().any(|condition| {
        condition.type_ == "PodScheduled" && condition.reason.as_deref() == Some("SchedulingGated")
    }) {
        reason = "SchedulingGated".to_owned();
    }

    let finished_at = |state: Option<&k8s_openapi::api::core::v1::ContainerState>| {
        state
            .and_then(|state| state.terminated.as_ref())
            .and_then(|terminated| terminated.finished_at.as_ref())
            .map(|time| time.0)
    };
    let mut restarts: i64 = 0;
    let mut restartable_restarts: i64 = 0;
    let mut ready: usize = 0;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_restartable_restart: Option<Timestamp> = None;
    let mut initializing = false;
    for (index, container) in status.init_container_statuses.iter().flatten().enumerate() {
        restarts += i64::from(container.restart_count);
        let finished = finished_at(container.last_state.as_ref());
        last_restart = last_restart.max(finished);
        let sidecar = restartable(&container.name);
        if sidecar {
            restartable_restarts += i64::from(container.restart_count);
            last_restartable_restart = last_restartable_restart.max(finished);
        }
        let state = container.state.clone().unwrap_or_default();
        let waiting_reason = state
            .waiting
            .as_ref()
            .and_then(|waiting| waiting.reason.clone())
            .unwrap_or_default();
        match &state.terminated {
            Some(terminated) if terminated.exit_code == 0 => continue,
            _ if sidecar && container.started == Some(true) => {
                if container.ready {
                    ready += 1;
                }
                continue;
            }
            Some(terminated) => {
                reason = match (
                    terminated
                        .reason
                        .as_deref()
                        .filter(|reason| !reason.is_empty()),
                    terminated.signal,
                ) {
                    (Some(why), _) => format!("Init:{why}"),
                    (None, Some(signal)) if signal != 0 => format!("Init:Signal:{signal}"),
                    (None, _) => format!("Init:ExitCode:{}", terminated.exit_code),
                };
            }
            None if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" => {
                reason = format!("Init:{waiting_reason}");
            }
            None => reason = format!("Init:{index}/{}", init_containers.len()),
        }
        initializing = true;
        break;
    }

    if !initializing || condition_true("Initialized") {
        restarts = restartable_restarts;
        last_restart = last_restartable_restart;
        let mut has_running = false;
        for container in status.container_statuses.iter().flatten().rev() {
            restarts += i64::from(container.restart_count);
            last_restart = last_restart.max(finished_at(container.last_state.as_ref()));
            let state = container.state.clone().unwrap_or_default();
            let waiting_reason = state
                .waiting
                .as_ref()
                .and_then(|waiting| waiting.reason.clone())
                .filter(|reason| !reason.is_empty());
            if let Some(waiting_reason) = waiting_reason {
                reason = waiting_reason;
            } else if let Some(terminated) = &state.terminated {
                reason = match (
                    terminated
                        .reason
                        .as_deref()
                        .filter(|reason| !reason.is_empty()),
                    terminated.signal,
                ) {
                    (Some(why), _) => why.to_owned(),
                    (None, Some(signal)) if signal != 0 => format!("Signal:{signal}"),
                    (None, _) => format!("ExitCode:{}", terminated.exit_code),
                };
            } else if container.ready && state.running.is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if condition_true("Ready") {
                "Running".to_owned()
            } else {
                "NotReady".to_owned()
            };
        }
    }

    let terminal = matches!(phase.as_str(), "Failed" | "Succeeded");
    if pod.metadata.deletion_timestamp.is_some() && status.reason.as_deref() == Some("NodeLost") {
        reason = "Unknown".to_owned();
    } else if pod.metadata.deletion_timestamp.is_some() && !terminal {
        reason = "Terminating".to_owned();
    }

    let restarts = match last_restart {
        Some(last) if restarts != 0 => format!(
            "{restarts} ({} ago)",
            human_duration(now.duration_since(last).as_secs())
        ),
        _ => restarts.to_string(),
    };
    let none_if_empty = |text: Option<String>| {
        text.filter(|text| !text.is_empty())
            .unwrap_or_else(|| "<none>".to_owned())
    };
    let pod_ip = status
        .pod_ips
        .as_ref()
        .and_then(|ips| ips.first())
        .map(|ip| ip.ip.clone());
    let readiness_gates = match spec.readiness_gates.as_deref() {
        Some(gates) if !gates.is_empty() => {
            let passed = gates
                .iter()
                .filter(|gate| {
                    conditions
                        .iter()
                        .find(|condition| condition.type_ == gate.condition_type)
                        .is_some_and(|condition| condition.status == "True")
                })
                .count();
            format!("{passed}/{}", gates.len())
        }
        _ => "<none>".to_owned(),
    };
    vec![
        name(&pod.metadata),
        Value::from(format!("{ready}/{total}")),
        Value::from(reason),
        Value::from(restarts),
        age(&pod.metadata, now),
        Value::from(none_if_empty(pod_ip)),
        Value::from(none_if_empty(spec.node_name)),
        Value::from(none_if_empty(status.nominated_node_name)),
        Value::from(readiness_gates),
    ]
}

/// The row conditions `printPod` sets on finished pods, which kubectl reads to tell them apart.
pub(crate) fn pod_row_conditions(pod: &Pod) -> Option<Bytes> {
    let (reason, message) = match pod
        .status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
    {
        Some("Succeeded") => ("Succeeded", "The pod has completed successfully."),
        Some("Failed") => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(to_json(
        &json!([{ "type": "Completed", "status": "True", "reason": reason, "message": message }]),
    ))
}

pub(crate) fn secret(secret: &Secret, now: Timestamp) -> Vec<Value> {
    vec![
        name(&secret.metadata),
        Value::from(secret.type_.clone().unwrap_or_default()),
        Value::from(secret.data.as_ref().map_or(0, |data| data.len())),
        age(&secret.metadata, now),
    ]
}

pub(crate) fn replication_controller(
    controller: &ReplicationController,
    now: Timestamp,
) -> Vec<Value> {
    let spec = controller.spec.clone().unwrap_or_default();
    let status = controller.status.clone().unwrap_or_default();
    let containers = spec
        .template
        .and_then(|template| template.spec)
        .map(|spec| spec.containers)
        .unwrap_or_default();
    let selector = LabelSelector::from_map(&spec.selector.unwrap_or_default()).to_string();
    let [names, images] = container_cells(&containers);
    vec![
        name(&controller.metadata),
        Value::from(spec.replicas.unwrap_or(0)),
        Value::from(status.replicas),
        Value::from(status.ready_replicas.unwrap_or(0)),
        age(&controller.metadata, now),
        names,
        images,
        Value::from(if selector.is_empty() {
            "<none>".to_owned()
        } else {
            selector
        }),
    ]
}

pub(crate) fn deployment(deployment: &Deployment, now: Timestamp) -> Vec<Value> {
    let spec = deployment.spec.clone().unwrap_or_default();
    let status = deployment.status.clone().unwrap_or_default();
    let containers = spec
        .template
        .spec
        .map(|spec| spec.containers)
        .unwrap_or_default();
    let [names, images] = container_cells(&containers);
    let selector = LabelSelector::from_api(&spec.selector)
        .map_or_else(|_| "<invalid>".to_owned(), |selector| selector.to_string());
    vec![
        name(&deployment.metadata),
        Value::from(format!(
            "{}/{}",
            status.ready_replicas.unwrap_or(0),
            spec.replicas.unwrap_or(0)
        )),
        Value::from(status.updated_replicas.unwrap_or(0)),
        Value::from(status.available_replicas.unwrap_or(0)),
        age(&deployment.metadata, now),
        names,
        images,
        Value::from(selector),
    ]
}

pub(crate) fn replica_set(replica_set: &ReplicaSet, now: Timestamp) -> Vec<Value> {
    let spec = replica_set.spec.clone().unwrap_or_default();
    let status = replica_set.status.clone().unwrap_or_default();
    let containers = spec
        .template
        .and_then(|template| template.spec)
        .map(|spec| spec.containers)
        .unwrap_or_default();
    let [names, images] = container_cells(&containers);
    vec![
        name(&replica_set.metadata),
        Value::from(spec.replicas.unwrap_or(0)),
        Value::from(status.replicas),
        Value::from(status.ready_replicas.unwrap_or(0)),
        age(&replica_set.metadata, now),
        names,
        images,
        Value::from(format_label_selector(&spec.selector)),
    ]
}

pub(crate) fn stateful_set(stateful_set: &StatefulSet, now: Timestamp) -> Vec<Value> {
    let spec = stateful_set.spec.clone().unwrap_or_default();
    let status = stateful_set.status.clone().unwrap_or_default();
    let containers = spec
        .template
        .spec
        .map(|spec| spec.containers)
        .unwrap_or_default();
    let [names, images] = container_cells(&containers);
    vec![
        name(&stateful_set.metadata),
        Value::from(format!(
            "{}/{}",
            status.ready_replicas.unwrap_or(0),
            spec.replicas.unwrap_or(0)
        )),
        age(&stateful_set.metadata, now),
        names,
        images,
    ]
}

pub(crate) fn pod_disruption_budget(budget: &PodDisruptionBudget, now: Timestamp) -> Vec<Value> {
    let spec = budget.spec.clone().unwrap_or_default();
    let allowed = budget
        .status
        .as_ref()
        .map_or(0, |status| status.disruptions_allowed);
    vec![
        name(&budget.metadata),
        Value::from(int_or_string(spec.min_available.as_ref())),
        Value::from(int_or_string(spec.max_unavailable.as_ref())),
        Value::from(allowed),
        age(&budget.metadata, now),
    ]
}

#[cfg(test)]
mod tests {
    use super::human_duration;

    #[test]
    fn human_durations_match_apimachinery() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (5 * 3600 + 30 * 60, "5h30m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (48 * 3600, "2d"),
            (3 * 86400 + 5 * 3600, "3d5h"),
            (30 * 86400, "30d"),
            (800 * 86400, "2y70d"),
            (3000 * 86400, "8y"),
        ];
        for (seconds, expected) in cases {
            assert_eq!(human_duration(seconds), expected, "{seconds}s");
        }
    }
}
