//! Shell scripts whose data never becomes script text.
//!
//! A script is rendered with every printed value replaced by a marker and the value set aside
//! ([`render_script`]). The rendered text, made only of the author's text and markers, is then
//! read the way `sh` reads it, and each marker becomes a reference to an environment variable
//! the engine sets for the process (`SG_V1`, `SG_V2`, ...), written for the quoting context the
//! marker is in: `"${SG_V1}"` in a bare word, `${SG_V1}` inside double quotes or an expanding
//! heredoc, `'"${SG_V1}"'` inside single quotes. Whatever filters (`tojson`, `safe`) or quotes
//! the author wrote, the shell only ever expands a variable: the value is never parsed as code.
//! A value inside a heredoc whose delimiter is quoted cannot be expanded at all, and is an error.

use std::cell::RefCell;

use minijinja::{Error, ErrorKind, Value};

use super::compiled::value_to_text;
use super::Tmpl;

/// The prefix of the environment variables that carry a script's values.
pub(crate) const VARIABLE_PREFIX: &str = "SG_V";

/// A marker: NUL, the value's number, NUL. NUL cannot reach `sh` (an argument is a C string),
/// so a marker left over is caught, and the author's text cannot spell one by accident.
const MARK: char = '\0';

thread_local! {
    /// The values printed so far by the script being rendered on this thread, if any.
    static CAPTURE: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// Whether a script is being rendered on this thread (printed values are captured).
pub(crate) fn capturing() -> bool {
    CAPTURE.with(|c| c.borrow().is_some())
}

/// How many values the script being rendered has printed so far.
pub(crate) fn captured() -> usize {
    CAPTURE.with(|c| c.borrow().as_ref().map_or(0, Vec::len))
}

/// Forgets the values printed after the first `count` (a render that starts over).
pub(crate) fn forget_after(count: usize) {
    CAPTURE.with(|c| {
        if let Some(values) = c.borrow_mut().as_mut() {
            values.truncate(count);
        }
    });
}

/// Sets a printed value aside and returns the marker to print in its place. A value that
/// itself holds markers (a macro's or a `{% set %}` block's output) has them replaced by the
/// values they stand for, so it is carried whole as data.
pub(crate) fn capture(value: &Value) -> String {
    let text = value_to_text(value);
    CAPTURE.with(|c| {
        let mut guard = c.borrow_mut();
        let values = guard.get_or_insert_with(Vec::new);
        let text = if text.contains(MARK) {
            resolve(&text, values)
        } else {
            text
        };
        values.push(text);
        format!("{MARK}{}{MARK}", values.len())
    })
}

/// `text` with each marker replaced by the value it stands for.
fn resolve(text: &str, values: &[String]) -> String {
    let mut out = String::new();
    let mut parts = text.split(MARK);
    out.push_str(parts.next().unwrap_or(""));
    while let Some(number) = parts.next() {
        match number.parse::<usize>().ok().and_then(|n| values.get(n - 1)) {
            Some(value) => out.push_str(value),
            None => out.push_str(number),
        }
        out.push_str(parts.next().unwrap_or(""));
    }
    out
}

/// A rendered script: the text `sh` reads and the environment that carries its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Script {
    pub text: String,
    pub env: Vec<(String, String)>,
}

/// Renders a shell script so that no value becomes script text (see the module docs).
pub(crate) fn render_script(tmpl: &Tmpl, scope: &Value) -> Result<Script, Error> {
    struct Reset(Option<Vec<String>>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let previous = self.0.take();
            CAPTURE.with(|c| *c.borrow_mut() = previous);
        }
    }
    let previous = CAPTURE.with(|c| c.borrow_mut().replace(Vec::new()));
    let reset = Reset(previous);
    let rendered = tmpl.render(scope);
    let values = CAPTURE.with(|c| c.borrow_mut().take()).unwrap_or_default();
    drop(reset);
    bind(&rendered?, values)
}

/// The programs read as POSIX shells when a `command` runs one with `-c`.
const SHELLS: [&str; 7] = ["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"];

/// The index of the argument that will be the script, when the arguments so far start a
/// shell with `-c` and the script is the next one (`["sh", "-c", SCRIPT]`,
/// `["bash", "-euo", "pipefail", "-c", SCRIPT]`).
pub(crate) fn script_argument(argv: &[String]) -> Option<usize> {
    let program = argv.first()?;
    let name = program.rsplit('/').next().unwrap_or(program);
    if !SHELLS.contains(&name) {
        return None;
    }
    let mut reads_command = false;
    let mut takes_value = false;
    for arg in &argv[1..] {
        if takes_value {
            takes_value = false;
            continue;
        }
        let Some(flags) = arg.strip_prefix('-').or_else(|| arg.strip_prefix('+')) else {
            // The first operand: the script when `-c` was given, else a script file.
            return None;
        };
        if flags == "-" || flags.starts_with('-') {
            // `--` ends the options; `--login` and other long options take no value.
            if flags == "-" {
                return reads_command.then_some(argv.len());
            }
            continue;
        }
        reads_command |= flags.contains('c');
        takes_value = flags.ends_with('o') || flags.ends_with('O');
    }
    reads_command.then_some(argv.len())
}

/// Interpreters whose code argument follows one of these flags (`python3 -c CODE`).
const INTERPRETERS: [(&str, &[&str]); 10] = [
    ("python", &["-c"]),
    ("python3", &["-c"]),
    ("node", &["-e", "--eval", "-p", "--print"]),
    ("nodejs", &["-e", "--eval", "-p", "--print"]),
    ("deno", &["eval"]),
    ("perl", &["-e", "-E"]),
    ("ruby", &["-e"]),
    ("php", &["-r"]),
    ("lua", &["-e"]),
    ("Rscript", &["-e"]),
];

/// The interpreter whose code the next argument will be, when the arguments so far name one
/// and end with its code flag (`["python3", "-c"]`).
pub(crate) fn code_argument(argv: &[String]) -> Option<&str> {
    let program = argv.first()?;
    let name = program.rsplit('/').next().unwrap_or(program);
    let flags = INTERPRETERS
        .iter()
        .find(|(interpreter, _)| *interpreter == name)?
        .1;
    (argv.len() > 1 && flags.contains(&argv[argv.len() - 1].as_str())).then_some(name)
}

/// Where a marker stands, as `sh` reads the text around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    /// A bare word (top level, `$( )`, backticks, `${ }` outside double quotes).
    Word,
    /// Inside `"..."` (or `${ }`, `$(( ))` inside them).
    Double,
    /// Inside `'...'`.
    Single,
    /// `$(( ))` outside double quotes: no word splitting, expanded like double quotes.
    Arith,
    /// `${ ... }` outside double quotes.
    Param,
    /// `${ ... }` inside double quotes.
    ParamInDouble,
    /// Backquoted command substitution.
    Backtick,
    /// `$( ... )`: a nested script.
    Sub,
    /// From `#` to the end of the line.
    Comment,
}

/// A heredoc announced on the current line, its body starting at the next newline.
struct Heredoc {
    delimiter: String,
    strip_tabs: bool,
    expands: bool,
}

/// Replaces each marker of `text` with a reference to the variable holding its value.
fn bind(text: &str, values: Vec<String>) -> Result<Script, Error> {
    let reference = |n: usize, context: Context| -> String {
        let name = format!("{VARIABLE_PREFIX}{n}");
        match context {
            Context::Double | Context::ParamInDouble | Context::Arith | Context::Comment => {
                format!("${{{name}}}")
            }
            Context::Single => format!("'\"${{{name}}}\"'"),
            Context::Word | Context::Param | Context::Backtick | Context::Sub => {
                format!("\"${{{name}}}\"")
            }
        }
    };
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + values.len() * 8);
    let mut stack: Vec<Context> = vec![Context::Word];
    let mut pending: Vec<Heredoc> = Vec::new();
    // Whether the last character ended a word (a `#` there starts a comment).
    let mut word_start = true;
    let mut i = 0;
    // A marker at `i`: its number and the index after it.
    let marker_at = |i: usize| -> Option<(usize, usize)> {
        if chars.get(i) != Some(&MARK) {
            return None;
        }
        let digits: String = chars[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        let end = i + 1 + digits.len();
        if digits.is_empty() || chars.get(end) != Some(&MARK) {
            return None;
        }
        Some((digits.parse().ok()?, end + 1))
    };
    while i < chars.len() {
        if let Some((n, next)) = marker_at(i) {
            if n == 0 || n > values.len() {
                return Err(script_error("a stray marker in the script"));
            }
            let context = *stack.last().unwrap_or(&Context::Word);
            out.push_str(&reference(n, context));
            word_start = false;
            i = next;
            continue;
        }
        let c = chars[i];
        if c == MARK {
            return Err(script_error("the script holds a NUL character"));
        }
        let top = *stack.last().unwrap_or(&Context::Word);
        let next = chars.get(i + 1).copied();
        match top {
            Context::Comment => {
                if c == '\n' {
                    stack.pop();
                    out.push(c);
                    i += 1;
                    word_start = true;
                    i = heredoc_bodies(&chars, i, &mut pending, &mut out, &values, &reference)?;
                    continue;
                }
            }
            Context::Single => {
                if c == '\'' {
                    stack.pop();
                }
            }
            Context::Double | Context::ParamInDouble => match c {
                '\\' => {
                    out.push(c);
                    if let Some(n) = next {
                        if n != MARK {
                            out.push(n);
                            i += 1;
                        }
                    }
                    i += 1;
                    continue;
                }
                '"' if top == Context::Double => {
                    stack.pop();
                }
                '}' if top == Context::ParamInDouble => {
                    stack.pop();
                }
                '`' => stack.push(Context::Backtick),
                '$' => {
                    if let Some(pushed) = dollar(&chars, i, true) {
                        out.push_str(&chars[i..i + pushed.1].iter().collect::<String>());
                        i += pushed.1;
                        stack.push(pushed.0);
                        continue;
                    }
                }
                _ => {}
            },
            Context::Word | Context::Sub | Context::Param | Context::Backtick | Context::Arith => {
                match c {
                    '\\' => {
                        out.push(c);
                        if let Some(n) = next {
                            if n != MARK {
                                out.push(n);
                                i += 1;
                            }
                        }
                        i += 1;
                        word_start = false;
                        continue;
                    }
                    '\'' if top != Context::Arith => stack.push(Context::Single),
                    '"' => stack.push(Context::Double),
                    '`' if top == Context::Backtick => {
                        stack.pop();
                    }
                    '`' => stack.push(Context::Backtick),
                    '$' => {
                        if let Some((context, len)) = dollar(&chars, i, false) {
                            out.push_str(&chars[i..i + len].iter().collect::<String>());
                            i += len;
                            stack.push(context);
                            word_start = true;
                            continue;
                        }
                    }
                    ')' if top == Context::Arith && next == Some(')') => {
                        stack.pop();
                        out.push_str("))");
                        i += 2;
                        continue;
                    }
                    ')' if top == Context::Sub => {
                        stack.pop();
                    }
                    '}' if top == Context::Param => {
                        stack.pop();
                    }
                    '#' if word_start && matches!(top, Context::Word | Context::Sub) => {
                        stack.push(Context::Comment);
                    }
                    '<' if next == Some('<')
                        && chars.get(i + 2) != Some(&'<')
                        && matches!(top, Context::Word | Context::Sub) =>
                    {
                        let (heredoc, len) = heredoc_operator(&chars, i);
                        out.push_str(&chars[i..i + len].iter().collect::<String>());
                        i += len;
                        if let Some(heredoc) = heredoc {
                            pending.push(heredoc);
                        }
                        word_start = true;
                        continue;
                    }
                    '\n' if !pending.is_empty() => {
                        out.push(c);
                        i += 1;
                        word_start = true;
                        i = heredoc_bodies(&chars, i, &mut pending, &mut out, &values, &reference)?;
                        continue;
                    }
                    _ => {}
                }
                word_start = c.is_whitespace() || ";&|()<>".contains(c);
            }
        }
        out.push(c);
        i += 1;
    }
    let env = values
        .into_iter()
        .enumerate()
        .map(|(k, value)| (format!("{VARIABLE_PREFIX}{}", k + 1), value))
        .collect();
    Ok(Script { text: out, env })
}

/// What a `$` at `i` opens, and how many characters the opening takes.
fn dollar(chars: &[char], i: usize, in_double: bool) -> Option<(Context, usize)> {
    match (chars.get(i + 1), chars.get(i + 2)) {
        (Some('('), Some('(')) => Some((Context::Arith, 3)),
        (Some('('), _) => Some((Context::Sub, 2)),
        (Some('{'), _) if in_double => Some((Context::ParamInDouble, 2)),
        (Some('{'), _) => Some((Context::Param, 2)),
        _ => None,
    }
}

/// A `<<` or `<<-` operator at `i` and the delimiter word after it: the heredoc it announces
/// (none when no word follows) and the characters it spans.
fn heredoc_operator(chars: &[char], i: usize) -> (Option<Heredoc>, usize) {
    let mut j = i + 2;
    let strip_tabs = chars.get(j) == Some(&'-');
    if strip_tabs {
        j += 1;
    }
    while matches!(chars.get(j), Some(' ' | '\t')) {
        j += 1;
    }
    let mut delimiter = String::new();
    let mut quoted = false;
    while let Some(&c) = chars.get(j) {
        match c {
            '\'' | '"' => {
                quoted = true;
                j += 1;
                while let Some(&d) = chars.get(j) {
                    j += 1;
                    if d == c {
                        break;
                    }
                    delimiter.push(d);
                }
            }
            '\\' => {
                quoted = true;
                if let Some(&d) = chars.get(j + 1) {
                    delimiter.push(d);
                }
                j += 2;
            }
            c if c.is_whitespace() || ";&|()<>".contains(c) || c == MARK => break,
            c => {
                delimiter.push(c);
                j += 1;
            }
        }
    }
    let heredoc = (!delimiter.is_empty()).then_some(Heredoc {
        delimiter,
        strip_tabs,
        expands: !quoted,
    });
    (heredoc, j - i)
}

/// Copies the bodies of the heredocs announced on the line just ended, starting at `i`, and
/// returns where the script goes on.
fn heredoc_bodies(
    chars: &[char],
    mut i: usize,
    pending: &mut Vec<Heredoc>,
    out: &mut String,
    values: &[String],
    reference: &dyn Fn(usize, Context) -> String,
) -> Result<usize, Error> {
    for heredoc in pending.drain(..) {
        loop {
            if i >= chars.len() {
                return Ok(i);
            }
            let end = chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |p| i + p);
            let line: String = chars[i..end].iter().collect();
            let bare = if heredoc.strip_tabs {
                line.trim_start_matches('\t')
            } else {
                line.as_str()
            };
            let last = bare == heredoc.delimiter;
            let mut parts = line.split(MARK);
            out.push_str(parts.next().unwrap_or(""));
            while let Some(number) = parts.next() {
                let n: usize = number
                    .parse()
                    .ok()
                    .filter(|&n| n >= 1 && n <= values.len())
                    .ok_or_else(|| script_error("the script holds a NUL character"))?;
                if !heredoc.expands {
                    return Err(script_error(&format!(
                        "a value is printed inside the heredoc `{}`, whose quoted delimiter \
                         turns off expansion, so it cannot be passed safely; write the \
                         delimiter unquoted (`<<{}`)",
                        heredoc.delimiter, heredoc.delimiter
                    )));
                }
                out.push_str(&reference(n, Context::Double));
                out.push_str(parts.next().unwrap_or(""));
            }
            i = end;
            if i < chars.len() {
                out.push('\n');
                i += 1;
            }
            if last {
                break;
            }
        }
    }
    Ok(i)
}

fn script_error(message: &str) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(text: &str, values: &[&str]) -> Result<Script, Error> {
        bind(
            text,
            values
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
        )
    }

    fn m(n: usize) -> String {
        format!("{MARK}{n}{MARK}")
    }

    #[test]
    fn each_quoting_context_gets_its_reference() {
        let cases = [
            (format!("echo {}", m(1)), "echo \"${SG_V1}\""),
            (format!("echo \"a {} b\"", m(1)), "echo \"a ${SG_V1} b\""),
            (format!("echo 'a {} b'", m(1)), "echo 'a '\"${SG_V1}\"' b'"),
            (
                format!("echo \"$(cat {})\"", m(1)),
                "echo \"$(cat \"${SG_V1}\")\"",
            ),
            (format!("echo ${{x:-{}}}", m(1)), "echo ${x:-\"${SG_V1}\"}"),
            (
                format!("echo \"${{x:-{}}}\"", m(1)),
                "echo \"${x:-${SG_V1}}\"",
            ),
            (
                format!("echo $(( {} + 1 ))", m(1)),
                "echo $(( ${SG_V1} + 1 ))",
            ),
            (format!("echo `cat {}`", m(1)), "echo `cat \"${SG_V1}\"`"),
            (format!("echo \\'{}", m(1)), "echo \\'\"${SG_V1}\""),
            (
                format!("# {}\necho {}", m(1), m(1)),
                "# ${SG_V1}\necho \"${SG_V1}\"",
            ),
            (format!("echo a#{}", m(1)), "echo a#\"${SG_V1}\""),
            (
                format!("cat <<EOF\n'{}' \"x\"\nEOF\necho {}", m(1), m(1)),
                "cat <<EOF\n'${SG_V1}' \"x\"\nEOF\necho \"${SG_V1}\"",
            ),
            (
                format!("cat <<-END; echo 'q'\n\t{}\n\tEND\necho '{}'", m(1), m(1)),
                "cat <<-END; echo 'q'\n\t${SG_V1}\n\tEND\necho ''\"${SG_V1}\"''",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(bound(&text, &["v"]).unwrap().text, expected, "{text:?}");
        }
    }

    #[test]
    fn a_quoted_heredoc_delimiter_is_an_error() {
        for op in ["<<'EOF'", "<<\"EOF\"", "<<\\EOF", "<< 'EOF'"] {
            let text = format!("cat {op}\n{}\nEOF\n", m(1));
            let err = bound(&text, &["v"]).unwrap_err();
            assert!(err.to_string().contains("heredoc `EOF`"), "{op}: {err}");
        }
        // Text alone in a quoted heredoc is fine, and so is a value after it.
        let text = format!("cat <<'EOF'\n$x\nEOF\necho {}\n", m(1));
        assert!(bound(&text, &["v"])
            .unwrap()
            .text
            .ends_with("echo \"${SG_V1}\"\n"));
    }

    #[test]
    fn values_go_to_the_environment_and_nul_is_refused() {
        let script = bound(&format!("{} {}", m(1), m(2)), &["a", "b c"]).unwrap();
        assert_eq!(
            script.env,
            vec![("SG_V1".into(), "a".into()), ("SG_V2".into(), "b c".into())]
        );
        assert!(bound("echo \0", &[]).is_err());
        assert!(bound(&m(3), &["a"]).is_err());
    }

    #[test]
    fn captured_markers_inside_a_value_are_resolved() {
        assert_eq!(resolve(&format!("x{}y", m(1)), &["v".into()]), "xvy");
    }
}
