//! Generated `kubectl get nodes -o json` for clusters of any size: what
//! kubectl prints for a Karpenter-managed EKS fleet (4-space indentation,
//! kubectl's field order), with the fields that make real node lists large —
//! `images` (digest and tag per image), annotations, labels, addresses,
//! capacity, `nodeInfo` and the monitoring agent's conditions — and a few
//! unhealthy nodes. Deterministic: the same spec gives the same bytes.
//!
//! Used by the `diagnose_scale` bench and the streaming tests.

use std::io::{self, Write};

use serde_json::{json, Value};

/// What to generate.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub nodes: usize,
    /// Every `unhealthy_every`-th node has `AcceleratedHardwareReady=False`
    /// (the incident's DCGMError); 0: none.
    pub unhealthy_every: usize,
    /// Every `unknown_every`-th node has `Ready=Unknown`; 0: none.
    pub unknown_every: usize,
    /// Images per node: kubelet reports at most 50 (`nodeStatusMaxImages`).
    pub images: usize,
    /// NodePools the managed nodes are spread over (`gpu-0`, `gpu-1`, ...).
    pub pools: usize,
}

impl Spec {
    /// A GPU fleet: 2% of the nodes with the DCGM condition, 0.5% not
    /// reporting, 4 images each (about 11 KB a node as kubectl prints it),
    /// 20 pools.
    pub fn fleet(nodes: usize) -> Spec {
        Spec {
            nodes,
            unhealthy_every: 50,
            unknown_every: 200,
            images: 4,
            pools: 20,
        }
    }
}

/// What the generated list holds, for assertions.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub bytes: u64,
    /// Names of the nodes with a condition that matches a repair policy.
    pub unhealthy: Vec<String>,
    /// Nodes without `karpenter.k8s.aws/ec2nodeclass` (system nodes).
    pub unmanaged: usize,
}

/// Writes the list to `out` and says what it holds.
pub fn write_list(out: &mut dyn Write, spec: &Spec) -> io::Result<Summary> {
    let mut out = Counting {
        inner: out,
        bytes: 0,
    };
    let mut summary = Summary::default();
    out.write_all(b"{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n")?;
    for index in 0..spec.nodes {
        let node = node(index, spec, &mut summary);
        let text = pretty(&node);
        for (line_number, line) in text.lines().enumerate() {
            if line_number > 0 {
                out.write_all(b"\n")?;
            }
            out.write_all(b"        ")?;
            out.write_all(line.as_bytes())?;
        }
        out.write_all(if index + 1 < spec.nodes {
            b",\n"
        } else {
            b"\n"
        })?;
    }
    out.write_all(
        b"    ],\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": \"\"\n    }\n}\n",
    )?;
    summary.bytes = out.bytes;
    Ok(summary)
}

/// The list as bytes (for small lists in tests).
pub fn list(spec: &Spec) -> (Vec<u8>, Summary) {
    let mut bytes = Vec::new();
    let summary = write_list(&mut bytes, spec).expect("writing to memory");
    (bytes, summary)
}

fn pretty(value: &Value) -> String {
    let mut bytes = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut bytes, formatter);
    serde::Serialize::serialize(value, &mut serializer).expect("a JSON value serializes");
    String::from_utf8(bytes).expect("serde_json writes UTF-8")
}

struct Counting<'a> {
    inner: &'a mut dyn Write,
    bytes: u64,
}

impl Write for Counting<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.bytes += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A small deterministic generator (xorshift64*), seeded per node.
struct Random(u64);

impl Random {
    fn new(seed: u64) -> Random {
        Random(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn hex(&mut self, digits: usize) -> String {
        let mut text = String::with_capacity(digits);
        while text.len() < digits {
            text.push_str(&format!("{:016x}", self.next()));
        }
        text.truncate(digits);
        text
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const IMAGES: &[(&str, &str)] = &[
    (
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/kube-proxy",
        "v1.32.0-minimal-eksbuild.2",
    ),
    (
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni",
        "v1.19.2-eksbuild.1",
    ),
    (
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni-init",
        "v1.19.2-eksbuild.1",
    ),
    (
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon/aws-network-policy-agent",
        "v1.1.6-eksbuild.1",
    ),
    (
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/eks-node-monitoring-agent",
        "v1.2.0-eksbuild.1",
    ),
    (
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/coredns",
        "v1.11.4-eksbuild.2",
    ),
    (
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/pause",
        "3.5",
    ),
    (
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/ebs-csi-driver/aws-ebs-csi-driver",
        "v1.38.1",
    ),
    ("nvcr.io/nvidia/k8s-device-plugin", "v0.17.0"),
    (
        "nvcr.io/nvidia/k8s/dcgm-exporter",
        "4.1.1-4.0.4-ubuntu22.04",
    ),
    ("nvcr.io/nvidia/cuda", "12.8.0-base-ubuntu24.04"),
    ("public.ecr.aws/karpenter/controller", "1.4.0"),
    ("quay.io/prometheus/node-exporter", "v1.8.2"),
    ("docker.io/grafana/alloy", "v1.5.1"),
    (
        "public.ecr.aws/aws-observability/aws-for-fluent-bit",
        "2.32.4",
    ),
    (
        "111122223333.dkr.ecr.us-west-2.amazonaws.com/ml/inference-server",
        "2025.06.09-7f3c2a1",
    ),
    (
        "111122223333.dkr.ecr.us-west-2.amazonaws.com/ml/trainer",
        "2025.06.02-c0ffee1",
    ),
    (
        "111122223333.dkr.ecr.us-west-2.amazonaws.com/ml/feature-loader",
        "2025.05.28-1a2b3c4",
    ),
    (
        "registry.k8s.io/sig-storage/csi-node-driver-registrar",
        "v2.12.0",
    ),
    ("registry.k8s.io/sig-storage/livenessprobe", "v2.14.0"),
];

const INSTANCE_TYPES: &[(&str, &str, &str, &str)] = &[
    ("g5g.xlarge", "arm64", "g5g", "t4g"),
    ("g5g.2xlarge", "arm64", "g5g", "t4g"),
    ("g5.xlarge", "amd64", "g5", "a10g"),
    ("g6.2xlarge", "amd64", "g6", "l4"),
    ("p5.48xlarge", "amd64", "p5", "h100"),
];

fn condition(kind: &str, status: &str, reason: &str, message: &str, since: &str) -> Value {
    json!({
        "lastHeartbeatTime": "2025-06-10T03:04:30Z",
        "lastTransitionTime": since,
        "message": message,
        "reason": reason,
        "status": status,
        "type": kind,
    })
}

fn node(index: usize, spec: &Spec, summary: &mut Summary) -> Value {
    let mut random = Random::new(index as u64 + 1);
    let (a, b) = (index / 250 % 250, index % 250);
    let ip = format!("10.{}.{a}.{b}", 16 + index / 62_500);
    let name = format!("ip-{}.us-west-2.compute.internal", ip.replace('.', "-"));
    let zone = ["us-west-2a", "us-west-2b", "us-west-2c"][index % 3];
    let zone_id = ["usw2-az1", "usw2-az2", "usw2-az3"][index % 3];
    let (instance_type, arch, family, gpu) =
        INSTANCE_TYPES[random.below(INSTANCE_TYPES.len() as u64) as usize];
    // One node in 40 is a system node that Karpenter does not manage.
    let managed = index % 40 != 7;
    let instance_id = format!("i-0{}", random.hex(16));
    let uid = format!(
        "{}-{}-{}-{}-{}",
        random.hex(8),
        random.hex(4),
        random.hex(4),
        random.hex(4),
        random.hex(12)
    );

    let mut labels = serde_json::Map::new();
    let mut label = |key: &str, value: &str| {
        labels.insert(key.to_owned(), Value::String(value.to_owned()));
    };
    label("beta.kubernetes.io/arch", arch);
    label("beta.kubernetes.io/instance-type", instance_type);
    label("beta.kubernetes.io/os", "linux");
    label("failure-domain.beta.kubernetes.io/region", "us-west-2");
    label("failure-domain.beta.kubernetes.io/zone", zone);
    label(
        "k8s.io/cloud-provider-aws",
        "3f1c2a8e9d0b4c5e6f7a8b9c0d1e2f3a",
    );
    label("kubernetes.io/arch", arch);
    label("kubernetes.io/hostname", &name);
    label("kubernetes.io/os", "linux");
    label("node.kubernetes.io/instance-type", instance_type);
    label("topology.k8s.aws/zone-id", zone_id);
    label("topology.kubernetes.io/region", "us-west-2");
    label("topology.kubernetes.io/zone", zone);
    if managed {
        let pool = format!("gpu-{}", index % spec.pools.max(1));
        label("karpenter.k8s.aws/ec2nodeclass", "gpu-bottlerocket");
        label("karpenter.k8s.aws/instance-category", "g");
        label("karpenter.k8s.aws/instance-family", family);
        label("karpenter.k8s.aws/instance-gpu-count", "1");
        label("karpenter.k8s.aws/instance-gpu-manufacturer", "nvidia");
        label("karpenter.k8s.aws/instance-gpu-name", gpu);
        label("karpenter.sh/capacity-type", "on-demand");
        label("karpenter.sh/initialized", "true");
        label("karpenter.sh/nodepool", &pool);
        label("karpenter.sh/registered", "true");
        label("nvidia.com/gpu.present", "true");
    } else {
        summary.unmanaged += 1;
        label("eks.amazonaws.com/nodegroup", "system");
        label("eks.amazonaws.com/capacityType", "ON_DEMAND");
    }

    let ready_since = "2025-06-10T02:59:30Z";
    let accelerated = spec.unhealthy_every > 0 && index % spec.unhealthy_every == 3;
    let unknown = spec.unknown_every > 0 && index % spec.unknown_every == 11;
    if accelerated || unknown {
        summary.unhealthy.push(name.clone());
    }
    let mut conditions = vec![
        if accelerated {
            condition(
                "AcceleratedHardwareReady",
                "False",
                "DCGMError",
                "failed to initialize DCGM: libdcgm.so not Found",
                "2025-06-10T03:00:00Z",
            )
        } else {
            condition(
                "AcceleratedHardwareReady",
                "True",
                "AcceleratedHardwareIsReady",
                "Monitoring for the AcceleratedHardware system is active",
                ready_since,
            )
        },
        condition(
            "ContainerRuntimeReady",
            "True",
            "ContainerRuntimeIsReady",
            "Monitoring for the ContainerRuntime system is active",
            ready_since,
        ),
        condition(
            "StorageReady",
            "True",
            "DiskIsReady",
            "Monitoring for the Disk system is active",
            ready_since,
        ),
        condition(
            "NetworkingReady",
            "True",
            "NetworkingIsReady",
            "Monitoring for the Networking system is active",
            ready_since,
        ),
        condition(
            "KernelReady",
            "True",
            "KernelIsReady",
            "Monitoring for the Kernel system is active",
            ready_since,
        ),
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            "2025-06-10T02:58:50Z",
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
            "2025-06-10T02:58:50Z",
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
            "2025-06-10T02:58:50Z",
        ),
    ];
    conditions.push(if unknown {
        condition(
            "Ready",
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
            "2025-06-10T03:00:00Z",
        )
    } else {
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
            "2025-06-10T02:59:10Z",
        )
    });

    let images: Vec<Value> = (0..spec.images)
        .map(|i| {
            let (repository, tag) = IMAGES[(i + index) % IMAGES.len()];
            json!({
                "names": [
                    format!("{repository}@sha256:{}", random.hex(64)),
                    format!("{repository}:{tag}"),
                ],
                "sizeBytes": 10_000_000 + random.below(2_000_000_000),
            })
        })
        .collect();

    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "annotations": {
                "alpha.kubernetes.io/provided-node-ip": ip,
                "csi.volume.kubernetes.io/nodeid": format!("{{\"ebs.csi.aws.com\":\"{instance_id}\"}}"),
                "karpenter.k8s.aws/ec2nodeclass-hash": "15181785014404584000",
                "karpenter.k8s.aws/ec2nodeclass-hash-version": "v4",
                "karpenter.sh/nodepool-hash": "1234567890123456789",
                "karpenter.sh/nodepool-hash-version": "v3",
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true"
            },
            "creationTimestamp": "2025-06-10T02:58:40Z",
            "finalizers": ["karpenter.sh/termination"],
            "labels": labels,
            "name": name,
            "ownerReferences": [{
                "apiVersion": "karpenter.sh/v1",
                "blockOwnerDeletion": true,
                "kind": "NodeClaim",
                "name": format!("gpu-{}", random.hex(5)),
                "uid": format!("{}-{}-{}-{}-{}", random.hex(8), random.hex(4), random.hex(4), random.hex(4), random.hex(12))
            }],
            "resourceVersion": format!("{}", 48_000_000 + random.below(1_000_000)),
            "uid": uid
        },
        "spec": {
            "providerID": format!("aws:///{zone}/{instance_id}"),
            "taints": [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "value": "true"}]
        },
        "status": {
            "addresses": [
                {"address": ip, "type": "InternalIP"},
                {"address": name, "type": "InternalDNS"},
                {"address": name, "type": "Hostname"}
            ],
            "allocatable": {
                "cpu": "3920m", "ephemeral-storage": "76224326324", "hugepages-1Gi": "0",
                "hugepages-2Mi": "0", "memory": "6919840Ki", "nvidia.com/gpu": "1", "pods": "58"
            },
            "capacity": {
                "cpu": "4", "ephemeral-storage": "82678764Ki", "hugepages-1Gi": "0",
                "hugepages-2Mi": "0", "memory": "7926432Ki", "nvidia.com/gpu": "1", "pods": "58"
            },
            "conditions": conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": images,
            "nodeInfo": {
                "architecture": arch,
                "bootID": random.hex(32),
                "containerRuntimeVersion": "containerd://1.7.27+bottlerocket",
                "kernelVersion": "6.1.134",
                "kubeProxyVersion": "v1.32.3-eks-473151a",
                "kubeletVersion": "v1.32.3-eks-473151a",
                "machineID": random.hex(32),
                "operatingSystem": "linux",
                "osImage": "Bottlerocket OS 1.39.1 (aws-k8s-1.32-nvidia)",
                "systemUUID": format!("ec2{}", random.hex(29))
            }
        }
    })
}
