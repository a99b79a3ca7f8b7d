//! `weft fsck [--dry-run] MOUNTPOINT|HOST:PORT:/FSNAME`: checks the namespace across every
//! MDT, and the objects on every OST, and repairs what it can.
//!
//! It reads every inode and every directory entry of each MDT (`FsckInodes`,
//! `FsckEntries`: pages of the stores, not a tree walk, so nothing unreachable is missed)
//! and every object of each OST, then reports:
//! - dangling entries (the FID they name exists on no MDT): removed;
//! - orphan inodes (no entry names them, not a shard, not unlinked-while-open): removed
//!   when they are files or empty directories, else left for a person;
//! - wrong link counts (files: the entries naming them; directories: 2 + subdirectories):
//!   set;
//! - broken striped directories (a shard missing, or not pointing back at its master),
//!   directories whose parent pointer disagrees with their entry: reported;
//! - objects on OSTs that no layout and no pending destroy references: destroyed.
//!
//! Run it on a quiet file system: operations racing with the scan can show as problems
//! (each repair re-checks its target on the MDT and refuses one that moved). Cross-MDT
//! operations still in progress are reported; their half-done state is not a problem.
//! Exit status as fsck(8): 0 clean, 1 problems found and all repaired, 4 problems left.

use super::fspath;
use anyhow::{Context, Result, bail};
use clap::Args;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use weft_client::{Client, MdtClient};
use weft_proto::mdt::{FileKind, FsckEntry, FsckInode, FsckRepair, MdtReply, MdtRequest};
use weft_proto::{Fid, ObjectId, TargetKind};

/// Flags of `weft fsck`.
#[derive(Args, Debug)]
pub struct FsckArgs {
    /// Report only; change nothing.
    #[arg(short = 'n', long = "dry-run")]
    pub dry_run: bool,
    /// A path in a mount, or `HOST:PORT:/FSNAME`.
    pub fs: String,
}

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// An entry names a FID no MDT has.
    Dangling { mdt: u32, entry: FsckEntry },
    /// An inode no entry names.
    Orphan { mdt: u32, fid: Fid, kind: FileKind },
    /// A link count that disagrees with the entries.
    Nlink {
        mdt: u32,
        fid: Fid,
        stored: u32,
        counted: u32,
    },
    /// Something only a person should fix.
    Other(String),
    /// An OST object no file references.
    OrphanObject { ost: u32, object: ObjectId },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Dangling { mdt, entry } => write!(
                f,
                "MDT{mdt:04x}: dangling entry '{}' in {} names missing {}",
                String::from_utf8_lossy(&entry.name),
                entry.parent,
                entry.fid
            ),
            Problem::Orphan { mdt, fid, kind } => {
                write!(f, "MDT{mdt:04x}: orphan {kind:?} {fid}: no entry names it")
            }
            Problem::Nlink {
                mdt,
                fid,
                stored,
                counted,
            } => write!(
                f,
                "MDT{mdt:04x}: {fid} has link count {stored}, its entries say {counted}"
            ),
            Problem::Other(s) => f.write_str(s),
            Problem::OrphanObject { ost, object } => write!(
                f,
                "OST{ost:04x}: object {}:{}:{} belongs to no file",
                object.fid, object.component, object.stripe
            ),
        }
    }
}

/// Everything read from the targets.
#[derive(Default)]
pub struct Scan {
    /// Inodes by FID, with their MDT.
    pub inodes: HashMap<Fid, (u32, FsckInode)>,
    /// Entries with their MDT.
    pub entries: Vec<(u32, FsckEntry)>,
    /// Cross-MDT operations in progress, per MDT.
    pub intents: Vec<(u32, u64)>,
    /// Objects pending destruction (referenced until destroyed).
    pub destroying: HashSet<(u32, ObjectId)>,
    /// Objects on each OST (`None`: the OST could not be listed).
    pub objects: Vec<(u32, Option<Vec<ObjectId>>)>,
}

async fn call(mdt: &MdtClient, req: MdtRequest) -> Result<MdtReply> {
    mdt.call(req)
        .await
        .with_context(|| format!("MDT{:04x}", mdt.index()))
}

/// Every object on OST `index`; `None` (and a message) if it could not be listed.
async fn list_ost(client: &Arc<Client>, index: u32) -> Result<Option<Vec<ObjectId>>> {
    let ost = client.cluster().ost(index)?;
    let mut all = Vec::new();
    let mut after = None;
    loop {
        match ost.list_objects(after, 4096).await {
            Ok((page, next)) => {
                all.extend(page.into_iter().map(|(o, _)| o));
                match next {
                    Some(n) => after = Some(n),
                    None => return Ok(Some(all)),
                }
            }
            Err(e) => {
                eprintln!("weft fsck: OST{index:04x} not listed: {e}");
                return Ok(None);
            }
        }
    }
}

/// Reads every MDT and OST of the file system. OSTs first: an object written after its
/// OST was listed belongs to an inode the MDT scan then sees.
pub async fn scan(client: &Arc<Client>) -> Result<Scan> {
    let config = client.cluster().config();
    let mut s = Scan::default();
    for t in config.targets_of(TargetKind::Ost) {
        s.objects
            .push((t.id.index, list_ost(client, t.id.index).await?));
    }
    for t in config.targets_of(TargetKind::Mdt) {
        let index = t.id.index;
        let mdt = client.cluster().mdt(index)?;
        let mut after = None;
        loop {
            let req = MdtRequest::FsckInodes { after, max: 4096 };
            match call(&mdt, req).await? {
                MdtReply::FsckInodes {
                    inodes,
                    next,
                    intents,
                    destroying,
                } => {
                    if after.is_none() {
                        s.intents.push((index, intents));
                    }
                    s.destroying.extend(destroying);
                    for i in inodes {
                        s.inodes.insert(i.fid, (index, i));
                    }
                    match next {
                        Some(n) => after = Some(n),
                        None => break,
                    }
                }
                other => bail!("MDT{index:04x}: unexpected reply {other:?}"),
            }
        }
        let mut after = None;
        loop {
            let req = MdtRequest::FsckEntries {
                after: after.take(),
                max: 4096,
            };
            match call(&mdt, req).await? {
                MdtReply::FsckEntries { entries, next } => {
                    s.entries.extend(entries.into_iter().map(|e| (index, e)));
                    match next {
                        Some(n) => after = Some(n),
                        None => break,
                    }
                }
                other => bail!("MDT{index:04x}: unexpected reply {other:?}"),
            }
        }
    }
    Ok(s)
}

/// Drops the orphan objects that are gone by now. The scan lists OSTs before MDTs, so an
/// object listed while its destroy was pending, then destroyed (and its destroy record
/// removed) before the MDT scan, looks like an orphan; it is one only if it still exists
/// after the MDT scan (nothing can reference an object the scan saw unreferenced again).
async fn still_there(client: &Arc<Client>, problems: Vec<Problem>) -> Result<Vec<Problem>> {
    let mut osts: Vec<u32> = problems
        .iter()
        .filter_map(|p| match p {
            Problem::OrphanObject { ost, .. } => Some(*ost),
            _ => None,
        })
        .collect();
    osts.sort_unstable();
    osts.dedup();
    let mut now: HashSet<(u32, ObjectId)> = HashSet::new();
    let mut unlisted = HashSet::new();
    for ost in osts {
        match list_ost(client, ost).await? {
            Some(objects) => now.extend(objects.into_iter().map(|o| (ost, o))),
            None => {
                unlisted.insert(ost);
            }
        }
    }
    Ok(problems
        .into_iter()
        .filter(|p| match p {
            Problem::OrphanObject { ost, object } => {
                unlisted.contains(ost) || now.contains(&(*ost, *object))
            }
            _ => true,
        })
        .collect())
}

/// Finds the problems in a scan.
pub fn check(s: &Scan) -> Vec<Problem> {
    let mut problems = Vec::new();
    let shards: HashMap<Fid, Fid> = s
        .inodes
        .values()
        .flat_map(|(_, i)| i.shards.iter().flatten().map(move |shard| (*shard, i.fid)))
        .collect();
    let mut refs: HashMap<Fid, u32> = HashMap::new();
    let mut subdirs: HashMap<Fid, u32> = HashMap::new();
    for (mdt, e) in &s.entries {
        let Some((_, ino)) = s.inodes.get(&e.fid) else {
            problems.push(Problem::Dangling {
                mdt: *mdt,
                entry: e.clone(),
            });
            continue;
        };
        *refs.entry(e.fid).or_default() += 1;
        if ino.kind == FileKind::Directory {
            *subdirs.entry(e.parent).or_default() += 1;
            if ino.parent != e.parent {
                problems.push(Problem::Other(format!(
                    "directory {} is named in {} but points back at {}",
                    e.fid, e.parent, ino.parent
                )));
            }
        }
        if ino.kind != e.kind {
            problems.push(Problem::Other(format!(
                "entry '{}' in {} says {:?}, inode {} is {:?}",
                String::from_utf8_lossy(&e.name),
                e.parent,
                e.kind,
                e.fid,
                ino.kind
            )));
        }
    }
    let mut fids: Vec<&Fid> = s.inodes.keys().collect();
    fids.sort();
    for fid in fids {
        let (mdt, ino) = &s.inodes[fid];
        let mdt = *mdt;
        let named = refs.get(fid).copied().unwrap_or(0);
        let is_shard = shards.contains_key(fid);
        if let Some(list) = &ino.shards {
            for shard in list {
                match s.inodes.get(shard) {
                    Some((_, sh)) if sh.kind == FileKind::Directory && sh.parent == *fid => {}
                    Some(_) => problems.push(Problem::Other(format!(
                        "shard {shard} of striped directory {fid} does not point back at it"
                    ))),
                    None => problems.push(Problem::Other(format!(
                        "shard {shard} of striped directory {fid} is missing"
                    ))),
                }
            }
        }
        if *fid == Fid::ROOT || is_shard {
            // Not named by entries; a sealed shard (link count 0) is being removed.
        } else if named == 0 {
            if !ino.orphan {
                problems.push(Problem::Orphan {
                    mdt,
                    fid: *fid,
                    kind: ino.kind,
                });
            }
            continue;
        } else if ino.kind == FileKind::Directory && named > 1 {
            problems.push(Problem::Other(format!("directory {fid} has {named} names")));
        }
        let counted = if ino.kind == FileKind::Directory {
            2 + subdirs.get(fid).copied().unwrap_or(0)
        } else {
            named
        };
        let sealed = is_shard && ino.nlink == 0;
        if ino.nlink != counted && !sealed {
            problems.push(Problem::Nlink {
                mdt,
                fid: *fid,
                stored: ino.nlink,
                counted,
            });
        }
    }
    let referenced: HashSet<(u32, ObjectId)> = s
        .inodes
        .values()
        .flat_map(|(_, i)| i.objects.iter().copied())
        .chain(s.destroying.iter().copied())
        .collect();
    for (ost, objects) in &s.objects {
        for o in objects.iter().flatten() {
            if !referenced.contains(&(*ost, *o)) {
                problems.push(Problem::OrphanObject {
                    ost: *ost,
                    object: *o,
                });
            }
        }
    }
    problems
}

/// Repairs one problem; `Ok(false)` when it is left for a person.
async fn repair(client: &Arc<Client>, p: &Problem) -> Result<bool> {
    let (mdt, fix) = match p {
        Problem::Dangling { mdt, entry } => (
            *mdt,
            FsckRepair::RemoveEntry {
                parent: entry.parent,
                name: entry.name.clone(),
                fid: entry.fid,
            },
        ),
        Problem::Orphan { mdt, fid, .. } => (*mdt, FsckRepair::RemoveInode { fid: *fid }),
        Problem::Nlink {
            mdt,
            fid,
            stored,
            counted,
        } => (
            *mdt,
            FsckRepair::SetNlink {
                fid: *fid,
                expected: *stored,
                nlink: *counted,
            },
        ),
        Problem::OrphanObject { ost, object } => {
            client.cluster().ost(*ost)?.destroy(*object).await?;
            return Ok(true);
        }
        Problem::Other(_) => return Ok(false),
    };
    let m = client.cluster().mdt(mdt)?;
    match m.call(MdtRequest::FsckRepair { repair: fix }).await {
        Ok(_) => Ok(true),
        Err(e) => {
            eprintln!("weft fsck: not repaired: {e}");
            Ok(false)
        }
    }
}

/// `weft fsck`.
pub async fn run(args: FsckArgs) -> Result<i32> {
    let (mgs, fsname) = match super::parse_fs_spec(&args.fs) {
        Ok(fs) => fs,
        Err(_) => {
            let p = fspath::resolve(&args.fs)?;
            (p.mgs, p.fsname)
        }
    };
    let client = Client::mount(&mgs, &fsname, crate::key::client_options()?)
        .await
        .with_context(|| format!("cannot reach the file system {mgs}:/{fsname}"))?;
    let s = scan(&client).await?;
    let files = s
        .inodes
        .values()
        .filter(|(_, i)| i.kind != FileKind::Directory)
        .count();
    println!(
        "weft fsck: {} inodes ({} files), {} entries on {} MDTs; {} objects on {} OSTs",
        s.inodes.len(),
        files,
        s.entries.len(),
        s.intents.len(),
        s.objects
            .iter()
            .flat_map(|(_, o)| o.iter().flatten())
            .count(),
        s.objects.len()
    );
    for (mdt, n) in &s.intents {
        if *n > 0 {
            println!("weft fsck: MDT{mdt:04x} has {n} cross-MDT operations in progress");
        }
    }
    let problems = still_there(&client, check(&s)).await?;
    let mut left = 0;
    for p in &problems {
        if args.dry_run {
            println!("{p}");
            left += 1;
        } else if repair(&client, p).await? {
            println!("{p}: repaired");
        } else {
            println!("{p}: NOT repaired");
            left += 1;
        }
    }
    println!(
        "weft fsck: {} problems{}",
        problems.len(),
        if args.dry_run {
            String::new()
        } else {
            format!(", {} repaired", problems.len() - left)
        }
    );
    Ok(match (problems.is_empty(), left) {
        (true, _) => 0,
        (false, 0) => 1,
        _ => 4,
    })
}
