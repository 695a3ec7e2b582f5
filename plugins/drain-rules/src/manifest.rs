//! Manifest files as Helm renders them and `kubectl apply -f` reads them: several YAML (or
//! JSON) documents separated by `---` lines, empty documents and comments, `kind: List`
//! objects. A bad document is reported with its place and skipped; the others are still read.
//!
//! Manifests have no pods: each workload becomes `replicas` made-up pods from its template,
//! running and ready (and a Deployment a ReplicaSet between them, as in a cluster), so that
//! the disruption controller's arithmetic sees what it would see once they are up.

use serde_json::Value;

use vigil_kubeconfig_rules::yaml::{self, Node, Step};

use crate::model::{
    ClusterObjects, Condition, ObjectMeta, OwnerReference, Pod, PodDisruptionBudget, PodStatus,
    Workload, WorkloadKind,
};

/// A document that could not be used, and why. The message never quotes the document (it
/// may hold a Secret): it names its place and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentProblem {
    /// The file (or `-` for standard input) the document came from.
    pub origin: String,
    /// The document's position in its file, counting from 1.
    pub document: usize,
    /// The line its `---` marker (or its first line) is on, counting from 1.
    pub line: usize,
    /// For an item of a `List`, its position, counting from 1.
    pub item: Option<usize>,
    /// What is wrong.
    pub problem: String,
}

impl std::fmt::Display for DocumentProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}, document {} (line {})",
            self.origin, self.document, self.line
        )?;
        if let Some(item) = self.item {
            write!(f, ", item {item}")?;
        }
        write!(f, ": {}", self.problem)
    }
}

/// What manifests declare, as [`ClusterObjects`] ready for [`crate::audit`], plus what could
/// not be read.
#[derive(Debug, Clone, Default)]
pub struct Manifests {
    /// The budgets and workloads read, with their made-up pods.
    pub objects: ClusterObjects,
    /// Documents that could not be used.
    pub problems: Vec<DocumentProblem>,
    /// How many objects were read (of any kind, `List` items counted one by one).
    pub objects_read: usize,
}

impl Manifests {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads every document of `text`, which came from `origin` (a file name, or `-`).
    pub fn add(&mut self, origin: &str, text: &str) {
        for (index, (line, document)) in split_documents(text).into_iter().enumerate() {
            let number = index + 1;
            if is_blank(document) {
                continue;
            }
            let problem = |problem: String| DocumentProblem {
                origin: origin.to_owned(),
                document: number,
                line,
                item: None,
                problem,
            };
            let value: Value = match serde_saphyr::from_str(document) {
                Ok(value) => value,
                Err(error) => {
                    let place = error
                        .location()
                        .map(|l| {
                            // The parser counts from the document's first line.
                            let absolute = usize::try_from(l.line()).unwrap_or(1).max(1) + line - 1;
                            format!(" at line {absolute}, column {}", l.column())
                        })
                        .unwrap_or_default();
                    self.problems
                        .push(problem(format!("not valid YAML{place}")));
                    continue;
                }
            };
            if value.is_null() {
                continue;
            }
            match self.add_object(&value) {
                Ok(()) => {}
                Err(object_problem) => {
                    // Where the value is, read again from the YAML only now: a document
                    // that is read without a problem never pays for it.
                    let root = object_problem
                        .shape
                        .as_ref()
                        .and_then(|_| Node::read(document));
                    let node = object_problem
                        .shape
                        .as_ref()
                        .zip(root.as_ref())
                        .and_then(|(shape, root)| root.at(&shape.at));
                    let item = object_problem.item;
                    let text = object_problem.text(node, line);
                    let mut problem = problem(text);
                    problem.item = item;
                    self.problems.push(problem);
                }
            }
        }
    }

    /// Adds one object (or the items of a `List`).
    fn add_object(&mut self, value: &Value) -> Result<(), ObjectProblem> {
        let Value::Object(map) = value else {
            return Err(ObjectProblem::new(
                None,
                "not a Kubernetes object (not a mapping)",
            ));
        };
        let kind = map
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let api_version = map
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind.is_empty() || api_version.is_empty() {
            return Err(ObjectProblem::new(
                None,
                "not a Kubernetes object (no kind or apiVersion)",
            ));
        }
        if kind == "List" || kind.ends_with("List") && map.contains_key("items") {
            let items = match map.get("items") {
                Some(Value::Array(items)) => items.as_slice(),
                None | Some(Value::Null) => &[],
                Some(_) => {
                    return Err(ObjectProblem::new(
                        None,
                        "a List whose items are not a list",
                    ));
                }
            };
            let mut first_problem = None;
            for (index, item) in items.iter().enumerate() {
                if let Err(mut problem) = self.add_object(item) {
                    problem.item = Some(index + 1);
                    if let Some(shape) = &mut problem.shape {
                        let prefix = [Step::Key("items".to_owned()), Step::Index(index)];
                        shape.at.splice(0..0, prefix);
                        shape.within += 2;
                    }
                    first_problem.get_or_insert(problem);
                }
            }
            return first_problem.map_or(Ok(()), Err);
        }
        self.objects_read += 1;
        match kind.as_str() {
            "PodDisruptionBudget" => {
                let mut budget: PodDisruptionBudget = typed(&kind, value)?;
                // A manifest's status is whatever was exported with it: not the cluster's.
                budget.status = None;
                self.objects.budgets.push(budget);
            }
            "Pod" => {
                let mut pod: Pod = typed(&kind, value)?;
                pod.status = running_and_ready();
                self.objects.pods.push(pod);
            }
            other => {
                if let Some(workload_kind) = WorkloadKind::from_kind(other) {
                    let object = typed(other, value)?;
                    self.add_workload(Workload::from_object(workload_kind, object));
                }
                // Any other kind (Service, ConfigMap, Secret…) plays no part in drains.
            }
        }
        Ok(())
    }

    fn add_workload(&mut self, workload: Workload) {
        let namespace = workload.metadata.namespace.clone();
        let owner = |kind: WorkloadKind, name: &str| OwnerReference {
            api_version: if kind == WorkloadKind::ReplicationController {
                "v1".to_owned()
            } else {
                "apps/v1".to_owned()
            },
            kind: kind.as_str().to_owned(),
            name: name.to_owned(),
            uid: String::new(),
            controller: Some(true),
        };
        let pod_owner = if workload.kind == WorkloadKind::Deployment {
            // The ReplicaSet a Deployment's pods belong to, as in a cluster.
            let name = format!("{}-manifest", workload.metadata.name);
            let replica_set = Workload {
                kind: WorkloadKind::ReplicaSet,
                metadata: ObjectMeta {
                    name: name.clone(),
                    namespace: namespace.clone(),
                    owner_references: vec![owner(
                        WorkloadKind::Deployment,
                        &workload.metadata.name,
                    )],
                    ..ObjectMeta::default()
                },
                replicas: workload.replicas,
                template_labels: workload.template_labels.clone(),
                template_spec: workload.template_spec.clone(),
            };
            self.objects.workloads.push(replica_set);
            owner(WorkloadKind::ReplicaSet, &name)
        } else {
            owner(workload.kind, &workload.metadata.name)
        };
        for index in 0..workload.replicas.max(0) {
            self.objects.pods.push(Pod {
                metadata: ObjectMeta {
                    name: format!("{}-{index}", workload.metadata.name),
                    namespace: namespace.clone(),
                    labels: workload.template_labels.clone(),
                    owner_references: vec![pod_owner.clone()],
                    ..ObjectMeta::default()
                },
                spec: workload.template_spec.clone(),
                status: running_and_ready(),
            });
        }
        self.objects.workloads.push(workload);
    }
}

struct ObjectProblem {
    item: Option<usize>,
    /// What is wrong, when it is not a value of the wrong shape.
    problem: String,
    /// The value of the wrong shape, when that is the problem.
    shape: Option<Box<Shape>>,
}

/// An object whose value at `at` does not have the shape its kind requires.
struct Shape {
    /// The object's kind.
    kind: String,
    /// Whether the value has the wrong type (rather than a wrong value of the right type).
    wrong_type: bool,
    /// The path from the document's root to the value (through a `List`'s items).
    at: Vec<Step>,
    /// Where the object's own path starts in `at`: after the `items[N]` of a `List`, which
    /// the problem's place names already.
    within: usize,
    /// What was expected.
    detail: String,
}

impl ObjectProblem {
    fn new(item: Option<usize>, problem: &str) -> Self {
        Self {
            item,
            problem: problem.to_owned(),
            shape: None,
        }
    }

    /// The problem in words; `node` is the value at fault, read from the document that
    /// starts at line `first_line`, when it could be found there.
    fn text(&self, node: Option<&Node>, first_line: usize) -> String {
        let Some(shape) = &self.shape else {
            return self.problem.clone();
        };
        if shape.at.is_empty() {
            return format!(
                "{} does not have the expected shape: {}",
                shape.kind, shape.detail
            );
        }
        let line = node
            .and_then(|node| usize::try_from(node.line).ok())
            .filter(|line| *line > 0)
            .map(|line| format!(" (line {})", line + first_line - 1))
            .unwrap_or_default();
        let found = match node {
            Some(node) if shape.wrong_type => {
                let hint = if matches!(node.kind, yaml::Kind::Boolean(_)) {
                    " (YAML reads an unquoted y, yes, on or true as a boolean: quote the value if a string is meant)"
                } else {
                    ""
                };
                format!(", found {}{hint}", node.describe())
            }
            _ => String::new(),
        };
        format!(
            "{} does not have the expected shape: `{}`{line}: {}{found}",
            shape.kind,
            yaml::show(&shape.at[shape.within..]),
            shape.detail
        )
    }
}

/// `value` read as a `T` (the object of kind `kind`), or a problem naming the path to the
/// value at fault (`spec.selector.matchLabels.enabled`) and what was expected.
fn typed<T: serde::de::DeserializeOwned>(kind: &str, value: &Value) -> Result<T, ObjectProblem> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let at: Vec<Step> = error
            .path()
            .iter()
            .filter_map(|segment| match segment {
                serde_path_to_error::Segment::Map { key } => Some(Step::Key(key.clone())),
                serde_path_to_error::Segment::Seq { index } => Some(Step::Index(*index)),
                _ => None,
            })
            .collect();
        ObjectProblem {
            item: None,
            problem: String::new(),
            shape: Some(Box::new(Shape {
                kind: kind.to_owned(),
                wrong_type: error.inner().to_string().starts_with("invalid type"),
                within: 0,
                at,
                detail: describe(error.inner()),
            })),
        }
    })
}

/// A serde error without the value it was given (which could be a secret): its
/// category and, for a missing or unknown field or a wrong type, that much.
fn describe(error: &serde_json::Error) -> String {
    let text = error.to_string();
    // serde_json's messages quote the offending value after `invalid type: ` / `invalid
    // value: `; keep only what was expected.
    let text = text
        .rfind(" at line ")
        .map_or(text.as_str(), |end| &text[..end]);
    match text.find(", expected ") {
        Some(at) if text.starts_with("invalid") => {
            let kind = if text.starts_with("invalid type") {
                "a value of the wrong type"
            } else {
                "an invalid value"
            };
            format!("{kind}{}", &text[at..])
        }
        _ => text.to_owned(),
    }
}

fn running_and_ready() -> PodStatus {
    PodStatus {
        phase: Some("Running".to_owned()),
        conditions: vec![Condition {
            type_: "Ready".to_owned(),
            status: "True".to_owned(),
            reason: None,
        }],
    }
}

/// The documents of a YAML stream, each with the line it starts on (counting from 1): split
/// at `---` lines (what follows `--- ` on the line belongs to the next document); a `...`
/// line ends a document. Blank space before a first `---` is not a document.
pub fn split_documents(text: &str) -> Vec<(usize, &str)> {
    let mut documents = Vec::new();
    let mut start = 0;
    let mut start_line = 1;
    let mut offset = 0;
    let mut ended = false;
    for (number, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches(['\n', '\r']);
        let marker = bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t");
        if marker {
            let leading_blank = documents.is_empty() && is_blank(&text[start..offset]);
            if !leading_blank && (!ended || start < offset) {
                documents.push((start_line, &text[start..offset]));
            }
            // Content after the marker stays in the next document.
            start = offset + 3;
            start_line = number + 1;
            ended = false;
        } else if bare == "..." {
            documents.push((start_line, &text[start..offset]));
            start = offset + line.len();
            start_line = number + 2;
            ended = true;
        }
        offset += line.len();
    }
    if start < text.len() || documents.is_empty() {
        documents.push((start_line, &text[start.min(text.len())..]));
    }
    documents
}

/// Whether a document holds nothing but blank lines, comments and directives.
fn is_blank(document: &str) -> bool {
    document.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#') || line.starts_with('%')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_split_as_yaml_streams() {
        assert_eq!(split_documents("a: 1\n"), vec![(1, "a: 1\n")]);
        assert_eq!(
            split_documents("# head\n---\na: 1\n---\nb: 2\n"),
            vec![(2, "\na: 1\n"), (4, "\nb: 2\n")]
        );
        assert_eq!(
            split_documents("a: 1\n--- # c\nb: 2"),
            vec![(1, "a: 1\n"), (2, " # c\nb: 2")]
        );
        assert_eq!(split_documents("a: 1\n...\n"), vec![(1, "a: 1\n")]);
        assert_eq!(split_documents("a: |\n  ---\n"), vec![(1, "a: |\n  ---\n")]);
    }
}
