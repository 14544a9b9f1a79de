//! Where writes may go: the `[workflow] writes` roots, and atomic writes inside them.

use std::path::{Path, PathBuf};

/// The folders that writing actions may touch, resolved to absolute paths.
#[derive(Debug, Clone, Default)]
pub struct WriteRoots {
    roots: Vec<PathBuf>,
}

impl WriteRoots {
    /// Roots given relative to `cwd` are resolved against it.
    pub fn new(cwd: &Path, roots: &[String]) -> Self {
        WriteRoots {
            roots: roots.iter().map(|root| cwd.join(root)).collect(),
        }
    }

    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }
}
