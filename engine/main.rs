//! The command line: parses arguments, calls the library, prints, and maps outcomes to the
//! documented exit codes.

use std::io::IsTerminal;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{Map, Value};

use stagegraph::diag::Diagnostic;
use stagegraph::engine::{read_inputs, RunRequest, StateDir};
use stagegraph::exit;
use stagegraph::library::Library;
use stagegraph::load::documents::Documents;
use stagegraph::models::Models;
use stagegraph::plan::Plan;
use stagegraph::run::{self, record, RunStatus, JSON_VERSION};
use stagegraph::Engine;

/// A run of many small stages allocates and frees many small values: with mimalloc a no-op
/// rerun of 10,000 stages took 0.19 s instead of 0.25 s (README, "Benchmark").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Printing that ignores a closed stdout or stderr (`stagegraph runs | head -1`) instead of
/// panicking the way `println!` does.
/// Every secret the configuration names is redacted first (`floor::secrets`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = stagegraph::floor::secrets::redact_string(format!($($arg)*));
        let _ = writeln!(std::io::stdout(), "{text}");
    }};
}
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = stagegraph::floor::secrets::redact_string(format!($($arg)*));
        let _ = write!(std::io::stdout(), "{text}");
    }};
}
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = stagegraph::floor::secrets::redact_string(format!($($arg)*));
        let _ = writeln!(std::io::stderr(), "{text}");
    }};
}
macro_rules! err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = stagegraph::floor::secrets::redact_string(format!($($arg)*));
        let _ = write!(std::io::stderr(), "{text}");
    }};
}

#[derive(Parser)]
#[command(
    name = "stagegraph",
    version,
    about = "Run declarative stage graphs: TOML workflows of predicates, prompts, commands and built-ins",
    long_about = "stagegraph runs workflows described as TOML stage graphs.\n\n\
        Workflows are found by name along the search path: --library folders, STAGEGRAPH_PATH, \
        .stagegraph/ in the current directory, ~/.config/stagegraph/, then the built-in library \
        (embedded in the binary). A path ending in .toml names a file directly.\n\n\
        Exit codes: 0 success (completed, or ended early by exit_if), 1 the run failed, \
        2 the workflow, its inputs or the command line are invalid, 130 interrupted."
)]
struct Cli {
    /// A library folder (holding workflows/, templates/, schemas/) searched first; repeatable.
    #[arg(long = "library", short = 'L', global = true, value_name = "DIR")]
    libraries: Vec<PathBuf>,
    /// Where run records, the cache and state live (default: .stagegraph/).
    #[arg(long, global = true, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Colour in diagnostics.
    #[arg(long, global = true, value_enum, default_value_t = Color::Auto)]
    color: Color,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Color {
    Auto,
    Always,
    Never,
}

#[derive(Subcommand)]
enum Command {
    /// List the workflows on the search path.
    #[command(
        after_help = "Examples:\n  stagegraph list\n  stagegraph list --format json\n  stagegraph -L ./my-library list"
    )]
    List {
        #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
        format: TextOrJson,
    },
    /// Print a workflow's TOML.
    #[command(
        after_help = "Examples:\n  stagegraph show refresh\n  stagegraph show refresh --effective\n  stagegraph show .stagegraph/workflows/refresh.toml --effective --format json"
    )]
    Show {
        /// A workflow name or a path to a .toml file.
        name: String,
        /// Print the merged workflow (overlays applied), each key with the file and line it came from.
        #[arg(long)]
        effective: bool,
        /// With --effective: toml (annotated) or json.
        #[arg(long, value_enum, default_value_t = ShowFormat::Toml)]
        format: ShowFormat,
    },
    /// Check workflows statically: syntax, keys, references, cycles, templates, schemas.
    #[command(
        after_help = "Examples:\n  stagegraph check\n  stagegraph check my.toml --deny-warnings\n  stagegraph check --format github          # annotations on a pull request\n  stagegraph check refresh --format json"
    )]
    Check {
        /// Workflow names or .toml paths; none checks every workflow on the search path.
        names: Vec<String>,
        #[arg(long, value_enum, default_value_t = CheckFormat::Text)]
        format: CheckFormat,
        /// Fail on warnings too.
        #[arg(long)]
        deny_warnings: bool,
    },
    /// Show the graph in execution order.
    #[command(
        after_help = "Examples:\n  stagegraph plan context-update\n  stagegraph plan refresh --format mermaid\n  stagegraph plan my.toml --format dot | dot -Tsvg > plan.svg\n  stagegraph plan refresh --explain --input name=vite"
    )]
    Plan {
        name: String,
        #[arg(long, value_enum, default_value_t = PlanFormat::Text)]
        format: PlanFormat,
        /// Say for each stage whether a run would reuse it from the cache, and on a miss what
        /// changed (a dry-run with these inputs; see `run --explain`).
        #[arg(long)]
        explain: bool,
        /// With --explain: an input, K=V.
        #[arg(long = "input", short = 'i', value_name = "K=V")]
        inputs: Vec<String>,
        /// With --explain: inputs as a JSON object from a file or - for stdin.
        #[arg(long, value_name = "FILE|-")]
        inputs_json: Option<String>,
    },
    /// Run a workflow.
    #[command(
        after_help = "Examples:\n  stagegraph run my.toml --input name=world\n  stagegraph run context-update --inputs-json payload.json\n  stagegraph run refresh --input name=vite --dry-run --explain\n  stagegraph run compound --input context=\"the retry fix\" --record rec/\n  stagegraph run compound --dry-run --replay rec/\n  stagegraph run discard --answer confirm=y\n  stagegraph run my.toml --format json | jq .outputs"
    )]
    Run(RunArgs),
    /// Run a recorded run again with its inputs, reusing every stage whose fingerprint is unchanged.
    #[command(
        after_help = "Examples:\n  stagegraph resume last\n  stagegraph resume 20261130T0015 --explain\n  stagegraph resume last --no-cache --jobs 1"
    )]
    Resume {
        /// A run id, a unique prefix of one, or `last`.
        run_id: String,
        #[command(flatten)]
        exec: ExecArgs,
    },
    /// The run history.
    #[command(
        after_help = "Examples:\n  stagegraph runs\n  stagegraph runs --format json\n  stagegraph runs show last\n  stagegraph runs show last --stage writer\n  stagegraph runs prune --keep 10"
    )]
    Runs {
        #[command(subcommand)]
        action: Option<RunsAction>,
        #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
        format: TextOrJson,
    },
    /// Print the JSON Schema of the workflow or config format.
    #[command(
        after_help = "Examples:\n  stagegraph schema workflow > workflow.schema.json\n  stagegraph schema config"
    )]
    Schema {
        #[arg(value_enum, default_value_t = SchemaKind::Workflow)]
        kind: SchemaKind,
    },
    /// Copy a workflow with its templates and schemas into .stagegraph/ to own it.
    #[command(
        after_help = "Examples:\n  stagegraph eject refresh\n  stagegraph -L ./shared eject compound"
    )]
    Eject { name: String },
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  stagegraph completions bash > ~/.local/share/bash-completion/completions/stagegraph\n  stagegraph completions zsh > ~/.zfunc/_stagegraph\n  stagegraph completions fish > ~/.config/fish/completions/stagegraph.fish"
    )]
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff).
    #[command(
        after_help = "Examples:\n  stagegraph man > ~/.local/share/man/man1/stagegraph.1\n  stagegraph man | man -l -"
    )]
    Man,
    /// Serve the workflows as tools over the Model Context Protocol, on stdio.
    #[command(
        after_help = "Examples:\n  stagegraph mcp\n  claude mcp add stagegraph -- stagegraph mcp"
    )]
    Mcp,
    /// Add the context-update Stop hook to a Claude Code settings file (merged, idempotent).
    #[command(
        after_help = "Examples:\n  stagegraph install-hook --dry-run\n  stagegraph install-hook --scope user"
    )]
    InstallHook(HookArgs),
    /// Remove exactly the hook `install-hook` added.
    #[command(
        after_help = "Examples:\n  stagegraph uninstall-hook\n  stagegraph uninstall-hook --scope user --dry-run"
    )]
    UninstallHook(HookArgs),
}

#[derive(Args)]
struct RunArgs {
    /// A workflow name or a path to a .toml file.
    name: String,
    /// An input, typed by its declaration: --input manual=true; repeatable.
    #[arg(long = "input", short = 'i', value_name = "K=V")]
    inputs: Vec<String>,
    /// Inputs as a JSON object from a file, or - for stdin (unknown keys are ignored).
    #[arg(long, value_name = "FILE|-")]
    inputs_json: Option<String>,
    /// Check the inputs, then go on in the background, in a session of its own, and exit 0 at
    /// once: for a hook whose host ends (and kills what it started) before the run would.
    #[arg(long)]
    detach: bool,
    #[command(flatten)]
    exec: ExecArgs,
}

#[derive(Args)]
struct ExecArgs {
    /// Walk the graph with no side effects: commands, writes and model calls are not made.
    #[arg(long)]
    dry_run: bool,
    /// With --dry-run: print every rendered prompt.
    #[arg(long)]
    show_prompts: bool,
    /// A dry-run that says, for each stage, whether it would be reused from the cache and, if
    /// not, what changed since the last run (implies --dry-run).
    #[arg(long)]
    explain: bool,
    /// Stages at once (default: the number of cores).
    #[arg(long, short = 'j')]
    jobs: Option<usize>,
    /// Ignore the cache.
    #[arg(long)]
    no_cache: bool,
    /// Save every model exchange in DIR.
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    /// Answer model requests from recordings in DIR.
    #[arg(long, value_name = "DIR")]
    replay: Option<PathBuf>,
    /// What stdout gets: text (the outputs), json (one document at the end) or events (JSON
    /// lines as the run goes).
    #[arg(long, value_enum, default_value_t = RunFormat::Text)]
    format: RunFormat,
    /// The same as --format events.
    #[arg(long, hide = true)]
    json: bool,
    /// Only errors on stderr.
    #[arg(long, short = 'q')]
    quiet: bool,
    /// Keep the newest N runs of each workflow (0 keeps all).
    #[arg(long, default_value_t = 50)]
    keep_runs: usize,
    /// Spend at most USD on model calls: a call that would exceed it is not started and its
    /// stage fails (with `[workflow] budget_usd` too, the lower one holds).
    #[arg(long, value_name = "USD")]
    max_cost: Option<f64>,
    /// Answer the `ask` stage STAGE with VALUE, one of its choices (every item of a foreach);
    /// repeatable.
    #[arg(long = "answer", value_name = "STAGE=VALUE")]
    answers: Vec<String>,
    /// Answer every `ask` stage not given an --answer with its `yes` choice (default: its
    /// first).
    #[arg(long, short = 'y')]
    yes: bool,
}

impl ExecArgs {
    /// The run the options ask for.
    fn request(&self) -> RunRequest {
        RunRequest {
            dry_run: self.dry_run,
            show_prompts: self.show_prompts,
            explain: self.explain,
            jobs: self.jobs,
            no_cache: self.no_cache,
            record: self.record.clone(),
            replay: self.replay.clone(),
            quiet: self.quiet,
            // Events as JSON lines on stdout (`--format events`, or the older `--json`).
            json_events: self.json || self.format == RunFormat::Events,
            keep_runs: self.keep_runs,
            max_cost: self.max_cost,
            answers: self.answers.clone(),
            yes: self.yes,
            no_record: false,
        }
    }
}

#[derive(Args)]
struct HookArgs {
    /// Which settings file: project (.claude/settings.json), local (.claude/settings.local.json)
    /// or user (~/.claude/settings.json).
    #[arg(long, value_enum, default_value_t = HookScope::Project)]
    scope: HookScope,
    /// Print the change as a diff; write nothing.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum HookScope {
    Project,
    Local,
    User,
}

#[derive(Subcommand)]
enum RunsAction {
    /// Print one run.
    #[command(
        after_help = "Examples:\n  stagegraph runs show last\n  stagegraph runs show last --format json\n  stagegraph runs show 20261130T0015 --stage writer"
    )]
    Show {
        /// A run id, a unique prefix, or `last` (the newest run that was not a dry-run).
        run_id: String,
        /// text, or json (run.json, with `version`).
        #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
        format: TextOrJson,
        /// The same as --format json.
        #[arg(long, hide = true)]
        json: bool,
        /// Print this stage's output.
        #[arg(long)]
        stage: Option<String>,
    },
    /// Remove all but the newest runs of each workflow.
    #[command(after_help = "Examples:\n  stagegraph runs prune\n  stagegraph runs prune --keep 5")]
    Prune {
        #[arg(long, default_value_t = 50)]
        keep: usize,
    },
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum TextOrJson {
    Text,
    Json,
}

/// What `run` prints on stdout.
#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum RunFormat {
    /// The outputs: a single string output as its text, anything else as JSON.
    Text,
    /// One JSON document at the end: `version`, run id, workflow, status, exit, error, outputs.
    Json,
    /// Events as JSON lines while the run goes on, then an `outputs` event.
    Events,
}

#[derive(Clone, Copy, ValueEnum)]
enum ShowFormat {
    Toml,
    Json,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum CheckFormat {
    Text,
    Json,
    Github,
}

#[derive(Clone, Copy, ValueEnum)]
enum PlanFormat {
    Text,
    Json,
    Dot,
    Mermaid,
}

#[derive(Clone, Copy, ValueEnum)]
enum SchemaKind {
    Workflow,
    Config,
}

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
    let cli = Cli::parse();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let color = match cli.color {
        Color::Always => true,
        Color::Never => false,
        Color::Auto => std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    };
    let state_dir = cli
        .state_dir
        .clone()
        .map_or_else(|| cwd.join(".stagegraph"), |d| cwd.join(d));
    let state_explicit = cli.state_dir.is_some();
    // Before anything is printed or written: the keys the configuration names never are.
    stagegraph::models::register_secrets(&cwd);
    match &cli.command {
        Command::Mcp => return mcp(&cli, &cwd),
        Command::InstallHook(args) => return hook(args, &cwd, true),
        Command::UninstallHook(args) => return hook(args, &cwd, false),
        _ => {}
    }
    let mut engine = Engine::new(&cli.libraries, &cwd);
    // Commands that write to the state folder anyway keep parsed documents there; `check`,
    // `plan` and the rest leave it untouched. A state folder that does not exist yet is not
    // made for them: a workflow that records out of the project tree must leave none.
    if matches!(cli.command, Command::Run(_) | Command::Resume { .. })
        && (state_explicit || state_dir.is_dir())
    {
        engine.documents = Some(Documents::new(state_dir.join("cache").join("documents")));
    }
    let app = App {
        engine,
        state: StateDir {
            dir: state_dir,
            explicit: state_explicit,
        },
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
    ExitCode::from(code as u8)
}

fn mcp(cli: &Cli, cwd: &Path) -> ExitCode {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("stagegraph"));
    let options = stagegraph::mcp::McpOptions {
        libraries: cli.libraries.iter().map(|d| cwd.join(d)).collect(),
        state_dir: cli.state_dir.as_ref().map(|d| cwd.join(d)),
        cwd: cwd.to_path_buf(),
        exe,
    };
    match stagegraph::mcp::serve(options) {
        Ok(()) => ExitCode::from(exit::SUCCESS as u8),
        Err(error) => {
            errln!("error: mcp: {error}");
            ExitCode::from(exit::FAILED as u8)
        }
    }
}

fn hook(args: &HookArgs, cwd: &Path, install: bool) -> ExitCode {
    use stagegraph::claude::{HookChange, SettingsScope};
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
    match change.apply() {
        Ok(true) => {
            let verb = if install {
                "added the context-update Stop hook to"
            } else {
                "removed the context-update Stop hook from"
            };
            errln!("{verb} {}", change.path.display());
            ExitCode::from(exit::SUCCESS as u8)
        }
        Ok(false) => {
            errln!("{}: nothing to change", change.path.display());
            ExitCode::from(exit::SUCCESS as u8)
        }
        Err(error) => {
            errln!("error: {error}");
            ExitCode::from(exit::FAILED as u8)
        }
    }
}

/// The workflow and inputs a run is given, and whether it goes on in the background.
struct Given {
    name: String,
    inputs: Vec<String>,
    inputs_json: Option<String>,
    detach: bool,
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
                ..
            } => {
                // A dry-run that records nothing.
                let request = RunRequest {
                    dry_run: true,
                    explain: true,
                    quiet: true,
                    keep_runs: 0,
                    no_record: true,
                    ..RunRequest::default()
                };
                let given = Given {
                    name,
                    inputs,
                    inputs_json,
                    detach: false,
                };
                self.run_with(&given, &request, RunFormat::Text)
            }
            Command::Plan { name, format, .. } => self.plan(&name, format),
            Command::Run(args) => self.run(args),
            Command::Resume { run_id, exec } => self.resume(&run_id, exec),
            Command::Runs { action, format } => self.runs(action, format),
            Command::Completions { shell } => {
                let mut command = <Cli as clap::CommandFactory>::command();
                let mut out = std::io::stdout();
                clap_complete::generate(shell, &mut command, "stagegraph", &mut out);
                Ok(exit::SUCCESS)
            }
            Command::Man => {
                let command = <Cli as clap::CommandFactory>::command();
                let mut page = Vec::new();
                clap_mangen::Man::new(command)
                    .render(&mut page)
                    .map_err(|e| invalid(format!("cannot render the manual page: {e}")))?;
                out!("{}", String::from_utf8_lossy(&page));
                Ok(exit::SUCCESS)
            }
            Command::Schema { kind } => {
                let schema = match kind {
                    SchemaKind::Workflow => stagegraph::format::workflow_schema(),
                    SchemaKind::Config => Models::config_schema(),
                };
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&schema).unwrap_or_default()
                );
                Ok(exit::SUCCESS)
            }
            Command::Eject { name } => self.eject(&name),
            Command::Mcp | Command::InstallHook(_) | Command::UninstallHook(_) => {
                unreachable!("handled before the app is built")
            }
        }
    }

    /// No workflow of that name: with the nearest name on the search path, as `run` says it.
    fn no_workflow(&self, name: &str) -> Failure {
        invalid(self.engine.no_workflow(name))
    }

    fn print_diagnostics(&self, diagnostics: &[Diagnostic]) {
        for diagnostic in diagnostics {
            err!("{}", diagnostic.render(self.color));
        }
    }

    /// A checked workflow, never freed: the process ends soon after, and freeing the stages,
    /// templates and parsed document of a large workflow one by one takes longer than the
    /// process exit that reclaims them at once.
    fn load(&self, name: &str) -> Result<ManuallyDrop<stagegraph::check::Workflow>, Failure> {
        self.load_then(name, |_| {})
    }

    fn load_then(
        &self,
        name: &str,
        loaded: impl FnOnce(&str),
    ) -> Result<ManuallyDrop<stagegraph::check::Workflow>, Failure> {
        self.engine
            .load_then(name, loaded)
            .map(ManuallyDrop::new)
            .map_err(|diagnostics| {
                self.print_diagnostics(&diagnostics);
                let errors = diagnostics.iter().filter(|d| d.is_error()).count();
                // A workflow that was not found has nothing more to say than that.
                if diagnostics.iter().all(|d| d.location.is_none()) && errors == 1 {
                    return invalid("");
                }
                invalid(format!("workflow `{name}` is invalid ({errors} error(s))"))
            })
    }

    fn list(&self, format: TextOrJson) -> Result<i32, Failure> {
        let workflows = self.engine.list();
        if format == TextOrJson::Json {
            let listed: Vec<Value> = workflows
                .iter()
                .map(|w| {
                    serde_json::json!({
                        "name": w.name,
                        "description": w.description,
                        "library": w.library.display(),
                        "origin": w.library.origin.to_string(),
                        "overlays": w.overlays.iter().map(Library::display).collect::<Vec<_>>(),
                    })
                })
                .collect();
            let doc = serde_json::json!({ "version": JSON_VERSION, "workflows": listed });
            outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
            return Ok(exit::SUCCESS);
        }
        if workflows.is_empty() {
            errln!("no workflows on the search path");
        }
        let width = workflows.iter().map(|w| w.name.len()).max().unwrap_or(0);
        for w in &workflows {
            outln!("{:width$}  {}  [{}]", w.name, w.description, w.origin());
        }
        Ok(exit::SUCCESS)
    }

    fn show(&self, name: &str, effective: bool, format: ShowFormat) -> Result<i32, Failure> {
        if !effective {
            let found = self
                .engine
                .search
                .find_workflow(name, &self.engine.cwd)
                .ok_or_else(|| self.no_workflow(name))?;
            out!("{}", found.source.text);
            return Ok(exit::SUCCESS);
        }
        let raw = self.engine.load_raw(name).map_err(|d| {
            self.print_diagnostics(&d);
            invalid(format!("workflow `{name}` is invalid"))
        })?;
        match format {
            ShowFormat::Json => {
                let mut doc = Map::new();
                doc.insert("version".into(), JSON_VERSION.into());
                doc.extend(raw.effective_json());
                outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
            }
            ShowFormat::Toml => out!("{}", raw.effective_toml()),
        }
        Ok(exit::SUCCESS)
    }

    fn check(
        &self,
        names: &[String],
        format: CheckFormat,
        deny_warnings: bool,
    ) -> Result<i32, Failure> {
        let report = self.engine.check_all(names);
        let all = &report.diagnostics;
        let summary = &report.summary;
        match format {
            CheckFormat::Text => {
                self.print_diagnostics(all);
                // The summary never contradicts the exit code: warnings denied fail, and an
                // error outside every workflow (the model configuration) is counted on its own.
                for (name, errors, warnings) in summary {
                    let verdict = match (*errors, *warnings) {
                        (e, _) if e > 0 => "invalid",
                        (_, w) if w > 0 && deny_warnings => "failed (warnings denied)",
                        _ => "ok",
                    };
                    errln!("{name}: {verdict} ({errors} error(s), {warnings} warning(s))");
                }
                let outside = report.errors_outside();
                if outside > 0 {
                    errln!("check failed: {outside} error(s) outside the workflows");
                }
            }
            CheckFormat::Json => {
                let out = serde_json::json!({
                    "version": JSON_VERSION,
                    "workflows": summary.iter().map(|(n, e, w)| serde_json::json!({"name": n, "errors": e, "warnings": w})).collect::<Vec<_>>(),
                    "diagnostics": all.iter().map(Diagnostic::to_json).collect::<Vec<_>>(),
                });
                outln!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
            }
            CheckFormat::Github => {
                for d in all {
                    outln!("{}", d.to_github(&self.engine.cwd));
                }
            }
        }
        Ok(if report.failed(deny_warnings) {
            exit::INVALID
        } else {
            exit::SUCCESS
        })
    }

    fn plan(&self, name: &str, format: PlanFormat) -> Result<i32, Failure> {
        let workflow = self.load(name)?;
        let plan = Plan::new(&workflow);
        match format {
            PlanFormat::Text => out!("{}", plan.to_text()),
            PlanFormat::Json => outln!(
                "{}",
                serde_json::to_string_pretty(&plan.to_json()).unwrap_or_default()
            ),
            PlanFormat::Dot => out!("{}", plan.to_dot()),
            PlanFormat::Mermaid => out!("{}", plan.to_mermaid()),
        }
        Ok(exit::SUCCESS)
    }

    fn run(&self, args: RunArgs) -> Result<i32, Failure> {
        let given = Given {
            name: args.name,
            inputs: args.inputs,
            inputs_json: args.inputs_json,
            detach: args.detach,
        };
        self.run_with(&given, &args.exec.request(), args.exec.format)
    }

    fn run_with(
        &self,
        args: &Given,
        request: &RunRequest,
        format: RunFormat,
    ) -> Result<i32, Failure> {
        let read_ahead = !request.no_cache;
        let workflow = self.load_then(&args.name, |workflow| {
            if read_ahead {
                run::cache::read_ahead(&self.state.dir, workflow);
            }
        })?;
        let always_zero = workflow.always_exit_zero;
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
        let cwd = &self.engine.cwd;
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
        if args.detach {
            let started = detach(&inputs).map_err(|error| Failure {
                code: exit::FAILED,
                message: format!("cannot start the run in the background: {error}"),
            });
            return zero_if(started.map(|()| exit::SUCCESS));
        }
        zero_if(self.execute(&workflow, inputs, request, format, None))
    }

    fn execute(
        &self,
        workflow: &stagegraph::check::Workflow,
        inputs: Map<String, Value>,
        request: &RunRequest,
        format: RunFormat,
        resume: Option<run::ResumeFrom>,
    ) -> Result<i32, Failure> {
        let _ = ctrlc::set_handler(|| {
            std::thread::spawn(|| stagegraph::floor::process::Interrupt::global().trigger());
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
        print_run(&record, request, format);
        Ok(match record.status {
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
        let code = self.execute(
            &workflow,
            previous.inputs,
            &exec.request(),
            exec.format,
            Some(from),
        )?;
        let always_zero = workflow.always_exit_zero;
        Ok(
            if always_zero && (code == exit::FAILED || code == exit::INTERRUPTED) {
                exit::SUCCESS
            } else {
                code
            },
        )
    }

    fn runs(&self, action: Option<RunsAction>, format: TextOrJson) -> Result<i32, Failure> {
        let dirs = self.state.search(&self.engine.cwd);
        match action {
            None => {
                let ids = record::list_runs_in(&dirs);
                if ids.is_empty() && format == TextOrJson::Text {
                    errln!("no runs in {}", record::runs_dir(&self.state.dir).display());
                }
                let mut listed = Vec::new();
                for (id, dir) in ids {
                    match record::read_record(&dir, &id) {
                        Ok(r) if format == TextOrJson::Json => listed.push(r.listing_json()),
                        Err(error) if format == TextOrJson::Json => {
                            listed.push(serde_json::json!({ "run_id": id, "unreadable": error }));
                        }
                        Ok(r) => outln!("{}", r.listing_line(&id)),
                        Err(error) => outln!("{id}  (unreadable: {error})"),
                    }
                }
                if format == TextOrJson::Json {
                    let doc = serde_json::json!({ "version": JSON_VERSION, "runs": listed });
                    outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
                }
                Ok(exit::SUCCESS)
            }
            Some(RunsAction::Show {
                run_id,
                format: show_format,
                json,
                stage,
            }) => {
                let json = json || show_format == TextOrJson::Json || format == TextOrJson::Json;
                let (id, dir) = record::locate_run(&dirs, &run_id).map_err(invalid)?;
                let r = record::read_record(&dir, &id).map_err(invalid)?;
                if let Some(stage) = stage {
                    let outputs = record::read_outputs(&dir, &id);
                    let line = outputs.get(&stage).ok_or_else(|| {
                        invalid(format!("run {id} recorded no output for stage `{stage}`"))
                    })?;
                    match &line.output {
                        Value::String(text) => out!("{text}"),
                        other => outln!("{}", pretty(other)),
                    }
                } else if json {
                    outln!("{}", pretty(&r.versioned_json()));
                } else {
                    out!("{}", r.to_text());
                }
                Ok(exit::SUCCESS)
            }
            Some(RunsAction::Prune { keep }) => {
                let removed: Vec<String> = dirs
                    .iter()
                    .flat_map(|dir| record::prune(dir, keep))
                    .collect();
                errln!("removed {} run(s)", removed.len());
                Ok(exit::SUCCESS)
            }
        }
    }

    fn eject(&self, name: &str) -> Result<i32, Failure> {
        let cwd = &self.engine.cwd;
        self.engine
            .eject(name, |path| {
                errln!("wrote {}", path.strip_prefix(cwd).unwrap_or(path).display());
            })
            .map_err(|error| match error {
                stagegraph::engine::EjectError::Write { .. } => Failure {
                    code: exit::FAILED,
                    message: error.to_string(),
                },
                _ => invalid(error.to_string()),
            })?;
        Ok(exit::SUCCESS)
    }
}

/// Starts this same command again without `--detach`, in a new session (so the caller's end, and
/// the signals it sends its process group, do not reach it), with the checked inputs on its
/// stdin in place of every `--input` and `--inputs-json`, and returns without waiting for it.
/// Its stdout and stderr go nowhere: the run record tells what it did.
fn detach(inputs: &Map<String, Value>) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
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
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command
        .args(&kept)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write as _;
        stdin.write_all(Value::Object(inputs.clone()).to_string().as_bytes())?;
    }
    Ok(())
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
fn print_run(record: &record::RunRecord, request: &RunRequest, format: RunFormat) {
    if format == RunFormat::Json {
        outln!("{}", pretty(&record.result_json(request.explain)));
    } else if let Some(Value::Object(outputs)) = &record.outputs {
        if request.json_events {
            outln!(
                "{}",
                serde_json::json!({ "event": "outputs", "outputs": outputs })
            );
        } else if outputs.len() == 1 {
            if let Some(Value::String(text)) = outputs.values().next() {
                // An empty text (a run that ended early saying why on stderr) prints nothing,
                // not a blank line.
                if !text.trim().is_empty() {
                    outln!("{}", text.trim_end());
                }
            } else {
                outln!("{}", pretty(outputs));
            }
        } else if !outputs.is_empty() {
            outln!("{}", pretty(outputs));
        }
    }
    if request.explain && format != RunFormat::Json {
        let verdicts = record.verdicts();
        let width = verdicts.iter().map(|(id, _)| id.len()).max().unwrap_or(0);
        for (id, verdict) in verdicts {
            outln!("{id:width$}  {verdict}");
        }
    }
    if !request.quiet || record.status == RunStatus::Failed {
        errln!("run {} {}", record.run_id, record.summary());
    }
    if !request.quiet {
        let usage = &record.usage;
        if let Some(cost) = usage.cost_usd {
            errln!("model calls cost ${cost:.4}");
        }
        if let Some(cost) = usage.estimated_cost_usd {
            errln!(
                "a real run would cost about ${cost:.4} (as recorded, over {} model call(s))",
                usage.model_calls
            );
        }
    }
}
