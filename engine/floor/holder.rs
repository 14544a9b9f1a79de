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
fn process_state(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid ...: comm may hold spaces and parentheses.
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // Field 22 of the line is the 20th after the comm.
    let started = fields.get(19)?.parse().ok()?;
    Some((state, started))
}

/// A process's start time, in clock ticks since boot.
pub(crate) fn process_start(pid: u32) -> Option<u64> {
    process_state(pid).map(|(_, started)| started)
}

/// This host's name.
pub(crate) fn hostname() -> String {
    nix::unistd::gethostname().map_or_else(
        |_| String::from("localhost"),
        |name| name.to_string_lossy().into_owned(),
    )
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
}
