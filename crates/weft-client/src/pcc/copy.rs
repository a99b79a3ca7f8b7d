//! Copies between the file system and the local directory, in the background, at most
//! [`COPIES`](super::COPIES) at a time: a read-only copy in (read through the client,
//! written under `tmp/`, synced, renamed into `ro/` with the data version it was read at),
//! and a read-write file back (written through the client, fsynced there, released on the
//! MDT, then dropped locally; on failure it stays, to be copied again at the next `detach`
//! or cache start).

use super::{Pcc, Stat, store::RoEntry, store::RwState};
use crate::client::{Client, OpenOptions};
use crate::error::ClientError;
use bytes::Bytes;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use weft_proto::mdt::{AccessMode, Credentials};
use weft_proto::{Errno, Fid};

/// Bytes read or written per step of a copy.
const CHUNK: u64 = 8 << 20;

fn task_err(e: tokio::task::JoinError) -> ClientError {
    ClientError::Invalid(format!("PCC copy task: {e}"))
}

impl Client {
    /// Starts copying `fid` in, unless it is already there or on its way.
    pub(crate) fn start_copy_in(self: &Arc<Self>, pcc: &Arc<Pcc>, fid: Fid) {
        if pcc.store.lock().ro_peek(fid).is_some() || !pcc.copying_in.lock().insert(fid) {
            return;
        }
        let (client, pcc) = (self.clone(), pcc.clone());
        tokio::spawn(async move {
            let r = client.copy_in(&pcc, fid).await;
            pcc.copying_in.lock().remove(&fid);
            match r {
                Ok(true) => pcc.count(Stat::CopyIns, 1),
                Ok(false) => {}
                Err(e) => {
                    pcc.count(Stat::CopyInErrors, 1);
                    tracing::warn!(%fid, error = %e, "PCC copy-in failed");
                }
            }
        });
    }

    /// Copies `fid` in; false if it does not fit.
    async fn copy_in(self: &Arc<Self>, pcc: &Arc<Pcc>, fid: Fid) -> Result<bool, ClientError> {
        let _permit = pcc.copies.acquire().await;
        let file = self
            .open_with(fid, OpenOptions::read(), &Credentials::root(), false)
            .await?;
        let (size, version) = (file.size().await, file.attr_at_open().data_version);
        let (evicted, reserved) = pcc.store.lock().reserve(size);
        pcc.remove_files(evicted, Stat::Evictions);
        if !reserved {
            let _ = file.close().await;
            return Ok(false);
        }
        let tmp = pcc.store.lock().tmp_path(fid);
        let copied = async {
            let out = Arc::new(
                std::fs::File::create(&tmp).map_err(|e| super::local::io_err(e, "create"))?,
            );
            let mut at = 0;
            while at < size {
                let data = file.read_at(at, CHUNK.min(size - at)).await?;
                if data.is_empty() {
                    break;
                }
                let (o, n) = (out.clone(), data.len() as u64);
                tokio::task::spawn_blocking(move || o.write_all_at(&data, at))
                    .await
                    .map_err(task_err)?
                    .map_err(|e| super::local::io_err(e, "write"))?;
                at += n;
            }
            if at != size {
                return Err(ClientError::Remote(weft_proto::WireError::new(
                    Errno::Io,
                    "the file ended early while copied in",
                )));
            }
            let o = out.clone();
            tokio::task::spawn_blocking(move || o.sync_data())
                .await
                .map_err(task_err)?
                .map_err(|e| super::local::io_err(e, "fsync"))?;
            Ok(())
        }
        .await;
        let _ = file.close().await;
        let entry = RoEntry { version, size };
        let placed = copied.and_then(|()| {
            let dest = pcc.store.lock().ro_path(fid, &entry);
            std::fs::rename(&tmp, &dest).map_err(|e| super::local::io_err(e, "rename"))
        });
        if let Err(e) = placed {
            let _ = std::fs::remove_file(&tmp);
            pcc.store.lock().unreserve(size);
            return Err(e);
        }
        let replaced = pcc.store.lock().ro_insert(fid, entry);
        pcc.remove_files(replaced.into_iter().collect(), Stat::Detaches);
        pcc.count(Stat::CopyInBytes, size);
        Ok(true)
    }

    /// Starts copying read-write file `fid` back into the file system.
    pub(crate) fn start_copy_back(self: &Arc<Self>, pcc: &Arc<Pcc>, fid: Fid) {
        match pcc.store.lock().rw(fid) {
            Some(e) if e.state == RwState::Dirty => e.state = RwState::Copying,
            _ => return,
        }
        let (client, pcc) = (self.clone(), pcc.clone());
        tokio::spawn(async move {
            let r = client.copy_back(&pcc, fid).await;
            let mut s = pcc.store.lock();
            match r {
                Ok(n) => {
                    s.rw_remove(fid);
                    drop(s);
                    pcc.count(Stat::CopyBacks, 1);
                    pcc.count(Stat::CopyBackBytes, n);
                }
                Err(e) => {
                    if let Some(e) = s.rw(fid) {
                        e.state = RwState::Dirty;
                    }
                    drop(s);
                    pcc.count(Stat::CopyBackErrors, 1);
                    tracing::warn!(%fid, error = %e, "PCC copy-back failed: the local file stays");
                }
            }
            pcc.copied_back.notify_waiters();
        });
    }

    /// Copies read-write file `fid` into the file system and drops the local file;
    /// returns the bytes copied.
    async fn copy_back(self: &Arc<Self>, pcc: &Arc<Pcc>, fid: Fid) -> Result<u64, ClientError> {
        let _permit = pcc.copies.acquire().await;
        let path = pcc.store.lock().rw_path(fid);
        let opts = OpenOptions {
            access: AccessMode::Write,
            create: None,
            exclusive: false,
            truncate: false,
            append: false,
        };
        let file = match self.open_with(fid, opts, &Credentials::root(), false).await {
            Ok(f) => f,
            Err(e) if e.errno() == Errno::NoEnt => {
                // Removed from the file system meanwhile: nothing to copy.
                let _ = std::fs::remove_file(&path);
                return Ok(0);
            }
            Err(e) => return Err(e),
        };
        let copied = async {
            let src =
                Arc::new(std::fs::File::open(&path).map_err(|e| super::local::io_err(e, "open"))?);
            let len = src
                .metadata()
                .map_err(|e| super::local::io_err(e, "stat"))?
                .len();
            let mut at = 0;
            while at < len {
                let (s, n) = (src.clone(), CHUNK.min(len - at) as usize);
                let data = tokio::task::spawn_blocking(move || {
                    let mut buf = vec![0u8; n];
                    s.read_exact_at(&mut buf, at).map(|()| Bytes::from(buf))
                })
                .await
                .map_err(task_err)?
                .map_err(|e| super::local::io_err(e, "read"))?;
                file.write_at(at, &data).await?;
                at += n as u64;
            }
            if file.size().await != len {
                file.truncate(len).await?;
            }
            file.fsync().await?;
            Ok(len)
        }
        .await;
        let closed = file.close().await;
        let len = copied?;
        closed?;
        // In the file system and fsynced: other clients may open it now.
        self.pcc_rw_detach(pcc, fid).await?;
        std::fs::remove_file(&path).map_err(|e| super::local::io_err(e, "remove"))?;
        Ok(len)
    }
}
