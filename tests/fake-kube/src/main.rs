//! `fake-kube`: serves many fake Kubernetes clusters on loopback, writes their kubeconfigs
//! and exposes the fault controls over a JSON HTTP API. See the crate's README.

#![forbid(unsafe_code)]

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use clap::Parser;
use vigil_fake_kube::control::{ControlState, KubeconfigOutput, bind_control, serve_control};
use vigil_fake_kube::{
    AddressPlan, Fixtures, Fleet, FleetBuilder, KubeconfigOptions, SecretTarget, ShapePlan,
};

/// Serve many fake Kubernetes API servers on loopback, each on its own address.
#[derive(Debug, Parser)]
#[command(name = "fake-kube", version)]
struct Config {
    /// How many clusters to serve.
    #[arg(long, env = "FAKE_KUBE_CLUSTERS", default_value_t = 1)]
    clusters: usize,
    /// Where to write the kubeconfigs (created if missing).
    #[arg(
        long,
        env = "FAKE_KUBE_KUBECONFIG_DIR",
        default_value = "fake-kube-kubeconfigs"
    )]
    kubeconfig_dir: PathBuf,
    /// Kubeconfig shape: embedded, files, token, token-file, or mixed (cycling through all four).
    #[arg(long, default_value = "embedded")]
    shape: ShapePlan,
    /// One kubeconfig file with every context instead of one file per cluster.
    #[arg(long)]
    single_file: bool,
    /// Fixtures: a YAML file or folder applied to every cluster; or a folder holding one
    /// sub-folder per cluster name (clusters without one serve the empty set).
    #[arg(long, env = "FAKE_KUBE_FIXTURES")]
    fixtures: Option<PathBuf>,
    /// Address of the HTTP control API (loopback only).
    #[arg(long, env = "FAKE_KUBE_CONTROL", default_value = "127.0.0.1:7070")]
    control: SocketAddr,
    /// Store the kubeconfigs in a Secret NAMESPACE/NAME of the management cluster (cluster 0);
    /// `{cluster}` in NAME gives one Secret per cluster.
    #[arg(long)]
    management_secret: Option<SecretTarget>,
    /// Second octet of the clusters' addresses: cluster i listens on 127.BLOCK.(i/250).(i%250+1).
    #[arg(long, default_value_t = 10)]
    address_block: u8,
    /// The port every cluster listens on.
    #[arg(long, default_value_t = 6443)]
    port: u16,
    /// Cluster names are this prefix and a five-digit index.
    #[arg(long, default_value = "cluster-")]
    name_prefix: String,
}

/// Where each cluster's fixtures come from.
enum FixtureSource {
    Empty,
    Shared(PathBuf),
    PerCluster(PathBuf),
}

impl FixtureSource {
    fn detect(path: Option<&Path>, names: &[String]) -> Self {
        match path {
            None => Self::Empty,
            Some(path) if path.is_dir() && names.iter().any(|name| path.join(name).is_dir()) => {
                Self::PerCluster(path.to_owned())
            }
            Some(path) => Self::Shared(path.to_owned()),
        }
    }

    /// The fixtures of one cluster, when they differ from the shared ones.
    fn own(&self, name: &str) -> anyhow::Result<Option<Fixtures>> {
        match self {
            Self::PerCluster(root) if root.join(name).is_dir() => {
                let folder = root.join(name);
                Ok(Some(Fixtures::load(&folder).with_context(|| {
                    format!("loading fixtures {}", folder.display())
                })?))
            }
            _ => Ok(None),
        }
    }

    fn shared(&self) -> anyhow::Result<Fixtures> {
        match self {
            Self::Shared(path) => {
                Fixtures::load(path).with_context(|| format!("loading fixtures {}", path.display()))
            }
            Self::Empty | Self::PerCluster(_) => Ok(Fixtures::empty()),
        }
    }

    /// A fresh copy of what `name` serves (for the management cluster, which gets Secrets added).
    fn fresh(&self, name: &str) -> anyhow::Result<Fixtures> {
        match self.own(name)? {
            Some(own) => Ok(own),
            None => self.shared(),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = Config::parse();
    let started = Instant::now();

    let names: Vec<String> = (0..config.clusters)
        .map(|i| format!("{}{i:05}", config.name_prefix))
        .collect();
    let source = FixtureSource::detect(config.fixtures.as_deref(), &names);
    let mut builder: FleetBuilder = Fleet::builder()
        .clusters(config.clusters)
        .name_prefix(config.name_prefix.clone())
        .addresses(AddressPlan::Block {
            block: config.address_block,
            port: config.port,
        })
        .fixtures(source.shared()?);
    for name in &names {
        if let Some(own) = source.own(name)? {
            builder = builder.fixtures_for(name.clone(), own);
        }
    }
    let control_listener = bind_control(config.control).await?;
    let control_address = control_listener
        .local_addr()
        .context("reading the control address")?;
    let fleet = builder.start().await.context("starting the clusters")?;
    let serving = started.elapsed();

    let options = KubeconfigOptions {
        shapes: config.shape,
        single_file: config.single_file,
    };
    fleet
        .write_kubeconfigs(&config.kubeconfig_dir, &options)
        .with_context(|| {
            format!(
                "writing kubeconfigs into {}",
                config.kubeconfig_dir.display()
            )
        })?;
    if let (Some(target), Some(management)) = (&config.management_secret, fleet.get(0)) {
        let fixtures = source.fresh(management.name())?;
        fleet
            .store_kubeconfigs_in_secrets(management, fixtures, target, config.shape)
            .with_context(|| format!("storing kubeconfigs in {target}"))?;
    }
    let kubeconfig_dir =
        std::fs::canonicalize(&config.kubeconfig_dir).unwrap_or(config.kubeconfig_dir.clone());

    let fleet = Arc::new(fleet);
    let state = Arc::new(ControlState {
        fleet: fleet.clone(),
        kubeconfigs: Some(KubeconfigOutput {
            dir: kubeconfig_dir.clone(),
            options,
        }),
    });
    let control = tokio::spawn(serve_control(control_listener, state));

    let first = fleet.get(0).map(|c| c.server_url()).unwrap_or_default();
    println!(
        "fake-kube ready: clusters={} first={} control=http://{} kubeconfig-dir={} serving-ms={} ready-ms={}",
        fleet.len(),
        first,
        control_address,
        kubeconfig_dir.display(),
        serving.as_millis(),
        started.elapsed().as_millis(),
    );
    std::io::stdout()
        .flush()
        .context("writing the ready line")?;

    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    control.abort();
    tracing::info!("shutting down");
    Ok(())
}
