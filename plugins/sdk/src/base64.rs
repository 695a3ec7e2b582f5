//! Standard base64, decoded as Go's decoder does for kubeconfig `[]byte` fields.

/// Decodes standard base64 as Go's decoder does for kubeconfig `[]byte` fields: line breaks
/// and other white space are ignored; padding is optional but must be consistent.
///
/// The same function as the host's (`host/src/reference.rs`), so that both accept and refuse
/// the same `*-data` fields.
pub(crate) fn decode(text: &str) -> Option<Vec<u8>> {
    let mut decoded = Vec::with_capacity(text.len() / 4 * 3);
    let mut buffer: u32 = 0;
    let mut bits: u32 = 0;
    let mut symbols: usize = 0;
    let mut padding: usize = 0;
    for byte in text.bytes() {
        if byte.is_ascii_whitespace() {
            continue;
        }
        if byte == b'=' {
            padding += 1;
            continue;
        }
        if padding > 0 {
            return None;
        }
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        symbols += 1;
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            decoded.push(((buffer >> bits) & 0xFF) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    // One symbol alone cannot encode a byte; padding, when present, completes a quantum.
    let complete = symbols % 4 != 1
        && (padding == 0 || (padding <= 2 && (symbols + padding).is_multiple_of(4)));
    complete.then_some(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_like_go() {
        let check = |text: &str, expected: Option<&[u8]>| {
            assert_eq!(decode(text).as_deref(), expected, "{text:?}");
        };
        check("", Some(b""));
        check("aGVsbG8=", Some(b"hello"));
        check("aGVsbG8", Some(b"hello"));
        check("aGVs\nbG8h", Some(b"hello!"));
        check("aGk=", Some(b"hi"));
        check("YQ==", Some(b"a"));
        check("YQ", Some(b"a"));
        check("+/+/", Some(&[0xFB, 0xFF, 0xBF]));
        check("Y", None);
        check("YQ=", None);
        check("YQ===", None);
        check("aGVsbG8=aGk=", None);
        check("aGVs*G8=", None);
        check("-_-_", None);
    }
}
