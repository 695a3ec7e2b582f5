//! `/api/v1/events`: the history as a server-sent-events stream — transitions, cascades,
//! conditions and API changes — each event's id its history id, so a client that
//! reconnects with `Last-Event-ID` (or `?after=`) resumes without loss.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::ApiState;
use super::extract::ApiQuery;
use super::problem::Problem;
use super::views::EventView;

/// How often the stream looks for new events when idle.
const POLL: Duration = Duration::from_millis(250);

/// How many events one look reads at most.
const BATCH: u32 = 500;

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

/// A stream of history events (`text/event-stream`): `id` is the event's id, `event` its
/// kind (`status-changed`, `apps-degraded`, `apps-restored`, …), `data` the event as JSON.
#[utoipa::path(get, path = "/api/v1/events", tag = "events", params(EventsQuery),
    responses(
        (status = 200, description = "The event stream", content_type = "text/event-stream", body = String),
        (status = 400, description = "Invalid Last-Event-ID", body = Problem, content_type = "application/problem+json"),
    ))]
async fn events(
    State(state): State<ApiState>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Problem> {
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
        .transpose()?;
    let start = match last_event_id.or(query.after) {
        Some(after) => after,
        None => state.store.last_event_id().await?,
    };
    let store = state.store.clone();
    let stream = futures_util::stream::unfold(
        (store, start, Vec::<EventView>::new().into_iter()),
        |(store, mut cursor, mut pending)| async move {
            loop {
                if let Some(event) = pending.next() {
                    cursor = event.id;
                    let data = serde_json::to_string(&event).unwrap_or_default();
                    let sse = Event::default()
                        .id(event.id.to_string())
                        .event(event.kind)
                        .data(data);
                    return Some((Ok(sse), (store, cursor, pending)));
                }
                match store.events_after(cursor, BATCH).await {
                    Ok(batch) if !batch.is_empty() => {
                        pending = batch
                            .iter()
                            .map(EventView::from)
                            .collect::<Vec<_>>()
                            .into_iter();
                    }
                    Ok(_) => tokio::time::sleep(POLL).await,
                    Err(error) => {
                        tracing::warn!(error = %crate::worker::error_chain(&error), "event stream: reading events failed");
                        tokio::time::sleep(POLL * 4).await;
                    }
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
