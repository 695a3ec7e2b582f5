//! Where a value is in a YAML document, for messages: the document's shape read with the
//! parser's positions, so that a problem found by serde can name the path to the value at
//! fault (`spec.selector.matchLabels.enabled`), its line, and what it is — and a problem the
//! parser reports at a line and column can name the path that leads there.
//!
//! Only the shape is kept: mappings, lists and the kind of each scalar, never a scalar's
//! text (it could be a secret), but a boolean's value (what YAML makes of an unquoted `y`).

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// One step of a path to a value: a mapping key or a list index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A mapping key (a non-text key as its scalar's text).
    Key(String),
    /// A list index, counting from 0.
    Index(usize),
}

/// A path as messages show it: `spec.containers[0].name`. A key that is not plain text
/// (longer than 64 characters, or other than letters, digits and `-_./`) is shown as `…`:
/// the path of a document that is not what it should be may run through anything.
pub fn show(path: &[Step]) -> String {
    let mut shown = String::new();
    for step in path {
        match step {
            Step::Key(key) => {
                if !shown.is_empty() {
                    shown.push('.');
                }
                let plain = key.len() <= 64
                    && key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
                shown.push_str(if plain { key } else { "…" });
            }
            Step::Index(index) => shown.push_str(&format!("[{index}]")),
        }
    }
    shown
}

/// What a YAML node is.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A mapping, with its entries in order.
    Mapping(Vec<(String, Node)>),
    /// A list.
    List(Vec<Node>),
    /// A boolean (`true`, and YAML 1.1's `y`, `yes`, `on`…).
    Boolean(bool),
    /// A number.
    Number,
    /// A string.
    String,
    /// Null (`~`, `null`, or nothing).
    Null,
}

/// A YAML node: where it starts (line and column, counting from 1) and what it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Its line.
    pub line: u64,
    /// Its column.
    pub column: u64,
    /// What it is.
    pub kind: Kind,
}

impl Node {
    /// The shape of the one YAML document in `text`; `None` when the parser cannot read it.
    pub fn read(text: &str) -> Option<Self> {
        serde_saphyr::from_str(text).ok()
    }

    /// The node at `path` below this one.
    pub fn at(&self, path: &[Step]) -> Option<&Self> {
        path.iter()
            .try_fold(self, |node, step| match (step, &node.kind) {
                (Step::Key(key), Kind::Mapping(entries)) => {
                    entries.iter().find(|(name, _)| name == key).map(|(_, n)| n)
                }
                (Step::Index(index), Kind::List(items)) => items.get(*index),
                _ => None,
            })
    }

    /// The path to the node that starts at `line` and `column`, the deepest one when several
    /// do (a mapping and its first key).
    pub fn path_to(&self, line: u64, column: u64) -> Option<Vec<Step>> {
        let children: Vec<(Step, &Self)> = match &self.kind {
            Kind::Mapping(entries) => entries
                .iter()
                .map(|(key, node)| (Step::Key(key.clone()), node))
                .collect(),
            Kind::List(items) => items
                .iter()
                .enumerate()
                .map(|(index, node)| (Step::Index(index), node))
                .collect(),
            _ => Vec::new(),
        };
        for (step, child) in children {
            if let Some(mut path) = child.path_to(line, column) {
                path.insert(0, step);
                return Some(path);
            }
        }
        (self.line == line && self.column == column).then(Vec::new)
    }

    /// What the node is, for a message: `the boolean true`, `a string`, `a list`…
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Mapping(_) => "a mapping".to_owned(),
            Kind::List(_) => "a list".to_owned(),
            Kind::Boolean(value) => format!("the boolean {value}"),
            Kind::Number => "a number".to_owned(),
            Kind::String => "a string".to_owned(),
            Kind::Null => "null".to_owned(),
        }
    }
}

impl<'de> de::Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = serde_saphyr::Spanned::<Kind>::deserialize(deserializer)?;
        Ok(Self {
            line: spanned.referenced.line(),
            column: spanned.referenced.column(),
            kind: spanned.value,
        })
    }
}

impl<'de> de::Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KindVisitor)
    }
}

/// A mapping key as text, whatever scalar it is.
struct Key(String);

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(Self(match value {
            serde_json::Value::String(text) => text,
            other => other.to_string(),
        }))
    }
}

struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = Kind;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        let mut entries = Vec::new();
        while let Some(Key(key)) = map.next_key()? {
            entries.push((key, map.next_value()?));
        }
        Ok(Kind::Mapping(entries))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Kind::List(items))
    }

    fn visit_bool<E>(self, value: bool) -> Result<Kind, E> {
        Ok(Kind::Boolean(value))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Kind, E> {
        Ok(Kind::Number)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Kind, E> {
        Ok(Kind::Number)
    }

    fn visit_i128<E>(self, _: i128) -> Result<Kind, E> {
        Ok(Kind::Number)
    }

    fn visit_u128<E>(self, _: u128) -> Result<Kind, E> {
        Ok(Kind::Number)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Kind, E> {
        Ok(Kind::Number)
    }

    fn visit_str<E>(self, _: &str) -> Result<Kind, E> {
        Ok(Kind::String)
    }

    fn visit_bytes<E>(self, _: &[u8]) -> Result<Kind, E> {
        Ok(Kind::String)
    }

    fn visit_unit<E>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }

    fn visit_none<E>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Kind, D::Error> {
        deserializer.deserialize_any(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_know_their_place_and_kind_but_not_their_text() {
        let text = "a:\n  b: [1, y]\n  c: {d: vigil-fake-secret}\n";
        let root = Node::read(text).unwrap();
        let path = [Step::Key("a".into()), Step::Key("b".into()), Step::Index(1)];
        let node = root.at(&path).unwrap();
        assert_eq!(
            (node.line, node.describe().as_str()),
            (2, "the boolean true")
        );
        assert_eq!(root.path_to(node.line, node.column), Some(path.to_vec()));
        let secret = root
            .at(&[
                Step::Key("a".into()),
                Step::Key("c".into()),
                Step::Key("d".into()),
            ])
            .unwrap();
        assert_eq!(secret.describe(), "a string");
        assert!(!format!("{root:?}").contains("vigil-fake-secret"));
        assert_eq!(show(&path), "a.b[1]");
        assert_eq!(show(&[Step::Key("x y".into()), Step::Index(0)]), "…[0]");
    }
}
