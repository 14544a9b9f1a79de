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

use super::text::value_to_text;
use super::Tmpl;

/// The prefix of the environment variables that carry a script's values.
pub(crate) const VARIABLE_PREFIX: &str = "SG_V";

/// A marker: NUL, the render's nonce, the value's number, NUL. NUL cannot reach `sh` (an
/// argument is a C string) and a value holding one is refused, so a marker left over is caught
/// and no text can spell one: the nonce is drawn anew for every render.
const MARK: char = '\0';

/// The values printed so far by the script being rendered, and the nonce its markers carry.
struct Capture {
    nonce: String,
    values: Vec<String>,
}

thread_local! {
    /// The script being rendered on this thread, if any.
    static CAPTURE: RefCell<Option<Capture>> = const { RefCell::new(None) };
}

/// Whether a script is being rendered on this thread (printed values are captured).
pub(crate) fn capturing() -> bool {
    CAPTURE.with(|c| c.borrow().is_some())
}

/// How many values the script being rendered has printed so far.
pub(crate) fn captured() -> usize {
    CAPTURE.with(|c| c.borrow().as_ref().map_or(0, |c| c.values.len()))
}

/// Forgets the values printed after the first `count` (a render that starts over).
pub(crate) fn forget_after(count: usize) {
    CAPTURE.with(|c| {
        if let Some(capture) = c.borrow_mut().as_mut() {
            capture.values.truncate(count);
        }
    });
}

/// Sets a printed value aside and returns the marker to print in its place. A value that
/// itself holds markers (a macro's or a `{% set %}` block's output) has them replaced by the
/// values they stand for, so it is carried whole as data. A value holding any other NUL is an
/// error: no process can receive it.
pub(crate) fn capture(value: &Value) -> Result<String, Error> {
    let text = value_to_text(value);
    CAPTURE.with(|c| {
        let mut guard = c.borrow_mut();
        let capture = guard.get_or_insert_with(|| Capture {
            nonce: nonce(),
            values: Vec::new(),
        });
        let text = if text.contains(MARK) {
            resolve(&text, &capture.nonce, &capture.values)?
        } else {
            text
        };
        capture.values.push(text);
        Ok(format!(
            "{MARK}{}{}{MARK}",
            capture.nonce,
            capture.values.len()
        ))
    })
}

/// A fresh nonce: 16 random lowercase letters.
fn nonce() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..16)
        .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
        .collect()
}

/// The marker at the start of `rest` (just after a NUL): its number and its length after
/// the first NUL.
fn marker_number(rest: &str, nonce: &str) -> Option<(usize, usize)> {
    let after = rest.strip_prefix(nonce)?;
    let digits = after.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || !after[digits..].starts_with(MARK) {
        return None;
    }
    Some((after[..digits].parse().ok()?, nonce.len() + digits + 1))
}

/// `text` with each marker replaced by the value it stands for; any other NUL is an error.
fn resolve(text: &str, nonce: &str, values: &[String]) -> Result<String, Error> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        match marker_number(after, nonce).filter(|&(n, _)| n >= 1 && n <= values.len()) {
            Some((n, len)) => {
                out.push_str(&values[n - 1]);
                rest = &after[len..];
            }
            None => return Err(nul_in_value(out.len())),
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The error of a value that holds a NUL character at byte `at`.
pub(crate) fn nul_in_value(at: usize) -> Error {
    script_error(&format!(
        "a printed value holds a NUL character (at byte {at}), which no process can receive \
         in its arguments, environment or script; remove it from the value (for binary data, \
         pass a file path instead)"
    ))
}

/// A rendered script: the text `sh` reads and the environment that carries its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Script {
    pub text: String,
    pub env: Vec<(String, String)>,
}

/// Renders a shell script so that no value becomes script text (see the module docs).
/// `stdin_values`: whether the process's standard input may carry values (a script reading
/// its code from standard input is then refused).
pub(crate) fn render_script(
    tmpl: &Tmpl,
    scope: &Value,
    stdin_values: bool,
) -> Result<Script, Error> {
    // A script with no template syntax prints no value: it is its own text, with nothing to
    // bind (what `bind` refuses needs a value, or values on standard input). A no-op rerun of
    // thousands of shell stages renders each script this way.
    if let Tmpl::Literal(text) = tmpl {
        if !stdin_values && !text.contains(MARK) {
            return Ok(Script {
                text: text.clone(),
                env: Vec::new(),
            });
        }
    }
    struct Reset(Option<Capture>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let previous = self.0.take();
            CAPTURE.with(|c| *c.borrow_mut() = previous);
        }
    }
    let nonce = nonce();
    let previous = CAPTURE.with(|c| {
        c.borrow_mut().replace(Capture {
            nonce: nonce.clone(),
            values: Vec::new(),
        })
    });
    let reset = Reset(previous);
    let rendered = tmpl.render(scope);
    let values = CAPTURE
        .with(|c| c.borrow_mut().take())
        .map(|c| c.values)
        .unwrap_or_default();
    drop(reset);
    bind(&rendered?, values, &nonce, stdin_values)
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

/// The interpreter whose code the next argument will be, when the arguments so far name one
/// and end with its code flag (`["python3", "-c"]`, `["perl", "-ne"]`).
pub(crate) fn code_argument(argv: &[String]) -> Option<&str> {
    let program = argv.first()?;
    let name = program.rsplit('/').next().unwrap_or(program);
    let (letters, long) = interpreter(name)?;
    (argv.len() > 1 && is_code_flag(&argv[argv.len() - 1], letters, long)).then_some(name)
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

/// Replaces each marker of `text` with a reference to the variable holding its value, and
/// refuses the values whose place makes them code (see [`Use`]).
fn bind(text: &str, values: Vec<String>, nonce: &str, stdin_values: bool) -> Result<Script, Error> {
    let (out, findings) = read(text, values.len(), nonce, stdin_values)?;
    let chars: Vec<char> = text.chars().collect();
    let line = |at: usize| {
        chars[..at.min(chars.len())]
            .iter()
            .filter(|&&c| c == '\n')
            .count()
            + 1
    };
    for finding in &findings {
        let value = finding.value.and_then(|n| values.get(n - 1));
        let refused = match (&finding.usage, value) {
            (Use::Code(_), Some(_)) => true,
            (Use::Code(_), None) => !values.is_empty() || stdin_values,
            (Use::Arithmetic(_), Some(v)) => !is_integer(v),
            (Use::Name(_), Some(v)) => !is_name(v),
            _ => false,
        };
        if refused {
            let message = finding
                .usage
                .message(finding.value.is_some(), value.map(String::as_str));
            return Err(script_error(&format!(
                "line {} of the script: {message}",
                line(finding.at)
            )));
        }
    }
    let env = values
        .into_iter()
        .enumerate()
        .map(|(k, value)| (format!("{VARIABLE_PREFIX}{}", k + 1), value))
        .collect();
    Ok(Script { text: out, env })
}

/// An integer as bash's arithmetic reads one without evaluating anything.
fn is_integer(value: &str) -> bool {
    let digits = value.trim().trim_start_matches(['-', '+']);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// A variable name.
fn is_name(value: &str) -> bool {
    let mut chars = value.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What a value's place in a script makes of it, where that is more than data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Use {
    /// Code another program runs (the phrase names it): a value there is refused.
    Code(String),
    /// Arithmetic, which bash evaluates as code (`a[$(cmd)]`): the value must be an integer.
    Arithmetic(&'static str),
    /// A variable name, whose subscript bash evaluates: the value must be a name.
    Name(&'static str),
}

impl Use {
    /// The message of a value refused here (`valued`: a value stands here; else the code is
    /// read from standard input), with the value when it is known.
    pub(crate) fn message(&self, valued: bool, value: Option<&str>) -> String {
        let shown = |v: &str| {
            let mut short: String = v.chars().take(40).collect();
            if short.len() < v.len() {
                short.push_str("...");
            }
            format!("{short:?}")
        };
        match self {
            Use::Code(what) if valued => format!(
                "a value is printed into {what}, where it would run as code; pass it as data \
                 instead: as an argument after the code (`sh -c 'echo \"$1\"' _ \"{{{{ v }}}}\"`), \
                 or in an environment variable the code reads"
            ),
            Use::Code(what) => format!(
                "{what}, and values are passed to this process, so they could become that \
                 code; give the code as its own text (`sh -c '...'`) and the values as arguments"
            ),
            Use::Arithmetic(place) => format!(
                "a value is printed into arithmetic ({place}), which bash evaluates as code \
                 (`a[$(cmd)]` runs cmd), so it must be an integer{}",
                value.map_or(String::new(), |v| format!(", not {}", shown(v)))
            ),
            Use::Name(place) => format!(
                "a value is printed as a variable name ({place}), whose subscript bash \
                 evaluates as code, so it must be a name{}",
                value.map_or(String::new(), |v| format!(", not {}", shown(v)))
            ),
        }
    }
}

/// A value (or a program reading its code from standard input) whose place is more than data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// The value, numbered from 1; none for a program that reads its code from its input.
    pub value: Option<usize>,
    /// Where: the index of the character in the script text (of the word, in an argv).
    pub at: usize,
    pub usage: Use,
}

/// A word of a simple command as `sh` will see it: its literal text (quotes removed, a
/// marker as NUL) and the values in it.
#[derive(Debug, Default, Clone)]
pub(crate) struct Word {
    pub text: String,
    /// Each value: its number, where it is, and where its NUL is in `text` (none when it
    /// stands in a nested command substitution).
    pub values: Vec<(usize, usize, Option<usize>)>,
    pub start: usize,
    /// It holds a process substitution (`<( )`) that prints a value.
    pub procsub: bool,
}

impl Word {
    /// A word of an argv: its text, and whether a value was printed into it.
    pub(crate) fn argument(text: &str, index: usize, valued: bool) -> Word {
        Word {
            text: text.to_string(),
            values: if valued {
                vec![(0, index, None)]
            } else {
                Vec::new()
            },
            start: index,
            procsub: false,
        }
    }
}

/// The simple command being read at one level of nesting.
#[derive(Default)]
struct Frame {
    words: Vec<Word>,
    current: Option<Word>,
    /// The next word is the target of a redirection.
    redirect_next: bool,
    /// Its standard input is redirected or piped.
    stdin: bool,
    /// Inside `[[ ]]`.
    dbracket: bool,
    /// A process substitution's frame.
    procsub: bool,
}

/// The simple commands of a script, read as the script is, and what they make of values.
struct Commands {
    frames: Vec<Frame>,
    findings: Vec<Finding>,
    /// Whether the script's own standard input counts as possibly carrying values.
    stdin_top: bool,
}

impl Commands {
    fn new(stdin_top: bool) -> Self {
        Commands {
            frames: vec![Frame {
                stdin: stdin_top,
                ..Frame::default()
            }],
            findings: Vec::new(),
            stdin_top,
        }
    }

    fn frame(&mut self) -> &mut Frame {
        if self.frames.is_empty() {
            self.frames.push(Frame::default());
        }
        self.frames.last_mut().expect("a frame")
    }

    fn word(&mut self, at: usize) -> &mut Word {
        self.frame().current.get_or_insert_with(|| Word {
            start: at,
            ..Word::default()
        })
    }

    fn push_char(&mut self, at: usize, c: char) {
        self.word(at).text.push(c);
    }

    fn in_dbracket(&self) -> bool {
        self.frames.last().is_some_and(|f| f.dbracket)
    }

    fn marker(&mut self, n: usize, at: usize) {
        let depth = self.frames.len();
        for (k, frame) in self.frames.iter_mut().enumerate() {
            let word = frame.current.get_or_insert_with(|| Word {
                start: at,
                ..Word::default()
            });
            if k + 1 == depth {
                word.values.push((n, at, Some(word.text.len())));
                word.text.push(MARK);
            } else {
                word.values.push((n, at, None));
            }
        }
        // A value inside a process substitution marks the word that holds it.
        let subs: Vec<usize> = (1..depth).filter(|&k| self.frames[k].procsub).collect();
        for k in subs {
            if let Some(word) = self.frames[k - 1].current.as_mut() {
                word.procsub = true;
            }
        }
    }

    fn end_word(&mut self) {
        let frame = self.frame();
        if let Some(word) = frame.current.take() {
            if frame.redirect_next {
                frame.redirect_next = false;
                return;
            }
            if frame.words.is_empty() && word.text == "[[" {
                frame.dbracket = true;
            }
            if word.text == "]]" {
                frame.dbracket = false;
            }
            frame.words.push(word);
        }
    }

    /// A redirection operator (`<` when `input`): the next word is its target.
    fn redirect(&mut self, input: bool) {
        let frame = self.frame();
        if frame
            .current
            .as_ref()
            .is_some_and(|w| w.values.is_empty() && w.text.bytes().all(|b| b.is_ascii_digit()))
        {
            frame.current = None;
        } else if frame.current.is_some() {
            self.end_word();
        }
        let frame = self.frame();
        frame.redirect_next = true;
        frame.stdin |= input;
    }

    fn stdin(&mut self) {
        self.frame().stdin = true;
    }

    fn end_command(&mut self, piped: bool) {
        self.end_word();
        let top = self.frames.len() == 1 && self.stdin_top;
        let frame = self.frame();
        let words = std::mem::take(&mut frame.words);
        let stdin = frame.stdin;
        frame.stdin = piped || top;
        frame.redirect_next = false;
        frame.dbracket = false;
        analyze(&words, stdin, &mut self.findings);
    }

    fn open(&mut self, procsub: bool) {
        self.frames.push(Frame {
            procsub,
            ..Frame::default()
        });
    }

    fn close(&mut self) {
        self.end_command(false);
        if self.frames.len() > 1 {
            self.frames.pop();
        }
    }

    fn finish(mut self) -> Vec<Finding> {
        while self.frames.len() > 1 {
            self.close();
        }
        self.end_command(false);
        self.findings
    }
}

/// Reads `text` the way `sh` does: the text with each marker replaced by its reference, and
/// the places that make a value more than data.
fn read(
    text: &str,
    count: usize,
    nonce: &str,
    stdin_top: bool,
) -> Result<(String, Vec<Finding>), Error> {
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
    let nonce_chars: Vec<char> = nonce.chars().collect();
    let mut out = String::with_capacity(text.len() + count * 8);
    let mut stack: Vec<Context> = vec![Context::Word];
    // Where each open `${` starts (an index of `chars`).
    let mut params: Vec<usize> = Vec::new();
    let mut pending: Vec<Heredoc> = Vec::new();
    let mut commands = Commands::new(stdin_top);
    // Whether the last character ended a word (a `#` there starts a comment).
    let mut word_start = true;
    let mut i = 0;
    // A marker at `i`: its number and the index after it.
    let marker_at = |i: usize| -> Option<(usize, usize)> {
        if chars.get(i) != Some(&MARK) {
            return None;
        }
        let start = i + 1 + nonce_chars.len();
        if chars.get(i + 1..start) != Some(&nonce_chars[..]) {
            return None;
        }
        let digits: String = chars[start..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        let end = start + digits.len();
        if digits.is_empty() || chars.get(end) != Some(&MARK) {
            return None;
        }
        Some((digits.parse().ok()?, end + 1))
    };
    while i < chars.len() {
        if let Some((n, next)) = marker_at(i) {
            if n == 0 || n > count {
                return Err(script_error("a stray marker in the script"));
            }
            let context = *stack.last().unwrap_or(&Context::Word);
            match context {
                Context::Arith => commands.findings.push(Finding {
                    value: Some(n),
                    at: i,
                    usage: Use::Arithmetic("`$(( ))` or `(( ))`"),
                }),
                Context::Param | Context::ParamInDouble => {
                    let inner: String = params
                        .last()
                        .map(|&p| chars[(p + 2).min(i)..i].iter().collect())
                        .unwrap_or_default();
                    if let Some(place) = parameter_arithmetic(&inner) {
                        commands.findings.push(Finding {
                            value: Some(n),
                            at: i,
                            usage: Use::Arithmetic(place),
                        });
                    }
                }
                _ => {}
            }
            if context != Context::Comment {
                commands.marker(n, i);
            }
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
        let previous = i.checked_sub(1).map(|p| chars[p]);
        if matches!(top, Context::Word | Context::Sub | Context::Backtick) {
            let dbracket = commands.in_dbracket();
            match c {
                ' ' | '\t' => commands.end_word(),
                '\n' | ';' => commands.end_command(false),
                '&' if dbracket
                    || matches!(previous, Some('|' | '<' | '>'))
                    || next == Some('>') => {}
                '&' => commands.end_command(false),
                '|' if dbracket || matches!(previous, Some('>')) => {}
                '|' => commands.end_command(next != Some('|') && previous != Some('|')),
                '(' if dbracket || (word_start && next == Some('(')) => {}
                '(' => commands.end_command(false),
                ')' if top == Context::Word && !dbracket => commands.end_command(false),
                '<' | '>' if dbracket || next == Some('(') => {}
                '<' if next == Some('<') && chars.get(i + 2) != Some(&'<') => commands.stdin(),
                '<' if previous == Some('<') => {}
                '<' | '>' if matches!(previous, Some('<' | '>' | '&')) => {}
                '<' | '>' => commands.redirect(c == '<'),
                _ => {}
            }
        }
        match top {
            Context::Comment => {
                if c == '\n' {
                    stack.pop();
                    out.push(c);
                    i += 1;
                    word_start = true;
                    i = heredoc_bodies(
                        &chars,
                        i,
                        &mut pending,
                        &mut out,
                        (nonce, count),
                        &reference,
                    )?;
                    continue;
                }
            }
            Context::Single => {
                if c == '\'' {
                    stack.pop();
                } else {
                    commands.push_char(i, c);
                }
            }
            Context::Double | Context::ParamInDouble => match c {
                '\\' => {
                    out.push(c);
                    if let Some(n) = next {
                        if n != MARK {
                            out.push(n);
                            commands.push_char(i, n);
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
                    params.pop();
                }
                '`' => {
                    stack.push(Context::Backtick);
                    commands.open(false);
                }
                '$' => {
                    if let Some(pushed) = dollar(&chars, i, true) {
                        out.push_str(&chars[i..i + pushed.1].iter().collect::<String>());
                        open_context(pushed.0, i, &mut params, &mut commands);
                        i += pushed.1;
                        stack.push(pushed.0);
                        continue;
                    }
                    commands.push_char(i, c);
                }
                _ => commands.push_char(i, c),
            },
            Context::Word | Context::Sub | Context::Param | Context::Backtick | Context::Arith => {
                match c {
                    '\\' => {
                        out.push(c);
                        if let Some(n) = next {
                            if n != MARK {
                                out.push(n);
                                if n != '\n' {
                                    commands.push_char(i, n);
                                }
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
                        commands.close();
                    }
                    '`' => {
                        stack.push(Context::Backtick);
                        commands.open(false);
                    }
                    '$' => {
                        if let Some((context, len)) = dollar(&chars, i, false) {
                            out.push_str(&chars[i..i + len].iter().collect::<String>());
                            open_context(context, i, &mut params, &mut commands);
                            i += len;
                            stack.push(context);
                            word_start = true;
                            continue;
                        }
                        commands.push_char(i, c);
                    }
                    '(' if word_start
                        && next == Some('(')
                        && matches!(top, Context::Word | Context::Sub) =>
                    {
                        // `(( ))` (and `for ((`): arithmetic.
                        out.push_str("((");
                        i += 2;
                        stack.push(Context::Arith);
                        continue;
                    }
                    '<' | '>'
                        if next == Some('(')
                            && matches!(top, Context::Word | Context::Sub | Context::Backtick) =>
                    {
                        // A process substitution: a nested script.
                        out.push(c);
                        out.push('(');
                        i += 2;
                        stack.push(Context::Sub);
                        commands.word(i);
                        commands.open(true);
                        word_start = true;
                        continue;
                    }
                    ')' if top == Context::Arith && next == Some(')') => {
                        stack.pop();
                        out.push_str("))");
                        i += 2;
                        continue;
                    }
                    ')' if top == Context::Sub => {
                        stack.pop();
                        commands.close();
                    }
                    '}' if top == Context::Param => {
                        stack.pop();
                        params.pop();
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
                        i = heredoc_bodies(
                            &chars,
                            i,
                            &mut pending,
                            &mut out,
                            (nonce, count),
                            &reference,
                        )?;
                        continue;
                    }
                    c if matches!(top, Context::Param | Context::Arith)
                        || !(c.is_whitespace() || ";&|()<>".contains(c)) =>
                    {
                        commands.push_char(i, c);
                    }
                    _ => {}
                }
                word_start = c.is_whitespace() || ";&|()<>".contains(c);
            }
        }
        out.push(c);
        i += 1;
    }
    Ok((out, commands.finish()))
}

/// A context just opened at `i`: a `${` remembers where it starts, a `$(` reads a nested
/// script.
fn open_context(context: Context, i: usize, params: &mut Vec<usize>, commands: &mut Commands) {
    match context {
        Context::Param | Context::ParamInDouble => params.push(i),
        Context::Sub => commands.open(false),
        _ => {}
    }
}

/// Whether a value printed after `inner` (the text after `${`) is read as arithmetic: in an
/// open subscript (`${a[`) or in an offset or length (`${x:`, `${x:1:`).
fn parameter_arithmetic(inner: &str) -> Option<&'static str> {
    let name = inner.trim_start_matches(['#', '!']);
    let end = name
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(name.len());
    if end == 0 {
        return None;
    }
    let rest = &name[end..];
    if let Some(subscript) = rest.strip_prefix('[') {
        if !subscript.contains(']') {
            return Some("an array subscript `${a[...]}`");
        }
    }
    let rest = rest
        .strip_prefix('[')
        .and_then(|r| r.find(']').map(|e| &r[e + 1..]))
        .unwrap_or(rest);
    let offset = rest.strip_prefix(':')?;
    (!offset.starts_with(['-', '=', '?', '+'])).then_some("the offset or length `${x:...}`")
}

/// Words that start or continue a compound command before the command itself.
const RESERVED: [&str; 11] = [
    "!", "{", "}", "then", "do", "else", "elif", "if", "while", "until", "time",
];

/// The operators of `[[ ]]` that read their operands as arithmetic.
const ARITHMETIC_OPERATORS: [&str; 6] = ["-eq", "-ne", "-lt", "-le", "-gt", "-ge"];

/// The name a program word runs: its last path component.
fn program_name(text: &str) -> &str {
    text.rsplit('/').next().unwrap_or(text)
}

/// The index of the `=` of an assignment word (`NAME=`, `NAME[...]=`, `NAME+=`), with the
/// span of its subscript.
fn assignment(text: &str) -> Option<(usize, Option<std::ops::Range<usize>>)> {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    if end == 0 || text.as_bytes()[0].is_ascii_digit() {
        return None;
    }
    let mut rest = end;
    let mut subscript = None;
    if text[rest..].starts_with('[') {
        let close = text[rest..].find(']')? + rest;
        subscript = Some(rest + 1..close);
        rest = close + 1;
    }
    if text[rest..].starts_with("+=") {
        Some((rest + 1, subscript))
    } else if text[rest..].starts_with('=') {
        Some((rest, subscript))
    } else {
        None
    }
}

/// What one simple command makes of the values in its words (`stdin`: its standard input is
/// redirected or piped).
pub(crate) fn analyze(words: &[Word], stdin: bool, findings: &mut Vec<Finding>) {
    let text = |k: usize| words.get(k).map_or("", |w| w.text.as_str());
    let each = |k: usize, usage: Use, findings: &mut Vec<Finding>| {
        if let Some(word) = words.get(k) {
            for &(n, at, _) in &word.values {
                findings.push(Finding {
                    value: Some(n),
                    at,
                    usage: usage.clone(),
                });
            }
        }
    };
    let mut p = 0;
    while p < words.len() && RESERVED.contains(&text(p)) {
        p += 1;
    }
    if text(p) == "[[" {
        for k in p + 1..words.len() {
            if ARITHMETIC_OPERATORS.contains(&text(k - 1))
                || ARITHMETIC_OPERATORS.contains(&text(k + 1))
            {
                each(k, Use::Arithmetic("an operand of `[[ -eq ]]`"), findings);
            } else if text(k - 1) == "-v" {
                each(k, Use::Name("`[[ -v ]]`"), findings);
            }
        }
        return;
    }
    // Assignments before the command: a value in a subscript is arithmetic.
    while let Some(word) = words.get(p) {
        let Some((_, subscript)) = assignment(&word.text) else {
            break;
        };
        subscript_values(word, subscript.as_ref(), findings);
        p += 1;
    }
    // `builtin eval`, `command eval`: the builtin is still run.
    let mut q = p;
    while matches!(text(q), "builtin" | "command") {
        q += 1;
        while text(q) == "-p" {
            q += 1;
        }
    }
    let p = if words.get(q).is_some() { q } else { p };
    let Some(first) = words.get(p) else { return };
    match program_name(&first.text) {
        "eval" => {
            for k in p + 1..words.len() {
                each(k, Use::Code("the arguments of `eval`".into()), findings);
            }
        }
        "trap" => {
            let action = (p + 1..words.len()).find(|&k| !text(k).starts_with('-'));
            if let Some(k) = action {
                each(k, Use::Code("the action of `trap`".into()), findings);
            }
        }
        "let" => {
            for k in p + 1..words.len() {
                each(k, Use::Arithmetic("`let`"), findings);
            }
        }
        "declare" | "typeset" | "local" | "readonly" | "export" => {
            let mut integer = false;
            for word in &words[p + 1..] {
                if word.values.is_empty() && word.text.starts_with(['-', '+']) {
                    integer |= word.text.contains('i');
                    continue;
                }
                let split = assignment(&word.text);
                for &(n, at, pos) in &word.values {
                    let usage = match (&split, pos) {
                        (Some((_, Some(sub))), Some(pos)) if sub.contains(&pos) => {
                            Use::Arithmetic("an array subscript")
                        }
                        (Some((eq, _)), Some(pos)) if pos > *eq => {
                            if integer {
                                Use::Arithmetic("the value of `declare -i`")
                            } else {
                                continue;
                            }
                        }
                        _ => Use::Name("a name `declare` defines"),
                    };
                    findings.push(Finding {
                        value: Some(n),
                        at,
                        usage,
                    });
                }
            }
        }
        "read" | "mapfile" | "readarray" => {
            for k in p + 1..words.len() {
                let option_value = [
                    "-d", "-i", "-n", "-N", "-p", "-t", "-u", "-O", "-s", "-C", "-c",
                ]
                .contains(&text(k - 1));
                if !option_value && !text(k).starts_with('-') {
                    each(k, Use::Name("a name `read` sets"), findings);
                } else if text(k - 1) == "-a" {
                    each(k, Use::Name("a name `read -a` sets"), findings);
                }
            }
        }
        "printf" if text(p + 1) == "-v" => {
            each(p + 2, Use::Name("`printf -v`"), findings);
        }
        "test" | "[" => {
            for k in p + 1..words.len() {
                if text(k - 1) == "-v" {
                    each(k, Use::Name("`test -v`"), findings);
                }
            }
        }
        "source" | "." if words.get(p + 1).is_some_and(|w| w.procsub) => {
            each(
                p + 1,
                Use::Code("the script `source` reads".into()),
                findings,
            );
        }
        _ => {}
    }
    programs(words, p, stdin, findings);
}

/// The values in a word's subscript (`a[...]=`) are arithmetic.
fn subscript_values(
    word: &Word,
    subscript: Option<&std::ops::Range<usize>>,
    findings: &mut Vec<Finding>,
) {
    let Some(sub) = subscript else { return };
    for &(n, at, pos) in &word.values {
        if pos.is_some_and(|pos| sub.contains(&pos)) {
            findings.push(Finding {
                value: Some(n),
                at,
                usage: Use::Arithmetic("an array subscript"),
            });
        }
    }
}

/// Interpreters, the flag letters (or long flags) after which their code follows.
const INTERPRETERS: [(&str, &str, &[&str]); 13] = [
    ("python", "c", &[]),
    ("python2", "c", &[]),
    ("python3", "c", &[]),
    ("pypy3", "c", &[]),
    ("node", "ep", &["--eval", "--print"]),
    ("nodejs", "ep", &["--eval", "--print"]),
    ("deno", "", &["eval"]),
    ("perl", "eE", &[]),
    ("ruby", "e", &[]),
    ("php", "r", &[]),
    ("lua", "e", &[]),
    ("Rscript", "e", &[]),
    ("osascript", "e", &[]),
];

/// The interpreter a program name is, with its code flags.
fn interpreter(name: &str) -> Option<(&'static str, &'static [&'static str])> {
    let bare = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    INTERPRETERS
        .iter()
        .find(|(n, _, _)| *n == name || (*n == bare && name.starts_with("python")))
        .map(|(_, letters, long)| (*letters, *long))
}

/// Whether `flag` is a code flag of an interpreter: a long flag of its list, or a cluster of
/// single letters that ends with one of its code letters (`-c`, `-pe`, `-lne`).
fn is_code_flag(flag: &str, letters: &str, long: &[&str]) -> bool {
    if long.contains(&flag) {
        return true;
    }
    let Some(cluster) = flag.strip_prefix('-') else {
        return false;
    };
    !cluster.is_empty()
        && !cluster.starts_with('-')
        && cluster.chars().all(|c| c.is_ascii_alphabetic())
        && cluster.ends_with(|c: char| letters.contains(c))
}

/// The index of the code argument of an interpreter at `k`, or whether it reads its code from
/// its input: `Err(true)` when it does, `Err(false)` when it runs a file.
fn interpreter_code(words: &[Word], k: usize, letters: &str, long: &[&str]) -> Result<usize, bool> {
    for (j, word) in words.iter().enumerate().skip(k + 1) {
        let flag = word.text.as_str();
        if is_code_flag(flag, letters, long) {
            return Ok(j + 1);
        }
        if flag == "-" {
            return Err(true);
        }
        if !flag.starts_with('-') {
            return Err(false);
        }
    }
    Err(true)
}

/// Shells, and how one at `k` reads its script: `Ok(index)` of its `-c` script (may be past
/// the end: supplied later), `Err(true)` from its input, `Err(false)` from a file.
fn shell_script(words: &[Word], k: usize) -> Result<usize, (bool, Option<usize>)> {
    let mut reads_command = false;
    let mut reads_input = false;
    let mut takes_value = false;
    let mut j = k + 1;
    while j < words.len() {
        let arg = words[j].text.as_str();
        j += 1;
        if takes_value {
            takes_value = false;
            continue;
        }
        let Some(flags) = arg.strip_prefix('-').or_else(|| arg.strip_prefix('+')) else {
            j -= 1;
            break;
        };
        if flags == "-" || flags.is_empty() {
            break;
        }
        if flags.starts_with('-') {
            continue;
        }
        reads_command |= flags.contains('c');
        reads_input |= flags.contains('s');
        takes_value = flags.ends_with('o') || flags.ends_with('O');
    }
    if reads_command {
        Ok(j)
    } else if reads_input || j >= words.len() {
        Err((true, None))
    } else {
        Err((false, Some(j)))
    }
}

/// Programs anywhere in a command (so behind any wrapper: `timeout`, `env`, `nice`, `sudo`,
/// `xargs`, `exec`, `command`, ...) that run code they are given.
fn programs(words: &[Word], p: usize, stdin: bool, findings: &mut Vec<Finding>) {
    let each = |k: usize, usage: Use, findings: &mut Vec<Finding>| {
        if let Some(word) = words.get(k) {
            for &(n, at, _) in &word.values {
                findings.push(Finding {
                    value: Some(n),
                    at,
                    usage: usage.clone(),
                });
            }
        }
    };
    let from_input = |k: usize, what: String, findings: &mut Vec<Finding>| {
        findings.push(Finding {
            value: None,
            at: words[k].start,
            usage: Use::Code(what),
        });
    };
    // Programs only looked up, not run.
    let first = words.get(p).map_or("", |w| w.text.as_str());
    let second = words.get(p + 1).map_or("", |w| w.text.as_str());
    if matches!(first, "which" | "type" | "hash" | "whereis")
        || first == "command" && matches!(second, "-v" | "-V")
    {
        return;
    }
    // `xargs` before a program: its input becomes arguments (`Some(replace string)`).
    let mut xargs: Option<Option<String>> = None;
    for k in p..words.len() {
        if !words[k].values.is_empty() {
            continue;
        }
        let name = program_name(&words[k].text);
        if name == "xargs" {
            let mut replace = None;
            for (j, word) in words.iter().enumerate().skip(k + 1) {
                let t = word.text.as_str();
                if t == "-I" {
                    replace = words.get(j + 1).map(|w| w.text.clone());
                } else if let Some(r) = t
                    .strip_prefix("-I")
                    .or_else(|| t.strip_prefix("--replace="))
                {
                    replace = Some(r.to_string());
                } else if t == "-i" || t == "--replace" {
                    replace = Some("{}".into());
                } else if !t.starts_with('-') {
                    break;
                }
            }
            xargs = Some(replace);
            continue;
        }
        if SHELLS.contains(&name) {
            match shell_script(words, k) {
                Ok(script) => {
                    each(
                        script,
                        Use::Code(format!("the script `{name} -c` runs")),
                        findings,
                    );
                    let fed = match (&xargs, words.get(script)) {
                        (Some(_), None) => true,
                        (Some(Some(replace)), Some(word)) => word.text.contains(replace.as_str()),
                        _ => false,
                    };
                    if fed {
                        from_input(
                            k,
                            format!("`xargs` makes its input the script `{name} -c` runs"),
                            findings,
                        );
                    }
                }
                Err((true, _)) if stdin => from_input(
                    k,
                    format!("`{name}` reads the script it runs from its standard input"),
                    findings,
                ),
                Err((false, Some(file))) if words[file].procsub => each(
                    file,
                    Use::Code(format!(
                        "the script `{name}` reads from a process substitution"
                    )),
                    findings,
                ),
                Err(_) => {}
            }
        } else if let Some((letters, long)) = interpreter(name) {
            match interpreter_code(words, k, letters, long) {
                Ok(code) => each(code, Use::Code(format!("the code `{name}` runs")), findings),
                Err(true) if stdin => from_input(
                    k,
                    format!("`{name}` reads the code it runs from its standard input"),
                    findings,
                ),
                Err(_) => {}
            }
        } else if matches!(name, "awk" | "gawk" | "mawk" | "nawk") {
            awk_program(words, k, findings);
        } else if matches!(name, "sed" | "gsed") {
            sed_script(words, k, findings);
        } else if matches!(name, "su" | "runuser" | "flock" | "script") {
            for (j, word) in words.iter().enumerate().skip(k + 1) {
                let t = word.text.as_str();
                if t == "-c" || t == "--command" {
                    each(
                        j + 1,
                        Use::Code(format!("the command `{name} -c` runs")),
                        findings,
                    );
                } else if t.starts_with("--command=") {
                    each(
                        j,
                        Use::Code(format!("the command `{name} -c` runs")),
                        findings,
                    );
                }
            }
        } else if name == "env" {
            for (j, word) in words.iter().enumerate().skip(k + 1) {
                let t = word.text.as_str();
                if t == "-S" || t == "--split-string" {
                    each(
                        j + 1,
                        Use::Code("the command line `env -S` splits".into()),
                        findings,
                    );
                } else if t.starts_with("-S") || t.starts_with("--split-string=") {
                    each(
                        j,
                        Use::Code("the command line `env -S` splits".into()),
                        findings,
                    );
                }
            }
        } else if name == "ssh" || name == "watch" {
            // Their command words are joined into a shell command line.
            let takes: &[&str] = if name == "ssh" {
                &[
                    "-b", "-c", "-D", "-E", "-e", "-F", "-I", "-i", "-J", "-L", "-l", "-m", "-O",
                    "-o", "-p", "-Q", "-R", "-S", "-W", "-w",
                ]
            } else {
                &["-n", "--interval", "-d", "--differences"]
            };
            let mut j = k + 1;
            while j < words.len() && words[j].text.starts_with('-') {
                if words[j].text == "-x" || words[j].text == "--exec" {
                    break;
                }
                j += if takes.contains(&words[j].text.as_str()) {
                    2
                } else {
                    1
                };
            }
            if name == "ssh" {
                j += 1;
            }
            if words
                .get(j.min(words.len().saturating_sub(1)))
                .is_some_and(|w| w.text == "-x")
            {
                continue;
            }
            for m in j..words.len() {
                each(
                    m,
                    Use::Code(format!("the command `{name}` runs through a shell")),
                    findings,
                );
            }
        }
    }
}

/// An awk program given as an argument: a value in it is refused.
fn awk_program(words: &[Word], k: usize, findings: &mut Vec<Finding>) {
    let mut j = k + 1;
    while j < words.len() {
        let t = words[j].text.as_str();
        if t == "--" {
            j += 1;
            break;
        }
        if t == "-f" || t.starts_with("-f") || t == "--file" {
            return;
        }
        if t == "-e" || t == "--source" {
            j += 1;
            break;
        }
        if t == "-v" || t == "-F" {
            j += 2;
            continue;
        }
        if !t.starts_with('-') {
            break;
        }
        j += 1;
    }
    push_code(
        words,
        j,
        "the program `awk` runs (pass a value with `-v name=...` or read it from `ENVIRON`)",
        findings,
    );
}

/// A sed script given as an argument: a value in it is refused (`e` and `s///e` run commands).
fn sed_script(words: &[Word], k: usize, findings: &mut Vec<Finding>) {
    let what = "the script `sed` runs (its `e` command runs shell commands)";
    let mut given = false;
    let mut j = k + 1;
    let mut operand = None;
    while j < words.len() {
        let t = words[j].text.as_str();
        if t == "-e" || t == "--expression" {
            push_code(words, j + 1, what, findings);
            given = true;
            j += 2;
            continue;
        }
        if t.starts_with("--expression=") || (t.starts_with("-e") && t.len() > 2) {
            push_code(words, j, what, findings);
            given = true;
        } else if t == "-f" || t == "--file" || t.starts_with("--file=") {
            given = true;
        } else if !t.starts_with('-') && operand.is_none() {
            operand = Some(j);
        }
        j += 1;
    }
    if let (false, Some(j)) = (given, operand) {
        push_code(words, j, what, findings);
    }
}

fn push_code(words: &[Word], k: usize, what: &str, findings: &mut Vec<Finding>) {
    if let Some(word) = words.get(k) {
        for &(n, at, _) in &word.values {
            findings.push(Finding {
                value: Some(n),
                at,
                usage: Use::Code(what.to_string()),
            });
        }
    }
}

/// A place in a template's source where a value is more than data, found before any run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Review {
    /// The bytes of the source: the `{{ }}` that prints the value, or the program's word.
    pub span: std::ops::Range<usize>,
    pub usage: Use,
    /// A value stands there (else: a program reads its code from its input).
    pub valued: bool,
}

/// Reads a script template's source as [`render_script`] will read its output, each `{{ }}`
/// standing for a value (tags and comments are left out): the places that make a value more
/// than data, in the source. A program reading its code from its input counts only where
/// the script prints a value.
pub(crate) fn review(source: &str) -> Vec<Review> {
    // Only a printed value is reviewed (what `read` finds without one is dropped below): a
    // script that prints none has nothing to review, and is not read.
    if !source.contains("{{") {
        return Vec::new();
    }
    let nonce = "review";
    let mut text = String::with_capacity(source.len());
    // For each character of `text`, the byte of `source` it comes from.
    let mut origin: Vec<usize> = Vec::with_capacity(source.len());
    let mut spans = Vec::new();
    let mut rest = 0;
    while rest < source.len() {
        let tail = &source[rest..];
        let close = if tail.starts_with("{{") {
            Some("}}")
        } else if tail.starts_with("{%") {
            Some("%}")
        } else if tail.starts_with("{#") {
            Some("#}")
        } else {
            None
        };
        if let Some(close) = close {
            let end = tail[2..]
                .find(close)
                .map_or(source.len(), |e| rest + 2 + e + 2);
            if close == "}}" {
                spans.push(rest..end);
                let marker = format!("{MARK}{nonce}{}{MARK}", spans.len());
                for c in marker.chars() {
                    text.push(c);
                    origin.push(rest);
                }
            }
            rest = end;
            continue;
        }
        let c = tail.chars().next().expect("a character");
        if c == MARK {
            return Vec::new();
        }
        text.push(c);
        origin.push(rest);
        rest += c.len_utf8();
    }
    let Ok((_, findings)) = read(&text, spans.len(), nonce, false) else {
        return Vec::new();
    };
    findings
        .into_iter()
        .filter(|f| f.value.is_some() || !spans.is_empty())
        .map(|f| Review {
            span: match f.value {
                Some(n) => spans[n - 1].clone(),
                None => {
                    let start = origin.get(f.at).copied().unwrap_or(0);
                    let end = source[start..]
                        .find(|c: char| c.is_whitespace())
                        .map_or(source.len(), |e| start + e);
                    start..end
                }
            },
            valued: f.value.is_some(),
            usage: f.usage,
        })
        .collect()
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
    (nonce, count): (&str, usize),
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
            let mut rest = line.as_str();
            while let Some(at) = rest.find(MARK) {
                out.push_str(&rest[..at]);
                let after = &rest[at + 1..];
                let (n, len) = marker_number(after, nonce)
                    .filter(|&(n, _)| n >= 1 && n <= count)
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
                rest = &after[len..];
            }
            out.push_str(rest);
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

pub(crate) fn script_error(message: &str) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONCE: &str = "testnonce";

    fn bound(text: &str, values: &[&str]) -> Result<Script, Error> {
        bind(
            text,
            values
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
            NONCE,
            false,
        )
    }

    fn m(n: usize) -> String {
        format!("{MARK}{NONCE}{n}{MARK}")
    }

    #[test]
    fn a_script_without_template_syntax_renders_as_the_full_path_binds_it() {
        let scripts = [
            "echo 7 > out/7.txt",
            "echo \"$HOME\" 'a b' `date` $(( 1 + 2 )) ${x:-y} # note",
            "cat <<EOF\n'q' \"x\" $y\nEOF\necho done",
            "cat <<-END; echo 'q'\n\tline\n\tEND\nsh -c 'echo in'",
            "a=(1 2); echo ${a[0]}; eval \"$a\"",
        ];
        for text in scripts {
            let fast = render_script(&Tmpl::Literal(text.into()), &Value::UNDEFINED, false);
            let full = bound(text, &[]).unwrap();
            assert_eq!(fast.unwrap(), full, "{text:?}");
            assert_eq!(full.text, text);
        }
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
            assert_eq!(bound(&text, &["7"]).unwrap().text, expected, "{text:?}");
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
        assert_eq!(
            resolve(&format!("x{}y", m(1)), NONCE, &["v".into()]).unwrap(),
            "xvy"
        );
        // Data cannot spell a marker: a NUL that is not one is refused, never replaced.
        for text in ["x\u{0}1\u{0}y", "a\u{0}b", &format!("{MARK}other1{MARK}")] {
            let err = resolve(text, NONCE, &["v".into()]).unwrap_err();
            assert!(err.to_string().contains("NUL character"), "{text:?}: {err}");
        }
    }
}
