//! `stagegraph doctor`: the chain a Claude Code user needs for the background lexicon, checked
//! link by link for the project it runs in, each finding one line with what to fix.
//!
//! The links: this binary; a hook installed (which settings file, or the plugin) and naming a
//! program that exists; the CLAUDE.md toggle at the project root; the model aliases the shipped
//! workflows use, and for those the Claude Code CLI answers, the CLI found and inside the range of
//! versions tested; a one-token request to each when asked (`--probe`); the state folder the
//! hook's runs record in, writable; the last hook runs and how they ended.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::claude::{installed_command, installed_events, SettingsScope, HOOK_EVENTS};
use crate::models::{ModelRequest, Models};
use crate::run::record;

/// The oldest Claude Code CLI the `claude` provider and the hook are tested against.
pub const OLDEST_CLAUDE: (u32, u32, u32) = (2, 1, 197);
/// The newest one tested (a newer one is likely fine, and said so).
pub const NEWEST_CLAUDE: (u32, u32, u32) = (2, 1, 332);

/// The aliases the shipped workflows name.
const SHIPPED_ALIASES: [&str; 2] = ["haiku", "sonnet"];

/// The workflow the hook runs.
const HOOK_WORKFLOW: &str = "context-update";

/// How a link of the chain stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Works.
    Ok,
    /// Works, with something worth knowing.
    Warn,
    /// Broken: the hook cannot do its work until it is fixed.
    Broken,
}

/// One finding: what was checked and what was found (with the fix, when broken).
#[derive(Debug, Clone)]
pub struct Finding {
    /// How it stands.
    pub level: Level,
    /// What was checked.
    pub subject: String,
    /// What was found, and the fix.
    pub text: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mark = match self.level {
            Level::Ok => "ok  ",
            Level::Warn => "warn",
            Level::Broken => "FIX ",
        };
        write!(f, "{mark}  {}: {}", self.subject, self.text)
    }
}

fn finding(level: Level, subject: &str, text: impl Into<String>) -> Finding {
    Finding {
        level,
        subject: subject.to_string(),
        text: text.into(),
    }
}

/// Every finding for the project at `cwd` (or `$CLAUDE_PROJECT_DIR`).
pub fn doctor(cwd: &Path, probe: bool) -> Vec<Finding> {
    let root = std::env::var_os("CLAUDE_PROJECT_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .unwrap_or_else(|| cwd.to_path_buf());
    let mut findings = vec![finding(
        Level::Ok,
        "stagegraph",
        format!(
            "{} at {}",
            env!("CARGO_PKG_VERSION"),
            std::env::current_exe()
                .map(|exe| exe.display().to_string())
                .unwrap_or_default()
        ),
    )];
    findings.extend(hooks(&root));
    findings.push(toggle(&root));
    findings.extend(models(&root, probe));
    findings.extend(state(&root));
    findings
}

fn hooks(root: &Path) -> Vec<Finding> {
    let mut found = Vec::new();
    for (scope, name) in [
        (SettingsScope::Project, "project"),
        (SettingsScope::Local, "local"),
        (SettingsScope::User, "user"),
    ] {
        let Ok(path) = scope.path(root) else { continue };
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Ok(settings) = serde_json::from_str::<Value>(&text) else {
            found.push(finding(
                Level::Broken,
                "hook",
                format!(
                    "{} is not valid JSON: Claude Code ignores it",
                    path.display()
                ),
            ));
            continue;
        };
        let events = installed_events(&settings);
        let Some(command) = installed_command(&settings) else {
            continue;
        };
        found.push(program_finding(&command, name, &path));
        let missing: Vec<&str> = HOOK_EVENTS
            .into_iter()
            .filter(|event| !events.contains(event))
            .collect();
        if !missing.is_empty() {
            found.push(finding(
                Level::Warn,
                "hook",
                format!(
                    "{} has no {} hook: the end of a session is not judged; run `stagegraph install-hook{}` again",
                    path.display(),
                    missing.join(", "),
                    if name == "project" { String::new() } else { format!(" --scope {name}") }
                ),
            ));
        }
    }
    if let Some(plugin) = plugin_installed() {
        found.push(finding(
            Level::Ok,
            "hook",
            format!("the stagegraph plugin is installed ({plugin})"),
        ));
    }
    if found.is_empty() {
        found.push(finding(
            Level::Broken,
            "hook",
            "no context-update hook in the project, local or user settings, and no stagegraph plugin: run `stagegraph install-hook` (or install the plugin)",
        ));
    }
    found
}

/// Whether the hook's program exists.
fn program_finding(command: &str, scope: &str, path: &Path) -> Finding {
    let program = shlex::split(command)
        .and_then(|words| words.into_iter().next())
        .unwrap_or_default();
    let exists = if program.contains('/') {
        Path::new(&program).is_file()
    } else {
        which::which(&program).is_ok()
    };
    if exists {
        finding(
            Level::Ok,
            "hook",
            format!(
                "installed in the {scope} settings ({}), runs `{program}`",
                path.display()
            ),
        )
    } else {
        finding(
            Level::Broken,
            "hook",
            format!(
                "the {scope} settings ({}) run `{program}`, which does not exist: run `stagegraph install-hook` again from the binary you use",
                path.display()
            ),
        )
    }
}

/// The plugin's name as Claude Code lists it, when it is installed for the user.
fn plugin_installed() -> Option<String> {
    let home = PathBuf::from(std::env::var_os("HOME")?);
    let text = std::fs::read_to_string(home.join(".claude/plugins/installed_plugins.json")).ok()?;
    let listed: Value = serde_json::from_str(&text).ok()?;
    let plugins = listed.get("plugins").unwrap_or(&listed).as_object()?;
    plugins
        .keys()
        .find(|name| name.split('@').next() == Some("stagegraph"))
        .cloned()
}

fn toggle(root: &Path) -> Finding {
    let state = toggle_in(&root.join("CLAUDE.md"));
    if state == Some(true) {
        return finding(
            Level::Ok,
            "toggle",
            format!(
                "background context is enabled in {}",
                root.join("CLAUDE.md").display()
            ),
        );
    }
    // A session started in a subfolder has it as its project root: the repository root's
    // toggle is not seen there.
    let above = repository_root(root)
        .filter(|top| top != root)
        .filter(|top| toggle_in(&top.join("CLAUDE.md")) == Some(true));
    if let Some(top) = above {
        return finding(
            Level::Broken,
            "toggle",
            format!(
                "{} has no toggle, but the repository root {} has one: a session started here does not see it; start Claude Code at the repository root, or run `stagegraph install-hook --enable` here",
                root.display(),
                top.display()
            ),
        );
    }
    let text = match state {
        Some(_) => "background context is disabled in CLAUDE.md".to_string(),
        None => format!(
            "{} has no \"- Background context: enabled\" line",
            root.join("CLAUDE.md").display()
        ),
    };
    finding(
        Level::Broken,
        "toggle",
        format!("{text}: run `stagegraph install-hook --enable`"),
    )
}

/// `Some(true)` enabled, `Some(false)` disabled, `None` no toggle (or no file).
fn toggle_in(claude_md: &Path) -> Option<bool> {
    let text = std::fs::read_to_string(claude_md).ok()?;
    let found = crate::claude::TOGGLE.captures(&text)?;
    Some(found[1].eq_ignore_ascii_case("enabled"))
}

/// The nearest folder at or above `dir` holding `.git`.
fn repository_root(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|folder| folder.join(".git").exists())
        .map(Path::to_path_buf)
}

fn models(root: &Path, probe: bool) -> Vec<Finding> {
    let models = match Models::load(root) {
        Ok(models) => models,
        Err(error) => {
            return vec![finding(
                Level::Broken,
                "models",
                format!("the model configuration does not load: {error}"),
            )]
        }
    };
    let mut findings = Vec::new();
    for alias in SHIPPED_ALIASES {
        let subject = format!("model {alias}");
        let Some(identity) = models.identity(alias) else {
            findings.push(finding(
                Level::Broken,
                &subject,
                format!("`{alias}` is not defined: add [models.{alias}] to stagegraph.toml"),
            ));
            continue;
        };
        let mut level = Level::Ok;
        let mut text = identity.clone();
        if let Some(program) = models.claude_program(alias) {
            let (cli_level, cli_text) = claude_cli(program);
            level = cli_level;
            text = format!("{identity}; {cli_text}");
        }
        if probe && level != Level::Broken {
            match probe_alias(&models, alias) {
                Ok(latency) => {
                    text.push_str(&format!("; answered a probe in {} ms", latency.as_millis()));
                }
                Err(error) => {
                    level = Level::Broken;
                    text.push_str(&format!("; the probe failed: {error}"));
                }
            }
        }
        findings.push(finding(level, &subject, text));
    }
    findings
}

/// The Claude Code CLI an alias runs: found, and its version inside the tested range.
fn claude_cli(program: &[String]) -> (Level, String) {
    let Some(first) = program.first() else {
        return (Level::Broken, "no program".to_string());
    };
    let found = if first.contains('/') {
        Some(PathBuf::from(first)).filter(|path| path.is_file())
    } else {
        which::which(first).ok()
    };
    let Some(path) = found else {
        return (
            Level::Broken,
            format!("`{first}` is not on PATH: npm i -g @anthropic-ai/claude-code, or give the alias a `command`"),
        );
    };
    let output = std::process::Command::new(&path)
        .args(&program[1..])
        .arg("--version")
        .env("DISABLE_AUTOUPDATER", "1")
        .output();
    let text = output
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .unwrap_or_default();
    let Some(version) = parse_version(&text) else {
        return (
            Level::Broken,
            format!(
                "{} printed no version ({text:?}): is it the Claude Code CLI?",
                path.display()
            ),
        );
    };
    let shown = format!("{}.{}.{}", version.0, version.1, version.2);
    let range = format!(
        "{}.{}.{} to {}.{}.{}",
        OLDEST_CLAUDE.0,
        OLDEST_CLAUDE.1,
        OLDEST_CLAUDE.2,
        NEWEST_CLAUDE.0,
        NEWEST_CLAUDE.1,
        NEWEST_CLAUDE.2
    );
    if version < OLDEST_CLAUDE {
        (
            Level::Broken,
            format!("Claude Code {shown} at {} is older than tested ({range}): npm i -g @anthropic-ai/claude-code", path.display()),
        )
    } else if version > NEWEST_CLAUDE {
        (
            Level::Warn,
            format!(
                "Claude Code {shown} at {} is newer than tested ({range})",
                path.display()
            ),
        )
    } else {
        (
            Level::Ok,
            format!("Claude Code {shown} at {}", path.display()),
        )
    }
}

/// `2.1.332` out of `2.1.332 (Claude Code)`.
fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let word = text.split_whitespace().next()?;
    let mut parts = word.split('.').map(|part| part.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// One short request to the alias.
fn probe_alias(models: &Models, alias: &str) -> Result<Duration, String> {
    let request = ModelRequest {
        alias: alias.to_string(),
        prompt: "Reply with the one word: ok".to_string(),
        max_tokens: Some(16),
        timeout: Some(Duration::from_secs(120)),
        ..ModelRequest::default()
    };
    let started = std::time::Instant::now();
    models
        .complete(&request)
        .map(|_| started.elapsed())
        .map_err(|error| error.to_string())
}

fn state(root: &Path) -> Vec<Finding> {
    let Some(dir) = record::user_state_dir(root) else {
        return vec![finding(
            Level::Broken,
            "state",
            "neither XDG_STATE_HOME nor HOME names an absolute folder: the hook cannot record its runs",
        )];
    };
    let writable = std::fs::create_dir_all(&dir)
        .and_then(|()| tempfile::NamedTempFile::new_in(&dir).map(drop));
    let mut findings = vec![match writable {
        Ok(()) => finding(Level::Ok, "state", format!("{} is writable", dir.display())),
        Err(error) => finding(
            Level::Broken,
            "state",
            format!("cannot write in {}: {error}", dir.display()),
        ),
    }];
    let runs: Vec<_> = record::list_runs(&dir)
        .into_iter()
        .rev()
        .filter_map(|id| record::read_record_as_written(&dir, &id).ok())
        .filter(|run| run.workflow == HOOK_WORKFLOW && !run.dry_run)
        .take(5)
        .collect();
    if runs.is_empty() {
        findings.push(finding(
            Level::Warn,
            "runs",
            "no hook run yet: end a turn in Claude Code, then run `stagegraph doctor` again",
        ));
    }
    for (index, run) in runs.iter().enumerate() {
        let level = match run.status {
            crate::run::RunStatus::Failed if index == 0 => Level::Broken,
            crate::run::RunStatus::Failed => Level::Warn,
            _ => Level::Ok,
        };
        findings.push(finding(
            level,
            "runs",
            format!(
                "{} {}: {}",
                run.run_id,
                run.status.as_str(),
                crate::floor::secrets::excerpt(run.summary().lines().next().unwrap_or(""), 200)
            ),
        ));
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn versions_are_read_as_the_cli_prints_them() {
        assert_eq!(parse_version("2.1.332 (Claude Code)"), Some((2, 1, 332)));
        assert_eq!(parse_version("1.0.3"), Some((1, 0, 3)));
        assert_eq!(parse_version("claude"), None);
        assert!(parse_version("2.1.197 (Claude Code)") < Some((2, 1, 332)));
    }
}
