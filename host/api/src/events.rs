//! `/api/v1/events`: the history as a server-sent-events stream — transitions, cascades,
//! conditions and API changes — each event's id its history id, so a client that
//! reconnects with `Last-Event-ID` (or `?after=`) resumes without loss.
//!
//! Open streams share one [`EventFeed`]: a single task asks the store for the latest
//! event id while any stream is open and wakes the streams when it grows, so an idle
//! stream costs no database query of its own; each stream then reads only what is new to
//! it. At most `VIGIL_API_MAX_EVENT_STREAMS` streams are open at once; one more is
//! answered 503 with `Retry-After`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::ApiState;
use super::extract::ApiQuery;
use super::problem::{Problem, ProblemKind};
use super::server::DEFAULT_MAX_EVENT_STREAMS;
use super::views::EventView;
use vigil_store::Store;

/// How often the shared feed asks the store for the latest event while streams are open.
const POLL: Duration = Duration::from_millis(250);

/// How many events one look reads at most.
const BATCH: u32 = 500;

/// The `Retry-After` of a stream refused at the cap, in seconds.
const RETRY_AFTER_SECS: u32 = 5;

/// What every open event stream shares: the cap on open streams and the notifier of new
/// events, fed by one poller that runs only while a stream is open.
#[derive(Debug)]
pub struct EventFeed {
    streams: Arc<Semaphore>,
    max_streams: u32,
    /// The position of the latest event the poller saw (the store's
    /// `last_event_position`: it grows with each commit that writes events).
    latest: watch::Sender<i64>,
    /// Whether a poller task runs.
    polling: AtomicBool,
    /// How many times the poller asked the store.
    polls: AtomicU64,
}

impl Default for EventFeed {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_EVENT_STREAMS)
    }
}

impl EventFeed {
    /// A feed allowing `max_streams` open streams.
    pub fn new(max_streams: u32) -> Self {
        Self {
            streams: Arc::new(Semaphore::new(
                usize::try_from(max_streams).unwrap_or(usize::MAX),
            )),
            max_streams,
            latest: watch::channel(0).0,
            polling: AtomicBool::new(false),
            polls: AtomicU64::new(0),
        }
    }

    /// How many times the feed has asked the store for the latest event, over its life.
    pub fn polls(&self) -> u64 {
        self.polls.load(Ordering::Relaxed)
    }

    /// How many streams are open.
    pub fn open_streams(&self) -> usize {
        usize::try_from(self.max_streams)
            .unwrap_or(usize::MAX)
            .saturating_sub(self.streams.available_permits())
    }

    /// A stream's place in the feed (`None` at the cap), and the notifier it waits on;
    /// starts the poller when none runs.
    fn join(
        self: &Arc<Self>,
        store: &Store,
    ) -> Option<(OwnedSemaphorePermit, watch::Receiver<i64>)> {
        let permit = Arc::clone(&self.streams).try_acquire_owned().ok()?;
        let latest = self.latest.subscribe();
        if !self.polling.swap(true, Ordering::AcqRel) {
            tokio::spawn(Arc::clone(self).poll(store.clone()));
        }
        Some((permit, latest))
    }

    /// Asks the store for the latest event's position every [`POLL`] and wakes the streams when it
    /// grew; ends when no stream is left.
    async fn poll(self: Arc<Self>, store: Store) {
        loop {
            tokio::time::sleep(POLL).await;
            if self.latest.receiver_count() == 0 {
                self.polling.store(false, Ordering::Release);
                // A stream that joined between the count and the store saw a poller
                // running and started none: go on for it, unless it started one after all.
                if self.latest.receiver_count() == 0 || self.polling.swap(true, Ordering::AcqRel) {
                    return;
                }
            }
            self.polls.fetch_add(1, Ordering::Relaxed);
            match store.last_event_position().await {
                Ok(id) => {
                    self.latest.send_if_modified(|latest| {
                        let newer = id > *latest;
                        if newer {
                            *latest = id;
                        }
                        newer
                    });
                }
                Err(error) => {
                    tracing::warn!(error = %vigil_domain::probe::error_chain(&error), "event streams: reading the latest event failed");
                    tokio::time::sleep(POLL * 4).await;
                }
            }
        }
    }

    /// The answer to a stream beyond the cap.
    fn refusal(&self) -> Response {
        let mut response = Problem::new(
            ProblemKind::Unavailable,
            format!(
                "{} event streams are open, the most this server allows \
                 (VIGIL_API_MAX_EVENT_STREAMS); try again later",
                self.max_streams
            ),
        )
        .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        response
    }
}

pub(super) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new().routes(routes!(events))
}

/// Where the stream starts.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct EventsQuery {
    /// Start after this event id (as `Last-Event-ID`, which wins when both are given).
    /// Without either, the stream starts with the next event.
    after: Option<i64>,
}

/// What one open stream holds.
struct Cursor {
    store: Store,
    /// The last event sent.
    after: i64,
    /// Its position in the order streams read (the store's `EventRecord::position`).
    position: i64,
    pending: std::vec::IntoIter<(EventView, i64)>,
    latest: watch::Receiver<i64>,
    /// The stream's place under the cap, given back when the client goes.
    _permit: OwnedSemaphorePermit,
}

/// A stream of history events (`text/event-stream`): `id` is the event's id, `event` its
/// kind (`status-changed`, `apps-degraded`, `apps-restored`, …), `data` the event as JSON.
#[utoipa::path(get, path = "/api/v1/events", tag = "events", params(EventsQuery),
    responses(
        (status = 200, description = "The event stream", content_type = "text/event-stream", body = String),
        (status = 400, description = "Invalid Last-Event-ID", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "As many event streams are open as the server allows (VIGIL_API_MAX_EVENT_STREAMS)",
            body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u32, description = "Seconds to wait before trying again"))),
    ))]
async fn events(
    State(state): State<ApiState>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Response> {
    let last_event_id = headers
        .get("last-event-id")
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
                .ok_or_else(|| {
                    Problem::invalid("header.last-event-id", "Last-Event-ID must be an event id")
                })
        })
        .transpose()
        .map_err(IntoResponse::into_response)?;
    let Some((permit, latest)) = state.events.join(&state.store) else {
        return Err(state.events.refusal());
    };
    let start = match last_event_id.or(query.after) {
        Some(after) => after,
        None => state
            .store
            .last_event_id()
            .await
            .map_err(|error| Problem::from(error).into_response())?,
    };
    let cursor = Cursor {
        store: state.store.clone(),
        after: start,
        position: 0,
        pending: Vec::new().into_iter(),
        latest,
        _permit: permit,
    };
    let stream = futures_util::stream::unfold(cursor, |mut cursor| async move {
        loop {
            if let Some((event, position)) = cursor.pending.next() {
                cursor.after = event.id;
                cursor.position = position;
                let data = serde_json::to_string(&event).unwrap_or_default();
                let sse = Event::default()
                    .id(event.id.to_string())
                    .event(event.kind)
                    .data(data);
                return Some((Ok(sse), cursor));
            }
            match cursor.store.events_after(cursor.after, BATCH).await {
                Ok(batch) if !batch.is_empty() => {
                    cursor.pending = batch
                        .iter()
                        .map(|event| (EventView::from(event), event.position))
                        .collect::<Vec<_>>()
                        .into_iter();
                }
                Ok(_) => {
                    // Nothing new to this stream: wait until the feed sees an event past
                    // both it and what the feed knew already (so that an id the feed saw
                    // but this read did not cannot make it spin). A feed that is gone
                    // ends the stream.
                    let seen = (*cursor.latest.borrow_and_update()).max(cursor.position);
                    if cursor
                        .latest
                        .wait_for(|latest| *latest > seen)
                        .await
                        .is_err()
                    {
                        return None;
                    }
                }
                Err(error) => {
                    tracing::warn!(error = %vigil_domain::probe::error_chain(&error), "event stream: reading events failed");
                    tokio::time::sleep(POLL * 4).await;
                }
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
