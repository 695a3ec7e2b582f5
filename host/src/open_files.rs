//! The open-files limit (`RLIMIT_NOFILE`): `vigil serve` raises its soft limit to the hard
//! limit at start (many systems start processes at 1,024 while allowing far more), then
//! checks that the REST API's connection cap fits in what the engine leaves.
//!
//! The engine keeps [`ENGINE_RESERVED_FILES`] for itself plus, per concurrent probe, room
//! for every `wasi:http` request a call may have in flight and the contract's `http`
//! request. A connection cap the operator set that does not fit stops start-up with an
//! error naming both numbers; the default cap is lowered to fit instead (with a warning),
//! so that vigil still starts on a host with a low limit.

use vigil_api::server::{MIN_CONNECTIONS, ServerLimits};
use vigil_plugin_host::MAX_WASI_HTTP_IN_FLIGHT;

/// Descriptors the engine keeps apart from probes and API connections: the database
/// pool, the kubeconfig and plugin watches, the compiled-code cache, standard streams,
/// the runtime's own.
pub const ENGINE_RESERVED_FILES: u64 = 256;

/// A connection cap that does not fit the open-files limit.
#[derive(Debug, thiserror::Error)]
#[error(
    "VIGIL_API_MAX_CONNECTIONS={cap} does not fit the open-files limit (RLIMIT_NOFILE \
     {limit}): the engine keeps {reserved} descriptors for itself and its probes \
     (CLUSTER_HEALTH_CONCURRENCY={concurrency}), which leaves {available}; lower the \
     setting or raise the limit"
)]
pub struct CapTooLarge {
    /// The cap that was set.
    pub cap: u32,
    /// The soft limit in force.
    pub limit: u64,
    /// What the engine keeps.
    pub reserved: u64,
    /// The probe concurrency the reserve was counted for.
    pub concurrency: usize,
    /// What is left for API connections.
    pub available: u64,
}

/// Raises the soft open-files limit to the hard limit and returns the soft limit in
/// force (unchanged when it cannot be raised).
pub fn raise_to_hard_limit() -> std::io::Result<u64> {
    rlimit::increase_nofile_limit(u64::MAX)
}

/// The descriptors the engine keeps for itself with `concurrency` probes at once, with the
/// API's connections reserved for the health paths.
pub fn reserved(concurrency: usize) -> u64 {
    let per_probe = u64::try_from(MAX_WASI_HTTP_IN_FLIGHT).unwrap_or(u64::MAX) + 1;
    let concurrency = u64::try_from(concurrency).unwrap_or(u64::MAX);
    ENGINE_RESERVED_FILES
        .saturating_add(u64::from(vigil_api::server::HEALTH_RESERVE))
        .saturating_add(concurrency.saturating_mul(per_probe))
}

/// The server limits fitted to the open-files `limit`: unchanged when they fit; with the
/// connection cap (and the event-stream cap with it) lowered when the cap is the default
/// (`set` false), never below [`MIN_CONNECTIONS`]; an error when the operator set it.
/// The second value is the cap before lowering, when it was lowered.
pub fn fit(
    limits: ServerLimits,
    set: bool,
    limit: u64,
    concurrency: usize,
) -> Result<(ServerLimits, Option<u32>), CapTooLarge> {
    let reserved = reserved(concurrency);
    let available = limit.saturating_sub(reserved);
    if u64::from(limits.max_connections) <= available {
        return Ok((limits, None));
    }
    if set {
        return Err(CapTooLarge {
            cap: limits.max_connections,
            limit,
            reserved,
            concurrency,
            available,
        });
    }
    let lowered = u32::try_from(available)
        .unwrap_or(u32::MAX)
        .max(MIN_CONNECTIONS);
    Ok((
        ServerLimits {
            max_connections: lowered,
            max_event_streams: limits.max_event_streams.min(lowered),
            ..limits
        },
        Some(limits.max_connections),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(connections: u32, streams: u32) -> ServerLimits {
        ServerLimits {
            max_connections: connections,
            max_event_streams: streams,
            ..ServerLimits::default()
        }
    }

    #[test]
    fn caps_that_fit_are_kept() {
        let reserve = reserved(4);
        let (fitted, lowered) = fit(limits(1000, 100), true, reserve + 1000, 4).unwrap();
        assert_eq!((fitted, lowered), (limits(1000, 100), None));
    }

    #[test]
    fn a_cap_the_operator_set_that_does_not_fit_is_refused_naming_both_numbers() {
        let reserve = reserved(4);
        let error = fit(limits(1001, 100), true, reserve + 1000, 4).unwrap_err();
        assert_eq!((error.cap, error.available), (1001, 1000));
        let text = error.to_string();
        assert!(text.contains("VIGIL_API_MAX_CONNECTIONS=1001"), "{text}");
        assert!(text.contains("RLIMIT_NOFILE"), "{text}");
    }

    #[test]
    fn the_default_cap_is_lowered_to_what_is_left_and_the_streams_with_it() {
        let reserve = reserved(64);
        let (fitted, lowered) = fit(limits(4096, 256), false, reserve + 200, 64).unwrap();
        assert_eq!((fitted, lowered), (limits(200, 200), Some(4096)));
        // Never below the floor, even when the reserve alone exceeds the limit.
        let (fitted, _) = fit(limits(4096, 256), false, 64, 64).unwrap();
        assert_eq!(fitted, limits(MIN_CONNECTIONS, MIN_CONNECTIONS));
    }

    #[test]
    fn the_reserve_grows_with_the_probe_concurrency() {
        assert!(reserved(64) > reserved(1));
        assert!(reserved(1) > ENGINE_RESERVED_FILES);
    }
}
