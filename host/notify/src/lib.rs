//! Notifications: what vigil tells other systems when something changes, delivered from
//! the store's outbox.
//!
//! The store writes a notification in the same transaction as its change
//! (`vigil_store::outbox`); this crate reads the sinks' configuration ([`config`]) and
//! runs one sender per sink ([`Notifier::run`]). A sender sends its sink's notifications
//! in outbox order, one in flight, and moves the sink's position only once the receiver
//! accepted one: a crash between the two sends it again, with the same id and body (at
//! least once). A refused or unanswered notification is tried again after a growing wait
//! (1 s, doubling, up to `max_backoff`); after `failing_after` failures in a row the sink
//! counts as failing (metrics, `/readyz`), and is still tried. With several replicas a
//! sink's sender runs where the sink's lease is held.
//!
//! Sinks: a webhook signed per the Standard Webhooks scheme ([`signature`]), and
//! Alertmanager, whose alert of an OFFLINE cluster is posted again every
//! `repeat_interval` while the outage lasts (with `endsAt` four intervals ahead, so it
//! neither resolves by itself nor outlives vigil by long) and resolved on recovery.

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
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{info, warn};
use vigil_domain::probe::{error_chain, wall_clock};
use vigil_domain::tls::{TlsClients, Trust};
use vigil_store::outbox::{OutboxRecord, sink_lease};
use vigil_store::{Store, StoreError};

pub use self::config::{ConfigError, NotifyConfig, Sink, SinkKind};

/// How long a replica's lease on a sink lasts; it renews it before every send.
const LEASE_TTL: Duration = Duration::from_secs(30);

/// How often an idle sender looks for new notifications.
const POLL: Duration = Duration::from_millis(500);

/// How many rows a sender reads at once.
const BATCH: u32 = 100;

/// How far ahead of now a firing alert ends, in repeat intervals: it stays firing while
/// vigil posts it again, and resolves by itself a few intervals after vigil stopped.
const ALERT_LIFETIME_INTERVALS: u32 = 4;

/// What the senders report, for metrics, `/readyz` and the status page. No secret: errors
/// are vigil's own words.
#[derive(Debug, Default)]
pub struct NotifyStatus {
    sinks: Mutex<BTreeMap<String, SinkStatus>>,
    config_error: Mutex<Option<String>>,
}

/// One sink's state, as its sender last saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkStatus {
    /// `webhook` or `alertmanager`.
    pub kind: &'static str,
    /// Whether it failed `failing_after` times in a row or more, and still does.
    pub failing: bool,
    /// Failed attempts in a row.
    pub attempts: u64,
    /// The last failure.
    pub last_error: Option<String>,
    /// Notifications this process delivered to it.
    pub delivered: u64,
    /// Attempts of this process that failed.
    pub failures: u64,
}

impl NotifyStatus {
    /// Every configured sink's state, by name.
    pub fn sinks(&self) -> BTreeMap<String, SinkStatus> {
        self.sinks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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

    fn update(&self, sink: &str, change: impl FnOnce(&mut SinkStatus)) {
        let mut sinks = self.sinks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(status) = sinks.get_mut(sink) {
            change(status);
        }
    }

    fn configure(&self, config: &NotifyConfig) {
        let mut sinks = self.sinks.lock().unwrap_or_else(PoisonError::into_inner);
        let previous = std::mem::take(&mut *sinks);
        for sink in &config.sinks {
            let mut status = previous.get(&sink.name).cloned().unwrap_or_default();
            status.kind = match sink.kind {
                SinkKind::Webhook { .. } => "webhook",
                SinkKind::Alertmanager { .. } => "alertmanager",
            };
            sinks.insert(sink.name.clone(), status);
        }
    }
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
        let names: Vec<String> = config.sinks.iter().map(|s| s.name.clone()).collect();
        if let Err(error) = self.store.forget_sinks_except(&names).await {
            warn!(error = %error_chain(&error), "cannot forget the sinks no longer configured");
        }
        let mut senders = JoinSet::new();
        for index in 0..config.sinks.len() {
            let this = Arc::clone(self);
            let config = Arc::clone(config);
            senders.spawn(async move { this.send_forever(&config, index).await });
        }
        if !names.is_empty() {
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

    async fn send_forever(&self, config: &NotifyConfig, index: usize) {
        let sink = &config.sinks[index];
        let tls = match self.tls_for(sink) {
            Ok(tls) => tls,
            Err(error) => {
                warn!(sink = %sink.name, %error, "the sink's TLS settings cannot be used; nothing is sent to it");
                self.status.update(&sink.name, |s| {
                    s.failing = true;
                    s.last_error = Some(error);
                });
                return;
            }
        };
        // Registered once (a write, retried until it succeeds), then only read and moved.
        let mut registered = false;
        let mut next_refresh = tokio::time::Instant::now();
        loop {
            if !registered {
                match self.store.register_sink(&sink.name).await {
                    Ok(_) => registered = true,
                    Err(error) => {
                        warn!(sink = %sink.name, error = %error_chain(&error), "cannot register the sink; trying again");
                        tokio::time::sleep(POLL * 4).await;
                        continue;
                    }
                }
            }
            match self.step(config, sink, &tls, &mut next_refresh).await {
                Ok(true) => {}
                Ok(false) => tokio::time::sleep(POLL).await,
                Err(error) => {
                    warn!(sink = %sink.name, error = %error_chain(&error), "notifications wait: the database failed");
                    tokio::time::sleep(POLL * 4).await;
                }
            }
        }
    }

    /// One look at the outbox for `sink`: answers whether it did something.
    async fn step(
        &self,
        config: &NotifyConfig,
        sink: &Sink,
        tls: &Arc<ClientConfig>,
        next_refresh: &mut tokio::time::Instant,
    ) -> Result<bool, StoreError> {
        if !self
            .store
            .hold_lease(&sink_lease(&sink.name), &self.holder, LEASE_TTL)
            .await?
        {
            return Ok(false);
        }
        if let SinkKind::Alertmanager {
            urls,
            repeat_interval,
        } = &sink.kind
            && tokio::time::Instant::now() >= *next_refresh
        {
            *next_refresh = tokio::time::Instant::now() + *repeat_interval;
            self.refresh_alerts(sink, urls, *repeat_interval, tls)
                .await?;
        }
        let rows = self.store.outbox_after(&sink.name, BATCH).await?;
        if rows.is_empty() {
            return Ok(false);
        }
        for row in rows {
            if !self.deliver(config, sink, tls, &row).await? {
                // Another sender moved the sink: read where it stands now.
                break;
            }
        }
        Ok(true)
    }

    /// Sends `row` until it is accepted (or left out by the sink's filter), then moves
    /// the sink past it. Answers `false` when the sink was not where this sender thought.
    async fn deliver(
        &self,
        config: &NotifyConfig,
        sink: &Sink,
        tls: &Arc<ClientConfig>,
        row: &OutboxRecord,
    ) -> Result<bool, StoreError> {
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
                .sink_advanced(&sink.name, row, false, &self.holder, wall_clock())
                .await;
        }
        let mut failures: u32 = 0;
        loop {
            match self.send(sink, tls, row).await {
                Ok(()) => {
                    let moved = self
                        .store
                        .sink_advanced(&sink.name, row, true, &self.holder, wall_clock())
                        .await?;
                    if moved {
                        self.status.update(&sink.name, |s| {
                            s.delivered += 1;
                            s.attempts = 0;
                            s.failing = false;
                            s.last_error = None;
                        });
                    }
                    return Ok(moved);
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    warn!(sink = %sink.name, event = row.event_id, attempt = failures, %error, "a notification was not accepted; trying again");
                    let record = self
                        .store
                        .sink_failed(&sink.name, &error, config.failing_after, wall_clock())
                        .await?;
                    let failing = record.as_ref().is_some_and(|r| r.failing_since.is_some());
                    let attempts = record.map_or(u64::from(failures), |r| {
                        u64::try_from(r.attempts).unwrap_or(0)
                    });
                    self.status.update(&sink.name, |s| {
                        s.failures += 1;
                        s.attempts = attempts;
                        s.failing = failing;
                        s.last_error = Some(error.clone());
                    });
                    tokio::time::sleep(backoff(failures, config.max_backoff)).await;
                    // Still this sender's sink? (Another replica may have taken it.)
                    if !self
                        .store
                        .hold_lease(&sink_lease(&sink.name), &self.holder, LEASE_TTL)
                        .await?
                    {
                        return Ok(false);
                    }
                }
            }
        }
    }

    /// One attempt at sending `row` to `sink`.
    async fn send(
        &self,
        sink: &Sink,
        tls: &Arc<ClientConfig>,
        row: &OutboxRecord,
    ) -> Result<(), String> {
        match &sink.kind {
            SinkKind::Webhook { url, keys } => {
                let id = message::message_id(row);
                let body = message::webhook_body(row);
                let timestamp = wall_clock().0.div_euclid(1000);
                let signature = signature::sign(keys, &id, timestamp, &body);
                let headers = [
                    ("webhook-id", id),
                    ("webhook-timestamp", timestamp.to_string()),
                    ("webhook-signature", signature),
                ];
                send::post_json(url, &headers, Bytes::from(body), sink.timeout, tls)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
            SinkKind::Alertmanager {
                urls,
                repeat_interval,
            } => {
                let Some(opens) = message::alert_change(row) else {
                    return Ok(());
                };
                let cluster = row.cluster_name.as_deref().unwrap_or_default();
                let now = wall_clock().0;
                let ends_at = if opens {
                    now + lifetime(*repeat_interval)
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
                post_alerts(urls, &[alert], sink.timeout, tls).await
            }
        }
    }

    /// Posts the alert of every cluster OFFLINE now (that the sink's labels select) again.
    async fn refresh_alerts(
        &self,
        sink: &Sink,
        urls: &[String],
        repeat_interval: Duration,
        tls: &Arc<ClientConfig>,
    ) -> Result<(), StoreError> {
        let ends_at = wall_clock().0 + lifetime(repeat_interval);
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
            .map(|outage| message::firing(outage, ends_at))
            .collect();
        if alerts.is_empty() {
            return Ok(());
        }
        if let Err(error) = post_alerts(urls, &alerts, sink.timeout, tls).await {
            warn!(sink = %sink.name, %error, "the firing alerts were not posted again; next try in one interval");
            self.status.update(&sink.name, |s| {
                s.failures += 1;
                s.last_error = Some(error);
            });
        }
        Ok(())
    }
}

/// How long after now a firing alert ends.
fn lifetime(repeat_interval: Duration) -> i64 {
    i64::try_from((repeat_interval * ALERT_LIFETIME_INTERVALS).as_millis()).unwrap_or(i64::MAX)
}

/// Posts `alerts` to every Alertmanager of `urls`; fails unless each accepted them.
async fn post_alerts(
    urls: &[String],
    alerts: &[serde_json::Value],
    timeout: Duration,
    tls: &Arc<ClientConfig>,
) -> Result<(), String> {
    let body = Bytes::from(serde_json::to_vec(alerts).unwrap_or_default());
    let mut errors = Vec::new();
    for url in urls {
        let endpoint = format!("{}/api/v2/alerts", url.trim_end_matches('/'));
        if let Err(error) = send::post_json(&endpoint, &[], body.clone(), timeout, tls).await {
            errors.push(format!("{}: {error}", config::url_origin(url)));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
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
    fn the_wait_doubles_up_to_its_cap() {
        let max = Duration::from_secs(300);
        let waits: Vec<u64> = (1..=11).map(|n| backoff(n, max).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(backoff(u32::MAX, max), max);
    }
}
