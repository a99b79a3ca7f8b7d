//! A test MDT in a temporary directory with an in-memory cluster.

use crate::{DestroyConfig, Mdt, MdtOptions, MemoryCluster};
use std::sync::Arc;
use std::time::Duration;
use weft_proto::mdt::{AccessMode, Attr, Credentials, MdtReply, MdtRequest, OpenFlags};
use weft_proto::{Errno, Fid, LayoutTemplate, WireResult};

pub struct H {
    pub dir: tempfile::TempDir,
    pub cluster: Arc<MemoryCluster>,
    pub mdt: Arc<Mdt>,
    pub opts: MdtOptions,
}

pub fn root() -> Credentials {
    Credentials::root()
}

pub fn user(uid: u32, gid: u32, groups: &[u32]) -> Credentials {
    Credentials {
        uid,
        gid,
        groups: groups.to_vec(),
    }
}

pub fn errno<T: std::fmt::Debug>(r: WireResult<T>) -> Errno {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.errno,
    }
}

/// A create of `name` in the root by root, opened with `open` if given.
pub fn create_req(name: &str, open: Option<OpenFlags>) -> MdtRequest {
    MdtRequest::Create {
        parent: Fid::ROOT,
        name: name.into(),
        mode: 0o100644,
        rdev: 0,
        exclusive: true,
        layout: None,
        open,
        cred: root(),
    }
}

pub fn opts() -> MdtOptions {
    MdtOptions {
        fsname: "testfs".into(),
        seq_width: 1000,
        destroy: DestroyConfig {
            retry_min: Duration::from_millis(5),
            retry_max: Duration::from_millis(20),
            quiet: Duration::ZERO,
            ..DestroyConfig::default()
        },
        ..MdtOptions::default()
    }
}

impl H {
    pub async fn new() -> H {
        Self::with(opts(), 4).await
    }

    pub async fn with(opts: MdtOptions, osts: u32) -> H {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Arc::new(MemoryCluster::new(osts));
        let mdt = Mdt::open(dir.path(), opts.clone(), cluster.clone()).unwrap();
        H {
            dir,
            cluster,
            mdt,
            opts,
        }
    }

    /// Stops the MDT as a process exit would and opens the same directory again.
    pub async fn reopen(self) -> H {
        let H {
            dir,
            cluster,
            mdt,
            opts,
        } = self;
        mdt.shutdown().await;
        drop(mdt);
        let mdt = Mdt::open(dir.path(), opts.clone(), cluster.clone()).unwrap();
        H {
            dir,
            cluster,
            mdt,
            opts,
        }
    }

    pub async fn run(&self, req: MdtRequest) -> WireResult<MdtReply> {
        self.mdt.execute(1, req).await
    }

    pub async fn run_on(&self, conn: u64, req: MdtRequest) -> WireResult<MdtReply> {
        self.mdt.execute(conn, req).await
    }

    pub async fn mkdir_as(
        &self,
        parent: Fid,
        name: &str,
        mode: u32,
        cred: &Credentials,
    ) -> WireResult<Fid> {
        let req = MdtRequest::Mkdir {
            parent,
            name: name.into(),
            mode,
            cred: cred.clone(),
        };
        match self.run(req).await? {
            MdtReply::Attr(a) => Ok(a.fid),
            other => panic!("mkdir replied {other:?}"),
        }
    }

    pub async fn mkdir(&self, parent: Fid, name: &str) -> Fid {
        self.mkdir_as(parent, name, 0o755, &root()).await.unwrap()
    }

    pub async fn create_as(
        &self,
        parent: Fid,
        name: &str,
        mode: u32,
        cred: &Credentials,
    ) -> WireResult<Attr> {
        let req = MdtRequest::Create {
            parent,
            name: name.into(),
            mode,
            rdev: 0,
            exclusive: true,
            layout: None,
            open: None,
            cred: cred.clone(),
        };
        match self.run(req).await? {
            MdtReply::Created { attr, .. } => Ok(attr),
            other => panic!("create replied {other:?}"),
        }
    }

    pub async fn create(&self, parent: Fid, name: &str) -> Fid {
        self.create_as(parent, name, 0o100644, &root())
            .await
            .unwrap()
            .fid
    }

    /// Creates and opens a file read-write on connection `conn`; returns (fid, handle).
    pub async fn create_open(
        &self,
        conn: u64,
        parent: Fid,
        name: &str,
        layout: Option<LayoutTemplate>,
    ) -> (Fid, u64) {
        let req = MdtRequest::Create {
            parent,
            name: name.into(),
            mode: 0o100644,
            rdev: 0,
            exclusive: true,
            layout,
            open: Some(OpenFlags {
                access: AccessMode::ReadWrite,
                truncate: false,
            }),
            cred: root(),
        };
        match self.run_on(conn, req).await.unwrap() {
            MdtReply::Created {
                attr,
                handle: Some(h),
                ..
            } => (attr.fid, h),
            other => panic!("create replied {other:?}"),
        }
    }

    pub async fn lookup_as(&self, parent: Fid, name: &str, cred: &Credentials) -> WireResult<Attr> {
        match self
            .run(MdtRequest::Lookup {
                parent,
                name: name.into(),
                cred: cred.clone(),
            })
            .await?
        {
            MdtReply::Attr(a) => Ok(a),
            other => panic!("lookup replied {other:?}"),
        }
    }

    pub async fn lookup(&self, parent: Fid, name: &str) -> WireResult<Attr> {
        self.lookup_as(parent, name, &root()).await
    }

    pub async fn getattr(&self, fid: Fid) -> WireResult<Attr> {
        match self.run(MdtRequest::GetAttr { fid }).await? {
            MdtReply::Attr(a) => Ok(a),
            other => panic!("getattr replied {other:?}"),
        }
    }

    pub async fn unlink_as(
        &self,
        parent: Fid,
        name: &str,
        cred: &Credentials,
    ) -> WireResult<MdtReply> {
        self.run(MdtRequest::Unlink {
            parent,
            name: name.into(),
            cred: cred.clone(),
        })
        .await
    }

    pub async fn rmdir_as(
        &self,
        parent: Fid,
        name: &str,
        cred: &Credentials,
    ) -> WireResult<MdtReply> {
        self.run(MdtRequest::Rmdir {
            parent,
            name: name.into(),
            cred: cred.clone(),
        })
        .await
    }

    pub async fn rename_as(
        &self,
        sp: Fid,
        sn: &str,
        dp: Fid,
        dn: &str,
        flags: weft_proto::mdt::RenameFlags,
        cred: &Credentials,
    ) -> WireResult<MdtReply> {
        self.run(MdtRequest::Rename {
            src_parent: sp,
            src_name: sn.into(),
            dst_parent: dp,
            dst_name: dn.into(),
            flags,
            cred: cred.clone(),
        })
        .await
    }

    pub async fn rename(&self, sp: Fid, sn: &str, dp: Fid, dn: &str) -> WireResult<MdtReply> {
        self.rename_as(sp, sn, dp, dn, Default::default(), &root())
            .await
    }

    /// Every name in a directory, listed in pages of `page`.
    pub async fn list(&self, dir: Fid, page: u32) -> Vec<String> {
        let mut cookie = 0;
        let mut names = Vec::new();
        loop {
            let req = MdtRequest::ReadDir {
                fid: dir,
                cookie,
                max_entries: page,
                plus: false,
                cred: root(),
            };
            let MdtReply::Entries { entries, eof } = self.run(req).await.unwrap() else {
                panic!()
            };
            for e in &entries {
                names.push(String::from_utf8(e.name.clone()).unwrap());
                cookie = e.cookie;
            }
            if eof {
                return names;
            }
        }
    }

    /// Waits until the destroy log is empty.
    pub async fn wait_destroys(&self) {
        for _ in 0..500 {
            if self.mdt.stats().pending_destroys == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("destroy log not drained: {:?}", self.mdt.stats());
    }
}
