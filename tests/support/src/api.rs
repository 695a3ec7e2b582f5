//! The REST API over an engine with a scripted prober: no token, no plugin.

use std::sync::Arc;

use vigil_engine::worker::Worker;
use vigil_store::Store;

use crate::engine::{Behaviour, ScriptedProber, settings};

/// A plugin catalog with no plugin.
#[derive(Debug)]
pub struct NoCatalog;

impl vigil_api::PluginCatalog for NoCatalog {
    fn plugins(&self) -> Vec<vigil_api::PluginView> {
        Vec::new()
    }

    fn reload(&self) -> vigil_api::BoxFuture<'_, Option<Result<vigil_api::ReloadView, String>>> {
        Box::pin(async { None })
    }
}

/// The REST API over `store`: no token, a healthy scripted prober, no plugin.
pub fn router(store: Store) -> axum::Router {
    router_with_events(store, Arc::default())
}

/// [`router`] with its event streams sharing `events`.
pub fn router_with_events(store: Store, events: Arc<vigil_api::EventFeed>) -> axum::Router {
    let settings = settings(60, 2);
    let worker = Worker::new(
        store.clone(),
        ScriptedProber::new(Behaviour::healthy()),
        settings,
    );
    vigil_api::app(vigil_api::ApiState {
        store,
        prober: Arc::new(worker.on_demand()),
        plugins: Arc::new(NoCatalog),
        access: vigil_api::Access::new(None, None, false).unwrap(),
        credential_roots: Vec::new().into(),
        defaults: settings.defaults,
        readiness: Arc::new(vigil_api::Readiness::default()),
        metrics: None,
        wake: worker.handle(),
        views: Arc::default(),
        registration_allow: Default::default(),
        events,
    })
}
