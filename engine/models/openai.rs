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
        let format = request.schema.as_deref().and_then(response_format);
        let mut system = request.system.clone();
        if let Some(Format::JsonObject(schema)) = &format {
            // JSON mode is refused unless the messages say "JSON"; they may not, since the
            // prompt was written for the schema, which this mode does not send.
            let says_json = |text: &str| text.to_ascii_lowercase().contains("json");
            let said = system.as_deref().is_some_and(says_json)
                || request.messages().iter().any(|(_, text)| says_json(text));
            if !said {
                let instruction =
                    format!("Reply with one JSON object that matches this JSON Schema:\n{schema}");
                system = Some(match system {
                    Some(system) => format!("{system}\n\n{instruction}"),
                    None => instruction,
                });
            }
        }
        let mut messages = Vec::new();
        if let Some(system) = &system {
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
        match format {
            Some(Format::Strict(schema)) => {
                body["response_format"] = json!({
                    "type": "json_schema",
                    "json_schema": {"name": "reply", "strict": true, "schema": schema},
                });
            }
            Some(Format::JsonObject(_)) => body["response_format"] = json!({"type": "json_object"}),
            None => {}
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
            cancel: call.cancel,
        };
        let (response, retried) = post.send(call.agent)?;
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
            retried,
        })
    }
}

/// How a schema constrains the reply.
enum Format<'a> {
    /// Strict structured outputs: the reply is decoded to match the schema.
    Strict(&'a Value),
    /// JSON mode: the reply is some JSON object; the engine checks it against the schema.
    JsonObject(&'a Value),
}

/// Strict mode when the schema allows it, else JSON mode when the reply may be an object (JSON
/// mode gives nothing else), else nothing: the engine's validation and repair decide.
fn response_format(schema: &Value) -> Option<Format<'_>> {
    // Strict mode takes an object at the root.
    let root_is_object = schema.get("type").and_then(Value::as_str) == Some("object");
    if root_is_object && strict_compatible(schema) {
        return Some(Format::Strict(schema));
    }
    let may_be_object = match schema.get("type") {
        None => schema.is_object(),
        Some(Value::String(kind)) => kind == "object",
        Some(Value::Array(kinds)) => kinds.iter().any(|kind| kind == "object"),
        Some(_) => false,
    };
    may_be_object.then_some(Format::JsonObject(schema))
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
