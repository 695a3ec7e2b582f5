//! A kubeconfig's bytes as text, and YAML parser messages that are safe to show.
//!
//! Both follow the `kube` crate's reader, which the host uses: the same encodings and the
//! same size limit, so that the host and a plugin accept and refuse the same files.

use std::collections::HashSet;

/// The largest kubeconfig vigil reads, in bytes (4 MiB: real kubeconfigs are kilobytes;
/// the cap keeps a wrong path, such as a disk image, from being read into memory).
pub const MAX_KUBECONFIG_BYTES: usize = 4 * 1024 * 1024;

/// The bytes are not text in an encoding a kubeconfig may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not text (binary content, or not UTF-8/UTF-16)")]
pub struct NotText;

/// Decodes a kubeconfig's bytes as kube's reader does: UTF-8, with or without a byte-order
/// mark, or UTF-16 with one. NUL characters mean a binary file.
pub fn decode(bytes: Vec<u8>) -> Result<String, NotText> {
    let utf16 = |data: &[u8], from: fn([u8; 2]) -> u16| -> Result<String, NotText> {
        let units: Vec<u16> = data
            .chunks(2)
            .map(|pair| match pair {
                [a, b] => Ok(from([*a, *b])),
                _ => Err(NotText),
            })
            .collect::<Result<_, _>>()?;
        String::from_utf16(&units).map_err(|_| NotText)
    };
    let text = match bytes.as_slice() {
        [0xFF, 0xFE, rest @ ..] => utf16(rest, u16::from_le_bytes)?,
        [0xFE, 0xFF, rest @ ..] => utf16(rest, u16::from_be_bytes)?,
        [0xEF, 0xBB, 0xBF, rest @ ..] => String::from_utf8(rest.to_vec()).map_err(|_| NotText)?,
        _ => String::from_utf8(bytes).map_err(|_| NotText)?,
    };
    if text.contains('\0') {
        return Err(NotText);
    }
    Ok(text)
}

/// The longest YAML problem description kept, in characters.
const MAX_PROBLEM_CHARS: usize = 120;

/// Reduces a YAML parser message to a description that cannot quote the file.
///
/// The parser's messages are mostly fixed phrases ("did not find expected key"), but some
/// quote input: serde's "invalid type: string \"…\"", "unknown variant `…`", "duplicate
/// mapping key: …", "unexpected character: `…'". So the message is cut at the first quote,
/// backtick or colon, except for quoted single punctuation (`','`) and for "missing field
/// `NAME`", whose name comes from the reader's types, not from the file. As a last guard, a message
/// that still contains a long token (8+ characters) of the file's text is replaced by a
/// generic one.
pub fn sanitize_yaml_problem(message: &str, source: &str) -> String {
    sanitize_parser_problem(
        message,
        source,
        "the YAML does not have a kubeconfig's structure",
    )
}

/// `problem` (a sanitised YAML parser message about the value at `line` and `column` of
/// `source`) with the path to that value and what it is — by type only, so that nothing of
/// the file is quoted: `invalid boolean at `clusters[0].cluster.insecure-skip-tls-verify`,
/// found a string`. Unchanged when the text is not one YAML document the parser can read, or
/// no value starts there.
pub fn locate_yaml_problem(problem: String, source: &str, line: u64, column: u64) -> String {
    let Some(root) = crate::yaml::Node::read(source) else {
        return problem;
    };
    let Some(path) = root.path_to(line, column).filter(|path| !path.is_empty()) else {
        return problem;
    };
    let shown = crate::yaml::show(&path);
    match root.at(&path) {
        // What is there says nothing about a field missing from it.
        Some(node) if !problem.starts_with("missing field") => {
            format!("{problem} at `{shown}`, found {}", node.describe())
        }
        _ => format!("{problem} at `{shown}`"),
    }
}

/// What a kubeconfig's YAML parse error says, quoting nothing of `source`: where the parser
/// stopped (line and column, 1-based, when it knows) and the sanitised problem, with the
/// path to the value there ([`locate_yaml_problem`]). The host's and the SDK's readings
/// both use it, so a file gets one message whichever side reads it.
pub fn yaml_parse_problem(
    error: &serde_saphyr::Error,
    source: &str,
) -> (Option<(u64, u64)>, String) {
    let position = error
        .location()
        .filter(|location| location.line() > 0)
        .map(|location| (location.line(), location.column()));
    let problem = sanitize_yaml_problem(&error.without_snippet().to_string(), source);
    let problem = match position {
        Some((line, column)) => locate_yaml_problem(problem, source, line, column),
        None => problem,
    };
    (position, problem)
}

/// [`sanitize_yaml_problem`] for any parser's message (TOML's too: its messages are serde's
/// and quote input the same way), with `generic` as the last guard's replacement.
pub fn sanitize_parser_problem(message: &str, source: &str, generic: &str) -> String {
    // The plain rendering ends with " at line L, column C"; the position is reported apart.
    let message = message
        .rfind(" at line ")
        .map_or(message, |end| &message[..end])
        .trim();
    if let Some(field) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'))
        && !field.is_empty()
        && field.len() <= 64
        && field
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return format!("missing field `{field}`");
    }
    let chars: Vec<char> = message.chars().collect();
    let mut kept = String::new();
    let mut index = 0;
    while let Some(&c) = chars.get(index) {
        if matches!(c, '\'' | '"' | '`') {
            // `','` style: one punctuation character between matching quotes is not input.
            match (chars.get(index + 1), chars.get(index + 2)) {
                (Some(&inner), Some(&close)) if close == c && inner.is_ascii_punctuation() => {
                    kept.extend([c, inner, close]);
                    index += 3;
                    continue;
                }
                _ => break,
            }
        }
        if c == ':' || c.is_control() {
            break;
        }
        kept.push(c);
        index += 1;
    }
    let kept = kept.trim_end_matches([' ', ',', ';']).trim();
    // Whole tokens, not substrings: a token like `vigil-unclosed-…` must not make the fixed
    // phrase "unclosed quote" suspect, but a message echoing a whole scalar must be caught.
    let is_yaml_separator = |c: char| {
        c.is_whitespace() || matches!(c, ':' | ',' | '[' | ']' | '{' | '}' | '"' | '\'' | '#')
    };
    let source_tokens: HashSet<&str> = source
        .split(is_yaml_separator)
        .filter(|token| token.len() >= 8)
        .collect();
    let shares_a_long_word = kept
        .split(is_yaml_separator)
        .map(|word| word.trim_matches(|c: char| c.is_ascii_punctuation()))
        .any(|word| source_tokens.contains(word));
    if kept.is_empty() || shares_a_long_word {
        return generic.to_owned();
    }
    kept.chars().take(MAX_PROBLEM_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_handles_boms_and_binary() {
        assert_eq!(
            decode(b"\xEF\xBB\xBFkind: Config".to_vec()),
            Ok("kind: Config".to_owned())
        );
        let utf16le: Vec<u8> = [0xFF, 0xFE]
            .into_iter()
            .chain("a: b".encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        assert_eq!(decode(utf16le), Ok("a: b".to_owned()));
        let utf16be: Vec<u8> = [0xFE, 0xFF]
            .into_iter()
            .chain("a: b".encode_utf16().flat_map(u16::to_be_bytes))
            .collect();
        assert_eq!(decode(utf16be), Ok("a: b".to_owned()));
        assert_eq!(decode(vec![0xFF, 0xFE, 0x61]), Err(NotText));
        assert_eq!(decode(vec![0xFF, 0x00, 0x01]), Err(NotText));
        assert_eq!(decode(b"a\0b".to_vec()), Err(NotText));
    }

    #[test]
    fn sanitize_keeps_fixed_phrases_and_cuts_quoted_input() {
        let check = |message: &str, source: &str, expected: &str| {
            assert_eq!(
                sanitize_yaml_problem(message, source),
                expected,
                "{message}"
            );
        };
        check(
            "while parsing a flow mapping, did not find expected ',' or '}' at line 5, column 9",
            "",
            "while parsing a flow mapping, did not find expected ',' or '}'",
        );
        check(
            "missing field `cluster` at line 4, column 5",
            "",
            "missing field `cluster`",
        );
        check(
            "duplicate mapping key: token, set DuplicateKeyPolicy in Options if acceptable",
            "",
            "duplicate mapping key",
        );
        check("unexpected character: `\\u{0}'", "", "unexpected character");
        check(
            "invalid type: string \"hunter2hunter2\", expected a sequence",
            "",
            "invalid type",
        );
        check(
            "unknown variant `s3cr3t-value`, expected one of",
            "",
            "unknown variant",
        );
        check(
            "missing field `bad field` at line 1, column 1",
            "",
            "missing field",
        );
        check(
            "unclosed quote at line 4, column 12",
            "token: \"abc",
            "unclosed quote",
        );
        // A long word shared with the source is taken as a quotation.
        check(
            "scanner saw supersecretvalue here",
            "token: supersecretvalue",
            "the YAML does not have a kubeconfig's structure",
        );
        check(
            "scanner saw supersecretvalue, here",
            "token: [supersecretvalue]",
            "the YAML does not have a kubeconfig's structure",
        );
        // Part of a longer token is not a quotation.
        check(
            "unclosed quote",
            "token: \"vigil-fake-unclosed-quote",
            "unclosed quote",
        );
        check("", "", "the YAML does not have a kubeconfig's structure");
    }
}
