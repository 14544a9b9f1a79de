//! OpenTelemetry export: a run with `OTEL_EXPORTER_OTLP_ENDPOINT` set sends one trace to a
//! loopback OTLP/HTTP receiver started here, whose spans match the run record (one per stage
//! that started and per model call, statuses, token counts, the repair as an event). The
//! protobuf body, and the JSON one too, are decoded by the official `opentelemetry-proto`
//! Python package when `STAGEGRAPH_TEST_OTEL_PYTHON` names a Python that has it (`.ci/run`
//! makes a virtualenv); a dead collector costs one warning and changes nothing else.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::loopback::{Reply, Server};
use crate::support::{poll_until, Test};

/// One POST the receiver got: its path, content type and body.
type Received = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

/// An OTLP/HTTP receiver on loopback: it keeps every request's body and answers 200.
fn receiver() -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let received: Received = Arc::default();
    let kept = Arc::clone(&received);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            // A connection that sends nothing (the exporter's reachability probe) is no request.
            let mut first = String::new();
            if reader.read_line(&mut first).unwrap_or(0) == 0 {
                continue;
            }
            let path = first.split_whitespace().nth(1).unwrap_or("").to_string();
            let (mut length, mut content_type) = (0usize, String::new());
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    match name.trim().to_ascii_lowercase().as_str() {
                        "content-length" => length = value.trim().parse().unwrap_or(0),
                        "content-type" => content_type = value.trim().to_string(),
                        _ => {}
                    }
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            kept.lock().unwrap().push((path, content_type, body));
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (url, received)
}

const WORKFLOW: &str = r#"
[stages.prep]
command = ["echo", "ready"]

[stages.ask]
after = ["prep"]
prompt = { inline = "Name one concept about retries." }
model = "m"
repair = 1
output = { format = "json", schema = "answer.schema.json" }

[stages.never]
if = "false"
command = ["echo", "no"]

[stages.each]
after = ["prep"]
foreach = '["x", "y", "z"]'
command = ["echo", "{{ item }}"]

[stages.askeach]
after = ["ask"]
foreach = '["p", "q"]'
prompt = { inline = "Name one concept about {{ item }}." }
model = "m"
output = { format = "json", schema = "answer.schema.json" }
"#;

const SCHEMA: &str =
    r#"{"type": "object", "required": ["concept"], "properties": {"concept": {"type": "string"}}}"#;

/// A model that answers wrongly first (repaired), then rightly, with token counts.
pub(crate) fn model() -> Server {
    Server::start(|_, n| {
        let (input, usage) = if n == 0 {
            (
                json!({"wrong": 1}),
                json!({"input_tokens": 100, "output_tokens": 20,
                       "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200}),
            )
        } else {
            (
                json!({"concept": "jitter"}),
                json!({"input_tokens": 150, "output_tokens": 10}),
            )
        };
        Reply::json(
            200,
            &json!({
                "id": format!("msg_{n}"), "type": "message", "role": "assistant",
                "model": "claude-test",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "reply", "input": input}],
                "stop_reason": "tool_use", "usage": usage
            }),
        )
    })
}

fn project(model_url: &str) -> Test {
    let t = Test::new();
    t.write("lib/workflows/traced.toml", WORKFLOW);
    t.write("lib/schemas/answer.schema.json", SCHEMA);
    t.write(
        "stagegraph.toml",
        &format!(
            "[models.m]\nprovider = \"anthropic\"\nmodel = \"claude-test\"\nbase_url = \"{model_url}\"\napi_key_env = \"TEST_ANTHROPIC_KEY\"\n"
        ),
    );
    t
}

/// A span reduced to what the test compares: name, ids, kind, attributes, events, status.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    span_id: String,
    parent: String,
    kind: u64,
    attributes: BTreeMap<String, Value>,
    events: Vec<String>,
    status: u64,
    trace_id: String,
}

/// The spans and resource of a decoded export, from the normalized JSON the Python decoder
/// (or `from_otlp_json`) gives.
fn spans_of(doc: &Value) -> (BTreeMap<String, Value>, Vec<Span>) {
    let attrs = |list: &Value| -> BTreeMap<String, Value> {
        list.as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    };
    let spans = doc["spans"]
        .as_array()
        .expect("spans")
        .iter()
        .map(|s| Span {
            name: s["name"].as_str().unwrap_or("").into(),
            span_id: s["span_id"].as_str().unwrap_or("").into(),
            parent: s["parent"].as_str().unwrap_or("").into(),
            kind: s["kind"].as_u64().unwrap_or(0),
            attributes: attrs(&s["attributes"]),
            events: s["events"]
                .as_array()
                .map(|e| {
                    e.iter()
                        .filter_map(|n| n.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
            status: s["status"].as_u64().unwrap_or(0),
            trace_id: s["trace_id"].as_str().unwrap_or("").into(),
        })
        .collect();
    (attrs(&doc["resource"]), spans)
}

/// OTLP/JSON as the engine sends it, normalized like the Python decoder's output.
fn from_otlp_json(body: &[u8]) -> Value {
    let doc: Value = serde_json::from_slice(body).expect("OTLP/JSON");
    let value = |v: &Value| {
        v.get("stringValue")
            .cloned()
            .or_else(|| {
                v.get("intValue")
                    .and_then(Value::as_str)
                    .and_then(|n| n.parse::<i64>().ok())
                    .map(Value::from)
            })
            .or_else(|| v.get("boolValue").cloned())
            .or_else(|| v.get("doubleValue").cloned())
            .unwrap_or(Value::Null)
    };
    let attrs = |list: &Value| -> Value {
        list.as_array()
            .into_iter()
            .flatten()
            .map(|kv| {
                (
                    kv["key"].as_str().unwrap_or("").to_string(),
                    value(&kv["value"]),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let rs = &doc["resourceSpans"][0];
    let spans: Vec<Value> = rs["scopeSpans"][0]["spans"]
        .as_array()
        .expect("spans")
        .iter()
        .map(|s| {
            json!({
                "name": s["name"], "trace_id": s["traceId"], "span_id": s["spanId"],
                "parent": s.get("parentSpanId").cloned().unwrap_or(json!("")),
                "kind": s["kind"], "attributes": attrs(&s["attributes"]),
                "events": s["events"].as_array().map(|e| e.iter().map(|e| e["name"].clone()).collect::<Vec<_>>()).unwrap_or_default(),
                "status": s["status"]["code"],
            })
        })
        .collect();
    json!({ "resource": attrs(&rs["resource"]["attributes"]), "spans": spans })
}

/// Decode a body with `opentelemetry-proto` (protobuf, or OTLP/JSON through the protobuf JSON
/// mapping, ids turned from hex to base64 as that mapping wants), normalized; `None` without
/// such a Python.
fn decode_with_python(t: &Test, body: &[u8], json_body: bool) -> Option<Value> {
    let python = std::env::var_os("STAGEGRAPH_TEST_OTEL_PYTHON")?;
    t.write("body.bin", "");
    std::fs::write(t.path("body.bin"), body).expect("write body");
    t.write("decode.py", DECODE);
    let out = std::process::Command::new(python)
        .arg(t.path("decode.py"))
        .arg(t.path("body.bin"))
        .arg(if json_body { "json" } else { "protobuf" })
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "opentelemetry-proto could not decode the export: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("decoder JSON"))
}

const DECODE: &str = r#"
import base64, json, sys
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

body = open(sys.argv[1], "rb").read()
request = ExportTraceServiceRequest()
if sys.argv[2] == "json":
    doc = json.loads(body)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    json_format.ParseDict(doc, request)
else:
    request.ParseFromString(body)

def value(any):
    kind = any.WhichOneof("value")
    return getattr(any, kind) if kind else None

def attrs(list_):
    return {kv.key: value(kv.value) for kv in list_}

rs = request.resource_spans
assert len(rs) == 1, len(rs)
spans = [s for ss in rs[0].scope_spans for s in ss.spans]
print(json.dumps({
    "resource": attrs(rs[0].resource.attributes),
    "spans": [{
        "name": s.name, "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
        "parent": s.parent_span_id.hex(), "kind": s.kind, "attributes": attrs(s.attributes),
        "events": [e.name for e in s.events], "status": s.status.code,
        "start": s.start_time_unix_nano, "end": s.end_time_unix_nano,
    } for s in spans],
}))
"#;

/// The spans say what the record says.
fn assert_matches_record(t: &Test, resource: &BTreeMap<String, Value>, spans: &[Span]) {
    let record = t.last_run();
    assert_eq!(resource["service.name"], "nightly-hooks");
    assert_eq!(resource["team"], "docs");
    let started: Vec<&str> = record["stages"]
        .as_object()
        .expect("stages")
        .iter()
        .filter(|(_, s)| s.get("started_at").is_some())
        .map(|(id, _)| id.as_str())
        .collect();
    let calls_of = |id: &str| {
        record["stages"][id]["model_calls"]
            .as_array()
            .map_or(0, Vec::len)
    };
    assert_eq!(calls_of("ask"), 2, "the reply was repaired once");
    assert_eq!(calls_of("askeach"), 2, "one call per item");
    let calls: usize = started.iter().map(|id| calls_of(id)).sum();
    let item_runs = |id: &str| {
        record["stages"][id]["item_runs"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(item_runs("each").len(), 3, "{record:#}");
    assert_eq!(item_runs("askeach").len(), 2, "{record:#}");
    let items: usize = started.iter().map(|id| item_runs(id).len()).sum();
    assert_eq!(spans.len(), 1 + started.len() + items + calls, "{spans:#?}");

    let root = &spans[0];
    assert_eq!(root.name, "run traced");
    assert!(root.parent.is_empty());
    assert_eq!(root.attributes["stagegraph.run_id"], record["run_id"]);
    assert_eq!(root.attributes["stagegraph.status"], "completed");
    assert!(spans
        .iter()
        .all(|s| s.trace_id == root.trace_id && s.trace_id.len() == 32));
    for id in &started {
        let span = spans
            .iter()
            .find(|s| s.name == format!("stage {id}"))
            .unwrap_or_else(|| panic!("no span for stage {id}"));
        assert_eq!(span.parent, root.span_id);
        assert_eq!(
            span.attributes["stagegraph.stage.status"],
            record["stages"][id]["status"]
        );
    }
    // One span per foreach item, under its stage, with its index and status; a foreach
    // stage's model calls are under their items.
    for id in ["each", "askeach"] {
        let stage = spans
            .iter()
            .find(|s| s.name == format!("stage {id}"))
            .expect("the foreach stage");
        let mut under: Vec<&Span> = spans.iter().filter(|s| s.parent == stage.span_id).collect();
        under.sort_by_key(|s| s.attributes["stagegraph.item.index"].as_i64());
        let records = item_runs(id);
        assert_eq!(under.len(), records.len(), "{id}: {under:#?}");
        for (n, (span, item)) in under.iter().zip(&records).enumerate() {
            assert_eq!(span.name, format!("item {id}[{n}]"));
            assert_eq!(span.attributes["stagegraph.item.index"], item["index"]);
            assert_eq!(span.attributes["stagegraph.item.status"], item["status"]);
            assert_eq!(span.attributes["stagegraph.item.status"], "succeeded");
            let chats = spans.iter().filter(|s| s.parent == span.span_id).count();
            assert_eq!(
                chats as u64,
                item.get("model_calls").and_then(Value::as_u64).unwrap_or(0),
                "{id}[{n}]"
            );
        }
    }
    let ask = spans.iter().find(|s| s.name == "stage ask").expect("ask");
    assert_eq!(ask.events, ["repair"], "the rejected reply is an event");
    let chats: Vec<&Span> = spans.iter().filter(|s| s.kind == 3).collect();
    assert_eq!(chats.len(), calls);
    let tokens = |key: &str| -> i64 {
        chats
            .iter()
            .map(|s| s.attributes.get(key).and_then(Value::as_i64).unwrap_or(0))
            .sum()
    };
    let usage = &record["usage"];
    assert_eq!(
        tokens("gen_ai.usage.input_tokens"),
        usage["input_tokens"].as_i64().unwrap()
    );
    assert_eq!(
        tokens("gen_ai.usage.output_tokens"),
        usage["output_tokens"].as_i64().unwrap()
    );
    // 100 + 150 for `ask`, 150 for each item of `askeach`.
    assert_eq!(tokens("gen_ai.usage.input_tokens"), 550);
    assert_eq!(tokens("gen_ai.usage.cache_read.input_tokens"), 1000);
    assert_eq!(tokens("gen_ai.usage.cache_creation.input_tokens"), 200);
    for chat in &chats {
        assert_eq!(chat.kind, 3, "a model call is a client span");
        assert_eq!(chat.attributes["gen_ai.operation.name"], "chat");
        assert_eq!(chat.attributes["gen_ai.provider.name"], "anthropic");
        assert_eq!(chat.attributes["gen_ai.request.model"], "claude-test");
    }
    // The rejected call is an error; the run and the accepted calls are not.
    let ask_chats: Vec<&&Span> = chats.iter().filter(|s| s.parent == ask.span_id).collect();
    assert_eq!(ask_chats.len(), 2);
    assert_eq!(ask_chats[0].status, 2);
    assert_eq!(ask_chats[1].status, 1);
    assert_eq!(chats.iter().filter(|s| s.status == 2).count(), 1);
    assert_eq!(root.status, 1);
}

fn traced_run(protocol: Option<&str>) -> (Test, Vec<(String, String, Vec<u8>)>) {
    traced_run_with(protocol, &[])
}

fn traced_run_with(
    protocol: Option<&str>,
    env: &[(&str, &str)],
) -> (Test, Vec<(String, String, Vec<u8>)>) {
    let api = model();
    let (collector, received) = receiver();
    let t = project(&api.url);
    let mut run = t
        .command(["-L", "lib", "run", "traced", "-q"])
        .env("TEST_ANTHROPIC_KEY", "sk-test")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector)
        .env("OTEL_SERVICE_NAME", "nightly-hooks")
        .env("OTEL_RESOURCE_ATTRIBUTES", "team=docs");
    if let Some(protocol) = protocol {
        run = run.env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
    }
    for (name, value) in env {
        run = run.env(name, value);
    }
    let out = run.output();
    out.code(0);
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
    // The export is done before the process exits; the receiver's thread may still be storing it.
    poll_until(Duration::from_secs(5), || {
        !received.lock().unwrap().is_empty()
    });
    let received = received.lock().unwrap().clone();
    (t, received)
}

#[test]
fn a_run_exports_one_trace_as_otlp_json() {
    let (t, received) = traced_run(Some("http/json"));
    assert_eq!(received.len(), 1, "one export per run");
    let (path, content_type, body) = &received[0];
    assert_eq!(path, "/v1/traces");
    assert_eq!(content_type, "application/json");
    let (resource, spans) = spans_of(&from_otlp_json(body));
    assert_matches_record(&t, &resource, &spans);
    match decode_with_python(&t, body, true) {
        Some(decoded) => {
            let (resource, spans) = spans_of(&decoded);
            assert_matches_record(&t, &resource, &spans);
        }
        None => crate::support::skip(
            "decoding the export: STAGEGRAPH_TEST_OTEL_PYTHON is not set (a Python with opentelemetry-proto)",
        ),
    }
    // `runs trace` writes the same spans to a file.
    t.run(["-L", "lib", "runs", "trace", "last", "-o", "trace.json"])
        .code(0);
    let (_, from_file) = spans_of(&from_otlp_json(t.read("trace.json").as_bytes()));
    let names = |s: &[Span]| s.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&from_file), names(&spans));
}

#[test]
fn a_run_exports_protobuf_by_default_which_opentelemetry_proto_decodes() {
    let (t, received) = traced_run(None);
    assert_eq!(received.len(), 1, "one export per run");
    let (path, content_type, body) = &received[0];
    assert_eq!(path, "/v1/traces");
    assert_eq!(content_type, "application/x-protobuf");
    let Some(decoded) = decode_with_python(&t, body, false) else {
        crate::support::skip(
            "STAGEGRAPH_TEST_OTEL_PYTHON is not set (a Python with opentelemetry-proto)",
        );
        return;
    };
    let (resource, spans) = spans_of(&decoded);
    assert_matches_record(&t, &resource, &spans);
}

#[test]
fn a_dead_collector_is_one_warning_and_the_run_is_unchanged() {
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}", listener.local_addr().expect("address"))
    };
    let t = Test::new();
    t.write("w.toml", "[stages.a]\ncommand = [\"echo\", \"hi\"]\n");
    let out = t
        .command(["run", "w.toml", "-q"])
        .env(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            &format!("{closed}/v1/traces"),
        )
        .output();
    out.code(0);
    let warnings: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", out.stderr);
    assert!(
        warnings[0].contains("the run's trace was not exported"),
        "{}",
        out.stderr
    );
    assert_eq!(t.last_run()["status"], "completed");
}

/// A child of a traced run reads where it stands in the trace: `TRACEPARENT` names the run's
/// trace and its stage's span (its item's, in a `foreach`), as the export then holds them; the
/// fingerprint does not cover it, and an untraced run sets none.
#[test]
fn children_of_a_traced_run_get_the_traceparent_of_their_stage() {
    let (collector, received) = receiver();
    let t = Test::new();
    t.write(
        "lib/workflows/parents.toml",
        r#"
[stages.show]
shell = 'printf "%s" "$TRACEPARENT"'
cache = true

[stages.each]
foreach = '[0, 1]'
shell = 'printf "%s" "$TRACEPARENT"'

[stages.ask]
prompt = { inline = "where am I?" }
model = "echo"

[outputs]
show = "{{ stages.show.output }}"
each = "{{ stages.each.output | tojson }}"
ask = "{{ stages.ask.output }}"
"#,
    );
    t.write(
        "stagegraph.toml",
        "[models.echo]\nprovider = \"command\"\ncommand = [\"sh\", \"-c\", \"printf %s \\\"$TRACEPARENT\\\"\"]\n",
    );
    let out = t
        .command(["-L", "lib", "run", "parents", "-q", "--format", "json"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .output();
    out.code(0);
    poll_until(Duration::from_secs(5), || {
        !received.lock().unwrap().is_empty()
    });
    let body = received.lock().unwrap()[0].2.clone();
    let (_, spans) = spans_of(&from_otlp_json(&body));
    let parent_of = |name: &str| {
        let span = spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("a span named {name:?} in {spans:?}"));
        format!("00-{}-{}-01", span.trace_id, span.span_id)
    };
    let record: Value = serde_json::from_str(&out.stdout).expect("run JSON");
    let output = |record: &Value, name: &str| record["outputs"][name].clone();
    let shown = parent_of("stage show");
    assert_eq!(output(&record, "show"), json!(shown), "{record:#}");
    let items = json!([parent_of("item each[0]"), parent_of("item each[1]")]);
    assert_eq!(output(&record, "each"), json!(items.to_string()));
    assert_eq!(output(&record, "ask"), json!(parent_of("stage ask")));

    // Untraced, a child sees none, and the cached stage is reused with what it printed then
    // (TRACEPARENT is no part of its fingerprint).
    let out = t
        .command(["-L", "lib", "run", "parents", "-q", "--format", "json"])
        .output();
    out.code(0);
    let record: Value = serde_json::from_str(&out.stdout).expect("run JSON");
    assert_eq!(output(&record, "show"), json!(shown), "{record:#}");
    assert_eq!(output(&record, "each"), json!(r#"["",""]"#));
    assert_eq!(output(&record, "ask"), json!(""));
}

/// Message content is the GenAI conventions' opt-in: without it no model-call span carries a
/// prompt or a reply; with it each carries the system prompt, the conversation sent (a repair
/// includes the rejected reply and the problems told) and the reply.
#[test]
fn model_call_spans_carry_their_messages_only_when_asked() {
    let (_, received) = traced_run(Some("http/json"));
    let (_, spans) = spans_of(&from_otlp_json(&received[0].2));
    let chats: Vec<&Span> = spans.iter().filter(|s| s.kind == 3).collect();
    assert_eq!(chats.len(), 4);
    for chat in &chats {
        assert!(
            !chat.attributes.contains_key("gen_ai.input.messages")
                && !chat.attributes.contains_key("gen_ai.output.messages"),
            "{chat:?}"
        );
    }

    let (_, received) = traced_run_with(
        Some("http/json"),
        &[("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")],
    );
    let (_, spans) = spans_of(&from_otlp_json(&received[0].2));
    let chats: Vec<&Span> = spans.iter().filter(|s| s.kind == 3).collect();
    let messages = |chat: &Span, key: &str| -> Value {
        serde_json::from_str(chat.attributes[key].as_str().expect("a string")).expect("JSON")
    };
    let ask = spans
        .iter()
        .find(|s| s.name == "stage ask")
        .expect("stage ask");
    let asked: Vec<&&Span> = chats.iter().filter(|c| c.parent == ask.span_id).collect();
    assert_eq!(asked.len(), 2, "the rejected call and its repair");
    let first = messages(asked[0], "gen_ai.input.messages");
    assert_eq!(first[0]["role"], "user");
    assert_eq!(
        first[0]["parts"][0]["content"],
        "Name one concept about retries."
    );
    assert_eq!(first.as_array().map(Vec::len), Some(1));
    let reply = messages(asked[0], "gen_ai.output.messages");
    assert_eq!(reply[0]["role"], "assistant");
    assert!(
        reply[0]["parts"][0]["content"]
            .as_str()
            .is_some_and(|text| text.contains("wrong")),
        "{reply}"
    );
    // The repair sends the rejected reply back with what was wrong with it.
    let second = messages(asked[1], "gen_ai.input.messages");
    let roles: Vec<&str> = second
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert!(
        messages(asked[1], "gen_ai.output.messages")[0]["parts"][0]["content"]
            .as_str()
            .is_some_and(|text| text.contains("jitter"))
    );
}
