//! Property tests (proptest, default case counts) for the invariants that
//! outside input must never break:
//! - the validation newtypes accept exactly what FACTS.md §5 allows, checked
//!   here by rules written independently of `src/` (no shared code, no regex);
//! - a rendered policy parses back to the same structure, and its embedded
//!   policy to the same policy;
//! - a generated policy with generated names renders to an EC2NodeClass that
//!   a YAML 1.1 reader reads as the typed value, and that passes the schema,
//!   CEL and name rules of every EC2NodeClass CRD (`common/crd.rs`); `--name`
//!   is accepted exactly when it is a DNS-1123 subdomain of at most 63;
//! - the repair forecast is monotonic in `lastTransitionTime`, and the 20%
//!   rule is "more than ceil(20% of n)" for pools of 1..200.

use std::collections::BTreeMap;

use accelready::bottlerocket::userdata::{
    BootstrapContainerName, EvictionSignal, EvictionThreshold, LabelKey, LabelValue,
    NvidiaDevicePlugin, Quantity, ReservedResource, Sha256Hex, Taint, UserData,
};
use accelready::policy::{Bundle, OnUnready, Policy, Provision};
use accelready::render::{self, Format, NodeClassOptions};
use accelready::repair::agent::AgentInfo;
use accelready::repair::forecast::{forecast, Options, Verdict};
use accelready::repair::kube::{parse_rfc3339, Condition, Node, NodeInput};
use accelready::repair::model::{
    max_unhealthy, model_for, ConditionStatus, Version, NODECLASS_LABEL, NODEPOOL_LABEL,
};
use base64::Engine;
use proptest::prelude::*;
use time::{Duration, OffsetDateTime};

#[path = "common/crd.rs"]
mod crd;
#[path = "common/yaml11.rs"]
mod yaml11;

// ---------------------------------------------------------------------------
// FACTS.md §5, written out independently of src/.

fn alphanumeric(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_uppercase() || c.is_ascii_digit()
}

/// Label name (and non-empty label value): 1–63 characters, alphanumeric at
/// both ends, `-`, `_`, `.` inside.
fn facts_label_name(name: &str) -> bool {
    let chars: Vec<char> = name.chars().collect();
    match (chars.first(), chars.last()) {
        (Some(&first), Some(&last)) => {
            chars.len() <= 63
                && alphanumeric(first)
                && alphanumeric(last)
                && chars
                    .iter()
                    .all(|&c| alphanumeric(c) || c == '-' || c == '_' || c == '.')
        }
        _ => false,
    }
}

/// DNS subdomain (RFC 1123): at most 253 characters; dot-separated parts of
/// lowercase letters, digits and `-`, each starting and ending with a letter
/// or digit.
fn facts_dns_subdomain(prefix: &str) -> bool {
    let part = |p: &str| {
        let chars: Vec<char> = p.chars().collect();
        let lower_or_digit = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        !chars.is_empty()
            && lower_or_digit(chars[0])
            && lower_or_digit(chars[chars.len() - 1])
            && chars.iter().all(|&c| lower_or_digit(c) || c == '-')
    };
    !prefix.is_empty() && prefix.len() <= 253 && prefix.split('.').all(part)
}

/// Label key: optional DNS-subdomain prefix and `/`, then a label name.
fn facts_label_key(key: &str) -> bool {
    match key.find('/') {
        Some(slash) => facts_dns_subdomain(&key[..slash]) && facts_label_name(&key[slash + 1..]),
        None => facts_label_name(key),
    }
}

/// Label value: empty, or the label-name rule.
fn facts_label_value(value: &str) -> bool {
    value.is_empty() || facts_label_name(value)
}

/// Taint `key=value:Effect` or `key:Effect`; Effect is one of three.
fn facts_taint(taint: &str) -> bool {
    let Some(colon) = taint.rfind(':') else {
        return false;
    };
    let (key_value, effect) = (&taint[..colon], &taint[colon + 1..]);
    let effect_ok = ["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect);
    let (key, value) = match key_value.find('=') {
        Some(eq) => (&key_value[..eq], &key_value[eq + 1..]),
        None => (key_value, ""),
    };
    effect_ok && facts_label_key(key) && facts_label_value(value)
}

/// Kubernetes resource quantity (apimachinery `resource.Quantity`):
/// `[+-]<number><suffix>`, number `digits[.digits]` / `digits.` / `.digits`,
/// suffix a binary SI suffix, a decimal SI suffix or `e`/`E` + signed integer.
fn facts_quantity(text: &str) -> bool {
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let number_len = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_len);
    let dots = number.chars().filter(|&c| c == '.').count();
    let has_digit = number.chars().any(|c| c.is_ascii_digit());
    if dots > 1 || !has_digit {
        return false;
    }
    const SUFFIXES: [&str; 16] = [
        "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E",
    ];
    if SUFFIXES.contains(&suffix) {
        return true;
    }
    let Some(exponent) = suffix.strip_prefix(['e', 'E']) else {
        return false;
    };
    let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
}

// ---------------------------------------------------------------------------
// Generators of valid strings (and near-misses).

fn label_name() -> impl Strategy<Value = String> {
    prop_oneof!["[a-zA-Z0-9]", "[a-zA-Z0-9][-_.a-zA-Z0-9]{0,61}[a-zA-Z0-9]",]
}

fn dns_subdomain() -> impl Strategy<Value = String> {
    prop::collection::vec("[a-z0-9]([-a-z0-9]{0,14}[a-z0-9])?", 1..5)
        .prop_map(|parts| parts.join("."))
}

fn label_key() -> impl Strategy<Value = String> {
    prop_oneof![
        label_name(),
        (dns_subdomain(), label_name()).prop_map(|(prefix, name)| format!("{prefix}/{name}")),
    ]
}

fn label_value() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), label_name()]
}

fn effect() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["NoSchedule", "PreferNoSchedule", "NoExecute"])
}

fn taint() -> impl Strategy<Value = String> {
    (label_key(), label_value(), effect()).prop_map(|(key, value, effect)| {
        if value.is_empty() {
            format!("{key}:{effect}")
        } else {
            format!("{key}={value}:{effect}")
        }
    })
}

/// Unsigned quantities (the only ones a reservation or threshold can mean).
fn quantity() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        "[0-9]{1,6}",
        "[0-9]{1,4}\\.[0-9]{1,3}",
        "\\.[0-9]{1,3}",
        "[0-9]{1,3}\\."
    ];
    let suffix = prop_oneof![
        prop::sample::select(vec![
            "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E",
        ])
        .prop_map(str::to_owned),
        "[eE][+-]?[0-9]{1,2}",
    ];
    (number, suffix).prop_map(|(n, s)| format!("{n}{s}"))
}

/// Strings near the rules: the characters that matter in any order, and
/// lengths at the limits (63/64 for names, 253/254 for prefixes).
fn near_miss() -> impl Strategy<Value = String> {
    prop_oneof![
        "[-_./=:a-zA-Z0-9]{0,80}",
        "[a-zA-Z0-9]{62,65}",
        "[a-z0-9]{62,65}=[a-z0-9]{62,65}:NoSchedule",
        "([a-z0-9]{49}\\.){5}[a-z0-9]{3,4}/[a-z]",
        "[.0-9eEKMGi%+-]{0,12}",
        any::<String>(),
    ]
}

/// A valid string with one character replaced, inserted or removed.
fn mutated(valid: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    (valid, any::<prop::sample::Index>(), any::<char>(), 0..3u8).prop_map(|(s, at, c, how)| {
        let mut chars: Vec<char> = s.chars().collect();
        let i = at.index(chars.len() + 1);
        match how {
            0 => chars.insert(i, c),
            1 if i < chars.len() => chars[i] = c,
            _ if i < chars.len() => {
                chars.remove(i);
            }
            _ => chars.push(c),
        }
        chars.into_iter().collect()
    })
}

proptest! {
    #[test]
    fn valid_label_keys_are_accepted(key in label_key()) {
        prop_assert!(facts_label_key(&key), "generator: {key}");
        prop_assert!(LabelKey::try_from(key.as_str()).is_ok(), "{key}");
    }

    #[test]
    fn label_keys_match_the_rules(key in prop_oneof![mutated(label_key()), near_miss()]) {
        prop_assert_eq!(LabelKey::try_from(key.as_str()).is_ok(), facts_label_key(&key), "{:?}", key);
    }

    #[test]
    fn label_values_match_the_rules(value in prop_oneof![label_value(), mutated(label_value()), near_miss()]) {
        prop_assert_eq!(LabelValue::try_from(value.as_str()).is_ok(), facts_label_value(&value), "{:?}", value);
    }

    #[test]
    fn valid_taints_are_accepted_and_print_back(text in taint()) {
        prop_assert!(facts_taint(&text), "generator: {text}");
        let parsed = Taint::try_from(text.as_str());
        prop_assert!(parsed.is_ok(), "{text}");
        prop_assert_eq!(parsed.unwrap().to_string(), text);
    }

    #[test]
    fn taints_match_the_rules(text in prop_oneof![mutated(taint()), near_miss()]) {
        prop_assert_eq!(Taint::try_from(text.as_str()).is_ok(), facts_taint(&text), "{:?}", text);
    }

    #[test]
    fn valid_quantities_are_accepted(text in quantity()) {
        prop_assert!(facts_quantity(&text), "generator: {text}");
        prop_assert!(Quantity::try_from(text.as_str()).is_ok(), "{text}");
    }

    /// Signed quantities are valid Kubernetes but meaningless for
    /// reservations, so ours may reject more; never accept less strictly.
    #[test]
    fn accepted_quantities_follow_the_rules(text in prop_oneof![mutated(quantity()), near_miss()]) {
        if Quantity::try_from(text.as_str()).is_ok() {
            prop_assert!(facts_quantity(&text), "{:?}", text);
        }
    }

    #[test]
    fn accepted_eviction_thresholds_are_quantities_or_percentages(
        text in prop_oneof![quantity(), "[0-9]{1,3}(\\.[0-9])?%", mutated(quantity()), near_miss()]
    ) {
        if EvictionThreshold::try_from(text.as_str()).is_ok() {
            // kubelet: ParseFloat of what precedes '%', then 0 <= p <= 100.
            let percent = text
                .strip_suffix('%')
                .and_then(|p| p.parse::<f64>().ok())
                .is_some_and(|p| (0.0..=100.0).contains(&p));
            prop_assert!(percent || facts_quantity(&text), "{:?}", text);
        }
    }
}

// ---------------------------------------------------------------------------
// Rendered TOML parses back to the same structure.

fn policy() -> impl Strategy<Value = Policy> {
    let labels = prop::collection::btree_map(label_key(), label_value(), 0..6);
    let reserved = || {
        prop::collection::btree_map(
            prop::sample::select(ReservedResource::ALL.to_vec()),
            quantity(),
            0..4,
        )
    };
    let eviction = prop::collection::btree_map(
        prop::sample::select(EvictionSignal::ALL.to_vec()),
        prop_oneof![quantity(), "[0-9]{1,2}%"],
        0..4,
    );
    let plugin = (
        any::<Option<bool>>(),
        prop::option::of(prop::sample::select(vec!["index", "uuid"])),
        prop::option::of(prop::sample::select(vec!["none", "time-slicing", "mps"])),
    );
    // A host to download from, or none: the bundle the image carries.
    let bundle = || {
        prop::option::of((
            prop::option::of("[a-z]{1,10}(\\.[a-z]{2,5})?"),
            "[0-9a-f]{64}",
        ))
    };
    (
        (
            "[a-zA-Z0-9-]{1,76}",
            // Any reference without spaces, sometimes pinned by digest.
            "[!-?A-~]{0,59}[a-z0-9](@sha256:[0-9a-f]{64})?",
            any::<bool>(),
            1..=900u64,
        ),
        (labels, reserved(), reserved(), eviction),
        (prop::option::of(1..=1000u32), plugin, (bundle(), bundle())),
        (
            prop::sample::select(vec![OnUnready::Label, OnUnready::Taint]),
            taint(),
            "1\\.[0-9]{1,2}\\.[0-9]",
        ),
    )
        .prop_map(|(boot, maps, node, repair)| {
            let (name, image, fail_boot, deadline) = boot;
            let (labels, kube_reserved, system_reserved, eviction) = maps;
            let (max_pods, (pass_specs, id_strategy, sharing), bundles) = node;
            let (on_unready, taint, karpenter) = repair;
            let mut policy = Policy::default();
            policy.bootstrap.name = BootstrapContainerName::try_from(name.as_str()).unwrap();
            policy.bootstrap.image = image;
            policy.bootstrap.essential = fail_boot;
            policy.repair.on_unready = if fail_boot {
                OnUnready::FailBoot
            } else {
                on_unready
            };
            policy.repair.taint = Taint::try_from(taint.as_str()).unwrap();
            policy.repair.karpenter = karpenter;
            policy.boot.deadline = std::time::Duration::from_secs(deadline);
            policy.node.max_pods = max_pods;
            policy.node.labels = labels
                .iter()
                .map(|(k, v)| {
                    (
                        LabelKey::try_from(k.as_str()).unwrap(),
                        LabelValue::try_from(v.as_str()).unwrap(),
                    )
                })
                .filter(|(k, _)| !k.kubelet_refuses())
                .collect();
            let quantities = |map: BTreeMap<ReservedResource, String>| {
                map.into_iter()
                    .map(|(k, v)| (k, Quantity::try_from(v.as_str()).unwrap()))
                    .collect()
            };
            policy.node.kube_reserved = quantities(kube_reserved);
            policy.node.system_reserved = quantities(system_reserved);
            policy.node.eviction_hard = eviction
                .into_iter()
                .map(|(k, v)| (k, EvictionThreshold::try_from(v.as_str()).unwrap()))
                .collect();
            let plugin_toml = format!(
                "{}{}{}",
                pass_specs.map_or(String::new(), |b| format!("pass-device-specs = {b}\n")),
                id_strategy.map_or(String::new(), |s| format!("device-id-strategy = \"{s}\"\n")),
                sharing.map_or(String::new(), |s| format!(
                    "device-sharing-strategy = \"{s}\"\n"
                )),
            );
            policy.node.nvidia_device_plugin =
                Some(toml::from_str::<NvidiaDevicePlugin>(&plugin_toml).unwrap())
                    .filter(|p| !p.is_empty());
            let bundle = |b: Option<(Option<String>, String)>| {
                b.map(|(host, sha)| {
                    let sha256 = Sha256Hex::try_from(sha.as_str()).unwrap();
                    match host {
                        Some(host) => Bundle::from_url(&format!("https://{host}/dcgm.deb"), sha256),
                        None => Bundle::in_image(sha256),
                    }
                })
            };
            policy.dcgm.bundle.aarch64 = bundle(bundles.0);
            policy.dcgm.bundle.x86_64 = bundle(bundles.1);
            if !policy.dcgm.bundle.is_empty() {
                policy.dcgm.provision = Provision::IfMissing;
            }
            policy
        })
}

proptest! {
    #[test]
    fn rendered_user_data_parses_back(policy in policy()) {
        prop_assert_eq!(policy.validate(), Ok(()));
        prop_assert_eq!(&Policy::parse(&policy.to_toml()).unwrap(), &policy);

        let rendered = render::user_data_toml(&policy);
        let user_data: UserData = toml::from_str(&rendered).unwrap();
        prop_assert_eq!(&user_data, &render::user_data(&policy));
        let kubernetes = user_data.settings.kubernetes.clone().unwrap_or_default();
        prop_assert_eq!(&kubernetes.node_labels, &policy.node.labels);
        prop_assert_eq!(&kubernetes.kube_reserved, &policy.node.kube_reserved);
        prop_assert_eq!(&kubernetes.system_reserved, &policy.node.system_reserved);
        prop_assert_eq!(&kubernetes.eviction_hard, &policy.node.eviction_hard);
        prop_assert_eq!(kubernetes.max_pods, policy.node.max_pods);
        prop_assert_eq!(
            user_data.settings.kubelet_device_plugins.map(|p| p.nvidia),
            policy.node.nvidia_device_plugin.clone()
        );

        let container = &user_data.settings.bootstrap_containers[&policy.bootstrap.name];
        prop_assert_eq!(&container.source, &policy.bootstrap.image);
        prop_assert_eq!(container.essential, policy.bootstrap.essential);
        let embedded = base64::engine::general_purpose::STANDARD.decode(&container.user_data).unwrap();
        let embedded = Policy::parse(std::str::from_utf8(&embedded).unwrap()).unwrap();
        prop_assert_eq!(embedded, policy);
    }
}

// ---------------------------------------------------------------------------
// Rendered EC2NodeClasses pass every CRD, read as kubectl reads YAML.

thread_local! {
    static CRDS: Vec<crd::Crd> = crd::load_all();
}

/// EKS cluster names: a letter or digit, then letters, digits, `-`, `_`;
/// with YAML 1.1 look-alikes on purpose.
fn cluster_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9][a-zA-Z0-9_-]{0,99}",
        prop::sample::select(vec![
            "on",
            "yes",
            "n",
            "1_000",
            "0x1F",
            "1e3",
            "2001-12-14",
            "Off"
        ])
        .prop_map(str::to_owned),
    ]
}

/// Object names: DNS-1123 subdomains of at most 63 characters.
fn node_class_name() -> impl Strategy<Value = String> {
    prop_oneof![
        dns_subdomain().prop_filter("at most 63", |n| n.len() <= 63),
        prop::sample::select(vec![
            "y", "n", "on", "true", "1e3", "0x1f", "123", "1.5", "null"
        ])
        .prop_map(str::to_owned),
    ]
}

proptest! {
    #[test]
    fn rendered_node_classes_pass_every_crd(
        policy in policy(),
        cluster in cluster_name(),
        name in node_class_name(),
        role in prop::option::of("[ -~]{1,40}|[^\\p{Cc}]{1,10}"),
    ) {
        let options = NodeClassOptions::new(&cluster, role.as_deref(), &name, "latest").unwrap();
        let yaml = render::render(&policy, Format::Ec2nodeclass, Some(&options), false).unwrap();
        let document = yaml11::load(&yaml).unwrap();
        let meant = serde_json::to_value(render::node_class(&policy, &options)).unwrap();
        prop_assert_eq!(&document, &meant, "{}", yaml);
        let failures: Vec<String> = CRDS.with(|crds| {
            crds.iter().filter_map(|crd| crd.check(&document).err()).collect()
        });
        prop_assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), yaml);
    }

    #[test]
    fn node_class_names_are_accepted_exactly_when_kubernetes_takes_them(
        name in prop_oneof![node_class_name(), mutated(node_class_name()), near_miss()],
    ) {
        let accepted = NodeClassOptions::new("demo", None, &name, "latest").is_ok();
        prop_assert_eq!(accepted, facts_dns_subdomain(&name) && name.len() <= 63, "{:?}", name);
    }
}

// ---------------------------------------------------------------------------
// Repair forecast.

const NOW: &str = "2025-06-10T03:05:00Z";
const VERSIONS: [Version; 5] = [
    Version::new(1, 1, 0),
    Version::new(1, 2, 0),
    Version::new(1, 4, 0),
    Version::new(1, 6, 0),
    Version::new(1, 7, 0),
];

fn node(
    name: &str,
    pool: &str,
    condition: Option<(&str, ConditionStatus, OffsetDateTime)>,
) -> Node {
    Node {
        name: name.to_owned(),
        labels: BTreeMap::from([
            (NODECLASS_LABEL.to_owned(), "default".to_owned()),
            (NODEPOOL_LABEL.to_owned(), pool.to_owned()),
        ]),
        taints: Vec::new(),
        conditions: condition
            .map(|(kind, status, since)| Condition {
                kind: kind.to_owned(),
                status,
                reason: None,
                message: None,
                since,
            })
            .into_iter()
            .collect(),
    }
}

fn options(karpenter: Version) -> Options {
    Options {
        karpenter,
        node_repair: true,
        now: parse_rfc3339(NOW).unwrap(),
    }
}

/// The trigger's (seconds left, termination time) for one unhealthy node.
fn termination(version: Version, policy: usize, since: OffsetDateTime) -> (i64, OffsetDateTime) {
    let model = model_for(version).unwrap();
    let policy = &model.policies[policy % model.policies.len()];
    let input = NodeInput::Single(node(
        "n",
        "gpu",
        Some((policy.condition, policy.status, since)),
    ));
    let result = forecast(&input, &[], model, options(version), &AgentInfo::assumed());
    let trigger = result.nodes[0]
        .trigger
        .clone()
        .expect("a matching condition triggers");
    let at = parse_rfc3339(&trigger.termination_time).expect("termination time is RFC 3339");
    (trigger.seconds_left, at)
}

proptest! {
    #[test]
    fn termination_is_monotonic_in_last_transition_time(
        version in prop::sample::select(VERSIONS.to_vec()),
        policy in 0..8usize,
        a in -400_000_000i64..400_000_000,
        b in -400_000_000i64..400_000_000,
    ) {
        let now = parse_rfc3339(NOW).unwrap();
        let (early, late) = (a.min(b), a.max(b));
        let (left_early, at_early) = termination(version, policy, now + Duration::seconds(early));
        let (left_late, at_late) = termination(version, policy, now + Duration::seconds(late));
        prop_assert!(left_early <= left_late);
        prop_assert!(at_early <= at_late);
        // Shifting the transition shifts the termination by the same amount.
        prop_assert_eq!(at_late - at_early, Duration::seconds(late - early));
        prop_assert_eq!(left_late - left_early, late - early);
    }

    /// A pool of `size` nodes with `bad` unhealthy ones is blocked exactly
    /// when `bad` exceeds 20% of `size`, rounded up.
    #[test]
    fn pool_is_blocked_above_twenty_percent_rounded_up(size in 1..=200usize, bad_share in 0.0..=1.0f64) {
        let bad = ((size as f64) * bad_share).round() as usize;
        let now = parse_rfc3339(NOW).unwrap();
        let since = now - Duration::minutes(30);
        let nodes: Vec<Node> = (0..size)
            .map(|i| {
                let condition = (i < bad).then_some(("AcceleratedHardwareReady", ConditionStatus::False, since));
                node(&format!("n{i}"), "gpu", condition)
            })
            .collect();
        let version = Version::new(1, 4, 0);
        let result = forecast(&NodeInput::List(nodes), &[], model_for(version).unwrap(), options(version), &AgentInfo::assumed());
        let limit = (1..=size).find(|m| 5 * m >= size).unwrap();
        for forecast in &result.nodes {
            let group = forecast.group.as_ref().unwrap();
            prop_assert_eq!(group.nodes, size);
            prop_assert_eq!(group.unhealthy, bad);
            prop_assert_eq!(group.max_unhealthy, limit);
            prop_assert_eq!(group.blocked, bad > limit);
        }
        let expected = if bad > limit { 0 } else { bad };
        prop_assert_eq!(result.nodes.iter().filter(|n| n.verdict == Verdict::WillBeReplaced).count(), expected);
    }
}

/// ceil(0.2 * n), in integers, for every pool size from 1 to 200; pools of
/// 1–5 tolerate exactly one unhealthy node (FACTS.md §1.6).
#[test]
fn twenty_percent_threshold_rounds_up_for_pools_of_1_to_200() {
    for n in 1..=200usize {
        // ceil(n / 5): the smallest m with 5m >= n.
        let ceil = (1..=n).find(|m| 5 * m >= n).unwrap();
        assert_eq!(max_unhealthy(n), ceil, "pool of {n}");
    }
    for n in 1..=5 {
        assert_eq!(max_unhealthy(n), 1, "pool of {n}");
    }
}
