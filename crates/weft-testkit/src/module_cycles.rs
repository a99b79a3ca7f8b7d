//! No import loops inside a crate: a test over the workspace's sources (it lives here, in
//! the crate every integration test already builds, and reads files only).
//!
//! The graph: a node per module file of a crate's `src/` (test modules left out: files
//! named `tests.rs` or under a `tests/` folder, and `#[cfg(test)] mod x { .. }` blocks);
//! an edge from module A to module B when A's code names a path into B — in a `use`
//! statement or inline, starting with `crate::`, `super::`, `self::` or the name of one of
//! A's child modules (or, at the crate root, of a top-level module). A module naming its
//! own ancestors is not an edge: a child that adds to its parent (`impl Ops` in
//! `ops/files.rs`, `use super::*`) is how a module is split into files, not a loop. A loop
//! is a set of modules that reach each other through these edges (a strongly connected
//! component of more than one module).
//!
//! [`KNOWN`] lists the loops the code still has, exactly: a new loop fails the test, and so
//! does a loop that is gone but still listed (remove it from the list).

use crate::source_tree::{rust_files, workspace_root};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The loops that are still there, one line per loop: `crate: module, module, ...`
/// (sorted). Shrink this list; never grow it.
const KNOWN: &[&str] = &[
    "weft-mdt: commit, commit::apply, destroy, dir_moves, engine, error, fast, fsck, hsm, \
     hsm::import, hsm::restore, hsm::state, inode_v1, layouts, mdt, mdt::dispatch, namespace, \
     namespace::attr, namespace::create, namespace::open, namespace::rename, perm, reads, \
     redo, remote, remote::prepare, remote::serve, remote_links, replies, store",
];

type Module = Vec<String>;

/// Every module file under `src`, by module path (`[]` for `lib.rs`/`main.rs`).
fn module_files(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut found = BTreeMap::new();
    for path in rust_files(src) {
        let Ok(rel) = path
            .with_extension("")
            .strip_prefix(src)
            .map(Path::to_path_buf)
        else {
            continue;
        };
        let mut parts: Module = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
            parts.clear();
        } else if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        found.insert(parts, path);
    }
    found
}

/// `text` without `#[cfg(test)] mod name { .. }` blocks and without `//` comments.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let head = after.trim_start();
        let is_inline_mod = (head.starts_with("mod ") || head.starts_with("pub(crate) mod "))
            && head
                .find('{')
                .is_some_and(|b| head.find(';').is_none_or(|s| b < s));
        if !is_inline_mod {
            out.push_str("#[cfg(test)]");
            rest = after;
            continue;
        }
        let open = after.find('{').unwrap_or(0);
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths of a `use` tree (`a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`).
fn use_paths(prefix: &[String], tree: &str, out: &mut Vec<Module>) {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        let mut path = prefix.to_vec();
        path.extend(tree.split("::").filter(|s| !s.is_empty()).map(String::from));
        out.push(path);
        return;
    };
    let mut path = prefix.to_vec();
    path.extend(
        tree[..open]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(String::from),
    );
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                use_paths(&path, &inner[start..i], out);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < inner.len() {
        use_paths(&path, &inner[start..], out);
    }
}

/// Every path the code names: `use` trees, and inline `a::b::c` paths.
fn named_paths(code: &str) -> Vec<Module> {
    let mut paths = Vec::new();
    for stmt in code.split(';') {
        let s = stmt.trim_start();
        let s = s
            .strip_prefix("pub(crate) ")
            .or_else(|| s.strip_prefix("pub(super) "))
            .or_else(|| s.strip_prefix("pub "))
            .unwrap_or(s);
        if let Some(tree) = s.strip_prefix("use ") {
            use_paths(&[], tree, &mut paths);
        }
    }
    let bytes = code.as_bytes();
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !is_word(bytes[i]) || (i > 0 && (is_word(bytes[i - 1]) || bytes[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let mut path = Vec::new();
        let mut j = i;
        loop {
            let start = j;
            while j < bytes.len() && is_word(bytes[j]) {
                j += 1;
            }
            path.push(code[start..j].to_string());
            if code[j..].starts_with("::") && bytes.get(j + 2).is_some_and(|b| is_word(*b)) {
                j += 2;
            } else {
                break;
            }
        }
        if path.len() > 1 {
            paths.push(path);
        }
        i = j.max(i + 1);
    }
    paths
}

/// The module `path` leads into, seen from module `from`, if it is one of the crate's.
fn target_of(
    from: &Module,
    path: &[String],
    modules: &BTreeMap<Module, PathBuf>,
) -> Option<Module> {
    let first = path.first()?;
    let (mut base, mut rest) = match first.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "super" | "self" => (from.clone(), path),
        // A child module's name, or no path into this crate.
        _ if modules.contains_key(&[from.as_slice(), &path[..1]].concat()) => (from.clone(), path),
        _ => return None,
    };
    while let Some(seg) = rest.first() {
        match seg.as_str() {
            "super" => {
                base.pop();
            }
            "self" => {}
            _ => break,
        }
        rest = &rest[1..];
    }
    for seg in rest {
        base.push(seg.clone());
        if !modules.contains_key(&base) {
            base.pop();
            break;
        }
    }
    modules.contains_key(&base).then_some(base)
}

fn is_test_module(m: &Module) -> bool {
    m.iter().any(|p| p == "tests")
}

/// The module graph of one crate's `src/`.
fn edges_of(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let modules = module_files(src);
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &modules {
        if is_test_module(module) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let out = edges.entry(module.clone()).or_default();
        for path in named_paths(&code_only(&text)) {
            let Some(target) = target_of(module, &path, &modules) else {
                continue;
            };
            let is_ancestor = module.starts_with(&target);
            if target != *module && !is_ancestor && !is_test_module(&target) {
                out.insert(target);
            }
        }
    }
    edges
}

/// The strongly connected components of more than one module (Tarjan).
fn loops(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<BTreeSet<Module>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        found: Vec<BTreeSet<Module>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a Module) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low[v];
                    self.low.insert(v, lv.min(lw));
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low[v];
                    self.low.insert(v, lv.min(iw));
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.insert(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

fn describe(krate: &str, component: &BTreeSet<Module>) -> String {
    let names: Vec<String> = component
        .iter()
        .map(|m| {
            if m.is_empty() {
                "lib".to_string()
            } else {
                m.join("::")
            }
        })
        .collect();
    format!("{krate}: {}", names.join(", "))
}

#[test]
fn no_new_import_loops_inside_a_crate() {
    let crates = workspace_root().join("crates");
    let mut found = BTreeSet::new();
    let mut names: Vec<_> = std::fs::read_dir(&crates)
        .expect("the workspace's crates folder")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(
        names.len() > 5,
        "found only {names:?} under {}",
        crates.display()
    );
    for krate in names {
        let src = crates.join(&krate).join("src");
        if src.is_dir() {
            for component in loops(&edges_of(&src)) {
                found.insert(describe(&krate, &component));
            }
        }
    }
    let known: BTreeSet<String> = KNOWN.iter().map(|s| s.to_string()).collect();
    let new: Vec<_> = found.difference(&known).collect();
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "import loops changed:\n new (break them): {new:#?}\n gone (remove from KNOWN): {gone:#?}"
    );
}

#[test]
fn a_loop_through_a_sibling_is_found_and_a_child_using_its_parent_is_not() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let src = dir.path();
    let write = |name: &str, text: &str| {
        let path = src.join(name);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write("lib.rs", "mod a;\nmod b;\nmod c;\n");
    write("a.rs", "mod inner;\nuse crate::b::B;\npub struct A;\n");
    write(
        "a/inner.rs",
        "use super::A;\npub fn f() -> crate::c::C { todo!() }\n",
    );
    write("b.rs", "pub struct B(crate::a::A);\n");
    write(
        "c.rs",
        "pub struct C;\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n",
    );
    let edges = edges_of(src);
    let found: Vec<String> = loops(&edges).iter().map(|c| describe("x", c)).collect();
    assert_eq!(found, vec!["x: a, b".to_string()]);
    // The child naming its parent is no edge; the test module's use is not read.
    let inner = vec!["a".to_string(), "inner".to_string()];
    assert_eq!(
        edges[&inner],
        BTreeSet::from([vec!["c".to_string()]]),
        "{edges:?}"
    );
    assert!(edges[&vec!["c".to_string()]].is_empty());
}
