//! The book (`book/src/`) and the README, held to the binary: the tour runs as written, the
//! reference pages are the ones the binary generates, and every relative link and `#anchor`
//! resolves.
//!
//! The tour's conventions: a fenced block whose first line is `# file: PATH` is a file, written
//! (without that line) into the tour's folder; a `console` block holds commands, each on a line
//! starting `$ `, run with `sh -c` in that folder with the built `stagegraph` first on PATH. The
//! lines under a command are what its output (stdout and stderr) must contain, whitespace
//! collapsed; `[exit N]` is the exit code it must give (0 unless said), `[not] TEXT` a text its
//! output must not contain.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{repo_root, Test, BIN};

fn book() -> PathBuf {
    repo_root().join("book/src")
}

/// One step of a tour page.
#[derive(Debug)]
enum Step {
    File {
        path: String,
        text: String,
    },
    Command {
        line: usize,
        command: String,
        exit: i32,
        expect: Vec<String>,
        absent: Vec<String>,
    },
}

/// The fenced blocks of a Markdown text: (the line the block starts at, the info string, the
/// lines inside).
fn fenced_blocks(text: &str) -> Vec<(usize, String, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((number, line)) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let body: Vec<String> = lines
            .by_ref()
            .map(|(_, l)| l)
            .take_while(|l| !l.starts_with("```"))
            .map(str::to_string)
            .collect();
        blocks.push((number + 1, info.trim().to_string(), body));
    }
    blocks
}

fn tour_steps(text: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    for (start, info, body) in fenced_blocks(text) {
        if let Some(path) = body.first().and_then(|l| l.strip_prefix("# file: ")) {
            steps.push(Step::File {
                path: path.trim().to_string(),
                text: body[1..].join("\n") + "\n",
            });
            continue;
        }
        if info != "console" {
            continue;
        }
        for (offset, line) in body.iter().enumerate() {
            if let Some(command) = line.strip_prefix("$ ") {
                steps.push(Step::Command {
                    line: start + 1 + offset,
                    command: command.to_string(),
                    exit: 0,
                    expect: Vec::new(),
                    absent: Vec::new(),
                });
                continue;
            }
            let Some(Step::Command {
                exit,
                expect,
                absent,
                line: at,
                ..
            }) = steps.last_mut()
            else {
                panic!(
                    "tour.md:{}: output before any `$ ` command",
                    start + 1 + offset
                );
            };
            if let Some(code) = line
                .strip_prefix("[exit ")
                .and_then(|rest| rest.strip_suffix(']'))
            {
                *exit = code
                    .parse()
                    .unwrap_or_else(|_| panic!("tour.md:{at}: `{line}` is not an exit code"));
            } else if let Some(text) = line.strip_prefix("[not] ") {
                absent.push(collapse(text));
            } else if !line.trim().is_empty() {
                expect.push(collapse(line));
            }
        }
    }
    steps
}

fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn every_command_of_the_tour_runs_as_written() {
    let page = std::fs::read_to_string(book().join("tour.md")).expect("the tour");
    let steps = tour_steps(&page);
    let commands = steps
        .iter()
        .filter(|s| matches!(s, Step::Command { .. }))
        .count();
    assert!(commands >= 20, "the tour runs its commands: {commands}");
    let t = Test::new();
    let root = t.path("tour");
    std::fs::create_dir_all(&root).expect("the tour's folder");
    let bin_dir = Path::new(BIN).parent().expect("the binary's folder");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for step in &steps {
        match step {
            Step::File { path, text } => {
                let file = root.join(path);
                std::fs::create_dir_all(file.parent().expect("a folder")).expect("mkdir");
                std::fs::write(&file, text).expect("write the tour's file");
            }
            Step::Command {
                line,
                command,
                exit,
                expect,
                absent,
            } => {
                let out = Command::new("sh")
                    .arg("-c")
                    .arg(command)
                    .current_dir(&root)
                    .env("PATH", &path)
                    .env("HOME", t.root())
                    .env("XDG_CONFIG_HOME", t.path("config"))
                    .env("XDG_STATE_HOME", t.path("state-home"))
                    .env("XDG_CACHE_HOME", t.path("cache-home"))
                    .env("NO_COLOR", "1")
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .env_remove("STAGEGRAPH_PATH")
                    .env_remove("STAGEGRAPH_CONFIG")
                    .env_remove("CLAUDE_PROJECT_DIR")
                    .output()
                    .expect("run sh");
                let said = format!(
                    "{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                let flat = collapse(&said);
                assert_eq!(
                    out.status.code(),
                    Some(*exit),
                    "tour.md:{line}: `{command}` exited {:?}, the tour says {exit}:\n{said}",
                    out.status.code()
                );
                for text in expect {
                    assert!(
                        flat.contains(text.as_str()),
                        "tour.md:{line}: `{command}` did not say `{text}`:\n{said}"
                    );
                }
                for text in absent {
                    assert!(
                        !flat.contains(text.as_str()),
                        "tour.md:{line}: `{command}` said `{text}`:\n{said}"
                    );
                }
            }
        }
    }
}

/// The tour reader's conventions hold: a command that does not say what the tour says fails.
#[test]
fn the_tour_reader_finds_files_commands_and_expectations() {
    let page = "```toml\n# file: a.toml\nx = 1\n```\n\n```console\n$ echo hi\nhi\n$ false\n[exit 1]\n[not] hi\n```\n\n```sh\nnot run\n```\n";
    let steps = tour_steps(page);
    assert!(
        matches!(&steps[0], Step::File { path, text } if path == "a.toml" && text == "x = 1\n")
    );
    assert!(
        matches!(&steps[1], Step::Command { command, exit: 0, expect, .. } if command == "echo hi" && expect == &["hi"])
    );
    assert!(
        matches!(&steps[2], Step::Command { command, exit: 1, absent, .. } if command == "false" && absent == &["hi"])
    );
    assert_eq!(steps.len(), 3);
}

/// `book/src/reference/` is what `stagegraph docs` writes: regenerated into a temporary folder
/// and compared page by page. With STAGEGRAPH_BLESS=1 the committed pages are rewritten instead.
#[test]
fn the_reference_pages_are_the_ones_the_binary_generates() {
    let t = Test::new();
    let out = t.run(["docs", "--out", "generated"]);
    out.code(0);
    let generated = t.path("generated");
    let committed = book().join("reference");
    let names = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().to_string())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    };
    let made = names(&generated);
    assert!(
        made.len() >= 5,
        "the generator writes the reference pages: {made:?}"
    );
    if std::env::var_os("STAGEGRAPH_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(&committed).expect("the reference folder");
        for name in names(&committed) {
            if !made.contains(&name) {
                std::fs::remove_file(committed.join(&name)).expect("remove a stale page");
            }
        }
        for name in &made {
            std::fs::copy(generated.join(name), committed.join(name)).expect("bless a page");
        }
        return;
    }
    let mut drift = Vec::new();
    for name in names(&committed) {
        if !made.contains(&name) {
            drift.push(format!(
                "book/src/reference/{name} is not generated any more"
            ));
        }
    }
    for name in &made {
        let new = std::fs::read_to_string(generated.join(name)).expect("a generated page");
        let Ok(old) = std::fs::read_to_string(committed.join(name)) else {
            drift.push(format!("book/src/reference/{name} is missing"));
            continue;
        };
        if old != new {
            let diff = similar::TextDiff::from_lines(&old, &new)
                .unified_diff()
                .header(
                    &format!("book/src/reference/{name}"),
                    &format!("stagegraph docs: {name}"),
                )
                .to_string();
            drift.push(diff);
        }
    }
    assert!(
        drift.is_empty(),
        "the reference pages drifted from the binary; regenerate them with \
         `STAGEGRAPH_BLESS=1 cargo test --test integration docs::the_reference`:\n{}",
        drift.join("\n")
    );
}

/// The ids mdBook gives a page's headings: lowercase, spaces as dashes, letters, digits, `-`
/// and `_` kept, a repeated id suffixed `-1`, `-2`, ...; inline code and links count by their
/// text.
fn heading_ids(text: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fence = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let words = link_texts(&line[hashes..]);
        let base: String = words
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let count = seen.entry(base.clone()).or_insert(0);
        ids.push(match *count {
            0 => base.clone(),
            n => format!("{base}-{n}"),
        });
        *count += 1;
    }
    ids
}

/// A heading's text as mdBook reads it: `[text](target)` becomes `text`.
fn link_texts(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](").and_then(|close| {
            after[close + 2..]
                .find(')')
                .map(|end| (close, close + 2 + end))
        }) {
            Some((close, end)) => {
                out.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Every `[text](target)` of a Markdown text outside code: (line, target).
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut fence = false;
    for (number, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        // Inline code holds no links.
        let prose: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, part)| part)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push((number + 1, after[..end].trim().to_string()));
            rest = &after[end + 1..];
        }
    }
    found
}

/// The problems of every relative link and `#anchor` in `files` (paths relative to `base`).
fn broken_links(base: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut problems = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).expect("a page");
        let shown = file
            .strip_prefix(base)
            .unwrap_or(file)
            .display()
            .to_string();
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().expect("a folder").join(path)
            };
            if !dest.exists() {
                problems.push(format!("{shown}:{line}: `{target}`: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                let page = std::fs::read_to_string(&dest).unwrap_or_default();
                if !heading_ids(&page).iter().any(|id| id == anchor) {
                    problems.push(format!(
                        "{shown}:{line}: `{target}`: no heading with the id `{anchor}` in {}",
                        dest.file_name().unwrap_or_default().to_string_lossy()
                    ));
                }
            }
        }
    }
    problems
}

fn book_pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = walkdir::WalkDir::new(book())
        .into_iter()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "md"))
        .map(|e| e.path().to_path_buf())
        .collect();
    pages.sort();
    pages
}

#[test]
fn every_relative_link_and_anchor_of_the_book_and_the_readme_resolves() {
    let mut files = book_pages();
    files.push(repo_root().join("README.md"));
    let problems = broken_links(&repo_root(), &files);
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
    // Every page is in the summary (mdBook builds no other), and the summary names no page
    // that is not there (the link check above).
    let summary = std::fs::read_to_string(book().join("SUMMARY.md")).expect("the summary");
    let listed: Vec<String> = links(&summary).into_iter().map(|(_, t)| t).collect();
    for page in book_pages() {
        let relative = page
            .strip_prefix(book())
            .expect("inside the book")
            .display()
            .to_string();
        if relative == "SUMMARY.md" {
            continue;
        }
        assert!(
            listed.contains(&relative),
            "book/src/{relative} is not in SUMMARY.md"
        );
    }
}

/// The link check finds a missing page and a missing anchor.
#[test]
fn the_link_check_catches_a_missing_page_and_a_missing_anchor() {
    let t = Test::new();
    t.write(
        "a.md",
        "# A page\n\n## `run` prints\n\n## Twice\n\n## Twice\n",
    );
    t.write(
        "b.md",
        "[ok](a.md) [ok](a.md#run-prints) [ok](a.md#twice-1) [ok](#here) [web](https://x.y/z)\n\n# Here\n\n`[not a link](nowhere.md)`\n\n[gone](c.md) [no anchor](a.md#nope)\n",
    );
    let problems = broken_links(t.root(), &[t.path("b.md")]);
    assert_eq!(
        problems,
        [
            "b.md:7: `c.md`: no such file",
            "b.md:7: `a.md#nope`: no heading with the id `nope` in a.md"
        ]
    );
}

#[test]
fn the_readme_is_short_and_names_the_commands_ci_runs() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("the README");
    let words = readme.split_whitespace().count();
    assert!(
        words < 1500,
        "the README has {words} words; the book holds the rest"
    );
    let ci = std::fs::read_to_string(repo_root().join(".ci/run")).expect(".ci/run");
    assert!(
        readme.contains("bash .ci/run") && readme.contains("bash examples/demo/run.sh"),
        "the README's two commands"
    );
    assert!(
        ci.contains("\"$mdbook\" build book"),
        "CI builds the book the README points at"
    );
}
