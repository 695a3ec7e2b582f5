//! The API server's validation of a budget's spec: what `kubectl apply` would refuse.

use crate::intstr::IntOrString;
use crate::model::PdbSpec;
use crate::selector;

/// One reason the API server would refuse a budget, as `field.Error` reports it: the field's
/// path and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// e.g. `spec.minAvailable`.
    pub field: String,
    /// e.g. `must not be greater than 100%`.
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every reason the API server would refuse `spec`, in its order.
///
/// Mirrors `ValidatePodDisruptionBudgetSpec` (`pkg/apis/policy/validation/validation.go`),
/// with `ValidatePositiveIntOrPercent` and `IsNotMoreThan100Percent`
/// (`pkg/apis/apps/validation/validation.go`): both fields set is refused; an integer must
/// not be negative; a string must match `^[0-9]+%$`; a percentage must not exceed 100%; the
/// selector's requirements must be well formed; `unhealthyPodEvictionPolicy` must be
/// `IfHealthyBudget` or `AlwaysAllow`.
pub fn validate_budget(spec: &PdbSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut error = |field: &str, message: String| {
        errors.push(FieldError {
            field: field.to_owned(),
            message,
        });
    };
    if spec.min_available.is_some() && spec.max_unavailable.is_some() {
        error(
            "spec.minAvailable",
            "minAvailable and maxUnavailable cannot be both set".to_owned(),
        );
    }
    for (field, value) in [
        ("spec.minAvailable", &spec.min_available),
        ("spec.maxUnavailable", &spec.max_unavailable),
    ] {
        match value {
            Some(IntOrString::Int(number)) if *number < 0 => {
                error(
                    field,
                    format!("{number}: must be greater than or equal to 0"),
                );
            }
            None | Some(IntOrString::Int(_)) => {}
            Some(IntOrString::String(text)) => {
                if !is_valid_percent(text) {
                    error(
                        field,
                        format!("{text:?}: must be an integer or a percentage (e.g. '5%')"),
                    );
                } else if value
                    .as_ref()
                    .and_then(IntOrString::percent)
                    .is_some_and(|p| p > 100)
                {
                    error(field, format!("{text:?}: must not be greater than 100%"));
                }
            }
        }
    }
    if let Some(selector) = &spec.selector
        && let Err(invalid) = selector::validate(selector)
    {
        error("spec.selector", invalid.0);
    }
    if let Some(policy) = &spec.unhealthy_pod_eviction_policy
        && policy != "IfHealthyBudget"
        && policy != "AlwaysAllow"
    {
        error(
            "spec.unhealthyPodEvictionPolicy",
            format!("{policy:?}: supported values: \"AlwaysAllow\", \"IfHealthyBudget\""),
        );
    }
    errors
}

/// `IsValidPercent` (`k8s.io/apimachinery/pkg/util/validation`): `^[0-9]+%$`.
fn is_valid_percent(text: &str) -> bool {
    text.strip_suffix('%')
        .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(min: Option<IntOrString>, max: Option<IntOrString>) -> PdbSpec {
        PdbSpec {
            min_available: min,
            max_unavailable: max,
            selector: Some(crate::model::LabelSelector::default()),
            unhealthy_pod_eviction_policy: None,
        }
    }

    fn s(text: &str) -> Option<IntOrString> {
        Some(IntOrString::String(text.to_owned()))
    }

    fn i(value: i64) -> Option<IntOrString> {
        Some(IntOrString::Int(value))
    }

    /// Cases after `TestValidatePodDisruptionBudgetSpec` and
    /// `TestValidateMinAvailablePodDisruptionBudgetSpec` /
    /// `TestValidateMinAvailablePodAndMaxUnavailableDisruptionBudgetSpec`
    /// (`pkg/apis/policy/validation/validation_test.go`).
    #[test]
    fn budgets_are_validated_as_the_api_server_does() {
        let check = |spec: PdbSpec, expected: &[&str]| {
            let errors: Vec<String> = validate_budget(&spec)
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(errors, expected, "{spec:?}");
        };
        check(spec(s("10%"), None), &[]);
        check(spec(i(1), None), &[]);
        check(spec(None, s("0%")), &[]);
        check(spec(None, i(0)), &[]);
        check(spec(s("100%"), None), &[]);
        check(spec(None, None), &[]);
        check(
            spec(s("110%"), None),
            &["spec.minAvailable: \"110%\": must not be greater than 100%"],
        );
        check(
            spec(None, i(-1)),
            &["spec.maxUnavailable: -1: must be greater than or equal to 0"],
        );
        check(
            spec(s("10"), None),
            &["spec.minAvailable: \"10\": must be an integer or a percentage (e.g. '5%')"],
        );
        check(
            spec(None, s("-10%")),
            &["spec.maxUnavailable: \"-10%\": must be an integer or a percentage (e.g. '5%')"],
        );
        check(
            spec(i(1), s("10%")),
            &["spec.minAvailable: minAvailable and maxUnavailable cannot be both set"],
        );
        let mut bad_policy = spec(i(1), None);
        bad_policy.unhealthy_pod_eviction_policy = Some("Never".to_owned());
        check(
            bad_policy,
            &[
                "spec.unhealthyPodEvictionPolicy: \"Never\": supported values: \"AlwaysAllow\", \"IfHealthyBudget\"",
            ],
        );
    }
}
