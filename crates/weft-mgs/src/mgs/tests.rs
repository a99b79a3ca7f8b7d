use super::*;
use std::sync::atomic::{AtomicU64, Ordering};
use weft_proto::mgs::TargetState;

fn reg(id: TargetId, uuid: Uuid, address: &str, replace: bool) -> MgsRequest {
    MgsRequest::Register {
        id,
        uuid,
        address: address.into(),
        failover: vec![],
        replace,
    }
}

fn reg_failover(id: TargetId, uuid: Uuid, address: &str, failover: &[&str]) -> MgsRequest {
    MgsRequest::Register {
        id,
        uuid,
        address: address.into(),
        failover: failover.iter().map(|a| a.to_string()).collect(),
        replace: false,
    }
}

async fn errno(mgs: &Mgs, req: MgsRequest) -> Errno {
    mgs.execute(req).await.unwrap_err().errno
}

fn new_mgs() -> (tempfile::TempDir, Arc<Mgs>) {
    let dir = tempfile::tempdir().unwrap();
    let mgs = Mgs::open(dir.path(), Some("testfs")).unwrap();
    (dir, mgs)
}

#[derive(Default)]
struct Probe(AtomicU64, AtomicU64);

impl ConfigSubscriber for Probe {
    fn config_changed(&self, version: u64) -> bool {
        self.0.fetch_add(1, Ordering::SeqCst);
        self.1.store(version, Ordering::SeqCst);
        true
    }
}

#[tokio::test]
async fn fresh_file_system_has_defaults() {
    let (_d, mgs) = new_mgs();
    let c = mgs.config();
    assert_eq!(c.fsname, "testfs");
    assert_eq!(mgs.fsname(), "testfs");
    assert_eq!(c.version, 1);
    assert_eq!(c.default_layout, LayoutTemplate::raid0(1, 1 << 20, -1));
    assert!(c.targets.is_empty() && c.pools.is_empty() && c.params.is_empty() && c.fld.is_empty());
    assert_ne!(mgs.uuid(), c.fs_uuid);
    assert_eq!(
        mgs.execute(MgsRequest::GetConfig).await.unwrap(),
        MgsReply::Config(c)
    );
}

#[tokio::test]
async fn the_periodic_check_sends_the_configuration_only_when_it_changed() {
    let (_d, mgs) = new_mgs();
    let v = mgs.config().version;
    let check = |have| mgs.execute(MgsRequest::GetConfigIfNewer { have });
    assert_eq!(check(v).await.unwrap(), MgsReply::Ok);
    mgs.execute(reg(TargetId::ost(0), Uuid::new_v4(), "h:1", false))
        .await
        .unwrap();
    let MgsReply::Config(c) = check(v).await.unwrap() else {
        panic!("a changed configuration is sent")
    };
    assert!(c.version > v && c.target(TargetId::ost(0)).is_some());
    assert_eq!(check(c.version).await.unwrap(), MgsReply::Ok);
    // A client ahead of the MGS (one reformatted since) gets what the MGS has.
    assert!(matches!(
        check(c.version + 5).await.unwrap(),
        MgsReply::Config(_)
    ));
}

#[tokio::test]
async fn registration_rules() {
    let (_d, mgs) = new_mgs();
    let (u1, u2) = (Uuid::new_v4(), Uuid::new_v4());
    let MgsReply::Registered(c) = mgs
        .execute(reg(TargetId::ost(0), u1, "h:1", false))
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(c.version, 2);
    let t = c.target(TargetId::ost(0)).unwrap();
    assert_eq!(
        (t.uuid, t.address.as_str(), t.state),
        (u1, "h:1", TargetState::Active)
    );

    // A restart at the same address changes nothing.
    mgs.execute(reg(TargetId::ost(0), u1, "h:1", false))
        .await
        .unwrap();
    assert_eq!(mgs.config().version, 2);
    // A restart at a new address is a change.
    mgs.execute(reg(TargetId::ost(0), u1, "h:2", false))
        .await
        .unwrap();
    assert_eq!(mgs.config().version, 3);
    assert_eq!(
        mgs.config().target(TargetId::ost(0)).unwrap().address,
        "h:2"
    );

    // Another target claiming the index is refused, with an explanation.
    let e = mgs
        .execute(reg(TargetId::ost(0), u2, "h:3", false))
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::Exist);
    assert!(e.message.contains("replace"), "{e}");
    assert_eq!(mgs.config().version, 3);
    // Unless it asks to replace.
    mgs.execute(reg(TargetId::ost(0), u2, "h:3", true))
        .await
        .unwrap();
    assert_eq!(mgs.config().target(TargetId::ost(0)).unwrap().uuid, u2);

    // Same index, different kinds are different targets; the list stays sorted.
    mgs.execute(reg(TargetId::mdt(0), u1, "h:4", false))
        .await
        .unwrap();
    let ids: Vec<TargetId> = mgs.config().targets.iter().map(|t| t.id).collect();
    assert_eq!(ids, vec![TargetId::mdt(0), TargetId::ost(0)]);

    assert_eq!(
        errno(&mgs, reg(TargetId::MGS, u1, "h:5", false)).await,
        Errno::Inval
    );
    assert_eq!(
        errno(&mgs, reg(TargetId::ost(0x10000), u1, "h:5", false)).await,
        Errno::Inval
    );
    assert_eq!(
        errno(&mgs, reg(TargetId::ost(1), u1, "", false)).await,
        Errno::Inval
    );
    assert_eq!(
        errno(&mgs, reg(TargetId::ost(1), u1, &"x".repeat(300), false)).await,
        Errno::Inval
    );
}

/// Failover (issue 25): a target names the servers that may take it over; the one that
/// does registers the same UUID from its own address, the configuration moves the target
/// there (a new version, announced) and the MGS counts the failover. A wrong UUID is still
/// refused from any address, failover or not.
#[tokio::test]
async fn a_failover_server_takes_a_target_over_with_its_uuid() {
    let (_d, mgs) = new_mgs();
    let (u, other) = (Uuid::new_v4(), Uuid::new_v4());
    let ost = TargetId::ost(3);
    mgs.execute(reg_failover(ost, u, "a:1", &["b:1", "a:1", "b:1"]))
        .await
        .unwrap();
    let t = mgs.config().target(ost).unwrap().clone();
    assert_eq!(t.address, "a:1");
    assert_eq!(t.failover, vec!["b:1"], "itself and repeats are dropped");
    assert_eq!(t.addresses(), vec!["a:1", "b:1"]);
    let before = mgs.config().version;

    // The standby at b:1 takes over, naming a:1 as its own failover.
    mgs.execute(reg_failover(ost, u, "b:1", &["a:1"]))
        .await
        .unwrap();
    let t = mgs.config().target(ost).unwrap().clone();
    assert_eq!(
        (t.address.as_str(), t.failover.clone()),
        ("b:1", vec!["a:1".to_string()])
    );
    assert_eq!(t.addresses(), vec!["b:1", "a:1"]);
    assert!(mgs.config().version > before);
    assert_eq!(
        mgs.stats(),
        MgsStats {
            target_failovers: 1,
            target_moves: 0
        }
    );

    // Another target claiming the index from the failover address is still refused.
    assert_eq!(
        errno(&mgs, reg_failover(ost, other, "a:1", &["b:1"])).await,
        Errno::Exist
    );
    // A move to an unlisted address is accepted (the UUID is the target) but counted apart.
    mgs.execute(reg_failover(ost, u, "c:1", &[])).await.unwrap();
    assert_eq!(mgs.config().target(ost).unwrap().address, "c:1");
    assert_eq!(mgs.stats().target_moves, 1);
    assert_eq!(mgs.stats().target_failovers, 1);

    // Bad failover lists are refused whole.
    let many: Vec<String> = (0..=MAX_FAILOVER_ADDRESSES)
        .map(|i| format!("h:{i}"))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert_eq!(
        errno(&mgs, reg_failover(ost, u, "c:1", &many)).await,
        Errno::Inval
    );
    assert_eq!(
        errno(&mgs, reg_failover(ost, u, "c:1", &["bad address"])).await,
        Errno::Inval
    );
    assert_eq!(mgs.config().target(ost).unwrap().address, "c:1");
}

#[tokio::test]
async fn restart_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let mgs = Mgs::open(dir.path(), Some("testfs")).unwrap();
        mgs.execute(reg(TargetId::ost(2), Uuid::new_v4(), "h:1", false))
            .await
            .unwrap();
        mgs.execute(MgsRequest::AllocSeq { mdt: 0, count: 3 })
            .await
            .unwrap();
        mgs.execute(MgsRequest::SetParam {
            name: "osc.*.max_dirty_mb".into(),
            value: Some("512".into()),
        })
        .await
        .unwrap();
        mgs.execute(MgsRequest::PoolNew {
            pool: "flash".into(),
        })
        .await
        .unwrap();
        mgs.execute(MgsRequest::PoolAdd {
            pool: "flash".into(),
            osts: vec![2],
        })
        .await
        .unwrap();
        mgs.execute(MgsRequest::SetDefaultLayout {
            template: LayoutTemplate::raid0(-1, 4 << 20, -1),
        })
        .await
        .unwrap();
        (mgs.uuid(), mgs.config())
    };
    // Without a name, and with the right one.
    for name in [None, Some("testfs")] {
        let mgs = Mgs::open(dir.path(), name).unwrap();
        assert_eq!(mgs.uuid(), before.0);
        assert_eq!(mgs.config(), before.1);
    }
}

#[tokio::test]
async fn sequences_never_repeat_even_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut granted = Vec::new();
    for round in 0..3 {
        let mgs = Mgs::open(dir.path(), Some("testfs")).unwrap();
        for mdt in [0u32, 0, 1, 0] {
            let MgsReply::Seq(r) = mgs
                .execute(MgsRequest::AllocSeq {
                    mdt,
                    count: 2 + round,
                })
                .await
                .unwrap()
            else {
                panic!()
            };
            assert_eq!(r.len(), u64::from(2 + round));
            granted.push(r);
            assert_eq!(mgs.config().mdt_of_seq(r.start), Some(mdt));
            assert_eq!(mgs.config().mdt_of_seq(r.end - 1), Some(mdt));
        }
    }
    assert_eq!(granted[0].start, FIRST_GRANTED_SEQ);
    for w in granted.windows(2) {
        assert_eq!(
            w[0].end, w[1].start,
            "grants are consecutive and never overlap"
        );
    }
    let mgs = Mgs::open(dir.path(), None).unwrap();
    // Adjacent grants to the same MDT were merged into one range.
    let fld = mgs.config().fld;
    assert!(fld.len() < granted.len());
    for w in fld.windows(2) {
        assert!(
            !(w[0].mdt == w[1].mdt && w[0].range.end == w[1].range.start),
            "unmerged: {fld:?}"
        );
    }
    assert_eq!(
        errno(&mgs, MgsRequest::AllocSeq { mdt: 0, count: 0 }).await,
        Errno::Inval
    );
    assert_eq!(
        errno(
            &mgs,
            MgsRequest::AllocSeq {
                mdt: 0,
                count: 1025
            }
        )
        .await,
        Errno::Inval
    );
    assert!(
        mgs.execute(MgsRequest::AllocSeq {
            mdt: 0,
            count: 1024
        })
        .await
        .is_ok()
    );
}

#[tokio::test]
async fn concurrent_grants_are_disjoint() {
    let (_d, mgs) = new_mgs();
    let mut tasks = Vec::new();
    for i in 0..16u32 {
        let mgs = mgs.clone();
        tasks.push(tokio::spawn(async move {
            mgs.execute(MgsRequest::AllocSeq {
                mdt: i % 3,
                count: 7,
            })
            .await
        }));
    }
    let mut ranges = Vec::new();
    for t in tasks {
        let MgsReply::Seq(r) = t.await.unwrap().unwrap() else {
            panic!()
        };
        ranges.push(r);
    }
    ranges.sort_by_key(|r| r.start);
    for w in ranges.windows(2) {
        assert!(w[0].end <= w[1].start);
    }
}

#[tokio::test]
async fn pool_rules() {
    let (_d, mgs) = new_mgs();
    for i in 0..3 {
        mgs.execute(reg(TargetId::ost(i), Uuid::new_v4(), "h:1", false))
            .await
            .unwrap();
    }
    mgs.execute(reg(TargetId::mdt(7), Uuid::new_v4(), "h:1", false))
        .await
        .unwrap();
    let new = |p: &str| MgsRequest::PoolNew { pool: p.into() };
    let add = |p: &str, o: Vec<u32>| MgsRequest::PoolAdd {
        pool: p.into(),
        osts: o,
    };
    let remove = |p: &str, o: Vec<u32>| MgsRequest::PoolRemove {
        pool: p.into(),
        osts: o,
    };
    let destroy = |p: &str| MgsRequest::PoolDestroy { pool: p.into() };

    mgs.execute(new("flash")).await.unwrap();
    assert_eq!(errno(&mgs, new("flash")).await, Errno::Exist);
    assert_eq!(errno(&mgs, new("")).await, Errno::Inval);
    assert_eq!(errno(&mgs, new("sixteen_chars_xx")).await, Errno::Inval);
    assert_eq!(errno(&mgs, new("a.b")).await, Errno::Inval);

    mgs.execute(add("flash", vec![2, 0, 2])).await.unwrap();
    mgs.execute(add("flash", vec![0])).await.unwrap();
    assert_eq!(
        mgs.config().pools["flash"],
        vec![0, 2],
        "sorted, duplicates ignored"
    );
    assert_eq!(
        errno(&mgs, add("flash", vec![1, 9])).await,
        Errno::NoEnt,
        "OST9 is not registered"
    );
    assert_eq!(
        errno(&mgs, add("flash", vec![7])).await,
        Errno::NoEnt,
        "an MDT index is not an OST"
    );
    assert_eq!(
        mgs.config().pools["flash"],
        vec![0, 2],
        "a refused add changes nothing"
    );
    assert_eq!(errno(&mgs, add("nopool", vec![0])).await, Errno::NoEnt);

    assert_eq!(errno(&mgs, destroy("flash")).await, Errno::NotEmpty);
    assert_eq!(errno(&mgs, remove("flash", vec![1])).await, Errno::NoEnt);
    mgs.execute(remove("flash", vec![0, 2])).await.unwrap();
    assert!(mgs.config().pools["flash"].is_empty());
    mgs.execute(destroy("flash")).await.unwrap();
    assert_eq!(errno(&mgs, destroy("flash")).await, Errno::NoEnt);
    assert!(mgs.config().pools.is_empty());
}

#[tokio::test]
async fn params_are_validated() {
    let (_d, mgs) = new_mgs();
    let set = |n: &str, v: Option<&str>| MgsRequest::SetParam {
        name: n.into(),
        value: v.map(String::from),
    };
    mgs.execute(set("llite.*.max_read_ahead_mb", Some("1024")))
        .await
        .unwrap();
    assert_eq!(mgs.config().params["llite.*.max_read_ahead_mb"], "1024");
    let v = mgs.config().version;
    mgs.execute(set("llite.*.max_read_ahead_mb", Some("1024")))
        .await
        .unwrap();
    assert_eq!(
        mgs.config().version,
        v,
        "setting the same value is not a change"
    );
    mgs.execute(set("llite.*.max_read_ahead_mb", None))
        .await
        .unwrap();
    assert!(mgs.config().params.is_empty());
    mgs.execute(set("absent", None)).await.unwrap();
    assert_eq!(mgs.config().version, v + 1);

    assert_eq!(errno(&mgs, set("", Some("1"))).await, Errno::Inval);
    assert_eq!(errno(&mgs, set("a b", Some("1"))).await, Errno::Inval);
    assert_eq!(errno(&mgs, set("a=b", Some("1"))).await, Errno::Inval);
    assert_eq!(
        errno(&mgs, set(&"x".repeat(129), Some("1"))).await,
        Errno::Inval
    );
    assert_eq!(
        errno(&mgs, set("big", Some(&"v".repeat(4097)))).await,
        Errno::Inval
    );
    mgs.execute(set("big", Some(&"v".repeat(4096))))
        .await
        .unwrap();
}

#[tokio::test]
async fn default_layout_is_validated() {
    let (_d, mgs) = new_mgs();
    let set = |t| MgsRequest::SetDefaultLayout { template: t };
    assert_eq!(
        errno(&mgs, set(LayoutTemplate::raid0(-2, 1 << 20, -1))).await,
        Errno::Inval
    );
    assert_eq!(
        errno(&mgs, set(LayoutTemplate::raid0(1, 1000, -1))).await,
        Errno::Inval
    );
    assert_eq!(
        errno(&mgs, set(LayoutTemplate::default())).await,
        Errno::Inval
    );
    mgs.execute(set(LayoutTemplate::raid0(4, 4 << 20, -1)))
        .await
        .unwrap();
    assert_eq!(
        mgs.config().default_layout,
        LayoutTemplate::raid0(4, 4 << 20, -1)
    );
}

#[tokio::test]
async fn subscribers_hear_every_change_once() {
    let (_d, mgs) = new_mgs();
    let probe = Arc::new(Probe::default());
    mgs.subscribe(7, probe.clone());
    mgs.execute(MgsRequest::PoolNew { pool: "p".into() })
        .await
        .unwrap();
    assert_eq!(probe.0.load(Ordering::SeqCst), 1);
    assert_eq!(probe.1.load(Ordering::SeqCst), mgs.config().version);
    // Refused and no-op requests announce nothing.
    let _ = mgs.execute(MgsRequest::PoolNew { pool: "p".into() }).await;
    mgs.execute(MgsRequest::GetConfig).await.unwrap();
    assert_eq!(probe.0.load(Ordering::SeqCst), 1);
    mgs.unsubscribe(7);
    mgs.execute(MgsRequest::PoolDestroy { pool: "p".into() })
        .await
        .unwrap();
    assert_eq!(probe.0.load(Ordering::SeqCst), 1);
}

#[test]
fn opening_checks_name_and_directory() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Mgs::open(dir.path(), None),
        Err(MgsError::NeedFsname(_))
    ));
    assert!(matches!(
        Mgs::open(dir.path(), Some("way_too_long")),
        Err(MgsError::InvalidFsname(_))
    ));
    Mgs::open(dir.path(), Some("alpha")).unwrap();
    let e = Mgs::open(dir.path(), Some("beta")).unwrap_err();
    assert!(matches!(e, MgsError::WrongFsname { .. }));
    assert!(
        e.to_string().contains("belongs to file system \"alpha\""),
        "{e}"
    );

    let busy = tempfile::tempdir().unwrap();
    std::fs::write(busy.path().join("notes.txt"), b"mine").unwrap();
    assert!(matches!(
        Mgs::open(busy.path(), Some("alpha")),
        Err(MgsError::NotEmpty(_))
    ));
}

#[test]
fn a_directory_is_served_by_one_mgs_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let mgs = Mgs::open(dir.path(), Some("alpha")).unwrap();
    assert!(matches!(
        Mgs::open(dir.path(), Some("alpha")),
        Err(MgsError::Busy(_))
    ));
    drop(mgs);
    Mgs::open(dir.path(), Some("alpha")).unwrap();
}

#[test]
fn corrupt_state_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    Mgs::open(dir.path(), Some("alpha")).unwrap();
    let path = dir.path().join(STATE_FILE);
    let good = std::fs::read(&path).unwrap();
    let cases: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"garbage".to_vec(),
        good[..good.len() - 20].to_vec(),
        good.iter()
            .map(|b| if *b == b'1' { b'2' } else { *b })
            .collect(),
        vec![0xff; 100],
    ];
    for bytes in cases {
        std::fs::write(&path, &bytes).unwrap();
        let e = Mgs::open(dir.path(), Some("alpha")).unwrap_err();
        assert!(
            matches!(e, MgsError::Corrupt { .. } | MgsError::FormatVersion { .. }),
            "{e}"
        );
    }
}

#[tokio::test]
async fn silent_targets_become_inactive_and_heartbeats_revive_them() {
    let dir = tempfile::tempdir().unwrap();
    let opts = MgsOptions {
        heartbeat_timeout: Duration::from_millis(150),
    };
    let mgs = Mgs::open_with(dir.path(), Some("testfs"), opts).unwrap();
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    mgs.execute(reg(TargetId::ost(0), a, "h:1", false))
        .await
        .unwrap();
    mgs.execute(reg(TargetId::ost(1), b, "h:2", false))
        .await
        .unwrap();
    let state = |m: &Mgs, i| m.config().target(TargetId::ost(i)).unwrap().state;

    // OST1 keeps beating; OST0 goes silent. The background task notices.
    let deadline = Instant::now() + Duration::from_secs(5);
    while state(&mgs, 0) == TargetState::Active && Instant::now() < deadline {
        mgs.execute(MgsRequest::Heartbeat {
            id: TargetId::ost(1),
            uuid: b,
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(state(&mgs, 0), TargetState::Inactive);
    assert_eq!(state(&mgs, 1), TargetState::Active);
    let v = mgs.config().version;

    mgs.execute(MgsRequest::Heartbeat {
        id: TargetId::ost(0),
        uuid: a,
    })
    .await
    .unwrap();
    assert_eq!(state(&mgs, 0), TargetState::Active);
    assert!(mgs.config().version > v, "state changes bump the version");

    assert_eq!(
        errno(
            &mgs,
            MgsRequest::Heartbeat {
                id: TargetId::ost(5),
                uuid: a
            }
        )
        .await,
        Errno::NoEnt
    );
    assert_eq!(
        errno(
            &mgs,
            MgsRequest::Heartbeat {
                id: TargetId::ost(0),
                uuid: b
            }
        )
        .await,
        Errno::Stale
    );

    // State transitions were persisted.
    let persisted = state::load(dir.path()).unwrap().unwrap();
    assert_eq!(persisted.config.version, mgs.config().version);
}

#[tokio::test]
async fn the_liveness_task_stops_with_the_mgs() {
    let dir = tempfile::tempdir().unwrap();
    let opts = MgsOptions {
        heartbeat_timeout: Duration::from_millis(40),
    };
    let mgs = Mgs::open_with(dir.path(), Some("testfs"), opts).unwrap();
    let weak = Arc::downgrade(&mgs);
    drop(mgs);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(weak.upgrade().is_none());
}
