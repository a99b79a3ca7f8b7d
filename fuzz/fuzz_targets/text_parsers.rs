//! The parsers of text that comes from outside the process: the first byte of the input
//! picks one, the rest is its text (lossily made UTF-8 where the parser takes `&str`).
//!
//! - cluster key files (`ClusterKey::parse`);
//! - client classes: address blocks (`Cidr::parse`, `contains`) and the `nodemap.*`
//!   parameters from the MGS (`NodeMap::from_params`, lines of `NAME=VALUE`);
//! - FSx object metadata from a repository (`FileMeta::decode` of `x-amz-meta-file-*`
//!   attributes, `parse_mode`, `parse_time`);
//! - repository policies, HSM flag names, repository path nesting (`weft_proto::hsm`);
//! - PCC rules and sizes (`weft_client::pcc::rules`), PCC modes;
//! - client parameters set by name pattern (`ClientParams::set`, `list`, `glob_match`);
//! - job ids as servers keep them (`sanitize_jobid`);
//! - a bucket's event messages (`weft_repo::events::s3_event::changes`, `decode_key`);
//! - OST object file names (`parse_object_file_name`),
//!   file system names as the MGS and OSTs check them.
//!
//! Nothing may panic, and no parser may take time out of proportion to its input.

#![no_main]

use libfuzzer_sys::fuzz_target;
use object_store::{Attribute, AttributeValue, Attributes};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use weft_proto::time::Timestamp;

fn key(text: &str) {
    if let Ok(k) = weft_rpc::ClusterKey::parse(text) {
        // What parses must print back to a key that parses the same.
        let again = weft_rpc::ClusterKey::parse(&k.to_text()).ok();
        assert_eq!(
            again.as_ref(),
            Some(&k),
            "a key does not survive its own text"
        );
        let _ = weft_rpc::ClusterKey::parse(&k.client_text());
    }
}

fn nodemap(text: &str) {
    use weft_rpc::nodemap::{Cidr, NodeMap};
    for line in text.lines() {
        if let Ok(c) = Cidr::parse(line) {
            for ip in [
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                IpAddr::V6(Ipv6Addr::LOCALHOST),
                IpAddr::V6(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped()),
            ] {
                let _ = c.contains(ip);
            }
            let _ = c.to_string();
        }
    }
    let pairs: Vec<(&str, &str)> = text
        .lines()
        .map(|l| l.split_once('=').unwrap_or((l, "")))
        .collect();
    let (map, _errors) = NodeMap::from_params(pairs);
    for ip in [
        IpAddr::V4(Ipv4Addr::new(192, 168, 1, 7)),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ] {
        let _ = map.class_of(ip);
    }
}

fn repo_meta(text: &str) {
    use weft_repo::meta::{self, FileMeta};
    let mut attrs = Attributes::new();
    let keys = [
        meta::PERMISSIONS,
        meta::OWNER,
        meta::GROUP,
        meta::ATIME,
        meta::MTIME,
    ];
    for (line, key) in text.lines().zip(keys.iter().cycle()) {
        attrs.insert(
            Attribute::Metadata((*key).into()),
            AttributeValue::from(line.to_string()),
        );
        let _ = meta::parse_mode(line);
        if let Some(t) = meta::parse_time(line) {
            // A time that parses prints back to itself.
            assert_eq!(meta::parse_time(&meta::format_time(t)), Some(t));
        }
    }
    let m = FileMeta::decode(
        &attrs,
        Timestamp {
            sec: 1_700_000_000,
            nsec: 0,
        },
    );
    let _ = (m.is_symlink(), m.is_dir(), m.perm());
    // What an export writes, an import reads back unchanged.
    let back = FileMeta::decode(&m.encode(), Timestamp { sec: 0, nsec: 0 });
    assert_eq!(back, m, "FSx metadata does not survive encode and decode");
}

fn hsm(text: &str) {
    use weft_proto::hsm;
    let _ = hsm::RepoPolicy::parse(text).map(|p| p.to_string());
    for word in text.split(',') {
        let _ = hsm::flag_by_name(word);
    }
    if let Some((a, b)) = text.split_once('\n') {
        let _ = hsm::path_within(a, b);
        let _ = hsm::paths_nest(a, b);
    }
}

fn pcc(text: &str) {
    use weft_client::pcc::rules::{Facts, Rule, parse_size};
    let _ = parse_size(text);
    let _ = text.parse::<weft_client::pcc::Mode>();
    if let Ok(mut rule) = Rule::parse(text) {
        let paths = rule.paths();
        for p in &paths {
            rule.resolve(p, weft_proto::Fid::ROOT);
        }
        let ancestors = [weft_proto::Fid::ROOT];
        let _ = rule.matches(&Facts {
            size: Some(4096),
            uid: 1000,
            gid: 1000,
            ancestors: &ancestors,
        });
    }
}

fn client_params(text: &str) {
    let p = weft_client::params::ClientParams::new("fuzz");
    let (pattern, value) = text.split_once('=').unwrap_or((text, "1"));
    let _ = p.set(pattern, value);
    let _ = p.list(pattern);
    if let Some((a, b)) = text.split_once('\n') {
        let _ = weft_client::params::glob_match(a, b);
    }
}

fn names(text: &str) {
    let jobid = weft_rpc::sanitize_jobid(text);
    assert!(jobid.len() <= weft_proto::JOBID_MAX);
    if let Some(id) = weft_ost::parse_object_file_name(text) {
        assert_eq!(weft_ost::object_file_name(&id), text);
    }
    let _ = weft_mgs::is_valid_fsname(text);
    let _ = weft_ost::validate_fsname(text);
}

/// A bucket's event message as SQS hands it over (S3 records, SNS envelopes, EventBridge
/// events) and the keys in it.
fn bucket_events(text: &str) {
    use weft_repo::events::{s3_event, under_prefix};
    if let Ok(changes) = s3_event::changes(text) {
        for c in changes {
            let _ = under_prefix(&c.key, "data");
        }
    }
    let _ = s3_event::decode_key(text);
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match mode % 9 {
        0 => key(&text),
        1 => nodemap(&text),
        2 => repo_meta(&text),
        3 => hsm(&text),
        4 => pcc(&text),
        5 => client_params(&text),
        6 => bucket_events(&text),
        _ => names(&text),
    }
});
