//! The pure part of the plugin: reading the cluster's parameters into [`Conditions`],
//! evaluating them against an answer, and turning the failed ones into a report that
//! quotes the value seen. No host call happens here, so all of it is unit-tested natively.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;
use vigil_plugin_sdk::{ProbeReport, ReasonClass};

/// The parameter holding the HTTP method.
pub const METHOD: &str = "method";
/// The prefix of a request header's parameter: `header.NAME`.
pub const HEADER_PREFIX: &str = "header.";
/// The parameter listing headers whose value is a credential reference.
pub const CREDENTIAL_HEADERS: &str = "credential-headers";
/// The parameter holding a request body.
pub const BODY: &str = "body";
/// The parameter holding the expected status codes.
pub const STATUS: &str = "status";
/// The parameter holding a substring the body must contain.
pub const BODY_CONTAINS: &str = "body-contains";
/// The parameter holding an RFC 6901 JSON pointer into the body.
pub const JSON_POINTER: &str = "json-pointer";
/// The parameter holding the value expected at the JSON pointer.
pub const JSON_EQUALS: &str = "json-equals";
/// The parameter holding the latency bound, in milliseconds.
pub const MAX_LATENCY_MS: &str = "max-latency-ms";
/// The parameter holding the CA certificates (PEM) to trust for an `https` URL.
pub const CA: &str = "ca";
/// The operator's opt-in to quoting the answer (the start of the body, the JSON value
/// seen) in reports: `true` or `false` (default). Only the plugin's `http.toml` can set
/// it — vigil keeps `operator.*` parameters out of a cluster's own — because a report is
/// read by whoever may read the cluster, and the URL was chosen by whoever registered
/// it: quoting would let that caller read any page vigil can reach.
pub const QUOTE_RESPONSE: &str = "operator.quote-response";

/// Credential headers looked up even when `credential-headers` does not name them.
pub const IMPLICIT_CREDENTIAL_HEADERS: &[&str] = &["Authorization"];

/// The longest quotation of a seen value (body, JSON value), in characters.
const MAX_QUOTED_CHARS: usize = 80;

/// The longest report message, in bytes (the host refuses longer ones).
const MAX_MESSAGE_BYTES: usize = 1000;

/// The longest detail value, in bytes (the host refuses longer ones).
const MAX_DETAIL_BYTES: usize = 250;

/// A set of expected status codes: `200`, `200,204`, `200-299`, `2xx,304`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSet {
    /// Inclusive ranges.
    ranges: Vec<(u16, u16)>,
    /// The text it was read from, for messages.
    text: String,
}

impl StatusSet {
    /// Parses a comma-separated list of codes (`200`), inclusive ranges (`200-299`) and
    /// classes (`2xx`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut ranges = Vec::new();
        for item in text.split(',').map(str::trim) {
            let range =
                if let Some(class) = item.strip_suffix("xx").or_else(|| item.strip_suffix("XX")) {
                    match class.parse::<u16>() {
                        Ok(digit @ 1..=5) if class.len() == 1 => (digit * 100, digit * 100 + 99),
                        _ => return Err(format!("`{item}` is not a status class (1xx to 5xx)")),
                    }
                } else if let Some((low, high)) = item.split_once('-') {
                    let (low, high) = (code(low.trim())?, code(high.trim())?);
                    if low > high {
                        return Err(format!("`{item}` is an empty range"));
                    }
                    (low, high)
                } else {
                    let single = code(item)?;
                    (single, single)
                };
            ranges.push(range);
        }
        Ok(Self {
            ranges,
            text: text.trim().to_owned(),
        })
    }

    /// Whether `status` is expected.
    pub fn contains(&self, status: u16) -> bool {
        self.ranges
            .iter()
            .any(|(low, high)| (*low..=*high).contains(&status))
    }
}

impl Default for StatusSet {
    /// Any 2xx status.
    fn default() -> Self {
        Self {
            ranges: vec![(200, 299)],
            text: "2xx".to_owned(),
        }
    }
}

impl fmt::Display for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn code(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(code @ 100..=599) => Ok(code),
        _ => Err(format!("`{text}` is not an HTTP status code (100 to 599)")),
    }
}

/// A comparison of the JSON value at a pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonCondition {
    /// The RFC 6901 pointer, e.g. `/status` or `/checks/0/ok`.
    pub pointer: String,
    /// The expected value, as given; `None`: the pointer must only exist.
    pub equals: Option<String>,
}

impl JsonCondition {
    /// Whether `seen` is what was expected: equal as JSON when the expected text parses as
    /// JSON (`true`, `3`, `"UP"`, `{"a":1}`), or equal as text to a string value (`UP`).
    fn matches(&self, seen: &Value) -> bool {
        let Some(expected) = &self.equals else {
            return true;
        };
        if let Ok(parsed) = serde_json::from_str::<Value>(expected)
            && &parsed == seen
        {
            return true;
        }
        seen.as_str() == Some(expected.as_str())
    }
}

/// What the answer must satisfy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conditions {
    /// Expected status codes (default: 2xx).
    pub status: StatusSet,
    /// A substring the body must contain.
    pub body_contains: Option<String>,
    /// A JSON pointer comparison on the body.
    pub json: Option<JsonCondition>,
    /// The latency bound, in milliseconds.
    pub max_latency_ms: Option<u32>,
    /// Whether a failed condition quotes what was seen in the body (the operator's
    /// [`QUOTE_RESPONSE`]); otherwise only the status, the latency and whether each
    /// condition held are reported.
    pub quote_response: bool,
}

/// The request to send and the conditions to check, from the plain parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The method, upper case.
    pub method: String,
    /// Headers given inline, by name.
    pub plain_headers: Vec<(String, String)>,
    /// Headers whose value the host must resolve (`header.NAME` for each), besides
    /// [`IMPLICIT_CREDENTIAL_HEADERS`]: the names listed in `credential-headers`.
    pub credential_headers: Vec<String>,
    /// The request body.
    pub body: Option<String>,
    /// The conditions.
    pub conditions: Conditions,
}

/// A parameter that cannot be used: its name and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadParameter {
    /// The parameter's name.
    pub name: String,
    /// Why.
    pub reason: String,
}

impl fmt::Display for BadParameter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "parameter {}: {}", self.name, self.reason)
    }
}

impl Settings {
    /// Reads the cluster's plain parameters (credential references are not among them:
    /// vigil keeps them out of the cluster record).
    pub fn parse(parameters: &BTreeMap<String, String>) -> Result<Self, BadParameter> {
        let bad = |name: &str, reason: String| BadParameter {
            name: name.to_owned(),
            reason,
        };
        let method = match parameters.get(METHOD) {
            None => "GET".to_owned(),
            Some(method) if is_token(method) => method.to_ascii_uppercase(),
            Some(method) => {
                return Err(bad(METHOD, format!("`{method}` is not an HTTP method")));
            }
        };
        let mut plain_headers = Vec::new();
        for (name, value) in parameters {
            if let Some(header) = name.strip_prefix(HEADER_PREFIX) {
                if !is_token(header) {
                    return Err(bad(name, format!("`{header}` is not a header name")));
                }
                if value.contains(['\r', '\n']) {
                    return Err(bad(name, "a header value is one line".to_owned()));
                }
                plain_headers.push((header.to_owned(), value.clone()));
            }
        }
        let mut credential_headers = Vec::new();
        if let Some(list) = parameters.get(CREDENTIAL_HEADERS) {
            for header in list.split(',').map(str::trim).filter(|h| !h.is_empty()) {
                if !is_token(header) {
                    return Err(bad(
                        CREDENTIAL_HEADERS,
                        format!("`{header}` is not a header name"),
                    ));
                }
                credential_headers.push(header.to_owned());
            }
        }
        let status = match parameters.get(STATUS) {
            Some(text) => StatusSet::parse(text).map_err(|reason| bad(STATUS, reason))?,
            None => StatusSet::default(),
        };
        let json = match (parameters.get(JSON_POINTER), parameters.get(JSON_EQUALS)) {
            (Some(pointer), equals) => {
                if !(pointer.is_empty() || pointer.starts_with('/')) {
                    return Err(bad(
                        JSON_POINTER,
                        format!("`{pointer}` is not a JSON pointer (it starts with /)"),
                    ));
                }
                Some(JsonCondition {
                    pointer: pointer.clone(),
                    equals: equals.cloned(),
                })
            }
            (None, Some(_)) => {
                return Err(bad(
                    JSON_EQUALS,
                    format!("it needs {JSON_POINTER}, the value to compare"),
                ));
            }
            (None, None) => None,
        };
        let max_latency_ms = match parameters.get(MAX_LATENCY_MS) {
            Some(text) => Some(
                text.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|ms| *ms > 0)
                    .ok_or_else(|| {
                        bad(
                            MAX_LATENCY_MS,
                            format!("`{text}` is not a number of milliseconds"),
                        )
                    })?,
            ),
            None => None,
        };
        let quote_response = match parameters.get(QUOTE_RESPONSE).map(|v| v.trim()) {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(bad(
                    QUOTE_RESPONSE,
                    format!("`{other}` is neither true nor false"),
                ));
            }
        };
        Ok(Self {
            method,
            plain_headers,
            credential_headers,
            body: parameters.get(BODY).cloned(),
            conditions: Conditions {
                status,
                body_contains: parameters.get(BODY_CONTAINS).cloned(),
                json,
                max_latency_ms,
                quote_response,
            },
        })
    }

    /// The headers whose value the host resolves: those named by `credential-headers` and
    /// the implicit ones, minus those given inline, each once.
    pub fn referenced_headers(&self) -> Vec<(String, bool)> {
        let inline = |name: &str| {
            self.plain_headers
                .iter()
                .any(|(header, _)| header.eq_ignore_ascii_case(name))
        };
        let mut names: Vec<(String, bool)> = Vec::new();
        let listed = self.credential_headers.iter().map(|h| (h.as_str(), true));
        let implicit = IMPLICIT_CREDENTIAL_HEADERS.iter().map(|h| (*h, false));
        for (name, required) in listed.chain(implicit) {
            if inline(name) || names.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
                continue;
            }
            names.push((name.to_owned(), required));
        }
        names
    }
}

/// An HTTP token (method or header name), RFC 9110.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// What the server answered.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// The status.
    pub status: u16,
    /// The body.
    pub body: &'a [u8],
    /// How long the request took.
    pub latency_ms: u32,
}

/// One condition that did not hold, with what was expected and the value seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// Which condition: `status`, `body-contains`, `json`, `max-latency-ms`.
    pub condition: &'static str,
    /// The reason class it stands for.
    pub class: ReasonClass,
    /// What was expected, e.g. `2xx` or `≤ 500 ms`.
    pub expected: String,
    /// The value seen, quoted and redacted; `None` when the answer is not quoted.
    pub seen: Option<String>,
}

/// What a report says of a JSON value or body it does not quote.
const NOT_QUOTED: &str = "another value";

impl Failed {
    /// One line, e.g. `status 503, expected 2xx`.
    fn describe(&self) -> String {
        let seen = self.seen.as_deref().unwrap_or(NOT_QUOTED);
        match (self.condition, &self.seen) {
            ("status", _) => format!("status {seen}, expected {}", self.expected),
            ("body-contains", Some(seen)) => format!(
                "the body does not contain {}; it starts {seen}",
                self.expected
            ),
            ("body-contains", None) => format!("the body does not contain {}", self.expected),
            ("json", _) => format!("JSON {}, saw {seen}", self.expected),
            _ => format!("latency {seen}, expected {}", self.expected),
        }
    }

    /// The `failed.CONDITION` detail.
    fn detail(&self) -> String {
        match &self.seen {
            Some(seen) => format!("expected {}, saw {seen}", self.expected),
            None if self.condition == "body-contains" => {
                format!("expected {}, not found", self.expected)
            }
            None => format!("expected {}, saw {NOT_QUOTED}", self.expected),
        }
    }
}

/// Checks every condition against what the server answered. Status codes and latencies
/// are always reported; what the body holds only with [`Conditions::quote_response`],
/// and then with `secrets` (the credential headers' values) replaced by `***` wherever a
/// seen value would quote them.
pub fn evaluate(
    conditions: &Conditions,
    observed: &Observed<'_>,
    secrets: &[&[u8]],
) -> Vec<Failed> {
    let mut failed = Vec::new();
    if !conditions.status.contains(observed.status) {
        failed.push(Failed {
            condition: "status",
            class: match observed.status {
                401 | 403 => ReasonClass::Unauthorized,
                500..=599 => ReasonClass::ServerError,
                _ => ReasonClass::BadResponse,
            },
            expected: conditions.status.to_string(),
            seen: Some(observed.status.to_string()),
        });
    }
    if let Some(needle) = &conditions.body_contains
        && !contains(observed.body, needle.as_bytes())
    {
        failed.push(Failed {
            condition: "body-contains",
            class: ReasonClass::BadResponse,
            expected: quote(needle.as_bytes(), &[]),
            seen: conditions
                .quote_response
                .then(|| quote(observed.body, secrets)),
        });
    }
    if let Some(json) = &conditions.json {
        let expected = match &json.equals {
            Some(value) => format!("{} = {}", json.pointer, quote(value.as_bytes(), &[])),
            None => format!("{} present", json.pointer),
        };
        // Whether the body is JSON and has a value at the pointer are what the condition
        // asks (one bit each); the parser's error and the value are quoted only on opt-in.
        let quote = conditions.quote_response;
        let seen = match serde_json::from_slice::<Value>(observed.body) {
            Err(error) if quote => Some(Some(format!("a body that is not JSON ({error})"))),
            Err(_) => Some(Some("a body that is not JSON".to_owned())),
            Ok(document) => match document.pointer(&json.pointer) {
                None => Some(Some(format!("no value at {}", json.pointer))),
                Some(value) if json.matches(value) => None,
                Some(value) => Some(quote.then(|| clip(value.to_string().as_bytes(), secrets))),
            },
        };
        if let Some(seen) = seen {
            failed.push(Failed {
                condition: "json",
                class: ReasonClass::BadResponse,
                expected,
                seen,
            });
        }
    }
    if let Some(bound) = conditions.max_latency_ms
        && observed.latency_ms > bound
    {
        failed.push(Failed {
            condition: "max-latency-ms",
            class: ReasonClass::Timeout,
            expected: format!("at most {bound} ms"),
            seen: Some(format!("{} ms", observed.latency_ms)),
        });
    }
    failed
}

/// The probe's report: healthy when nothing failed; else credentials-rejected for an
/// unexpected 401/403, or unhealthy with the class of the first failed condition. Every
/// failed condition is in the message and in a `failed.CONDITION` detail.
pub fn report(observed: &Observed<'_>, failed: &[Failed]) -> ProbeReport {
    let latency = observed.latency_ms;
    let base = match failed.first() {
        None => ProbeReport::healthy(latency)
            .with_message(format!("answered {} in {latency} ms", observed.status)),
        Some(first) => {
            let message = one_line(
                &failed
                    .iter()
                    .map(Failed::describe)
                    .collect::<Vec<_>>()
                    .join("; "),
                MAX_MESSAGE_BYTES,
            );
            if first.class == ReasonClass::Unauthorized {
                ProbeReport::credentials_rejected(message, latency)
            } else {
                ProbeReport::unhealthy(first.class, message, latency)
            }
        }
    };
    let mut report = base
        .with_detail("status", observed.status.to_string())
        .with_detail("latency-ms", latency.to_string());
    for failure in failed {
        report = report.with_detail(
            format!("failed.{}", failure.condition),
            one_line(&failure.detail(), MAX_DETAIL_BYTES),
        );
    }
    report
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// `"TEXT"`: [`clip`] in quotes.
fn quote(bytes: &[u8], secrets: &[&[u8]]) -> String {
    format!("\"{}\"", clip(bytes, secrets))
}

/// The start of `bytes` as one line of text, at most [`MAX_QUOTED_CHARS`] characters (and
/// `…` when cut), with every secret replaced by `***`.
fn clip(bytes: &[u8], secrets: &[&[u8]]) -> String {
    let mut redacted = bytes.to_vec();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        redacted = replace_all(&redacted, secret, b"***");
    }
    let text = String::from_utf8_lossy(&redacted);
    let mut quoted: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_QUOTED_CHARS)
        .collect();
    if text.chars().count() > MAX_QUOTED_CHARS {
        quoted.push('…');
    }
    quoted
}

fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}

/// `text` on one line, cut at a character boundary to at most `max` bytes.
fn one_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_plugin_sdk::Verdict;

    fn parameters(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        Settings::parse(&parameters(pairs)).expect("valid parameters")
    }

    /// Evaluates `pairs` (with the operator's opt-in to quoting) against an answer;
    /// returns (condition, class, seen) of each failure.
    fn check(
        pairs: &[(&str, &str)],
        status: u16,
        body: &str,
        latency_ms: u32,
    ) -> Vec<(&'static str, ReasonClass, String)> {
        let mut pairs = pairs.to_vec();
        pairs.push((QUOTE_RESPONSE, "true"));
        check_seen(&pairs, status, body, latency_ms)
            .into_iter()
            .map(|(condition, class, seen)| (condition, class, seen.expect("quoted")))
            .collect()
    }

    fn check_seen(
        pairs: &[(&str, &str)],
        status: u16,
        body: &str,
        latency_ms: u32,
    ) -> Vec<(&'static str, ReasonClass, Option<String>)> {
        let observed = Observed {
            status,
            body: body.as_bytes(),
            latency_ms,
        };
        evaluate(&settings(pairs).conditions, &observed, &[b"s3cr3t"])
            .into_iter()
            .map(|f| (f.condition, f.class, f.seen))
            .collect()
    }

    #[test]
    fn the_answer_is_quoted_only_on_the_operators_opt_in() {
        use ReasonClass as R;
        let body = r#"{"status":"DOWN","token":"t0p-s3cret"}"#;
        let pairs = [
            ("status", "200"),
            ("body-contains", "UP"),
            ("json-pointer", "/token"),
            ("json-equals", "x"),
            ("max-latency-ms", "10"),
        ];
        assert_eq!(
            check_seen(&pairs, 503, body, 20),
            [
                ("status", R::ServerError, Some("503".to_owned())),
                ("body-contains", R::BadResponse, None),
                ("json", R::BadResponse, None),
                ("max-latency-ms", R::Timeout, Some("20 ms".to_owned())),
            ]
        );
        let observed = Observed {
            status: 503,
            body: body.as_bytes(),
            latency_ms: 20,
        };
        let closed = report(
            &observed,
            &evaluate(&settings(&pairs).conditions, &observed, &[]),
        );
        let text = format!("{} {:?}", closed.message, closed.details);
        assert!(
            !text.contains("t0p-s3cret") && !text.contains("DOWN"),
            "{text}"
        );
        assert!(
            text.contains("status 503") && text.contains("latency 20 ms"),
            "{text}"
        );
        let mut open = pairs.to_vec();
        open.push((QUOTE_RESPONSE, "true"));
        let quoted = report(
            &observed,
            &evaluate(&settings(&open).conditions, &observed, &[]),
        );
        assert!(quoted.message.contains("t0p-s3cret"), "{}", quoted.message);
        let not_json = check_seen(&[("json-pointer", "/a")], 200, "<html>", 1);
        assert_eq!(not_json[0].2.as_deref(), Some("a body that is not JSON"));
        assert!(Settings::parse(&parameters(&[(QUOTE_RESPONSE, "yes")])).is_err());
    }

    #[test]
    fn status_sets_read_codes_ranges_and_classes() {
        let set = StatusSet::parse("200, 204,300-302,4xx").unwrap();
        for (status, expected) in [
            (200, true),
            (204, true),
            (201, false),
            (301, true),
            (303, false),
            (404, true),
            (500, false),
        ] {
            assert_eq!(set.contains(status), expected, "{status}");
        }
        assert!(StatusSet::default().contains(299) && !StatusSet::default().contains(300));
        for bad in ["", "abc", "99", "600", "300-200", "6xx", "20x", "2xxx"] {
            assert!(StatusSet::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn parameters_are_read_and_bad_ones_named() {
        let read = settings(&[
            ("method", "post"),
            ("header.X-Env", "prod"),
            ("credential-headers", "X-Api-Key, Authorization"),
            ("body", "{}"),
            ("json-pointer", "/status"),
            ("json-equals", "UP"),
            ("max-latency-ms", "500"),
            ("unrelated", "kept out"),
        ]);
        assert_eq!(read.method, "POST");
        assert_eq!(
            read.plain_headers,
            [("X-Env".to_owned(), "prod".to_owned())]
        );
        assert_eq!(read.body.as_deref(), Some("{}"));
        assert_eq!(read.conditions.max_latency_ms, Some(500));
        assert_eq!(
            read.referenced_headers(),
            [
                ("X-Api-Key".to_owned(), true),
                ("Authorization".to_owned(), true)
            ]
        );
        assert_eq!(
            settings(&[("header.authorization", "Bearer inline")]).referenced_headers(),
            [],
            "a header given inline is not looked up"
        );
        assert_eq!(
            settings(&[]).referenced_headers(),
            [("Authorization".to_owned(), false)]
        );
        for (pairs, name) in [
            (&[("method", "GE T")][..], "method"),
            (&[("header.Bad Name", "x")][..], "header.Bad Name"),
            (&[("header.X", "a\nb")][..], "header.X"),
            (&[("credential-headers", "a b")][..], "credential-headers"),
            (&[("status", "ok")][..], "status"),
            (&[("json-equals", "1")][..], "json-equals"),
            (&[("json-pointer", "status")][..], "json-pointer"),
            (&[("max-latency-ms", "fast")][..], "max-latency-ms"),
            (&[("max-latency-ms", "0")][..], "max-latency-ms"),
        ] {
            let error = Settings::parse(&parameters(pairs)).expect_err(name);
            assert_eq!(error.name, name);
            assert!(
                error
                    .to_string()
                    .starts_with(&format!("parameter {name}: "))
            );
        }
    }

    #[test]
    fn each_condition_passes_and_fails_with_the_value_seen() {
        use ReasonClass as R;
        let none: Vec<(&str, R, String)> = Vec::new();
        // Status: default 2xx; the class follows the status seen.
        assert_eq!(check(&[], 204, "", 1), none);
        assert_eq!(
            check(&[], 503, "", 1),
            [("status", R::ServerError, "503".into())]
        );
        assert_eq!(
            check(&[], 302, "", 1),
            [("status", R::BadResponse, "302".into())]
        );
        assert_eq!(
            check(&[], 401, "", 1),
            [("status", R::Unauthorized, "401".into())]
        );
        assert_eq!(check(&[("status", "401")], 401, "", 1), none);
        // Body substring, quoting the body's start with the secret redacted.
        assert_eq!(check(&[("body-contains", "ok")], 200, "all ok", 1), none);
        assert_eq!(
            check(&[("body-contains", "ok")], 200, "down, key s3cr3t", 1),
            [("body-contains", R::BadResponse, "\"down, key ***\"".into())]
        );
        // JSON pointer: strings by text, other values as JSON; missing and non-JSON named.
        let up = [("json-pointer", "/status"), ("json-equals", "UP")];
        assert_eq!(check(&up, 200, r#"{"status":"UP"}"#, 1), none);
        assert_eq!(
            check(&up, 200, r#"{"status":"DOWN"}"#, 1),
            [("json", R::BadResponse, "\"DOWN\"".into())]
        );
        assert_eq!(
            check(&up, 200, r#"{"state":"UP"}"#, 1),
            [("json", R::BadResponse, "no value at /status".into())]
        );
        let seen = &check(&up, 200, "<html>", 1)[0].2;
        assert!(seen.starts_with("a body that is not JSON"), "{seen}");
        let count = [("json-pointer", "/checks/1/ok"), ("json-equals", "true")];
        assert_eq!(
            check(&count, 200, r#"{"checks":[{"ok":false},{"ok":true}]}"#, 1),
            none
        );
        assert_eq!(
            check(&count, 200, r#"{"checks":[{"ok":true},{"ok":false}]}"#, 1),
            [("json", R::BadResponse, "false".into())]
        );
        assert_eq!(
            check(&[("json-pointer", "/a")], 200, r#"{"a":null}"#, 1),
            none
        );
        // Latency.
        assert_eq!(check(&[("max-latency-ms", "100")], 200, "", 100), none);
        assert_eq!(
            check(&[("max-latency-ms", "100")], 200, "", 101),
            [("max-latency-ms", R::Timeout, "101 ms".into())]
        );
    }

    #[test]
    fn reports_name_every_failed_condition_and_pick_the_verdict() {
        let conditions = settings(&[
            ("body-contains", "ok"),
            ("max-latency-ms", "10"),
            (QUOTE_RESPONSE, "true"),
        ])
        .conditions;
        let observed = Observed {
            status: 500,
            body: b"boom",
            latency_ms: 25,
        };
        let failed = evaluate(&conditions, &observed, &[]);
        let report = report(&observed, &failed);
        assert_eq!(report.verdict, Verdict::Unhealthy);
        assert_eq!(report.reason, Some(ReasonClass::ServerError));
        assert_eq!(
            report.message,
            "status 500, expected 2xx; the body does not contain \"ok\"; it starts \"boom\"; \
             latency 25 ms, expected at most 10 ms"
        );
        let detail = |key: &str| {
            report
                .details
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(detail("status").as_deref(), Some("500"));
        assert_eq!(
            detail("failed.max-latency-ms").as_deref(),
            Some("expected at most 10 ms, saw 25 ms")
        );

        let observed = Observed {
            status: 403,
            body: b"",
            latency_ms: 3,
        };
        let rejected = report_of(&Conditions::default(), &observed);
        assert_eq!(rejected.verdict, Verdict::CredentialsRejected);
        let healthy = report_of(
            &Conditions::default(),
            &Observed {
                status: 200,
                ..observed
            },
        );
        assert_eq!((healthy.verdict, healthy.latency_ms), (Verdict::Healthy, 3));
    }

    fn report_of(conditions: &Conditions, observed: &Observed<'_>) -> ProbeReport {
        report(observed, &evaluate(conditions, observed, &[]))
    }

    #[test]
    fn quotations_are_short_single_lines() {
        let long = "x".repeat(500) + "\n";
        let quoted = quote(long.as_bytes(), &[]);
        assert_eq!(quoted.chars().count(), MAX_QUOTED_CHARS + 3);
        assert!(!quoted.contains('\n'));
        assert!(one_line(&"é".repeat(600), 1000).len() <= 1000);
    }
}
