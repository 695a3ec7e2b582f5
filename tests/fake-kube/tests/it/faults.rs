//! Every fault control, exercised from a client over real TLS on loopback, and the request
//! log counting what was sent.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use vigil_fake_kube::client::{ProbeClient, ProbeError, ProbeResponse};
use vigil_fake_kube::tls::client_config;
use vigil_fake_kube::{
    AddressPlan, AuthUsed, CaRotation, ClusterHandle, Fleet, HangPoint, parse_flap,
};

async fn start() -> Fleet {
    Fleet::builder()
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("the fleet starts")
}

fn admin(cluster: &ClusterHandle) -> ProbeClient {
    ProbeClient::admin_token(cluster)
        .expect("client")
        .with_timeout(Duration::from_secs(3))
}

const LIST: &str = "/api/v1/namespaces?limit=1";

fn status_json(response: &ProbeResponse) -> Value {
    serde_json::from_slice(&response.body).expect("a JSON body")
}

/// What a probe saw, reduced for comparison.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Status(u16),
    Refused,
    Reset,
    Timeout,
    Tls,
    Other(String),
}

fn seen(result: Result<ProbeResponse, ProbeError>) -> Seen {
    match result {
        Ok(response) => Seen::Status(response.status),
        Err(ProbeError::Refused) => Seen::Refused,
        Err(ProbeError::Reset(_)) => Seen::Reset,
        Err(ProbeError::Timeout(_)) => Seen::Timeout,
        Err(ProbeError::Tls(_)) => Seen::Tls,
        Err(other) => Seen::Other(format!("{other:?}")),
    }
}

#[tokio::test]
async fn refuse_closes_the_listener_and_come_back_rebinds_the_same_address() {
    let fleet = start().await;
    let cluster = &fleet.clusters()[0];
    let address = cluster.address();
    let mut kept = admin(cluster).connect().await.expect("connects");
    assert_eq!(kept.get(LIST).await.expect("answers").status, 200);

    cluster.refuse().await.expect("refuses");
    assert!(!cluster.is_listening());
    assert_eq!(seen(admin(cluster).get(LIST).await), Seen::Refused);
    // The raw connect is refused too: nothing listens on the address.
    let error = TcpStream::connect(address).await.expect_err("refused");
    assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
    // A connection that was open is dropped, as when an API server goes away.
    assert_eq!(seen(kept.get(LIST).await), Seen::Reset);

    cluster.come_back().await.expect("comes back");
    assert!(cluster.is_listening());
    assert_eq!(cluster.address(), address);
    assert_eq!(seen(admin(cluster).get(LIST).await), Seen::Status(200));
    // Refusing and coming back again works as many times as needed.
    for _ in 0..3 {
        cluster.refuse().await.expect("refuses");
        assert_eq!(seen(admin(cluster).get(LIST).await), Seen::Refused);
        cluster.come_back().await.expect("comes back");
        assert_eq!(seen(admin(cluster).get(LIST).await), Seen::Status(200));
    }
    // Refused attempts never reach the server: only the answered ones are logged.
    assert_eq!(cluster.log().count(), 2 + 3);
}

#[tokio::test]
async fn hang_at_request_holds_the_answer_until_the_client_gives_up() {
    let fleet = start().await;
    let cluster = &fleet.clusters()[0];
    let mut kept = admin(cluster).connect().await.expect("connects");
    assert_eq!(kept.get(LIST).await.expect("answers").status, 200);

    cluster.hang(HangPoint::Request).await.expect("hangs");
    let patient = admin(cluster).with_timeout(Duration::from_millis(300));
    let started = Instant::now();
    assert_eq!(seen(patient.get(LIST).await), Seen::Timeout);
    assert!(started.elapsed() >= Duration::from_millis(300));
    // Also on a connection that was kept alive from before the fault.
    let mut kept = {
        let mut kept = kept;
        let result = tokio::time::timeout(Duration::from_millis(300), kept.get(LIST)).await;
        assert!(
            result.is_err(),
            "the kept-alive request must hang: {result:?}"
        );
        kept
    };
    // The hung request arrived and was logged without an answer.
    let last = cluster.log().entries().pop().expect("logged");
    assert_eq!(
        (last.path.as_str(), last.status),
        ("/api/v1/namespaces", None)
    );

    cluster.come_back().await.expect("comes back");
    assert_eq!(seen(admin(cluster).get(LIST).await), Seen::Status(200));
    // The hung connection is released (closed without an answer), not answered late.
    assert_ne!(seen(kept.get(LIST).await), Seen::Status(200));
    assert_eq!(cluster.log().count(), 1 + 2 + 1);
}

#[tokio::test]
async fn hang_at_handshake_accepts_but_never_starts_tls() {
    let fleet = start().await;
    let cluster = &fleet.clusters()[0];
    let mut kept = admin(cluster).connect().await.expect("connects");

    cluster.hang(HangPoint::Handshake).await.expect("hangs");
    let patient = admin(cluster).with_timeout(Duration::from_millis(300));
    assert_eq!(seen(patient.get(LIST).await), Seen::Timeout);
    // The TCP connection was accepted; no handshake and no request followed.
    let counts = cluster.log().counts();
    assert_eq!(
        (counts.connections, counts.handshakes, counts.requests),
        (2, 1, 0)
    );
    // A connection that finished its handshake before keeps working.
    assert_eq!(kept.get(LIST).await.expect("answers").status, 200);

    cluster.come_back().await.expect("comes back");
    assert_eq!(seen(admin(cluster).get(LIST).await), Seen::Status(200));
}

#[tokio::test]
async fn delay_answers_after_the_delay() {
    let fleet = start().await;
    let cluster = &fleet.clusters()[0];
    let delay = Duration::from_millis(250);
    cluster.delay(delay).await.expect("delays");
    let started = Instant::now();
    assert_eq!(seen(admin(cluster).get(LIST).await), Seen::Status(200));
    let elapsed = started.elapsed();
    assert!(
        elapsed >= delay && elapsed < delay + Duration::from_secs(2),
        "{elapsed:?}"
    );
    let logged = cluster
        .log()
        .entries()
        .pop()
        .and_then(|e| e.elapsed)
        .expect("elapsed logged");
    assert!(logged >= delay, "{logged:?}");

    // A client with a shorter timeout than the delay times out.
    let impatient = admin(cluster).with_timeout(Duration::from_millis(100));
    assert_eq!(seen(impatient.get(LIST).await), Seen::Timeout);

    cluster.come_back().await.expect("comes back");
    let started = Instant::now();
    assert_eq!(seen(admin(cluster).get(LIST).await), Seen::Status(200));
    assert!(started.elapsed() < delay, "no delay after coming back");
}

#[tokio::test]
async fn injected_statuses_apply_to_the_next_request_even_on_a_kept_alive_connection() {
    let fleet = start().await;
    let cluster = &fleet.clusters()[0];
    let mut kept = admin(cluster).connect().await.expect("connects");
    assert_eq!(kept.get(LIST).await.expect("answers").status, 200);

    let cases = [
        (
            500,
            "InternalError",
            "Internal error occurred: fault injected by fake-kube",
        ),
        (401, "Unauthorized", "Unauthorized"),
        (
            403,
            "Forbidden",
            r#"namespaces is forbidden: User "kubernetes-admin" cannot list resource "namespaces" in API group "" at the cluster scope"#,
        ),
        (
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
    ];
    for (code, reason, message) in cases {
        cluster.fail_with(code).await.expect("fails");
        for response in [
            kept.get(LIST).await.expect("answers"),
            admin(cluster).get(LIST).await.expect("answers"),
        ] {
            assert_eq!(response.status, code);
            let body = status_json(&response);
            assert_eq!(
                (body["kind"].as_str(), body["code"].as_u64()),
                (Some("Status"), Some(u64::from(code)))
            );
            assert_eq!(
                (body["reason"].as_str(), body["message"].as_str()),
                (Some(reason), Some(message))
            );
        }
    }
    cluster.come_back().await.expect("comes back");
    assert_eq!(kept.get(LIST).await.expect("answers").status, 200);
    // Every request was logged with its answer and the credentials used.
    let entries = cluster.log().entries();
    let statuses: Vec<_> = entries.iter().map(|e| e.status).collect();
    assert_eq!(
        statuses,
        [200, 500, 500, 401, 401, 403, 403, 503, 503, 200].map(Some)
    );
    assert!(entries.iter().all(|e| e.auth
        == AuthUsed::Token {
            user: "kubernetes-admin".into()
        }));
}

#[tokio::test]
async fn flap_applies_its_pattern_per_request_cycling() {
    let fleet = start().await;
    let cluster = &fleet.clusters()[0];
    cluster
        .flap(parse_flap("ok,500,ok,refuse").expect("pattern"))
        .await
        .expect("flaps");
    let mut seen_fresh = Vec::new();
    for _ in 0..8 {
        seen_fresh.push(seen(admin(cluster).get(LIST).await));
    }
    use Seen::{Reset, Status};
    assert_eq!(
        seen_fresh,
        [
            Status(200),
            Status(500),
            Status(200),
            Reset,
            Status(200),
            Status(500),
            Status(200),
            Reset
        ]
    );
    let counts = cluster.log().counts();
    // Reset connections never carried a request.
    assert_eq!(
        (counts.requests, counts.connections, counts.resets),
        (6, 8, 2)
    );

    // On a kept-alive connection the pattern goes on per request; `refuse` closes it.
    cluster
        .flap(parse_flap("ok,401,delay:50,refuse").expect("pattern"))
        .await
        .expect("flaps");
    let mut kept = admin(cluster).connect().await.expect("connects");
    let mut seen_kept = Vec::new();
    for _ in 0..4 {
        seen_kept.push(seen(kept.get(LIST).await));
    }
    assert_eq!(seen_kept, [Status(200), Status(401), Status(200), Reset]);

    cluster.come_back().await.expect("comes back");
    assert_eq!(seen(admin(cluster).get(LIST).await), Status(200));
}

/// The server's certificate as a client sees it (any CA accepted by `tls`).
async fn server_certificate(
    cluster: &ClusterHandle,
    ca_pem: &str,
) -> Result<CertificateDer<'static>, std::io::Error> {
    let tls = client_config(ca_pem, None, &[b"http/1.1"]).expect("tls");
    let tcp = TcpStream::connect(cluster.address()).await?;
    let stream = TlsConnector::from(Arc::new(tls))
        .connect(ServerName::IpAddress(cluster.address().ip().into()), tcp)
        .await?;
    let chain = stream
        .get_ref()
        .1
        .peer_certificates()
        .expect("a certificate");
    Ok(chain[0].clone().into_owned())
}

#[tokio::test]
async fn certificate_rotation_with_a_new_ca_breaks_the_old_trust() {
    let fleet = start().await;
    let cluster = &fleet.clusters()[0];
    let old_ca = cluster.ca_pem();
    let old_admin = cluster
        .admin_client_certificate()
        .expect("admin certificate");
    let before = server_certificate(cluster, &old_ca)
        .await
        .expect("handshake");
    let mut kept = admin(cluster).connect().await.expect("connects");

    // Same CA: a new server certificate, still trusted.
    cluster
        .rotate_certificate(CaRotation::Same)
        .expect("rotates");
    assert_eq!(cluster.ca_pem(), old_ca);
    let same = server_certificate(cluster, &old_ca)
        .await
        .expect("still trusted");
    assert_ne!(same, before, "a new server certificate");

    // New CA: the old CA no longer verifies, the new one does.
    cluster
        .rotate_certificate(CaRotation::New)
        .expect("rotates");
    let new_ca = cluster.ca_pem();
    assert_ne!(new_ca, old_ca);
    let old_trust = ProbeClient::new(
        cluster.address(),
        client_config(&old_ca, None, &[b"http/1.1"]).expect("tls"),
    )
    .with_token(cluster.admin_token());
    assert_eq!(seen(old_trust.get(LIST).await), Seen::Tls);
    assert_eq!(seen(admin(cluster).get(LIST).await), Seen::Status(200));
    // Client certificates from the old CA still authenticate; new ones come from the new CA.
    let with_old_cert = ProbeClient::new(
        cluster.address(),
        client_config(&new_ca, Some(&old_admin), &[b"http/1.1"]).expect("tls"),
    );
    assert_eq!(seen(with_old_cert.get(LIST).await), Seen::Status(200));
    let new_admin = cluster
        .admin_client_certificate()
        .expect("admin certificate");
    assert_ne!(new_admin.certificate_pem(), old_admin.certificate_pem());
    // A connection opened before the rotation keeps its session.
    assert_eq!(kept.get(LIST).await.expect("answers").status, 200);
}

#[tokio::test]
async fn the_request_log_counts_every_probe_from_the_server_side() {
    let fleet = Fleet::builder()
        .clusters(3)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("starts");
    let sent = [5usize, 0, 12];
    for (cluster, count) in fleet.clusters().iter().zip(sent) {
        for _ in 0..count {
            assert_eq!(admin(cluster).get(LIST).await.expect("answers").status, 200);
        }
    }
    for (cluster, count) in fleet.clusters().iter().zip(sent) {
        let counts = cluster.log().counts();
        assert_eq!(
            (counts.requests, counts.connections, counts.handshakes),
            (count as u64, count as u64, count as u64)
        );
        assert!(
            cluster
                .log()
                .entries_for("/api/v1/namespaces")
                .iter()
                .all(|e| e.query.as_deref() == Some("limit=1"))
        );
    }
    assert_eq!(fleet.counts().requests, 17);
}
