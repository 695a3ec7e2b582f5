//! The per-cluster request log, so that tests and benchmarks count probes from the server's
//! side.
//!
//! Counters are exact for the cluster's whole life; the list of entries keeps only the most
//! recent ones (a bounded ring), so a long benchmark does not grow memory without bound.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::auth::AuthUsed;

/// How many entries a cluster keeps by default.
pub const DEFAULT_LOG_CAPACITY: usize = 1024;

/// One request as the fake cluster saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LoggedRequest {
    /// The request's number on this cluster, from 1.
    pub seq: u64,
    /// When the request arrived (milliseconds since the Unix epoch in JSON).
    #[serde(rename = "at_unix_ms", serialize_with = "unix_ms")]
    pub at: SystemTime,
    /// The HTTP method.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The raw query string, if any.
    pub query: Option<String>,
    /// `HTTP/1.1` or `HTTP/2.0`.
    pub http_version: String,
    /// The connection the request came on (numbered from 1 per cluster), so keep-alive reuse
    /// is visible.
    pub connection: u64,
    /// Which credentials the request carried and whether they were valid.
    pub auth: AuthUsed,
    /// The status answered, or `None` while pending and for requests that were never
    /// answered (hang, reset).
    pub status: Option<u16>,
    /// How long the answer took (milliseconds in JSON), once answered or dropped.
    #[serde(rename = "elapsed_ms", serialize_with = "opt_ms")]
    pub elapsed: Option<Duration>,
}

/// The fields of a request that the server records when it arrives.
#[derive(Debug)]
pub(crate) struct Arrival<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) query: Option<&'a str>,
    pub(crate) http_version: &'static str,
    pub(crate) connection: u64,
    pub(crate) auth: AuthUsed,
}

/// Counters of one cluster, exact since start (or since the last [`RequestLog::clear`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LogCounts {
    /// Requests received (including hung and reset ones).
    pub requests: u64,
    /// TCP connections accepted.
    pub connections: u64,
    /// TLS handshakes completed.
    pub handshakes: u64,
    /// Connections reset on purpose (flap `refuse`, or accepted while refusing).
    pub resets: u64,
}

/// The request log of one cluster.
#[derive(Debug)]
pub struct RequestLog {
    capacity: usize,
    requests: AtomicU64,
    connections: AtomicU64,
    handshakes: AtomicU64,
    resets: AtomicU64,
    entries: Mutex<VecDeque<LoggedRequest>>,
}

impl RequestLog {
    /// An empty log that keeps at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            requests: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            handshakes: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            entries: Mutex::new(VecDeque::new()),
        }
    }

    /// The exact counters.
    pub fn counts(&self) -> LogCounts {
        LogCounts {
            requests: self.requests.load(Ordering::Relaxed),
            connections: self.connections.load(Ordering::Relaxed),
            handshakes: self.handshakes.load(Ordering::Relaxed),
            resets: self.resets.load(Ordering::Relaxed),
        }
    }

    /// The number of requests received.
    pub fn count(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// The most recent entries, oldest first.
    pub fn entries(&self) -> Vec<LoggedRequest> {
        self.lock().iter().cloned().collect()
    }

    /// The entries whose path is `path` (query ignored), oldest first.
    pub fn entries_for(&self, path: &str) -> Vec<LoggedRequest> {
        self.lock()
            .iter()
            .filter(|entry| entry.path == path)
            .cloned()
            .collect()
    }

    /// Forgets entries and resets the counters.
    pub fn clear(&self) {
        let mut entries = self.lock();
        entries.clear();
        self.requests.store(0, Ordering::Relaxed);
        self.connections.store(0, Ordering::Relaxed);
        self.handshakes.store(0, Ordering::Relaxed);
        self.resets.store(0, Ordering::Relaxed);
    }

    pub(crate) fn connection_accepted(&self) -> u64 {
        self.connections.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn handshake_completed(&self) {
        self.handshakes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn connection_reset(&self) {
        self.resets.fetch_add(1, Ordering::Relaxed);
    }

    /// Records an arrival and returns its sequence number, to be completed later.
    pub(crate) fn arrived(&self, arrival: Arrival<'_>) -> u64 {
        let mut entries = self.lock();
        // Counting under the lock keeps entries in sequence order.
        let seq = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        if self.capacity == 0 {
            return seq;
        }
        if entries.len() == self.capacity {
            entries.pop_front();
        }
        entries.push_back(LoggedRequest {
            seq,
            at: SystemTime::now(),
            method: arrival.method.to_owned(),
            path: arrival.path.to_owned(),
            query: arrival.query.map(str::to_owned),
            http_version: arrival.http_version.to_owned(),
            connection: arrival.connection,
            auth: arrival.auth,
            status: None,
            elapsed: None,
        });
        seq
    }

    /// Fills in how request `seq` ended, if it is still kept.
    pub(crate) fn completed(&self, seq: u64, status: Option<u16>, elapsed: Duration) {
        let mut entries = self.lock();
        // The entry is almost always among the last few, so search from the back.
        if let Some(entry) = entries.iter_mut().rev().find(|entry| entry.seq == seq) {
            entry.status = status;
            entry.elapsed = Some(elapsed);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<LoggedRequest>> {
        // A panic while holding this lock cannot leave the deque inconsistent, so a poisoned
        // lock is still usable.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn unix_ms<S: serde::Serializer>(at: &SystemTime, serializer: S) -> Result<S::Ok, S::Error> {
    let ms = at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    serializer.serialize_u128(ms)
}

fn opt_ms<S: serde::Serializer>(
    elapsed: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match elapsed {
        Some(elapsed) => serializer.serialize_f64(elapsed.as_secs_f64() * 1000.0),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(path: &str) -> Arrival<'_> {
        Arrival {
            method: "GET",
            path,
            query: Some("limit=1"),
            http_version: "HTTP/1.1",
            connection: 1,
            auth: AuthUsed::Anonymous,
        }
    }

    #[test]
    fn keeps_the_newest_entries_and_exact_counts() {
        let log = RequestLog::new(2);
        for path in ["/a", "/b", "/c"] {
            let seq = log.arrived(arrival(path));
            log.completed(seq, Some(200), Duration::from_millis(1));
        }
        assert_eq!(log.count(), 3);
        let kept: Vec<_> = log
            .entries()
            .into_iter()
            .map(|e| (e.seq, e.path, e.status))
            .collect();
        assert_eq!(
            kept,
            vec![
                (2, "/b".to_owned(), Some(200)),
                (3, "/c".to_owned(), Some(200))
            ]
        );
        log.clear();
        assert_eq!(log.counts(), LogCounts::default());
        assert!(log.entries().is_empty());
    }

    #[test]
    fn serialises_times_as_milliseconds() {
        let log = RequestLog::new(4);
        let seq = log.arrived(arrival("/api/v1/namespaces"));
        log.completed(seq, Some(200), Duration::from_micros(1500));
        let json = serde_json::to_value(log.entries()).expect("serialises");
        assert_eq!(json[0]["elapsed_ms"], 1.5);
        assert!(
            json[0]["at_unix_ms"]
                .as_u64()
                .is_some_and(|ms| ms > 1_600_000_000_000)
        );
        assert_eq!(json[0]["auth"]["kind"], "anonymous");
    }
}
