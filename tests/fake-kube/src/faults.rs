//! Fault injection: what a cluster does with its next connection and its next request.
//!
//! This module is plain data and two pure decisions ([`FaultState::on_accept`] and
//! [`FaultState::on_request`]); the server asks it at the two points where a real API
//! server can misbehave and carries out the answer. Closing and re-opening the listener for
//! [`Fault::Refuse`] is the server's job, because only it owns sockets.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The behaviour of one fake cluster, as set through a [`crate::ClusterHandle`] or the
/// control API. JSON form: `{"kind": "refuse"}`, `{"kind": "delay", "ms": 2000}`,
/// `{"kind": "status", "code": 500}`, `{"kind": "flap", "steps": ["ok", "500", "refuse"]}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Fault {
    /// Answer normally.
    #[default]
    None,
    /// Close the listener: a new connection gets `ECONNREFUSED`, open connections are reset.
    Refuse,
    /// Accept the connection, then never answer.
    Hang {
        /// Where the cluster stops answering.
        #[serde(default)]
        at: HangPoint,
    },
    /// Answer every request after this many milliseconds.
    Delay {
        /// The delay in milliseconds.
        ms: u64,
    },
    /// Answer every request with this HTTP status and a Kubernetes `Status` body
    /// (401, 403, 429, 500, 503…).
    Status {
        /// The HTTP status code.
        code: u16,
    },
    /// Apply one step per request (or per connection, for steps that act on connections),
    /// cycling through the list.
    Flap {
        /// The steps, in order; must not be empty.
        steps: Vec<FlapStep>,
    },
}

/// Where a hanging cluster stops answering.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HangPoint {
    /// The TCP connection is accepted but the TLS handshake never starts. Connections that
    /// are already open keep working.
    Handshake,
    /// The TLS handshake completes, the request is read and never answered, including on
    /// kept-alive connections.
    #[default]
    Request,
}

/// One step of a [`Fault::Flap`] pattern, written as a short string: `ok`, a status code
/// (`500`, `401`, `403`, …), `refuse`, `hang`, `hang-handshake` or `delay:MS`.
///
/// A refused attempt never reaches the process, so it cannot be counted. Within a flap,
/// `refuse` therefore accepts the connection and resets it at once (TCP RST); clients see
/// "connection reset" instead of "connection refused". A kept-alive connection that meets
/// `refuse` is closed without an answer. Use [`Fault::Refuse`] for a true `ECONNREFUSED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum FlapStep {
    /// Answer normally.
    Ok,
    /// Answer with this status code and a `Status` body.
    Status(u16),
    /// Reset the connection (see the type's documentation).
    Refuse,
    /// Never answer the request.
    Hang,
    /// Accept the connection and never start the TLS handshake.
    HangHandshake,
    /// Answer normally after this many milliseconds.
    Delay(u64),
}

/// A flap step that could not be parsed.
#[derive(Debug, thiserror::Error)]
#[error(
    "unknown flap step {0:?}: expected ok, refuse, hang, hang-handshake, delay:MS or an HTTP status code 100-599"
)]
pub struct FlapStepError(String);

impl FromStr for FlapStep {
    type Err = FlapStepError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let step = match text {
            "ok" | "200" => FlapStep::Ok,
            "refuse" => FlapStep::Refuse,
            "hang" => FlapStep::Hang,
            "hang-handshake" => FlapStep::HangHandshake,
            _ => {
                if let Some(ms) = text.strip_prefix("delay:") {
                    FlapStep::Delay(ms.parse().map_err(|_| FlapStepError(text.to_owned()))?)
                } else {
                    match text.parse::<u16>() {
                        Ok(code) if (100..=599).contains(&code) => FlapStep::Status(code),
                        _ => return Err(FlapStepError(text.to_owned())),
                    }
                }
            }
        };
        Ok(step)
    }
}

impl TryFrom<String> for FlapStep {
    type Error = FlapStepError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl fmt::Display for FlapStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlapStep::Ok => f.write_str("ok"),
            FlapStep::Status(code) => write!(f, "{code}"),
            FlapStep::Refuse => f.write_str("refuse"),
            FlapStep::Hang => f.write_str("hang"),
            FlapStep::HangHandshake => f.write_str("hang-handshake"),
            FlapStep::Delay(ms) => write!(f, "delay:{ms}"),
        }
    }
}

impl From<FlapStep> for String {
    fn from(step: FlapStep) -> Self {
        step.to_string()
    }
}

/// Parses a comma-separated flap pattern such as `ok,500,ok,refuse`.
pub fn parse_flap(pattern: &str) -> Result<Vec<FlapStep>, FlapStepError> {
    pattern.split(',').map(str::parse).collect()
}

/// Which certificate authority signs a rotated server certificate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CaRotation {
    /// A new CA: clients that trust only the old CA fail their TLS handshake.
    #[default]
    New,
    /// The same CA signs a new server key and certificate: clients keep working.
    Same,
}

/// What the server does with a newly accepted TCP connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcceptAction {
    /// Run the TLS handshake and serve requests.
    Serve,
    /// Reset the connection at once.
    Reset,
    /// Keep the connection open and never start the handshake.
    HangHandshake,
}

/// What the server does with a request that arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestAction {
    /// Authenticate, authorise and answer, after the delay if any.
    Proceed(Option<Duration>),
    /// Answer with this status code without looking further.
    Status(u16),
    /// Never answer.
    Hang,
    /// Close the connection without answering.
    Reset,
}

/// The fault currently set on one cluster and the position in its flap pattern.
#[derive(Clone, Debug, Default)]
pub(crate) struct FaultState {
    fault: Fault,
    cursor: usize,
}

impl FaultState {
    /// The fault in force.
    pub(crate) fn fault(&self) -> &Fault {
        &self.fault
    }

    /// Replaces the fault; a flap pattern starts from its first step.
    pub(crate) fn set(&mut self, fault: Fault) {
        self.fault = fault;
        self.cursor = 0;
    }

    /// Decides the fate of a new connection. Only the connection-level flap steps
    /// (`refuse`, `hang-handshake`) are consumed here; any other step is left for the
    /// connection's first request.
    pub(crate) fn on_accept(&mut self) -> AcceptAction {
        match &self.fault {
            // A connection can slip in between setting the fault and closing the listener.
            Fault::Refuse => AcceptAction::Reset,
            Fault::Hang {
                at: HangPoint::Handshake,
            } => AcceptAction::HangHandshake,
            Fault::Flap { steps } if !steps.is_empty() => {
                let step = steps[self.cursor % steps.len()];
                match step {
                    FlapStep::Refuse => {
                        self.cursor = (self.cursor + 1) % steps.len();
                        AcceptAction::Reset
                    }
                    FlapStep::HangHandshake => {
                        self.cursor = (self.cursor + 1) % steps.len();
                        AcceptAction::HangHandshake
                    }
                    _ => AcceptAction::Serve,
                }
            }
            _ => AcceptAction::Serve,
        }
    }

    /// Decides the fate of a request, consuming one flap step.
    pub(crate) fn on_request(&mut self) -> RequestAction {
        match &self.fault {
            Fault::None
            | Fault::Hang {
                at: HangPoint::Handshake,
            } => RequestAction::Proceed(None),
            Fault::Refuse => RequestAction::Reset,
            Fault::Hang {
                at: HangPoint::Request,
            } => RequestAction::Hang,
            Fault::Delay { ms } => RequestAction::Proceed(Some(Duration::from_millis(*ms))),
            Fault::Status { code } => RequestAction::Status(*code),
            Fault::Flap { steps } => {
                if steps.is_empty() {
                    return RequestAction::Proceed(None);
                }
                let step = steps[self.cursor % steps.len()];
                self.cursor = (self.cursor + 1) % steps.len();
                match step {
                    FlapStep::Ok => RequestAction::Proceed(None),
                    FlapStep::Status(code) => RequestAction::Status(code),
                    FlapStep::Refuse => RequestAction::Reset,
                    // The handshake is over on this connection; hanging the request is the
                    // closest behaviour that still consumes the step.
                    FlapStep::Hang | FlapStep::HangHandshake => RequestAction::Hang,
                    FlapStep::Delay(ms) => RequestAction::Proceed(Some(Duration::from_millis(ms))),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(fault: Fault) -> FaultState {
        let mut state = FaultState::default();
        state.set(fault);
        state
    }

    #[test]
    fn flap_steps_parse_and_print_back() {
        for text in [
            "ok",
            "500",
            "401",
            "refuse",
            "hang",
            "hang-handshake",
            "delay:250",
        ] {
            let step: FlapStep = text.parse().expect("valid step");
            assert_eq!(step.to_string(), text);
        }
        for bad in ["", "okay", "99", "600", "delay:", "delay:x"] {
            assert!(
                bad.parse::<FlapStep>().is_err(),
                "{bad:?} should be rejected"
            );
        }
        assert_eq!(
            parse_flap("ok, 500,refuse").expect("valid"),
            vec![FlapStep::Ok, FlapStep::Status(500), FlapStep::Refuse]
        );
    }

    #[test]
    fn faults_round_trip_through_json() {
        let cases = [
            (Fault::None, r#"{"kind":"none"}"#),
            (Fault::Refuse, r#"{"kind":"refuse"}"#),
            (
                Fault::Hang {
                    at: HangPoint::Handshake,
                },
                r#"{"kind":"hang","at":"handshake"}"#,
            ),
            (Fault::Delay { ms: 20 }, r#"{"kind":"delay","ms":20}"#),
            (
                Fault::Status { code: 500 },
                r#"{"kind":"status","code":500}"#,
            ),
            (
                Fault::Flap {
                    steps: vec![FlapStep::Ok, FlapStep::Status(500), FlapStep::Delay(5)],
                },
                r#"{"kind":"flap","steps":["ok","500","delay:5"]}"#,
            ),
        ];
        for (fault, json) in cases {
            assert_eq!(serde_json::to_string(&fault).expect("serialises"), json);
            assert_eq!(serde_json::from_str::<Fault>(json).expect("parses"), fault);
        }
        let default_hang: Fault = serde_json::from_str(r#"{"kind":"hang"}"#).expect("parses");
        assert_eq!(
            default_hang,
            Fault::Hang {
                at: HangPoint::Request
            }
        );
    }

    #[test]
    fn flap_consumes_one_step_per_request_and_cycles() {
        let steps = parse_flap("ok,500,delay:7,hang").expect("valid");
        let mut state = state(Fault::Flap { steps });
        let seen: Vec<_> = (0..6).map(|_| state.on_request()).collect();
        assert_eq!(
            seen,
            vec![
                RequestAction::Proceed(None),
                RequestAction::Status(500),
                RequestAction::Proceed(Some(Duration::from_millis(7))),
                RequestAction::Hang,
                RequestAction::Proceed(None),
                RequestAction::Status(500),
            ]
        );
    }

    #[test]
    fn connection_steps_are_consumed_at_accept_only() {
        let mut state = state(Fault::Flap {
            steps: parse_flap("ok,refuse").expect("valid"),
        });
        // The current step is `ok`: the connection is served and the step left for its request.
        assert_eq!(state.on_accept(), AcceptAction::Serve);
        assert_eq!(state.on_accept(), AcceptAction::Serve);
        assert_eq!(state.on_request(), RequestAction::Proceed(None));
        // Now `refuse` is current: the next connection is reset and the pattern moves on.
        assert_eq!(state.on_accept(), AcceptAction::Reset);
        assert_eq!(state.on_accept(), AcceptAction::Serve);
        // A kept-alive connection meeting `refuse` is closed without an answer.
        assert_eq!(state.on_request(), RequestAction::Proceed(None));
        assert_eq!(state.on_request(), RequestAction::Reset);
    }

    #[test]
    fn fixed_faults_decide_the_same_way_every_time() {
        let cases = [
            (
                Fault::None,
                AcceptAction::Serve,
                RequestAction::Proceed(None),
            ),
            (Fault::Refuse, AcceptAction::Reset, RequestAction::Reset),
            (
                Fault::Hang {
                    at: HangPoint::Handshake,
                },
                AcceptAction::HangHandshake,
                RequestAction::Proceed(None),
            ),
            (
                Fault::Hang {
                    at: HangPoint::Request,
                },
                AcceptAction::Serve,
                RequestAction::Hang,
            ),
            (
                Fault::Delay { ms: 3 },
                AcceptAction::Serve,
                RequestAction::Proceed(Some(Duration::from_millis(3))),
            ),
            (
                Fault::Status { code: 403 },
                AcceptAction::Serve,
                RequestAction::Status(403),
            ),
        ];
        for (fault, accept, request) in cases {
            let mut state = state(fault.clone());
            for _ in 0..3 {
                assert_eq!(state.on_accept(), accept, "{fault:?}");
                assert_eq!(state.on_request(), request, "{fault:?}");
            }
        }
    }
}
