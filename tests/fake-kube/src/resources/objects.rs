//! Fixture objects: parsing manifests into k8s-openapi types, filling in what the API server
//! would, and storing each object with every byte string a response needs.

use std::collections::BTreeMap;

use bytes::Bytes;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v1::{Scale, ScaleSpec, ScaleStatus};
use k8s_openapi::api::core::v1::{
    Namespace, NamespaceSpec, NamespaceStatus, Node, Pod, PodStatus, ReplicationController, Secret,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::{ByteString, Metadata, Resource};
use serde::Serialize;
use serde_json::Value;

use super::FixtureError;
use super::discovery::{Kind, ResourceType};
use super::paging;
use super::request::ListQuery;
use super::selector::{FieldSelector, LabelSelector};
use super::status::Failure;
use super::table;
#[cfg(doc)]
use super::{DEFAULT_CREATION_TIME, REFERENCE_TIME};

/// Serialises a value the fake server itself builds.
///
/// Every type passed here (k8s-openapi objects and this crate's response structs) has string
/// map keys and infallible `Serialize` impls, which are the only ways `serde_json` can fail;
/// so a failure is a bug in this crate, and panicking (in a test support crate) says so.
pub(crate) fn to_json<T: Serialize + ?Sized>(value: &T) -> Bytes {
    #[allow(clippy::expect_used)]
    Bytes::from(
        serde_json::to_vec(value).expect("serialising a k8s-openapi or response type cannot fail"),
    )
}

/// A typed fixture object.
#[derive(Clone, Debug)]
pub(crate) enum Object {
    Namespace(Namespace),
    Node(Node),
    Pod(Pod),
    Secret(Secret),
    ReplicationController(ReplicationController),
    Deployment(Deployment),
    ReplicaSet(ReplicaSet),
    StatefulSet(StatefulSet),
    PodDisruptionBudget(PodDisruptionBudget),
}

impl Object {
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Self::Namespace(_) => Kind::Namespace,
            Self::Node(_) => Kind::Node,
            Self::Pod(_) => Kind::Pod,
            Self::Secret(_) => Kind::Secret,
            Self::ReplicationController(_) => Kind::ReplicationController,
            Self::Deployment(_) => Kind::Deployment,
            Self::ReplicaSet(_) => Kind::ReplicaSet,
            Self::StatefulSet(_) => Kind::StatefulSet,
            Self::PodDisruptionBudget(_) => Kind::PodDisruptionBudget,
        }
    }

    fn name(&self) -> Option<&str> {
        match self {
            Self::Namespace(object) => object.metadata.name.as_deref(),
            Self::Node(object) => object.metadata.name.as_deref(),
            Self::Pod(object) => object.metadata.name.as_deref(),
            Self::Secret(object) => object.metadata.name.as_deref(),
            Self::ReplicationController(object) => object.metadata.name.as_deref(),
            Self::Deployment(object) => object.metadata.name.as_deref(),
            Self::ReplicaSet(object) => object.metadata.name.as_deref(),
            Self::StatefulSet(object) => object.metadata.name.as_deref(),
            Self::PodDisruptionBudget(object) => object.metadata.name.as_deref(),
        }
    }
}

/// An object read from a manifest, with where it came from for error messages.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub(crate) origin: String,
    pub(crate) document: usize,
    pub(crate) object: Object,
}

/// Parses a multi-document YAML text into typed objects.
pub(crate) fn parse(text: &str, origin: &str) -> Result<Vec<Parsed>, FixtureError> {
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|source| FixtureError::Yaml {
            origin: origin.to_owned(),
            source: Box::new(source),
        })?;
    let mut parsed = Vec::new();
    for (index, document) in documents.into_iter().enumerate() {
        let document_number = index + 1;
        let not_an_object = |problem: &str| FixtureError::NotAnObject {
            origin: origin.to_owned(),
            document: document_number,
            problem: problem.to_owned(),
        };
        let kind = document
            .get("kind")
            .and_then(Value::as_str)
            .ok_or_else(|| not_an_object("no kind"))?;
        // `kubectl get -o yaml` writes a `List` (and clients may write `PodList` etc.).
        if kind == "List" || kind.ends_with("List") {
            let Some(Value::Array(items)) = document.get("items") else {
                return Err(not_an_object("a List without items"));
            };
            for item in items {
                parsed.push(typed(item.clone(), origin, document_number)?);
            }
        } else {
            parsed.push(typed(document, origin, document_number)?);
        }
    }
    Ok(parsed)
}

/// Converts one manifest into its k8s-openapi type, which checks it against the schema.
fn typed(document: Value, origin: &str, document_number: usize) -> Result<Parsed, FixtureError> {
    let field = |name: &str| {
        document
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    if api_version.is_empty() || kind.is_empty() {
        return Err(FixtureError::NotAnObject {
            origin: origin.to_owned(),
            document: document_number,
            problem: "no apiVersion or kind".to_owned(),
        });
    }
    fn read<T: Resource + serde::de::DeserializeOwned>(
        document: Value,
    ) -> Result<T, serde_json::Error> {
        serde_json::from_value(document)
    }
    let matches = |api: &str, name: &str| api_version == api && kind == name;
    let object = if matches(Namespace::API_VERSION, Namespace::KIND) {
        read(document).map(Object::Namespace)
    } else if matches(Node::API_VERSION, Node::KIND) {
        read(document).map(Object::Node)
    } else if matches(Pod::API_VERSION, Pod::KIND) {
        read(document).map(Object::Pod)
    } else if matches(Secret::API_VERSION, Secret::KIND) {
        read(document).map(Object::Secret)
    } else if matches(
        ReplicationController::API_VERSION,
        ReplicationController::KIND,
    ) {
        read(document).map(Object::ReplicationController)
    } else if matches(Deployment::API_VERSION, Deployment::KIND) {
        read(document).map(Object::Deployment)
    } else if matches(ReplicaSet::API_VERSION, ReplicaSet::KIND) {
        read(document).map(Object::ReplicaSet)
    } else if matches(StatefulSet::API_VERSION, StatefulSet::KIND) {
        read(document).map(Object::StatefulSet)
    } else if matches(PodDisruptionBudget::API_VERSION, PodDisruptionBudget::KIND) {
        read(document).map(Object::PodDisruptionBudget)
    } else {
        return Err(FixtureError::UnsupportedKind {
            origin: origin.to_owned(),
            document: document_number,
            api_version,
            kind,
        });
    };
    let object = object.map_err(|source| FixtureError::InvalidObject {
        origin: origin.to_owned(),
        document: document_number,
        kind: kind.clone(),
        source,
    })?;
    if object.name().is_none_or(str::is_empty) {
        return Err(FixtureError::MissingName {
            origin: origin.to_owned(),
            document: document_number,
            kind,
        });
    }
    Ok(Parsed {
        origin: origin.to_owned(),
        document: document_number,
        object,
    })
}

/// A namespace as `kubectl create namespace` leaves it.
pub(crate) fn active_namespace(name: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// An `Opaque` secret holding `data`.
pub(crate) fn opaque_secret(
    namespace: &str,
    name: &str,
    data: BTreeMap<String, Vec<u8>>,
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.into_iter()
                .map(|(key, value)| (key, ByteString(value)))
                .collect(),
        ),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// One served object, with everything a response needs already serialised.
#[derive(Clone, Debug)]
pub(crate) struct Stored {
    /// `namespace/name`, or `name` for a cluster-scoped object: the etcd key below the
    /// resource prefix, which orders lists and continue tokens.
    pub(crate) key: String,
    pub(crate) namespace: Option<String>,
    /// Set on namespaces created because objects live in them, which a manifest may replace.
    pub(crate) implied: bool,
    pub(crate) resource_version: String,
    labels: BTreeMap<String, String>,
    /// The values of the fields a field selector may name (see [`selectable_fields`]).
    fields: Vec<(&'static str, String)>,
    /// The object, with `apiVersion` and `kind`, as a get returns it.
    pub(crate) json: Bytes,
    /// The object without `apiVersion` and `kind`, as list items come.
    item_json: Bytes,
    /// `PartialObjectMetadata` of the object.
    pub(crate) partial_metadata: Bytes,
    /// `PartialObjectMetadata` without `managedFields`, as in `Table` rows.
    pub(crate) row_metadata: Bytes,
    /// The `Table` cells, a JSON array.
    pub(crate) cells: Bytes,
    /// `Table` row conditions, where the printer sets them (finished pods).
    pub(crate) row_conditions: Option<Bytes>,
    /// The `autoscaling/v1` `Scale`, for workloads.
    pub(crate) scale: Option<Bytes>,
    /// The name and creation time, for the generic table of the scale subresource.
    pub(crate) name: String,
    pub(crate) creation_timestamp: String,
}

/// The fields each kind's field selectors may name, beyond `metadata.name` and
/// `metadata.namespace`, as the real server's field label conversions accept them.
fn selectable_fields(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Namespace => &["status.phase"],
        Kind::Node => &["spec.unschedulable"],
        Kind::Pod => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        Kind::Secret => &["type"],
        Kind::ReplicationController | Kind::ReplicaSet => &["status.replicas"],
        Kind::Deployment | Kind::StatefulSet | Kind::PodDisruptionBudget => &[],
    }
}

/// Fills in what the API server would and serialises everything a response needs.
pub(crate) fn store(object: Object, resource_version: u64) -> Stored {
    let now = reference_time();
    match object {
        Object::Namespace(mut namespace) => {
            // Every namespace carries its name as a label, set by the API server (since 1.21)
            // whatever the manifest says, so that selectors can pick namespaces by name.
            let name = namespace.metadata.name.clone().unwrap_or_default();
            namespace
                .metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert("kubernetes.io/metadata.name".to_owned(), name);
            let status = namespace
                .status
                .get_or_insert_with(NamespaceStatus::default);
            status.phase.get_or_insert_with(|| "Active".to_owned());
            namespace
                .spec
                .get_or_insert_with(NamespaceSpec::default)
                .finalizers
                .get_or_insert_with(|| vec!["kubernetes".to_owned()]);
            let phase = namespace
                .status
                .as_ref()
                .and_then(|status| status.phase.clone())
                .unwrap_or_default();
            finish(
                namespace,
                resource_version,
                vec![("status.phase", phase)],
                |namespace| table::namespace(namespace, now),
                None,
            )
        }
        Object::Node(node) => {
            let unschedulable = node
                .spec
                .as_ref()
                .and_then(|spec| spec.unschedulable)
                .unwrap_or(false);
            finish(
                node,
                resource_version,
                vec![("spec.unschedulable", unschedulable.to_string())],
                |node| table::node(node, now),
                None,
            )
        }
        Object::Pod(mut pod) => {
            if let Some(spec) = pod.spec.as_mut() {
                spec.restart_policy
                    .get_or_insert_with(|| "Always".to_owned());
                spec.scheduler_name
                    .get_or_insert_with(|| "default-scheduler".to_owned());
                spec.dns_policy
                    .get_or_insert_with(|| "ClusterFirst".to_owned());
            }
            pod.status
                .get_or_insert_with(PodStatus::default)
                .phase
                .get_or_insert_with(|| "Pending".to_owned());
            let spec = pod.spec.clone().unwrap_or_default();
            let status = pod.status.clone().unwrap_or_default();
            let fields = vec![
                ("spec.nodeName", spec.node_name.unwrap_or_default()),
                (
                    "spec.restartPolicy",
                    spec.restart_policy.unwrap_or_default(),
                ),
                (
                    "spec.schedulerName",
                    spec.scheduler_name.unwrap_or_default(),
                ),
                (
                    "spec.serviceAccountName",
                    spec.service_account_name.unwrap_or_default(),
                ),
                (
                    "spec.hostNetwork",
                    spec.host_network.unwrap_or(false).to_string(),
                ),
                ("status.phase", status.phase.unwrap_or_default()),
                ("status.podIP", status.pod_ip.unwrap_or_default()),
                (
                    "status.nominatedNodeName",
                    status.nominated_node_name.unwrap_or_default(),
                ),
            ];
            let conditions = table::pod_row_conditions(&pod);
            let mut stored = finish(
                pod,
                resource_version,
                fields,
                |pod| table::pod(pod, now),
                None,
            );
            stored.row_conditions = conditions;
            stored
        }
        Object::Secret(mut secret) => {
            // The API server folds the write-only stringData into data.
            if let Some(strings) = secret.string_data.take() {
                let data = secret.data.get_or_insert_with(BTreeMap::new);
                for (key, value) in strings {
                    data.insert(key, ByteString(value.into_bytes()));
                }
            }
            secret.type_.get_or_insert_with(|| "Opaque".to_owned());
            let secret_type = secret.type_.clone().unwrap_or_default();
            finish(
                secret,
                resource_version,
                vec![("type", secret_type)],
                |secret| table::secret(secret, now),
                None,
            )
        }
        Object::ReplicationController(mut controller) => {
            let spec = controller.spec.get_or_insert_with(Default::default);
            let desired = *spec.replicas.get_or_insert(1);
            let selector =
                LabelSelector::from_map(&spec.selector.clone().unwrap_or_default()).to_string();
            let current = controller
                .status
                .as_ref()
                .map_or(0, |status| status.replicas);
            let fields = vec![("status.replicas", current.to_string())];
            finish(
                controller,
                resource_version,
                fields,
                |controller| table::replication_controller(controller, now),
                Some((desired, current, selector)),
            )
        }
        Object::Deployment(mut deployment) => {
            let spec = deployment.spec.get_or_insert_with(Default::default);
            let desired = *spec.replicas.get_or_insert(1);
            let selector = selector_string(&spec.selector);
            let current = deployment
                .status
                .as_ref()
                .and_then(|status| status.replicas)
                .unwrap_or(0);
            finish(
                deployment,
                resource_version,
                Vec::new(),
                |deployment| table::deployment(deployment, now),
                Some((desired, current, selector)),
            )
        }
        Object::ReplicaSet(mut replica_set) => {
            let spec = replica_set.spec.get_or_insert_with(Default::default);
            let desired = *spec.replicas.get_or_insert(1);
            let selector = selector_string(&spec.selector);
            let current = replica_set
                .status
                .as_ref()
                .map_or(0, |status| status.replicas);
            let fields = vec![("status.replicas", current.to_string())];
            finish(
                replica_set,
                resource_version,
                fields,
                |replica_set| table::replica_set(replica_set, now),
                Some((desired, current, selector)),
            )
        }
        Object::StatefulSet(mut stateful_set) => {
            let spec = stateful_set.spec.get_or_insert_with(Default::default);
            let desired = *spec.replicas.get_or_insert(1);
            let selector = selector_string(&spec.selector);
            let current = stateful_set
                .status
                .as_ref()
                .map_or(0, |status| status.replicas);
            finish(
                stateful_set,
                resource_version,
                Vec::new(),
                |stateful_set| table::stateful_set(stateful_set, now),
                Some((desired, current, selector)),
            )
        }
        Object::PodDisruptionBudget(budget) => finish(
            budget,
            resource_version,
            Vec::new(),
            |budget| table::pod_disruption_budget(budget, now),
            None,
        ),
    }
}

/// `Scale.status.selector` of a `spec.selector`; an invalid selector reads as none.
fn selector_string(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> String {
    LabelSelector::from_api(selector)
        .map(|selector| selector.to_string())
        .unwrap_or_default()
}

/// [`REFERENCE_TIME`], the instant ages are measured from.
pub(crate) fn reference_time() -> Timestamp {
    Timestamp::constant(1_748_736_000, 0)
}

/// [`DEFAULT_CREATION_TIME`].
fn default_creation_time() -> Timestamp {
    Timestamp::constant(1_746_144_000, 0)
}

/// The catalogue entry of each k8s-openapi type served.
trait Served: Resource + Metadata<Ty = ObjectMeta> + Serialize {
    const SERVED_AS: Kind;
}

macro_rules! served {
    ($($type:ty => $kind:ident),* $(,)?) => {
        $(impl Served for $type {
            const SERVED_AS: Kind = Kind::$kind;
        })*
    };
}

served! {
    Namespace => Namespace,
    Node => Node,
    Pod => Pod,
    Secret => Secret,
    ReplicationController => ReplicationController,
    Deployment => Deployment,
    ReplicaSet => ReplicaSet,
    StatefulSet => StatefulSet,
    PodDisruptionBudget => PodDisruptionBudget,
}

/// A deterministic UUID-shaped uid, so that fixtures (and ownerReferences written with an
/// empty uid) are stable from run to run.
fn uid_for(kind: &str, namespace: Option<&str>, name: &str) -> String {
    fn fnv1a(seed: u64, parts: &[&str]) -> u64 {
        let mut hash = seed;
        for part in parts {
            for byte in part.bytes().chain([0]) {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
        }
        hash
    }
    let parts = [kind, namespace.unwrap_or_default(), name];
    let high = fnv1a(0xcbf2_9ce4_8422_2325, &parts);
    let low = fnv1a(0x8422_2325_cbf2_9ce4, &parts);
    let hex = format!("{high:016x}{low:016x}");
    format!(
        "{}-{}-4{}-a{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}

/// The server-set metadata every stored object has, and the bytes for every response form.
fn finish<T>(
    mut object: T,
    resource_version: u64,
    mut fields: Vec<(&'static str, String)>,
    cells: impl FnOnce(&T) -> Vec<Value>,
    scale: Option<(i32, i32, String)>,
) -> Stored
where
    T: Served,
{
    let resource = T::SERVED_AS.resource_type();
    let namespaced = resource.namespaced;
    let metadata = object.metadata_mut();
    if namespaced {
        metadata
            .namespace
            .get_or_insert_with(|| "default".to_owned());
    } else {
        metadata.namespace = None;
    }
    let name = metadata.name.clone().unwrap_or_default();
    let namespace = metadata.namespace.clone();
    metadata
        .uid
        .get_or_insert_with(|| uid_for(T::KIND, namespace.as_deref(), &name));
    let resource_version = metadata
        .resource_version
        .get_or_insert_with(|| resource_version.to_string())
        .clone();
    let created = metadata
        .creation_timestamp
        .get_or_insert_with(|| Time(default_creation_time()));
    let creation_timestamp = to_json(created);
    if matches!(
        resource.kind,
        Kind::ReplicationController
            | Kind::Deployment
            | Kind::ReplicaSet
            | Kind::StatefulSet
            | Kind::PodDisruptionBudget
    ) {
        metadata.generation.get_or_insert(1);
    }
    for owner in metadata.owner_references.iter_mut().flatten() {
        if owner.uid.is_empty() {
            owner.uid = uid_for(&owner.kind, namespace.as_deref(), &owner.name);
        }
    }
    let labels = metadata.labels.clone().unwrap_or_default();
    let metadata = object.metadata().clone();

    fields.push(("metadata.name", name.clone()));
    if let Some(namespace) = &namespace {
        fields.push(("metadata.namespace", namespace.clone()));
    }
    let cells = to_json(&cells(&object));
    let json = to_json(&object);
    let item_json = match serde_json::to_value(&object) {
        Ok(Value::Object(mut map)) => {
            map.remove("apiVersion");
            map.remove("kind");
            to_json(&map)
        }
        _ => json.clone(),
    };
    let partial_metadata = to_json(&PartialObjectMetadata::new(&metadata));
    let row_metadata = if metadata.managed_fields.is_some() {
        to_json(&PartialObjectMetadata::new(&ObjectMeta {
            managed_fields: None,
            ..metadata.clone()
        }))
    } else {
        partial_metadata.clone()
    };
    let scale = scale.map(|(desired, current, selector)| {
        to_json(&Scale {
            metadata: ObjectMeta {
                name: metadata.name.clone(),
                namespace: metadata.namespace.clone(),
                uid: metadata.uid.clone(),
                resource_version: metadata.resource_version.clone(),
                creation_timestamp: metadata.creation_timestamp.clone(),
                ..ObjectMeta::default()
            },
            spec: Some(ScaleSpec {
                replicas: Some(desired),
            }),
            status: Some(ScaleStatus {
                replicas: current,
                selector: (!selector.is_empty()).then_some(selector),
            }),
        })
    });
    Stored {
        key: namespace
            .as_ref()
            .map_or_else(|| name.clone(), |namespace| format!("{namespace}/{name}")),
        namespace,
        implied: false,
        resource_version,
        labels,
        fields,
        json,
        item_json,
        partial_metadata,
        row_metadata,
        cells,
        row_conditions: None,
        scale,
        name,
        // The JSON of a Time is a quoted RFC 3339 string; the table wants it unquoted.
        creation_timestamp: String::from_utf8_lossy(&creation_timestamp)
            .trim_matches('"')
            .to_owned(),
    }
}

/// `meta.k8s.io/v1` `PartialObjectMetadata`.
#[derive(Serialize)]
struct PartialObjectMetadata<'a> {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    metadata: &'a ObjectMeta,
}

impl<'a> PartialObjectMetadata<'a> {
    fn new(metadata: &'a ObjectMeta) -> Self {
        Self {
            kind: "PartialObjectMetadata",
            api_version: "meta.k8s.io/v1",
            metadata,
        }
    }
}

/// The objects of one kind, sorted by key as etcd keeps them.
#[derive(Debug, Default)]
pub(crate) struct Store {
    objects: Vec<Stored>,
}

/// One page of a list.
#[derive(Debug)]
pub(crate) struct Page<'a> {
    pub(crate) items: Vec<&'a Stored>,
    pub(crate) resource_version: u64,
    pub(crate) continue_token: Option<String>,
    /// How many items the following pages hold; reported, as by the real server, only for
    /// lists without selectors.
    pub(crate) remaining_item_count: Option<usize>,
}

impl Store {
    pub(crate) fn len(&self) -> usize {
        self.objects.len()
    }

    /// The object `name` (in `namespace`, for a namespaced kind).
    pub(crate) fn get(&self, namespace: Option<&str>, name: &str) -> Option<&Stored> {
        // Compares without building the key, since gets are frequent.
        let wanted = || {
            namespace
                .into_iter()
                .flat_map(|namespace| namespace.bytes().chain([b'/']))
                .chain(name.bytes())
        };
        self.objects
            .binary_search_by(|stored| stored.key.bytes().cmp(wanted()))
            .ok()
            .map(|index| &self.objects[index])
    }

    /// Inserts or replaces `stored`. With `refuse`, keeps an existing declared object and
    /// returns its key instead.
    pub(crate) fn insert(&mut self, stored: Stored, refuse: bool) -> Option<String> {
        match self
            .objects
            .binary_search_by(|existing| existing.key.cmp(&stored.key))
        {
            Ok(index) if refuse && !self.objects[index].implied => Some(stored.key),
            Ok(index) => {
                self.objects[index] = stored;
                None
            }
            Err(index) => {
                self.objects.insert(index, stored);
                None
            }
        }
    }

    /// One page of the objects (in `namespace`, if given) that match the query's selectors.
    pub(crate) fn list(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        query: &ListQuery<'_>,
        resource_version: u64,
    ) -> Result<Page<'_>, Failure> {
        let labels = LabelSelector::parse(&query.label_selector).map_err(Failure::bad_request)?;
        let fields = FieldSelector::parse(&query.field_selector).map_err(Failure::bad_request)?;
        let supported = selectable_fields(resource.kind);
        for field in fields.fields() {
            let scoped = matches!(field, "metadata.name")
                || (resource.namespaced && field == "metadata.namespace");
            if !scoped && !supported.contains(&field) {
                return Err(Failure::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
        }
        let start = match &query.continue_token {
            Some(token) => {
                if query
                    .resource_version
                    .as_deref()
                    .is_some_and(|version| version != "0")
                {
                    return Err(Failure::bad_request(
                        "specifying resource version is not allowed when using continue",
                    ));
                }
                Some(paging::decode(token, resource_version)?)
            }
            None => None,
        };

        // The objects of one namespace are a contiguous run of keys `namespace/…`.
        let (scope, prefix_length): (&[Stored], usize) = match namespace {
            Some(namespace) => {
                let prefix = format!("{namespace}/");
                let begin = self
                    .objects
                    .partition_point(|stored| stored.key.as_str() < prefix.as_str());
                let length = self.objects[begin..]
                    .iter()
                    .take_while(|stored| stored.key.starts_with(&prefix))
                    .count();
                (&self.objects[begin..begin + length], prefix.len())
            }
            None => (&self.objects[..], 0),
        };
        fn relative(stored: &Stored, prefix_length: usize) -> &str {
            stored.key.get(prefix_length..).unwrap_or_default()
        }
        let begin = start.as_deref().map_or(0, |start| {
            scope.partition_point(|stored| relative(stored, prefix_length) < start)
        });
        let rest = &scope[begin..];
        let unfiltered = labels.is_empty() && fields.is_empty();
        let mut matching = rest
            .iter()
            .filter(|stored| labels.matches(&stored.labels) && fields.matches(&stored.fields));

        let Some(limit) = query.limit else {
            return Ok(Page {
                items: matching.collect(),
                resource_version,
                continue_token: None,
                remaining_item_count: None,
            });
        };
        let items: Vec<&Stored> = matching.by_ref().take(limit).collect();
        let (more, remaining_item_count) = if unfiltered {
            let remaining = rest.len() - items.len();
            (remaining > 0, (remaining > 0).then_some(remaining))
        } else {
            (matching.next().is_some(), None)
        };
        let continue_token = match items.last() {
            Some(last) if more => Some(paging::encode(
                resource_version,
                relative(last, prefix_length),
            )),
            _ => None,
        };
        Ok(Page {
            items,
            resource_version,
            continue_token,
            remaining_item_count,
        })
    }
}

/// `metadata` of a list.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListMeta<'a> {
    resource_version: String,
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    continue_token: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    remaining_item_count: Option<usize>,
}

/// The `metadata` of a page, serialised.
pub(crate) fn list_metadata(page: &Page<'_>) -> Bytes {
    to_json(&ListMeta {
        resource_version: page.resource_version.to_string(),
        continue_token: page.continue_token.as_deref(),
        remaining_item_count: page.remaining_item_count,
    })
}

/// Joins pre-serialised parts into `{"kind":…,"apiVersion":…,"metadata":…,"items":[…]}`.
fn assemble_list<'a>(
    kind: &str,
    api_version: &str,
    metadata: &[u8],
    items: impl Iterator<Item = &'a [u8]> + Clone,
) -> Bytes {
    let capacity = 96 + metadata.len() + items.clone().map(|item| item.len() + 1).sum::<usize>();
    let mut body = Vec::with_capacity(capacity);
    body.extend_from_slice(b"{\"kind\":\"");
    body.extend_from_slice(kind.as_bytes());
    body.extend_from_slice(b"\",\"apiVersion\":\"");
    body.extend_from_slice(api_version.as_bytes());
    body.extend_from_slice(b"\",\"metadata\":");
    body.extend_from_slice(metadata);
    body.extend_from_slice(b",\"items\":[");
    for (index, item) in items.enumerate() {
        if index > 0 {
            body.push(b',');
        }
        body.extend_from_slice(item);
    }
    body.extend_from_slice(b"]}");
    Bytes::from(body)
}

/// A page as the kind's list, e.g. `PodList`.
pub(crate) fn list(resource: &ResourceType, page: &Page<'_>) -> Bytes {
    let kind = format!("{}List", resource.kind_name);
    let items = page.items.iter().map(|stored| &stored.item_json[..]);
    assemble_list(&kind, &resource.api_version(), &list_metadata(page), items)
}

/// A page as a `PartialObjectMetadataList`.
pub(crate) fn partial_metadata_list(page: &Page<'_>) -> Bytes {
    let items = page.items.iter().map(|stored| &stored.partial_metadata[..]);
    assemble_list(
        "PartialObjectMetadataList",
        "meta.k8s.io/v1",
        &list_metadata(page),
        items,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_instants_match_their_documented_values() {
        assert_eq!(
            reference_time(),
            super::super::REFERENCE_TIME.parse::<Timestamp>().unwrap()
        );
        assert_eq!(
            default_creation_time(),
            super::super::DEFAULT_CREATION_TIME
                .parse::<Timestamp>()
                .unwrap()
        );
    }

    #[test]
    fn uids_are_stable_and_uuid_shaped() {
        let uid = uid_for("Pod", Some("shop"), "web-1");
        assert_eq!(uid, uid_for("Pod", Some("shop"), "web-1"));
        assert_ne!(uid, uid_for("Pod", Some("shop"), "web-2"));
        let lengths: Vec<usize> = uid.split('-').map(str::len).collect();
        assert_eq!(lengths, [8, 4, 4, 4, 12]);
    }
}
