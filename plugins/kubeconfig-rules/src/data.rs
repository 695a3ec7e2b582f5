//! The base64 of a kubeconfig's `*-data` fields (`certificate-authority-data`,
//! `client-certificate-data`, `client-key-data`).
//!
//! kubectl (client-go) reads these fields as Go `[]byte`, which `encoding/json` decodes with
//! `base64.StdEncoding`: the standard alphabet, `=` padding required, and carriage returns
//! and line feeds ignored wherever they are (so a YAML block scalar that wraps the data over
//! several lines works). Any other white space, a missing `=`, or the URL-safe alphabet is an
//! error there, and so it is here: vigil accepts exactly the data kubectl accepts.

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// Go's `base64.StdEncoding` as a decoder: padding required and canonical. Go's non-strict
/// decoder also accepts non-zero bits after the last byte (`YR==` decodes to `a`).
const GO_STD_ENCODING: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical)
        .with_decode_allow_trailing_bits(true),
);

/// Decodes a `*-data` field as kubectl does; `None` when kubectl would refuse it.
///
/// Line breaks (`\r`, `\n`) are skipped; an empty result is empty bytes, which the callers
/// treat as an absent field ([`is_absent`]), as client-go does.
///
/// ```
/// use vigil_kubeconfig_rules::data::decode;
///
/// assert_eq!(decode("aGVsbG8=").as_deref(), Some(&b"hello"[..]));
/// assert_eq!(decode("aGVs\nbG8=\n").as_deref(), Some(&b"hello"[..]));
/// assert_eq!(decode("aGVsbG8"), None); // unpadded: kubectl refuses it
/// ```
pub fn decode(field: &str) -> Option<Vec<u8>> {
    // Most fields have no line break: decode them as they are, without a first pass to
    // look for one (in a WebAssembly guest that pass cost twice the decoding itself). A
    // line break is outside the alphabet, so a field with one fails here and is decoded
    // again without them. Line breaks are single bytes in UTF-8 and never part of a longer
    // character, so the text can be filtered byte by byte.
    if let Ok(bytes) = GO_STD_ENCODING.decode(field) {
        return Some(bytes);
    }
    let is_line_break = |byte: &u8| matches!(byte, b'\r' | b'\n');
    let bytes = field.as_bytes();
    if !bytes.iter().any(is_line_break) {
        return None;
    }
    let without_line_breaks: Vec<u8> = bytes
        .iter()
        .copied()
        .filter(|byte| !is_line_break(byte))
        .collect();
    GO_STD_ENCODING.decode(without_line_breaks).ok()
}

/// Whether a `*-data` field counts as absent: empty, or only line breaks (client-go then has
/// zero bytes and falls back to the file field).
pub fn is_absent(field: &str) -> bool {
    field.chars().all(|c| matches!(c, '\r' | '\n'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_go_std_encoding_decodes() {
        let check = |text: &str, expected: Option<&[u8]>| {
            assert_eq!(decode(text).as_deref(), expected, "{text:?}");
        };
        check("", Some(b""));
        check("aGVsbG8=", Some(b"hello"));
        check("aGVs\nbG8h", Some(b"hello!"));
        check("aGVs\r\nbG8=\n", Some(b"hello"));
        check("YQ=\n=", Some(b"a"));
        check("aGk=", Some(b"hi"));
        check("YQ==", Some(b"a"));
        check("YR==", Some(b"a"));
        check("+/+/", Some(&[0xFB, 0xFF, 0xBF]));
        // Refused by Go's StdEncoding, so by kubectl.
        check("aGVsbG8", None);
        check("YQ", None);
        check("Y", None);
        check("YQ=", None);
        check("YQ===", None);
        check("aGVsbG8=aGk=", None);
        check("aGVs bG8h", None);
        check("aGVs\tbG8h", None);
        check(" aGk=", None);
        check("aGVs*G8=", None);
        check("-_-_", None);
    }

    #[test]
    fn only_empty_or_line_breaks_count_as_absent() {
        assert!(is_absent(""));
        assert!(is_absent("\n"));
        assert!(!is_absent(" "));
        assert!(!is_absent("YQ=="));
    }
}
