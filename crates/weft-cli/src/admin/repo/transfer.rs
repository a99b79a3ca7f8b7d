//! `weft repo import` and `export`: running weft-repo's import and export under an MGS
//! task, with a progress bar on a terminal and a summary line always.

use super::*;

/// A progress display on a terminal (stderr), hidden otherwise.
pub fn progress_bar(len: Option<u64>, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = match len {
        Some(n) => {
            let bar = ProgressBar::new(n);
            if let Ok(style) =
                ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} {per_sec} {eta}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        }
        None => {
            let bar = ProgressBar::new_spinner();
            if let Ok(style) = ProgressStyle::with_template("{spinner} {prefix} {msg}") {
                bar.set_style(style);
            }
            bar.enable_steady_tick(std::time::Duration::from_millis(200));
            bar
        }
    };
    bar.set_prefix(what.to_string());
    if len.is_some() {
        bar.set_message(what.to_string());
    }
    bar
}

/// `weft repo import [--parallel N] ID|PATH`.
pub(super) async fn import(mgs: Option<&str>, target: &str, parallel: usize) -> Result<()> {
    let (cluster, via, repo) = find_repo(mgs, target, Match::Within).await?;
    let client = client_of(mgs, &cluster, via.as_ref()).await?;
    run_import(
        &client,
        &repo,
        &shown(via.as_ref(), &repo.spec.path),
        parallel,
    )
    .await
}

/// A client of the file system a repository was found in (through the path it was named
/// by, else at `--mgs`).
async fn client_of(
    mgs: Option<&str>,
    cluster: &Cluster,
    via: Option<&FsPath>,
) -> Result<Arc<Client>> {
    match via {
        Some(p) => fspath::connect_client(p).await,
        None => {
            let addr = crate::admin::mgs_address(mgs);
            Client::mount(&addr, cluster.fsname(), crate::key::client_options()?)
                .await
                .with_context(|| format!("cannot reach the file system at {addr}"))
        }
    }
}

/// Starts or resumes the repository's import task and runs it to the end.
pub(super) async fn run_import(
    client: &Arc<Client>,
    repo: &Repo,
    shown: &str,
    parallel: usize,
) -> Result<()> {
    let task = task_start(
        client.cluster(),
        repo.id,
        TaskKind::Import,
        repo.spec.path.clone(),
    )
    .await?;
    if let Some(key) = &task.checkpoint {
        eprintln!("resuming import task {} after {key}", task.id);
    }
    let opts = ImportOptions {
        task: Some(task.id),
        resume_after: task.checkpoint.clone(),
        parallel: parallel.max(1),
        ..ImportOptions::default()
    };
    let bar = progress_bar(None, "import");
    let shown_bar = bar.clone();
    let progress = move |p: &ImportProgress| {
        shown_bar.set_message(format!(
            "{} listed, {} created, {} updated, {} unchanged, {} conflicts, {} failed",
            p.listed, p.created, p.updated, p.unchanged, p.conflicts, p.failed
        ));
    };
    let result = import::import(client, repo, &opts, &progress).await;
    bar.finish_and_clear();
    let p = result.map_err(|e| {
        repo_error(&e).context(format!(
            "import of repository {} into {shown} stopped (task {}; `weft repo import` resumes it)",
            repo.id, task.id
        ))
    })?;
    println!(
        "import {shown} from {} (repository {}, task {}): {} listed, {} created, {} updated, \
         {} unchanged, {} conflicts, {} failed",
        repo.spec.url,
        repo.id,
        task.id,
        p.listed,
        p.created,
        p.updated,
        p.unchanged,
        p.conflicts,
        p.failed
    );
    if p.failed > 0 {
        bail!("{} entries failed to import", p.failed);
    }
    Ok(())
}

/// `weft repo export [--parallel N] PATH`.
pub(super) async fn export(path: &str, parallel: usize) -> Result<()> {
    let mut p = fspath::resolve(path)?;
    p.inner = normalise(&p.inner)?;
    let client = fspath::connect_client(&p).await?;
    let config = fresh_config(client.cluster()).await?;
    let shown = p.display(&p.inner);
    let repo = repo_of_path(&config, &p.inner)
        .cloned()
        .with_context(|| format!("{shown} is not in a data repository's directory"))?;
    let ex = run_export(&client, &repo, &p.inner, &shown, parallel, true).await?;
    println!(
        "export {shown} to {} (repository {}): {} scanned, {} exported ({} bytes), {} skipped, \
         {} failed",
        repo.spec.url, repo.id, ex.scanned, ex.exported, ex.bytes, ex.skipped, ex.failed
    );
    if ex.failed > 0 {
        bail!("{} files failed to export", ex.failed);
    }
    Ok(())
}

/// Exports `inner` (a file or a tree) to `repo`, as an MGS task when `as_task`.
pub async fn run_export(
    client: &Arc<Client>,
    repo: &Repo,
    inner: &str,
    shown: &str,
    parallel: usize,
    as_task: bool,
) -> Result<ExportProgress> {
    let task = if as_task {
        Some(
            task_start(
                client.cluster(),
                repo.id,
                TaskKind::Export,
                inner.to_string(),
            )
            .await?,
        )
    } else {
        None
    };
    let opts = ExportOptions {
        task: task.as_ref().map(|t| t.id),
        parallel: parallel.max(1),
        ..ExportOptions::default()
    };
    let bar = progress_bar(None, "export");
    let shown_bar = bar.clone();
    let progress = move |p: &ExportProgress| {
        shown_bar.set_message(format!(
            "{} scanned, {} exported ({} bytes), {} skipped, {} failed",
            p.scanned, p.exported, p.bytes, p.skipped, p.failed
        ));
    };
    let result = export::export(client, repo, inner, &opts, &progress).await;
    bar.finish_and_clear();
    result.map_err(|e| {
        repo_error(&e).context(format!(
            "export of {shown} to repository {} stopped",
            repo.id
        ))
    })
}
