//! Label and field selectors, parsed and matched as `k8s.io/apimachinery` does, and label
//! selectors printed back in its canonical form (what `Scale.status.selector` and the
//! `SELECTOR` column show).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as ApiLabelSelector;

/// A parsed label selector: requirements that must all hold, sorted by key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    operator: Operator,
    /// Sorted and deduplicated, as apimachinery keeps them.
    values: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operator {
    Exists,
    DoesNotExist,
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    GreaterThan,
    LessThan,
}

impl LabelSelector {
    /// Parses the `labelSelector` query syntax: `a=b`, `a==b`, `a!=b`, `a in (b,c)`,
    /// `a notin (b)`, `a`, `!a`, `a>1`, `a<1`, separated by commas. The error reads like the
    /// real server's.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let tokens = lex(text)?;
        let mut parser = Parser {
            tokens,
            position: 0,
        };
        let mut requirements = parser.selector()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    /// The selector of a `spec.selector` (`matchLabels` and `matchExpressions`), as
    /// `metav1.LabelSelectorAsSelector` builds it. An empty selector selects everything.
    pub(crate) fn from_api(selector: &ApiLabelSelector) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::new(
                key,
                Operator::Equals,
                vec![value.clone()],
            )?);
        }
        for expression in selector.match_expressions.iter().flatten() {
            let operator = match expression.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            };
            requirements.push(Requirement::new(
                &expression.key,
                operator,
                expression.values.clone().unwrap_or_default(),
            )?);
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    /// The selector matching exactly the labels of `map` (a replication controller's selector).
    pub(crate) fn from_map(map: &BTreeMap<String, String>) -> Self {
        let requirements = map
            .iter()
            .map(|(key, value)| Requirement {
                key: key.clone(),
                operator: Operator::Equals,
                values: vec![value.clone()],
            })
            .collect();
        Self { requirements }
    }

    /// Whether this selector selects everything.
    pub(crate) fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements
            .iter()
            .all(|requirement| requirement.matches(labels))
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, requirement) in self.requirements.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

impl Requirement {
    /// Checks the key, the values and their count for the operator, as `labels.NewRequirement`.
    fn new(key: &str, operator: Operator, mut values: Vec<String>) -> Result<Self, String> {
        validate_key(key)?;
        let count_ok = match operator {
            Operator::In | Operator::NotIn => !values.is_empty(),
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => values.len() == 1,
            Operator::Exists | Operator::DoesNotExist => values.is_empty(),
            Operator::GreaterThan | Operator::LessThan => values.len() == 1,
        };
        if !count_ok {
            return Err(format!(
                "values: Invalid value: {values:?}: wrong number of values for {key:?}"
            ));
        }
        for value in &values {
            if matches!(operator, Operator::GreaterThan | Operator::LessThan) {
                value
                    .parse::<i64>()
                    .map_err(|_| format!("values[0]: Invalid value: {value:?}: for 'Gt', 'Lt' operators, the value must be an integer"))?;
            } else {
                validate_value(value)?;
            }
        }
        values.sort();
        values.dedup();
        Ok(Self {
            key: key.to_owned(),
            operator,
            values,
        })
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        let listed = |value: &String| self.values.iter().any(|listed| listed == value);
        match self.operator {
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Equals | Operator::DoubleEquals | Operator::In => value.is_some_and(listed),
            // A label that is absent is "not equal" to anything, as in apimachinery.
            Operator::NotEquals | Operator::NotIn => !value.is_some_and(listed),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(actual), Some(bound)) = (
                    value.and_then(|value| value.parse::<i64>().ok()),
                    self.values
                        .first()
                        .and_then(|bound| bound.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    actual > bound
                } else {
                    actual < bound
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = &self.key;
        let first = self.values.first().map_or("", String::as_str);
        match self.operator {
            Operator::Exists => write!(f, "{key}"),
            Operator::DoesNotExist => write!(f, "!{key}"),
            Operator::Equals => write!(f, "{key}={first}"),
            Operator::DoubleEquals => write!(f, "{key}=={first}"),
            Operator::NotEquals => write!(f, "{key}!={first}"),
            Operator::GreaterThan => write!(f, "{key}>{first}"),
            Operator::LessThan => write!(f, "{key}<{first}"),
            Operator::In => write!(f, "{key} in ({})", self.values.join(",")),
            Operator::NotIn => write!(f, "{key} notin ({})", self.values.join(",")),
        }
    }
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters.
fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|prefix| {
        !prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|label| {
                !label.is_empty()
                    && label.bytes().all(|byte| {
                        byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-'
                    })
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
    });
    if !prefix_ok || name.is_empty() || !is_label_name(name) {
        return Err(format!(
            "key: Invalid value: {key:?}: name part must consist of alphanumeric characters, '-', '_' or '.', \
             and must start and end with an alphanumeric character"
        ));
    }
    Ok(())
}

/// A label value: empty, or a name of at most 63 characters.
fn validate_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(format!(
            "values[0]: Invalid value: {value:?}: a valid label must be an empty string or consist of \
             alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        ))
    }
}

fn is_label_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|&byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'))
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Identifier(String),
    DoesNotExist,
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    OpenParenthesis,
    CloseParenthesis,
    Comma,
    GreaterThan,
    LessThan,
    End,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Identifier(name) => name,
            Self::DoesNotExist => "!",
            Self::Equals => "=",
            Self::DoubleEquals => "==",
            Self::NotEquals => "!=",
            Self::In => "in",
            Self::NotIn => "notin",
            Self::OpenParenthesis => "(",
            Self::CloseParenthesis => ")",
            Self::Comma => ",",
            Self::GreaterThan => ">",
            Self::LessThan => "<",
            Self::End => "end of string",
        })
    }
}

fn is_special(character: char) -> bool {
    matches!(character, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn symbol(text: &str) -> Option<Token> {
    Some(match text {
        "!" => Token::DoesNotExist,
        "=" => Token::Equals,
        "==" => Token::DoubleEquals,
        "!=" => Token::NotEquals,
        "(" => Token::OpenParenthesis,
        ")" => Token::CloseParenthesis,
        "," => Token::Comma,
        ">" => Token::GreaterThan,
        "<" => Token::LessThan,
        _ => return None,
    })
}

/// Splits a selector into tokens, taking the longest symbol at each point (`!=` before `!`).
fn lex(text: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start_matches([' ', '\t', '\r', '\n']);
        let Some(first) = rest.chars().next() else {
            tokens.push(Token::End);
            return Ok(tokens);
        };
        if is_special(first) {
            let two = rest.get(..2).and_then(symbol);
            let (token, length) = match two {
                Some(token) => (token, 2),
                None => match rest.get(..1).and_then(symbol) {
                    Some(token) => (token, 1),
                    None => return Err(format!("error expected: keyword found '{first}'")),
                },
            };
            tokens.push(token);
            rest = &rest[length..];
        } else {
            let end = rest
                .find(|c: char| c.is_whitespace() || is_special(c))
                .unwrap_or(rest.len());
            let word = &rest[..end];
            tokens.push(match word {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Identifier(word.to_owned()),
            });
            rest = &rest[end..];
        }
    }
}

/// The recursive-descent parser of apimachinery's `labels.Parse`, with its error messages.
struct Parser {
    tokens: Vec<Token>,
    position: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        self.tokens.get(self.position).unwrap_or(&Token::End)
    }

    fn next(&mut self) -> Token {
        let token = self.peek().clone();
        self.position += 1;
        token
    }

    fn selector(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            match self.peek() {
                Token::Identifier(_) | Token::DoesNotExist => {
                    requirements.push(self.requirement()?);
                    match self.next() {
                        Token::End => return Ok(requirements),
                        Token::Comma => {
                            if !matches!(self.peek(), Token::Identifier(_) | Token::DoesNotExist) {
                                return Err(format!(
                                    "found '{}', expected: identifier after ','",
                                    self.peek()
                                ));
                            }
                        }
                        other => {
                            return Err(format!(
                                "found '{other}', expected: ',' or 'end of string'"
                            ));
                        }
                    }
                }
                Token::End => return Ok(requirements),
                other => {
                    return Err(format!(
                        "found '{other}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let mut operator = None;
        let mut token = self.next();
        if token == Token::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            token = self.next();
        }
        let Token::Identifier(key) = token else {
            return Err(format!("found '{token}', expected: identifier"));
        };
        if matches!(self.peek(), Token::End | Token::Comma) {
            let operator = operator.unwrap_or(Operator::Exists);
            return Requirement::new(&key, operator, Vec::new()).map_err(unable_to_parse);
        }
        if operator.is_some() {
            // `!key` must stand alone.
            return Err(format!(
                "found '{}', expected: ',' or 'end of string'",
                self.peek()
            ));
        }
        let operator = match self.next() {
            Token::In => Operator::In,
            Token::NotIn => Operator::NotIn,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::NotEquals => Operator::NotEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            other => {
                return Err(format!(
                    "found '{other}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        };
        let values = if matches!(operator, Operator::In | Operator::NotIn) {
            self.set()?
        } else {
            self.exact()?
        };
        Requirement::new(&key, operator, values).map_err(unable_to_parse)
    }

    /// `(a,b,…)`; an empty entry stands for the empty value.
    fn set(&mut self) -> Result<Vec<String>, String> {
        let open = self.next();
        if open != Token::OpenParenthesis {
            return Err(format!("found '{open}', expected: '('"));
        }
        let mut values = Vec::new();
        if *self.peek() == Token::CloseParenthesis {
            self.next();
            values.push(String::new());
            return Ok(values);
        }
        loop {
            match self.next() {
                Token::Identifier(value) => {
                    values.push(value);
                    // The comma is left for the next turn, which handles `a,)` and `a,,b`.
                    match self.peek() {
                        Token::Comma => {}
                        Token::CloseParenthesis => {
                            self.next();
                            return Ok(values);
                        }
                        other => return Err(format!("found '{other}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.push(String::new());
                    }
                    match self.peek() {
                        Token::CloseParenthesis => {
                            self.next();
                            values.push(String::new());
                            return Ok(values);
                        }
                        Token::Comma => {
                            self.next();
                            values.push(String::new());
                        }
                        _ => {}
                    }
                }
                other => return Err(format!("found '{other}', expected: ',', or identifier")),
            }
        }
    }

    /// The value after `=`, `==`, `!=`, `>` or `<`; nothing there means the empty value.
    fn exact(&mut self) -> Result<Vec<String>, String> {
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(vec![String::new()]);
        }
        match self.next() {
            Token::Identifier(value) => Ok(vec![value]),
            other => Err(format!("found '{other}', expected: identifier")),
        }
    }
}

#[allow(clippy::needless_pass_by_value)] // Shaped for `map_err`.
fn unable_to_parse(error: String) -> String {
    format!("unable to parse requirement: {error}")
}

/// A parsed field selector: `field=value`, `field==value` and `field!=value` terms that must
/// all hold. Which fields a kind supports is the caller's business.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    terms: Vec<FieldTerm>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct FieldTerm {
    field: String,
    equal: bool,
    value: String,
}

impl FieldSelector {
    /// Parses the `fieldSelector` query syntax, with `\,`, `\=` and `\\` escapes in values.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for term in split_unescaped(text, ',') {
            if term.is_empty() {
                continue;
            }
            let (field, equal, value) = split_field_term(term)
                .ok_or_else(|| format!("invalid selector: '{term}'; can't understand '{term}'"))?;
            terms.push(FieldTerm {
                field: field.to_owned(),
                equal,
                value: unescape(value)?,
            });
        }
        Ok(Self { terms })
    }

    /// The fields this selector reads.
    pub(crate) fn fields(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|term| term.field.as_str())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether an object whose selectable fields are `fields` matches; a field it does not have
    /// reads as empty.
    pub(crate) fn matches(&self, fields: &[(&'static str, String)]) -> bool {
        self.terms.iter().all(|term| {
            let actual = fields
                .iter()
                .find(|(name, _)| *name == term.field)
                .map_or("", |(_, value)| value.as_str());
            (actual == term.value) == term.equal
        })
    }
}

/// Splits at `separator` where it is not escaped by a backslash.
fn split_unescaped(text: &str, separator: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (index, character) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if character == '\\' {
            escaped = true;
        } else if character == separator {
            parts.push(&text[start..index]);
            start = index + 1;
        }
    }
    parts.push(&text[start..]);
    parts
}

/// Finds the first unescaped operator (`!=`, `==` or `=`) in a term.
fn split_field_term(term: &str) -> Option<(&str, bool, &str)> {
    let mut escaped = false;
    for (index, character) in term.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        if character == '\\' {
            escaped = true;
            continue;
        }
        let rest = &term[index..];
        for (operator, equal) in [("!=", false), ("==", true), ("=", true)] {
            if let Some(value) = rest.strip_prefix(operator) {
                return Some((&term[..index], equal, value));
            }
        }
    }
    None
}

fn unescape(value: &str) -> Result<String, String> {
    let mut unescaped = String::with_capacity(value.len());
    let mut characters = value.chars();
    while let Some(character) = characters.next() {
        if character == '\\' {
            match characters.next() {
                Some(escaped @ ('\\' | ',' | '=')) => unescaped.push(escaped),
                _ => {
                    return Err(format!(
                        "invalid field selector: invalid escape sequence in {value:?}"
                    ));
                }
            }
        } else {
            unescaped.push(character);
        }
    }
    Ok(unescaped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[track_caller]
    fn check(selector: &str, pairs: &[(&str, &str)], expected: bool) {
        let parsed =
            LabelSelector::parse(selector).unwrap_or_else(|error| panic!("{selector:?}: {error}"));
        assert_eq!(
            parsed.matches(&labels(pairs)),
            expected,
            "{selector:?} on {pairs:?}"
        );
    }

    #[test]
    fn label_selector_semantics() {
        check("", &[], true);
        check("app=web", &[("app", "web")], true);
        check("app==web", &[("app", "db")], false);
        check("app!=web", &[], true);
        check("app!=web", &[("app", "web")], false);
        check("tier in (frontend, backend)", &[("tier", "backend")], true);
        check("tier in (frontend,backend)", &[], false);
        check("tier notin (frontend)", &[], true);
        check("tier notin (frontend)", &[("tier", "frontend")], false);
        check("app", &[("app", "")], true);
        check("!app", &[("app", "")], false);
        check("!app,tier", &[("tier", "x")], true);
        check("rank>2", &[("rank", "3")], true);
        check("rank<2", &[("rank", "x")], false);
        check("app=", &[("app", "")], true);
        check("tier in (a,)", &[("tier", "")], true);
    }

    #[test]
    fn label_selector_errors() {
        for bad in [
            "app in web",
            "app=web,",
            "!app=web",
            "app in (a",
            "=web",
            "app=(a)",
            "a b",
            "rank>x",
        ] {
            assert!(
                LabelSelector::parse(bad).is_err(),
                "{bad:?} should not parse"
            );
        }
    }

    #[test]
    fn canonical_form_sorts_keys_and_values() {
        let parsed = LabelSelector::parse("tier notin (b,a), app=web, !gone, here").unwrap();
        assert_eq!(parsed.to_string(), "app=web,!gone,here,tier notin (a,b)");
    }

    #[test]
    fn field_selectors() {
        let selector = FieldSelector::parse("metadata.name=web\\,1,status.phase!=Failed").unwrap();
        let fields = [
            ("metadata.name", "web,1".to_owned()),
            ("status.phase", "Running".to_owned()),
        ];
        assert!(selector.matches(&fields));
        assert_eq!(
            selector.fields().collect::<Vec<_>>(),
            ["metadata.name", "status.phase"]
        );
        assert!(FieldSelector::parse("metadata.name").is_err());
        assert!(FieldSelector::parse("").unwrap().is_empty());
    }
}
