//! `IntOrString`, the type of a budget's `minAvailable` and `maxUnavailable`: an integer, or a
//! string that must be a percentage.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An integer or a string, as Kubernetes' `intstr.IntOrString`. In a disruption budget the
/// string form must be a percentage (`"10%"`); anything else is invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntOrString {
    /// An integer (`maxUnavailable: 1`).
    Int(i64),
    /// A string (`maxUnavailable: "10%"`).
    String(String),
}

/// Why an [`IntOrString`] has no value for a count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntOrStringError {
    /// A string that does not end in `%`.
    NotAPercentage(String),
    /// A string ending in `%` whose number does not parse.
    InvalidNumber(String),
}

impl fmt::Display for IntOrStringError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAPercentage(value) => write!(f, "{value:?} is not a percentage"),
            Self::InvalidNumber(value) => write!(f, "{value:?} is not a valid percentage"),
        }
    }
}

impl std::error::Error for IntOrStringError {}

impl IntOrString {
    /// The value for `total` items: the integer as it is, or the percentage of `total`,
    /// rounded up when `round_up` (the disruption controller always rounds up, for both
    /// fields) and down otherwise.
    ///
    /// Mirrors `GetScaledValueFromIntOrPercent` and `getIntOrPercentValueSafely` in
    /// `k8s.io/apimachinery/pkg/util/intstr/intstr.go`: the number before `%` is read as
    /// Go's `strconv.Atoi` reads it (an optional sign, decimal digits), and the result is
    /// `ceil(value × total / 100)` in floating point.
    pub fn scaled_value(&self, total: i64, round_up: bool) -> Result<i64, IntOrStringError> {
        match self {
            Self::Int(value) => Ok(*value),
            Self::String(text) => {
                let percent = percent_value(text)?;
                // Go computes this in float64; so do we, for the same results at the edges.
                #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
                let scaled = {
                    let exact = percent as f64 * total as f64 / 100.0;
                    (if round_up {
                        exact.ceil()
                    } else {
                        exact.floor()
                    }) as i64
                };
                Ok(scaled)
            }
        }
    }

    /// The percentage, when this is a string of the form `N%`.
    pub fn percent(&self) -> Option<i64> {
        match self {
            Self::Int(_) => None,
            Self::String(text) => percent_value(text).ok(),
        }
    }
}

/// The number of a `N%` string, read as `strconv.Atoi` reads it.
fn percent_value(text: &str) -> Result<i64, IntOrStringError> {
    let Some(number) = text.strip_suffix('%') else {
        return Err(IntOrStringError::NotAPercentage(text.to_owned()));
    };
    let digits = number.strip_prefix(['+', '-']).unwrap_or(number).as_bytes();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(IntOrStringError::InvalidNumber(text.to_owned()));
    }
    number
        .parse::<i64>()
        .map_err(|_| IntOrStringError::InvalidNumber(text.to_owned()))
}

impl fmt::Display for IntOrString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Int(value) => write!(f, "{value}"),
            Self::String(text) => f.write_str(text),
        }
    }
}

impl Serialize for IntOrString {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Int(value) => serializer.serialize_i64(*value),
            Self::String(text) => serializer.serialize_str(text),
        }
    }
}

impl<'de> Deserialize<'de> for IntOrString {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = IntOrString;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer or a percentage string")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<IntOrString, E> {
                Ok(IntOrString::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<IntOrString, E> {
                i64::try_from(v)
                    .map(IntOrString::Int)
                    .map_err(|_| E::custom("integer out of range"))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<IntOrString, E> {
                Ok(IntOrString::String(v.to_owned()))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> IntOrString {
        IntOrString::String(text.to_owned())
    }

    /// Cases of `TestGetScaledValueFromIntOrPercent` in
    /// `k8s.io/apimachinery/pkg/util/intstr/intstr_test.go`, then the article's.
    #[test]
    fn scaled_values_match_kubernetes() {
        let check = |input: IntOrString, total: i64, round_up: bool, expected: Option<i64>| {
            assert_eq!(
                input.scaled_value(total, round_up).ok(),
                expected,
                "{input} of {total} (round up: {round_up})"
            );
        };
        // intstr_test.go: TestGetScaledValueFromIntOrPercent.
        check(IntOrString::Int(123), 0, false, Some(123));
        check(s("90%"), 100, true, Some(90));
        check(s("90%"), 95, true, Some(86));
        check(s("90%"), 95, false, Some(85));
        check(s("%"), 0, false, None);
        check(s("90#"), 0, false, None);
        check(s("#%"), 0, false, None);
        check(s("90"), 0, false, None);
        // disruption_test.go: TestReplicationController ("34% should round up to 2").
        check(s("34%"), 3, true, Some(2));
        // disruption_test.go: TestPercentageMaxUnavailableWithScaling (30% of 7, of 3).
        check(s("30%"), 7, true, Some(3));
        check(s("30%"), 3, true, Some(1));
        // The article: `maxUnavailable: 10%` gives 1 on 3 replicas and 1 on 5.
        check(s("10%"), 3, true, Some(1));
        check(s("10%"), 5, true, Some(1));
        // strconv.Atoi accepts a sign.
        check(s("+50%"), 4, true, Some(2));
        check(s("-10%"), 10, true, Some(-1));
        check(s("1 0%"), 10, true, None);
    }

    #[test]
    fn reads_integers_and_strings() {
        let int: IntOrString = serde_json::from_str("3").expect("int");
        assert_eq!(int, IntOrString::Int(3));
        let string: IntOrString = serde_json::from_str("\"25%\"").expect("string");
        assert_eq!(string, s("25%"));
        assert_eq!(string.percent(), Some(25));
        assert!(serde_json::from_str::<IntOrString>("true").is_err());
    }
}
