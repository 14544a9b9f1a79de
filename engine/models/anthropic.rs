//! The Anthropic Messages API: `POST {base_url}/v1/messages` with `x-api-key` and
//! `anthropic-version` headers; the reply is the concatenated text blocks.

use serde_json::json;

use super::error::ModelError;
use super::http::{count, missing, JsonPost};
use super::{Call, ModelRequest, Usage};

const API_VERSION: &str = "2023-06-01";

pub(crate) struct Anthropic<'a> {
    pub(crate) model: &'a str,
    pub(crate) api_key_env: &'a str,
    pub(crate) base_url: &'a str,
    pub(crate) max_tokens: u32,
}

impl Anthropic<'_> {
    pub(crate) fn complete(
        &self,
        call: &Call<'_>,
        request: &ModelRequest,
    ) -> Result<(String, Option<Usage>), ModelError> {
        let key = call.key(self.api_key_env)?;
        let mut body = json!({
            "model": self.model,
            "max_tokens": request.max_tokens.unwrap_or(self.max_tokens),
            "messages": [{"role": "user", "content": request.prompt}],
        });
        if let Some(system) = &request.system {
            body["system"] = json!(system);
        }
        if let Some(temperature) = request.temperature {
            body["temperature"] = json!(temperature);
        }
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
        };
        let response = post.send(call.agent)?;
        let blocks = response
            .get("content")
            .and_then(|content| content.as_array())
            .ok_or_else(|| missing(&request.alias, &url, "`content` list"))?;
        let text: String = blocks
            .iter()
            .filter(|block| block.get("type").and_then(|kind| kind.as_str()) == Some("text"))
            .filter_map(|block| block.get("text").and_then(|text| text.as_str()))
            .collect();
        let usage = response.get("usage").map(|usage| Usage {
            input_tokens: count(usage, "input_tokens"),
            output_tokens: count(usage, "output_tokens"),
        });
        Ok((text, usage))
    }
}
