//! The multi-host lab (issue 25): a file system across six hosts made of network
//! namespaces — MGS and MDS on one, two OSS hosts with two OSTs each, three client hosts
//! with their own mounts — every link limited to 1 Gbit/s. Data striped over both OSS
//! hosts written on one client is read byte-exact on the others, names made on one are
//! listed on another, and a partition of an OSS host is a pause for a reader, not an error.

use crate::bin;
use crate::support::write_synced;
use std::time::{Duration, Instant};
use weft_testkit::lab::{LabCluster, LabSpec};
use weft_testkit::pattern;

/// Runs `weft args...` on lab host `host` (administration verbs reach the servers over
/// the host's own link) and returns its standard output.
fn weft_on(lc: &LabCluster, host: &str, args: &[&str]) -> String {
    let out = lc.lab.run(host, bin(), args).unwrap();
    assert!(
        out.status.success(),
        "weft {args:?} on {host}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_hosts_share_one_file_system_and_an_oss_partition_is_a_pause() {
    let spec = LabSpec {
        servers: "srv".into(),
        oss: vec![("oss1".into(), 2), ("oss2".into(), 2)],
        clients: vec!["c1".into(), "c2".into(), "c3".into()],
        link_mbit: Some(1000),
        oss_disk_mib: None,
        server_args: Vec::new(),
        failover_host: None,
    };
    let lc = LabCluster::start(bin(), &spec).await.unwrap();
    let (c1, c2, c3) = (
        lc.mount("c1").unwrap().path.clone(),
        lc.mount("c2").unwrap().path.clone(),
        lc.mount("c3").unwrap().path.clone(),
    );
    std::fs::create_dir(c1.join("data")).unwrap();
    let data_dir = c1.join("data").display().to_string();
    weft_on(&lc, "c1", &["setstripe", "-c", "-1", "-S", "1M", &data_dir]);

    // Striped over all four OSTs of both OSS hosts, written on c1, read on c2 and c3.
    let big = pattern(0, 24 << 20, 1);
    write_synced(&c1.join("data/big"), &big);
    let stripes = weft_on(&lc, "c1", &["getstripe", "-c", &format!("{data_dir}/big")]);
    assert_eq!(
        stripes.trim(),
        "4",
        "striped over every OST of both OSS hosts"
    );
    for other in [&c2, &c3] {
        assert!(std::fs::read(other.join("data/big")).unwrap() == big);
    }

    // Names made on one client are seen by the others.
    std::fs::create_dir(c2.join("names")).unwrap();
    for i in 0..50 {
        std::fs::write(c2.join(format!("names/n{i}")), format!("{i}")).unwrap();
    }
    let mut seen: Vec<String> = std::fs::read_dir(c3.join("names"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    seen.sort();
    let mut want: Vec<String> = (0..50).map(|i| format!("n{i}")).collect();
    want.sort();
    assert_eq!(seen, want);

    // A partition: oss2's cable is pulled while c3 reads a file it has never read (half
    // its stripes are on oss2); the read waits, and completes byte-exact once the cable
    // is back.
    let fresh = pattern(0, 8 << 20, 2);
    write_synced(&c1.join("data/fresh"), &fresh);
    lc.lab.set_link("oss2", false).unwrap();
    let reader = {
        let path = c3.join("data/fresh");
        std::thread::spawn(move || {
            let started = Instant::now();
            let back = std::fs::read(path);
            (back, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    lc.lab.set_link("oss2", true).unwrap();
    let (back, waited) = reader.join().unwrap();
    let back = back.expect("the read across the partition succeeds");
    assert!(back == fresh, "the read across the partition is byte-exact");
    eprintln!("the read across a 2 s partition of oss2 took {waited:?}");
}
