//! `weft repo list`, `show`, `delete` and `tasks`: what the MGS keeps of repositories and
//! their tasks, as tables or JSON.

use super::*;

/// A repository as `list --json` and `show --json` print it.
#[derive(Serialize)]
struct RepoRow {
    id: u32,
    path: String,
    fid: String,
    url: String,
    endpoint: Option<String>,
    region: Option<String>,
    path_style: bool,
    import_policy: String,
    export_policy: String,
    import_metadata: bool,
    chunk_size: u64,
    /// The queue of the store's event notifications, if any.
    events: Option<String>,
    created: i64,
    tiering: Option<weft_proto::hsm::TieringPolicy>,
    /// `show` only: files whose data lives only in the store, and their bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    released_files: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    released_bytes: Option<u64>,
}

impl RepoRow {
    fn new(r: &Repo, via: Option<&FsPath>) -> Self {
        Self {
            id: r.id,
            path: shown(via, &r.spec.path),
            fid: r.dir.to_string(),
            url: r.spec.url.clone(),
            endpoint: r.spec.endpoint.clone(),
            region: r.spec.region.clone(),
            path_style: r.spec.path_style,
            import_policy: r.spec.import_policy.to_string(),
            export_policy: r.spec.export_policy.to_string(),
            import_metadata: r.spec.import_metadata,
            chunk_size: r.spec.chunk_size,
            events: r.spec.events.clone(),
            created: r.created.sec,
            tiering: r.tiering,
            released_files: None,
            released_bytes: None,
        }
    }
}

/// A size as `setstripe` takes it: `1G`, `512M`, or bytes.
pub fn size_str(n: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// `weft repo list [--json] [FS]`.
pub(super) async fn list(mgs: Option<&str>, fs: Option<&str>, json: bool) -> Result<()> {
    let (cluster, via) = connect_fs(mgs, fs).await?;
    let config = fresh_config(&cluster).await?;
    let rows: Vec<RepoRow> = config
        .repos
        .iter()
        .map(|r| RepoRow::new(r, via.as_ref()))
        .collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    let pw = rows.iter().map(|r| r.path.len()).max().unwrap_or(0).max(4);
    let uw = rows.iter().map(|r| r.url.len()).max().unwrap_or(0).max(3);
    println!(
        "{:>3} {:<pw$} {:<uw$} {:<20} {:<20} CHUNK",
        "ID", "PATH", "URL", "IMPORT", "EXPORT"
    );
    for r in &rows {
        println!(
            "{:>3} {:<pw$} {:<uw$} {:<20} {:<20} {}",
            r.id,
            r.path,
            r.url,
            r.import_policy,
            r.export_policy,
            size_str(r.chunk_size)
        );
    }
    Ok(())
}

/// `weft repo show [--json] ID|PATH`.
pub(super) async fn show(mgs: Option<&str>, target: &str, json: bool) -> Result<()> {
    let (cluster, via, repo) = find_repo(mgs, target, Match::Within).await?;
    let released = super::tiering::released(&cluster, &repo).await?;
    let r = RepoRow {
        released_files: Some(released.files),
        released_bytes: Some(released.bytes),
        ..RepoRow::new(&repo, via.as_ref())
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let yes = |b: bool| if b { "yes" } else { "no" };
    println!("id:              {}", r.id);
    println!("path:            {}", r.path);
    println!("fid:             {}", r.fid);
    println!("url:             {}", r.url);
    println!("endpoint:        {}", r.endpoint.as_deref().unwrap_or("-"));
    println!("region:          {}", r.region.as_deref().unwrap_or("-"));
    println!("path_style:      {}", yes(r.path_style));
    println!("import_policy:   {}", r.import_policy);
    println!("export_policy:   {}", r.export_policy);
    println!("import_metadata: {}", yes(r.import_metadata));
    println!("chunk_size:      {}", size_str(r.chunk_size));
    println!("events:          {}", r.events.as_deref().unwrap_or("-"));
    println!("created:         {}", r.created);
    println!(
        "tiering:         {}",
        super::tiering::policy_str(r.tiering.as_ref())
    );
    println!(
        "released:        {} files, {} bytes (data only in the store)",
        released.files, released.bytes
    );
    Ok(())
}

/// `weft repo delete ID|PATH`.
pub(super) async fn delete(mgs: Option<&str>, target: &str) -> Result<()> {
    let (cluster, via, repo) = find_repo(mgs, target, Match::Exact).await?;
    match mgs_call(&cluster, MgsRequest::RepoDelete { id: repo.id }).await? {
        MgsReply::Ok => {}
        other => bail!("the MGS answered {other:?} to a repository delete"),
    }
    println!(
        "repository {} deleted ({} -> {})",
        repo.id,
        shown(via.as_ref(), &repo.spec.path),
        repo.spec.url
    );
    Ok(())
}

/// A task's state as `repo tasks` prints it.
pub(super) fn state_str(s: &TaskState) -> String {
    match s {
        TaskState::Running => "running".into(),
        TaskState::Done => "done".into(),
        TaskState::Failed(why) => format!("failed: {why}"),
    }
}

/// A task's kind as `repo tasks` prints it.
pub(super) fn kind_str(k: TaskKind) -> &'static str {
    match k {
        TaskKind::Import => "import",
        TaskKind::Export => "export",
        TaskKind::Restore => "restore",
        TaskKind::Release => "release",
    }
}

/// `weft repo tasks [--json] [FS]`.
pub(super) async fn tasks(mgs: Option<&str>, fs: Option<&str>, json: bool) -> Result<()> {
    let (cluster, via) = connect_fs(mgs, fs).await?;
    let tasks = match mgs_call(&cluster, MgsRequest::TaskList).await? {
        MgsReply::Tasks(t) => t,
        other => bail!("the MGS answered {other:?} to a task list"),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&tasks)?);
        return Ok(());
    }
    let paths: Vec<String> = tasks.iter().map(|t| shown(via.as_ref(), &t.path)).collect();
    let pw = paths.iter().map(String::len).max().unwrap_or(0).max(4);
    println!(
        "{:>4} {:>4} {:<7} {:<pw$} {:<10} {:>10} {:>8} {:>14} CHECKPOINT",
        "ID", "REPO", "KIND", "PATH", "STATE", "DONE", "FAILED", "BYTES"
    );
    for (t, path) in tasks.iter().zip(&paths) {
        println!(
            "{:>4} {:>4} {:<7} {:<pw$} {:<10} {:>10} {:>8} {:>14} {}",
            t.id,
            t.repo,
            kind_str(t.kind),
            path,
            state_str(&t.state),
            t.done,
            t.failed,
            t.bytes,
            t.checkpoint.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// import, export
