//! weftfs attributes in the kernel's form: file types, timestamps and `stat` fields as
//! fuser takes them.

use fuser::{FileAttr, FileType, INodeNo};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weft_proto::mdt::{Attr, FileKind};
use weft_proto::time::Timestamp;

/// `st_blksize` of regular files: large, so that stdio and `cp` move data in big requests.
const FILE_BLKSIZE: u32 = 1 << 20;

/// The kernel's file type for a weftfs kind.
pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::Regular => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

/// A wire timestamp as a `SystemTime` (times before 1970 included).
pub fn system_time(t: Timestamp) -> SystemTime {
    let nanos = Duration::from_nanos(u64::from(t.nsec));
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.sec.unsigned_abs()) + nanos
    } else {
        (UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs())) + nanos
    }
}

/// A `SystemTime` as a wire timestamp.
pub fn timestamp(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp {
            sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nsec: d.subsec_nanos(),
        },
        Err(e) => {
            let d = e.duration();
            let mut sec = -i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            let mut nsec = d.subsec_nanos();
            if nsec > 0 {
                sec -= 1;
                nsec = 1_000_000_000 - nsec;
            }
            Timestamp { sec, nsec }
        }
    }
}

/// The kernel's attributes of inode `ino`.
pub fn file_attr(ino: u64, a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: a.size,
        blocks: a.blocks,
        atime: system_time(a.atime),
        mtime: system_time(a.mtime),
        ctime: system_time(a.ctime),
        crtime: system_time(a.ctime),
        kind: file_type(a.kind),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        // Linux device numbers fit in 32 bits (new_encode_dev); larger ones cannot be shown.
        rdev: u32::try_from(a.rdev).unwrap_or(0),
        blksize: if a.kind == FileKind::Regular {
            FILE_BLKSIZE
        } else {
            4096
        },
        flags: 0,
    }
}

/// Attributes for the `.` and `..` entries of a readdirplus reply, which the kernel skips
/// without reading them: a directory with inode number `ino` and nothing else.
pub fn unread_dir_attr(ino: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::Directory,
        perm: 0o755,
        nlink: 2,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip_before_and_after_1970() {
        for (sec, nsec) in [(0, 0), (1_700_000_000, 123), (-1, 5), (-100, 999_999_999)] {
            let t = Timestamp { sec, nsec };
            assert_eq!(timestamp(system_time(t)), t);
        }
    }
}
