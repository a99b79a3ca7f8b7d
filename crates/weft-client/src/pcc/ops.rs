//! The client's operations through its persistent cache: adding the cache, opening and
//! creating files through it, attaching and detaching files, and the copy-back of a
//! read-write copy after its last close (copy-in and the MDT side are `copy` and
//! `remote`).

use super::local::{self, Kind, LocalCopy};
use super::store::RwState;
use super::*;
use crate::client::Client;
use crate::error::ClientError;
use crate::file::File;
use std::sync::Arc;
use weft_proto::mdt::{AccessMode, Credentials};
use weft_proto::{Errno, Fid};

impl Client {
    /// The client's persistent cache, if it has one.
    pub fn pcc(&self) -> Option<Arc<Pcc>> {
        self.pcc.read().clone()
    }

    /// Sets up the persistent cache `config` (one per client), resolving the rule's
    /// directories as root. Read-write files a crash left in the directory are copied
    /// into the file system in the background.
    pub async fn pcc_add(self: &Arc<Self>, mut config: PccConfig) -> Result<Arc<Pcc>, ClientError> {
        if self.pcc.read().is_some() {
            return Err(refused(Errno::Exist, "this client already has a PCC"));
        }
        for path in config.rule.paths() {
            let attr = self.resolve(&path, true, &Credentials::root()).await?;
            config.rule.resolve(&path, attr.fid);
        }
        let (dir, capacity) = (config.dir.clone(), config.capacity);
        let store = tokio::task::spawn_blocking(move || Store::open(&dir, capacity))
            .await
            .map_err(|e| ClientError::Invalid(format!("PCC open task: {e}")))?
            .map_err(|e| local::io_err(e, "directory"))?;
        let orphans = store.rw_orphans();
        let pcc = Arc::new(Pcc {
            config,
            store: parking_lot::Mutex::new(store),
            copying_in: Default::default(),
            copies: Arc::new(tokio::sync::Semaphore::new(COPIES)),
            copied_back: tokio::sync::Notify::new(),
            stats: Default::default(),
        });
        {
            let mut slot = self.pcc.write();
            if slot.is_some() {
                return Err(refused(Errno::Exist, "this client already has a PCC"));
            }
            *slot = Some(pcc.clone());
        }
        for fid in orphans {
            self.start_copy_back(&pcc, fid);
        }
        Ok(pcc)
    }

    /// Stops using the persistent cache (its directory stays as it is); false if there
    /// was none.
    pub fn pcc_del(&self) -> bool {
        self.pcc.write().take().is_some()
    }

    /// At every open: a read-write file of this cache is opened locally (waiting for a
    /// copy-back in progress to end first); a read-only copy is used if the MDT's data
    /// version is the copy's, else dropped; an open for writing drops it too.
    pub(crate) async fn pcc_on_open(
        self: &Arc<Self>,
        file: &File,
        opts: crate::OpenOptions,
    ) -> Result<(), ClientError> {
        let access = opts.access;
        let Some(pcc) = self.pcc() else { return Ok(()) };
        if file.attr_at_open().kind != weft_proto::mdt::FileKind::Regular {
            return Ok(());
        }
        let fid = file.fid();
        loop {
            let waiter = pcc.copied_back.notified();
            let mut waiter = std::pin::pin!(waiter);
            waiter.as_mut().enable();
            let path = {
                let mut s = pcc.store.lock();
                let path = s.rw_path(fid);
                match s.rw(fid) {
                    None => break,
                    Some(e) if e.state == RwState::Copying => None,
                    Some(e) => {
                        e.opens += 1;
                        Some(path)
                    }
                }
            };
            match path {
                None => waiter.await,
                Some(path) => {
                    let local = match LocalCopy::open(
                        pcc.clone(),
                        Kind::ReadWrite,
                        path,
                        Some(self.rw_close_hook(&pcc, fid)),
                    ) {
                        Ok(l) => l,
                        Err(e) => {
                            self.pcc_rw_closed(&pcc, fid);
                            return Err(e);
                        }
                    };
                    if opts.truncate && access != AccessMode::Read {
                        local.set_len(0)?;
                    }
                    file.attach_local(local)?;
                    return Ok(());
                }
            }
        }
        let version = file.attr_at_open().data_version;
        let current = {
            let mut s = pcc.store.lock();
            s.ro_use(fid)
                .map(|e| (e.version == version, s.ro_path(fid, &e)))
        };
        match current {
            Some((true, path)) if access == AccessMode::Read && !file.is_released() => {
                match LocalCopy::open(pcc.clone(), Kind::ReadOnly, path, None) {
                    Ok(local) => {
                        file.attach_local(local)?;
                        pcc.count(Stat::Hits, 1);
                    }
                    Err(e) => {
                        tracing::warn!(%fid, error = %e, "PCC copy unreadable: dropped");
                        pcc.drop_ro(fid);
                        pcc.count(Stat::Misses, 1);
                    }
                }
            }
            Some(_) => {
                pcc.drop_ro(fid);
                if access == AccessMode::Read {
                    pcc.count(Stat::Misses, 1);
                }
            }
            None if access == AccessMode::Read => pcc.count(Stat::Misses, 1),
            None => {}
        }
        Ok(())
    }

    /// After an open for reading that did not find a current copy: starts copying the
    /// file in if a read-only cache's rule takes it (`facts` as the mount knows them).
    pub fn pcc_consider(self: &Arc<Self>, file: &File, facts: &Facts<'_>) {
        let Some(pcc) = self.pcc() else { return };
        if pcc.config.mode != Mode::ReadOnly
            || file.pcc_attached()
            || !pcc.config.rule.matches(facts)
        {
            return;
        }
        self.start_copy_in(&pcc, file.fid());
    }

    /// After a create: a read-write cache whose rule takes the file (`facts`, without
    /// size) makes it locally and attaches `file` to it.
    pub async fn pcc_on_create(
        self: &Arc<Self>,
        file: &File,
        facts: &Facts<'_>,
    ) -> Result<(), ClientError> {
        let Some(pcc) = self.pcc() else { return Ok(()) };
        if pcc.config.mode != Mode::ReadWrite || !file.created() || !pcc.config.rule.matches(facts)
        {
            return Ok(());
        }
        let fid = file.fid();
        let path = pcc.store.lock().rw_path(fid);
        let made = path.clone();
        tokio::task::spawn_blocking(move || {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&made)?;
            // The name is durable at once: a crash after the application's fsync finds it.
            made.parent().map_or(Ok(()), weft_durable::sync_dir)
        })
        .await
        .map_err(|e| ClientError::Invalid(format!("PCC create task: {e}")))?
        .map_err(|e| local::io_err(e, "create"))?;
        pcc.store.lock().rw_insert(fid);
        if let Err(e) = self.pcc_rw_attach(&pcc, fid).await {
            // Not recorded on the MDT, so other clients would not wait for it: the file
            // is written to the file system as usual.
            tracing::warn!(%fid, error = %e, "PCC attach refused: the file is not cached");
            pcc.store.lock().rw_remove(fid);
            let _ = std::fs::remove_file(&path);
            return Ok(());
        }
        match LocalCopy::open(
            pcc.clone(),
            Kind::ReadWrite,
            path,
            Some(self.rw_close_hook(&pcc, fid)),
        ) {
            Ok(local) => file.attach_local(local),
            Err(e) => {
                self.pcc_rw_closed(&pcc, fid);
                Err(e)
            }
        }
    }

    /// What a handle of read-write file `fid`'s copy runs when it closes.
    fn rw_close_hook(self: &Arc<Self>, pcc: &Arc<Pcc>, fid: Fid) -> local::OnClose {
        // The handle's client (a per-request one, in the FUSE mount) is kept, as the file
        // kept it before: the copy-back it starts needs a client.
        let (client, pcc) = (self.clone(), pcc.clone());
        Box::new(move || client.pcc_rw_closed(&pcc, fid))
    }

    /// A handle of read-write file `fid` closed: after the last, the copy-back starts.
    pub(crate) fn pcc_rw_closed(self: &Arc<Self>, pcc: &Arc<Pcc>, fid: Fid) {
        let last = match pcc.store.lock().rw(fid) {
            Some(e) => {
                e.opens = e.opens.saturating_sub(1);
                e.opens == 0 && e.state == RwState::Dirty
            }
            None => false,
        };
        if last {
            self.start_copy_back(pcc, fid);
        }
    }

    /// Where `fid` stands in the cache.
    pub fn pcc_state(&self, fid: Fid) -> Option<FileState> {
        self.pcc().map(|p| p.state_of(fid))
    }

    /// Copies `fid` into a read-only cache now, whatever the rule says (in the
    /// background; [`pcc_state`](Self::pcc_state) tells when it is there).
    pub fn pcc_attach(self: &Arc<Self>, fid: Fid) -> Result<(), ClientError> {
        let pcc = self
            .pcc()
            .ok_or_else(|| refused(Errno::NoEnt, "no PCC on this client"))?;
        if pcc.config.mode != Mode::ReadOnly {
            return Err(refused(
                Errno::NotSup,
                "only files created under the rule go into a read-write PCC",
            ));
        }
        self.start_copy_in(&pcc, fid);
        Ok(())
    }

    /// Detaches `fid`: drops its read-only copy, or starts copying a read-write file
    /// back into the file system (EBUSY while a handle of it is open here).
    pub fn pcc_detach(self: &Arc<Self>, fid: Fid) -> Result<FileState, ClientError> {
        let pcc = self
            .pcc()
            .ok_or_else(|| refused(Errno::NoEnt, "no PCC on this client"))?;
        pcc.drop_ro(fid);
        let rw = pcc.store.lock().rw_peek(fid);
        if let Some(e) = rw {
            if e.opens > 0 {
                return Err(refused(Errno::Busy, "the file is open on this client"));
            }
            if e.state == RwState::Dirty {
                self.start_copy_back(&pcc, fid);
            }
        }
        Ok(pcc.state_of(fid))
    }
}
