//! A run as an OpenTelemetry trace, built from its record and sent over OTLP/HTTP once the run
//! has ended (so exporting never slows a stage): a root span for the run, a span per stage that
//! started, under a `foreach` stage a span per item (its index and status), and under a
//! prompt stage (or its items) a client span per model call with the GenAI semantic
//! conventions' attributes (`gen_ai.operation.name`, `gen_ai.provider.name`,
//! `gen_ai.request.model`, `gen_ai.usage.*`); a rejected reply that was repaired is an event on
//! its stage. Encoded as protobuf (the OTLP default) or, with
//! `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`, as OTLP/JSON.
//!
//! Ids are derived from the run id (the trace) and the stage id (its span), so the trace of a
//! record is always the same. The record keeps each stage's and item's start to the millisecond
//! and each model call's latency but not its start: the calls are laid end to end from the
//! start of their stage or item.

use std::time::Duration;

use serde_json::{json, Value};

use super::record::{RunRecord, RunStatus, StageRecord, StageStatus};

/// What the `OTEL_*` variables say about where and how to send a trace.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Exporter {
    pub url: String,
    pub json: bool,
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    pub resource: Vec<(String, String)>,
}

/// How long an export may take when `OTEL_EXPORTER_OTLP_TIMEOUT` does not say (the
/// specification's 10 s would hold a hook that long on a dead collector).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

impl Exporter {
    /// The exporter the environment asks for (`var` reads a variable), or `None` when no
    /// endpoint is set.
    pub(crate) fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, String> {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let url = match (
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            set("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(url), _) => url.trim().to_string(),
            (None, Some(base)) => format!("{}/v1/traces", base.trim().trim_end_matches('/')),
            (None, None) => return Ok(None),
        };
        let protocol = set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .unwrap_or_else(|| "http/protobuf".into());
        let json = match protocol.trim() {
            "http/protobuf" => false,
            "http/json" => true,
            other => {
                return Err(format!(
                    "OTEL_EXPORTER_OTLP_PROTOCOL={other} is not supported: use http/protobuf or http/json"
                ))
            }
        };
        let timeout = match set("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
            .or_else(|| set("OTEL_EXPORTER_OTLP_TIMEOUT"))
        {
            None => DEFAULT_TIMEOUT,
            Some(ms) => Duration::from_millis(ms.trim().parse().map_err(|_| {
                format!("OTEL_EXPORTER_OTLP_TIMEOUT={ms} is not a number of milliseconds")
            })?),
        };
        let headers = pairs(
            &set("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
                .or_else(|| set("OTEL_EXPORTER_OTLP_HEADERS"))
                .unwrap_or_default(),
        );
        let mut resource = pairs(&set("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default());
        let service = set("OTEL_SERVICE_NAME")
            .or_else(|| {
                resource
                    .iter()
                    .find(|(k, _)| k == "service.name")
                    .map(|(_, v)| v.clone())
            })
            .unwrap_or_else(|| "stagegraph".into());
        resource.retain(|(k, _)| k != "service.name");
        resource.insert(0, ("service.name".into(), service));
        Ok(Some(Exporter {
            url,
            json,
            headers,
            timeout,
            resource,
        }))
    }

    /// Send the trace of `record`; an error says why it did not arrive.
    pub(crate) fn export(&self, record: &RunRecord) -> Result<usize, String> {
        // A collector that is down costs one refused connection, not the trace's building and
        // encoding (a few milliseconds a thousand stages) before it.
        self.reachable()
            .map_err(|error| format!("cannot send the trace to {}: {error}", self.url))?;
        let spans = spans(record);
        let (body, content_type) = if self.json {
            (
                serde_json::to_vec(&to_json(&spans, &self.resource)).unwrap_or_default(),
                "application/json",
            )
        } else {
            (
                to_protobuf(&spans, &self.resource),
                "application/x-protobuf",
            )
        };
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(self.timeout))
            .build();
        let agent: ureq::Agent = config.into();
        let mut request = agent.post(&self.url).header("Content-Type", content_type);
        for (name, value) in &self.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request
            .send(&body[..])
            .map_err(|error| format!("cannot send the trace to {}: {error}", self.url))?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            Ok(spans.len())
        } else {
            Err(format!("the collector at {} answered {status}", self.url))
        }
    }

    /// Whether something accepts a connection at the collector's host and port. Through a
    /// proxy (the `*_PROXY` variables the HTTP client honours) a direct connection tells
    /// nothing, so none is tried.
    fn reachable(&self) -> Result<(), String> {
        use std::net::{TcpStream, ToSocketAddrs};
        let proxied = ["ALL_PROXY", "HTTPS_PROXY", "HTTP_PROXY"]
            .iter()
            .any(|name| {
                std::env::var_os(name)
                    .or_else(|| std::env::var_os(name.to_lowercase()))
                    .is_some()
            });
        if proxied {
            return Ok(());
        }
        let url = url::Url::parse(&self.url).map_err(|error| error.to_string())?;
        let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
            return Err("the endpoint names no host".into());
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let mut last = String::from("the host has no address");
        for address in (host, port)
            .to_socket_addrs()
            .map_err(|error| error.to_string())?
        {
            match TcpStream::connect_timeout(&address, self.timeout) {
                Ok(_) => return Ok(()),
                Err(error) => last = error.to_string(),
            }
        }
        Err(last)
    }
}

/// `k=v,k=v` with percent-encoded values (the OTEL list format); malformed entries are dropped.
fn pairs(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let k = k.trim();
            (!k.is_empty()).then(|| {
                let v = url::form_urlencoded::parse(format!("v={}", v.trim()).as_bytes())
                    .next()
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default();
                (k.to_string(), v)
            })
        })
        .collect()
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Attr {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// A span event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SpanEvent {
    pub time_ns: u64,
    pub name: String,
    pub attributes: Vec<(String, Attr)>,
}

/// One span of a run's trace.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Span {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent: Option<[u8; 8]>,
    pub name: String,
    /// OTLP's SpanKind: 1 internal, 3 client.
    pub kind: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: Vec<(String, Attr)>,
    pub events: Vec<SpanEvent>,
    /// An error's message (status ERROR); `None` is status OK.
    pub error: Option<String>,
}

fn digest(parts: &[&str]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    hasher.finalize().into()
}

/// Whether this process's runs export their trace (an endpoint variable is set): their
/// children are then told where they stand in it.
pub(crate) fn exporting() -> bool {
    static EXPORTING: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *EXPORTING.get_or_init(|| {
        Exporter::from_env(|name| std::env::var(name).ok()).is_ok_and(|exporter| exporter.is_some())
    })
}

/// Whether model calls keep what they sent and got for the trace: only when a run is traced
/// and `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` is `true` (the GenAI semantic
/// conventions' opt-in; prompts carry what the workflow read).
pub(crate) fn captures_content() -> bool {
    static CAPTURES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CAPTURES.get_or_init(|| {
        exporting()
            && std::env::var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
                .is_ok_and(|value| value.trim().eq_ignore_ascii_case("true"))
    })
}

/// The GenAI conventions' message attributes of a call's captured content (secrets redacted).
fn content_attributes(content: &super::record::CallContent) -> Vec<(String, Attr)> {
    let text =
        |text: &str| json!([{ "type": "text", "content": crate::floor::secrets::redact(text) }]);
    let mut attrs = Vec::new();
    if let Some(system) = &content.system {
        attrs.push((
            "gen_ai.system_instructions".into(),
            s(text(system).to_string()),
        ));
    }
    let input: Vec<Value> = content
        .messages
        .iter()
        .map(|(role, message)| json!({ "role": role, "parts": text(message) }))
        .collect();
    attrs.push((
        "gen_ai.input.messages".into(),
        s(Value::Array(input).to_string()),
    ));
    let output = json!([{ "role": "assistant", "parts": text(&content.reply) }]);
    attrs.push(("gen_ai.output.messages".into(), s(output.to_string())));
    attrs
}

/// The W3C `traceparent` of stage `stage`'s span in run `run_id`'s trace (of its item
/// `item`'s, for a `foreach` item): a child that traces puts its own spans under it.
pub(crate) fn traceparent(run_id: &str, stage: &str, item: Option<usize>) -> String {
    let span = match item {
        Some(index) => span_id(&[run_id, stage, "item", &index.to_string()]),
        None => span_id(&[run_id, stage]),
    };
    format!(
        "00-{}-{}-01",
        hex::encode(trace_id(run_id)),
        hex::encode(span)
    )
}

/// The trace id of run `run_id`: the same for every export of its record.
pub(crate) fn trace_id(run_id: &str) -> [u8; 16] {
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest(&["stagegraph trace", run_id])[..16]);
    id
}

fn span_id(parts: &[&str]) -> [u8; 8] {
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest(parts)[..8]);
    if id == [0; 8] {
        id[7] = 1;
    }
    id
}

fn unix_ns(rfc3339: &str) -> Option<u64> {
    let at = chrono::DateTime::parse_from_rfc3339(rfc3339).ok()?;
    u64::try_from(at.timestamp_nanos_opt()?).ok()
}

const MS: u64 = 1_000_000;

fn s(text: impl Into<String>) -> Attr {
    Attr::Str(text.into())
}

fn int(n: u64) -> Attr {
    Attr::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// The provider and model of a stage's model identity (`anthropic:claude-x@url`,
/// `claude:sonnet`, `command:sh gate.sh`): the provider, and the model when the provider has
/// one.
fn provider_and_model(identity: Option<&str>) -> (String, Option<String>) {
    let Some((provider, rest)) = identity.and_then(|i| i.split_once(':')) else {
        return ("unknown".into(), None);
    };
    let model = match provider {
        "command" | "replay" => None,
        _ => rest
            .split(['@', ' '])
            .next()
            .map(str::to_string)
            .filter(|m| !m.is_empty()),
    };
    (provider.to_string(), model)
}

/// The spans of a run: the run's first, then each stage that started and its model calls.
pub(crate) fn spans(record: &RunRecord) -> Vec<Span> {
    let trace = trace_id(&record.run_id);
    let run_start = unix_ns(&record.started_at).unwrap_or(0);
    let run_end = run_start + record.duration_ms * MS;
    let root_id = span_id(&[&record.run_id]);
    let mut root = Span {
        trace_id: trace,
        span_id: root_id,
        parent: None,
        name: format!("run {}", record.workflow),
        kind: 1,
        start_ns: run_start,
        end_ns: run_end,
        attributes: vec![
            ("stagegraph.run_id".into(), s(&record.run_id)),
            ("stagegraph.workflow".into(), s(&record.workflow)),
            ("stagegraph.status".into(), s(record.status.as_str())),
            ("stagegraph.dry_run".into(), Attr::Bool(record.dry_run)),
        ],
        events: Vec::new(),
        error: match record.status {
            RunStatus::Failed | RunStatus::Interrupted => Some(
                record
                    .error
                    .clone()
                    .unwrap_or_else(|| record.status.as_str().into()),
            ),
            _ => None,
        },
    };
    if let Some(exit) = &record.exit {
        if let Some(stage) = &exit.stage {
            root.attributes
                .push(("stagegraph.exit.stage".into(), s(stage)));
        }
        root.attributes
            .push(("stagegraph.exit.message".into(), s(&exit.message)));
    }
    let usage = &record.usage;
    if usage.model_calls > 0 {
        root.attributes.extend([
            ("gen_ai.usage.input_tokens".into(), int(usage.input_tokens)),
            (
                "gen_ai.usage.output_tokens".into(),
                int(usage.output_tokens),
            ),
        ]);
    }
    let mut spans = vec![root];
    for (id, stage) in &record.stages {
        let Some(start) = stage.started_at.as_deref().and_then(unix_ns) else {
            continue;
        };
        stage_spans(record, id, stage, start, trace, root_id, &mut spans);
    }
    spans
}

fn stage_spans(
    record: &RunRecord,
    id: &str,
    stage: &StageRecord,
    start: u64,
    trace: [u8; 16],
    root: [u8; 8],
    spans: &mut Vec<Span>,
) {
    let stage_id = span_id(&[&record.run_id, id]);
    let exited = record.exit.as_ref().and_then(|e| e.stage.as_deref()) == Some(id);
    let mut attributes = vec![
        ("stagegraph.stage.id".into(), s(id)),
        ("stagegraph.stage.status".into(), s(stage.status.as_str())),
        (
            "stagegraph.cache".into(),
            s(match stage.status {
                StageStatus::Cached => "hit",
                _ if stage.fingerprint.is_some() => "miss",
                _ => "none",
            }),
        ),
    ];
    if let Some(fingerprint) = &stage.fingerprint {
        attributes.push(("stagegraph.fingerprint".into(), s(fingerprint.to_string())));
    }
    if let Some(from) = &stage.reused_from {
        attributes.push(("stagegraph.reused_from".into(), s(from.as_ref())));
    }
    if let Some(reason) = &stage.details().reason {
        let key = if exited {
            "stagegraph.exit.reason"
        } else {
            "stagegraph.skip.reason"
        };
        attributes.push((key.into(), s(reason)));
    }
    if let Some(items) = stage.details().items {
        attributes.push(("stagegraph.foreach.items".into(), int(items as u64)));
        attributes.push((
            "stagegraph.foreach.failed_items".into(),
            int(stage.details().failed_items as u64),
        ));
    }
    if stage.attempts > 1 {
        attributes.push(("stagegraph.attempts".into(), int(u64::from(stage.attempts))));
    }
    let identity = stage.fingerprint_parts.as_ref().and_then(|p| p.model());
    let (provider, model) = provider_and_model(identity);
    let chat = Chat {
        record,
        stage: id,
        provider: &provider,
        model: model.as_deref(),
        trace,
    };
    let mut events = Vec::new();
    let mut children = Vec::new();
    if stage.details().item_runs.is_empty() {
        children = chat.spans(
            &stage.details().model_calls,
            0,
            start,
            stage_id,
            &mut events,
        );
    } else {
        let run_start = unix_ns(&record.started_at).unwrap_or(start);
        let mut first: usize = 0;
        for item in &stage.details().item_runs {
            let index = item.index.to_string();
            let item_id = span_id(&[&record.run_id, id, "item", &index]);
            let item_start = run_start + item.start_ms * MS;
            let count = usize::try_from(item.model_calls).unwrap_or(usize::MAX);
            let calls = stage
                .details()
                .model_calls
                .get(
                    first
                        ..first
                            .saturating_add(count)
                            .min(stage.details().model_calls.len()),
                )
                .unwrap_or_default();
            let mut item_events = Vec::new();
            let calls = chat.spans(calls, first, item_start, item_id, &mut item_events);
            first += count;
            let mut attributes = vec![
                ("stagegraph.stage.id".into(), s(id)),
                ("stagegraph.item.index".into(), int(item.index as u64)),
                ("stagegraph.item.status".into(), s(item.status.as_str())),
            ];
            if item.attempts > 1 {
                attributes.push(("stagegraph.attempts".into(), int(u64::from(item.attempts))));
            }
            children.push(Span {
                trace_id: trace,
                span_id: item_id,
                parent: Some(stage_id),
                name: format!("item {id}[{index}]"),
                kind: 1,
                start_ns: item_start,
                end_ns: item_start + item.duration_ms * MS,
                attributes,
                events: item_events,
                error: (item.status == StageStatus::Failed).then(|| "failed".into()),
            });
            children.extend(calls);
        }
    }
    spans.push(Span {
        trace_id: trace,
        span_id: stage_id,
        parent: Some(root),
        name: format!("stage {id}"),
        kind: 1,
        start_ns: start,
        end_ns: start + stage.duration_ms * MS,
        attributes,
        events,
        error: (stage.status == StageStatus::Failed).then(|| {
            stage
                .details()
                .error
                .clone()
                .unwrap_or_else(|| "failed".into())
        }),
    });
    spans.extend(children);
}

/// What the client spans of one stage's model calls share.
struct Chat<'a> {
    record: &'a RunRecord,
    stage: &'a str,
    provider: &'a str,
    /// The model the stage's identity names, if it names one.
    model: Option<&'a str>,
    trace: [u8; 16],
}

impl Chat<'_> {
    /// A client span per call, laid end to end from `start` under `parent`, numbered from
    /// `first` among the stage's calls; a rejected reply is a `repair` event in `events`.
    fn spans(
        &self,
        calls: &[super::record::ModelCall],
        first: usize,
        start: u64,
        parent: [u8; 8],
        events: &mut Vec<SpanEvent>,
    ) -> Vec<Span> {
        let mut spans = Vec::with_capacity(calls.len());
        let mut at = start;
        for (n, call) in calls.iter().enumerate() {
            let end = at + call.latency_ms * MS;
            let request_model = self.model.unwrap_or(&call.model).to_string();
            let mut attrs = vec![
                ("gen_ai.operation.name".into(), s("chat")),
                ("gen_ai.provider.name".into(), s(self.provider)),
                ("gen_ai.request.model".into(), s(&request_model)),
                ("stagegraph.model.alias".into(), s(&call.model)),
                ("stagegraph.attempt".into(), int(u64::from(call.attempt))),
            ];
            if let Some(usage) = call.usage {
                attrs.extend([
                    ("gen_ai.usage.input_tokens".into(), int(usage.input_tokens)),
                    (
                        "gen_ai.usage.output_tokens".into(),
                        int(usage.output_tokens),
                    ),
                    (
                        "gen_ai.usage.cache_read.input_tokens".into(),
                        int(usage.cache_read_tokens),
                    ),
                    (
                        "gen_ai.usage.cache_creation.input_tokens".into(),
                        int(usage.cache_write_tokens),
                    ),
                ]);
            }
            if let Some(cost) = call.cost_usd {
                attrs.push(("stagegraph.cost_usd".into(), Attr::Float(cost)));
            }
            if call.retries > 0 {
                attrs.push(("stagegraph.retries".into(), int(u64::from(call.retries))));
                attrs.push(("stagegraph.waited_ms".into(), int(call.waited_ms)));
            }
            if call.throttled > 0 {
                attrs.push((
                    "stagegraph.throttled".into(),
                    int(u64::from(call.throttled)),
                ));
            }
            if call.replayed {
                attrs.push(("stagegraph.replayed".into(), Attr::Bool(true)));
            }
            if let Some(content) = &call.content {
                attrs.extend(content_attributes(content));
            }
            if let Some(problems) = &call.rejected {
                events.push(SpanEvent {
                    time_ns: end,
                    name: "repair".into(),
                    attributes: vec![
                        ("stagegraph.attempt".into(), int(u64::from(call.attempt))),
                        ("stagegraph.problems".into(), s(problems)),
                    ],
                });
            }
            spans.push(Span {
                trace_id: self.trace,
                span_id: span_id(&[&self.record.run_id, self.stage, &(first + n).to_string()]),
                parent: Some(parent),
                name: format!("chat {request_model}"),
                kind: 3,
                start_ns: at,
                end_ns: end,
                attributes: attrs,
                events: Vec::new(),
                error: call.rejected.clone(),
            });
            at = end;
        }
        spans
    }
}

fn attr_json(value: &Attr) -> Value {
    match value {
        Attr::Str(text) => json!({ "stringValue": text }),
        // OTLP/JSON writes 64-bit integers as strings.
        Attr::Int(n) => json!({ "intValue": n.to_string() }),
        Attr::Float(x) => json!({ "doubleValue": x }),
        Attr::Bool(b) => json!({ "boolValue": b }),
    }
}

fn attrs_json(attributes: &[(String, Attr)]) -> Value {
    attributes
        .iter()
        .map(|(key, value)| json!({ "key": key, "value": attr_json(value) }))
        .collect()
}

/// An ExportTraceServiceRequest as OTLP/JSON (ids in hex, times as decimal strings).
pub(crate) fn to_json(spans: &[Span], resource: &[(String, String)]) -> Value {
    let resource: Vec<(String, Attr)> = resource.iter().map(|(k, v)| (k.clone(), s(v))).collect();
    let spans: Vec<Value> = spans
        .iter()
        .map(|span| {
            let mut doc = json!({
                "traceId": hex::encode(span.trace_id),
                "spanId": hex::encode(span.span_id),
                "name": span.name,
                "kind": span.kind,
                "startTimeUnixNano": span.start_ns.to_string(),
                "endTimeUnixNano": span.end_ns.to_string(),
                "attributes": attrs_json(&span.attributes),
                "status": match &span.error {
                    Some(message) => json!({ "code": 2, "message": message }),
                    None => json!({ "code": 1 }),
                },
            });
            if let Some(parent) = span.parent {
                doc["parentSpanId"] = hex::encode(parent).into();
            }
            if !span.events.is_empty() {
                doc["events"] = span
                    .events
                    .iter()
                    .map(|e| {
                        json!({
                            "timeUnixNano": e.time_ns.to_string(),
                            "name": e.name,
                            "attributes": attrs_json(&e.attributes),
                        })
                    })
                    .collect();
            }
            doc
        })
        .collect();
    json!({
        "resourceSpans": [{
            "resource": { "attributes": attrs_json(&resource) },
            "scopeSpans": [{
                "scope": { "name": "stagegraph", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans,
            }],
        }],
    })
}

/// Protobuf's wire format, as much of it as OTLP's trace messages use.
mod wire {
    pub(super) fn varint(out: &mut Vec<u8>, mut n: u64) {
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }

    fn key(out: &mut Vec<u8>, field: u32, wire_type: u8) {
        varint(out, (u64::from(field) << 3) | u64::from(wire_type));
    }

    pub(super) fn uint(out: &mut Vec<u8>, field: u32, n: u64) {
        key(out, field, 0);
        varint(out, n);
    }

    pub(super) fn fixed64(out: &mut Vec<u8>, field: u32, n: u64) {
        key(out, field, 1);
        out.extend_from_slice(&n.to_le_bytes());
    }

    pub(super) fn double(out: &mut Vec<u8>, field: u32, x: f64) {
        key(out, field, 1);
        out.extend_from_slice(&x.to_le_bytes());
    }

    pub(super) fn bytes(out: &mut Vec<u8>, field: u32, data: &[u8]) {
        key(out, field, 2);
        varint(out, data.len() as u64);
        out.extend_from_slice(data);
    }

    /// A sub-message, written by `fill`.
    pub(super) fn message(out: &mut Vec<u8>, field: u32, fill: impl FnOnce(&mut Vec<u8>)) {
        let mut inner = Vec::new();
        fill(&mut inner);
        bytes(out, field, &inner);
    }
}

fn key_value(out: &mut Vec<u8>, field: u32, key: &str, value: &Attr) {
    // KeyValue { string key = 1; AnyValue value = 2; }
    wire::message(out, field, |kv| {
        wire::bytes(kv, 1, key.as_bytes());
        // AnyValue { string_value = 1; bool_value = 2; int_value = 3; double_value = 4; }
        wire::message(kv, 2, |any| match value {
            Attr::Str(text) => wire::bytes(any, 1, text.as_bytes()),
            Attr::Bool(b) => wire::uint(any, 2, u64::from(*b)),
            Attr::Int(n) => wire::uint(any, 3, *n as u64),
            Attr::Float(x) => wire::double(any, 4, *x),
        });
    });
}

/// An ExportTraceServiceRequest as protobuf.
pub(crate) fn to_protobuf(spans: &[Span], resource: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    // ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
    wire::message(&mut out, 1, |rs| {
        // ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; }
        wire::message(rs, 1, |r| {
            for (k, v) in resource {
                key_value(r, 1, k, &s(v));
            }
        });
        wire::message(rs, 2, |ss| {
            // ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; }
            wire::message(ss, 1, |scope| {
                wire::bytes(scope, 1, b"stagegraph");
                wire::bytes(scope, 2, env!("CARGO_PKG_VERSION").as_bytes());
            });
            for span in spans {
                wire::message(ss, 2, |out| {
                    wire::bytes(out, 1, &span.trace_id);
                    wire::bytes(out, 2, &span.span_id);
                    if let Some(parent) = span.parent {
                        wire::bytes(out, 4, &parent);
                    }
                    wire::bytes(out, 5, span.name.as_bytes());
                    wire::uint(out, 6, u64::from(span.kind));
                    wire::fixed64(out, 7, span.start_ns);
                    wire::fixed64(out, 8, span.end_ns);
                    for (k, v) in &span.attributes {
                        key_value(out, 9, k, v);
                    }
                    for event in &span.events {
                        // Event { fixed64 time_unix_nano = 1; string name = 2; attributes = 3; }
                        wire::message(out, 11, |e| {
                            wire::fixed64(e, 1, event.time_ns);
                            wire::bytes(e, 2, event.name.as_bytes());
                            for (k, v) in &event.attributes {
                                key_value(e, 3, k, v);
                            }
                        });
                    }
                    // Status { string message = 2; StatusCode code = 3; }
                    wire::message(out, 15, |st| match &span.error {
                        Some(message) => {
                            wire::bytes(st, 2, message.as_bytes());
                            wire::uint(st, 3, 2);
                        }
                        None => wire::uint(st, 3, 1),
                    });
                });
            }
        });
    });
    out
}

#[cfg(test)]
mod tests {
    use super::{pairs, provider_and_model, wire, Exporter};

    #[test]
    fn the_environment_names_the_endpoint_protocol_and_resource() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_string())
            }
        };
        assert_eq!(Exporter::from_env(env(&[])), Ok(None));
        let e = Exporter::from_env(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_SERVICE_NAME", "hooks"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "team=core,service.name=x,note=a%20b",
            ),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(e.url, "http://127.0.0.1:4318/v1/traces");
        assert!(e.json);
        let resource: Vec<(&str, &str)> = e
            .resource
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            resource,
            [("service.name", "hooks"), ("team", "core"), ("note", "a b")]
        );
        let e = Exporter::from_env(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b/traces"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(e.url, "http://b/traces");
        assert!(!e.json, "protobuf is the default");
        let err = Exporter::from_env(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]));
        assert!(err.unwrap_err().contains("grpc"));
        assert_eq!(pairs("a=1,,=2,b"), [("a".to_string(), "1".to_string())]);
    }

    #[test]
    fn the_model_identity_gives_the_provider_and_model() {
        let pm = |i| provider_and_model(Some(i));
        assert_eq!(
            pm("anthropic:claude-sonnet-4@https://api.anthropic.com"),
            ("anthropic".into(), Some("claude-sonnet-4".into()))
        );
        assert_eq!(
            pm("claude:sonnet tools=Read"),
            ("claude".into(), Some("sonnet".into()))
        );
        assert_eq!(pm("command:sh gate.sh"), ("command".into(), None));
    }

    #[test]
    fn varints_are_little_endian_groups_of_seven_bits() {
        let mut out = Vec::new();
        wire::varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
    }
}
