//! The workspace's sources as the source checks read them ([`crate::source_limits`],
//! [`crate::module_cycles`]): where the workspace is, and every `.rs` file below a folder.

use std::fs;
use std::path::{Path, PathBuf};

/// The workspace's root (this crate is `crates/weft-testkit`).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file below `dir`, sorted, skipping folders named `target` (build output).
pub(crate) fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries =
            fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        for entry in entries {
            let entry = entry.unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
            let path = entry.path();
            let kind = entry
                .file_type()
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            if kind.is_dir() {
                if entry.file_name() != "target" {
                    dirs.push(path);
                }
            } else if kind.is_file() && path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}
