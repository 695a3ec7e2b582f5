//! The health worker: probes each cluster when it is due, under a concurrency
//! bound, and applies every result whole or not at all, alone: results that arrive
//! together are committed together, each in a savepoint of its own
//! (docs/rules.md#each-clusters-result-stands-alone).
//!
//! The worker owns scheduling only. What a probe *is* sits behind [`Prober`]
//! (the plugin runtime in production, scripted probers in tests); what a result
//! *means* is decided by [`vigil_decision::decide`] inside [`Store::apply_probe`].

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tracing::{Instrument, debug, info, info_span, warn};
use vigil_decision::{
    BrakeConfig, Cascade, ClusterId, HealthEvent, HealthPolicy, ProbeOutcome, ReasonClass,
    Timestamp,
};

use crate::metrics::{AUTO_PLUGIN, Metrics};
use vigil_decision::ProbedBy;
use vigil_domain::probe::{ProbeTarget, Probed, Prober, error_chain, wall_clock};
use vigil_domain::reference::{self, Reference, Resolution};
use vigil_store::{
    AppliedProbe, ApplySettings, COVERAGE_HEARTBEAT, Claim, ClusterRecord, Lease, ProbeResult,
    ReplicaSafeguards, Store, StoreError,
};
/// The worker's settings (from `CLUSTER_HEALTH_*`).
#[derive(Debug, Clone, Copy)]
pub struct WorkerSettings {
    /// The global policy defaults.
    pub defaults: HealthPolicy,
    /// The brake's settings.
    pub brake: BrakeConfig,
    /// How many probes may run at once.
    pub concurrency: usize,
    /// How long past its timeout a probe may run before it is abandoned.
    pub grace: Duration,
    /// The longest the scheduler sleeps between two looks at the database.
    pub max_idle: Duration,
    /// Whether the brake window was set explicitly; otherwise it widens to the
    /// largest effective interval of the fleet.
    pub brake_window_explicit: bool,
    /// Among replicas, the safeguards against a replica that is itself cut off.
    pub replica_safeguards: ReplicaSafeguards,
}

impl WorkerSettings {
    /// Settings with the given defaults and brake, and the usual bounds.
    pub fn new(defaults: HealthPolicy, brake: BrakeConfig, concurrency: usize) -> Self {
        Self {
            defaults,
            brake,
            concurrency: concurrency.max(1),
            grace: Duration::from_secs(1),
            max_idle: Duration::from_secs(1),
            brake_window_explicit: false,
            replica_safeguards: ReplicaSafeguards::default(),
        }
    }
}

impl WorkerSettings {
    /// The settings under which the store applies results.
    pub fn apply(&self) -> ApplySettings {
        ApplySettings {
            defaults: self.defaults,
            brake: self.brake,
            brake_window_explicit: self.brake_window_explicit,
            replicas: self.replica_safeguards,
        }
    }
}

/// The health worker.
#[derive(Debug)]
pub struct Worker<P> {
    store: Store,
    prober: Arc<P>,
    settings: WorkerSettings,
    wake: Arc<Notify>,
    metrics: Option<Metrics>,
    /// The clusters being probed, by the worker or on demand: at most one probe each.
    in_flight: InFlight,
    /// The concurrency bound, shared by the worker's probes and probes on demand.
    slots: Arc<Semaphore>,
    /// Clusters whose last result could not be written, held back from probing.
    holds: Holds,
    /// Whether the store takes the results.
    writes: Arc<StoreWrites>,
    /// How this worker shares the fleet with other replicas, when it does.
    sharing: Option<Arc<Sharing>>,
}

/// How a worker shares the fleet with other replicas on one PostgreSQL database: it
/// probes only clusters it claimed, under its replica id, and its results are written
/// only while their claims hold (see the store's claims).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sharing {
    /// This replica's id, unique among the live replicas.
    pub replica: String,
    /// How long its claims last.
    pub lease: Lease,
}

/// Lets other parts of the engine (discovery, the API) wake the worker when
/// they insert or change clusters, instead of waiting for its next look.
#[derive(Debug, Clone)]
pub struct WorkerHandle {
    wake: Arc<Notify>,
}

impl WorkerHandle {
    /// Asks the worker to look for due clusters now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }
}

/// Counts of one worker run, for logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Probe results applied.
    pub applied: u64,
    /// Probes abandoned at shutdown (nothing written for them).
    pub abandoned: u64,
    /// Results whose transaction failed and was rolled back.
    pub failed: u64,
}

type InFlight = Arc<Mutex<HashSet<ClusterId>>>;

/// The first wait after a failed read of the schedule; it doubles up to
/// [`READ_BACKOFF_MAX`] while reads keep failing.
const READ_BACKOFF_FIRST: Duration = Duration::from_millis(250);

/// The longest wait between two reads of the schedule while they fail.
const READ_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The longest a cluster is held back after its results could not be written, in
/// intervals: long enough that a store refusing writes costs little probing, short enough
/// that a store taking writes again is seen soon.
const WRITE_BACKOFF_MAX_INTERVALS: u32 = 8;

/// Clusters whose result could not be written (a full disk, a database that refuses
/// writes). Their `next_due` in the store cannot be moved, so it is moved here: each is
/// held back for its interval, doubling with each failure in a row ([`write_backoff`]),
/// so that a store that takes no writes does not make the worker probe the same clusters
/// back to back.
type Holds = Arc<Mutex<HashMap<ClusterId, Hold>>>;

#[derive(Debug, Clone, Copy)]
struct Hold {
    /// Not probed again before this.
    until: Instant,
    /// Failed writes in a row.
    failures: u32,
}

fn held(holds: &Holds) -> std::sync::MutexGuard<'_, HashMap<ClusterId, Hold>> {
    // Each entry is replaced whole; a panic elsewhere cannot leave one half-written.
    holds.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How long a cluster is held back after `failures` failed writes in a row: its
/// interval, doubling with each failure, at most [`WRITE_BACKOFF_MAX_INTERVALS`].
fn write_backoff(interval: Duration, failures: u32) -> Duration {
    let doubled = interval.saturating_mul(1 << failures.saturating_sub(1).min(16));
    doubled.min(interval.saturating_mul(WRITE_BACKOFF_MAX_INTERVALS))
}

/// Whether the store takes the worker's results, for `/readyz`: the first failed write
/// of a series, the latest error and how many failed, until a write succeeds again.
#[derive(Debug, Default)]
pub struct StoreWrites {
    failing: Mutex<Option<WriteFailure>>,
}

/// Writes that failed since the last one that succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFailure {
    /// When the first of them failed.
    pub since: Timestamp,
    /// How many failed.
    pub failures: u64,
    /// What the latest failure was, in words that name no table, query or path (the log
    /// has the error itself).
    pub reason: &'static str,
}

impl StoreWrites {
    /// The writes failing since the last success, if the last write failed.
    pub fn failing(&self) -> Option<WriteFailure> {
        self.state().clone()
    }

    fn failed(&self, now: Timestamp, error: &StoreError) {
        let mut state = self.state();
        let failures = state.as_ref().map_or(0, |f| f.failures) + 1;
        let since = state.as_ref().map_or(now, |f| f.since);
        *state = Some(WriteFailure {
            since,
            failures,
            reason: error.write_failure_reason(),
        });
    }

    fn succeeded(&self) {
        let mut state = self.state();
        if let Some(failure) = state.take() {
            info!(failed = failure.failures, "the store takes results again");
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Option<WriteFailure>> {
        // The value is replaced whole; a poisoned lock still holds a whole value.
        self.failing.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<P: Prober> Worker<P> {
    /// A worker over `store` probing with `prober`.
    pub fn new(store: Store, prober: P, settings: WorkerSettings) -> Self {
        Self {
            store,
            prober: Arc::new(prober),
            settings,
            wake: Arc::new(Notify::new()),
            metrics: None,
            in_flight: Arc::default(),
            slots: Arc::new(Semaphore::new(settings.concurrency)),
            holds: Arc::default(),
            writes: Arc::default(),
            sharing: None,
        }
    }

    /// The same worker, sharing the fleet with other replicas: it claims the clusters it
    /// probes, and gives its claims back when it stops.
    #[must_use]
    pub fn with_sharing(mut self, sharing: Sharing) -> Self {
        self.sharing = Some(Arc::new(sharing));
        self
    }

    /// Probing on demand beside this worker (the API's probe-now), recording into the
    /// same metrics, under the same concurrency bound: probes on demand take slots of the
    /// bound, at most half of them (at least one), so that the schedule always keeps the
    /// rest; beyond that they are refused ([`OnDemandError::Busy`]).
    pub fn on_demand(&self) -> OnDemand<P> {
        OnDemand {
            store: self.store.clone(),
            prober: Arc::clone(&self.prober),
            settings: self.settings,
            metrics: self.metrics.clone(),
            in_flight: Arc::clone(&self.in_flight),
            slots: Arc::clone(&self.slots),
            share: Arc::new(Semaphore::new((self.settings.concurrency / 2).max(1))),
            writes: Arc::clone(&self.writes),
            sharing: self.sharing.clone(),
        }
    }

    /// Whether the store takes this worker's results (and its probes on demand).
    pub fn store_writes(&self) -> Arc<StoreWrites> {
        Arc::clone(&self.writes)
    }

    /// The same worker, recording its probes, transitions, cascades and scheduling
    /// ticks into `metrics`. Without it the worker records nothing.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// A handle to wake the worker.
    pub fn handle(&self) -> WorkerHandle {
        WorkerHandle {
            wake: Arc::clone(&self.wake),
        }
    }

    /// Runs until `shutdown` completes. Then no new probe starts, probes still
    /// waiting for their cluster are abandoned (nothing is written for them),
    /// and results already being written are committed or rolled back whole.
    ///
    /// A failed read of the schedule is logged and retried with backoff; a result that
    /// cannot be written holds its cluster back (see [`Holds`]). Neither stops the worker.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> WorkerStats {
        let (stop_tx, stop_rx) = watch::channel(false);
        let coverage = tokio::spawn(record_coverage(
            self.store.clone(),
            self.sharing
                .as_ref()
                .map(|s| s.replica.clone())
                .unwrap_or_default(),
            stop_rx.clone(),
        ));
        let (results, pending) = mpsc::channel(MAX_BATCH);
        let writer = tokio::spawn(write_results(
            self.store.clone(),
            self.settings.apply(),
            pending,
        ));
        let slots = Arc::clone(&self.slots);
        let freed = Arc::new(Notify::new());
        let in_flight = Arc::clone(&self.in_flight);
        let mut tasks: JoinSet<JobEnd> = JoinSet::new();
        let mut stats = WorkerStats::default();
        let mut read_failures: u32 = 0;
        tokio::pin!(shutdown);

        // When the schedule must be read again: `None` is now (at start, after a wake-up,
        // and whenever every slot is taken, so that the job that ends first frees a slot
        // for whatever is due). A job ending while slots are free reads nothing: what it
        // probed is due again an interval later, and nothing else is due before the
        // earliest time read last.
        let mut next_look: Option<Instant> = None;
        loop {
            let tick = Instant::now();
            while let Some(end) = tasks.try_join_next() {
                stats.count(end, &mut next_look);
            }
            let mut sleep =
                next_look.map_or(Duration::ZERO, |at| at.saturating_duration_since(tick));
            if sleep.is_zero() {
                let mut read_failed = false;
                let free = slots.available_permits();
                if free > 0 {
                    let mut skip: HashSet<ClusterId> = lock(&in_flight).clone();
                    skip.extend(self.held_now());
                    let excluded: Vec<i64> = skip.iter().map(|id| id.0).collect();
                    let due = match self.due(&excluded, free).await {
                        Ok(due) => due,
                        Err(error) => {
                            read_failed = true;
                            warn!(error = %error_chain(&error), "could not read which clusters are due; trying again");
                            Vec::new()
                        }
                    };
                    for (cluster, claim) in due.into_iter().filter(|(c, _)| !skip.contains(&c.id)) {
                        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
                            break;
                        };
                        let slot = Slot {
                            _permit: permit,
                            freed: Arc::clone(&freed),
                        };
                        lock(&in_flight).insert(cluster.id);
                        let job = ProbeJob {
                            store: self.store.clone(),
                            prober: Arc::clone(&self.prober),
                            settings: self.settings,
                            in_flight: Arc::clone(&in_flight),
                            stop: stop_rx.clone(),
                            metrics: self.metrics.clone(),
                            holds: Arc::clone(&self.holds),
                            writes: Arc::clone(&self.writes),
                            results: results.clone(),
                            due_again: None,
                            claim,
                        };
                        let span = info_span!("probe", cluster = %cluster.name, plugin = cluster.plugin.as_deref().unwrap_or("auto"));
                        tasks.spawn(job.run(cluster, slot).instrument(span));
                    }
                }
                (sleep, next_look) = if read_failed {
                    let wait = self.read_backoff(&mut read_failures);
                    (wait, Some(Instant::now() + wait))
                } else if slots.available_permits() == 0 {
                    // The next look is when a job ends.
                    (self.settings.max_idle, None)
                } else {
                    match self.sleep_until_next_due(&in_flight).await {
                        Ok(wait) => {
                            read_failures = 0;
                            (wait, Some(Instant::now() + wait))
                        }
                        Err(error) => {
                            warn!(error = %error_chain(&error), "could not read when the next cluster is due; trying again");
                            let wait = self.read_backoff(&mut read_failures);
                            (wait, Some(Instant::now() + wait))
                        }
                    }
                };
            }
            if let Some(metrics) = &self.metrics {
                metrics.record_tick(tick.elapsed());
            }
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(sleep) => next_look = None,
                () = self.wake.notified() => next_look = None,
                // A probe ended and gave its slot back (its result may still be being
                // written): when every slot was taken, the schedule is read now.
                () = freed.notified() => {}
                Some(end) = tasks.join_next(), if !tasks.is_empty() => stats.count(end, &mut next_look),
            }
        }

        info!(in_flight = tasks.len(), "health worker stopping");
        // The receiver side of every job sees this and abandons its probe; a
        // job already writing its result finishes its transaction first.
        let _ = stop_tx.send(true);
        while let Some(end) = tasks.join_next().await {
            stats.count(end, &mut None);
        }
        // Every job has its answer: the writer ends once its last sender is gone.
        drop(results);
        if let Err(error) = writer.await {
            warn!(%error, "the result writer ended abnormally");
        }
        if let Err(error) = coverage.await {
            warn!(%error, "the engine's coverage record ended abnormally");
        }
        if let Some(sharing) = &self.sharing {
            // The other replicas may take this one's clusters at once, rather than when
            // its leases end.
            match self.store.release_claims(&sharing.replica).await {
                Ok(released) => info!(released, "claims released"),
                Err(error) => {
                    warn!(error = %error_chain(&error), "could not release the claims; they lapse with their leases");
                }
            }
        }
        info!(
            applied = stats.applied,
            abandoned = stats.abandoned,
            "health worker stopped"
        );
        stats
    }

    /// Up to `free` clusters due now, other than `excluded`: claimed for this replica when
    /// it shares the fleet.
    async fn due(
        &self,
        excluded: &[i64],
        free: usize,
    ) -> Result<Vec<(ClusterRecord, Option<Claim>)>, StoreError> {
        let Some(sharing) = &self.sharing else {
            let due = self
                .store
                .due_clusters_excluding(wall_clock(), excluded, free)
                .await?;
            return Ok(due.into_iter().map(|cluster| (cluster, None)).collect());
        };
        let timeout = Duration::from_secs(u64::from(self.settings.defaults.timeout_seconds));
        // A replica cut off from the clusters (its own probes fail while the others'
        // succeed) leaves the fleet to the others, but for a few canaries that tell it
        // when it reaches clusters again.
        let free = if self.store.replica_cut_off(&sharing.replica).await? {
            CANARIES
                .saturating_sub(lock(&self.in_flight).len())
                .min(free)
        } else {
            free
        };
        if free == 0 {
            return Ok(Vec::new());
        }
        let claimed = self
            .store
            .claim_due(&sharing.replica, excluded, free, sharing.lease, timeout)
            .await?;
        Ok(claimed
            .into_iter()
            .map(|claimed| (claimed.record, Some(claimed.claim)))
            .collect())
    }

    /// The wait before the next look after a failed read: doubling from
    /// [`READ_BACKOFF_FIRST`] to [`READ_BACKOFF_MAX`] while reads keep failing.
    fn read_backoff(&self, failures: &mut u32) -> Duration {
        let wait = READ_BACKOFF_FIRST
            .saturating_mul(1 << (*failures).min(16))
            .min(READ_BACKOFF_MAX);
        *failures = failures.saturating_add(1);
        debug!(retry_in_ms = wait.as_millis(), "schedule read failed");
        wait
    }

    /// The clusters held back now after failed writes.
    fn held_now(&self) -> Vec<ClusterId> {
        let now = Instant::now();
        held(&self.holds)
            .iter()
            .filter(|(_, hold)| hold.until > now)
            .map(|(id, _)| *id)
            .collect()
    }

    async fn sleep_until_next_due(&self, in_flight: &InFlight) -> Result<Duration, StoreError> {
        let now_instant = Instant::now();
        let mut skip: Vec<i64> = lock(in_flight).iter().map(|id| id.0).collect();
        // A held cluster is due again when its hold ends, whatever the store says.
        let mut wait = self.settings.max_idle;
        for (id, hold) in held(&self.holds).iter() {
            if hold.until > now_instant {
                skip.push(id.0);
                wait = wait.min(hold.until - now_instant);
            }
        }
        if let Some(sharing) = &self.sharing {
            // A cut-off replica with its canaries in flight claims nothing more: its next
            // look is when one of them ends, or after the longest idle wait.
            if lock(in_flight).len() >= CANARIES
                && self.store.replica_cut_off(&sharing.replica).await?
            {
                return Ok(wait);
            }
            // Another replica's claim keeps its cluster from this one until it ends.
            if let Some(claimable) = self
                .store
                .next_claimable_in(&sharing.replica, &skip, sharing.lease)
                .await?
            {
                wait = wait.min(claimable);
            }
            return Ok(wait);
        }
        let next = self.store.next_due_excluding(&skip).await?;
        let now = wall_clock();
        if let Some(due) = next {
            wait = wait.min(Duration::from_millis(
                u64::try_from(due.millis_since(now)).unwrap_or(0),
            ));
        }
        Ok(wait)
    }
}

fn lock(in_flight: &InFlight) -> std::sync::MutexGuard<'_, HashSet<ClusterId>> {
    // The set is only inserted into and removed from; a panic elsewhere cannot
    // leave it half-updated, so a poisoned lock is still usable.
    in_flight.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How one probe job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProbeEnd {
    Applied,
    Abandoned,
    Failed,
}

/// How one probe job ended, and when its cluster is due again (its new next due time,
/// or the end of its hold when its result could not be written).
#[derive(Debug, Clone, Copy)]
struct JobEnd {
    end: ProbeEnd,
    due_again: Option<Instant>,
}

impl WorkerStats {
    /// Counts a finished job (a job that panicked counts as failed), and brings the
    /// scheduler's next look forward to when the job's cluster is due again: a probe that
    /// outlasted its interval is due at once.
    fn count(
        &mut self,
        joined: Result<JobEnd, tokio::task::JoinError>,
        next_look: &mut Option<Instant>,
    ) {
        let job = joined.unwrap_or(JobEnd {
            end: ProbeEnd::Failed,
            due_again: None,
        });
        match job.end {
            ProbeEnd::Applied => self.applied += 1,
            ProbeEnd::Abandoned => self.abandoned += 1,
            ProbeEnd::Failed => self.failed += 1,
        }
        if let (Some(look), Some(due)) = (next_look.as_mut(), job.due_again) {
            *look = (*look).min(due);
        }
    }
}

/// The instant of the wall-clock time `at` (now, when it is past).
fn instant_of(at: Timestamp) -> Instant {
    let ahead = u64::try_from(at.millis_since(wall_clock())).unwrap_or(0);
    Instant::now() + Duration::from_millis(ahead)
}

struct ProbeJob<P> {
    store: Store,
    prober: Arc<P>,
    settings: WorkerSettings,
    in_flight: InFlight,
    stop: watch::Receiver<bool>,
    metrics: Option<Metrics>,
    holds: Holds,
    writes: Arc<StoreWrites>,
    results: mpsc::Sender<WriteRequest>,
    /// When the cluster is due again, once the job knows.
    due_again: Option<Instant>,
    /// The claim it probes under, when replicas share the fleet.
    claim: Option<Claim>,
}

/// How many probes a cut-off replica keeps in flight: enough to tell when it reaches the
/// clusters again, too few to matter to the fleet.
const CANARIES: usize = 2;

/// The most probe results one transaction writes.
const MAX_BATCH: usize = 128;

/// How long the writer waits, after a result arrives, for others to share its commit.
/// Results are then written at most this late, and rare probes share a sync of the log
/// as busy ones do: at a hundred probes a second, about ten a commit.
const COMMIT_LINGER: Duration = Duration::from_millis(100);

/// One of the worker's concurrency slots, held by a probe until it ends; giving it back
/// wakes the scheduler.
struct Slot {
    _permit: OwnedSemaphorePermit,
    freed: Arc<Notify>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.freed.notify_one();
    }
}

/// What a job asks the result writer, and where the answer goes.
struct WriteRequest {
    cluster: ClusterId,
    outcome: ProbeOutcome,
    by: Option<ProbedBy>,
    now: Timestamp,
    next_due: Timestamp,
    claim: Option<Claim>,
    duration: Duration,
    answer: oneshot::Sender<Result<Option<AppliedProbe>, Arc<StoreError>>>,
}

/// Writes the jobs' results: what arrives within [`COMMIT_LINGER`] of the first (up to
/// [`MAX_BATCH`]) in one transaction, each result in a savepoint of its own
/// ([`Store::apply_probes`]). Ends, having written everything, when every sender is gone.
async fn write_results(
    store: Store,
    settings: ApplySettings,
    mut pending: mpsc::Receiver<WriteRequest>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while pending.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let linger = tokio::time::Instant::now() + COMMIT_LINGER;
        while batch.len() < MAX_BATCH {
            let room = MAX_BATCH - batch.len();
            match tokio::time::timeout_at(linger, pending.recv_many(&mut batch, room)).await {
                // More arrived: wait for the rest of the linger.
                Ok(received) if received > 0 => {}
                // Every sender is gone (the worker is stopping), or the linger is over.
                _ => break,
            }
        }
        let results: Vec<ProbeResult<'_>> = batch
            .iter()
            .map(|request: &WriteRequest| ProbeResult {
                cluster: request.cluster,
                outcome: &request.outcome,
                by: request.by.as_ref(),
                now: request.now,
                next_due: request.next_due,
                claim: request.claim.as_ref(),
                duration: Some(request.duration),
            })
            .collect();
        let written = store.apply_probes(&results, &settings).await;
        drop(results);
        match written {
            Ok(applied) => {
                for (request, applied) in batch.drain(..).zip(applied) {
                    let _ = request.answer.send(applied.map_err(Arc::new));
                }
            }
            Err(error) => {
                let error = Arc::new(error);
                for request in batch.drain(..) {
                    let _ = request.answer.send(Err(Arc::clone(&error)));
                }
            }
        }
    }
}

impl<P: Prober> ProbeJob<P> {
    /// Probes `cluster` in `slot`, gives the slot back once the result is queued for
    /// writing, and applies it; the cluster stays in flight until it is written.
    async fn run(mut self, cluster: ClusterRecord, slot: Slot) -> JobEnd {
        let id = cluster.id;
        let end = self.probe_and_apply(cluster, slot).await;
        lock(&self.in_flight).remove(&id);
        JobEnd {
            end,
            due_again: self.due_again,
        }
    }

    async fn probe_and_apply(&mut self, cluster: ClusterRecord, slot: Slot) -> ProbeEnd {
        let policy = self.settings.defaults.with_overrides(&cluster.policy);
        let started = wall_clock();
        if let Some(metrics) = &self.metrics {
            let late = u64::try_from(started.millis_since(cluster.next_due)).unwrap_or(0);
            metrics.record_start_delay(Duration::from_millis(late));
        }
        let next_due = schedule_next(cluster.id, started, &policy);

        if policy.disabled {
            drop(slot);
            return match self
                .store
                .apply_disabled(cluster.id, true, started, next_due)
                .await
            {
                Ok(()) => {
                    self.written(cluster.id);
                    self.due_again = Some(instant_of(next_due));
                    ProbeEnd::Applied
                }
                Err(error) => {
                    let retry_in = self.not_written(cluster.id, &policy, &error);
                    self.due_again = Some(Instant::now() + retry_in);
                    warn!(error = %error_chain(&error), retry_in_s = retry_in.as_secs(), "could not record a disabled cluster");
                    ProbeEnd::Failed
                }
            };
        }

        let timeout = Duration::from_secs(u64::from(policy.timeout_seconds.max(1)));
        let probing = Instant::now();
        let probe = probe_cluster(self.prober.as_ref(), &cluster, timeout, self.settings.grace);
        let Probed { outcome, by } = tokio::select! {
            probed = probe => probed,
            _ = self.stop.wait_for(|stop| *stop) => {
                debug!("probe abandoned at shutdown");
                return ProbeEnd::Abandoned;
            }
        };
        let outcome = if self.claim.is_some() {
            unresolvable_here(&cluster, outcome)
        } else {
            outcome
        };
        let elapsed = probing.elapsed();
        if let Some(metrics) = &self.metrics {
            metrics.record_probe(plugin_label(&cluster, by.as_ref()), &outcome, elapsed);
        }

        let now = wall_clock();
        let next_due = next_due.max(now);
        let (answer, written) = oneshot::channel();
        let request = WriteRequest {
            cluster: cluster.id,
            outcome: outcome.clone(),
            by: by.clone(),
            now,
            next_due,
            claim: self.claim.take(),
            duration: elapsed,
            answer,
        };
        let sent = self.results.send(request).await;
        // The result is queued: the next probe may start while it is written. (The queue
        // is bounded, so a slow database holds the slots back instead of letting probes
        // pile up behind it.)
        drop(slot);
        let written = match sent {
            Ok(()) => written.await.ok(),
            Err(_) => None,
        };
        let Some(written) = written else {
            // The writer is gone (it never ends while a job can ask it): nothing was
            // written, and the cluster stays due.
            warn!("probe result not applied: the result writer stopped");
            return ProbeEnd::Failed;
        };
        match written {
            Ok(Some(applied)) => {
                self.written(cluster.id);
                self.due_again = Some(instant_of(next_due));
                log_applied(&applied, &outcome);
                if let Some(metrics) = &self.metrics {
                    metrics.record_applied(&applied);
                }
                ProbeEnd::Applied
            }
            Ok(None) => {
                // The cluster is gone: nothing of it is to be held back.
                held(&self.holds).remove(&cluster.id);
                ProbeEnd::Abandoned
            }
            Err(error) if matches!(*error, StoreError::StaleClaim { .. }) => {
                // This replica's claim lapsed (it was paused, or slow past its lease) and
                // another replica took the cluster: its result stands, not this one.
                info!("probe result discarded: the claim on the cluster lapsed meanwhile");
                if let Some(metrics) = &self.metrics {
                    metrics.record_stale();
                }
                ProbeEnd::Abandoned
            }
            Err(error) => {
                // This cluster's transaction was rolled back; the others are
                // untouched. Its `next_due` could not be written either, so it is held
                // back here instead of being probed again at once.
                let retry_in = self.not_written(cluster.id, &policy, &error);
                self.due_again = Some(Instant::now() + retry_in);
                warn!(error = %error_chain(&error), retry_in_s = retry_in.as_secs(), "probe result not applied; rolled back");
                ProbeEnd::Failed
            }
        }
    }

    /// A result of `cluster` was written: it is scheduled by the store again.
    fn written(&self, cluster: ClusterId) {
        held(&self.holds).remove(&cluster);
        self.writes.succeeded();
    }

    /// A result of `cluster` could not be written: holds it back and returns for how long.
    fn not_written(
        &self,
        cluster: ClusterId,
        policy: &HealthPolicy,
        error: &StoreError,
    ) -> Duration {
        self.writes.failed(wall_clock(), error);
        let interval = Duration::from_secs(u64::from(policy.interval_seconds.max(1)));
        let mut holds = held(&self.holds);
        let failures = holds.get(&cluster).map_or(0, |h| h.failures) + 1;
        let wait = write_backoff(interval, failures);
        holds.insert(
            cluster,
            Hold {
                until: Instant::now() + wait,
                failures,
            },
        );
        wait
    }
}

/// One probe of a named cluster, now, beside the worker: never while the worker (or
/// another on-demand call) probes the same cluster.
#[derive(Debug)]
pub struct OnDemand<P> {
    store: Store,
    prober: Arc<P>,
    settings: WorkerSettings,
    metrics: Option<Metrics>,
    in_flight: InFlight,
    /// The worker's concurrency bound.
    slots: Arc<Semaphore>,
    /// The part of it probes on demand may hold at once.
    share: Arc<Semaphore>,
    writes: Arc<StoreWrites>,
    sharing: Option<Arc<Sharing>>,
}

/// Why an on-demand probe did not run.
#[derive(Debug, thiserror::Error)]
pub enum OnDemandError {
    /// A probe of this cluster is running.
    #[error("a probe of cluster `{0}` is already running")]
    InProgress(String),
    /// Another replica holds the cluster's claim: it is probing it.
    #[error("cluster `{0}` is being probed by another replica")]
    ClaimedElsewhere(String),
    /// Every slot probes on demand may take is in use.
    #[error(
        "too many probes are running to probe cluster `{cluster}` now; try again in {}s",
        retry_after.as_secs()
    )]
    Busy {
        /// The cluster asked for.
        cluster: String,
        /// How long the running probes may still hold their slots.
        retry_after: Duration,
    },
    /// The database failed, or the cluster does not exist.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl<P: Prober> OnDemand<P> {
    /// Probes `cluster` once and applies the outcome (see [`probe_now`]). `Ok(None)`
    /// when the cluster disappeared meanwhile.
    pub async fn probe(&self, cluster: &str) -> Result<Option<Probed>, OnDemandError> {
        let record = self.store.cluster(cluster).await?;
        let id = record.id;
        // Both permits are held until the probe ends, even if this future is dropped.
        let _permits = self.permits().ok_or_else(|| {
            let policy = self.settings.defaults.with_overrides(&record.policy);
            OnDemandError::Busy {
                cluster: cluster.to_owned(),
                retry_after: Duration::from_secs(u64::from(policy.timeout_seconds.max(1)))
                    + self.settings.grace,
            }
        })?;
        if !lock(&self.in_flight).insert(id) {
            return Err(OnDemandError::InProgress(cluster.to_owned()));
        }
        // Removed however the probe ends, even if this future is dropped.
        let _slot = InFlightSlot {
            in_flight: &self.in_flight,
            id,
        };
        // Replicas sharing the fleet: the probe takes the cluster's claim, as the worker
        // does, so that no other replica probes it meanwhile.
        let claim = match &self.sharing {
            Some(sharing) => {
                let timeout =
                    Duration::from_secs(u64::from(self.settings.defaults.timeout_seconds));
                match self
                    .store
                    .claim_now(&sharing.replica, id, sharing.lease, timeout)
                    .await?
                {
                    Some(claim) => Some(claim),
                    None => return Err(OnDemandError::ClaimedElsewhere(cluster.to_owned())),
                }
            }
            None => None,
        };
        let result = probe_now_claimed(
            &self.store,
            self.prober.as_ref(),
            &self.settings,
            self.metrics.as_ref(),
            cluster,
            claim.as_ref(),
        )
        .await;
        match &result {
            Ok(Some(_)) => self.writes.succeeded(),
            Ok(None) => {}
            Err(StoreError::NotFound { .. }) => {}
            Err(error) => self.writes.failed(wall_clock(), error),
        }
        Ok(result?.map(|(probed, _)| probed))
    }

    /// A slot of the on-demand share and one of the worker's bound, or `None` when
    /// either is taken up.
    fn permits(&self) -> Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)> {
        let share = Arc::clone(&self.share).try_acquire_owned().ok()?;
        let slot = Arc::clone(&self.slots).try_acquire_owned().ok()?;
        Some((share, slot))
    }
}

struct InFlightSlot<'a> {
    in_flight: &'a InFlight,
    id: ClusterId,
}

impl Drop for InFlightSlot<'_> {
    fn drop(&mut self) {
        lock(self.in_flight).remove(&self.id);
    }
}

/// Probes one cluster once, now, and applies the result under exactly the
/// rules of the worker (the same resolution, timeout, grace and transaction;
/// the half-interval spacing keeps an extra probe from shrinking the grace
/// period). Returns `None` when the cluster disappeared meanwhile. Records
/// nothing in the metrics: see [`probe_now_recorded`].
pub async fn probe_now<P: Prober>(
    store: &Store,
    prober: &P,
    settings: &WorkerSettings,
    cluster: &str,
) -> Result<Option<(Probed, AppliedProbe)>, StoreError> {
    probe_now_recorded(store, prober, settings, None, cluster).await
}

/// [`probe_now`], recording the probe and what applying it did into `metrics`
/// as the worker records its own probes.
pub async fn probe_now_recorded<P: Prober>(
    store: &Store,
    prober: &P,
    settings: &WorkerSettings,
    metrics: Option<&Metrics>,
    cluster: &str,
) -> Result<Option<(Probed, AppliedProbe)>, StoreError> {
    probe_now_claimed(store, prober, settings, metrics, cluster, None).await
}

/// [`probe_now_recorded`] under `claim`, when replicas share the fleet.
async fn probe_now_claimed<P: Prober>(
    store: &Store,
    prober: &P,
    settings: &WorkerSettings,
    metrics: Option<&Metrics>,
    cluster: &str,
    claim: Option<&Claim>,
) -> Result<Option<(Probed, AppliedProbe)>, StoreError> {
    let record = store.cluster(cluster).await?;
    let policy = settings.defaults.with_overrides(&record.policy);
    let started = wall_clock();
    let timeout = Duration::from_secs(u64::from(policy.timeout_seconds.max(1)));
    let probing = Instant::now();
    let probed = probe_cluster(prober, &record, timeout, settings.grace).await;
    let elapsed = probing.elapsed();
    if let Some(metrics) = metrics {
        metrics.record_probe(
            plugin_label(&record, probed.by.as_ref()),
            &probed.outcome,
            elapsed,
        );
    }
    let now = wall_clock();
    let next_due = schedule_next(record.id, started, &policy).max(now);
    let result = ProbeResult {
        cluster: record.id,
        outcome: &probed.outcome,
        by: probed.by.as_ref(),
        now,
        next_due,
        claim,
        duration: Some(elapsed),
    };
    let applied = store
        .apply_probes(&[result], &settings.apply())
        .await?
        .into_iter()
        .next()
        .unwrap_or(Ok(None))?;
    Ok(applied.map(|applied| {
        log_applied(&applied, &probed.outcome);
        if let Some(metrics) = metrics {
            metrics.record_applied(&applied);
        }
        (probed, applied)
    }))
}

/// Probes one cluster once, now, under the worker's rules (the same reference
/// resolution, timeout from the cluster's policy in force, and grace) and applies
/// nothing: `vigil probe` without `--apply`. The store is never touched, so `cluster`
/// may be a record read from the database or one made from discovery.
pub async fn probe_once<P: Prober>(
    prober: &P,
    cluster: &ClusterRecord,
    settings: &WorkerSettings,
) -> Probed {
    let policy = settings.defaults.with_overrides(&cluster.policy);
    let timeout = Duration::from_secs(u64::from(policy.timeout_seconds.max(1)));
    probe_cluster(prober, cluster, timeout, settings.grace).await
}

/// The plugin a probe is labelled with in the metrics: the plugin that answered, else
/// the cluster's explicit plugin, else [`AUTO_PLUGIN`] (no plugin was routed to).
fn plugin_label<'a>(cluster: &'a ClusterRecord, by: Option<&'a ProbedBy>) -> &'a str {
    by.map(|by| by.plugin.as_str())
        .or(cluster.plugin.as_deref())
        .unwrap_or(AUTO_PLUGIN)
}

/// Resolves the reference on the host and, when it can be probed, asks the
/// prober, enforcing the timeout plus grace itself: a prober that never
/// returns yields `inconclusive` and frees its slot.
async fn probe_cluster<P: Prober>(
    prober: &P,
    cluster: &ClusterRecord,
    timeout: Duration,
    grace: Duration,
) -> Probed {
    let target = match resolve_target(cluster, timeout, prober.file_bounds()).await {
        Ok(target) => target,
        Err(outcome) => return Probed::host(outcome),
    };
    match tokio::time::timeout(timeout + grace, prober.probe_attributed(&target)).await {
        Ok(probed) => probed,
        Err(_) => Probed::host(ProbeOutcome::Inconclusive {
            class: ReasonClass::PluginFault,
            message: format!(
                "the probe did not return within its {}s timeout plus {}ms grace; abandoned",
                timeout.as_secs(),
                grace.as_millis()
            ),
        }),
    }
}

/// Among replicas, a discovered cluster whose kubeconfig file this replica cannot find
/// was discovered by another replica, which can: the cluster's reference is not broken,
/// this replica only cannot probe it. Its outcome here is `inconclusive`, never
/// `reference-broken` (replicas are meant to see the same files at the same paths; the
/// message says which file is missing).
fn unresolvable_here(cluster: &ClusterRecord, outcome: ProbeOutcome) -> ProbeOutcome {
    let ProbeOutcome::NotProbeable {
        class: ReasonClass::ReferenceBroken,
        message,
    } = &outcome
    else {
        return outcome;
    };
    if cluster.source != vigil_store::ClusterSource::Discovered {
        return outcome;
    }
    match Reference::parse(&cluster.kubeconfig_secret_ref) {
        Ok(Reference::File { path, .. }) if !std::path::Path::new(&path).exists() => {
            ProbeOutcome::Inconclusive {
                class: ReasonClass::ReferenceBroken,
                message: format!(
                    "this replica cannot read the kubeconfig another replica discovered \
                     (every replica must see the same files at the same paths): {message}"
                ),
            }
        }
        _ => outcome,
    }
}

/// The target a plugin is handed for `cluster`: its reference parsed and, for a file
/// reference, resolved on the host (off the async threads, its files within `bounds`,
/// within the probe's `timeout`); or the outcome that says why there is nothing to hand
/// over.
pub(crate) async fn resolve_target(
    cluster: &ClusterRecord,
    timeout: Duration,
    bounds: reference::FileBounds,
) -> Result<ProbeTarget, ProbeOutcome> {
    let reference = match Reference::parse(&cluster.kubeconfig_secret_ref) {
        Ok(reference) => reference,
        Err(error) => {
            return Err(ProbeOutcome::NotProbeable {
                class: ReasonClass::ReferenceBroken,
                message: format!("invalid reference: {error}"),
            });
        }
    };
    let resolving = reference.clone();
    let resolve =
        tokio::task::spawn_blocking(move || reference::resolve_bounded(&resolving, &bounds));
    // A file system that does not answer (a hung network mount) must not hold the worker's
    // slot past the probe's deadline; the blocking read itself cannot be cancelled.
    let resolution = match tokio::time::timeout(timeout, resolve).await {
        Ok(Ok(resolution)) => resolution,
        Ok(Err(error)) => {
            return Err(ProbeOutcome::Inconclusive {
                class: ReasonClass::HostFault,
                message: format!("resolving the reference failed: {error}"),
            });
        }
        Err(_) => {
            return Err(ProbeOutcome::Inconclusive {
                class: ReasonClass::HostFault,
                message: format!(
                    "reading the reference's files did not finish within the probe's {}s timeout",
                    timeout.as_secs()
                ),
            });
        }
    };
    let connection = match resolution {
        Resolution::NotProbeable {
            class: class @ ReasonClass::HostFault,
            message,
        } => return Err(ProbeOutcome::Inconclusive { class, message }),
        Resolution::NotProbeable { class, message } => {
            return Err(ProbeOutcome::NotProbeable { class, message });
        }
        Resolution::Connection(material) => Some(material),
        Resolution::Delegated => None,
    };
    Ok(ProbeTarget {
        cluster: cluster.id,
        name: cluster.name.clone(),
        endpoint: cluster.endpoint.clone(),
        reference,
        connection,
        plugin: cluster.plugin.clone(),
        timeout,
        labels: cluster.labels.clone(),
        parameters: cluster.parameters.clone(),
    })
}

/// The next due time: one interval after the probe started, plus a small
/// deterministic jitter (up to 2% of the interval, at most 5 s) so that
/// thousands of clusters registered together do not fire in the same
/// millisecond forever.
pub fn schedule_next(cluster: ClusterId, started: Timestamp, policy: &HealthPolicy) -> Timestamp {
    let interval_ms = i64::from(policy.interval_seconds.max(1)) * 1000;
    let spread = (interval_ms / 50).min(5000);
    let jitter = if spread > 0 {
        let mut hasher = std::hash::DefaultHasher::new();
        (cluster, started).hash(&mut hasher);
        i64::try_from(hasher.finish() % spread.unsigned_abs()).unwrap_or(0)
    } else {
        0
    };
    started.plus_millis(interval_ms + jitter)
}

fn log_applied(applied: &AppliedProbe, outcome: &ProbeOutcome) {
    let cluster = applied.cluster.as_str();
    debug!(
        cluster,
        outcome = outcome.label(),
        class = outcome.class().map_or("", |class| class.as_str()),
        reason = outcome.message().unwrap_or(""),
        "probe applied"
    );
    for event in &applied.decision.events {
        match event {
            HealthEvent::StatusChanged { from, to } => {
                info!(cluster, %from, %to, "cluster status changed");
            }
            HealthEvent::ConditionSet { condition } => {
                info!(cluster, condition = %condition.kind, reason = %condition.reason, message = %condition.message, "condition set");
            }
            HealthEvent::ConditionCleared { kind } => {
                info!(cluster, condition = %kind, "condition cleared");
            }
            HealthEvent::FailureCounted {
                count,
                threshold,
                class,
            } => {
                info!(cluster, count, threshold, %class, "failure counted");
            }
            HealthEvent::FailureNotCounted { why, class } => {
                info!(cluster, ?why, %class, "failure not counted");
            }
            HealthEvent::AwaitingSecondOpinion { count, threshold } => {
                info!(
                    cluster,
                    count, threshold, "failure at the threshold awaits another replica's opinion"
                );
            }
            HealthEvent::TransitionUnconfirmed => {
                warn!(
                    cluster,
                    "no other replica confirmed the failure in time: the transition is unconfirmed"
                );
            }
            HealthEvent::AppsDegraded { apps } => {
                warn!(
                    cluster,
                    apps = apps.len(),
                    "outage confirmed: apps degraded"
                );
            }
            HealthEvent::AppsRestored { apps, .. } => {
                info!(
                    cluster,
                    apps = apps.len(),
                    "cluster recovered: apps restored"
                );
            }
        }
    }
    if let Cascade::Degrade { .. } = applied.decision.cascade {
        debug!(cluster, outage = ?applied.opened_outage, "outage opened");
    }
    if let Some(brake) = applied.brake
        && brake.changed_from(applied.brake_before)
    {
        if brake.verdict.holds() {
            warn!(
                considered = brake.considered,
                failed = brake.failed,
                "mass-failure brake engaged: failures are no longer counted"
            );
        } else {
            info!(
                considered = brake.considered,
                failed = brake.failed,
                "mass-failure brake released: failure counts start from zero"
            );
        }
    }
}

/// Records in the store when this engine runs, for the uptime's *no data*
/// (`Store::open_coverage`): a run opened now, moved on every [`COVERAGE_HEARTBEAT`], and
/// closed when `stop` says so; after a crash its last heartbeat says when it ended. A
/// store that does not answer is tried again at the next heartbeat: the time meanwhile
/// shows as not watched, and the worker goes on.
async fn record_coverage(store: Store, replica: String, mut stop: watch::Receiver<bool>) {
    let mut run = None;
    let mut every = tokio::time::interval(COVERAGE_HEARTBEAT);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.wait_for(|stop| *stop) => break,
        }
        let result = async {
            let now = store.now().await?;
            match run {
                None => store
                    .open_coverage(&replica, now)
                    .await
                    .map(|id| run = Some(id)),
                Some(id) => store.extend_coverage(id, now).await,
            }
        }
        .await;
        if let Err(error) = result {
            warn!(error = %error_chain(&error), "could not record that the engine runs; the uptime shows no data meanwhile");
        }
    }
    if let Some(id) = run {
        let closed = match store.now().await {
            Ok(now) => store.close_coverage(id, now).await,
            Err(error) => Err(error),
        };
        if let Err(error) = closed {
            warn!(error = %error_chain(&error), "could not record the engine's stop; its last heartbeat stands for it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_holds_the_cluster_for_doubling_intervals_up_to_eight() {
        let interval = Duration::from_secs(30);
        let holds: Vec<u64> = (1..=6)
            .map(|failures| write_backoff(interval, failures).as_secs())
            .collect();
        assert_eq!(holds, [30, 60, 120, 240, 240, 240]);
        assert_eq!(
            write_backoff(interval, u32::MAX),
            Duration::from_secs(240),
            "no overflow"
        );
    }

    fn cluster(reference: &str, source: vigil_store::ClusterSource) -> ClusterRecord {
        ClusterRecord {
            id: ClusterId(1),
            name: "c".to_owned(),
            endpoint: String::new(),
            kubeconfig_secret_ref: reference.to_owned(),
            source,
            ignored: false,
            plugin: None,
            labels: Default::default(),
            parameters: Default::default(),
            policy: Default::default(),
            health: vigil_decision::ClusterHealth::new(Timestamp(0)),
            next_due: Timestamp(0),
            last_outcome: None,
            last_reason: None,
            last_reason_class: None,
            last_probed_by: None,
        }
    }

    /// Among replicas, a discovered cluster whose file this replica cannot find is
    /// inconclusive here; a file it reads but finds broken, a manual cluster, or any
    /// other outcome stays as it is.
    #[test]
    fn a_kubeconfig_another_replica_discovered_and_this_one_cannot_find_is_inconclusive() {
        use vigil_store::ClusterSource::{Discovered, Manual};
        let dir = tempfile::tempdir().unwrap();
        let present = dir.path().join("present.yaml");
        std::fs::write(&present, "not a kubeconfig").unwrap();
        let missing = dir.path().join("missing.yaml");
        let broken = || ProbeOutcome::NotProbeable {
            class: ReasonClass::ReferenceBroken,
            message: "cannot read".to_owned(),
        };
        let reference = |path: &std::path::Path| format!("{}#ctx", path.display());
        let here = unresolvable_here(&cluster(&reference(&missing), Discovered), broken());
        assert!(
            matches!(&here, ProbeOutcome::Inconclusive { class: ReasonClass::ReferenceBroken, message } if message.contains("cannot read")),
            "{here:?}"
        );
        for (record, outcome) in [
            (cluster(&reference(&present), Discovered), broken()),
            (cluster(&reference(&missing), Manual), broken()),
            (
                cluster(&reference(&missing), Discovered),
                ProbeOutcome::Healthy,
            ),
        ] {
            assert_eq!(unresolvable_here(&record, outcome.clone()), outcome);
        }
    }
}
