//! The MGS's persistent state and its file, `mgs_state.json`.
//!
//! The file is one header line and a JSON body:
//!
//! ```text
//! weft-mgs-state 1 <body length> <crc32c of body, 8 hex digits>
//! {"mgs_uuid":..,"next_seq":..,"config":{..FsConfig..}}
//! ```
//!
//! The header carries the format version (checked before the body is parsed) and a checksum,
//! so a torn or bit-flipped file is reported as corrupt instead of being half-believed.
//! It is rewritten whole, with the durable recipe, on every change. Fields added since
//! format 1 (a target's `failover` addresses) default when absent, so older files load as
//! they are.

use crate::error::MgsError;
use crate::names::is_valid_fsname;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::Path;
use uuid::Uuid;
use weft_durable::write_durably;
use weft_proto::fid::FIRST_GRANTED_SEQ;
use weft_proto::hsm::RepoTask;
use weft_proto::mgs::FsConfig;

/// File name of the state, in the data directory.
pub const STATE_FILE: &str = "mgs_state.json";
/// Version of the state format this build writes and reads.
pub const STATE_FORMAT_VERSION: u32 = 1;
const MAGIC: &str = "weft-mgs-state";
/// Largest state file accepted (a sanity bound: real ones are kilobytes).
const STATE_MAX: u64 = 256 << 20;

/// Everything the MGS keeps across restarts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The MGS's own UUID, fixed at format.
    pub mgs_uuid: Uuid,
    /// The next FID sequence to grant: every sequence below it has been granted.
    pub next_seq: u64,
    /// The file system configuration.
    pub config: FsConfig,
    /// Data repository tasks (`weft repo tasks`), oldest first; not part of the
    /// configuration clients fetch.
    #[serde(default)]
    pub tasks: Vec<RepoTask>,
    /// The smallest repository id never given out: ids are archive ids kept in files, so
    /// one is never reused, even after its association is deleted.
    #[serde(default)]
    pub next_repo: u32,
}

/// Encodes the record as the file's bytes.
pub(crate) fn encode(record: &Record) -> io::Result<Vec<u8>> {
    let body = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
    let mut out = format!(
        "{MAGIC} {STATE_FORMAT_VERSION} {} {:08x}\n",
        body.len(),
        weft_proto::checksum::crc32c(&body)
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out.push(b'\n');
    Ok(out)
}

/// Writes the record durably.
pub(crate) fn store(dir: &Path, record: &Record) -> io::Result<()> {
    write_durably(&dir.join(STATE_FILE), &encode(record)?)
}

/// Reads the record; `None` when the directory has no state file.
pub(crate) fn load(dir: &Path) -> Result<Option<Record>, MgsError> {
    let path = dir.join(STATE_FILE);
    let corrupt = |reason: String| MgsError::Corrupt {
        path: path.clone(),
        reason,
    };
    match std::fs::metadata(&path) {
        Ok(m) if m.len() > STATE_MAX => {
            return Err(corrupt(format!("{} bytes is implausibly large", m.len())));
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(MgsError::Io { path, source: e }),
    }
    let bytes = std::fs::read(&path).map_err(|e| MgsError::Io {
        path: path.clone(),
        source: e,
    })?;
    let Some(nl) = bytes.iter().position(|b| *b == b'\n') else {
        return Err(corrupt("no header line".into()));
    };
    let (header, rest) = bytes.split_at(nl);
    let header = std::str::from_utf8(header).map_err(|_| corrupt("header is not text".into()))?;
    let fields: Vec<&str> = header.split(' ').collect();
    let [magic, version, len, crc] = fields.as_slice() else {
        return Err(corrupt(format!(
            "malformed header {:?}",
            header.chars().take(80).collect::<String>()
        )));
    };
    if *magic != MAGIC {
        return Err(corrupt("not an MGS state file".into()));
    }
    let version: u32 = version
        .parse()
        .map_err(|_| corrupt("bad version in header".into()))?;
    if version != STATE_FORMAT_VERSION {
        return Err(MgsError::FormatVersion {
            path,
            found: version,
            supported: STATE_FORMAT_VERSION,
        });
    }
    let len: usize = len
        .parse()
        .map_err(|_| corrupt("bad length in header".into()))?;
    let crc = u32::from_str_radix(crc, 16).map_err(|_| corrupt("bad checksum in header".into()))?;
    // `rest` starts with the header's newline.
    let body = rest
        .get(1..)
        .and_then(|r| r.get(..len))
        .ok_or_else(|| corrupt("body is truncated".into()))?;
    if weft_proto::checksum::crc32c(body) != crc {
        return Err(corrupt("checksum mismatch".into()));
    }
    let record: Record = serde_json::from_slice(body).map_err(|e| corrupt(e.to_string()))?;
    check(&record).map_err(corrupt)?;
    Ok(Some(record))
}

/// The invariants a loaded record must hold; a record that breaks them would make the MGS
/// grant a sequence twice or serve a nonsensical configuration.
fn check(r: &Record) -> Result<(), String> {
    if !is_valid_fsname(&r.config.fsname) {
        return Err(format!("invalid file system name {:?}", r.config.fsname));
    }
    if r.next_seq < FIRST_GRANTED_SEQ {
        return Err(format!(
            "next sequence {:#x} is below the first grantable one",
            r.next_seq
        ));
    }
    if let Some(e) = r
        .config
        .fld
        .iter()
        .find(|e| e.range.end > r.next_seq || e.range.start >= e.range.end)
    {
        return Err(format!(
            "FID location entry {:?} is inconsistent with next sequence {:#x}",
            e, r.next_seq
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::LayoutTemplate;

    fn record() -> Record {
        Record {
            mgs_uuid: Uuid::new_v4(),
            next_seq: FIRST_GRANTED_SEQ,
            config: FsConfig {
                fsname: "t".into(),
                fs_uuid: Uuid::new_v4(),
                version: 1,
                targets: vec![],
                params: Default::default(),
                pools: Default::default(),
                fld: vec![],
                default_layout: LayoutTemplate::raid0(1, 1 << 20, -1),
                repos: vec![],
            },
            tasks: vec![],
            next_repo: 1,
        }
    }

    #[test]
    fn round_trips_and_detects_damage() {
        let dir = tempfile::tempdir().unwrap();
        let r = record();
        store(dir.path(), &r).unwrap();
        assert_eq!(load(dir.path()).unwrap(), Some(r));
        let path = dir.path().join(STATE_FILE);
        let good = std::fs::read(&path).unwrap();

        let mut flipped = good.clone();
        let i = flipped.len() - 10;
        flipped[i] ^= 0x01;
        std::fs::write(&path, &flipped).unwrap();
        assert!(matches!(load(dir.path()), Err(MgsError::Corrupt { .. })));

        std::fs::write(&path, &good[..good.len() / 2]).unwrap();
        assert!(matches!(load(dir.path()), Err(MgsError::Corrupt { .. })));

        std::fs::write(&path, b"").unwrap();
        assert!(matches!(load(dir.path()), Err(MgsError::Corrupt { .. })));

        std::fs::write(&path, b"weft-mgs-state 7 2 00000000\n{}").unwrap();
        assert!(matches!(
            load(dir.path()),
            Err(MgsError::FormatVersion { found: 7, .. })
        ));

        std::fs::write(&path, b"weft-mgs-state 1 99999999999999999999999 0\n{}").unwrap();
        assert!(matches!(load(dir.path()), Err(MgsError::Corrupt { .. })));
    }

    /// Writes `json` as a format 1 state file in `dir`.
    fn write_format_1(dir: &Path, json: &serde_json::Value) {
        let body = serde_json::to_vec(json).unwrap();
        let mut file = format!(
            "{MAGIC} 1 {} {:08x}\n",
            body.len(),
            weft_proto::checksum::crc32c(&body)
        )
        .into_bytes();
        file.extend_from_slice(&body);
        std::fs::write(dir.join(STATE_FILE), file).unwrap();
    }

    /// State written before failover existed has targets without `failover`: it loads,
    /// with empty lists (the format version did not change, only a field was added).
    #[test]
    fn state_without_failover_addresses_loads() {
        use weft_proto::TargetId;
        use weft_proto::mgs::{TargetInfo, TargetState};
        let dir = tempfile::tempdir().unwrap();
        let mut r = record();
        r.config.targets.push(TargetInfo {
            id: TargetId::ost(0),
            uuid: Uuid::new_v4(),
            address: "h:1".into(),
            state: TargetState::Active,
            last_seen: 1,
            failover: vec![],
        });
        let mut json = serde_json::to_value(&r).unwrap();
        json["config"]["targets"][0]
            .as_object_mut()
            .unwrap()
            .remove("failover")
            .unwrap();
        write_format_1(dir.path(), &json);
        assert_eq!(load(dir.path()).unwrap(), Some(r));
    }

    /// State written before layouts carried compression: the file system's default
    /// layout loads with its components inheriting it.
    #[test]
    fn state_without_layout_compression_loads() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = record();
        r.config.default_layout = weft_proto::LayoutTemplate::raid0(2, 4 << 20, -1);
        let mut json = serde_json::to_value(&r).unwrap();
        json["config"]["default_layout"]["components"][0]
            .as_object_mut()
            .unwrap()
            .remove("compress")
            .unwrap();
        write_format_1(dir.path(), &json);
        assert_eq!(load(dir.path()).unwrap(), Some(r));
    }

    #[test]
    fn state_without_repository_events_loads() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = record();
        r.config.repos.push(weft_proto::hsm::Repo {
            id: 1,
            spec: weft_proto::hsm::RepoSpec {
                path: "/data".into(),
                url: "s3://b/p".into(),
                endpoint: None,
                region: Some("us-east-1".into()),
                path_style: false,
                import_policy: Default::default(),
                export_policy: Default::default(),
                import_metadata: false,
                chunk_size: 1 << 30,
                events: None,
            },
            dir: weft_proto::Fid::ROOT,
            created: Default::default(),
            tiering: None,
        });
        let mut json = serde_json::to_value(&r).unwrap();
        json["config"]["repos"][0]["spec"]
            .as_object_mut()
            .unwrap()
            .remove("events")
            .unwrap();
        write_format_1(dir.path(), &json);
        assert_eq!(load(dir.path()).unwrap(), Some(r));
    }

    #[test]
    fn inconsistent_sequences_are_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = record();
        r.next_seq = 5;
        store(dir.path(), &r).unwrap();
        assert!(matches!(load(dir.path()), Err(MgsError::Corrupt { .. })));
    }
}
