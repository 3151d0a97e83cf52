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

/// The start of a namespace script that runs the built binary as a
/// Bottlerocket container: (re)creates `out`, writes `policy` there, sets
/// `R` (the container root `root`), `T` (the host tree), `O` (`out`) and
/// `BIN`, and builds the container root ([`container_root_script`]).
/// `ACCELREADY_TEST_BIN` replaces the test build of `accelready` (e.g. with
/// the image's static release binary, for measurements).
pub fn container_script(
    root: &std::path::Path,
    tree: &std::path::Path,
    out: &std::path::Path,
    container_dir: &str,
    policy: &str,
) -> String {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).unwrap();
    std::fs::write(out.join("policy.toml"), policy).unwrap();
    let q = |p: &std::path::Path| shell_quote(p.as_os_str());
    format!(
        "set -e\nR={}; T={}; O={}; BIN={}\n{}",
        q(root),
        q(tree),
        q(out),
        q(&std::env::var_os("ACCELREADY_TEST_BIN").map_or_else(
            || env!("CARGO_BIN_EXE_accelready").into(),
            std::path::PathBuf::from
        )),
        container_root_script(container_dir)
    )
}

/// Shell lines (for `sh -c` in a private mount namespace) that build the
/// root of a Bottlerocket container in `$R` around the host tree `$T`, the
/// way Bottlerocket mounts bootstrap and superpowered host containers: the
/// host's `/` at `/.bottlerocket/rootfs`, read-only on top and private, with
/// the host's own writable `var` and shared `mnt` (the host's `mnt` made a
/// shared mount first, so that mounts below it propagate back);
/// `$O/policy.toml` as `<container_dir>/user-data`; `$BIN` as `/accelready`
/// with the libraries it needs lent in (the test binary is dynamically
/// linked, the image's is static); `/etc/hosts`, `/proc` and `/dev`.
/// `container_dir` is `/.bottlerocket/bootstrap-containers/current` or
/// `/.bottlerocket/host-containers/current`.
pub fn container_root_script(container_dir: &str) -> String {
    format!(
        r#"mkdir -p "$R/.bottlerocket/rootfs" "$R{container_dir}" "$R/etc" "$R/proc" "$R/dev"
mount --bind "$T/mnt" "$T/mnt"; mount --make-shared "$T/mnt"
mount --rbind "$T" "$R/.bottlerocket/rootfs"; mount --make-rprivate "$R/.bottlerocket/rootfs"
mount -o remount,bind,ro "$R/.bottlerocket/rootfs"
mount --bind "$T/var" "$R/.bottlerocket/rootfs/var"
mount --bind "$T/mnt" "$R/.bottlerocket/rootfs/mnt"
cp "$O/policy.toml" "$R{container_dir}/user-data"
echo '127.0.0.1 localhost' > "$R/etc/hosts"
cp "$BIN" "$R/accelready"
for d in /lib /lib64 /usr; do
  if [ -d "$d" ]; then mkdir -p "$R$d"; mount --rbind "$d" "$R$d"; fi
done
mount -t proc proc "$R/proc"; mount --rbind /dev "$R/dev"
"#
    )
}
