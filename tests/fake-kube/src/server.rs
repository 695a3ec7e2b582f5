//! The listeners: one TLS endpoint per fake cluster, each on its own loopback address with a
//! fixed port, so that a cluster that comes back gets its address back.
//!
//! A request goes through, in order: the request log, the fault plan, authentication and
//! authorisation, and finally [`crate::resources::respond`], which knows nothing of sockets.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::pki_types::CertificateDer;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::auth::{
    AccessPolicy, PeerCertificate, RequestAttributes, TokenTable, User, authenticate, authorize,
};
use crate::faults::{
    AcceptAction, CaRotation, Fault, FaultState, FlapStep, HangPoint, RequestAction,
};
use crate::request_log::{Arrival, DEFAULT_LOG_CAPACITY, LogCounts, RequestLog};
use crate::resources::{ApiRequest, Fixtures, respond, status_body};
use crate::tls::{CertificateAuthority, IssuedCertificate, ServerTls, TlsError, identify_peer};

/// Clusters per /24 of an address block: the last octet runs from 1 to 250.
const HOSTS_PER_SUBNET: usize = 250;
/// The most clusters one address block can hold.
pub const MAX_CLUSTERS: usize = 256 * HOSTS_PER_SUBNET;
/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// A hung request is released after this long at the latest, so a forgotten hang cannot
/// pile up tasks forever.
const MAX_HANG: Duration = Duration::from_secs(600);
/// How many random address blocks [`AddressPlan::Auto`] tries before giving up.
const AUTO_ATTEMPTS: usize = 16;
/// The listen backlog of each cluster.
const BACKLOG: u32 = 1024;

/// Errors while starting a fleet.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// A listener could not be bound.
    #[error("cannot listen on {address}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// More clusters than an address block holds.
    #[error("{requested} clusters do not fit in one address block (at most {max})")]
    TooManyClusters {
        /// Clusters asked for.
        requested: usize,
        /// The limit.
        max: usize,
    },
    /// No free random address block was found.
    #[error("no free loopback address block after {AUTO_ATTEMPTS} attempts")]
    NoFreeBlock(#[source] io::Error),
    /// Certificates could not be generated.
    #[error("cannot generate the clusters' certificates")]
    Tls(#[from] TlsError),
    /// The certificate generation threads failed.
    #[error("certificate generation failed")]
    Generation(#[source] tokio::task::JoinError),
}

/// Errors of the per-cluster controls.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The listener could not be bound again.
    #[error("cannot listen on {address} again")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A flap pattern needs at least one step.
    #[error("a flap pattern needs at least one step")]
    EmptyFlap,
    /// A certificate could not be generated.
    #[error("cannot generate a certificate")]
    Tls(#[from] TlsError),
}

/// Where the clusters listen: cluster `i` gets `127.{block}.{i / 250}.{i % 250 + 1}` and the
/// same port for all. Every address is in 127.0.0.0/8, which Linux routes to the loopback
/// interface as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressPlan {
    /// A given block and port (for the binary: `127.10.0.1:6443`, `127.10.0.2:6443`, …).
    Block {
        /// The second octet.
        block: u8,
        /// The port, the same for every cluster; choose one below the ephemeral range.
        port: u16,
    },
    /// A random block and a random port in 10000–29999, tried again when taken. For tests,
    /// which run in parallel and must not collide.
    Auto,
}

impl Default for AddressPlan {
    fn default() -> Self {
        Self::Block {
            block: 10,
            port: 6443,
        }
    }
}

/// The address of cluster `index` in block `block`.
pub fn cluster_ip(block: u8, index: usize) -> Option<Ipv4Addr> {
    if index >= MAX_CLUSTERS {
        return None;
    }
    let subnet = u8::try_from(index / HOSTS_PER_SUBNET).ok()?;
    let host = u8::try_from(index % HOSTS_PER_SUBNET + 1).ok()?;
    Some(Ipv4Addr::new(127, block, subnet, host))
}

/// Configures and starts a [`Fleet`].
pub struct FleetBuilder {
    clusters: usize,
    name_prefix: String,
    addresses: AddressPlan,
    fixtures: Option<Arc<Fixtures>>,
    per_cluster: HashMap<String, Fixtures>,
    tokens: Vec<(String, User)>,
    policy: AccessPolicy,
    log_capacity: usize,
}

impl fmt::Debug for FleetBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetBuilder")
            .field("clusters", &self.clusters)
            .field("name_prefix", &self.name_prefix)
            .field("addresses", &self.addresses)
            .field(
                "per_cluster_fixtures",
                &self.per_cluster.keys().collect::<Vec<_>>(),
            )
            .field("policy", &self.policy)
            .field("log_capacity", &self.log_capacity)
            .finish_non_exhaustive()
    }
}

impl Default for FleetBuilder {
    fn default() -> Self {
        Self {
            clusters: 1,
            name_prefix: "cluster-".to_owned(),
            addresses: AddressPlan::default(),
            fixtures: None,
            per_cluster: HashMap::new(),
            tokens: Vec::new(),
            policy: AccessPolicy::default(),
            log_capacity: DEFAULT_LOG_CAPACITY,
        }
    }
}

impl FleetBuilder {
    /// How many clusters to serve (default 1).
    pub fn clusters(mut self, count: usize) -> Self {
        self.clusters = count;
        self
    }

    /// Cluster names are this prefix and a five-digit index (default `cluster-`, giving
    /// `cluster-00000`, `cluster-00001`, …).
    pub fn name_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.name_prefix = prefix.into();
        self
    }

    /// Where the clusters listen (default block 10, port 6443).
    pub fn addresses(mut self, plan: AddressPlan) -> Self {
        self.addresses = plan;
        self
    }

    /// The objects every cluster serves (default [`Fixtures::empty`]).
    pub fn fixtures(mut self, fixtures: Fixtures) -> Self {
        self.fixtures = Some(Arc::new(fixtures));
        self
    }

    /// The objects one cluster serves instead of the shared ones.
    pub fn fixtures_for(mut self, cluster: impl Into<String>, fixtures: Fixtures) -> Self {
        self.per_cluster.insert(cluster.into(), fixtures);
        self
    }

    /// A bearer token accepted by every cluster, besides each cluster's own admin and
    /// reader tokens.
    pub fn token(mut self, token: impl Into<String>, user: User) -> Self {
        self.tokens.push((token.into(), user));
        self
    }

    /// Who may read resources (default: the `system:masters` group).
    pub fn policy(mut self, policy: AccessPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How many request-log entries each cluster keeps (default 1024; counters are always
    /// exact).
    pub fn log_capacity(mut self, capacity: usize) -> Self {
        self.log_capacity = capacity;
        self
    }

    /// Binds every cluster's address, generates their certificates (in parallel) and starts
    /// serving on the current Tokio runtime.
    #[tracing::instrument(skip(self), fields(clusters = self.clusters))]
    pub async fn start(mut self) -> Result<Fleet, FleetError> {
        let started = Instant::now();
        let count = self.clusters;
        if count > MAX_CLUSTERS {
            return Err(FleetError::TooManyClusters {
                requested: count,
                max: MAX_CLUSTERS,
            });
        }
        raise_open_files_limit(count);
        let (listeners, addresses) = bind_all(self.addresses, count)?;
        let bound = started.elapsed();

        let names: Vec<String> = (0..count)
            .map(|i| format!("{}{i:05}", self.name_prefix))
            .collect();
        let generated = {
            let names = names.clone();
            let addresses = addresses.clone();
            tokio::task::spawn_blocking(move || generate_tls(&names, &addresses))
                .await
                .map_err(FleetError::Generation)??
        };
        let generated_at = started.elapsed();

        let shared_fixtures = self
            .fixtures
            .take()
            .unwrap_or_else(|| Arc::new(Fixtures::empty()));
        let policy = Arc::new(self.policy);
        let http = Arc::new(http_builder());
        let mut clusters = Vec::with_capacity(count);
        let mut by_name = HashMap::with_capacity(count);
        for (index, ((name, address), (listener, (ca, tls)))) in names
            .into_iter()
            .zip(addresses)
            .zip(listeners.into_iter().zip(generated))
            .enumerate()
        {
            let fixtures = match self.per_cluster.remove(&name) {
                Some(own) => Arc::new(own),
                None => shared_fixtures.clone(),
            };
            let mut tokens = TokenTable::default();
            let admin_token = random_token()?;
            let reader_token = random_token()?;
            tokens.insert(admin_token.clone(), User::admin());
            tokens.insert(reader_token.clone(), User::reader_without_rbac());
            for (token, user) in &self.tokens {
                tokens.insert(token.clone(), user.clone());
            }
            let cluster = Arc::new(Cluster {
                index,
                name: name.clone(),
                address,
                client_cas: Mutex::new(vec![ca.certificate_der().clone()]),
                tls: RwLock::new(Arc::new(tls)),
                ca_generation: Mutex::new(1),
                faults: Mutex::new(FaultState::default()),
                fault_changed: watch::Sender::new(0),
                kill: watch::Sender::new(0),
                tokens: RwLock::new(tokens),
                admin_token,
                reader_token,
                policy: policy.clone(),
                fixtures: RwLock::new(fixtures),
                log: RequestLog::new(self.log_capacity),
                listener: Mutex::new(None),
                transition: tokio::sync::Mutex::new(()),
                http: http.clone(),
            });
            let task = tokio::spawn(accept_loop(cluster.clone(), listener));
            *lock(&cluster.listener) = Some(task);
            by_name.insert(name, index);
            clusters.push(ClusterHandle(cluster));
        }
        tracing::info!(
            clusters = count,
            bind_ms = bound.as_millis() as u64,
            certificates_ms = (generated_at - bound).as_millis() as u64,
            total_ms = started.elapsed().as_millis() as u64,
            "fake clusters serving"
        );
        Ok(Fleet { clusters, by_name })
    }
}

/// Many fake clusters served by this process. Dropping the fleet stops them all.
#[derive(Debug)]
pub struct Fleet {
    clusters: Vec<ClusterHandle>,
    by_name: HashMap<String, usize>,
}

impl Fleet {
    /// A builder with the defaults: one cluster, block 10, port 6443, empty fixtures.
    pub fn builder() -> FleetBuilder {
        FleetBuilder::default()
    }

    /// Every cluster, in index order.
    pub fn clusters(&self) -> &[ClusterHandle] {
        &self.clusters
    }

    /// The cluster with this index.
    pub fn get(&self, index: usize) -> Option<&ClusterHandle> {
        self.clusters.get(index)
    }

    /// The cluster with this name.
    pub fn cluster(&self, name: &str) -> Option<&ClusterHandle> {
        self.by_name.get(name).and_then(|i| self.clusters.get(*i))
    }

    /// How many clusters the fleet serves.
    pub fn len(&self) -> usize {
        self.clusters.len()
    }

    /// Whether the fleet serves no cluster.
    pub fn is_empty(&self) -> bool {
        self.clusters.is_empty()
    }

    /// The sum of every cluster's counters.
    pub fn counts(&self) -> LogCounts {
        self.clusters
            .iter()
            .map(|c| c.log().counts())
            .fold(LogCounts::default(), |a, b| LogCounts {
                requests: a.requests + b.requests,
                connections: a.connections + b.connections,
                handshakes: a.handshakes + b.handshakes,
                resets: a.resets + b.resets,
            })
    }

    /// Stops every cluster and waits until their listeners are closed.
    pub async fn shutdown(self) {
        for cluster in &self.clusters {
            if let Some(task) = cluster.0.stop() {
                // The task was aborted; its result says only that.
                let _ = task.await;
            }
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for cluster in &self.clusters {
            cluster.0.stop();
        }
    }
}

/// A cheap, cloneable handle on one fake cluster: its identity, its credentials, its
/// faults and its request log. Fault changes take effect on the next request (on the next
/// connection for [`Fault::Refuse`] and for hanging the handshake).
#[derive(Clone)]
pub struct ClusterHandle(Arc<Cluster>);

impl fmt::Debug for ClusterHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterHandle")
            .field("name", &self.0.name)
            .field("address", &self.0.address)
            .finish()
    }
}

struct Cluster {
    index: usize,
    name: String,
    address: SocketAddr,
    /// Every CA this cluster has had: client certificates from any of them authenticate.
    client_cas: Mutex<Vec<CertificateDer<'static>>>,
    tls: RwLock<Arc<ServerTls>>,
    ca_generation: Mutex<u32>,
    faults: Mutex<FaultState>,
    /// Bumped on every fault change, to release hung requests and handshakes.
    fault_changed: watch::Sender<u64>,
    /// Bumped to drop every open connection (refuse, shutdown).
    kill: watch::Sender<u64>,
    tokens: RwLock<TokenTable>,
    admin_token: String,
    reader_token: String,
    policy: Arc<AccessPolicy>,
    fixtures: RwLock<Arc<Fixtures>>,
    log: RequestLog,
    listener: Mutex<Option<JoinHandle<()>>>,
    /// Serialises fault changes, which may close and re-open the listener.
    transition: tokio::sync::Mutex<()>,
    http: Arc<auto::Builder<TokioExecutor>>,
}

/// Locks a std mutex. Every critical section here leaves its data consistent, so a lock
/// poisoned by a panicking thread is still safe to use.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn read<T: Clone>(lock: &RwLock<T>) -> T {
    lock.read().unwrap_or_else(PoisonError::into_inner).clone()
}

fn write<T>(lock: &RwLock<T>, value: T) {
    *lock.write().unwrap_or_else(PoisonError::into_inner) = value;
}

impl Cluster {
    /// Closes the listener and drops every connection; returns the aborted accept task.
    fn stop(&self) -> Option<JoinHandle<()>> {
        let task = lock(&self.listener).take();
        if let Some(task) = &task {
            task.abort();
        }
        self.kill.send_modify(|epoch| *epoch += 1);
        task
    }
}

impl ClusterHandle {
    /// The cluster's name (also its kubeconfig context name).
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The cluster's index in its fleet.
    pub fn index(&self) -> usize {
        self.0.index
    }

    /// The address the cluster listens on.
    pub fn address(&self) -> SocketAddr {
        self.0.address
    }

    /// The API server URL, e.g. `https://127.10.0.1:6443`.
    pub fn server_url(&self) -> String {
        format!("https://{}", self.0.address)
    }

    /// The PEM of the CA that signed the current server certificate.
    pub fn ca_pem(&self) -> String {
        read(&self.0.tls).ca.certificate_pem().to_owned()
    }

    /// The bearer token of `kubernetes-admin` (group `system:masters`) on this cluster.
    pub fn admin_token(&self) -> &str {
        &self.0.admin_token
    }

    /// The bearer token of `reader-without-rbac`, which authenticates but may only read
    /// the public paths: resource requests get 403.
    pub fn reader_token(&self) -> &str {
        &self.0.reader_token
    }

    /// The administrator's client certificate (CN `kubernetes-admin`, O `system:masters`),
    /// signed by the current CA; issued once per CA.
    pub fn admin_client_certificate(&self) -> Result<Arc<IssuedCertificate>, ClusterError> {
        Ok(read(&self.0.tls).admin_client()?)
    }

    /// Issues a client certificate for any user, signed by the current CA.
    pub fn issue_client_certificate(&self, user: &User) -> Result<IssuedCertificate, ClusterError> {
        Ok(read(&self.0.tls).ca.issue_client_certificate(user)?)
    }

    /// Accepts a further bearer token.
    pub fn add_token(&self, token: impl Into<String>, user: User) {
        self.0
            .tokens
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token, user);
    }

    /// Stops accepting a bearer token (as when a token is revoked); returns whether it was known.
    pub fn revoke_token(&self, token: &str) -> bool {
        self.0
            .tokens
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(token)
    }

    /// Replaces the objects this cluster serves.
    pub fn set_fixtures(&self, fixtures: Fixtures) {
        write(&self.0.fixtures, Arc::new(fixtures));
    }

    /// The request log.
    pub fn log(&self) -> &RequestLog {
        &self.0.log
    }

    /// The fault in force.
    pub fn fault(&self) -> Fault {
        lock(&self.0.faults).fault().clone()
    }

    /// Whether the listener is open (false while refusing).
    pub fn is_listening(&self) -> bool {
        lock(&self.0.listener).is_some()
    }

    /// Sets the fault. [`Fault::Refuse`] closes the listener (and open connections) before
    /// returning; any other fault re-opens it on the same address. Hung requests and
    /// handshakes are released (their connections closed) by any change.
    pub async fn set_fault(&self, fault: Fault) -> Result<(), ClusterError> {
        if matches!(&fault, Fault::Flap { steps } if steps.is_empty()) {
            return Err(ClusterError::EmptyFlap);
        }
        let cluster = &self.0;
        let _transition = cluster.transition.lock().await;
        let refuse = fault == Fault::Refuse;
        tracing::debug!(cluster = %cluster.name, ?fault, "fault set");
        lock(&cluster.faults).set(fault);
        cluster
            .fault_changed
            .send_modify(|generation| *generation += 1);
        if refuse {
            if let Some(task) = cluster.stop() {
                // Waiting for the aborted task guarantees that the socket is closed when
                // this returns, so the caller's next connect is refused.
                let _ = task.await;
            }
        } else if lock(&cluster.listener).is_none() {
            let listener = bind(cluster.address).map_err(|source| ClusterError::Bind {
                address: cluster.address,
                source,
            })?;
            let task = tokio::spawn(accept_loop(cluster.clone(), listener));
            *lock(&cluster.listener) = Some(task);
        }
        Ok(())
    }

    /// Refuses connections: `ECONNREFUSED` until another fault is set.
    pub async fn refuse(&self) -> Result<(), ClusterError> {
        self.set_fault(Fault::Refuse).await
    }

    /// Clears every fault; a refusing cluster listens again on the same address.
    pub async fn come_back(&self) -> Result<(), ClusterError> {
        self.set_fault(Fault::None).await
    }

    /// Stops answering, at the handshake or at the request.
    pub async fn hang(&self, at: HangPoint) -> Result<(), ClusterError> {
        self.set_fault(Fault::Hang { at }).await
    }

    /// Answers every request after `delay`.
    pub async fn delay(&self, delay: Duration) -> Result<(), ClusterError> {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.set_fault(Fault::Delay { ms }).await
    }

    /// Answers every request with `code` (e.g. 500, 401, 403) and a `Status` body.
    pub async fn fail_with(&self, code: u16) -> Result<(), ClusterError> {
        self.set_fault(Fault::Status { code }).await
    }

    /// Applies `steps` one per request, cycling (see [`FlapStep`]).
    pub async fn flap(&self, steps: Vec<FlapStep>) -> Result<(), ClusterError> {
        self.set_fault(Fault::Flap { steps }).await
    }

    /// Replaces the server certificate. With [`CaRotation::New`] a new CA signs it, so
    /// clients that trust only the old CA fail their handshake; client certificates from
    /// the old CA keep authenticating. Connections already open keep their session.
    pub fn rotate_certificate(&self, rotation: CaRotation) -> Result<(), ClusterError> {
        let cluster = &self.0;
        let current = read(&cluster.tls);
        let ca = match rotation {
            CaRotation::Same => current.ca.clone(),
            CaRotation::New => {
                let mut generation = lock(&cluster.ca_generation);
                *generation += 1;
                Arc::new(CertificateAuthority::generate(&ca_name(
                    &cluster.name,
                    *generation,
                ))?)
            }
        };
        let server = ca.issue_server_certificate(cluster.address.ip())?;
        let mut client_cas = lock(&cluster.client_cas);
        if rotation == CaRotation::New {
            client_cas.push(ca.certificate_der().clone());
        }
        let tls = ServerTls::new(ca, &server, &client_cas)?;
        write(&cluster.tls, Arc::new(tls));
        tracing::debug!(cluster = %cluster.name, ?rotation, "certificate rotated");
        Ok(())
    }
}

fn ca_name(cluster: &str, generation: u32) -> String {
    format!("fake-kube {cluster} CA {generation}")
}

/// Raises the soft open-files limit to the hard limit: each cluster holds a listening
/// socket, and each connection another descriptor.
fn raise_open_files_limit(clusters: usize) {
    match rlimit::increase_nofile_limit(u64::MAX) {
        // One descriptor per listener, plus room for connections.
        Ok(limit) if limit < clusters as u64 + 1024 => {
            tracing::warn!(
                limit,
                clusters,
                "the open-files limit is low for this many clusters"
            );
        }
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "cannot raise the open-files limit"),
    }
}

/// Binds a listener with `SO_REUSEADDR`, so that a cluster that comes back can bind its
/// address again while old connections linger in `TIME_WAIT`.
fn bind(address: SocketAddr) -> io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(BACKLOG)
}

fn bind_block(
    block: u8,
    port: u16,
    count: usize,
) -> Result<(Vec<TcpListener>, Vec<SocketAddr>), (SocketAddr, io::Error)> {
    let mut listeners = Vec::with_capacity(count);
    let mut addresses = Vec::with_capacity(count);
    for index in 0..count {
        let ip = cluster_ip(block, index).ok_or_else(|| {
            let address = SocketAddr::from((Ipv4Addr::new(127, block, 255, 255), port));
            (
                address,
                io::Error::new(io::ErrorKind::InvalidInput, "address block exhausted"),
            )
        })?;
        let address = SocketAddr::from((ip, port));
        let listener = bind(address).map_err(|error| (address, error))?;
        listeners.push(listener);
        addresses.push(address);
    }
    Ok((listeners, addresses))
}

fn bind_all(
    plan: AddressPlan,
    count: usize,
) -> Result<(Vec<TcpListener>, Vec<SocketAddr>), FleetError> {
    match plan {
        AddressPlan::Block { block, port } => bind_block(block, port, count)
            .map_err(|(address, source)| FleetError::Bind { address, source }),
        AddressPlan::Auto => {
            let mut last = io::Error::other("no attempt made");
            for _ in 0..AUTO_ATTEMPTS {
                let mut random = [0u8; 3];
                crate::tls::random_bytes(&mut random)?;
                let block = 20 + random[0] % 230;
                let port = 10_000 + u16::from_be_bytes([random[1], random[2]]) % 20_000;
                match bind_block(block, port, count) {
                    Ok(bound) => return Ok(bound),
                    Err((_, error)) if error.kind() == io::ErrorKind::AddrInUse => last = error,
                    Err((address, source)) => return Err(FleetError::Bind { address, source }),
                }
            }
            Err(FleetError::NoFreeBlock(last))
        }
    }
}

/// Generates each cluster's CA and server configuration, on all cores.
fn generate_tls(
    names: &[String],
    addresses: &[SocketAddr],
) -> Result<Vec<(Arc<CertificateAuthority>, ServerTls)>, TlsError> {
    let one = |(name, address): (&String, &SocketAddr)| -> Result<(Arc<CertificateAuthority>, ServerTls), TlsError> {
        let ca = Arc::new(CertificateAuthority::generate(&ca_name(name, 1))?);
        let server = ca.issue_server_certificate(address.ip())?;
        let tls = ServerTls::new(ca.clone(), &server, &[ca.certificate_der().clone()])?;
        Ok((ca, tls))
    };
    let threads = std::thread::available_parallelism().map_or(2, usize::from);
    let chunk = names.len().div_ceil(threads).max(16);
    std::thread::scope(|scope| {
        let workers: Vec<_> = names
            .chunks(chunk)
            .zip(addresses.chunks(chunk))
            .map(|(names, addresses)| {
                scope.spawn(move || {
                    names
                        .iter()
                        .zip(addresses)
                        .map(one)
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        let mut all = Vec::with_capacity(names.len());
        for worker in workers {
            match worker.join() {
                Ok(part) => all.extend(part?),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        Ok(all)
    })
}

/// A random bearer token (32 bytes, base64url).
fn random_token() -> Result<String, TlsError> {
    let mut bytes = [0u8; 32];
    crate::tls::random_bytes(&mut bytes)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

fn http_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // No header-read timeout: hyper starts it while a kept-alive connection is idle, which
    // would close idle connections under clients that keep them for 90 s as kube does.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None);
    builder.http2().timer(TokioTimer::new());
    builder
}

async fn accept_loop(cluster: Arc<Cluster>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _peer)) => {
                tokio::spawn(serve_connection(cluster.clone(), stream));
            }
            Err(error) => {
                // Usually EMFILE: wait for descriptors to be freed rather than spin.
                tracing::warn!(cluster = %cluster.name, %error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// What a request needs to know about its connection.
#[derive(Debug)]
struct ConnectionInfo {
    id: u64,
    peer: PeerCertificate,
    kill: watch::Receiver<u64>,
}

async fn serve_connection(cluster: Arc<Cluster>, stream: TcpStream) {
    let mut kill = cluster.kill.subscribe();
    let id = cluster.log.connection_accepted();
    // Without TCP_NODELAY, small TLS records wait for delayed ACKs (~40 ms per request).
    let _ = stream.set_nodelay(true);
    let action = lock(&cluster.faults).on_accept();
    match action {
        AcceptAction::Serve => {}
        AcceptAction::Reset => {
            cluster.log.connection_reset();
            // A zero linger makes close send a RST instead of a FIN.
            let _ = stream.set_zero_linger();
            return;
        }
        AcceptAction::HangHandshake => {
            hold_open(stream, &mut kill, cluster.fault_changed.subscribe()).await;
            return;
        }
    }
    let tls = read(&cluster.tls);
    let acceptor = TlsAcceptor::from(tls.config.clone());
    let stream = tokio::select! {
        accepted = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)) => match accepted {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                tracing::debug!(cluster = %cluster.name, %error, "TLS handshake failed");
                return;
            }
            Err(_) => return,
        },
        _ = kill.changed() => return,
    };
    cluster.log.handshake_completed();
    let peer = identify_peer(
        tls.client_verifier.as_ref(),
        stream.get_ref().1.peer_certificates(),
    );
    let info = Arc::new(ConnectionInfo {
        id,
        peer,
        kill: kill.clone(),
    });
    let service_cluster = cluster.clone();
    let service = service_fn(move |request| handle(service_cluster.clone(), info.clone(), request));
    let serving = cluster.http.serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        result = serving => {
            if let Err(error) = result {
                tracing::trace!(cluster = %cluster.name, %error, "connection ended");
            }
        }
        _ = kill.changed() => {}
    }
}

/// Keeps a connection open without ever answering, until the client gives up or the
/// fault changes.
async fn hold_open(
    mut stream: TcpStream,
    kill: &mut watch::Receiver<u64>,
    mut released: watch::Receiver<u64>,
) {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::sleep(MAX_HANG);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = kill.changed() => return,
            _ = released.changed() => return,
            _ = &mut deadline => return,
        }
    }
}

/// The error a service returns to make hyper drop the connection without an answer.
#[derive(Debug, thiserror::Error)]
#[error("request dropped on purpose")]
struct Dropped;

async fn handle(
    cluster: Arc<Cluster>,
    connection: Arc<ConnectionInfo>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Dropped> {
    let started = Instant::now();
    let method = request.method().as_str();
    let path = request.uri().path();
    let query = request.uri().query();
    let authorization = request
        .headers()
        .get(AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    let authentication = {
        let tokens = cluster
            .tokens
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        authenticate(&connection.peer, authorization, &tokens)
    };
    let http_version = match request.version() {
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_10 => "HTTP/1.0",
        _ => "HTTP/1.1",
    };
    let seq = cluster.log.arrived(Arrival {
        method,
        path,
        query,
        http_version,
        connection: connection.id,
        auth: authentication.used.clone(),
    });
    let mut released = cluster.fault_changed.subscribe();
    let action = lock(&cluster.faults).on_request();
    let response = match action {
        RequestAction::Hang => {
            let mut kill = connection.kill.clone();
            tokio::select! {
                _ = released.changed() => {}
                _ = kill.changed() => {}
                _ = tokio::time::sleep(MAX_HANG) => {}
            }
            cluster.log.completed(seq, None, started.elapsed());
            return Err(Dropped);
        }
        RequestAction::Reset => {
            cluster.log.connection_reset();
            cluster.log.completed(seq, None, started.elapsed());
            return Err(Dropped);
        }
        RequestAction::Status(code) => {
            let user = authentication
                .user
                .as_ref()
                .map_or("system:anonymous", |user| user.name.as_str());
            injected_status(
                code,
                &RequestAttributes::from_request(method, path, query),
                user,
            )
        }
        RequestAction::Proceed(delay) => {
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            match &authentication.user {
                None => json(
                    StatusCode::UNAUTHORIZED,
                    status_body(401, "Unauthorized", "Unauthorized"),
                ),
                Some(user) => {
                    let attributes = RequestAttributes::from_request(method, path, query);
                    match authorize(&cluster.policy, user, &attributes) {
                        Err(message) => json(
                            StatusCode::FORBIDDEN,
                            status_body(403, "Forbidden", &message),
                        ),
                        Ok(()) => {
                            let fixtures = read(&cluster.fixtures);
                            let accept = request
                                .headers()
                                .get(hyper::header::ACCEPT)
                                .and_then(|v| v.to_str().ok());
                            let answer = respond(
                                &fixtures,
                                &ApiRequest {
                                    method,
                                    path,
                                    query,
                                    accept,
                                },
                            );
                            let status = StatusCode::from_u16(answer.status)
                                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                            with_body(status, &answer.content_type, answer.body)
                        }
                    }
                }
            }
        }
    };
    cluster
        .log
        .completed(seq, Some(response.status().as_u16()), started.elapsed());
    Ok(response)
}

/// The answer to an injected status code, shaped as the API server shapes that status.
fn injected_status(code: u16, attributes: &RequestAttributes, user: &str) -> Response<Full<Bytes>> {
    let (reason, message) = match code {
        401 => ("Unauthorized", "Unauthorized".to_owned()),
        403 => ("Forbidden", attributes.forbidden_message(user)),
        404 => ("NotFound", "the server could not find the requested resource".to_owned()),
        429 => (
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later".to_owned(),
        ),
        500 => ("InternalError", "Internal error occurred: fault injected by fake-kube".to_owned()),
        503 => ("ServiceUnavailable", "the server is currently unable to handle the request".to_owned()),
        504 => (
            "Timeout",
            "the server was unable to return a response in the time allotted, but may still be processing the request"
                .to_owned(),
        ),
        _ => ("", format!("fault injected by fake-kube: {code}")),
    };
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json(status, status_body(code, reason, &message));
    if code == 429 {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

fn json(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    with_body(status, "application/json", body)
}

fn with_body(status: StatusCode, content_type: &str, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_str(content_type).unwrap_or(HeaderValue::from_static("application/json")),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_stay_in_loopback_and_skip_network_and_broadcast_octets() {
        assert_eq!(cluster_ip(10, 0), Some(Ipv4Addr::new(127, 10, 0, 1)));
        assert_eq!(cluster_ip(10, 249), Some(Ipv4Addr::new(127, 10, 0, 250)));
        assert_eq!(cluster_ip(10, 250), Some(Ipv4Addr::new(127, 10, 1, 1)));
        assert_eq!(cluster_ip(10, 9_999), Some(Ipv4Addr::new(127, 10, 39, 250)));
        assert_eq!(
            cluster_ip(10, MAX_CLUSTERS - 1),
            Some(Ipv4Addr::new(127, 10, 255, 250))
        );
        assert_eq!(cluster_ip(10, MAX_CLUSTERS), None);
        for index in [0, 1, 249, 250, 12_345, MAX_CLUSTERS - 1] {
            assert!(cluster_ip(200, index).is_some_and(|ip| ip.is_loopback()));
        }
    }
}
