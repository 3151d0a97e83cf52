//! Running the built binary the way a host would: as root, in a private
//! mount namespace, so that its mounts never leak onto the test machine.

use std::process::{Command, Output};

/// Why namespace tests cannot run here, if they cannot (not root, no unshare).
pub fn cannot_unshare() -> Option<String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Some("not root".into());
    }
    match Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .output()
    {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "unshare --mount fails: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("no unshare (util-linux): {e}")),
    }
}

/// True (after saying why on stderr) when `test` cannot run here; use as
/// `if skip_without_unshare("name") { return; }`.
pub fn skip_without_unshare(test: &str) -> bool {
    match cannot_unshare() {
        Some(reason) => {
            eprintln!("skipping {test}: {reason} (needs root and unshare; CI runs as root)");
            true
        }
        None => false,
    }
}

/// `arg` quoted for `sh -c`.
pub fn shell_quote(arg: &std::ffi::OsStr) -> String {
    format!("'{}'", arg.to_string_lossy().replace('\'', r"'\''"))
}

/// The command line of `command`, quoted for `sh -c`.
pub fn shell_line(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(shell_quote)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `script` with `sh -c` in a private mount namespace.
pub fn in_private_mount_namespace(script: &str) -> Output {
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .output()
        .unwrap()
}
