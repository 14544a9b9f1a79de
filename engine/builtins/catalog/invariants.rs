//! The rules every catalog keeps, checked on the whole catalog and marked on the entries that break
//! them.

use std::collections::HashSet;

use super::document::{Catalog, INVARIANT_PREFIX};
use super::format::Format;
use super::merge::comment_safe;

/// Recomputes every entry's invariant marker from its own problems and the whole catalog's
/// (duplicates, dangling relations). Expects a sorted catalog, so the first of duplicates is
/// always the same one.
pub(super) fn check_invariants(catalog: &mut Catalog, format: &Format) {
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
