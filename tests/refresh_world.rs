//! A contextualizer in the shape the original engine writes: a registry citing its upstream by
//! its `https://github.com/...` url (reached here through a git `insteadOf` in HOME's git
//! configuration, so the registry stays as written), a discover cache in the original's
//! `{ last_sha, last_run }` form, and references written before the rules the rewrite check
//! holds: one over 100 lines with no TOC marker, one hard-wrapped, both with a navigational
//! link to a branch (`/tree/stable`) beside their SHA-pinned permalinks. A faithful rewrite
//! (the pins moved to the new commit, nothing else) must be staged, not refused for what the
//! reference already was; a rewrite that introduces a branch pin still is.

use super::*;

const URL: &str = "https://github.com/example-org/example-sdk";
const CLIENT: &str = "references/example-sdk-client.md";
const OVERVIEW: &str = "references/example-sdk-overview.md";

/// `src/client.py` and `src/server.py` written in the upstream's work tree, committed and pushed;
/// the SHA.
fn push(home: &Home, client: &str, server: &str) -> String {
    home.test.write("work/src/client.py", client);
    home.test.write("work/src/server.py", server);
    let work = home.test.path("work");
    git(&work, &["add", "src"]);
    git(&work, &["commit", "-q", "-m", "client"]);
    git(
        &work,
        &["push", "-q", &home.git_url(), "HEAD:refs/heads/main"],
    );
    git(&work, &["rev-parse", "HEAD"]).trim().to_string()
}

/// The legacy contextualizer installed with its pins at `old`, and HOME's git configuration
/// sending the registry's url to the bare upstream.
fn legacy(home: &Home, old: &str) {
    home.install(&fixtures("refresh").join("legacy-context"), LIVE);
    for file in [
        "SKILL.md",
        CLIENT,
        OVERVIEW,
        "research/source-paths.json",
        "research/.discover-cache.json",
    ] {
        let path = format!("{LIVE}/{file}");
        let text = home.test.read(&path).replace("@OLD@", old);
        home.test.write(&path, &text);
    }
    home.test.write(
        ".gitconfig",
        &format!("[url \"{}\"]\n\tinsteadOf = {URL}\n", home.git_url()),
    );
}

fn refresh(home: &Home) -> Output {
    let cache = home.test.path(CACHE);
    home.test
        .command([
            "run",
            "refresh",
            "--input",
            "name=demo",
            "--input",
            "project_dir=project",
        ])
        .env("STAGEGRAPH_NOW", NOW)
        .env("SKILL_ENGINE_CACHE_ROOT", &cache.display().to_string())
        .env("CLAUDE_PLUGIN_ROOT", "")
        .env(
            "GIT_CONFIG_GLOBAL",
            &home.test.path(".gitconfig").display().to_string(),
        )
        .output()
}

/// The model's reply for a reference: the live text with every `old` pin moved to `new`.
fn repinned(home: &Home, reference: &str, old: &str, new: &str) {
    let name = reference
        .trim_start_matches("references/")
        .trim_end_matches(".md");
    let text = home
        .test
        .read(&format!("{LIVE}/{reference}"))
        .replace(old, new);
    home.test
        .write(&format!("models/rewrite.{name}.reply"), &text);
}

#[test]
fn references_older_than_the_rules_are_rewritten_not_refused() {
    let home = Home::bare();
    let old = push(
        &home,
        "def connect():\n    pass\n",
        "def serve():\n    pass\n",
    );
    legacy(&home, &old);

    // At the cached SHA, in the original's cache form: no work.
    let out = refresh(&home);
    out.code(0);
    assert!(out.stdout.contains("No work to do"), "{}", out.stdout);

    // Upstream moves a cited file; the model re-pins both references and changes nothing else.
    let new = push(
        &home,
        "# connect now retries\ndef connect():\n    pass\n",
        "# serve now logs\ndef serve():\n    pass\n",
    );
    repinned(&home, CLIENT, &old, &new);
    repinned(&home, OVERVIEW, &old, &new);
    let out = refresh(&home);
    out.code(0);
    assert!(!out.stdout.contains("Still drifted"), "{}", out.stdout);
    assert!(!out.stdout.contains("No work to do"), "{}", out.stdout);
    for reference in [CLIENT, OVERVIEW] {
        let staged = home.test.read(&format!("{PROPOSED}/{reference}"));
        assert!(
            staged.contains(&format!("/blob/{new}/src/client.py")),
            "{staged}"
        );
        assert!(!staged.contains(&old), "{reference} keeps an old pin");
        // The author's branch link stays as it was.
        assert!(staged.contains(&format!("{URL}/tree/stable")), "{staged}");
    }
    // Each reference is shown the commits of the files it cites, and only their diffs: the
    // client reference cites src/client.py alone, the overview both files.
    let client = home.test.read("models/rewrite.example-sdk-client.prompt");
    assert!(client.contains("+# connect now retries"), "{client}");
    assert!(!client.contains("serve now logs"), "{client}");
    assert!(client.contains(&format!("commit {new}")), "{client}");
    assert!(
        client.contains("-- src/client.py: the commits touching the files the reference cites"),
        "{client}"
    );
    let overview = home.test.read("models/rewrite.example-sdk-overview.prompt");
    assert!(overview.contains("+# serve now logs"), "{overview}");
    assert!(overview.contains("+# connect now retries"), "{overview}");
    // The cache advances, in its own form: the original's fields move with it.
    let cache = home.json(&format!("{PROPOSED}/research/.discover-cache.json"));
    let entry = &cache["sources"]["example-sdk"];
    assert_eq!(entry["sha"], new.as_str(), "{cache:#}");
    assert_eq!(entry["last_sha"], new.as_str(), "{cache:#}");
    assert_eq!(entry["last_run"], &NOW[..10], "{cache:#}");
    let manifest = home.json(&format!("{PROPOSED}/.review/manifest.json"));
    let modified: Vec<&str> = manifest["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["status"] == "modified")
        .filter_map(|e| e["path"].as_str())
        .collect();
    for path in [CLIENT, OVERVIEW, "research/.discover-cache.json"] {
        assert!(
            modified.contains(&path),
            "{path} not modified: {modified:?}"
        );
    }
    // SKILL.md cites the SHA in prose, not as a reference: it is not a rewrite target.
    assert!(!modified.contains(&"SKILL.md"), "{modified:?}");
    std::fs::remove_dir_all(home.test.path(PROPOSED)).expect("discard");

    // A rewrite that introduces a branch pin is still refused, and the drift is kept.
    let text = home
        .test
        .read(&format!("{LIVE}/{OVERVIEW}"))
        .replace(&format!("/blob/{old}/"), "/blob/main/");
    home.test
        .write("models/rewrite.example-sdk-overview.reply", &text);
    let out = refresh(&home);
    out.code(0);
    assert!(
        out.stdout.contains(&format!(
            "Still drifted: example-sdk ({} → {}): {OVERVIEW} was not rewritten (a citation pins `main`, not a commit SHA)",
            &old[..7],
            &new[..7]
        )),
        "{}",
        out.stdout
    );
}

#[test]
fn an_upstream_whose_history_was_rewritten_is_rewritten_from_the_cited_files() {
    let home = Home::bare();
    let old = push(
        &home,
        "def connect():\n    pass\n",
        "def serve():\n    pass\n",
    );
    legacy(&home, &old);
    // The upstream's history is rewritten: the cached commit is on no branch any more.
    let work = home.test.path("work");
    git(&work, &["reset", "-q", "--hard", "HEAD~1"]);
    let new = push_force(&home, "def connect(timeout):\n    pass\n");
    assert_ne!(old, new);
    repinned(&home, CLIENT, &old, &new);
    repinned(&home, OVERVIEW, &old, &new);
    let out = refresh(&home);
    out.code(0);
    assert!(!out.stdout.contains("Still drifted"), "{}", out.stdout);
    // The model was told why, and given the file the reference cites as it is now.
    let prompt = home.test.read("models/rewrite.example-sdk-client.prompt");
    assert!(
        prompt.contains("that commit is no longer in the upstream's history"),
        "{prompt}"
    );
    assert!(prompt.contains("### src/client.py at"), "{prompt}");
    assert!(prompt.contains("def connect(timeout):"), "{prompt}");
    let cache = home.json(&format!("{PROPOSED}/research/.discover-cache.json"));
    assert_eq!(
        cache["sources"]["example-sdk"]["sha"],
        new.as_str(),
        "{cache:#}"
    );
}

/// `src/client.py` alone on a rewritten history, force-pushed; the SHA.
fn push_force(home: &Home, client: &str) -> String {
    home.test.write("work/src/client.py", client);
    let work = home.test.path("work");
    git(&work, &["add", "src"]);
    git(&work, &["commit", "-q", "-m", "client, again"]);
    git(
        &work,
        &["push", "-q", "-f", &home.git_url(), "HEAD:refs/heads/main"],
    );
    git(&work, &["rev-parse", "HEAD"]).trim().to_string()
}
