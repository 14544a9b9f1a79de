//! Who holds something (a run record being written, a lock): a process named by its pid, its
//! start time (so a reused pid is not mistaken for it) and its host, and whether it is still
//! there.

use serde::{Deserialize, Serialize};

/// A process, as recorded by whoever holds a run or a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Holder {
    pub pid: u32,
    /// The process's start time in clock ticks since boot (`/proc/<pid>/stat`, field 22); 0
    /// where it cannot be read.
    #[serde(default)]
    pub started: u64,
    pub host: String,
}

/// Whether a holder is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    Alive,
    Gone,
    /// On another host: only a heartbeat can tell.
    Unknown,
}

impl Holder {
    /// This process.
    pub(crate) fn current() -> Holder {
        let pid = std::process::id();
        Holder {
            pid,
            started: process_start(pid).unwrap_or(0),
            host: hostname(),
        }
    }

    /// Whether the process is still there: on this host, a process with its pid and start
    /// time that is not a zombie.
    pub(crate) fn liveness(&self) -> Liveness {
        if self.host != hostname() {
            return Liveness::Unknown;
        }
        match process_state(self.pid) {
            Some((state, started))
                if state != 'Z'
                    && state != 'X'
                    && (self.started == 0 || started == self.started) =>
            {
                Liveness::Alive
            }
            Some(_) => Liveness::Gone,
            // No /proc: ask the kernel whether the pid exists.
            None if !std::path::Path::new("/proc/self/stat").exists() => {
                // No signal: only whether the process exists (one of another user's does).
                let pid = nix::unistd::Pid::from_raw(self.pid as i32);
                let exists = matches!(
                    nix::sys::signal::kill(pid, None),
                    Ok(()) | Err(nix::errno::Errno::EPERM)
                );
                if exists {
                    Liveness::Alive
                } else {
                    Liveness::Gone
                }
            }
            None => Liveness::Gone,
        }
    }
}

/// The state letter and start time of a process, from `/proc/<pid>/stat`.
///
/// Read with one `read` into a buffer on the stack: a run asks this of every process it starts,
/// and `read_to_string` on a file that says it is empty (as `/proc` files do) takes a `statx`
/// and six growing reads.
fn process_state(pid: u32) -> Option<(char, u64)> {
    use std::io::Read;
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    // The line is a pid, a name of at most 64 bytes and 50 numbers: well under this.
    let mut buffer = [0u8; 2048];
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
        if let Some(state) = parse_stat(&buffer[..filled]) {
            return Some(state);
        }
    }
    parse_stat(&buffer[..filled])
}

/// The state letter and start time in a `/proc/<pid>/stat` line, once it has them.
fn parse_stat(stat: &[u8]) -> Option<(char, u64)> {
    // pid (comm) state ppid ...: comm may hold spaces and parentheses.
    let after = &stat[stat.iter().rposition(|&b| b == b')')? + 1..];
    let mut fields = after
        .split(u8::is_ascii_whitespace)
        .filter(|field| !field.is_empty());
    let state = char::from(*fields.next()?.first()?);
    // Field 22 of the line is the 20th after the comm; it must be followed by another field
    // (or the line's end), or it may be cut short.
    let started = fields.nth(18)?;
    fields.next()?;
    let started = std::str::from_utf8(started).ok()?.parse().ok()?;
    Some((state, started))
}

/// A process's start time, in clock ticks since boot.
pub(crate) fn process_start(pid: u32) -> Option<u64> {
    process_state(pid).map(|(_, started)| started)
}

/// This host's name, asked of the kernel once a process (a run records it beside every process
/// it starts).
pub(crate) fn hostname() -> String {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        nix::unistd::gethostname().map_or_else(
            |_| String::from("localhost"),
            |name| name.to_string_lossy().into_owned(),
        )
    })
    .clone()
}

/// A random token: 128 bits as hex.
pub(crate) fn token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_finished_one_is_gone() {
        assert_eq!(Holder::current().liveness(), Liveness::Alive);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let gone = Holder {
            pid,
            started: 1,
            host: hostname(),
        };
        assert_eq!(gone.liveness(), Liveness::Gone);
        let reused = Holder {
            started: Holder::current().started + 1,
            ..Holder::current()
        };
        assert_eq!(
            reused.liveness(),
            Liveness::Gone,
            "a reused pid is not the holder"
        );
        let elsewhere = Holder {
            host: format!("{}-elsewhere", hostname()),
            ..Holder::current()
        };
        assert_eq!(elsewhere.liveness(), Liveness::Unknown);
    }

    #[test]
    fn a_stat_line_gives_its_state_and_start_time_whatever_the_name_and_none_cut_short() {
        let line = b"4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                     987654 12345 67 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        assert_eq!(parse_stat(line), Some(('S', 987_654)));
        let start = line.windows(6).position(|w| w == b"987654").unwrap();
        let cut = &line[..start + 3];
        assert_eq!(parse_stat(cut), None, "a start time cut short is not read");
        assert_eq!(parse_stat(b"4242 (name"), None);
        let ours = process_state(std::process::id()).expect("this process's stat");
        assert_eq!(ours.1, Holder::current().started);
    }
}
