//! Built-ins: markdown.frontmatter.
//!
//! Splits a Markdown document into its YAML frontmatter (parsed to JSON) and its body, and lists
//! the problems a YAML parser would not flag but that silently change what a document says: an
//! unquoted ` #` that cuts a value short as a comment, an unquoted `: ` that may turn a value into
//! a mapping, a duplicate key whose first value is dropped, a malformed delimiter. With `require`
//! it is also a promotion gate: each listed field must be present and a non-empty string, or a
//! non-empty list of non-empty strings, where a plain token that YAML types as a null, boolean,
//! number, date or timestamp does not count as a string.
//!
//! The frontmatter is the text between a first line `---` and the next `---` line (trailing
//! whitespace allowed; `----` or `---extra` is not a delimiter). Lines are numbered from 1 in the
//! whole document, so a problem points where an editor would.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;
use schemars::JsonSchema;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Map, Value};
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use crate::builtins::args;
use crate::builtins::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult};

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![Builtin {
        name: "markdown.frontmatter",
        description: "split a Markdown document into YAML frontmatter and body, with parser-safety problems and required fields",
        writes: false,
        with_schema: args::schema::<Args>,
        with_parse: args::parses::<Args>,
        output_schema,
        run,
    }]
}

// The fields word their own failures, as this action always has ("`text` must be a string"):
// a `with` rendered from templates reaches it unchecked.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// the whole Markdown document
    text: Document,
    /// top-level fields that must be present and non-empty; `name[]` also requires a list
    #[serde(default, deserialize_with = "requirements")]
    require: Vec<Requirement>,
}

// The document, a string.
#[derive(JsonSchema)]
struct Document(String);

impl<'de> Deserialize<'de> for Document {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Whatever is given reads as a `Value`: only a missing `text` fails to, and serde asks
        // this type for a missing field's error too.
        match Value::deserialize(deserializer) {
            Ok(Value::String(text)) => Ok(Document(text)),
            _ => Err(D::Error::custom("`text` must be a string")),
        }
    }
}

fn requirements<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Requirement>, D::Error> {
    let wrong = || D::Error::custom("`require` must be a list of field names");
    match Value::deserialize(deserializer)? {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .map(|item| item.as_str().map(Requirement::parse).ok_or_else(wrong))
            .collect(),
        _ => Err(wrong()),
    }
}

fn output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "frontmatter": {
                "type": ["object", "null"],
                "description": "the parsed frontmatter; null when there is none or it does not parse",
            },
            "body": { "type": "string", "description": "the text after the closing delimiter" },
            "problems": {
                "type": "array",
                "description": "Parser-safety and required-field problems; empty when the frontmatter is safe to promote.",
                "items": {
                    "type": "object",
                    "properties": {
                        "line": { "type": ["integer", "null"], "minimum": 1, "description": "The 1-based line in the document, or null when the problem has no line." },
                        "field": { "type": ["string", "null"], "description": "The top-level field concerned, or null." },
                        "message": { "type": "string", "description": "What is wrong, as a lowercase fragment." },
                    },
                    "required": ["line", "field", "message"],
                    "additionalProperties": false,
                },
            },
        },
        "required": ["frontmatter", "body", "problems"],
        "additionalProperties": false,
    })
}

fn run(with: &Value, _ctx: &BuiltinCtx) -> BuiltinResult {
    let args = Args::deserialize(with)
        .map_err(|err| BuiltinError::new(format!("markdown.frontmatter: {err}")))?;
    Ok(analyze(&args.text.0, &args.require).to_json())
}

/// One entry of `with.require`: `name`, or `name[]` when the field must be a list.
#[derive(Debug, Clone, PartialEq)]
struct Requirement {
    name: String,
    list: bool,
}

/// Written as a string: a field name with `[]` after it when the field must be a list, which
/// only a pattern can say.
impl JsonSchema for Requirement {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Requirement".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "pattern": r"^[^\[\]]+(\[\])?$" })
    }
}

impl Requirement {
    fn parse(spec: &str) -> Self {
        match spec.strip_suffix("[]") {
            Some(name) => Requirement {
                name: name.to_string(),
                list: true,
            },
            None => Requirement {
                name: spec.to_string(),
                list: false,
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Problem {
    line: Option<usize>,
    field: Option<String>,
    message: String,
}

impl Problem {
    fn new(line: Option<usize>, field: Option<&str>, message: impl Into<String>) -> Self {
        Problem {
            line,
            field: field.map(str::to_string),
            message: message.into(),
        }
    }
}

#[derive(Debug)]
struct Analysis {
    frontmatter: Option<Value>,
    body: String,
    problems: Vec<Problem>,
}

impl Analysis {
    fn to_json(&self) -> Value {
        let problems: Vec<Value> = self
            .problems
            .iter()
            .map(|problem| {
                json!({ "line": problem.line, "field": problem.field, "message": problem.message })
            })
            .collect();
        json!({
            "frontmatter": self.frontmatter,
            "body": self.body,
            "problems": problems,
        })
    }
}

/// A line of the document without its line ending, with its 1-based number and where the next
/// line starts.
struct Line<'a> {
    number: usize,
    text: &'a str,
    end: usize,
}

fn lines(text: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (index, raw) in text.split_inclusive('\n').enumerate() {
        let end = start + raw.len();
        let content = raw.strip_suffix('\n').unwrap_or(raw);
        let content = content.strip_suffix('\r').unwrap_or(content);
        out.push(Line {
            number: index + 1,
            text: content,
            end,
        });
        start = end;
    }
    out
}

fn is_delimiter(line: &str) -> bool {
    line.trim_end() == "---"
}

/// `----` or `---extra`: meant as a delimiter, most likely, but not one.
fn is_near_delimiter(line: &str) -> bool {
    line.starts_with("---") && !is_delimiter(line)
}

fn analyze(text: &str, required: &[Requirement]) -> Analysis {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let all_lines = lines(text);
    let mut problems = Vec::new();
    let no_frontmatter = |mut problems: Vec<Problem>| {
        for requirement in required {
            problems.push(Problem::new(
                None,
                Some(&requirement.name),
                format!(
                    "`{}` is required, and the document has no frontmatter",
                    requirement.name
                ),
            ));
        }
        Analysis {
            frontmatter: None,
            body: text.to_string(),
            problems,
        }
    };

    let Some(first) = all_lines.first() else {
        return no_frontmatter(problems);
    };
    if !is_delimiter(first.text) {
        if is_near_delimiter(first.text) {
            problems.push(Problem::new(
                Some(1),
                None,
                format!(
                    "line 1 (`{}`) is not a frontmatter delimiter: it must be exactly `---`",
                    first.text.trim_end()
                ),
            ));
        }
        return no_frontmatter(problems);
    }
    let Some(closing) = all_lines[1..]
        .iter()
        .position(|line| is_delimiter(line.text))
        .map(|at| at + 1)
    else {
        let mut message = "the frontmatter opened on line 1 has no closing `---` line".to_string();
        if let Some(near) = all_lines[1..]
            .iter()
            .find(|line| is_near_delimiter(line.text))
        {
            message.push_str(&format!(
                " (line {}, `{}`, is not a delimiter: it must be exactly `---`)",
                near.number,
                near.text.trim_end()
            ));
        }
        problems.push(Problem::new(Some(1), None, message));
        return Analysis {
            frontmatter: None,
            body: text.to_string(),
            problems,
        };
    };
    let inner = &all_lines[1..closing];
    let body = text[all_lines[closing].end..].to_string();

    // The top-level key the lines below belong to, and whether they are a block scalar's text.
    let mut owner: Option<String> = None;
    let mut in_block = false;
    for line in inner {
        if is_near_delimiter(line.text) {
            problems.push(Problem::new(
                Some(line.number),
                None,
                format!(
                    "line {} (`{}`) looks like a delimiter but is not one: it must be exactly `---`",
                    line.number,
                    line.text.trim_end()
                ),
            ));
        }
        problems.extend(unquoted_value_problems(line));
        if let Some((key, value)) = top_level_entry(line.text) {
            let value = value.trim();
            in_block = value.starts_with(['|', '>']);
            owner = Some(key.to_string());
        } else if !in_block || !line.text.starts_with([' ', '\t']) {
            in_block = false;
            problems.extend(unquoted_item_problems(line, owner.as_deref()));
        }
    }

    // The YAML sees `\n` endings only, so a CRLF document parses to the same values.
    let yaml: String = inner
        .iter()
        .map(|line| format!("{}\n", line.text))
        .collect();
    let first_yaml_line = 2;
    let frontmatter = match parse_yaml(&yaml) {
        Err(error) => {
            problems.push(Problem::new(
                Some(error.line + first_yaml_line - 1),
                None,
                format!("invalid YAML: {}", error.message),
            ));
            None
        }
        Ok(None) => {
            check_required(&[], required, all_lines[closing].number, &mut problems);
            Some(Value::Object(Map::new()))
        }
        Ok(Some(Node::Map { entries, .. })) => {
            let entries: Vec<(Node, Node)> = entries
                .into_iter()
                .map(|(key, value)| {
                    (
                        key.shifted(first_yaml_line - 1),
                        value.shifted(first_yaml_line - 1),
                    )
                })
                .collect();
            duplicate_key_problems(&entries, &mut problems);
            check_required(&entries, required, all_lines[closing].number, &mut problems);
            Some(map_to_json(&entries))
        }
        Ok(Some(other)) => {
            problems.push(Problem::new(
                Some(other.line() + first_yaml_line - 1),
                None,
                format!(
                    "the frontmatter is {}, not a mapping of fields",
                    other.kind()
                ),
            ));
            None
        }
    };

    // Problems read top to bottom; those without a line (a missing field) come last.
    problems.sort_by_key(|problem| problem.line.unwrap_or(usize::MAX));
    Analysis {
        frontmatter,
        body,
        problems,
    }
}

// ---------------------------------------------------------------------------------------------
// parser-safety checks on the raw lines

/// The checks on one top-level `key: value` line whose value is a plain scalar: a YAML parser
/// accepts these, but not with the meaning the author had in mind.
fn unquoted_value_problems(line: &Line) -> Vec<Problem> {
    let Some((key, value)) = top_level_entry(line.text) else {
        return Vec::new();
    };
    let value = value.trim();
    if value.is_empty() || value.starts_with(['"', '\'', '[', '{', '|', '>']) {
        return Vec::new();
    }
    let mut problems = Vec::new();
    if value.starts_with('#') || value.contains(" #") || value.contains("\t#") {
        problems.push(Problem::new(
            Some(line.number),
            Some(key),
            format!(
                "`{key}` has an unquoted ` #`: YAML reads the rest of the line as a comment and drops it; quote the whole value"
            ),
        ));
    }
    if value.contains(": ") || value.contains(":\t") {
        problems.push(Problem::new(
            Some(line.number),
            Some(key),
            format!(
                "`{key}` has an unquoted `: `: YAML may read the value as a nested mapping; quote the whole value"
            ),
        ));
    }
    problems
}

/// The same checks on a block list's item (`- value`) that is a plain scalar: an unquoted `: `
/// makes the item a mapping, an unquoted ` #` cuts it short.
fn unquoted_item_problems(line: &Line, owner: Option<&str>) -> Vec<Problem> {
    let text = line.text.trim_start();
    let Some(value) = text.strip_prefix("- ").or_else(|| text.strip_prefix("-\t")) else {
        return Vec::new();
    };
    let value = value.trim();
    if value.is_empty() || value.starts_with(['"', '\'', '[', '{', '|', '>', '#']) {
        return Vec::new();
    }
    let field = owner.unwrap_or("a list");
    let mut problems = Vec::new();
    if value.contains(" #") || value.contains("\t#") {
        problems.push(Problem::new(
            Some(line.number),
            owner,
            format!(
                "an item of `{field}` has an unquoted ` #`: YAML reads the rest of the item as a comment and drops it; quote the whole item"
            ),
        ));
    }
    if value.contains(": ") || value.contains(":\t") || value.ends_with(':') {
        problems.push(Problem::new(
            Some(line.number),
            owner,
            format!(
                "an item of `{field}` (`{value}`) has an unquoted `: `: YAML reads it as a mapping, not a string; quote the whole item"
            ),
        ));
    }
    problems
}

/// `key: value` at the start of a line: the key (without quotes) and the raw value after `:`.
fn top_level_entry(line: &str) -> Option<(&str, &str)> {
    let first = line.chars().next()?;
    if first.is_whitespace() || matches!(first, '#' | '-' | '?' | ':' | '[' | '{' | '%' | '.') {
        return None;
    }
    if first == '"' || first == '\'' {
        let close = closing_quote(line, first)?;
        let rest = &line[close + 1..];
        let value = rest.strip_prefix(':')?;
        if !(value.is_empty() || value.starts_with([' ', '\t'])) {
            return None;
        }
        return Some((&line[1..close], value));
    }
    let colon = line
        .match_indices(':')
        .map(|(at, _)| at)
        .find(|&at| matches!(line[at + 1..].chars().next(), None | Some(' ' | '\t')))?;
    Some((line[..colon].trim_end(), &line[colon + 1..]))
}

fn closing_quote(line: &str, quote: char) -> Option<usize> {
    let mut chars = line.char_indices().skip(1).peekable();
    while let Some((at, c)) = chars.next() {
        if quote == '"' && c == '\\' {
            chars.next();
        } else if c == quote {
            // In single quotes `''` is an escaped quote.
            if quote == '\'' && chars.peek().map(|&(_, next)| next) == Some('\'') {
                chars.next();
                continue;
            }
            return Some(at);
        }
    }
    None
}

fn duplicate_key_problems(entries: &[(Node, Node)], problems: &mut Vec<Problem>) {
    let mut first_seen: HashMap<String, usize> = HashMap::new();
    for (key, _) in entries {
        let name = key.key_text();
        match first_seen.get(&name) {
            Some(first) => problems.push(Problem::new(
                Some(key.line()),
                Some(&name),
                format!("`{name}` appears more than once (first on line {first}); YAML keeps only the last"),
            )),
            None => {
                first_seen.insert(name, key.line());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// required fields

fn check_required(
    entries: &[(Node, Node)],
    required: &[Requirement],
    closing_line: usize,
    problems: &mut Vec<Problem>,
) {
    for requirement in required {
        let name = requirement.name.as_str();
        // The last one, as YAML keeps it; a duplicate is reported on its own.
        let Some((key, value)) = entries.iter().rev().find(|(key, _)| key.key_text() == name)
        else {
            problems.push(Problem::new(
                Some(closing_line),
                Some(name),
                format!("`{name}` is required but missing"),
            ));
            continue;
        };
        let mut report = |line: usize, message: String| {
            problems.push(Problem::new(Some(line), Some(name), message));
        };
        match value {
            Node::Seq { items, .. } => {
                if items.is_empty() {
                    report(key.line(), format!("`{name}` is an empty list"));
                }
                for (index, item) in items.iter().enumerate() {
                    if let Some(why) = not_a_string(item) {
                        report(item.line(), format!("item {} of `{name}` {why}", index + 1));
                    }
                }
            }
            Node::Scalar { text, style, .. }
                if requirement.list && *style == TScalarStyle::Plain && text.is_empty() =>
            {
                report(key.line(), format!("`{name}` is empty"));
            }
            _ if requirement.list => {
                report(
                    key.line(),
                    format!("`{name}` must be a list, not {}", value.kind()),
                );
            }
            _ => {
                if let Some(why) = not_a_string(value) {
                    report(key.line(), format!("`{name}` {why}"));
                }
            }
        }
    }
}

/// Why `node` is not a non-empty string, as the end of a sentence; `None` when it is one.
fn not_a_string(node: &Node) -> Option<String> {
    match node {
        Node::Seq { .. } | Node::Map { .. } => Some(format!("is {}, not a string", node.kind())),
        Node::Scalar {
            text, style, tag, ..
        } => {
            let plain = *style == TScalarStyle::Plain && !is_str_tag(tag.as_ref());
            if plain {
                match implicit_type(text) {
                    Some("null") if text.is_empty() => return Some("is empty".to_string()),
                    Some("null") => return Some(format!("is null (`{text}`), quote it")),
                    Some(kind) => return Some(format!("is a {kind} (`{text}`), quote it")),
                    None => {}
                }
            }
            if text.trim().is_empty() {
                Some("is an empty string".to_string())
            } else {
                None
            }
        }
    }
}

fn is_str_tag(tag: Option<&Tag>) -> bool {
    matches!(tag, Some(tag) if tag.handle == "tag:yaml.org,2002:" && tag.suffix == "str")
        || matches!(tag, Some(tag) if tag.handle == "!" && tag.suffix.is_empty())
}

/// The type a common YAML parser gives a plain scalar, YAML 1.1 and 1.2 together (PyYAML still
/// reads `yes`, `on`, `1:30` and dates as non-strings); `None` for a string.
fn implicit_type(text: &str) -> Option<&'static str> {
    static NUMBER: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(concat!(
            r"^[-+]?(?:",
            r"0b[01_]+|0o?[0-7_]+|0x[0-9a-fA-F_]+",
            r"|[0-9][0-9_]*(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?",
            r"|\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?",
            r"|[1-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?",
            r"|\.(?:inf|Inf|INF)",
            r")$|^\.(?:nan|NaN|NAN)$",
        ))
        .expect("the number pattern is valid")
    });
    static DATE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$").expect("the date pattern is valid")
    });
    static TIMESTAMP: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(concat!(
            r"^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}",
            r"(?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?$",
        ))
        .expect("the timestamp pattern is valid")
    });
    match text {
        "" | "~" | "null" | "Null" | "NULL" => Some("null"),
        "y" | "Y" | "yes" | "Yes" | "YES" | "n" | "N" | "no" | "No" | "NO" | "true" | "True"
        | "TRUE" | "false" | "False" | "FALSE" | "on" | "On" | "ON" | "off" | "Off" | "OFF" => {
            Some("boolean")
        }
        _ if NUMBER.is_match(text) => Some("number"),
        _ if DATE.is_match(text) => Some("date"),
        _ if TIMESTAMP.is_match(text) => Some("timestamp"),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// YAML: events to a tree that keeps each scalar's style and each node's line

#[derive(Debug, Clone)]
enum Node {
    Scalar {
        text: String,
        style: TScalarStyle,
        tag: Option<Tag>,
        line: usize,
    },
    Seq {
        items: Vec<Node>,
        line: usize,
    },
    Map {
        entries: Vec<(Node, Node)>,
        line: usize,
    },
}

impl Node {
    fn line(&self) -> usize {
        match self {
            Node::Scalar { line, .. } | Node::Seq { line, .. } | Node::Map { line, .. } => *line,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Node::Scalar { .. } => "a scalar",
            Node::Seq { .. } => "a list",
            Node::Map { .. } => "a mapping",
        }
    }

    /// The same node with its lines moved from the YAML text's numbering to the document's.
    fn shifted(self, by: usize) -> Node {
        match self {
            Node::Scalar {
                text,
                style,
                tag,
                line,
            } => Node::Scalar {
                text,
                style,
                tag,
                line: line + by,
            },
            Node::Seq { items, line } => Node::Seq {
                items: items.into_iter().map(|item| item.shifted(by)).collect(),
                line: line + by,
            },
            Node::Map { entries, line } => Node::Map {
                entries: entries
                    .into_iter()
                    .map(|(key, value)| (key.shifted(by), value.shifted(by)))
                    .collect(),
                line: line + by,
            },
        }
    }

    /// A key as a JSON object key: a scalar's text, anything else as compact JSON.
    fn key_text(&self) -> String {
        match self {
            Node::Scalar { text, .. } => text.clone(),
            other => to_json(other).to_string(),
        }
    }

    fn size(&self) -> usize {
        match self {
            Node::Scalar { .. } => 1,
            Node::Seq { items, .. } => 1 + items.iter().map(Node::size).sum::<usize>(),
            Node::Map { entries, .. } => {
                1 + entries
                    .iter()
                    .map(|(key, value)| key.size() + value.size())
                    .sum::<usize>()
            }
        }
    }

    /// The bytes of text its scalars hold, aliases counted as what they expand to.
    fn bytes(&self) -> usize {
        match self {
            Node::Scalar { text, .. } => text.len(),
            Node::Seq { items, .. } => items.iter().map(Node::bytes).sum(),
            Node::Map { entries, .. } => entries
                .iter()
                .map(|(key, value)| key.bytes() + value.bytes())
                .sum(),
        }
    }
}

#[derive(Debug)]
struct YamlError {
    line: usize,
    message: String,
}

/// Bounds on what a document can make the parser build: nesting (recursion depth) and the nodes
/// that aliases expand to (a "billion laughs" frontmatter must fail, not exhaust memory).
const MAX_DEPTH: usize = 128;
const MAX_NODES: usize = 100_000;
/// The bound on the text a document's aliases add when expanded (a 100 KB scalar aliased
/// 20,000 times would be 2 GB): beyond it, the frontmatter is refused.
pub(crate) const MAX_ALIASED_BYTES: usize = 16 << 20;

struct TreeBuilder<'a> {
    parser: Parser<std::str::Chars<'a>>,
    lines: Vec<&'a str>,
    anchors: HashMap<usize, Node>,
    nodes: usize,
    /// The bytes of text aliases expanded to so far.
    aliased_bytes: usize,
}

/// The single YAML document in `text`, `None` when it is empty.
fn parse_yaml(text: &str) -> Result<Option<Node>, YamlError> {
    let mut builder = TreeBuilder {
        parser: Parser::new_from_str(text),
        lines: text.lines().collect(),
        anchors: HashMap::new(),
        nodes: 0,
        aliased_bytes: 0,
    };
    builder.document()
}

impl TreeBuilder<'_> {
    fn next(&mut self) -> Result<(Event, Marker), YamlError> {
        self.parser.next_token().map_err(|err| YamlError {
            line: err.marker().line().max(1),
            message: format!("{} (column {})", err.info(), err.marker().col() + 1),
        })
    }

    fn unexpected(event: &Event, mark: Marker) -> YamlError {
        YamlError {
            line: mark.line().max(1),
            message: format!("unexpected {event:?}"),
        }
    }

    fn document(&mut self) -> Result<Option<Node>, YamlError> {
        let (event, mark) = self.next()?;
        if event != Event::StreamStart {
            return Err(Self::unexpected(&event, mark));
        }
        let (event, mark) = self.next()?;
        match event {
            Event::StreamEnd => return Ok(None),
            Event::DocumentStart => {}
            other => return Err(Self::unexpected(&other, mark)),
        }
        let (event, mark) = self.next()?;
        let root = self.node(event, mark, 0)?;
        let (event, mark) = self.next()?;
        if event != Event::DocumentEnd {
            return Err(Self::unexpected(&event, mark));
        }
        let (event, mark) = self.next()?;
        match event {
            Event::StreamEnd => {}
            Event::DocumentStart => {
                return Err(YamlError {
                    line: mark.line().max(1),
                    message: "a second YAML document starts here; the frontmatter must be one"
                        .to_string(),
                })
            }
            other => return Err(Self::unexpected(&other, mark)),
        }
        Ok(Some(root))
    }

    fn count(&mut self, nodes: usize, mark: Marker) -> Result<(), YamlError> {
        self.nodes += nodes;
        if self.nodes > MAX_NODES {
            return Err(YamlError {
                line: mark.line().max(1),
                message: format!("more than {MAX_NODES} values (aliases expanding too far)"),
            });
        }
        Ok(())
    }

    /// The line an empty scalar belongs to. The parser marks it where the next token starts,
    /// often on a later line (`-` then `- b`): when nothing but indentation and `-` precede that
    /// mark, the empty value ends the nearest line above that has content.
    fn empty_scalar_line(&self, mark: Marker) -> usize {
        let line = mark.line().max(1);
        let before_mark: String = self
            .lines
            .get(line - 1)
            .map(|text| text.chars().take(mark.col()).collect())
            .unwrap_or_default();
        // `- ` before the mark starts the next item, not this one.
        if before_mark.chars().any(|c| !c.is_whitespace() && c != '-') {
            return line;
        }
        (1..line)
            .rev()
            .find(|&above| {
                let text = self.lines.get(above - 1).map_or("", |text| text.trim());
                !text.is_empty() && !text.starts_with('#')
            })
            .unwrap_or(line)
    }

    fn remember(&mut self, anchor: usize, node: &Node) {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
    }

    fn node(&mut self, event: Event, mark: Marker, depth: usize) -> Result<Node, YamlError> {
        if depth > MAX_DEPTH {
            return Err(YamlError {
                line: mark.line().max(1),
                message: format!("nested more than {MAX_DEPTH} levels deep"),
            });
        }
        let line = mark.line().max(1);
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                self.count(1, mark)?;
                let line = if text.is_empty() && style == TScalarStyle::Plain {
                    self.empty_scalar_line(mark)
                } else {
                    line
                };
                let node = Node::Scalar {
                    text,
                    style,
                    tag,
                    line,
                };
                self.remember(anchor, &node);
                Ok(node)
            }
            Event::Alias(anchor) => {
                let node = self.anchors.get(&anchor).ok_or(YamlError {
                    line,
                    message: "an alias to an unknown anchor".to_string(),
                })?;
                let (size, bytes) = (node.size(), node.bytes());
                self.count(size, mark)?;
                self.aliased_bytes = self.aliased_bytes.saturating_add(bytes);
                if self.aliased_bytes > MAX_ALIASED_BYTES {
                    return Err(YamlError {
                        line,
                        message: format!(
                            "aliases expand to more than {} MiB of text (the bound on what \
                             a frontmatter's aliases may add)",
                            MAX_ALIASED_BYTES >> 20
                        ),
                    });
                }
                Ok(self.anchors[&anchor].clone())
            }
            Event::SequenceStart(anchor, _) => {
                self.count(1, mark)?;
                let mut items = Vec::new();
                loop {
                    let (event, mark) = self.next()?;
                    if event == Event::SequenceEnd {
                        break;
                    }
                    items.push(self.node(event, mark, depth + 1)?);
                }
                let node = Node::Seq { items, line };
                self.remember(anchor, &node);
                Ok(node)
            }
            Event::MappingStart(anchor, _) => {
                self.count(1, mark)?;
                let mut entries = Vec::new();
                loop {
                    let (event, mark) = self.next()?;
                    if event == Event::MappingEnd {
                        break;
                    }
                    let key = self.node(event, mark, depth + 1)?;
                    let (event, mark) = self.next()?;
                    let value = self.node(event, mark, depth + 1)?;
                    entries.push((key, value));
                }
                let node = Node::Map { entries, line };
                self.remember(anchor, &node);
                Ok(node)
            }
            other => Err(Self::unexpected(&other, mark)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// the tree as JSON: the YAML 1.2 core schema, as the parser itself resolves plain scalars

fn to_json(node: &Node) -> Value {
    match node {
        Node::Scalar {
            text, style, tag, ..
        } => {
            if *style != TScalarStyle::Plain || is_str_tag(tag.as_ref()) {
                Value::String(text.clone())
            } else {
                plain_scalar(text)
            }
        }
        Node::Seq { items, .. } => Value::Array(items.iter().map(to_json).collect()),
        Node::Map { entries, .. } => map_to_json(entries),
    }
}

fn map_to_json(entries: &[(Node, Node)]) -> Value {
    let mut map = Map::new();
    for (key, value) in entries {
        // A repeated key keeps its first position and its last value, as YAML loaders do.
        map.insert(key.key_text(), to_json(value));
    }
    Value::Object(map)
}

fn plain_scalar(text: &str) -> Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    let (sign, digits) = match text.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.strip_prefix('+').unwrap_or(text)),
    };
    let integer = if let Some(hex) = digits.strip_prefix("0x") {
        i64::from_str_radix(hex, 16).ok()
    } else if let Some(octal) = digits.strip_prefix("0o") {
        i64::from_str_radix(octal, 8).ok()
    } else if !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit()) {
        digits.parse::<i64>().ok()
    } else {
        None
    };
    if let Some(integer) = integer {
        return Value::from(sign * integer);
    }
    // Floats as the core schema writes them; `.inf` and `.nan` have no JSON form and stay text.
    static FLOAT: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")
            .expect("the float pattern is valid")
    });
    if FLOAT.is_match(text) {
        if let Some(number) = text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
        {
            return Value::Number(number);
        }
    }
    Value::String(text.to_string())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::builtins::{lookup, WriteRoots};

    fn frontmatter(text: &str, require: &[&str]) -> Value {
        let builtin = lookup("markdown.frontmatter").unwrap();
        let writes = WriteRoots::default();
        let ctx = BuiltinCtx::for_test(Path::new("."), &writes);
        let output = (builtin.run)(&json!({ "text": text, "require": require }), &ctx).unwrap();
        let schema = jsonschema::validator_for(&(builtin.output_schema)()).unwrap();
        assert!(schema.is_valid(&output), "{output}");
        output
    }

    fn problems(output: &Value) -> Vec<(Option<u64>, Option<String>, String)> {
        output["problems"]
            .as_array()
            .unwrap()
            .iter()
            .map(|problem| {
                (
                    problem["line"].as_u64(),
                    problem["field"].as_str().map(str::to_string),
                    problem["message"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    fn single_problem(output: &Value) -> (Option<u64>, Option<String>, String) {
        let mut all = problems(output);
        assert_eq!(all.len(), 1, "{:#?}", output["problems"]);
        all.remove(0)
    }

    #[test]
    fn registered_as_read_only() {
        let builtin = lookup("markdown.frontmatter").unwrap();
        assert!(!builtin.writes);
        let with = jsonschema::validator_for(&(builtin.with_schema)()).unwrap();
        assert!(with.is_valid(&json!({ "text": "", "require": ["a", "b[]"] })));
        assert!(!with.is_valid(&json!({ "require": ["a"] })));
        assert!(!with.is_valid(&json!({ "text": "", "extra": 1 })));
    }

    #[test]
    fn splits_frontmatter_and_body() {
        let text = "---\ntitle: Cache keys\ntags: [a, b]\ncount: 3\nratio: 0.5\ndraft: false\nnothing:\ndate: 2026-01-02\nnested:\n  x: \"quoted\"\n---\n# Heading\n\nBody.\n";
        let output = frontmatter(text, &[]);
        assert_eq!(
            output["frontmatter"],
            json!({
                "title": "Cache keys",
                "tags": ["a", "b"],
                "count": 3,
                "ratio": 0.5,
                "draft": false,
                "nothing": null,
                "date": "2026-01-02",
                "nested": { "x": "quoted" },
            })
        );
        assert_eq!(output["body"], "# Heading\n\nBody.\n");
        assert_eq!(output["problems"], json!([]));
        // Key order is the document's.
        let keys: Vec<&String> = output["frontmatter"].as_object().unwrap().keys().collect();
        assert_eq!(keys[0], "title");
        assert_eq!(keys[7], "nested");
    }

    #[test]
    fn no_frontmatter_at_all() {
        let text = "# Just a document\n\n---\n\nwith a rule.\n";
        let output = frontmatter(text, &[]);
        assert_eq!(output["frontmatter"], Value::Null);
        assert_eq!(output["body"], text);
        assert_eq!(output["problems"], json!([]));
        assert_eq!(frontmatter("", &[])["body"], "");
    }

    #[test]
    fn no_frontmatter_fails_required_fields() {
        let output = frontmatter("plain text\n", &["source_refs", "title"]);
        let all = problems(&output);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].1.as_deref(), Some("source_refs"));
        assert!(all[0].2.contains("has no frontmatter"), "{}", all[0].2);
        assert_eq!(all[1].1.as_deref(), Some("title"));
    }

    #[test]
    fn empty_frontmatter_is_an_empty_object() {
        let output = frontmatter("---\n---\nbody", &[]);
        assert_eq!(output["frontmatter"], json!({}));
        assert_eq!(output["body"], "body");
        assert_eq!(output["problems"], json!([]));
    }

    #[test]
    fn delimiters_allow_trailing_whitespace_only() {
        let output = frontmatter("---  \ntitle: x\n--- \t\nbody\n", &[]);
        assert_eq!(output["frontmatter"], json!({ "title": "x" }));
        assert_eq!(output["body"], "body\n");

        for first in ["----", "---extra", "--- yaml"] {
            let text = format!("{first}\ntitle: x\n---\nbody\n");
            let output = frontmatter(&text, &[]);
            assert_eq!(output["frontmatter"], Value::Null, "{first}");
            assert_eq!(output["body"], text);
            let (line, field, message) = single_problem(&output);
            assert_eq!((line, field), (Some(1), None));
            assert!(message.contains("must be exactly `---`"), "{message}");
        }
    }

    #[test]
    fn a_malformed_closing_delimiter_is_not_one() {
        let text = "---\ntitle: x\n----\nbody\n";
        let output = frontmatter(text, &[]);
        assert_eq!(output["frontmatter"], Value::Null);
        assert_eq!(output["body"], text);
        let (line, _, message) = single_problem(&output);
        assert_eq!(line, Some(1));
        assert!(message.contains("no closing `---`"), "{message}");
        assert!(
            message.contains("line 3, `----`, is not a delimiter"),
            "{message}"
        );
    }

    #[test]
    fn a_malformed_delimiter_inside_is_reported() {
        let output = frontmatter("---\ntitle: x\n---extra\n---\nbody\n", &[]);
        let all = problems(&output);
        assert!(
            all.iter()
                .any(|(line, _, message)| *line == Some(3)
                    && message.contains("looks like a delimiter")),
            "{all:?}"
        );
    }

    #[test]
    fn missing_closing_delimiter() {
        let text = "---\ntitle: x\nbody without end\n";
        let output = frontmatter(text, &["title"]);
        assert_eq!(output["frontmatter"], Value::Null);
        assert_eq!(output["body"], text);
        let (line, field, message) = single_problem(&output);
        assert_eq!((line, field), (Some(1), None));
        assert_eq!(
            message,
            "the frontmatter opened on line 1 has no closing `---` line"
        );
    }

    #[test]
    fn unquoted_hash_truncates_as_a_comment() {
        let output = frontmatter(
            "---\ntitle: Fix bug #42\nissue: #42\nok: \"a #b\"\nurl: http://x/#frag\n---\n",
            &[],
        );
        // The parser drops what follows ` #`: the reason for the check.
        assert_eq!(output["frontmatter"]["title"], "Fix bug");
        assert_eq!(output["frontmatter"]["issue"], Value::Null);
        assert_eq!(output["frontmatter"]["ok"], "a #b");
        let all = problems(&output);
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[0].0, Some(2));
        assert_eq!(all[0].1.as_deref(), Some("title"));
        assert!(all[0].2.contains("unquoted ` #`"), "{}", all[0].2);
        assert_eq!(all[1].0, Some(3));
        assert_eq!(all[1].1.as_deref(), Some("issue"));
    }

    #[test]
    fn unquoted_colon_space_is_mapping_confusion() {
        let output = frontmatter(
            "---\nsummary: note: this matters\nquoted: 'note: fine'\nblock: |\n  note: fine\ntime: 10:30\nflow: {a: b}\n---\n",
            &[],
        );
        let all = problems(&output);
        let colon: Vec<_> = all
            .iter()
            .filter(|(_, _, message)| message.contains("unquoted `: `"))
            .collect();
        assert_eq!(colon.len(), 1, "{all:?}");
        assert_eq!(colon[0].0, Some(2));
        assert_eq!(colon[0].1.as_deref(), Some("summary"));
    }

    #[test]
    fn list_items_follow_the_quoting_rule() {
        let output = frontmatter(
            "---\ntags:\n  - scope: cross-model\n  - \"scope: quoted\"\n  - plain\nsymptoms:\n- fails on retry #2 only\n- 'a # kept'\nnote: |\n  - inside: a block\n---\n",
            &[],
        );
        let all = problems(&output);
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[0].0, Some(3));
        assert_eq!(all[0].1.as_deref(), Some("tags"));
        assert!(
            all[0]
                .2
                .contains("(`scope: cross-model`) has an unquoted `: `"),
            "{all:?}"
        );
        assert_eq!(all[1].0, Some(7));
        assert_eq!(all[1].1.as_deref(), Some("symptoms"));
        assert!(all[1].2.contains("unquoted ` #`"), "{all:?}");
    }

    #[test]
    fn quoted_keys_are_checked_too() {
        let output = frontmatter("---\n\"my key\": a #b\n'it''s': c\n---\n", &[]);
        let (line, field, _) = single_problem(&output);
        assert_eq!((line, field.as_deref()), (Some(2), Some("my key")));
        assert_eq!(output["frontmatter"]["it's"], "c");
    }

    #[test]
    fn yaml_syntax_error_with_its_line() {
        let output = frontmatter("---\ntitle: x\ntags: [a, b\nother: y\n---\nbody\n", &[]);
        assert_eq!(output["frontmatter"], Value::Null);
        assert_eq!(output["body"], "body\n");
        let all = problems(&output);
        let syntax: Vec<_> = all
            .iter()
            .filter(|(_, _, message)| message.starts_with("invalid YAML"))
            .collect();
        assert_eq!(syntax.len(), 1, "{all:?}");
        let line = syntax[0].0.unwrap();
        assert!((3..=5).contains(&line), "{all:?}");

        let output = frontmatter("---\na: 1\nb: [c\n---\n", &[]);
        let (line, _, message) = single_problem(&output);
        assert!(message.starts_with("invalid YAML"), "{message}");
        assert_eq!(line, Some(4));
    }

    #[test]
    fn a_frontmatter_that_is_not_a_mapping() {
        let output = frontmatter("---\n- a\n- b\n---\n", &[]);
        assert_eq!(output["frontmatter"], Value::Null);
        let (line, _, message) = single_problem(&output);
        assert_eq!(line, Some(2));
        assert!(message.contains("is a list, not a mapping"), "{message}");
    }

    #[test]
    fn duplicate_top_level_keys() {
        let output = frontmatter("---\ntitle: one\nother: x\ntitle: two\n---\n", &[]);
        assert_eq!(output["frontmatter"]["title"], "two");
        let (line, field, message) = single_problem(&output);
        assert_eq!((line, field.as_deref()), (Some(4), Some("title")));
        assert!(message.contains("first on line 2"), "{message}");
    }

    const PROMOTION: &[&str] = &["source_refs[]", "invalidation_condition"];

    #[test]
    fn the_promotion_gate_passes_a_good_document() {
        let text = "---\ntitle: x\nsource_refs:\n  - \"docs/a.md\"\n  - src/cache.rs:42\n  - '2024-01-01'\ninvalidation_condition: >\n  when the cache key format changes\n---\n";
        let output = frontmatter(text, PROMOTION);
        assert_eq!(output["problems"], json!([]));
        assert_eq!(
            output["frontmatter"]["source_refs"],
            json!(["docs/a.md", "src/cache.rs:42", "2024-01-01"])
        );
    }

    #[test]
    fn required_fields_missing_or_empty() {
        let output = frontmatter("---\ntitle: x\nsource_refs: []\n---\n", PROMOTION);
        let all = problems(&output);
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(
            all[0],
            (
                Some(3),
                Some("source_refs".into()),
                "`source_refs` is an empty list".into()
            )
        );
        assert_eq!(
            all[1],
            (
                Some(4),
                Some("invalidation_condition".into()),
                "`invalidation_condition` is required but missing".into()
            )
        );

        let output = frontmatter(
            "---\nsource_refs:\ninvalidation_condition: \"  \"\n---\n",
            PROMOTION,
        );
        let all = problems(&output);
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[0].2, "`source_refs` is empty");
        assert_eq!(all[1].2, "`invalidation_condition` is an empty string");
    }

    #[test]
    fn required_list_items_must_be_strings() {
        let text = "---\nsource_refs:\n  - docs/a.md\n  - 2024-01-01\n  - yes\n  - 42\n  - ~\n  -\n  - \"\"\n  - [nested]\n  - 1:30\n  - 2024-01-01 10:00:00\n  - !!str 7\ninvalidation_condition: when x\n---\n";
        let output = frontmatter(text, PROMOTION);
        let all = problems(&output);
        let messages: Vec<(u64, &str)> = all
            .iter()
            .map(|(line, _, message)| (line.unwrap(), message.as_str()))
            .collect();
        assert_eq!(
            messages,
            vec![
                (
                    4,
                    "item 2 of `source_refs` is a date (`2024-01-01`), quote it"
                ),
                (5, "item 3 of `source_refs` is a boolean (`yes`), quote it"),
                (6, "item 4 of `source_refs` is a number (`42`), quote it"),
                (7, "item 5 of `source_refs` is null (`~`), quote it"),
                (8, "item 6 of `source_refs` is empty"),
                (9, "item 7 of `source_refs` is an empty string"),
                (10, "item 8 of `source_refs` is a list, not a string"),
                (11, "item 9 of `source_refs` is a number (`1:30`), quote it"),
                (
                    12,
                    "item 10 of `source_refs` is a timestamp (`2024-01-01 10:00:00`), quote it"
                ),
            ]
        );
        assert!(all
            .iter()
            .all(|(_, field, _)| field.as_deref() == Some("source_refs")));
    }

    #[test]
    fn required_scalars_must_be_strings() {
        let output = frontmatter(
            "---\ninvalidation_condition: 2026-01-01\n---\n",
            &["invalidation_condition"],
        );
        let (line, _, message) = single_problem(&output);
        assert_eq!(line, Some(2));
        assert_eq!(
            message,
            "`invalidation_condition` is a date (`2026-01-01`), quote it"
        );

        let output = frontmatter("---\nowner:\n  name: x\n---\n", &["owner"]);
        assert_eq!(
            single_problem(&output).2,
            "`owner` is a mapping, not a string"
        );

        // Without `[]` a list of strings also passes; with it, a string does not.
        let output = frontmatter("---\nrefs: [a, b]\n---\n", &["refs"]);
        assert_eq!(output["problems"], json!([]));
        let output = frontmatter("---\nrefs: docs/a.md\n---\n", &["refs[]"]);
        assert_eq!(
            single_problem(&output).2,
            "`refs` must be a list, not a scalar"
        );
    }

    #[test]
    fn chinese_body_and_values() {
        let text = "---\ntitle: 缓存键\nsource_refs:\n  - 文档/设计.md\n---\n正文：缓存键的设计。\n第二行\n";
        let output = frontmatter(text, &["title", "source_refs[]"]);
        assert_eq!(output["frontmatter"]["title"], "缓存键");
        assert_eq!(
            output["frontmatter"]["source_refs"],
            json!(["文档/设计.md"])
        );
        assert_eq!(output["body"], "正文：缓存键的设计。\n第二行\n");
        assert_eq!(output["problems"], json!([]));
    }

    #[test]
    fn crlf_line_endings() {
        let text = "---\r\ntitle: Fix #1 now\r\nnotes: |\r\n  one\r\n  two\r\n---\r\nbody line\r\nmore\r\n";
        let output = frontmatter(text, &["title"]);
        assert_eq!(output["frontmatter"]["title"], "Fix");
        assert_eq!(output["frontmatter"]["notes"], "one\ntwo\n");
        assert_eq!(output["body"], "body line\r\nmore\r\n");
        let (line, field, message) = single_problem(&output);
        assert_eq!((line, field.as_deref()), (Some(2), Some("title")));
        assert!(message.contains("` #`"), "{message}");
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        let output = frontmatter("\u{feff}---\ntitle: x\n---\nbody", &[]);
        assert_eq!(output["frontmatter"], json!({ "title": "x" }));
        assert_eq!(output["body"], "body");
    }

    #[test]
    fn closing_delimiter_at_end_of_text() {
        let output = frontmatter("---\ntitle: x\n---", &[]);
        assert_eq!(output["frontmatter"], json!({ "title": "x" }));
        assert_eq!(output["body"], "");
    }

    #[test]
    fn aliases_expand_but_are_bounded() {
        let output = frontmatter("---\nbase: &b [x, y]\ncopy: *b\n---\n", &[]);
        assert_eq!(output["frontmatter"]["copy"], json!(["x", "y"]));

        let mut bomb = String::from("---\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..8 {
            let previous = format!("*a{}", level - 1);
            let items = vec![previous; 10].join(", ");
            bomb.push_str(&format!("a{level}: &a{level} [{items}]\n"));
        }
        bomb.push_str("---\n");
        let output = frontmatter(&bomb, &[]);
        assert_eq!(output["frontmatter"], Value::Null);
        assert!(single_problem(&output)
            .2
            .contains("aliases expanding too far"));
    }

    #[test]
    fn aliased_bytes_are_bounded() {
        // A 100 KB scalar aliased 20,000 times: 2 GB once expanded, refused at once.
        let mut bomb = format!("---\nbig: &b {}\nall: [", "x".repeat(100_000));
        bomb.push_str(&vec!["*b"; 20_000].join(", "));
        bomb.push_str("]\n---\n");
        let started = std::time::Instant::now();
        let output = frontmatter(&bomb, &[]);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(output["frontmatter"], Value::Null);
        assert!(single_problem(&output).2.contains("MiB of text"));
        // Aliases under the bound still expand.
        let text = format!("---\nbig: &b {}\nall: [*b, *b]\n---\n", "x".repeat(100_000));
        let output = frontmatter(&text, &[]);
        assert_eq!(
            output["frontmatter"]["all"][1].as_str().map(str::len),
            Some(100_000)
        );
    }

    #[test]
    fn deep_nesting_is_bounded() {
        let text = format!("---\nx: {}{}\n---\n", "[".repeat(300), "]".repeat(300));
        let output = frontmatter(&text, &[]);
        assert_eq!(output["frontmatter"], Value::Null);
        assert!(single_problem(&output).2.starts_with("invalid YAML"));
    }

    #[test]
    fn bad_arguments() {
        let builtin = lookup("markdown.frontmatter").unwrap();
        let writes = WriteRoots::default();
        let ctx = BuiltinCtx::for_test(Path::new("."), &writes);
        let err = (builtin.run)(&json!({ "text": 3 }), &ctx).unwrap_err();
        assert_eq!(err.0, "markdown.frontmatter: `text` must be a string");
        let err = (builtin.run)(&json!({}), &ctx).unwrap_err();
        assert_eq!(err.0, "markdown.frontmatter: `text` must be a string");
        let err = (builtin.run)(&json!({ "text": "", "require": "title" }), &ctx).unwrap_err();
        assert!(err.0.contains("`require` must be a list"), "{err}");
    }

    #[test]
    fn implicit_types() {
        for (text, kind) in [
            ("1_000", Some("number")),
            ("-0x1F", Some("number")),
            ("1e3", Some("number")),
            (".5", Some("number")),
            (".inf", Some("number")),
            (".NaN", Some("number")),
            ("190:20:30", Some("number")),
            ("Off", Some("boolean")),
            ("2001-12-14t21:59:43.10-05:00", Some("timestamp")),
            ("v1.2", None),
            ("1.2.3", None),
            ("src/a.rs", None),
            ("abc-2024-01-01", None),
        ] {
            assert_eq!(implicit_type(text), kind, "{text}");
        }
    }
}
