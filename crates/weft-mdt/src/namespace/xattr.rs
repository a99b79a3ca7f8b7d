//! Extended attributes: namespaces, their permission rules, setting and removing.

use super::*;

/// Which namespace an extended attribute name is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum XattrNs {
    User,
    Trusted,
    Security,
}

/// Checks an attribute name (ERANGE for empty or too long, EOPNOTSUPP for an unknown
/// namespace, EINVAL for a bare prefix) and returns its namespace.
pub(crate) fn xattr_ns(name: &[u8]) -> Result<XattrNs, WireError> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(WireError::new(
            Errno::Range,
            "bad extended attribute name length",
        ));
    }
    if name.contains(&0) {
        return Err(WireError::new(Errno::Inval, "NUL in attribute name"));
    }
    let (ns, rest) = if let Some(r) = name.strip_prefix(b"user.") {
        (XattrNs::User, r)
    } else if let Some(r) = name.strip_prefix(b"trusted.") {
        (XattrNs::Trusted, r)
    } else if let Some(r) = name.strip_prefix(b"security.") {
        (XattrNs::Security, r)
    } else {
        return Err(WireError::new(
            Errno::NotSup,
            "unsupported attribute namespace",
        ));
    };
    if rest.is_empty() {
        return Err(WireError::new(
            Errno::Inval,
            "attribute name is only a prefix",
        ));
    }
    Ok(ns)
}

/// Linux's `xattr_permission`.
pub(crate) fn xattr_permission(
    ino: &Inode,
    cred: &Credentials,
    ns: XattrNs,
    write: bool,
) -> Result<(), WireError> {
    let refused = |what: &str| {
        if write {
            WireError::new(Errno::Perm, what.to_string())
        } else {
            WireError::new(Errno::NoData, what.to_string())
        }
    };
    match ns {
        XattrNs::Security => Ok(()),
        XattrNs::Trusted if cred.uid != 0 => Err(refused("trusted.* is for root")),
        XattrNs::Trusted => Ok(()),
        XattrNs::User => {
            if !matches!(ino.kind, FileKind::Regular | FileKind::Directory) {
                return Err(refused("user.* only on files and directories"));
            }
            if write
                && ino.is_dir()
                && ino.mode & perm::S_ISVTX != 0
                && !perm::owner_or_root(ino, cred)
            {
                return Err(WireError::new(Errno::Perm, "sticky directory"));
            }
            perm::check(ino, cred, if write { MAY_WRITE } else { MAY_READ })
        }
    }
}

/// An extended attribute to set: the fields of [`weft_proto::mdt::MdtRequest::SetXattr`]
/// but the inode and the caller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewXattr<'a> {
    /// Its name, with the namespace prefix.
    pub name: &'a [u8],
    /// Its value.
    pub value: &'a [u8],
    /// Create only, replace only, or either.
    pub mode: XattrMode,
}

impl Engine {
    /// Sets the extended attribute `x` of `fid`.
    pub(crate) fn setxattr(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        x: &NewXattr<'_>,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let NewXattr { name, value, mode } = *x;
        let mut ino = load(&tx.inodes, fid)?;
        let ns = xattr_ns(name)?;
        if value.len() > XATTR_VALUE_MAX {
            // Linux says E2BIG, which the wire errno set lacks; ERANGE is the closest.
            return Err(fail(Errno::Range, "extended attribute value too large"));
        }
        xattr_permission(&ino, cred, ns, true)?;
        let key = store::xattr_key(fid, name);
        let exists = tx.xattrs.get(key.as_slice())?.is_some();
        match mode {
            XattrMode::Create if exists => return Err(fail(Errno::Exist, "attribute exists")),
            XattrMode::Replace if !exists => return Err(fail(Errno::NoData, "no such attribute")),
            _ => {}
        }
        // Mutations start here.
        let mut v = Vec::with_capacity(value.len() + 1);
        v.push(store::RECORD_VERSION);
        v.extend_from_slice(value);
        tx.xattrs.insert(key.as_slice(), v.as_slice())?;
        ino.ctime = Timestamp::now();
        self.put_inode(tx, fx, fid, &ino)?;
        Ok(MdtReply::Ok)
    }

    pub(crate) fn removexattr(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        name: &[u8],
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let mut ino = load(&tx.inodes, fid)?;
        let ns = xattr_ns(name)?;
        xattr_permission(&ino, cred, ns, true)?;
        let key = store::xattr_key(fid, name);
        if tx.xattrs.get(key.as_slice())?.is_none() {
            return Err(fail(Errno::NoData, "no such attribute"));
        }
        // Mutations start here.
        tx.xattrs.remove(key.as_slice())?;
        ino.ctime = Timestamp::now();
        self.put_inode(tx, fx, fid, &ino)?;
        Ok(MdtReply::Ok)
    }
}
