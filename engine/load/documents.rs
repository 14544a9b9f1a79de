//! Workflow documents kept between runs.
//!
//! Parsing TOML is the larger half of loading a big workflow (about 24 ms of a 55 ms `check` of
//! 10,000 stages), and a workflow that runs again is usually unchanged. `run` and `resume` keep
//! each file's document (the JSON that [`load::parse_document`] makes of it) in the state folder
//! and read it back, as JSON, while the file's text is the same. It is a cache of a pure
//! function: an entry is used only when its key, the SHA-256 of the engine's document format
//! and the file's whole text, matches; anything else (a missing, corrupt or stale entry) is
//! parsed from the text as if there were no cache. There is one entry per workflow path,
//! replaced when the text changes, so the folder grows only with the workflows used.
//!
//! A run in a project without a state folder yet does not make one for its documents (a workflow
//! that records out of the project tree must leave none): it holds the entries it would have
//! written and writes them once the run is over, when the run made the folder after all
//! ([`Documents::deferred`], [`Documents::write_held`]), so that the second run of a new
//! project reads its documents instead of parsing them again.
//!
//! Only a file parsed on its own is kept: the bases of an overlay chain are parsed with the
//! origins of their keys, which the merge needs. A kept document of a file that extends none is
//! read straight as the typed workflow ([`Documents::read`]); the JSON document is made
//! from the text again only when a diagnostic needs it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::diag::{Diagnostic, SourceFile};
use crate::floor::hash::hex;
use crate::load;

/// Bump when the document made of a TOML file changes for the same text, or the entry's layout.
const FORMAT: &str = "stagegraph-document-2";

/// Stages a line of an entry holds.
const STAGES_A_PART: usize = 512;

/// What [`Documents::read`] gives: the typed reading of a kept document, or the document.
pub(crate) enum Kept<T> {
    Typed(T),
    Document(Value),
}

/// A folder of kept documents (`<state>/cache/documents`).
#[derive(Debug, Clone)]
pub(crate) struct Documents {
    dir: PathBuf,
    /// Deferred: the entries parsed so far (path, key line and document as written), held until
    /// [`Documents::write_held`].
    held: Option<Arc<Mutex<Vec<(PathBuf, Vec<u8>)>>>>,
    /// A document was read in parts on the thread pool since the last
    /// [`Documents::release_pool`].
    pooled: Arc<AtomicBool>,
}

impl Documents {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Documents {
            dir,
            held: None,
            pooled: Arc::default(),
        }
    }

    /// Documents whose entries are held instead of written, for a state folder that does not
    /// exist yet: [`Documents::write_held`] writes them if it exists by then.
    pub(crate) fn deferred(dir: PathBuf) -> Self {
        Documents {
            dir,
            held: Some(Arc::default()),
            pooled: Arc::default(),
        }
    }

    /// Write the entries held back, when `state` (the folder `cache/documents` is in) exists
    /// now; else let them go. A cache: an entry that cannot be written is parsed next time.
    pub(crate) fn write_held(&self, state: &Path) {
        let Some(held) = &self.held else {
            return;
        };
        let held = std::mem::take(
            &mut *held
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if held.is_empty() || !state.is_dir() {
            return;
        }
        for (entry, bytes) in held {
            let _ = self.write_bytes(&entry, &bytes);
        }
    }

    /// The document of `source`: the kept one when its text is unchanged, else parsed (and
    /// kept, when it parses). A kept document is first read straight as a `T` (the typed
    /// reading the caller would make of it), which is given instead when `usable` says so.
    pub(crate) fn read<T: InParts>(
        &self,
        source: &SourceFile,
        usable: impl FnOnce(&T) -> bool,
    ) -> Result<Kept<T>, Vec<Diagnostic>> {
        let entry = self.entry_path(source);
        let key = key_of(source);
        let bytes = std::fs::read(&entry).unwrap_or_default();
        if let Some(json) = kept_json(&bytes, &key) {
            let (head, parts) = split_entry(json);
            if parts.len() > 1 {
                self.pooled.store(true, Ordering::Relaxed);
            }
            match read_typed::<T>(head, &parts) {
                Some(typed) if usable(&typed) => return Ok(Kept::Typed(typed)),
                _ => {
                    if let Some(doc) = read_document(head, &parts) {
                        return Ok(Kept::Document(doc));
                    }
                }
            }
        }
        let (doc, _) = load::parse_document(source, 0, false)?;
        // A cache: a document that cannot be kept is parsed again next time.
        let mut bytes = Vec::with_capacity(key.len() + 1 + source.text.len());
        bytes.extend_from_slice(key.as_bytes());
        bytes.push(b'\n');
        if write_in_parts(&mut bytes, &doc).is_ok() {
            match &self.held {
                Some(held) => held
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((entry, bytes)),
                None => {
                    let _ = self.write_bytes(&entry, &bytes);
                }
            }
        }
        Ok(Kept::Document(doc))
    }

    /// Once the workflows read are checked: a document read in parts left its definitions on
    /// the heaps of the pool's threads, which the check freed but those threads do not touch
    /// again while a run goes on, so the pages stay resident, freed or not, until each thread
    /// collects its own. At 10,000 stages that was 1.4 MB at the end of a no-op of the wide
    /// graph (the run's peak); collected, the reading in parts costs 0.2-0.3 MB there instead
    /// of 1.7. Nothing to do when no document was read in parts.
    pub(crate) fn release_pool(&self) {
        if self.pooled.swap(false, Ordering::Relaxed) {
            rayon::broadcast(|_| crate::floor::heap::collect_own(false));
        }
    }

    fn entry_path(&self, source: &SourceFile) -> PathBuf {
        let path = source.path.to_string_lossy();
        let name = hex(&Sha256::digest(path.as_bytes()));
        self.dir.join(format!("{}.json", &name[..32]))
    }

    /// An entry (the key line, then the document), renamed into place whole.
    fn write_bytes(&self, entry: &Path, bytes: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        // Owner-only, as the temporary file it is written to.
        crate::floor::atomic::replace(entry, ".document.", 0o600, |out| out.write_all(bytes))
    }
}

/// What an entry must say it was made from.
fn key_of(source: &SourceFile) -> String {
    let mut hasher = Sha256::new();
    hasher.update(FORMAT.as_bytes());
    hasher.update([0]);
    hasher.update(source.text.as_bytes());
    hex(&hasher.finalize())
}

/// An entry's document, when the entry was made from this key.
fn kept_json<'b>(entry: &'b [u8], key: &str) -> Option<&'b [u8]> {
    entry.strip_prefix(key.as_bytes())?.strip_prefix(b"\n")
}

/// A typed reading of a kept document that is read in parts: the document less its stages,
/// then its stages a part at a time, on the cores at hand, joined in order.
///
/// Read whole on one thread, the document of 10,000 stages took 11 ms of a 70 ms rerun, while
/// the other core had little to do.
pub(crate) trait InParts: DeserializeOwned + Send {
    /// Some of the stages, in order.
    type Part: DeserializeOwned + Send;

    /// Add the stages of `parts` to a reading of the document less its stages; false when
    /// they do not make one workflow (an id twice).
    fn join(&mut self, parts: Vec<Self::Part>) -> bool;
}

impl InParts for crate::format::WorkflowFile {
    type Part = crate::format::StagesPart;

    fn join(&mut self, parts: Vec<Self::Part>) -> bool {
        if !self.stages.is_empty() {
            return parts.is_empty();
        }
        let count = parts.iter().map(|part| part.0.len()).sum();
        self.stages.reserve_exact(count);
        for (id, stage) in parts.into_iter().flat_map(|part| part.0) {
            if self.stages.insert(id, stage).is_some() {
                return false;
            }
        }
        true
    }
}

/// Read whole, for tests that look at the document only.
#[cfg(test)]
impl InParts for serde::de::IgnoredAny {
    type Part = serde::de::IgnoredAny;

    fn join(&mut self, _: Vec<Self::Part>) -> bool {
        true
    }
}

/// An entry's document: its first line is the document with `"stages": {}`, each line after it
/// an object of some of the stages, in order. A JSON value written by serde_json holds no raw
/// line break, so the lines are the parts.
fn split_entry(json: &[u8]) -> (&[u8], Vec<&[u8]>) {
    let mut lines = json.split(|&b| b == b'\n');
    let head = lines.next().unwrap_or_default();
    (head, lines.filter(|line| !line.is_empty()).collect())
}

fn read_typed<T: InParts>(head: &[u8], parts: &[&[u8]]) -> Option<T> {
    use rayon::prelude::*;
    let mut typed: T = serde_json::from_slice(head).ok()?;
    let read = |part: &&[u8]| serde_json::from_slice(part);
    // One part is read here, without waking the pool (a workflow of 512 stages or fewer).
    let parts: Vec<T::Part> = if parts.len() <= 1 {
        parts.iter().map(read).collect::<Result<_, _>>().ok()?
    } else {
        parts.par_iter().map(read).collect::<Result<_, _>>().ok()?
    };
    typed.join(parts).then_some(typed)
}

fn read_document(head: &[u8], parts: &[&[u8]]) -> Option<Value> {
    let mut doc: Value = serde_json::from_slice(head).ok()?;
    if parts.is_empty() {
        return Some(doc);
    }
    let Some(Value::Object(stages)) = doc.get_mut("stages") else {
        return None;
    };
    let mut count = stages.len();
    for part in parts {
        let part: Map<String, Value> = serde_json::from_slice(part).ok()?;
        count += part.len();
        stages.extend(part);
    }
    // A stage named in two parts: no document this engine wrote.
    (stages.len() == count).then_some(doc)
}

/// `doc` as an entry's parts (see [`split_entry`]).
fn write_in_parts(out: &mut Vec<u8>, doc: &Value) -> serde_json::Result<()> {
    let Value::Object(members) = doc else {
        return serde_json::to_writer(out, doc);
    };
    let stages = match members.get("stages") {
        Some(Value::Object(stages)) => Some(stages),
        _ => None,
    };
    let none = Value::Object(Map::new());
    let head = members
        .iter()
        .map(|(key, value)| match (key.as_str(), stages) {
            ("stages", Some(_)) => (key, &none),
            _ => (key, value),
        });
    write_object(out, head)?;
    let Some(stages) = stages else {
        return Ok(());
    };
    let all: Vec<(&String, &Value)> = stages.iter().collect();
    for part in all.chunks(STAGES_A_PART) {
        out.push(b'\n');
        write_object(out, part.iter().copied())?;
    }
    Ok(())
}

/// A JSON object of these members, in order.
fn write_object<'v>(
    out: &mut Vec<u8>,
    members: impl Iterator<Item = (&'v String, &'v Value)>,
) -> serde_json::Result<()> {
    out.push(b'{');
    for (n, (key, value)) in members.enumerate() {
        if n > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, key)?;
        out.push(b':');
        serde_json::to_writer(&mut *out, value)?;
    }
    out.push(b'}');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
[workflow]
description = "x"

[stages.a]
shell = "echo 1"
timeout = "1.5s"
temperature = 0.1
max = 9007199254740993
when = 1979-05-27T07:32:00Z
"#;

    /// The document, never the typed reading.
    fn parse(documents: &Documents, source: &SourceFile) -> Result<Value, Vec<Diagnostic>> {
        match documents.read::<serde::de::IgnoredAny>(source, |_| false)? {
            Kept::Document(doc) => Ok(doc),
            Kept::Typed(_) => unreachable!("never usable"),
        }
    }

    /// A kept document is read as the typed workflow when the caller can use it, else given as
    /// the document; parsed from the text, it is always the document.
    #[test]
    fn a_kept_document_is_read_as_the_typed_workflow_when_usable() {
        use crate::format::WorkflowFile;
        let dir = tempfile::tempdir().unwrap();
        let documents = Documents::new(dir.path().join("documents"));
        let source = SourceFile::new("/w/b.toml", "[stages.a]\nshell = \"echo 1\"\n");
        let read = |usable: bool| documents.read::<WorkflowFile>(&source, |_| usable).unwrap();
        assert!(
            matches!(read(true), Kept::Document(_)),
            "parsed, not kept yet"
        );
        match read(true) {
            Kept::Typed(file) => assert_eq!(file.stages["a"].shell.as_deref(), Some("echo 1")),
            Kept::Document(_) => panic!("a kept workflow is read as one"),
        }
        match read(false) {
            Kept::Document(doc) => assert_eq!(doc["stages"]["a"]["shell"], "echo 1"),
            Kept::Typed(_) => panic!("not usable"),
        }
    }

    /// Deferred, nothing is written while the command runs; afterwards the entries go to the
    /// folder if the state folder exists by then, and nowhere if it does not.
    #[test]
    fn deferred_documents_are_written_after_the_command_only_if_the_state_folder_was_made() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join(".stagegraph");
        let source = SourceFile::new("/w/a.toml", TEXT);
        let entry = Documents::new(state.join("cache/documents")).entry_path(&source);

        let never = Documents::deferred(state.join("cache/documents"));
        assert!(parse(&never, &source).is_ok());
        never.write_held(&state);
        assert!(!state.exists(), "no state folder made for a document");

        let made = Documents::deferred(state.join("cache/documents"));
        parse(&made, &source).unwrap();
        assert!(!entry.exists(), "held while the command runs");
        std::fs::create_dir_all(&state).unwrap();
        made.write_held(&state);
        assert!(entry.is_file(), "written once the run made the folder");
        // The entry is the one an immediate write makes: the next run reads it.
        let text = std::fs::read_to_string(&entry).unwrap();
        std::fs::write(&entry, text.replace("echo 1", "echo kept")).unwrap();
        let next = Documents::new(state.join("cache/documents"));
        assert_eq!(
            parse(&next, &source).unwrap()["stages"]["a"]["shell"],
            "echo kept"
        );
    }

    #[test]
    fn a_kept_document_is_the_parsed_one_and_is_used_while_the_text_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let documents = Documents::new(dir.path().join("documents"));
        let source = SourceFile::new("/w/a.toml", TEXT);
        let (parsed, _) = load::parse_document(&source, 0, false).unwrap();

        assert_eq!(parse(&documents, &source).unwrap(), parsed);
        let entry = documents.entry_path(&source);
        assert!(entry.is_file(), "the document is kept");
        // Read back, not parsed: a kept document edited by hand shows through.
        let text = std::fs::read_to_string(&entry).unwrap();
        std::fs::write(&entry, text.replace("echo 1", "echo kept")).unwrap();
        let kept = parse(&documents, &source).unwrap();
        assert_eq!(kept["stages"]["a"]["shell"], "echo kept");
        // Same keys in the same order, numbers exact.
        let (parsed, _) = load::parse_document(&source, 0, false).unwrap();
        let order = |v: &Value| {
            v["stages"]["a"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(order(&kept), order(&parsed));
        assert_eq!(
            kept["stages"]["a"]["temperature"],
            parsed["stages"]["a"]["temperature"]
        );
        assert_eq!(kept["stages"]["a"]["max"], 9007199254740993_i64);
    }

    #[test]
    fn an_edited_file_or_a_corrupt_entry_is_parsed_again() {
        let dir = tempfile::tempdir().unwrap();
        let documents = Documents::new(dir.path().to_path_buf());
        let source = SourceFile::new("/w/a.toml", TEXT);
        parse(&documents, &source).unwrap();

        let edited = SourceFile::new("/w/a.toml", TEXT.replace("echo 1", "echo 2"));
        assert_eq!(
            parse(&documents, &edited).unwrap()["stages"]["a"]["shell"],
            "echo 2"
        );

        let entry = documents.entry_path(&edited);
        let text = std::fs::read_to_string(&entry).unwrap();
        std::fs::write(&entry, &text[..text.len() / 2]).unwrap();
        assert_eq!(
            parse(&documents, &edited).unwrap()["stages"]["a"]["shell"],
            "echo 2"
        );
        // And kept whole again.
        let bytes = std::fs::read(&entry).unwrap();
        let json = kept_json(&bytes, &key_of(&edited)).expect("kept for this text");
        let (head, parts) = split_entry(json);
        assert!(read_document(head, &parts).is_some());
    }

    /// A document of more stages than a part holds is kept in parts and read back whole and in
    /// order, typed or as the document; an entry that names a stage in two parts is no
    /// document this engine wrote, and the text is parsed again.
    #[test]
    fn a_large_document_is_kept_in_parts_and_read_back_in_order() {
        use crate::format::WorkflowFile;
        let n = STAGES_A_PART * 2 + 3;
        let mut text = String::from("[workflow]\ndescription = \"many\"\n");
        for i in 0..n {
            text.push_str(&format!("[stages.s{i}]\nshell = \"echo {i}\"\n"));
        }
        text.push_str("[outputs]\nlast = \"x\"\n");
        let dir = tempfile::tempdir().unwrap();
        let documents = Documents::new(dir.path().join("documents"));
        let source = SourceFile::new("/w/many.toml", text);
        let parsed = parse(&documents, &source).unwrap();

        let entry = documents.entry_path(&source);
        let bytes = std::fs::read(&entry).unwrap();
        let json = kept_json(&bytes, &key_of(&source)).expect("kept");
        let (head, parts) = split_entry(json);
        assert_eq!(parts.len(), 3, "two full parts and the rest");
        assert_eq!(read_document(head, &parts).unwrap(), parsed);
        let expected: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
        match documents.read::<WorkflowFile>(&source, |_| true).unwrap() {
            Kept::Typed(file) => {
                let ids: Vec<&String> = file.stages.keys().collect();
                assert_eq!(ids, expected.iter().collect::<Vec<_>>());
                assert_eq!(file.stages["s1026"].shell.as_deref(), Some("echo 1026"));
                assert_eq!(file.outputs["last"], "x");
            }
            Kept::Document(_) => panic!("a kept workflow is read as one"),
        }
        assert!(documents.pooled.load(Ordering::Relaxed), "read on the pool");
        documents.release_pool();
        assert!(
            !documents.pooled.load(Ordering::Relaxed),
            "its heaps collected once"
        );

        let text = String::from_utf8(bytes).unwrap();
        std::fs::write(&entry, text.replacen("\"s0\":", "\"s600\":", 1)).unwrap();
        match documents.read::<WorkflowFile>(&source, |_| true).unwrap() {
            Kept::Document(doc) => {
                let ids: Vec<&String> = doc["stages"].as_object().unwrap().keys().collect();
                assert_eq!(ids, expected.iter().collect::<Vec<_>>(), "parsed again");
            }
            Kept::Typed(_) => panic!("a stage named twice is no workflow"),
        }
    }

    #[test]
    fn invalid_toml_is_reported_and_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let documents = Documents::new(dir.path().to_path_buf());
        let source = SourceFile::new("/w/bad.toml", "[stages.a\n");
        assert!(parse(&documents, &source).is_err());
        assert!(!documents.entry_path(&source).exists());
    }
}
