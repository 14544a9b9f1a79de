//! `runs report`: a run record as one self-contained HTML file. A header (how the run ended,
//! its tokens and cost, its inputs), the graph that ran (SVG, stages colored by status, laid
//! out in columns by dependency depth, redundant edges left out), a timeline of the stages and
//! their `foreach` items on the run's clock in lanes by concurrency (model calls and repaired
//! replies inside their bars), and each stage's details on click.
//!
//! Invariants: the page loads nothing (styles and script inline, a Content-Security-Policy
//! that forbids every request); the same record gives the same bytes (nothing is read from
//! the clock, every map is walked in the record's order); what the record holds is already
//! redacted, and outputs are cut at [`OUTPUT_CAP`] each and [`OUTPUTS_BUDGET`] in all. A run
//! of more than [`MAX_DRAWN`] stages is drawn by column, one box per column with its counts
//! by status, and its timeline shows the [`MAX_DRAWN`] longest stages (and the
//! [`MAX_ITEMS_DRAWN`] longest items, the first [`MAX_CALLS_DRAWN`] model calls): every stage
//! stays in the table below.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use super::record::{ItemRun, ModelCall, OutputLine, RunRecord, StageRecord, StageStatus};

/// Past this many stages the graph is drawn by column and the timeline shows the longest.
pub(crate) const MAX_DRAWN: usize = 300;
/// Past this many `foreach` items the timeline shows the longest.
pub(crate) const MAX_ITEMS_DRAWN: usize = 1000;
/// The most model calls the timeline draws.
pub(crate) const MAX_CALLS_DRAWN: usize = 2000;
/// The most of one stage's output the page holds.
pub(crate) const OUTPUT_CAP: usize = 16 * 1024;
/// The most of all outputs together the page holds; later outputs are left out with a note.
pub(crate) const OUTPUTS_BUDGET: usize = 8 * 1024 * 1024;

const NODE_W: usize = 200;
const NODE_H: usize = 44;
const COL_GAP: usize = 70;
const ROW_GAP: usize = 14;
const PAD: usize = 20;
const TIMELINE_W: usize = 1000;
const LANE_H: usize = 18;

/// A stage as the report draws it: its record and what the plan says of it.
struct Node<'a> {
    id: &'a str,
    record: &'a StageRecord,
    plan: Option<&'a Map<String, Value>>,
    /// Indexes of the nodes it waits for.
    after: Vec<usize>,
    column: usize,
    /// The stage whose `exit_if` ended the run.
    exit: bool,
}

impl Node<'_> {
    /// The status as the report colors it: a stage that ended the run early is `exited`.
    fn status(&self) -> &'static str {
        if self.exit {
            "exited"
        } else {
            self.record.status.as_str()
        }
    }

    fn plan_str(&self, key: &str) -> Option<&str> {
        self.plan?.get(key)?.as_str()
    }
}

/// The report of `record`, with the plan it ran (`plan.json`, absent from older records) and
/// the outputs its stages recorded.
pub(crate) fn render(
    record: &RunRecord,
    plan: Option<&Value>,
    outputs: &HashMap<String, OutputLine>,
) -> String {
    let nodes = nodes(record, plan);
    let mut out = String::with_capacity(64 * 1024 + nodes.len() * 512);
    out.push_str(HEAD);
    let _ = write!(
        out,
        "<title>{} {} {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        esc(&record.workflow),
        esc(&record.run_id),
        record.status.as_str()
    );
    header(&mut out, record);
    out.push_str("<main>\n<section id=\"graph\">\n<h2>Graph</h2>\n");
    if plan.is_none() {
        out.push_str(
            "<p class=\"note\">This record has no plan.json (it predates it): the stages are drawn without their edges.</p>\n",
        );
    }
    legend(&mut out);
    if nodes.len() > MAX_DRAWN {
        columns_svg(&mut out, &nodes);
    } else {
        graph_svg(&mut out, &nodes);
    }
    out.push_str("</section>\n<section id=\"timeline\">\n<h2>Timeline</h2>\n");
    timeline_svg(&mut out, record, &nodes);
    out.push_str("</section>\n");
    out.push_str(
        "<section id=\"detail\" hidden>\n<h2 id=\"detail-title\"></h2>\n<div id=\"detail-body\"></div>\n</section>\n",
    );
    stage_table(&mut out, &nodes);
    out.push_str("</main>\n");
    let data = stage_data(&nodes, outputs);
    let _ = write!(
        out,
        "<script type=\"application/json\" id=\"stage-data\">{}</script>\n<script>{SCRIPT}</script>\n</body>\n</html>\n",
        json_for_script(&data)
    );
    out
}

/// The stages in the plan's order (the record's for stages the plan does not name), each
/// with its dependencies as indexes and its column: one more than the deepest it waits for.
fn nodes<'a>(record: &'a RunRecord, plan: Option<&'a Value>) -> Vec<Node<'a>> {
    let planned: Vec<&Map<String, Value>> = plan
        .and_then(|p| p.get("stages"))
        .and_then(Value::as_array)
        .map(|stages| stages.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default();
    let by_id: HashMap<&str, &Map<String, Value>> = planned
        .iter()
        .filter_map(|s| Some((s.get("id")?.as_str()?, *s)))
        .collect();
    let exit_stage = record.exit.as_ref().and_then(|e| e.stage.as_deref());
    // The plan's order is a topological one (waves, then the finally stages).
    let mut order: Vec<&str> = planned
        .iter()
        .filter_map(|s| s.get("id")?.as_str())
        .filter(|id| record.stages.contains_key(*id))
        .collect();
    for id in record.stages.keys() {
        if !by_id.contains_key(&**id) {
            order.push(id);
        }
    }
    let index: HashMap<&str, usize> = order.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let mut nodes: Vec<Node> = order
        .iter()
        .map(|&id| Node {
            id,
            record: &record.stages[id],
            plan: by_id.get(id).copied(),
            after: Vec::new(),
            column: 0,
            exit: exit_stage == Some(id),
        })
        .collect();
    for i in 0..nodes.len() {
        let after: Vec<usize> = nodes[i]
            .plan
            .and_then(|p| p.get("after"))
            .and_then(Value::as_array)
            .map(|after| {
                after
                    .iter()
                    .filter_map(|d| index.get(d.as_str()?).copied())
                    .filter(|&d| d < i)
                    .collect()
            })
            .unwrap_or_default();
        nodes[i].column = after
            .iter()
            .map(|&d| nodes[d].column + 1)
            .max()
            .unwrap_or(0);
        nodes[i].after = after;
    }
    let order: Vec<usize> = (0..nodes.len()).collect();
    let deps: Vec<Vec<usize>> = nodes.iter().map(|n| n.after.clone()).collect();
    for (node, reduced) in nodes
        .iter_mut()
        .zip(crate::floor::reduction::transitive_reduction(&order, &deps))
    {
        node.after = reduced;
    }
    nodes
}

const HEAD: &str = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
<meta name=\"generator\" content=\"stagegraph runs report\">\n\
<script>window.addEventListener('error',function(e){document.documentElement.setAttribute('data-error',String(e.message));});\
document.addEventListener('securitypolicyviolation',function(e){document.documentElement.setAttribute('data-blocked',String(e.blockedURI));});</script>\n";

fn header(out: &mut String, record: &RunRecord) {
    let _ = writeln!(
        out,
        "<header>\n<h1>{} <span class=\"run-status s-{}\">{}</span></h1>",
        esc(&record.workflow),
        record.status.as_str(),
        record.status.as_str()
    );
    out.push_str("<dl class=\"facts\">\n");
    let mut fact = |name: &str, value: &str| {
        let _ = writeln!(out, "<dt>{name}</dt><dd>{}</dd>", esc(value));
    };
    fact("run", &record.run_id);
    if record.dry_run {
        fact("mode", "dry-run");
    }
    if let Some(from) = &record.resumed_from {
        fact("resumed from", from);
    }
    fact("started", &record.started_at);
    fact("duration", &duration(record.duration_ms));
    if let Some(exit) = &record.exit {
        let at = exit.stage.as_deref().unwrap_or("(run)");
        fact("exited at", &format!("{at}: {}", exit.message));
    }
    if let Some(error) = &record.error {
        fact("error", error);
    }
    let usage = &record.usage;
    if usage.model_calls > 0 {
        let mut tokens = format!("{} in, {} out", usage.input_tokens, usage.output_tokens);
        if usage.cache_read_tokens > 0 || usage.cache_write_tokens > 0 {
            tokens.push_str(&format!(
                " (cache read {}, cache write {})",
                usage.cache_read_tokens, usage.cache_write_tokens
            ));
        }
        fact("model calls", &usage.model_calls.to_string());
        fact("tokens", &tokens);
        match (usage.cost_usd, usage.estimated_cost_usd) {
            (Some(cost), _) => fact("cost", &format!("${cost:.4}")),
            (None, Some(cost)) => fact(
                "cost",
                &format!("about ${cost:.4} (estimated from recordings)"),
            ),
            (None, None) => fact("cost", "not reported by the provider"),
        }
    }
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for stage in record.stages.values() {
        let status = stage.status.as_str();
        match counts.iter_mut().find(|(s, _)| *s == status) {
            Some((_, n)) => *n += 1,
            None => counts.push((status, 1)),
        }
    }
    let counts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    fact(
        "stages",
        &format!("{} ({})", record.stages.len(), counts.join(", ")),
    );
    out.push_str("</dl>\n");
    if !record.inputs.is_empty() {
        let inputs = serde_json::to_string_pretty(&record.inputs).unwrap_or_default();
        let _ = writeln!(
            out,
            "<details class=\"inputs\"><summary>inputs ({})</summary><pre>{}</pre></details>",
            record.inputs.len(),
            esc(&cut(&inputs, OUTPUT_CAP).0)
        );
    }
    out.push_str("</header>\n");
}

const STATUSES: [&str; 7] = [
    "succeeded",
    "cached",
    "skipped",
    "exited",
    "failed",
    "not_run",
    "running",
];

fn legend(out: &mut String) {
    out.push_str("<p class=\"legend\">");
    for status in STATUSES {
        let _ = write!(out, "<span class=\"chip s-{status}\">{status}</span> ");
    }
    out.push_str("</p>\n");
}

/// Every stage a box, column by column, an edge from each stage it waits for.
fn graph_svg(out: &mut String, nodes: &[Node]) {
    let columns = nodes.iter().map(|n| n.column + 1).max().unwrap_or(0);
    // A sub-workflow's box is a cluster of its stages, one line each below its own.
    let inner: Vec<Vec<(String, &'static str)>> = nodes.iter().map(inner_stages).collect();
    let mut tops = vec![PAD; columns];
    let mut at = Vec::with_capacity(nodes.len());
    for (node, inner) in nodes.iter().zip(&inner) {
        let top = tops[node.column];
        tops[node.column] += node_height(inner.len()) + ROW_GAP;
        at.push((PAD + node.column * (NODE_W + COL_GAP), top));
    }
    let width = PAD * 2 + columns * (NODE_W + COL_GAP);
    let height = PAD + tops.iter().max().copied().unwrap_or(PAD);
    let _ = writeln!(
        out,
        "<svg class=\"dag\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"stage graph\">"
    );
    out.push_str("<g class=\"edges\">\n");
    for (i, node) in nodes.iter().enumerate() {
        for &d in &node.after {
            let (x1, y1) = (at[d].0 + NODE_W, at[d].1 + NODE_H / 2);
            let (x2, y2) = (at[i].0, at[i].1 + NODE_H / 2);
            let mid = usize::midpoint(x1, x2);
            let _ = writeln!(
                out,
                "<path d=\"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}\" data-from=\"{}\" data-to=\"{}\"/>",
                esc(nodes[d].id),
                esc(node.id)
            );
        }
    }
    out.push_str("</g>\n");
    for ((node, (x, y)), inner) in nodes.iter().zip(&at).zip(&inner) {
        let status = node.status();
        let mut second = format!("{status} {}", duration(node.record.duration_ms));
        if let Some(items) = node.record.details().items {
            second.push_str(&format!(" · {items} items"));
            if node.record.details().failed_items > 0 {
                second.push_str(&format!(" ({} failed)", node.record.details().failed_items));
            }
        }
        if node
            .plan
            .and_then(|p| p.get("action"))
            .and_then(Value::as_str)
            == Some("workflow")
        {
            second.push_str(" · workflow");
        }
        let finally = if node.plan.and_then(|p| p.get("finally")) == Some(&Value::Bool(true)) {
            " finally"
        } else {
            ""
        };
        let cluster = match inner.is_empty() {
            true => String::new(),
            false => cluster_svg(inner),
        };
        let _ = writeln!(
            out,
            "<g class=\"node s-{status}{finally}{kind}\" data-stage=\"{id}\" data-status=\"{status}\" tabindex=\"0\" transform=\"translate({x},{y})\"><title>{id}: {title}</title><rect width=\"{NODE_W}\" height=\"{h}\" rx=\"6\"/><text x=\"8\" y=\"18\">{label}</text><text class=\"sub\" x=\"8\" y=\"35\">{second}</text>{mark}{cluster}</g>",
            kind = if inner.is_empty() { "" } else { " cluster" },
            h = node_height(inner.len()),
            id = esc(node.id),
            title = esc(node.plan_str("summary").unwrap_or(status)),
            label = esc(&shorten(node.id, 26)),
            second = esc(&second),
            mark = if node.exit {
                "<rect class=\"mark\" x=\"182\" y=\"8\" width=\"10\" height=\"10\"><title>the run exited here</title></rect>"
            } else {
                ""
            },
        );
    }
    out.push_str("</svg>\n");
}

const INNER_H: usize = 20;

/// A stage's box: taller by a line per stage when it is a sub-workflow's cluster.
fn node_height(inner: usize) -> usize {
    match inner {
        0 => NODE_H,
        n => NODE_H + n * (INNER_H + 4) + 4,
    }
}

/// A sub-workflow stage's stages in execution order (a sub-workflow's in it as `stage/inner`),
/// each with its status in the run: from the record when it kept how the sub-workflow ended,
/// else `not_run` when the stage never ran and `unknown` when it ran.
fn inner_stages(node: &Node) -> Vec<(String, &'static str)> {
    fn walk(stages: &Value, prefix: &str, out: &mut Vec<String>) {
        for stage in stages.as_array().into_iter().flatten() {
            let Some(id) = stage.get("id").and_then(Value::as_str) else {
                continue;
            };
            let path = format!("{prefix}{id}");
            out.push(path.clone());
            if let Some(inner) = stage.get("sub_workflow") {
                walk(&inner["stages"], &format!("{path}/"), out);
            }
        }
    }
    let Some(sub) = node.plan.and_then(|p| p.get("sub_workflow")) else {
        return Vec::new();
    };
    let mut ids = Vec::new();
    walk(&sub["stages"], "", &mut ids);
    let run = node.record.details().sub_run.as_deref();
    ids.into_iter()
        .map(|id| {
            let status = match run {
                Some(run) if run.exit_stage.as_deref() == Some(id.as_str()) => "exited",
                Some(run) => run.stages.get(&id).map_or("not_run", |s| s.as_str()),
                None if node.record.status == StageStatus::NotRun => "not_run",
                None if node.record.status == StageStatus::Skipped => "skipped",
                None => "unknown",
            };
            (id, status)
        })
        .collect()
}

/// The stages inside a sub-workflow's box, one line each.
fn cluster_svg(inner: &[(String, &'static str)]) -> String {
    let mut out = String::new();
    for (n, (id, status)) in inner.iter().enumerate() {
        let y = NODE_H + n * (INNER_H + 4);
        let depth = id.matches('/').count();
        let x = 8 + depth * 10;
        let _ = write!(
            out,
            "<g class=\"inner s-{status}\" data-inner=\"{id}\" data-status=\"{status}\" transform=\"translate({x},{y})\"><rect width=\"{w}\" height=\"{INNER_H}\" rx=\"3\"/><text x=\"6\" y=\"14\">{label}</text></g>",
            id = esc(id),
            w = NODE_W - 16 - depth * 10,
            label = esc(&shorten(
                &format!("{} {status}", id.rsplit('/').next().unwrap_or(id)),
                24
            )),
        );
    }
    out
}

/// A run too large to draw stage by stage: one box per column with its counts by status,
/// and the columns joined in order.
fn columns_svg(out: &mut String, nodes: &[Node]) {
    let columns = nodes.iter().map(|n| n.column + 1).max().unwrap_or(0);
    let mut counts: Vec<Vec<(&'static str, usize)>> = vec![Vec::new(); columns];
    for node in nodes {
        let status = node.status();
        let column = &mut counts[node.column];
        match column.iter_mut().find(|(s, _)| *s == status) {
            Some((_, n)) => *n += 1,
            None => column.push((status, 1)),
        }
    }
    let box_h = 30 + counts.iter().map(Vec::len).max().unwrap_or(0) * 16;
    let width = PAD * 2 + columns * (NODE_W + COL_GAP);
    let height = PAD * 2 + box_h;
    let _ = writeln!(
        out,
        "<p class=\"note\">{} stages: drawn as one box per column of the graph (click a stage in the table below for its details).</p>",
        nodes.len()
    );
    let _ = writeln!(
        out,
        "<svg class=\"dag\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"stage graph by column\">"
    );
    for (c, column) in counts.iter().enumerate() {
        let x = PAD + c * (NODE_W + COL_GAP);
        if c > 0 {
            let _ = writeln!(
                out,
                "<g class=\"edges\"><path d=\"M{},{} L{x},{}\"/></g>",
                x - COL_GAP,
                PAD + box_h / 2,
                PAD + box_h / 2
            );
        }
        let total: usize = column.iter().map(|(_, n)| n).sum();
        let _ = write!(
            out,
            "<g class=\"column\" data-column=\"{}\" transform=\"translate({x},{PAD})\"><rect width=\"{NODE_W}\" height=\"{box_h}\" rx=\"6\"/><text x=\"8\" y=\"18\">column {} · {total} stages</text>",
            c + 1,
            c + 1
        );
        for (row, (status, n)) in column.iter().enumerate() {
            let _ = write!(
                out,
                "<text class=\"sub t-{status}\" x=\"8\" y=\"{}\">{n} {status}</text>",
                38 + row * 16
            );
        }
        out.push_str("</g>\n");
    }
    out.push_str("</svg>\n");
}

/// Milliseconds since the run started, from two RFC 3339 times.
fn offset_ms(run_start: &str, at: &str) -> Option<u64> {
    let start = chrono::DateTime::parse_from_rfc3339(run_start).ok()?;
    let at = chrono::DateTime::parse_from_rfc3339(at).ok()?;
    u64::try_from((at - start).num_milliseconds()).ok()
}

/// A bar of the timeline: a stage, or one of a `foreach` stage's items.
struct Bar<'a> {
    start: u64,
    length: u64,
    node: usize,
    /// The item's index and record, for an item's bar.
    item: Option<&'a ItemRun>,
    /// The model calls drawn inside the bar, end to end from its start (the record keeps each
    /// call's latency, not its start), numbered from `first` among its stage's.
    calls: &'a [ModelCall],
    first: usize,
}

/// One bar per stage that ran and per `foreach` item, on the run's clock, in the first lane
/// free when it started; each bar's model calls inside it (a rejected reply, repaired, marked).
fn timeline_svg(out: &mut String, record: &RunRecord, nodes: &[Node]) {
    let mut bars: Vec<Bar> = nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| {
            let start = offset_ms(&record.started_at, n.record.started_at.as_deref()?)?;
            // A foreach stage's calls are drawn in its items' bars when the record has them.
            let calls = match n.record.details().item_runs.is_empty() {
                true => &n.record.details().model_calls[..],
                false => &[],
            };
            Some(Bar {
                start,
                length: n.record.duration_ms,
                node: i,
                item: None,
                calls,
                first: 0,
            })
        })
        .collect();
    if bars.is_empty() {
        out.push_str("<p class=\"note\">No stage of this run started.</p>\n");
        return;
    }
    let started = bars.len();
    if bars.len() > MAX_DRAWN {
        // The longest stages, stably (ties in the order of the graph).
        bars.sort_by(|a, b| b.length.cmp(&a.length).then(a.node.cmp(&b.node)));
        bars.truncate(MAX_DRAWN);
        let _ = writeln!(
            out,
            "<p class=\"note\">The {MAX_DRAWN} longest of the {started} stages that started.</p>"
        );
    }
    let mut items: Vec<Bar> = Vec::new();
    for bar in &bars {
        let stage = nodes[bar.node].record;
        let mut first = 0usize;
        for item in &stage.details().item_runs {
            let count = usize::try_from(item.model_calls).unwrap_or(usize::MAX);
            let end = first
                .saturating_add(count)
                .min(stage.details().model_calls.len());
            items.push(Bar {
                start: item.start_ms,
                length: item.duration_ms,
                node: bar.node,
                item: Some(item),
                calls: stage
                    .details()
                    .model_calls
                    .get(first..end)
                    .unwrap_or_default(),
                first,
            });
            first = end;
        }
    }
    let all_items = items.len();
    if items.len() > MAX_ITEMS_DRAWN {
        items.sort_by(|a, b| {
            b.length
                .cmp(&a.length)
                .then(a.node.cmp(&b.node))
                .then(a.item.map(|i| i.index).cmp(&b.item.map(|i| i.index)))
        });
        items.truncate(MAX_ITEMS_DRAWN);
        let _ = writeln!(
            out,
            "<p class=\"note\">The {MAX_ITEMS_DRAWN} longest of the {all_items} foreach items.</p>"
        );
    }
    bars.extend(items);
    // In start order; a stage before its items, the items by index.
    bars.sort_by(|a, b| {
        a.start
            .cmp(&b.start)
            .then(a.node.cmp(&b.node))
            .then(a.item.map(|i| i.index).cmp(&b.item.map(|i| i.index)))
    });
    let span = bars
        .iter()
        .map(|b| b.start + b.length)
        .max()
        .unwrap_or(0)
        .max(record.duration_ms)
        .max(1);
    // A lane is free once its last bar ended.
    let mut lanes: Vec<u64> = Vec::new();
    let mut placed = Vec::with_capacity(bars.len());
    for bar in bars {
        let end = bar.start + bar.length.max(1);
        let lane = match lanes.iter().position(|&free| free <= bar.start) {
            Some(lane) => {
                lanes[lane] = end;
                lane
            }
            None => {
                lanes.push(end);
                lanes.len() - 1
            }
        };
        placed.push((bar, lane));
    }
    let label_w = 160;
    let width = label_w + TIMELINE_W + PAD * 2;
    let height = 30 + lanes.len() * LANE_H + PAD;
    let _ = writeln!(
        out,
        "<p class=\"note\">{} lane(s): stages and foreach items that overlap on the run's clock (to the millisecond) are in different lanes; a bar's model calls are drawn inside it end to end, a rejected reply that was repaired in red.</p>",
        lanes.len()
    );
    let _ = writeln!(
        out,
        "<svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"timeline\">"
    );
    for tick in 0..=4u64 {
        let x = label_w as u64 + tick * TIMELINE_W as u64 / 4;
        let _ = writeln!(
            out,
            "<g class=\"tick\"><line x1=\"{x}\" y1=\"18\" x2=\"{x}\" y2=\"{}\"/><text x=\"{x}\" y=\"12\">{}</text></g>",
            height - PAD,
            duration(span * tick / 4)
        );
    }
    for lane in 0..lanes.len() {
        let _ = writeln!(
            out,
            "<text class=\"lane\" x=\"4\" y=\"{}\">lane {}</text>",
            30 + lane * LANE_H + 12,
            lane + 1
        );
    }
    let mut calls_left = MAX_CALLS_DRAWN;
    let mut calls_skipped = 0usize;
    for (bar, lane) in placed {
        let node = &nodes[bar.node];
        let x = label_w as u64 + bar.start * TIMELINE_W as u64 / span;
        let w = (bar.length * TIMELINE_W as u64 / span).max(2);
        let y = 30 + lane * LANE_H;
        let id = esc(node.id);
        match bar.item {
            None => {
                let _ = writeln!(
                    out,
                    "<rect class=\"bar s-{status}\" data-stage=\"{id}\" x=\"{x}\" y=\"{y}\" width=\"{w}\" height=\"{h}\"><title>{id}: {status}, {d} from {s}</title></rect>",
                    status = node.status(),
                    h = LANE_H - 4,
                    d = duration(bar.length),
                    s = duration(bar.start),
                );
            }
            Some(item) => {
                let status = item.status.as_str();
                let attempts = match item.attempts {
                    0 | 1 => String::new(),
                    n => format!(", {n} attempts"),
                };
                let _ = writeln!(
                    out,
                    "<rect class=\"item-bar s-{status}\" data-stage=\"{id}\" data-item=\"{index}\" x=\"{x}\" y=\"{y}\" width=\"{w}\" height=\"{h}\"><title>{id}[{index}]: {status}{attempts}, {d} from {s}</title></rect>",
                    index = item.index,
                    h = LANE_H - 4,
                    d = duration(bar.length),
                    s = duration(bar.start),
                );
            }
        }
        if bar.calls.len() > calls_left {
            calls_skipped += bar.calls.len();
            continue;
        }
        calls_left -= bar.calls.len();
        let mut at = bar.start;
        for (n, call) in bar.calls.iter().enumerate() {
            let cx = label_w as u64 + at * TIMELINE_W as u64 / span;
            let cw = (call.latency_ms * TIMELINE_W as u64 / span).max(1);
            let (class, what) = match &call.rejected {
                Some(_) => ("call-bar repair", "rejected, repaired"),
                None => ("call-bar", "accepted"),
            };
            let item = bar
                .item
                .map(|i| format!(" data-item=\"{}\"", i.index))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "<rect class=\"{class}\" data-stage=\"{id}\"{item} data-call=\"{call_n}\" x=\"{cx}\" y=\"{cy}\" width=\"{cw}\" height=\"{ch}\"><title>{id} model call {call_n}: {model}, attempt {attempt}, {what}, {d}</title></rect>",
                call_n = bar.first + n + 1,
                cy = y + 4,
                ch = LANE_H - 12,
                model = esc(&call.model),
                attempt = call.attempt,
                d = duration(call.latency_ms),
            );
            at += call.latency_ms;
        }
    }
    out.push_str("</svg>\n");
    if calls_skipped > 0 {
        let _ = writeln!(
            out,
            "<p class=\"note\">{calls_skipped} model calls past the first {MAX_CALLS_DRAWN} are not drawn (each stage's details list them).</p>"
        );
    }
}

/// Every stage a row: id, status, duration, what it does; a click opens its details.
fn stage_table(out: &mut String, nodes: &[Node]) {
    let _ = writeln!(
        out,
        "<section id=\"stages\">\n<h2>Stages ({})</h2>\n<input id=\"filter\" type=\"search\" placeholder=\"filter by id or status\" aria-label=\"filter stages\">\n<table>\n<thead><tr><th>stage</th><th>status</th><th>duration</th><th>action</th><th>note</th></tr></thead>\n<tbody>",
        nodes.len()
    );
    for node in nodes {
        let note = node
            .record
            .details()
            .error
            .as_deref()
            .or(node.record.details().reason.as_deref())
            .unwrap_or("");
        let _ = writeln!(
            out,
            "<tr data-stage=\"{id}\" data-status=\"{status}\"><td>{id}</td><td><span class=\"chip s-{status}\">{status}</span></td><td class=\"num\">{d}</td><td>{action}</td><td>{note}</td></tr>",
            id = esc(node.id),
            status = node.status(),
            d = duration(node.record.duration_ms),
            action = esc(&shorten(node.plan_str("summary").unwrap_or(""), 80)),
            note = esc(&shorten(note.lines().next().unwrap_or(""), 120)),
        );
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
}

/// What the script shows of each stage on click: the record's fields, the plan's, and the
/// output, cut.
fn stage_data(nodes: &[Node], outputs: &HashMap<String, OutputLine>) -> Value {
    let mut budget = OUTPUTS_BUDGET;
    let stages: Vec<Value> = nodes
        .iter()
        .map(|node| {
            let record = node.record;
            let mut stage = Map::new();
            stage.insert("id".into(), node.id.into());
            stage.insert("status".into(), node.status().into());
            if let Some(plan) = node.plan {
                for key in [
                    "summary",
                    "description",
                    "after",
                    "if",
                    "foreach",
                    "exit_if",
                    "assert",
                ] {
                    match plan.get(key) {
                        None | Some(Value::Null) => {}
                        Some(Value::Array(a)) if a.is_empty() => {}
                        Some(value) => {
                            stage.insert(key.into(), value.clone());
                        }
                    }
                }
            }
            if let Ok(Value::Object(fields)) = serde_json::to_value(record) {
                for (key, value) in fields {
                    if key != "status" {
                        stage.insert(key, value);
                    }
                }
            }
            if record.status == StageStatus::NotRun {
                return Value::Object(stage);
            }
            if let Some(line) = outputs.get(node.id) {
                let text = match &line.output {
                    Value::String(text) => text.clone(),
                    other => serde_json::to_string_pretty(other).unwrap_or_default(),
                };
                let (shown, note) = if budget == 0 {
                    (
                        String::new(),
                        Some(format!(
                            "left out ({} bytes): the report holds at most {} MB of outputs; `stagegraph runs show RUN --stage {}` prints it",
                            text.len(),
                            OUTPUTS_BUDGET >> 20,
                            node.id
                        )),
                    )
                } else {
                    let (shown, was_cut) = cut(&text, OUTPUT_CAP.min(budget));
                    let note = was_cut.then(|| {
                        format!(
                            "cut at {} of {} bytes; `stagegraph runs show RUN --stage {}` prints it whole",
                            shown.len(),
                            text.len(),
                            node.id
                        )
                    });
                    (shown, note)
                };
                budget = budget.saturating_sub(shown.len());
                stage.insert("output".into(), shown.into());
                if let Some(note) = note {
                    stage.insert("output_note".into(), note.into());
                }
            }
            Value::Object(stage)
        })
        .collect();
    json!(stages)
}

/// At most `cap` bytes of `text`, cut at a character boundary, and whether it was cut.
fn cut(text: &str, cap: usize) -> (String, bool) {
    if text.len() <= cap {
        return (text.to_string(), false);
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_string(), true)
}

fn shorten(text: &str, chars: usize) -> String {
    if text.chars().count() > chars {
        format!("{}…", text.chars().take(chars - 1).collect::<String>())
    } else {
        text.to_string()
    }
}

fn duration(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
    }
}

/// Text for HTML (an element's content or a quoted attribute).
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// JSON that cannot end the script element it sits in: `<`, `>` and `&` only occur inside
/// strings, where their `\u` escapes mean the same.
fn json_for_script(value: &Value) -> String {
    serde_json::to_string(value)
        .unwrap_or_default()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

const STYLE: &str = r#"
:root{--ok:#2e7d32;--cached:#1565c0;--skipped:#9e9e9e;--exited:#ef6c00;--failed:#c62828;--notrun:#fff;--running:#f9a825;--fg:#1d1d1f;--muted:#666;--line:#d0d0d0}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);margin:0;background:#fafafa}
header,main{padding:12px 24px}
header{background:#fff;border-bottom:1px solid var(--line)}
h1{font-size:20px;margin:4px 0 8px}h2{font-size:16px;margin:18px 0 8px}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0}
dt{color:var(--muted)}dd{margin:0;white-space:pre-wrap;word-break:break-word}
pre{background:#f3f3f3;padding:8px;overflow:auto;max-height:420px;white-space:pre-wrap;word-break:break-word;margin:4px 0}
.note{color:var(--muted);margin:4px 0}
section{overflow-x:auto}
.chip,.run-status{display:inline-block;padding:0 8px;border-radius:10px;font-size:12px;color:#fff;border:1px solid transparent}
.chip.s-not_run,.run-status.s-running{color:var(--fg);border-color:#999}
.s-succeeded,.s-completed{background:var(--ok)}.s-cached{background:var(--cached)}.s-skipped{background:var(--skipped)}
.s-exited{background:var(--exited)}.s-failed,.s-interrupted{background:var(--failed)}.s-not_run{background:var(--notrun)}.s-running{background:var(--running)}
svg text{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
.edges path{fill:none;stroke:#888;stroke-width:1.2}
.node{cursor:pointer}.node rect{stroke:#333;stroke-width:1}
.node.s-succeeded rect{fill:#c8e6c9}.node.s-cached rect{fill:#bbdefb}.node.s-skipped rect{fill:#eee}
.node.s-exited rect{fill:#ffe0b2;stroke:var(--exited);stroke-width:3}.node.s-failed rect{fill:#ffcdd2;stroke:var(--failed);stroke-width:2}
.node.s-not_run rect{fill:#fff;stroke-dasharray:4 3}.node.s-running rect{fill:#fff9c4}
.node.finally rect{stroke-dasharray:6 3}
.node .inner rect{stroke:#666;stroke-width:.6;stroke-dasharray:none;fill:#fff}.node .inner text{font-size:11px}
.node .inner.s-succeeded rect{fill:#a5d6a7}.node .inner.s-cached rect{fill:#90caf9}.node .inner.s-skipped rect{fill:#e0e0e0}.node .inner.s-exited rect{fill:#ffcc80;stroke:var(--exited);stroke-width:2}.node .inner.s-failed rect{fill:#ef9a9a}.node .inner.s-not_run rect{stroke-dasharray:3 2}
.node .sub{fill:var(--muted);font-size:11px}.node rect.mark{fill:var(--exited);stroke:none}
.node.sel rect,.bar.sel{stroke:#000;stroke-width:3}
.column rect{fill:#fff;stroke:#333}.column .sub{font-size:11px}
.t-succeeded{fill:var(--ok)}.t-cached{fill:var(--cached)}.t-failed{fill:var(--failed)}.t-exited{fill:var(--exited)}.t-skipped,.t-not_run{fill:var(--muted)}
.timeline .tick line{stroke:#e0e0e0}.timeline .tick text,.timeline .lane{fill:var(--muted);font-size:11px}
.bar{cursor:pointer;stroke:#333;stroke-width:.5}.bar.s-not_run{fill:#fff}
.bar.s-succeeded{fill:var(--ok)}.bar.s-cached{fill:var(--cached)}.bar.s-skipped{fill:var(--skipped)}.bar.s-exited{fill:var(--exited)}.bar.s-failed{fill:var(--failed)}.bar.s-running{fill:var(--running)}
.timeline .tick text{text-anchor:middle}
.item-bar{cursor:pointer;stroke:#333;stroke-width:.5;fill-opacity:.6}.item-bar.s-succeeded{fill:var(--ok)}.item-bar.s-cached{fill:var(--cached)}.item-bar.s-failed{fill:var(--failed)}
.call-bar{fill:#fff;fill-opacity:.85;stroke:#333;stroke-width:.5;pointer-events:none}.call-bar.repair{fill:var(--failed)}
#detail{background:#fff;border:1px solid var(--line);border-radius:6px;padding:4px 16px 12px;margin:12px 0}
#detail dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px}
table{border-collapse:collapse;width:100%;background:#fff}th,td{border-bottom:1px solid #eee;padding:3px 8px;text-align:left;vertical-align:top}
tbody tr{cursor:pointer}tbody tr:hover{background:#f0f6ff}td.num{text-align:right;white-space:nowrap}
#filter{margin:0 0 8px;padding:4px 8px;width:280px}
"#;

/// Opens a stage's details from a click on its node, bar or row (or from `#stage=ID` in the
/// address), and filters the table. Marks the page `data-ready` once set up.
const SCRIPT: &str = r"
(function () {
  'use strict';
  var stages = JSON.parse(document.getElementById('stage-data').textContent);
  var byId = {};
  stages.forEach(function (s) { byId[s.id] = s; });
  var panel = document.getElementById('detail');
  var title = document.getElementById('detail-title');
  var body = document.getElementById('detail-body');
  var LABELS = [
    ['status', 'status'], ['summary', 'what it runs'], ['description', 'description'],
    ['after', 'after'], ['if', 'if'], ['foreach', 'foreach'], ['exit_if', 'exit_if'],
    ['assert', 'assert'], ['started_at', 'started'], ['duration_ms', 'duration (ms)'],
    ['items', 'foreach items'], ['failed_items', 'failed items'], ['reused_items', 'reused items'],
    ['attempts', 'attempts'], ['reason', 'reason'], ['error', 'error'],
    ['fingerprint', 'fingerprint'], ['fingerprint_parts', 'fingerprint parts'],
    ['reused_from', 'reused from'], ['explain', 'cache'], ['output_sha256', 'output sha256'],
    ['usage', 'usage'], ['stderr', 'stderr (tail)'], ['output_note', 'output note'],
    ['output', 'output']
  ];
  function text(value) {
    if (typeof value === 'string') { return value; }
    if (Array.isArray(value) && value.every(function (v) { return typeof v === 'string'; })) {
      return value.join(', ');
    }
    return JSON.stringify(value, null, 2);
  }
  function add(dl, name, value, pre) {
    var dt = document.createElement('dt');
    dt.textContent = name;
    var dd = document.createElement('dd');
    if (pre) {
      var p = document.createElement('pre');
      p.textContent = text(value);
      dd.appendChild(p);
    } else {
      dd.textContent = text(value);
    }
    dl.appendChild(dt);
    dl.appendChild(dd);
  }
  function show(id) {
    var s = byId[id];
    if (!s) { return; }
    title.textContent = s.id;
    body.textContent = '';
    var dl = document.createElement('dl');
    LABELS.forEach(function (pair) {
      var v = s[pair[0]];
      if (v === undefined || v === null) { return; }
      var pre = ['error', 'stderr', 'output', 'fingerprint_parts', 'usage'].indexOf(pair[0]) >= 0;
      add(dl, pair[1], v, pre);
    });
    (s.model_calls || []).forEach(function (call, n) {
      var line = call.model + ', attempt ' + call.attempt + ', ' + call.latency_ms + 'ms';
      if (call.usage) { line += ', ' + call.usage.input_tokens + ' in / ' + call.usage.output_tokens + ' out'; }
      if (call.cost_usd !== undefined) { line += ', $' + call.cost_usd.toFixed(4); }
      if (call.retries) {
        line += ', ' + call.retries + ' retries';
        if (call.throttled) { line += ' (' + call.throttled + ' rate-limited)'; }
        if (call.waited_ms) { line += ', waited ' + call.waited_ms + 'ms'; }
      }
      if (call.replayed) { line += ', replayed'; }
      if (call.rejected) { line += '\nrejected (repaired): ' + call.rejected; }
      add(dl, 'model call ' + (n + 1), line, !!call.rejected);
    });
    body.appendChild(dl);
    panel.hidden = false;
    panel.setAttribute('data-stage', s.id);
    Array.prototype.forEach.call(document.querySelectorAll('.sel'), function (e) { e.classList.remove('sel'); });
    Array.prototype.forEach.call(document.querySelectorAll('[data-stage]'), function (e) {
      if (e !== panel && e.getAttribute('data-stage') === s.id) { e.classList.add('sel'); }
    });
  }
  document.addEventListener('click', function (event) {
    var target = event.target.closest ? event.target.closest('[data-stage]') : null;
    if (target && target !== panel) {
      show(target.getAttribute('data-stage'));
      panel.scrollIntoView({ block: 'nearest' });
    }
  });
  document.addEventListener('keydown', function (event) {
    var target = event.target;
    if (event.key === 'Enter' && target.getAttribute && target.getAttribute('data-stage')) {
      show(target.getAttribute('data-stage'));
    }
  });
  var filter = document.getElementById('filter');
  filter.addEventListener('input', function () {
    var q = filter.value.toLowerCase();
    Array.prototype.forEach.call(document.querySelectorAll('#stages tbody tr'), function (row) {
      var hit = !q || row.getAttribute('data-stage').toLowerCase().indexOf(q) >= 0 ||
        row.getAttribute('data-status').indexOf(q) >= 0;
      row.hidden = !hit;
    });
  });
  function fromHash() {
    var m = /^#stage=(.+)$/.exec(location.hash);
    if (m) { show(decodeURIComponent(m[1])); }
  }
  window.addEventListener('hashchange', fromHash);
  fromHash();
  document.body.setAttribute('data-ready', String(stages.length));
})();
";

#[cfg(test)]
mod tests {
    use super::{cut, esc, json_for_script};

    #[test]
    fn script_json_cannot_close_its_element() {
        let value = serde_json::json!({"out": "</script><b>&"});
        let text = json_for_script(&value);
        assert!(!text.contains("</script"), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).expect("still JSON");
        assert_eq!(back, value);
    }

    #[test]
    fn text_is_escaped_and_cut_at_a_character() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(cut("héllo", 2), ("h".to_string(), true));
        assert_eq!(cut("hi", 2), ("hi".to_string(), false));
    }
}
