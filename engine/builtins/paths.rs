//! Where writes may go: the `[workflow] writes` roots, and atomic writes inside them.
//!
//! Every writing action asks [`WriteRoots::check`] for its target before it touches the disk. The
//! check resolves `..` lexically, then resolves symbolic links in the part of the path that exists,
//! so neither `root/../elsewhere` nor `root/link-to-elsewhere/file` can escape a root. The last
//! component of the target is deliberately left unresolved: no writing action follows a symbolic
//! link found there (a write or a move replaces the link, a remove removes the link itself), so a
//! link inside a root may be replaced or removed even when it points outside.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, RwLock};

use super::BuiltinError;

/// The folders that writing actions may touch, resolved to absolute paths.
#[derive(Debug, Clone, Default)]
pub(crate) struct WriteRoots {
    roots: Vec<PathBuf>,
    /// Roots that read a stage's output, known once that stage has finished (shared with the
    /// run that resolves them).
    late: Option<Arc<LateRoots>>,
}

/// The `[workflow] writes` entries that read stages' outputs. Each is unknown, and admits
/// nothing, until every stage it reads has finished; then it is rendered once and admits its
/// folder like any other root. `check` proves that every stage that writes runs after those
/// stages, so no write ever races the root it needs.
#[derive(Debug, Default)]
pub(crate) struct LateRoots {
    slots: RwLock<Vec<LateRoot>>,
}

/// One late root: which `writes` entry, the stages it waits for, and what is known of it.
#[derive(Debug, Clone)]
pub(crate) struct LateRoot {
    /// Its position in `[workflow] writes`.
    pub entry: usize,
    /// The stages it reads (indexes into the workflow's stages) and their ids.
    pub stages: Vec<(usize, String)>,
    pub state: LateState,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LateState {
    /// Some stage it reads has not finished.
    Waiting,
    Resolved(PathBuf),
    /// It admits nothing in this run, and why.
    Unresolved(String),
}

impl LateRoots {
    pub(crate) fn new(slots: Vec<LateRoot>) -> Self {
        LateRoots {
            slots: RwLock::new(slots),
        }
    }

    /// The roots still waiting.
    pub(crate) fn waiting(&self) -> Vec<(usize, LateRoot)> {
        self.read()
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.state == LateState::Waiting)
            .map(|(i, slot)| (i, slot.clone()))
            .collect()
    }

    pub(crate) fn settle(&self, slot: usize, state: LateState) {
        let mut slots = self
            .slots
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(slot) = slots.get_mut(slot) {
            slot.state = state;
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<LateRoot>> {
        self.slots
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl WriteRoots {
    /// Roots given relative to `cwd` are resolved against it.
    pub(crate) fn new(cwd: &Path, roots: &[String]) -> Self {
        WriteRoots {
            roots: roots.iter().map(|root| cwd.join(root)).collect(),
            late: None,
        }
    }

    /// With roots that are known only once the stages they read have finished.
    #[must_use]
    pub(crate) fn with_late(mut self, late: Arc<LateRoots>) -> Self {
        self.late = Some(late);
        self
    }

    pub(crate) fn late(&self) -> Option<&Arc<LateRoots>> {
        self.late.as_ref()
    }

    /// The roots known now: the fixed ones, then the late ones already resolved.
    pub(crate) fn roots(&self) -> Vec<PathBuf> {
        let mut roots = self.roots.clone();
        if let Some(late) = &self.late {
            roots.extend(late.read().iter().filter_map(|slot| match &slot.state {
                LateState::Resolved(path) => Some(path.clone()),
                _ => None,
            }));
        }
        roots
    }

    /// The late roots that admit nothing (yet), said for a refused write.
    fn unknown(&self) -> Vec<String> {
        let Some(late) = &self.late else {
            return Vec::new();
        };
        late.read()
            .iter()
            .filter_map(|slot| {
                let ids = slot
                    .stages
                    .iter()
                    .map(|(_, id)| format!("`{id}`"))
                    .collect::<Vec<_>>()
                    .join(", ");
                match &slot.state {
                    LateState::Resolved(_) => None,
                    LateState::Waiting => Some(format!(
                        "`writes` entry {} waits for stage {ids}",
                        slot.entry
                    )),
                    LateState::Unresolved(why) => Some(format!(
                        "`writes` entry {} admits nothing: {why}",
                        slot.entry
                    )),
                }
            })
            .collect()
    }

    /// The real target of a write to `path`, when it lies inside one of the roots (a root itself
    /// counts as inside). The returned path has `..` resolved and the symbolic links of its
    /// existing ancestors resolved; writing actions operate on it, so what was checked is what is
    /// touched. An empty root list lets nothing through.
    pub(crate) fn check(&self, path: &Path) -> Result<PathBuf, BuiltinError> {
        let target = resolve_target(path).map_err(|err| {
            BuiltinError::new(format!("cannot resolve `{}`: {err}", path.display()))
        })?;
        let roots = self.roots();
        for root in &roots {
            let lexical = lexical_absolute(root);
            // A root that cannot be resolved (say, a dangling link) admits nothing beneath it.
            if let Ok(real) = resolve_existing(&lexical) {
                if target.starts_with(&real) {
                    return Ok(target);
                }
            }
            // A root that is a symbolic link admits the link itself too, so that it can be
            // replaced or removed (neither follows it).
            if resolve_target(&lexical).is_ok_and(|itself| itself == target) {
                return Ok(target);
            }
        }
        let unknown = self.unknown();
        let listed = if roots.is_empty() && unknown.is_empty() {
            "the workflow declares no writes".to_string()
        } else {
            roots
                .iter()
                .map(|root| format!("`{}`", lexical_absolute(root).display()))
                .chain(unknown)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let shown = lexical_absolute(path);
        if shown == target {
            Err(BuiltinError::new(format!(
                "path `{}` is outside the workflow's writes ({listed})",
                path.display()
            )))
        } else {
            Err(BuiltinError::new(format!(
                "path `{}` resolves to `{}`, outside the workflow's writes ({listed})",
                path.display(),
                target.display()
            )))
        }
    }
}

/// `path` made absolute against the process's working directory, with `.` and `..` resolved
/// without touching the disk. `..` at the root stays at the root.
pub(crate) fn lexical_absolute(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::Prefix(_) | Component::RootDir | Component::Normal(_) => {
                out.push(component.as_os_str());
            }
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
        }
    }
    out
}

/// A write target: its parent resolved through [`resolve_existing`], its last component kept as
/// written.
fn resolve_target(path: &Path) -> io::Result<PathBuf> {
    let absolute = lexical_absolute(path);
    match (absolute.parent(), absolute.file_name()) {
        (Some(parent), Some(name)) => Ok(resolve_existing(parent)?.join(name)),
        // The filesystem root itself.
        _ => Ok(absolute),
    }
}

/// An absolute, lexically clean path with the symbolic links of its longest existing ancestor
/// resolved; the components below that ancestor do not exist yet, so they hold no links.
fn resolve_existing(absolute: &Path) -> io::Result<PathBuf> {
    let mut existing = absolute;
    let mut missing = Vec::new();
    loop {
        match fs::symlink_metadata(existing) {
            Ok(_) => break,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                    return Err(err);
                };
                missing.push(name);
                existing = parent;
            }
            Err(err) => return Err(err),
        }
    }
    // Fails on a dangling link, which is right: where it would lead cannot be checked.
    let mut resolved = fs::canonicalize(existing)?;
    resolved.extend(missing.iter().rev());
    Ok(resolved)
}

pub(crate) use crate::floor::atomic::{split_parent, sync_dir, temp_prefix};
pub(crate) use crate::floor::atomic::{write_atomic, WriteOutcome};
pub(crate) use crate::floor::hash::hex;
pub(crate) use crate::floor::hash::sha256_hex;

#[cfg(test)]
mod tests {
    use std::fs;
    use std::fs::Permissions;
    use std::os::unix::fs::{symlink, PermissionsExt};

    use super::*;

    fn sandbox() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let base = fs::canonicalize(dir.path()).expect("canonical");
        (dir, base)
    }

    #[test]
    fn lexical_absolute_resolves_dots_without_the_disk() {
        assert_eq!(
            lexical_absolute(Path::new("/a/b/../c/./d")),
            PathBuf::from("/a/c/d")
        );
        assert_eq!(lexical_absolute(Path::new("/../x")), PathBuf::from("/x"));
    }

    #[test]
    fn check_admits_paths_inside_a_root_even_before_they_exist() {
        let (_dir, base) = sandbox();
        let roots = WriteRoots::new(&base, &["out".to_string(), "other".to_string()]);
        let inside = roots.check(&base.join("out/new/deep/file.txt"));
        assert_eq!(inside, Ok(base.join("out/new/deep/file.txt")));
        assert_eq!(roots.check(&base.join("out")), Ok(base.join("out")));
        assert_eq!(
            roots.check(&base.join("other/../out/x")),
            Ok(base.join("out/x"))
        );
        let err = roots.check(&base.join("out/../x")).expect_err("escape");
        assert!(err.0.contains("outside the workflow's writes"), "{err}");
        assert!(err.0.contains("other`"), "lists every root: {err}");
        // A sibling whose name merely starts like the root is not inside it.
        roots.check(&base.join("outer/x")).expect_err("prefix");
    }

    #[test]
    fn check_resolves_links_in_the_ancestors_but_not_the_last_component() {
        let (_dir, base) = sandbox();
        fs::create_dir_all(base.join("out")).expect("out");
        fs::create_dir_all(base.join("elsewhere")).expect("elsewhere");
        symlink(base.join("elsewhere"), base.join("out/link")).expect("symlink");
        let roots = WriteRoots::new(&base, &["out".to_string()]);
        let err = roots.check(&base.join("out/link/x")).expect_err("escape");
        assert!(err.0.contains("elsewhere"), "{err}");
        // The link itself may be replaced or removed: that does not touch its target.
        assert_eq!(
            roots.check(&base.join("out/link")),
            Ok(base.join("out/link"))
        );
    }

    #[test]
    fn a_root_that_is_a_link_admits_the_link_itself_and_nothing_beside_it() {
        let (_dir, base) = sandbox();
        fs::create_dir_all(base.join("real")).expect("real");
        fs::create_dir_all(base.join("skills")).expect("skills");
        symlink(base.join("real"), base.join("skills/x.proposed")).expect("symlink");
        let roots = WriteRoots::new(&base, &["skills/x.proposed".to_string()]);
        assert_eq!(
            roots.check(&base.join("skills/x.proposed")),
            Ok(base.join("skills/x.proposed"))
        );
        assert_eq!(
            roots.check(&base.join("skills/x.proposed/f")),
            Ok(base.join("real/f"))
        );
        roots
            .check(&base.join("skills/other"))
            .expect_err("a sibling of the link");
    }

    #[test]
    fn a_root_reached_through_a_link_admits_its_real_folder() {
        let (_dir, base) = sandbox();
        fs::create_dir_all(base.join("real")).expect("real");
        symlink(base.join("real"), base.join("alias")).expect("symlink");
        let roots = WriteRoots::new(&base, &["alias".to_string()]);
        assert_eq!(roots.check(&base.join("alias/x")), Ok(base.join("real/x")));
        assert_eq!(roots.check(&base.join("real/y")), Ok(base.join("real/y")));
    }

    #[test]
    fn write_atomic_writes_skips_identical_and_leaves_no_temp_files() {
        let (_dir, base) = sandbox();
        let path = base.join("a/b/c.txt");
        let first = write_atomic(&path, b"data").expect("write");
        assert_eq!(
            first,
            WriteOutcome {
                sha256: sha256_hex(b"data"),
                changed: true
            }
        );
        assert!(!write_atomic(&path, b"data").expect("again").changed);
        assert!(write_atomic(&path, b"dat").expect("shorter").changed);
        assert_eq!(fs::read(&path).expect("read"), b"dat");
        let names: Vec<_> = fs::read_dir(base.join("a/b"))
            .expect("list")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["c.txt"]);
    }

    #[test]
    fn a_new_file_gets_the_usual_mode_not_the_temp_file_one() {
        let (_dir, base) = sandbox();
        fs::write(base.join("plain"), "x").expect("write");
        write_atomic(&base.join("atomic"), b"x").expect("write");
        let mode = |name: &str| {
            fs::metadata(base.join(name))
                .expect("meta")
                .permissions()
                .mode()
        };
        assert_eq!(mode("atomic"), mode("plain"));
    }

    #[test]
    fn write_atomic_keeps_the_mode_of_a_replaced_file() {
        let (_dir, base) = sandbox();
        let path = base.join("script.sh");
        fs::write(&path, "old").expect("write");
        fs::set_permissions(&path, Permissions::from_mode(0o750)).expect("chmod");
        write_atomic(&path, b"new").expect("write");
        let mode = fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o750);
    }

    #[test]
    fn a_failed_rename_leaves_the_old_entry_and_no_temp_file() {
        let (_dir, base) = sandbox();
        // A non-empty folder cannot be renamed over, so the last step fails.
        let path = base.join("busy");
        fs::create_dir_all(path.join("inner")).expect("dir");
        write_atomic(&path, b"data").expect_err("rename over a folder");
        assert!(path.join("inner").is_dir());
        let names: Vec<_> = fs::read_dir(&base)
            .expect("list")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["busy"]);
    }

    #[test]
    fn write_atomic_replaces_a_link_instead_of_following_it() {
        let (_dir, base) = sandbox();
        fs::write(base.join("target"), "keep").expect("target");
        symlink(base.join("target"), base.join("link")).expect("symlink");
        write_atomic(&base.join("link"), b"new").expect("write");
        assert_eq!(fs::read(base.join("target")).expect("read"), b"keep");
        assert!(!fs::symlink_metadata(base.join("link"))
            .expect("meta")
            .is_symlink());
    }

    #[test]
    fn sha256_hex_matches_a_known_digest() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
