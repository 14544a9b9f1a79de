//! The HTTP transport the API providers share: a JSON POST with a per-request timeout, retries
//! of that request alone for 429, 5xx and connection errors (after the server's `retry-after`,
//! else an exponential backoff, with jitter; a rate limit also lowers the alias's limit), and
//! error bodies surfaced with the key redacted.
//!
//! Each attempt runs on a thread of its own that the call waits for with its cancellation
//! handle checked ([`Cancel::wait_for`]): a Ctrl-C or the stage's `timeout` ends the wait for a
//! server that does not answer, or answers slowly, at once, where ureq itself would wait for
//! the request's own timeout. The abandoned request ends at that timeout, its answer dropped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::{is_retryable_status, ModelError};
use super::limits::Limiter;
use super::Retried;
use crate::floor::cancel::{Cancel, Stopped};
use crate::floor::retry::{AfterFailure, RetryPolicy};

/// No wait between attempts is longer than this, whatever a server asks for.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How much of an error body an error message quotes.
const MAX_ERROR_BODY: usize = 600;

/// The agent every request goes through: it keeps connections alive across requests.
pub(crate) fn agent() -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        // A 4xx/5xx must come back as a response so its body can be read.
        .http_status_as_error(false)
        // A redirect would carry the key's header to wherever it points; a 3xx is reported
        // as the status it is instead.
        .max_redirects(0)
        .max_redirects_will_error(false)
        .user_agent(concat!("stagegraph/", env!("CARGO_PKG_VERSION")))
        // A foreach of prompt stages keeps as many connections busy as its model's
        // `max_concurrency`: keep them all for the next calls instead of reconnecting.
        .max_idle_connections(256)
        .max_idle_connections_per_host(64)
        .build();
    ureq::Agent::with_parts(
        config,
        ureq::unversioned::transport::DefaultConnector::new(),
        KeptResolver::default(),
    )
}

/// How long a host's addresses are used again before it is looked up anew.
const RESOLVED_FOR: Duration = Duration::from_secs(30);

/// Name resolution without a thread per request. ureq resolves the host before it looks for a
/// kept-alive connection, and with a timeout set (every request here has one) its resolver
/// starts a thread for each lookup: a thread per model call, and a DNS query per call to a
/// named host, even over a connection already open. An address written as such is used as it
/// is; a named host is looked up (with the timeout, as ureq does) once per `RESOLVED_FOR`.
#[derive(Debug, Default)]
struct KeptResolver {
    lookup: ureq::unversioned::resolver::DefaultResolver,
    kept: std::sync::Mutex<Kept>,
}

type Addrs = ureq::unversioned::resolver::ResolvedSocketAddrs;
/// Per `host:port`, when it was looked up and what it resolved to.
type Kept = std::collections::HashMap<String, (Instant, Addrs)>;

impl ureq::unversioned::resolver::Resolver for KeptResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<Addrs, ureq::Error> {
        let host = uri.host().unwrap_or_default();
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = literal.parse::<std::net::IpAddr>() {
            let mut addrs = self.empty();
            addrs.push(std::net::SocketAddr::new(ip, port));
            return Ok(addrs);
        }
        let key = format!("{host}:{port}");
        let kept = |map: &Kept| -> Option<Addrs> {
            let (at, addrs) = map.get(&key)?;
            (at.elapsed() < RESOLVED_FOR).then(|| addrs.clone())
        };
        if let Some(addrs) = kept(&self.lock()) {
            return Ok(addrs);
        }
        let addrs = self.lookup.resolve(uri, config, timeout)?;
        self.lock().insert(key, (Instant::now(), addrs.clone()));
        Ok(addrs)
    }
}

impl KeptResolver {
    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One JSON POST to a provider.
pub(crate) struct JsonPost<'a> {
    pub(crate) alias: &'a str,
    pub(crate) url: String,
    pub(crate) headers: Vec<(&'static str, String)>,
    /// The API key, so that nothing quoted from the server can leak it.
    pub(crate) secret: Option<String>,
    pub(crate) body: serde_json::Value,
    pub(crate) timeout: Duration,
    pub(crate) retries: u32,
    /// The first wait between attempts; it doubles with each retry.
    pub(crate) backoff: Duration,
    /// The alias's queue: each attempt takes a place in it, and a rate limit lowers its limit.
    pub(crate) limiter: &'a Limiter,
    /// The run's interrupt and the stage's deadline: checked before each attempt, during the
    /// waits between them, and while an attempt is in flight.
    pub(crate) cancel: Cancel,
}

/// What one attempt sends, owned, for the thread it runs on.
struct Outgoing {
    agent: ureq::Agent,
    url: String,
    headers: Vec<(&'static str, String)>,
    body: Arc<Vec<u8>>,
    timeout: Duration,
}

/// What came back: the status, the wait asked for (`retry-after-ms`, else `retry-after`), the
/// body.
type Incoming = (u16, Option<Duration>, String);

impl JsonPost<'_> {
    /// Send, retrying what may pass, and parse the success body as JSON; also says what was
    /// sent again and how long the call waited between its requests.
    ///
    /// A rate limit or an overload (429, 529, or 503 with `retry-after`) is retried after the
    /// wait the server asked for, plus jitter, and lowers the alias's limit of calls in flight
    /// ([`Limiter::throttled`]); the refused call gives its place up while it waits, so the
    /// others go on. Other failures wait the backoff, plus jitter, on their own.
    pub(crate) fn send(
        &self,
        agent: &ureq::Agent,
    ) -> Result<(serde_json::Value, Retried), ModelError> {
        let policy = RetryPolicy::new(self.retries, self.backoff).capped(MAX_BACKOFF);
        // Serialized once, whatever the number of attempts.
        let body =
            Arc::new(
                serde_json::to_vec(&self.body).map_err(|error| ModelError::Response {
                    alias: self.alias.to_string(),
                    url: self.url.clone(),
                    message: format!("the request cannot be written as JSON: {error}"),
                })?,
            );
        let mut retried = Retried::default();
        let (result, attempts) = policy.run(
            |_| {
                self.cancel.check().map_err(|stop| self.stopped(stop))?;
                let permit = self.limiter.acquire(self.alias, &self.cancel)?;
                let answer = self.attempt(agent, &body);
                drop(permit);
                if answer.is_ok() {
                    self.limiter.answered();
                }
                answer
            },
            |error, _, backoff| {
                if !retried_here(&error) {
                    return AfterFailure::Stop(error);
                }
                // The wait the server asked for, else the policy's; either with jitter, so
                // that calls refused together do not come back together.
                let (asked, throttled) = match &error {
                    ModelError::Status {
                        status,
                        retry_after,
                        ..
                    } => (*retry_after, is_throttling(*status, *retry_after)),
                    _ => (None, false),
                };
                let delay = with_jitter(asked.map_or(backoff, |after| policy.clamp(after)));
                if throttled {
                    self.limiter.throttled(delay);
                    retried.throttled += 1;
                }
                retried.retries += 1;
                retried.waited_ms += u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
                if let Err(stop) = self.cancel.sleep(delay) {
                    return AfterFailure::Stop(self.stopped(stop));
                }
                AfterFailure::Retry
            },
        );
        match result {
            Ok(value) => Ok((value, retried)),
            Err(mut error) => {
                if let ModelError::Status { attempts: n, .. }
                | ModelError::Transport { attempts: n, .. } = &mut error
                {
                    *n = attempts;
                }
                Err(error)
            }
        }
    }

    fn attempt(
        &self,
        agent: &ureq::Agent,
        body: &Arc<Vec<u8>>,
    ) -> Result<serde_json::Value, ModelError> {
        let outgoing = Outgoing {
            agent: agent.clone(),
            url: self.url.clone(),
            headers: self.headers.clone(),
            body: Arc::clone(body),
            // The abandoned request of a stage out of time ends when the stage does.
            timeout: self.cancel.bound(self.timeout),
        };
        let (status, retry_after, body) = self
            .cancel
            .wait_for(move || outgoing.exchange())
            .map_err(|stop| self.stopped(stop))?
            .map_err(|error| match self.cancel.check() {
                // The request ended at the stage's deadline: say so, not ureq's words.
                Err(stop) => self.stopped(stop),
                Ok(()) => self.transport_error(error),
            })?;
        if !(200..300).contains(&status) {
            // Redacted before it is shortened: a key straddling the cut would leave its
            // beginning behind.
            return Err(ModelError::Status {
                alias: self.alias.to_string(),
                url: self.url.clone(),
                status,
                body: error_summary(&self.redact(&body)),
                retry_after,
                attempts: 1,
            });
        }
        serde_json::from_str(&body).map_err(|error| ModelError::Response {
            alias: self.alias.to_string(),
            url: self.url.clone(),
            message: format!(
                "the body is not JSON ({error}): {}",
                excerpt(&self.redact(&body), 200)
            ),
        })
    }

    fn stopped(&self, stop: Stopped) -> ModelError {
        ModelError::stopped(self.alias, stop)
    }

    fn transport_error(&self, error: ureq::Error) -> ModelError {
        if let ureq::Error::Timeout(_) = error {
            return ModelError::Timeout {
                alias: self.alias.to_string(),
                after: self.timeout,
            };
        }
        let retryable = matches!(
            error,
            ureq::Error::Io(_) | ureq::Error::ConnectionFailed | ureq::Error::HostNotFound
        );
        ModelError::Transport {
            alias: self.alias.to_string(),
            message: self.redact(&format!("cannot reach {}: {error}", self.url)),
            retryable,
            attempts: 1,
        }
    }

    /// The request's own key (whatever its length) and every registered secret.
    fn redact(&self, text: &str) -> String {
        let text = crate::floor::secrets::redact(text);
        match &self.secret {
            Some(secret) if !secret.is_empty() => {
                text.replace(secret.as_str(), crate::floor::secrets::MARK)
            }
            _ => text.into_owned(),
        }
    }
}

impl Outgoing {
    /// Send the request and read the whole answer, on the thread [`Cancel::wait_for`] started.
    fn exchange(self) -> Result<Incoming, ureq::Error> {
        let mut request = self
            .agent
            .post(&self.url)
            .config()
            .timeout_global(Some(self.timeout))
            .build()
            .header("content-type", "application/json; charset=utf-8");
        for (name, value) in &self.headers {
            request = request.header(*name, value);
        }
        let mut response = request.send(self.body.as_slice())?;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.trim().parse::<f64>().ok())
                .filter(|value| value.is_finite() && *value >= 0.0)
        };
        // OpenAI's `retry-after-ms` is the finer of the two when both are sent.
        let retry_after = header("retry-after-ms")
            .map(|ms| ms / 1000.0)
            .or_else(|| header("retry-after"))
            .map(|secs| Duration::from_secs_f64(secs.min(MAX_BACKOFF.as_secs_f64())));
        let body = response
            .body_mut()
            .with_config()
            .lossy_utf8(true)
            .read_to_string()?;
        Ok((status, retry_after, body))
    }
}

/// A refusal for being too many: a rate limit (429), an overload (Anthropic's 529), or a 503
/// that says when to come back.
fn is_throttling(status: u16, retry_after: Option<Duration>) -> bool {
    matches!(status, 429 | 529) || (status == 503 && retry_after.is_some())
}

/// The wait and up to a fifth more, at random.
fn with_jitter(wait: Duration) -> Duration {
    wait.mul_f64(1.0 + rand::random::<f64>() * 0.2)
}

/// The failures worth another attempt right away; a timeout is not one of them, since a second
/// full wait is the caller's decision.
fn retried_here(error: &ModelError) -> bool {
    match error {
        ModelError::Status { status, .. } => is_retryable_status(*status),
        ModelError::Transport { retryable, .. } => *retryable,
        _ => false,
    }
}

/// The provider's own words from an error body: `error.message` (Anthropic, OpenAI), with the
/// error type when there is one, else the body itself, shortened.
fn error_summary(body: &str) -> String {
    let trimmed = body.trim();
    if trimmed.is_empty() {
        return "(empty body)".to_string();
    }
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(trimmed) {
        let error = json.get("error").unwrap_or(&json);
        let message = error
            .get("message")
            .and_then(|message| message.as_str())
            .or_else(|| error.as_str());
        if let Some(message) = message {
            let kind = error.get("type").and_then(|kind| kind.as_str());
            return match kind {
                Some(kind) => excerpt(&format!("{kind}: {message}"), MAX_ERROR_BODY),
                None => excerpt(message, MAX_ERROR_BODY),
            };
        }
    }
    excerpt(trimmed, MAX_ERROR_BODY)
}

fn excerpt(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let kept: String = text.chars().take(max).collect();
        format!("{kept}...")
    }
}

/// The error for a success response that lacks a part every reply must have.
pub(crate) fn missing(alias: &str, url: &str, what: &str) -> ModelError {
    ModelError::Response {
        alias: alias.to_string(),
        url: url.to_string(),
        message: format!("the response has no {what}"),
    }
}

/// A token count from a response's `usage` object; a provider that leaves one out reports 0.
pub(crate) fn count(usage: &serde_json::Value, field: &str) -> u64 {
    usage
        .get(field)
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0)
}
