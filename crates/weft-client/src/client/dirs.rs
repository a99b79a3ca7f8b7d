//! Striped directories on the client (Lustre's LMV): a striped directory's names live in
//! shards on several MDTs, each name in the shard its hash picks, and the directory's own
//! inode (the master) holds none.
//!
//! The client learns a directory's stripes the first time its MDT answers a name
//! operation with EREMOTE, keeps them (a FID is never reused, so they never go stale), and
//! from then on sends each name operation to the shard's MDT with the shard as parent.
//! A listing merges the shards' pages in hash order: a cookie is the hash of the last entry
//! returned, as for a plain directory, so listing resumes in every shard at once.

use crate::client::Client;
use crate::error::ClientError;
use crate::mdt::MdtClient;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use weft_proto::mdt::{
    Attr, Credentials, DirDefault, DirEntry, DirStripes, MdtReply, MdtRequest, ScanEntry, SetAttr,
};
use weft_proto::{Errno, Fid};

/// Striped directories known to this client, by master FID. Bounded: past the bound the
/// map is cleared and stripes are learned again on the next EREMOTE.
#[derive(Default)]
pub(crate) struct StripeCache {
    known: Mutex<HashMap<Fid, Arc<DirStripes>>>,
}

const STRIPE_CACHE_MAX: usize = 65536;

impl StripeCache {
    fn get(&self, fid: Fid) -> Option<Arc<DirStripes>> {
        self.known.lock().get(&fid).cloned()
    }

    fn put(&self, fid: Fid, stripes: Arc<DirStripes>) {
        let mut m = self.known.lock();
        if m.len() >= STRIPE_CACHE_MAX {
            m.clear();
        }
        m.insert(fid, stripes);
    }
}

/// Whether an error says "this is a striped directory: ask its shards".
fn is_striped(e: &ClientError) -> bool {
    e.errno() == Errno::Remote
}

impl Client {
    /// The stripes of directory `fid` (`None`: not striped), from the cache or its MDT.
    pub async fn dir_stripes(&self, fid: Fid) -> Result<Option<Arc<DirStripes>>, ClientError> {
        if let Some(s) = self.stripe_cache().get(fid) {
            return Ok(Some(s));
        }
        let mdt = self.mdt(fid)?;
        match mdt.call(MdtRequest::GetDirStripes { fid }).await? {
            MdtReply::DirStripes(Some(s)) => {
                s.validate().map_err(ClientError::Invalid)?;
                let s = Arc::new(s);
                self.stripe_cache().put(fid, s.clone());
                Ok(Some(s))
            }
            MdtReply::DirStripes(None) => Ok(None),
            _ => Err(ClientError::UnexpectedReply {
                target: weft_proto::TargetId::mdt(mdt.index()),
                op: "getdirstripe",
            }),
        }
    }

    /// The directory that holds `name` of `parent`: its shard when `parent` is known to be
    /// striped, else `parent`.
    pub(crate) fn shard_for(&self, parent: Fid, name: &[u8]) -> Fid {
        self.stripe_cache()
            .get(parent)
            .and_then(|s| s.shard_of(name))
            .unwrap_or(parent)
    }

    /// Runs a name operation of `parent` in the directory that holds `name`, with that
    /// directory's MDT; an EREMOTE answer teaches the client the stripes and the operation
    /// goes once more to the right shard.
    pub(crate) async fn in_shard<T, F, Fut>(
        &self,
        parent: Fid,
        name: &[u8],
        op: F,
    ) -> Result<T, ClientError>
    where
        F: Fn(Fid, Arc<MdtClient>) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let dir = self.shard_for(parent, name);
        match op(dir, self.mdt(dir)?).await {
            Err(e) if is_striped(&e) && dir == parent => {
                if self.dir_stripes(parent).await?.is_none() {
                    return Err(e);
                }
                let dir = self.shard_for(parent, name);
                op(dir, self.mdt(dir)?).await
            }
            r => r,
        }
    }

    /// A striped directory's shards check permissions for the names they hold: they get
    /// the master's mode and owner after a chmod or chown of it (as the MDT's root: the
    /// master's MDT has just allowed the change).
    pub(crate) async fn copy_to_shards(&self, master: &Attr) -> Result<(), ClientError> {
        let Some(stripes) = self.dir_stripes(master.fid).await? else {
            return Ok(());
        };
        let root = Credentials {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        };
        let set = SetAttr {
            mode: Some(master.mode),
            uid: Some(master.uid),
            gid: Some(master.gid),
            ..SetAttr::default()
        };
        let mut asks = Vec::new();
        for &shard in &stripes.shards {
            let mdt = self.mdt(shard)?;
            let (set, root) = (set.clone(), root.clone());
            asks.push(async move { mdt.setattr(shard, set, &root).await });
        }
        futures::future::try_join_all(asks).await?;
        Ok(())
    }

    /// Sets (or with `None` removes) the default for new subdirectories of `fid`
    /// (`weft setdirstripe -D`); a striped directory's shards get it too, since each makes
    /// the subdirectories named in it.
    pub async fn set_dir_default(
        &self,
        fid: Fid,
        default: Option<DirDefault>,
        cred: &Credentials,
    ) -> Result<(), ClientError> {
        let set = |f: Fid, cred: Credentials| async move {
            let mdt = self.mdt(f)?;
            match mdt
                .call(MdtRequest::SetDirDefault {
                    fid: f,
                    default,
                    cred,
                })
                .await?
            {
                MdtReply::Ok => Ok(()),
                _ => Err(ClientError::UnexpectedReply {
                    target: weft_proto::TargetId::mdt(mdt.index()),
                    op: "setdirstripe_default",
                }),
            }
        };
        set(fid, cred.clone()).await?;
        if let Some(stripes) = self.dir_stripes(fid).await? {
            let root = Credentials {
                uid: 0,
                gid: 0,
                groups: Vec::new(),
            };
            let asks = stripes.shards.iter().map(|&s| set(s, root.clone()));
            futures::future::try_join_all(asks).await?;
        }
        Ok(())
    }

    /// The default for new subdirectories of `fid`, if set.
    pub async fn dir_default(&self, fid: Fid) -> Result<Option<DirDefault>, ClientError> {
        let mdt = self.mdt(fid)?;
        match mdt.call(MdtRequest::GetDirDefault { fid }).await? {
            MdtReply::DirDefault(d) => Ok(d),
            _ => Err(ClientError::UnexpectedReply {
                target: weft_proto::TargetId::mdt(mdt.index()),
                op: "getdirstripe_default",
            }),
        }
    }

    /// The directories whose pages make up a listing of `fid`: its shards, or itself.
    async fn listed_dirs(&self, fid: Fid) -> Result<Vec<Fid>, ClientError> {
        Ok(match self.stripe_cache().get(fid) {
            Some(s) => s.shards.clone(),
            None => vec![fid],
        })
    }

    /// One page of a directory listing (what `page` returns for each shard, at most about
    /// `max` entries),
    /// merged across the shards of a striped directory.
    pub(crate) async fn list_page<T, F, Fut>(
        &self,
        fid: Fid,
        max: u32,
        page: F,
        cookie_of: fn(&T) -> u64,
    ) -> Result<(Vec<T>, bool), ClientError>
    where
        F: Fn(Fid, Arc<MdtClient>) -> Fut,
        Fut: Future<Output = Result<(Vec<T>, bool), ClientError>>,
    {
        let mut dirs = self.listed_dirs(fid).await?;
        if dirs.len() == 1 {
            match page(dirs[0], self.mdt(dirs[0])?).await {
                Err(e) if is_striped(&e) => match self.dir_stripes(fid).await? {
                    Some(s) => dirs = s.shards.clone(),
                    None => return Err(e),
                },
                r => return r,
            }
        }
        let mut asks = Vec::with_capacity(dirs.len());
        for d in dirs {
            let mdt = self.mdt(d)?;
            asks.push(page(d, mdt));
        }
        let pages = futures::future::try_join_all(asks).await?;
        Ok(merge_pages(pages, max as usize, cookie_of))
    }
}

/// Merges one page of every shard into one page in cookie (hash) order. Entries up to the
/// smallest last cookie among shards that have more are complete (a shard's page never
/// splits a group of equal hashes), so those are returned and the next page starts after
/// it; more than `max` are cut at a hash boundary.
fn merge_pages<T>(
    pages: Vec<(Vec<T>, bool)>,
    max: usize,
    cookie_of: fn(&T) -> u64,
) -> (Vec<T>, bool) {
    let mut cut: Option<u64> = None;
    let mut all = Vec::new();
    for (entries, eof) in pages {
        if !eof && let Some(last) = entries.last().map(cookie_of) {
            cut = Some(cut.map_or(last, |c| c.min(last)));
        }
        all.extend(entries);
    }
    all.sort_by_key(cookie_of);
    if let Some(c) = cut {
        all.retain(|e| cookie_of(e) <= c);
    }
    let mut eof = cut.is_none();
    if all.len() > max.max(1) {
        // Keep whole groups of equal hashes: cut before the group that crosses `max`,
        // unless that would leave nothing.
        let limit = cookie_of(&all[max.max(1)]);
        let keep = all.iter().take_while(|e| cookie_of(e) < limit).count();
        let keep = if keep == 0 {
            all.iter().take_while(|e| cookie_of(e) == limit).count()
        } else {
            keep
        };
        all.truncate(keep);
        eof = false;
    }
    (all, eof)
}

impl Client {
    /// One page of a directory after `cookie`, merged across shards when it is striped;
    /// with `plus`, every entry has attributes (remote entries' from their MDT).
    pub async fn readdir(
        &self,
        fid: Fid,
        cookie: u64,
        max: u32,
        plus: bool,
        cred: &Credentials,
    ) -> Result<(Vec<DirEntry>, bool), ClientError> {
        let (mut entries, eof) = self
            .list_page(
                fid,
                max,
                |d, mdt| async move { mdt.readdir(d, cookie, max, plus, cred).await },
                |e: &DirEntry| e.cookie,
            )
            .await?;
        if plus {
            self.fill_remote_attrs(&mut entries, |e| e).await?;
        }
        Ok((entries, eof))
    }

    /// One page of directory `fid`: entries after `cookie` with attributes and layouts.
    pub async fn scan_dir(
        &self,
        fid: Fid,
        cookie: u64,
        cred: &Credentials,
    ) -> Result<(Vec<ScanEntry>, bool), ClientError> {
        let (mut entries, eof) = self
            .list_page(
                fid,
                u32::MAX,
                |d, mdt| async move { mdt.scan_dir(d, cookie, u32::MAX, cred).await },
                |e: &ScanEntry| e.entry.cookie,
            )
            .await?;
        self.fill_remote_attrs(&mut entries, |e| &mut e.entry)
            .await?;
        Ok((entries, eof))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Paging through merged shards lists every entry exactly once, in hash order,
        /// whatever the page size and however hashes collide across shards.
        #[test]
        fn merged_pages_list_each_entry_once(
            shards in prop::collection::vec(prop::collection::btree_set(0u64..400, 0..60), 1..5),
            max in 1usize..20,
            shard_page in 1usize..20,
        ) {
            // Entries are (hash, shard, i): shards may share hashes.
            let per: Vec<Vec<(u64, usize)>> = shards
                .iter()
                .enumerate()
                .map(|(s, hs)| hs.iter().map(|&h| (h + 1, s)).collect())
                .collect();
            let page_of = |s: usize, after: u64| -> (Vec<(u64, usize)>, bool) {
                let rest: Vec<_> = per[s].iter().copied().filter(|e| e.0 > after).collect();
                let eof = rest.len() <= shard_page;
                (rest.into_iter().take(shard_page).collect(), eof)
            };
            let mut cookie = 0;
            let mut seen = Vec::new();
            for _ in 0..10_000 {
                let pages = (0..per.len()).map(|s| page_of(s, cookie)).collect();
                let (page, eof) = merge_pages(pages, max, |e: &(u64, usize)| e.0);
                if let Some(last) = page.last() {
                    cookie = last.0;
                }
                seen.extend(page);
                if eof {
                    break;
                }
            }
            let mut want: Vec<(u64, usize)> = per.concat();
            want.sort();
            seen.sort();
            prop_assert_eq!(seen, want);
        }
    }
}
