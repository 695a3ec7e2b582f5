//! What one plugin call can make the host hold is bounded: the `wasi-http` test plugin in
//! its `flood` mode fires many requests at once (denied ones, ones to a slow loopback
//! server, ones with large bodies it never reads) and asks for a credential it may not
//! have again and again. The host bounds the requests in flight and the bytes it holds,
//! and logs the refusals of the call as one summary line.

use vigil_test_support as plugins;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use vigil_decision::{ClusterId, ProbeOutcome, ReasonClass};
use vigil_domain::probe::{ProbeTarget, Prober};
use vigil_domain::reference::Reference;
use vigil_plugin_host::{
    MAX_BUFFERED_BYTES_PER_CALL, MAX_WASI_HTTP_IN_FLIGHT, PluginRuntime, RuntimeSettings,
};

/// How many requests of each kind the plugin fires.
const COUNT: usize = 64;

/// The body of a `/big` answer: three of them do not fit the call's buffer.
const BIG_BODY: usize = 3 * 1024 * 1024;

/// A loopback HTTP server that answers `/slow` after a pause (so that requests overlap)
/// and `/big` with [`BIG_BODY`] bytes, counting connections and the most open at once.
struct FloodServer {
    port: u16,
    connections: Arc<AtomicUsize>,
    most_open: Arc<AtomicUsize>,
}

impl FloodServer {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let most_open = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let (total, most) = (Arc::clone(&connections), Arc::clone(&most_open));
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                total.fetch_add(1, Ordering::SeqCst);
                let now = open.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let open = Arc::clone(&open);
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buffer = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => head.extend_from_slice(&buffer[..n]),
                        }
                    }
                    let body = if head.starts_with(b"GET /big") {
                        vec![b'x'; BIG_BODY]
                    } else {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        b"ok".to_vec()
                    };
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                    let _ = stream.write_all(&body).await;
                    let _ = stream.shutdown().await;
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Self {
            port,
            connections,
            most_open,
        }
    }
}

/// The log of the calls, captured.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("lock")).into_owned()
    }
}

async fn runtime(dir: &Path, server: &FloodServer) -> PluginRuntime {
    let plugins = dir.join("plugins.d");
    std::fs::create_dir_all(&plugins).expect("plugin dir");
    std::fs::copy(
        plugins::plugin_file("wasi-http"),
        plugins.join("wasi-http.wasm"),
    )
    .expect("copy the plugin");
    std::fs::write(
        plugins.join("wasi-http.toml"),
        format!(
            "log = true\ncredentials = true\nhttp = true\nallowed-hosts = [\"127.0.0.1:{}\"]\n",
            server.port
        ),
    )
    .expect("manifest");
    let (runtime, report) = PluginRuntime::load(&RuntimeSettings {
        embedded: Vec::new(),
        plugin_dir: plugins,
        cache_dir: None,
        concurrency: 2,
        credential_dirs: vec![dir.join("credentials")],
        kubeconfig_credential_dirs: Vec::new(),
        secrets: None,
        registration_allow: Default::default(),
        exec: Default::default(),
    })
    .await
    .expect("the runtime starts");
    assert!(report.refused.is_empty(), "{report:#?}");
    runtime
}

/// A cluster for the flood, with the plugin's parameters.
fn target(parameters: &[(&str, String)]) -> ProbeTarget {
    let mut all: BTreeMap<String, String> = parameters
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    all.insert("mode".to_owned(), "flood".to_owned());
    all.insert("count".to_owned(), COUNT.to_string());
    ProbeTarget {
        cluster: ClusterId(1),
        name: "flooded".to_owned(),
        endpoint: "https://127.0.0.1:9".to_owned(),
        reference: Reference::parse("/nonexistent/kubeconfig#flooded").expect("reference"),
        connection: None,
        plugin: Some("wasi-http".to_owned()),
        timeout: Duration::from_secs(20),
        labels: BTreeMap::new(),
        parameters: all,
    }
}

/// What the plugin reported: its `key=value` words.
fn tallies(outcome: &ProbeOutcome) -> BTreeMap<String, String> {
    let ProbeOutcome::NotProbeable {
        class: ReasonClass::NoPlugin,
        message,
    } = outcome
    else {
        panic!("expected the plugin's tally, got {outcome:?}");
    };
    message
        .split_whitespace()
        .filter_map(|word| word.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn count(tally: &BTreeMap<String, String>, key: &str) -> usize {
    tally
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no count {key} in {tally:?}"))
}

/// Many requests at once to a slow server: never more than the bound in flight (the
/// server never sees more connections open at once), the rest refused at once; denied
/// requests and refused credential calls are logged as one summary line for the call.
/// Then large responses kept unread: never more than the call's buffer held.
/// One thread: the plugin's loop of requests runs before any of them can end, and the
/// log subscriber set here is the one the call's tasks see. (One test, so that no other
/// test of this binary logs from another thread meanwhile.)
#[tokio::test(flavor = "current_thread")]
async fn a_flood_of_requests_stays_within_the_calls_bounds_and_is_logged_once() {
    let temp = tempfile::tempdir().expect("tempdir");
    let server = FloodServer::start().await;
    let runtime = runtime(temp.path(), &server).await;
    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let outside = temp.path().join("outside-token");
    std::fs::write(&outside, "not for this plugin").expect("write");
    let outcome = runtime
        .probe(&target(&[
            (
                "flood-url",
                format!("http://127.0.0.1:{}/slow", server.port),
            ),
            ("foreign-url", "http://127.0.0.77:9/".to_owned()),
            ("outside", format!("file://{}", outside.display())),
        ]))
        .await;
    let tally = tallies(&outcome);
    assert_eq!(count(&tally, "denied"), COUNT, "{tally:?}");
    assert_eq!(count(&tally, "credentials-refused"), COUNT, "{tally:?}");
    assert_eq!(count(&tally, "other"), 0, "{tally:?}");
    assert_eq!(
        count(&tally, "answered") + count(&tally, "in-flight-refused"),
        COUNT,
        "{tally:?}"
    );
    assert_eq!(
        count(&tally, "answered"),
        MAX_WASI_HTTP_IN_FLIGHT,
        "{tally:?}"
    );
    assert_eq!(
        server.connections.load(Ordering::SeqCst),
        MAX_WASI_HTTP_IN_FLIGHT,
        "connections the server saw"
    );
    assert!(
        server.most_open.load(Ordering::SeqCst) <= MAX_WASI_HTTP_IN_FLIGHT,
        "{} connections open at once",
        server.most_open.load(Ordering::SeqCst)
    );

    // One summary line for the call, naming each kind of refusal with its count; no
    // line per refused request.
    let text = log.text();
    let refusal_lines: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("denied") || line.contains("refused"))
        .collect();
    assert_eq!(refusal_lines.len(), 1, "{text}");
    let summary = refusal_lines[0];
    for part in [
        format!(
            "{COUNT} × wasi:http denied: host outside the plugin's egress grant (first: 127.0.0.77:9)"
        ),
        format!("{COUNT} × credentials.parameter denied"),
        format!(
            "{} × wasi:http refused: more requests in flight",
            COUNT - MAX_WASI_HTTP_IN_FLIGHT
        ),
    ] {
        assert!(summary.contains(&part), "{part:?} missing from {summary}");
    }
    assert!(summary.contains("plugin=wasi-http"), "{summary}");
    assert!(
        !summary.contains("outside-token"),
        "the summary quotes a file path: {summary}"
    );

    // Large responses the plugin keeps without reading them: the host holds at most its
    // buffer's worth for the call; the rest fail as too large. A later call has the whole
    // buffer again.
    let flood = target(&[("flood-url", format!("http://127.0.0.1:{}/big", server.port))]);
    let most_kept = MAX_BUFFERED_BYTES_PER_CALL / BIG_BODY;
    for call in 0..2 {
        let tally = tallies(&runtime.probe(&flood).await);
        let answered = count(&tally, "answered");
        assert!(
            (1..=most_kept).contains(&answered),
            "call {call}: {answered} responses of {BIG_BODY} bytes kept at once: {tally:?}"
        );
        assert_eq!(count(&tally, "other"), 0, "call {call}: {tally:?}");
        assert_eq!(
            answered + count(&tally, "too-large"),
            MAX_WASI_HTTP_IN_FLIGHT,
            "call {call}: {tally:?}"
        );
        assert_eq!(
            count(&tally, "in-flight-refused"),
            COUNT - MAX_WASI_HTTP_IN_FLIGHT,
            "call {call}: {tally:?}"
        );
    }
}
