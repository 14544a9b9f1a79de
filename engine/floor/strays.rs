//! Temporary files a killed engine stranded.
//!
//! Every temporary sibling the engine writes before a rename ([`super::atomic`]) is named
//! `.<name>.sg<pid>.<random>.tmp`: hidden, and carrying the pid of the engine that writes it.
//! A kill -9 between its creation and its rename leaves it behind (a large output: tens of
//! megabytes). At the start of a run the engine removes those of its state folder and its write
//! roots whose engine is gone: the pid names no live process on this host and the file was last
//! written before this engine started. A file of any other name, or of a live engine, is left
//! alone.

use std::path::PathBuf;
use std::time::SystemTime;

/// The part of a temporary file's name that names its engine: `sg<pid>.`.
pub(crate) fn tag() -> String {
    format!("sg{}.", std::process::id())
}

/// The pid a temporary file's name says wrote it, when the name is one the engine gives:
/// `.<name>.sg<pid>.<6 letters or digits>.tmp`.
pub(crate) fn owner(file_name: &str) -> Option<u32> {
    let stem = file_name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (rest, random) = stem.rsplit_once('.')?;
    if random.len() != 6 || !random.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    let (_, pid) = rest.rsplit_once(".sg")?;
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Whether the process `pid` is gone (no process, or a zombie) on this host.
fn gone(pid: u32) -> bool {
    if pid == std::process::id() {
        return false;
    }
    let holder = super::holder::Holder {
        pid,
        started: 0,
        host: super::holder::hostname(),
    };
    holder.liveness() == super::holder::Liveness::Gone
}

/// The most entries one sweep looks at under a folder (a write root can be a large project).
const MOST_ENTRIES: usize = 200_000;

/// Remove the stranded temporary files under each of `folders` (see the module's rules);
/// returns those removed. Folders named `.git` are not entered.
pub(crate) fn sweep(folders: &[PathBuf], started: SystemTime) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    // A folder inside another is walked with it.
    let outermost = folders
        .iter()
        .filter(|f| !folders.iter().any(|o| o != *f && f.starts_with(o)));
    for folder in outermost {
        let walk = walkdir::WalkDir::new(folder)
            .follow_links(false)
            .into_iter()
            .filter_entry(|entry| entry.file_name() != ".git")
            .take(MOST_ENTRIES);
        for entry in walk.filter_map(Result::ok) {
            if !entry.file_type().is_file() {
                continue;
            }
            let Some(pid) = entry.file_name().to_str().and_then(owner) else {
                continue;
            };
            let old = entry
                .metadata()
                .ok()
                .and_then(|meta| meta.modified().ok())
                .is_some_and(|modified| modified < started);
            if old && gone(pid) && std::fs::remove_file(entry.path()).is_ok() {
                removed.push(entry.path().to_path_buf());
            }
        }
    }
    removed
}

/// When this process started, as the file system's clock reads it (now, less its age).
pub(crate) fn process_started() -> SystemTime {
    static STARTED: std::sync::OnceLock<SystemTime> = std::sync::OnceLock::new();
    *STARTED.get_or_init(SystemTime::now)
}

/// [`sweep`] on a thread of its own, so a run does not wait for a walk of its write roots; the
/// run joins it before it ends.
pub(crate) fn sweep_in_background(
    folders: Vec<PathBuf>,
) -> Option<std::thread::JoinHandle<Vec<PathBuf>>> {
    let started = process_started();
    std::thread::Builder::new()
        .name("strays".into())
        .spawn(move || sweep(&folders, started))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_files_of_engines_that_are_gone_are_removed() {
        assert_eq!(owner(".out.json.sg4242.aB3dE9.tmp"), Some(4242));
        assert_eq!(owner(".plan.sg7.ZZZZZZ.tmp"), Some(7));
        // The names the engine gives its temporary files.
        let given = super::super::atomic::temp_prefix(std::ffi::OsStr::new("big.json"));
        assert_eq!(
            owner(&format!("{given}x1Y2z3.tmp")),
            Some(std::process::id())
        );
        for other in [
            "out.json.sg4242.aB3dE9.tmp",
            ".out.json.aB3dE9.tmp",
            ".out.json.sg.aB3dE9.tmp",
            ".out.json.sg12x.aB3dE9.tmp",
            ".out.json.sg12.aB3dE.tmp",
            ".out.json.sg12.aB3dE9.tmpx",
            ".out.json.sg12.aB-dE9.tmp",
        ] {
            assert_eq!(owner(other), None, "{other}");
        }
        let dir = tempfile::tempdir().unwrap();
        // A pid no process has: the child of a process that has been reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        let stranded = dir.path().join(format!("a/b/.big.sg{dead}.q1w2e3.tmp"));
        let live = dir
            .path()
            .join(format!("a/.big.sg{}.q1w2e3.tmp", std::process::id()));
        let unnamed = dir.path().join("a/.big.q1w2e3.tmp");
        let in_git = dir.path().join(format!(".git/.x.sg{dead}.q1w2e3.tmp"));
        for path in [&stranded, &live, &unnamed, &in_git] {
            std::fs::write(path, "x").unwrap();
        }
        // Written after this sweep's engine started: left alone, whoever wrote it.
        let before = SystemTime::now() - std::time::Duration::from_secs(3600);
        assert!(sweep(&[dir.path().to_path_buf()], before).is_empty());
        let later = SystemTime::now() + std::time::Duration::from_secs(3600);
        let removed = sweep(&[dir.path().to_path_buf()], later);
        assert_eq!(removed, vec![stranded.clone()]);
        assert!(!stranded.exists() && live.exists() && unnamed.exists() && in_git.exists());
    }
}
