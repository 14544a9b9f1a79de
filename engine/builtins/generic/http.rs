//! Built-ins: http.head, http.get.
//!
//! Both speak only http and https, never follow redirects (a 3xx comes back with its
//! `location`, so a workflow sees where a link moved), and report 4xx and 5xx as results: the
//! `status` tells. Only a request that got no answer is an error (refused connection, unknown
//! host, timeout), as is a body larger than `max_bytes`. Neither writes anything.

use std::time::Duration;

use schemars::JsonSchema;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Map, Value};

use crate::builtins::args;
use crate::builtins::paths::sha256_hex;
use crate::builtins::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult, Cancel};
use crate::template::functions::parse_duration;

const DEFAULT_TIMEOUT: &str = "10s";
const DEFAULT_MAX_BYTES: u64 = 10 * 1024 * 1024;

/// The shape `parse_duration` accepts, so that `check` catches a bad `timeout` statically.
const DURATION_PATTERN: &str = "^(0|([0-9]+(w|d|h|m|s|ms))+)$";

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![
        Builtin {
            name: "http.get",
            description: "GET a url (redirects not followed): status, headers, body, sha256",
            writes: false,
            with_schema: args::schema::<GetArgs>,
            with_parse: args::parses::<GetArgs>,
            output_schema: get_output_schema,
            run: run_get,
        },
        Builtin {
            name: "http.head",
            description: "HEAD a url (redirects not followed): status and location",
            writes: false,
            with_schema: args::schema::<HeadArgs>,
            with_parse: args::parses::<HeadArgs>,
            output_schema: head_output_schema,
            run: run_head,
        },
    ]
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct HeadArgs {
    /// an http or https url
    url: HttpUrl,
    /// the whole request's time limit, e.g. "10s"
    #[serde(default)]
    timeout: Timeout,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GetArgs {
    /// an http or https url
    url: HttpUrl,
    /// the whole request's time limit, e.g. "10s"
    #[serde(default)]
    timeout: Timeout,
    /// the largest body accepted; a larger one is an error
    #[serde(default)]
    max_bytes: MaxBytes,
}

// The argument types below word their own failures, as these actions have always worded them
// ("http.get: `url` is required"): `try` turns a failure into data a workflow reads, and a
// `with` rendered from templates reaches the action unchecked.

/// `url`: a string; `check` also holds it to the scheme, which the run checks again.
#[derive(JsonSchema)]
#[schemars(extend("pattern" = "^[Hh][Tt][Tt][Pp][Ss]?://"))]
struct HttpUrl(String);

impl<'de> Deserialize<'de> for HttpUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Whatever is given reads as a `Value`: only a missing `url` fails to, and serde asks
        // this type for a missing field's error too.
        match Value::deserialize(deserializer) {
            Err(_) => Err(D::Error::custom("`url` is required")),
            Ok(Value::String(url)) => Ok(HttpUrl(url)),
            Ok(_) => Err(D::Error::custom("`url` must be a string")),
        }
    }
}

/// `timeout`: a duration as `parse_duration` reads it; `null` is the default.
#[derive(serde::Serialize, JsonSchema)]
#[schemars(extend("pattern" = DURATION_PATTERN))]
struct Timeout(String);

impl Default for Timeout {
    fn default() -> Self {
        Timeout(DEFAULT_TIMEOUT.to_string())
    }
}

impl<'de> Deserialize<'de> for Timeout {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Option::<Value>::deserialize(deserializer)? {
            None | Some(Value::Null) => Ok(Timeout::default()),
            Some(Value::String(text)) => Ok(Timeout(text)),
            Some(_) => Err(D::Error::custom(
                "`timeout` must be a duration such as \"10s\"",
            )),
        }
    }
}

/// `max_bytes`: a whole number of bytes; `null` is the default.
#[derive(serde::Serialize, JsonSchema)]
struct MaxBytes(u64);

impl Default for MaxBytes {
    fn default() -> Self {
        MaxBytes(DEFAULT_MAX_BYTES)
    }
}

impl<'de> Deserialize<'de> for MaxBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Option::<Value>::deserialize(deserializer)? {
            None | Some(Value::Null) => Ok(MaxBytes::default()),
            Some(value) => value
                .as_u64()
                .map(MaxBytes)
                .ok_or_else(|| D::Error::custom("`max_bytes` must be a whole number of bytes")),
        }
    }
}

fn head_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "status": { "type": "integer", "description": "The HTTP status code; 3xx, 4xx and 5xx are results, not errors." },
            "location": { "type": ["string", "null"], "description": "The Location header of a redirect (not followed), or null." },
        },
        "required": ["status", "location"],
        "additionalProperties": false,
    })
}

fn get_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "status": { "type": "integer", "description": "The HTTP status code; 3xx, 4xx and 5xx are results, not errors." },
            "headers": {
                "type": "object",
                "description": "lowercased names; repeated headers joined with \", \"",
                "additionalProperties": { "type": "string" },
            },
            "body": { "type": "string", "description": "the body as text (invalid UTF-8 replaced)" },
            "sha256": { "type": "string", "description": "hex SHA-256 of the body's bytes" },
        },
        "required": ["status", "headers", "body", "sha256"],
        "additionalProperties": false,
    })
}

/// The arguments both actions share, checked.
struct Request {
    action: &'static str,
    url: String,
    timeout: Duration,
    timeout_text: String,
}

/// `with` read into `T`, a failure worded as these actions word theirs.
fn parse<T: serde::de::DeserializeOwned>(action: &str, with: &Value) -> Result<T, BuiltinError> {
    T::deserialize(with).map_err(|err| BuiltinError::new(format!("{action}: {err}")))
}

impl Request {
    fn new(action: &'static str, url: HttpUrl, timeout: Timeout) -> Result<Self, BuiltinError> {
        let fail = |message: String| BuiltinError::new(format!("{action}: {message}"));
        let (HttpUrl(url), Timeout(timeout_text)) = (url, timeout);
        let scheme = url.split_once("://").map(|(scheme, _)| scheme);
        if !matches!(scheme, Some(scheme) if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        {
            return Err(fail(format!("`{url}` is not an http or https url")));
        }
        let timeout =
            parse_duration(&timeout_text).map_err(|message| fail(format!("timeout: {message}")))?;
        if timeout.is_zero() {
            return Err(fail("`timeout` must be longer than zero".into()));
        }
        Ok(Request {
            action,
            url,
            timeout,
            timeout_text,
        })
    }

    /// The agent, whose timeout is the request's or what is left of the stage's, the shorter.
    fn agent(&self, cancel: &Cancel) -> ureq::Agent {
        let timeout = match cancel.remaining() {
            Some(left) => self
                .timeout
                .min(left.max(std::time::Duration::from_millis(1))),
            None => self.timeout,
        };
        ureq::Agent::config_builder()
            .max_redirects(0)
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .build()
            .into()
    }

    /// A failed request: the interruption or timeout of the stage when that is what ended it,
    /// else the request's own error.
    fn failed(&self, cancel: &Cancel, err: ureq::Error) -> BuiltinError {
        cancel
            .check()
            .err()
            .map_or_else(|| self.error(err), BuiltinError::from)
    }

    /// A failure that names the action and the url, in words a workflow author can act on.
    fn error(&self, err: ureq::Error) -> BuiltinError {
        let why = match err {
            ureq::Error::Timeout(_) => format!("timed out after {}", self.timeout_text),
            ureq::Error::HostNotFound => "host not found".to_string(),
            ureq::Error::ConnectionFailed => "connection failed".to_string(),
            ureq::Error::Io(io) => format!("connection failed: {io}"),
            ureq::Error::BodyExceedsLimit(limit) => {
                format!("the body is larger than max_bytes ({limit})")
            }
            ureq::Error::BadUri(why) => format!("invalid url: {why}"),
            other => other.to_string(),
        };
        BuiltinError::new(format!("{} `{}`: {why}", self.action, self.url))
    }
}

fn header_text(value: &ureq::http::HeaderValue) -> String {
    String::from_utf8_lossy(value.as_bytes()).into_owned()
}

fn run_head(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: HeadArgs = parse("http.head", with)?;
    let request = Request::new("http.head", args.url, args.timeout)?;
    let cancel = ctx.cancel;
    // On a thread of its own: a request in flight waits in the system, and an interrupt or the
    // stage's deadline ends the wait at once (the request ends at its own timeout, unheard).
    cancel.wait_for(move || {
        let response = request
            .agent(&cancel)
            .head(&request.url)
            .call()
            .map_err(|err| request.failed(&cancel, err))?;
        let location = response.headers().get("location").map(header_text);
        Ok(json!({
            "status": response.status().as_u16(),
            "location": location,
        }))
    })?
}

fn run_get(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: GetArgs = parse("http.get", with)?;
    let request = Request::new("http.get", args.url, args.timeout)?;
    let MaxBytes(max_bytes) = args.max_bytes;
    let (cancel, limit) = (ctx.cancel, max_bytes.min(ctx.max_output));
    // As `http.head`: the request and its body are read on a thread the stage stops waiting for
    // when it is interrupted or out of time.
    cancel.wait_for(move || request.get(&cancel, limit))?
}

impl Request {
    /// A GET of `url` and its body, read no further than `limit` bytes.
    fn get(&self, cancel: &Cancel, limit: u64) -> BuiltinResult {
        let mut response = self
            .agent(cancel)
            .get(&self.url)
            .call()
            .map_err(|err| self.failed(cancel, err))?;
        let mut headers = Map::new();
        for (name, value) in response.headers() {
            // `HeaderName` is lowercase already; repeated headers fold as HTTP allows.
            let value = header_text(value);
            match headers.get_mut(name.as_str()) {
                Some(Value::String(existing)) => {
                    existing.push_str(", ");
                    existing.push_str(&value);
                }
                _ => {
                    headers.insert(name.as_str().to_string(), Value::String(value));
                }
            }
        }
        let bytes = response
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_vec()
            .map_err(|err| self.failed(cancel, err))?;
        Ok(json!({
            "status": response.status().as_u16(),
            "headers": headers,
            "body": String::from_utf8_lossy(&bytes),
            "sha256": sha256_hex(&bytes),
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::net::{TcpListener, TcpStream};
    use std::path::Path;
    use std::thread;
    use std::time::Instant;

    use super::*;
    use crate::builtins::{lookup, WriteRoots};

    const HELLO: &str = "hello, 世界\n";

    /// A stub server on 127.0.0.1 that answers by path, one thread per connection; it lives
    /// until the test process ends.
    fn serve() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                thread::spawn(move || answer(stream));
            }
        });
        format!("http://{address}")
    }

    fn answer(mut stream: TcpStream) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).is_err() {
            return;
        }
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) if line == "\r\n" => break,
                Ok(_) => {}
            }
        }
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or("");
        let path = parts.next().unwrap_or("");
        let big = "x".repeat(2000);
        let (status, extra, body): (&str, &str, &str) = match path {
            "/ok" => ("200 OK", "X-Custom: One\r\nX-Custom: Two\r\n", HELLO),
            "/moved" => ("301 Moved Permanently", "Location: /ok\r\n", "moved"),
            "/missing" => ("404 Not Found", "", "no such page"),
            "/broken" => ("500 Internal Server Error", "", "oops"),
            "/slow" => {
                thread::sleep(Duration::from_secs(60));
                ("200 OK", "", "late")
            }
            "/big" => ("200 OK", "", big.as_str()),
            _ => ("400 Bad Request", "", ""),
        };
        let mut reply = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n",
            body.len()
        );
        if method != "HEAD" {
            reply.push_str(body);
        }
        let _ = stream.write_all(reply.as_bytes());
    }

    fn run(name: &str, with: Value) -> BuiltinResult {
        let builtin = lookup(name).unwrap();
        let cwd = Path::new(".");
        let writes = WriteRoots::default();
        let ctx = BuiltinCtx::for_test(cwd, &writes);
        (builtin.run)(&with, &ctx)
    }

    #[test]
    fn registered_as_read_only() {
        for name in ["http.get", "http.head"] {
            let builtin = lookup(name).unwrap();
            assert!(!builtin.writes, "{name}");
            assert_eq!((builtin.with_schema)()["required"], json!(["url"]));
            assert_eq!((builtin.output_schema)()["type"], "object");
        }
    }

    #[test]
    fn get_returns_status_headers_body_and_hash() {
        let base = serve();
        let output = run("http.get", json!({ "url": format!("{base}/ok") })).unwrap();
        assert_eq!(output["status"], 200);
        assert_eq!(output["body"], HELLO);
        assert_eq!(output["sha256"], sha256_hex(HELLO.as_bytes()));
        assert_eq!(output["headers"]["x-custom"], "One, Two");
        assert_eq!(output["headers"]["content-length"], HELLO.len().to_string());
    }

    #[test]
    fn redirects_are_not_followed() {
        let base = serve();
        let head = run("http.head", json!({ "url": format!("{base}/moved") })).unwrap();
        assert_eq!(head, json!({ "status": 301, "location": "/ok" }));
        let get = run("http.get", json!({ "url": format!("{base}/moved") })).unwrap();
        assert_eq!(get["status"], 301);
        assert_eq!(get["headers"]["location"], "/ok");
        assert_eq!(get["body"], "moved");
    }

    #[test]
    fn head_without_location() {
        let base = serve();
        let head = run("http.head", json!({ "url": format!("{base}/ok") })).unwrap();
        assert_eq!(head, json!({ "status": 200, "location": null }));
    }

    #[test]
    fn client_and_server_errors_are_results() {
        let base = serve();
        let missing = run("http.get", json!({ "url": format!("{base}/missing") })).unwrap();
        assert_eq!(missing["status"], 404);
        assert_eq!(missing["body"], "no such page");
        let broken = run("http.head", json!({ "url": format!("{base}/broken") })).unwrap();
        assert_eq!(broken["status"], 500);
    }

    #[test]
    fn a_slow_reply_times_out() {
        let base = serve();
        let url = format!("{base}/slow");
        let started = Instant::now();
        let err = run("http.get", json!({ "url": url, "timeout": "300ms" })).unwrap_err();
        // The reply would come after 60 s: the bound catches a wait for it, far above any
        // load, and is no claim about how soon a timeout fires.
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(err.0, format!("http.get `{url}`: timed out after 300ms"));
        let err = run("http.head", json!({ "url": url, "timeout": "200ms" })).unwrap_err();
        assert!(err.0.contains("timed out after 200ms"), "{err}");
    }

    #[test]
    fn other_schemes_are_refused() {
        for url in ["ftp://127.0.0.1/x", "file:///etc/passwd", "127.0.0.1/x"] {
            let err = run("http.get", json!({ "url": url })).unwrap_err();
            assert_eq!(
                err.0,
                format!("http.get: `{url}` is not an http or https url")
            );
            let err = run("http.head", json!({ "url": url })).unwrap_err();
            assert!(err.0.contains("is not an http or https url"), "{err}");
        }
    }

    #[test]
    fn a_body_over_max_bytes_is_an_error() {
        let base = serve();
        let url = format!("{base}/big");
        let err = run("http.get", json!({ "url": url, "max_bytes": 1000 })).unwrap_err();
        assert!(err.0.starts_with(&format!("http.get `{url}`")), "{err}");
        assert!(err.0.contains("larger than max_bytes (1000)"), "{err}");
        let fits = run("http.get", json!({ "url": url, "max_bytes": 2000 })).unwrap();
        assert_eq!(fits["body"].as_str().map(str::len), Some(2000));
    }

    #[test]
    fn a_refused_connection_names_the_url() {
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let url = format!("http://127.0.0.1:{port}/");
        // Refused at once; the timeout, far above any load, only keeps a refusal that came late
        // from reading as a timeout.
        let err = run("http.get", json!({ "url": url, "timeout": "60s" })).unwrap_err();
        assert!(err.0.starts_with(&format!("http.get `{url}`: ")), "{err}");
        assert!(err.0.contains("connection failed"), "{err}");
    }

    #[test]
    fn bad_arguments() {
        let err = run("http.get", json!({})).unwrap_err();
        assert_eq!(err.0, "http.get: `url` is required");
        let err = run("http.head", json!({ "url": null })).unwrap_err();
        assert_eq!(err.0, "http.head: `url` must be a string");
        let err = run(
            "http.get",
            json!({ "url": "http://127.0.0.1/", "timeout": 5 }),
        )
        .unwrap_err();
        assert_eq!(
            err.0,
            "http.get: `timeout` must be a duration such as \"10s\""
        );
        let err = run(
            "http.get",
            json!({ "url": "http://127.0.0.1/", "timeout": "soon" }),
        )
        .unwrap_err();
        assert!(err.0.contains("`soon` is not a duration"), "{err}");
        let err = run(
            "http.get",
            json!({ "url": "http://127.0.0.1/", "max_bytes": -1 }),
        )
        .unwrap_err();
        assert!(err.0.contains("max_bytes"), "{err}");
    }

    #[test]
    fn the_with_schema_matches_what_run_accepts() {
        let schema = args::schema::<GetArgs>();
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(validator.is_valid(
            &json!({ "url": "https://example.org/", "timeout": "1h30m", "max_bytes": 5 })
        ));
        assert!(!validator.is_valid(&json!({ "url": "ftp://example.org/" })));
        assert!(!validator.is_valid(&json!({ "url": "http://x/", "timeout": "soon" })));
        assert!(!validator.is_valid(&json!({ "url": "http://x/", "extra": 1 })));
        let output = jsonschema::validator_for(&get_output_schema()).unwrap();
        assert!(output.is_valid(
            &json!({ "status": 200, "headers": { "a": "b" }, "body": "", "sha256": "" })
        ));
    }
}
