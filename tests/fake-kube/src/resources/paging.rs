//! Continue tokens, in the real server's format: unpadded URL-safe base64 of
//! `{"v":"meta.k8s.io/v1","rv":<list resourceVersion>,"start":"<key after the page>"}`, where
//! the key is relative to the list's prefix (`namespace/name` across namespaces, `name` within
//! one) and ends with a NUL so that it sorts just after the last key returned.
//!
//! Like the real server's, a token does not carry the selectors: a client continues with the
//! same query and a new token. Since the fixtures never change, the resource version in a
//! token only has to match the set it came from; any other version is answered as a
//! compacted one would be, with 410 Expired.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::status::Failure;

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

#[derive(Serialize)]
struct Token<'a> {
    v: &'a str,
    rv: i64,
    start: &'a str,
}

/// A token as read back; owned, because the NUL in `start` arrives escaped.
#[derive(Deserialize)]
struct ReadToken {
    v: String,
    rv: i64,
    start: String,
}

/// The token for the page that starts after relative key `last_key`.
pub(crate) fn encode(resource_version: u64, last_key: &str) -> String {
    let start = format!("{last_key}\0");
    let token = Token {
        v: TOKEN_VERSION,
        rv: i64::try_from(resource_version).unwrap_or(i64::MAX),
        start: &start,
    };
    URL_SAFE_NO_PAD.encode(super::objects::to_json(&token))
}

/// The relative key a page starts at, from a token issued for `resource_version`.
pub(crate) fn decode(token: &str, resource_version: u64) -> Result<String, Failure> {
    let invalid = |detail: String| {
        Failure::bad_request(format!(
            "invalid continue token: continue key is not valid: {detail}"
        ))
    };
    let bytes = URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|error| invalid(error.to_string()))?;
    let token: ReadToken =
        serde_json::from_slice(&bytes).map_err(|error| invalid(error.to_string()))?;
    if token.v != TOKEN_VERSION {
        return Err(invalid(format!(
            "server does not recognize this encoded version {:?}",
            token.v
        )));
    }
    if token.rv == 0 {
        return Err(Failure::bad_request(
            "invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        ));
    }
    if token.start.is_empty() {
        return Err(Failure::bad_request(
            "invalid continue token: continue key is not valid: encoded start key empty (version meta.k8s.io/v1)",
        ));
    }
    // The real server refuses keys that a path clean would change, so a token cannot reach
    // outside the list's prefix.
    if token
        .start
        .split('/')
        .any(|segment| matches!(segment, "" | "." | ".."))
    {
        return Err(invalid(token.start));
    }
    if u64::try_from(token.rv).ok() != Some(resource_version) {
        return Err(Failure::continue_expired());
    }
    Ok(token.start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_in_the_real_format() {
        let token = encode(42, "shop/web-1");
        let json = URL_SAFE_NO_PAD.decode(&token).unwrap();
        assert_eq!(
            String::from_utf8(json).unwrap(),
            r#"{"v":"meta.k8s.io/v1","rv":42,"start":"shop/web-1\u0000"}"#
        );
        assert_eq!(decode(&token, 42).ok().as_deref(), Some("shop/web-1\0"));
    }

    #[test]
    fn bad_tokens() {
        let status = |result: Result<String, Failure>| match result {
            Err(Failure::Status { code, .. }) => code,
            _ => 0,
        };
        assert_eq!(status(decode("!!!", 1)), 400);
        assert_eq!(status(decode(&URL_SAFE_NO_PAD.encode("{}"), 1)), 400);
        assert_eq!(
            status(decode(
                &URL_SAFE_NO_PAD.encode(r#"{"v":"x","rv":1,"start":"a"}"#),
                1
            )),
            400
        );
        assert_eq!(
            status(decode(
                &URL_SAFE_NO_PAD.encode(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"../a"}"#),
                1
            )),
            400
        );
        assert_eq!(status(decode(&encode(7, "a"), 8)), 410);
    }
}
