//! Directory streams: what an open directory keeps between the kernel's readdir requests,
//! and where each entry sits in the stream.
//!
//! Offsets: `.` is at [`DOT_OFFSET`] and `..` at [`DOTDOT_OFFSET`] (the MDT lists neither);
//! every other entry's offset is its MDT cookie, which is above both, so a request at
//! offset `n` goes on after the entry whose offset was `n`.
//!
//! Pages: a stream keeps the last page fetched from the MDT, so that the kernel's small
//! readdir requests do not each cost a round trip, and fetches the pages after it ahead
//! ([`PagesAhead`]) while the kernel takes this one. Pages come from a [`DirSource`]: the
//! client library, or a fake in tests.

use crate::errno::FsResult;
use crate::inodes::InodeTable;
use std::future::Future;
use std::sync::Arc;
use weft_client::{Client, ClientError};
use weft_proto::Fid;
use weft_proto::mdt::{Credentials, DirEntry, FileKind};

/// Directory entries fetched from the MDT per readdir round trip, with attributes (each
/// costs the MDT an inode read: ~1.1 ms for 1024 on this VM) or without (~0.17 ms). The
/// kernel takes about 1,000 plain entries per READDIR (32 KiB): pages of 4096 made it
/// wait longer for the first of them than pages of 1024 fetched one after the other.
pub const DIR_PAGE: u32 = 1024;
/// Entries of the first page of a listing the kernel asks for with attributes. The
/// kernel makes a dentry and an inode of every entry of a READDIRPLUS (~4 µs each here)
/// and asks without attributes after the first buffer, unless something looks names up
/// meanwhile (`ls -l`): a short first reply lets a plain listing (`scandir`, `find`)
/// pay for attributes it does not read on a few entries only.
pub const FIRST_PLUS_PAGE: u32 = 64;
/// Offset of `.` in a directory stream; MDT cookies start above it and [`DOTDOT_OFFSET`].
pub const DOT_OFFSET: u64 = 1;
/// Offset of `..` in a directory stream.
pub const DOTDOT_OFFSET: u64 = 2;
/// Pages fetched ahead and not yet taken, besides the one being fetched.
const PAGES_AHEAD: usize = 1;

/// A page of a directory as the MDT returned it: entries and whether it is the last.
pub type FetchedPage = Result<(Vec<DirEntry>, bool), ClientError>;

/// Where directory pages come from.
pub trait DirSource: Send + Sync + 'static {
    /// Up to `max` entries of directory `dir` after cookie `after` (0: from the start),
    /// with attributes if `plus`, and whether they are the last.
    fn read_page(
        &self,
        dir: Fid,
        after: u64,
        max: u32,
        plus: bool,
        cred: &Credentials,
    ) -> impl Future<Output = FetchedPage> + Send;
}

impl DirSource for Client {
    fn read_page(
        &self,
        dir: Fid,
        after: u64,
        max: u32,
        plus: bool,
        cred: &Credentials,
    ) -> impl Future<Output = FetchedPage> + Send {
        self.readdir(dir, after, max, plus, cred)
    }
}

/// Takes the entries of a readdir reply until it is full.
pub trait DirSink: Send {
    /// Adds an entry named `name` for inode `ino` of type `kind` at stream offset `offset`;
    /// returns true if the reply is full (and the entry was not added).
    fn add(&mut self, ino: u64, offset: u64, kind: FileKind, name: &[u8]) -> bool;
}

/// An open directory.
pub struct DirStream {
    /// The directory.
    pub fid: Fid,
    /// Its inode number.
    pub ino: u64,
    page: tokio::sync::Mutex<DirPage>,
}

#[derive(Default)]
struct DirPage {
    /// The cookie the page was fetched after (`None` before the first fetch).
    after: Option<u64>,
    /// Whether the entries carry attributes (fetched for a readdirplus).
    plus: bool,
    entries: Arc<Vec<DirEntry>>,
    eof: bool,
    ahead: Option<PagesAhead>,
}

/// Pages after `after` being fetched one after the other by a task, each as soon as the
/// one before it arrived, [`PAGES_AHEAD`] at most waiting: the kernel takes a page in
/// about the time the MDT needs for the next, so fetching only when it asks left it
/// waiting for every page. Aborted if the directory is closed or read elsewhere first.
struct PagesAhead {
    /// The cookie the next page received starts after.
    after: u64,
    plus: bool,
    pages: tokio::sync::mpsc::Receiver<FetchedPage>,
    task: tokio::task::JoinHandle<()>,
}

impl PagesAhead {
    fn start<S: DirSource>(
        src: Arc<S>,
        fid: Fid,
        after: u64,
        plus: bool,
        cred: Credentials,
    ) -> Self {
        let (tx, pages) = tokio::sync::mpsc::channel(PAGES_AHEAD);
        let task = tokio::spawn(async move {
            let mut next = after;
            loop {
                let page = src.read_page(fid, next, DIR_PAGE, plus, &cred).await;
                let more = match &page {
                    Ok((entries, false)) => entries.last().map(|e| e.cookie),
                    _ => None,
                };
                if tx.send(page).await.is_err() {
                    return;
                }
                match more {
                    Some(cookie) => next = cookie,
                    None => return,
                }
            }
        });
        Self {
            after,
            plus,
            pages,
            task,
        }
    }

    /// The next page, if it is the one after `after` and has what the request needs.
    async fn take(&mut self, after: u64, plus: bool) -> Option<(Vec<DirEntry>, bool)> {
        if self.after != after || (plus && !self.plus) {
            return None;
        }
        // A failed fetch is made again, so its error is this request's own.
        let (entries, eof) = self.pages.recv().await?.ok()?;
        self.after = entries.last().map_or(after, |e| e.cookie);
        Some((entries, eof))
    }
}

impl Drop for PagesAhead {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DirStream {
    /// A stream over directory `fid` (inode `ino`), nothing fetched yet.
    pub fn new(fid: Fid, ino: u64) -> Self {
        Self {
            fid,
            ino,
            page: tokio::sync::Mutex::new(DirPage::default()),
        }
    }

    /// The entries after stream offset `offset`: the page held and where in it they start.
    pub async fn page<S: DirSource>(
        &self,
        src: &Arc<S>,
        offset: u64,
        plus: bool,
        cred: &Credentials,
    ) -> FsResult<(Arc<Vec<DirEntry>>, usize)> {
        let mut page = self.page.lock().await;
        let after = if offset <= DOTDOT_OFFSET { 0 } else { offset };
        // Served from the page held if it covers `after`. A page read with attributes
        // serves a plain readdir too: the kernel (`readdirplus_auto`) asks with
        // attributes at the start of a listing and without them after, unless something
        // looked names up in between (`ls -l`).
        if page.plus || !plus {
            let start = if page.after == Some(after) {
                Some(0)
            } else {
                page.entries
                    .iter()
                    .position(|e| e.cookie == after)
                    .map(|i| i + 1)
            };
            if let Some(i) = start
                && (i < page.entries.len() || page.eof)
            {
                return Ok((page.entries.clone(), i));
            }
        }
        // The kernel (`readdirplus_auto`) asks with attributes at the start of every
        // listing and, after that, only when something looked names up in between (`ls
        // -l`): so the first page with attributes is small, and the page fetched ahead of
        // it comes without them (if the kernel asks with them after all, it is fetched
        // again, once).
        let first = plus && after == 0;
        let size = if first { FIRST_PLUS_PAGE } else { DIR_PAGE };
        let ahead_plus = plus && !first;
        let fetch = || src.read_page(self.fid, after, size, plus, cred);
        // Pages fetched ahead serve the request if it goes on where they start.
        let mut ahead = page.ahead.take();
        let fetched_ahead = match ahead.as_mut() {
            Some(a) => a.take(after, plus).await.map(|p| (p, a.plus)),
            None => None,
        };
        let ((entries, eof), fetched_plus) = match fetched_ahead {
            Some(p) => p,
            None => {
                ahead = None;
                (fetch().await?, plus)
            }
        };
        let entries = Arc::new(entries);
        if eof {
            ahead = None;
        } else if ahead.is_none()
            && let Some(last) = entries.last()
        {
            ahead = Some(PagesAhead::start(
                src.clone(),
                self.fid,
                last.cookie,
                ahead_plus,
                cred.clone(),
            ));
        }
        *page = DirPage {
            after: Some(after),
            plus: fetched_plus,
            entries: entries.clone(),
            eof,
            ahead,
        };
        Ok((entries, 0))
    }

    /// Fills a plain readdir reply from stream offset `offset`: `.` and `..` (`..` is the
    /// directory `inodes` last found this one in, itself for the root or if unknown), then
    /// the MDT's entries, until `sink` is full.
    pub async fn fill<S: DirSource>(
        &self,
        src: &Arc<S>,
        inodes: &InodeTable,
        offset: u64,
        cred: &Credentials,
        sink: &mut impl DirSink,
    ) -> FsResult<()> {
        if offset < DOT_OFFSET && sink.add(self.ino, DOT_OFFSET, FileKind::Directory, b".") {
            return Ok(());
        }
        if offset < DOTDOT_OFFSET {
            let up = inodes.parent(self.ino).unwrap_or(self.ino);
            if sink.add(up, DOTDOT_OFFSET, FileKind::Directory, b"..") {
                return Ok(());
            }
        }
        let (page, start) = self.page(src, offset, false, cred).await?;
        for e in page.get(start..).unwrap_or_default() {
            if sink.add(inodes.ino_of(e.fid), e.cookie, e.kind, &e.name) {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use weft_proto::{Errno, WireError};

    /// A directory of `n` entries with cookies 10, 20, ...; records every fetch.
    struct FakeDir {
        entries: Vec<DirEntry>,
        fetches: Mutex<Vec<(u64, u32, bool)>>,
        fail: bool,
    }

    fn fid(oid: u32) -> Fid {
        Fid {
            seq: 0x2_0000_0400,
            oid,
            ver: 0,
        }
    }

    impl FakeDir {
        fn new(n: u32) -> Arc<Self> {
            let entries = (1..=n)
                .map(|i| DirEntry {
                    name: format!("f{i}").into_bytes(),
                    fid: fid(i),
                    kind: FileKind::Regular,
                    cookie: u64::from(i) * 10,
                    attr: None,
                })
                .collect();
            Arc::new(Self {
                entries,
                fetches: Mutex::new(Vec::new()),
                fail: false,
            })
        }

        fn failing() -> Arc<Self> {
            Arc::new(Self {
                entries: Vec::new(),
                fetches: Mutex::new(Vec::new()),
                fail: true,
            })
        }

        fn cookie(&self, nth: usize) -> u64 {
            self.entries[nth - 1].cookie
        }
    }

    impl DirSource for FakeDir {
        fn read_page(
            &self,
            _dir: Fid,
            after: u64,
            max: u32,
            plus: bool,
            _cred: &Credentials,
        ) -> impl Future<Output = FetchedPage> + Send {
            self.fetches.lock().push((after, max, plus));
            let page = if self.fail {
                Err(ClientError::Remote(WireError::new(Errno::Io, "broken")))
            } else {
                let rest: Vec<DirEntry> = self
                    .entries
                    .iter()
                    .filter(|e| e.cookie > after)
                    .cloned()
                    .collect();
                let n = rest.len().min(max as usize);
                Ok((rest[..n].to_vec(), n == rest.len()))
            };
            std::future::ready(page)
        }
    }

    /// A reply with room for `room` entries.
    struct Reply {
        room: usize,
        got: Vec<(u64, u64, Vec<u8>)>,
    }

    impl DirSink for Reply {
        fn add(&mut self, ino: u64, offset: u64, _kind: FileKind, name: &[u8]) -> bool {
            if self.got.len() == self.room {
                return true;
            }
            self.got.push((ino, offset, name.to_vec()));
            false
        }
    }

    /// Lists the whole stream from `offset` in replies of `room` entries, each request
    /// going on at the offset of the last entry received, as the kernel does.
    async fn list(dir: &DirStream, src: &Arc<FakeDir>, room: usize) -> Vec<(u64, u64, Vec<u8>)> {
        let inodes = InodeTable::new();
        let mut all = Vec::new();
        let mut offset = 0;
        loop {
            let mut reply = Reply {
                room,
                got: Vec::new(),
            };
            dir.fill(src, &inodes, offset, &Credentials::root(), &mut reply)
                .await
                .unwrap();
            let Some(last) = reply.got.last() else {
                return all;
            };
            offset = last.1;
            all.extend(reply.got);
        }
    }

    #[tokio::test]
    async fn a_listing_resumes_at_each_offset_and_fetches_each_page_once() {
        let src = FakeDir::new(2500);
        let dir = DirStream::new(Fid::ROOT, crate::inodes::ROOT_INO);
        let all = list(&dir, &src, 100).await;
        let names: Vec<String> = all
            .iter()
            .map(|e| String::from_utf8_lossy(&e.2).into_owned())
            .collect();
        let mut want = vec![".".to_string(), "..".to_string()];
        want.extend((1..=2500).map(|i| format!("f{i}")));
        assert_eq!(names, want);
        assert_eq!(all[0].1, DOT_OFFSET);
        assert_eq!(all[1].1, DOTDOT_OFFSET);
        assert_eq!((all[0].0, all[1].0), (1, 1), "the root is its own parent");
        assert!(all.windows(2).all(|w| w[0].1 < w[1].1), "offsets increase");
        assert_eq!(all[2].0, crate::inodes::flatten(fid(1)).unwrap());
        // Pages of DIR_PAGE, each fetched once (the later ones ahead of the kernel).
        let mut fetches = src.fetches.lock().clone();
        fetches.sort_unstable();
        assert_eq!(
            fetches,
            vec![
                (0, DIR_PAGE, false),
                (src.cookie(1024), DIR_PAGE, false),
                (src.cookie(2048), DIR_PAGE, false),
            ]
        );
    }

    #[tokio::test]
    async fn a_full_reply_stops_before_dot_dot_and_the_next_one_starts_there() {
        let src = FakeDir::new(3);
        let dir = DirStream::new(Fid::ROOT, crate::inodes::ROOT_INO);
        let all = list(&dir, &src, 1).await;
        let offsets: Vec<u64> = all.iter().map(|e| e.1).collect();
        assert_eq!(offsets, vec![1, 2, 10, 20, 30]);
        // The one page held served every later request.
        assert_eq!(src.fetches.lock().len(), 1);
    }

    #[tokio::test]
    async fn a_rewound_stream_starts_again() {
        let src = FakeDir::new(2000);
        let dir = DirStream::new(Fid::ROOT, crate::inodes::ROOT_INO);
        let first = list(&dir, &src, 500).await;
        let again = list(&dir, &src, 500).await;
        assert_eq!(first, again);
    }

    #[tokio::test]
    async fn attributes_are_fetched_small_first_then_plain_ahead() {
        let src = FakeDir::new(200);
        let dir = DirStream::new(Fid::ROOT, crate::inodes::ROOT_INO);
        let cred = Credentials::root();
        let (page, start) = dir.page(&src, 0, true, &cred).await.unwrap();
        assert_eq!((page.len(), start), (FIRST_PLUS_PAGE as usize, 0));
        // The plain request after it is served by the page fetched ahead.
        let last = src.cookie(FIRST_PLUS_PAGE as usize);
        let (page, start) = dir.page(&src, last, false, &cred).await.unwrap();
        assert_eq!((page.len(), start), (200 - FIRST_PLUS_PAGE as usize, 0));
        // A request with attributes is not served from a page without them.
        let mid = src.cookie(100);
        let (page, start) = dir.page(&src, mid, true, &cred).await.unwrap();
        assert_eq!((page.len(), start), (100, 0));
        // And the plain page held answers a plain request inside it.
        let (page, start) = dir.page(&src, src.cookie(150), false, &cred).await.unwrap();
        assert_eq!(page[start].cookie, src.cookie(151));
        assert_eq!(
            *src.fetches.lock(),
            vec![
                (0, FIRST_PLUS_PAGE, true),
                (last, DIR_PAGE, false),
                (mid, DIR_PAGE, true),
            ]
        );
    }

    #[tokio::test]
    async fn a_failed_fetch_fails_the_request_after_the_dots() {
        let src = FakeDir::failing();
        let dir = DirStream::new(Fid::ROOT, crate::inodes::ROOT_INO);
        let mut reply = Reply {
            room: 10,
            got: Vec::new(),
        };
        let inodes = InodeTable::new();
        let r = dir
            .fill(&src, &inodes, 0, &Credentials::root(), &mut reply)
            .await;
        assert_eq!(r.map_err(|e| e.errno()), Err(libc::EIO));
        assert_eq!(reply.got.len(), 2);
    }
}
