//! Cause and fix texts for unhealthy conditions, as data keyed on the
//! condition's type, status, reason and message. The first matching entry
//! of [`ADVICE`] applies; the last one matches everything.
//!
//! The agent's `DCGMError`s are answered for the agent that runs
//! ([`super::agent`], FACTS §7.3–7.4) and the node's architecture: a
//! DCGM-3-era agent must be upgraded (no bundle can fix it), an arm64 node
//! under an agent that monitors arm64 needs an engine on localhost:5555 (the
//! `accelready hostengine` host container), an amd64 node needs the chart's
//! `dcgm-server` to land on it.

use serde::Serialize;

use super::agent::{AgentInfo, AgentSource, DcgmClient, AGENT_CONTAINER};
use super::kube::Condition;
use super::model::ConditionStatus;
use super::placement::Placement;

/// When an entry applies: every field that is set must match.
#[derive(Debug)]
struct When {
    condition: Option<&'static str>,
    status: Option<ConditionStatus>,
    reason: Option<&'static str>,
    /// Any of these in the message.
    message_contains: &'static [&'static str],
}

impl When {
    fn matches(&self, condition: &Condition) -> bool {
        self.condition.is_none_or(|kind| condition.kind == kind)
            && self.status.is_none_or(|status| condition.status == status)
            && self
                .reason
                .is_none_or(|reason| condition.reason.as_deref() == Some(reason))
            && (self.message_contains.is_empty()
                || self.message_contains.iter().any(|text| {
                    condition
                        .message
                        .as_deref()
                        .is_some_and(|message| message.contains(text))
                }))
    }
}

/// Why a condition is what it is, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Advice {
    /// A stable identifier for scripts (`dcgm-library-not-found`, ...).
    pub key: &'static str,
    pub cause: Vec<String>,
    pub fixes: Vec<String>,
}

/// What the advice depends on besides the condition.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub agent: &'a AgentInfo,
    /// The node's `kubernetes.io/arch` (`arm64`, `amd64`), if labelled.
    pub arch: Option<&'a str>,
    /// Where the chart's `dcgm-server` lands on this node, when its
    /// DaemonSet was given.
    pub dcgm_server: Option<&'a Placement>,
}

/// The texts of an entry: fixed, or written for the agent and the node.
#[derive(Debug)]
enum Text {
    Fixed {
        cause: &'static [&'static str],
        fixes: &'static [&'static str],
    },
    /// The agent's DCGM client could not load its library (DCGM-3-era text).
    LibraryNotFound,
    /// No engine answered at `DCGM_ADDRESS`.
    EngineUnreachable,
    /// Any other `DCGMError`.
    OtherDcgmError,
}

#[derive(Debug)]
struct Entry {
    key: &'static str,
    when: When,
    text: Text,
}

const DCGM_ERROR: When = When {
    condition: Some("AcceleratedHardwareReady"),
    status: Some(ConditionStatus::False),
    reason: Some("DCGMError"),
    message_contains: &[],
};

static ADVICE: &[Entry] = &[
    Entry {
        key: "dcgm-library-not-found",
        when: When {
            // "%s not Found" with a capital F: go-dcgm <= v3.3.9 (FACTS §1.3).
            message_contains: &["libdcgm.so not Found"],
            ..DCGM_ERROR
        },
        text: Text::LibraryNotFound,
    },
    Entry {
        key: "dcgm-engine-unreachable",
        when: When {
            // go-dcgm's "error connecting to nv-hostengine: Host engine
            // connection invalid/disconnected" (containers-roadmap#2555,
            // eks-node-monitoring-agent#243).
            message_contains: &["nv-hostengine", "Host engine connection", "connection invalid"],
            ..DCGM_ERROR
        },
        text: Text::EngineUnreachable,
    },
    Entry {
        key: "dcgm-error",
        when: DCGM_ERROR,
        text: Text::OtherDcgmError,
    },
    Entry {
        key: "kubelet-not-reporting",
        when: When {
            condition: Some("Ready"),
            status: Some(ConditionStatus::Unknown),
            reason: None,
            message_contains: &[],
        },
        text: Text::Fixed {
            cause: &[
                "kubelet stopped posting node status, so the node lifecycle controller set Ready=Unknown ('Kubelet stopped posting node status').",
                "On small instances this is typically kubelet being OOM-killed: the node stays up as a 'zombie' that runs nothing new, which is what node repair replaces after 30 minutes.",
            ],
            fixes: &[
                "Reserve memory for kubelet: size kube-reserved memory like Bottlerocket's default, 11 * max-pods + 255 Mi (settings.kubernetes.kube-reserved; an EC2NodeClass spec.kubelet.kubeReserved replaces it), and set an eviction-hard memory.available threshold.",
                "Use instance types with at least 4 GiB of memory for nodes that run kubelet plus the usual DaemonSets.",
                "Keep node repair on: replacing a node that stopped reporting is what it is for.",
            ],
        },
    },
    Entry {
        key: "generic",
        when: When {
            condition: None,
            status: None,
            reason: None,
            message_contains: &[],
        },
        text: Text::Fixed {
            cause: &[
                "Karpenter matches this condition by type and status only, never by reason or message, and its toleration is fixed: whatever the reason, the node is replaced once the toleration has elapsed.",
            ],
            fixes: &[
                "Find what set the condition: kubelet sets Ready; the EKS node monitoring agent sets AcceleratedHardwareReady, StorageReady, NetworkingReady, KernelReady and ContainerRuntimeReady (see its pod's logs on the node).",
                "If the fault is real, let node repair replace the node; if it is not, fix what reports it (the agent never clears a condition without a pod restart).",
            ],
        },
    },
];

// --- the parts the DCGM texts are made of (FACTS §1, §7) ---

const BOTTLEROCKET: &str = "Bottlerocket's NVIDIA variants ship the driver but no DCGM: no libdcgm.so*, no nv-hostengine (bottlerocket-core-kit#701 is open).";
const GRACE: &str = "The agent sets the condition after its 1-minute grace period (DCGM_GRACE_PERIOD_DURATION), tolerates about a minute of lost engine connection, and never sets the condition back to True without a restart of its pod (eks-node-monitoring-agent#266).";
const ARM64_NO_DCGM_SERVER: &str = "On arm64 (e.g. g5g) the agent chart's dcgm-server DaemonSet (nv-hostengine on hostPort 5555) never runs: its dcgmAgent.affinity restricts it to kubernetes.io/arch In [amd64], in every chart version through v1.7.2.";
const AMD64_DCGM_SERVER: &str = "On amd64 the agent chart's dcgm-server DaemonSet (nv-hostengine on hostPort 5555) is the engine, unless it does not land on the node: its default tolerations are [] (a GPU node tainted e.g. nvidia.com/gpu gets none), its affinity lists the NVIDIA instance types, and its hostPort needs the CNI's portmap plugin (eks-node-monitoring-agent#243). Pass --dcgm-server FILE (kubectl get ds -n kube-system dcgm-server -o json) to check this node.";
const HOSTENGINE: &str = "accelready's `hostengine` host container (superpowered; nv-hostengine from the DCGM bundle `accelready boot` installs, bound to 127.0.0.1 only, supervised, checked to see the node's GPUs). `accelready render` emits it with [hostengine] run = \"auto\" (the default: on aarch64), and `accelready render --format agent-values` gives the chart values that keep the chart's dcgm-server off the nodes it serves: never two engines on one node.";
const CHART_AFFINITY: &str = "Or let the chart's dcgm-server run on arm64: override dcgmAgent.affinity to allow kubernetes.io/arch arm64 (give the whole nodeSelectorTerms list: Helm replaces lists). Caveats: it runs `nv-hostengine -n -b ALL` (DCGM's unauthenticated API on every address of the node), depends on hostPort 5555 (the CNI's portmap plugin, eks-node-monitoring-agent#243), tolerates no taints by default (dcgmAgent.tolerations), and must not share a node with accelready's engine.";
const HOSTENGINE_X86: &str = "Or run accelready's host engine on x86_64 too ([hostengine] run = \"always\", or architectures = [\"aarch64\", \"x86_64\"]) and keep the chart's dcgm-server off those nodes with the values of `accelready render --format agent-values`: never two engines on one node.";
const DISABLE_MONITOR: &str = "Disable the agent's NVIDIA monitor (node monitoring agent v1.6.0+, Helm value nodeAgent.monitors.nvidia.enabled: false): the condition is then never set, and real GPU faults are no longer reported either.";
const NODE_REPAIR_OFF: &str = "Last resort: turn node repair off (Karpenter Helm value settings.featureGates.nodeRepair=false). It is cluster-wide: there is no per-node or per-NodePool opt-out, and kubelet-OOM zombie nodes are then no longer replaced.";

/// The advice for an unhealthy condition, given the agent and the node.
pub fn advise(condition: &Condition, context: &Context<'_>) -> Advice {
    let entry = ADVICE
        .iter()
        .find(|entry| entry.when.matches(condition))
        .unwrap_or(&ADVICE[ADVICE.len() - 1]);
    let (cause, fixes) = match &entry.text {
        Text::Fixed { cause, fixes } => (
            cause.iter().map(|s| (*s).to_owned()).collect(),
            fixes.iter().map(|s| (*s).to_owned()).collect(),
        ),
        Text::LibraryNotFound => library_not_found(context),
        Text::EngineUnreachable => engine_unreachable(context),
        Text::OtherDcgmError => other_dcgm_error(context),
    };
    Advice {
        key: entry.key,
        cause,
        fixes,
    }
}

/// Whether the node is arm64, amd64, or not labelled.
fn arch(context: &Context<'_>) -> Option<bool> {
    match context.arch {
        Some("arm64") => Some(true),
        Some("amd64") => Some(false),
        _ => None,
    }
}

/// What the chart's `dcgm-server` does on this node, when known.
fn dcgm_server_line(context: &Context<'_>) -> Option<String> {
    let file = context
        .agent
        .dcgm_server_file
        .as_deref()
        .unwrap_or("--dcgm-server");
    match context.dcgm_server? {
        Placement::Schedules => Some(format!(
            "The chart's dcgm-server DaemonSet ({file}) does schedule on this node: look at its pod there (it runs `nv-hostengine -n -b ALL || true; sleep infinity`, so a crashed engine leaves a Running pod) and at its hostPort 5555, which needs the CNI's portmap plugin (eks-node-monitoring-agent#243)."
        )),
        Placement::Excluded(reasons) => Some(format!(
            "The chart's dcgm-server DaemonSet ({file}) does not run on this node: {}.",
            reasons.join("; ")
        )),
    }
}

/// The engine fixes for where the node is: arm64 -> accelready's host
/// engine or the affinity override; amd64 -> the chart's dcgm-server.
fn engine_fixes(context: &Context<'_>) -> Vec<String> {
    if let Some(address) = &context.agent.dcgm_address {
        return vec![format!(
            "Make the engine at {address} answer on the node. It is accelready's host engine when the chart values come from `accelready render --format agent-values`: read /var/lib/accelready/hostengine.json on the node (its state says why: waiting-for-bundle = no DCGM installed for this architecture, crash-loop, idle-other-engine) and journalctl -u host-containers@<[hostengine] name> from the admin container. If the chart's dcgm-server was meant to serve this node instead, unset nodeAgent.dcgmAddress and dcgmAgent.enabled: false."
        )];
    }
    match arch(context) {
        Some(false) => {
            let specific = match context.dcgm_server {
                Some(Placement::Excluded(reasons)) => format!(
                    " Here: {}: add a toleration for each taint in dcgmAgent.tolerations, and make dcgmAgent.affinity match the node.",
                    reasons.join("; ")
                ),
                _ => String::new(),
            };
            vec![
                format!(
                    "Make the chart's dcgm-server run on the node (it is the engine for amd64 nodes): tolerate the node's taints (dcgmAgent.tolerations, default []), list its instance type in dcgmAgent.affinity, and use a CNI with hostPort support (eks-node-monitoring-agent#243).{specific}"
                ),
                HOSTENGINE_X86.to_owned(),
            ]
        }
        _ => vec![
            format!("Run a DCGM host engine on the node: {HOSTENGINE}"),
            CHART_AFFINITY.to_owned(),
        ],
    }
}

/// A note when the agent that was named cannot have written this message.
fn mismatch(context: &Context<'_>, client: DcgmClient) -> Option<String> {
    let agent = context.agent;
    (agent.source != AgentSource::Assumed && agent.model.client != client).then(|| {
        format!(
            "This message comes from a {client}, but the agent given is {} ({}): the agent on this node is not the one you named; check its image (kubectl get ds -n kube-system {AGENT_CONTAINER} -o jsonpath='{{..image}}').",
            agent.version, agent.model.client
        )
    })
}

/// A note when the agent named does not monitor this node at all.
fn not_monitored_here(context: &Context<'_>) -> Option<String> {
    let agent = context.agent;
    (agent.source != AgentSource::Assumed && !agent.model.monitors(context.arch)).then(|| {
        format!(
            "Agent {} ({}) skips DCGM on arm64 outside EKS Auto Mode, yet this arm64 node has a DCGMError: the agent on it is not {} (or the node is an EKS Auto Mode node); check its image (kubectl get ds -n kube-system {AGENT_CONTAINER} -o jsonpath='{{..image}}').",
            agent.version, agent.range, agent.version
        )
    })
}

/// For a DCGM-3-era agent: upgrade it before anything else, since every
/// engine on offer is DCGM 4, which such a client cannot use (FACTS §7.3).
fn upgrade_first(context: &Context<'_>) -> Option<String> {
    let agent = context.agent;
    (agent.model.client == DcgmClient::Dcgm3).then(|| {
        format!(
            "Upgrade the EKS node monitoring agent first (to v1.7.2 or later): {} is a DCGM-3-era client, and every engine on offer — accelready's host engine, the chart's dcgm-server since v1.5.2 — runs DCGM 4, which such a client cannot use. No bundle can fix the agent you run.",
            agent.version
        )
    })
}

/// When the agent is pointed at an engine of its own choosing
/// (`DCGM_ADDRESS`, chart value `nodeAgent.dcgmAddress`, v1.7.1+): which
/// engine that is, instead of the chart's `dcgm-server`.
fn external_engine(context: &Context<'_>) -> Option<String> {
    let address = context.agent.dcgm_address.as_deref()?;
    Some(format!(
        "The agent is pointed at an engine of your own: DCGM_ADDRESS = {address} (Helm value nodeAgent.dcgmAddress). `accelready render --format agent-values` sets it, with dcgmAgent.enabled: false, where accelready's host engine serves every architecture: the engine for this node is then accelready's host container, not the chart's dcgm-server."
    ))
}

fn library_not_found(context: &Context<'_>) -> (Vec<String>, Vec<String>) {
    let mut cause = vec![
        "'libdcgm.so not Found' (capital F) is written only by a DCGM-3-era client (go-dcgm <= v3.3.9): the EKS node monitoring agent before v1.6.0 (its 2025 builds). It dlopen()s the unversioned name 'libdcgm.so' inside its own container, which only DCGM 3 packages and the -dev/-devel packages provide (DCGM 4 ships libdcgm.so.4), and it drops dlerror(), so 'not Found' also covers a missing dependency or a library of the wrong architecture.".to_owned(),
        "No library or bundle on the host can heal this agent: it loads libdcgm in its own container, not from the host, and DCGM 4 retired the struct versions a DCGM-3-era client uses (VER_MISMATCH / FUNCTION_NOT_FOUND), so even a 'libdcgm.so -> libdcgm.so.4' link would only move the failure.".to_owned(),
        BOTTLEROCKET.to_owned(),
    ];
    cause.extend(mismatch(context, DcgmClient::Dcgm3));
    if arch(context) != Some(false) {
        cause.push(ARM64_NO_DCGM_SERVER.to_owned());
    }
    cause.extend(dcgm_server_line(context));
    cause.push(GRACE.to_owned());
    let mut fixes = vec![
        "Upgrade the EKS node monitoring agent first (the EKS add-on or its Helm chart) to v1.7.2 or later: it carries its own DCGM 4 library (libdcgm.so.4) in its image. No bundle can fix the agent you run. Restart its pods afterwards: it never clears the condition by itself.".to_owned(),
    ];
    match arch(context) {
        Some(false) => fixes.push("Then make sure the chart's dcgm-server runs on the node, which it serves on amd64: its default tolerations are [] and its affinity lists the NVIDIA instance types (pass --dcgm-server FILE to check).".to_owned()),
        _ => fixes.push(format!(
            "Then give arm64 nodes the DCGM host engine on localhost:5555 that v1.7.2+ needs there: {HOSTENGINE} (Agents v1.6.0 – v1.7.1 skip DCGM on arm64 instead: no DCGMError there, but no GPU health either.)"
        )),
    }
    fixes.push("Or, once on v1.6.0+, disable the agent's NVIDIA monitor (Helm value nodeAgent.monitors.nvidia.enabled: false; the 2025 builds have no such value): the condition is then never set, and real GPU faults are no longer reported either.".to_owned());
    fixes.push(NODE_REPAIR_OFF.to_owned());
    (cause, fixes)
}

fn engine_unreachable(context: &Context<'_>) -> (Vec<String>, Vec<String>) {
    let agent = context.agent;
    let address = match &agent.dcgm_address {
        Some(address) => format!("{address} (DCGM_ADDRESS, set by nodeAgent.dcgmAddress)"),
        None => format!(
            "{} (the default; DCGM_ADDRESS not set)",
            agent.model.engine_address
        ),
    };
    let mut cause = vec![format!(
        "The agent ({}, a {}) is a standalone DCGM client with the libdcgm of its own image: it connects to an nv-hostengine at {address} and found none answering. A DCGM library on the host is not what it lacks; an engine is.",
        agent.version,
        agent.model.client
    )];
    cause.extend(not_monitored_here(context));
    match (
        dcgm_server_line(context),
        external_engine(context),
        arch(context),
    ) {
        (Some(line), _, _) => cause.push(line),
        (None, Some(line), _) => cause.push(line),
        (None, None, Some(false)) => cause.push(AMD64_DCGM_SERVER.to_owned()),
        (None, None, _) => cause.push(ARM64_NO_DCGM_SERVER.to_owned()),
    }
    cause.push(BOTTLEROCKET.to_owned());
    cause.push(GRACE.to_owned());
    let mut fixes: Vec<String> = upgrade_first(context).into_iter().collect();
    fixes.extend(engine_fixes(context));
    fixes.push(DISABLE_MONITOR.to_owned());
    fixes.push(NODE_REPAIR_OFF.to_owned());
    (cause, fixes)
}

fn other_dcgm_error(context: &Context<'_>) -> (Vec<String>, Vec<String>) {
    let agent = context.agent;
    let mut cause = vec![format!(
        "The agent's NVIDIA monitor ({}) could not use DCGM; the message says why. It is a standalone DCGM client: it needs an nv-hostengine at {} that sees the node's GPUs (an engine that sees 0 GPUs raises NvidiaDeviceCountMismatch instead).",
        agent.describe(),
        agent.engine_address()
    )];
    cause.extend(not_monitored_here(context));
    cause.extend(dcgm_server_line(context).or_else(|| external_engine(context)));
    cause.push(GRACE.to_owned());
    let mut fixes: Vec<String> = upgrade_first(context).into_iter().collect();
    fixes.push(format!(
        "Read the agent pod's log on the node (kubectl logs -n kube-system <{AGENT_CONTAINER} pod on the node>) and the engine's: the chart's dcgm-server pod, or accelready's host engine (/var/lib/accelready/hostengine.json on the node; journalctl -u host-containers@accelready-hostengine from the admin container)."
    ));
    fixes.extend(engine_fixes(context));
    fixes.push(DISABLE_MONITOR.to_owned());
    fixes.push(NODE_REPAIR_OFF.to_owned());
    (cause, fixes)
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    fn condition(kind: &str, status: ConditionStatus, reason: &str, message: &str) -> Condition {
        Condition {
            kind: kind.to_owned(),
            status,
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            since: datetime!(2025-06-10 03:00 UTC),
        }
    }

    fn dcgm(message: &str) -> Condition {
        condition(
            "AcceleratedHardwareReady",
            ConditionStatus::False,
            "DCGMError",
            message,
        )
    }

    #[test]
    fn advice_is_keyed_on_reason_and_message() {
        let agent = AgentInfo::assumed();
        let context = Context {
            agent: &agent,
            arch: Some("arm64"),
            dcgm_server: None,
        };
        let cases = [
            (
                dcgm("failed to initialize DCGM: libdcgm.so not Found"),
                "dcgm-library-not-found",
            ),
            (
                dcgm("failed to initialize DCGM: error connecting to nv-hostengine: Host engine connection invalid/disconnected"),
                "dcgm-engine-unreachable",
            ),
            (dcgm("failed to initialize DCGM: libdcgm.so.4 not found"), "dcgm-error"),
            (
                condition(
                    "AcceleratedHardwareReady",
                    ConditionStatus::False,
                    "NvidiaXID79Error",
                    "GPU fell off the bus",
                ),
                "generic",
            ),
            (
                condition(
                    "Ready",
                    ConditionStatus::Unknown,
                    "NodeStatusUnknown",
                    "Kubelet stopped posting node status.",
                ),
                "kubelet-not-reporting",
            ),
            (
                condition(
                    "Ready",
                    ConditionStatus::False,
                    "KubeletNotReady",
                    "PLEG is not healthy",
                ),
                "generic",
            ),
        ];
        for (condition, key) in cases {
            assert_eq!(advise(&condition, &context).key, key, "{condition:?}");
        }
    }

    #[test]
    fn a_dcgm3_message_says_upgrade_first_whatever_the_arch() {
        let agent = AgentInfo::assumed();
        for arch in [Some("arm64"), Some("amd64"), None] {
            let context = Context {
                agent: &agent,
                arch,
                dcgm_server: None,
            };
            let advice = advise(&dcgm("libdcgm.so not Found"), &context);
            assert!(advice.fixes[0].starts_with("Upgrade the EKS node monitoring agent first"));
            assert!(advice.fixes[0].contains("No bundle can fix"), "{arch:?}");
            assert!(!advice
                .cause
                .iter()
                .any(|c| c.contains("the agent given is")));
            let hostengine = advice.fixes[1].contains("`hostengine` host container");
            assert_eq!(
                hostengine,
                arch != Some("amd64"),
                "{arch:?}: {:?}",
                advice.fixes
            );
        }
        // Named as a DCGM 4 agent: the message contradicts it, and says so.
        let named = AgentInfo::given("v1.7.2").unwrap();
        let context = Context {
            agent: &named,
            arch: Some("arm64"),
            dcgm_server: None,
        };
        let advice = advise(&dcgm("libdcgm.so not Found"), &context);
        assert!(advice
            .cause
            .iter()
            .any(|c| c.contains("the agent given is v1.7.2")));
    }

    #[test]
    fn a_dcgm3_agent_is_told_to_upgrade_first_for_any_dcgm_error() {
        let agent = AgentInfo::given("v1.5.0").unwrap();
        let context = Context {
            agent: &agent,
            arch: Some("arm64"),
            dcgm_server: None,
        };
        for message in [
            "dcgmHealthCheck: Version mismatch (VER_MISMATCH)",
            "failed to initialize DCGM: error connecting to nv-hostengine: Host engine connection invalid/disconnected",
        ] {
            let advice = advise(&dcgm(message), &context);
            assert!(
                advice.fixes[0].starts_with("Upgrade the EKS node monitoring agent first"),
                "{message}: {:?}",
                advice.fixes
            );
        }
        // A DCGM 4 agent is not.
        let agent = AgentInfo::given("v1.7.2").unwrap();
        let context = Context {
            agent: &agent,
            arch: Some("arm64"),
            dcgm_server: None,
        };
        let advice = advise(&dcgm("dcgmHealthCheck: Version mismatch"), &context);
        assert!(!advice.fixes.iter().any(|f| f.contains("Upgrade the EKS")));
    }

    #[test]
    fn an_agent_pointed_at_its_own_engine_is_not_sent_to_the_charts() {
        let mut agent = AgentInfo::given("v1.7.2").unwrap();
        agent.dcgm_address = Some("localhost:5556".to_owned());
        for arch in [Some("amd64"), Some("arm64")] {
            let context = Context {
                agent: &agent,
                arch,
                dcgm_server: None,
            };
            for message in [
                "failed to initialize DCGM: error connecting to nv-hostengine: Host engine connection invalid/disconnected",
                "dcgmHealthCheck: something else",
            ] {
                let advice = advise(&dcgm(message), &context);
                assert!(
                    advice.cause.iter().any(|c| c.contains("DCGM_ADDRESS = localhost:5556")),
                    "{arch:?} {message}: {:?}",
                    advice.cause
                );
                assert!(
                    !advice.cause.iter().any(|c| c.contains("is the engine, unless")),
                    "{arch:?}: {:?}",
                    advice.cause
                );
                assert!(
                    !advice.fixes.iter().any(|f| f.starts_with("Make the chart's dcgm-server run")),
                    "{arch:?}: {:?}",
                    advice.fixes
                );
                assert!(
                    advice.fixes.iter().any(|f| f.starts_with("Make the engine at localhost:5556 answer")),
                    "{arch:?}: {:?}",
                    advice.fixes
                );
            }
        }
    }

    #[test]
    fn an_unreachable_engine_is_answered_by_architecture() {
        let agent = AgentInfo::given("1.7.2").unwrap();
        let message =
            dcgm("error connecting to nv-hostengine: Host engine connection invalid/disconnected");
        let arm64 = advise(
            &message,
            &Context {
                agent: &agent,
                arch: Some("arm64"),
                dcgm_server: None,
            },
        );
        assert!(arm64.fixes[0].contains("`hostengine` host container"));
        assert!(arm64.fixes[1].contains("override dcgmAgent.affinity"));
        assert!(arm64.cause.iter().any(|c| c.contains("In [amd64]")));
        let excluded = Placement::Excluded(vec![
            "taint nvidia.com/gpu=true:NoSchedule is not tolerated (it has no tolerations)"
                .to_owned(),
        ]);
        let amd64 = advise(
            &message,
            &Context {
                agent: &agent,
                arch: Some("amd64"),
                dcgm_server: Some(&excluded),
            },
        );
        assert!(amd64.fixes[0].starts_with("Make the chart's dcgm-server run on the node"));
        assert!(amd64.fixes[0].contains("Here: taint nvidia.com/gpu=true:NoSchedule"));
        assert!(amd64
            .cause
            .iter()
            .any(|c| c.contains("does not run on this node")));
        // A skipping agent named on arm64: the error cannot be its own.
        let skipping = AgentInfo::given("1.7.1").unwrap();
        let advice = advise(
            &message,
            &Context {
                agent: &skipping,
                arch: Some("arm64"),
                dcgm_server: None,
            },
        );
        assert!(advice
            .cause
            .iter()
            .any(|c| c.contains("skips DCGM on arm64")));
    }

    #[test]
    fn the_last_entry_matches_everything() {
        let last = ADVICE.last().unwrap();
        assert!(last
            .when
            .matches(&condition("Anything", ConditionStatus::True, "", "")));
    }
}
