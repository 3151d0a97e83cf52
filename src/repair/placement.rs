//! Whether a DaemonSet's pod lands on a node, by the rules the scheduler
//! applies to DaemonSet pods: `nodeSelector`, required node affinity, and
//! `NoSchedule` / `NoExecute` taints against the pod's tolerations plus the
//! ones the DaemonSet controller adds itself. Pure; used to say whether the
//! agent chart's `dcgm-server` (`nv-hostengine` on hostPort 5555) runs on a
//! node (FACTS §7.4: `dcgmAgent.affinity` keeps it on amd64, and its default
//! `tolerations: []` keeps it off tainted nodes).

use serde::Serialize;

use super::kube::{DaemonSet, Node, Requirement, Taint, Toleration};

/// Tolerations the DaemonSet controller adds to every DaemonSet pod
/// (kubernetes `pkg/controller/daemon/util/daemonset_util.go`,
/// `AddOrUpdateDaemonPodTolerations`): (key, effect).
const DAEMON_TOLERATIONS: &[(&str, &str)] = &[
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ("node.kubernetes.io/network-unavailable", "NoSchedule"),
];

/// Where a DaemonSet's pod goes, for one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "placement", content = "reasons", rename_all = "kebab-case")]
pub enum Placement {
    Schedules,
    /// Why not, one line per rule that keeps it off.
    Excluded(Vec<String>),
}

impl Placement {
    pub fn schedules(&self) -> bool {
        *self == Placement::Schedules
    }
}

/// Whether `daemonset`'s pod is placed on `node`.
pub fn placement(daemonset: &DaemonSet, node: &Node) -> Placement {
    let mut reasons = Vec::new();
    for (key, value) in &daemonset.node_selector {
        match node.label(key) {
            Some(found) if found == value => {}
            Some(found) => reasons.push(format!("nodeSelector {key}={value} (node: {found})")),
            None => reasons.push(format!(
                "nodeSelector {key}={value} (node has no {key} label)"
            )),
        }
    }
    if let Some(terms) = &daemonset.required_terms {
        let failures: Vec<String> = terms
            .iter()
            .map(|term| {
                if term.match_expressions.is_empty() && term.match_fields.is_empty() {
                    // Kubernetes: an empty term matches no node.
                    return Some("an empty term matches no node".to_owned());
                }
                term.match_expressions
                    .iter()
                    .map(|r| (r, node.label(&r.key)))
                    .chain(term.match_fields.iter().map(|r| (r, field(node, &r.key))))
                    .find(|(requirement, value)| !matches(requirement, *value))
                    .map(|(requirement, value)| describe(requirement, value))
            })
            .collect::<Option<Vec<String>>>()
            .unwrap_or_default();
        // A node matches when one term matches (and an empty list matches none).
        let none_matched = terms.is_empty() || failures.len() == terms.len();
        if none_matched {
            if failures.is_empty() {
                reasons.push("required node affinity has no terms: it matches no node".to_owned());
            }
            for (index, failure) in failures.iter().enumerate() {
                reasons.push(format!(
                    "required node affinity, term {}: {failure}",
                    index + 1
                ));
            }
        }
    }
    for taint in &node.taints {
        if !matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute") {
            continue;
        }
        let by_controller = DAEMON_TOLERATIONS
            .iter()
            .any(|(key, effect)| taint.key == *key && taint.effect == *effect);
        if !by_controller && !daemonset.tolerations.iter().any(|t| tolerates(t, taint)) {
            let tolerations = if daemonset.tolerations.is_empty() {
                "it has no tolerations".to_owned()
            } else {
                "none of its tolerations matches".to_owned()
            };
            reasons.push(format!("taint {taint} is not tolerated ({tolerations})"));
        }
    }
    if reasons.is_empty() {
        Placement::Schedules
    } else {
        Placement::Excluded(reasons)
    }
}

/// The node's value for a `matchFields` key (only `metadata.name` exists).
fn field<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    (key == "metadata.name").then_some(node.name.as_str())
}

/// A selector requirement against the node's value for its key.
fn matches(requirement: &Requirement, value: Option<&str>) -> bool {
    let number = |text: &str| text.parse::<i64>().ok();
    let compare = |ordering: std::cmp::Ordering| match (
        value.and_then(number),
        requirement.values.first().and_then(|v| number(v)),
    ) {
        (Some(have), Some(bound)) => have.cmp(&bound) == ordering,
        _ => false,
    };
    let listed = value.is_some_and(|v| requirement.values.iter().any(|w| w == v));
    match requirement.operator.as_str() {
        "In" => listed,
        "NotIn" => !listed,
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => compare(std::cmp::Ordering::Greater),
        "Lt" => compare(std::cmp::Ordering::Less),
        // An operator the API server would have refused matches nothing.
        _ => false,
    }
}

/// "kubernetes.io/arch In [amd64] (node: arm64)".
fn describe(requirement: &Requirement, value: Option<&str>) -> String {
    let values = if requirement.values.is_empty() {
        String::new()
    } else {
        format!(" [{}]", requirement.values.join(", "))
    };
    let node = match value {
        Some(value) => format!("node: {value}"),
        None => format!("node has no {}", requirement.key),
    };
    format!(
        "{} {}{values} ({node})",
        requirement.key, requirement.operator
    )
}

/// Kubernetes' `Toleration.ToleratesTaint`.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if toleration
        .effect
        .as_deref()
        .is_some_and(|effect| !effect.is_empty() && effect != taint.effect)
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        "Equal" | "" => {
            !key.is_empty()
                && key == taint.key
                && toleration.value.as_deref().unwrap_or_default()
                    == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::repair::kube::NodeSelectorTerm;

    fn node(arch: &str, taints: &[(&str, Option<&str>, &str)]) -> Node {
        Node {
            name: "n1".to_owned(),
            labels: BTreeMap::from([
                ("kubernetes.io/arch".to_owned(), arch.to_owned()),
                ("kubernetes.io/os".to_owned(), "linux".to_owned()),
                (
                    "node.kubernetes.io/instance-type".to_owned(),
                    "g5g.xlarge".to_owned(),
                ),
            ]),
            taints: taints
                .iter()
                .map(|(key, value, effect)| Taint {
                    key: (*key).to_owned(),
                    value: value.map(str::to_owned),
                    effect: (*effect).to_owned(),
                })
                .collect(),
            conditions: Vec::new(),
        }
    }

    fn requirement(key: &str, operator: &str, values: &[&str]) -> Requirement {
        Requirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        }
    }

    /// The chart's dcgm-server: `kubernetes.io/os: linux`, amd64 only, no
    /// tolerations.
    fn dcgm_server(terms: Vec<Vec<Requirement>>, tolerations: Vec<Toleration>) -> DaemonSet {
        DaemonSet {
            name: "dcgm-server".to_owned(),
            node_selector: BTreeMap::from([("kubernetes.io/os".to_owned(), "linux".to_owned())]),
            required_terms: Some(
                terms
                    .into_iter()
                    .map(|match_expressions| NodeSelectorTerm {
                        match_expressions,
                        match_fields: Vec::new(),
                    })
                    .collect(),
            ),
            tolerations,
            ..DaemonSet::default()
        }
    }

    #[test]
    fn the_charts_dcgm_server_stays_off_arm64_and_off_tainted_nodes() {
        let amd64_only = || {
            dcgm_server(
                vec![vec![requirement("kubernetes.io/arch", "In", &["amd64"])]],
                vec![],
            )
        };
        assert_eq!(
            placement(&amd64_only(), &node("amd64", &[])),
            Placement::Schedules
        );
        assert_eq!(
            placement(&amd64_only(), &node("arm64", &[])),
            Placement::Excluded(vec![
                "required node affinity, term 1: kubernetes.io/arch In [amd64] (node: arm64)"
                    .to_owned()
            ])
        );
        let gpu_taint = [("nvidia.com/gpu", Some("true"), "NoSchedule")];
        assert_eq!(
            placement(&amd64_only(), &node("amd64", &gpu_taint)),
            Placement::Excluded(vec![
                "taint nvidia.com/gpu=true:NoSchedule is not tolerated (it has no tolerations)"
                    .to_owned()
            ])
        );
        // The controller's own tolerations and soft taints never keep it off.
        let soft = [
            ("node.kubernetes.io/not-ready", None, "NoExecute"),
            ("example.com/prefer", None, "PreferNoSchedule"),
        ];
        assert!(placement(&amd64_only(), &node("amd64", &soft)).schedules());
        // An override that also allows arm64 and tolerates everything.
        let both = dcgm_server(
            vec![vec![requirement(
                "kubernetes.io/arch",
                "In",
                &["amd64", "arm64"],
            )]],
            vec![Toleration {
                operator: Some("Exists".to_owned()),
                ..Toleration::default()
            }],
        );
        assert!(placement(&both, &node("arm64", &gpu_taint)).schedules());
    }

    #[test]
    fn terms_are_ored_and_expressions_anded() {
        let ds = dcgm_server(
            vec![
                vec![
                    requirement("kubernetes.io/arch", "In", &["amd64"]),
                    requirement("node.kubernetes.io/instance-type", "In", &["g5.xlarge"]),
                ],
                vec![requirement("accelready.io/dcgm", "DoesNotExist", &[])],
            ],
            vec![],
        );
        // Second term matches: no accelready label.
        assert!(placement(&ds, &node("arm64", &[])).schedules());
        let mut labelled = node("arm64", &[]);
        labelled
            .labels
            .insert("accelready.io/dcgm".to_owned(), "ready".to_owned());
        assert_eq!(
            placement(&ds, &labelled),
            Placement::Excluded(vec![
                "required node affinity, term 1: kubernetes.io/arch In [amd64] (node: arm64)"
                    .to_owned(),
                "required node affinity, term 2: accelready.io/dcgm DoesNotExist (node: ready)"
                    .to_owned(),
            ])
        );
        let no_terms = DaemonSet {
            required_terms: Some(Vec::new()),
            ..DaemonSet::default()
        };
        assert!(!placement(&no_terms, &node("amd64", &[])).schedules());
    }

    #[test]
    fn operators() {
        let value = Some("4");
        for (operator, values, want) in [
            ("In", &["4", "8"][..], true),
            ("NotIn", &["4"][..], false),
            ("NotIn", &["8"][..], true),
            ("Exists", &[][..], true),
            ("DoesNotExist", &[][..], false),
            ("Gt", &["3"][..], true),
            ("Gt", &["4"][..], false),
            ("Lt", &["5"][..], true),
            ("Lt", &["x"][..], false),
            ("Near", &["4"][..], false),
        ] {
            assert_eq!(
                matches(&requirement("k", operator, values), value),
                want,
                "{operator} {values:?}"
            );
        }
        assert!(matches(&requirement("k", "NotIn", &["4"]), None));
        assert!(!matches(&requirement("k", "In", &["4"]), None));
        let by_name = DaemonSet {
            required_terms: Some(vec![NodeSelectorTerm {
                match_expressions: Vec::new(),
                match_fields: vec![requirement("metadata.name", "In", &["n1"])],
            }]),
            ..DaemonSet::default()
        };
        assert!(placement(&by_name, &node("amd64", &[])).schedules());
    }

    #[test]
    fn tolerations_match_like_kubernetes() {
        let taint = Taint {
            key: "nvidia.com/gpu".to_owned(),
            value: Some("true".to_owned()),
            effect: "NoSchedule".to_owned(),
        };
        let toleration = |key: Option<&str>,
                          operator: Option<&str>,
                          value: Option<&str>,
                          effect: Option<&str>| Toleration {
            key: key.map(str::to_owned),
            operator: operator.map(str::to_owned),
            value: value.map(str::to_owned),
            effect: effect.map(str::to_owned),
        };
        for (t, want) in [
            (toleration(None, Some("Exists"), None, None), true),
            (
                toleration(Some("nvidia.com/gpu"), Some("Exists"), None, None),
                true,
            ),
            (
                toleration(Some("nvidia.com/gpu"), None, Some("true"), None),
                true,
            ),
            (
                toleration(Some("nvidia.com/gpu"), Some("Equal"), Some("false"), None),
                false,
            ),
            (
                toleration(
                    Some("nvidia.com/gpu"),
                    Some("Exists"),
                    None,
                    Some("NoExecute"),
                ),
                false,
            ),
            (
                toleration(
                    Some("nvidia.com/gpu"),
                    Some("Exists"),
                    None,
                    Some("NoSchedule"),
                ),
                true,
            ),
            (toleration(None, Some("Equal"), Some("true"), None), false),
            (toleration(Some("other"), Some("Exists"), None, None), false),
        ] {
            assert_eq!(tolerates(&t, &taint), want, "{t:?}");
        }
    }
}
