//! Gather: every template source of the workflow, queued under its [`TemplateKey`] with where
//! it was written and what it may read; the per-stage rules that need no compiled template
//! (one action, keys that apply to the action, durations, sub-workflow inputs, `writes`).

use std::sync::Arc;

use serde_json::Value;

use super::key::{DurationKey, Field, SizeKey, TemplateKey};
use super::{Checker, Workflow};
use crate::builtins::{self, Builtin};
use crate::diag::{did_you_mean, Diagnostic, DiagnosticKind, SourceFile};
use crate::format::{CacheDef, OnError, OutputFormat, StageDef, TemplateRef, ACTION_KEYS};
use crate::library::Shelf;
use crate::load::{self, pointer_segment};

/// A template source waiting to be compiled, and where it was written.
pub(crate) struct Pending {
    pub(crate) key: TemplateKey,
    /// Its name in the template environment: `value:` before it keeps a single expression's
    /// value native, `.sh` in it shell-quotes printed values, `#item`/`#output` say what it
    /// may read.
    pub(crate) name: String,
    pub(crate) source: String,
    /// A bare expression, not a template.
    pub(crate) native: bool,
    pub(crate) context: Context,
    /// Where the template text lives: a pointer in the workflow, or a template file.
    pub(crate) at: At,
}

impl Pending {
    /// Its name without the context marks, as messages name it.
    pub(crate) fn clean_name(&self) -> String {
        if !self.name.contains('#') {
            return self.name.clone();
        }
        self.name.replace("#output", "").replace("#item", "")
    }
}

#[derive(Clone)]
pub(crate) enum At {
    Pointer(String),
    File(SourceFile),
}

/// Which names a template may read.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Context {
    Plain,
    Item,
    Output,
}

impl Context {
    fn of_mark(mark: &str) -> Context {
        if mark.contains("#output") {
            Context::Output
        } else if mark.contains("#item") {
            Context::Item
        } else {
            Context::Plain
        }
    }
}

/// How a queued template source is compiled.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// Rendered to text.
    Text,
    /// Rendered to text, or kept native when it is a single `{{ expression }}`.
    Value,
    /// A bare expression.
    Expr,
}

/// What a stage's action will be, once its templates are compiled.
pub(crate) enum PendingAction {
    None,
    /// An action whose own problem is already reported (a sub-workflow that does not load or
    /// check, an unknown built-in): what it gives is unknown, so nothing more is said of it.
    Failed,
    Process {
        shell: bool,
        argc: usize,
        env_keys: Vec<String>,
        /// `None`: `[0]`.
        ok_codes: Option<Box<[i32]>>,
    },
    Prompt {
        model: String,
    },
    Template,
    Uses {
        builtin: &'static Builtin,
    },
    Workflow {
        workflow: Arc<Workflow>,
    },
}

impl Checker<'_> {
    /// Queue every template of the workflow; returns each stage's pending action, in order.
    pub(super) fn gather(
        &mut self,
        visiting: &mut Vec<super::Visit>,
    ) -> Vec<Option<PendingAction>> {
        let file = self.file;
        let mut actions = Vec::with_capacity(file.stages.len());
        self.sources.reserve(2 * file.stages.len());
        for (i, (id, def)) in file.stages.iter().enumerate() {
            actions.push(self.gather_stage(i, id, def, visiting));
        }
        if let Some(text) = &file.workflow.max_output {
            self.size(SizeKey::Workflow, text, "/workflow/max_output");
        }
        if let Some(records) = &file.workflow.records {
            if let Some(text) = &records.keep_size {
                self.size(SizeKey::RecordsKeep, text, "/workflow/records/keep_size");
            }
            if let Some(text) = &records.max_size {
                self.size(SizeKey::RecordsMax, text, "/workflow/records/max_size");
            }
        }
        for (name, source) in &file.outputs {
            self.queue(
                TemplateKey::Output(name.clone()),
                format!("outputs.{name}"),
                source,
                Kind::Value,
                Context::Plain,
                At::Pointer(format!("/outputs/{}", pointer_segment(name))),
            );
        }
        for (name, source) in &file.workflow.child_env {
            self.queue(
                TemplateKey::ChildEnv(name.clone()),
                format!("workflow.child_env.{name}"),
                source,
                Kind::Text,
                Context::Plain,
                At::Pointer(format!("/workflow/child_env/{}", pointer_segment(name))),
            );
        }
        for (i, source) in file.workflow.writes.iter().enumerate() {
            self.queue(
                TemplateKey::Write(i),
                format!("workflow.writes.{i}"),
                source,
                Kind::Text,
                Context::Plain,
                At::Pointer(format!("/workflow/writes/{i}")),
            );
        }
        if let Some(project) = file
            .workflow
            .records
            .as_ref()
            .and_then(|records| records.project.as_ref())
        {
            self.queue(
                TemplateKey::RecordsProject,
                "workflow.records.project".into(),
                project,
                Kind::Text,
                Context::Plain,
                At::Pointer("/workflow/records/project".into()),
            );
        }
        if let Some(lock) = &file.workflow.lock {
            if let Some(stale_after) = &lock.stale_after {
                self.duration(
                    DurationKey::LockStaleAfter,
                    stale_after,
                    "/workflow/lock/stale_after",
                );
            }
            self.queue(
                TemplateKey::LockPath,
                "workflow.lock.path".into(),
                &lock.path,
                Kind::Text,
                Context::Plain,
                At::Pointer("/workflow/lock/path".into()),
            );
            if let Some(message) = &lock.message {
                self.queue(
                    TemplateKey::LockMessage,
                    "workflow.lock.message".into(),
                    message,
                    Kind::Text,
                    Context::Plain,
                    At::Pointer("/workflow/lock/message".into()),
                );
            }
        }
        actions
    }

    /// Queue one template source.
    fn queue(
        &mut self,
        key: TemplateKey,
        name: String,
        source: &str,
        kind: Kind,
        context: Context,
        at: At,
    ) {
        let (name, native) = match kind {
            Kind::Text => (name, false),
            Kind::Value => (format!("value:{name}"), false),
            Kind::Expr => (name, true),
        };
        self.sources.push(Pending {
            key,
            name,
            source: source.to_string(),
            native,
            context,
            at,
        });
    }

    fn template_ref(&mut self, key: TemplateKey, name: String, tref: &TemplateRef, pointer: &str) {
        let context = Context::of_mark(&name);
        match tref {
            TemplateRef::Inline(inline) => {
                self.queue(
                    key,
                    name,
                    &inline.inline,
                    Kind::Text,
                    context,
                    At::Pointer(format!("{pointer}/inline")),
                );
            }
            TemplateRef::File(path) => {
                match self
                    .search
                    .find_file(&self.raw.library, Shelf::Templates, path)
                {
                    Some(file) => {
                        let source = file.text.to_string();
                        self.queue(key, name, &source, Kind::Text, context, At::File(file));
                    }
                    None => {
                        self.error(DiagnosticKind::TemplateNotFound(path.clone()), pointer).help = Some(format!(
                            "templates are looked up under `templates/` in {} and along the search path; for inline text write {{ inline = \"...\" }}",
                            self.raw.library.display()
                        ));
                    }
                }
            }
        }
    }

    fn gather_stage(
        &mut self,
        i: usize,
        id: &str,
        def: &StageDef,
        visiting: &mut Vec<super::Visit>,
    ) -> Option<PendingAction> {
        // Shown in pointers and names only where a problem or a template needs them: written
        // on use, not built for every stage.
        let sp = StagePointer(id);
        if def.disabled {
            // An overlay's `disabled` removes the base's stage when the chain is merged; one
            // still here is in a workflow with no base, and would run.
            self.error_key(
                DiagnosticKind::DisabledWithoutBase(id.to_string()),
                &format!("{sp}/disabled"),
            )
            .help = Some(format!(
                "remove the stage `{id}`, or set `[workflow] extends` to the workflow whose stage it removes"
            ));
        }
        let prefix = StagePrefix(id);
        let has = |key: &str| def.has(key);
        let actions: Vec<&str> = ACTION_KEYS.iter().copied().filter(|k| has(k)).collect();
        if actions.len() > 1 {
            self.error_key(
                DiagnosticKind::SeveralActions {
                    stage: id.to_string(),
                    actions: actions.iter().map(|a| (*a).to_string()).collect(),
                },
                &format!("{sp}/{}", actions[1]),
            )
            .help = Some("split it into stages ordered with `after`".into());
        }
        let p = |k: &str| format!("{sp}/{k}");
        if let Some(source) = &def.if_ {
            self.stage_source(i, id, Field::If, &["if"], "", source, Kind::Expr);
        }
        if let Some(source) = &def.exit_if {
            self.stage_source(
                i,
                id,
                Field::ExitIf,
                &["exit_if"],
                "#output",
                source,
                Kind::Expr,
            );
        }
        if let Some(source) = &def.exit_message {
            self.stage_source(
                i,
                id,
                Field::ExitMessage,
                &["exit_message"],
                "#output",
                source,
                Kind::Text,
            );
        }
        if def.exit_message.is_some()
            && def.exit_if.is_none()
            && def.on_error != Some(OnError::Exit)
        {
            self.diags.push(
                Diagnostic::warning(DiagnosticKind::ExitMessageWithoutExitIf(id.to_string()))
                    .at_opt(self.raw.locate_key(&p("exit_message"))),
            );
        }
        for (position, assertion) in def.assert.iter().enumerate() {
            let a = position.to_string();
            self.stage_source(
                i,
                id,
                Field::AssertThat(position),
                &["assert", &a, "that"],
                "#output",
                &assertion.that,
                Kind::Expr,
            );
            if let Some(message) = &assertion.message {
                self.stage_source(
                    i,
                    id,
                    Field::AssertMessage(position),
                    &["assert", &a, "message"],
                    "#output",
                    message,
                    Kind::Text,
                );
            }
        }
        if let Some(source) = &def.foreach {
            self.stage_source(i, id, Field::Foreach, &["foreach"], "", source, Kind::Expr);
        } else {
            for (key, set) in [
                ("concurrency", def.concurrency.is_some()),
                ("on_item_error", def.on_item_error.is_some()),
            ] {
                if set {
                    self.diags.push(
                        Diagnostic::warning(DiagnosticKind::ItemSettingWithoutForeach {
                            stage: id.to_string(),
                            key,
                        })
                        .at_opt(self.raw.locate_key(&p(key))),
                    );
                }
            }
        }
        let item = if def.foreach.is_some() { "#item" } else { "" };
        if let Some(output) = &def.output {
            if let Some(path) = &output.path {
                self.stage_source(
                    i,
                    id,
                    Field::OutputPath,
                    &["output", "path"],
                    item,
                    path,
                    Kind::Text,
                );
                if def.foreach.is_some() && !names_the_item(path) {
                    self.error(
                        DiagnosticKind::SameOutputPath(id.to_string()),
                        &p("output/path"),
                    )
                    .help = Some(
                        "each item's output is written to the path rendered for it: put `{{ index }}` or a field of `item` in it"
                            .into(),
                    );
                }
                if self.file.workflow.writes.is_empty() {
                    self.error(
                        DiagnosticKind::OutputWithoutWrites(id.to_string()),
                        &p("output/path"),
                    )
                    .help = Some(
                        "list the folders the workflow may write in `[workflow] writes`".into(),
                    );
                }
            }
            if let Some(schema_name) = &output.schema {
                self.load_schema(schema_name, &p("output/schema"));
                if output.format != OutputFormat::Json {
                    self.error(
                        DiagnosticKind::SchemaWithoutJson(id.to_string()),
                        &p("output/schema"),
                    )
                    .help = Some("set `output = { format = \"json\", schema = ... }`".into());
                }
            }
        }
        for (key, source) in def.set_state() {
            self.stage_source(
                i,
                id,
                Field::SetState(key.clone()),
                &["set_state", key],
                "#output",
                source,
                Kind::Value,
            );
        }
        if let Some(CacheDef::Keyed(keyed)) = &def.cache {
            if let Some(key) = &keyed.key {
                self.stage_source(
                    i,
                    id,
                    Field::CacheKey,
                    &["cache", "key"],
                    item,
                    key,
                    Kind::Text,
                );
            }
            if let Some(ttl) = &keyed.ttl {
                self.duration(DurationKey::CacheTtl(i), ttl, &p("cache/ttl"));
            }
        }
        if let Some(text) = &def.max_output {
            self.size(SizeKey::Stage(i), text, &p("max_output"));
        }
        for (key, text, pointer) in [
            (DurationKey::Timeout(i), &def.timeout, "timeout"),
            (
                DurationKey::RetryBackoff(i),
                &def.retry_backoff,
                "retry_backoff",
            ),
        ] {
            if let Some(text) = text {
                self.duration(key, text, &p(pointer));
            }
        }
        let action = actions.first().copied();
        let own = action.map_or(&[][..], crate::load::action_companions);
        let strays: Vec<&str> = ["command", "prompt", "uses"]
            .into_iter()
            .flat_map(crate::load::action_companions)
            .copied()
            .filter(|key| has(key) && !own.contains(key))
            .collect();
        for key in strays {
            self.error_key(
                DiagnosticKind::StrayKey {
                    key: key.to_string(),
                    action: action.map(str::to_string),
                },
                &p(key),
            );
        }

        let pending = match action {
            None => PendingAction::None,
            Some("command" | "shell") => {
                let shell = action == Some("shell");
                let mut argc = 0;
                if shell {
                    if let Some(script) = &def.shell {
                        // The `.sh` name turns on shell-quoting of every printed value.
                        self.stage_source(
                            i,
                            id,
                            Field::Shell,
                            &["shell"],
                            if item.is_empty() { ".sh" } else { "#item.sh" },
                            script,
                            Kind::Text,
                        );
                    }
                } else if let Some(argv) = &def.command {
                    if argv.is_empty() {
                        self.error(DiagnosticKind::EmptyCommand(id.to_string()), &p("command"));
                    }
                    argc = argv.len();
                    for (a, arg) in argv.iter().enumerate() {
                        self.stage_source(
                            i,
                            id,
                            Field::Command(a),
                            &["command", &a.to_string()],
                            item,
                            arg,
                            Kind::Text,
                        );
                    }
                }
                if let Some(stdin) = &def.stdin {
                    self.stage_source(i, id, Field::Stdin, &["stdin"], item, stdin, Kind::Text);
                }
                if let Some(cwd) = &def.cwd {
                    self.stage_source(i, id, Field::Cwd, &["cwd"], item, cwd, Kind::Text);
                }
                for (k, v) in def.env() {
                    self.stage_source(
                        i,
                        id,
                        Field::Env(k.clone()),
                        &["env", k],
                        item,
                        v,
                        Kind::Text,
                    );
                }
                PendingAction::Process {
                    shell,
                    argc,
                    env_keys: def.env().map(|(k, _)| k.clone()).collect(),
                    ok_codes: def.ok_codes.clone(),
                }
            }
            Some("prompt") => {
                if let Some(prompt) = &def.prompt {
                    self.template_ref(
                        TemplateKey::Stage(i, Field::Prompt),
                        format!("{prefix}prompt{item}"),
                        prompt,
                        &p("prompt"),
                    );
                }
                if let Some(system) = &def.system {
                    self.template_ref(
                        TemplateKey::Stage(i, Field::System),
                        format!("{prefix}system{item}"),
                        system,
                        &p("system"),
                    );
                }
                if let Some(prefix_ref) = &def.prompt_prefix {
                    self.template_ref(
                        TemplateKey::Stage(i, Field::PromptPrefix),
                        format!("{prefix}prompt_prefix{item}"),
                        prefix_ref,
                        &p("prompt_prefix"),
                    );
                }
                let model = match &def.model {
                    Some(model) => model.to_string(),
                    None => {
                        self.error_key(DiagnosticKind::NoModel(id.to_string()), &sp.to_string())
                            .help = Some(
                            "add `model = \"haiku\"` (an alias from the model configuration)"
                                .into(),
                        );
                        String::new()
                    }
                };
                PendingAction::Prompt { model }
            }
            Some("template") => {
                if let Some(template) = &def.template {
                    self.template_ref(
                        TemplateKey::Stage(i, Field::Template),
                        format!("{prefix}template{item}"),
                        template,
                        &p("template"),
                    );
                }
                PendingAction::Template
            }
            Some("uses") => {
                let name = def.uses.clone().unwrap_or_default();
                let Some(builtin) = builtins::lookup(&name) else {
                    let names: Vec<&str> = builtins::all().iter().map(|b| b.name).collect();
                    let help = did_you_mean(&name, names.iter().copied())
                        .unwrap_or_else(|| format!("built-ins: {}", names.join(", ")));
                    self.error(DiagnosticKind::UnknownBuiltin(name.to_string()), &p("uses"))
                        .help = Some(help);
                    self.gather_all_with(i, def, &prefix, item, &p);
                    return Some(PendingAction::Failed);
                };
                self.check_with(id, builtin, def);
                for (key, message) in builtins::ask::problems(def.with.as_deref())
                    .into_iter()
                    .filter(|_| builtin.name == builtins::ask::NAME)
                {
                    self.error(message, &p(&format!("with/{key}")));
                }
                self.gather_all_with(i, def, &prefix, item, &p);
                if builtin.writes && self.file.workflow.writes.is_empty() {
                    let kind = DiagnosticKind::BuiltinWithoutWrites {
                        stage: id.to_string(),
                        builtin: builtin.name,
                    };
                    self.error(kind, &p("uses")).help = Some(
                        "list the folders the workflow may write in `[workflow] writes`".into(),
                    );
                }
                PendingAction::Uses { builtin }
            }
            Some("workflow") => {
                let name = def.workflow.clone().unwrap_or_default();
                let sub = match load::load(self.search, &name, self.cwd) {
                    Ok(raw) => {
                        let file = super::visit_key(&raw);
                        if visiting.iter().any(|v| v.file == file) {
                            self.error(
                                DiagnosticKind::WorkflowCallsItself {
                                    name: name.to_string(),
                                    chain: visiting.iter().map(|v| v.shown.clone()).collect(),
                                },
                                &p("workflow"),
                            );
                            self.gather_all_with(i, def, &prefix, item, &p);
                            return Some(PendingAction::Failed);
                        }
                        super::check_inner(raw, self.search, self.cwd, visiting, &name)
                    }
                    Err(diags) => {
                        // Not found or not read: said once, at the `workflow` key.
                        for mut diagnostic in diags {
                            if diagnostic.location.is_none() {
                                let pointer = p("workflow");
                                diagnostic.location = self.raw.locate(&pointer);
                            }
                            self.diags.push(diagnostic);
                        }
                        self.gather_all_with(i, def, &prefix, item, &p);
                        return Some(PendingAction::Failed);
                    }
                };
                let workflow = match sub {
                    Ok(workflow) => Arc::new(workflow),
                    Err(diags) => {
                        let errors = diags.iter().filter(|d| d.is_error()).count();
                        self.error(
                            DiagnosticKind::SubWorkflowDoesNotCheck {
                                name: name.to_string(),
                                errors,
                            },
                            &p("workflow"),
                        );
                        self.diags.extend(diags);
                        self.gather_all_with(i, def, &prefix, item, &p);
                        return Some(PendingAction::Failed);
                    }
                };
                let given = def.with.clone().unwrap_or_default();
                for key in given.keys() {
                    if !workflow.inputs.contains_key(key) {
                        let help = did_you_mean(key, workflow.inputs.keys().map(String::as_str));
                        self.error_key(
                            DiagnosticKind::NoSuchWorkflowInput {
                                workflow: name.to_string(),
                                input: key.clone(),
                            },
                            &p(&format!("with/{}", pointer_segment(key))),
                        )
                        .help = help;
                    }
                }
                for (key, decl) in &workflow.inputs {
                    if decl.default.is_none() && !given.contains_key(key) {
                        self.error_key(
                            DiagnosticKind::MissingWorkflowInput {
                                workflow: name.to_string(),
                                input: key.clone(),
                            },
                            &p("workflow"),
                        );
                    }
                }
                for (key, value) in given.iter() {
                    let Some(decl) = workflow.inputs.get(key) else {
                        continue;
                    };
                    // A string with a template may render to any type; anything else is the
                    // value the sub-workflow's inputs get, which must be of the declared type.
                    if value
                        .as_str()
                        .is_some_and(crate::template::compiled::has_syntax)
                        || decl.kind.admits(value)
                    {
                        continue;
                    }
                    self.error(
                        DiagnosticKind::WorkflowInputType {
                            input: key.clone(),
                            workflow: name.to_string(),
                            expected: decl.kind.name(),
                            found: super::format_errors::json_type(value),
                        },
                        &p(&format!("with/{}", pointer_segment(key))),
                    )
                    .help = Some(format!(
                        "write {} here: the sub-workflow gets the value as written",
                        match decl.kind.name() {
                            kind @ ("integer" | "array" | "object") => format!("an {kind}"),
                            kind => format!("a {kind}"),
                        }
                    ));
                }
                self.gather_all_with(i, def, &prefix, item, &p);
                PendingAction::Workflow { workflow }
            }
            Some(_) => PendingAction::None,
        };
        Some(pending)
    }

    /// Queue one template of stage `id`: `path` is where it sits in the stage
    /// (`["assert", "0", "that"]`), which gives both its name and its pointer; `mark` says what
    /// it may read (`#item`, `#output`, or nothing).
    #[allow(clippy::too_many_arguments)]
    fn stage_source(
        &mut self,
        i: usize,
        id: &str,
        field: Field,
        path: &[&str],
        mark: &str,
        source: &str,
        kind: Kind,
    ) {
        // Built in place: a stage or two of templates each, tens of thousands in a large
        // workflow, and `format!` with `join` cost more than the rest of gather.
        let length: usize = path.iter().map(|s| s.len() + 1).sum();
        let mut name = String::with_capacity(7 + id.len() + length + mark.len());
        name.push_str("stages.");
        name.push_str(id);
        let mut pointer = String::with_capacity(8 + 2 * (id.len() + length));
        pointer.push_str("/stages/");
        push_segment(&mut pointer, id);
        for segment in path {
            name.push('.');
            name.push_str(segment);
            pointer.push('/');
            push_segment(&mut pointer, segment);
        }
        name.push_str(mark);
        let key = TemplateKey::Stage(i, field);
        self.queue(
            key,
            name,
            source,
            kind,
            Context::of_mark(mark),
            At::Pointer(pointer),
        );
    }

    /// Every value of a stage's `with` table, each string a template. Gathered for a stage
    /// whose built-in or sub-workflow could not be found or checked too: what the values read
    /// still counts in the graph, so a cycle or a bad reference through them is reported in the
    /// same pass as the name that is wrong, not after it is fixed.
    fn gather_all_with(
        &mut self,
        i: usize,
        def: &StageDef,
        prefix: &StagePrefix<'_>,
        item: &str,
        pointer: &dyn Fn(&str) -> String,
    ) {
        let Some(with) = &def.with else {
            return;
        };
        for (k, v) in with.iter() {
            self.gather_with(
                i,
                vec![k.clone()],
                &format!("{prefix}with.{k}{item}"),
                v,
                &pointer(&format!("with/{}", pointer_segment(k))),
            );
        }
    }

    /// Queue every string inside a `with` value; `path` is the keys and indexes down to it.
    fn gather_with(
        &mut self,
        i: usize,
        path: Vec<String>,
        name: &str,
        value: &Value,
        pointer: &str,
    ) {
        match value {
            Value::String(source) => {
                let context = Context::of_mark(name);
                let key = TemplateKey::Stage(i, Field::With(path));
                let at = At::Pointer(pointer.to_string());
                self.queue(key, name.to_string(), source, Kind::Value, context, at);
            }
            Value::Array(items) => {
                for (n, item) in items.iter().enumerate() {
                    let mut path = path.clone();
                    path.push(n.to_string());
                    self.gather_with(
                        i,
                        path,
                        &format!("{name}.{n}"),
                        item,
                        &format!("{pointer}/{n}"),
                    );
                }
            }
            Value::Object(map) => {
                for (k, v) in map {
                    let mut path = path.clone();
                    path.push(k.clone());
                    self.gather_with(
                        i,
                        path,
                        &format!("{name}.{k}"),
                        v,
                        &format!("{pointer}/{}", pointer_segment(k)),
                    );
                }
            }
            _ => {}
        }
    }

    pub(super) fn check_inputs(&mut self) {
        for (name, decl) in &self.file.inputs {
            if let Some(default) = &decl.default {
                if !decl.kind.admits(default) {
                    self.error(
                        DiagnosticKind::BadInputDefault {
                            input: name.clone(),
                            found: super::format_errors::json_type(default),
                            expected: decl.kind.name(),
                        },
                        &format!("/inputs/{}/default", pointer_segment(name)),
                    );
                }
            }
        }
    }

    /// Parse a size once: kept for assemble, or an error at its pointer.
    fn size(&mut self, key: SizeKey, text: &str, pointer: &str) {
        match crate::floor::size::parse_size(text) {
            Ok(bytes) => {
                self.sizes.insert(key, bytes);
            }
            Err(error) => {
                self.error(DiagnosticKind::BadSize(error), pointer).help =
                    Some("sizes look like \"64MiB\", \"500KB\", \"1GiB\", \"4096\"".into());
            }
        }
    }

    /// Parse a duration once: kept for assemble, or an error at its pointer.
    fn duration(&mut self, key: DurationKey, text: &str, pointer: &str) {
        match crate::floor::duration::parse(text) {
            Ok(duration) => {
                self.durations.insert(key, duration);
            }
            Err(error) => {
                self.error(DiagnosticKind::BadDuration(error), pointer).help =
                    Some("durations look like \"500ms\", \"30s\", \"10m\", \"2h\", \"7d\"".into());
            }
        }
    }
}

/// `/stages/<id>`, written where it is shown.
struct StagePointer<'a>(&'a str);

impl std::fmt::Display for StagePointer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut pointer = String::with_capacity(8 + self.0.len());
        pointer.push_str("/stages/");
        push_segment(&mut pointer, self.0);
        f.write_str(&pointer)
    }
}

/// `stages.<id>.`, the start of a stage's template names, written where it is shown.
struct StagePrefix<'a>(&'a str);

impl std::fmt::Display for StagePrefix<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stages.{}.", self.0)
    }
}

/// `segment` escaped as a JSON pointer segment, onto `pointer`.
fn push_segment(pointer: &mut String, segment: &str) {
    if segment.contains(['~', '/']) {
        pointer.push_str(&pointer_segment(segment));
    } else {
        pointer.push_str(segment);
    }
}

/// Whether a template reads `item` or `index` (or `loop`), so it renders differently per item.
fn names_the_item(source: &str) -> bool {
    static NAMES: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"(?:^|[^\w.])(?:item|index|loop)\b").expect("a valid regex")
    });
    crate::template::compiled::has_syntax(source) && NAMES.is_match(source)
}
