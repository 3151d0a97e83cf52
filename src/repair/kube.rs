//! The kubectl JSON that `diagnose` reads: nodes (`kubectl get node NAME -o
//! json`, or `kubectl get nodes -o json`, a `List` or `NodeList`), events
//! (`kubectl get events -o json`) and DaemonSets (`kubectl get ds -n
//! kube-system eks-node-monitoring-agent -o json`, and the agent chart's
//! `dcgm-server`). Only the fields the forecast needs are typed; unknown
//! fields are ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Read;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::error::Category;
use serde_json::{Deserializer as JsonDeserializer, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::model::{
    self, ConditionStatus, ARCH_LABEL, GPU_MANUFACTURER_LABEL, GPU_PRESENT_LABEL,
    INSTANCE_TYPE_LABEL, NODECLASS_LABEL, NODEPOOL_LABEL,
};
use super::scan::{self, Position, ScanError, Scanner};

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

/// The node labels the forecast reads. A node carries dozens; the parser
/// keeps these (and those a DaemonSet's placement reads, see [`Labels`]).
/// To read another label, add it here.
pub const FORECAST_LABELS: [&str; 6] = [
    NODEPOOL_LABEL,
    NODECLASS_LABEL,
    INSTANCE_TYPE_LABEL,
    ARCH_LABEL,
    GPU_MANUFACTURER_LABEL,
    GPU_PRESENT_LABEL,
];

/// Which node labels the parser keeps: [`FORECAST_LABELS`], and the keys a
/// DaemonSet's `nodeSelector` and required node affinity name (`diagnose
/// --dcgm-server`). The others are skipped unread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels {
    placement: BTreeSet<String>,
}

impl Labels {
    /// Only [`FORECAST_LABELS`].
    pub fn forecast() -> Labels {
        Labels::default()
    }

    /// Also every label `daemonset`'s placement reads.
    pub fn and_placement_of(mut self, daemonset: &DaemonSet) -> Labels {
        self.placement
            .extend(daemonset.node_selector.keys().cloned());
        for term in daemonset.required_terms.iter().flatten() {
            self.placement
                .extend(term.match_expressions.iter().map(|r| r.key.clone()));
        }
        self
    }

    pub fn keeps(&self, key: &str) -> bool {
        FORECAST_LABELS.contains(&key) || self.placement.contains(key)
    }
}

/// A node, as much of it as the forecast reads: its name, the labels asked
/// for ([`Labels`]), its taints and the conditions some repair policy
/// watches ([`model::watched`]); the parser checks the other conditions and
/// drops them.
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
    /// The input could not be read (e.g. it passed its size limit: the
    /// source is then an `io::Error` carrying [`crate::input::TooLarge`]).
    #[error("cannot read {what}")]
    Read {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} is not valid JSON")]
    Json {
        what: String,
        #[source]
        source: JsonError,
    },
    #[error("{what}: the value at line {line} column {column} is larger than {limit} bytes, which no Kubernetes object is")]
    ValueTooLarge {
        what: String,
        line: usize,
        column: usize,
        limit: usize,
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
        source: JsonError,
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

/// The largest single value (a node, an event, the list's `metadata`) read
/// into memory: no Kubernetes object comes near it (etcd refuses requests
/// over 1.5 MiB), and a value that never ends stops here.
const MAX_VALUE_BYTES: usize = 16 << 20;

/// The default cap on one kubectl document (`diagnose --max-input-bytes`):
/// a 15,000-node `kubectl get nodes -o json` fits with room to spare.
///
/// kubectl prints a GPU node in 7–14 KB with a few to a dozen images (the
/// issue's list: 7.4 KB a node; the bench's: about 11 KB with four), and in
/// about 30 KB at kubelet's maximum of 50 images (`nodeStatusMaxImages`; an
/// image is ~400 bytes: a digest name, a tag name, its size, 4-space
/// indentation). Allowing 32 KiB a node, 15,000 nodes take 469 MiB, rounded
/// up to 512 MiB. Parsing streams, so memory follows what is kept per node
/// (a few KB with its forecast), not this cap.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 512 << 20;

/// Parses `kubectl get node NAME -o json` or `kubectl get nodes -o json`.
/// `source` names the input in errors (a path, or `stdin`).
pub fn parse_nodes(text: &str, source: &str) -> Result<NodeInput, KubeError> {
    read_nodes(text.as_bytes(), source)
}

/// [`read_nodes`] keeping the labels in `labels` (not only
/// [`FORECAST_LABELS`]).
pub fn read_nodes_keeping(
    reader: impl Read,
    source: &str,
    labels: Labels,
) -> Result<NodeInput, KubeError> {
    let mut document = NodeDocument {
        progress: Progress::new(source, "Node", NODES_EXPECTED),
        labels,
        kind: None,
        items: None,
        first_without_kind: None,
        metadata: None,
        spec: None,
        status: None,
    };
    read_document(reader, &mut document)?;
    document.finish()
}

/// [`parse_nodes`] from a stream, parsed as it is read: one node at a time
/// is in memory, what the forecast does not use (images, annotations, ...)
/// is dropped as soon as the node is typed, and the first invalid byte ends
/// the read. Errors reading `reader` are [`KubeError::Read`].
pub fn read_nodes(reader: impl Read, source: &str) -> Result<NodeInput, KubeError> {
    read_nodes_keeping(reader, source, Labels::forecast())
}

/// Parses `kubectl get events -o json` (a `List` or `EventList`). Only
/// events about nodes (`involvedObject.kind` Node, or none) are kept: the
/// forecast shows nothing else.
pub fn parse_events(text: &str, source: &str) -> Result<Vec<Event>, KubeError> {
    read_events(text.as_bytes(), source)
}

/// [`parse_events`] from a stream, parsed as it is read (see [`read_nodes`]).
pub fn read_events(reader: impl Read, source: &str) -> Result<Vec<Event>, KubeError> {
    let mut document = EventDocument {
        progress: Progress::new(source, "Event", EVENTS_EXPECTED),
        kind: None,
        items: None,
    };
    read_document(reader, &mut document)?;
    document.finish()
}

/// Parses `kubectl get ds -n NAMESPACE NAME -o json`.
pub fn parse_daemonset(text: &str, source: &str) -> Result<DaemonSet, KubeError> {
    read_daemonset(text.as_bytes(), source)
}

/// [`parse_daemonset`] from a stream, parsed as it is read.
pub fn read_daemonset(reader: impl Read, source: &str) -> Result<DaemonSet, KubeError> {
    let mut document = DaemonSetDocument {
        progress: Progress::new(source, "DaemonSet", DAEMONSET_EXPECTED),
        kind: None,
        metadata: None,
        spec: None,
    };
    read_document(reader, &mut document)?;
    document.finish()
}

/// Reads one document to the end of the input (only whitespace may follow):
/// the scanner cuts it into pieces, serde parses each.
fn read_document<D: Document>(reader: impl Read, document: &mut D) -> Result<(), KubeError> {
    let mut scanner = Scanner::new(reader, MAX_VALUE_BYTES);
    walk(&mut scanner, document).map_err(|stop| document.progress().failure(stop))
}

/// What stopped a parse.
enum Stop {
    /// Reading, JSON syntax, or a value too large (see [`Scanner`]).
    Scan(ScanError),
    /// JSON, but not of the shape expected (serde's message, placed).
    Shape(JsonError),
    /// Ours, about what the JSON says.
    Kube(KubeError),
}

impl From<ScanError> for Stop {
    fn from(error: ScanError) -> Stop {
        Stop::Scan(error)
    }
}

fn walk<R: Read, D: Document>(scanner: &mut Scanner<R>, document: &mut D) -> Result<(), Stop> {
    if !scanner.object_start()? {
        // JSON or not, it has no kind: serde judges the value first.
        piece(scanner, |bytes| serde_json::from_slice::<IgnoredAny>(bytes))?;
        scanner.finish()?;
        let progress = document.progress();
        return Err(Stop::Kube(KubeError::NoKind {
            what: progress.source.clone(),
            expected: progress.expected,
        }));
    }
    let mut first = true;
    while let Some(key) = scanner.next_key(first)? {
        first = false;
        match key.as_str() {
            "kind" => {
                let AnyKind(kind) = piece(scanner, |bytes| serde_json::from_slice(bytes))?;
                document.kind(kind).map_err(Stop::Kube)?;
            }
            "items" if document.wants_items() => items(scanner, document)?,
            "metadata" => piece(scanner, |bytes| document.field(Key::Metadata, bytes))?,
            "spec" => piece(scanner, |bytes| document.field(Key::Spec, bytes))?,
            "status" => piece(scanner, |bytes| document.field(Key::Status, bytes))?,
            _ => {
                piece(scanner, |bytes| serde_json::from_slice::<IgnoredAny>(bytes))?;
            }
        }
    }
    scanner.finish()?;
    Ok(())
}

/// `items`: a list, each element typed as it arrives; null for none.
fn items<R: Read, D: Document>(scanner: &mut Scanner<R>, document: &mut D) -> Result<(), Stop> {
    if !scanner.list_start()? {
        let value: Option<IgnoredAny> = piece(scanner, |bytes| serde_json::from_slice(bytes))?;
        if value.is_some() {
            let what = document.progress().source.clone();
            return Err(Stop::Kube(KubeError::NoItems { what }));
        }
        document.items(Vec::new());
        return Ok(());
    }
    let mut items = Vec::new();
    let mut index = 0;
    while let Some((bytes, at)) = scanner.next_element(index == 0)? {
        document.progress().at = At::Item(index);
        let mut de = JsonDeserializer::from_slice(bytes);
        let item = Item(&mut *document)
            .deserialize(&mut de)
            .and_then(|item| de.end().map(|()| item));
        match item {
            Ok(Some(item)) => items.push(item),
            Ok(None) => {}
            Err(error) => return Err(stop_in_piece(scanner, &error, at)),
        }
        index += 1;
    }
    document.progress().at = At::Top;
    document.items(items);
    Ok(())
}

/// The next value, parsed by `parse`.
fn piece<R: Read, T>(
    scanner: &mut Scanner<R>,
    parse: impl FnOnce(&[u8]) -> Result<T, serde_json::Error>,
) -> Result<T, Stop> {
    let (bytes, at) = scanner.value()?;
    match parse(bytes) {
        Ok(value) => Ok(value),
        Err(error) => Err(stop_in_piece(scanner, &error, at)),
    }
}

/// serde's error in the piece that starts at `at`, placed in the input.
fn stop_in_piece<R: Read>(
    scanner: &mut Scanner<R>,
    error: &serde_json::Error,
    at: Position,
) -> Stop {
    if error.classify() == Category::Data {
        let (line, column) = at.locate(error.line(), error.column());
        return Stop::Shape(JsonError {
            message: scan::message(error),
            line,
            column,
        });
    }
    Stop::Scan(scanner.piece_error(error, at))
}

/// Where and why the input is not the JSON expected: serde's message, at a
/// line and column of the whole input (line 0: no place to name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct JsonError {
    pub message: String,
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if self.line > 0 {
            write!(f, " at line {} column {}", self.line, self.column)?;
        }
        Ok(())
    }
}

impl From<serde_json::Error> for JsonError {
    /// serde's own place: right for a whole document, line 0 for a value.
    fn from(error: serde_json::Error) -> JsonError {
        JsonError {
            message: scan::message(&error),
            line: error.line(),
            column: error.column(),
        }
    }
}

/// Where the parser is, to name it in errors, and the error that stopped it
/// when it was ours rather than serde's.
struct Progress {
    source: String,
    /// The item type, for "is not a valid Node".
    item: &'static str,
    /// The document types accepted, for "has kind 'Pod', expected ...".
    expected: &'static str,
    at: At,
    stopped: Option<KubeError>,
}

#[derive(Clone, Copy)]
enum At {
    Top,
    Item(usize),
}

impl Progress {
    fn new(source: &str, item: &'static str, expected: &'static str) -> Progress {
        Progress {
            source: source.to_owned(),
            item,
            expected,
            at: At::Top,
            stopped: None,
        }
    }

    /// `stdin`, or `stdin: item 3`.
    fn what(&self) -> String {
        match self.at {
            At::Item(index) => format!("{}: item {index}", self.source),
            At::Top => self.source.clone(),
        }
    }

    /// Stops the parse with our own error; serde carries a placeholder out.
    fn stop<E: de::Error>(&mut self, error: KubeError) -> E {
        self.stopped = Some(error);
        E::custom("stopped")
    }

    /// The error for what stopped the parse.
    fn failure(&mut self, stop: Stop) -> KubeError {
        if let Some(stopped) = self.stopped.take() {
            return stopped;
        }
        match stop {
            Stop::Kube(error) => error,
            Stop::Scan(ScanError::Io(source)) => KubeError::Read {
                what: self.source.clone(),
                source,
            },
            Stop::Scan(ScanError::Syntax {
                message,
                line,
                column,
            }) => KubeError::Json {
                what: self.source.clone(),
                source: JsonError {
                    message,
                    line,
                    column,
                },
            },
            Stop::Scan(ScanError::TooLarge { at, limit }) => KubeError::ValueTooLarge {
                what: self.what(),
                line: at.line,
                column: at.before + 1,
                limit,
            },
            Stop::Shape(source) => KubeError::Shape {
                what: self.what(),
                expected: self.item,
                source,
            },
        }
    }
}

/// A kubectl document (`{"kind": ..., "items": [...], ...}`) read as it
/// streams past: kubectl prints `items` before `kind`, so each item is
/// checked and typed on its own, and what depends on the kind is decided
/// when the kind arrives, or at the end.
trait Document {
    type Item;

    fn progress(&mut self) -> &mut Progress;
    /// The top-level `kind`: `None` when it is not a string.
    fn kind(&mut self, kind: Option<String>) -> Result<(), KubeError>;
    /// Whether `items` matters for the kind seen so far.
    fn wants_items(&self) -> bool;
    fn items(&mut self, items: Vec<Self::Item>);
    /// The top-level `metadata`, `spec` or `status`.
    fn field(&mut self, key: Key, value: &[u8]) -> Result<(), serde_json::Error>;
    /// One element of `items`; `None` to skip it.
    fn item<'de, A: MapAccess<'de>>(&mut self, map: A) -> Result<Option<Self::Item>, A::Error>;
}

/// The keys of an item that the parser looks at.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Key {
    Kind,
    Items,
    Metadata,
    Spec,
    Status,
    #[serde(other)]
    Other,
}

/// One element of `items`: an object.
struct Item<'a, D>(&'a mut D);

impl<'de, D: Document> DeserializeSeed<'de> for Item<'_, D> {
    type Value = Option<D::Item>;

    fn deserialize<T: Deserializer<'de>>(self, deserializer: T) -> Result<Self::Value, T::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, D: Document> Visitor<'de> for Item<'_, D> {
    type Value = Option<D::Item>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.0.item(map)
    }
}

/// A `kind` field's value: the string, or `None` for anything else.
struct AnyKind(Option<String>);

impl<'de> Deserialize<'de> for AnyKind {
    fn deserialize<T: Deserializer<'de>>(deserializer: T) -> Result<AnyKind, T::Error> {
        struct KindVisitor;
        impl<'de> Visitor<'de> for KindVisitor {
            type Value = AnyKind;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<AnyKind, E> {
                Ok(AnyKind(Some(text.to_owned())))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<AnyKind, E> {
                Ok(AnyKind(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<AnyKind, E> {
                Ok(AnyKind(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<AnyKind, E> {
                Ok(AnyKind(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<AnyKind, E> {
                Ok(AnyKind(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<AnyKind, E> {
                Ok(AnyKind(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<AnyKind, A::Error> {
                IgnoredAny.visit_seq(seq).map(|_| AnyKind(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<AnyKind, A::Error> {
                IgnoredAny.visit_map(map).map(|_| AnyKind(None))
            }
        }
        deserializer.deserialize_any(KindVisitor)
    }
}

/// A top-level field of a document whose kind is not known yet: kept as a
/// value and typed once the kind says it is needed.
enum Pending<T> {
    Typed(T),
    Value(Value),
}

impl<T: serde::de::DeserializeOwned> Pending<T> {
    fn typed(self) -> Result<T, serde_json::Error> {
        match self {
            Pending::Typed(typed) => Ok(typed),
            Pending::Value(value) => serde_json::from_value(value),
        }
    }

    /// The field, typed; `missing` when the document has none.
    fn of(
        field: Option<Pending<T>>,
        missing: impl FnOnce() -> Result<T, serde_json::Error>,
    ) -> Result<T, serde_json::Error> {
        field.map_or_else(missing, Pending::typed)
    }
}

/// A top-level field: typed at once when the document's kind says it is
/// needed (`Some(true)`), kept as a value while the kind is unknown
/// (`None`), or only checked (`Some(false)`).
fn pending<T: serde::de::DeserializeOwned>(
    needed: Option<bool>,
    value: &[u8],
) -> Result<Option<Pending<T>>, serde_json::Error> {
    Ok(match needed {
        Some(true) => Some(Pending::Typed(serde_json::from_slice(value)?)),
        None => Some(Pending::Value(serde_json::from_slice(value)?)),
        Some(false) => {
            serde_json::from_slice::<IgnoredAny>(value)?;
            None
        }
    })
}

struct NodeDocument {
    progress: Progress,
    labels: Labels,
    kind: Option<String>,
    items: Option<Vec<Node>>,
    /// The first item without a kind: fine in a NodeList, not in a List.
    first_without_kind: Option<usize>,
    metadata: Option<Pending<RawMetadata>>,
    spec: Option<Pending<RawNodeSpec>>,
    status: Option<Pending<RawNodeStatus>>,
}

impl NodeDocument {
    fn is_node(&self) -> bool {
        self.kind.as_deref() == Some("Node")
    }

    fn finish(self) -> Result<NodeInput, KubeError> {
        let what = self.progress.source;
        let shape = |error: serde_json::Error| KubeError::Shape {
            what: what.clone(),
            expected: "Node",
            source: error.into(),
        };
        match self.kind.as_deref() {
            None => Err(KubeError::NoKind {
                what: what.clone(),
                expected: NODES_EXPECTED,
            }),
            Some("Node") => {
                // Kept as a value (it came before the kind): the labels
                // are chosen now.
                let metadata = match self.metadata {
                    Some(Pending::Value(value)) => Metadata(&self.labels).deserialize(value),
                    other => Pending::of(other, || Err(de::Error::missing_field("metadata"))),
                }
                .map_err(shape)?;
                let spec = Pending::of(self.spec, || Ok(RawNodeSpec::default())).map_err(shape)?;
                let status =
                    Pending::of(self.status, || Ok(RawNodeStatus::default())).map_err(shape)?;
                Ok(NodeInput::Single(node_from(RawNode {
                    metadata,
                    spec,
                    status,
                })?))
            }
            Some(_) => self
                .items
                .map(NodeInput::List)
                .ok_or(KubeError::NoItems { what }),
        }
    }
}

impl Document for NodeDocument {
    type Item = Node;

    fn progress(&mut self) -> &mut Progress {
        &mut self.progress
    }

    fn kind(&mut self, kind: Option<String>) -> Result<(), KubeError> {
        match kind.as_deref() {
            None | Some("Node" | "NodeList") => {}
            // A NodeList from the API omits each item's kind; a List from
            // kubectl carries it.
            Some("List") => {
                if let Some(index) = self.first_without_kind {
                    return Err(KubeError::NoKind {
                        what: format!("{}: item {index}", self.progress.source),
                        expected: "Node",
                    });
                }
            }
            Some(other) => {
                return Err(KubeError::WrongKind {
                    what: self.progress.source.clone(),
                    kind: other.to_owned(),
                    expected: NODES_EXPECTED,
                })
            }
        }
        self.kind = kind;
        Ok(())
    }

    fn wants_items(&self) -> bool {
        !self.is_node()
    }

    fn items(&mut self, items: Vec<Node>) {
        self.items = Some(items);
    }

    fn field(&mut self, key: Key, value: &[u8]) -> Result<(), serde_json::Error> {
        let needed = self.kind.as_deref().map(|kind| kind == "Node");
        match key {
            Key::Metadata if needed == Some(true) => {
                let mut de = JsonDeserializer::from_slice(value);
                let metadata = Metadata(&self.labels).deserialize(&mut de)?;
                de.end()?;
                self.metadata = Some(Pending::Typed(metadata));
            }
            Key::Metadata => self.metadata = pending(needed, value)?,
            Key::Spec => self.spec = pending(needed, value)?,
            Key::Status => self.status = pending(needed, value)?,
            _ => {
                serde_json::from_slice::<IgnoredAny>(value)?;
            }
        }
        Ok(())
    }

    fn item<'de, A: MapAccess<'de>>(&mut self, mut map: A) -> Result<Option<Node>, A::Error> {
        let mut kind = None;
        let mut metadata: Option<RawMetadata> = None;
        let mut spec: Option<RawNodeSpec> = None;
        let mut status: Option<RawNodeStatus> = None;
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Kind => {
                    let AnyKind(item_kind) = map.next_value()?;
                    match item_kind.as_deref() {
                        Some("Node") | None => {}
                        Some(other) => {
                            let error = KubeError::WrongKind {
                                what: self.progress.what(),
                                kind: other.to_owned(),
                                expected: "Node",
                            };
                            return Err(self.progress.stop(error));
                        }
                    }
                    kind = item_kind;
                }
                Key::Metadata => metadata = Some(map.next_value_seed(Metadata(&self.labels))?),
                Key::Spec => spec = Some(map.next_value()?),
                Key::Status => status = Some(map.next_value()?),
                Key::Items | Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if kind.is_none() {
            if self.kind.as_deref() == Some("List") {
                let error = KubeError::NoKind {
                    what: self.progress.what(),
                    expected: "Node",
                };
                return Err(self.progress.stop(error));
            }
            if let At::Item(index) = self.progress.at {
                self.first_without_kind.get_or_insert(index);
            }
        }
        let metadata = metadata.ok_or_else(|| de::Error::missing_field("metadata"))?;
        let raw = RawNode {
            metadata,
            spec: spec.unwrap_or_default(),
            status: status.unwrap_or_default(),
        };
        match node_from(raw) {
            Ok(node) => Ok(Some(node)),
            Err(error) => Err(self.progress.stop(error)),
        }
    }
}

struct EventDocument {
    progress: Progress,
    kind: Option<String>,
    items: Option<Vec<Event>>,
}

impl EventDocument {
    fn finish(self) -> Result<Vec<Event>, KubeError> {
        let what = self.progress.source;
        match self.kind {
            None => Err(KubeError::NoKind {
                what,
                expected: EVENTS_EXPECTED,
            }),
            Some(_) => self.items.ok_or(KubeError::NoItems { what }),
        }
    }
}

impl Document for EventDocument {
    type Item = Event;

    fn progress(&mut self) -> &mut Progress {
        &mut self.progress
    }

    fn kind(&mut self, kind: Option<String>) -> Result<(), KubeError> {
        match kind.as_deref() {
            None | Some("List" | "EventList") => {
                self.kind = kind;
                Ok(())
            }
            Some(other) => Err(KubeError::WrongKind {
                what: self.progress.source.clone(),
                kind: other.to_owned(),
                expected: EVENTS_EXPECTED,
            }),
        }
    }

    fn wants_items(&self) -> bool {
        true
    }

    fn items(&mut self, items: Vec<Event>) {
        self.items = Some(items);
    }

    fn field(&mut self, _: Key, value: &[u8]) -> Result<(), serde_json::Error> {
        serde_json::from_slice::<IgnoredAny>(value).map(|_| ())
    }

    fn item<'de, A: MapAccess<'de>>(&mut self, map: A) -> Result<Option<Event>, A::Error> {
        let raw = RawEvent::deserialize(de::value::MapAccessDeserializer::new(map))?;
        match event_from(raw, &self.progress.what()) {
            Ok(event) if event.object_kind.as_deref().is_none_or(|k| k == "Node") => {
                Ok(Some(event))
            }
            Ok(_) => Ok(None),
            Err(error) => Err(self.progress.stop(error)),
        }
    }
}

struct DaemonSetDocument {
    progress: Progress,
    kind: Option<String>,
    metadata: Option<Pending<RawMetadata>>,
    spec: Option<Pending<RawDaemonSetSpec>>,
}

impl DaemonSetDocument {
    fn finish(self) -> Result<DaemonSet, KubeError> {
        let what = self.progress.source;
        if self.kind.is_none() {
            return Err(KubeError::NoKind {
                what,
                expected: DAEMONSET_EXPECTED,
            });
        }
        let shape = |error: serde_json::Error| KubeError::Shape {
            what: what.clone(),
            expected: "DaemonSet",
            source: error.into(),
        };
        let metadata = Pending::of(self.metadata, || Err(de::Error::missing_field("metadata")))
            .map_err(shape)?;
        let spec =
            Pending::of(self.spec, || Err(de::Error::missing_field("spec"))).map_err(shape)?;
        let pod = spec.template.spec;
        let required_terms = pod
            .affinity
            .and_then(|a| a.node_affinity)
            .and_then(|n| n.required_during_scheduling_ignored_during_execution)
            .map(|selector| selector.node_selector_terms);
        Ok(DaemonSet {
            name: metadata.name,
            namespace: metadata.namespace,
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
}

impl Document for DaemonSetDocument {
    type Item = ();

    fn progress(&mut self) -> &mut Progress {
        &mut self.progress
    }

    fn kind(&mut self, kind: Option<String>) -> Result<(), KubeError> {
        match kind.as_deref() {
            None | Some("DaemonSet") => {
                self.kind = kind;
                Ok(())
            }
            Some(other) => Err(KubeError::WrongKind {
                what: self.progress.source.clone(),
                kind: other.to_owned(),
                expected: DAEMONSET_EXPECTED,
            }),
        }
    }

    fn wants_items(&self) -> bool {
        false
    }

    fn items(&mut self, _: Vec<()>) {}

    fn field(&mut self, key: Key, value: &[u8]) -> Result<(), serde_json::Error> {
        let needed = self.kind.as_ref().map(|_| true);
        match key {
            Key::Metadata => self.metadata = pending(needed, value)?,
            Key::Spec => self.spec = pending(needed, value)?,
            _ => {
                serde_json::from_slice::<IgnoredAny>(value)?;
            }
        }
        Ok(())
    }

    fn item<'de, A: MapAccess<'de>>(&mut self, map: A) -> Result<Option<()>, A::Error> {
        IgnoredAny.visit_map(map).map(|_| None)
    }
}

struct RawNode {
    metadata: RawMetadata,
    spec: RawNodeSpec,
    status: RawNodeStatus,
}

/// `metadata`: the name, the namespace, and the labels a [`Labels`] keeps
/// (the others are skipped unread).
struct RawMetadata {
    name: String,
    namespace: Option<String>,
    labels: BTreeMap<String, String>,
}

impl<'de> Deserialize<'de> for RawMetadata {
    /// With the forecast's labels.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RawMetadata, D::Error> {
        Metadata(&Labels::forecast()).deserialize(deserializer)
    }
}

/// Reads `metadata`, keeping the labels `.0` keeps.
struct Metadata<'a>(&'a Labels);

impl<'de> DeserializeSeed<'de> for Metadata<'_> {
    type Value = RawMetadata;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawMetadata, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Metadata<'_> {
    type Value = RawMetadata;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("object metadata")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMetadata, A::Error> {
        #[derive(Deserialize)]
        #[serde(field_identifier, rename_all = "lowercase")]
        enum Field {
            Name,
            Namespace,
            Labels,
            #[serde(other)]
            Other,
        }
        let mut name = None;
        let mut namespace = None;
        let mut labels = BTreeMap::new();
        while let Some(field) = map.next_key()? {
            match field {
                Field::Name => name = Some(map.next_value::<String>()?),
                Field::Namespace => namespace = map.next_value::<Option<String>>()?,
                Field::Labels => labels = map.next_value_seed(KeptLabels(self.0))?,
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(RawMetadata {
            name: name.ok_or_else(|| de::Error::missing_field("name"))?,
            namespace,
            labels,
        })
    }
}

/// `metadata.labels`: the ones `.0` keeps; the others are skipped unread.
struct KeptLabels<'a>(&'a Labels);

impl<'de> DeserializeSeed<'de> for KeptLabels<'_> {
    type Value = BTreeMap<String, String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for KeptLabels<'_> {
    type Value = BTreeMap<String, String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map of label keys to values")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut labels = BTreeMap::new();
        while let Some(key) = map.next_key_seed(LabelKey(self.0))? {
            match key {
                Some(key) => {
                    labels.insert(key, map.next_value()?);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(labels)
    }
}

/// A label key, if `.0` keeps it (allocated only then).
struct LabelKey<'a>(&'a Labels);

impl<'de> DeserializeSeed<'de> for LabelKey<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for LabelKey<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a label key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.0.keeps(key).then(|| key.to_owned()))
    }
}

#[derive(Default, Deserialize)]
struct RawNodeSpec {
    #[serde(default)]
    taints: Vec<Taint>,
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

fn node_from(raw: RawNode) -> Result<Node, KubeError> {
    let what = format!("node '{}'", raw.metadata.name);
    let mut conditions = Vec::new();
    for raw in raw.status.conditions {
        let condition = condition_from(raw, &what)?;
        if model::watched(&condition.kind) {
            conditions.push(condition);
        }
    }
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

fn event_from(raw: RawEvent, what: &str) -> Result<Event, KubeError> {
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

    /// The error and its sources, as `main` prints them.
    fn chain(error: &dyn std::error::Error) -> String {
        let mut text = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            text = format!("{text}: {cause}");
            source = cause.source();
        }
        text
    }

    /// Parses `text` whole and trickled a few bytes at a time: both must
    /// agree, error and place included. The error with its sources.
    fn nodes(text: &str) -> Result<NodeInput, String> {
        let parsed = parse_nodes(text, "in.json").map_err(|e| chain(&e));
        for size in [1, 3] {
            let streamed = read_nodes(super::scan::Trickle(text.as_bytes(), size), "in.json")
                .map_err(|e| chain(&e));
            assert_eq!(parsed, streamed, "{text} in reads of {size}");
        }
        parsed
    }

    #[test]
    fn the_kind_may_come_before_or_after_what_it_decides() {
        // kubectl prints items before kind: a List's items need a kind, a
        // NodeList's do not, whichever comes first.
        let bare = r#"{"metadata": {"name": "a"}}"#;
        for list in [
            format!(r#"{{"items": [{bare}], "kind": "List"}}"#),
            format!(r#"{{"kind": "List", "items": [{bare}]}}"#),
        ] {
            let error = nodes(&list).unwrap_err();
            assert_eq!(error, "in.json: item 0 has no 'kind': expected Node");
        }
        let list = format!(r#"{{"items": [{bare}], "kind": "NodeList"}}"#);
        assert_eq!(nodes(&list).unwrap().nodes()[0].name, "a");
        // A single node's metadata and status before its kind.
        let late = r#"{"status": {"conditions": [{"type": "Ready", "status": "False",
            "lastTransitionTime": "2025-06-10T02:58:00Z"}]},
            "metadata": {"name": "n", "labels": {"kubernetes.io/arch": "arm64"}}, "kind": "Node"}"#;
        let NodeInput::Single(node) = nodes(late).unwrap() else {
            panic!("expected a single node");
        };
        assert_eq!(node.label(ARCH_LABEL), Some("arm64"));
        assert_eq!(node.conditions.len(), 1);
        let error = nodes(r#"{"metadata": {}, "kind": "Node"}"#).unwrap_err();
        assert!(
            error.starts_with("in.json is not a valid Node: missing field `name`"),
            "{error}"
        );
    }

    #[test]
    fn documents_without_a_kind_or_items_are_named() {
        for (text, expected) in [
            ("[1, 2]", "in.json has no 'kind'"),
            (r#""Node""#, "in.json has no 'kind'"),
            (r#"{"kind": 7, "items": []}"#, "in.json has no 'kind'"),
            (r#"{"kind": "List"}"#, "in.json has no 'items' list"),
            (
                r#"{"kind": "List", "items": {}}"#,
                "in.json has no 'items' list",
            ),
            (
                r#"{"kind": "List", "items": [1]}"#,
                "in.json: item 0 is not a valid Node",
            ),
            (
                r#"{"kind": "Node", "metadata": {"name": "n"}} x"#,
                "in.json is not valid JSON: trailing characters at line 1 column 45",
            ),
        ] {
            let error = nodes(text).unwrap_err();
            assert!(error.starts_with(expected), "{text}: {error}");
        }
        assert!(nodes(r#"{"kind": "List", "items": null}"#)
            .unwrap()
            .nodes()
            .is_empty());
    }

    #[test]
    fn only_the_labels_and_conditions_the_forecast_reads_are_kept() {
        let text = r#"{"kind": "Node", "metadata": {"name": "n", "labels": {
            "karpenter.sh/nodepool": "gpu", "kubernetes.io/hostname": "h", "topology.kubernetes.io/zone": "z",
            "karpenter.k8s.aws/ec2nodeclass": "c", "node.kubernetes.io/instance-type": "g5g.xlarge"}},
            "status": {"images": [{"names": ["x"], "sizeBytes": 1}], "conditions": [
            {"type": "MemoryPressure", "status": "False", "lastTransitionTime": "2025-06-10T02:58:00Z"},
            {"type": "AcceleratedHardwareReady", "status": "False", "reason": "DCGMError",
             "lastTransitionTime": "2025-06-10T03:00:00Z"}]}}"#;
        let NodeInput::Single(node) = nodes(text).unwrap() else {
            panic!("expected a single node");
        };
        let keys: Vec<&str> = node.labels.keys().map(String::as_str).collect();
        assert_eq!(keys, [NODECLASS_LABEL, NODEPOOL_LABEL, INSTANCE_TYPE_LABEL]);
        let kinds: Vec<&str> = node.conditions.iter().map(|c| c.kind.as_str()).collect();
        assert_eq!(kinds, ["AcceleratedHardwareReady"]);
        // The conditions dropped are still checked.
        let bad = text.replace(
            r#""MemoryPressure", "status": "False""#,
            r#""MemoryPressure", "status": "Maybe""#,
        );
        let error = nodes(&bad).unwrap_err();
        assert!(
            error.contains("condition 'MemoryPressure' has status 'Maybe'"),
            "{error}"
        );
    }

    #[test]
    fn a_daemonsets_placement_keeps_the_labels_it_reads() {
        let ds = r#"{"kind": "DaemonSet", "metadata": {"name": "dcgm-server"},
          "spec": {"template": {"spec": {"nodeSelector": {"example.com/engine": "yes"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
              "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "example.com/pool", "operator": "In", "values": ["gpu"]}]}]}}}}}}}"#;
        let ds = parse_daemonset(ds, "ds.json").unwrap();
        let node = r#"{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n",
            "labels": {"example.com/engine": "yes", "example.com/pool": "gpu",
                       "example.com/other": "x", "kubernetes.io/arch": "arm64"}}}]}"#;
        let keys =
            |input: NodeInput| -> Vec<String> { input.nodes()[0].labels.keys().cloned().collect() };
        let forecast_only = read_nodes(node.as_bytes(), "n.json").unwrap();
        assert_eq!(keys(forecast_only), [ARCH_LABEL]);
        let labels = Labels::forecast().and_placement_of(&ds);
        let placed = read_nodes_keeping(node.as_bytes(), "n.json", labels).unwrap();
        assert_eq!(
            keys(placed),
            ["example.com/engine", "example.com/pool", ARCH_LABEL]
        );
    }

    #[test]
    fn syntax_errors_name_the_line_and_column_and_stop_the_read() {
        let text =
            "{\n  \"kind\": \"List\",\n  \"items\": [\n    {\"kind\": \"Node\",, }\n  ]\n}\n";
        let error = nodes(text).unwrap_err();
        assert_eq!(
            error,
            "in.json is not valid JSON: key must be a string at line 4 column 21"
        );

        // An endless stream of garbage: one buffer is read, not the rest.
        let mut zeros = crate::input::Bounded::new(
            std::io::repeat(0),
            crate::input::Limit::new(1 << 30, "for the test"),
        );
        let error = read_nodes(&mut zeros, "stdin").unwrap_err();
        assert!(matches!(error, KubeError::Json { .. }), "{error}");
        assert!(zeros.bytes_read() <= 64 * 1024);

        // A valid prefix and endless whitespace: the limit ends it.
        let prefix = std::io::Cursor::new(br#"{"kind": "List", "items": ["#.to_vec());
        let stream = crate::input::Bounded::new(
            std::io::Read::chain(prefix, std::io::repeat(b' ')),
            crate::input::Limit::new(1 << 20, "for the test"),
        );
        let error = read_nodes(stream, "stdin").unwrap_err();
        let KubeError::Read { source, .. } = &error else {
            panic!("expected a read error: {error}");
        };
        assert!(crate::input::too_large(source).is_some(), "{error}");
        assert_eq!(error.to_string(), "cannot read stdin");
    }

    #[test]
    fn events_about_other_objects_are_checked_and_dropped() {
        let text = r#"{"items": [
            {"involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Pulled"},
            {"involvedObject": {"kind": "Node", "name": "n"}, "reason": "NodeRepairBlocked"},
            {"involvedObject": {"name": "n"}, "reason": "X"}
        ], "kind": "List"}"#;
        let events = parse_events(text, "ev.json").unwrap();
        assert_eq!(events, read_events(text.as_bytes(), "ev.json").unwrap());
        let reasons: Vec<_> = events.iter().map(|e| e.reason.as_deref()).collect();
        assert_eq!(reasons, [Some("NodeRepairBlocked"), Some("X")]);
        let bad = text.replace(r#""reason": "Pulled""#, r#""lastTimestamp": "soon""#);
        let error = parse_events(&bad, "ev.json").unwrap_err().to_string();
        assert_eq!(
            error,
            "ev.json: item 0: 'lastTimestamp' is not an RFC 3339 time: 'soon'"
        );
    }
}
