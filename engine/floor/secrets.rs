//! Secrets kept out of everything the engine writes or prints.
//!
//! The values of the variables the model configuration names as keys (`api_key_env`, and the
//! variables the Claude Code CLI authenticates with) are registered once, when the engine
//! starts; every boundary where text leaves the engine (the run's record and logs, the cache,
//! recordings, the terminal) passes it through [`redact`] first, and every place that shortens
//! untrusted text (an error body, a stderr tail) redacts before it cuts, so a key straddling the
//! cut cannot leave its first characters behind.
//!
//! A value shorter than [`MIN_LEN`] characters is not registered: a variable set to `1` or `x`
//! would otherwise turn every text into redaction marks, and a value that short is no key.
//!
//! All the registered forms are found in one pass over the text (an Aho-Corasick automaton,
//! built once when a secret is registered), and every byte that any occurrence covers is
//! replaced: two secrets that overlap in a text leave no part of either behind.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use aho_corasick::AhoCorasick;
use serde_json::Value;

/// The shortest value treated as a secret, in bytes.
pub(crate) const MIN_LEN: usize = 8;

/// What a secret is replaced with.
pub(crate) const MARK: &str = "[redacted]";

static ACTIVE: AtomicBool = AtomicBool::new(false);
static REGISTRY: RwLock<Option<Arc<Registry>>> = RwLock::new(None);

/// The registered forms and the automaton that finds all of them at once.
struct Registry {
    patterns: Vec<Vec<u8>>,
    finder: AhoCorasick,
}

/// Treat `value` as a secret from now on (with the surrounding whitespace trimmed, and also as
/// JSON escapes it, for records that hold it inside a JSON string). Says whether it was taken:
/// a value shorter than [`MIN_LEN`] is not.
pub(crate) fn register(value: &str) -> bool {
    let value = value.trim();
    if value.len() < MIN_LEN {
        return false;
    }
    let mut forms = vec![value.as_bytes().to_vec()];
    if let Ok(quoted) = serde_json::to_string(value) {
        let escaped = &quoted[1..quoted.len() - 1];
        if escaped != value {
            forms.push(escaped.as_bytes().to_vec());
        }
    }
    let mut guard = REGISTRY
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut patterns: Vec<Vec<u8>> = guard
        .as_deref()
        .map(|registry| registry.patterns.clone())
        .unwrap_or_default();
    for form in forms {
        if !patterns.contains(&form) {
            patterns.push(form);
        }
    }
    // Longest first, so [`longest`] reads the first.
    patterns.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    // The standard match kind reports overlapping occurrences, which `redact_bytes` merges.
    let Ok(finder) = AhoCorasick::new(&patterns) else {
        // Only a pattern set past the automaton's size limits fails here: keep the secrets
        // registered so far rather than none.
        return false;
    };
    *guard = Some(Arc::new(Registry { patterns, finder }));
    ACTIVE.store(true, Ordering::Release);
    true
}

/// Register the value of each variable that is set.
pub(crate) fn register_variables<'a>(names: impl IntoIterator<Item = &'a str>) {
    for name in names {
        if let Ok(value) = std::env::var(name) {
            register(&value);
        }
    }
}

/// Whether any secret is registered: when none is, every function here returns its input.
pub(crate) fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

fn registry() -> Option<Arc<Registry>> {
    if !active() {
        return None;
    }
    REGISTRY
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// The length in bytes of the longest registered secret (0 when none is).
pub(crate) fn longest() -> usize {
    registry().map_or(0, |registry| registry.patterns.first().map_or(0, Vec::len))
}

/// `bytes` with every registered secret replaced by [`MARK`]: one pass finds every occurrence
/// (overlapping ones too), and each run of bytes that occurrences cover, end to end or
/// overlapping, becomes one mark.
pub(crate) fn redact_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    let Some(registry) = registry() else {
        return Cow::Borrowed(bytes);
    };
    let mut hits: Vec<(usize, usize)> = registry
        .finder
        .find_overlapping_iter(bytes)
        .map(|hit| (hit.start(), hit.end()))
        .collect();
    if hits.is_empty() {
        return Cow::Borrowed(bytes);
    }
    hits.sort_unstable();
    let mut spans: Vec<(usize, usize)> = Vec::with_capacity(hits.len());
    for (start, end) in hits {
        match spans.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => spans.push((start, end)),
        }
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut from = 0;
    for (start, end) in spans {
        out.extend_from_slice(&bytes[from..start]);
        out.extend_from_slice(MARK.as_bytes());
        from = end;
    }
    out.extend_from_slice(&bytes[from..]);
    Cow::Owned(out)
}

/// `text` with every registered secret replaced by [`MARK`].
pub(crate) fn redact(text: &str) -> Cow<'_, str> {
    match redact_bytes(text.as_bytes()) {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        // Secrets are whole strings and the mark is ASCII, so what remains is still UTF-8.
        Cow::Owned(bytes) => Cow::Owned(
            String::from_utf8(bytes)
                .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned()),
        ),
    }
}

/// [`redact`] for an owned string, which is handed back untouched when it holds no secret.
pub(crate) fn redact_string(text: String) -> String {
    match redact(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(redacted) => redacted,
    }
}

/// A JSON value with every string (and key) redacted; `None` when nothing had to change.
pub(crate) fn redact_value(value: &Value) -> Option<Value> {
    if !active() {
        return None;
    }
    fn walk(value: &Value) -> Option<Value> {
        match value {
            Value::String(text) => match redact(text) {
                Cow::Borrowed(_) => None,
                Cow::Owned(redacted) => Some(Value::String(redacted)),
            },
            Value::Array(items) => {
                let changed: Vec<Option<Value>> = items.iter().map(walk).collect();
                if changed.iter().all(Option::is_none) {
                    return None;
                }
                Some(Value::Array(
                    changed
                        .into_iter()
                        .zip(items)
                        .map(|(new, old)| new.unwrap_or_else(|| old.clone()))
                        .collect(),
                ))
            }
            Value::Object(map) => {
                let mut any = false;
                let entries: Vec<(String, Value)> = map
                    .iter()
                    .map(|(key, item)| {
                        let key = match redact(key) {
                            Cow::Borrowed(_) => key.clone(),
                            Cow::Owned(redacted) => {
                                any = true;
                                redacted
                            }
                        };
                        let item = match walk(item) {
                            Some(new) => {
                                any = true;
                                new
                            }
                            None => item.clone(),
                        };
                        (key, item)
                    })
                    .collect();
                any.then(|| Value::Object(entries.into_iter().collect()))
            }
            _ => None,
        }
    }
    walk(value)
}

/// At most `max` characters of `text`, redacted first (then `...` when cut).
pub(crate) fn excerpt(text: &str, max: usize) -> String {
    let text = redact(text);
    if text.chars().count() <= max {
        text.into_owned()
    } else {
        let kept: String = text.chars().take(max).collect();
        format!("{kept}...")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The registry is process-wide; these tests register values no other test uses.

    #[test]
    fn a_registered_value_is_replaced_everywhere_and_short_ones_are_not_taken() {
        assert!(!register("short"));
        assert!(!register("   \n"));
        assert!(register("unit-canary-0123456789"));
        let text = "a unit-canary-0123456789 b unit-canary-0123456789";
        assert_eq!(redact(text), "a [redacted] b [redacted]");
        assert_eq!(redact("short stays"), "short stays");
        assert!(matches!(redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn redaction_comes_before_the_cut() {
        register("unit-straddle-abcdefghij");
        let text = format!("{}unit-straddle-abcdefghij tail", "x".repeat(10));
        let cut = excerpt(&text, 15);
        assert!(!cut.contains("unit-str"), "{cut}");
        assert!(cut.starts_with("xxxxxxxxxx[red"), "{cut}");
    }

    #[test]
    fn json_values_and_their_escaped_forms_are_redacted() {
        register("unit\"quoted\\secret");
        let value =
            serde_json::json!({ "a": ["unit\"quoted\\secret", 1], "unit\"quoted\\secret": true });
        let redacted = redact_value(&value).unwrap();
        assert_eq!(
            redacted,
            serde_json::json!({ "a": ["[redacted]", 1], "[redacted]": true })
        );
        let line = serde_json::to_string(&value).unwrap();
        let line = redact(&line);
        assert!(!line.contains("quoted"), "{line}");
        assert!(serde_json::from_str::<Value>(&line).is_ok(), "{line}");
        assert_eq!(
            redact_value(&serde_json::json!({ "clean": [1, "x"] })),
            None
        );
    }

    #[test]
    fn overlapping_secrets_leave_no_part_of_either_behind() {
        // The end of one is the start of the other, and a third lies inside the second.
        register("unit-overlap-head-JOIN");
        register("JOIN-tail-unit-overlap");
        register("tail-unit");
        let text = "<unit-overlap-head-JOIN-tail-unit-overlap> and tail-unit-x";
        assert_eq!(redact(text), "<[redacted]> and [redacted]-x");
    }
}
