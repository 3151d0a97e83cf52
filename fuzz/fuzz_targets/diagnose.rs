//! `diagnose`'s kubectl JSON (a Node, List or NodeList, event lists, and
//! DaemonSets: the agent's, whose image tag gives its release, and the
//! chart's `dcgm-server`, placed on each node).
//!
//! Any bytes, as nodes, events and a DaemonSet: read whole and a few bytes
//! at a time — the two must agree, result and error alike — and from a
//! stream cut short by a size limit; what is accepted must be JSON (serde,
//! on the whole input, agrees). Then, from text: the nodes' JSON, optionally
//! followed by a line `---` and a DaemonSet's JSON (the whole input is also
//! tried as a DaemonSet), parsed and forecast at a fixed clock for every
//! modelled Karpenter version and every modelled agent release, with node
//! repair on and off, never panicking.
#![no_main]

use std::io::{self, Read};

use accelready::input::{Bounded, Limit};
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

/// Yields at most `size` bytes per read.
struct Trickle<'a>(&'a [u8], usize);

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let count = self.0.len().min(buf.len()).min(self.1);
        buf[..count].copy_from_slice(&self.0[..count]);
        self.0 = &self.0[count..];
        Ok(count)
    }
}

fuzz_target!(|data: &[u8]| {
    let nodes = kube::read_nodes(data, "fuzz");
    let events = kube::read_events(data, "fuzz");
    let size = data.first().map_or(1, |b| usize::from(b % 7) + 1);
    let trickled = kube::read_nodes(Trickle(data, size), "fuzz");
    assert_eq!(
        format!("{nodes:?}"),
        format!("{trickled:?}"),
        "reads of {size}"
    );
    let trickled = kube::read_events(Trickle(data, size), "fuzz");
    assert_eq!(
        format!("{events:?}"),
        format!("{trickled:?}"),
        "reads of {size}"
    );
    let half = Limit::new(data.len() as u64 / 2 + 1, "for the fuzzer");
    let _ = kube::read_nodes(Bounded::new(data, half), "fuzz");
    let _ = kube::read_events(Bounded::new(data, half), "fuzz");
    let daemonset = kube::read_daemonset(data, "fuzz");
    let trickled = kube::read_daemonset(Trickle(data, size), "fuzz");
    assert_eq!(
        format!("{daemonset:?}"),
        format!("{trickled:?}"),
        "reads of {size}"
    );
    if nodes.is_ok() || events.is_ok() || daemonset.is_ok() {
        serde_json::from_slice::<serde::de::IgnoredAny>(data).expect("what is accepted is JSON");
    }
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
    // The nodes keep the labels a dcgm-server's placement reads, as in diagnose.
    let mut labels = kube::Labels::forecast();
    for candidate in [Some(text), daemonset_text].into_iter().flatten() {
        let Ok(daemonset) = kube::parse_daemonset(candidate, "fuzz") else {
            continue;
        };
        if let Ok(agent) = AgentInfo::from_daemonset(&daemonset, "fuzz") {
            assert!(agent_for(agent.version).is_ok(), "{:?}", agent.version);
            agents.push(agent);
        }
        labels = labels.and_placement_of(&daemonset);
        agents = agents
            .into_iter()
            .map(|agent| agent.with_dcgm_server(daemonset.clone(), "fuzz"))
            .collect();
    }
    let events = kube::parse_events(nodes_text, "fuzz").unwrap_or_default();
    let Ok(input) = kube::read_nodes_keeping(nodes_text.as_bytes(), "fuzz", labels) else {
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
