//! What the EKS node monitoring agent does, per agent version, as data: the
//! agent sets `AcceleratedHardwareReady`, Karpenter ([`super::model`]) acts on
//! it, and what heals a node depends on which agent runs there (FACTS §7.3,
//! §7.4).
//!
//! [`AGENTS`] is the one table a maintainer updates when the agent changes.
//! Every release in it is a standalone DCGM client: it connects to an
//! `nv-hostengine` at `DCGM_ADDRESS` (default `localhost:5555`) on every node
//! it monitors, and suppresses errors for a grace period after start
//! (`DCGM_GRACE_PERIOD_DURATION`, default 1 minute).
//!
//! Sources, per row below: aws/eks-node-monitoring-agent `CHANGELOG.md`
//! (v1.6.0 … v1.7.2), `monitors/nvidia/monitor.go` (the arm64 gate and the
//! grace period), `monitors/nvidia/dcgm/dcgm_client.go` (`Init(Standalone,
//! DCGM_ADDRESS)`), `Dockerfile` (`datacenter-gpu-manager-4-core`'s
//! `libdcgm.so*` in the image), the chart's `values.yaml` and `README.md`
//! (tags v1.2.0-eksbuild.1, v1.7.0-eksbuild.1, v1.7.2-eksbuild.1), PRs #205,
//! #210 and #269; NVIDIA/go-dcgm `pkg/dcgm/admin.go`.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::kube::DaemonSet;
use super::model::Version;

/// Which DCGM client the agent is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DcgmClient {
    /// go-dcgm <= v3.3.9: `dlopen("libdcgm.so")`, error text
    /// `libdcgm.so not Found` (capital F), `dlerror()` dropped (FACTS §1.3).
    /// DCGM 4 retired the struct versions it uses: no DCGM 4 library or
    /// engine heals it (FACTS §7.3).
    #[serde(rename = "dcgm-3")]
    Dcgm3,
    /// go-dcgm for DCGM 4: `dlopen("libdcgm.so.4")`.
    #[serde(rename = "dcgm-4")]
    Dcgm4,
}

impl DcgmClient {
    /// The name the client `dlopen`s.
    pub fn library(self) -> &'static str {
        match self {
            DcgmClient::Dcgm3 => "libdcgm.so",
            DcgmClient::Dcgm4 => "libdcgm.so.4",
        }
    }
}

/// Where the client's `libdcgm` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LibrarySource {
    /// Looked up in the agent container's own loader path, which holds no
    /// usable `libdcgm.so` (the incident); nothing on the host reaches it.
    ImageWithoutIt,
    /// The agent image ships `libdcgm.so.4` (NVIDIA's
    /// `datacenter-gpu-manager-4-core`, copied in by its Dockerfile).
    OwnImage,
}

/// Where the chart's `dcgm-server` DaemonSet (`nv-hostengine -n -b ALL`,
/// hostPort 5555) gets `nv-hostengine` from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EngineImage {
    /// `eks/observability/dcgm-exporter` (3.3.7 in the v1.2.0 chart, 4.5.2
    /// from v1.5.2).
    DcgmExporter,
    /// The agent image itself, DCGM 4.6.1 (PR #210, released in v1.7.0).
    AgentImage,
}

/// Helm values of the agent's chart that accelready's answers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ChartValues {
    /// `dcgmAgent.affinity`: where `dcgm-server` runs (default: NVIDIA
    /// instance types, `kubernetes.io/arch In [amd64]`). In every modelled
    /// chart.
    pub dcgm_agent_affinity: bool,
    /// `dcgmAgent.enabled` (deploy `dcgm-server` at all), `nodeAgent.dcgmAddress`
    /// (the agent's `DCGM_ADDRESS`) and `nodeAgent.dnsPolicy`: PR #205,
    /// released in v1.7.1.
    pub dcgm_agent_enabled_and_address: bool,
}

impl ChartValues {
    /// The value paths, for people.
    pub fn names(self) -> Vec<&'static str> {
        let mut names = vec!["dcgmAgent.affinity"];
        if self.dcgm_agent_enabled_and_address {
            names.extend([
                "dcgmAgent.enabled",
                "nodeAgent.dcgmAddress",
                "nodeAgent.dnsPolicy",
            ]);
        }
        names
    }
}

/// What one range of agent releases does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AgentModel {
    /// The first release of this row; it holds until the next row's `since`
    /// (the last row until [`KNOWN_UNTIL`]).
    pub since: Version,
    /// A name for the range, for people.
    pub label: &'static str,
    pub client: DcgmClient,
    pub library: LibrarySource,
    /// Whether the NVIDIA monitor runs on arm64 nodes (outside EKS Auto
    /// Mode). Where it does not run, nothing sets `AcceleratedHardwareReady`
    /// from GPU health: no `DCGMError`, and no GPU health at all.
    pub monitors_arm64: bool,
    /// Where the agent looks for an engine unless `DCGM_ADDRESS` says
    /// otherwise. Every modelled release is a standalone client: an engine
    /// must listen there on every node it monitors.
    pub engine_address: &'static str,
    /// After start (and after a lost connection) DCGM errors are suppressed
    /// this long before the condition goes False.
    #[serde(serialize_with = "seconds")]
    pub grace: Duration,
    pub chart: ChartValues,
    pub engine_image: EngineImage,
    /// Where each claim of the row comes from.
    pub sources: &'static str,
}

fn seconds<S: serde::Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(value.as_secs())
}

impl AgentModel {
    /// Whether the NVIDIA monitor runs on a node of this Kubernetes
    /// architecture (`arm64`, `amd64`; `None`: unknown, assumed monitored).
    pub fn monitors(&self, k8s_arch: Option<&str>) -> bool {
        k8s_arch != Some("arm64") || self.monitors_arm64
    }

    /// "v1.7.2 – v1.7.x", "v1.0.0 – v1.5.x", "v1.7.1".
    pub fn range(&self) -> String {
        let end = self.until();
        let last = if end.patch > 0 {
            Version::new(end.major, end.minor, end.patch - 1).to_string()
        } else if end.minor > 0 {
            format!("v{}.{}.x", end.major, end.minor - 1)
        } else {
            format!("v{}.x", end.major - 1)
        };
        if last == self.since.to_string() {
            last
        } else {
            format!("{} – {last}", self.since)
        }
    }

    /// The first release after this row.
    pub fn until(&self) -> Version {
        AGENTS
            .iter()
            .map(|row| row.since)
            .find(|since| *since > self.since)
            .unwrap_or(KNOWN_UNTIL)
    }
}

const MINUTE: Duration = Duration::from_secs(60);

/// The first release that is not modelled: v1.7.2's later patches are taken
/// to behave like it; v1.8.0 and later are unknown until this table says.
pub const KNOWN_UNTIL: Version = Version::new(1, 8, 0);

/// The agent by release, oldest first. Update this table, and only this
/// table, when the agent changes how it monitors NVIDIA GPUs.
pub static AGENTS: &[AgentModel] = &[
    AgentModel {
        since: Version::new(1, 0, 0),
        label: "2025 closed-source builds",
        client: DcgmClient::Dcgm3,
        library: LibrarySource::ImageWithoutIt,
        monitors_arm64: true,
        engine_address: "localhost:5555",
        grace: MINUTE,
        chart: ChartValues {
            dcgm_agent_affinity: true,
            dcgm_agent_enabled_and_address: false,
        },
        engine_image: EngineImage::DcgmExporter,
        sources: "FACTS §1.3, §7.3, §7.4 (go-dcgm <= v3.3.9, NVIDIA/go-dcgm pkg/dcgm/admin.go@v3.3.9: dlopen(\"libdcgm.so\"), \"%s not Found\"); the incident: DCGMError 'libdcgm.so not Found' on arm64 g5g nodes, so arm64 was monitored; chart README at tag v1.2.0-eksbuild.1: dcgmAgent.affinity, dcgm-exporter 3.3.7-3.5.0 (charts before v1.2.0 not checked)",
    },
    AgentModel {
        since: Version::new(1, 6, 0),
        label: "first open-source releases",
        client: DcgmClient::Dcgm4,
        library: LibrarySource::OwnImage,
        monitors_arm64: false,
        engine_address: "localhost:5555",
        grace: MINUTE,
        chart: ChartValues {
            dcgm_agent_affinity: true,
            dcgm_agent_enabled_and_address: false,
        },
        engine_image: EngineImage::DcgmExporter,
        sources: "FACTS §7.4; CHANGELOG v1.6.0 (2026-03-09, first open-source release; per-monitor configuration, nodeAgent.monitors); Dockerfile (libdcgm.so* of datacenter-gpu-manager-4-core); monitors/nvidia/monitor.go: 'NVIDIA-based monitoring is disabled for the arm64 architecture in this version of the agent' unless EKS Auto Mode, DCGM_GRACE_PERIOD_DURATION default 1m; CHANGELOG v1.5.2: dcgm-server image 4.5.2-4.8.1",
    },
    AgentModel {
        since: Version::new(1, 7, 0),
        label: "engine from the agent image",
        client: DcgmClient::Dcgm4,
        library: LibrarySource::OwnImage,
        monitors_arm64: false,
        engine_address: "localhost:5555",
        grace: MINUTE,
        chart: ChartValues {
            dcgm_agent_affinity: true,
            dcgm_agent_enabled_and_address: false,
        },
        engine_image: EngineImage::AgentImage,
        sources: "CHANGELOG v1.7.0 (2026-08-04): 'Run nv-hostengine from the agent image' (PR #210: engine 4.5.2 -> 4.6.1, client already 4.6.1); chart values.yaml at tag v1.7.0-eksbuild.1: dcgmAgent.affinity arch In [amd64], no dcgmAgent.enabled",
    },
    AgentModel {
        since: Version::new(1, 7, 1),
        label: "external engine supported",
        client: DcgmClient::Dcgm4,
        library: LibrarySource::OwnImage,
        monitors_arm64: false,
        engine_address: "localhost:5555",
        grace: MINUTE,
        chart: ChartValues {
            dcgm_agent_affinity: true,
            dcgm_agent_enabled_and_address: true,
        },
        engine_image: EngineImage::AgentImage,
        sources: "CHANGELOG v1.7.1 (2026-09-01): 'Support an external DCGM hostengine' (PR #205, merged before PR #269: still no arm64 monitoring); chart README at tag v1.7.2-eksbuild.1: dcgmAgent.enabled (default true), nodeAgent.dcgmAddress (empty: localhost:5555), nodeAgent.dnsPolicy",
    },
    AgentModel {
        since: Version::new(1, 7, 2),
        label: "monitors arm64",
        client: DcgmClient::Dcgm4,
        library: LibrarySource::OwnImage,
        monitors_arm64: true,
        engine_address: "localhost:5555",
        grace: MINUTE,
        chart: ChartValues {
            dcgm_agent_affinity: true,
            dcgm_agent_enabled_and_address: true,
        },
        engine_image: EngineImage::AgentImage,
        sources: "CHANGELOG v1.7.2 (2026-09-18): 'Enable NVIDIA/DCGM monitoring on arm64 GPU nodes' (PR #269, merged 2026-09-12: removes the arm64 gate); dcgm-server still amd64-only by dcgmAgent.affinity",
    },
];

/// The row for an agent release, or an error listing the known ranges.
pub fn agent_for(version: Version) -> Result<&'static AgentModel, AgentError> {
    if version >= KNOWN_UNTIL {
        return Err(AgentError::Unknown {
            version,
            known: known_ranges(),
        });
    }
    AGENTS
        .iter()
        .rev()
        .find(|row| row.since <= version)
        .ok_or_else(|| AgentError::Unknown {
            version,
            known: known_ranges(),
        })
}

/// The newest modelled release (the default of `[agent] version` and of
/// `diagnose` without agent information).
pub fn newest() -> Version {
    AGENTS.last().map_or(Version::new(1, 7, 2), |row| row.since)
}

/// "v1.0.0 – v1.5.x (2025 closed-source builds), v1.6.0 – v1.6.x (...), ...".
pub fn known_ranges() -> String {
    AGENTS
        .iter()
        .map(|row| format!("{} ({})", row.range(), row.label))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An agent version as people write it: `v1.7.2`, `1.7.2`, or an image tag
/// such as `v1.7.2-eksbuild.1`.
pub fn parse_version(text: &str) -> Result<Version, AgentError> {
    let release = text.split(['-', '+']).next().unwrap_or_default();
    Version::parse_plain(release).ok_or_else(|| AgentError::Invalid {
        text: text.to_owned(),
        known: known_ranges(),
    })
}

/// The last path segment of an image reference, without tag or digest:
/// `eks-node-monitoring-agent` for `.../eks/eks-node-monitoring-agent:v1.7.2`.
pub fn image_name(image: &str) -> &str {
    let without_digest = image.split('@').next().unwrap_or_default();
    let last = without_digest.rsplit('/').next().unwrap_or_default();
    last.split(':').next().unwrap_or_default()
}

/// The release in an image reference's tag:
/// `602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/eks-node-monitoring-agent:v1.7.2-eksbuild.1`
/// (a digest after the tag is ignored).
pub fn version_from_image(image: &str) -> Result<Version, AgentError> {
    let without_digest = image.split('@').next().unwrap_or_default();
    let name_start = without_digest.rfind('/').map_or(0, |slash| slash + 1);
    let Some((_, tag)) = without_digest[name_start..].split_once(':') else {
        return Err(AgentError::NoTag {
            image: image.to_owned(),
        });
    };
    parse_version(tag).map_err(|_| AgentError::Tag {
        image: image.to_owned(),
        tag: tag.to_owned(),
        known: known_ranges(),
    })
}

/// The container of the agent's DaemonSet (the chart names it after itself).
pub const AGENT_CONTAINER: &str = "eks-node-monitoring-agent";

/// How `diagnose` knows which agent runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentSource {
    /// `--agent-version`.
    Flag,
    /// The image tag in `--agent FILE` (the agent's DaemonSet).
    Daemonset,
    /// Nothing was given: the newest modelled release is assumed.
    Assumed,
}

/// What `diagnose` knows about the agent, how it knows it, and the chart's
/// `dcgm-server` DaemonSet when given.
#[derive(Debug, Clone, Serialize)]
pub struct AgentInfo {
    pub version: Version,
    pub source: AgentSource,
    /// The image the version was read from (`--agent`).
    pub image: Option<String>,
    /// `DCGM_ADDRESS` set on the agent's container (`nodeAgent.dcgmAddress`).
    pub dcgm_address: Option<String>,
    /// "v1.7.2 – v1.7.x".
    pub range: String,
    pub model: &'static AgentModel,
    /// What was assumed, when nothing was given.
    pub assumption: Option<String>,
    /// The file `--dcgm-server` named, when given.
    pub dcgm_server_file: Option<String>,
    #[serde(skip)]
    pub dcgm_server: Option<DaemonSet>,
}

impl AgentInfo {
    fn new(version: Version, source: AgentSource) -> Result<AgentInfo, AgentError> {
        let model = agent_for(version)?;
        Ok(AgentInfo {
            version,
            source,
            image: None,
            dcgm_address: None,
            range: model.range(),
            model,
            assumption: None,
            dcgm_server_file: None,
            dcgm_server: None,
        })
    }

    /// `--agent-version V`.
    pub fn given(text: &str) -> Result<AgentInfo, AgentError> {
        AgentInfo::new(parse_version(text)?, AgentSource::Flag)
    }

    /// `--agent FILE`: the version from the agent container's image tag, and
    /// its `DCGM_ADDRESS` if set.
    pub fn from_daemonset(daemonset: &DaemonSet, file: &str) -> Result<AgentInfo, AgentError> {
        let container = daemonset
            .containers
            .iter()
            .find(|c| c.name == AGENT_CONTAINER)
            .or_else(|| {
                daemonset.containers.iter().find(|c| {
                    c.image
                        .as_deref()
                        .is_some_and(|image| image_name(image) == AGENT_CONTAINER)
                })
            })
            .ok_or_else(|| AgentError::NoAgentContainer {
                file: file.to_owned(),
                daemonset: daemonset.name.clone(),
                containers: daemonset
                    .containers
                    .iter()
                    .map(|c| format!("{} ({})", c.name, c.image.as_deref().unwrap_or("no image")))
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let image = container.image.clone().unwrap_or_default();
        let in_file = |error| AgentError::InFile {
            file: file.to_owned(),
            error: Box::new(error),
        };
        let version = version_from_image(&image).map_err(in_file)?;
        let mut info = AgentInfo::new(version, AgentSource::Daemonset).map_err(in_file)?;
        info.image = Some(image);
        info.dcgm_address = container.env.get("DCGM_ADDRESS").cloned();
        Ok(info)
    }

    /// Nothing given: the newest modelled release, said so.
    pub fn assumed() -> AgentInfo {
        let mut info = AgentInfo::new(newest(), AgentSource::Assumed)
            .expect("the newest modelled release is modelled");
        info.assumption = Some(format!(
            "no agent given (--agent-version V, or --agent FILE from `kubectl get ds -n kube-system {AGENT_CONTAINER} -o json`), so the advice is for {}, the newest modelled release; a 'libdcgm.so not Found' message overrides this, as only DCGM-3-era agents (before v1.6.0) write it",
            info.version
        ));
        info
    }

    /// With the chart's `dcgm-server` DaemonSet (`--dcgm-server FILE`).
    pub fn with_dcgm_server(mut self, daemonset: DaemonSet, file: &str) -> AgentInfo {
        self.dcgm_server = Some(daemonset);
        self.dcgm_server_file = Some(file.to_owned());
        self
    }

    /// Where the agent connects: `DCGM_ADDRESS`, else the default.
    pub fn engine_address(&self) -> &str {
        self.dcgm_address
            .as_deref()
            .unwrap_or(self.model.engine_address)
    }

    /// "v1.7.2 (from the image ...:v1.7.2-eksbuild.1)", "v1.7.2 (assumed)".
    pub fn describe(&self) -> String {
        let how = match (self.source, &self.image) {
            (AgentSource::Flag, _) => "--agent-version".to_owned(),
            (AgentSource::Daemonset, Some(image)) => format!("image {image}"),
            (AgentSource::Daemonset, None) => "its DaemonSet".to_owned(),
            (AgentSource::Assumed, _) => "assumed, the newest modelled".to_owned(),
        };
        let arm64 = if self.model.monitors_arm64 {
            "monitors arm64"
        } else {
            "skips arm64"
        };
        format!(
            "{} ({how}; {}: {}, {arm64}, engine at {})",
            self.version,
            self.range,
            self.model.client,
            self.engine_address()
        )
    }
}

impl fmt::Display for DcgmClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DcgmClient::Dcgm3 => "DCGM-3-era client (go-dcgm <= v3.3.9)",
            DcgmClient::Dcgm4 => "DCGM 4 client",
        })
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AgentError {
    #[error("invalid EKS node monitoring agent version '{text}': expected MAJOR.MINOR.PATCH such as v1.7.2 (or an image tag such as v1.7.2-eksbuild.1); known: {known}")]
    Invalid { text: String, known: String },
    #[error("EKS node monitoring agent {version} is not modelled; known: {known}")]
    Unknown { version: Version, known: String },
    #[error("image '{image}' has no tag to read the agent version from (pinned by digest only?); pass --agent-version")]
    NoTag { image: String },
    #[error("image '{image}': tag '{tag}' is not an agent version such as v1.7.2-eksbuild.1; pass --agent-version; known: {known}")]
    Tag {
        image: String,
        tag: String,
        known: String,
    },
    #[error("{file}: DaemonSet '{daemonset}' has no {AGENT_CONTAINER} container (containers: {containers}); pass the agent's DaemonSet (kubectl get ds -n kube-system {AGENT_CONTAINER} -o json) or --agent-version")]
    NoAgentContainer {
        file: String,
        daemonset: String,
        containers: String,
    },
    #[error("{file}: {error}")]
    InFile {
        file: String,
        error: Box<AgentError>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(text: &str) -> &'static AgentModel {
        agent_for(parse_version(text).unwrap()).unwrap()
    }

    #[test]
    fn each_release_gets_its_row() {
        let table = [
            (
                "v1.0.0",
                DcgmClient::Dcgm3,
                true,
                false,
                EngineImage::DcgmExporter,
            ),
            (
                "1.2.0",
                DcgmClient::Dcgm3,
                true,
                false,
                EngineImage::DcgmExporter,
            ),
            (
                "v1.5.9",
                DcgmClient::Dcgm3,
                true,
                false,
                EngineImage::DcgmExporter,
            ),
            (
                "v1.6.0",
                DcgmClient::Dcgm4,
                false,
                false,
                EngineImage::DcgmExporter,
            ),
            (
                "v1.6.7",
                DcgmClient::Dcgm4,
                false,
                false,
                EngineImage::DcgmExporter,
            ),
            (
                "v1.7.0",
                DcgmClient::Dcgm4,
                false,
                false,
                EngineImage::AgentImage,
            ),
            (
                "v1.7.1",
                DcgmClient::Dcgm4,
                false,
                true,
                EngineImage::AgentImage,
            ),
            (
                "v1.7.2",
                DcgmClient::Dcgm4,
                true,
                true,
                EngineImage::AgentImage,
            ),
            (
                "v1.7.9",
                DcgmClient::Dcgm4,
                true,
                true,
                EngineImage::AgentImage,
            ),
        ];
        for (version, client, arm64, enabled, engine) in table {
            let model = row(version);
            assert_eq!(model.client, client, "{version}");
            assert_eq!(model.monitors_arm64, arm64, "{version}");
            assert_eq!(
                model.chart.dcgm_agent_enabled_and_address, enabled,
                "{version}"
            );
            assert!(model.chart.dcgm_agent_affinity, "{version}");
            assert_eq!(model.engine_image, engine, "{version}");
            assert_eq!(model.grace, MINUTE, "{version}");
            assert_eq!(model.engine_address, "localhost:5555", "{version}");
            assert!(model.monitors(Some("amd64")), "{version}");
            assert_eq!(model.monitors(Some("arm64")), arm64, "{version}");
            assert!(model.monitors(None), "{version}");
        }
        assert_eq!(newest(), Version::new(1, 7, 2));
        assert_eq!(row("v1.5.0").client.library(), "libdcgm.so");
        assert_eq!(row("v1.7.2").client.library(), "libdcgm.so.4");
    }

    #[test]
    fn rows_are_in_order_and_ranges_read_well() {
        for pair in AGENTS.windows(2) {
            assert!(pair[0].since < pair[1].since, "{pair:?}");
        }
        assert_eq!(
            known_ranges(),
            "v1.0.0 – v1.5.x (2025 closed-source builds), v1.6.0 – v1.6.x (first open-source releases), v1.7.0 (engine from the agent image), v1.7.1 (external engine supported), v1.7.2 – v1.7.x (monitors arm64)"
        );
    }

    #[test]
    fn unknown_and_invalid_versions_list_the_known_ranges() {
        for version in ["v0.9.0", "v1.8.0", "v2.0.0"] {
            let error = agent_for(parse_version(version).unwrap()).unwrap_err();
            assert!(matches!(error, AgentError::Unknown { .. }), "{error}");
            assert!(
                error.to_string().contains("known: v1.0.0 – v1.5.x"),
                "{error}"
            );
        }
        for bad in ["", "latest", "1.7", "v1.7.x", "vv1.7.2"] {
            let error = parse_version(bad).unwrap_err();
            assert!(
                error.to_string().contains("known: v1.0.0"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn versions_come_from_image_tags() {
        let ecr = "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/eks-node-monitoring-agent";
        let cases = [
            (
                format!("{ecr}:v1.7.2-eksbuild.1"),
                Ok(Version::new(1, 7, 2)),
            ),
            (
                format!("{ecr}:v1.2.0-eksbuild.1"),
                Ok(Version::new(1, 2, 0)),
            ),
            (format!("{ecr}:1.6.7"), Ok(Version::new(1, 6, 7))),
            (
                format!("{ecr}:v1.7.0-eksbuild.1@sha256:{}", "ab".repeat(32)),
                Ok(Version::new(1, 7, 0)),
            ),
            (
                "registry.local:5000/eks-node-monitoring-agent:v1.7.1".to_owned(),
                Ok(Version::new(1, 7, 1)),
            ),
        ];
        for (image, want) in cases {
            assert_eq!(version_from_image(&image), want, "{image}");
        }
        let no_tag = version_from_image("registry.local:5000/eks-node-monitoring-agent");
        assert!(
            matches!(no_tag, Err(AgentError::NoTag { .. })),
            "{no_tag:?}"
        );
        let digest = version_from_image(&format!("{ecr}@sha256:{}", "cd".repeat(32)));
        assert!(
            matches!(digest, Err(AgentError::NoTag { .. })),
            "{digest:?}"
        );
        let latest = version_from_image(&format!("{ecr}:latest")).unwrap_err();
        assert!(latest.to_string().contains("tag 'latest'"), "{latest}");
    }
}
