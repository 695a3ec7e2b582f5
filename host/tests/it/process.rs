//! Running the `vigil` binary in tests: a command with a clean environment,
//! a child killed if the test fails, exit with a deadline, SIGTERM.
#![allow(dead_code)]

use std::io::{Read, Write as _};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `vigil` with an empty environment (only `HOME` = `dir`, `PATH`, `RUST_LOG=info`), run in `dir`,
/// with only the plugins of its plugin directory: the tests name the plugins they run
/// (embedded.rs runs the ones built into the binary).
pub fn vigil(dir: &Path) -> Command {
    vigil_at(Path::new(env!("CARGO_BIN_EXE_vigil")), dir)
}

/// [`vigil`] for the binary at `program`.
pub fn vigil_at(program: &Path, dir: &Path) -> Command {
    let mut command = Command::new(program);
    command
        .current_dir(dir)
        .env_clear()
        .env("HOME", dir)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "info")
        // Tests run side by side: each API on a port of its own (logged at start-up).
        .env("VIGIL_LISTEN", "127.0.0.1:0")
        .env("NO_COLOR", "1")
        .env("VIGIL_PLUGINS_EMBEDDED", "false")
        .stdin(Stdio::null());
    command
}

/// A running `vigil`, killed if the test fails before stopping it.
pub struct Running(pub Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for the child to exit, killing it past `timeout`.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("vigil did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    text
}

pub fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// A JSON log file as it is being written (a read can end inside a character).
pub fn read_log(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

/// The complete JSON lines of a log file (a line still being written is skipped).
pub fn log_lines(path: &Path) -> Vec<serde_json::Value> {
    read_log(path)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// A JSON log line's message.
pub fn message(line: &serde_json::Value) -> &str {
    line["fields"]["message"].as_str().unwrap_or("")
}

/// The last 40 lines of a log below trace level, for a failure's message.
pub fn tail(path: &Path) -> String {
    let text = read_log(path);
    let lines: Vec<&str> = text.lines().filter(|l| !l.contains("\"TRACE\"")).collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The address `vigil serve` logged that its API listens on (it binds port 0 in tests).
pub fn listening_on(log: &Path, server: &mut Running) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains("REST API listening")) {
            let (_, rest) = line.split_once("listen=").unwrap();
            return rest.split_whitespace().next().unwrap().to_owned();
        }
        if let Some(status) = server.try_wait().unwrap() {
            panic!("vigil serve exited with {status:?}:\n{text}");
        }
        assert!(
            Instant::now() < deadline,
            "vigil serve never listened:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A plain HTTP/1.1 GET on loopback; the body.
pub fn http_get(address: SocketAddr, path: &str) -> String {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}
