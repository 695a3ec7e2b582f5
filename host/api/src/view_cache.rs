//! Rendered cluster views kept between list pages.
//!
//! A 500-cluster page costs mostly the reading and rendering of 500 rows (BENCHMARKS.md,
//! "REST API under load"), while between two reads of a page few of its clusters have
//! changed. Each cluster row carries a revision that every write changes and that is never
//! given twice (migration 0004), so the JSON of a view rendered from a row stays exactly
//! right while the row keeps its revision: a page asks the store for the ids and revisions
//! of its clusters, reuses the views still current, and reads and renders only the others
//! — all in one database snapshot. The database stays the only source of truth: a view is
//! never served without its row's revision being read in the same snapshot.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use vigil_decision::ClusterId;

/// How many rendered views are kept at most (about 1 KB each): past it the cache starts
/// again from empty, so that the views of deleted clusters cannot pile up.
const MAX_VIEWS: usize = 50_000;

/// Rendered views (the JSON of a `ClusterView`) by cluster, with the revision of the row
/// each was rendered from.
#[derive(Debug, Default)]
pub struct ViewCache {
    views: Mutex<HashMap<ClusterId, (i64, Bytes)>>,
}

impl ViewCache {
    /// For each `(id, revision)`, its view if the one held is of that revision.
    pub fn current(&self, wanted: &[(ClusterId, i64)]) -> Vec<Option<Bytes>> {
        let views = self.views.lock().unwrap_or_else(|e| e.into_inner());
        wanted
            .iter()
            .map(|(id, revision)| {
                views
                    .get(id)
                    .filter(|(held, _)| held == revision)
                    .map(|(_, view)| view.clone())
            })
            .collect()
    }

    /// Keeps `view`, rendered from the row of `id` at `revision`, unless a view of a later
    /// revision is held already (two pages rendering the same cluster at once).
    pub fn keep(&self, id: ClusterId, revision: i64, view: Bytes) {
        let mut views = self.views.lock().unwrap_or_else(|e| e.into_inner());
        if views.len() >= MAX_VIEWS && !views.contains_key(&id) {
            views.clear();
        }
        match views.get(&id) {
            Some((held, _)) if *held > revision => {}
            _ => {
                views.insert(id, (revision, view));
            }
        }
    }

    /// How many views are held.
    pub fn len(&self) -> usize {
        self.views.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no view is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_is_reused_only_at_its_revision() {
        let cache = ViewCache::default();
        cache.keep(ClusterId(1), 10, Bytes::from_static(b"ten"));
        let got = cache.current(&[(ClusterId(1), 10), (ClusterId(1), 11), (ClusterId(2), 10)]);
        assert_eq!(got, [Some(Bytes::from_static(b"ten")), None, None]);
    }

    #[test]
    fn an_older_rendering_never_replaces_a_newer_one() {
        let cache = ViewCache::default();
        cache.keep(ClusterId(1), 11, Bytes::from_static(b"eleven"));
        cache.keep(ClusterId(1), 10, Bytes::from_static(b"ten"));
        assert_eq!(
            cache.current(&[(ClusterId(1), 11)]),
            [Some(Bytes::from_static(b"eleven"))]
        );
        cache.keep(ClusterId(1), 12, Bytes::from_static(b"twelve"));
        assert_eq!(cache.current(&[(ClusterId(1), 11)]), [None]);
    }

    #[test]
    fn the_cache_is_bounded() {
        let cache = ViewCache::default();
        for id in 0..=i64::try_from(MAX_VIEWS).unwrap() {
            cache.keep(ClusterId(id), 1, Bytes::new());
        }
        assert!(cache.len() <= MAX_VIEWS, "{} views held", cache.len());
        assert!(!cache.is_empty());
    }
}
