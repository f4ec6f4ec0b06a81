//! A model held for one request.

use super::registry::Registry;
use super::served::Served;
use std::sync::Arc;

/// A model held for one request: derefs to [`Served`]. While any lease of a model lives,
/// the model is busy and is never unloaded; dropping the last one marks it idle (its
/// keep-alive timer restarts, and a model asked to unload goes now).
pub struct Lease {
    served: Arc<Served>,
    registry: Arc<Registry>,
    /// The registry's slot of this model.
    slot: usize,
}

impl Lease {
    /// Called by the registry with the model's busy count already raised.
    pub(super) fn new(served: Arc<Served>, registry: Arc<Registry>, slot: usize) -> Lease {
        Lease {
            served,
            registry,
            slot,
        }
    }

    /// The model itself, for what outlives the borrow of the lease (a request's
    /// `Choices`, which count aborts in its metrics). It does not keep the model busy.
    pub fn served(&self) -> Arc<Served> {
        self.served.clone()
    }
}

impl std::ops::Deref for Lease {
    type Target = Served;
    fn deref(&self) -> &Served {
        &self.served
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.registry.release(self.slot);
    }
}
