//! Write paths: a path written without a template (`output.path`, the written arguments of a
//! writing built-in) is checked against the `[workflow] writes` roots, as the run would check it,
//! when the roots are written without templates too; so is the `[workflow] lock` folder, which
//! the run creates like any other write.
//!
//! Relative paths resolve against the working directory, as they do when the workflow runs. A
//! path is reported only when it is outside every root both as written (`..` resolved without
//! the disk) and with the symbolic links of its existing folders resolved, so a root reached
//! through a link never makes a false alarm.

use std::path::{Component, Path};

use super::{stage_pointer, Checker};
use crate::builtins::{self, paths::lexical_absolute, WriteRoots};
use crate::diag::{DiagnosticKind, Escape};
use crate::load::pointer_segment;
use crate::template::compiled;

impl Checker<'_> {
    pub(super) fn check_write_paths(&mut self) {
        let file = self.file;
        let roots = &file.workflow.writes;
        let lock = file
            .workflow
            .lock
            .as_ref()
            .map(|lock| lock.path.as_str())
            .filter(|path| !path.is_empty() && !compiled::has_syntax(path));
        if let (true, Some(path)) = (roots.is_empty(), lock) {
            // With no roots a stage that writes is told so by gather; the lock has no stage.
            let diagnostic = self.error(
                DiagnosticKind::LockWithoutWrites(path.to_string()),
                "/workflow/lock/path",
            );
            diagnostic.label = Some("the run creates this folder".to_string());
            diagnostic.help = Some(
                "add the folder that holds the lock to `[workflow] writes`, e.g. `writes = [\".locks\"]`"
                    .to_string(),
            );
            return;
        }
        if roots.is_empty() || roots.iter().any(|root| compiled::has_syntax(root)) {
            // No roots: gather already says so for each writing stage. A templated root could
            // be anywhere until the run renders it.
            return;
        }
        let mut found: Vec<(String, String, String)> = Vec::new();
        if let Some(path) = lock {
            found.push((
                path.to_string(),
                "/workflow/lock/path".to_string(),
                "the run creates this lock folder".to_string(),
            ));
        }
        for (id, def) in &file.stages {
            let sp = stage_pointer(id);
            if let Some(path) = def.output.as_ref().and_then(|o| o.path.as_ref()) {
                found.push((
                    path.clone(),
                    format!("{sp}/output/path"),
                    format!("stage `{id}` writes its output here"),
                ));
            }
            let Some(builtin) = def.uses.as_deref().and_then(builtins::lookup) else {
                continue;
            };
            let Some(with) = def.with.as_deref() else {
                continue;
            };
            for argument in builtins::written_arguments(builtin.name) {
                if let Some(path) = with.get(*argument).and_then(|v| v.as_str()) {
                    found.push((
                        path.to_string(),
                        format!("{sp}/with/{}", pointer_segment(argument)),
                        format!("`{}` writes `{argument}`", builtin.name),
                    ));
                }
            }
        }
        for (path, pointer, label) in found {
            if path.is_empty() || compiled::has_syntax(&path) || inside(self.cwd, roots, &path) {
                continue;
            }
            let written = Path::new(&path);
            let escape = if written.components().any(|c| c == Component::ParentDir) {
                Escape::ParentDir
            } else if written.is_absolute() {
                Escape::Absolute
            } else {
                Escape::Elsewhere
            };
            let message = DiagnosticKind::WriteOutsideRoots {
                path: path.clone(),
                escape,
                roots: roots.clone(),
            };
            let help = "a workflow writes only inside the folders of `[workflow] writes`: \
                        write inside one of them, or add this folder there"
                .to_string();
            let diagnostic = self.error(message, &pointer);
            diagnostic.label = Some(label);
            diagnostic.help = Some(help);
        }
    }
}

/// Whether `path`, resolved against `cwd`, lies inside one of `roots` (a root itself counts).
fn inside(cwd: &Path, roots: &[String], path: &str) -> bool {
    let target = lexical_absolute(&cwd.join(path));
    if roots
        .iter()
        .any(|root| target.starts_with(lexical_absolute(&cwd.join(root))))
    {
        return true;
    }
    WriteRoots::new(cwd, roots).check(&cwd.join(path)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::inside;
    use std::path::Path;

    #[test]
    fn paths_inside_a_root_pass_and_escapes_do_not() {
        let cwd = Path::new("/nonexistent/project");
        let roots = ["out".to_string(), "/var/cache/x".to_string()];
        assert!(inside(cwd, &roots, "out/a.txt"));
        assert!(inside(cwd, &roots, "out"));
        assert!(inside(cwd, &roots, "./out/deep/../b"));
        assert!(inside(cwd, &roots, "/var/cache/x/y"));
        assert!(inside(cwd, &roots, "/nonexistent/project/out/z"));
        assert!(!inside(cwd, &roots, "out/../elsewhere"));
        assert!(!inside(cwd, &roots, "outer/a"));
        assert!(!inside(cwd, &roots, "/etc/passwd"));
        assert!(!inside(cwd, &roots, "../project2/out"));
    }

    #[test]
    fn a_root_reached_through_a_link_admits_its_real_folder() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let base = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir(base.join("real")).expect("real");
        std::os::unix::fs::symlink(base.join("real"), base.join("alias")).expect("a link");
        let roots = ["alias".to_string()];
        assert!(inside(&base, &roots, "real/x"));
        assert!(inside(&base, &roots, "alias/x"));
        assert!(!inside(&base, &roots, "elsewhere/x"));
    }
}
