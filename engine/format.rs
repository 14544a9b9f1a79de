//! The workflow file format as Rust types: the one source of truth from which the JSON Schema
//! (`stagegraph schema workflow`, `schemas/workflow.schema.json`) is derived and against which
//! `load` validates every file before `check` looks at meaning.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A workflow file: `[workflow]`, `[inputs.*]`, `[stages.*]` and `[outputs]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "stagegraph workflow")]
pub(crate) struct WorkflowFile {
    /// Settings of the workflow as a whole.
    #[serde(default)]
    pub workflow: WorkflowSection,
    /// Declared inputs, typed; given with `--input K=V` or `--inputs-json`.
    #[serde(default)]
    pub inputs: IndexMap<String, InputDecl>,
    /// The stages; ids match `^[a-z][a-z0-9_]*$`.
    #[serde(default, deserialize_with = "shared_stages")]
    pub stages: IndexMap<String, std::sync::Arc<StageDef>>,
    /// The run's results: name -> template. A template that is a single `{{ expression }}`
    /// keeps the expression's value (a list stays a list).
    #[serde(default)]
    pub outputs: IndexMap<String, String>,
}

/// `[workflow]`
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WorkflowSection {
    /// One line, shown by `list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The workflow this one overlays: the next workflow of that name further down the search
    /// path, or a path to a `.toml` file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extends: Option<String>,
    /// The environment variables templates and expressions may read; any other is an error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Variables set for every process the run starts (values are templates).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub child_env: IndexMap<String, String>,
    /// Templates naming the folders writing actions may touch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
    /// A `mkdir` lock held for the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<LockDef>,
    /// The process exits 0 whatever happens; the run record still tells.
    #[serde(default, skip_serializing_if = "is_false")]
    pub always_exit_zero: bool,
    /// The host the workflow runs as a hook of. `claude-code`: when its inputs carry a Claude
    /// Code hook payload (`hook_event_name`), a failed run is told to the session once, as the
    /// hook's JSON output (`systemMessage`) naming the error and the run (at the next fire for a
    /// `--detach`ed run), the same failure at most once an hour; stdout then holds it alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<HookHost>,
    /// The most a run may spend on model calls, in USD: a call that would take the run past it
    /// is not started and its stage fails (`run --max-cost` may set a lower one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub budget_usd: Option<f64>,
    /// The largest output a stage may produce, e.g. `"64MiB"` (the default) or `"1GB"`; a stage's
    /// own `max_output` replaces it. A command writing more to stdout is stopped; a larger
    /// output fails its stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output: Option<String>,
    /// Where the runs are recorded (with the workflow's state and cache), who may read them, and
    /// how many are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<RecordsDef>,
}

/// `[workflow] hook`: the host a workflow runs as a hook of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum HookHost {
    /// Claude Code: its hooks' JSON output on stdout.
    ClaudeCode,
}

/// `[workflow] records`: where a workflow's run records, `set_state` values and cache live.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecordsDef {
    /// `project` (the state folder: `.stagegraph/` or `--state-dir`) or `user`
    /// (`$XDG_STATE_HOME/stagegraph/<project key>/`, default `~/.local/state`), for a workflow
    /// that must leave nothing in the project tree. `--state-dir` still wins.
    #[serde(default)]
    pub location: RecordsLocation,
    /// With `location = "user"`: a template naming the project folder the key is made from
    /// (default: the working directory). It sees `inputs` and `env` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Owner-only: the folder is 0700 and every file the run leaves in it 0600.
    #[serde(default, skip_serializing_if = "is_false")]
    pub private: bool,
    /// Keep at most this many runs of the workflow (replaces `--keep-runs`; 0 keeps all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<usize>,
    /// Keep the workflow's runs within this size on disk, the oldest removed first ("500MB";
    /// replaces `--keep-runs-size`). A run still running is never removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_size: Option<String>,
    /// The most a run's record stores of its stages' large outputs ("256MiB", the default): a
    /// stage whose output would take the record past it keeps no output, and the record says
    /// so (`output_cut`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<String>,
}

/// Where a workflow's records live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RecordsLocation {
    /// The state folder of the run (`.stagegraph/` in the working directory, or `--state-dir`).
    #[default]
    Project,
    /// Under the user's state folder, keyed by project, out of the project tree.
    User,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// A `mkdir`-based lock.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LockDef {
    /// Template naming the lock folder.
    pub path: String,
    /// What to do when another run holds it.
    #[serde(default)]
    pub busy: Busy,
    /// A lock whose holder's heartbeat is older than this is stale and taken over (e.g.
    /// `"600s"`); a lock whose holder is gone is stale at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_after: Option<String>,
    /// The reason recorded when the run ends on a held lock (a template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What a run does when its lock is held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Busy {
    /// End the run early and successfully.
    #[default]
    Exit,
    /// Fail the run.
    Fail,
    /// Wait for the lock.
    Wait,
}

/// `[inputs.<name>]`
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InputDecl {
    #[serde(rename = "type")]
    pub kind: InputType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The value when none is given; an input without a default is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
}

/// The type of an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum InputType {
    String,
    Integer,
    Number,
    Boolean,
    Array,
    Object,
}

impl InputType {
    pub(crate) fn name(self) -> &'static str {
        match self {
            InputType::String => "string",
            InputType::Integer => "integer",
            InputType::Number => "number",
            InputType::Boolean => "boolean",
            InputType::Array => "array",
            InputType::Object => "object",
        }
    }

    /// Whether a JSON value is of this type.
    pub(crate) fn admits(self, value: &Value) -> bool {
        match self {
            InputType::String => value.is_string(),
            InputType::Integer => value.is_i64() || value.is_u64(),
            InputType::Number => value.is_number(),
            InputType::Boolean => value.is_boolean(),
            InputType::Array => value.is_array(),
            InputType::Object => value.is_object(),
        }
    }
}

/// Some of a workflow's stages, in order, each definition read as [`WorkflowFile::stages`]
/// reads it: a part of a kept document (`load::documents`). A list, not a map: the parts are
/// read on other threads, and joined into the workflow's map on this one.
pub(crate) struct StagesPart(pub Vec<(String, std::sync::Arc<StageDef>)>);

impl<'de> Deserialize<'de> for StagesPart {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let visitor = Stages(Vec::with_capacity, |stages: &mut Vec<_>, id, stage| {
            stages.push((id, stage));
        });
        deserializer.deserialize_map(visitor).map(StagesPart)
    }
}

/// `[stages]`, each definition read straight into its `Arc`. serde reads an `Arc<T>` as a
/// `Box<T>` and then moves it into a second allocation: for definitions of most of a kilobyte,
/// 10,000 of them, that was 5% of a no-op rerun's scheduling thread.
fn shared_stages<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<IndexMap<String, std::sync::Arc<StageDef>>, D::Error> {
    let visitor = Stages(
        IndexMap::with_capacity,
        |stages: &mut IndexMap<_, _>, id, stage| {
            stages.insert(id, stage);
        },
    );
    deserializer.deserialize_map(visitor)
}

/// A table of stages read into a collection `C`: made with room for so many, then each stage
/// added, its definition in its `Arc`.
struct Stages<C>(fn(usize) -> C, fn(&mut C, String, std::sync::Arc<StageDef>));

impl<'de, C> serde::de::Visitor<'de> for Stages<C> {
    type Value = C;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a table of stages")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<C, A::Error> {
        let Stages(new, add) = self;
        let mut stages = new(map.size_hint().unwrap_or(0));
        while let Some((id, stage)) = map.next_entry::<String, StageDef>()? {
            add(&mut stages, id, std::sync::Arc::new(stage));
        }
        Ok(stages)
    }
}

/// `[stages.<id>]`
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StageDef {
    /// One line, shown by `plan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<Box<str>>,
    /// In an overlay: remove this stage from the base workflow.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disabled: bool,
    /// Run once the run has ended (succeeded, exited early or failed), after every ordinary
    /// stage that could run; `run.status`, `run.exit` and `run.error` tell how it ended. Its
    /// failure is recorded but does not change how the run ended.
    #[serde(default, skip_serializing_if = "is_false")]
    pub finally: bool,

    /// Action: an argv list, each element one template and one argument; no shell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Box<[String]>>,
    /// Action: a script run with `sh -c`; every `{{ value }}` reaches it through an environment
    /// variable the script references, never as script text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<Box<str>>,
    /// Action: a template rendered and sent to the stage's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<Box<TemplateRef>>,
    /// Action: a template rendered; the text is the output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<Box<TemplateRef>>,
    /// Action: a built-in (`fs.read`, ...), with arguments in `with`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<Box<str>>,
    /// Action: a sub-workflow, with inputs in `with`; its `[outputs]` are the output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<Box<str>>,
    /// Arguments of `uses` or inputs of `workflow`; string values are templates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with: Option<Box<IndexMap<String, Value>>>,

    /// Commands: a template fed to stdin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<Box<str>>,
    /// Commands: working directory (template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<Box<str>>,
    /// Commands: extra environment variables (values are templates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "IndexMap<String, String>")]
    pub env: Option<Box<IndexMap<String, String>>>,
    /// Commands: exit codes that count as success (default `[0]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok_codes: Option<Box<[i32]>>,

    /// Prompts: the model alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Box<str>>,
    /// Prompts: the system prompt (a template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<Box<TemplateRef>>,
    /// Prompts: a stable beginning of the prompt (a template), sent ahead of it; the
    /// Anthropic API caches it (`cache_control`), so stages that share it pay it once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_prefix: Option<Box<TemplateRef>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,

    /// Stages that must finish first (edges are also inferred from `stages.<id>` references).
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    pub after: Box<[String]>,
    /// Expression evaluated before the stage; false: the stage is skipped.
    #[serde(rename = "if", default, skip_serializing_if = "Option::is_none")]
    pub if_: Option<Box<str>>,
    /// Expression evaluated after success with `output` bound; true ends the run early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_if: Option<Box<str>>,
    /// The reason of an early exit (a template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_message: Option<Box<str>>,
    /// Checks on the validated output; a false one fails the stage.
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    pub assert: Box<[AssertDef]>,
    /// Expression giving a list; the action runs once per element with `item` and `index`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreach: Option<Box<str>>,
    /// Cap on parallel `foreach` items.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub concurrency: Option<u32>,

    /// What a failing `foreach` item does: `fail` (default: the items not started are not run
    /// and the stage fails) or `continue` (every item runs; a failed item's output is `null`
    /// and its error a note, and the stage succeeds unless every item failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_item_error: Option<OnItemError>,

    /// How the output is read, validated and saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Box<OutputDef>>,
    /// What a failure does to the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<OnError>,
    /// Retries of a failed action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// First wait between retries (doubling), e.g. `"2s"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_backoff: Option<Box<str>>,
    /// Prompts: how many times to re-ask the model when its output does not validate (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<u32>,
    /// e.g. `"30s"`: a command is killed with its process group, a model request aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Box<str>>,
    /// The largest output this stage may produce, e.g. `"256MiB"`: replaces the workflow's
    /// `max_output` (default 64 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output: Option<Box<str>>,
    /// Reuse the output of an identical earlier execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheDef>,
    /// On success, values saved in the workflow's persistent state (templates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "IndexMap<String, String>")]
    pub set_state: Option<Box<IndexMap<String, String>>>,
    /// The output a dry-run assumes when it does not execute this stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run_output: Option<Box<Value>>,
}

/// The field types are the smallest that hold them (a boxed slice, a boxed table where most
/// stages write none): `check` holds every definition at once, 10,000 of them in the
/// benchmark's workflows.
impl StageDef {
    /// `env`, in the order written (none when the stage sets none).
    pub(crate) fn env(&self) -> impl Iterator<Item = (&String, &String)> {
        self.env.iter().flat_map(|env| env.iter())
    }

    /// `set_state`, in the order written (none when the stage sets none).
    pub(crate) fn set_state(&self) -> impl Iterator<Item = (&String, &String)> {
        self.set_state.iter().flat_map(|set| set.iter())
    }

    /// Whether the stage says `key`, for the keys whose presence `check` weighs (the actions
    /// and the settings that belong to one). Read from the typed stage, not the document, so
    /// it holds however the workflow was read: an empty table (`env = {}`) says nothing.
    pub(crate) fn has(&self, key: &str) -> bool {
        match key {
            "command" => self.command.is_some(),
            "shell" => self.shell.is_some(),
            "prompt" => self.prompt.is_some(),
            "template" => self.template.is_some(),
            "uses" => self.uses.is_some(),
            "workflow" => self.workflow.is_some(),
            "with" => self.with.is_some(),
            "stdin" => self.stdin.is_some(),
            "cwd" => self.cwd.is_some(),
            "env" => self.env().next().is_some(),
            "ok_codes" => self.ok_codes.is_some(),
            "model" => self.model.is_some(),
            "system" => self.system.is_some(),
            "prompt_prefix" => self.prompt_prefix.is_some(),
            "temperature" => self.temperature.is_some(),
            "max_tokens" => self.max_tokens.is_some(),
            "repair" => self.repair.is_some(),
            _ => false,
        }
    }
}

/// The keys that name a stage's action.
pub(crate) const ACTION_KEYS: [&str; 6] =
    ["command", "shell", "prompt", "template", "uses", "workflow"];

/// A template: a file found in the libraries, or inline text.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum TemplateRef {
    /// A file under `templates/`.
    File(String),
    /// `{ inline = "..." }`
    Inline(InlineTemplate),
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InlineTemplate {
    pub inline: String,
}

/// `{ that = "expr", message = "template" }`
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AssertDef {
    pub that: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `output = { format, schema, path }`
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutputDef {
    #[serde(default)]
    pub format: OutputFormat,
    /// A JSON Schema file under `schemas/` the output must satisfy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// Also write the artifact here (a template; atomic; inside `writes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OutputFormat {
    #[default]
    Text,
    Json,
    Lines,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OnError {
    /// The run fails.
    #[default]
    Fail,
    /// The stage is `failed`, its output `none`, the run goes on.
    Continue,
    /// An early, successful exit with the error as reason.
    Exit,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OnItemError {
    /// The items not started are not run; the stage fails.
    #[default]
    Fail,
    /// Every item runs; a failed item's output is `null`.
    Continue,
}

/// `cache = true` or `{ key = "template", ttl = "7d" }`
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum CacheDef {
    Enabled(bool),
    // Boxed: `cache = true`, the common case, allocates nothing.
    Keyed(Box<CacheKeyed>),
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CacheKeyed {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
}

/// The JSON Schema of the workflow format.
pub(crate) fn workflow_schema() -> Value {
    let schema = schemars::schema_for!(WorkflowFile);
    serde_json::to_value(schema).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `check` holds every definition at once (in an `Arc`): with its two counts, a definition
    /// fits the allocator's 448-byte class (it was 600 bytes, in the 640-byte one).
    #[test]
    fn a_stage_definition_stays_small() {
        assert!(std::mem::size_of::<StageDef>() + 16 <= 448);
    }

    /// Every key `check` asks about is answered from its field.
    #[test]
    fn a_stage_has_the_keys_it_was_given() {
        let keys = [
            "command",
            "shell",
            "prompt",
            "template",
            "uses",
            "workflow",
            "with",
            "stdin",
            "cwd",
            "env",
            "ok_codes",
            "model",
            "system",
            "prompt_prefix",
            "temperature",
            "max_tokens",
            "repair",
        ];
        let all: StageDef = serde_json::from_value(serde_json::json!({
            "command": ["true"], "shell": "true", "prompt": "p.md", "template": "t.md",
            "uses": "fs.read", "workflow": "w", "with": {}, "stdin": "x", "cwd": ".",
            "env": { "A": "1" }, "ok_codes": [0], "model": "m", "system": "s.md",
            "prompt_prefix": "pp.md", "temperature": 0.5, "max_tokens": 10, "repair": 1
        }))
        .unwrap();
        let none = StageDef::default();
        for key in keys {
            assert!(all.has(key), "{key}");
            assert!(!none.has(key), "{key}");
        }
        let empty_env: StageDef = serde_json::from_value(serde_json::json!({ "env": {} })).unwrap();
        assert!(!empty_env.has("env"));
    }
}
