//! Child processes: an argv list spawned in a process group of its own, stdin fed from a thread,
//! stdout and stderr captured, and the whole group killed on timeout or interruption.
//!
//! Every running group is registered in [`Interrupt`], so a Ctrl-C can kill all of them at once
//! and the blocked waits return.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread;
use std::time::Duration;

/// What to run.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProcessSpec {
    pub argv: Vec<String>,
    pub stdin: Option<Vec<u8>>,
    pub cwd: Option<PathBuf>,
    /// Set on top of the inherited environment.
    pub env: Vec<(String, String)>,
    pub timeout: Option<Duration>,
    /// The most stdout may hold, in bytes: past it, reading stops and the process group is
    /// killed ([`ProcessError::OutputTooLarge`]). `None`: no limit.
    pub max_stdout: Option<u64>,
}

/// Start `program` with `args` in a session of its own (so the caller's end, and the signals
/// it sends its process group, do not reach it), `stdin` written to its standard input, its
/// stdout and stderr going nowhere, and return without waiting for it (`run --detach`).
pub(crate) fn spawn_detached(
    program: &Path,
    args: &[OsString],
    stdin: &[u8],
) -> std::io::Result<()> {
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn()?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin)?;
    }
    Ok(())
}

/// How much of stderr is kept: its last this many bytes (and a note of what was dropped).
pub(crate) const STDERR_KEPT_BYTES: usize = 64 * 1024;

/// What a finished process left.
#[derive(Debug, Clone)]
pub(crate) struct ProcessOutput {
    /// The exit code, or `128 + signal` when a signal ended it.
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl ProcessOutput {
    /// The last lines of stderr, for an error message.
    pub(crate) fn stderr_tail(&self) -> String {
        tail(&self.stderr, 2000)
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ProcessError {
    #[error("empty command")]
    Empty,
    #[error("command `{program}` not found; is it installed and on PATH?")]
    NotFound { program: String },
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("timed out after {}s; killed with its process group", .after.as_secs_f64())]
    TimedOut { after: Duration },
    #[error("interrupted")]
    Interrupted,
    #[error(
        "wrote more than {} to stdout, the output limit; stopped and killed with its process group",
        super::size::format_size(*.limit)
    )]
    OutputTooLarge { limit: u64 },
    #[error("i/o error while running `{program}`: {source}")]
    Io {
        program: String,
        source: std::io::Error,
    },
}

/// Run a process to completion, honouring its timeout and the global interrupt.
pub(crate) fn run(spec: &ProcessSpec) -> Result<ProcessOutput, ProcessError> {
    run_observed(spec, &|_| {})
}

/// [`run`], telling `started` the process's pid as soon as it is running (before it is waited
/// for), so a caller can record it.
pub(crate) fn run_observed(
    spec: &ProcessSpec,
    started: &dyn Fn(u32),
) -> Result<ProcessOutput, ProcessError> {
    let program = spec.argv.first().ok_or(ProcessError::Empty)?;
    let interrupt = Interrupt::global();
    if interrupt.is_set() {
        return Err(ProcessError::Interrupted);
    }
    // The program is looked up on PATH here, once per run for each name, rather than by the
    // spawned child trying every PATH entry in turn: one exec a stage, not one per PATH entry.
    let mut command = match resolve(program, spec) {
        Some(path) => {
            let mut command = Command::new(path);
            command.arg0(program);
            command
        }
        None => Command::new(program),
    };
    command
        .args(&spec.argv[1..])
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // The stage's process dies with the engine (a kill -9 runs no cleanup): a resume must not
    // find the killed run's stage still running beside its own.
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let engine = std::process::id();
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The engine died before the signal was asked for: die now.
                if libc::getppid() as u32 != engine {
                    libc::_exit(137);
                }
                Ok(())
            });
        }
    }
    if let Some(cwd) = &spec.cwd {
        command.current_dir(cwd);
    }
    for (key, value) in &spec.env {
        command.env(key, value);
    }
    let mut child = command.spawn().map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            ProcessError::NotFound {
                program: program.clone(),
            }
        } else {
            ProcessError::Spawn {
                program: program.clone(),
                source,
            }
        }
    })?;
    let pgid = child.id() as i32;
    interrupt.register(pgid);
    started(child.id());
    // A Ctrl-C that arrived between the check above and the registration would otherwise miss
    // this child.
    if interrupt.is_set() {
        kill_group(pgid, libc::SIGKILL);
    }

    let feeder = match (child.stdin.take(), &spec.stdin) {
        (Some(mut pipe), Some(bytes)) => {
            let bytes = bytes.clone();
            // A child that exits without reading its stdin makes this write fail with EPIPE;
            // that is the child's business, not an error of ours.
            Some(thread::spawn(move || {
                let _ = pipe.write_all(&bytes);
            }))
        }
        _ => None,
    };

    let stdout_reader = child.stdout.take().map(|pipe| {
        let limit = spec.max_stdout;
        thread::spawn(move || read_bounded(pipe, limit, pgid))
    });
    let stderr_reader = child
        .stderr
        .take()
        .map(|pipe| thread::spawn(move || read_tail(pipe, STDERR_KEPT_BYTES)));

    let timed_out = Arc::new(AtomicBool::new(false));
    let done = Arc::new(Mutex::new(false));
    let watchdog = spec.timeout.map(|after| {
        let (tx, rx) = mpsc::channel::<()>();
        let timed_out = Arc::clone(&timed_out);
        let done = Arc::clone(&done);
        thread::spawn(move || {
            if rx.recv_timeout(after) == Err(mpsc::RecvTimeoutError::Timeout) {
                let done = done
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if !*done {
                    timed_out.store(true, Ordering::SeqCst);
                    kill_group(pgid, libc::SIGKILL);
                }
            }
        });
        tx
    });

    let (stdout, too_large) = match stdout_reader.map(thread::JoinHandle::join) {
        Some(Ok(read)) => read,
        _ => (Vec::new(), false),
    };
    let stderr = match stderr_reader.map(thread::JoinHandle::join) {
        Some(Ok(kept)) => kept,
        _ => Vec::new(),
    };
    let waited = child.wait();
    *done
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
    drop(watchdog);
    interrupt.unregister(pgid);
    if let Some(feeder) = feeder {
        let _ = feeder.join();
    }
    let status = waited.map_err(|source| ProcessError::Io {
        program: program.clone(),
        source,
    })?;
    if timed_out.load(Ordering::SeqCst) {
        return Err(ProcessError::TimedOut {
            after: spec.timeout.unwrap_or_default(),
        });
    }
    if interrupt.is_set() && status.signal().is_some() {
        return Err(ProcessError::Interrupted);
    }
    if too_large {
        return Err(ProcessError::OutputTooLarge {
            limit: spec.max_stdout.unwrap_or_default(),
        });
    }
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => -1,
    };
    Ok(ProcessOutput {
        code,
        stdout,
        stderr,
    })
}

/// Read a pipe to its end, or until it has given more than `limit` bytes: then the process
/// group is killed and reading stops, so a command that writes gigabytes costs the engine no
/// more than the limit. Says whether the limit was passed.
fn read_bounded(mut pipe: impl Read, limit: Option<u64>, pgid: i32) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    match read_capped(&mut pipe, limit.unwrap_or(u64::MAX), &mut kept) {
        Ok(true) => {
            kill_group(pgid, libc::SIGKILL);
            (kept, true)
        }
        Ok(false) | Err(_) => (kept, false),
    }
}

/// Append what `reader` gives to `out`, up to `limit` bytes; says whether there was more. The
/// buffer grows by doubling but never past the limit, so reading costs at most the limit (a
/// plain `read_to_end` may double to twice it).
pub(crate) fn read_capped(
    reader: &mut impl Read,
    limit: u64,
    out: &mut Vec<u8>,
) -> std::io::Result<bool> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => return Ok(false),
            Ok(n) => n,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if out.len() + n > limit {
            return Ok(true);
        }
        if out.capacity() < out.len() + n {
            let wanted = (out.len() + n).max(out.capacity() * 2).min(limit);
            out.reserve_exact(wanted - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Read a pipe to its end, keeping its last `keep` bytes (about): stderr is for messages, and a
/// process that writes gigabytes there must not hold them in the engine. Secrets are redacted
/// before any cut, and what follows a cut begins after the longest secret could reach, so no
/// part of one survives at the cut.
fn read_tail(mut pipe: impl Read, keep: usize) -> Vec<u8> {
    // Redacted whole before it is cut; a secret whose end has not arrived yet is cut with the
    // part before it: the part after is dropped below.
    fn cut_to(kept: &[u8], keep: usize) -> Vec<u8> {
        let redacted = super::secrets::redact_bytes(kept);
        redacted[redacted.len().saturating_sub(keep)..].to_vec()
    }
    let mut kept = Vec::new();
    let mut cut = false;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                kept.extend_from_slice(&chunk[..n]);
                if kept.len() > 2 * keep {
                    kept = cut_to(&kept, keep);
                    cut = true;
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    if kept.len() > keep {
        kept = cut_to(&kept, keep);
        cut = true;
    }
    if cut {
        let skip = super::secrets::longest().min(kept.len());
        let mut out = b"[earlier output dropped]\n".to_vec();
        out.extend_from_slice(&kept[skip..]);
        return out;
    }
    kept
}

/// The executable a bare program name runs, searched on the PATH the child will see (the
/// stage's `env` may set one); remembered for the rest of the run. `None` leaves the search to
/// the spawn: names with a slash, and names found nowhere (the spawn then reports them).
fn resolve(program: &str, spec: &ProcessSpec) -> Option<PathBuf> {
    static FOUND: OnceLock<Mutex<HashMap<(OsString, String), PathBuf>>> = OnceLock::new();
    if program.is_empty() || program.contains('/') {
        return None;
    }
    let path = match spec.env.iter().rev().find(|(key, _)| key == "PATH") {
        Some((_, value)) => OsString::from(value),
        None => std::env::var_os("PATH")?,
    };
    if std::env::split_paths(&path).any(|dir| !dir.is_absolute()) {
        // A relative entry is searched from the child's directory: leave that to the spawn.
        return None;
    }
    let key = (path, program.to_string());
    let found = FOUND.get_or_init(Mutex::default);
    let mut found = found
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(hit) = found.get(&key) {
        return Some(hit.clone());
    }
    let hit = std::env::split_paths(&key.0)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))?;
    found.insert(key, hit.clone());
    Some(hit)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

fn kill_group(pgid: i32, signal: i32) {
    // SAFETY: killpg has no memory-safety preconditions; a stale pgid yields ESRCH.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

/// The last `max` bytes of a byte buffer as lossy UTF-8, trimmed; secrets are redacted from the
/// whole buffer before it is cut, so none leaves a part of itself at the cut.
pub(crate) fn tail(bytes: &[u8], max: usize) -> String {
    let bytes = super::secrets::redact_bytes(bytes);
    let start = bytes.len().saturating_sub(max);
    let text = String::from_utf8_lossy(&bytes[start..]);
    text.trim().to_string()
}

/// The process-wide interrupt: set by Ctrl-C, it kills every registered process group.
#[derive(Default)]
pub(crate) struct Interrupt {
    flag: AtomicBool,
    groups: Mutex<HashSet<i32>>,
}

impl Interrupt {
    pub(crate) fn global() -> &'static Interrupt {
        static GLOBAL: OnceLock<Interrupt> = OnceLock::new();
        GLOBAL.get_or_init(Interrupt::default)
    }

    pub(crate) fn is_set(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Mark the run interrupted and stop every running child: SIGTERM first, SIGKILL to what is
    /// left after a short grace period.
    pub(crate) fn trigger(&self) {
        self.flag.store(true, Ordering::SeqCst);
        let groups: Vec<i32> = self.lock().iter().copied().collect();
        for pgid in &groups {
            kill_group(*pgid, libc::SIGTERM);
        }
        if !groups.is_empty() {
            thread::sleep(Duration::from_millis(300));
            for pgid in self.lock().iter() {
                kill_group(*pgid, libc::SIGKILL);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<i32>> {
        self.groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn register(&self, pgid: i32) {
        self.lock().insert(pgid);
    }

    fn unregister(&self, pgid: i32) {
        self.lock().remove(&pgid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(argv: &[&str]) -> ProcessSpec {
        ProcessSpec {
            argv: argv.iter().map(std::string::ToString::to_string).collect(),
            ..ProcessSpec::default()
        }
    }

    #[test]
    fn captures_stdout_and_exit_code() {
        let out = run(&spec(&["sh", "-c", "printf hi; echo oops >&2; exit 3"])).unwrap();
        assert_eq!(out.stdout, b"hi");
        assert_eq!(out.stderr_tail(), "oops");
        assert_eq!(out.code, 3);
    }

    #[test]
    fn feeds_stdin() {
        let mut s = spec(&["cat"]);
        s.stdin = Some(b"through the pipe".to_vec());
        assert_eq!(run(&s).unwrap().stdout, b"through the pipe");
    }

    #[test]
    fn programs_are_found_on_the_path_the_child_sees() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("stagegraph-test-tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let mut s = spec(&["stagegraph-test-tool"]);
        s.env = vec![(
            "PATH".into(),
            format!("/nonexistent:{}", dir.path().display()),
        )];
        assert_eq!(resolve("stagegraph-test-tool", &s), Some(tool));
        assert!(run(&s).is_ok());
        s.env = vec![("PATH".into(), "relative/bin".into())];
        assert_eq!(resolve("stagegraph-test-tool", &s), None);
        assert_eq!(resolve("./stagegraph-test-tool", &s), None);
        // The child still sees the name it was given as argv[0].
        let s = spec(&["sh", "-c", "tr '\\0' ' ' < /proc/$$/cmdline"]);
        assert!(resolve("sh", &s).is_some_and(|path| path.is_absolute()));
        assert_eq!(
            run(&s).unwrap().stdout.split(|&b| b == b' ').next(),
            Some(&b"sh"[..])
        );
    }

    #[test]
    fn stdout_past_its_limit_stops_the_process_and_stderr_keeps_its_tail() {
        let mut s = spec(&[
            "sh",
            "-c",
            "head -c 50000000 /dev/zero; touch \"$0\"",
            "/nonexistent/x",
        ]);
        s.max_stdout = Some(1 << 20);
        let err = run(&s).unwrap_err();
        assert!(
            matches!(err, ProcessError::OutputTooLarge { limit } if limit == 1 << 20),
            "{err}"
        );
        // 1 MB of stderr, of which the last 64 KiB are kept, marked as cut.
        let s = spec(&[
            "sh",
            "-c",
            "head -c 1000000 /dev/zero | tr '\\0' e >&2; printf end >&2",
        ]);
        let out = run(&s).unwrap();
        assert!(
            out.stderr.len() <= STDERR_KEPT_BYTES + 64,
            "{}",
            out.stderr.len()
        );
        assert!(out.stderr.starts_with(b"[earlier output dropped]"));
        assert!(out.stderr.ends_with(b"eend"));
    }

    #[test]
    fn missing_program_is_not_found() {
        let err = run(&spec(&["stagegraph-no-such-program"])).unwrap_err();
        assert!(matches!(err, ProcessError::NotFound { .. }), "{err}");
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let mut s = spec(&["sh", "-c", "sleep 300 & sleep 300; echo never"]);
        s.timeout = Some(Duration::from_millis(200));
        let started = std::time::Instant::now();
        let err = run(&s).unwrap_err();
        assert!(matches!(err, ProcessError::TimedOut { .. }), "{err}");
        // The backgrounded grandchild holds the pipe open for 300 s; only a group kill lets
        // wait return. The bound is against that hang, far above any load, not a speed claim.
        assert!(started.elapsed() < Duration::from_secs(120));
    }
}
