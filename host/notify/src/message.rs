//! What a sink is sent, made from a committed outbox row only, so the same row always
//! gives the same bytes: the webhook body, and the Alertmanager alerts.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};
use vigil_store::outbox::{OpenOutage, OutboxRecord};

/// The alert vigil raises for a cluster that is OFFLINE (the same name as the shipped
/// Prometheus rule: an operator routes, silences and inhibits both alike, and runs one).
pub const ALERT_NAME: &str = "VigilClusterOffline";

/// An RFC 3339 time, in milliseconds.
pub fn rfc3339(millis: i64) -> String {
    let millis = u64::try_from(millis).unwrap_or(0);
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(millis)).to_string()
}

/// The stable id of a row's notification: its `webhook-id`, the same on every attempt.
pub fn message_id(row: &OutboxRecord) -> String {
    format!("vigil-{}-{}", row.event_id, row.at)
}

/// A row's labels, as an object of strings (a row from an older vigil may hold none).
pub fn labels(row_labels: &str) -> BTreeMap<String, String> {
    serde_json::from_str(row_labels).unwrap_or_default()
}

/// The webhook body of `row`: `type` (the event kind), `timestamp` (when it happened) and
/// `data` (the cluster, its labels and reason, and the event's details).
pub fn webhook_body(row: &OutboxRecord) -> Vec<u8> {
    let mut data = match serde_json::from_str::<Value>(&row.payload) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    data.insert("event".into(), row.event_id.into());
    data.insert("cluster".into(), json!(row.cluster_name));
    if row.cluster_name.is_some() {
        data.insert("labels".into(), json!(labels(&row.labels)));
        data.insert("reason_class".into(), json!(row.reason_class));
        data.insert("reason".into(), json!(row.reason));
    }
    let body = json!({
        "type": row.kind,
        "timestamp": rfc3339(row.at),
        "data": data,
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// Whether `row` opens (`Some(true)`) or ends (`Some(false)`) a cluster's OFFLINE alert.
pub fn alert_change(row: &OutboxRecord) -> Option<bool> {
    if row.kind != "status-changed" {
        return None;
    }
    let payload: Value = serde_json::from_str(&row.payload).ok()?;
    let detail = payload.get("detail")?;
    match (
        detail.get("from").and_then(Value::as_str),
        detail.get("to").and_then(Value::as_str),
    ) {
        (_, Some("OFFLINE")) => Some(true),
        (Some("OFFLINE"), _) => Some(false),
        _ => None,
    }
}

/// A label name Alertmanager accepts (`[a-zA-Z_][a-zA-Z0-9_]*`) for a cluster label key.
fn label_name(key: &str) -> String {
    let mut name: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) || name.is_empty() {
        name.insert(0, '_');
    }
    name
}

/// One alert of the Alertmanager API (`POST /api/v2/alerts`): the cluster's labels
/// (never overriding `alertname`, `cluster` and `severity`), its reason as annotations.
pub fn alert(
    cluster: &str,
    cluster_labels: &BTreeMap<String, String>,
    reason_class: Option<&str>,
    reason: Option<&str>,
    starts_at: i64,
    ends_at: i64,
) -> Value {
    let mut labels = serde_json::Map::new();
    for (key, value) in cluster_labels {
        labels.insert(label_name(key), json!(value));
    }
    labels.insert("alertname".into(), json!(ALERT_NAME));
    labels.insert("cluster".into(), json!(cluster));
    labels.insert("severity".into(), json!("critical"));
    labels.insert("source".into(), json!("vigil"));
    let summary = format!("Cluster {cluster} is OFFLINE");
    let description = match (reason_class, reason) {
        (Some(class), Some(reason)) => format!("{class}: {reason}"),
        (Some(class), None) => class.to_owned(),
        (None, Some(reason)) => reason.to_owned(),
        (None, None) => "confirmed down".to_owned(),
    };
    json!({
        "labels": labels,
        "annotations": {
            "summary": summary,
            "description": description,
            "reason_class": reason_class.unwrap_or(""),
        },
        "startsAt": rfc3339(starts_at),
        "endsAt": rfc3339(ends_at),
    })
}

/// The alert of an open outage, firing until `ends_at` unless posted again.
pub fn firing(outage: &OpenOutage, ends_at: i64) -> Value {
    alert(
        &outage.name,
        &labels(&outage.labels),
        outage.last_reason_class.as_deref(),
        outage.last_reason.as_deref(),
        outage.opened_at,
        ends_at,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, payload: &Value) -> OutboxRecord {
        OutboxRecord {
            event_id: 7,
            position: 7,
            at: 1_700_000_000_000,
            kind: kind.into(),
            cluster_name: Some("prod-eu".into()),
            labels: r#"{"env":"prod","team.name":"core"}"#.into(),
            payload: payload.to_string(),
            reason_class: Some("refused".into()),
            reason: Some("connection refused".into()),
        }
    }

    #[test]
    fn a_webhook_body_is_the_row_and_only_the_row() {
        let offline = row(
            "status-changed",
            &json!({"detail": {"from": "ONLINE", "to": "OFFLINE"}, "outage": 3}),
        );
        let body: Value = serde_json::from_slice(&webhook_body(&offline)).unwrap();
        assert_eq!(
            body,
            json!({
                "type": "status-changed",
                "timestamp": "2023-11-14T22:13:20.000Z",
                "data": {
                    "event": 7, "cluster": "prod-eu", "outage": 3,
                    "labels": {"env": "prod", "team.name": "core"},
                    "reason_class": "refused", "reason": "connection refused",
                    "detail": {"from": "ONLINE", "to": "OFFLINE"},
                }
            })
        );
        assert_eq!(webhook_body(&offline), webhook_body(&offline.clone()));
        assert_eq!(message_id(&offline), "vigil-7-1700000000000");
        assert_eq!(alert_change(&offline), Some(true));
        let back = row(
            "status-changed",
            &json!({"detail": {"from": "OFFLINE", "to": "ONLINE"}}),
        );
        assert_eq!(alert_change(&back), Some(false));
        let first = row(
            "status-changed",
            &json!({"detail": {"from": "UNKNOWN", "to": "ONLINE"}}),
        );
        assert_eq!(alert_change(&first), None);
        assert_eq!(alert_change(&row("apps-degraded", &json!({}))), None);
    }

    #[test]
    fn an_alert_keeps_its_own_labels_and_makes_cluster_labels_valid_names() {
        let labels = BTreeMap::from([
            ("team.name".to_owned(), "core".to_owned()),
            ("cluster".to_owned(), "spoofed".to_owned()),
            ("9lives".to_owned(), "x".to_owned()),
        ]);
        let alert = alert("c", &labels, Some("refused"), None, 0, 240_000);
        assert_eq!(alert["labels"]["team_name"], "core");
        assert_eq!(alert["labels"]["cluster"], "c");
        assert_eq!(alert["labels"]["_9lives"], "x");
        assert_eq!(alert["labels"]["alertname"], ALERT_NAME);
        assert_eq!(alert["endsAt"], "1970-01-01T00:04:00.000Z");
        assert_eq!(alert["annotations"]["description"], "refused");
    }
}
