//! A catalog in memory: areas of entries, each entry with its keys, the lines kept as written and
//! its markers.

use super::format::{same_name, Field};

pub(super) const INVARIANT_PREFIX: &str = "TODO: invariant";
pub(super) const TODO_PREFIX: &str = "TODO";
/// How much of a conflicting definition a contradiction marker quotes, in characters.
pub(super) const CONTRADICTION_QUOTE_CHARS: usize = 80;

/// A line of an entry kept as written.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum BodyLine {
    /// The first line of that key: rendered from the entry's value, normalized.
    Key(usize),
    /// Anything else, right-trimmed.
    Raw(String),
}

#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) id: usize,
    pub(super) concept: String,
    /// One value per key, in key order; a missing key holds an empty value.
    pub(super) fields: Vec<Field>,
    /// HTML comments at the end of the first key's line (or of the heading when that line is
    /// missing), without `<!--` and `-->`.
    pub(super) markers: Vec<String>,
    /// `None` when the entry has exactly the configured keys: it renders in canonical form.
    /// Otherwise its lines as written, so a broken edit survives.
    pub(super) layout: Option<Vec<BodyLine>>,
    /// What is wrong with the entry's own lines.
    pub(super) problems: Vec<String>,
    pub(super) added: bool,
}

impl Entry {
    pub(super) fn is_todo_marked(&self) -> bool {
        self.markers
            .iter()
            .any(|marker| marker.starts_with(TODO_PREFIX))
    }

    pub(super) fn add_marker(&mut self, marker: String) {
        if !self.markers.contains(&marker) {
            self.markers.push(marker);
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Area {
    pub(super) name: String,
    /// Hand-written lines between the area's heading and its first entry, kept as written.
    pub(super) stray: Vec<String>,
    pub(super) entries: Vec<Entry>,
}

impl Area {
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.stray.is_empty()
    }
}

#[derive(Debug, Default)]
pub(super) struct Catalog {
    /// Hand-written lines between the header and the first area, kept as written.
    pub(super) preamble: Vec<String>,
    pub(super) areas: Vec<Area>,
    pub(super) next_id: usize,
}

/// The line that marks hand-written lines outside any entry; made again on every render.
pub(super) const STRAY_MARKER: &str = "<!-- TODO: invariant lines outside any entry -->";
/// How a summary names the lines outside any entry when it flags them.
pub(super) const STRAY_NAME: &str = "(lines outside any entry)";

/// `(lowercase, bytes)`: case-insensitive order with a deterministic tie-break.
fn sort_key(name: &str) -> (String, String) {
    (name.to_lowercase(), name.to_owned())
}

impl Catalog {
    pub(super) fn area_index(&mut self, name: &str) -> usize {
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

    pub(super) fn new_id(&mut self) -> usize {
        self.next_id += 1;
        self.next_id
    }

    pub(super) fn sort(&mut self) {
        self.areas.retain(|area| !area.is_empty());
        self.areas.sort_by_cached_key(|area| sort_key(&area.name));
        for area in &mut self.areas {
            area.entries
                .sort_by_cached_key(|entry| sort_key(&entry.concept));
        }
    }

    pub(super) fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.areas.iter().flat_map(|area| area.entries.iter())
    }

    pub(super) fn has_stray_lines(&self) -> bool {
        !self.preamble.is_empty() || self.areas.iter().any(|area| !area.stray.is_empty())
    }

    /// The first entry named `concept`, preferring `area`. Aliases are not matched: which entry
    /// an alias would pick can change as the merge adds aliases, and that would make merging the
    /// same entries twice move information around; naming the canonical concept is the caller's
    /// job (the alias resolution of relations happens once all entries are in).
    pub(super) fn find(&self, area: &str, concept: &str) -> Option<(usize, usize)> {
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
