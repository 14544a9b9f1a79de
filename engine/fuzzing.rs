//! Not part of the library's API: the entry points of the fuzz targets (the crate under
//! `fuzz/`, and `tests/fuzz_regressions.rs`, which replays their regression inputs), hidden from
//! the documentation and free to change with the engine.
//!
//! Each target takes any bytes and drives one of the engine's readers the way the engine drives
//! it. Whatever the bytes, none may panic, abort or hang: a malformed input is an error value (a
//! diagnostic, a `BuiltinError`, `None`), never a crash.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{json, Value};

/// A target: any bytes in, nothing out.
pub type Target = fn(&[u8]);

/// Every target, by name: the name is also the folder of its corpus and of its regressions.
pub const TARGETS: &[(&str, Target)] = &[
    ("workflow", workflow),
    ("expression", expression),
    ("template", template),
    ("shell", shell),
    ("schema", schema),
    ("duration", duration),
    ("transcript", transcript),
    ("markdown", markdown),
    ("reply", reply),
    ("config", config),
    ("registry", registry),
    ("cache", cache),
    ("records", records),
];

/// A folder of this process's own for targets that read files, empty but for what they write.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("stagegraph-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        dir
    })
}

/// A file in the scratch folder holding `data` (one per thread, so threads do not share it).
fn scratch_file(name: &str, data: &[u8]) -> PathBuf {
    let dir = scratch().join(format!("{:?}", std::thread::current().id()).replace(['(', ')'], ""));
    std::fs::create_dir_all(&dir).expect("a thread's scratch folder");
    let path = dir.join(name);
    std::fs::write(&path, data).expect("write a scratch file");
    path
}

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// What templates and expressions see: a little of each kind of value.
fn scope() -> minijinja::Value {
    minijinja::Value::from_serialize(json!({
        "inputs": {
            "word": "stage", "list": ["a", 1, null], "map": {"k": true, "n": {"x": 7}},
            "nothing": null, "flag": false, "number": 2.5, "big": 9007199254740993_i64,
            "unsafe": "a b; $(touch PWNED) `x` 'q' \"d\"",
        },
        "env": { "HOME": "/home/u" },
        "stages": { "gate": { "output": { "update": true, "items": [1, 2, 3] }, "status": "succeeded" } },
        "item": "one", "index": 0,
        "output": { "ok": true },
        "run": { "id": "r1", "status": "running", "exit": null },
    }))
}

/// The loader and the checker: the bytes as a workflow file (in a library folder of its own,
/// so `extends`, schemas, templates and sub-workflows it names resolve to nothing), loaded and
/// checked; a workflow that checks is also planned.
pub fn workflow(data: &[u8]) {
    use crate::diag::SourceFile;
    use crate::library::{Found, Library, SearchPath};
    let Some(text) = text(data) else { return };
    let (text, files) = split_files(text);
    // A project folder of this thread's own, holding only the files this input brings.
    let project = scratch().join(format!(
        "project-{}",
        format!("{:?}", std::thread::current().id()).replace(['(', ')'], "")
    ));
    let _ = std::fs::remove_dir_all(&project);
    let root = project.join("library");
    let _ = std::fs::create_dir_all(root.join("workflows"));
    for (path, body) in files {
        let path = project.join(path);
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = std::fs::write(path, body);
    }
    let library = Library {
        root: Some(root.clone()),
        origin: "fuzz",
        loose: false,
    };
    let search = SearchPath::new(vec![library.clone()]);
    let file = root.join("workflows").join("fuzz.toml");
    // On disk too, so that a sub-workflow naming it (a cycle) finds it.
    let _ = std::fs::write(&file, text);
    let found = Found {
        library,
        position: Some(0),
        source: SourceFile::new(file, text),
    };
    let Ok(raw) = crate::load::load_found(&search, found, &mut Vec::new(), None) else {
        return;
    };
    if let Ok(workflow) = crate::check::check(raw, &search, &project) {
        let plan = crate::plan::Plan::new(&workflow);
        let json = plan.to_json();
        // The plan a run writes by hand is the document serde_json writes.
        let mut written = Vec::new();
        if plan.write_json(&mut written).is_ok() {
            assert_eq!(
                String::from_utf8_lossy(&written),
                json.to_string(),
                "plan.json as a run writes it"
            );
        }
        let _ = (plan.to_text(), plan.to_dot(), plan.to_mermaid());
    }
}

/// The line that starts a file a workflow input brings with it: `#%% <path>`, the path
/// relative to the project folder (sub-workflows, bases, templates and schemas the workflow
/// names), the file being the lines up to the next such line.
const FILE_MARK: &str = "#%% ";

/// A workflow input's own text (before its first [`FILE_MARK`] line) and the files it brings,
/// each at a relative path that stays inside the project folder (others are dropped).
fn split_files(text: &str) -> (&str, Vec<(&str, &str)>) {
    let mut files = Vec::new();
    let Some(first) = text
        .match_indices(FILE_MARK)
        .find(|(at, _)| *at == 0 || text.as_bytes()[at - 1] == b'\n')
        .map(|(at, _)| at)
    else {
        return (text, files);
    };
    let mut rest = &text[first..];
    while let Some(after) = rest.strip_prefix(FILE_MARK) {
        let (path, body) = after.split_once('\n').unwrap_or((after, ""));
        let end = body
            .match_indices(&format!("\n{FILE_MARK}"))
            .next()
            .map_or(body.len(), |(at, _)| at + 1);
        let path = path.trim();
        let inside = !path.is_empty()
            && std::path::Path::new(path)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if inside {
            files.push((path, &body[..end]));
        }
        rest = &body[end..];
    }
    (&text[..first], files)
}

/// An expression (`if`, `exit_if`, `foreach`, `assert`) compiled as the checker compiles it,
/// then evaluated and its references listed.
pub fn expression(data: &[u8]) {
    use crate::template::{compiled::Interpolation, Tmpl};
    let Some(source) = text(data) else { return };
    let env = std::sync::Arc::new(crate::template::environment());
    let scope = scope();
    if let Some(fast) = Interpolation::parse("expression", source, true) {
        let fast = Tmpl::Interpolated(Box::new(fast));
        let _ = fast.eval(&scope);
        let _ = fast.references();
    }
    if let Ok(tmpl) = Tmpl::expression(&env, source) {
        let _ = crate::template::guarded(|| tmpl.eval(&scope));
        let _ = tmpl.references();
    }
}

/// A text template compiled as the checker compiles it (plain, and as a `.sh` script, which
/// shell-quotes what it prints), then rendered.
pub fn template(data: &[u8]) {
    use crate::template::{compiled, Tmpl};
    let Some(source) = text(data) else { return };
    let scope = scope();
    for name in ["fuzz.txt", "fuzz.sh", "value:fuzz"] {
        if let Some(fast) = compiled::Interpolation::parse(name, source, false) {
            let fast = Tmpl::Interpolated(Box::new(fast));
            let _ = fast.render(&scope);
            let _ = fast.eval(&scope);
        }
        let mut env = crate::template::environment();
        let added = crate::template::guarded(|| {
            env.add_template_owned(name.to_string(), crate::template::bounded_source(source))
        });
        if added.is_err() {
            continue;
        }
        let env = std::sync::Arc::new(env);
        if let Ok(tmpl) = Tmpl::text(&env, name) {
            let _ = crate::template::guarded(|| tmpl.render(&scope));
            let _ = tmpl.references();
        }
    }
}

/// A `shell` script: read the way `sh` reads it to decide how each printed value is referenced,
/// and a `command` argv checked for a shell's script or another interpreter's code.
pub fn shell(data: &[u8]) {
    use crate::template::{shell, Tmpl};
    let Some(source) = text(data) else { return };
    let mut env = crate::template::environment();
    let scope = scope();
    let added = crate::template::guarded(|| {
        env.add_template_owned("script.sh".to_string(), source.to_string())
    });
    if added.is_ok() {
        let env = std::sync::Arc::new(env);
        if let Ok(tmpl) = Tmpl::text(&env, "script.sh") {
            let _ = crate::template::guarded(|| {
                shell::render_script(&tmpl, &scope, false).map(|script| script.text)
            });
        }
    }
    let argv: Vec<String> = source.split('\u{0}').map(str::to_string).collect();
    let _ = shell::script_argument(&argv);
    let _ = shell::code_argument(&argv);
}

/// A JSON Schema file: compiled, the example instance a dry-run assumes built from it (bounded
/// however large its minimums), and validated against it.
pub fn schema(data: &[u8]) {
    use crate::diag::SourceFile;
    let Some(text) = text(data) else { return };
    let file = SourceFile::new("schemas/fuzz.json", text);
    if let Ok(schema) = crate::schema::Schema::compile(&file) {
        let example = schema.synthesize();
        let _ = schema.validate(&example);
    }
}

/// A duration (`timeout`, `stale_after`, `cache.ttl`).
pub fn duration(data: &[u8]) {
    if let Some(text) = text(data) {
        let _ = crate::floor::duration::parse(text);
    }
}

/// Runs built-in `name` with `with`.
fn builtin(name: &str, with: &Value) {
    let Some(builtin) = crate::builtins::lookup(name) else {
        panic!("no built-in `{name}`");
    };
    let writes = crate::builtins::WriteRoots::new(scratch(), &[]);
    let locks = crate::run::locks::HeldLocks::default();
    let ctx = crate::builtins::BuiltinCtx {
        cwd: scratch(),
        writes: &writes,
        locks: &locks,
        cancel: crate::builtins::Cancel::default(),
        // A bound, so an input naming a huge or endless file cannot exhaust the fuzzer.
        max_output: 1 << 20,
    };
    let _ = (builtin.run)(with, &ctx);
}

/// A Claude Code transcript (JSON lines) read by `transcript.delta`, from the start and from a
/// cursor inside it, with small caps so cutting and dropping are exercised.
pub fn transcript(data: &[u8]) {
    let path = scratch_file("transcript.jsonl", data);
    let path = path.display().to_string();
    builtin("transcript.delta", &json!({ "path": path }));
    let cursor = String::from_utf8_lossy(data).lines().count() / 2;
    builtin(
        "transcript.delta",
        &json!({ "path": path, "after_line": cursor, "max_part_bytes": 7, "max_bytes": 40,
                 "fallback_lines": 2 }),
    );
    builtin(
        "transcript.delta",
        &json!({ "path": path, "after_line": cursor + 1_000_000 }),
    );
}

/// A Markdown document split by `markdown.frontmatter` (YAML frontmatter) and
/// `markdown.sections`, and a section of it replaced by `markdown.replace_section`.
pub fn markdown(data: &[u8]) {
    let Some(text) = text(data) else { return };
    builtin(
        "markdown.frontmatter",
        &json!({ "text": text, "require": ["title", "tags"] }),
    );
    builtin("markdown.sections", &json!({ "text": text }));
    let heading = text
        .lines()
        .find(|line| line.starts_with('#'))
        .map_or("Step 1", |line| line.trim_start_matches('#').trim());
    builtin(
        "markdown.replace_section",
        &json!({ "text": text, "heading": heading, "body": "\nnew\n" }),
    );
}

/// A model's reply: the JSON found in it (fenced, labelled or bare).
pub fn reply(data: &[u8]) {
    if let Some(text) = text(data) {
        if let Some(found) = crate::models::extract_json(text) {
            let _ = serde_json::from_str::<Value>(found);
        }
    }
}

/// A model configuration file (`stagegraph.toml`), alone and under a second layer.
pub fn config(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let path = scratch().join("stagegraph.toml");
    let _ = crate::models::Models::from_layers(vec![(path.clone(), text.to_string())]);
    let _ = crate::models::Models::from_layers(vec![
        (
            path.clone(),
            "[models.fast]\nprovider = \"command\"\ncommand = [\"cat\"]\n".to_string(),
        ),
        (path, text.to_string()),
    ]);
}

/// A JSON file (a registry, a manifest, a discover cache) read by `json.read`, and a JSON Lines
/// file read by `jsonl.read`, whole and after a cursor.
pub fn registry(data: &[u8]) {
    let path = scratch_file("registry.json", data).display().to_string();
    builtin("json.read", &json!({ "path": path }));
    builtin("jsonl.read", &json!({ "path": path }));
    builtin(
        "jsonl.read",
        &json!({ "path": path, "after_line": 1, "max_lines": 2 }),
    );
}

/// A workflow's cache file, as a run reads it: entries looked up, one stored, the file closed
/// (compacting it when it read a torn or superseded line, then removing the output files no
/// entry names).
pub fn cache(data: &[u8]) {
    use crate::run::cache::Cache;
    let state = scratch_file("unused", b"")
        .parent()
        .expect("a thread folder")
        .join("state");
    let cache_dir = state.join("cache");
    std::fs::create_dir_all(&cache_dir).expect("a cache folder");
    std::fs::write(cache_dir.join("w.jsonl"), data).expect("write the cache file");
    let cache = Cache::new(&state, "w");
    // The ids a file names are looked up too, so a hit's checks run.
    for line in String::from_utf8_lossy(data).lines() {
        if let Some(id) = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|entry| entry.get("id").and_then(Value::as_str).map(str::to_string))
        {
            let id = crate::floor::hash::Sha256Hex::new(&id);
            let _ = cache.get(&id, None);
            let _ = cache.get(&id, Some(std::time::Duration::from_secs(1)));
        }
    }
    let _ = cache.get(&Cache::entry_id(&[0xf; 32], None), None);
    let _ = cache.put(&Cache::entry_id(&[0xf; 32], Some("k")), &json!({"x": 1}));
    let _ = cache.flush();
    let _ = cache.close();
    let _ = cache.take_warnings();
}

/// A run's record folder as `runs`, `runs show` and `resume` read it: the bytes as `run.json`,
/// and line by line as its outputs, finished items and processes.
pub fn records(data: &[u8]) {
    use crate::run::{journal, record};
    let state = scratch_file("unused", b"")
        .parent()
        .expect("a thread folder")
        .join("records");
    let run = record::runs_dir(&state).join("r1");
    let artifacts = run.join("artifacts");
    std::fs::create_dir_all(&artifacts).expect("a run folder");
    std::fs::write(run.join("run.json"), data).expect("write run.json");
    for name in ["outputs.jsonl", "items.jsonl", "processes.jsonl"] {
        std::fs::write(artifacts.join(name), data).expect("write a log");
    }
    let _ = record::read_record(&state, "r1");
    let _ = record::read_outputs(&state, "r1");
    let _ = journal::FinishedItems::read(&run);
    let _ = journal::read_processes(&run);
    let _ = record::list_runs(&state);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workflow_input_brings_its_files_and_none_outside_the_project() {
        let input = "[stages.a]\nworkflow = \"s/p.toml\"\n#%% s/p.toml\n[stages.b]\n\
                     command = [\"x\"]\n#%% ../escape.toml\nno\n#%% /abs.toml\nno\n#%% q.toml\nq\n";
        let (text, files) = split_files(input);
        assert_eq!(text, "[stages.a]\nworkflow = \"s/p.toml\"\n");
        assert_eq!(
            files,
            [
                ("s/p.toml", "[stages.b]\ncommand = [\"x\"]\n"),
                ("q.toml", "q\n")
            ]
        );
        assert_eq!(split_files("a = 1 #%% x\n").1, []);
    }

    /// A cycle of sub-workflows by path, two files deep: checked, not a stack overflow.
    #[test]
    fn a_sub_workflow_cycle_by_path_is_checked_without_aborting() {
        workflow(
            b"[stages.start]\nworkflow = \"subflows/ping.toml\"\n\
              #%% subflows/ping.toml\n[stages.call]\nworkflow = \"subflows/pong.toml\"\n\
              #%% subflows/pong.toml\n[stages.call]\nworkflow = \"./subflows/ping.toml\"\n",
        );
        workflow(b"[stages.me]\nworkflow = \"library/workflows/fuzz.toml\"\n");
    }
}
