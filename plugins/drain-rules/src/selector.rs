//! Label selectors, matched as `metav1.LabelSelectorAsSelector` builds them.

use std::collections::BTreeMap;

use crate::model::LabelSelector;

/// Why a selector cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSelector(pub String);

impl std::fmt::Display for InvalidSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidSelector {}

/// Whether `selector` selects an object with `labels`.
///
/// Mirrors `LabelSelectorAsSelector` (`k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go`) as
/// the disruption controller's `getPodsForPdb` uses it: a nil selector (`None`) selects
/// nothing (`labels.Nothing()`), an empty one everything (`labels.Everything()`); every
/// `matchLabels` pair and every `matchExpressions` requirement must hold; `In` and `NotIn`
/// need values, `Exists` and `DoesNotExist` must have none, and any other operator is an
/// error.
pub fn matches(
    selector: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> Result<bool, InvalidSelector> {
    let Some(selector) = selector else {
        return Ok(false);
    };
    validate(selector)?;
    let labels_match = selector
        .match_labels
        .iter()
        .all(|(key, value)| labels.get(key) == Some(value));
    let expressions_match = selector.match_expressions.iter().all(|requirement| {
        let value = labels.get(&requirement.key);
        match requirement.operator.as_str() {
            "In" => value.is_some_and(|v| requirement.values.contains(v)),
            "NotIn" => value.is_none_or(|v| !requirement.values.contains(v)),
            "Exists" => value.is_some(),
            // "DoesNotExist": `validate` rejected every other operator.
            _ => value.is_none(),
        }
    });
    Ok(labels_match && expressions_match)
}

/// Whether a selector is valid, as `LabelSelectorAsSelector` checks it.
pub fn validate(selector: &LabelSelector) -> Result<(), InvalidSelector> {
    for requirement in &selector.match_expressions {
        match requirement.operator.as_str() {
            "In" | "NotIn" if requirement.values.is_empty() => {
                return Err(InvalidSelector(format!(
                    "operator {} on key {:?} needs at least one value",
                    requirement.operator, requirement.key
                )));
            }
            "Exists" | "DoesNotExist" if !requirement.values.is_empty() => {
                return Err(InvalidSelector(format!(
                    "operator {} on key {:?} takes no values",
                    requirement.operator, requirement.key
                )));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => {
                return Err(InvalidSelector(format!(
                    "{other:?} is not a valid label selector operator"
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![LabelSelectorRequirement {
                key: key.to_owned(),
                operator: operator.to_owned(),
                values: values.iter().map(|v| (*v).to_owned()).collect(),
            }],
        }
    }

    #[test]
    fn nil_matches_nothing_and_empty_matches_everything() {
        let pod = labels(&[("app", "api")]);
        assert_eq!(matches(None, &pod), Ok(false));
        assert_eq!(matches(Some(&LabelSelector::default()), &pod), Ok(true));
        assert_eq!(
            matches(Some(&LabelSelector::default()), &BTreeMap::new()),
            Ok(true)
        );
    }

    #[test]
    fn requirements_are_all_checked() {
        let check = |selector: LabelSelector, pod: &[(&str, &str)], expected: bool| {
            assert_eq!(
                matches(Some(&selector), &labels(pod)),
                Ok(expected),
                "{selector:?} on {pod:?}"
            );
        };
        let app_api = LabelSelector {
            match_labels: labels(&[("app", "api")]),
            match_expressions: Vec::new(),
        };
        check(app_api.clone(), &[("app", "api"), ("tier", "x")], true);
        check(app_api, &[("app", "web")], false);
        check(
            expression("app", "In", &["api", "web"]),
            &[("app", "web")],
            true,
        );
        check(expression("app", "In", &["api"]), &[], false);
        check(expression("app", "NotIn", &["api"]), &[], true);
        check(
            expression("app", "NotIn", &["api"]),
            &[("app", "api")],
            false,
        );
        check(expression("app", "Exists", &[]), &[("app", "")], true);
        check(
            expression("app", "DoesNotExist", &[]),
            &[("app", "")],
            false,
        );
    }

    #[test]
    fn malformed_requirements_are_errors() {
        let pod = labels(&[]);
        assert!(matches(Some(&expression("a", "In", &[])), &pod).is_err());
        assert!(matches(Some(&expression("a", "Exists", &["x"])), &pod).is_err());
        assert!(matches(Some(&expression("a", "Equals", &["x"])), &pod).is_err());
    }
}
