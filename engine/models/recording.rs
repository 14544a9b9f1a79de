//! Recorded exchanges: one JSON file per request, named by the SHA-256 of the canonical request,
//! written atomically under `--record` and answered from under `--replay`.
//!
//! The canonical request holds what decides the reply (the model's identity, the system
//! prompt, the messages, temperature, max_tokens and the output schema) and nothing about how
//! it travels (no URL, no path of a program, no alias), nothing that does not decide it
//! (timeouts, environment) and nothing that must not be stored (keys). A recording made on one
//! machine through one transport replays on another through any transport naming the same
//! model, and is safe to commit next to the workflow it tests.
//!
//! Recordings of the first format (keyed by alias and transport) are still read: a request
//! that misses in the current format is answered by a first-format recording with the same
//! alias and content, with a note, once per folder, to migrate them ([`migrate`], `stagegraph
//! recordings migrate DIR`) or record again.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::error::{ModelError, NearestRecording};
use super::{Answer, ModelReply, ModelRequest, Retried, Role, Usage};

/// How much of two prompts the nearest-recording search compares: edit distance is quadratic.
const COMPARED_PROMPT_CHARS: usize = 2000;
/// Lines of `-` and of `+` shown in a miss's prompt diff.
const DIFF_LINES: usize = 3;
/// The format recordings are written in.
const FORMAT: u32 = 2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Message {
    pub(crate) role: Role,
    pub(crate) content: String,
}

/// The key of a recording: what decides the reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CanonicalRequest {
    pub(crate) model: String,
    pub(crate) system: Option<String>,
    pub(crate) messages: Vec<Message>,
    pub(crate) temperature: Option<f64>,
    pub(crate) max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) schema: Option<Value>,
    /// The alias that asked, for messages only: it is not hashed and not compared.
    #[serde(skip)]
    pub(crate) alias: String,
}

impl CanonicalRequest {
    pub(crate) fn new(request: &ModelRequest, model: String) -> CanonicalRequest {
        CanonicalRequest {
            model,
            system: request.system.clone(),
            messages: request
                .messages()
                .into_iter()
                .map(|(role, content)| Message { role, content })
                .collect(),
            temperature: request.temperature,
            max_tokens: request.max_tokens,
            schema: request.schema.as_deref().cloned(),
            alias: request.alias.clone(),
        }
    }

    /// Hex SHA-256 of the compact JSON form; the field order is the struct's, so it is stable.
    pub(crate) fn hash(&self) -> String {
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        let digest = Sha256::digest(&bytes);
        digest.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// The first user message.
    fn prompt(&self) -> &str {
        self.messages.first().map_or("", |m| m.content.as_str())
    }

    /// The fields in which two requests differ.
    fn differences(&self, other: &CanonicalRequest) -> Vec<String> {
        let mut fields = Vec::new();
        if self.model != other.model {
            fields.push("model");
        }
        if self.system != other.system {
            fields.push("system");
        }
        if self.prompt() != other.prompt() {
            fields.push("prompt");
        }
        if self.messages.get(1..) != other.messages.get(1..) {
            fields.push("repair turns");
        }
        if self.temperature != other.temperature {
            fields.push("temperature");
        }
        if self.max_tokens != other.max_tokens {
            fields.push("max_tokens");
        }
        if self.schema != other.schema {
            fields.push("schema");
        }
        fields.into_iter().map(str::to_string).collect()
    }

    /// Equal in everything but the model identity.
    fn same_content(&self, other: &CanonicalRequest) -> bool {
        self.system == other.system
            && self.messages == other.messages
            && self.temperature == other.temperature
            && self.max_tokens == other.max_tokens
            && self.schema == other.schema
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordedReply {
    text: String,
    usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cost_usd: Option<f64>,
}

impl RecordedReply {
    fn answer(&self) -> Answer {
        Answer {
            text: self.text.clone(),
            usage: self.usage,
            cost_usd: self.cost_usd,
            retried: Retried::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Recording {
    format: u32,
    alias: String,
    /// Migrated from the first format, which did not record the schema: the recording
    /// answers its request whatever schema the stage has now.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    migrated: bool,
    request: CanonicalRequest,
    reply: RecordedReply,
}

/// A recording of the first format, keyed by alias and transport.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FirstFormat {
    request: FirstRequest,
    reply: RecordedReply,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FirstRequest {
    alias: String,
    provider: String,
    system: Option<String>,
    prompt: String,
    temperature: Option<f64>,
    max_tokens: Option<u32>,
}

/// Where a recording read from a folder comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Current,
    /// The current format, migrated from the first: keyed by the model, without the schema.
    Migrated,
    /// The first format: keyed by alias and transport, without the schema.
    First,
}

/// A recording read from a folder, in either format.
struct Entry {
    file: String,
    alias: String,
    request: CanonicalRequest,
    reply: RecordedReply,
    kind: Kind,
}

impl Entry {
    /// Whether it answers `request` short of an exact match: a first-format recording of the
    /// same alias, or a migrated one of the same model, equal in all they recorded.
    fn stands_for(&self, request: &CanonicalRequest) -> bool {
        let content = self.request.system == request.system
            && self.request.messages == request.messages
            && self.request.temperature == request.temperature
            && self.request.max_tokens == request.max_tokens;
        match self.kind {
            Kind::Current => false,
            Kind::Migrated => content && self.request.model == request.model,
            Kind::First => content && self.alias == request.alias,
        }
    }
}

fn parse(text: &str) -> Result<(String, CanonicalRequest, RecordedReply, Kind), String> {
    let value: Value = serde_json::from_str(text).map_err(|error| error.to_string())?;
    if value.get("format").is_some() {
        let recording: Recording = serde_json::from_value(value).map_err(|e| e.to_string())?;
        if recording.format != FORMAT {
            return Err(format!(
                "format {} is not one this version reads (it writes format {FORMAT})",
                recording.format
            ));
        }
        let mut request = recording.request;
        request.alias = recording.alias.clone();
        let kind = if recording.migrated {
            Kind::Migrated
        } else {
            Kind::Current
        };
        return Ok((recording.alias, request, recording.reply, kind));
    }
    let old: FirstFormat = serde_json::from_value(value).map_err(|e| e.to_string())?;
    let request = CanonicalRequest {
        model: old.request.provider,
        system: old.request.system,
        messages: vec![Message {
            role: Role::User,
            content: old.request.prompt,
        }],
        temperature: old.request.temperature,
        max_tokens: old.request.max_tokens,
        schema: None,
        alias: old.request.alias.clone(),
    };
    Ok((old.request.alias, request, old.reply, Kind::First))
}

/// Save one exchange as `dir/<hash>.json`, atomically: a reader never sees half a file.
pub(crate) fn save(
    dir: &Path,
    request: &CanonicalRequest,
    reply: &ModelReply,
) -> Result<(), ModelError> {
    write(dir, request, reply, false)
}

fn write(
    dir: &Path,
    request: &CanonicalRequest,
    reply: &ModelReply,
    migrated: bool,
) -> Result<(), ModelError> {
    let path = dir.join(format!("{}.json", request.hash()));
    let fail = |message: String| ModelError::Recording {
        alias: request.alias.clone(),
        path: path.clone(),
        message,
    };
    let recording = Recording {
        format: FORMAT,
        alias: request.alias.clone(),
        migrated,
        request: request.clone(),
        reply: RecordedReply {
            text: reply.text.clone(),
            usage: reply.usage,
            cost_usd: reply.cost_usd,
        },
    };
    let json = serde_json::to_string_pretty(&recording)
        .map_err(|error| fail(format!("cannot serialize: {error}")))?;
    let mut json = crate::floor::secrets::redact_string(json);
    json.push('\n');
    fs::create_dir_all(dir).map_err(|error| fail(format!("cannot create the folder: {error}")))?;
    // Owner-only, as a temporary file is made.
    crate::floor::atomic::replace(&path, ".recording.", 0o600, |out| {
        out.write_all(json.as_bytes())
    })
    .map_err(|error| fail(format!("cannot write: {error}")))
}

/// Answer a request from `dir/<hash>.json`, else from a first-format recording of the same
/// alias and content or a migrated one of the same model and content, or fail naming the
/// nearest recorded request.
pub(crate) fn replay_exact(dir: &Path, request: &CanonicalRequest) -> Result<Answer, ModelError> {
    let hash = request.hash();
    let path = dir.join(format!("{hash}.json"));
    match fs::read_to_string(&path) {
        Ok(text) => {
            let (_, _, reply, _) = parse(&text).map_err(|message| ModelError::Recording {
                alias: request.alias.clone(),
                path: path.clone(),
                message: format!("not a valid recording: {message}"),
            })?;
            Ok(reply.answer())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let entries = load_all(dir);
            let old = entries.iter().find(|entry| entry.stands_for(request));
            match old {
                Some(entry) => {
                    if entry.kind == Kind::First {
                        note_first_format(dir);
                    }
                    Ok(entry.reply.answer())
                }
                None => Err(miss(dir, request, Some(hash), &entries)),
            }
        }
        Err(error) => Err(ModelError::Recording {
            alias: request.alias.clone(),
            path,
            message: format!("cannot read: {error}"),
        }),
    }
}

/// What `migrate` did to a folder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Migration {
    /// First-format recordings rewritten in the current format (the old file removed).
    pub migrated: usize,
    /// Recordings already in the current format.
    pub current: usize,
    /// Files left as they are, each with the reason.
    pub skipped: Vec<(String, String)>,
}

/// Rewrite the first-format recordings of `dir` in the current, portable format: the model is
/// read from the transport they were keyed by (`anthropic:claude-sonnet-4-5@https://...` is
/// `claude-sonnet-4-5`, `command:claude -p --model haiku`, the old built-in, is `haiku`, every
/// path in a command's argv becomes its file name), each is saved under its new name and the old
/// file removed. The first format did not record the schema, so a migrated recording answers
/// its request whatever schema the stage now has. Running it again changes nothing.
pub(crate) fn migrate(dir: &Path) -> Result<Migration, String> {
    let entries =
        fs::read_dir(dir).map_err(|error| format!("cannot read {}: {error}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    let mut migration = Migration::default();
    for path in paths {
        let file = path
            .file_name()
            .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
        let parsed = fs::read_to_string(&path)
            .map_err(|error| error.to_string())
            .and_then(|text| parse(&text));
        let (alias, mut request, reply, kind) = match parsed {
            Ok(parsed) => parsed,
            Err(message) => {
                migration
                    .skipped
                    .push((file, format!("not a recording: {message}")));
                continue;
            }
        };
        if kind != Kind::First {
            migration.current += 1;
            continue;
        }
        let Some(model) = model_of_transport(&request.model) else {
            migration.skipped.push((
                file,
                format!("no model can be read from `{}`", request.model),
            ));
            continue;
        };
        request.model = model;
        request.alias = alias;
        let reply = ModelReply {
            text: reply.text,
            usage: reply.usage,
            cost_usd: reply.cost_usd,
            ..ModelReply::default()
        };
        write(dir, &request, &reply, true).map_err(|error| error.to_string())?;
        if path != dir.join(format!("{}.json", request.hash())) {
            fs::remove_file(&path)
                .map_err(|error| format!("cannot remove {}: {error}", path.display()))?;
        }
        migration.migrated += 1;
    }
    Ok(migration)
}

/// The model a first-format provider identity names, as the current key names it.
fn model_of_transport(identity: &str) -> Option<String> {
    let (kind, rest) = identity.split_once(':')?;
    match kind {
        "anthropic" | "openai" => {
            let (model, _url) = rest.split_once('@')?;
            (!model.is_empty()).then(|| model.to_string())
        }
        "command" => {
            let words = shlex::split(rest)?;
            let program = words.first()?;
            let name = Path::new(program).file_name().map_or_else(
                || program.clone(),
                |name| name.to_string_lossy().into_owned(),
            );
            // The built-in `haiku` and `sonnet` were `claude -p --model M` commands; they are
            // the Claude Code provider now, whose key is the model.
            if name == "claude" && words.len() == 4 && words[1] == "-p" && words[2] == "--model" {
                return words.get(3).cloned();
            }
            Some(super::config::command_model(&words))
        }
        _ => None,
    }
}

/// Say once per folder that it holds first-format recordings.
fn note_first_format(dir: &Path) {
    static NOTED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
    let mut noted = NOTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if noted.insert(dir.to_path_buf()) {
        eprintln!(
            "note: {} holds recordings of the first format, keyed by alias and transport; \
             they are still read, but only where they were made: `stagegraph recordings \
             migrate {}` rewrites them in the portable format (or record again with --record {})",
            dir.display(),
            dir.display(),
            dir.display()
        );
    }
}

/// Answer a request from any recording in `dir` that matches it in everything but the model,
/// for a `replay` alias standing in for whatever provider made the recordings; one made under
/// the same alias is preferred.
pub(crate) fn replay_matching(
    dir: &Path,
    request: &CanonicalRequest,
) -> Result<Answer, ModelError> {
    let entries = load_all(dir);
    let matches = |entry: &&Entry| match entry.kind {
        Kind::Current => entry.request.same_content(request),
        // Any model: a `replay` alias stands in for whichever made it.
        Kind::Migrated => entry.stands_for(&CanonicalRequest {
            model: entry.request.model.clone(),
            ..request.clone()
        }),
        Kind::First => entry.stands_for(request),
    };
    let found = entries
        .iter()
        .filter(matches)
        .min_by_key(|entry| entry.alias != request.alias);
    match found {
        Some(entry) => Ok(entry.reply.answer()),
        None => Err(miss(dir, request, None, &entries)),
    }
}

/// Every readable recording in `dir`, by file name, in name order so that ties break the same
/// way on every machine. Unreadable files are left out: they cannot be the nearest anyway.
fn load_all(dir: &Path) -> Vec<Entry> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .filter_map(|path| {
            let text = fs::read_to_string(&path).ok()?;
            let (alias, request, reply, kind) = parse(&text).ok()?;
            let file = path.file_name()?.to_string_lossy().into_owned();
            Some(Entry {
                file,
                alias,
                request,
                reply,
                kind,
            })
        })
        .collect()
}

fn miss(
    dir: &Path,
    request: &CanonicalRequest,
    hash: Option<String>,
    entries: &[Entry],
) -> ModelError {
    let nearest = nearest(request, entries).map(|entry| {
        Box::new(NearestRecording {
            file: entry.file.clone(),
            alias: entry.alias.clone(),
            differs_in: entry.request.differences(request),
            prompt_diff: prompt_diff(entry.request.prompt(), request.prompt()),
        })
    });
    ModelError::ReplayMiss {
        alias: request.alias.clone(),
        dir: dir.to_path_buf(),
        hash,
        nearest,
    }
}

/// Same alias first, then the smallest edit distance between the prompts' beginnings, then the
/// fewest differing fields.
fn nearest<'a>(request: &CanonicalRequest, entries: &'a [Entry]) -> Option<&'a Entry> {
    let prefix = |text: &str| -> String { text.chars().take(COMPARED_PROMPT_CHARS).collect() };
    let wanted = prefix(request.prompt());
    entries.iter().min_by_key(|entry| {
        (
            entry.alias != request.alias,
            strsim::levenshtein(&prefix(entry.request.prompt()), &wanted),
            entry.request.differences(request).len(),
        )
    })
}

/// A few `-` (recorded) and `+` (requested) lines around the first difference between two
/// prompts: the lines between their common first and last lines.
fn prompt_diff(recorded: &str, requested: &str) -> String {
    if recorded == requested {
        return String::new();
    }
    let old: Vec<&str> = recorded.lines().collect();
    let new: Vec<&str> = requested.lines().collect();
    let common_head = old
        .iter()
        .zip(&new)
        .take_while(|(left, right)| left == right)
        .count();
    let common_tail = old[common_head..]
        .iter()
        .rev()
        .zip(new[common_head..].iter().rev())
        .take_while(|(left, right)| left == right)
        .count();
    let removed = &old[common_head..old.len() - common_tail];
    let added = &new[common_head..new.len() - common_tail];
    let mut out = Vec::new();
    out.push(format!("@@ prompt line {} @@", common_head + 1));
    let mut show = |sign: char, lines: &[&str]| {
        for line in lines.iter().take(DIFF_LINES) {
            out.push(format!("{sign} {}", shorten(line, 120)));
        }
        if lines.len() > DIFF_LINES {
            out.push(format!(
                "{sign} ... {} more lines",
                lines.len() - DIFF_LINES
            ));
        }
    };
    show('-', removed);
    show('+', added);
    if removed.is_empty() && added.is_empty() {
        // Only line endings or a trailing newline differ.
        out.push("  (the prompts differ only in whitespace at line ends)".to_string());
    }
    out.join("\n")
}

fn shorten(line: &str, max: usize) -> String {
    crate::floor::secrets::excerpt(line, max)
}
