//! Lustre's HSM verbs (`lfs hsm_state`, `hsm_set`, `hsm_clear`, `hsm_release`,
//! `hsm_restore`, `hsm_archive`, `hsm_action`) on files of weftfs, whose archive is the data
//! repository linked to a directory above them (`weft repo create`).
//!
//! Files are paths in a mount or `HOST:PORT:/FSNAME/PATH`. Like `lfs`, a verb given many
//! files goes on past one that fails, says why on stderr, and exits non-zero at the end.

use super::fspath::{self, FsPath};
use super::repo;
use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use std::collections::HashMap;
use std::sync::Arc;
use weft_client::Client;
use weft_proto::Fid;
use weft_proto::hsm::{
    HSM_ARCHIVED, HSM_DIRTY, HSM_EXISTS, HSM_LOST, HSM_NOARCHIVE, HSM_NORELEASE, HSM_RELEASED,
    HsmActionState, flag_by_name,
};
use weft_proto::mdt::{Attr, Credentials, FileKind};

/// Flags of `weft hsm_state`, `hsm_release`, `hsm_archive` and `hsm_action`.
#[derive(Args, Debug)]
pub struct HsmFilesArgs {
    /// Files: paths in a mount or HOST:PORT:/FSNAME/PATH.
    #[arg(required = true)]
    pub files: Vec<String>,
}

/// Flags of `weft hsm_set` and `hsm_clear` (`lfs hsm_set`'s).
#[derive(Args, Debug)]
pub struct HsmFlagsArgs {
    /// The file has a copy in the archive.
    #[arg(long)]
    pub exists: bool,
    /// The file changed since it was archived.
    #[arg(long)]
    pub dirty: bool,
    /// The archive copy is complete and current.
    #[arg(long)]
    pub archived: bool,
    /// Never release the file.
    #[arg(long)]
    pub norelease: bool,
    /// Never archive the file.
    #[arg(long)]
    pub noarchive: bool,
    /// The archive copy was lost.
    #[arg(long)]
    pub lost: bool,
    /// The archive (repository id) the copy is in (hsm_set only).
    #[arg(short = 'i', long = "archive-id")]
    pub archive_id: Option<u32>,
    /// Files: paths in a mount or HOST:PORT:/FSNAME/PATH.
    #[arg(required = true)]
    pub files: Vec<String>,
}

/// Flags of `weft hsm_restore`.
#[derive(Args, Debug)]
pub struct HsmRestoreArgs {
    /// Restore every released file under the directories given.
    #[arg(short = 'r', long)]
    pub recursive: bool,
    /// Files restored at once.
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
    /// Files (or directories with -r): paths in a mount or HOST:PORT:/FSNAME/PATH.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// The flags as `lfs hsm_state` prints them, in its order and with its words.
const LUSTRE_STATE_WORDS: [(u32, &str); 7] = [
    (HSM_RELEASED, "released"),
    (HSM_EXISTS, "exists"),
    (HSM_DIRTY, "dirty"),
    (HSM_ARCHIVED, "archived"),
    (HSM_NORELEASE, "never_release"),
    (HSM_NOARCHIVE, "never_archive"),
    (HSM_LOST, "lost_from_hsm"),
];

/// One line of `hsm_state`: `FILE: (0x0000000d) released exists archived, archive_id:1`.
pub fn state_line(name: &str, flags: u32, archive_id: u32) -> String {
    let mut s = format!("{name}: (0x{flags:08x})");
    for (bit, word) in LUSTRE_STATE_WORDS {
        if flags & bit != 0 {
            s.push(' ');
            s.push_str(word);
        }
    }
    if archive_id != 0 {
        s.push_str(&format!(", archive_id:{archive_id}"));
    }
    s
}

/// Client library instances, one per file system named.
#[derive(Default)]
struct Clients(HashMap<String, Arc<Client>>);

impl Clients {
    async fn get(&mut self, p: &FsPath) -> Result<Arc<Client>> {
        if let Some(c) = self.0.get(&p.source) {
            return Ok(c.clone());
        }
        let c = fspath::connect_client(p).await?;
        self.0.insert(p.source.clone(), c.clone());
        Ok(c)
    }
}

/// A file named on the command line: where it is, its client and its attributes.
struct Named {
    p: FsPath,
    shown: String,
    client: Arc<Client>,
    attr: Attr,
}

async fn named(clients: &mut Clients, arg: &str, cred: &Credentials) -> Result<Named> {
    let mut p = fspath::resolve(arg)?;
    p.inner = repo::normalise(&p.inner)?;
    let client = clients.get(&p).await?;
    let attr = fspath::stat(&client, &p, cred).await?;
    let shown = p.display(&p.inner);
    Ok(Named {
        p,
        shown,
        client,
        attr,
    })
}

/// Reports one argument's failure on stderr (and counts it), as `lfs` goes on past it.
fn report(verb: &str, r: Result<()>, failed: &mut usize) {
    if let Err(e) = r {
        eprintln!("weft {verb}: {e:#}");
        *failed += 1;
    }
}

/// The verb's result once every argument was handled.
fn finish(verb: &str, failed: usize, total: usize) -> Result<()> {
    if failed > 0 {
        bail!("{verb}: {failed} of {total} files failed");
    }
    Ok(())
}

/// `weft hsm_state FILE...`.
pub async fn state(args: HsmFilesArgs) -> Result<()> {
    let cred = fspath::my_credentials();
    let mut clients = Clients::default();
    let mut failed = 0;
    for a in &args.files {
        let r = async {
            let n = named(&mut clients, a, &cred).await?;
            println!(
                "{}",
                state_line(&n.shown, n.attr.hsm_flags, n.attr.archive_id)
            );
            Ok::<(), anyhow::Error>(())
        }
        .await;
        report("hsm_state", r, &mut failed);
    }
    finish("hsm_state", failed, args.files.len())
}

/// The flags `hsm_set`/`hsm_clear` were given.
fn flag_mask(a: &HsmFlagsArgs) -> Result<u32> {
    let mut mask = 0;
    for (on, name) in [
        (a.exists, "exists"),
        (a.dirty, "dirty"),
        (a.archived, "archived"),
        (a.norelease, "norelease"),
        (a.noarchive, "noarchive"),
        (a.lost, "lost"),
    ] {
        if on {
            mask |= flag_by_name(name).with_context(|| format!("no HSM flag named {name}"))?;
        }
    }
    Ok(mask)
}

/// `weft hsm_set [FLAGS] [--archive-id N] FILE...` (`set`) or `weft hsm_clear [FLAGS]
/// FILE...`.
pub async fn set_flags(args: HsmFlagsArgs, set: bool) -> Result<()> {
    let verb = if set { "hsm_set" } else { "hsm_clear" };
    let mask = flag_mask(&args)?;
    if !set && args.archive_id.is_some() {
        bail!("hsm_clear takes no --archive-id (set another with hsm_set --archive-id)");
    }
    if mask == 0 && args.archive_id.is_none() {
        bail!(
            "{verb}: no flag given (--exists, --dirty, --archived, --norelease, --noarchive, \
             --lost{})",
            if set { ", --archive-id N" } else { "" }
        );
    }
    let (to_set, to_clear) = if set { (mask, 0) } else { (0, mask) };
    let cred = fspath::my_credentials();
    let mut clients = Clients::default();
    let archive_id = args.archive_id;
    let mut failed = 0;
    for a in &args.files {
        let r = async {
            let n = named(&mut clients, a, &cred).await?;
            n.client
                .hsm_set_flags(n.attr.fid, to_set, to_clear, archive_id, &cred)
                .await
                .map_err(|e| anyhow!("cannot change the HSM flags of {}: {e}", n.shown))?;
            Ok::<(), anyhow::Error>(())
        }
        .await;
        report(verb, r, &mut failed);
    }
    finish(verb, failed, args.files.len())
}

/// Why an archived file may not be released, as the MDT would refuse it (EBUSY), told
/// before asking it.
fn release_refusal(attr: &Attr) -> Option<&'static str> {
    let f = attr.hsm_flags;
    if f & HSM_EXISTS == 0 || f & HSM_ARCHIVED == 0 {
        Some("the file is not archived (hsm_archive it first)")
    } else if f & HSM_DIRTY != 0 {
        Some("the file changed since it was archived (dirty)")
    } else if f & HSM_NORELEASE != 0 {
        Some("the file is marked never_release")
    } else if f & HSM_LOST != 0 {
        Some("the file's archive copy is lost")
    } else {
        None
    }
}

/// `weft hsm_release FILE...`.
pub async fn release(args: HsmFilesArgs) -> Result<()> {
    let cred = fspath::my_credentials();
    let mut clients = Clients::default();
    let mut failed = 0;
    for a in &args.files {
        let r = async {
            let n = named(&mut clients, a, &cred).await?;
            if n.attr.kind != FileKind::Regular {
                bail!("cannot release {}: EINVAL: not a regular file", n.shown);
            }
            if n.attr.hsm_flags & HSM_RELEASED != 0 {
                return Ok(());
            }
            if let Some(why) = release_refusal(&n.attr) {
                bail!("cannot release {}: EBUSY: {why}", n.shown);
            }
            n.client
                .hsm_release(n.attr.fid, Some(n.attr.data_version), &cred)
                .await
                .map_err(|e| anyhow!("cannot release {}: {e}", n.shown))?;
            Ok::<(), anyhow::Error>(())
        }
        .await;
        report("hsm_release", r, &mut failed);
    }
    finish("hsm_release", failed, args.files.len())
}

/// `weft hsm_action FILE...`: the HSM action the MDT's coordinator runs on each file —
/// `RESTORE running (N bytes moved)` while its data is being restored — or `NOOP`, as
/// Lustre prints for a file with no request. Exports run in the verbs and the agent that
/// start them, not in the coordinator: they are not shown.
pub async fn action(args: HsmFilesArgs) -> Result<()> {
    let cred = fspath::my_credentials();
    let mut clients = Clients::default();
    let mut failed = 0;
    for a in &args.files {
        let r = async {
            let n = named(&mut clients, a, &cred).await?;
            let fid = n.attr.fid;
            let running = n.client.hsm_action(fid).await?;
            println!("{}", action_line(&n.shown, running));
            Ok::<(), anyhow::Error>(())
        }
        .await;
        report("hsm_action", r, &mut failed);
    }
    finish("hsm_action", failed, args.files.len())
}

/// The line `weft hsm_action` prints for file `name`.
fn action_line(name: &str, running: Option<HsmActionState>) -> String {
    match running {
        Some(a) => format!(
            "{name}: {} running ({} bytes moved)",
            a.action.name(),
            a.bytes_done
        ),
        None => format!("{name}: NOOP"),
    }
}

/// `weft hsm_archive FILE...`: copies each file to its repository's store now.
pub async fn archive(args: HsmFilesArgs) -> Result<()> {
    let cred = fspath::my_credentials();
    let mut clients = Clients::default();
    let mut failed = 0;
    for a in &args.files {
        let r = async {
            let n = named(&mut clients, a, &cred).await?;
            if n.attr.kind != FileKind::Regular {
                bail!("cannot archive {}: EINVAL: not a regular file", n.shown);
            }
            let config = n
                .client
                .cluster()
                .refresh()
                .await
                .map_err(|e| anyhow!("cannot fetch the configuration: {e}"))?;
            let r = repo::repo_of_path(&config, &n.p.inner)
                .cloned()
                .with_context(|| {
                    format!(
                        "cannot archive {}: it is not in a data repository's directory",
                        n.shown
                    )
                })?;
            let ex = repo::run_export(&n.client, &r, &n.p.inner, &n.shown, 1, false).await?;
            if ex.failed > 0 {
                bail!("cannot archive {}: the export failed", n.shown);
            }
            if ex.exported == 0 && ex.skipped > 0 {
                eprintln!(
                    "{}: not exported (archived and current already, or never_archive)",
                    n.shown
                );
            }
            Ok::<(), anyhow::Error>(())
        }
        .await;
        report("hsm_archive", r, &mut failed);
    }
    finish("hsm_archive", failed, args.files.len())
}

/// A file to restore.
struct ToRestore {
    shown: String,
    client: Arc<Client>,
    fid: Fid,
}

/// Adds the released files under directory `top` to `out`; counts the others.
async fn walk(
    top: &Named,
    cred: &Credentials,
    out: &mut Vec<ToRestore>,
    not_released: &mut u64,
) -> Result<()> {
    let mut stack = vec![(top.attr.fid, top.p.inner.clone())];
    while let Some((dir, path)) = stack.pop() {
        let mut cookie = 0;
        loop {
            let (page, eof) = top
                .client
                .readdir(dir, cookie, 1024, true, cred)
                .await
                .map_err(|e| anyhow!("{}: {e}", top.p.display(&path)))?;
            if let Some(last) = page.last() {
                cookie = last.cookie;
            }
            let empty = page.is_empty();
            for e in page {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let name = String::from_utf8_lossy(&e.name);
                let child = if path == "/" {
                    format!("/{name}")
                } else {
                    format!("{path}/{name}")
                };
                match e.kind {
                    FileKind::Directory => stack.push((e.fid, child)),
                    FileKind::Regular => {
                        let attr = match e.attr {
                            Some(a) => a,
                            None => top
                                .client
                                .getattr(e.fid)
                                .await
                                .map_err(|err| anyhow!("{}: {err}", top.p.display(&child)))?,
                        };
                        if attr.hsm_flags & HSM_RELEASED != 0 {
                            out.push(ToRestore {
                                shown: top.p.display(&child),
                                client: top.client.clone(),
                                fid: e.fid,
                            });
                        } else {
                            *not_released += 1;
                        }
                    }
                    _ => {}
                }
            }
            if eof || empty {
                break;
            }
        }
    }
    Ok(())
}

/// Loads a released file's data back onto the OSTs.
async fn restore_one(client: &Client, fid: Fid) -> Result<(), weft_client::ClientError> {
    while !client.hsm_restore(fid, 0, u64::MAX).await? {}
    Ok(())
}

/// `weft hsm_restore [-r] [--parallel N] PATH...`.
pub async fn restore(args: HsmRestoreArgs) -> Result<()> {
    let cred = fspath::my_credentials();
    let mut clients = Clients::default();
    let mut todo = Vec::new();
    let mut not_released = 0u64;
    let mut failed = 0u64;
    for a in &args.paths {
        let found: Result<()> = async {
            let n = named(&mut clients, a, &cred).await?;
            match n.attr.kind {
                FileKind::Directory if args.recursive => {
                    walk(&n, &cred, &mut todo, &mut not_released).await
                }
                FileKind::Directory => bail!("{}: is a directory (use -r)", n.shown),
                FileKind::Regular if n.attr.hsm_flags & HSM_RELEASED != 0 => {
                    todo.push(ToRestore {
                        shown: n.shown,
                        client: n.client,
                        fid: n.attr.fid,
                    });
                    Ok(())
                }
                FileKind::Regular => {
                    not_released += 1;
                    Ok(())
                }
                _ => bail!("{}: not a regular file", n.shown),
            }
        }
        .await;
        if let Err(e) = found {
            eprintln!("weft hsm_restore: {e:#}");
            failed += 1;
        }
    }

    let bar = repo::progress_bar(Some(todo.len() as u64), "restore");
    let limit = Arc::new(tokio::sync::Semaphore::new(args.parallel.max(1)));
    let mut running = tokio::task::JoinSet::new();
    for t in todo {
        let limit = limit.clone();
        running.spawn(async move {
            let _permit = limit.acquire_owned().await;
            let r = restore_one(&t.client, t.fid).await;
            (t.shown, r)
        });
    }
    let mut restored = 0u64;
    while let Some(joined) = running.join_next().await {
        match joined {
            Ok((_, Ok(()))) => restored += 1,
            Ok((shown, Err(e))) => {
                bar.suspend(|| eprintln!("weft hsm_restore: cannot restore {shown}: {e}"));
                failed += 1;
            }
            Err(e) => {
                bar.suspend(|| eprintln!("weft hsm_restore: a restore stopped: {e}"));
                failed += 1;
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    println!("hsm_restore: {restored} restored, {not_released} not released, {failed} failed");
    if failed > 0 {
        bail!("hsm_restore: {failed} failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_print_like_lfs() {
        assert_eq!(
            state_line("f", HSM_EXISTS | HSM_ARCHIVED | HSM_RELEASED, 1),
            "f: (0x0000000d) released exists archived, archive_id:1"
        );
        assert_eq!(state_line("f", 0, 0), "f: (0x00000000)");
        assert_eq!(
            state_line("f", HSM_NORELEASE | HSM_NOARCHIVE | HSM_LOST | HSM_DIRTY, 0),
            "f: (0x00000072) dirty never_release never_archive lost_from_hsm"
        );
    }
}
