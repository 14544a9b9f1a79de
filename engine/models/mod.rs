//! Model providers: aliases resolved through layered configuration, requests sent to a command,
//! the Anthropic Messages API or an OpenAI-compatible server, and exchanges recorded or replayed.
//!
//! [`Models`] is the one entry: it owns the checked aliases, the HTTP agent and the record/replay
//! mode. API keys are read from the environment at the moment of a request and never stored, so
//! nothing that holds a `Models` (its Debug output, errors, recordings, identities) can leak one.

mod anthropic;
mod claude;
mod command;
mod config;
mod draft7;
mod error;
mod extract;
mod http;
mod limits;
mod openai;
mod recording;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use error::ModelError;
pub(crate) use extract::extract_json;
pub(crate) use recording::migrate as migrate_recordings;
pub use recording::Migration;

use crate::floor::cancel::Cancel;
use config::{Alias, Price, Provider, BUILTIN_CONFIG, BUILTIN_ORIGIN};
use limits::{Budget, Limiter};
use recording::CanonicalRequest;

/// One request to a model, after its prompt was rendered.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ModelRequest {
    /// The alias the stage named (`haiku`).
    pub alias: String,
    pub system: Option<String>,
    /// A stable beginning of the first user message, sent ahead of `prompt`; a provider with a
    /// prompt cache marks it for caching.
    pub prefix: Option<String>,
    pub prompt: String,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    pub timeout: Option<Duration>,
    /// Variables set for a command provider's process (the workflow's `child_env`).
    pub env: Vec<(String, String)>,
    /// The JSON Schema the reply must match; providers that can constrain their output to it do.
    pub schema: Option<Arc<serde_json::Value>>,
    /// Replies rejected before, oldest first, each with what was wrong with it: the request is
    /// then a conversation (prompt, reply, problems, reply, problems, ...).
    pub corrections: Vec<Correction>,
}

/// A rejected reply and the problems found in it, for a repair turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Correction {
    pub reply: String,
    pub problems: String,
}

/// Who speaks a message of a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    User,
    Assistant,
}

impl ModelRequest {
    /// The first user message: the prefix, when there is one, then the prompt.
    pub(crate) fn first_message(&self) -> String {
        match &self.prefix {
            Some(prefix) => format!("{prefix}{}", self.prompt),
            None => self.prompt.clone(),
        }
    }

    /// The conversation: the first user message, then each rejected reply and its problems.
    pub(crate) fn messages(&self) -> Vec<(Role, String)> {
        let mut messages = vec![(Role::User, self.first_message())];
        for correction in &self.corrections {
            messages.push((Role::Assistant, correction.reply.clone()));
            messages.push((Role::User, correction.problems.clone()));
        }
        messages
    }

    /// The conversation as one text, for providers that take a single prompt: the first
    /// message, then each earlier reply quoted with the problems found in it.
    pub(crate) fn flattened(&self) -> String {
        let mut text = self.first_message();
        for correction in &self.corrections {
            text.push_str("\n\n<previous_reply>\n");
            text.push_str(&correction.reply);
            text.push_str("\n</previous_reply>\n\n");
            text.push_str(&correction.problems);
        }
        text
    }
}

/// Token counts, where the provider reports them. `input_tokens` excludes the tokens read from
/// or written to a prompt cache, which are counted apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// What these tokens cost at a price per million tokens.
    pub(crate) fn cost(&self, price: &Price) -> f64 {
        let million = 1_000_000.0;
        (self.input_tokens as f64 * price.input
            + self.output_tokens as f64 * price.output
            + self.cache_read_tokens as f64 * price.cache_read.unwrap_or(price.input)
            + self.cache_write_tokens as f64 * price.cache_write.unwrap_or(price.input))
            / million
    }
}

/// A model's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ModelReply {
    pub text: String,
    pub usage: Option<Usage>,
    pub latency_ms: u64,
    /// What the call cost in USD: as the provider reported it, or from the alias's price table;
    /// `None` when neither is known. A replayed call reports what the recorded call cost.
    pub cost_usd: Option<f64>,
    /// Requests sent again, and the waits between them.
    pub retried: Retried,
    /// Answered from a recording, not by the provider: nothing was paid.
    pub replayed: bool,
}

/// What a provider returns for one call.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Answer {
    pub(crate) text: String,
    pub(crate) usage: Option<Usage>,
    /// The cost the provider itself reported (the Claude Code CLI does).
    pub(crate) cost_usd: Option<f64>,
    pub(crate) retried: Retried,
}

/// What a call sent again, and how long it waited between its requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Retried {
    /// Requests sent again after a rate limit, an overload or a transient failure.
    pub retries: u32,
    /// Of those, the ones after a rate limit or an overload (429, 529, 503 with `retry-after`).
    pub throttled: u32,
    /// The waits before them, summed: the `retry-after` asked or the backoff, with jitter.
    pub waited_ms: u64,
}

/// How long the first retry of an HTTP request waits; each further retry doubles it.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// The model aliases in effect and the way requests are answered.
#[derive(Clone)]
pub(crate) struct Models {
    aliases: BTreeMap<String, Alias>,
    mode: Mode,
    agent: ureq::Agent,
    environment: Environment,
    backoff: Duration,
    /// Each alias's queue (shared by the aliases that name the same provider model): the
    /// lowest `max_concurrency` among them and the limit a rate limit lowers, shared by every
    /// clone, so by every stage and foreach item of a run.
    limiters: Arc<BTreeMap<String, Arc<Limiter>>>,
    budget: Arc<Budget>,
}

#[derive(Debug, Clone, PartialEq)]
enum Mode {
    Live,
    /// Ask the providers and save every exchange in the folder.
    Record(PathBuf),
    /// Answer every alias from the folder; never ask a provider.
    Replay(PathBuf),
    /// Answer from the folder what it holds; ask the providers the rest and save it there.
    Fill(PathBuf),
}

/// Where API keys come from: the process environment, or a fixed map in tests, which must not
/// race each other over process-wide variables.
#[derive(Clone, Default)]
enum Environment {
    #[default]
    Process,
    #[cfg_attr(not(test), allow(dead_code))]
    Fixed(Arc<HashMap<String, String>>),
}

impl Environment {
    fn get(&self, name: &str) -> Option<String> {
        match self {
            Environment::Process => std::env::var(name).ok(),
            Environment::Fixed(map) => map.get(name).cloned(),
        }
    }
}

/// The configuration files of a load, lowest precedence first after the built-in layer.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ConfigPaths {
    /// `$XDG_CONFIG_HOME/stagegraph/config.toml`; skipped when it does not exist.
    pub(crate) user: Option<PathBuf>,
    /// The nearest `stagegraph.toml`.
    pub(crate) project: Option<PathBuf>,
    /// `STAGEGRAPH_CONFIG`: it must exist, since someone named it.
    pub(crate) explicit: Option<PathBuf>,
}

impl ConfigPaths {
    fn from_env(cwd: &Path) -> ConfigPaths {
        let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
        let config_home = var("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
            .or_else(|| var("HOME").map(|home| PathBuf::from(home).join(".config")));
        let cwd = if cwd.is_absolute() {
            cwd.to_path_buf()
        } else {
            std::env::current_dir().map_or_else(|_| cwd.to_path_buf(), |dir| dir.join(cwd))
        };
        ConfigPaths {
            user: config_home.map(|home| home.join("stagegraph").join("config.toml")),
            project: find_project_config(&cwd),
            explicit: var("STAGEGRAPH_CONFIG").map(PathBuf::from),
        }
    }
}

/// The variables the Claude Code CLI authenticates with: the built-in aliases run it, and it
/// reads them from the environment the engine passes on.
const CLI_SECRET_VARIABLES: [&str; 3] = [
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
];

/// The variables whose values are secrets: every `api_key_env` the configuration files name
/// (the Anthropic provider's default when it names none), and the variables the Claude Code CLI
/// authenticates with. The files are read leniently, so a configuration with a mistake
/// elsewhere still has its keys kept out of what the engine writes.
pub(crate) fn secret_variables(cwd: &Path) -> std::collections::BTreeSet<String> {
    let paths = ConfigPaths::from_env(cwd);
    let mut names: std::collections::BTreeSet<String> = CLI_SECRET_VARIABLES
        .iter()
        .map(|name| (*name).to_string())
        .collect();
    let files = [&paths.user, &paths.project, &paths.explicit];
    for path in files.into_iter().flatten() {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        let Ok(document) = text.parse::<toml::Table>() else {
            continue;
        };
        let Some(toml::Value::Table(aliases)) = document.get("models") else {
            continue;
        };
        for alias in aliases.values() {
            let toml::Value::Table(alias) = alias else {
                continue;
            };
            match alias.get("api_key_env") {
                Some(toml::Value::String(name)) => {
                    names.insert(name.clone());
                }
                _ if alias.get("provider").and_then(toml::Value::as_str) == Some("anthropic") => {
                    names.insert(config::DEFAULT_ANTHROPIC_KEY_ENV.to_string());
                }
                _ => {}
            }
        }
    }
    names
}

/// Keep the values of [`secret_variables`] out of everything the engine writes or prints from
/// now on (see [`crate::floor::secrets`]).
pub(crate) fn register_secrets(cwd: &Path) {
    let names = secret_variables(cwd);
    crate::floor::secrets::register_variables(names.iter().map(String::as_str));
}

/// `stagegraph.toml` in `cwd` or the nearest ancestor that has one.
pub(crate) fn find_project_config(cwd: &Path) -> Option<PathBuf> {
    cwd.ancestors()
        .map(|dir| dir.join("stagegraph.toml"))
        .find(|path| path.is_file())
}

/// The context of one provider call.
pub(crate) struct Call<'a> {
    alias: &'a str,
    agent: &'a ureq::Agent,
    environment: &'a Environment,
    timeout: Duration,
    retries: u32,
    backoff: Duration,
    limiter: &'a Limiter,
    /// The run's interrupt and the deadline of the request's `timeout` (the stage's): each
    /// provider stops waiting when either comes.
    cancel: Cancel,
}

impl Call<'_> {
    /// The timeout of a program the call runs: the request's, cut to what is left of the
    /// stage's time after waiting for a place in the queue.
    fn program_timeout(&self) -> Duration {
        self.cancel.bound(self.timeout)
    }

    /// A program's failure, told as the stage's timeout when that is what ended it.
    fn program_failed(&self, error: ModelError) -> ModelError {
        match (&error, self.cancel.check()) {
            (ModelError::Timeout { .. }, Err(stop)) => ModelError::stopped(self.alias, stop),
            _ => error,
        }
    }

    /// The API key from the variable the alias names; an empty value counts as unset.
    fn key(&self, variable: &str) -> Result<String, ModelError> {
        self.environment
            .get(variable)
            .filter(|key| !key.trim().is_empty())
            .ok_or_else(|| ModelError::MissingKey {
                alias: self.alias.to_string(),
                variable: variable.to_string(),
            })
    }
}

impl Models {
    /// Layered config, lowest first, alias by alias: the built-in aliases (`haiku` and `sonnet`
    /// through `claude -p`), the user config (`$XDG_CONFIG_HOME/stagegraph/config.toml`, default
    /// `~/.config/stagegraph/config.toml`), the project's `stagegraph.toml` (in `cwd` or the
    /// nearest ancestor), the file named by `STAGEGRAPH_CONFIG`. A later definition of an alias
    /// replaces the earlier one whole.
    pub(crate) fn load(cwd: &Path) -> Result<Models, ModelError> {
        Models::load_from(&ConfigPaths::from_env(cwd))
    }

    pub(crate) fn load_from(paths: &ConfigPaths) -> Result<Models, ModelError> {
        let mut layers = vec![(PathBuf::from(BUILTIN_ORIGIN), BUILTIN_CONFIG.to_string())];
        let optional = [&paths.user, &paths.project];
        for path in optional.into_iter().flatten() {
            match crate::floor::text::read_utf8(path) {
                Ok(text) => layers.push((path.clone(), text)),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(ModelError::ConfigRead {
                        path: path.clone(),
                        source,
                    })
                }
            }
        }
        if let Some(path) = &paths.explicit {
            let text =
                crate::floor::text::read_utf8(path).map_err(|source| ModelError::ConfigRead {
                    path: path.clone(),
                    source,
                })?;
            layers.push((path.clone(), text));
        }
        Models::from_layers(layers)
    }

    /// Exactly the given layers, lowest precedence first, each an origin (a file name for
    /// messages and for resolving relative paths) and its TOML text. The built-in layer is not
    /// added. Every problem in every layer is reported.
    pub(crate) fn from_layers(layers: Vec<(PathBuf, String)>) -> Result<Models, ModelError> {
        let mut problems = Vec::new();
        let mut aliases = BTreeMap::new();
        for (origin, text) in &layers {
            for (name, alias) in config::parse_layer(origin, text, &mut problems) {
                aliases.insert(name, alias);
            }
        }
        if !problems.is_empty() {
            return Err(ModelError::Config { problems });
        }
        for alias in aliases.values() {
            if let Some(variable) = alias.provider.key_variable() {
                crate::floor::secrets::register_variables([variable]);
            }
        }
        let limiters = shared_queues(&aliases);
        Ok(Models {
            aliases,
            mode: Mode::Live,
            agent: http::agent(),
            environment: Environment::Process,
            backoff: FIRST_BACKOFF,
            limiters: Arc::new(limiters),
            budget: Arc::new(Budget::default()),
        })
    }

    /// Refuse to start a model call that would take what the run has spent past `usd`;
    /// `source` names where the limit was set (`--max-cost`, `budget_usd`) for the message.
    /// The lower of two budgets wins.
    pub(crate) fn set_budget(&self, usd: f64, source: &str) {
        self.budget.limit(usd, source);
    }

    /// How many calls to the alias may be in flight at once, when its configuration (or that
    /// of another alias naming the same provider model) says.
    pub(crate) fn max_concurrency(&self, alias: &str) -> Option<usize> {
        self.limiters.get(alias).and_then(|limiter| limiter.max())
    }

    /// Ask the providers and save every exchange as `DIR/<sha256>.json` (`--record DIR`).
    /// Replaces a replay mode set before.
    pub(crate) fn set_record(&mut self, dir: PathBuf) {
        self.mode = Mode::Record(dir);
    }

    /// Answer every alias from `DIR` (`--replay DIR`); a request never recorded is an error.
    /// Replaces a record mode set before.
    pub(crate) fn set_replay(&mut self, dir: PathBuf) {
        self.mode = Mode::Replay(dir);
    }

    /// The program and own arguments of an alias answered by the Claude Code CLI.
    pub(crate) fn claude_program(&self, alias: &str) -> Option<&[String]> {
        match &self.aliases.get(alias)?.provider {
            Provider::Claude { program, .. } => Some(program),
            _ => None,
        }
    }

    /// Answer from `DIR` what it holds and ask the providers only the requests it does not,
    /// saving their exchanges there (`stagegraph test --record`).
    pub(crate) fn set_fill(&mut self, dir: PathBuf) {
        self.mode = Mode::Fill(dir);
    }

    pub(crate) fn defines(&self, alias: &str) -> bool {
        self.aliases.contains_key(alias)
    }

    /// Every alias, by name, with the file that defined it (or `built-in`).
    pub(crate) fn aliases(&self) -> Vec<(String, String)> {
        self.aliases
            .iter()
            .map(|(name, alias)| (name.clone(), alias.origin.clone()))
            .collect()
    }

    /// A stable, secret-free identity of the provider behind the alias, for cache fingerprints:
    /// `command:claude -p --model haiku`, `anthropic:claude-sonnet-4-5@https://api.anthropic.com`.
    pub(crate) fn identity(&self, alias: &str) -> Option<String> {
        self.aliases
            .get(alias)
            .map(|alias| alias.provider.identity())
    }

    /// Send one request to the alias's provider, or answer it from recordings.
    pub(crate) fn complete(&self, request: &ModelRequest) -> Result<ModelReply, ModelError> {
        let alias = self.resolve(&request.alias)?;
        // The stage's `timeout` is a deadline for the whole call: the wait in the queue, the
        // attempts and the waits between them.
        let cancel = Cancel::after(request.timeout);
        let canonical = CanonicalRequest::new(request, alias.provider.model_identity());
        let started = Instant::now();
        let mut replayed = matches!(self.mode, Mode::Replay(_))
            || matches!(alias.provider, Provider::Replay { .. });
        let mut reservation = None;
        let recorded = match &self.mode {
            Mode::Replay(dir) => Some(recording::replay_exact(dir, &canonical)?),
            Mode::Fill(dir) => match recording::replay_exact(dir, &canonical) {
                Ok(answer) => Some(answer),
                Err(ModelError::ReplayMiss { .. }) => None,
                Err(error) => return Err(error),
            },
            Mode::Live | Mode::Record(_) => None,
        };
        replayed |= recorded.is_some();
        tracing::debug!(
            alias = %request.alias,
            provider = %alias.provider.identity(),
            prompt_bytes = request.prompt.len(),
            replayed = recorded.is_some(),
            "model request"
        );
        let answer = match recorded {
            Some(answer) => answer,
            None => {
                if !replayed {
                    let estimate = alias
                        .price
                        .as_ref()
                        .map_or(0.0, |price| estimate_input_cost(request, price));
                    reservation = Some(self.budget.admit(&request.alias, estimate)?);
                }
                self.ask(alias, request, &canonical, cancel)?
            }
        };
        let cost_usd = answer.cost_usd.or_else(|| {
            let price = alias.price.as_ref()?;
            Some(answer.usage?.cost(price))
        });
        if let Some(reservation) = reservation {
            reservation.settle(cost_usd);
        }
        let reply = ModelReply {
            // A reply that echoes a key goes no further than this: not into the stage's output,
            // its record, the cache or a recording.
            text: crate::floor::secrets::redact_string(answer.text),
            usage: answer.usage,
            latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            cost_usd,
            retried: answer.retried,
            replayed,
        };
        tracing::debug!(
            alias = %request.alias,
            latency_ms = reply.latency_ms,
            reply_bytes = reply.text.len(),
            retries = reply.retried.retries,
            replayed = reply.replayed,
            "model reply"
        );
        match &self.mode {
            Mode::Record(dir) => recording::save(dir, &canonical, &reply)?,
            Mode::Fill(dir) if !reply.replayed => recording::save(dir, &canonical, &reply)?,
            _ => {}
        }
        Ok(reply)
    }

    /// The JSON Schema of the configuration file.
    pub(crate) fn config_schema() -> serde_json::Value {
        config::schema()
    }

    fn resolve(&self, name: &str) -> Result<&Alias, ModelError> {
        self.aliases.get(name).ok_or_else(|| {
            let defined: Vec<String> = self.aliases.keys().cloned().collect();
            let suggestion = defined
                .iter()
                .map(|candidate| (strsim::levenshtein(candidate, name), candidate))
                .filter(|(distance, _)| *distance <= (name.chars().count() / 3).max(1))
                .min()
                .map(|(_, candidate)| candidate.clone());
            ModelError::UndefinedAlias {
                alias: name.to_string(),
                suggestion,
                defined,
            }
        })
    }

    fn ask(
        &self,
        alias: &Alias,
        request: &ModelRequest,
        canonical: &CanonicalRequest,
        cancel: Cancel,
    ) -> Result<Answer, ModelError> {
        let unlimited;
        let limiter = match self.limiters.get(&request.alias) {
            Some(limiter) => limiter.as_ref(),
            None => {
                unlimited = Limiter::new(None);
                &unlimited
            }
        };
        let call = Call {
            alias: &request.alias,
            agent: &self.agent,
            environment: &self.environment,
            timeout: request.timeout.unwrap_or(alias.timeout),
            retries: alias.retries,
            backoff: self.backoff,
            limiter,
            cancel,
        };
        match &alias.provider {
            Provider::Command { argv, dir, .. } => {
                let _permit = limiter.acquire(call.alias, &call.cancel)?;
                command::complete(argv, dir.as_deref(), call.program_timeout(), request)
                    .map_err(|error| call.program_failed(error))
            }
            Provider::Claude {
                program,
                model,
                tools,
                effort,
            } => {
                let _permit = limiter.acquire(call.alias, &call.cancel)?;
                claude::Claude {
                    program,
                    model,
                    tools,
                    effort: effort.as_deref(),
                }
                .complete(call.program_timeout(), request)
                .map_err(|error| call.program_failed(error))
            }
            Provider::Anthropic {
                model,
                api_key_env,
                base_url,
                max_tokens,
                prompt_cache,
            } => anthropic::Anthropic {
                model,
                api_key_env,
                base_url,
                max_tokens: *max_tokens,
                prompt_cache: *prompt_cache,
            }
            .complete(&call, request),
            Provider::OpenAi {
                base_url,
                model,
                api_key_env,
                max_tokens,
            } => openai::OpenAi {
                base_url,
                model: model.as_deref(),
                api_key_env: api_key_env.as_deref(),
                max_tokens: *max_tokens,
            }
            .complete(&call, request),
            Provider::Replay { dir } => recording::replay_matching(dir, canonical),
        }
    }

    #[cfg(test)]
    fn with_environment(mut self, variables: &[(&str, &str)]) -> Models {
        let map = variables
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        self.environment = Environment::Fixed(Arc::new(map));
        self
    }

    #[cfg(test)]
    fn with_backoff(mut self, backoff: Duration) -> Models {
        self.backoff = backoff;
        self
    }
}

/// One queue per provider model (`Provider::queue_key`), each alias pointing at its model's:
/// the queue takes the lowest `max_concurrency` any of its aliases sets.
fn shared_queues(aliases: &BTreeMap<String, Alias>) -> BTreeMap<String, Arc<Limiter>> {
    let mut limits: BTreeMap<String, Option<u32>> = BTreeMap::new();
    for alias in aliases.values() {
        if let Some(key) = alias.provider.queue_key() {
            let limit = limits.entry(key).or_default();
            *limit = match (*limit, alias.max_concurrency) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }
    let queues: BTreeMap<String, Arc<Limiter>> = limits
        .into_iter()
        .map(|(key, limit)| (key, Arc::new(Limiter::new(limit))))
        .collect();
    aliases
        .iter()
        .filter_map(|(name, alias)| {
            let queue = queues.get(&alias.provider.queue_key()?)?;
            Some((name.clone(), Arc::clone(queue)))
        })
        .collect()
}

/// Aliases, identities and origins only: nothing secret is held, and this keeps it that way if
/// a field is ever added.
impl fmt::Debug for Models {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let aliases: BTreeMap<&str, (String, &str)> = self
            .aliases
            .iter()
            .map(|(name, alias)| {
                (
                    name.as_str(),
                    (alias.provider.identity(), alias.origin.as_str()),
                )
            })
            .collect();
        f.debug_struct("Models")
            .field("aliases", &aliases)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// A lower bound of what a request costs before it is sent: its text at about four characters
/// a token, at the input price. The reply's tokens are not known yet.
fn estimate_input_cost(request: &ModelRequest, price: &Price) -> f64 {
    let characters = request.system.as_deref().map_or(0, str::len)
        + request
            .messages()
            .iter()
            .map(|(_, text)| text.len())
            .sum::<usize>();
    (characters / 4) as f64 * price.input / 1_000_000.0
}

#[cfg(test)]
mod tests;
