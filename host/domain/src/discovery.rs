//! Kubeconfig discovery: which kubeconfig files vigil reads, which clusters they
//! define, and a watcher that says when to read them again.
//!
//! Discovery turns every context of every source file into one [`DiscoveredCluster`] whose
//! name is the context name and whose reference is `ABSOLUTE_PATH#CONTEXT`. Sources are read
//! in a fixed order (`KUBECONFIG_PATH` entries in order, then `KUBECONFIG_DIR` sorted by file
//! name) and the first definition of a context name wins, as in kubectl's merge rule.
//!
//! Nothing here touches the database or the process environment: settings come in as a
//! [`DiscoverySettings`], results go out as a [`DiscoveryReport`] for the caller to upsert and
//! log. Every problem is reported with the file it concerns and never with a value read from
//! that file, because a kubeconfig is full of secrets and YAML errors like to quote their input.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, Metadata};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{
    Cluster, Kubeconfig, KubeconfigError, NamedAuthInfo, NamedCluster, NamedContext,
};
use notify_debouncer_full::notify::{self, Event, EventKind, RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};
use tokio::sync::mpsc;
use vigil_kubeconfig_rules::server::{self, ServerShape};
use vigil_kubeconfig_rules::text::yaml_parse_problem;

/// The largest kubeconfig file vigil reads, in bytes.
///
/// Real kubeconfigs are a few kilobytes; the cap keeps a stray log file or disk image dropped
/// into `KUBECONFIG_DIR` from being read into memory whole.
pub const MAX_KUBECONFIG_BYTES: u64 = vigil_kubeconfig_rules::text::MAX_KUBECONFIG_BYTES as u64;

/// The shortest debounce [`watch`] accepts; shorter values are raised to it.
///
/// The debouncer ticks at a quarter of the debounce time, so a zero debounce would spin.
pub const MIN_DEBOUNCE: Duration = Duration::from_millis(20);

/// The settings that say where kubeconfigs are, and where the files they name may lie, as
/// the binary read them from its flags and environment (discovery itself never reads the
/// environment).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoverySettings {
    /// `KUBECONFIG_PATH`: a `:`-separated list of kubeconfig files, like kubectl's `KUBECONFIG`.
    pub kubeconfig_path: Option<OsString>,
    /// The process's `$KUBECONFIG`, used when `KUBECONFIG_PATH` is unset or empty.
    pub kubeconfig_env: Option<OsString>,
    /// The home directory, for the default `~/.kube/config` when neither list is set.
    pub home_dir: Option<PathBuf>,
    /// `KUBECONFIG_DIR`: a directory whose every regular file is a kubeconfig (typically a
    /// mounted Kubernetes Secret).
    pub kubeconfig_dir: Option<PathBuf>,
    /// `VIGIL_KUBECONFIG_CREDENTIAL_DIRS`: the directories, besides a kubeconfig's own,
    /// under which the files it names may lie (`crate::reference::FileBounds`). Absolute.
    pub kubeconfig_credential_dirs: Vec<PathBuf>,
}

/// One kubeconfig file that discovery reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// The absolute path, as given (symbolic links are not resolved, so a reference built from
    /// it survives a Secret volume's `..data` swap).
    pub path: PathBuf,
    /// Whether a missing file is an error. Only the implicit default `~/.kube/config` may be
    /// absent: a file the operator named must exist.
    pub required: bool,
}

/// Where discovery looks for kubeconfigs, in the order it reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sources {
    files: Vec<SourceFile>,
    dir: Option<PathBuf>,
}

impl Sources {
    /// Chooses the sources as kubectl would: the `KUBECONFIG_PATH` list when it names at least
    /// one file, else the `$KUBECONFIG` list, else `~/.kube/config` (which may be missing);
    /// plus `KUBECONFIG_DIR` when set.
    ///
    /// Empty list entries are ignored, as kubectl does. Relative paths are made absolute
    /// against the current directory, because a reference must be an absolute path.
    pub fn from_settings(settings: &DiscoverySettings) -> Self {
        let listed = |value: &Option<OsString>| -> Option<Vec<PathBuf>> {
            let paths: Vec<PathBuf> = std::env::split_paths(value.as_deref()?)
                .filter(|path| !path.as_os_str().is_empty())
                .collect();
            (!paths.is_empty()).then_some(paths)
        };
        let files =
            match listed(&settings.kubeconfig_path).or_else(|| listed(&settings.kubeconfig_env)) {
                Some(paths) => paths
                    .into_iter()
                    .map(|path| SourceFile {
                        path,
                        required: true,
                    })
                    .collect(),
                None => settings
                    .home_dir
                    .iter()
                    .map(|home| SourceFile {
                        path: home.join(".kube").join("config"),
                        required: false,
                    })
                    .collect(),
            };
        Self::with_files(files, settings.kubeconfig_dir.clone())
    }

    /// Sources made of explicitly named files (each of which must exist) and an optional
    /// directory. Tests and `vigil discover --dry-run FILE…` use this.
    pub fn new(files: impl IntoIterator<Item = PathBuf>, dir: Option<PathBuf>) -> Self {
        let files = files
            .into_iter()
            .map(|path| SourceFile {
                path,
                required: true,
            })
            .collect();
        Self::with_files(files, dir)
    }

    fn with_files(files: Vec<SourceFile>, dir: Option<PathBuf>) -> Self {
        let mut seen = HashSet::new();
        let files = files
            .into_iter()
            .map(|file| SourceFile {
                path: absolute(file.path),
                ..file
            })
            // Naming the same file twice would otherwise make it clash with itself.
            .filter(|file| seen.insert(file.path.clone()))
            .collect();
        Self {
            files,
            dir: dir.map(absolute),
        }
    }

    /// The files, in reading order.
    pub fn files(&self) -> &[SourceFile] {
        &self.files
    }

    /// The directory, read after the files.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }
}

/// Makes a path absolute without touching the file system (no symlink resolution).
/// The path made absolute against the current directory (not resolved: symbolic links
/// stay as named).
pub fn absolute(path: PathBuf) -> PathBuf {
    if path.is_absolute() {
        return path;
    }
    // `std::path::absolute` only fails when the current directory is unknown; the relative
    // path is then kept and its references will be refused later, which is the best we can do.
    std::path::absolute(&path).unwrap_or(path)
}

/// A cluster found in a kubeconfig: one per context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredCluster {
    /// The cluster's name in vigil: the context name.
    pub name: String,
    /// The API server URL of the context's cluster.
    pub endpoint: String,
    /// The cluster's reference, `ABSOLUTE_PATH#CONTEXT` (see [`crate::reference::Reference`]).
    pub reference: String,
    /// The file the context was read from.
    pub source_file: PathBuf,
}

impl fmt::Display for DiscoveredCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cluster {:?} at {} ({})",
            self.name, self.endpoint, self.reference
        )
    }
}

/// Two sources define the same context name; the first one read is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clash {
    /// The context name both files define.
    pub context: String,
    /// The file whose definition is used (read first).
    pub kept_file: PathBuf,
    /// The file whose definition is ignored.
    pub ignored_file: PathBuf,
}

impl fmt::Display for Clash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "context {:?} is defined in {} and again in {}; the first is used, the second ignored",
            self.context,
            self.kept_file.display(),
            self.ignored_file.display()
        )
    }
}

/// A problem with one source: a whole file, or one context in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceError {
    /// The file (or `KUBECONFIG_DIR` itself) the problem is in.
    pub file: PathBuf,
    /// What is wrong, without any value read from the file.
    pub reason: SourceProblem,
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.reason)
    }
}

// No `source()`: the reason is already part of the message, and a log that walks the chain
// would print it twice.
impl std::error::Error for SourceError {}

/// A line and column in a file, both counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextPosition {
    /// The line, from 1.
    pub line: u64,
    /// The column, from 1.
    pub column: u64,
}

impl fmt::Display for TextPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// Why a source file, or a context in it, cannot be used.
///
/// Messages name files, contexts, clusters and users (names are not secret) but never quote
/// a value or a fragment of the file's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceProblem {
    /// The file does not exist.
    #[error("the file does not exist")]
    NotFound,
    /// The path is a symbolic link whose target does not exist.
    #[error("dangling symbolic link (its target does not exist)")]
    DanglingSymlink,
    /// The path exists but is not a regular file; it was not opened (a FIFO would block).
    #[error("not a regular file but {0}")]
    NotRegularFile(&'static str),
    /// The file really lies (after its symbolic links) outside the places credential
    /// files may lie; it was opened but not read.
    #[error(
        "its real path, after symbolic links, lies outside KUBECONFIG_PATH's files, KUBECONFIG_DIR and VIGIL_CREDENTIAL_DIRS"
    )]
    OutsideCredentialRoots,
    /// The operating system refused to read the file (permissions, symlink loop, I/O error).
    #[error("cannot be read: {0}")]
    Unreadable(String),
    /// vigil ran out of its own resources (file descriptors, memory) while reading the
    /// file: nothing is known about the file itself.
    #[error("vigil cannot read it now, out of its own resources: {0}")]
    OutOfResources(String),
    /// `KUBECONFIG_DIR` could not be listed.
    #[error("the directory cannot be listed: {0}")]
    DirUnreadable(String),
    /// The file is larger than [`MAX_KUBECONFIG_BYTES`].
    #[error("larger than the {MAX_KUBECONFIG_BYTES}-byte limit for a kubeconfig")]
    TooLarge,
    /// The file is not UTF-8 or UTF-16 text.
    #[error("not text (binary content, or not UTF-8/UTF-16)")]
    NotText,
    /// The file holds no YAML content (empty, blank or only comments).
    #[error("the file is empty")]
    Empty,
    /// The file is not valid YAML, or its YAML does not have a kubeconfig's shape.
    #[error("invalid kubeconfig YAML{}: {problem}", .position.map(|p| format!(" at {p}")).unwrap_or_default())]
    Yaml {
        /// Where the parser stopped, when it knows.
        position: Option<TextPosition>,
        /// The kind of problem, sanitised so that it never quotes the file's text.
        problem: String,
    },
    /// The file is YAML but not a kubeconfig (e.g. a Deployment manifest).
    #[error("not a kubeconfig: {0}")]
    NotKubeconfig(&'static str),
    /// The path is not valid UTF-8, so no reference (a string) can name it.
    #[error("the path is not valid UTF-8, so no reference can name it")]
    NonUtf8Path,
    /// A context entry has an empty name.
    #[error("a context has an empty name")]
    UnnamedContext,
    /// The same context name appears twice in one file.
    #[error("context {0:?} is defined more than once in this file; the first definition is used")]
    DuplicateContext(String),
    /// The context name cannot be carried by a reference (`#` splits a reference; control
    /// characters would garble logs).
    #[error("context {0:?} cannot be referenced: its name contains '#' or a control character")]
    UnreferenceableContext(String),
    /// The context entry has no `context:` body.
    #[error("context {0:?} has no `context` section")]
    EmptyContext(String),
    /// The context names a cluster that the file does not define.
    #[error("context {context:?} names cluster {cluster:?}, which this file does not define")]
    MissingCluster {
        /// The context.
        context: String,
        /// The cluster name it gives.
        cluster: String,
    },
    /// The context names a user that the file does not define.
    #[error("context {context:?} names user {user:?}, which this file does not define")]
    MissingUser {
        /// The context.
        context: String,
        /// The user name it gives.
        user: String,
    },
    /// The context's cluster has no `server`.
    #[error("context {context:?}: cluster {cluster:?} has no server")]
    MissingServer {
        /// The context.
        context: String,
        /// Its cluster.
        cluster: String,
    },
    /// The context's cluster has a `server` that is not an `http(s)://HOST…` URL.
    #[error(
        "context {context:?}: the server of cluster {cluster:?} is not an http:// or https:// URL"
    )]
    BadServer {
        /// The context.
        context: String,
        /// Its cluster.
        cluster: String,
    },
    /// The server URL embeds `user:password@`: refused so that the password never becomes an
    /// endpoint in the database or a log.
    #[error(
        "context {context:?}: the server of cluster {cluster:?} embeds credentials (user@host), which vigil refuses"
    )]
    CredentialsInServer {
        /// The context.
        context: String,
        /// Its cluster.
        cluster: String,
    },
}

/// What one discovery pass found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoveryReport {
    /// The clusters, in source order (file order, then context order within a file).
    pub clusters: Vec<DiscoveredCluster>,
    /// Context names defined by more than one source.
    pub clashes: Vec<Clash>,
    /// Files and contexts that could not be used. Every other file and context was still read.
    pub errors: Vec<SourceError>,
}

impl fmt::Display for DiscoveryReport {
    /// A multi-line summary for `vigil discover --dry-run` and logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cluster(s), {} clash(es), {} error(s)",
            self.clusters.len(),
            self.clashes.len(),
            self.errors.len()
        )?;
        for cluster in &self.clusters {
            write!(f, "\n  {cluster}")?;
        }
        for clash in &self.clashes {
            write!(f, "\n  clash: {clash}")?;
        }
        for error in &self.errors {
            write!(f, "\n  error: {error}")?;
        }
        Ok(())
    }
}

/// Reads every source and returns the clusters they define, the clashes and the errors.
///
/// This does blocking file I/O; async callers run it with `spawn_blocking`. It never fails as
/// a whole: a broken file becomes one [`SourceError`] and the other files are still read.
#[tracing::instrument(level = "debug", skip_all, fields(files = sources.files.len(), dir = ?sources.dir))]
pub fn discover(sources: &Sources) -> DiscoveryReport {
    let mut pass = Pass::default();
    for file in &sources.files {
        match load_kubeconfig(&file.path) {
            Ok(config) => pass.collect(&file.path, &config),
            Err(SourceProblem::NotFound) if !file.required => {
                tracing::debug!(file = %file.path.display(), "default kubeconfig absent");
            }
            Err(reason) => pass.error(&file.path, reason),
        }
    }
    if let Some(dir) = &sources.dir {
        match dir_entries(dir) {
            Ok(paths) => {
                for path in paths {
                    match load_dir_entry(&path) {
                        Ok(Some(config)) => pass.collect(&path, &config),
                        Ok(None) => tracing::debug!(path = %path.display(), "directory skipped"),
                        Err(reason) => pass.error(&path, reason),
                    }
                }
            }
            Err(reason) => pass.error(dir, reason),
        }
    }
    pass.report
}

/// The state of one discovery pass: the report so far and which file claimed each context.
#[derive(Default)]
struct Pass {
    report: DiscoveryReport,
    claimed: HashMap<String, PathBuf>,
}

impl Pass {
    fn error(&mut self, file: &Path, reason: SourceProblem) {
        self.report.errors.push(SourceError {
            file: file.to_path_buf(),
            reason,
        });
    }

    /// Adds the contexts of one parsed file.
    fn collect(&mut self, file: &Path, config: &Kubeconfig) {
        let Some(file_text) = file.to_str() else {
            self.error(file, SourceProblem::NonUtf8Path);
            return;
        };
        let mut in_this_file = HashSet::new();
        for named in &config.contexts {
            let name = &named.name;
            if name.is_empty() {
                self.error(file, SourceProblem::UnnamedContext);
                continue;
            }
            if !in_this_file.insert(name.as_str()) {
                self.error(file, SourceProblem::DuplicateContext(name.clone()));
                continue;
            }
            if let Some(kept) = self.claimed.get(name) {
                self.report.clashes.push(Clash {
                    context: name.clone(),
                    kept_file: kept.clone(),
                    ignored_file: file.to_path_buf(),
                });
                continue;
            }
            // The first definition claims the name even when it turns out broken below: that
            // is kubectl's rule, and it keeps a broken file from being silently replaced by a
            // later one.
            self.claimed.insert(name.clone(), file.to_path_buf());
            if !is_referenceable_context(name) {
                self.error(file, SourceProblem::UnreferenceableContext(name.clone()));
                continue;
            }
            match context_parts(config, named) {
                Ok(parts) => self.report.clusters.push(DiscoveredCluster {
                    name: name.clone(),
                    endpoint: parts.server.to_owned(),
                    reference: format!("{file_text}#{name}"),
                    source_file: file.to_path_buf(),
                }),
                Err(reason) => self.error(file, reason),
            }
        }
    }
}

/// Whether a `PATH#CONTEXT` reference can carry this context name unambiguously.
fn is_referenceable_context(name: &str) -> bool {
    !name.is_empty() && !name.contains('#') && !name.chars().any(char::is_control)
}

/// The pieces of a context that discovery and resolution both need, checked for consistency.
pub(crate) struct ContextParts<'a> {
    /// The cluster's entry, as the file has it.
    pub(crate) cluster_entry: &'a NamedCluster,
    /// The user's entry, when the context names a user (an entry without a `user:` body
    /// means "no credentials", like an empty one).
    pub(crate) user_entry: Option<&'a NamedAuthInfo>,
    /// The cluster's definition.
    pub(crate) cluster: &'a Cluster,
    /// The cluster's server URL, checked to be `http(s)://HOST…` without credentials.
    pub(crate) server: &'a str,
}

/// Finds a context's cluster and user in the same file, as kubectl does.
pub(crate) fn context_parts<'a>(
    config: &'a Kubeconfig,
    named: &NamedContext,
) -> Result<ContextParts<'a>, SourceProblem> {
    let context_name = named.name.clone();
    let context = named
        .context
        .as_ref()
        .ok_or_else(|| SourceProblem::EmptyContext(context_name.clone()))?;
    let found_cluster = config
        .clusters
        .iter()
        .find(|candidate| candidate.name == context.cluster)
        .ok_or_else(|| SourceProblem::MissingCluster {
            context: context_name.clone(),
            cluster: context.cluster.clone(),
        })?;
    let user_entry = match context.user.as_deref().filter(|user| !user.is_empty()) {
        // A context without a user is valid: the cluster is then contacted anonymously.
        None => None,
        Some(user_name) => Some(
            config
                .auth_infos
                .iter()
                .find(|candidate| candidate.name == user_name)
                .ok_or_else(|| SourceProblem::MissingUser {
                    context: context_name.clone(),
                    user: user_name.to_owned(),
                })?,
        ),
    };
    let cluster = found_cluster
        .cluster
        .as_ref()
        .ok_or_else(|| SourceProblem::MissingServer {
            context: context_name.clone(),
            cluster: found_cluster.name.clone(),
        })?;
    let server = cluster
        .server
        .as_deref()
        .filter(|server| !server.is_empty())
        .ok_or_else(|| SourceProblem::MissingServer {
            context: context_name.clone(),
            cluster: found_cluster.name.clone(),
        })?;
    match server::shape(server) {
        ServerShape::Url => {}
        ServerShape::NotHttp => {
            return Err(SourceProblem::BadServer {
                context: context_name,
                cluster: found_cluster.name.clone(),
            });
        }
        ServerShape::WithCredentials => {
            return Err(SourceProblem::CredentialsInServer {
                context: context_name,
                cluster: found_cluster.name.clone(),
            });
        }
    }
    Ok(ContextParts {
        cluster_entry: found_cluster,
        user_entry,
        cluster,
        server,
    })
}

/// Lists `KUBECONFIG_DIR`: every entry except dot-entries, sorted by file name.
///
/// Dot-entries are skipped because a Kubernetes Secret volume keeps its real files under
/// `..2026_…/` and `..data`, and shows each key as a plain-named symlink through `..data`; the
/// plain names are the ones to read (and to put in references, so a `..data` swap keeps them).
fn dir_entries(dir: &Path) -> Result<Vec<PathBuf>, SourceProblem> {
    let listing = fs::read_dir(dir).map_err(|error| match error.kind() {
        io::ErrorKind::NotFound => SourceProblem::NotFound,
        _ => SourceProblem::DirUnreadable(error.to_string()),
    })?;
    let mut names: Vec<OsString> = Vec::new();
    for entry in listing {
        let entry = entry.map_err(|error| SourceProblem::DirUnreadable(error.to_string()))?;
        let name = entry.file_name();
        if !name.as_encoded_bytes().starts_with(b".") {
            names.push(name);
        }
    }
    names.sort();
    Ok(names.into_iter().map(|name| dir.join(name)).collect())
}

/// Loads one `KUBECONFIG_DIR` entry; `None` for a subdirectory, which is skipped (not an
/// error: only files are kubeconfigs, and a Secret volume holds no plain-named directories).
fn load_dir_entry(path: &Path) -> Result<Option<Kubeconfig>, SourceProblem> {
    match fs::metadata(path) {
        Ok(metadata) if metadata.is_dir() => Ok(None),
        _ => load_kubeconfig(path).map(Some),
    }
}

/// Reads and parses one kubeconfig file, without ever blocking on a special file or quoting
/// the file's content in an error.
///
/// Unlike `Kubeconfig::read_from`, this checks the file type before opening (a FIFO would
/// block the open), caps the size, and leaves relative paths in the file untouched (resolution
/// resolves them against the file's directory as kubectl does).
pub(crate) fn load_kubeconfig(path: &Path) -> Result<Kubeconfig, SourceProblem> {
    load_kubeconfig_checked(path, |_| Ok(()))
}

/// [`load_kubeconfig`], with `check` run on the opened file before a byte of it is read
/// (reference resolution checks there where the file really lies).
pub(crate) fn load_kubeconfig_checked(
    path: &Path,
    check: impl FnOnce(&File) -> Result<(), SourceProblem>,
) -> Result<Kubeconfig, SourceProblem> {
    let metadata = fs::metadata(path).map_err(|error| metadata_problem(path, &error))?;
    check_regular(&metadata)?;
    if metadata.len() > MAX_KUBECONFIG_BYTES {
        return Err(SourceProblem::TooLarge);
    }
    // Opened without blocking: a FIFO put in the file's place after the check above would
    // block a plain open until some writer came.
    let file = crate::reference::open_nonblocking(path).map_err(|error| read_problem(&error))?;
    // The path may have been replaced between the check and the open; what was opened counts.
    let opened = file.metadata().map_err(|error| read_problem(&error))?;
    check_regular(&opened)?;
    check(&file)?;
    let mut bytes = Vec::new();
    file.take(MAX_KUBECONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| read_problem(&error))?;
    if bytes.len() as u64 > MAX_KUBECONFIG_BYTES {
        return Err(SourceProblem::TooLarge);
    }
    let text = vigil_kubeconfig_rules::text::decode(bytes).map_err(|_| SourceProblem::NotText)?;
    parse_kubeconfig(&text)
}

/// Explains a failed open or read: vigil's own resources running out says nothing about
/// the file; anything else is the file's.
fn read_problem(error: &io::Error) -> SourceProblem {
    if is_out_of_resources(error) {
        SourceProblem::OutOfResources(error.to_string())
    } else {
        SourceProblem::Unreadable(error.to_string())
    }
}

/// Whether the OS refused for want of vigil's own resources: descriptors (per process or
/// system-wide) or kernel memory.
pub(crate) fn is_out_of_resources(error: &io::Error) -> bool {
    const EMFILE: i32 = 24;
    const ENFILE: i32 = 23;
    const ENOMEM: i32 = 12;
    const ENOBUFS: i32 = 105;
    error.kind() == io::ErrorKind::OutOfMemory
        || matches!(
            error.raw_os_error(),
            Some(EMFILE | ENFILE | ENOMEM | ENOBUFS)
        )
}

/// Explains a failed `stat`: a missing file, a dangling link, or an OS error (loops included).
fn metadata_problem(path: &Path, error: &io::Error) -> SourceProblem {
    if error.kind() != io::ErrorKind::NotFound {
        return read_problem(error);
    }
    match fs::symlink_metadata(path) {
        Ok(link) if link.file_type().is_symlink() => SourceProblem::DanglingSymlink,
        _ => SourceProblem::NotFound,
    }
}

fn check_regular(metadata: &Metadata) -> Result<(), SourceProblem> {
    let file_type = metadata.file_type();
    if file_type.is_file() {
        return Ok(());
    }
    if file_type.is_dir() {
        return Err(SourceProblem::NotRegularFile("a directory"));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return Err(SourceProblem::NotRegularFile("a FIFO (named pipe)"));
        }
        if file_type.is_socket() {
            return Err(SourceProblem::NotRegularFile("a socket"));
        }
        if file_type.is_block_device() || file_type.is_char_device() {
            return Err(SourceProblem::NotRegularFile("a device"));
        }
    }
    Err(SourceProblem::NotRegularFile("a special file"))
}

/// Parses kubeconfig text with kube's types and checks that it is a kubeconfig at all.
fn parse_kubeconfig(text: &str) -> Result<Kubeconfig, SourceProblem> {
    if text.trim().is_empty() {
        return Err(SourceProblem::Empty);
    }
    let config = Kubeconfig::from_yaml(text).map_err(|error| match error {
        KubeconfigError::Parse(error) => {
            let (position, problem) = yaml_parse_problem(&error, text);
            let position = position.map(|(line, column)| TextPosition { line, column });
            SourceProblem::Yaml { position, problem }
        }
        KubeconfigError::KindMismatch | KubeconfigError::ApiVersionMismatch => {
            SourceProblem::NotKubeconfig("its YAML documents disagree on kind or apiVersion")
        }
        // `from_yaml` only parses and merges; anything else would be a new kube error whose
        // text we have not vetted, so it is not passed on.
        _ => SourceProblem::NotKubeconfig("kube cannot read it as a kubeconfig"),
    })?;
    if config.kind.as_deref().is_some_and(|kind| kind != "Config") {
        return Err(SourceProblem::NotKubeconfig("its kind is not Config"));
    }
    let has_kubeconfig_content = config.kind.is_some()
        || config.api_version.is_some()
        || config.current_context.is_some()
        || !config.clusters.is_empty()
        || !config.contexts.is_empty()
        || !config.auth_infos.is_empty();
    if !has_kubeconfig_content {
        // Only comments parse to nothing at all; other YAML lands in the catch-all `other`.
        return Err(if config.other.is_empty() && config.preferences.is_none() {
            SourceProblem::Empty
        } else {
            SourceProblem::NotKubeconfig("it has no kind, clusters, contexts or users")
        });
    }
    Ok(config)
}

/// Why [`watch`] could not start.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The operating system's file watcher could not be created (e.g. inotify limits).
    #[error("cannot start the kubeconfig file watcher")]
    Start(#[source] notify::Error),
    /// A directory could not be watched.
    #[error("cannot watch {}", .path.display())]
    Watch {
        /// The directory.
        path: PathBuf,
        /// The watcher's error.
        #[source]
        source: notify::Error,
    },
}

/// Keeps the kubeconfig sources watched; dropping it stops the watching.
pub struct SourceWatcher {
    // Never read: it is held for its `Drop`, which stops the OS watch and the debounce thread.
    _debouncer: Debouncer<RecommendedWatcher, RecommendedCache>,
    watched: Vec<PathBuf>,
}

impl SourceWatcher {
    /// The directories actually watched (the parents of the files, and `KUBECONFIG_DIR`).
    pub fn watched(&self) -> &[PathBuf] {
        &self.watched
    }
}

impl fmt::Debug for SourceWatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceWatcher")
            .field("watched", &self.watched)
            .finish_non_exhaustive()
    }
}

/// Watches the sources and sends `()` on `on_change` (debounced) when any of them may have
/// changed, so the caller runs [`discover`] again.
///
/// Each `KUBECONFIG_PATH` file is watched through its parent directory, non-recursively, with
/// events filtered to the named file: watching the file itself would lose it when an editor or
/// a config tool replaces it by renaming a new file over it. `KUBECONFIG_DIR` is watched
/// recursively so that a Secret volume's `..data` swap is seen. A parent directory or
/// `KUBECONFIG_DIR` that does not exist is not watched (a warning is logged).
///
/// Notifications coalesce: when one is already waiting in the channel, no second one is
/// queued, so a channel of capacity 1 is enough. Watcher errors (e.g. an overflowed event
/// queue) are logged and also notify, since a change may have been missed.
pub fn watch(
    sources: &Sources,
    debounce: Duration,
    on_change: mpsc::Sender<()>,
) -> Result<SourceWatcher, WatchError> {
    let filter = ChangeFilter {
        files: sources.files.iter().map(|file| file.path.clone()).collect(),
        dir: sources.dir.clone(),
    };
    let handler = move |result: DebounceEventResult| {
        let relevant = match result {
            Ok(events) => events.iter().any(|event| filter.is_relevant(event)),
            Err(errors) => {
                for error in &errors {
                    tracing::warn!(%error, "kubeconfig watcher error; rediscovering");
                }
                true
            }
        };
        if relevant {
            // A full channel already holds a pending notification; a closed one has no reader.
            let _ = on_change.try_send(());
        }
    };
    let mut debouncer =
        new_debouncer(debounce.max(MIN_DEBOUNCE), None, handler).map_err(WatchError::Start)?;

    // The third field says whether a missing directory is worth a warning: the
    // implicit default `~/.kube` may well not exist on a server.
    let mut targets: Vec<(PathBuf, RecursiveMode, bool)> = Vec::new();
    for file in &sources.files {
        if let Some(parent) = file.path.parent()
            && !targets.iter().any(|(path, _, _)| path == parent)
        {
            targets.push((
                parent.to_path_buf(),
                RecursiveMode::NonRecursive,
                file.required,
            ));
        }
    }
    if let Some(dir) = &sources.dir {
        targets.push((dir.clone(), RecursiveMode::Recursive, true));
    }
    let mut watched = Vec::new();
    for (path, mode, required) in targets {
        if !path.is_dir() && !required {
            tracing::debug!(path = %path.display(), "default kubeconfig directory does not exist; not watched");
            continue;
        }
        if !path.is_dir() {
            tracing::warn!(path = %path.display(), "kubeconfig directory does not exist; not watched");
            continue;
        }
        debouncer
            .watch(&path, mode)
            .map_err(|source| WatchError::Watch {
                path: path.clone(),
                source,
            })?;
        watched.push(path);
    }
    Ok(SourceWatcher {
        _debouncer: debouncer,
        watched,
    })
}

/// Decides whether a file system event concerns a source.
struct ChangeFilter {
    files: Vec<PathBuf>,
    dir: Option<PathBuf>,
}

impl ChangeFilter {
    fn is_relevant(&self, event: &Event) -> bool {
        // Opening and reading a file are access events: discovery's own reads would otherwise
        // trigger the next discovery, forever.
        if matches!(event.kind, EventKind::Access(_)) {
            return false;
        }
        if event.need_rescan() {
            return true;
        }
        event.paths.iter().any(|path| {
            self.files.iter().any(|file| file == path)
                || self.dir.as_deref().is_some_and(|dir| path.starts_with(dir))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_filter_ignores_reads_and_other_files() {
        use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, Flag, ModifyKind};
        let filter = ChangeFilter {
            files: vec![PathBuf::from("/home/u/.kube/config")],
            dir: Some(PathBuf::from("/run/kubeconfigs")),
        };
        let check = |kind: EventKind, path: &str, expected: bool| {
            let event = Event::new(kind).add_path(PathBuf::from(path));
            assert_eq!(filter.is_relevant(&event), expected, "{event:?}");
        };
        let open = EventKind::Access(AccessKind::Open(AccessMode::Any));
        let write = EventKind::Modify(ModifyKind::Data(DataChange::Any));
        let create = EventKind::Create(CreateKind::File);
        // Discovery's own reads must not trigger the next discovery.
        check(open, "/home/u/.kube/config", false);
        check(open, "/run/kubeconfigs/..data", false);
        check(write, "/home/u/.kube/config", true);
        check(create, "/home/u/.kube/config", true);
        check(write, "/home/u/.kube/cache/discovery", false);
        check(create, "/home/u/.kube/config.lock", false);
        check(create, "/run/kubeconfigs/..data_tmp", true);
        check(write, "/run/kubeconfigs/..2026_01_01/config", true);
        check(write, "/run/other/config", false);
        let rescan = Event::new(EventKind::Other).set_flag(Flag::Rescan);
        assert!(filter.is_relevant(&rescan));
    }
}
