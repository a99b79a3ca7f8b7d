//! Namespace operations and their POSIX errnos.

use super::harness::{H, errno, root, user};
use weft_proto::mdt::{FileKind, MdtReply, MdtRequest, RenameFlags, SetAttr};
use weft_proto::{Errno, Fid};

#[tokio::test]
async fn create_lookup_getattr_and_errnos() {
    let h = H::new().await;
    let d = h.mkdir(Fid::ROOT, "d").await;
    let f = h.create(d, "f").await;
    let a = h.lookup(d, "f").await.unwrap();
    assert_eq!(
        (a.fid, a.kind, a.mode, a.nlink),
        (f, FileKind::Regular, 0o644, 1)
    );
    assert_eq!(
        errno(h.create_as(d, "f", 0o100644, &root()).await),
        Errno::Exist
    );
    assert_eq!(errno(h.lookup(d, "nope").await), Errno::NoEnt);
    assert_eq!(errno(h.lookup(f, "x").await), Errno::NotDir);
    assert_eq!(
        errno(h.create_as(f, "x", 0o100644, &root()).await),
        Errno::NotDir
    );
    assert_eq!(errno(h.lookup(d, "..").await), Errno::Inval);
    assert_eq!(
        errno(h.lookup(d, &"n".repeat(256)).await),
        Errno::NameTooLong
    );
    assert_eq!(
        errno(h.create_as(d, "a/b", 0o100644, &root()).await),
        Errno::Inval
    );
    let ghost = Fid {
        seq: 0x9999,
        oid: 1,
        ver: 0,
    };
    assert_eq!(errno(h.getattr(ghost).await), Errno::Stale);
    // Directory link counts: 2 + subdirectories.
    assert_eq!(h.getattr(Fid::ROOT).await.unwrap().nlink, 3);
    h.mkdir(d, "sub").await;
    assert_eq!(h.getattr(d).await.unwrap().nlink, 3);
    h.rmdir_as(d, "sub", &root()).await.unwrap();
    assert_eq!(h.getattr(d).await.unwrap().nlink, 2);
    // Non-exclusive create of an existing file returns it.
    let req = MdtRequest::Create {
        parent: d,
        name: "f".into(),
        mode: 0o100600,
        rdev: 0,
        exclusive: false,
        layout: None,
        open: None,
        cred: root(),
    };
    let MdtReply::Created { attr, .. } = h.run(req).await.unwrap() else {
        panic!()
    };
    assert_eq!(attr.fid, f);
}

#[tokio::test]
async fn permissions_on_parents_and_device_nodes() {
    let h = H::new().await;
    let alice = user(1000, 1000, &[]);
    let bob = user(2000, 2000, &[]);
    let home = h.mkdir_as(Fid::ROOT, "home", 0o755, &root()).await.unwrap();
    h.run(MdtRequest::SetAttr {
        fid: home,
        set: SetAttr {
            uid: Some(1000),
            gid: Some(1000),
            ..Default::default()
        },
        cred: root(),
    })
    .await
    .unwrap();
    h.create_as(home, "a", 0o100644, &alice).await.unwrap();
    assert_eq!(
        errno(h.create_as(home, "b", 0o100644, &bob).await),
        Errno::Access
    );
    // An existing name is EEXIST before the write check, as on Linux.
    assert_eq!(
        errno(h.create_as(home, "a", 0o100644, &bob).await),
        Errno::Exist
    );
    assert_eq!(errno(h.unlink_as(home, "a", &bob).await), Errno::Access);
    let private = h.mkdir_as(home, "private", 0o700, &alice).await.unwrap();
    h.create_as(private, "secret", 0o100644, &alice)
        .await
        .unwrap();
    assert_eq!(
        errno(h.lookup_as(private, "secret", &bob).await),
        Errno::Access
    );
    assert!(h.lookup_as(private, "secret", &root()).await.is_ok());
    // mknod of devices needs root; FIFOs and sockets do not.
    assert_eq!(
        errno(h.create_as(home, "dev", 0o020644, &alice).await),
        Errno::Perm
    );
    assert_eq!(
        h.create_as(home, "fifo", 0o010644, &alice)
            .await
            .unwrap()
            .kind,
        FileKind::Fifo
    );
    assert_eq!(
        h.create_as(Fid::ROOT, "blk", 0o060600, &root())
            .await
            .unwrap()
            .kind,
        FileKind::BlockDevice
    );
    assert_eq!(
        errno(h.create_as(home, "d", 0o040755, &alice).await),
        Errno::Inval
    );
}

#[tokio::test]
async fn sticky_directory_protects_entries() {
    let h = H::new().await;
    let alice = user(1000, 1000, &[]);
    let bob = user(2000, 2000, &[]);
    let tmp = h.mkdir_as(Fid::ROOT, "tmp", 0o1777, &root()).await.unwrap();
    h.create_as(tmp, "a", 0o100644, &alice).await.unwrap();
    h.create_as(tmp, "b", 0o100644, &bob).await.unwrap();
    assert_eq!(errno(h.unlink_as(tmp, "a", &bob).await), Errno::Perm);
    assert_eq!(
        errno(
            h.rename_as(tmp, "a", tmp, "c", RenameFlags::default(), &bob)
                .await
        ),
        Errno::Perm
    );
    // Renaming over someone else's entry is removing it too.
    assert_eq!(
        errno(
            h.rename_as(tmp, "b", tmp, "a", RenameFlags::default(), &bob)
                .await
        ),
        Errno::Perm
    );
    h.unlink_as(tmp, "a", &alice).await.unwrap();
    h.unlink_as(tmp, "b", &root()).await.unwrap();
}

#[tokio::test]
async fn setgid_directories_pass_group_and_bit() {
    let h = H::new().await;
    let alice = user(1000, 1000, &[50]);
    let bob = user(2000, 2000, &[]);
    let shared = h
        .mkdir_as(Fid::ROOT, "shared", 0o777, &root())
        .await
        .unwrap();
    h.run(MdtRequest::SetAttr {
        fid: shared,
        set: SetAttr {
            mode: Some(0o2777),
            gid: Some(50),
            ..Default::default()
        },
        cred: root(),
    })
    .await
    .unwrap();
    let sub = h.mkdir_as(shared, "sub", 0o755, &bob).await.unwrap();
    let a = h.getattr(sub).await.unwrap();
    assert_eq!((a.gid, a.mode), (50, 0o2755));
    let f = h.create_as(shared, "f", 0o102755, &bob).await.unwrap();
    assert_eq!((f.gid, f.mode), (50, 0o755));
    let g = h.create_as(shared, "g", 0o102755, &alice).await.unwrap();
    assert_eq!((g.gid, g.mode), (50, 0o2755));
}

#[tokio::test]
async fn rename_matrix() {
    let h = H::new().await;
    let r = Fid::ROOT;
    h.create(r, "f1").await;
    h.create(r, "f2").await;
    let d1 = h.mkdir(r, "d1").await;
    h.mkdir(r, "d2").await;
    let full = h.mkdir(r, "full").await;
    h.create(full, "x").await;
    // file over file replaces it.
    h.rename(r, "f1", r, "f2").await.unwrap();
    assert_eq!(errno(h.lookup(r, "f1").await), Errno::NoEnt);
    // dir over non-dir: ENOTDIR; non-dir over dir: EISDIR; dir over non-empty dir: ENOTEMPTY.
    assert_eq!(errno(h.rename(r, "d1", r, "f2").await), Errno::NotDir);
    assert_eq!(errno(h.rename(r, "f2", r, "d1").await), Errno::IsDir);
    assert_eq!(errno(h.rename(r, "d1", r, "full").await), Errno::NotEmpty);
    assert_eq!(errno(h.rename(r, "nope", r, "x").await), Errno::NoEnt);
    // dir over empty dir works and fixes the root's link count.
    let before = h.getattr(r).await.unwrap().nlink;
    h.rename(r, "d1", r, "d2").await.unwrap();
    assert_eq!(h.lookup(r, "d2").await.unwrap().fid, d1);
    assert_eq!(h.getattr(r).await.unwrap().nlink, before - 1);
    // Moving a directory between parents moves a link.
    h.rename(r, "d2", full, "moved").await.unwrap();
    assert_eq!(h.getattr(full).await.unwrap().nlink, 3);
    assert_eq!(h.getattr(r).await.unwrap().nlink, before - 2);
    // Into its own subtree: EINVAL.
    let inner = h.mkdir(d1, "inner").await;
    assert_eq!(
        errno(h.rename(full, "moved", inner, "loop").await),
        Errno::Inval
    );
    assert_eq!(
        errno(h.rename(full, "moved", d1, "self").await),
        Errno::Inval
    );
    // Onto an ancestor of the source: ENOTEMPTY.
    assert_eq!(
        errno(h.rename(d1, "inner", r, "full").await),
        Errno::NotEmpty
    );
    // NOREPLACE and EXCHANGE.
    let noreplace = RenameFlags {
        noreplace: true,
        exchange: false,
    };
    let exchange = RenameFlags {
        noreplace: false,
        exchange: true,
    };
    assert_eq!(
        errno(h.rename_as(r, "f2", r, "full", noreplace, &root()).await),
        Errno::Exist
    );
    assert_eq!(
        errno(h.rename_as(r, "f2", r, "none", exchange, &root()).await),
        Errno::NoEnt
    );
    let f2 = h.lookup(r, "f2").await.unwrap().fid;
    h.rename_as(r, "f2", r, "full", exchange, &root())
        .await
        .unwrap();
    assert_eq!(h.lookup(r, "full").await.unwrap().fid, f2);
    assert_eq!(h.lookup(r, "f2").await.unwrap().fid, full);
    // Exchange of a dir and a file in different parents moves the link count.
    // (d1 now lives inside `full`, which is "f2": swapping them would make a loop.)
    assert_eq!(
        errno(h.rename_as(r, "f2", d1, "inner", exchange, &root()).await),
        Errno::Inval
    );
    let e = h.mkdir(r, "e").await;
    let root_links = h.getattr(r).await.unwrap().nlink;
    h.create(e, "file").await;
    h.rename_as(r, "f2", e, "file", exchange, &root())
        .await
        .unwrap();
    assert_eq!(h.getattr(r).await.unwrap().nlink, root_links - 1);
    assert_eq!(h.getattr(e).await.unwrap().nlink, 3);
    assert_eq!(h.getattr(full).await.unwrap().nlink, 3);
    // Hard links of one inode onto each other: nothing happens.
    let f = h.create(r, "h1").await;
    h.run(MdtRequest::Link {
        fid: f,
        new_parent: r,
        new_name: "h2".into(),
        cred: root(),
    })
    .await
    .unwrap();
    h.rename(r, "h1", r, "h2").await.unwrap();
    assert_eq!(h.lookup(r, "h1").await.unwrap().fid, f);
    assert_eq!(h.getattr(f).await.unwrap().nlink, 2);
}

#[tokio::test]
async fn link_symlink_readlink_and_unlink() {
    let h = H::new().await;
    let r = Fid::ROOT;
    let d = h.mkdir(r, "d").await;
    let f = h.create(r, "f").await;
    assert_eq!(
        errno(
            h.run(MdtRequest::Link {
                fid: d,
                new_parent: r,
                new_name: "dl".into(),
                cred: root()
            })
            .await
        ),
        Errno::Perm
    );
    h.run(MdtRequest::Link {
        fid: f,
        new_parent: d,
        new_name: "g".into(),
        cred: root(),
    })
    .await
    .unwrap();
    assert_eq!(h.getattr(f).await.unwrap().nlink, 2);
    assert_eq!(errno(h.unlink_as(r, "d", &root()).await), Errno::IsDir);
    assert_eq!(errno(h.rmdir_as(r, "f", &root()).await), Errno::NotDir);
    assert_eq!(errno(h.rmdir_as(r, "d", &root()).await), Errno::NotEmpty);
    h.unlink_as(r, "f", &root()).await.unwrap();
    assert_eq!(h.getattr(f).await.unwrap().nlink, 1);
    let sym = |name: &str, target: Vec<u8>| MdtRequest::Symlink {
        parent: r,
        name: name.into(),
        target,
        cred: root(),
    };
    let MdtReply::Attr(s) = h.run(sym("s", b"../t".to_vec())).await.unwrap() else {
        panic!()
    };
    assert_eq!((s.kind, s.size, s.mode), (FileKind::Symlink, 4, 0o777));
    assert_eq!(
        h.run(MdtRequest::ReadLink { fid: s.fid }).await.unwrap(),
        MdtReply::Link(b"../t".to_vec())
    );
    assert_eq!(errno(h.run(sym("e", Vec::new())).await), Errno::NoEnt);
    assert_eq!(
        errno(h.run(sym("l", vec![b'a'; 4096])).await),
        Errno::NameTooLong
    );
    assert_eq!(
        errno(h.run(MdtRequest::ReadLink { fid: f }).await),
        Errno::Inval
    );
}

#[tokio::test]
async fn open_checks_access_and_handles_belong_to_their_connection() {
    let h = H::new().await;
    let bob = user(2000, 2000, &[]);
    let f = h.create(Fid::ROOT, "f").await;
    let open = |access, truncate, cred: &weft_proto::mdt::Credentials| MdtRequest::Open {
        fid: f,
        flags: weft_proto::mdt::OpenFlags { access, truncate },
        cred: cred.clone(),
    };
    use weft_proto::mdt::AccessMode::*;
    assert_eq!(errno(h.run(open(Write, false, &bob)).await), Errno::Access);
    assert_eq!(errno(h.run(open(Read, true, &bob)).await), Errno::Access);
    assert_eq!(
        errno(
            h.run(MdtRequest::Open {
                fid: Fid::ROOT,
                flags: weft_proto::mdt::OpenFlags {
                    access: Write,
                    truncate: false
                },
                cred: root()
            })
            .await
        ),
        Errno::IsDir
    );
    let MdtReply::Opened { handle, attr, .. } = h.run_on(7, open(Read, false, &bob)).await.unwrap()
    else {
        panic!()
    };
    assert_eq!(attr.open_count, 1);
    let close = MdtRequest::Close {
        handle,
        size: None,
        blocks: None,
        modified: false,
    };
    assert_eq!(errno(h.run_on(8, close.clone()).await), Errno::BadF);
    h.run_on(7, close.clone()).await.unwrap();
    assert_eq!(errno(h.run_on(7, close).await), Errno::BadF);
    let ghost = Fid {
        seq: 0x9999,
        oid: 1,
        ver: 0,
    };
    let stale = MdtRequest::Open {
        fid: ghost,
        flags: weft_proto::mdt::OpenFlags {
            access: Read,
            truncate: false,
        },
        cred: root(),
    };
    assert_eq!(errno(h.run(stale).await), Errno::Stale);
    // Disconnect drops a connection's handles.
    h.run_on(9, open(Read, false, &root())).await.unwrap();
    assert_eq!(h.getattr(f).await.unwrap().open_count, 1);
    h.mdt.disconnect_and_wait(9).await.unwrap();
    assert_eq!(h.getattr(f).await.unwrap().open_count, 0);
}

#[tokio::test]
async fn statfs_reports_inodes_and_blocks() {
    let h = H::new().await;
    h.create(Fid::ROOT, "f").await;
    let MdtReply::StatFs(s) = h.run(MdtRequest::StatFs).await.unwrap() else {
        panic!()
    };
    assert!(s.blocks > 0 && s.files >= 2 && s.files - s.ffree == 2);
    assert_eq!(s.namelen, 255);
    let st = h.mdt.stats();
    assert_eq!((st.dirs, st.files), (1, 1));
}

/// A create and an unlink return their directory's attributes as they left them (the
/// client answers the kernel's next GETATTR of the directory with them).
#[tokio::test]
async fn creates_and_unlinks_return_their_directory_as_they_left_it() {
    let h = H::new().await;
    let d = h.mkdir(Fid::ROOT, "d").await;
    let create = MdtRequest::Create {
        parent: d,
        name: "f".into(),
        mode: 0o100644,
        rdev: 0,
        exclusive: false,
        layout: None,
        open: None,
        cred: root(),
    };
    for made in [true, false] {
        let MdtReply::Created {
            parent, created, ..
        } = h.run(create.clone()).await.unwrap()
        else {
            panic!("create answered something else")
        };
        assert_eq!(created, made);
        assert_eq!(parent.as_deref(), Some(&h.getattr(d).await.unwrap()));
    }
    let before = h.getattr(d).await.unwrap();
    let MdtReply::Removed { parent } = h.unlink_as(d, "f", &root()).await.unwrap() else {
        panic!("unlink answered something else")
    };
    assert_eq!(parent, h.getattr(d).await.unwrap());
    assert!(parent.mtime >= before.mtime && parent.ctime >= before.ctime);
}
