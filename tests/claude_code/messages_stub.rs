//! A loopback Anthropic Messages API for driving the real Claude Code CLI offline.
//!
//! It answers `POST /v1/messages` (streamed or not) with whatever the test's `reply` function
//! returns for the request, answers `count_tokens` and anything else with harmless JSON, and keeps
//! every request body for the test to inspect.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

/// One reply: text, or a call of a tool.
pub(crate) enum Reply {
    Text(String),
    ToolUse { name: String, input: Value },
}

type ReplyFn = dyn Fn(&Value) -> Reply + Send + Sync;

/// The running stub; it stops serving when the test process ends.
pub(crate) struct MessagesStub {
    pub(crate) url: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl MessagesStub {
    pub(crate) fn start(reply: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> MessagesStub {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let reply: Arc<ReplyFn> = Arc::new(reply);
        let kept = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let reply = Arc::clone(&reply);
                let kept = Arc::clone(&kept);
                std::thread::spawn(move || serve(stream, &*reply, &kept));
            }
        });
        MessagesStub { url, requests }
    }

    /// The bodies of the `/v1/messages` requests so far.
    pub(crate) fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("requests").clone()
    }
}

fn serve(stream: TcpStream, reply: &ReplyFn, kept: &Mutex<Vec<Value>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let path = parts.next().unwrap_or("").to_string();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let (content_type, text) =
            if method == "POST" && path.starts_with("/v1/messages/count_tokens") {
                (
                    "application/json",
                    json!({ "input_tokens": 12 }).to_string(),
                )
            } else if method == "POST" && path.starts_with("/v1/messages") {
                kept.lock().expect("requests").push(request.clone());
                let message = message(&request, reply(&request));
                if request["stream"] == true {
                    ("text/event-stream", events(&message))
                } else {
                    ("application/json", message.to_string())
                }
            } else {
                ("application/json", "{}".to_string())
            };
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
            text.len()
        );
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(text.as_bytes()).is_err()
        {
            return;
        }
    }
}

fn message(request: &Value, reply: Reply) -> Value {
    let (content, stop) = match reply {
        Reply::Text(text) => (json!([{ "type": "text", "text": text }]), "end_turn"),
        Reply::ToolUse { name, input } => (
            json!([{ "type": "tool_use", "id": "toolu_stub_1", "name": name, "input": input }]),
            "tool_use",
        ),
    };
    json!({
        "id": "msg_stub",
        "type": "message",
        "role": "assistant",
        "model": request["model"],
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": { "input_tokens": 20, "output_tokens": 8 }
    })
}

/// The same message as the server-sent events of a streamed reply.
fn events(message: &Value) -> String {
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    let mut out = vec![(
        "message_start",
        json!({ "type": "message_start", "message": start }),
    )];
    for (index, block) in message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let (empty, delta) = match block["type"].as_str() {
            Some("tool_use") => (
                json!({ "type": "tool_use", "id": block["id"], "name": block["name"], "input": {} }),
                json!({ "type": "input_json_delta", "partial_json": block["input"].to_string() }),
            ),
            _ => (
                json!({ "type": "text", "text": "" }),
                json!({ "type": "text_delta", "text": block["text"] }),
            ),
        };
        out.push((
            "content_block_start",
            json!({ "type": "content_block_start", "index": index, "content_block": empty }),
        ));
        out.push((
            "content_block_delta",
            json!({ "type": "content_block_delta", "index": index, "delta": delta }),
        ));
        out.push((
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": index }),
        ));
    }
    out.push((
        "message_delta",
        json!({
            "type": "message_delta",
            "delta": { "stop_reason": message["stop_reason"], "stop_sequence": null },
            "usage": { "output_tokens": 8 }
        }),
    ));
    out.push(("message_stop", json!({ "type": "message_stop" })));
    let mut text = String::new();
    for (event, data) in &out {
        let _ = write!(text, "event: {event}\ndata: {data}\n\n");
    }
    text
}

/// Every `tool_result` text in a request's messages.
pub(crate) fn tool_results(request: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for message in request["messages"].as_array().into_iter().flatten() {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                match &block["content"] {
                    Value::String(text) => out.push(text.clone()),
                    Value::Array(parts) => out.extend(
                        parts
                            .iter()
                            .filter_map(|p| p["text"].as_str().map(str::to_string)),
                    ),
                    _ => {}
                }
            }
        }
    }
    out
}

/// The names of the tools a request offers.
pub(crate) fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|tool| tool["name"].as_str().map(str::to_string))
        .collect()
}
