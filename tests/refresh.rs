//! The shipped `refresh` workflow, run by the real binary against a contextualizer installed in a
//! temporary HOME: real git repositories (a bare repository with a pushed commit, reached by a
//! `file://` URL, and one that does not exist), web-doc sources answered by a stub HTTP server on
//! 127.0.0.1, a pinned clock (`STAGEGRAPH_NOW`), and the `sonnet` alias answered by a script.
//!
//! Who writes the discover cache: the workflow stages the updated
//! `research/.discover-cache.json` inside the proposal and never touches the live one, so the
//! no-op gate holds once a proposal has been applied. The tests apply a proposal the way
//! `/skill-engine:apply` would: the staged files copied over the live ones, the staging folder
//! removed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::support::{copy_tree, fixtures, stage, Output, Test};

/// The pinned clock of every run.
const NOW: &str = "2026-11-30T12:00:00Z";
const SUMMARY: &str = "Probed the sources; guide moved, old-blog is gone.";
const HANDOFF: &str = "Proposal staged at demo-context.proposed/. Run /skill-engine:review demo to inspect, /skill-engine:apply demo to promote, /skill-engine:discard demo to throw away.";
const SKILLS: &str = ".claude/skills";
const LIVE: &str = ".claude/skills/demo-context";
const PROPOSED: &str = ".claude/skills/demo-context.proposed";

/// A HOME with the demo contextualizer, its upstream repository, a web server and a model.
struct Home {
    test: Test,
    /// The SHA the upstream repository's HEAD points at.
    head: String,
    /// `http://127.0.0.1:<port>` of the stub server.
    web: String,
}

impl Home {
    /// The full fixture: every kind of source and transition, a verify.sh and a cached snapshot.
    fn new() -> Home {
        let home = Home::bare();
        home.install(&fixtures("refresh").join("demo-context"), LIVE);
        home.fill_registry(LIVE);
        copy_tree(
            &fixtures("refresh").join("snapshot"),
            &home.test.path(".cache/skill-engine/web-doc/guide-c1"),
        );
        home
    }

    /// Upstream, web server and model, but no contextualizer.
    fn bare() -> Home {
        let test = Test::new();
        git(test.root(), &["init", "-q", "--bare", "upstream.git"]);
        git(
            &test.path("upstream.git"),
            &["symbolic-ref", "HEAD", "refs/heads/main"],
        );
        git(test.root(), &["init", "-q", "work"]);
        let home = Home {
            head: String::new(),
            web: serve(),
            test,
        };
        let head = home.push_commit("first");
        home.test.write(
            "models/sonnet.sh",
            "dir=$(dirname \"$0\")\n\
             cat > \"$dir/sonnet.prompt\"\n\
             echo call >> \"$dir/sonnet.calls\"\n\
             test -f \"$dir/sonnet.reply\" || { echo 'no reply' >&2; exit 7; }\n\
             cat \"$dir/sonnet.reply\"\n",
        );
        home.test.write("models/sonnet.reply", SUMMARY);
        home.test.write(
            "stagegraph.toml",
            &format!(
                "[models.sonnet]\nprovider = \"command\"\ncommand = [\"sh\", \"{}\"]\n",
                home.test.path("models/sonnet.sh").display()
            ),
        );
        Home { head, ..home }
    }

    /// A commit pushed to the upstream repository's main branch; its SHA.
    fn push_commit(&self, message: &str) -> String {
        let work = self.test.path("work");
        git(&work, &["commit", "-q", "--allow-empty", "-m", message]);
        let url = self.git_url();
        git(&work, &["push", "-q", &url, "HEAD:refs/heads/main"]);
        let out = git(&work, &["rev-parse", "HEAD"]);
        out.trim().to_string()
    }

    fn git_url(&self) -> String {
        format!("file://{}", self.test.path("upstream.git").display())
    }

    fn install(&self, from: &Path, to: &str) {
        copy_tree(from, &self.test.path(to));
    }

    /// The registry with the placeholders of the fixture filled in.
    fn fill_registry(&self, root: &str) {
        let file = format!("{root}/research/source-paths.json");
        let text = self
            .test
            .read(&file)
            .replace("@GIT_URL@", &self.git_url())
            .replace(
                "@MISSING_GIT_URL@",
                &format!("file://{}", self.test.path("missing.git").display()),
            )
            .replace("@WEB@", &self.web)
            .replace("@REFUSED@", &refused());
        self.test.write(&file, &text);
    }

    fn write_registry(&self, value: &Value) {
        self.test.write(
            &format!("{LIVE}/research/source-paths.json"),
            &serde_json::to_string_pretty(value).expect("JSON"),
        );
    }

    fn refresh(&self, extra: &[&str]) -> Output {
        // The project root is a folder of its own: the test's working directory is HOME.
        let mut args = vec!["run", "refresh", "--input", "name=demo"];
        if !extra.iter().any(|arg| arg.starts_with("project_dir=")) {
            args.extend(["--input", "project_dir=project"]);
        }
        args.extend_from_slice(extra);
        self.test.command(args).env("STAGEGRAPH_NOW", NOW).output()
    }

    fn json(&self, relative: &str) -> Value {
        serde_json::from_str(&self.test.read(relative))
            .unwrap_or_else(|e| panic!("{relative} is not JSON: {e}"))
    }

    /// What `/skill-engine:apply` does: the staged files replace the live ones.
    fn apply(&self) {
        let staged = self.test.path(PROPOSED).join("research");
        for entry in std::fs::read_dir(&staged).expect("a staged research folder") {
            let entry = entry.expect("an entry");
            std::fs::copy(
                entry.path(),
                self.test
                    .path(LIVE)
                    .join("research")
                    .join(entry.file_name()),
            )
            .expect("copy a staged file");
        }
        std::fs::remove_dir_all(self.test.path(PROPOSED)).expect("remove the proposal");
    }

    /// Every file under `relative` with the SHA-256 of its bytes.
    fn tree(&self, relative: &str) -> BTreeMap<String, String> {
        let root = self.test.path(relative);
        walkdir::WalkDir::new(&root)
            .into_iter()
            .map(|entry| entry.expect("walk"))
            .filter(|entry| !entry.file_type().is_dir())
            .map(|entry| {
                let bytes = std::fs::read(entry.path()).expect("read");
                let name = entry
                    .path()
                    .strip_prefix(&root)
                    .expect("inside")
                    .display()
                    .to_string();
                (name, sha256(&bytes))
            })
            .collect()
    }

    fn record(&self) -> Value {
        self.test.last_run()
    }
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Run git with an identity and no user or system configuration; its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.invalid")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.invalid")
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// A stub web server: `/guide/*` moved (301, relative Location), `/gone` 404, anything else 200.
fn serve() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let address = listener.local_addr().expect("an address");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
            let mut request = String::new();
            if reader.read_line(&mut request).is_err() {
                continue;
            }
            loop {
                let mut line = String::new();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line == "\r\n" => break,
                    Ok(_) => {}
                }
            }
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let head = if path.starts_with("/guide/") {
                "301 Moved Permanently\r\nLocation: /docs/v2/intro".to_string()
            } else if path == "/gone" {
                "404 Not Found".to_string()
            } else {
                "200 OK".to_string()
            };
            let _ = stream.write_all(
                format!("HTTP/1.1 {head}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            );
        }
    });
    format!("http://{address}")
}

/// An http URL on a port nothing listens on.
fn refused() -> String {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    format!("http://127.0.0.1:{port}")
}

fn source<'v>(registry: &'v Value, id: &str) -> &'v Value {
    registry["sources"]
        .as_array()
        .and_then(|sources| sources.iter().find(|s| s["source_id"] == id))
        .unwrap_or_else(|| panic!("no source {id} in {registry:#}"))
}

fn exit_message(record: &Value) -> &str {
    record["exit"]["message"].as_str().unwrap_or_default()
}

fn assert_exited(home: &Home, out: &Output, at: &str, message: &str) {
    out.code(0);
    let record = home.record();
    assert_eq!(record["status"], "exited", "{record:#}");
    assert_eq!(record["exit"]["stage"], at, "{record:#}");
    assert!(
        exit_message(&record).contains(message),
        "exit message {:?} lacks {message:?}",
        exit_message(&record)
    );
    assert!(
        !home.test.exists(PROPOSED),
        "an early exit staged something"
    );
}

#[test]
fn stages_every_transition_and_leaves_the_live_tree_alone() {
    let home = Home::new();
    let live_before = home.tree(LIVE);
    let out = home.refresh(&[]);
    out.code(0);
    let record = home.record();
    assert_eq!(record["status"], "completed", "{record:#}");
    assert_eq!(home.tree(LIVE), live_before, "the live tree changed");

    // The staged registry: the transitions applied, chunks dropped, everything else kept.
    let staged = home.json(&format!("{PROPOSED}/research/source-paths.json"));
    assert_eq!(staged["schema_version"], 2);
    assert_eq!(staged["generated_by"], "engine-bootstrap");
    assert_eq!(staged["sources"].as_array().map(Vec::len), Some(10));
    let lib = source(&staged, "upstream-lib");
    assert_eq!(lib["lifecycle"]["state"], "reachable");
    assert_eq!(lib["lifecycle"]["last_checked_sha"], home.head.as_str());
    assert_eq!(lib["lifecycle"]["last_checked"], NOW);
    assert_eq!(lib["covers"], serde_json::json!(["references/lib.md"]));
    assert!(lib.get("chunks").is_none(), "chunks kept: {lib:#}");
    assert!(source(&staged, "api-docs").get("chunks").is_none());
    // A repository that does not exist is unknown (the conservative default), not removed, and
    // keeps the SHA last seen.
    let vanished = source(&staged, "vanished-lib");
    assert_eq!(vanished["lifecycle"]["state"], "unknown");
    assert_eq!(
        vanished["lifecycle"]["last_checked_sha"],
        "2222222222222222222222222222222222222222"
    );
    assert_eq!(vanished["lifecycle"]["last_checked"], NOW);
    let guide = source(&staged, "guide");
    assert_eq!(guide["lifecycle"]["state"], "moved");
    assert_eq!(
        guide["lifecycle"]["proposed_url"],
        format!("{}/docs/v2/intro", home.web)
    );
    assert_eq!(guide["lifecycle"]["last_crawl_id"], "c1");
    assert_eq!(source(&staged, "old-blog")["lifecycle"]["state"], "removed");
    assert_eq!(
        source(&staged, "api-docs")["lifecycle"]["state"],
        "reachable"
    );
    // A web server that does not answer is unknown too, and only that source.
    let mirror = source(&staged, "mirror");
    assert_eq!(mirror["lifecycle"]["state"], "unknown");
    assert_eq!(mirror["lifecycle"]["last_checked"], NOW);
    // Out of scope or not probed: exactly as they were.
    let live = home.json(&format!("{LIVE}/research/source-paths.json"));
    for id in ["design-notes", "retired", "dead-link", "companion"] {
        assert_eq!(source(&staged, id), source(&live, id), "{id} changed");
    }

    // The staged discover cache, and the manifest of both files.
    let cache = home.json(&format!("{PROPOSED}/research/.discover-cache.json"));
    assert_eq!(cache["sources"]["upstream-lib"]["sha"], home.head.as_str());
    assert_eq!(cache["sources"]["vanished-lib"]["state"], "unknown");
    let manifest = home.json(&format!("{PROPOSED}/.review/manifest.json"));
    let prefix = |relative: &str| {
        sha256(&std::fs::read(home.test.path(relative)).expect("read"))[..7].to_string()
    };
    assert_eq!(
        manifest["entries"],
        serde_json::json!([
            {
                "path": "research/source-paths.json",
                "status": "modified",
                "sha_before": prefix(&format!("{LIVE}/research/source-paths.json")),
                "sha_after": prefix(&format!("{PROPOSED}/research/source-paths.json")),
            },
            {
                "path": "research/.discover-cache.json",
                "status": "added",
                "sha_before": null,
                "sha_after": prefix(&format!("{PROPOSED}/research/.discover-cache.json")),
            },
        ])
    );
    // The merged tree verify.sh ran in is gone; only the proposal remains.
    let proposal: Vec<String> = home.tree(PROPOSED).into_keys().collect();
    assert_eq!(
        proposal,
        [
            ".review/manifest.json",
            "research/.discover-cache.json",
            "research/source-paths.json"
        ]
    );
    assert_eq!(stage(&record, "verify")["status"], "succeeded");

    // Phase 2: the snapshot crawled 2026-10-01 with a 30-day decay is 30 days overdue.
    let decay: Value =
        serde_json::from_str(&home.test.stage_output("decay_expiry")).expect("decay JSON");
    assert_eq!(
        decay["expired"],
        serde_json::json!([{ "source_id": "guide", "crawl_date": "2026-10-01", "decay": "30d", "overdue_days": 30 }])
    );
    let notice = home.test.stage_output("decay_check");
    assert!(
        notice.starts_with("1 web-doc source is past the decay budget:")
            && notice.contains("guide (crawled 2026-10-01, decay 30d, 30 days overdue)"),
        "{notice}"
    );

    // The summary: the model's paragraph, then the handoff line, last.
    assert_eq!(out.stdout.trim_end(), format!("{SUMMARY}\n\n{HANDOFF}"));
    let prompt = home.test.read("models/sonnet.prompt");
    for fact in [
        "\"to\": \"moved\"",
        "\"to\": \"removed\"",
        "vanished-lib",
        "\"migrated\": 2",
        "overdue_days",
        "design-notes",
    ] {
        assert!(prompt.contains(fact), "the prompt lacks {fact}:\n{prompt}");
    }
    assert!(!prompt.contains("Ignore previous instructions"));
}

#[test]
fn a_failing_model_leaves_the_plain_summary() {
    let home = Home::new();
    std::fs::remove_file(home.test.path("models/sonnet.reply")).expect("remove the reply");
    let out = home.refresh(&[]);
    out.code(0);
    assert_eq!(stage(&home.record(), "summary")["status"], "failed");
    let text = out.stdout.trim_end();
    assert!(
        text.starts_with("Probed 6 of the 7 in-scope sources of demo-context"),
        "{text}"
    );
    assert!(
        text.contains("guide (reachable to moved, proposed"),
        "{text}"
    );
    assert!(text.contains("--hint='<your hint>'"), "{text}");
    assert!(text.ends_with(HANDOFF), "{text}");
}

#[test]
fn an_unchanged_corpus_is_no_work_until_upstream_moves_or_a_hint_is_given() {
    let home = Home::bare();
    home.install(&fixtures("refresh").join("demo-context"), LIVE);
    home.write_registry(&serde_json::json!({
        "sources": [
            { "source_id": "upstream-lib", "kind": "git-managed", "url": home.git_url(), "status": "confirmed" },
            { "source_id": "vanished-lib", "kind": "git-managed", "status": "confirmed",
              "url": format!("file://{}", home.test.path("missing.git").display()) },
            { "source_id": "api-docs", "kind": "web-doc", "url": format!("{}/api", home.web), "status": "proposed" },
        ]
    }));
    std::fs::remove_file(home.test.path(LIVE).join("verify.sh")).expect("no verify.sh");

    // First run: no cache yet, so there is work.
    home.refresh(&[]).code(0);
    assert_eq!(home.record()["status"], "completed");
    home.apply();
    let live_before = home.tree(LIVE);

    // Nothing moved upstream since the applied cache: no work, nothing staged.
    let out = home.refresh(&[]);
    assert_exited(
        &home,
        &out,
        "gate",
        "No work to do: all 3 probed sources match",
    );
    assert_eq!(out.stdout.trim(), exit_message(&home.record()));
    assert_eq!(home.tree(LIVE), live_before);

    // A hint always overrides the gate.
    home.refresh(&["--input", "hint=recheck the api pages"])
        .code(0);
    assert_eq!(home.record()["status"], "completed");
    assert!(home
        .test
        .read("models/sonnet.prompt")
        .contains("recheck the api pages"));
    std::fs::remove_dir_all(home.test.path(PROPOSED)).expect("discard");

    // Upstream moved: the new SHA is work again.
    let head = home.push_commit("second");
    home.refresh(&[]).code(0);
    assert_eq!(home.record()["status"], "completed");
    let staged = home.json(&format!("{PROPOSED}/research/source-paths.json"));
    assert_eq!(
        source(&staged, "upstream-lib")["lifecycle"]["last_checked_sha"],
        head.as_str()
    );
    let manifest = home.json(&format!("{PROPOSED}/.review/manifest.json"));
    assert_eq!(manifest["entries"][1]["status"], "modified");
}

#[test]
fn a_staged_proposal_stops_the_run() {
    let home = Home::new();
    home.test
        .write(&format!("{PROPOSED}/research/source-paths.json"), "{}");
    let before = home.tree(SKILLS);
    let out = home.refresh(&[]);
    out.code(0);
    let record = home.record();
    assert_eq!(record["status"], "exited");
    assert_eq!(record["exit"]["stage"], "guard");
    assert_eq!(
        exit_message(&record),
        "A proposal is already staged at demo-context.proposed/. Apply it (/skill-engine:apply demo), discard it (/skill-engine:discard demo), or inspect it (/skill-engine:review demo) before running refresh again."
    );
    assert_eq!(home.tree(SKILLS), before);
    assert!(!home.test.exists("models/sonnet.calls"));
}

#[test]
fn no_registered_sources_stops_the_run() {
    for registry in [
        None,
        Some("{ not json"),
        Some(r#"{"sources": []}"#),
        Some("[]"),
    ] {
        let home = Home::bare();
        home.install(&fixtures("refresh").join("demo-context"), LIVE);
        let file = home.test.path(LIVE).join("research/source-paths.json");
        match registry {
            None => std::fs::remove_file(&file).expect("remove the registry"),
            Some(text) => std::fs::write(&file, text).expect("write the registry"),
        }
        let out = home.refresh(&[]);
        assert_exited(
            &home,
            &out,
            "registered",
            "No sources registered. Run /skill-engine:engine-bootstrap first.",
        );
    }
}

#[test]
fn nothing_in_scope_stops_the_run() {
    let home = Home::bare();
    home.install(&fixtures("refresh").join("demo-context"), LIVE);
    home.write_registry(&serde_json::json!({
        "sources": [
            { "source_id": "a", "kind": "git-managed", "url": home.git_url(), "status": "confirmed", "archived": true },
            { "source_id": "b", "kind": "web-doc", "url": home.web, "status": "confirmed", "lifecycle": { "state": "removed" } },
        ]
    }));
    let out = home.refresh(&[]);
    assert_exited(
        &home,
        &out,
        "scope",
        "Nothing to refresh. All 2 registered sources are archived or removed. Edit research/source-paths.json to add new sources or un-archive existing ones.",
    );
}

#[test]
fn a_failing_verify_removes_the_proposal() {
    let home = Home::new();
    home.test.write(
        &format!("{LIVE}/verify.sh"),
        "echo 'catalog bijection broken: references/lib.md' >&2\nexit 3\n",
    );
    let live_before = home.tree(LIVE);
    let out = home.refresh(&[]);
    out.code(1);
    out.stderr_has("catalog bijection broken");
    out.stderr_has("staging is aborted and demo-context.proposed/ was removed");
    assert!(!home.test.exists(PROPOSED));
    assert_eq!(home.tree(LIVE), live_before);
    assert_eq!(home.record()["status"], "failed");
    assert!(!home.test.exists("models/sonnet.calls"));
}

#[test]
fn locating_the_contextualizer() {
    let home = Home::bare();
    let out = home
        .test
        .run(["run", "refresh", "--input", "project_dir=project"]);
    assert_exited(&home, &out, "root", "No contextualizer found under any of ~/.claude/skills/, ~/.claude/local/skills/, or .claude/skills/. Run /skill-engine:engine-bootstrap first.");
    let out = home.refresh(&[]);
    assert_exited(
        &home,
        &out,
        "root",
        "No contextualizer named demo-context under any of",
    );

    // The same slug at the project level and the user level: the user level wins.
    home.install(
        &fixtures("refresh").join("demo-context"),
        "project/.claude/skills/demo-context",
    );
    home.install(&fixtures("refresh").join("demo-context"), LIVE);
    home.fill_registry(LIVE);
    home.fill_registry("project/.claude/skills/demo-context");
    let project_before = home.tree("project");
    home.refresh(&["--input", "project_dir=project"]).code(0);
    assert!(home
        .test
        .exists(&format!("{PROPOSED}/.review/manifest.json")));
    assert_eq!(home.tree("project"), project_before);
    std::fs::remove_dir_all(home.test.path(PROPOSED)).expect("discard");

    // Without a name: several are listed; one is named back, since the writes need the name.
    home.install(
        &fixtures("refresh").join("demo-context"),
        ".claude/local/skills/other-context",
    );
    let out = home
        .test
        .run(["run", "refresh", "--input", "project_dir=project"]);
    assert_exited(
        &home,
        &out,
        "root",
        "Multiple contextualizers found; rerun naming one",
    );
    let message = exit_message(&home.record()).to_string();
    assert!(
        message.contains(&home.test.path(LIVE).display().to_string()),
        "{message}"
    );
    assert!(message.contains("other-context"), "{message}");
    for installed in [".claude/local", "project"] {
        std::fs::remove_dir_all(home.test.path(installed)).expect("uninstall");
    }
    let out = home
        .test
        .run(["run", "refresh", "--input", "project_dir=project"]);
    assert_exited(&home, &out, "root", "Rerun naming it (--input name=demo)");

    // Installed as a symbolic link to a folder elsewhere: found, read through the link, and the
    // folder it points to left alone.
    std::fs::rename(
        home.test.path(LIVE),
        home.test.path("dotfiles-demo-context"),
    )
    .expect("move");
    std::os::unix::fs::symlink(
        home.test.path("dotfiles-demo-context"),
        home.test.path(LIVE),
    )
    .expect("link");
    let target_before = home.tree("dotfiles-demo-context");
    home.refresh(&[]).code(0);
    assert_eq!(home.record()["status"], "completed");
    assert!(home
        .test
        .exists(&format!("{PROPOSED}/.review/manifest.json")));
    assert_eq!(home.tree("dotfiles-demo-context"), target_before);

    // A name is a slug, never a path.
    let out = home.test.run([
        "run",
        "refresh",
        "--input",
        "name=../demo",
        "--input",
        "project_dir=project",
    ]);
    out.code(1);
    out.stderr_has("`name` must be a contextualizer slug");
}

#[test]
fn a_dry_run_touches_nothing() {
    let home = Home::new();
    let before = home.tree(".claude");
    let out = home.refresh(&["--dry-run"]);
    out.code(0);
    assert_eq!(home.tree(".claude"), before);
    assert!(!home.test.exists(PROPOSED));
    assert!(!home.test.exists("models/sonnet.calls"));
    let record = home.record();
    assert_eq!(record["status"], "completed", "{record:#}");
    out.stderr_has("(dry-run) would run $ git ls-remote --");
    out.stderr_has("(dry-run) would run $ bash verify.sh");
}

#[test]
fn check_is_clean() {
    let home = Home::bare();
    let out = home.test.run(["check", "refresh", "--deny-warnings"]);
    out.code(0);
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(text.contains("0 error(s), 0 warning(s)"), "{text}");
}

#[test]
fn a_probe_that_hangs_leaves_that_source_unknown_and_no_other() {
    let home = Home::new();
    // A git server that takes the connection and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let file = format!("{LIVE}/research/source-paths.json");
    let missing = format!("file://{}", home.test.path("missing.git").display());
    let text = home
        .test
        .read(&file)
        .replace(&missing, &format!("git://127.0.0.1:{port}/silent.git"));
    home.test.write(&file, &text);
    home.test.write(
        ".stagegraph/workflows/refresh.toml",
        "[workflow]\nextends = \"refresh\"\n\n[stages.probe]\ntimeout = \"1s\"\n",
    );
    home.refresh(&[]).code(0);
    let record = home.record();
    let probe = stage(&record, "probe");
    assert_eq!(probe["status"], "succeeded", "{record:#}");
    assert_eq!(probe["failed_items"], 1);
    let staged = home.json(&format!("{PROPOSED}/research/source-paths.json"));
    assert_eq!(
        source(&staged, "vanished-lib")["lifecycle"]["state"],
        "unknown"
    );
    let lib = source(&staged, "upstream-lib");
    assert_eq!(lib["lifecycle"]["state"], "reachable");
    assert_eq!(lib["lifecycle"]["last_checked_sha"], home.head.as_str());
}
