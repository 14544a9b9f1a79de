//! Built-in `transcript.delta`: the prose of a Claude Code session transcript (JSONL) added after a
//! line cursor, with tool traffic, thinking and images left out and the text capped.
//!
//! Invariants: `total_lines` counts complete lines only, so a line still being written is never
//! passed by the next cursor; lines before the cursor are counted, never parsed; memory stays
//! bounded by the caps, whatever the size of the file.

use std::collections::VecDeque;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};
use std::path::Path;

use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult};

/// Appended where a text was cut.
const CUT_MARKER: &str = "…";

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![Builtin {
        name: "transcript.delta",
        description: "the user and assistant prose of a Claude Code transcript after a line cursor",
        writes: false,
        with_schema,
        output_schema,
        run,
    }]
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeltaArgs {
    path: String,
    #[serde(default)]
    after_line: u64,
    #[serde(default = "default_fallback_lines")]
    fallback_lines: u64,
    #[serde(default = "default_max_part_bytes")]
    max_part_bytes: usize,
    #[serde(default = "default_max_bytes")]
    max_bytes: usize,
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
    let args: DeltaArgs = serde_json::from_value(with.clone())
        .map_err(|err| BuiltinError::new(format!("invalid transcript.delta arguments: {err}")))?;
    let delta = read_delta(&ctx.resolve(&args.path), &args).map_err(|err| {
        BuiltinError::new(format!("cannot read transcript `{}`: {err}", args.path))
    })?;
    Ok(delta.into_json(&args.path))
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
/// without being built, which keeps large tool payloads cheap.
#[derive(Deserialize)]
struct TranscriptLine {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(rename = "isMeta", default)]
    is_meta: Option<bool>,
    #[serde(rename = "isSidechain", default)]
    is_sidechain: Option<bool>,
    #[serde(default)]
    message: Option<Message>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<Content>,
}

enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ContentVisitor;

        impl<'de> Visitor<'de> for ContentVisitor {
            type Value = Content;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or a list of content blocks")
            }

            fn visit_str<E>(self, text: &str) -> Result<Content, E> {
                Ok(Content::Text(text.to_owned()))
            }

            fn visit_string<E>(self, text: String) -> Result<Content, E> {
                Ok(Content::Text(text))
            }

            fn visit_unit<E>(self) -> Result<Content, E> {
                Ok(Content::Blocks(Vec::new()))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
                let mut blocks = Vec::new();
                while let Some(block) = seq.next_element::<Block>()? {
                    blocks.push(block);
                }
                Ok(Content::Blocks(blocks))
            }
        }

        deserializer.deserialize_any(ContentVisitor)
    }
}

/// What one line turned out to be.
enum Parsed {
    Blank,
    /// Not JSON at all.
    Invalid,
    /// JSON, but not a message this built-in reads (summary, system, snapshot, odd shape).
    Other,
    Message(TranscriptLine),
}

fn parse_line(bytes: &[u8]) -> Parsed {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Parsed::Blank;
    }
    match serde_json::from_slice::<TranscriptLine>(bytes) {
        Ok(line) => Parsed::Message(line),
        // A shape this reader does not know is still a line of the transcript, not damage.
        Err(_) if serde_json::from_slice::<IgnoredAny>(bytes).is_ok() => Parsed::Other,
        Err(_) => Parsed::Invalid,
    }
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
    tool_lines: u64,
    skipped_lines: u64,
    dropped_blocks: DroppedBlocks,
    max_part_bytes: usize,
    max_bytes: usize,
}

const SEPARATOR: &str = "\n\n";

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
            tool_lines: 0,
            skipped_lines: 0,
            dropped_blocks: DroppedBlocks::default(),
            max_part_bytes: args.max_part_bytes,
            max_bytes: args.max_bytes,
        }
    }

    fn add(&mut self, parsed: Parsed) {
        self.delta_lines += 1;
        let line = match parsed {
            Parsed::Blank | Parsed::Other => return,
            Parsed::Invalid => {
                self.skipped_lines += 1;
                return;
            }
            Parsed::Message(line) => line,
        };
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
        let mut texts: Vec<String> = Vec::new();
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
        if line.is_sidechain == Some(true) {
            self.tool_lines += 1;
            return;
        }
        let prose: Vec<&str> = texts
            .iter()
            .map(|text| text.trim())
            .filter(|text| !text.is_empty())
            .collect();
        if prose.is_empty() {
            if tool_blocks > 0 {
                self.tool_lines += 1;
            }
            return;
        }
        self.content_lines += 1;
        match speaker {
            Speaker::User => self.user_prose += 1,
            Speaker::Assistant => self.assistant_prose += 1,
        }
        let text = cap_text(&prose.join("\n"), self.max_part_bytes);
        self.push_part(Part { speaker, text });
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
            "content_lines": self.content_lines,
            "user_prose": self.user_prose,
            "assistant_prose": self.assistant_prose,
            "tool_lines": self.tool_lines,
            "skipped_lines": self.skipped_lines,
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

fn read_delta(path: &Path, args: &DeltaArgs) -> io::Result<Delta> {
    let mut reader = BufReader::with_capacity(1 << 16, File::open(path)?);
    let mut delta = Delta::new(args);
    let mut buf = Vec::new();
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
        let parsed = (after_cursor || !complete).then(|| parse_line(&buf));
        if !complete && matches!(parsed, Some(Parsed::Invalid)) {
            // Still being written: not counted, so the next cursor comes back for it.
            break;
        }
        delta.total_lines += 1;
        if args.fallback_lines > 0 {
            tail_starts.push_back(offset);
            if tail_starts.len() as u64 > args.fallback_lines {
                tail_starts.pop_front();
            }
        }
        offset += read as u64;
        if let Some(parsed) = parsed.filter(|_| after_cursor) {
            delta.add(parsed);
        }
    }
    if args.after_line <= delta.total_lines {
        delta.from_line = args.after_line;
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
            delta.add(parse_line(&buf));
        }
    }
    Ok(delta)
}

fn with_schema() -> Value {
    json!({
        "type": "object",
        "description": "Where the transcript is and which part of it to read.",
        "additionalProperties": false,
        "required": ["path"],
        "properties": {
            "path": {
                "type": "string",
                "minLength": 1,
                "description": "The transcript file (JSONL, one JSON object per line); relative paths resolve against the run's working directory."
            },
            "after_line": {
                "type": "integer",
                "minimum": 0,
                "default": 0,
                "description": "The cursor: how many lines were already read. The delta is every complete line after it; pass the previous run's total_lines."
            },
            "fallback_lines": {
                "type": "integer",
                "minimum": 0,
                "default": 500,
                "description": "When after_line is past the end of the file (rotated or truncated), the delta is this many last lines instead."
            },
            "max_part_bytes": {
                "type": "integer",
                "minimum": 1,
                "default": 2048,
                "description": "Cap in bytes on the prose of one message; a longer one is cut on a character boundary and ends with \"…\"."
            },
            "max_bytes": {
                "type": "integer",
                "minimum": 1,
                "default": 16384,
                "description": "Cap in bytes on the whole text; when over, the oldest messages are left out first."
            }
        }
    })
}

fn output_schema() -> Value {
    let count =
        |description: &str| json!({ "type": "integer", "minimum": 0, "description": description });
    json!({
        "type": "object",
        "description": "The prose added to the transcript after the cursor, and what else was there.",
        "additionalProperties": false,
        "required": [
            "path", "total_lines", "from_line", "rotated", "text", "content_lines", "user_prose",
            "assistant_prose", "tool_lines", "skipped_lines", "only_tools", "dropped_parts",
            "dropped_blocks"
        ],
        "properties": {
            "path": { "type": "string", "description": "The transcript path, as given." },
            "total_lines": count("Complete lines in the file: the cursor to pass as after_line next time. A last line without a newline that does not parse yet is not counted."),
            "from_line": count("Lines before the delta: the delta is lines from_line+1 through total_lines (1-based). Equals after_line unless rotated."),
            "rotated": { "type": "boolean", "description": "True when after_line was past the end of the file and the last fallback_lines lines were read instead." },
            "text": { "type": "string", "description": "The delta's prose, oldest first, as \"user: ...\" and \"assistant: ...\" paragraphs separated by blank lines; thinking, images and tool traffic left out; capped by max_part_bytes and max_bytes." },
            "content_lines": count("Lines of the delta that carried prose."),
            "user_prose": count("Lines of the delta with prose written by the user (tool results excluded)."),
            "assistant_prose": count("Lines of the delta with prose written by the assistant."),
            "tool_lines": count("Lines of the delta that were only tool traffic: tool calls, tool results, sub-agent (sidechain) messages."),
            "skipped_lines": count("Lines of the delta that are not JSON; they are skipped, not fatal."),
            "only_tools": { "type": "boolean", "description": "True when the delta has lines but none of them carried prose." },
            "dropped_parts": count("Messages with prose left out of text because of max_bytes (the oldest ones)."),
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
            let ctx = BuiltinCtx {
                cwd: self.dir.path(),
                writes: &roots,
            };
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
        lines.insert(4, "".into());
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
        let mut file = io::BufWriter::new(File::create(&path).expect("create"));
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
        let ctx = BuiltinCtx {
            cwd: dir.path(),
            writes: &roots,
        };
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

    #[test]
    fn arguments_and_files_are_checked() {
        let roots = WriteRoots::default();
        let dir = tempfile::tempdir().expect("temp dir");
        let ctx = BuiltinCtx {
            cwd: dir.path(),
            writes: &roots,
        };
        let missing = run(&json!({ "path": "none.jsonl" }), &ctx).expect_err("missing file");
        assert!(
            missing.0.starts_with("cannot read transcript `none.jsonl`"),
            "{missing}"
        );
        let unknown = run(&json!({ "path": "x", "cursor": 1 }), &ctx).expect_err("unknown key");
        assert!(unknown.0.contains("cursor"), "{unknown}");
        let schema = with_schema();
        validate(&schema, &json!({ "path": "t.jsonl", "after_line": 3 }));
        let validator = jsonschema::validator_for(&schema).expect("schema compiles");
        assert!(!validator.is_valid(&json!({ "after_line": 3 })));
        assert!(!validator.is_valid(&json!({ "path": "t", "after_line": -1 })));
    }

    #[test]
    fn registered_as_a_read_only_builtin() {
        let builtin = &builtins()[0];
        assert_eq!(builtin.name, "transcript.delta");
        assert!(!builtin.writes);
    }
}
