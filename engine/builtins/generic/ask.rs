//! Built-in: ask.
//!
//! Asks the person running the workflow a question with declared choices; the output is the
//! chosen choice, a string. On a terminal it prompts (on stderr, reading a line of stdin);
//! otherwise the answer comes from `--answer STAGE_ID=VALUE`, then `--yes` (the choice named by
//! `yes`, by default the first), then the declared `default`, the safe answer. An explicit
//! `--answer` or `--yes` is taken on a terminal too, without prompting. A dry-run never prompts:
//! it takes the answer a run off a terminal would. Inside a `foreach`, `--answer` answers every
//! item, and a terminal is asked once per item.
//!
//! The run answers it, not the built-in's `run`: the answer depends on the stage's id and on the
//! command line (see [`answer`]). `check` knows the output's type, an enum of the choices, and
//! that `default` and `yes` are among them ([`output_schema_for`], [`problems`]).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::sync::Mutex;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde_json::{json, Value};

use crate::builtins::args::{self, parse};
use crate::builtins::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult};
use crate::diag::DiagnosticKind;

pub(crate) const NAME: &str = "ask";

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![Builtin {
        name: NAME,
        description: "Ask the person a question with declared choices; the output is the choice.",
        writes: false,
        with_schema: args::schema::<AskArgs>,
        with_parse: args::parses::<AskArgs>,
        output_schema,
        run,
    }]
}

/// A question with declared choices.
#[derive(serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AskArgs {
    /// The question, as the person reads it.
    question: String,
    /// The answers that may be given; the output is one of them.
    #[schemars(length(min = 1), extend("uniqueItems" = true))]
    choices: Vec<String>,
    /// The answer taken when nobody answers (off a terminal, without --answer or --yes): the safe
    /// one.
    default: String,
    /// The choice --yes selects (default: the first choice).
    #[schemars(transform = args::not_null)]
    yes: Option<String>,
}

fn output_schema() -> Value {
    json!({
        "type": "string",
        "description": "The chosen choice.",
    })
}

/// The output's schema for these arguments: an enum of the choices when they are written out.
pub(crate) fn output_schema_for(with: Option<&IndexMap<String, Value>>) -> Value {
    let mut schema = output_schema();
    if let Some(choices) = literal_choices(with) {
        schema["enum"] = json!(choices);
        if let Some(first) = choices.first() {
            schema["examples"] = json!([first]);
        }
    }
    schema
}

fn literal_choices(with: Option<&IndexMap<String, Value>>) -> Option<Vec<String>> {
    let choices = with?.get("choices")?.as_array()?;
    choices
        .iter()
        .map(|c| {
            c.as_str()
                .filter(|s| !crate::template::compiled::has_syntax(s))
                .map(str::to_string)
        })
        .collect()
}

/// What `check` can tell of the arguments as written: `default` and `yes` must be choices.
/// Each problem names its argument.
pub(crate) fn problems(
    with: Option<&IndexMap<String, Value>>,
) -> Vec<(&'static str, DiagnosticKind)> {
    let Some(choices) = literal_choices(with) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for key in ["default", "yes"] {
        let Some(value) = with.and_then(|w| w.get(key)).and_then(Value::as_str) else {
            continue;
        };
        if crate::template::compiled::has_syntax(value) || choices.iter().any(|c| c == value) {
            continue;
        }
        out.push((
            key,
            DiagnosticKind::NotAChoice {
                key,
                value: value.to_string(),
                choices: choices.clone(),
            },
        ));
    }
    out
}

/// Not reached by a run, which answers through [`answer`]; another caller (`try`) is refused.
fn run(_with: &Value, _ctx: &BuiltinCtx) -> BuiltinResult {
    Err(BuiltinError::new(
        "`ask` is answered by the run as a stage's own action, not through another built-in",
    ))
}

/// What the command line says about answers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Answers {
    /// `--answer STAGE_ID=VALUE`.
    pub given: BTreeMap<String, String>,
    /// `--yes`.
    pub yes: bool,
    /// A person can be asked: stdin and stderr are terminals.
    pub terminal: bool,
}

/// Where an answer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Answer,
    Yes,
    Default,
    Terminal,
}

impl Source {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Source::Answer => "from --answer",
            Source::Yes => "from --yes",
            Source::Default => "the default",
            Source::Terminal => "on the terminal",
        }
    }
}

impl Answers {
    /// Where the answer of stage `stage` comes from (a dry-run never asks).
    pub(crate) fn source(&self, stage: &str, dry_run: bool) -> Source {
        if self.given.contains_key(stage) {
            Source::Answer
        } else if self.yes {
            Source::Yes
        } else if self.terminal && !dry_run {
            Source::Terminal
        } else {
            Source::Default
        }
    }
}

/// One prompt at a time, whatever runs in parallel.
static PROMPT: Mutex<()> = Mutex::new(());

/// The answer of stage `stage` to the question in `with`, and where it came from. `ask_person`
/// prompts on the terminal and reads one line (`None` at the end of input).
pub(crate) fn answer(
    stage: &str,
    with: &Value,
    answers: &Answers,
    dry_run: bool,
    ask_person: &dyn Fn(&str) -> Option<String>,
) -> Result<(String, Source), BuiltinError> {
    let args: AskArgs = parse(NAME, with)?;
    if args.choices.is_empty() {
        return Err(BuiltinError::new("`ask` needs at least one choice"));
    }
    let pick = |value: &str, what: &str| {
        choose(&args.choices, value, false).ok_or_else(|| {
            BuiltinError::new(format!(
                "{what} `{value}` is not one of the choices of `{stage}` ({})",
                args.choices.join(", ")
            ))
        })
    };
    let default = pick(&args.default, "the default")?;
    let source = answers.source(stage, dry_run);
    let chosen = match source {
        Source::Answer => pick(&answers.given[stage], "--answer")?,
        Source::Yes => match &args.yes {
            Some(yes) => pick(yes, "`yes`")?,
            None => args.choices[0].clone(),
        },
        Source::Default => default,
        Source::Terminal => {
            let _one = PROMPT
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut prompt = format!(
                "{} [{}] (default: {default}): ",
                args.question.trim_end(),
                args.choices.join("/")
            );
            loop {
                match ask_person(&prompt) {
                    None => break default,
                    Some(line) if line.trim().is_empty() => break default,
                    Some(line) => match choose(&args.choices, line.trim(), true) {
                        Some(choice) => break choice,
                        None => {
                            prompt = format!(
                                "please answer one of {} (default: {default}): ",
                                args.choices.join(", ")
                            );
                        }
                    },
                }
            }
        }
    };
    Ok((chosen, source))
}

/// The choice a reply names: itself, the same letters in another case, or (typed on a terminal)
/// the one choice it begins.
fn choose(choices: &[String], reply: &str, prefix: bool) -> Option<String> {
    if let Some(exact) = choices.iter().find(|c| *c == reply) {
        return Some(exact.clone());
    }
    let lower = reply.to_lowercase();
    let same: Vec<&String> = choices
        .iter()
        .filter(|c| c.to_lowercase() == lower)
        .collect();
    if same.len() == 1 {
        return Some(same[0].clone());
    }
    if !prefix || lower.is_empty() {
        return None;
    }
    let starting: Vec<&String> = choices
        .iter()
        .filter(|c| c.to_lowercase().starts_with(&lower))
        .collect();
    (starting.len() == 1).then(|| starting[0].clone())
}

/// Prompt on stderr and read one line of stdin.
pub(crate) fn ask_on_terminal(prompt: &str) -> Option<String> {
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(crate::floor::secrets::redact(prompt).as_bytes());
    let _ = stderr.flush();
    drop(stderr);
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with() -> Value {
        json!({ "question": "Delete?", "choices": ["y", "n", "individual"], "default": "n" })
    }

    fn never(_: &str) -> Option<String> {
        panic!("nobody may be asked")
    }

    #[test]
    fn off_a_terminal_the_answer_then_yes_then_the_default() {
        let mut answers = Answers::default();
        assert_eq!(
            answer("s", &with(), &answers, false, &never).unwrap(),
            ("n".into(), Source::Default)
        );
        answers.yes = true;
        assert_eq!(
            answer("s", &with(), &answers, false, &never).unwrap(),
            ("y".into(), Source::Yes)
        );
        answers.given.insert("s".into(), "Individual".into());
        assert_eq!(
            answer("s", &with(), &answers, false, &never).unwrap(),
            ("individual".into(), Source::Answer)
        );
        answers.given.insert("s".into(), "maybe".into());
        let error = answer("s", &with(), &answers, false, &never).unwrap_err();
        assert!(error.0.contains("`maybe` is not one of"), "{error}");
    }

    #[test]
    fn yes_selects_the_declared_choice() {
        let answers = Answers {
            yes: true,
            ..Answers::default()
        };
        let mut with = with();
        with["yes"] = json!("individual");
        assert_eq!(
            answer("s", &with, &answers, false, &never).unwrap().0,
            "individual"
        );
    }

    #[test]
    fn a_terminal_is_asked_until_it_names_a_choice() {
        let answers = Answers {
            terminal: true,
            ..Answers::default()
        };
        let replies = Mutex::new(vec!["maybe\n".to_string(), "i\n".to_string()]);
        let prompts = Mutex::new(Vec::new());
        let ask = |prompt: &str| {
            prompts.lock().unwrap().push(prompt.to_string());
            let mut replies = replies.lock().unwrap();
            (!replies.is_empty()).then(|| replies.remove(0))
        };
        let (chosen, source) = answer("s", &with(), &answers, false, &ask).unwrap();
        assert_eq!((chosen.as_str(), source), ("individual", Source::Terminal));
        let prompts = prompts.into_inner().unwrap();
        assert_eq!(prompts[0], "Delete? [y/n/individual] (default: n): ");
        assert!(
            prompts[1].starts_with("please answer one of"),
            "{prompts:?}"
        );
        // The end of input is the default; a dry-run never asks.
        assert_eq!(
            answer("s", &with(), &answers, false, &|_| None).unwrap().0,
            "n"
        );
        assert_eq!(
            answer("s", &with(), &answers, true, &never).unwrap(),
            ("n".into(), Source::Default)
        );
    }

    #[test]
    fn check_knows_the_choices() {
        let with: IndexMap<String, Value> = serde_json::from_value(
            json!({ "question": "q", "choices": ["y", "n"], "default": "no", "yes": "y" }),
        )
        .unwrap();
        let schema = output_schema_for(Some(&with));
        assert_eq!(schema["enum"], json!(["y", "n"]));
        let problems = problems(Some(&with));
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].0, "default");
        assert!(problems[0].1.to_string().contains("`no`"), "{problems:?}");
    }
}
