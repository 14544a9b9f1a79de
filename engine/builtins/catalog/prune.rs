//! Pruning a catalog to its line and byte budget: the oldest entries nothing refers to go first.

use std::collections::{HashMap, HashSet};

use super::document::{Catalog, Entry};
use super::format::Format;
use super::merge::recency;
use super::render::{render, render_area_heading, render_entry};

/// `(bytes, lines)` a block adds to a rendered catalog, its separator included.
fn block_cost(block: &str) -> (usize, usize) {
    (block.len() + 2, block.matches('\n').count() + 2)
}

/// Drops the oldest entries until the rendered catalog fits, never one that another entry
/// relates to, one marked TODO, one whose name is duplicated in its area, or one the merged
/// entries name (what was just said is the newest; and an answer merged again must not bring
/// back what this pruning dropped). Returns the dropped concept names.
pub(super) fn prune(
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
