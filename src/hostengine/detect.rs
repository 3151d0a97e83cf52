//! Is another engine already serving this node? And reaping what is ours.
//!
//! Two signs, either enough (FACTS §7.2: one engine per node, never two):
//! something accepts connections on `127.0.0.1:<port>`, or an
//! `nv-hostengine` process that is not our child runs on the host. The
//! process check matters because the agent chart's `dcgm-server` pod maps its
//! port with `hostPort`, which a loopback connect may not reach; a
//! superpowered host container shares the host's PID namespace, so that pod's
//! engine is in the host's `/proc` all the same.

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

/// The process name (`/proc/<pid>/comm`, at most 15 bytes) of an engine.
pub const ENGINE_COMM: &str = "nv-hostengine";

/// Whether something accepts TCP connections at `address` within `timeout`.
pub fn port_accepts(address: SocketAddr, timeout: Duration) -> bool {
    TcpStream::connect_timeout(&address, timeout).is_ok()
}

/// A process seen in a `/proc` directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Process {
    pub pid: u32,
    /// The process name from its `stat` (`comm`).
    pub name: String,
}

/// `/proc/<pid>/stat` -> (name, state, parent pid). The name sits between the
/// first `(` and the *last* `)` (it may itself contain parentheses or spaces).
pub fn parse_stat(text: &str) -> Option<(&str, char, u32)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let name = text.get(open + 1..close)?;
    let mut rest = text.get(close + 1..)?.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let parent = rest.next()?.parse().ok()?;
    Some((name, state, parent))
}

/// Every numbered entry of a `/proc` directory with its parsed `stat`.
/// Processes that vanish while we look are skipped.
fn processes(proc_dir: &Path) -> impl Iterator<Item = (u32, String, char, u32)> + '_ {
    fs::read_dir(proc_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let text = fs::read_to_string(entry.path().join("stat")).ok()?;
            let (name, state, parent) = parse_stat(&text)?;
            Some((pid, name.to_owned(), state, parent))
        })
}

/// Live `nv-hostengine` processes in `proc_dir` other than the pids in
/// `ours`, their children (an engine's fork is named like it until it
/// execs) and our own children. Zombies (exited, not yet reaped) are not
/// engines.
pub fn engine_processes(proc_dir: &Path, ours: &[u32]) -> Vec<Process> {
    let me = std::process::id();
    processes(proc_dir)
        .filter(|(pid, name, state, parent)| {
            name == ENGINE_COMM
                && *state != 'Z'
                && *state != 'X'
                && !ours.contains(pid)
                && !ours.contains(parent)
                && *parent != me
        })
        .map(|(pid, name, _, _)| Process { pid, name })
        .collect()
}

/// Whether `proc_dir` is a procfs of *our* PID namespace (`self` there is
/// us): only then are its pids comparable with our children's. `None` when
/// it is no procfs at all (no `self`: e.g. a fixture tree's `proc`).
pub fn shares_our_pid_namespace(proc_dir: &Path) -> Option<bool> {
    let me = fs::read_link(proc_dir.join("self")).ok()?;
    Some(me == Path::new(&std::process::id().to_string()))
}

/// Reaps our exited children that nobody waits for: with
/// `PR_SET_CHILD_SUBREAPER`, processes orphaned below us (e.g. a diagnostic
/// `nvvs` whose engine died) become our children, and a zombie left unreaped
/// in the host's PID namespace would stay there. Children in
/// [`super::engine::owned`] are waited for by their owners and left alone.
/// Reads this process's own `/proc`, not the host's. Returns the reaped pids.
pub fn reap_orphans() -> Vec<u32> {
    let me = std::process::id();
    let owned = super::engine::owned();
    let zombies: Vec<u32> = processes(Path::new("/proc"))
        .filter(|(pid, _, state, parent)| *parent == me && *state == 'Z' && !owned.contains(pid))
        .map(|(pid, ..)| pid)
        .collect();
    zombies
        .into_iter()
        .filter(|&pid| {
            nix::sys::wait::waitpid(
                nix::unistd::Pid::from_raw(pid as i32),
                Some(nix::sys::wait::WaitPidFlag::WNOHANG),
            )
            .is_ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_parsed_around_odd_names() {
        assert_eq!(
            parse_stat("1234 (nv-hostengine) S 1 1234 1234 0 -1 4194560 ..."),
            Some(("nv-hostengine", 'S', 1))
        );
        assert_eq!(
            parse_stat("77 (a) b (c)) Z 76 77 ..."),
            Some(("a) b (c)", 'Z', 76))
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S notanumber"), None);
    }

    #[test]
    fn engines_are_found_by_name_skipping_ours_and_zombies() {
        let dir = tempfile::tempdir().unwrap();
        for (pid, stat) in [
            ("10", "10 (nv-hostengine) S 1 10 10"),
            ("11", "11 (nv-hostengine) S 1 11 11"),
            ("12", "12 (nv-hostengine) Z 1 12 12"),
            ("13", "13 (kubelet) S 1 13 13"),
            // A fork of ours, before it execs (DCGM's nvvs): ours too.
            ("15", "15 (nv-hostengine) S 11 11 11"),
            ("self", "99 (accelready) S 1 99 99"),
        ] {
            fs::create_dir_all(dir.path().join(pid)).unwrap();
            fs::write(dir.path().join(pid).join("stat"), stat).unwrap();
        }
        fs::create_dir_all(dir.path().join("14")).unwrap(); // vanished: no stat
        let found = engine_processes(dir.path(), &[11]);
        assert_eq!(
            found,
            [Process {
                pid: 10,
                name: "nv-hostengine".into()
            }]
        );
        assert_eq!(shares_our_pid_namespace(dir.path()), None);
    }

    #[test]
    fn our_own_proc_is_our_pid_namespace() {
        assert_eq!(shares_our_pid_namespace(Path::new("/proc")), Some(true));
    }

    #[test]
    fn a_closed_port_does_not_accept() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        assert!(port_accepts(address, Duration::from_secs(1)));
        drop(listener);
        assert!(!port_accepts(address, Duration::from_secs(1)));
    }
}
