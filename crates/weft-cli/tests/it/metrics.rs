//! Each server's Prometheus endpoint, scraped over HTTP and parsed with a real text-format
//! parser; the figures follow the work the servers did.

use crate::bin;
use bytes::Bytes;
use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weft_client::NewFile;
use weft_proto::mdt::Credentials;
use weft_proto::{Compression, Fid, ObjectId};
use weft_rpc::RequestContext;
use weft_testkit::TestCluster;

async fn get(addr: &str, path: &str) -> (String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).await.unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

pub(crate) async fn scrape(addr: &str) -> prometheus_parse::Scrape {
    let (status, body) = get(addr, "/metrics").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .expect("valid Prometheus text")
}

pub(crate) fn value(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .find(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match x.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
        .unwrap_or_else(|| panic!("no sample {name} {labels:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_exposes_parseable_metrics_that_count_its_work() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let client = tc.client().await.unwrap();
    let mdt = client.mdt(0).unwrap();
    let cred = Credentials::root();
    let dir = mdt.mkdir(Fid::ROOT, b"m", 0o755, &cred).await.unwrap();
    for i in 0..25 {
        mdt.create(
            &NewFile::exclusive(dir.fid, format!("f{i}").as_bytes(), 0o100644),
            &cred,
        )
        .await
        .unwrap();
    }
    let _ = mdt.lookup(dir.fid, b"missing", &cred).await;
    let obj = ObjectId {
        fid: dir.fid,
        component: 0,
        stripe: 0,
    };
    client
        .ost(0)
        .unwrap()
        .write(
            obj,
            0,
            Bytes::from(vec![7u8; 1 << 20]),
            false,
            Compression::Inherit,
        )
        .await
        .unwrap();

    let [mgs_m, mds_m, oss_m] = &tc.metrics_addrs;
    let mds = scrape(mds_m).await;
    // The readiness probe of the test harness creates one file too.
    assert!(
        value(
            &mds,
            "weft_requests_total",
            &[("target", "MDT0000"), ("op", "create")]
        ) >= 25.0
    );
    assert!(
        value(
            &mds,
            "weft_request_errors_total",
            &[("target", "MDT0000"), ("op", "lookup")]
        ) >= 1.0
    );
    assert!(value(&mds, "weft_mdt_files", &[("target", "MDT0000")]) >= 25.0);
    assert!(value(&mds, "weft_mdt_commits_total", &[("target", "MDT0000")]) >= 1.0);
    let hist = mds
        .samples
        .iter()
        .find(|x| {
            x.metric == "weft_request_duration_seconds" && x.labels.get("op") == Some("create")
        })
        .expect("a create latency histogram");
    match &hist.value {
        prometheus_parse::Value::Histogram(buckets) => {
            let inf = buckets.iter().find(|b| b.less_than.is_infinite()).unwrap();
            assert!(inf.count >= 25.0);
            assert!(
                buckets.windows(2).all(|w| w[0].count <= w[1].count),
                "buckets are cumulative"
            );
        }
        other => panic!("not a histogram: {other:?}"),
    }

    let oss = scrape(oss_m).await;
    assert!(
        value(&oss, "weft_ost_write_bytes_total", &[("target", "OST0000")])
            >= f64::from(1u32 << 20)
    );
    assert!(
        value(
            &oss,
            "weft_requests_total",
            &[("target", "OST0000"), ("op", "write")]
        ) >= 1.0
    );

    let mgs = scrape(mgs_m).await;
    assert!(
        value(
            &mgs,
            "weft_requests_total",
            &[("target", "MGS"), ("op", "register")]
        ) >= 2.0
    );

    let (status, _) = get(mds_m, "/other").await;
    assert_eq!(status, "HTTP/1.1 404 Not Found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_uses_only_metrics_the_servers_export() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let client = tc.client().await.unwrap();
    let obj = ObjectId {
        fid: Fid::ROOT,
        component: 0,
        stripe: 0,
    };
    let ost = client.ost(0).unwrap();
    ost.write(
        obj,
        0,
        Bytes::from_static(b"x"),
        false,
        Compression::Inherit,
    )
    .await
    .unwrap();
    ost.read(obj, 0, 1).await.unwrap();
    let mut exported = std::collections::BTreeSet::new();
    for addr in &tc.metrics_addrs {
        let (_, body) = get(addr, "/metrics").await;
        for line in body.lines().filter(|l| !l.starts_with('#')) {
            if let Some(name) = line.split('{').next() {
                exported.insert(name.to_string());
            }
        }
    }
    let dashboard = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/weftfs-dashboard.json"),
    )
    .unwrap();
    let json: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let mut used = 0;
    for panel in json["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("weft_") {
                    used += 1;
                    assert!(
                        exported.contains(word),
                        "dashboard uses {word}, which no server exports"
                    );
                }
            }
        }
    }
    assert!(used >= 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_statistics_attribute_requests_to_their_job() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let client = tc.client().await.unwrap();
    let mdt = client.mdt(0).unwrap();
    let cred = Credentials::root();
    let train = RequestContext::new().for_job(Some("train.7".into()));
    let eval = RequestContext::new().for_job(Some("eval.3".into()));
    for i in 0..5 {
        mdt.in_context(&train)
            .mkdir(Fid::ROOT, format!("j{i}").as_bytes(), 0o755, &cred)
            .await
            .unwrap();
    }
    let mdt = mdt.in_context(&eval);
    for i in 0..2 {
        mdt.lookup(Fid::ROOT, format!("j{i}").as_bytes(), &cred)
            .await
            .unwrap();
    }
    let obj = ObjectId {
        fid: Fid::ROOT,
        component: 9,
        stripe: 0,
    };
    client
        .ost(0)
        .unwrap()
        .in_context(&eval)
        .write(
            obj,
            0,
            Bytes::from(vec![1u8; 4096]),
            false,
            Compression::Inherit,
        )
        .await
        .unwrap();

    let mds = scrape(&tc.metrics_addrs[1]).await;
    assert_eq!(
        value(
            &mds,
            "weft_job_requests_total",
            &[("job", "train.7"), ("op", "mkdir")]
        ),
        5.0
    );
    assert_eq!(
        value(
            &mds,
            "weft_job_requests_total",
            &[("job", "eval.3"), ("op", "lookup")]
        ),
        2.0
    );
    assert!(!mds.samples.iter().any(|s| s.labels.get("job") == Some("train.7") && s.labels.get("op") == Some("lookup")));
    let oss = scrape(&tc.metrics_addrs[2]).await;
    assert_eq!(
        value(
            &oss,
            "weft_job_bulk_bytes_total",
            &[("job", "eval.3"), ("op", "write")]
        ),
        4096.0
    );

    let out = std::process::Command::new(bin())
        .args(["get_param", "--mgs", &tc.mgs_addr, "mdt.*.job_stats"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let train = text
        .split("- job_id:")
        .find(|e| e.trim_start().starts_with("train.7"))
        .expect("train.7 listed");
    assert!(
        train.contains("mkdir:") && train.contains("samples: 5,"),
        "{text}"
    );
}
