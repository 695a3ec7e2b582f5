//! The REST API's server within bounds: a cap on event streams (503 with `Retry-After`
//! beyond it) fed by one shared notifier, a cap on connections, and a header-read
//! timeout — in the router, and against a real `vigil serve` holding thousands of idle
//! connections and hundreds of streams. Loopback only; counts, never latencies.

use crate::process;
use vigil_test_support::engine as support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt as _;
use process::{Vigil, vigil};
use tower::ServiceExt as _;
use vigil_api::EventFeed;
use vigil_decision::Timestamp;
use vigil_test_support::wait;

fn events_request() -> Request<Body> {
    Request::get("/api/v1/events")
        .body(Body::empty())
        .expect("request")
}

/// Streams share one feed: past the cap one more is answered 503 with `Retry-After`;
/// one event reaches every open stream; the store is asked about new events at the
/// feed's pace, not once per stream; a closed stream gives its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_share_one_notifier_under_a_cap() {
    const STREAMS: u32 = 40;
    let sandbox = support::Sandbox::new();
    let store = sandbox.store().await;
    let feed = Arc::new(EventFeed::new(STREAMS));
    let router = vigil_test_support::api::router_with_events(store.clone(), Arc::clone(&feed));

    let mut bodies = Vec::new();
    for _ in 0..STREAMS {
        let response = router
            .clone()
            .oneshot(events_request())
            .await
            .expect("answer");
        assert_eq!(response.status(), StatusCode::OK);
        bodies.push(response.into_body());
    }
    assert_eq!(feed.open_streams(), STREAMS as usize);

    let refused = router
        .clone()
        .oneshot(events_request())
        .await
        .expect("answer");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    let retry_after = refused.headers()[header::RETRY_AFTER]
        .to_str()
        .expect("text")
        .parse::<u32>()
        .expect("seconds");
    assert!(retry_after > 0);
    let problem = refused
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let problem = String::from_utf8_lossy(&problem);
    assert!(
        problem.contains("VIGIL_API_MAX_EVENT_STREAMS"),
        "the refusal names the setting: {problem}"
    );

    // Idle streams: the feed's own pace, whatever the number of streams. Measured over
    // eight looks at the store (about 2 s at the feed's pace).
    let (polls, since) = (feed.polls(), Instant::now());
    wait::until_async_true(
        "the feed looks at the store eight times",
        Duration::from_secs(30),
        async || feed.polls() - polls >= 8,
    )
    .await;
    let asked = feed.polls() - polls;
    let ticks = u64::try_from(since.elapsed().as_millis() / 250).expect("ticks");
    assert!(
        asked <= ticks + 2,
        "{asked} looks at the store in {ticks} ticks with {STREAMS} streams open"
    );

    // One event reaches every stream.
    store
        .record_plugin_event(
            "plugin-retired",
            &serde_json::json!({ "plugin": "p" }),
            None,
            Timestamp(1),
        )
        .await
        .expect("event");
    for (i, body) in bodies.iter_mut().enumerate() {
        let mut text = String::new();
        while !text.contains("event: plugin-retired") {
            let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
                .await
                .unwrap_or_else(|_| panic!("stream {i} got no event"))
                .expect("a frame")
                .expect("no error");
            if let Ok(data) = frame.into_data() {
                text.push_str(&String::from_utf8_lossy(&data));
            }
        }
    }

    // Closed streams give their places back.
    drop(bodies);
    assert_eq!(feed.open_streams(), 0);
    let again = router.oneshot(events_request()).await.expect("answer");
    assert_eq!(again.status(), StatusCode::OK);
}

/// The open-files limit of this test process, raised to its hard limit.
fn raise_open_files() -> u64 {
    rlimit::increase_nofile_limit(u64::MAX).expect("the open-files limit")
}

/// `vigil serve` with no cluster and no plugin, logging to `DIR/vigil.log`, with
/// `settings`, once its start-up is over (its first discovery done: the descriptors it
/// holds are then the ones it keeps); its API address.
fn serve(dir: &Path, settings: &[(&str, String)]) -> (Vigil, String) {
    let kubeconfigs = dir.join("kubeconfigs");
    std::fs::create_dir_all(&kubeconfigs).expect("mkdir");
    let server = process::serve(dir)
        .kubeconfigs(&kubeconfigs)
        .plugins(dir.join("no-plugins"))
        .envs(settings.iter().cloned())
        .until_discovered()
        .start_blocking();
    let address = server.api().to_string();
    (server, address)
}

fn connect(address: &str) -> TcpStream {
    let stream = TcpStream::connect(address).expect("connect");
    // A guard against a hang, not a measurement.
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    stream
}

/// Sends `GET path` and reads the response head (and, with `close`, the whole answer).
fn get(stream: &mut TcpStream, path: &str, close: bool) -> String {
    let connection = if close { "close" } else { "keep-alive" };
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: {connection}\r\n\r\n"
    )
    .expect("send");
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let head_done = answer.windows(4).any(|w| w == b"\r\n\r\n");
        if head_done && !close {
            break;
        }
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
            Err(error) => panic!("reading the answer to {path}: {error}"),
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

fn status(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

/// Sends `GET path` (keep-alive) and reads the response head; `None` when the server
/// closed the connection instead.
fn try_get(stream: &mut TcpStream, path: &str) -> Option<String> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buffer) {
            Ok(0) => return None,
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
            Err(error)
                if error.kind() == ErrorKind::WouldBlock || error.kind() == ErrorKind::TimedOut =>
            {
                panic!("no answer and no close for {path}")
            }
            Err(_) => return None,
        }
    }
    Some(String::from_utf8_lossy(&answer).into_owned())
}

/// Whether the server closed `stream` (end of stream or reset) rather than answering.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(error) => matches!(
            error.kind(),
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe
        ),
    }
}

/// Polls `GET path` on fresh connections until it answers `expected`.
fn wait_for_status(address: &str, path: &str, expected: u16) {
    let last = std::cell::RefCell::new(String::new());
    wait::until(
        &format!("{path} answers {expected}"),
        Duration::from_secs(30),
        || {
            format!(
                "{path} never answered {expected}; last: {:?}",
                last.borrow()
            )
        },
        || {
            let mut stream = connect(address);
            let answer = if write!(
                stream,
                "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            )
            .is_ok()
            {
                let mut text = String::new();
                let _ = stream.read_to_string(&mut text);
                text
            } else {
                String::new()
            };
            let done = answer.split_whitespace().nth(1) == Some(&expected.to_string());
            *last.borrow_mut() = answer;
            done.then_some(())
        },
    );
}

/// Open file descriptors of a process.
fn open_files_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(Iterator::count)
        .unwrap_or(0)
}

/// Thousands of idle connections and hundreds of event streams against a real `vigil
/// serve`: it holds them all and keeps answering within its caps; one stream more gets
/// 503 with `Retry-After`; past the connection cap a connection is served from the
/// reserve — `/healthz` answered, anything else 503 naming the cap — and once some go it
/// answers again.
#[test]
fn a_server_full_of_idle_connections_and_streams_keeps_answering_within_its_caps() {
    const STREAMS: usize = 500;
    // Room for this process's own descriptors; the server raises its own limit.
    let limit = raise_open_files();
    let idle = 5000.min(
        usize::try_from(limit)
            .unwrap_or(usize::MAX)
            .saturating_sub(STREAMS + 300),
    );
    assert!(
        idle >= 1000,
        "the open-files limit ({limit}) is too low for this test"
    );
    // The cap leaves room for the checks below, then is filled on purpose.
    let spare = 20;
    let cap = idle + STREAMS + spare;
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, address) = serve(
        dir.path(),
        &[
            ("VIGIL_API_MAX_CONNECTIONS", cap.to_string()),
            ("VIGIL_API_MAX_EVENT_STREAMS", STREAMS.to_string()),
            // Long enough that no idle connection is closed during the test.
            ("VIGIL_API_HEADER_READ_TIMEOUT", "3600".to_owned()),
            // Every connection of this test comes from one address.
            ("VIGIL_API_MAX_CONNECTIONS_PER_PEER", "0".to_owned()),
        ],
    );
    let before = open_files_of(server.pid());

    let idle_connections: Vec<TcpStream> = (0..idle).map(|_| connect(&address)).collect();
    let mut streams = Vec::with_capacity(STREAMS);
    for i in 0..STREAMS {
        let mut stream = connect(&address);
        let answer = get(&mut stream, "/api/v1/events", false);
        assert_eq!(status(&answer), 200, "stream {i}: {answer}");
        streams.push(stream);
    }
    // The server holds every one of them (an accepted socket each).
    let held = open_files_of(server.pid()) - before;
    assert!(
        held >= idle + STREAMS,
        "the server holds {held} descriptors more, for {idle} idle connections and {STREAMS} streams"
    );

    // Still answering, within the caps.
    let answer = get(&mut connect(&address), "/healthz", true);
    assert_eq!(status(&answer), 200, "{answer}");
    let answer = get(&mut connect(&address), "/api/v1/clusters", true);
    assert_eq!(status(&answer), 200, "{answer}");

    // One stream more: 503 with Retry-After.
    let answer = get(&mut connect(&address), "/api/v1/events", true);
    assert_eq!(status(&answer), 503, "{answer}");
    let retry_after = answer
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("retry-after")
                .then(|| value.trim().parse::<u32>().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no Retry-After in {answer}"));
    assert!(retry_after > 0);

    // A stream that ends gives its place back.
    drop(streams.pop());
    wait_for_status(&address, "/healthz", 200);
    let last = std::cell::RefCell::new(String::new());
    let replacement = wait::until(
        "the freed stream place comes back",
        Duration::from_secs(30),
        || format!("the freed stream place never came back: {}", last.borrow()),
        || {
            let mut replacement = connect(&address);
            let answer = get(&mut replacement, "/api/v1/events", false);
            if status(&answer) == 200 {
                return Some(replacement);
            }
            *last.borrow_mut() = answer;
            None
        },
    );
    streams.push(replacement);

    // Fill the connection cap and go past it: each connection asks for the clusters and
    // stays open; no more than the room left is served, the others come from the reserve:
    // answered 503 naming the cap, and closed. (Connections of the checks above that the
    // server has not yet seen close can only make the room smaller.)
    wait_for_status(&address, "/healthz", 200);
    let mut served = Vec::new();
    let mut reserved = 0;
    for _ in 0..spare + 5 {
        let mut stream = connect(&address);
        let answer = try_get(&mut stream, "/api/v1/clusters").expect("an answer");
        match status(&answer) {
            200 => served.push(stream),
            503 => {
                // The rest of the answer, up to the close: a reserved connection serves one
                // request.
                let mut rest = String::new();
                stream
                    .read_to_string(&mut rest)
                    .expect("the answer, then the close");
                let whole = format!("{answer}{rest}");
                assert!(whole.contains("VIGIL_API_MAX_CONNECTIONS"), "{whole}");
                reserved += 1;
            }
            other => panic!("{other}: {answer}"),
        }
    }
    assert!(
        served.len() <= spare,
        "{} connections served past {} held, with a cap of {cap}",
        served.len(),
        idle + STREAMS
    );
    assert!(
        reserved >= 5,
        "only {reserved} connections past the cap were answered from the reserve"
    );
    // Past the cap, the health paths are still answered.
    let answer = get(&mut connect(&address), "/healthz", true);
    assert_eq!(status(&answer), 200, "{answer}");

    // Some go: the server answers again.
    drop(served);
    wait_for_status(&address, "/healthz", 200);
    drop((idle_connections, streams, server));
}

/// A connection from `source` (a loopback address of its own: another peer) to `address`.
fn connect_from(source: &str, address: &str) -> TcpStream {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket
        .bind(
            &source
                .parse::<std::net::SocketAddr>()
                .expect("source")
                .into(),
        )
        .expect("bind the source address");
    socket
        .connect(
            &address
                .parse::<std::net::SocketAddr>()
                .expect("address")
                .into(),
        )
        .expect("connect");
    socket.into()
}

/// A connection flood at a small cap: seventy connections from one peer, each
/// sending two hundred pipelined requests for the page's script and reading none of the
/// answers. While they fill the cap, `/healthz` from another peer (the kubelet) is
/// answered every time, from the reserve; the answers nobody reads are dropped at the write
/// timeout, the flood's connections closed, and the API answers in full again.
#[test]
fn a_flood_whose_answers_are_never_read_leaves_the_health_paths_answered() {
    const FLOOD: usize = 70;
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, address) = serve(
        dir.path(),
        &[
            ("VIGIL_API_MAX_CONNECTIONS", "64".to_owned()),
            ("VIGIL_API_WRITE_TIMEOUT", "5".to_owned()),
        ],
    );
    let request = "GET /assets/app.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".repeat(200);
    let mut flood: Vec<TcpStream> = Vec::new();
    for _ in 0..FLOOD {
        let mut stream = connect_from("127.0.0.2:0", &address);
        // What fits in the buffers; the server answers as it reads.
        let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
        let _ = stream.write_all(request.as_bytes());
        flood.push(stream);
    }
    // The cap is full: the API answers from the reserve only.
    wait::until(
        "the flood fills the connection cap",
        Duration::from_secs(30),
        String::new,
        || {
            let answer = get(&mut connect(&address), "/api/v1/clusters", true);
            (status(&answer) == 503).then_some(())
        },
    );
    for probe in 0..20 {
        let mut stream = connect(&address);
        stream
            .set_read_timeout(Some(Duration::from_secs(3)))
            .expect("timeout");
        let answer = get(&mut stream, "/healthz", true);
        assert_eq!(status(&answer), 200, "probe {probe}: {answer}");
    }
    // The answers nobody reads are dropped: the flood's connections are closed by the
    // server, and the API answers in full again.
    wait::until(
        "the flood's connections are closed at the write timeout",
        Duration::from_secs(60),
        String::new,
        || {
            let answer = get(&mut connect(&address), "/api/v1/clusters", true);
            (status(&answer) == 200).then_some(())
        },
    );
    let closed = flood
        .iter_mut()
        .map(|stream| {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            // Read what was sent until the server's close (or reset).
            let mut buffer = vec![0_u8; 1 << 20];
            loop {
                match stream.read(&mut buffer) {
                    Ok(0) => return true,
                    Ok(_) => {}
                    Err(error) => {
                        return matches!(
                            error.kind(),
                            ErrorKind::ConnectionReset | ErrorKind::BrokenPipe
                        );
                    }
                }
            }
        })
        .filter(|closed| *closed)
        .count();
    assert!(
        closed >= 60,
        "only {closed} of the flood's connections were closed"
    );
    drop(server);
}

/// A connection that never sends a request head, or sends half of one, is closed by the
/// header-read timeout; a prompt request on the same server is answered.
#[test]
fn connections_that_never_send_a_request_head_are_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_server, address) = serve(
        dir.path(),
        &[("VIGIL_API_HEADER_READ_TIMEOUT", "1".to_owned())],
    );
    let mut silent = connect(&address);
    let mut half = connect(&address);
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .expect("send half a head");
    let answer = get(&mut connect(&address), "/healthz", true);
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(
        closed_by_server(&mut silent),
        "the silent connection got an answer"
    );
    let mut rest = String::new();
    let _ = half.read_to_string(&mut rest);
    assert!(
        !rest.contains("200 OK"),
        "half a head was answered as a request: {rest}"
    );
}

/// A connection cap the operator set that does not fit the open-files limit stops
/// start-up with exit 2, naming the setting and the limit.
#[test]
fn a_connection_cap_that_does_not_fit_the_open_files_limit_stops_start_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut command = vigil(dir.path());
    let output = command
        .arg("serve")
        .env("KUBECONFIG_DIR", dir.path())
        .env("VIGIL_API_MAX_CONNECTIONS", "1000000")
        .env("VIGIL_API_MAX_EVENT_STREAMS", "10")
        .output()
        .expect("run vigil");
    let hard = rlimit::Resource::NOFILE.get_hard().expect("hard limit");
    if hard >= 1_000_000 + vigil::open_files::reserved(64) {
        // This machine allows it; nothing to refuse.
        return;
    }
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("VIGIL_API_MAX_CONNECTIONS=1000000") && stderr.contains("RLIMIT_NOFILE"),
        "{stderr}"
    );
}
