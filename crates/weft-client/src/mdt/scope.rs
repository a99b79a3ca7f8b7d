//! What a request may change, for the client's change tracking ([`crate::changes`]):
//! which inodes, and which entry (whether it may alter attributes at all is
//! [`MdtRequest::may_change_attrs`], from the request table).

use crate::changes::Scope;
use weft_proto::Fid;
use weft_proto::mdt::MdtRequest;

/// The inodes whose attributes a request that may change attributes may alter (see
/// [`crate::changes`]): the ones it names, when every inode it changes is named (the
/// entry a create makes or an unlink removes is never a directory whose attributes the
/// client keeps); every inode otherwise.
pub(super) fn change_scope(req: &MdtRequest) -> Scope {
    match req {
        MdtRequest::Create { parent, .. }
        | MdtRequest::Mkdir { parent, .. }
        | MdtRequest::MkdirOn { parent, .. }
        | MdtRequest::MkdirStriped { parent, .. }
        | MdtRequest::Symlink { parent, .. }
        | MdtRequest::Unlink { parent, .. } => Scope::one(*parent),
        MdtRequest::Link {
            fid, new_parent, ..
        } => Scope::Inodes([Some(*fid), Some(*new_parent)]),
        MdtRequest::SetAttr { fid, .. }
        | MdtRequest::SetXattr { fid, .. }
        | MdtRequest::RemoveXattr { fid, .. }
        | MdtRequest::SetDirDefault { fid, .. }
        | MdtRequest::Open { fid, .. } => Scope::one(*fid),
        // Sent for regular files only (a `File`'s handle): no directory changes.
        MdtRequest::Close { .. } | MdtRequest::SizeMerge { .. } => Scope::NO_DIRECTORY,
        _ => Scope::All,
    }
}

/// The directory entry a request makes or removes (directory and name), tracked so that
/// a listing read before it is not trusted for that name after it (see
/// [`crate::changes`]). A create also opens (and may truncate) an existing name.
pub(super) fn changed_entry(req: &MdtRequest) -> Option<(Fid, &[u8])> {
    match req {
        MdtRequest::Create { parent, name, .. }
        | MdtRequest::Mkdir { parent, name, .. }
        | MdtRequest::MkdirOn { parent, name, .. }
        | MdtRequest::MkdirStriped { parent, name, .. }
        | MdtRequest::Symlink { parent, name, .. }
        | MdtRequest::Unlink { parent, name, .. } => Some((*parent, name)),
        MdtRequest::Link {
            new_parent,
            new_name,
            ..
        } => Some((*new_parent, new_name)),
        _ => None,
    }
}
