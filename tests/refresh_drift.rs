//! Drift is never swallowed: a source's cached SHA advances only once every reference citing it
//! was rewritten against it (or judged current) in the same proposal. Two upstream repositories
//! (bare, over `file://`) with real commits; the `sonnet` alias answers each reference from
//! `models/rewrite.<name>.reply` and logs which reference it was asked for.
//! `REFRESH_TEST_VERIFY_SH=<verify.sh>` runs every proposal through that verify.sh as well.

use super::*;

/// A second upstream repository `<name>.git` with a work tree `work-<name>`; its `file://` url.
fn upstream(home: &Home, name: &str) -> String {
    git(
        home.test.root(),
        &["init", "-q", "--bare", &format!("{name}.git")],
    );
    git(
        &home.test.path(&format!("{name}.git")),
        &["symbolic-ref", "HEAD", "refs/heads/main"],
    );
    git(home.test.root(), &["init", "-q", &format!("work-{name}")]);
    format!(
        "file://{}",
        home.test.path(&format!("{name}.git")).display()
    )
}

/// `file` written with `text` in the work tree `work`, committed and pushed to `url`; the SHA.
fn commit(home: &Home, work: &str, url: &str, file: &str, text: &str) -> String {
    home.test.write(&format!("{work}/{file}"), text);
    let dir = home.test.path(work);
    git(&dir, &["add", file]);
    git(&dir, &["commit", "-q", "-m", &format!("{file}: {text}")]);
    git(&dir, &["push", "-q", url, "HEAD:refs/heads/main"]);
    git(&dir, &["rev-parse", "HEAD"]).trim().to_string()
}

/// The demo contextualizer without verify.sh or its reference, two git sources, and the cache
/// recording `a` and `b` as their SHAs.
fn two_sources(home: &Home, b_url: &str, a: &str, b: &str) {
    home.install(&fixtures("refresh").join("demo-context"), LIVE);
    std::fs::remove_file(home.test.path(LIVE).join("verify.sh")).expect("no verify.sh");
    std::fs::remove_file(home.test.path(LIVE).join("references/lib.md")).expect("no lib.md");
    // A contextualizer's own verify.sh, when one is named (the skill-engine's template, say):
    // every proposal of these tests is then verified against it on the merged tree.
    if let Ok(verify) = std::env::var("REFRESH_TEST_VERIFY_SH") {
        std::fs::copy(verify, home.test.path(LIVE).join("verify.sh")).expect("verify.sh");
    }
    home.write_registry(&json!({
        "schema_version": 1,
        "sources": [
            { "id": "lib-a", "kind": "git-managed", "url": home.git_url(), "status": "confirmed", "lifecycle": { "state": "reachable" } },
            { "id": "lib-b", "kind": "git-managed", "url": b_url, "status": "confirmed", "lifecycle": { "state": "reachable" } },
        ]
    }));
    home.test.write(
        &format!("{LIVE}/research/.discover-cache.json"),
        &json!({ "schema_version": 1, "sources": {
            "lib-a": { "sha": a, "ran_at": "2026-10-01" },
            "lib-b": { "sha": b, "ran_at": "2026-10-01" },
        } })
        .to_string(),
    );
}

/// The navigator's catalog: one row per reference, as a contextualizer's verify.sh requires.
fn catalog(home: &Home) {
    let rows: String = home
        .tree(&format!("{LIVE}/references"))
        .keys()
        .map(|name| format!("| [{name}](references/{name}) | {name} |\n"))
        .collect();
    home.test.write(
        &format!("{LIVE}/SKILL.md"),
        &format!("---\nname: demo-context\ndescription: Navigator.\n---\n\n# demo\n\n| reference | covers |\n|---|---|\n{rows}"),
    );
}

fn settle(home: &Home) -> Value {
    serde_json::from_str(&home.test.stage_output("settle")).expect("settle is JSON")
}

/// The references the model was asked to rewrite since the last call, in order; the log cleared.
fn rewrite_calls(home: &Home) -> Vec<String> {
    let calls = home
        .test
        .read_opt("models/rewrite.calls")
        .unwrap_or_default();
    let _ = std::fs::remove_file(home.test.path("models/rewrite.calls"));
    let mut calls: Vec<String> = calls.lines().map(str::to_string).collect();
    calls.sort();
    calls
}

/// How many live references cite a SHA of `stale`: the references left pinned to an old commit.
fn pinned_to(home: &Home, stale: &[&str]) -> usize {
    home.tree(&format!("{LIVE}/references"))
        .keys()
        .filter(|name| {
            let text = home.test.read(&format!("{LIVE}/references/{name}"));
            stale
                .iter()
                .any(|sha| text.contains(&format!("/blob/{sha}/")))
        })
        .count()
}

#[test]
fn drift_survives_a_lifecycle_only_run_a_refused_rewrite_and_two_sources_in_one_reference() {
    let home = Home::bare();
    let b_url = upstream(&home, "lib-b");
    let a_url = home.git_url();
    let a0 = commit(&home, "work", &a_url, "API.md", "connect()");
    let b0 = commit(&home, "work-lib-b", &b_url, "B.md", "b speaks text");
    two_sources(&home, &b_url, &a0, &b0);
    let a_ref = |sha: &str, what: &str| {
        format!("# a\n\nlib-a: {what}, see [API.md]({a_url}/blob/{sha}/API.md).\n")
    };
    let both_ref = |a: &str, b: &str, what: &str| {
        format!(
            "# both\n\nlib-a and lib-b together: {what}.\n([API.md]({a_url}/blob/{a}/API.md))\nSource: {b_url}/blob/{b}/B.md\n"
        )
    };
    home.test
        .write(&format!("{LIVE}/references/a.md"), &a_ref(&a0, "connect()"));
    home.test.write(
        &format!("{LIVE}/references/both.md"),
        &both_ref(&a0, &b0, "connect() and text"),
    );
    catalog(&home);
    let out = home.refresh(&[]);
    assert_exited(&home, &out, "gate", "No work to do");

    let a1 = commit(&home, "work", &a_url, "API.md", "connect(timeout)");
    let b1 = commit(&home, "work-lib-b", &b_url, "B.md", "b speaks JSON");

    // A lifecycle-only run stages the registry and leaves drift state alone: no rewrite, the
    // cache not staged, both sources reported still drifted.
    let out = home.refresh(&["--input", "lifecycle_only=true"]);
    out.code(0);
    assert_eq!(home.record()["status"], "completed", "{:#}", home.record());
    assert!(rewrite_calls(&home).is_empty());
    assert_eq!(settle(&home)["held_ids"], json!(["lib-a", "lib-b"]));
    assert!(!home
        .test
        .exists(&format!("{PROPOSED}/research/.discover-cache.json")));
    assert!(
        out.stdout.contains(&format!(
            "Still drifted: lib-a ({} → {}): this lifecycle-only run does not touch drift state.",
            &a0[..7],
            &a1[..7]
        )),
        "{}",
        out.stdout
    );
    home.apply();
    assert_eq!(pinned_to(&home, &[&a0, &b0]), 2);

    // The full run: both.md is rewritten once, against both changes; a.md's rewrite is refused
    // (hard-wrapped), so lib-a keeps its old SHA while lib-b, every citer rewritten, advances.
    let both_new = both_ref(&a1, &b1, "connect(timeout) and JSON");
    home.test.write("models/rewrite.both.reply", &both_new);
    home.test.write(
        "models/rewrite.a.reply",
        "# a\n\nlib-a: connect now takes\na timeout.\n",
    );
    let out = home.refresh(&[]);
    out.code(0);
    assert_eq!(home.record()["status"], "completed", "{:#}", home.record());
    assert_eq!(rewrite_calls(&home), ["a", "both"]);
    let prompt = home.test.read("models/rewrite.both.prompt");
    for seen in [
        format!("commit {a0} to commit {a1}"),
        format!("commit {b0} to commit {b1}"),
        "+connect(timeout)".to_string(),
        "+b speaks JSON".to_string(),
    ] {
        assert!(
            prompt.contains(&seen),
            "the prompt lacks {seen:?}:\n{prompt}"
        );
    }
    // The citation lines under the paragraph are not a hard wrap.
    assert_eq!(
        home.test.read(&format!("{PROPOSED}/references/both.md")),
        both_new
    );
    assert!(!home.test.exists(&format!("{PROPOSED}/references/a.md")));
    let cache = home.json(&format!("{PROPOSED}/research/.discover-cache.json"));
    assert_eq!(cache["sources"]["lib-a"]["sha"], a0.as_str());
    assert_eq!(cache["sources"]["lib-b"]["sha"], b1.as_str());
    assert!(
        out.stdout.contains(&format!(
            "Still drifted: lib-a ({} → {}): references/a.md was not rewritten (it is hard-wrapped (line 4 continues a paragraph))",
            &a0[..7],
            &a1[..7]
        )),
        "{}",
        out.stdout
    );
    home.apply();
    assert_eq!(pinned_to(&home, &[&a0, &b0]), 1);

    // The next run is not "no work": lib-a is still drifted. a.md is rewritten; both.md, already
    // rewritten, is judged current (the model gives it back unchanged) and is not staged.
    home.test
        .write("models/rewrite.a.reply", &a_ref(&a1, "connect(timeout)"));
    let out = home.refresh(&[]);
    out.code(0);
    assert_eq!(home.record()["status"], "completed");
    assert!(
        home.test.stage_output("gate").contains("lib-a changed ("),
        "{}",
        home.test.stage_output("gate")
    );
    assert_eq!(rewrite_calls(&home), ["a", "both"]);
    assert!(!home.test.exists(&format!("{PROPOSED}/references/both.md")));
    let checked: Value =
        serde_json::from_str(&home.test.stage_output("rewrite_check")).expect("JSON");
    assert_eq!(checked["current"][0]["path"], "references/both.md");
    let cache = home.json(&format!("{PROPOSED}/research/.discover-cache.json"));
    assert_eq!(cache["sources"]["lib-a"]["sha"], a1.as_str());
    assert!(!out.stdout.contains("Still drifted"), "{}", out.stdout);
    home.apply();
    assert_eq!(pinned_to(&home, &[&a0, &b0]), 0);

    // Now, and only now, nothing is left to do.
    let out = home.refresh(&[]);
    assert_exited(&home, &out, "gate", "No work to do");
    assert!(rewrite_calls(&home).is_empty());
}

#[test]
fn a_hint_naming_a_reference_makes_it_a_rewrite_target_though_no_sha_moved() {
    let home = Home::bare();
    let b_url = upstream(&home, "lib-b");
    let a_url = home.git_url();
    let a0 = commit(
        &home,
        "work",
        &a_url,
        "README.md",
        "Use connect(timeout); connect() is gone.",
    );
    let b0 = commit(&home, "work-lib-b", &b_url, "B.md", "b speaks text");
    two_sources(&home, &b_url, &a0, &b0);
    let stale = format!("# foo\n\nCall connect(), per [README]({a_url}/blob/{a0}/README.md).\n");
    home.test
        .write(&format!("{LIVE}/references/foo.md"), &stale);
    home.test.write(
        &format!("{LIVE}/references/bar.md"),
        &format!("# bar\n\nlib-a is a library ([README]({a_url}/blob/{a0}/README.md)).\n"),
    );
    catalog(&home);
    let out = home.refresh(&[]);
    assert_exited(&home, &out, "gate", "No work to do");

    // The seed's own example: the SHA matches, the hint names the reference.
    let fixed =
        format!("# foo\n\nCall connect(timeout), per [README]({a_url}/blob/{a0}/README.md).\n");
    home.test.write("models/rewrite.foo.reply", &fixed);
    let out = home.refresh(&[
        "--input",
        "hint=I think packages/foo's reference is stale even though SHA matches; recheck against the README",
    ]);
    out.code(0);
    assert_eq!(home.record()["status"], "completed", "{:#}", home.record());
    assert_eq!(rewrite_calls(&home), ["foo"]);
    let prompt = home.test.read("models/rewrite.foo.prompt");
    for seen in [
        "`lib-a` (git-managed",
        "it did not move",
        "Use connect(timeout); connect() is gone.",
        "recheck against the README",
    ] {
        assert!(
            prompt.contains(seen),
            "the prompt lacks {seen:?}:\n{prompt}"
        );
    }
    assert_eq!(
        home.test.read(&format!("{PROPOSED}/references/foo.md")),
        fixed
    );
    assert!(!home.test.exists(&format!("{PROPOSED}/references/bar.md")));
    // Nothing moved, so nothing advanced: the cache still records a0.
    let cache = home.json(&format!("{PROPOSED}/research/.discover-cache.json"));
    assert_eq!(cache["sources"]["lib-a"]["sha"], a0.as_str());
    assert_eq!(settle(&home)["advanced"], json!([]));
    std::fs::remove_dir_all(home.test.path(PROPOSED)).expect("discard");

    // A hint naming the source re-checks every reference citing it, and none citing another.
    home.test
        .write("models/rewrite.bar.reply", "# bar\n\nlib-a is a library.\n");
    home.refresh(&["--input", "hint=lib-a changed its API docs"])
        .code(0);
    assert_eq!(home.record()["status"], "completed");
    assert_eq!(rewrite_calls(&home), ["bar", "foo"]);
}

#[test]
fn an_archived_source_is_swept_as_removed() {
    let home = Home::bare();
    let b_url = upstream(&home, "lib-b");
    let a_url = home.git_url();
    let a0 = commit(&home, "work", &a_url, "API.md", "connect()");
    let b0 = commit(&home, "work-lib-b", &b_url, "B.md", "b speaks text");
    two_sources(&home, &b_url, &a0, &b0);
    let mut registry = home.json(&format!("{LIVE}/research/source-paths.json"));
    registry["sources"][1]["archived"] = json!(true);
    home.write_registry(&registry);
    home.test.write(
        &format!("{LIVE}/references/old.md"),
        &format!("# old\n\nThe text format of [B.md]({b_url}/blob/{b0}/B.md).\n"),
    );
    catalog(&home);
    let out = home.refresh(&["--input", "hint=look again"]);
    out.code(0);
    assert!(
        out.stdout.contains(
            "Lifecycle sweep (dry-run, nothing rewritten): lib-b is archived (treated as removed); cited at references/old.md:3."
        ),
        "{}",
        out.stdout
    );
}

#[test]
fn a_deleted_branch_is_diagnosed_in_the_printed_summary() {
    let home = Home::bare();
    let b_url = upstream(&home, "lib-b");
    let a_url = home.git_url();
    let a0 = commit(&home, "work", &a_url, "API.md", "connect()");
    let b0 = commit(&home, "work-lib-b", &b_url, "B.md", "b speaks text");
    two_sources(&home, &b_url, &a0, &b0);
    let mut registry = home.json(&format!("{LIVE}/research/source-paths.json"));
    registry["sources"][1]["branch"] = json!("release-1");
    home.write_registry(&registry);
    let out = home.refresh(&[]);
    out.code(0);
    assert!(
        out.stdout
            .contains("Source lib-b: branch release-1 not found upstream"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("lifecycle.state is unknown and the source is skipped this run"),
        "{}",
        out.stdout
    );
    let staged = home.json(&format!("{PROPOSED}/research/source-paths.json"));
    assert_eq!(source(&staged, "lib-b")["lifecycle"]["state"], "unknown");
}
