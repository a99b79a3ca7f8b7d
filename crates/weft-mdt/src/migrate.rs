//! `weft migrate -m`: a directory's metadata moved to another MDT, online.
//!
//! The MDT holding the directory's name coordinates, with an intent
//! ([`IntentKind::Migrate`]) on that name, in two phases, each rolled forward after a crash:
//!
//! 1. **copy**: the directory is *frozen* on its MDT ([`MdtRequest::FreezeDir`]): it reads
//!    as before, but every request that would change it (a name made, removed or renamed
//!    in it, its attributes or extended attributes) answers EINPROGRESS, which clients
//!    resend until the migration is over. A new directory is made on the target MDT with
//!    the same owner, mode and defaults (`CreateRemoteDir`, once per operation), the
//!    entries are copied into it page by page ([`MdtRequest::InsertEntries`]: the names
//!    move, the inodes they name stay where they are), subdirectories' ".." point at it
//!    (`SetParent`), and its extended attributes and times are copied. The finish then
//!    gives the name to the new directory, records the client's reply and keeps the
//!    intent, marked with the new directory.
//! 2. **drop**: the old directory, still frozen, loses its inode, then its entries
//!    (without touching the inodes they name; [`MdtRequest::DropMigrated`]), and the
//!    intent goes.
//!
//! Clients that hold the old directory's FID (an open directory, a working directory, a
//! path being resolved) get ESTALE from the first `DropMigrated` on (its inode is gone),
//! as if it had been replaced; paths resolve to the new one. Striped directories are not
//! migrated (EOPNOTSUPP), and the intent reserves the name meanwhile: renames and
//! removals of it wait like changes inside it.
//!
//! [`IntentKind::Migrate`]: crate::remote::IntentKind::Migrate
//! [`MdtRequest::FreezeDir`]: weft_proto::mdt::MdtRequest::FreezeDir
//! [`MdtRequest::InsertEntries`]: weft_proto::mdt::MdtRequest::InsertEntries
//! [`MdtRequest::DropMigrated`]: weft_proto::mdt::MdtRequest::DropMigrated

use crate::commit::Origin;
use crate::dir_moves::unexpected;
use crate::engine::{Effects, Engine, Tx};
use crate::error::{Fail, fail};
use crate::failpoints;
use crate::mdt::Mdt;
use crate::names::check_name;
use crate::namespace::{Caller, EntryAt, load_dir};
use crate::remote::{IntentKind, pending};
use crate::store::{self, Dirent};
use redb::ReadableTable;
use serde::{Deserialize, Serialize};
use weft_proto::mdt::{
    Attr, Credentials, FileKind, MdtReply, MdtRequest, SetAttr, TimeSet, XattrMode,
};
use weft_proto::{Errno, Fid, WireError, WireResult};

/// Most entries in one [`MdtRequest::InsertEntries`] (and one copied page).
pub const MAX_INSERT: usize = 1024;
/// Most entries one [`MdtRequest::DropMigrated`] removes.
const DROP_PAGE: u32 = 4096;

/// Who froze a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Freezer {
    from: u32,
    op: u64,
}

impl crate::store::Record for Freezer {}

/// The directories a client request changes (its parents, or the inode it changes), which
/// must not be frozen.
fn changed_dirs(req: &MdtRequest) -> [Option<Fid>; 2] {
    match req {
        MdtRequest::Create { parent, .. }
        | MdtRequest::Mkdir { parent, .. }
        | MdtRequest::MkdirOn { parent, .. }
        | MdtRequest::MkdirStriped { parent, .. }
        | MdtRequest::Symlink { parent, .. }
        | MdtRequest::Unlink { parent, .. }
        | MdtRequest::Rmdir { parent, .. }
        | MdtRequest::InsertEntry { parent, .. }
        | MdtRequest::MigrateDir { parent, .. }
        | MdtRequest::ImportEntries { parent, .. } => [Some(*parent), None],
        MdtRequest::Link { new_parent, .. } => [Some(*new_parent), None],
        MdtRequest::Rename {
            src_parent,
            dst_parent,
            ..
        } => [Some(*src_parent), Some(*dst_parent)],
        MdtRequest::SetAttr { fid, .. }
        | MdtRequest::SetXattr { fid, .. }
        | MdtRequest::RemoveXattr { fid, .. }
        | MdtRequest::SetDirDefault { fid, .. }
        | MdtRequest::SetLayout { fid, .. } => [Some(*fid), None],
        _ => [None, None],
    }
}

impl Engine {
    /// EINPROGRESS if `req` would change a directory frozen for a migration.
    pub(crate) fn check_unfrozen(tx: &Tx<'_>, req: &MdtRequest) -> Result<(), Fail> {
        for fid in changed_dirs(req).into_iter().flatten() {
            if tx.frozen.get(fid.to_bytes().as_slice())?.is_some() {
                return Err(fail(
                    Errno::InProgress,
                    "the directory is being migrated to another MDT",
                ));
            }
        }
        Ok(())
    }

    /// Step 1 of a migration: the checks, and the intent on the name.
    pub(crate) fn prepare_migrate(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        at: &EntryAt<'_>,
        mdt: u32,
        who: &Caller<'_>,
    ) -> Result<MdtReply, Fail> {
        let EntryAt { parent, name } = *at;
        let Caller { cred, origin } = *who;
        Self::existing_intent(tx, parent, name, origin, Errno::Busy)?;
        if cred.uid != 0 {
            return Err(fail(Errno::Perm, "only root migrates directories"));
        }
        load_dir(&tx.inodes, &tx.dir_stripes, parent, cred)?;
        check_name(name)?;
        if !self.cluster.has_mdt(mdt) {
            return Err(fail(Errno::Inval, format!("there is no MDT {mdt}")));
        }
        let de = store::get_dirent(&tx.dirents, parent, name)?
            .ok_or_else(|| fail(Errno::NoEnt, "no such entry"))?;
        if de.kind != FileKind::Directory {
            return Err(fail(Errno::NotDir, "only directories are migrated"));
        }
        if self.cluster.mdt_of(de.fid) == Some(mdt) {
            // There already.
            return Ok(MdtReply::Entry {
                fid: de.fid,
                kind: de.kind,
            });
        }
        let kind = IntentKind::Migrate {
            dir: de.fid,
            mdt,
            new: None,
        };
        self.start_intent(tx, fx, at, kind, origin)
    }

    /// The directory's MDT: freezes (or thaws) it for a migration.
    pub(crate) fn freeze_dir(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        from: u32,
        op: u64,
        freeze: bool,
    ) -> Result<MdtReply, Fail> {
        let ino = crate::namespace::load(&tx.inodes, fid)?;
        if !ino.is_dir() {
            return Err(fail(Errno::NotDir, "not a directory"));
        }
        let key = fid.to_bytes();
        let held: Option<Freezer> = store::get(&tx.frozen, "frozen", &key)?;
        let me = Freezer { from, op };
        if !freeze {
            if held == Some(me) {
                tx.frozen.remove(key.as_slice())?;
                fx.wrote = true;
            }
            return Ok(MdtReply::Ok);
        }
        match held {
            Some(h) if h == me => return Ok(MdtReply::Ok),
            Some(_) => {
                return Err(fail(Errno::Busy, "the directory is being migrated already"));
            }
            None => {}
        }
        if store::get_stripes(&tx.dir_stripes, fid)?.is_some() || ino.nlink == 0 {
            return Err(fail(Errno::NotSup, "striped directories are not migrated"));
        }
        if crate::remote::any_in(&tx.intents, fid)? {
            return Err(fail(
                Errno::Busy,
                "a cross-MDT operation is changing a name in the directory",
            ));
        }
        let v = store::encode(&me)?;
        tx.frozen.insert(key.as_slice(), v.as_slice())?;
        fx.wrote = true;
        Ok(MdtReply::Ok)
    }

    /// The target MDT: adds copied entries to the new directory of a migration.
    pub(crate) fn insert_entries(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        dir: Fid,
        entries: &[(Vec<u8>, Fid, FileKind)],
    ) -> Result<MdtReply, Fail> {
        if entries.len() > MAX_INSERT {
            return Err(fail(
                Errno::Inval,
                format!("at most {MAX_INSERT} entries at a time"),
            ));
        }
        let mut ino = crate::namespace::load(&tx.inodes, dir)?;
        if !ino.is_dir() {
            return Err(fail(Errno::NotDir, "not a directory"));
        }
        let mut new = Vec::new();
        for (name, fid, kind) in entries {
            check_name(name)?;
            match store::get_dirent(&tx.dirents, dir, name)? {
                Some(d) if d.fid == *fid => {}
                Some(_) => return Err(fail(Errno::Exist, "another entry has that name")),
                None => new.push((name, *fid, *kind)),
            }
        }
        let subdirs = new
            .iter()
            .filter(|(_, _, k)| *k == FileKind::Directory)
            .count();
        ino.nlink = u32::try_from(subdirs)
            .ok()
            .and_then(|n| ino.nlink.checked_add(n))
            .ok_or_else(|| fail(Errno::MLink, "too many subdirectories"))?;
        // Mutations start here.
        for (name, fid, kind) in new {
            let de = store::encode(&Dirent { fid, kind })?;
            tx.dirents
                .insert(store::dirent_key(dir, name).as_slice(), de.as_slice())?;
        }
        self.put_inode(tx, fx, dir, &ino)?;
        Ok(MdtReply::Ok)
    }

    /// The old directory's MDT: removes the migrated (frozen) directory `fid`'s inode,
    /// then up to `max` of its entries per call; once none is left, its frozen mark, and
    /// the job is done. The inode goes first: from then on lookups and listings of the old
    /// FID answer ESTALE (its inode is missing, as for any directory gone) and the client
    /// looks the path up again, where a lookup in a half-emptied directory would miss a
    /// name that moved.
    pub(crate) fn drop_migrated(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        max: u32,
    ) -> Result<MdtReply, Fail> {
        let key = fid.to_bytes();
        let ino = store::get_inode(&tx.inodes, fid)?;
        if tx.frozen.get(key.as_slice())?.is_none() {
            return match ino {
                // Dropped whole already (a resend).
                None => Ok(MdtReply::Progress { done: true }),
                Some(_) => Err(fail(Errno::Inval, "the directory is not being migrated")),
            };
        }
        let (start, end) = store::dirent_range(fid, 0);
        let mut keys = Vec::new();
        for e in tx
            .dirents
            .range::<&[u8]>(start.as_slice()..end.as_slice())?
        {
            if keys.len() >= max.clamp(1, DROP_PAGE) as usize {
                break;
            }
            keys.push(e?.0.value().to_vec());
        }
        // Mutations start here.
        if let Some(mut ino) = ino {
            ino.nlink = 0;
            self.destroy_inode(tx, fx, fid, &ino)?;
        }
        if !keys.is_empty() {
            for k in keys {
                tx.dirents.remove(k.as_slice())?;
            }
            fx.wrote = true;
            return Ok(MdtReply::Progress { done: false });
        }
        tx.frozen.remove(key.as_slice())?;
        if let Some(v) = tx.remote_dirs.remove(key.as_slice())? {
            let op_key = v.value().to_vec();
            tx.remote_ops.remove(op_key.as_slice())?;
        }
        fx.wrote = true;
        Ok(MdtReply::Progress { done: true })
    }

    /// Step 3, first phase: the name goes to the new directory `new`; the intent stays,
    /// marked, for the old directory to be dropped (returned to be driven on).
    pub(crate) fn migrate_switch(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        intent: &crate::remote::Intent,
        new: &Attr,
    ) -> Result<MdtReply, Fail> {
        let IntentKind::Migrate { dir, mdt, .. } = &intent.kind else {
            return Err(fail(Errno::Proto, "not a migration"));
        };
        let stored = pending(&tx.intents, intent.parent, &intent.name)?;
        match stored {
            Some(s) if s.op == intent.op => {}
            // Switched by another driver, or finished: its reply holds.
            _ => {
                return Ok(MdtReply::Attr(new.clone()));
            }
        }
        // The parent's names do not change (nor its times): only the inode one names.
        if let Some(d) = store::get_dirent(&tx.dirents, intent.parent, &intent.name)?
            && d.fid == *dir
        {
            let de = store::encode(&Dirent {
                fid: new.fid,
                kind: FileKind::Directory,
            })?;
            tx.dirents.insert(
                store::dirent_key(intent.parent, &intent.name).as_slice(),
                de.as_slice(),
            )?;
            fx.wrote = true;
        }
        let reply = MdtReply::Attr(new.clone());
        if intent.seq != 0 {
            let origin = Origin {
                client: intent.client,
                seq: intent.seq,
                acked: 0,
                resendable: true,
            };
            crate::replies::record(&self.counters, tx, &origin, &reply)?;
        }
        let mut next = intent.clone();
        next.kind = IntentKind::Migrate {
            dir: *dir,
            mdt: *mdt,
            new: Some(new.clone()),
        };
        self.put_intent(tx, fx, &next)?;
        Err(Fail::CrossMdt(Box::new(next)))
    }
}

impl Mdt {
    /// Step 2, first phase: freeze, make the new directory, copy into it. The answer is
    /// the new directory's attributes; a refusal thaws the old directory.
    pub(crate) async fn migrate_copy(
        &self,
        op: u64,
        parent: Fid,
        dir: Fid,
        mdt: u32,
    ) -> WireResult<Result<MdtReply, WireError>> {
        let freeze = |freeze| MdtRequest::FreezeDir {
            fid: dir,
            from: self.index(),
            op,
            freeze,
        };
        let home = self.cluster().mdt_of(dir);
        if let Err(e) = self.peer(home, freeze(true)).await? {
            return Ok(Err(e));
        }
        match self.migrate_copy_frozen(op, parent, dir, mdt).await {
            Ok(attr) => Ok(Ok(MdtReply::Attr(attr))),
            // The intent stays, frozen directory and all, for the next run.
            Err(e) if self.shutting_down() => Err(e),
            Err(e) => {
                tracing::error!(%dir, mdt, error = %e, "migration refused; the directory stays");
                let _ = self.peer(home, freeze(false)).await?;
                Ok(Err(e))
            }
        }
    }

    async fn migrate_copy_frozen(
        &self,
        op: u64,
        parent: Fid,
        dir: Fid,
        mdt: u32,
    ) -> WireResult<Attr> {
        let root = Credentials::root();
        let attr = match self
            .read_at(dir, MdtRequest::DirParent { fid: dir })
            .await?
        {
            MdtReply::DirParent { attr, .. } => attr,
            other => return Err(unexpected("a parent lookup", &other)),
        };
        let default_layout = match self
            .read_at(dir, MdtRequest::GetLayout { fid: dir })
            .await?
        {
            MdtReply::Template(t) => t,
            other => return Err(unexpected("a default layout", &other)),
        };
        let dir_default = match self
            .read_at(dir, MdtRequest::GetDirDefault { fid: dir })
            .await?
        {
            MdtReply::DirDefault(d) => d,
            other => return Err(unexpected("a directory default", &other)),
        };
        let made = MdtRequest::CreateRemoteDir {
            from: self.index(),
            op,
            parent,
            mode: attr.mode,
            uid: attr.uid,
            gid: attr.gid,
            default_layout,
            dir_default,
        };
        let new = match self.peer(Some(mdt), made).await?? {
            MdtReply::Attr(a) => a.fid,
            other => return Err(unexpected("a directory create", &other)),
        };
        // The entries, page by page (again from the start after a crash: inserting is
        // idempotent).
        let mut cookie = 0;
        loop {
            let page = MdtRequest::ReadDir {
                fid: dir,
                cookie,
                max_entries: MAX_INSERT as u32,
                plus: false,
                cred: root.clone(),
            };
            let (entries, eof) = match self.read_at(dir, page).await? {
                MdtReply::Entries { entries, eof } => (entries, eof),
                other => return Err(unexpected("a directory page", &other)),
            };
            if let Some(last) = entries.last() {
                cookie = last.cookie;
            }
            let copy: Vec<_> = entries
                .iter()
                .map(|e| (e.name.clone(), e.fid, e.kind))
                .collect();
            if !copy.is_empty() {
                let req = MdtRequest::InsertEntries {
                    dir: new,
                    entries: copy,
                };
                self.peer(Some(mdt), req).await??;
            }
            for e in entries.iter().filter(|e| e.kind == FileKind::Directory) {
                self.set_parent(e.fid, dir, new).await?;
            }
            if eof || entries.is_empty() {
                break;
            }
        }
        failpoints::hit(failpoints::MIGRATE_COPIED);
        // Extended attributes, then times (the copy changed the new one's).
        let names = match self
            .read_at(
                dir,
                MdtRequest::ListXattr {
                    fid: dir,
                    cred: root.clone(),
                },
            )
            .await?
        {
            MdtReply::XattrNames(n) => n,
            other => return Err(unexpected("xattr names", &other)),
        };
        for name in names {
            let get = MdtRequest::GetXattr {
                fid: dir,
                name: name.clone(),
                cred: root.clone(),
            };
            let value = match self.read_at(dir, get).await {
                Ok(MdtReply::Xattr(v)) => v,
                Err(e) if e.errno == Errno::NoData => continue,
                Ok(other) => return Err(unexpected("an xattr", &other)),
                Err(e) => return Err(e),
            };
            let set = MdtRequest::SetXattr {
                fid: new,
                name,
                value,
                mode: XattrMode::Any,
                cred: root.clone(),
            };
            self.peer(Some(mdt), set).await??;
        }
        let times = MdtRequest::SetAttr {
            fid: new,
            set: SetAttr {
                atime: Some(TimeSet::At(attr.atime)),
                mtime: Some(TimeSet::At(attr.mtime)),
                ..SetAttr::default()
            },
            cred: root,
        };
        match self.peer(Some(mdt), times).await?? {
            MdtReply::Attr(a) => Ok(a),
            other => Err(unexpected("a time change", &other)),
        }
    }

    /// Step 2, second phase: the old directory's entries and inode go.
    pub(crate) async fn migrate_drop(&self, dir: Fid) -> WireResult<Result<MdtReply, WireError>> {
        failpoints::hit(failpoints::MIGRATE_SWITCHED);
        loop {
            let req = MdtRequest::DropMigrated {
                fid: dir,
                max: DROP_PAGE,
            };
            match self.peer(self.cluster().mdt_of(dir), req).await? {
                Ok(MdtReply::Progress { done: true }) => return Ok(Ok(MdtReply::Ok)),
                Ok(MdtReply::Progress { done: false }) => {}
                Ok(other) => return Ok(Err(unexpected("a drop", &other))),
                Err(e) => return Ok(Err(e)),
            }
        }
    }
}
