//! The read-only Kubernetes API that the fake server answers with: fixtures in, HTTP-shaped
//! responses out.
//!
//! [`respond`] is a pure function of a [`Fixtures`] set and an authenticated [`ApiRequest`]: it
//! does no I/O and reads no clock, so the network side can call it from any task and tests can
//! call it with no socket. Everything that can be computed once (object JSON, table cells,
//! discovery documents) is computed when the fixtures are loaded, so that answering a request
//! is a lookup plus a few byte copies.
//!
//! What is served, with the shapes of a real v1.33 API server:
//!
//! - `/version`, `/readyz`, `/livez`, `/healthz`;
//! - discovery: `/api`, `/apis`, `/apis/{group}`, `/api/v1`, `/apis/{group}/{version}`, in the
//!   legacy form and in the aggregated `apidiscovery.k8s.io/v2` form kubectl asks for first;
//! - list (cluster-wide and per namespace) and get of namespaces, nodes, pods, secrets,
//!   replication controllers, deployments, replica sets, stateful sets and pod disruption
//!   budgets, with `limit`/`continue` paging, label selectors (set-based included) and field
//!   selectors;
//! - the `status` subresource of every kind that has one and the `scale` subresource
//!   (`autoscaling/v1` `Scale`) of every workload kind;
//! - the `meta.k8s.io/v1` `Table` form (the columns `kubectl get` shows) and the
//!   `PartialObjectMetadata` forms.
//!
//! Fixtures are plain Kubernetes manifests; see [`Fixtures::load`].

mod discovery;
mod objects;
mod paging;
mod request;
mod selector;
mod status;
mod table;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use self::discovery::{GroupVersion, Kind, ResourceType};
use self::objects::{Object, Store, Stored};
use self::request::{ListQuery, Representation};
use self::status::Failure;

pub use self::status::status_body;

/// One fake cluster's objects, ready to be served.
///
/// Build it with [`Fixtures::load`], [`Fixtures::from_yaml`] or [`Fixtures::empty`], adjust it
/// with [`Fixtures::insert_secret`], then share it read-only (typically in an `Arc`): nothing in
/// it changes while it is served, and every response is assembled from bytes prepared here.
///
/// Even an empty set has the namespaces `default` and `kube-system`, as every real cluster
/// does, and a namespace is created (status `Active`) for every namespace an object names but
/// no manifest declares, because a real API server refuses objects in a missing namespace.
pub struct Fixtures {
    /// One store per kind, indexed by [`Kind::index`].
    stores: [Store; Kind::COUNT],
    /// The cluster's current resource version: the highest one given to any object. Lists
    /// report it, and continue tokens carry it.
    resource_version: u64,
}

impl fmt::Debug for Fixtures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut counts = f.debug_struct("Fixtures");
        for kind in Kind::ALL {
            counts.field(kind.resource_type().plural, &self.store(kind).len());
        }
        counts
            .field("resource_version", &self.resource_version)
            .finish()
    }
}

/// Why a fixture set could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// A fixture file or folder could not be read.
    #[error("cannot read fixtures at {path}")]
    Read {
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A fixture file is not valid YAML.
    #[error("{origin} is not valid YAML")]
    Yaml {
        /// The file (or `<text>`) the YAML came from.
        origin: String,
        /// The parser's error, with its location (boxed: it is large).
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// A document is not a Kubernetes object: it is not a mapping or lacks `apiVersion`/`kind`.
    #[error("{origin}, document {document}: {problem}")]
    NotAnObject {
        /// The file (or `<text>`) the document came from.
        origin: String,
        /// The document's position in its file, counting from 1.
        document: usize,
        /// What is wrong with it.
        problem: String,
    },
    /// A document is of a kind this fake server does not serve.
    #[error(
        "{origin}, document {document}: kind {kind} of {api_version} is not served by the fake API server"
    )]
    UnsupportedKind {
        /// The file (or `<text>`) the document came from.
        origin: String,
        /// The document's position in its file, counting from 1.
        document: usize,
        /// The document's `apiVersion`.
        api_version: String,
        /// The document's `kind`.
        kind: String,
    },
    /// A document has a served kind but does not match that kind's schema.
    #[error("{origin}, document {document}: invalid {kind}")]
    InvalidObject {
        /// The file (or `<text>`) the document came from.
        origin: String,
        /// The document's position in its file, counting from 1.
        document: usize,
        /// The document's `kind`.
        kind: String,
        /// Which field is wrong, as the schema's deserialiser reports it.
        #[source]
        source: serde_json::Error,
    },
    /// An object has no `metadata.name` (`generateName` needs a controller we do not have).
    #[error("{origin}, document {document}: {kind} has no metadata.name")]
    MissingName {
        /// The file (or `<text>`) the document came from.
        origin: String,
        /// The document's position in its file, counting from 1.
        document: usize,
        /// The document's `kind`.
        kind: String,
    },
    /// Two manifests declare the same object.
    #[error("{origin}, document {document}: {resource} {key:?} is declared twice")]
    Duplicate {
        /// The file (or `<text>`) of the second declaration.
        origin: String,
        /// The second declaration's position in its file, counting from 1.
        document: usize,
        /// The resource, e.g. `pods` or `deployments.apps`.
        resource: String,
        /// `namespace/name`, or `name` for a cluster-scoped object.
        key: String,
    },
}

impl Fixtures {
    /// A cluster with nothing but the namespaces `default` and `kube-system`.
    #[must_use]
    pub fn empty() -> Self {
        let mut fixtures = Self {
            stores: Default::default(),
            resource_version: 0,
        };
        for name in ["default", "kube-system"] {
            fixtures.ensure_namespace(name);
        }
        fixtures
    }

    /// Loads a fixture set from a YAML file or from a folder of them.
    ///
    /// A file holds any number of Kubernetes manifests separated by `---`, as Helm and
    /// `kubectl get -o yaml` write them (a `kind: List` is unpacked). A folder is read
    /// recursively; its `.yaml`, `.yml` and `.json` files are loaded in path order and other
    /// files are ignored. Missing server-set fields (`uid`, `resourceVersion`,
    /// `creationTimestamp`, `generation`, `namespace: default`) and the API server's defaults
    /// that printers read (`replicas: 1`, secret `type: Opaque`, namespace phase `Active`,
    /// `stringData` folded into `data`) are filled in; `fixtures/README.md` lists them all.
    ///
    /// # Errors
    ///
    /// A [`FixtureError`] names the file and document at fault.
    pub fn load(path: &Path) -> Result<Self, FixtureError> {
        let mut files = Vec::new();
        collect_fixture_files(path, &mut files)?;
        let mut documents = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).map_err(|source| FixtureError::Read {
                path: file.clone(),
                source,
            })?;
            documents.extend(objects::parse(&text, &file.display().to_string())?);
        }
        Self::from_objects(documents)
    }

    /// Loads a fixture set from YAML text holding any number of manifests; see
    /// [`Fixtures::load`].
    ///
    /// # Errors
    ///
    /// A [`FixtureError`] names the document at fault (the origin is `<text>`).
    pub fn from_yaml(text: &str) -> Result<Self, FixtureError> {
        Self::from_objects(objects::parse(text, "<text>")?)
    }

    /// Adds (or replaces) an `Opaque` secret, e.g. the one a `secret://` kubeconfig reference
    /// points at. Its namespace is created if it does not exist.
    pub fn insert_secret(&mut self, namespace: &str, name: &str, data: BTreeMap<String, Vec<u8>>) {
        let secret = objects::opaque_secret(namespace, name, data);
        let stored = objects::store(Object::Secret(secret), self.next_resource_version());
        self.ensure_namespace(namespace);
        self.put(Kind::Secret, stored, Duplicates::Replace);
    }

    /// Builds the set from parsed manifests. Namespaces go in first so that a declared
    /// namespace is the one served even when its manifest comes after the objects in it.
    fn from_objects(documents: Vec<objects::Parsed>) -> Result<Self, FixtureError> {
        let mut fixtures = Self::empty();
        let (namespaces, others): (Vec<_>, Vec<_>) = documents
            .into_iter()
            .partition(|parsed| matches!(parsed.object, Object::Namespace(_)));
        for parsed in namespaces.into_iter().chain(others) {
            let kind = parsed.object.kind();
            let stored = objects::store(parsed.object, fixtures.next_resource_version());
            if let Some(namespace) = stored.namespace.clone() {
                fixtures.ensure_namespace(&namespace);
            }
            if let Some(key) = fixtures.put(kind, stored, Duplicates::Refuse) {
                return Err(FixtureError::Duplicate {
                    origin: parsed.origin,
                    document: parsed.document,
                    resource: kind.resource_type().qualified_plural(),
                    key,
                });
            }
        }
        Ok(fixtures)
    }

    /// Creates namespace `name` (status `Active`) unless it exists. An implied namespace is
    /// replaced without complaint if a manifest declares it later.
    fn ensure_namespace(&mut self, name: &str) {
        if self.store(Kind::Namespace).get(None, name).is_none() {
            let mut stored = objects::store(
                Object::Namespace(objects::active_namespace(name)),
                self.next_resource_version(),
            );
            stored.implied = true;
            self.put(Kind::Namespace, stored, Duplicates::Replace);
        }
    }

    /// Inserts an object. With [`Duplicates::Refuse`], returns the key of an object already
    /// declared (and leaves it in place); implied namespaces are always replaceable.
    fn put(&mut self, kind: Kind, stored: Stored, duplicates: Duplicates) -> Option<String> {
        if let Ok(version) = stored.resource_version.parse::<u64>() {
            self.resource_version = self.resource_version.max(version);
        }
        let refuse = matches!(duplicates, Duplicates::Refuse);
        self.stores[kind.index()].insert(stored, refuse)
    }

    /// The resource version for the next object inserted.
    fn next_resource_version(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    fn store(&self, kind: Kind) -> &Store {
        &self.stores[kind.index()]
    }
}

impl Default for Fixtures {
    /// The same as [`Fixtures::empty`].
    fn default() -> Self {
        Self::empty()
    }
}

/// What to do when an inserted object is already there.
#[derive(Clone, Copy, Debug)]
enum Duplicates {
    Replace,
    Refuse,
}

/// Lists the fixture files under `path` (or `path` itself), sorted so loading is deterministic.
fn collect_fixture_files(path: &Path, files: &mut Vec<PathBuf>) -> Result<(), FixtureError> {
    let read_error = |source| FixtureError::Read {
        path: path.to_owned(),
        source,
    };
    let metadata = std::fs::metadata(path).map_err(read_error)?;
    if !metadata.is_dir() {
        files.push(path.to_owned());
        return Ok(());
    }
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(path).map_err(read_error)? {
        entries.push(entry.map_err(read_error)?.path());
    }
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            collect_fixture_files(&entry, files)?;
        } else if entry
            .extension()
            .and_then(|extension| extension.to_str())
            .is_some_and(|extension| matches!(extension, "yaml" | "yml" | "json"))
        {
            files.push(entry);
        }
    }
    Ok(())
}

/// An authenticated request, as the network side hands it over.
#[derive(Clone, Copy, Debug)]
pub struct ApiRequest<'a> {
    /// The HTTP method, e.g. `GET`.
    pub method: &'a str,
    /// The path, without the query, e.g. `/api/v1/namespaces/default/pods`.
    pub path: &'a str,
    /// The raw (still percent-encoded) query string, without the `?`.
    pub query: Option<&'a str>,
    /// The `Accept` header, which chooses between the object, `Table` and discovery forms.
    pub accept: Option<&'a str>,
}

/// What to send back: a status code, a `Content-Type` and a body.
#[derive(Clone, Debug)]
pub struct ApiResponse {
    /// The HTTP status code.
    pub status: u16,
    /// The `Content-Type` header value.
    pub content_type: String,
    /// The body; cheap to clone, often shared with the fixtures.
    pub body: Bytes,
}

const JSON: &str = "application/json";
const TEXT: &str = "text/plain; charset=utf-8";

impl ApiResponse {
    fn json(body: Bytes) -> Self {
        Self {
            status: 200,
            content_type: JSON.to_owned(),
            body,
        }
    }
}

/// Answers one request from `fixtures`, as a v1.33 API server would for a client allowed to
/// read everything. Pure: no I/O, no clock (ages are measured from a fixed instant, see
/// [`REFERENCE_TIME`]).
#[must_use]
pub fn respond(fixtures: &Fixtures, request: &ApiRequest<'_>) -> ApiResponse {
    route(fixtures, request).unwrap_or_else(Failure::into_response)
}

/// The instant "now" is for the `AGE` column and for `RESTARTS (… ago)`: table cells must not
/// depend on the clock, so that responses (and the tests reading them) are reproducible.
/// Objects without a `creationTimestamp` are given [`DEFAULT_CREATION_TIME`], 30 days earlier.
pub const REFERENCE_TIME: &str = "2025-06-01T00:00:00Z";

/// The `creationTimestamp` given to fixture objects that have none.
pub const DEFAULT_CREATION_TIME: &str = "2025-05-02T00:00:00Z";

fn route(fixtures: &Fixtures, request: &ApiRequest<'_>) -> Result<ApiResponse, Failure> {
    if !matches!(request.method, "GET" | "HEAD") {
        return Err(Failure::method_not_allowed());
    }
    let path = request.path;
    let segments: Vec<&str> = match path.strip_prefix('/') {
        Some("") | None => return Err(Failure::PageNotFound),
        Some(rest) => rest.split('/').collect(),
    };
    if segments.iter().any(|segment| segment.is_empty()) {
        return Err(Failure::PageNotFound);
    }
    match segments.as_slice() {
        ["version"] => Ok(ApiResponse::json(discovery::version())),
        [probe @ ("readyz" | "livez" | "healthz"), check @ ..] => {
            health(probe, check, request.query)
        }
        ["api"] => discovery_root(
            request,
            discovery::core_versions,
            discovery::aggregated_core,
        ),
        ["apis"] => discovery_root(request, discovery::group_list, discovery::aggregated_groups),
        ["api", "v1", rest @ ..] => {
            serve_group_version(fixtures, request, GroupVersion::CORE, rest)
        }
        ["apis", group] => discovery::group(group)
            .map(ApiResponse::json)
            .ok_or_else(Failure::resource_not_found),
        ["apis", group, version, rest @ ..] => {
            let group_version =
                GroupVersion::find(group, version).ok_or_else(Failure::resource_not_found)?;
            serve_group_version(fixtures, request, group_version, rest)
        }
        _ => Err(Failure::PageNotFound),
    }
}

/// `/readyz`, `/livez`, `/healthz` and their single checks, with `?verbose` as kubectl shows it.
fn health(probe: &str, check: &[&str], query: Option<&str>) -> Result<ApiResponse, Failure> {
    const CHECKS: [&str; 3] = ["ping", "log", "etcd"];
    let text = match check {
        [] if query
            .is_some_and(|query| query.split('&').any(|pair| pair.starts_with("verbose"))) =>
        {
            let mut text = String::new();
            for check in CHECKS {
                text.push_str(&format!("[+]{check} ok\n"));
            }
            text.push_str(&format!("{probe} check passed\n"));
            text
        }
        [] => "ok".to_owned(),
        [name] if CHECKS.contains(name) => "ok".to_owned(),
        _ => return Err(Failure::PageNotFound),
    };
    Ok(ApiResponse {
        status: 200,
        content_type: TEXT.to_owned(),
        body: Bytes::from(text),
    })
}

/// `/api` and `/apis`: the aggregated form when asked for it, the legacy form otherwise.
fn discovery_root(
    request: &ApiRequest<'_>,
    legacy: fn() -> Bytes,
    aggregated: fn() -> Bytes,
) -> Result<ApiResponse, Failure> {
    match request::negotiate(
        request.accept,
        &[Representation::Object, Representation::AggregatedDiscovery],
    )? {
        Representation::AggregatedDiscovery => Ok(ApiResponse {
            status: 200,
            content_type: discovery::AGGREGATED_CONTENT_TYPE.to_owned(),
            body: aggregated(),
        }),
        _ => Ok(ApiResponse::json(legacy())),
    }
}

/// What a path below a group-version names.
#[derive(Clone, Copy, Debug)]
enum Target<'p> {
    List {
        namespace: Option<&'p str>,
    },
    Get {
        namespace: Option<&'p str>,
        name: &'p str,
        subresource: Option<Subresource>,
    },
}

/// The subresources served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Subresource {
    Status,
    Scale,
}

fn serve_group_version(
    fixtures: &Fixtures,
    request: &ApiRequest<'_>,
    group_version: GroupVersion,
    rest: &[&str],
) -> Result<ApiResponse, Failure> {
    let find = |plural: &str| group_version.resource(plural);
    let (resource, target) = match rest {
        [] => return Ok(ApiResponse::json(discovery::resource_list(group_version))),
        // A namespaced path is tried first: `/api/v1/namespaces/x/status` is then the status
        // of namespace x, because `status` is no namespaced resource.
        ["namespaces", namespace, plural, tail @ ..]
            if find(plural).is_some_and(|r| r.namespaced) =>
        {
            let resource = find(plural).ok_or_else(Failure::resource_not_found)?;
            let target = match tail {
                [] => Target::List {
                    namespace: Some(namespace),
                },
                [name] => Target::Get {
                    namespace: Some(namespace),
                    name,
                    subresource: None,
                },
                [name, subresource] => Target::Get {
                    namespace: Some(namespace),
                    name,
                    subresource: Some(subresource_of(resource, subresource)?),
                },
                _ => return Err(Failure::resource_not_found()),
            };
            (resource, target)
        }
        [plural, tail @ ..] => {
            let resource = find(plural).ok_or_else(Failure::resource_not_found)?;
            let target = match tail {
                [] => Target::List { namespace: None },
                // A namespaced object is only reachable through its namespace.
                [_, ..] if resource.namespaced => return Err(Failure::resource_not_found()),
                [name] => Target::Get {
                    namespace: None,
                    name,
                    subresource: None,
                },
                [name, subresource] => Target::Get {
                    namespace: None,
                    name,
                    subresource: Some(subresource_of(resource, subresource)?),
                },
                _ => return Err(Failure::resource_not_found()),
            };
            (resource, target)
        }
    };
    serve_resource(fixtures, request, resource, target)
}

fn subresource_of(resource: &ResourceType, name: &str) -> Result<Subresource, Failure> {
    match name {
        "status" if resource.has_status => Ok(Subresource::Status),
        "scale" if resource.has_scale => Ok(Subresource::Scale),
        _ => Err(Failure::resource_not_found()),
    }
}

const OBJECT_FORMS: [Representation; 3] = [
    Representation::Object,
    Representation::Table,
    Representation::PartialObjectMetadata,
];

fn serve_resource(
    fixtures: &Fixtures,
    request: &ApiRequest<'_>,
    resource: &'static ResourceType,
    target: Target<'_>,
) -> Result<ApiResponse, Failure> {
    let query = ListQuery::parse(request.query)?;
    let representation = request::negotiate(request.accept, &OBJECT_FORMS)?;
    let store = fixtures.store(resource.kind);
    match target {
        Target::List { namespace } => {
            if query.watch {
                return Err(Failure::watch_not_supported());
            }
            let page = store.list(resource, namespace, &query, fixtures.resource_version)?;
            let body = match representation {
                Representation::Table => table::list(resource, &page, query.include_object),
                Representation::PartialObjectMetadata => objects::partial_metadata_list(&page),
                _ => objects::list(resource, &page),
            };
            Ok(ApiResponse::json(body))
        }
        Target::Get {
            namespace,
            name,
            subresource,
        } => {
            let stored = store
                .get(namespace, name)
                .ok_or_else(|| Failure::not_found(resource, name))?;
            let body = match (subresource, representation) {
                (Some(Subresource::Scale), Representation::Table) => {
                    table::scale(stored, query.include_object)
                }
                (Some(Subresource::Scale), _) => stored
                    .scale
                    .clone()
                    .ok_or_else(Failure::resource_not_found)?,
                (_, Representation::Table) => table::single(resource, stored, query.include_object),
                (_, Representation::PartialObjectMetadata) => stored.partial_metadata.clone(),
                _ => stored.json.clone(),
            };
            Ok(ApiResponse::json(body))
        }
    }
}
