//! Waiting for Ctrl-C or SIGTERM.

use tokio::signal::unix::{SignalKind, signal};

/// Resolves on SIGINT or SIGTERM.
pub async fn wait_for_signal() {
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received; shutting down"),
                _ = int.recv() => tracing::info!("interrupted; shutting down"),
            }
        }
        _ => {
            // No signal handling available: run until killed.
            std::future::pending::<()>().await;
        }
    }
}
