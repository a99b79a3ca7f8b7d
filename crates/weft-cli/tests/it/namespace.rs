//! Every metadata operation through the protocol, against separate MGS, MDS and OSS
//! processes on loopback.

use crate::bin;
use weft_client::{Cluster, MdtClient, NewFile};
use weft_proto::mdt::{
    AccessMode, Credentials, FileKind, OpenFlags, RenameFlags, SetAttr, TimeSet, XattrMode,
};
use weft_proto::{Errno, Fid, Timestamp};
use weft_testkit::TestCluster;

fn root() -> Credentials {
    Credentials::root()
}

fn user(uid: u32) -> Credentials {
    Credentials {
        uid,
        gid: uid,
        groups: vec![],
    }
}

fn errno<T: std::fmt::Debug>(r: Result<T, weft_client::ClientError>) -> Errno {
    r.expect_err("expected an error").errno()
}

async fn mdt0(c: &Cluster) -> std::sync::Arc<MdtClient> {
    c.mdt(0).unwrap()
}

const RW: OpenFlags = OpenFlags {
    access: AccessMode::ReadWrite,
    truncate: false,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metadata_operation_works_across_processes() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let client = tc.client().await.unwrap();
    let mdt = mdt0(&client).await;
    let cred = root();

    // mkdir, create, lookup, getattr
    let dir = mdt.mkdir(Fid::ROOT, b"data", 0o755, &cred).await.unwrap();
    assert_eq!(dir.kind, FileKind::Directory);
    assert_eq!(dir.nlink, 2);
    let created = mdt
        .create(&NewFile::exclusive(dir.fid, b"a.bin", 0o100644), &cred)
        .await
        .unwrap();
    assert_eq!(created.attr.kind, FileKind::Regular);
    let layout = created.layout.expect("a regular file has a layout");
    assert_eq!(layout.components.len(), 1);
    assert!(!layout.components[0].osts.is_empty());
    assert_eq!(
        errno(
            mdt.create(&NewFile::exclusive(dir.fid, b"a.bin", 0o100644), &cred)
                .await
        ),
        Errno::Exist
    );
    let looked = mdt.lookup(dir.fid, b"a.bin", &cred).await.unwrap();
    assert_eq!(looked.fid, created.attr.fid);
    assert_eq!(
        errno(mdt.lookup(dir.fid, b"missing", &cred).await),
        Errno::NoEnt
    );
    assert_eq!(
        errno(mdt.lookup(dir.fid, &[b'x'; 256], &cred).await),
        Errno::NameTooLong
    );
    assert_eq!(
        mdt.getattr(dir.fid).await.unwrap().mtime,
        mdt.getattr(dir.fid).await.unwrap().mtime
    );

    // setattr: chmod, chown, times, size
    let fid = created.attr.fid;
    let a = mdt
        .setattr(
            fid,
            SetAttr {
                mode: Some(0o600),
                ..Default::default()
            },
            &cred,
        )
        .await
        .unwrap();
    assert_eq!(a.mode & 0o7777, 0o600);
    let a = mdt
        .setattr(
            fid,
            SetAttr {
                uid: Some(1000),
                gid: Some(1000),
                ..Default::default()
            },
            &cred,
        )
        .await
        .unwrap();
    assert_eq!((a.uid, a.gid), (1000, 1000));
    let t = Timestamp {
        sec: 1_000_000,
        nsec: 5,
    };
    let a = mdt
        .setattr(
            fid,
            SetAttr {
                mtime: Some(TimeSet::At(t)),
                atime: Some(TimeSet::At(t)),
                ..Default::default()
            },
            &cred,
        )
        .await
        .unwrap();
    assert_eq!((a.mtime, a.atime), (t, t));
    let a = mdt
        .setattr(
            fid,
            SetAttr {
                size: Some(12345),
                ..Default::default()
            },
            &cred,
        )
        .await
        .unwrap();
    assert_eq!(a.size, 12345);
    // Someone else may not chmod it.
    assert_eq!(
        errno(
            mdt.setattr(
                fid,
                SetAttr {
                    mode: Some(0o777),
                    ..Default::default()
                },
                &user(2000)
            )
            .await
        ),
        Errno::Perm
    );

    // symlink, readlink
    let l = mdt
        .symlink(dir.fid, b"link", b"a.bin", &cred)
        .await
        .unwrap();
    assert_eq!(l.kind, FileKind::Symlink);
    assert_eq!(mdt.readlink(l.fid).await.unwrap(), b"a.bin");

    // mknod (FIFO)
    let fifo = mdt
        .create(&NewFile::exclusive(dir.fid, b"pipe", 0o010644), &cred)
        .await
        .unwrap();
    assert_eq!(fifo.attr.kind, FileKind::Fifo);

    // link, unlink
    let linked = mdt.link(fid, dir.fid, b"hard", &cred).await.unwrap();
    assert_eq!(linked.nlink, 2);
    mdt.unlink(dir.fid, b"hard", &cred).await.unwrap();
    assert_eq!(mdt.getattr(fid).await.unwrap().nlink, 1);
    assert_eq!(
        errno(mdt.link(dir.fid, Fid::ROOT, b"dirlink", &cred).await),
        Errno::Perm
    );

    // rename: plain, over an existing file, NOREPLACE, EXCHANGE, loops
    let sub = mdt.mkdir(dir.fid, b"sub", 0o755, &cred).await.unwrap();
    assert_eq!(mdt.getattr(dir.fid).await.unwrap().nlink, 3);
    mdt.rename(
        dir.fid,
        b"a.bin",
        sub.fid,
        b"b.bin",
        RenameFlags::default(),
        &cred,
    )
    .await
    .unwrap();
    assert_eq!(mdt.lookup(sub.fid, b"b.bin", &cred).await.unwrap().fid, fid);
    let other = mdt
        .create(&NewFile::exclusive(dir.fid, b"other", 0o100644), &cred)
        .await
        .unwrap();
    let noreplace = RenameFlags {
        noreplace: true,
        exchange: false,
    };
    assert_eq!(
        errno(
            mdt.rename(dir.fid, b"other", sub.fid, b"b.bin", noreplace, &cred)
                .await
        ),
        Errno::Exist
    );
    let exchange = RenameFlags {
        noreplace: false,
        exchange: true,
    };
    mdt.rename(dir.fid, b"other", sub.fid, b"b.bin", exchange, &cred)
        .await
        .unwrap();
    assert_eq!(
        mdt.lookup(sub.fid, b"b.bin", &cred).await.unwrap().fid,
        other.attr.fid
    );
    assert_eq!(mdt.lookup(dir.fid, b"other", &cred).await.unwrap().fid, fid);
    mdt.rename(
        dir.fid,
        b"other",
        sub.fid,
        b"b.bin",
        RenameFlags::default(),
        &cred,
    )
    .await
    .unwrap();
    assert_eq!(mdt.lookup(sub.fid, b"b.bin", &cred).await.unwrap().fid, fid);
    let deep = mdt.mkdir(sub.fid, b"deep", 0o755, &cred).await.unwrap();
    assert_eq!(
        errno(
            mdt.rename(
                dir.fid,
                b"sub",
                deep.fid,
                b"loop",
                RenameFlags::default(),
                &cred
            )
            .await
        ),
        Errno::Inval
    );
    assert_eq!(
        errno(
            mdt.rename(
                sub.fid,
                b"b.bin",
                sub.fid,
                b"deep",
                RenameFlags::default(),
                &cred
            )
            .await
        ),
        Errno::IsDir
    );

    // rmdir
    assert_eq!(
        errno(mdt.rmdir(dir.fid, b"sub", &cred).await),
        Errno::NotEmpty
    );
    mdt.rmdir(sub.fid, b"deep", &cred).await.unwrap();
    assert_eq!(
        errno(mdt.rmdir(dir.fid, b"link", &cred).await),
        Errno::NotDir
    );

    // xattrs
    mdt.setxattr(fid, b"user.tag", b"v1", XattrMode::Create, &cred)
        .await
        .unwrap();
    assert_eq!(
        errno(
            mdt.setxattr(fid, b"user.tag", b"v2", XattrMode::Create, &cred)
                .await
        ),
        Errno::Exist
    );
    mdt.setxattr(fid, b"user.tag", b"v2", XattrMode::Replace, &cred)
        .await
        .unwrap();
    assert_eq!(mdt.getxattr(fid, b"user.tag", &cred).await.unwrap(), b"v2");
    assert!(
        mdt.listxattr(fid, &cred)
            .await
            .unwrap()
            .contains(&b"user.tag".to_vec())
    );
    mdt.removexattr(fid, b"user.tag", &cred).await.unwrap();
    assert_eq!(
        errno(mdt.getxattr(fid, b"user.tag", &cred).await),
        Errno::NoData
    );

    // statfs
    let s = mdt.statfs().await.unwrap();
    assert!(s.files > 0 && s.blocks > 0);

    // permissions: a user cannot create in root's 0755 directory
    assert_eq!(
        errno(
            mdt.create(&NewFile::exclusive(dir.fid, b"nope", 0o100644), &user(1000))
                .await
        ),
        Errno::Access
    );
    tc.mds.log();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdir_pages_a_large_directory_with_stable_cookies() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let client = tc.client().await.unwrap();
    let mdt = mdt0(&client).await;
    let cred = root();
    let dir = mdt.mkdir(Fid::ROOT, b"big", 0o755, &cred).await.unwrap();
    let n = 3000;
    let mut tasks = Vec::new();
    for lane in 0..8 {
        let mdt = mdt.clone();
        let cred = cred.clone();
        tasks.push(tokio::spawn(async move {
            for i in (lane..n).step_by(8) {
                mdt.create(
                    &NewFile::exclusive(dir.fid, format!("file-{i:05}").as_bytes(), 0o100644),
                    &cred,
                )
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // List in small pages while removing entries already listed: every entry that exists
    // throughout appears exactly once.
    let mut seen = std::collections::BTreeSet::new();
    let mut cookie = 0;
    loop {
        let (page, eof) = mdt
            .readdir(dir.fid, cookie, 97, false, &cred)
            .await
            .unwrap();
        for e in &page {
            assert!(
                seen.insert(e.name.clone()),
                "{:?} listed twice",
                String::from_utf8_lossy(&e.name)
            );
            cookie = e.cookie;
        }
        if let Some(first) = page.first() {
            mdt.unlink(dir.fid, &first.name, &cred).await.unwrap();
        }
        if eof {
            break;
        }
    }
    assert_eq!(seen.len(), n);
    let (plus, _) = mdt.readdir(dir.fid, 0, 10, true, &cred).await.unwrap();
    assert!(
        plus.iter()
            .all(|e| e.attr.as_ref().is_some_and(|a| a.fid == e.fid))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlinked_open_file_stays_until_its_last_close() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let client = tc.client().await.unwrap();
    let mdt = mdt0(&client).await;
    let cred = root();
    let c = mdt
        .create(
            &NewFile {
                open: Some(RW),
                ..NewFile::exclusive(Fid::ROOT, b"tmpfile", 0o100644)
            },
            &cred,
        )
        .await
        .unwrap();
    let handle = c.handle.expect("create with open returns a handle");
    mdt.unlink(Fid::ROOT, b"tmpfile", &cred).await.unwrap();
    assert_eq!(
        errno(mdt.lookup(Fid::ROOT, b"tmpfile", &cred).await),
        Errno::NoEnt
    );
    let still = mdt.getattr(c.attr.fid).await.unwrap();
    assert_eq!(still.nlink, 0);
    mdt.close(handle, Some(10), None, true).await.unwrap();
    let gone = mdt.getattr(c.attr.fid).await;
    assert!(matches!(errno(gone), Errno::Stale | Errno::NoEnt));
}
