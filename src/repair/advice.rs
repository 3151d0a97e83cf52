//! Cause and fix texts for unhealthy conditions, as data keyed on the
//! condition's type, status, reason and message. The first matching entry
//! of [`ADVICE`] applies; the last one matches everything.

use serde::Serialize;

use super::kube::Condition;
use super::model::ConditionStatus;

/// When an entry applies: every field that is set must match.
#[derive(Debug)]
struct When {
    condition: Option<&'static str>,
    status: Option<ConditionStatus>,
    reason: Option<&'static str>,
    message_contains: Option<&'static str>,
}

impl When {
    fn matches(&self, condition: &Condition) -> bool {
        self.condition.is_none_or(|kind| condition.kind == kind)
            && self.status.is_none_or(|status| condition.status == status)
            && self
                .reason
                .is_none_or(|reason| condition.reason.as_deref() == Some(reason))
            && self.message_contains.is_none_or(|text| {
                condition
                    .message
                    .as_deref()
                    .is_some_and(|message| message.contains(text))
            })
    }
}

/// Why a condition is what it is, and what to do about it.
#[derive(Debug, Serialize)]
pub struct Advice {
    /// A stable identifier for scripts (`dcgm-library-not-found`, ...).
    pub key: &'static str,
    pub cause: &'static [&'static str],
    pub fixes: &'static [&'static str],
    #[serde(skip)]
    when: When,
}

static ADVICE: &[Advice] = &[
    Advice {
        key: "dcgm-library-not-found",
        when: When {
            condition: Some("AcceleratedHardwareReady"),
            status: Some(ConditionStatus::False),
            reason: Some("DCGMError"),
            message_contains: Some("libdcgm.so not Found"),
        },
        cause: &[
            "The EKS node monitoring agent's NVIDIA monitor is a DCGM client built with go-dcgm <= v3.3.9 (DCGM-3 era): it dlopen()s the unversioned name 'libdcgm.so', which only DCGM 3 packages and the -dev/-devel packages provide (DCGM 4 ships libdcgm.so.4), and it drops dlerror(), so 'not Found' also covers a missing dependency or a library of the wrong architecture.",
            "Bottlerocket's NVIDIA variants ship the driver but no DCGM: no libdcgm.so*, no nv-hostengine (bottlerocket-core-kit#701 is open).",
            "On arm64 (e.g. g5g) the agent chart's dcgm-server DaemonSet (nv-hostengine on port 5555) is restricted to kubernetes.io/arch=amd64, so nothing listens there even once the library loads.",
            "The agent sets the condition after a 1-minute grace period and never sets it back to True without a restart of its pod (eks-node-monitoring-agent#266).",
        ],
        fixes: &[
            "Provision DCGM at boot and expose it to the host: run `accelready boot` as a Bottlerocket bootstrap container with [dcgm] provision = \"if-missing\" (or `accelready provision` with a pinned bundle), so that libdcgm resolves inside the agent's process; then restart the agent's pod on the node.",
            "Run a DCGM host engine (nv-hostengine, port 5555) on the node; on arm64 the chart's dcgm-server does not schedule, so run your own DaemonSet.",
            "Disable the agent's NVIDIA monitor (node monitoring agent v1.6.0+, Helm value nodeAgent.monitors.nvidia.enabled: false): the condition is then never set, and real GPU faults are no longer reported either.",
            "Last resort: turn node repair off (Karpenter Helm value settings.featureGates.nodeRepair=false). It is cluster-wide: there is no per-node or per-NodePool opt-out, and kubelet-OOM zombie nodes are then no longer replaced.",
        ],
    },
    Advice {
        key: "kubelet-not-reporting",
        when: When {
            condition: Some("Ready"),
            status: Some(ConditionStatus::Unknown),
            reason: None,
            message_contains: None,
        },
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
    Advice {
        key: "generic",
        when: When {
            condition: None,
            status: None,
            reason: None,
            message_contains: None,
        },
        cause: &[
            "Karpenter matches this condition by type and status only, never by reason or message, and its toleration is fixed: whatever the reason, the node is replaced once the toleration has elapsed.",
        ],
        fixes: &[
            "Find what set the condition: kubelet sets Ready; the EKS node monitoring agent sets AcceleratedHardwareReady, StorageReady, NetworkingReady, KernelReady and ContainerRuntimeReady (see its pod's logs on the node).",
            "If the fault is real, let node repair replace the node; if it is not, fix what reports it (the agent never clears a condition without a pod restart).",
        ],
    },
];

/// The advice for an unhealthy condition.
pub fn advise(condition: &Condition) -> &'static Advice {
    ADVICE
        .iter()
        .find(|advice| advice.when.matches(condition))
        .unwrap_or(&ADVICE[ADVICE.len() - 1])
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

    #[test]
    fn advice_is_keyed_on_reason_and_message() {
        let cases = [
            (
                condition(
                    "AcceleratedHardwareReady",
                    ConditionStatus::False,
                    "DCGMError",
                    "failed to initialize DCGM: libdcgm.so not Found",
                ),
                "dcgm-library-not-found",
            ),
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
            assert_eq!(advise(&condition).key, key, "{condition:?}");
        }
    }

    #[test]
    fn the_last_entry_matches_everything() {
        let last = ADVICE.last().unwrap();
        assert!(last
            .when
            .matches(&condition("Anything", ConditionStatus::True, "", "")));
    }
}
