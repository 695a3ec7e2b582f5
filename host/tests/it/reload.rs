//! SIGHUP reads the API tokens file again: a new token works and the old one no longer
//! does, from the next request on; a file that cannot be used is refused (the log says
//! so, without its contents) and the tokens in force are kept.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::process::{Running, listening_on, read_log, sigterm, tail, vigil, wait_exit};

/// The status of a GET of `path` with `token`.
fn status(address: SocketAddr, path: &str, token: &str) -> u16 {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
         Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

fn hangup(server: &Running) {
    let done = Command::new("kill")
        .args(["-HUP", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(done.success());
}

#[test]
fn sighup_reads_the_tokens_file_again_and_keeps_the_tokens_when_the_new_file_is_bad() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    let (old, new) = ("old-token-0123456789abcdef", "new-token-0123456789abcdef");
    std::fs::write(&tokens, format!("ops:{old}\n")).unwrap();
    let log = dir.path().join("vigil.log");
    let mut server = vigil(dir.path())
        .arg("serve")
        .env("VIGIL_API_TOKENS_FILE", &tokens)
        .env("VIGIL_API_READ_AUTH", "true")
        .env("KUBECONFIG_PATH", dir.path().join("none"))
        .stderr(File::create(&log).unwrap())
        .spawn()
        .map(Running)
        .unwrap();
    let api: SocketAddr = listening_on(&log, &mut server).parse().unwrap();
    assert_eq!(status(api, "/api/v1/clusters", old), 200);
    assert_eq!(status(api, "/api/v1/clusters", new), 401);

    let wait_for = |what: &str, check: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !check() {
            assert!(Instant::now() < deadline, "never {what}:\n{}", tail(&log));
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    std::fs::write(&tokens, format!("ops:{new}\n")).unwrap();
    hangup(&server);
    wait_for("the new token accepted", &|| {
        status(api, "/api/v1/clusters", new) == 200
    });
    assert_eq!(status(api, "/api/v1/clusters", old), 401);

    std::fs::write(&tokens, "ops:short\n").unwrap();
    hangup(&server);
    wait_for("the bad file refused", &|| {
        read_log(&log).contains("the API tokens file read again is refused")
    });
    assert!(read_log(&log).contains("line 1 of the tokens file"));
    assert_eq!(
        status(api, "/api/v1/clusters", new),
        200,
        "the tokens in force"
    );
    let text = read_log(&log);
    assert!(!text.contains(old) && !text.contains(new) && !text.contains("short"));

    sigterm(&server);
    assert!(wait_exit(&mut server, Duration::from_secs(20)).success());
}
