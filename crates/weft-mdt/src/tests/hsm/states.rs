//! Imports, the DIRTY rule, release, flags and an export's report.

use super::*;

#[tokio::test]
async fn import_creates_released_files_with_the_objects_attributes() {
    let h = H::new().await;
    let dir = h.mkdir(Fid::ROOT, "repo").await;
    h.run(MdtRequest::SetLayout {
        fid: dir,
        template: Some(LayoutTemplate::raid0(2, MIB, -1)),
        cred: root(),
    })
    .await
    .unwrap();
    let mut wide = entry("wide", "p/wide", 5 * MIB);
    wide.layout = Some(LayoutTemplate::raid0(3, MIB, -1));
    let link = ImportEntry {
        kind: ImportKind::Symlink,
        target: b"../target".to_vec(),
        ..entry("link", "p/link", 9)
    };
    let out = import(&h, dir, vec![entry("a", "p/a", 12345), wide, link]).await;
    let fids: Vec<Fid> = out
        .iter()
        .map(|o| match o {
            ImportOutcome::Created(f) => *f,
            other => panic!("{other:?}"),
        })
        .collect();
    let a = h.lookup(dir, "a").await.unwrap();
    assert_eq!(a.fid, fids[0]);
    assert_eq!((a.mode, a.uid, a.gid), (0o640, 1001, 1002));
    assert_eq!(
        (a.atime, a.mtime, a.size, a.blocks),
        (ts(100), ts(200), 12345, 0)
    );
    assert_eq!(a.hsm_flags, HSM_EXISTS | HSM_ARCHIVED | HSM_RELEASED);
    assert_eq!(a.archive_id, REPO);
    assert!(a.ctime.sec > 1000, "ctime is now");
    // The layout a create would give: the directory's default, or the entry's template.
    assert_eq!(layout(&h, fids[0]).await.components[0].osts.len(), 2);
    assert_eq!(layout(&h, fids[1]).await.components[0].osts.len(), 3);
    let l = h.lookup(dir, "link").await.unwrap();
    assert_eq!(l.hsm_flags, HSM_EXISTS | HSM_ARCHIVED);
    assert_eq!(l.size, 9);
    let MdtReply::Link(target) = h.run(MdtRequest::ReadLink { fid: fids[2] }).await.unwrap() else {
        panic!()
    };
    assert_eq!(target, b"../target");
    // The archive record, through the request and as the xattr.
    let MdtReply::Archive(Some(r)) = h
        .run(MdtRequest::HsmArchiveRef { fid: fids[0] })
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(r, archive("p/a", "e1", 12345));
    let MdtReply::Xattr(raw) = h
        .run(MdtRequest::GetXattr {
            fid: fids[0],
            name: ARCHIVE_XATTR.to_vec(),
            cred: root(),
        })
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(postcard::from_bytes::<ArchiveRef>(&raw).unwrap(), r);
    let local = h.create(Fid::ROOT, "local").await;
    assert_eq!(
        h.run(MdtRequest::HsmArchiveRef { fid: local })
            .await
            .unwrap(),
        MdtReply::Archive(None)
    );
    let s = h.mdt.stats();
    assert_eq!((s.hsm_import_entries, s.hsm_imported), (3, 3));
}

#[tokio::test]
async fn reimport_is_unchanged_updated_or_a_conflict() {
    let h = H::new().await;
    h.mdt.start_background();
    let a = import_one(&h, entry("a", "a", 10)).await;
    let before = layout(&h, a).await;
    // The same object again.
    assert_eq!(
        import(&h, Fid::ROOT, vec![entry("a", "a", 10)]).await,
        [ImportOutcome::Unchanged(a)]
    );
    // A newer version of it.
    let mut newer = entry("a", "a", 20);
    newer.archive.etag = Some("e2".into());
    newer.mtime = ts(300);
    assert_eq!(
        import(&h, Fid::ROOT, vec![newer]).await,
        [ImportOutcome::Updated(a)]
    );
    let attr = h.getattr(a).await.unwrap();
    assert_eq!((attr.size, attr.mtime), (20, ts(300)));
    assert_eq!(attr.hsm_flags, HSM_EXISTS | HSM_ARCHIVED | HSM_RELEASED);
    let after = layout(&h, a).await;
    assert_eq!(after.generation, before.generation + 1);
    assert!(after.components[0].id > before.components[0].id);
    assert_eq!(after.components[0].osts, before.components[0].osts);
    h.wait_destroys().await;
    let destroyed: BTreeSet<_> = h.cluster.destroyed().into_iter().collect();
    let old: BTreeSet<_> = before.objects(a).collect();
    assert!(!old.is_empty() && old.is_subset(&destroyed));
    // Names the import must not replace.
    let local = h.create(Fid::ROOT, "local").await;
    let dir = h.mkdir(Fid::ROOT, "dir").await;
    let dirty = import_one(&h, entry("dirty", "dirty", 10)).await;
    h.run(set_flags(dirty, HSM_DIRTY, 0)).await.unwrap();
    let open = import_one(&h, entry("open", "open", 10)).await;
    h.run(MdtRequest::Open {
        fid: open,
        flags: RW,
        cred: root(),
    })
    .await
    .unwrap();
    let other_repo = import_one(&h, entry("other", "other", 10)).await;
    h.run(MdtRequest::HsmSetFlags {
        fid: other_repo,
        set: 0,
        clear: 0,
        archive_id: Some(REPO + 1),
        cred: root(),
    })
    .await
    .unwrap();
    let changed = |name: &str| {
        let mut e = entry(name, name, 11);
        e.archive.etag = Some("new".into());
        e
    };
    let out = import(
        &h,
        Fid::ROOT,
        vec![
            changed("local"),
            changed("dir"),
            changed("dirty"),
            changed("open"),
            changed("other"),
        ],
    )
    .await;
    assert_eq!(
        out,
        [
            ImportOutcome::Conflict(local),
            ImportOutcome::Conflict(dir),
            ImportOutcome::Conflict(dirty),
            ImportOutcome::Conflict(open),
            ImportOutcome::Conflict(other_repo),
        ]
    );
}

#[tokio::test]
async fn bad_imports_answer_errors_without_panicking() {
    let h = H::new().await;
    let file = h.create(Fid::ROOT, "file").await;
    // Not root: the whole request.
    let req = MdtRequest::ImportEntries {
        parent: Fid::ROOT,
        repo: REPO,
        entries: vec![entry("a", "a", 1)],
        cred: user(1000, 1000, &[]),
    };
    assert_eq!(errno(h.run(req).await), Errno::Perm);
    let too_many = vec![entry("a", "a", 1); IMPORT_MAX + 1];
    assert_eq!(
        errno(h.run(import_req(Fid::ROOT, too_many)).await),
        Errno::Inval
    );
    let MdtRequest::ImportEntries { entries, .. } = import_req(Fid::ROOT, vec![]) else {
        panic!()
    };
    assert!(entries.is_empty());
    // One outcome per entry; bad ones fail alone.
    let huge = "n".repeat(100_000);
    let mut no_key = entry("nokey", "", 1);
    no_key.archive.key.clear();
    let mut bad_target = entry("badlink", "k", 1);
    bad_target.kind = ImportKind::Symlink;
    bad_target.target = b"a\0b".to_vec();
    let mut bad_time = entry("badtime", "k", 1);
    bad_time.mtime.nsec = 2_000_000_000;
    let mut bad_layout = entry("badlayout", "k", 1);
    bad_layout.layout = Some(LayoutTemplate::raid0(1, 12345, -1));
    let out = import(
        &h,
        Fid::ROOT,
        vec![
            entry("a/b", "k", 1),
            entry(&huge, "k", 1),
            entry("..", "k", 1),
            no_key,
            bad_target,
            bad_time,
            bad_layout,
            entry("good", "good", 1),
        ],
    )
    .await;
    let code = |e: Errno| ImportOutcome::Failed(e.code());
    assert_eq!(
        out[..7],
        [
            code(Errno::Inval),
            code(Errno::NameTooLong),
            code(Errno::Inval),
            code(Errno::Inval),
            code(Errno::Inval),
            code(Errno::Inval),
            code(Errno::Inval),
        ]
    );
    assert!(matches!(out[7], ImportOutcome::Created(_)));
    assert_eq!(h.list(Fid::ROOT, 100).await.len(), 2, "file and good only");
    // A parent that is not a directory: the error a create gives.
    assert_eq!(
        import(&h, file, vec![entry("x", "x", 1)]).await,
        [code(Errno::NotDir)]
    );
    assert_eq!(
        import(
            &h,
            Fid {
                seq: 0x200000400,
                oid: 99,
                ver: 0
            },
            vec![entry("x", "x", 1)]
        )
        .await,
        [code(Errno::Stale)]
    );
}

#[tokio::test]
async fn imports_get_fids_up_front() {
    // 1000 FIDs per sequence: three imports of 400 need a second sequence for the third.
    let h = H::new().await;
    for round in 0..3 {
        let entries = (0..400)
            .map(|i| entry(&format!("f{round}-{i}"), "k", 1))
            .collect();
        let out = import(&h, Fid::ROOT, entries).await;
        assert!(out.iter().all(|o| matches!(o, ImportOutcome::Created(_))));
    }
    assert_eq!(h.list(Fid::ROOT, 4096).await.len(), 1200);
}

#[tokio::test]
async fn data_changes_make_an_archived_file_dirty() {
    let h = H::new().await;
    let fid = archived_file(&h, "f", 10).await;
    let a = h.getattr(fid).await.unwrap();
    assert_eq!(
        (a.hsm_flags, a.archive_id),
        (HSM_EXISTS | HSM_ARCHIVED, REPO)
    );
    // A close that records nothing changes nothing.
    let MdtReply::Opened { handle, .. } = h
        .run(MdtRequest::Open {
            fid,
            flags: RW,
            cred: root(),
        })
        .await
        .unwrap()
    else {
        panic!()
    };
    h.run(MdtRequest::SizeMerge {
        handle,
        size: None,
        blocks: Some(9),
        modified: false,
    })
    .await
    .unwrap();
    assert_eq!(
        h.getattr(fid).await.unwrap().hsm_flags,
        HSM_EXISTS | HSM_ARCHIVED
    );
    h.run(MdtRequest::Close {
        handle,
        size: None,
        blocks: None,
        modified: true,
    })
    .await
    .unwrap();
    let a = h.getattr(fid).await.unwrap();
    assert_eq!(a.hsm_flags, HSM_EXISTS | HSM_DIRTY);
    // An export of an older data version leaves it dirty; of the current one, clean.
    assert_eq!(
        errno(h.run(archived(fid, a.data_version - 1, "f")).await),
        Errno::Busy
    );
    assert_eq!(
        h.getattr(fid).await.unwrap().hsm_flags,
        HSM_EXISTS | HSM_DIRTY
    );
    let b = attr_of(h.run(archived(fid, a.data_version, "f2")).await).await;
    assert_eq!(b.hsm_flags, HSM_EXISTS | HSM_ARCHIVED);
    let MdtReply::Archive(Some(r)) = h.run(MdtRequest::HsmArchiveRef { fid }).await.unwrap() else {
        panic!()
    };
    assert_eq!(r.key, "f2");
    // A truncate.
    let set = weft_proto::mdt::SetAttr {
        size: Some(3),
        ..Default::default()
    };
    h.run(MdtRequest::SetAttr {
        fid,
        set,
        cred: root(),
    })
    .await
    .unwrap();
    assert_eq!(
        h.getattr(fid).await.unwrap().hsm_flags,
        HSM_EXISTS | HSM_DIRTY
    );
    // An open with O_TRUNC.
    let dv = h.getattr(fid).await.unwrap().data_version;
    h.run(archived(fid, dv, "f3")).await.unwrap();
    h.run(MdtRequest::Open {
        fid,
        flags: OpenFlags {
            access: AccessMode::Write,
            truncate: true,
        },
        cred: root(),
    })
    .await
    .unwrap();
    assert_eq!(
        h.getattr(fid).await.unwrap().hsm_flags,
        HSM_EXISTS | HSM_DIRTY
    );
    // A file never archived has no HSM state to change.
    let (plain, handle) = h.create_open(1, Fid::ROOT, "plain", None).await;
    h.run(MdtRequest::Close {
        handle,
        size: Some(5),
        blocks: None,
        modified: true,
    })
    .await
    .unwrap();
    assert_eq!(h.getattr(plain).await.unwrap().hsm_flags, 0);
    // Not root.
    let req = MdtRequest::HsmArchived {
        fid,
        repo: REPO,
        data_version: 0,
        archive: archive("k", "e", 1),
        cred: user(5, 5, &[]),
    };
    assert_eq!(errno(h.run(req).await), Errno::Perm);
}

#[tokio::test]
async fn release_rules_and_new_object_names() {
    let h = H::new().await;
    h.mdt.start_background();
    // Not archived yet.
    let (fid, handle) = h.create_open(1, Fid::ROOT, "f", None).await;
    h.run(MdtRequest::Close {
        handle,
        size: Some(10),
        blocks: Some(8),
        modified: true,
    })
    .await
    .unwrap();
    assert_eq!(errno(h.run(release(fid, None)).await), Errno::Busy);
    let dv = h.getattr(fid).await.unwrap().data_version;
    h.run(archived(fid, dv, "f")).await.unwrap();
    // A wrong data version, NORELEASE, LOST, DIRTY, an open handle.
    assert_eq!(errno(h.run(release(fid, Some(dv + 1))).await), Errno::Busy);
    for flag in [HSM_NORELEASE, HSM_LOST, HSM_DIRTY] {
        h.run(set_flags(fid, flag, 0)).await.unwrap();
        assert_eq!(
            errno(h.run(release(fid, None)).await),
            Errno::Busy,
            "{flag:#x}"
        );
        h.run(set_flags(fid, 0, flag)).await.unwrap();
    }
    // Flags moved by hand move nothing else: the file is still archived.
    assert_eq!(
        h.getattr(fid).await.unwrap().hsm_flags,
        HSM_EXISTS | HSM_ARCHIVED
    );
    let MdtReply::Opened { handle, .. } = h
        .run(MdtRequest::Open {
            fid,
            flags: OpenFlags {
                access: AccessMode::Read,
                truncate: false,
            },
            cred: root(),
        })
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(errno(h.run(release(fid, None)).await), Errno::Busy);
    h.run(MdtRequest::Close {
        handle,
        size: None,
        blocks: None,
        modified: false,
    })
    .await
    .unwrap();
    // Someone else's file.
    let req = MdtRequest::HsmRelease {
        fid,
        data_version: None,
        cred: user(1000, 1000, &[]),
    };
    assert_eq!(errno(h.run(req).await), Errno::Perm);
    let before = layout(&h, fid).await;
    let a = attr_of(h.run(release(fid, Some(dv))).await).await;
    assert_eq!(a.hsm_flags, HSM_EXISTS | HSM_ARCHIVED | HSM_RELEASED);
    assert_eq!((a.blocks, a.size, a.data_version), (0, 10, dv));
    let after = layout(&h, fid).await;
    assert_eq!(after.generation, before.generation + 1);
    for (b, n) in before.components.iter().zip(&after.components) {
        assert!(n.id > b.id, "fresh component ids");
        assert_eq!(n.osts, b.osts, "same OSTs");
    }
    // Idempotent.
    assert_eq!(attr_of(h.run(release(fid, None)).await).await, a);
    assert_eq!(layout(&h, fid).await, after);
    h.wait_destroys().await;
    let destroyed: BTreeSet<_> = h.cluster.destroyed().into_iter().collect();
    let old: BTreeSet<_> = before.objects(fid).collect();
    assert!(!old.is_empty() && old.is_subset(&destroyed));
    assert!(after.objects(fid).all(|o| !destroyed.contains(&o)));
    // A directory is not released.
    let dir = h.mkdir(Fid::ROOT, "d").await;
    assert_eq!(errno(h.run(release(dir, None)).await), Errno::Busy);
}

#[tokio::test]
async fn flag_rules() {
    let h = H::new().await;
    let owner = user(1000, 1000, &[]);
    let fid = h
        .create_as(Fid::ROOT, "f", 0o100644, &root())
        .await
        .unwrap()
        .fid;
    h.run(MdtRequest::SetAttr {
        fid,
        set: weft_proto::mdt::SetAttr {
            uid: Some(1000),
            ..Default::default()
        },
        cred: root(),
    })
    .await
    .unwrap();
    let as_ =
        |set, clear, archive_id, cred: &weft_proto::mdt::Credentials| MdtRequest::HsmSetFlags {
            fid,
            set,
            clear,
            archive_id,
            cred: cred.clone(),
        };
    // RELEASED and unknown bits are not settable.
    assert_eq!(
        errno(h.run(set_flags(fid, HSM_RELEASED, 0)).await),
        Errno::Inval
    );
    assert_eq!(errno(h.run(set_flags(fid, 0, 0x100)).await), Errno::Inval);
    // Flags needing EXISTS.
    assert_eq!(
        errno(h.run(set_flags(fid, HSM_ARCHIVED, 0)).await),
        Errno::Inval
    );
    // Another user; the owner for more than the user flags.
    let other = user(2000, 2000, &[]);
    assert_eq!(
        errno(h.run(as_(HSM_NORELEASE, 0, None, &other)).await),
        Errno::Perm
    );
    assert_eq!(
        errno(h.run(as_(HSM_EXISTS, 0, None, &owner)).await),
        Errno::Perm
    );
    assert_eq!(errno(h.run(as_(0, 0, Some(3), &owner)).await), Errno::Perm);
    let a = attr_of(
        h.run(as_(HSM_NORELEASE | HSM_NOARCHIVE, 0, None, &owner))
            .await,
    )
    .await;
    assert_eq!(a.hsm_flags, HSM_NORELEASE | HSM_NOARCHIVE);
    let a = attr_of(
        h.run(as_(HSM_EXISTS | HSM_LOST, HSM_NOARCHIVE, Some(3), &root()))
            .await,
    )
    .await;
    assert_eq!(
        (a.hsm_flags, a.archive_id),
        (HSM_EXISTS | HSM_LOST | HSM_NORELEASE, 3)
    );
    // Clearing EXISTS while LOST stays: refused; both: fine.
    assert_eq!(
        errno(h.run(set_flags(fid, 0, HSM_EXISTS)).await),
        Errno::Inval
    );
    let a = attr_of(h.run(set_flags(fid, 0, HSM_EXISTS | HSM_LOST)).await).await;
    assert_eq!(a.hsm_flags, HSM_NORELEASE);
}

#[tokio::test]
async fn released_counts_follow_every_change_and_survive_reopens_and_an_upgrade() {
    use crate::store::{self, ReleasedCount};
    let counts = |h: &H| -> Vec<(u32, u64, u64)> {
        h.mdt
            .released()
            .iter()
            .map(|c: &ReleasedCount| (c.archive_id, c.files, c.bytes))
            .collect()
    };
    let h = H::new().await;
    assert!(counts(&h).is_empty());
    let dir = h.mkdir(Fid::ROOT, "repo").await;
    import(
        &h,
        dir,
        vec![
            entry("a", "p/a", 100),
            entry("b", "p/b", 200),
            entry("c", "p/c", 300),
        ],
    )
    .await;
    assert_eq!(counts(&h), [(REPO, 3, 600)]);
    // Another archive id, set by hand on a released file.
    let c = h.lookup(dir, "c").await.unwrap().fid;
    h.run(MdtRequest::HsmSetFlags {
        fid: c,
        set: 0,
        clear: 0,
        archive_id: Some(REPO + 1),
        cred: root(),
    })
    .await
    .unwrap();
    assert_eq!(counts(&h), [(REPO, 2, 300), (REPO + 1, 1, 300)]);
    // A released file unlinked.
    h.unlink_as(dir, "b", &root()).await.unwrap();
    assert_eq!(counts(&h), [(REPO, 1, 100), (REPO + 1, 1, 300)]);
    // A local file archived (not released: not counted), then released.
    h.mdt.start_background();
    let (f, handle) = h.create_open(1, dir, "f", None).await;
    h.run(MdtRequest::Close {
        handle,
        size: Some(10),
        blocks: Some(8),
        modified: true,
    })
    .await
    .unwrap();
    let dv = h.getattr(f).await.unwrap().data_version;
    h.run(archived(f, dv, "p/f")).await.unwrap();
    assert_eq!(counts(&h), [(REPO, 1, 100), (REPO + 1, 1, 300)]);
    h.run(release(f, Some(dv))).await.unwrap();
    let want = [(REPO, 2, 110), (REPO + 1, 1, 300)];
    assert_eq!(counts(&h), want);
    let h = h.reopen().await;
    assert_eq!(counts(&h), want, "kept in the MDT's meta record");

    // A store written before the counts (meta record version 1): counted at open.
    let H {
        dir: tmp,
        cluster,
        mdt,
        opts,
    } = h;
    mdt.shutdown().await;
    drop(mdt);
    {
        let db = redb::Database::open(tmp.path().join(crate::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(store::META).unwrap();
            let mut meta = store::get_meta(&t).unwrap().unwrap();
            meta.released = None;
            // Version 1 is version 2 without the trailing `released` (`None`: one byte).
            let v2 = store::encode(&meta).unwrap();
            assert_eq!((v2[0], v2[v2.len() - 1]), (2, 0));
            let mut v1 = vec![1u8];
            v1.extend_from_slice(&v2[1..v2.len() - 1]);
            t.insert(store::META_KEY, v1.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let mdt = crate::Mdt::open(tmp.path(), opts.clone(), cluster.clone()).unwrap();
    let h = H {
        dir: tmp,
        cluster,
        mdt,
        opts,
    };
    assert_eq!(counts(&h), want, "counted from the inodes");
    // And kept from there on.
    h.unlink_as(dir, "f", &root()).await.unwrap();
    assert_eq!(counts(&h), [(REPO, 1, 100), (REPO + 1, 1, 300)]);
}
