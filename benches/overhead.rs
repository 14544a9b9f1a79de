//! The engine's overhead on large generated workflows, beside ninja and make when they exist.
//!
//! `cargo bench --bench overhead [-- --sizes 100,1000 --shapes chain,wide --runs 3]`
//!
//! Three shapes at each size N: `chain` (each stage after the previous), `wide` (N independent
//! stages and a final stage after all) and `layers` (about sqrt(N) layers of sqrt(N) stages,
//! each after up to 4 stages of the layer before). For each it times, as the median of `--runs`
//! runs of the release binary: `check`, `plan`, a full run of N shell stages
//! (`echo i > out/i.txt`, `--jobs 2`), a full run of N template stages (no process), a no-op
//! rerun with every stage cached, and the peak resident memory of those runs (from `wait4`).
//! The same graph as a `build.ninja` and a `Makefile` gives the peers' figures: `ninja -n`,
//! `ninja -j2`, `make -j2` and their no-op reruns; a peer that is not installed prints `n/a`.
//! It prints a table and asserts nothing about time.
//!
//! The binary is `STAGEGRAPH_BIN` when set; otherwise the bench builds it with
//! `cargo build --release --bin stagegraph` and runs it from beside its own executable.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Chain,
    Wide,
    Layers,
}

impl Shape {
    fn parse(text: &str) -> Option<Shape> {
        match text {
            "chain" => Some(Shape::Chain),
            "wide" => Some(Shape::Wide),
            "layers" => Some(Shape::Layers),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Shape::Chain => "chain",
            Shape::Wide => "wide",
            Shape::Layers => "layers",
        }
    }

    /// For each stage, the stages it runs after.
    fn graph(self, n: usize) -> Vec<Vec<usize>> {
        match self {
            Shape::Chain => (0..n)
                .map(|i| if i == 0 { vec![] } else { vec![i - 1] })
                .collect(),
            Shape::Wide => {
                let mut deps: Vec<Vec<usize>> = vec![Vec::new(); n];
                deps.push((0..n).collect());
                deps
            }
            Shape::Layers => {
                let width = (n as f64).sqrt().ceil().max(1.0) as usize;
                (0..n)
                    .map(|i| {
                        let (layer, position) = (i / width, i % width);
                        if layer == 0 {
                            return Vec::new();
                        }
                        let mut deps: Vec<usize> = (0..4.min(width))
                            .map(|k| (layer - 1) * width + (position + k) % width)
                            .collect();
                        deps.sort_unstable();
                        deps.dedup();
                        deps
                    })
                    .collect()
            }
        }
    }
}

struct Options {
    sizes: Vec<usize>,
    shapes: Vec<Shape>,
    runs: usize,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        sizes: vec![100, 1_000, 10_000],
        shapes: vec![Shape::Chain, Shape::Wide, Shape::Layers],
        runs: 3,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            // cargo bench passes --bench to every bench target.
            "--bench" => {}
            "--sizes" => {
                options.sizes = value("--sizes")?
                    .split(',')
                    .map(|s| s.trim().replace('_', "").parse::<usize>())
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("--sizes: {e}"))?;
            }
            "--shapes" => {
                options.shapes = value("--shapes")?
                    .split(',')
                    .map(|s| Shape::parse(s.trim()).ok_or(format!("unknown shape `{s}`")))
                    .collect::<Result<_, _>>()?;
            }
            "--runs" => {
                options.runs = value("--runs")?
                    .parse::<usize>()
                    .map_err(|e| format!("--runs: {e}"))?
                    .max(1);
            }
            other if other.starts_with('-') => return Err(format!("unknown option `{other}`")),
            // A name filter from `cargo bench NAME`: not used.
            _ => {}
        }
    }
    Ok(options)
}

/// The release binary: `STAGEGRAPH_BIN`, or built now and found beside this executable.
fn stagegraph_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("STAGEGRAPH_BIN") {
        // Absolute: the bench runs it from other directories.
        let path = PathBuf::from(path);
        return if path.is_file() {
            fs::canonicalize(&path).map_err(|e| format!("{}: {e}", path.display()))
        } else {
            Err(format!("STAGEGRAPH_BIN={} is not a file", path.display()))
        };
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args(["build", "--release", "--bin", "stagegraph"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    // What cargo set for this bench's own process: build scripts that watch these variables
    // (`CARGO_PKG_NAME`, ...) would otherwise rebuild their crates on every bench run.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || [
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "OUT_DIR",
            ]
            .contains(&name.as_ref())
        {
            build.env_remove(name.as_ref());
        }
    }
    let status = build
        .status()
        .map_err(|e| format!("cannot run cargo to build the binary: {e}"))?;
    if !status.success() {
        return Err("`cargo build --release --bin stagegraph` failed".into());
    }
    // This executable is <target>/release/deps/overhead-<hash>.
    let path = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("stagegraph")))
        .filter(|p| p.is_file())
        .ok_or(
            "cannot find target/release/stagegraph beside the bench executable; \
             set STAGEGRAPH_BIN to the release binary",
        )?;
    Ok(path)
}

fn on_path(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One timed run of a child: wall time and the child's peak resident memory.
struct Sample {
    time: Duration,
    max_rss_kb: i64,
}

/// Run a command to completion with its output discarded (stderr kept for a failure), timing it
/// and reading its own peak memory from `wait4`.
fn measure(command: &mut Command, dir: &Path) -> Result<Sample, String> {
    let log = dir.join(".bench-stderr");
    let stderr = fs::File::create(&log).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let child = command
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("cannot start {command:?}: {e}"))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet reaped (the Child is never waited on).
    let reaped = unsafe { libc::wait4(pid, &raw mut status, 0, &raw mut usage) };
    let time = started.elapsed();
    drop(child);
    if reaped != pid {
        return Err(format!("wait4 failed for {command:?}"));
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        let text = fs::read_to_string(&log).unwrap_or_default();
        let tail: String = text.lines().rev().take(10).collect::<Vec<_>>().join("\n");
        return Err(format!("{command:?} failed (status {status}):\n{tail}"));
    }
    Ok(Sample {
        time,
        max_rss_kb: usage.ru_maxrss,
    })
}

/// The median time of `runs` runs, each after `reset`, and the largest peak memory among them.
fn median(
    runs: usize,
    dir: &Path,
    mut reset: impl FnMut() -> Result<(), String>,
    mut command: impl FnMut() -> Command,
) -> Result<Sample, String> {
    let mut samples = Vec::new();
    for _ in 0..runs {
        reset()?;
        samples.push(measure(&mut command(), dir)?);
    }
    let max_rss_kb = samples.iter().map(|s| s.max_rss_kb).max().unwrap_or(0);
    let mut times: Vec<Duration> = samples.iter().map(|s| s.time).collect();
    times.sort();
    Ok(Sample {
        time: times[times.len() / 2],
        max_rss_kb,
    })
}

fn stage_id(i: usize) -> String {
    format!("s{i}")
}

/// The workflow: shell stages writing `out/i.txt`, or template stages.
fn workflow_toml(name: &str, deps: &[Vec<usize>], template: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "[workflow]\ndescription = \"{name}: {} generated stages\"\n",
        deps.len()
    );
    let _ = writeln!(
        out,
        "[inputs.word]\ntype = \"string\"\ndefault = \"stage\"\n"
    );
    for (i, after) in deps.iter().enumerate() {
        let _ = writeln!(out, "[stages.{}]", stage_id(i));
        if !after.is_empty() {
            let list: Vec<String> = after
                .iter()
                .map(|&d| format!("\"{}\"", stage_id(d)))
                .collect();
            let _ = writeln!(out, "after = [{}]", list.join(", "));
        }
        if template {
            let _ = writeln!(
                out,
                "template = {{ inline = \"{{{{ inputs.word }}}} {i}\" }}"
            );
        } else {
            let _ = writeln!(out, "shell = \"echo {i} > out/{i}.txt\"");
        }
        let _ = writeln!(out, "cache = true\n");
    }
    out
}

fn ninja_file(deps: &[Vec<usize>]) -> String {
    let mut out = String::from("rule sh\n  command = $cmd\n\n");
    for (i, after) in deps.iter().enumerate() {
        let inputs: Vec<String> = after.iter().map(|d| format!("out/{d}.txt")).collect();
        let implicit = if inputs.is_empty() {
            String::new()
        } else {
            format!(" | {}", inputs.join(" "))
        };
        let _ = writeln!(
            out,
            "build out/{i}.txt: sh{implicit}\n  cmd = echo {i} > out/{i}.txt"
        );
    }
    out
}

fn makefile(deps: &[Vec<usize>]) -> String {
    let all: Vec<String> = (0..deps.len()).map(|i| format!("out/{i}.txt")).collect();
    let mut out = format!("all: {}\n\n", all.join(" "));
    for (i, after) in deps.iter().enumerate() {
        let inputs: Vec<String> = after.iter().map(|d| format!("out/{d}.txt")).collect();
        let _ = writeln!(
            out,
            "out/{i}.txt: {}\n\techo {i} > out/{i}.txt\n",
            inputs.join(" ")
        );
    }
    out
}

/// One row of the table.
#[derive(Default)]
struct Row {
    shape: &'static str,
    n: usize,
    check: Option<Duration>,
    ninja_n: Option<Duration>,
    plan: Option<Duration>,
    run: Option<Duration>,
    make: Option<Duration>,
    ninja: Option<Duration>,
    template: Option<Duration>,
    noop: Option<Duration>,
    ninja_noop: Option<Duration>,
    make_noop: Option<Duration>,
    peak_kb: i64,
}

fn clean(dir: &Path, paths: &[&str]) -> Result<(), String> {
    for path in paths {
        let path = dir.join(path);
        let result = if path.is_dir() {
            fs::remove_dir_all(&path)
        } else if path.exists() {
            fs::remove_file(&path)
        } else {
            Ok(())
        };
        result.map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
    }
    fs::create_dir_all(dir.join("out")).map_err(|e| e.to_string())
}

struct Bench {
    bin: PathBuf,
    ninja: bool,
    make: bool,
    runs: usize,
    home: PathBuf,
}

impl Bench {
    fn stagegraph(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .args(args)
            .env("XDG_CONFIG_HOME", &self.home)
            .env("HOME", &self.home)
            .env_remove("STAGEGRAPH_PATH");
        command
    }

    fn row(&self, root: &Path, shape: Shape, n: usize) -> Result<Row, String> {
        let dir = root.join(format!("{}-{n}", shape.name()));
        fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let deps = shape.graph(n);
        let write = |name: &str, text: String| {
            fs::write(dir.join(name), text).map_err(|e| format!("cannot write {name}: {e}"))
        };
        write("cmd.toml", workflow_toml(shape.name(), &deps, false))?;
        write("tmpl.toml", workflow_toml(shape.name(), &deps, true))?;
        write("build.ninja", ninja_file(&deps))?;
        write("Makefile", makefile(&deps))?;
        let runs = self.runs;
        let mut row = Row {
            shape: shape.name(),
            n,
            ..Row::default()
        };
        let mut peak = |sample: &Sample| row.peak_kb = row.peak_kb.max(sample.max_rss_kb);
        let none = || Ok(());
        let fresh = || clean(&dir, &[".stagegraph", "out", ".ninja_log", ".ninja_deps"]);

        let check = median(runs, &dir, none, || self.stagegraph(&["check", "cmd.toml"]))?;
        peak(&check);
        let plan = median(runs, &dir, none, || self.stagegraph(&["plan", "cmd.toml"]))?;
        peak(&plan);
        let run_args = ["run", "cmd.toml", "--jobs", "2"];
        let run = median(runs, &dir, fresh, || self.stagegraph(&run_args))?;
        peak(&run);
        let noop = median(runs, &dir, none, || self.stagegraph(&run_args))?;
        peak(&noop);
        let template = median(runs, &dir, fresh, || {
            self.stagegraph(&["run", "tmpl.toml", "--jobs", "2"])
        })?;
        peak(&template);
        row.check = Some(check.time);
        row.plan = Some(plan.time);
        row.run = Some(run.time);
        row.noop = Some(noop.time);
        row.template = Some(template.time);

        if self.ninja {
            let ninja = |args: &[&str]| {
                let mut command = Command::new("ninja");
                command.args(args);
                command
            };
            fresh()?;
            row.ninja_n = Some(median(runs, &dir, none, || ninja(&["-n"]))?.time);
            row.ninja = Some(median(runs, &dir, fresh, || ninja(&["-j2"]))?.time);
            row.ninja_noop = Some(median(runs, &dir, none, || ninja(&["-j2"]))?.time);
        }
        if self.make {
            let make = || {
                let mut command = Command::new("make");
                command.arg("-j2");
                command
            };
            row.make = Some(median(runs, &dir, fresh, make)?.time);
            row.make_noop = Some(median(runs, &dir, none, make)?.time);
        }
        Ok(row)
    }
}

fn seconds(time: Option<Duration>) -> String {
    match time {
        None => "n/a".into(),
        Some(t) if t < Duration::from_secs(1) => format!("{:.1} ms", t.as_secs_f64() * 1000.0),
        Some(t) => format!("{:.2} s", t.as_secs_f64()),
    }
}

fn ratio(ours: Option<Duration>, theirs: Option<Duration>) -> String {
    match (ours, theirs) {
        (Some(a), Some(b)) if !b.is_zero() => format!("{:.2}x", a.as_secs_f64() / b.as_secs_f64()),
        _ => "n/a".into(),
    }
}

fn print_table(rows: &[Row]) {
    let header = [
        "shape",
        "N",
        "check",
        "ninja -n",
        "plan",
        "run (cmd)",
        "make -j2",
        "ninja -j2",
        "run (tmpl)",
        "no-op",
        "ninja no-op",
        "make no-op",
        "peak MB",
    ];
    let mut lines: Vec<Vec<String>> = vec![header
        .iter()
        .map(std::string::ToString::to_string)
        .collect()];
    for row in rows {
        lines.push(vec![
            row.shape.to_string(),
            row.n.to_string(),
            seconds(row.check),
            seconds(row.ninja_n),
            seconds(row.plan),
            seconds(row.run),
            seconds(row.make),
            seconds(row.ninja),
            seconds(row.template),
            seconds(row.noop),
            seconds(row.ninja_noop),
            seconds(row.make_noop),
            format!("{:.1}", row.peak_kb as f64 / 1024.0),
        ]);
    }
    print_aligned(&lines);
    println!();
    let mut ratios: Vec<Vec<String>> = vec![[
        "shape",
        "N",
        "check / ninja -n",
        "run / make -j2",
        "run / ninja -j2",
        "no-op / ninja no-op",
    ]
    .iter()
    .map(std::string::ToString::to_string)
    .collect()];
    for row in rows {
        ratios.push(vec![
            row.shape.to_string(),
            row.n.to_string(),
            ratio(row.check, row.ninja_n),
            ratio(row.run, row.make),
            ratio(row.run, row.ninja),
            ratio(row.noop, row.ninja_noop),
        ]);
    }
    print_aligned(&ratios);
}

/// A Markdown table with padded columns (readable as it is, pastable into book/src/benchmarks.md).
fn print_aligned(lines: &[Vec<String>]) {
    let columns = lines.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            lines
                .iter()
                .map(|l| l[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (i, line) in lines.iter().enumerate() {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, &w))| {
                if c < 2 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        println!("| {} |", cells.join(" | "));
        if i == 0 {
            let rule: Vec<String> = widths
                .iter()
                .enumerate()
                .map(|(c, &w)| {
                    if c < 2 {
                        "-".repeat(w)
                    } else {
                        format!("{}:", "-".repeat(w.saturating_sub(1)))
                    }
                })
                .collect();
            println!("| {} |", rule.join(" | "));
        }
    }
}

fn main() {
    if let Err(error) = bench() {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}

fn bench() -> Result<(), String> {
    let options = parse_options()?;
    let bin = stagegraph_binary()?;
    let root = tempfile::tempdir().map_err(|e| format!("cannot make a temp dir: {e}"))?;
    let home = root.path().join("home");
    fs::create_dir_all(&home).map_err(|e| e.to_string())?;
    let bench = Bench {
        bin,
        ninja: on_path("ninja"),
        make: on_path("make"),
        runs: options.runs,
        home,
    };
    eprintln!(
        "stagegraph {}; ninja {}; make {}; median of {} run(s)",
        bench.bin.display(),
        if bench.ninja { "found" } else { "absent" },
        if bench.make { "found" } else { "absent" },
        bench.runs
    );

    // `check` of the shipped workflows: every workflow on an otherwise empty search path.
    let shipped_dir = root.path().join("shipped");
    fs::create_dir_all(&shipped_dir).map_err(|e| e.to_string())?;
    let shipped = median(
        bench.runs,
        &shipped_dir,
        || Ok(()),
        || bench.stagegraph(&["check"]),
    )?;

    let mut rows = Vec::new();
    for &n in &options.sizes {
        for &shape in &options.shapes {
            eprintln!("{} {n} ...", shape.name());
            rows.push(bench.row(root.path(), shape, n)?);
        }
    }
    println!();
    print_table(&rows);
    println!(
        "\n`check` of the shipped workflows: {} (peak {:.1} MB)",
        seconds(Some(shipped.time)),
        shipped.max_rss_kb as f64 / 1024.0
    );
    Ok(())
}
