//! `render`'s claims, held to what upstream really does rather than to our
//! reading of it:
//! - every EC2NodeClass it writes (the checked-in golden files, every example
//!   rendered with awkward flags, every YAML format end to end) passes the
//!   `v1` schema, the CEL rules and the name rule of every EC2NodeClass CRD
//!   of karpenter-provider-aws in the shared folder (`common/crd.rs`), as
//!   kubectl reads it: with YAML 1.1 rules (`common/yaml11.rs`);
//! - the YAML means what the typed value means, scalar by scalar;
//! - `--explain` states Karpenter's merge exactly as `render::merge::RULES`
//!   does (no other merge claim), the README carries each rule with its
//!   upstream citation and the size reserve, and what `render` writes
//!   agrees with each rule's action.
//!
//! Property-generated policies go through the same CRD checks in
//! `tests/properties.rs`.

#[path = "common/crd.rs"]
mod crd;
#[path = "common/yaml11.rs"]
mod yaml11;

use std::path::PathBuf;
use std::process::{Command, Output};

use clap::ValueEnum;
use serde_json::Value;

use accelready::bottlerocket::userdata::UserData;
use accelready::cli::RenderFormat;
use accelready::policy::Policy;
use accelready::render::{self, merge, Format, NodeClassOptions};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn accelready(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_accelready"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run accelready")
}

/// `userdata/<name>.toml` example policies.
fn examples() -> Vec<(String, Policy)> {
    let mut names: Vec<String> = std::fs::read_dir(repo().join("userdata"))
        .expect("userdata/ exists")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".toml") && !name.ends_with(".userdata.toml"))
        .map(|name| name.trim_end_matches(".toml").to_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 5, "{names:?}");
    names
        .into_iter()
        .map(|name| {
            let policy = Policy::load(&repo().join(format!("userdata/{name}.toml")))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, policy)
        })
        .collect()
}

/// `yaml` as kubectl reads it; it must also mean the same to a YAML 1.2
/// reader (serde_yaml), scalar by scalar.
fn read_as_kubectl(yaml: &str) -> Value {
    let document = yaml11::load(yaml).unwrap_or_else(|e| panic!("{e}:\n{yaml}"));
    let yaml12: Value = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}:\n{yaml}"));
    assert_eq!(
        document, yaml12,
        "YAML 1.1 and 1.2 readers disagree on:\n{yaml}"
    );
    document
}

/// The document `render --format ec2nodeclass` means to write.
fn meant(policy: &Policy, options: &NodeClassOptions) -> Value {
    serde_json::to_value(render::node_class(policy, options)).expect("to JSON")
}

fn check_all(crds: &[crd::Crd], document: &Value, what: &str) {
    for crd in crds {
        crd.check(document)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    }
}

#[test]
fn the_yaml_1_1_reader_reads_what_kubectl_reads() {
    yaml11::self_check();
}

#[test]
fn the_crd_checks_can_fail() {
    let crds = crd::load_all();
    let options = NodeClassOptions::new("demo", None, "gpu", "latest").unwrap();
    let good = meant(&Policy::builtin(), &options);
    crd::self_check(&crds, &good);
    for bad in ["x86_64-gpu", "Gpu", "-a", "a.", &"a".repeat(254), ""] {
        assert!(!crd::dns1123_subdomain(bad), "{bad}");
    }
    for ok in ["x86-64-gpu", "a", "1e3", "a.b-c", &"a".repeat(253)] {
        assert!(crd::dns1123_subdomain(ok), "{ok}");
    }
}

#[test]
fn every_golden_ec2nodeclass_passes_every_crd_as_kubectl_reads_it() {
    let crds = crd::load_all();
    for (name, policy) in examples() {
        let path = repo().join(format!("userdata/{name}.ec2nodeclass.yaml"));
        let yaml = std::fs::read_to_string(&path).unwrap();
        let document = read_as_kubectl(&yaml);
        let options = NodeClassOptions::new("demo", None, &name, "bottlerocket@latest").unwrap();
        assert_eq!(document, meant(&policy, &options), "{}", path.display());
        check_all(&crds, &document, &path.display().to_string());
    }
}

#[test]
fn awkward_names_are_quoted_and_pass_every_crd() {
    let crds = crd::load_all();
    // Valid EKS cluster names, any non-empty role, valid object names: each
    // of them something else to a YAML 1.1 reader when written plain.
    let clusters = [
        "on",
        "yes",
        "n",
        "1_000",
        "true",
        "Off",
        "0x1F",
        "1e3",
        "007",
        "2001-12-14",
        "Y",
        "null",
        "NULL",
        "1-2",
    ];
    let roles = [
        "~",
        ".inf",
        "-.Inf",
        ".NaN",
        "null",
        "2001-12-14t21:59:43.10-05:00",
        "<<",
        "=",
        "0o17",
        "y",
        "1.5",
        "-1",
        "190:20:30",
        "a: b",
        "#x",
        "'q'",
        "\"q\"",
        "ünï",
    ];
    let names = [
        "on",
        "yes",
        "n",
        "y",
        "true",
        "1e3",
        "0x1f",
        "123",
        "2001-12-14",
        "1.5",
        "0.0.0",
        "null",
        "x86-64-gpu",
    ];
    let examples = examples();
    let mut cases = 0;
    for (i, cluster) in clusters.iter().enumerate() {
        for (j, role) in roles.iter().map(Some).chain([None]).enumerate() {
            let name = names[(i + j) % names.len()];
            let (example, policy) = &examples[(i + j) % examples.len()];
            let options = NodeClassOptions::new(cluster, role.copied(), name, "v1.39.1")
                .unwrap_or_else(|e| panic!("{e}"));
            let yaml = render::render(policy, Format::Ec2nodeclass, Some(&options), false).unwrap();
            let document = read_as_kubectl(&yaml);
            assert_eq!(document, meant(policy, &options), "{example}:\n{yaml}");
            check_all(
                &crds,
                &document,
                &format!("{example} --cluster {cluster:?} --role {role:?}"),
            );
            cases += 1;
        }
    }
    assert_eq!(cases, clusters.len() * (roles.len() + 1));
}

/// Every `--format` that writes YAML, end to end with the built binary: it
/// reads the same under YAML 1.1 and 1.2 rules, and an EC2NodeClass passes
/// every CRD. A new YAML format is covered once it says so in
/// `render::Format::is_yaml`.
#[test]
fn every_yaml_format_reads_back_as_written() {
    let crds = crd::load_all();
    let mut yaml_formats = 0;
    for format in RenderFormat::value_variants() {
        let value = format.to_possible_value().expect("visible format");
        if !Format::from(*format).is_yaml() {
            continue;
        }
        yaml_formats += 1;
        for (name, _) in examples() {
            let policy = format!("userdata/{name}.toml");
            let output = accelready(&[
                "render",
                &policy,
                "--format",
                value.get_name(),
                "--cluster",
                "on",
                "--name",
                "yes",
            ]);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                output.status.success(),
                "{name} {}: {stderr}",
                value.get_name()
            );
            let yaml = String::from_utf8(output.stdout).unwrap();
            let document = read_as_kubectl(&yaml);
            if document["kind"] == "EC2NodeClass" {
                check_all(
                    &crds,
                    &document,
                    &format!("{name} --format {}", value.get_name()),
                );
            }
        }
    }
    assert!(yaml_formats >= 1);
}

/// All YAML goes through `render::yaml`: no other module may call
/// serde_yaml's writers (they leave `on`, `yes`, `n` unquoted).
#[test]
fn no_yaml_is_written_around_the_emitter() {
    let mut stack = vec![repo().join("src")];
    let mut offenders = Vec::new();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.ends_with("render/yaml.rs") || path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for writer in [
                "serde_yaml::to_string",
                "serde_yaml::to_writer",
                "serde_yaml::Serializer",
            ] {
                if text.contains(writer) {
                    offenders.push(format!("{}: {writer}", path.display()));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "write YAML with render::yaml::to_string: {offenders:?}"
    );
}

#[test]
fn explain_states_the_merge_exactly_as_the_rules_table() {
    let statements: Vec<String> = merge::RULES.iter().map(|r| r.statement()).collect();
    for (name, _) in examples() {
        let output = accelready(&["render", &format!("userdata/{name}.toml"), "--explain"]);
        assert!(output.status.success(), "{name}");
        let text = String::from_utf8(output.stdout).unwrap();
        let claims: Vec<&str> = text
            .lines()
            .filter(|line| line.contains("Karpenter merge"))
            .collect();
        assert_eq!(
            claims, statements,
            "{name}: --explain's merge claims are not the table's"
        );
        let size = render::user_data_toml(
            &Policy::load(&repo().join(format!("userdata/{name}.toml"))).unwrap(),
        )
        .len();
        assert!(
            text.contains(&render::size_statement(size)),
            "{name}:\n{text}"
        );
    }
}

/// `1234` -> `1,234`, as the README writes numbers.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[test]
fn the_readme_carries_each_rule_its_source_and_the_reserve() {
    // Compared with runs of whitespace folded, so the README may wrap lines.
    let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let readme = flat(&std::fs::read_to_string(repo().join("README.md")).unwrap());
    for rule in merge::RULES {
        for text in [rule.keys, rule.karpenter, rule.render] {
            assert!(readme.contains(&flat(text)), "README lacks: {text}");
        }
        for source in rule.sources {
            assert!(
                readme.contains(&source.cite()),
                "README lacks the source {}",
                source.cite()
            );
        }
    }
    for number in [
        merge::MERGE_RESERVE,
        merge::NODECLASS_USER_DATA_BUDGET,
        merge::USER_DATA_LIMIT,
        merge::NODEPOOL_ALLOWANCE,
    ] {
        assert!(
            readme.contains(&thousands(number)),
            "README lacks {}",
            thousands(number)
        );
    }
    for addition in merge::ADDITIONS {
        let row = format!(
            "| {} | `{}` |",
            thousands(addition.bytes),
            addition.source.cite()
        );
        assert!(
            readme.contains(&row),
            "README's size table lacks the row ending {row}"
        );
    }
}

/// The settings.kubernetes keys Karpenter's struct keeps and `render`
/// writes; the rule that says so must name each.
const KUBERNETES_KEYS_WRITTEN: [&str; 5] = [
    "max-pods",
    "node-labels",
    "kube-reserved",
    "system-reserved",
    "eviction-hard",
];

/// What `render` writes agrees with each rule's action.
#[test]
fn what_render_writes_follows_each_rule() {
    for (name, policy) in examples() {
        let toml_text = render::user_data_toml(&policy);
        let user_data: toml::Table = toml::from_str(&toml_text).unwrap();
        let settings = user_data["settings"].as_table().unwrap();
        let kubernetes = settings
            .get("kubernetes")
            .and_then(|k| k.as_table())
            .cloned()
            .unwrap_or_default();
        let options = NodeClassOptions::new("demo", None, &name, "latest").unwrap();
        let node_class = render::node_class(&policy, &options);
        for rule in merge::RULES {
            match rule.action {
                merge::Action::MustParse => {
                    let _: UserData = toml::from_str(&toml_text).unwrap();
                }
                merge::Action::Overwritten | merge::Action::Replaced => {
                    for key in rule
                        .keys
                        .trim_start_matches("settings.kubernetes.")
                        .split(", ")
                    {
                        assert!(!kubernetes.contains_key(key), "{name}: {key} written");
                    }
                }
                merge::Action::Merged => {
                    let labels = kubernetes.get("node-labels").and_then(|l| l.as_table());
                    assert_eq!(
                        labels.map_or(0, |l| l.len()),
                        policy.node.labels.len(),
                        "{name}"
                    );
                }
                merge::Action::AlwaysWritten => {
                    let kubelet_max_pods =
                        node_class.spec.kubelet.as_ref().and_then(|k| k.max_pods);
                    assert_eq!(kubelet_max_pods, policy.node.max_pods, "{name}");
                    assert!(rule.render.contains("spec.kubelet.maxPods"));
                }
                merge::Action::ReplacedWhenSpecKubeletSets => {
                    let kubelet = serde_json::to_value(&node_class.spec.kubelet).unwrap();
                    for (key, field) in [
                        ("kube-reserved", "kubeReserved"),
                        ("system-reserved", "systemReserved"),
                        ("eviction-hard", "evictionHard"),
                    ] {
                        let in_user_data = serde_json::to_value(kubernetes.get(key)).unwrap();
                        assert_eq!(in_user_data, kubelet[field], "{name}: {key}");
                    }
                }
                merge::Action::UnknownKeysDropped => {
                    for key in kubernetes.keys() {
                        assert!(
                            KUBERNETES_KEYS_WRITTEN.contains(&key.as_str()),
                            "{name}: {key}"
                        );
                    }
                    for key in KUBERNETES_KEYS_WRITTEN {
                        assert!(rule.render.contains(key), "{key}");
                    }
                }
                merge::Action::PassedThrough => {
                    for section in settings.keys().filter(|k| *k != "kubernetes") {
                        assert!(rule.keys.contains(section.as_str()), "{name}: {section}");
                    }
                }
            }
        }
    }
}

#[test]
fn size_claims_hold_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("many-labels.toml");
    // Labels until the user-data is over the EC2NodeClass budget (as the
    // issue's 16,352-byte policy with 108 labels was).
    let with_labels = |n: usize| {
        let mut text = String::from("[node.labels]\n");
        for i in 0..n {
            text.push_str(&format!(
                "\"team-{i:03}.example.com/size\" = \"value-{i:03}\"\n"
            ));
        }
        text
    };
    let text = (1..400)
        .map(with_labels)
        .find(|text| {
            render::user_data_toml(&Policy::parse(text).unwrap()).len()
                > merge::NODECLASS_USER_DATA_BUDGET
        })
        .unwrap();
    std::fs::write(&policy, text).unwrap();
    let policy = policy.to_str().unwrap();
    let size = accelready(&["render", policy]).stdout.len();
    assert!(
        (merge::NODECLASS_USER_DATA_BUDGET..=merge::USER_DATA_LIMIT).contains(&size),
        "{size}"
    );
    let node_class = accelready(&[
        "render",
        policy,
        "--format",
        "ec2nodeclass",
        "--cluster",
        "demo",
    ]);
    assert_eq!(node_class.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&node_class.stderr);
    assert!(
        stderr.contains(&format!("up to {} bytes", merge::MERGE_RESERVE)),
        "{stderr}"
    );
    assert!(!stderr.contains("--gzip"), "{stderr}");
    let plain = accelready(&["render", policy]);
    assert!(plain.status.success());
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(
        stderr.contains("EC2NodeClass's spec.userData may hold"),
        "{stderr}"
    );
    assert!(!stderr.contains("use --gzip"), "{stderr}");
}
