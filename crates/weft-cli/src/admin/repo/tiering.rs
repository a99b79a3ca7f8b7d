//! `weft repo tiering ID|PATH --high 80% --low 60% --min-age 1d` (or `--off`): the
//! repository's tiering policy, kept by the MGS and enforced by the repository agent
//! (`weft_repo::tiering`); and the released bytes `weft repo show` and `weft df` print.

use super::*;
use std::collections::HashMap;
use weft_proto::TargetKind;
use weft_proto::hsm::TieringPolicy;
use weft_repo::tiering::Released;

/// Flags of `weft repo tiering`.
#[derive(Args, Debug)]
pub struct TieringArgs {
    /// The repository's directory, or its id with --mgs.
    pub target: String,
    /// Usage of an OST that starts releases (`80%` or `80`).
    #[arg(long, value_parser = parse_pct, required_unless_present = "off")]
    pub high: Option<u8>,
    /// Usage releases bring an OST under (below --high).
    #[arg(long, value_parser = parse_pct, required_unless_present = "off")]
    pub low: Option<u8>,
    /// Files used more recently than this are kept: seconds, or with s, m, h, d.
    #[arg(long, value_parser = parse_age, default_value = "1d")]
    pub min_age: u64,
    /// Turn tiering off.
    #[arg(long, conflicts_with_all = ["high", "low"])]
    pub off: bool,
}

/// `80%` or `80` -> 80 (0..=100).
pub fn parse_pct(s: &str) -> Result<u8, String> {
    let n = s.trim().trim_end_matches('%');
    match n.parse::<u8>() {
        Ok(v) if v <= 100 => Ok(v),
        _ => Err(format!("{s:?} is not a percentage (0% to 100%)")),
    }
}

/// `90`, `90s`, `15m`, `12h`, `1d` -> seconds.
pub fn parse_age(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('s') => (&s[..s.len() - 1], 1u64),
        Some('m') => (&s[..s.len() - 1], 60),
        Some('h') => (&s[..s.len() - 1], 3_600),
        Some('d') => (&s[..s.len() - 1], 86_400),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{s:?} is not an age (90, 90s, 15m, 12h, 1d)"))
}

/// An age as `parse_age` reads it back.
fn age_str(secs: u64) -> String {
    for (unit, n) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if secs >= n && secs.is_multiple_of(n) {
            return format!("{}{unit}", secs / n);
        }
    }
    format!("{secs}s")
}

/// A policy as `repo show` and `repo list` print it.
pub(super) fn policy_str(t: Option<&TieringPolicy>) -> String {
    match t {
        Some(t) => format!(
            "high {}% low {}% min-age {}",
            t.high_pct,
            t.low_pct,
            age_str(t.min_age_secs)
        ),
        None => "off".into(),
    }
}

/// `weft repo tiering`.
pub(super) async fn tiering(mgs: Option<&str>, args: TieringArgs) -> Result<()> {
    let policy = match (args.off, args.high, args.low) {
        (true, _, _) => None,
        (false, Some(high_pct), Some(low_pct)) => {
            let t = TieringPolicy {
                high_pct,
                low_pct,
                min_age_secs: args.min_age,
            };
            t.validate().map_err(|e| anyhow!(e))?;
            Some(t)
        }
        _ => bail!("give --high and --low, or --off"),
    };
    let (cluster, via, repo) = find_repo(mgs, &args.target, Match::Exact).await?;
    let req = MgsRequest::RepoTiering {
        id: repo.id,
        tiering: policy,
    };
    match mgs_call(&cluster, req).await? {
        MgsReply::Ok => {}
        other => bail!("the MGS answered {other:?} to a tiering change"),
    }
    println!(
        "repository {} ({}): tiering {}",
        repo.id,
        shown(via.as_ref(), &repo.spec.path),
        policy_str(policy.as_ref())
    );
    Ok(())
}

/// Released files and bytes per archive id (a repository's id), summed over every MDT:
/// each keeps them with every inode write (`released.ID.files`, `released.ID.bytes` in
/// its counters), so nothing is walked.
pub(super) async fn released_by_archive(cluster: &Cluster) -> Result<HashMap<u32, Released>> {
    let mut out: HashMap<u32, Released> = HashMap::new();
    for t in cluster.config().targets_of(TargetKind::Mdt) {
        let stats = async {
            cluster
                .mdt(t.id.index)?
                .connection()
                .connection()
                .await?
                .stats()
                .await
                .map_err(anyhow::Error::from)
        }
        .await
        .with_context(|| format!("cannot read the released counts of {}", t.id))?;
        for c in &stats.counters {
            let Some(rest) = c.name.strip_prefix("released.") else {
                continue;
            };
            let Some((id, what)) = rest.split_once('.') else {
                continue;
            };
            let Ok(id) = id.parse::<u32>() else { continue };
            let r = out.entry(id).or_default();
            match what {
                "files" => r.files += c.value,
                "bytes" => r.bytes += c.value,
                _ => {}
            }
        }
    }
    Ok(out)
}

/// Released files and bytes of repository `repo` (its archive id, wherever its files are).
pub(super) async fn released(cluster: &Cluster, repo: &Repo) -> Result<Released> {
    Ok(released_by_archive(cluster)
        .await?
        .remove(&repo.id)
        .unwrap_or_default())
}

/// Released bytes of every repository of the file system at `mgs` (`weft df`): one
/// `(id, path, released)` per repository.
pub async fn released_all(mgs: &str, fsname: &str) -> Result<Vec<(u32, String, Released)>> {
    let cluster = Cluster::connect(mgs, fsname, Default::default())
        .await
        .with_context(|| format!("cannot reach the file system at {mgs}"))?;
    let config = fresh_config(&cluster).await?;
    let mut counts = released_by_archive(&cluster).await?;
    Ok(config
        .repos
        .iter()
        .map(|r| {
            let released = counts.remove(&r.id).unwrap_or_default();
            (r.id, r.spec.path.clone(), released)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_and_ages_parse() {
        assert_eq!(parse_pct("80%"), Ok(80));
        assert_eq!(parse_pct("0"), Ok(0));
        assert!(parse_pct("101%").is_err() && parse_pct("-1").is_err());
        assert_eq!(parse_age("1d"), Ok(86_400));
        assert_eq!(parse_age("15m"), Ok(900));
        assert_eq!(parse_age("90"), Ok(90));
        assert!(parse_age("1y").is_err() && parse_age("99999999999999999999d").is_err());
        assert_eq!(age_str(86_400), "1d");
        assert_eq!(age_str(90), "90s");
        assert_eq!(age_str(0), "0s");
    }
}
