//! Binaries without a build: the release workflow (`.github/workflows/release.yml`), the
//! `cargo binstall` metadata in Cargo.toml and `install.sh`, which must agree on the archives'
//! names and layout. The workflow's Package step runs here as on a runner, on the binary this
//! build made; install.sh installs that archive from a file server on 127.0.0.1.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, OnceLock};

use yaml_rust2::{Yaml, YamlLoader};

use crate::support::{actionlint, make_executable, repo_root, skip, Test, BIN};

/// The targets the releases cover.
pub(crate) const TARGETS: [&str; 5] = [
    "x86_64-unknown-linux-gnu",
    "aarch64-unknown-linux-gnu",
    "x86_64-unknown-linux-musl",
    "x86_64-apple-darwin",
    "aarch64-apple-darwin",
];

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn workflow() -> Yaml {
    let text = std::fs::read_to_string(repo_root().join(".github/workflows/release.yml"))
        .expect("release.yml");
    YamlLoader::load_from_str(&text)
        .expect("release.yml is YAML")
        .remove(0)
}

/// The `run` script of the build job's step with this name.
fn build_step(name: &str) -> String {
    workflow()["jobs"]["build"]["steps"]
        .as_vec()
        .expect("the build job's steps")
        .iter()
        .find(|step| step["name"].as_str() == Some(name))
        .and_then(|step| step["run"].as_str())
        .unwrap_or_else(|| panic!("no build step named {name}"))
        .to_string()
}

/// Cargo.toml's `[package]`.
fn package() -> toml::Table {
    let text = std::fs::read_to_string(repo_root().join("Cargo.toml")).expect("Cargo.toml");
    let mut manifest: toml::Table = toml::from_str(&text).expect("Cargo.toml is TOML");
    match manifest.remove("package") {
        Some(toml::Value::Table(package)) => package,
        _ => panic!("Cargo.toml has no [package]"),
    }
}

/// Expand a `cargo binstall` template the way binstall does, for a target; a placeholder it
/// does not know fails the test.
fn expand(template: &str, target: &str) -> String {
    let package = package();
    let text = |key: &str| package[key].as_str().expect(key).to_string();
    let placeholder = regex::Regex::new(r"\{\s*([a-z-]+)\s*\}").expect("a regex");
    placeholder
        .replace_all(template, |found: &regex::Captures| match &found[1] {
            "name" | "bin" => text("name"),
            "version" => text("version"),
            "repo" => text("repository"),
            "target" => target.to_string(),
            "binary-ext" => String::new(),
            "archive-format" | "archive-suffix" => ".tar.gz".into(),
            other => panic!("a placeholder binstall is not given here: {other}"),
        })
        .into_owned()
}

/// Run the workflow's Package step in `root` for a target, the target's release binary being
/// `binary`; returns the files it left in `dist/`, sorted.
fn run_package_step(root: &Path, target: &str, binary: &Path) -> Vec<String> {
    let release = root.join("target").join(target).join("release");
    std::fs::create_dir_all(&release).expect("the release folder");
    std::fs::copy(binary, release.join("stagegraph")).expect("copy the binary");
    std::fs::copy(repo_root().join("README.md"), root.join("README.md")).expect("README.md");
    let script = root.join("package.sh");
    std::fs::write(&script, build_step("Package")).expect("write the step");
    let output = root.join("github-output");
    let out = Command::new("bash")
        .args(["--noprofile", "--norc", "-eo", "pipefail"])
        .arg(&script)
        .current_dir(root)
        .env("TARGET", target)
        .env("VERSION", VERSION)
        .env("GITHUB_OUTPUT", &output)
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "the Package step failed for {target}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = std::fs::read_to_string(&output).expect("the step's outputs");
    assert_eq!(
        said.trim(),
        format!("archive=dist/stagegraph-{VERSION}-{target}.tar.gz")
    );
    let mut files: Vec<String> = std::fs::read_dir(root.join("dist"))
        .expect("dist/")
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    files
}

/// What a gzip tar archive holds, as `tar -tzf` lists it.
fn listing(archive: &Path) -> BTreeSet<String> {
    let out = Command::new("tar")
        .arg("-tzf")
        .arg(archive)
        .output()
        .expect("run tar");
    assert!(
        out.status.success(),
        "{} is not a gzip tar archive",
        archive.display()
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// This machine's release target, if the releases cover it.
fn host_target() -> Option<&'static str> {
    let musl = cfg!(target_env = "musl");
    match (std::env::consts::OS, std::env::consts::ARCH, musl) {
        ("linux", "x86_64", false) => Some("x86_64-unknown-linux-gnu"),
        ("linux", "x86_64", true) => Some("x86_64-unknown-linux-musl"),
        ("linux", "aarch64", false) => Some("aarch64-unknown-linux-gnu"),
        ("macos", "x86_64", _) => Some("x86_64-apple-darwin"),
        ("macos", "aarch64", _) => Some("aarch64-apple-darwin"),
        _ => None,
    }
}

/// The folder holding this machine's archive and its `.sha256`, packaged once by the workflow's
/// Package step from the binary under test (in `<target>/release-test`); `None` (after a visible skip) where no release
/// covers this machine.
pub(crate) fn host_release() -> Option<(&'static Path, &'static str)> {
    static RELEASE: OnceLock<Option<(PathBuf, &'static str)>> = OnceLock::new();
    let made = RELEASE.get_or_init(|| {
        let target = host_target()?;
        // In the target folder (`<target>/<profile>/stagegraph` is BIN), made afresh by each
        // test process: a static is never dropped, so a temporary folder would be left behind.
        let dir = Path::new(BIN)
            .parent()
            .and_then(Path::parent)
            .expect("the target folder")
            .join("release-test");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a folder for the release");
        run_package_step(&dir, target, Path::new(BIN));
        Some((dir.join("dist"), target))
    });
    if let Some((dist, target)) = made {
        return Some((dist.as_path(), target));
    }
    skip(&format!(
        "no release covers this machine ({} {})",
        std::env::consts::OS,
        std::env::consts::ARCH
    ));
    None
}

/// A static file server on 127.0.0.1 over a folder: GET of `/NAME` answers the file `NAME`,
/// anything else 404. It records the paths asked for.
pub(crate) struct FileServer {
    pub(crate) url: String,
    asked: Arc<Mutex<Vec<String>>>,
}

impl FileServer {
    pub(crate) fn start(root: &Path) -> FileServer {
        // Bound before the address is handed out: ready at once.
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        let asked = Arc::new(Mutex::new(Vec::new()));
        let (root, seen) = (root.to_path_buf(), Arc::clone(&asked));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let (root, seen) = (root.clone(), Arc::clone(&seen));
                std::thread::spawn(move || serve_file(stream, &root, &seen));
            }
        });
        FileServer { url, asked }
    }

    /// The paths asked for so far.
    pub(crate) fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

fn serve_file(stream: TcpStream, root: &Path, asked: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
    let mut writer = stream;
    loop {
        let mut request = String::new();
        if reader.read_line(&mut request).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header.trim_end().is_empty() {
                break;
            }
        }
        let mut parts = request.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        asked.lock().unwrap().push(path.to_string());
        let name = path.trim_start_matches('/');
        let file = (method == "GET" && !name.is_empty() && !name.contains(['/', '\\']))
            .then(|| std::fs::read(root.join(name)).ok())
            .flatten();
        let (status, body) = match file {
            Some(bytes) => ("200 OK", bytes),
            None => ("404 Not Found", b"not found\n".to_vec()),
        };
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/octet-stream\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        if writer.write_all(head.as_bytes()).is_err()
            || writer.write_all(&body).is_err()
            || writer.flush().is_err()
        {
            return;
        }
    }
}

/// `sh install.sh ARGS` with HOME in the test's folder, the given PATH, and the mirror at
/// `base`.
fn install(test: &Test, base: &str, path: &str, args: &[&str]) -> Output {
    Command::new("sh")
        .arg(repo_root().join("install.sh"))
        .args(args)
        .current_dir(test.root())
        .env("HOME", test.root())
        .env("PATH", path)
        .env("STAGEGRAPH_INSTALL_BASE_URL", base)
        .env_remove("STAGEGRAPH_VERSION")
        .env_remove("STAGEGRAPH_INSTALL_DIR")
        .output()
        .expect("run sh")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn system_path() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
}

/// `stagegraph --version` of an installed binary.
fn version_of(binary: &Path) -> String {
    let out = Command::new(binary)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
    assert!(out.status.success());
    text(&out.stdout).trim().to_string()
}

#[test]
fn release_workflow_passes_actionlint_and_pins_its_actions() {
    let file = repo_root().join(".github/workflows/release.yml");
    let text = std::fs::read_to_string(&file).expect("release.yml");
    // Every action is pinned to a commit, its version beside it.
    let uses = regex::Regex::new(r"(?m)^\s*-?\s*uses:\s*(\S+)(.*)$").expect("a regex");
    let mut pinned = 0;
    for found in uses.captures_iter(&text) {
        let (action, rest) = (&found[1], &found[2]);
        let (_, reference) = action.split_once('@').expect("an action with a version");
        assert!(
            reference.len() == 40 && reference.chars().all(|c| c.is_ascii_hexdigit()),
            "{action} is not pinned to a commit"
        );
        assert!(rest.contains("# v"), "{action} names no version: {rest}");
        pinned += 1;
    }
    assert!(pinned >= 4, "{pinned} actions used");
    let workflow = workflow();
    let tags = workflow["on"]["push"]["tags"]
        .as_vec()
        .expect("on a tag push");
    assert_eq!(tags[0].as_str(), Some("v[0-9]+.[0-9]+.[0-9]+*"));
    let targets: Vec<&str> = workflow["jobs"]["build"]["strategy"]["matrix"]["include"]
        .as_vec()
        .expect("the build matrix")
        .iter()
        .map(|entry| entry["target"].as_str().expect("a target"))
        .collect();
    assert_eq!(targets, TARGETS);
    assert_eq!(
        workflow["jobs"]["publish"]["permissions"]["contents"].as_str(),
        Some("write")
    );
    assert_eq!(workflow["permissions"]["contents"].as_str(), Some("read"));
    let Some(problems) = actionlint(&[&file]) else {
        return;
    };
    assert!(problems.is_empty(), "{problems:#?}");
}

/// binstall's templates, expanded for each target, name exactly the archive the Package step
/// makes and the binary inside it; install.sh's defaults are Cargo.toml's.
#[test]
fn binstall_metadata_and_install_script_name_the_workflows_archives() {
    let package = package();
    let binstall = &package["metadata"]["binstall"];
    assert_eq!(binstall["pkg-fmt"].as_str(), Some("tgz"));
    let pkg_url = binstall["pkg-url"].as_str().expect("pkg-url");
    let bin_dir = binstall["bin-dir"].as_str().expect("bin-dir");
    let repository = package["repository"].as_str().expect("a repository");
    let test = Test::new();
    // A stand-in binary: the names and the layout are under test, not the program.
    let binary = test.path("stagegraph.bin");
    std::fs::write(&binary, "#!/bin/sh\necho stagegraph\n").expect("write");
    for target in TARGETS {
        let root = test.path(target);
        std::fs::create_dir_all(&root).expect("a folder");
        let files = run_package_step(&root, target, &binary);
        let url = expand(pkg_url, target);
        let archive = url.rsplit('/').next().expect("a file name").to_string();
        assert_eq!(
            url,
            format!("{repository}/releases/download/v{VERSION}/{archive}")
        );
        assert_eq!(files, [archive.clone(), format!("{archive}.sha256")]);
        let inside = listing(&root.join("dist").join(&archive));
        let bin = expand(bin_dir, target);
        assert!(inside.contains(&bin), "{bin} not in {inside:?}");
        let folder = format!("stagegraph-{VERSION}-{target}/");
        assert!(
            inside.iter().all(|entry| entry.starts_with(&folder)),
            "{inside:?}"
        );
        // The .sha256 is `sha256sum --check`'s format.
        let check = Command::new("sha256sum")
            .args(["--check", "--strict", &format!("{archive}.sha256")])
            .current_dir(root.join("dist"))
            .output();
        match check {
            Ok(out) => assert!(out.status.success(), "{}", text(&out.stderr)),
            Err(_) => skip("sha256sum is not installed: the .sha256 files are not checked"),
        }
    }
    let script = std::fs::read_to_string(repo_root().join("install.sh")).expect("install.sh");
    assert!(
        script.contains(&format!("version=\"${{STAGEGRAPH_VERSION:-{VERSION}}}\"")),
        "install.sh's default version is not Cargo.toml's {VERSION}"
    );
    assert!(
        script.contains(&format!("repository=\"{repository}\"")),
        "install.sh's repository is not Cargo.toml's {repository}"
    );
    for target in TARGETS {
        assert!(script.contains(target), "install.sh does not know {target}");
    }
}

/// From the archive, through a mirror on 127.0.0.1, to a `stagegraph` that runs: into
/// `--to DIR` with the PATH line to add, into ~/.local/bin by default, with no PATH line when
/// the folder is on PATH already.
#[test]
fn install_script_installs_the_release_archive_and_says_how_to_reach_it() {
    let Some((dist, target)) = host_release() else {
        return;
    };
    let server = FileServer::start(dist);
    let test = Test::new();
    let to = test.path("tools/bin");
    let to_text = to.display().to_string();
    let out = install(&test, &server.url, &system_path(), &["--to", &to_text]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        version_of(&to.join("stagegraph")),
        format!("stagegraph {VERSION}")
    );
    assert!(
        stderr.contains(&format!(
            "installed stagegraph {VERSION} to {to_text}/stagegraph"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("export PATH=\"{to_text}:$PATH\"")),
        "{stderr}"
    );
    let archive = format!("stagegraph-{VERSION}-{target}.tar.gz");
    assert_eq!(
        server.asked(),
        [format!("/{archive}"), format!("/{archive}.sha256")]
    );
    // No leftovers beside the binary.
    let left: Vec<_> = std::fs::read_dir(&to)
        .expect("the folder")
        .flatten()
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");

    // By default into ~/.local/bin; a folder on PATH gets no PATH line.
    let local = test.path(".local/bin");
    let on_path = format!("{}:{}", local.display(), system_path());
    let out = install(&test, &server.url, &on_path, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        version_of(&local.join("stagegraph")),
        format!("stagegraph {VERSION}")
    );
    assert!(!stderr.contains("export PATH"), "{stderr}");
}

/// A folder of links to every program on PATH but those named: a machine without them.
fn path_without(test: &Test, missing: &[&str]) -> String {
    let bin = test.path("limited-bin");
    std::fs::create_dir_all(&bin).expect("a folder");
    for dir in std::env::split_paths(&system_path()) {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let link = bin.join(&name);
            if missing.iter().any(|m| name == **m) || link.exists() {
                continue;
            }
            let _ = std::os::unix::fs::symlink(entry.path(), link);
        }
    }
    bin.display().to_string()
}

#[test]
fn install_script_uses_wget_and_shasum_where_curl_and_sha256sum_are_missing() {
    if which::which("wget").is_err() || which::which("shasum").is_err() {
        skip("wget or shasum is not installed");
        return;
    }
    let Some((dist, _)) = host_release() else {
        return;
    };
    let server = FileServer::start(dist);
    let test = Test::new();
    let path = path_without(&test, &["curl", "sha256sum"]);
    let to = test.path("bin");
    let out = install(
        &test,
        &server.url,
        &path,
        &["--to", &to.display().to_string()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        version_of(&to.join("stagegraph")),
        format!("stagegraph {VERSION}")
    );
    assert_eq!(server.asked().len(), 2);
}

/// An archive that does not match its checksum is refused: exit 1, the two sums named, and
/// nothing installed, an installed binary left as it was.
#[test]
fn install_script_refuses_an_archive_whose_checksum_does_not_match() {
    let Some((dist, target)) = host_release() else {
        return;
    };
    let test = Test::new();
    let mirror = test.path("mirror");
    std::fs::create_dir_all(&mirror).expect("a folder");
    let archive = format!("stagegraph-{VERSION}-{target}.tar.gz");
    let mut bytes = std::fs::read(dist.join(&archive)).expect("the archive");
    bytes.push(0);
    std::fs::write(mirror.join(&archive), bytes).expect("write");
    let sha = format!("{archive}.sha256");
    std::fs::copy(dist.join(&sha), mirror.join(&sha)).expect("copy");
    let server = FileServer::start(&mirror);
    let to = test.path("bin");
    std::fs::create_dir_all(&to).expect("a folder");
    std::fs::write(to.join("stagegraph"), "#!/bin/sh\necho the old one\n").expect("write");
    make_executable(&to.join("stagegraph"));
    let out = install(
        &test,
        &server.url,
        &system_path(),
        &["--to", &to.display().to_string()],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let expected = std::fs::read_to_string(mirror.join(&sha)).expect("the sum");
    let expected = expected.split_whitespace().next().expect("a sum");
    assert!(
        stderr.contains(&format!(
            "checksum mismatch for {archive}: expected {expected}, got "
        )),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was installed"), "{stderr}");
    assert_eq!(version_of(&to.join("stagegraph")), "the old one");
    assert_eq!(std::fs::read_dir(&to).expect("the folder").count(), 1);

    // A .sha256 that holds no checksum is refused too.
    std::fs::copy(dist.join(&archive), mirror.join(&archive)).expect("copy");
    std::fs::write(mirror.join(&sha), "<html>moved</html>\n").expect("write");
    let out = install(
        &test,
        &server.url,
        &system_path(),
        &["--to", &to.display().to_string()],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("holds no SHA-256 checksum"));
    assert_eq!(version_of(&to.join("stagegraph")), "the old one");
}

/// A platform no release covers, a target that is not one, and a version with no release:
/// exit 3, which is what to build from source instead, nothing installed.
#[test]
fn install_script_names_what_has_no_release() {
    let test = Test::new();
    let fake = test.path("fake-bin");
    std::fs::create_dir_all(&fake).expect("a folder");
    std::fs::write(
        fake.join("uname"),
        "#!/bin/sh\ncase \"$1\" in -m) echo sparc64 ;; *) echo SunOS ;; esac\n",
    )
    .expect("write");
    make_executable(&fake.join("uname"));
    let empty = test.path("empty");
    std::fs::create_dir_all(&empty).expect("a folder");
    let server = FileServer::start(&empty);
    let to = test.path("bin");
    let to_text = to.display().to_string();
    let path = format!("{}:{}", fake.display(), system_path());
    let out = install(&test, &server.url, &path, &["--to", &to_text]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("no prebuilt stagegraph for SunOS sparc64."),
        "{stderr}"
    );
    assert!(
        stderr.contains("cargo install --locked stagegraph"),
        "{stderr}"
    );
    assert!(server.asked().is_empty(), "nothing downloaded");

    let out = install(
        &test,
        &server.url,
        &system_path(),
        &["--to", &to_text, "--target", "riscv64gc-unknown-linux-gnu"],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("no prebuilt stagegraph for the target 'riscv64gc-unknown-linux-gnu'"),
        "{stderr}"
    );

    let out = install(
        &test,
        &server.url,
        &system_path(),
        &[
            "--to",
            &to_text,
            "--version",
            "v9.9.9",
            "--target",
            TARGETS[0],
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "no stagegraph 9.9.9 for {} at {}/stagegraph-9.9.9-{}.tar.gz",
            TARGETS[0], server.url, TARGETS[0]
        )),
        "{stderr}"
    );
    assert!(!to.exists(), "nothing installed");

    let out = install(&test, &server.url, &system_path(), &["--bogus"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("unknown argument '--bogus'"));
}

/// The `run` scripts of a workflow's or an action's steps, each with its step's name.
fn run_scripts(yaml: &Yaml) -> Vec<(String, String)> {
    let mut scripts = Vec::new();
    let mut steps: Vec<&Yaml> = Vec::new();
    if let Some(jobs) = yaml["jobs"].as_hash() {
        for job in jobs.values() {
            steps.extend(job["steps"].as_vec().into_iter().flatten());
        }
    }
    steps.extend(yaml["runs"]["steps"].as_vec().into_iter().flatten());
    for step in steps {
        if let Some(script) = step["run"].as_str() {
            let name = step["name"].as_str().unwrap_or("a step").to_string();
            scripts.push((name, script.to_string()));
        }
    }
    scripts
}

/// install.sh and the plugin's wrapper as POSIX sh, and every step script of the release
/// workflow and of the action as bash, pass shellcheck.
#[test]
fn shell_scripts_pass_shellcheck() {
    if which::which("shellcheck").is_err() {
        skip("shellcheck is not installed (apt-get install shellcheck)");
        return;
    }
    let shellcheck = |shell: &str, file: &Path| {
        let out = Command::new("shellcheck")
            .args(["--shell", shell, "--severity", "style"])
            .arg(file)
            .output()
            .expect("run shellcheck");
        assert!(
            out.status.success(),
            "{}:\n{}",
            file.display(),
            text(&out.stdout)
        );
    };
    for file in ["install.sh", "plugin/scripts/stagegraph"] {
        shellcheck("sh", &repo_root().join(file));
    }
    for file in ["scripts/pgo-build.sh", "scripts/code-order.sh"] {
        shellcheck("bash", &repo_root().join(file));
    }
    let test = Test::new();
    let action = std::fs::read_to_string(repo_root().join("action.yml")).expect("action.yml");
    let action = YamlLoader::load_from_str(&action).expect("YAML").remove(0);
    let mut checked = 0;
    for yaml in [workflow(), action] {
        for (name, script) in run_scripts(&yaml) {
            let file = test.path(&format!("step-{checked}.sh"));
            std::fs::write(&file, format!("# {name}\n{script}")).expect("write");
            shellcheck("bash", &file);
            checked += 1;
        }
    }
    assert!(checked >= 10, "{checked} step scripts");
    // shellcheck is live: a script with a mistake is caught.
    let broken = test.path("broken.sh");
    std::fs::write(&broken, "rm -rf $1/*\n").expect("write");
    let out = Command::new("shellcheck")
        .args(["--shell", "sh"])
        .arg(&broken)
        .output()
        .expect("run shellcheck");
    assert!(!out.status.success(), "shellcheck flags an unquoted $1");
}

/// Without the toolchain's `llvm-profdata`, `scripts/pgo-build.sh` builds nothing, says why and
/// exits 3: the overhead bench then builds the plain release binary. The `rustc` here names an
/// empty sysroot, and the `cargo` it would run is `false`.
#[test]
fn pgo_build_without_llvm_profdata_says_why_and_exits_3() {
    let test = Test::new();
    let bin = test.path("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let sysroot = test.path("sysroot");
    std::fs::create_dir_all(&sysroot).expect("sysroot");
    let rustc = bin.join("rustc");
    std::fs::write(
        &rustc,
        format!(
            "#!/bin/sh\ncase \"$1\" in\n  --print) echo '{}' ;;\n  *) printf 'rustc 1.95.0\\nhost: x86_64-unknown-linux-gnu\\nLLVM version: 22.1.2\\n' ;;\nesac\n",
            sysroot.display()
        ),
    )
    .expect("rustc");
    make_executable(&rustc);
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/pgo-build.sh"))
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("CARGO", "false")
        .output()
        .expect("run the script");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("no profile-guided build"), "{stderr}");
}

/// The link order of `scripts/pgo-build.sh`'s last step: the functions the common commands ran
/// first (a profiled name standing for its symbol with ThinLTO's `.llvm.<n>` suffix too), then
/// the code no profile names, then the rest of what training ran, each group in address
/// order; what nothing ran, and data, left out.
#[test]
fn code_order_puts_what_the_common_commands_ran_first() {
    let test = Test::new();
    let common = test.path("common");
    std::fs::write(&common, "_ZN3app4main17hE\n_ZN3app5check17hE\n").expect("common");
    let trained = test.path("trained");
    std::fs::write(
        &trained,
        "_ZN3app4main17hE\n_ZN3app3run17hE\n_ZN3app5check17hE\n",
    )
    .expect("trained");
    let symbols = test.path("symbols");
    std::fs::write(
        &symbols,
        "0000000000001000 t _ZN3app3run17hE\n\
         0000000000001100 T mi_malloc\n\
         0000000000001200 t _ZN3app5check17hE.llvm.1234\n\
         0000000000001300 t _ZN3app4cold17hE\n\
         0000000000001400 T _ZN3app4main17hE\n\
         0000000000001500 t _RNvNtCs1_3std2rt10lang_start\n\
         0000000000002000 d _ZN3app5TABLE17hE\n\
         0000000000002100 r _ZN3app4main17hE.llvm.99\n",
    )
    .expect("symbols");
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/code-order.sh"))
        .args([&common, &trained, &symbols])
        .output()
        .expect("run the script");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "_ZN3app5check17hE.llvm.1234\n_ZN3app4main17hE\n\
         mi_malloc\n_RNvNtCs1_3std2rt10lang_start\n\
         _ZN3app3run17hE\n"
    );
}
