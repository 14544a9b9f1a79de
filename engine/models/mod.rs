//! Model providers: aliases resolved through layered configuration, requests sent to a command,
//! the Anthropic Messages API or an OpenAI-compatible server, and exchanges recorded or replayed.
//!
//! [`Models`] is the one entry: it owns the checked aliases, the HTTP agent and the record/replay
//! mode. API keys are read from the environment at the moment of a request and never stored, so
//! nothing that holds a `Models` (its Debug output, errors, recordings, identities) can leak one.

mod anthropic;
mod command;
mod config;
mod error;
mod extract;
mod http;
mod openai;
mod recording;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use error::{ConfigProblem, ModelError, NearestRecording};
pub use extract::extract_json;

use config::{Alias, Provider, BUILTIN_CONFIG, BUILTIN_ORIGIN};
use recording::CanonicalRequest;

/// One request to a model, after its prompt was rendered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelRequest {
    /// The alias the stage named (`haiku`).
    pub alias: String,
    pub system: Option<String>,
    pub prompt: String,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    pub timeout: Option<Duration>,
    /// Variables set for a command provider's process (the workflow's `child_env`).
    pub env: Vec<(String, String)>,
}

/// Token counts, where the provider reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// A model's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelReply {
    pub text: String,
    pub usage: Option<Usage>,
    pub latency_ms: u64,
}

/// How long the first retry of an HTTP request waits; each further retry doubles it.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// The model aliases in effect and the way requests are answered.
#[derive(Clone)]
pub struct Models {
    aliases: BTreeMap<String, Alias>,
    mode: Mode,
    agent: ureq::Agent,
    environment: Environment,
    backoff: Duration,
}

#[derive(Debug, Clone, PartialEq)]
enum Mode {
    Live,
    /// Ask the providers and save every exchange in the folder.
    Record(PathBuf),
    /// Answer every alias from the folder; never ask a provider.
    Replay(PathBuf),
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
            std::env::current_dir()
                .map(|dir| dir.join(cwd))
                .unwrap_or_else(|_| cwd.to_path_buf())
        };
        ConfigPaths {
            user: config_home.map(|home| home.join("stagegraph").join("config.toml")),
            project: find_project_config(&cwd),
            explicit: var("STAGEGRAPH_CONFIG").map(PathBuf::from),
        }
    }
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
}

impl Call<'_> {
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
    pub fn load(cwd: &Path) -> Result<Models, ModelError> {
        Models::load_from(&ConfigPaths::from_env(cwd))
    }

    pub(crate) fn load_from(paths: &ConfigPaths) -> Result<Models, ModelError> {
        let mut layers = vec![(PathBuf::from(BUILTIN_ORIGIN), BUILTIN_CONFIG.to_string())];
        let optional = [&paths.user, &paths.project];
        for path in optional.into_iter().flatten() {
            match std::fs::read_to_string(path) {
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
            let text = std::fs::read_to_string(path).map_err(|source| ModelError::ConfigRead {
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
    pub fn from_layers(layers: Vec<(PathBuf, String)>) -> Result<Models, ModelError> {
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
        Ok(Models {
            aliases,
            mode: Mode::Live,
            agent: http::agent(),
            environment: Environment::Process,
            backoff: FIRST_BACKOFF,
        })
    }

    /// Ask the providers and save every exchange as `DIR/<sha256>.json` (`--record DIR`).
    /// Replaces a replay mode set before.
    pub fn set_record(&mut self, dir: PathBuf) {
        self.mode = Mode::Record(dir);
    }

    /// Answer every alias from `DIR` (`--replay DIR`); a request never recorded is an error.
    /// Replaces a record mode set before.
    pub fn set_replay(&mut self, dir: PathBuf) {
        self.mode = Mode::Replay(dir);
    }

    pub fn defines(&self, alias: &str) -> bool {
        self.aliases.contains_key(alias)
    }

    /// Every alias, by name, with the file that defined it (or `built-in`).
    pub fn aliases(&self) -> Vec<(String, String)> {
        self.aliases
            .iter()
            .map(|(name, alias)| (name.clone(), alias.origin.clone()))
            .collect()
    }

    /// A stable, secret-free identity of the provider behind the alias, for cache fingerprints:
    /// `command:claude -p --model haiku`, `anthropic:claude-sonnet-4-5@https://api.anthropic.com`.
    pub fn identity(&self, alias: &str) -> Option<String> {
        self.aliases
            .get(alias)
            .map(|alias| alias.provider.identity())
    }

    /// Send one request to the alias's provider, or answer it from recordings.
    pub fn complete(&self, request: &ModelRequest) -> Result<ModelReply, ModelError> {
        let alias = self.resolve(&request.alias)?;
        let canonical = CanonicalRequest::new(request, alias.provider.identity());
        let started = Instant::now();
        let (text, usage) = match &self.mode {
            Mode::Replay(dir) => recording::replay_exact(dir, &canonical)?,
            Mode::Live | Mode::Record(_) => self.ask(alias, request, &canonical)?,
        };
        let reply = ModelReply {
            text,
            usage,
            latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        if let Mode::Record(dir) = &self.mode {
            recording::save(dir, &canonical, &reply)?;
        }
        Ok(reply)
    }

    /// The JSON Schema of the configuration file.
    pub fn config_schema() -> serde_json::Value {
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
    ) -> Result<(String, Option<Usage>), ModelError> {
        let call = Call {
            alias: &request.alias,
            agent: &self.agent,
            environment: &self.environment,
            timeout: request.timeout.unwrap_or(alias.timeout),
            retries: alias.retries,
            backoff: self.backoff,
        };
        match &alias.provider {
            Provider::Command { argv } => command::complete(argv, call.timeout, request),
            Provider::Anthropic {
                model,
                api_key_env,
                base_url,
                max_tokens,
            } => anthropic::Anthropic {
                model,
                api_key_env,
                base_url,
                max_tokens: *max_tokens,
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

#[cfg(test)]
mod tests;
