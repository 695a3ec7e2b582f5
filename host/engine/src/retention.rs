//! History retention (docs/rules.md#history-retention, `VIGIL_HISTORY_RETENTION_DAYS`): the transition
//! history older than the retention is pruned at start-up and then every hour.
//! What may and may not be pruned is the store's rule ([`Store::prune_history`]);
//! this module only says when. Each pass first rolls the finished days up into the
//! clusters' uptime, which outlives the history; then the notifications outbox is pruned.

use std::future::Future;
use std::time::Duration;

use tracing::{info, warn};
use vigil_decision::Timestamp;

use vigil_domain::probe::{error_chain, wall_clock};
use vigil_store::Store;

use crate::sharing::Owner;

/// How often the history is pruned after the first time at start-up.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

const MILLIS_PER_DAY: i64 = 86_400_000;

/// The oldest moment kept when the history is kept `days` days as of `now`.
pub fn retention_cutoff(now: Timestamp, days: u32) -> Timestamp {
    now.plus_millis(-i64::from(days).saturating_mul(MILLIS_PER_DAY))
}

/// Prunes the history older than `days` days now, then every [`PRUNE_EVERY`],
/// until `shutdown` completes. A failed pass is logged and the next one runs as
/// planned: retention is housekeeping and never stops the engine. Among replicas, the one
/// that holds the `retention` lease prunes.
pub async fn retention_loop(
    store: Store,
    days: u32,
    owner: Owner,
    shutdown: impl Future<Output = ()>,
) {
    let passes = async {
        let mut every = tokio::time::interval(PRUNE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // The first tick completes at once: prune at start-up.
            every.tick().await;
            // Held across two passes, so that its holder keeps it while it lives.
            if owner.holds(&store, "retention", PRUNE_EVERY * 2).await {
                prune_once(&store, days).await;
            }
        }
    };
    tokio::select! {
        () = passes => {}
        () = shutdown => {}
    }
}

/// One pruning pass, logged. The finished days are rolled up into the uptime first, so
/// that what the pass prunes is rolled up already ([`Store::roll_up_uptime`]).
async fn prune_once(store: &Store, days: u32) {
    let before = retention_cutoff(wall_clock(), days);
    match store.roll_up_uptime(wall_clock(), before).await {
        Ok(rolled) if rolled.rollups > 0 || rolled.pruned > 0 => info!(
            days = rolled.days,
            rollups = rolled.rollups,
            pruned = rolled.pruned,
            "uptime rolled up"
        ),
        Ok(_) => {}
        Err(error) => warn!(
            error = %error_chain(&error),
            "rolling up the uptime failed; retrying at the next pass"
        ),
    }
    match store.prune_history(before).await {
        Ok(pruned) if pruned.events > 0 || pruned.outages > 0 => info!(
            retention_days = days,
            events = pruned.events,
            outages = pruned.outages,
            "history pruned"
        ),
        Ok(_) => {}
        Err(error) => warn!(
            retention_days = days,
            error = %error_chain(&error),
            "pruning the history failed; retrying at the next pass"
        ),
    }
    // Notifications every sink was sent, and those as old as the pruned history.
    match store.prune_outbox(before).await {
        Ok(pruned) if pruned > 0 => info!(notifications = pruned, "notifications outbox pruned"),
        Ok(_) => {}
        Err(error) => warn!(
            error = %error_chain(&error),
            "pruning the notifications outbox failed; retrying at the next pass"
        ),
    }
}
