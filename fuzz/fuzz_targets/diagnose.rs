//! `diagnose`'s kubectl JSON (a Node, List or NodeList, event lists, and
//! DaemonSets: the agent's, whose image tag gives its release, and the
//! chart's `dcgm-server`, placed on each node): parsed and forecast at a fixed
//! clock for every modelled Karpenter version and every modelled agent
//! release, with node repair on and off, never panicking.
//!
//! The input is the nodes' JSON, optionally followed by a line `---` and a
//! DaemonSet's JSON; the whole input is also tried as a DaemonSet.
#![no_main]

use accelready::repair::agent::{agent_for, AgentInfo, AGENTS};
use accelready::repair::kube;
use accelready::repair::model::{model_for, Version};
use accelready::repair::{forecast, Options, Verdict};
use libfuzzer_sys::fuzz_target;
use time::macros::datetime;

const VERSIONS: [Version; 4] = [
    Version::new(1, 2, 0),
    Version::new(1, 4, 0),
    Version::new(1, 6, 0),
    Version::new(1, 7, 0),
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (nodes_text, daemonset_text) = match text.split_once("\n---\n") {
        Some((nodes, daemonset)) => (nodes, Some(daemonset)),
        None => (text, None),
    };
    let mut agents: Vec<AgentInfo> = AGENTS
        .iter()
        .map(|row| AgentInfo::given(&row.since.to_string()).expect("a modelled release"))
        .collect();
    agents.push(AgentInfo::assumed());
    for candidate in [Some(text), daemonset_text].into_iter().flatten() {
        let Ok(daemonset) = kube::parse_daemonset(candidate, "fuzz") else {
            continue;
        };
        if let Ok(agent) = AgentInfo::from_daemonset(&daemonset, "fuzz") {
            assert!(agent_for(agent.version).is_ok(), "{:?}", agent.version);
            agents.push(agent);
        }
        agents = agents
            .into_iter()
            .map(|agent| agent.with_dcgm_server(daemonset.clone(), "fuzz"))
            .collect();
    }
    let events = kube::parse_events(nodes_text, "fuzz").unwrap_or_default();
    let Ok(input) = kube::parse_nodes(nodes_text, "fuzz") else {
        return;
    };
    for version in VERSIONS {
        let model = model_for(version).expect("modelled version");
        for agent in &agents {
            for node_repair in [true, false] {
                let options = Options {
                    karpenter: version,
                    node_repair,
                    now: datetime!(2025-06-10 03:05:00 UTC),
                };
                let result = forecast(&input, &events, model, options, agent);
                assert_eq!(result.nodes.len(), input.nodes().len());
                let replaced = result
                    .nodes
                    .iter()
                    .filter(|n| n.verdict == Verdict::WillBeReplaced)
                    .count();
                assert_eq!(result.will_be_replaced, replaced);
                if !node_repair {
                    assert_eq!(replaced, 0);
                }
                for node in &result.nodes {
                    // A placement is only ever computed with a dcgm-server given.
                    assert!(node.dcgm_server.is_none() || agent.dcgm_server.is_some());
                }
                serde_json::to_string(&result).expect("a forecast always serializes");
            }
        }
    }
});
