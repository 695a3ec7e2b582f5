//! Secret bytes that never print themselves.

use std::fmt;

/// Secret bytes — a key, a token, inline certificate data — that never print themselves.
///
/// `Debug` shows only the length, so a `SecretBytes` can sit in a struct that is logged with
/// `{:?}`. Read the bytes with [`SecretBytes::expose_secret`], whose name makes every use
/// easy to find in a review.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretBytes(Vec<u8>);

impl SecretBytes {
    /// Wraps secret bytes.
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    /// The secret bytes themselves. Never log them, and never put them in a report.
    pub fn expose_secret(&self) -> &[u8] {
        &self.0
    }

    /// Unwraps the bytes, e.g. to hand them to the host in a TLS option.
    pub fn into_exposed(self) -> Vec<u8> {
        self.0
    }

    /// The number of bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretBytes(<redacted {} bytes>)", self.0.len())
    }
}

impl From<Vec<u8>> for SecretBytes {
    fn from(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }
}

/// A secret string from a kubeconfig (a token, a password, inline key data) that never
/// prints itself.
///
/// It deserializes from a YAML string exactly as a `String` does. `Debug` shows only the
/// length; read the text with [`SecretString::expose_secret`].
#[derive(Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct SecretString(String);

impl SecretString {
    /// Wraps a secret string.
    pub fn new(text: String) -> Self {
        Self(text)
    }

    /// The secret text itself. Never log it, and never put it in a report.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretString(<redacted {} bytes>)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_string_debug_is_redacted() {
        let secret = SecretString::new("hunter2".to_owned());
        assert_eq!(format!("{secret:?}"), "SecretString(<redacted 7 bytes>)");
    }

    #[test]
    fn debug_is_redacted() {
        let secret = SecretBytes::new(b"hunter2".to_vec());
        assert_eq!(format!("{secret:?}"), "SecretBytes(<redacted 7 bytes>)");
    }
}
