//! The fake Kubernetes API server as the benchmarks run it: its own process, so that its
//! CPU and memory can be told apart from the client's.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use vigil_domain::discovery::{Sources, discover};
use vigil_domain::reference::{ConnectionMaterial, Reference, Resolution, resolve};

/// A running `fake-kube`, killed when dropped, however the benchmark ends.
#[derive(Debug)]
pub struct FakeKubeProcess {
    child: Child,
    control: String,
}

impl FakeKubeProcess {
    /// Starts `binary` with `clusters` clusters on `127.BLOCK.x.y:6443`, writing one
    /// kubeconfig each of `shape` (`embedded`, `token`, …) into `kubeconfigs`, and returns
    /// once it says it is ready.
    pub fn start(
        binary: &Path,
        clusters: usize,
        shape: &str,
        address_block: u8,
        kubeconfigs: &Path,
    ) -> Result<Self, String> {
        let mut child = Command::new(binary)
            .args(["--clusters", &clusters.to_string(), "--shape", shape])
            .args([
                "--address-block",
                &address_block.to_string(),
                "--port",
                "6443",
            ])
            .args(["--control", "127.0.0.1:0"])
            .arg("--kubeconfig-dir")
            .arg(kubeconfigs)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let stdout = child.stdout.take().ok_or("fake-kube has no stdout")?;
        let mut server = Self {
            child,
            control: String::new(),
        };
        let mut ready = String::new();
        BufReader::new(stdout)
            .read_line(&mut ready)
            .map_err(|e| e.to_string())?;
        if !ready.starts_with("fake-kube ready") {
            return Err(format!("the fake server did not start: {ready:?}"));
        }
        server.control = ready
            .split_whitespace()
            .find_map(|field| field.strip_prefix("control=http://"))
            .ok_or(format!(
                "the fake server named no control address: {ready:?}"
            ))?
            .to_owned();
        Ok(server)
    }

    /// Its process id, to read its CPU time and memory.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The `host:port` of its control API (plain HTTP on loopback).
    pub fn control(&self) -> &str {
        &self.control
    }
}

impl Drop for FakeKubeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The connection material of every cluster the kubeconfigs of `dir` define, resolved as
/// the host resolves it (clusters that do not resolve are left out).
pub fn materials(dir: &Path) -> Vec<ConnectionMaterial> {
    discover(&Sources::new([], Some(dir.to_path_buf())))
        .clusters
        .iter()
        .filter_map(|c| match resolve(&Reference::parse(&c.reference).ok()?) {
            Resolution::Connection(material) => Some(*material),
            _ => None,
        })
        .collect()
}
