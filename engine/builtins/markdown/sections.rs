//! Built-ins: markdown.sections, markdown.replace_section.
//!
//! A section is a heading (ATX, `#` to `######`, or setext, a line underlined with `===` or
//! `---`; outside code, HTML blocks and front matter, and not inside a block quote or a list) and
//! the text after it up to the next heading of the same or a higher level. `markdown.sections`
//! reads a document into its sections; `markdown.replace_section` replaces the body of exactly one
//! section and splices it back, so every byte outside that body (headings included) stays as it
//! was. That is what lets a tool own one section of a file a person edits.

use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::builtins::args;
use crate::builtins::schema::object_schema;
use crate::builtins::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult};

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![
        Builtin {
            name: "markdown.sections",
            description: "A Markdown document's sections: each heading with its level and body.",
            writes: false,
            with_schema: args::schema::<SectionsArgs>,
            with_parse: args::parses::<SectionsArgs>,
            output_schema: sections_output_schema,
            run: sections,
        },
        Builtin {
            name: "markdown.replace_section",
            description: "Replace the body of one Markdown section, keeping every other byte.",
            writes: false,
            with_schema: args::schema::<ReplaceArgs>,
            with_parse: args::parses::<ReplaceArgs>,
            output_schema: replace_output_schema,
            run: replace_section,
        },
    ]
}

/// One heading and where its section lies, as byte offsets into the text.
#[derive(Debug, Clone, PartialEq)]
struct Section {
    heading: String,
    level: usize,
    /// 1-based line of the heading.
    line: usize,
    /// The body: from just after the heading line to the start of the next heading of the same
    /// or a higher level (or the end).
    body_start: usize,
    body_end: usize,
}

/// The document's sections, read by a CommonMark parser (pulldown-cmark): ATX headings and
/// setext ones (a line of text underlined with `===` or `---`), but not what only looks like
/// one (inside fenced or indented code, an HTML block, the YAML front matter); only headings
/// at the top level count, not those inside a block quote or a list item. A heading's text is
/// its content as written (inline markup kept, a closing run of `#` dropped).
fn parse(text: &str) -> Vec<Section> {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    // (level, heading, line, start of heading, end of heading line)
    let mut headings: Vec<(usize, String, usize, usize, usize)> = Vec::new();
    // Block quotes, list items and footnotes the parser is inside.
    let mut nested = 0usize;
    // The heading being read: its level, start, and the span of its content.
    /// A span of the text, as byte offsets.
    type Span = (usize, usize);
    let mut open: Option<(usize, usize, Option<Span>)> = None;
    let options = Options::ENABLE_YAML_STYLE_METADATA_BLOCKS
        | Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES;
    for (event, range) in Parser::new_ext(text, options).into_offset_iter() {
        match event {
            Event::Start(Tag::BlockQuote(_) | Tag::Item | Tag::FootnoteDefinition(_)) => {
                nested += 1;
            }
            Event::End(TagEnd::BlockQuote(_) | TagEnd::Item | TagEnd::FootnoteDefinition) => {
                nested = nested.saturating_sub(1);
            }
            Event::Start(Tag::Heading { level, .. }) if nested == 0 => {
                open = Some((level as usize, range.start, None));
            }
            Event::End(TagEnd::Heading(_)) => {
                let Some((level, start, content)) = open.take() else {
                    continue;
                };
                let heading = content.map_or("", |(from, to)| text[from..to].trim());
                // The body starts on the line after the heading's last (its underline, for a
                // setext heading).
                let body_start = if text[..range.end].ends_with('\n') {
                    range.end
                } else {
                    text[range.end..]
                        .find('\n')
                        .map_or(text.len(), |at| range.end + at + 1)
                };
                let line = text[..start].bytes().filter(|&b| b == b'\n').count() + 1;
                headings.push((level, heading.to_string(), line, start, body_start));
            }
            _ => {
                if let Some((_, _, content)) = open.as_mut() {
                    *content = Some(match *content {
                        Some((from, to)) => (from.min(range.start), to.max(range.end)),
                        None => (range.start, range.end),
                    });
                }
            }
        }
    }
    let mut sections = Vec::with_capacity(headings.len());
    for (at, (level, heading, line, _, body_start)) in headings.iter().enumerate() {
        let body_end = headings[at + 1..]
            .iter()
            .find(|next| next.0 <= *level)
            .map_or(text.len(), |next| next.3);
        sections.push(Section {
            heading: heading.clone(),
            level: *level,
            line: *line,
            body_start: *body_start,
            body_end,
        });
    }
    sections
}

// ---------------------------------------------------------------------------------------------
// markdown.sections

/// Read a Markdown document into its sections.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SectionsArgs {
    /// The document.
    text: String,
}

fn sections_output_schema() -> Value {
    let mut schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "description": "Every heading (ATX or setext) outside code and front matter, in document order, with its section's body (up to the next heading of the same or a higher level).",
        "type": "array",
        "items": {
            "type": "object",
            "description": "One section.",
            "properties": {
                "heading": { "type": "string", "description": "The heading's text, without the `#`s." },
                "level": { "type": "integer", "minimum": 1, "maximum": 6, "description": "How many `#`s." },
                "line": { "type": "integer", "minimum": 1, "description": "The heading's line, from 1." },
                "body": { "type": "string", "description": "The text after the heading line, exactly as written." },
            },
            "required": ["heading", "level", "line", "body"],
            "additionalProperties": false,
        },
    });
    schema["examples"] =
        json!([[{ "heading": "Step 1", "level": 2, "line": 3, "body": "\nfill this\n\n" }]]);
    schema
}

fn sections(with: &Value, _ctx: &BuiltinCtx) -> BuiltinResult {
    let args: SectionsArgs = args::parse("markdown.sections", with)?;
    let found: Vec<Value> = parse(&args.text)
        .into_iter()
        .map(|section| {
            json!({
                "heading": section.heading,
                "level": section.level,
                "line": section.line,
                "body": &args.text[section.body_start..section.body_end],
            })
        })
        .collect();
    Ok(Value::Array(found))
}

// ---------------------------------------------------------------------------------------------
// markdown.replace_section

/// Replace the body of the one section whose heading matches.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReplaceArgs {
    /// The document.
    text: String,
    /// A regular expression that exactly one heading's text must match, e.g. `^Step 2\b`.
    #[schemars(length(min = 1))]
    heading: String,
    /// The new body. It is written between one blank line after the heading and one blank line
    /// before the next heading.
    content: String,
}

fn replace_output_schema() -> Value {
    let mut schema = object_schema(
        "The document with the section replaced.",
        json!({
            "text": { "type": "string", "description": "The whole new document." },
            "changed": { "type": "boolean", "description": "False when the section already held exactly this body." },
            "line": { "type": "integer", "description": "The replaced section's heading line, from 1." },
        }),
        &["text", "changed", "line"],
    );
    schema["examples"] =
        json!([{ "text": "# Doc\n\n## Step 2\n\nnew\n", "changed": true, "line": 3 }]);
    schema
}

fn replace_section(with: &Value, _ctx: &BuiltinCtx) -> BuiltinResult {
    let args: ReplaceArgs = args::parse("markdown.replace_section", with)?;
    let pattern = Regex::new(&args.heading)
        .map_err(|err| BuiltinError::new(format!("invalid `heading` pattern: {err}")))?;
    let all = parse(&args.text);
    let matching: Vec<&Section> = all
        .iter()
        .filter(|s| pattern.is_match(&s.heading))
        .collect();
    let section = match matching.as_slice() {
        [one] => *one,
        [] => {
            return Err(BuiltinError::new(format!(
                "no heading matches `{}` (headings: {})",
                args.heading,
                all.iter()
                    .map(|s| format!("`{}`", s.heading))
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
        several => {
            return Err(BuiltinError::new(format!(
                "{} headings match `{}` (lines {}); it must name one section",
                several.len(),
                args.heading,
                several
                    .iter()
                    .map(|s| s.line.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
    };
    let last = section.body_end == args.text.len();
    let content = args.content.trim_matches(['\n', '\r']);
    let body = match (content.is_empty(), last) {
        (true, _) => "\n".to_string(),
        (false, true) => format!("\n{content}\n"),
        (false, false) => format!("\n{content}\n\n"),
    };
    let old = &args.text[section.body_start..section.body_end];
    let text = format!(
        "{}{}{}",
        &args.text[..section.body_start],
        body,
        &args.text[section.body_end..]
    );
    Ok(json!({ "text": text, "changed": old != body, "line": section.line }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtins::testing::Sandbox;

    const DOC: &str = "# Review\n\nintro\n\n## Step 1 — Predictions\n\n- *\"for ___\"*\n\n```md\n## Step 2 inside a fence\n```\n\n## Step 2 — Disagreements\n\n(Run `stagegraph run review` again.)\n\n### detail\n\nkept with step 2\n\n## Step 3 — Sign-off\n\n- [ ] reviewed\n- [x] provisional  \n\n---\n\ntrailer\n";

    fn call(name: &str, with: Value) -> BuiltinResult {
        Sandbox::new().call(name, with)
    }

    #[test]
    fn sections_skip_fenced_code_and_nest_lower_levels() {
        let out = call("markdown.sections", json!({ "text": DOC })).expect("sections");
        let headings: Vec<&str> = out
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["heading"].as_str().unwrap())
            .collect();
        assert_eq!(
            headings,
            [
                "Review",
                "Step 1 — Predictions",
                "Step 2 — Disagreements",
                "detail",
                "Step 3 — Sign-off"
            ]
        );
        assert!(out[2]["body"]
            .as_str()
            .unwrap()
            .contains("kept with step 2"));
        assert!(out[1]["body"].as_str().unwrap().contains("inside a fence"));
        assert_eq!(out[4]["line"], 21);
        let closed = parse("## closed ##\n");
        assert_eq!((closed[0].level, closed[0].heading.as_str()), (2, "closed"));
        assert!(parse("#hashtag\n").is_empty());
    }

    #[test]
    fn replace_keeps_every_other_byte() {
        let out = call(
            "markdown.replace_section",
            json!({ "text": DOC, "heading": "^Step 2\\b", "content": "- [ ] accept  [ ] reject   one\n" }),
        )
        .expect("replace");
        let text = out["text"].as_str().unwrap();
        let before =
            DOC.find("## Step 2 — Disagreements\n").unwrap() + "## Step 2 — Disagreements\n".len();
        let after = DOC.find("## Step 3").unwrap();
        assert_eq!(&text[..before], &DOC[..before]);
        assert!(text.ends_with(&DOC[after..]));
        assert_eq!(
            &text[before..text.len() - (DOC.len() - after)],
            "\n- [ ] accept  [ ] reject   one\n\n"
        );
        assert_eq!(out["changed"], true);
        let again = call(
            "markdown.replace_section",
            json!({ "text": text, "heading": "^Step 2\\b", "content": "- [ ] accept  [ ] reject   one" }),
        )
        .expect("again");
        assert_eq!(again["text"], text);
        assert_eq!(again["changed"], false);
    }

    #[test]
    fn setext_headings_are_sections_and_look_alikes_are_not() {
        let text = concat!(
            "---\ntitle: front matter\n# not a heading\n---\n\n",
            "Guide `intro`\n=============\n\nbody one\n\n",
            "Setup\n-----\nbody two\n\n",
            "    # indented code\n\n",
            "> # quoted\n\n",
            "<div>\n# inside html\n</div>\n\n",
            "## Closing ##\r\nlast\n",
        );
        let sections = parse(text);
        let seen: Vec<(usize, &str, usize)> = sections
            .iter()
            .map(|s| (s.level, s.heading.as_str(), s.line))
            .collect();
        assert_eq!(
            seen,
            [
                (1, "Guide `intro`", 6),
                (2, "Setup", 11),
                (2, "Closing", 23)
            ]
        );
        let guide = &text[sections[0].body_start..sections[0].body_end];
        assert!(guide.starts_with("\nbody one\n"), "{guide:?}");
        assert!(
            guide.ends_with("\nlast\n"),
            "a level 1 runs to the end: {guide:?}"
        );
        let setup = &text[sections[1].body_start..sections[1].body_end];
        assert!(setup.starts_with("body two\n"), "{setup:?}");
        assert!(setup.ends_with("</div>\n\n"), "{setup:?}");
        assert_eq!(
            &text[sections[2].body_start..sections[2].body_end],
            "last\n"
        );
    }

    #[test]
    fn replace_needs_exactly_one_match() {
        let err = call(
            "markdown.replace_section",
            json!({ "text": DOC, "heading": "^Step", "content": "" }),
        )
        .expect_err("several");
        assert!(err.0.contains("3 headings match"), "{err}");
        let err = call(
            "markdown.replace_section",
            json!({ "text": DOC, "heading": "^Step 9", "content": "" }),
        )
        .expect_err("none");
        assert!(err.0.contains("no heading matches"), "{err}");
    }

    #[test]
    fn the_last_section_ends_the_document() {
        let out = call(
            "markdown.replace_section",
            json!({ "text": "# A\n\nold\n", "heading": "^A$", "content": "new" }),
        )
        .expect("replace");
        assert_eq!(out["text"], "# A\n\nnew\n");
    }
}
