//! The request stage: a job sent to the MDT (`ImportEntries`, or a directory made), the
//! entries `skip_new` and `skip_changed` leave out, and each object's outcome.

use super::{Ctx, Job, LOOKUPS_IN_FLIGHT, Settled};
use futures::StreamExt;
use weft_proto::Fid;
use weft_proto::hsm::{ImportEntry, ImportOutcome};
/// Sends a job to the MDT; answers each listed object's outcome.
pub(super) async fn send(ctx: &Ctx<'_>, job: Job) -> Vec<(u64, Settled)> {
    match job {
        Job::Mkdir { seq, dir } => match ctx.dirs.fid(ctx.client, &dir, &ctx.cred).await {
            Ok(_) => vec![(seq, Settled::Nothing)],
            Err(e) => {
                tracing::warn!(dir = %dir, "directory not made: {e}");
                vec![(seq, Settled::Failed)]
            }
        },
        Job::Entries { dir, entries } => {
            let (seqs, entries): (Vec<u64>, Vec<ImportEntry>) = entries.into_iter().unzip();
            let parent = match ctx.dirs.fid(ctx.client, &dir, &ctx.cred).await {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(dir = %dir, entries = seqs.len(), "not imported: {e}");
                    return seqs.into_iter().map(|s| (s, Settled::Failed)).collect();
                }
            };
            let (seqs, entries, mut left_out) = filter(ctx, parent, seqs, entries).await;
            if entries.is_empty() {
                return left_out;
            }
            let n = entries.len();
            match ctx
                .client
                .import_entries(parent, ctx.repo.id, entries, &ctx.cred)
                .await
            {
                Ok(outcomes) if outcomes.len() == n => {
                    left_out.extend(
                        seqs.into_iter()
                            .zip(outcomes)
                            .map(|(s, o)| (s, settled(&dir, o))),
                    );
                    left_out
                }
                Ok(outcomes) => {
                    tracing::warn!(dir = %dir, sent = n, answered = outcomes.len(),
                        "ImportEntries answered the wrong number of outcomes");
                    seqs.into_iter().map(|s| (s, Settled::Failed)).collect()
                }
                Err(e) => {
                    tracing::warn!(dir = %dir, entries = n, "not imported: {e}");
                    seqs.into_iter().map(|s| (s, Settled::Failed)).collect()
                }
            }
        }
    }
}

/// With `skip_new` or `skip_changed`, leaves out the entries whose name does not exist
/// (or does) in `parent`: answers the entries to send and the left-out ones, settled.
/// The lookups go [`LOOKUPS_IN_FLIGHT`] at a time.
async fn filter(
    ctx: &Ctx<'_>,
    parent: Fid,
    seqs: Vec<u64>,
    entries: Vec<ImportEntry>,
) -> (Vec<u64>, Vec<ImportEntry>, Vec<(u64, Settled)>) {
    if !ctx.skip_new && !ctx.skip_changed {
        return (seqs, entries, Vec::new());
    }
    let looked = futures::stream::iter(seqs.into_iter().zip(entries))
        .map(|(s, e)| async move {
            let exists = match ctx.client.lookup(parent, &e.name, &ctx.cred).await {
                Ok(_) => Ok(true),
                Err(err) if err.errno() == weft_proto::Errno::NoEnt => Ok(false),
                Err(err) => Err(err),
            };
            (s, e, exists)
        })
        .buffered(LOOKUPS_IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    let (mut keep_s, mut keep_e, mut out) = (Vec::new(), Vec::new(), Vec::new());
    for (s, e, exists) in looked {
        match exists {
            Err(err) => {
                tracing::warn!(key = %e.archive.key, "not imported: {err}");
                out.push((s, Settled::Failed));
            }
            Ok(exists) if (exists && ctx.skip_changed) || (!exists && ctx.skip_new) => {
                out.push((s, Settled::Nothing));
            }
            Ok(_) => {
                keep_s.push(s);
                keep_e.push(e);
            }
        }
    }
    (keep_s, keep_e, out)
}

fn settled(dir: &str, o: ImportOutcome) -> Settled {
    match o {
        ImportOutcome::Created(_) => Settled::Created,
        ImportOutcome::Updated(_) => Settled::Updated,
        ImportOutcome::Unchanged(_) => Settled::Unchanged,
        ImportOutcome::Conflict(fid) => {
            tracing::info!(dir, %fid, "import conflict: name left alone");
            Settled::Conflict
        }
        ImportOutcome::Failed(code) => {
            tracing::warn!(dir, code, "entry not imported");
            Settled::Failed
        }
    }
}
