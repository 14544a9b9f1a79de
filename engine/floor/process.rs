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

use nix::sys::signal::Signal;

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
            nix::unistd::setsid()?;
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
    #[error(
        "`{program}` is not executable; make it so (`chmod +x {program}`) or run it through its \
         interpreter (`command = [\"sh\", \"{program}\"]`)"
    )]
    NotExecutable { program: String },
    #[error(
        "`{program}` cannot be run directly: it has no `#!` line naming its interpreter; add one \
         (`#!/bin/sh`) or run it through its interpreter (`command = [\"sh\", \"{program}\"]`)"
    )]
    NoInterpreter { program: String },
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
    // The stage's process group dies with the engine (a kill -9 runs no cleanup): a resume must
    // not find the killed run's stage still running beside its own. The reaper sees to that
    // (see `reaper`); without one, the process asks for the parent-death signal, which makes
    // the spawn a fork instead of a posix_spawn.
    let watched = super::reaper::watching();
    #[cfg(target_os = "linux")]
    if !watched {
        let engine = std::process::id();
        // SAFETY: only async-signal-safe calls between fork and exec (prctl and getppid are
        // single system calls; nothing allocates).
        unsafe {
            command.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                // The engine died before the signal was asked for: an error here makes the
                // child exit before the exec, and there is no engine left to be told.
                if nix::unistd::getppid().as_raw() as u32 != engine {
                    return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
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
    let mut child = command
        .spawn()
        .map_err(|source| spawn_error(program, spec.cwd.as_deref(), source))?;
    let pgid = child.id() as i32;
    if watched {
        super::reaper::watch(pgid);
    }
    interrupt.register(pgid);
    started(child.id());
    // A Ctrl-C that arrived between the check above and the registration would otherwise miss
    // this child.
    if interrupt.is_set() {
        kill_group(pgid, Signal::SIGKILL);
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
                    kill_group(pgid, Signal::SIGKILL);
                }
            }
        });
        tx
    });

    // Both pipes are read here, on the calling thread, as they become ready: no reader
    // thread a stage (two threads each cost more than the rest of a short command's handling).
    let mut stdout = Capped::new(spec.max_stdout);
    let mut stderr = Tail::new(STDERR_KEPT_BYTES);
    if let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) {
        drain(out, err, &mut stdout, &mut stderr, pgid);
    }
    let (stdout, too_large) = (stdout.kept, stdout.over);
    let stderr = stderr.finish();
    let waited = child.wait();
    *done
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
    drop(watchdog);
    interrupt.unregister(pgid);
    if watched && waited.is_ok() {
        super::reaper::forget(pgid);
    }
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

/// Read a child's stdout into `stdout` and its stderr into `stderr` until both reach their end,
/// whichever has data first. Past stdout's limit the process group is killed and stdout is no
/// longer read, so a command that writes gigabytes costs the engine no more than the limit.
fn drain(
    out: std::process::ChildStdout,
    err: std::process::ChildStderr,
    stdout: &mut Capped,
    stderr: &mut Tail,
    pgid: i32,
) {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    super::fd::set_nonblocking_fresh_pipe(out.as_fd());
    super::fd::set_nonblocking_fresh_pipe(err.as_fd());
    let mut out = Some(out);
    let mut err = Some(err);
    // On the stack: a heap buffer of this size, zeroed, for every stage costs more than the
    // reads do for most.
    let mut chunk = [0u8; 16 * 1024];
    while out.is_some() || err.is_some() {
        // Whether each pipe has something (data, its end, an error) to read.
        let (out_ready, err_ready) = {
            let mut fds: Vec<PollFd<'_>> =
                [out.as_ref().map(AsFd::as_fd), err.as_ref().map(AsFd::as_fd)]
                    .into_iter()
                    .flatten()
                    .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
                    .collect();
            match nix::poll::poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return,
            }
            let mut ready = fds
                .iter()
                .map(|fd| fd.revents().is_some_and(|events| !events.is_empty()));
            let out_ready = out.is_some() && ready.next().unwrap_or(false);
            let err_ready = err.is_some() && ready.next().unwrap_or(false);
            (out_ready, err_ready)
        };
        if out_ready {
            if let Some(pipe) = out.as_mut() {
                match read_ready(pipe, &mut chunk, |bytes| stdout.push(bytes)) {
                    Ready::Open => {}
                    Ready::Closed => out = None,
                    Ready::Stop => {
                        kill_group(pgid, Signal::SIGKILL);
                        out = None;
                    }
                }
            }
        }
        if err_ready {
            if let Some(pipe) = err.as_mut() {
                match read_ready(pipe, &mut chunk, |bytes| {
                    stderr.push(bytes);
                    true
                }) {
                    Ready::Open => {}
                    Ready::Closed | Ready::Stop => err = None,
                }
            }
        }
    }
}

/// What reading a ready pipe left.
enum Ready {
    /// Read all it had; more may come.
    Open,
    /// At its end, or broken.
    Closed,
    /// The sink wants no more.
    Stop,
}

/// Read what a non-blocking pipe has now, handing each piece to `sink` (which says whether it
/// wants more).
fn read_ready(
    pipe: &mut impl Read,
    chunk: &mut [u8],
    mut sink: impl FnMut(&[u8]) -> bool,
) -> Ready {
    loop {
        match pipe.read(chunk) {
            Ok(0) => return Ready::Closed,
            Ok(n) => {
                if !sink(&chunk[..n]) {
                    return Ready::Stop;
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => return Ready::Open,
            Err(_) => return Ready::Closed,
        }
    }
}

/// Stdout as it is read: kept up to a limit in bytes, then refused.
struct Capped {
    kept: Vec<u8>,
    limit: usize,
    /// More came than the limit allows.
    over: bool,
}

impl Capped {
    fn new(limit: Option<u64>) -> Capped {
        Capped {
            kept: Vec::new(),
            limit: limit.map_or(usize::MAX, |limit| {
                usize::try_from(limit).unwrap_or(usize::MAX)
            }),
            over: false,
        }
    }

    /// Keep `bytes`, unless they pass the limit; says whether more is wanted. The buffer grows
    /// by doubling but never past the limit.
    fn push(&mut self, bytes: &[u8]) -> bool {
        if self.kept.len() + bytes.len() > self.limit {
            self.over = true;
            return false;
        }
        if self.kept.capacity() < self.kept.len() + bytes.len() {
            let wanted = (self.kept.len() + bytes.len())
                .max(self.kept.capacity() * 2)
                .min(self.limit);
            self.kept.reserve_exact(wanted - self.kept.len());
        }
        self.kept.extend_from_slice(bytes);
        true
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
    let mut capped = Capped::new(Some(limit));
    capped.kept = std::mem::take(out);
    let mut chunk = vec![0u8; 64 * 1024];
    let result = loop {
        match reader.read(&mut chunk) {
            Ok(0) => break Ok(false),
            Ok(n) => {
                if !capped.push(&chunk[..n]) {
                    break Ok(true);
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => break Err(error),
        }
    };
    *out = capped.kept;
    result
}

/// Stderr as it is read, keeping its last `keep` bytes (about): stderr is for messages, and a
/// process that writes gigabytes there must not hold them in the engine. Secrets are redacted
/// before any cut, and what follows a cut begins after the longest secret could reach, so no
/// part of one survives at the cut.
struct Tail {
    kept: Vec<u8>,
    keep: usize,
    cut: bool,
}

impl Tail {
    fn new(keep: usize) -> Tail {
        Tail {
            kept: Vec::new(),
            keep,
            cut: false,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.kept.extend_from_slice(bytes);
        if self.kept.len() > 2 * self.keep {
            self.cut_to_keep();
        }
    }

    /// Redacted whole before it is cut; a secret whose end has not arrived yet is cut with the
    /// part before it: the part after is dropped by [`Tail::finish`].
    fn cut_to_keep(&mut self) {
        let redacted = super::secrets::redact_bytes(&self.kept);
        self.kept = redacted[redacted.len().saturating_sub(self.keep)..].to_vec();
        self.cut = true;
    }

    fn finish(mut self) -> Vec<u8> {
        if self.kept.len() > self.keep {
            self.cut_to_keep();
        }
        if !self.cut {
            return self.kept;
        }
        let skip = super::secrets::longest().min(self.kept.len());
        let mut out = b"[earlier output dropped]\n".to_vec();
        out.extend_from_slice(&self.kept[skip..]);
        out
    }
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

/// Send `signal` to the process group `pgid`; a stale pgid yields ESRCH, which is let go. Groups
/// 0 and 1 (the caller's own, and init's) are never signalled.
fn kill_group(pgid: i32, signal: Signal) {
    if pgid > 1 {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), signal);
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
            kill_group(*pgid, Signal::SIGTERM);
        }
        if !groups.is_empty() {
            thread::sleep(Duration::from_millis(300));
            for pgid in self.lock().iter() {
                kill_group(*pgid, Signal::SIGKILL);
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

/// Why a program did not start, in the words of what to do about it: not found on `PATH`, a
/// file without its executable bit, a script without a `#!` line (the kernel's `ENOEXEC`).
fn spawn_error(program: &str, cwd: Option<&Path>, source: std::io::Error) -> ProcessError {
    let path = match cwd {
        Some(cwd) => cwd.join(program),
        None => PathBuf::from(program),
    };
    let is_file = || std::fs::metadata(&path).is_ok_and(|m| m.is_file());
    let program = program.to_string();
    match source.kind() {
        std::io::ErrorKind::NotFound => ProcessError::NotFound { program },
        std::io::ErrorKind::PermissionDenied if is_file() => {
            ProcessError::NotExecutable { program }
        }
        _ if source.raw_os_error() == Some(libc::ENOEXEC) => {
            ProcessError::NoInterpreter { program }
        }
        _ => ProcessError::Spawn { program, source },
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
    fn stdout_and_stderr_are_read_as_they_come() {
        // Each stream is written past a pipe's buffer while the other waits: reading one to its
        // end before the other would never finish.
        let s = spec(&[
            "sh",
            "-c",
            "head -c 300000 /dev/zero; head -c 300000 /dev/zero >&2; printf x; printf y >&2",
        ]);
        let out = run(&s).unwrap();
        assert_eq!(out.stdout.len(), 300_001);
        assert!(out.stdout.ends_with(b"\0x"));
        assert!(out.stderr.starts_with(b"[earlier output dropped]"));
        assert!(out.stderr.ends_with(b"\0y"));
    }

    #[test]
    fn a_script_that_cannot_be_run_says_what_to_do() {
        let dir = tempfile::tempdir().expect("a folder");
        let plain = dir.path().join("plain.sh");
        std::fs::write(&plain, "#!/bin/sh\necho hi\n").expect("write");
        let mut s = spec(&["./plain.sh"]);
        s.cwd = Some(dir.path().to_path_buf());
        let err = run(&s).unwrap_err();
        assert!(matches!(err, ProcessError::NotExecutable { .. }), "{err}");
        assert!(err.to_string().contains("chmod +x ./plain.sh"), "{err}");

        // A file without a `#!` line: the kernel's ENOEXEC. (Whether it reaches us depends on
        // how the process is started: a fork and `execvp` retries it with /bin/sh, as the
        // engine does when no reaper watches; `posix_spawn` does not.)
        let err = spawn_error(
            "./bare.sh",
            Some(dir.path()),
            std::io::Error::from_raw_os_error(libc::ENOEXEC),
        );
        assert!(matches!(err, ProcessError::NoInterpreter { .. }), "{err}");
        assert!(err.to_string().contains("`#!/bin/sh`"), "{err}");
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
