//! Recorded replies of numbered requests (Lustre's reply reconstruction): a client numbers
//! every request that changes state and resends it with the same number after a broken
//! connection or an MDT restart; the commit thread records the reply of each numbered
//! request that changed something in the same transaction as the change, and answers a
//! resend from that record instead of doing the operation again.
//!
//! Records are dropped when the client says it has every answer below a number (`acked`),
//! and at start-up when older than [`KEEP`]: no client resends for longer than that.
//!
//! A recorded reply that carries an open handle (create with open, open with `O_TRUNC`)
//! names a handle of the connection that sent the original, which is gone; the resend
//! gets a new handle on the same inode with the same access, as long as the inode exists.

use crate::commit::Origin;
use crate::engine::{Counters, Effects, Engine, Tx};
use crate::error::{Fail, StoreError, fail};
use crate::handles::{Handle, Undo};
use crate::store;
use redb::ReadableTable;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use weft_proto::mdt::{AccessMode, MdtReply, MdtRequest};
use weft_proto::{Errno, Fid, Timestamp};

/// How long records are kept at least (clients stop resending well before: 30 s).
pub const KEEP: std::time::Duration = std::time::Duration::from_secs(600);

/// A stored reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    /// When it was recorded (seconds since the epoch).
    pub at: i64,
    /// The reply sent.
    pub reply: MdtReply,
}

impl crate::store::Record for Recorded {}

fn key(client: uuid::Uuid, seq: u64) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..16].copy_from_slice(client.as_bytes());
    k[16..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// The reply recorded for `n`, if any.
pub(crate) fn recorded(tx: &Tx<'_>, n: &Origin) -> Result<Option<MdtReply>, StoreError> {
    match tx.replies.get(key(n.client, n.seq).as_slice())? {
        Some(v) => Ok(Some(store::decode::<Recorded>("replies", v.value())?.reply)),
        None => Ok(None),
    }
}

/// Records the reply of `n` and forgets the client's replies it has acknowledged.
pub(crate) fn record(
    counters: &Counters,
    tx: &mut Tx<'_>,
    n: &Origin,
    reply: &MdtReply,
) -> Result<(), StoreError> {
    let v = store::encode(&Recorded {
        at: Timestamp::now().sec,
        reply: reply.clone(),
    })?;
    tx.replies
        .insert(key(n.client, n.seq).as_slice(), v.as_slice())?;
    if n.acked > 0 {
        let (from, to) = (key(n.client, 0), key(n.client, n.acked));
        let old: Vec<Vec<u8>> = tx
            .replies
            .range::<&[u8]>(from.as_slice()..to.as_slice())?
            .map(|e| e.map(|(k, _)| k.value().to_vec()))
            .collect::<Result<_, _>>()?;
        for k in old {
            tx.replies.remove(k.as_slice())?;
        }
    }
    counters.reply_records.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Drops records older than [`KEEP`]; returns how many.
pub(crate) fn expire(tx: &mut Tx<'_>) -> Result<usize, StoreError> {
    let limit = Timestamp::now().sec - KEEP.as_secs() as i64;
    let mut old = Vec::new();
    for e in tx.replies.iter()? {
        let (k, v) = e?;
        // A record that cannot be read is of no use to anyone either.
        let stale = store::decode::<Recorded>("replies", v.value()).map_or(true, |r| r.at < limit);
        if stale {
            old.push(k.value().to_vec());
        }
    }
    for k in &old {
        tx.replies.remove(k.as_slice())?;
    }
    Ok(old.len())
}

/// The answer to a resend of `req`, from its recorded reply.
pub(crate) fn reconstruct(
    engine: &mut Engine,
    tx: &mut Tx<'_>,
    fx: &mut Effects,
    conn: u64,
    req: &MdtRequest,
    reply: MdtReply,
) -> Result<MdtReply, Fail> {
    let access = match req {
        MdtRequest::Create {
            open: Some(flags), ..
        }
        | MdtRequest::Open { flags, .. } => flags.access,
        _ => return Ok(reply),
    };
    match reply {
        MdtReply::Created {
            attr,
            layout,
            handle: Some(_),
            created,
            parent,
        } => {
            let handle = reopen(engine, tx, fx, conn, attr.fid, access)?;
            Ok(MdtReply::Created {
                attr,
                layout,
                handle: Some(handle),
                created,
                parent,
            })
        }
        MdtReply::Opened { attr, layout, .. } => {
            let handle = reopen(engine, tx, fx, conn, attr.fid, access)?;
            Ok(MdtReply::Opened {
                handle,
                attr,
                layout,
            })
        }
        other => Ok(other),
    }
}

/// A new handle on `fid` for the connection that resent an open.
fn reopen(
    engine: &mut Engine,
    tx: &Tx<'_>,
    fx: &mut Effects,
    conn: u64,
    fid: Fid,
    access: AccessMode,
) -> Result<u64, Fail> {
    if store::get_inode(&tx.inodes, fid)?.is_none() {
        return Err(fail(Errno::Stale, "the file opened has been removed since"));
    }
    let id = engine.handles().open(
        conn,
        Handle {
            fid,
            access,
            pins: None,
        },
    );
    fx.undo.push(Undo::Opened(conn, id));
    Ok(id)
}
