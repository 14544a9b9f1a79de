//! Built-in url.resolve: a URL reference resolved against a base URL (RFC 3986 section 5), the
//! way a client resolves a relative `Location` against the URL it requested.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::builtins::args::{self, parse};
use crate::builtins::schema::value_schema;
use crate::builtins::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult};

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![Builtin {
        name: "url.resolve",
        description:
            "Resolve a URL reference (absolute, `//host/x`, `/x`, `../x?q=1`) against a base URL.",
        writes: false,
        with_schema: args::schema::<Args>,
        with_parse: args::parses::<Args>,
        output_schema,
        run: resolve,
    }]
}

/// Resolve a URL reference against a base URL.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// An absolute URL, e.g. the URL a request was sent to.
    #[schemars(length(min = 1))]
    base: String,
    /// The reference; null or empty gives null.
    reference: Option<String>,
}

fn output_schema() -> Value {
    value_schema(json!({
        "description": "The absolute URL, or null when there was no reference.",
        "type": ["string", "null"],
        "examples": ["https://example.com/v2/x?q=1"],
    }))
}

fn resolve(with: &Value, _ctx: &BuiltinCtx) -> BuiltinResult {
    let args: Args = parse("url.resolve", with)?;
    let reference = match args.reference.as_deref().map(str::trim) {
        None | Some("") => return Ok(Value::Null),
        Some(reference) => reference,
    };
    let base = url::Url::parse(&args.base).map_err(|err| {
        BuiltinError::new(format!(
            "url.resolve: base `{}` is not an absolute url: {err}",
            args.base
        ))
    })?;
    let joined = base.join(reference).map_err(|err| {
        BuiltinError::new(format!(
            "url.resolve: cannot resolve `{reference}` against `{}`: {err}",
            args.base
        ))
    })?;
    Ok(json!(joined.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtins::WriteRoots;

    fn run(base: &str, reference: &str) -> Value {
        let writes = WriteRoots::default();
        let ctx = BuiltinCtx::for_test(std::path::Path::new("."), &writes);
        resolve(&json!({ "base": base, "reference": reference }), &ctx).expect("resolves")
    }

    #[test]
    fn resolves_like_rfc_3986() {
        let base = "http://a/b/c/d;p?q";
        assert_eq!(run(base, "../g"), "http://a/b/g");
        assert_eq!(run(base, "../../g"), "http://a/g");
        assert_eq!(run(base, "g?y"), "http://a/b/c/g?y");
        assert_eq!(run(base, "//g"), "http://g/");
        assert_eq!(run(base, "/g"), "http://a/g");
        assert_eq!(
            run("https://x.test/docs/v1/guide", "../v2/x?q=1"),
            "https://x.test/docs/v2/x?q=1"
        );
        assert_eq!(run(base, "https://elsewhere/x"), "https://elsewhere/x");
        assert_eq!(run(base, ""), Value::Null);
    }
}
