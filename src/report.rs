//! What every command returns: an exit status that scripts can rely on, a
//! failure that names what went wrong, and reports printed as text or JSON.
//!
//! Exit codes are an interface (documented in README.md):
//!
//! | code | meaning |
//! |---:|---|
//! | 0 | ready (or: command succeeded) |
//! | 1 | internal error (I/O, network, a bug) |
//! | 2 | usage or configuration error |
//! | 3 | `diagnose`: at least one node will be replaced by node repair |
//! | 10 | DCGM missing (driver fine) |
//! | 11 | DCGM present but unusable |
//! | 20 | NVIDIA driver missing |

use std::fmt;
use std::io::{self, Write};

use serde::Serialize;

/// An exit status with a meaning. The numbers are part of the CLI contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Exit {
    Ready,
    Internal,
    Usage,
    WillBeReplaced,
    DcgmMissing,
    DcgmUnusable,
    DriverMissing,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ready => 0,
            Exit::Internal => 1,
            Exit::Usage => 2,
            Exit::WillBeReplaced => 3,
            Exit::DcgmMissing => 10,
            Exit::DcgmUnusable => 11,
            Exit::DriverMissing => 20,
        }
    }
}

pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A command that could not do its job: why, and which exit code that earns.
///
/// Modules keep their own typed errors; at the command boundary each error is
/// classified as a usage/configuration problem (exit 2) or an internal one
/// (exit 1). The message is the error's whole `source()` chain on one line.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub error: BoxError,
}

impl Failure {
    /// The operator's input is wrong (flags, policy file, node JSON): exit 2.
    pub fn usage(error: impl Into<BoxError>) -> Self {
        Failure {
            exit: Exit::Usage,
            error: error.into(),
        }
    }

    /// Something failed that the input did not cause (I/O, network): exit 1.
    pub fn internal(error: impl Into<BoxError>) -> Self {
        Failure {
            exit: Exit::Internal,
            error: error.into(),
        }
    }
}

impl fmt::Display for Failure {
    /// The error and every cause, joined with ": ", on one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&error_chain(self.error.as_ref()))
    }
}

/// An error and each of its causes on one line, joined with ": ". A cause
/// whose text the message already holds (thiserror's `{0}` and
/// `transparent`) is printed once.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// How a command prints its result on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    Text,
    Json,
}

impl OutputFormat {
    pub fn from_json_flag(json: bool) -> Self {
        if json {
            OutputFormat::Json
        } else {
            OutputFormat::Text
        }
    }
}

/// A command result that can be shown to a person or to a program.
pub trait Report: Serialize {
    /// Human-readable text, ending with a newline.
    fn write_text(&self, out: &mut dyn Write) -> io::Result<()>;
}

/// Prints `report` on `out` in the chosen format (JSON is pretty-printed and
/// ends with a newline).
pub fn emit(
    report: &dyn ErasedReport,
    format: OutputFormat,
    out: &mut dyn Write,
) -> io::Result<()> {
    match format {
        OutputFormat::Text => report.text(out),
        OutputFormat::Json => {
            report.write_json(out)?;
            out.write_all(b"\n")
        }
    }
}

/// Object-safe view of [`Report`], so that [`emit`] takes any report.
pub trait ErasedReport {
    fn text(&self, out: &mut dyn Write) -> io::Result<()>;
    /// Pretty-printed JSON, written as it is serialized (a forecast for a
    /// whole cluster is never held as one string).
    fn write_json(&self, out: &mut dyn Write) -> io::Result<()>;
}

impl<T: Report> ErasedReport for T {
    fn text(&self, out: &mut dyn Write) -> io::Result<()> {
        self.write_text(out)
    }
    fn write_json(&self, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer_pretty(out, self).map_err(io::Error::from)
    }
}

/// Prints a report on stdout; a closed stdout (e.g. `| head`) is not an error
/// worth a non-zero exit, any other write error is internal.
pub fn print(report: &dyn ErasedReport, format: OutputFormat) -> Result<(), Failure> {
    // Buffered: stdout alone flushes every line, a syscall each.
    let mut out = io::BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    match emit(report, format, &mut out).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::internal(WriteStdout(e))),
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot write the result to stdout")]
struct WriteStdout(#[source] io::Error);

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read '/x'")]
    struct Outer(#[source] io::Error);

    #[test]
    fn failure_prints_the_cause_chain_once() {
        let failure = Failure::internal(Outer(io::Error::other("permission denied")));
        assert_eq!(failure.to_string(), "cannot read '/x': permission denied");
        assert_eq!(failure.exit.code(), 1);
    }

    #[test]
    fn exit_codes_are_the_documented_ones() {
        let table = [
            (Exit::Ready, 0),
            (Exit::Internal, 1),
            (Exit::Usage, 2),
            (Exit::WillBeReplaced, 3),
            (Exit::DcgmMissing, 10),
            (Exit::DcgmUnusable, 11),
            (Exit::DriverMissing, 20),
        ];
        for (exit, code) in table {
            assert_eq!(exit.code(), code, "{exit:?}");
        }
    }
}
