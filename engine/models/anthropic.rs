//! The Anthropic Messages API: `POST {base_url}/v1/messages` with `x-api-key` and
//! `anthropic-version` headers; the reply is the concatenated text blocks.
//!
//! A stage's schema (an object schema) becomes a tool the model is made to call
//! (`tool_choice` forces it), whose input is the reply. With the prompt cache on, the system
//! prompt and the stage's prompt prefix carry `cache_control`.

use serde_json::{json, Value};

use super::error::ModelError;
use super::http::{count, missing, JsonPost};
use super::{Answer, Call, ModelRequest, Role, Usage};

const API_VERSION: &str = "2023-06-01";
/// The tool a schema-constrained reply is given through.
pub(crate) const REPLY_TOOL: &str = "reply";

pub(crate) struct Anthropic<'a> {
    pub(crate) model: &'a str,
    pub(crate) api_key_env: &'a str,
    pub(crate) base_url: &'a str,
    pub(crate) max_tokens: u32,
    pub(crate) prompt_cache: bool,
}

impl Anthropic<'_> {
    /// The request body.
    pub(crate) fn body(&self, request: &ModelRequest) -> Value {
        let cached = || json!({"type": "ephemeral"});
        let mut messages = Vec::new();
        for (index, (role, text)) in request.messages().into_iter().enumerate() {
            let role = match role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            let content = match (&request.prefix, index) {
                (Some(prefix), 0) => {
                    let mut head = json!({"type": "text", "text": prefix});
                    if self.prompt_cache {
                        head["cache_control"] = cached();
                    }
                    json!([head, {"type": "text", "text": request.prompt}])
                }
                _ => json!(text),
            };
            messages.push(json!({"role": role, "content": content}));
        }
        let mut body = json!({
            "model": self.model,
            "max_tokens": request.max_tokens.unwrap_or(self.max_tokens),
            "messages": messages,
        });
        if let Some(system) = &request.system {
            body["system"] = if self.prompt_cache {
                json!([{"type": "text", "text": system, "cache_control": cached()}])
            } else {
                json!(system)
            };
        }
        if let Some(temperature) = request.temperature {
            body["temperature"] = json!(temperature);
        }
        if let Some(schema) = constrainable(request) {
            body["tools"] = json!([{
                "name": REPLY_TOOL,
                "description": "Give the reply: its input is the whole answer.",
                "input_schema": schema,
            }]);
            body["tool_choice"] = json!({"type": "tool", "name": REPLY_TOOL});
        }
        body
    }

    pub(crate) fn complete(
        &self,
        call: &Call<'_>,
        request: &ModelRequest,
    ) -> Result<Answer, ModelError> {
        let key = call.key(self.api_key_env)?;
        let body = self.body(request);
        // `base_url` names the host; one written with the version path works the same.
        let url = match self.base_url.strip_suffix("/v1") {
            Some(host) => format!("{host}/v1/messages"),
            None => format!("{}/v1/messages", self.base_url),
        };
        let post = JsonPost {
            alias: &request.alias,
            url: url.clone(),
            headers: vec![
                ("x-api-key", key.clone()),
                ("anthropic-version", API_VERSION.to_string()),
            ],
            secret: Some(key),
            body,
            timeout: call.timeout,
            retries: call.retries,
            backoff: call.backoff,
            limiter: call.limiter,
            cancel: call.cancel,
        };
        let (response, retried) = post.send(call.agent)?;
        let blocks = response
            .get("content")
            .and_then(|content| content.as_array())
            .ok_or_else(|| missing(&request.alias, &url, "`content` list"))?;
        let tool_input = blocks.iter().find_map(|block| {
            let is_reply = block.get("type").and_then(Value::as_str) == Some("tool_use")
                && block.get("name").and_then(Value::as_str) == Some(REPLY_TOOL);
            is_reply.then(|| block.get("input")).flatten()
        });
        let text: String = match tool_input {
            Some(input) => input.to_string(),
            None => blocks
                .iter()
                .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|block| block.get("text").and_then(Value::as_str))
                .collect(),
        };
        let usage = response.get("usage").map(|usage| Usage {
            input_tokens: count(usage, "input_tokens"),
            output_tokens: count(usage, "output_tokens"),
            cache_read_tokens: count(usage, "cache_read_input_tokens"),
            cache_write_tokens: count(usage, "cache_creation_input_tokens"),
        });
        Ok(Answer {
            text,
            usage,
            cost_usd: None,
            retried,
        })
    }
}

/// The stage's schema when a tool can carry it: a tool's input is always an object.
fn constrainable(request: &ModelRequest) -> Option<&Value> {
    let schema = request.schema.as_deref()?;
    (schema.get("type").and_then(Value::as_str) == Some("object")).then_some(schema)
}
