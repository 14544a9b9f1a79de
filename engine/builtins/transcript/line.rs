//! The transcript's format: one JSON object a line, read only as far as the delta needs, with lone
//! UTF-16 surrogates repaired rather than the line dropped.

use std::fmt;

use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// One line of the transcript, read only as far as the delta needs; every other field is skipped
/// without being built, and tool payloads are kept as raw JSON, parsed only when they answer a
/// question, which keeps large tool traffic cheap.
#[derive(Deserialize)]
pub(super) struct TranscriptLine<'a> {
    #[serde(rename = "type", default)]
    pub(super) kind: Option<String>,
    #[serde(rename = "isMeta", default)]
    pub(super) is_meta: Option<bool>,
    #[serde(rename = "isSidechain", default)]
    pub(super) is_sidechain: Option<bool>,
    #[serde(rename = "isCompactSummary", default)]
    pub(super) is_compact_summary: Option<bool>,
    #[serde(default, borrow)]
    pub(super) message: Option<Message<'a>>,
    /// `queue-operation`: enqueue, dequeue, remove, popAll.
    #[serde(default)]
    pub(super) operation: Option<String>,
    /// `queue-operation`: why an entry left the queue.
    #[serde(default)]
    pub(super) reason: Option<String>,
    /// Of the Claude Code version that wrote the line (most lines but the queue's carry one):
    /// whether it records an absorbed queued message as a `remove` without a reason.
    #[serde(
        rename = "version",
        default,
        deserialize_with = "version_removes_absorb"
    )]
    pub(super) removes_absorb: Option<bool>,
    /// `queue-operation`: the queued text; other lines may carry other things here.
    #[serde(default, borrow)]
    pub(super) content: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub(super) attachment: Option<&'a RawValue>,
    /// The structured result of the tool call this line answers (AskUserQuestion's answers).
    #[serde(rename = "toolUseResult", default, borrow)]
    pub(super) tool_use_result: Option<&'a RawValue>,
}

#[derive(Deserialize)]
pub(super) struct Message<'a> {
    #[serde(default)]
    pub(super) role: Option<String>,
    #[serde(default, borrow)]
    pub(super) content: Option<Content<'a>>,
}

pub(super) enum Content<'a> {
    Text(String),
    Blocks(Vec<Block<'a>>),
}

#[derive(Deserialize)]
pub(super) struct Block<'a> {
    #[serde(rename = "type", default)]
    pub(super) kind: Option<String>,
    #[serde(default)]
    pub(super) text: Option<String>,
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) tool_use_id: Option<String>,
    #[serde(default, borrow)]
    pub(super) input: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub(super) content: Option<&'a RawValue>,
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
pub(super) fn raw_text(raw: &RawValue) -> Option<String> {
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
pub(super) struct QueuedCommand<'a> {
    #[serde(rename = "type", default)]
    pub(super) kind: Option<String>,
    #[serde(default, borrow)]
    pub(super) prompt: Option<&'a RawValue>,
}

/// The questions of an `AskUserQuestion` call.
#[derive(Deserialize)]
pub(super) struct AskInput {
    #[serde(default)]
    pub(super) questions: Vec<AskQuestion>,
}

#[derive(Deserialize)]
pub(super) struct AskQuestion {
    #[serde(default)]
    pub(super) question: String,
}

/// `toolUseResult` of an `AskUserQuestion` call: question -> answer.
#[derive(Deserialize)]
pub(super) struct AskResult {
    #[serde(default)]
    pub(super) answers: serde_json::Map<String, Value>,
}

/// What one line turned out to be.
pub(super) enum Parsed<'a> {
    Blank,
    /// Not JSON at all.
    Invalid,
    /// JSON, but not a line this built-in reads (odd shape).
    Other,
    Line(TranscriptLine<'a>),
}

pub(super) fn parse_line<'a>(bytes: &'a [u8], repaired: &'a mut Vec<u8>) -> Parsed<'a> {
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
pub(super) fn needs_repair(bytes: &[u8]) -> bool {
    let mut scratch = Vec::new();
    bytes.windows(3).any(|w| w == b"\\ud" || w == b"\\uD")
        && replace_lone_surrogates(bytes, &mut scratch)
}

/// Writes `bytes` to `out` with every `\uXXXX` escape of a lone surrogate replaced by `\ufffd`;
/// false (and `out` empty) when there was none.
pub(super) fn replace_lone_surrogates(bytes: &[u8], out: &mut Vec<u8>) -> bool {
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

fn version_removes_absorb<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<bool>, D::Error> {
    let version = Option::<std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
    Ok(version.map(|version| removes_absorb(&version)))
}

/// Whether a Claude Code of `version` (`2.1.241`) records an absorbed queued message as a
/// `remove` without a reason: every version before 2.1.246.
pub(super) fn removes_absorb(version: &str) -> bool {
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
