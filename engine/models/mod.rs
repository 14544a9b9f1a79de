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
