//! What a killed run left running, found and stopped before a resume runs the same stages again.
//!
//! The reaper (`floor::reaper`) takes a stage's process group down with the engine, but not
//! what left the group: a daemon that called `setsid`, a process that made a group of its own,
//! or a stage started in the moment before the engine told the reaper about it. Each of them still carries the run's
//! [`MARKER`](super::journal::MARKER) in its environment, and the process journal names each
//! stage process by pid and start time. A resume looks for both on this host and stops every
//! process of a stage (or `foreach` item) that the killed run did not finish, since that stage
//! is about to run again: SIGTERM to the process and to the process group it leads or belongs
//! to, SIGKILL after a grace period, then a wait until each is gone. It does not wait for them
//! to end on their own: the killed engine can no longer take their output, so their work is
//! lost either way, and a process that waits on something (a server, a hung call) would keep the
//! resume waiting forever. A process that lost its marker (`env -i`) and is not the recorded
//! stage process cannot be told from any other, and is left alone.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::holder::{Holder, Liveness};
use super::journal::{ProcessLine, MARKER};

/// A process of the killed run, still alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Leftover {
    pub process: Holder,
    pub stage: String,
    pub item: Option<usize>,
}

/// What `leftovers` belong to, a line each: `stage `b` (item 3) running (process 812, 815)`.
pub(crate) fn describe(leftovers: &[Leftover]) -> Vec<String> {
    type Owner<'a> = (&'a str, Option<usize>);
    let mut lines: Vec<(Owner, Vec<String>)> = Vec::new();
    for leftover in leftovers {
        let key = (leftover.stage.as_str(), leftover.item);
        let pid = leftover.process.pid.to_string();
        match lines.iter_mut().find(|(k, _)| *k == key) {
            Some((_, pids)) => pids.push(pid),
            None => lines.push((key, vec![pid])),
        }
    }
    lines
        .into_iter()
        .map(|((stage, item), pids)| {
            let item = item.map(|i| format!(" (item {i})")).unwrap_or_default();
            format!(
                "stage `{stage}`{item} running (process {})",
                pids.join(", ")
            )
        })
        .collect()
}

/// The live processes of run `run_id` on this host whose stage (item) `finished` says the run
/// did not finish: those carrying its marker, and the recorded stage processes still there
/// (same pid, same start time).
pub(crate) fn find(
    run_id: &str,
    recorded: &[ProcessLine],
    finished: &dyn Fn(&str, Option<usize>) -> bool,
) -> Vec<Leftover> {
    let mut found: Vec<Leftover> = Vec::new();
    let ours = std::process::id();
    let host = super::holder::hostname();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<u32>().ok())
            else {
                continue;
            };
            if pid == ours {
                continue;
            }
            // Another user's process does not let us read its environment: it is not ours.
            let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
                continue;
            };
            let Some((stage, item)) = marked(&environ, run_id) else {
                continue;
            };
            let process = Holder {
                pid,
                started: super::holder::process_start(pid).unwrap_or(0),
                host: host.clone(),
            };
            if process.liveness() == Liveness::Alive && !finished(&stage, item) {
                found.push(Leftover {
                    process,
                    stage,
                    item,
                });
            }
        }
    }
    for line in recorded {
        let known = found.iter().any(|f| f.process.pid == line.process.pid);
        // Without its start time a pid alone could name a process that reused it.
        if !known
            && line.process.started != 0
            && line.process.liveness() == Liveness::Alive
            && !finished(&line.stage, line.item)
        {
            found.push(Leftover {
                process: line.process.clone(),
                stage: line.stage.clone(),
                item: line.item,
            });
        }
    }
    found.sort_by_key(|f| f.process.pid);
    found
}

/// The stage and item of an environment (`/proc/<pid>/environ`) that carries `run_id`'s marker.
fn marked(environ: &[u8], run_id: &str) -> Option<(String, Option<usize>)> {
    let prefix = format!("{MARKER}={run_id} ");
    let value = environ
        .split(|&b| b == 0)
        .find_map(|entry| entry.strip_prefix(prefix.as_bytes()))?;
    let value = std::str::from_utf8(value).ok()?;
    let (item, stage) = value.split_once(' ')?;
    let item = match item {
        "-" => None,
        index => Some(index.parse().ok()?),
    };
    Some((stage.to_string(), item))
}

/// Stop `leftovers`: SIGTERM to each and to its process group (when the group is led by one of
/// them or by a recorded stage process), SIGKILL to what is left after `grace`, then wait until
/// all are gone. Returns the pids still there after that.
pub(crate) fn stop(leftovers: &[Leftover], recorded: &[ProcessLine], grace: Duration) -> Vec<u32> {
    let leaders: HashSet<u32> = leftovers
        .iter()
        .map(|l| l.process.pid)
        .chain(recorded.iter().map(|line| line.process.pid))
        .collect();
    let signal_all = |signal: i32| {
        for leftover in leftovers {
            let pid = leftover.process.pid as libc::pid_t;
            if leftover.process.liveness() != Liveness::Alive {
                continue;
            }
            // SAFETY: getpgid, kill and killpg have no memory-safety preconditions; a process
            // that is gone meanwhile yields ESRCH.
            unsafe {
                let group = libc::getpgid(pid);
                if group > 0 && leaders.contains(&(group as u32)) {
                    libc::killpg(group, signal);
                }
                libc::kill(pid, signal);
            }
        }
    };
    let wait_gone = |within: Duration| {
        let deadline = Instant::now() + within;
        loop {
            let alive: Vec<u32> = leftovers
                .iter()
                .filter(|l| l.process.liveness() == Liveness::Alive)
                .map(|l| l.process.pid)
                .collect();
            if alive.is_empty() || Instant::now() >= deadline {
                return alive;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    signal_all(libc::SIGTERM);
    if wait_gone(grace).is_empty() {
        return Vec::new();
    }
    signal_all(libc::SIGKILL);
    wait_gone(Duration::from_secs(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_environment_names_its_stage_and_item() {
        let env = b"PATH=/bin\0STAGEGRAPH_PROCESS=r1 3 fetch all\0HOME=/h\0";
        assert_eq!(marked(env, "r1"), Some(("fetch all".to_string(), Some(3))));
        assert_eq!(
            marked(b"STAGEGRAPH_PROCESS=r1 - b\0", "r1"),
            Some(("b".to_string(), None))
        );
        assert_eq!(marked(env, "r2"), None);
        assert_eq!(marked(b"STAGEGRAPH_PROCESS=r10 - b", "r1"), None);
        assert_eq!(marked(b"STAGEGRAPH_PROCESS=r1 x b", "r1"), None);
    }

    #[test]
    fn a_leftover_carrying_the_marker_is_found_and_stopped() {
        if !std::path::Path::new("/proc/self/environ").exists() {
            eprintln!("skipped: no /proc");
            return;
        }
        let run_id = format!("test-{}", super::super::holder::token());
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .env(MARKER, format!("{run_id} 2 work"))
            .spawn()
            .unwrap();
        let pid = child.id();
        // Until the child has exec'd, its environment is still ours.
        let exec_by = Instant::now() + Duration::from_secs(20);
        while !std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| marked(&env, &run_id).is_some())
        {
            assert!(Instant::now() < exec_by, "the child never exec'd");
            std::thread::sleep(Duration::from_millis(10));
        }
        let found = find(&run_id, &[], &|_, _| false);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].process.pid, pid);
        assert_eq!((found[0].stage.as_str(), found[0].item), ("work", Some(2)));
        // A finished item's process is left alone.
        assert!(find(&run_id, &[], &|stage, item| stage == "work"
            && item == Some(2))
        .is_empty());
        let reaper = std::thread::spawn(move || child.wait());
        assert!(stop(&found, &[], Duration::from_secs(5)).is_empty());
        assert!(reaper.join().unwrap().is_ok());
        assert!(find(&run_id, &[], &|_, _| false).is_empty());
    }
}
