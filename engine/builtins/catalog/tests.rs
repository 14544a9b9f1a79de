//! The tests of `catalog.merge`, through the built-in's own entry point.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::document::{STRAY_MARKER, STRAY_NAME};
use super::format::Format;
use super::invariants::check_invariants;
use super::parse::parse;
use super::render::render;
use super::with::{parse_args, MergeArgs};
use super::{builtins, output_schema, run};
use crate::builtins::{args, BuiltinCtx, WriteRoots};

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
    let broken = "### Broken\n- **Aliases**: none\n- **Relations**: none\n- **Source**: inferred";
    let text = LEXICON.replace("## Domain\n", &format!("## Domain\n\n{broken}\n"));
    let out = merge_into_text(Some(&text), json!([]));
    assert!(content(&out)
        .contains("### Broken <!-- TODO: invariant missing Definition -->\n- **Aliases**: none\n"));
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
    assert!(
        block(content(&fixed), "Backoff policy").contains("- **Relations**: Upload step, Ghost")
    );
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
    let pick = |rng: &mut StdRng, items: &[&'static str]| items[rng.random_range(0..items.len())];
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
        let first = merge_json(json!({ "current": text, "entries": answer, "max_lines": budget }));
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
