//! Re-crawls that settle: one that finds the same pages dates the snapshot it kept, so the next
//! refresh does not ask again; one that fetched nothing is a failed crawl and replaces nothing;
//! a page url with a query string stays a plain `source_url` in the snapshot's frontmatter.

use super::*;

fn crawl_diff(home: &Home) -> Value {
    serde_json::from_str(&home.test.stage_output("crawl_diff")).expect("crawl_diff is JSON")
}

fn expired(home: &Home) -> Value {
    let decay: Value = serde_json::from_str(&home.test.stage_output("decay_expiry")).expect("JSON");
    decay["expired"].clone()
}

/// The snapshot's manifest dated `date`: due for a re-crawl again.
fn backdate(home: &Home, snapshot: &str, date: &str) {
    let file = format!("{snapshot}/_crawl-manifest.json");
    let mut manifest = home.json(&file);
    manifest["crawl_date"] = json!(date);
    home.test.write(&file, &manifest.to_string());
}

#[test]
fn a_recrawl_settles_when_nothing_changed_and_a_crawl_that_fetched_nothing_replaces_nothing() {
    let home = Home::new();
    // A page whose url has a query string, listed by the sitemap.
    {
        let web = home.web.clone();
        let mut site = home.site.lock().expect("site");
        site.insert(
            "/api/search?q=connect".into(),
            (
                "200 OK".into(),
                "Content-Type: text/html\r\n".into(),
                "<html><body><h1>Search</h1><p>connect(timeout)</p></body></html>".into(),
            ),
        );
        let urls: String = ["/api/intro", "/api/guide", "/api/search?q=connect"]
            .iter()
            .map(|path| format!("<url><loc>{web}{path}</loc></url>"))
            .collect();
        site.insert(
            "/sitemap.xml".into(),
            (
                "200 OK".into(),
                "Content-Type: application/xml\r\n".into(),
                format!("<?xml version=\"1.0\"?><urlset>{urls}</urlset>"),
            ),
        );
    }
    home.refresh(&["--answer", "recrawl_ask=y"]).code(0);
    assert_eq!(home.record()["status"], "completed", "{:#}", home.record());
    let crawl_id = crawl_diff(&home)["by_source"]["api-docs"]["crawl_id"]
        .as_str()
        .expect("a crawl id")
        .to_string();
    let snapshot = format!("{CACHE}/web-doc/api-docs-{crawl_id}");
    let manifest = home.json(&format!("{snapshot}/_crawl-manifest.json"));
    let search = manifest["pages"]
        .as_array()
        .and_then(|pages| {
            pages
                .iter()
                .find(|p| p["url"].as_str().is_some_and(|u| u.contains('?')))
        })
        .expect("the search page");
    let page = home.test.read(&format!(
        "{snapshot}/{}",
        search["file"].as_str().expect("a file")
    ));
    assert!(
        page.starts_with(&format!(
            "---\nsource_url: {}/api/search?q=connect\n",
            home.web
        )),
        "{page}"
    );
    home.apply();

    // Due again, re-crawled, the same pages: the kept snapshot takes this crawl's date, so the
    // next refresh finds nothing past its decay budget and asks nothing.
    // A reference citing the first snapshot's intro page by an 8-digit hash prefix keeps it.
    home.test.write(
        &format!("{LIVE}/references/api.md"),
        "# api

Start at the intro.
Content-hash: 33333333
",
    );
    backdate(&home, &snapshot, "2026-09-01");
    home.refresh(&["--answer", "recrawl_ask=y"]).code(0);
    assert_eq!(crawl_diff(&home)["by_source"]["api-docs"]["same"], true);
    let plan: Value = serde_json::from_str(&home.test.stage_output("gc_plan")).expect("JSON");
    assert_eq!(plan["eligible"], json!([]), "{plan}");
    let mut kept: Vec<(String, String)> = plan["kept"]
        .as_array()
        .expect("kept")
        .iter()
        .map(|k| {
            (
                k["path"].as_str().unwrap_or_default().to_string(),
                k["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    kept.sort();
    let mut expected = vec![
        (
            home.test
                .path(&format!("{CACHE}/web-doc/api-docs-c1"))
                .display()
                .to_string(),
            "1 content hashes still cited".to_string(),
        ),
        (
            home.test.path(&snapshot).display().to_string(),
            "current or new crawl".to_string(),
        ),
    ];
    expected.sort();
    assert_eq!(kept, expected, "{plan}");
    assert_eq!(
        home.json(&format!("{snapshot}/_crawl-manifest.json"))["crawl_date"],
        NOW
    );
    home.apply();
    home.refresh(&[]).code(0);
    assert_eq!(expired(&home), json!([]));
    assert!(
        home.record()["stages"]["recrawl_ask"]["status"] != "completed",
        "{:#}",
        home.record()["stages"]["recrawl_ask"]
    );
    if home.test.exists(PROPOSED) {
        std::fs::remove_dir_all(home.test.path(PROPOSED)).expect("discard");
    }

    // Due again, and every page answers 500: a failed crawl. No empty snapshot, the registry
    // keeps the real one, and no page is reported removed.
    backdate(&home, &snapshot, "2026-09-01");
    {
        let mut site = home.site.lock().expect("site");
        for path in ["/api/intro", "/api/guide", "/api/search?q=connect"] {
            site.insert(
                path.into(),
                (
                    "500 Internal Server Error".into(),
                    String::new(),
                    String::new(),
                ),
            );
        }
    }
    let out = home.refresh(&["--answer", "recrawl_ask=y"]);
    out.code(0);
    let diff = crawl_diff(&home);
    assert_eq!(diff["by_source"], json!({}), "{diff:#}");
    assert_eq!(diff["failed"][0]["source_id"], "api-docs", "{diff:#}");
    let events = home.test.events(&home.test.newest_run());
    assert!(
        events.iter().any(|e| e.to_string().contains(&format!(
            "no page of {}/api could be fetched (3 selected, ",
            home.web
        ))),
        "{events:#?}"
    );
    let snapshots: Vec<String> = home
        .tree(&format!("{CACHE}/web-doc"))
        .keys()
        .filter(|k| k.ends_with("_crawl-manifest.json"))
        .cloned()
        .collect();
    assert_eq!(snapshots.len(), 2, "{snapshots:?}");
    // The registry is not even staged: nothing in it changed.
    assert!(!home
        .test
        .exists(&format!("{PROPOSED}/research/source-paths.json")));
    let live = home.json(&format!("{LIVE}/research/source-paths.json"));
    assert_eq!(
        source(&live, "api-docs")["lifecycle"]["last_crawl_id"],
        crawl_id.as_str()
    );
    assert!(!out.stdout.contains("pages removed"), "{}", out.stdout);
}

/// Ctrl-C while verify.sh runs (most of a refresh's time, after staging began and before the
/// manifest): the next refresh names the unfinished proposal and how to clear it, and once it is
/// discarded, runs.
#[test]
fn an_interrupted_refresh_leaves_a_proposal_the_next_run_names_as_unfinished() {
    let home = Home::new();
    let marker = home.test.path("verify.started");
    home.test.write(
        &format!("{LIVE}/verify.sh"),
        &format!("touch '{}'\nsleep 30\nexit 0\n", marker.display()),
    );
    let cache = home.test.path(CACHE).display().to_string();
    let mut child = home
        .test
        .command([
            "run",
            "refresh",
            "--input",
            "name=demo",
            "--input",
            "project_dir=project",
        ])
        .env("STAGEGRAPH_NOW", NOW)
        .env("SKILL_ENGINE_CACHE_ROOT", &cache)
        .env("CLAUDE_PLUGIN_ROOT", "")
        .spawn();
    crate::support::wait_for(
        "verify.sh to start",
        std::time::Duration::from_secs(60),
        || marker.exists(),
    );
    let pid = i32::try_from(child.id()).expect("a pid");
    // SAFETY: a signal to the child this test started.
    unsafe {
        libc::kill(pid, libc::SIGINT);
    }
    let code = crate::support::wait_exit(
        &mut child,
        "the interrupted refresh",
        std::time::Duration::from_secs(60),
    );
    assert_eq!(code, Some(130));
    assert!(home.test.exists(PROPOSED));
    assert!(!home
        .test
        .exists(&format!("{PROPOSED}/.review/manifest.json")));

    let out = home.refresh(&[]);
    out.code(0);
    assert_eq!(home.record()["exit"]["stage"], "guard");
    assert!(
        exit_message(&home.record())
            .starts_with("An unfinished proposal is left at demo-context.proposed/"),
        "{}",
        exit_message(&home.record())
    );
    home.run(&[
        "run",
        "discard",
        "--input",
        "slug=demo",
        "--input",
        "project_dir=project",
        "--yes",
    ])
    .code(0);
    assert!(!home.test.exists(PROPOSED));
    std::fs::remove_file(&marker).expect("the marker");
    home.test.write(&format!("{LIVE}/verify.sh"), "exit 0\n");
    home.refresh(&[]).code(0);
    assert_eq!(home.record()["status"], "completed", "{:#}", home.record());
}
