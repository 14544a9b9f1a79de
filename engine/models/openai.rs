//! OpenAI-compatible chat completions: `POST {base_url}/chat/completions`, Bearer auth when a key
//! variable is configured; the reply is the first choice's message content.

use serde_json::json;

use super::error::ModelError;
use super::http::{count, missing, JsonPost};
use super::{Call, ModelRequest, Usage};

pub(crate) struct OpenAi<'a> {
    pub(crate) base_url: &'a str,
    pub(crate) model: Option<&'a str>,
    pub(crate) api_key_env: Option<&'a str>,
    pub(crate) max_tokens: Option<u32>,
}

impl OpenAi<'_> {
    pub(crate) fn complete(
        &self,
        call: &Call<'_>,
        request: &ModelRequest,
    ) -> Result<(String, Option<Usage>), ModelError> {
        let key = match self.api_key_env {
            Some(variable) => Some(call.key(variable)?),
            None => None,
        };
        let mut messages = Vec::new();
        if let Some(system) = &request.system {
            messages.push(json!({"role": "system", "content": system}));
        }
        messages.push(json!({"role": "user", "content": request.prompt}));
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
        };
        let response = post.send(call.agent)?;
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
            .map(|usage| Usage {
                input_tokens: count(usage, "prompt_tokens"),
                output_tokens: count(usage, "completion_tokens"),
            });
        Ok((text, usage))
    }
}
