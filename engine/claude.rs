//! Claude Code settings: adding and removing the `context-update` hooks (Stop after each turn,
//! SessionEnd for what the debounce held back when the session ends), and the CLAUDE.md toggle.
//!
//! The settings file is merged, never replaced: every other key and every other hook is kept in
//! its place, the hook is added once (installing twice changes nothing), and removing takes out
//! exactly the hook entry this module adds, with the groups and keys that only held it. A file
//! that is not a JSON object is an error, never overwritten.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

/// What the hook runs, after the program: the payload arrives on stdin, and `--detach` checks it
/// and goes on in a session of its own, so the hook returns at once and the run outlives the
/// session that fired it (Claude Code kills what a hook started when it exits).
pub(crate) const HOOK_ARGS: &str = "run context-update --inputs-json - --quiet --detach";

/// The same hook as written before `--detach`; recognised so `uninstall-hook` removes it too.
const OLD_HOOK_ARGS: &str = "run context-update --inputs-json - --quiet";

/// The hook events the hook is added under: each turn's end, and the session's, whose run judges
/// what the debounce held back.
pub(crate) const HOOK_EVENTS: [&str; 2] = ["Stop", "SessionEnd"];

/// Seconds Claude Code gives the hook: it only checks the payload and starts the run.
pub(crate) const HOOK_TIMEOUT_SECS: u64 = 30;

/// Which settings file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingsScope {
    /// `.claude/settings.json` in the project, shared with the team.
    Project,
    /// `.claude/settings.local.json` in the project, this machine only.
    Local,
    /// `~/.claude/settings.json`, every project.
    User,
}

impl SettingsScope {
    /// The settings file of this scope for a project at `cwd`.
    pub fn path(self, cwd: &Path) -> Result<PathBuf, SettingsError> {
        Ok(match self {
            SettingsScope::Project => cwd.join(".claude").join("settings.json"),
            SettingsScope::Local => cwd.join(".claude").join("settings.local.json"),
            SettingsScope::User => {
                let home = std::env::var_os("HOME").ok_or(SettingsError::NoHome)?;
                PathBuf::from(home).join(".claude").join("settings.json")
            }
        })
    }
}

/// Why the settings cannot be changed.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// `$HOME` is not set, so the user settings file cannot be found.
    #[error("$HOME is not set: cannot find the user settings")]
    NoHome,
    /// The settings file exists but cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The settings file.
        path: PathBuf,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// The settings file is not valid JSON; it is left as it is.
    #[error("{} is not valid JSON ({source}); fix it first, nothing was changed", path.display())]
    Parse {
        /// The settings file.
        path: PathBuf,
        /// Where and why it does not parse.
        source: serde_json::Error,
    },
    /// The file, or the part of it the hook goes in, is not a JSON object; it is left as it is.
    #[error("{} must hold a JSON object{}; nothing was changed", path.display(), at)]
    Shape {
        /// The settings file.
        path: PathBuf,
        /// Which part is not an object (" at `hooks`"), or empty for the whole file.
        at: String,
    },
    /// The changed settings cannot be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The settings file.
        path: PathBuf,
        /// Why it cannot be written.
        source: std::io::Error,
    },
}

/// A planned change of one settings file: its text before and after.
pub struct HookChange {
    /// The settings file.
    pub path: PathBuf,
    before: Option<String>,
    after: Option<String>,
}

impl HookChange {
    /// Plan adding (`install`) or removing the hook in the settings file of `scope`.
    pub fn plan(scope: SettingsScope, cwd: &Path, install: bool) -> Result<Self, SettingsError> {
        let path = scope.path(cwd)?;
        let before = match std::fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(SettingsError::Read { path, source }),
        };
        let mut settings = match before.as_deref() {
            None => Map::new(),
            Some(text) if text.trim().is_empty() => Map::new(),
            Some(text) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(map)) => map,
                Ok(_) => {
                    return Err(SettingsError::Shape {
                        path,
                        at: String::new(),
                    })
                }
                Err(source) => return Err(SettingsError::Parse { path, source }),
            },
        };
        let command = hook_command();
        let changed = if install {
            add_hook(&mut settings, &command).map_err(|at| SettingsError::Shape {
                path: path.clone(),
                at,
            })?
        } else {
            remove_hook(&mut settings)
        };
        let after = if changed {
            let mut text = serde_json::to_string_pretty(&Value::Object(settings))
                .expect("a JSON map always serializes");
            text.push('\n');
            Some(text)
        } else {
            before.clone()
        };
        Ok(HookChange {
            path,
            before,
            after,
        })
    }

    /// Whether applying changes the file.
    pub fn changes(&self) -> bool {
        self.before != self.after
    }

    /// A unified diff of the change (empty when nothing changes).
    pub fn diff(&self) -> String {
        if !self.changes() {
            return String::new();
        }
        let old = self.before.as_deref().unwrap_or("");
        let new = self.after.as_deref().unwrap_or("");
        let name = self.path.display().to_string();
        similar::TextDiff::from_lines(old, new)
            .unified_diff()
            .header(
                if self.before.is_some() {
                    &name
                } else {
                    "/dev/null"
                },
                &name,
            )
            .to_string()
    }

    /// Write the change; `Ok(false)` when there was nothing to change.
    pub fn apply(&self) -> Result<bool, SettingsError> {
        let Some(after) = self.after.as_deref().filter(|_| self.changes()) else {
            return Ok(false);
        };
        let write_error = |source| SettingsError::Write {
            path: self.path.clone(),
            source,
        };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(write_error)?;
        let mut file = tempfile::NamedTempFile::new_in(dir).map_err(write_error)?;
        if let Ok(meta) = std::fs::metadata(&self.path) {
            file.as_file()
                .set_permissions(meta.permissions())
                .map_err(write_error)?;
        }
        std::io::Write::write_all(&mut file, after.as_bytes()).map_err(write_error)?;
        file.persist(&self.path)
            .map_err(|error| write_error(error.error))?;
        Ok(true)
    }
}

impl fmt::Debug for HookChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookChange")
            .field("path", &self.path)
            .field("changes", &self.changes())
            .finish_non_exhaustive()
    }
}

/// The hook's command line: `stagegraph` when the one on PATH is this binary, else this binary's
/// absolute path (quoted for the shell Claude Code runs hooks with).
pub(crate) fn hook_command() -> String {
    let exe = std::env::current_exe().ok();
    let on_path = which::which("stagegraph").ok();
    let same = match (&exe, &on_path) {
        (Some(exe), Some(found)) => {
            std::fs::canonicalize(exe).ok() == std::fs::canonicalize(found).ok()
        }
        _ => false,
    };
    let program = match exe {
        Some(exe) if !same => shlex::try_quote(&exe.to_string_lossy())
            .map_or_else(|_| "stagegraph".to_string(), std::borrow::Cow::into_owned),
        _ => "stagegraph".to_string(),
    };
    format!("{program} {HOOK_ARGS}")
}

/// Whether a hook command is one this module adds, whatever program path it names.
fn is_ours(command: &str) -> bool {
    command
        .strip_suffix(HOOK_ARGS)
        .or_else(|| command.strip_suffix(OLD_HOOK_ARGS))
        .and_then(|program| program.strip_suffix(' '))
        .is_some_and(|program| {
            let program = program.trim_matches(|c| c == '\'' || c == '"');
            program == "stagegraph" || program.ends_with("/stagegraph")
        })
}

fn hook_entry(command: &str) -> Value {
    json!({
        "type": "command",
        "command": command,
        "timeout": HOOK_TIMEOUT_SECS,
    })
}

/// Whether a hook group holds one of ours.
fn holds_ours(group: &Value) -> bool {
    group
        .get("hooks")
        .and_then(Value::as_array)
        .is_some_and(|list| {
            list.iter().any(|hook| {
                hook.get("command")
                    .and_then(Value::as_str)
                    .is_some_and(is_ours)
            })
        })
}

/// The events of [`HOOK_EVENTS`] that have one of our hooks in `settings`.
pub(crate) fn installed_events(settings: &Value) -> Vec<&'static str> {
    HOOK_EVENTS
        .into_iter()
        .filter(|event| {
            settings["hooks"][*event]
                .as_array()
                .is_some_and(|groups| groups.iter().any(holds_ours))
        })
        .collect()
}

/// Our hook command in `settings`, under the first event that has one.
pub(crate) fn installed_command(settings: &Value) -> Option<String> {
    HOOK_EVENTS.into_iter().find_map(|event| {
        settings["hooks"][event]
            .as_array()?
            .iter()
            .filter_map(|group| group.get("hooks")?.as_array())
            .flatten()
            .filter_map(|hook| hook.get("command")?.as_str())
            .find(|command| is_ours(command))
            .map(str::to_string)
    })
}

/// Add the hook under each of [`HOOK_EVENTS`] that has none of ours; `Err` names a key of the
/// wrong shape.
fn add_hook(settings: &mut Map<String, Value>, command: &str) -> Result<bool, String> {
    let hooks = settings
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(hooks) = hooks else {
        return Err(" at `hooks`".into());
    };
    let mut changed = false;
    for event in HOOK_EVENTS {
        let groups = hooks
            .entry(event)
            .or_insert_with(|| Value::Array(Vec::new()));
        let Value::Array(groups) = groups else {
            return Err(format!(" at `hooks.{event}` (a list of hook groups)"));
        };
        if !groups.iter().any(holds_ours) {
            groups.push(json!({ "hooks": [hook_entry(command)] }));
            changed = true;
        }
    }
    Ok(changed)
}

/// Remove every hook of ours, then the groups and keys left empty by that.
fn remove_hook(settings: &mut Map<String, Value>) -> bool {
    let Some(Value::Object(hooks)) = settings.get_mut("hooks") else {
        return false;
    };
    let mut changed = false;
    for event in HOOK_EVENTS {
        let Some(Value::Array(groups)) = hooks.get_mut(event) else {
            continue;
        };
        let mut removed = false;
        groups.retain_mut(|group| {
            let Some(Value::Array(list)) = group.get_mut("hooks") else {
                return true;
            };
            let before = list.len();
            list.retain(|hook| {
                !hook
                    .get("command")
                    .and_then(Value::as_str)
                    .is_some_and(is_ours)
            });
            if list.len() == before {
                return true;
            }
            removed = true;
            !list.is_empty()
        });
        if removed && groups.is_empty() {
            hooks.remove(event);
        }
        changed |= removed;
    }
    if changed && hooks.is_empty() {
        settings.remove("hooks");
    }
    changed
}

/// The toggle line `install-hook --enable` writes.
pub(crate) const TOGGLE_LINE: &str = "- Background context: enabled";

/// A toggle line of CLAUDE.md, in any case: its state (`enabled` or `disabled`) is the first
/// group, the whole line the match (as the shipped workflow reads it).
pub(crate) static TOGGLE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(
        r"(?mi)^[[:blank:]]*-[[:blank:]]*Background context[[:blank:]]*:[[:blank:]]*(enabled|disabled)([^[:alnum:]\n].*)?$",
    )
    .expect("constant pattern")
});

/// What `--enable` did to CLAUDE.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toggle {
    /// The toggle was already on.
    AlreadyOn,
    /// A `disabled` toggle was turned on.
    TurnedOn,
    /// The line was added (CLAUDE.md made when there was none).
    Added,
}

/// Turn the background context on in `claude_md`: idempotent, every other line kept.
pub fn enable_toggle(claude_md: &Path) -> Result<Toggle, SettingsError> {
    let text = match std::fs::read_to_string(claude_md) {
        Ok(text) => Some(text),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(SettingsError::Read {
                path: claude_md.to_path_buf(),
                source,
            })
        }
    };
    let toggle = &*TOGGLE;
    let (after, what) = match text.as_deref() {
        Some(text) => match toggle.captures(text) {
            Some(found) if found[1].eq_ignore_ascii_case("enabled") => {
                return Ok(Toggle::AlreadyOn)
            }
            Some(_) => (
                toggle.replace(text, TOGGLE_LINE).into_owned(),
                Toggle::TurnedOn,
            ),
            None => {
                let mut text = text.to_string();
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(TOGGLE_LINE);
                text.push('\n');
                (text, Toggle::Added)
            }
        },
        None => (format!("{TOGGLE_LINE}\n"), Toggle::Added),
    };
    crate::floor::atomic::write_atomic(claude_md, after.as_bytes()).map_err(|source| {
        SettingsError::Write {
            path: claude_md.to_path_buf(),
            source,
        }
    })?;
    Ok(what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_its_own_command_only() {
        assert!(is_ours(&format!("stagegraph {HOOK_ARGS}")));
        assert!(is_ours(&format!(
            "/home/me/.cargo/bin/stagegraph {HOOK_ARGS}"
        )));
        assert!(is_ours(&format!("'/opt/my tools/stagegraph' {HOOK_ARGS}")));
        assert!(is_ours(&format!("stagegraph {OLD_HOOK_ARGS}")));
        assert!(!is_ours("stagegraph run other --quiet"));
        assert!(!is_ours(&format!("notstagegraph {HOOK_ARGS}")));
    }

    #[test]
    fn add_then_remove_restores_the_rest() {
        let original = json!({
            "model": "sonnet",
            "hooks": { "Stop": [ { "hooks": [ { "type": "command", "command": "echo mine" } ] } ] }
        });
        let Value::Object(mut settings) = original.clone() else {
            unreachable!()
        };
        assert!(add_hook(&mut settings, &format!("stagegraph {HOOK_ARGS}")).unwrap());
        assert!(!add_hook(&mut settings, &format!("/x/stagegraph {HOOK_ARGS}")).unwrap());
        assert_eq!(settings["hooks"]["Stop"].as_array().unwrap().len(), 2);
        assert_eq!(settings["hooks"]["SessionEnd"].as_array().unwrap().len(), 1);
        let installed = Value::Object(settings.clone());
        assert_eq!(installed_events(&installed), HOOK_EVENTS);
        // A settings file of an earlier version, with the Stop hook alone, gains SessionEnd.
        settings["hooks"]
            .as_object_mut()
            .unwrap()
            .remove("SessionEnd");
        assert!(add_hook(&mut settings, &format!("stagegraph {HOOK_ARGS}")).unwrap());
        assert_eq!(Value::Object(settings.clone()), installed);
        assert!(remove_hook(&mut settings));
        assert_eq!(Value::Object(settings), original);
    }

    #[test]
    fn enabling_the_toggle_is_idempotent_and_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("CLAUDE.md");
        assert_eq!(enable_toggle(&path).unwrap(), Toggle::Added);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{TOGGLE_LINE}\n")
        );
        std::fs::write(&path, "# Repo\n\n- background context: Disabled\nmore").unwrap();
        assert_eq!(enable_toggle(&path).unwrap(), Toggle::TurnedOn);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("# Repo\n\n{TOGGLE_LINE}\nmore"));
        assert_eq!(enable_toggle(&path).unwrap(), Toggle::AlreadyOn);
        std::fs::write(&path, "# Repo").unwrap();
        assert_eq!(enable_toggle(&path).unwrap(), Toggle::Added);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("# Repo\n\n{TOGGLE_LINE}\n"));
    }

    #[test]
    fn a_wrong_shape_is_named() {
        let Value::Object(mut settings) = json!({ "hooks": { "Stop": {} } }) else {
            unreachable!()
        };
        let error = add_hook(&mut settings, "stagegraph x").unwrap_err();
        assert!(error.contains("hooks.Stop"), "{error}");
    }
}
