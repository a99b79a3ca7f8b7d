//! The workspace's size limit on source files: no `.rs` file under `crates/` is over
//! [`MAX_LINES`] lines (vendored code is in `vendor/` and fuzz targets in `fuzz/`, both
//! outside `crates/`; build output folders named `target` are skipped). A file that grows
//! past it is split into modules named for what they hold.
//!
//! It lives in this crate because this crate has no dependencies: `cargo test -p
//! weft-durable` builds almost nothing before running it. It reads the sources, not this
//! crate, so it could live anywhere in the workspace.

use std::fs;
use std::path::{Path, PathBuf};

/// The most lines a source file may have.
const MAX_LINES: usize = 800;

/// Every `.rs` file below `dir`, skipping folders named `target` (build output).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let entry = entry.unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        let path = entry.path();
        let kind = entry
            .file_type()
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        if kind.is_dir() {
            if entry.file_name() != "target" {
                rust_files(&path, out);
            }
        } else if kind.is_file() && path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_source_file_is_over_800_lines() {
    // This crate is `crates/weft-durable`: the workspace root is two folders up.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap_or_else(|| panic!("no workspace root above {}", env!("CARGO_MANIFEST_DIR")));
    let crates = root.join("crates");
    let mut files = Vec::new();
    rust_files(&crates, &mut files);
    assert!(
        files.len() > 100,
        "only {} source files under {}: not the workspace's crates folder?",
        files.len(),
        crates.display()
    );
    files.sort();
    let over: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let text = fs::read_to_string(path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            let lines = text.lines().count();
            let shown = path.strip_prefix(root).unwrap_or(path).display();
            (lines > MAX_LINES).then(|| format!("{shown}: {lines} lines"))
        })
        .collect();
    assert!(
        over.is_empty(),
        "source files over {MAX_LINES} lines (split them into modules named for what they \
         hold):\n{}",
        over.join("\n")
    );
}
