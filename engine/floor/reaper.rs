//! The reaper: a second process that stops a killed engine's stage processes.
//!
//! A kill -9 runs no cleanup in the engine, so what stops its stages must live outside it. The
//! reaper is this program started again ([`serve_if_asked`]) with a pipe on its stdin whose
//! other end only the engine holds. The engine writes `+<pgid>` when a stage's process group
//! starts and `-<pgid>` once it has reaped it (the reaper reads them ten times a second, not as
//! each comes). When the pipe reaches its end the engine is gone, however it ended, and the
//! reaper kills every group still listed (SIGKILL, as a kill -9 of the engine is abrupt too),
//! then exits.
//!
//! Why not the parent-death signal each child could ask for: asking takes code between fork and
//! exec, and with such code the standard library forks the whole engine for every stage instead
//! of calling posix_spawn, which at 10,000 shell stages cost about a third of the run's time. The
//! signal also fires when the spawning *thread* ends rather than the process, and reaches only
//! the stage's own process, not the rest of its group. A host that does not start the reaper (a
//! program embedding the library without [`enable`]) keeps the parent-death signal.
//!
//! What a stage started outside its group (`setsid`, a daemon) escapes both; a resume finds and
//! stops that by the run's marker (`run::orphans`).

use std::collections::HashSet;
use std::io::Write;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::os::fd::{AsFd, BorrowedFd};

use super::fd::set_nonblocking;

/// Set on the reaper's environment (to the engine's pid): what makes a start of this program a
/// reaper.
const ENV: &str = "STAGEGRAPH_REAPER_OF";

/// The program to start as the reaper, set by [`enable`].
static PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// The pipe to the running reaper; `None` once it could not be started or stopped listening.
static PIPE: OnceLock<Mutex<Option<ChildStdin>>> = OnceLock::new();

/// Let the runs of this process start `program` as their reaper. `program` must call
/// [`serve_if_asked`] before anything else.
pub(crate) fn enable(program: PathBuf) {
    let _ = PROGRAM.set(program);
}

/// If this process was started as a reaper, serve as one until the engine is gone, and return
/// the exit code; otherwise `None`.
pub(crate) fn serve_if_asked() -> Option<u8> {
    let engine = std::env::var_os(ENV)?;
    // Started by hand, a reaper only kills what is written to it, which its user could kill
    // anyway; its output goes nowhere when the engine starts it, so this is for that user.
    if engine
        .to_str()
        .and_then(|pid| pid.parse::<u32>().ok())
        .is_none()
    {
        eprintln!(
            "stagegraph: {ENV} is set but names no process; it is set only on the process a \
             run starts to stop its stages if it is killed"
        );
        return Some(2);
    }
    // A Ctrl-C or a closed terminal reaches the engine, which stops its stages itself; the
    // reaper stays until the engine has gone.
    // The reaper runs on one thread and starts nothing: blocked, the two signals stay pending
    // for its whole life, which is what ignoring them would do.
    {
        use nix::sys::signal::{SigSet, Signal};
        let mut quiet = SigSet::empty();
        quiet.add(Signal::SIGINT);
        quiet.add(Signal::SIGHUP);
        let _ = quiet.thread_block();
    }
    // The reaper is not woken by each line the engine writes (each wake-up is a context switch
    // on both sides, a second process's CPU time taken from the stages): it waits for the
    // hang-up alone, reading what has come every `DRAIN_EVERY` so the pipe does not fill. What
    // the engine wrote before it died is still in the pipe at the hang-up, and read then.
    let stdin = std::io::stdin();
    let stdin = stdin.as_fd();
    set_nonblocking(stdin);
    let mut groups = HashSet::new();
    let mut pending = Vec::new();
    let timeout = PollTimeout::try_from(DRAIN_EVERY).unwrap_or(PollTimeout::MAX);
    loop {
        // With no events asked for, only a hang-up or an error ends the wait before the
        // timeout.
        let _ = poll(&mut [PollFd::new(stdin, PollFlags::empty())], timeout);
        if drain(stdin, &mut pending, &mut groups) {
            break;
        }
    }
    for pgid in groups {
        // A gone group yields ESRCH, which is let go.
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
    Some(0)
}

/// How long the reaper leaves what the engine wrote unread, at most.
const DRAIN_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Read what the non-blocking pipe `fd` holds now and apply its complete lines to `groups`,
/// keeping an unfinished one in `pending`; says whether the pipe has ended (or broken).
fn drain(fd: BorrowedFd<'_>, pending: &mut Vec<u8>, groups: &mut HashSet<i32>) -> bool {
    let mut chunk = [0u8; 8192];
    let ended = loop {
        match nix::unistd::read(fd, &mut chunk) {
            Ok(0) => break true,
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => break false,
            Err(_) => break true,
        }
    };
    let complete = pending
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |end| end + 1);
    for line in pending.drain(..complete).as_slice().split(|&b| b == b'\n') {
        match std::str::from_utf8(line).ok().and_then(parse) {
            Some(Change::Watch(pgid)) => {
                groups.insert(pgid);
            }
            Some(Change::Forget(pgid)) => {
                groups.remove(&pgid);
            }
            None => {}
        }
    }
    ended
}

/// One line the engine writes to its reaper.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    Watch(i32),
    Forget(i32),
}

/// `+<pgid>` or `-<pgid>`; anything else (and groups 0 and 1, which name the caller's own group
/// and init's) is no change.
fn parse(line: &str) -> Option<Change> {
    let (sign, pgid) = line.split_at_checked(1)?;
    let pgid = pgid.parse::<i32>().ok().filter(|pgid| *pgid > 1)?;
    match sign {
        "+" => Some(Change::Watch(pgid)),
        "-" => Some(Change::Forget(pgid)),
        _ => None,
    }
}

/// Whether stage processes started now are watched by a reaper, starting it on the first call.
/// `false` when this host did not [`enable`] one or it could not be started or stopped listening:
/// the caller then asks for the parent-death signal.
pub(crate) fn watching() -> bool {
    pipe()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .is_some()
}

/// Tell the reaper a stage's process group started.
pub(crate) fn watch(pgid: i32) {
    send(&format!("+{pgid}\n"));
}

/// Tell the reaper a stage's process group ended and was reaped: its id may be reused.
pub(crate) fn forget(pgid: i32) {
    send(&format!("-{pgid}\n"));
}

fn send(line: &str) {
    let mut pipe = pipe()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // One write of a line shorter than PIPE_BUF: whole, never interleaved. A reaper that is gone
    // is let go; the stages started from now on ask for the parent-death signal instead.
    if let Some(stdin) = pipe.as_mut() {
        if stdin.write_all(line.as_bytes()).is_err() {
            *pipe = None;
        }
    }
}

fn pipe() -> &'static Mutex<Option<ChildStdin>> {
    PIPE.get_or_init(|| Mutex::new(PROGRAM.get().and_then(start)))
}

/// Start the reaper: its own process group (a Ctrl-C to the terminal's group does not reach it),
/// no output (it must not hold a pipe someone reads the engine's output from), the root as its
/// directory (it holds none the engine's user may want to remove).
fn start(program: &PathBuf) -> Option<ChildStdin> {
    let mut child = Command::new(program)
        .env(ENV, std::process::id().to_string())
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()?;
    let pipe = child.stdin.take()?;
    // Room for the lines of a burst of stages between two of the reaper's reads (a pipe holds
    // 64 KiB, about 4,000 stages' worth, unless asked for more); best effort: a full pipe only
    // makes a write wait for the reaper's next read.
    #[cfg(target_os = "linux")]
    let _ = nix::fcntl::fcntl(pipe.as_fd(), nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20));
    Some(pipe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_in_the_pipe_is_applied_line_by_line_until_it_ends() {
        let (read, mut write) = std::io::pipe().unwrap();
        let read = read.as_fd();
        set_nonblocking(read);
        let mut send = move |text: &str| write.write_all(text.as_bytes()).unwrap();
        let (mut pending, mut groups) = (Vec::new(), HashSet::new());
        assert!(
            !drain(read, &mut pending, &mut groups),
            "nothing written yet"
        );
        send("+5\n+6\n-5\n+7");
        assert!(!drain(read, &mut pending, &mut groups));
        assert_eq!(groups, HashSet::from([6]), "the unfinished line waits");
        assert_eq!(pending, b"+7");
        send("\n+8\n");
        // Closing the write end: the engine is gone.
        drop(send);
        assert!(drain(read, &mut pending, &mut groups), "the pipe has ended");
        assert_eq!(groups, HashSet::from([6, 7, 8]));
    }

    #[test]
    fn lines_name_a_group_to_watch_or_forget() {
        assert_eq!(parse("+812"), Some(Change::Watch(812)));
        assert_eq!(parse("-812"), Some(Change::Forget(812)));
        for line in [
            "", "+", "812", "+0", "+1", "+-5", "*812", "+812 ", "+ 812", "é812",
        ] {
            assert_eq!(parse(line), None, "{line:?}");
        }
    }
}
