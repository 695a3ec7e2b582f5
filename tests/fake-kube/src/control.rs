//! The HTTP control API of the `fake-kube` binary: JSON over plain HTTP/1.1 on a loopback
//! port, one resource per cluster. Tests in the same process use [`crate::ClusterHandle`]
//! directly; this module only translates HTTP to those calls.
//!
//! | method and path | body | effect |
//! |---|---|---|
//! | `GET /healthz` | | `ok` |
//! | `GET /stats` | | fleet totals |
//! | `GET /clusters` | | every cluster's summary |
//! | `GET /clusters/NAME` | | summary plus CA and tokens |
//! | `PUT /clusters/NAME/fault` | a [`Fault`] | set the fault |
//! | `DELETE /clusters/NAME/fault` | | come back |
//! | `PUT /fault` | `{"clusters": [NAME…], "fault": Fault}` | set many (all when `clusters` is absent) |
//! | `POST /clusters/NAME/rotate-certificate` | `{"ca": "new"\|"same", "rewrite_kubeconfig": bool}` | rotate |
//! | `GET /clusters/NAME/requests?limit=N` | | counts and the last N entries |
//! | `DELETE /clusters/NAME/requests` | | clear the log |

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::net::TcpListener;

use crate::faults::{CaRotation, Fault};
use crate::kubeconfig::{KubeconfigOptions, SINGLE_FILE_NAME, write_kubeconfigs};
use crate::request_log::LogCounts;
use crate::server::{ClusterHandle, Fleet};

/// The largest request body the control API reads.
const MAX_BODY: usize = 1 << 20;

/// Errors while starting the control API.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The address is not a loopback address.
    #[error("the control API must listen on a loopback address, not {0}")]
    NotLoopback(SocketAddr),
    /// The address could not be bound.
    #[error("cannot listen on {address}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Where the binary wrote its kubeconfigs, so a rotation can rewrite them.
#[derive(Clone, Debug)]
pub struct KubeconfigOutput {
    /// The folder.
    pub dir: PathBuf,
    /// How they were written.
    pub options: KubeconfigOptions,
}

/// What the control API serves.
#[derive(Debug)]
pub struct ControlState {
    /// The clusters.
    pub fleet: Arc<Fleet>,
    /// The kubeconfigs written at start-up, if any.
    pub kubeconfigs: Option<KubeconfigOutput>,
}

/// Binds the control API's listener, refusing anything but a loopback address.
pub async fn bind_control(address: SocketAddr) -> Result<TcpListener, ControlError> {
    if !address.ip().is_loopback() {
        return Err(ControlError::NotLoopback(address));
    }
    TcpListener::bind(address)
        .await
        .map_err(|source| ControlError::Bind { address, source })
}

/// Serves the control API on `listener` until the task is dropped.
pub async fn serve_control(listener: TcpListener, state: Arc<ControlState>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "control accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(route(&state, request).await) }
            });
            if let Err(error) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, "control connection ended");
            }
        });
    }
}

/// A cluster's state as the control API shows it.
#[derive(Debug, Serialize)]
struct Summary {
    name: String,
    index: usize,
    server: String,
    listening: bool,
    fault: Fault,
    counts: LogCounts,
    #[serde(skip_serializing_if = "Option::is_none")]
    kubeconfig: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<String>,
}

#[derive(Debug, Deserialize)]
struct BulkFault {
    clusters: Option<Vec<String>>,
    fault: Fault,
}

#[derive(Debug, Deserialize)]
struct Rotate {
    #[serde(default)]
    ca: CaRotation,
    #[serde(default)]
    rewrite_kubeconfig: bool,
}

/// An error answer: status and message.
struct Failure(StatusCode, String);

impl Failure {
    fn not_found(what: &str) -> Self {
        Self(StatusCode::NOT_FOUND, format!("no such {what}"))
    }

    fn bad_request(message: impl std::fmt::Display) -> Self {
        Self(StatusCode::BAD_REQUEST, message.to_string())
    }

    fn internal(error: &dyn std::error::Error) -> Self {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Self(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

async fn route(state: &ControlState, request: Request<Incoming>) -> Response<Full<Bytes>> {
    match dispatch(state, request).await {
        Ok(response) => response,
        Err(Failure(status, message)) => json_response(status, &json!({ "error": message })),
    }
}

async fn dispatch(
    state: &ControlState,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Failure> {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let query = request.uri().query().map(str::to_owned);
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let fleet = &state.fleet;
    match (&method, segments.as_slice()) {
        (&Method::GET, ["healthz"]) => Ok(text_response(StatusCode::OK, "ok")),
        (&Method::GET, ["stats"]) => {
            let listening = fleet.clusters().iter().filter(|c| c.is_listening()).count();
            let faulty = fleet
                .clusters()
                .iter()
                .filter(|c| c.fault() != Fault::None)
                .count();
            Ok(ok_json(&json!({
                "clusters": fleet.len(),
                "listening": listening,
                "with_fault": faulty,
                "counts": fleet.counts(),
            })))
        }
        (&Method::GET, ["clusters"]) => {
            let all: Vec<Summary> = fleet.clusters().iter().map(|c| summary(state, c)).collect();
            Ok(ok_json(&all))
        }
        (&Method::PUT, ["fault"]) => {
            let bulk: BulkFault = read_json(request).await?;
            let targets: Vec<ClusterHandle> = match &bulk.clusters {
                None => fleet.clusters().to_vec(),
                Some(names) => names
                    .iter()
                    .map(|name| find(fleet, name).cloned())
                    .collect::<Result<_, _>>()?,
            };
            for cluster in &targets {
                cluster
                    .set_fault(bulk.fault.clone())
                    .await
                    .map_err(|e| Failure::internal(&e))?;
            }
            Ok(ok_json(
                &json!({ "updated": targets.len(), "fault": bulk.fault }),
            ))
        }
        (_, ["clusters", name, rest @ ..]) => {
            let cluster = find(fleet, name)?.clone();
            match (&method, rest) {
                (&Method::GET, []) => {
                    let mut detail = serde_json::to_value(summary(state, &cluster))
                        .map_err(|e| Failure::internal(&e))?;
                    detail["ca_pem"] = json!(cluster.ca_pem());
                    detail["admin_token"] = json!(cluster.admin_token());
                    detail["reader_token"] = json!(cluster.reader_token());
                    Ok(ok_json(&detail))
                }
                (&Method::PUT, ["fault"]) => {
                    let fault: Fault = read_json(request).await?;
                    cluster
                        .set_fault(fault)
                        .await
                        .map_err(|e| Failure::bad_request(&e))?;
                    Ok(ok_json(&summary(state, &cluster)))
                }
                (&Method::DELETE, ["fault"]) => {
                    cluster
                        .come_back()
                        .await
                        .map_err(|e| Failure::internal(&e))?;
                    Ok(ok_json(&summary(state, &cluster)))
                }
                (&Method::POST, ["rotate-certificate"]) => {
                    let rotate: Rotate = read_json(request).await?;
                    rotate_certificate(state, &cluster, &rotate)?;
                    Ok(ok_json(
                        &json!({ "name": cluster.name(), "ca_pem": cluster.ca_pem() }),
                    ))
                }
                (&Method::GET, ["requests"]) => {
                    let limit = query
                        .as_deref()
                        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("limit=")))
                        .map(str::parse::<usize>)
                        .transpose()
                        .map_err(Failure::bad_request)?;
                    let mut entries = cluster.log().entries();
                    if let Some(limit) = limit {
                        entries.drain(..entries.len().saturating_sub(limit));
                    }
                    Ok(ok_json(
                        &json!({ "counts": cluster.log().counts(), "entries": entries }),
                    ))
                }
                (&Method::DELETE, ["requests"]) => {
                    cluster.log().clear();
                    Ok(ok_json(&json!({ "counts": cluster.log().counts() })))
                }
                _ => Err(Failure::not_found("endpoint")),
            }
        }
        _ => Err(Failure::not_found("endpoint")),
    }
}

fn rotate_certificate(
    state: &ControlState,
    cluster: &ClusterHandle,
    rotate: &Rotate,
) -> Result<(), Failure> {
    let output = match (&state.kubeconfigs, rotate.rewrite_kubeconfig) {
        (_, false) => None,
        (Some(output), true) => Some(output),
        (None, true) => {
            return Err(Failure::bad_request(
                "no kubeconfigs were written at start-up",
            ));
        }
    };
    cluster
        .rotate_certificate(rotate.ca)
        .map_err(|e| Failure::internal(&e))?;
    if let Some(output) = output {
        // A single file holds every context, so it is rewritten whole.
        let clusters = if output.options.single_file {
            state.fleet.clusters()
        } else {
            std::slice::from_ref(cluster)
        };
        write_kubeconfigs(clusters, &output.dir, &output.options)
            .map_err(|e| Failure::internal(&e))?;
    }
    Ok(())
}

fn find<'a>(fleet: &'a Fleet, name: &str) -> Result<&'a ClusterHandle, Failure> {
    fleet
        .cluster(name)
        .or_else(|| {
            name.parse::<usize>()
                .ok()
                .and_then(|index| fleet.get(index))
        })
        .ok_or_else(|| Failure::not_found("cluster"))
}

fn summary(state: &ControlState, cluster: &ClusterHandle) -> Summary {
    let kubeconfig = state.kubeconfigs.as_ref().map(|output| {
        if output.options.single_file {
            output.dir.join(SINGLE_FILE_NAME)
        } else {
            output.dir.join(format!("{}.yaml", cluster.name()))
        }
    });
    Summary {
        name: cluster.name().to_owned(),
        index: cluster.index(),
        server: cluster.server_url(),
        listening: cluster.is_listening(),
        fault: cluster.fault(),
        counts: cluster.log().counts(),
        context: kubeconfig.as_ref().map(|_| cluster.name().to_owned()),
        kubeconfig,
    }
}

async fn read_json<T: for<'de> Deserialize<'de>>(request: Request<Incoming>) -> Result<T, Failure> {
    let body = Limited::new(request.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| Failure::bad_request(format!("cannot read the body: {e}")))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| Failure::bad_request(format!("invalid JSON: {e}")))
}

fn ok_json<T: Serialize>(value: &T) -> Response<Full<Bytes>> {
    json_response(StatusCode::OK, value)
}

fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response<Full<Bytes>> {
    match serde_json::to_vec(value) {
        Ok(body) => {
            let mut response = Response::new(Full::new(Bytes::from(body)));
            *response.status_mut() = status;
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        Err(error) => text_response(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string()),
    }
}

fn text_response(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text.to_owned())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
