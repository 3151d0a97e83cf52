//! What Karpenter does to an `EC2NodeClass`'s `spec.userData` for the
//! Bottlerocket AMI family, as data: the merge rules `--explain` and the
//! README state, and the bytes its merge adds, from which the size budget of
//! `spec.userData` follows. Each row names the upstream file, commit and
//! lines it was read from (aws/karpenter-provider-aws), so that a statement
//! and its source sit side by side; `--explain` prints these rows and nothing
//! else about the merge, and the tests hold it, the README and the renderer to
//! them.

/// Where in aws/karpenter-provider-aws a rule was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// Path in the repository.
    pub file: &'static str,
    /// The commit the file was read at.
    pub commit: &'static str,
    /// First and last line of the code that does it.
    pub lines: (u32, u32),
}

impl Source {
    /// `path@commit12 L<a>-<b>`.
    pub fn cite(&self) -> String {
        format!(
            "{}@{} L{}-{}",
            self.file,
            &self.commit[..12],
            self.lines.0,
            self.lines.1
        )
    }
}

const BOTTLEROCKET_GO: &str = "pkg/providers/amifamily/bootstrap/bottlerocket.go";
const BOTTLEROCKET_GO_AT: &str = "009da959ac3a8990e7c4657fd11b09ca678fba20";
const SETTINGS_GO: &str = "pkg/providers/amifamily/bootstrap/bottlerocketsettings.go";
const SETTINGS_GO_AT: &str = "004db0378cc6122c8df9e744d262a29ca01c44a7";
const RESOLVER_GO: &str = "pkg/providers/amifamily/resolver.go";
const RESOLVER_GO_AT: &str = "7f2a6b6266108623d6c02390ed554e6d7c21f627";
const MERGED_GOLDEN: &str = "pkg/providers/launchtemplate/testdata/br_userdata_merged.golden";
const MERGED_GOLDEN_AT: &str = "03b42574bb51321693549e7a03435ac39d2d5e65";
const INPUT_GOLDEN: &str = "pkg/providers/launchtemplate/testdata/br_userdata_input.golden";
const INPUT_GOLDEN_AT: &str = "0f1a4cef6b52c04458306fd1661b1bbfd08e6548";
const UNMERGED_GOLDEN: &str = "pkg/providers/launchtemplate/testdata/br_userdata_unmerged.golden";
const UNMERGED_GOLDEN_AT: &str = "2c02c739cdcd8496284c5b0daff8f90602c89cd1";

const fn at(file: &'static str, commit: &'static str, first: u32, last: u32) -> Source {
    Source {
        file,
        commit,
        lines: (first, last),
    }
}

/// What Karpenter does with one part of the user-data, and so what
/// `render` does about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The whole document must parse, or Karpenter launches nothing.
    MustParse,
    /// Karpenter always writes these keys itself; `render` never does.
    Overwritten,
    /// Merged with Karpenter's own entries, Karpenter winning on a key.
    Merged,
    /// Replaced as a whole; `render` never writes it.
    Replaced,
    /// Always written by Karpenter: from `spec.kubelet` when set there, else
    /// from what Karpenter derives; only `spec.kubelet` carries ours.
    AlwaysWritten,
    /// Replaced when `spec.kubelet` sets the matching field, else kept;
    /// `--format ec2nodeclass` writes the same values in both places.
    ReplacedWhenSpecKubeletSets,
    /// Keys outside Karpenter's typed struct are dropped; `render` writes
    /// only keys it keeps.
    UnknownKeysDropped,
    /// Kept as written (re-encoded: comments and formatting are not).
    PassedThrough,
}

/// One statement about Karpenter's Bottlerocket merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergeRule {
    /// The user-data keys the rule is about.
    pub keys: &'static str,
    pub action: Action,
    /// What Karpenter does, in words.
    pub karpenter: &'static str,
    /// What `render` does about it, in words.
    pub render: &'static str,
    pub sources: &'static [Source],
}

impl MergeRule {
    /// The one line `--explain` prints for this rule.
    pub fn statement(&self) -> String {
        format!(
            "Karpenter merge: {}: {}; {}.",
            self.keys, self.karpenter, self.render
        )
    }
}

/// Karpenter's Bottlerocket user-data merge, rule by rule. The same in every
/// v1 version whose code was read (the stored versions cited below; the
/// EC2NodeClass CRDs of v1.4.0, v1.6.0, v1.7.0, v1.14.1 and main are checked
/// by the tests).
pub const RULES: &[MergeRule] = &[
    MergeRule {
        keys: "the whole user-data",
        action: Action::MustParse,
        karpenter: "parsed as TOML into its typed settings; anything that does not parse, or a known key of the wrong type, fails with \"invalid UserData\" and no instance launches",
        render: "accelready writes typed settings only",
        sources: &[
            at(BOTTLEROCKET_GO, BOTTLEROCKET_GO_AT, 38, 41),
            at(SETTINGS_GO, SETTINGS_GO_AT, 129, 155),
        ],
    },
    MergeRule {
        keys: "settings.kubernetes.cluster-name, api-server, cluster-certificate",
        action: Action::Overwritten,
        karpenter: "always set to the cluster's name, endpoint and CA bundle",
        render: "accelready never writes them",
        sources: &[at(BOTTLEROCKET_GO, BOTTLEROCKET_GO_AT, 48, 50)],
    },
    MergeRule {
        keys: "settings.kubernetes.node-labels",
        action: Action::Merged,
        karpenter: "merged with the NodeClaim's labels (karpenter.sh/nodepool, karpenter.sh/capacity-type, karpenter.k8s.aws/ec2nodeclass, karpenter.sh/do-not-sync-taints and the NodePool's own), Karpenter winning on the same key",
        render: "node.labels are written as they are, and a key in karpenter.sh/ or karpenter.k8s.aws/ warns",
        sources: &[
            at(BOTTLEROCKET_GO, BOTTLEROCKET_GO_AT, 51, 53),
            at(UNMERGED_GOLDEN, UNMERGED_GOLDEN_AT, 8, 13),
        ],
    },
    MergeRule {
        keys: "settings.kubernetes.node-taints",
        action: Action::Replaced,
        karpenter: "always replaced by the NodePool's taints and startupTaints plus karpenter.sh/unregistered:NoExecute",
        render: "accelready never writes it (on-unready = \"taint\" applies its taint through the Bottlerocket API at boot)",
        sources: &[
            at(BOTTLEROCKET_GO, BOTTLEROCKET_GO_AT, 95, 98),
            at(RESOLVER_GO, RESOLVER_GO_AT, 269, 277),
        ],
    },
    MergeRule {
        keys: "settings.kubernetes.max-pods",
        action: Action::AlwaysWritten,
        karpenter: "always written: spec.kubelet.maxPods when the EC2NodeClass sets it, else the instance type's pod capacity",
        render: "node.max-pods reaches the node only through spec.kubelet.maxPods, which --format ec2nodeclass writes; in --format userdata output it is informational only when Karpenter launches the node",
        sources: &[
            at(RESOLVER_GO, RESOLVER_GO_AT, 259, 268),
            at(RESOLVER_GO, RESOLVER_GO_AT, 183, 183),
            at(BOTTLEROCKET_GO, BOTTLEROCKET_GO_AT, 55, 57),
            at(INPUT_GOLDEN, INPUT_GOLDEN_AT, 7, 7),
            at(MERGED_GOLDEN, MERGED_GOLDEN_AT, 8, 8),
        ],
    },
    MergeRule {
        keys: "settings.kubernetes.kube-reserved, system-reserved, eviction-hard",
        action: Action::ReplacedWhenSpecKubeletSets,
        karpenter: "replaced by spec.kubelet.kubeReserved, systemReserved and evictionHard when the EC2NodeClass sets them, kept otherwise",
        render: "--format ec2nodeclass writes the same values in both places",
        sources: &[at(BOTTLEROCKET_GO, BOTTLEROCKET_GO_AT, 63, 71)],
    },
    MergeRule {
        keys: "settings.kubernetes.cluster-dns-ip",
        action: Action::Overwritten,
        karpenter: "set from spec.kubelet.clusterDNS (its first entry; some versions write the whole list) or else the cluster's kube-dns Service IP",
        render: "accelready never writes it",
        sources: &[
            at(BOTTLEROCKET_GO, BOTTLEROCKET_GO_AT, 60, 62),
            at(RESOLVER_GO, RESOLVER_GO_AT, 228, 243),
        ],
    },
    MergeRule {
        keys: "other settings.kubernetes keys",
        action: Action::UnknownKeysDropped,
        karpenter: "re-written from Karpenter's fixed struct, so keys it does not model are dropped (it logs \"Unknown parameter in userData K8s settings\")",
        render: "accelready writes only max-pods, node-labels, kube-reserved, system-reserved and eviction-hard there",
        sources: &[
            at(SETTINGS_GO, SETTINGS_GO_AT, 51, 98),
            at(SETTINGS_GO, SETTINGS_GO_AT, 157, 166),
            at(INPUT_GOLDEN, INPUT_GOLDEN_AT, 2, 2),
        ],
    },
    MergeRule {
        keys: "every other settings section (bootstrap-containers, host-containers, kubelet-device-plugins, ...)",
        action: Action::PassedThrough,
        karpenter: "kept as written, re-encoded (comments and layout are not kept)",
        render: "accelready writes its containers and the device plugin there",
        sources: &[
            at(SETTINGS_GO, SETTINGS_GO_AT, 149, 153),
            at(SETTINGS_GO, SETTINGS_GO_AT, 157, 166),
        ],
    },
];

/// EC2 caps user-data at 16 KiB (before base64).
pub const USER_DATA_LIMIT: usize = 16 * 1024;

/// One thing Karpenter's merge writes into the user-data, at its largest:
/// the exact line (as go-toml v2 writes it, single-quoted strings, as in the
/// upstream golden files) with the longest value it can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addition {
    pub what: &'static str,
    /// Bytes, newlines included.
    pub bytes: usize,
    pub source: Source,
}

/// An EKS API endpoint: `https://` + 32 hex + `.gr7.` + region (at most 14
/// characters, e.g. `ap-southeast-4`) + `.eks.amazonaws.com.cn` is 80
/// characters; Karpenter's `clusterEndpoint` setting may name another, so 128.
const ENDPOINT_MAX: usize = 128;
/// `cluster-certificate` is the base64 of the CA's PEM. An EKS cluster CA is
/// a self-signed RSA-2048 certificate: about 1,100 bytes of PEM, about 1,470
/// of base64; 1,600 allows a PEM of 1,200 bytes.
const CA_BUNDLE_MAX: usize = 1_600;
/// EKS cluster names are at most 100 characters.
const CLUSTER_NAME_MAX: usize = 100;
/// An IPv6 address, at most 39 characters.
const DNS_IP_MAX: usize = 39;
/// `spec.kubelet.maxPods` is an int32: at most 10 digits.
const MAX_PODS_DIGITS: usize = 10;
/// Label values (a NodePool's and an EC2NodeClass's name) are at most 63.
const LABEL_VALUE_MAX: usize = 63;
/// The NodePool's own labels and taints, and labels from its single-value
/// requirements (e.g. `karpenter.k8s.aws/instance-family`), are the
/// cluster's to choose: this much is set aside for them (about five lines).
pub const NODEPOOL_ALLOWANCE: usize = 512;

/// Everything Karpenter's merge may add, line by line.
pub const ADDITIONS: &[Addition] = &[
    Addition {
        what: "the [settings] header (go-toml writes one for every table, even one holding only tables)",
        bytes: "[settings]\n".len(),
        source: at(UNMERGED_GOLDEN, UNMERGED_GOLDEN_AT, 1, 1),
    },
    Addition {
        what: "the [settings.kubernetes] header, when the user-data has none",
        bytes: "[settings.kubernetes]\n\n".len(),
        source: at(UNMERGED_GOLDEN, UNMERGED_GOLDEN_AT, 2, 2),
    },
    Addition {
        what: "headers of the tables holding only tables: [settings.bootstrap-containers], [settings.host-containers], [settings.kubelet-device-plugins]",
        bytes: "\n[settings.bootstrap-containers]\n".len()
            + "\n[settings.host-containers]\n".len()
            + "\n[settings.kubelet-device-plugins]\n".len(),
        source: at(SETTINGS_GO, SETTINGS_GO_AT, 157, 166),
    },
    Addition {
        what: "api-server (the cluster endpoint)",
        bytes: "api-server = ''\n".len() + ENDPOINT_MAX,
        source: at(BOTTLEROCKET_GO, BOTTLEROCKET_GO_AT, 49, 49),
    },
    Addition {
        what: "cluster-certificate (the cluster CA bundle, base64 PEM)",
        bytes: "cluster-certificate = ''\n".len() + CA_BUNDLE_MAX,
        source: at(BOTTLEROCKET_GO, BOTTLEROCKET_GO_AT, 50, 50),
    },
    Addition {
        what: "cluster-name",
        bytes: "cluster-name = ''\n".len() + CLUSTER_NAME_MAX,
        source: at(BOTTLEROCKET_GO, BOTTLEROCKET_GO_AT, 48, 48),
    },
    Addition {
        what: "cluster-dns-ip (written as a list by some versions)",
        bytes: "cluster-dns-ip = ['']\n".len() + DNS_IP_MAX,
        source: at(BOTTLEROCKET_GO, BOTTLEROCKET_GO_AT, 60, 62),
    },
    Addition {
        what: "max-pods",
        bytes: "max-pods = \n".len() + MAX_PODS_DIGITS,
        source: at(BOTTLEROCKET_GO, BOTTLEROCKET_GO_AT, 55, 57),
    },
    Addition {
        what: "the [settings.kubernetes.node-labels] header, when the user-data has no labels",
        bytes: "\n[settings.kubernetes.node-labels]\n".len(),
        source: at(UNMERGED_GOLDEN, UNMERGED_GOLDEN_AT, 8, 8),
    },
    Addition {
        what: "label karpenter.sh/nodepool",
        bytes: "'karpenter.sh/nodepool' = ''\n".len() + LABEL_VALUE_MAX,
        source: at(UNMERGED_GOLDEN, UNMERGED_GOLDEN_AT, 12, 12),
    },
    Addition {
        what: "label karpenter.k8s.aws/ec2nodeclass",
        bytes: "'karpenter.k8s.aws/ec2nodeclass' = ''\n".len() + LABEL_VALUE_MAX,
        source: at(UNMERGED_GOLDEN, UNMERGED_GOLDEN_AT, 9, 9),
    },
    Addition {
        what: "label karpenter.sh/capacity-type",
        bytes: "'karpenter.sh/capacity-type' = 'on-demand'\n".len(),
        source: at(UNMERGED_GOLDEN, UNMERGED_GOLDEN_AT, 10, 10),
    },
    Addition {
        what: "label karpenter.sh/do-not-sync-taints",
        bytes: "'karpenter.sh/do-not-sync-taints' = 'true'\n".len(),
        source: at(UNMERGED_GOLDEN, UNMERGED_GOLDEN_AT, 11, 11),
    },
    Addition {
        what: "the [settings.kubernetes.node-taints] header",
        bytes: "\n[settings.kubernetes.node-taints]\n".len(),
        source: at(UNMERGED_GOLDEN, UNMERGED_GOLDEN_AT, 15, 15),
    },
    Addition {
        what: "taint karpenter.sh/unregistered",
        bytes: "'karpenter.sh/unregistered' = [':NoExecute']\n".len(),
        source: at(UNMERGED_GOLDEN, UNMERGED_GOLDEN_AT, 18, 18),
    },
    Addition {
        what: "the NodePool's labels and taints (an allowance: they are the cluster's to choose)",
        bytes: NODEPOOL_ALLOWANCE,
        source: at(RESOLVER_GO, RESOLVER_GO_AT, 297, 305),
    },
];

/// The bytes set aside for Karpenter's merge: the sum of [`ADDITIONS`].
pub const MERGE_RESERVE: usize = {
    let mut total = 0;
    let mut i = 0;
    while i < ADDITIONS.len() {
        total += ADDITIONS[i].bytes;
        i += 1;
    }
    total
};

/// The most an EC2NodeClass's `spec.userData` may hold so that the merged
/// user-data stays within EC2's limit.
pub const NODECLASS_USER_DATA_BUDGET: usize = USER_DATA_LIMIT - MERGE_RESERVE;

/// Within this many bytes of the budget, `render` warns.
pub const NEAR_BUDGET_MARGIN: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_the_sum_of_the_additions() {
        assert_eq!(
            MERGE_RESERVE,
            ADDITIONS.iter().map(|a| a.bytes).sum::<usize>()
        );
        // The number README and --explain state.
        assert_eq!(MERGE_RESERVE, 3_006);
        assert_eq!(NODECLASS_USER_DATA_BUDGET, 13_378);
        // It covers what the issue measured Karpenter adding to a 16,352-byte
        // user-data (18,168 to 18,211 bytes after the merge).
        const { assert!(MERGE_RESERVE >= 18_211 - 16_352) };
    }

    #[test]
    fn every_source_is_cited_with_a_full_commit_and_a_line_range() {
        let sources = RULES
            .iter()
            .flat_map(|rule| rule.sources.iter())
            .chain(ADDITIONS.iter().map(|a| &a.source));
        for source in sources {
            assert_eq!(source.commit.len(), 40, "{source:?}");
            assert!(source.commit.bytes().all(|b| b.is_ascii_hexdigit()));
            assert!(source.lines.0 >= 1 && source.lines.0 <= source.lines.1);
            assert!(source.cite().contains(&format!("L{}-", source.lines.0)));
        }
    }

    #[test]
    fn each_rule_states_one_line() {
        for rule in RULES {
            let statement = rule.statement();
            assert!(!statement.contains('\n'), "{statement}");
            assert!(statement.starts_with("Karpenter merge: "));
        }
    }
}
