//! Atomic file writes: a complete new file renamed over the old one, so a reader, a Ctrl-C or a
//! crash sees the old file or the new one, never a mix.
//!
//! [`write_atomic`] is the durable write of the files a workflow declares (fsync, the mode of a
//! replaced file kept, identical contents left alone); [`replace`] is the quick one of the
//! engine's own state (records, kept documents, recordings), which leaves writing back to the
//! system.

use std::fs::{self, File, Permissions};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::hash::sha256_hex;

/// Replace `path` by a file that `fill` writes (buffered), renamed into place whole. The
/// temporary file is a sibling starting with `prefix`; the new file gets `mode` less the umask.
/// Nothing waits for the disk.
pub(crate) fn replace(
    path: &Path,
    prefix: &str,
    mode: u32,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    // `.<name>.sg<pid>.<random>.tmp`: a kill that strands it leaves a file the next run
    // knows for a stray ([`super::strays`]).
    let temp = tempfile::Builder::new()
        .prefix(&format!("{prefix}{}", super::strays::tag()))
        .suffix(".tmp")
        .permissions(Permissions::from_mode(mode))
        .tempfile_in(dir)?;
    let mut out = BufWriter::with_capacity(64 * 1024, temp);
    fill(&mut out)?;
    let temp = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    // On failure the temporary file is removed when the error drops it.
    temp.persist(path).map_err(|error| error.error)?;
    Ok(())
}

/// What [`write_atomic`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WriteOutcome {
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
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<WriteOutcome> {
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

/// The prefix of a temporary sibling of `name`: hidden, and recognisable as a leftover should a
/// crash strand it (it names this engine's pid, see [`super::strays`]).
pub(crate) fn temp_prefix(name: &std::ffi::OsStr) -> String {
    format!(".{}.{}", name.to_string_lossy(), super::strays::tag())
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
