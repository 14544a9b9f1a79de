//! Functions and filters beyond minijinja's own.

use minijinja::Environment;

/// Register every engine function and filter on `env`.
pub fn register(_env: &mut Environment<'static>) {}

/// POSIX shell quoting.
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// `"30s"` -> 30 seconds.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let secs: u64 = text
        .trim_end_matches('s')
        .parse()
        .map_err(|_| format!("invalid duration `{text}`"))?;
    Ok(std::time::Duration::from_secs(secs))
}
