//! The resource catalogue (which kinds are served, under which names) and the documents built
//! from it: `/version` and API discovery, legacy and aggregated.
//!
//! Discovery lists only what the fake server answers: verbs `get` and `list`, and the `status`
//! and `scale` subresources. Listing verbs we would refuse (`watch`, `create`, …) would invite
//! clients into requests that fail.

use std::sync::LazyLock;

use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, APIVersions, GroupVersionForDiscovery,
};
use k8s_openapi::apimachinery::pkg::version::Info;
use serde::Serialize;

use super::objects::to_json;

/// The kinds served. The order is the order of [`RESOURCE_TYPES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Namespace,
    Node,
    Pod,
    Secret,
    ReplicationController,
    Deployment,
    ReplicaSet,
    StatefulSet,
    PodDisruptionBudget,
}

impl Kind {
    /// How many kinds there are.
    pub(crate) const COUNT: usize = 9;

    /// Every kind, in catalogue order.
    pub(crate) const ALL: [Self; Self::COUNT] = [
        Self::Namespace,
        Self::Node,
        Self::Pod,
        Self::Secret,
        Self::ReplicationController,
        Self::Deployment,
        Self::ReplicaSet,
        Self::StatefulSet,
        Self::PodDisruptionBudget,
    ];

    /// The kind's position in [`Kind::ALL`] and in per-kind arrays.
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// How the kind is served.
    pub(crate) fn resource_type(self) -> &'static ResourceType {
        &RESOURCE_TYPES[self.index()]
    }
}

/// How one kind is served: its names in URLs and discovery, and its subresources.
#[derive(Debug)]
pub(crate) struct ResourceType {
    pub(crate) kind: Kind,
    /// The `kind` field, e.g. `Deployment`.
    pub(crate) kind_name: &'static str,
    /// The API group, empty for the core group.
    pub(crate) group: &'static str,
    pub(crate) version: &'static str,
    /// The URL segment, e.g. `deployments`.
    pub(crate) plural: &'static str,
    pub(crate) singular: &'static str,
    pub(crate) namespaced: bool,
    pub(crate) short_names: &'static [&'static str],
    pub(crate) categories: &'static [&'static str],
    pub(crate) has_status: bool,
    pub(crate) has_scale: bool,
}

impl ResourceType {
    /// `pods`, or `deployments.apps` outside the core group: how Status messages name resources.
    pub(crate) fn qualified_plural(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_owned()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The `apiVersion` field, e.g. `apps/v1` or `v1`.
    pub(crate) fn api_version(&self) -> String {
        GroupVersion {
            group: self.group,
            version: self.version,
        }
        .to_string()
    }
}

const ALL_CATEGORY: &[&str] = &["all"];

/// The catalogue, in [`Kind`] order.
pub(crate) static RESOURCE_TYPES: [ResourceType; Kind::COUNT] = [
    ResourceType {
        kind: Kind::Namespace,
        kind_name: "Namespace",
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        namespaced: false,
        short_names: &["ns"],
        categories: &[],
        has_status: true,
        has_scale: false,
    },
    ResourceType {
        kind: Kind::Node,
        kind_name: "Node",
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        namespaced: false,
        short_names: &["no"],
        categories: &[],
        has_status: true,
        has_scale: false,
    },
    ResourceType {
        kind: Kind::Pod,
        kind_name: "Pod",
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        namespaced: true,
        short_names: &["po"],
        categories: ALL_CATEGORY,
        has_status: true,
        has_scale: false,
    },
    ResourceType {
        kind: Kind::Secret,
        kind_name: "Secret",
        group: "",
        version: "v1",
        plural: "secrets",
        singular: "secret",
        namespaced: true,
        short_names: &[],
        categories: &[],
        has_status: false,
        has_scale: false,
    },
    ResourceType {
        kind: Kind::ReplicationController,
        kind_name: "ReplicationController",
        group: "",
        version: "v1",
        plural: "replicationcontrollers",
        singular: "replicationcontroller",
        namespaced: true,
        short_names: &["rc"],
        categories: ALL_CATEGORY,
        has_status: true,
        has_scale: true,
    },
    ResourceType {
        kind: Kind::Deployment,
        kind_name: "Deployment",
        group: "apps",
        version: "v1",
        plural: "deployments",
        singular: "deployment",
        namespaced: true,
        short_names: &["deploy"],
        categories: ALL_CATEGORY,
        has_status: true,
        has_scale: true,
    },
    ResourceType {
        kind: Kind::ReplicaSet,
        kind_name: "ReplicaSet",
        group: "apps",
        version: "v1",
        plural: "replicasets",
        singular: "replicaset",
        namespaced: true,
        short_names: &["rs"],
        categories: ALL_CATEGORY,
        has_status: true,
        has_scale: true,
    },
    ResourceType {
        kind: Kind::StatefulSet,
        kind_name: "StatefulSet",
        group: "apps",
        version: "v1",
        plural: "statefulsets",
        singular: "statefulset",
        namespaced: true,
        short_names: &["sts"],
        categories: ALL_CATEGORY,
        has_status: true,
        has_scale: true,
    },
    ResourceType {
        kind: Kind::PodDisruptionBudget,
        kind_name: "PodDisruptionBudget",
        group: "policy",
        version: "v1",
        plural: "poddisruptionbudgets",
        singular: "poddisruptionbudget",
        namespaced: true,
        short_names: &["pdb"],
        categories: &[],
        has_status: true,
        has_scale: false,
    },
];

/// A served group-version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GroupVersion {
    pub(crate) group: &'static str,
    pub(crate) version: &'static str,
}

impl std::fmt::Display for GroupVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            f.write_str(self.version)
        } else {
            write!(f, "{}/{}", self.group, self.version)
        }
    }
}

/// The named groups served, in the order `/apis` lists them.
const GROUPS: [GroupVersion; 2] = [
    GroupVersion {
        group: "apps",
        version: "v1",
    },
    GroupVersion {
        group: "policy",
        version: "v1",
    },
];

impl GroupVersion {
    /// The core group, served under `/api/v1`.
    pub(crate) const CORE: Self = Self {
        group: "",
        version: "v1",
    };

    /// The named group-version `group/version`, if served.
    pub(crate) fn find(group: &str, version: &str) -> Option<Self> {
        GROUPS
            .into_iter()
            .find(|served| served.group == group && served.version == version)
    }

    /// The resource called `plural` in this group-version.
    pub(crate) fn resource(self, plural: &str) -> Option<&'static ResourceType> {
        self.resources().find(|resource| resource.plural == plural)
    }

    fn resources(self) -> impl Iterator<Item = &'static ResourceType> {
        RESOURCE_TYPES.iter().filter(move |resource| {
            resource.group == self.group && resource.version == self.version
        })
    }
}

/// The verbs every served resource supports.
const VERBS: [&str; 2] = ["get", "list"];

/// The `Content-Type` of an aggregated discovery response; clients look at it to tell the
/// aggregated form from the legacy one.
pub(crate) const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// `/version`: a v1.33.0 server.
pub(crate) fn version() -> Bytes {
    static VERSION: LazyLock<Bytes> = LazyLock::new(|| {
        to_json(&Info {
            major: "1".to_owned(),
            minor: "33".to_owned(),
            emulation_major: Some("1".to_owned()),
            emulation_minor: Some("33".to_owned()),
            min_compatibility_major: Some("1".to_owned()),
            min_compatibility_minor: Some("32".to_owned()),
            git_version: "v1.33.0".to_owned(),
            git_commit: "60a317eadfcb839692a68eab88b2096f4d708f4f".to_owned(),
            git_tree_state: "clean".to_owned(),
            build_date: "2025-04-23T13:06:26Z".to_owned(),
            go_version: "go1.24.2".to_owned(),
            compiler: "gc".to_owned(),
            platform: "linux/amd64".to_owned(),
        })
    });
    VERSION.clone()
}

/// `/api`, legacy form.
pub(crate) fn core_versions() -> Bytes {
    static CORE: LazyLock<Bytes> = LazyLock::new(|| {
        // A real server also lists its address per client network; clients use the address
        // they connected to, and the pure side does not know it.
        to_json(&APIVersions {
            versions: vec!["v1".to_owned()],
            server_address_by_client_cidrs: Vec::new(),
        })
    });
    CORE.clone()
}

fn api_group(group_version: GroupVersion) -> APIGroup {
    let version = GroupVersionForDiscovery {
        group_version: group_version.to_string(),
        version: group_version.version.to_owned(),
    };
    APIGroup {
        name: group_version.group.to_owned(),
        preferred_version: Some(version.clone()),
        server_address_by_client_cidrs: None,
        versions: vec![version],
    }
}

/// `/apis`, legacy form.
pub(crate) fn group_list() -> Bytes {
    static GROUP_LIST: LazyLock<Bytes> = LazyLock::new(|| {
        to_json(&APIGroupList {
            groups: GROUPS.into_iter().map(api_group).collect(),
        })
    });
    GROUP_LIST.clone()
}

/// `/apis/{group}`.
pub(crate) fn group(name: &str) -> Option<Bytes> {
    GROUPS
        .into_iter()
        .find(|served| served.group == name)
        .map(|served| to_json(&api_group(served)))
}

/// `/api/v1` or `/apis/{group}/{version}`: the resources and subresources of a group-version.
pub(crate) fn resource_list(group_version: GroupVersion) -> Bytes {
    let strings = |names: &[&str]| {
        names
            .iter()
            .map(|&name| name.to_owned())
            .collect::<Vec<_>>()
    };
    let mut resources = Vec::new();
    for resource in group_version.resources() {
        resources.push(APIResource {
            name: resource.plural.to_owned(),
            singular_name: resource.singular.to_owned(),
            namespaced: resource.namespaced,
            kind: resource.kind_name.to_owned(),
            verbs: strings(&VERBS),
            short_names: (!resource.short_names.is_empty()).then(|| strings(resource.short_names)),
            categories: (!resource.categories.is_empty()).then(|| strings(resource.categories)),
            group: None,
            version: None,
            storage_version_hash: None,
        });
        if resource.has_scale {
            resources.push(APIResource {
                name: format!("{}/scale", resource.plural),
                singular_name: String::new(),
                namespaced: resource.namespaced,
                kind: "Scale".to_owned(),
                verbs: strings(&["get"]),
                group: Some("autoscaling".to_owned()),
                version: Some("v1".to_owned()),
                short_names: None,
                categories: None,
                storage_version_hash: None,
            });
        }
        if resource.has_status {
            resources.push(APIResource {
                name: format!("{}/status", resource.plural),
                singular_name: String::new(),
                namespaced: resource.namespaced,
                kind: resource.kind_name.to_owned(),
                verbs: strings(&["get"]),
                group: None,
                version: None,
                short_names: None,
                categories: None,
                storage_version_hash: None,
            });
        }
    }
    to_json(&APIResourceList {
        group_version: group_version.to_string(),
        resources,
    })
}

/// `apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`. k8s-openapi has no type for it, so the
/// shape is written out here, field for field as the API server writes it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GroupDiscoveryList {
    kind: &'static str,
    api_version: &'static str,
    metadata: EmptyMetadata,
    items: Vec<GroupDiscovery>,
}

#[derive(Serialize)]
struct EmptyMetadata {}

#[derive(Serialize)]
struct GroupDiscovery {
    metadata: GroupMetadata,
    versions: Vec<VersionDiscovery>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GroupMetadata {
    /// Absent for the core group.
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'static str,
    /// Always null in real responses; kept so the shape matches.
    creation_timestamp: Option<()>,
}

#[derive(Serialize)]
struct VersionDiscovery {
    version: &'static str,
    resources: Vec<ResourceDiscovery>,
    freshness: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResourceDiscovery {
    resource: &'static str,
    response_kind: ResponseKind,
    scope: &'static str,
    singular_resource: &'static str,
    verbs: &'static [&'static str],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    short_names: &'static [&'static str],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    categories: &'static [&'static str],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    subresources: Vec<SubresourceDiscovery>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SubresourceDiscovery {
    subresource: &'static str,
    response_kind: ResponseKind,
    verbs: &'static [&'static str],
}

#[derive(Serialize)]
struct ResponseKind {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
}

fn group_discovery(group_version: GroupVersion) -> GroupDiscovery {
    let resources = group_version
        .resources()
        .map(|resource| {
            let own_kind = || ResponseKind {
                group: resource.group,
                version: resource.version,
                kind: resource.kind_name,
            };
            let mut subresources = Vec::new();
            if resource.has_scale {
                subresources.push(SubresourceDiscovery {
                    subresource: "scale",
                    response_kind: ResponseKind {
                        group: "autoscaling",
                        version: "v1",
                        kind: "Scale",
                    },
                    verbs: &["get"],
                });
            }
            if resource.has_status {
                subresources.push(SubresourceDiscovery {
                    subresource: "status",
                    response_kind: own_kind(),
                    verbs: &["get"],
                });
            }
            ResourceDiscovery {
                resource: resource.plural,
                response_kind: own_kind(),
                scope: if resource.namespaced {
                    "Namespaced"
                } else {
                    "Cluster"
                },
                singular_resource: resource.singular,
                verbs: &VERBS,
                short_names: resource.short_names,
                categories: resource.categories,
                subresources,
            }
        })
        .collect();
    GroupDiscovery {
        metadata: GroupMetadata {
            name: group_version.group,
            creation_timestamp: None,
        },
        versions: vec![VersionDiscovery {
            version: group_version.version,
            resources,
            freshness: "Current",
        }],
    }
}

fn aggregated(groups: impl IntoIterator<Item = GroupVersion>) -> Bytes {
    to_json(&GroupDiscoveryList {
        kind: "APIGroupDiscoveryList",
        api_version: "apidiscovery.k8s.io/v2",
        metadata: EmptyMetadata {},
        items: groups.into_iter().map(group_discovery).collect(),
    })
}

/// `/api`, aggregated form.
pub(crate) fn aggregated_core() -> Bytes {
    static CORE: LazyLock<Bytes> = LazyLock::new(|| aggregated([GroupVersion::CORE]));
    CORE.clone()
}

/// `/apis`, aggregated form.
pub(crate) fn aggregated_groups() -> Bytes {
    static GROUPS_DISCOVERY: LazyLock<Bytes> = LazyLock::new(|| aggregated(GROUPS));
    GROUPS_DISCOVERY.clone()
}
