//! The shipped `review`, `apply` and `discard` workflows, run by the real binary on a proposal
//! staged next to a real-shaped contextualizer (a navigator, references, a registry) installed in
//! a temporary HOME. Most tests write the proposal the way refresh stages it (schema_version 1,
//! one entry per file, 7-character SHA-256 prefixes); the last one runs refresh itself against a
//! local git upstream and takes its proposal through the whole loop. The `sonnet` alias is
//! answered by a script.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::symlink;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::support::{copy_tree, fixtures, wait_for, Output, Test};

const SKILLS: &str = ".claude/skills";
const LIVE: &str = ".claude/skills/vite-context";
const PROPOSED: &str = ".claude/skills/vite-context.proposed";
const REVIEW: &str = ".claude/skills/vite-context.proposed/.review/REVIEW.md";
const MANIFEST: &str = ".claude/skills/vite-context.proposed/.review/manifest.json";
const NOW: &str = "2026-11-30T12:00:00Z";

/// A HOME with the vite contextualizer, a proposal for it, and a scripted model.
struct Home {
    test: Test,
}

impl Home {
    fn new() -> Home {
        let home = Home::bare();
        copy_tree(&fixtures("review").join("live"), &home.test.path(LIVE));
        home.stage();
        home
    }

    /// Only the model: no contextualizer, no proposal.
    fn bare() -> Home {
        let test = Test::new();
        test.write(
            "models/sonnet.sh",
            "dir=$(dirname \"$0\")\n\
             cat > \"$dir/sonnet.prompt\"\n\
             echo call >> \"$dir/sonnet.calls\"\n\
             cat \"$dir/sonnet.reply\"\n",
        );
        test.write(
            "stagegraph.toml",
            &format!(
                "[models.sonnet]\nprovider = \"command\"\ncommand = [\"sh\", \"{}\"]\n",
                test.path("models/sonnet.sh").display()
            ),
        );
        Home { test }
    }

    /// The proposal: SKILL.md and the registry modified, a reference added, one removed, two
    /// left alone; the manifest as refresh writes it. No REVIEW.md yet.
    fn stage(&self) {
        copy_tree(
            &fixtures("review").join("proposed"),
            &self.test.path(PROPOSED),
        );
        let live = |p: &str| self.short(&format!("{LIVE}/{p}"));
        let staged = |p: &str| self.short(&format!("{PROPOSED}/{p}"));
        let manifest = json!({
            "schema_version": 1,
            "route": "refresh",
            "slug": "vite",
            "created_at": NOW,
            "entries": [
                { "path": "SKILL.md", "status": "modified", "sha_before": live("SKILL.md"), "sha_after": staged("SKILL.md") },
                { "path": "references/environments.md", "status": "added", "sha_before": null, "sha_after": staged("references/environments.md") },
                { "path": "research/source-paths.json", "status": "modified", "sha_before": live("research/source-paths.json"), "sha_after": staged("research/source-paths.json") },
                { "path": "references/legacy-ssr.md", "status": "removed", "sha_before": live("references/legacy-ssr.md"), "sha_after": null },
                { "path": "references/config.md", "status": "unchanged", "sha_before": live("references/config.md"), "sha_after": live("references/config.md") },
                { "path": "references/plugins.md", "status": "unchanged", "sha_before": live("references/plugins.md"), "sha_after": live("references/plugins.md") },
            ],
        });
        self.write_manifest(&manifest);
    }

    fn write_manifest(&self, manifest: &Value) {
        self.test.write(
            MANIFEST,
            &serde_json::to_string_pretty(manifest).expect("JSON"),
        );
    }

    fn manifest(&self) -> Value {
        serde_json::from_str(&self.test.read(MANIFEST)).expect("the manifest is JSON")
    }

    /// The 7-character SHA-256 prefix of a file.
    fn short(&self, relative: &str) -> String {
        sha256(&std::fs::read(self.test.path(relative)).expect("a file to hash"))[..7].to_string()
    }

    fn run(&self, workflow: &str, extra: &[&str]) -> Output {
        let mut args = vec!["run", workflow, "--input", "project_dir=project"];
        args.extend_from_slice(extra);
        self.test.command(args).env("STAGEGRAPH_NOW", NOW).output()
    }

    fn review(&self) -> Output {
        self.run("review", &["--input", "slug=vite"])
    }

    fn apply(&self) -> Output {
        self.run("apply", &["--input", "slug=vite"])
    }

    fn reply(&self, disagreements: &[(&str, &str)]) {
        let list: Vec<Value> = disagreements
            .iter()
            .map(|(kind, text)| json!({ "kind": kind, "text": text }))
            .collect();
        self.test.write(
            "models/sonnet.reply",
            &json!({ "disagreements": list }).to_string(),
        );
    }

    fn calls(&self) -> usize {
        self.test.count("models/sonnet.calls")
    }

    /// Fill Step 1 the way a person would (with their own spacing).
    fn predict(&self) {
        let text = self
            .test
            .read(REVIEW)
            .replace(
                "This skill is for ___",
                "This skill is for configuring Vite builds  ",
            )
            .replace(
                "This skill should NOT ___",
                "This skill should NOT cover SSR",
            )
            .replace(
                "The reference I'd cut: ___",
                "The reference I'd cut: legacy-ssr",
            );
        self.test.write(REVIEW, &text);
    }

    /// Tick Step 3 boxes by label.
    fn tick(&self, labels: &[&str]) {
        let mut text = self.test.read(REVIEW);
        for label in labels {
            text = text.replace(&format!("- [ ] {label}\n"), &format!("- [x] {label}\n"));
        }
        self.test.write(REVIEW, &text);
    }

    /// Every file, link and folder under HOME except the run records, with its content.
    fn snapshot(&self) -> BTreeMap<String, String> {
        let root = self.test.root();
        walkdir::WalkDir::new(root)
            .min_depth(1)
            .into_iter()
            .filter_entry(|e| e.file_name() != "state" && e.file_name() != "models")
            .map(|entry| entry.expect("walk"))
            .map(|entry| {
                let name = entry
                    .path()
                    .strip_prefix(root)
                    .expect("inside")
                    .display()
                    .to_string();
                let kind = entry.file_type();
                let what = if kind.is_symlink() {
                    format!(
                        "-> {}",
                        std::fs::read_link(entry.path()).expect("link").display()
                    )
                } else if kind.is_dir() {
                    "folder".to_string()
                } else {
                    sha256(&std::fs::read(entry.path()).expect("read"))
                };
                (name, what)
            })
            .collect()
    }
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The run failed (exit 1) and said this.
fn refused(out: &Output, message: &str) {
    out.code(1).stderr_has(message);
}

// ---------------------------------------------------------------------------------------------
// Finding the proposal.

#[test]
fn no_proposal_or_several_end_the_run_saying_so() {
    let home = Home::bare();
    for workflow in ["review", "apply"] {
        let out = home.run(workflow, &[]);
        out.code(0)
            .stderr_has("No proposed staging dir found under any of ~/.claude/skills/, ~/.claude/local/skills/ or .claude/skills/.");
        assert_eq!(
            out.stdout, "",
            "the reason is on stderr, and stdout holds no blank line"
        );
    }
    let out = home.run("review", &["--input", "slug=vite"]);
    out.code(0)
        .stderr_has("No proposed staging dir for vite under any of");

    // A live tree with no proposal: the install level is known.
    copy_tree(&fixtures("review").join("live"), &home.test.path(LIVE));
    let out = home.run("apply", &["--input", "slug=vite"]);
    out.code(0).stderr_has(&format!(
        "No proposed staging dir at {}/vite-context.proposed/. Nothing to apply.",
        home.test.path(SKILLS).display()
    ));

    // Two proposals, at two install levels: listed, and nothing done.
    home.stage();
    std::fs::create_dir_all(
        home.test
            .path("project/.claude/skills/other-context.proposed/.review"),
    )
    .expect("a second proposal");
    let before = home.snapshot();
    let out = home.run("review", &[]);
    out.code(0)
        .stderr_has("Several proposals are staged; rerun naming one with --input slug=<slug>:")
        .stderr_has(&format!("{}/", home.test.path(PROPOSED).display()))
        .stderr_has("project/.claude/skills/other-context.proposed/");
    assert_eq!(home.snapshot(), before);
}

// ---------------------------------------------------------------------------------------------
// review.

#[test]
fn the_first_pass_prints_the_manifest_the_diff_command_and_where_review_md_is() {
    let home = Home::new();
    // No REVIEW.md yet: it is stamped, then the first pass runs. The slug is not needed when
    // one proposal is staged.
    let out = home.run("review", &[]);
    out.code(0);
    let live = home.test.path(LIVE);
    let proposed = home.test.path(PROPOSED);
    assert_eq!(
        out.stdout,
        format!(
            "Added (1):\n  - references/environments.md\n\
             Modified (2):\n  - SKILL.md\n  - research/source-paths.json\n\
             Removed (1):\n  - references/legacy-ssr.md\n\
             \n\
             To inspect the diff, run:\n  git diff --no-index --color {}/ {}/\n\
             \n\
             Open {}/.review/REVIEW.md in your editor, fill Step 1, save, then run `stagegraph run review --input slug=vite` again.\n",
            live.display(),
            proposed.display(),
            proposed.display()
        )
    );
    let stamped = home.test.read(REVIEW);
    assert!(
        stamped.contains("- *\"This skill is for ___\"*"),
        "{stamped}"
    );
    assert!(stamped.contains("(Run `stagegraph run review --input slug=vite` again after filling Step 1 to populate this section.)"));
    assert!(stamped.contains("- [ ] reviewed\n- [ ] provisional\n- [ ] reject\n"));
    assert_eq!(home.calls(), 0, "the first pass asks no model");

    // A configured diff tool replaces the default; the input replaces both.
    home.test.write(
        "plugin-data/config.json",
        r#"{ "diff": { "tool": "delta" } }"#,
    );
    let out = home
        .test
        .command(["run", "review", "--input", "project_dir=project"])
        .env(
            "CLAUDE_PLUGIN_DATA",
            &home.test.path("plugin-data").display().to_string(),
        )
        .output();
    out.code(0);
    assert!(
        out.stdout
            .contains(&format!("  delta {}/ ", live.display())),
        "{}",
        out.stdout
    );
    let out = home.run("review", &["--input", "diff_tool=kdiff3"]);
    assert!(out.stdout.contains("  kdiff3 "), "{}", out.stdout);
}

#[test]
fn a_first_run_proposal_diffs_against_dev_null() {
    let home = Home::bare();
    copy_tree(
        &fixtures("review").join("proposed"),
        &home.test.path(PROPOSED),
    );
    let staged = |p: &str| home.short(&format!("{PROPOSED}/{p}"));
    home.write_manifest(&json!({
        "schema_version": 1, "route": "discover", "slug": "vite", "created_at": NOW,
        "entries": [
            { "path": "SKILL.md", "status": "added", "sha_before": null, "sha_after": staged("SKILL.md") },
            { "path": "references/environments.md", "status": "added", "sha_before": null, "sha_after": staged("references/environments.md") },
            { "path": "research/source-paths.json", "status": "added", "sha_before": null, "sha_after": staged("research/source-paths.json") },
        ],
    }));
    let out = home.review();
    out.code(0);
    assert!(
        out.stdout.starts_with("Added (3):\n  - SKILL.md\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!(
            "git diff --no-index --color /dev/null {}/\n",
            home.test.path(PROPOSED).display()
        )),
        "{}",
        out.stdout
    );
}

#[test]
fn the_second_pass_rewrites_only_step_2() {
    let home = Home::new();
    home.review().code(0);
    home.predict();
    let before = home.test.read(REVIEW);
    // Twelve disagreements, out of rank order: the scope ones come first, then style, then
    // count, at most nine, and the trailer says how many were left out.
    let mut many = Vec::new();
    for n in 0..4 {
        many.push(("count", format!("Count disagreement {n}.")));
        many.push(("style", format!("Style disagreement {n}.")));
        many.push(("scope", format!("Scope disagreement {n}.")));
    }
    let many: Vec<(&str, &str)> = many.iter().map(|(k, t)| (*k, t.as_str())).collect();
    home.reply(&many);
    let out = home.review();
    out.code(0);
    assert_eq!(home.calls(), 1);
    assert!(
        out.stdout.starts_with(&format!(
            "Wrote 9 disagreement(s) to Step 2 of {}/.review/REVIEW.md.",
            home.test.path(PROPOSED).display()
        )),
        "{}",
        out.stdout
    );
    let after = home.test.read(REVIEW);
    let step2_start = before.find("## Step 2").expect("Step 2");
    let step3_start = before.find("## Step 3").expect("Step 3");
    let new_step3 = after.find("## Step 3").expect("Step 3 kept");
    assert_eq!(
        &after[..step2_start],
        &before[..step2_start],
        "Step 1 and above unchanged"
    );
    assert_eq!(
        &after[new_step3..],
        &before[step3_start..],
        "Step 3 and below unchanged"
    );
    let mut expected = String::from("## Step 2 — Disagreement set\n\n");
    for n in 0..4 {
        expected.push_str(&format!(
            "- [ ] accept  [ ] reject   Scope disagreement {n}.\n"
        ));
    }
    for n in 0..4 {
        expected.push_str(&format!(
            "- [ ] accept  [ ] reject   Style disagreement {n}.\n"
        ));
    }
    expected.push_str("- [ ] accept  [ ] reject   Count disagreement 0.\n");
    expected.push_str("\n*3 additional disagreements not shown.*\n\n");
    assert_eq!(&after[step2_start..new_step3], expected);
    // The model saw the predictions as the user wrote them, and the proposed contextualizer.
    let prompt = home.test.read("models/sonnet.prompt");
    assert!(
        prompt.contains("This skill is for configuring Vite builds  "),
        "{prompt}"
    );
    assert!(prompt.contains("references/environments.md | the environment API"));
    assert!(prompt.contains("removed references/legacy-ssr.md"));

    // Running it again recomputes Step 2; few disagreements get the other trailer.
    home.reply(&[("style", "The navigator now leads with the environment API.")]);
    home.review().code(0);
    assert_eq!(home.calls(), 2);
    let again = home.test.read(REVIEW);
    let start = again.find("## Step 2").expect("Step 2");
    let end = again.find("## Step 3").expect("Step 3");
    assert_eq!(
        &again[start..end],
        "## Step 2 — Disagreement set\n\n\
         - [ ] accept  [ ] reject   The navigator now leads with the environment API.\n\n\
         *Only 1 disagreement surfaced — this proposal aligns closely with your predictions.*\n\n"
    );
    assert_eq!(&again[..start], &before[..step2_start]);

    // A ticked Step 3: the first pass only, no model call, the file left as it is.
    home.tick(&["reviewed"]);
    let signed = home.test.read(REVIEW);
    let out = home.review();
    out.code(0);
    assert_eq!(home.calls(), 2);
    assert!(out.stdout.starts_with("Added (1):"), "{}", out.stdout);
    assert!(
        out.stdout.contains("is signed off as reviewed"),
        "{}",
        out.stdout
    );
    assert_eq!(home.test.read(REVIEW), signed);

    // A reply that breaks the schema is asked again, then fails the run with REVIEW.md intact.
    let home = Home::new();
    home.review().code(0);
    home.predict();
    let filled = home.test.read(REVIEW);
    home.test.write(
        "models/sonnet.reply",
        r#"{"disagreements": [{"kind": "tone", "text": "x"}]}"#,
    );
    home.review()
        .code(1)
        .stderr_has("the model's reply was rejected after 2 attempt(s)");
    assert_eq!(home.test.read(REVIEW), filled);
}

#[test]
fn a_proposal_without_a_manifest_is_incomplete() {
    let home = Home::new();
    std::fs::remove_file(home.test.path(MANIFEST)).expect("remove the manifest");
    let before = home.snapshot();
    let message = format!(
        "The proposal at {}/ is incomplete: it has no .review/manifest.json, so the run that staged it did not finish. Throw it away with `stagegraph run discard --input slug=vite` and stage it again.",
        home.test.path(PROPOSED).display()
    );
    refused(&home.review(), &message);
    assert_eq!(
        home.snapshot(),
        before,
        "no REVIEW.md is stamped without a manifest"
    );
}

// ---------------------------------------------------------------------------------------------
// apply.

#[test]
fn apply_is_refused_by_each_gate_in_turn_then_promotes() {
    let home = Home::new();
    let slug = "`stagegraph run apply --input slug=vite` again";
    let proposed = home.test.path(PROPOSED).display().to_string();
    let good = home.manifest();

    // 1. The manifest: missing, unparseable, not of the schema.
    std::fs::remove_file(home.test.path(MANIFEST)).expect("remove");
    let before = home.snapshot();
    refused(
        &home.apply(),
        &format!("The proposal at {proposed}/ has no .review/manifest.json"),
    );
    assert_eq!(home.snapshot(), before);
    home.test.write(MANIFEST, "{ not json");
    refused(&home.apply(), "The proposal's manifest cannot be read (");
    let mut wrong = good.clone();
    wrong["entries"][0]["status"] = json!("renamed");
    home.write_manifest(&wrong);
    refused(
        &home.apply(),
        "The proposal's manifest does not match its schema (",
    );
    home.write_manifest(&good);

    // 2. REVIEW.md.
    let before = home.snapshot();
    refused(&home.apply(), "The proposal has no .review/REVIEW.md. Nothing was changed. Run `stagegraph run review --input slug=vite` to stamp it");
    assert_eq!(home.snapshot(), before);

    // 3. The review ran: Step 1 filled, then Step 2 populated. A tick alone proves nothing.
    home.review().code(0);
    home.tick(&["reviewed"]);
    let before = home.snapshot();
    refused(&home.apply(), "The review never ran (Step 1 predictions still contain the ___ blanks). Nothing was changed.");
    home.predict();
    let before_step2 = home.snapshot();
    refused(&home.apply(), "The review never ran (Step 2 still holds the unpopulated placeholder). Nothing was changed.");
    assert_eq!(home.snapshot(), before_step2);
    assert_ne!(home.snapshot(), before);
    // (A ticked Step 3 makes review print its first pass only, so the tick goes first.)
    let text = home
        .test
        .read(REVIEW)
        .replace("- [x] reviewed", "- [ ] reviewed");
    home.test.write(REVIEW, &text);
    home.reply(&[(
        "scope",
        "The proposal adds the environment API, which you did not predict.",
    )]);
    home.review().code(0);
    assert!(home
        .test
        .read(REVIEW)
        .contains("- [ ] accept  [ ] reject   The proposal adds"));

    // 4. Exactly one box: none, then two.
    refused(&home.apply(), &format!("Sign-off state is ambiguous (0 boxes ticked in Step 3). Nothing was changed. Edit {proposed}/.review/REVIEW.md so exactly one box is ticked, then run {slug}."));
    home.tick(&["reviewed", "provisional"]);
    refused(
        &home.apply(),
        "Sign-off state is ambiguous (2 boxes ticked in Step 3).",
    );

    // 5. Not reject.
    let text = home
        .test
        .read(REVIEW)
        .replace("- [x] reviewed", "- [ ] reviewed")
        .replace("- [x] provisional", "- [ ] provisional")
        .replace("- [ ] reject", "- [X] reject");
    home.test.write(REVIEW, &text);
    refused(&home.apply(), "Sign-off state is 'reject', so the proposal is not promoted. Nothing was changed. Run `stagegraph run discard --input slug=vite` to throw it away");

    // 6. The live tree as it was staged: a hand edit to a file the proposal removes.
    let text = home
        .test
        .read(REVIEW)
        .replace("- [X] reject", "- [ ] reject");
    home.test.write(REVIEW, &text);
    home.tick(&["provisional"]);
    let ssr = format!("{LIVE}/references/legacy-ssr.md");
    let original = home.test.read(&ssr);
    home.test
        .write(&ssr, &format!("{original}A hand edit after staging.\n"));
    let before = home.snapshot();
    let out = home.apply();
    refused(
        &out,
        "Live tree changed since this proposal was staged: references/legacy-ssr.md (live hash ",
    );
    out.stderr_has("; the manifest allows absent, or sha_before ");
    // The way out does not dead-end at refresh's guard: the proposal goes first.
    out.stderr_has("Throw this proposal away (`stagegraph run discard --input slug=vite --yes`), then run refresh again");
    assert_eq!(home.snapshot(), before);
    home.test.write(&ssr, &original);

    // Every gate passes: the promotion.
    let review_text = home.test.read(REVIEW);
    let manifest_text = home.test.read(MANIFEST);
    let out = home.apply();
    out.code(0);
    let live = home.test.path(LIVE).display().to_string();
    assert_eq!(
        out.stdout,
        format!(
            "Applied vite-context.proposed/ → vite-context/.\n\
             1 added, 2 modified, 1 removed, 2 unchanged.\n\
             Sign-off persisted as provisional at {live}/research/review-state.json.\n\
             Audit trail (REVIEW.md + manifest.json) preserved at {live}/.review/. Commit it or .gitignore it as you see fit.\n"
        )
    );
    let fixture = fixtures("review");
    for (file, from) in [
        ("SKILL.md", "proposed"),
        ("references/environments.md", "proposed"),
        ("research/source-paths.json", "proposed"),
        ("references/config.md", "live"),
        ("references/plugins.md", "live"),
    ] {
        assert_eq!(
            home.test.read(&format!("{LIVE}/{file}")),
            std::fs::read_to_string(fixture.join(from).join(file)).expect("fixture"),
            "{file}"
        );
    }
    assert!(!home.test.exists(&ssr));
    let state: Value = serde_json::from_str(
        &home
            .test
            .read(&format!("{LIVE}/research/review-state.json")),
    )
    .expect("JSON");
    assert_eq!(
        state,
        json!({ "schema_version": 1, "review_state": "provisional", "reviewed_at": NOW })
    );
    assert_eq!(
        home.test.read(&format!("{LIVE}/.review/REVIEW.md")),
        review_text
    );
    assert_eq!(
        home.test.read(&format!("{LIVE}/.review/manifest.json")),
        manifest_text
    );
    assert!(
        !home.test.exists(PROPOSED),
        "the emptied proposal is removed"
    );
    let journal = home.test.read(&format!("{LIVE}/.review/promotion.jsonl"));
    assert_eq!(journal.lines().count(), 4, "{journal}");
    let files: Vec<String> = home
        .snapshot()
        .into_keys()
        .filter_map(|k| k.strip_prefix(&format!("{LIVE}/")).map(str::to_string))
        .collect();
    assert_eq!(
        files,
        [
            ".review",
            ".review/REVIEW.md",
            ".review/manifest.json",
            ".review/promotion.jsonl",
            "SKILL.md",
            "references",
            "references/config.md",
            "references/environments.md",
            "references/plugins.md",
            "research",
            "research/review-state.json",
            "research/source-paths.json",
        ]
    );
    assert!(!home.snapshot().keys().any(|k| k.starts_with(PROPOSED)));
}

#[test]
fn a_file_left_in_the_proposal_is_listed_not_deleted() {
    let home = Home::new();
    signed_off(&home, "reviewed");
    home.test.write(
        &format!("{PROPOSED}/references/stray.md"),
        "not in the manifest",
    );
    let out = home.apply();
    refused(
        &out,
        "still holds 1 file(s), so it was left in place: references/stray.md",
    );
    assert_eq!(
        home.test.read(&format!("{PROPOSED}/references/stray.md")),
        "not in the manifest"
    );
    assert!(home
        .test
        .exists(&format!("{LIVE}/references/environments.md")));
}

/// Run the whole review loop and tick `state`.
fn signed_off(home: &Home, state: &str) {
    home.review().code(0);
    home.predict();
    home.reply(&[(
        "scope",
        "The proposal adds the environment API, which you did not predict.",
    )]);
    home.review().code(0);
    home.tick(&[state]);
}

#[test]
fn an_interrupted_apply_is_finished_by_a_second_one() {
    let home = Home::new();
    signed_off(&home, "reviewed");
    let journal = home.test.path(&format!("{LIVE}/.review/promotion.jsonl"));
    std::fs::create_dir_all(journal.parent().expect("parent")).expect(".review");
    // The journal is a pipe with room for exactly the first record: apply writes it, renames
    // the first entry, and then waits, blocked, to write the second record. It is killed there.
    let path = std::ffi::CString::new(journal.to_str().expect("UTF-8")).expect("no NUL");
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo");
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&journal)
        .expect("open the pipe to read");
    let mut filler = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&journal)
        .expect("open the pipe to write");
    let size = unsafe { libc::fcntl(filler.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    assert!(size >= 4096, "F_SETPIPE_SZ: {size}");
    let first = "{\"path\":\"SKILL.md\",\"status\":\"modified\",\"action\":\"move\"}\n";
    filler
        .write_all(&vec![b'.'; size as usize - first.len()])
        .expect("fill the pipe");
    drop(filler);

    let staged_skill = home.short(&format!("{PROPOSED}/SKILL.md"));
    let mut child = home
        .test
        .command([
            "run",
            "apply",
            "--input",
            "project_dir=project",
            "--input",
            "slug=vite",
        ])
        .env("STAGEGRAPH_NOW", NOW)
        .spawn();
    wait_for(
        "the first entry to be promoted",
        Duration::from_secs(60),
        || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "apply ended before it was killed ({status}): {}",
                    home.test.read("spawned.stderr")
                );
            }
            home.test.exists(&format!("{LIVE}/SKILL.md"))
                && home.short(&format!("{LIVE}/SKILL.md")) == staged_skill
        },
    );
    child.kill().expect("kill -9");
    child.wait().expect("reap");
    // What apply managed to write: the first record, before its rename, and no other.
    let mut written = Vec::new();
    let mut reader = reader;
    let _ = std::io::Read::read_to_end(&mut reader, &mut written);
    assert!(
        written.ends_with(first.as_bytes()),
        "the pipe holds the first record last"
    );
    drop(reader);

    // Between two entries: the first promoted, the second still staged, nothing else moved.
    assert!(!home.test.exists(&format!("{PROPOSED}/SKILL.md")));
    assert!(home
        .test
        .exists(&format!("{PROPOSED}/references/environments.md")));
    assert!(!home
        .test
        .exists(&format!("{LIVE}/references/environments.md")));
    assert!(home
        .test
        .exists(&format!("{LIVE}/references/legacy-ssr.md")));
    assert!(home.test.exists(REVIEW));

    std::fs::remove_file(&journal).expect("remove the pipe");
    let out = home.apply();
    out.code(0);
    assert!(
        out.stdout.contains(
            "1 added, 2 modified, 1 removed, 2 unchanged (1 already promoted by an earlier apply)."
        ),
        "{}",
        out.stdout
    );
    assert!(!home.test.exists(PROPOSED));
    assert!(home
        .test
        .exists(&format!("{LIVE}/references/environments.md")));
    assert!(!home
        .test
        .exists(&format!("{LIVE}/references/legacy-ssr.md")));
    assert_eq!(home.short(&format!("{LIVE}/SKILL.md")), staged_skill);
    let records = home.test.read(&format!("{LIVE}/.review/promotion.jsonl"));
    assert_eq!(
        records.lines().count(),
        3,
        "the second apply did the other three: {records}"
    );
}

/// Something done to a signed-off proposal to make its promotion unsafe.
type Spoil = Box<dyn Fn(&Home)>;

#[test]
fn a_hostile_manifest_is_refused_with_nothing_written() {
    let outside = |home: &Home| home.test.path("outside").display().to_string();
    let cases: Vec<(&str, Spoil, &str)> = vec![
        (
            "a path climbing out",
            Box::new(|home: &Home| {
                home.test.write(&format!("{SKILLS}/escape.md"), "escaped");
                let mut manifest = home.manifest();
                manifest["entries"][1] = json!({ "path": "../escape.md", "status": "added", "sha_before": null, "sha_after": home.short(&format!("{SKILLS}/escape.md")) });
                home.write_manifest(&manifest);
            }),
            "manifest entry `../escape.md` is not a plain relative path inside the tree",
        ),
        (
            "an absolute path",
            Box::new(move |home: &Home| {
                home.test.write("outside/target.md", "outside");
                let mut manifest = home.manifest();
                manifest["entries"][3]["path"] = json!(format!("{}/target.md", outside(home)));
                home.write_manifest(&manifest);
            }),
            "is not a plain relative path inside the tree",
        ),
        (
            "a symbolic link in the proposal",
            Box::new(|home: &Home| {
                let link = home
                    .test
                    .path(&format!("{PROPOSED}/references/environments.md"));
                let real = std::fs::read(&link).expect("staged file");
                std::fs::remove_file(&link).expect("remove");
                home.test.write(
                    "outside/environments.md",
                    std::str::from_utf8(&real).expect("UTF-8"),
                );
                symlink(home.test.path("outside/environments.md"), &link).expect("symlink");
            }),
            "manifest entry `references/environments.md` goes through a symbolic link",
        ),
        (
            "a linked folder in the proposal",
            Box::new(|home: &Home| {
                let folder = home.test.path(&format!("{PROPOSED}/references"));
                copy_tree(&folder, &home.test.path("outside/references"));
                std::fs::remove_dir_all(&folder).expect("remove");
                symlink(home.test.path("outside/references"), &folder).expect("symlink");
            }),
            "goes through a symbolic link",
        ),
    ];
    for (what, spoil, message) in cases {
        let home = Home::new();
        signed_off(&home, "reviewed");
        spoil(&home);
        let before = home.snapshot();
        let out = home.apply();
        assert_eq!(out.code, Some(1), "{what}: {}", out.stderr);
        assert!(out.stderr.contains(message), "{what}: {}", out.stderr);
        assert_eq!(home.snapshot(), before, "{what}: nothing written");
    }
}

#[test]
fn a_proposal_that_is_a_link_is_not_promoted() {
    let home = Home::new();
    signed_off(&home, "reviewed");
    let proposed = home.test.path(PROPOSED);
    std::fs::rename(&proposed, home.test.path("elsewhere")).expect("move it out");
    symlink(home.test.path("elsewhere"), &proposed).expect("symlink");
    let before = home.snapshot();
    refused(
        &home.apply(),
        "is a symbolic link; a proposal must be a folder of its own",
    );
    assert_eq!(home.snapshot(), before);
}

// ---------------------------------------------------------------------------------------------
// discard.

#[test]
fn discard_asks_declines_without_an_answer_and_removes_on_yes() {
    let home = Home::new();
    home.review().code(0);
    let proposed = home.test.path(PROPOSED).display().to_string();
    let live_before: BTreeMap<String, String> = home
        .snapshot()
        .into_iter()
        .filter(|(k, _)| k.starts_with(&format!("{LIVE}/")))
        .collect();
    let before = home.snapshot();

    // No terminal and no answer: the safe answer, a decline.
    let out = home.run("discard", &["--input", "slug=vite"]);
    out.code(0);
    assert_eq!(
        out.stdout,
        format!("Discard cancelled. {proposed}/ is untouched.\n")
    );
    assert_eq!(home.snapshot(), before);
    let out = home.run(
        "discard",
        &["--input", "slug=vite", "--answer", "confirm=n"],
    );
    out.code(0);
    assert_eq!(home.snapshot(), before);
    // The question is recorded with its answer.
    let record = home.test.last_run();
    let reason = record["stages"]["confirm"].to_string();
    assert!(
        reason.contains(&format!("Remove {proposed}/ (and its .review/ audit trail)? The live vite-context/ is untouched.")),
        "{reason}"
    );

    // Yes: the proposal goes, the live tree stays byte for byte.
    let out = home.run("discard", &["--yes"]);
    out.code(0);
    assert_eq!(
        out.stdout,
        format!("Removed {proposed}/. Live vite-context/ is untouched.\n")
    );
    assert!(!home.test.exists(PROPOSED));
    let live_after: BTreeMap<String, String> = home
        .snapshot()
        .into_iter()
        .filter(|(k, _)| k.starts_with(&format!("{LIVE}/")))
        .collect();
    assert_eq!(live_after, live_before);

    // Nothing left: a clean no-op.
    let out = home.run("discard", &["--input", "slug=vite", "--yes"]);
    out.code(0).stderr_has(&format!(
        "No proposed staging dir at {proposed}/. Nothing to discard."
    ));
    let out = home.run("discard", &["--yes"]);
    out.code(0).stderr_has("No proposed staging dir found under any of ~/.claude/skills/, ~/.claude/local/skills/ or .claude/skills/. Nothing to discard.");
}

/// The write roots of review, apply and discard are the proposal found (and, for apply, its
/// live contextualizer), not the install levels: a proposal that is a symbolic link loses the
/// link on discard, and what it points to, and every other folder beside it, stay as they were.
#[test]
fn discard_of_a_linked_proposal_removes_the_link_only() {
    let home = Home::new();
    home.review().code(0);
    let proposed = home.test.path(PROPOSED);
    std::fs::rename(&proposed, home.test.path("elsewhere")).expect("move it out");
    symlink(home.test.path("elsewhere"), &proposed).expect("symlink");
    let elsewhere_before = home.snapshot();
    let out = home.run("discard", &["--yes"]);
    out.code(0);
    assert!(
        std::fs::symlink_metadata(&proposed).is_err(),
        "the link is gone"
    );
    let after = home.snapshot();
    for (path, hash) in &elsewhere_before {
        if path.starts_with("elsewhere/") || path.starts_with(&format!("{LIVE}/")) {
            assert_eq!(after.get(path), Some(hash), "{path} changed");
        }
    }
}

#[test]
fn a_rejected_proposal_is_discarded_after_apply_refuses_it() {
    let home = Home::new();
    signed_off(&home, "reject");
    let before = home.snapshot();
    refused(&home.apply(), "Sign-off state is 'reject'");
    assert_eq!(home.snapshot(), before);
    home.run(
        "discard",
        &["--input", "slug=vite", "--answer", "confirm=y"],
    )
    .code(0);
    assert!(!home.test.exists(PROPOSED));
    assert!(home
        .test
        .exists(&format!("{LIVE}/references/legacy-ssr.md")));
}

#[test]
fn an_edit_made_while_the_model_thinks_is_not_overwritten() {
    let home = Home::new();
    home.review().code(0);
    home.predict();
    // The model takes its time, and meanwhile the user ticks a box and saves.
    home.test.write(
        "models/sonnet.sh",
        &format!(
            "cat > /dev/null\n\
             sed -i 's/- \\[ \\] reviewed/- [x] reviewed/' '{}'\n\
             echo '{{\"disagreements\": [{{\"kind\": \"scope\", \"text\": \"One.\"}}]}}'\n",
            home.test.path(REVIEW).display()
        ),
    );
    let out = home.review();
    out.code(1).stderr_has("(changed since it was read)");
    let text = home.test.read(REVIEW);
    assert!(
        text.contains("- [x] reviewed\n"),
        "the user's edit stays: {text}"
    );
    assert!(
        text.contains("(Run `stagegraph run review --input slug=vite` again after filling Step 1")
    );
}

// ---------------------------------------------------------------------------------------------
// The whole loop, from refresh.

/// Run git with an identity and no user or system configuration.
fn git(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("git")
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
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn refresh_stages_review_reviews_apply_promotes_and_refresh_then_has_no_work() {
    let home = Home::bare();
    let root = home.test.root();
    git(root, &["init", "-q", "--bare", "upstream.git"]);
    git(
        &home.test.path("upstream.git"),
        &["symbolic-ref", "HEAD", "refs/heads/main"],
    );
    git(root, &["init", "-q", "work"]);
    let url = format!("file://{}", home.test.path("upstream.git").display());
    let push = |message: &str| {
        let work = home.test.path("work");
        git(&work, &["commit", "-q", "--allow-empty", "-m", message]);
        git(&work, &["push", "-q", &url, "HEAD:refs/heads/main"]);
    };
    push("first");
    copy_tree(&fixtures("review").join("live"), &home.test.path(LIVE));
    home.test.write(
        &format!("{LIVE}/research/source-paths.json"),
        &json!({
            "schema_version": 1,
            "sources": [{
                "id": "vite", "kind": "git-managed", "url": url, "status": "confirmed",
                "covers": ["references/config.md", "references/plugins.md"],
                "lifecycle": { "state": "reachable", "last_checked_sha": "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d" },
            }],
        })
        .to_string(),
    );
    home.test
        .write("models/sonnet.reply", "Probed vite; its upstream moved.");
    let refresh = || {
        home.test
            .command([
                "run",
                "refresh",
                "--input",
                "name=vite",
                "--input",
                "project_dir=project",
            ])
            .env("STAGEGRAPH_NOW", NOW)
            .env(
                "SKILL_ENGINE_CACHE_ROOT",
                &home.test.path("cache").display().to_string(),
            )
            .env("CLAUDE_PLUGIN_ROOT", "")
            .output()
    };

    // refresh stages, and its handoff names the commands to type.
    let live_before = home.snapshot();
    let out = refresh();
    out.code(0);
    assert!(
        out.stdout.trim_end().ends_with("Proposal staged at vite-context.proposed/. Run `stagegraph run review --input slug=vite` to inspect, `stagegraph run apply --input slug=vite` to promote, `stagegraph run discard --input slug=vite` to throw away."),
        "{}",
        out.stdout
    );
    assert!(home.test.exists(REVIEW) && home.test.exists(MANIFEST));

    // review: the first pass lists what refresh staged.
    let out = home.review();
    out.code(0);
    assert!(
        out.stdout.starts_with("Added (1):\n  - research/.discover-cache.json\nModified (1):\n  - research/source-paths.json\n\nTo inspect the diff, run:\n"),
        "{}",
        out.stdout
    );
    // apply before the review ran is refused, and changes nothing.
    let staged = home.snapshot();
    refused(
        &home.apply(),
        "The review never ran (Step 1 predictions still contain the ___ blanks).",
    );
    assert_eq!(home.snapshot(), staged);

    // Step 1 filled in refresh's own worksheet, the second pass, a sign-off, apply.
    let text = home.test.read(REVIEW);
    let filled = fill_blanks(&text);
    home.test.write(REVIEW, &filled);
    home.reply(&[(
        "count",
        "You expected the registry alone to change; the proposal also adds the discover cache.",
    )]);
    home.review().code(0);
    let reviewed = home.test.read(REVIEW);
    assert!(
        reviewed.contains("- [ ] accept  [ ] reject   You expected the registry alone to change"),
        "{reviewed}"
    );
    assert_eq!(
        &reviewed[..reviewed.find("## Step 2").expect("Step 2")],
        &filled[..filled.find("## Step 2").expect("Step 2")]
    );
    home.tick(&["reviewed"]);
    let staged_registry = home
        .test
        .read(&format!("{PROPOSED}/research/source-paths.json"));
    home.apply().code(0);
    assert!(!home.test.exists(PROPOSED));
    assert_eq!(
        home.test
            .read(&format!("{LIVE}/research/source-paths.json")),
        staged_registry
    );
    assert!(home
        .test
        .exists(&format!("{LIVE}/research/.discover-cache.json")));
    assert!(home.test.exists(&format!("{LIVE}/.review/REVIEW.md")));
    let unchanged: Vec<String> = live_before
        .keys()
        .filter(|k| k.starts_with(&format!("{LIVE}/references/")) || k.ends_with("SKILL.md"))
        .cloned()
        .collect();
    let after = home.snapshot();
    for key in unchanged {
        assert_eq!(after[&key], live_before[&key], "{key}");
    }

    // With the proposal applied, the discover cache holds what was probed: no work.
    let out = refresh();
    out.code(0).stderr_has("No work to do");
    assert!(!home.test.exists(PROPOSED));

    // A same-day rerun (a hint opens the gate, the clock has not moved): the registry and the
    // cache it would stage are the live ones, so neither is staged, and apply promotes the
    // proposal and removes its folder instead of failing on files left in it.
    let out = home
        .test
        .command([
            "run",
            "refresh",
            "--input",
            "name=vite",
            "--input",
            "project_dir=project",
            "--input",
            "hint=recheck the plugins page",
        ])
        .env("STAGEGRAPH_NOW", NOW)
        .env(
            "SKILL_ENGINE_CACHE_ROOT",
            &home.test.path("cache").display().to_string(),
        )
        .env("CLAUDE_PLUGIN_ROOT", "")
        .output();
    out.code(0);
    assert!(!home
        .test
        .exists(&format!("{PROPOSED}/research/source-paths.json")));
    assert!(!home
        .test
        .exists(&format!("{PROPOSED}/research/.discover-cache.json")));
    let rerun = home.test.read(REVIEW);
    home.test.write(REVIEW, &fill_blanks(&rerun));
    home.reply(&[]);
    home.review().code(0);
    home.tick(&["reviewed"]);
    home.apply().code(0);
    assert!(!home.test.exists(PROPOSED));

    // Upstream moves again: a new proposal, which this time is thrown away.
    push("second");
    refresh().code(0);
    assert!(home.test.exists(PROPOSED));
    let live = home
        .snapshot()
        .into_iter()
        .filter(|(k, _)| k.starts_with(&format!("{LIVE}/")))
        .collect::<BTreeMap<_, _>>();
    home.run("discard", &["--input", "slug=vite"]).code(0);
    assert!(home.test.exists(PROPOSED), "declined without an answer");
    home.run("discard", &["--input", "slug=vite", "--yes"])
        .code(0);
    assert!(!home.test.exists(PROPOSED));
    let after = home
        .snapshot()
        .into_iter()
        .filter(|(k, _)| k.starts_with(&format!("{LIVE}/")))
        .collect::<BTreeMap<_, _>>();
    assert_eq!(after, live);
}

/// Step 1's three blanks filled in, whatever words surround them.
fn fill_blanks(text: &str) -> String {
    let mut out = text.to_string();
    for answer in [
        "Vite configuration and plugins",
        "cover server-side rendering",
        "legacy-ssr",
    ] {
        out = out.replacen("___", answer, 1);
    }
    assert!(!out.contains("___"), "three blanks: {text}");
    out
}
