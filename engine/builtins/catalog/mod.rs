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

use serde_json::{json, Value};

use crate::builtins::args;
use crate::builtins::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult};

mod document;
mod format;
mod invariants;
mod merge;
mod parse;
mod prune;
mod render;
#[cfg(test)]
mod tests;
mod with;

use document::{STRAY_MARKER, STRAY_NAME, TODO_PREFIX};
use format::Format;
use invariants::check_invariants;
use merge::{candidate, merge_into, new_entry, resolve_new_relations, Before, Candidate};
use parse::{dedupe, parse};
use prune::prune;
use render::render;
use with::{parse_args, MergeArgs};

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

pub(super) fn run(with: &Value, _ctx: &BuiltinCtx) -> BuiltinResult {
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

pub(super) fn output_schema() -> Value {
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
