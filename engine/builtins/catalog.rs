//! Built-in `catalog.merge`: merges a list of entries (typically a model's answer) into a markdown
//! catalog and renders the result; it computes only, a workflow writes the file with `fs.write`.
//!
//! The format: a header line, `## <Area>` sections, `### <Concept>` entries with one bullet per
//! configured key (`- **Definition**: ...`). A project lexicon is one instance of it.
//!
//! The header, the keys and the summary's label are the caller's: no catalog's text is built in.
//!
//! Invariants: rendering is deterministic (areas and concepts sorted, fixed blank lines, values
//! normalized), so rendering a rendered catalog again is byte-identical and merging the same
//! entries twice changes nothing. A hand-written entry is never silently rewritten: one that
//! breaks the format is kept as written and marked with a `<!-- TODO: invariant ... -->` comment,
//! lines outside any entry are kept where they are under a `<!-- TODO: invariant lines outside
//! any entry -->` line, and a conflicting definition is marked, not overwritten. Every merge
//! applies every rule, even with no entries to merge; the result is unchanged (`changed: false`)
//! only when the file already keeps them all.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Map, Value};

use super::args;
use super::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult};

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![Builtin {
        name: "catalog.merge",
        description: "merge entries into a markdown catalog of areas and concepts and render it",
        writes: false,
        with_schema: args::schema::<MergeArgs>,
        with_parse: args::parses::<MergeArgs>,
        output_schema,
        run,
    }]
}

const INVARIANT_PREFIX: &str = "TODO: invariant";
const TODO_PREFIX: &str = "TODO";
/// How much of a conflicting definition a contradiction marker quotes, in characters.
const CONTRADICTION_QUOTE_CHARS: usize = 80;

/// The catalog as it is, the entries to merge into it, and its format.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct MergeArgs {
    /// The catalog file's current text; null or absent when the file does not exist yet. Parsed
    /// leniently: hand edits survive.
    current: Option<String>,
    /// Entries to merge, usually a model's answer. Matched to existing entries by concept name,
    /// case-insensitively: in the same area first, then in any area. An entry without an area only
    /// updates an existing concept.
    entries: Vec<RawEntry>,
    /// The line the file always starts with (one line).
    #[schemars(length(min = 1))]
    header: String,
    /// The bullets of every entry, in order. The first one (not a list) carries the entry's TODO
    /// markers and is checked for contradictions.
    #[schemars(length(min = 1))]
    keys: Vec<KeySpec>,
    /// The list key whose items must each name a concept of the file. Absent: `relations` when a
    /// key has that field; null: none.
    #[serde(default)]
    #[schemars(extend("default" = "relations"))]
    relation_field: Role,
    /// The list key holding other names of a concept; a new relation naming an alias is rewritten
    /// to the concept. Absent: `aliases` when a key has that field; null: none.
    #[serde(default)]
    #[schemars(extend("default" = "aliases"))]
    alias_field: Role,
    /// The text key citing where an entry comes from: the newer one is kept, and its YYYY-MM-DD
    /// date orders pruning ("inferred" or no date: oldest). Absent: `source` when a key has that
    /// field; null: none.
    #[serde(default)]
    #[schemars(extend("default" = "source"))]
    source_field: Role,
    /// The noun the summary starts with ("Catalog updated: ...").
    #[serde(default = "default_label")]
    #[schemars(length(min = 1))]
    label: String,
    /// Line budget of the rendered file; the oldest unreferenced, unflagged entries are pruned
    /// until it fits.
    #[serde(default = "default_max_lines")]
    #[schemars(range(min = 1))]
    max_lines: usize,
    /// Byte budget of the rendered file, pruned like max_lines.
    #[serde(default = "default_max_bytes")]
    #[schemars(range(min = 1))]
    max_bytes: usize,
}

/// One bullet: `- **<label>**: <value>`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct KeySpec {
    /// The property name in `entries` (not `area` or `concept`).
    #[schemars(length(min = 1))]
    field: String,
    /// The bold label in the file.
    #[schemars(length(min = 1))]
    label: String,
    /// A comma-separated list ("none" when empty), merged by union; otherwise one line of text.
    #[serde(default)]
    list: bool,
}

/// One entry to merge, as given: read leniently by [`candidate`], which warns of what it skips.
/// Its schema names `area` and `concept` and types the key fields, whose names the keys choose;
/// a struct could not say that, so the schema is written out here.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
struct RawEntry(Map<String, Value>);

impl JsonSchema for RawEntry {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RawEntry".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "description": "One concept: its area, its name, and one property per key field (for the default keys: definition, aliases, relations, source).",
            "required": ["concept"],
            "properties": {
                "area": { "type": "string", "description": "The area (## section) a new concept goes to; ignored when the concept already exists." },
                "concept": { "type": "string", "minLength": 1, "description": "The concept name (### heading)." }
            },
            "additionalProperties": {
                "type": ["string", "number", "boolean", "null", "array"],
                "description": "A key's value: text, or for list keys a list of strings or a comma-separated string."
            }
        })
    }
}

/// A role field as written: absent, the usual field when a key has it (so custom keys need not
/// switch off roles they lack); null, no field plays the role; else the field named.
#[derive(Debug, Clone, Default)]
enum Role {
    #[default]
    Usual,
    Off,
    Field(String),
}

impl Role {
    /// The field playing the role, `usual` standing for itself when a key has that field.
    fn field(&self, usual: &str, keys: &[KeySpec]) -> Option<String> {
        match self {
            Role::Usual => keys
                .iter()
                .any(|key| key.field == usual)
                .then(|| usual.to_owned()),
            Role::Off => None,
            Role::Field(field) => Some(field.clone()),
        }
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match Option::<String>::deserialize(deserializer)? {
            Some(field) => Role::Field(field),
            None => Role::Off,
        })
    }
}

impl JsonSchema for Role {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Role".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        Option::<String>::json_schema(generator)
    }
}

fn parse_args(with: &Value) -> Result<MergeArgs, BuiltinError> {
    serde_json::from_value(with.clone())
        .map_err(|err| BuiltinError::new(format!("invalid catalog.merge arguments: {err}")))
}

fn default_label() -> String {
    "Catalog".to_owned()
}

fn default_max_lines() -> usize {
    300
}

fn default_max_bytes() -> usize {
    12288
}

/// The checked shape of a catalog: its header and keys, and which keys play which role.
#[derive(Debug)]
struct Format {
    header: String,
    keys: Vec<KeySpec>,
    relation: Option<usize>,
    alias: Option<usize>,
    source: Option<usize>,
}

impl Format {
    fn new(args: &MergeArgs) -> Result<Format, BuiltinError> {
        let header = args.header.trim();
        if header.is_empty() || header.contains('\n') {
            return Err(BuiltinError::new(
                "catalog header must be one non-empty line",
            ));
        }
        if args.keys.is_empty() {
            return Err(BuiltinError::new("catalog keys must not be empty"));
        }
        let mut fields = HashSet::new();
        let mut labels = HashSet::new();
        for key in &args.keys {
            if key.field.is_empty() || key.field == "area" || key.field == "concept" {
                return Err(BuiltinError::new(format!(
                    "catalog key field `{}` is empty or reserved (area, concept)",
                    key.field
                )));
            }
            let label_ok = !key.label.trim().is_empty()
                && key.label.trim() == key.label
                && !key.label.contains(['*', ':', '\n']);
            if !label_ok {
                return Err(BuiltinError::new(format!(
                    "catalog key label `{}` must be non-empty, trimmed, without `*`, `:` or newlines",
                    key.label
                )));
            }
            if !fields.insert(key.field.as_str()) {
                return Err(BuiltinError::new(format!(
                    "duplicate catalog key field `{}`",
                    key.field
                )));
            }
            if !labels.insert(key.label.to_lowercase()) {
                return Err(BuiltinError::new(format!(
                    "duplicate catalog key label `{}`",
                    key.label
                )));
            }
        }
        if args.keys[0].list {
            return Err(BuiltinError::new(format!(
                "the first catalog key `{}` carries the entry's markers and must not be a list",
                args.keys[0].field
            )));
        }
        let role = |name: &str,
                    role: &Role,
                    usual: &str,
                    list: bool|
         -> Result<Option<usize>, BuiltinError> {
            let Some(field) = role.field(usual, &args.keys) else {
                return Ok(None);
            };
            match args.keys.iter().position(|key| key.field == field) {
                Some(index) if args.keys[index].list == list => Ok(Some(index)),
                Some(_) => Err(BuiltinError::new(format!(
                    "{name} `{field}` must name a key with list = {list}"
                ))),
                None => Err(BuiltinError::new(format!(
                    "{name} `{field}` names no catalog key"
                ))),
            }
        };
        Ok(Format {
            header: header.to_owned(),
            keys: args.keys.clone(),
            relation: role("relation_field", &args.relation_field, "relations", true)?,
            alias: role("alias_field", &args.alias_field, "aliases", true)?,
            source: role("source_field", &args.source_field, "source", false)?,
        })
    }

    fn key_by_label(&self, label: &str) -> Option<usize> {
        self.keys
            .iter()
            .position(|key| same_name(&key.label, label))
    }
}

/// One key's value in an entry.
#[derive(Debug, Clone, PartialEq)]
enum Field {
    Text(String),
    List(Vec<String>),
}

impl Field {
    fn empty(list: bool) -> Field {
        if list {
            Field::List(Vec::new())
        } else {
            Field::Text(String::new())
        }
    }

    fn parse(text: &str, list: bool) -> Field {
        if list {
            Field::List(parse_list(text))
        } else {
            Field::Text(text.trim().to_owned())
        }
    }

    fn render(&self) -> String {
        match self {
            Field::Text(text) => text.clone(),
            Field::List(items) if items.is_empty() => "none".to_owned(),
            Field::List(items) => items.join(", "),
        }
    }

    fn items(&self) -> &[String] {
        match self {
            Field::List(items) => items,
            Field::Text(_) => &[],
        }
    }
}

/// A comma-separated list: items trimmed, empty ones and case-insensitive repeats dropped, a lone
/// "none" meaning no item.
fn parse_list(text: &str) -> Vec<String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("none") {
        return Vec::new();
    }
    let mut items: Vec<String> = Vec::new();
    for item in text
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
    {
        if !contains_ci(&items, item) {
            items.push(item.to_owned());
        }
    }
    items
}

fn contains_ci(items: &[String], item: &str) -> bool {
    items.iter().any(|existing| same_name(existing, item))
}

fn same_name(a: &str, b: &str) -> bool {
    a.to_lowercase() == b.to_lowercase()
}

/// A line of an entry kept as written.
#[derive(Debug, Clone, PartialEq)]
enum BodyLine {
    /// The first line of that key: rendered from the entry's value, normalized.
    Key(usize),
    /// Anything else, right-trimmed.
    Raw(String),
}

#[derive(Debug, Clone)]
struct Entry {
    id: usize,
    concept: String,
    /// One value per key, in key order; a missing key holds an empty value.
    fields: Vec<Field>,
    /// HTML comments at the end of the first key's line (or of the heading when that line is
    /// missing), without `<!--` and `-->`.
    markers: Vec<String>,
    /// `None` when the entry has exactly the configured keys: it renders in canonical form.
    /// Otherwise its lines as written, so a broken edit survives.
    layout: Option<Vec<BodyLine>>,
    /// What is wrong with the entry's own lines.
    problems: Vec<String>,
    added: bool,
}

impl Entry {
    fn is_todo_marked(&self) -> bool {
        self.markers
            .iter()
            .any(|marker| marker.starts_with(TODO_PREFIX))
    }

    fn add_marker(&mut self, marker: String) {
        if !self.markers.contains(&marker) {
            self.markers.push(marker);
        }
    }
}

#[derive(Debug, Clone)]
struct Area {
    name: String,
    /// Hand-written lines between the area's heading and its first entry, kept as written.
    stray: Vec<String>,
    entries: Vec<Entry>,
}

impl Area {
    fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.stray.is_empty()
    }
}

#[derive(Debug, Default)]
struct Catalog {
    /// Hand-written lines between the header and the first area, kept as written.
    preamble: Vec<String>,
    areas: Vec<Area>,
    next_id: usize,
}

/// The line that marks hand-written lines outside any entry; made again on every render.
const STRAY_MARKER: &str = "<!-- TODO: invariant lines outside any entry -->";
/// How a summary names the lines outside any entry when it flags them.
const STRAY_NAME: &str = "(lines outside any entry)";

/// `(lowercase, bytes)`: case-insensitive order with a deterministic tie-break.
fn sort_key(name: &str) -> (String, String) {
    (name.to_lowercase(), name.to_owned())
}

impl Catalog {
    fn area_index(&mut self, name: &str) -> usize {
        if let Some(index) = self
            .areas
            .iter()
            .position(|area| same_name(&area.name, name))
        {
            return index;
        }
        self.areas.push(Area {
            name: name.to_owned(),
            stray: Vec::new(),
            entries: Vec::new(),
        });
        self.areas.len() - 1
    }

    fn new_id(&mut self) -> usize {
        self.next_id += 1;
        self.next_id
    }

    fn sort(&mut self) {
        self.areas.retain(|area| !area.is_empty());
        self.areas.sort_by_cached_key(|area| sort_key(&area.name));
        for area in &mut self.areas {
            area.entries
                .sort_by_cached_key(|entry| sort_key(&entry.concept));
        }
    }

    fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.areas.iter().flat_map(|area| area.entries.iter())
    }

    fn has_stray_lines(&self) -> bool {
        !self.preamble.is_empty() || self.areas.iter().any(|area| !area.stray.is_empty())
    }

    /// The first entry named `concept`, preferring `area`. Aliases are not matched: which entry
    /// an alias would pick can change as the merge adds aliases, and that would make merging the
    /// same entries twice move information around; naming the canonical concept is the caller's
    /// job (the alias resolution of relations happens once all entries are in).
    fn find(&self, area: &str, concept: &str) -> Option<(usize, usize)> {
        let in_area = |want_area: bool| {
            self.areas.iter().enumerate().find_map(|(a, candidate)| {
                if want_area && !same_name(&candidate.name, area) {
                    return None;
                }
                let e = candidate
                    .entries
                    .iter()
                    .position(|entry| same_name(&entry.concept, concept))?;
                Some((a, e))
            })
        };
        in_area(true).or_else(|| in_area(false))
    }
}

// --- parsing ---------------------------------------------------------------------------------

/// The name after `level` hashes, when the line is a heading of exactly that level.
fn heading(line: &str, level: usize) -> Option<&str> {
    let rest = line.strip_prefix(&"#".repeat(level)[..])?;
    match rest.chars().next() {
        None => Some(""),
        Some(c) if c.is_whitespace() => Some(rest.trim()),
        Some(_) => None,
    }
}

fn is_comment_line(line: &str) -> bool {
    line.starts_with("<!--") && line.ends_with("-->")
}

/// Splits trailing `<!-- ... -->` comments off a value: `(value, markers)`.
fn split_markers(text: &str) -> (String, Vec<String>) {
    let mut rest = text.trim();
    let mut markers = Vec::new();
    while let Some(body) = rest.strip_suffix("-->") {
        let Some(start) = body.rfind("<!--") else {
            break;
        };
        markers.push(body[start + 4..].trim().to_owned());
        rest = body[..start].trim_end();
    }
    markers.reverse();
    (rest.to_owned(), markers)
}

static BULLET: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[-*+]\s+\*\*(.+?)\*\*(.*)$").expect("constant pattern"));

/// `- **Label**: value` or `- **Label:** value`, as `(label, value)`.
fn parse_bullet(line: &str) -> Option<(&str, &str)> {
    let captures = BULLET.captures(line)?;
    let label = captures.get(1)?.as_str().trim();
    let rest = captures.get(2)?.as_str();
    if let Some(label) = label.strip_suffix(':') {
        Some((label.trim(), rest.trim()))
    } else {
        rest.trim_start()
            .strip_prefix(':')
            .map(|value| (label, value.trim()))
    }
}

fn is_bullet(line: &str) -> bool {
    matches!(line.chars().next(), Some('-' | '*' | '+'))
        && line.chars().nth(1).is_some_and(char::is_whitespace)
}

fn parse_entry(id: usize, title: &str, lines: &[&str], format: &Format) -> Entry {
    let (concept, mut markers) = split_markers(title);
    let mut fields: Vec<Option<Field>> = vec![None; format.keys.len()];
    let mut layout = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    for line in lines {
        let trimmed = line.trim();
        let raw = BodyLine::Raw(line.trim_end().to_owned());
        let Some((label, value)) = parse_bullet(trimmed) else {
            problems.push(
                if is_bullet(trimmed) {
                    "extra bullet"
                } else {
                    "unexpected line"
                }
                .to_owned(),
            );
            layout.push(raw);
            continue;
        };
        match format.key_by_label(label) {
            Some(key) if fields[key].is_none() => {
                let value = if key == 0 {
                    let (value, line_markers) = split_markers(value);
                    markers.extend(line_markers);
                    value
                } else {
                    value.to_owned()
                };
                fields[key] = Some(Field::parse(&value, format.keys[key].list));
                layout.push(BodyLine::Key(key));
            }
            Some(key) => {
                problems.push(format!("duplicate {}", format.keys[key].label));
                layout.push(raw);
            }
            None => {
                problems.push(format!("extra bullet {label}"));
                layout.push(raw);
            }
        }
    }
    for (key, field) in fields.iter().enumerate() {
        if field.is_none() {
            problems.push(format!("missing {}", format.keys[key].label));
        }
    }
    dedupe(&mut problems);
    let fields = fields
        .into_iter()
        .zip(&format.keys)
        .map(|(field, key)| field.unwrap_or_else(|| Field::empty(key.list)))
        .collect();
    Entry {
        id,
        concept,
        fields,
        markers,
        layout: (!problems.is_empty()).then_some(layout),
        problems,
        added: false,
    }
}

fn dedupe(items: &mut Vec<String>) {
    let mut seen = HashSet::new();
    items.retain(|item| seen.insert(item.clone()));
}

/// Reads a catalog leniently: a line that is not the header, an area or an entry is kept where it
/// is (before the first area, or in its area before the first entry) and marked; entries before
/// any area land in an area with no name (and get flagged).
fn parse(text: &str, format: &Format, warnings: &mut Vec<String>) -> Catalog {
    struct Open<'t> {
        area: usize,
        title: &'t str,
        lines: Vec<&'t str>,
    }
    let mut catalog = Catalog::default();
    let mut area: Option<usize> = None;
    let mut open: Option<Open> = None;
    let mut first = true;
    let close = |catalog: &mut Catalog, open: Option<Open>| {
        if let Some(open) = open {
            let id = catalog.new_id();
            let entry = parse_entry(id, open.title, &open.lines, format);
            catalog.areas[open.area].entries.push(entry);
        }
    };
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if std::mem::take(&mut first) && (trimmed == format.header || is_comment_line(trimmed)) {
            continue;
        }
        if let Some(name) = heading(trimmed, 2) {
            close(&mut catalog, open.take());
            area = Some(catalog.area_index(name));
        } else if let Some(title) = heading(trimmed, 3) {
            close(&mut catalog, open.take());
            let area = *area.get_or_insert_with(|| catalog.area_index(""));
            open = Some(Open {
                area,
                title,
                lines: Vec::new(),
            });
        } else if let Some(open) = open.as_mut() {
            open.lines.push(line);
        } else if trimmed != STRAY_MARKER {
            warnings.push(format!(
                "kept and marked a line outside any entry: {}",
                shorten(trimmed, 60)
            ));
            let kept = line.trim_end().to_owned();
            match area {
                Some(area) => catalog.areas[area].stray.push(kept),
                None => catalog.preamble.push(kept),
            }
        }
    }
    close(&mut catalog, open.take());
    catalog
}

// --- invariants ------------------------------------------------------------------------------

/// Recomputes every entry's invariant marker from its own problems and the whole catalog's
/// (duplicates, dangling relations). Expects a sorted catalog, so the first of duplicates is
/// always the same one.
fn check_invariants(catalog: &mut Catalog, format: &Format) {
    let concepts: HashSet<String> = catalog
        .entries()
        .map(|entry| entry.concept.to_lowercase())
        .collect();
    for area in &mut catalog.areas {
        let mut seen = HashSet::new();
        let area_name = area.name.clone();
        for entry in &mut area.entries {
            let mut problems = entry.problems.clone();
            if area_name.is_empty() {
                problems.push("no area".to_owned());
            }
            if entry.concept.is_empty() {
                problems.push("empty concept name".to_owned());
            }
            if !seen.insert(entry.concept.to_lowercase()) {
                problems.push("duplicate concept in area".to_owned());
            }
            if let Some(relation) = format.relation {
                for target in entry.fields[relation].items() {
                    if !concepts.contains(&target.to_lowercase()) {
                        problems.push(format!("dangling relation {target}"));
                    }
                }
            }
            entry
                .markers
                .retain(|marker| !marker.starts_with(INVARIANT_PREFIX));
            if !problems.is_empty() {
                let marker = format!("{INVARIANT_PREFIX} {}", problems.join("; "));
                entry.markers.push(comment_safe(&marker));
            }
        }
    }
}

// --- rendering -------------------------------------------------------------------------------

fn join_words<'a>(words: impl IntoIterator<Item = &'a str>) -> String {
    words
        .into_iter()
        .filter(|word| !word.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn render_markers(markers: &[String]) -> Vec<String> {
    markers
        .iter()
        .map(|marker| format!("<!-- {marker} -->"))
        .collect()
}

fn render_entry(entry: &Entry, format: &Format) -> String {
    let markers = render_markers(&entry.markers);
    let on_heading = entry
        .layout
        .as_ref()
        .is_some_and(|layout| !layout.contains(&BodyLine::Key(0)));
    let mut heading = vec!["###", entry.concept.as_str()];
    if on_heading {
        heading.extend(markers.iter().map(String::as_str));
    }
    let mut lines = vec![join_words(heading)];
    let key_line = |key: usize| {
        let value = entry.fields[key].render();
        let mut words = vec![value.as_str()];
        if key == 0 {
            words.extend(markers.iter().map(String::as_str));
        }
        let content = join_words(words);
        let label = &format.keys[key].label;
        if content.is_empty() {
            format!("- **{label}**:")
        } else {
            format!("- **{label}**: {content}")
        }
    };
    match &entry.layout {
        None => lines.extend((0..format.keys.len()).map(key_line)),
        Some(layout) => lines.extend(layout.iter().map(|line| match line {
            BodyLine::Key(key) => key_line(*key),
            BodyLine::Raw(raw) => raw.clone(),
        })),
    }
    lines.join("\n")
}

/// Lines outside any entry, under the line that marks them.
fn render_stray(lines: &[String]) -> String {
    std::iter::once(STRAY_MARKER.to_owned())
        .chain(lines.iter().cloned())
        .collect::<Vec<_>>()
        .join("\n")
}

fn render_area_heading(name: &str) -> String {
    join_words(["##", name])
}

/// Header, then every non-empty area and its entries, one blank line between blocks, one
/// newline at the end.
fn render(catalog: &Catalog, format: &Format) -> String {
    let mut blocks = vec![format.header.clone()];
    if !catalog.preamble.is_empty() {
        blocks.push(render_stray(&catalog.preamble));
    }
    for area in catalog.areas.iter().filter(|area| !area.is_empty()) {
        blocks.push(render_area_heading(&area.name));
        if !area.stray.is_empty() {
            blocks.push(render_stray(&area.stray));
        }
        blocks.extend(area.entries.iter().map(|entry| render_entry(entry, format)));
    }
    blocks.join("\n\n") + "\n"
}

// --- merging ---------------------------------------------------------------------------------

/// One entry of the answer, normalized; `None` where it says nothing.
#[derive(Debug)]
struct Candidate {
    area: String,
    concept: String,
    fields: Vec<Option<Field>>,
}

/// Whitespace collapsed, and nothing that could open or close an HTML comment.
fn clean_text(text: &str) -> String {
    // A value copied from the file may carry its markers: they are the file's, not the value's.
    let text = TODO_COMMENT.replace_all(text, " ");
    comment_safe(&text.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// A TODO marker comment as the file writes it (or a garbled copy of one).
static TODO_COMMENT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"<!-{1,2}\s*TODO:.*?(-{1,2}>|$)").expect("constant pattern"));

fn comment_safe(text: &str) -> String {
    text.replace("<!--", "<!-").replace("-->", "->")
}

/// A name usable in a heading: cleaned, without leading `#`.
fn clean_name(text: &str) -> String {
    clean_text(text).trim_start_matches('#').trim().to_owned()
}

fn shorten(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_owned();
    }
    let kept: String = text.chars().take(chars.saturating_sub(1)).collect();
    format!("{}…", kept.trim_end())
}

fn candidate(
    raw: &Map<String, Value>,
    format: &Format,
    warnings: &mut Vec<String>,
) -> Option<Candidate> {
    let text_of = |value: &Value| match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    };
    let concept = raw
        .get("concept")
        .and_then(text_of)
        .map(|text| clean_name(&text))
        .unwrap_or_default();
    if concept.is_empty() {
        warnings.push("skipped an entry without a concept name".to_owned());
        return None;
    }
    let area = raw
        .get("area")
        .and_then(text_of)
        .map(|text| clean_name(&text))
        .unwrap_or_default();
    let mut fields = vec![None; format.keys.len()];
    for (name, value) in raw {
        if name == "area" || name == "concept" {
            continue;
        }
        let Some(key) = format.keys.iter().position(|key| &key.field == name) else {
            warnings.push(format!("entry `{concept}`: unknown field `{name}` ignored"));
            continue;
        };
        let field = match (value, format.keys[key].list) {
            (Value::Null, _) => continue,
            (Value::Array(items), true) => {
                let joined: Vec<String> = items
                    .iter()
                    .filter_map(text_of)
                    .map(|item| clean_text(&item.replace(',', " ")))
                    .collect();
                Field::List(parse_list(&joined.join(",")))
            }
            (value, list) => match text_of(value) {
                Some(text) if list => Field::List(parse_list(&clean_text(&text))),
                Some(text) => Field::Text(clean_text(&text)),
                None => {
                    warnings.push(format!(
                        "entry `{concept}`: field `{name}` has an unusable value, ignored"
                    ));
                    continue;
                }
            },
        };
        let says_something = match &field {
            Field::Text(text) => !text.is_empty(),
            Field::List(items) => !items.is_empty(),
        };
        if says_something {
            fields[key] = Some(field);
        }
    }
    Some(Candidate {
        area,
        concept,
        fields,
    })
}

/// Definitions that say the same thing up to case, spacing and a final period.
fn same_text(a: &str, b: &str) -> bool {
    let norm = |text: &str| {
        text.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .trim_end_matches('.')
            .to_lowercase()
    };
    norm(a) == norm(b)
}

static DATE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b\d{4}-\d{2}-\d{2}\b").expect("constant pattern"));

/// The newest `YYYY-MM-DD` date of a source; `None` (oldest) when it has none or says "inferred".
fn recency(source: &str) -> Option<String> {
    if source.to_lowercase().contains("inferred") {
        return None;
    }
    DATE.find_iter(source)
        .map(|date| date.as_str().to_owned())
        .max()
}

/// The newer of two sources by date. On a tie the old one stays: the result then does not depend
/// on the order the entries come in, so merging the same entries again changes nothing.
fn newer_source(old: &str, new: &str) -> String {
    if recency(new) > recency(old) {
        new.to_owned()
    } else {
        old.to_owned()
    }
}

/// Merges what the candidate adds. Its source replaces the entry's (when newer) only when the
/// candidate added something: restating a known concept on a later day changes nothing.
fn merge_into(entry: &mut Entry, candidate: &Candidate, format: &Format) {
    let before = entry.fields.clone();
    for (key, spec) in format.keys.iter().enumerate() {
        let Some(new) = &candidate.fields[key] else {
            continue;
        };
        if Some(key) == format.source {
            continue;
        }
        let concept = entry.concept.clone();
        match (&mut entry.fields[key], new) {
            (Field::List(items), Field::List(new_items)) => {
                for item in new_items {
                    if !contains_ci(items, item) && !same_name(item, &concept) {
                        items.push(item.clone());
                    }
                }
            }
            (Field::Text(old), Field::Text(new)) => {
                if old.is_empty() {
                    *old = new.clone();
                } else if !same_text(old, new) {
                    let quote = shorten(new, CONTRADICTION_QUOTE_CHARS);
                    let marker = if key == 0 {
                        format!("TODO: contradiction with: {quote}")
                    } else {
                        format!("TODO: contradiction in {} with: {quote}", spec.label)
                    };
                    entry.add_marker(comment_safe(&marker));
                }
            }
            _ => {}
        }
    }
    if let Some(source) = format.source {
        if entry.fields != before {
            if let (Field::Text(old), Some(Field::Text(new))) =
                (&mut entry.fields[source], &candidate.fields[source])
            {
                *old = newer_source(old, new);
            }
        }
    }
}

fn new_entry(id: usize, candidate: &Candidate, format: &Format) -> Entry {
    let fields = candidate
        .fields
        .iter()
        .zip(&format.keys)
        .map(|(field, key)| match field {
            Some(Field::List(items)) => Field::List(
                items
                    .iter()
                    .filter(|item| !same_name(item, &candidate.concept))
                    .cloned()
                    .collect(),
            ),
            Some(field) => field.clone(),
            None => Field::empty(key.list),
        })
        .collect();
    Entry {
        id,
        concept: candidate.concept.clone(),
        fields,
        markers: Vec::new(),
        layout: None,
        problems: Vec::new(),
        added: true,
    }
}

/// An entry as it was read, to tell afterwards what the merge changed.
struct Before {
    fields: Vec<Field>,
    markers: Vec<String>,
}

/// Relations the merge brought in must name a concept: an alias is replaced by its concept, a
/// name that resolves to nothing is dropped with a warning. Relations that were already there are
/// left alone (the invariant check flags them). Expects a sorted catalog: a name or an alias that
/// several entries share resolves to the first.
fn resolve_new_relations(
    catalog: &mut Catalog,
    format: &Format,
    before: &HashMap<usize, Before>,
    warnings: &mut Vec<String>,
) {
    let Some(relation) = format.relation else {
        return;
    };
    let mut names: HashMap<String, String> = HashMap::new();
    if let Some(alias) = format.alias {
        for entry in catalog.entries() {
            for item in entry.fields[alias].items() {
                names
                    .entry(item.to_lowercase())
                    .or_insert_with(|| entry.concept.clone());
            }
        }
    }
    // Concept names win over aliases; the first entry of a name is its canonical spelling.
    let mut concepts: HashMap<String, String> = HashMap::new();
    for entry in catalog.entries() {
        concepts
            .entry(entry.concept.to_lowercase())
            .or_insert_with(|| entry.concept.clone());
    }
    names.extend(concepts);
    for area in &mut catalog.areas {
        for entry in &mut area.entries {
            let old: &[String] = before
                .get(&entry.id)
                .map_or(&[], |b| b.fields[relation].items());
            let Field::List(items) = &mut entry.fields[relation] else {
                continue;
            };
            let mut resolved: Vec<String> = Vec::new();
            for item in items.iter() {
                let kept = contains_ci(old, item);
                let target = if kept {
                    item.clone()
                } else if let Some(name) = names.get(&item.to_lowercase()) {
                    name.clone()
                } else {
                    warnings.push(format!(
                        "relation `{item}` of `{}` names no concept: dropped",
                        entry.concept
                    ));
                    continue;
                };
                // A concept related to itself says nothing; one already written stays for the user.
                let new_self_relation = !kept && same_name(&target, &entry.concept);
                if !new_self_relation && !contains_ci(&resolved, &target) {
                    resolved.push(target);
                }
            }
            *items = resolved;
        }
    }
}

// --- pruning ---------------------------------------------------------------------------------

/// `(bytes, lines)` a block adds to a rendered catalog, its separator included.
fn block_cost(block: &str) -> (usize, usize) {
    (block.len() + 2, block.matches('\n').count() + 2)
}

/// Drops the oldest entries until the rendered catalog fits, never one that another entry
/// relates to, one marked TODO, one whose name is duplicated in its area, or one the merged
/// entries name (what was just said is the newest; and an answer merged again must not bring
/// back what this pruning dropped). Returns the dropped concept names.
fn prune(
    catalog: &mut Catalog,
    format: &Format,
    mentioned: &HashSet<usize>,
    budget: (usize, usize),
    warnings: &mut Vec<String>,
) -> Vec<String> {
    let (max_lines, max_bytes) = budget;
    let rendered = render(catalog, format);
    let mut bytes = rendered.len();
    let mut lines = rendered.matches('\n').count();
    let fits = |bytes: usize, lines: usize| bytes <= max_bytes && lines <= max_lines;
    if fits(bytes, lines) {
        return Vec::new();
    }
    let relation = format.relation;
    let mut referenced: HashMap<String, usize> = HashMap::new();
    let targets_of = |entry: &Entry| -> Vec<String> {
        let Some(relation) = relation else {
            return Vec::new();
        };
        let mut targets: Vec<String> = entry.fields[relation]
            .items()
            .iter()
            .map(|item| item.to_lowercase())
            .filter(|item| *item != entry.concept.to_lowercase())
            .collect();
        targets.sort();
        targets.dedup();
        targets
    };
    for entry in catalog.entries() {
        for target in targets_of(entry) {
            *referenced.entry(target).or_default() += 1;
        }
    }
    let mut remaining: Vec<usize> = catalog
        .areas
        .iter()
        .map(|area| area.entries.len())
        .collect();
    let mut order: Vec<(usize, usize)> = Vec::new();
    for (a, area) in catalog.areas.iter().enumerate() {
        let mut counts: HashMap<String, usize> = HashMap::new();
        for entry in &area.entries {
            *counts.entry(entry.concept.to_lowercase()).or_default() += 1;
        }
        for (e, entry) in area.entries.iter().enumerate() {
            let duplicated = counts
                .get(&entry.concept.to_lowercase())
                .copied()
                .unwrap_or(0)
                > 1;
            if !duplicated && !entry.is_todo_marked() {
                order.push((a, e));
            }
        }
    }
    order.sort_by_cached_key(|&(a, e)| {
        let entry = &catalog.areas[a].entries[e];
        let source = format
            .source
            .map(|source| entry.fields[source].render())
            .unwrap_or_default();
        (recency(&source), a, e)
    });
    // Who names each concept in Relations, to drop a pair that only name each other together:
    // once both are gone no entry left names either.
    let mut referencers: HashMap<String, Vec<(usize, usize)>> = HashMap::new();
    for (a, area) in catalog.areas.iter().enumerate() {
        for (e, entry) in area.entries.iter().enumerate() {
            for target in targets_of(entry) {
                referencers.entry(target).or_default().push((a, e));
            }
        }
    }
    let droppable: HashSet<(usize, usize)> = order.iter().copied().collect();
    let mut removed: HashSet<(usize, usize)> = HashSet::new();
    let mut pruned = Vec::new();
    // The entries this merge mentions go last, and only when the others cannot make room; of
    // them only those it adds, which merging the same entries again adds (and drops) again, so
    // that a second merge finds the same file.
    let may_go =
        |entry: &Entry, late: bool| !mentioned.contains(&entry.id) || (late && entry.added);
    for late in [false, true] {
        loop {
            let mut progress = false;
            for &(a, e) in &order {
                if fits(bytes, lines) {
                    break;
                }
                let entry = &catalog.areas[a].entries[e];
                if removed.contains(&(a, e)) || !may_go(entry, late) {
                    continue;
                }
                let name = entry.concept.to_lowercase();
                let live = |name: &str| -> Vec<(usize, usize)> {
                    referencers
                        .get(name)
                        .into_iter()
                        .flatten()
                        .copied()
                        .filter(|at| !removed.contains(at) && *at != (a, e))
                        .collect()
                };
                let mut group = vec![(a, e)];
                if referenced.get(&name).copied().unwrap_or(0) > 0 {
                    // Named by exactly one droppable entry, that it names back and that nothing else
                    // names: the pair goes.
                    let by = live(&name);
                    let [partner] = by[..] else { continue };
                    let partner_name = catalog.areas[partner.0].entries[partner.1]
                        .concept
                        .to_lowercase();
                    if !targets_of(entry).contains(&partner_name) {
                        continue;
                    }
                    if !droppable.contains(&partner)
                        || live(&partner_name).iter().any(|at| *at != partner)
                        || !may_go(&catalog.areas[partner.0].entries[partner.1], late)
                    {
                        continue;
                    }
                    group.push(partner);
                }
                for (a, e) in group {
                    let entry = &catalog.areas[a].entries[e];
                    let (entry_bytes, entry_lines) = block_cost(&render_entry(entry, format));
                    bytes -= entry_bytes;
                    lines -= entry_lines;
                    remaining[a] -= 1;
                    if remaining[a] == 0 && catalog.areas[a].stray.is_empty() {
                        let (area_bytes, area_lines) =
                            block_cost(&render_area_heading(&catalog.areas[a].name));
                        bytes -= area_bytes;
                        lines -= area_lines;
                    }
                    for target in targets_of(entry) {
                        if let Some(count) = referenced.get_mut(&target) {
                            *count -= 1;
                        }
                    }
                    removed.insert((a, e));
                    pruned.push(entry.concept.clone());
                }
                progress = true;
            }
            if fits(bytes, lines) || !progress {
                break;
            }
        }
    }
    for (a, area) in catalog.areas.iter_mut().enumerate() {
        let mut e = 0;
        area.entries.retain(|_| {
            let keep = !removed.contains(&(a, e));
            e += 1;
            keep
        });
    }
    catalog.areas.retain(|area| !area.is_empty());
    debug_assert_eq!(
        render(catalog, format).len(),
        bytes,
        "pruning size accounting"
    );
    if !fits(bytes, lines) {
        warnings.push(format!(
            "size budget not met: {lines} lines, {bytes} bytes (max {max_lines} lines, {max_bytes} bytes); every entry left is marked TODO, named in another's Relations or duplicated"
        ));
    }
    pruned
}

// --- the built-in ----------------------------------------------------------------------------

#[derive(Debug)]
struct MergeOutcome {
    content: String,
    changed: bool,
    added: usize,
    merged: usize,
    flagged: Vec<String>,
    pruned: Vec<String>,
    warnings: Vec<String>,
    summary: String,
}

fn merge(args: &MergeArgs) -> Result<MergeOutcome, BuiltinError> {
    let format = Format::new(args)?;
    let mut warnings = Vec::new();
    let mut catalog = parse(
        args.current.as_deref().unwrap_or(""),
        &format,
        &mut warnings,
    );
    catalog.sort();
    let before: HashMap<usize, Before> = catalog
        .entries()
        .map(|entry| {
            let snapshot = Before {
                fields: entry.fields.clone(),
                markers: entry.markers.clone(),
            };
            (entry.id, snapshot)
        })
        .collect();

    let mut mentioned = HashSet::new();
    let candidates: Vec<Candidate> = args
        .entries
        .iter()
        .filter_map(|raw| candidate(&raw.0, &format, &mut warnings))
        .collect();
    // An entry without an area can only update an existing concept; it waits until the others
    // are in, so a concept they add is found now rather than on the next merge.
    let (with_area, without_area): (Vec<&Candidate>, Vec<&Candidate>) =
        candidates.iter().partition(|candidate| {
            !candidate.area.is_empty() || catalog.find("", &candidate.concept).is_some()
        });
    for candidate in with_area.into_iter().chain(without_area) {
        match catalog.find(&candidate.area, &candidate.concept) {
            Some((a, e)) => {
                let entry = &mut catalog.areas[a].entries[e];
                mentioned.insert(entry.id);
                if entry.layout.is_some() {
                    warnings.push(format!(
                        "`{}` breaks the catalog format and is kept as written: the update to it is not merged",
                        entry.concept
                    ));
                } else {
                    merge_into(entry, candidate, &format);
                }
            }
            None if candidate.area.is_empty() => {
                warnings.push(format!(
                    "skipped new entry `{}`: it names no area",
                    candidate.concept
                ));
            }
            None => {
                let id = catalog.new_id();
                mentioned.insert(id);
                let a = catalog.area_index(&candidate.area);
                catalog.areas[a]
                    .entries
                    .push(new_entry(id, candidate, &format));
            }
        }
    }
    // Sorted first, so an alias or a name several entries share resolves to the same entry on
    // every merge.
    catalog.sort();
    resolve_new_relations(&mut catalog, &format, &before, &mut warnings);
    check_invariants(&mut catalog, &format);
    // What the entries' relations name is mentioned too: pruning it would change what those
    // names resolve to when the same entries are merged again.
    if let Some(relation) = format.relation {
        let named: HashSet<String> = candidates
            .iter()
            .filter_map(|candidate| candidate.fields[relation].as_ref())
            .flat_map(|field| field.items().iter().map(|item| item.to_lowercase()))
            .collect();
        for entry in catalog.entries() {
            let aliases = format
                .alias
                .map_or(&[][..], |alias| entry.fields[alias].items());
            let names_it = std::iter::once(&entry.concept)
                .chain(aliases)
                .any(|name| named.contains(&name.to_lowercase()));
            if names_it {
                mentioned.insert(entry.id);
            }
        }
    }

    let budget_warnings_from = warnings.len();
    let pruned = prune(
        &mut catalog,
        &format,
        &mentioned,
        (args.max_lines, args.max_bytes),
        &mut warnings,
    );
    let budget_warning = warnings.get(budget_warnings_from).cloned();

    let content = render(&catalog, &format);
    // No file yet and nothing to put in one: a header alone is no update.
    let changed = match args.current.as_deref() {
        None => catalog.entries().next().is_some(),
        Some(current) => current != content,
    };
    let added = catalog.entries().filter(|entry| entry.added).count();
    let merged = catalog
        .entries()
        .filter(|entry| {
            before
                .get(&entry.id)
                .is_some_and(|b| b.fields != entry.fields)
        })
        .count();
    let mut flagged: Vec<String> = catalog
        .entries()
        .filter(|entry| {
            let old: &[String] = before.get(&entry.id).map_or(&[], |b| &b.markers);
            entry
                .markers
                .iter()
                .any(|marker| marker.starts_with(TODO_PREFIX) && !old.contains(marker))
        })
        .map(|entry| entry.concept.clone())
        .collect();
    let markers = |text: &str| {
        text.lines()
            .filter(|line| line.trim() == STRAY_MARKER)
            .count()
    };
    if catalog.has_stray_lines()
        && markers(&content) > markers(args.current.as_deref().unwrap_or(""))
    {
        flagged.push(STRAY_NAME.to_owned());
    }
    dedupe(&mut flagged);
    let summary = if changed {
        let names = if flagged.is_empty() {
            "none".to_owned()
        } else {
            flagged.join(", ")
        };
        let mut summary = format!(
            "{} updated: {added} added, {merged} merged, {} flagged. Flagged: {names}.",
            args.label,
            flagged.len()
        );
        if let Some(warning) = budget_warning {
            summary.push_str(&format!(" Warning: {warning}."));
        }
        summary
    } else {
        "No update needed.".to_owned()
    };
    Ok(MergeOutcome {
        content,
        changed,
        added,
        merged,
        flagged,
        pruned,
        warnings,
        summary,
    })
}

fn run(with: &Value, _ctx: &BuiltinCtx) -> BuiltinResult {
    let outcome = merge(&parse_args(with)?)?;
    Ok(json!({
        "content": outcome.content,
        "changed": outcome.changed,
        "added": outcome.added,
        "merged": outcome.merged,
        "flagged": outcome.flagged,
        "pruned": outcome.pruned,
        "warnings": outcome.warnings,
        "summary": outcome.summary,
    }))
}

fn output_schema() -> Value {
    let names = |description: &str| json!({ "type": "array", "items": { "type": "string" }, "description": description });
    json!({
        "type": "object",
        "description": "The merged catalog and what the merge did.",
        "additionalProperties": false,
        "required": ["content", "changed", "added", "merged", "flagged", "pruned", "warnings", "summary"],
        "properties": {
            "content": { "type": "string", "description": "The rendered catalog: header, sorted areas and concepts, one trailing newline." },
            "changed": { "type": "boolean", "description": "True when content differs from current byte for byte (when current was null: when there is any entry to write); write the file only then." },
            "added": { "type": "integer", "minimum": 0, "description": "New concepts added (and not pruned)." },
            "merged": { "type": "integer", "minimum": 0, "description": "Existing concepts whose values the entries changed." },
            "flagged": names("Concepts that got a new TODO marker in this merge: a contradiction or a broken invariant."),
            "pruned": names("Concepts dropped to fit the size budget."),
            "warnings": names("Things skipped or dropped, and an unmet size budget."),
            "summary": { "type": "string", "description": "\"<label> updated: N added, M merged, K flagged. Flagged: a, b.\" (plus an unmet-budget warning), or \"No update needed.\" when unchanged." }
        }
    })
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::super::WriteRoots;
    use super::*;

    /// The lexicon's format, as the context-update workflow gives it.
    const HEADER: &str =
        "<!-- Auto-maintained by rocket:context-update. Edits are preserved when consistent. -->";

    /// `with` completed with the lexicon's format where it names none.
    fn lexicon_format(mut with: Value) -> Value {
        let defaults = json!({
            "header": HEADER,
            "keys": [
                { "field": "definition", "label": "Definition" },
                { "field": "aliases", "label": "Aliases", "list": true },
                { "field": "relations", "label": "Relations", "list": true },
                { "field": "source", "label": "Source" }
            ],
            "label": "Lexicon"
        });
        for (key, value) in defaults.as_object().expect("an object") {
            if with.get(key).is_none() {
                with[key] = value.clone();
            }
        }
        with
    }

    const LEXICON: &str = "\
<!-- Auto-maintained by rocket:context-update. Edits are preserved when consistent. -->

## Architecture

### Backoff policy
- **Definition**: Exponential retry with three attempts for uploads.
- **Aliases**: retry policy
- **Relations**: Upload step
- **Source**: conversation 2026-11-30

### Upload step
- **Definition**: The stage that sends artifacts to storage.
- **Aliases**: none
- **Relations**: none
- **Source**: inferred

## Domain

### Outbound webhook
- **Definition**: A POST the project sends to a customer URL on each event.
- **Aliases**: callback
- **Relations**: Backoff policy
- **Source**: user 2026-11-01
";

    fn merge_json(with: Value) -> Value {
        let roots = WriteRoots::default();
        let ctx = BuiltinCtx::for_test(std::path::Path::new("."), &roots);
        let out = run(&lexicon_format(with), &ctx).expect("catalog.merge");
        let validator = jsonschema::validator_for(&output_schema()).expect("schema");
        assert!(validator.is_valid(&out), "{out}");
        out
    }

    fn merge_into_text(current: Option<&str>, entries: Value) -> Value {
        merge_json(json!({ "current": current, "entries": entries }))
    }

    fn content(out: &Value) -> &str {
        out["content"].as_str().expect("content")
    }

    /// The entry block of `concept` in a rendered catalog.
    fn block<'a>(text: &'a str, concept: &str) -> &'a str {
        let start = text
            .find(&format!("### {concept}"))
            .unwrap_or_else(|| panic!("no {concept} in\n{text}"));
        let rest = &text[start..];
        let end = rest.find("\n\n").unwrap_or(rest.len());
        rest[..end].trim_end_matches('\n')
    }

    #[test]
    fn a_normal_catalog_renders_byte_identical() {
        let out = merge_into_text(Some(LEXICON), json!([]));
        assert_eq!(content(&out), LEXICON);
        assert_eq!(out["changed"], false);
        assert_eq!(out["summary"], "No update needed.");
        assert_eq!(out["flagged"], json!([]));
        assert_eq!(out["warnings"], json!([]));
    }

    #[test]
    fn the_header_is_the_callers() {
        // No file and no entry: the header alone is no update, and nothing is to be written.
        let out = merge_into_text(None, json!([]));
        assert_eq!(content(&out), format!("{HEADER}\n"));
        assert_eq!(out["changed"], false);
        assert_eq!(out["summary"], "No update needed.");
        let entry = json!([{ "area": "A", "concept": "Term", "definition": "d" }]);
        let out = merge_json(json!({ "entries": entry, "header": "# Terms", "label": "Glossary" }));
        assert!(content(&out).starts_with("# Terms\n"), "{}", content(&out));
        assert_eq!(out["changed"], true);
        assert!(out["summary"]
            .as_str()
            .expect("summary")
            .starts_with("Glossary updated"));
    }

    #[test]
    fn normalization_sorts_spaces_and_fills_in() {
        let messy = "## Domain  \n\n\n### Outbound webhook   \n* **Definition:**   A POST the project sends to a customer URL on each event.  \n- **aliases**: callback,\n- **Relations**:Backoff policy\n- **Source**: user 2026-11-01\n\n\
## Architecture\n### Upload step\n- **Definition**: The stage that sends artifacts to storage.\n- **Aliases**:\n- **Relations**: None\n- **Source**:   inferred\n\
### Backoff policy\n- **Source**: conversation 2026-11-30\n- **Definition**: Exponential retry with three attempts for uploads.\n- **Aliases**: retry policy ,  Retry Policy\n- **Relations**: Upload step\n\n\n\n";
        let out = merge_into_text(Some(messy), json!([]));
        assert_eq!(content(&out), LEXICON);
        assert_eq!(out["changed"], true);
        assert_eq!(out["flagged"], json!([]));
        assert_eq!(
            out["summary"],
            "Lexicon updated: 0 added, 0 merged, 0 flagged. Flagged: none."
        );
        assert_eq!(
            merge_into_text(Some(content(&out)), json!([]))["changed"],
            false
        );
    }

    #[test]
    fn comma_spacing_collapses_in_lists() {
        let text = LEXICON.replace(
            "- **Aliases**: callback",
            "- **Aliases**: callback,hook ,  ping",
        );
        let out = merge_into_text(Some(&text), json!([]));
        assert!(content(&out).contains("- **Aliases**: callback, hook, ping\n"));
    }

    #[test]
    fn duplicate_areas_are_merged_case_insensitively() {
        let text = format!(
            "{LEXICON}\n## domain\n\n### Tenant\n- **Definition**: A paying customer organization.\n- **Aliases**: none\n- **Relations**: none\n- **Source**: inferred\n"
        );
        let out = merge_into_text(Some(&text), json!([]));
        let rendered = content(&out);
        assert_eq!(rendered.matches("## Domain").count(), 1);
        assert!(!rendered.contains("## domain"));
        let domain = &rendered[rendered.find("## Domain").expect("domain")..];
        assert!(domain.find("### Outbound webhook") < domain.find("### Tenant"));
    }

    #[test]
    fn areas_and_concepts_sort_case_insensitively_then_bytewise() {
        let entry = |concept: &str| {
            format!("### {concept}\n- **Definition**: d\n- **Aliases**: none\n- **Relations**: none\n- **Source**: s\n")
        };
        let text = format!(
            "## beta\n{}{}{}## Alpha\n{}## Zulu\n{}",
            entry("b"),
            entry("B"),
            entry("a"),
            entry("x"),
            entry("y")
        );
        let out = merge_into_text(Some(&text), json!([]));
        let headings: Vec<&str> = content(&out)
            .lines()
            .filter(|line| line.starts_with('#'))
            .collect();
        assert_eq!(
            headings,
            ["## Alpha", "### x", "## beta", "### a", "### B", "### b", "## Zulu", "### y"]
        );
    }

    #[test]
    fn an_entry_missing_a_key_is_kept_as_written_and_marked_once() {
        let broken = "### Broken\n- **Definition**: Something local.\n- **Relations**: none\n- **Source**: inferred";
        let text = LEXICON.replace("## Domain\n", &format!("## Domain\n\n{broken}\n"));
        let out = merge_into_text(Some(&text), json!([]));
        assert_eq!(
            block(content(&out), "Broken"),
            "### Broken\n- **Definition**: Something local. <!-- TODO: invariant missing Aliases -->\n- **Relations**: none\n- **Source**: inferred"
        );
        assert_eq!(out["flagged"], json!(["Broken"]));
        assert_eq!(
            out["summary"],
            "Lexicon updated: 0 added, 0 merged, 1 flagged. Flagged: Broken."
        );
        // The valid entries are untouched.
        assert_eq!(
            block(content(&out), "Backoff policy"),
            block(LEXICON, "Backoff policy")
        );
        let again = merge_into_text(Some(content(&out)), json!([]));
        assert_eq!(again["changed"], false);
        assert_eq!(again["flagged"], json!([]));
        assert_eq!(content(&again).matches("TODO: invariant").count(), 1);
    }

    #[test]
    fn extra_bullets_and_prose_stay_in_place() {
        let broken = "### Broken\n- **Definition**: Something.\n- **Owner**: bob\n- **Aliases**: none\n  a note the user wrote\n- **Relations**: none\n- **Source**: inferred";
        let text = LEXICON.replace("## Domain\n", &format!("## Domain\n\n{broken}\n"));
        let out = merge_into_text(Some(&text), json!([]));
        assert_eq!(
            block(content(&out), "Broken"),
            "### Broken\n- **Definition**: Something. <!-- TODO: invariant extra bullet Owner; unexpected line -->\n- **Owner**: bob\n- **Aliases**: none\n  a note the user wrote\n- **Relations**: none\n- **Source**: inferred"
        );
        assert_eq!(
            merge_into_text(Some(content(&out)), json!([]))["changed"],
            false
        );
    }

    #[test]
    fn a_missing_definition_is_marked_on_the_heading() {
        let broken =
            "### Broken\n- **Aliases**: none\n- **Relations**: none\n- **Source**: inferred";
        let text = LEXICON.replace("## Domain\n", &format!("## Domain\n\n{broken}\n"));
        let out = merge_into_text(Some(&text), json!([]));
        assert!(content(&out).contains(
            "### Broken <!-- TODO: invariant missing Definition -->\n- **Aliases**: none\n"
        ));
        assert_eq!(
            merge_into_text(Some(content(&out)), json!([]))["changed"],
            false
        );
    }

    #[test]
    fn a_duplicate_concept_is_kept_and_marked() {
        let twin = "### upload step\n- **Definition**: Another take.\n- **Aliases**: none\n- **Relations**: none\n- **Source**: inferred";
        let text = LEXICON.replace("## Domain\n", &format!("{twin}\n\n## Domain\n"));
        let out = merge_into_text(Some(&text), json!([]));
        let rendered = content(&out);
        assert!(rendered.contains(
            "### Upload step\n- **Definition**: The stage that sends artifacts to storage.\n"
        ));
        assert!(rendered.contains(
            "### upload step\n- **Definition**: Another take. <!-- TODO: invariant duplicate concept in area -->\n"
        ));
        assert_eq!(out["flagged"], json!(["upload step"]));
        assert_eq!(merge_into_text(Some(rendered), json!([]))["changed"], false);
    }

    #[test]
    fn a_dangling_relation_is_marked_until_it_resolves() {
        let text = LEXICON.replace(
            "- **Relations**: Upload step",
            "- **Relations**: Upload step, Ghost",
        );
        let out = merge_into_text(Some(&text), json!([]));
        assert!(block(content(&out), "Backoff policy").contains(
            "- **Definition**: Exponential retry with three attempts for uploads. <!-- TODO: invariant dangling relation Ghost -->"
        ));
        assert_eq!(out["flagged"], json!(["Backoff policy"]));
        let fixed = merge_into_text(
            Some(content(&out)),
            json!([{ "area": "Domain", "concept": "Ghost", "definition": "A job with no owner.", "source": "inferred" }]),
        );
        assert!(!content(&fixed).contains("TODO"));
        assert!(block(content(&fixed), "Backoff policy")
            .contains("- **Relations**: Upload step, Ghost"));
        assert_eq!(fixed["added"], 1);
        assert_eq!(fixed["merged"], 0);
        assert_eq!(fixed["flagged"], json!([]));
    }

    #[test]
    fn new_concepts_are_added_in_order() {
        let out = merge_into_text(
            Some(LEXICON),
            json!([
                { "area": "Domain", "concept": "Tenant", "definition": "A paying customer\norganization.", "aliases": ["org", "Tenant"], "relations": ["Outbound webhook"], "source": "conversation 2026-11-30" },
                { "area": "Roles", "concept": "Operator", "definition": "Runs the deploys.", "aliases": "ops,  on-call", "source": "inferred" }
            ]),
        );
        let rendered = content(&out);
        assert_eq!(out["added"], 2);
        assert_eq!(out["merged"], 0);
        assert_eq!(
            block(rendered, "Tenant"),
            "### Tenant\n- **Definition**: A paying customer organization.\n- **Aliases**: org\n- **Relations**: Outbound webhook\n- **Source**: conversation 2026-11-30"
        );
        assert_eq!(
            block(rendered, "Operator"),
            "### Operator\n- **Definition**: Runs the deploys.\n- **Aliases**: ops, on-call\n- **Relations**: none\n- **Source**: inferred"
        );
        assert!(rendered.find("## Domain") < rendered.find("## Roles"));
        assert!(rendered.find("### Outbound webhook") < rendered.find("### Tenant"));
        assert_eq!(
            out["summary"],
            "Lexicon updated: 2 added, 0 merged, 0 flagged. Flagged: none."
        );
    }

    #[test]
    fn aliases_and_relations_are_unioned_in_order() {
        let out = merge_into_text(
            Some(LEXICON),
            json!([{ "area": "Architecture", "concept": "Backoff policy", "aliases": ["Retry Policy", "backoff", "backoff"], "relations": ["Outbound webhook", "upload step"] }]),
        );
        let entry = block(content(&out), "Backoff policy");
        assert!(
            entry.contains("- **Aliases**: retry policy, backoff\n"),
            "{entry}"
        );
        assert!(
            entry.contains("- **Relations**: Upload step, Outbound webhook\n"),
            "{entry}"
        );
        assert_eq!(out["merged"], 1);
        assert_eq!(out["added"], 0);
    }

    #[test]
    fn a_contradiction_is_marked_not_overwritten() {
        let answer = json!([{ "area": "Architecture", "concept": "Backoff policy", "definition": "Linear retry with five attempts." }]);
        let out = merge_into_text(Some(LEXICON), answer.clone());
        assert!(block(content(&out), "Backoff policy").contains(
            "- **Definition**: Exponential retry with three attempts for uploads. <!-- TODO: contradiction with: Linear retry with five attempts. -->\n"
        ));
        assert_eq!(out["flagged"], json!(["Backoff policy"]));
        assert_eq!(out["merged"], 0);
        assert_eq!(
            out["summary"],
            "Lexicon updated: 0 added, 0 merged, 1 flagged. Flagged: Backoff policy."
        );
        let again = merge_into_text(Some(content(&out)), answer);
        assert_eq!(again["changed"], false);
        assert_eq!(again["summary"], "No update needed.");
        assert_eq!(content(&again).matches("TODO: contradiction").count(), 1);
    }

    #[test]
    fn a_flagged_definition_repeated_with_its_marker_is_not_flagged_again() {
        let answer = json!([{ "area": "Architecture", "concept": "Backoff policy", "definition": "Linear retry with five attempts." }]);
        let flagged = merge_into_text(Some(LEXICON), answer);
        let line = block(content(&flagged), "Backoff policy")
            .lines()
            .nth(1)
            .expect("definition line")
            .trim_start_matches("- **Definition**: ")
            .to_string();
        assert!(line.contains("<!-- TODO"), "{line}");
        // The writer copies the flagged definition back, marker and all.
        let repeated =
            json!([{ "area": "Architecture", "concept": "Backoff policy", "definition": line }]);
        let again = merge_into_text(Some(content(&flagged)), repeated);
        assert_eq!(again["changed"], false, "{}", content(&again));
        assert_eq!(again["flagged"], json!([]));
        assert!(!content(&again).contains("<!- TODO"));
    }

    #[test]
    fn a_long_contradiction_is_quoted_short_and_comment_safe() {
        let long = format!("Retries --> forever {}", "and ever ".repeat(30));
        let out = merge_into_text(
            Some(LEXICON),
            json!([{ "concept": "Backoff policy", "definition": long }]),
        );
        let line = block(content(&out), "Backoff policy")
            .lines()
            .nth(1)
            .expect("definition line");
        let marker = &line[line.find("<!--").expect("marker")..];
        assert_eq!(marker.matches("-->").count(), 1);
        assert!(marker.contains("Retries -> forever"));
        assert!(marker.contains("…"));
        assert!(marker.chars().count() < 130, "{marker}");
    }

    #[test]
    fn the_same_information_changes_nothing() {
        let out = merge_into_text(
            Some(LEXICON),
            json!([{ "area": "Architecture", "concept": "backoff policy", "definition": "exponential retry  with three attempts for uploads", "aliases": ["Retry policy"], "relations": "Upload step", "source": "conversation 2026-11-30" }]),
        );
        assert_eq!(out["changed"], false);
        assert_eq!(out["merged"], 0);
        assert_eq!(out["summary"], "No update needed.");
    }

    #[test]
    fn an_empty_definition_is_filled_in() {
        let text = LEXICON.replace(
            "- **Definition**: The stage that sends artifacts to storage.",
            "- **Definition**:",
        );
        let out = merge_into_text(
            Some(&text),
            json!([{ "concept": "Upload step", "definition": "Sends build artifacts to the bucket." }]),
        );
        assert!(content(&out).contains("- **Definition**: Sends build artifacts to the bucket.\n"));
        assert_eq!(out["merged"], 1);
        assert_eq!(out["flagged"], json!([]));
    }

    #[test]
    fn a_concept_of_another_area_is_merged_where_it_is() {
        let out = merge_into_text(
            Some(LEXICON),
            json!([
                { "area": "Domain", "concept": "BACKOFF POLICY", "aliases": ["backoff"] },
                { "concept": "backoff policy", "relations": ["Outbound webhook"] }
            ]),
        );
        let rendered = content(&out);
        assert_eq!(rendered.matches("### ").count(), 3, "{rendered}");
        let entry = block(rendered, "Backoff policy");
        assert!(entry.contains("- **Aliases**: retry policy, backoff\n"));
        assert!(entry.contains("- **Relations**: Upload step, Outbound webhook\n"));
        assert_eq!(out["merged"], 1);
        assert_eq!(out["added"], 0);
    }

    #[test]
    fn the_newer_source_is_kept_when_the_entry_gains_something() {
        let merged = |entry: Value| {
            let out = merge_into_text(Some(LEXICON), json!([entry]));
            let entry = block(content(&out), "Outbound webhook").to_owned();
            (entry, out["merged"].clone(), out["summary"].clone())
        };
        let (entry, count, _) = merged(
            json!({ "concept": "Outbound webhook", "aliases": ["hook call"], "source": "conversation 2026-12-05" }),
        );
        assert!(
            entry.ends_with("- **Source**: conversation 2026-12-05"),
            "{entry}"
        );
        assert_eq!(count, 1);
        let (entry, count, _) = merged(
            json!({ "concept": "Outbound webhook", "aliases": ["hook call"], "source": "user 2025-01-01" }),
        );
        assert!(entry.ends_with("- **Source**: user 2026-11-01"));
        assert_eq!(count, 1);
        let (entry, _, _) = merged(
            json!({ "concept": "Outbound webhook", "aliases": ["hook call"], "source": "inferred" }),
        );
        assert!(entry.ends_with("- **Source**: user 2026-11-01"));
        let out = merge_into_text(
            Some(LEXICON),
            json!([{ "concept": "Upload step", "aliases": ["uploader"], "source": "user 2026-10-01" }]),
        );
        assert!(block(content(&out), "Upload step").ends_with("- **Source**: user 2026-10-01"));
    }

    #[test]
    fn a_restatement_on_a_later_day_changes_nothing() {
        // The same definition, alias and relation as the file has, dated later.
        let restated = json!([{
            "area": "Domain", "concept": "Outbound webhook",
            "definition": "A POST the project sends to a customer URL on each event.",
            "aliases": ["callback"], "relations": ["Backoff policy"],
            "source": "conversation 2026-12-24"
        }]);
        let out = merge_into_text(Some(LEXICON), restated);
        assert_eq!(out["changed"], false);
        assert_eq!(out["merged"], 0);
        assert_eq!(out["summary"], "No update needed.");
        assert_eq!(content(&out), LEXICON);
        let dated_only =
            json!([{ "concept": "Outbound webhook", "source": "conversation 2026-12-24" }]);
        assert_eq!(merge_into_text(Some(LEXICON), dated_only)["changed"], false);
    }

    #[test]
    fn new_relations_resolve_through_aliases_or_are_dropped() {
        let out = merge_into_text(
            Some(LEXICON),
            json!([
                { "area": "Domain", "concept": "Tenant", "definition": "A customer.", "relations": ["callback", "Nowhere", "Tenant", "operator"], "source": "inferred" },
                { "area": "Roles", "concept": "Operator", "definition": "Runs deploys.", "source": "inferred" }
            ]),
        );
        let entry = block(content(&out), "Tenant");
        assert!(
            entry.contains("- **Relations**: Outbound webhook, Operator\n"),
            "{entry}"
        );
        assert_eq!(
            out["warnings"],
            json!(["relation `Nowhere` of `Tenant` names no concept: dropped"])
        );
        assert!(!content(&out).contains("TODO"));
    }

    fn dated_entry(concept: &str, relations: &str, source: &str) -> String {
        format!(
            "### {concept}\n- **Definition**: {concept} means something specific here.\n- **Aliases**: none\n- **Relations**: {relations}\n- **Source**: {source}\n\n"
        )
    }

    #[test]
    fn pruning_drops_the_oldest_unreferenced_unflagged_entries() {
        let text = format!(
            "{HEADER}\n\n## Area\n\n{}{}{}{}{}",
            dated_entry("Alpha", "none", "inferred 2026-12-01"),
            dated_entry("Bravo", "none", "user 2026-01-01"),
            dated_entry("Charlie", "none", "no date at all"),
            dated_entry("Delta", "Charlie", "user 2026-06-01"),
            dated_entry("Echo", "none", "user 2026-11-01")
                .replace("here.\n", "here. <!-- TODO: contradiction with: old -->\n"),
        );
        let full = merge_into_text(Some(&text), json!([]));
        let lines = content(&full).lines().count();
        // Room for three of the five entries: Alpha (inferred: oldest) and Bravo go; Charlie is
        // referenced by Delta; Echo is flagged.
        let out = merge_json(json!({ "current": text, "entries": [], "max_lines": lines - 12 }));
        assert_eq!(out["pruned"], json!(["Alpha", "Bravo"]));
        assert_eq!(content(&out).lines().count(), lines - 12);
        assert_eq!(out["warnings"], json!([]));
        assert_eq!(
            out["summary"],
            "Lexicon updated: 0 added, 0 merged, 0 flagged. Flagged: none."
        );
        // Nothing more can go: Delta, then Charlie once Delta is gone, then Echo never.
        let tight = merge_json(json!({ "current": text, "entries": [], "max_lines": 5 }));
        assert_eq!(
            tight["pruned"],
            json!(["Alpha", "Bravo", "Delta", "Charlie"])
        );
        let warnings = tight["warnings"].as_array().expect("warnings");
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0]
            .as_str()
            .expect("warning")
            .starts_with("size budget not met"));
        assert!(tight["summary"]
            .as_str()
            .expect("summary")
            .contains("Warning: size budget not met"));
        assert!(content(&tight).contains("### Echo"));
        let by_bytes = merge_json(
            json!({ "current": text, "entries": [], "max_bytes": content(&full).len() - 1 }),
        );
        assert_eq!(by_bytes["pruned"], json!(["Alpha"]));
    }

    #[test]
    fn the_answers_entries_go_last_and_only_the_new_ones() {
        let text = format!(
            "{HEADER}\n\n## Area\n\n{}{}",
            dated_entry("Alpha", "none", "inferred"),
            dated_entry("Bravo", "none", "user 2026-01-01"),
        );
        let answer = json!([
            { "area": "Area", "concept": "Alpha", "aliases": ["first"] },
            { "area": "Area", "concept": "Charlie", "definition": "New.", "source": "inferred" }
        ]);
        // Room once Bravo, the one entry the answer does not name, is gone.
        let out = merge_json(json!({ "current": text, "entries": answer, "max_lines": 20 }));
        assert_eq!(out["pruned"], json!(["Bravo"]));
        assert_eq!(out["merged"], 1);
        assert_eq!(out["added"], 1);
        // No room even then: the new Charlie goes too (the budget includes this merge's
        // entries), the merged Alpha stays, and the summary says the budget is not met.
        let tight = merge_json(json!({ "current": text, "entries": answer, "max_lines": 5 }));
        assert_eq!(tight["pruned"], json!(["Bravo", "Charlie"]));
        assert_eq!(tight["added"], 0);
        assert!(content(&tight).contains("### Alpha") && !content(&tight).contains("### Charlie"));
        assert!(
            tight["summary"]
                .as_str()
                .expect("summary")
                .contains("Warning: size budget not met"),
            "{}",
            tight["summary"]
        );
        let again =
            merge_json(json!({ "current": tight["content"], "entries": answer, "max_lines": 5 }));
        assert_eq!(again["changed"], false);
    }

    #[test]
    fn related_pairs_are_pruned_together_and_the_cap_holds_over_many_merges() {
        // Thirty sessions, each relating two new concepts to each other, as writers do.
        let mut text: Option<String> = None;
        for session in 0..30 {
            let day = format!("user 2026-{:02}-{:02}", 1 + session / 28, 1 + session % 28);
            let (a, b) = (format!("Concept {session}a"), format!("Concept {session}b"));
            let definition = "A concept of this project, defined at some length so that thirty \
                sessions of two of them each outgrow the budget of the file several times.";
            let answer = json!([
                { "area": "Domain", "concept": a, "definition": definition, "relations": [b], "source": day },
                { "area": "Domain", "concept": b, "definition": definition, "relations": [a], "source": day }
            ]);
            let out = merge_json(json!({
                "current": text, "entries": answer, "max_lines": 300, "max_bytes": 4096
            }));
            let rendered = content(&out).to_string();
            assert!(
                rendered.len() <= 4096 && rendered.lines().count() <= 300,
                "session {session}: {} bytes, {}",
                rendered.len(),
                out["summary"]
            );
            text = Some(rendered);
        }
        let text = text.expect("a lexicon");
        // The newest pairs are kept whole: no relation left dangling.
        assert!(text.contains("### Concept 29a") && text.contains("### Concept 29b"));
        assert!(
            !text.contains("### Concept 0a") && !text.contains("TODO"),
            "{text}"
        );
    }

    #[test]
    fn merging_the_same_answer_twice_is_a_no_op() {
        let answer = json!([
            { "area": "Domain", "concept": "Tenant", "definition": "A customer.", "aliases": "org", "relations": ["callback", "Nowhere"], "source": "conversation 2026-11-30" },
            { "area": "Architecture", "concept": "Backoff policy", "definition": "Something else entirely.", "aliases": ["backoff"] },
            { "area": "Roles", "concept": "Operator", "definition": "Runs deploys.", "source": "inferred" },
            { "area": "Roles", "concept": "operator", "definition": "Deploys things.", "source": "user 2026-11-29" },
            { "concept": "Orphan without area" }
        ]);
        let first = merge_into_text(Some(LEXICON), answer.clone());
        assert_eq!(first["changed"], true);
        assert_eq!(first["added"], 2);
        assert_eq!(first["merged"], 1);
        assert_eq!(first["flagged"], json!(["Backoff policy", "Operator"]));
        let second = merge_into_text(Some(content(&first)), answer);
        assert_eq!(second["changed"], false);
        assert_eq!(second["summary"], "No update needed.");
        assert_eq!(second["content"], first["content"]);
    }

    #[test]
    fn stray_lines_are_kept_where_they_are_and_marked() {
        let text = format!(
            "# My lexicon\nsome intro\n\n{}## Domain\nstray prose\n\n### Thing\n- **Definition**: d\n- **Aliases**: none\n- **Relations**: none\n- **Source**: s\n",
            dated_entry("Early", "none", "inferred")
        );
        let out = merge_into_text(Some(&text), json!([]));
        let warnings: Vec<&str> = out["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(
            warnings,
            [
                "kept and marked a line outside any entry: # My lexicon",
                "kept and marked a line outside any entry: some intro",
                "kept and marked a line outside any entry: stray prose"
            ]
        );
        let rendered = content(&out);
        assert!(
            rendered.starts_with(&format!(
                "{HEADER}\n\n{STRAY_MARKER}\n# My lexicon\nsome intro\n\n##\n\n### Early\n"
            )),
            "{rendered}"
        );
        assert!(
            rendered.contains(&format!(
                "## Domain\n\n{STRAY_MARKER}\nstray prose\n\n### Thing\n"
            )),
            "{rendered}"
        );
        assert!(rendered.contains("<!-- TODO: invariant no area -->"));
        assert_eq!(out["flagged"], json!(["Early", STRAY_NAME]));
        let again = merge_into_text(Some(rendered), json!([]));
        assert_eq!(again["changed"], false, "{}", content(&again));
        assert_eq!(again["summary"], "No update needed.");

        // An area holding only hand-written lines stays, and pruning keeps them.
        let only = format!("{HEADER}\n\n## Notes\n\n{STRAY_MARKER}\nremember the Courier\n");
        let out = merge_into_text(Some(&only), json!([]));
        assert_eq!(out["changed"], false);
        let out = merge_json(
            json!({ "current": format!("{only}\n{}", dated_entry("Old", "none", "user 2020-01-01")), "entries": [], "max_lines": 6 }),
        );
        assert_eq!(out["pruned"], json!(["Old"]));
        assert_eq!(content(&out), only);
    }

    #[test]
    fn an_update_to_a_broken_entry_is_not_merged() {
        let broken = "### Broken\n- **Definition**: Something.\n- **Source**: inferred";
        let text = LEXICON.replace("## Domain\n", &format!("## Domain\n\n{broken}\n"));
        let out = merge_into_text(
            Some(&text),
            json!([{ "concept": "Broken", "aliases": ["b"] }]),
        );
        assert!(!block(content(&out), "Broken").contains("**Aliases**"));
        assert_eq!(out["added"], 0);
        assert!(out["warnings"][0]
            .as_str()
            .expect("warning")
            .starts_with("`Broken` breaks the catalog format"));
    }

    #[test]
    fn the_format_is_configurable() {
        let out = merge_json(json!({
            "current": null,
            "header": "<!-- glossary -->",
            "keys": [
                { "field": "meaning", "label": "Meaning" },
                { "field": "see_also", "label": "See also", "list": true }
            ],
            "relation_field": "see_also",
            "alias_field": null,
            "source_field": null,
            "label": "Glossary",
            "entries": [
                { "area": "Terms", "concept": "Run", "meaning": "One execution.", "see_also": ["Stage", "Missing"] },
                { "area": "Terms", "concept": "Stage", "meaning": "One node." }
            ]
        }));
        assert_eq!(
            content(&out),
            "<!-- glossary -->\n\n## Terms\n\n### Run\n- **Meaning**: One execution.\n- **See also**: Stage\n\n### Stage\n- **Meaning**: One node.\n- **See also**: none\n"
        );
        assert_eq!(
            out["summary"],
            "Glossary updated: 2 added, 0 merged, 0 flagged. Flagged: none."
        );
    }

    #[test]
    fn custom_keys_without_the_usual_roles_need_no_nulls() {
        let out = merge_json(json!({
            "keys": [{ "field": "meaning", "label": "Meaning" }],
            "entries": [{ "area": "Terms", "concept": "Run", "meaning": "One execution." }]
        }));
        assert!(content(&out).ends_with("### Run\n- **Meaning**: One execution.\n"));
    }

    #[test]
    fn bad_configurations_are_refused() {
        let roots = WriteRoots::default();
        let ctx = BuiltinCtx::for_test(std::path::Path::new("."), &roots);
        let refuse = |with: Value| run(&lexicon_format(with), &ctx).expect_err("refused").0;
        let list_first = refuse(
            json!({ "entries": [], "keys": [{ "field": "tags", "label": "Tags", "list": true }], "relation_field": null, "alias_field": null, "source_field": null }),
        );
        assert!(list_first.contains("must not be a list"), "{list_first}");
        let missing = refuse(json!({ "entries": [], "relation_field": "links" }));
        assert_eq!(missing, "relation_field `links` names no catalog key");
        let twice = refuse(
            json!({ "entries": [], "keys": [{ "field": "a", "label": "A" }, { "field": "b", "label": "a" }], "relation_field": null, "alias_field": null, "source_field": null }),
        );
        assert_eq!(twice, "duplicate catalog key label `a`");
        let header = refuse(json!({ "entries": [], "header": "two\nlines" }));
        assert_eq!(header, "catalog header must be one non-empty line");
        let unknown = refuse(json!({ "entries": [], "budget": 3 }));
        assert!(
            unknown.starts_with("invalid catalog.merge arguments"),
            "{unknown}"
        );
    }

    #[test]
    fn schemas_accept_and_refuse_what_they_should() {
        let validator = jsonschema::validator_for(&args::schema::<MergeArgs>()).expect("schema");
        assert!(validator.is_valid(&lexicon_format(json!({ "current": LEXICON, "entries": [{ "area": "A", "concept": "B", "aliases": ["x"] }] }))));
        // No catalog's format is built in: the header and the keys are the caller's.
        assert!(!validator.is_valid(&json!({ "current": LEXICON, "entries": [] })));
        assert!(!validator.is_valid(&json!({ "current": LEXICON })));
        assert!(!validator.is_valid(&json!({ "entries": [{ "area": "A" }] })));
        let builtin = &builtins()[0];
        assert_eq!(builtin.name, "catalog.merge");
        assert!(!builtin.writes);
    }

    /// A catalog text in the shapes a hand edit or a model produces: odd spacing, repeated and
    /// mis-cased areas, duplicates, missing and extra bullets, dangling relations, markers.
    fn generated_catalog(rng: &mut StdRng) -> String {
        const AREAS: [&str; 5] = ["Domain", "domain", "Architecture", "Roles", "Décisions"];
        const CONCEPTS: [&str; 8] = [
            "Run",
            "run",
            "Stage",
            "Gate",
            "Zeta",
            "état",
            "Alpha beta",
            "Ωmega",
        ];
        let pick =
            |rng: &mut StdRng, items: &[&'static str]| items[rng.random_range(0..items.len())];
        let mut text = String::new();
        if rng.random_bool(0.7) {
            text.push_str(HEADER);
            text.push('\n');
        }
        for _ in 0..rng.random_range(0..5) {
            text.push_str(&format!("##  {}  \n", pick(rng, &AREAS)));
            for _ in 0..rng.random_range(0..5) {
                text.push_str(&format!("### {}\n", pick(rng, &CONCEPTS)));
                let mut bullets = vec![
                    format!(
                        "- **Definition**: {} <!-- note -->",
                        pick(rng, &["A thing.", "b", ""])
                    ),
                    format!(
                        "- **Aliases**:{}",
                        pick(rng, &["", " x,y", "none", "a ,b,, c "])
                    ),
                    format!(
                        "* **Relations:** {}",
                        pick(rng, &["none", "Run", "Ghost, Stage", "stage,gate"])
                    ),
                    format!(
                        "- **Source**: {}",
                        pick(rng, &["inferred", "user 2026-01-02", "  x  "])
                    ),
                ];
                if rng.random_bool(0.15) {
                    bullets.remove(rng.random_range(0..bullets.len()));
                }
                if rng.random_bool(0.1) {
                    bullets.push("- **Owner**: someone   ".to_owned());
                }
                if rng.random_bool(0.1) {
                    bullets.swap(0, 2);
                }
                for bullet in bullets {
                    text.push_str(&bullet);
                    text.push_str(pick(rng, &["\n", "  \n", "\n\n"]));
                }
            }
        }
        text
    }

    #[test]
    fn rendering_is_a_fixpoint_on_generated_catalogs() {
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..300 {
            let text = generated_catalog(&mut rng);
            let format =
                Format::new(&parse_args(&lexicon_format(json!({ "entries": [] }))).expect("args"))
                    .expect("format");
            assert_eq!(format.relation, Some(2));
            let render_once = |text: &str| {
                let mut catalog = parse(text, &format, &mut Vec::new());
                catalog.sort();
                check_invariants(&mut catalog, &format);
                render(&catalog, &format)
            };
            let once = render_once(&text);
            assert_eq!(render_once(&once), once, "from:\n{text}");
            // And through the built-in: an already-normal file is not changed.
            let out = merge_json(
                json!({ "current": once, "entries": [], "max_lines": 100000, "max_bytes": 10000000 }),
            );
            assert_eq!(
                out["changed"],
                false,
                "from:\n{once}\nto:\n{}",
                content(&out)
            );
        }
    }

    /// Random answers (repeated and mis-cased names, missing areas, shared aliases, dangling
    /// relations, contradictions) under random budgets: the second merge changes nothing.
    #[test]
    fn merging_is_idempotent_on_generated_catalogs() {
        let mut rng = StdRng::seed_from_u64(11);
        for _ in 0..500 {
            let text = generated_catalog(&mut rng);
            let names = [
                "Run", "run", "Stage", "Gate", "Zeta", "état", "x", "g", "Fresh", "New one",
            ];
            let areas = ["Roles", "Domain", "New", "", "décisions"];
            let defs = ["One execution.", "", "b", "A thing", "Other --> thing"];
            let lists = [
                json!(["stage", "Nope"]),
                json!("g, Gate"),
                json!(null),
                json!([]),
                json!("x,y"),
                json!(["Run", "Fresh"]),
            ];
            let sources = ["user 2026-02-02", "inferred", "", "user 2025-01-01", "z"];
            let mut answer = Vec::new();
            for _ in 0..rng.random_range(0..5) {
                answer.push(json!({
                    "area": areas[rng.random_range(0..areas.len())],
                    "concept": names[rng.random_range(0..names.len())],
                    "definition": defs[rng.random_range(0..defs.len())],
                    "aliases": lists[rng.random_range(0..lists.len())],
                    "relations": lists[rng.random_range(0..lists.len())],
                    "source": sources[rng.random_range(0..sources.len())],
                }));
            }
            let answer = json!(answer);
            let budget = rng.random_range(5..60);
            let first =
                merge_json(json!({ "current": text, "entries": answer, "max_lines": budget }));
            let second = merge_json(
                json!({ "current": first["content"], "entries": answer, "max_lines": budget }),
            );
            assert_eq!(
                second["changed"],
                false,
                "budget {budget} answer {answer:#}\nfrom:\n{text}\nfirst:\n{}\nsecond:\n{}",
                content(&first),
                content(&second)
            );
        }
    }
}
