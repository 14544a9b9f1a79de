//! Assemble: each checked [`Stage`] and the workflow-level parts, built from the definitions and
//! the compiled templates, each template taken out by its [`TemplateKey`].

use crate::check::Deps;
use std::sync::Arc;
use std::time::Duration;

use foldhash::{HashMap, HashMapExt};
use serde_json::Value;

use super::gather::{Pending, PendingAction};
use super::key::{DurationKey, Field, SizeKey, TemplateKey};
use super::{
    Action, CacheSpec, CheckedLock, GuardTexts, ProcessAction, ProcessOptions, PromptAction, Stage,
    StageExtras, StageText, WithTree,
};
use crate::floor::Sparse;
use crate::format::{CacheDef, OutputFormat, StageDef, TemplateRef, WorkflowFile};
use crate::schema::Schema;
use crate::template::Tmpl;
use indexmap::IndexMap;

/// What check hands over besides the stages' definitions.
pub(crate) struct Parts {
    pub(crate) stages: Vec<Stage>,
    pub(crate) order: Vec<usize>,
    pub(crate) dependents: Vec<Vec<usize>>,
    pub(crate) outputs: Vec<(String, Tmpl)>,
    pub(crate) child_env: Vec<(String, Tmpl)>,
    pub(crate) writes: Vec<Tmpl>,
    pub(crate) lock: Option<CheckedLock>,
    pub(crate) records_project: Option<Tmpl>,
    /// `[workflow] max_output` in bytes, or the default.
    pub(crate) max_output: u64,
    /// `[workflow] records.keep_size` and `records.max_size`, in bytes.
    pub(crate) records_keep_size: Option<u64>,
    pub(crate) records_max_size: Option<u64>,
}

/// The compiled templates by key.
struct Templates(HashMap<TemplateKey, Tmpl>);

impl Templates {
    fn take(&mut self, key: TemplateKey) -> Option<Tmpl> {
        self.0.remove(&key)
    }

    fn stage(&mut self, i: usize, field: Field) -> Option<Tmpl> {
        self.take(TemplateKey::Stage(i, field))
    }

    /// A template is queued only for a key the stage has (gather): the keys it does not have
    /// are not looked for.
    fn stage_if(&mut self, has: bool, i: usize, field: Field) -> Option<Tmpl> {
        has.then(|| self.stage(i, field)).flatten()
    }

    fn with_tree(&mut self, i: usize, path: &mut Vec<String>, value: &Value) -> WithTree {
        match value {
            Value::String(_) => match self.stage(i, Field::With(path.clone())) {
                Some(tmpl) => WithTree::Template(tmpl),
                None => WithTree::Literal(value.clone()),
            },
            Value::Array(items) => WithTree::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(n, item)| {
                        path.push(n.to_string());
                        let tree = self.with_tree(i, path, item);
                        path.pop();
                        tree
                    })
                    .collect(),
            ),
            Value::Object(map) => WithTree::Object(
                map.iter()
                    .map(|(k, v)| {
                        path.push(k.clone());
                        let tree = self.with_tree(i, path, v);
                        path.pop();
                        (k.clone(), tree)
                    })
                    .collect(),
            ),
            other => WithTree::Literal(other.clone()),
        }
    }
}

/// Build the checked parts. `templates[k]` is the compiled `pendings[k]`; the sources are freed
/// (all but their keys) before the first stage is built.
#[allow(clippy::too_many_arguments)]
pub(crate) fn assemble(
    file: &WorkflowFile,
    definitions: IndexMap<String, Arc<StageDef>>,
    actions: Vec<Option<PendingAction>>,
    pendings: Vec<Pending>,
    templates: Vec<Option<Tmpl>>,
    deps: &[Deps],
    order: Vec<usize>,
    declared: &HashMap<String, Option<Arc<Schema>>>,
    definition_hashes: Vec<[u8; 32]>,
    durations: &HashMap<DurationKey, Duration>,
    sizes: &HashMap<SizeKey, u64>,
) -> Option<Parts> {
    let duration = |key| durations.get(&key).copied();
    let size = |key| sizes.get(&key).copied();
    let mut by_key = HashMap::with_capacity(templates.len());
    for (pending, tmpl) in pendings.into_iter().zip(templates) {
        if let Some(tmpl) = tmpl {
            by_key.insert(pending.key, tmpl);
        }
    }
    let mut t = Templates(by_key);
    let mut definition_hashes = definition_hashes.into_iter();
    let mut stages = Vec::with_capacity(definitions.len());
    let empty = || Tmpl::Literal(String::new());
    // Each definition is freed once its stage is built.
    for (i, ((id, def), pending)) in definitions.into_iter().zip(actions).enumerate() {
        let action = match pending {
            None | Some(PendingAction::None | PendingAction::Failed) => Action::None,
            Some(PendingAction::Process {
                shell,
                argc,
                env_keys,
                ok_codes,
            }) => {
                let mut argv = Vec::with_capacity(if shell { 3 } else { argc });
                if shell {
                    argv.push(Tmpl::Literal("sh".into()));
                    argv.push(Tmpl::Literal("-c".into()));
                    argv.push(t.stage(i, Field::Shell).unwrap_or_else(empty));
                } else {
                    for a in 0..argc {
                        argv.push(t.stage(i, Field::Command(a)).unwrap_or_else(empty));
                    }
                }
                let env = env_keys
                    .into_iter()
                    .filter_map(|k| t.stage(i, Field::Env(k.clone())).map(|tmpl| (k, tmpl)))
                    .collect();
                let options = ProcessOptions {
                    stdin: t.stage_if(def.stdin.is_some(), i, Field::Stdin),
                    cwd: t.stage_if(def.cwd.is_some(), i, Field::Cwd),
                    env,
                    ok_codes,
                };
                let process = ProcessAction::new(argv, options);
                if shell {
                    Action::Shell(process)
                } else {
                    Action::Command(process)
                }
            }
            Some(PendingAction::Prompt { model }) => Action::Prompt(Box::new(PromptAction {
                prompt: t.stage(i, Field::Prompt).unwrap_or_else(empty),
                system: t.stage(i, Field::System),
                prefix: t.stage(i, Field::PromptPrefix),
                model,
            })),
            Some(PendingAction::Template) => {
                Action::Template(t.stage(i, Field::Template).unwrap_or_else(empty))
            }
            Some(PendingAction::Uses { builtin }) => Action::Uses {
                builtin,
                with: Box::new(t.with_tree(
                    i,
                    &mut Vec::new(),
                    &Value::Object(def.with.clone().unwrap_or_default().into_iter().collect()),
                )),
            },
            Some(PendingAction::Workflow { workflow }) => Action::Workflow {
                workflow,
                with: def
                    .with
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| {
                        let tree = t.with_tree(i, &mut vec![k.clone()], &v);
                        (k, tree)
                    })
                    .collect(),
            },
        };
        // The declared schema, a `foreach` stage's too: there it holds each item's output.
        let schema = def
            .output
            .as_ref()
            .and_then(|o| o.schema.as_ref())
            .and_then(|name| declared.get(name).cloned().flatten());
        let format = def.output.as_ref().map_or(
            match &action {
                Action::Uses { .. } | Action::Workflow { .. } => OutputFormat::Json,
                _ => OutputFormat::Text,
            },
            |o| o.format,
        );
        let mut asserts = Vec::new();
        for a in 0..def.assert.len() {
            if let Some(that) = t.stage(i, Field::AssertThat(a)) {
                asserts.push((that, t.stage(i, Field::AssertMessage(a))));
            }
        }
        let set_state = def
            .set_state()
            .map(|(k, _)| k)
            .filter_map(|k| {
                t.stage(i, Field::SetState(k.clone()))
                    .map(|tmpl| (k.clone(), tmpl))
            })
            .collect();
        let cache = def.cache.as_ref().and_then(|c| match c {
            CacheDef::Enabled(false) => None,
            CacheDef::Enabled(true) => Some(CacheSpec {
                key: None,
                ttl: None,
            }),
            CacheDef::Keyed(_) => Some(CacheSpec {
                key: t.stage(i, Field::CacheKey),
                ttl: duration(DurationKey::CacheTtl(i)),
            }),
        });
        let extras = StageExtras {
            if_: t.stage_if(def.if_.is_some(), i, Field::If),
            exit_if: t.stage_if(def.exit_if.is_some(), i, Field::ExitIf),
            exit_message: t.stage_if(def.exit_message.is_some(), i, Field::ExitMessage),
            asserts,
            foreach: t.stage_if(def.foreach.is_some(), i, Field::Foreach),
            output_path: t.stage_if(
                def.output.as_ref().is_some_and(|o| o.path.is_some()),
                i,
                Field::OutputPath,
            ),
            set_state,
            timeout: duration(DurationKey::Timeout(i)),
            max_output: size(SizeKey::Stage(i)),
            retries: def.retries.unwrap_or(0),
            retry_backoff: duration(DurationKey::RetryBackoff(i)).unwrap_or(Duration::from_secs(1)),
            repair: def.repair.unwrap_or(1),
            concurrency: def.concurrency.map(|c| c as usize),
            on_item_error: def.on_item_error.unwrap_or_default(),
            temperature: def.temperature,
            max_tokens: def.max_tokens,
            dry_run_output: def.dry_run_output.clone(),
        };
        stages.push(Stage {
            id,
            index: i,
            text: text_of(&def),
            action,
            deps: deps[i].to_vec(),
            format,
            schema,
            cache,
            on_error: def.on_error.unwrap_or_default(),
            finally: def.finally,
            definition_hash: definition_hashes.next().unwrap_or_default(),
            extras: extras.boxed(),
        });
    }
    let mut dependents = vec![Vec::new(); stages.len()];
    for stage in &stages {
        for &d in &stage.deps {
            dependents[d].push(stage.index);
        }
    }
    let outputs = file
        .outputs
        .keys()
        .filter_map(|k| {
            t.take(TemplateKey::Output(k.clone()))
                .map(|tmpl| (k.clone(), tmpl))
        })
        .collect();
    let child_env = file
        .workflow
        .child_env
        .keys()
        .filter_map(|k| {
            t.take(TemplateKey::ChildEnv(k.clone()))
                .map(|tmpl| (k.clone(), tmpl))
        })
        .collect();
    let writes = (0..file.workflow.writes.len())
        .filter_map(|i| t.take(TemplateKey::Write(i)))
        .collect();
    let lock = match &file.workflow.lock {
        Some(lock) => Some(CheckedLock {
            path: t.take(TemplateKey::LockPath)?,
            busy: lock.busy,
            stale_after: duration(DurationKey::LockStaleAfter),
            message: t.take(TemplateKey::LockMessage),
        }),
        None => None,
    };
    let records_project = t.take(TemplateKey::RecordsProject);
    Some(Parts {
        stages,
        order,
        dependents,
        outputs,
        child_env,
        writes,
        lock,
        records_project,
        max_output: size(SizeKey::Workflow).unwrap_or(super::DEFAULT_MAX_OUTPUT),
        records_keep_size: size(SizeKey::RecordsKeep),
        records_max_size: size(SizeKey::RecordsMax),
    })
}

/// The texts of a stage as written.
fn text_of(def: &StageDef) -> StageText {
    let action: Box<str> = if let Some(command) = &def.command {
        command.join(" ").into()
    } else if let Some(shell) = &def.shell {
        let first = shell.lines().find(|l| !l.trim().is_empty());
        first.unwrap_or("").trim().into()
    } else {
        match def.prompt.as_deref().or(def.template.as_deref()) {
            Some(TemplateRef::File(path)) => path.as_str().into(),
            Some(TemplateRef::Inline(_)) => "(inline)".into(),
            None => "".into(),
        }
    };
    let guards = GuardTexts {
        if_: def.if_.clone(),
        exit_if: def.exit_if.clone(),
        foreach: def.foreach.clone(),
        asserts: def.assert.iter().map(|a| a.that.clone()).collect(),
    };
    StageText::new(def.description.clone(), action, guards)
}
