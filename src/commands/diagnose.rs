//! `accelready diagnose`: flags and kubectl JSON -> a forecast, printed;
//! exit 3 when a node will be replaced.

use std::io::Read;
use std::path::{Path, PathBuf};

use time::OffsetDateTime;
use tracing::{info, warn};

use crate::cli::{DiagnoseArgs, NodeRepair};
use crate::repair::agent::{self, AgentInfo};
use crate::repair::{self, kube, model, Options};
use crate::report::{self, Exit, Failure, OutputFormat};

#[derive(Debug, thiserror::Error)]
pub enum DiagnoseError {
    #[error("cannot read node JSON from '{path}'")]
    ReadNodes {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read node JSON from stdin")]
    ReadStdin(#[source] std::io::Error),
    #[error("cannot read events from '{path}'")]
    ReadEvents {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the {what} DaemonSet from '{path}'")]
    ReadDaemonSet {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--now '{text}' is not an RFC 3339 time such as 2025-06-10T03:05:00Z")]
    Now {
        text: String,
        #[source]
        source: time::error::Parse,
    },
    #[error(transparent)]
    Kube(#[from] kube::KubeError),
    #[error(transparent)]
    Model(#[from] model::ModelError),
    #[error(transparent)]
    Agent(#[from] agent::AgentError),
}

/// `accelready diagnose`: read, forecast, print; exit 3 when a node will be
/// replaced.
pub fn run(args: &DiagnoseArgs) -> Result<Exit, Failure> {
    let karpenter = match &args.karpenter {
        Some(text) => text
            .parse()
            .map_err(|e: model::ModelError| Failure::usage(DiagnoseError::from(e)))?,
        None => model::newest(),
    };
    let model = model::model_for(karpenter).map_err(|e| Failure::usage(DiagnoseError::from(e)))?;
    let now = match &args.now {
        Some(text) => kube::parse_rfc3339(text).map_err(|e| {
            Failure::usage(DiagnoseError::Now {
                text: text.clone(),
                source: e,
            })
        })?,
        None => OffsetDateTime::now_utc(),
    };
    let (text, source) = read_nodes(args.input.as_deref())?;
    let nodes =
        kube::parse_nodes(&text, &source).map_err(|e| Failure::usage(DiagnoseError::from(e)))?;
    let events = match &args.events {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::usage(DiagnoseError::ReadEvents {
                    path: path.clone(),
                    source: e,
                })
            })?;
            kube::parse_events(&text, &path.display().to_string())
                .map_err(|e| Failure::usage(DiagnoseError::from(e)))?
        }
        None => Vec::new(),
    };
    let agent = agent_info(args)?;
    info!(agent = %agent.describe(), "agent");
    let options = Options {
        karpenter,
        node_repair: args.node_repair == NodeRepair::On,
        now,
    };
    let forecast = repair::forecast(&nodes, &events, model, options, &agent);
    for node in &forecast.nodes {
        info!(
            node = %node.name,
            verdict = node.verdict.as_str(),
            trigger = node.trigger.as_ref().map(|t| t.condition.as_str()),
            seconds_left = node.trigger.as_ref().map(|t| t.seconds_left),
            "forecast"
        );
    }
    report::print(&forecast, OutputFormat::from_json_flag(args.json))?;
    Ok(if forecast.will_be_replaced > 0 {
        Exit::WillBeReplaced
    } else {
        Exit::Ready
    })
}

/// The agent from `--agent-version` or `--agent FILE` (else assumed), with
/// the chart's `dcgm-server` DaemonSet from `--dcgm-server FILE`.
fn agent_info(args: &DiagnoseArgs) -> Result<AgentInfo, Failure> {
    let usage = |e: DiagnoseError| Failure::usage(e);
    let agent = match (&args.agent_version, &args.agent) {
        (Some(version), _) => {
            AgentInfo::given(version).map_err(|e| usage(DiagnoseError::from(e)))?
        }
        (None, Some(path)) => {
            let (daemonset, name) = read_daemonset(path, "agent")?;
            AgentInfo::from_daemonset(&daemonset, &name)
                .map_err(|e| usage(DiagnoseError::from(e)))?
        }
        (None, None) => AgentInfo::assumed(),
    };
    match &args.dcgm_server {
        Some(path) => {
            let (daemonset, name) = read_daemonset(path, "dcgm-server")?;
            if daemonset.name != "dcgm-server" {
                warn!(file = %name, daemonset = %daemonset.name, "--dcgm-server names a DaemonSet that is not the agent chart's dcgm-server; placing it anyway");
            }
            Ok(agent.with_dcgm_server(daemonset, &name))
        }
        None => Ok(agent),
    }
}

/// A DaemonSet's JSON file, parsed, and its name for messages.
fn read_daemonset(path: &Path, what: &'static str) -> Result<(kube::DaemonSet, String), Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::usage(DiagnoseError::ReadDaemonSet {
            what,
            path: path.to_owned(),
            source: e,
        })
    })?;
    let name = path.display().to_string();
    let daemonset =
        kube::parse_daemonset(&text, &name).map_err(|e| Failure::usage(DiagnoseError::from(e)))?;
    Ok((daemonset, name))
}

/// The node JSON and a name for it in errors: a file, or stdin for `-` or
/// no argument. A missing file is the operator's input error (exit 2).
fn read_nodes(input: Option<&Path>) -> Result<(String, String), Failure> {
    match input {
        Some(path) if path != Path::new("-") => std::fs::read_to_string(path)
            .map(|text| (text, path.display().to_string()))
            .map_err(|e| {
                Failure::usage(DiagnoseError::ReadNodes {
                    path: path.to_owned(),
                    source: e,
                })
            }),
        _ => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| Failure::usage(DiagnoseError::ReadStdin(e)))?;
            Ok((text, "stdin".to_owned()))
        }
    }
}
