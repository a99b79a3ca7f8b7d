//! Layout changes after a file is created: instantiating PFL components on first write
//! into their extent, and swapping layouts for `weft migrate`.
//!
//! A swap moves the file's old layout to the volatile (unlinked, open) file the migration
//! copied into, so the old objects are destroyed with that inode. Handles that opened the
//! file before the swap still read the old objects: each such handle pins the volatile
//! inode (see [`crate::handles::Handle::pins`]), and the inode is destroyed only when
//! neither the migration tool nor any pinning reader holds it. After an MDT restart no
//! handle survives, and the volatile orphan is destroyed with the other orphans.

use crate::engine::{Effects, Engine, Tx};
use crate::error::{Fail, fail};
use crate::namespace::load;
use crate::perm::{self, MAY_WRITE};
use crate::store;
use weft_proto::layout::TemplateComponent;
use weft_proto::mdt::{AccessMode, Credentials, FileKind, MdtReply};
use weft_proto::{Errno, Fid, Layout, Timestamp};

/// A layout swap of `weft migrate`: the fields of
/// [`weft_proto::mdt::MdtRequest::SwapLayouts`] but the caller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayoutSwap {
    /// The file migrated.
    pub fid: Fid,
    /// The volatile (unlinked) copy its data was copied into.
    pub volatile: Fid,
    /// The caller's handle of the volatile copy, open for writing.
    pub handle: u64,
    /// The file's data version when the copy started.
    pub data_version: u64,
}

impl Engine {
    /// Chooses OSTs for every uninstantiated component overlapping `[start, end)` of the
    /// file open as `handle` on `conn`.
    pub(crate) fn instantiate(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        conn: u64,
        handle: u64,
        start: u64,
        end: u64,
    ) -> Result<MdtReply, Fail> {
        let h = self
            .handles()
            .get(conn, handle)
            .ok_or_else(|| fail(Errno::BadF, "no such handle"))?;
        if h.access == AccessMode::Read {
            return Err(fail(Errno::BadF, "handle not open for writing"));
        }
        if end <= start {
            return Err(fail(Errno::Inval, "empty range to instantiate"));
        }
        let mut ino = load(&tx.inodes, h.fid)?;
        let Some(mut layout) = ino.layout.clone() else {
            return Err(fail(Errno::Inval, "file has no layout"));
        };
        if !self.instantiate_range(&mut layout, start, end)? {
            return Ok(MdtReply::Layout(Some(layout)));
        }
        // Mutations start here.
        ino.layout = Some(layout);
        self.put_inode(tx, fx, h.fid, &ino)?;
        Ok(MdtReply::Layout(ino.layout))
    }

    /// Chooses OSTs for every uninstantiated component of `layout` overlapping
    /// `[start, end)` and bumps its generation; false (layout untouched) when there is
    /// none. Changes only `layout`: the caller stores it.
    pub(crate) fn instantiate_range(
        &mut self,
        layout: &mut Layout,
        start: u64,
        end: u64,
    ) -> Result<bool, Fail> {
        let wanted: Vec<usize> = layout
            .components
            .iter()
            .enumerate()
            .filter(|(_, c)| c.start < end && start < c.end && !c.is_instantiated())
            .map(|(i, _)| i)
            .collect();
        if wanted.is_empty() {
            return Ok(false);
        }
        let mut new = layout.clone();
        let osts = self.cluster.osts();
        let cluster = self.cluster.clone();
        let pool = move |name: &str| cluster.pool(name);
        for i in wanted {
            let Some(c) = new.components.get_mut(i) else {
                continue;
            };
            let template = TemplateComponent {
                end: c.end,
                stripe_count: c.stripe_count,
                stripe_size: c.stripe_size,
                stripe_offset: -1,
                ost_list: Vec::new(),
                pool: c.pool.clone(),
                compress: c.compress,
            };
            c.osts = self.placement.choose(&template, &osts, &pool)?;
        }
        new.generation = new.generation.saturating_add(1);
        new.validate()
            .map_err(|e| fail(Errno::Inval, e.to_string()))?;
        *layout = new;
        Ok(true)
    }

    /// Swaps the layouts of a file and its volatile copy (`swap`).
    pub(crate) fn swap_layouts(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        conn: u64,
        swap: &LayoutSwap,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let LayoutSwap {
            fid,
            volatile,
            handle,
            data_version,
        } = *swap;
        let h = self
            .handles()
            .get(conn, handle)
            .ok_or_else(|| fail(Errno::BadF, "no such handle"))?;
        if h.fid != volatile || h.access == AccessMode::Read {
            return Err(fail(
                Errno::BadF,
                "the handle is not the volatile file open for writing",
            ));
        }
        if fid == volatile {
            return Err(fail(Errno::Inval, "cannot swap a file with itself"));
        }
        let mut ino = load(&tx.inodes, fid)?;
        let mut vol = load(&tx.inodes, volatile)?;
        if ino.kind != FileKind::Regular || vol.kind != FileKind::Regular {
            return Err(fail(Errno::Inval, "only regular files swap layouts"));
        }
        perm::check(&ino, cred, MAY_WRITE)?;
        if vol.nlink != 0 {
            return Err(fail(Errno::Inval, "the volatile file must be unlinked"));
        }
        if ino.data_version != data_version {
            return Err(fail(
                Errno::Busy,
                "the file changed while it was copied (data version moved)",
            ));
        }
        if self.handles().has_writer(fid) {
            return Err(fail(Errno::Busy, "the file is open for writing"));
        }
        if vol.size != ino.size {
            return Err(fail(
                Errno::Inval,
                format!("the copy holds {} bytes, the file {}", vol.size, ino.size),
            ));
        }
        let (Some(old), Some(new)) = (ino.layout.take(), vol.layout.take()) else {
            return Err(fail(Errno::Inval, "both files need a layout"));
        };
        // Mutations start here. Components keep naming their objects under the FID they
        // were created for.
        let generation = old.generation.max(new.generation).saturating_add(1);
        ino.layout = Some(moved(new, volatile, generation));
        vol.layout = Some(moved(old, fid, generation));
        std::mem::swap(&mut ino.blocks, &mut vol.blocks);
        ino.written = true;
        ino.ctime = Timestamp::now();
        self.put_inode(tx, fx, fid, &ino)?;
        self.put_inode(tx, fx, volatile, &vol)?;
        let undo = self.handles().pin_readers(fid, volatile);
        fx.undo.extend(undo);
        Ok(MdtReply::Layout(ino.layout))
    }

    /// Destroys the unlinked inode `fid` if no handle holds or pins it any more.
    pub(crate) fn destroy_if_unused(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
    ) -> Result<(), Fail> {
        if self.handles().count(fid) != 0 {
            return Ok(());
        }
        if let Some(ino) = store::get_inode(&tx.inodes, fid)?
            && ino.nlink == 0
        {
            self.destroy_inode(tx, fx, fid, &ino)?;
        }
        Ok(())
    }
}

/// `layout` as it is stored on another file: objects keep their original FID.
fn moved(mut layout: Layout, owner: Fid, generation: u32) -> Layout {
    for c in &mut layout.components {
        c.object_fid.get_or_insert(owner);
    }
    layout.generation = generation;
    layout
}
