//! Applying one operation of a batch: the commit thread's dispatch from a write operation
//! or client request to the engine's operation, with resends of numbered requests
//! answered from their recorded replies.

use super::*;
use crate::hsm::{ArchivedCopy, FlagChange, ImportInto};
use crate::layouts::LayoutSwap;
use crate::namespace::{Caller, EntryAt, HandleSizes, NewDir, NewXattr, Renaming};
use crate::remote::{RemoteDir, RemoteOp};
use crate::remote_links::IncomingEntry;
use weft_proto::Fid;
use weft_proto::mdt::NewFile;

/// The open handle a request names, if any.
fn handle_of(req: &MdtRequest) -> Option<u64> {
    match req {
        MdtRequest::Close { handle, .. }
        | MdtRequest::SizeMerge { handle, .. }
        | MdtRequest::Instantiate { handle, .. }
        | MdtRequest::SwapLayouts { handle, .. } => Some(*handle),
        _ => None,
    }
}

/// Applies one operation.
pub(super) fn apply(
    engine: &mut Engine,
    tx: &mut Tx<'_>,
    fx: &mut Effects,
    conn: u64,
    op: &WriteOp,
) -> Result<MdtReply, Fail> {
    match op {
        WriteOp::Req(req, n) => apply_numbered(engine, tx, fx, conn, n, req, None),
        WriteOp::MoveDir(req, n, dm) => apply_numbered(engine, tx, fx, conn, n, req, Some(dm)),
        WriteOp::DropConn => engine.drop_conn(tx, fx, conn),
        WriteOp::ParkConn(client) => {
            engine.handles().park(conn, *client);
            Ok(MdtReply::Ok)
        }
        WriteOp::DropParked(client, before) => engine.drop_parked(tx, fx, *client, *before),
        WriteOp::GrantSeq(range) => {
            engine.grant(*range, fx);
            Ok(MdtReply::Ok)
        }
        WriteOp::HasFids => {
            if engine.fid_available() {
                Ok(MdtReply::Ok)
            } else {
                Err(Fail::NeedSeq)
            }
        }
        WriteOp::ReapOrphans => {
            let reaped = engine.reap_orphans(tx, fx)?;
            if reaped > 0 {
                tracing::info!(
                    reaped,
                    "destroyed orphans of the previous run nobody reopened"
                );
            }
            Ok(MdtReply::Ok)
        }
        WriteOp::FinishIntent(intent, outcome) => engine.finish_intent(tx, fx, intent, outcome),
        // `run_batch` makes the batch durable.
        WriteOp::Sync => Ok(MdtReply::Ok),
        WriteOp::HsmInstantiate(fid) => engine.hsm_instantiate(tx, fx, *fid),
        WriteOp::HsmRestored(fid, archive, generation) => {
            engine.hsm_restored(tx, fx, *fid, archive, *generation)
        }
        WriteOp::DestroyDone(seqs) => (|| {
            for s in seqs {
                tx.destroy.remove(s.to_be_bytes().as_slice())?;
            }
            fx.wrote = true;
            Ok(MdtReply::Ok)
        })(),
    }
}

/// A client request: a resend of a numbered one is answered from its recorded reply.
fn apply_numbered(
    engine: &mut Engine,
    tx: &mut Tx<'_>,
    fx: &mut Effects,
    conn: u64,
    n: &Origin,
    req: &MdtRequest,
    dm: Option<&DirMove>,
) -> Result<MdtReply, Fail> {
    if n.seq == 0 || !n.resendable {
        return apply_req(engine, tx, fx, conn, n, req, dm);
    }
    if let Some(reply) = crate::replies::recorded(tx, n)? {
        return crate::replies::reconstruct(engine, tx, fx, conn, req, reply);
    }
    // Record the reply only if the operation changed something: one that did not (a
    // failed check, a plain open) is harmless to run again, and recording it would cost a
    // commit.
    let wrote_before = std::mem::take(&mut fx.wrote);
    let r = apply_req(engine, tx, fx, conn, n, req, dm);
    if let Ok(reply) = &r
        && fx.wrote
    {
        crate::replies::record(&engine.counters, tx, n, reply)?;
    }
    fx.wrote |= wrote_before;
    r
}

/// The name `name` in `parent`, as a request gives it.
fn at<'a>(parent: &Fid, name: &'a [u8]) -> EntryAt<'a> {
    EntryAt {
        parent: *parent,
        name,
    }
}

/// The directory a mkdir request makes.
fn new_dir<'a>(parent: &Fid, name: &'a [u8], mode: &u32) -> NewDir<'a> {
    NewDir {
        at: at(parent, name),
        mode: *mode,
    }
}

fn apply_req(
    engine: &mut Engine,
    tx: &mut Tx<'_>,
    fx: &mut Effects,
    conn: u64,
    origin: &Origin,
    req: &MdtRequest,
    dm: Option<&DirMove>,
) -> Result<MdtReply, Fail> {
    // A handle this client opened on a connection that broke becomes this connection's.
    if let Some(h) = handle_of(req) {
        engine.handles().adopt(conn, origin.client, h);
    }
    // A directory being migrated to another MDT does not change (the client waits).
    Engine::check_unfrozen(tx, req)?;
    let by = |cred| Caller { cred, origin };
    let rop = |from: &u32, op: &u64| RemoteOp {
        from: *from,
        op: *op,
    };
    match req {
        MdtRequest::SetAttr { fid, set, cred } => engine.setattr(tx, fx, *fid, set, cred),
        MdtRequest::Create {
            parent,
            name,
            mode,
            rdev,
            exclusive,
            layout,
            open,
            cred,
        } => {
            let new = NewFile {
                parent: *parent,
                name,
                mode: *mode,
                rdev: *rdev,
                exclusive: *exclusive,
                layout: layout.as_ref(),
                open: *open,
            };
            engine.create(tx, fx, conn, &new, cred)
        }
        MdtRequest::Mkdir {
            parent,
            name,
            mode,
            cred,
        } => engine.mkdir_inheriting(tx, fx, &new_dir(parent, name, mode), &by(cred)),
        MdtRequest::Symlink {
            parent,
            name,
            target,
            cred,
        } => engine.symlink(tx, fx, *parent, name, target, cred),
        MdtRequest::Link {
            fid,
            new_parent,
            new_name,
            cred,
        } => engine.link(tx, fx, *fid, &at(new_parent, new_name), &by(cred)),
        MdtRequest::Unlink { parent, name, cred } => {
            engine.unlink(tx, fx, &at(parent, name), false, &by(cred))
        }
        MdtRequest::Rmdir { parent, name, cred } => {
            engine.unlink(tx, fx, &at(parent, name), true, &by(cred))
        }
        MdtRequest::MkdirOn {
            parent,
            name,
            mode,
            mdt,
            cred,
        } => engine.prepare_mkdir_on(tx, fx, &new_dir(parent, name, mode), *mdt, &by(cred)),
        MdtRequest::MkdirStriped {
            parent,
            name,
            mode,
            count,
            hash,
            cred,
        } => engine.prepare_mkdir_striped(
            tx,
            fx,
            &new_dir(parent, name, mode),
            *count,
            *hash,
            &by(cred),
        ),
        MdtRequest::SealDir { fid, seal } => engine.seal_dir(tx, fx, *fid, *seal),
        MdtRequest::AddLink { from, op, fid } => engine.add_link(tx, fx, &rop(from, op), *fid),
        MdtRequest::DropLink {
            from,
            op,
            fid,
            sticky_owner,
            cred,
        } => engine.drop_link(tx, fx, &rop(from, op), *fid, *sticky_owner, cred),
        MdtRequest::InsertEntry {
            from,
            op,
            parent,
            name,
            fid,
            kind,
            noreplace,
            cred,
        } => {
            let entry = IncomingEntry {
                at: at(parent, name),
                fid: *fid,
                kind: *kind,
                noreplace: *noreplace,
            };
            engine.insert_entry(tx, fx, &rop(from, op), &entry, cred)
        }
        MdtRequest::ForgetOps { from, ops } => engine.forget_ops(tx, fx, *from, ops),
        MdtRequest::MigrateDir {
            parent,
            name,
            mdt,
            cred,
        } => engine.prepare_migrate(tx, fx, &at(parent, name), *mdt, &by(cred)),
        MdtRequest::FreezeDir {
            fid,
            from,
            op,
            freeze,
        } => engine.freeze_dir(tx, fx, *fid, *from, *op, *freeze),
        MdtRequest::InsertEntries { dir, entries } => engine.insert_entries(tx, fx, *dir, entries),
        MdtRequest::DropMigrated { fid, max } => engine.drop_migrated(tx, fx, *fid, *max),
        MdtRequest::RenameLock {
            from,
            op,
            run,
            action,
        } => engine.rename_lock(tx, fx, *from, *op, *run, action),
        MdtRequest::SetParent {
            fid,
            old_parent,
            new_parent,
        } => engine.set_parent(tx, fx, *fid, *old_parent, *new_parent),
        MdtRequest::FsckRepair { repair } => engine.fsck_repair(tx, fx, repair),
        MdtRequest::SetDirDefault { fid, default, cred } => {
            engine.set_dir_default(tx, fx, *fid, default.as_ref(), cred)
        }
        MdtRequest::CreateRemoteDir {
            from,
            op,
            parent,
            mode,
            uid,
            gid,
            default_layout,
            dir_default,
        } => {
            let dir = RemoteDir {
                parent: *parent,
                mode: *mode,
                uid: *uid,
                gid: *gid,
                default_layout: default_layout.as_ref(),
                dir_default: dir_default.as_ref(),
            };
            engine.create_remote_dir(tx, fx, &rop(from, op), &dir)
        }
        MdtRequest::RemoveRemoteDir {
            fid,
            parent,
            sticky_owner,
            cred,
        } => engine.remove_remote_dir(tx, fx, *fid, *parent, *sticky_owner, cred),
        MdtRequest::Rename {
            src_parent,
            src_name,
            dst_parent,
            dst_name,
            flags,
            cred,
        } => {
            let r = Renaming {
                src: at(src_parent, src_name),
                dst: at(dst_parent, dst_name),
                flags: *flags,
            };
            engine.rename(tx, fx, &r, &by(cred), dm)
        }
        MdtRequest::SetXattr {
            fid,
            name,
            value,
            mode,
            cred,
        } => {
            let x = NewXattr {
                name,
                value,
                mode: *mode,
            };
            engine.setxattr(tx, fx, *fid, &x, cred)
        }
        MdtRequest::RemoveXattr { fid, name, cred } => engine.removexattr(tx, fx, *fid, name, cred),
        MdtRequest::Open { fid, flags, cred } => engine.open(tx, fx, conn, *fid, *flags, cred),
        MdtRequest::Close {
            handle,
            size,
            blocks,
            modified,
        }
        | MdtRequest::SizeMerge {
            handle,
            size,
            blocks,
            modified,
        } => {
            let seen = HandleSizes {
                handle: *handle,
                size: *size,
                blocks: *blocks,
                modified: *modified,
            };
            if matches!(req, MdtRequest::Close { .. }) {
                engine.close(tx, fx, conn, &seen)
            } else {
                engine.size_merge(tx, fx, conn, &seen)
            }
        }
        MdtRequest::SetLayout {
            fid,
            template,
            cred,
        } => engine.setlayout(tx, fx, *fid, template.as_ref(), cred),
        MdtRequest::Instantiate { handle, start, end } => {
            engine.instantiate(tx, fx, conn, *handle, *start, *end)
        }
        MdtRequest::SwapLayouts {
            fid,
            volatile,
            handle,
            data_version,
            cred,
        } => {
            let swap = LayoutSwap {
                fid: *fid,
                volatile: *volatile,
                handle: *handle,
                data_version: *data_version,
            };
            engine.swap_layouts(tx, fx, conn, &swap, cred)
        }
        MdtRequest::ImportEntries {
            parent,
            repo,
            entries,
            cred,
        } => {
            let into = ImportInto {
                parent: *parent,
                repo: *repo,
                cred,
            };
            engine.import_entries(tx, fx, conn, &into, entries)
        }
        MdtRequest::HsmRelease {
            fid,
            data_version,
            cred,
        } => engine.hsm_release(tx, fx, *fid, *data_version, cred),
        MdtRequest::HsmSetFlags {
            fid,
            set,
            clear,
            archive_id,
            cred,
        } => {
            let change = FlagChange {
                set: *set,
                clear: *clear,
                archive_id: *archive_id,
            };
            engine.hsm_set_flags(tx, fx, *fid, &change, cred)
        }
        MdtRequest::HsmArchived {
            fid,
            repo,
            data_version,
            archive,
            cred,
        } => {
            let copy = ArchivedCopy {
                repo: *repo,
                data_version: *data_version,
                archive,
            };
            engine.hsm_archived(tx, fx, *fid, &copy, cred)
        }
        MdtRequest::HsmPccRw {
            fid,
            owner,
            attach,
            cred,
        } => engine.hsm_pcc_rw(tx, fx, *fid, owner, *attach, cred),
        // Reads, lock requests and syncs (see `MdtRequest::class`) never come here.
        _ => Err(crate::error::fail(Errno::Proto, "not a write operation")),
    }
}
