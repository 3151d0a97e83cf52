//! The policy document (`accelready.toml`): the single source of truth that
//! `render` reads off-node and `boot` reads on the node (from the bootstrap
//! container's user-data). Every key is documented in `userdata/README.md`;
//! the built-in default is `userdata/default.toml`.
//!
//! Parsing is strict: kebab-case keys, unknown keys rejected with their name
//! and line (toml's error carries it), values checked by the newtypes of
//! [`crate::bottlerocket::userdata`], then cross-key rules in
//! [`Policy::validate`].

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::arch::Arch;
use crate::bottlerocket::userdata::{
    BootstrapContainerName, EvictionSignal, EvictionThreshold, HostContainerName, LabelKey,
    LabelValue, NvidiaDevicePlugin, Quantity, ReservedResource, Sha256Hex, Taint,
};
use crate::input::{self, InputError, Limit};
use crate::repair::agent::{self, AgentModel};

/// The built-in policy, used when no policy file is given.
pub const DEFAULT_POLICY: &str = include_str!("../userdata/default.toml");

/// The image the built-in policy names: obviously not ours to pull, so that
/// `render` warns (and `--strict` refuses) until it is replaced.
pub const PLACEHOLDER_IMAGE: &str = "ACCOUNT.dkr.ecr.REGION.amazonaws.com/accelready:0.1.0";

/// The most a policy file may hold. Policies are small by nature (the
/// bootstrap container's user-data embeds one, and EC2 caps user-data at
/// 16 KiB); the cap keeps `/dev/zero` or a runaway file from being read.
pub const MAX_POLICY_BYTES: Limit = Limit::new(1 << 20, "for a policy file");

/// Why a policy was rejected.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// Missing, unreadable, not a regular file, or over [`MAX_POLICY_BYTES`].
    #[error("cannot read policy file '{path}'")]
    Read {
        path: PathBuf,
        #[source]
        source: InputError,
    },
    /// Syntax, unknown key, wrong type or a value a newtype rejected; toml's
    /// message names the line, the column and the key.
    #[error("invalid policy {origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("invalid policy {origin}: {key} = {value:?}: {rule}")]
    Rule {
        origin: String,
        key: &'static str,
        value: String,
        rule: String,
    },
}

/// The whole policy. Every section and key is optional; omitted ones take the
/// values of `userdata/default.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Policy {
    pub bootstrap: Bootstrap,
    pub driver: Driver,
    pub dcgm: Dcgm,
    pub repair: Repair,
    pub boot: Boot,
    pub hostengine: Hostengine,
    pub agent: Agent,
    pub node: Node,
}

/// `[bootstrap]`: the bootstrap container that runs `accelready boot`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Bootstrap {
    pub name: BootstrapContainerName,
    pub image: String,
    /// A non-zero exit stops the boot (kubelet never starts).
    pub essential: bool,
}

/// `[driver]`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Driver {
    /// A host without the NVIDIA driver is not ready.
    pub require: bool,
}

/// `[dcgm]`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Dcgm {
    /// A host without a loadable DCGM is not ready.
    pub require: bool,
    pub provision: Provision,
    /// Where bundles are installed on the host; absolute, under `/var`.
    pub install_dir: PathBuf,
    /// Where the installed DCGM is bind-mounted for other pods; under `/mnt`.
    pub expose_at: PathBuf,
    /// Also install `nv-hostengine` and `dcgmi` (into `bin/`) on every
    /// architecture. They are installed anyway where `[hostengine]` wants an
    /// engine ([`Policy::keeps_hostengine`]).
    pub with_hostengine: bool,
    /// Accept `http://` bundle URLs (the sha256 still protects the content).
    pub allow_insecure_http: bool,
    /// Extra CA certificates (PEM) for private mirrors, as a host path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<PathBuf>,
    #[serde(skip_serializing_if = "Bundles::is_empty")]
    pub bundle: Bundles,
}

impl Bundles {
    pub fn is_empty(&self) -> bool {
        self.aarch64.is_none() && self.x86_64.is_none()
    }
}

impl Policy {
    /// Whether bundles for `arch` keep `nv-hostengine` and `dcgmi`:
    /// `dcgm.with-hostengine`, or `[hostengine]` wants an engine on `arch`
    /// (which runs the engine from the installed bundle).
    pub fn keeps_hostengine(&self, arch: Arch) -> bool {
        self.dcgm.with_hostengine || self.hostengine.wanted_on(arch)
    }

    /// The engine a node of `arch` gets under this policy (with the chart
    /// values of `--format agent-values` applied: the chart's `dcgm-server`
    /// stays off the nodes accelready's engine serves).
    pub fn engine_for(&self, arch: Arch) -> EngineSource {
        let dcgm = &self.dcgm;
        if self.hostengine.wanted_on(arch) {
            if dcgm.provision == Provision::Never || dcgm.bundle_for(arch).is_none() {
                EngineSource::Missing(format!(
                    "[hostengine] would run accelready's engine there, but it has no DCGM to run: Bottlerocket ships none, and the policy installs none on {arch} (dcgm.provision = \"{}\"{})",
                    if dcgm.provision == Provision::Never { "never" } else { "if-missing" },
                    if dcgm.bundle_for(arch).is_none() {
                        format!(", no [dcgm.bundle.{arch}]")
                    } else {
                        String::new()
                    }
                ))
            } else {
                // nv-hostengine comes with the bundle wherever [hostengine]
                // wants an engine (Policy::keeps_hostengine).
                EngineSource::Accelready
            }
        } else if arch == Arch::X86_64 {
            EngineSource::Chart
        } else {
            EngineSource::Missing(format!(
                "the agent chart's dcgm-server never runs on arm64, and [hostengine] runs no engine on {arch} (run = \"never\", or {arch} not in architectures)"
            ))
        }
    }
}

/// Where a GPU node of some architecture gets its DCGM host engine from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineSource {
    /// `accelready hostengine`, from the bundle `boot` installs.
    Accelready,
    /// The agent chart's `dcgm-server` (amd64 only, FACTS §7.4).
    Chart,
    /// None, and why.
    Missing(String),
}

impl Dcgm {
    /// The pinned bundle for an architecture, if the policy has one.
    pub fn bundle_for(&self, arch: Arch) -> Option<&Bundle> {
        match arch {
            Arch::Aarch64 => self.bundle.aarch64.as_ref(),
            Arch::X86_64 => self.bundle.x86_64.as_ref(),
        }
    }
}

/// Whether `boot` may install DCGM when the host has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Provision {
    Never,
    IfMissing,
}

/// `[dcgm.bundle.aarch64]` / `[dcgm.bundle.x86_64]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundles {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aarch64: Option<Bundle>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x86_64: Option<Bundle>,
}

/// A pinned DCGM bundle: where it comes from and the digest the bundle file
/// must have. Either `url` (downloaded; the format, `.deb`, `.tar.gz`, ...,
/// follows from the bytes) or `source = "image"` (unpacked at image build
/// time into the accelready image itself, under
/// [`crate::bundle::image::IMAGE_BUNDLE_DIR`]); never both. `sha256` is the
/// digest of the original bundle file either way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Omitted (or `"url"`) for a download; `"image"` for the bundle the
    /// image carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<BundleSource>,
    pub sha256: Sha256Hex,
}

/// `[dcgm.bundle.<arch>] source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BundleSource {
    Url,
    Image,
}

/// Where a validated [`Bundle`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BundleOrigin<'a> {
    Url(&'a str),
    /// The bundle `bootstrap/build --bundle` laid out inside the image.
    Image,
}

impl Bundle {
    /// A bundle downloaded from `url`.
    pub fn from_url(url: &str, sha256: Sha256Hex) -> Bundle {
        Bundle {
            url: Some(url.to_owned()),
            source: None,
            sha256,
        }
    }

    /// The bundle the image carries.
    pub fn in_image(sha256: Sha256Hex) -> Bundle {
        Bundle {
            url: None,
            source: Some(BundleSource::Image),
            sha256,
        }
    }

    /// Where the bundle comes from; `None` only for a bundle that
    /// [`Policy::validate`] rejects (neither, or both).
    pub fn origin(&self) -> Option<BundleOrigin<'_>> {
        match (&self.url, self.source) {
            (Some(url), None | Some(BundleSource::Url)) => Some(BundleOrigin::Url(url)),
            (None, Some(BundleSource::Image)) => Some(BundleOrigin::Image),
            _ => None,
        }
    }
}

/// `[repair]`: what Karpenter will do, and what `boot` does about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Repair {
    /// The Karpenter version the cluster runs, e.g. `1.4.0`.
    pub karpenter: String,
    /// Whether Karpenter's `NodeRepair` feature gate is on.
    pub node_repair: bool,
    pub on_unready: OnUnready,
    /// The taint `boot` applies through the Bottlerocket API when
    /// `on-unready = "taint"` (`key=value:Effect`).
    pub taint: Taint,
}

/// What `boot` does when the node is not ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnUnready {
    /// Label the node and let it join.
    Label,
    /// Label and taint the node (through the API, before kubelet starts).
    Taint,
    /// Exit non-zero; with `essential = true` the node never joins.
    FailBoot,
}

/// `[boot]`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Boot {
    /// Overall deadline of `accelready boot`, written `deadline-seconds`.
    #[serde(rename = "deadline-seconds", with = "seconds")]
    pub deadline: Duration,
}

/// `[hostengine]`: the DCGM host engine (`nv-hostengine` on
/// 127.0.0.1:`port`) that `accelready hostengine` runs and guards as a
/// superpowered Bottlerocket host container, on the nodes that need one
/// (FACTS §7: the monitoring agent needs an engine, and on arm64 the agent
/// chart's `dcgm-server` never runs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Hostengine {
    pub run: RunEngine,
    /// With `run = "auto"`: the architectures that get an engine.
    pub architectures: Vec<Arch>,
    /// `settings.host-containers.<name>`.
    pub name: HostContainerName,
    /// The TCP port the engine binds on 127.0.0.1 (never on all addresses:
    /// the DCGM API is unauthenticated).
    pub port: u16,
}

/// Whether a node runs accelready's DCGM host engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunEngine {
    /// On the architectures in `hostengine.architectures`.
    Auto,
    /// On every node.
    Always,
    /// Never: no host container is rendered.
    Never,
}

impl RunEngine {
    /// The value as the policy spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            RunEngine::Auto => "auto",
            RunEngine::Always => "always",
            RunEngine::Never => "never",
        }
    }
}

impl Hostengine {
    /// Whether a node of `arch` gets accelready's engine (when no other
    /// engine already serves it).
    pub fn wanted_on(&self, arch: Arch) -> bool {
        match self.run {
            RunEngine::Always => true,
            RunEngine::Never => false,
            RunEngine::Auto => self.architectures.contains(&arch),
        }
    }

    /// The architectures that get an engine.
    pub fn wanted_architectures(&self) -> Vec<Arch> {
        Arch::ALL
            .into_iter()
            .filter(|&arch| self.wanted_on(arch))
            .collect()
    }
}

/// `[agent]`: the EKS node monitoring agent the cluster runs, which decides
/// what heals a node (FACTS §7.3–7.4, [`crate::repair::agent::AGENTS`]):
/// `render` warns and explains for it, and `--format agent-values` writes
/// values for its chart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Agent {
    /// The agent's release, e.g. `1.7.2` (or `v1.7.2`, or its image tag
    /// `v1.7.2-eksbuild.1`); default: the newest modelled.
    pub version: String,
}

impl Agent {
    /// The modelled behaviour of this release (the policy is validated, so
    /// the release is modelled).
    pub fn model(&self) -> &'static AgentModel {
        agent::parse_version(&self.version)
            .and_then(agent::agent_for)
            .expect("a validated policy names a modelled agent release")
    }
}

/// `[node]`: settings written to `settings.kubernetes` and
/// `settings.kubelet-device-plugins.nvidia`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Node {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<u32>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<LabelKey, LabelValue>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<ReservedResource, Quantity>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<ReservedResource, Quantity>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_hard: BTreeMap<EvictionSignal, EvictionThreshold>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvidia_device_plugin: Option<NvidiaDevicePlugin>,
}

mod seconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(value.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_secs)
    }
}

impl Default for Bootstrap {
    fn default() -> Self {
        Bootstrap {
            name: BootstrapContainerName::try_from("accelready").expect("valid literal"),
            image: PLACEHOLDER_IMAGE.to_owned(),
            essential: false,
        }
    }
}

impl Default for Driver {
    fn default() -> Self {
        Driver { require: true }
    }
}

impl Default for Dcgm {
    fn default() -> Self {
        Dcgm {
            require: true,
            provision: Provision::Never,
            install_dir: PathBuf::from("/var/lib/accelready/dcgm"),
            expose_at: PathBuf::from("/mnt/accelready/dcgm"),
            with_hostengine: false,
            allow_insecure_http: false,
            ca_bundle: None,
            bundle: Bundles::default(),
        }
    }
}

impl Default for Repair {
    fn default() -> Self {
        Repair {
            karpenter: "1.4.0".to_owned(),
            node_repair: true,
            on_unready: OnUnready::Label,
            taint: Taint::try_from("accelready.io/dcgm-unready:NoSchedule").expect("valid literal"),
        }
    }
}

impl Default for Hostengine {
    fn default() -> Self {
        Hostengine {
            run: RunEngine::Auto,
            architectures: vec![Arch::Aarch64],
            name: HostContainerName::try_from("accelready-hostengine").expect("valid literal"),
            port: 5555,
        }
    }
}

impl Default for Agent {
    fn default() -> Self {
        let newest = agent::newest().to_string();
        Agent {
            version: newest.trim_start_matches('v').to_owned(),
        }
    }
}

impl Default for Boot {
    fn default() -> Self {
        Boot {
            deadline: Duration::from_secs(120),
        }
    }
}

impl Default for Policy {
    /// The same values as `userdata/default.toml` (a test holds them equal).
    fn default() -> Self {
        Policy {
            bootstrap: Bootstrap::default(),
            driver: Driver::default(),
            dcgm: Dcgm::default(),
            repair: Repair::default(),
            boot: Boot::default(),
            hostengine: Hostengine::default(),
            agent: Agent::default(),
            node: Node::default(),
        }
    }
}

impl Policy {
    /// The built-in policy (`userdata/default.toml`).
    pub fn builtin() -> Policy {
        Policy::parse_named(DEFAULT_POLICY, "built-in default")
            .expect("the built-in policy is valid")
    }

    /// Reads and validates a policy file: a regular file of at most
    /// [`MAX_POLICY_BYTES`] (a FIFO, a device or a directory is refused
    /// before anything is read).
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = input::read_regular_to_string(path, MAX_POLICY_BYTES).map_err(|source| {
            PolicyError::Read {
                path: path.to_owned(),
                source,
            }
        })?;
        Policy::parse_named(&text, &format!("'{}'", path.display()))
    }

    /// Parses and validates a policy document (e.g. the decoded user-data).
    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        Policy::parse_named(text, "document")
    }

    /// [`Policy::parse`], with `origin` naming the document in errors (a file
    /// name, "user-data", ...).
    pub fn parse_named(text: &str, origin: &str) -> Result<Policy, PolicyError> {
        let policy: Policy = toml::from_str(text).map_err(|e| PolicyError::Parse {
            origin: origin.to_owned(),
            message: one_line(&e.to_string()),
        })?;
        policy.validate().map_err(|rule| PolicyError::Rule {
            origin: origin.to_owned(),
            key: rule.key,
            value: rule.value,
            rule: rule.rule,
        })?;
        Ok(policy)
    }

    /// The canonical TOML form: every key explicit, deterministic order. This
    /// is what the bootstrap container receives as user-data.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a policy always serializes to TOML")
    }

    /// Rules that span keys or that serde cannot express.
    pub fn validate(&self) -> Result<(), RuleViolation> {
        let image = &self.bootstrap.image;
        if image.is_empty() || image.contains(char::is_whitespace) {
            return Err(violation(
                "bootstrap.image",
                image,
                "must be a non-empty image reference without spaces",
            ));
        }
        check_version(&self.repair.karpenter)
            .map_err(|rule| violation("repair.karpenter", &self.repair.karpenter, rule))?;
        agent::parse_version(&self.agent.version)
            .and_then(agent::agent_for)
            .map_err(|e| violation("agent.version", &self.agent.version, e.to_string()))?;
        check_host_path(&self.dcgm.install_dir, Some("/var")).map_err(|rule| {
            violation("dcgm.install-dir", &self.dcgm.install_dir.display(), rule)
        })?;
        check_host_path(&self.dcgm.expose_at, Some("/mnt"))
            .map_err(|rule| violation("dcgm.expose-at", &self.dcgm.expose_at.display(), rule))?;
        if let Some(ca) = &self.dcgm.ca_bundle {
            check_host_path(ca, None)
                .map_err(|rule| violation("dcgm.ca-bundle", &ca.display(), rule))?;
        }
        check_image_reference(image).map_err(|rule| violation("bootstrap.image", image, rule))?;
        for (url_key, source_key, bundle) in [
            (
                "dcgm.bundle.aarch64.url",
                "dcgm.bundle.aarch64.source",
                &self.dcgm.bundle.aarch64,
            ),
            (
                "dcgm.bundle.x86_64.url",
                "dcgm.bundle.x86_64.source",
                &self.dcgm.bundle.x86_64,
            ),
        ] {
            let Some(bundle) = bundle else { continue };
            match (&bundle.url, bundle.source) {
                (Some(_), Some(BundleSource::Image)) => {
                    return Err(violation(
                        source_key,
                        &"image",
                        format!("takes no url ({url_key} is set too): the bundle travels inside bootstrap.image and the sha256 pins it; remove the url, or remove source to download it"),
                    ))
                }
                (Some(url), _) => check_url(url, self.dcgm.allow_insecure_http)
                    .map_err(|rule| violation(url_key, url, rule))?,
                (None, Some(BundleSource::Image)) => {}
                (None, _) => {
                    return Err(violation(
                        url_key,
                        &"",
                        format!("is required, or set {source_key} = \"image\" to install the bundle that bootstrap.image carries (bootstrap/build --bundle)"),
                    ))
                }
            }
        }
        if self.dcgm.provision == Provision::IfMissing && self.dcgm.bundle.is_empty() {
            return Err(violation(
                "dcgm.provision",
                &"if-missing",
                "needs at least one [dcgm.bundle.aarch64] or [dcgm.bundle.x86_64] with sha256 and url (or source = \"image\")",
            ));
        }
        let fail_boot = self.repair.on_unready == OnUnready::FailBoot;
        if fail_boot && !self.bootstrap.essential {
            return Err(violation(
                "repair.on-unready",
                &"fail-boot",
                "requires bootstrap.essential = true (a non-essential container's failure is ignored and the node joins anyway)",
            ));
        }
        if self.bootstrap.essential && !fail_boot {
            return Err(violation(
                "bootstrap.essential",
                &"true",
                "requires repair.on-unready = \"fail-boot\" (an essential bootstrap container that fails stops the boot; with 'label' or 'taint' accelready must never fail the boot)",
            ));
        }
        let secs = self.boot.deadline.as_secs();
        if !(1..=900).contains(&secs) {
            return Err(violation(
                "boot.deadline-seconds",
                &secs,
                "must be between 1 and 900 (a bootstrap container that hangs hangs the boot)",
            ));
        }
        if self.hostengine.port == 0 {
            return Err(violation(
                "hostengine.port",
                &0,
                "must be between 1 and 65535",
            ));
        }
        let mut seen = Vec::new();
        for arch in &self.hostengine.architectures {
            if seen.contains(arch) {
                return Err(violation(
                    "hostengine.architectures",
                    arch,
                    "is listed twice",
                ));
            }
            seen.push(*arch);
        }
        if self.node.max_pods == Some(0) {
            return Err(violation("node.max-pods", &0, "must be at least 1"));
        }
        if let Some(max_pods) = self.node.max_pods.filter(|&n| i32::try_from(n).is_err()) {
            return Err(violation(
                "node.max-pods",
                &max_pods,
                "must be at most 2147483647: EC2NodeClass spec.kubelet.maxPods is an int32",
            ));
        }
        if let Some(key) = self.node.labels.keys().find(|key| key.kubelet_refuses()) {
            return Err(violation(
                "node.labels",
                key,
                "kubelet refuses to set labels in the kubernetes.io and k8s.io namespaces (except kubelet.kubernetes.io, node.kubernetes.io and the well-known ones) and would not start",
            ));
        }
        Ok(())
    }
}

/// A cross-key rule that the policy breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleViolation {
    pub key: &'static str,
    pub value: String,
    pub rule: String,
}

fn violation(
    key: &'static str,
    value: &dyn std::fmt::Display,
    rule: impl Into<String>,
) -> RuleViolation {
    RuleViolation {
        key,
        value: value.to_string(),
        rule: rule.into(),
    }
}

/// toml's messages span several lines (position, source excerpt, caret,
/// message); keep the position, the offending source line (which names the
/// key) and the message on one line for the error chain.
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    let excerpt = lines.iter().find_map(|line| {
        let (number, text) = line.split_once(" | ")?;
        number
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then_some(text.trim())
    });
    match (lines.first(), lines.last(), excerpt) {
        (Some(first), Some(last), Some(excerpt)) => format!("{first}: `{excerpt}`: {last}"),
        (Some(first), Some(last), None) if lines.len() > 1 => format!("{first}: {last}"),
        _ => lines.join(" "),
    }
}

/// `1.4.0` or `v1.4.0`.
fn check_version(version: &str) -> Result<(), String> {
    let digits = version.strip_prefix('v').unwrap_or(version);
    let parts: Vec<&str> = digits.split('.').collect();
    let numeric = |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if (2..=3).contains(&parts.len()) && parts.iter().all(numeric) {
        Ok(())
    } else {
        Err("expected a version such as 1.4.0".to_owned())
    }
}

/// An absolute, normalized host path (no `.`, `..`, `//` or trailing `/`),
/// strictly below `under` when given.
pub fn check_host_path(path: &Path, under: Option<&str>) -> Result<(), String> {
    let text = path.to_string_lossy();
    if !path.is_absolute() {
        return Err("must be an absolute path".to_owned());
    }
    let normalized = path
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !normalized || text.contains("//") || (text.len() > 1 && text.ends_with('/')) {
        return Err("must be normalized (no '.', '..', '//' or trailing '/')".to_owned());
    }
    if let Some(root) = under {
        if !path.starts_with(root) || path == Path::new(root) {
            return Err(format!("must be below {root} (the writable, persistent part of a Bottlerocket host that this path needs)"));
        }
    }
    Ok(())
}

/// The digest an image reference is pinned by (`...@sha256:<64 hex>`), if any.
/// Only meaningful for a reference [`check_image_reference`] accepts.
pub fn image_digest(reference: &str) -> Option<&str> {
    reference
        .split_once('@')
        .map(|(_, digest)| digest)
        .filter(|digest| check_digest(digest).is_ok())
}

/// An image reference as `bootstrap.image` takes it: `name[:tag][@digest]`,
/// non-empty and without spaces; a digest, when given, must be one a
/// registry can serve: `sha256:<64 lowercase hex>` or `sha512:<128>`.
pub fn check_image_reference(reference: &str) -> Result<(), String> {
    let (name, digest) = match reference.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (reference, None),
    };
    if name.is_empty() || name.ends_with(':') || name.ends_with('/') {
        return Err("must name an image before its tag or digest (registry/repository[:tag][@sha256:<64 hex>])".to_owned());
    }
    match digest {
        Some(digest) => check_digest(digest),
        None => Ok(()),
    }
}

fn check_digest(digest: &str) -> Result<(), String> {
    let expected = match digest.split_once(':') {
        Some(("sha256", hex)) => Some((hex, 64)),
        Some(("sha512", hex)) => Some((hex, 128)),
        _ => None,
    };
    match expected {
        Some((hex, len))
            if hex.len() == len && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "digest '{digest}' must be sha256:<64 lowercase hex digits> (or sha512:<128>)"
        )),
    }
}

/// `https://host/...`, or `http://` when explicitly allowed.
fn check_url(url: &str, allow_http: bool) -> Result<(), String> {
    let rest = if let Some(rest) = url.strip_prefix("https://") {
        rest
    } else if let Some(rest) = url.strip_prefix("http://") {
        if !allow_http {
            return Err(
                "plain http:// needs dcgm.allow-insecure-http = true; use https://".to_owned(),
            );
        }
        rest
    } else {
        return Err("must start with https://".to_owned());
    };
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || url.contains(char::is_whitespace) {
        return Err("must name a host and contain no spaces".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Policy, PolicyError> {
        Policy::parse(text)
    }

    fn error(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn builtin_is_the_default_and_an_empty_file_too() {
        assert_eq!(Policy::builtin(), Policy::default());
        assert_eq!(parse("").unwrap(), Policy::default());
    }

    #[test]
    fn canonical_toml_round_trips() {
        let mut policy = Policy::default();
        policy.dcgm.bundle.aarch64 = Some(Bundle::from_url(
            "https://example.com/dcgm.deb",
            Sha256Hex::try_from("ab".repeat(32).as_str()).unwrap(),
        ));
        policy.dcgm.provision = Provision::IfMissing;
        policy.node.max_pods = Some(29);
        policy
            .node
            .kube_reserved
            .insert(ReservedResource::Memory, Quantity::try_from("1Gi").unwrap());
        let text = policy.to_toml();
        assert_eq!(parse(&text).unwrap(), policy, "{text}");
        assert!(text.contains("deadline-seconds = 120"), "{text}");
    }

    #[test]
    fn unknown_keys_are_named_with_their_line() {
        let message = error("[dcgm]\nrequire = true\nprovison = \"never\"\n");
        assert!(message.contains("provison"), "{message}");
        assert!(message.contains("line 3"), "{message}");
    }

    #[test]
    fn newtype_errors_carry_the_line() {
        let message = error("[node]\nmax-pods = 10\n[node.labels]\n\"Bad Key\" = \"x\"\n");
        assert!(message.contains("line 4"), "{message}");
        assert!(message.contains("label key"), "{message}");
        let message = error("[node.eviction-hard]\n\"memory.free\" = \"1Gi\"\n");
        assert!(message.contains("memory.free"), "{message}");
    }

    #[test]
    fn cross_key_rules() {
        let cases = [
            ("[dcgm]\ninstall-dir = \"/opt/dcgm\"", "dcgm.install-dir"),
            ("[dcgm]\ninstall-dir = \"/var/lib/../x\"", "normalized"),
            ("[dcgm]\nexpose-at = \"mnt/x\"", "absolute"),
            ("[dcgm]\nexpose-at = \"/mnt\"", "below /mnt"),
            ("[dcgm]\nprovision = \"if-missing\"", "needs at least one"),
            ("[repair]\non-unready = \"fail-boot\"", "requires bootstrap.essential"),
            ("[bootstrap]\nessential = true", "requires repair.on-unready"),
            ("[repair]\nkarpenter = \"latest\"", "repair.karpenter"),
            ("[boot]\ndeadline-seconds = 0", "boot.deadline-seconds"),
            ("[hostengine]\nport = 0", "hostengine.port"),
            ("[agent]\nversion = \"1.8.0\"", "agent.version = \"1.8.0\": EKS node monitoring agent v1.8.0 is not modelled; known: v1.0.0"),
            ("[agent]\nversion = \"latest\"", "invalid EKS node monitoring agent version 'latest'"),
            (
                "[hostengine]\narchitectures = [\"aarch64\", \"aarch64\"]",
                "listed twice",
            ),
            ("[node.labels]\n\"kubernetes.io/role\" = \"gpu\"", "kubelet refuses"),
            (
                "[dcgm.bundle.x86_64]\nurl = \"http://mirror/dcgm.deb\"\nsha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"",
                "allow-insecure-http",
            ),
            (
                "[dcgm.bundle.aarch64]\nsource = \"image\"\nurl = \"https://mirror/dcgm.deb\"\nsha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"",
                "dcgm.bundle.aarch64.source = \"image\": takes no url",
            ),
            (
                "[dcgm.bundle.x86_64]\nsha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"",
                "dcgm.bundle.x86_64.url = \"\": is required, or set dcgm.bundle.x86_64.source = \"image\"",
            ),
            (
                "[dcgm.bundle.x86_64]\nsource = \"url\"\nsha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"",
                "dcgm.bundle.x86_64.url",
            ),
            (
                "[dcgm.bundle.x86_64]\nsource = \"registry\"\nsha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"",
                "registry",
            ),
            ("[bootstrap]\nimage = \"repo@sha256:abc\"", "bootstrap.image"),
            ("[bootstrap]\nimage = \"@sha256:abc\"", "must name an image"),
        ];
        for (text, expected) in cases {
            let message = error(text);
            assert!(message.contains(expected), "{text}\n=> {message}");
        }
    }

    #[test]
    fn hostengine_runs_where_the_policy_says() {
        let policy = Policy::default();
        assert!(policy.hostengine.wanted_on(Arch::Aarch64));
        assert!(!policy.hostengine.wanted_on(Arch::X86_64));
        let always = parse("[hostengine]\nrun = \"always\"").unwrap();
        assert_eq!(always.hostengine.wanted_architectures(), Arch::ALL.to_vec());
        let never = parse("[hostengine]\nrun = \"never\"").unwrap();
        assert!(never.hostengine.wanted_architectures().is_empty());
        let both = parse("[hostengine]\narchitectures = [\"x86_64\", \"aarch64\"]").unwrap();
        assert!(both.hostengine.wanted_on(Arch::X86_64));
        assert!(both.hostengine.wanted_on(Arch::Aarch64));
        assert!(error("[hostengine]\nname = \"a_b\"").contains("host container name"));
        assert!(error("[hostengine]\nrun = \"sometimes\"").contains("sometimes"));
    }

    #[test]
    fn the_agent_defaults_to_the_newest_modelled_release() {
        let policy = Policy::default();
        assert_eq!(policy.agent.version, "1.7.2");
        assert!(policy.agent.model().monitors_arm64);
        for text in ["1.2.0", "v1.2.0", "v1.2.0-eksbuild.1"] {
            let old = parse(&format!("[agent]\nversion = \"{text}\"")).unwrap();
            assert_eq!(old.agent.version, text);
            assert_eq!(
                old.agent.model().client,
                crate::repair::agent::DcgmClient::Dcgm3
            );
        }
    }

    #[test]
    fn image_bundles_parse_and_round_trip() {
        let sha = "ab".repeat(32);
        let text = format!("[dcgm]\nprovision = \"if-missing\"\n[dcgm.bundle.aarch64]\nsource = \"image\"\nsha256 = \"{sha}\"\n[dcgm.bundle.x86_64]\nurl = \"https://mirror/dcgm.deb\"\nsha256 = \"{sha}\"\n");
        let policy = parse(&text).unwrap();
        let aarch64 = policy.dcgm.bundle_for(Arch::Aarch64).unwrap();
        assert_eq!(aarch64.origin(), Some(BundleOrigin::Image));
        assert_eq!(
            aarch64,
            &Bundle::in_image(Sha256Hex::try_from(sha.as_str()).unwrap())
        );
        let x86_64 = policy.dcgm.bundle_for(Arch::X86_64).unwrap();
        assert_eq!(
            x86_64.origin(),
            Some(BundleOrigin::Url("https://mirror/dcgm.deb"))
        );
        let canonical = policy.to_toml();
        assert_eq!(parse(&canonical).unwrap(), policy);
        // A URL bundle's canonical form is what it was before `source` existed.
        assert!(!canonical.contains("source = \"url\""), "{canonical}");
        assert!(canonical.contains("source = \"image\""), "{canonical}");
    }

    #[test]
    fn image_references_and_their_digests() {
        let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
        for (reference, pinned) in [
            (
                "123456789012.dkr.ecr.us-west-2.amazonaws.com/accelready:0.1.0",
                None,
            ),
            ("localhost:5000/accelready", None),
            (
                &*format!("123456789012.dkr.ecr.us-west-2.amazonaws.com/accelready@{digest}"),
                Some(digest.as_str()),
            ),
            (
                &*format!("registry.example/team/accelready:0.1.0-dcgm4.6.1@{digest}"),
                Some(digest.as_str()),
            ),
        ] {
            assert_eq!(check_image_reference(reference), Ok(()), "{reference}");
            assert_eq!(image_digest(reference), pinned, "{reference}");
        }
        let sha512 = format!("repo@sha512:{}", "a".repeat(128));
        assert!(check_image_reference(&sha512).is_ok());
        for bad_digest in [
            "repo@sha256:abcdef".to_owned(),
            format!("repo@sha256:{}", "A".repeat(64)),
            format!("repo@md5:{}", "a".repeat(32)),
            "repo@".to_owned(),
        ] {
            let rule = check_image_reference(&bad_digest).unwrap_err();
            assert!(rule.contains("must be sha256:<64"), "{bad_digest}: {rule}");
            assert_eq!(image_digest(&bad_digest), None, "{bad_digest}");
        }
        for bad_name in [
            format!("@{digest}"),
            format!("repo:@{digest}"),
            String::new(),
        ] {
            let rule = check_image_reference(&bad_name).unwrap_err();
            assert!(rule.contains("must name an image"), "{bad_name}: {rule}");
        }
    }

    #[test]
    fn insecure_http_when_allowed() {
        let text = "[dcgm]\nallow-insecure-http = true\n[dcgm.bundle.x86_64]\nurl = \"http://mirror/dcgm.deb\"\nsha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"";
        let policy = parse(text).unwrap();
        assert!(policy.dcgm.bundle_for(Arch::X86_64).is_some());
        assert!(policy.dcgm.bundle_for(Arch::Aarch64).is_none());
    }
}
