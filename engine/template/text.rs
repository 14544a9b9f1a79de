//! How a template's value becomes text.

use minijinja::Value;

/// How a value becomes text in a command argument, a prompt or a file: strings as they are,
/// `none` as the empty string, booleans as `true`/`false`, lists and maps as JSON, numbers as
/// numbers (not Python's `None`/`True`/`['a']`, which minijinja prints by default).
pub(crate) fn value_to_text(value: &Value) -> String {
    if let Some(text) = value.as_str() {
        return text.to_string();
    }
    if value.is_none() || value.is_undefined() {
        return String::new();
    }
    match value.kind() {
        minijinja::value::ValueKind::Bool => value.is_true().to_string(),
        minijinja::value::ValueKind::Map | minijinja::value::ValueKind::Seq => {
            serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
        }
        _ => value.to_string(),
    }
}
