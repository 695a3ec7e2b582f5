//! A fake Kubernetes API server for vigil's tests, demos and benchmarks.
//!
//! One process serves many fake clusters over real TLS, each on its own loopback address
//! with a fixed port, each with its own CA, server certificate, client-certificate and token
//! authentication, fault controls and request log.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use vigil_fake_kube::{AddressPlan, Fleet, KubeconfigOptions};
//!
//! let fleet = Fleet::builder().clusters(3).addresses(AddressPlan::Auto).start().await?;
//! let dir = tempfile_dir();
//! fleet.write_kubeconfigs(&dir, &KubeconfigOptions::default())?;
//! let cluster = fleet.get(1).expect("three clusters");
//! cluster.fail_with(500).await?;          // the next request gets a 500
//! cluster.refuse().await?;                // the next connection is refused
//! cluster.come_back().await?;             // same address, no fault
//! println!("{} requests", cluster.log().count());
//! # Ok(()) }
//! # fn tempfile_dir() -> std::path::PathBuf { unimplemented!() }
//! ```
//!
//! Module map: [`server`] owns sockets and the request pipeline; [`tls`] certificates;
//! [`auth`] authentication and authorisation (pure); [`faults`] the fault plan (pure);
//! [`request_log`] the per-cluster log; [`kubeconfig`] kubeconfig files and Secrets;
//! [`control`] the binary's HTTP control API; [`client`] a small HTTPS probe client for tests; [`resources`] what a cluster answers (pure, no
//! I/O).

#![forbid(unsafe_code)]

pub mod auth;
pub mod client;
pub mod control;
pub mod faults;
pub mod kubeconfig;
pub mod request_log;
pub mod resources;
pub mod server;
pub mod tls;

pub use auth::{AccessPolicy, AuthUsed, User};
pub use faults::{CaRotation, Fault, FlapStep, HangPoint, parse_flap};
pub use kubeconfig::{
    KubeconfigOptions, KubeconfigShape, SecretTarget, ShapePlan, WrittenKubeconfig,
};
pub use request_log::{LogCounts, LoggedRequest, RequestLog};
pub use resources::Fixtures;
pub use server::{AddressPlan, ClusterError, ClusterHandle, Fleet, FleetBuilder, FleetError};
pub use tls::IssuedCertificate;
