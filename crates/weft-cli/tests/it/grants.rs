//! Buffered writes never overrun an OST: space is granted before data is buffered, so a
//! full OST answers ENOSPC at write() and everything accepted reaches the disk at close.

use crate::bin;
use crate::support::RW;
use std::time::Duration;
use weft_proto::mdt::Credentials;
use weft_proto::{Errno, Fid};
use weft_testkit::TestCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_ost_refuses_buffered_writes_at_write_time_not_at_close() {
    // One OST on a 24 MiB tmpfs.
    let tc = TestCluster::start_with_ost_size(bin(), 1, Some(24 << 20))
        .await
        .unwrap();
    let cred = Credentials::root();
    let a = tc.fs_client(Duration::from_secs(5)).await.unwrap();
    let b = tc.fs_client(Duration::from_secs(5)).await.unwrap();
    let f = a
        .open_in(Fid::ROOT, b"filler", RW, None, &cred)
        .await
        .unwrap();
    let chunk = vec![0xabu8; 1 << 20];
    let mut accepted = 0u64;
    let refusal = loop {
        match f.write_at(accepted, &chunk).await {
            Ok(_) => accepted += chunk.len() as u64,
            Err(e) => break e,
        }
        assert!(
            accepted < 64 << 20,
            "a 24 MiB OST accepted {accepted} bytes"
        );
    };
    assert_eq!(refusal.errno(), Errno::NoSpc, "{refusal}");
    assert!(accepted >= 8 << 20, "only {accepted} bytes were accepted");
    // While A holds the space, B cannot buffer into it either.
    let g = b
        .open_in(Fid::ROOT, b"other", RW, None, &cred)
        .await
        .unwrap();
    assert_eq!(
        g.write_at(0, &chunk).await.unwrap_err().errno(),
        Errno::NoSpc
    );
    g.close().await.unwrap();
    // Everything A was allowed to buffer lands: close reports no error.
    f.close().await.unwrap();
    let back = a.read_file("/filler", &cred).await.unwrap();
    assert_eq!(back.len() as u64, accepted);
    assert!(back.iter().all(|&x| x == 0xab));
}
