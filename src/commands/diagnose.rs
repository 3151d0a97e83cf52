//! `accelready diagnose`: flags and kubectl JSON -> a forecast, printed;
//! exit 3 when a node will be replaced.

use std::path::{Path, PathBuf};

use time::OffsetDateTime;
use tracing::{debug, info, warn};

use crate::cli::{DiagnoseArgs, NodeRepair};
use crate::input::{self, InputError, Limit};
use crate::repair::agent::{self, AgentInfo};
use crate::repair::{self, kube, model, Options};
use crate::report::{self, Exit, Failure, OutputFormat};

#[derive(Debug, thiserror::Error)]
pub enum DiagnoseError {
    #[error("cannot read node JSON from '{path}'")]
    ReadNodes {
        path: PathBuf,
        #[source]
        source: InputError,
    },
    #[error("cannot read events from '{path}'")]
    ReadEvents {
        path: PathBuf,
        #[source]
        source: InputError,
    },
    #[error("cannot read the {what} DaemonSet from '{path}'")]
    ReadDaemonSet {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: InputError,
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
    let limit = Limit::new(args.max_input_bytes.0, "set by --max-input-bytes");
    // The DaemonSets first: the nodes keep the labels their placement reads.
    let agent = agent_info(args, limit)?;
    info!(agent = %agent.describe(), "agent");
    let labels = match &agent.dcgm_server {
        Some(daemonset) => kube::Labels::forecast().and_placement_of(daemonset),
        None => kube::Labels::forecast(),
    };
    let nodes = read_nodes(args.input.as_deref(), limit, labels)?;
    let events = match &args.events {
        Some(path) => {
            let file = input::open(path, limit).map_err(|e| {
                Failure::usage(DiagnoseError::ReadEvents {
                    path: path.clone(),
                    source: e,
                })
            })?;
            kube::read_events(file, &path.display().to_string())
                .map_err(|e| Failure::usage(DiagnoseError::from(e)))?
        }
        None => Vec::new(),
    };
    let options = Options {
        karpenter,
        node_repair: args.node_repair == NodeRepair::On,
        now,
    };
    let forecast = repair::forecast(&nodes, &events, model, options, &agent);
    // One line per node with an unhealthy condition; the others only at
    // debug, so that a 15,000-node cluster does not flood stderr.
    for node in &forecast.nodes {
        let trigger = node.trigger.as_ref();
        let condition = trigger.map(|t| t.condition.as_str());
        let seconds_left = trigger.map(|t| t.seconds_left);
        let verdict = node.verdict.as_str();
        if trigger.is_none() {
            debug!(node = %node.name, verdict, "forecast");
        } else {
            info!(node = %node.name, verdict, trigger = condition, seconds_left, "forecast");
        }
    }
    info!(
        nodes = forecast.nodes.len(),
        will_be_replaced = forecast.will_be_replaced,
        "forecast done"
    );
    report::print(&forecast, OutputFormat::from_json_flag(args.json))?;
    Ok(if forecast.will_be_replaced > 0 {
        Exit::WillBeReplaced
    } else {
        Exit::Ready
    })
}

/// The agent from `--agent-version` or `--agent FILE` (else assumed), with
/// the chart's `dcgm-server` DaemonSet from `--dcgm-server FILE`.
fn agent_info(args: &DiagnoseArgs, limit: Limit) -> Result<AgentInfo, Failure> {
    let usage = |e: DiagnoseError| Failure::usage(e);
    let agent = match (&args.agent_version, &args.agent) {
        (Some(version), _) => {
            AgentInfo::given(version).map_err(|e| usage(DiagnoseError::from(e)))?
        }
        (None, Some(path)) => {
            let (daemonset, name) = read_daemonset(path, "agent", limit)?;
            AgentInfo::from_daemonset(&daemonset, &name)
                .map_err(|e| usage(DiagnoseError::from(e)))?
        }
        (None, None) => AgentInfo::assumed(),
    };
    match &args.dcgm_server {
        Some(path) => {
            let (daemonset, name) = read_daemonset(path, "dcgm-server", limit)?;
            if daemonset.name != "dcgm-server" {
                warn!(file = %name, daemonset = %daemonset.name, "--dcgm-server names a DaemonSet that is not the agent chart's dcgm-server; placing it anyway");
            }
            Ok(agent.with_dcgm_server(daemonset, &name))
        }
        None => Ok(agent),
    }
}

/// A DaemonSet's JSON file, parsed as it is read, and its name for
/// messages.
fn read_daemonset(
    path: &Path,
    what: &'static str,
    limit: Limit,
) -> Result<(kube::DaemonSet, String), Failure> {
    let file = input::open(path, limit).map_err(|e| {
        Failure::usage(DiagnoseError::ReadDaemonSet {
            what,
            path: path.to_owned(),
            source: e,
        })
    })?;
    let name = path.display().to_string();
    let daemonset =
        kube::read_daemonset(file, &name).map_err(|e| Failure::usage(DiagnoseError::from(e)))?;
    Ok((daemonset, name))
}

/// The nodes from a file, or from stdin for `-` or no argument, parsed as
/// they are read and at most `limit` bytes of them, keeping `labels`. A
/// missing file, bytes past the limit or bad JSON are the operator's input
/// error (exit 2).
fn read_nodes(
    input: Option<&Path>,
    limit: Limit,
    labels: kube::Labels,
) -> Result<kube::NodeInput, Failure> {
    let nodes = match input {
        Some(path) if path != Path::new("-") => {
            let file = input::open(path, limit).map_err(|e| {
                Failure::usage(DiagnoseError::ReadNodes {
                    path: path.to_owned(),
                    source: e,
                })
            })?;
            kube::read_nodes_keeping(file, &path.display().to_string(), labels)
        }
        _ => kube::read_nodes_keeping(input::stdin(limit), "stdin", labels),
    };
    nodes.map_err(|e| Failure::usage(DiagnoseError::from(e)))
}
