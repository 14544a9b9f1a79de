//! The engine's overhead on large generated workflows, beside ninja and make when they exist.
//!
//! `cargo bench --bench overhead [-- --sizes 100,1000 --shapes chain,wide --runs 5]`
//!
//! Three shapes at each size N: `chain` (each stage after the previous), `wide` (N independent
//! stages and a final stage after all) and `layers` (about sqrt(N) layers of sqrt(N) stages,
//! each after up to 4 stages of the layer before; the diamond-layers shape). The same graph is
//! written as a workflow of shell stages (`echo i > out/i.txt`, cached), a workflow of template
//! stages, a `build.ninja` and a `Makefile`. Each comparison runs stagegraph and its peer in
//! turn, `--runs` times each (interleaved, so that a burst of load on the machine hits both):
//!
//! - `check` and a dry-run of a fresh folder against `ninja -n` of a fresh folder;
//! - a dry-run after a real run (the rehearsal: the last real run's outputs are read) against
//!   `ninja -n` after a build;
//! - a full run (`--jobs 2`) against `make -j2` and `ninja -j2`;
//! - a no-op rerun (every stage cached) against ninja's and make's no-op;
//! - `plan` and a full run of the template stages, alone.
//!
//! Each figure is the median wall time; the CPU time (user + system) and the peak resident memory
//! of each child come from `wait4`. It prints the figures, the ratios against the targets (the
//! wall ratio with the CPU ratio beside it, which load moves less) and every run of a series
//! that took over twice its median. A peer that is not installed is skipped and said so. It
//! asserts nothing about time.
//!
//! The binary is `STAGEGRAPH_BIN` when set. Otherwise the bench builds the release binary as
//! released for Linux x86_64: with profile-guided optimization, by `scripts/pgo-build.sh`
//! (trained on this benchmark at 1,000 stages and the shipped workflows' tests; it needs
//! `rustup component add llvm-tools`). Where that script cannot run, or with `--no-pgo`, it
//! builds with `cargo build --release --bin stagegraph`, and says which it measures.

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
    /// Build the binary with profile-guided optimization when it can (`--no-pgo`: never).
    pgo: bool,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        sizes: vec![100, 1_000, 10_000],
        shapes: vec![Shape::Chain, Shape::Wide, Shape::Layers],
        runs: 3,
        pgo: true,
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
            "--no-pgo" => options.pgo = false,
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

/// The release binary: `STAGEGRAPH_BIN`, or built now (with a profile when `pgo` and the
/// toolchain can), and what it is.
fn stagegraph_binary(pgo: bool) -> Result<(PathBuf, &'static str), String> {
    if let Some(path) = std::env::var_os("STAGEGRAPH_BIN") {
        // Absolute: the bench runs it from other directories.
        let path = PathBuf::from(path);
        return if path.is_file() {
            fs::canonicalize(&path)
                .map(|path| (path, "STAGEGRAPH_BIN"))
                .map_err(|e| format!("{}: {e}", path.display()))
        } else {
            Err(format!("STAGEGRAPH_BIN={} is not a file", path.display()))
        };
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    if pgo {
        match pgo_build(manifest)? {
            Some(path) => return Ok((path, "release, profile-guided (scripts/pgo-build.sh)")),
            None => eprintln!(
                "measuring the release build without a profile (see above; --no-pgo skips \
                 the attempt)"
            ),
        }
    }
    let status = cargo_here(manifest)
        .args(["build", "--release", "--bin", "stagegraph"])
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
    Ok((path, "release, no profile"))
}

/// The profile-guided release binary `scripts/pgo-build.sh` builds, trained by this very
/// executable; `None` when the toolchain cannot (the script says why) or the build failed.
fn pgo_build(manifest: &Path) -> Result<Option<PathBuf>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut script = Command::new("bash");
    script
        .arg(manifest.join("scripts/pgo-build.sh"))
        .current_dir(manifest)
        .env("PGO_BENCH_EXE", exe);
    for name in cargo_env_set() {
        script.env_remove(name);
    }
    let status = script
        .status()
        .map_err(|e| format!("cannot run scripts/pgo-build.sh: {e}"))?;
    let built = manifest.join("target/pgo/release/stagegraph");
    match status.code() {
        Some(0) if built.is_file() => Ok(Some(built)),
        // 3: no llvm-profdata of the compiler's LLVM, said already.
        Some(3) => Ok(None),
        _ => {
            eprintln!("warning: scripts/pgo-build.sh failed ({status})");
            Ok(None)
        }
    }
}

/// `cargo` run in the package's folder, without what cargo set for this bench's own process.
fn cargo_here(manifest: &Path) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.current_dir(manifest);
    for name in cargo_env_set() {
        command.env_remove(name);
    }
    command
}

/// What cargo set for this bench's own process, to take away from a cargo it runs: build
/// scripts that watch these variables (`CARGO_PKG_NAME`, ...) would otherwise rebuild their
/// crates on every bench run.
fn cargo_env_set() -> Vec<String> {
    std::env::vars_os()
        .map(|(name, _)| name.to_string_lossy().into_owned())
        .filter(|name| {
            name.starts_with("CARGO_PKG_")
                || name.starts_with("CARGO_MANIFEST_")
                || [
                    "CARGO_CRATE_NAME",
                    "CARGO_BIN_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                    "OUT_DIR",
                ]
                .contains(&name.as_str())
        })
        .collect()
}

fn on_path(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One timed run of a child: wall time, CPU time and the child's peak resident memory.
#[derive(Clone, Copy)]
struct Sample {
    wall: Duration,
    cpu: Duration,
    max_rss_kb: i64,
}

fn timeval(tv: libc::timeval) -> Duration {
    Duration::from_secs(tv.tv_sec.max(0) as u64) + Duration::from_micros(tv.tv_usec.max(0) as u64)
}

/// Run a command to completion with its output discarded (stderr kept for a failure), timing it
/// and reading its CPU time and peak memory from `wait4`.
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
    let wall = started.elapsed();
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
        wall,
        cpu: timeval(usage.ru_utime) + timeval(usage.ru_stime),
        max_rss_kb: usage.ru_maxrss,
    })
}

/// The runs of one command.
struct Series {
    name: &'static str,
    samples: Vec<Sample>,
}

impl Series {
    fn new(name: &'static str) -> Self {
        Series {
            name,
            samples: Vec::new(),
        }
    }

    fn median_of(&self, value: impl Fn(&Sample) -> Duration) -> Option<Duration> {
        let mut values: Vec<Duration> = self.samples.iter().map(value).collect();
        values.sort();
        values.get(values.len() / 2).copied()
    }

    fn wall(&self) -> Option<Duration> {
        self.median_of(|s| s.wall)
    }

    fn cpu(&self) -> Option<Duration> {
        self.median_of(|s| s.cpu)
    }

    fn peak_kb(&self) -> i64 {
        self.samples.iter().map(|s| s.max_rss_kb).max().unwrap_or(0)
    }

    /// The runs that took over twice the series' median: (run number, its time, the median).
    fn spikes(&self) -> Vec<(usize, Duration, Duration)> {
        let Some(median) = self.wall() else {
            return Vec::new();
        };
        self.samples
            .iter()
            .enumerate()
            .filter(|(_, s)| s.wall > median * 2)
            .map(|(i, s)| (i + 1, s.wall, median))
            .collect()
    }
}

/// A command of a comparison: how to bring the folder to its starting state, and the command.
struct Contender<'a> {
    reset: Box<dyn Fn() -> Result<(), String> + 'a>,
    command: Box<dyn Fn() -> Command + 'a>,
}

/// Run each contender `runs` times, in turn (a, b, c, a, b, c, ...).
fn interleaved(
    runs: usize,
    dir: &Path,
    contenders: &mut [(&mut Series, Contender)],
) -> Result<(), String> {
    for _ in 0..runs {
        for (series, contender) in contenders.iter_mut() {
            (contender.reset)()?;
            let sample = measure(&mut (contender.command)(), dir)?;
            series.samples.push(sample);
        }
    }
    Ok(())
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

/// One row of the table: every series of one shape at one size.
struct Row {
    shape: &'static str,
    n: usize,
    check: Series,
    plan: Series,
    dry_run: Series,
    rehearsal: Series,
    ninja_n: Series,
    ninja_n_built: Series,
    run: Series,
    make: Series,
    ninja: Series,
    template: Series,
    noop: Series,
    ninja_noop: Series,
    make_noop: Series,
}

impl Row {
    fn new(shape: &'static str, n: usize) -> Self {
        Row {
            shape,
            n,
            check: Series::new("check"),
            plan: Series::new("plan"),
            dry_run: Series::new("dry-run"),
            rehearsal: Series::new("dry-run after a run"),
            ninja_n: Series::new("ninja -n"),
            ninja_n_built: Series::new("ninja -n after a build"),
            run: Series::new("run (cmd)"),
            make: Series::new("make -j2"),
            ninja: Series::new("ninja -j2"),
            template: Series::new("run (tmpl)"),
            noop: Series::new("no-op"),
            ninja_noop: Series::new("ninja no-op"),
            make_noop: Series::new("make no-op"),
        }
    }

    fn all(&self) -> [&Series; 13] {
        [
            &self.check,
            &self.plan,
            &self.dry_run,
            &self.rehearsal,
            &self.ninja_n,
            &self.ninja_n_built,
            &self.run,
            &self.make,
            &self.ninja,
            &self.template,
            &self.noop,
            &self.ninja_noop,
            &self.make_noop,
        ]
    }

    fn ours(&self) -> [&Series; 6] {
        [
            &self.check,
            &self.plan,
            &self.dry_run,
            &self.rehearsal,
            &self.noop,
            &self.run,
        ]
    }

    /// stagegraph's peak over the runs that start no process (check, plan, dry-runs, no-op),
    /// against ninja's over the same (`ninja -n` and its no-op).
    fn peaks(&self) -> (i64, i64) {
        let ours = self.ours()[..5].iter().map(|s| s.peak_kb()).max();
        let ninja = [&self.ninja_n, &self.ninja_n_built, &self.ninja_noop]
            .iter()
            .map(|s| s.peak_kb())
            .max();
        (ours.unwrap_or(0), ninja.unwrap_or(0))
    }
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

const OURS: &[&str] = &[".stagegraph"];
const NINJA: &[&str] = &["out", ".ninja_log", ".ninja_deps"];

impl Bench {
    fn stagegraph<'a>(&'a self, args: &'a [&'a str]) -> Box<dyn Fn() -> Command + 'a> {
        Box::new(move || {
            let mut command = Command::new(&self.bin);
            command
                .args(args)
                .env("XDG_CONFIG_HOME", &self.home)
                .env("HOME", &self.home)
                .env_remove("STAGEGRAPH_PATH");
            command
        })
    }

    fn peer<'a>(program: &'a str, args: &'a [&'a str]) -> Box<dyn Fn() -> Command + 'a> {
        Box::new(move || {
            let mut command = Command::new(program);
            command.args(args);
            command
        })
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
        let mut row = Row::new(shape.name(), n);
        let dir = dir.as_path();
        let keep = || Box::new(|| Ok(())) as Box<dyn Fn() -> Result<(), String>>;
        let fresh = |paths: &'static [&'static str]| {
            Box::new(move || clean(dir, paths)) as Box<dyn Fn() -> Result<(), String>>
        };
        let fresh_all = || {
            Box::new(move || {
                clean(dir, OURS)?;
                clean(dir, NINJA)
            }) as Box<dyn Fn() -> Result<(), String>>
        };
        let ours = |reset, args| Contender {
            reset,
            command: self.stagegraph(args),
        };
        let peer = |reset, program, args| Contender {
            reset,
            command: Self::peer(program, args),
        };

        // What reads the workflow and runs nothing, against `ninja -n` of a fresh folder.
        fresh_all()()?;
        {
            let mut list = vec![
                (&mut row.check, ours(keep(), &["check", "cmd.toml"])),
                (&mut row.plan, ours(keep(), &["plan", "cmd.toml"])),
                (
                    &mut row.dry_run,
                    ours(
                        fresh(OURS),
                        &["run", "cmd.toml", "--dry-run", "--jobs", "2"],
                    ),
                ),
            ];
            if self.ninja {
                list.push((&mut row.ninja_n, peer(fresh(NINJA), "ninja", &["-n"])));
            }
            interleaved(runs, dir, &mut list)?;
        }

        // Full runs of command stages.
        {
            let run_args: &[&str] = &["run", "cmd.toml", "--jobs", "2"];
            let mut list = vec![(&mut row.run, ours(fresh(OURS), run_args))];
            if self.make {
                list.push((&mut row.make, peer(fresh(NINJA), "make", &["-j2"])));
            }
            if self.ninja {
                list.push((&mut row.ninja, peer(fresh(NINJA), "ninja", &["-j2"])));
            }
            interleaved(runs, dir, &mut list)?;
        }

        // No-op reruns: each tool's last full run is in place (stagegraph's cache, the peers'
        // outputs and ninja's log), and neither reads the other's.
        {
            let mut list = vec![(
                &mut row.noop,
                ours(keep(), &["run", "cmd.toml", "--jobs", "2"]),
            )];
            if self.ninja {
                // The last full run above was ninja's when it is installed.
                list.push((&mut row.ninja_noop, peer(keep(), "ninja", &["-j2"])));
            }
            if self.make {
                list.push((&mut row.make_noop, peer(keep(), "make", &["-j2"])));
            }
            interleaved(runs, dir, &mut list)?;
        }

        // A dry-run after real runs: it reads the last real run's outputs.
        {
            let mut list = vec![(
                &mut row.rehearsal,
                ours(keep(), &["run", "cmd.toml", "--dry-run", "--jobs", "2"]),
            )];
            if self.ninja {
                list.push((&mut row.ninja_n_built, peer(keep(), "ninja", &["-n"])));
            }
            interleaved(runs, dir, &mut list)?;
        }

        // Template stages: no process at all.
        interleaved(
            runs,
            dir,
            &mut [(
                &mut row.template,
                ours(fresh(OURS), &["run", "tmpl.toml", "--jobs", "2"]),
            )],
        )?;
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

fn megabytes(kb: i64) -> String {
    match kb {
        0 => "n/a".into(),
        kb => format!("{:.1}", kb as f64 / 1024.0),
    }
}

fn ratio_of(ours: Option<Duration>, theirs: Option<Duration>) -> Option<f64> {
    match (ours, theirs) {
        (Some(a), Some(b)) if !b.is_zero() => Some(a.as_secs_f64() / b.as_secs_f64()),
        _ => None,
    }
}

/// `0.85x (cpu 0.60x) ok`: the wall ratio, the CPU ratio, and whether the wall ratio is within
/// the target.
fn against(ours: &Series, theirs: &Series, target: f64) -> String {
    let Some(wall) = ratio_of(ours.wall(), theirs.wall()) else {
        return "n/a".into();
    };
    let cpu = ratio_of(ours.cpu(), theirs.cpu())
        .map(|r| format!(" (cpu {r:.2}x)"))
        .unwrap_or_default();
    let verdict = if wall <= target { "ok" } else { "over" };
    format!("{wall:.2}x{cpu} {verdict}")
}

fn print_table(rows: &[Row]) {
    let header = [
        "shape",
        "N",
        "check",
        "plan",
        "dry-run",
        "ninja -n",
        "dry-run, run before",
        "ninja -n, built",
        "run (cmd)",
        "make -j2",
        "ninja -j2",
        "run (tmpl)",
        "no-op",
        "ninja no-op",
        "make no-op",
        "peak MB",
        "ninja peak MB",
    ];
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(ToString::to_string).collect()];
    for row in rows {
        let (ours, ninja) = row.peaks();
        lines.push(vec![
            row.shape.to_string(),
            row.n.to_string(),
            seconds(row.check.wall()),
            seconds(row.plan.wall()),
            seconds(row.dry_run.wall()),
            seconds(row.ninja_n.wall()),
            seconds(row.rehearsal.wall()),
            seconds(row.ninja_n_built.wall()),
            seconds(row.run.wall()),
            seconds(row.make.wall()),
            seconds(row.ninja.wall()),
            seconds(row.template.wall()),
            seconds(row.noop.wall()),
            seconds(row.ninja_noop.wall()),
            seconds(row.make_noop.wall()),
            megabytes(ours),
            megabytes(ninja),
        ]);
    }
    print_aligned(&lines);
    println!();
    let mut ratios: Vec<Vec<String>> = vec![[
        "shape",
        "N",
        "dry-run / ninja -n (<= 1)",
        "check / ninja -n (<= 1)",
        "no-op / ninja no-op (<= 1)",
        "run / make -j2 (<= 1)",
        "peak / ninja peak (<= 2)",
    ]
    .iter()
    .map(ToString::to_string)
    .collect()];
    for row in rows {
        let (ours, ninja) = row.peaks();
        let memory = match (ours, ninja) {
            (_, 0) | (0, _) => "n/a".to_string(),
            (a, b) => {
                let r = a as f64 / b as f64;
                format!("{r:.2}x {}", if r <= 2.0 { "ok" } else { "over" })
            }
        };
        ratios.push(vec![
            row.shape.to_string(),
            row.n.to_string(),
            against(&row.dry_run, &row.ninja_n, 1.0),
            against(&row.check, &row.ninja_n, 1.0),
            against(&row.noop, &row.ninja_noop, 1.0),
            against(&row.run, &row.make, 1.0),
            memory,
        ]);
    }
    print_aligned(&ratios);
    println!();
    let mut spikes = Vec::new();
    for row in rows {
        for series in row.all() {
            for (run, time, median) in series.spikes() {
                spikes.push(format!(
                    "- {} {} {}: run {run} took {}, {:.1}x the median {}",
                    row.shape,
                    row.n,
                    series.name,
                    seconds(Some(time)),
                    time.as_secs_f64() / median.as_secs_f64(),
                    seconds(Some(median))
                ));
            }
        }
    }
    if spikes.is_empty() {
        println!("No run took over twice the median of its series.");
    } else {
        println!("Runs over twice the median of their series:");
        for line in spikes {
            println!("{line}");
        }
    }
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
    let (bin, built) = stagegraph_binary(options.pgo)?;
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
        "stagegraph {} ({built}); median of {} run(s) of each command",
        bench.bin.display(),
        bench.runs
    );
    let absent: Vec<&str> = [("ninja", bench.ninja), ("make", bench.make)]
        .iter()
        .filter(|(_, found)| !found)
        .map(|(name, _)| *name)
        .collect();
    for name in &absent {
        eprintln!("{name} is not installed: its columns are skipped (n/a)");
    }

    // `check` of the shipped workflows: every workflow on an otherwise empty search path.
    let shipped_dir = root.path().join("shipped");
    fs::create_dir_all(&shipped_dir).map_err(|e| e.to_string())?;
    let mut shipped = Series::new("check of the shipped workflows");
    interleaved(
        bench.runs,
        &shipped_dir,
        &mut [(
            &mut shipped,
            Contender {
                reset: Box::new(|| Ok(())),
                command: bench.stagegraph(&["check"]),
            },
        )],
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
        "\n`check` of the shipped workflows: {} (peak {} MB)",
        seconds(shipped.wall()),
        megabytes(shipped.peak_kb())
    );
    for name in absent {
        println!("{name} is not installed: its columns are n/a.");
    }
    Ok(())
}
