//! `wrong-world`: a test-only component that is not a vigil plugin at all. It targets the
//! world `vigil-test:wrong-world/wrong@0.1.0` (`wit/wrong.wit`), which exports one function
//! `answer: func() -> u32` and neither `vigil:plugin/prober` nor `vigil:plugin/auditor`. The
//! host must refuse to load it — `vigil plugin check` and the plugin directory watcher alike —
//! with an error saying that the component exports no vigil interface, and never call it.

// Generated glue: the export functions are `unsafe` extern functions.
#![allow(unsafe_code)]

wit_bindgen::generate!({
    world: "wrong",
    path: "wit",
});

/// The component.
#[derive(Debug)]
pub struct WrongWorld;

impl Guest for WrongWorld {
    fn answer() -> u32 {
        42
    }
}

export!(WrongWorld);
