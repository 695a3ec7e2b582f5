//! The fake API server over real TLS on loopback: addresses, certificates, authentication,
//! authorisation, HTTP/2, the request log, kubeconfig files, management Secrets, the control
//! API, the binary, and a 200-cluster smoke test.

use std::io::{BufRead as _, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use kube::config::Kubeconfig;
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use vigil_fake_kube::client::{ProbeClient, ProbeError, ProbeResponse};
use vigil_fake_kube::control::{ControlState, bind_control, serve_control};
use vigil_fake_kube::kubeconfig::{SINGLE_FILE_NAME, SecretTarget};
use vigil_fake_kube::tls::client_config;
use vigil_fake_kube::{
    AddressPlan, AuthUsed, ClusterHandle, Fixtures, Fleet, KubeconfigOptions, KubeconfigShape,
    ShapePlan, User,
};

async fn start(clusters: usize) -> Fleet {
    Fleet::builder()
        .clusters(clusters)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("the fleet starts")
}

fn json_of(response: &ProbeResponse) -> Value {
    serde_json::from_slice(&response.body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", response.body))
}

#[tokio::test]
async fn each_cluster_listens_on_its_own_loopback_address_with_its_own_ca() {
    let fleet = start(3).await;
    let clusters = fleet.clusters();
    let port = clusters[0].address().port();
    for (i, cluster) in clusters.iter().enumerate() {
        let IpAddr::V4(ip) = cluster.address().ip() else {
            panic!("IPv4 expected")
        };
        assert!(
            ip.is_loopback() && ip.octets()[1] != 0,
            "{ip} must be a dedicated 127.x address"
        );
        assert_eq!(
            cluster.address().port(),
            port,
            "one fixed port for the whole fleet"
        );
        assert!(
            port > 0 && port < 32_768,
            "fixed port below the ephemeral range"
        );
        assert_eq!(cluster.name(), format!("cluster-{i:05}"));
        let version = ProbeClient::admin_token(cluster)
            .expect("client")
            .get("/version")
            .await
            .expect("answers");
        assert_eq!(version.status, 200);
    }
    let addresses: std::collections::HashSet<_> =
        clusters.iter().map(ClusterHandle::address).collect();
    assert_eq!(addresses.len(), 3);
    assert_ne!(clusters[0].ca_pem(), clusters[1].ca_pem());

    // Cluster 1's CA does not vouch for cluster 0's server certificate.
    let tls = client_config(&clusters[1].ca_pem(), None, &[b"http/1.1"]).expect("tls");
    let error = ProbeClient::new(clusters[0].address(), tls)
        .get("/version")
        .await
        .expect_err("wrong CA");
    assert!(matches!(error, ProbeError::Tls(_)), "{error:?}");

    // The server certificate also covers `localhost`.
    let by_name = ProbeClient::admin_token(&clusters[2])
        .expect("client")
        .with_server_name(ServerName::try_from("localhost").expect("name"));
    assert_eq!(by_name.get("/version").await.expect("answers").status, 200);
}

/// One authentication case: the client's credentials, the path, the expected status, what
/// the log should record, and the expected `Status` message (for failures).
struct Case {
    what: &'static str,
    client: ProbeClient,
    path: &'static str,
    status: u16,
    auth: AuthUsed,
    message: Option<&'static str>,
}

#[tokio::test]
async fn authenticates_and_authorises_like_an_api_server() {
    let fleet = start(2).await;
    let cluster = &fleet.clusters()[0];
    let other = &fleet.clusters()[1];
    let ca = cluster.ca_pem();
    let with_cert = |identity: &vigil_fake_kube::IssuedCertificate| {
        ProbeClient::new(
            cluster.address(),
            client_config(&ca, Some(identity), &[b"http/1.1"]).expect("tls"),
        )
    };
    let anonymous = ProbeClient::anonymous(cluster).expect("client");
    let admin_cert = cluster
        .admin_client_certificate()
        .expect("admin certificate");
    let alice = cluster
        .issue_client_certificate(&User::new("alice", &["devs"]))
        .expect("alice");
    let ops = cluster
        .issue_client_certificate(&User::new("ops", &["system:masters"]))
        .expect("ops");
    let foreign = other
        .admin_client_certificate()
        .expect("foreign certificate");
    let admin = || AuthUsed::Token {
        user: "kubernetes-admin".into(),
    };
    let reader = || AuthUsed::Token {
        user: "reader-without-rbac".into(),
    };
    let cases = vec![
        Case {
            what: "anonymous list",
            client: anonymous.clone(),
            path: "/api/v1/namespaces?limit=1",
            status: 401,
            auth: AuthUsed::Anonymous,
            message: Some("Unauthorized"),
        },
        Case {
            what: "anonymous version",
            client: anonymous.clone(),
            path: "/version",
            status: 401,
            auth: AuthUsed::Anonymous,
            message: Some("Unauthorized"),
        },
        Case {
            what: "admin token",
            client: anonymous.clone().with_token(cluster.admin_token()),
            path: "/api/v1/namespaces?limit=1",
            status: 200,
            auth: admin(),
            message: None,
        },
        Case {
            what: "another cluster's token",
            client: anonymous.clone().with_token(other.admin_token()),
            path: "/api/v1/namespaces",
            status: 401,
            auth: AuthUsed::RejectedToken,
            message: Some("Unauthorized"),
        },
        Case {
            what: "reader lists",
            client: anonymous.clone().with_token(cluster.reader_token()),
            path: "/api/v1/namespaces",
            status: 403,
            auth: reader(),
            message: Some(
                r#"namespaces is forbidden: User "reader-without-rbac" cannot list resource "namespaces" in API group "" at the cluster scope"#,
            ),
        },
        Case {
            what: "reader reads version",
            client: anonymous.clone().with_token(cluster.reader_token()),
            path: "/version",
            status: 200,
            auth: reader(),
            message: None,
        },
        Case {
            what: "admin certificate",
            client: with_cert(&admin_cert),
            path: "/api/v1/namespaces",
            status: 200,
            auth: AuthUsed::ClientCertificate {
                user: "kubernetes-admin".into(),
            },
            message: None,
        },
        Case {
            what: "masters certificate",
            client: with_cert(&ops),
            path: "/api/v1/namespaces/default",
            status: 200,
            auth: AuthUsed::ClientCertificate { user: "ops".into() },
            message: None,
        },
        Case {
            what: "certificate without RBAC",
            client: with_cert(&alice),
            path: "/api/v1/namespaces/kube-system/pods",
            status: 403,
            auth: AuthUsed::ClientCertificate {
                user: "alice".into(),
            },
            message: Some(
                r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "kube-system""#,
            ),
        },
        Case {
            what: "another cluster's certificate",
            client: with_cert(&foreign),
            path: "/api/v1/namespaces",
            status: 401,
            auth: AuthUsed::RejectedClientCertificate,
            message: Some("Unauthorized"),
        },
        Case {
            what: "foreign certificate but good token",
            client: with_cert(&foreign).with_token(cluster.admin_token()),
            path: "/api/v1/namespaces",
            status: 200,
            auth: admin(),
            message: None,
        },
    ];
    for case in cases {
        let response = case
            .client
            .get(case.path)
            .await
            .unwrap_or_else(|e| panic!("{}: {e:?}", case.what));
        assert_eq!(
            response.status, case.status,
            "{}: {:?}",
            case.what, response.body
        );
        let body = json_of(&response);
        match case.message {
            Some(message) => {
                assert_eq!(body["kind"], "Status", "{}", case.what);
                assert_eq!(body["code"], case.status, "{}", case.what);
                assert_eq!(body["message"], message, "{}", case.what);
                let reason = if case.status == 401 {
                    "Unauthorized"
                } else {
                    "Forbidden"
                };
                assert_eq!(body["reason"], reason, "{}", case.what);
            }
            None => assert_ne!(body["kind"], "Status", "{}", case.what),
        }
        let last = cluster.log().entries().pop().expect("logged");
        assert_eq!(last.auth, case.auth, "{}", case.what);
        assert_eq!(last.status, Some(case.status), "{}", case.what);
    }
}

#[tokio::test]
async fn speaks_http2_when_alpn_offers_it_and_logs_each_request() {
    let fleet = start(1).await;
    let cluster = &fleet.clusters()[0];
    let tls = client_config(&cluster.ca_pem(), None, &[b"h2", b"http/1.1"]).expect("tls");
    let client = ProbeClient::new(cluster.address(), tls).with_token(cluster.admin_token());
    let mut connection = client.connect().await.expect("connects");
    assert!(connection.is_http2(), "ALPN should choose h2");
    for _ in 0..2 {
        let response = connection
            .get("/api/v1/namespaces?limit=1")
            .await
            .expect("answers");
        assert_eq!((response.status, response.http_version), (200, "HTTP/2.0"));
        assert_eq!(json_of(&response)["kind"], "NamespaceList");
    }
    ProbeClient::admin_token(cluster)
        .expect("client")
        .get("/readyz")
        .await
        .expect("answers");

    let counts = cluster.log().counts();
    assert_eq!(
        (counts.requests, counts.connections, counts.handshakes),
        (3, 2, 2)
    );
    let entries = cluster.log().entries();
    let seen: Vec<_> = entries
        .iter()
        .map(|e| {
            (
                e.method.as_str(),
                e.path.as_str(),
                e.query.as_deref(),
                e.http_version.as_str(),
                e.connection,
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("GET", "/api/v1/namespaces", Some("limit=1"), "HTTP/2.0", 1),
            ("GET", "/api/v1/namespaces", Some("limit=1"), "HTTP/2.0", 1),
            ("GET", "/readyz", None, "HTTP/1.1", 2),
        ]
    );
    assert!(
        entries
            .iter()
            .all(|e| e.elapsed.is_some() && e.status == Some(200))
    );
    cluster.log().clear();
    assert_eq!(cluster.log().count(), 0);
}

fn read_kubeconfig(path: &Path) -> Kubeconfig {
    Kubeconfig::read_from(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test]
async fn writes_kubeconfigs_in_the_shapes_real_tools_write() {
    let fleet = start(4).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let options = KubeconfigOptions {
        shapes: ShapePlan::Mixed,
        single_file: false,
    };
    let written = fleet
        .write_kubeconfigs(dir.path(), &options)
        .expect("written");
    let shapes: Vec<_> = written.iter().map(|w| w.shape).collect();
    assert_eq!(shapes, KubeconfigShape::ALL.to_vec());

    for (entry, cluster) in written.iter().zip(fleet.clusters()) {
        assert_eq!(
            entry.path,
            dir.path().join(format!("{}.yaml", cluster.name()))
        );
        let raw = std::fs::read_to_string(&entry.path).expect("readable");
        let config = read_kubeconfig(&entry.path);
        assert_eq!(config.current_context.as_deref(), Some(cluster.name()));
        let named = &config.clusters[0];
        assert_eq!(named.name, cluster.name());
        let server = named.cluster.as_ref().expect("cluster entry");
        assert_eq!(
            server.server.as_deref(),
            Some(cluster.server_url().as_str())
        );
        let user = config.auth_infos[0].auth_info.as_ref().expect("user entry");
        match entry.shape {
            KubeconfigShape::Embedded => {
                assert!(
                    raw.contains("certificate-authority-data:") && raw.contains("client-key-data:"),
                    "{raw}"
                );
                assert!(user.client_certificate_data.is_some() && user.client_key_data.is_some());
            }
            KubeconfigShape::Files => {
                // Relative in the file; kube resolves them beside the kubeconfig.
                let folder = format!("credentials/{}", cluster.name());
                assert!(
                    raw.contains(&format!("certificate-authority: {folder}/ca.crt")),
                    "{raw}"
                );
                assert!(
                    raw.contains(&format!("client-key: {folder}/client.key")),
                    "{raw}"
                );
                let ca_file = server.certificate_authority.as_deref().expect("a CA path");
                assert_eq!(
                    std::fs::read_to_string(ca_file).expect("CA file"),
                    cluster.ca_pem()
                );
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    let key = dir.path().join(&folder).join("client.key");
                    let mode = std::fs::metadata(&key)
                        .expect("key file")
                        .permissions()
                        .mode();
                    assert_eq!(mode & 0o777, 0o600);
                }
            }
            KubeconfigShape::Token => assert!(
                raw.contains(&format!("token: {}", cluster.admin_token())),
                "{raw}"
            ),
            KubeconfigShape::TokenFile => {
                assert!(
                    raw.contains(&format!("tokenFile: credentials/{}/token", cluster.name())),
                    "{raw}"
                );
                let token_file = user.token_file.as_deref().expect("a token file");
                assert_eq!(
                    std::fs::read_to_string(token_file).expect("token file"),
                    cluster.admin_token()
                );
            }
        }
    }
    // No stray temporaries: a folder watcher sees only finished files.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(
        names.len(),
        5,
        "four kubeconfigs and the credentials folder: {names:?}"
    );

    let single = tempfile::tempdir().expect("temp dir");
    let options = KubeconfigOptions {
        shapes: ShapePlan::Only(KubeconfigShape::Token),
        single_file: true,
    };
    fleet
        .write_kubeconfigs(single.path(), &options)
        .expect("written");
    let config = read_kubeconfig(&single.path().join(SINGLE_FILE_NAME));
    let contexts: Vec<_> = config.contexts.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        contexts,
        [
            "cluster-00000",
            "cluster-00001",
            "cluster-00002",
            "cluster-00003"
        ]
    );
    assert_eq!(config.current_context.as_deref(), Some("cluster-00000"));
}

async fn get_secret(management: &ClusterHandle, namespace: &str, name: &str) -> Value {
    let path = format!("/api/v1/namespaces/{namespace}/secrets/{name}");
    let response = ProbeClient::admin_token(management)
        .expect("client")
        .get(&path)
        .await
        .expect("answers");
    assert_eq!(response.status, 200, "{path}: {:?}", response.body);
    json_of(&response)
}

fn secret_value(secret: &Value, key: &str) -> String {
    let encoded = secret["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("no key {key} in {secret}"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .expect("base64");
    String::from_utf8(bytes).expect("UTF-8")
}

#[tokio::test]
async fn stores_kubeconfigs_in_secrets_of_the_management_cluster() {
    let fleet = start(3).await;
    let management = &fleet.clusters()[0];
    let target: SecretTarget = "vigil/fleet-kubeconfigs".parse().expect("target");
    fleet
        .store_kubeconfigs_in_secrets(management, Fixtures::empty(), &target, ShapePlan::Mixed)
        .expect("stored");
    let secret = get_secret(management, "vigil", "fleet-kubeconfigs").await;
    assert_eq!(secret["kind"], "Secret");
    let all = Kubeconfig::from_yaml(&secret_value(&secret, "kubeconfig")).expect("kubeconfig");
    assert_eq!(all.contexts.len(), 3);
    let one = Kubeconfig::from_yaml(&secret_value(&secret, "cluster-00001")).expect("kubeconfig");
    let server = one.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone());
    assert_eq!(
        server.as_deref(),
        Some(fleet.clusters()[1].server_url().as_str())
    );
    // Mixed: cluster 1 would be `files`, which a Secret cannot hold; it is embedded instead.
    let user = one.auth_infos[0].auth_info.as_ref().expect("user");
    assert!(user.client_key_data.is_some() && user.client_key.is_none());

    let per_cluster: SecretTarget = "vigil/{cluster}-kubeconfig".parse().expect("target");
    fleet
        .store_kubeconfigs_in_secrets(
            management,
            Fixtures::empty(),
            &per_cluster,
            ShapePlan::Only(KubeconfigShape::Token),
        )
        .expect("stored");
    let secret = get_secret(management, "vigil", "cluster-00002-kubeconfig").await;
    let yaml = secret_value(&secret, "kubeconfig");
    let config = Kubeconfig::from_yaml(&yaml).expect("kubeconfig");
    assert_eq!(config.current_context.as_deref(), Some("cluster-00002"));
    assert!(
        yaml.contains(&format!("token: {}", fleet.clusters()[2].admin_token())),
        "{yaml}"
    );
}

/// A JSON request to the control API over plain HTTP/1.1.
async fn control(
    address: SocketAddr,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("control connects");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", address.to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let response = sender.send_request(request).await.expect("control answers");
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (
        status,
        serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned())),
    )
}

#[tokio::test]
async fn control_api_sets_faults_rotates_and_reads_the_log() {
    assert!(
        bind_control("0.0.0.0:0".parse().expect("address"))
            .await
            .is_err(),
        "only loopback"
    );
    let fleet = std::sync::Arc::new(start(2).await);
    let listener = bind_control("127.0.0.1:0".parse().expect("address"))
        .await
        .expect("binds");
    let address = listener.local_addr().expect("address");
    let server = tokio::spawn(serve_control(
        listener,
        std::sync::Arc::new(ControlState {
            fleet: fleet.clone(),
            kubeconfigs: None,
        }),
    ));
    let first = fleet.clusters()[0].clone();
    let probe = ProbeClient::admin_token(&first).expect("client");

    let (status, summary) = control(
        address,
        "PUT",
        "/clusters/cluster-00000/fault",
        Some(json!({"kind": "status", "code": 503})),
    )
    .await;
    assert_eq!(
        (status, &summary["fault"]),
        (200, &json!({"kind": "status", "code": 503}))
    );
    assert_eq!(
        probe
            .get("/api/v1/namespaces")
            .await
            .expect("answers")
            .status,
        503
    );
    let (_, log) = control(
        address,
        "GET",
        "/clusters/cluster-00000/requests?limit=5",
        None,
    )
    .await;
    assert_eq!(log["counts"]["requests"], 1);
    assert_eq!(log["entries"][0]["status"], 503);
    assert_eq!(
        log["entries"][0]["auth"],
        json!({"kind": "token", "user": "kubernetes-admin"})
    );

    let (status, _) = control(
        address,
        "PUT",
        "/fault",
        Some(json!({"fault": {"kind": "refuse"}})),
    )
    .await;
    assert_eq!(status, 200);
    for cluster in fleet.clusters() {
        let error = ProbeClient::admin_token(cluster)
            .expect("client")
            .get("/version")
            .await
            .expect_err("refused");
        assert!(matches!(error, ProbeError::Refused), "{error:?}");
    }
    let (_, stats) = control(address, "GET", "/stats", None).await;
    assert_eq!(
        (stats["clusters"].as_u64(), stats["listening"].as_u64()),
        (Some(2), Some(0))
    );
    let (status, _) = control(address, "DELETE", "/clusters/1/fault", None).await;
    assert_eq!(status, 200, "clusters can be named by index too");
    let (status, _) = control(address, "PUT", "/fault", Some(json!({"clusters": ["cluster-00000"], "fault": {"kind": "flap", "steps": ["ok", "500"]}}))).await;
    assert_eq!(status, 200);
    let statuses = [
        probe.get("/version").await.expect("ok").status,
        probe.get("/version").await.expect("500").status,
    ];
    assert_eq!(statuses, [200, 500]);

    let old_ca = first.ca_pem();
    let (status, rotated) = control(
        address,
        "POST",
        "/clusters/cluster-00000/rotate-certificate",
        Some(json!({"ca": "new"})),
    )
    .await;
    assert_eq!(status, 200);
    assert_ne!(rotated["ca_pem"].as_str(), Some(old_ca.as_str()));
    let (status, detail) = control(address, "GET", "/clusters/cluster-00000", None).await;
    assert_eq!(status, 200);
    assert_eq!(detail["ca_pem"], rotated["ca_pem"]);
    assert_eq!(detail["admin_token"].as_str(), Some(first.admin_token()));

    let (status, _) = control(address, "DELETE", "/clusters/cluster-00000/requests", None).await;
    assert_eq!(status, 200);
    assert_eq!(first.log().count(), 0);

    let failures = [
        ("GET", "/clusters/nope", None, 404),
        (
            "PUT",
            "/clusters/cluster-00000/fault",
            Some(json!({"kind": "flap", "steps": []})),
            400,
        ),
        (
            "PUT",
            "/clusters/cluster-00000/fault",
            Some(json!({"kind": "explode"})),
            400,
        ),
        (
            "POST",
            "/clusters/cluster-00000/rotate-certificate",
            Some(json!({"ca": "same", "rewrite_kubeconfig": true})),
            400,
        ),
        ("GET", "/nothing", None, 404),
    ];
    for (method, path, body, expected) in failures {
        let (status, answer) = control(address, method, path, body).await;
        assert_eq!(status, expected, "{method} {path}: {answer}");
        assert!(answer["error"].is_string(), "{method} {path}: {answer}");
    }
    server.abort();
}

/// A client for a cluster of the binary, from what the control API tells.
async fn probe_from_control(control_address: SocketAddr, name: &str) -> ProbeClient {
    let (status, detail) =
        control(control_address, "GET", &format!("/clusters/{name}"), None).await;
    assert_eq!(status, 200, "{detail}");
    let server = detail["server"].as_str().expect("server");
    let address: SocketAddr = server
        .trim_start_matches("https://")
        .parse()
        .expect("address");
    let tls =
        client_config(detail["ca_pem"].as_str().expect("CA"), None, &[b"http/1.1"]).expect("tls");
    ProbeClient::new(address, tls).with_token(detail["admin_token"].as_str().expect("token"))
}

/// The binary: starts, writes kubeconfigs, loads per-cluster fixtures, stores the management
/// Secret, prints a ready line, answers on the control API.
#[tokio::test]
async fn binary_prints_a_ready_line_and_serves_the_control_api() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fixtures = tempfile::tempdir().expect("temp dir");
    let own = fixtures.path().join("cluster-00001");
    std::fs::create_dir(&own).expect("fixture folder");
    let namespace = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: only-on-one\n";
    std::fs::write(own.join("ns.yaml"), namespace).expect("fixture");
    let control_address = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        probe.local_addr().expect("address")
    };
    // Ports 30000-32767 and blocks 251-254 are never used by `AddressPlan::Auto`.
    let block = 251 + (std::process::id() % 4);
    let port = 30_000 + (std::process::id() % 2_700);
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_fake-kube"))
            .args([
                "--clusters",
                "3",
                "--shape",
                "mixed",
                "--management-secret",
                "vigil/fleet",
            ])
            .arg("--kubeconfig-dir")
            .arg(dir.path())
            .arg("--fixtures")
            .arg(fixtures.path())
            .args(["--control", &control_address.to_string()])
            .args([
                "--address-block",
                &block.to_string(),
                "--port",
                &port.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary starts"),
    );
    let stdout = child.0.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(Duration::from_secs(30), line)
        .await
        .expect("ready in time")
        .expect("join")
        .expect("line");
    assert!(line.starts_with("fake-kube ready:"), "{line}");
    assert!(
        line.contains(&format!("control=http://{control_address}")),
        "{line}"
    );
    assert!(
        line.contains(&format!("first=https://127.{block}.0.1:{port}")),
        "{line}"
    );
    for name in ["cluster-00000", "cluster-00001", "cluster-00002"] {
        assert!(
            dir.path().join(format!("{name}.yaml")).is_file(),
            "{name}'s kubeconfig"
        );
    }
    let (status, stats) = control(control_address, "GET", "/stats", None).await;
    assert_eq!((status, stats["clusters"].as_u64()), (200, Some(3)));

    let management = probe_from_control(control_address, "cluster-00000").await;
    let secret = management
        .get("/api/v1/namespaces/vigil/secrets/fleet")
        .await
        .expect("answers");
    assert_eq!(secret.status, 200, "{:?}", secret.body);
    // Only cluster 1 has the folder of its own: it serves its namespace, the others do not.
    let path = "/api/v1/namespaces/only-on-one";
    let one = probe_from_control(control_address, "cluster-00001").await;
    assert_eq!(one.get(path).await.expect("answers").status, 200);
    let two = probe_from_control(control_address, "cluster-00002").await;
    assert_eq!(two.get(path).await.expect("answers").status, 404);
}

/// Kills the child process even when an assertion fails first.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A smoke test of scale: 200 clusters started in one process all answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_clusters_all_answer() {
    let started = Instant::now();
    let fleet = start(200).await;
    let startup = started.elapsed();
    let tasks: Vec<_> = fleet
        .clusters()
        .iter()
        .map(|cluster| {
            let client = ProbeClient::admin_token(cluster).expect("client");
            tokio::spawn(async move {
                client
                    .get("/api/v1/namespaces?limit=1")
                    .await
                    .map(|r| r.status)
            })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        assert_eq!(
            task.await.expect("join").expect("answers"),
            200,
            "cluster {i}"
        );
    }
    assert_eq!(fleet.counts().requests, 200);
    eprintln!(
        "200 clusters: started in {startup:?}, all answered after {:?}",
        started.elapsed()
    );
}
