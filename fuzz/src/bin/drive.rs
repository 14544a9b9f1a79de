//! A mutation fuzzer for the targets on stable Rust, where libFuzzer's instrumentation is not
//! available: it mutates the seed corpus (byte flips, insertions and deletions, splices of two
//! inputs, tokens of the target's language) for a while, runs the target on each input, and
//! saves every input that panics, aborts or runs too long.
//!
//!   drive <target> [--seconds N] [--seed N] [--corpus DIR]... [--out DIR]
//!
//! The corpus is `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/`; findings go to
//! `fuzz/findings/<target>/` (a panic's message beside its input). Without coverage feedback
//! the driver keeps a random share of what it made as further seeds, so mutations stack.
//! It prints executions, executions per second and findings, and exits 1 if it found any.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Tokens worth inserting, whatever the target: the syntax of TOML, templates, shells,
/// Markdown, YAML and JSON, and numbers at the edges.
const TOKENS: &[&str] = &[
    "{{",
    "}}",
    "{%",
    "%}",
    "{#",
    "#}",
    "}}e",
    "{{-",
    "-}}",
    "|",
    "| tojson",
    "| safe",
    " ~ ",
    "namespace(s='x')",
    "{% set ns.s = ns.s ~ ns.s %}",
    "range(100000)",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "\"",
    "'",
    "'''",
    "\"\"\"",
    "\\",
    "\n",
    "\r\n",
    "\t",
    " ",
    "=",
    ".",
    ",",
    ":",
    "-",
    "--- ",
    "---\n",
    "```",
    "```json\n",
    "# ",
    "## ",
    "$(",
    "`",
    "${",
    "<<EOF\n",
    "<<'EOF'\n",
    "EOF\n",
    "&&",
    ";",
    "0",
    "-1",
    "1e11",
    "9223372036854775807",
    "18446744073709551616",
    "null",
    "true",
    "[stages.a]\n",
    "[workflow]\n",
    "shell = ",
    "foreach = ",
    "if = ",
    "after = ",
    "extends = ",
    "uses = ",
    "with = ",
    "schema = ",
    "minLength",
    "minItems",
    "\"type\":",
    "\"role\":\"user\"",
    "\"message\":",
    "\"content\":",
    "ms",
    "s",
    "m",
    "h",
    "d",
    "w",
    "\u{0}",
    "\u{feff}",
    "é",
    "\u{10ffff}",
    "inputs.",
    "stages.",
    "item",
    "loop.",
    "range(",
    "ns.",
];

/// The input being run, for the signal handler that saves it when the target aborts.
static CURRENT: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static CURRENT_LEN: AtomicUsize = AtomicUsize::new(0);
/// Where the signal handler writes it (a file opened before fuzzing starts).
static CRASH_FD: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Executions so far, watched for a hang.
static EXECUTIONS: AtomicU64 = AtomicU64::new(0);

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

fn mutate(rng: &mut Rng, pool: &[Vec<u8>], input: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        let at = rng.below(out.len() + 1);
        match rng.below(9) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] = rng.next() as u8;
            }
            2 if !out.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(out.len());
                out.drain(at.min(end)..end);
            }
            3 => out.insert(at, rng.next() as u8),
            4 | 5 => {
                let token = TOKENS[rng.below(TOKENS.len())];
                out.splice(at..at, token.bytes());
            }
            6 if !out.is_empty() => {
                // Repeat a piece (nesting, long runs).
                let start = rng.below(out.len());
                let end = (start + 1 + rng.below(32)).min(out.len());
                let piece = out[start..end].to_vec();
                for _ in 0..1 + rng.below(8) {
                    out.splice(at..at, piece.iter().copied());
                }
            }
            7 if !pool.is_empty() => {
                // Splice in a piece of another input.
                let other = &pool[rng.below(pool.len())];
                if !other.is_empty() {
                    let start = rng.below(other.len());
                    let end = (start + 1 + rng.below(256)).min(other.len());
                    out.splice(at..at, other[start..end].iter().copied());
                }
            }
            _ if !out.is_empty() => {
                // Cut the input short (a torn line, an unterminated construct).
                out.truncate(at);
            }
            _ => out.extend_from_slice(TOKENS[rng.below(TOKENS.len())].as_bytes()),
        }
    }
    out.truncate(64 * 1024);
    // Every target reads text first: an input that is not UTF-8 mostly stops at the first
    // check, so most mutants are mended back into text (some are left as bytes).
    if rng.below(16) != 0 && std::str::from_utf8(&out).is_err() {
        out = String::from_utf8_lossy(&out).into_owned().into_bytes();
    }
    out
}

fn read_corpus(dirs: &[PathBuf]) -> Vec<Vec<u8>> {
    let mut pool = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            if let Ok(bytes) = std::fs::read(&path) {
                pool.push(bytes);
            }
        }
    }
    if pool.is_empty() {
        pool.push(Vec::new());
    }
    pool
}

/// A name for an input: 16 hex digits of its FNV-1a hash.
fn name_of(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

extern "C" fn on_fatal_signal(signal: libc::c_int) {
    let fd = CRASH_FD.load(Ordering::SeqCst);
    let ptr = CURRENT.load(Ordering::SeqCst);
    let len = CURRENT_LEN.load(Ordering::SeqCst);
    if fd != usize::MAX && !ptr.is_null() {
        // SAFETY: only async-signal-safe calls; the input outlives the run that set it.
        unsafe {
            libc::write(fd as libc::c_int, ptr.cast(), len);
            libc::fsync(fd as libc::c_int);
        }
    }
    // SAFETY: back to the default action, then the signal again, so the process dies of it.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(target_name) = args.next() else {
        eprintln!("usage: drive <target> [--seconds N] [--seed N] [--corpus DIR]... [--out DIR]");
        eprintln!(
            "targets: {}",
            stagegraph_fuzz::TARGETS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        );
        std::process::exit(2);
    };
    let Some(&(_, target)) = stagegraph_fuzz::TARGETS
        .iter()
        .find(|(n, _)| *n == target_name)
    else {
        eprintln!("no target `{target_name}`");
        std::process::exit(2);
    };
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seconds = 60u64;
    let mut seed = 0x5eed_u64;
    let mut corpus: Vec<PathBuf> = Vec::new();
    let mut out = here.join("findings").join(&target_name);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        match flag.as_str() {
            "--seconds" => seconds = value.parse().expect("--seconds N"),
            "--seed" => seed = value.parse().expect("--seed N"),
            "--corpus" => corpus.push(PathBuf::from(value)),
            "--out" => out = PathBuf::from(value),
            other => panic!("unknown flag {other}"),
        }
    }
    if corpus.is_empty() {
        corpus.push(here.join("corpus").join(&target_name));
        corpus.push(here.join("regressions").join(&target_name));
    }
    let seeds = read_corpus(&corpus);
    std::fs::create_dir_all(&out).expect("the findings folder");

    // An abort (allocation failure, stack overflow) kills the process: the input it was
    // running is written to `pending` first.
    let pending = out.join("pending");
    let file = std::fs::File::create(&pending).expect("the pending file");
    CRASH_FD.store(
        std::os::unix::io::IntoRawFd::into_raw_fd(file) as usize,
        Ordering::SeqCst,
    );
    // SAFETY: the handler only makes async-signal-safe calls.
    unsafe {
        for signal in [libc::SIGABRT, libc::SIGSEGV, libc::SIGBUS, libc::SIGILL] {
            libc::signal(signal, on_fatal_signal as *const () as libc::sighandler_t);
        }
    }
    // A run that takes longer than this is a finding too (the watchdog saves it and stops).
    let slow = Duration::from_secs(10);
    std::thread::spawn(move || {
        let mut last = (EXECUTIONS.load(Ordering::SeqCst), Instant::now());
        loop {
            std::thread::sleep(Duration::from_millis(500));
            let now = EXECUTIONS.load(Ordering::SeqCst);
            if now != last.0 {
                last = (now, Instant::now());
            } else if last.1.elapsed() > slow {
                eprintln!("an input ran longer than {slow:?}: saved in `pending`");
                on_fatal_signal(libc::SIGABRT);
            }
        }
    });
    let quiet = std::sync::atomic::AtomicBool::new(true);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !quiet.load(Ordering::SeqCst) {
            previous(info);
        }
    }));

    let mut rng = Rng(seed | 1);
    let mut pool = seeds.clone();
    let mut findings = 0usize;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    // Seeds first, as they are.
    let mut queue: Vec<Vec<u8>> = seeds;
    let mut executions = 0u64;
    while Instant::now() < deadline {
        let input = match queue.pop() {
            Some(input) => input,
            None => {
                let base = &pool[rng.below(pool.len())];
                mutate(&mut rng, &pool, base)
            }
        };
        CURRENT_LEN.store(input.len(), Ordering::SeqCst);
        CURRENT.store(input.as_ptr().cast_mut(), Ordering::SeqCst);
        let result = std::panic::catch_unwind(|| target(&input));
        CURRENT.store(std::ptr::null_mut(), Ordering::SeqCst);
        executions += 1;
        EXECUTIONS.store(executions, Ordering::SeqCst);
        if let Err(payload) = result {
            let why = payload
                .downcast_ref::<&str>()
                .map(ToString::to_string)
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let name = name_of(&input);
            let path = out.join(&name);
            if !path.exists() {
                findings += 1;
                std::fs::write(&path, &input).expect("save a finding");
                std::fs::write(out.join(format!("{name}.panic")), &why).expect("save its panic");
                eprintln!("panic ({name}): {why}");
            }
            continue;
        }
        // Keep some of what was made, so mutations stack; the pool stays bounded.
        if rng.below(64) == 0 {
            if pool.len() < 4096 {
                pool.push(input);
            } else {
                let i = rng.below(pool.len());
                pool[i] = input;
            }
        }
    }
    let _ = std::fs::remove_file(&pending);
    let elapsed = started.elapsed().as_secs_f64();
    let mut stdout = std::io::stdout();
    let _ = writeln!(
        stdout,
        "{target_name}: {executions} executions in {elapsed:.0}s ({:.0}/s), {findings} finding(s)",
        executions as f64 / elapsed
    );
    std::process::exit(i32::from(findings > 0));
}
