//! Read-only operations, each in its own redb read transaction (a consistent snapshot of
//! the last commit), run on blocking threads concurrently with the commit thread.

use crate::error::{Fail, fail};
use crate::handles::Handles;
use crate::names::check_name;
use crate::namespace::{XATTR_LIST_MAX, load, load_dir, not_striped, xattr_ns, xattr_permission};
use crate::perm::{self, MAY_READ};
use crate::store::{self, Dirent, Readable};
use parking_lot::Mutex;
use redb::{Database, ReadableDatabase, ReadableTableMetadata};
use std::path::Path;
use weft_proto::mdt::{Credentials, DirEntry, FileKind, MdtReply, MdtRequest, ScanEntry, StatFs};
use weft_proto::{Errno, Fid, NAME_MAX};

/// Most entries in one readdir page, whatever the client asks.
pub const READDIR_MAX_ENTRIES: usize = 4096;
/// Most entries in one scan page: a layout can hold up to 2000 stripes (~10 KiB
/// encoded), and 256 of those stay well inside the 4 MiB frame body limit.
pub const SCAN_MAX_ENTRIES: u32 = 256;
/// Budget of encoded bytes for one readdir page (well under the 4 MiB frame body limit).
const READDIR_MAX_BYTES: usize = 2 << 20;
/// Approximate encoded size of one entry besides its name (FID, kind, cookie, attributes).
const ENTRY_OVERHEAD: usize = 160;

/// Entries a page is allocated for up front (clients ask for about 1,024).
const DIR_PAGE_HINT: usize = 1024;
/// Bytes of store an inode is assumed to need, to estimate free inodes from free space.
const INODE_BYTES_ESTIMATE: u64 = 1024;

/// Runs one read-only request.
pub(crate) fn run(
    db: &Database,
    dir: &Path,
    handles: &Mutex<Handles>,
    req: &MdtRequest,
) -> Result<MdtReply, Fail> {
    let r = db.begin_read().map_err(crate::error::StoreError::from)?;
    let inodes = r
        .open_table(store::INODES)
        .map_err(crate::error::StoreError::from)?;
    let open_count = |fid: Fid| handles.lock().open_count(fid);
    match req {
        MdtRequest::Lookup { parent, name, cred } => {
            let dirents = r
                .open_table(store::DIRENTS)
                .map_err(crate::error::StoreError::from)?;
            let stripes = r
                .open_table(store::DIR_STRIPES)
                .map_err(crate::error::StoreError::from)?;
            load_dir(&inodes, &stripes, *parent, cred)?;
            check_name(name)?;
            let de = store::get_dirent(&dirents, *parent, name)?
                .ok_or_else(|| fail(Errno::NoEnt, "no such entry"))?;
            match store::get_inode(&inodes, de.fid)? {
                Some(ino) => Ok(MdtReply::Attr(ino.attr(de.fid, open_count(de.fid)))),
                // A remote directory: its MDT has the attributes.
                None => Ok(MdtReply::Entry {
                    fid: de.fid,
                    kind: de.kind,
                }),
            }
        }
        MdtRequest::GetDirStripes { fid } => {
            let stripes = r
                .open_table(store::DIR_STRIPES)
                .map_err(crate::error::StoreError::from)?;
            load(&inodes, *fid)?;
            Ok(MdtReply::DirStripes(store::get_stripes(&stripes, *fid)?))
        }
        MdtRequest::GetDirDefault { fid } => {
            let defaults = r
                .open_table(store::DIR_DEFAULTS)
                .map_err(crate::error::StoreError::from)?;
            load(&inodes, *fid)?;
            Ok(MdtReply::DirDefault(store::get_dir_default(
                &defaults, *fid,
            )?))
        }
        MdtRequest::DirParent { fid } => {
            let ino = load(&inodes, *fid)?;
            if !ino.is_dir() {
                return Err(fail(Errno::NotDir, "not a directory"));
            }
            Ok(MdtReply::DirParent {
                parent: ino.parent,
                attr: ino.attr(*fid, open_count(*fid)),
            })
        }
        MdtRequest::GetAttr { fid } => {
            let ino = load(&inodes, *fid)?;
            Ok(MdtReply::Attr(ino.attr(*fid, open_count(*fid))))
        }
        MdtRequest::ReadLink { fid } => {
            let ino = load(&inodes, *fid)?;
            if ino.kind != FileKind::Symlink {
                return Err(fail(Errno::Inval, "not a symlink"));
            }
            Ok(MdtReply::Link(ino.symlink))
        }
        MdtRequest::ReadDir {
            fid,
            cookie,
            max_entries,
            plus,
            cred,
        } => {
            let dirents = r
                .open_table(store::DIRENTS)
                .map_err(crate::error::StoreError::from)?;
            let stripes = r
                .open_table(store::DIR_STRIPES)
                .map_err(crate::error::StoreError::from)?;
            let want = PageOf {
                fid: *fid,
                cookie: *cookie,
                max_entries: *max_entries,
                plus: *plus,
            };
            readdir(&inodes, &dirents, &stripes, handles, &want, cred)
                .map(|(entries, eof)| MdtReply::Entries { entries, eof })
        }
        MdtRequest::ScanDir {
            fid,
            cookie,
            max_entries,
            cred,
        } => {
            let dirents = r
                .open_table(store::DIRENTS)
                .map_err(crate::error::StoreError::from)?;
            // Layouts make entries larger: a page holds fewer of them.
            let max = (*max_entries).min(SCAN_MAX_ENTRIES);
            let stripes = r
                .open_table(store::DIR_STRIPES)
                .map_err(crate::error::StoreError::from)?;
            let want = PageOf {
                fid: *fid,
                cookie: *cookie,
                max_entries: max,
                plus: true,
            };
            let (page, eof) = readdir(&inodes, &dirents, &stripes, handles, &want, cred)?;
            let mut entries = Vec::with_capacity(page.len());
            for entry in page {
                let layout = store::get_inode(&inodes, entry.fid)?.and_then(|i| i.layout);
                entries.push(ScanEntry { entry, layout });
            }
            Ok(MdtReply::Scanned { entries, eof })
        }
        MdtRequest::GetXattr { fid, name, cred } => {
            let xattrs = r
                .open_table(store::XATTRS)
                .map_err(crate::error::StoreError::from)?;
            let ino = load(&inodes, *fid)?;
            let ns = xattr_ns(name)?;
            xattr_permission(&ino, cred, ns, false)?;
            match xattrs
                .get(store::xattr_key(*fid, name).as_slice())
                .map_err(crate::error::StoreError::from)?
            {
                Some(v) => Ok(MdtReply::Xattr(
                    v.value().get(1..).unwrap_or_default().to_vec(),
                )),
                None => Err(fail(Errno::NoData, "no such attribute")),
            }
        }
        MdtRequest::ListXattr { fid, cred } => {
            let xattrs = r
                .open_table(store::XATTRS)
                .map_err(crate::error::StoreError::from)?;
            load(&inodes, *fid)?;
            listxattr(&xattrs, *fid, cred)
        }
        MdtRequest::GetLayout { fid } => {
            let ino = load(&inodes, *fid)?;
            if ino.is_dir() {
                Ok(MdtReply::Template(ino.default_layout))
            } else {
                Ok(MdtReply::Layout(ino.layout))
            }
        }
        MdtRequest::StatFs => {
            let used = inodes.len().map_err(crate::error::StoreError::from)?;
            statfs(dir, used)
        }
        MdtRequest::HsmArchiveRef { fid } => {
            load(&inodes, *fid)?;
            let xattrs = r
                .open_table(store::XATTRS)
                .map_err(crate::error::StoreError::from)?;
            Ok(MdtReply::Archive(crate::hsm::get_archive(&xattrs, *fid)?))
        }
        _ => Err(fail(Errno::Proto, "not a read operation")),
    }
}

fn listxattr(xattrs: &impl Readable, fid: Fid, cred: &Credentials) -> Result<MdtReply, Fail> {
    let (start, end) = store::fid_prefix_range(fid);
    let keys = crate::engine::collect_keys(xattrs, &start, end.as_deref())?;
    let mut names = Vec::new();
    let mut total = 0usize;
    for k in keys {
        let name = k.get(16..).unwrap_or_default().to_vec();
        if cred.uid != 0 && name.starts_with(b"trusted.") {
            continue;
        }
        total += name.len() + 1;
        if total > XATTR_LIST_MAX {
            return Err(fail(Errno::Range, "attribute list too large"));
        }
        names.push(name);
    }
    Ok(MdtReply::XattrNames(names))
}

/// A page of a directory a reader asks for: the fields of
/// [`MdtRequest::ReadDir`] but the caller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageOf {
    /// The directory.
    pub fid: Fid,
    /// Where the page starts: 0, or the last cookie of the page before.
    pub cookie: u64,
    /// At most this many entries.
    pub max_entries: u32,
    /// With each entry's attributes.
    pub plus: bool,
}

/// One page of a directory, in hash order after `want.cookie`.
///
/// A page never ends in the middle of a group of names with equal hashes (the cookie is the
/// hash, so the next page resumes after the whole group): a trailing partial group is left
/// for the next page, and a single group larger than a page is returned whole.
pub(crate) fn readdir(
    inodes: &impl Readable,
    dirents: &impl Readable,
    stripes: &impl Readable,
    handles: &Mutex<Handles>,
    want: &PageOf,
    cred: &Credentials,
) -> Result<(Vec<DirEntry>, bool), Fail> {
    let PageOf {
        fid,
        cookie,
        max_entries,
        plus,
    } = *want;
    let dir = load(inodes, fid)?;
    if !dir.is_dir() {
        return Err(fail(Errno::NotDir, "not a directory"));
    }
    not_striped(stripes, fid)?;
    perm::check(&dir, cred, MAY_READ)?;
    if max_entries == 0 {
        return Err(fail(Errno::Inval, "a page of zero entries"));
    }
    let max = usize::try_from(max_entries)
        .unwrap_or(usize::MAX)
        .min(READDIR_MAX_ENTRIES);
    let from = if cookie == 0 {
        0
    } else {
        match cookie.checked_add(1) {
            Some(c) => c,
            None => return Ok((Vec::new(), true)),
        }
    };
    let (start, end) = store::dirent_range(fid, from);
    // Entries go straight into the reply; attributes are added after the scan.
    let mut page: Vec<DirEntry> = Vec::with_capacity(max.min(DIR_PAGE_HINT));
    let mut bytes = 0usize;
    let mut eof = true;
    for item in dirents
        .range::<&[u8]>(start.as_slice()..end.as_slice())
        .map_err(crate::error::StoreError::from)?
    {
        let (k, v) = item.map_err(crate::error::StoreError::from)?;
        let (hash, name) = store::split_dirent_key(k.value())?;
        // One group of names with one hash fills the page: it cannot be split, so it
        // goes out whole.
        let one_group = page.first().is_some_and(|e| e.cookie == hash);
        if (page.len() >= max || bytes >= READDIR_MAX_BYTES) && !one_group {
            // A group never straddles two pages: the cookie of the next page must follow
            // all of it.
            while page.last().map(|e| e.cookie) == Some(hash) {
                page.pop();
            }
            eof = false;
            break;
        }
        let de: Dirent = store::decode("dirents", v.value())?;
        bytes += name.len() + ENTRY_OVERHEAD;
        page.push(DirEntry {
            name: name.to_vec(),
            fid: de.fid,
            kind: de.kind,
            cookie: hash,
            attr: None,
        });
    }
    if plus {
        for e in &mut page {
            // Only attributes: the layouts after them in the record are not decoded.
            e.attr = store::get_inode_attrs(inodes, e.fid)?
                .map(|a| a.attr(e.fid, handles.lock().open_count(e.fid)));
        }
    }
    Ok((page, eof))
}

fn statfs(dir: &Path, used_inodes: u64) -> Result<MdtReply, Fail> {
    let s = rustix::fs::statvfs(dir).map_err(|e| fail(Errno::Io, format!("statvfs: {e}")))?;
    let frsize = if s.f_frsize > 0 {
        s.f_frsize
    } else {
        s.f_bsize.max(1)
    };
    let ffree = s.f_bavail.saturating_mul(frsize) / INODE_BYTES_ESTIMATE;
    Ok(MdtReply::StatFs(StatFs {
        bsize: u32::try_from(frsize).unwrap_or(4096),
        blocks: s.f_blocks,
        bfree: s.f_bfree,
        bavail: s.f_bavail,
        files: used_inodes.saturating_add(ffree),
        ffree,
        namelen: NAME_MAX as u32,
    }))
}
