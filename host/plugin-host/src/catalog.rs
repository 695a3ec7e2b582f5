//! The plugin set over time (replacement): for each plugin name, the
//! generation that serves, the one kept while a new generation is on probation, the
//! last failure, and whether the plugin retired.
//!
//! The rules, after Nanocl's rolling updates: a new or changed file is a *candidate*;
//! once it has loaded it is promoted at once, so probes that start afterwards use it,
//! while probes already running keep the generation they hold. A replacement is then
//! on probation for its first probes with the previous generation kept loaded: if too
//! many of them are inconclusive, the previous generation serves again and the new one
//! is recorded as failed. A candidate that fails to load never serves, and its file is
//! not tried again until it changes.
//!
//! This module holds no wasmtime type: it is generic over the loaded plugin, so its
//! rules are tested with plain values.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use crate::PluginSource;

/// A generation of a plugin as the catalog needs to know it.
pub(crate) trait Generation {
    /// The plugin's name (its file name without `.wasm`).
    fn name(&self) -> &str;
    /// The generation number, counted per plugin name from 1.
    fn generation(&self) -> u64;
    /// What it was loaded from: the digest of the `.wasm` and the `.toml`.
    fn content(&self) -> &str;
    /// Its routing priority.
    fn priority(&self) -> i32;
}

/// Where a plugin stands, as the API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginState {
    /// It serves, and has passed its probation (or had none).
    Active,
    /// Its file is being checked; it has never served.
    Candidate,
    /// It serves, on probation: the previous generation stays loaded.
    Probation,
    /// Its file failed, and no generation of it serves.
    Failed,
    /// Its file was removed: no generation serves.
    Retired,
}

impl PluginState {
    /// The stable name used by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Candidate => "candidate",
            Self::Probation => "probation",
            Self::Failed => "failed",
            Self::Retired => "retired",
        }
    }
}

/// The stage at which a candidate failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureStage {
    /// The file could not be read.
    Read,
    /// Its `NAME.toml` is invalid.
    Manifest,
    /// It is not a component, or does not compile.
    Compile,
    /// It targets another world or an unsupported contract version.
    World,
    /// It imports what vigil does not provide.
    Link,
    /// Its memory cap exceeds what the running engine was started with.
    Limits,
    /// `info()` trapped, overran its deadline or answered nonsense.
    Info,
    /// It was promoted, then too many of its first probes were inconclusive.
    Probation,
}

impl FailureStage {
    /// The stable name used by the API and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Manifest => "manifest",
            Self::Compile => "compile",
            Self::World => "world",
            Self::Link => "link",
            Self::Limits => "limits",
            Self::Info => "info",
            Self::Probation => "probation",
        }
    }
}

/// Why a generation of a plugin was discarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateFailure {
    /// The plugin file, or the embedded plugin.
    pub source: PluginSource,
    /// The generation number it was given.
    pub generation: u64,
    /// Where it failed.
    pub stage: FailureStage,
    /// Why, naming what was wrong (never a secret: plugin files hold none).
    pub message: String,
    /// When.
    pub at: SystemTime,
}

/// How a replacement generation is judged: by the inconclusive ratio over its first probes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbationPolicy {
    /// How many probes a replacement is judged on; 0 promotes without probation.
    pub probes: u32,
    /// The largest share of those probes that may be inconclusive, in `[0, 1]`.
    pub max_inconclusive_ratio: f64,
}

impl Default for ProbationPolicy {
    fn default() -> Self {
        Self {
            probes: 10,
            max_inconclusive_ratio: 0.5,
        }
    }
}

impl ProbationPolicy {
    /// How many of the probation's probes may be inconclusive without failing it.
    pub fn allowed_inconclusive(self) -> u32 {
        self.failing_count() - 1
    }

    /// The number of inconclusive probes, out of [`Self::probes`], that fails the
    /// probation: the first count whose ratio passes the bound.
    fn failing_count(self) -> u32 {
        let allowed = (f64::from(self.probes) * self.max_inconclusive_ratio).floor();
        // `allowed` lies in [0, probes]: the cast cannot truncate.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let allowed = allowed as u32;
        allowed.saturating_add(1)
    }
}

/// What a probe did to a generation on probation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProbationVerdict {
    /// Still judging (or the generation is not on probation).
    Pending,
    /// It passed: the previous generation is released.
    Passed {
        /// The generation that passed.
        generation: u64,
    },
    /// It failed: the previous generation serves again.
    RolledBack {
        /// The generation that failed.
        failed: u64,
        /// The generation that serves again.
        restored: u64,
        /// Why, for the log.
        message: String,
    },
}

#[derive(Debug, Clone, Copy, Default)]
struct Probation {
    seen: u32,
    inconclusive: u32,
}

struct Slot<P> {
    serving: Option<Arc<P>>,
    /// The last generation that passed (or needed no) probation, kept while `serving`
    /// is on probation.
    previous: Option<Arc<P>>,
    probation: Option<Probation>,
    /// A candidate generation being checked.
    candidate: Option<u64>,
    last_failure: Option<CandidateFailure>,
    /// The content of the last file that failed, not tried again until it changes.
    failed_content: Option<String>,
    /// The last generation that served before the file was removed.
    retired: Option<Arc<P>>,
    last_generation: u64,
}

impl<P> Default for Slot<P> {
    fn default() -> Self {
        Self {
            serving: None,
            previous: None,
            probation: None,
            candidate: None,
            last_failure: None,
            failed_content: None,
            retired: None,
            last_generation: 0,
        }
    }
}

/// One plugin name as the catalog shows it.
#[derive(Debug)]
pub(crate) struct Entry<P> {
    pub(crate) name: String,
    pub(crate) state: PluginState,
    /// The generation that serves; else the one that retired.
    pub(crate) current: Option<Arc<P>>,
    /// The generation kept during a probation.
    pub(crate) previous_generation: Option<u64>,
    /// A candidate being checked.
    pub(crate) candidate_generation: Option<u64>,
    /// Probes judged so far on probation, and how many were inconclusive.
    pub(crate) probation: Option<(u32, u32)>,
    pub(crate) last_failure: Option<CandidateFailure>,
}

/// Every plugin name the runtime has seen, and the serving generations in routing order.
pub(crate) struct Catalog<P> {
    slots: BTreeMap<String, Slot<P>>,
    routing: Arc<[Arc<P>]>,
    policy: ProbationPolicy,
}

impl<P> std::fmt::Debug for Catalog<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("plugins", &self.slots.keys().collect::<Vec<_>>())
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl<P: Generation> Catalog<P> {
    pub(crate) fn new(policy: ProbationPolicy) -> Self {
        Self {
            slots: BTreeMap::new(),
            routing: Arc::from([]),
            policy,
        }
    }

    pub(crate) fn policy(&self) -> ProbationPolicy {
        self.policy
    }

    pub(crate) fn set_policy(&mut self, policy: ProbationPolicy) {
        self.policy = policy;
    }

    /// The serving generations, highest priority first, ties by name.
    pub(crate) fn routing(&self) -> Arc<[Arc<P>]> {
        Arc::clone(&self.routing)
    }

    /// The generation serving `name`.
    pub(crate) fn serving(&self, name: &str) -> Option<Arc<P>> {
        self.slots.get(name)?.serving.clone()
    }

    /// Whether a file with `content` under `name` needs no new candidate: it is what
    /// serves, or what failed last.
    pub(crate) fn is_unchanged(&self, name: &str, content: &str) -> bool {
        self.slots.get(name).is_some_and(|slot| {
            slot.serving
                .as_ref()
                .is_some_and(|p| p.content() == content)
                || slot.failed_content.as_deref() == Some(content)
        })
    }

    /// Opens a candidate for `name` and gives it the next generation number.
    pub(crate) fn open_candidate(&mut self, name: &str) -> u64 {
        let slot = self.slots.entry(name.to_owned()).or_default();
        slot.last_generation += 1;
        slot.candidate = Some(slot.last_generation);
        slot.last_generation
    }

    /// Makes `plugin` (a candidate that loaded) the serving generation of its name.
    /// A replacement goes on probation, keeping the last generation that passed one.
    pub(crate) fn promote(&mut self, plugin: Arc<P>) {
        let policy = self.policy;
        let slot = self.slots.entry(plugin.name().to_owned()).or_default();
        let displaced = slot.serving.take();
        if slot.probation.is_none() {
            // The displaced generation had passed its probation: it is the fallback.
            slot.previous = displaced;
        }
        slot.probation = (slot.previous.is_some() && policy.probes > 0).then(Probation::default);
        if slot.probation.is_none() {
            slot.previous = None;
        }
        slot.last_generation = slot.last_generation.max(plugin.generation());
        slot.serving = Some(plugin);
        slot.candidate = None;
        slot.failed_content = None;
        slot.retired = None;
        self.rebuild_routing();
    }

    /// Records that the candidate of `failure` failed; whatever serves keeps serving.
    pub(crate) fn fail(&mut self, name: &str, content: Option<String>, failure: CandidateFailure) {
        let slot = self.slots.entry(name.to_owned()).or_default();
        slot.last_generation = slot.last_generation.max(failure.generation);
        slot.candidate = None;
        slot.failed_content = content;
        slot.last_failure = Some(failure);
    }

    /// The names with a serving generation.
    pub(crate) fn serving_names(&self) -> Vec<String> {
        self.slots
            .iter()
            .filter(|(_, slot)| slot.serving.is_some())
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Forgets a name whose file is gone and that never served (only failures).
    pub(crate) fn forget_failed(&mut self, name: &str) {
        self.slots
            .retain(|n, slot| n != name || slot.serving.is_some() || slot.retired.is_some());
    }

    /// Retires `name`: its file is gone. Probes already running keep their generation.
    pub(crate) fn retire(&mut self, name: &str) -> Option<u64> {
        let slot = self.slots.get_mut(name)?;
        let retired = slot.serving.take()?;
        let generation = retired.generation();
        slot.previous = None;
        slot.probation = None;
        slot.failed_content = None;
        slot.retired = Some(retired);
        self.rebuild_routing();
        Some(generation)
    }

    /// Counts one probe of generation `generation` of `name`, and judges its probation
    /// once the outcome is certain.
    pub(crate) fn record_probe(
        &mut self,
        name: &str,
        generation: u64,
        inconclusive: bool,
        source: impl FnOnce() -> PluginSource,
    ) -> ProbationVerdict {
        let policy = self.policy;
        let Some(slot) = self.slots.get_mut(name) else {
            return ProbationVerdict::Pending;
        };
        let on_probation = slot
            .serving
            .as_ref()
            .is_some_and(|p| p.generation() == generation);
        let Some(probation) = slot.probation.as_mut().filter(|_| on_probation) else {
            return ProbationVerdict::Pending;
        };
        probation.seen += 1;
        probation.inconclusive += u32::from(inconclusive);
        let Probation {
            seen,
            inconclusive: bad,
        } = *probation;

        if bad >= policy.failing_count() {
            let Some(restored) = slot.previous.take() else {
                slot.probation = None;
                return ProbationVerdict::Pending;
            };
            let failed = slot.serving.replace(Arc::clone(&restored));
            let failed_content = failed.as_ref().map(|p| p.content().to_owned());
            let message = format!(
                "{bad} of its first {seen} probes were inconclusive (at most {:.0}% of {} allowed); generation {} restored",
                policy.max_inconclusive_ratio * 100.0,
                policy.probes,
                restored.generation()
            );
            slot.probation = None;
            slot.failed_content = failed_content;
            slot.last_failure = Some(CandidateFailure {
                source: source(),
                generation,
                stage: FailureStage::Probation,
                message: message.clone(),
                at: SystemTime::now(),
            });
            self.rebuild_routing();
            return ProbationVerdict::RolledBack {
                failed: generation,
                restored: restored.generation(),
                message,
            };
        }
        if seen >= policy.probes {
            slot.probation = None;
            slot.previous = None;
            return ProbationVerdict::Passed { generation };
        }
        ProbationVerdict::Pending
    }

    /// Every plugin name, with its state.
    pub(crate) fn entries(&self) -> Vec<Entry<P>> {
        self.slots
            .iter()
            .map(|(name, slot)| {
                let state = match (&slot.serving, &slot.retired) {
                    (Some(_), _) if slot.probation.is_some() => PluginState::Probation,
                    (Some(_), _) => PluginState::Active,
                    (None, _) if slot.candidate.is_some() => PluginState::Candidate,
                    (None, Some(_)) => PluginState::Retired,
                    (None, None) => PluginState::Failed,
                };
                Entry {
                    name: name.clone(),
                    state,
                    current: slot.serving.clone().or_else(|| slot.retired.clone()),
                    previous_generation: slot
                        .probation
                        .and(slot.previous.as_ref())
                        .map(|p| p.generation()),
                    candidate_generation: slot.candidate,
                    probation: slot.probation.map(|p| (p.seen, p.inconclusive)),
                    last_failure: slot.last_failure.clone(),
                }
            })
            .collect()
    }

    fn rebuild_routing(&mut self) {
        let mut routing: Vec<Arc<P>> = self
            .slots
            .values()
            .filter_map(|slot| slot.serving.clone())
            .collect();
        routing.sort_by(|a, b| {
            b.priority()
                .cmp(&a.priority())
                .then_with(|| a.name().cmp(b.name()))
        });
        self.routing = routing.into();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Fake {
        name: &'static str,
        generation: u64,
        content: &'static str,
        priority: i32,
    }

    impl Generation for Fake {
        fn name(&self) -> &str {
            self.name
        }
        fn generation(&self) -> u64 {
            self.generation
        }
        fn content(&self) -> &str {
            self.content
        }
        fn priority(&self) -> i32 {
            self.priority
        }
    }

    fn load(catalog: &mut Catalog<Fake>, name: &'static str, content: &'static str) -> u64 {
        let generation = catalog.open_candidate(name);
        catalog.promote(Arc::new(Fake {
            name,
            generation,
            content,
            priority: 0,
        }));
        generation
    }

    fn failure(generation: u64) -> CandidateFailure {
        CandidateFailure {
            source: PluginSource::File(std::path::PathBuf::from("/plugins/p.wasm")),
            generation,
            stage: FailureStage::Compile,
            message: "is not a WebAssembly component".to_owned(),
            at: SystemTime::UNIX_EPOCH,
        }
    }

    fn state(catalog: &Catalog<Fake>, name: &str) -> (PluginState, Option<u64>) {
        let entry = catalog
            .entries()
            .into_iter()
            .find(|e| e.name == name)
            .expect("entry");
        (entry.state, entry.current.map(|p| p.generation))
    }

    fn policy(probes: u32, ratio: f64) -> ProbationPolicy {
        ProbationPolicy {
            probes,
            max_inconclusive_ratio: ratio,
        }
    }

    #[test]
    fn failing_count_is_the_first_count_past_the_bound() {
        assert_eq!(policy(10, 0.5).failing_count(), 6);
        assert_eq!(policy(10, 0.0).failing_count(), 1);
        assert_eq!(policy(3, 0.34).failing_count(), 2);
        assert_eq!(policy(4, 1.0).failing_count(), 5);
    }

    #[test]
    fn a_first_generation_serves_without_probation() {
        let mut catalog = Catalog::new(policy(3, 0.5));
        assert_eq!(load(&mut catalog, "p", "a"), 1);
        assert_eq!(state(&catalog, "p"), (PluginState::Active, Some(1)));
        assert_eq!(
            catalog.record_probe("p", 1, true, || PluginSource::File(
                std::path::PathBuf::new()
            )),
            ProbationVerdict::Pending
        );
        assert_eq!(state(&catalog, "p"), (PluginState::Active, Some(1)));
    }

    #[test]
    fn a_replacement_that_passes_releases_the_previous_generation() {
        let mut catalog = Catalog::new(policy(3, 0.5));
        load(&mut catalog, "p", "a");
        assert_eq!(load(&mut catalog, "p", "b"), 2);
        assert_eq!(state(&catalog, "p"), (PluginState::Probation, Some(2)));
        let entry = &catalog.entries()[0];
        assert_eq!(entry.previous_generation, Some(1));
        // A probe of the old generation (started before the swap) does not count.
        assert_eq!(
            catalog.record_probe("p", 1, true, || PluginSource::File(
                std::path::PathBuf::new()
            )),
            ProbationVerdict::Pending
        );
        assert_eq!(
            catalog.record_probe("p", 2, true, || PluginSource::File(
                std::path::PathBuf::new()
            )),
            ProbationVerdict::Pending
        );
        assert_eq!(
            catalog.record_probe("p", 2, false, || PluginSource::File(
                std::path::PathBuf::new()
            )),
            ProbationVerdict::Pending
        );
        assert_eq!(
            catalog.record_probe("p", 2, false, || PluginSource::File(
                std::path::PathBuf::new()
            )),
            ProbationVerdict::Passed { generation: 2 }
        );
        assert_eq!(state(&catalog, "p"), (PluginState::Active, Some(2)));
        assert_eq!(catalog.entries()[0].previous_generation, None);
    }

    #[test]
    fn a_replacement_that_fails_probation_is_rolled_back_and_not_retried() {
        let mut catalog = Catalog::new(policy(4, 0.5));
        load(&mut catalog, "p", "a");
        load(&mut catalog, "p", "b");
        assert_eq!(
            catalog.record_probe("p", 2, true, || PluginSource::File(
                std::path::PathBuf::new()
            )),
            ProbationVerdict::Pending
        );
        assert_eq!(
            catalog.record_probe("p", 2, true, || PluginSource::File(
                std::path::PathBuf::new()
            )),
            ProbationVerdict::Pending
        );
        let verdict = catalog.record_probe("p", 2, true, || {
            PluginSource::File("/plugins/p.wasm".into())
        });
        let ProbationVerdict::RolledBack {
            failed, restored, ..
        } = verdict
        else {
            panic!("expected a rollback, got {verdict:?}");
        };
        assert_eq!((failed, restored), (2, 1));
        assert_eq!(state(&catalog, "p"), (PluginState::Active, Some(1)));
        let failure = catalog.entries()[0].last_failure.clone().expect("failure");
        assert_eq!(failure.stage, FailureStage::Probation);
        assert_eq!(failure.generation, 2);
        assert!(
            failure.message.starts_with("3 of its first 3 probes"),
            "{}",
            failure.message
        );
        assert!(
            catalog.is_unchanged("p", "b"),
            "the failed file is not retried"
        );
        assert!(catalog.is_unchanged("p", "a"));
        assert!(!catalog.is_unchanged("p", "c"));
        // The next file gets the next number.
        assert_eq!(load(&mut catalog, "p", "c"), 3);
    }

    #[test]
    fn a_replacement_during_probation_keeps_the_last_good_generation() {
        let mut catalog = Catalog::new(policy(2, 0.0));
        load(&mut catalog, "p", "a");
        load(&mut catalog, "p", "b");
        load(&mut catalog, "p", "c");
        assert_eq!(catalog.entries()[0].previous_generation, Some(1));
        let verdict = catalog.record_probe("p", 3, true, || {
            PluginSource::File(std::path::PathBuf::new())
        });
        assert!(matches!(
            verdict,
            ProbationVerdict::RolledBack { restored: 1, .. }
        ));
    }

    #[test]
    fn no_probation_when_the_policy_says_none() {
        let mut catalog = Catalog::new(policy(0, 0.5));
        load(&mut catalog, "p", "a");
        load(&mut catalog, "p", "b");
        assert_eq!(state(&catalog, "p"), (PluginState::Active, Some(2)));
        assert_eq!(catalog.entries()[0].previous_generation, None);
    }

    #[test]
    fn a_failed_candidate_leaves_the_serving_generation() {
        let mut catalog = Catalog::new(policy(3, 0.5));
        load(&mut catalog, "p", "a");
        let generation = catalog.open_candidate("p");
        assert_eq!(generation, 2);
        assert_eq!(catalog.entries()[0].candidate_generation, Some(2));
        catalog.fail("p", Some("broken".to_owned()), failure(generation));
        assert_eq!(state(&catalog, "p"), (PluginState::Active, Some(1)));
        assert_eq!(catalog.entries()[0].candidate_generation, None);
        assert!(catalog.is_unchanged("p", "broken"));
        assert_eq!(catalog.routing().len(), 1);
    }

    #[test]
    fn a_new_name_that_fails_is_listed_failed_and_routes_nothing() {
        let mut catalog = Catalog::new(policy(3, 0.5));
        let generation = catalog.open_candidate("p");
        assert_eq!(state(&catalog, "p").0, PluginState::Candidate);
        catalog.fail("p", None, failure(generation));
        assert_eq!(state(&catalog, "p"), (PluginState::Failed, None));
        assert!(catalog.routing().is_empty());
        catalog.forget_failed("p");
        assert!(catalog.entries().is_empty());
    }

    #[test]
    fn retiring_removes_from_routing_and_a_return_is_a_new_generation() {
        let mut catalog = Catalog::new(policy(3, 0.5));
        load(&mut catalog, "p", "a");
        load(&mut catalog, "q", "x");
        assert_eq!(catalog.retire("p"), Some(1));
        assert_eq!(state(&catalog, "p"), (PluginState::Retired, Some(1)));
        assert_eq!(catalog.routing().len(), 1);
        assert_eq!(catalog.retire("p"), None);
        assert_eq!(load(&mut catalog, "p", "a"), 2);
        assert_eq!(state(&catalog, "p"), (PluginState::Active, Some(2)));
    }

    #[test]
    fn routing_is_by_priority_then_name() {
        let mut catalog = Catalog::new(ProbationPolicy::default());
        for (name, priority) in [("b", 0), ("a", 0), ("c", 5)] {
            let generation = catalog.open_candidate(name);
            catalog.promote(Arc::new(Fake {
                name,
                generation,
                content: "x",
                priority,
            }));
        }
        let names: Vec<&str> = catalog.routing().iter().map(|p| p.name).collect();
        assert_eq!(names, ["c", "a", "b"]);
    }
}
