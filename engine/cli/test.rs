//! `stagegraph test`: runs the test files and prints a line per case as it ends, the failures'
//! detail and a summary; writes JUnit XML and GitHub annotations when asked.

use stagegraph::{exit, Recording, TestOptions};

use super::{invalid, App, Failure, TestArgs, TestFormat};

impl App {
    pub(crate) fn test(&self, args: TestArgs) -> Result<i32, Failure> {
        let cwd = self.engine.cwd().to_path_buf();
        let files = self.engine.test_files(&args.paths);
        if let Some(missing) = args.paths.iter().find(|path| !cwd.join(path).exists()) {
            return Err(invalid(format!(
                "no test file or folder `{}`",
                missing.display()
            )));
        }
        if files.is_empty() {
            return Err(invalid(format!(
                "no test files (`*{}`) found",
                stagegraph::TEST_SUFFIX
            )));
        }
        if args.repeat == 0 {
            return Err(invalid("--repeat must be at least 1"));
        }
        if args.min_pass.is_some_and(|k| k > args.repeat) {
            return Err(invalid("--min-pass cannot be more than --repeat"));
        }
        // Pinned before any case's thread starts: the environment is read, never written, after.
        if std::env::var_os("STAGEGRAPH_NOW").is_none() {
            std::env::set_var("STAGEGRAPH_NOW", &args.now);
        }
        let defaults = TestOptions::default();
        let options = TestOptions {
            paths: args.paths.clone(),
            workflow: args.workflow.clone(),
            jobs: args.jobs.unwrap_or(defaults.jobs).max(1),
            recording: if args.rerecord {
                Recording::All
            } else if args.record {
                Recording::Missing
            } else {
                Recording::Offline
            },
            repeat: args.repeat,
            min_pass: args.min_pass,
        };
        let report = self
            .engine
            .test(&files, &options, &|case| outln!("{}", case.line(&cwd)))
            .map_err(|diagnostics| {
                self.print_diagnostics(&diagnostics);
                if args.format == TestFormat::Github {
                    for diagnostic in &diagnostics {
                        outln!("{}", diagnostic.to_github(&cwd));
                    }
                }
                let errors = diagnostics.iter().filter(|d| d.is_error()).count();
                invalid(format!("the test files are invalid ({errors} error(s))"))
            })?;
        let failed: Vec<_> = report
            .cases
            .iter()
            .filter(|case| case.outcome == stagegraph::CaseOutcome::Failed)
            .collect();
        if !failed.is_empty() {
            outln!("");
            for case in &failed {
                out!("{}", case.detail(&cwd));
            }
        }
        if args.format == TestFormat::Github {
            out!("{}", report.github(&cwd));
        }
        if let Some(path) = &args.junit {
            std::fs::write(cwd.join(path), report.junit(&cwd)).map_err(|error| Failure {
                code: exit::FAILED,
                message: format!("cannot write {}: {error}", path.display()),
            })?;
        }
        outln!("{}", report.summary());
        Ok(if report.failed() > 0 {
            exit::FAILED
        } else {
            exit::SUCCESS
        })
    }
}
