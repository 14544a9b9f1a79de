//! The stage cache: `cache/<workflow>.jsonl` in the state folder, one entry a line.
//!
//! One append-only file per workflow rather than a file per entry: a no-op rerun of thousands
//! of cached stages reads one file instead of thousands. Lines are appended (buffered, flushed
//! whenever the run waits and at its end) after the output passed validation; a line that does
//! not parse or whose hash does not match its output is ignored with a warning.
//!
//! A run killed mid-append leaves a torn last line. Every append therefore starts on a fresh
//! line whatever the file ends with, so the fragment never swallows the next entry; the fragment
//! is reported once, by the run that reads it, which then compacts the file (rewrites it with
//! its whole lines only) as it closes the cache.

use foldhash::{HashMap, HashMapExt};
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::record::{StoredValue, LARGE_OUTPUT};
use crate::floor::hash::{sha256_hex, sha256_json};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    id: String,
    created_at: i64,
    sha256: String,
    /// The output itself; null when `file` holds it.
    #[serde(default)]
    output: Value,
    /// An output larger than [`LARGE_OUTPUT`] is kept once, by content, in
    /// `cache/outputs/<sha256>.json`, and the entry names that file (path below `cache/`, size,
    /// SHA-256). A file that is missing, or whose size or hash is not the entry's, is a miss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    file: Option<StoredValue>,
}

/// An entry as read from the file.
struct Stored {
    entry: Entry,
    line: usize,
    /// Its hash was checked against its output.
    verified: bool,
}

/// Boxed: a map of 10,000 entries holds a pointer a slot rather than the entry itself.
type Entries = (HashMap<String, Box<Stored>>, Vec<String>);

/// A cache file being read on another thread.
static READ_AHEAD: Mutex<Option<(PathBuf, std::thread::JoinHandle<Entries>)>> = Mutex::new(None);

/// Start reading a workflow's cache file on another thread, so that a run finds it read: a
/// rerun of thousands of cached stages reads the file while the workflow is checked.
pub(crate) fn read_ahead(state_dir: &Path, workflow: &str) {
    let path = cache_path(state_dir, workflow);
    if !path.is_file() {
        return;
    }
    let reading = {
        let path = path.clone();
        std::thread::Builder::new()
            .name("cache-read".into())
            .spawn(move || read_entries(&path))
    };
    if let Ok(reading) = reading {
        *READ_AHEAD
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((path, reading));
    }
}

fn cache_path(state_dir: &Path, workflow: &str) -> PathBuf {
    state_dir.join("cache").join(format!("{workflow}.jsonl"))
}

/// Every entry of a cache file, by id (the last line of an id wins), with its line number, and
/// a warning for each line that does not parse. Hashes are checked when an entry is used, not
/// here: a rerun reads every line but may use few of them.
fn read_entries(path: &Path) -> Entries {
    let mut entries = HashMap::new();
    let mut warnings = Vec::new();
    let Ok(file) = std::fs::File::open(path) else {
        return (entries, warnings);
    };
    for (number, line) in BufReader::new(file).lines().enumerate() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Entry>(&line) {
            Ok(entry) => {
                let stored = Stored {
                    entry,
                    line: number + 1,
                    verified: false,
                };
                entries.insert(stored.entry.id.clone(), Box::new(stored));
            }
            Err(_) => warnings.push(corrupt(path, number + 1)),
        }
    }
    (entries, warnings)
}

/// Where below the cache's folder an output of this SHA-256 is kept.
fn output_file(sha256: &str) -> String {
    format!("outputs/{sha256}.json")
}

fn corrupt(path: &Path, line: usize) -> String {
    format!("ignoring corrupt cache entry at {}:{line}", path.display())
}

pub(crate) struct Cache {
    path: PathBuf,
    entries: Mutex<Option<HashMap<String, Box<Stored>>>>,
    warnings: Mutex<Vec<String>>,
    /// The file, opened for appending at the first `put` and kept open for the run, and the
    /// whole lines not yet appended.
    appender: Mutex<Option<(std::fs::File, Vec<u8>)>>,
    /// A line that did not parse was read: the file is compacted when the cache closes.
    torn: std::sync::atomic::AtomicBool,
}

/// Lines buffered before an append.
const APPEND_BUFFER: usize = 64 * 1024;

/// Appends whole lines to a file, on a fresh line if the file does not end with one.
fn append_lines(file: &mut std::fs::File, lines: &[u8]) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let length = file.metadata()?.len();
    let mut out = Vec::with_capacity(lines.len() + 1);
    if length > 0 {
        let mut last = [0u8; 1];
        // The file is opened for appending and reading: reading moves the cursor, writing
        // appends at the end regardless.
        file.seek(SeekFrom::Start(length - 1))?;
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            out.push(b'\n');
        }
    }
    out.extend_from_slice(lines);
    file.write_all(&out)
}

impl Cache {
    pub(crate) fn new(state_dir: &Path, workflow: &str) -> Self {
        Cache {
            path: cache_path(state_dir, workflow),
            entries: Mutex::new(None),
            warnings: Mutex::new(Vec::new()),
            appender: Mutex::new(None),
            torn: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The id of an execution: its fingerprint and cache key.
    pub(crate) fn entry_id(fingerprint: &str, key: Option<&str>) -> String {
        match key {
            Some(key) => sha256_hex(format!("{fingerprint}\0{key}").as_bytes()),
            None => fingerprint.to_string(),
        }
    }

    /// Every entry of the file: read ahead if [`read_ahead`] started it, else read now.
    fn load(&self) -> HashMap<String, Box<Stored>> {
        let ahead = {
            let mut ahead = READ_AHEAD
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            ahead
                .take_if(|(path, _)| *path == self.path)
                .map(|(_, reading)| reading)
        };
        let (entries, warnings) = match ahead.map(std::thread::JoinHandle::join) {
            Some(Ok(read)) => read,
            _ => read_entries(&self.path),
        };
        if !warnings.is_empty() {
            self.torn.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        self.warnings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(warnings);
        entries
    }

    /// Compacts the file if a line of it did not parse (see [`Cache::compact`]), after
    /// appending what is buffered.
    pub(crate) fn close(&self) -> std::io::Result<()> {
        self.flush()?;
        if self.torn.swap(false, std::sync::atomic::Ordering::Relaxed) {
            self.compact()?;
        }
        Ok(())
    }

    /// Rewrites the file with the lines that parse, dropping torn and corrupt ones (atomically:
    /// a complete new file is renamed over it).
    fn compact(&self) -> std::io::Result<()> {
        let text = std::fs::read(&self.path)?;
        let mut kept = Vec::with_capacity(text.len());
        for line in text.split(|&b| b == b'\n') {
            if !line.is_empty() && serde_json::from_slice::<Entry>(line).is_ok() {
                kept.extend_from_slice(line);
                kept.push(b'\n');
            }
        }
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let mut file = tempfile::NamedTempFile::new_in(dir)?;
        file.write_all(&kept)?;
        file.persist(&self.path).map_err(|e| e.error)?;
        Ok(())
    }

    fn corrupt(&self, line: usize) -> String {
        corrupt(&self.path, line)
    }

    /// A stored output and its SHA-256, unless older than `ttl`, corrupt, or kept in a file
    /// that is missing or damaged.
    pub(crate) fn get(&self, id: &str, ttl: Option<Duration>) -> Option<(Value, String)> {
        let mut guard = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entries = guard.get_or_insert_with(|| self.load());
        let stored = entries.get_mut(id)?;
        if let Some(ttl) = ttl {
            let age = chrono::Utc::now().timestamp() - stored.entry.created_at;
            if age < 0 || age as u64 > ttl.as_secs() {
                return None;
            }
        }
        if !stored.verified {
            let entry = &mut stored.entry;
            if let Some(file) = &entry.file {
                // Only the file the entry's own hash names, and only when it hashes to it.
                if file.sha256 == entry.sha256 && file.path == output_file(&entry.sha256) {
                    if let Some(output) = file.read(self.folder()) {
                        entry.output = output;
                    }
                }
            }
            if sha256_json(&entry.output) != entry.sha256 {
                let warning = match &entry.file {
                    Some(file) => format!(
                        "ignoring the cache entry at {}:{}: its output file {} is missing or damaged",
                        self.path.display(),
                        stored.line,
                        self.folder().join(&file.path).display()
                    ),
                    None => self.corrupt(stored.line),
                };
                entries.remove(id);
                self.warnings
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(warning);
                return None;
            }
            stored.verified = true;
        }
        let entry = &stored.entry;
        Some((entry.output.clone(), entry.sha256.clone()))
    }

    /// The cache's folder, which holds the workflows' files and `outputs/`.
    fn folder(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// Store an output (already validated).
    pub(crate) fn put(&self, id: &str, output: &Value) -> std::io::Result<()> {
        // Redacted before it is hashed: the entry read back must match its own hash.
        let redacted = crate::floor::secrets::redact_value(output);
        let output = redacted.as_ref().unwrap_or(output);
        let mut entry = Entry {
            id: id.to_string(),
            created_at: chrono::Utc::now().timestamp(),
            sha256: sha256_json(output),
            output: Value::Null,
            file: None,
        };
        // A large output goes to its file (before the line that names it), the line holds the
        // reference; otherwise the line holds the output.
        let mut line = if crate::floor::hash::json_size(output) > LARGE_OUTPUT {
            let bytes = serde_json::to_vec(output).map_err(std::io::Error::other)?;
            let file = output_file(&entry.sha256);
            entry.file = Some(StoredValue::store(self.folder(), file, &bytes)?);
            let line = serde_json::to_vec(&entry).map_err(std::io::Error::other)?;
            entry.output = output.clone();
            line
        } else {
            entry.output = output.clone();
            serde_json::to_vec(&entry).map_err(std::io::Error::other)?
        };
        line.push(b'\n');
        {
            let mut appender = self
                .appender
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (file, buffer) = match appender.as_mut() {
                Some(open) => open,
                None => {
                    if let Some(parent) = self.path.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    let file = OpenOptions::new()
                        .create(true)
                        .append(true)
                        .read(true)
                        .open(&self.path)?;
                    appender.insert((file, Vec::with_capacity(APPEND_BUFFER)))
                }
            };
            // Whole lines only, appended in one write: a concurrent run never sees half a line.
            if !buffer.is_empty() && buffer.len() + line.len() > APPEND_BUFFER {
                append_lines(file, buffer)?;
                buffer.clear();
            }
            buffer.extend_from_slice(&line);
        }
        let mut guard = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(entries) = guard.as_mut() {
            let stored = Stored {
                entry,
                line: 0,
                verified: true,
            };
            entries.insert(stored.entry.id.clone(), Box::new(stored));
        }
        Ok(())
    }

    /// Append what `put` has buffered. Also done when the cache is dropped; a run calls it
    /// whenever it waits, so a crash loses at most the entries of the last moments.
    pub(crate) fn flush(&self) -> std::io::Result<()> {
        let mut appender = self
            .appender
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match appender.as_mut() {
            Some((file, buffer)) if !buffer.is_empty() => {
                let appended = append_lines(file, buffer);
                buffer.clear();
                appended
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn take_warnings(&self) -> Vec<String> {
        std::mem::take(
            &mut *self
                .warnings
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_read_ahead_is_the_one_a_run_uses() {
        let state = tempfile::tempdir().unwrap();
        let writer = Cache::new(state.path(), "ahead");
        writer.put("f1", &serde_json::json!({ "n": 1 })).unwrap();
        writer.flush().unwrap();
        let path = cache_path(state.path(), "ahead");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{not json\n");
        std::fs::write(&path, text).unwrap();

        read_ahead(state.path(), "ahead");
        assert!(READ_AHEAD.lock().unwrap().is_some(), "the reading started");
        let cache = Cache::new(state.path(), "ahead");
        let (output, _) = cache.get("f1", None).expect("the entry read ahead");
        assert_eq!(output, serde_json::json!({ "n": 1 }));
        assert!(READ_AHEAD.lock().unwrap().is_none(), "taken by the run");
        let warnings = cache.take_warnings();
        assert!(
            warnings.len() == 1 && warnings[0].ends_with(":2"),
            "{warnings:?}"
        );
    }
}
