//! Reading a catalog's text into areas and entries, keeping what breaks the format as written.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;

use super::document::{BodyLine, Catalog, Entry, STRAY_MARKER};
use super::format::{Field, Format};
use super::merge::shorten;

/// The name after `level` hashes, when the line is a heading of exactly that level.
pub(super) fn heading(line: &str, level: usize) -> Option<&str> {
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

pub(super) fn dedupe(items: &mut Vec<String>) {
    let mut seen = HashSet::new();
    items.retain(|item| seen.insert(item.clone()));
}

/// Reads a catalog leniently: a line that is not the header, an area or an entry is kept where it
/// is (before the first area, or in its area before the first entry) and marked; entries before
/// any area land in an area with no name (and get flagged).
pub(super) fn parse(text: &str, format: &Format, warnings: &mut Vec<String>) -> Catalog {
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
