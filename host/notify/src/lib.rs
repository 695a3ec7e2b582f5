//! Notifications: what vigil tells other systems when something changes, delivered from
//! the store's outbox.
//!
//! The store writes a notification in the same transaction as its change
//! (`vigil_store::outbox`); this crate reads the sinks' configuration ([`config`]) and
//! runs one sender per receiver URL ([`Notifier::run`]): a webhook's URL, each of an
//! Alertmanager sink's. A sender sends its URL's notifications in outbox order, one in
//! flight, and moves that URL's position only once the receiver accepted one: a crash
//! between the two sends it again, with the same id and body (at least once), and a
//! receiver that is down holds back only itself. A refused or unanswered notification is
//! tried again after a growing wait (1 s, doubling, up to `max_backoff`); after
//! `failing_after` failures in a row the sink counts as failing (metrics, `/readyz`), and
//! is still tried. A notification refused for good (a 4xx answer other than 408 and 429)
//! or `dead_letter_after` times is a dead letter: counted, said in the log, `/readyz` and
//! the metrics, and passed over, so that the ones after it still go out — for that one,
//! delivery is no longer at least once. With several replicas a sink's senders run where
//! the sink's lease is held.
//!
//! Sinks: a webhook signed per the Standard Webhooks scheme ([`signature`]), and
//! Alertmanager, whose alert of an OFFLINE cluster is posted again every
//! `repeat_interval` while the outage lasts, by a task of its own per URL (so that a
//! notification being retried never holds it back), with an `endsAt` far enough ahead to
//! outlive the longest wait between attempts, and resolved on recovery.

#![forbid(unsafe_code)]

pub mod config;
pub mod message;
pub mod send;
pub mod signature;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use rustls::ClientConfig;
use send::SendError;
use tokio::sync::{Mutex as AsyncMutex, watch};
use tokio::task::JoinSet;
use tracing::{info, warn};
use vigil_domain::probe::{error_chain, wall_clock};
use vigil_domain::tls::{TlsClients, Trust};
use vigil_store::outbox::{OutboxRecord, Passed, SinkRecord, sink_lease};
use vigil_store::{Store, StoreError};

pub use self::config::{ConfigError, NotifyConfig, Sink, SinkKind};

/// How long a replica's lease on a sink lasts; it renews it before every send.
const LEASE_TTL: Duration = Duration::from_secs(30);

/// How often an idle sender looks for new notifications.
const POLL: Duration = Duration::from_millis(500);

/// How many rows a sender reads at once.
const BATCH: u32 = 100;

/// How far ahead of now a firing alert ends, in repeat intervals, at least: it stays
/// firing while vigil posts it again, and resolves by itself a few intervals after vigil
/// stopped ([`lifetime`]).
const ALERT_LIFETIME_INTERVALS: u32 = 4;

/// What the senders report, for metrics, `/readyz` and the status page. No secret: errors
/// are vigil's own words, and name a receiver by its origin only.
#[derive(Debug, Default)]
pub struct NotifyStatus {
    sinks: Mutex<BTreeMap<String, SinkEntry>>,
    config_error: Mutex<Option<String>>,
}

/// A configured sink, and the state of each of its positions (receiver URLs).
#[derive(Debug, Default)]
struct SinkEntry {
    kind: &'static str,
    targets: BTreeMap<String, TargetStatus>,
}

/// One position's state, as its sender last saw it.
#[derive(Debug, Clone, Default)]
struct TargetStatus {
    failing: bool,
    attempts: u64,
    last_error: Option<String>,
    delivered: u64,
    failures: u64,
    dead_letters: u64,
    last_dead_letter: Option<String>,
}

/// One sink's state, as its senders last saw it (a sink with several receiver URLs sums
/// them: failing when one is).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkStatus {
    /// `webhook` or `alertmanager`.
    pub kind: &'static str,
    /// Whether a receiver URL failed `failing_after` times in a row or more, and still
    /// does.
    pub failing: bool,
    /// Failed attempts in a row (the most of its URLs).
    pub attempts: u64,
    /// The last failure of each URL failing now.
    pub last_error: Option<String>,
    /// Deliveries this process made (one per receiver URL).
    pub delivered: u64,
    /// Attempts of this process that failed.
    pub failures: u64,
    /// Notifications passed over undelivered since the sink was configured.
    pub dead_letters: u64,
    /// The last of them: its event and why.
    pub last_dead_letter: Option<String>,
    /// Its positions in the outbox, one per receiver URL.
    pub positions: Vec<String>,
}

impl NotifyStatus {
    /// Every configured sink's state, by name.
    pub fn sinks(&self) -> BTreeMap<String, SinkStatus> {
        let sinks = self.sinks.lock().unwrap_or_else(PoisonError::into_inner);
        sinks
            .iter()
            .map(|(name, entry)| {
                let mut sink = SinkStatus {
                    kind: entry.kind,
                    positions: entry.targets.keys().cloned().collect(),
                    ..SinkStatus::default()
                };
                let mut errors = Vec::new();
                for target in entry.targets.values() {
                    sink.failing |= target.failing;
                    sink.attempts = sink.attempts.max(target.attempts);
                    sink.delivered += target.delivered;
                    sink.failures += target.failures;
                    sink.dead_letters += target.dead_letters;
                    if target.last_dead_letter.is_some() {
                        sink.last_dead_letter.clone_from(&target.last_dead_letter);
                    }
                    errors.extend(target.last_error.clone());
                }
                sink.last_error = (!errors.is_empty()).then(|| errors.join("; "));
                (name.clone(), sink)
            })
            .collect()
    }

    /// Why the last notifications file read was refused, while the one before it stays
    /// in force.
    pub fn config_error(&self) -> Option<String> {
        self.config_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records the outcome of reading the notifications file again.
    pub fn set_config_error(&self, error: Option<String>) {
        *self
            .config_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = error;
    }

    fn update(&self, target: &Target<'_>, change: impl FnOnce(&mut TargetStatus)) {
        let mut sinks = self.sinks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(status) = sinks
            .get_mut(&target.sink.name)
            .and_then(|entry| entry.targets.get_mut(&target.position))
        {
            change(status);
        }
    }

    /// Takes what the database knows of a position (failures and dead letters survive a
    /// restart).
    fn registered(&self, target: &Target<'_>, record: &SinkRecord) {
        self.update(target, |s| {
            s.attempts = u64::try_from(record.attempts).unwrap_or(0);
            s.failing = record.failing_since.is_some();
            s.last_error = record.last_error.clone();
            s.dead_letters = u64::try_from(record.dead_letters).unwrap_or(0);
            s.last_dead_letter = dead_letter_text(record);
        });
    }

    fn configure(&self, config: &NotifyConfig) {
        let mut sinks = self.sinks.lock().unwrap_or_else(PoisonError::into_inner);
        let mut previous = std::mem::take(&mut *sinks);
        for sink in &config.sinks {
            let mut kept = previous.remove(&sink.name).unwrap_or_default();
            let entry = SinkEntry {
                kind: match sink.kind {
                    SinkKind::Webhook { .. } => "webhook",
                    SinkKind::Alertmanager { .. } => "alertmanager",
                },
                targets: Target::all(sink)
                    .map(|target| {
                        let status = kept.targets.remove(&target.position).unwrap_or_default();
                        (target.position, status)
                    })
                    .collect(),
            };
            sinks.insert(sink.name.clone(), entry);
        }
    }
}

/// What `/readyz` and the page say of a position's last dead letter.
fn dead_letter_text(record: &SinkRecord) -> Option<String> {
    let event = record.last_dead_letter_event?;
    let why = record.last_dead_letter_error.as_deref().unwrap_or("");
    Some(format!("event {event}: {why}"))
}

/// One receiver URL of a sink: the webhook's, or one of an Alertmanager sink's, with its
/// own position in the outbox.
#[derive(Debug, Clone)]
struct Target<'a> {
    sink: &'a Sink,
    url: &'a str,
    /// The name of its position in the outbox: the sink's name when it has one URL.
    position: String,
    /// What errors call it (scheme, host and port: a path may hold a secret).
    origin: String,
}

impl<'a> Target<'a> {
    fn all(sink: &'a Sink) -> impl Iterator<Item = Target<'a>> {
        let urls: Vec<&'a str> = match &sink.kind {
            SinkKind::Webhook { url, .. } => vec![url.as_str()],
            SinkKind::Alertmanager { urls, .. } => urls.iter().map(String::as_str).collect(),
        };
        let several = urls.len() > 1;
        urls.into_iter().map(move |url| Target {
            sink,
            url,
            position: if several {
                position_name(&sink.name, url)
            } else {
                sink.name.clone()
            },
            origin: config::url_origin(url),
        })
    }

    /// The position this one goes on from when it is new: the sink's own, when a sink
    /// with one URL was given more.
    fn inherits(&self) -> Option<&str> {
        (self.position != self.sink.name).then_some(self.sink.name.as_str())
    }

    /// `error`, naming this receiver when the sink has several kinds of answer to tell
    /// apart (an Alertmanager sink's URLs).
    fn said(&self, error: &SendError) -> String {
        match self.sink.kind {
            SinkKind::Webhook { .. } => error.to_string(),
            SinkKind::Alertmanager { .. } => format!("{}: {error}", self.origin),
        }
    }
}

/// The name of the outbox position of `url`, one of several receiver URLs of `sink`: the
/// sink's name and a digest of the URL (stable when the list is reordered; the URL itself
/// is not written, its path may hold a secret).
pub fn position_name(sink: &str, url: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, url.as_bytes());
    let hex: String = digest.as_ref()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{sink}#{hex}")
}

/// Delivers the outbox to the configured sinks.
#[derive(Debug)]
pub struct Notifier {
    store: Store,
    holder: String,
    status: Arc<NotifyStatus>,
    tls: TlsClients,
}

impl Notifier {
    /// A notifier writing through `store`, holding sinks' leases as `holder` (the replica,
    /// or any name on SQLite), reporting to `status`.
    pub fn new(store: Store, holder: String, status: Arc<NotifyStatus>) -> Self {
        Self {
            store,
            holder,
            status,
            tls: TlsClients::new(),
        }
    }

    /// Runs the senders of the configuration in `config`, restarting them whenever it
    /// changes, until `config`'s sender is dropped.
    pub async fn run(self, mut config: watch::Receiver<Arc<NotifyConfig>>) {
        let this = Arc::new(self);
        loop {
            let current = Arc::clone(&config.borrow_and_update());
            let mut senders = this.start(&current).await;
            // The senders run until the configuration changes (or its sender is gone).
            let changed = config.changed().await;
            senders.shutdown().await;
            if changed.is_err() {
                return;
            }
        }
    }

    async fn start(self: &Arc<Self>, config: &Arc<NotifyConfig>) -> JoinSet<()> {
        self.status.configure(config);
        let mut positions = Vec::new();
        let mut senders = JoinSet::new();
        for (index, sink) in config.sinks.iter().enumerate() {
            for (url, target) in Target::all(sink).enumerate() {
                // Registered before the positions no longer configured are forgotten, so
                // that a new position can go on from the one it replaces (the sender
                // registers it again if this fails).
                if let Err(error) = self
                    .store
                    .register_sink(&target.position, target.inherits())
                    .await
                {
                    warn!(sink = %sink.name, error = %error_chain(&error), "cannot register the sink yet");
                }
                positions.push(target.position);
                // One send or re-post at a time to a receiver: a re-post read before a
                // recovery must not reach it after the recovery's resolution.
                let one_at_a_time = Arc::new(AsyncMutex::new(()));
                let this = Arc::clone(self);
                let held = Arc::clone(config);
                let turn = Arc::clone(&one_at_a_time);
                senders.spawn(async move { this.send_forever(&held, index, url, &turn).await });
                if matches!(sink.kind, SinkKind::Alertmanager { .. }) {
                    let this = Arc::clone(self);
                    let held = Arc::clone(config);
                    senders.spawn(async move {
                        this.repost_forever(&held, index, url, &one_at_a_time).await;
                    });
                }
            }
        }
        if let Err(error) = self.store.forget_sinks_except(&positions).await {
            warn!(error = %error_chain(&error), "cannot forget the sinks no longer configured");
        }
        if !config.sinks.is_empty() {
            let names: Vec<&str> = config.sinks.iter().map(|s| s.name.as_str()).collect();
            info!(sinks = ?names, "notifications: sending to the configured sinks");
        }
        senders
    }

    /// The TLS configuration of `sink`'s connections.
    fn tls_for(&self, sink: &Sink) -> Result<Arc<ClientConfig>, String> {
        let trust = match &sink.ca_pem {
            Some(pem) => Trust::Ca(pem),
            None => Trust::System,
        };
        self.tls
            .client_config(trust, None)
            .map(Arc::new)
            .map_err(|e| e.to_string())
    }

    /// Whether this replica holds `sink`'s lease (renewing it).
    async fn holds(&self, sink: &Sink) -> Result<bool, StoreError> {
        self.store
            .hold_lease(&sink_lease(&sink.name), &self.holder, LEASE_TTL)
            .await
    }

    async fn send_forever(
        &self,
        config: &NotifyConfig,
        index: usize,
        url: usize,
        turn: &AsyncMutex<()>,
    ) {
        let sink = &config.sinks[index];
        let Some(target) = Target::all(sink).nth(url) else {
            return;
        };
        let tls = match self.tls_for(sink) {
            Ok(tls) => tls,
            Err(error) => {
                warn!(sink = %sink.name, %error, "the sink's TLS settings cannot be used; nothing is sent to it");
                self.status.update(&target, |s| {
                    s.failing = true;
                    s.last_error = Some(error);
                });
                return;
            }
        };
        // Registered once (a write, retried until it succeeds), then only read and moved.
        loop {
            match self
                .store
                .register_sink(&target.position, target.inherits())
                .await
            {
                Ok(record) => {
                    self.status.registered(&target, &record);
                    break;
                }
                Err(error) => {
                    warn!(sink = %sink.name, error = %error_chain(&error), "cannot register the sink; trying again");
                    tokio::time::sleep(POLL * 4).await;
                }
            }
        }
        loop {
            match self.step(config, &target, &tls, turn).await {
                Ok(true) => {}
                Ok(false) => tokio::time::sleep(POLL).await,
                Err(error) => {
                    warn!(sink = %sink.name, error = %error_chain(&error), "notifications wait: the database failed");
                    tokio::time::sleep(POLL * 4).await;
                }
            }
        }
    }

    /// One look at the outbox for `target`: answers whether it did something.
    async fn step(
        &self,
        config: &NotifyConfig,
        target: &Target<'_>,
        tls: &Arc<ClientConfig>,
        turn: &AsyncMutex<()>,
    ) -> Result<bool, StoreError> {
        if !self.holds(target.sink).await? {
            return Ok(false);
        }
        let rows = self.store.outbox_after(&target.position, BATCH).await?;
        if rows.is_empty() {
            return Ok(false);
        }
        for row in rows {
            if !self.deliver(config, target, tls, turn, &row).await? {
                // Another sender moved the position: read where it stands now.
                break;
            }
        }
        Ok(true)
    }

    /// Sends `row` until it is accepted, left out by the sink's filter, or given up on
    /// (a dead letter), then moves the position past it. Answers `false` when the
    /// position was not where this sender thought.
    async fn deliver(
        &self,
        config: &NotifyConfig,
        target: &Target<'_>,
        tls: &Arc<ClientConfig>,
        turn: &AsyncMutex<()>,
        row: &OutboxRecord,
    ) -> Result<bool, StoreError> {
        let sink = target.sink;
        let lease = sink_lease(&sink.name);
        let labels = message::labels(&row.labels);
        let detail = serde_json::from_str::<serde_json::Value>(&row.payload)
            .ok()
            .and_then(|p| p.get("detail").cloned())
            .unwrap_or_default();
        let wanted = sink.filter.passes(
            &row.kind,
            row.cluster_name.as_ref().map(|_| &labels),
            &detail,
        ) && match &sink.kind {
            SinkKind::Webhook { .. } => true,
            SinkKind::Alertmanager { .. } => message::alert_change(row).is_some(),
        };
        if !wanted {
            return self
                .store
                .sink_advanced(
                    &target.position,
                    &lease,
                    row,
                    Passed::Filtered,
                    &self.holder,
                    wall_clock(),
                )
                .await;
        }
        let mut failures: u32 = 0;
        loop {
            let sent = {
                let _turn = turn.lock().await;
                self.send(config, target, tls, row).await
            };
            let error = match sent {
                Ok(()) => {
                    let moved = self
                        .store
                        .sink_advanced(
                            &target.position,
                            &lease,
                            row,
                            Passed::Delivered,
                            &self.holder,
                            wall_clock(),
                        )
                        .await?;
                    if moved {
                        self.status.update(target, |s| {
                            s.delivered += 1;
                            s.attempts = 0;
                            s.failing = false;
                            s.last_error = None;
                        });
                    }
                    return Ok(moved);
                }
                Err(error) => error,
            };
            failures = failures.saturating_add(1);
            let said = target.said(&error);
            let record = if error.is_permanent() {
                None
            } else {
                self.store
                    .sink_failed(&target.position, &said, config.failing_after, wall_clock())
                    .await?
            };
            let attempts = record.as_ref().map_or(u64::from(failures), |r| {
                u64::try_from(r.attempts).unwrap_or(0)
            });
            if error.is_permanent() || attempts >= u64::from(config.dead_letter_after) {
                let why = if error.is_permanent() {
                    format!("refused for good: {said}")
                } else {
                    format!("{attempts} attempts failed, the last: {said}")
                };
                warn!(sink = %sink.name, receiver = %target.origin, event = row.event_id, reason = %why, "a notification is passed over undelivered (a dead letter); the ones after it go on");
                let moved = self
                    .store
                    .sink_advanced(
                        &target.position,
                        &lease,
                        row,
                        Passed::DeadLettered { error: &why },
                        &self.holder,
                        wall_clock(),
                    )
                    .await?;
                if moved {
                    self.status.update(target, |s| {
                        s.failures += 1;
                        s.attempts = 0;
                        s.dead_letters += 1;
                        s.last_dead_letter = Some(format!("event {}: {why}", row.event_id));
                    });
                }
                return Ok(moved);
            }
            warn!(sink = %sink.name, event = row.event_id, attempt = attempts, error = %said, "a notification was not accepted; trying again");
            let failing = record.as_ref().is_some_and(|r| r.failing_since.is_some());
            self.status.update(target, |s| {
                s.failures += 1;
                s.attempts = attempts;
                s.failing = failing;
                s.last_error = Some(said);
            });
            tokio::time::sleep(backoff(failures, config.max_backoff)).await;
            // Still this sender's sink? (Another replica may have taken it.)
            if !self.holds(sink).await? {
                return Ok(false);
            }
        }
    }

    /// One attempt at sending `row` to `target`.
    async fn send(
        &self,
        config: &NotifyConfig,
        target: &Target<'_>,
        tls: &Arc<ClientConfig>,
        row: &OutboxRecord,
    ) -> Result<(), SendError> {
        let sink = target.sink;
        match &sink.kind {
            SinkKind::Webhook { keys, .. } => {
                let id = message::message_id(row);
                let body = message::webhook_body(row);
                let timestamp = wall_clock().0.div_euclid(1000);
                let signature = signature::sign(keys, &id, timestamp, &body);
                let headers = [
                    ("webhook-id", id),
                    ("webhook-timestamp", timestamp.to_string()),
                    ("webhook-signature", signature),
                ];
                send::post_json(target.url, &headers, Bytes::from(body), sink.timeout, tls)
                    .await
                    .map(drop)
            }
            SinkKind::Alertmanager {
                repeat_interval, ..
            } => {
                let Some(opens) = message::alert_change(row) else {
                    return Ok(());
                };
                let cluster = row.cluster_name.as_deref().unwrap_or_default();
                // Never before it starts, whatever this replica's clock says.
                let now = wall_clock().0.max(row.at);
                let ends_at = if opens {
                    now + lifetime(*repeat_interval, config.max_backoff)
                } else {
                    now
                };
                let alert = message::alert(
                    cluster,
                    &message::labels(&row.labels),
                    row.reason_class.as_deref(),
                    row.reason.as_deref(),
                    row.at,
                    ends_at,
                );
                post_alerts(target.url, &[alert], sink.timeout, tls).await
            }
        }
    }

    /// Posts the alert of every cluster OFFLINE now (that the sink's labels select) to
    /// `url`, one of the sink's Alertmanagers, every `repeat_interval`, while this
    /// replica holds the sink's lease.
    async fn repost_forever(
        &self,
        config: &NotifyConfig,
        index: usize,
        url: usize,
        turn: &AsyncMutex<()>,
    ) {
        let sink = &config.sinks[index];
        let (
            Some(target),
            SinkKind::Alertmanager {
                repeat_interval, ..
            },
        ) = (Target::all(sink).nth(url), &sink.kind)
        else {
            return;
        };
        let Ok(tls) = self.tls_for(sink) else {
            // The sender said why.
            return;
        };
        let mut every = tokio::time::interval(*repeat_interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            match self.repost(config, &target, &tls, turn).await {
                Ok(()) => {}
                Err(error) => {
                    warn!(sink = %sink.name, error = %error_chain(&error), "the firing alerts were not posted again: the database failed");
                }
            }
        }
    }

    async fn repost(
        &self,
        config: &NotifyConfig,
        target: &Target<'_>,
        tls: &Arc<ClientConfig>,
        turn: &AsyncMutex<()>,
    ) -> Result<(), StoreError> {
        let sink = target.sink;
        let SinkKind::Alertmanager {
            repeat_interval, ..
        } = &sink.kind
        else {
            return Ok(());
        };
        if !self.holds(sink).await? {
            return Ok(());
        }
        // Read and posted in the receiver's turn: what a recovery resolves is either read
        // OFFLINE and posted before the resolution, or read resolved.
        let _turn = turn.lock().await;
        let now = wall_clock().0;
        let lifetime = lifetime(*repeat_interval, config.max_backoff);
        let alerts: Vec<serde_json::Value> = self
            .store
            .open_outages()
            .await?
            .iter()
            .filter(|outage| {
                let labels = message::labels(&outage.labels);
                sink.filter
                    .labels
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v))
            })
            .map(|outage| message::firing(outage, now.max(outage.opened_at) + lifetime))
            .collect();
        if alerts.is_empty() {
            return Ok(());
        }
        if let Err(error) = post_alerts(target.url, &alerts, sink.timeout, tls).await {
            let said = target.said(&error);
            warn!(sink = %sink.name, error = %said, "the firing alerts were not posted again; next try in one interval");
            self.status.update(target, |s| {
                s.failures += 1;
                s.last_error = Some(said);
            });
        }
        Ok(())
    }
}

/// How long after now (or after its start, if later) a firing alert ends: four repeat
/// intervals, and longer than the longest wait between two attempts, so that an alert
/// being retried does not resolve in between.
fn lifetime(repeat_interval: Duration, max_backoff: Duration) -> i64 {
    let lifetime =
        (repeat_interval * ALERT_LIFETIME_INTERVALS).max(max_backoff + repeat_interval * 2);
    i64::try_from(lifetime.as_millis()).unwrap_or(i64::MAX)
}

/// Posts `alerts` to the Alertmanager at `url`.
async fn post_alerts(
    url: &str,
    alerts: &[serde_json::Value],
    timeout: Duration,
    tls: &Arc<ClientConfig>,
) -> Result<(), SendError> {
    let body = Bytes::from(serde_json::to_vec(alerts).unwrap_or_default());
    let endpoint = format!("{}/api/v2/alerts", url.trim_end_matches('/'));
    send::post_json(&endpoint, &[], body, timeout, tls)
        .await
        .map(drop)
}

/// The wait after the `failures`th failed attempt in a row: 1 s, doubling, at most `max`.
pub fn backoff(failures: u32, max: Duration) -> Duration {
    let exponent = failures.saturating_sub(1).min(20);
    Duration::from_secs(1u64 << exponent).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alert_outlives_the_longest_wait_between_attempts() {
        let minute = Duration::from_secs(60);
        assert_eq!(lifetime(minute, Duration::from_secs(300)), 420_000);
        assert_eq!(lifetime(minute, Duration::from_secs(10)), 240_000);
    }

    #[test]
    fn several_urls_have_positions_of_their_own_and_one_url_keeps_the_sinks() {
        let a = position_name("alerts", "http://am-0:9093");
        let b = position_name("alerts", "http://am-1:9093");
        assert_ne!(a, b);
        assert!(a.starts_with("alerts#") && !a.contains("am-0"), "{a}");
        assert_eq!(a, position_name("alerts", "http://am-0:9093"));
    }

    #[test]
    fn the_wait_doubles_up_to_its_cap() {
        let max = Duration::from_secs(300);
        let waits: Vec<u64> = (1..=11).map(|n| backoff(n, max).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(backoff(u32::MAX, max), max);
    }
}
