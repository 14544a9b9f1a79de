//! The project root: the one folder that anchors the configuration, the search path's project
//! libraries and the state folder, found from the working directory as git finds its
//! repository.
//!
//! The root is the nearest folder, from the working directory upward, that holds
//! `stagegraph.toml` or a `.stagegraph/` folder; the walk does not go above the root of the
//! git repository it starts in (a folder holding `.git`), which is the root when nothing
//! nearer marks one. Outside any repository and any marked folder, the working directory is
//! the root. A command run anywhere below the root behaves as it would at the root, except for
//! the paths given on its command line, which stay relative to the working directory.

use std::path::{Path, PathBuf};

/// The file that marks a project root and configures its models.
pub(crate) const CONFIG_FILE: &str = "stagegraph.toml";

/// The state folder's name, at the project root.
pub(crate) const STATE_FOLDER: &str = ".stagegraph";

/// How the project root was recognized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootMarker {
    /// It holds `stagegraph.toml`.
    Config,
    /// It holds `.stagegraph/`.
    StateFolder,
    /// It is the root of the git repository (it holds `.git`).
    Repository,
    /// Nothing marks a root: the working directory.
    WorkingDirectory,
}

impl RootMarker {
    /// How it reads in messages and logs.
    pub fn describe(self) -> &'static str {
        match self {
            RootMarker::Config => "holds stagegraph.toml",
            RootMarker::StateFolder => "holds .stagegraph/",
            RootMarker::Repository => "the git repository root",
            RootMarker::WorkingDirectory => "the working directory (no project marker above it)",
        }
    }
}

/// A project: its root and what marked it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    /// The root folder (absolute when the working directory is).
    pub root: PathBuf,
    /// Why this folder.
    pub marker: RootMarker,
}

impl Project {
    /// The project `cwd` is in.
    pub fn find(cwd: &Path) -> Project {
        for dir in cwd.ancestors() {
            if dir.join(CONFIG_FILE).is_file() {
                return Project::at(dir, RootMarker::Config);
            }
            if dir.join(STATE_FOLDER).is_dir() {
                return Project::at(dir, RootMarker::StateFolder);
            }
            // `.git` is a folder in a clone and a file in a worktree or a submodule.
            if dir.join(".git").exists() {
                return Project::at(dir, RootMarker::Repository);
            }
        }
        Project::at(cwd, RootMarker::WorkingDirectory)
    }

    fn at(dir: &Path, marker: RootMarker) -> Project {
        Project {
            root: dir.to_path_buf(),
            marker,
        }
    }

    /// The default state folder: `.stagegraph/` at the root.
    pub fn state_dir(&self) -> PathBuf {
        self.root.join(STATE_FOLDER)
    }
}

/// What `.stagegraph/.gitignore` holds: the runs, the cache and the state are the machine's;
/// ejected workflows, templates, schemas and overlays are the project's, to commit.
pub(crate) const STATE_GITIGNORE: &str = "\
# Written by stagegraph when it made this folder. Run records (they may hold model
# conversations), the cache and the state are this machine's; workflows/, templates/ and
# schemas/ (ejected workflows, overlays) are the project's, to commit.
/runs/
/cache/
/state/
/locks/
*.lock
*.tmp
";

/// Make the state folder `dir` if it does not exist yet, with its `.gitignore`; an existing
/// folder is left as it is (a `.gitignore` removed on purpose stays removed).
pub(crate) fn ensure_state_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    crate::floor::atomic::write_atomic(&dir.join(".gitignore"), STATE_GITIGNORE.as_bytes())
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_marker_wins_and_a_repository_bounds_the_walk() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path();
        let sub = top.join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        assert_eq!(Project::find(&sub).marker, RootMarker::WorkingDirectory);
        assert_eq!(Project::find(&sub).root, sub);

        std::fs::create_dir(top.join(".git")).unwrap();
        assert_eq!(
            Project::find(&sub),
            Project::at(top, RootMarker::Repository)
        );

        std::fs::write(top.join("a/stagegraph.toml"), "").unwrap();
        assert_eq!(
            Project::find(&sub),
            Project::at(&top.join("a"), RootMarker::Config)
        );

        std::fs::create_dir(sub.join(".stagegraph")).unwrap();
        assert_eq!(
            Project::find(&sub),
            Project::at(&sub, RootMarker::StateFolder)
        );
    }

    #[test]
    fn a_marker_above_the_repository_root_is_not_reached() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::write(dir.path().join("stagegraph.toml"), "").unwrap();
        std::fs::write(repo.join(".git"), "gitdir: elsewhere\n").unwrap();
        assert_eq!(
            Project::find(&repo.join("src")),
            Project::at(&repo, RootMarker::Repository)
        );
    }

    #[test]
    fn a_new_state_folder_gets_its_gitignore_and_an_old_one_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join(".stagegraph");
        ensure_state_dir(&state).unwrap();
        let ignore = std::fs::read_to_string(state.join(".gitignore")).unwrap();
        let patterns: Vec<&str> = ignore.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(patterns.contains(&"/runs/") && patterns.contains(&"/cache/"));
        assert!(!patterns
            .iter()
            .any(|p| p.contains("workflows") || p.contains("templates")));
        std::fs::remove_file(state.join(".gitignore")).unwrap();
        ensure_state_dir(&state).unwrap();
        assert!(!state.join(".gitignore").exists());
    }
}
