//! Work that must run on one replica at a time when replicas share a PostgreSQL database
//! (discovery, history retention, audits): each is a lease in the store, held by the
//! replica that runs it and taken over by another once it lapses. On SQLite one engine
//! runs everything.

use std::sync::Arc;
use std::time::Duration;

use tracing::warn;
use vigil_domain::probe::error_chain;
use vigil_store::Store;

/// Who runs the work of this engine that has a single owner.
#[derive(Debug, Clone, Default)]
pub struct Owner {
    replica: Option<Arc<str>>,
}

impl Owner {
    /// The only engine on its database: it owns everything.
    pub fn alone() -> Self {
        Self::default()
    }

    /// The replica `id`, among others on one database.
    pub fn replica(id: &str) -> Self {
        Self {
            replica: Some(Arc::from(id)),
        }
    }

    /// Whether this engine holds `work` now, for `ttl` more (taking it over when it is
    /// free or its holder's lease lapsed). A store that does not answer holds nothing.
    pub async fn holds(&self, store: &Store, work: &str, ttl: Duration) -> bool {
        let Some(replica) = &self.replica else {
            return true;
        };
        match store.hold_lease(work, replica, ttl).await {
            Ok(held) => held,
            Err(error) => {
                warn!(work, error = %error_chain(&error), "cannot take or keep a lease; the work waits");
                false
            }
        }
    }
}
