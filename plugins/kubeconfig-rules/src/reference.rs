//! Cluster references (`kubeconfig_secret_ref`): where a cluster's connection
//! details live.
//!
//! - `ABSOLUTE_PATH#CONTEXT`, or `ABSOLUTE_PATH` for the file's `current-context`: a
//!   kubeconfig file. The text is split at its **last** `#`, so a path may contain `#` but a
//!   context cannot.
//! - `secret://NAMESPACE/NAME?key=KEY&context=CONTEXT`: a kubeconfig in a Kubernetes Secret
//!   (key default `kubeconfig`, context default the kubeconfig's `current-context`).
//! - `http://…` / `https://…`: a health URL.
//!
//! The host parses every reference it stores and hands plugins only references it has
//! parsed; the guest SDK parses them with this same code.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// The Secret key read when a `secret://` reference gives none.
pub const DEFAULT_SECRET_KEY: &str = "kubeconfig";

/// Where a cluster's connection details live. Parse with [`Reference::parse`]; `Display` gives
/// back the canonical text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reference {
    /// A kubeconfig file and, optionally, a context in it (else its `current-context`).
    File {
        /// The kubeconfig's absolute path, as given (not canonicalised). Text, as the whole
        /// reference is: a path that is not UTF-8 cannot be referenced.
        path: String,
        /// The context; `None` means the file's `current-context`.
        context: Option<String>,
    },
    /// A kubeconfig stored in a Kubernetes Secret (resolved by a plugin).
    Secret {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The key holding the kubeconfig ([`DEFAULT_SECRET_KEY`] unless given).
        key: String,
        /// The context; `None` means the kubeconfig's `current-context`.
        context: Option<String>,
    },
    /// A health URL, probed by the http plugin.
    Http {
        /// The URL, as given.
        url: String,
    },
}

/// Why a reference's text is not a valid reference.
///
/// Messages may quote names from the reference (they are not secret) but never a URL, which
/// could carry credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReferenceError {
    /// Nothing was given.
    #[error("the reference is empty")]
    Empty,
    /// A file reference whose path is relative (a reference must not depend on a working
    /// directory).
    #[error("kubeconfig path {0:?} is not absolute")]
    RelativePath(String),
    /// A file reference ending in `#` with no context after it.
    #[error(
        "nothing follows the last '#': name a context after it, or drop the '#' to use the current context"
    )]
    EmptyContext,
    /// A scheme other than `secret`, `http` and `https`.
    #[error(
        "unsupported scheme {0:?}: use an absolute kubeconfig path, secret://, http:// or https://"
    )]
    UnsupportedScheme(String),
    /// A `secret://` reference that is not `secret://NAMESPACE/NAME[?…]`.
    #[error("expected secret://NAMESPACE/NAME?key=KEY&context=CONTEXT")]
    SecretShape,
    /// A `secret://` reference with a `#` (its context is given as `?context=`).
    #[error("a secret:// reference gives its context as ?context=CONTEXT, not after '#'")]
    FragmentInSecret,
    /// A namespace, Secret name or key that Kubernetes would not accept.
    #[error("{what} {value:?} is not a valid Kubernetes {what}")]
    InvalidName {
        /// `namespace`, `Secret name` or `Secret key`.
        what: &'static str,
        /// The value given.
        value: String,
    },
    /// A `secret://` query parameter other than `key` and `context`.
    #[error("unknown secret:// parameter {0:?} (known: key, context)")]
    UnknownParameter(String),
    /// A `secret://` query parameter given twice, or without `=`.
    #[error("secret:// parameter {0:?} is given twice or has no value")]
    BadParameter(String),
    /// A `%` escape that is not two hex digits, or that decodes to invalid UTF-8.
    #[error("invalid percent-encoding in a secret:// parameter")]
    BadPercentEncoding,
    /// An `http(s)://` URL without a host, or with white space.
    #[error("malformed http(s) URL: {0}")]
    MalformedUrl(&'static str),
    /// An `http(s)://` URL with `user:password@`: credentials belong in a credential parameter.
    #[error("the URL embeds credentials (user@host); give them as a credential parameter instead")]
    CredentialsInUrl,
    /// An `http(s)://` URL whose query (or fragment) has a parameter named like a credential
    /// (`token`, `access_token`, `key`, `sig`, `password`, `X-Amz-Signature`…). A reference is
    /// stored, shown by the API and logged as it is, so it must not hold a secret.
    #[error(
        "the URL carries a credential in {}: a reference is stored and shown as it is; give the credential as a credential parameter instead",
        .0.as_deref().map_or_else(|| "a query parameter".to_owned(), |name| format!("its query parameter `{name}`"))
    )]
    CredentialInQuery(Option<String>),
}

impl Reference {
    /// Parses a reference. A file reference is split at its **last** `#`, so a path may
    /// contain `#` but a context cannot.
    ///
    /// ```
    /// use vigil_kubeconfig_rules::reference::Reference;
    ///
    /// let reference = Reference::parse("/etc/kube/odd#dir/config#prod").unwrap();
    /// assert_eq!(
    ///     reference,
    ///     Reference::File { path: "/etc/kube/odd#dir/config".into(), context: Some("prod".into()) }
    /// );
    /// assert_eq!(reference.scheme(), "file");
    /// ```
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        if text.is_empty() {
            return Err(ReferenceError::Empty);
        }
        if let Some(rest) = text.strip_prefix("secret://") {
            return parse_secret(rest);
        }
        if text.starts_with("http://") || text.starts_with("https://") {
            return parse_http(text);
        }
        if let Some(scheme) = scheme_of(text) {
            return Err(ReferenceError::UnsupportedScheme(scheme.to_owned()));
        }
        let (path, context) = match text.rsplit_once('#') {
            Some((_, "")) => return Err(ReferenceError::EmptyContext),
            Some((path, context)) => (path, Some(context.to_owned())),
            None => (text, None),
        };
        if !Path::new(path).is_absolute() {
            return Err(ReferenceError::RelativePath(path.to_owned()));
        }
        Ok(Self::File {
            path: path.to_owned(),
            context,
        })
    }

    /// The scheme, as a plugin's `info` lists schemes: `file` (a plain path), `secret`,
    /// `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        match self {
            Self::File { .. } => "file",
            Self::Secret { .. } => "secret",
            Self::Http { url } if url.starts_with("https://") => "https",
            Self::Http { .. } => "http",
        }
    }

    /// The context the reference names, if any (`None`: the kubeconfig's `current-context`;
    /// always `None` for a URL).
    pub fn context(&self) -> Option<&str> {
        match self {
            Self::File { context, .. } | Self::Secret { context, .. } => context.as_deref(),
            Self::Http { .. } => None,
        }
    }
}

impl FromStr for Reference {
    type Err = ReferenceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File { path, context } => {
                f.write_str(path)?;
                if let Some(context) = context {
                    write!(f, "#{context}")?;
                }
                Ok(())
            }
            Self::Secret {
                namespace,
                name,
                key,
                context,
            } => {
                write!(f, "secret://{namespace}/{name}")?;
                let mut separator = '?';
                // The default key is left out so that each reference has one canonical text.
                if key != DEFAULT_SECRET_KEY {
                    write!(f, "{separator}key={}", PercentEncoded(key))?;
                    separator = '&';
                }
                if let Some(context) = context {
                    write!(f, "{separator}context={}", PercentEncoded(context))?;
                }
                Ok(())
            }
            Self::Http { url } => f.write_str(url),
        }
    }
}

/// The scheme of `SCHEME://…` text, if it has one.
fn scheme_of(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let starts_with_letter = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (starts_with_letter && rest_ok).then_some(scheme)
}

fn parse_secret(rest: &str) -> Result<Reference, ReferenceError> {
    if rest.contains('#') {
        return Err(ReferenceError::FragmentInSecret);
    }
    let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (namespace, name) = location
        .split_once('/')
        .ok_or(ReferenceError::SecretShape)?;
    if namespace.is_empty() || name.is_empty() || name.contains('/') {
        return Err(ReferenceError::SecretShape);
    }
    if !is_dns_label(namespace) {
        return Err(ReferenceError::InvalidName {
            what: "namespace",
            value: namespace.to_owned(),
        });
    }
    if !is_dns_subdomain(name) {
        return Err(ReferenceError::InvalidName {
            what: "Secret name",
            value: name.to_owned(),
        });
    }
    let mut key = None;
    let mut context = None;
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (parameter, value) = pair
            .split_once('=')
            .ok_or_else(|| ReferenceError::BadParameter(pair.to_owned()))?;
        let slot = match parameter {
            "key" => &mut key,
            "context" => &mut context,
            _ => return Err(ReferenceError::UnknownParameter(parameter.to_owned())),
        };
        let value = percent_decode(value)?;
        if slot.is_some() || value.is_empty() {
            return Err(ReferenceError::BadParameter(parameter.to_owned()));
        }
        *slot = Some(value);
    }
    let key = key.unwrap_or_else(|| DEFAULT_SECRET_KEY.to_owned());
    if !is_secret_key(&key) {
        return Err(ReferenceError::InvalidName {
            what: "Secret key",
            value: key,
        });
    }
    Ok(Reference::Secret {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        key,
        context,
    })
}

fn parse_http(url: &str) -> Result<Reference, ReferenceError> {
    let rest = url
        .split_once("://")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(ReferenceError::CredentialsInUrl);
    }
    if authority.is_empty() {
        return Err(ReferenceError::MalformedUrl("no host"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ReferenceError::MalformedUrl("it contains white space"));
    }
    // The fragment is never sent, but it is stored and shown with the rest (a token after
    // `#access_token=` is as exposed there as in the query).
    let after_path = rest.find(['?', '#']).map_or("", |at| &rest[at + 1..]);
    if let Some(name) = after_path
        .split(['&', ';', '?', '#'])
        .map(|pair| pair.split('=').next().unwrap_or_default())
        .find(|name| {
            is_credential_name(&percent_decode(name).unwrap_or_else(|_| (*name).to_owned()))
        })
    {
        let name = percent_decode(name).unwrap_or_else(|_| name.to_owned());
        // The name is quoted only when it is short and plain: text that merely contains a
        // credential word could be the credential itself (`?token-3f9a…` without a value).
        let quotable = name.len() <= 40
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        return Err(ReferenceError::CredentialInQuery(quotable.then_some(name)));
    }
    Ok(Reference::Http {
        url: url.to_owned(),
    })
}

/// The words that make a URL parameter's name a credential's, compared with each word of
/// the name (split at punctuation and at lower-to-upper case changes, case ignored), so that
/// `access_token`, `accessToken`, `X-Amz-Signature` and `apikey` all match, and `keyword` or
/// `bypass` do not.
const CREDENTIAL_WORDS: &[&str] = &[
    "token",
    "key",
    "apikey",
    "sig",
    "signature",
    "password",
    "passwd",
    "pwd",
    "pass",
    "secret",
    "clientsecret",
    "auth",
    "authorization",
    "credential",
    "credentials",
    "jwt",
    "bearer",
];

/// Whether a URL parameter named `name` carries a credential (see [`CREDENTIAL_WORDS`]).
fn is_credential_name(name: &str) -> bool {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() || (c.is_uppercase() && previous_lower) {
            words.push(std::mem::take(&mut word));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
        }
    }
    words.push(word);
    words
        .iter()
        .any(|word| CREDENTIAL_WORDS.contains(&word.as_str()))
}

/// RFC 1123 label, as Kubernetes requires of namespaces.
fn is_dns_label(text: &str) -> bool {
    text.len() <= 63
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

/// RFC 1123 subdomain, as Kubernetes requires of Secret names.
fn is_dns_subdomain(text: &str) -> bool {
    text.len() <= 253
        && text
            .split('.')
            .all(|label| !label.is_empty() && is_dns_label(label))
}

/// A Secret data key: `[-._a-zA-Z0-9]+`.
fn is_secret_key(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// Writes a query value, escaping everything but unreserved characters and `:/@`, which
/// context names use (EKS: `arn:aws:eks:…:cluster/NAME`) and which need no escaping there.
struct PercentEncoded<'a>(&'a str);

impl fmt::Display for PercentEncoded<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0.bytes() {
            if byte.is_ascii_alphanumeric()
                || matches!(byte, b'-' | b'.' | b'_' | b'~' | b':' | b'/' | b'@')
            {
                write!(f, "{}", char::from(byte))?;
            } else {
                write!(f, "%{byte:02X}")?;
            }
        }
        Ok(())
    }
}

fn percent_decode(text: &str) -> Result<String, ReferenceError> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        if byte == b'%' {
            let hex = bytes
                .get(index + 1..index + 3)
                .and_then(|hex| std::str::from_utf8(hex).ok())
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or(ReferenceError::BadPercentEncoding)?;
            decoded.push(hex);
            index += 3;
        } else {
            decoded.push(byte);
            index += 1;
        }
    }
    String::from_utf8(decoded).map_err(|_| ReferenceError::BadPercentEncoding)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, context: Option<&str>) -> Reference {
        Reference::File {
            path: path.to_owned(),
            context: context.map(str::to_owned),
        }
    }

    /// Parses `text`, compares with `expected`, and checks that a parsed reference displays
    /// as `text` (its canonical form) and parses back to itself.
    fn check(text: &str, expected: Result<Reference, ReferenceError>) {
        assert_eq!(Reference::parse(text), expected, "{text:?}");
        if let Ok(reference) = expected {
            assert_eq!(reference.to_string(), text);
            assert_eq!(Reference::parse(&reference.to_string()), Ok(reference));
        }
    }

    #[test]
    fn references_parse_and_display_canonically() {
        use ReferenceError as E;
        let eks = "arn:aws:eks:eu-west-1:111122223333:cluster/demo";
        check(
            "/etc/kube/config#prod",
            Ok(file("/etc/kube/config", Some("prod"))),
        );
        check("/etc/kube/config", Ok(file("/etc/kube/config", None)));
        check(
            "/odd#dir/config#ctx",
            Ok(file("/odd#dir/config", Some("ctx"))),
        );
        check(
            &format!("/etc/kube/config#{eks}"),
            Ok(file("/etc/kube/config", Some(eks))),
        );
        check("/etc/kube/config#", Err(E::EmptyContext));
        check("kube/config#x", Err(E::RelativePath("kube/config".into())));
        check("", Err(E::Empty));
        check("ftp://x/y", Err(E::UnsupportedScheme("ftp".into())));
        check(
            "secret://monitoring/prod?key=cfg&context=a%23b",
            Ok(Reference::Secret {
                namespace: "monitoring".into(),
                name: "prod".into(),
                key: "cfg".into(),
                context: Some("a#b".into()),
            }),
        );
        check("secret://monitoring/prod#x", Err(E::FragmentInSecret));
        check(
            "secret://Mon/prod",
            Err(E::InvalidName {
                what: "namespace",
                value: "Mon".into(),
            }),
        );
        check(
            "https://127.0.0.1:8443/healthz",
            Ok(Reference::Http {
                url: "https://127.0.0.1:8443/healthz".into(),
            }),
        );
        check("https://user:pw@host/", Err(E::CredentialsInUrl));
    }

    #[test]
    fn urls_with_credentials_in_their_query_are_refused_naming_the_parameter() {
        let refused = |url: &str, name: Option<&str>| {
            let error = Reference::parse(url).unwrap_err();
            assert_eq!(
                error,
                ReferenceError::CredentialInQuery(name.map(str::to_owned)),
                "{url}"
            );
            let message = error.to_string();
            assert!(!message.contains("s3cr3t"), "{url}: {message}");
        };
        for name in [
            "token",
            "access_token",
            "accessToken",
            "id_token",
            "key",
            "api_key",
            "apikey",
            "sig",
            "password",
            "X-Amz-Signature",
            "X-Amz-Credential",
            "X-Amz-Security-Token",
            "X-Goog-Signature",
            "client_secret",
            "auth",
            "jwt",
        ] {
            refused(&format!("https://h/healthz?{name}=s3cr3t"), Some(name));
            refused(
                &format!("https://h/healthz?verbose&{name}=s3cr3t&x=1"),
                Some(name),
            );
        }
        refused("https://h/?%74oken=s3cr3t", Some("token"));
        refused("https://h/?TOKEN=s3cr3t", Some("TOKEN"));
        refused("https://h/?a=1;sig=s3cr3t", Some("sig"));
        refused("https://h/#access_token=s3cr3t", Some("access_token"));
        refused(
            "https://h/?access-token-s3cr3t-0123456789abcdef0123456789",
            None,
        );
        // Ordinary health URLs keep working, whatever their parameters.
        for url in [
            "https://h/readyz?verbose&exclude=etcd",
            "https://h/healthz?timeout=5s&format=json",
            "https://h/livez?keyword=a&bypass=cache&monkey=1",
            "http://localhost/readyz?verbose#x",
            "https://h/token/healthz",
        ] {
            assert!(Reference::parse(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn schemes_are_named_as_plugins_list_them() {
        let scheme = |text: &str| Reference::parse(text).map(|r| r.scheme());
        assert_eq!(scheme("/a/b"), Ok("file"));
        assert_eq!(scheme("secret://ns/name"), Ok("secret"));
        assert_eq!(scheme("http://h/"), Ok("http"));
        assert_eq!(scheme("https://h/"), Ok("https"));
    }
}
