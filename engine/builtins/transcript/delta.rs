//! What was said after the cursor, gathered line by line: each of the user's words said once,
//! whatever the place they come from, and the assistant's prose, within the caps.

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::line::{
    raw_text, AskInput, AskResult, Block, Content, Parsed, QueuedCommand, TranscriptLine,
};
use super::text::{cap_text, classify_user_text, strip_controls, UserText};
use super::with::DeltaArgs;

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

/// Content blocks that were read but not kept.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct DroppedBlocks {
    thinking: u64,
    image: u64,
    tool: u64,
    other: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Part {
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
pub(super) struct Delta {
    pub(super) total_lines: u64,
    pub(super) from_line: u64,
    pub(super) rotated: bool,
    pub(super) parts: VecDeque<Part>,
    /// Rendered size of `parts`, separators included.
    pub(super) parts_len: usize,
    pub(super) dropped_parts: u64,
    pub(super) delta_lines: u64,
    pub(super) content_lines: u64,
    pub(super) user_prose: u64,
    pub(super) assistant_prose: u64,
    pub(super) user_words: u64,
    pub(super) assistant_words: u64,
    pub(super) queued_parts: u64,
    pub(super) answer_parts: u64,
    pub(super) noise_parts: u64,
    pub(super) tool_lines: u64,
    pub(super) skipped_lines: u64,
    pub(super) repaired_lines: u64,
    pub(super) dropped_blocks: DroppedBlocks,
    /// The newest compaction summary, capped.
    pub(super) summary: Option<String>,
    /// Messages enqueued and not yet dequeued, removed or seen again, oldest first.
    pub(super) queue: VecDeque<String>,
    /// Queued messages already given as prose (by a `remove` or an attachment).
    pub(super) queued_said: HashSet<String>,
    /// The transcript was written by a Claude Code that records an absorbed message as a
    /// `remove` without a reason (before 2.1.246), as far as its lines' versions tell.
    pub(super) remove_absorbs: bool,
    /// `AskUserQuestion` calls of the delta: tool_use id -> its questions.
    pub(super) questions: HashMap<String, Vec<String>>,
    pub(super) max_part_bytes: usize,
    pub(super) max_bytes: usize,
}

const SEPARATOR: &str = "\n\n";

impl Delta {
    pub(super) fn new(args: &DeltaArgs) -> Self {
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

    pub(super) fn add(&mut self, parsed: Parsed, repaired: bool) {
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
    pub(super) fn finish(&mut self) {
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

    pub(super) fn into_json(self, path: &str) -> Value {
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
