//! [`AbortOnDrop`]: a spawned task that ends with its owner.

use tokio::task::JoinHandle;

/// Aborts its task when dropped: a background task (a connection's writer, a metrics
/// endpoint, a listing's page fetcher) stops when what owns it goes, not at process exit.
pub struct AbortOnDrop<T>(pub JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
