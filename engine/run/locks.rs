//! `mkdir` locks: the workflow's `[workflow] lock`, held for the whole run, and the
//! `lock.acquire` built-in, held from its stage to the end of the run.
//!
//! `mkdir` is atomic on every POSIX file system, so two runs can never both hold a lock. The
//! lock folder holds an `owner` file (pid and time) for humans; staleness is judged by the
//! folder's modification time.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::builtins::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult};

pub const LOCK_ACQUIRE: &str = "lock.acquire";

/// A held lock; released (the folder removed) when dropped.
#[derive(Debug)]
pub struct DirLock {
    path: PathBuf,
}

impl DirLock {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.path.join("owner"));
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// The result of one attempt.
#[derive(Debug)]
pub enum Attempt {
    Acquired {
        lock: DirLock,
        took_over_stale: bool,
    },
    Busy {
        age: Option<Duration>,
    },
}

/// Try once to take the lock; a lock older than `stale_after` is taken over.
pub fn try_acquire(path: &Path, stale_after: Option<Duration>) -> std::io::Result<Attempt> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut took_over_stale = false;
    for _ in 0..2 {
        match std::fs::create_dir(path) {
            Ok(()) => {
                let owner = format!(
                    "pid {}\nsince {}\n",
                    std::process::id(),
                    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                );
                let _ = std::fs::write(path.join("owner"), owner);
                return Ok(Attempt::Acquired {
                    lock: DirLock {
                        path: path.to_path_buf(),
                    },
                    took_over_stale,
                });
            }
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                let age = std::fs::symlink_metadata(path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|modified| SystemTime::now().duration_since(modified).ok());
                let stale = matches!((stale_after, age), (Some(limit), Some(age)) if age > limit);
                if !stale || took_over_stale {
                    return Ok(Attempt::Busy { age });
                }
                // Take the stale lock over: remove it, then race for it like anyone else.
                let _ = std::fs::remove_file(path.join("owner"));
                let _ = std::fs::remove_dir(path);
                took_over_stale = true;
            }
            Err(error) => return Err(error),
        }
    }
    Ok(Attempt::Busy { age: None })
}

/// Locks taken by `lock.acquire`, released when the run ends.
static HELD: Mutex<Vec<DirLock>> = Mutex::new(Vec::new());

/// Release every lock `lock.acquire` took.
pub fn release_all() {
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    held.clear();
}

/// The `lock.acquire` built-in.
pub fn lookup(name: &str) -> Option<&'static Builtin> {
    static BUILTIN: Builtin = Builtin {
        name: LOCK_ACQUIRE,
        description: "take a mkdir lock, held until the run ends; never waits",
        writes: true,
        with_schema,
        output_schema,
        run,
    };
    (name == LOCK_ACQUIRE).then_some(&BUILTIN)
}

fn with_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["path"],
        "properties": {
            "path": { "type": "string", "description": "the lock folder" },
            "stale_after": { "type": "string", "description": "a lock older than this is taken over, e.g. \"600s\"" }
        }
    })
}

fn output_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["acquired", "path", "took_over_stale"],
        "properties": {
            "acquired": { "type": "boolean", "description": "false when another run holds the lock" },
            "path": { "type": "string", "description": "The lock folder, absolute" },
            "took_over_stale": { "type": "boolean", "description": "true when a stale lock was removed and taken" }
        },
        "examples": [{ "acquired": true, "path": "lock.d", "took_over_stale": false }]
    })
}

fn run(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let path = with
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| BuiltinError::new("`path` is required"))?;
    let stale_after = match with.get("stale_after").and_then(Value::as_str) {
        Some(text) => {
            Some(crate::template::functions::parse_duration(text).map_err(BuiltinError::new)?)
        }
        None => None,
    };
    let target = ctx.writes.check(&ctx.resolve(path))?;
    let attempt = try_acquire(&target, stale_after).map_err(|e| {
        BuiltinError::new(format!("cannot create lock `{}`: {e}", target.display()))
    })?;
    Ok(match attempt {
        Attempt::Acquired {
            lock,
            took_over_stale,
        } => {
            HELD.lock().unwrap_or_else(|p| p.into_inner()).push(lock);
            json!({ "acquired": true, "path": target.display().to_string(), "took_over_stale": took_over_stale })
        }
        Attempt::Busy { .. } => {
            json!({ "acquired": false, "path": target.display().to_string(), "took_over_stale": false })
        }
    })
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
        assert!(matches!(
            try_acquire(&path, None).unwrap(),
            Attempt::Busy { .. }
        ));
        drop(lock);
        assert!(!path.exists());
        assert!(matches!(
            try_acquire(&path, None).unwrap(),
            Attempt::Acquired { .. }
        ));
    }

    #[test]
    fn stale_lock_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock.d");
        std::fs::create_dir(&path).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        match try_acquire(&path, Some(Duration::from_millis(10))).unwrap() {
            Attempt::Acquired {
                took_over_stale, ..
            } => assert!(took_over_stale),
            other => panic!("expected a takeover, got {other:?}"),
        }
    }
}
