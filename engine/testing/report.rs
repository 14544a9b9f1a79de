//! The results of a test run, and the forms they are written in: a line per case and the
//! failures' detail (text), JUnit XML, GitHub workflow commands.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{seconds, shown};

/// How a case ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaseOutcome {
    /// Every expectation held (in enough runs, with `--repeat`).
    Passed,
    /// An expectation did not hold.
    Failed,
    /// Not run: the case's `skip` says why.
    Skipped(String),
}

/// One case's result.
#[derive(Debug, Clone)]
pub struct CaseReport {
    /// The test file.
    pub file: PathBuf,
    /// 1-based line and column of the case's `name`.
    pub line: usize,
    /// The column of its `name`.
    pub column: usize,
    /// The case's name.
    pub name: String,
    /// How long its runs took.
    pub duration: Duration,
    /// How it ended.
    pub outcome: CaseOutcome,
    /// What differed from what the case expects, one message each (of the first failed run).
    pub failures: Vec<String>,
    /// Model calls made (not answered from recordings), and their cost in USD.
    pub calls: usize,
    /// What the calls cost, in USD.
    pub cost_usd: f64,
    /// Runs made (`--repeat`).
    pub runs: usize,
    /// Runs that passed.
    pub passes: usize,
}

impl CaseReport {
    /// `PASS [   0.012s] file: name`, the paths relative to `cwd`.
    pub fn line(&self, cwd: &Path) -> String {
        let (word, extra) = match &self.outcome {
            CaseOutcome::Passed => ("PASS", String::new()),
            CaseOutcome::Failed => ("FAIL", String::new()),
            CaseOutcome::Skipped(reason) => ("SKIP", format!(" ({reason})")),
        };
        let repeat = if self.runs > 1 {
            format!(" ({} of {} runs passed)", self.passes, self.runs)
        } else {
            String::new()
        };
        format!(
            "{word:>8} [{:>9}] {}: {}{repeat}{extra}",
            seconds(self.duration),
            shown(&self.file, cwd),
            self.name
        )
    }

    /// The failure's detail: where the case is, then each difference.
    pub fn detail(&self, cwd: &Path) -> String {
        let mut out = format!(
            "--- FAIL: {}: {} ({}:{}:{})\n",
            shown(&self.file, cwd),
            self.name,
            shown(&self.file, cwd),
            self.line,
            self.column
        );
        for failure in &self.failures {
            let _ = writeln!(out, "  {}", failure.replace('\n', "\n  "));
        }
        out
    }

    fn failed(&self) -> bool {
        self.outcome == CaseOutcome::Failed
    }
}

/// Every case's result.
#[derive(Debug, Clone)]
pub struct TestReport {
    /// Each case, in file order.
    pub cases: Vec<CaseReport>,
    /// How long the whole run took.
    pub duration: Duration,
}

impl TestReport {
    pub(crate) fn new(cases: Vec<CaseReport>, duration: Duration) -> Self {
        TestReport { cases, duration }
    }

    /// Cases that passed.
    pub fn passed(&self) -> usize {
        self.count(|case| case.outcome == CaseOutcome::Passed)
    }

    /// Cases that failed.
    pub fn failed(&self) -> usize {
        self.count(CaseReport::failed)
    }

    /// Cases skipped.
    pub fn skipped(&self) -> usize {
        self.count(|case| matches!(case.outcome, CaseOutcome::Skipped(_)))
    }

    fn count(&self, which: impl Fn(&CaseReport) -> bool) -> usize {
        self.cases.iter().filter(|case| which(case)).count()
    }

    /// Model calls made, over every case.
    pub fn calls(&self) -> usize {
        self.cases.iter().map(|case| case.calls).sum()
    }

    /// What they cost, in USD.
    pub fn cost_usd(&self) -> f64 {
        self.cases.iter().map(|case| case.cost_usd).sum()
    }

    /// `N passed, M failed, K skipped in 0.123s; model calls: C ($0.0000)`.
    pub fn summary(&self) -> String {
        let mut line = format!("{} passed, {} failed", self.passed(), self.failed());
        if self.skipped() > 0 {
            let _ = write!(line, ", {} skipped", self.skipped());
        }
        let _ = write!(
            line,
            " in {}; model calls made: {} (${:.4})",
            seconds(self.duration),
            self.calls(),
            self.cost_usd()
        );
        line
    }

    /// JUnit XML: a testsuite per test file, a testcase per case.
    pub fn junit(&self, cwd: &Path) -> String {
        let mut files: Vec<&Path> = Vec::new();
        for case in &self.cases {
            if !files.contains(&case.file.as_path()) {
                files.push(&case.file);
            }
        }
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(
            out,
            "<testsuites name=\"stagegraph test\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{:.3}\">",
            self.cases.len(),
            self.failed(),
            self.skipped(),
            self.duration.as_secs_f64()
        );
        for file in files {
            let cases: Vec<&CaseReport> =
                self.cases.iter().filter(|case| case.file == file).collect();
            let name = xml(&shown(file, cwd));
            let time: f64 = cases.iter().map(|case| case.duration.as_secs_f64()).sum();
            let _ = writeln!(
                out,
                "  <testsuite name=\"{name}\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{time:.3}\">",
                cases.len(),
                cases.iter().filter(|case| case.failed()).count(),
                cases
                    .iter()
                    .filter(|case| matches!(case.outcome, CaseOutcome::Skipped(_)))
                    .count(),
            );
            for case in cases {
                let _ = write!(
                    out,
                    "    <testcase name=\"{}\" classname=\"{name}\" file=\"{name}\" line=\"{}\" time=\"{:.3}\"",
                    xml(&case.name),
                    case.line,
                    case.duration.as_secs_f64()
                );
                match &case.outcome {
                    CaseOutcome::Passed => out.push_str("/>\n"),
                    CaseOutcome::Skipped(reason) => {
                        let _ = writeln!(
                            out,
                            ">\n      <skipped message=\"{}\"/>\n    </testcase>",
                            xml(reason)
                        );
                    }
                    CaseOutcome::Failed => {
                        let first = case
                            .failures
                            .first()
                            .map_or("", |f| f.lines().next().unwrap_or(""));
                        let _ = writeln!(
                            out,
                            ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                            xml(first),
                            xml(&case.failures.join("\n"))
                        );
                    }
                }
            }
            out.push_str("  </testsuite>\n");
        }
        out.push_str("</testsuites>\n");
        out
    }

    /// GitHub workflow commands: an error annotation at the line of each failed case.
    pub fn github(&self, cwd: &Path) -> String {
        let mut out = String::new();
        for case in self.cases.iter().filter(|case| case.failed()) {
            let _ = writeln!(
                out,
                "::error file={},line={},col={},title={}::{}",
                property(&shown(&case.file, cwd)),
                case.line,
                case.column,
                property(&format!("test case `{}` failed", case.name)),
                data(&case.failures.join("\n"))
            );
        }
        out
    }
}

/// Text as XML character data or an attribute value; characters XML 1.0 forbids are dropped.
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
}

/// A workflow command's message, escaped as the runner reads it.
fn data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A workflow command's property value, escaped as the runner reads it.
fn property(text: &str) -> String {
    data(text).replace(':', "%3A").replace(',', "%2C")
}
