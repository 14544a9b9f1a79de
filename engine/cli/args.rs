//! The command line's arguments (clap): the subcommands, their options and help with examples.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use stagegraph::RunRequest;

#[derive(Parser)]
#[command(
    name = "stagegraph",
    version,
    about = "Run declarative stage graphs: TOML workflows of predicates, prompts, commands and built-ins",
    long_about = "stagegraph runs workflows described as TOML stage graphs.\n\n\
        Every command works in a project: the nearest folder upward holding stagegraph.toml or \
        .stagegraph/, else the git repository root, else the current directory. Workflows are \
        found by name along the search path: --library folders, STAGEGRAPH_PATH, .stagegraph/ \
        at the project root, the root's workflows/ and the workflow files at its top, \
        ~/.config/stagegraph/, then the built-in library (embedded in the binary). A path \
        ending in .toml names a file directly, relative to the current directory.\n\n\
        Exit codes: 0 success (completed, or ended early by exit_if), 1 the run failed, \
        2 the workflow, its inputs or the command line are invalid, 130 interrupted."
)]
pub(crate) struct Cli {
    /// A library folder (holding workflows/, templates/, schemas/) searched first; repeatable.
    #[arg(long = "library", short = 'L', global = true, value_name = "DIR")]
    pub(crate) libraries: Vec<PathBuf>,
    /// Where run records, the cache and state live (default: .stagegraph/ at the project root).
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) state_dir: Option<PathBuf>,
    /// Colour in diagnostics and progress (auto: on a terminal unless NO_COLOR is set;
    /// CLICOLOR_FORCE forces it off a terminal, NO_COLOR still wins).
    #[arg(long, global = true, value_enum, default_value_t = Color::Auto)]
    pub(crate) color: Color,
    /// Log to stderr what the engine does: -v the workflow found and each stage's end, -vv
    /// also the project root, the plan's waves, cache verdicts and model requests, -vvv
    /// everything. STAGEGRAPH_LOG (a filter such as `stagegraph=debug`) wins when set.
    #[arg(long, short = 'v', global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Color {
    Auto,
    Always,
    Never,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
        #[arg(add = clap_complete::ArgValueCandidates::new(workflow_candidates))]
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
        #[arg(add = clap_complete::ArgValueCandidates::new(workflow_candidates))]
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
        #[arg(add = clap_complete::ArgValueCandidates::new(workflow_candidates))]
        name: String,
        #[arg(long, value_enum, default_value_t = PlanFormat::Text)]
        format: PlanFormat,
        /// With dot or mermaid: draw every dependency, also those another path already
        /// implies (by default they are left out: the transitive reduction).
        #[arg(long)]
        all_edges: bool,
        /// With dot or mermaid: color the stages by how run RUN (an id, a prefix, `last`, `last~N`)
        /// ended them, the exit point marked.
        #[arg(long, value_name = "RUN", add = clap_complete::ArgValueCandidates::new(run_candidates))]
        run: Option<String>,
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
        #[command(flatten)]
        select: SelectArgs,
    },
    /// Run a workflow.
    #[command(
        after_help = "Examples:\n  stagegraph run my.toml --input name=world\n  stagegraph run hello --until facts            # facts and what it needs\n  stagegraph run hello --only greet             # greet alone, facts from the last run\n  stagegraph run context-update --inputs-json payload.json\n  stagegraph run refresh --input name=vite --dry-run --explain\n  stagegraph run compound --input context=\"the retry fix\" --record rec/\n  stagegraph run compound --dry-run --replay rec/\n  stagegraph run discard --answer confirm=y\n  stagegraph run my.toml --format json | jq .outputs"
    )]
    Run(RunArgs),
    /// Run a recorded run again with its inputs, reusing every stage whose fingerprint is unchanged.
    #[command(
        after_help = "Examples:\n  stagegraph resume last\n  stagegraph resume 20261130T0015 --explain\n  stagegraph resume last --no-cache --jobs 1"
    )]
    Resume {
        /// A run id, a unique prefix of one, `last` or `last~N` (the Nth run before it).
        #[arg(add = clap_complete::ArgValueCandidates::new(run_candidates))]
        run_id: String,
        #[command(flatten)]
        exec: ExecArgs,
    },
    /// The run history.
    #[command(
        after_help = "Examples:\n  stagegraph runs\n  stagegraph runs --workflow hello --status failed --limit 5\n  stagegraph runs --format json\n  stagegraph runs show last\n  stagegraph runs show last --stage writer\n  stagegraph runs report last -o report.html\n  stagegraph runs prune --keep 10"
    )]
    Runs {
        #[command(subcommand)]
        action: Option<RunsAction>,
        #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
        format: TextOrJson,
        #[command(flatten)]
        filter: RunsFilter,
    },
    /// Print the JSON Schema of the workflow, config or test file format, or of the built-ins.
    #[command(
        after_help = "Examples:\n  stagegraph schema workflow > workflow.schema.json\n  stagegraph schema config\n  stagegraph schema test\n  stagegraph schema builtins"
    )]
    Schema {
        #[arg(value_enum, default_value_t = SchemaKind::Workflow)]
        kind: SchemaKind,
    },
    /// Work with folders of model recordings (`--record DIR`).
    #[command(after_help = "Examples:\n  stagegraph recordings migrate tests/recordings")]
    Recordings {
        #[command(subcommand)]
        action: RecordingsAction,
    },
    /// Start a project in the current folder: stagegraph.toml with a model alias that answers
    /// offline (a script), a first workflow, its test and the test's recording.
    #[command(
        after_help = "Examples:\n  stagegraph init && stagegraph test\n  stagegraph init --force      # overwrite the files it writes"
    )]
    Init {
        /// Overwrite the files init writes when they exist (nothing else is touched).
        #[arg(long)]
        force: bool,
    },
    /// Copy a workflow with its templates and schemas into .stagegraph/ to own it.
    #[command(
        after_help = "Examples:\n  stagegraph eject refresh\n  stagegraph -L ./shared eject compound"
    )]
    Eject {
        #[arg(add = clap_complete::ArgValueCandidates::new(workflow_candidates))]
        name: String,
    },
    /// Run test files (`*.test.toml`): golden cases of a workflow over recorded model replies.
    ///
    /// Exit codes: 0 every case passed, 1 a case failed, 2 a test file is invalid.
    #[command(
        after_help = "Examples:\n  stagegraph test                              # the test files beside the workflows on the search path\n  stagegraph test workflows/compound.test.toml\n  stagegraph test --record                     # ask the models only what has no recording\n  stagegraph test --workflow my-refresh workflows/refresh.test.toml\n  stagegraph test --junit report.xml --format github"
    )]
    Test(TestArgs),
    /// Print a shell completion script (static: subcommands and options). For completions that
    /// also know this project's workflow names and run ids, register the dynamic ones instead:
    /// `source <(COMPLETE=bash stagegraph)` (zsh: COMPLETE=zsh; fish: `COMPLETE=fish stagegraph
    /// | source`).
    #[command(
        after_help = "Examples:\n  source <(COMPLETE=bash stagegraph)          # dynamic: workflow names, run ids\n  stagegraph completions bash > ~/.local/share/bash-completion/completions/stagegraph\n  stagegraph completions zsh > ~/.zfunc/_stagegraph\n  stagegraph completions fish > ~/.config/fish/completions/stagegraph.fish"
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
    /// Add the context-update hooks (Stop, SessionEnd) to a Claude Code settings file (merged,
    /// idempotent), then run `doctor`.
    #[command(
        after_help = "Examples:\n  stagegraph install-hook --enable\n  stagegraph install-hook --dry-run\n  stagegraph install-hook --scope user"
    )]
    InstallHook(HookArgs),
    /// Check what the background lexicon needs in this project, one line each, with the fix:
    /// the hook, the CLAUDE.md toggle, the models and the Claude Code CLI, the state folder,
    /// the last hook runs. Exit 1 when something is broken.
    #[command(after_help = "Examples:\n  stagegraph doctor\n  stagegraph doctor --probe")]
    Doctor {
        /// Also send each model alias the shipped workflows use one short request.
        #[arg(long)]
        probe: bool,
    },
    /// Remove exactly the hook `install-hook` added.
    #[command(
        after_help = "Examples:\n  stagegraph uninstall-hook\n  stagegraph uninstall-hook --scope user --dry-run"
    )]
    UninstallHook(HookArgs),
    /// Write the book's reference pages (formats, built-ins, command line) into DIR.
    #[command(hide = true)]
    Docs {
        /// The folder to write the pages into (book/src/reference in the repository).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

#[derive(Args)]
pub(crate) struct RunArgs {
    /// A workflow name or a path to a .toml file.
    #[arg(add = clap_complete::ArgValueCandidates::new(workflow_candidates))]
    pub(crate) name: String,
    /// An input, typed by its declaration: --input manual=true; repeatable.
    #[arg(long = "input", short = 'i', value_name = "K=V")]
    pub(crate) inputs: Vec<String>,
    /// Inputs as a JSON object from a file, or - for stdin (unknown keys are ignored).
    #[arg(long, value_name = "FILE|-")]
    pub(crate) inputs_json: Option<String>,
    /// Check the inputs, then go on in the background, in a session of its own, and exit 0 at
    /// once: for a hook whose host ends (and kills what it started) before the run would.
    #[arg(long)]
    pub(crate) detach: bool,
    /// Set by --detach on the run it starts: nobody reads its stdout, so a failure is told by the
    /// next fire of the hook instead.
    #[arg(long, hide = true)]
    pub(crate) detached: bool,
    #[command(flatten)]
    pub(crate) select: SelectArgs,
    #[command(flatten)]
    pub(crate) exec: ExecArgs,
}

/// Which stages to run: the stages upstream of the selection that it does not hold take the
/// output the last run recorded; the others are left out.
#[derive(Args, Clone, Default)]
pub(crate) struct SelectArgs {
    /// Run only these stages (comma-separated or repeated); those upstream of them take the
    /// last run's outputs.
    #[arg(long, value_name = "STAGE,...", value_delimiter = ',', conflicts_with_all = ["from", "until"])]
    pub(crate) only: Vec<String>,
    /// Run these stages and every stage downstream of them; those upstream take the last
    /// run's outputs.
    #[arg(long, value_name = "STAGE,...", value_delimiter = ',')]
    pub(crate) from: Vec<String>,
    /// Run these stages and every stage upstream of them, and nothing downstream.
    #[arg(long, value_name = "STAGE,...", value_delimiter = ',')]
    pub(crate) until: Vec<String>,
}

impl SelectArgs {
    pub(crate) fn selection(&self) -> stagegraph::StageSelection {
        stagegraph::StageSelection {
            only: self.only.clone(),
            from: self.from.clone(),
            until: self.until.clone(),
        }
    }
}

#[derive(Args)]
pub(crate) struct ExecArgs {
    /// Walk the graph with no side effects: commands, writes and model calls are not made.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// With --dry-run: print every rendered prompt.
    #[arg(long)]
    pub(crate) show_prompts: bool,
    /// A dry-run that says, for each stage, whether it would be reused from the cache and, if
    /// not, what changed since the last run (implies --dry-run).
    #[arg(long)]
    pub(crate) explain: bool,
    /// Stages at once (default: the number of cores).
    #[arg(long, short = 'j', value_parser = at_least_one)]
    pub(crate) jobs: Option<usize>,
    /// Ignore the cache.
    #[arg(long)]
    pub(crate) no_cache: bool,
    /// Save every model exchange in DIR.
    #[arg(long, value_name = "DIR")]
    pub(crate) record: Option<PathBuf>,
    /// Answer model requests from recordings in DIR.
    #[arg(long, value_name = "DIR")]
    pub(crate) replay: Option<PathBuf>,
    /// What stdout gets: text (the outputs), json (one document at the end) or events (JSON
    /// lines as the run goes).
    #[arg(long, value_enum, default_value_t = RunFormat::Text)]
    pub(crate) format: RunFormat,
    /// The same as --format events.
    #[arg(long, hide = true)]
    pub(crate) json: bool,
    /// Only errors on stderr.
    #[arg(long, short = 'q')]
    pub(crate) quiet: bool,
    /// Keep the newest N runs of each workflow (0 keeps all).
    #[arg(long, default_value_t = 50)]
    pub(crate) keep_runs: usize,
    /// And of those, as many of each workflow's, newest first, as fit in SIZE on disk ("500MB").
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(crate) keep_runs_size: Option<u64>,
    /// Spend at most USD on model calls: a call that would exceed it is not started and its
    /// stage fails (with `[workflow] budget_usd` too, the lower one holds).
    #[arg(long, value_name = "USD")]
    pub(crate) max_cost: Option<f64>,
    /// Answer the `ask` stage STAGE with VALUE, one of its choices (every item of a foreach);
    /// repeatable.
    #[arg(long = "answer", value_name = "STAGE=VALUE")]
    pub(crate) answers: Vec<String>,
    /// Answer every `ask` stage not given an --answer with its `yes` choice (default: its
    /// first).
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
    /// Off a terminal (a CI log), print a line for a stage still running after DURATION, and
    /// again after each DURATION more.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub(crate) slow_after: std::time::Duration,
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    stagegraph::parse_duration(text)
}

impl ExecArgs {
    /// The run the options ask for.
    pub(crate) fn request(&self) -> RunRequest {
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
            keep_runs_size: self.keep_runs_size,
            max_cost: self.max_cost,
            answers: self.answers.clone(),
            yes: self.yes,
            no_record: false,
            slow_after: Some(self.slow_after),
            ..RunRequest::default()
        }
    }
}

#[derive(Args)]
pub(crate) struct TestArgs {
    /// Test files, or folders searched for `*.test.toml`; none: the folders of the search path.
    pub(crate) paths: Vec<PathBuf>,
    /// Run the cases against this workflow (an overlay, an ejected copy) instead of their own.
    #[arg(long, value_name = "NAME|FILE")]
    pub(crate) workflow: Option<String>,
    /// Cases at once (default: the number of cores).
    #[arg(long, short = 'j', value_parser = at_least_one)]
    pub(crate) jobs: Option<usize>,
    /// Ask the models the requests that have no recording, and record them; replay the rest.
    #[arg(long, conflicts_with = "rerecord")]
    pub(crate) record: bool,
    /// Ask the models every request and record it anew.
    #[arg(long)]
    pub(crate) rerecord: bool,
    /// Run each case N times (for live models, whose replies vary).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) repeat: usize,
    /// With --repeat: a case passes when at least K of its runs pass (default: all).
    #[arg(long, value_name = "K", requires = "repeat")]
    pub(crate) min_pass: Option<usize>,
    /// Also write the results as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) junit: Option<PathBuf>,
    /// text, or github (annotations at the failed cases' lines, beside the text).
    #[arg(long, value_enum, default_value_t = TestFormat::Text)]
    pub(crate) format: TestFormat,
    /// What `now()` says in every case (RFC 3339), so that prompts holding a date replay on any
    /// day; STAGEGRAPH_NOW, when set, wins.
    #[arg(long, value_name = "TIME", default_value = DEFAULT_TEST_NOW)]
    pub(crate) now: String,
}

/// What `now()` says in a test case unless `--now` or STAGEGRAPH_NOW says otherwise.
pub(crate) const DEFAULT_TEST_NOW: &str = "2026-01-01T12:00:00Z";

#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub(crate) enum TestFormat {
    Text,
    Github,
}

#[derive(Args)]
pub(crate) struct HookArgs {
    /// Which settings file: project (.claude/settings.json), local (.claude/settings.local.json)
    /// or user (~/.claude/settings.json).
    #[arg(long, value_enum, default_value_t = HookScope::Project)]
    pub(crate) scope: HookScope,
    /// Print the change as a diff; write nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// install-hook: also turn the background context on: add "- Background context: enabled"
    /// to CLAUDE.md in this folder (idempotent).
    #[arg(long)]
    pub(crate) enable: bool,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum HookScope {
    Project,
    Local,
    User,
}

#[derive(Subcommand)]
pub(crate) enum RecordingsAction {
    /// Rewrite first-format recordings (keyed by alias and transport) in the portable format,
    /// keyed by the model they name, so that they replay on any machine and through any
    /// transport naming the same model.
    Migrate {
        /// The folder of recordings.
        dir: PathBuf,
    },
}

/// The workflows on the search path of the current folder, for dynamic completion (`COMPLETE=bash
/// stagegraph`), each with its description.
fn workflow_candidates() -> Vec<clap_complete::CompletionCandidate> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    stagegraph::Engine::new(&[], &cwd)
        .list()
        .into_iter()
        .map(|listing| {
            clap_complete::CompletionCandidate::new(listing.name)
                .help((!listing.description.is_empty()).then(|| listing.description.into()))
        })
        .collect()
}

/// The run ids of the project's state folder, newest first, each with its workflow and status,
/// then `last`.
fn run_candidates() -> Vec<clap_complete::CompletionCandidate> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let engine = stagegraph::Engine::new(&[], &cwd);
    let state = stagegraph::StateDir {
        dir: engine.project().state_dir(),
        explicit: false,
    };
    let mut candidates: Vec<clap_complete::CompletionCandidate> = state
        .runs(&cwd)
        .into_iter()
        .rev()
        .map(|(id, dir)| {
            let help = stagegraph::RunRecord::read_as_written(&dir, &id)
                .ok()
                .map(|r| format!("{} {}", r.workflow_name(), r.status().as_str()));
            clap_complete::CompletionCandidate::new(id).help(help.map(Into::into))
        })
        .collect();
    candidates.push(
        clap_complete::CompletionCandidate::new("last")
            .help(Some("the newest run that was not a dry-run".into())),
    );
    candidates
}

/// Which runs `stagegraph runs` lists.
#[derive(Args, Clone)]
pub(crate) struct RunsFilter {
    /// Only the runs of this workflow.
    #[arg(long, value_name = "NAME")]
    pub(crate) workflow: Option<String>,
    /// Only the runs that ended so (or are still running).
    #[arg(long, value_enum, value_name = "STATUS")]
    pub(crate) status: Option<StatusFilter>,
    /// Only the newest N of the runs that match.
    #[arg(long, short = 'n', value_name = "N")]
    pub(crate) limit: Option<usize>,
}

/// A run status, as `run.json` spells it.
#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub(crate) enum StatusFilter {
    Running,
    Completed,
    Exited,
    Failed,
    Interrupted,
}

impl StatusFilter {
    pub(crate) fn matches(self, status: stagegraph::RunStatus) -> bool {
        use stagegraph::RunStatus;
        matches!(
            (self, status),
            (StatusFilter::Running, RunStatus::Running)
                | (StatusFilter::Completed, RunStatus::Completed)
                | (StatusFilter::Exited, RunStatus::Exited)
                | (StatusFilter::Failed, RunStatus::Failed)
                | (StatusFilter::Interrupted, RunStatus::Interrupted)
        )
    }
}

#[derive(Subcommand)]
pub(crate) enum RunsAction {
    /// Print one run.
    #[command(
        after_help = "Examples:\n  stagegraph runs show last\n  stagegraph runs show last --format json\n  stagegraph runs show 20261130T0015 --stage writer"
    )]
    Show {
        /// A run id, a unique prefix, `last` (the newest run that was not a dry-run) or `last~N`.
        #[arg(add = clap_complete::ArgValueCandidates::new(run_candidates))]
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
    /// Write one run as a self-contained HTML page: how it ended, the graph colored by status,
    /// a timeline, each stage's details on click.
    #[command(
        after_help = "Examples:\n  stagegraph runs report\n  stagegraph runs report last -o report.html\n  stagegraph runs report 20261130T0015"
    )]
    Report {
        /// A run id, a unique prefix, `last` or `last~N`.
        #[arg(default_value = "last", add = clap_complete::ArgValueCandidates::new(run_candidates))]
        run_id: String,
        /// Where to write the page (by default `report.html` in the run's folder).
        #[arg(short = 'o', long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// What changed between two runs: inputs, workflow files, and per stage the status, the
    /// fingerprint and why it changed, the output (a diff), duration and tokens.
    #[command(
        after_help = "Examples:\n  stagegraph runs diff last              # the last run against its workflow's run before it\n  stagegraph runs diff last~1 last\n  stagegraph runs diff 20261130T0015 last\n  stagegraph runs diff A B --format json"
    )]
    Diff {
        /// The earlier run: an id, a unique prefix, `last` or `last~N` (the Nth run before the
        /// last). Given alone, the later run, compared with the run of its workflow before it.
        #[arg(add = clap_complete::ArgValueCandidates::new(run_candidates))]
        a: String,
        /// The later run.
        #[arg(add = clap_complete::ArgValueCandidates::new(run_candidates))]
        b: Option<String>,
        #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
        format: TextOrJson,
    },
    /// Write one run as an OpenTelemetry trace in OTLP/JSON (the spans a run sends to
    /// OTEL_EXPORTER_OTLP_ENDPOINT).
    #[command(after_help = "Examples:\n  stagegraph runs trace last -o trace.json")]
    Trace {
        /// A run id, a unique prefix, `last` or `last~N`.
        #[arg(default_value = "last", add = clap_complete::ArgValueCandidates::new(run_candidates))]
        run_id: String,
        /// Where to write it (by default stdout).
        #[arg(short = 'o', long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Remove all but the newest runs of each workflow.
    #[command(after_help = "Examples:\n  stagegraph runs prune\n  stagegraph runs prune --keep 5")]
    Prune {
        #[arg(long, default_value_t = 50)]
        keep: usize,
        /// And of those, as many of each workflow's, newest first, as fit in SIZE ("500MB").
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        keep_size: Option<u64>,
    },
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub(crate) enum TextOrJson {
    Text,
    Json,
}

/// What `run` prints on stdout.
#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub(crate) enum RunFormat {
    /// The outputs: a single string output as its text, anything else as JSON.
    Text,
    /// One JSON document at the end: `version`, run id, workflow, status, exit, error, outputs.
    Json,
    /// Events as JSON lines while the run goes on, then an `outputs` event.
    Events,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum ShowFormat {
    Toml,
    Json,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub(crate) enum CheckFormat {
    Text,
    Json,
    Github,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum PlanFormat {
    Text,
    Json,
    Dot,
    Mermaid,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum SchemaKind {
    Workflow,
    Config,
    /// A test file (`*.test.toml`).
    Test,
    /// Every built-in action: its description and the JSON Schemas of its `with` and output.
    Builtins,
}

/// A size on the command line ("500MB", "1GiB", "4096").
fn parse_size(text: &str) -> Result<u64, String> {
    stagegraph::parse_size(text)
}

/// A count of things at once (`--jobs`): 0 would run nothing, so it is refused rather than read
/// as 1.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1 (it is how many run at once)".into()),
        Ok(count) => Ok(count),
        Err(error) => Err(format!("{error}: give a whole number, e.g. 4")),
    }
}
