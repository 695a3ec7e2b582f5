//! The kubeconfig corpus (`tests/corpus/kubeconfigs`), shared by the resolution and
//! differential tests.

use std::fs;
use std::path::{Path, PathBuf};

/// The corpus directory.
pub fn corpus() -> PathBuf {
    crate::root().join("tests/corpus/kubeconfigs")
}

/// Every file under `dir`, recursively and sorted, following no symlinks (the corpus has
/// none).
pub fn corpus_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).expect("read the corpus") {
        let path = entry.expect("corpus entry").path();
        if path.is_dir() {
            files.extend(corpus_files(&path));
        } else {
            files.push(path);
        }
    }
    files.sort();
    files
}
