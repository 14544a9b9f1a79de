//! A loopback HTTP server for model tests: every request is recorded (method, path, headers,
//! body parsed as JSON) and answered by a handler, one thread per connection, so that calls made
//! at once are served at once.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One request as the server received it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) method: String,
    pub(crate) path: String,
    /// Lower-case names.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Value,
}

impl Seen {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// An answer: status, extra headers, body, and how long to wait before sending it.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) content_type: &'static str,
    pub(crate) body: String,
    pub(crate) delay: Duration,
}

impl Reply {
    pub(crate) fn json(status: u16, body: &Value) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            content_type: "application/json",
            body: body.to_string(),
            delay: Duration::ZERO,
        }
    }

    pub(crate) fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

type Handler = dyn Fn(&Seen, usize) -> Reply + Send + Sync;

/// A running server; it lives as long as the test.
pub(crate) struct Server {
    pub(crate) url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    load: Arc<Load>,
}

/// Requests being answered now, and the most there ever were at once.
#[derive(Default)]
struct Load {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Server {
    /// Serve with `handler(request, index)`, where `index` counts requests from 0.
    pub(crate) fn start(handler: impl Fn(&Seen, usize) -> Reply + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let load = Arc::new(Load::default());
        let handler: Arc<Handler> = Arc::new(handler);
        let (shared, counted) = (Arc::clone(&seen), Arc::clone(&load));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let (seen, handler, load) = (
                    Arc::clone(&shared),
                    Arc::clone(&handler),
                    Arc::clone(&counted),
                );
                std::thread::spawn(move || serve(stream, &seen, handler.as_ref(), &load));
            }
        });
        Server { url, seen, load }
    }

    /// The most requests that were being answered at the same moment.
    pub(crate) fn most_at_once(&self) -> usize {
        self.load.most.load(Ordering::SeqCst)
    }

    /// Every request so far, in arrival order.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The POSTs so far (the Claude Code CLI also sends other requests).
    pub(crate) fn posts(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|seen| seen.method == "POST")
            .collect()
    }
}

fn serve(stream: TcpStream, seen: &Mutex<Vec<Seen>>, handler: &Handler, load: &Load) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let path = parts.next().unwrap_or_default().to_string();
        let mut headers = Vec::new();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                let name = name.trim().to_ascii_lowercase();
                let value = value.trim().to_string();
                if name == "content-length" {
                    length = value.parse().unwrap_or(0);
                }
                headers.push((name, value));
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let now = load.now.fetch_add(1, Ordering::SeqCst) + 1;
        load.most.fetch_max(now, Ordering::SeqCst);
        let request = Seen {
            method,
            path,
            headers,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        };
        let index = {
            let mut seen = seen.lock().unwrap();
            seen.push(request.clone());
            seen.len() - 1
        };
        let reply = handler(&request, index);
        if !reply.delay.is_zero() {
            std::thread::sleep(reply.delay);
        }
        let mut head = format!(
            "HTTP/1.1 {} X\r\ncontent-type: {}\r\ncontent-length: {}\r\n",
            reply.status,
            reply.content_type,
            reply.body.len()
        );
        for (name, value) in &reply.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        // Counted out before the client can see the answer, so that its next request is never
        // counted beside this one.
        load.now.fetch_sub(1, Ordering::SeqCst);
        if writer.write_all(head.as_bytes()).is_err()
            || writer.write_all(reply.body.as_bytes()).is_err()
            || writer.flush().is_err()
        {
            return;
        }
    }
}

/// Holds requests in a handler until `size` of them are waiting (or all `total` have come), then
/// lets them go together: a client allowed `size` calls at once is seen with `size` in flight
/// however loaded the machine is, where answering after a fixed delay only makes it likely.
/// A wait is bounded (30 s) against hanging: past it the waiting requests go, and a test
/// counting calls at once sees fewer than `size`.
pub(crate) struct Batches {
    size: usize,
    total: usize,
    /// Requests arrived, requests let go.
    counts: Mutex<(usize, usize)>,
    changed: Condvar,
}

impl Batches {
    pub(crate) fn new(size: usize, total: usize) -> Arc<Batches> {
        Arc::new(Batches {
            size,
            total,
            counts: Mutex::new((0, 0)),
            changed: Condvar::new(),
        })
    }

    /// Wait, in a handler, until this request's batch goes.
    pub(crate) fn hold(&self) {
        let mut counts = self.counts.lock().unwrap();
        let ticket = counts.0;
        counts.0 += 1;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (arrived, released) = *counts;
            if released > ticket {
                return;
            }
            let now = Instant::now();
            if arrived - released >= self.size || arrived >= self.total || now >= deadline {
                counts.1 = arrived;
                self.changed.notify_all();
                return;
            }
            counts = self.changed.wait_timeout(counts, deadline - now).unwrap().0;
        }
    }
}

/// A Messages API reply as the Claude Code CLI asks for it (`stream: true`): server-sent events
/// of one message holding `text`, or a call of the tool `tool` with `input`.
pub(crate) fn anthropic_stream(
    model: &str,
    text: Option<&str>,
    tool: Option<(&str, &Value)>,
) -> Reply {
    let usage = serde_json::json!({
        "input_tokens": 21, "output_tokens": 1,
        "cache_read_input_tokens": 5, "cache_creation_input_tokens": 3
    });
    let mut events = vec![(
        "message_start",
        serde_json::json!({"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage}}),
    )];
    let stop = match (text, tool) {
        (_, Some((name, input))) => {
            events.push((
                "content_block_start",
                serde_json::json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "tool_use", "id": "toolu_1", "name": name, "input": {}}}),
            ));
            events.push((
                "content_block_delta",
                serde_json::json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
            ));
            "tool_use"
        }
        (text, None) => {
            events.push((
                "content_block_start",
                serde_json::json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}),
            ));
            events.push((
                "content_block_delta",
                serde_json::json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": text.unwrap_or_default()}}),
            ));
            "end_turn"
        }
    };
    events.push((
        "content_block_stop",
        serde_json::json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push((
        "message_delta",
        serde_json::json!({"type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": 9}}),
    ));
    events.push(("message_stop", serde_json::json!({"type": "message_stop"})));
    let body: String = events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    Reply {
        status: 200,
        headers: Vec::new(),
        content_type: "text/event-stream",
        body,
        delay: Duration::ZERO,
    }
}
