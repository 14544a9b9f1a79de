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

/// One stage's compiled templates, each taken out by its field: the stage's part of one list
/// that holds every stage's, side by side. A list of its own for each stage was allocated room
/// for four templates at its first, and the 10,000 of them were 3 MB of fresh memory (500 page
/// faults) for a structure freed as the stages are built.
struct StageTemplates<'a>(&'a mut [Option<(Field, Tmpl)>]);

impl StageTemplates<'_> {
    fn take(&mut self, field: Field) -> Option<Tmpl> {
        self.0
            .iter_mut()
            .find(|slot| slot.as_ref().is_some_and(|(f, _)| *f == field))?
            .take()
            .map(|(_, tmpl)| tmpl)
    }

    /// A template is queued only for a key the stage has (gather): the keys it does not have
    /// are not looked for.
    fn take_if(&mut self, has: bool, field: Field) -> Option<Tmpl> {
        has.then(|| self.take(field)).flatten()
    }

    fn with_tree(&mut self, path: &mut Vec<String>, value: &Value) -> WithTree {
        match value {
            Value::String(_) => match self.take(Field::With(path.clone())) {
                Some(tmpl) => WithTree::Template(tmpl),
                None => WithTree::Literal(value.clone()),
            },
            Value::Array(items) => WithTree::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(n, item)| {
                        path.push(n.to_string());
                        let tree = self.with_tree(path, item);
                        path.pop();
                        tree
                    })
                    .collect(),
            ),
            Value::Object(map) => WithTree::Object(
                map.iter()
                    .map(|(k, v)| {
                        path.push(k.clone());
                        let tree = self.with_tree(path, v);
                        path.pop();
                        (k.clone(), tree)
                    })
                    .collect(),
            ),
            other => WithTree::Literal(other.clone()),
        }
    }
}

/// What every stage's assembly reads.
struct Shared<'a> {
    deps: &'a [Deps],
    declared: &'a HashMap<String, Option<Arc<Schema>>>,
    durations: &'a HashMap<DurationKey, Duration>,
    sizes: &'a HashMap<SizeKey, u64>,
}

/// Build the checked parts. `templates[k]` is the compiled `pendings[k]`; the sources are freed
/// (all but their keys) before the first stage is built, and each definition once its stage is
/// built.
///
/// One stage after another, on this thread: built on every core, the 10,000 stages of a rerun
/// took 4 ms less, but the run's peak of memory was 0.7 MB higher, the stages' memory spread
/// over the pool's heaps between the holes the freed definitions left there.
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
    // An action and a hash for every stage, whatever gather and the hashing thread gave: the
    // zip below stops at the shortest.
    let (mut actions, mut definition_hashes) = (actions, definition_hashes);
    actions.resize_with(definitions.len(), || None);
    definition_hashes.resize(definitions.len(), [0; 32]);
    let (mut placed, starts, mut t) = by_stage(definitions.len(), pendings, templates);
    let mut rest = placed.as_mut_slice();
    let by_stage = starts.windows(2).map(|bounds| {
        let (this, after) =
            std::mem::take(&mut rest).split_at_mut((bounds[1] - bounds[0]) as usize);
        rest = after;
        StageTemplates(this)
    });
    let shared = Shared {
        deps,
        declared,
        durations,
        sizes,
    };
    let stages: Vec<Stage> = definitions
        .into_iter()
        .zip(actions)
        .zip(by_stage)
        .zip(definition_hashes)
        .enumerate()
        .map(|(i, ((((id, def), pending), templates), hash))| {
            build_stage(i, id, &def, pending, templates, hash, &shared)
        })
        .collect();
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
            t.remove(&TemplateKey::Output(k.clone()))
                .map(|tmpl| (k.clone(), tmpl))
        })
        .collect();
    let child_env = file
        .workflow
        .child_env
        .keys()
        .filter_map(|k| {
            t.remove(&TemplateKey::ChildEnv(k.clone()))
                .map(|tmpl| (k.clone(), tmpl))
        })
        .collect();
    let writes = (0..file.workflow.writes.len())
        .filter_map(|i| t.remove(&TemplateKey::Write(i)))
        .collect();
    let lock = match &file.workflow.lock {
        Some(lock) => Some(CheckedLock {
            path: t.remove(&TemplateKey::LockPath)?,
            busy: lock.busy,
            stale_after: duration(DurationKey::LockStaleAfter),
            message: t.remove(&TemplateKey::LockMessage),
        }),
        None => None,
    };
    let records_project = t.remove(&TemplateKey::RecordsProject);
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

/// Each stage's compiled templates (`templates[k]` is the compiled `pendings[k]`) in one list
/// ordered by stage, with where each stage's part starts (and, last, where the list ends); the
/// workflow's own templates by their key.
fn by_stage(
    stages: usize,
    pendings: Vec<Pending>,
    templates: Vec<Option<Tmpl>>,
) -> (
    Vec<Option<(Field, Tmpl)>>,
    Vec<u32>,
    HashMap<TemplateKey, Tmpl>,
) {
    let stage_of = |pending: &Pending| match pending.key {
        TemplateKey::Stage(i, _) if i < stages => Some(i),
        _ => None,
    };
    // Counted first, then placed.
    let mut starts = vec![0u32; stages + 1];
    for (pending, tmpl) in pendings.iter().zip(&templates) {
        if let (Some(i), Some(_)) = (stage_of(pending), tmpl) {
            starts[i + 1] += 1;
        }
    }
    for i in 0..stages {
        starts[i + 1] += starts[i];
    }
    let mut next = starts.clone();
    let mut placed: Vec<Option<(Field, Tmpl)>> = Vec::new();
    placed.resize_with(starts[stages] as usize, || None);
    let mut workflow = HashMap::new();
    for (pending, tmpl) in pendings.into_iter().zip(templates) {
        let Some(tmpl) = tmpl else { continue };
        match pending.key {
            TemplateKey::Stage(i, field) if i < stages => {
                placed[next[i] as usize] = Some((field, tmpl));
                next[i] += 1;
            }
            key => {
                workflow.insert(key, tmpl);
            }
        }
    }
    (placed, starts, workflow)
}

/// One checked stage, built from its definition, its pending action and its templates.
fn build_stage(
    i: usize,
    id: String,
    def: &StageDef,
    pending: Option<PendingAction>,
    mut t: StageTemplates<'_>,
    definition_hash: [u8; 32],
    shared: &Shared<'_>,
) -> Stage {
    let duration = |key| shared.durations.get(&key).copied();
    let size = |key| shared.sizes.get(&key).copied();
    let empty = || Tmpl::Literal(String::new());
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
                argv.push(t.take(Field::Shell).unwrap_or_else(empty));
            } else {
                for a in 0..argc {
                    argv.push(t.take(Field::Command(a)).unwrap_or_else(empty));
                }
            }
            let env = env_keys
                .into_iter()
                .filter_map(|k| t.take(Field::Env(k.clone())).map(|tmpl| (k, tmpl)))
                .collect();
            let options = ProcessOptions {
                stdin: t.take_if(def.stdin.is_some(), Field::Stdin),
                cwd: t.take_if(def.cwd.is_some(), Field::Cwd),
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
            prompt: t.take(Field::Prompt).unwrap_or_else(empty),
            system: t.take(Field::System),
            prefix: t.take(Field::PromptPrefix),
            model,
        })),
        Some(PendingAction::Template) => {
            Action::Template(t.take(Field::Template).unwrap_or_else(empty))
        }
        Some(PendingAction::Uses { builtin }) => Action::Uses {
            builtin,
            with: Box::new(t.with_tree(
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
                    let tree = t.with_tree(&mut vec![k.clone()], &v);
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
        .and_then(|name| shared.declared.get(name).cloned().flatten());
    let format = def.output.as_ref().map_or(
        match &action {
            Action::Uses { .. } | Action::Workflow { .. } => OutputFormat::Json,
            _ => OutputFormat::Text,
        },
        |o| o.format,
    );
    let mut asserts = Vec::new();
    for a in 0..def.assert.len() {
        if let Some(that) = t.take(Field::AssertThat(a)) {
            asserts.push((that, t.take(Field::AssertMessage(a))));
        }
    }
    let set_state = def
        .set_state()
        .map(|(k, _)| k)
        .filter_map(|k| {
            t.take(Field::SetState(k.clone()))
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
            key: t.take(Field::CacheKey),
            ttl: duration(DurationKey::CacheTtl(i)),
        }),
    });
    let extras = StageExtras {
        if_: t.take_if(def.if_.is_some(), Field::If),
        exit_if: t.take_if(def.exit_if.is_some(), Field::ExitIf),
        exit_message: t.take_if(def.exit_message.is_some(), Field::ExitMessage),
        asserts,
        foreach: t.take_if(def.foreach.is_some(), Field::Foreach),
        output_path: t.take_if(
            def.output.as_ref().is_some_and(|o| o.path.is_some()),
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
    Stage {
        id,
        index: i,
        text: text_of(def),
        action,
        deps: shared.deps[i].to_vec(),
        format,
        schema,
        cache,
        on_error: def.on_error.unwrap_or_default(),
        finally: def.finally,
        definition_hash,
        extras: extras.boxed(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::gather::{At, Context};

    fn pending(key: TemplateKey) -> Pending {
        Pending {
            key,
            name: String::new(),
            source: String::new(),
            native: false,
            context: Context::Plain,
            at: At::Pointer(String::new()),
        }
    }

    /// However the templates were queued, each stage takes its own, and only those that
    /// compiled; the workflow's own are kept by their key.
    #[test]
    fn each_stage_takes_its_own_templates_however_they_were_queued() {
        let keys = [
            TemplateKey::Stage(2, Field::Shell),
            TemplateKey::Stage(0, Field::If),
            TemplateKey::LockPath,
            TemplateKey::Stage(2, Field::Stdin),
            TemplateKey::Stage(0, Field::Shell),
            TemplateKey::Stage(1, Field::Cwd),
        ];
        let pendings = keys.iter().cloned().map(pending).collect();
        let text = |k: usize| Some(Tmpl::Literal(format!("t{k}")));
        // The one for stage 1 did not compile.
        let templates = vec![text(0), text(1), text(2), text(3), text(4), None];
        let (mut placed, starts, mut workflow) = by_stage(3, pendings, templates);
        assert_eq!(starts, [0, 2, 2, 4]);
        let literal = |tmpl: Option<Tmpl>| match tmpl {
            Some(Tmpl::Literal(text)) => text,
            _ => String::new(),
        };
        let (zero, rest) = placed.split_at_mut(2);
        let (one, two) = rest.split_at_mut(0);
        let mut zero = StageTemplates(zero);
        assert_eq!(literal(zero.take(Field::Shell)), "t4");
        assert_eq!(literal(zero.take(Field::If)), "t1");
        assert!(zero.take(Field::If).is_none(), "taken once");
        assert!(StageTemplates(one).take(Field::Cwd).is_none());
        let mut two = StageTemplates(two);
        assert_eq!(literal(two.take(Field::Stdin)), "t3");
        assert_eq!(literal(two.take(Field::Shell)), "t0");
        assert_eq!(literal(workflow.remove(&TemplateKey::LockPath)), "t2");
    }
}
