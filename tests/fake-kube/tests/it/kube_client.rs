//! The `kube` crate's client against the fake clusters, configured only from the
//! kubeconfigs the fake writes: every shape, client certificates and tokens, a wrong CA, a
//! wrong token, RBAC, paging with selectors, the scale subresource, and faults as the client
//! sees them.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use vigil_fake_kube::{
    AddressPlan, AuthUsed, CaRotation, Fixtures, Fleet, KubeconfigOptions, KubeconfigShape,
    ShapePlan,
};

async fn start(clusters: usize) -> Fleet {
    Fleet::builder()
        .clusters(clusters)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("the fleet starts")
}

async fn client_from(kubeconfig: Kubeconfig, context: &str) -> Client {
    let options = KubeConfigOptions {
        context: Some(context.to_owned()),
        ..KubeConfigOptions::default()
    };
    let config = Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .expect("a client configuration");
    Client::try_from(config).expect("a client")
}

async fn client(path: &Path, context: &str) -> Client {
    client_from(Kubeconfig::read_from(path).expect("a kubeconfig"), context).await
}

async fn list_namespaces(client: Client) -> Result<Vec<String>, kube::Error> {
    let list = Api::<Namespace>::all(client)
        .list(&ListParams::default().limit(1))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|ns| ns.metadata.name)
        .collect())
}

/// The status code of an API error (a `Status` body), if it is one.
fn api_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Every message of an error's chain, joined.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(" / ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[tokio::test]
async fn lists_namespaces_through_every_kubeconfig_shape() {
    let fleet = start(4).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let written = fleet
        .write_kubeconfigs(
            dir.path(),
            &KubeconfigOptions {
                shapes: ShapePlan::Mixed,
                single_file: false,
            },
        )
        .expect("written");
    for (entry, cluster) in written.iter().zip(fleet.clusters()) {
        let names = list_namespaces(client(&entry.path, &entry.context).await)
            .await
            .expect("lists namespaces");
        assert_eq!(
            names,
            ["default"],
            "{:?}: limit=1 gives the first namespace",
            entry.shape
        );
        let last = cluster
            .log()
            .entries()
            .pop()
            .expect("the request reached this cluster");
        assert_eq!(last.path, "/api/v1/namespaces");
        assert!(
            last.query
                .as_deref()
                .is_some_and(|q| q.split('&').any(|kv| kv == "limit=1")),
            "{:?}",
            last.query
        );
        let expected = match entry.shape {
            KubeconfigShape::Embedded | KubeconfigShape::Files => AuthUsed::ClientCertificate {
                user: "kubernetes-admin".into(),
            },
            KubeconfigShape::Token | KubeconfigShape::TokenFile => AuthUsed::Token {
                user: "kubernetes-admin".into(),
            },
        };
        assert_eq!(last.auth, expected, "{:?}", entry.shape);
    }
}

#[tokio::test]
async fn selects_each_context_of_a_single_file() {
    let fleet = start(3).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let written = fleet
        .write_kubeconfigs(
            dir.path(),
            &KubeconfigOptions {
                shapes: ShapePlan::Mixed,
                single_file: true,
            },
        )
        .expect("written");
    let path: &PathBuf = &written[0].path;
    assert!(written.iter().all(|w| &w.path == path), "one file");
    for cluster in fleet.clusters() {
        list_namespaces(client(path, cluster.name()).await)
            .await
            .expect("lists namespaces");
        assert_eq!(
            cluster.log().count(),
            1,
            "{} got its own request",
            cluster.name()
        );
    }
}

#[tokio::test]
async fn a_wrong_ca_fails_with_a_tls_error() {
    let fleet = start(2).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let written = fleet
        .write_kubeconfigs(dir.path(), &KubeconfigOptions::default())
        .expect("written");
    let cluster = &fleet.clusters()[0];

    // The kubeconfig of cluster 0 with cluster 1's CA.
    let mut kubeconfig = Kubeconfig::read_from(&written[0].path).expect("a kubeconfig");
    let other = Kubeconfig::read_from(&written[1].path).expect("a kubeconfig");
    let other_ca = other.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.certificate_authority_data.clone());
    if let Some(entry) = kubeconfig.clusters[0].cluster.as_mut() {
        entry.certificate_authority_data = other_ca;
    }
    let error = list_namespaces(client_from(kubeconfig, cluster.name()).await)
        .await
        .expect_err("wrong CA");
    assert_eq!(api_code(&error), None, "not an API answer: {error:?}");
    let text = chain(&error);
    assert!(
        text.contains("invalid peer certificate") && text.contains("UnknownIssuer"),
        "{text}"
    );
    assert_eq!(cluster.log().count(), 0, "no request got through");

    // The same after a rotation to a new CA: the kubeconfig written before no longer works,
    // one written after does.
    cluster
        .rotate_certificate(CaRotation::New)
        .expect("rotates");
    let error = list_namespaces(client(&written[0].path, cluster.name()).await)
        .await
        .expect_err("old CA");
    assert!(chain(&error).contains("UnknownIssuer"), "{}", chain(&error));
    fleet
        .write_kubeconfigs(dir.path(), &KubeconfigOptions::default())
        .expect("rewritten");
    list_namespaces(client(&written[0].path, cluster.name()).await)
        .await
        .expect("new CA works");
}

#[tokio::test]
async fn a_wrong_token_gets_401_and_a_user_without_rbac_403() {
    let fleet = start(1).await;
    let cluster = &fleet.clusters()[0];
    let kubeconfig = |token: &str| {
        let yaml = cluster
            .kubeconfig(KubeconfigShape::Token)
            .expect("kubeconfig");
        let yaml = yaml.replace(cluster.admin_token(), token);
        Kubeconfig::from_yaml(&yaml).expect("a kubeconfig")
    };

    let error = list_namespaces(client_from(kubeconfig("wrong-token"), cluster.name()).await)
        .await
        .expect_err("401");
    assert_eq!(api_code(&error), Some(401), "{error:?}");
    assert_eq!(
        cluster.log().entries().pop().map(|e| e.auth),
        Some(AuthUsed::RejectedToken)
    );

    let error =
        list_namespaces(client_from(kubeconfig(cluster.reader_token()), cluster.name()).await)
            .await
            .expect_err("403");
    let kube::Error::Api(status) = &error else {
        panic!("an API error expected: {error:?}")
    };
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        r#"namespaces is forbidden: User "reader-without-rbac" cannot list resource "namespaces" in API group "" at the cluster scope"#
    );
}

#[tokio::test]
async fn pages_pods_with_selectors_and_reads_scale() {
    let basic = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/basic");
    let fleet = Fleet::builder()
        .addresses(AddressPlan::Auto)
        .fixtures(Fixtures::load(&basic).expect("fixtures/basic"))
        .start()
        .await
        .expect("starts");
    let cluster = &fleet.clusters()[0];
    let client = client_from(
        Kubeconfig::from_yaml(&cluster.kubeconfig(KubeconfigShape::Embedded).expect("yaml"))
            .expect("kubeconfig"),
        cluster.name(),
    )
    .await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "shop");
    let mut names = Vec::new();
    let mut params = ListParams::default().labels("app=web").limit(2);
    let mut pages = 0;
    loop {
        let page = pods.list(&params).await.expect("a page");
        pages += 1;
        assert!(page.items.len() <= 2);
        names.extend(page.items.into_iter().filter_map(|p| p.metadata.name));
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(pages, 2);
    assert_eq!(names.len(), 3);
    assert!(
        names.iter().all(|name| name.starts_with("web-")),
        "{names:?}"
    );
    let none = pods
        .list(&ListParams::default().labels("app=nothing"))
        .await
        .expect("an empty list");
    assert!(none.items.is_empty());

    let scale = Api::<Deployment>::namespaced(client, "shop")
        .get_scale("web")
        .await
        .expect("scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
}

#[tokio::test]
async fn faults_reach_the_kube_client_and_it_recovers() {
    let fleet = start(1).await;
    let cluster = &fleet.clusters()[0];
    let yaml = cluster
        .kubeconfig(KubeconfigShape::Token)
        .expect("kubeconfig");
    let client = client_from(
        Kubeconfig::from_yaml(&yaml).expect("kubeconfig"),
        cluster.name(),
    )
    .await;
    list_namespaces(client.clone()).await.expect("healthy");

    cluster.fail_with(500).await.expect("fails");
    let error = list_namespaces(client.clone()).await.expect_err("500");
    assert_eq!(api_code(&error), Some(500), "{error:?}");

    cluster.refuse().await.expect("refuses");
    let error = list_namespaces(client.clone()).await.expect_err("refused");
    assert_eq!(api_code(&error), None, "{error:?}");

    cluster.come_back().await.expect("comes back");
    list_namespaces(client)
        .await
        .expect("the same client works again");
}
