//! `accelready render`: flags -> the policy and the node-class options,
//! warnings on stderr, then the output on stdout, in a file (atomically), or
//! compared with a checked-in file (`--check`).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use tracing::{info, warn};

use crate::bottlerocket::userdata::Quantity;
use crate::cli::{RenderArgs, RenderFormat};
use crate::input::{self, InputError, Limit};
use crate::policy::Policy;
use crate::render::{self, NodeClassOptions};
use crate::report::{Exit, Failure};

/// Why the `render` command failed, beyond what the policy itself gets
/// wrong ([`render::RenderError`]).
#[derive(Debug, thiserror::Error)]
pub enum RenderCommandError {
    #[error("invalid --instance-memory")]
    InstanceMemory(#[source] crate::bottlerocket::userdata::Invalid),
    #[error("--strict: {count} warning(s): {list}")]
    Strict { count: usize, list: String },
    #[error("'{path}' is stale (diff on stdout); regenerate it with: {command}")]
    Stale { path: PathBuf, command: String },
    #[error("cannot read '{path}'")]
    ReadCheck {
        path: PathBuf,
        #[source]
        source: InputError,
    },
    #[error("cannot write '{path}'")]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl From<RenderFormat> for render::Format {
    fn from(format: RenderFormat) -> Self {
        match format {
            RenderFormat::Userdata => render::Format::Userdata,
            RenderFormat::Ec2nodeclass => render::Format::Ec2nodeclass,
            RenderFormat::AgentValues => render::Format::AgentValues,
        }
    }
}

/// `accelready render`.
pub fn run(args: &RenderArgs) -> Result<Exit, Failure> {
    let policy = match &args.policy {
        Some(path) => Policy::load(path).map_err(Failure::usage)?,
        None => {
            info!("no policy file given; using the built-in policy");
            Policy::builtin()
        }
    };
    let instance_memory = args
        .instance_memory
        .as_deref()
        .map(Quantity::try_from)
        .transpose()
        .map_err(|e| Failure::usage(RenderCommandError::InstanceMemory(e)))?;
    let node_class_options = match (args.format, &args.cluster) {
        (RenderFormat::Ec2nodeclass, None) => {
            return Err(Failure::usage(render::RenderError::MissingCluster))
        }
        (_, Some(cluster)) => Some(
            NodeClassOptions::new(cluster, args.role.as_deref(), &args.name, &args.ami_alias)
                .map_err(Failure::usage)?,
        ),
        (_, None) => None,
    };

    let mut found = render::warnings(&policy, instance_memory.as_ref());
    found.extend(render::output_warnings(&policy, args.format.into()));
    for warning in &found {
        warn!(strict = args.strict, "{warning}");
    }
    if args.strict && !found.is_empty() {
        let list = found
            .iter()
            .map(|w| w.to_string())
            .collect::<Vec<_>>()
            .join("; ");
        return Err(Failure::usage(RenderCommandError::Strict {
            count: found.len(),
            list,
        }));
    }
    if args.explain {
        write_stdout(render::explain(&policy, &found).as_bytes())?;
        return Ok(Exit::Ready);
    }

    let output = render::render(
        &policy,
        args.format.into(),
        node_class_options.as_ref(),
        args.gzip,
    )
    .map_err(Failure::usage)?;
    info!(format = ?args.format, bytes = output.len(), gzip = args.gzip, "rendered");
    if let Some(path) = &args.check {
        return check(path, &output, args);
    }
    match &args.output {
        Some(path) => {
            write_atomic(path, output.as_bytes()).map_err(Failure::internal)?;
            info!(path = %path.display(), "wrote");
        }
        None => write_stdout(output.as_bytes())?,
    }
    Ok(Exit::Ready)
}

/// The most a `--check` file may hold: rendered user-data is at most 16 KiB,
/// an EC2NodeClass a few.
const MAX_CHECKED_BYTES: Limit = Limit::new(1 << 20, "for a rendered file");

/// `--check FILE`: equal -> exit 0; else unified diff on stdout, exit 2.
fn check(path: &Path, output: &str, args: &RenderArgs) -> Result<Exit, Failure> {
    let current = input::read_regular_to_string(path, MAX_CHECKED_BYTES).map_err(|source| {
        Failure::usage(RenderCommandError::ReadCheck {
            path: path.to_owned(),
            source,
        })
    })?;
    if current == output {
        info!(path = %path.display(), "up to date");
        return Ok(Exit::Ready);
    }
    let name = path.display().to_string();
    let diff = similar::TextDiff::from_lines(current.as_str(), output)
        .unified_diff()
        .header(&name, &format!("{name} (rendered)"))
        .to_string();
    write_stdout(diff.as_bytes())?;
    Err(Failure::usage(RenderCommandError::Stale {
        path: path.to_owned(),
        command: regenerate_command(path, args),
    }))
}

/// The command line that rewrites `path` with what `args` render.
fn regenerate_command(path: &Path, args: &RenderArgs) -> String {
    let mut words = vec!["accelready render".to_owned()];
    if let Some(policy) = &args.policy {
        words.push(policy.display().to_string());
    }
    if args.format == RenderFormat::Ec2nodeclass {
        words.push("--format ec2nodeclass".to_owned());
        if let Some(cluster) = &args.cluster {
            words.push(format!("--cluster {cluster}"));
        }
        if let Some(role) = &args.role {
            words.push(format!("--role {role}"));
        }
        words.push(format!(
            "--name {} --ami-alias {}",
            args.name, args.ami_alias
        ));
    }
    if args.format == RenderFormat::AgentValues {
        words.push("--format agent-values".to_owned());
    }
    if args.gzip {
        words.push("--gzip".to_owned());
    }
    words.push(format!("--output {}", path.display()));
    words.join(" ")
}

/// Prints on stdout; a closed pipe (`| head`) is not an error.
fn write_stdout(bytes: &[u8]) -> Result<(), Failure> {
    let stdout = io::stdout();
    let mut lock = stdout.lock();
    match lock.write_all(bytes).and_then(|()| lock.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            Err(Failure::internal(RenderCommandError::Write {
                path: PathBuf::from("<stdout>"),
                source: e,
            }))
        }
        _ => Ok(()),
    }
}

/// Atomic write of a rendered file (see [`crate::fsutil::write_atomic`]).
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RenderCommandError> {
    crate::fsutil::write_atomic(path, bytes).map_err(|source| RenderCommandError::Write {
        path: path.to_owned(),
        source,
    })
}
