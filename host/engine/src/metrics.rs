//! Prometheus metrics of the engine (`/metrics`).
//!
//! Two kinds of series:
//! - what the worker *records* as it goes (probe durations, failures by reason class,
//!   transitions, cascades, plugin faults, scheduler tick durations), kept in memory
//!   in this [`Metrics`] and reset by a restart, as Prometheus counters are;
//! - what is *read from the store* at each scrape (clusters by status and by condition,
//!   the brake), so they are always the persisted truth and cost one aggregate query
//!   each, whatever the fleet's size.
//!
//! No series carries a cluster label unless the engine was started with
//! `VIGIL_METRICS_PER_CLUSTER=true`: 10,000 clusters must not make 10,000 series. The
//! label values are names (statuses, conditions, reason classes, plugins, clusters),
//! never anything taken from a kubeconfig's contents.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use vigil_decision::{
    Cascade, ClusterStatus, ConditionType, HealthEvent, ProbeOutcome, ReasonClass,
};

use vigil_store::{AppliedProbe, Store, StoreError};

/// The `Content-Type` of what [`Metrics::render`] returns: the classic Prometheus text
/// format, version 0.0.4. It is the format `promtool check metrics` validates (its
/// parser reads an OpenMetrics counter's `_total` sample as a second, untyped family),
/// and every Prometheus server scrapes it.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// The label of probes of clusters with no explicit plugin: the plugin that answered is
/// chosen by the runtime's routing, which the worker does not see.
pub const AUTO_PLUGIN: &str = "auto";

/// Histogram buckets, in seconds, from 1 ms (an answer on loopback, a cached refusal)
/// to 60 s (the longest probe timeout an operator is expected to set).
const DURATION_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Buckets of the scheduler's lag, in seconds: up to 1 s it keeps up; beyond, probes
/// queue behind each other.
const DELAY_BUCKETS: [f64; 14] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ProbeLabels {
    plugin: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ClassLabels {
    class: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TransitionLabels {
    from: &'static str,
    to: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CascadeLabels {
    kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PluginChangeLabels {
    plugin: String,
    change: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StatusLabels {
    status: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ConditionLabels {
    condition: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ClusterLabels {
    cluster: String,
    status: &'static str,
}

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The engine's metrics: what the worker records, and [`Metrics::render`] for the
/// `/metrics` route. Cheap to clone (one `Arc`); every clone records into the same
/// series.
#[derive(Debug, Clone)]
pub struct Metrics {
    inner: Arc<Recorded>,
}

#[derive(Debug)]
struct Recorded {
    per_cluster: bool,
    probe_duration: Family<ProbeLabels, Histogram>,
    failures: Family<ClassLabels, Counter>,
    transitions: Family<TransitionLabels, Counter>,
    cascades: Family<CascadeLabels, Counter>,
    cascade_apps: Family<CascadeLabels, Counter>,
    plugin_faults: Family<PluginLabels, Counter>,
    host_faults: Counter,
    plugin_changes: Family<PluginChangeLabels, Counter>,
    tick_duration: Histogram,
    start_delay: Histogram,
    stale_results: Counter,
    /// This replica's id and node, when replicas share the fleet.
    replica: std::sync::OnceLock<(String, String)>,
    /// Where the notification sinks' state is read at each scrape, when sinks are
    /// configured.
    sinks: std::sync::OnceLock<SinkSource>,
}

/// Reads the notification sinks' state.
#[derive(Clone)]
struct SinkSource(Arc<dyn Fn() -> Vec<SinkMetrics> + Send + Sync>);

impl std::fmt::Debug for SinkSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SinkSource")
    }
}

/// One notification sink's state, as the senders report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkMetrics {
    /// Its name.
    pub name: String,
    /// `webhook` or `alertmanager`.
    pub kind: &'static str,
    /// Whether it counts as failing.
    pub failing: bool,
    /// Notifications this process delivered to it.
    pub delivered: u64,
    /// Attempts of this process that failed.
    pub failures: u64,
    /// Notifications passed over undelivered, since the sink was configured (from the
    /// database: the count survives restarts).
    pub dead_letters: u64,
    /// The sink's positions in the outbox (one per receiver URL): what is pending is
    /// what the furthest behind has not been sent.
    pub positions: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SinkLabels {
    sink: String,
    kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReplicaLabels {
    replica: String,
    node: String,
}

/// How long past its due time a cluster counts as overdue in `vigil_clusters_overdue`:
/// longer than any healthy scheduler lag, shorter than an interval.
pub const OVERDUE_AFTER: Duration = Duration::from_secs(60);

impl Metrics {
    /// Empty metrics. With `per_cluster` (`VIGIL_METRICS_PER_CLUSTER=true`), a scrape
    /// also reports `vigil_cluster_status{cluster,status}`, one series per cluster.
    pub fn new(per_cluster: bool) -> Self {
        Self {
            inner: Arc::new(Recorded {
                per_cluster,
                probe_duration: Family::new_with_constructor(duration_histogram),
                failures: Family::default(),
                transitions: Family::default(),
                cascades: Family::default(),
                cascade_apps: Family::default(),
                plugin_faults: Family::default(),
                host_faults: Counter::default(),
                plugin_changes: Family::default(),
                tick_duration: duration_histogram(),
                start_delay: Histogram::new(DELAY_BUCKETS),
                stale_results: Counter::default(),
                replica: std::sync::OnceLock::new(),
                sinks: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Names the replica these metrics are of (replicas sharing a fleet): scrapes then
    /// carry `vigil_replica_info{replica,node}`. The first name given stays.
    pub fn set_replica(&self, replica: &str, node: Option<&str>) {
        let _ = self
            .inner
            .replica
            .set((replica.to_owned(), node.unwrap_or_default().to_owned()));
    }

    /// Where scrapes read the notification sinks' state (`vigil_notify_*`). The first
    /// source given stays.
    pub fn set_notification_sinks(
        &self,
        source: impl Fn() -> Vec<SinkMetrics> + Send + Sync + 'static,
    ) {
        let _ = self.inner.sinks.set(SinkSource(Arc::new(source)));
    }

    /// Whether scrapes carry one series per cluster.
    pub fn per_cluster(&self) -> bool {
        self.inner.per_cluster
    }

    /// Records one finished probe: its duration by plugin and outcome, a failure by
    /// reason class when it did not end healthy, and a plugin fault when it was
    /// inconclusive through the plugin's fault. `plugin` is the cluster's explicit
    /// plugin, or [`AUTO_PLUGIN`].
    pub fn record_probe(&self, plugin: &str, outcome: &ProbeOutcome, elapsed: Duration) {
        let recorded = &self.inner;
        recorded
            .probe_duration
            .get_or_create(&ProbeLabels {
                plugin: plugin.to_owned(),
                outcome: outcome.label(),
            })
            .observe(elapsed.as_secs_f64());
        if let Some(class) = outcome.class() {
            recorded
                .failures
                .get_or_create(&ClassLabels {
                    class: class.as_str(),
                })
                .inc();
        }
        if let ProbeOutcome::Inconclusive {
            class: ReasonClass::HostFault,
            ..
        } = outcome
        {
            recorded.host_faults.inc();
        }
        if let ProbeOutcome::Inconclusive {
            class: ReasonClass::PluginFault,
            ..
        } = outcome
        {
            recorded
                .plugin_faults
                .get_or_create(&PluginLabels {
                    plugin: plugin.to_owned(),
                })
                .inc();
        }
    }

    /// Records a change of a plugin's generations: `promoted`, `refused`,
    /// `probation-passed`, `rolled-back` or `retired` (an alert on `rolled-back` says a
    /// new plugin version misbehaved in production).
    pub fn record_plugin_change(&self, plugin: &str, change: &'static str) {
        let recorded = &self.inner;
        if change == "promoted" {
            self.record_plugin_serving(plugin);
        }
        recorded
            .plugin_changes
            .get_or_create(&PluginChangeLabels {
                plugin: plugin.to_owned(),
                change,
            })
            .inc();
    }

    /// Starts a serving plugin's fault and rollback counters at zero (at start-up, and at
    /// each promotion), so that they are exported before their first increment and an
    /// alert's `increase()` sees that one too.
    pub fn record_plugin_serving(&self, plugin: &str) {
        let recorded = &self.inner;
        // Created, not incremented (the guard the family hands back is released at once).
        drop(recorded.plugin_faults.get_or_create(&PluginLabels {
            plugin: plugin.to_owned(),
        }));
        drop(recorded.plugin_changes.get_or_create(&PluginChangeLabels {
            plugin: plugin.to_owned(),
            change: "rolled-back",
        }));
    }

    /// Records what applying a probe did: status transitions and cascades (with the
    /// number of apps each degraded or restored).
    pub fn record_applied(&self, applied: &AppliedProbe) {
        let recorded = &self.inner;
        for event in &applied.decision.events {
            if let HealthEvent::StatusChanged { from, to } = event {
                recorded
                    .transitions
                    .get_or_create(&TransitionLabels {
                        from: from.as_str(),
                        to: to.as_str(),
                    })
                    .inc();
            }
        }
        let (kind, apps) = match &applied.decision.cascade {
            Cascade::None => return,
            Cascade::Degrade { apps } => ("degrade", apps.len()),
            Cascade::Restore { apps, .. } => ("restore", apps.len()),
        };
        let labels = CascadeLabels { kind };
        recorded.cascades.get_or_create(&labels).inc();
        recorded
            .cascade_apps
            .get_or_create(&labels)
            .inc_by(u64::try_from(apps).unwrap_or(u64::MAX));
    }

    /// Records how long one iteration of the worker's scheduling loop took (looking
    /// for due clusters and starting their probes; not the probes themselves).
    pub fn record_tick(&self, elapsed: Duration) {
        self.inner.tick_duration.observe(elapsed.as_secs_f64());
    }

    /// Records how late one probe started after its cluster was due: the scheduler's
    /// lag, near zero while the worker keeps up with the fleet.
    pub fn record_start_delay(&self, delay: Duration) {
        self.inner.start_delay.observe(delay.as_secs_f64());
    }

    /// Records a result discarded because its claim lapsed before it was written (another
    /// replica took the cluster meanwhile).
    pub fn record_stale(&self) {
        self.inner.stale_results.inc();
    }

    /// The metrics in the classic Prometheus text format (serve it with
    /// [`CONTENT_TYPE`], `text/plain; version=0.0.4; charset=utf-8`).
    ///
    /// Reads the clusters by status and by condition, the brake and, with
    /// `per_cluster`, each cluster's status from `store` (one aggregate query each),
    /// and adds what the worker recorded. Every status and condition is reported,
    /// zeros included, so that a series does not vanish when its count drops to zero.
    ///
    /// # Errors
    ///
    /// A store error from one of those queries.
    pub async fn render(&self, store: &Store) -> Result<String, StoreError> {
        self.render_scrape(store, None).await
    }

    /// [`Metrics::render`] with `vigil_ready`, 1 when `ready` (the REST API's judgement of
    /// readiness, the one `/readyz` answers), else 0.
    ///
    /// # Errors
    ///
    /// A store error, as [`Metrics::render`].
    pub async fn render_with_readiness(
        &self,
        store: &Store,
        ready: bool,
    ) -> Result<String, StoreError> {
        self.render_scrape(store, Some(ready)).await
    }

    async fn render_scrape(
        &self,
        store: &Store,
        ready: Option<bool>,
    ) -> Result<String, StoreError> {
        let statuses = store.status_counts().await?;
        let conditions = store.condition_counts().await?;
        let brake = store.brake_state().await?;
        let (overdue, oldest_overdue) = store.overdue(OVERDUE_AFTER).await?;
        let clusters = if self.inner.per_cluster {
            Some(store.cluster_statuses().await?)
        } else {
            None
        };

        let mut registry = Registry::default();

        let by_status = Family::<StatusLabels, Gauge>::default();
        for status in ClusterStatus::ALL {
            let count = statuses.get(status).copied().unwrap_or(0);
            by_status
                .get_or_create(&StatusLabels {
                    status: status.as_str(),
                })
                .set(gauge_value(count));
        }
        registry.register(
            "vigil_clusters",
            "Clusters probed by this engine, by confirmed status (ONLINE, OFFLINE, UNKNOWN)",
            by_status,
        );

        let by_condition = Family::<ConditionLabels, Gauge>::default();
        for condition in ConditionType::ALL {
            let count = conditions.get(condition).copied().unwrap_or(0);
            by_condition
                .get_or_create(&ConditionLabels {
                    condition: condition.as_str(),
                })
                .set(gauge_value(count));
        }
        registry.register(
            "vigil_clusters_with_condition",
            "Clusters carrying each condition (a cluster may carry several)",
            by_condition,
        );

        if let Some(clusters) = clusters {
            let per_cluster = Family::<ClusterLabels, Gauge>::default();
            for (cluster, status) in clusters {
                per_cluster
                    .get_or_create(&ClusterLabels {
                        cluster,
                        status: status.as_str(),
                    })
                    .set(1);
            }
            registry.register(
                "vigil_cluster_status",
                "1 for each cluster, labelled with its confirmed status \
                 (VIGIL_METRICS_PER_CLUSTER=true)",
                per_cluster,
            );
        }

        let overdue_gauge = Gauge::<i64>::default();
        overdue_gauge.set(gauge_value(overdue));
        registry.register(
            "vigil_clusters_overdue",
            "Clusters due for more than a minute and not probed, fleet-wide (whatever \
             replica should have probed them): orphans when it stays above zero",
            overdue_gauge,
        );
        let oldest_gauge = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        oldest_gauge.set(oldest_overdue.as_secs_f64());
        registry.register(
            "vigil_oldest_overdue_seconds",
            "How long the most overdue of those clusters has been due, fleet-wide (0 when \
             none is)",
            oldest_gauge,
        );

        if let Some((replica, node)) = self.inner.replica.get() {
            let info = Family::<ReplicaLabels, Gauge>::default();
            info.get_or_create(&ReplicaLabels {
                replica: replica.clone(),
                node: node.clone(),
            })
            .set(1);
            registry.register(
                "vigil_replica_info",
                "1, labelled with the replica these metrics are of (and its node, when \
                 VIGIL_NODE_NAME is set), when replicas share the fleet: every other series \
                 but the fleet-wide counts is this replica's own",
                info,
            );
        }

        if let Some(ready) = ready {
            let gauge = Gauge::<i64>::default();
            gauge.set(i64::from(ready));
            registry.register(
                "vigil_ready",
                "1 while vigil is ready (/readyz answers 200: the database answers and takes \
                 the probes' results, discovery has run, the clusters overdue at start-up are \
                 probed), else 0",
                gauge,
            );
        }

        if let Some(source) = self.inner.sinks.get() {
            let failing = Family::<SinkLabels, Gauge>::default();
            let pending = Family::<SinkLabels, Gauge>::default();
            let delivered = Family::<SinkLabels, Counter>::default();
            let failures = Family::<SinkLabels, Counter>::default();
            let dead_letters = Family::<SinkLabels, Counter>::default();
            for sink in (source.0)() {
                let labels = SinkLabels {
                    sink: sink.name.clone(),
                    kind: sink.kind,
                };
                failing.get_or_create(&labels).set(i64::from(sink.failing));
                // Read before the family's guard is taken: it must not be held across
                // an await.
                let mut waiting = 0;
                for position in &sink.positions {
                    waiting = waiting.max(store.outbox_pending(position).await?);
                }
                pending.get_or_create(&labels).set(waiting);
                delivered.get_or_create(&labels).inc_by(sink.delivered);
                failures.get_or_create(&labels).inc_by(sink.failures);
                dead_letters
                    .get_or_create(&labels)
                    .inc_by(sink.dead_letters);
            }
            registry.register(
                "vigil_notify_sink_failing",
                "1 while a notification sink failed too many attempts in a row (it is still \
                 tried), else 0",
                failing,
            );
            registry.register(
                "vigil_notify_pending",
                "Notifications committed and not yet sent to the sink, database-wide",
                pending,
            );
            registry.register(
                "vigil_notify_delivered",
                "Notifications this process delivered, by sink",
                delivered,
            );
            registry.register(
                "vigil_notify_failed_attempts",
                "Attempts of this process at sending a notification that failed, by sink",
                failures,
            );
            registry.register(
                "vigil_notify_dead_letters",
                "Notifications passed over undelivered, by sink: refused for good by the \
                 receiver (a 4xx other than 408 and 429) or after `dead_letter_after` \
                 attempts. They are not sent again",
                dead_letters,
            );
        }

        let holding = Gauge::<i64>::default();
        holding.set(i64::from(brake.verdict.holds()));
        registry.register(
            "vigil_brake_holding",
            "1 while the mass-failure brake holds (failures are not counted, nothing goes \
             OFFLINE), else 0",
            holding,
        );
        registry.register(
            "vigil_brake_suppressed_failures",
            "Failures not counted because the mass-failure brake held, since the database \
             was created",
            ConstCounter::new(brake.suppressed),
        );

        let recorded = &self.inner;
        registry.register(
            "vigil_probe_duration_seconds",
            "Probe duration, by plugin (the cluster's explicit plugin, or auto when the \
             runtime routes it) and outcome",
            recorded.probe_duration.clone(),
        );
        registry.register(
            "vigil_probe_failures",
            "Probes that did not end healthy, by reason class",
            recorded.failures.clone(),
        );
        registry.register(
            "vigil_plugin_faults",
            "Inconclusive probes caused by the plugin (trap, deadline, memory limit, \
             malformed result, abandoned), by plugin",
            recorded.plugin_faults.clone(),
        );
        registry.register(
            "vigil_host_faults",
            "Inconclusive probes caused by vigil itself before the cluster was reached (its \
             file descriptors, local ports, instance pool, no local route, a resolver that \
             did not answer): neither the cluster's fault nor the plugin's",
            recorded.host_faults.clone(),
        );
        registry.register(
            "vigil_plugin_generation_changes",
            "Changes of a plugin's generations since start-up, by plugin and change: \
             promoted, refused, probation-passed, rolled-back, retired",
            recorded.plugin_changes.clone(),
        );
        registry.register(
            "vigil_transitions",
            "Confirmed status transitions of clusters, by previous and new status",
            recorded.transitions.clone(),
        );
        registry.register(
            "vigil_cascades",
            "Cascades to apps: degrade (a confirmed ONLINE to OFFLINE outage) and restore \
             (its recovery)",
            recorded.cascades.clone(),
        );
        registry.register(
            "vigil_cascade_apps",
            "Apps degraded or restored by cascades",
            recorded.cascade_apps.clone(),
        );
        registry.register(
            "vigil_tick_duration_seconds",
            "Duration of one iteration of the health worker's scheduling loop (finding due \
             clusters and starting their probes)",
            recorded.tick_duration.clone(),
        );
        registry.register(
            "vigil_probe_start_delay_seconds",
            "How late each probe started after its cluster was due (the scheduler's lag; \
             it grows when the fleet needs more probes per second than vigil can make)",
            recorded.start_delay.clone(),
        );

        registry.register(
            "vigil_stale_results",
            "Probe results of this replica discarded because their claim on the cluster \
             lapsed and another replica took the cluster before they were written",
            recorded.stale_results.clone(),
        );

        let mut text = String::new();
        // Writing to a `String` cannot fail, and the encoders fail only when their
        // writer does.
        prometheus_text::encode(&mut text, &registry).expect("writing to a String cannot fail");
        Ok(text)
    }
}

fn gauge_value(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}
