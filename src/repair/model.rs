//! What Karpenter node repair does, per Karpenter version, as data.
//!
//! [`MODELS`] is the one table a maintainer updates when Karpenter changes.
//! Sources: kubernetes-sigs/karpenter `pkg/controllers/node/health/controller.go`
//! (20% rule, check order, requeue) and aws/karpenter-provider-aws
//! `pkg/cloudprovider/cloudprovider.go` (`RepairPolicies`); see FACTS.md §1.
//!
//! Tolerations are fixed and there is no per-NodePool opt-out (FACTS §1.7).
//! A NodePool `spec.repair` block (per-pool repair policies and tolerations)
//! exists only in the unmerged kubernetes-sigs/karpenter PR #2310 ("feat:
//! Introduce NodePool repair policies with toleration durations", open,
//! head b5a3512 on `refs/pull/2310/head`), in no release up to v1.14.1; the
//! model does not have it. The monitoring agent that sets the conditions is
//! modelled next to this one, in [`super::agent`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

/// The node label that names a node's NodePool.
pub const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
/// The node label that marks a node as managed by the AWS provider; the
/// health controller only watches nodes that carry it.
pub const NODECLASS_LABEL: &str = "karpenter.k8s.aws/ec2nodeclass";
/// The node labels that describe a node in the forecast.
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
pub const ARCH_LABEL: &str = "kubernetes.io/arch";
/// The node labels that say a node has an NVIDIA GPU (Karpenter's, and the
/// GPU operator's / device plugin's).
pub const GPU_MANUFACTURER_LABEL: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
pub const GPU_PRESENT_LABEL: &str = "nvidia.com/gpu.present";
/// Repair is blocked when more than this share of a group is unhealthy
/// (the threshold is rounded up).
pub const ALLOWED_UNHEALTHY_PERCENT: usize = 20;

/// A node condition's status, as Kubernetes spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One cloud-provider repair policy: a node whose condition `condition` has
/// had status `status` for `toleration` is replaced. Matching is by type and
/// status only, never by reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairPolicy {
    pub condition: &'static str,
    pub status: ConditionStatus,
    pub toleration: Duration,
}

const fn minutes(m: u64) -> Duration {
    Duration::from_secs(m * 60)
}

const fn policy(
    condition: &'static str,
    status: ConditionStatus,
    toleration: Duration,
) -> RepairPolicy {
    RepairPolicy {
        condition,
        status,
        toleration,
    }
}

/// AWS provider v1.1.x: Ready=False only.
const READY_ONLY: &[RepairPolicy] = &[policy("Ready", ConditionStatus::False, minutes(30))];

/// AWS provider v1.2.0+: Ready (False, Unknown) and the node monitoring
/// agent's five conditions.
const READY_AND_NMA: &[RepairPolicy] = &[
    policy("Ready", ConditionStatus::False, minutes(30)),
    policy("Ready", ConditionStatus::Unknown, minutes(30)),
    policy(
        "AcceleratedHardwareReady",
        ConditionStatus::False,
        minutes(10),
    ),
    policy("StorageReady", ConditionStatus::False, minutes(30)),
    policy("NetworkingReady", ConditionStatus::False, minutes(30)),
    policy("KernelReady", ConditionStatus::False, minutes(30)),
    policy("ContainerRuntimeReady", ConditionStatus::False, minutes(30)),
];

/// Which check the health controller runs first when it reconciles a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckOrder {
    /// The pool's 20% rule, then the node's own conditions (up to v1.5):
    /// every node of a pool over the limit gets `NodeRepairBlocked`, even
    /// before its toleration has elapsed.
    PoolFirst,
    /// The node's own conditions, then the pool once the toleration has
    /// elapsed (v1.6.0+, kubernetes-sigs/karpenter#2264).
    NodeFirst,
}

/// What one range of Karpenter versions does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Model {
    /// The first version this row applies to; it holds until the next row.
    pub since: Version,
    pub policies: &'static [RepairPolicy],
    pub order: CheckOrder,
    /// How often a blocked repair is retried; `None`: only when the node is
    /// reconciled again (any update to the Node object).
    pub requeue_when_blocked: Option<Duration>,
}

/// Karpenter (core + AWS provider, released together) node repair by
/// version, oldest first. Update this table, and only this table, when
/// Karpenter changes what node repair does.
pub static MODELS: &[Model] = &[
    Model {
        since: Version::new(1, 1, 0),
        policies: READY_ONLY,
        order: CheckOrder::PoolFirst,
        requeue_when_blocked: None,
    },
    Model {
        since: Version::new(1, 2, 0),
        policies: READY_AND_NMA,
        order: CheckOrder::PoolFirst,
        requeue_when_blocked: None,
    },
    Model {
        since: Version::new(1, 6, 0),
        policies: READY_AND_NMA,
        order: CheckOrder::NodeFirst,
        requeue_when_blocked: None,
    },
    Model {
        since: Version::new(1, 7, 0),
        policies: READY_AND_NMA,
        order: CheckOrder::NodeFirst,
        requeue_when_blocked: Some(minutes(5)),
    },
];

/// The model for a Karpenter version: the last row whose `since` is not
/// newer than `version`. Versions after the newest row use the newest row.
pub fn model_for(version: Version) -> Result<&'static Model, ModelError> {
    if version.major != 1 {
        return Err(ModelError::Unknown {
            version,
            modelled: modelled(),
        });
    }
    MODELS
        .iter()
        .rev()
        .find(|model| model.since <= version)
        .ok_or_else(|| ModelError::TooOld {
            version,
            modelled: modelled(),
        })
}

/// Whether any modelled version has a repair policy for the condition type
/// `kind`: the conditions a forecast can act on.
pub fn watched(kind: &str) -> bool {
    MODELS
        .iter()
        .any(|model| model.policies.iter().any(|policy| policy.condition == kind))
}

/// The newest modelled version (the default for `--karpenter`).
pub fn newest() -> Version {
    MODELS
        .last()
        .map_or(Version::new(1, 7, 0), |model| model.since)
}

fn modelled() -> String {
    let rows: Vec<String> = MODELS
        .iter()
        .map(|model| format!("{}", model.since))
        .collect();
    format!("{} and later 1.x", rows.join(", "))
}

/// The largest number of unhealthy nodes a group of `group_size` nodes may
/// have without blocking repair: 20% of the group, rounded up (Kubernetes'
/// `GetScaledValueFromIntOrPercent(.., roundUp=true)`).
pub fn max_unhealthy(group_size: usize) -> usize {
    (group_size * ALLOWED_UNHEALTHY_PERCENT).div_ceil(100)
}

/// A Karpenter release, `v1.4.0` or `1.4.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Version {
            major,
            minor,
            patch,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl Serialize for Version {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl Version {
    /// `v1.4.0` or `1.4.0`: exactly three dot-separated decimal numbers.
    pub fn parse_plain(text: &str) -> Option<Version> {
        let digits = text.strip_prefix('v').unwrap_or(text);
        let parts: Vec<&str> = digits.split('.').collect();
        let [major, minor, patch] = parts[..] else {
            return None;
        };
        let number = |part: &str| {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            part.parse::<u32>().ok()
        };
        Some(Version::new(number(major)?, number(minor)?, number(patch)?))
    }
}

impl FromStr for Version {
    type Err = ModelError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Version::parse_plain(text).ok_or_else(|| ModelError::Invalid {
            text: text.to_owned(),
            modelled: modelled(),
        })
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModelError {
    #[error("invalid Karpenter version '{text}': expected MAJOR.MINOR.PATCH such as v1.4.0; modelled: {modelled}")]
    Invalid { text: String, modelled: String },
    #[error("Karpenter {version} has no node repair (it arrived in v1.1.0); modelled: {modelled}")]
    TooOld { version: Version, modelled: String },
    #[error("Karpenter {version} is not modelled; modelled: {modelled}")]
    Unknown { version: Version, modelled: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twenty_percent_rounded_up_for_pools_of_1_to_200() {
        for size in 1..=200usize {
            let limit = max_unhealthy(size);
            // The smallest whole number that is at least 20% of the pool.
            assert!(limit * 100 >= size * 20, "size {size}: {limit}");
            assert!((limit - 1) * 100 < size * 20, "size {size}: {limit}");
        }
        for size in 1..=5 {
            assert_eq!(max_unhealthy(size), 1, "pools of 1-5 tolerate one");
        }
        assert_eq!(max_unhealthy(0), 0);
        assert_eq!(max_unhealthy(6), 2);
        assert_eq!(max_unhealthy(10), 2);
        assert_eq!(max_unhealthy(11), 3);
        assert_eq!(max_unhealthy(200), 40);
    }

    #[test]
    fn versions_parse_with_or_without_v() {
        assert_eq!("v1.4.0".parse::<Version>(), Ok(Version::new(1, 4, 0)));
        assert_eq!("1.4.0".parse::<Version>(), Ok(Version::new(1, 4, 0)));
        for bad in [
            "",
            "1.4",
            "v1.4.x",
            "1.4.0.1",
            "vv1.4.0",
            "1.-4.0",
            "1.4.0-rc1",
        ] {
            let error = bad.parse::<Version>().unwrap_err();
            assert!(
                error.to_string().contains("modelled: v1.1.0"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn each_version_gets_its_row() {
        let row = |text: &str| model_for(text.parse().unwrap()).unwrap();
        assert_eq!(row("v1.1.3").policies.len(), 1);
        let v14 = row("v1.4.0");
        assert_eq!(v14.order, CheckOrder::PoolFirst);
        assert_eq!(v14.requeue_when_blocked, None);
        assert_eq!(v14.policies.len(), 7);
        assert_eq!(row("1.6.0").order, CheckOrder::NodeFirst);
        assert_eq!(row("1.6.9").requeue_when_blocked, None);
        assert_eq!(row("1.7.0").requeue_when_blocked, Some(minutes(5)));
        assert_eq!(row("1.99.0").since, newest());
    }

    #[test]
    fn too_old_and_unknown_versions_are_refused_with_the_modelled_list() {
        let old = model_for(Version::new(1, 0, 9)).unwrap_err();
        assert!(matches!(old, ModelError::TooOld { .. }), "{old}");
        assert!(old.to_string().contains("v1.1.0, v1.2.0, v1.6.0, v1.7.0"));
        let unknown = model_for(Version::new(2, 0, 0)).unwrap_err();
        assert!(matches!(unknown, ModelError::Unknown { .. }), "{unknown}");
    }

    #[test]
    fn accelerated_hardware_tolerates_ten_minutes_and_the_rest_thirty() {
        let model = model_for(newest()).unwrap();
        for policy in model.policies {
            let expected = if policy.condition == "AcceleratedHardwareReady" {
                10
            } else {
                30
            };
            assert_eq!(policy.toleration, minutes(expected), "{policy:?}");
        }
    }
}
