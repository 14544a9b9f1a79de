//! Built-in `transcript.delta`: what was said in a Claude Code session transcript (JSONL) after a
//! line cursor: the user's and the assistant's prose, with tool traffic, thinking, images and
//! Claude Code's own bookkeeping left out, control characters stripped, and the text capped.
//!
//! The user speaks in more places than `user` lines: a message typed while the assistant works
//! is a `queue-operation` line (`enqueue` with its text; `remove` with `absorbed_mid_turn` when
//! the assistant read it without a `user` line following) or an `attachment` of type
//! `queued_command`; an answer to `AskUserQuestion` is a `tool_result` (with the answers in the
//! line's `toolUseResult`). All of them are the user's words, each said once. What only looks
//! like a user line is not: slash-command echoes (`<command-name>`), local command output
//! (`<local-command-stdout>`, with its ANSI escapes), `[Request interrupted by user]`,
//! `<system-reminder>` blocks, and the compaction summary (`isCompactSummary`), which restates
//! earlier lines and is given apart as `summary`, never as the user's words.
//!
//! Invariants: `total_lines` counts complete lines only, so a line still being written is never
//! passed by the next cursor; lines before the cursor are counted, never parsed; memory stays
//! bounded by the caps, whatever the size of the file; a line with a lone UTF-16 surrogate is
//! read with the character replaced, never dropped.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};
use std::path::Path;
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;
use schemars::JsonSchema;
use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::args;
use super::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult};
use crate::floor::time::Clock;

/// Appended where a text was cut.
const CUT_MARKER: &str = "…";

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![Builtin {
        name: "transcript.delta",
        description: "the user and assistant prose of a Claude Code transcript after a line cursor",
        writes: false,
        with_schema: args::schema::<DeltaArgs>,
        with_parse: args::parses::<DeltaArgs>,
        output_schema,
        run,
    }]
}

/// Where the transcript is and which part of it to read.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DeltaArgs {
    /// The transcript file (JSONL, one JSON object per line); relative paths resolve against the
    /// run's working directory.
    #[schemars(length(min = 1))]
    path: String,
    /// The cursor: how many lines were already read. The delta is every complete line after it;
    /// pass the previous run's total_lines.
    #[serde(default)]
    after_line: u64,
    /// When after_line is past the end of the file (rotated or truncated), the delta is this many
    /// last lines instead.
    #[serde(default = "default_fallback_lines")]
    fallback_lines: u64,
    /// Cap in bytes on the prose of one message; a longer one is cut on a character boundary and
    /// ends with "…".
    #[serde(default = "default_max_part_bytes")]
    #[schemars(range(min = 1))]
    max_part_bytes: usize,
    /// Cap in bytes on the whole text; when over, the oldest messages are left out first.
    #[serde(default = "default_max_bytes")]
    #[schemars(range(min = 1))]
    max_bytes: usize,
    /// Before reading, wait until the file has not changed for this long (e.g. "500ms"; at most 20
    /// times it): for a transcript its writer may still be flushing.
    #[schemars(transform = args::not_null)]
    settle: Option<String>,
    /// When true, a missing file gives an empty delta with `missing` true instead of an error.
    #[serde(default)]
    optional: bool,
}

fn default_fallback_lines() -> u64 {
    500
}

fn default_max_part_bytes() -> usize {
    2048
}

fn default_max_bytes() -> usize {
    16384
}

fn run(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    delta(with, ctx, &Clock::system())
}

/// [`run`], with `settle` waiting on `clock`.
fn delta(with: &Value, ctx: &BuiltinCtx, clock: &Clock) -> BuiltinResult {
    let args: DeltaArgs = serde_json::from_value(with.clone())
        .map_err(|err| BuiltinError::new(format!("invalid transcript.delta arguments: {err}")))?;
    let path = ctx.resolve(&args.path);
    if let Some(text) = args.settle.as_deref() {
        let quiet = crate::floor::duration::parse(text)
            .map_err(|err| BuiltinError::new(format!("transcript.delta: `settle`: {err}")))?;
        settle(&path, quiet, ctx, clock)?;
    }
    let (delta, missing) = match read_delta(&path, &args, ctx.cancel) {
        Ok(delta) => (delta, false),
        // Claude Code may fire a hook before it has written a session's first lines.
        Err(err) if err.kind() == io::ErrorKind::NotFound && args.optional => {
            (Delta::new(&args), true)
        }
        Err(err) => {
            return Err(BuiltinError::new(format!(
                "cannot read transcript `{}`: {err}",
                args.path
            )))
        }
    };
    let mut out = delta.into_json(&args.path);
    out["missing"] = json!(missing);
    Ok(out)
}

/// Wait until the file has not changed size (nor appeared or gone) for `quiet`: a host that
/// fires a hook before it has flushed the turn's last lines writes them within moments. The
/// wait ends at the stage's timeout or an interrupt, and after 20 times `quiet` in any case.
fn settle(
    path: &Path,
    quiet: Duration,
    ctx: &BuiltinCtx,
    clock: &Clock,
) -> Result<(), BuiltinError> {
    let size = || std::fs::metadata(path).ok().map(|m| m.len());
    let step = (quiet / 10).clamp(Duration::from_millis(5), Duration::from_millis(100));
    let give_up = clock.now() + quiet * 20;
    let mut last = size();
    let mut since = clock.now();
    while clock.since(since) < quiet && clock.now() < give_up {
        ctx.cancel.check()?;
        clock.sleep(step);
        let now = size();
        if now != last {
            last = now;
            since = clock.now();
        }
    }
    Ok(())
}

/// Who said a piece of prose.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Speaker {
    User,
    Assistant,
}

impl Speaker {
    fn prefix(self) -> &'static str {
        match self {
            Speaker::User => "user: ",
            Speaker::Assistant => "assistant: ",
        }
    }
}

/// One line of the transcript, read only as far as the delta needs; every other field is skipped
/// without being built, and tool payloads are kept as raw JSON, parsed only when they answer a
/// question, which keeps large tool traffic cheap.
#[derive(Deserialize)]
struct TranscriptLine<'a> {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(rename = "isMeta", default)]
    is_meta: Option<bool>,
    #[serde(rename = "isSidechain", default)]
    is_sidechain: Option<bool>,
    #[serde(rename = "isCompactSummary", default)]
    is_compact_summary: Option<bool>,
    #[serde(default, borrow)]
    message: Option<Message<'a>>,
    /// `queue-operation`: enqueue, dequeue, remove, popAll.
    #[serde(default)]
    operation: Option<String>,
    /// `queue-operation`: why an entry left the queue.
    #[serde(default)]
    reason: Option<String>,
    /// Of the Claude Code version that wrote the line (most lines but the queue's carry one):
    /// whether it records an absorbed queued message as a `remove` without a reason.
    #[serde(
        rename = "version",
        default,
        deserialize_with = "version_removes_absorb"
    )]
    removes_absorb: Option<bool>,
    /// `queue-operation`: the queued text; other lines may carry other things here.
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
    #[serde(default, borrow)]
    attachment: Option<&'a RawValue>,
    /// The structured result of the tool call this line answers (AskUserQuestion's answers).
    #[serde(rename = "toolUseResult", default, borrow)]
    tool_use_result: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(default)]
    role: Option<String>,
    #[serde(default, borrow)]
    content: Option<Content<'a>>,
}

enum Content<'a> {
    Text(String),
    Blocks(Vec<Block<'a>>),
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    tool_use_id: Option<String>,
    #[serde(default, borrow)]
    input: Option<&'a RawValue>,
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ContentVisitor<'a>(std::marker::PhantomData<&'a ()>);

        impl<'de: 'a, 'a> Visitor<'de> for ContentVisitor<'a> {
            type Value = Content<'a>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or a list of content blocks")
            }

            fn visit_str<E>(self, text: &str) -> Result<Content<'a>, E> {
                Ok(Content::Text(text.to_owned()))
            }

            fn visit_string<E>(self, text: String) -> Result<Content<'a>, E> {
                Ok(Content::Text(text))
            }

            fn visit_unit<E>(self) -> Result<Content<'a>, E> {
                Ok(Content::Blocks(Vec::new()))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content<'a>, A::Error> {
                let mut blocks = Vec::new();
                while let Some(block) = seq.next_element::<Block<'a>>()? {
                    blocks.push(block);
                }
                Ok(Content::Blocks(blocks))
            }
        }

        deserializer.deserialize_any(ContentVisitor(std::marker::PhantomData))
    }
}

/// The text of a raw `content` or `prompt`: a string, or the text blocks of a list.
fn raw_text(raw: &RawValue) -> Option<String> {
    match serde_json::from_str::<Content>(raw.get()).ok()? {
        Content::Text(text) => Some(text),
        Content::Blocks(blocks) => {
            let texts: Vec<String> = blocks
                .into_iter()
                .filter(|block| block.kind.as_deref() == Some("text"))
                .filter_map(|block| block.text)
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
    }
}

/// An `attachment` of type `queued_command`: a message the user typed while the assistant
/// worked.
#[derive(Deserialize)]
struct QueuedCommand<'a> {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default, borrow)]
    prompt: Option<&'a RawValue>,
}

/// The questions of an `AskUserQuestion` call.
#[derive(Deserialize)]
struct AskInput {
    #[serde(default)]
    questions: Vec<AskQuestion>,
}

#[derive(Deserialize)]
struct AskQuestion {
    #[serde(default)]
    question: String,
}

/// `toolUseResult` of an `AskUserQuestion` call: question -> answer.
#[derive(Deserialize)]
struct AskResult {
    #[serde(default)]
    answers: serde_json::Map<String, Value>,
}

/// What one line turned out to be.
enum Parsed<'a> {
    Blank,
    /// Not JSON at all.
    Invalid,
    /// JSON, but not a line this built-in reads (odd shape).
    Other,
    Line(TranscriptLine<'a>),
}

fn parse_line<'a>(bytes: &'a [u8], repaired: &'a mut Vec<u8>) -> Parsed<'a> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Parsed::Blank;
    }
    if let Ok(line) = serde_json::from_slice::<TranscriptLine>(bytes) {
        return Parsed::Line(line);
    }
    // A lone UTF-16 surrogate (`\ud83d` without its pair) is not valid JSON for serde; the line
    // is still what someone said, so the character is replaced and the line read again.
    if replace_lone_surrogates(bytes, repaired) {
        if let Ok(line) = serde_json::from_slice::<TranscriptLine>(repaired) {
            return Parsed::Line(line);
        }
    }
    // A shape this reader does not know is still a line of the transcript, not damage.
    let text: &[u8] = if repaired.is_empty() { bytes } else { repaired };
    if serde_json::from_slice::<IgnoredAny>(text).is_ok() {
        Parsed::Other
    } else {
        Parsed::Invalid
    }
}

/// Whether a line holds a lone surrogate that [`parse_line`] replaces (checked only to count
/// such lines; the common line has no `\u` escape of a surrogate at all).
fn needs_repair(bytes: &[u8]) -> bool {
    let mut scratch = Vec::new();
    bytes.windows(3).any(|w| w == b"\\ud" || w == b"\\uD")
        && replace_lone_surrogates(bytes, &mut scratch)
}

/// Writes `bytes` to `out` with every `\uXXXX` escape of a lone surrogate replaced by `\ufffd`;
/// false (and `out` empty) when there was none.
fn replace_lone_surrogates(bytes: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    let hex4 = |at: usize| -> Option<u16> {
        let digits = bytes.get(at..at + 4)?;
        u16::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    };
    let is_high = |unit: u16| (0xD800..0xDC00).contains(&unit);
    let is_low = |unit: u16| (0xDC00..0xE000).contains(&unit);
    let mut replaced = false;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        if bytes.get(i + 1) != Some(&b'u') {
            // Any other escape: copied whole, so `\\u` (an escaped backslash) is not read as one.
            out.extend_from_slice(&bytes[i..(i + 2).min(bytes.len())]);
            i += 2;
            continue;
        }
        match hex4(i + 2) {
            Some(unit) if is_high(unit) => {
                let paired = bytes.get(i + 6) == Some(&b'\\')
                    && bytes.get(i + 7) == Some(&b'u')
                    && hex4(i + 8).is_some_and(is_low);
                if paired {
                    out.extend_from_slice(&bytes[i..i + 12]);
                    i += 12;
                } else {
                    out.extend_from_slice(b"\\ufffd");
                    replaced = true;
                    i += 6;
                }
            }
            Some(unit) if is_low(unit) => {
                out.extend_from_slice(b"\\ufffd");
                replaced = true;
                i += 6;
            }
            _ => {
                out.extend_from_slice(&bytes[i..(i + 6).min(bytes.len())]);
                i += 6;
            }
        }
    }
    if !replaced {
        out.clear();
    }
    replaced
}

static REMINDER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)<system-reminder>.*?(?:</system-reminder>|\z)").expect("constant pattern")
});

static COMMAND_ARGS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)<command-args>(.*?)</command-args>").expect("constant pattern")
});

/// `text` without terminal escape sequences and control characters (newlines and tabs kept).
///
/// The escapes are read by a terminal's own parser (vte, a VT500-series state machine), so
/// every kind is dropped whole: CSI, OSC, DCS, SOS/PM/APC strings, two-byte escapes.
/// `strip-ansi-escapes`, built on the same parser, would drop tabs too.
pub(crate) fn strip_controls(text: &str) -> String {
    struct Printed(String);
    impl vte::Perform for Printed {
        fn print(&mut self, c: char) {
            if !c.is_control() {
                self.0.push(c);
            }
        }
        fn execute(&mut self, byte: u8) {
            if byte == b'\n' || byte == b'\t' {
                self.0.push(char::from(byte));
            }
        }
    }
    let mut printed = Printed(String::with_capacity(text.len()));
    vte::Parser::new().advance(&mut printed, text.as_bytes());
    printed.0
}

/// What a piece of user text really is.
enum UserText {
    /// Words the user wrote (or typed as a slash command's arguments).
    Said(String),
    /// Claude Code's own echo or output: not prose.
    Noise,
}

/// Tells the user's words from Claude Code's echoes in a user line's text.
fn classify_user_text(text: &str) -> UserText {
    let text = REMINDER.replace_all(text, "");
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return UserText::Noise;
    }
    if trimmed.starts_with("<command-name>")
        || trimmed.starts_with("<command-message>")
        || trimmed.starts_with("<command-args>")
    {
        // A slash command's echo; what the user typed after the command is theirs.
        let args: Vec<String> = COMMAND_ARGS
            .captures_iter(trimmed)
            .filter_map(|c| c.get(1))
            .map(|m| m.as_str().trim().to_owned())
            .filter(|args| !args.is_empty())
            .collect();
        return if args.is_empty() {
            UserText::Noise
        } else {
            UserText::Said(args.join("\n"))
        };
    }
    let noise_prefixes = [
        "<local-command-stdout>",
        "<local-command-stderr>",
        "<local-command-caveat>",
        "<bash-input>",
        "<bash-stdout>",
        "<bash-stderr>",
        "[Request interrupted by user",
    ];
    if noise_prefixes
        .iter()
        .any(|prefix| trimmed.starts_with(prefix))
    {
        return UserText::Noise;
    }
    UserText::Said(trimmed.to_owned())
}

/// Content blocks that were read but not kept.
#[derive(Debug, Default, Clone, PartialEq)]
struct DroppedBlocks {
    thinking: u64,
    image: u64,
    tool: u64,
    other: u64,
}

#[derive(Debug, Clone, PartialEq)]
struct Part {
    speaker: Speaker,
    text: String,
}

impl Part {
    fn rendered_len(&self) -> usize {
        self.speaker.prefix().len() + self.text.len()
    }
}

/// The same words, whatever their spacing: how a queued message is recognised again.
fn said_key(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The delta as it is being read: counters plus the newest parts that fit `max_bytes`.
#[derive(Debug)]
struct Delta {
    total_lines: u64,
    from_line: u64,
    rotated: bool,
    parts: VecDeque<Part>,
    /// Rendered size of `parts`, separators included.
    parts_len: usize,
    dropped_parts: u64,
    delta_lines: u64,
    content_lines: u64,
    user_prose: u64,
    assistant_prose: u64,
    user_words: u64,
    assistant_words: u64,
    queued_parts: u64,
    answer_parts: u64,
    noise_parts: u64,
    tool_lines: u64,
    skipped_lines: u64,
    repaired_lines: u64,
    dropped_blocks: DroppedBlocks,
    /// The newest compaction summary, capped.
    summary: Option<String>,
    /// Messages enqueued and not yet dequeued, removed or seen again, oldest first.
    queue: VecDeque<String>,
    /// Queued messages already given as prose (by a `remove` or an attachment).
    queued_said: HashSet<String>,
    /// The transcript was written by a Claude Code that records an absorbed message as a
    /// `remove` without a reason (before 2.1.246), as far as its lines' versions tell.
    remove_absorbs: bool,
    /// `AskUserQuestion` calls of the delta: tool_use id -> its questions.
    questions: HashMap<String, Vec<String>>,
    max_part_bytes: usize,
    max_bytes: usize,
}

const SEPARATOR: &str = "\n\n";

fn version_removes_absorb<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<bool>, D::Error> {
    let version = Option::<std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
    Ok(version.map(|version| removes_absorb(&version)))
}

/// Whether a Claude Code of `version` (`2.1.241`) records an absorbed queued message as a
/// `remove` without a reason: every version before 2.1.246.
fn removes_absorb(version: &str) -> bool {
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .map(|part| part.parse::<u32>().ok());
    match (parts.next(), parts.next(), parts.next()) {
        (Some(Some(major)), Some(Some(minor)), Some(Some(patch))) => {
            (major, minor, patch) < (2, 1, 246)
        }
        _ => false,
    }
}

impl Delta {
    fn new(args: &DeltaArgs) -> Self {
        Delta {
            total_lines: 0,
            from_line: 0,
            rotated: false,
            parts: VecDeque::new(),
            parts_len: 0,
            dropped_parts: 0,
            delta_lines: 0,
            content_lines: 0,
            user_prose: 0,
            assistant_prose: 0,
            user_words: 0,
            assistant_words: 0,
            queued_parts: 0,
            answer_parts: 0,
            noise_parts: 0,
            tool_lines: 0,
            skipped_lines: 0,
            repaired_lines: 0,
            dropped_blocks: DroppedBlocks::default(),
            summary: None,
            queue: VecDeque::new(),
            queued_said: HashSet::new(),
            remove_absorbs: false,
            questions: HashMap::new(),
            max_part_bytes: args.max_part_bytes,
            max_bytes: args.max_bytes,
        }
    }

    fn add(&mut self, parsed: Parsed, repaired: bool) {
        self.delta_lines += 1;
        let line = match parsed {
            Parsed::Blank | Parsed::Other => return,
            Parsed::Invalid => {
                self.skipped_lines += 1;
                return;
            }
            Parsed::Line(line) => line,
        };
        if repaired {
            self.repaired_lines += 1;
        }
        if let Some(absorbs) = line.removes_absorb {
            self.remove_absorbs = absorbs;
        }
        match line.kind.as_deref() {
            Some("queue-operation") => return self.queue_operation(&line),
            Some("attachment") => return self.attachment(&line),
            _ => {}
        }
        // Injected context (command caveats, reminders) is not something anyone said.
        if line.is_meta == Some(true) {
            return;
        }
        let Some(message) = line.message else { return };
        let speaker = match line.kind.as_deref().or(message.role.as_deref()) {
            Some("user") => Speaker::User,
            Some("assistant") => Speaker::Assistant,
            _ => return,
        };
        let sidechain = line.is_sidechain == Some(true);
        let mut texts: Vec<String> = Vec::new();
        let mut answers: Vec<String> = Vec::new();
        let mut tool_blocks = 0;
        match message.content {
            None => {}
            Some(Content::Text(text)) => texts.push(text),
            Some(Content::Blocks(blocks)) => {
                for block in blocks {
                    match block.kind.as_deref().unwrap_or("") {
                        "text" => texts.extend(block.text),
                        "thinking" | "redacted_thinking" => self.dropped_blocks.thinking += 1,
                        "image" => self.dropped_blocks.image += 1,
                        "tool_use" if !sidechain => {
                            tool_blocks += 1;
                            self.dropped_blocks.tool += 1;
                            self.note_question(&block);
                        }
                        "tool_result" if !sidechain => {
                            tool_blocks += 1;
                            self.dropped_blocks.tool += 1;
                            answers.extend(self.answer(&block, line.tool_use_result));
                        }
                        kind if kind.ends_with("tool_use") || kind.ends_with("tool_result") => {
                            tool_blocks += 1;
                            self.dropped_blocks.tool += 1;
                        }
                        _ => self.dropped_blocks.other += 1,
                    }
                }
            }
        }
        // A sidechain is a sub-agent's conversation with the main agent: tool traffic, whoever
        // the line names as speaker.
        if sidechain {
            self.tool_lines += 1;
            return;
        }
        if speaker == Speaker::User && line.is_compact_summary == Some(true) {
            let summary = strip_controls(&texts.join("\n"));
            self.summary = Some(cap_text(summary.trim(), self.max_part_bytes));
            return;
        }
        let mut prose: Vec<String> = Vec::new();
        for text in &texts {
            let text = strip_controls(text);
            match speaker {
                Speaker::Assistant => {
                    let text = text.trim();
                    if !text.is_empty() {
                        prose.push(text.to_owned());
                    }
                }
                Speaker::User => match classify_user_text(&text) {
                    UserText::Said(said) => {
                        self.forget_queued(&said);
                        prose.push(said);
                    }
                    UserText::Noise => self.noise_parts += 1,
                },
            }
        }
        let answered = !answers.is_empty();
        for answer in answers {
            self.answer_parts += 1;
            self.say(Speaker::User, &answer);
        }
        if prose.is_empty() {
            if tool_blocks > 0 && !answered {
                self.tool_lines += 1;
            } else if answered {
                self.content_lines += 1;
            }
            return;
        }
        self.content_lines += 1;
        self.say(speaker, &prose.join("\n"));
    }

    /// Counts and keeps one piece of prose.
    fn say(&mut self, speaker: Speaker, text: &str) {
        let words = text.split_whitespace().count() as u64;
        match speaker {
            Speaker::User => {
                self.user_prose += 1;
                self.user_words += words;
            }
            Speaker::Assistant => {
                self.assistant_prose += 1;
                self.assistant_words += words;
            }
        }
        let text = cap_text(text, self.max_part_bytes);
        self.push_part(Part { speaker, text });
    }

    fn queue_operation(&mut self, line: &TranscriptLine) {
        let text = line
            .content
            .and_then(raw_text)
            .map(|text| strip_controls(&text));
        match line.operation.as_deref() {
            Some("enqueue") => {
                if let Some(UserText::Said(said)) = text.as_deref().map(classify_user_text) {
                    self.queue.push_back(said);
                }
            }
            // The next `user` line carries it.
            Some("dequeue") => {
                self.queue.pop_front();
            }
            Some("remove") => {
                let removed = match text.as_deref().map(said_key) {
                    Some(key) => self
                        .queue
                        .iter()
                        .position(|queued| said_key(queued) == key)
                        .and_then(|at| self.queue.remove(at)),
                    None => self.queue.pop_front(),
                };
                // Absorbed: the assistant read it mid-turn and no `user` line will follow. Claude
                // Code says so since 2.1.246; before, an absorbed message's `remove` gave no
                // reason (and one taken back was a `popAll`).
                let absorbed = match line.reason.as_deref() {
                    Some(reason) => reason == "absorbed_mid_turn",
                    None => self.remove_absorbs,
                };
                if absorbed {
                    if let Some(said) = removed.or(text) {
                        self.say_queued(&said);
                    }
                }
            }
            // Given back to the input box: a `user` line follows if it is sent again.
            Some("popAll") => self.queue.clear(),
            _ => {}
        }
    }

    fn attachment(&mut self, line: &TranscriptLine) {
        let Some(raw) = line.attachment else { return };
        let Ok(attachment) = serde_json::from_str::<QueuedCommand>(raw.get()) else {
            return;
        };
        if attachment.kind.as_deref() != Some("queued_command") {
            return;
        }
        let Some(text) = attachment.prompt.and_then(raw_text) else {
            return;
        };
        if let UserText::Said(said) = classify_user_text(&strip_controls(&text)) {
            self.forget_queued(&said);
            self.say_queued(&said);
        }
    }

    /// A queued message, given once however many lines record it.
    fn say_queued(&mut self, said: &str) {
        if self.queued_said.insert(said_key(said)) {
            self.queued_parts += 1;
            self.content_lines += 1;
            self.say(Speaker::User, said);
        }
    }

    /// Words that were queued and are now said by a line of their own.
    fn forget_queued(&mut self, said: &str) {
        let key = said_key(said);
        if let Some(at) = self.queue.iter().position(|queued| said_key(queued) == key) {
            self.queue.remove(at);
        }
    }

    fn note_question(&mut self, block: &Block) {
        if block.name.as_deref() != Some("AskUserQuestion") {
            return;
        }
        let (Some(id), Some(input)) = (&block.id, block.input) else {
            return;
        };
        if let Ok(ask) = serde_json::from_str::<AskInput>(input.get()) {
            let questions = ask
                .questions
                .into_iter()
                .map(|q| strip_controls(q.question.trim()))
                .filter(|q| !q.is_empty())
                .collect();
            self.questions.insert(id.clone(), questions);
        }
    }

    /// The user's answers in a tool result: `(answering "question") answer`, one per question.
    fn answer(&mut self, block: &Block, result: Option<&RawValue>) -> Vec<String> {
        let asked = block
            .tool_use_id
            .as_ref()
            .and_then(|id| self.questions.remove(id));
        // The structured answers, when the line has them (they name their questions).
        let structured = result
            .filter(|raw| raw.get().contains("\"answers\""))
            .and_then(|raw| serde_json::from_str::<AskResult>(raw.get()).ok())
            .filter(|result| !result.answers.is_empty());
        if let Some(result) = structured {
            return result
                .answers
                .iter()
                .map(|(question, answer)| {
                    let answer = match answer {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    };
                    format!(
                        "(answering \"{}\") {}",
                        strip_controls(question.trim()),
                        strip_controls(answer.trim())
                    )
                })
                .collect();
        }
        let Some(questions) = asked else {
            return Vec::new();
        };
        let Some(text) = block.content.and_then(raw_text) else {
            return Vec::new();
        };
        let text = strip_controls(text.trim());
        if text.is_empty() {
            return Vec::new();
        }
        vec![format!(
            "(answering \"{}\") {text}",
            questions.join("\" and \"")
        )]
    }

    /// Keeps the newest parts: older ones leave from the front once the text is over budget.
    fn push_part(&mut self, part: Part) {
        if !self.parts.is_empty() {
            self.parts_len += SEPARATOR.len();
        }
        self.parts_len += part.rendered_len();
        self.parts.push_back(part);
        while self.parts_len > self.max_bytes && self.parts.len() > 1 {
            if let Some(oldest) = self.parts.pop_front() {
                self.parts_len -= oldest.rendered_len() + SEPARATOR.len();
                self.dropped_parts += 1;
            }
        }
    }

    /// Messages still queued when the delta ends were typed by the user all the same.
    fn finish(&mut self) {
        while let Some(said) = self.queue.pop_front() {
            self.say_queued(&said);
        }
    }

    fn text(&self) -> String {
        let mut rendered: Vec<String> = self
            .parts
            .iter()
            .map(|part| format!("{}{}", part.speaker.prefix(), part.text))
            .collect();
        // A single newest part larger than the whole budget keeps its beginning.
        if self.parts_len > self.max_bytes {
            if let Some(last) = rendered.last_mut() {
                *last = cap_text(last, self.max_bytes);
            }
        }
        rendered.join(SEPARATOR)
    }

    fn into_json(self, path: &str) -> Value {
        let prose = self.user_prose + self.assistant_prose;
        json!({
            "path": path,
            "total_lines": self.total_lines,
            "from_line": self.from_line,
            "rotated": self.rotated,
            "text": self.text(),
            "summary": self.summary.clone().unwrap_or_default(),
            "words": self.user_words + self.assistant_words,
            "user_words": self.user_words,
            "assistant_words": self.assistant_words,
            "content_lines": self.content_lines,
            "user_prose": self.user_prose,
            "assistant_prose": self.assistant_prose,
            "queued_parts": self.queued_parts,
            "answer_parts": self.answer_parts,
            "noise_parts": self.noise_parts,
            "tool_lines": self.tool_lines,
            "skipped_lines": self.skipped_lines,
            "repaired_lines": self.repaired_lines,
            "only_tools": self.delta_lines > 0 && prose == 0,
            "dropped_parts": self.dropped_parts,
            "dropped_blocks": {
                "thinking": self.dropped_blocks.thinking,
                "image": self.dropped_blocks.image,
                "tool": self.dropped_blocks.tool,
                "other": self.dropped_blocks.other,
            },
        })
    }
}

/// `text` cut to at most `cap` bytes on a char boundary, marker included (unless the cap is
/// smaller than the marker itself).
fn cap_text(text: &str, cap: usize) -> String {
    if text.len() <= cap {
        return text.to_owned();
    }
    let mut cut = cap.saturating_sub(CUT_MARKER.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{CUT_MARKER}", text[..cut].trim_end())
}

fn read_delta(path: &Path, args: &DeltaArgs, cancel: super::Cancel) -> io::Result<Delta> {
    let file = super::Checked::open(path, cancel)?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut delta = Delta::new(args);
    let mut buf = Vec::new();
    let mut repaired = Vec::new();
    let mut offset: u64 = 0;
    // Start offsets of the last `fallback_lines` lines: the fallback re-reads from there, so a
    // rotated file costs one more read of its tail, never a second full pass.
    let mut tail_starts: VecDeque<u64> = VecDeque::new();
    loop {
        buf.clear();
        let read = reader.read_until(b'\n', &mut buf)?;
        if read == 0 {
            break;
        }
        let complete = buf.last() == Some(&b'\n');
        let after_cursor = delta.total_lines >= args.after_line;
        if !complete {
            // Still being written: not counted, so the next cursor comes back for it.
            let mut scratch = Vec::new();
            if matches!(parse_line(&buf, &mut scratch), Parsed::Invalid) {
                break;
            }
        }
        delta.total_lines += 1;
        if args.fallback_lines > 0 {
            tail_starts.push_back(offset);
            if tail_starts.len() as u64 > args.fallback_lines {
                tail_starts.pop_front();
            }
        }
        offset += read as u64;
        if after_cursor {
            let was_repaired = needs_repair(&buf);
            delta.add(parse_line(&buf, &mut repaired), was_repaired);
        }
    }
    if args.after_line <= delta.total_lines {
        delta.from_line = args.after_line;
        delta.finish();
        return Ok(delta);
    }
    // The cursor points past the end: the file was rotated or truncated under it.
    delta.rotated = true;
    delta.from_line = delta.total_lines - tail_starts.len() as u64;
    if let Some(&start) = tail_starts.front() {
        reader.seek(SeekFrom::Start(start))?;
        for _ in 0..tail_starts.len() {
            buf.clear();
            if reader.read_until(b'\n', &mut buf)? == 0 {
                break;
            }
            let was_repaired = needs_repair(&buf);
            delta.add(parse_line(&buf, &mut repaired), was_repaired);
        }
    }
    delta.finish();
    Ok(delta)
}

fn output_schema() -> Value {
    let count =
        |description: &str| json!({ "type": "integer", "minimum": 0, "description": description });
    json!({
        "type": "object",
        "description": "The prose added to the transcript after the cursor, and what else was there.",
        "additionalProperties": false,
        "required": [
            "path", "total_lines", "from_line", "rotated", "text", "summary", "words",
            "user_words", "assistant_words", "content_lines", "user_prose", "assistant_prose",
            "queued_parts", "answer_parts", "noise_parts", "tool_lines", "skipped_lines",
            "repaired_lines", "only_tools", "dropped_parts", "dropped_blocks", "missing"
        ],
        "properties": {
            "path": { "type": "string", "description": "The transcript path, as given." },
            "total_lines": count("Complete lines in the file: the cursor to pass as after_line next time. A last line without a newline that does not parse yet is not counted."),
            "from_line": count("Lines before the delta: the delta is lines from_line+1 through total_lines (1-based). Equals after_line unless rotated."),
            "rotated": { "type": "boolean", "description": "True when after_line was past the end of the file and the last fallback_lines lines were read instead." },
            "text": { "type": "string", "description": "What was said in the delta, oldest first, as \"user: ...\" and \"assistant: ...\" paragraphs separated by blank lines: messages, queued messages and answers to AskUserQuestion (\"(answering \\\"question\\\") answer\"); thinking, images, tool traffic, command echoes, local command output, interruption notices and system reminders left out; control characters and terminal escapes stripped; capped by max_part_bytes and max_bytes." },
            "summary": { "type": "string", "description": "The newest compaction summary of the delta (isCompactSummary), capped by max_part_bytes: context restating earlier lines, not the user's words; empty when none." },
            "words": count("Words said in the delta, by the user and the assistant (before the caps): what a threshold should count."),
            "user_words": count("Words said by the user."),
            "assistant_words": count("Words said by the assistant."),
            "content_lines": count("Lines of the delta that carried prose."),
            "user_prose": count("Pieces of prose said by the user: messages, queued messages, answers (tool results excluded)."),
            "assistant_prose": count("Pieces of prose said by the assistant."),
            "queued_parts": count("Messages the user typed while the assistant worked (queue-operation, queued_command), each counted once."),
            "answer_parts": count("Answers the user gave to AskUserQuestion."),
            "noise_parts": count("User texts that were Claude Code's own: command echoes, local command output, interruption notices, system reminders."),
            "tool_lines": count("Lines of the delta that were only tool traffic: tool calls, tool results, sub-agent (sidechain) messages."),
            "skipped_lines": count("Lines of the delta that are not JSON; they are skipped, not fatal."),
            "repaired_lines": count("Lines read after replacing a lone UTF-16 surrogate escape with U+FFFD."),
            "only_tools": { "type": "boolean", "description": "True when the delta has lines but none of them carried prose." },
            "dropped_parts": count("Messages with prose left out of text because of max_bytes (the oldest ones)."),
            "missing": { "type": "boolean", "description": "True when the file does not exist and `optional` is true: the delta is empty." },
            "dropped_blocks": {
                "type": "object",
                "description": "Content blocks of the delta that were read but not kept.",
                "additionalProperties": false,
                "required": ["thinking", "image", "tool", "other"],
                "properties": {
                    "thinking": count("Thinking and redacted-thinking blocks (signatures included)."),
                    "image": count("Image blocks."),
                    "tool": count("Tool calls and tool results."),
                    "other": count("Blocks of any other type.")
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::super::WriteRoots;
    use super::*;

    fn user_text(text: &str) -> String {
        json!({
            "parentUuid": null, "isSidechain": false, "userType": "external", "cwd": "/repo",
            "sessionId": "5b1e7c2a-0000-4000-8000-000000000001", "version": "2.0.31",
            "gitBranch": "main", "type": "user",
            "message": { "role": "user", "content": text },
            "uuid": "e21ba32d-d221-4dee-87f2-86149cfb213e", "timestamp": "2026-11-30T00:00:00.000Z"
        })
        .to_string()
    }

    fn user_blocks(blocks: Value) -> String {
        json!({
            "parentUuid": null, "isSidechain": false, "userType": "external", "cwd": "/repo",
            "sessionId": "5b1e7c2a-0000-4000-8000-000000000001", "version": "2.0.31",
            "type": "user", "message": { "role": "user", "content": blocks },
            "uuid": "91545372-b279-4d0c-b229-66d3f42e9cc2", "timestamp": "2026-11-30T00:00:00.000Z"
        })
        .to_string()
    }

    fn tool_result(output: &str) -> String {
        user_blocks(
            json!([{ "type": "tool_result", "tool_use_id": "toolu_01", "content": output }]),
        )
    }

    fn assistant(blocks: Value) -> String {
        json!({
            "parentUuid": null, "isSidechain": false, "userType": "external", "cwd": "/repo",
            "sessionId": "5b1e7c2a-0000-4000-8000-000000000001", "version": "2.0.31",
            "type": "assistant",
            "message": {
                "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                "content": blocks, "stop_reason": "end_turn",
                "usage": { "input_tokens": 10, "output_tokens": 20 }
            },
            "uuid": "fbe2739b-8f72-4e6b-9a0c-5beaefd2beef", "timestamp": "2026-11-30T00:00:00.000Z"
        })
        .to_string()
    }

    fn thinking() -> Value {
        json!({ "type": "thinking", "thinking": "private reasoning ".repeat(20), "signature": "EqQBCkYIBxgCKkB".repeat(8) })
    }

    fn assistant_text(text: &str) -> String {
        assistant(json!([thinking(), { "type": "text", "text": text }]))
    }

    fn tool_use() -> String {
        assistant(
            json!([{ "type": "tool_use", "id": "toolu_01", "name": "Read", "input": { "file_path": "src/upload.rs" } }]),
        )
    }

    fn summary() -> String {
        json!({ "type": "summary", "summary": "Designing the engine", "leafUuid": "50ea388f-0d78-47ee-a80c-b97e9cb63980" }).to_string()
    }

    /// The example session: summary, user ask, assistant reply, tool call, tool result, assistant
    /// reply, user reply (7 lines).
    fn example() -> Vec<String> {
        vec![
            summary(),
            user_text("Can you add a retry to the upload step? It fails when the network blips."),
            assistant_text("I'll look at the upload code first."),
            tool_use(),
            tool_result("fn upload() { ... }"),
            assistant_text("Added exponential backoff with three attempts; the retry policy is now a named concept: Backoff policy."),
            user_text("Good. From now on we call that the backoff policy everywhere."),
        ]
    }

    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new(content: &str) -> Self {
            let dir = tempfile::tempdir().expect("temp dir");
            std::fs::write(dir.path().join("t.jsonl"), content).expect("write transcript");
            Fixture { dir }
        }

        fn lines(lines: &[String]) -> Self {
            Fixture::new(&(lines.join("\n") + "\n"))
        }

        fn delta(&self, with: Value) -> Value {
            let mut with = with;
            with["path"] = json!("t.jsonl");
            let roots = WriteRoots::default();
            let ctx = BuiltinCtx::for_test(self.dir.path(), &roots);
            run(&with, &ctx).expect("transcript.delta")
        }
    }

    fn validate(schema: &Value, value: &Value) {
        let validator = jsonschema::validator_for(schema).expect("schema compiles");
        let errors: Vec<String> = validator
            .iter_errors(value)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{errors:?} in {value}");
    }

    #[test]
    fn reads_the_whole_example_session() {
        let out = Fixture::lines(&example()).delta(json!({}));
        validate(&output_schema(), &out);
        assert_eq!(out["total_lines"], 7);
        assert_eq!(out["from_line"], 0);
        assert_eq!(out["rotated"], false);
        assert_eq!(
            out["text"],
            "user: Can you add a retry to the upload step? It fails when the network blips.\n\n\
             assistant: I'll look at the upload code first.\n\n\
             assistant: Added exponential backoff with three attempts; the retry policy is now a named concept: Backoff policy.\n\n\
             user: Good. From now on we call that the backoff policy everywhere."
        );
        assert_eq!(out["content_lines"], 4);
        assert_eq!(out["user_prose"], 2);
        assert_eq!(out["assistant_prose"], 2);
        assert_eq!(out["tool_lines"], 2);
        assert_eq!(out["skipped_lines"], 0);
        assert_eq!(out["only_tools"], false);
        assert_eq!(
            out["dropped_blocks"],
            json!({ "thinking": 2, "image": 0, "tool": 2, "other": 0 })
        );
    }

    #[test]
    fn thinking_signatures_and_tool_payloads_never_reach_the_text() {
        let out = Fixture::lines(&example()).delta(json!({}));
        let text = out["text"].as_str().expect("text");
        assert!(!text.contains("private reasoning"));
        assert!(!text.contains("EqQBCkYIBxgCKkB"));
        assert!(!text.contains("fn upload()"));
        assert!(!text.contains("src/upload.rs"));
    }

    #[test]
    fn a_cursor_in_the_middle_reads_only_what_follows() {
        let out = Fixture::lines(&example()).delta(json!({ "after_line": 4 }));
        assert_eq!(out["total_lines"], 7);
        assert_eq!(out["from_line"], 4);
        assert_eq!(out["rotated"], false);
        assert_eq!(
            out["text"],
            "assistant: Added exponential backoff with three attempts; the retry policy is now a named concept: Backoff policy.\n\n\
             user: Good. From now on we call that the backoff policy everywhere."
        );
        assert_eq!(out["tool_lines"], 1);
        assert_eq!(out["user_prose"], 1);
        assert_eq!(out["assistant_prose"], 1);
    }

    #[test]
    fn lines_before_the_cursor_are_not_parsed() {
        let mut lines = example();
        lines[1] = "{not json".into();
        let out = Fixture::lines(&lines).delta(json!({ "after_line": 2 }));
        assert_eq!(out["skipped_lines"], 0);
        assert_eq!(out["total_lines"], 7);
    }

    #[test]
    fn a_cursor_at_the_end_gives_an_empty_delta() {
        let out = Fixture::lines(&example()).delta(json!({ "after_line": 7 }));
        assert_eq!(out["text"], "");
        assert_eq!(out["content_lines"], 0);
        assert_eq!(out["only_tools"], false);
        assert_eq!(out["rotated"], false);
        assert_eq!(out["from_line"], 7);
    }

    #[test]
    fn a_cursor_past_the_end_falls_back_to_the_last_lines() {
        let out =
            Fixture::lines(&example()).delta(json!({ "after_line": 90, "fallback_lines": 2 }));
        assert_eq!(out["rotated"], true);
        assert_eq!(out["total_lines"], 7);
        assert_eq!(out["from_line"], 5);
        assert_eq!(
            out["text"],
            "assistant: Added exponential backoff with three attempts; the retry policy is now a named concept: Backoff policy.\n\n\
             user: Good. From now on we call that the backoff policy everywhere."
        );
        let all = Fixture::lines(&example()).delta(json!({ "after_line": 90 }));
        assert_eq!(all["from_line"], 0);
        assert_eq!(all["content_lines"], 4);
        let none =
            Fixture::lines(&example()).delta(json!({ "after_line": 90, "fallback_lines": 0 }));
        assert_eq!(none["from_line"], 7);
        assert_eq!(none["text"], "");
    }

    #[test]
    fn a_truncated_last_line_is_neither_counted_nor_read() {
        let mut content = example().join("\n") + "\n";
        let partial = user_text("half written");
        content.push_str(&partial[..partial.len() / 2]);
        let fixture = Fixture::new(&content);
        let out = fixture.delta(json!({ "after_line": 6 }));
        assert_eq!(out["total_lines"], 7);
        assert_eq!(out["skipped_lines"], 0);
        assert!(!out["text"].as_str().expect("text").contains("half"));
        // Once finished, the next delta from total_lines picks it up.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(fixture.dir.path().join("t.jsonl"))
            .expect("open");
        writeln!(file, "{}", &partial[partial.len() / 2..]).expect("append");
        let next = fixture.delta(json!({ "after_line": 7 }));
        assert_eq!(next["total_lines"], 8);
        assert_eq!(next["text"], "user: half written");
    }

    #[test]
    fn a_complete_last_line_without_newline_counts() {
        let out = Fixture::new(&example().join("\n")).delta(json!({ "after_line": 6 }));
        assert_eq!(out["total_lines"], 7);
        assert_eq!(out["user_prose"], 1);
    }

    #[test]
    fn broken_lines_in_the_middle_are_counted_and_skipped() {
        let mut lines = example();
        lines.insert(3, "{\"type\": \"assistant\", \"mess".into());
        lines.insert(4, String::new());
        let out = Fixture::lines(&lines).delta(json!({}));
        assert_eq!(out["total_lines"], 9);
        assert_eq!(out["skipped_lines"], 1);
        assert_eq!(out["content_lines"], 4);
    }

    #[test]
    fn a_tool_only_delta_says_so() {
        let out = Fixture::lines(&example()).delta(json!({ "after_line": 3, "fallback_lines": 0 }));
        assert_eq!(out["only_tools"], false);
        let mut lines = example();
        lines.truncate(5);
        let out = Fixture::lines(&lines).delta(json!({ "after_line": 3 }));
        assert_eq!(out["tool_lines"], 2);
        assert_eq!(out["content_lines"], 0);
        assert_eq!(out["only_tools"], true);
        assert_eq!(out["text"], "");
    }

    #[test]
    fn meta_summary_system_and_sidechain_lines_are_not_prose() {
        let mut meta: Value =
            serde_json::from_str(&user_text("Caveat: generated by local commands")).expect("json");
        meta["isMeta"] = json!(true);
        let mut side: Value =
            serde_json::from_str(&user_text("Search the repo for uploads")).expect("json");
        side["isSidechain"] = json!(true);
        let system =
            json!({ "type": "system", "content": "Conversation compacted", "level": "info" });
        let odd = json!({ "type": "user", "message": "a string where an object belongs" });
        let lines = vec![
            summary(),
            meta.to_string(),
            side.to_string(),
            system.to_string(),
            odd.to_string(),
            user_text("real words"),
        ];
        let out = Fixture::lines(&lines).delta(json!({}));
        assert_eq!(out["text"], "user: real words");
        assert_eq!(out["user_prose"], 1);
        assert_eq!(out["tool_lines"], 1);
        assert_eq!(out["skipped_lines"], 0);
    }

    #[test]
    fn text_blocks_of_a_mixed_user_line_are_prose_and_images_are_counted() {
        let line = user_blocks(json!([
            { "type": "tool_result", "tool_use_id": "toolu_02", "content": [{ "type": "text", "text": "tool output" }] },
            { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo=" } },
            { "type": "text", "text": "  see the screenshot  " },
            { "type": "document_like_future_block", "text": "ignored" }
        ]));
        let out = Fixture::lines(&[line]).delta(json!({}));
        assert_eq!(out["text"], "user: see the screenshot");
        assert_eq!(out["tool_lines"], 0);
        assert_eq!(out["content_lines"], 1);
        assert_eq!(
            out["dropped_blocks"],
            json!({ "thinking": 0, "image": 1, "tool": 1, "other": 1 })
        );
    }

    #[test]
    fn a_thinking_only_line_is_neither_prose_nor_tools() {
        let out = Fixture::lines(&[assistant(json!([thinking()]))]).delta(json!({}));
        assert_eq!(out["content_lines"], 0);
        assert_eq!(out["tool_lines"], 0);
        assert_eq!(out["dropped_blocks"]["thinking"], 1);
        assert_eq!(out["only_tools"], true);
    }

    #[test]
    fn parts_are_capped_on_char_boundaries() {
        // "é" is two bytes, "€" three: no cap may fall inside either.
        let text = "é€".repeat(100);
        for cap in 4..40 {
            let capped = cap_text(&text, cap);
            assert!(capped.len() <= cap, "{cap}: {}", capped.len());
            assert!(capped.ends_with(CUT_MARKER));
            assert!(text.starts_with(capped.trim_end_matches(CUT_MARKER)));
        }
        assert_eq!(cap_text("short", 5), "short");
        let out = Fixture::lines(&[user_text(&text)]).delta(json!({ "max_part_bytes": 20 }));
        let shown = out["text"].as_str().expect("text");
        assert_eq!(shown, format!("user: {}é{CUT_MARKER}", "é€".repeat(3)));
    }

    #[test]
    fn the_whole_text_keeps_the_newest_parts() {
        let lines: Vec<String> = (0..10)
            .map(|i| user_text(&format!("message {i} ü")))
            .collect();
        // Each part renders as "user: message N ü" (18 bytes), joined by blank lines.
        let out = Fixture::lines(&lines).delta(json!({ "max_bytes": 58 }));
        assert_eq!(
            out["text"],
            "user: message 7 ü\n\nuser: message 8 ü\n\nuser: message 9 ü"
        );
        assert_eq!(out["dropped_parts"], 7);
        assert_eq!(out["user_prose"], 10);
        let single =
            Fixture::lines(&[user_text(&"ü".repeat(50))]).delta(json!({ "max_bytes": 16 }));
        let text = single["text"].as_str().expect("text");
        assert!(text.len() <= 16);
        assert_eq!(text, format!("user: üüü{CUT_MARKER}"));
    }

    #[test]
    fn a_large_transcript_streams_correctly() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.jsonl");
        let mut file = io::BufWriter::new(std::fs::File::create(&path).expect("create"));
        let payload = "x".repeat(4000);
        let mut lines = 0u64;
        let mut written = 0usize;
        while written < 20 * 1024 * 1024 {
            let batch = [
                user_text(&format!("question {lines}")),
                tool_use(),
                tool_result(&payload),
                assistant_text(&format!("answer {lines}")),
            ];
            for line in batch {
                written += line.len() + 1;
                writeln!(file, "{line}").expect("write");
                lines += 1;
            }
        }
        file.flush().expect("flush");
        drop(file);
        let roots = WriteRoots::default();
        let ctx = BuiltinCtx::for_test(dir.path(), &roots);
        let after = lines - 8;
        let out = run(&json!({ "path": "t.jsonl", "after_line": after }), &ctx).expect("delta");
        assert_eq!(out["total_lines"], lines);
        assert_eq!(out["user_prose"], 2);
        assert_eq!(out["assistant_prose"], 2);
        assert_eq!(out["tool_lines"], 4);
        assert_eq!(
            out["text"],
            format!(
                "user: question {}\n\nassistant: answer {}\n\nuser: question {}\n\nassistant: answer {}",
                lines - 8,
                lines - 8,
                lines - 4,
                lines - 4
            )
        );
        let rotated =
            run(&json!({ "path": "t.jsonl", "after_line": lines + 1 }), &ctx).expect("delta");
        assert_eq!(rotated["rotated"], true);
        assert_eq!(rotated["from_line"], lines - 500);
        assert_eq!(rotated["content_lines"], 250);
        assert_eq!(rotated["tool_lines"], 250);
        let text = rotated["text"].as_str().expect("text");
        assert!(text.len() <= 16384);
        assert!(text.ends_with(&format!("assistant: answer {}", lines - 4)));
        let full = run(&json!({ "path": "t.jsonl" }), &ctx).expect("delta");
        assert_eq!(full["content_lines"], lines / 2);
        assert!(full["dropped_parts"].as_u64().expect("count") > 0);
    }

    /// A writer still flushing: `settle` reads once the file has been quiet, so the lines
    /// written after the call began are in the delta. The wait runs on a fake clock and the
    /// writer appends from inside it (at its 15th sleep, 1.5 s into a 2 s window), so the append
    /// is known to fall after the call began and before the window ended, whatever the load.
    #[test]
    fn settle_waits_for_a_file_still_being_written() {
        let roots = WriteRoots::default();
        let dir = tempfile::tempdir().expect("temp dir");
        let ctx = BuiltinCtx::for_test(dir.path(), &roots);
        let path = dir.path().join("t.jsonl");
        let line = |text: &str| {
            json!({"type": "user", "message": {"role": "user", "content": text}}).to_string() + "\n"
        };
        std::fs::write(&path, line("first words")).expect("write");
        let clock = Clock::fake();
        {
            let path = path.clone();
            let late = line("late words");
            clock.on_sleep(move |sleep| {
                if sleep == 15 {
                    let mut file = std::fs::OpenOptions::new()
                        .append(true)
                        .open(&path)
                        .expect("open");
                    file.write_all(late.as_bytes()).expect("append");
                }
            });
        }
        let out = delta(&json!({ "path": "t.jsonl", "settle": "2s" }), &ctx, &clock).expect("read");
        assert_eq!(out["total_lines"], 2, "{out:#}");
        assert!(
            out["text"]
                .as_str()
                .is_some_and(|t| t.contains("late words")),
            "{out:#}"
        );
        // The quiet window began again at the append: 1.5 s, then 2 s of quiet.
        assert_eq!(clock.elapsed(), Duration::from_millis(3500));
        let bad = run(&json!({ "path": "t.jsonl", "settle": "soon" }), &ctx).expect_err("bad");
        assert!(bad.0.contains("`settle`"), "{bad}");
    }

    /// A file that never stops changing is read after 20 times the window all the same.
    #[test]
    fn settle_gives_up_on_a_file_that_keeps_changing() {
        let roots = WriteRoots::default();
        let dir = tempfile::tempdir().expect("temp dir");
        let ctx = BuiltinCtx::for_test(dir.path(), &roots);
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, "").expect("write");
        let clock = Clock::fake();
        {
            let path = path.clone();
            clock.on_sleep(move |sleep| {
                let mut file = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .expect("open");
                let line = json!({"type": "user", "message": {"role": "user", "content": format!("line {sleep}")}});
                writeln!(file, "{line}").expect("append");
            });
        }
        let out = delta(
            &json!({ "path": "t.jsonl", "settle": "500ms" }),
            &ctx,
            &clock,
        )
        .expect("read");
        assert_eq!(clock.elapsed(), Duration::from_secs(10));
        // A step of 50 ms, a line each step.
        assert_eq!(clock.sleeps(), 200);
        assert_eq!(out["total_lines"], 200, "{out:#}");
    }

    #[test]
    fn arguments_and_files_are_checked() {
        let roots = WriteRoots::default();
        let dir = tempfile::tempdir().expect("temp dir");
        let ctx = BuiltinCtx::for_test(dir.path(), &roots);
        let missing = run(&json!({ "path": "none.jsonl" }), &ctx).expect_err("missing file");
        assert!(
            missing.0.starts_with("cannot read transcript `none.jsonl`"),
            "{missing}"
        );
        let optional = run(&json!({ "path": "none.jsonl", "optional": true }), &ctx)
            .expect("a missing optional transcript is an empty delta");
        assert_eq!(
            (
                &optional["missing"],
                &optional["total_lines"],
                &optional["words"]
            ),
            (&json!(true), &json!(0), &json!(0))
        );
        validate(&output_schema(), &optional);
        std::fs::write(dir.path().join("present.jsonl"), "").expect("write");
        let present =
            run(&json!({ "path": "present.jsonl", "optional": true }), &ctx).expect("read");
        assert_eq!(present["missing"], json!(false));
        let unknown = run(&json!({ "path": "x", "cursor": 1 }), &ctx).expect_err("unknown key");
        assert!(unknown.0.contains("cursor"), "{unknown}");
        let schema = args::schema::<DeltaArgs>();
        validate(&schema, &json!({ "path": "t.jsonl", "after_line": 3 }));
        let validator = jsonschema::validator_for(&schema).expect("schema compiles");
        assert!(!validator.is_valid(&json!({ "after_line": 3 })));
        assert!(!validator.is_valid(&json!({ "path": "t", "after_line": -1 })));
    }

    fn queue(operation: &str, content: Option<&str>, reason: Option<&str>) -> String {
        let mut line = json!({
            "type": "queue-operation", "operation": operation,
            "timestamp": "2026-12-01T08:18:38.006Z", "sessionId": "f27a7567-844c-4950-9619-4d8bbe43a8ec"
        });
        if let Some(content) = content {
            line["content"] = json!(content);
        }
        if let Some(reason) = reason {
            line["reason"] = json!(reason);
        }
        line.to_string()
    }

    fn queued_command(prompt: Value) -> String {
        json!({
            "parentUuid": "5a9dbdf8-bb7c-4a46-a190-f6de37777a61", "isSidechain": false,
            "type": "attachment", "uuid": "c08591b4-505f-4050-a846-49143cdd2081",
            "attachment": { "type": "queued_command", "prompt": prompt, "commandMode": "prompt" },
            "timestamp": "2026-12-01T08:18:40.000Z", "cwd": "/home/dev/ledger", "version": "2.1.332"
        })
        .to_string()
    }

    fn environment_attachment() -> String {
        json!({
            "type": "attachment", "isSidechain": false,
            "attachment": { "type": "environment", "snapshot": { "workingDirectory": "/home/dev/ledger" } },
            "rendered": [{ "content": "<system-reminder>\n# Environment\n</system-reminder>" }]
        })
        .to_string()
    }

    #[test]
    fn queued_messages_are_the_users_words_said_once() {
        // 2.1.x: every prompt is enqueued, dequeued, then written as a `user` line.
        let dequeued = vec![
            queue(
                "enqueue",
                Some("We call the nightly job the Sync Worker.\n"),
                None,
            ),
            queue("dequeue", None, None),
            user_text("We call the nightly job the Sync Worker.\n"),
            environment_attachment(),
            assistant_text("Noted: the Sync Worker."),
        ];
        let out = Fixture::lines(&dequeued).delta(json!({}));
        assert_eq!(
            out["text"],
            "user: We call the nightly job the Sync Worker.\n\nassistant: Noted: the Sync Worker."
        );
        assert_eq!(out["queued_parts"], 0);
        assert_eq!(out["user_prose"], 1);

        // Typed while the assistant worked: enqueued and never followed by a user line, absorbed
        // mid-turn, or recorded as a queued_command attachment (beside its queue line).
        let mid_turn = vec![
            user_text("Rename the upload step."),
            tool_use(),
            queue("enqueue", Some("Also call it the Courier."), None),
            tool_result("ok"),
            queue(
                "enqueue",
                Some("And the retries are the Backoff policy."),
                None,
            ),
            queue(
                "remove",
                Some("And the retries are the Backoff policy."),
                Some("absorbed_mid_turn"),
            ),
            queued_command(json!("And the retries are the Backoff policy.")),
            queued_command(json!([{ "type": "text", "text": "The Courier owns uploads." }])),
            assistant_text("Done."),
            queue(
                "enqueue",
                Some("One more: the Ledger is append-only."),
                None,
            ),
        ];
        let out = Fixture::lines(&mid_turn).delta(json!({}));
        assert_eq!(
            out["text"],
            "user: Rename the upload step.\n\n\
             user: And the retries are the Backoff policy.\n\n\
             user: The Courier owns uploads.\n\n\
             assistant: Done.\n\n\
             user: Also call it the Courier.\n\n\
             user: One more: the Ledger is append-only."
        );
        assert_eq!(out["queued_parts"], 4);
        assert_eq!(out["only_tools"], false);

        // An older Claude Code (before 2.1.246) records an absorbed message as a `remove`
        // without a reason: its lines' version tells.
        let old = vec![
            user_text("Rename the upload step.").replace("2.0.31", "2.1.241"),
            queue("enqueue", Some("Also call it the Courier."), None),
            queue("remove", Some("Also call it the Courier."), None),
            assistant_text("Done."),
        ];
        let out = Fixture::lines(&old).delta(json!({}));
        assert_eq!(
            out["text"],
            "user: Rename the upload step.\n\nuser: Also call it the Courier.\n\nassistant: Done."
        );
        assert!(super::removes_absorb("2.1.197") && !super::removes_absorb("2.1.246"));
        assert!(!super::removes_absorb("2.1.332") && !super::removes_absorb("x"));

        // Given back to the input box (popAll) or cancelled (remove without a reason, by a
        // Claude Code that gives one when it absorbs): not said.
        let cancelled = vec![
            user_text("Rename the upload step.").replace("2.0.31", "2.1.332"),
            queue("enqueue", Some("never mind this"), None),
            queue("remove", None, None),
            queue("enqueue", Some("nor this"), None),
            queue("popAll", None, None),
        ];
        let out = Fixture::lines(&cancelled).delta(json!({}));
        assert_eq!(out["text"], "user: Rename the upload step.");
    }

    fn ask(id: &str) -> String {
        assistant(json!([{
            "type": "tool_use", "id": id, "name": "AskUserQuestion",
            "input": { "questions": [{
                "question": "Which store backs the Ledger?", "header": "Store", "multiSelect": false,
                "options": [{ "label": "Postgres", "description": "" }, { "label": "SQLite", "description": "" }]
            }] }
        }]))
    }

    #[test]
    fn answers_to_ask_user_question_are_the_users_with_their_question() {
        let mut answered: Value = serde_json::from_str(&user_blocks(json!([{
            "type": "tool_result", "tool_use_id": "toolu_ask",
            "content": "User has answered your questions: \"Which store backs the Ledger?\"=\"Postgres\". You can now continue with the user's answers in mind."
        }])))
        .expect("json");
        answered["toolUseResult"] = json!({
            "questions": [{ "question": "Which store backs the Ledger?" }],
            "answers": { "Which store backs the Ledger?": "Postgres" }
        });
        let out = Fixture::lines(&[ask("toolu_ask"), answered.to_string()]).delta(json!({}));
        assert_eq!(
            out["text"],
            "user: (answering \"Which store backs the Ledger?\") Postgres"
        );
        assert_eq!(out["answer_parts"], 1);
        assert_eq!(out["user_words"], 7);

        // Without the structured result, the tool result's text stands for the answer.
        let plain = user_blocks(json!([{
            "type": "tool_result", "tool_use_id": "toolu_ask2",
            "content": [{ "type": "text", "text": "SQLite, we keep it embedded." }]
        }]));
        let out = Fixture::lines(&[ask("toolu_ask2"), plain]).delta(json!({}));
        assert_eq!(
            out["text"],
            "user: (answering \"Which store backs the Ledger?\") SQLite, we keep it embedded."
        );
        // Other tool results stay tool traffic.
        let out = Fixture::lines(&[tool_use(), tool_result("fn upload() {}")]).delta(json!({}));
        assert_eq!(out["text"], "");
        assert_eq!(out["answer_parts"], 0);
    }

    #[test]
    fn claude_codes_own_echoes_are_noise_and_controls_are_stripped() {
        let mut summary: Value = serde_json::from_str(&user_text(
            "This session is being continued from a previous conversation. Summary: the Sync Worker was named.",
        ))
        .expect("json");
        summary["isCompactSummary"] = json!(true);
        let lines = vec![
            user_text("<command-name>/clear</command-name>\n<command-message>clear</command-message>\n<command-args></command-args>"),
            user_text("<command-message>review</command-message>\n<command-name>/review</command-name>\n<command-args>the Courier module</command-args>"),
            user_text("<local-command-stdout>\u{1b}[1mTotal cost:\u{1b}[22m $0.01</local-command-stdout>"),
            user_blocks(json!([{ "type": "text", "text": "[Request interrupted by user for tool use]" }])),
            user_text("[Request interrupted by user]"),
            user_text("<system-reminder>The user opened notes.md</system-reminder>"),
            summary.to_string(),
            assistant_text("Colours:\u{1b}[31m red\u{1b}[0m, a bell\u{7} and a\u{0} NUL;\ttabs\nand newlines stay."),
        ];
        let out = Fixture::lines(&lines).delta(json!({}));
        assert_eq!(
            out["text"],
            "user: the Courier module\n\nassistant: Colours: red, a bell and a NUL;\ttabs\nand newlines stay."
        );
        assert_eq!(out["noise_parts"], 5);
        assert_eq!(
            out["summary"],
            "This session is being continued from a previous conversation. Summary: the Sync Worker was named."
        );
        assert_eq!(out["user_prose"], 1);
        assert_eq!(out["words"], 3 + 11);
        // Noise alone is nothing said.
        let out = Fixture::lines(&lines[..6]).delta(json!({}));
        assert_eq!(out["only_tools"], false);
        assert_eq!(out["words"], 3);
        let out = Fixture::lines(&[lines[0].clone(), lines[2].clone()]).delta(json!({}));
        assert_eq!(out["only_tools"], true);
        assert_eq!(out["words"], 0);
    }

    #[test]
    fn a_lone_surrogate_is_replaced_not_the_line_dropped() {
        let broken = user_text("PLACEHOLDER").replace(
            "PLACEHOLDER",
            "the Courier \\ud83d ships \\ud83d\\ude80 and \\\\ud800 stays",
        );
        let low = user_text("PLACEHOLDER").replace("PLACEHOLDER", "tail \\udc00");
        let out = Fixture::lines(&[broken, low, user_text("fine")]).delta(json!({}));
        assert_eq!(
            out["text"],
            "user: the Courier \u{fffd} ships \u{1f680} and \\ud800 stays\n\nuser: tail \u{fffd}\n\nuser: fine"
        );
        assert_eq!(out["repaired_lines"], 2);
        assert_eq!(out["skipped_lines"], 0);
        let mut out = Vec::new();
        assert!(!replace_lone_surrogates(
            br#"{"a": "\ud83d\ude80 \\ud800"}"#,
            &mut out
        ));
        assert!(out.is_empty());
    }

    #[test]
    fn escape_strings_are_dropped_whole_with_their_payload() {
        // A DCS reply and a kitty graphics APC leave nothing of their payload behind; an OSC 8
        // hyperlink keeps its visible text.
        let text = concat!(
            "a\u{1b}P1$r0m\u{1b}\\b\u{1b}_Gf=100;AAAA\u{1b}\\c\t",
            "\u{1b}]8;;https://x.test\u{7}link\u{1b}]8;;\u{7}\r\n",
            "\u{1b}[38;2;255;0;0mred\u{1b}[m \u{1b}(Bcafé\u{9b}",
        );
        assert_eq!(strip_controls(text), "abc\tlink\nred café");
    }

    #[test]
    fn registered_as_a_read_only_builtin() {
        let builtin = &builtins()[0];
        assert_eq!(builtin.name, "transcript.delta");
        assert!(!builtin.writes);
    }
}
