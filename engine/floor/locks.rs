//! `mkdir` locks: the workflow's `[workflow] lock`, held for the whole run, and the
//! `lock.acquire` built-in, held from its stage to the end of the run.
//!
//! `mkdir` is atomic on every POSIX file system, so two runs can never both create a lock.
//! The lock folder holds `owner.json`: the holder (pid, start time, host) and a random token.
//! While the lock is held a heartbeat thread rewrites it, so its modification time says the
//! holder is still there. A lock is stale only when its holder is gone (a process on this
//! host that no longer exists) or its heartbeat is older than `stale_after`; a live holder
//! whose lock is older than `stale_after` keeps it. A stale lock is taken over by renaming it
//! aside (one taker wins the rename) and checking that what was renamed is the lock judged
//! stale. A release removes the folder only while its token is still the holder's own, so a
//! run that lost its lock never removes the next holder's.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::holder::{self, Holder, Liveness};

/// The heartbeat of a lock held with no `stale_after` of its own.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// How long a lock folder without a readable `owner.json` (being created, or left by a
/// crash between `mkdir` and the write) is given before it counts as stale.
const UNOWNED_GRACE: Duration = Duration::from_secs(5);

/// What `owner.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Owner {
    #[serde(flatten)]
    pub holder: Holder,
    pub token: String,
    pub since: String,
}

/// A held lock; released (the folder removed, if still ours) when dropped.
#[derive(Debug)]
pub(crate) struct DirLock {
    path: PathBuf,
    token: String,
    /// Dropping it stops the heartbeat.
    heartbeat: Option<(mpsc::Sender<()>, std::thread::JoinHandle<()>)>,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.heartbeat.take() {
            drop(stop);
            let _ = thread.join();
        }
        if read_owner(&self.path).is_some_and(|owner| owner.token == self.token) {
            remove_lock(&self.path);
        }
    }
}

/// The result of one attempt.
#[derive(Debug)]
pub(crate) enum Attempt {
    Acquired {
        lock: DirLock,
        took_over_stale: bool,
    },
    /// Another holder has it, and it is not stale.
    Busy,
}

fn owner_path(lock: &Path) -> PathBuf {
    lock.join("owner.json")
}

fn read_owner(lock: &Path) -> Option<Owner> {
    let text = std::fs::read_to_string(owner_path(lock)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Writes `owner.json` whole (a temporary file renamed over it), which also refreshes its
/// modification time: the heartbeat.
fn write_owner(lock: &Path, owner: &Owner) -> std::io::Result<()> {
    let mut temp = tempfile::Builder::new()
        .prefix(".owner.")
        .tempfile_in(lock)?;
    // One write: through the file itself, serde_json makes a system call a token.
    let json = serde_json::to_vec(owner).map_err(std::io::Error::other)?;
    std::io::Write::write_all(&mut temp, &json)?;
    temp.persist(owner_path(lock)).map_err(|e| e.error)?;
    Ok(())
}

/// How long ago a file or folder was last modified.
fn age_of(path: &Path) -> Option<Duration> {
    let modified = std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()?;
    Some(
        SystemTime::now()
            .duration_since(modified)
            .unwrap_or(Duration::ZERO),
    )
}

/// Whether the lock at `path` may be taken over, and the token it holds (to check that what a
/// takeover renames aside is the lock judged stale).
fn judge(path: &Path, stale_after: Option<Duration>) -> (bool, Option<String>) {
    let older = |age: Option<Duration>, limit: Duration| age.is_some_and(|age| age > limit);
    match read_owner(path) {
        Some(owner) => {
            let heartbeat = age_of(&owner_path(path));
            let stale = match owner.holder.liveness() {
                Liveness::Gone => true,
                Liveness::Alive | Liveness::Unknown => {
                    stale_after.is_some_and(|limit| older(heartbeat, limit))
                }
            };
            (stale, Some(owner.token))
        }
        None => {
            let age = age_of(path);
            let limit = stale_after.unwrap_or(UNOWNED_GRACE).max(UNOWNED_GRACE);
            (older(age, limit), None)
        }
    }
}

/// Removes a lock folder: renamed aside first, so a folder being removed is never mistaken for
/// the lock.
fn remove_lock(path: &Path) {
    let aside = path.with_extension(format!("released-{}", holder::token()));
    if std::fs::rename(path, &aside).is_ok() {
        let _ = std::fs::remove_dir_all(&aside);
    }
}

/// Try once to take the lock; a stale one (see the module docs) is taken over.
pub(crate) fn try_acquire(path: &Path, stale_after: Option<Duration>) -> std::io::Result<Attempt> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut took_over_stale = false;
    for _ in 0..2 {
        match std::fs::create_dir(path) {
            Ok(()) => {
                let token = holder::token();
                let owner = Owner {
                    holder: Holder::current(),
                    token: token.clone(),
                    since: super::time::now_rfc3339(),
                };
                if let Err(error) = write_owner(path, &owner) {
                    let _ = std::fs::remove_dir_all(path);
                    return Err(error);
                }
                let heartbeat = start_heartbeat(path, owner, stale_after);
                return Ok(Attempt::Acquired {
                    lock: DirLock {
                        path: path.to_path_buf(),
                        token,
                        heartbeat,
                    },
                    took_over_stale,
                });
            }
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                let (stale, token) = judge(path, stale_after);
                if !stale || took_over_stale {
                    return Ok(Attempt::Busy);
                }
                // Rename the stale lock aside; of several takers one wins. What was renamed
                // must be the lock judged stale: if a new holder got in between, put it back.
                let aside = path.with_extension(format!("stale-{}", holder::token()));
                if std::fs::rename(path, &aside).is_err() {
                    return Ok(Attempt::Busy);
                }
                let renamed = read_owner(&aside).map(|owner| owner.token);
                if renamed != token {
                    let _ = std::fs::rename(&aside, path);
                    return Ok(Attempt::Busy);
                }
                let _ = std::fs::remove_dir_all(&aside);
                took_over_stale = true;
            }
            Err(error) => return Err(error),
        }
    }
    Ok(Attempt::Busy)
}

/// Rewrites `owner.json` every quarter of `stale_after` (or every [`HEARTBEAT`]) while the
/// lock is ours, until the returned sender is dropped.
fn start_heartbeat(
    path: &Path,
    owner: Owner,
    stale_after: Option<Duration>,
) -> Option<(mpsc::Sender<()>, std::thread::JoinHandle<()>)> {
    let every = stale_after
        .map_or(HEARTBEAT, |limit| {
            (limit / 4).max(Duration::from_millis(50))
        })
        .min(HEARTBEAT);
    let (stop, stopped) = mpsc::channel::<()>();
    let path = path.to_path_buf();
    let thread = std::thread::Builder::new()
        .name("lock-heartbeat".into())
        .spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                if read_owner(&path).is_none_or(|now| now.token != owner.token) {
                    return;
                }
                let _ = write_owner(&path, &owner);
            }
        })
        .ok()?;
    Some((stop, thread))
}

/// The locks `lock.acquire` took in one run: released when the run ends (when this is
/// dropped), never shared with another run in the same process.
#[derive(Debug, Default)]
pub(crate) struct HeldLocks(Mutex<Vec<DirLock>>);

impl HeldLocks {
    /// None held yet.
    #[cfg(test)]
    pub(crate) const fn new() -> HeldLocks {
        HeldLocks(Mutex::new(Vec::new()))
    }

    pub(crate) fn hold(&self, lock: DirLock) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(lock);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_attempt_is_busy_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock.d");
        let Attempt::Acquired { lock, .. } = try_acquire(&path, None).unwrap() else {
            panic!("first attempt must acquire");
        };
        assert!(matches!(try_acquire(&path, None).unwrap(), Attempt::Busy));
        drop(lock);
        assert!(!path.exists());
        assert!(matches!(
            try_acquire(&path, None).unwrap(),
            Attempt::Acquired { .. }
        ));
    }

    fn write_foreign(path: &Path, holder: Holder) {
        std::fs::create_dir(path).unwrap();
        let owner = Owner {
            holder,
            token: holder::token(),
            since: String::new(),
        };
        write_owner(path, &owner).unwrap();
    }

    #[test]
    fn a_lock_whose_holder_is_gone_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock.d");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        write_foreign(
            &path,
            Holder {
                pid,
                started: 1,
                host: holder::hostname(),
            },
        );
        match try_acquire(&path, None).unwrap() {
            Attempt::Acquired {
                took_over_stale, ..
            } => assert!(took_over_stale),
            other => panic!("expected a takeover, got {other:?}"),
        }
    }

    #[test]
    fn a_live_holder_keeps_its_lock_past_stale_after_and_a_lost_lock_is_not_released() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock.d");
        let limit = Duration::from_secs(4);
        let Attempt::Acquired { lock, .. } = try_acquire(&path, Some(limit)).unwrap() else {
            panic!("first attempt must acquire");
        };
        // Dated long past `stale_after`, as if the holder had gone quiet: the heartbeat (every
        // second with this limit) rewrites it. Wait for that, bounded against hanging.
        let past = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        std::fs::File::options()
            .write(true)
            .open(owner_path(&path))
            .and_then(|file| file.set_modified(past))
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while age_of(&owner_path(&path)).is_none_or(|age| age > limit) {
            assert!(
                std::time::Instant::now() < deadline,
                "the heartbeat never rewrote owner.json"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(matches!(
            try_acquire(&path, Some(limit)).unwrap(),
            Attempt::Busy
        ));
        // Someone else's lock in its place: the release leaves it.
        remove_lock(&path);
        write_foreign(&path, Holder::current());
        drop(lock);
        assert!(path.exists(), "a release removed another holder's lock");
    }

    #[test]
    fn a_live_holder_on_another_host_without_heartbeat_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock.d");
        write_foreign(
            &path,
            Holder {
                host: format!("{}-elsewhere", holder::hostname()),
                ..Holder::current()
            },
        );
        let old = SystemTime::now() - Duration::from_secs(60);
        let file = std::fs::File::options()
            .write(true)
            .open(owner_path(&path))
            .unwrap();
        file.set_modified(old).unwrap();
        assert!(matches!(try_acquire(&path, None).unwrap(), Attempt::Busy));
        assert!(matches!(
            try_acquire(&path, Some(Duration::from_secs(30))).unwrap(),
            Attempt::Acquired {
                took_over_stale: true,
                ..
            }
        ));
    }
}
