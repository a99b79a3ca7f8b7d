//! The workspace's size limit on source files: no `.rs` file under `crates/` is over
//! [`MAX_LINES`] lines (vendored code is in `vendor/` and fuzz targets in `fuzz/`, both
//! outside `crates/`; build output folders named `target` are skipped). A file that grows
//! past it is split into modules named for what they hold.

use crate::source_tree::{rust_files, workspace_root};
use std::fs;

/// The most lines a source file may have.
const MAX_LINES: usize = 800;

#[test]
fn no_source_file_is_over_800_lines() {
    let root = workspace_root();
    let crates = root.join("crates");
    let files = rust_files(&crates);
    assert!(
        files.len() > 100,
        "only {} source files under {}: not the workspace's crates folder?",
        files.len(),
        crates.display()
    );
    let over: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let text = fs::read_to_string(path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            let lines = text.lines().count();
            let shown = path.strip_prefix(&root).unwrap_or(path).display();
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
