//! Every namespace operation across the MDT boundary, against two MDS processes.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_directory_namespace_operations_across_two_mds_processes() {
    let tc = two_mdts(2).await;
    let c = fs_client(&tc).await;
    let cred = root();
    let root_nlink = c.getattr(Fid::ROOT).await.unwrap().nlink;

    // mkdir_on: the inode is on MDT1, the name in the root (MDT0).
    let r = c.mkdir_on(Fid::ROOT, b"r", 0o750, 1, &cred).await.unwrap();
    assert_eq!(r.kind, FileKind::Directory);
    assert_eq!(r.mode & 0o7777, 0o750);
    assert_eq!(r.nlink, 2);
    assert_eq!(c.mdt_index_of(r.fid).unwrap(), 1);
    assert_eq!(
        c.getattr(Fid::ROOT).await.unwrap().nlink,
        root_nlink + 1,
        "the root's link count counts the remote directory"
    );

    // lookup / getattr / readdir (plus and plain) of the remote entry.
    let looked = c.lookup(Fid::ROOT, b"r", &cred).await.unwrap();
    assert_eq!(looked.fid, r.fid);
    assert_eq!(looked.kind, FileKind::Directory);
    assert_eq!(looked.mode & 0o7777, 0o750);
    assert_eq!(c.getattr(r.fid).await.unwrap().fid, r.fid);
    assert_eq!(c.resolve("/r", true, &cred).await.unwrap().fid, r.fid);
    let plus = list(&c, Fid::ROOT, true).await;
    let e = plus.iter().find(|e| e.name == b"r").expect("r listed");
    assert_eq!(e.fid, r.fid);
    assert_eq!(e.kind, FileKind::Directory);
    let a = e
        .attr
        .as_ref()
        .expect("readdirplus fills a remote entry's attributes");
    assert_eq!(
        (a.fid, a.kind, a.mode & 0o7777),
        (r.fid, FileKind::Directory, 0o750)
    );
    let plain = list(&c, Fid::ROOT, false).await;
    assert!(plain.iter().any(|e| e.name == b"r" && e.fid == r.fid));

    // Files and subdirectories made inside live on MDT1 and read back.
    let sub = c.mkdir(r.fid, b"sub", 0o755, &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(sub.fid).unwrap(), 1);
    assert_eq!(c.getattr(r.fid).await.unwrap().nlink, 3);
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    c.write_file("/r/f", &data, &cred).await.unwrap();
    c.write_file("/r/sub/g", b"inner", &cred).await.unwrap();
    assert_eq!(&c.read_file("/r/f", &cred).await.unwrap()[..], &data[..]);
    assert_eq!(&c.read_file("/r/sub/g", &cred).await.unwrap()[..], b"inner");
    let f = c.lookup(r.fid, b"f", &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(f.fid).unwrap(), 1);
    assert_eq!(f.size, data.len() as u64);
    let g = c.resolve("/r/sub/g", true, &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(g.fid).unwrap(), 1);
    let sl = c.symlink(r.fid, b"sl", b"sub/g", &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(sl.fid).unwrap(), 1);
    assert_eq!(c.readlink(sl.fid).await.unwrap(), b"sub/g");
    assert_eq!(c.resolve("/r/sl", true, &cred).await.unwrap().fid, g.fid);
    let inside = list(&c, r.fid, true).await;
    assert_eq!(names(&inside), ["f", "sl", "sub"].map(String::from).into());
    assert!(inside.iter().all(|e| e.attr.is_some()));
    // Renames and links inside the remote directory are local to MDT1.
    c.rename(r.fid, b"f", sub.fid, b"f2", PLAIN, &cred)
        .await
        .unwrap();
    c.link(f.fid, r.fid, b"hard", &cred).await.unwrap();
    assert_eq!(c.getattr(f.fid).await.unwrap().nlink, 2);
    c.unlink(r.fid, b"hard", &cred).await.unwrap();
    c.rename(sub.fid, b"f2", r.fid, b"f", PLAIN, &cred)
        .await
        .unwrap();
    assert_eq!(&c.read_file("/r/f", &cred).await.unwrap()[..], &data[..]);

    // Local things in the root, for the cross-MDT cases.
    let l = c.mkdir(Fid::ROOT, b"l", 0o755, &cred).await.unwrap();
    c.write_file("/lf", b"local", &cred).await.unwrap();
    let lf = c.lookup(Fid::ROOT, b"lf", &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(lf.fid).unwrap(), 0);

    // Rename of the remote directory within its directory.
    c.rename(Fid::ROOT, b"r", Fid::ROOT, b"r2", PLAIN, &cred)
        .await
        .unwrap();
    assert_eq!(errno(c.lookup(Fid::ROOT, b"r", &cred).await), Errno::NoEnt);
    assert_eq!(c.lookup(Fid::ROOT, b"r2", &cred).await.unwrap().fid, r.fid);
    assert_eq!(
        &c.read_file("/r2/sub/g", &cred).await.unwrap()[..],
        b"inner"
    );
    assert_eq!(c.getattr(Fid::ROOT).await.unwrap().nlink, root_nlink + 2);
    let noreplace = RenameFlags {
        noreplace: true,
        exchange: false,
    };
    assert_eq!(
        errno(
            c.rename(Fid::ROOT, b"r2", Fid::ROOT, b"l", noreplace, &cred)
                .await
        ),
        Errno::Exist
    );
    c.rename(Fid::ROOT, b"r2", Fid::ROOT, b"r", noreplace, &cred)
        .await
        .unwrap();
    assert_eq!(c.lookup(Fid::ROOT, b"r", &cred).await.unwrap().fid, r.fid);

    // Directories move across MDTs (under the rename lock): each there and back.
    let moves: [(&str, Fid, &[u8], Fid); 3] = [
        ("a directory of MDT0 into MDT1's", Fid::ROOT, b"l", r.fid),
        ("a directory of MDT1 to the root", r.fid, b"sub", Fid::ROOT),
        (
            "the remote directory's entry into another directory of MDT0",
            Fid::ROOT,
            b"r",
            l.fid,
        ),
    ];
    for (what, from, name, to) in moves {
        let fid = c.lookup(from, name, &cred).await.unwrap().fid;
        c.rename(from, name, to, name, PLAIN, &cred)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(c.lookup(to, name, &cred).await.unwrap().fid, fid, "{what}");
        assert_eq!(errno(c.lookup(from, name, &cred).await), Errno::NoEnt);
        check_consistent(&tc, &c).await;
        c.rename(to, name, from, name, PLAIN, &cred).await.unwrap();
    }
    // RENAME_EXCHANGE of names on two MDTs is not supported: EXDEV, nothing changed.
    let exchange = RenameFlags {
        noreplace: false,
        exchange: true,
    };
    assert_eq!(
        errno(
            c.rename(Fid::ROOT, b"r", Fid::ROOT, b"l", exchange, &cred)
                .await
        ),
        Errno::XDev
    );
    assert_eq!(c.lookup(Fid::ROOT, b"l", &cred).await.unwrap().fid, l.fid);
    assert_eq!(c.lookup(r.fid, b"sub", &cred).await.unwrap().fid, sub.fid);
    assert_eq!(c.lookup(Fid::ROOT, b"r", &cred).await.unwrap().fid, r.fid);
    assert_eq!(errno(c.lookup(l.fid, b"r", &cred).await), Errno::NoEnt);
    assert_eq!(c.getattr(Fid::ROOT).await.unwrap().nlink, root_nlink + 2);
    assert_eq!(c.getattr(r.fid).await.unwrap().nlink, 3);
    // Files (DNE step 3) do: the name moves, the inode stays on its MDT; hard links too.
    c.rename(r.fid, b"f", Fid::ROOT, b"f", PLAIN, &cred)
        .await
        .unwrap();
    assert_eq!(c.lookup(Fid::ROOT, b"f", &cred).await.unwrap().fid, f.fid);
    assert_eq!(c.mdt_index_of(f.fid).unwrap(), 1);
    assert_eq!(&c.read_file("/f", &cred).await.unwrap()[..], &data[..]);
    c.rename(Fid::ROOT, b"f", r.fid, b"f", PLAIN, &cred)
        .await
        .unwrap();
    c.link(f.fid, Fid::ROOT, b"hard", &cred).await.unwrap();
    assert_eq!(c.getattr(f.fid).await.unwrap().nlink, 2);
    c.unlink(Fid::ROOT, b"hard", &cred).await.unwrap();
    c.link(lf.fid, r.fid, b"hard", &cred).await.unwrap();
    c.unlink(r.fid, b"hard", &cred).await.unwrap();
    assert_eq!(c.lookup(r.fid, b"f", &cred).await.unwrap().fid, f.fid);
    assert_eq!(c.lookup(Fid::ROOT, b"lf", &cred).await.unwrap().fid, lf.fid);
    assert_eq!(c.getattr(f.fid).await.unwrap().nlink, 1);
    assert_eq!(c.getattr(lf.fid).await.unwrap().nlink, 1);

    // unlink of the remote name: EISDIR.
    assert_eq!(errno(c.unlink(Fid::ROOT, b"r", &cred).await), Errno::IsDir);

    // rmdir of the non-empty remote directory: ENOTEMPTY, nothing changed, no intent left.
    assert_eq!(
        errno(c.rmdir(Fid::ROOT, b"r", &cred).await),
        Errno::NotEmpty
    );
    assert_eq!(c.lookup(Fid::ROOT, b"r", &cred).await.unwrap().fid, r.fid);
    assert_eq!(c.getattr(Fid::ROOT).await.unwrap().nlink, root_nlink + 2);
    assert_eq!(c.getattr(r.fid).await.unwrap().nlink, 3);
    assert_eq!(&c.read_file("/r/f", &cred).await.unwrap()[..], &data[..]);
    c.rename(Fid::ROOT, b"r", Fid::ROOT, b"r3", PLAIN, &cred)
        .await
        .expect("no intent is left on the name after a refused rmdir");
    c.rename(Fid::ROOT, b"r3", Fid::ROOT, b"r", PLAIN, &cred)
        .await
        .unwrap();

    // Unknown MDT: EINVAL, nothing made. Existing names: EEXIST.
    assert_eq!(
        errno(c.mkdir_on(Fid::ROOT, b"nowhere", 0o755, 7, &cred).await),
        Errno::Inval
    );
    assert_eq!(
        errno(c.lookup(Fid::ROOT, b"nowhere", &cred).await),
        Errno::NoEnt
    );
    for existing in [&b"r"[..], b"l", b"lf"] {
        assert_eq!(
            errno(c.mkdir_on(Fid::ROOT, existing, 0o755, 1, &cred).await),
            Errno::Exist,
            "mkdir_on over {}",
            String::from_utf8_lossy(existing)
        );
    }
    assert_eq!(
        errno(c.mkdir(Fid::ROOT, b"r", 0o755, &cred).await),
        Errno::Exist
    );
    assert_eq!(
        errno(c.mknod(Fid::ROOT, b"r", 0o010644, 0, &cred).await),
        Errno::Exist
    );
    assert_eq!(
        errno(c.symlink(Fid::ROOT, b"r", b"x", &cred).await),
        Errno::Exist
    );
    assert_eq!(
        errno(c.mkdir_on(r.fid, b"sub", 0o755, 0, &cred).await),
        Errno::Exist
    );
    // mkdir_on the parent's own MDT is a plain mkdir.
    let zero = c
        .mkdir_on(Fid::ROOT, b"zero", 0o755, 0, &cred)
        .await
        .unwrap();
    assert_eq!(c.mdt_index_of(zero.fid).unwrap(), 0);
    let one = c.mkdir_on(r.fid, b"one", 0o755, 1, &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(one.fid).unwrap(), 1);
    c.rmdir(r.fid, b"one", &cred).await.unwrap();

    check_consistent(&tc, &c).await;

    // Empty it, then rmdir removes it on both MDTs.
    c.unlink(r.fid, b"f", &cred).await.unwrap();
    c.unlink(r.fid, b"sl", &cred).await.unwrap();
    c.unlink(sub.fid, b"g", &cred).await.unwrap();
    c.rmdir(r.fid, b"sub", &cred).await.unwrap();
    let dirs1 = tc.mdt_counter(1, "dirs").await.unwrap();
    c.rmdir(Fid::ROOT, b"r", &cred).await.unwrap();
    assert_eq!(errno(c.lookup(Fid::ROOT, b"r", &cred).await), Errno::NoEnt);
    let gone = errno(c.getattr(r.fid).await);
    assert!(
        matches!(gone, Errno::NoEnt | Errno::Stale),
        "getattr of the removed directory on MDT1: {gone:?}"
    );
    assert_eq!(c.getattr(Fid::ROOT).await.unwrap().nlink, root_nlink + 2);
    assert!(!names(&list(&c, Fid::ROOT, true).await).contains("r"));
    assert_eq!(tc.mdt_counter(1, "dirs").await.unwrap(), dirs1 - 1);
    assert_eq!(errno(c.rmdir(Fid::ROOT, b"r", &cred).await), Errno::NoEnt);
    // The name is free again, for a remote directory as for anything else.
    let again = c.mkdir_on(Fid::ROOT, b"r", 0o755, 1, &cred).await.unwrap();
    assert_ne!(again.fid, r.fid);
    check_consistent(&tc, &c).await;
}

/// A remote directory whose parent is itself remote: MDT1 coordinates a directory on MDT0.
/// Directory renames whose destination's ancestors leave the MDT walk them across MDTs
/// (a directory never moves below itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_remote_directories_and_renames_whose_ancestors_leave_the_mdt() {
    let tc = two_mdts(1).await;
    let c = fs_client(&tc).await;
    let cred = root();
    let r = c.mkdir_on(Fid::ROOT, b"r", 0o755, 1, &cred).await.unwrap();
    // Back to MDT0, coordinated by MDT1.
    let back = c.mkdir_on(r.fid, b"back", 0o755, 0, &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(back.fid).unwrap(), 0);
    assert_eq!(c.getattr(r.fid).await.unwrap().nlink, 3);
    assert_eq!(c.lookup(r.fid, b"back", &cred).await.unwrap().fid, back.fid);
    c.write_file("/r/back/deep", b"deep", &cred).await.unwrap();
    let deep = c.resolve("/r/back/deep", true, &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(deep.fid).unwrap(), 0);
    let plus = list(&c, r.fid, true).await;
    assert!(
        plus.iter()
            .any(|e| e.name == b"back" && e.attr.as_ref().is_some_and(|a| a.fid == back.fid))
    );

    // /x (MDT0) into /r/back (MDT0): same MDT, but the destination's ancestors pass
    // through MDT1: the ancestor check walks them there. A file moves too.
    let x = c.mkdir(Fid::ROOT, b"x", 0o755, &cred).await.unwrap();
    c.write_file("/xf", b"xf", &cred).await.unwrap();
    c.rename(Fid::ROOT, b"x", back.fid, b"x", PLAIN, &cred)
        .await
        .unwrap();
    assert_eq!(c.lookup(back.fid, b"x", &cred).await.unwrap().fid, x.fid);
    c.rename(Fid::ROOT, b"xf", back.fid, b"xf", PLAIN, &cred)
        .await
        .unwrap();
    assert_eq!(&c.read_file("/r/back/xf", &cred).await.unwrap()[..], b"xf");
    // /r (MDT1) below itself through /r/back (MDT0): EINVAL, found across both MDTs.
    assert_eq!(
        errno(c.rename(Fid::ROOT, b"r", x.fid, b"r", PLAIN, &cred).await),
        Errno::Inval
    );
    c.rmdir(back.fid, b"x", &cred).await.unwrap();
    // Inside the remote directory (all on MDT1), whose ancestors lead to MDT0.
    c.mkdir(r.fid, b"a", 0o755, &cred).await.unwrap();
    let b = c.mkdir(r.fid, b"b", 0o755, &cred).await.unwrap();
    c.rename(r.fid, b"a", b.fid, b"a", PLAIN, &cred)
        .await
        .unwrap();
    c.rename(b.fid, b"a", r.fid, b"a2", PLAIN, &cred)
        .await
        .unwrap();
    check_consistent(&tc, &c).await;

    // rmdir of the nested remote directory (MDT1 asks MDT0): ENOTEMPTY, then removed.
    assert_eq!(errno(c.rmdir(r.fid, b"back", &cred).await), Errno::NotEmpty);
    c.unlink(back.fid, b"deep", &cred).await.unwrap();
    c.unlink(back.fid, b"xf", &cred).await.unwrap();
    c.rmdir(r.fid, b"back", &cred).await.unwrap();
    assert_eq!(errno(c.lookup(r.fid, b"back", &cred).await), Errno::NoEnt);
    assert_eq!(c.getattr(r.fid).await.unwrap().nlink, 4, "a2 and b remain");
    check_consistent(&tc, &c).await;
}

/// rename(2) of a directory over an existing empty directory replaces it, or, where the
/// MDTs cannot do that, answers EXDEV (tools then copy). EISDIR means "a non-directory over
/// a directory": `mv -T` gives up with a wrong message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_directory_renamed_over_an_empty_directory_is_not_eisdir() {
    let tc = two_mdts(1).await;
    let c = fs_client(&tc).await;
    let cred = root();
    // The control: a local directory over a local empty one is replaced.
    c.mkdir(Fid::ROOT, b"a", 0o755, &cred).await.unwrap();
    c.mkdir(Fid::ROOT, b"b", 0o755, &cred).await.unwrap();
    c.rename(Fid::ROOT, b"a", Fid::ROOT, b"b", PLAIN, &cred)
        .await
        .unwrap();
    c.mkdir_on(Fid::ROOT, b"r0", 0o755, 1, &cred).await.unwrap();
    let r = c.mkdir_on(Fid::ROOT, b"r", 0o755, 1, &cred).await.unwrap();
    let l = c.mkdir(Fid::ROOT, b"l", 0o755, &cred).await.unwrap();
    let remote_over_local = c
        .rename(Fid::ROOT, b"r", Fid::ROOT, b"l", PLAIN, &cred)
        .await;
    c.mkdir(Fid::ROOT, b"l2", 0o755, &cred).await.unwrap();
    let local_over_remote = c
        .rename(Fid::ROOT, b"l2", Fid::ROOT, b"r0", PLAIN, &cred)
        .await;
    for (what, res) in [
        (
            "the remote directory /r over the empty local /l",
            &remote_over_local,
        ),
        (
            "the local directory /l2 over the empty remote /r0",
            &local_over_remote,
        ),
    ] {
        assert!(
            matches!(
                res.as_ref().map_err(ClientError::errno),
                Ok(()) | Err(Errno::XDev)
            ),
            "rename of {what}: {res:?}"
        );
    }
    if remote_over_local.is_ok() {
        assert_eq!(c.lookup(Fid::ROOT, b"l", &cred).await.unwrap().fid, r.fid);
        assert!(c.getattr(l.fid).await.is_err());
    }
    check_consistent(&tc, &c).await;
}

/// Permission checks of remote mkdir and rmdir as an unprivileged user are those of a local
/// mkdir and rmdir: write and search permission on the parent (EACCES), the sticky bit
/// (EPERM), and the new directory belongs to its creator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_mkdir_and_rmdir_check_permissions_like_local_ones() {
    let tc = two_mdts(1).await;
    let c = fs_client(&tc).await;
    let cred = root();
    let (alice, bob) = (user(1000), user(2000));

    // A root-owned 0755 directory refuses others, locally as remotely.
    let closed = c.mkdir(Fid::ROOT, b"closed", 0o755, &cred).await.unwrap();
    assert_eq!(
        errno(c.mkdir(closed.fid, b"a", 0o755, &alice).await),
        Errno::Access
    );
    assert_eq!(
        errno(c.mkdir_on(closed.fid, b"a", 0o755, 1, &alice).await),
        Errno::Access
    );
    c.mkdir_on(closed.fid, b"rootdir", 0o777, 1, &cred)
        .await
        .unwrap();
    assert_eq!(
        errno(c.rmdir(closed.fid, b"rootdir", &alice).await),
        Errno::Access
    );
    assert!(c.lookup(closed.fid, b"rootdir", &cred).await.is_ok());
    // Search permission on the parent too.
    let nox = c.mkdir(Fid::ROOT, b"nox", 0o776, &cred).await.unwrap();
    assert_eq!(
        errno(c.mkdir_on(nox.fid, b"a", 0o755, 1, &alice).await),
        Errno::Access
    );

    // A sticky world-writable directory (/tmp-like).
    let t = c.mkdir(Fid::ROOT, b"t", 0o1777, &cred).await.unwrap();
    let mine = c.mkdir_on(t.fid, b"mine", 0o755, 1, &alice).await.unwrap();
    assert_eq!((mine.uid, mine.gid), (1000, 1000), "owned by its creator");
    assert_eq!(c.mdt_index_of(mine.fid).unwrap(), 1);
    c.mkdir(t.fid, b"local", 0o755, &alice).await.unwrap();
    // Bob may remove neither (local: EPERM; remote: the same).
    assert_eq!(errno(c.rmdir(t.fid, b"local", &bob).await), Errno::Perm);
    assert_eq!(errno(c.rmdir(t.fid, b"mine", &bob).await), Errno::Perm);
    assert_eq!(c.lookup(t.fid, b"mine", &cred).await.unwrap().fid, mine.fid);
    // Alice cannot write in the remote directory of root's, nor bob in alice's.
    assert_eq!(
        errno(c.mkdir(mine.fid, b"x", 0o755, &bob).await),
        Errno::Access
    );
    c.mkdir(mine.fid, b"x", 0o755, &alice).await.unwrap();
    // ENOTEMPTY for its owner, then removed.
    assert_eq!(
        errno(c.rmdir(t.fid, b"mine", &alice).await),
        Errno::NotEmpty
    );
    c.rmdir(mine.fid, b"x", &alice).await.unwrap();
    c.rmdir(t.fid, b"mine", &alice).await.unwrap();
    // The owner of the sticky directory may remove others' entries.
    c.mkdir_on(t.fid, b"bobs", 0o755, 1, &bob).await.unwrap();
    c.rmdir(t.fid, b"bobs", &cred).await.unwrap();
    assert_eq!(errno(c.lookup(t.fid, b"bobs", &cred).await), Errno::NoEnt);
    check_consistent(&tc, &c).await;
}

/// In a sticky directory, renaming an entry follows the sticky rule: its owner (or the
/// directory's) may rename it, others get EPERM. For a remote directory the MDT holding the
/// name asks the directory's MDT for its owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_directory_rename_of_a_remote_directory_follows_the_sticky_rule() {
    let tc = two_mdts(1).await;
    let c = fs_client(&tc).await;
    let cred = root();
    let (alice, bob) = (user(1000), user(2000));
    let t = c.mkdir(Fid::ROOT, b"t", 0o1777, &cred).await.unwrap();
    c.mkdir(t.fid, b"local", 0o755, &alice).await.unwrap();
    let remote = c
        .mkdir_on(t.fid, b"remote", 0o755, 1, &alice)
        .await
        .unwrap();

    // The local directory: bob is refused with EPERM, alice renames her own.
    assert_eq!(
        errno(
            c.rename(t.fid, b"local", t.fid, b"local2", PLAIN, &bob)
                .await
        ),
        Errno::Perm
    );
    c.rename(t.fid, b"local", t.fid, b"local2", PLAIN, &alice)
        .await
        .unwrap();

    // The remote directory: its owner is asked on its MDT; bob is refused, nothing moved.
    assert_eq!(
        errno(
            c.rename(t.fid, b"remote", t.fid, b"remote2", PLAIN, &bob)
                .await
        ),
        Errno::Perm
    );
    assert_eq!(
        c.lookup(t.fid, b"remote", &cred).await.unwrap().fid,
        remote.fid
    );
    assert_eq!(
        errno(c.lookup(t.fid, b"remote2", &cred).await),
        Errno::NoEnt
    );
    // Alice renames her own, and root may.
    c.rename(t.fid, b"remote", t.fid, b"remote2", PLAIN, &alice)
        .await
        .unwrap();
    c.rename(t.fid, b"remote2", t.fid, b"remote3", PLAIN, &cred)
        .await
        .unwrap();
    check_consistent(&tc, &c).await;
}
