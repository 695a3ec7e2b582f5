//! `contract-before-exec`: a test-only probe plugin built against `vigil:plugin@0.1.0` as it
//! was before `credentials.exec-credential` was added (`wit/plugin.wit` is that version of
//! `wit/since_v0.1.0/plugin.wit`, kept as it was). vigil must still load it and serve its
//! `credentials` calls: a component built against the unreleased contract before that change
//! keeps working. Its `probe` asks `credentials.context()` and answers `not-probeable`
//! (`reference-broken`) with the context and server it was served, which the test reads.

// Generated glue: the export functions are `unsafe` extern functions.
#![allow(unsafe_code)]

wit_bindgen::generate!({
    world: "probe",
    path: "wit",
});

use exports::vigil::plugin::prober::Guest;
use vigil::plugin::credentials;
use vigil::plugin::types::{
    Cluster, Failure, PluginInfo, ProbeError, ProbeReport, ProbeRequest, ReasonClass,
};

/// The plugin.
#[derive(Debug)]
pub struct ContractBeforeExec;

impl Guest for ContractBeforeExec {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "contract-before-exec".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            schemes: vec!["file".to_owned()],
            description: "test: built against vigil:plugin@0.1.0 before exec-credential".to_owned(),
        }
    }

    fn accepts(_: Cluster) -> bool {
        true
    }

    fn probe(_: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        let message = match credentials::context() {
            Ok(context) => format!(
                "served context {} of server {}",
                context.context, context.server
            ),
            Err(error) => format!("credentials.context failed: {error:?}"),
        };
        Err(ProbeError::NotProbeable(Failure {
            class: ReasonClass::ReferenceBroken,
            message,
        }))
    }
}

export!(ContractBeforeExec);
