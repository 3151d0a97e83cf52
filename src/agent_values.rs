//! `accelready render --format agent-values`: Helm values for the EKS node
//! monitoring agent's chart (aws/eks-node-monitoring-agent,
//! `charts/eks-node-monitoring-agent`) that fit the policy, so that a node
//! never runs two DCGM host engines (FACTS §7.2) — accelready's
//! (`[hostengine]`) and the chart's `dcgm-server` (`nv-hostengine -n -b ALL`
//! on hostPort 5555).
//!
//! Two forms, by what the agent's chart has ([`crate::repair::agent`]):
//! - accelready serves every architecture and the chart has
//!   `dcgmAgent.enabled` / `nodeAgent.dcgmAddress` (v1.7.1+, PR #205): the
//!   chart's `dcgm-server` is switched off and the agent pointed at
//!   `localhost:<port>`;
//! - otherwise `dcgmAgent.affinity` (in every chart): the chart's default
//!   rule, plus "not on a node that runs accelready (label
//!   `accelready.io/dcgm`, which `boot` sets before kubelet starts) of an
//!   architecture accelready's engine serves".
//!
//! A DCGM-3-era agent gets no values: it must be upgraded (FACTS §7.3).

use std::collections::BTreeSet;

use serde::Serialize;

use crate::arch::Arch;
use crate::boot::LABEL_DCGM;
use crate::policy::{EngineSource, Policy};
use crate::render::yaml;
use crate::repair::agent::DcgmClient;
use crate::repair::kube::{NodeSelectorTerm, Requirement};

/// The port the chart's `dcgm-server` binds through hostPort, and the
/// agent's default `DCGM_ADDRESS` port.
pub const CHART_ENGINE_PORT: u16 = 5555;

/// The instance types the chart's default `dcgmAgent.affinity` lists
/// (aws/eks-node-monitoring-agent `charts/eks-node-monitoring-agent/values.yaml`
/// at tag v1.7.0-eksbuild.1, commit 0040fd7). Overriding the affinity
/// replaces the chart's whole `nodeSelectorTerms` list, so the default rule
/// is written out again; a chart that lists more types needs them added.
pub const CHART_INSTANCE_TYPES: &[&str] = &[
    "g3.16xlarge",
    "g3.4xlarge",
    "g3.8xlarge",
    "g3s.xlarge",
    "g4dn.12xlarge",
    "g4dn.16xlarge",
    "g4dn.2xlarge",
    "g4dn.4xlarge",
    "g4dn.8xlarge",
    "g4dn.metal",
    "g4dn.xlarge",
    "g5.12xlarge",
    "g5.16xlarge",
    "g5.24xlarge",
    "g5.2xlarge",
    "g5.48xlarge",
    "g5.4xlarge",
    "g5.8xlarge",
    "g5.xlarge",
    "g5g.16xlarge",
    "g5g.2xlarge",
    "g5g.4xlarge",
    "g5g.8xlarge",
    "g5g.metal",
    "g5g.xlarge",
    "g6.12xlarge",
    "g6.16xlarge",
    "g6.24xlarge",
    "g6.2xlarge",
    "g6.48xlarge",
    "g6.4xlarge",
    "g6.8xlarge",
    "g6.xlarge",
    "g6e.12xlarge",
    "g6e.16xlarge",
    "g6e.24xlarge",
    "g6e.2xlarge",
    "g6e.48xlarge",
    "g6e.4xlarge",
    "g6e.8xlarge",
    "g6e.xlarge",
    "g6f.2xlarge",
    "g6f.4xlarge",
    "g6f.large",
    "g6f.xlarge",
    "g7.12xlarge",
    "g7.24xlarge",
    "g7.2xlarge",
    "g7.48xlarge",
    "g7.4xlarge",
    "g7.8xlarge",
    "g7e.12xlarge",
    "g7e.24xlarge",
    "g7e.2xlarge",
    "g7e.48xlarge",
    "g7e.4xlarge",
    "g7e.8xlarge",
    "gr6.4xlarge",
    "gr6.8xlarge",
    "gr6f.4xlarge",
    "p2.16xlarge",
    "p2.8xlarge",
    "p2.xlarge",
    "p3.16xlarge",
    "p3.2xlarge",
    "p3.8xlarge",
    "p3dn.24xlarge",
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5.4xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
    "p6e-gb200.36xlarge",
    "p6e-gb300.36xlarge",
];

/// The architecture the chart's default rule allows `dcgm-server` on.
const CHART_ARCHITECTURES: &[&str] = &["amd64"];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AgentValuesError {
    #[error("agent.version = {version:?} is a DCGM-3-era agent ({range}): no chart values can fix it, and no DCGM bundle either; upgrade the agent to v1.7.2 or later, set agent.version, and render again")]
    Dcgm3 { version: String, range: String },
    #[error("hostengine.port = {port}: the agent's DCGM_ADDRESS is one value for the whole cluster, and the chart's dcgm-server listens on {CHART_ENGINE_PORT} on the nodes accelready does not serve; use port {CHART_ENGINE_PORT}{hint}")]
    Port { port: u16, hint: &'static str },
}

/// The values document (only what accelready sets).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentValues {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dcgm_agent: Option<DcgmAgent>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_agent: Option<NodeAgent>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DcgmAgent {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAgent {
    pub dcgm_address: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Affinity {
    pub node_affinity: NodeAffinity,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAffinity {
    pub required_during_scheduling_ignored_during_execution: NodeSelector,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelector {
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

/// Which form the values take, for the header and for tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// accelready runs no engine: nothing to set.
    Nothing,
    /// `dcgmAgent.enabled: false` + `nodeAgent.dcgmAddress`.
    Disable,
    /// `dcgmAgent.affinity` keeping `dcgm-server` off accelready's nodes.
    Affinity,
}

fn requirement(key: &str, operator: &str, values: &[&str]) -> Requirement {
    Requirement {
        key: key.to_owned(),
        operator: operator.to_owned(),
        values: values.iter().map(|v| (*v).to_owned()).collect(),
    }
}

/// The chart's default rule with `architectures` for `kubernetes.io/arch`.
fn chart_rule(architectures: &[&str]) -> Vec<Requirement> {
    vec![
        requirement(
            "node.kubernetes.io/instance-type",
            "In",
            CHART_INSTANCE_TYPES,
        ),
        requirement(
            "eks.amazonaws.com/compute-type",
            "NotIn",
            &["fargate", "auto", "hybrid"],
        ),
        requirement(
            "sagemaker.amazonaws.com/compute-type",
            "NotIn",
            &["hyperpod"],
        ),
        requirement("kubernetes.io/arch", "In", architectures),
    ]
}

/// The architectures whose GPU nodes get accelready's engine: those that
/// `[hostengine]` wants *and* that have a bundle to run it from.
fn served_architectures(policy: &Policy) -> Vec<Arch> {
    Arch::ALL
        .into_iter()
        .filter(|&arch| policy.engine_for(arch) == EngineSource::Accelready)
        .collect()
}

/// The values for `policy`, and their form.
pub fn values(policy: &Policy) -> Result<(AgentValues, Form), AgentValuesError> {
    let model = policy.agent.model();
    if model.client == DcgmClient::Dcgm3 {
        return Err(AgentValuesError::Dcgm3 {
            version: policy.agent.version.clone(),
            range: model.range(),
        });
    }
    // Only where accelready's engine has a bundle to run: an architecture
    // that [hostengine] wants but that has none keeps the chart's engine.
    let served: BTreeSet<&str> = served_architectures(policy)
        .into_iter()
        .map(Arch::oci_name)
        .collect();
    let port = policy.hostengine.port;
    if served.is_empty() {
        return Ok((
            AgentValues {
                dcgm_agent: None,
                node_agent: None,
            },
            Form::Nothing,
        ));
    }
    if served.len() == Arch::ALL.len() && model.chart.dcgm_agent_enabled_and_address {
        return Ok((
            AgentValues {
                dcgm_agent: Some(DcgmAgent {
                    enabled: Some(false),
                    affinity: None,
                }),
                node_agent: Some(NodeAgent {
                    dcgm_address: format!("localhost:{port}"),
                }),
            },
            Form::Disable,
        ));
    }
    if port != CHART_ENGINE_PORT {
        let hint = if model.chart.dcgm_agent_enabled_and_address {
            " (or let accelready serve every architecture: [hostengine] run = \"always\")"
        } else {
            " (this agent's chart has no nodeAgent.dcgmAddress: it arrived in v1.7.1)"
        };
        return Err(AgentValuesError::Port { port, hint });
    }
    // Nodes without accelready keep the chart's default rule; accelready's
    // nodes keep dcgm-server only on architectures its engine does not serve.
    let mut not_ours = chart_rule(CHART_ARCHITECTURES);
    not_ours.push(requirement(LABEL_DCGM, "DoesNotExist", &[]));
    let mut terms = vec![NodeSelectorTerm {
        match_expressions: not_ours,
        match_fields: Vec::new(),
    }];
    let unserved: Vec<&str> = CHART_ARCHITECTURES
        .iter()
        .copied()
        .filter(|arch| !served.contains(arch))
        .collect();
    if !unserved.is_empty() {
        let mut ours_elsewhere = chart_rule(&unserved);
        ours_elsewhere.push(requirement(LABEL_DCGM, "Exists", &[]));
        terms.push(NodeSelectorTerm {
            match_expressions: ours_elsewhere,
            match_fields: Vec::new(),
        });
    }
    Ok((
        AgentValues {
            dcgm_agent: Some(DcgmAgent {
                enabled: None,
                affinity: Some(Affinity {
                    node_affinity: NodeAffinity {
                        required_during_scheduling_ignored_during_execution: NodeSelector {
                            node_selector_terms: terms,
                        },
                    },
                }),
            }),
            node_agent: None,
        },
        Form::Affinity,
    ))
}

/// The values as YAML, with a header saying what they do and which chart
/// versions they fit. Ends with a newline.
pub fn render(policy: &Policy) -> Result<String, AgentValuesError> {
    let (values, form) = values(policy)?;
    let model = policy.agent.model();
    let served: Vec<&str> = served_architectures(policy)
        .into_iter()
        .map(Arch::oci_name)
        .collect();
    let run = policy.hostengine.run.as_str();
    let mut header = vec![
        "Helm values for the EKS node monitoring agent's chart (aws/eks-node-monitoring-agent,".to_owned(),
        "charts/eks-node-monitoring-agent), rendered by `accelready render --format agent-values`".to_owned(),
        format!(
            "from the policy: [agent] version = \"{}\", [hostengine] run = \"{run}\" (on: {}), port = {}.",
            policy.agent.version,
            if served.is_empty() { "none".to_owned() } else { served.join(", ") },
            policy.hostengine.port
        ),
    ];
    let fits = |from: &str| {
        format!("Fits chart versions {from} – v1.7.x (a chart's version is its agent's); written for {}.", model.range())
    };
    match form {
        Form::Nothing => {
            let wanted = policy.hostengine.wanted_architectures();
            header.push(if wanted.is_empty() {
                "accelready runs no DCGM host engine, so the chart's defaults apply: nothing to set.".to_owned()
            } else {
                let wanted: Vec<&str> = wanted.into_iter().map(Arch::as_str).collect();
                format!(
                    "[hostengine] wants an engine on {}, but the policy installs no DCGM there (see render's warnings): none runs, so the chart's defaults apply: nothing to set.",
                    wanted.join(" and ")
                )
            });
            header.push(fits("v1.2.0"));
        }
        Form::Disable => {
            header.push(format!(
                "accelready's host engine serves every architecture ({}): the chart's dcgm-server is",
                served.join(", ")
            ));
            header.push(format!(
                "switched off and the agent pointed at accelready's engine (127.0.0.1:{}).",
                policy.hostengine.port
            ));
            header.push("This is cluster-wide: every GPU node must run accelready's host engine (this policy's".to_owned());
            header.push(
                "user-data); GPU nodes without it would have no engine and get DCGMError."
                    .to_owned(),
            );
            header.push(fits("v1.7.1"));
        }
        Form::Affinity => {
            header.push(
                "dcgmAgent.affinity keeps the chart's dcgm-server off the nodes accelready's host engine serves:"
                    .to_owned(),
            );
            header.push(format!(
                "nodes labelled {LABEL_DCGM} (set by `accelready boot` before kubelet starts) of architecture {};",
                served.join(" or ")
            ));
            header.push("elsewhere it keeps the chart's default rule (instance types as listed at chart v1.7.0;".to_owned());
            header.push(
                "add any your chart lists besides). Never two engines on one node.".to_owned(),
            );
            // dcgmAgent.affinity is in the chart README at v1.2.0; earlier charts unchecked.
            header.push(fits("v1.2.0"));
        }
    }
    header.push("Apply: helm upgrade eks-node-monitoring-agent eks-node-monitoring-agent/eks-node-monitoring-agent \\".to_owned());
    header.push("  -n kube-system --reuse-values -f agent-values.yaml".to_owned());
    let body = yaml::to_string(&values).expect("the values are plain maps, lists and scalars");
    let mut out: String = header.iter().map(|line| format!("# {line}\n")).collect();
    out.push_str(&body);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DCGM pinned (and installed) for both architectures, so that `[hostengine]` decides.
    const BOTH: &str = "[dcgm]\nprovision = \"if-missing\"\n[dcgm.bundle.x86_64]\nurl = \"https://m.example/datacenter-gpu-manager-4-core_4.6.1-1_amd64.deb\"\nsha256 = \"1111111111111111111111111111111111111111111111111111111111111111\"\n[dcgm.bundle.aarch64]\nurl = \"https://m.example/datacenter-gpu-manager-4-core_4.6.1-1_arm64.deb\"\nsha256 = \"2222222222222222222222222222222222222222222222222222222222222222\"\n";

    /// `text` with DCGM pinned for both architectures.
    fn policy(text: &str) -> Policy {
        Policy::parse(&format!("{BOTH}{text}")).unwrap()
    }

    #[test]
    fn the_form_follows_the_engine_and_the_chart() {
        let cases = [
            ("", Form::Affinity),
            ("[hostengine]\nrun = \"never\"", Form::Nothing),
            ("[hostengine]\nrun = \"always\"", Form::Disable),
            (
                "[hostengine]\narchitectures = [\"x86_64\", \"aarch64\"]",
                Form::Disable,
            ),
            // v1.7.0's chart has no dcgmAgent.enabled: affinity, even for all.
            (
                "[agent]\nversion = \"1.7.0\"\n[hostengine]\nrun = \"always\"",
                Form::Affinity,
            ),
            ("[hostengine]\narchitectures = [\"x86_64\"]", Form::Affinity),
        ];
        for (text, form) in cases {
            assert_eq!(values(&policy(text)).unwrap().1, form, "{text}");
        }
    }

    #[test]
    fn an_architecture_without_a_bundle_keeps_the_charts_engine() {
        // [hostengine] wants every architecture, but only aarch64 has DCGM
        // to run: amd64 nodes must keep the chart's dcgm-server.
        let only_arm = "[dcgm]\nprovision = \"if-missing\"\n[dcgm.bundle.aarch64]\nurl = \"https://m.example/datacenter-gpu-manager-4-core_4.6.1-1_arm64.deb\"\nsha256 = \"2222222222222222222222222222222222222222222222222222222222222222\"\n[hostengine]\nrun = \"always\"";
        let policy = Policy::parse(only_arm).unwrap();
        let (values, form) = values(&policy).unwrap();
        assert_eq!(form, Form::Affinity);
        assert!(values.dcgm_agent.unwrap().enabled.is_none());
        let text = render(&policy).unwrap();
        assert!(text.contains("(on: arm64)"), "{text}");
        // No bundle at all: accelready serves nothing, the chart keeps its defaults.
        let none = Policy::parse("[hostengine]\nrun = \"always\"").unwrap();
        assert_eq!(values_form(&none), Form::Nothing);
    }

    fn values_form(policy: &Policy) -> Form {
        values(policy).unwrap().1
    }

    #[test]
    fn no_values_for_a_dcgm3_agent_and_no_other_port_beside_the_charts_engine() {
        let error = values(&policy("[agent]\nversion = \"1.4.0\"")).unwrap_err();
        assert!(error.to_string().contains("upgrade the agent"), "{error}");
        let error = values(&policy("[hostengine]\nport = 5556")).unwrap_err();
        assert!(error.to_string().contains("use port 5555"), "{error}");
        let error = values(&policy(
            "[agent]\nversion = \"1.7.0\"\n[hostengine]\nport = 5556",
        ))
        .unwrap_err();
        assert!(error.to_string().contains("arrived in v1.7.1"), "{error}");
        // Serving every architecture, the address follows the port.
        let (values, _) = values(&policy("[hostengine]\nrun = \"always\"\nport = 5556")).unwrap();
        assert_eq!(values.node_agent.unwrap().dcgm_address, "localhost:5556");
    }
}
