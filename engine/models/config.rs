//! The model configuration: `[models.<alias>]` tables read from layered TOML files, each alias
//! checked against its provider's keys and turned into an [`Alias`], or into problems that point
//! at the file, line and column.
//!
//! A later layer replaces an earlier layer's definition of the same alias as a whole; keys are
//! never merged across layers, so an alias always means exactly what one file says.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use toml::de::{DeTable, DeValue, ValueDeserializer};
use toml::Spanned;

use super::error::ConfigProblem;

/// The origin shown for aliases nobody configured.
pub(crate) const BUILTIN_ORIGIN: &str = "built-in";

/// The built-in layer: a Claude Code user needs no configuration at all.
pub(crate) const BUILTIN_CONFIG: &str = r#"
[models.haiku]
provider = "claude"
model = "haiku"
effort = "low"

[models.sonnet]
provider = "claude"
model = "sonnet"
"#;

/// The program the `claude` provider runs when the alias names none.
pub(crate) const DEFAULT_CLAUDE_PROGRAM: &str = "claude";

pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
pub(crate) const DEFAULT_RETRIES: u32 = 3;
pub(crate) const DEFAULT_ANTHROPIC_URL: &str = "https://api.anthropic.com";
pub(crate) const DEFAULT_ANTHROPIC_KEY_ENV: &str = "ANTHROPIC_API_KEY";
pub(crate) const DEFAULT_ANTHROPIC_MAX_TOKENS: u32 = 4096;

/// The model configuration file (`stagegraph.toml`, `config.toml` or `STAGEGRAPH_CONFIG`).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "stagegraph configuration")]
pub(crate) struct ConfigFile {
    /// Model aliases, by name; a stage's `model` key names one.
    #[serde(default)]
    #[allow(dead_code)] // read through the spanned document, declared for the schema
    models: BTreeMap<String, RawAlias>,
}

/// Which kind of provider answers an alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ProviderKind {
    /// A program: the prompt on its stdin, the reply on its stdout.
    Command,
    /// The Claude Code CLI (`claude -p`), without the project's context, hooks or tools.
    Claude,
    /// The Anthropic Messages API.
    Anthropic,
    /// Any OpenAI-compatible chat-completions server.
    #[serde(rename = "openai")]
    OpenAi,
    /// Answers from recorded exchanges (see `--record`).
    Replay,
}

impl ProviderKind {
    fn name(self) -> &'static str {
        match self {
            ProviderKind::Command => "command",
            ProviderKind::Claude => "claude",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenAi => "openai",
            ProviderKind::Replay => "replay",
        }
    }
}

/// One alias as written; which keys apply depends on `provider`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("allOf" = [
    {"if": {"properties": {"provider": {"const": "command"}}},
     "then": {"required": ["command"]}},
    {"if": {"properties": {"provider": {"const": "anthropic"}}},
     "then": {"required": ["model"]}},
    {"if": {"properties": {"provider": {"const": "claude"}}},
     "then": {"required": ["model"]}},
    {"if": {"properties": {"provider": {"const": "openai"}}},
     "then": {"required": ["base_url"]}},
    {"if": {"properties": {"provider": {"const": "replay"}}},
     "then": {"required": ["dir"]}}
]))]
struct RawAlias {
    provider: ProviderKind,
    /// command: the argv to run; the prompt goes to its stdin, never onto the command line.
    /// claude: the program and any arguments of its own (default `["claude"]`).
    command: Option<Vec<String>>,
    /// anthropic, openai: the model name sent to the API; claude: the `--model` given to the
    /// CLI (`haiku`, `sonnet`, or a full model name); command: the model the program stands
    /// for, which keys its recordings instead of its argv (a script recorded as `haiku`
    /// replays through any alias naming `haiku`).
    model: Option<String>,
    /// claude: the CLI's built-in tools the model may use (default none).
    tools: Option<Vec<String>>,
    /// claude: the CLI's `--effort` (how much the model may think), one of `low`, `medium`,
    /// `high`, `xhigh`, `max`; the CLI's own default when absent. The built-in `haiku` is `low`.
    effort: Option<Effort>,
    /// anthropic, openai: the environment variable holding the API key (anthropic: default
    /// `ANTHROPIC_API_KEY`; openai: no authentication when absent).
    api_key_env: Option<String>,
    /// anthropic: default `https://api.anthropic.com`; openai (required): the URL that
    /// `/chat/completions` is appended to, e.g. `http://127.0.0.1:8080/v1`.
    base_url: Option<String>,
    /// anthropic, openai: the reply's token limit when the stage sets none (anthropic: 4096).
    #[schemars(range(min = 1))]
    max_tokens: Option<u32>,
    /// replay: the folder of recordings; relative to the configuration file's folder.
    dir: Option<String>,
    /// How long one request may take, e.g. `"120s"`, `"5m"` (default `"300s"`).
    #[schemars(regex(pattern = r"^[0-9]+(ms|s|m|h)$"))]
    timeout: Option<String>,
    /// anthropic, openai: how often to retry after 429, 5xx or a connection error (default 3).
    retries: Option<u32>,
    /// How many calls to this alias may be in flight at once across the whole run (every stage
    /// and foreach item); a foreach of prompt stages runs this many items at once.
    #[schemars(range(min = 1))]
    max_concurrency: Option<u32>,
    /// anthropic, openai: USD per million tokens, for the cost of each call.
    price: Option<Price>,
    /// anthropic: mark the system prompt and a stage's `prompt_prefix` for the API's prompt
    /// cache (default true).
    prompt_cache: Option<bool>,
}

/// The `--effort` levels the Claude Code CLI takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Effort {
    Low,
    Medium,
    High,
    Xhigh,
    Max,
}

impl Effort {
    fn name(self) -> &'static str {
        match self {
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
            Effort::Xhigh => "xhigh",
            Effort::Max => "max",
        }
    }
}

/// A model's prices in USD per million tokens. Prices change: they are configuration.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Price {
    /// Input tokens (not read from or written to the prompt cache).
    #[schemars(range(min = 0))]
    pub(crate) input: f64,
    /// Output tokens.
    #[schemars(range(min = 0))]
    pub(crate) output: f64,
    /// Tokens read from the prompt cache (default: the input price).
    #[schemars(range(min = 0))]
    pub(crate) cache_read: Option<f64>,
    /// Tokens written to the prompt cache (default: the input price).
    #[schemars(range(min = 0))]
    pub(crate) cache_write: Option<f64>,
}

/// A checked alias: the proof that its configuration is complete and consistent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Alias {
    pub(crate) provider: Provider,
    pub(crate) timeout: Duration,
    pub(crate) retries: u32,
    pub(crate) max_concurrency: Option<u32>,
    pub(crate) price: Option<Price>,
    /// The file that defined it, or `built-in`.
    pub(crate) origin: String,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Provider {
    Command {
        argv: Vec<String>,
        /// The model it stands for, when its configuration names one.
        model: Option<String>,
        /// The folder of the file that defines it: the program runs there, so the relative
        /// paths of its argv (`["sh", "models/shout.sh"]`) mean the same from any subfolder of
        /// the project. `None` for an alias defined without a file.
        dir: Option<PathBuf>,
    },
    Claude {
        /// The program and its own arguments.
        program: Vec<String>,
        model: String,
        tools: Vec<String>,
        /// `--effort`, when the alias sets it.
        effort: Option<String>,
    },
    Anthropic {
        model: String,
        api_key_env: String,
        base_url: String,
        max_tokens: u32,
        prompt_cache: bool,
    },
    OpenAi {
        base_url: String,
        model: Option<String>,
        api_key_env: Option<String>,
        max_tokens: Option<u32>,
    },
    Replay {
        dir: PathBuf,
    },
}

impl Provider {
    /// The variable holding the alias's API key, when its provider takes one.
    pub(crate) fn key_variable(&self) -> Option<&str> {
        match self {
            Provider::Anthropic { api_key_env, .. } => Some(api_key_env),
            Provider::OpenAi { api_key_env, .. } => api_key_env.as_deref(),
            _ => None,
        }
    }

    /// What produces the replies, without secrets, stable across runs and machines.
    pub(crate) fn identity(&self) -> String {
        match self {
            Provider::Command { argv, .. } => {
                let words: Vec<String> = argv.iter().map(|word| quote_word(word)).collect();
                format!("command:{}", words.join(" "))
            }
            Provider::Claude { model, tools, .. } if tools.is_empty() => format!("claude:{model}"),
            Provider::Claude { model, tools, .. } => {
                format!("claude:{model} tools={}", tools.join(","))
            }
            Provider::Anthropic {
                model, base_url, ..
            } => format!("anthropic:{model}@{base_url}"),
            Provider::OpenAi {
                model, base_url, ..
            } => format!(
                "openai:{}@{base_url}",
                model.as_deref().unwrap_or("default")
            ),
            Provider::Replay { dir } => format!("replay:{}", dir.display()),
        }
    }
}

impl Provider {
    /// The queue the alias's calls wait in: the model as the provider serves it, so two aliases
    /// naming the same model at the same endpoint (or the same CLI model, whatever tools each
    /// allows) share one `max_concurrency` and one pause after a rate limit, which is the
    /// provider's, not the alias's. `None` for recordings, which wait for nothing.
    pub(crate) fn queue_key(&self) -> Option<String> {
        match self {
            Provider::Claude { model, .. } => Some(format!("claude:{model}")),
            Provider::Replay { .. } => None,
            Provider::Command { .. } | Provider::Anthropic { .. } | Provider::OpenAi { .. } => {
                Some(self.identity())
            }
        }
    }

    /// What decides a reply, for recordings: the model's name, not the way it is reached (no
    /// URL, no path of a program), so a recording made through one transport replays through
    /// another that names the same model.
    pub(crate) fn model_identity(&self) -> String {
        match self {
            Provider::Command {
                model: Some(model), ..
            } => model.clone(),
            Provider::Command {
                argv, model: None, ..
            } => command_model(argv),
            Provider::Claude { model, tools, .. } if tools.is_empty() => model.clone(),
            Provider::Claude { model, tools, .. } => format!("{model} tools={}", tools.join(",")),
            Provider::Anthropic { model, .. } => model.clone(),
            Provider::OpenAi { model, .. } => {
                model.clone().unwrap_or_else(|| "default".to_string())
            }
            Provider::Replay { dir } => format!("replay:{}", dir.display()),
        }
    }
}

/// A command's recording key: its argv with every path shortened to its file name (the
/// program, an interpreter's script, a `--flag=path` value), so that the same command run
/// from another checkout, home or machine finds the same recordings.
pub(crate) fn command_model(argv: &[String]) -> String {
    let words: Vec<String> = argv
        .iter()
        .map(|word| quote_word(&without_folders(word)))
        .collect();
    format!("command:{}", words.join(" "))
}

/// A word naming a path, as its file name; any other word as it is. A `--flag=path` keeps
/// its flag. A word with whitespace is not a path but text (a `sh -c` script): it is kept whole.
fn without_folders(word: &str) -> String {
    let (flag, value) = match word.split_once('=') {
        Some((flag, value)) if flag.starts_with('-') => (Some(flag), value),
        _ => (None, word),
    };
    if !value.contains('/') || value.contains("://") || value.contains(char::is_whitespace) {
        return word.to_string();
    }
    let name = Path::new(value).file_name().map_or_else(
        || value.to_string(),
        |name| name.to_string_lossy().into_owned(),
    );
    match flag {
        Some(flag) => format!("{flag}={name}"),
        None => name,
    }
}

pub(crate) fn quote_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@,+%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Parse one layer: every alias it defines, in file order, or every problem it has.
pub(crate) fn parse_layer(
    origin: &Path,
    text: &str,
    problems: &mut Vec<ConfigProblem>,
) -> Vec<(String, Alias)> {
    let file = origin.display().to_string();
    let at = |span: Range<usize>, alias: Option<&str>, message: String| {
        let (line, column) = line_column(text, span.start);
        ConfigProblem {
            file: file.clone(),
            line,
            column,
            alias: alias.map(str::to_string),
            message,
        }
    };
    let document = match DeTable::parse(text) {
        Ok(document) => document,
        Err(error) => {
            let span = error.span().unwrap_or(0..0);
            problems.push(at(span, None, lowercase_first(error.message())));
            return Vec::new();
        }
    };
    let mut aliases = Vec::new();
    for (key, value) in document.into_inner() {
        if key.get_ref() != "models" {
            problems.push(at(
                key.span(),
                None,
                format!("unknown key `{}`; expected `models`", key.get_ref()),
            ));
            continue;
        }
        let value_span = value.span();
        let DeValue::Table(table) = value.into_inner() else {
            problems.push(at(
                value_span,
                None,
                "`models` must be a table of aliases".to_string(),
            ));
            continue;
        };
        for (name, definition) in table {
            let alias = name.get_ref().to_string();
            match check_alias(origin, &file, definition) {
                Ok(checked) => aliases.push((alias, checked)),
                Err((span, message)) => {
                    let span = span.unwrap_or_else(|| name.span());
                    problems.push(at(span, Some(&alias), message));
                }
            }
        }
    }
    aliases
}

type AliasProblem = (Option<Range<usize>>, String);

/// Check one `[models.<alias>]` table; a problem carries the span to point at, or none for the
/// alias's own name.
fn check_alias(
    origin: &Path,
    file: &str,
    definition: Spanned<DeValue<'_>>,
) -> Result<Alias, AliasProblem> {
    let DeValue::Table(table) = definition.get_ref() else {
        return Err((Some(definition.span()), {
            let kind = definition.get_ref().type_str();
            let article = if kind.starts_with(['a', 'i']) {
                "an"
            } else {
                "a"
            };
            format!("must be a table, not {article} {kind}")
        }));
    };
    let spans: Vec<(String, Range<usize>, Range<usize>)> = table
        .iter()
        .map(|(key, value)| (key.get_ref().to_string(), key.span(), value.span()))
        .collect();
    let value_span = |name: &str| {
        spans
            .iter()
            .find(|(key, _, _)| key == name)
            .map(|(_, _, span)| span.clone())
    };

    let raw = RawAlias::deserialize(ValueDeserializer::from(definition))
        .map_err(|error| (error.span(), lowercase_first(error.message())))?;

    let kind = raw.provider;
    let applies: &[&str] = match kind {
        ProviderKind::Command => &["command", "model", "timeout", "max_concurrency"],
        ProviderKind::Claude => &[
            "model",
            "command",
            "tools",
            "effort",
            "timeout",
            "max_concurrency",
        ],
        ProviderKind::Anthropic => &[
            "model",
            "api_key_env",
            "base_url",
            "max_tokens",
            "timeout",
            "retries",
            "max_concurrency",
            "price",
            "prompt_cache",
        ],
        ProviderKind::OpenAi => &[
            "model",
            "api_key_env",
            "base_url",
            "max_tokens",
            "timeout",
            "retries",
            "max_concurrency",
            "price",
        ],
        ProviderKind::Replay => &["dir"],
    };
    for (key, span, _) in &spans {
        if key != "provider" && !applies.contains(&key.as_str()) {
            return Err((
                Some(span.clone()),
                format!(
                    "`{key}` does not apply to provider `{}`; its keys are: {}",
                    kind.name(),
                    applies
                        .iter()
                        .map(|key| format!("`{key}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    }
    let required = |value: Option<String>, key: &str| {
        value.ok_or_else(|| (None, format!("provider `{}` needs `{key}`", kind.name())))
    };
    let non_empty = |value: &str, key: &str| {
        if value.trim().is_empty() {
            Err((value_span(key), format!("`{key}` must not be empty")))
        } else {
            Ok(())
        }
    };

    let timeout = match &raw.timeout {
        None => DEFAULT_TIMEOUT,
        Some(text) => parse_duration(text)
            .filter(|duration| !duration.is_zero())
            .ok_or_else(|| {
                (
                    value_span("timeout"),
                    format!("invalid timeout `{text}`; write a positive duration like \"120s\" or \"5m\""),
                )
            })?,
    };
    if raw.max_concurrency == Some(0) {
        return Err((
            value_span("max_concurrency"),
            "`max_concurrency` must be at least 1".to_string(),
        ));
    }
    if let Some(price) = &raw.price {
        let parts = [
            Some(price.input),
            Some(price.output),
            price.cache_read,
            price.cache_write,
        ];
        if parts
            .into_iter()
            .flatten()
            .any(|p| !p.is_finite() || p < 0.0)
        {
            return Err((
                value_span("price"),
                "prices must be numbers of USD per million tokens, at least 0".to_string(),
            ));
        }
    }
    if raw.max_tokens == Some(0) {
        return Err((
            value_span("max_tokens"),
            "`max_tokens` must be at least 1".to_string(),
        ));
    }

    let provider = match kind {
        ProviderKind::Command => {
            let argv = raw
                .command
                .ok_or_else(|| (None, "provider `command` needs `command`".to_string()))?;
            match argv.first() {
                None => {
                    return Err((
                        value_span("command"),
                        "`command` must name a program".to_string(),
                    ))
                }
                Some(program) => non_empty(program, "command")?,
            }
            if let Some(model) = &raw.model {
                non_empty(model, "model")?;
            }
            Provider::Command {
                argv,
                model: raw.model,
                dir: config_dir(origin, file),
            }
        }
        ProviderKind::Claude => {
            let model = required(raw.model, "model")?;
            non_empty(&model, "model")?;
            let program = match raw.command {
                Some(argv) => {
                    match argv.first() {
                        None => {
                            return Err((
                                value_span("command"),
                                "`command` must name a program".to_string(),
                            ))
                        }
                        Some(program) => non_empty(program, "command")?,
                    }
                    argv
                }
                None => vec![DEFAULT_CLAUDE_PROGRAM.to_string()],
            };
            let tools = raw.tools.unwrap_or_default();
            if tools.iter().any(|tool| tool.trim().is_empty()) {
                return Err((
                    value_span("tools"),
                    "`tools` must not hold an empty name".to_string(),
                ));
            }
            Provider::Claude {
                program,
                model,
                tools,
                effort: raw.effort.map(|effort| effort.name().to_string()),
            }
        }
        ProviderKind::Anthropic => {
            let model = required(raw.model, "model")?;
            non_empty(&model, "model")?;
            let base_url = raw
                .base_url
                .unwrap_or_else(|| DEFAULT_ANTHROPIC_URL.to_string());
            check_url(&base_url).map_err(|message| (value_span("base_url"), message))?;
            let api_key_env = raw
                .api_key_env
                .unwrap_or_else(|| DEFAULT_ANTHROPIC_KEY_ENV.to_string());
            non_empty(&api_key_env, "api_key_env")?;
            Provider::Anthropic {
                model,
                api_key_env,
                base_url: base_url.trim_end_matches('/').to_string(),
                max_tokens: raw.max_tokens.unwrap_or(DEFAULT_ANTHROPIC_MAX_TOKENS),
                prompt_cache: raw.prompt_cache.unwrap_or(true),
            }
        }
        ProviderKind::OpenAi => {
            let base_url = required(raw.base_url, "base_url")?;
            check_url(&base_url).map_err(|message| (value_span("base_url"), message))?;
            if let Some(model) = &raw.model {
                non_empty(model, "model")?;
            }
            if let Some(variable) = &raw.api_key_env {
                non_empty(variable, "api_key_env")?;
            }
            Provider::OpenAi {
                base_url: base_url.trim_end_matches('/').to_string(),
                model: raw.model,
                api_key_env: raw.api_key_env,
                max_tokens: raw.max_tokens,
            }
        }
        ProviderKind::Replay => {
            let dir = required(raw.dir, "dir")?;
            non_empty(&dir, "dir")?;
            let dir = PathBuf::from(dir);
            let dir = match config_dir(origin, file) {
                Some(base) if dir.is_relative() => base.join(dir),
                _ => dir,
            };
            Provider::Replay { dir }
        }
    };
    Ok(Alias {
        provider,
        timeout,
        retries: raw.retries.unwrap_or(DEFAULT_RETRIES),
        max_concurrency: raw.max_concurrency,
        price: raw.price,
        origin: file.to_string(),
    })
}

/// The folder relative paths of a configuration file are taken from: its own. `None` for the
/// built-in layer and for text with no file.
fn config_dir(origin: &Path, file: &str) -> Option<PathBuf> {
    if file == BUILTIN_ORIGIN {
        return None;
    }
    let dir = origin.parent().filter(|dir| !dir.as_os_str().is_empty())?;
    Some(std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()))
}

fn check_url(url: &str) -> Result<(), String> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(format!(
            "`base_url` must start with http:// or https://, not `{url}`"
        ))
    }
}

/// `"500ms"`, `"120s"`, `"5m"`, `"2h"`.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    crate::floor::duration::parse(text.trim()).ok()
}

/// 1-based line and column (in characters) of a byte offset.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |index| index + 1);
    (line, before[line_start..].chars().count() + 1)
}

fn lowercase_first(message: &str) -> String {
    let message = message.trim();
    let mut chars = message.chars();
    match chars.next() {
        Some(first) if !message.starts_with("TOML") => first.to_lowercase().chain(chars).collect(),
        _ => message.to_string(),
    }
}

/// The JSON Schema of the configuration file.
pub(crate) fn schema() -> serde_json::Value {
    let mut schema = schemars::schema_for!(ConfigFile).to_value();
    drop_null_types(&mut schema);
    schema
}

/// TOML has no null: an optional key is left out, never set to null, so `Option` fields must
/// not advertise `"null"` as a type.
fn drop_null_types(schema: &mut serde_json::Value) {
    match schema {
        serde_json::Value::Object(map) => {
            // `Option<Struct>`: `anyOf: [{"$ref": ...}, {"type": "null"}]` becomes the `$ref`.
            if let Some(serde_json::Value::Array(variants)) = map.get_mut("anyOf") {
                variants.retain(|variant| variant.get("type").is_none_or(|kind| kind != "null"));
                if variants.len() == 1 {
                    if let Some(serde_json::Value::Object(only)) = variants.pop() {
                        map.remove("anyOf");
                        for (key, value) in only {
                            map.entry(key).or_insert(value);
                        }
                    }
                }
            }
            if let Some(serde_json::Value::Array(types)) = map.get_mut("type") {
                types.retain(|kind| kind != "null");
                if types.len() == 1 {
                    let only = types.remove(0);
                    map.insert("type".to_string(), only);
                }
            }
            map.values_mut().for_each(drop_null_types);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_null_types),
        _ => {}
    }
}
