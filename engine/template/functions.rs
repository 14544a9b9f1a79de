//! Functions and filters beyond minijinja's own: time (`now`, `timestamp`, `duration`), data
//! shaping (`from_json`, `merge`, `flatten`, `unique`, `sha256`), regular expressions
//! (`regex_match`, `regex_findall`, `regex_replace`), paths (`basename`, `dirname`, `path_join`)
//! and `shell_quote`.
//!
//! Every one is pure except `now()`, whose clock can be pinned with `STAGEGRAPH_NOW` so that a
//! run can be reproduced, and `find_up(path, name)`, which looks at the disk for the nearest
//! folder at or above `path` holding `name` (a project's root, say, as the folder holding `.git`). Errors name the function and the offending text.

use std::collections::{BTreeSet, HashMap};
use std::sync::{LazyLock, Mutex};

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use minijinja::value::{Kwargs, Rest, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Value};
use regex::Regex;

/// The environment variable that, when set to an RFC 3339 time, pins what `now()` returns.
pub(crate) const NOW_ENV: &str = "STAGEGRAPH_NOW";

/// Register every engine function and filter on `env`.
pub(crate) fn register(env: &mut Environment<'static>) {
    env.add_function(super::reads::CONCAT, concat_fn);
    env.add_function("now", now_fn);
    env.add_function("timestamp", timestamp_fn);
    env.add_filter("timestamp", timestamp_fn);
    env.add_function("duration", duration_fn);
    env.add_filter("duration", duration_fn);
    env.add_function("path_join", path_join_fn);
    env.add_filter("path_join", path_join_fn);
    env.add_function("find_up", find_up_fn);

    env.add_filter("sha256", sha256_filter);
    env.add_filter("from_json", from_json_filter);
    env.add_filter("merge", merge_filter);
    env.add_filter("flatten", flatten_filter);
    env.add_filter("unique", unique_filter);
    env.add_filter("regex_match", regex_match_filter);
    env.add_filter("regex_findall", regex_findall_filter);
    env.add_filter("regex_replace", regex_replace_filter);
    env.add_filter("basename", basename_filter);
    env.add_filter("dirname", dirname_filter);
    env.add_filter("shell_quote", shell_quote_filter);
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.into())
}

// ---------------------------------------------------------------------------------------------
// time

/// A time that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TimeError {
    /// `STAGEGRAPH_NOW` set to what is not an RFC 3339 time.
    #[error("{NOW_ENV} is `{0}`, which is not an RFC 3339 time", NOW_ENV = NOW_ENV)]
    BadNow(String),
    /// `timestamp()` of what is neither an RFC 3339 time nor a date.
    #[error("timestamp: `{0}` is neither an RFC 3339 time nor a YYYY-MM-DD date")]
    BadTimestamp(String),
}

/// The current time in UTC, or the time `STAGEGRAPH_NOW` pins.
pub(crate) fn now() -> Result<DateTime<Utc>, TimeError> {
    let pinned = std::env::var(NOW_ENV).ok();
    now_from(pinned.as_deref(), Utc::now())
}

fn now_from(pinned: Option<&str>, clock: DateTime<Utc>) -> Result<DateTime<Utc>, TimeError> {
    match pinned {
        None => Ok(clock),
        Some(text) => DateTime::parse_from_rfc3339(text.trim())
            .map(|time| time.with_timezone(&Utc))
            .map_err(|_| TimeError::BadNow(text.to_string())),
    }
}

/// A time as RFC 3339 in UTC with seconds precision: `2026-11-30T01:15:00Z`.
pub(crate) fn format_rfc3339(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn now_fn() -> Result<String, Error> {
    now()
        .map(format_rfc3339)
        .map_err(|error| invalid(error.to_string()))
}

/// Seconds since the epoch of an RFC 3339 time or a `YYYY-MM-DD` date (midnight UTC).
pub(crate) fn parse_timestamp(text: &str) -> Result<i64, TimeError> {
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Ok(time.timestamp());
    }
    // `%Y` alone would take `+002026-01-01` or a one-digit year: insist on the plain shape.
    let plain_date = text.len() == 10
        && text.bytes().enumerate().all(|(at, byte)| {
            matches!(at, 4 | 7) == (byte == b'-') && (byte == b'-' || byte.is_ascii_digit())
        });
    if plain_date {
        if let Ok(date) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
            if let Some(midnight) = date.and_hms_opt(0, 0, 0) {
                return Ok(midnight.and_utc().timestamp());
            }
        }
    }
    Err(TimeError::BadTimestamp(text.to_string()))
}

fn timestamp_fn(text: &str) -> Result<i64, Error> {
    parse_timestamp(text).map_err(|error| invalid(error.to_string()))
}

pub(crate) use crate::floor::duration::parse as parse_duration;

/// Whole seconds as an integer; a duration with a fraction of a second (`"1500ms"`) as a float,
/// so that no precision is lost.
fn duration_fn(text: &str) -> Result<Value, Error> {
    let duration =
        parse_duration(text).map_err(|message| invalid(format!("duration: {message}")))?;
    if duration.subsec_millis() == 0 {
        Ok(Value::from(duration.as_secs()))
    } else {
        Ok(Value::from(duration.as_secs_f64()))
    }
}

// ---------------------------------------------------------------------------------------------
// data

fn sha256_filter(value: Value) -> Result<String, Error> {
    let bytes = match value.as_str() {
        Some(text) => text.as_bytes().to_vec(),
        None => serde_json::to_vec(&value)
            .map_err(|err| invalid(format!("sha256: cannot serialize the value to JSON: {err}")))?,
    };
    Ok(crate::floor::hash::sha256_hex(&bytes))
}

fn from_json_filter(text: &str) -> Result<Value, Error> {
    let parsed: serde_json::Value = serde_json::from_str(text)
        .map_err(|err| invalid(format!("from_json: invalid JSON: {err}")))?;
    Ok(Value::from_serialize(&parsed))
}

fn merge_filter(left: Value, right: Value) -> Result<Value, Error> {
    for (side, value) in [("left", &left), ("right", &right)] {
        if value.kind() != ValueKind::Map {
            return Err(invalid(format!(
                "merge: the {side} side must be a map, not {}",
                value.kind()
            )));
        }
    }
    deep_merge(&left, &right)
}

/// Maps merge key by key; anything else (lists included) is replaced by the right side.
fn deep_merge(left: &Value, right: &Value) -> Result<Value, Error> {
    if left.kind() != ValueKind::Map || right.kind() != ValueKind::Map {
        return Ok(right.clone());
    }
    let mut right_entries = indexmap::IndexMap::new();
    for key in right.try_iter()? {
        let value = right.get_item(&key)?;
        right_entries.insert(key, value);
    }
    let mut merged = Vec::new();
    for key in left.try_iter()? {
        let value = left.get_item(&key)?;
        let value = match right_entries.shift_remove(&key) {
            Some(other) => deep_merge(&value, &other)?,
            None => value,
        };
        merged.push((key, value));
    }
    merged.extend(right_entries);
    Ok(Value::from_iter(merged))
}

fn is_list(value: &Value) -> bool {
    matches!(value.kind(), ValueKind::Seq | ValueKind::Iterable)
}

fn flatten_filter(value: Value) -> Result<Value, Error> {
    if !is_list(&value) {
        return Err(invalid(format!(
            "flatten: expected a list, not {}",
            value.kind()
        )));
    }
    let mut out = Vec::new();
    for item in value.try_iter()? {
        if is_list(&item) {
            out.extend(item.try_iter()?);
        } else {
            out.push(item);
        }
    }
    Ok(Value::from(out))
}

/// Keeps the first occurrence of each value, in order. Unlike minijinja's own `unique`, strings
/// compare case-sensitively (`case_sensitive=false` restores folding); `attribute=` is kept.
fn unique_filter(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let attribute: Option<String> = kwargs.get("attribute")?;
    let case_sensitive: Option<bool> = kwargs.get("case_sensitive")?;
    kwargs.assert_all_used()?;
    let case_sensitive = case_sensitive.unwrap_or(true);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for item in value
        .try_iter()
        .map_err(|_| invalid(format!("unique: expected a list, not {}", value.kind())))?
    {
        let mut compared = match &attribute {
            Some(path) => attribute_path(&item, path),
            None => item.clone(),
        };
        if !case_sensitive {
            if let Some(text) = compared.as_str() {
                compared = Value::from(text.to_lowercase());
            }
        }
        if seen.insert(compared) {
            out.push(item);
        }
    }
    Ok(Value::from(out))
}

/// `a.b.0` looked up in `value`, undefined where any step is missing (minijinja's `attribute=`).
fn attribute_path(value: &Value, path: &str) -> Value {
    let mut current = value.clone();
    for step in path.split('.') {
        let next = match step.parse::<i64>() {
            Ok(index) => current.get_item(&Value::from(index)),
            Err(_) => current.get_attr(step),
        };
        current = match next {
            Ok(found) => found,
            Err(_) => return Value::UNDEFINED,
        };
    }
    current
}

// ---------------------------------------------------------------------------------------------
// regular expressions

/// Compiled patterns, since a filter in a `foreach` stage runs once per item. Bounded: a
/// template that builds patterns from data must not grow it without end.
static REGEX_CACHE: LazyLock<Mutex<HashMap<String, Regex>>> = LazyLock::new(Default::default);
const REGEX_CACHE_CAP: usize = 256;

fn regex(filter: &str, pattern: &str) -> Result<Regex, Error> {
    let mut cache = REGEX_CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(compiled) = cache.get(pattern) {
        return Ok(compiled.clone());
    }
    let compiled = Regex::new(pattern)
        .map_err(|err| invalid(format!("{filter}: invalid regex `{pattern}`: {err}")))?;
    if cache.len() >= REGEX_CACHE_CAP {
        cache.clear();
    }
    cache.insert(pattern.to_string(), compiled.clone());
    Ok(compiled)
}

fn regex_match_filter(text: &str, pattern: &str) -> Result<bool, Error> {
    Ok(regex("regex_match", pattern)?.is_match(text))
}

/// Whole matches when the pattern has no group, the first group's text when it has one, and a
/// list per match when it has several (an unmatched group gives `""`).
fn regex_findall_filter(text: &str, pattern: &str) -> Result<Value, Error> {
    let compiled = regex("regex_findall", pattern)?;
    let groups = compiled.captures_len() - 1;
    let group_text = |captures: &regex::Captures, at: usize| {
        Value::from(captures.get(at).map_or("", |found| found.as_str()))
    };
    let found: Vec<Value> = match groups {
        0 => compiled
            .find_iter(text)
            .map(|found| Value::from(found.as_str()))
            .collect(),
        1 => compiled
            .captures_iter(text)
            .map(|captures| group_text(&captures, 1))
            .collect(),
        _ => compiled
            .captures_iter(text)
            .map(|captures| {
                Value::from(
                    (1..=groups)
                        .map(|at| group_text(&captures, at))
                        .collect::<Vec<_>>(),
                )
            })
            .collect(),
    };
    Ok(Value::from(found))
}

/// Every match replaced; `$1`, `${1}` and `${name}` refer to groups (`$$` is a literal `$`).
fn regex_replace_filter(text: &str, pattern: &str, replacement: &str) -> Result<String, Error> {
    Ok(regex("regex_replace", pattern)?
        .replace_all(text, replacement)
        .into_owned())
}

// ---------------------------------------------------------------------------------------------
// paths: POSIX string operations, the same on every platform (Python's `posixpath`).

fn basename_filter(path: &str) -> String {
    match path.rfind('/') {
        Some(at) => path[at + 1..].to_string(),
        None => path.to_string(),
    }
}

fn dirname_filter(path: &str) -> String {
    let head = match path.rfind('/') {
        Some(at) => &path[..=at],
        None => "",
    };
    if !head.is_empty() && head.bytes().any(|byte| byte != b'/') {
        head.trim_end_matches('/').to_string()
    } else {
        head.to_string()
    }
}

/// The nearest folder at or above `path` that holds an entry `name` (a file, a folder or a link),
/// as an absolute path with `.` and `..` resolved; none when no ancestor holds one.
fn find_up_fn(path: &str, name: &str) -> Result<Value, Error> {
    if name.is_empty() || name.contains('/') {
        return Err(invalid(format!(
            "find_up: `{name}` must be one file or folder name"
        )));
    }
    let start = crate::builtins::paths::lexical_absolute(std::path::Path::new(path));
    Ok(start
        .ancestors()
        .find(|folder| std::fs::symlink_metadata(folder.join(name)).is_ok())
        .map_or(Value::from(()), |folder| {
            Value::from(folder.to_string_lossy().into_owned())
        }))
}

/// Parts joined with `/`; an absolute part discards what came before it.
fn path_join_fn(parts: Rest<Value>) -> Result<String, Error> {
    if parts.is_empty() {
        return Err(invalid("path_join: needs at least one part"));
    }
    let mut joined = String::new();
    for part in parts.iter() {
        let part = match part.kind() {
            ValueKind::String | ValueKind::Number => part.to_string(),
            kind => {
                return Err(invalid(format!(
                    "path_join: a part is {kind}, not a string"
                )))
            }
        };
        if part.starts_with('/') || joined.is_empty() {
            joined = part;
        } else {
            if !joined.ends_with('/') {
                joined.push('/');
            }
            joined.push_str(&part);
        }
    }
    Ok(joined)
}

// ---------------------------------------------------------------------------------------------
// shell

/// `text` as one POSIX shell word: bare when it is made only of `[A-Za-z0-9_./:=@%+,-]`,
/// otherwise in single quotes with each `'` written as `'\''`.
pub(crate) fn shell_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    push_shell_quoted(&mut out, text);
    out
}

/// [`shell_quote`], onto the end of `out`: a command line is quoted word by word into one
/// string (a dry-run describes every command stage so).
pub(crate) fn push_shell_quoted(out: &mut String, text: &str) {
    let safe = |byte: u8| byte.is_ascii_alphanumeric() || b"_./:=@%+,-".contains(&byte);
    if !text.is_empty() && text.bytes().all(safe) {
        out.push_str(text);
        return;
    }
    out.push('\'');
    for (i, piece) in text.split('\'').enumerate() {
        if i > 0 {
            out.push_str(r"'\''");
        }
        out.push_str(piece);
    }
    out.push('\'');
}

fn shell_quote_filter(value: Value) -> String {
    match value.as_str() {
        Some(text) => shell_quote(text),
        None => shell_quote(&value.to_string()),
    }
}

/// `a ~ b`, as [`super::reads::bounded_concat`] writes it: the two as text, joined, unless the
/// string would be longer than a template may render ([`super::compiled::MAX_RENDERED`]).
fn concat_fn(state: &minijinja::State, left: Value, right: Value) -> Result<Value, Error> {
    super::stop::check()?;
    // As minijinja's own `~`: under strict undefined an undefined side fails, but the silent
    // undefined of an `if` with no `else` (`("s" if n != 1)`) joins as nothing.
    let left = minijinja::value::StringInput::new(state, &left)?;
    let right = minijinja::value::StringInput::new(state, &right)?;
    let (a, b) = (left.as_str(), right.as_str());
    let limit = super::compiled::MAX_RENDERED;
    if a.len() + b.len() > limit {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "`~` would make a string of {} MiB ({} bytes), more than the {} MiB one \
                 template may make",
                (a.len() + b.len()) >> 20,
                a.len() + b.len(),
                limit >> 20
            ),
        ));
    }
    let mut out = String::with_capacity(a.len() + b.len());
    out.push_str(a);
    out.push_str(b);
    Ok(Value::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::context;
    use std::time::Duration;

    fn render(source: &str) -> Result<String, String> {
        crate::template::environment()
            .render_str(source, context! {})
            .map_err(|err| err.to_string())
    }

    fn render_with(source: &str, ctx: Value) -> Result<String, String> {
        crate::template::environment()
            .render_str(source, ctx)
            .map_err(|err| err.to_string())
    }

    fn ok(source: &str) -> String {
        match render(source) {
            Ok(text) => text,
            Err(err) => panic!("`{source}` failed: {err}"),
        }
    }

    fn err(source: &str) -> String {
        match render(source) {
            Ok(text) => panic!("`{source}` rendered `{text}`, expected an error"),
            Err(err) => err,
        }
    }

    #[test]
    fn now_is_rfc3339_utc_in_seconds() {
        let text = ok("{{ now() }}");
        let shape = Regex::new(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$").unwrap();
        assert!(shape.is_match(&text), "{text}");
        let parsed = DateTime::parse_from_rfc3339(&text).unwrap();
        assert!((Utc::now().timestamp() - parsed.timestamp()).abs() < 3600 * 24 * 365 * 100);
    }

    #[test]
    fn now_can_be_pinned() {
        let clock = DateTime::parse_from_rfc3339("2000-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let pinned = now_from(Some("2026-11-30T02:15:00+01:00"), clock).unwrap();
        assert_eq!(format_rfc3339(pinned), "2026-11-30T01:15:00Z");
        assert_eq!(
            format_rfc3339(now_from(None, clock).unwrap()),
            "2000-01-01T00:00:00Z"
        );
        let bad = now_from(Some("yesterday"), clock).unwrap_err().to_string();
        assert!(
            bad.contains("STAGEGRAPH_NOW") && bad.contains("yesterday"),
            "{bad}"
        );
    }

    #[test]
    fn timestamp_reads_times_and_dates() {
        assert_eq!(ok("{{ timestamp('1970-01-01T00:01:40Z') }}"), "100");
        assert_eq!(
            ok("{{ timestamp('2026-11-30T02:15:00+01:00') }}"),
            "1796001300"
        );
        assert_eq!(ok("{{ timestamp('2026-11-30') }}"), "1795996800");
        assert_eq!(ok("{{ '1969-12-31' | timestamp }}"), "-86400");
        let message = err("{{ timestamp('30/11/2026') }}");
        assert!(message.contains("`30/11/2026`"), "{message}");
        assert!(err("{{ timestamp('2026-02-30') }}").contains("2026-02-30"));
        assert!(err("{{ timestamp('2026-1-5') }}").contains("2026-1-5"));
    }

    #[test]
    fn duration_in_seconds() {
        assert_eq!(ok("{{ duration('300s') }}"), "300");
        assert_eq!(ok("{{ duration('10m') }}"), "600");
        assert_eq!(ok("{{ duration('2h') }}"), "7200");
        assert_eq!(ok("{{ duration('7d') }}"), "604800");
        assert_eq!(ok("{{ duration('1w') }}"), "604800");
        assert_eq!(ok("{{ duration('1h30m') }}"), "5400");
        assert_eq!(ok("{{ duration('500ms') }}"), "0.5");
        assert_eq!(ok("{{ duration('2s') + 1 }}"), "3");
        assert_eq!(ok("{{ '1d' | duration }}"), "86400");
    }

    #[test]
    fn duration_errors_name_the_text() {
        for bad in [
            "",
            "10",
            "5x",
            "1m1h",
            "1s1s",
            "h",
            "1.5h",
            " 10s",
            "99999999999999999999s",
        ] {
            let message = err(&format!("{{{{ duration('{bad}') }}}}"));
            assert!(message.contains(&format!("`{bad}`")), "{bad}: {message}");
        }
    }

    #[test]
    fn parse_duration_gives_std_durations() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1m500ms"), Ok(Duration::from_millis(60_500)));
        assert_eq!(
            parse_duration("1w2d3h4m5s6ms"),
            Ok(Duration::from_millis(
                ((((7 + 2) * 24 + 3) * 60 + 4) * 60 + 5) * 1000 + 6
            ))
        );
        assert!(parse_duration("2 s").is_err());
    }

    #[test]
    fn sha256_of_strings_and_values() {
        assert_eq!(
            ok("{{ 'abc' | sha256 }}"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // Non-strings hash their compact JSON: `[1,2]`.
        assert_eq!(
            ok("{{ [1, 2] | sha256 }}"),
            crate::floor::hash::sha256_hex(b"[1,2]")
        );
        assert_eq!(
            ok("{{ 'é' | sha256 }}"),
            crate::floor::hash::sha256_hex("é".as_bytes())
        );
    }

    #[test]
    fn from_json_parses_and_reports_position() {
        assert_eq!(ok(r#"{{ ('{"a": [1, 2]}' | from_json).a[1] }}"#), "2");
        assert_eq!(ok(r#"{{ ('"x"' | from_json) }}"#), "x");
        let message = err("{{ '{\"a\": }' | from_json }}");
        assert!(message.contains("from_json"), "{message}");
        assert!(message.contains("line 1 column"), "{message}");
    }

    #[test]
    fn merge_is_deep_and_right_wins() {
        let ctx = context! {
            doc => serde_json::json!({"a": {"x": 1, "y": [1, 2]}, "b": 1}),
            patch => serde_json::json!({"a": {"y": [3], "z": true}, "c": null}),
        };
        let merged = render_with("{{ doc | merge(patch) | tojson }}", ctx).unwrap();
        let merged: serde_json::Value = serde_json::from_str(&merged).unwrap();
        assert_eq!(
            merged,
            serde_json::json!({"a": {"x": 1, "y": [3], "z": true}, "b": 1, "c": null})
        );
        assert_eq!(
            ok("{{ {'a': {'b': 1}} | merge({'a': 2}) | tojson }}"),
            r#"{"a":2}"#
        );
        assert!(err("{{ [1] | merge({}) }}").contains("left side must be a map"));
        assert!(err("{{ {} | merge('x') }}").contains("right side must be a map"));
    }

    #[test]
    fn flatten_one_level() {
        assert_eq!(
            ok("{{ [[1, 2], 3, [[4]], 'ab'] | flatten | tojson }}"),
            r#"[1,2,3,[4],"ab"]"#
        );
        assert_eq!(ok("{{ [] | flatten | tojson }}"), "[]");
        assert!(err("{{ 'abc' | flatten }}").contains("flatten: expected a list"));
    }

    #[test]
    fn unique_keeps_first_occurrences_of_any_value() {
        assert_eq!(
            ok("{{ ['b', 'a', 'B', 'b', 1, 1, [1], [1], {'k': 1}, {'k': 1}, none, none] | unique | tojson }}"),
            r#"["b","a","B",1,[1],{"k":1},null]"#
        );
        assert_eq!(
            ok("{{ ['b', 'B'] | unique(case_sensitive=false) | tojson }}"),
            r#"["b"]"#
        );
        assert_eq!(
            ok("{{ [{'n': 1, 'v': 'a'}, {'n': 1, 'v': 'b'}] | unique(attribute='n') | map(attribute='v') | join }}"),
            "a"
        );
        assert!(err("{{ 3 | unique }}").contains("unique: expected a list"));
    }

    #[test]
    fn regex_match_searches_anywhere() {
        assert_eq!(
            ok("{{ 'release-1.2' | regex_match('\\\\d+\\\\.\\\\d+') | tojson }}"),
            "true"
        );
        assert_eq!(
            ok("{{ 'release' | regex_match('^\\\\d') | tojson }}"),
            "false"
        );
        let message = err("{{ 'x' | regex_match('(') }}");
        assert!(
            message.contains("regex_match: invalid regex `(`"),
            "{message}"
        );
    }

    #[test]
    fn regex_findall_by_group_count() {
        assert_eq!(
            ok("{{ 'a1 b22 c' | regex_findall('[0-9]+') | tojson }}"),
            r#"["1","22"]"#
        );
        assert_eq!(
            ok("{{ 'a=1, b=2' | regex_findall('(\\\\w)=\\\\d') | tojson }}"),
            r#"["a","b"]"#
        );
        assert_eq!(
            ok("{{ 'a=1, b=' | regex_findall('(\\\\w)=(\\\\d)?') | tojson }}"),
            r#"[["a","1"],["b",""]]"#
        );
        assert_eq!(ok("{{ 'zzz' | regex_findall('a') | tojson }}"), "[]");
        assert!(err("{{ 'x' | regex_findall('[') }}").contains("regex_findall: invalid regex"));
    }

    #[test]
    fn regex_replace_with_group_references() {
        assert_eq!(
            ok("{{ 'john smith' | regex_replace('(\\\\w+) (\\\\w+)', '$2, $1') }}"),
            "smith, john"
        );
        assert_eq!(ok("{{ 'a-b-c' | regex_replace('-', '') }}"), "abc");
        assert_eq!(ok("{{ 'v1' | regex_replace('(\\\\d)', '${1}0') }}"), "v10");
        assert!(err("{{ 'x' | regex_replace('*', '') }}").contains("regex_replace: invalid regex"));
    }

    #[test]
    fn regex_cache_reuses_compiled_patterns() {
        let pattern = "cache-probe-[0-9]{3}";
        ok(&format!("{{{{ 'x' | regex_match('{pattern}') }}}}"));
        let cache = REGEX_CACHE.lock().unwrap();
        assert!(cache.contains_key(pattern));
    }

    #[test]
    fn basename_and_dirname_are_posix() {
        assert_eq!(ok("{{ 'docs/solutions/a.md' | basename }}"), "a.md");
        assert_eq!(ok("{{ 'a.md' | basename }}"), "a.md");
        assert_eq!(ok("{{ 'docs/' | basename }}"), "");
        assert_eq!(
            ok("{{ 'docs/solutions/a.md' | dirname }}"),
            "docs/solutions"
        );
        assert_eq!(ok("{{ 'a.md' | dirname }}"), "");
        assert_eq!(ok("{{ '/a' | dirname }}"), "/");
        assert_eq!(ok("{{ 'a//b' | dirname }}"), "a");
    }

    #[test]
    fn find_up_finds_the_nearest_folder_holding_a_name() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let root = dir.path().join("repo");
        std::fs::create_dir_all(root.join(".git")).expect(".git");
        std::fs::create_dir_all(root.join("a/b")).expect("a/b");
        let found = render_with(
            "{{ find_up(path, '.git') }}|{{ find_up(root, '.git') }}|{{ find_up(path, 'nothing-here') is none }}",
            context! { path => root.join("a/b/../b").display().to_string(), root => root.display().to_string() },
        )
        .expect("renders");
        let root = root.display().to_string();
        assert_eq!(found, format!("{root}|{root}|true"));
        assert!(err("{{ find_up('.', 'a/b') }}").contains("one file or folder name"));
    }

    #[test]
    fn path_join_as_filter_and_function() {
        assert_eq!(
            ok("{{ path_join('docs', 'solutions', 'a.md') }}"),
            "docs/solutions/a.md"
        );
        assert_eq!(ok("{{ 'docs/' | path_join('a.md') }}"), "docs/a.md");
        assert_eq!(ok("{{ path_join('docs', '/etc', 'x') }}"), "/etc/x");
        assert_eq!(ok("{{ path_join('runs', 3) }}"), "runs/3");
        assert!(err("{{ path_join('a', none) }}").contains("path_join: a part is none"));
        assert!(err("{{ path_join() }}").contains("path_join: needs at least one part"));
    }

    #[test]
    fn shell_quote_bare_or_single_quoted() {
        assert_eq!(
            shell_quote("a/b.c:d=e@f%g+h,i-j_k"),
            "a/b.c:d=e@f%g+h,i-j_k"
        );
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("$(rm -rf ~)"), "'$(rm -rf ~)'");
        assert_eq!(shell_quote("''"), r"''\'''\'''");
        let mut line = String::from("sh -c ");
        push_shell_quoted(&mut line, "echo 'a' > b");
        assert_eq!(line, r"sh -c 'echo '\''a'\'' > b'");
        assert_eq!(ok("{{ \"don't stop\" | shell_quote }}"), r"'don'\''t stop'");
        assert_eq!(ok("{{ 42 | shell_quote }}"), "42");
        assert_eq!(ok("{{ 'a;b' | shell_quote }}"), "'a;b'");
    }

    #[test]
    fn shell_quote_round_trips_through_sh() {
        let nasty = "it's a \"test\" $HOME `x` \\ \n ~ *";
        let output = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", shell_quote(nasty)))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&output.stdout), nasty);
    }
}
