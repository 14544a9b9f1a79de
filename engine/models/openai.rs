//! OpenAI-compatible chat completions: `POST {base_url}/chat/completions`, Bearer auth when a key
//! variable is configured; the reply is the first choice's message content.

use serde_json::{json, Value};

use super::error::ModelError;
use super::http::{count, missing, JsonPost};
use super::{Answer, Call, ModelRequest, Role, Usage};

pub(crate) struct OpenAi<'a> {
    pub(crate) base_url: &'a str,
    pub(crate) model: Option<&'a str>,
    pub(crate) api_key_env: Option<&'a str>,
    pub(crate) max_tokens: Option<u32>,
}

impl OpenAi<'_> {
    /// The request body.
    pub(crate) fn body(&self, request: &ModelRequest) -> Value {
        let mut messages = Vec::new();
        if let Some(system) = &request.system {
            messages.push(json!({"role": "system", "content": system}));
        }
        for (role, text) in request.messages() {
            let role = match role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            messages.push(json!({"role": role, "content": text}));
        }
        let mut body = json!({ "messages": messages });
        if let Some(model) = self.model {
            body["model"] = json!(model);
        }
        if let Some(temperature) = request.temperature {
            body["temperature"] = json!(temperature);
        }
        if let Some(max_tokens) = request.max_tokens.or(self.max_tokens) {
            body["max_tokens"] = json!(max_tokens);
        }
        if let Some(schema) = request.schema.as_deref() {
            body["response_format"] = if strict_compatible(schema) {
                json!({
                    "type": "json_schema",
                    "json_schema": {"name": "reply", "strict": true, "schema": schema},
                })
            } else {
                json!({"type": "json_object"})
            };
        }
        body
    }

    pub(crate) fn complete(
        &self,
        call: &Call<'_>,
        request: &ModelRequest,
    ) -> Result<Answer, ModelError> {
        let key = match self.api_key_env {
            Some(variable) => Some(call.key(variable)?),
            None => None,
        };
        let body = self.body(request);
        let url = format!("{}/chat/completions", self.base_url);
        let headers = match &key {
            Some(key) => vec![("authorization", format!("Bearer {key}"))],
            None => Vec::new(),
        };
        let post = JsonPost {
            alias: &request.alias,
            url: url.clone(),
            headers,
            secret: key,
            body,
            timeout: call.timeout,
            retries: call.retries,
            backoff: call.backoff,
            limiter: call.limiter,
        };
        let (response, retries) = post.send(call.agent)?;
        let message = response
            .get("choices")
            .and_then(|choices| choices.get(0))
            .and_then(|choice| choice.get("message"))
            .ok_or_else(|| missing(&request.alias, &url, "`choices[0].message`"))?;
        // A refusal or a tool call leaves `content` null: that is an empty reply, not a broken one.
        let text = message
            .get("content")
            .and_then(|content| content.as_str())
            .unwrap_or_default()
            .to_string();
        let usage = response
            .get("usage")
            .filter(|usage| usage.is_object())
            .map(|usage| {
                // `prompt_tokens` includes the tokens read from the prompt cache.
                let cached = usage
                    .get("prompt_tokens_details")
                    .map_or(0, |details| count(details, "cached_tokens"));
                Usage {
                    input_tokens: count(usage, "prompt_tokens").saturating_sub(cached),
                    output_tokens: count(usage, "completion_tokens"),
                    cache_read_tokens: cached,
                    cache_write_tokens: 0,
                }
            });
        Ok(Answer {
            text,
            usage,
            cost_usd: None,
            retries,
        })
    }
}

/// Whether strict structured outputs accept the schema: every object lists all of its
/// properties as required and allows no others, and no keyword outside the supported subset
/// appears. Anything else is sent as plain JSON mode, and the engine's validation decides.
pub(crate) fn strict_compatible(schema: &Value) -> bool {
    const SUPPORTED: &[&str] = &[
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "description",
        "title",
        "$defs",
        "definitions",
        "$ref",
        "$schema",
        "$id",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    ];
    let Some(map) = schema.as_object() else {
        return schema.is_boolean();
    };
    if map.keys().any(|key| !SUPPORTED.contains(&key.as_str())) {
        return false;
    }
    let is_object = match map.get("type") {
        Some(Value::String(kind)) => kind == "object",
        Some(Value::Array(kinds)) => kinds.iter().any(|kind| kind == "object"),
        _ => map.contains_key("properties"),
    };
    if is_object {
        if map.get("additionalProperties") != Some(&Value::Bool(false)) {
            return false;
        }
        let properties = map.get("properties").and_then(Value::as_object);
        let required: Vec<&str> = map
            .get("required")
            .and_then(Value::as_array)
            .map(|list| list.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(properties) = properties {
            if properties
                .keys()
                .any(|name| !required.contains(&name.as_str()))
            {
                return false;
            }
            if !properties.values().all(strict_compatible) {
                return false;
            }
        }
    }
    let nested = ["items"].iter().filter_map(|key| map.get(*key));
    let listed = map
        .get("anyOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    let defined = ["$defs", "definitions"]
        .iter()
        .filter_map(|key| map.get(*key).and_then(Value::as_object))
        .flat_map(|defs| defs.values());
    nested.chain(listed).chain(defined).all(strict_compatible)
}
