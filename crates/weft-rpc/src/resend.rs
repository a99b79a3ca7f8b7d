//! Request sequence numbers for resends. A client numbers the requests that change state
//! and sends a resent request with the same number; the server records the reply of each
//! numbered request it carries out (durably, with the change itself) and answers a resend
//! from that record, so an operation whose reply was lost in a crash or a broken
//! connection is neither done twice nor reported as failed (EEXIST for a mkdir that did
//! happen). `acked` tells the server which records it may drop.
//!
//! Like the job id, the numbers travel in the [`weft_proto::RequestHeader`] of the request
//! sent inside [`with_seq`]'s scope; on the server, the handler runs inside the same scope
//! and reads them with [`current`].

use std::future::Future;

tokio::task_local! {
    static SEQ: (u64, u64);
}

/// Runs `fut` with requests numbered `seq`, telling the server that every request below
/// `acked` has been answered.
pub async fn with_seq<F: Future>(seq: u64, acked: u64, fut: F) -> F::Output {
    SEQ.scope((seq, acked), fut).await
}

/// `(seq, acked)` of the current scope; `(0, 0)` outside one.
pub fn current() -> (u64, u64) {
    SEQ.try_with(|s| *s).unwrap_or((0, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_scope_sets_the_numbers() {
        assert_eq!(current(), (0, 0));
        assert_eq!(with_seq(7, 5, async { current() }).await, (7, 5));
    }
}
