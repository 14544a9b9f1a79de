//! Where writes may go: the `[workflow] writes` roots, and atomic writes inside them.
//!
//! Every writing action asks [`WriteRoots::check`] for its target before it touches the disk. The
//! check resolves `..` lexically, then resolves symbolic links in the part of the path that exists,
//! so neither `root/../elsewhere` nor `root/link-to-elsewhere/file` can escape a root. The last
//! component of the target is deliberately left unresolved: no writing action follows a symbolic
//! link found there (a write or a move replaces the link, a remove removes the link itself), so a
//! link inside a root may be replaced or removed even when it points outside.

use std::fs::{self, File, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use super::BuiltinError;

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

    /// The real target of a write to `path`, when it lies inside one of the roots (a root itself
    /// counts as inside). The returned path has `..` resolved and the symbolic links of its
    /// existing ancestors resolved; writing actions operate on it, so what was checked is what is
    /// touched. An empty root list lets nothing through.
    pub fn check(&self, path: &Path) -> Result<PathBuf, BuiltinError> {
        let target = resolve_target(path).map_err(|err| {
            BuiltinError::new(format!("cannot resolve `{}`: {err}", path.display()))
        })?;
        for root in &self.roots {
            // A root that cannot be resolved (say, a dangling link) admits nothing.
            if let Ok(root) = resolve_existing(&lexical_absolute(root)) {
                if target.starts_with(&root) {
                    return Ok(target);
                }
            }
        }
        let listed = if self.roots.is_empty() {
            "the workflow declares no writes".to_string()
        } else {
            self.roots
                .iter()
                .map(|root| format!("`{}`", lexical_absolute(root).display()))
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
                out.push(component.as_os_str())
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

/// What [`write_atomic`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOutcome {
    /// SHA-256 hex of the bytes now at the path.
    pub sha256: String,
    /// False when the file already held exactly these bytes and was left alone.
    pub changed: bool,
}

/// Write `bytes` to `path` atomically: a temporary file in the same folder, fsync, then a rename
/// over the target, so a crash at any point leaves either the old file or the new one, never a
/// mix. Missing parent folders are created. A file that already holds exactly these bytes is not
/// rewritten (its mtime stays). A symbolic link at `path` is replaced, never followed. The caller
/// checks `path` against the write roots first.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<WriteOutcome> {
    let sha256 = sha256_hex(bytes);
    let existing = fs::symlink_metadata(path).ok();
    if let Some(meta) = &existing {
        if meta.is_file() && meta.len() == bytes.len() as u64 && file_equals(path, bytes)? {
            return Ok(WriteOutcome {
                sha256,
                changed: false,
            });
        }
    }
    let (parent, name) = split_parent(path)?;
    fs::create_dir_all(parent)?;
    // A new file gets the usual 0o666 less the umask; a replaced file keeps its mode.
    let mode = match &existing {
        Some(meta) if meta.is_file() => meta.permissions().mode() & 0o7777,
        _ => 0o666,
    };
    let mut temp = tempfile::Builder::new()
        .prefix(&temp_prefix(name))
        .suffix(".tmp")
        .permissions(Permissions::from_mode(mode))
        .tempfile_in(parent)?;
    if let Some(meta) = existing.as_ref().filter(|meta| meta.is_file()) {
        // The umask may have narrowed the mode given at creation.
        temp.as_file().set_permissions(meta.permissions())?;
    }
    temp.write_all(bytes)?;
    temp.as_file().sync_all()?;
    // On failure the temporary file is removed when the error drops it.
    temp.persist(path).map_err(|err| err.error)?;
    sync_dir(parent);
    Ok(WriteOutcome {
        sha256,
        changed: true,
    })
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// SHA-256 of a value's compact JSON (what `to_string` gives), hashed as it is written.
pub fn sha256_json(value: &impl serde::Serialize) -> String {
    let mut hasher = Sha256::new();
    // Writing JSON into a hasher cannot fail.
    let _ = serde_json::to_writer(&mut hasher, value);
    hex(&hasher.finalize())
}

pub(crate) fn hex(digest: &[u8]) -> String {
    // By table rather than `write!("{:02x}")`: a run hashes every stage's fingerprint and output,
    // and the formatting machinery cost as much as the hashing.
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(digest.len() * 2);
    for &byte in digest {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 0xf)] as char);
    }
    out
}

/// The prefix of a temporary sibling of `name`: hidden, and recognisable as a leftover should a
/// crash strand it.
pub(crate) fn temp_prefix(name: &std::ffi::OsStr) -> String {
    format!(".{}.", name.to_string_lossy())
}

pub(crate) fn split_parent(path: &Path) -> io::Result<(&Path, &std::ffi::OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path names no file",
        )),
    }
}

/// Make a rename durable. Best effort: some filesystems refuse to fsync a folder.
pub(crate) fn sync_dir(dir: &Path) {
    if let Ok(handle) = File::open(dir) {
        let _ = handle.sync_all();
    }
}

/// True when the file at `path` holds exactly `bytes`, compared in chunks.
fn file_equals(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    let mut file = File::open(path)?;
    let mut buffer = vec![0u8; 64 * 1024];
    let mut offset = 0;
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            return Ok(offset == bytes.len());
        }
        let end = offset + read;
        if end > bytes.len() || buffer[..read] != bytes[offset..end] {
            return Ok(false);
        }
        offset = end;
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;

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
