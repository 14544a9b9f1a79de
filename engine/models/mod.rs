//! Model providers: aliases resolved through layered configuration, requests sent to a command,
//! the Anthropic Messages API or an OpenAI-compatible server, and exchanges recorded or replayed.

use std::time::Duration;

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

/// A model call's failure.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ModelError {
    pub message: String,
}

/// Configured model aliases.
#[derive(Debug, Default)]
pub struct Models {}

impl Models {
    pub fn load(_cwd: &std::path::Path) -> Result<Models, ModelError> {
        Ok(Models {})
    }
    pub fn set_record(&mut self, _dir: std::path::PathBuf) {}
    pub fn set_replay(&mut self, _dir: std::path::PathBuf) {}
    pub fn defines(&self, _alias: &str) -> bool {
        true
    }
    pub fn identity(&self, alias: &str) -> Option<String> {
        Some(alias.to_string())
    }
    pub fn complete(&self, _request: &ModelRequest) -> Result<ModelReply, ModelError> {
        Err(ModelError {
            message: "no provider".into(),
        })
    }
    pub fn config_schema() -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// The JSON document in a reply.
pub fn extract_json(text: &str) -> Option<&str> {
    Some(text)
}
