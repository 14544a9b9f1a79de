//! The command line: parses arguments, calls the library, prints, and maps outcomes to the
//! documented exit codes.

use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use serde_json::{Map, Value};

use stagegraph::{
    exit, read_inputs, Diagnostic, Engine, HookChange, ResumeFrom, RunRecord, RunRequest,
    RunStatus, SettingsScope, StateDir, Toggle, Workflow,
};

use args::{
    Cli, Color, Command, ExecArgs, HookArgs, HookScope, RunArgs, RunFormat, SchemaKind, TestArgs,
    TestFormat,
};

/// A run of many small stages allocates and frees many small values: with mimalloc a no-op
/// rerun of 10,000 stages took 0.19 s instead of 0.25 s (book/src/benchmarks.md). The
/// `system-allocator` feature leaves the system's, so that heap profilers that wrap `malloc`
/// (valgrind's massif and dhat) see every allocation.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's defaults trade memory for speed in ways a short process does not need. It asks for
/// transparent huge pages on its arenas (a 2 MB page resident, and zeroed, for a few small
/// values): that is compiled out (libmimalloc-sys's `no_thp`), since the arena it would apply to
/// is reserved by the first allocation, before `main` could set the option. It keeps freed pages
/// 10 ms before it returns them to the kernel, which is turned off here: a run's stages may
/// hold memory for minutes (reading a workflow gets a delay of its own:
/// [`return_freed_pages_late`]). A value the environment gives (`MIMALLOC_PURGE_DELAY`) is
/// left as it is.
fn return_freed_pages_at_once() {
    set_allocator_option(PURGE_DELAY, "MIMALLOC_PURGE_DELAY", 0);
}

/// Reading a workflow, which `check`, `plan` and every run begin with, allocates and frees
/// within a fraction of a second: the parser's memory, a part of the file at a time, is best
/// used again rather than returned to the kernel only to be faulted in again for the next part.
/// So freed pages are kept 1 ms while it is read (mimalloc's own default is 10 ms), and returned
/// at once again from the check on ([`App::load`], which `run` and `resume` go through, and
/// `check`). At 10,000 stages (wide and layers), against 10 ms: the highest peaks of `check`
/// and `plan` over 10 runs were 22.6-24.0 MB against 25.6-28.3 (with 10 ms, what the last
/// parts freed was still held at the end of the check, as much as timing had it), a fresh
/// dry-run's 22.4-23.8 against 25.3-26.9, in the same time but for the layers' `check` (+3-5
/// ms) and a fresh dry-run (+1-3 ms). Returning them at once while reading cost `check` 5-7 ms
/// more for 0.7-1.3 MB less.
fn return_freed_pages_late() {
    set_allocator_option(PURGE_DELAY, "MIMALLOC_PURGE_DELAY", 1);
}

// mimalloc's option number (`mi_option_t` in mimalloc.h; 15 in v2 and v3). A number it does
// not have is ignored without a word, so a test reads the option back.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn set_allocator_option(option: libmimalloc_sys::mi_option_t, name: &str, value: i64) {
    if std::env::var_os(name).is_none() {
        // SAFETY: sets one of mimalloc's documented options to a documented value; mimalloc
        // reads its options atomically, from any thread, at any time.
        unsafe { libmimalloc_sys::mi_option_set(option, value as _) };
    }
}

/// What `check` warns of in a workflow about to run, in one line: the first warning where it
/// is, how many more, and the command that shows them. A warning is something that runs but
/// likely not as meant (`${{ x }}` in a script), so a run says so rather than leave it to a
/// `check` nobody ran; one line, so that it does not bury the run's own output.
fn warnings_line(workflow: &Workflow, reference: &str) -> Option<String> {
    let warnings = workflow.warnings();
    let first = warnings.first()?;
    let at = match (first.file(), first.line_col()) {
        (Some(file), Some((line, column))) => format!("{}:{line}:{column}: ", file.display()),
        _ => String::new(),
    };
    let more = match warnings.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    Some(format!(
        "warning: {at}{}{more}; `stagegraph check {reference}` shows {}",
        first.message(),
        if warnings.len() == 1 { "it" } else { "them" }
    ))
}

/// Printing that ignores a closed stdout or stderr (`stagegraph runs | head -1`) instead of
/// panicking the way `println!` does.
/// Every secret the configuration names is redacted first (`stagegraph::redact`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = stagegraph::redact(format!($($arg)*));
        let _ = writeln!(std::io::stdout(), "{text}");
    }};
}
/// Print `text` made whole elsewhere (a plan, a record), redacted, without copying it into
/// another string first as `out!("{}", text)` would (the text of a plan of 10,000 stages is a
/// megabyte).
fn out_text(text: String) {
    use std::io::Write as _;
    let text = stagegraph::redact(text);
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = stagegraph::redact(format!($($arg)*));
        let _ = write!(std::io::stdout(), "{text}");
    }};
}
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = stagegraph::redact(format!($($arg)*));
        let _ = writeln!(std::io::stderr(), "{text}");
    }};
}
macro_rules! err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = stagegraph::redact(format!($($arg)*));
        let _ = write!(std::io::stderr(), "{text}");
    }};
}

// The command line's own modules, after the printing macros they use.
#[path = "cli/args.rs"]
mod args;
#[path = "cli/docs.rs"]
mod docs;
#[path = "cli/inspect.rs"]
mod inspect;
#[path = "cli/test.rs"]
mod test;

/// A failure of the command itself, with its exit code.
struct Failure {
    code: i32,
    message: String,
}

fn invalid(message: impl Into<String>) -> Failure {
    Failure {
        code: exit::INVALID,
        message: message.into(),
    }
}

fn main() -> ExitCode {
    return_freed_pages_at_once();
    stagegraph::release_relocations();
    // The process that stops this one's stages if it is killed is this program again.
    if let Some(code) = stagegraph::reaper() {
        return ExitCode::from(code);
    }
    // `COMPLETE=bash stagegraph` prints the shell's registration; the shell then calls back
    // with the words typed, and gets workflow names and run ids from this project.
    clap_complete::CompleteEnv::with_factory(<Cli as clap::CommandFactory>::command).complete();
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Check { .. } | Command::Plan { .. } | Command::Run(_) | Command::Resume { .. }
    ) {
        return_freed_pages_late();
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let color = match cli.color {
        Color::Always => true,
        Color::Never => false,
        // A terminal unless NO_COLOR is set (which wins over CLICOLOR_FORCE), CLICOLOR=0 says
        // not, or TERM=dumb; CLICOLOR_FORCE forces it off a terminal.
        Color::Auto => {
            anstream::AutoStream::choice(&std::io::stderr()) != anstream::ColorChoice::Never
        }
    };
    if let Err(message) = logging(cli.verbose, color) {
        errln!("error: {message}");
        return ExitCode::from(exit::INVALID as u8);
    }
    // A `--library` that is no folder (a typo, a checkout not made) would leave every workflow
    // of it "not found" with nothing to say why.
    if let Some(missing) = cli.libraries.iter().find(|dir| !cwd.join(dir).is_dir()) {
        let what = match cwd.join(missing).exists() {
            true => "is not a folder",
            false => "does not exist",
        };
        errln!(
            "error: --library {}: {} {what}\n  help: a library is a folder holding workflows/, \
             templates/ and schemas/",
            missing.display(),
            cwd.join(missing).display()
        );
        return ExitCode::from(exit::INVALID as u8);
    }
    // Before anything is printed or written: the keys the configuration names never are.
    stagegraph::register_secrets(&cwd);
    let mut engine = Engine::new(&cli.libraries, &cwd);
    let state_dir = cli
        .state_dir
        .clone()
        .map_or_else(|| engine.project().state_dir(), |d| cwd.join(d));
    let state_explicit = cli.state_dir.is_some();
    match &cli.command {
        Command::Mcp => return mcp(&engine, &cli, &cwd),
        Command::InstallHook(args) => return hook(args, &cwd, true),
        Command::UninstallHook(args) => return hook(args, &cwd, false),
        Command::Doctor { probe } => return doctor(&cwd, *probe),
        Command::Init { force } => return init(&cwd, *force),
        _ => {}
    }
    let state = StateDir {
        dir: state_dir,
        explicit: state_explicit,
    };
    // Commands that write to the state folder anyway keep parsed documents there; `check`,
    // `plan` and the rest leave it untouched. A state folder that does not exist yet is not
    // made for them (a workflow that records out of the project tree must leave none): what a
    // real run would keep is written after it, if it made the folder.
    let keeps_documents = match &cli.command {
        Command::Run(args) => Some(!args.exec.dry_run),
        Command::Resume { exec, .. } => Some(!exec.dry_run),
        _ => None,
    };
    if let Some(hold) = keeps_documents {
        engine.keep_documents(&state, hold);
    }
    let app = App {
        engine,
        state,
        color,
    };
    let code = match app.dispatch(cli.command) {
        Ok(code) => code,
        Err(failure) => {
            if !failure.message.is_empty() {
                errln!("error: {}", failure.message);
            }
            failure.code
        }
    };
    if keeps_documents.is_some() {
        app.engine.write_held_documents(&app.state);
    }
    ExitCode::from(code as u8)
}

fn mcp(engine: &Engine, cli: &Cli, cwd: &Path) -> ExitCode {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("stagegraph"));
    let state_dir = cli.state_dir.as_ref().map(|d| cwd.join(d));
    match stagegraph::serve_mcp(engine, state_dir, exe) {
        Ok(()) => ExitCode::from(exit::SUCCESS as u8),
        Err(error) => {
            errln!("error: mcp: {error}");
            ExitCode::from(exit::FAILED as u8)
        }
    }
}

fn hook(args: &HookArgs, cwd: &Path, install: bool) -> ExitCode {
    let scope = match args.scope {
        HookScope::Project => SettingsScope::Project,
        HookScope::Local => SettingsScope::Local,
        HookScope::User => SettingsScope::User,
    };
    let change = match HookChange::plan(scope, cwd, install) {
        Ok(change) => change,
        Err(error) => {
            errln!("error: {error}");
            return ExitCode::from(exit::INVALID as u8);
        }
    };
    if args.dry_run {
        print!("{}", change.diff());
        if !change.changes() {
            errln!("{}: nothing to change", change.path.display());
        }
        return ExitCode::from(exit::SUCCESS as u8);
    }
    let applied = match change.apply() {
        Ok(true) => {
            let verb = if install {
                "added the context-update hooks (Stop, SessionEnd) to"
            } else {
                "removed the context-update hooks from"
            };
            errln!("{verb} {}", change.path.display());
            true
        }
        Ok(false) => {
            errln!("{}: nothing to change", change.path.display());
            true
        }
        Err(error) => {
            errln!("error: {error}");
            false
        }
    };
    if !applied {
        return ExitCode::from(exit::FAILED as u8);
    }
    if install && args.enable {
        let claude_md = cwd.join("CLAUDE.md");
        match stagegraph::enable_toggle(&claude_md) {
            Ok(Toggle::AlreadyOn) => {
                errln!(
                    "{}: background context already enabled",
                    claude_md.display()
                );
            }
            Ok(Toggle::TurnedOn) => {
                errln!("{}: background context turned on", claude_md.display());
            }
            Ok(Toggle::Added) => errln!(
                "{}: added \"- Background context: enabled\"",
                claude_md.display()
            ),
            Err(error) => {
                errln!("error: {error}");
                return ExitCode::from(exit::FAILED as u8);
            }
        }
    }
    if install {
        errln!("");
        print_findings(&stagegraph::doctor(cwd, false));
    }
    ExitCode::from(exit::SUCCESS as u8)
}

/// Logging to stderr, off unless `-v` or STAGEGRAPH_LOG asks: `-v` info, `-vv` debug, `-vvv`
/// trace, of this program's events only; STAGEGRAPH_LOG is an env-filter directive list and
/// wins. Every line is redacted as the rest of stderr is.
fn logging(verbose: u8, color: bool) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("STAGEGRAPH_LOG") {
        Ok(directives) if !directives.trim().is_empty() => EnvFilter::try_new(&directives)
            .map_err(|e| format!("STAGEGRAPH_LOG=`{directives}`: {e}"))?,
        _ => match verbose {
            0 => return Ok(()),
            1 => EnvFilter::new("stagegraph=info"),
            2 => EnvFilter::new("stagegraph=debug"),
            _ => EnvFilter::new("stagegraph=trace"),
        },
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| Redacted)
        .with_ansi(color)
        .with_target(false)
        .try_init()
        .map_err(|e| format!("cannot start logging: {e}"))
}

/// stderr, through the redaction of every secret the configuration names.
struct Redacted;

impl std::io::Write for Redacted {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let text = stagegraph::redact(String::from_utf8_lossy(bytes).into_owned());
        std::io::stderr().write_all(text.as_bytes())?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// `stagegraph init`: the files written, then what to do next.
fn init(cwd: &Path, force: bool) -> ExitCode {
    // Pinned as `stagegraph test` pins it, so that the recording replays there.
    if std::env::var_os("STAGEGRAPH_NOW").is_none() {
        std::env::set_var("STAGEGRAPH_NOW", args::DEFAULT_TEST_NOW);
    }
    match stagegraph::init(cwd, force) {
        Ok(done) => {
            for file in &done.files {
                errln!("created {}", file.display());
            }
            errln!(
                "\nnext:\n  stagegraph run hello --input name=ada    # HELLO ADA; ADA WRITES TOML\n  stagegraph test                         # the case in workflows/hello.test.toml, replayed\n  stagegraph check                        # every workflow of the project\nthen edit workflows/hello.toml, or point [models.shout] in stagegraph.toml at a real model"
            );
            ExitCode::from(exit::SUCCESS as u8)
        }
        Err(error) => {
            errln!("error: {error}");
            let code = match error {
                stagegraph::InitError::Exists(_) => exit::INVALID,
                _ => exit::FAILED,
            };
            ExitCode::from(code as u8)
        }
    }
}

/// `stagegraph doctor`.
fn doctor(cwd: &Path, probe: bool) -> ExitCode {
    let findings = stagegraph::doctor(cwd, probe);
    print_findings(&findings);
    let broken = findings
        .iter()
        .filter(|finding| finding.level == stagegraph::Level::Broken)
        .count();
    if broken == 0 {
        ExitCode::from(exit::SUCCESS as u8)
    } else {
        errln!("{broken} thing(s) to fix");
        ExitCode::from(exit::FAILED as u8)
    }
}

fn print_findings(findings: &[stagegraph::Finding]) {
    for finding in findings {
        errln!("{finding}");
    }
}

/// The workflow and inputs a run is given, and whether it goes on in the background.
struct Given {
    name: String,
    inputs: Vec<String>,
    inputs_json: Option<String>,
    detach: bool,
    /// Started by `--detach`: nobody reads its stdout.
    detached: bool,
}

struct App {
    engine: Engine,
    state: StateDir,
    color: bool,
}

impl App {
    fn dispatch(&self, command: Command) -> Result<i32, Failure> {
        match command {
            Command::List { format } => self.list(format),
            Command::Show {
                name,
                effective,
                format,
            } => self.show(&name, effective, format),
            Command::Check {
                names,
                format,
                deny_warnings,
            } => self.check(&names, format, deny_warnings),
            Command::Plan {
                name,
                explain: true,
                inputs,
                inputs_json,
                select,
                ..
            } => {
                // A dry-run that records nothing.
                let request = RunRequest {
                    dry_run: true,
                    explain: true,
                    quiet: true,
                    keep_runs: 0,
                    keep_runs_size: None,
                    no_record: true,
                    selection: select.selection(),
                    ..RunRequest::default()
                };
                let given = Given {
                    name,
                    inputs,
                    inputs_json,
                    detach: false,
                    detached: false,
                };
                self.run_with(&given, &request, RunFormat::Text)
            }
            Command::Plan {
                name,
                format,
                all_edges,
                run,
                select,
                ..
            } => self.plan(
                &name,
                format,
                all_edges,
                run.as_deref(),
                &select.selection(),
            ),
            Command::Run(args) => self.run(args),
            Command::Resume { run_id, exec } => self.resume(&run_id, exec),
            Command::Runs {
                action,
                format,
                filter,
            } => self.runs(action, format, &filter),
            Command::Completions { shell } => {
                let mut command = <Cli as clap::CommandFactory>::command();
                let mut out = std::io::stdout();
                clap_complete::generate(shell, &mut command, "stagegraph", &mut out);
                Ok(exit::SUCCESS)
            }
            Command::Man => {
                let command = <Cli as clap::CommandFactory>::command();
                let page = docs::man_page(command)
                    .map_err(|e| invalid(format!("cannot render the manual page: {e}")))?;
                out!("{page}");
                Ok(exit::SUCCESS)
            }
            Command::Docs { out } => {
                let written = docs::write_pages(&out).map_err(|e| Failure {
                    code: exit::FAILED,
                    message: e,
                })?;
                errln!("{written} page(s) written to {}", out.display());
                Ok(exit::SUCCESS)
            }
            Command::Schema { kind } => {
                let schema = match kind {
                    SchemaKind::Workflow => stagegraph::workflow_schema(),
                    SchemaKind::Config => stagegraph::config_schema(),
                    SchemaKind::Test => stagegraph::test_schema(),
                    SchemaKind::Builtins => stagegraph::builtins_schema(),
                };
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&schema).unwrap_or_default()
                );
                Ok(exit::SUCCESS)
            }
            Command::Recordings {
                action: args::RecordingsAction::Migrate { dir },
            } => self.migrate_recordings(&dir),
            Command::Eject { name } => self.eject(&name),
            Command::Test(args) => self.test(args),
            Command::Mcp
            | Command::InstallHook(_)
            | Command::UninstallHook(_)
            | Command::Doctor { .. }
            | Command::Init { .. } => {
                unreachable!("handled before the app is built")
            }
        }
    }

    fn print_diagnostics(&self, diagnostics: &[Diagnostic]) {
        for diagnostic in diagnostics {
            err!("{}", diagnostic.render(self.color));
        }
    }

    /// A checked workflow, never freed: the process ends soon after, and freeing the stages,
    /// templates and parsed document of a large workflow one by one takes longer than the
    /// process exit that reclaims them at once.
    fn load(&self, name: &str) -> Result<ManuallyDrop<Workflow>, Failure> {
        self.load_reading(name, false)
    }

    /// [`App::load`], reading the workflow's cache ahead (`cache::read_ahead`) with `cache`:
    /// from the start when its check is kept (reading it back is short, and nothing of a check
    /// is held meanwhile), once it is checked otherwise (the entries held through a check's peak
    /// of memory were 1.2 MB of it at 10,000 stages).
    fn load_reading(&self, name: &str, cache: bool) -> Result<ManuallyDrop<Workflow>, Failure> {
        self.engine
            .load_then(name, |name, kept| {
                if cache && kept {
                    self.state.read_ahead(name);
                }
                return_freed_pages_at_once();
            })
            .map(ManuallyDrop::new)
            .map_err(|diagnostics| {
                self.print_diagnostics(&diagnostics);
                let errors = diagnostics.iter().filter(|d| d.is_error()).count();
                // A workflow that was not found has nothing more to say than that.
                if diagnostics.iter().all(|d| d.file().is_none()) && errors == 1 {
                    return invalid("");
                }
                invalid(format!("workflow `{name}` is invalid ({errors} error(s))"))
            })
    }

    fn run(&self, args: RunArgs) -> Result<i32, Failure> {
        let given = Given {
            name: args.name,
            inputs: args.inputs,
            inputs_json: args.inputs_json,
            detach: args.detach,
            detached: args.detached,
        };
        let request = RunRequest {
            color: self.color,
            selection: args.select.selection(),
            ..args.exec.request()
        };
        self.run_with(&given, &request, args.exec.format)
    }

    fn run_with(
        &self,
        args: &Given,
        request: &RunRequest,
        format: RunFormat,
    ) -> Result<i32, Failure> {
        let workflow = self.load_reading(&args.name, !request.no_cache)?;
        // Its cache is read while the run is set up (see `cache::read_ahead`), if it is not yet.
        if !request.no_cache {
            self.state.read_ahead(workflow.name());
        }
        let always_zero = workflow.always_exit_zero();
        // A hook's host reads any other code as a verdict (2 blocks a Claude Code session): a
        // failure and an interruption (SIGINT, SIGTERM) exit 0 too; the record says which, and
        // stderr what went wrong.
        let zero_if = |outcome: Result<i32, Failure>| match outcome {
            Ok(code) if always_zero && (code == exit::FAILED || code == exit::INTERRUPTED) => {
                Ok(exit::SUCCESS)
            }
            Err(failure) if always_zero => {
                errln!("error: {}", failure.message);
                Ok(exit::SUCCESS)
            }
            outcome => outcome,
        };
        let cwd = self.engine.cwd();
        // A file named on the command line that is not there is a wrong command line, as a
        // workflow that is not there is: exit 2 whatever `always_exit_zero` says (a payload on
        // stdin that is not JSON is the hook's to forgive).
        if let Some(source) = args.inputs_json.as_deref().filter(|source| *source != "-") {
            if let Err(error) = std::fs::metadata(cwd.join(source)) {
                return Err(invalid(format!(
                    "cannot read --inputs-json {source}: {error}; give a file holding a JSON \
                     object, or - to read it from stdin"
                )));
            }
        }
        let inputs = match read_inputs(&workflow, args.inputs_json.as_deref(), &args.inputs, cwd) {
            Ok(inputs) => inputs,
            Err(error) => {
                let failure = invalid(error.message);
                let recorded = self.engine.record_early_failure(
                    &workflow,
                    Map::new(),
                    request,
                    &self.state,
                    &failure.message,
                );
                warn_unrecorded(recorded.err());
                return zero_if(Err(failure));
            }
        };
        // As a hook whose host reads its JSON output, stdout carries that alone: the notice of
        // a failure not told yet (this run's, or a detached run's since the last fire).
        let notice = || self.engine.failure_notice(&workflow, &inputs, &self.state);
        let hook = workflow.runs_as_hook(&inputs) && !args.detached;
        if !hook && !args.detached && !request.quiet {
            if let Some(line) = warnings_line(&workflow, &args.name) {
                errln!("{line}");
            }
        }
        if args.detach {
            if hook {
                if let Some(line) = notice() {
                    outln!("{line}");
                }
            }
            let started = detach(&inputs).map_err(|error| Failure {
                code: exit::FAILED,
                message: format!("cannot start the run in the background: {error}"),
            });
            return zero_if(started.map(|()| exit::SUCCESS));
        }
        let told: Option<&dyn Fn() -> Option<String>> = if hook { Some(&notice) } else { None };
        zero_if(self.execute(&workflow, inputs.clone(), request, format, None, told))
    }

    /// Run the workflow and print what it gives; where `notice` gives a line for the hook's
    /// host, stdout gets it in place of the outputs.
    fn execute(
        &self,
        workflow: &Workflow,
        inputs: Map<String, Value>,
        request: &RunRequest,
        format: RunFormat,
        resume: Option<ResumeFrom>,
        notice: Option<&dyn Fn() -> Option<String>>,
    ) -> Result<i32, Failure> {
        let _ = ctrlc::set_handler(|| {
            std::thread::spawn(stagegraph::interrupt);
        });
        let record = self
            .engine
            .run(workflow, inputs, request, &self.state, resume)
            .map_err(|failure| {
                self.print_diagnostics(&failure.diagnostics);
                warn_unrecorded(failure.unrecorded);
                Failure {
                    code: failure.code,
                    message: failure.message,
                }
            })?;
        match notice.and_then(|notice| notice()) {
            Some(line) => {
                outln!("{line}");
                print_run(&record, request, format, false);
            }
            None => print_run(&record, request, format, true),
        }
        if let Some(Err(warning)) = record.export_trace() {
            errln!("warning: the run's trace was not exported: {warning}");
        }
        Ok(match record.status() {
            RunStatus::Completed | RunStatus::Exited => exit::SUCCESS,
            RunStatus::Interrupted => exit::INTERRUPTED,
            RunStatus::Failed | RunStatus::Running => exit::FAILED,
        })
    }

    fn resume(&self, run_id: &str, exec: ExecArgs) -> Result<i32, Failure> {
        let (previous, reference, from) = self
            .engine
            .recorded_run(&self.state, run_id)
            .map_err(invalid)?;
        let workflow = self.load(&reference)?;
        let inputs = stagegraph::resume_inputs(&workflow, previous.inputs()).map_err(|error| {
            invalid(format!(
                "cannot resume run {}: its recorded inputs do not do for the workflow now: {}; \
                 a resume takes no inputs (a run that failed before its first stage recorded \
                 none), so start it again: `stagegraph run {reference}` with its inputs",
                previous.run_id(),
                error.message
            ))
        })?;
        let code = self.execute(
            &workflow,
            inputs,
            &RunRequest {
                color: self.color,
                ..exec.request()
            },
            exec.format,
            Some(from),
            None,
        )?;
        let always_zero = workflow.always_exit_zero();
        Ok(
            if always_zero && (code == exit::FAILED || code == exit::INTERRUPTED) {
                exit::SUCCESS
            } else {
                code
            },
        )
    }
}

/// Starts this same command again without `--detach`, in a new session (so the caller's end, and
/// the signals it sends its process group, do not reach it), with the checked inputs on its
/// stdin in place of every `--input` and `--inputs-json`, and returns without waiting for it.
/// Its stdout and stderr go nowhere: the run record tells what it did.
fn detach(inputs: &Map<String, Value>) -> std::io::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let mut kept: Vec<std::ffi::OsString> = Vec::new();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        match text.as_ref() {
            "--detach" => {}
            "--input" | "-i" | "--inputs-json" => {
                args.next();
            }
            _ if text.starts_with("--input=")
                || text.starts_with("--inputs-json=")
                || (text.starts_with("-i") && text.len() > 2) => {}
            _ => kept.push(arg),
        }
    }
    kept.push("--inputs-json".into());
    kept.push("-".into());
    kept.push("--detached".into());
    let stdin = Value::Object(inputs.clone()).to_string();
    stagegraph::spawn_detached(&std::env::current_exe()?, &kept, stdin.as_bytes())
}

fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

fn warn_unrecorded(error: Option<String>) {
    if let Some(error) = error {
        errln!("warning: cannot write the run record: {error}");
    }
}

/// What stdout and stderr get at the end of a run: the outputs (or the JSON document, or the
/// `outputs` event), the explain verdicts, the summary line and the cost.
fn print_run(record: &RunRecord, request: &RunRequest, format: RunFormat, print_outputs: bool) {
    if print_outputs && format == RunFormat::Json {
        outln!("{}", pretty(&record.result_json(request.explain)));
    } else if let Some(text) = record
        .outputs_text(request.json_events)
        .filter(|_| print_outputs)
    {
        outln!("{text}");
    }
    if request.explain && format != RunFormat::Json {
        let verdicts = record.verdicts();
        let width = verdicts.iter().map(|(id, _)| id.len()).max().unwrap_or(0);
        for (id, verdict) in verdicts {
            outln!("{id:width$}  {verdict}");
        }
    }
    if !request.quiet || record.status() == RunStatus::Failed {
        errln!("run {} {}", record.run_id(), record.summary());
    }
    if !request.quiet {
        for line in record.tally_lines(request.color) {
            errln!("{line}");
        }
        for line in record.cost_lines() {
            errln!("{line}");
        }
    }
}

#[cfg(all(test, not(feature = "system-allocator")))]
mod tests {
    use super::PURGE_DELAY;

    /// mimalloc ignores an option number it does not have (and reads it as 0), so an option
    /// set under the wrong number is silently not set: it is set to two values and read back.
    #[test]
    fn the_purge_delay_is_the_option_mimalloc_reads() {
        for value in [7, 0] {
            // SAFETY: a documented option set to a documented value, read back atomically.
            let read = unsafe {
                libmimalloc_sys::mi_option_set(PURGE_DELAY, value);
                libmimalloc_sys::mi_option_get(PURGE_DELAY)
            };
            assert_eq!(read, value);
        }
    }
}
