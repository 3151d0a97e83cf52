//! `accelready render`: policy -> Bottlerocket user-data TOML, a Karpenter
//! `EC2NodeClass` holding it, or the EKS node monitoring agent's Helm values
//! ([`crate::agent_values`]), with the warnings that Karpenter's merge rules,
//! its repair policy and the agent the cluster runs call for (FACTS.md §3,
//! §5, §6, §7).
//!
//! Everything here is pure: [`user_data`] builds the typed settings, [`warnings`] and [`explain`] reason about them, [`render`] turns
//! them into the exact bytes to print. [`merge`] holds Karpenter's merge
//! rules and the user-data size budget they imply, with their upstream
//! sources; [`yaml`] writes YAML that YAML 1.1 readers read back unchanged.

pub mod merge;
pub mod yaml;

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::agent_values::{self, AgentValuesError};
use crate::arch::Arch;
use crate::bottlerocket::userdata::{
    BootstrapContainer, HostContainer, KubeletDevicePlugins, Kubernetes, KubernetesName, Mode,
    Quantity, ReservedResource, Settings, UserData,
};
use crate::bundle::image::IMAGE_BUNDLE_DIR;
use crate::policy::{
    image_digest, BundleOrigin, EngineSource, OnUnready, Policy, Provision, RunEngine,
    PLACEHOLDER_IMAGE,
};
use crate::repair::agent::DcgmClient;

pub use merge::{MERGE_RESERVE, NODECLASS_USER_DATA_BUDGET, USER_DATA_LIMIT};

/// Memory below which kubelet was seen OOM-killed, leaving `Ready=Unknown`
/// "zombie" nodes (the incident report).
const SMALL_INSTANCE_BYTES: f64 = 4.0 * 1024.0 * 1024.0 * 1024.0;
const MIB: f64 = 1024.0 * 1024.0;

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("rendered user-data is {size} bytes, over EC2's 16 KiB ({limit} bytes) limit; for EC2 user-data use --gzip (Bottlerocket accepts gzip-compressed user-data), or shorten the policy; as an EC2NodeClass spec.userData it must stay within {budget} bytes, and gzip cannot help there")]
    TooLarge {
        size: usize,
        limit: usize,
        budget: usize,
    },
    #[error("spec.userData would be {size} bytes: Karpenter adds up to {reserve} bytes to it (cluster CA bundle, endpoint, cluster name, its labels and taints, see --explain) before EC2's 16 KiB ({limit} bytes) limit, so it must stay within {budget} bytes or no node launches; shorten the policy (node.labels are the usual cause). Gzip cannot help: Karpenter reads spec.userData as TOML")]
    NodeClassTooLarge {
        size: usize,
        reserve: usize,
        limit: usize,
        budget: usize,
    },
    #[error("gzipped user-data is still {size} bytes, over EC2's {limit}-byte limit; shorten the policy")]
    TooLargeGzipped { size: usize, limit: usize },
    #[error("--gzip applies to --format userdata only: Karpenter reads an EC2NodeClass's spec.userData as TOML, and Helm reads values as YAML")]
    GzipNodeClass,
    #[error(transparent)]
    AgentValues(#[from] AgentValuesError),
    #[error("--format ec2nodeclass needs --cluster NAME (subnets and security groups are selected by karpenter.sh/discovery=NAME)")]
    MissingCluster,
    #[error("invalid --ami-alias '{0}': expected bottlerocket@latest, bottlerocket@v<version>, latest or v<version>")]
    AmiAlias(String),
    #[error("invalid {flag} '{value}': {rule}")]
    Flag {
        flag: &'static str,
        value: String,
        rule: String,
    },
}

/// Something in the policy that will not do what it seems to, given how
/// Bottlerocket, kubelet and Karpenter treat it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Warning {
    PlaceholderImage {
        image: String,
    },
    /// `source = "image"` with an image that a tag, not a digest, names.
    ImageNotPinned {
        image: String,
        architectures: Vec<Arch>,
    },
    /// GPU nodes of `arch` that the agent monitors get no DCGM host engine.
    NodesWillBeReplaced {
        karpenter: String,
        arch: Arch,
        agent: String,
        why: String,
    },
    /// A DCGM-3-era agent: only upgrading it helps (FACTS §7.3).
    AgentNeedsUpgrade {
        agent: String,
        range: String,
        node_repair: bool,
    },
    /// The agent skips DCGM on arm64 (v1.6.0 – v1.7.1).
    Arm64NotMonitored {
        agent: String,
        range: String,
    },
    /// accelready's engine on x86_64, where the chart's dcgm-server runs too.
    TwoEngines,
    /// accelready's engine would run a bundle that looks like DCGM 3.
    EngineDcgmMajor {
        arch: Arch,
        major: u32,
        url: String,
    },
    KubeReservedMemoryLow {
        configured_mib: u64,
        bottlerocket_default_mib: u64,
    },
    SmallInstance {
        memory: String,
    },
    KarpenterOwnsLabel {
        key: String,
    },
    MaxPodsOverwritten {
        max_pods: u32,
    },
    UserDataNearBudget {
        size: usize,
        budget: usize,
    },
    UserDataOverBudget {
        size: usize,
        budget: usize,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::PlaceholderImage { image } => write!(
                f,
                "bootstrap.image is the placeholder '{image}': push the accelready image to your registry and set bootstrap.image, or nodes will fail to pull it"
            ),
            Warning::ImageNotPinned { image, architectures } => write!(
                f,
                "{} take DCGM from the image (source = \"image\"), but bootstrap.image '{image}' is not pinned by digest: a tag can be moved to an image without that bundle, or with another one, and nodes then boot without DCGM; pin it as <repository>@sha256:<64 hex> (the index digest bootstrap/build prints, or skopeo copy --digestfile)",
                architectures
                    .iter()
                    .map(|arch| format!("[dcgm.bundle.{arch}]"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
            Warning::NodesWillBeReplaced { karpenter, arch, agent, why } => write!(
                f,
                "{arch} GPU nodes will be replaced about 11 minutes after they become Ready: the EKS node monitoring agent {agent} monitors them and needs a DCGM host engine on localhost:5555, and they get none: {why}. Karpenter {karpenter} node repair replaces a node whose AcceleratedHardwareReady has been False for 10 minutes (after the agent's 1-minute grace). \
                 Fix one of: let accelready run the engine ([hostengine] run = \"auto\" covering {arch}, dcgm.provision = \"if-missing\" with a pinned [dcgm.bundle.{arch}]: nv-hostengine comes with it); or disable the agent's NVIDIA monitor (nodeAgent.monitors.nvidia.enabled: false, agent v1.6.0+); or set repair.node-repair = false and turn Karpenter's NodeRepair gate off"
            ),
            Warning::AgentNeedsUpgrade { agent, range, node_repair } => write!(
                f,
                "agent.version = {agent} ({range}) is a DCGM-3-era EKS node monitoring agent: upgrade the agent; no bundle can fix it (it dlopen()s libdcgm.so inside its own container and fails with 'libdcgm.so not Found', and DCGM 4, the bundle's library and engine, retired the struct versions it uses){}. Upgrade to v1.7.2 or later and set agent.version",
                if *node_repair {
                    "; with node repair on, its GPU nodes are replaced about 11 minutes after they become Ready"
                } else {
                    ""
                }
            ),
            Warning::Arm64NotMonitored { agent, range } => write!(
                f,
                "agent.version = {agent} ({range}) skips its DCGM checks on arm64: GPU health on aarch64 nodes is not monitored at all (no DCGMError, and no repair for real GPU faults), and accelready's host engine there serves no one until the agent is v1.7.2 or later (PR #269)"
            ),
            Warning::TwoEngines => write!(
                f,
                "[hostengine] runs accelready's engine on x86_64, where the agent chart's dcgm-server runs too: install the agent chart with the values of `accelready render --format agent-values` so that no node runs two engines (accelready's engine otherwise stays idle where the chart's runs)"
            ),
            Warning::EngineDcgmMajor { arch, major, url } => write!(
                f,
                "[dcgm.bundle.{arch}] '{url}' looks like DCGM {major}, and [hostengine] runs its nv-hostengine on {arch}: the node monitoring agent is a DCGM 4 client (its own library), which cannot talk to a DCGM {major} engine; pin a DCGM 4 bundle (datacenter-gpu-manager-4-core), ideally the agent's own DCGM version (4.6.1 for agent v1.7.0)"
            ),
            Warning::KubeReservedMemoryLow { configured_mib, bottlerocket_default_mib } => write!(
                f,
                "node.kube-reserved.memory is {configured_mib}Mi, below Bottlerocket's own default of {bottlerocket_default_mib}Mi (11 * max-pods + 255): kubelet can be OOM-killed and leave a Ready=Unknown node"
            ),
            Warning::SmallInstance { memory } => write!(
                f,
                "--instance-memory {memory} is under 4Gi with node repair on: kubelet OOM on small instances left 'zombie' Ready=Unknown nodes in the incident; use instances with at least 4Gi"
            ),
            Warning::KarpenterOwnsLabel { key } => write!(
                f,
                "node.labels.'{key}': Karpenter sets labels in karpenter.sh/ and karpenter.k8s.aws/ itself and wins on the same key; this label may be overwritten"
            ),
            Warning::MaxPodsOverwritten { max_pods } => write!(
                f,
                "node.max-pods = {max_pods} is written to settings.kubernetes.max-pods, but when Karpenter launches the node it always overwrites max-pods (with the EC2NodeClass's spec.kubelet.maxPods, else the instance type's pod capacity), so there it is informational only; set spec.kubelet.maxPods = {max_pods} (--format ec2nodeclass does)"
            ),
            Warning::UserDataNearBudget { size, budget } => write!(
                f,
                "user-data is {size} bytes, within {} bytes of the {budget} an EC2NodeClass's spec.userData may hold: Karpenter adds up to {MERGE_RESERVE} bytes (cluster CA bundle, endpoint, its labels and taints) before EC2's 16 KiB limit; a few more node.labels and no node launches",
                budget - size.min(budget)
            ),
            Warning::UserDataOverBudget { size, budget } => write!(
                f,
                "user-data is {size} bytes: within EC2's 16 KiB on its own, but over the {budget} bytes an EC2NodeClass's spec.userData may hold (Karpenter adds up to {MERGE_RESERVE} bytes), so as spec.userData no node would launch; gzip cannot help there (Karpenter reads spec.userData as TOML): shorten the policy"
            ),
        }
    }
}

/// The typed user-data for a policy.
pub fn user_data(policy: &Policy) -> UserData {
    let node = &policy.node;
    let kubernetes = Kubernetes {
        max_pods: node.max_pods,
        node_labels: node.labels.clone(),
        kube_reserved: node.kube_reserved.clone(),
        system_reserved: node.system_reserved.clone(),
        eviction_hard: node.eviction_hard.clone(),
    };
    let embedded = base64::engine::general_purpose::STANDARD.encode(policy.to_toml());
    let container = BootstrapContainer {
        source: policy.bootstrap.image.clone(),
        mode: Mode::Always,
        essential: policy.bootstrap.essential,
        user_data: embedded.clone(),
    };
    // The same image and the same policy: the image picks the hostengine role
    // from the directory Bottlerocket mounts into a host container. Rendered
    // on every node unless run = "never"; it stays idle where no engine is
    // wanted, so that one user-data serves every architecture.
    let host_containers = match policy.hostengine.run {
        RunEngine::Never => BTreeMap::new(),
        RunEngine::Auto | RunEngine::Always => BTreeMap::from([(
            policy.hostengine.name.clone(),
            HostContainer {
                source: policy.bootstrap.image.clone(),
                enabled: true,
                superpowered: true,
                user_data: embedded,
            },
        )]),
    };
    UserData {
        settings: Settings {
            kubernetes: (!kubernetes.is_empty()).then_some(kubernetes),
            bootstrap_containers: BTreeMap::from([(policy.bootstrap.name.clone(), container)]),
            host_containers,
            kubelet_device_plugins: node
                .nvidia_device_plugin
                .clone()
                .filter(|plugin| !plugin.is_empty())
                .map(|nvidia| KubeletDevicePlugins { nvidia }),
        },
    }
}

/// The user-data as TOML, with a header that says where it came from.
pub fn user_data_toml(policy: &Policy) -> String {
    let body = toml::to_string(&user_data(policy)).expect("user-data always serializes to TOML");
    format!("{HEADER}{body}")
}

const HEADER: &str = "# Rendered by `accelready render`; edit the policy, not this file.\n";

/// Flags that shape the EC2NodeClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClassOptions {
    pub cluster: String,
    pub role: String,
    pub name: String,
    pub ami_alias: String,
}

impl NodeClassOptions {
    /// Checks the flags; `role` defaults to `KarpenterNodeRole-<cluster>`.
    pub fn new(
        cluster: &str,
        role: Option<&str>,
        name: &str,
        ami_alias: &str,
    ) -> Result<Self, RenderError> {
        check_cluster_name(cluster)?;
        check_node_class_name(name)?;
        if role == Some("") {
            return Err(RenderError::Flag {
                flag: "--role",
                value: String::new(),
                rule: "must not be empty (the EC2NodeClass CRD requires a role)".to_owned(),
            });
        }
        Ok(NodeClassOptions {
            cluster: cluster.to_owned(),
            role: role.map_or_else(|| format!("KarpenterNodeRole-{cluster}"), str::to_owned),
            name: name.to_owned(),
            ami_alias: normalize_ami_alias(ami_alias)?,
        })
    }
}

/// The longest EC2NodeClass name that works: Karpenter labels every node
/// with `karpenter.k8s.aws/ec2nodeclass=<name>`, and label values are at most
/// 63 characters (kubelet refuses to start with a longer one).
pub const NODE_CLASS_NAME_MAX: usize = 63;

/// `--name`: a Kubernetes object name (DNS-1123 subdomain, which the API
/// server requires) that is also a valid node-label value.
fn check_node_class_name(name: &str) -> Result<(), RenderError> {
    KubernetesName::try_from(name).map_err(|invalid| RenderError::Flag {
        flag: "--name",
        value: name.to_owned(),
        rule: invalid.rule,
    })?;
    if name.len() > NODE_CLASS_NAME_MAX {
        return Err(RenderError::Flag {
            flag: "--name",
            value: name.to_owned(),
            rule: format!("must be at most {NODE_CLASS_NAME_MAX} characters: Karpenter labels each node karpenter.k8s.aws/ec2nodeclass=<name>, and a label value longer than 63 characters keeps kubelet from starting"),
        });
    }
    Ok(())
}

/// `--cluster`: an EKS cluster name — 1 to 100 characters, letters, digits,
/// `-` and `_`, starting with a letter or digit (EKS CreateCluster).
fn check_cluster_name(cluster: &str) -> Result<(), RenderError> {
    let starts_ok = cluster
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric());
    let chars_ok = cluster
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if starts_ok && chars_ok && cluster.len() <= 100 {
        Ok(())
    } else {
        Err(RenderError::Flag {
            flag: "--cluster",
            value: cluster.to_owned(),
            rule: "must be an EKS cluster name: 1 to 100 letters, digits, '-' and '_', starting with a letter or digit".to_owned(),
        })
    }
}

/// `latest`, `v1.39.1`, `1.39.1` or `bottlerocket@...` -> `bottlerocket@...`.
fn normalize_ami_alias(alias: &str) -> Result<String, RenderError> {
    let version = alias.strip_prefix("bottlerocket@").unwrap_or(alias);
    if version == "latest" {
        return Ok("bottlerocket@latest".to_owned());
    }
    let digits = version.strip_prefix('v').unwrap_or(version);
    let parts: Vec<&str> = digits.split('.').collect();
    if parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        Ok(format!("bottlerocket@v{digits}"))
    } else {
        Err(RenderError::AmiAlias(alias.to_owned()))
    }
}

/// A `karpenter.k8s.aws/v1` EC2NodeClass (the fields accelready sets).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ec2NodeClass {
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    pub spec: NodeClassSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClassSpec {
    pub ami_family: String,
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    pub role: String,
    pub subnet_selector_terms: Vec<TagSelectorTerm>,
    pub security_group_selector_terms: Vec<TagSelectorTerm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    pub user_data: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmiSelectorTerm {
    pub alias: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TagSelectorTerm {
    pub tags: BTreeMap<String, String>,
}

/// `spec.kubelet`: when set, Karpenter replaces the same user-data keys with
/// these, and uses them to predict allocatable resources; so they carry the
/// policy's values too.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<u32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_hard: BTreeMap<String, String>,
}

fn string_map<K: fmt::Display, V: fmt::Display>(map: &BTreeMap<K, V>) -> BTreeMap<String, String> {
    map.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The EC2NodeClass for a policy.
pub fn node_class(policy: &Policy, options: &NodeClassOptions) -> Ec2NodeClass {
    let node = &policy.node;
    let kubelet = KubeletConfiguration {
        max_pods: node.max_pods,
        kube_reserved: string_map(&node.kube_reserved),
        system_reserved: string_map(&node.system_reserved),
        eviction_hard: string_map(&node.eviction_hard),
    };
    let discovery = || {
        vec![TagSelectorTerm {
            tags: BTreeMap::from([("karpenter.sh/discovery".to_owned(), options.cluster.clone())]),
        }]
    };
    Ec2NodeClass {
        api_version: "karpenter.k8s.aws/v1".to_owned(),
        kind: "EC2NodeClass".to_owned(),
        metadata: Metadata {
            name: options.name.clone(),
        },
        spec: NodeClassSpec {
            ami_family: "Bottlerocket".to_owned(),
            ami_selector_terms: vec![AmiSelectorTerm {
                alias: options.ami_alias.clone(),
            }],
            role: options.role.clone(),
            subnet_selector_terms: discovery(),
            security_group_selector_terms: discovery(),
            kubelet: (kubelet != KubeletConfiguration::default()).then_some(kubelet),
            user_data: user_data_toml(policy),
        },
    }
}

/// Bottlerocket's default `kube-reserved.memory` in MiB for a max-pods.
pub fn bottlerocket_kube_reserved_mib(max_pods: u32) -> u64 {
    11 * u64::from(max_pods) + 255
}

/// Everything in the policy that will not do what it seems to.
pub fn warnings(policy: &Policy, instance_memory: Option<&Quantity>) -> Vec<Warning> {
    let mut found = Vec::new();
    if policy.bootstrap.image == PLACEHOLDER_IMAGE {
        found.push(Warning::PlaceholderImage {
            image: policy.bootstrap.image.clone(),
        });
    }
    let from_image = architectures_from_image(policy);
    if !from_image.is_empty() && image_digest(&policy.bootstrap.image).is_none() {
        found.push(Warning::ImageNotPinned {
            image: policy.bootstrap.image.clone(),
            architectures: from_image,
        });
    }
    let repair = policy.repair.node_repair;
    found.extend(agent_warnings(policy));
    for arch in policy.hostengine.wanted_architectures() {
        let bundle = policy.dcgm.bundle_for(arch);
        let url = bundle.and_then(|bundle| bundle.url.as_deref());
        if let (Provision::IfMissing, Some(url)) = (policy.dcgm.provision, url) {
            if let Some(major) = dcgm_major_from_url(url).filter(|&m| m != 4) {
                found.push(Warning::EngineDcgmMajor {
                    arch,
                    major,
                    url: url.to_owned(),
                });
            }
        }
    }
    if let (Some(max_pods), Some(memory)) = (
        policy.node.max_pods,
        policy.node.kube_reserved.get(&ReservedResource::Memory),
    ) {
        let default_mib = bottlerocket_kube_reserved_mib(max_pods);
        let configured_mib = memory.value() / MIB;
        if configured_mib < default_mib as f64 {
            found.push(Warning::KubeReservedMemoryLow {
                configured_mib: configured_mib.floor() as u64,
                bottlerocket_default_mib: default_mib,
            });
        }
    }
    if let Some(memory) = instance_memory {
        if repair && memory.value() < SMALL_INSTANCE_BYTES {
            found.push(Warning::SmallInstance {
                memory: memory.to_string(),
            });
        }
    }
    for key in policy.node.labels.keys() {
        if matches!(key.prefix(), Some("karpenter.sh" | "karpenter.k8s.aws")) {
            found.push(Warning::KarpenterOwnsLabel {
                key: key.to_string(),
            });
        }
    }
    found
}

/// The DCGM major version a bundle URL names: the first `<major>.<minor>.<patch>`
/// in its file name (`datacenter-gpu-manager-4-core_4.2.3-1_arm64.deb` -> 4,
/// `datacenter-gpu-manager_3.3.9_arm64.deb` -> 3), if there is one.
pub fn dcgm_major_from_url(url: &str) -> Option<u32> {
    let name = url.rsplit('/').next().unwrap_or(url);
    let bytes = name.as_bytes();
    (0..bytes.len()).find_map(|start| {
        let starts_number = bytes[start].is_ascii_digit()
            && (start == 0
                || !bytes[start - 1].is_ascii_alphanumeric() && bytes[start - 1] != b'.');
        if !starts_number {
            return None;
        }
        let mut parts = name[start..].splitn(4, '.');
        let major = parts.next()?;
        let minor = parts.next()?;
        let patch = parts.next()?;
        let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
        let patch_digits: String = patch.chars().take_while(char::is_ascii_digit).collect();
        (digits(major) && digits(minor) && !patch_digits.is_empty())
            .then(|| major.parse().ok())
            .flatten()
    })
}

/// The architectures the policy's nodes may have: those with a pinned
/// bundle, or both when none is pinned.
pub fn pool_architectures(policy: &Policy) -> Vec<Arch> {
    let pinned: Vec<Arch> = Arch::ALL
        .into_iter()
        .filter(|&arch| policy.dcgm.bundle_for(arch).is_some())
        .collect();
    if pinned.is_empty() {
        Arch::ALL.to_vec()
    } else {
        pinned
    }
}

/// What the agent the cluster runs ([agent] version) means for the policy.
fn agent_warnings(policy: &Policy) -> Vec<Warning> {
    let model = policy.agent.model();
    let agent = policy.agent.version.clone();
    let repair = policy.repair.node_repair;
    if model.client == DcgmClient::Dcgm3 {
        return vec![Warning::AgentNeedsUpgrade {
            agent,
            range: model.range(),
            node_repair: repair,
        }];
    }
    let mut found = Vec::new();
    for arch in pool_architectures(policy) {
        let monitored = arch == Arch::X86_64 || model.monitors_arm64;
        if !monitored {
            found.push(Warning::Arm64NotMonitored {
                agent: agent.clone(),
                range: model.range(),
            });
            continue;
        }
        if let EngineSource::Missing(why) = policy.engine_for(arch) {
            if repair {
                found.push(Warning::NodesWillBeReplaced {
                    karpenter: policy.repair.karpenter.clone(),
                    arch,
                    agent: agent.clone(),
                    why,
                });
            }
        }
    }
    if policy.engine_for(Arch::X86_64) == EngineSource::Accelready {
        found.push(Warning::TwoEngines);
    }
    found
}

/// The architectures whose pinned bundle is the one the image carries.
fn architectures_from_image(policy: &Policy) -> Vec<Arch> {
    Arch::ALL
        .into_iter()
        .filter(|&arch| {
            policy
                .dcgm
                .bundle_for(arch)
                .is_some_and(|bundle| bundle.origin() == Some(BundleOrigin::Image))
        })
        .collect()
}

/// What will not do what it seems to in the output of `format`: max-pods in
/// user-data that Karpenter overwrites, and user-data that Karpenter's merge
/// would push over EC2's limit (FACTS.md §6, [`merge`]).
pub fn output_warnings(policy: &Policy, format: Format) -> Vec<Warning> {
    let mut found = Vec::new();
    if format == Format::AgentValues {
        // No user-data in it.
        return found;
    }
    if let (Some(max_pods), false) = (policy.node.max_pods, format.in_node_class()) {
        found.push(Warning::MaxPodsOverwritten { max_pods });
    }
    let size = user_data_toml(policy).len();
    let budget = NODECLASS_USER_DATA_BUDGET;
    if size > budget {
        // In an EC2NodeClass this is an error (RenderError::NodeClassTooLarge).
        if !format.in_node_class() && size <= USER_DATA_LIMIT {
            found.push(Warning::UserDataOverBudget { size, budget });
        }
    } else if size > budget - merge::NEAR_BUDGET_MARGIN {
        found.push(Warning::UserDataNearBudget { size, budget });
    }
    found
}

/// What `render` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Bottlerocket user-data TOML.
    Userdata,
    /// A `karpenter.k8s.aws/v1` `EC2NodeClass` whose `userData` is that TOML.
    Ec2nodeclass,
    /// Helm values for the EKS node monitoring agent's chart.
    AgentValues,
}

impl Format {
    /// Whether the output is YAML (written by [`yaml`], and so checked by
    /// the YAML 1.1 tests).
    pub fn is_yaml(self) -> bool {
        match self {
            Format::Userdata => false,
            Format::Ec2nodeclass | Format::AgentValues => true,
        }
    }

    /// Whether the user-data ends up in an EC2NodeClass's `spec.userData`
    /// (so Karpenter's merge adds to it, see [`merge`]).
    pub fn in_node_class(self) -> bool {
        match self {
            Format::Userdata | Format::AgentValues => false,
            Format::Ec2nodeclass => true,
        }
    }
}

/// The output bytes for `--format`: user-data TOML (optionally gzip+base64)
/// or EC2NodeClass YAML. Always ends with a newline.
pub fn render(
    policy: &Policy,
    format: Format,
    node_class_options: Option<&NodeClassOptions>,
    gzip: bool,
) -> Result<String, RenderError> {
    if format == Format::AgentValues {
        if gzip {
            return Err(RenderError::GzipNodeClass);
        }
        return Ok(agent_values::render(policy)?);
    }
    let toml = user_data_toml(policy);
    if gzip {
        if format == Format::Ec2nodeclass {
            return Err(RenderError::GzipNodeClass);
        }
        let compressed = gzip_deterministic(toml.as_bytes());
        if compressed.len() > USER_DATA_LIMIT {
            return Err(RenderError::TooLargeGzipped {
                size: compressed.len(),
                limit: USER_DATA_LIMIT,
            });
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode(compressed);
        return Ok(format!("{encoded}\n"));
    }
    if format.in_node_class() && toml.len() > NODECLASS_USER_DATA_BUDGET {
        return Err(RenderError::NodeClassTooLarge {
            size: toml.len(),
            reserve: MERGE_RESERVE,
            limit: USER_DATA_LIMIT,
            budget: NODECLASS_USER_DATA_BUDGET,
        });
    }
    if toml.len() > USER_DATA_LIMIT {
        return Err(RenderError::TooLarge {
            size: toml.len(),
            limit: USER_DATA_LIMIT,
            budget: NODECLASS_USER_DATA_BUDGET,
        });
    }
    match format {
        Format::Userdata => Ok(toml),
        Format::AgentValues => Ok(agent_values::render(policy)?),
        Format::Ec2nodeclass => {
            let options = node_class_options.ok_or(RenderError::MissingCluster)?;
            let yaml = yaml::to_string(&node_class(policy, options))
                .expect("an EC2NodeClass is plain maps, lists and scalars");
            Ok(yaml)
        }
    }
}

/// The monitoring agent and, per architecture, where a GPU node's DCGM host
/// engine comes from (`--explain`).
fn explain_agent(policy: &Policy) -> Vec<String> {
    let model = policy.agent.model();
    let version = &policy.agent.version;
    let mut lines = vec![format!(
        "Monitoring agent {version} (agent.version; {}, {}): {}, libdcgm from {}, a standalone client that needs a DCGM host engine at {} on every node it monitors; {}-second grace after start.",
        model.range(),
        model.label,
        model.client,
        match model.library {
            crate::repair::agent::LibrarySource::ImageWithoutIt => "its own container (which holds no usable libdcgm.so)",
            crate::repair::agent::LibrarySource::OwnImage => "its own image (libdcgm.so.4)",
        },
        model.engine_address,
        model.grace.as_secs()
    )];
    if model.client == DcgmClient::Dcgm3 {
        lines.push("A DCGM-3-era agent: upgrade the agent; no bundle can fix it. It fails with 'libdcgm.so not Found' inside its own container, and DCGM 4 (the bundle's library and engine) retired the struct versions it uses. `render --format agent-values` refuses it.".to_owned());
        return lines;
    }
    let replaced = if policy.repair.node_repair {
        " -> AcceleratedHardwareReady=False after the 1-minute grace, and node repair replaces the node 10 minutes later"
    } else {
        " -> AcceleratedHardwareReady=False after the 1-minute grace (node repair is off: nothing replaces the node)"
    };
    for arch in pool_architectures(policy) {
        let monitored = arch == Arch::X86_64 || model.monitors_arm64;
        let text = if !monitored {
            format!("{arch} GPU nodes: not monitored — the agent skips its DCGM checks on arm64 (no DCGMError, and no GPU health: real GPU faults go unreported); from v1.7.2 they need an engine.")
        } else {
            match policy.engine_for(arch) {
                EngineSource::Accelready => format!(
                    "{arch} GPU nodes: engine = accelready's host container '{}' (nv-hostengine from the {arch} bundle, 127.0.0.1:{}); the agent chart's dcgm-server must stay off them: `render --format agent-values`.",
                    policy.hostengine.name, policy.hostengine.port
                ),
                EngineSource::Chart => format!("{arch} GPU nodes: engine = the agent chart's dcgm-server (amd64 only, hostPort 5555; it tolerates no taints by default)."),
                EngineSource::Missing(why) => format!("{arch} GPU nodes: no engine — {why}{replaced}."),
            }
        };
        lines.push(text);
    }
    lines
}

/// Gzip with a fixed header (mtime 0, OS "unknown") so that the same input
/// always gives the same bytes.
pub fn gzip_deterministic(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(Vec::new(), flate2::Compression::best());
    encoder
        .write_all(data)
        .and_then(|()| encoder.finish())
        .expect("writing to a Vec cannot fail")
}

/// The `--explain` line about the user-data's size and what Karpenter's
/// merge leaves of EC2's limit.
pub fn size_statement(size: usize) -> String {
    format!(
        "User-data size: {size} bytes of EC2's {USER_DATA_LIMIT}. Karpenter's merge adds up to {MERGE_RESERVE} bytes (the cluster CA bundle, endpoint and name, cluster-dns-ip, max-pods, its labels and the karpenter.sh/unregistered taint, and {} for the NodePool's labels and taints), so an EC2NodeClass's spec.userData may hold at most {NODECLASS_USER_DATA_BUDGET} bytes (warning within {} bytes of it); --gzip applies to plain EC2 user-data only.",
        merge::NODEPOOL_ALLOWANCE,
        merge::NEAR_BUDGET_MARGIN
    )
}

/// The decisions the policy leads to, in plain words (`--explain`).
pub fn explain(policy: &Policy, warnings: &[Warning]) -> String {
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    let boot = &policy.bootstrap;
    line(format!(
        "Bootstrap container '{}' runs {} on every boot (mode = \"always\": an omitted mode would default to \"off\" and never run), after the NVIDIA modules load and before kubelet starts; it gets this policy as its user-data (base64 of the canonical TOML) and must finish within {} s.",
        boot.name,
        boot.image,
        policy.boot.deadline.as_secs()
    ));
    line(if boot.essential {
        "essential = true: if accelready exits non-zero, the boot stops and kubelet never starts."
            .to_owned()
    } else {
        "essential = false: if accelready fails, Bottlerocket ignores it and the node joins anyway."
            .to_owned()
    });
    let dcgm = &policy.dcgm;
    match dcgm.provision {
        Provision::Never => line(
            "DCGM: never installed by accelready. Bottlerocket ships none, so the node's DCGM check fails unless something else provides it.".to_owned(),
        ),
        Provision::IfMissing => {
            for arch in Arch::ALL {
                let hostengine = if policy.hostengine.wanted_on(arch) {
                    ", with nv-hostengine and dcgmi in bin/ for the host container's engine"
                } else if dcgm.with_hostengine {
                    ", with nv-hostengine and dcgmi in bin/ (dcgm.with-hostengine)"
                } else {
                    ""
                };
                let bundle = dcgm.bundle_for(arch);
                match bundle.and_then(|bundle| bundle.origin().map(|origin| (bundle, origin))) {
                    Some((bundle, BundleOrigin::Url(url))) => line(format!(
                        "DCGM on {arch}: when missing, download {url}, verify sha256 {}, install under {} and bind-mount it at {}{hostengine}.",
                        bundle.sha256,
                        dcgm.install_dir.display(),
                        dcgm.expose_at.display(),
                    )),
                    Some((bundle, BundleOrigin::Image)) => line(format!(
                        "DCGM on {arch}: when missing, install the bundle that the image carries at {IMAGE_BUNDLE_DIR}/{sha} (nothing is downloaded): verify every file against its manifest and the manifest's bundle digest against sha256 {sha}, install under {} and bind-mount it at {}{hostengine}.",
                        dcgm.install_dir.display(),
                        dcgm.expose_at.display(),
                        sha = bundle.sha256,
                    )),
                    None => line(format!("DCGM on {arch}: no bundle pinned; nothing is installed on {arch} nodes.")),
                }
            }
            if !architectures_from_image(policy).is_empty() {
                line(match image_digest(&boot.image) {
                    Some(digest) => format!(
                        "The image digest now pins DCGM too: bootstrap.image is pinned by {digest}, so that digest fixes both the accelready binary and the DCGM files every node installs. Rolling DCGM forward is a new image variant (bootstrap/build --bundle), a new digest, and a new rendered user-data."
                    ),
                    None => "The image now carries DCGM, but bootstrap.image is a tag, not a digest: whatever the tag points to when a node boots decides its DCGM files (see the warning). Pin the image by digest so that it pins DCGM too.".to_owned(),
                });
            }
        }
    }
    explain_hostengine(policy, &mut line);
    let repair = &policy.repair;
    line(format!(
        "Karpenter {}: node repair is {}.{}",
        repair.karpenter,
        if repair.node_repair { "on" } else { "off" },
        if repair.node_repair {
            " A node whose AcceleratedHardwareReady is False for 10 minutes (NotReady/Unknown for 30) is deleted without drain; there is no per-node opt-out."
        } else {
            ""
        }
    ));
    match repair.on_unready {
        OnUnready::Label => line("on-unready = \"label\": a node that is not ready is labelled (accelready.io/*) and joins; nothing stops pods from landing on it.".to_owned()),
        OnUnready::Taint => {
            line(format!(
                "on-unready = \"taint\": a node that is not ready gets the taint {} through the Bottlerocket API at boot. It is not written in user-data because Karpenter replaces settings.kubernetes.node-taints with the NodePool's taints.",
                repair.taint
            ));
            line("So that Karpenter's scheduling simulation expects the taint, add it to the NodePool (spec.template.spec):".to_owned());
            line(format!(
                "  startupTaints:\n    - key: {}\n      value: \"{}\"\n      effect: {}",
                repair.taint.key,
                repair.taint.value,
                repair.taint.effect.as_str()
            ));
            line("Karpenter treats startupTaints as temporary: while the taint stays on an unready node, Karpenter may still count that node as room for pending pods that do not tolerate it.".to_owned());
        }
        OnUnready::FailBoot => line("on-unready = \"fail-boot\": accelready exits non-zero and, being essential, stops the boot; the node never joins and Karpenter replaces it after its registration timeout.".to_owned()),
    }
    for text in explain_agent(policy) {
        line(text);
    }
    for rule in merge::RULES {
        line(rule.statement());
    }
    line(size_statement(user_data_toml(policy).len()));
    match policy.node.max_pods {
        Some(max_pods) => line(format!(
            "Kubelet memory: Bottlerocket reserves {} Mi for kubelet at max-pods = {max_pods} unless node.kube-reserved.memory overrides it.",
            bottlerocket_kube_reserved_mib(max_pods)
        )),
        None => line("Kubelet memory: Bottlerocket reserves 11 * max-pods + 255 Mi for kubelet (max-pods from the instance type) unless node.kube-reserved.memory overrides it.".to_owned()),
    }
    if warnings.is_empty() {
        line("Warnings: none.".to_owned());
    } else {
        line(format!("Warnings ({}):", warnings.len()));
        for warning in warnings {
            line(format!("  - {warning}"));
        }
    }
    out
}

/// The host container's part of `--explain`.
fn explain_hostengine(policy: &Policy, line: &mut impl FnMut(String)) {
    let engine = &policy.hostengine;
    if engine.run == RunEngine::Never {
        line("DCGM host engine: [hostengine] run = \"never\": no host container; accelready runs no nv-hostengine, so on nodes where the agent chart's dcgm-server does not run (arm64) nothing listens on localhost:5555 unless you run an engine yourself.".to_owned());
        return;
    }
    let wanted = engine.wanted_architectures();
    let wanted_text = if wanted.is_empty() {
        "no architecture".to_owned()
    } else {
        wanted
            .into_iter()
            .map(Arch::as_str)
            .collect::<Vec<_>>()
            .join(" and ")
    };
    line(format!(
        "Host container '{}' (superpowered, enabled) runs {} as `accelready hostengine` on every node, started after the bootstrap container and in parallel with kubelet, with the same policy as its user-data. On {wanted_text} it runs and supervises nv-hostengine -n on 127.0.0.1:{} from the installed bundle, against the host (chroot into the host's /, with its /dev/nvidia* and NVML), restarts it within 2 s when it dies and checks with dcgmi that it sees the node's GPUs; it starts nothing where another engine already serves the node (the agent chart's dcgm-server, or anything listening on the port) and stays idle, re-checking every minute, elsewhere. Status: /var/lib/accelready/hostengine.json on the host; logs: journalctl -u host-containers@{} (admin container).",
        engine.name, policy.bootstrap.image, engine.port, engine.name
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bottlerocket::userdata::{LabelKey, LabelValue};

    fn with(edit: impl FnOnce(&mut Policy)) -> Policy {
        let mut policy = Policy::default();
        edit(&mut policy);
        policy
    }

    #[test]
    fn default_user_data_runs_the_container_always_with_the_policy() {
        let policy = Policy::default();
        let text = user_data_toml(&policy);
        assert!(text.ends_with('\n'));
        let parsed: UserData = toml::from_str(&text).unwrap();
        assert_eq!(parsed, user_data(&policy));
        let container = parsed
            .settings
            .bootstrap_containers
            .values()
            .next()
            .unwrap();
        assert_eq!(container.mode, Mode::Always);
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(&container.user_data)
            .unwrap();
        let embedded = Policy::parse(std::str::from_utf8(&decoded).unwrap()).unwrap();
        assert_eq!(embedded, policy);
        assert!(parsed.settings.kubernetes.is_none());
    }

    #[test]
    fn default_policy_warns_of_replacement_and_placeholder() {
        let found = warnings(&Policy::default(), None);
        assert!(found
            .iter()
            .any(|w| matches!(w, Warning::PlaceholderImage { .. })));
        let replaced = found
            .iter()
            .find(|w| matches!(w, Warning::NodesWillBeReplaced { .. }))
            .unwrap();
        assert!(replaced
            .to_string()
            .contains("about 11 minutes after they become Ready"));
        let off = with(|p| p.repair.node_repair = false);
        assert!(!warnings(&off, None)
            .iter()
            .any(|w| matches!(w, Warning::NodesWillBeReplaced { .. })));
    }

    fn parsed(text: &str) -> Policy {
        Policy::parse(text).unwrap()
    }

    const ARM64_POOL: &str = "[dcgm]\nprovision = \"if-missing\"\nwith-hostengine = true\n[dcgm.bundle.aarch64]\nurl = \"https://mirror.example/dcgm.deb\"\nsha256 = \"3f5a0f8e1c2d4b6a79808f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6e5f4\"\n";

    #[test]
    fn the_agent_decides_what_heals_a_node() {
        // An arm64 pool with the bundle and the engine: nothing to warn about.
        let ok = warnings(&parsed(ARM64_POOL), None);
        assert!(
            !ok.iter()
                .any(|w| matches!(w, Warning::NodesWillBeReplaced { .. })),
            "{ok:?}"
        );
        // The same pool with an agent that has PR #269 and no engine: replaced.
        let never = parsed(&format!(
            "{ARM64_POOL}[hostengine]\nrun = \"never\"\n[agent]\nversion = \"1.7.2\""
        ));
        let found = warnings(&never, None);
        let replaced = found
            .iter()
            .find(|w| {
                matches!(
                    w,
                    Warning::NodesWillBeReplaced {
                        arch: Arch::Aarch64,
                        ..
                    }
                )
            })
            .unwrap_or_else(|| panic!("{found:?}"));
        let text = replaced.to_string();
        assert!(
            text.contains("aarch64 GPU nodes will be replaced about 11 minutes"),
            "{text}"
        );
        assert!(
            text.contains("the agent chart's dcgm-server never runs on arm64"),
            "{text}"
        );
        // An agent that skips arm64: not replaced, but not monitored either.
        let skipping = parsed(&format!(
            "{ARM64_POOL}[hostengine]\nrun = \"never\"\n[agent]\nversion = \"1.7.1\""
        ));
        let found = warnings(&skipping, None);
        assert!(
            !found
                .iter()
                .any(|w| matches!(w, Warning::NodesWillBeReplaced { .. })),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|w| matches!(w, Warning::Arm64NotMonitored { .. })),
            "{found:?}"
        );
        // A DCGM-3-era agent: upgrade it, whatever the rest says.
        let old = parsed(&format!("{ARM64_POOL}[agent]\nversion = \"1.2.0\""));
        let found = agent_warnings(&old);
        assert_eq!(found.len(), 1, "{found:?}");
        let text = found[0].to_string();
        assert!(
            text.contains("upgrade the agent; no bundle can fix it"),
            "{text}"
        );
        assert!(text.contains("replaced about 11 minutes"), "{text}");
        // x86_64 gets the chart's engine; accelready's there too asks for the values.
        let x86 = parsed("[hostengine]\nrun = \"always\"\n[dcgm]\nprovision = \"if-missing\"\nwith-hostengine = true\n[dcgm.bundle.x86_64]\nurl = \"https://mirror.example/dcgm.deb\"\nsha256 = \"3f5a0f8e1c2d4b6a79808f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6e5f4\"\n");
        let found = warnings(&x86, None);
        assert_eq!(
            found,
            vec![
                Warning::PlaceholderImage {
                    image: PLACEHOLDER_IMAGE.to_owned()
                },
                Warning::TwoEngines
            ],
            "{found:?}"
        );
    }

    #[test]
    fn explain_names_each_architectures_engine() {
        let text = explain(&parsed(ARM64_POOL), &[]);
        assert!(
            text.contains(
                "Monitoring agent 1.7.2 (agent.version; v1.7.2 – v1.7.x, monitors arm64)"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "aarch64 GPU nodes: engine = accelready's host container 'accelready-hostengine'"
            ),
            "{text}"
        );
        let default = explain(&Policy::default(), &[]);
        assert!(
            default.contains("x86_64 GPU nodes: engine = the agent chart's dcgm-server"),
            "{default}"
        );
        assert!(default.contains("aarch64 GPU nodes: no engine — [hostengine] would run accelready's engine there, but it has no DCGM to run"), "{default}");
        let old = explain(&parsed("[agent]\nversion = \"1.4.0\""), &[]);
        assert!(
            old.contains("upgrade the agent; no bundle can fix it"),
            "{old}"
        );
        let skipping = explain(&parsed("[agent]\nversion = \"1.6.0\""), &[]);
        assert!(
            skipping.contains("aarch64 GPU nodes: not monitored"),
            "{skipping}"
        );
    }

    #[test]
    fn the_host_container_runs_the_same_image_and_policy_superpowered() {
        let policy = Policy::default();
        let data = user_data(&policy);
        let (name, host) = data.settings.host_containers.iter().next().unwrap();
        assert_eq!(name.as_str(), "accelready-hostengine");
        assert_eq!(host.source, policy.bootstrap.image);
        assert!(host.enabled && host.superpowered);
        let bootstrap = data.settings.bootstrap_containers.values().next().unwrap();
        assert_eq!(host.user_data, bootstrap.user_data);
        let text = user_data_toml(&policy);
        assert!(
            text.contains("[settings.host-containers.accelready-hostengine]"),
            "{text}"
        );
        // "always" renders it too; "never" does not.
        let always = with(|p| p.hostengine.run = RunEngine::Always);
        assert_eq!(user_data(&always).settings.host_containers.len(), 1);
        let never = with(|p| p.hostengine.run = RunEngine::Never);
        assert!(user_data(&never).settings.host_containers.is_empty());
        assert!(!user_data_toml(&never).contains("host-containers"));
        assert!(explain(&never, &[]).contains("run = \"never\": no host container"));
    }

    fn aarch64_bundle(url: &str) -> Policy {
        with(|p| {
            p.dcgm.provision = Provision::IfMissing;
            p.dcgm.bundle.aarch64 = Some(crate::policy::Bundle {
                url: Some(url.to_owned()),
                source: None,
                sha256: crate::bottlerocket::userdata::Sha256Hex::try_from(
                    "ab".repeat(32).as_str(),
                )
                .unwrap(),
            });
        })
    }

    #[test]
    fn engine_warnings_follow_the_hostengine_policy() {
        // dcgm.with-hostengine = false: nv-hostengine comes with the bundle
        // anyway where [hostengine] wants an engine, so the engine is there.
        let dcgm4 = aarch64_bundle("https://m/datacenter-gpu-manager-4-core_4.6.1-1_arm64.deb");
        assert!(!dcgm4.dcgm.with_hostengine);
        assert_eq!(dcgm4.engine_for(Arch::Aarch64), EngineSource::Accelready);
        let found = warnings(&dcgm4, None);
        assert!(
            !found.iter().any(|w| matches!(
                w,
                Warning::EngineDcgmMajor { .. } | Warning::NodesWillBeReplaced { .. }
            )),
            "{found:?}"
        );
        assert!(explain(&dcgm4, &found)
            .contains("with nv-hostengine and dcgmi in bin/ for the host container"));
        // A DCGM 3 bundle for the engine: the DCGM 4 agent cannot use it.
        let dcgm3 = aarch64_bundle("https://m/datacenter-gpu-manager_3.3.9_arm64.deb");
        let found = warnings(&dcgm3, None);
        let major = found
            .iter()
            .find(|w| {
                matches!(
                    w,
                    Warning::EngineDcgmMajor {
                        major: 3,
                        arch: Arch::Aarch64,
                        ..
                    }
                )
            })
            .unwrap_or_else(|| panic!("{found:?}"));
        assert!(major.to_string().contains("looks like DCGM 3"), "{major}");
        // No engine wanted on aarch64: no DCGM 3 warning about it either.
        let never = {
            let mut p = dcgm3.clone();
            p.hostengine.run = RunEngine::Never;
            p
        };
        assert!(!warnings(&never, None)
            .iter()
            .any(|w| matches!(w, Warning::EngineDcgmMajor { .. })));
    }

    #[test]
    fn dcgm_majors_from_bundle_urls() {
        for (url, major) in [
            (
                "https://m/datacenter-gpu-manager-4-core_4.2.3-1_arm64.deb",
                Some(4),
            ),
            ("https://m/datacenter-gpu-manager_3.3.9_arm64.deb", Some(3)),
            (
                "https://m/datacenter-gpu-manager-4-core-4.6.1-1.aarch64.rpm",
                Some(4),
            ),
            ("https://m/dcgm-4.6.1-aarch64.tar.zst", Some(4)),
            ("https://m/x/dcgm.deb", None),
            ("https://m/v1.2/dcgm.tar.gz", None),
            ("https://m/libfoo-12.4.deb", None),
        ] {
            assert_eq!(dcgm_major_from_url(url), major, "{url}");
        }
    }

    #[test]
    fn memory_warnings() {
        let policy = with(|p| {
            p.node.max_pods = Some(29);
            p.node.kube_reserved.insert(
                ReservedResource::Memory,
                Quantity::try_from("500Mi").unwrap(),
            );
        });
        let found = warnings(&policy, None);
        assert!(found.contains(&Warning::KubeReservedMemoryLow {
            configured_mib: 500,
            bottlerocket_default_mib: 574
        }));
        let enough = with(|p| {
            p.node.max_pods = Some(29);
            p.node.kube_reserved.insert(
                ReservedResource::Memory,
                Quantity::try_from("574Mi").unwrap(),
            );
        });
        assert!(!warnings(&enough, None)
            .iter()
            .any(|w| matches!(w, Warning::KubeReservedMemoryLow { .. })));
        let small = Quantity::try_from("2Gi").unwrap();
        assert!(
            warnings(&Policy::default(), Some(&small)).contains(&Warning::SmallInstance {
                memory: "2Gi".into()
            })
        );
        let big = Quantity::try_from("4Gi").unwrap();
        assert!(!warnings(&Policy::default(), Some(&big))
            .iter()
            .any(|w| matches!(w, Warning::SmallInstance { .. })));
    }

    #[test]
    fn karpenter_labels_warn() {
        let policy = with(|p| {
            p.node.labels.insert(
                LabelKey::try_from("karpenter.sh/capacity-type").unwrap(),
                LabelValue::try_from("spot").unwrap(),
            );
        });
        assert!(
            warnings(&policy, None).contains(&Warning::KarpenterOwnsLabel {
                key: "karpenter.sh/capacity-type".into()
            })
        );
    }

    #[test]
    fn gzip_is_deterministic_and_decodes() {
        let policy = Policy::default();
        let a = render(&policy, Format::Userdata, None, true).unwrap();
        let b = render(&policy, Format::Userdata, None, true).unwrap();
        assert_eq!(a, b);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(a.trim_end())
            .unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text)
            .unwrap();
        assert_eq!(text, user_data_toml(&policy));
        assert!(matches!(
            render(&policy, Format::Ec2nodeclass, None, true),
            Err(RenderError::GzipNodeClass)
        ));
    }

    #[test]
    fn oversized_user_data_needs_gzip() {
        let policy = with(|p| {
            for i in 0..400 {
                p.node.labels.insert(
                    LabelKey::try_from(format!("example.com/label-{i}").as_str()).unwrap(),
                    LabelValue::try_from("a-value-that-takes-some-room").unwrap(),
                );
            }
        });
        let err = render(&policy, Format::Userdata, None, false).unwrap_err();
        assert!(err.to_string().contains("16 KiB"), "{err}");
        assert!(err.to_string().contains("use --gzip"), "{err}");
        assert!(err.to_string().contains("gzip cannot help"), "{err}");
        assert!(render(&policy, Format::Userdata, None, true).is_ok());
        // Over 16 KiB as an EC2NodeClass: the budget error, never --gzip.
        let options = NodeClassOptions::new("demo", None, "gpu", "latest").unwrap();
        let err = render(&policy, Format::Ec2nodeclass, Some(&options), false).unwrap_err();
        assert!(
            matches!(err, RenderError::NodeClassTooLarge { .. }),
            "{err}"
        );
        assert!(!err.to_string().contains("--gzip"), "{err}");
    }

    /// A policy whose user-data is `labels` labels long.
    fn with_labels(labels: usize) -> Policy {
        with(|p| {
            for i in 0..labels {
                p.node.labels.insert(
                    LabelKey::try_from(format!("example.com/label-{i:03}").as_str()).unwrap(),
                    LabelValue::try_from("a-value-that-takes-some-room").unwrap(),
                );
            }
        })
    }

    /// The smallest policy (in labels) whose user-data is over `bytes`.
    fn over(bytes: usize) -> Policy {
        (0..1000)
            .map(with_labels)
            .find(|p| user_data_toml(p).len() > bytes)
            .unwrap()
    }

    #[test]
    fn node_class_user_data_leaves_room_for_karpenters_merge() {
        let options = NodeClassOptions::new("demo", None, "gpu", "latest").unwrap();
        let policy = over(NODECLASS_USER_DATA_BUDGET);
        let size = user_data_toml(&policy).len();
        assert!(size <= USER_DATA_LIMIT, "{size}");
        let err = render(&policy, Format::Ec2nodeclass, Some(&options), false).unwrap_err();
        assert!(
            matches!(err, RenderError::NodeClassTooLarge { size: s, .. } if s == size),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains(&format!("up to {MERGE_RESERVE} bytes")),
            "{text}"
        );
        assert!(
            !text.contains("--gzip"),
            "no --gzip for spec.userData: {text}"
        );
        // As plain user-data it renders, with a warning that says why it would
        // not fit in an EC2NodeClass.
        assert!(render(&policy, Format::Userdata, None, false).is_ok());
        let found = output_warnings(&policy, Format::Userdata);
        assert!(
            found.contains(&Warning::UserDataOverBudget {
                size,
                budget: NODECLASS_USER_DATA_BUDGET
            }),
            "{found:?}"
        );
        assert!(found.iter().all(|w| !w.to_string().contains("--gzip")));

        // Just under the budget: renders, and warns.
        let near = over(NODECLASS_USER_DATA_BUDGET - merge::NEAR_BUDGET_MARGIN);
        let near_size = user_data_toml(&near).len();
        assert!(near_size <= NODECLASS_USER_DATA_BUDGET);
        assert!(render(&near, Format::Ec2nodeclass, Some(&options), false).is_ok());
        for format in [Format::Ec2nodeclass, Format::Userdata] {
            assert!(
                output_warnings(&near, format).contains(&Warning::UserDataNearBudget {
                    size: near_size,
                    budget: NODECLASS_USER_DATA_BUDGET
                })
            );
        }
        assert!(output_warnings(&Policy::default(), Format::Ec2nodeclass).is_empty());
    }

    #[test]
    fn max_pods_in_plain_user_data_warns_that_karpenter_overwrites_it() {
        let policy = with(|p| p.node.max_pods = Some(110));
        let found = output_warnings(&policy, Format::Userdata);
        assert_eq!(found, [Warning::MaxPodsOverwritten { max_pods: 110 }]);
        assert!(found[0].to_string().contains("spec.kubelet.maxPods"));
        assert!(output_warnings(&policy, Format::Ec2nodeclass).is_empty());
        let text = explain(&policy, &found);
        assert!(
            text.contains("settings.kubernetes.max-pods: always written"),
            "{text}"
        );
        assert!(!text.contains("max-pods, kube-reserved"), "{text}");
    }

    #[test]
    fn node_class_flags_are_checked() {
        let flag = |cluster: &str, role: Option<&str>, name: &str| match NodeClassOptions::new(
            cluster, role, name, "latest",
        ) {
            Err(RenderError::Flag { flag, value, rule }) => Some((flag, value, rule)),
            Err(other) => panic!("{other}"),
            Ok(_) => None,
        };
        for ok in ["on", "yes", "n", "1_000", "my-Cluster_1", &"c".repeat(100)] {
            assert_eq!(flag(ok, None, "gpu"), None, "{ok}");
        }
        for bad in ["", "-x", "_x", "a.b", "a b", &"c".repeat(101)] {
            let (name, value, _) = flag(bad, None, "gpu").unwrap();
            assert_eq!((name, value.as_str()), ("--cluster", bad));
        }
        let (name, value, rule) = flag("demo", None, "x86_64-gpu").unwrap();
        assert_eq!((name, value.as_str()), ("--name", "x86_64-gpu"));
        assert!(rule.contains("DNS-1123"), "{rule}");
        assert_eq!(flag("demo", None, &"a".repeat(63)), None);
        let (_, _, rule) = flag("demo", None, &"a".repeat(64)).unwrap();
        assert!(rule.contains("karpenter.k8s.aws/ec2nodeclass"), "{rule}");
        assert_eq!(flag("demo", Some(""), "gpu").unwrap().0, "--role");
        let err = NodeClassOptions::new("demo", None, "Gpu", "latest").unwrap_err();
        assert!(
            err.to_string().starts_with("invalid --name 'Gpu': "),
            "{err}"
        );
    }

    #[test]
    fn node_class_yaml_quotes_what_yaml_1_1_would_misread() {
        let policy = with(|p| {
            p.node.labels.insert(
                LabelKey::try_from("example.com/enabled").unwrap(),
                LabelValue::try_from("true").unwrap(),
            );
            p.node
                .kube_reserved
                .insert(ReservedResource::Cpu, Quantity::try_from("1e3").unwrap());
        });
        for cluster in ["on", "yes", "n", "1_000"] {
            let options = NodeClassOptions::new(cluster, None, "gpu", "latest").unwrap();
            let yaml = render(&policy, Format::Ec2nodeclass, Some(&options), false).unwrap();
            assert!(
                yaml.contains(&format!("karpenter.sh/discovery: \"{cluster}\"\n")),
                "{yaml}"
            );
            assert!(yaml.contains("cpu: \"1e3\"\n"), "{yaml}");
            let parsed: Ec2NodeClass = serde_yaml::from_str(&yaml).unwrap();
            assert_eq!(parsed, node_class(&policy, &options));
        }
    }

    #[test]
    fn ami_aliases() {
        for (input, alias) in [
            ("bottlerocket@latest", "bottlerocket@latest"),
            ("latest", "bottlerocket@latest"),
            ("v1.39.1", "bottlerocket@v1.39.1"),
            ("1.39.1", "bottlerocket@v1.39.1"),
            ("bottlerocket@v1.39.1", "bottlerocket@v1.39.1"),
        ] {
            assert_eq!(normalize_ami_alias(input).unwrap(), alias, "{input}");
        }
        for bad in ["al2023@latest", "v1.39", "bottlerocket@"] {
            assert!(normalize_ami_alias(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn node_class_carries_kubelet_values_and_user_data() {
        let policy = with(|p| p.node.max_pods = Some(29));
        let options = NodeClassOptions::new("demo", None, "gpu", "latest").unwrap();
        let yaml = render(&policy, Format::Ec2nodeclass, Some(&options), false).unwrap();
        let parsed: Ec2NodeClass = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(parsed, node_class(&policy, &options));
        assert_eq!(parsed.spec.role, "KarpenterNodeRole-demo");
        assert_eq!(parsed.spec.kubelet.unwrap().max_pods, Some(29));
        assert_eq!(parsed.spec.user_data, user_data_toml(&policy));
        assert!(yaml.contains("userData: |"), "{yaml}");
    }

    fn image_bundles(image: &str) -> Policy {
        with(|p| {
            p.bootstrap.image = image.to_owned();
            p.dcgm.provision = Provision::IfMissing;
            let sha = crate::bottlerocket::userdata::Sha256Hex::try_from("ab".repeat(32).as_str())
                .unwrap();
            p.dcgm.bundle.aarch64 = Some(crate::policy::Bundle::in_image(sha.clone()));
            p.dcgm.bundle.x86_64 = Some(crate::policy::Bundle::in_image(sha));
        })
    }

    #[test]
    fn image_bundles_want_an_image_pinned_by_digest() {
        let tagged = image_bundles("123456789012.dkr.ecr.us-west-2.amazonaws.com/accelready:0.1.0");
        let found = warnings(&tagged, None);
        let warning = found
            .iter()
            .find(|w| matches!(w, Warning::ImageNotPinned { .. }))
            .expect("a tag warns");
        let text = warning.to_string();
        assert!(
            text.contains("[dcgm.bundle.aarch64] and [dcgm.bundle.x86_64]")
                && text.contains("not pinned by digest")
                && text.contains("@sha256:<64 hex>"),
            "{text}"
        );
        let explained = explain(&tagged, &found);
        assert!(explained.contains("is a tag, not a digest"), "{explained}");

        let digest = format!("sha256:{}", "cd".repeat(32));
        let pinned = image_bundles(&format!(
            "123456789012.dkr.ecr.us-west-2.amazonaws.com/accelready@{digest}"
        ));
        let found = warnings(&pinned, None);
        assert!(!found
            .iter()
            .any(|w| matches!(w, Warning::ImageNotPinned { .. })));
        let explained = explain(&pinned, &found);
        assert!(
            explained.contains(&format!(
                "The image digest now pins DCGM too: bootstrap.image is pinned by {digest}"
            )),
            "{explained}"
        );
        assert!(
            explained.contains("install the bundle that the image carries at /dcgm/abab"),
            "{explained}"
        );
        // Downloads do not care how the image is named.
        let mut download = tagged.clone();
        download.dcgm.bundle.x86_64 = None;
        download.dcgm.bundle.aarch64 = Some(crate::policy::Bundle::from_url(
            "https://mirror/dcgm.deb",
            crate::bottlerocket::userdata::Sha256Hex::try_from("ab".repeat(32).as_str()).unwrap(),
        ));
        assert!(!warnings(&download, None)
            .iter()
            .any(|w| matches!(w, Warning::ImageNotPinned { .. })));
        assert!(!explain(&download, &[]).contains("pins DCGM too"));
    }

    #[test]
    fn explain_mentions_the_taint_snippet() {
        let policy = with(|p| p.repair.on_unready = OnUnready::Taint);
        let text = explain(&policy, &warnings(&policy, None));
        assert!(text.contains("startupTaints:"), "{text}");
        assert!(text.contains("key: accelready.io/dcgm-unready"), "{text}");
        assert!(text.contains("about 11 minutes"), "{text}");
    }
}
