//! Merging an answer's entries into a catalog: normalized candidates, unions of aliases and
//! relations, contradictions marked instead of overwritten.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::document::{Catalog, Entry, CONTRADICTION_QUOTE_CHARS};
use super::format::{contains_ci, parse_list, same_name, Field, Format};

/// One entry of the answer, normalized; `None` where it says nothing.
#[derive(Debug)]
pub(super) struct Candidate {
    pub(super) area: String,
    pub(super) concept: String,
    pub(super) fields: Vec<Option<Field>>,
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

pub(super) fn comment_safe(text: &str) -> String {
    text.replace("<!--", "<!-").replace("-->", "->")
}

/// A name usable in a heading: cleaned, without leading `#`.
fn clean_name(text: &str) -> String {
    clean_text(text).trim_start_matches('#').trim().to_owned()
}

pub(super) fn shorten(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_owned();
    }
    let kept: String = text.chars().take(chars.saturating_sub(1)).collect();
    format!("{}…", kept.trim_end())
}

pub(super) fn candidate(
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
pub(super) fn recency(source: &str) -> Option<String> {
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
pub(super) fn merge_into(entry: &mut Entry, candidate: &Candidate, format: &Format) {
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

pub(super) fn new_entry(id: usize, candidate: &Candidate, format: &Format) -> Entry {
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
pub(super) struct Before {
    pub(super) fields: Vec<Field>,
    pub(super) markers: Vec<String>,
}

/// Relations the merge brought in must name a concept: an alias is replaced by its concept, a
/// name that resolves to nothing is dropped with a warning. Relations that were already there are
/// left alone (the invariant check flags them). Expects a sorted catalog: a name or an alias that
/// several entries share resolves to the first.
pub(super) fn resolve_new_relations(
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
