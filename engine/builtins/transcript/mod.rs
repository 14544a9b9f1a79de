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

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::builtins::args;
use crate::builtins::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult, Cancel, Checked};
use crate::floor::time::Clock;

mod delta;
mod line;
#[cfg(test)]
mod tests;
mod text;
mod with;

use delta::Delta;
use line::{needs_repair, parse_line, Parsed};
use with::DeltaArgs;

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

pub(super) fn run(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    delta(with, ctx, &Clock::system())
}

/// [`run`], with `settle` waiting on `clock`.
pub(super) fn delta(with: &Value, ctx: &BuiltinCtx, clock: &Clock) -> BuiltinResult {
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
pub(super) fn settle(
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

fn read_delta(path: &Path, args: &DeltaArgs, cancel: Cancel) -> io::Result<Delta> {
    let file = Checked::open(path, cancel)?;
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

pub(super) fn output_schema() -> Value {
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
