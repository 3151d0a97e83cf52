//! The forecast: what Karpenter node repair will do to each given node.
//! Pure: nodes, events, a model, the agent and a clock in; a typed
//! [`Forecast`] out.

use std::collections::BTreeMap;

use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::advice::{advise, Advice, Context};
use super::agent::{AgentInfo, AgentSource};
use super::kube::{Condition, Event, Node, NodeInput};
use super::model::{
    max_unhealthy, CheckOrder, ConditionStatus, Model, RepairPolicy, Version,
    ALLOWED_UNHEALTHY_PERCENT, ARCH_LABEL, GPU_MANUFACTURER_LABEL, GPU_PRESENT_LABEL,
    INSTANCE_TYPE_LABEL, NODECLASS_LABEL, NODEPOOL_LABEL,
};
use super::placement::{placement, Placement};

/// What the forecast is asked about, besides the nodes.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub karpenter: Version,
    /// Karpenter's `nodeRepair` feature gate.
    pub node_repair: bool,
    pub now: OffsetDateTime,
}

/// What happens to one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// No repair policy matches any of its conditions.
    Healthy,
    /// A policy matches and nothing blocks repair: the NodeClaim is deleted
    /// at the termination time (or already should have been: overdue).
    WillBeReplaced,
    /// A policy matches but more than 20% of its pool (or cluster) is
    /// unhealthy.
    RepairBlocked,
    /// A policy matches but node repair is switched off.
    RepairDisabled,
    /// Not a Karpenter (AWS provider) node: never repaired.
    NotManaged,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Healthy => "healthy",
            Verdict::WillBeReplaced => "will-be-replaced",
            Verdict::RepairBlocked => "repair-blocked",
            Verdict::RepairDisabled => "repair-disabled",
            Verdict::NotManaged => "not-managed",
        }
    }
}

/// Whether the nodes given are one node or the whole cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// One Node object: its pool is assumed otherwise healthy.
    SingleNode,
    /// A list: taken as every node of the pools (and cluster) involved.
    NodeList,
}

#[derive(Debug, Serialize)]
pub struct Forecast {
    pub karpenter: Version,
    pub node_repair: bool,
    pub now: String,
    pub scope: Scope,
    pub check_order: CheckOrder,
    pub requeue_when_blocked_seconds: Option<u64>,
    /// How many nodes will be replaced (the exit status is 3 when not 0).
    pub will_be_replaced: usize,
    /// The EKS node monitoring agent the advice is written for.
    pub agent: AgentInfo,
    pub nodes: Vec<NodeForecast>,
}

#[derive(Debug, Serialize)]
pub struct NodeForecast {
    pub name: String,
    pub nodepool: Option<String>,
    pub ec2nodeclass: Option<String>,
    pub instance_type: Option<String>,
    pub arch: Option<String>,
    pub verdict: Verdict,
    /// The unhealthy condition with the earliest termination time: the one
    /// Karpenter acts on.
    pub trigger: Option<Unhealthy>,
    /// Every condition that matches a repair policy.
    pub unhealthy: Vec<Unhealthy>,
    /// The 20% rule for the node's group; absent for a single node.
    pub group: Option<GroupHealth>,
    /// For a GPU node: whether the agent runs its DCGM checks here (not on
    /// arm64 before v1.7.2); `None` for other nodes.
    pub gpu_monitored: Option<bool>,
    /// For a GPU node, when the chart's `dcgm-server` DaemonSet was given:
    /// whether it lands here, and why not.
    pub dcgm_server: Option<Placement>,
    pub notes: Vec<String>,
    pub events: Vec<EventLine>,
}

/// A condition that matches a repair policy.
#[derive(Debug, Clone, Serialize)]
pub struct Unhealthy {
    #[serde(rename = "type")]
    pub condition: String,
    pub status: ConditionStatus,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub since: String,
    pub toleration_seconds: u64,
    pub termination_time: String,
    /// Negative when the termination time has passed.
    pub seconds_left: i64,
    pub overdue: bool,
    pub advice: Advice,
}

/// The 20% rule applied to a NodePool, or to the cluster for nodes without one.
#[derive(Debug, Clone, Serialize)]
pub struct GroupHealth {
    /// `nodepool NAME` or `cluster`.
    pub scope: String,
    pub nodes: usize,
    pub unhealthy: usize,
    pub max_unhealthy: usize,
    pub blocked: bool,
}

impl GroupHealth {
    /// "2 of 2 nodes unhealthy in nodepool gpu; limit is 20% rounded up = 1".
    pub fn arithmetic(&self) -> String {
        format!(
            "{} of {} nodes unhealthy in {}; limit is {}% rounded up = {}",
            self.unhealthy, self.nodes, self.scope, ALLOWED_UNHEALTHY_PERCENT, self.max_unhealthy
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct EventLine {
    pub time: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub source: Option<String>,
    pub count: Option<u64>,
}

/// Forecasts every given node, with advice written for `agent`. Linear in
/// nodes and events: the groups and each node's events are gathered in one
/// pass each.
pub fn forecast(
    input: &NodeInput,
    events: &[Event],
    model: &Model,
    options: Options,
    agent: &AgentInfo,
) -> Forecast {
    let scope = match input {
        NodeInput::Single(_) => Scope::SingleNode,
        NodeInput::List(_) => Scope::NodeList,
    };
    let nodes = input.nodes();
    let groups = match scope {
        Scope::SingleNode => BTreeMap::new(),
        Scope::NodeList => group_health(nodes, model.policies),
    };
    let histories = histories(events);
    let node_forecasts: Vec<NodeForecast> = nodes
        .iter()
        .map(|node| {
            let group = match scope {
                Scope::SingleNode => None,
                Scope::NodeList => groups.get(&group_key(node)).cloned(),
            };
            let events = histories
                .get(node.name.as_str())
                .map_or(&[][..], Vec::as_slice);
            forecast_node(node, group, events, model, options, agent)
        })
        .collect();
    Forecast {
        karpenter: options.karpenter,
        node_repair: options.node_repair,
        now: rfc3339(options.now),
        scope,
        check_order: model.order,
        requeue_when_blocked_seconds: model.requeue_when_blocked.map(|d| d.as_secs()),
        will_be_replaced: node_forecasts
            .iter()
            .filter(|n| n.verdict == Verdict::WillBeReplaced)
            .count(),
        agent: agent.clone(),
        nodes: node_forecasts,
    }
}

fn forecast_node(
    node: &Node,
    group: Option<GroupHealth>,
    events: &[&Event],
    model: &Model,
    options: Options,
    agent: &AgentInfo,
) -> NodeForecast {
    let managed = node.label(NODECLASS_LABEL).is_some();
    let arch = node.label(ARCH_LABEL);
    let gpu = is_nvidia_gpu_node(node);
    let dcgm_server = agent
        .dcgm_server
        .as_ref()
        .filter(|_| gpu)
        .map(|daemonset| placement(daemonset, node));
    let context = Context {
        agent,
        arch,
        dcgm_server: dcgm_server.as_ref(),
    };
    let unhealthy: Vec<Unhealthy> = matching(node, model.policies)
        .map(|(condition, policy)| unhealthy(condition, policy, options.now, &context))
        .collect();
    let trigger = unhealthy.iter().min_by_key(|u| u.seconds_left).cloned();
    let blocked = group.as_ref().is_some_and(|g| g.blocked);
    let verdict = match (&trigger, managed) {
        (_, false) => Verdict::NotManaged,
        (None, true) => Verdict::Healthy,
        (Some(_), true) if !options.node_repair => Verdict::RepairDisabled,
        (Some(_), true) if blocked => Verdict::RepairBlocked,
        (Some(_), true) => Verdict::WillBeReplaced,
    };
    let mut notes = notes(verdict, trigger.as_ref(), group.as_ref(), model, options);
    notes.extend(agent_notes(&context, gpu, &unhealthy));
    NodeForecast {
        name: node.name.clone(),
        nodepool: node.label(NODEPOOL_LABEL).map(str::to_owned),
        ec2nodeclass: node.label(NODECLASS_LABEL).map(str::to_owned),
        instance_type: node.label(INSTANCE_TYPE_LABEL).map(str::to_owned),
        arch: node.label(ARCH_LABEL).map(str::to_owned),
        verdict,
        trigger,
        unhealthy,
        group,
        gpu_monitored: gpu.then(|| agent.model.monitors(arch)),
        dcgm_server,
        notes,
        events: history(events),
    }
}

/// A node with an NVIDIA GPU: Karpenter's GPU labels, the device plugin's,
/// or an `AcceleratedHardwareReady` condition from the agent.
fn is_nvidia_gpu_node(node: &Node) -> bool {
    node.label(GPU_MANUFACTURER_LABEL) == Some("nvidia")
        || node.label(GPU_PRESENT_LABEL) == Some("true")
        || node.condition("AcceleratedHardwareReady").is_some()
}

/// What the agent means for a GPU node, whatever its conditions.
fn agent_notes(context: &Context<'_>, gpu: bool, unhealthy: &[Unhealthy]) -> Vec<String> {
    let agent = context.agent;
    let mut notes = Vec::new();
    if !gpu {
        return notes;
    }
    if !agent.model.monitors(context.arch) {
        notes.push(format!(
            "GPU health is not monitored on this node: agent {} ({}) skips its DCGM checks on arm64 outside EKS Auto Mode ('NVIDIA-based monitoring is disabled for the arm64 architecture'), so AcceleratedHardwareReady does not reflect GPU faults here (only NCCL errors in dmesg are watched) and node repair never replaces the node for them. From v1.7.2 (PR #269) arm64 is monitored, and then needs an engine on localhost:5555 (accelready hostengine).",
            agent.version, agent.range
        ));
    }
    let file = agent.dcgm_server_file.as_deref().unwrap_or("--dcgm-server");
    // A DCGM cause already says where dcgm-server runs.
    let said = unhealthy.iter().any(|u| u.advice.key.starts_with("dcgm-"));
    match context.dcgm_server.filter(|_| !said) {
        Some(Placement::Schedules) => notes.push(format!(
            "the chart's dcgm-server ({file}) schedules on this node: it is this node's engine (do not run a second one)"
        )),
        Some(Placement::Excluded(reasons)) => notes.push(format!(
            "the chart's dcgm-server ({file}) does not schedule on this node: {}",
            reasons.join("; ")
        )),
        None => {}
    }
    let dcgm3_message = unhealthy
        .iter()
        .any(|u| u.advice.key == "dcgm-library-not-found");
    if agent.source == AgentSource::Assumed && dcgm3_message {
        notes.push(format!(
            "the message 'libdcgm.so not Found' identifies a DCGM-3-era agent (before v1.6.0): the advice follows the message, not the assumed {}",
            agent.version
        ));
    }
    notes
}

/// The node's conditions that match a policy, by type and status only.
fn matching<'a>(
    node: &'a Node,
    policies: &'static [RepairPolicy],
) -> impl Iterator<Item = (&'a Condition, &'static RepairPolicy)> + 'a {
    policies.iter().filter_map(move |policy| {
        node.condition(policy.condition)
            .filter(|condition| condition.status == policy.status)
            .map(|condition| (condition, policy))
    })
}

fn unhealthy(
    condition: &Condition,
    policy: &RepairPolicy,
    now: OffsetDateTime,
    context: &Context<'_>,
) -> Unhealthy {
    let toleration = policy.toleration.as_secs();
    let seconds_left = (condition.since - now).whole_seconds() + toleration as i64;
    let termination = condition
        .since
        .checked_add(time::Duration::seconds(toleration as i64))
        .map_or_else(
            || format!("{} + {toleration}s", rfc3339(condition.since)),
            rfc3339,
        );
    Unhealthy {
        condition: condition.kind.clone(),
        status: condition.status,
        reason: condition.reason.clone(),
        message: condition.message.clone(),
        since: rfc3339(condition.since),
        toleration_seconds: toleration,
        termination_time: termination,
        seconds_left,
        overdue: seconds_left <= 0,
        advice: advise(condition, context),
    }
}

/// The group a node is counted in: its NodePool, or the cluster.
fn group_key(node: &Node) -> Option<&str> {
    node.label(NODEPOOL_LABEL)
}

/// The 20% rule for every group among `nodes`. A pool holds the nodes with
/// its label; the cluster group (key `None`) holds every node, as Karpenter
/// lists all nodes for NodeClaims without a pool.
fn group_health<'a>(
    nodes: &'a [Node],
    policies: &'static [RepairPolicy],
) -> BTreeMap<Option<&'a str>, GroupHealth> {
    // (nodes, unhealthy) per group, in one pass.
    let mut counts: BTreeMap<Option<&str>, (usize, usize)> = BTreeMap::new();
    let mut cluster = (0, 0);
    for node in nodes {
        let unhealthy = usize::from(matching(node, policies).next().is_some());
        cluster = (cluster.0 + 1, cluster.1 + unhealthy);
        if let Some(pool) = group_key(node) {
            let count = counts.entry(Some(pool)).or_default();
            *count = (count.0 + 1, count.1 + unhealthy);
        }
    }
    counts.insert(None, cluster);
    counts
        .into_iter()
        .map(|(key, (members, unhealthy))| {
            let limit = max_unhealthy(members);
            let scope = match key {
                Some(pool) => format!("nodepool {pool}"),
                None => "cluster".to_owned(),
            };
            let health = GroupHealth {
                scope,
                nodes: members,
                unhealthy,
                max_unhealthy: limit,
                blocked: unhealthy > limit,
            };
            (key, health)
        })
        .collect()
}

fn notes(
    verdict: Verdict,
    trigger: Option<&Unhealthy>,
    group: Option<&GroupHealth>,
    model: &Model,
    options: Options,
) -> Vec<String> {
    let version = options.karpenter;
    let mut notes = Vec::new();
    let single = group.is_none();
    match verdict {
        Verdict::NotManaged => notes.push(format!(
            "no '{NODECLASS_LABEL}' label: Karpenter's node health controller does not watch this node; node repair never replaces it"
        )),
        Verdict::Healthy => {
            if group.is_some_and(|g| g.blocked) && model.order == CheckOrder::PoolFirst && options.node_repair {
                notes.push(format!(
                    "Karpenter {version} checks the pool before the node's own conditions: this healthy node gets NodeRepairBlocked events too while its {} is over the limit",
                    group.map_or("pool", |g| g.scope.as_str())
                ));
            }
        }
        Verdict::RepairDisabled => notes.push(
            "node repair is off: Karpenter will not replace this node; the condition stays until whatever set it clears it".to_owned(),
        ),
        Verdict::WillBeReplaced => {
            notes.push(
                "at the termination time Karpenter annotates the NodeClaim with karpenter.sh/nodeclaim-termination-timestamp and deletes it: forceful, drain and PodDisruptionBudgets are bypassed; there is no per-node or per-NodePool opt-out".to_owned(),
            );
            if trigger.is_some_and(|t| t.overdue) {
                notes.push(
                    "the termination time has passed: Karpenter should already have deleted the NodeClaim (is it terminating? look for NodeRepairBlocked events)".to_owned(),
                );
            }
        }
        Verdict::RepairBlocked => {
            notes.push(blocked_note(version, model));
        }
    }
    if single
        && matches!(verdict, Verdict::WillBeReplaced | Verdict::Healthy)
        && options.node_repair
    {
        notes.push(
            "only this node was given: the forecast assumes the rest of its pool is healthy; pass `kubectl get nodes -o json` to apply the 20% rule".to_owned(),
        );
    }
    notes
}

fn blocked_note(version: Version, model: &Model) -> String {
    let order = match model.order {
        CheckOrder::PoolFirst => format!(
            "Karpenter {version} checks the pool before the node's own conditions: it emits NodeRepairBlocked (\"more than 20% nodes are unhealthy in the nodepool\") on every reconcile of every node in the pool, even before the toleration elapses"
        ),
        CheckOrder::NodeFirst => format!(
            "Karpenter {version} checks the node's own conditions first and the pool only once the toleration has elapsed; then it emits NodeRepairBlocked (\"more than 20% nodes are unhealthy in the nodepool\")"
        ),
    };
    let retry = match model.requeue_when_blocked {
        Some(every) => format!(
            "; it retries every {}s while blocked, so the node is replaced within that time once the group is back within the limit",
            every.as_secs()
        ),
        None => "; it does not retry on a timer: repair resumes at the node's next reconcile (any update to the Node object) once the group is back within the limit".to_owned(),
    };
    order + &retry
}

/// The events about nodes (`involvedObject` kind Node, or none), by node
/// name, in the order given.
fn histories(events: &[Event]) -> BTreeMap<&str, Vec<&Event>> {
    let mut by_node: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for event in events {
        if event.object_kind.as_deref().is_none_or(|k| k == "Node") {
            by_node.entry(&event.object_name).or_default().push(event);
        }
    }
    by_node
}

/// One node's events, oldest first.
fn history(events: &[&Event]) -> Vec<EventLine> {
    let mut mine = events.to_vec();
    mine.sort_by_key(|e| e.time);
    mine.into_iter()
        .map(|e| EventLine {
            time: e.time.map(rfc3339),
            kind: e.kind.clone(),
            reason: e.reason.clone(),
            message: e.message.clone(),
            source: e.source.clone(),
            count: e.count,
        })
        .collect()
}

/// RFC 3339, UTC as `Z`; a time that cannot be written so (years past
/// 9999) falls back to `time`'s own format rather than failing.
pub fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_else(|_| at.to_string())
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;
    use crate::repair::model::model_for;

    fn node(name: &str, pool: Option<&str>, managed: bool, unhealthy: bool) -> Node {
        let mut labels = BTreeMap::new();
        if let Some(pool) = pool {
            labels.insert(NODEPOOL_LABEL.to_owned(), pool.to_owned());
        }
        if managed {
            labels.insert(NODECLASS_LABEL.to_owned(), "gpu".to_owned());
        }
        let status = if unhealthy {
            ConditionStatus::False
        } else {
            ConditionStatus::True
        };
        Node {
            name: name.to_owned(),
            labels,
            taints: Vec::new(),
            conditions: vec![Condition {
                kind: "AcceleratedHardwareReady".to_owned(),
                status,
                reason: None,
                message: None,
                since: datetime!(2025-06-10 03:00 UTC),
            }],
        }
    }

    fn run(nodes: Vec<Node>, version: &str) -> Forecast {
        let karpenter: Version = version.parse().unwrap();
        let options = Options {
            karpenter,
            node_repair: true,
            now: datetime!(2025-06-10 03:05 UTC),
        };
        forecast(
            &NodeInput::List(nodes),
            &[],
            model_for(karpenter).unwrap(),
            options,
            &AgentInfo::assumed(),
        )
    }

    #[test]
    fn nodes_without_a_pool_are_counted_against_the_whole_cluster() {
        // 1 poolless unhealthy node among 6 nodes in total: limit 2, repaired,
        // although the poolless nodes alone (1 of 1) would also pass.
        let mut nodes: Vec<Node> = (0..5)
            .map(|i| node(&format!("p{i}"), Some("gpu"), true, false))
            .collect();
        nodes.push(node("solo", None, true, true));
        let forecast = run(nodes, "v1.4.0");
        let solo = forecast.nodes.iter().find(|n| n.name == "solo").unwrap();
        assert_eq!(solo.verdict, Verdict::WillBeReplaced);
        let group = solo.group.as_ref().unwrap();
        assert_eq!(
            (
                group.scope.as_str(),
                group.nodes,
                group.unhealthy,
                group.max_unhealthy
            ),
            ("cluster", 6, 1, 2)
        );
    }

    #[test]
    fn unmanaged_nodes_count_in_the_cluster_group_but_are_never_repaired() {
        let nodes = vec![
            node("a", None, false, true),
            node("b", None, true, true),
            node("c", None, true, false),
        ];
        let forecast = run(nodes, "v1.4.0");
        let verdicts: Vec<Verdict> = forecast.nodes.iter().map(|n| n.verdict).collect();
        assert_eq!(
            verdicts,
            [
                Verdict::NotManaged,
                Verdict::RepairBlocked,
                Verdict::Healthy
            ]
        );
        assert_eq!(forecast.will_be_replaced, 0);
    }

    #[test]
    fn only_v1_4_warns_healthy_nodes_of_a_blocked_pool() {
        let nodes = || {
            vec![
                node("a", Some("gpu"), true, true),
                node("b", Some("gpu"), true, true),
                node("c", Some("gpu"), true, false),
            ]
        };
        let note = |forecast: &Forecast| {
            forecast.nodes[2]
                .notes
                .iter()
                .any(|n| n.contains("this healthy node gets NodeRepairBlocked"))
        };
        assert!(note(&run(nodes(), "v1.4.0")));
        assert!(!note(&run(nodes(), "v1.6.0")));
    }
}
