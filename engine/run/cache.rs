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
//!
//! An entry stored again under the same id (its `ttl` expired, its output file was damaged)
//! supersedes the earlier line, which no run reads again: a run that reads or writes such a
//! line compacts the file as it closes too, keeping the last line of each id. After a
//! compaction, the files of `outputs/` that no line of any workflow's cache file names are
//! removed (see [`remove_orphans`]).

use foldhash::{HashMap, HashMapExt};
use std::borrow::Cow;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::record::{StoredValue, LARGE_OUTPUT};
use crate::floor::hash::{
    digest_of_hex, hex, sha256_digest, sha256_json, sha256_json_digest, Sha256Hex,
};

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

/// An entry as read from the file, without its id (the map of entries is keyed by it). Its
/// hashes are held as their 32 bytes, not 64 hex digits: a rerun of 10,000 cached stages holds
/// every entry of the file at once.
struct Stored {
    created_at: i64,
    /// None when the line's `sha256` is not one: the entry then fails its check at first use.
    sha256: Option<Digest>,
    /// The output as its line has it: JSON text, read into a value when a stage takes it (a
    /// value of 72 bytes a stage is not held for every entry of the file); null when `file`
    /// holds it.
    output: Box<str>,
    file: Option<Box<StoredValue>>,
    line: u32,
    /// Its hash was checked against its output.
    verified: bool,
}

/// A line of a cache file as it is read: the id, hash and output borrowed from the line.
#[derive(Deserialize)]
struct EntryLine<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    created_at: i64,
    #[serde(borrow)]
    sha256: Cow<'a, str>,
    #[serde(borrow, default)]
    output: Option<&'a serde_json::value::RawValue>,
    #[serde(default)]
    file: Option<StoredValue>,
}

/// A SHA-256 as its bytes.
type Digest = [u8; 32];

/// The entries of a cache file, by id. Beside them: a warning for each line that does not
/// parse, and whether a line was superseded by a later one of the same id.
type Entries = (Table, Vec<String>, bool);

/// Every entry of a cache file by its id: the entries in one vector, in the order read, and a
/// table of their positions in it.
///
/// A rerun of 10,000 cached stages holds every entry from the moment its cache is read until the
/// run ends, at the run's peak of memory. As a map of boxed entries they took 2.2 MB there: a
/// box of 136 bytes each (72 of them the output's value), and a table of 16,384 slots of 48
/// bytes (the id and the box's pointer). Here a slot is a position of 4 bytes, and the entries
/// lie side by side at 112 bytes each with their ids, the output kept as its JSON text: 1.3 MB.
/// An id is a SHA-256, whose first 8 bytes are as good a hash as any hasher would make of it.
#[derive(Default)]
struct Table {
    positions: hashbrown::HashTable<u32>,
    entries: Vec<(Sha256Hex, Stored)>,
}

impl Table {
    fn with_capacity(capacity: usize) -> Self {
        Table {
            positions: hashbrown::HashTable::with_capacity(capacity),
            entries: Vec::with_capacity(capacity),
        }
    }

    fn hash(id: &Sha256Hex) -> u64 {
        match id {
            Sha256Hex::Bytes(bytes) => {
                u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default())
            }
            Sha256Hex::Text(text) => {
                use std::hash::BuildHasher as _;
                foldhash::fast::FixedState::default().hash_one(text)
            }
        }
    }

    /// Keep `stored` under `id`, in place of an entry of the same id: true when it replaced one.
    fn insert(&mut self, id: Sha256Hex, stored: Stored) -> bool {
        let hash = Self::hash(&id);
        let entries = &mut self.entries;
        match self
            .positions
            .find(hash, |&at| entries[at as usize].0 == id)
        {
            Some(&at) => {
                entries[at as usize].1 = stored;
                true
            }
            None => {
                let Ok(at) = u32::try_from(entries.len()) else {
                    return false;
                };
                entries.push((id, stored));
                self.positions
                    .insert_unique(hash, at, |&at| Self::hash(&entries[at as usize].0));
                false
            }
        }
    }

    fn get_mut(&mut self, id: &Sha256Hex) -> Option<&mut Stored> {
        let entries = &mut self.entries;
        let &at = self
            .positions
            .find(Self::hash(id), |&at| entries[at as usize].0 == *id)?;
        Some(&mut entries[at as usize].1)
    }

    /// Forget the entry of `id` (its place in the vector stays, unused: a corrupt entry is rare).
    fn remove(&mut self, id: &Sha256Hex) {
        let entries = &self.entries;
        if let Ok(found) = self
            .positions
            .find_entry(Self::hash(id), |&at| entries[at as usize].0 == *id)
        {
            found.remove();
        }
    }

    #[cfg(test)]
    fn iter(&self) -> impl Iterator<Item = (&Sha256Hex, &Stored)> {
        self.positions.iter().map(|&at| {
            let (id, stored) = &self.entries[at as usize];
            (id, stored)
        })
    }
}

/// A cache file being read on another thread.
static READ_AHEAD: Mutex<Option<(PathBuf, std::thread::JoinHandle<Entries>)>> = Mutex::new(None);

/// Start reading a workflow's cache file on another thread, so that a run finds it read: a
/// rerun of thousands of cached stages reads the file while the run is set up (the record's
/// folder made, its threads started) and its first stages are made ready. Started once the
/// workflow is checked, not before: read while the workflow was checked, the entries of 10,000
/// stages were held through the check's peak of memory, 1.2 MB of it. A workflow whose check is
/// kept (`check::kept`) has it started as soon as the kept check is found good, beside its
/// reading back. Started once: a second call for the same file does nothing.
pub(crate) fn read_ahead(state_dir: &Path, workflow: &str) {
    let path = cache_path(state_dir, workflow);
    let started = READ_AHEAD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_ref()
        .is_some_and(|(reading, _)| *reading == path);
    if started || !path.is_file() {
        return;
    }
    let reading = {
        let path = path.clone();
        std::thread::Builder::new()
            .name("cache-read".into())
            .spawn(move || read_entries(&path, true))
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
/// a warning for each line that does not parse. With `verify` (the read-ahead thread, which has
/// the time while the run is set up), each entry that holds its output is checked against
/// its hash here, so that a rerun of cached stages does not check them one by one on the thread
/// that runs them; otherwise, and for an output kept in a file, the check waits for the entry's
/// first use. An entry that fails the check here is left unverified, and its use reports it.
fn read_entries(path: &Path, verify: bool) -> Entries {
    let mut warnings = Vec::new();
    let mut superseded = false;
    let Ok(file) = std::fs::File::open(path) else {
        return (Table::default(), warnings, superseded);
    };
    // A line is at least 190 bytes (two hashes in hex, and the keys): room for this many
    // entries is room enough.
    let size = file.metadata().map_or(0, |m| m.len());
    let mut entries = Table::with_capacity((size / 160) as usize);
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    // One buffer for every line.
    let mut line = Vec::new();
    let mut number: u32 = 0;
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => number += 1,
        }
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        // The line checked as UTF-8 once, not each of its strings as the parser meets them.
        match std::str::from_utf8(text).map(serde_json::from_str::<EntryLine>) {
            Ok(Ok(entry)) => {
                let sha256 = digest_of_hex(&entry.sha256);
                let output = entry
                    .output
                    .map_or("null", serde_json::value::RawValue::get);
                let verified = verify
                    && entry.file.is_none()
                    && sha256.is_some_and(|sha256| holds(output, &sha256));
                let stored = Stored {
                    created_at: entry.created_at,
                    sha256,
                    output: output.into(),
                    file: entry.file.map(Box::new),
                    line: number,
                    verified,
                };
                superseded |= entries.insert(Sha256Hex::new(&entry.id), stored);
            }
            Ok(Err(_)) | Err(_) => warnings.push(corrupt(path, number)),
        }
    }
    (entries, warnings, superseded)
}

/// Whether `output`, JSON text, is the value `sha256` names: the hash of its text when it is
/// written as this engine writes it (compact), else of the value read from it.
fn holds(output: &str, sha256: &Digest) -> bool {
    sha256_digest(output.as_bytes()) == *sha256
        || serde_json::from_str::<Value>(output)
            .is_ok_and(|value| sha256_json_digest(&value) == *sha256)
}

/// Where below the cache's folder an output of this SHA-256 is kept.
fn output_file(sha256: &str) -> String {
    format!("outputs/{sha256}.json")
}

fn corrupt(path: &Path, line: u32) -> String {
    format!("ignoring corrupt cache entry at {}:{line}", path.display())
}

pub(crate) struct Cache {
    path: PathBuf,
    entries: Mutex<Option<Table>>,
    warnings: Mutex<Vec<String>>,
    /// The file, opened for appending at the first `put` and kept open for the run, and the
    /// whole lines not yet appended.
    appender: Mutex<Option<Appender>>,
    /// A line that did not parse was read, or a line superseded by a later one of its id was
    /// read or written: the file is compacted when the cache closes.
    stale: std::sync::atomic::AtomicBool,
}

/// Lines buffered before an append.
const APPEND_BUFFER: usize = 64 * 1024;

/// The cache file open for appending, the whole lines not yet appended, and the file's length
/// after this process's last append (it ended with a newline then).
struct Appender {
    file: std::fs::File,
    buffer: Vec<u8>,
    end: Option<u64>,
}

impl Appender {
    /// Appends the buffered lines, on a fresh line if the file does not end with one. The last
    /// byte is read only when another process (or a torn write) may have left it: a file still
    /// as long as this process's last append left it ends with that append's newline.
    fn append(&mut self) -> std::io::Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        if self.buffer.is_empty() {
            return Ok(());
        }
        let length = self.file.metadata()?.len();
        if length > 0 && self.end != Some(length) {
            let mut last = [0u8; 1];
            // The file is opened for appending and reading: reading moves the cursor, writing
            // appends at the end regardless.
            self.file.seek(SeekFrom::Start(length - 1))?;
            self.file.read_exact(&mut last)?;
            if last[0] != b'\n' {
                self.buffer.insert(0, b'\n');
            }
        }
        let written = self.file.write_all(&self.buffer);
        self.end = written.is_ok().then(|| length + self.buffer.len() as u64);
        self.buffer.clear();
        written
    }
}

impl Cache {
    pub(crate) fn new(state_dir: &Path, workflow: &str) -> Self {
        Cache {
            path: cache_path(state_dir, workflow),
            entries: Mutex::new(None),
            warnings: Mutex::new(Vec::new()),
            appender: Mutex::new(None),
            stale: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The id of an execution: its fingerprint and cache key. With a key, the SHA-256 of the
    /// fingerprint's hex, a NUL and the key.
    pub(crate) fn entry_id(fingerprint: &[u8; 32], key: Option<&str>) -> Sha256Hex {
        match key {
            Some(key) => {
                let mut text = hex(fingerprint);
                text.push('\0');
                text.push_str(key);
                Sha256Hex::Bytes(sha256_digest(text.as_bytes()))
            }
            None => Sha256Hex::Bytes(*fingerprint),
        }
    }

    /// Every entry of the file: read ahead if [`read_ahead`] started it, else read now.
    fn load(&self) -> Table {
        let ahead = {
            let mut ahead = READ_AHEAD
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            ahead
                .take_if(|(path, _)| *path == self.path)
                .map(|(_, reading)| reading)
        };
        let (entries, warnings, superseded) = match ahead.map(std::thread::JoinHandle::join) {
            Some(Ok(read)) => read,
            _ => read_entries(&self.path, false),
        };
        if !warnings.is_empty() || superseded {
            self.stale.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        self.warnings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(warnings);
        entries
    }

    /// Compacts the file if a line of it did not parse or was superseded (see
    /// [`Cache::compact`]), after appending what is buffered, then removes the output files no
    /// entry names any more (see [`remove_orphans`]).
    pub(crate) fn close(&self) -> std::io::Result<()> {
        self.flush()?;
        if self.stale.swap(false, std::sync::atomic::Ordering::Relaxed) {
            self.compact()?;
            remove_orphans(self.folder(), std::time::SystemTime::now());
        }
        Ok(())
    }

    /// Rewrites the file with the last line of each id, dropping torn and corrupt lines and
    /// lines a later one of their id superseded (atomically: a complete new file is renamed
    /// over it).
    fn compact(&self) -> std::io::Result<()> {
        let text = std::fs::read(&self.path)?;
        let lines: Vec<(&[u8], String)> = text
            .split(|&b| b == b'\n')
            .filter(|line| !line.is_empty())
            .filter_map(|line| Some((line, serde_json::from_slice::<Entry>(line).ok()?.id)))
            .collect();
        let mut last = HashMap::with_capacity(lines.len());
        for (index, (_, id)) in lines.iter().enumerate() {
            last.insert(id.as_str(), index);
        }
        let mut kept = Vec::with_capacity(text.len());
        for (index, (line, id)) in lines.iter().enumerate() {
            if last.get(id.as_str()) == Some(&index) {
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

    fn corrupt(&self, line: u32) -> String {
        corrupt(&self.path, line)
    }

    /// A stored output and its SHA-256, unless older than `ttl`, corrupt, or kept in a file
    /// that is missing or damaged.
    pub(crate) fn get(&self, id: &Sha256Hex, ttl: Option<Duration>) -> Option<(Value, [u8; 32])> {
        let mut guard = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entries = guard.get_or_insert_with(|| self.load());
        let stored = entries.get_mut(id)?;
        if let Some(ttl) = ttl {
            let age = chrono::Utc::now().timestamp() - stored.created_at;
            if age < 0 || age as u64 > ttl.as_secs() {
                return None;
            }
        }
        let mut from_file = None;
        if !stored.verified {
            if let (Some(file), Some(sha256)) = (&stored.file, &stored.sha256) {
                // Only the file the entry's own hash names, and only when it hashes to it.
                let sha256 = hex(sha256);
                if file.sha256 == sha256 && file.path == output_file(&sha256) {
                    from_file = file.read(self.folder());
                }
            }
            let holds = match (&from_file, &stored.sha256) {
                (Some(output), Some(sha256)) => sha256_json_digest(output) == *sha256,
                (None, Some(sha256)) => stored.file.is_none() && holds(&stored.output, sha256),
                (_, None) => false,
            };
            if !holds {
                let warning = match &stored.file {
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
            if let Some(output) = &from_file {
                // Kept as text from now on, like the outputs lines hold.
                stored.output = serde_json::to_string(output).ok()?.into();
            }
        }
        let output = match from_file {
            Some(output) => output,
            None => serde_json::from_str(&stored.output).ok()?,
        };
        Some((output, stored.sha256?))
    }

    /// The cache's folder, which holds the workflows' files and `outputs/`.
    fn folder(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// Store an output (already validated).
    pub(crate) fn put(&self, id: &Sha256Hex, output: &Value) -> std::io::Result<()> {
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
            let stored = StoredValue::store(self.folder(), file, &bytes)?;
            // A file kept from before is as new as the line about to name it: a compaction of
            // another run removes only files older than ORPHAN_GRACE.
            // Best effort: a file left as it was can at worst be removed, the entry then a miss.
            let _ = touch(&self.folder().join(&stored.path));
            entry.file = Some(stored);
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
            let appender = match appender.as_mut() {
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
                    appender.insert(Appender {
                        file,
                        buffer: Vec::with_capacity(APPEND_BUFFER),
                        end: None,
                    })
                }
            };
            // Whole lines only, appended in one write: a concurrent run never sees half a line.
            if appender.buffer.len() + line.len() > APPEND_BUFFER {
                appender.append()?;
            }
            appender.buffer.extend_from_slice(&line);
        }
        let mut guard = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(entries) = guard.as_mut() {
            let stored = Stored {
                created_at: entry.created_at,
                sha256: digest_of_hex(&entry.sha256),
                output: serde_json::to_string(&entry.output)
                    .map_err(std::io::Error::other)?
                    .into(),
                file: entry.file.map(Box::new),
                line: 0,
                verified: true,
            };
            if entries.insert(id.clone(), stored) {
                self.stale.store(true, std::sync::atomic::Ordering::Relaxed);
            }
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
            Some(appender) => appender.append(),
            None => Ok(()),
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

/// How old an output file no entry names must be before a compaction removes it. A run writes
/// (or touches) an output's file before it appends the line that names it, and appends its
/// lines whenever it waits and as it ends; an hour covers that gap for a run of another
/// workflow, or of the same one, sharing the folder (with a workflow lock or without).
const ORPHAN_GRACE: Duration = Duration::from_secs(60 * 60);

/// Sets a file's modification time to now, through no symbolic link.
fn touch(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    file.set_modified(std::time::SystemTime::now())
}

/// Whether a name is one [`output_file`] gives: 64 lowercase hex digits and `.json`.
fn is_output_name(name: &str) -> bool {
    name.strip_suffix(".json").is_some_and(|hash| {
        hash.len() == 64 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The output files the entries of every workflow's cache file in `folder` name (lines that do
/// not parse name none), or None when a cache file cannot be read: nothing is then removed.
fn named_outputs(folder: &Path) -> Option<foldhash::HashSet<String>> {
    let mut named = foldhash::HashSet::default();
    for item in std::fs::read_dir(folder).ok()? {
        let item = item.ok()?;
        let path = item.path();
        if path.extension().is_none_or(|e| e != "jsonl") || !item.file_type().ok()?.is_file() {
            continue;
        }
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            // Renamed away by a compaction of its own since it was listed: its lines live on
            // in the file renamed over it, which was listed too.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return None,
        };
        for line in BufReader::new(file).split(b'\n') {
            if let Ok(Some(stored)) =
                serde_json::from_slice::<Entry>(&line.ok()?).map(|entry| entry.file)
            {
                named.insert(stored.path);
            }
        }
    }
    Some(named)
}

/// Removes the files of `<folder>/outputs/` that no line of any workflow's cache file in
/// `folder` names and that were last modified more than [`ORPHAN_GRACE`] before `now`. Only
/// plain files named as [`output_file`] names them, listed in that folder itself (a symbolic
/// link, to a file or as the folder, is never followed nor removed). The cache files are read
/// before the folder is listed, so a file written after them is younger than the grace period;
/// should a file a concurrent run just touched be removed all the same, its entry is a miss
/// (with a warning), never a wrong output. Best effort: what cannot be read is kept.
fn remove_orphans(folder: &Path, now: std::time::SystemTime) -> usize {
    let outputs = folder.join("outputs");
    if !std::fs::symlink_metadata(&outputs).is_ok_and(|m| m.is_dir()) {
        return 0;
    }
    let Some(named) = named_outputs(folder) else {
        return 0;
    };
    let Ok(listing) = std::fs::read_dir(&outputs) else {
        return 0;
    };
    let mut removed = 0;
    for item in listing.flatten() {
        let name = item.file_name();
        let Some(name) = name.to_str().filter(|name| is_output_name(name)) else {
            continue;
        };
        if named.contains(&output_file(name.trim_end_matches(".json"))) {
            continue;
        }
        let path = outputs.join(name);
        let Ok(metadata) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let old = metadata
            .modified()
            .ok()
            .and_then(|modified| now.duration_since(modified).ok())
            .is_some_and(|age| age > ORPHAN_GRACE);
        if metadata.is_file() && old && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

impl Drop for Cache {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::floor::hash::sha256_hex;

    /// The cache warned once, about the line numbered `line` of its file.
    fn assert_one_warning_at(cache: &Cache, line: usize) {
        let warnings = cache.take_warnings();
        assert!(
            warnings.len() == 1 && warnings[0].ends_with(&format!(":{line}")),
            "{warnings:?}"
        );
    }

    /// Ids and hashes are held as bytes: an entry of a run's id (a SHA-256) is found again by
    /// its hex, gives its hash back as hex, and a line whose `sha256` is not one is refused
    /// at its first use.
    #[test]
    fn entries_of_hex_ids_are_found_and_a_hash_that_is_not_hex_is_refused() {
        let state = tempfile::tempdir().unwrap();
        let fingerprint = sha256_hex(b"fingerprint");
        let id = Cache::entry_id(&digest_of_hex(&fingerprint).unwrap(), Some("key"));
        // The id of a keyed entry is what it has always been: the ids in files stay found.
        assert_eq!(
            id.to_string(),
            sha256_hex(format!("{fingerprint}\0key").as_bytes())
        );
        let writer = Cache::new(state.path(), "hex");
        writer.put(&id, &serde_json::json!("out")).unwrap();
        writer.flush().unwrap();
        let path = cache_path(state.path(), "hex");
        let broken = Cache::entry_id(&digest_of_hex(&sha256_hex(b"other")).unwrap(), None);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&format!(
            "{{\"id\":\"{broken}\",\"created_at\":0,\"sha256\":\"XYZ\",\"output\":\"out\"}}\n"
        ));
        std::fs::write(&path, text).unwrap();

        let cache = Cache::new(state.path(), "hex");
        let (output, sha256) = cache.get(&id, None).expect("the entry");
        assert_eq!(output, serde_json::json!("out"));
        assert_eq!(hex(&sha256), sha256_json(&serde_json::json!("out")));
        assert!(
            cache
                .get(&Sha256Hex::new(&id.to_string().to_uppercase()), None)
                .is_none(),
            "ids are lowercase hex"
        );
        assert!(cache.take_warnings().is_empty());
        assert!(cache.get(&broken, None).is_none());
        assert_one_warning_at(&cache, 2);
    }

    /// A line that is not UTF-8 is one corrupt line: it is reported and the lines after it
    /// are read.
    #[test]
    fn a_line_that_is_not_utf8_is_skipped_and_the_next_read() {
        let state = tempfile::tempdir().unwrap();
        let writer = Cache::new(state.path(), "bytes");
        writer.put(&"after".into(), &serde_json::json!(2)).unwrap();
        writer.flush().unwrap();
        let path = cache_path(state.path(), "bytes");
        let mut bytes = b"{\"id\":\"\xff\"}\n".to_vec();
        bytes.extend(std::fs::read(&path).unwrap());
        std::fs::write(&path, bytes).unwrap();

        let cache = Cache::new(state.path(), "bytes");
        assert_eq!(
            cache.get(&"after".into(), None).unwrap().0,
            serde_json::json!(2)
        );
        assert_one_warning_at(&cache, 1);
    }

    #[test]
    fn a_cache_read_ahead_is_the_one_a_run_uses() {
        let state = tempfile::tempdir().unwrap();
        let writer = Cache::new(state.path(), "ahead");
        writer
            .put(&"f1".into(), &serde_json::json!({ "n": 1 }))
            .unwrap();
        writer.flush().unwrap();
        let path = cache_path(state.path(), "ahead");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{not json\n");
        std::fs::write(&path, text).unwrap();

        read_ahead(state.path(), "ahead");
        assert!(READ_AHEAD.lock().unwrap().is_some(), "the reading started");
        let cache = Cache::new(state.path(), "ahead");
        let (output, _) = cache.get(&"f1".into(), None).expect("the entry read ahead");
        assert_eq!(output, serde_json::json!({ "n": 1 }));
        assert!(READ_AHEAD.lock().unwrap().is_none(), "taken by the run");
        assert_one_warning_at(&cache, 2);
    }

    /// An entry and its id take 112 bytes beside one another, and 4 in the table.
    #[test]
    fn entries_stay_small() {
        assert!(std::mem::size_of::<(Sha256Hex, Stored)>() <= 112);
        let mut table = Table::default();
        let id = |n: u8| Sha256Hex::Bytes([n; 32]);
        let stored = |line| Stored {
            created_at: 0,
            sha256: None,
            output: "null".into(),
            file: None,
            line,
            verified: false,
        };
        assert!(!table.insert(id(1), stored(1)));
        assert!(!table.insert("text".into(), stored(2)));
        assert!(
            table.insert(id(1), stored(3)),
            "a later line of an id supersedes"
        );
        assert_eq!(table.get_mut(&id(1)).map(|s| s.line), Some(3));
        assert_eq!(table.get_mut(&"text".into()).map(|s| s.line), Some(2));
        table.remove(&id(1));
        assert!(table.get_mut(&id(1)).is_none());
        assert_eq!(table.iter().count(), 1);
    }

    /// Read ahead, an entry is checked against its hash as it is read; one whose output was
    /// changed is left unchecked, and its first use still refuses it with a warning.
    #[test]
    fn entries_read_ahead_are_checked_as_they_are_read() {
        let state = tempfile::tempdir().unwrap();
        let writer = Cache::new(state.path(), "checked");
        writer
            .put(&"good".into(), &serde_json::json!({ "n": 1 }))
            .unwrap();
        writer
            .put(&"bad".into(), &serde_json::json!({ "n": 2 }))
            .unwrap();
        writer.flush().unwrap();
        let path = cache_path(state.path(), "checked");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace(r#"{"n":2}"#, r#"{"n":3}"#)).unwrap();

        let verified = |verify| {
            let (entries, _, _) = read_entries(&path, verify);
            let mut flags: Vec<_> = entries
                .iter()
                .map(|(id, s)| (id.to_string(), s.verified))
                .collect();
            flags.sort();
            flags
        };
        assert_eq!(
            verified(true),
            [("bad".to_string(), false), ("good".to_string(), true)]
        );
        assert!(verified(false).iter().all(|(_, checked)| !checked));

        // As `load` hands over what the read-ahead thread read (the thread itself is not started
        // here: it is one per process, and other tests use it).
        let cache = Cache::new(state.path(), "checked");
        *cache.entries.lock().unwrap() = Some(read_entries(&path, true).0);
        assert_eq!(
            cache.get(&"good".into(), None).unwrap().0,
            serde_json::json!({ "n": 1 })
        );
        assert!(
            cache.get(&"bad".into(), None).is_none(),
            "a changed output is a miss"
        );
        assert_one_warning_at(&cache, 2);
    }

    /// The last byte is read only when the file is not as this process's last append left it:
    /// a torn line another process left between two appends still gets a fresh line after it.
    #[test]
    fn an_append_after_another_process_tore_a_line_starts_on_a_fresh_line() {
        let state = tempfile::tempdir().unwrap();
        let cache = Cache::new(state.path(), "torn");
        cache.put(&"a".into(), &serde_json::json!(1)).unwrap();
        cache.flush().unwrap();
        let path = cache_path(state.path(), "torn");
        {
            use std::io::Write as _;
            let mut other = OpenOptions::new().append(true).open(&path).unwrap();
            other.write_all(b"{\"id\":\"half").unwrap();
        }
        cache.put(&"b".into(), &serde_json::json!(2)).unwrap();
        cache.flush().unwrap();
        cache.put(&"c".into(), &serde_json::json!(3)).unwrap();
        cache.flush().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(text.ends_with('\n'));

        let again = Cache::new(state.path(), "torn");
        for (id, value) in [("a", 1), ("b", 2), ("c", 3)] {
            assert_eq!(
                again.get(&id.into(), None).unwrap().0,
                serde_json::json!(value)
            );
        }
        assert_eq!(
            again.take_warnings().len(),
            1,
            "the torn line alone is corrupt"
        );
    }

    /// A value whose JSON is larger than [`LARGE_OUTPUT`], so the cache keeps it in a file.
    fn large(tag: &str) -> Value {
        Value::String(format!(
            "{tag}{}",
            "x".repeat(usize::try_from(LARGE_OUTPUT).unwrap() + 1)
        ))
    }

    /// The files of `cache/outputs/`, by name.
    fn outputs(state: &Path) -> Vec<String> {
        let mut names: Vec<_> = std::fs::read_dir(state.join("cache/outputs"))
            .map(|listing| {
                listing
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Sets a file's (not a link's target's) modification time two grace periods back.
    fn backdate(path: &Path) {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(std::time::SystemTime::now() - 2 * ORPHAN_GRACE)
            .unwrap();
    }

    fn name_of(value: &Value) -> String {
        format!("{}.json", sha256_json(value))
    }

    #[test]
    fn a_superseded_entry_is_compacted_away_and_its_old_file_removed() {
        let state = tempfile::tempdir().unwrap();
        let (first, second) = (large("first"), large("second"));
        let cache = Cache::new(state.path(), "w");
        assert!(cache.get(&"a".into(), None).is_none());
        cache.put(&"a".into(), &first).unwrap();
        cache.close().unwrap();
        assert_eq!(outputs(state.path()), [name_of(&first)]);
        backdate(&state.path().join("cache/outputs").join(name_of(&first)));

        // The same id stored again (its ttl expired, say): the line written first is superseded.
        let cache = Cache::new(state.path(), "w");
        assert_eq!(cache.get(&"a".into(), None).unwrap().0, first);
        cache.put(&"a".into(), &second).unwrap();
        cache.close().unwrap();
        let text = std::fs::read_to_string(cache_path(state.path(), "w")).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert_eq!(outputs(state.path()), [name_of(&second)]);

        let cache = Cache::new(state.path(), "w");
        assert_eq!(
            cache.get(&"a".into(), None).unwrap().0,
            second,
            "the kept entry hits"
        );
        assert!(cache.take_warnings().is_empty());
    }

    /// A file kept from before and stored again is touched before its line is appended, so a
    /// compaction in between (another run's) keeps it though no line names it yet.
    #[test]
    fn an_old_file_stored_again_is_kept_while_its_line_is_held_back() {
        let state = tempfile::tempdir().unwrap();
        let value = large("again");
        let file = state.path().join("cache/outputs").join(name_of(&value));
        let cache = Cache::new(state.path(), "w");
        cache.put(&"a".into(), &value).unwrap();
        cache.close().unwrap();
        // Its entry gone, its file old: an orphan.
        std::fs::write(cache_path(state.path(), "w"), "").unwrap();
        backdate(&file);

        let cache = Cache::new(state.path(), "w");
        assert!(cache.get(&"b".into(), None).is_none());
        cache.put(&"b".into(), &value).unwrap();
        // The line is still buffered: no cache file names the file.
        assert_eq!(
            std::fs::read_to_string(cache_path(state.path(), "w")).unwrap(),
            ""
        );
        assert_eq!(
            remove_orphans(&state.path().join("cache"), std::time::SystemTime::now()),
            0
        );
        cache.close().unwrap();
        let cache = Cache::new(state.path(), "w");
        assert_eq!(cache.get(&"b".into(), None).unwrap().0, value);
    }

    #[test]
    fn files_an_entry_names_young_files_links_and_other_names_are_kept() {
        let state = tempfile::tempdir().unwrap();
        let (first, second, other) = (large("first"), large("second"), large("other"));
        // Another workflow's entry names a file of the shared folder, old as it may be.
        let neighbour = Cache::new(state.path(), "neighbour");
        neighbour.put(&"n".into(), &other).unwrap();
        neighbour.close().unwrap();
        let dir = state.path().join("cache/outputs");
        backdate(&dir.join(name_of(&other)));
        // An unnamed file too young to judge: a concurrent run may be about to name it.
        let young = format!("{}.json", "b".repeat(64));
        std::fs::write(dir.join(&young), "\"young\"").unwrap();
        // A link named as an output, to an old file outside the folder; a file of another name.
        let outside = state.path().join("outside.json");
        std::fs::write(&outside, "\"outside\"").unwrap();
        backdate(&outside);
        let link = format!("{}.json", "c".repeat(64));
        std::os::unix::fs::symlink(&outside, dir.join(&link)).unwrap();
        std::fs::write(dir.join("notes.txt"), "kept").unwrap();
        backdate(&dir.join("notes.txt"));

        let cache = Cache::new(state.path(), "w");
        cache.put(&"a".into(), &first).unwrap();
        cache.close().unwrap();
        // Not backdated: the superseded entry's file is young, so it stays for now.
        let cache = Cache::new(state.path(), "w");
        assert!(cache.get(&"a".into(), None).is_some());
        cache.put(&"a".into(), &second).unwrap();
        cache.close().unwrap();

        let mut expected = vec![
            name_of(&first),
            name_of(&second),
            name_of(&other),
            young,
            link,
            "notes.txt".to_string(),
        ];
        expected.sort();
        assert_eq!(outputs(state.path()), expected);
        assert!(outside.exists());
        let neighbour = Cache::new(state.path(), "neighbour");
        assert_eq!(neighbour.get(&"n".into(), None).unwrap().0, other);

        // Once old, the superseded entry's file goes at the next compaction, and only it.
        backdate(&dir.join(name_of(&first)));
        assert_eq!(
            remove_orphans(&state.path().join("cache"), std::time::SystemTime::now()),
            1
        );
        assert!(!dir.join(name_of(&first)).exists());
    }
}
