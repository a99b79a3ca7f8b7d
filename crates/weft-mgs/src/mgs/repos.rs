//! Data repository associations (`weft repo create|delete`) and their tasks (`weft repo
//! tasks`): kept in the MGS state, written durably like every other change.
//!
//! An association links a directory to a store; two associations may not nest (a path
//! at, above or below another's), as in FSx for Lustre. Credentials never reach the MGS:
//! the spec names the store, each process that reaches it brings its own.

use super::{Mgs, err};
use weft_proto::hsm::{
    REPOS_MAX, Repo, RepoChange, RepoSpec, RepoTask, TASKS_MAX, TaskKind, TaskState, TieringPolicy,
    paths_nest,
};
use weft_proto::mgs::MgsReply;
use weft_proto::{Errno, Fid, Timestamp, WireResult};

/// What a task reports (`MgsRequest::TaskReport`).
pub(crate) struct Report {
    pub done: u64,
    pub failed: u64,
    pub bytes: u64,
    pub checkpoint: Option<String>,
    pub state: TaskState,
}

impl Mgs {
    pub(super) async fn repo_create(&self, spec: RepoSpec, dir: Fid) -> WireResult<MgsReply> {
        spec.validate().map_err(|e| err(Errno::Inval, e))?;
        let id = self
            .mutate(|rec| {
                let repos = &mut rec.config.repos;
                if let Some(other) = repos.iter().find(|r| paths_nest(&r.spec.path, &spec.path)) {
                    return Err(err(
                        Errno::Exist,
                        format!(
                            "{} is linked to {} already (repository {}); associations may not nest",
                            other.spec.path, other.spec.url, other.id
                        ),
                    ));
                }
                if repos.len() >= REPOS_MAX {
                    return Err(err(
                        Errno::NoSpc,
                        format!("too many repository associations (at most {REPOS_MAX})"),
                    ));
                }
                // Ids are archive ids stored in files: never reuse one (a state written
                // before `next_repo` existed starts past every id it mentions).
                let seen = repos
                    .iter()
                    .map(|r| r.id)
                    .chain(rec.tasks.iter().map(|t| t.repo))
                    .max()
                    .unwrap_or(0);
                let id = rec.next_repo.max(seen.saturating_add(1)).max(1);
                rec.next_repo = id.saturating_add(1);
                repos.push(Repo {
                    id,
                    spec: spec.clone(),
                    dir,
                    created: Timestamp::now(),
                    tiering: None,
                });
                Ok((true, id))
            })
            .await?;
        tracing::info!(id, path = %spec.path, url = %spec.url, "repository association created");
        Ok(MgsReply::RepoId(id))
    }

    pub(super) async fn repo_delete(&self, id: u32) -> WireResult<MgsReply> {
        self.mutate(|rec| {
            let before = rec.config.repos.len();
            rec.config.repos.retain(|r| r.id != id);
            if rec.config.repos.len() == before {
                return Err(err(Errno::NoEnt, format!("no repository {id}")));
            }
            Ok((true, ()))
        })
        .await?;
        tracing::info!(id, "repository association deleted");
        Ok(MgsReply::Ok)
    }

    pub(super) async fn repo_update(&self, id: u32, change: RepoChange) -> WireResult<MgsReply> {
        let spec = self
            .mutate(|rec| {
                let repo = repo_mut(&mut rec.config.repos, id)?;
                let spec = change.applied_to(&repo.spec);
                spec.validate().map_err(|e| err(Errno::Inval, e))?;
                let changed = spec != repo.spec;
                repo.spec = spec.clone();
                Ok((changed, spec))
            })
            .await?;
        tracing::info!(id, import = %spec.import_policy, export = %spec.export_policy,
            events = spec.events.as_deref().unwrap_or("-"), "repository association updated");
        Ok(MgsReply::Ok)
    }

    pub(super) async fn repo_tiering(
        &self,
        id: u32,
        tiering: Option<TieringPolicy>,
    ) -> WireResult<MgsReply> {
        if let Some(t) = &tiering {
            t.validate().map_err(|e| err(Errno::Inval, e))?;
        }
        self.mutate(|rec| {
            let repo = repo_mut(&mut rec.config.repos, id)?;
            let changed = repo.tiering != tiering;
            repo.tiering = tiering;
            Ok((changed, ()))
        })
        .await?;
        tracing::info!(id, ?tiering, "repository tiering set");
        Ok(MgsReply::Ok)
    }

    pub(super) async fn task_start(
        &self,
        repo: u32,
        kind: TaskKind,
        path: String,
    ) -> WireResult<MgsReply> {
        if path.len() > 4096 {
            return Err(err(Errno::NameTooLong, "task path too long"));
        }
        let task = self
            .mutate(|rec| {
                if rec.config.repo(repo).is_none() {
                    return Err(err(Errno::NoEnt, format!("no repository {repo}")));
                }
                let now = Timestamp::now();
                // An unfinished task of the same kind and path resumes.
                if let Some(t) = rec.tasks.iter_mut().rev().find(|t| {
                    t.repo == repo
                        && t.kind == kind
                        && t.path == path
                        && t.state == TaskState::Running
                }) {
                    t.updated = now;
                    return Ok((true, t.clone()));
                }
                let id = rec.tasks.iter().map(|t| t.id).max().unwrap_or(0) + 1;
                let task = RepoTask {
                    id,
                    repo,
                    kind,
                    path: path.clone(),
                    state: TaskState::Running,
                    started: now,
                    updated: now,
                    done: 0,
                    failed: 0,
                    bytes: 0,
                    checkpoint: None,
                };
                rec.tasks.push(task.clone());
                // Keep the newest; drop the oldest finished tasks first.
                while rec.tasks.len() > TASKS_MAX {
                    let victim = rec
                        .tasks
                        .iter()
                        .position(|t| t.state != TaskState::Running)
                        .unwrap_or(0);
                    rec.tasks.remove(victim);
                }
                Ok((true, task))
            })
            .await?;
        Ok(MgsReply::Task(task))
    }

    pub(super) async fn task_report(&self, id: u64, report: Report) -> WireResult<MgsReply> {
        if report.checkpoint.as_ref().is_some_and(|c| c.len() > 4096) {
            return Err(err(Errno::NameTooLong, "task checkpoint too long"));
        }
        if let TaskState::Failed(why) = &report.state
            && why.len() > 4096
        {
            return Err(err(Errno::Inval, "task error message too long"));
        }
        self.mutate(|rec| {
            let t = rec
                .tasks
                .iter_mut()
                .find(|t| t.id == id)
                .ok_or_else(|| err(Errno::NoEnt, format!("no task {id}")))?;
            t.done = t.done.saturating_add(report.done);
            t.failed = t.failed.saturating_add(report.failed);
            t.bytes = t.bytes.saturating_add(report.bytes);
            if report.checkpoint.is_some() {
                t.checkpoint = report.checkpoint;
            }
            t.state = report.state;
            t.updated = Timestamp::now();
            Ok((true, ()))
        })
        .await?;
        Ok(MgsReply::Ok)
    }
}

/// Repository `id` of `repos`, or ENOENT.
fn repo_mut(repos: &mut [Repo], id: u32) -> WireResult<&mut Repo> {
    repos
        .iter_mut()
        .find(|r| r.id == id)
        .ok_or_else(|| err(Errno::NoEnt, format!("no repository {id}")))
}

#[cfg(test)]
mod tests {

    #[tokio::test]
    async fn ids_are_never_reused_even_across_restarts() {
        use weft_proto::hsm::{RepoPolicy, RepoSpec};
        use weft_proto::mgs::{MgsReply, MgsRequest};
        let dir = tempfile::tempdir().unwrap();
        let create = |path: &str| MgsRequest::RepoCreate {
            spec: RepoSpec {
                path: path.into(),
                url: "s3://b/p".into(),
                endpoint: None,
                region: None,
                path_style: false,
                import_policy: RepoPolicy::default(),
                export_policy: RepoPolicy::default(),
                import_metadata: false,
                events: None,
                chunk_size: 1 << 30,
            },
            dir: weft_proto::Fid::ROOT,
        };
        let id = |r| match r {
            Ok(MgsReply::RepoId(id)) => id,
            other => panic!("{other:?}"),
        };
        {
            let mgs = crate::Mgs::open(dir.path(), Some("t")).unwrap();
            assert_eq!(id(mgs.execute(create("/a")).await), 1);
            mgs.execute(MgsRequest::RepoDelete { id: 1 }).await.unwrap();
            assert_eq!(id(mgs.execute(create("/a")).await), 2);
            mgs.execute(MgsRequest::RepoDelete { id: 2 }).await.unwrap();
        }
        let mgs = crate::Mgs::open(dir.path(), None).unwrap();
        assert_eq!(id(mgs.execute(create("/b")).await), 3);
        // Tiering: checked, kept across a restart, turned off.
        let t = weft_proto::hsm::TieringPolicy {
            high_pct: 80,
            low_pct: 60,
            min_age_secs: 86_400,
        };
        let set = |tiering| MgsRequest::RepoTiering { id: 3, tiering };
        let bad = weft_proto::hsm::TieringPolicy { low_pct: 90, ..t };
        let e = mgs.execute(set(Some(bad))).await.unwrap_err();
        assert_eq!(e.errno, weft_proto::Errno::Inval, "{e}");
        let e = mgs
            .execute(MgsRequest::RepoTiering {
                id: 9,
                tiering: Some(t),
            })
            .await
            .unwrap_err();
        assert_eq!(e.errno, weft_proto::Errno::NoEnt, "{e}");
        mgs.execute(set(Some(t))).await.unwrap();
        drop(mgs);
        let mgs = crate::Mgs::open(dir.path(), None).unwrap();
        let tiering = |mgs: &crate::Mgs| mgs.config().repo(3).unwrap().tiering;
        assert_eq!(tiering(&mgs), Some(t));
        mgs.execute(set(None)).await.unwrap();
        assert_eq!(tiering(&mgs), None);

        // Policies and the event queue change; the rest stays; a result that does not
        // validate changes nothing.
        let update = |change| MgsRequest::RepoUpdate { id: 3, change };
        let q = "https://sqs.us-east-1.amazonaws.com/1/q".to_string();
        let new = weft_proto::hsm::RepoPolicy::parse("NEW").unwrap();
        let e = mgs
            .execute(update(weft_proto::hsm::RepoChange {
                events: Some(Some(q.clone())),
                ..Default::default()
            }))
            .await
            .unwrap_err();
        assert_eq!(e.errno, weft_proto::Errno::Inval, "no import policy: {e}");
        let before = mgs.config().repo(3).unwrap().spec.clone();
        mgs.execute(update(weft_proto::hsm::RepoChange {
            import_policy: Some(new),
            events: Some(Some(q.clone())),
            ..Default::default()
        }))
        .await
        .unwrap();
        let after = mgs.config().repo(3).unwrap().spec.clone();
        assert_eq!(
            (after.import_policy, after.events.as_deref()),
            (new, Some(q.as_str()))
        );
        assert_eq!(
            (&after.path, &after.url, after.export_policy),
            (&before.path, &before.url, before.export_policy)
        );
        mgs.execute(update(weft_proto::hsm::RepoChange {
            events: Some(None),
            ..Default::default()
        }))
        .await
        .unwrap();
        assert_eq!(mgs.config().repo(3).unwrap().spec.events, None);
        let e = mgs
            .execute(MgsRequest::RepoUpdate {
                id: 9,
                change: weft_proto::hsm::RepoChange::default(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.errno, weft_proto::Errno::NoEnt, "{e}");
    }
}
