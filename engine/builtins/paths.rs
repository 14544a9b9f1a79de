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

impl WriteRoots {
    /// The absolute target if it lies inside a root.
    pub fn check(&self, path: &Path) -> Result<PathBuf, super::BuiltinError> {
        if self.roots.iter().any(|root| path.starts_with(root)) {
            Ok(path.to_path_buf())
        } else {
            Err(super::BuiltinError::new(format!(
                "path `{}` is outside the workflow's writes",
                path.display()
            )))
        }
    }
}

/// What an atomic write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOutcome {
    pub sha256: String,
    pub changed: bool,
}

/// Write through a temp file and a rename; identical bytes are not rewritten.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<WriteOutcome> {
    let sha256 = crate::schema::sha256_hex(bytes);
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(WriteOutcome { sha256, changed: false });
    }
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    let mut temp = tempfile::NamedTempFile::new_in(parent)?;
    std::io::Write::write_all(&mut temp, bytes)?;
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|e| e.error)?;
    Ok(WriteOutcome { sha256, changed: true })
}
