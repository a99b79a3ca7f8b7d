//! Peers to tell when the configuration changes.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Something that wants to hear about configuration changes: a connected peer, in practice
/// (the service adapts the transport's callback sender to this), or a test probe.
pub trait ConfigSubscriber: Send + Sync + 'static {
    /// Announces configuration `version`. Fire and forget; returns `false` once the peer is
    /// gone for good, so it can be forgotten.
    fn config_changed(&self, version: u64) -> bool;
}

/// The subscribers, by connection id.
#[derive(Default)]
pub(crate) struct Subscribers {
    map: Mutex<HashMap<u64, Arc<dyn ConfigSubscriber>>>,
}

impl Subscribers {
    pub(crate) fn contains(&self, id: u64) -> bool {
        self.map.lock().contains_key(&id)
    }

    pub(crate) fn insert(&self, id: u64, sub: Arc<dyn ConfigSubscriber>) {
        self.map.lock().insert(id, sub);
    }

    pub(crate) fn remove(&self, id: u64) {
        self.map.lock().remove(&id);
    }

    pub(crate) fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Tells everyone about `version`, forgetting the peers that are gone.
    pub(crate) fn notify(&self, version: u64) {
        let subs: Vec<(u64, Arc<dyn ConfigSubscriber>)> = self
            .map
            .lock()
            .iter()
            .map(|(id, s)| (*id, Arc::clone(s)))
            .collect();
        let gone: Vec<u64> = subs
            .into_iter()
            .filter(|(_, s)| !s.config_changed(version))
            .map(|(id, _)| id)
            .collect();
        if !gone.is_empty() {
            let mut map = self.map.lock();
            for id in gone {
                map.remove(&id);
            }
        }
    }
}
