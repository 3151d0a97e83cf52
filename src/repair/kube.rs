//! The kubectl JSON that `diagnose` reads: nodes (`kubectl get node NAME -o
//! json`, or `kubectl get nodes -o json`, a `List` or `NodeList`), events
//! (`kubectl get events -o json`) and DaemonSets (`kubectl get ds -n
//! kube-system eks-node-monitoring-agent -o json`, and the agent chart's
//! `dcgm-server`). Only the fields the forecast needs are typed; unknown
//! fields are ignored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::model::ConditionStatus;

/// What was given: one Node object, or a list taken as the whole cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeInput {
    Single(Node),
    List(Vec<Node>),
}

impl NodeInput {
    pub fn nodes(&self) -> &[Node] {
        match self {
            NodeInput::Single(node) => std::slice::from_ref(node),
            NodeInput::List(nodes) => nodes,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    pub conditions: Vec<Condition>,
}

/// A node taint (`key=value:Effect`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Taint {
    pub key: String,
    #[serde(default)]
    pub value: Option<String>,
    pub effect: String,
}

impl std::fmt::Display for Taint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.value.as_deref().filter(|v| !v.is_empty()) {
            Some(value) => write!(f, "{}={value}:{}", self.key, self.effect),
            None => write!(f, "{}:{}", self.key, self.effect),
        }
    }
}

/// A DaemonSet, as far as scheduling and its containers go.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DaemonSet {
    pub name: String,
    pub namespace: Option<String>,
    pub containers: Vec<Container>,
    /// `spec.template.spec.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// `...affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
    /// .nodeSelectorTerms`: a node must match one term; `None`: no such rule.
    pub required_terms: Option<Vec<NodeSelectorTerm>>,
    pub tolerations: Vec<Toleration>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Container {
    pub name: String,
    pub image: Option<String>,
    /// `env` entries with a literal `value` (not `valueFrom`).
    pub env: BTreeMap<String, String>,
}

/// One term: every expression must match.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorTerm {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<Requirement>,
    /// Only `metadata.name` exists as a field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_fields: Vec<Requirement>,
}

/// `key operator values`: `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Requirement {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct Toleration {
    #[serde(default)]
    pub key: Option<String>,
    /// `Equal` (the default) or `Exists`.
    #[serde(default)]
    pub operator: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
    /// Empty: every effect.
    #[serde(default)]
    pub effect: Option<String>,
}

impl Node {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    pub fn condition(&self, kind: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// The condition's `type` (e.g. `AcceleratedHardwareReady`).
    pub kind: String,
    pub status: ConditionStatus,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// `lastTransitionTime`: since when the condition has had this status.
    pub since: OffsetDateTime,
}

/// One event about some object (`involvedObject`).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub object_kind: Option<String>,
    pub object_name: String,
    /// `lastTimestamp`, else `eventTime`, else `firstTimestamp`.
    pub time: Option<OffsetDateTime>,
    /// `Normal` or `Warning`.
    pub kind: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// `source.component`, else `reportingComponent`.
    pub source: Option<String>,
    pub count: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("{what} is not valid JSON")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{what} has no 'kind': expected {expected}")]
    NoKind {
        what: String,
        expected: &'static str,
    },
    #[error("{what} has kind '{kind}', expected {expected}")]
    WrongKind {
        what: String,
        kind: String,
        expected: &'static str,
    },
    #[error("{what} has no 'items' list")]
    NoItems { what: String },
    #[error("{what} is not a valid {expected}")]
    Shape {
        what: String,
        expected: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{what}: condition '{condition}' has no lastTransitionTime")]
    NoTransitionTime { what: String, condition: String },
    #[error(
        "{what}: condition '{condition}' has status '{status}', expected True, False or Unknown"
    )]
    Status {
        what: String,
        condition: String,
        status: String,
    },
    #[error("{what}: '{field}' is not an RFC 3339 time: '{text}'")]
    Time {
        what: String,
        field: String,
        text: String,
        #[source]
        source: time::error::Parse,
    },
}

const NODES_EXPECTED: &str = "Node, List or NodeList (kubectl get node(s) -o json)";
const DAEMONSET_EXPECTED: &str = "DaemonSet (kubectl get ds -n kube-system NAME -o json)";
const EVENTS_EXPECTED: &str = "List or EventList (kubectl get events -o json)";

/// Parses `kubectl get node NAME -o json` or `kubectl get nodes -o json`.
/// `source` names the input in errors (a path, or `stdin`).
pub fn parse_nodes(text: &str, source: &str) -> Result<NodeInput, KubeError> {
    let value: Value = serde_json::from_str(text).map_err(|e| KubeError::Json {
        what: source.to_owned(),
        source: e,
    })?;
    let what = source.to_owned();
    match kind_of(&value) {
        None => Err(KubeError::NoKind {
            what,
            expected: NODES_EXPECTED,
        }),
        Some("Node") => Ok(NodeInput::Single(node_from(value, &what)?)),
        Some(list @ ("List" | "NodeList")) => {
            // A NodeList from the API omits each item's kind; a List from
            // kubectl carries it.
            let item_kind_required = list == "List";
            let items = items_of(value, &what)?;
            let nodes = items
                .into_iter()
                .enumerate()
                .map(|(index, item)| {
                    let what = format!("{source}: item {index}");
                    match kind_of(&item) {
                        Some("Node") => {}
                        None if !item_kind_required => {}
                        None => {
                            return Err(KubeError::NoKind {
                                what,
                                expected: "Node",
                            })
                        }
                        Some(kind) => {
                            return Err(KubeError::WrongKind {
                                what,
                                kind: kind.to_owned(),
                                expected: "Node",
                            })
                        }
                    }
                    node_from(item, &what)
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(NodeInput::List(nodes))
        }
        Some(kind) => Err(KubeError::WrongKind {
            what,
            kind: kind.to_owned(),
            expected: NODES_EXPECTED,
        }),
    }
}

/// Parses `kubectl get events -o json` (a `List` or `EventList`).
pub fn parse_events(text: &str, source: &str) -> Result<Vec<Event>, KubeError> {
    let value = json_of_kind(text, source, &["List", "EventList"], EVENTS_EXPECTED)?;
    items_of(value, source)?
        .into_iter()
        .enumerate()
        .map(|(index, item)| event_from(item, &format!("{source}: item {index}")))
        .collect()
}

/// `text` as JSON whose `kind` is one of `kinds`, or an error naming
/// `source` and what was `expected`.
fn json_of_kind(
    text: &str,
    source: &str,
    kinds: &[&str],
    expected: &'static str,
) -> Result<Value, KubeError> {
    let value: Value = serde_json::from_str(text).map_err(|e| KubeError::Json {
        what: source.to_owned(),
        source: e,
    })?;
    match kind_of(&value) {
        Some(kind) if kinds.contains(&kind) => Ok(value),
        Some(kind) => Err(KubeError::WrongKind {
            what: source.to_owned(),
            kind: kind.to_owned(),
            expected,
        }),
        None => Err(KubeError::NoKind {
            what: source.to_owned(),
            expected,
        }),
    }
}

/// Parses `kubectl get ds -n NAMESPACE NAME -o json`.
pub fn parse_daemonset(text: &str, source: &str) -> Result<DaemonSet, KubeError> {
    let value = json_of_kind(text, source, &["DaemonSet"], DAEMONSET_EXPECTED)?;
    let raw: RawDaemonSet = shaped(value, source, "DaemonSet")?;
    let pod = raw.spec.template.spec;
    let required_terms = pod
        .affinity
        .and_then(|a| a.node_affinity)
        .and_then(|n| n.required_during_scheduling_ignored_during_execution)
        .map(|selector| selector.node_selector_terms);
    Ok(DaemonSet {
        name: raw.metadata.name,
        namespace: raw.metadata.namespace,
        containers: pod
            .containers
            .into_iter()
            .map(|c| Container {
                name: c.name,
                image: c.image,
                env: c
                    .env
                    .into_iter()
                    .filter_map(|e| e.value.map(|value| (e.name, value)))
                    .collect(),
            })
            .collect(),
        node_selector: pod.node_selector,
        required_terms,
        tolerations: pod.tolerations,
    })
}

fn kind_of(value: &Value) -> Option<&str> {
    value.get("kind").and_then(Value::as_str)
}

fn items_of(value: Value, what: &str) -> Result<Vec<Value>, KubeError> {
    match value {
        Value::Object(mut object) => match object.remove("items") {
            Some(Value::Array(items)) => Ok(items),
            Some(Value::Null) => Ok(Vec::new()),
            _ => Err(KubeError::NoItems {
                what: what.to_owned(),
            }),
        },
        _ => Err(KubeError::NoItems {
            what: what.to_owned(),
        }),
    }
}

#[derive(Deserialize)]
struct RawNode {
    metadata: RawMetadata,
    #[serde(default)]
    spec: RawNodeSpec,
    #[serde(default)]
    status: RawNodeStatus,
}

#[derive(Deserialize)]
struct RawMetadata {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Default, Deserialize)]
struct RawNodeSpec {
    #[serde(default)]
    taints: Vec<Taint>,
}

#[derive(Deserialize)]
struct RawDaemonSet {
    metadata: RawMetadata,
    spec: RawDaemonSetSpec,
}

#[derive(Deserialize)]
struct RawDaemonSetSpec {
    template: RawPodTemplate,
}

#[derive(Deserialize)]
struct RawPodTemplate {
    spec: RawPodSpec,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPodSpec {
    #[serde(default)]
    containers: Vec<RawContainer>,
    #[serde(default)]
    node_selector: BTreeMap<String, String>,
    #[serde(default)]
    affinity: Option<RawAffinity>,
    #[serde(default)]
    tolerations: Vec<Toleration>,
}

#[derive(Deserialize)]
struct RawContainer {
    name: String,
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    env: Vec<RawEnv>,
}

#[derive(Deserialize)]
struct RawEnv {
    name: String,
    #[serde(default)]
    value: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawAffinity {
    #[serde(default)]
    node_affinity: Option<RawNodeAffinity>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawNodeAffinity {
    #[serde(default)]
    required_during_scheduling_ignored_during_execution: Option<RawNodeSelector>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawNodeSelector {
    #[serde(default)]
    node_selector_terms: Vec<NodeSelectorTerm>,
}

#[derive(Default, Deserialize)]
struct RawNodeStatus {
    #[serde(default)]
    conditions: Vec<RawCondition>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCondition {
    #[serde(rename = "type")]
    kind: String,
    status: String,
    reason: Option<String>,
    message: Option<String>,
    last_transition_time: Option<String>,
}

/// `value` as the raw kubectl type `expected`, or an error naming `what`.
fn shaped<T: serde::de::DeserializeOwned>(
    value: Value,
    what: &str,
    expected: &'static str,
) -> Result<T, KubeError> {
    serde_json::from_value(value).map_err(|e| KubeError::Shape {
        what: what.to_owned(),
        expected,
        source: e,
    })
}

fn node_from(value: Value, what: &str) -> Result<Node, KubeError> {
    let raw: RawNode = shaped(value, what, "Node")?;
    let what = format!("node '{}'", raw.metadata.name);
    let conditions = raw
        .status
        .conditions
        .into_iter()
        .map(|c| condition_from(c, &what))
        .collect::<Result<_, _>>()?;
    Ok(Node {
        name: raw.metadata.name,
        labels: raw.metadata.labels,
        taints: raw.spec.taints,
        conditions,
    })
}

fn condition_from(raw: RawCondition, what: &str) -> Result<Condition, KubeError> {
    let status = match raw.status.as_str() {
        "True" => ConditionStatus::True,
        "False" => ConditionStatus::False,
        "Unknown" => ConditionStatus::Unknown,
        _ => {
            return Err(KubeError::Status {
                what: what.to_owned(),
                condition: raw.kind,
                status: raw.status,
            })
        }
    };
    let Some(text) = raw.last_transition_time else {
        return Err(KubeError::NoTransitionTime {
            what: what.to_owned(),
            condition: raw.kind,
        });
    };
    let since = parse_time(&text, what, &format!("{}.lastTransitionTime", raw.kind))?;
    Ok(Condition {
        kind: raw.kind,
        status,
        reason: raw.reason.filter(|r| !r.is_empty()),
        message: raw.message.filter(|m| !m.is_empty()),
        since,
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEvent {
    involved_object: RawObjectReference,
    #[serde(rename = "type")]
    kind: Option<String>,
    reason: Option<String>,
    message: Option<String>,
    #[serde(default)]
    source: RawEventSource,
    reporting_component: Option<String>,
    count: Option<u64>,
    last_timestamp: Option<String>,
    event_time: Option<String>,
    first_timestamp: Option<String>,
}

#[derive(Deserialize)]
struct RawObjectReference {
    kind: Option<String>,
    #[serde(default)]
    name: String,
}

#[derive(Default, Deserialize)]
struct RawEventSource {
    component: Option<String>,
}

fn event_from(value: Value, what: &str) -> Result<Event, KubeError> {
    let raw: RawEvent = shaped(value, what, "Event")?;
    // kubectl prints unset timestamps as null; some API servers send "".
    let stamp = [
        ("lastTimestamp", raw.last_timestamp),
        ("eventTime", raw.event_time),
        ("firstTimestamp", raw.first_timestamp),
    ]
    .into_iter()
    .find_map(|(field, text)| text.filter(|t| !t.is_empty()).map(|t| (field, t)));
    let time = match stamp {
        Some((field, text)) => Some(parse_time(&text, what, field)?),
        None => None,
    };
    let non_empty = |text: Option<String>| text.filter(|t| !t.is_empty());
    Ok(Event {
        object_kind: raw.involved_object.kind,
        object_name: raw.involved_object.name,
        time,
        kind: non_empty(raw.kind),
        reason: non_empty(raw.reason),
        message: non_empty(raw.message),
        source: non_empty(raw.source.component).or(non_empty(raw.reporting_component)),
        count: raw.count,
    })
}

/// Parses an RFC 3339 time (`--now`, `lastTransitionTime`, event stamps).
pub fn parse_rfc3339(text: &str) -> Result<OffsetDateTime, time::error::Parse> {
    OffsetDateTime::parse(text, &Rfc3339)
}

fn parse_time(text: &str, what: &str, field: &str) -> Result<OffsetDateTime, KubeError> {
    parse_rfc3339(text).map_err(|e| KubeError::Time {
        what: what.to_owned(),
        field: field.to_owned(),
        text: text.to_owned(),
        source: e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: &str = r#"{
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "uid": "u", "labels": {"karpenter.sh/nodepool": "gpu"}},
        "spec": {"providerID": "aws:///x"},
        "status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok",
             "lastHeartbeatTime": "2025-06-10T03:00:00Z", "lastTransitionTime": "2025-06-10T02:58:00Z"}
        ], "nodeInfo": {"architecture": "arm64"}}
    }"#;

    #[test]
    fn a_single_node_is_typed_and_unknown_fields_are_ignored() {
        let NodeInput::Single(node) = parse_nodes(NODE, "n.json").unwrap() else {
            panic!("expected a single node");
        };
        assert_eq!(node.name, "n1");
        assert_eq!(node.label("karpenter.sh/nodepool"), Some("gpu"));
        let ready = node.condition("Ready").unwrap();
        assert_eq!(ready.status, ConditionStatus::True);
        assert_eq!(ready.since, parse_rfc3339("2025-06-10T02:58:00Z").unwrap());
    }

    #[test]
    fn lists_accept_nodes_and_name_the_item_that_is_not_one() {
        let list = format!(r#"{{"kind": "List", "items": [{NODE}, {NODE}]}}"#);
        assert_eq!(parse_nodes(&list, "x").unwrap().nodes().len(), 2);
        let bare = r#"{"kind": "NodeList", "items": [{"metadata": {"name": "a"}}]}"#;
        assert_eq!(parse_nodes(bare, "x").unwrap().nodes()[0].name, "a");
        let pod = format!(
            r#"{{"kind": "List", "items": [{NODE}, {NODE}, {NODE}, {{"kind": "Pod", "metadata": {{"name": "p"}}}}]}}"#
        );
        let error = parse_nodes(&pod, "in.json").unwrap_err().to_string();
        assert_eq!(error, "in.json: item 3 has kind 'Pod', expected Node");
    }

    #[test]
    fn bad_input_is_named() {
        let cases = [
            ("{", "stdin is not valid JSON"),
            (
                r#"{"kind": "Pod"}"#,
                "stdin has kind 'Pod', expected Node, List or NodeList (kubectl",
            ),
            (r#"{"items": []}"#, "stdin has no 'kind'"),
            (
                r#"{"kind": "Node", "metadata": {}}"#,
                "stdin is not a valid Node",
            ),
            (
                r#"{"kind": "Node", "metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}}"#,
                "node 'n': condition 'Ready' has no lastTransitionTime",
            ),
            (
                r#"{"kind": "Node", "metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "Maybe", "lastTransitionTime": "2025-06-10T02:58:00Z"}]}}"#,
                "node 'n': condition 'Ready' has status 'Maybe'",
            ),
            (
                r#"{"kind": "Node", "metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "yesterday"}]}}"#,
                "node 'n': 'Ready.lastTransitionTime' is not an RFC 3339 time: 'yesterday'",
            ),
        ];
        for (input, expected) in cases {
            let error = parse_nodes(input, "stdin").unwrap_err().to_string();
            assert!(error.starts_with(expected), "{input}: {error}");
        }
    }

    #[test]
    fn taints_are_read_from_the_spec() {
        let node = r#"{"kind": "Node", "metadata": {"name": "n"}, "spec": {"taints": [
            {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
            {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}}"#;
        let NodeInput::Single(node) = parse_nodes(node, "n").unwrap() else {
            panic!("one node");
        };
        let taints: Vec<String> = node.taints.iter().map(Taint::to_string).collect();
        assert_eq!(
            taints,
            [
                "nvidia.com/gpu=true:NoSchedule",
                "karpenter.sh/disrupted:NoSchedule"
            ]
        );
    }

    #[test]
    fn daemonsets_keep_containers_env_and_scheduling_rules() {
        let ds = r#"{"apiVersion": "apps/v1", "kind": "DaemonSet",
          "metadata": {"name": "dcgm-server", "namespace": "kube-system"},
          "spec": {"template": {"spec": {
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
              "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "i:v1", "env": [
              {"name": "DCGM_ADDRESS", "value": "localhost:5556"},
              {"name": "MY_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}]}}}}"#;
        let ds = parse_daemonset(ds, "ds.json").unwrap();
        assert_eq!(ds.name, "dcgm-server");
        assert_eq!(ds.namespace.as_deref(), Some("kube-system"));
        assert_eq!(ds.containers[0].image.as_deref(), Some("i:v1"));
        assert_eq!(ds.containers[0].env.len(), 1);
        assert_eq!(ds.containers[0].env["DCGM_ADDRESS"], "localhost:5556");
        let terms = ds.required_terms.unwrap();
        assert_eq!(terms[0].match_expressions[0].values, ["amd64"]);
        assert_eq!(ds.tolerations[0].operator.as_deref(), Some("Exists"));
        let cases = [
            ("{", "ds.json is not valid JSON"),
            (
                r#"{"kind": "Deployment"}"#,
                "ds.json has kind 'Deployment', expected DaemonSet",
            ),
            (
                r#"{"items": []}"#,
                "ds.json has no 'kind': expected DaemonSet",
            ),
            (
                r#"{"kind": "DaemonSet", "metadata": {"name": "x"}}"#,
                "ds.json is not a valid DaemonSet",
            ),
            (
                r#"{"kind": "DaemonSet", "metadata": {"name": "x"}, "spec": {"template": {"spec": {"tolerations": "all"}}}}"#,
                "ds.json is not a valid DaemonSet",
            ),
        ];
        for (input, expected) in cases {
            let error = parse_daemonset(input, "ds.json").unwrap_err().to_string();
            assert!(error.starts_with(expected), "{input}: {error}");
        }
    }

    #[test]
    fn events_take_the_latest_stamp_and_the_component() {
        let events = r#"{"kind": "List", "items": [
            {"kind": "Event", "involvedObject": {"kind": "Node", "name": "n1"},
             "type": "Warning", "reason": "NodeRepairBlocked", "message": "more than 20% nodes are unhealthy in the nodepool",
             "source": {"component": "karpenter"}, "count": 3,
             "firstTimestamp": "2025-06-10T03:00:00Z", "lastTimestamp": "2025-06-10T03:04:00Z"},
            {"kind": "Event", "involvedObject": {"kind": "Node", "name": "n2"}, "reason": "X",
             "source": {}, "reportingComponent": "eks-node-monitoring-agent",
             "eventTime": "2025-06-10T03:01:00.123456Z", "lastTimestamp": null}
        ]}"#;
        let events = parse_events(events, "ev.json").unwrap();
        assert_eq!(
            events[0].time,
            Some(parse_rfc3339("2025-06-10T03:04:00Z").unwrap())
        );
        assert_eq!(events[0].source.as_deref(), Some("karpenter"));
        assert_eq!(
            events[1].source.as_deref(),
            Some("eks-node-monitoring-agent")
        );
        assert!(events[1].time.is_some());
        let error = parse_events(NODE, "ev.json").unwrap_err().to_string();
        assert!(error.starts_with("ev.json has kind 'Node'"), "{error}");
    }
}
