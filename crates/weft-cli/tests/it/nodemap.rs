//! Client classes (nodemap) through a real mount over separate keyed server processes: a
//! class over the mount's address squashes root (it cannot chown, nor read another user's
//! 0600 file, and what it makes belongs to nobody), then is made read-only (writes fail
//! with EROFS, reads work); administrators' verbs need an admin class.

use crate::bin;
use crate::fuse_common::FuseMount;
use crate::support::weft_env;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;
use weft_testkit::{TestCluster, key_files, wait_until};

fn os_error<T>(r: std::io::Result<T>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classes_squash_root_make_read_only_and_gate_admin_verbs() {
    let keys = tempfile::tempdir().unwrap();
    let (server_key, client_key) = key_files(keys.path()).unwrap();
    let s = |p: &Path| p.display().to_string();
    let env = vec![("WEFT_KEY".to_string(), s(&server_key))];
    let tc = TestCluster::start_with_env(bin(), 1, env.clone())
        .await
        .unwrap();
    let client_env = vec![("WEFT_KEY".to_string(), s(&client_key))];
    let mgs = tc.mgs_addr.clone();
    let run = |args: &[&str], env: &[(String, String)]| {
        let mut all = args.to_vec();
        all.extend(["--mgs", &mgs]);
        weft_env(&all, env, Duration::from_secs(60))
    };

    // (Re)defines class "lab" over loopback with `flag`, as an administrator.
    let lab_class = |flag: &str| {
        let (ok, _, err) = run(
            &["nodemap", "add", "lab", "--range", "127.0.0.0/8", flag],
            &env,
        );
        assert!(ok, "{err}");
    };

    let m = FuseMount::start(&tc, &format!("key={}", s(&client_key)));
    let secret = m.path("secret");
    fs::write(&secret, b"private").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&secret, Some(1000), Some(1000)).unwrap();
    assert_eq!(fs::read(&secret).unwrap(), b"private");
    let public = m.path("pub");
    fs::create_dir(&public).unwrap();
    fs::set_permissions(&public, fs::Permissions::from_mode(0o777)).unwrap();

    // Root squash for every client on loopback (the servers prove the server key and are
    // not classified).
    lab_class("--squash-root");
    wait_until("root squashed on the MDT", || {
        os_error(fs::read(&secret)) == Some(libc::EACCES)
    });
    let chown = std::os::unix::fs::chown(&secret, Some(0), Some(0));
    assert_eq!(os_error(chown), Some(libc::EPERM));
    // Root is nobody now: not allowed in the root directory (0755, root's), allowed in a
    // directory everyone may write, where what it makes is nobody's.
    assert_eq!(
        os_error(fs::write(m.path("made"), b"x")),
        Some(libc::EACCES)
    );
    let made_path = public.join("made");
    fs::write(&made_path, b"by a squashed root").unwrap();
    let made = fs::metadata(&made_path).unwrap();
    assert_eq!((made.uid(), made.gid()), (65534, 65534));
    // The file's owner still reads it (squash maps only root).
    let (status, err) = crate::fuse_common::run_as(1000, 1000, &[], &format!("cat {}", s(&secret)));
    assert_eq!(status, 0, "{err}");

    // Administrators' verbs from a client of a class without the admin flag are refused,
    // counted and logged; the server key is not classified.
    let (ok, _, err) = run(&["set_param", "-P", "osc.*.max_dirty_mb=64"], &client_env);
    assert!(!ok && err.contains("admin client class"), "{err}");
    let (ok, out, err) = run(&["nodemap", "list"], &client_env);
    assert!(ok, "{err}");
    assert!(
        out.contains("lab range=127.0.0.0/8 squash_root=1 read_only=0 admin=0"),
        "{out}"
    );
    assert!(tc.mgs.log().contains("request refused by client class"));

    // Read-only: changes fail with EROFS, reads work.
    lab_class("--read-only");
    wait_until("the class read-only on the MDT", || {
        os_error(fs::write(m.path("new"), b"x")) == Some(libc::EROFS)
    });
    assert_eq!(fs::read(&made_path).unwrap(), b"by a squashed root");
    assert_eq!(os_error(fs::remove_file(&made_path)), Some(libc::EROFS));
    assert_eq!(os_error(fs::create_dir(m.path("d"))), Some(libc::EROFS));

    // Gone: everything works again.
    let (ok, _, err) = run(&["nodemap", "del", "lab"], &env);
    assert!(ok, "{err}");
    wait_until("no class on the MDT", || {
        fs::write(m.path("new"), b"x").is_ok()
    });
    let (ok, _, err) = run(
        &["set_param", "-P", "-d", "osc.*.max_dirty_mb"],
        &client_env,
    );
    assert!(ok, "{err}");
}
