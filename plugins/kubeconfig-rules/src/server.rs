//! The `server` of a kubeconfig's cluster.

/// What vigil makes of a cluster's `server`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerShape {
    /// `http(s)://AUTHORITY…` with a non-empty authority and no credentials: usable.
    Url,
    /// Not an `http://` or `https://` URL with a host.
    NotHttp,
    /// The URL embeds `user:password@`: refused, so that a password never becomes an
    /// endpoint in the database or a log.
    WithCredentials,
}

/// Checks that a server is `http(s)://AUTHORITY…` (scheme in any case) with a non-empty
/// authority without white space, and no userinfo.
///
/// ```
/// use vigil_kubeconfig_rules::server::{ServerShape, shape};
///
/// assert_eq!(shape("https://127.0.0.1:6443"), ServerShape::Url);
/// assert_eq!(shape("127.0.0.1:6443"), ServerShape::NotHttp);
/// ```
pub fn shape(server: &str) -> ServerShape {
    let lower = server.to_ascii_lowercase();
    let Some(rest) = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
    else {
        return ServerShape::NotHttp;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        ServerShape::WithCredentials
    } else if authority.is_empty()
        || authority
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        ServerShape::NotHttp
    } else {
        ServerShape::Url
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_shapes() {
        use ServerShape as S;
        let check = |server: &str, expected: ServerShape| {
            assert_eq!(shape(server), expected, "{server:?}");
        };
        check("https://127.0.0.1:6443", S::Url);
        check("HTTP://example.invalid/prefix", S::Url);
        check("https://[::1]:6443/", S::Url);
        check("127.0.0.1:6443", S::NotHttp);
        check("ftp://host", S::NotHttp);
        check("https:///path", S::NotHttp);
        check("https://ho st", S::NotHttp);
        check("https://admin:pw@host", S::WithCredentials);
        check("https://user@host/x", S::WithCredentials);
        check("https:// 127.0.0.1", S::NotHttp);
        check("https://127.0.0.1/path@x", S::Url);
    }
}
