//! POSIX permission checks, as Linux's `generic_permission`, `may_delete` and friends do
//! them (no ACLs): owner, group (primary or supplementary) or other bits, and the root
//! bypass, which does not extend to executing a file with no execute bit at all.

use crate::store::Inode;
use weft_proto::mdt::{Credentials, FileKind};
use weft_proto::{Errno, WireError};

/// Read permission.
pub const MAY_READ: u32 = 4;
/// Write permission.
pub const MAY_WRITE: u32 = 2;
/// Execute (search, for directories) permission.
pub const MAY_EXEC: u32 = 1;

/// Set-user-id bit.
pub const S_ISUID: u32 = 0o4000;
/// Set-group-id bit.
pub const S_ISGID: u32 = 0o2000;
/// Sticky bit.
pub const S_ISVTX: u32 = 0o1000;
/// Group execute bit.
pub const S_IXGRP: u32 = 0o010;

/// Whether `cred` may access `ino` with `mask` (a combination of `MAY_*`).
pub fn permits(ino: &Inode, cred: &Credentials, mask: u32) -> bool {
    if cred.uid == 0 {
        // CAP_DAC_OVERRIDE: everything but executing a non-directory nobody may execute.
        return mask & MAY_EXEC == 0 || ino.kind == FileKind::Directory || ino.mode & 0o111 != 0;
    }
    let bits = if cred.uid == ino.uid {
        ino.mode >> 6
    } else if cred.in_group(ino.gid) {
        ino.mode >> 3
    } else {
        ino.mode
    };
    bits & 7 & mask == mask
}

/// [`permits`], as an EACCES error.
pub fn check(ino: &Inode, cred: &Credentials, mask: u32) -> Result<(), WireError> {
    if permits(ino, cred, mask) {
        Ok(())
    } else {
        Err(WireError::new(Errno::Access, "permission denied"))
    }
}

/// Whether `cred` owns `ino` or is root (`inode_owner_or_capable`).
pub fn owner_or_root(ino: &Inode, cred: &Credentials) -> bool {
    cred.uid == 0 || cred.uid == ino.uid
}

/// The sticky-bit rule: in a sticky directory only the owner of the entry, the owner of the
/// directory or root may remove or rename the entry (EPERM otherwise).
pub fn check_sticky(dir: &Inode, victim: &Inode, cred: &Credentials) -> Result<(), WireError> {
    if dir.mode & S_ISVTX == 0 || cred.uid == 0 || cred.uid == victim.uid || cred.uid == dir.uid {
        Ok(())
    } else {
        Err(WireError::new(
            Errno::Perm,
            "sticky directory: not the owner",
        ))
    }
}

/// The owner, group and mode of a new inode in `dir` (`inode_init_owner` with
/// `mode_strip_sgid`): a set-group-id directory gives its group to new entries and its
/// S_ISGID bit to new subdirectories; a new non-directory keeps S_ISGID (with group
/// execute) only if the caller is in its group or is root.
pub fn new_owner(dir: &Inode, cred: &Credentials, kind: FileKind, mode: u32) -> (u32, u32, u32) {
    let mut mode = mode & 0o7777;
    let gid = if dir.mode & S_ISGID != 0 {
        dir.gid
    } else {
        cred.gid
    };
    if kind == FileKind::Directory {
        if dir.mode & S_ISGID != 0 {
            mode |= S_ISGID;
        }
    } else if mode & (S_ISGID | S_IXGRP) == (S_ISGID | S_IXGRP)
        && !cred.in_group(gid)
        && cred.uid != 0
    {
        mode &= !S_ISGID;
    }
    (cred.uid, gid, mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::Timestamp;

    fn ino(kind: FileKind, mode: u32, uid: u32, gid: u32) -> Inode {
        Inode::new(kind, mode, uid, gid, Timestamp::default())
    }

    fn cred(uid: u32, gid: u32, groups: &[u32]) -> Credentials {
        Credentials {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn permission_table() {
        use FileKind::*;
        let r = MAY_READ;
        let w = MAY_WRITE;
        let x = MAY_EXEC;
        // (kind, mode, owner uid, owner gid, caller, mask, allowed)
        let cases = [
            (Regular, 0o644, 1, 1, cred(1, 1, &[]), r | w, true),
            (Regular, 0o644, 1, 1, cred(2, 1, &[]), w, false),
            (Regular, 0o644, 1, 1, cred(2, 1, &[]), r, true),
            (Regular, 0o640, 1, 5, cred(2, 9, &[5]), r, true),
            (Regular, 0o640, 1, 5, cred(2, 9, &[]), r, false),
            // Owner bits win even when they are narrower than group or other bits.
            (Regular, 0o077, 1, 1, cred(1, 1, &[]), r, false),
            (Regular, 0o707, 1, 5, cred(2, 5, &[]), r, false),
            (Regular, 0o007, 1, 5, cred(2, 6, &[]), r | w | x, true),
            (Regular, 0o000, 1, 1, cred(0, 0, &[]), r | w, true),
            (Regular, 0o600, 1, 1, cred(0, 0, &[]), x, false),
            (Regular, 0o601, 1, 1, cred(0, 0, &[]), x, true),
            (Directory, 0o000, 1, 1, cred(0, 0, &[]), r | w | x, true),
            (Directory, 0o755, 1, 1, cred(2, 2, &[]), x, true),
            (Directory, 0o755, 1, 1, cred(2, 2, &[]), w | x, false),
            (Directory, 0o730, 1, 7, cred(2, 2, &[7]), w | x, true),
            (Directory, 0o700, 1, 1, cred(2, 2, &[]), x, false),
        ];
        for (i, (kind, mode, uid, gid, c, mask, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                permits(&ino(kind, mode, uid, gid), &c, mask),
                want,
                "case {i}"
            );
        }
    }

    #[test]
    fn sticky_bit_protects_other_users_entries() {
        let dir = ino(FileKind::Directory, 0o1777, 10, 10);
        let victim = ino(FileKind::Regular, 0o644, 20, 20);
        assert!(check_sticky(&dir, &victim, &cred(20, 0, &[])).is_ok());
        assert!(check_sticky(&dir, &victim, &cred(10, 0, &[])).is_ok());
        assert!(check_sticky(&dir, &victim, &cred(0, 0, &[])).is_ok());
        let e = check_sticky(&dir, &victim, &cred(30, 20, &[]))
            .err()
            .map(|e| e.errno);
        assert_eq!(e, Some(Errno::Perm));
        let plain = ino(FileKind::Directory, 0o777, 10, 10);
        assert!(check_sticky(&plain, &victim, &cred(30, 0, &[])).is_ok());
    }

    #[test]
    fn setgid_directories_pass_on_group_and_bit() {
        let dir = ino(FileKind::Directory, 0o2775, 1, 50);
        let c = cred(2, 2, &[]);
        assert_eq!(
            new_owner(&dir, &c, FileKind::Directory, 0o755),
            (2, 50, 0o2755)
        );
        assert_eq!(
            new_owner(&dir, &c, FileKind::Regular, 0o644),
            (2, 50, 0o644)
        );
        // Not in group 50: S_ISGID with group exec is stripped from a new file.
        assert_eq!(
            new_owner(&dir, &c, FileKind::Regular, 0o2755),
            (2, 50, 0o755)
        );
        // Without group exec it is kept (mandatory-locking marker), as Linux does.
        assert_eq!(
            new_owner(&dir, &c, FileKind::Regular, 0o2745),
            (2, 50, 0o2745)
        );
        // Members and root keep it.
        assert_eq!(
            new_owner(&dir, &cred(2, 2, &[50]), FileKind::Regular, 0o2755).2,
            0o2755
        );
        assert_eq!(
            new_owner(&dir, &cred(0, 0, &[]), FileKind::Regular, 0o2755).2,
            0o2755
        );
        let plain = ino(FileKind::Directory, 0o775, 1, 50);
        assert_eq!(
            new_owner(&plain, &c, FileKind::Directory, 0o755),
            (2, 2, 0o755)
        );
    }
}
