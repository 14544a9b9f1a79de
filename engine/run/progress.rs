//! Progress on stderr: a live line on a terminal (what is running, how much is done) with each
//! finished stage printed above it, or one plain line per stage otherwise; JSON events on stdout
//! with `--json`. A `foreach` stage tells how many of its items are done: on the live line,
//! in its SLOW lines, and off a terminal in at most ten `item N/M` lines. Status marks are
//! coloured when the run is asked to colour (see [`Tone`]).

use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::RunOptions;

/// Where a run reports; cheap to clone, shared with sub-workflow runs.
#[derive(Clone)]
pub(crate) struct Reporter {
    quiet: bool,
    json: bool,
    pub(crate) prefix: String,
    live: Option<Arc<Live>>,
    /// Off a terminal: the stages running, watched for those that run long.
    slow: Option<Arc<Slow>>,
    /// Stage lines held back while stages finish back to back (plain output only); written
    /// before any other line, whenever the run waits, and at the end.
    batch: Arc<Mutex<String>>,
    color: bool,
}

/// What a status mark says, as a colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tone {
    Succeeded,
    Cached,
    Skipped,
    Exited,
    Failed,
    Quiet,
}

impl Tone {
    pub(crate) fn of(status: super::record::StageStatus, exited: bool) -> Tone {
        use super::record::StageStatus;
        match status {
            StageStatus::Succeeded if exited => Tone::Exited,
            StageStatus::Succeeded => Tone::Succeeded,
            StageStatus::Cached => Tone::Cached,
            StageStatus::Skipped => Tone::Skipped,
            StageStatus::Failed => Tone::Failed,
            StageStatus::Running | StageStatus::NotRun => Tone::Quiet,
        }
    }
}

/// `text` in the tone's colour when `on`, as it is otherwise.
pub(crate) fn paint(on: bool, tone: Tone, text: &str) -> String {
    use anstyle::AnsiColor;
    if !on {
        return text.to_string();
    }
    let style = match tone {
        Tone::Succeeded => AnsiColor::Green.on_default(),
        Tone::Cached => AnsiColor::Cyan.on_default(),
        Tone::Skipped => AnsiColor::Yellow.on_default(),
        Tone::Exited => AnsiColor::Magenta.on_default(),
        Tone::Failed => AnsiColor::Red.on_default().bold(),
        Tone::Quiet => anstyle::Style::new().dimmed(),
    };
    format!("{style}{text}{style:#}")
}

/// A `foreach` stage says it has done this many tenths of its items at most: ten lines in a
/// CI log for 10 items or 10,000.
const ITEM_LINES: usize = 10;

/// Whether finishing the `done`th of `total` items is one of the at most [`ITEM_LINES`] - 1
/// said off a terminal (the last is said by the stage's own line).
fn item_line_due(done: usize, total: usize) -> bool {
    let step = total.div_ceil(ITEM_LINES).max(1);
    done < total && done.is_multiple_of(step)
}

/// A batch is written once it holds this much.
const BATCH_BYTES: usize = 32 * 1024;

struct Live {
    bar: indicatif::ProgressBar,
    /// The stages running, each with its items done and items in all (`foreach`).
    running: Mutex<BTreeMap<String, Option<(usize, usize)>>>,
}

/// How long a stage runs before a CI log says it still does (like nextest's SLOW).
pub(crate) const SLOW_AFTER: Duration = Duration::from_secs(30);

/// The stages running off a terminal, by name: when each started and how many times it was
/// said to be slow. A thread wakes when the next of them is due and prints its line.
struct Slow {
    after: Duration,
    running: Mutex<SlowState>,
    wake: Condvar,
}

#[derive(Default)]
struct SlowState {
    stages: HashMap<String, SlowStage>,
    done: bool,
}

struct SlowStage {
    started: Instant,
    /// How many times it was said to be slow.
    said: u32,
    /// `foreach`: items done, items in all.
    items: Option<(usize, usize)>,
}

impl Slow {
    fn start(after: Duration, batch: Arc<Mutex<String>>) -> Arc<Slow> {
        let slow = Arc::new(Slow {
            after,
            running: Mutex::default(),
            wake: Condvar::new(),
        });
        let watched = Arc::clone(&slow);
        std::thread::spawn(move || watched.watch(&batch));
        slow
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlowState> {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Print a line for each stage that has run another `after`, until the run is done.
    fn watch(&self, batch: &Mutex<String>) {
        let mut state = self.lock();
        while !state.done {
            let now = Instant::now();
            let mut lines = Vec::new();
            let mut next: Option<Instant> = None;
            let mut names: Vec<&String> = state.stages.keys().collect();
            names.sort();
            let mut said = Vec::new();
            for name in names {
                let stage = &state.stages[name];
                let (started, times) = (stage.started, stage.said);
                let due = started + self.after * (times + 1);
                if due <= now {
                    let items = stage
                        .items
                        .map(|(done, total)| format!(" (item {done}/{total})"))
                        .unwrap_or_default();
                    lines.push(format!(
                        "  … {name} still running after {}{items}",
                        seconds(now - started)
                    ));
                    said.push(name.clone());
                    let again = started + self.after * (times + 2);
                    next = Some(next.map_or(again, |n| n.min(again)));
                } else {
                    next = Some(next.map_or(due, |n| n.min(due)));
                }
            }
            for name in said {
                if let Some(entry) = state.stages.get_mut(&name) {
                    entry.said += 1;
                }
            }
            if !lines.is_empty() {
                let mut batch = batch
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                for line in lines {
                    batch.push_str(&line);
                    batch.push('\n');
                }
                write_stderr(&mut batch);
            }
            // Never longer than `after`: a stage that starts meanwhile is due no sooner than
            // `after` from now, so the watcher is awake in time without being told of it. A
            // stage starting wakes no thread (a chain of 10,000 quick stages woke it 10,000
            // times, three system calls and a context switch a stage).
            let until = next.map_or(now + self.after, |at| at.min(now + self.after));
            let wait = until.saturating_duration_since(Instant::now());
            state = self
                .wake
                .wait_timeout(state, wait)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

impl Reporter {
    pub(crate) fn new(options: &RunOptions, total: usize) -> Self {
        let live = (!options.quiet && !options.json_events && std::io::stderr().is_terminal())
            .then(|| {
                let bar = indicatif::ProgressBar::new(total as u64);
                bar.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{spinner} [{pos}/{len}] {elapsed} {wide_msg}",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
                );
                bar.enable_steady_tick(Duration::from_millis(120));
                Arc::new(Live {
                    bar,
                    running: Mutex::new(BTreeMap::new()),
                })
            });
        let batch: Arc<Mutex<String>> = Arc::default();
        let slow = (live.is_none() && !options.quiet && options.slow_after > Duration::ZERO)
            .then(|| Slow::start(options.slow_after, Arc::clone(&batch)));
        Reporter {
            quiet: options.quiet,
            json: options.json_events,
            prefix: String::new(),
            live,
            slow,
            batch,
            color: options.color,
        }
    }

    /// `text` in the tone's colour, if the run colours its lines.
    pub(crate) fn paint(&self, tone: Tone, text: &str) -> String {
        paint(self.color, tone, text)
    }

    /// The reporter of a sub-workflow run inside stage `parent`.
    pub(crate) fn child(&self, parent: &str) -> Self {
        Reporter {
            prefix: format!("{}{parent}/", self.prefix),
            ..self.clone()
        }
    }

    /// A stage's name as this reporter's lines give it: `parent/stage` inside a sub-workflow.
    fn qualified(&self, id: &str) -> String {
        let mut name = String::with_capacity(self.prefix.len() + id.len());
        name.push_str(&self.prefix);
        name.push_str(id);
        name
    }

    /// Whether events go to stdout (`--json`): they are built only then.
    pub(crate) fn wants_events(&self) -> bool {
        self.json
    }

    /// Whether stage lines are printed at all: they are formatted only then.
    pub(crate) fn shows_lines(&self) -> bool {
        !self.quiet
    }

    /// A line now.
    pub(crate) fn line(&self, text: &str) {
        self.print(text, true);
    }

    /// A line that may wait for the next batch: what a finished stage prints.
    pub(crate) fn stage_line(&self, text: &str) {
        self.print(text, false);
    }

    /// Print a line above the live line, or add it to the batch, written now when `now` or when
    /// the batch is full.
    fn print(&self, text: &str, now: bool) {
        if self.quiet {
            return;
        }
        let text = crate::floor::secrets::redact(text);
        match &self.live {
            Some(live) => live.bar.println(text),
            None => {
                let mut batch = self
                    .batch
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                batch.push_str(&text);
                batch.push('\n');
                if now || batch.len() >= BATCH_BYTES {
                    write_stderr(&mut batch);
                }
            }
        }
    }

    /// Run `f` with the live line cleared (and the held-back lines written), so that what `f`
    /// prints and reads on the terminal is not drawn over.
    pub(crate) fn suspend<T>(&self, f: impl FnOnce() -> T) -> T {
        self.flush();
        match &self.live {
            Some(live) => live.bar.suspend(f),
            None => f(),
        }
    }

    /// Write the held-back lines.
    pub(crate) fn flush(&self) {
        write_stderr(
            &mut self
                .batch
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
    }

    pub(crate) fn event(&self, event: &super::record::Stamped) {
        if self.json {
            let Ok(line) = serde_json::to_string(event) else {
                return;
            };
            let mut line = crate::floor::secrets::redact_string(line);
            line.push('\n');
            let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), line.as_bytes());
        }
    }

    pub(crate) fn started(&self, id: &str) {
        if let Some(slow) = &self.slow {
            // The watcher wakes at least every `after`, in time for this one (see `watch`):
            // starting a stage wakes nothing.
            slow.lock().stages.insert(
                self.qualified(id),
                SlowStage {
                    started: Instant::now(),
                    said: 0,
                    items: None,
                },
            );
        }
        if let Some(live) = &self.live {
            let mut running = live
                .running
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            running.insert(format!("{}{id}", self.prefix), None);
            live.bar.set_message(running_message(&running));
        }
    }

    /// A stage with work (a process, a model call, a sub-workflow, items) starts: off a
    /// terminal a line says so, so a CI log shows what runs during a long stage. On a terminal
    /// the live line shows it.
    pub(crate) fn working(&self, id: &str) {
        if self.live.is_none() && !self.quiet {
            self.stage_line(&format!("  ▸ {}{id} started", self.prefix));
        }
    }

    /// `done` of the `total` items of `foreach` stage `id` are done: the live line and the SLOW
    /// lines say so, and off a terminal an `item N/M` line at each tenth.
    pub(crate) fn item_done(&self, id: &str, done: usize, total: usize) {
        let name = format!("{}{id}", self.prefix);
        if let Some(slow) = &self.slow {
            if let Some(stage) = slow.lock().stages.get_mut(&name) {
                stage.items = Some((done, total));
            }
        }
        match &self.live {
            Some(live) => {
                let mut running = live
                    .running
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(items) = running.get_mut(&name) {
                    *items = Some((done, total));
                }
                live.bar.set_message(running_message(&running));
            }
            None if !self.quiet && item_line_due(done, total) => {
                self.line(&format!("  … {name} item {done}/{total}"));
            }
            None => {}
        }
    }

    /// Stage `id` has finished: the live line counts it, and one that was `watched` (started
    /// with [`Reporter::started`]) is no longer shown or watched as running.
    pub(crate) fn finished(&self, id: &str, watched: bool) {
        if let (Some(slow), true) = (&self.slow, watched) {
            let mut slow = slow.lock();
            match self.prefix.is_empty() {
                true => slow.stages.remove(id),
                false => slow.stages.remove(&self.qualified(id)),
            };
        }
        if let Some(live) = &self.live {
            if self.prefix.is_empty() {
                live.bar.inc(1);
            }
            if watched {
                let mut running = live
                    .running
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                running.remove(&format!("{}{id}", self.prefix));
                live.bar.set_message(running_message(&running));
            }
        }
    }

    /// Clear the live line (the top-level run only).
    pub(crate) fn done(&self) {
        if let (Some(slow), true) = (&self.slow, self.prefix.is_empty()) {
            slow.lock().done = true;
            slow.wake.notify_one();
        }
        self.flush();
        if let (Some(live), true) = (&self.live, self.prefix.is_empty()) {
            live.bar.finish_and_clear();
        }
    }
}

/// One write for the whole batch; a closed stderr is not an error of the run.
fn write_stderr(batch: &mut String) {
    if !batch.is_empty() {
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), batch.as_bytes());
        batch.clear();
    }
}

fn running_message(running: &BTreeMap<String, Option<(usize, usize)>>) -> String {
    if running.is_empty() {
        return String::new();
    }
    let names: Vec<String> = running
        .iter()
        .take(4)
        .map(|(name, items)| match items {
            Some((done, total)) => format!("{name} {done}/{total}"),
            None => name.clone(),
        })
        .collect();
    let more = running.len().saturating_sub(names.len());
    let mut text = format!("running {}", names.join(", "));
    if more > 0 {
        text.push_str(&format!(" (+{more})"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_lines_are_at_most_nine_and_never_the_last() {
        for total in [1, 3, 10, 50, 10_000] {
            let said: Vec<usize> = (1..=total).filter(|&d| item_line_due(d, total)).collect();
            assert!(said.len() < ITEM_LINES, "{total}: {said:?}");
            assert!(!said.contains(&total));
        }
        let fifty: Vec<usize> = (1..=50).filter(|&d| item_line_due(d, 50)).collect();
        assert_eq!(fifty, [5, 10, 15, 20, 25, 30, 35, 40, 45]);
        assert_eq!(
            (1..=3).filter(|&d| item_line_due(d, 3)).collect::<Vec<_>>(),
            [1, 2]
        );
    }

    #[test]
    fn paint_colours_only_when_on() {
        assert_eq!(paint(false, Tone::Failed, "✗"), "✗");
        let on = paint(true, Tone::Succeeded, "✓");
        assert!(on.starts_with("\x1b[") && on.ends_with("\x1b[0m"), "{on:?}");
    }
}
