//! `accelready render`, end to end with the built binary: every example policy
//! in `userdata/` renders to its checked-in golden files byte for byte (and
//! parses back into the same typed structures), every `userdata/fails/` policy
//! is rejected with the message its `# expect:` line names, and the flags do
//! what README says.
//!
//! Regenerate the golden files after an intended change with
//! `UPDATE_GOLDEN=1 cargo test --test render`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine as _;

use accelready::bottlerocket::userdata::UserData;
use accelready::policy::{EngineSource, Policy};
use accelready::render::{self, Ec2NodeClass, NodeClassOptions};

/// DCGM pinned (and installed) for aarch64 only.
const ARM_BUNDLE: &str = "[dcgm]\nprovision = \"if-missing\"\n[dcgm.bundle.aarch64]\nurl = \"https://m.example/datacenter-gpu-manager-4-core_4.6.1-1_arm64.deb\"\nsha256 = \"2222222222222222222222222222222222222222222222222222222222222222\"\n";
/// DCGM pinned (and installed) for both architectures.
const BOTH_BUNDLES: &str = "[dcgm]\nprovision = \"if-missing\"\n[dcgm.bundle.aarch64]\nurl = \"https://m.example/datacenter-gpu-manager-4-core_4.6.1-1_arm64.deb\"\nsha256 = \"2222222222222222222222222222222222222222222222222222222222222222\"\n[dcgm.bundle.x86_64]\nurl = \"https://m.example/datacenter-gpu-manager-4-core_4.6.1-1_amd64.deb\"\nsha256 = \"1111111111111111111111111111111111111111111111111111111111111111\"\n";

const CLUSTER: &str = "demo";

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

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

/// `userdata/<name>.toml` policies (not the rendered `.userdata.toml`).
fn examples() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo().join("userdata"))
        .expect("userdata/ exists")
        .map(|entry| {
            entry
                .expect("readable entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".toml") && !name.ends_with(".userdata.toml"))
        .map(|name| name.trim_end_matches(".toml").to_owned())
        .collect();
    names.sort();
    names
}

/// The command-line arguments that render each golden file of an example.
fn golden_args(name: &str) -> [(String, Vec<String>); 3] {
    let policy = format!("userdata/{name}.toml");
    [
        (
            format!("userdata/{name}.agent-values.yaml"),
            vec![
                "render".into(),
                policy.clone(),
                "--format".into(),
                "agent-values".into(),
            ],
        ),
        (
            format!("userdata/{name}.userdata.toml"),
            vec!["render".into(), policy.clone()],
        ),
        (
            format!("userdata/{name}.ec2nodeclass.yaml"),
            vec![
                "render".into(),
                policy,
                "--format".into(),
                "ec2nodeclass".into(),
                "--cluster".into(),
                CLUSTER.into(),
                "--name".into(),
                name.into(),
            ],
        ),
    ]
}

#[test]
fn the_required_examples_exist() {
    let names = examples();
    for required in [
        "g5g-incident",
        "x86-64-gpu",
        "label-only",
        "fail-boot",
        "default",
        "private-subnet",
    ] {
        assert!(
            names.iter().any(|n| n == required),
            "userdata/{required}.toml missing"
        );
    }
}

#[test]
fn every_example_matches_its_golden_files() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    for name in examples() {
        for (golden, args) in golden_args(&name) {
            let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
            let flag = if update { "--output" } else { "--check" };
            args.extend([flag, golden.as_str()]);
            let output = accelready(&args);
            assert!(
                output.status.success(),
                "{golden} is stale or failed to render:\n{}{}\nregenerate: UPDATE_GOLDEN=1 cargo test --test render",
                stdout(&output),
                stderr(&output)
            );
        }
    }
}

#[test]
fn golden_files_parse_back_into_the_same_structures() {
    for name in examples() {
        let policy =
            Policy::load(&repo().join(format!("userdata/{name}.toml"))).expect("example is valid");
        let toml_text =
            std::fs::read_to_string(repo().join(format!("userdata/{name}.userdata.toml"))).unwrap();
        assert!(toml_text.ends_with('\n'), "{name}");
        let user_data: UserData = toml::from_str(&toml_text).expect("golden user-data parses");
        assert_eq!(user_data, render::user_data(&policy), "{name}");

        // The node receives the same policy, decoded from the container's user-data.
        let container = user_data
            .settings
            .bootstrap_containers
            .get(&policy.bootstrap.name)
            .unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(&container.user_data)
            .unwrap();
        let on_node = Policy::parse(std::str::from_utf8(&decoded).unwrap()).unwrap();
        assert_eq!(on_node, policy, "{name}");

        let yaml =
            std::fs::read_to_string(repo().join(format!("userdata/{name}.ec2nodeclass.yaml")))
                .unwrap();
        let node_class: Ec2NodeClass =
            serde_yaml::from_str(&yaml).expect("golden EC2NodeClass parses");
        let options = NodeClassOptions::new(CLUSTER, None, &name, "bottlerocket@latest").unwrap();
        assert_eq!(node_class, render::node_class(&policy, &options), "{name}");
        assert_eq!(
            node_class.spec.user_data, toml_text,
            "{name}: userData is the user-data TOML"
        );
    }
}

#[test]
fn every_failing_policy_is_rejected_with_its_message() {
    let dir = repo().join("userdata/fails");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|ext| ext != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let expected = text
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("# expect: "))
            .unwrap_or_else(|| {
                panic!(
                    "{}: first line must be '# expect: <substring>'",
                    path.display()
                )
            });
        let output = accelready(&["render", path.to_str().unwrap()]);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{}: {}",
            path.display(),
            stderr(&output)
        );
        assert!(
            stdout(&output).is_empty(),
            "{}: nothing on stdout",
            path.display()
        );
        assert!(
            stderr(&output).contains(expected),
            "{}: expected '{expected}' in:\n{}",
            path.display(),
            stderr(&output)
        );
        count += 1;
    }
    assert!(count >= 10, "only {count} failing cases");
}

#[test]
fn no_arguments_renders_the_builtin_policy_and_warns() {
    let output = accelready(&["render"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let user_data: UserData = toml::from_str(&text).unwrap();
    assert_eq!(user_data, render::user_data(&Policy::builtin()));
    let golden = std::fs::read_to_string(repo().join("userdata/default.userdata.toml")).unwrap();
    assert_eq!(text, golden);
    let log = stderr(&output);
    assert!(
        log.contains("about 11 minutes after they become Ready"),
        "{log}"
    );
    assert!(log.contains("placeholder"), "{log}");
    // Deterministic: the same bytes twice.
    assert_eq!(stdout(&accelready(&["render"])), text);
}

#[test]
fn strict_turns_warnings_into_errors() {
    let output = accelready(&["render", "--strict"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stdout(&output).is_empty());
    assert!(
        stderr(&output).contains("--strict: 2 warning(s)"),
        "{}",
        stderr(&output)
    );

    let small = accelready(&[
        "render",
        "userdata/label-only.toml",
        "--strict",
        "--instance-memory",
        "2Gi",
    ]);
    assert_eq!(
        small.status.code(),
        Some(0),
        "node repair off: no memory warning"
    );
    let small = accelready(&[
        "render",
        "userdata/x86-64-gpu.toml",
        "--strict",
        "--instance-memory",
        "2Gi",
    ]);
    assert_eq!(small.status.code(), Some(2));
    assert!(stderr(&small).contains("under 4Gi"), "{}", stderr(&small));
}

#[test]
fn check_reports_a_stale_file_with_a_diff() {
    let dir = tempfile::tempdir().unwrap();
    let stale = dir.path().join("userdata.toml");
    let fresh = stdout(&accelready(&["render", "userdata/label-only.toml"]));
    std::fs::write(
        &stale,
        fresh.replace("essential = false", "essential = true"),
    )
    .unwrap();
    let output = accelready(&[
        "render",
        "userdata/label-only.toml",
        "--check",
        stale.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    let diff = stdout(&output);
    assert!(
        diff.contains("-essential = true\n+essential = false\n"),
        "{diff}"
    );
    assert!(diff.starts_with("--- "), "{diff}");
    assert!(stderr(&output).contains("is stale"), "{}", stderr(&output));
    assert!(stderr(&output).contains("--output"), "{}", stderr(&output));

    let missing = accelready(&[
        "render",
        "--check",
        dir.path().join("nope").to_str().unwrap(),
    ]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr(&missing).contains("cannot read"),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn output_writes_the_same_bytes_as_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.yaml");
    let args = [
        "render",
        "userdata/fail-boot.toml",
        "--format",
        "ec2nodeclass",
        "--cluster",
        "prod",
    ];
    let printed = stdout(&accelready(&args));
    let mut with_output = args.to_vec();
    with_output.extend(["--output", file.to_str().unwrap()]);
    let output = accelready(&with_output);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).is_empty());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), printed);
    assert!(printed.contains("role: KarpenterNodeRole-prod"));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary file left"
    );
}

#[test]
fn gzip_output_is_base64_of_the_user_data() {
    let output = accelready(&["render", "userdata/x86-64-gpu.toml", "--gzip"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let encoded = stdout(&output);
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim_end())
        .unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text)
        .unwrap();
    let plain = std::fs::read_to_string(repo().join("userdata/x86-64-gpu.userdata.toml")).unwrap();
    assert_eq!(text, plain);
    assert_eq!(
        stdout(&accelready(&[
            "render",
            "userdata/x86-64-gpu.toml",
            "--gzip"
        ])),
        encoded
    );

    let node_class = accelready(&[
        "render",
        "--gzip",
        "--format",
        "ec2nodeclass",
        "--cluster",
        "x",
    ]);
    assert_eq!(node_class.status.code(), Some(2));
}

#[test]
fn ec2nodeclass_needs_a_cluster_and_a_valid_alias() {
    let output = accelready(&["render", "--format", "ec2nodeclass"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--cluster"), "{}", stderr(&output));
    let output = accelready(&[
        "render",
        "--format",
        "ec2nodeclass",
        "--cluster",
        "c",
        "--ami-alias",
        "al2023@latest",
    ]);
    assert_eq!(output.status.code(), Some(2));
    let output = accelready(&[
        "render",
        "--format",
        "ec2nodeclass",
        "--cluster",
        "c",
        "--ami-alias",
        "v1.39.1",
        "--role",
        "MyRole",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let node_class: Ec2NodeClass = serde_yaml::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        node_class.spec.ami_selector_terms[0].alias,
        "bottlerocket@v1.39.1"
    );
    assert_eq!(node_class.spec.role, "MyRole");
}

#[test]
fn the_incident_example_renders_both_containers_from_one_policy() {
    let output = accelready(&["render", "userdata/g5g-incident.toml"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let user_data: UserData = toml::from_str(&stdout(&output)).unwrap();
    let bootstrap = &user_data.settings.bootstrap_containers;
    let host = &user_data.settings.host_containers;
    assert_eq!((bootstrap.len(), host.len()), (1, 1));
    let (boot, engine) = (
        bootstrap.values().next().unwrap(),
        host.values().next().unwrap(),
    );
    assert_eq!(
        host.keys().next().unwrap().as_str(),
        "accelready-hostengine"
    );
    assert_eq!(engine.source, boot.source);
    assert_eq!(engine.user_data, boot.user_data);
    assert!(engine.enabled && engine.superpowered);
    // run = "never": no host container.
    let dir = tempfile::tempdir().unwrap();
    let never = dir.path().join("never.toml");
    std::fs::write(&never, "[hostengine]\nrun = \"never\"\n").unwrap();
    let text = stdout(&accelready(&["render", never.to_str().unwrap()]));
    assert!(
        text.contains("bootstrap-containers") && !text.contains("host-containers"),
        "{text}"
    );
}

#[test]
fn explain_says_what_will_happen() {
    let output = accelready(&[
        "render",
        "userdata/g5g-incident.toml",
        "--explain",
        "--format",
        "ec2nodeclass",
        "--cluster",
        "demo",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    for expected in [
        "mode = \"always\"",
        "DCGM on aarch64: when missing, download https://developer.download.nvidia.com/",
        "nv-hostengine",
        "Host container 'accelready-hostengine' (superpowered, enabled)",
        "127.0.0.1:5555",
        "startupTaints:",
        "Karpenter merge: settings.kubernetes.node-taints: always replaced",
        "Karpenter merge: settings.kubernetes.max-pods: always written",
        "spec.userData may hold at most 13378 bytes",
        "Warnings: none.",
    ] {
        assert!(text.contains(expected), "missing '{expected}' in:\n{text}");
    }
    let default = stdout(&accelready(&["render", "--explain"]));
    assert!(default.contains("about 11 minutes"), "{default}");
    // As plain user-data, its max-pods = 58 would be lost under Karpenter.
    let plain = stdout(&accelready(&[
        "render",
        "userdata/g5g-incident.toml",
        "--explain",
    ]));
    assert!(plain.contains("Warnings (1):"), "{plain}");
    assert!(plain.contains("node.max-pods = 58 is written"), "{plain}");
}

#[test]
fn node_class_names_are_kubernetes_names() {
    let output = accelready(&[
        "render",
        "userdata/x86-64-gpu.toml",
        "--format",
        "ec2nodeclass",
        "--cluster",
        "demo",
        "--name",
        "x86_64-gpu",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stdout(&output).is_empty());
    let log = stderr(&output);
    assert!(log.contains("invalid --name 'x86_64-gpu'"), "{log}");
    assert!(log.contains("DNS-1123"), "{log}");
    let output = accelready(&[
        "render",
        "--format",
        "ec2nodeclass",
        "--cluster",
        "my cluster",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("invalid --cluster 'my cluster'"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn max_pods_in_plain_user_data_is_called_informational() {
    let output = accelready(&["render", "userdata/x86-64-gpu.toml"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let log = stderr(&output);
    assert!(
        log.contains("node.max-pods = 110 is written to settings.kubernetes.max-pods, but when Karpenter launches the node it always overwrites max-pods"),
        "{log}"
    );
    let node_class = accelready(&[
        "render",
        "userdata/x86-64-gpu.toml",
        "--format",
        "ec2nodeclass",
        "--cluster",
        "demo",
    ]);
    assert!(node_class.status.success(), "{}", stderr(&node_class));
    assert!(
        !stderr(&node_class).contains("max-pods"),
        "{}",
        stderr(&node_class)
    );
    assert!(stdout(&node_class).contains("    maxPods: 110\n"));
}

/// The agent values of every example, parsed, keep the chart's dcgm-server off
/// exactly the nodes accelready's host engine serves (judged by the same
/// placement rules `diagnose` uses).
#[test]
fn agent_values_keep_the_charts_engine_off_accelreadys_nodes() {
    use accelready::repair::kube::{DaemonSet, Node, NodeSelectorTerm};
    use accelready::repair::placement::placement;
    use std::collections::BTreeMap;

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Values {
        dcgm_agent: Option<DcgmAgent>,
        node_agent: Option<serde_yaml::Value>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct DcgmAgent {
        enabled: Option<bool>,
        affinity: Option<serde_yaml::Value>,
    }

    let node = |arch: &str, instance: &str, accelready: bool| {
        let mut labels = BTreeMap::from([
            ("kubernetes.io/arch".to_owned(), arch.to_owned()),
            ("kubernetes.io/os".to_owned(), "linux".to_owned()),
            (
                "node.kubernetes.io/instance-type".to_owned(),
                instance.to_owned(),
            ),
        ]);
        if accelready {
            labels.insert("accelready.io/dcgm".to_owned(), "ready".to_owned());
        }
        Node {
            name: format!("{arch}-{instance}-{accelready}"),
            labels,
            taints: Vec::new(),
            conditions: Vec::new(),
        }
    };
    let dcgm_server = |values: &Values| {
        let affinity = values
            .dcgm_agent
            .as_ref()
            .and_then(|d| d.affinity.clone())
            .unwrap();
        let terms: Vec<NodeSelectorTerm> = serde_yaml::from_value(
            affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"]
                .clone(),
        )
        .unwrap();
        DaemonSet {
            name: "dcgm-server".to_owned(),
            node_selector: BTreeMap::from([("kubernetes.io/os".to_owned(), "linux".to_owned())]),
            required_terms: Some(terms),
            ..DaemonSet::default()
        }
    };
    // Every example wants an engine on aarch64 only (the default
    // [hostengine]); those that install DCGM there are served by it.
    for name in examples() {
        // Rendered afresh (the golden files are compared byte for byte elsewhere).
        let text = stdout(&accelready(&[
            "render",
            &format!("userdata/{name}.toml"),
            "--format",
            "agent-values",
        ]));
        assert!(
            text.starts_with("# Helm values for the EKS node monitoring agent's chart"),
            "{name}"
        );
        assert!(
            text.contains("Fits chart versions v1.2.0 – v1.7.x"),
            "{name}: {text}"
        );
        let values: Values = serde_yaml::from_str(&text).unwrap();
        let policy = Policy::load(&repo().join(format!("userdata/{name}.toml"))).unwrap();
        if policy.engine_for(accelready::Arch::Aarch64) != EngineSource::Accelready {
            // No DCGM to run on aarch64: the chart keeps its defaults.
            assert!(
                values.dcgm_agent.is_none() && values.node_agent.is_none(),
                "{name}: {text}"
            );
            assert!(text.contains("nothing to set"), "{name}: {text}");
            continue;
        }
        assert!(values.node_agent.is_none(), "{name}");
        let ds = dcgm_server(&values);
        let cases = [
            (node("arm64", "g5g.xlarge", true), false), // accelready's engine
            (node("amd64", "g5.xlarge", true), true),   // accelready node, not served
            (node("amd64", "g5.xlarge", false), true),  // a GPU node without accelready
            (node("arm64", "g5g.xlarge", false), false), // the chart's default: amd64 only
            (node("amd64", "m5.large", false), false),  // not a GPU instance type
        ];
        for (node, lands) in cases {
            assert_eq!(
                placement(&ds, &node).schedules(),
                lands,
                "{name}: {}",
                node.name
            );
        }
    }
    // accelready on every architecture, with the chart's enabled switch: off.
    let dir = tempfile::tempdir().unwrap();
    let always = dir.path().join("always.toml");
    let agent_values = |policy: String| {
        std::fs::write(&always, policy).unwrap();
        accelready(&[
            "render",
            always.to_str().unwrap(),
            "--format",
            "agent-values",
        ])
    };
    let output = agent_values(format!("{BOTH_BUNDLES}[hostengine]\nrun = \"always\"\n"));
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let values: Values = serde_yaml::from_str(&text).unwrap();
    assert_eq!(values.dcgm_agent.unwrap().enabled, Some(false));
    assert_eq!(values.node_agent.unwrap()["dcgmAddress"], "localhost:5555");
    assert!(
        text.contains("Fits chart versions v1.7.1 – v1.7.x"),
        "{text}"
    );
    assert!(text.contains("cluster-wide"), "{text}");
    // With an agent whose chart lacks it: the affinity form keeps it off all of accelready's nodes.
    let output = agent_values(format!(
        "{BOTH_BUNDLES}[hostengine]\nrun = \"always\"\n[agent]\nversion = \"1.7.0\"\n"
    ));
    let values: Values = serde_yaml::from_str(&stdout(&output)).unwrap();
    let ds = dcgm_server(&values);
    assert!(!placement(&ds, &node("amd64", "g5.xlarge", true)).schedules());
    assert!(placement(&ds, &node("amd64", "g5.xlarge", false)).schedules());
    // [hostengine] wants every architecture, but only aarch64 has DCGM to
    // run: amd64 nodes, labelled or not, keep the chart's engine.
    let output = agent_values(format!("{ARM_BUNDLE}[hostengine]\nrun = \"always\"\n"));
    assert!(output.status.success(), "{}", stderr(&output));
    let values: Values = serde_yaml::from_str(&stdout(&output)).unwrap();
    assert!(values.node_agent.is_none(), "{}", stdout(&output));
    let ds = dcgm_server(&values);
    assert!(placement(&ds, &node("amd64", "g5.xlarge", true)).schedules());
    assert!(placement(&ds, &node("amd64", "g5.xlarge", false)).schedules());
    assert!(!placement(&ds, &node("arm64", "g5g.xlarge", true)).schedules());
    assert!(
        !stderr(&output).contains("runs accelready's engine on x86_64"),
        "{}",
        stderr(&output)
    );
    // A DCGM-3-era agent gets no values: exit 2 and why.
    let output = agent_values("[agent]\nversion = \"1.2.0\"\n".to_owned());
    assert_eq!(output.status.code(), Some(2));
    assert!(stdout(&output).is_empty());
    assert!(
        stderr(&output).contains("upgrade the agent to v1.7.2 or later"),
        "{}",
        stderr(&output)
    );
    // Gzip is for user-data only.
    let output = accelready(&["render", "--format", "agent-values", "--gzip"]);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn explain_and_warnings_follow_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.toml");
    let arm64_pool = std::fs::read_to_string(repo().join("userdata/g5g-incident.toml")).unwrap();
    // The incident's pool with an agent that has PR #269 and no engine.
    // (The example spells out its [hostengine] section.)
    assert!(arm64_pool.contains("run = \"auto\""));
    std::fs::write(
        &policy,
        arm64_pool.replace("run = \"auto\"", "run = \"never\""),
    )
    .unwrap();
    let output = accelready(&["render", policy.to_str().unwrap(), "--explain"]);
    let text = stdout(&output);
    assert!(text.contains("aarch64 GPU nodes: no engine"), "{text}");
    assert!(
        text.contains("aarch64 GPU nodes will be replaced about 11 minutes"),
        "{text}"
    );
    assert!(
        stderr(&output).contains("nodes will be replaced"),
        "{}",
        stderr(&output)
    );
    // The incident's own agent, a 2025 build.
    std::fs::write(
        &policy,
        format!("{arm64_pool}\n[agent]\nversion = \"1.2.0\"\n"),
    )
    .unwrap();
    let output = accelready(&["render", policy.to_str().unwrap(), "--strict"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("upgrade the agent; no bundle can fix it"),
        "{}",
        stderr(&output)
    );
    // An unknown agent release is a policy error naming the known ones.
    std::fs::write(&policy, "[agent]\nversion = \"2.0.0\"\n").unwrap();
    let output = accelready(&["render", policy.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("agent.version = \"2.0.0\""),
        "{}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("known: v1.0.0 – v1.5.x"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn dcgm_from_the_image_wants_the_image_pinned_by_digest() {
    let output = accelready(&[
        "render",
        "userdata/private-subnet.toml",
        "--strict",
        "--explain",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    for expected in [
        "DCGM on aarch64: when missing, install the bundle that the image carries at /dcgm/",
        "nothing is downloaded",
        "The image digest now pins DCGM too: bootstrap.image is pinned by sha256:",
        "Warnings: none.",
    ] {
        assert!(text.contains(expected), "missing '{expected}' in:\n{text}");
    }

    // The same policy with a tag instead of the digest.
    let dir = tempfile::tempdir().unwrap();
    let tagged = dir.path().join("tagged.toml");
    let policy = std::fs::read_to_string(repo().join("userdata/private-subnet.toml")).unwrap();
    let (before, after) = policy.split_once("@sha256:").unwrap();
    let rest = after.split_once('"').unwrap().1;
    std::fs::write(&tagged, format!("{before}:0.1.0-dcgm4.6.1\"{rest}")).unwrap();
    let tagged = tagged.to_str().unwrap();
    let output = accelready(&["render", tagged]);
    assert!(output.status.success(), "a warning, not an error");
    assert!(
        stderr(&output).contains("is not pinned by digest"),
        "{}",
        stderr(&output)
    );
    let strict = accelready(&["render", tagged, "--strict"]);
    assert_eq!(strict.status.code(), Some(2));
    assert!(
        stderr(&strict).contains("accelready:0.1.0-dcgm4.6.1' is not pinned by digest"),
        "{}",
        stderr(&strict)
    );
}

#[test]
fn a_policy_file_that_does_not_exist_is_a_usage_error() {
    let output = accelready(&["render", "no/such/policy.toml"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("cannot read policy file 'no/such/policy.toml'"));
}

#[test]
fn golden_paths_are_inside_the_repository() {
    for name in examples() {
        for (golden, _) in golden_args(&name) {
            assert!(Path::new(&golden).starts_with("userdata"), "{golden}");
        }
    }
}
