//! SIGHUP reads the API tokens file again: a new token works and the old one no longer
//! does, from the next request on; a file that cannot be used is refused (the log says
//! so, without its contents) and the tokens in force are kept.

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::time::Duration;

use vigil_test_support::wait;

use crate::process;

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

#[test]
fn sighup_reads_the_tokens_file_again_and_keeps_the_tokens_when_the_new_file_is_bad() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    let (old, new) = ("old-token-0123456789abcdef", "new-token-0123456789abcdef");
    std::fs::write(&tokens, format!("ops:{old}\n")).unwrap();
    let mut server = process::serve(dir.path())
        .env("VIGIL_API_TOKENS_FILE", &tokens)
        .env("VIGIL_API_READ_AUTH", "true")
        .env("KUBECONFIG_PATH", dir.path().join("none"))
        .start_blocking();
    let api: SocketAddr = server.api();
    assert_eq!(status(api, "/api/v1/clusters", old), 200);
    assert_eq!(status(api, "/api/v1/clusters", new), 401);

    std::fs::write(&tokens, format!("ops:{new}\n")).unwrap();
    server.signal("HUP");
    wait::until(
        "the new token is accepted",
        Duration::from_secs(20),
        || server.tail(),
        || (status(api, "/api/v1/clusters", new) == 200).then_some(()),
    );
    assert_eq!(status(api, "/api/v1/clusters", old), 401);

    std::fs::write(&tokens, "ops:short\n").unwrap();
    server.signal("HUP");
    server.wait_log_blocking("the bad file is refused", Duration::from_secs(20), |log| {
        log.contains("the API tokens file read again is refused")
            .then_some(())
    });
    assert!(server.log().contains("line 1 of the tokens file"));
    assert_eq!(
        status(api, "/api/v1/clusters", new),
        200,
        "the tokens in force"
    );
    let text = server.log();
    assert!(!text.contains(old) && !text.contains(new) && !text.contains("short"));

    server.stop();
}
