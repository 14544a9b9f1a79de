//! The graph: the order stages run in, or every cycle named with its stages.

use crate::check::Deps;

use foldhash::{HashSet, HashSetExt};
use petgraph::graph::{DiGraph, NodeIndex};

use super::{stage_pointer, Checker};
use crate::diag::DiagnosticKind;

impl Checker<'_> {
    /// The stages in a topological order; an error for each cycle (and an empty order).
    pub(super) fn order(&mut self, deps: &[Deps], ids: &[String]) -> Vec<usize> {
        if let Some(order) = in_order_of_the_file(deps) {
            return order;
        }
        let mut graph: DiGraph<usize, ()> = DiGraph::new();
        let nodes: Vec<NodeIndex> = (0..ids.len()).map(|i| graph.add_node(i)).collect();
        for (i, ds) in deps.iter().enumerate() {
            for &d in ds {
                graph.add_edge(nodes[d], nodes[i], ());
            }
        }
        for component in petgraph::algo::tarjan_scc(&graph) {
            if component.len() > 1 {
                let mut members: Vec<usize> = component.iter().map(|n| graph[*n]).collect();
                members.sort_unstable();
                let cycle = cycle_path(&members, deps, ids);
                let first = &ids[members[0]];
                self.error_key(DiagnosticKind::Cycle(cycle), &stage_pointer(first))
                    .help = Some("a stage cannot depend, directly or through others, on itself; remove one of the edges (an `after` entry or a `stages.X` reference)".into());
            }
        }
        Vec::new()
    }
}

/// The stages in an order that runs each after what it depends on, and otherwise in the order
/// of the file: stages that can start together start as they were written (Kahn's algorithm,
/// first in first out). `None` when there is a cycle.
pub(crate) fn in_order_of_the_file(deps: &[Deps]) -> Option<Vec<usize>> {
    let mut waiting: Vec<usize> = deps.iter().map(|d| d.len()).collect();
    let mut dependents = vec![Vec::new(); deps.len()];
    for (i, ds) in deps.iter().enumerate() {
        for &d in ds {
            dependents[d].push(i);
        }
    }
    let mut order: Vec<usize> = (0..deps.len()).filter(|&i| waiting[i] == 0).collect();
    let mut next = 0;
    while let Some(&i) = order.get(next) {
        next += 1;
        for &j in &dependents[i] {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                order.push(j);
            }
        }
    }
    (order.len() == deps.len()).then_some(order)
}

/// One cycle through `members`, as `a -> b -> a`.
fn cycle_path(members: &[usize], deps: &[Deps], ids: &[String]) -> String {
    let set: HashSet<usize> = members.iter().copied().collect();
    let start = members[0];
    let mut path = vec![start];
    let mut current = start;
    let mut seen = HashSet::new();
    seen.insert(start);
    loop {
        let next = deps[current]
            .iter()
            .copied()
            .find(|d| set.contains(d) && (*d == start || !seen.contains(d)));
        match next {
            Some(next) if next == start => break,
            Some(next) => {
                path.push(next);
                seen.insert(next);
                current = next;
            }
            None => break,
        }
    }
    // deps point backwards (a stage depends on its predecessor); print in run order.
    path.reverse();
    let mut names: Vec<&str> = path.iter().map(|i| ids[*i].as_str()).collect();
    let missing: Vec<&str> = members
        .iter()
        .filter(|m| !path.contains(m))
        .map(|i| ids[*i].as_str())
        .collect();
    names.push(names[0]);
    let mut text = names.join(" -> ");
    if !missing.is_empty() {
        text.push_str(&format!(" (also in the cycle: {})", missing.join(", ")));
    }
    text
}
