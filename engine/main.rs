//! The command line: parses arguments, calls the library, prints, and maps outcomes to the
//! documented exit codes.

use std::io::{IsTerminal, Read};
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{Map, Value};

use stagegraph::diag::{has_errors, Diagnostic, Severity};
use stagegraph::exit;
use stagegraph::library::{Library, Shelf};
use stagegraph::load::documents::Documents;
use stagegraph::models::Models;
use stagegraph::plan::Plan;
use stagegraph::run::{self, record, RunOptions, RunStatus, Runtime};
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
    /// Write no run record (`plan --explain`).
    #[arg(skip)]
    no_record: bool,
}

impl ExecArgs {
    /// Events as JSON lines on stdout (`--format events`, or the older `--json`).
    fn events(&self) -> bool {
        self.json || self.format == RunFormat::Events
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

/// The version of every JSON document the command line prints (`--format json`).
const JSON_VERSION: u32 = 1;

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
        state_dir,
        state_explicit,
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

struct App {
    engine: Engine,
    state_dir: PathBuf,
    /// `--state-dir` was given: it is the only state folder.
    state_explicit: bool,
    color: bool,
}

impl App {
    /// Where recorded runs are looked for: the state folder, then (without `--state-dir`) the
    /// user state folders of this folder and its ancestors, for workflows recording there.
    fn state_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.state_dir.clone()];
        if !self.state_explicit {
            dirs.extend(record::user_state_dirs_above(&self.engine.cwd));
        }
        dirs
    }

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
                let exec = ExecArgs {
                    dry_run: true,
                    show_prompts: false,
                    explain: true,
                    jobs: None,
                    no_cache: false,
                    record: None,
                    replay: None,
                    json: false,
                    format: RunFormat::Text,
                    quiet: true,
                    keep_runs: 0,
                    max_cost: None,
                    answers: Vec::new(),
                    yes: false,
                    no_record: true,
                };
                let args = RunArgs {
                    name,
                    inputs,
                    inputs_json,
                    detach: false,
                    exec,
                };
                self.run(args)
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
        let names = self.engine.search.workflow_names();
        match stagegraph::diag::did_you_mean(name, names.iter().map(String::as_str)) {
            Some(help) => invalid(format!("no workflow named `{name}`; {help}")),
            None => invalid(format!("no workflow named `{name}`")),
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
        let workflows = self.engine.search.workflows();
        if workflows.is_empty() && format == TextOrJson::Text {
            errln!("no workflows on the search path");
        }
        let width = workflows.iter().map(|(n, _, _)| n.len()).max().unwrap_or(0);
        let mut listed = Vec::new();
        for (name, library, shadowed) in workflows {
            let description = library
                .read(Shelf::Workflows, &format!("{name}.toml"))
                .and_then(|source| {
                    let doc: toml::Table = toml::from_str(&source.text).ok()?;
                    doc.get("workflow")?
                        .get("description")?
                        .as_str()
                        .map(str::to_string)
                })
                .unwrap_or_default();
            let mut origin = format!("{} ({})", library.display(), library.origin);
            if !shadowed.is_empty() {
                origin.push_str(&format!(
                    ", overlays {}",
                    shadowed
                        .iter()
                        .map(Library::display)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            if format == TextOrJson::Json {
                listed.push(serde_json::json!({
                    "name": name,
                    "description": description,
                    "library": library.display(),
                    "origin": library.origin.to_string(),
                    "overlays": shadowed.iter().map(Library::display).collect::<Vec<_>>(),
                }));
                continue;
            }
            outln!("{name:width$}  {description}  [{origin}]");
        }
        if format == TextOrJson::Json {
            let doc = serde_json::json!({ "version": JSON_VERSION, "workflows": listed });
            outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
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
        let raw =
            stagegraph::load::load(&self.engine.search, name, &self.engine.cwd).map_err(|d| {
                self.print_diagnostics(&d);
                invalid(format!("workflow `{name}` is invalid"))
            })?;
        match format {
            ShowFormat::Json => {
                let mut origins = Map::new();
                let mut pointers: Vec<&String> = raw.origins().keys().collect();
                pointers.sort();
                for pointer in pointers {
                    let origin = &raw.origins()[pointer];
                    let source = &raw.sources[origin.source()];
                    let (line, column) = source.line_col(origin.key().start);
                    origins.insert(pointer.clone(), serde_json::json!({ "file": source.path.display().to_string(), "line": line, "column": column }));
                }
                let out = serde_json::json!({ "version": JSON_VERSION, "workflow": raw.name, "document": raw.doc, "origins": origins, "files": raw.sources.iter().map(|s| s.path.display().to_string()).collect::<Vec<_>>() });
                outln!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
            }
            ShowFormat::Toml => out!("{}", effective_toml(&raw)),
        }
        Ok(exit::SUCCESS)
    }

    fn check(
        &self,
        names: &[String],
        format: CheckFormat,
        deny_warnings: bool,
    ) -> Result<i32, Failure> {
        let names: Vec<String> = if names.is_empty() {
            self.engine.search.workflow_names()
        } else {
            names.to_vec()
        };
        let mut all = Vec::new();
        let mut summary = Vec::new();
        let models = match Models::load(&self.engine.cwd) {
            Ok(models) => Some(models),
            Err(error) => {
                all.push(Diagnostic::error(format!("model configuration: {error}")));
                None
            }
        };
        for name in &names {
            let diagnostics = match self.engine.load(name) {
                Ok(workflow) => {
                    let mut diagnostics = workflow.warnings.clone();
                    if let Some(models) = &models {
                        diagnostics.extend(undefined_models(&workflow, models, Severity::Warning));
                    }
                    // Not freed, as in `load`.
                    std::mem::forget(workflow);
                    diagnostics
                }
                Err(diagnostics) => diagnostics,
            };
            let diagnostics: Vec<Diagnostic> = diagnostics
                .into_iter()
                .map(|mut d| {
                    d.workflow.get_or_insert_with(|| name.clone());
                    d
                })
                .collect();
            let errors = diagnostics.iter().filter(|d| d.is_error()).count();
            let warnings = diagnostics.len() - errors;
            summary.push((name.clone(), errors, warnings));
            all.extend(diagnostics);
        }
        match format {
            CheckFormat::Text => {
                self.print_diagnostics(&all);
                // The summary never contradicts the exit code: warnings denied fail, and an
                // error outside every workflow (the model configuration) is counted on its own.
                for (name, errors, warnings) in &summary {
                    let verdict = match (*errors, *warnings) {
                        (e, _) if e > 0 => "invalid",
                        (_, w) if w > 0 && deny_warnings => "failed (warnings denied)",
                        _ => "ok",
                    };
                    errln!("{name}: {verdict} ({errors} error(s), {warnings} warning(s))");
                }
                let outside = all
                    .iter()
                    .filter(|d| d.is_error() && d.workflow.is_none())
                    .count();
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
                for d in &all {
                    outln!("{}", d.to_github(&self.engine.cwd));
                }
            }
        }
        let failed = has_errors(&all)
            || (deny_warnings && all.iter().any(|d| d.severity == Severity::Warning));
        Ok(if failed { exit::INVALID } else { exit::SUCCESS })
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

    fn models(&self, exec: &ExecArgs) -> Result<Models, Failure> {
        let mut models = Models::load(&self.engine.cwd).map_err(|e| invalid(e.to_string()))?;
        if let Some(dir) = &exec.record {
            models.set_record(self.engine.cwd.join(dir));
        }
        if let Some(dir) = &exec.replay {
            models.set_replay(self.engine.cwd.join(dir));
        }
        Ok(models)
    }

    fn run(&self, args: RunArgs) -> Result<i32, Failure> {
        let read_ahead = !args.exec.no_cache;
        let workflow = self.load_then(&args.name, |workflow| {
            if read_ahead {
                run::cache::read_ahead(&self.state_dir, workflow);
            }
        })?;
        let always_zero = workflow.always_exit_zero;
        // A hook's host reads any other code as a verdict (2 blocks a Claude Code session): a
        // failure and an interruption (SIGINT, SIGTERM) exit 0 too; the record says which.
        let zero_if = |code: i32| {
            if always_zero && (code == exit::FAILED || code == exit::INTERRUPTED) {
                exit::SUCCESS
            } else {
                code
            }
        };
        let inputs = match self.collect_inputs(&workflow, &args) {
            Ok(inputs) => Ok(inputs),
            Err(failure) => {
                self.record_early_failure(&workflow, Map::new(), &args.exec, &failure);
                Err(failure)
            }
        };
        let inputs = match inputs {
            Ok(inputs) => inputs,
            Err(failure) if always_zero => {
                errln!("error: {}", failure.message);
                return Ok(exit::SUCCESS);
            }
            Err(failure) => return Err(failure),
        };
        if args.detach {
            return match detach(&inputs) {
                Ok(()) => Ok(exit::SUCCESS),
                Err(error) if always_zero => {
                    errln!("error: cannot start the run in the background: {error}");
                    Ok(exit::SUCCESS)
                }
                Err(error) => Err(Failure {
                    code: exit::FAILED,
                    message: format!("cannot start the run in the background: {error}"),
                }),
            };
        }
        match self.execute(&workflow, inputs, &args.exec, None) {
            Ok(code) => Ok(zero_if(code)),
            // A hook must not block its host: say what went wrong, exit 0.
            Err(failure) if always_zero => {
                errln!("error: {}", failure.message);
                Ok(exit::SUCCESS)
            }
            Err(failure) => Err(failure),
        }
    }

    fn collect_inputs(
        &self,
        workflow: &stagegraph::check::Workflow,
        args: &RunArgs,
    ) -> Result<Map<String, Value>, Failure> {
        let json = match &args.inputs_json {
            None => Map::new(),
            Some(source) => {
                let text = if source == "-" {
                    let mut text = String::new();
                    std::io::stdin()
                        .read_to_string(&mut text)
                        .map_err(|e| invalid(format!("cannot read inputs from stdin: {e}")))?;
                    text
                } else {
                    std::fs::read_to_string(self.engine.cwd.join(source))
                        .map_err(|e| invalid(format!("cannot read {source}: {e}")))?
                };
                match serde_json::from_str::<Value>(&text) {
                    Ok(Value::Object(map)) => map,
                    Ok(other) => {
                        return Err(invalid(format!(
                            "--inputs-json must be a JSON object, not {other}"
                        )))
                    }
                    Err(e) => return Err(invalid(format!("--inputs-json is not valid JSON: {e}"))),
                }
            }
        };
        let mut pairs = Map::new();
        for pair in &args.inputs {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(invalid(format!("--input expects K=V, got `{pair}`")));
            };
            pairs.insert(key.trim().to_string(), Value::String(value.to_string()));
        }
        stagegraph::engine::resolve_inputs(workflow, json, &pairs).map_err(|e| invalid(e.message))
    }

    fn execute(
        &self,
        workflow: &stagegraph::check::Workflow,
        inputs: Map<String, Value>,
        exec: &ExecArgs,
        resume: Option<run::ResumeFrom>,
    ) -> Result<i32, Failure> {
        // An --answer for no `ask` stage is a wrong command line: rejected before any record.
        let answers = ask_answers(workflow, exec)?;
        let (models, state_dir) = match self.prepare(workflow, &inputs, exec) {
            Ok(prepared) => prepared,
            Err(failure) => {
                self.record_early_failure(workflow, inputs, exec, &failure);
                return Err(failure);
            }
        };
        let keep_runs = workflow
            .records
            .as_ref()
            .and_then(|records| records.keep)
            .unwrap_or(exec.keep_runs);
        let options = RunOptions {
            answers,
            record: !exec.no_record,
            jobs: exec
                .jobs
                .unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(2, std::num::NonZero::get)
                })
                .max(1),
            dry_run: exec.dry_run || exec.explain,
            explain: exec.explain,
            no_cache: exec.no_cache,
            show_prompts: exec.show_prompts,
            replay: exec.replay.is_some(),
            quiet: exec.quiet,
            json_events: exec.events(),
            keep_runs,
        };
        let runtime = Runtime {
            models: &models,
            search: &self.engine.search,
            cwd: self.engine.cwd.clone(),
            state_dir: state_dir.clone(),
            previous: if exec.explain {
                latest_real_run(&state_dir, &workflow.name)
            } else {
                None
            },
        };
        // A dry-run rehearses the real path: stages with work take the last real run's outputs
        // where their fingerprints are unchanged.
        let resume = match resume {
            None if options.dry_run => runtime
                .previous
                .clone()
                .or_else(|| latest_real_run(&state_dir, &workflow.name))
                .map(|previous| run::ResumeFrom {
                    outputs: record::read_outputs(&state_dir, &previous.run_id),
                    run_id: previous.run_id,
                    rehearsal: true,
                }),
            resume => resume,
        };
        let _ = ctrlc::set_handler(|| {
            std::thread::spawn(|| stagegraph::floor::process::Interrupt::global().trigger());
        });
        // Like the workflow (`App::load`), the record of thousands of stages is left to the
        // process's exit rather than freed piece by piece.
        let record = ManuallyDrop::new(
            run::run(workflow, &runtime, &options, inputs, resume).map_err(|e| Failure {
                code: exit::FAILED,
                message: e.to_string(),
            })?,
        );
        if exec.format == RunFormat::Json {
            let mut doc = serde_json::json!({
                "version": JSON_VERSION,
                "run_id": record.run_id,
                "workflow": record.workflow,
                "status": record.status.as_str(),
                "dry_run": record.dry_run,
                "exit": record.exit,
                "error": record.error,
                "outputs": record.outputs,
            });
            if exec.explain {
                doc["explain"] = record
                    .stages
                    .iter()
                    .map(|(id, stage)| {
                        let verdict = stage
                            .explain
                            .clone()
                            .unwrap_or_else(|| format!("not reached ({})", stage.status.as_str()));
                        (id.clone(), Value::String(verdict))
                    })
                    .collect::<Map<String, Value>>()
                    .into();
            }
            outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        } else if let Some(Value::Object(outputs)) = &record.outputs {
            if exec.events() {
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
                    outln!(
                        "{}",
                        serde_json::to_string_pretty(outputs).unwrap_or_default()
                    );
                }
            } else if !outputs.is_empty() {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(outputs).unwrap_or_default()
                );
            }
        }
        if exec.explain && exec.format != RunFormat::Json {
            let width = record.stages.keys().map(String::len).max().unwrap_or(0);
            for (id, stage) in &record.stages {
                let verdict = stage
                    .explain
                    .clone()
                    .unwrap_or_else(|| format!("not reached ({})", stage.status.as_str()));
                outln!("{id:width$}  {verdict}");
            }
        }
        let seconds = record.duration_ms as f64 / 1000.0;
        let summary = match record.status {
            RunStatus::Completed => format!("completed in {seconds:.2}s"),
            RunStatus::Exited => format!(
                "exited early{}: {}",
                record
                    .exit
                    .as_ref()
                    .and_then(|e| e.stage.as_ref())
                    .map(|s| format!(" at `{s}`"))
                    .unwrap_or_default(),
                record.exit.as_ref().map_or("", |e| e.message.as_str())
            ),
            RunStatus::Failed => format!("failed: {}", record.error.as_deref().unwrap_or("")),
            RunStatus::Interrupted => "interrupted".to_string(),
            RunStatus::Running => "running".to_string(),
        };
        if !exec.quiet || record.status == RunStatus::Failed {
            errln!("run {} {summary}", record.run_id);
        }
        if !exec.quiet {
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
        Ok(match record.status {
            RunStatus::Completed | RunStatus::Exited => exit::SUCCESS,
            RunStatus::Interrupted => exit::INTERRUPTED,
            RunStatus::Failed | RunStatus::Running => exit::FAILED,
        })
    }

    /// What a run needs before it starts: its models and its state folder.
    fn prepare(
        &self,
        workflow: &stagegraph::check::Workflow,
        inputs: &Map<String, Value>,
        exec: &ExecArgs,
    ) -> Result<(Models, PathBuf), Failure> {
        let models = self.models(exec)?;
        if let Some(usd) = workflow.budget_usd {
            models.set_budget(usd, "budget_usd in [workflow]");
        }
        if let Some(usd) = exec.max_cost {
            if !usd.is_finite() || usd < 0.0 {
                return Err(invalid(format!(
                    "--max-cost expects an amount of USD, at least 0, not {usd}"
                )));
            }
            models.set_budget(usd, "--max-cost");
        }
        let missing = undefined_models(workflow, &models, Severity::Error);
        if !missing.is_empty() && exec.replay.is_none() {
            self.print_diagnostics(&missing);
            return Err(invalid(format!(
                "workflow `{}` needs model aliases that no configuration defines",
                workflow.name
            )));
        }
        let state_dir = run::state_dir_for(
            workflow,
            inputs,
            &self.engine.cwd,
            &self.state_dir,
            self.state_explicit,
        )
        .map_err(invalid)?;
        Ok((models, state_dir))
    }

    /// A run that fails before its first stage still leaves a record saying why (a hook's call
    /// is read afterwards with `runs show last`); `plan --explain` records nothing.
    fn record_early_failure(
        &self,
        workflow: &stagegraph::check::Workflow,
        inputs: Map<String, Value>,
        exec: &ExecArgs,
        failure: &Failure,
    ) {
        if exec.no_record {
            return;
        }
        let state_dir = run::state_dir_for(
            workflow,
            &inputs,
            &self.engine.cwd,
            &self.state_dir,
            self.state_explicit,
        )
        .unwrap_or_else(|_| self.state_dir.clone());
        // No stage runs, so no model is needed: a configuration that does not load is no reason
        // to leave the failure unrecorded.
        let Ok(models) =
            Models::load(&self.engine.cwd).or_else(|_| Models::from_layers(Vec::new()))
        else {
            return;
        };
        let runtime = Runtime {
            models: &models,
            search: &self.engine.search,
            cwd: self.engine.cwd.clone(),
            state_dir,
            previous: None,
        };
        let options = RunOptions {
            dry_run: exec.dry_run || exec.explain,
            quiet: true,
            ..RunOptions::default()
        };
        let message = match failure.message.as_str() {
            "" => "the run did not start".to_string(),
            text => text.to_string(),
        };
        if let Err(error) = run::record_failure(workflow, &runtime, &options, inputs, message) {
            errln!("warning: cannot write the run record: {error}");
        }
    }

    fn resume(&self, run_id: &str, exec: ExecArgs) -> Result<i32, Failure> {
        let (id, dir) = record::locate_run(&self.state_dirs(), run_id).map_err(invalid)?;
        let previous = record::read_record(&dir, &id).map_err(invalid)?;
        let workflow = self.load(&self.resume_reference(&previous))?;
        let outputs = record::read_outputs(&dir, &id);
        let always_zero = workflow.always_exit_zero;
        let code = self.execute(
            &workflow,
            previous.inputs.clone(),
            &exec,
            Some(run::ResumeFrom {
                run_id: id,
                outputs,
                rehearsal: false,
            }),
        )?;
        Ok(
            if always_zero && (code == exit::FAILED || code == exit::INTERRUPTED) {
                exit::SUCCESS
            } else {
                code
            },
        )
    }

    /// How to find a recorded run's workflow again: by name when the search path still leads to
    /// the file the run used, else by that file's path (a run of `stagegraph run flow.toml`).
    fn resume_reference(&self, previous: &record::RunRecord) -> String {
        let Some(top) = previous.files.first().map(|f| f.path.as_str()) else {
            return previous.workflow.clone();
        };
        let by_name = self
            .engine
            .search
            .find_workflow(&previous.workflow, &self.engine.cwd);
        match by_name {
            Some(found) if found.source.path.display().to_string() == top => {
                previous.workflow.clone()
            }
            _ if top.ends_with(".toml") && Path::new(top).is_file() => top.to_string(),
            _ => previous.workflow.clone(),
        }
    }

    fn runs(&self, action: Option<RunsAction>, format: TextOrJson) -> Result<i32, Failure> {
        match action {
            None => {
                let ids = record::list_runs_in(&self.state_dirs());
                if ids.is_empty() && format == TextOrJson::Text {
                    errln!("no runs in {}", record::runs_dir(&self.state_dir).display());
                }
                let mut listed = Vec::new();
                for (id, dir) in ids {
                    match record::read_record(&dir, &id) {
                        Ok(r) if format == TextOrJson::Json => listed.push(serde_json::json!({
                            "run_id": r.run_id,
                            "workflow": r.workflow,
                            "status": r.status.as_str(),
                            "dry_run": r.dry_run,
                            "started_at": r.started_at,
                            "duration_ms": r.duration_ms,
                            "exit": r.exit,
                            "error": r.error,
                        })),
                        Err(error) if format == TextOrJson::Json => {
                            listed.push(serde_json::json!({ "run_id": id, "unreadable": error }));
                        }
                        Ok(r) => {
                            let detail = match (&r.exit, &r.error) {
                                (Some(exit), _) => exit.message.clone(),
                                (_, Some(error)) => error.clone(),
                                _ => String::new(),
                            };
                            let status = match r.dry_run {
                                true => format!("{} (dry-run)", r.status.as_str()),
                                false => r.status.as_str().to_string(),
                            };
                            outln!(
                                "{id}  {:<16} {:<11} {:>8}ms  {}",
                                r.workflow,
                                status,
                                r.duration_ms,
                                first_line(&detail)
                            );
                        }
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
                let (id, dir) = record::locate_run(&self.state_dirs(), &run_id).map_err(invalid)?;
                let r = record::read_record(&dir, &id).map_err(invalid)?;
                if let Some(stage) = stage {
                    let outputs = record::read_outputs(&dir, &id);
                    let line = outputs.get(&stage).ok_or_else(|| {
                        invalid(format!("run {id} recorded no output for stage `{stage}`"))
                    })?;
                    match &line.output {
                        Value::String(text) => out!("{text}"),
                        other => outln!(
                            "{}",
                            serde_json::to_string_pretty(other).unwrap_or_default()
                        ),
                    }
                    return Ok(exit::SUCCESS);
                }
                if json {
                    // run.json as it is, with the version of the document in front.
                    let mut doc = Map::new();
                    doc.insert("version".into(), JSON_VERSION.into());
                    if let Ok(Value::Object(fields)) = serde_json::to_value(&r) {
                        doc.extend(fields);
                    }
                    outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
                    return Ok(exit::SUCCESS);
                }
                outln!(
                    "run {} ({}) {}{}",
                    r.run_id,
                    r.workflow,
                    r.status.as_str(),
                    if r.dry_run { " (dry-run)" } else { "" }
                );
                outln!("started {}  duration {}ms", r.started_at, r.duration_ms);
                if let Some(exit) = &r.exit {
                    outln!(
                        "exit: {}{}",
                        exit.stage
                            .as_ref()
                            .map(|s| format!("{s}: "))
                            .unwrap_or_default(),
                        exit.message
                    );
                }
                if let Some(error) = &r.error {
                    outln!("error: {error}");
                }
                for (id, s) in &r.stages {
                    let extra = s.error.clone().or(s.reason.clone()).unwrap_or_default();
                    outln!(
                        "  {:<24} {:<9} {:>7}ms  {}",
                        id,
                        s.status.as_str(),
                        s.duration_ms,
                        first_line(&extra)
                    );
                    // What a stage that succeeded said on stderr (warnings, progress).
                    for line in s.stderr.as_deref().unwrap_or("").lines() {
                        outln!("      stderr: {line}");
                    }
                }
                let u = &r.usage;
                if u.model_calls > 0 {
                    outln!("{}", usage_line(u));
                }
                Ok(exit::SUCCESS)
            }
            Some(RunsAction::Prune { keep }) => {
                let removed: Vec<String> = self
                    .state_dirs()
                    .iter()
                    .flat_map(|dir| record::prune(dir, keep))
                    .collect();
                errln!("removed {} run(s)", removed.len());
                Ok(exit::SUCCESS)
            }
        }
    }

    fn eject(&self, name: &str) -> Result<i32, Failure> {
        let found = self
            .engine
            .search
            .find_workflow(name, &self.engine.cwd)
            .ok_or_else(|| self.no_workflow(name))?;
        let target = self.engine.cwd.join(".stagegraph");
        let library = found.library.clone();
        let mut copies: Vec<(PathBuf, String)> = vec![(
            target.join("workflows").join(format!("{name}.toml")),
            found.source.text.to_string(),
        )];
        for shelf in [Shelf::Templates, Shelf::Schemas] {
            for relative in library.files(shelf, &format!("{name}/")) {
                if let Some(source) = library.read(shelf, &relative) {
                    copies.push((
                        target.join(shelf.folder()).join(&relative),
                        source.text.to_string(),
                    ));
                }
            }
        }
        let existing: Vec<String> = copies
            .iter()
            .filter(|(p, _)| p.exists())
            .map(|(p, _)| p.display().to_string())
            .collect();
        if !existing.is_empty() {
            return Err(invalid(format!(
                "refusing to overwrite existing files: {}",
                existing.join(", ")
            )));
        }
        for (path, text) in &copies {
            write_new(path, text).map_err(|e| Failure {
                code: exit::FAILED,
                message: format!("cannot write {}: {e}", path.display()),
            })?;
            errln!(
                "wrote {}",
                path.strip_prefix(&self.engine.cwd)
                    .unwrap_or(path)
                    .display()
            );
        }
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

fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text)
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// The merged document as TOML, each key annotated with where it came from.
fn effective_toml(raw: &stagegraph::load::RawWorkflow) -> String {
    use stagegraph::load::pointer_segment;
    let mut out = format!(
        "# effective workflow `{}`\n# files: {}\n",
        raw.name,
        raw.sources
            .iter()
            .map(|s| s.path.display().to_string())
            .collect::<Vec<_>>()
            .join(" <- ")
    );
    let origin = |pointer: &str| -> String {
        raw.origins()
            .get(pointer)
            .map(|o| {
                let source = &raw.sources[o.source()];
                let (line, _) = source.line_col(o.key().start);
                format!("  # {}:{line}", source.path.display())
            })
            .unwrap_or_default()
    };
    let Value::Object(sections) = &raw.doc else {
        return out;
    };
    for (section, value) in sections {
        let Value::Object(entries) = value else {
            continue;
        };
        let nested = matches!(section.as_str(), "inputs" | "stages");
        if nested {
            for (name, table) in entries {
                let Value::Object(keys) = table else { continue };
                let pointer = format!("/{section}/{}", pointer_segment(name));
                out.push_str(&format!("\n[{section}.{name}]{}\n", origin(&pointer)));
                for (key, value) in keys {
                    let key_pointer = format!("{pointer}/{}", pointer_segment(key));
                    out.push_str(&format!(
                        "{key} = {}{}\n",
                        toml_value(value),
                        origin(&key_pointer)
                    ));
                }
            }
        } else {
            out.push_str(&format!("\n[{section}]\n"));
            for (key, value) in entries {
                let key_pointer = format!("/{section}/{}", pointer_segment(key));
                out.push_str(&format!(
                    "{key} = {}{}\n",
                    toml_value(value),
                    origin(&key_pointer)
                ));
            }
        }
    }
    out
}

fn toml_value(value: &Value) -> String {
    match toml::Value::try_from(value) {
        Ok(toml::Value::String(s)) if s.contains('\n') => format!("'''\n{s}'''"),
        Ok(v) => v.to_string(),
        Err(_) => value.to_string(),
    }
}

/// Prompt stages whose model alias no configuration defines (sub-workflows included).
fn undefined_models(
    workflow: &stagegraph::check::Workflow,
    models: &Models,
    severity: Severity,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for stage in &workflow.stages {
        match &stage.action {
            stagegraph::check::Action::Prompt { model, .. } if !models.defines(model) => {
                let location = workflow.raw.locate(&format!("/stages/{}/model", stage.id));
                let known: Vec<String> = models
                    .aliases()
                    .into_iter()
                    .map(|(alias, _)| alias)
                    .collect();
                let help = stagegraph::diag::did_you_mean(model, known.iter().map(String::as_str))
                    .unwrap_or_else(|| format!("define it in stagegraph.toml: [models.{model}] provider = \"command\" command = [...]"));
                let mut diagnostic = Diagnostic::error(format!(
                    "stage `{}` uses model `{model}`, which no configuration defines",
                    stage.id
                ))
                .at_opt(location)
                .with_help(help);
                diagnostic.severity = severity;
                out.push(diagnostic);
            }
            stagegraph::check::Action::Workflow { workflow: sub, .. } => {
                out.extend(undefined_models(sub, models, severity));
            }
            _ => {}
        }
    }
    out
}

/// How `ask` stages are answered: `--answer STAGE=VALUE` pairs (each STAGE an `ask` stage of the
/// workflow or of a sub-workflow), `--yes`, and whether a person can be asked.
fn ask_answers(
    workflow: &stagegraph::check::Workflow,
    exec: &ExecArgs,
) -> Result<stagegraph::builtins::ask::Answers, Failure> {
    type AskStage = (String, Option<Vec<Value>>);
    fn ask_stages(workflow: &stagegraph::check::Workflow, out: &mut Vec<AskStage>) {
        for stage in &workflow.stages {
            match &stage.action {
                stagegraph::check::Action::Uses { builtin, with }
                    if builtin.name == stagegraph::builtins::ask::NAME =>
                {
                    let with = with.literal_entries();
                    let schema = stagegraph::builtins::ask::output_schema_for(Some(&with));
                    let choices = schema.get("enum").and_then(Value::as_array).cloned();
                    out.push((stage.id.clone(), choices));
                }
                stagegraph::check::Action::Workflow { workflow: sub, .. } => ask_stages(sub, out),
                _ => {}
            }
        }
    }
    let mut stages = Vec::new();
    ask_stages(workflow, &mut stages);
    let known: Vec<String> = stages.iter().map(|(id, _)| id.clone()).collect();
    let mut given = std::collections::BTreeMap::new();
    for pair in &exec.answers {
        let Some((stage, value)) = pair.split_once('=') else {
            return Err(invalid(format!(
                "--answer expects STAGE=VALUE, got `{pair}`"
            )));
        };
        let stage = stage.trim();
        if !known.iter().any(|k| k == stage) {
            let help = stagegraph::diag::did_you_mean(stage, known.iter().map(String::as_str))
                .map_or_else(
                    || match known.is_empty() {
                        true => format!("; workflow `{}` asks nothing", workflow.name),
                        false => format!("; its `ask` stages: {}", known.join(", ")),
                    },
                    |h| format!("; {h}"),
                );
            return Err(invalid(format!(
                "--answer {stage}=...: `{stage}` is not an `ask` stage of workflow `{}`{help}",
                workflow.name
            )));
        }
        // Choices written out are known now: a wrong answer is a wrong command line.
        let choices = stages
            .iter()
            .find(|(id, _)| id == stage)
            .and_then(|(_, choices)| choices.as_ref());
        if let Some(choices) = choices {
            let names: Vec<&str> = choices.iter().filter_map(Value::as_str).collect();
            if !names.iter().any(|c| c.eq_ignore_ascii_case(value)) {
                return Err(invalid(format!(
                    "--answer {stage}={value}: `{value}` is not one of the choices of `{stage}` ({})",
                    names.join(", ")
                )));
            }
        }
        given.insert(stage.to_string(), value.to_string());
    }
    Ok(stagegraph::builtins::ask::Answers {
        given,
        yes: exec.yes,
        terminal: std::io::stdin().is_terminal() && std::io::stderr().is_terminal(),
    })
}

/// The newest run of a workflow that was not a dry-run.
fn latest_real_run(state_dir: &Path, workflow: &str) -> Option<record::RunRecord> {
    record::list_runs(state_dir)
        .iter()
        .rev()
        .filter_map(|id| record::read_record(state_dir, id).ok())
        .find(|r| r.workflow == workflow && !r.dry_run)
}

/// One line of model usage: calls, tokens, latency, retries and cost.
fn usage_line(u: &stagegraph::run::record::UsageTotals) -> String {
    let mut line = format!(
        "model calls: {}  tokens in: {}  out: {}",
        u.model_calls, u.input_tokens, u.output_tokens
    );
    if u.cache_read_tokens > 0 || u.cache_write_tokens > 0 {
        line.push_str(&format!(
            "  cache read: {}  cache write: {}",
            u.cache_read_tokens, u.cache_write_tokens
        ));
    }
    line.push_str(&format!("  latency: {}ms", u.latency_ms));
    if u.retries > 0 {
        line.push_str(&format!("  retries: {}", u.retries));
    }
    if let Some(cost) = u.cost_usd {
        line.push_str(&format!("  cost: ${cost:.4}"));
    }
    if let Some(cost) = u.estimated_cost_usd {
        line.push_str(&format!("  recorded cost: ${cost:.4}"));
    }
    line
}
