//! What a problem is: one variant per kind of problem that loading and checking find, with the
//! values its message names as typed fields. A diagnostic's message is rendered from its kind,
//! so the text of each kind lives here, once.

/// What a problem is. Its `Display` is the message, a lowercase fragment that reads after
/// "error: ".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DiagnosticKind {
    // Finding and reading files.
    /// `load x.toml` of a file that cannot be read.
    #[error("cannot read workflow file `{0}`")]
    CannotReadWorkflowFile(String),
    /// A workflow name the search path does not have.
    #[error("no workflow named `{0}` on the search path")]
    NoSuchWorkflow(String),
    /// Files that extend each other in a circle: each file, the first one again last.
    #[error("`extends` loops: {}", .0.join(" -> "))]
    ExtendsLoops(Vec<String>),
    /// `extends` of a workflow that does not exist (`further`: further down the search path,
    /// when a workflow extends its namesake).
    #[error(
        "`extends` names `{base}`, but no workflow of that name exists{}",
        if *.further { " further down the search path" } else { "" }
    )]
    NoSuchBase {
        /// The name `extends` gives.
        base: String,
        /// Whether the workflow extends one of its own name.
        further: bool,
    },
    /// A bracket that TOML never sees closed.
    #[error("invalid TOML: this `{0}` is never closed")]
    UnclosedBracket(char),
    /// Any other TOML syntax error (the parser's explanation, its first letter lowercase).
    #[error("invalid TOML: {0}")]
    InvalidToml(String),
    /// A value printed where a shell script (or a program it runs) reads code, arithmetic or a
    /// variable name: the message says which and what to do.
    #[error("{0}")]
    ValueInCode(String),
    /// An overlay's `disabled = true` for a stage its base does not have.
    #[error("cannot disable stage `{stage}`: the base workflow `{base}` has no such stage")]
    CannotDisable {
        /// The stage.
        stage: String,
        /// The base workflow.
        base: String,
    },
    /// An overlay's stage that is not in its base and has no action of its own.
    #[error(
        "stage `{stage}` overlays nothing: the base workflow `{base}` has no such stage, and it has no action of its own"
    )]
    OverlaysNothing {
        /// The stage.
        stage: String,
        /// The base workflow.
        base: String,
    },
    /// The model configuration does not load (its error).
    #[error("model configuration: {0}")]
    ModelConfiguration(String),

    // The format.
    /// The format's own schema does not compile (a bug).
    #[error("the workflow format's schema does not compile")]
    FormatSchemaDoesNotCompile,
    /// A document that does not read as a workflow (the reader's error).
    #[error("invalid workflow: {0}")]
    InvalidWorkflow(String),
    /// A key the format does not have, in the table at `table` (dotted; empty at the top).
    #[error("unknown key `{key}`{}", in_table(.table))]
    UnknownKey {
        /// The key.
        key: String,
        /// The dotted path of its table.
        table: String,
    },
    /// A value of the wrong type.
    #[error("`{at}` must be {expected}, not {found}")]
    WrongType {
        /// The dotted path of the value.
        at: String,
        /// The type the format wants, with its article ("an array").
        expected: String,
        /// The type written, with its article.
        found: &'static str,
    },
    /// A value outside an enumeration.
    #[error("`{at}` must be one of {options}, not {found}")]
    NotOneOf {
        /// The dotted path of the value.
        at: String,
        /// The values allowed, as JSON.
        options: String,
        /// The value written, as JSON.
        found: String,
    },
    /// A table without a key it needs.
    #[error("`{at}` is missing the required key {key}")]
    MissingKey {
        /// The dotted path of the table.
        at: String,
        /// The key, as JSON.
        key: String,
    },
    /// A value that matches none of the shapes the format allows there.
    #[error("`{at}` has the wrong shape ({found})")]
    WrongShape {
        /// The dotted path of the value.
        at: String,
        /// The type written, with its article.
        found: &'static str,
    },
    /// Any other rule of the format's schema (the validator's explanation).
    #[error("`{at}`: {error}")]
    FormatRule {
        /// The dotted path of the value.
        at: String,
        /// What the validator says.
        error: String,
    },

    // Values.
    /// A duration that does not parse (the parser's explanation).
    #[error("{0}")]
    BadDuration(String),
    /// A size that does not parse (the parser's explanation).
    #[error("{0}")]
    BadSize(String),
    /// An input's default of another type than the input's.
    #[error("the default of input `{input}` is {found}, but its type is {expected}")]
    BadInputDefault {
        /// The input.
        input: String,
        /// The default's type, with its article.
        found: &'static str,
        /// The input's type.
        expected: &'static str,
    },

    // Stages.
    /// A stage id outside `^[a-z][a-z0-9_]*$`.
    #[error("invalid stage id `{0}`")]
    InvalidStageId(String),
    /// A stage with more than one action: the stage and its actions.
    #[error(
        "stage `{stage}` has {} actions ({}); a stage has one action, or none",
        .actions.len(),
        .actions.join(", ")
    )]
    SeveralActions {
        /// The stage.
        stage: String,
        /// Its action keys.
        actions: Vec<String>,
    },
    /// A key of another action than the stage's (`None`: the stage has no action).
    #[error(
        "`{key}` does not apply to a stage whose action is {}",
        .action.as_ref().map_or("none".to_string(), |a| format!("`{a}`"))
    )]
    StrayKey {
        /// The key.
        key: String,
        /// The stage's action key.
        action: Option<String>,
    },
    /// `command = []`.
    #[error("stage `{0}` has an empty `command`")]
    EmptyCommand(String),
    /// A prompt stage without `model`.
    #[error("prompt stage `{0}` names no `model`")]
    NoModel(String),
    /// A prompt stage's model alias that no configuration defines.
    #[error("stage `{stage}` uses model `{model}`, which no configuration defines")]
    UndefinedModel {
        /// The stage.
        stage: String,
        /// The alias.
        model: String,
    },
    /// `exit_message` with nothing that exits (a warning).
    #[error("stage `{0}` has `exit_message` but no `exit_if`")]
    ExitMessageWithoutExitIf(String),
    /// `concurrency` or `on_item_error` on a stage without `foreach` (a warning).
    #[error("stage `{stage}` has `{key}` but no `foreach`")]
    ItemSettingWithoutForeach {
        /// The stage.
        stage: String,
        /// The key.
        key: &'static str,
    },
    /// An output schema on a stage whose output is not JSON.
    #[error("stage `{0}` has an output schema but its format is not json")]
    SchemaWithoutJson(String),

    // Files a workflow names.
    /// A template file that is not on the search path.
    #[error("template `{0}` not found")]
    TemplateNotFound(String),
    /// A schema file that is not on the search path.
    #[error("schema `{0}` not found")]
    SchemaNotFound(String),
    /// A stage's schema file that does not compile (its own diagnostic says why).
    #[error("schema `{0}` does not compile")]
    StageSchemaDoesNotCompile(String),
    /// A schema file that is not JSON (the parser's error).
    #[error("invalid JSON in schema: {0}")]
    InvalidSchemaJson(String),
    /// A schema whose bound no instance in memory can meet.
    #[error(
        "schema asks for `{key}: {bound}` at {}: no instance that large fits in memory",
        or_root(.at)
    )]
    ImpossibleSchemaBound {
        /// The pointer of the schema node (empty: the root).
        at: String,
        /// The keyword.
        key: String,
        /// Its value.
        bound: String,
    },
    /// A schema the meta-schema rejects.
    #[error("schema does not compile: at {}: {error}", or_root(.at))]
    SchemaDoesNotCompile {
        /// The pointer of the rejected node (empty: the root).
        at: String,
        /// What the validator says.
        error: String,
    },

    // Built-ins.
    /// `uses` of a name no built-in has.
    #[error("unknown built-in `{0}`")]
    UnknownBuiltin(String),
    /// A `with` key the built-in does not take.
    #[error("`{builtin}` has no argument `{key}`")]
    UnknownArgument {
        /// The built-in.
        builtin: &'static str,
        /// The key.
        key: String,
    },
    /// A built-in's required argument left out.
    #[error("`{builtin}` needs the argument `{key}`")]
    MissingArgument {
        /// The built-in.
        builtin: &'static str,
        /// The argument.
        key: String,
    },
    /// A literal argument the built-in's schema rejects.
    #[error("argument `{key}` of `{builtin}`: {error}")]
    BadArgument {
        /// The argument.
        key: String,
        /// The built-in.
        builtin: &'static str,
        /// What the schema says.
        error: String,
    },
    /// An `ask` stage's `default` or `yes` that is not one of its choices.
    #[error(
        "`{key}` of `ask` is `{value}`, which is not one of its choices ({})",
        .choices.join(", ")
    )]
    NotAChoice {
        /// `default` or `yes`.
        key: &'static str,
        /// The value written.
        value: String,
        /// The choices.
        choices: Vec<String>,
    },

    // Writes.
    /// `output.path` with no `[workflow] writes` to write in.
    #[error("stage `{0}` writes its output to a file, but `[workflow] writes` is empty")]
    OutputWithoutWrites(String),
    /// A writing built-in with no `[workflow] writes` to write in.
    #[error("stage `{stage}` uses `{builtin}`, which writes, but `[workflow] writes` is empty")]
    BuiltinWithoutWrites {
        /// The stage.
        stage: String,
        /// The built-in.
        builtin: &'static str,
    },
    /// Every item of a `foreach` stage writing the one `output.path`.
    #[error("every item of `foreach` stage `{0}` writes the same `output.path`")]
    SameOutputPath(String),
    /// The lock folder of a workflow that declares no writes.
    #[error("the lock folder `{0}` is outside the workflow's writes (none are declared)")]
    LockWithoutWrites(String),
    /// A written path outside every root.
    #[error("{}", outside(.path, *.escape, .roots))]
    WriteOutsideRoots {
        /// The path, as written.
        path: String,
        /// How it leaves the roots.
        escape: Escape,
        /// The roots, as written.
        roots: Vec<String>,
    },
    /// A stage that writes before a stage a write root reads has finished.
    #[error(
        "stage `{stage}` writes, but does not run after `{target}`, whose output `[workflow] writes` entry {entry} reads"
    )]
    WritesBeforeRoot {
        /// The stage that writes.
        stage: String,
        /// The stage the root reads.
        target: String,
        /// The index of the `writes` entry.
        entry: usize,
    },

    // Sub-workflows.
    /// A sub-workflow that calls itself: the workflows on the way, then the name.
    #[error("workflow `{name}` calls itself: {} -> {name}", .chain.join(" -> "))]
    WorkflowCallsItself {
        /// The workflow.
        name: String,
        /// The workflows being checked when it was called again.
        chain: Vec<String>,
    },
    /// A sub-workflow with errors of its own (reported beside this one).
    #[error("sub-workflow `{name}` does not check ({errors} error(s))")]
    SubWorkflowDoesNotCheck {
        /// The workflow.
        name: String,
        /// How many errors it has.
        errors: usize,
    },
    /// A `with` key a sub-workflow has no input for.
    #[error("workflow `{workflow}` has no input `{input}`")]
    NoSuchWorkflowInput {
        /// The workflow.
        workflow: String,
        /// The key.
        input: String,
    },
    /// A sub-workflow's input without a default that `with` does not give.
    #[error("workflow `{workflow}` needs input `{input}`")]
    MissingWorkflowInput {
        /// The workflow.
        workflow: String,
        /// The input.
        input: String,
    },
    /// A literal `with` value of another type than the sub-workflow's input.
    #[error("input `{input}` of workflow `{workflow}` is of type {expected}, but this is {found}")]
    WorkflowInputType {
        /// The input.
        input: String,
        /// The workflow.
        workflow: String,
        /// The input's type.
        expected: &'static str,
        /// The value's type, with its article.
        found: &'static str,
    },

    // The graph.
    /// Stages that depend on each other in a circle, as `a -> b -> a`.
    #[error("dependency cycle: {0}")]
    Cycle(String),
    /// A reference to a stage the workflow does not have.
    #[error("unknown stage `{0}`")]
    UnknownStage(String),
    /// A reference to a stage an overlay disabled: located at the overlay's `disabled`, the
    /// change that broke the reference, naming where the base reads the stage.
    #[error("stage `{stage}` is disabled here, but {read_at} reads it")]
    DisabledStage {
        /// The stage.
        stage: String,
        /// Where it is read, `file:line:col` (the file relative to the project folder).
        read_at: String,
    },
    /// `disabled = true` in a workflow that extends none: there is no base stage to remove.
    #[error("stage `{0}` is `disabled`, but this workflow extends none")]
    DisabledWithoutBase(String),
    /// A template rendered before any stage runs that reads what only stages give.
    #[error("{field} is rendered before any stage runs, so it cannot read `{root}`")]
    ReadBeforeStages {
        /// The field, as messages name it.
        field: String,
        /// What it reads: `stages` or `state`.
        root: String,
    },
    /// `after` naming the stage itself.
    #[error("stage `{0}` cannot run after itself")]
    AfterItself(String),
    /// `stages.<self>` in a stage's own templates.
    #[error("stage `{0}` refers to its own result; use `output` in `exit_if` and `assert`")]
    RefersToItself(String),
    /// An ordinary stage that depends on a finally stage.
    #[error(
        "stage `{stage}` depends on finally stage `{target}`, which runs only after the run has ended"
    )]
    DependsOnFinally {
        /// The ordinary stage.
        stage: String,
        /// The finally stage.
        target: String,
    },
    /// A finally stage with `exit_if`.
    #[error("finally stage `{0}` has `exit_if`, but the run has already ended when it runs")]
    FinallyExitIf(String),
    /// A finally stage with `on_error = "exit"`.
    #[error(
        "finally stage `{0}` has `on_error = \"exit\"`, but the run has already ended when it runs"
    )]
    FinallyOnErrorExit(String),

    // What templates read.
    /// A template that does not compile (minijinja's detail).
    #[error("template does not compile: {0}")]
    TemplateDoesNotCompile(String),
    /// An expression field (`if`, `exit_if`, `foreach`, an assertion's `that`) written as a
    /// template, inside `{{ }}`.
    #[error("`{field}` is an expression: it is written without `{braces}`")]
    ExpressionInBraces {
        /// The field, as `stages.<id>.<key>`.
        field: String,
        /// `{{ }}`, or `${{ }}` as GitHub Actions writes it.
        braces: &'static str,
    },
    /// `${{ x }}` in a command or script: GitHub Actions' spelling, whose `$` stays in the text.
    #[error(
        "`${{{{ }}}}` is GitHub Actions' spelling: here the `$` stays in the text, before the value"
    )]
    DollarBeforeTemplate,
    /// A filter the environment does not have.
    #[error("unknown filter `{0}`")]
    UnknownFilter(String),
    /// A test the environment does not have.
    #[error("unknown test `{0}`")]
    UnknownTest(String),
    /// A call of a function the environment does not have.
    #[error("unknown function `{0}`")]
    UnknownFunction(String),
    /// A root name templates do not see.
    #[error("undefined variable `{0}`")]
    UndefinedVariable(String),
    /// `inputs.x` of an input the workflow does not declare.
    #[error("unknown input `{0}`")]
    UnknownInput(String),
    /// `env.X` of a variable outside `[workflow] env`.
    #[error("environment variable `{0}` is not in `[workflow] env`")]
    EnvNotAllowed(String),
    /// `stages.X.<field>` of a field a stage result does not have.
    #[error("`stages.{stage}` has `output`, `status` and `error`, not `{field}`")]
    NoStageField {
        /// The stage.
        stage: String,
        /// The field.
        field: String,
    },
    /// `output` where it is not bound.
    #[error("`output` is only bound in `exit_if`, `exit_message`, `assert` and `set_state`")]
    OutputNotBound,
    /// `item` or `index` in a field of a `foreach` stage that is not its action.
    #[error("`{name}` is bound in the action of a `foreach` stage, not in `{field}`")]
    ItemOutsideAction {
        /// `item` or `index`.
        name: String,
        /// The field.
        field: String,
    },
    /// `item` or `index` in a stage without `foreach`.
    #[error("`{0}` is only bound in a stage with `foreach`")]
    ItemWithoutForeach(String),
    /// `run.<field>` of a field the run does not have.
    #[error("`run` has no field `{0}`")]
    NoRunField(String),
    /// `run.exit.<field>` of a field other than `stage` and `message`.
    #[error("`run.exit` has `stage` and `message`, not `{0}`")]
    NoRunExitField(String),
    /// `state.<key>` that no stage sets.
    #[error("no stage sets `state.{0}`")]
    StateNeverSet(String),
    /// A field of an item that is a line of text.
    #[error("`item` is a line of text (an item of `{list}`); it has no field `{field}`")]
    LineHasNoField {
        /// The list, as the `foreach` wrote it.
        list: String,
        /// The field.
        field: String,
    },
    /// A field of a sub-workflow's outputs it does not have.
    #[error("the sub-workflow of stage `{stage}` has no output `{output}`")]
    NoSubWorkflowOutput {
        /// The stage.
        stage: String,
        /// The output.
        output: String,
    },
    /// A field of a text output.
    #[error("the output of stage `{stage}` is text; it has no field `{field}`")]
    TextHasNoField {
        /// The stage.
        stage: String,
        /// The field.
        field: String,
    },
    /// A field of a list output.
    #[error("the output of stage `{stage}` is a list; it has no field `{field}`")]
    ListHasNoField {
        /// The stage.
        stage: String,
        /// The field.
        field: String,
    },
    /// A field of the output of a stage with no action.
    #[error("stage `{stage}` has no action, so no output; it has no field `{field}`")]
    NoOutputField {
        /// The stage.
        stage: String,
        /// The field.
        field: String,
    },
    /// A property a schema does not have (`under`: the dotted path walked to it, if any).
    #[error("{subject} has no property `{property}`{}", walked_under(.under))]
    NoProperty {
        /// What the path is read from ("the output of `x`", a schema's file).
        subject: String,
        /// The property.
        property: String,
        /// The path walked to the node that lacks it.
        under: String,
    },
    /// A property an open schema does not declare, near one it does (a warning).
    #[error(
        "{subject} has no declared property `{property}`{} (the schema leaves others open)",
        walked_under(.under)
    )]
    NoDeclaredProperty {
        /// What the path is read from.
        subject: String,
        /// The property.
        property: String,
        /// The path walked to the node that lacks it.
        under: String,
    },
    /// A field of a value a schema says is a scalar.
    #[error("{subject} gives a {scalar} here{}; it has no field `{field}`", walked_under(.under))]
    ScalarHasNoField {
        /// What the path is read from.
        subject: String,
        /// The scalar's type ("string").
        scalar: &'static str,
        /// The path walked to it.
        under: String,
        /// The field.
        field: String,
    },

    // Foreach.
    /// `foreach` over an input whose type is not a list.
    #[error("`foreach` needs a list, but input `{input}` is {}", article(.kind))]
    ForeachOverInput {
        /// The input.
        input: String,
        /// Its type.
        kind: &'static str,
    },
    /// `foreach` over a path a schema says is not a list.
    #[error("`foreach` needs a list, but `{list}` is {} ({schema})", article(.kind))]
    ForeachOverNonList {
        /// The list, as the `foreach` wrote it.
        list: String,
        /// The type the schema gives it.
        kind: String,
        /// The schema, as messages name it.
        schema: String,
    },
    /// `foreach` over a text output.
    #[error(
        "`foreach` needs a list, but the output of stage `{0}` is text, which would be looped over character by character"
    )]
    ForeachOverText(String),
    /// `foreach` over a sub-workflow's outputs.
    #[error(
        "`foreach` needs a list, but the output of stage `{0}` is an object (its sub-workflow's outputs)"
    )]
    ForeachOverOutputs(String),
    /// `foreach` over the output of a stage with no action.
    #[error(
        "`foreach` loops over the output of stage `{0}`, which has no action and so no output"
    )]
    ForeachOverNothing(String),

    // Comparisons.
    /// A comparison with a string that the value is never.
    #[error("`{path}` is never `{literal}`, so this comparison is always {always}")]
    NeverEqual {
        /// The path compared.
        path: String,
        /// The string.
        literal: String,
        /// What the comparison always gives.
        always: bool,
    },
    /// A comparison with a string of a value that is never a string.
    #[error(
        "`{path}` is {}, never the string `{literal}`, so this comparison is always {always}",
        .kinds.join(" or ")
    )]
    NeverAString {
        /// The path compared.
        path: String,
        /// The types its schema gives it.
        kinds: Vec<String>,
        /// The string.
        literal: String,
        /// What the comparison always gives.
        always: bool,
    },
    /// An ordering comparison (`<`, `>`, ...) of a value with a literal of another type:
    /// minijinja orders values of different types by their type alone.
    #[error(
        "`{path}` is {}, and `{against}` orders it with {} by type alone, never by value",
        .kinds.join(" or "),
        if *.string { "a string" } else { "a number" }
    )]
    OrderedAcrossTypes {
        /// The path compared.
        path: String,
        /// The types its schema gives it.
        kinds: Vec<String>,
        /// The operator and the literal as written (`> 'x'`).
        against: String,
        /// Whether the literal is a string (else a number).
        string: bool,
    },
    /// A literal pattern given to a regex filter that does not compile.
    #[error("the pattern `{pattern}` of `{filter}` does not compile: {error}")]
    InvalidRegex {
        /// The filter.
        filter: String,
        /// The pattern.
        pattern: String,
        /// Why, as the regex parser says.
        error: String,
    },
    /// A read of a field of a stage that may be skipped, under no guard (a warning).
    #[error(
        "`{path}` fails when stage `{stage}` is skipped (its `if` is `{condition}`): a skipped stage's output is none"
    )]
    UnguardedRead {
        /// The stage read.
        stage: String,
        /// The path read.
        path: String,
        /// The stage's `if`.
        condition: String,
    },

    // Test files.
    /// A test file (`*.test.toml`) that does not read, or names what its workflow lacks.
    #[error("{0}")]
    InvalidTest(String),
}

/// How a written path leaves the roots of `[workflow] writes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escape {
    /// It climbs out with `..`.
    ParentDir,
    /// It is absolute.
    Absolute,
    /// It is relative, elsewhere.
    Elsewhere,
}

fn outside(path: &str, escape: Escape, roots: &[String]) -> String {
    let listed = roots
        .iter()
        .map(|root| format!("`{root}`"))
        .collect::<Vec<_>>()
        .join(", ");
    match escape {
        Escape::ParentDir => {
            format!("path `{path}` climbs out of the workflow's writes with `..` ({listed})")
        }
        Escape::Absolute => {
            format!("absolute path `{path}` is outside the workflow's writes ({listed})")
        }
        Escape::Elsewhere => format!("path `{path}` is outside the workflow's writes ({listed})"),
    }
}

fn in_table(table: &str) -> String {
    if table.is_empty() {
        " at the top level".to_string()
    } else {
        format!(" in `{table}`")
    }
}

fn walked_under(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(" under `{path}`")
    }
}

fn or_root(pointer: &str) -> &str {
    if pointer.is_empty() {
        "/"
    } else {
        pointer
    }
}

/// "an object", "a string", ...
fn article(kind: &str) -> String {
    match kind {
        "object" | "integer" | "array" => format!("an {kind}"),
        _ => format!("a {kind}"),
    }
}
