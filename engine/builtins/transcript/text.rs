//! The text of a line: control characters and ANSI escapes stripped, Claude Code's echoes told
//! from the user's words, and texts capped.

use std::sync::LazyLock;

use regex::Regex;

/// Appended where a text was cut.
pub(super) const CUT_MARKER: &str = "…";

static REMINDER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)<system-reminder>.*?(?:</system-reminder>|\z)").expect("constant pattern")
});

static COMMAND_ARGS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)<command-args>(.*?)</command-args>").expect("constant pattern")
});

/// `text` without terminal escape sequences and control characters (newlines and tabs kept).
///
/// The escapes are read by a terminal's own parser (vte, a VT500-series state machine), so
/// every kind is dropped whole: CSI, OSC, DCS, SOS/PM/APC strings, two-byte escapes.
/// `strip-ansi-escapes`, built on the same parser, would drop tabs too.
pub(crate) fn strip_controls(text: &str) -> String {
    struct Printed(String);
    impl vte::Perform for Printed {
        fn print(&mut self, c: char) {
            if !c.is_control() {
                self.0.push(c);
            }
        }
        fn execute(&mut self, byte: u8) {
            if byte == b'\n' || byte == b'\t' {
                self.0.push(char::from(byte));
            }
        }
    }
    let mut printed = Printed(String::with_capacity(text.len()));
    vte::Parser::new().advance(&mut printed, text.as_bytes());
    printed.0
}

/// What a piece of user text really is.
pub(super) enum UserText {
    /// Words the user wrote (or typed as a slash command's arguments).
    Said(String),
    /// Claude Code's own echo or output: not prose.
    Noise,
}

/// Tells the user's words from Claude Code's echoes in a user line's text.
pub(super) fn classify_user_text(text: &str) -> UserText {
    let text = REMINDER.replace_all(text, "");
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return UserText::Noise;
    }
    if trimmed.starts_with("<command-name>")
        || trimmed.starts_with("<command-message>")
        || trimmed.starts_with("<command-args>")
    {
        // A slash command's echo; what the user typed after the command is theirs.
        let args: Vec<String> = COMMAND_ARGS
            .captures_iter(trimmed)
            .filter_map(|c| c.get(1))
            .map(|m| m.as_str().trim().to_owned())
            .filter(|args| !args.is_empty())
            .collect();
        return if args.is_empty() {
            UserText::Noise
        } else {
            UserText::Said(args.join("\n"))
        };
    }
    let noise_prefixes = [
        "<local-command-stdout>",
        "<local-command-stderr>",
        "<local-command-caveat>",
        "<bash-input>",
        "<bash-stdout>",
        "<bash-stderr>",
        "[Request interrupted by user",
    ];
    if noise_prefixes
        .iter()
        .any(|prefix| trimmed.starts_with(prefix))
    {
        return UserText::Noise;
    }
    UserText::Said(trimmed.to_owned())
}

/// `text` cut to at most `cap` bytes on a char boundary, marker included (unless the cap is
/// smaller than the marker itself).
pub(super) fn cap_text(text: &str, cap: usize) -> String {
    if text.len() <= cap {
        return text.to_owned();
    }
    let mut cut = cap.saturating_sub(CUT_MARKER.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{CUT_MARKER}", text[..cut].trim_end())
}
