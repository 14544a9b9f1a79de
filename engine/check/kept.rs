//! Kept checks: a run of a workflow whose files have not changed reuses the workflow its last
//! check built, instead of reading, checking and assembling it again.
//!
//! A check is a pure function of the files it reads, the folder it runs in and the engine. A
//! check made for a run reads its files through a witnessed search path
//! ([`SearchPath::witnessed`]), which writes down every lookup (the workflow by name or path,
//! each template and schema) with the file it found and the SHA-256 of its text. What the check
//! built is then written to `<state>/cache/checks/`, under a key of the engine's binary, the
//! folder, the reference and the search path, beside those lookups. The next run with that key
//! makes each lookup again; when every one finds the same file with the same text, it reads the
//! workflow back (templates compiled again from their sources, schemas from their JSON, which is
//! what a check spends least on) and checks nothing. Anything else (a file changed, added where
//! a lookup found none, a corrupt or older entry) is checked as if nothing were kept, and the
//! entry replaced.
//!
//! Only a workflow that checked without a warning is kept (its warnings are said on each run),
//! from one file (an overlay chain needs its merged document for the places a run's messages
//! point at), without sub-workflow stages.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use indexmap::IndexMap;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{
    Action, CacheSpec, CheckedLock, GuardTexts, ProcessAction, ProcessOptions, PromptAction, Stage,
    StageExtras, StageText, WithTree, Workflow,
};
use crate::diag::SourceFile;
use crate::floor::Sparse;
use crate::format::{OnError, OnItemError, OutputFormat};
use crate::library::{Library, Lookup, SearchPath, Seen, Shelf, Witness};
use crate::load::RawWorkflow;
use crate::schema::Schema;
use crate::template::compiled::{SharedEnvironment, TmplSource};
use crate::template::Tmpl;

/// Bump when what is written changes.
const FORMAT: &[u8] = b"stagegraph-kept-check-1\n";

/// The kept checks of a state folder (`<state>/cache/checks`).
pub(crate) struct KeptChecks {
    dir: PathBuf,
    /// For a state folder that does not exist yet: the entry made, held until
    /// [`KeptChecks::write_held`] (as parsed documents are, `load::documents`).
    held: Option<std::sync::Mutex<Option<(PathBuf, Vec<u8>)>>>,
}

impl KeptChecks {
    pub(crate) fn new(state: &Path) -> Self {
        KeptChecks {
            dir: state.join("cache").join("checks"),
            held: None,
        }
    }

    /// Checks kept for a state folder that does not exist yet: the entry is written by
    /// [`KeptChecks::write_held`] if the folder exists by then (the run made it).
    pub(crate) fn deferred(state: &Path) -> Self {
        KeptChecks {
            held: Some(std::sync::Mutex::default()),
            ..KeptChecks::new(state)
        }
    }

    /// Write the entry held back, when `state` exists now; else let it go.
    pub(crate) fn write_held(&self, state: &Path) {
        let held = self.held.as_ref().and_then(|held| {
            held.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
        });
        if let Some((path, entry)) = held.filter(|_| state.is_dir()) {
            self.store(&path, &entry);
        }
    }

    /// A cache: an entry that cannot be written is checked again next time.
    fn store(&self, path: &Path, entry: &[u8]) {
        if std::fs::create_dir_all(&self.dir).is_ok() {
            let _ = crate::floor::atomic::write_atomic(path, entry);
        }
    }

    /// The entry of a workflow, with the key it holds good for. The file is named by the
    /// folder, the reference and the search path ([`place`]): one each, replaced when its key
    /// changes (another engine), so the folder grows only with the workflows run. The key adds
    /// the entry's format and the engine's binary (its path, size and time).
    fn entry(&self, reference: &str, cwd: &Path, search: &SearchPath) -> (PathBuf, [u8; 32]) {
        let place = place(reference, cwd, search);
        let name = Sha256::digest(&place);
        let mut key = Sha256::new();
        key.update(FORMAT);
        key.update(engine_identity());
        key.update(&place);
        (
            self.dir
                .join(format!("{}.bin", crate::floor::hash::hex(&name[..16]))),
            key.finalize().into(),
        )
    }

    /// The kept check of the workflow `reference` names, when every file its last check read
    /// is the same; `None` when it must be checked.
    pub(crate) fn open(&self, reference: &str, cwd: &Path, search: &SearchPath) -> Option<Kept> {
        let (path, key) = self.entry(reference, cwd, search);
        let bytes = std::fs::read(path).ok()?;
        let mut input = Reader::new(&bytes);
        (input.take(FORMAT.len())? == FORMAT).then_some(())?;
        (input.take(32)? == key).then_some(())?;
        // A byte changed by a disk or by hand would otherwise be read as another command.
        let sum = u32::from_le_bytes(input.take(4)?.try_into().ok()?);
        (crc32fast::hash(&bytes[input.at..]) == sum).then_some(())?;
        let name = input.string()?;
        let mut sources = Vec::new();
        for _ in 0..input.len()? {
            let lookup = input.lookup()?;
            let seen = input.option(Reader::seen)?;
            let now = search.again(&lookup);
            if now.as_ref().map(Seen::of) != seen {
                return None;
            }
            sources.extend(now);
        }
        let at = input.at;
        Some(Kept {
            name,
            bytes,
            at,
            sources,
        })
    }

    /// Keep what a check built, with the lookups it made (the witness of the search path it
    /// read through). A cache: what cannot be written is checked again next time.
    pub(crate) fn write(
        &self,
        reference: &str,
        cwd: &Path,
        search: &SearchPath,
        witness: &Witness,
        workflow: &Workflow,
    ) {
        let lookups = witness
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let Some(lookups) = lookups else { return };
        let Some(body) = body(workflow) else { return };
        let (path, key) = self.entry(reference, cwd, search);
        let mut out = Writer::default();
        out.str(&workflow.name);
        out.len(lookups.len());
        for (lookup, seen) in &lookups {
            out.lookup(lookup);
            out.option(seen.as_ref(), Writer::seen);
        }
        out.bytes.extend_from_slice(&body);
        let mut entry = Vec::with_capacity(FORMAT.len() + 36 + out.bytes.len());
        entry.extend_from_slice(FORMAT);
        entry.extend_from_slice(&key);
        entry.extend_from_slice(&crc32fast::hash(&out.bytes).to_le_bytes());
        entry.extend_from_slice(&out.bytes);
        match &self.held {
            Some(held) => {
                *held
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((path, entry));
            }
            None => self.store(&path, &entry),
        }
    }
}

/// The workflow as an entry holds it: its text templates' sources and its schemas, then the
/// rest; `None` for one that is not kept (see the module's rules).
fn body(workflow: &Workflow) -> Option<Vec<u8>> {
    let mut rest = Writer::default();
    write_workflow(&mut rest, workflow)?;
    let mut out = Writer::default();
    out.len(rest.texts.len());
    for (name, source) in &rest.texts {
        out.str(name);
        out.str(source);
    }
    out.len(rest.schemas.len());
    for schema in &rest.schemas {
        out.str(&schema.name);
        out.str(&schema.value.to_string());
    }
    out.bytes.extend_from_slice(&rest.bytes);
    Some(out.bytes)
}

/// A kept check whose files are unchanged, not yet read back.
pub(crate) struct Kept {
    name: String,
    bytes: Vec<u8>,
    /// Where the workflow starts in `bytes`.
    at: usize,
    /// The files the lookups found again.
    sources: Vec<SourceFile>,
}

impl Kept {
    /// The workflow's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The workflow read back; `None` for an entry that does not read (it is checked).
    pub(crate) fn workflow(self, search: &SearchPath) -> Option<Workflow> {
        let mut input = Reader::new(&self.bytes);
        input.at = self.at;
        read_workflow(&mut input, search, self.sources)
    }
}

/// The folder, the reference and the search path, as bytes.
fn place(reference: &str, cwd: &Path, search: &SearchPath) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut part = |part: &[u8]| {
        bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
        bytes.extend_from_slice(part);
    };
    part(cwd.as_os_str().as_encoded_bytes());
    part(reference.as_bytes());
    for library in &search.libraries {
        part(
            library
                .root
                .as_deref()
                .map_or(&b""[..], |r| r.as_os_str().as_encoded_bytes()),
        );
        part(library.origin.as_bytes());
        part(&[u8::from(library.loose)]);
    }
    bytes
}

/// The running binary, as its file is now: a rebuilt engine keeps nothing of another's.
fn engine_identity() -> &'static [u8] {
    static IDENTITY: OnceLock<Vec<u8>> = OnceLock::new();
    IDENTITY.get_or_init(|| {
        let mut identity = env!("CARGO_PKG_VERSION").as_bytes().to_vec();
        if let Ok(exe) = std::env::current_exe() {
            identity.extend_from_slice(exe.as_os_str().as_encoded_bytes());
            if let Ok(meta) = std::fs::metadata(&exe) {
                identity.extend_from_slice(&meta.len().to_le_bytes());
                let modified = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .unwrap_or_default();
                identity.extend_from_slice(&modified.as_nanos().to_le_bytes());
            }
        }
        identity
    })
}

/// Bytes written: numbers as LEB128, texts with their length first. Text templates' sources
/// and schemas are gathered apart, to be written ahead of what uses them.
#[derive(Default)]
struct Writer {
    bytes: Vec<u8>,
    /// By name: a template file two stages use is one source.
    texts: IndexMap<String, String>,
    schemas: Vec<Arc<Schema>>,
}

impl Writer {
    fn u64(&mut self, mut n: u64) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.bytes.push(byte);
                return;
            }
            self.bytes.push(byte | 0x80);
        }
    }

    fn len(&mut self, n: usize) {
        self.u64(n as u64);
    }

    fn bool(&mut self, b: bool) {
        self.bytes.push(u8::from(b));
    }

    fn str(&mut self, text: &str) {
        self.len(text.len());
        self.bytes.extend_from_slice(text.as_bytes());
    }

    fn path(&mut self, path: &Path) {
        let bytes = path.as_os_str().as_encoded_bytes();
        self.len(bytes.len());
        self.bytes.extend_from_slice(bytes);
    }

    fn f64(&mut self, n: f64) {
        self.bytes.extend_from_slice(&n.to_le_bytes());
    }

    fn duration(&mut self, d: Duration) {
        self.u64(d.as_secs());
        self.u64(u64::from(d.subsec_nanos()));
    }

    fn option<T>(&mut self, value: Option<T>, write: impl FnOnce(&mut Self, T)) {
        self.bool(value.is_some());
        if let Some(value) = value {
            write(self, value);
        }
    }

    /// A value of the format's own types, as their JSON.
    fn json<T: serde::Serialize>(&mut self, value: &T) -> Option<()> {
        self.str(&serde_json::to_string(value).ok()?);
        Some(())
    }

    fn usizes(&mut self, list: &[usize]) {
        self.len(list.len());
        for &n in list {
            self.len(n);
        }
    }

    fn strs(&mut self, list: &[String]) {
        self.len(list.len());
        for text in list {
            self.str(text);
        }
    }

    fn library(&mut self, library: &Library) {
        self.option(library.root.as_deref(), Self::path);
        self.str(library.origin);
        self.bool(library.loose);
    }

    fn seen(&mut self, seen: &Seen) {
        self.path(&seen.path);
        self.bytes.extend_from_slice(&seen.sha256);
    }

    fn lookup(&mut self, lookup: &Lookup) {
        match lookup {
            Lookup::Path(path) => {
                self.bytes.push(0);
                self.path(path);
            }
            Lookup::Workflow { name, start } => {
                self.bytes.push(1);
                self.str(name);
                self.len(*start);
            }
            Lookup::File {
                own,
                shelf,
                relative,
            } => {
                self.bytes.push(2);
                self.library(own);
                self.bytes.push(match shelf {
                    Shelf::Workflows => 0,
                    Shelf::Templates => 1,
                    Shelf::Schemas => 2,
                });
                self.str(relative);
            }
        }
    }

    fn tmpl(&mut self, tmpl: &Tmpl) {
        match tmpl.source() {
            TmplSource::Literal(text) => {
                self.bytes.push(0);
                self.str(text);
            }
            TmplSource::Interpolated {
                name,
                source,
                native,
            } => {
                self.bytes.push(1);
                self.str(name);
                self.str(source);
                self.bool(native);
            }
            TmplSource::Text { name, source } => {
                self.bytes.push(2);
                self.str(&name);
                self.texts.entry(name).or_insert(source);
            }
            TmplSource::Native(source) => {
                self.bytes.push(3);
                self.str(source);
            }
        }
    }

    fn named_tmpls(&mut self, list: &[(String, Tmpl)]) {
        self.len(list.len());
        for (name, tmpl) in list {
            self.str(name);
            self.tmpl(tmpl);
        }
    }

    fn tmpls(&mut self, list: &[Tmpl]) {
        self.len(list.len());
        for tmpl in list {
            self.tmpl(tmpl);
        }
    }

    fn schema(&mut self, schema: &Arc<Schema>) {
        let at = match self.schemas.iter().position(|s| Arc::ptr_eq(s, schema)) {
            Some(at) => at,
            None => {
                self.schemas.push(Arc::clone(schema));
                self.schemas.len() - 1
            }
        };
        self.len(at);
    }

    fn with_tree(&mut self, tree: &WithTree) {
        match tree {
            WithTree::Literal(value) => {
                self.bytes.push(0);
                self.str(&value.to_string());
            }
            WithTree::Template(tmpl) => {
                self.bytes.push(1);
                self.tmpl(tmpl);
            }
            WithTree::Array(items) => {
                self.bytes.push(2);
                self.len(items.len());
                for item in items {
                    self.with_tree(item);
                }
            }
            WithTree::Object(entries) => {
                self.bytes.push(3);
                self.len(entries.len());
                for (key, item) in entries {
                    self.str(key);
                    self.with_tree(item);
                }
            }
        }
    }
}

/// The workflow, or `None` for one that is not kept (see the module's rules).
fn write_workflow(out: &mut Writer, w: &Workflow) -> Option<()> {
    let single = w.raw.sources.len() == 1 && w.raw.disabled.is_empty();
    if !w.warnings.is_empty() || !single {
        return None;
    }
    out.str(&w.name);
    out.option(w.description.as_deref(), Writer::str);
    out.json(&w.inputs)?;
    out.strs(&w.env);
    out.bool(w.always_exit_zero);
    out.json(&w.hook)?;
    out.json(&w.records)?;
    out.option(w.budget_usd, Writer::f64);
    out.u64(w.max_output);
    out.str(&w.raw.name);
    out.library(&w.raw.library);
    out.path(&w.raw.sources[0].path);
    out.len(w.stages.len());
    for stage in &w.stages {
        write_stage(out, stage)?;
    }
    out.usizes(&w.order);
    out.len(w.dependents.len());
    for dependents in &w.dependents {
        out.usizes(dependents);
    }
    out.named_tmpls(&w.outputs);
    out.named_tmpls(&w.child_env);
    out.tmpls(&w.writes);
    match &w.lock {
        None => out.bool(false),
        Some(lock) => {
            out.bool(true);
            out.tmpl(&lock.path);
            out.json(&lock.busy)?;
            out.option(lock.stale_after, Writer::duration);
            out.option(lock.message.as_ref(), Writer::tmpl);
        }
    }
    out.option(w.records_project.as_ref(), Writer::tmpl);
    out.option(w.records_keep_size, Writer::u64);
    out.option(w.records_max_size, Writer::u64);
    out.len(w.file_hashes.len());
    for (path, sha256) in &w.file_hashes {
        out.str(path);
        out.str(sha256);
    }
    Some(())
}

fn write_stage(out: &mut Writer, stage: &Stage) -> Option<()> {
    out.str(&stage.id);
    out.option(stage.text.description.as_deref(), Writer::str);
    out.str(&stage.text.action);
    out.option(stage.text.if_(), Writer::str);
    out.option(stage.text.exit_if(), Writer::str);
    out.option(stage.text.foreach(), Writer::str);
    out.strs(stage.text.asserts());
    match &stage.action {
        Action::None => out.bytes.push(0),
        Action::Command(process) | Action::Shell(process) => {
            out.bytes
                .push(if matches!(stage.action, Action::Command(_)) {
                    1
                } else {
                    2
                });
            out.tmpls(&process.argv);
            out.option(process.stdin(), Writer::tmpl);
            out.option(process.cwd(), Writer::tmpl);
            out.named_tmpls(process.env());
            out.len(process.ok_codes().len());
            for &code in process.ok_codes() {
                out.u64(u64::from(code as u32));
            }
        }
        Action::Prompt(prompt) => {
            out.bytes.push(3);
            out.tmpl(&prompt.prompt);
            out.option(prompt.system.as_ref(), Writer::tmpl);
            out.option(prompt.prefix.as_ref(), Writer::tmpl);
            out.str(&prompt.model);
        }
        Action::Template(tmpl) => {
            out.bytes.push(4);
            out.tmpl(tmpl);
        }
        Action::Uses { builtin, with } => {
            out.bytes.push(5);
            out.str(builtin.name);
            out.with_tree(with);
        }
        Action::Workflow { .. } => return None,
    }
    out.usizes(&stage.deps);
    out.bytes.push(match stage.format {
        OutputFormat::Text => 0,
        OutputFormat::Json => 1,
        OutputFormat::Lines => 2,
    });
    out.option(stage.schema.as_ref(), Writer::schema);
    out.option(stage.cache.as_ref(), |out, cache| {
        out.option(cache.key.as_ref(), Writer::tmpl);
        out.option(cache.ttl, Writer::duration);
    });
    out.bytes.push(match stage.on_error {
        OnError::Fail => 0,
        OnError::Continue => 1,
        OnError::Exit => 2,
    });
    out.bool(stage.finally);
    out.bytes.extend_from_slice(&stage.definition_hash);
    match &stage.extras {
        None => out.bool(false),
        Some(extras) => {
            out.bool(true);
            write_extras(out, extras)?;
        }
    }
    Some(())
}

fn write_extras(out: &mut Writer, e: &StageExtras) -> Option<()> {
    out.option(e.if_.as_ref(), Writer::tmpl);
    out.option(e.exit_if.as_ref(), Writer::tmpl);
    out.option(e.exit_message.as_ref(), Writer::tmpl);
    out.len(e.asserts.len());
    for (that, message) in &e.asserts {
        out.tmpl(that);
        out.option(message.as_ref(), Writer::tmpl);
    }
    out.option(e.foreach.as_ref(), Writer::tmpl);
    out.option(e.output_path.as_ref(), Writer::tmpl);
    out.named_tmpls(&e.set_state);
    out.option(e.timeout, Writer::duration);
    out.option(e.max_output, Writer::u64);
    out.u64(u64::from(e.retries));
    out.duration(e.retry_backoff);
    out.u64(u64::from(e.repair));
    out.option(e.concurrency, Writer::len);
    out.bool(e.on_item_error == OnItemError::Continue);
    out.option(e.temperature, Writer::f64);
    out.option(e.max_tokens.map(u64::from), Writer::u64);
    match &e.dry_run_output {
        None => out.bool(false),
        Some(value) => {
            out.bool(true);
            out.json(value)?;
        }
    }
    Some(())
}

/// Bytes read back; every read is checked, and `None` says the entry is unusable.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    env: Option<SharedEnvironment>,
    schemas: Vec<Arc<Schema>>,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader {
            bytes,
            at: 0,
            env: None,
            schemas: Vec::new(),
        }
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let slice = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u64(&mut self) -> Option<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            n |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(n);
            }
        }
        None
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.u64()?).ok()
    }

    fn len(&mut self) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        // No list holds more items than there are bytes left.
        (n <= self.bytes.len() - self.at).then_some(n)
    }

    fn bool(&mut self) -> Option<bool> {
        match self.byte()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    fn str(&mut self) -> Option<&'a str> {
        let n = self.len()?;
        std::str::from_utf8(self.take(n)?).ok()
    }

    fn string(&mut self) -> Option<String> {
        self.str().map(str::to_string)
    }

    fn path(&mut self) -> Option<PathBuf> {
        let n = self.len()?;
        let bytes = self.take(n)?;
        Some(PathBuf::from(std::str::from_utf8(bytes).ok()?))
    }

    fn f64(&mut self) -> Option<f64> {
        Some(f64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn duration(&mut self) -> Option<Duration> {
        let secs = self.u64()?;
        let nanos = self.u32()?;
        (nanos < 1_000_000_000).then(|| Duration::new(secs, nanos))
    }

    /// An optional value: `Some(None)` when absent, `None` when unreadable (as every read here
    /// says it).
    #[allow(clippy::option_option)]
    fn option<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        match self.bool()? {
            false => Some(None),
            true => read(self).map(Some),
        }
    }

    fn json<T: serde::de::DeserializeOwned>(&mut self) -> Option<T> {
        serde_json::from_str(self.str()?).ok()
    }

    fn list<T>(&mut self, mut read: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let n = self.len()?;
        let mut list = Vec::with_capacity(n);
        for _ in 0..n {
            list.push(read(self)?);
        }
        Some(list)
    }

    fn usizes(&mut self) -> Option<Vec<usize>> {
        self.list(Self::len_value)
    }

    fn len_value(&mut self) -> Option<usize> {
        usize::try_from(self.u64()?).ok()
    }

    fn strs(&mut self) -> Option<Vec<String>> {
        self.list(Self::string)
    }

    fn library(&mut self) -> Option<Library> {
        let root = self.option(Self::path)?;
        // The origins a library is given (`SearchPath::from_env`, a workflow named by path).
        let origin = match self.str()? {
            "--library" => "--library",
            "STAGEGRAPH_PATH" => "STAGEGRAPH_PATH",
            "project" => "project",
            "root" => "root",
            "user" => "user",
            "built-in" => "built-in",
            "file" => "file",
            _ => return None,
        };
        Some(Library {
            root,
            origin,
            loose: self.bool()?,
        })
    }

    fn seen(&mut self) -> Option<Seen> {
        Some(Seen {
            path: self.path()?,
            sha256: self.take(32)?.try_into().ok()?,
        })
    }

    fn lookup(&mut self) -> Option<Lookup> {
        Some(match self.byte()? {
            0 => Lookup::Path(self.path()?),
            1 => Lookup::Workflow {
                name: self.string()?,
                start: self.len_value()?,
            },
            2 => Lookup::File {
                own: self.library()?,
                shelf: match self.byte()? {
                    0 => Shelf::Workflows,
                    1 => Shelf::Templates,
                    2 => Shelf::Schemas,
                    _ => return None,
                },
                relative: self.string()?,
            },
            _ => return None,
        })
    }

    fn tmpl(&mut self) -> Option<Tmpl> {
        let source = match self.byte()? {
            0 => TmplSource::Literal(self.str()?),
            1 => TmplSource::Interpolated {
                name: self.str()?,
                source: self.str()?,
                native: self.bool()?,
            },
            2 => TmplSource::Text {
                name: self.string()?,
                source: String::new(),
            },
            3 => TmplSource::Native(self.str()?),
            _ => return None,
        };
        Tmpl::from_source(self.env.as_ref()?, source)
    }

    fn named_tmpls(&mut self) -> Option<Vec<(String, Tmpl)>> {
        self.list(|r| Some((r.string()?, r.tmpl()?)))
    }

    fn tmpls(&mut self) -> Option<Vec<Tmpl>> {
        self.list(Self::tmpl)
    }

    fn schema(&mut self) -> Option<Arc<Schema>> {
        let at = self.len_value()?;
        self.schemas.get(at).cloned()
    }

    fn with_tree(&mut self) -> Option<WithTree> {
        Some(match self.byte()? {
            0 => WithTree::Literal(serde_json::from_str(self.str()?).ok()?),
            1 => WithTree::Template(self.tmpl()?),
            2 => WithTree::Array(self.list(Self::with_tree)?),
            3 => WithTree::Object(self.list(|r| Some((r.string()?, r.with_tree()?)))?),
            _ => return None,
        })
    }
}

/// The workflow read back, its file's text from `sources` (the lookups made again).
fn read_workflow(
    input: &mut Reader<'_>,
    search: &SearchPath,
    sources: Vec<SourceFile>,
) -> Option<Workflow> {
    let texts = input.list(|r| Some((r.string()?, r.string()?)))?;
    input.schemas = input.list(|r| {
        let name = r.string()?;
        let value: Value = serde_json::from_str(r.str()?).ok()?;
        Schema::from_value(value, &name).ok().map(Arc::new)
    })?;
    let name = input.string()?;
    let description = input.option(Reader::string)?;
    let inputs = input.json()?;
    let env_names = input.strs()?;
    let always_exit_zero = input.bool()?;
    let hook = input.json()?;
    let records = input.json()?;
    let budget_usd = input.option(Reader::f64)?;
    let max_output = input.u64()?;
    let raw_name = input.string()?;
    let library = input.library()?;
    let path = input.path()?;
    let source = sources.into_iter().find(|s| s.path == path)?;
    // The environment as check makes it: the engine's functions, the library's templates
    // loaded on demand, and each text template's source.
    let mut env = crate::template::environment();
    let (loader_search, loader_library) = (search.clone(), library.clone());
    env.set_loader(move |name| {
        Ok(loader_search
            .find_file(&loader_library, Shelf::Templates, name)
            .map(|source| crate::template::bounded_source(&source.text)))
    });
    for (name, source) in texts {
        crate::template::guarded(|| env.add_template_owned(name, source)).ok()?;
    }
    input.env = Some(Arc::new(env));
    let mut stages = input.list(read_stage)?;
    for (index, stage) in stages.iter_mut().enumerate() {
        stage.index = index;
    }
    let order = input.usizes()?;
    let dependents = input.list(Reader::usizes)?;
    let outputs = input.named_tmpls()?;
    let child_env = input.named_tmpls()?;
    let writes = input.tmpls()?;
    let lock = input.option(|r| {
        Some(CheckedLock {
            path: r.tmpl()?,
            busy: r.json()?,
            stale_after: r.option(Reader::duration)?,
            message: r.option(Reader::tmpl)?,
        })
    })?;
    let records_project = input.option(Reader::tmpl)?;
    let records_keep_size = input.option(Reader::u64)?;
    let records_max_size = input.option(Reader::u64)?;
    let file_hashes = input.list(|r| Some((r.string()?, r.string()?)))?;
    (input.at == input.bytes.len()).then_some(())?;
    let n = stages.len();
    let in_range = |list: &[usize]| list.iter().all(|&i| i < n);
    if order.len() != n
        || !in_range(&order)
        || dependents.len() != n
        || !dependents.iter().all(|d| in_range(d))
        || !stages.iter().all(|s| in_range(&s.deps))
    {
        return None;
    }
    Some(Workflow {
        name,
        description,
        inputs,
        env: env_names,
        always_exit_zero,
        hook,
        records,
        budget_usd,
        max_output,
        raw: RawWorkflow::checked(raw_name, source, library),
        stages,
        order,
        dependents,
        outputs,
        child_env,
        writes,
        lock,
        records_project,
        records_keep_size,
        records_max_size,
        file_hashes,
        warnings: Vec::new(),
    })
}

fn read_stage(input: &mut Reader<'_>) -> Option<Stage> {
    let id = input.string()?;
    let description = input.option(|r| r.str().map(Box::from))?;
    let action_text: Box<str> = input.str()?.into();
    let guards = GuardTexts {
        if_: input.option(|r| r.str().map(Box::from))?,
        exit_if: input.option(|r| r.str().map(Box::from))?,
        foreach: input.option(|r| r.str().map(Box::from))?,
        asserts: input.strs()?,
    };
    let process = |input: &mut Reader<'_>| {
        let argv = input.tmpls()?;
        let stdin = input.option(Reader::tmpl)?;
        let cwd = input.option(Reader::tmpl)?;
        let env = input.named_tmpls()?;
        let codes = input.list(|r| r.u32().map(|c| c as i32))?;
        let ok_codes = (codes != [0]).then(|| codes.into_boxed_slice());
        Some(ProcessAction::new(
            argv,
            ProcessOptions {
                stdin,
                cwd,
                env,
                ok_codes,
            },
        ))
    };
    let action = match input.byte()? {
        0 => Action::None,
        1 => Action::Command(process(input)?),
        2 => Action::Shell(process(input)?),
        3 => Action::Prompt(Box::new(PromptAction {
            prompt: input.tmpl()?,
            system: input.option(Reader::tmpl)?,
            prefix: input.option(Reader::tmpl)?,
            model: input.string()?,
        })),
        4 => Action::Template(input.tmpl()?),
        5 => Action::Uses {
            builtin: crate::builtins::lookup(input.str()?)?,
            with: Box::new(input.with_tree()?),
        },
        _ => return None,
    };
    let deps = input.usizes()?;
    let format = match input.byte()? {
        0 => OutputFormat::Text,
        1 => OutputFormat::Json,
        2 => OutputFormat::Lines,
        _ => return None,
    };
    let schema = input.option(Reader::schema)?;
    let cache = input.option(|r| {
        Some(CacheSpec {
            key: r.option(Reader::tmpl)?,
            ttl: r.option(Reader::duration)?,
        })
    })?;
    let on_error = match input.byte()? {
        0 => OnError::Fail,
        1 => OnError::Continue,
        2 => OnError::Exit,
        _ => return None,
    };
    let finally = input.bool()?;
    let definition_hash = input.take(32)?.try_into().ok()?;
    let extras = input.option(read_extras)?.and_then(Sparse::boxed);
    Some(Stage {
        index: 0,
        id,
        text: StageText::new(description, action_text, guards),
        action,
        deps,
        format,
        schema,
        cache,
        on_error,
        finally,
        definition_hash,
        extras,
    })
}

fn read_extras(input: &mut Reader<'_>) -> Option<StageExtras> {
    Some(StageExtras {
        if_: input.option(Reader::tmpl)?,
        exit_if: input.option(Reader::tmpl)?,
        exit_message: input.option(Reader::tmpl)?,
        asserts: input.list(|r| Some((r.tmpl()?, r.option(Reader::tmpl)?)))?,
        foreach: input.option(Reader::tmpl)?,
        output_path: input.option(Reader::tmpl)?,
        set_state: input.named_tmpls()?,
        timeout: input.option(Reader::duration)?,
        max_output: input.option(Reader::u64)?,
        retries: input.u32()?,
        retry_backoff: input.duration()?,
        repair: input.u32()?,
        concurrency: input.option(Reader::len_value)?,
        on_item_error: match input.bool()? {
            true => OnItemError::Continue,
            false => OnItemError::Fail,
        },
        temperature: input.option(Reader::f64)?,
        max_tokens: input.option(Reader::u32)?,
        dry_run_output: match input.bool()? {
            false => None,
            true => Some(Box::new(input.json()?)),
        },
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// Every workflow of the test fixtures and the shipped library that is kept reads back to
    /// one that is written again byte for byte (every field the entry holds, held the same),
    /// and an entry cut short anywhere reads as nothing rather than a panic.
    #[test]
    fn every_kept_workflow_reads_back_as_it_was_written() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files: Vec<PathBuf> = ["tests/fixtures/run/workflows", "workflows"]
            .iter()
            .flat_map(|dir| std::fs::read_dir(root.join(dir)).expect("a fixture folder"))
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.extension().is_some_and(|e| e == "toml")
                    && !p.to_string_lossy().ends_with(".test.toml")
            })
            .collect();
        files.sort();
        let mut kept = 0;
        for file in &files {
            let fixtures = file.parent().and_then(Path::parent).expect("a library");
            let search = SearchPath::new(vec![Library::dir(fixtures, "root"), Library::builtin()]);
            let reference = file.to_string_lossy();
            let Ok(raw) = crate::load::load(&search, &reference, root) else {
                continue;
            };
            let Ok(workflow) = super::super::check(raw, &search, root) else {
                continue;
            };
            let Some(bytes) = body(&workflow) else {
                continue;
            };
            kept += 1;
            let source = workflow.raw.file().clone();
            let back = read_workflow(&mut Reader::new(&bytes), &search, vec![source.clone()])
                .unwrap_or_else(|| panic!("{} does not read back", file.display()));
            assert_eq!(body(&back), Some(bytes.clone()), "{}", file.display());
            assert_eq!(back.stages.len(), workflow.stages.len());
            for cut in (0..bytes.len()).step_by(bytes.len() / 64 + 1) {
                let read = read_workflow(
                    &mut Reader::new(&bytes[..cut]),
                    &search,
                    vec![source.clone()],
                );
                assert!(read.is_none(), "{} cut at {cut} reads", file.display());
            }
        }
        // All of them when this was written (30: the shipped six among them).
        assert!(kept >= 25, "only {kept} of {} workflows kept", files.len());
    }
}
