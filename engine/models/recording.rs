//! Recorded exchanges: one JSON file per request, named by the SHA-256 of the canonical request,
//! written atomically under `--record` and answered from under `--replay`.
//!
//! The canonical request holds what decides the reply (alias, provider identity, system,
//! prompt, temperature, max_tokens) and nothing that does not (timeouts, environment) or must
//! not be stored (keys), so a recording is safe to commit next to the workflow it tests.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::error::{ModelError, NearestRecording};
use super::{ModelReply, ModelRequest, Usage};

/// How much of two prompts the nearest-recording search compares: edit distance is quadratic.
const COMPARED_PROMPT_CHARS: usize = 2000;
/// Lines of `-` and of `+` shown in a miss's prompt diff.
const DIFF_LINES: usize = 3;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CanonicalRequest {
    pub(crate) alias: String,
    pub(crate) provider: String,
    pub(crate) system: Option<String>,
    pub(crate) prompt: String,
    pub(crate) temperature: Option<f64>,
    pub(crate) max_tokens: Option<u32>,
}

impl CanonicalRequest {
    pub(crate) fn new(request: &ModelRequest, identity: String) -> CanonicalRequest {
        CanonicalRequest {
            alias: request.alias.clone(),
            provider: identity,
            system: request.system.clone(),
            prompt: request.prompt.clone(),
            temperature: request.temperature,
            max_tokens: request.max_tokens,
        }
    }

    /// Hex SHA-256 of the compact JSON form; the field order is the struct's, so it is stable.
    pub(crate) fn hash(&self) -> String {
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        let digest = Sha256::digest(&bytes);
        digest.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// The fields in which two requests differ.
    fn differences(&self, other: &CanonicalRequest) -> Vec<String> {
        let mut fields = Vec::new();
        if self.alias != other.alias {
            fields.push("alias");
        }
        if self.provider != other.provider {
            fields.push("provider");
        }
        if self.system != other.system {
            fields.push("system");
        }
        if self.prompt != other.prompt {
            fields.push("prompt");
        }
        if self.temperature != other.temperature {
            fields.push("temperature");
        }
        if self.max_tokens != other.max_tokens {
            fields.push("max_tokens");
        }
        fields.into_iter().map(str::to_string).collect()
    }

    /// Equal in everything but the provider identity.
    fn same_content(&self, other: &CanonicalRequest) -> bool {
        self.alias == other.alias
            && self.system == other.system
            && self.prompt == other.prompt
            && self.temperature == other.temperature
            && self.max_tokens == other.max_tokens
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordedReply {
    text: String,
    usage: Option<Usage>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Recording {
    request: CanonicalRequest,
    reply: RecordedReply,
}

/// Save one exchange as `dir/<hash>.json`, atomically: a reader never sees half a file.
pub(crate) fn save(
    dir: &Path,
    request: &CanonicalRequest,
    reply: &ModelReply,
) -> Result<(), ModelError> {
    let path = dir.join(format!("{}.json", request.hash()));
    let fail = |message: String| ModelError::Recording {
        alias: request.alias.clone(),
        path: path.clone(),
        message,
    };
    let recording = Recording {
        request: request.clone(),
        reply: RecordedReply {
            text: reply.text.clone(),
            usage: reply.usage,
        },
    };
    let mut json = serde_json::to_string_pretty(&recording)
        .map_err(|error| fail(format!("cannot serialize: {error}")))?;
    json.push('\n');
    fs::create_dir_all(dir).map_err(|error| fail(format!("cannot create the folder: {error}")))?;
    let mut temp = tempfile::NamedTempFile::new_in(dir)
        .map_err(|error| fail(format!("cannot create a temporary file: {error}")))?;
    std::io::Write::write_all(&mut temp, json.as_bytes())
        .map_err(|error| fail(format!("cannot write: {error}")))?;
    temp.persist(&path)
        .map_err(|error| fail(format!("cannot rename into place: {}", error.error)))?;
    Ok(())
}

/// Answer a request from `dir/<hash>.json`, or fail naming the nearest recorded request.
pub(crate) fn replay_exact(
    dir: &Path,
    request: &CanonicalRequest,
) -> Result<(String, Option<Usage>), ModelError> {
    let hash = request.hash();
    let path = dir.join(format!("{hash}.json"));
    match fs::read_to_string(&path) {
        Ok(text) => {
            let recording: Recording =
                serde_json::from_str(&text).map_err(|error| ModelError::Recording {
                    alias: request.alias.clone(),
                    path: path.clone(),
                    message: format!("not a valid recording: {error}"),
                })?;
            Ok((recording.reply.text, recording.reply.usage))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            Err(miss(dir, request, Some(hash), &load_all(dir)))
        }
        Err(error) => Err(ModelError::Recording {
            alias: request.alias.clone(),
            path,
            message: format!("cannot read: {error}"),
        }),
    }
}

/// Answer a request from any recording in `dir` that matches it in everything but the provider,
/// for a `replay` alias standing in for whatever provider made the recordings.
pub(crate) fn replay_matching(
    dir: &Path,
    request: &CanonicalRequest,
) -> Result<(String, Option<Usage>), ModelError> {
    let recordings = load_all(dir);
    match recordings
        .iter()
        .find(|(_, recording)| recording.request.same_content(request))
    {
        Some((_, recording)) => Ok((recording.reply.text.clone(), recording.reply.usage)),
        None => Err(miss(dir, request, None, &recordings)),
    }
}

/// Every readable recording in `dir`, by file name, in name order so that ties break the same
/// way on every machine. Unreadable files are left out: they cannot be the nearest anyway.
fn load_all(dir: &Path) -> Vec<(String, Recording)> {
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
            let recording: Recording = serde_json::from_str(&text).ok()?;
            let name = path.file_name()?.to_string_lossy().into_owned();
            Some((name, recording))
        })
        .collect()
}

fn miss(
    dir: &Path,
    request: &CanonicalRequest,
    hash: Option<String>,
    recordings: &[(String, Recording)],
) -> ModelError {
    let nearest = nearest(request, recordings).map(|(file, recorded)| {
        Box::new(NearestRecording {
            file: file.to_string(),
            alias: recorded.alias.clone(),
            differs_in: recorded.differences(request),
            prompt_diff: prompt_diff(&recorded.prompt, &request.prompt),
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
fn nearest<'a>(
    request: &CanonicalRequest,
    recordings: &'a [(String, Recording)],
) -> Option<(&'a str, &'a CanonicalRequest)> {
    let prefix = |text: &str| -> String { text.chars().take(COMPARED_PROMPT_CHARS).collect() };
    let wanted = prefix(&request.prompt);
    recordings
        .iter()
        .map(|(file, recording)| {
            let recorded = &recording.request;
            let key = (
                recorded.alias != request.alias,
                strsim::levenshtein(&prefix(&recorded.prompt), &wanted),
                recorded.differences(request).len(),
            );
            (key, file.as_str(), recorded)
        })
        .min_by_key(|(key, _, _)| *key)
        .map(|(_, file, recorded)| (file, recorded))
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
    if line.chars().count() <= max {
        line.to_string()
    } else {
        let kept: String = line.chars().take(max).collect();
        format!("{kept}...")
    }
}
