//! `eject`: copy a workflow with its templates and schemas into the project's `.stagegraph/`
//! library, to own it. Nothing is overwritten.

use std::path::{Path, PathBuf};

use super::Engine;
use crate::library::Shelf;

/// Why an eject wrote nothing, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum EjectError {
    /// No workflow of that name (the message names the nearest).
    #[error("{0}")]
    NotFound(String),
    /// The workflow already lives in the project: a copy in `.stagegraph/` would hide it.
    #[error("`{name}` is already this project's: {path}")]
    AlreadyOwned {
        /// The workflow's name.
        name: String,
        /// Its file, relative to the project root.
        path: String,
    },
    /// Files that would be overwritten; nothing was written.
    #[error("refusing to overwrite existing files: {}", .0.join(", "))]
    Exists(Vec<String>),
    /// A file could not be written (those before it were).
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl Engine {
    /// Copy workflow `name`, its test file with its recordings (`<name>.test.toml`,
    /// `recordings/<name>/`) and the templates and schemas of its library under `<name>/`, into
    /// the project's `.stagegraph/` (at its root), telling `wrote` each file written.
    pub fn eject(&self, name: &str, mut wrote: impl FnMut(&Path)) -> Result<(), EjectError> {
        let found = self
            .search
            .find_workflow(name, &self.cwd)
            .ok_or_else(|| EjectError::NotFound(self.no_workflow(name)))?;
        // A workflow of the project's own libraries (`.stagegraph/`, the root): a copy would
        // come first on the search path and hide it, and edits to the file the user owns would
        // then change nothing.
        if matches!(found.library.origin, "project" | "root") {
            let path = &found.source.path;
            return Err(EjectError::AlreadyOwned {
                name: name.to_string(),
                path: path
                    .strip_prefix(&self.project.root)
                    .unwrap_or(path)
                    .display()
                    .to_string(),
            });
        }
        let target = self.project.state_dir();
        let library = found.library.clone();
        let mut copies: Vec<(PathBuf, String)> = vec![(
            target.join("workflows").join(format!("{name}.toml")),
            found.source.text.to_string(),
        )];
        // Its tests and their recordings, beside it: `<name>.test.toml` runs against the copy.
        let tests = format!("{name}{}", crate::testing::TEST_SUFFIX);
        if let Some(source) = library.read(Shelf::Workflows, &tests) {
            copies.push((
                target.join("workflows").join(&tests),
                source.text.to_string(),
            ));
            for relative in library.files(Shelf::Workflows, &format!("recordings/{name}/")) {
                if let Some(source) = library.read(Shelf::Workflows, &relative) {
                    copies.push((
                        target.join("workflows").join(&relative),
                        source.text.to_string(),
                    ));
                }
            }
        }
        for shelf in [Shelf::Templates, Shelf::Schemas] {
            for relative in library.files(shelf, &format!("{name}/")) {
                if let Some(source) = library.read(shelf, &relative) {
                    copies.push((
                        target.join(shelf.folder()).join(&relative),
                        source.text.to_string(),
                    ));
                }
            }
        }
        let existing: Vec<String> = copies
            .iter()
            .filter(|(p, _)| p.exists())
            .map(|(p, _)| p.display().to_string())
            .collect();
        if !existing.is_empty() {
            return Err(EjectError::Exists(existing));
        }
        crate::project::ensure_state_dir(&target).map_err(|source| EjectError::Write {
            path: target.clone(),
            source,
        })?;
        for (path, text) in &copies {
            write_new(path, text).map_err(|source| EjectError::Write {
                path: path.clone(),
                source,
            })?;
            wrote(path);
        }
        Ok(())
    }
}

fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text)
}
