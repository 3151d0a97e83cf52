//! The `accelready` binary: parse the command line, set up logging, call the
//! library, turn the outcome into an exit code.

use std::path::Path;
use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

use accelready::cli::LogFormat;

fn main() -> ExitCode {
    let cli = accelready::cli::parse_with_role(std::env::args_os().collect(), Path::exists);
    init_tracing(cli.global.log_format, cli.global.verbose);
    match accelready::run(cli) {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(failure) => {
            eprintln!("accelready: error: {failure}");
            ExitCode::from(failure.exit.code())
        }
    }
}

fn init_tracing(format: LogFormat, verbose: u8) {
    let default = match verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    match format {
        LogFormat::Text => builder.with_ansi(false).init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
