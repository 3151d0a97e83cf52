//! The Bottlerocket user-data that accelready renders, as serde types, and the
//! validated newtypes it is built from.
//!
//! Every value that Bottlerocket, kubelet or Karpenter would reject (or
//! silently drop) is a newtype that checks itself in `TryFrom<&str>`, so an
//! invalid value cannot reach the rendered TOML. The rules are those of
//! FACTS.md §3 and §5 (bottlerocket-settings-sdk `modeled-types`, kubelet's
//! label and taint validation).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a value was rejected: the value and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} '{value}': {rule}")]
pub struct Invalid {
    pub what: &'static str,
    pub value: String,
    pub rule: String,
}

fn invalid(what: &'static str, value: &str, rule: impl Into<String>) -> Invalid {
    Invalid {
        what,
        value: value.to_owned(),
        rule: rule.into(),
    }
}

/// Declares a validated string newtype: serde goes through `TryFrom<String>`
/// (so TOML parse errors carry the line) and back out as the plain string.
macro_rules! string_newtype {
    ($(#[$doc:meta])* $name:ident, $check:path) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<&str> for $name {
            type Error = Invalid;
            fn try_from(value: &str) -> Result<Self, Invalid> {
                $check(value).map(|()| $name(value.to_owned()))
            }
        }

        impl TryFrom<String> for $name {
            type Error = Invalid;
            fn try_from(value: String) -> Result<Self, Invalid> {
                $name::try_from(value.as_str())
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

string_newtype!(
    /// `settings.bootstrap-containers.<name>`: ASCII letters, digits and `-`,
    /// 1 to 76 characters.
    BootstrapContainerName,
    check_container_name
);

fn check_container_name(value: &str) -> Result<(), Invalid> {
    check_name_of("bootstrap container name", value)
}

string_newtype!(
    /// `settings.host-containers.<name>`: the same rule as a bootstrap
    /// container's name (both are systemd unit instance names).
    HostContainerName,
    check_host_container_name
);

/// The host containers Bottlerocket's own settings define: `admin` (the
/// admin container) and `control` (the SSM agent). A host container of
/// ours with one of these names would replace it on every node.
pub const BUILTIN_HOST_CONTAINERS: [&str; 2] = ["admin", "control"];

fn check_host_container_name(value: &str) -> Result<(), Invalid> {
    check_name_of("host container name", value)?;
    if BUILTIN_HOST_CONTAINERS.contains(&value) {
        return Err(invalid(
            "host container name",
            value,
            "is one of Bottlerocket's own host containers (admin, control): settings.host-containers.<name> would replace it on every node; choose another name",
        ));
    }
    Ok(())
}

/// ASCII letters, digits and `-`, 1 to 76 characters.
fn check_name_of(what: &'static str, value: &str) -> Result<(), Invalid> {
    if value.is_empty() || value.len() > 76 {
        return Err(invalid(what, value, "must be 1 to 76 characters"));
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(invalid(
            what,
            value,
            "only ASCII letters, digits and '-' are allowed",
        ));
    }
    Ok(())
}

string_newtype!(
    /// A Kubernetes label (or taint) key: optional DNS-subdomain prefix and
    /// `/`, then a 1–63 character name.
    LabelKey,
    check_label_key
);

/// Namespaces in which kubelet refuses to set labels on its own node, except
/// the allowed sub-namespaces and well-known labels below (kubelet
/// `KubeletLabelNamespaces`, `KubeletLabels`).
const KUBELET_ALLOWED_NAMESPACES: [&str; 2] = ["kubelet.kubernetes.io", "node.kubernetes.io"];
const KUBELET_ALLOWED_LABELS: [&str; 9] = [
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];

impl LabelKey {
    /// The DNS-subdomain prefix, if any (`example.com` in `example.com/x`).
    pub fn prefix(&self) -> Option<&str> {
        self.0.split_once('/').map(|(prefix, _)| prefix)
    }

    /// True when kubelet refuses to start with this label in `--node-labels`:
    /// the `kubernetes.io` and `k8s.io` namespaces, except
    /// `kubelet.kubernetes.io`, `node.kubernetes.io` and the well-known labels.
    pub fn kubelet_refuses(&self) -> bool {
        let Some(prefix) = self.prefix() else {
            return false;
        };
        let in_namespace = |ns: &str| prefix == ns || prefix.ends_with(&format!(".{ns}"));
        if !(in_namespace("kubernetes.io") || in_namespace("k8s.io")) {
            return false;
        }
        let allowed = KUBELET_ALLOWED_NAMESPACES.iter().any(|ns| in_namespace(ns))
            || KUBELET_ALLOWED_LABELS.contains(&self.0.as_str());
        !allowed
    }
}

fn check_label_key(value: &str) -> Result<(), Invalid> {
    const WHAT: &str = "label key";
    let (prefix, name) = match value.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, value),
    };
    if let Some(prefix) = prefix {
        check_dns_subdomain(prefix).map_err(|rule| invalid(WHAT, value, rule))?;
    }
    check_label_name(name).map_err(|rule| invalid(WHAT, value, format!("name {rule}")))
}

/// RFC 1123 subdomain: lowercase alphanumerics, `-` and `.`, at most 253
/// characters, each dot-separated part starting and ending alphanumeric.
fn check_dns_subdomain(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() || prefix.len() > 253 {
        return Err("prefix must be 1 to 253 characters".to_owned());
    }
    let part_ok = |part: &str| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !part.starts_with('-')
            && !part.ends_with('-')
    };
    if !prefix.split('.').all(part_ok) {
        return Err(format!(
            "prefix '{prefix}' must be a DNS subdomain (lowercase letters, digits, '-' and '.')"
        ));
    }
    Ok(())
}

string_newtype!(
    /// A Kubernetes object name (`metadata.name`): a DNS-1123 subdomain, which
    /// the API server requires of every custom resource's name.
    KubernetesName,
    check_kubernetes_name
);

fn check_kubernetes_name(value: &str) -> Result<(), Invalid> {
    check_dns_subdomain(value).map_err(|_| {
        invalid(
            "Kubernetes object name",
            value,
            "must be a DNS-1123 subdomain: at most 253 characters of lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit (the API server rejects any other metadata.name)",
        )
    })
}

/// 1 to 63 characters, alphanumeric at both ends, `-`, `_`, `.` inside.
fn check_label_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 63 {
        return Err("must be 1 to 63 characters".to_owned());
    }
    check_label_chars(name)
}

fn check_label_chars(name: &str) -> Result<(), String> {
    let bytes = name.as_bytes();
    let ends_ok = bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric);
    let inside_ok = bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ends_ok && inside_ok {
        Ok(())
    } else {
        Err("must start and end with a letter or digit and contain only letters, digits, '-', '_' and '.'".to_owned())
    }
}

string_newtype!(
    /// A label (or taint) value: empty, or 1–63 characters like a label name.
    LabelValue,
    check_label_value
);

fn check_label_value(value: &str) -> Result<(), Invalid> {
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > 63 {
        return Err(invalid(
            "label value",
            value,
            "must be at most 63 characters",
        ));
    }
    check_label_chars(value).map_err(|rule| invalid("label value", value, rule))
}

/// What a taint does to pods that do not tolerate it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

impl TryFrom<&str> for TaintEffect {
    type Error = Invalid;
    fn try_from(value: &str) -> Result<Self, Invalid> {
        match value {
            "NoSchedule" => Ok(TaintEffect::NoSchedule),
            "PreferNoSchedule" => Ok(TaintEffect::PreferNoSchedule),
            "NoExecute" => Ok(TaintEffect::NoExecute),
            _ => Err(invalid(
                "taint effect",
                value,
                "must be NoSchedule, PreferNoSchedule or NoExecute (kubelet will not start otherwise)",
            )),
        }
    }
}

/// A whole taint, written `key=value:Effect` or `key:Effect` (as kubectl does).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Taint {
    pub key: LabelKey,
    pub value: LabelValue,
    pub effect: TaintEffect,
}

impl TryFrom<&str> for Taint {
    type Error = Invalid;
    fn try_from(text: &str) -> Result<Self, Invalid> {
        let Some((key_value, effect)) = text.rsplit_once(':') else {
            return Err(invalid(
                "taint",
                text,
                "expected key=value:Effect or key:Effect",
            ));
        };
        let (key, value) = key_value.split_once('=').unwrap_or((key_value, ""));
        Ok(Taint {
            key: LabelKey::try_from(key)?,
            value: LabelValue::try_from(value)?,
            effect: TaintEffect::try_from(effect)?,
        })
    }
}

impl TryFrom<String> for Taint {
    type Error = Invalid;
    fn try_from(value: String) -> Result<Self, Invalid> {
        Taint::try_from(value.as_str())
    }
}

impl From<Taint> for String {
    fn from(taint: Taint) -> String {
        taint.to_string()
    }
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.as_str().is_empty() {
            write!(f, "{}:{}", self.key, self.effect.as_str())
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect.as_str())
        }
    }
}

string_newtype!(
    /// A Kubernetes resource quantity such as `500m`, `1Gi`, `100M`, `1e3`.
    Quantity,
    check_quantity
);

const BINARY_SUFFIXES: [(&str, f64); 6] = [
    ("Ki", 1024.0),
    ("Mi", 1048576.0),
    ("Gi", 1073741824.0),
    ("Ti", 1099511627776.0),
    ("Pi", 1125899906842624.0),
    ("Ei", 1152921504606846976.0),
];
const DECIMAL_SUFFIXES: [(&str, f64); 9] = [
    ("n", 1e-9),
    ("u", 1e-6),
    ("m", 1e-3),
    ("k", 1e3),
    ("M", 1e6),
    ("G", 1e9),
    ("T", 1e12),
    ("P", 1e15),
    ("E", 1e18),
];

impl Quantity {
    /// The quantity as a number of base units (bytes for memory, cores for cpu).
    pub fn value(&self) -> f64 {
        parse_quantity(&self.0).unwrap_or(0.0)
    }
}

/// Parses `<decimal><suffix>` where suffix is a binary (`Ki`…`Ei`) or decimal
/// (`n`…`E`) SI suffix or an exponent (`e3`, `E-2`).
pub fn parse_quantity(text: &str) -> Option<f64> {
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return None;
    }
    let number: f64 = number.parse().ok()?;
    let scale = if suffix.is_empty() {
        1.0
    } else if let Some((_, scale)) = BINARY_SUFFIXES
        .iter()
        .chain(DECIMAL_SUFFIXES.iter())
        .find(|(s, _)| *s == suffix)
    {
        *scale
    } else {
        let exponent = suffix.strip_prefix(['e', 'E'])?;
        let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        10f64.powi(exponent.parse().ok()?)
    };
    Some(number * scale)
}

fn check_quantity(value: &str) -> Result<(), Invalid> {
    match parse_quantity(value) {
        Some(_) => Ok(()),
        None => Err(invalid(
            "quantity",
            value,
            "expected a number with an optional suffix (Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent), e.g. 500m or 1Gi",
        )),
    }
}

string_newtype!(
    /// An eviction threshold: a quantity (`100Mi`) or a percentage (`10%`).
    EvictionThreshold,
    check_eviction_threshold
);

fn check_eviction_threshold(value: &str) -> Result<(), Invalid> {
    if let Some(percent) = value.strip_suffix('%') {
        return match percent.parse::<f64>() {
            Ok(p) if (0.0..=100.0).contains(&p) && !percent.starts_with(['+', '-']) => Ok(()),
            _ => Err(invalid(
                "eviction threshold",
                value,
                "a percentage must be between 0% and 100%",
            )),
        };
    }
    check_quantity(value).map_err(|_| {
        invalid(
            "eviction threshold",
            value,
            "expected a quantity (100Mi) or a percentage (10%)",
        )
    })
}

/// Declares a closed set of kebab-case keys with their spelling.
macro_rules! key_enum {
    ($(#[$doc:meta])* $name:ident, $what:literal, { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String")]
        pub enum $name {
            $(#[serde(rename = $text)] $variant,)+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl TryFrom<&str> for $name {
            type Error = Invalid;
            fn try_from(value: &str) -> Result<Self, Invalid> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|key| key.as_str() == value)
                    .ok_or_else(|| {
                        let known: Vec<&str> = $name::ALL.iter().map(|k| k.as_str()).collect();
                        invalid($what, value, format!("expected one of {}", known.join(", ")))
                    })
            }
        }

        impl TryFrom<String> for $name {
            type Error = Invalid;
            fn try_from(value: String) -> Result<Self, Invalid> {
                $name::try_from(value.as_str())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

key_enum!(
    /// `eviction-hard` keys kubelet knows.
    EvictionSignal, "eviction signal", {
        MemoryAvailable = "memory.available",
        NodefsAvailable = "nodefs.available",
        NodefsInodesFree = "nodefs.inodesFree",
        ImagefsAvailable = "imagefs.available",
        ImagefsInodesFree = "imagefs.inodesFree",
        PidAvailable = "pid.available",
    }
);

key_enum!(
    /// `kube-reserved` / `system-reserved` keys.
    ReservedResource, "reserved resource", {
        Cpu = "cpu",
        Memory = "memory",
        EphemeralStorage = "ephemeral-storage",
        Pid = "pid",
    }
);

string_newtype!(
    /// A SHA-256 digest: exactly 64 lowercase hexadecimal characters.
    Sha256Hex,
    check_sha256
);

fn check_sha256(value: &str) -> Result<(), Invalid> {
    if value.len() == 64
        && value
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        Ok(())
    } else {
        Err(invalid(
            "sha256",
            value,
            "must be exactly 64 lowercase hexadecimal characters",
        ))
    }
}

/// `settings.bootstrap-containers.<name>.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Off,
    Once,
    Always,
}

/// The whole user-data document; Karpenter keeps only `[settings]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserData {
    pub settings: Settings,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Settings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<Kubernetes>,
    pub bootstrap_containers: BTreeMap<BootstrapContainerName, BootstrapContainer>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_containers: BTreeMap<HostContainerName, HostContainer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_device_plugins: Option<KubeletDevicePlugins>,
}

/// `settings.kubernetes`: only keys that Karpenter's Bottlerocket struct
/// keeps, and never the ones it overwrites (cluster-name, api-server,
/// cluster-certificate, node-taints).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Kubernetes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<u32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<LabelKey, LabelValue>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<ReservedResource, Quantity>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<ReservedResource, Quantity>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_hard: BTreeMap<EvictionSignal, EvictionThreshold>,
}

impl Kubernetes {
    pub fn is_empty(&self) -> bool {
        *self == Kubernetes::default()
    }
}

/// `settings.bootstrap-containers.<name>`. `mode` is always written: its
/// default is `off`, and an omitted mode means the container never runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct BootstrapContainer {
    pub source: String,
    pub mode: Mode,
    pub essential: bool,
    /// Standard base64.
    pub user_data: String,
}

/// `settings.host-containers.<name>` (FACTS §7.1): a long-running service
/// container. `enabled` and `superpowered` both default to false in
/// Bottlerocket, so both are always written. Superpowered: privileged, host
/// PID namespace, the host's `/` at `/.bottlerocket/rootfs` (with its `/dev`);
/// only such a container can open the GPU. Every host container shares the
/// host's network namespace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct HostContainer {
    pub source: String,
    pub enabled: bool,
    pub superpowered: bool,
    /// Standard base64.
    pub user_data: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct KubeletDevicePlugins {
    pub nvidia: NvidiaDevicePlugin,
}

/// `settings.kubelet-device-plugins.nvidia` (FACTS.md §5).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct NvidiaDevicePlugin {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_device_specs: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id_strategy: Option<DeviceIdStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_list_strategy: Option<DeviceListStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_sharing_strategy: Option<DeviceSharingStrategy>,
}

impl NvidiaDevicePlugin {
    pub fn is_empty(&self) -> bool {
        *self == NvidiaDevicePlugin::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceIdStrategy {
    Index,
    Uuid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceListStrategy {
    Envvar,
    VolumeMounts,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceSharingStrategy {
    None,
    TimeSlicing,
    Mps,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_names() {
        for good in ["accelready", "a", "boot-1", &"x".repeat(76)] {
            assert!(BootstrapContainerName::try_from(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "has_underscore",
            "dot.ted",
            "spa ce",
            "ünï",
            &"x".repeat(77),
        ] {
            let err = BootstrapContainerName::try_from(bad).unwrap_err();
            assert_eq!(err.value, bad);
        }
    }

    #[test]
    fn host_container_names_spare_bottlerocket_s_own() {
        assert!(HostContainerName::try_from("accelready-hostengine").is_ok());
        assert!(HostContainerName::try_from("controller").is_ok());
        for builtin in ["admin", "control"] {
            let err = HostContainerName::try_from(builtin).unwrap_err();
            assert!(err.rule.contains("Bottlerocket's own"), "{err}");
        }
        assert!(HostContainerName::try_from("has_underscore").is_err());
        // The bootstrap containers have no such names.
        assert!(BootstrapContainerName::try_from("control").is_ok());
    }

    #[test]
    fn label_keys() {
        for good in [
            "gpu",
            "accelready.io/dcgm",
            "a.b-c.example/x_y.z-1",
            "node.kubernetes.io/gpu",
        ] {
            assert!(LabelKey::try_from(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "/name",
            "Example.com/x",
            "example.com/",
            "-x",
            "x-",
            "a/b/c",
            &format!("{}/x", "a".repeat(254)),
            &"n".repeat(64),
        ] {
            assert!(LabelKey::try_from(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn kubelet_refused_namespaces() {
        let refused = |key: &str| LabelKey::try_from(key).unwrap().kubelet_refuses();
        assert!(refused("kubernetes.io/role"));
        assert!(refused("node-role.kubernetes.io/gpu"));
        assert!(refused("k8s.io/x"));
        assert!(refused("foo.k8s.io/x"));
        assert!(!refused("node.kubernetes.io/gpu"));
        assert!(!refused("sub.kubelet.kubernetes.io/x"));
        assert!(!refused("topology.kubernetes.io/zone"));
        assert!(!refused("example.com/x"));
        assert!(!refused("notkubernetes.io/x"));
        assert!(!refused("plain"));
    }

    #[test]
    fn kubernetes_names() {
        for good in ["x86-64-gpu", "a", "gpu.example", "0", &"a".repeat(253)] {
            assert!(KubernetesName::try_from(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "x86_64-gpu",
            "Gpu",
            "-gpu",
            "gpu-",
            "a..b",
            ".a",
            "a/b",
            &"a".repeat(254),
        ] {
            let err = KubernetesName::try_from(bad).unwrap_err();
            assert_eq!(err.value, bad);
            assert!(err.rule.contains("DNS-1123"), "{err}");
        }
    }

    #[test]
    fn label_values() {
        for good in ["", "true", "a_b.c-d", &"v".repeat(63)] {
            assert!(LabelValue::try_from(good).is_ok(), "{good}");
        }
        for bad in ["-a", "a-", "a b", "a/b", &"v".repeat(64)] {
            assert!(LabelValue::try_from(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn taints() {
        let taint = Taint::try_from("accelready.io/dcgm=missing:NoSchedule").unwrap();
        assert_eq!(taint.key.as_str(), "accelready.io/dcgm");
        assert_eq!(taint.value.as_str(), "missing");
        assert_eq!(taint.effect, TaintEffect::NoSchedule);
        assert_eq!(taint.to_string(), "accelready.io/dcgm=missing:NoSchedule");
        let bare = Taint::try_from("gpu:NoExecute").unwrap();
        assert_eq!(bare.to_string(), "gpu:NoExecute");
        let err = Taint::try_from("gpu=x:NoScheduleX").unwrap_err();
        assert_eq!(err.what, "taint effect");
        assert!(Taint::try_from("gpu").is_err());
        assert!(Taint::try_from("bad key=x:NoSchedule").is_err());
    }

    #[test]
    fn quantities() {
        let cases = [
            ("1Gi", 1073741824.0),
            ("500m", 0.5),
            ("100M", 1e8),
            ("2", 2.0),
            ("1.5Ki", 1536.0),
            ("1e3", 1000.0),
            ("5E-1", 0.5),
        ];
        for (text, value) in cases {
            assert_eq!(Quantity::try_from(text).unwrap().value(), value, "{text}");
        }
        for bad in ["", "Gi", "1GB", "1.2.3", "-1Gi", "1 Gi", "1e", ".", "1e+"] {
            assert!(Quantity::try_from(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn eviction_thresholds_and_signals() {
        for good in ["10%", "0.5%", "100Mi", "100%"] {
            assert!(EvictionThreshold::try_from(good).is_ok(), "{good}");
        }
        for bad in ["101%", "-1%", "x%", "ten"] {
            assert!(EvictionThreshold::try_from(bad).is_err(), "{bad}");
        }
        assert_eq!(
            EvictionSignal::try_from("nodefs.inodesFree").unwrap(),
            EvictionSignal::NodefsInodesFree
        );
        let err = EvictionSignal::try_from("memory.free").unwrap_err();
        assert!(err.rule.contains("memory.available"), "{err}");
        assert!(ReservedResource::try_from("gpu").is_err());
    }

    #[test]
    fn sha256_digests() {
        assert!(Sha256Hex::try_from("0".repeat(64).as_str()).is_ok());
        assert!(Sha256Hex::try_from("a".repeat(63).as_str()).is_err());
        assert!(Sha256Hex::try_from("A".repeat(64).as_str()).is_err());
        assert!(Sha256Hex::try_from("g".repeat(64).as_str()).is_err());
    }

    #[test]
    fn settings_serialize_with_mode_and_kebab_case() {
        let mut containers = BTreeMap::new();
        containers.insert(
            BootstrapContainerName::try_from("accelready").unwrap(),
            BootstrapContainer {
                source: "example/accelready:1".to_owned(),
                mode: Mode::Always,
                essential: true,
                user_data: "e30=".to_owned(),
            },
        );
        let host_containers = BTreeMap::from([(
            HostContainerName::try_from("accelready-hostengine").unwrap(),
            HostContainer {
                source: "example/accelready:1".to_owned(),
                enabled: true,
                superpowered: true,
                user_data: "e30=".to_owned(),
            },
        )]);
        let user_data = UserData {
            settings: Settings {
                kubernetes: None,
                bootstrap_containers: containers,
                host_containers,
                kubelet_device_plugins: None,
            },
        };
        let text = toml::to_string(&user_data).unwrap();
        assert!(
            text.contains("[settings.bootstrap-containers.accelready]"),
            "{text}"
        );
        assert!(
            text.contains("[settings.host-containers.accelready-hostengine]\nsource = \"example/accelready:1\"\nenabled = true\nsuperpowered = true\n"),
            "{text}"
        );
        assert!(text.contains("mode = \"always\""), "{text}");
        assert!(text.contains("user-data = \"e30=\""), "{text}");
        let back: UserData = toml::from_str(&text).unwrap();
        assert_eq!(back, user_data);
    }
}
