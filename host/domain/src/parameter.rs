//! Plugin parameters: the operator's settings among them, and the values that are
//! credential references (resolved by the plugin runtime only when a plugin asks, stored
//! as references, and never shown).

/// The prefix of the operator's settings among a plugin's parameters: only `NAME.toml`'s
/// `[parameters]` gives them. A cluster's parameters are written by whoever registered
/// the cluster, so the REST API refuses these names and the runtime ignores them there.
pub const OPERATOR_PARAMETER_PREFIX: &str = "operator.";

/// Whether `name` is one of the operator's settings (see [`OPERATOR_PARAMETER_PREFIX`]).
pub fn is_operator_parameter(name: &str) -> bool {
    name.starts_with(OPERATOR_PARAMETER_PREFIX)
}

/// What a parameter value that is a credential reference is shown as: the reference
/// itself is never returned, so the API cannot be used to learn where a credential is.
pub const HIDDEN_REFERENCE: &str = "(credential reference)";

/// Whether a parameter value is a credential reference: `secret://NAMESPACE/NAME?key=KEY`
/// or a `file:` URL. A `file:` value that names no local absolute path is one too (an
/// unusable one): it is never taken as a plain value.
pub fn is_credential_reference(value: &str) -> bool {
    value.starts_with("secret://") || value.starts_with("file://")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_references_are_told_from_plain_values() {
        for (value, credential) in [
            ("secret://ns/name?key=token", true),
            ("file:///etc/vigil/token", true),
            ("file://localhost/etc/vigil/token", true),
            ("file://elsewhere/token", true),
            ("file:relative", false),
            ("Bearer abc", false),
            ("https://example.invalid/healthz", false),
            ("", false),
        ] {
            assert_eq!(is_credential_reference(value), credential, "{value:?}");
        }
    }

    #[test]
    fn operator_parameters_are_the_prefixed_names() {
        assert!(is_operator_parameter("operator.allow-quote"));
        assert!(!is_operator_parameter("expect-status"));
    }
}
