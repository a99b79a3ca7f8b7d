//! Attribute changes and their POSIX errnos: setattr (chmod, chown, utimes, truncate),
//! extended attributes and layouts.

use super::harness::{H, errno, root, user};
use weft_proto::mdt::{MdtReply, MdtRequest, SetAttr, TimeSet, XattrMode};
use weft_proto::{Errno, Fid, Timestamp};

#[tokio::test]
async fn setattr_follows_chmod_chown_utimes_truncate_rules() {
    let h = H::new().await;
    let alice = user(1000, 1000, &[60]);
    let bob = user(2000, 2000, &[]);
    let f = h
        .create_as(Fid::ROOT, "f", 0o100644, &root())
        .await
        .unwrap()
        .fid;
    let set = |s: SetAttr, c: &weft_proto::mdt::Credentials| MdtRequest::SetAttr {
        fid: f,
        set: s,
        cred: c.clone(),
    };
    h.run(set(
        SetAttr {
            uid: Some(1000),
            gid: Some(1000),
            ..Default::default()
        },
        &root(),
    ))
    .await
    .unwrap();
    // chmod: owner or root; S_ISGID dropped when the owner is not in the file's group.
    assert_eq!(
        errno(
            h.run(set(
                SetAttr {
                    mode: Some(0o600),
                    ..Default::default()
                },
                &bob
            ))
            .await
        ),
        Errno::Perm
    );
    h.run(set(
        SetAttr {
            gid: Some(60),
            ..Default::default()
        },
        &alice,
    ))
    .await
    .unwrap();
    assert_eq!(
        errno(
            h.run(set(
                SetAttr {
                    gid: Some(70),
                    ..Default::default()
                },
                &alice
            ))
            .await
        ),
        Errno::Perm
    );
    assert_eq!(
        errno(
            h.run(set(
                SetAttr {
                    uid: Some(2000),
                    ..Default::default()
                },
                &alice
            ))
            .await
        ),
        Errno::Perm
    );
    h.run(set(
        SetAttr {
            uid: Some(1000),
            ..Default::default()
        },
        &alice,
    ))
    .await
    .unwrap();
    h.run(set(
        SetAttr {
            gid: Some(1000),
            ..Default::default()
        },
        &root(),
    ))
    .await
    .unwrap();
    let alice_no_group = user(1000, 1, &[]);
    let MdtReply::Attr(a) = h
        .run(set(
            SetAttr {
                mode: Some(0o6755),
                ..Default::default()
            },
            &alice_no_group,
        ))
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(a.mode, 0o4755);
    // chown by anyone clears setuid, and setgid with group exec.
    h.run(set(
        SetAttr {
            mode: Some(0o6755),
            ..Default::default()
        },
        &root(),
    ))
    .await
    .unwrap();
    let MdtReply::Attr(a) = h
        .run(set(
            SetAttr {
                gid: Some(60),
                ..Default::default()
            },
            &root(),
        ))
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(a.mode, 0o755);
    // utimes: "now" for owner or writer; explicit times for the owner only.
    let t = Timestamp {
        sec: 12345,
        nsec: 6,
    };
    assert_eq!(
        errno(
            h.run(set(
                SetAttr {
                    mtime: Some(TimeSet::Now),
                    ..Default::default()
                },
                &bob
            ))
            .await
        ),
        Errno::Access
    );
    assert_eq!(
        errno(
            h.run(set(
                SetAttr {
                    mtime: Some(TimeSet::At(t)),
                    ..Default::default()
                },
                &bob
            ))
            .await
        ),
        Errno::Perm
    );
    h.run(set(
        SetAttr {
            mode: Some(0o666),
            ..Default::default()
        },
        &alice,
    ))
    .await
    .unwrap();
    h.run(set(
        SetAttr {
            mtime: Some(TimeSet::Now),
            atime: Some(TimeSet::Now),
            ..Default::default()
        },
        &bob,
    ))
    .await
    .unwrap();
    assert_eq!(
        errno(
            h.run(set(
                SetAttr {
                    atime: Some(TimeSet::At(t)),
                    ..Default::default()
                },
                &bob
            ))
            .await
        ),
        Errno::Perm
    );
    let MdtReply::Attr(a) = h
        .run(set(
            SetAttr {
                mtime: Some(TimeSet::At(t)),
                ..Default::default()
            },
            &alice,
        ))
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(a.mtime, t);
    assert!(a.ctime > t);
    // Size: write permission, bumps data version and times.
    h.run(set(
        SetAttr {
            mode: Some(0o644),
            ..Default::default()
        },
        &alice,
    ))
    .await
    .unwrap();
    assert_eq!(
        errno(
            h.run(set(
                SetAttr {
                    size: Some(10),
                    ..Default::default()
                },
                &bob
            ))
            .await
        ),
        Errno::Access
    );
    let MdtReply::Attr(b) = h
        .run(set(
            SetAttr {
                size: Some(10),
                ..Default::default()
            },
            &alice,
        ))
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!((b.size, b.data_version), (10, a.data_version + 1));
    assert!(b.mtime > t);
    assert_eq!(
        errno(
            h.run(MdtRequest::SetAttr {
                fid: Fid::ROOT,
                set: SetAttr {
                    size: Some(0),
                    ..Default::default()
                },
                cred: root()
            })
            .await
        ),
        Errno::IsDir
    );
}

#[tokio::test]
async fn xattr_namespaces_flags_and_limits() {
    let h = H::new().await;
    let alice = user(1000, 1000, &[]);
    let bob = user(2000, 2000, &[]);
    let f = h
        .create_as(Fid::ROOT, "f", 0o100644, &root())
        .await
        .unwrap()
        .fid;
    h.run(MdtRequest::SetAttr {
        fid: f,
        set: SetAttr {
            uid: Some(1000),
            ..Default::default()
        },
        cred: root(),
    })
    .await
    .unwrap();
    let set = |name: &str, value: &[u8], mode, cred: &weft_proto::mdt::Credentials| {
        MdtRequest::SetXattr {
            fid: f,
            name: name.into(),
            value: value.to_vec(),
            mode,
            cred: cred.clone(),
        }
    };
    let get = |name: &str, cred: &weft_proto::mdt::Credentials| MdtRequest::GetXattr {
        fid: f,
        name: name.into(),
        cred: cred.clone(),
    };
    h.run(set("user.a", b"1", XattrMode::Create, &alice))
        .await
        .unwrap();
    assert_eq!(
        errno(h.run(set("user.a", b"2", XattrMode::Create, &alice)).await),
        Errno::Exist
    );
    assert_eq!(
        errno(h.run(set("user.b", b"2", XattrMode::Replace, &alice)).await),
        Errno::NoData
    );
    h.run(set("user.a", b"2", XattrMode::Replace, &alice))
        .await
        .unwrap();
    assert_eq!(
        h.run(get("user.a", &bob)).await.unwrap(),
        MdtReply::Xattr(b"2".to_vec())
    );
    assert_eq!(
        errno(h.run(set("user.a", b"3", XattrMode::Any, &bob)).await),
        Errno::Access
    );
    assert_eq!(
        errno(h.run(set("trusted.t", b"3", XattrMode::Any, &alice)).await),
        Errno::Perm
    );
    h.run(set("trusted.t", b"3", XattrMode::Any, &root()))
        .await
        .unwrap();
    assert_eq!(errno(h.run(get("trusted.t", &alice)).await), Errno::NoData);
    h.run(set("security.s", b"", XattrMode::Any, &alice))
        .await
        .unwrap();
    assert_eq!(
        errno(h.run(set("os2.x", b"", XattrMode::Any, &alice)).await),
        Errno::NotSup
    );
    assert_eq!(
        errno(
            h.run(set("system.posix_acl_access", b"", XattrMode::Any, &root()))
                .await
        ),
        Errno::NotSup
    );
    assert_eq!(
        errno(h.run(set("user.", b"", XattrMode::Any, &alice)).await),
        Errno::Inval
    );
    assert_eq!(
        errno(h.run(set("", b"", XattrMode::Any, &alice)).await),
        Errno::Range
    );
    assert_eq!(
        errno(
            h.run(set(
                &format!("user.{}", "n".repeat(251)),
                b"",
                XattrMode::Any,
                &alice
            ))
            .await
        ),
        Errno::Range
    );
    assert_eq!(
        errno(
            h.run(set("user.big", &vec![0; 65537], XattrMode::Any, &alice))
                .await
        ),
        Errno::Range
    );
    h.run(set("user.max", &vec![7; 65536], XattrMode::Any, &alice))
        .await
        .unwrap();
    let list = |cred: &weft_proto::mdt::Credentials| MdtRequest::ListXattr {
        fid: f,
        cred: cred.clone(),
    };
    let MdtReply::XattrNames(names) = h.run(list(&alice)).await.unwrap() else {
        panic!()
    };
    assert_eq!(
        names,
        vec![
            b"security.s".to_vec(),
            b"user.a".to_vec(),
            b"user.max".to_vec()
        ]
    );
    let MdtReply::XattrNames(names) = h.run(list(&root())).await.unwrap() else {
        panic!()
    };
    assert_eq!(names.len(), 4);
    let rm = |name: &str| MdtRequest::RemoveXattr {
        fid: f,
        name: name.into(),
        cred: alice.clone(),
    };
    h.run(rm("user.a")).await.unwrap();
    assert_eq!(errno(h.run(rm("user.a")).await), Errno::NoData);
    // user.* is refused on symlinks and special files.
    let MdtReply::Attr(s) = h
        .run(MdtRequest::Symlink {
            parent: Fid::ROOT,
            name: "s".into(),
            target: b"f".to_vec(),
            cred: root(),
        })
        .await
        .unwrap()
    else {
        panic!()
    };
    let on_link = MdtRequest::SetXattr {
        fid: s.fid,
        name: "user.x".into(),
        value: vec![],
        mode: XattrMode::Any,
        cred: root(),
    };
    assert_eq!(errno(h.run(on_link).await), Errno::Perm);
}

#[tokio::test]
async fn layouts_inherit_and_setlayout_rules() {
    let h = H::new().await;
    let d = h.mkdir(Fid::ROOT, "striped").await;
    let t = weft_proto::LayoutTemplate::raid0(3, 0, -1);
    let set = MdtRequest::SetLayout {
        fid: d,
        template: Some(t.clone()),
        cred: root(),
    };
    assert_eq!(
        h.run(set).await.unwrap(),
        MdtReply::Template(Some(t.clone()))
    );
    assert_eq!(
        h.run(MdtRequest::GetLayout { fid: d }).await.unwrap(),
        MdtReply::Template(Some(t))
    );
    let (f, handle) = h.create_open(1, d, "f", None).await;
    let MdtReply::Layout(Some(l)) = h.run(MdtRequest::GetLayout { fid: f }).await.unwrap() else {
        panic!()
    };
    assert_eq!(l.components[0].osts.len(), 3);
    assert_eq!(l.components[0].stripe_size, 1 << 20);
    // Bad templates are EINVAL; an empty file may be re-laid out, a written one may not.
    let bad = MdtRequest::SetLayout {
        fid: f,
        template: Some(weft_proto::LayoutTemplate::raid0(1, 1000, -1)),
        cred: root(),
    };
    assert_eq!(errno(h.run(bad).await), Errno::Inval);
    let one = MdtRequest::SetLayout {
        fid: f,
        template: Some(weft_proto::LayoutTemplate::raid0(1, 0, 2)),
        cred: root(),
    };
    let MdtReply::Layout(Some(l2)) = h.run(one.clone()).await.unwrap() else {
        panic!()
    };
    assert_eq!((l2.components[0].osts.clone(), l2.generation), (vec![2], 2));
    assert!(l2.components[0].id > l.components[0].id);
    h.run(MdtRequest::Close {
        handle,
        size: Some(100),
        blocks: Some(8),
        modified: true,
    })
    .await
    .unwrap();
    assert_eq!(errno(h.run(one).await), Errno::Exist);
    let a = h.getattr(f).await.unwrap();
    assert_eq!((a.size, a.blocks, a.data_version), (100, 8, 1));
    // Close max-merges: a smaller size at close does not shrink the file.
    let open = MdtRequest::Open {
        fid: f,
        flags: weft_proto::mdt::OpenFlags {
            access: weft_proto::mdt::AccessMode::Write,
            truncate: false,
        },
        cred: root(),
    };
    let MdtReply::Opened { handle, .. } = h.run(open).await.unwrap() else {
        panic!()
    };
    h.run(MdtRequest::Close {
        handle,
        size: Some(50),
        blocks: None,
        modified: false,
    })
    .await
    .unwrap();
    assert_eq!(h.getattr(f).await.unwrap().size, 100);
}
