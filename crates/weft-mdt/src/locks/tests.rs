//! The range logic against a byte-map model, and the table's waiting, cancelling,
//! disconnecting, deadlock and limit behaviour.

use super::ranges::{overlaps, touches};
use super::*;
use proptest::prelude::*;
use std::sync::Arc;
use std::time::Duration;
use weft_proto::mdt::LOCK_TO_EOF;

/// Bytes 0..TAIL are modelled one by one; the model's last cell stands for every byte
/// from TAIL to the end of the file (ranges either end before TAIL or run to EOF).
const TAIL: u64 = 40;

type Model = Vec<[Option<Mode>; TAIL as usize + 1]>;

fn cells(start: u64, end: u64) -> std::ops::RangeInclusive<usize> {
    start as usize..=(end.min(TAIL)) as usize
}

fn model_conflict(m: &Model, owner: usize, mode: Mode, start: u64, end: u64) -> Option<u64> {
    let mut first = None;
    for (o, bytes) in m.iter().enumerate() {
        if o == owner {
            continue;
        }
        for c in cells(start, end) {
            if bytes[c].is_some_and(|h| h.conflicts(mode)) {
                first = Some(first.map_or(c as u64, |f: u64| f.min(c as u64)));
                break;
            }
        }
    }
    first
}

fn owner(o: usize) -> Owner {
    Owner {
        conn: 1 + (o as u64 % 2),
        owner: o as u64,
    }
}

fn expand(r: &RangeLocks, owners: usize) -> Model {
    let mut m: Model = vec![[None; TAIL as usize + 1]; owners];
    for h in r.held() {
        let o = h.owner.owner as usize;
        for c in cells(h.start, h.end) {
            assert!(m[o][c].is_none(), "owner {o} holds byte {c} twice: {r:?}");
            m[o][c] = Some(h.mode);
        }
    }
    m
}

fn op() -> impl Strategy<Value = (usize, LockType, u64, u64)> {
    (
        0..3usize,
        prop_oneof![
            Just(LockType::Read),
            Just(LockType::Write),
            Just(LockType::Unlock)
        ],
        0..TAIL,
        0..TAIL + 1,
    )
        .prop_map(|(o, t, s, len)| {
            let end = if s + len >= TAIL {
                LOCK_TO_EOF
            } else {
                s + len
            };
            (o, t, s, end)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn ranges_behave_like_a_byte_map(ops in proptest::collection::vec(op(), 1..40)) {
        let mut r = RangeLocks::default();
        let mut m: Model = vec![[None; TAIL as usize + 1]; 3];
        for (o, typ, start, end) in ops {
            let mode = Mode::of(typ);
            if let Some(mode) = mode {
                let want = model_conflict(&m, o, mode, start, end);
                let got = r.first_conflict(owner(o), mode, start, end);
                prop_assert_eq!(got.map(|h| h.start.max(start)), want, "conflict of {:?}", (o, typ, start, end));
                if let Some(h) = got {
                    // The holder reported is the first by start, and really conflicts.
                    prop_assert!(h.owner != owner(o) && h.mode.conflicts(mode));
                    prop_assert!(r.held().iter().filter(|x| x.owner != owner(o) && x.mode.conflicts(mode) && x.start <= end && start <= x.end).all(|x| x.start >= h.start));
                    continue;
                }
            }
            r.set(owner(o), typ, start, end, o as u32);
            for c in cells(start, end) {
                m[o][c] = mode;
            }
            prop_assert_eq!(expand(&r, 3), m.clone());
            // Canonical: an owner's ranges of one mode never overlap or touch.
            for a in r.held() {
                for b in r.held() {
                    if std::ptr::eq(a, b) || a.owner != b.owner {
                        continue;
                    }
                    prop_assert!(!overlaps(a, b.start, b.end));
                    prop_assert!(a.mode != b.mode || !touches(a, b.start, b.end), "{:?} and {:?} should have merged", a, b);
                }
            }
        }
    }
}

#[test]
fn unlocking_the_middle_splits_and_relocking_merges() {
    let mut r = RangeLocks::default();
    let o = owner(0);
    r.set(o, LockType::Write, 0, 99, 7);
    r.set(o, LockType::Unlock, 10, 19, 7);
    let mut spans: Vec<_> = r.held().iter().map(|h| (h.start, h.end)).collect();
    spans.sort();
    assert_eq!(spans, vec![(0, 9), (20, 99)]);
    r.set(o, LockType::Write, 10, 19, 7);
    assert_eq!(r.held().len(), 1);
    assert_eq!((r.held()[0].start, r.held()[0].end), (0, 99));
    // Converting a middle part to read leaves three records.
    r.set(o, LockType::Read, 40, 49, 7);
    assert_eq!(r.count_of(o), 3);
    r.set(o, LockType::Unlock, 0, LOCK_TO_EOF, 7);
    assert!(r.is_empty());
}

fn lock(kind: LockKind, typ: LockType, start: u64, end: u64, owner: u64) -> FileLock {
    FileLock {
        kind,
        typ,
        start,
        end,
        owner,
        pid: 1000 + owner as u32,
    }
}

fn posix(typ: LockType, start: u64, end: u64, owner: u64) -> FileLock {
    lock(LockKind::Posix, typ, start, end, owner)
}

const FID: Fid = Fid::ROOT;

async fn call(t: &LockTable, conn: u64, req: MdtRequest) -> WireResult<MdtReply> {
    let caller = Caller {
        conn,
        client: Uuid::from_u64_pair(conn, conn),
        closed: &|| false,
    };
    t.execute(&caller, req).await
}

async fn set(t: &LockTable, conn: u64, l: FileLock) -> WireResult<MdtReply> {
    call(
        t,
        conn,
        MdtRequest::SetLock {
            fid: FID,
            lock: l,
            wait: None,
        },
    )
    .await
}

fn errno(r: WireResult<MdtReply>) -> Errno {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.errno,
    }
}

/// Starts a blocking request in the background.
fn wait(
    t: &Arc<LockTable>,
    conn: u64,
    l: FileLock,
    id: u64,
) -> tokio::task::JoinHandle<WireResult<MdtReply>> {
    let t = t.clone();
    tokio::spawn(async move {
        call(
            &t,
            conn,
            MdtRequest::SetLock {
                fid: FID,
                lock: l,
                wait: Some(id),
            },
        )
        .await
    })
}

async fn until_waiting(t: &LockTable, n: u64) {
    for _ in 0..200 {
        if t.stats().waiting == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("expected {n} waiters, have {:?}", t.stats());
}

#[tokio::test]
async fn conflicts_only_between_owners_and_getlk_names_the_holder() {
    let t = LockTable::default();
    set(&t, 1, posix(LockType::Write, 100, 199, 5))
        .await
        .unwrap();
    // Same owner: upgrade, downgrade, overlap are all fine.
    set(&t, 1, posix(LockType::Read, 150, 299, 5))
        .await
        .unwrap();
    // Another owner on the same connection conflicts; so does another client.
    assert_eq!(
        errno(set(&t, 1, posix(LockType::Read, 120, 120, 6)).await),
        Errno::Again
    );
    assert_eq!(
        errno(set(&t, 2, posix(LockType::Write, 250, 250, 5)).await),
        Errno::Again
    );
    // Reads share.
    set(&t, 2, posix(LockType::Read, 250, 260, 5))
        .await
        .unwrap();
    let r = call(
        &t,
        3,
        MdtRequest::GetLock {
            fid: FID,
            lock: posix(LockType::Write, 0, LOCK_TO_EOF, 9),
        },
    )
    .await
    .unwrap();
    let MdtReply::Lock(Some(h)) = r else {
        panic!("{r:?}")
    };
    assert_eq!(
        (h.typ, h.start, h.end, h.pid, h.owner),
        (LockType::Write, 100, 149, 1005, 5)
    );
    assert_eq!(h.client, Uuid::from_u64_pair(1, 1));
    let r = call(
        &t,
        3,
        MdtRequest::GetLock {
            fid: FID,
            lock: posix(LockType::Read, 0, 99, 9),
        },
    )
    .await;
    assert_eq!(r.unwrap(), MdtReply::Lock(None));
    assert!(t.stats().conflicts >= 3);
}

#[tokio::test]
async fn posix_and_flock_locks_do_not_interact() {
    let t = LockTable::default();
    set(&t, 1, posix(LockType::Write, 0, LOCK_TO_EOF, 1))
        .await
        .unwrap();
    set(
        &t,
        2,
        lock(LockKind::Flock, LockType::Write, 0, LOCK_TO_EOF, 2),
    )
    .await
    .unwrap();
    assert_eq!(
        errno(
            set(
                &t,
                3,
                lock(LockKind::Flock, LockType::Read, 0, LOCK_TO_EOF, 3)
            )
            .await
        ),
        Errno::Again
    );
}

#[tokio::test]
async fn a_blocked_request_is_granted_when_the_holder_unlocks() {
    let t = Arc::new(LockTable::default());
    set(&t, 1, posix(LockType::Write, 0, 9, 1)).await.unwrap();
    let w = wait(&t, 2, posix(LockType::Write, 5, 5, 2), 1);
    until_waiting(&t, 1).await;
    assert!(!w.is_finished());
    // Unlocking a part that does not cover the wanted byte changes nothing.
    set(&t, 1, posix(LockType::Unlock, 0, 3, 1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!w.is_finished());
    set(&t, 1, posix(LockType::Unlock, 4, 9, 1)).await.unwrap();
    assert_eq!(w.await.unwrap().unwrap(), MdtReply::Ok);
    assert_eq!(
        errno(set(&t, 1, posix(LockType::Read, 5, 5, 1)).await),
        Errno::Again
    );
    let s = t.stats();
    assert_eq!((s.waiting, s.waits), (0, 1));
}

#[tokio::test]
async fn a_downgrade_lets_readers_in_and_release_owner_frees_all() {
    let t = Arc::new(LockTable::default());
    set(&t, 1, posix(LockType::Write, 0, LOCK_TO_EOF, 1))
        .await
        .unwrap();
    let r = wait(&t, 2, posix(LockType::Read, 10, 20, 2), 1);
    let w = wait(&t, 3, posix(LockType::Write, 30, 40, 3), 1);
    until_waiting(&t, 2).await;
    set(&t, 1, posix(LockType::Read, 0, LOCK_TO_EOF, 1))
        .await
        .unwrap();
    assert_eq!(r.await.unwrap().unwrap(), MdtReply::Ok);
    assert!(!w.is_finished());
    call(
        &t,
        1,
        MdtRequest::ReleaseLocks {
            fid: FID,
            kind: LockKind::Posix,
            owner: 1,
        },
    )
    .await
    .unwrap();
    assert_eq!(w.await.unwrap().unwrap(), MdtReply::Ok);
}

#[tokio::test]
async fn a_cancelled_wait_fails_with_eintr() {
    let t = Arc::new(LockTable::default());
    set(&t, 1, posix(LockType::Write, 0, 0, 1)).await.unwrap();
    let w = wait(&t, 2, posix(LockType::Write, 0, 0, 2), 77);
    until_waiting(&t, 1).await;
    // Another connection's cancel with the same id does nothing.
    call(&t, 3, MdtRequest::CancelLockWait { wait: 77 })
        .await
        .unwrap();
    until_waiting(&t, 1).await;
    call(&t, 2, MdtRequest::CancelLockWait { wait: 77 })
        .await
        .unwrap();
    assert_eq!(errno(w.await.unwrap()), Errno::Intr);
    assert_eq!(t.stats().waiting, 0);
    // The id is free again and nothing was granted.
    set(&t, 1, posix(LockType::Unlock, 0, 0, 1)).await.unwrap();
    assert_eq!(t.stats().held, 0);
}

#[tokio::test]
async fn a_disconnect_releases_locks_drops_waits_and_wakes_others() {
    let t = Arc::new(LockTable::default());
    set(&t, 1, posix(LockType::Write, 0, 99, 1)).await.unwrap();
    set(
        &t,
        1,
        lock(LockKind::Flock, LockType::Write, 0, LOCK_TO_EOF, 2),
    )
    .await
    .unwrap();
    set(&t, 3, posix(LockType::Write, 200, 200, 3))
        .await
        .unwrap();
    let w = wait(&t, 2, posix(LockType::Write, 50, 50, 1), 1);
    let gone = wait(
        &t,
        1,
        lock(LockKind::Posix, LockType::Write, 200, 200, 9),
        1,
    );
    until_waiting(&t, 2).await;
    t.disconnect(1);
    assert_eq!(w.await.unwrap().unwrap(), MdtReply::Ok);
    // The disconnected connection's own wait ended without a grant.
    assert_eq!(errno(gone.await.unwrap()), Errno::Intr);
    set(
        &t,
        4,
        lock(LockKind::Flock, LockType::Write, 0, LOCK_TO_EOF, 2),
    )
    .await
    .unwrap();
    let s = t.stats();
    assert_eq!(s.waiting, 0);
    assert_eq!(s.held, 3);
}

#[tokio::test]
async fn a_request_from_a_closed_connection_leaves_nothing() {
    let t = LockTable::default();
    let caller = Caller {
        conn: 1,
        client: Uuid::nil(),
        closed: &|| true,
    };
    let r = t
        .execute(
            &caller,
            MdtRequest::SetLock {
                fid: FID,
                lock: posix(LockType::Write, 0, 0, 1),
                wait: None,
            },
        )
        .await;
    assert_eq!(errno(r), Errno::Io);
    assert_eq!(t.stats().held, 0);
}

#[tokio::test]
async fn a_wait_closing_a_cycle_fails_with_edeadlk() {
    let t = Arc::new(LockTable::default());
    // Owner A (conn 1) holds byte 0, owner B (conn 2) holds byte 1.
    set(&t, 1, posix(LockType::Write, 0, 0, 1)).await.unwrap();
    set(&t, 2, posix(LockType::Write, 1, 1, 1)).await.unwrap();
    let a = wait(&t, 1, posix(LockType::Write, 1, 1, 1), 1);
    until_waiting(&t, 1).await;
    let b = call(
        &t,
        2,
        MdtRequest::SetLock {
            fid: FID,
            lock: posix(LockType::Write, 0, 0, 1),
            wait: Some(1),
        },
    )
    .await;
    assert_eq!(errno(b), Errno::DeadLk);
    assert_eq!(t.stats().deadlocks, 1);
    // B gives up its byte: A gets it.
    set(&t, 2, posix(LockType::Unlock, 1, 1, 1)).await.unwrap();
    assert_eq!(a.await.unwrap().unwrap(), MdtReply::Ok);
}

#[tokio::test]
async fn a_connection_past_its_limit_gets_enolck() {
    let t = LockTable::new(LockLimits { per_connection: 3 });
    for i in 0..3 {
        set(&t, 1, posix(LockType::Write, i * 10, i * 10, 1))
            .await
            .unwrap();
    }
    assert_eq!(
        errno(set(&t, 1, posix(LockType::Write, 100, 100, 1)).await),
        Errno::NoLck
    );
    // Merging into an existing record needs none.
    set(&t, 1, posix(LockType::Write, 1, 1, 1)).await.unwrap();
    // Others are not limited by this connection.
    set(&t, 2, posix(LockType::Write, 100, 100, 1))
        .await
        .unwrap();
    // Unlocking everything gives the room back.
    set(&t, 1, posix(LockType::Unlock, 0, LOCK_TO_EOF, 1))
        .await
        .unwrap();
    set(&t, 1, posix(LockType::Write, 500, 500, 1))
        .await
        .unwrap();
    assert_eq!(t.stats().held, 2);
}

#[tokio::test]
async fn bad_ranges_and_getlk_of_unlock_are_einval() {
    let t = LockTable::default();
    assert_eq!(
        errno(set(&t, 1, posix(LockType::Write, 5, 4, 1)).await),
        Errno::Inval
    );
    let r = call(
        &t,
        1,
        MdtRequest::GetLock {
            fid: FID,
            lock: posix(LockType::Unlock, 0, 4, 1),
        },
    )
    .await;
    assert_eq!(errno(r), Errno::Inval);
}

#[tokio::test]
async fn a_cancel_that_overtakes_its_wait_still_cancels_it() {
    let t = Arc::new(LockTable::default());
    set(&t, 1, posix(LockType::Write, 0, 0, 1)).await.unwrap();
    call(&t, 2, MdtRequest::CancelLockWait { wait: 5 })
        .await
        .unwrap();
    let w = wait(&t, 2, posix(LockType::Write, 0, 0, 2), 5);
    assert_eq!(errno(w.await.unwrap()), Errno::Intr);
    assert_eq!(t.stats().waiting, 0);
    // Only once: the same id may not be refused forever, nor another id at all.
    let w = wait(&t, 2, posix(LockType::Write, 1, 1, 2), 5);
    assert_eq!(w.await.unwrap().unwrap(), MdtReply::Ok);
}

#[tokio::test]
async fn a_broken_connections_locks_wait_for_the_client_to_come_back() {
    let t = Arc::new(LockTable::default());
    let client = Uuid::from_u64_pair(1, 1); // what `call` uses for connection 1
    set(&t, 1, posix(LockType::Write, 0, 9, 7)).await.unwrap();
    set(&t, 3, posix(LockType::Write, 50, 50, 3)).await.unwrap();
    let dropped = wait(&t, 1, posix(LockType::Write, 50, 50, 8), 1);
    let other = wait(&t, 2, posix(LockType::Write, 5, 5, 2), 1);
    until_waiting(&t, 2).await;
    let n = t.park(1, client);
    // The broken connection's wait is gone; its lock still excludes others.
    assert!(dropped.await.unwrap().is_err());
    until_waiting(&t, 1).await;
    assert_eq!(
        errno(set(&t, 4, posix(LockType::Read, 0, 0, 1)).await),
        Errno::Again
    );
    // Another client cannot take it; the same client's next connection does.
    t.adopt(5, Uuid::from_u64_pair(9, 9), &|| false);
    t.adopt(6, client, &|| true);
    t.expire(Uuid::from_u64_pair(9, 9), n);
    assert_eq!(t.stats().held, 2);
    t.adopt(6, client, &|| false);
    // Expiry of the old park no longer touches the adopted locks.
    t.expire(client, n);
    assert!(!other.is_finished());
    // It is the new connection's now: its owner unlocks, the waiter gets in.
    set(&t, 6, posix(LockType::Unlock, 0, 9, 7)).await.unwrap();
    assert_eq!(other.await.unwrap().unwrap(), MdtReply::Ok);
}

#[tokio::test]
async fn parked_locks_not_taken_back_are_released_at_expiry() {
    let t = Arc::new(LockTable::default());
    let client = Uuid::from_u64_pair(1, 1);
    set(&t, 1, posix(LockType::Write, 0, 0, 7)).await.unwrap();
    let w = wait(&t, 2, posix(LockType::Write, 0, 0, 2), 1);
    until_waiting(&t, 1).await;
    let first = t.park(1, client);
    // The client came back, locked again, and broke again: a later park.
    t.adopt(3, client, &|| false);
    let second = t.park(3, client);
    assert!(second > first);
    t.expire(client, first);
    assert!(
        !w.is_finished(),
        "the first expiry must not release the later park"
    );
    t.expire(client, second);
    assert_eq!(w.await.unwrap().unwrap(), MdtReply::Ok);
    // A nil client (no identity) is released at once.
    let n = t.park(2, Uuid::nil());
    t.expire(Uuid::nil(), n);
    assert_eq!(t.stats().held, 0);
}
