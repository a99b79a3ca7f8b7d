//! Random sequences of namespace operations against a simple in-memory model tree: the MDT
//! must give the same success or errno for every operation and end with the same tree.

use super::harness::{H, root};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use weft_proto::mdt::{FileKind, MdtReply, MdtRequest, RenameFlags};
use weft_proto::{Errno, Fid, WireResult};

const NAMES: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
enum Op {
    Create(Vec<usize>, usize),
    Mkdir(Vec<usize>, usize),
    Unlink(Vec<usize>, usize),
    Rmdir(Vec<usize>, usize),
    Rename(Vec<usize>, usize, Vec<usize>, usize),
    Link(Vec<usize>, usize, Vec<usize>, usize),
}

fn path() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..NAMES.len(), 0..3)
}

fn op() -> impl Strategy<Value = Op> {
    let n = 0..NAMES.len();
    prop_oneof![
        3 => (path(), n.clone()).prop_map(|(p, n)| Op::Create(p, n)),
        3 => (path(), n.clone()).prop_map(|(p, n)| Op::Mkdir(p, n)),
        1 => (path(), n.clone()).prop_map(|(p, n)| Op::Unlink(p, n)),
        1 => (path(), n.clone()).prop_map(|(p, n)| Op::Rmdir(p, n)),
        3 => (path(), n.clone(), path(), n.clone()).prop_map(|(a, b, c, d)| Op::Rename(a, b, c, d)),
        1 => (path(), n.clone(), path(), n).prop_map(|(a, b, c, d)| Op::Link(a, b, c, d)),
    ]
}

#[derive(Debug, Clone)]
struct Node {
    dir: bool,
    nlink: u32,
    parent: usize,
    children: BTreeMap<usize, usize>,
}

/// The reference: nodes by id, id 0 is the root.
#[derive(Debug)]
struct Model {
    nodes: HashMap<usize, Node>,
    next: usize,
}

impl Model {
    fn new() -> Self {
        let root = Node {
            dir: true,
            nlink: 2,
            parent: 0,
            children: BTreeMap::new(),
        };
        Model {
            nodes: HashMap::from([(0, root)]),
            next: 1,
        }
    }

    fn node(&self, id: usize) -> &Node {
        &self.nodes[&id]
    }

    /// The node a path names, if every component exists and every non-last one is a dir.
    fn resolve(&self, p: &[usize]) -> Option<usize> {
        let mut cur = 0;
        for &n in p {
            let node = self.node(cur);
            if !node.dir {
                return None;
            }
            cur = *node.children.get(&n)?;
        }
        Some(cur)
    }

    fn parent_dir(&self, p: usize) -> Result<(), Errno> {
        if self.node(p).dir {
            Ok(())
        } else {
            Err(Errno::NotDir)
        }
    }

    fn is_ancestor_or_self(&self, anc: usize, mut id: usize) -> bool {
        loop {
            if id == anc {
                return true;
            }
            if id == 0 {
                return false;
            }
            id = self.node(id).parent;
        }
    }

    fn add(&mut self, parent: usize, name: usize, dir: bool) -> Result<usize, Errno> {
        self.parent_dir(parent)?;
        if self.node(parent).children.contains_key(&name) {
            return Err(Errno::Exist);
        }
        let id = self.next;
        self.next += 1;
        self.nodes.insert(
            id,
            Node {
                dir,
                nlink: if dir { 2 } else { 1 },
                parent,
                children: BTreeMap::new(),
            },
        );
        let p = self.nodes.get_mut(&parent).unwrap();
        p.children.insert(name, id);
        if dir {
            p.nlink += 1;
        }
        Ok(id)
    }

    fn drop_link(&mut self, id: usize) {
        let n = self.nodes.get_mut(&id).unwrap();
        n.nlink = if n.dir { 0 } else { n.nlink - 1 };
        if n.nlink == 0 {
            self.nodes.remove(&id);
        }
    }

    fn remove(&mut self, parent: usize, name: usize, rmdir: bool) -> Result<(), Errno> {
        self.parent_dir(parent)?;
        let &id = self.node(parent).children.get(&name).ok_or(Errno::NoEnt)?;
        let v = self.node(id);
        if rmdir && !v.dir {
            return Err(Errno::NotDir);
        }
        if !rmdir && v.dir {
            return Err(Errno::IsDir);
        }
        if rmdir && !v.children.is_empty() {
            return Err(Errno::NotEmpty);
        }
        let dir = v.dir;
        let p = self.nodes.get_mut(&parent).unwrap();
        p.children.remove(&name);
        if dir {
            p.nlink -= 1;
        }
        self.drop_link(id);
        Ok(())
    }

    fn link(&mut self, src: usize, parent: usize, name: usize) -> Result<(), Errno> {
        self.parent_dir(parent)?;
        if self.node(parent).children.contains_key(&name) {
            return Err(Errno::Exist);
        }
        if self.node(src).dir {
            return Err(Errno::Perm);
        }
        self.nodes
            .get_mut(&parent)
            .unwrap()
            .children
            .insert(name, src);
        self.nodes.get_mut(&src).unwrap().nlink += 1;
        Ok(())
    }

    fn rename(&mut self, sp: usize, sn: usize, dp: usize, dn: usize) -> Result<(), Errno> {
        self.parent_dir(sp)?;
        self.parent_dir(dp)?;
        let &src = self.node(sp).children.get(&sn).ok_or(Errno::NoEnt)?;
        let src_dir = self.node(src).dir;
        let dst = self.node(dp).children.get(&dn).copied();
        if src_dir && sp != dp && self.is_ancestor_or_self(src, dp) {
            return Err(Errno::Inval);
        }
        if let Some(d) = dst {
            if self.node(d).dir && self.is_ancestor_or_self(d, sp) {
                return Err(Errno::NotEmpty);
            }
            if d == src {
                return Ok(());
            }
            let dd = self.node(d).dir;
            if src_dir && !dd {
                return Err(Errno::NotDir);
            }
            if !src_dir && dd {
                return Err(Errno::IsDir);
            }
            if dd && !self.node(d).children.is_empty() {
                return Err(Errno::NotEmpty);
            }
            let p = self.nodes.get_mut(&dp).unwrap();
            p.children.remove(&dn);
            if dd {
                p.nlink -= 1;
            }
            self.drop_link(d);
        }
        self.nodes.get_mut(&sp).unwrap().children.remove(&sn);
        self.nodes.get_mut(&dp).unwrap().children.insert(dn, src);
        if src_dir {
            self.nodes.get_mut(&sp).unwrap().nlink -= 1;
            self.nodes.get_mut(&dp).unwrap().nlink += 1;
            self.nodes.get_mut(&src).unwrap().parent = dp;
        }
        Ok(())
    }

    /// path -> (is dir, nlink, link-group id of files)
    fn tree(&self) -> BTreeMap<String, (bool, u32, usize)> {
        let mut out = BTreeMap::new();
        let mut stack = vec![(0usize, String::new())];
        while let Some((id, path)) = stack.pop() {
            for (&name, &child) in &self.node(id).children {
                let p = format!("{path}/{}", NAMES[name]);
                let c = self.node(child);
                out.insert(p.clone(), (c.dir, c.nlink, child));
                if c.dir {
                    stack.push((child, p));
                }
            }
        }
        out
    }
}

/// A tree's shape (path -> (is dir, nlink)) and its groups of hard links.
type Canon = (BTreeMap<String, (bool, u32)>, BTreeSet<BTreeSet<String>>);

fn canon(tree: BTreeMap<String, (bool, u32, usize)>) -> Canon {
    let mut groups: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    let mut shape = BTreeMap::new();
    for (p, (dir, nlink, id)) in tree {
        shape.insert(p.clone(), (dir, nlink));
        groups.entry(id).or_default().insert(p);
    }
    (shape, groups.into_values().collect())
}

async fn mdt_tree(h: &H) -> BTreeMap<String, (bool, u32, usize)> {
    let mut out = BTreeMap::new();
    let mut ids: HashMap<Fid, usize> = HashMap::new();
    let mut stack = vec![(Fid::ROOT, String::new())];
    while let Some((fid, path)) = stack.pop() {
        let req = MdtRequest::ReadDir {
            fid,
            cookie: 0,
            max_entries: 100,
            plus: true,
            cred: root(),
        };
        let MdtReply::Entries { entries, eof } = h.run(req).await.unwrap() else {
            panic!()
        };
        assert!(eof);
        for e in entries {
            let p = format!("{path}/{}", String::from_utf8(e.name).unwrap());
            let a = e.attr.unwrap();
            let n = ids.len();
            let id = *ids.entry(e.fid).or_insert(n);
            out.insert(p.clone(), (e.kind == FileKind::Directory, a.nlink, id));
            if e.kind == FileKind::Directory {
                stack.push((e.fid, p));
            }
        }
    }
    out
}

fn outcome(r: WireResult<MdtReply>) -> Result<(), Errno> {
    r.map(|_| ()).map_err(|e| e.errno)
}

async fn check(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let h = H::new().await;
    let mut m = Model::new();
    let mut fids: HashMap<usize, Fid> = HashMap::from([(0, Fid::ROOT)]);
    let name = |n: usize| NAMES[n].as_bytes().to_vec();
    for op in ops {
        match op {
            Op::Create(ref p, n) | Op::Mkdir(ref p, n) if m.resolve(p).is_some() => {
                let parent = m.resolve(p).unwrap_or(0);
                let dir = matches!(op, Op::Mkdir(..));
                let req = if dir {
                    MdtRequest::Mkdir {
                        parent: fids[&parent],
                        name: name(n),
                        mode: 0o755,
                        cred: root(),
                    }
                } else {
                    MdtRequest::Create {
                        parent: fids[&parent],
                        name: name(n),
                        mode: 0o100644,
                        rdev: 0,
                        exclusive: true,
                        layout: None,
                        open: None,
                        cred: root(),
                    }
                };
                let got = h.run(req).await;
                let want = m.add(parent, n, dir);
                prop_assert_eq!(
                    got.as_ref().map(|_| ()).map_err(|e| e.errno),
                    want.map(|_| ()),
                    "{:?}",
                    op
                );
                if let (Ok(id), Ok(reply)) = (want, got) {
                    let fid = match reply {
                        MdtReply::Attr(a) | MdtReply::Created { attr: a, .. } => a.fid,
                        other => panic!("{other:?}"),
                    };
                    fids.insert(id, fid);
                }
            }
            Op::Unlink(ref p, n) | Op::Rmdir(ref p, n) if m.resolve(p).is_some() => {
                let parent = m.resolve(p).unwrap_or(0);
                let rmdir = matches!(op, Op::Rmdir(..));
                let req = if rmdir {
                    MdtRequest::Rmdir {
                        parent: fids[&parent],
                        name: name(n),
                        cred: root(),
                    }
                } else {
                    MdtRequest::Unlink {
                        parent: fids[&parent],
                        name: name(n),
                        cred: root(),
                    }
                };
                prop_assert_eq!(
                    outcome(h.run(req).await),
                    m.remove(parent, n, rmdir),
                    "{:?}",
                    op
                );
            }
            Op::Rename(ref a, b, ref c, d) if m.resolve(a).is_some() && m.resolve(c).is_some() => {
                let (sp, dp) = (m.resolve(a).unwrap_or(0), m.resolve(c).unwrap_or(0));
                let req = MdtRequest::Rename {
                    src_parent: fids[&sp],
                    src_name: name(b),
                    dst_parent: fids[&dp],
                    dst_name: name(d),
                    flags: RenameFlags::default(),
                    cred: root(),
                };
                prop_assert_eq!(
                    outcome(h.run(req).await),
                    m.rename(sp, b, dp, d),
                    "{:?}",
                    op
                );
            }
            Op::Link(ref a, b, ref c, d) => {
                let mut src_path = a.clone();
                src_path.push(b);
                let (Some(src), Some(dp)) = (m.resolve(&src_path), m.resolve(c)) else {
                    continue;
                };
                let req = MdtRequest::Link {
                    fid: fids[&src],
                    new_parent: fids[&dp],
                    new_name: name(d),
                    cred: root(),
                };
                prop_assert_eq!(outcome(h.run(req).await), m.link(src, dp, d), "{:?}", op);
            }
            _ => {}
        }
    }
    let (want_shape, want_groups) = canon(m.tree());
    let (got_shape, got_groups) = canon(mdt_tree(&h).await);
    prop_assert_eq!(got_shape, want_shape);
    prop_assert_eq!(got_groups, want_groups);
    prop_assert_eq!(
        h.mdt.stats().files + h.mdt.stats().dirs,
        m.nodes.len() as u64
    );
    h.mdt.shutdown().await;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn namespace_ops_match_the_model(ops in prop::collection::vec(op(), 1..60)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(check(ops))?;
    }
}
