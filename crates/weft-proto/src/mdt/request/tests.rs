//! The request table pinned: every kind's opcode, name, class and flags, and the facts
//! that depend on a field's value.

use super::*;

/// Every row of the table as today's wire and behaviour have it: `Kind opcode name
/// Class flags...`. Opcodes are on the wire and names in every statistics consumer's
/// queries: a change here is a protocol change, made on purpose.
const PINNED: &str = "
Lookup 200 lookup Read squashes
GetAttr 201 getattr Read
SetAttr 202 setattr Change squashes
Create 203 create Change squashes
Mkdir 204 mkdir Change squashes
MkdirOn 233 mkdir_remote Change squashes
CreateRemoteDir 234 remote_dir_create Change server_only
RemoveRemoteDir 235 remote_dir_remove Change server_only squashes
MkdirStriped 236 mkdir_striped Change squashes
GetDirStripes 237 getdirstripe Read
SetDirDefault 246 setdirstripe_default Change squashes
GetDirDefault 247 getdirstripe_default Read
SealDir 238 seal_dir Change server_only
AddLink 239 remote_link_add Change server_only
DropLink 240 remote_link_drop Change server_only squashes
InsertEntry 241 remote_entry_insert Change server_only squashes
ForgetOps 242 remote_ops_forget Change server_only
DirParent 248 dir_parent Read server_only
RenameLock 249 rename_lock Change server_only
MigrateDir 251 migrate_dir Change admin_only deadline=Unbounded squashes
FreezeDir 252 freeze_dir Change server_only
InsertEntries 253 insert_entries Change server_only
DropMigrated 254 drop_migrated Change server_only
SetParent 250 set_parent Change server_only
FsckInodes 243 fsck_inodes Read
FsckEntries 244 fsck_entries Read
FsckRepair 245 fsck_repair Change
Symlink 205 symlink Change squashes
ReadLink 206 readlink Read
Link 207 link Change squashes
Unlink 208 unlink Change squashes
Rmdir 209 rmdir Change squashes
Rename 210 rename Change squashes
ReadDir 211 readdir Read squashes
GetXattr 212 getxattr Read squashes
SetXattr 213 setxattr Change squashes
ListXattr 214 listxattr Read squashes
RemoveXattr 215 removexattr Change squashes
StatFs 216 statfs Read
Open 217 open Change fast squashes
Close 218 close Change fast
SizeMerge 221 size_merge Change
GetLayout 219 getlayout Read
SetLayout 220 setlayout Change squashes
Instantiate 230 instantiate Change resendable
ScanDir 231 scandir Read squashes
SwapLayouts 232 swap_layouts Change admin_only squashes
GetLock 222 getlk Lock
SetLock 223 setlk Lock
CancelLockWait 224 lock_cancel Lock
ReleaseLocks 225 lock_release Lock
Sync 255 sync Sync
ImportEntries 256 import_entries Change squashes
HsmRestore 257 hsm_restore Hsm deadline=Unbounded
HsmRelease 258 hsm_release Change squashes
HsmSetFlags 259 hsm_set Change squashes
HsmArchived 260 hsm_archived Change squashes
HsmArchiveRef 261 hsm_archive_ref Read
HsmPccRw 262 hsm_pcc_rw Change squashes
HsmPccWait 263 hsm_pcc_wait Hsm deadline=PlusWait
HsmTieringWants 264 hsm_tiering_wants Hsm server_only
HsmAction 265 hsm_action Hsm
";

fn row(facts: &RequestFacts) -> String {
    let mut words = vec![
        format!("{:?}", facts.op),
        facts.opcode.to_string(),
        facts.name.to_string(),
        format!("{:?}", facts.class),
    ];
    for (set, flag) in [
        (facts.resendable, "resendable"),
        (facts.admin_only, "admin_only"),
        (facts.server_only, "server_only"),
        (facts.fast, "fast"),
    ] {
        if set {
            words.push(flag.to_string());
        }
    }
    if facts.deadline != Deadline::Default {
        words.push(format!("deadline={:?}", facts.deadline));
    }
    if facts.squashes {
        words.push("squashes".to_string());
    }
    words.join(" ")
}

#[test]
fn every_request_kind_is_pinned() {
    let table: Vec<String> = MdtOp::ALL.iter().map(|op| row(op.facts())).collect();
    let pinned: Vec<&str> = PINNED.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(table, pinned);
}

#[test]
fn each_row_describes_its_own_kind_and_opcodes_and_names_are_distinct() {
    let mut opcodes = std::collections::BTreeSet::new();
    let mut names = std::collections::BTreeSet::new();
    for op in MdtOp::ALL {
        let facts = op.facts();
        assert_eq!(facts.op, *op);
        assert!(
            opcodes.insert(facts.opcode),
            "opcode {} twice",
            facts.opcode
        );
        assert!(names.insert(facts.name), "name {} twice", facts.name);
        // Only changes can be marked resendable; the fast path is for opens and closes.
        assert!(!facts.resendable || facts.class == RequestClass::Change);
    }
    // The name `setlkw` (a waiting `SetLock`) is a refinement, not a row.
    assert!(!names.contains("setlkw"));
}

fn open(access: AccessMode, truncate: bool) -> MdtRequest {
    MdtRequest::Open {
        fid: Fid::ROOT,
        flags: OpenFlags { access, truncate },
        cred: Credentials::root(),
    }
}

fn close(size: Option<u64>, modified: bool) -> MdtRequest {
    MdtRequest::Close {
        handle: 1,
        size,
        blocks: None,
        modified,
    }
}

#[test]
fn opens_and_closes_are_refined_by_their_fields() {
    let read = open(AccessMode::Read, false);
    let write = open(AccessMode::Write, false);
    let trunc = open(AccessMode::Write, true);
    // Refused from a read-only client class only when it may change the file.
    assert!(!read.modifies() && write.modifies() && trunc.modifies());
    assert!(!read.may_change_attrs() && write.may_change_attrs() && trunc.may_change_attrs());
    // Off the commit thread unless it truncates.
    assert!(read.changes_nothing_stored() && write.changes_nothing_stored());
    assert!(!trunc.changes_nothing_stored());
    // A close is never a change a read-only client is refused; it changes attributes and
    // goes through the commit thread only when it records something.
    let plain = close(None, false);
    let sized = close(Some(5), false);
    let modified = close(None, true);
    assert!(!plain.modifies() && !sized.modifies() && !modified.modifies());
    assert!(!plain.may_change_attrs() && sized.may_change_attrs() && modified.may_change_attrs());
    assert!(plain.changes_nothing_stored());
    assert!(!sized.changes_nothing_stored() && !modified.changes_nothing_stored());
    // A change without the fast flag never takes the fast path.
    let merge = MdtRequest::SizeMerge {
        handle: 1,
        size: None,
        blocks: None,
        modified: false,
    };
    assert!(!merge.changes_nothing_stored() && merge.modifies() && merge.may_change_attrs());
}

#[test]
fn deadlines_follow_the_table_and_a_pcc_wait_adds_its_wait() {
    let timeout = std::time::Duration::from_secs(30);
    assert_eq!(MdtRequest::StatFs.deadline(timeout), Some(timeout));
    let restore = MdtRequest::HsmRestore {
        fid: Fid::ROOT,
        start: 0,
        end: 1,
    };
    assert_eq!(restore.deadline(timeout), None);
    let wait = MdtRequest::HsmPccWait {
        fid: Fid::ROOT,
        wait_ms: 1500,
    };
    assert_eq!(
        wait.deadline(timeout),
        Some(timeout + std::time::Duration::from_millis(1500))
    );
}

#[test]
fn root_squash_maps_the_credentials_of_the_rows_that_carry_them() {
    let mut create = NewFile::exclusive(Fid::ROOT, b"f", 0o100644).request(&Credentials::root());
    assert!(create.facts().squashes);
    create.squash_root(65534);
    let MdtRequest::Create { cred, .. } = &create else {
        panic!("not a create: {create:?}");
    };
    assert_eq!((cred.uid, cred.gid), (65534, 65534));
    // A request without credentials is left as it is.
    let mut stat = MdtRequest::StatFs;
    stat.squash_root(65534);
    assert_eq!(stat, MdtRequest::StatFs);
}
